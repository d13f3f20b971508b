"""Attention as message passing. Every attention layer here does the same
three things along the edges of a graph: score each edge ``j -> i``, take a
softmax over the scores of each target's incoming edges, and sum the values
of the sources weighted by that softmax. Only the score differs: GAT's is
additive, ``LeakyReLU(a_s . W x_j + a_d . W x_i)``; the Transformer's is the
scaled dot product ``q_i . k_j / sqrt(d)``. Only the graph differs too: a
node's neighbours for GAT, every node of its graph for self-attention.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.dense.linear import Linear
from torch_geometric.nn.inits import glorot, zeros
from torch_geometric.utils import add_self_loops, remove_self_loops, softmax


def check_node_features(x: Tensor, channels: int, layer: str) -> None:
    if x.dim() != 2:
        raise ValueError(f"{layer} expects node features of shape [num_nodes, {channels}], "
                         f"got a tensor of shape {list(x.shape)}")
    if x.size(1) != channels:
        raise ValueError(f"{layer} expects {channels} input channels, got x of shape {list(x.shape)}")


def check_edge_index(edge_index: Tensor, num_nodes: int, layer: str) -> None:
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"{layer} expects edge_index of shape [2, num_edges], "
                         f"got {list(edge_index.shape)}")
    if edge_index.numel() and int(edge_index.max()) >= num_nodes:
        raise ValueError(f"{layer}: edge_index refers to node {int(edge_index.max())}, "
                         f"but x has only {num_nodes} nodes")


class AttentionConv(MessagePassing):
    r"""The machinery shared by every attention layer: given a score for each
    edge, normalise it over each target's incoming edges and aggregate.

    .. math::
        \alpha_{ij} = \frac{\exp(e_{ij})}{\sum_{k \in \mathcal{N}(i)} \exp(e_{ik})},
        \qquad \mathbf{h}_i = \sum_{j \in \mathcal{N}(i)} \alpha_{ij} \mathbf{v}_j

    Subclasses compute the score :math:`e_{ij}` and the values and call
    :meth:`attend`. A node with no incoming edge receives a zero vector.

    Args:
        heads (int): number of attention heads.
        dropout (float): dropout probability of the normalised attention
            coefficients during training. (default: :obj:`0.`)
    """

    def __init__(self, heads: int, dropout: float = 0.0, **kwargs):
        kwargs.setdefault("aggr", "add")
        super().__init__(node_dim=0, **kwargs)
        self.heads = heads
        self.dropout = dropout

    def attend(self, edge_index: Tensor, value: Tensor, score: Tensor,
               num_nodes: int) -> Tuple[Tensor, Tensor]:
        """Softmax of ``score`` ``[num_edges, heads]`` over each target's edges,
        then the weighted sum of ``value`` ``[num_nodes, heads, channels]``.
        Returns the aggregated ``[num_nodes, heads, channels]`` and the
        attention coefficients ``[num_edges, heads]``."""
        alpha = softmax(score, edge_index[1], num_nodes=num_nodes)
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)
        out = self.propagate(edge_index, value=value, alpha=alpha, size=(value.size(0), num_nodes))
        return out, alpha

    def message(self, value_j: Tensor, alpha: Tensor) -> Tensor:
        return value_j * alpha.unsqueeze(-1)  # [num_edges, heads, channels]


class GATConv(AttentionConv):
    r"""The graph attentional operator from `"Graph Attention Networks"
    <https://arxiv.org/abs/1710.10903>`_ (Veličković et al., ICLR 2018).

    .. math::
        \mathbf{x}^{\prime}_i = \big\Vert_{h=1}^{H} \sum_{j \in \mathcal{N}(i) \cup \{ i \}}
        \alpha^{h}_{i,j}\mathbf{\Theta}^{h}\mathbf{x}_{j},
        \qquad
        \alpha^{h}_{i,j} = \mathrm{softmax}_j\Big(\mathrm{LeakyReLU}\big(
        \mathbf{a}^{h\top}_{s}\mathbf{\Theta}^{h}\mathbf{x}_j +
        \mathbf{a}^{h\top}_{d}\mathbf{\Theta}^{h}\mathbf{x}_i\big)\Big)

    A drop-in for :class:`torch_geometric.nn.GATConv` with the options below:
    the same arguments, ``state_dict`` keys and outputs. ``x`` may also be a
    sparse COO tensor (bag-of-words features), which is multiplied sparsely.

    Args:
        in_channels (int): size of each input sample.
        out_channels (int): size of each output sample per head.
        heads (int): number of attention heads. (default: :obj:`1`)
        concat (bool): concatenate the heads if :obj:`True`, else average
            them. (default: :obj:`True`)
        negative_slope (float): LeakyReLU angle of the negative slope.
            (default: :obj:`0.2`)
        dropout (float): dropout probability of the normalised attention
            coefficients. (default: :obj:`0.`)
        add_self_loops (bool): add a self-loop to every node (after removing
            existing ones). (default: :obj:`True`)
        bias (bool): learn an additive bias. (default: :obj:`True`)

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})`, edge
          indices :math:`(2, |\mathcal{E}|)`
        - **output:** node features :math:`(|\mathcal{V}|, H * F_{out})` or
          :math:`(|\mathcal{V}|, F_{out})` if :obj:`concat=False`; with
          ``return_attention_weights``, also ``(edge_index, alpha)`` with
          alpha :math:`(|\mathcal{E}|, H)`, self-loops included.
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, dropout: float = 0.0, add_self_loops: bool = True,
                 bias: bool = True, **kwargs):
        super().__init__(heads=heads, dropout=dropout, **kwargs)
        if not isinstance(in_channels, int):
            raise TypeError("graphseq.nn.GATConv takes an int in_channels (bipartite inputs are not supported)")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.concat = concat
        self.negative_slope = negative_slope
        self.add_self_loops = add_self_loops

        self.lin = Linear(in_channels, heads * out_channels, bias=False, weight_initializer="glorot")
        self.att_src = Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = Parameter(torch.empty(1, heads, out_channels))
        if bias:
            self.bias = Parameter(torch.empty(heads * out_channels if concat else out_channels))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        super().reset_parameters()
        self.lin.reset_parameters()
        glorot(self.att_src)
        glorot(self.att_dst)
        zeros(self.bias)

    def forward(self, x: Tensor, edge_index: Tensor,
                return_attention_weights: Optional[bool] = None
                ) -> Union[Tensor, Tuple[Tensor, Tuple[Tensor, Tensor]]]:
        H, C = self.heads, self.out_channels
        check_node_features(x, self.in_channels, "GATConv")
        num_nodes = x.size(0)
        check_edge_index(edge_index, num_nodes, "GATConv")

        if x.is_sparse:  # Multiply only the non-zero features.
            h = torch.sparse.mm(x, self.lin.weight.t()).view(-1, H, C)
        else:
            h = self.lin(x).view(-1, H, C)  # [num_nodes, heads, channels]
        alpha_src = (h * self.att_src).sum(dim=-1)  # [num_nodes, heads]
        alpha_dst = (h * self.att_dst).sum(dim=-1)

        if self.add_self_loops:
            edge_index, _ = remove_self_loops(edge_index)
            edge_index, _ = add_self_loops(edge_index, num_nodes=num_nodes)

        source, target = edge_index
        score = F.leaky_relu(alpha_src[source] + alpha_dst[target], self.negative_slope)  # [num_edges, heads]
        out, alpha = self.attend(edge_index, h, score, num_nodes)

        out = out.reshape(-1, H * C) if self.concat else out.mean(dim=1)
        if self.bias is not None:
            out = out + self.bias
        if return_attention_weights:
            return out, (edge_index, alpha)
        return out

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"
