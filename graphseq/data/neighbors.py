"""Neighbour sampling for graphs too large for full-batch training, through
PyG's :class:`~torch_geometric.loader.NeighborLoader`: mini-batches of seed
nodes with a sampled ``num_neighbors[k]`` in-neighbours per node at hop
``k``, and layer-wise inference over the whole graph, one hop at a time,
so no pass ever holds more than one layer's messages of one batch.

PyG samples with ``pyg-lib`` or ``torch-sparse``, compiled extensions that
PyPI does not carry for every torch build. Where neither is installed,
:class:`TorchNeighborSampler` does the same directional sampling with torch
operations alone, behind PyG's own loader (batching, feature slicing,
workers): install ``pyg-lib`` and PyG's sampler is used instead.
"""
from __future__ import annotations

import warnings
from typing import Callable, List, Optional, Sequence

import torch
import torch_geometric.typing
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader
from torch_geometric.sampler import NeighborSampler, SamplerOutput
from tqdm import tqdm

from ..errors import GraphseqError, draw_bars

Layer = Callable[[Tensor, Tensor], Tensor]


def has_compiled_sampler() -> bool:
    return torch_geometric.typing.WITH_PYG_LIB or torch_geometric.typing.WITH_TORCH_SPARSE


class TorchNeighborSampler(NeighborSampler):
    """PyG's :class:`~torch_geometric.sampler.NeighborSampler`, sampling
    homogeneous graphs with torch operations where neither ``pyg-lib`` nor
    ``torch-sparse`` is installed (directional subgraphs, uniform, with or
    without replacement; ``-1`` takes every neighbour). Seeds come first in
    the sampled nodes, and ``edge_index[1]`` indexes the node receiving
    each sampled edge, as with PyG's compiled samplers."""

    def _sample(self, seed: Tensor, seed_time: Optional[Tensor] = None, **kwargs) -> SamplerOutput:
        if has_compiled_sampler() or isinstance(seed, dict):
            return super()._sample(seed, seed_time, **kwargs)
        if seed_time is not None or self.disjoint or self.subgraph_type.value != "directional":
            raise NotImplementedError("graphseq's torch sampler does directional, non-temporal, "
                                      "non-disjoint sampling only; install pyg-lib for the rest")
        colptr, row = self.colptr, self.row
        num_nodes = colptr.numel() - 1
        local = torch.full((num_nodes,), -1, dtype=torch.long)
        nodes = seed.to(torch.long)  # A batch's seeds are distinct and come first.
        local[nodes] = torch.arange(nodes.numel())
        frontier, parts = nodes, [nodes]
        rows: List[Tensor] = []
        cols: List[Tensor] = []
        edges: List[Tensor] = []
        num_sampled_nodes, num_sampled_edges = [nodes.numel()], []
        count = nodes.numel()
        for fanout in self.num_neighbors.get_mapped_values():
            position, target = _sample_in_edges(colptr, frontier, fanout, self.replace)
            source = row[position]
            fresh = _first_occurrences(source[local[source] < 0])
            local[fresh] = torch.arange(count, count + fresh.numel())
            count += fresh.numel()
            rows.append(local[source])
            cols.append(local[target])
            edges.append(position)
            parts.append(fresh)
            num_sampled_nodes.append(fresh.numel())
            num_sampled_edges.append(position.numel())
            frontier = fresh
        node = torch.cat(parts)
        return SamplerOutput(node=node, row=torch.cat(rows), col=torch.cat(cols), edge=torch.cat(edges),
                             batch=None, num_sampled_nodes=num_sampled_nodes,
                             num_sampled_edges=num_sampled_edges)


def _first_occurrences(ids: Tensor) -> Tensor:
    """The distinct values of ``ids`` in the order they first appear."""
    if ids.numel() == 0:
        return ids
    unique, inverse = torch.unique(ids, return_inverse=True)
    first = torch.full((unique.numel(),), ids.numel(), dtype=torch.long)
    first.scatter_reduce_(0, inverse, torch.arange(ids.numel()), reduce="amin")
    return unique[first.argsort()]


