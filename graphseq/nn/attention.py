r"""Attention as message passing. Every attention layer here does the same
three things along the edges of a graph: score each edge ``j -> i``
(:meth:`edge_update`, run through :meth:`edge_updater`), take a softmax over
the scores of each target's incoming edges, and sum the values of the sources
weighted by that softmax (:meth:`message`, run through :meth:`propagate`).
Only the score differs: GAT's is additive, ``LeakyReLU(a_s . W x_j + a_d . W
x_i)`` (:mod:`graphseq.nn.gat_conv`); the Transformer's is the scaled dot
product ``q_i . k_j / sqrt(d)`` (:mod:`graphseq.nn.self_attention`). Only the
graph differs too: a node's neighbours for GAT, every node of its graph for
self-attention.

This module is the message path, PyG's: ``message`` makes every edge's
message in the user's edge order, so hooks, :mod:`torch_geometric.explain`
and ``decomposed_layers`` see and change them. When nothing looks at the
edges, :meth:`AttentionConv.attend` hands the call to the fused path
(:mod:`graphseq.nn.fused_attention`), which gives the same numbers.
"""
from __future__ import annotations

from typing import Mapping, Optional, Tuple

import torch.nn.functional as F
from torch import Tensor
from torch_geometric import EdgeIndex
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import softmax

from . import checks, compat, fused_attention
from .attention_graph import AttentionGraph, prepare_graph
from .sparse import SparseAggregate


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

    :meth:`edge_update` sees the edges in the user's order on either path,
    so a score may draw random numbers per edge. (A class whose score is a
    deterministic function of each edge's own inputs, as GAT's, may say so
    with ``deterministic_scores = True``: the fused path then scores the
    edges grouped by target, the order it sums them in.) A score that also
    reads a tensor of one row per edge (a learned bias per edge,
    say) passes it in ``edge_inputs``:
    ``self.attend(graph, value, x=x, edge_inputs={"edge_bias": edge_bias})``
    and ``edge_update(self, x_i, x_j, edge_bias, index, ptr, dim_size)``.
    (``edge_attr`` is such an input already.) A dot product of the two ends
    is best taken with :meth:`edge_dot`.

    A node with no incoming edge receives a zero vector.

    Args:
        heads (int): number of attention heads.
        dropout (float): dropout probability of the normalised attention
            coefficients during training. (default: :obj:`0.`)
        **kwargs (optional): arguments of
            :class:`torch_geometric.nn.conv.MessagePassing` (``aggr`` must stay
            ``"add"``).
    """

    SUPPORTS_FUSED_EDGE_INDEX = True  # PyG's propagate fuses on edges grouped by target
    # Whether this class's edge_update scores each edge from that edge's
    # inputs alone, drawing no random numbers (see above).
    deterministic_scores = False

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
        self._graph_cache = None  # the last graph made (see attention_graph)
        self.fused_scoring = None  # set while the fused path runs (graphseq.nn.fused_attention)

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
        return prepare_graph(self, edge_index, size, self_loops, num_loops)

    def edges_observed(self) -> bool:
        """Whether anything looks at the edges one by one in the user's order:
        an explainer, a decomposition, or any propagate, message, aggregate
        or edge_update hook."""
        return compat.edges_observed(self)

    def use_fused_path(self, value: Tensor, graph: AttentionGraph) -> bool:
        """Whether :meth:`attend` may hand its call to the fused path
        (:func:`graphseq.nn.fused_attention.applies`)."""
        return fused_attention.applies(self, value, graph)

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
        edge_bias, ...)``). A tensor of ``num_edges`` rows passed among
        ``score_inputs`` to an unsuffixed argument is refused on the fused
        path when the node counts differ from ``num_edges``."""
        edge_inputs = self.check_edge_inputs(graph, edge_inputs)
        if self.use_fused_path(value, graph):
            return fused_attention.attend(self, graph, value, edge_attr, edge_inputs, score_inputs, need_weights)
        alpha = self.edge_updater(graph.edge_index, edge_attr=edge_attr, **edge_inputs, **score_inputs)
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)  # [num_edges, heads]
        out = self.propagate(graph.edge_index, x=value, alpha=alpha, size=graph.size)
        return out, alpha

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

    @staticmethod
    def edge_ends(edge_index: Tensor) -> Tuple[Tensor, Tensor]:
        """The source and the target of each edge, to gather node tensors
        with in :meth:`edge_update`."""
        return edge_index[0], edge_index[1]

    def edge_dot(self, query: Tensor, key: Tensor, edge_index: Tensor) -> Tensor:
        """``query[i] . key[j]`` for every edge ``j -> i`` of ``edge_index``,
        from ``[num_nodes, heads, channels]`` queries (targets) and keys
        (sources): ``[num_edges, heads]``. On the fused path, a sampled
        product that makes no ``[num_edges, heads, channels]`` tensor."""
        if self.fused_scoring is not None:
            return self.fused_scoring.dot(query, key)
        source, target = self.edge_ends(edge_index)
        return (query.index_select(0, target) * key.index_select(0, source)).sum(dim=-1)

    def normalize(self, score: Tensor, index: Tensor, ptr: Optional[Tensor],
                  dim_size: Optional[int]) -> Tensor:
        """The softmax of ``score`` ``[num_edges, heads]`` over each target's
        edges (``index``: the target of each edge). On the fused path, over
        the edges grouped by target, which the weights then stay in."""
        if self.fused_scoring is not None:
            return self.fused_scoring.softmax(score)
        return softmax(score, index, ptr, dim_size)

    def message(self, x_j: Tensor, alpha: Tensor) -> Tensor:
        return alpha.unsqueeze(-1) * x_j  # [num_edges, heads, channels]

    def message_and_aggregate(self, edge_index: EdgeIndex, x: Tensor, alpha: Tensor) -> Tensor:
        # The fused path's edges grouped by target: the sum over each
        # target's edges of message(x_j, alpha), as one sparse-dense product
        # for all heads, with no [num_edges, heads, channels] tensor.
        return SparseAggregate.apply(edge_index.pattern, alpha, x)  # [num_targets, heads, channels]
