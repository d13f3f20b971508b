"""The learned adjacency of Garcia & Bruna's few-shot GNN as attention: a
metric score ``MLP(|x_i - x_j|)`` on every edge, a softmax over each node's
incoming edges, and the weighted sum of the neighbours' features, beside the
node's own (the identity operator).
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.nn import MLP
from torch_geometric.nn.dense.linear import Linear

from . import checks
from .attention import AttentionConv


class MetricAttentionConv(AttentionConv):
    r"""The graph convolution of `"Few-Shot Learning with Graph Neural
    Networks" <https://arxiv.org/abs/1711.04043>`_ (Garcia & Bruna, ICLR
    2018): attention whose score is a learned metric of the two ends of an
    edge.

    .. math::
        \alpha_{i,j} = \mathrm{softmax}_{j \in \mathcal{N}(i)}
        \Big(\mathrm{MLP}\big(|\mathbf{x}_i - \mathbf{x}_j|\big)\Big),
        \qquad
        \mathbf{x}^{\prime}_i = \mathbf{\Theta}\Big[\,\mathbf{x}_i \,\Big\Vert\,
        \sum_{j \in \mathcal{N}(i)} \alpha_{i,j} \mathbf{x}_j\Big]

    The adjacency :math:`\tilde{A}_{ij} = \alpha_{i,j}` is learned, and the
    identity is the second operator of the family :math:`\{I, \tilde{A}\}`;
    :math:`\mathbf{\Theta}` mixes the two. The MLP (the authors' stack of 1x1
    convolutions) is Linear, BatchNorm, LeakyReLU for each hidden width, then
    a linear map to one score. A node with no incoming edge gets a zero sum.

    The layer attends along the edges given. A few-shot episode is fully
    connected without self-loops (``graphs.fully_connected(sizes,
    self_loops=False)``): a node reaches itself through the identity alone.
    With ``norm_diagonal`` (the default), BatchNorm's statistics in training
    count each node's pair with itself all the same, a zero difference
    :math:`|\mathbf{x}_i - \mathbf{x}_i|`, because the authors' dense code
    scores the whole N x N matrix of an episode and leaves the diagonal out
    of the softmax only.

    Args:
        in_channels (int): size of each input sample.
        out_channels (int): size of each output sample.
        hidden_channels (list of int): widths of the metric MLP's hidden
            layers (the authors' Omniglot layers use
            ``[2F, 1.5F, F, F]`` for ``F`` input channels).
        dropout (float): dropout after the MLP's first hidden layer, as in
            the authors' last layer. (default: :obj:`0.`)
        negative_slope (float): LeakyReLU slope of the MLP.
            (default: :obj:`0.01`)
        norm_diagonal (bool): count each node's pair with itself in the
            MLP's BatchNorm statistics (see above). (default: :obj:`True`)
        bias (bool): learn an additive bias of :math:`\mathbf{\Theta}`.
            (default: :obj:`True`)
        **kwargs (optional): arguments of :class:`MessagePassing`.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})`, edge
          indices :math:`(2, |\mathcal{E}|)` (source row 0, target row 1)
        - **output:** node features :math:`(|\mathcal{V}|, F_{out})`; with
          ``return_attention_weights``, also ``(edge_index, alpha)`` with
          alpha :math:`(|\mathcal{E}|, 1)` in the order of the edges given.
    """

    def __init__(self, in_channels: int, out_channels: int, hidden_channels: Sequence[int],
                 dropout: float = 0.0, negative_slope: float = 0.01, norm_diagonal: bool = True,
                 bias: bool = True, **kwargs):
        checks.check_kwargs(self, kwargs)
        super().__init__(heads=1, **kwargs)
        if isinstance(hidden_channels, (str, bytes)) or not isinstance(hidden_channels, Iterable):
            raise ValueError(f"{type(self).__name__} needs hidden_channels as a list of widths, one per "
                            f"hidden layer of the metric MLP (e.g. [64, 32]), got {hidden_channels!r}")
        checks.check_sizes(self, in_channels=in_channels, out_channels=out_channels,
                           hidden_channels=list(hidden_channels))
        checks.check_probability(self, "dropout", dropout)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.hidden_channels = list(hidden_channels)
        self.metric_dropout = dropout
        self.negative_slope = negative_slope
        self.norm_diagonal = norm_diagonal

        channels = [in_channels] + self.hidden_channels + [1]
        self.metric = MLP(channels, act="leaky_relu", act_kwargs={"negative_slope": negative_slope},
                          norm="batch_norm", dropout=[dropout] + [0.0] * (len(channels) - 2))
        self.lin = Linear(2 * in_channels, out_channels, bias=bias)
        self.reset_parameters()

    def reset_parameters(self):
        super().reset_parameters()
        self.metric.reset_parameters()
        self.lin.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, return_attention_weights: Optional[bool] = None
                ) -> Union[Tensor, Tuple[Tensor, Tuple[Tensor, Tensor]]]:
        checks.check_features(self, x, self.in_channels)
        checks.check_dtype(self, x, self.lin.weight.dtype)
        num_nodes = x.size(0)

        graph = self.attention_graph(edge_index, (num_nodes, num_nodes))
        out, alpha = self.attend(graph, x.unsqueeze(1), x=x, need_weights=bool(return_attention_weights))

        out = self.lin(torch.cat([x, out.squeeze(1)], dim=-1))  # [num_nodes, out_channels]
        if return_attention_weights:
            return out, graph.attention_weights(alpha)
        return out

    def edge_update(self, x_i: Tensor, x_j: Tensor, index: Tensor, ptr: Optional[Tensor],
                    dim_size: Optional[int]) -> Tensor:
        distance = torch.abs(x_i - x_j)  # [num_edges, in_channels]
        diagonal_rows = dim_size if self.norm_diagonal and self.training else 0
        if self.training and distance.size(0) + diagonal_rows == 1:
            raise ValueError(f"{checks.layer_name(self)} in training mode needs two or more pairs for the "
                             f"BatchNorm of its metric MLP, got one ("
                             f"{distance.size(0)} edge(s) and {diagonal_rows} node(s) paired with itself); "
                             f"call .eval() to score with the running statistics")
        if diagonal_rows:
            # The diagonal's zero differences join the batch for BatchNorm's
            # statistics only; their scores are dropped.
            diagonal = distance.new_zeros(diagonal_rows, distance.size(1))
            score = self.metric(torch.cat([distance, diagonal]))[:distance.size(0)]
        else:
            score = self.metric(distance)  # [num_edges, 1]
        return self.normalize(score, index, ptr, dim_size)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
                f"hidden_channels={self.hidden_channels})")
