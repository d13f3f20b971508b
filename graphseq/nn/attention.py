r"""Attention as message passing. Every attention layer here does the same
three things along the edges of a graph: score each edge ``j -> i``
(:meth:`edge_update`, run through :meth:`edge_updater`), take a softmax over
the scores of each target's incoming edges, and sum the values of the sources
weighted by that softmax (:meth:`message`, run through :meth:`propagate`).
Only the score differs: GAT's is additive, ``LeakyReLU(a_s . W x_j + a_d . W
x_i)``; the Transformer's is the scaled dot product ``q_i . k_j / sqrt(d)``.
Only the graph differs too: a node's neighbours for GAT, every node of its
graph for self-attention.

Each layer runs one of two paths with the same numbers. The message path is
PyG's: ``message`` makes every edge's message in the user's edge order, so
hooks, :mod:`torch_geometric.explain` and ``decomposed_layers`` see and
change them. When nothing looks at the edges (no propagate, message,
aggregate or edge_update hook, no explanation, no decomposition, not
compiling or tracing) and torch's sparse CPU kernels serve the dtype, the
fused path groups the edges by target once per graph (kept while the
same ``edge_index`` comes back) and fuses ``message`` and the sum into
sparse products (:mod:`graphseq.nn.sparse`); attention weights and
dropout still follow the user's edge order.
"""
from __future__ import annotations

import inspect
import math
import weakref
from typing import Mapping, Optional, Tuple, Union

import torch
import torch.nn.attention
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter
from torch.nn.parameter import is_lazy
from torch_geometric import EdgeIndex, Index
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.dense.linear import Linear
from torch_geometric.nn.inits import glorot, zeros
from torch_geometric.utils import (add_self_loops, is_torch_sparse_tensor, remove_self_loops, scatter, softmax,
                                   to_edge_index)
from torch_geometric.utils.sparse import set_sparse_value

from .. import graphs
from . import checks, compat
from .sparse import EdgePattern, SampledDot, SparseAggregate, fused_kernels_apply, segment_softmax, sparse_dense_mm

PairTensor = Tuple[Tensor, Optional[Tensor]]
# How add_self_loops may reduce a node's incoming edge features for its loop.
FILL_REDUCTIONS = ("add", "sum", "mean", "min", "max", "mul")


class AttentionGraph:
    """The edges one attention call runs over.

    ``edge_index`` holds them in the user's order: the given edges (without
    their self-loops when loops are added) followed by one loop per node, as
    :func:`torch_geometric.utils.add_self_loops` makes them. :meth:`by_target`
    gives the same edges grouped by target for the fused path, made on first
    use and kept with the graph.

    Args:
        edge_index (Tensor): ``[2, num_edges]`` source and target of each edge.
        size (tuple): ``(num_sources, num_targets)``.
        adjacency (Tensor, optional): the sparse adjacency the edges came
            from (rows = targets); attention weights are returned in it.
        kept (Tensor, optional): the given edges that remain (loops
            removed), as indices or as a boolean mask, to carry edge
            features along.
        num_loops (int): how many self-loops were appended.
    """

    def __init__(self, edge_index: Tensor, size: Tuple[int, int], adjacency: Optional[Tensor] = None,
                 kept: Optional[Tensor] = None, num_loops: int = 0):
        self.edge_index = edge_index
        self.size = size
        self.adjacency = adjacency
        self.kept = kept
        self.num_loops = num_loops
        self._by_target: Optional[Tuple[EdgeIndex, Optional[Tensor]]] = None
        self._inverse: Optional[Tensor] = None

    @property
    def num_edges(self) -> int:
        return self.edge_index.size(1)

    def by_target(self) -> Tuple[EdgeIndex, Optional[Tensor]]:
        """The edges sorted by target (stably) as an :class:`EdgeIndex` that
        carries its :class:`EdgePattern`, and the permutation from the user's
        order (``None`` when the edges were sorted already)."""
        if self._by_target is None:
            edges, perm = graphs.sort_by_target(self.edge_index, self.size[1])
            edges = EdgeIndex(edges.contiguous(), sparse_size=self.size, sort_order="col")
            (ptr, source), _ = edges.get_csc()
            edges.pattern = EdgePattern(ptr, source, self.size[0])
            self._by_target = (edges, perm)
        return self._by_target

    def to_user_order(self, values: Tensor) -> Tensor:
        """Edge values in the order of :meth:`by_target` back in the user's order."""
        _, perm = self.by_target()
        if perm is None:
            return values
        if self._inverse is None:
            self._inverse = torch.empty_like(perm)
            self._inverse[perm] = torch.arange(perm.numel(), device=perm.device)
        return values.index_select(0, self._inverse)

    def edge_features(self, edge_attr: Optional[Tensor], fill_value) -> Optional[Tensor]:
        """``edge_attr`` of the given edges, for the edges of this graph: the
        rows of removed self-loops dropped and those of the added loops made
        from ``fill_value`` as :func:`~torch_geometric.utils.add_self_loops` does."""
        if edge_attr is None or self.kept is None:
            return edge_attr
        edge_attr = edge_attr[self.kept] if self.kept.dtype == torch.bool else edge_attr.index_select(0, self.kept)
        without_loops = self.edge_index[:, :self.num_edges - self.num_loops]
        if isinstance(fill_value, str):
            # Reduced over every target, loops or not (a bipartite graph has
            # targets past the looped ones), then the looped ones kept.
            loop_attr = scatter(edge_attr, without_loops[1], 0, dim_size=self.size[1], reduce=fill_value)
            return torch.cat([edge_attr, loop_attr[:self.num_loops]])
        _, edge_attr = add_self_loops(without_loops, edge_attr, fill_value=fill_value,
                                      num_nodes=self.num_loops)
        return edge_attr

    def attention_weights(self, alpha: Tensor):
        """What ``return_attention_weights`` gives, as PyG's layers do:
        ``(edge_index, alpha)``, or ``(adjacency, alpha)`` with the sparse
        adjacency holding ``alpha`` when one was given."""
        if self.adjacency is not None:
            return set_sparse_value(self.adjacency, alpha), alpha
        return self.edge_index, alpha