def _sample_in_edges(colptr: Tensor, targets: Tensor, fanout: int, replace: bool) -> tuple[Tensor, Tensor]:
    """Positions (in the CSC order of ``row``) of up to ``fanout`` incoming
    edges of each target, drawn uniformly, and the target of each."""
    start = colptr[targets]
    degree = colptr[targets + 1] - start
    if fanout >= 0 and replace:
        has = degree > 0
        owner = torch.arange(targets.numel()).repeat_interleave(torch.where(has, fanout, 0))
        offset = (torch.rand(owner.numel()) * degree[owner]).long()
        return start[owner] + offset, targets[owner]
    owner = torch.arange(targets.numel()).repeat_interleave(degree)  # one entry per incoming edge
    rank = torch.arange(owner.numel()) - (degree.cumsum(0) - degree).repeat_interleave(degree)
    position = start[owner] + rank
    if fanout >= 0 and bool((degree > fanout).any()):
        # Shuffle each target's edges (sort by target, then a random key) and keep the first few.
        order = torch.argsort(owner.double() + torch.rand(owner.numel(), dtype=torch.float64))
        position = position[order]
        keep = rank < fanout  # After the sort, ``rank`` still counts positions within each target.
        position, owner = position[keep], owner[keep]
    return position, targets[owner]


def _check_hops(name: str, num_neighbors: Sequence[int]) -> None:
    if len(num_neighbors) == 0:
        raise GraphseqError(f"{name} needs num_neighbors for at least one hop (e.g. [10, 10], -1 for every "
                            f"neighbour), got none")


def make_sampler(data: Data, num_neighbors: Sequence[int], replace: bool = False) -> NeighborSampler:
    """PyG's neighbour sampler for ``data`` (it sorts the edges by target once:
    build it once and hand it to every loader), or :class:`TorchNeighborSampler`
    where no compiled sampler is installed."""
    _check_hops("make_sampler", num_neighbors)
    if has_compiled_sampler():
        return NeighborSampler(data, num_neighbors=list(num_neighbors), replace=replace)
    with warnings.catch_warnings():  # PyG warns that its own fallback needs pyg-lib.
        warnings.simplefilter("ignore", UserWarning)
        return TorchNeighborSampler(data, num_neighbors=list(num_neighbors), replace=replace)


def neighbor_loader(data: Data, num_neighbors: Sequence[int], input_nodes: Optional[Tensor] = None,
                    batch_size: int = 512, shuffle: bool = False, num_workers: int = 0,
                    sampler: Optional[NeighborSampler] = None, **kwargs) -> NeighborLoader:
    """PyG's ``NeighborLoader`` over ``data`` with ``sampler`` (default:
    :func:`make_sampler`). Each batch's first ``batch.batch_size`` nodes are
    its seeds (``input_nodes``), ``batch.n_id`` their global ids."""
    _check_hops("neighbor_loader", num_neighbors)
    sampler = sampler or make_sampler(data, num_neighbors, kwargs.pop("replace", False))
    return NeighborLoader(data, num_neighbors=list(num_neighbors), input_nodes=input_nodes,
                          batch_size=batch_size, shuffle=shuffle, num_workers=num_workers,
                          neighbor_sampler=sampler, persistent_workers=num_workers > 0, **kwargs)


@torch.no_grad()
def layerwise_inference(layers: Sequence[Layer], x: Tensor, edge_index: Tensor, num_nodes: int,
                        batch_size: int = 4096, device: Optional[torch.device] = None,
                        quiet: bool = True) -> Tensor:
    """Every node's output of a stack of message-passing ``layers`` (functions
    ``(x, edge_index) -> x``, one hop each), computed one layer at a time:
    batches of ``batch_size`` target nodes with all their in-neighbours, so
    the memory of a pass is one layer's messages of one batch. Equal to the
    full-graph forward pass of the same layers (in eval mode)."""
    device = device or x.device
    graph = Data(edge_index=edge_index.cpu(), num_nodes=num_nodes)
    loader = neighbor_loader(graph, [-1], batch_size=batch_size)
    for k, layer in enumerate(layers):
        outputs: List[Tensor] = []
        for batch in tqdm(loader, desc=f"inference, layer {k + 1}/{len(layers)}", disable=not draw_bars(quiet),
                          leave=False):
            # ``n_id``: the global ids of the batch's nodes, its targets first.
            h = layer(x[batch.n_id.to(x.device)].to(device), batch.edge_index.to(device))
            outputs.append(h[:batch.batch_size].to(x.device))
        x = torch.cat(outputs)  # The batches cover the nodes in order, seeds first.
    return x
