"""The order in which a batch of chains is stepped. A recurrent layer on
chain graphs (:class:`~graphseq.nn.ChainRecurrence`) steps every chain at
once, one frontier of nodes per step; :func:`chain_schedule` finds each
node's step from ``edge_index`` alone (its depth along its chain), checks
that the edges do form chains, and lays the nodes out step after step, with
chains sorted by length: the layout of a
:class:`torch.nn.utils.rnn.PackedSequence`.
"""
from __future__ import annotations

import operator
from typing import List, NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor

from . import checks


class ChainSchedule(NamedTuple):
    """The order in which a batch of chains is stepped, in both directions.

    Chains are ranked by length, longest first. In step order, step ``t``
    holds the ``sizes[t]`` chains longer than ``t``, by rank, so the
    predecessors of step ``t`` are the first ``sizes[t]`` rows of step
    ``t - 1``. The reverse direction steps each chain from its end; its step
    sizes and chain ranks are the same.

    Attributes:
        num_nodes (int), num_edges (int), num_graphs (int): the sizes it was made for.
        sizes (list of int): the number of nodes in each step (non-increasing).
        orders: per direction, the node at each row of the step order ``[num_nodes]``.
        positions: per direction, the row of each node in the step order ``[num_nodes]``.
        chain_graph: the graph of each chain, by rank ``[num_chains]``.
        graph_chain: the chain of each graph ``[num_graphs]`` when every graph
            holds one, else :obj:`None` (some graphs have no nodes).
        step_edges: for each step after the first, its edges in step-local
            rows, ``[[0, 1, ...], [0, 1, ...]]`` ``[2, sizes[t]]``: edge ``k``
            runs from row ``k`` of the previous step to row ``k`` of this one.
        edge_ids: per direction and step after the first, the edge of
            ``edge_index`` each of those edges is ``[sizes[t]]``.
        edge_index, batch: the chains it was made for (the caller's
            tensors, not copies); a layer given the schedule with other
            chains (of the same sizes), or with these tensors edited in
            place since, refuses it, except under :func:`torch.compile`,
            which cannot read them.
        versions: the count of in-place edits of ``edge_index`` and
            ``batch`` when it was made (:obj:`None` where not counted).
    """
    num_nodes: int
    num_edges: int
    num_graphs: int
    sizes: List[int]
    orders: Tuple[Tensor, Tensor]
    positions: Tuple[Tensor, Tensor]
    chain_graph: Tensor
    graph_chain: Optional[Tensor]
    step_edges: List[Tensor]
    edge_ids: Tuple[List[Tensor], List[Tensor]]
    edge_index: Optional[Tensor] = None  # the chains it was made for, to check a reuse
    batch: Optional[Tensor] = None
    versions: Tuple[Optional[int], Optional[int]] = (None, None)

    def to(self, device: Union[str, torch.device]) -> "ChainSchedule":
        """The same schedule with its tensors on ``device``."""
        def move(value):
            if isinstance(value, Tensor):
                return value.to(device)
            if isinstance(value, (tuple, list)) and not isinstance(value, ChainSchedule):
                return type(value)(move(v) for v in value)
            return value
        moved = ChainSchedule(*(move(value) for value in self))
        return moved._replace(versions=_versions(moved.edge_index, moved.batch))


def _versions(*tensors: Optional[Tensor]) -> Tuple[Optional[int], ...]:
    return tuple(None if tensor is None else checks.version(tensor) for tensor in tensors)


