"""Pure graph builders: each returns an ``edge_index`` (source row 0, target
row 1, PyG's convention) for a batch of graphs whose nodes are numbered graph
after graph, or, for :func:`knn`, for items joined by similarity. They hold the
one idea graphseq is built on: attention, recurrence and few-shot learning
differ mainly in the graph that messages travel along.
"""
from __future__ import annotations

import warnings
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.utils import index_sort, to_undirected

from .checks import is_integer

Lengths = Union[Sequence[int], Tensor, int]


def _as_lengths(lengths: Lengths) -> Tensor:
    if isinstance(lengths, int):
        lengths = [lengths]
    given = torch.as_tensor(lengths).flatten().cpu()
    if given.numel() and (given.dtype == torch.bool or given.is_floating_point() or given.is_complex()):
        # torch.repeat_interleave refuses them too; int() would cut 2.7 to 2.
        shown = lengths.tolist() if hasattr(lengths, "tolist") else lengths
        raise ValueError(f"graph sizes must be whole numbers, got {shown}")
    lengths = given.long()
    if (lengths < 0).any():
        raise ValueError(f"graph sizes must be non-negative, got {lengths.tolist()}")
    return lengths


def lengths_to_batch(lengths: Lengths) -> Tensor:
    """The PyG ``batch`` vector (graph id of each node) for graphs of the given sizes."""
    lengths = _as_lengths(lengths)
    return torch.repeat_interleave(torch.arange(lengths.numel()), lengths)


def batch_to_lengths(batch: Tensor, num_graphs: int | None = None) -> Tensor:
    """The number of nodes in each graph of a ``batch`` vector."""
    if not isinstance(batch, Tensor):
        raise TypeError(f"batch must be a tensor, got {type(batch).__name__}")
    if num_graphs is None:
        num_graphs = int(batch.max()) + 1 if batch.numel() else 0
    lengths = torch.bincount(batch.cpu(), minlength=num_graphs)
    if lengths.numel() > num_graphs:
        raise ValueError(f"batch names graph {lengths.numel() - 1}, but num_graphs is {num_graphs}")
    return lengths


def _blocks(lengths: Tensor, pairs) -> Tensor:
    """Concatenates the per-graph edges ``pairs(n)`` shifted by each graph's offset."""
    offsets = torch.cumsum(lengths, 0) - lengths
    cache: dict[int, Tensor] = {}
    parts = []
    for n, offset in zip(lengths.tolist(), offsets.tolist()):
        if n == 0:
            continue
        if n not in cache:
            cache[n] = pairs(n)
        parts.append(cache[n] + offset)
    if not parts:
        return torch.empty(2, 0, dtype=torch.long)
    return torch.cat(parts, dim=1)


def fully_connected(lengths: Lengths, self_loops: bool = True) -> Tensor:
    """Every node of a graph receives from every node of the same graph.

    Edges are ordered by target, then source, which is the row-major order of
    each graph's attention matrix.

    Example:
        >>> fully_connected([2])
        tensor([[0, 1, 0, 1],
                [0, 0, 1, 1]])
    """
    def pairs(n: int) -> Tensor:
        target, source = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        edge_index = torch.stack([source.flatten(), target.flatten()])
        if not self_loops:
            edge_index = edge_index[:, edge_index[0] != edge_index[1]]
        return edge_index

    return _blocks(_as_lengths(lengths), pairs)


def fully_connected_bipartite(source_lengths: Lengths, target_lengths: Lengths) -> Tensor:
    """Every target node of a graph receives from every source node of the
    same graph, sources and targets numbered apart (cross-attention's graph).
    Edges are ordered by target, then source.

    Example:
        >>> fully_connected_bipartite([2], [1])
        tensor([[0, 1],
                [0, 0]])
    """
    sources, targets = _as_lengths(source_lengths), _as_lengths(target_lengths)
    if sources.numel() != targets.numel():
        raise ValueError(f"need as many source as target graphs, got {sources.numel()} and {targets.numel()}")
    source_offsets, target_offsets = torch.cumsum(sources, 0) - sources, torch.cumsum(targets, 0) - targets
    parts = []
    for n_src, n_dst, off_src, off_dst in zip(sources.tolist(), targets.tolist(),
                                              source_offsets.tolist(), target_offsets.tolist()):
        target, source = torch.meshgrid(torch.arange(n_dst), torch.arange(n_src), indexing="ij")
        parts.append(torch.stack([source.flatten() + off_src, target.flatten() + off_dst]))
    return torch.cat(parts, dim=1) if parts else torch.empty(2, 0, dtype=torch.long)


def causal(lengths: Lengths) -> Tensor:
    """Each node receives from itself and every earlier node of its sequence,
    the graph of a decoder's causal mask.

    Example:
        >>> causal([3])
        tensor([[0, 0, 1, 0, 1, 2],
                [0, 1, 1, 2, 2, 2]])
    """
    def pairs(n: int) -> Tensor:
        target, source = torch.tril_indices(n, n)
        return torch.stack([source, target])

    return _blocks(_as_lengths(lengths), pairs)


def chain(lengths: Lengths) -> Tensor:
    """Edges ``t -> t+1`` inside each sequence: the graph a recurrent network
    steps along.

    Example:
        >>> chain([3, 2])
        tensor([[0, 1, 3],
                [1, 2, 4]])
    """
    lengths = _as_lengths(lengths)
    num_nodes = int(lengths.sum())
    ends = torch.cumsum(lengths, 0) - 1
    is_last = torch.zeros(num_nodes, dtype=torch.bool)
    is_last[ends[lengths > 0]] = True
    source = torch.arange(num_nodes)[~is_last]
    return torch.stack([source, source + 1])


