"""Pure graph builders: each returns an ``edge_index`` (source row 0, target
row 1, PyG's convention) for a batch of graphs whose nodes are numbered graph
after graph. They hold the one idea graphseq is built on: attention, recurrence
and few-shot learning differ mainly in the graph that messages travel along.
"""
from __future__ import annotations

from typing import Sequence, Union

import torch
from torch import Tensor

Lengths = Union[Sequence[int], Tensor, int]


def _as_lengths(lengths: Lengths) -> Tensor:
    if isinstance(lengths, int):
        lengths = [lengths]
    lengths = torch.as_tensor(lengths, dtype=torch.long).flatten().cpu()
    if (lengths < 0).any():
        raise ValueError(f"graph sizes must be non-negative, got {lengths.tolist()}")
    return lengths


def lengths_to_batch(lengths: Lengths) -> Tensor:
    """The PyG ``batch`` vector (graph id of each node) for graphs of the given sizes."""
    lengths = _as_lengths(lengths)
    return torch.repeat_interleave(torch.arange(lengths.numel()), lengths)


def batch_to_lengths(batch: Tensor, num_graphs: int | None = None) -> Tensor:
    """The number of nodes in each graph of a ``batch`` vector."""
    if num_graphs is None:
        num_graphs = int(batch.max()) + 1 if batch.numel() else 0
    return torch.bincount(batch.cpu(), minlength=num_graphs)


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