class AttentionConv(MessagePassing):
    r"""The machinery shared by every attention layer: given a score for each
    edge, normalise it over each target's incoming edges and aggregate.

    .. math::
        \alpha_{ij} = \frac{\exp(e_{ij})}{\sum_{k \in \mathcal{N}(i)} \exp(e_{ik})},
        \qquad \mathbf{h}_i = \sum_{j \in \mathcal{N}(i)} \alpha_{ij} \mathbf{v}_j

    A subclass gives the score :math:`e_{ij}` in :meth:`edge_update`, which
    takes the tensors it needs (``x_i``/``x_j`` suffixes gather them per edge,
    as in PyG, or :meth:`edge_ends` gives the indices to gather with) and
    ends in ``return self.normalize(score, index, ptr, num_targets)``; its
    ``forward`` prepares values and score inputs and calls :meth:`attend`.
    GAT's additive score and the Transformer's dot product are two such
    subclasses; a third score is a third ``edge_update``, for instance a
    learned metric of the two ends::

        class AbsDiffAttention(AttentionConv):
            def __init__(self, channels, heads=1):
                super().__init__(heads)
                self.metric = torch.nn.Linear(channels, heads)

            def forward(self, x, edge_index):
                graph = self.attention_graph(edge_index, (x.size(0), x.size(0)))
                value = x.unsqueeze(1).expand(-1, self.heads, -1)  # [num_nodes, heads, channels]
                out, _ = self.attend(graph, value, x=x)
                return out.mean(dim=1)

            def edge_update(self, x_i, x_j, index, ptr, dim_size):
                score = self.metric((x_i - x_j).abs())  # [num_edges, heads]
                return self.normalize(score, index, ptr, dim_size)

    A score that also reads a tensor of one row per edge (a learned bias
    per edge, say) passes it in ``edge_inputs``, so that it follows the
    edges when the fused path groups them by target:
    ``self.attend(graph, value, x=x, edge_inputs={"edge_bias": edge_bias})``
    and ``edge_update(self, x_i, x_j, edge_bias, index, ptr, dim_size)``.
    (``edge_attr`` is such an input already.)

    A node with no incoming edge receives a zero vector.

    Args:
        heads (int): number of attention heads.
        dropout (float): dropout probability of the normalised attention
            coefficients during training. (default: :obj:`0.`)
        **kwargs (optional): arguments of
            :class:`torch_geometric.nn.conv.MessagePassing` (``aggr`` must stay
            ``"add"``).
    """

    SUPPORTS_FUSED_EDGE_INDEX = True

    def __init__(self, heads: int, dropout: float = 0.0, **kwargs):
        # Not node_dim: nodes are always the rows (node_dim=0), as in PyG's
        # GATConv, which refuses it too.
        checks.check_kwargs(self, kwargs, allowed=[k for k in checks.MESSAGE_PASSING_KWARGS if k != "node_dim"])
        if kwargs.setdefault("aggr", "add") not in ("add", "sum"):
            raise ValueError(f"{type(self).__name__} sums the attention-weighted values "
                             f"(aggr='add'), got aggr={kwargs['aggr']!r}")
        if kwargs.get("flow", "source_to_target") != "source_to_target":
            raise ValueError(f"{type(self).__name__} supports flow='source_to_target' only")
        super().__init__(node_dim=0, **kwargs)
        checks.check_sizes(self, heads=heads)
        checks.check_probability(self, "dropout", dropout)
        self.heads = heads
        self.dropout = dropout
        self._graph_cache = None

    def __getstate__(self):
        state = super().__getstate__()
        state["_graph_cache"] = None  # Made again after loading; its weak reference cannot be pickled.
        return state

    def attention_graph(self, edge_index: Tensor, size: Tuple[int, int], self_loops: bool = False,
                        num_loops: Optional[int] = None) -> AttentionGraph:
        """The edges to attend along, from an ``edge_index`` tensor, an
        :class:`EdgeIndex` or a sparse adjacency (rows = targets), with every
        self-loop replaced by one per node (the first ``num_loops`` nodes)
        when ``self_loops``. The result is kept for as long as the same,
        unmodified ``edge_index`` comes back (edits that autograd does not
        count, through ``.data`` or a shared NumPy array, are not seen: pass
        a new tensor after those).

        Under :func:`torch.compile` and :func:`torch.jit.trace`, an
        ``edge_index`` tensor's graph is made inside the compiled (traced)
        code on every call and never kept, so that it follows the graph
        given: a kept graph would be a constant of the trace. A sparse
        adjacency or an :class:`EdgeIndex` is still made (and kept) as
        ordinary Python, between the compiled parts.
        """
        num_loops = fewer_nodes(size) if num_loops is None else num_loops
        if (not (torch.compiler.is_compiling() or torch.jit.is_tracing()) or not isinstance(edge_index, Tensor)
                or isinstance(edge_index, EdgeIndex) or is_torch_sparse_tensor(edge_index)):
            return self._kept_graph(edge_index, size, self_loops, num_loops)
        checks.check_edge_index(self, edge_index, size)
        if not self_loops:
            return AttentionGraph(edge_index, size)
        # One selection whose size depends on the data, made last: compiled
        # with fullgraph=False, the graph breaks there as PyG's GATConv does
        # at remove_self_loops (two breaks), and the sizes that follow are
        # one count, not two the compiler would have to reconcile.
        kept = edge_index[0] != edge_index[1]
        loops = torch.arange(num_loops, device=edge_index.device).expand(2, -1)
        selected = torch.cat([kept, kept.new_ones(loops.size(1))])
        edge_index = torch.cat([edge_index, loops], dim=1)[:, selected]
        if torch.compiler.is_compiling():
            # The count is the data's, but the loops are all there: tells the
            # compiler that a graph with loops is never empty.
            compat.assume(edge_index.size(1) >= num_loops)
        return AttentionGraph(edge_index, size, kept=kept, num_loops=num_loops)

    @torch.compiler.disable
    def _kept_graph(self, edge_index: Tensor, size: Tuple[int, int], self_loops: bool,
                    num_loops: int) -> AttentionGraph:
        """:meth:`attention_graph` through the cache of the last graph made.
        :func:`torch.compile` leaves it out of its graphs (it reads the
        cache's weak reference and stamp), so it runs as ordinary Python."""
        if is_torch_sparse_tensor(edge_index):
            return self._sparse_graph(edge_index, size, self_loops, num_loops)
        if isinstance(edge_index, EdgeIndex):
            edge_index = edge_index.as_tensor()
        if not isinstance(edge_index, Tensor):  # a list, say: named before the cache reads it
            checks.check_edge_index(self, edge_index, size)
        # Nothing is kept while tracing, where the graph would be a constant of the trace.
        key = (None if torch.jit.is_tracing() else checks.kept_stamp(edge_index), size, self_loops, num_loops)
        cache = self._graph_cache
        if cache is not None and key[0] is not None and cache[0]() is edge_index and cache[1] == key:
            return cache[2]  # Checked when it was made.
        checks.check_edge_index(self, edge_index, size)
        graph = self._make_graph(edge_index, size, self_loops, num_loops)
        self._graph_cache = None if key[0] is None else (weakref.ref(edge_index), key, graph)
        return graph

    @staticmethod
    def _make_graph(edge_index: Tensor, size: Tuple[int, int], self_loops: bool,
                    num_loops: int) -> AttentionGraph:
        if not self_loops:
            return AttentionGraph(edge_index, size)
        kept = (edge_index[0] != edge_index[1]).nonzero().view(-1)
        edge_index = graphs.with_self_loops(edge_index, num_loops)
        return AttentionGraph(edge_index, size, kept=kept, num_loops=num_loops)

    def _sparse_graph(self, adj: Tensor, size: Tuple[int, int], self_loops: bool,
                      num_loops: int) -> AttentionGraph:
        name = type(self).__name__
        if adj.dim() != 2 or tuple(adj.shape) != (size[1], size[0]):
            raise ValueError(f"{name} expects a sparse adjacency of shape [num_targets, num_sources] "
                             f"= [{size[1]}, {size[0]}] (the transposed adjacency, as PyG takes it), "
                             f"got {list(adj.shape)}")
        if self_loops:
            if adj.layout == torch.sparse_csc:  # PyG's loop helpers take CSR and COO.
                adj = adj.to_sparse_csr()
            adj, _ = remove_self_loops(adj)
            adj, _ = add_self_loops(adj, num_nodes=num_loops)
        (target, source), _ = to_edge_index(adj)
        return AttentionGraph(torch.stack([source, target]), size, adjacency=adj)

    def edges_observed(self) -> bool:
        """Whether anything looks at the edges one by one in the user's order:
        an explainer, a decomposition, or any propagate, message, aggregate
        or edge_update hook."""
        return compat.edges_observed(self)

    def use_fused_path(self, value: Tensor, graph: AttentionGraph) -> bool:
        """Whether the fused sparse path may run: nothing observes the edges,
        we are not compiling or tracing (:func:`torch.jit.trace` records
        tensor inputs only, and the sparse products take the edges' pattern)
        nor under a torch.func transform or autocast (which picks each op's
        precision), and the kernels serve ``value``'s device and dtype."""
        # Compiling and tracing first: the number of edges may be one the
        # compiler cannot compare with 0 (it depends on the data).
        return (not torch.compiler.is_compiling() and not torch.jit.is_tracing()
                and fused_kernels_apply(value) and graph.num_edges > 0 and not self.edges_observed()
                and not torch.is_autocast_enabled(value.device.type) and compat.plain_autograd())

    def attend(self, graph: AttentionGraph, value: Tensor, edge_attr: Optional[Tensor] = None,
               need_weights: bool = False, edge_inputs: Optional[Mapping[str, Tensor]] = None,
               **score_inputs) -> Tuple[Tensor, Optional[Tensor]]:
        """Scores (:meth:`edge_update` on ``score_inputs``, ``edge_inputs``
        and ``edge_attr``), softmax, dropout, then the weighted sum of
        ``value`` ``[num_sources, heads, channels]`` into each target. Returns
        ``[num_targets, heads, channels]`` and, if ``need_weights``, alpha
        ``[num_edges, heads]`` in the order of ``graph.edge_index``.

        ``score_inputs`` are node tensors (read per edge through ``_i``/``_j``
        suffixes) or anything else :meth:`edge_update` takes as it is.
        A tensor with one row per edge of ``graph.edge_index`` goes in
        ``edge_attr`` or, under its own name, in ``edge_inputs``
        (``edge_inputs={"edge_bias": bias}`` reaches ``edge_update(...,
        edge_bias, ...)``): the fused path hands :meth:`edge_update` the
        edges grouped by target, and reorders these alone to match. A tensor
        of ``num_edges`` rows passed among ``score_inputs`` to an unsuffixed
        argument is refused there when the node counts differ from
        ``num_edges``, since it would be read in the wrong order."""
        edge_inputs = self.check_edge_inputs(graph, edge_inputs)
        if not self.use_fused_path(value, graph):
            alpha = self.edge_updater(graph.edge_index, edge_attr=edge_attr, edge_order=None,
                                      **edge_inputs, **score_inputs)
            alpha = F.dropout(alpha, p=self.dropout, training=self.training)  # [num_edges, heads]
            out = self.propagate(graph.edge_index, x=value, alpha=alpha, size=graph.size)
            return out, alpha

        self.refuse_edge_tensors(graph, score_inputs)
        edges, perm = graph.by_target()
        if perm is not None:
            if edge_attr is not None:
                edge_attr = edge_attr.index_select(0, perm)
            edge_inputs = {name: tensor.index_select(0, perm) for name, tensor in edge_inputs.items()}
        # edge_order: for a score that draws randomness per edge, to draw it in the user's order.
        alpha = self.edge_updater(edges, edge_attr=edge_attr, edge_order=graph,
                                  **edge_inputs, **score_inputs)  # by target
        if self.training and self.dropout > 0:
            # The mask is drawn in the user's edge order, so that both paths
            # (and PyG's layers) drop the same edges for the same seed.
            mask = F.dropout(alpha.new_ones(graph.num_edges, alpha.size(1)), p=self.dropout)
            alpha = alpha * (mask if perm is None else mask.index_select(0, perm))
        out = self.propagate(edges, x=value, alpha=alpha)
        return out, graph.to_user_order(alpha) if need_weights else None

    def check_edge_inputs(self, graph: AttentionGraph,
                          edge_inputs: Optional[Mapping[str, Tensor]]) -> Mapping[str, Tensor]:
        """``edge_inputs`` (or no inputs), each a tensor of one row per edge."""
        if edge_inputs is None:
            return {}
        for name, tensor in edge_inputs.items():
            if not isinstance(tensor, Tensor) or tensor.dim() == 0 or tensor.size(0) != graph.num_edges:
                shape = list(tensor.shape) if isinstance(tensor, Tensor) else type(tensor).__name__
                raise ValueError(f"{type(self).__name__} expects edge_inputs[{name!r}] to be a tensor with one "
                                 f"row per edge (num_edges={graph.num_edges}, self-loops included), got {shape}")
        return edge_inputs

    def refuse_edge_tensors(self, graph: AttentionGraph, score_inputs: Mapping[str, object]) -> None:
        """Refuses, on the fused path, a tensor of one row per edge that
        :meth:`edge_update` would read as it is (an argument without an
        ``_i``/``_j`` suffix) from ``score_inputs``: those are not reordered
        with the edges, so it would be read in the wrong order. Node tensors
        of as many rows as there are edges cannot be told apart and pass."""
        if graph.num_edges in graph.size:
            return
        for name in inspect.signature(self.edge_update).parameters:
            tensor = score_inputs.get(name)
            if (name[-2:] not in ("_i", "_j") and isinstance(tensor, Tensor) and tensor.dim() > 0
                    and tensor.size(0) == graph.num_edges):
                raise ValueError(f"{type(self).__name__}.attend got {name!r} with one row per edge "
                                 f"({graph.num_edges}); pass per-edge tensors in edge_inputs={{{name!r}: ...}} "
                                 f"(or edge_attr), which the fused path reorders with the edges")

    @staticmethod
    def edge_ends(edge_index: Tensor) -> Tuple[Tensor, Tensor]:
        """The source and the target of each edge, as plain tensors to gather
        node tensors with in :meth:`edge_update` (either path)."""
        pattern = getattr(edge_index, "pattern", None)
        if pattern is not None:
            return pattern.index, pattern.target
        return edge_index[0], edge_index[1]

    def normalize(self, score: Tensor, index: Tensor, ptr: Optional[Tensor],
                  dim_size: Optional[int]) -> Tensor:
        """The softmax of ``score`` ``[num_edges, heads]`` over each target's
        edges (segment reductions when the edges come grouped by target)."""
        if isinstance(index, Index):
            index = index.as_tensor()
        if ptr is not None:
            return segment_softmax(score, ptr, index)
        return softmax(score, index, ptr, dim_size)

    def message(self, x_j: Tensor, alpha: Tensor) -> Tensor:
        return alpha.unsqueeze(-1) * x_j  # [num_edges, heads, channels]

    def message_and_aggregate(self, edge_index: EdgeIndex, x: Tensor, alpha: Tensor) -> Tensor:
        # The sum over each target's edges of message(x_j, alpha), as one
        # sparse-dense product for all heads: no [num_edges, heads, channels]
        # tensor is built.
        return SparseAggregate.apply(edge_index.pattern, alpha, x)  # [num_targets, heads, channels]


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