@torch.compiler.disable
def chain_schedule(edge_index: Tensor, num_nodes: int, batch: Optional[Tensor] = None,
                   num_graphs: Optional[int] = None,
                   layer: checks.Layer = "ChainRecurrence") -> ChainSchedule:
    """Finds the step of every node of a batch of chains: its depth along the
    chain, counted by pointer jumping (``log2`` of the longest chain rounds),
    on the host, with one copy of ``edge_index`` and ``batch`` there.

    Every node has at most one predecessor and at most one successor, there
    are no cycles, edges stay inside their graph, and each graph (all nodes
    when ``batch`` is ``None``) holds one chain, whose final state is the
    graph's. Breaking any of these raises a :class:`ValueError`.

    A layer computes the schedule itself; pass it to the layer's ``forward``
    (``schedule=``) to reuse it, or to run the layer under
    ``torch.compile(fullgraph=True)``, where the number and sizes of the steps
    must be known on the host before tracing.

    ``num_nodes`` is a whole number >= 0 (a Python, numpy or 0-d tensor
    integer). ``num_graphs`` (a whole number >= 1, at least the graphs ``batch``
    names) makes room for graphs without nodes at the end of a batch; a
    layer passes the graphs of its initial state, and itself as ``layer``,
    the name its errors carry.
    """
    name = checks.layer_name(layer)
    num_nodes = _whole_number(name, "num_nodes", num_nodes)
    # A layer's num_graphs is its initial state's; a caller's own is an argument.
    from_layer = isinstance(layer, torch.nn.Module)
    if num_graphs is not None and not from_layer:
        checks.check_sizes(name, num_graphs=num_graphs)
    if not isinstance(edge_index, Tensor):
        checks.check_edge_index(name, edge_index, num_nodes)  # names the type
    checks.check_tensor(name, batch, "batch")
    given = (edge_index, batch)  # kept by reference: no copy on the path of every forward
    device = edge_index.device  # The values are checked on the host copy: one transfer.
    edge_index = edge_index.cpu()
    batch = None if batch is None else batch.cpu()
    checks.check_edge_index(name, edge_index, num_nodes)
    checks.check_batch(name, batch, num_nodes)
    source, target = edge_index.long()
    num_edges = source.numel()
    needed = int(batch.max()) + 1 if batch is not None and batch.numel() else 1
    if num_graphs is None:
        num_graphs = needed
    elif needed > num_graphs:
        source = "the initial state has" if from_layer else "num_graphs is"
        raise ValueError(f"{name}: batch holds {needed} graphs, but {source} {num_graphs}")
    batch = torch.zeros(num_nodes, dtype=torch.long) if batch is None else batch.long()

    in_degree = torch.bincount(target, minlength=num_nodes)
    out_degree = torch.bincount(source, minlength=num_nodes)
    if (in_degree > 1).any():
        node = int((in_degree > 1).nonzero()[0])
        raise ValueError(f"{name} steps along chains, but node {node} has "
                         f"{int(in_degree[node])} predecessors (at most one is allowed)")
    if (out_degree > 1).any():
        node = int((out_degree > 1).nonzero()[0])
        raise ValueError(f"{name} steps along chains, but node {node} has "
                         f"{int(out_degree[node])} successors (at most one is allowed)")
    if (batch[source] != batch[target]).any():
        edge = int((batch[source] != batch[target]).nonzero()[0])
        raise ValueError(f"{name}: edge {int(source[edge])} -> {int(target[edge])} joins "
                         f"two graphs of `batch`")

    # Pointer jumping: after round k every node knows its ancestor 2^k steps
    # up (or -1 past the chain start), its distance to it, and its root so far.
    predecessor = torch.full((num_nodes,), -1, dtype=torch.long)
    predecessor[target] = source
    has_predecessor = predecessor >= 0
    depth = has_predecessor.long()
    root = torch.where(has_predecessor, predecessor, torch.arange(num_nodes))
    ancestor = predecessor
    for _ in range(max(num_nodes, 1).bit_length() + 1):
        jumping = ancestor >= 0
        if not jumping.any():
            break
        up = ancestor.clamp(min=0)
        depth = torch.where(jumping, depth + depth[up], depth)
        root = torch.where(jumping, root[up], root)
        ancestor = torch.where(jumping, ancestor[up], ancestor)
    if (ancestor >= 0).any():
        raise ValueError(f"{name}: edge_index holds a cycle, but a chain must start somewhere")

    starts = (~has_predecessor).nonzero().flatten()  # [num_chains]
    chains_per_graph = torch.bincount(batch[starts], minlength=num_graphs)
    if (chains_per_graph > 1).any():
        graph = int((chains_per_graph > 1).nonzero()[0])
        raise ValueError(
            f"{name}: graph {graph} holds {int(chains_per_graph[graph])} chains, but the final "
            f"state has one row per graph; pass `batch` with one chain per graph "
            f"(e.g. batch=graphseq.graphs.lengths_to_batch(lengths))")

    num_chains = starts.numel()
    nodes_per_root = torch.bincount(root, minlength=num_nodes)
    length = nodes_per_root[starts]  # [num_chains]
    by_length = torch.sort(length, descending=True, stable=True).indices
    rank = torch.empty(num_nodes, dtype=torch.long)
    rank[starts[by_length]] = torch.arange(num_chains)
    step_sizes = torch.bincount(depth, minlength=0) if num_nodes else torch.zeros(0, dtype=torch.long)

    # The edge into each node (forward direction) and out of it (reverse).
    edge_into = torch.full((num_nodes,), -1, dtype=torch.long)
    edge_into[target] = torch.arange(num_edges)
    edge_out_of = torch.full((num_nodes,), -1, dtype=torch.long)
    edge_out_of[source] = torch.arange(num_edges)

    orders, positions, edge_ids = [], [], []
    sizes = step_sizes.tolist()
    first = sizes[0] if sizes else 0
    for step, edge_of in ((depth, edge_into), (nodes_per_root[root] - 1 - depth, edge_out_of)):
        order = torch.argsort(step * max(num_chains, 1) + rank[root])
        position = torch.empty_like(order)
        position[order] = torch.arange(num_nodes)
        orders.append(order.to(device))
        positions.append(position.to(device))
        edge_ids.append(list(edge_of[order[first:]].to(device).split(sizes[1:])))
    chain_graph = batch[starts[by_length]]
    graph_chain = torch.argsort(chain_graph).to(device) if num_chains == num_graphs else None
    frontier = torch.arange(first, device=device).expand(2, -1)
    step_edges = [frontier[:, :size] for size in sizes[1:]]
    return ChainSchedule(num_nodes, num_edges, num_graphs, sizes, tuple(orders), tuple(positions),
                         chain_graph.to(device), graph_chain, step_edges,
                         tuple(edge_ids), *given, _versions(*given))


