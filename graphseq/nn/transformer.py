"""The Transformer encoder layer on graphs: self-attention as message passing
(:class:`SelfAttentionConv`) followed by a node-wise feed-forward network,
each wrapped in a residual connection and layer normalisation. On fully
connected graphs it is :class:`torch.nn.TransformerEncoderLayer`; on any other
graph the attention runs along its edges. It is the block that BERT-style
encoders stack.
"""
from __future__ import annotations

from typing import Callable, Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from . import checks
from .self_attention import SelfAttentionConv

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


class TransformerEncoderLayer(torch.nn.Module):
    r"""The Transformer encoder layer from `"Attention Is All You Need"
    <https://arxiv.org/abs/1706.03762>`_ (Vaswani et al., NeurIPS 2017),
    with the attention along a graph.

    .. math::
        \mathbf{h} = \mathrm{LN}_1\big(\mathbf{x} + \mathrm{Attn}(\mathbf{x})\big),
        \qquad
        \mathbf{x}^{\prime} = \mathrm{LN}_2\big(\mathbf{h} +
        \mathbf{W}_2\,\sigma(\mathbf{W}_1 \mathbf{h} + \mathbf{b}_1) + \mathbf{b}_2\big)

    (post-norm, the paper's order), or with ``norm_first`` (pre-norm, as in
    GPT-2 and most later models):

    .. math::
        \mathbf{h} = \mathbf{x} + \mathrm{Attn}(\mathrm{LN}_1(\mathbf{x})),
        \qquad
        \mathbf{x}^{\prime} = \mathbf{h} + \mathrm{FF}(\mathrm{LN}_2(\mathbf{h}))

    where :math:`\mathrm{Attn}` is :class:`SelfAttentionConv` over every node
    of each graph of ``batch`` (no ``edge_index``) or over each node's
    in-neighbours (``edge_index``), and dropout follows the attention, the
    activation and the feed-forward output. Its ``state_dict`` is that of
    ``torch.nn.TransformerEncoderLayer(..., batch_first=True)``
    (``self_attn.*``, ``linear1``, ``linear2``, ``norm1``, ``norm2``).

    Args:
        d_model (int): size of each node's features.
        nhead (int): number of attention heads.
        dim_feedforward (int): hidden size of the feed-forward network.
            (default: :obj:`2048`)
        dropout (float): dropout probability of the attention coefficients
            and after the attention, the activation and the feed-forward
            network. (default: :obj:`0.1`)
        activation (str or callable): ``"relu"``, ``"gelu"`` or a function of
            one tensor. (default: :obj:`"relu"`)
        layer_norm_eps (float): the layer norms' epsilon. (default: :obj:`1e-5`)
        batch_first (bool): accepted and ignored, so that
            :class:`torch.nn.TransformerEncoderLayer`'s arguments (positional
            ones too) mean the same here: nodes are the rows of ``x``, with no
            batch or sequence dimension. (default: :obj:`False`)
        norm_first (bool): normalise before the attention and the feed-forward
            network instead of after the residual sums. (default: :obj:`False`)
        bias (bool): learn biases in the linear layers and layer norms.
            (default: :obj:`True`)
        device, dtype: where and in which precision to create the parameters.
            (default: :obj:`None`)

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, d)`, optional edge
          indices :math:`(2, |\mathcal{E}|)`, optional sorted batch vector
          :math:`(|\mathcal{V}|)`
        - **output:** node features :math:`(|\mathcal{V}|, d)`
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: Union[str, Callable[[Tensor], Tensor]] = "relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__()
        # Checked here, in this layer's names, before SelfAttentionConv would
        # check them in its own (embed_dim, num_heads).
        checks.check_sizes(self, d_model=d_model, nhead=nhead, dim_feedforward=dim_feedforward)
        checks.check_probability(self, "dropout", dropout)
        if d_model % nhead != 0:
            raise ValueError(f"{checks.layer_name(self)} needs d_model ({d_model}) to be divisible by "
                             f"nhead ({nhead})")
        if not callable(activation) and activation not in ACTIVATIONS:
            raise ValueError(f"{checks.layer_name(self)} needs activation {' or '.join(map(repr, ACTIVATIONS))} "
                             f"or a function, got {activation!r}")
        self.d_model = d_model
        self.nhead = nhead
        self.dim_feedforward = dim_feedforward
        self.dropout_p = dropout
        self.activation = activation if callable(activation) else ACTIVATIONS[activation]
        self.norm_first = norm_first

        self.self_attn = SelfAttentionConv(d_model, nhead, dropout=dropout, bias=bias)
        self.linear1 = torch.nn.Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = torch.nn.Dropout(dropout)
        self.linear2 = torch.nn.Linear(dim_feedforward, d_model, bias=bias)
        self.norm1 = torch.nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = torch.nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = torch.nn.Dropout(dropout)
        self.dropout2 = torch.nn.Dropout(dropout)
        self.reset_parameters()
        self.to(device=device, dtype=dtype)

    def reset_parameters(self):
        self.self_attn.reset_parameters()
        for module in (self.linear1, self.linear2, self.norm1, self.norm2):
            module.reset_parameters()

    def forward(self, x: Tensor, edge_index: Optional[Tensor] = None,
                batch: Optional[Tensor] = None) -> Tensor:
        checks.check_features(self, x, self.d_model)
        checks.check_dtype(self, x, self.linear1.weight.dtype)
        if self.norm_first:
            x = x + self.attention_block(self.norm1(x), edge_index, batch)
            x = x + self.feed_forward_block(self.norm2(x))
        else:
            x = self.norm1(x + self.attention_block(x, edge_index, batch))
            x = self.norm2(x + self.feed_forward_block(x))
        return x

    def attention_block(self, x: Tensor, edge_index: Optional[Tensor], batch: Optional[Tensor]) -> Tensor:
        return self.dropout1(self.self_attn(x, edge_index, batch))

    def feed_forward_block(self, x: Tensor) -> Tensor:
        hidden = self.dropout(self.activation(self.linear1(x)))  # [num_nodes, dim_feedforward]
        return self.dropout2(self.linear2(hidden))

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.d_model}, nhead={self.nhead}, "
                f"dim_feedforward={self.dim_feedforward}, norm_first={self.norm_first})")
