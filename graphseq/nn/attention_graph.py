"""The edges an attention layer attends along (:class:`AttentionGraph`),
made from what a user passes as ``edge_index``: a ``[2, num_edges]`` tensor,
an :class:`~torch_geometric.EdgeIndex` or a sparse adjacency (rows =
targets), with every self-loop replaced by one per node when the layer adds
loops, as PyG's layers do. A layer keeps the last graph it made for as long
as the same, unmodified ``edge_index`` comes back (full-batch training), so
the loops, the checks and the fused path's grouping by target are made once.
"""
from __future__ import annotations

import weakref
from typing import Optional, Tuple

import torch
from torch import Tensor
from torch_geometric import EdgeIndex
from torch_geometric.utils import add_self_loops, is_torch_sparse_tensor, remove_self_loops, scatter, to_edge_index
from torch_geometric.utils.sparse import set_sparse_value

from .. import graphs
from . import checks, compat


class AttentionGraph:
    """The edges one attention call runs over.

    ``edge_index`` holds them in the user's order: the given edges (without
    their self-loops when loops are added) followed by one loop per node, as
    :func:`torch_geometric.utils.add_self_loops` makes them.

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
        self.grouped = None  # the same edges grouped by target, made by the fused path on first use

    @property
    def num_edges(self) -> int:
        return self.edge_index.size(1)

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


def prepare_graph(layer, edge_index: Tensor, size: Tuple[int, int], self_loops: bool,
                  num_loops: Optional[int]) -> AttentionGraph:
    """See :meth:`graphseq.nn.AttentionConv.attention_graph`."""
    num_loops = fewer_nodes(size) if num_loops is None else num_loops
    if (not (torch.compiler.is_compiling() or torch.jit.is_tracing()) or not isinstance(edge_index, Tensor)
            or isinstance(edge_index, EdgeIndex) or is_torch_sparse_tensor(edge_index)):
        return kept_graph(layer, edge_index, size, self_loops, num_loops)
    checks.check_edge_index(layer, edge_index, size)
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
def kept_graph(layer, edge_index: Tensor, size: Tuple[int, int], self_loops: bool,
               num_loops: int) -> AttentionGraph:
    """:func:`prepare_graph` through the layer's cache of the last graph
    made (``layer._graph_cache``: a weak reference to its ``edge_index``, the
    key it was made for, the graph). :func:`torch.compile` leaves it out of
    its graphs (it reads the weak reference and stamp), so it runs as
    ordinary Python."""
    if is_torch_sparse_tensor(edge_index):
        return sparse_graph(layer, edge_index, size, self_loops, num_loops)
    if isinstance(edge_index, EdgeIndex):
        edge_index = edge_index.as_tensor()
    if not isinstance(edge_index, Tensor):  # a list, say: named before the cache reads it
        checks.check_edge_index(layer, edge_index, size)
    # Nothing is kept while tracing, where the graph would be a constant of the trace.
    key = (None if torch.jit.is_tracing() else checks.kept_stamp(edge_index), size, self_loops, num_loops)
    cache = layer._graph_cache
    if cache is not None and key[0] is not None and cache[0]() is edge_index and cache[1] == key:
        return cache[2]  # Checked when it was made.
    checks.check_edge_index(layer, edge_index, size)
    if self_loops:
        kept = (edge_index[0] != edge_index[1]).nonzero().view(-1)
        graph = AttentionGraph(graphs.with_self_loops(edge_index, num_loops), size, kept=kept, num_loops=num_loops)
    else:
        graph = AttentionGraph(edge_index, size)
    layer._graph_cache = None if key[0] is None else (weakref.ref(edge_index), key, graph)
    return graph


def sparse_graph(layer, adj: Tensor, size: Tuple[int, int], self_loops: bool, num_loops: int) -> AttentionGraph:
    """The graph of a sparse adjacency ``adj`` ``[num_targets, num_sources]``."""
    if adj.dim() != 2 or tuple(adj.shape) != (size[1], size[0]):
        raise ValueError(f"{checks.layer_name(layer)} expects a sparse adjacency of shape [num_targets, "
                         f"num_sources] = [{size[1]}, {size[0]}] (the transposed adjacency, as PyG takes it), "
                         f"got {list(adj.shape)}")
    if self_loops:
        if adj.layout == torch.sparse_csc:  # PyG's loop helpers take CSR and COO.
            adj = adj.to_sparse_csr()
        adj, _ = remove_self_loops(adj)
        adj, _ = add_self_loops(adj, num_nodes=num_loops)
    (target, source), _ = to_edge_index(adj)
    return AttentionGraph(torch.stack([source, target]), size, adjacency=adj)


def fewer_nodes(size: Tuple[int, int]) -> int:
    """The smaller of the two node counts of ``size``. Under
    :func:`torch.jit.trace` the counts may be traced sizes (0-d tensors),
    whose comparison in Python the trace would keep as a constant: their
    minimum is then taken as a traced op."""
    if torch.jit.is_tracing() and all(isinstance(n, Tensor) for n in size):
        return torch.minimum(size[0], size[1])
    return min(size)