def _whole_number(name: str, label: str, value) -> int:
    """``value`` as an int if it is a whole number >= 0 (anything
    :func:`operator.index` takes but a bool), else a :class:`ValueError`."""
    try:
        whole = None if isinstance(value, bool) or \
            isinstance(value, Tensor) and value.dtype == torch.bool else operator.index(value)
    except (TypeError, RuntimeError):
        whole = None
    if whole is None or whole < 0:
        raise ValueError(f"{name} needs {label} to be a whole number >= 0, got {value!r}")
    return whole


def _same(kept: Optional[Tensor], given: Optional[Tensor], num_nodes: int) -> bool:
    """Whether two ``edge_index`` (or ``batch``: None is one graph) are the same."""
    if kept is given:
        return True
    if kept is None or given is None:
        kept, given = [torch.zeros(num_nodes, dtype=torch.long) if t is None else t.as_subclass(Tensor).cpu()
                       for t in (kept, given)]
    else:
        kept, given = kept.as_subclass(Tensor), given.as_subclass(Tensor)
    return kept.shape == given.shape and torch.equal(kept.to(given.device, given.dtype), given)


def _same_edges(kept: Optional[Tensor], given: Tensor, num_nodes: int) -> bool:
    """Whether two ``edge_index`` hold the same edges in any column order
    (to word the refusal of a schedule; never on the path of one taken)."""
    if kept is None or kept.shape != given.shape:
        return False

    def edges(edge_index: Tensor) -> Tensor:  # one sortable key per edge
        source, target = edge_index.as_subclass(Tensor).to(given.device, torch.long)
        return torch.sort(source * num_nodes + target).values
    return torch.equal(edges(kept), edges(given))


def check_schedule(layer: checks.Layer, schedule: ChainSchedule, x: Tensor, edge_index: Tensor,
                   batch: Optional[Tensor], num_graphs: Optional[int]) -> None:
    """Refuses a ``schedule`` given to ``layer`` with other chains than it was
    made for (``num_graphs``: those of the initial state, None if unknown)."""
    name = checks.layer_name(layer)
    if not isinstance(schedule, ChainSchedule):
        raise TypeError(f"{name} expects schedule from graphseq.nn.chain_schedule, "
                        f"got {type(schedule).__name__}")
    # The checks chain_schedule makes, but for the very tensors the schedule
    # was made from (checked then; edits are caught below): no host read on
    # the path of a reused schedule.
    if edge_index is not schedule.edge_index or edge_index is None:
        checks.check_edge_index(layer, edge_index, x.size(0))
    if batch is not schedule.batch:
        checks.check_batch(layer, batch, x.size(0))
    if schedule.orders[0].device != x.device:
        raise ValueError(f"{name}: the schedule is on {schedule.orders[0].device}, but x is on {x.device}; "
                         f"move it with schedule.to(x.device)")
    if schedule.num_nodes != x.size(0) or schedule.num_edges != edge_index.size(-1):
        raise ValueError(f"{name}: the schedule is for {schedule.num_nodes} nodes and "
                         f"{schedule.num_edges} edges, but x has {x.size(0)} nodes and "
                         f"edge_index {edge_index.size(-1)} edges")
    if batch is None and schedule.num_graphs != 1:
        raise ValueError(f"{name}: the schedule was made for {schedule.num_graphs} graphs, but no batch "
                         f"is given, so x is one graph (one chain); pass the batch the schedule was made for")
    if num_graphs is not None and num_graphs != schedule.num_graphs:
        raise ValueError(f"{name}: the schedule is for {schedule.num_graphs} graphs, "
                         f"but the initial state has {num_graphs}")
    if not checks.reading_values() or schedule.edge_index is None:
        return
    for label, kept, given, version in zip(("edge_index", "batch"), (schedule.edge_index, schedule.batch),
                                           (edge_index, batch), schedule.versions):
        if kept is given and version is not None and checks.version(given) != version:
            raise ValueError(f"{name}: {label} was edited in place after its schedule was made; "
                             f"make one with chain_schedule for the chains it holds now")
    same_batch = _same(schedule.batch, batch, x.size(0))
    if not (same_batch and _same(schedule.edge_index, edge_index, x.size(0))):
        if same_batch and _same_edges(schedule.edge_index, edge_index, x.size(0)):
            raise ValueError(f"{name}: the schedule was made for the same edges in another order (edge "
                             f"ids differ); make a schedule for this edge_index with chain_schedule")
        raise ValueError(f"{name}: the schedule was made for other chains than edge_index and batch "
                         f"(the same sizes, other edges); make one with chain_schedule for these")