def fewer_nodes(size: Tuple[int, int]) -> int:
    """The smaller of the two node counts of ``size``. Under
    :func:`torch.jit.trace` the counts may be traced sizes (0-d tensors),
    whose comparison in Python the trace would keep as a constant: their
    minimum is then taken as a traced op."""
    if torch.jit.is_tracing() and all(isinstance(n, Tensor) for n in size):
        return torch.minimum(size[0], size[1])
    return min(size)


def num_rows(x: Optional[Tensor]) -> Optional[int]:
    return None if x is None else x.size(0)


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

    def edge_update(self, alpha: PairTensor, edge_attr: Optional[Tensor], edge_index: Tensor,
                    index: Tensor, ptr: Optional[Tensor]) -> Tensor:
        # The additive score: each end's share, plus the edge's when it has features.
        alpha_src, alpha_dst = alpha
        source, target = self.edge_ends(edge_index)
        score = alpha_src.index_select(0, source) + alpha_dst.index_select(0, target)  # [num_edges, heads]
        if edge_attr is not None and self.lin_edge is not None and score.size(0) > 0:
            if edge_attr.dim() == 1:
                edge_attr = edge_attr.view(-1, 1)
            edge_attr = self.lin_edge(edge_attr).view(-1, self.heads, self.out_channels)
            score = score + (edge_attr * self.att_edge).sum(dim=-1)
        score = F.leaky_relu(score, self.negative_slope)
        return self.normalize(score, index, ptr, alpha_dst.size(0))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