def reverse(edge_index: Tensor) -> Tensor:
    """The same edges pointing the other way (a backward chain, say)."""
    return edge_index.flip(0)


def to_csr(x: Tensor) -> Tensor:
    """``x`` (dense or sparse) as a sparse CSR matrix, without torch's
    "Sparse CSR tensor support is in beta state" warning: graphseq stores
    sparse features as CSR on purpose, and a user can do nothing about it.
    Only that warning is silenced, and only here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return x if x.layout == torch.sparse_csr else x.to_sparse_csr()


def _dense_rows(x: Tensor, start: int, end: int) -> Tensor:
    """Rows ``start:end`` of a dense or sparse CSR matrix, dense."""
    if x.layout == torch.strided:
        return x[start:end]
    x = to_csr(x)
    crow = x.crow_indices()[start:end + 1]
    first, last = int(crow[0]), int(crow[-1])
    return torch.sparse_csr_tensor(crow - first, x.col_indices()[first:last], x.values()[first:last],
                                   (end - start, x.size(1)), check_invariants=False).to_dense()


def knn(x: Tensor, k: int, block_size: int = 512) -> Tensor:
    """The undirected graph joining each row of ``x`` ``[num_items, dim]``
    (dense, or sparse CSR such as TF-IDF vectors) to its ``k`` most similar
    rows by dot product, which is the cosine similarity when the rows are
    L2-normalised. A row is not its own neighbour, and rows with nothing in
    common (similarity 0) are never joined, so an item may get fewer than
    ``k`` neighbours. Ties go to the lower index.

    PyG's ``knn_graph`` needs dense inputs (and torch-cluster); this one
    compares ``block_size`` rows at a time against the sparse matrix, so
    10,000 sentences over a 10,000-word vocabulary take a few seconds.

    Example:
        >>> knn(torch.tensor([[1., 0.], [0.8, 0.6], [0., 1.]]), k=1)
        tensor([[0, 1, 1, 2],
                [1, 0, 2, 1]])
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    if x.dim() != 2:
        raise ValueError(f"knn needs x of shape [num_items, dim], got {list(x.shape)}")
    num_items = x.size(0)
    if num_items == 0:
        return torch.empty(2, 0, dtype=torch.long, device=x.device)
    sources, targets = [], []
    for start in range(0, num_items, block_size):
        end = min(start + block_size, num_items)
        rows = torch.arange(start, end, device=x.device)
        block = _dense_rows(x, start, end)  # [block_size, dim]
        similarity = (x @ block.t()).t()  # [block_size, num_items]
        similarity[torch.arange(rows.numel(), device=x.device), rows] = 0.0
        # The candidates reach the k-th largest value of their row; where
        # ties at that value give more than k, the lower indices win.
        threshold = similarity.topk(min(k, num_items), dim=1).values[:, -1:]  # [block_size, 1]
        row, column = ((similarity >= threshold) & (similarity > 0)).nonzero(as_tuple=True)
        order = torch.sort(similarity[row, column], descending=True, stable=True).indices
        row, column = row[order], column[order]
        order = torch.sort(row, stable=True).indices  # by row, then value, then index
        row, column = row[order], column[order]
        first = torch.cumsum(torch.bincount(row, minlength=rows.numel()), 0) - torch.bincount(row, minlength=rows.numel())
        keep = torch.arange(row.numel(), device=x.device) - first[row] < k
        sources.append(rows[row[keep]])
        targets.append(column[keep])
    edge_index = torch.stack([torch.cat(sources), torch.cat(targets)])
    return to_undirected(edge_index, num_nodes=num_items)


def sort_by_target(edge_index: Tensor, num_targets: Optional[int] = None) -> Tuple[Tensor, Optional[Tensor]]:
    """The edges ordered by target (stably, so each target's edges keep
    their order) and the permutation that did it, or ``None`` when they
    already were: the grouping that segment reductions and CSR products need."""
    target = edge_index[1]
    if target.numel() < 2 or not bool((target[1:] < target[:-1]).any()):
        return edge_index, None
    _, perm = index_sort(target, max_value=num_targets, stable=True)
    return edge_index[:, perm], perm


def with_self_loops(edge_index: Tensor, num_nodes: int, sort: bool = False) -> Tensor:
    """The edges without their self-loops, followed by one loop on each of
    the nodes ``0 .. num_nodes - 1`` (PyG's ``remove_self_loops`` then
    ``add_self_loops``): the graph GAT attends along. With ``sort``, the
    result is ordered by target (:func:`sort_by_target`).

    Under :func:`torch.jit.trace`, ``num_nodes`` may be a traced size (a 0-d
    tensor such as ``x.size(0)``): the loops are then made from it, so the
    trace adds as many as the graph it is given has nodes."""
    if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2:
        shape = list(edge_index.shape) if isinstance(edge_index, Tensor) else type(edge_index).__name__
        raise ValueError(f"edge_index must be a [2, num_edges] tensor, got {shape}")
    traced_size = torch.jit.is_tracing() and isinstance(num_nodes, Tensor) and num_nodes.dim() == 0 \
        and not num_nodes.is_floating_point()
    if not torch.compiler.is_compiling() and not traced_size and (
            not is_integer(num_nodes) or num_nodes < 0):
        raise ValueError(f"num_nodes must be a whole number >= 0, got {num_nodes!r}")
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    loops = torch.arange(num_nodes, device=edge_index.device).expand(2, -1)
    edge_index = torch.cat([edge_index, loops], dim=1)
    return sort_by_target(edge_index, num_nodes)[0] if sort else edge_index
