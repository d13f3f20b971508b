"""GAT, the graph attentional operator, as an :class:`AttentionConv` with
an additive score, and a drop-in for PyG's :class:`torch_geometric.nn.GATConv`.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter
from torch.nn.parameter import is_lazy
from torch_geometric import EdgeIndex
from torch_geometric.nn.dense.linear import Linear
from torch_geometric.nn.inits import glorot, zeros
from torch_geometric.utils import is_torch_sparse_tensor

from . import checks
from .attention import AttentionConv
from .sparse import sparse_dense_mm

PairTensor = Tuple[Tensor, Optional[Tensor]]
# How add_self_loops may reduce a node's incoming edge features for its loop.
FILL_REDUCTIONS = ("add", "sum", "mean", "min", "max", "mul")


class GATConv(AttentionConv):
    r"""The graph attentional operator from `"Graph Attention Networks"
    <https://arxiv.org/abs/1710.10903>`_ (Veličković et al., ICLR 2018).

    .. math::
        \mathbf{x}^{\prime}_i = \big\Vert_{h=1}^{H} \sum_{j \in \mathcal{N}(i) \cup \{ i \}}
        \alpha^{h}_{i,j}\mathbf{\Theta}^{h}_{s}\mathbf{x}_{j},
        \qquad
        \alpha^{h}_{i,j} = \mathrm{softmax}_j\Big(\mathrm{LeakyReLU}\big(
        \mathbf{a}^{h\top}_{s}\mathbf{\Theta}^{h}_{s}\mathbf{x}_j +
        \mathbf{a}^{h\top}_{d}\mathbf{\Theta}^{h}_{d}\mathbf{x}_i +
        \mathbf{a}^{h\top}_{e}\mathbf{\Theta}^{h}_{e}\mathbf{e}_{j,i}\big)\Big)

    (the edge term only with ``edge_dim``; :math:`\Theta_s = \Theta_d` unless
    ``in_channels`` is a pair). A drop-in for
    :class:`torch_geometric.nn.GATConv` (2.8): the same arguments in the same
    order, ``state_dict`` keys, input forms (``x`` or a bipartite ``(x_src,
    x_dst)``, ``edge_index``, :class:`~torch_geometric.EdgeIndex` or a
    ``torch.sparse`` adjacency, ``edge_attr``, ``size``) and outputs.
    ``x`` may also be a sparse CSR or COO tensor (bag-of-words features),
    which is multiplied sparsely.

    Args:
        in_channels (int or tuple): size of each input sample, ``-1`` to
            infer it, or ``(source, target)`` sizes of a bipartite graph.
        out_channels (int): size of each output sample per head.
        heads (int): number of attention heads. (default: :obj:`1`)
        concat (bool): concatenate the heads if :obj:`True`, else average
            them. (default: :obj:`True`)
        negative_slope (float): LeakyReLU angle of the negative slope.
            (default: :obj:`0.2`)
        dropout (float): dropout probability of the normalised attention
            coefficients. (default: :obj:`0.`)
        add_self_loops (bool): replace existing self-loops by one per node
            (per node present on both sides when bipartite). (default: :obj:`True`)
        edge_dim (int, optional): edge feature size, or ``-1`` to infer it
            on the first call; edge features then enter the score.
            (default: :obj:`None`)
        fill_value (float or Tensor or str): edge features of the added
            self-loops: a value, or how to reduce each node's incoming edge
            features (``"add"``, ``"mean"``, ``"min"``, ``"max"``, ``"mul"``).
            (default: :obj:`"mean"`)
        bias (bool): learn an additive bias. (default: :obj:`True`)
        residual (bool): add a learned linear map of the (target) input.
            (default: :obj:`False`)
        value_dropout (float): dropout of the transformed features that are
            summed (not of those that are scored), as the authors' TensorFlow
            code does; PyG's layer has no such option. (default: :obj:`0.`)
        **kwargs (optional): arguments of :class:`MessagePassing`.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})` or
          :math:`((|\mathcal{V_s}|, F_{s}), (|\mathcal{V_t}|, F_{t}))`
          (``x_dst`` may be ``None`` with ``size``), edge indices
          :math:`(2, |\mathcal{E}|)` or a sparse :math:`(|\mathcal{V_t}|,
          |\mathcal{V_s}|)` adjacency, edge features :math:`(|\mathcal{E}|, D)`
        - **output:** node features :math:`(|\mathcal{V_t}|, H * F_{out})` or
          :math:`(|\mathcal{V_t}|, F_{out})` if :obj:`concat=False`; with
          ``return_attention_weights``, also ``(edge_index, alpha)`` with
          alpha :math:`(|\mathcal{E}|, H)`, self-loops included (a sparse
          adjacency of alpha when one was given).
    """

    deterministic_scores = True  # (see AttentionConv)

    def __init__(self, in_channels: Union[int, Tuple[int, int]], out_channels: int, heads: int = 1,
                 concat: bool = True, negative_slope: float = 0.2, dropout: float = 0.0,
                 add_self_loops: bool = True, edge_dim: Optional[int] = None,
                 fill_value: Union[float, Tensor, str] = "mean", bias: bool = True,
                 residual: bool = False, value_dropout: float = 0.0, **kwargs):
        super().__init__(heads=heads, dropout=dropout, **kwargs)
        if isinstance(in_channels, (tuple, list)) and len(in_channels) != 2:
            raise ValueError(f"{type(self).__name__} needs in_channels as one size or a pair (source, target) "
                             f"of sizes, got {in_channels!r}")
        checks.check_sizes(self, lazy=True, in_channels=in_channels)
        checks.check_sizes(self, out_channels=out_channels)
        if edge_dim is not None:
            checks.check_sizes(self, lazy=True, edge_dim=edge_dim)
        checks.check_probability(self, "value_dropout", value_dropout)
        if isinstance(fill_value, str) and fill_value not in FILL_REDUCTIONS:
            raise ValueError(f"{type(self).__name__} needs fill_value to be a number, a tensor or one of "
                             f"{', '.join(map(repr, FILL_REDUCTIONS))}, got {fill_value!r}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.concat = concat
        self.negative_slope = negative_slope
        self.add_self_loops = add_self_loops
        self.edge_dim = edge_dim
        self.fill_value = fill_value
        self.residual = residual
        self.value_dropout = value_dropout

        # A bipartite layer transforms sources and targets with their own weights.
        self.lin = self.lin_src = self.lin_dst = None
        if isinstance(in_channels, int):
            self.lin = Linear(in_channels, heads * out_channels, bias=False, weight_initializer="glorot")
        else:
            self.lin_src = Linear(in_channels[0], heads * out_channels, bias=False, weight_initializer="glorot")
            self.lin_dst = Linear(in_channels[1], heads * out_channels, bias=False, weight_initializer="glorot")
        self.att_src = Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = Parameter(torch.empty(1, heads, out_channels))
        if edge_dim is not None:
            self.lin_edge = Linear(edge_dim, heads * out_channels, bias=False, weight_initializer="glorot")
            self.att_edge = Parameter(torch.empty(1, heads, out_channels))
        else:
            self.lin_edge = None
            self.register_parameter("att_edge", None)
        total_out_channels = out_channels * (heads if concat else 1)
        if residual:
            target_channels = in_channels if isinstance(in_channels, int) else in_channels[1]
            self.res = Linear(target_channels, total_out_channels, bias=False, weight_initializer="glorot")
        else:
            self.register_parameter("res", None)
        if bias:
            self.bias = Parameter(torch.empty(total_out_channels))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        super().reset_parameters()
        for lin in (self.lin, self.lin_src, self.lin_dst, self.lin_edge, self.res):
            if lin is not None:
                lin.reset_parameters()
        glorot(self.att_src)
        glorot(self.att_dst)
        glorot(self.att_edge)
        zeros(self.bias)

    def forward(self, x: Union[Tensor, PairTensor], edge_index: Tensor, edge_attr: Optional[Tensor] = None,
                size: Optional[Tuple[int, int]] = None, return_attention_weights: Optional[bool] = None):
        H, C = self.heads, self.out_channels
        bipartite = isinstance(x, (tuple, list))
        if bipartite and (len(x) != 2 or not all(t is None or isinstance(t, Tensor) for t in x)):
            raise TypeError(f"{type(self).__name__} expects x to be a tensor or a pair (x_src, x_dst) of "
                            f"tensors, got a {type(x).__name__} of {len(x)} items")
        x_src, x_dst = x if bipartite else (x, None)
        source_channels, target_channels = ((self.in_channels, self.in_channels) if self.lin is not None
                                            else self.in_channels)
        checks.check_features(self, x_src, source_channels, name="x_src" if bipartite else "x")
        checks.check_dtype(self, x_src, self.att_src.dtype, name="x_src" if bipartite else "x")
        if x_dst is not None:
            checks.check_features(self, x_dst, target_channels, name="x_dst")
            checks.check_dtype(self, x_dst, self.att_src.dtype, name="x_dst")

        # Transform the features, sources and targets with their own weights
        # when the layer is bipartite.
        if not bipartite:
            res = None if self.res is None else transform(self.res, x_src)
            if self.lin is not None:
                h_src = h_dst = transform(self.lin, x_src).view(-1, H, C)  # [num_nodes, heads, channels]
            else:
                h_src = transform(self.lin_src, x_src).view(-1, H, C)
                h_dst = transform(self.lin_dst, x_src).view(-1, H, C)
        else:
            res = None if self.res is None or x_dst is None else transform(self.res, x_dst)
            lin_src, lin_dst = (self.lin, self.lin) if self.lin is not None else (self.lin_src, self.lin_dst)
            h_src = transform(lin_src, x_src).view(-1, H, C)
            h_dst = None if x_dst is None else transform(lin_dst, x_dst).view(-1, H, C)

        # Each node's share of the score, as a source and as a target (in
        # one product when both come from the same features).
        if h_dst is h_src:
            alpha_src, alpha_dst = head_dot(h_src, torch.cat([self.att_src, self.att_dst])).unbind(1)
        else:
            alpha_src = head_dot(h_src, self.att_src)[:, 0]  # [num_source_nodes, heads]
            alpha_dst = None if h_dst is None else head_dot(h_dst, self.att_dst)[:, 0]

        size = self.edge_size(edge_index, size, h_src.size(0), num_rows(h_dst) if bipartite else h_src.size(0))
        if alpha_dst is None:
            # Targets without features add nothing to the score; zeros keep
            # the number of targets known to the softmax.
            alpha_dst = alpha_src.new_zeros(size[1], H)
        graph = self.attention_graph(edge_index, size, self.add_self_loops)
        if edge_attr is not None:
            checks.check_tensor(self, edge_attr, "edge_attr")
            if edge_attr.is_floating_point():  # (Integer features are promoted, as in PyG.)
                checks.check_dtype(self, edge_attr, self.att_src.dtype, name="edge_attr")
            if graph.adjacency is not None:
                raise NotImplementedError("GATConv takes edge_attr with an edge_index tensor, "
                                          "not with a sparse adjacency")
            checks.check_edge_features(self, edge_attr, edge_index.size(1),
                                       None if self.edge_dim == -1 else self.edge_dim)
            if self.lin_edge is None:
                edge_attr = None  # As PyG's layer does, edge features without edge_dim are ignored.
        edge_attr = graph.edge_features(edge_attr, self.fill_value)

        value = F.dropout(h_src, p=self.value_dropout, training=self.training) if self.value_dropout else h_src
        out, alpha = self.attend(graph, value, edge_attr=edge_attr, alpha=(alpha_src, alpha_dst),
                                 need_weights=bool(return_attention_weights))

        out = out.reshape(-1, H * C) if self.concat else out.mean(dim=1)
        if res is not None:
            out = out + res
        if self.bias is not None:
            out = out + self.bias
        if return_attention_weights:
            return out, graph.attention_weights(alpha)
        return out

    def edge_size(self, edge_index, size, num_sources: int, num_targets: Optional[int]) -> Tuple[int, int]:
        """``(num_sources, num_targets)`` from the features, ``size`` and a sparse adjacency's shape."""
        if is_torch_sparse_tensor(edge_index) and num_targets is None and size is None:
            size = (edge_index.size(1), edge_index.size(0))
        elif isinstance(edge_index, EdgeIndex) and size is None and None not in edge_index.sparse_size():
            size = edge_index.sparse_size()
        return checks.check_size(self, size, (num_sources, num_targets))

    def edge_update(self, alpha_j: Tensor, alpha_i: Tensor, edge_attr: Optional[Tensor], index: Tensor,
                    ptr: Optional[Tensor], dim_size: Optional[int]) -> Tensor:
        # The additive score: each end's share, plus the edge's when it has features.
        score = alpha_j + alpha_i  # [num_edges, heads]
        if edge_attr is not None and self.lin_edge is not None and score.size(0) > 0:
            if edge_attr.dim() == 1:
                edge_attr = edge_attr.view(-1, 1)
            edge_attr = self.lin_edge(edge_attr).view(-1, self.heads, self.out_channels)
            score = score + (edge_attr * self.att_edge).sum(dim=-1)
        score = F.leaky_relu(score, self.negative_slope)
        return self.normalize(score, index, ptr, dim_size)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


def transform(lin: Linear, x: Tensor) -> Tensor:
    """``lin(x)`` (no bias), multiplying only the non-zeros of a sparse ``x``."""
    if x.layout == torch.strided:
        return lin(x)
    if is_lazy(lin.weight):  # Lazy (-1): what lin(x) would do first.
        lin.initialize_parameters(lin, (x,))
    return sparse_dense_mm(x, lin.weight.t())


def head_dot(h: Tensor, att: Tensor) -> Tensor:
    """``(h * att[k]).sum(-1)`` for each of the ``k`` vectors of ``att``
    ``[k, heads, channels]`` and nodes ``h`` ``[num_nodes, heads, channels]``:
    ``[num_nodes, k, heads]``. Computed as one matrix product with a
    block-diagonal ``[heads * channels, k * heads]`` matrix, which on CPU is
    faster, forward and backward, than the broadcast products."""
    k, heads, channels = att.shape
    eye = torch.eye(heads, dtype=att.dtype, device=att.device)
    blocks = (att.permute(1, 2, 0).unsqueeze(-1) * eye.view(heads, 1, 1, heads)).reshape(heads * channels, k * heads)
    return (h.reshape(-1, heads * channels) @ blocks).view(-1, k, heads)


def num_rows(x: Optional[Tensor]) -> Optional[int]:
    return None if x is None else x.size(0)