class SelfAttentionConv(AttentionConv):
    r"""Multi-head scaled dot-product attention from `"Attention Is All You
    Need" <https://arxiv.org/abs/1706.03762>`_ (Vaswani et al., NeurIPS
    2017), as message passing along a graph.

    .. math::
        \mathbf{x}^{\prime}_i = \mathbf{W}_O \big\Vert_{h=1}^{H}
        \sum_{j \in \mathcal{N}(i)} \alpha^{h}_{i,j} \mathbf{W}^{h}_V \mathbf{x}_j,
        \qquad
        \alpha^{h}_{i,j} = \mathrm{softmax}_j\Big(
        \frac{(\mathbf{W}^{h}_Q \mathbf{x}_i)^{\top} \mathbf{W}^{h}_K \mathbf{x}_j}{\sqrt{d}}\Big)

    (biases omitted), where :math:`d` is ``embed_dim / num_heads``. Without
    ``edge_index``, :math:`\mathcal{N}(i)` is every node of :math:`i`'s graph,
    itself included: the Transformer's self-attention. With ``edge_index`` it
    is :math:`i`'s in-neighbours, and a mask of :class:`torch.nn.MultiheadAttention`
    becomes a graph (``graphs.causal`` for a decoder's causal mask).

    Cross-attention (queries on one node set, keys and values on another, as
    an encoder-decoder's) takes ``x=(x_src, x_dst)``: the targets ``x_dst``
    ``[num_targets, embed_dim]`` ask, the sources ``x_src`` ``[num_sources,
    kdim]`` answer (``x_src`` may be a pair ``(keys, values)`` of ``kdim`` and
    ``vdim`` features), along a bipartite ``edge_index`` (row 0 indexes
    ``x_src``, row 1 ``x_dst``) or, without one, from every source to every
    target of the same graph (``batch=(batch_src, batch_dst)``).

    Fully connected graphs are computed densely, graph by graph, with
    :func:`torch.nn.functional.scaled_dot_product_attention` (graphs of unequal
    sizes are padded and the padding masked out), unless message hooks or an
    explainer need the edges. Any other graph takes the edge-wise path of
    :meth:`AttentionConv.attend`, whose memory grows with the number of edges
    times heads, not with the square of the nodes. Both give the same numbers.

    Parameters and ``state_dict`` keys are those of
    ``torch.nn.MultiheadAttention(embed_dim, num_heads, bias=bias,
    kdim=kdim, vdim=vdim, batch_first=True)``, so weights load both ways.
    Its options ``add_bias_kv`` and ``add_zero_attn`` are not implemented and
    refused by name.

    A node with no incoming edge attends to nothing: its attention output
    (the sum of weighted values, before ``out_proj``) is a zero vector, so its
    output is ``out_proj.bias`` (zero when ``bias=False``), never NaN.
    :class:`torch.nn.MultiheadAttention` returns NaN for a fully masked row.

    Args:
        embed_dim (int): size of each query and output sample.
        num_heads (int): number of attention heads; must divide ``embed_dim``.
        dropout (float): dropout probability of the attention coefficients
            during training. (default: :obj:`0.`)
        bias (bool): learn biases of the input and output projections.
            (default: :obj:`True`)
        add_bias_kv (bool): not implemented; must be :obj:`False`.
        add_zero_attn (bool): not implemented; must be :obj:`False`.
        kdim (int, optional): size of each key sample. (default: ``embed_dim``)
        vdim (int, optional): size of each value sample. (default: ``embed_dim``)
        batch_first (bool): accepted and ignored, so that
            :class:`torch.nn.MultiheadAttention`'s arguments (positional
            ones too) mean the same here: nodes are the rows of ``x``, with no
            batch or sequence dimension. (default: :obj:`False`)
        device, dtype: where and in which precision to create the parameters.
            (default: :obj:`None`)
        **kwargs (optional): arguments of :class:`MessagePassing`.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, E)` or
          :math:`((|\mathcal{V_s}|, E_k), (|\mathcal{V_t}|, E))`, optional
          edge indices :math:`(2, |\mathcal{E}|)` (source row 0, target row 1),
          optional sorted batch vector :math:`(|\mathcal{V}|)` (a pair when
          bipartite)
        - **output:** node features :math:`(|\mathcal{V_t}|, E)`; with
          ``return_attention_weights``, also ``(edge_index, alpha)`` with
          alpha :math:`(|\mathcal{E}|, H)` (the fully connected edges
          when no ``edge_index`` was given).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: Optional[int] = None,
                 vdim: Optional[int] = None, batch_first: bool = False, device=None, dtype=None, **kwargs):
        checks.check_option(self, "add_bias_kv", add_bias_kv, False,
                            "its learned extra key and value are not part of this layer")
        checks.check_option(self, "add_zero_attn", add_zero_attn, False,
                            "it would attend to an extra zero key and value")
        checks.check_sizes(self, embed_dim=embed_dim, num_heads=num_heads,
                           **{k: v for k, v in (("kdim", kdim), ("vdim", vdim)) if v is not None})
        super().__init__(heads=num_heads, dropout=dropout, **kwargs)
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.bias = bias
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim

        # The names and shapes of torch.nn.MultiheadAttention, so weights load both ways.
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(torch.empty(3 * embed_dim, embed_dim))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = Parameter(torch.empty(embed_dim, embed_dim))
            self.k_proj_weight = Parameter(torch.empty(embed_dim, self.kdim))
            self.v_proj_weight = Parameter(torch.empty(embed_dim, self.vdim))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(torch.empty(3 * embed_dim))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = torch.nn.Linear(embed_dim, embed_dim, bias=bias)
        self.reset_parameters()
        self.to(device=device, dtype=dtype)

    def reset_parameters(self):
        # torch.nn.MultiheadAttention's initialisation.
        super().reset_parameters()
        for weight in (self.in_proj_weight, self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
            if weight is not None:
                torch.nn.init.xavier_uniform_(weight)
        self.out_proj.reset_parameters()
        if self.in_proj_bias is not None:
            torch.nn.init.zeros_(self.in_proj_bias)
            torch.nn.init.zeros_(self.out_proj.bias)

    def forward(self, x: Union[Tensor, Tuple], edge_index: Optional[Tensor] = None,
                batch: Optional[Union[Tensor, Tuple[Tensor, Tensor]]] = None,
                return_attention_weights: bool = False):
        H, D = self.num_heads, self.head_dim
        query, key, value, batch_src, batch_dst = self.project(x, batch)  # [num_nodes, heads, head_dim] each
        num_sources, num_targets = key.size(0), query.size(0)

        if edge_index is None and not return_attention_weights and not self.edges_observed():
            out = self.attend_fully_connected(query, key, value, batch_src, batch_dst)
        else:
            if edge_index is None:  # The edges are wanted: build them.
                edge_index = self.fully_connected_edges(batch_src, batch_dst, num_sources, num_targets)
                edge_index = edge_index.to(query.device)
            graph = self.attention_graph(edge_index, (num_sources, num_targets))
            out, alpha = self.attend(graph, value, query=query, key=key,
                                     need_weights=bool(return_attention_weights))

        out = self.out_proj(out.reshape(-1, H * D))  # [num_targets, embed_dim]
        if return_attention_weights:
            return out, graph.attention_weights(alpha)
        return out

    def project(self, x, batch):
        """Queries (of the targets), keys and values (of the sources), each
        ``[num_nodes, heads, head_dim]``, and the two batch vectors."""
        H, D, E = self.num_heads, self.head_dim, self.embed_dim
        dtype = self.out_proj.weight.dtype
        # A pair of batch vectors, not a list of graph ids (which is refused as not a tensor).
        batch_pair = isinstance(batch, (tuple, list)) and len(batch) == 2 \
            and all(b is None or isinstance(b, Tensor) for b in batch)
        if not isinstance(x, (tuple, list)):
            checks.check_features(self, x, E)
            checks.check_dtype(self, x, dtype)
            if not self._qkv_same_embed_dim:
                raise ValueError(f"SelfAttentionConv with kdim={self.kdim}, vdim={self.vdim} attends "
                                 f"across two node sets: pass x=(x_src, x_dst)")
            if batch_pair:
                raise ValueError("SelfAttentionConv takes one batch vector with one x (a pair with x=(x_src, x_dst))")
            checks.check_batch(self, batch, x.size(0))
            qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias).view(-1, 3, H, D)
            # One copy makes each of query, key and value contiguous, which
            # the edge gathers read several times faster than strided views.
            query, key, value = qkv.transpose(0, 1).contiguous()
            return query, key, value, batch, batch

        if len(x) != 2:
            raise ValueError(f"SelfAttentionConv expects x or a pair (x_src, x_dst), got {len(x)} tensors")
        x_src, x_dst = x
        x_key, x_value = x_src if isinstance(x_src, (tuple, list)) else (x_src, x_src)
        checks.check_features(self, x_dst, E, name="x_dst")
        checks.check_features(self, x_key, self.kdim, name="x_src (keys)" if x_key is not x_value else "x_src")
        checks.check_features(self, x_value, self.vdim, name="x_src (values)")
        for name, tensor in (("x_dst", x_dst), ("x_src", x_key), ("x_src (values)", x_value)):
            checks.check_dtype(self, tensor, dtype, name=name)
        if x_key.size(0) != x_value.size(0):
            raise ValueError(f"SelfAttentionConv expects as many key as value rows, got "
                             f"{x_key.size(0)} and {x_value.size(0)}")
        batch_src, batch_dst = batch if batch_pair else (batch, batch)
        if (batch_src is None) != (batch_dst is None):
            raise ValueError("SelfAttentionConv expects batch=(batch_src, batch_dst), both or neither")
        checks.check_batch(self, batch_src, x_key.size(0))
        checks.check_batch(self, batch_dst, x_dst.size(0))
        b_q, b_k, b_v = (None, None, None) if self.in_proj_bias is None else self.in_proj_bias.chunk(3)
        if self._qkv_same_embed_dim:
            w_q, w_k, w_v = self.in_proj_weight.chunk(3)
        else:
            w_q, w_k, w_v = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        query = F.linear(x_dst, w_q, b_q).view(-1, H, D)
        key = F.linear(x_key, w_k, b_k).view(-1, H, D)
        value = F.linear(x_value, w_v, b_v).view(-1, H, D)
        return query, key, value, batch_src, batch_dst

    def edge_update(self, query: Tensor, key: Tensor, edge_index: Tensor, index: Tensor,
                    ptr: Optional[Tensor]) -> Tensor:
        # The scaled dot product of each edge's query (target) and key (source).
        pattern = getattr(edge_index, "pattern", None)
        if pattern is not None:  # Fused: no [num_edges, heads, head_dim] tensor.
            score = SampledDot.apply(pattern, query, key)
        else:
            source, target = self.edge_ends(edge_index)
            score = (query.index_select(0, target) * key.index_select(0, source)).sum(dim=-1)
        return self.normalize(score / math.sqrt(self.head_dim), index, ptr, query.size(0))  # [num_edges, heads]

    @staticmethod
    def fully_connected_edges(batch_src: Optional[Tensor], batch_dst: Optional[Tensor],
                              num_sources: int, num_targets: int) -> Tensor:
        """Every source to every target of the same graph."""
        if batch_src is None:
            return graphs.fully_connected_bipartite([num_sources], [num_targets])
        num_graphs = graph_count(batch_src, batch_dst)
        return graphs.fully_connected_bipartite(graph_sizes(batch_src, num_graphs),
                                                graph_sizes(batch_dst, num_graphs))

    def attend_fully_connected(self, query: Tensor, key: Tensor, value: Tensor,
                               batch_src: Optional[Tensor], batch_dst: Optional[Tensor]) -> Tensor:
        """Dense attention inside each graph: every target attends to every
        source of its graph. Queries ``[num_targets, heads, head_dim]``, keys
        and values ``[num_sources, heads, head_dim]`` in, the attention output
        ``[num_targets, heads, head_dim]`` out. Graphs of equal sizes are a
        plain reshape; unequal ones are padded to the largest and the padded
        keys masked out."""
        H, D = self.num_heads, self.head_dim
        num_graphs = 0 if batch_src is None else graph_count(batch_src, batch_dst)
        if num_graphs == 0:  # One graph (or none at all).
            return self.scaled_dot_product(query[None], key[None], value[None], None)[0]
        sizes_src, sizes_dst = graph_sizes(batch_src, num_graphs), graph_sizes(batch_dst, num_graphs)
        if bool((sizes_src == sizes_src[0]).all()) and bool((sizes_dst == sizes_dst[0]).all()):
            out = self.scaled_dot_product(query.view(num_graphs, -1, H, D), key.view(num_graphs, -1, H, D),
                                          value.view(num_graphs, -1, H, D), None)
            return out.reshape(-1, H, D)
        longest_src, longest_dst = int(sizes_src.max()), int(sizes_dst.max())
        rows_dst, place_dst = padded_rows(batch_dst, sizes_dst, longest_dst)
        rows_src, _ = padded_rows(batch_src, sizes_src, longest_src)
        real_src = rows_src < key.size(0)
        q = pad(query, rows_dst).view(num_graphs, longest_dst, H, D)
        k = pad(key, rows_src).view(num_graphs, longest_src, H, D)
        v = pad(value, rows_src).view(num_graphs, longest_src, H, D)
        # A graph without sources would leave its queries with no key at all;
        # letting them see the padding (zero keys and values) keeps NaN out
        # and gives them the zero output of a node that attends to nothing.
        empty = (sizes_src == 0).to(real_src.device)
        mask = (real_src.view(num_graphs, longest_src) | empty.unsqueeze(1)).view(num_graphs, 1, 1, longest_src)
        out = self.scaled_dot_product(q, k, v, mask)  # [graphs, longest_dst, heads, head_dim]
        return out.reshape(-1, H, D).index_select(0, place_dst)

    def scaled_dot_product(self, query: Tensor, key: Tensor, value: Tensor, mask: Optional[Tensor]) -> Tensor:
        """SDPA on ``[graphs, nodes, heads, head_dim]`` tensors."""
        query, key, value = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
        dropout = self.dropout if self.training else 0.0
        if not torch.compiler.is_compiling() and not compat.plain_autograd():
            # Torch's fused CPU kernels have no forward-mode derivative: the
            # math kernel, plain differentiable ops, serves torch.func and jvp.
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
                out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout)
        elif dropout > 0 or torch.compiler.is_compiling() or not torch.is_grad_enabled():
            out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout)
        else:
            out = TwiceDifferentiableSDPA.apply(query, key, value, mask)
        return out.transpose(1, 2)

    def __repr__(self) -> str:
        extra = "" if self._qkv_same_embed_dim else f", kdim={self.kdim}, vdim={self.vdim}"
        return f"{self.__class__.__name__}({self.embed_dim}, num_heads={self.num_heads}{extra})"


class TwiceDifferentiableSDPA(torch.autograd.Function):
    """:func:`~torch.nn.functional.scaled_dot_product_attention` (no dropout)
    whose gradient is differentiable again. Torch's fused CPU and CUDA kernels
    have no second derivative (nor has :class:`torch.nn.MultiheadAttention`):
    the first backward pass here is theirs, and only when a graph of the
    gradient is asked for (``create_graph=True``) is the attention redone
    with the math kernel and differentiated through."""

    @staticmethod
    def forward(ctx, query: Tensor, key: Tensor, value: Tensor, mask: Optional[Tensor]) -> Tensor:
        with torch.enable_grad():
            inputs = [t.detach().requires_grad_() for t in (query, key, value)]
            out = F.scaled_dot_product_attention(*inputs, attn_mask=mask)
        ctx.save_for_backward(query, key, value)
        ctx.inner, ctx.mask = (inputs, out), mask
        return out.detach()

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        query, key, value = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: through the math kernel.
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
                out = F.scaled_dot_product_attention(query, key, value, attn_mask=ctx.mask)
            wanted = [t for t, need in zip((query, key, value), ctx.needs_input_grad) if need]
            found = iter(torch.autograd.grad(out, wanted, grad_out, create_graph=True))
            return (*[next(found) if need else None for need in ctx.needs_input_grad[:3]], None)
        if ctx.inner is None:  # A second pass through a retained graph: redo the forward.
            with torch.enable_grad():
                inputs = [t.detach().requires_grad_() for t in (query, key, value)]
                ctx.inner = (inputs, F.scaled_dot_product_attention(*inputs, attn_mask=ctx.mask))
        (inputs, out), ctx.inner = ctx.inner, None
        return (*torch.autograd.grad(out, inputs, grad_out), None)


def padded_rows(batch: Tensor, sizes: Tensor, longest: int) -> Tuple[Tensor, Tensor]:
    """Where each row of a ``[graphs * longest]`` padding of the nodes of a
    sorted ``batch`` reads from (a node, or ``num_nodes``: the zero row that
    :func:`pad` appends), and where each node lands in it. Made from the
    batch alone, so the node tensors are only read, never written in place,
    which :func:`torch.func.vmap` needs."""
    num_nodes, sizes = batch.numel(), sizes.to(batch.device)
    start = torch.cumsum(sizes, 0) - sizes  # [graphs] each graph's first node
    place = batch * longest + torch.arange(num_nodes, device=batch.device) - start.index_select(0, batch)
    rows = torch.full((sizes.numel() * longest,), num_nodes, dtype=torch.long, device=batch.device)
    rows[place] = torch.arange(num_nodes, device=batch.device)
    return rows, place


def pad(nodes: Tensor, rows: Tensor) -> Tensor:
    """The rows ``rows`` of ``nodes`` with a zero row appended (see :func:`padded_rows`)."""
    return torch.cat([nodes, nodes.new_zeros(1, *nodes.shape[1:])]).index_select(0, rows)


def graph_count(batch_src: Tensor, batch_dst: Tensor) -> int:
    """The number of graphs two batch vectors span (the larger graph id + 1)."""
    counts = [int(b.max()) + 1 for b in (batch_src, batch_dst) if b.numel()]
    return max(counts, default=0)


def graph_sizes(batch: Tensor, num_graphs: int) -> Tensor:
    """The number of nodes of each graph of a sorted ``batch`` vector."""
    if batch.numel() > 1 and bool((batch[1:] < batch[:-1]).any()):
        raise ValueError("SelfAttentionConv expects a sorted batch vector (nodes numbered "
                         "graph after graph, as PyG's loaders make them)")
    return graphs.batch_to_lengths(batch, num_graphs)
