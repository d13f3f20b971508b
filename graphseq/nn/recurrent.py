"""Recurrent networks as message passing on chain graphs. A recurrent layer
applies one cell along the edges of a chain, ``h_t = f(h_{t-1}, x_t)``: the
message a node receives is its predecessor's state, and the update is the
cell. RNN, LSTM, GRU and ON-LSTM share everything but that update rule, so
one engine (:class:`ChainRecurrence`) finds the order of computation from
``edge_index`` and steps every chain of a batch at once; each cell below is
only its equations.

How the engine maps onto :class:`~torch_geometric.nn.MessagePassing`: the
step of a node is its depth along its chain. At step ``t`` the frontier (all
nodes of depth ``t``) receives one message each, ``message(h_j) = h_j``, along
the edges from the frontier of step ``t - 1``; with at most one predecessor
the sum aggregation of that message is the message itself. ``propagate``
would scatter it through an index per step; the engine instead lays the
nodes out step after step with chains sorted by length (the layout of a
:class:`torch.nn.utils.rnn.PackedSequence`), so that the predecessors of the
frontier are exactly the first rows of the previous frontier and the gather is
a slice. The inputs of all nodes are projected in one matrix product before
the loop; each step multiplies only the frontier's states by ``W_hh``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter
from torch_geometric.nn import MessagePassing

State = Union[Tensor, Tuple[Tensor, Tensor]]


@dataclass
class ChainSchedule:
    """The order in which a batch of chains is stepped, in both directions.

    Chains are ranked by length, longest first. In step order, step ``t``
    holds the ``sizes[t]`` chains longer than ``t``, by rank, so the
    predecessors of step ``t`` are the first ``sizes[t]`` rows of step
    ``t - 1``. The reverse direction steps each chain from its end; its step
    sizes and chain ranks are the same.

    Attributes:
        orders: per direction, the node at each row of the step order ``[num_nodes]``.
        positions: per direction, the row of each node in the step order ``[num_nodes]``.
        sizes: the number of nodes in each step (non-increasing).
        chain_graph: the graph of each chain, by rank ``[num_chains]``.
        num_graphs: the number of graphs of the batch.
    """
    orders: Tuple[Tensor, Tensor]
    positions: Tuple[Tensor, Tensor]
    sizes: List[int]
    chain_graph: Tensor
    num_graphs: int


def chain_schedule(edge_index: Tensor, num_nodes: int, batch: Optional[Tensor] = None,
                   num_graphs: Optional[int] = None, layer: str = "ChainRecurrence") -> ChainSchedule:
    """Finds the step of every node of a batch of chains: its depth along the
    chain, counted by pointer jumping (``log2`` of the longest chain rounds).

    Every node has at most one predecessor and at most one successor, there
    are no cycles, edges stay inside their graph, and each graph (all nodes
    when ``batch`` is ``None``) holds one chain, whose final state is the
    graph's. Breaking any of these raises a :class:`ValueError`.
    """
    device = edge_index.device
    edge_index = edge_index.cpu()
    source, target = edge_index
    if num_graphs is None:
        num_graphs = int(batch.max()) + 1 if batch is not None and batch.numel() else 1
    batch = torch.zeros(num_nodes, dtype=torch.long) if batch is None else batch.cpu()

    in_degree = torch.bincount(target, minlength=num_nodes)
    out_degree = torch.bincount(source, minlength=num_nodes)
    if (in_degree > 1).any():
        node = int((in_degree > 1).nonzero()[0])
        raise ValueError(f"{layer} steps along chains, but node {node} has "
                         f"{int(in_degree[node])} predecessors (at most one is allowed)")
    if (out_degree > 1).any():
        node = int((out_degree > 1).nonzero()[0])
        raise ValueError(f"{layer} steps along chains, but node {node} has "
                         f"{int(out_degree[node])} successors (at most one is allowed)")
    if (batch[source] != batch[target]).any():
        edge = int((batch[source] != batch[target]).nonzero()[0])
        raise ValueError(f"{layer}: edge {int(source[edge])} -> {int(target[edge])} joins "
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
        raise ValueError(f"{layer}: edge_index holds a cycle, but a chain must start somewhere")

    starts = (~has_predecessor).nonzero().flatten()  # [num_chains]
    chains_per_graph = torch.bincount(batch[starts], minlength=num_graphs)
    if (chains_per_graph > 1).any():
        graph = int((chains_per_graph > 1).nonzero()[0])
        raise ValueError(
            f"{layer}: graph {graph} holds {int(chains_per_graph[graph])} chains, but the final "
            f"state has one row per graph; pass `batch` with one chain per graph "
            f"(e.g. batch=graphseq.graphs.lengths_to_batch(lengths))")

    num_chains = starts.numel()
    nodes_per_root = torch.bincount(root, minlength=num_nodes)
    length = nodes_per_root[starts]  # [num_chains]
    by_length = torch.sort(length, descending=True, stable=True).indices
    rank = torch.empty(num_nodes, dtype=torch.long)
    rank[starts[by_length]] = torch.arange(num_chains)
    sizes = torch.bincount(depth, minlength=0).tolist() if num_nodes else []

    orders, positions = [], []
    for step in (depth, nodes_per_root[root] - 1 - depth):  # forward, reverse
        order = torch.argsort(step * max(num_chains, 1) + rank[root])
        position = torch.empty_like(order)
        position[order] = torch.arange(num_nodes)
        orders.append(order.to(device))
        positions.append(position.to(device))
    chain_graph = batch[starts[by_length]].to(device)
    return ChainSchedule(tuple(orders), tuple(positions), sizes, chain_graph, num_graphs)


class ChainRecurrence(MessagePassing):
    r"""The machinery shared by every recurrent layer: a cell stepped along
    the edges of a batch of chains, in one or both directions, stacked in
    layers. Subclasses give the number of gate blocks and the update rule
    :meth:`cell`; the weights follow :class:`torch.nn.LSTM`'s names and shapes
    (``weight_ih_l{k}``, ``weight_hh_l{k}``, ``bias_ih_l{k}``, ``bias_hh_l{k}``,
    with ``_reverse`` for the second direction).

    .. math::
        \mathbf{h}_i = f_{W}\big(\mathbf{h}_j, \mathbf{x}_i\big),
        \qquad j \to i \in \mathcal{E}

    A node without a predecessor starts a chain from its graph's initial
    state; the final state of a graph is the state at the end of its chain.
    The order of computation comes from ``edge_index`` alone, never from where
    nodes sit in memory.

    Args:
        input_size (int): size of each node's input features.
        hidden_size (int): size of the hidden state.
        num_layers (int): number of stacked layers. (default: :obj:`1`)
        bias (bool): learn the biases ``b_ih`` and ``b_hh``. (default: :obj:`True`)
        dropout (float): dropout probability on the outputs of every layer
            but the last, during training. (default: :obj:`0.`)
        bidirectional (bool): also run along the reversed chains and
            concatenate both directions' outputs. (default: :obj:`False`)
        learn_initial_state (bool): learn one initial state per layer and
            direction, shared by all graphs, instead of zeros.
            (default: :obj:`False`)
    """

    gate_blocks: int = 1  # the input projection has gate_blocks * hidden_size rows
    has_cell_state: bool = False

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 dropout: float = 0.0, bidirectional: bool = False,
                 learn_initial_state: bool = False, **kwargs):
        kwargs.setdefault("aggr", "sum")
        super().__init__(node_dim=0, **kwargs)
        if num_layers < 1:
            raise ValueError(f"{type(self).__name__} needs num_layers >= 1, got {num_layers}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"{type(self).__name__} needs dropout in [0, 1], got {dropout}")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.dropout = dropout
        self.bidirectional = bidirectional
        self.num_directions = 2 if bidirectional else 1
        self.learn_initial_state = learn_initial_state

        rows = self.gate_size()
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else hidden_size * self.num_directions
            for suffix in self._suffixes(layer):
                self.register_parameter(f"weight_ih{suffix}", Parameter(torch.empty(rows, layer_input)))
                self.register_parameter(f"weight_hh{suffix}", Parameter(torch.empty(rows, hidden_size)))
                if bias:
                    self.register_parameter(f"bias_ih{suffix}", Parameter(torch.empty(rows)))
                    self.register_parameter(f"bias_hh{suffix}", Parameter(torch.empty(rows)))
        if learn_initial_state:
            shape = (num_layers * self.num_directions, 1, hidden_size)
            self.initial_h = Parameter(torch.empty(shape))
            self.initial_c = Parameter(torch.empty(shape)) if self.has_cell_state else None
        self.reset_parameters()

    def gate_size(self) -> int:
        """Rows of each weight matrix: all gates of the cell stacked."""
        return self.gate_blocks * self.hidden_size

    def _suffixes(self, layer: int) -> List[str]:
        return [f"_l{layer}", f"_l{layer}_reverse"][:self.num_directions]

    def reset_parameters(self):
        super().reset_parameters()
        # torch.nn.RNNBase's initialisation: U(-1/sqrt(hidden), 1/sqrt(hidden)).
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0.0
        for name, parameter in self.named_parameters():
            if name.startswith("initial_"):
                torch.nn.init.zeros_(parameter)
            else:
                torch.nn.init.uniform_(parameter, -bound, bound)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None,
                state: Optional[State] = None) -> Tuple[Tensor, State]:
        """Runs the layers along the chains of ``edge_index``.

        Args:
            x (Tensor): node inputs ``[num_nodes, input_size]``.
            edge_index (Tensor): chain edges ``[2, num_edges]`` (e.g.
                :func:`graphseq.graphs.chain`); each node has at most one
                predecessor and one successor.
            batch (Tensor, optional): graph of each node ``[num_nodes]``, one
                chain per graph. :obj:`None` means one graph (one chain).
            state (Tensor or (Tensor, Tensor), optional): initial state per
                graph ``[num_layers * num_directions, num_graphs, hidden_size]``
                (a pair ``(h_0, c_0)`` for the LSTMs). Defaults to the learned
                initial state, else zeros.

        Returns:
            ``out`` ``[num_nodes, num_directions * hidden_size]`` and the final
            state of each graph, shaped like ``state``.
        """
        self._check_inputs(x, edge_index, batch)
        num_graphs = self._num_graphs(state, batch)
        schedule = chain_schedule(edge_index, x.size(0), batch, num_graphs, type(self).__name__)
        h_0, c_0 = self._initial_state(state, num_graphs, x)

        distances = []
        h_n, c_n = [], []
        layer_input = x
        for layer in range(self.num_layers):
            if layer > 0 and self.dropout > 0 and self.training:
                layer_input = F.dropout(layer_input, p=self.dropout, training=True)
            outputs = []
            for direction, suffix in enumerate(self._suffixes(layer)):
                index = layer * self.num_directions + direction
                out, h_last, c_last, distance = self._run_direction(
                    layer_input, schedule, direction, suffix, h_0[index],
                    None if c_0 is None else c_0[index])
                outputs.append(out)
                h_n.append(h_last)
                c_n.append(c_last)
                distances.append(distance)
            layer_input = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=1)
        self._keep_extras(distances)

        h_n = torch.stack(h_n)  # [num_layers * num_directions, num_graphs, hidden_size]
        if c_0 is None:
            return layer_input, h_n
        return layer_input, (h_n, torch.stack(c_n))

    def _run_direction(self, x: Tensor, schedule: ChainSchedule, direction: int, suffix: str,
                       h_0: Tensor, c_0: Optional[Tensor]):
        """One layer in one direction: project every input at once, then step
        the frontiers. Returns the outputs in node order, the final states per
        graph and the per-node extras of the cell (or None)."""
        weight_ih = getattr(self, f"weight_ih{suffix}")
        weight_hh = getattr(self, f"weight_hh{suffix}")
        bias_ih = getattr(self, f"bias_ih{suffix}", None)
        bias_hh = getattr(self, f"bias_hh{suffix}", None)
        input_bias, hidden_bias = self.split_biases(bias_ih, bias_hh)

        order, position, sizes = schedule.orders[direction], schedule.positions[direction], schedule.sizes
        x = x.index_select(0, order)  # step order
        if input_bias is None:
            projected = x.matmul(weight_ih.t())  # [num_nodes, gate_size]
        else:
            projected = torch.addmm(input_bias, x, weight_ih.t())

        # Split, not slice: the backward of a slice fills a zero tensor the
        # size of the whole input per step, the backward of one split
        # concatenates once. Likewise each step splits its states into those
        # carried on (the first sizes[t + 1] chains) and those of the chains
        # that end there; the ends come out shortest chain first, hence the
        # reversal in _per_graph.
        inputs = projected.split(sizes)  # per step [sizes[t], gate_size]
        h = h_0.index_select(0, schedule.chain_graph)  # [num_chains, hidden_size]
        c = None if c_0 is None else c_0.index_select(0, schedule.chain_graph)
        w_hh = weight_hh.t()
        hs, extras, h_ends, c_ends = [], [], [], []
        for t, size in enumerate(sizes):
            h, c, extra = self.cell(inputs[t], h, c, w_hh, hidden_bias)
            hs.append(h)
            if extra is not None:
                extras.append(extra)
            carried = sizes[t + 1] if t + 1 < len(sizes) else 0
            if carried < size:
                h, h_end = h.split([carried, size - carried])
                h_ends.append(h_end)
                if c is not None:
                    c, c_end = c.split([carried, size - carried])
                    c_ends.append(c_end)

        hidden = weight_hh.size(1)
        out = torch.cat(hs) if hs else projected.new_zeros(0, hidden)
        out = out.index_select(0, position)  # node order
        extra = torch.cat(extras).index_select(0, position) if extras else None
        h_n = self._per_graph(h_0, h_ends, schedule)
        c_n = None if c_0 is None else self._per_graph(c_0, c_ends, schedule)
        return out, h_n, c_n, extra

    @staticmethod
    def _per_graph(initial: Tensor, ends: List[Tensor], schedule: ChainSchedule) -> Tensor:
        """The final state of each graph: its chain's end, or the initial
        state if the graph has no nodes."""
        if not ends:
            return initial
        ends = torch.cat(ends[::-1])  # [num_chains, hidden_size], by rank
        if ends.size(0) == schedule.num_graphs:
            # One chain per graph, so every graph appears once.
            return ends.index_select(0, torch.argsort(schedule.chain_graph))
        return initial.index_copy(0, schedule.chain_graph, ends)

    def split_biases(self, bias_ih: Optional[Tensor], bias_hh: Optional[Tensor]):
        """The bias added to the input projection once for all nodes, and the
        bias the cell adds to the hidden projection itself. Both biases sit
        outside any non-linearity for most cells, so both go to the inputs."""
        if bias_ih is None:
            return None, None
        return bias_ih + bias_hh, None

    def cell(self, projected: Tensor, h: Tensor, c: Optional[Tensor], w_hh: Tensor,
             hidden_bias: Optional[Tensor]) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
        """The update rule for one frontier: ``projected`` ``[B, gate_size]``
        is ``W_ih x_i + b``, ``h`` and ``c`` ``[B, hidden_size]`` are the
        messages from the predecessors, ``w_hh`` is ``W_hh^T``. Returns the new
        ``h``, ``c`` (or None) and a per-node extra (or None)."""
        raise NotImplementedError

    def predecessor_states(self, h: Tensor, edge_index: Tensor) -> Tensor:
        """The message every node receives: its predecessor's state ``h``
        ``[num_nodes, channels]``, zeros where a chain starts. This is what
        each step of :meth:`forward` gathers for its frontier, there by
        slicing the step layout rather than scattering along the edges."""
        return self.propagate(edge_index, h=h, size=(h.size(0), h.size(0)))

    def message(self, h_j: Tensor) -> Tensor:
        return h_j  # [num_edges, channels]

    def _keep_extras(self, extras: List[Optional[Tensor]]) -> None:
        pass

    def _check_inputs(self, x: Tensor, edge_index: Tensor, batch: Optional[Tensor]) -> None:
        name = type(self).__name__
        if x.dim() != 2 or x.size(1) != self.input_size:
            raise ValueError(f"{name} expects x of shape [num_nodes, {self.input_size}], "
                             f"got {list(x.shape)}")
        if edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ValueError(f"{name} expects edge_index of shape [2, num_edges], "
                             f"got {list(edge_index.shape)}")
        if edge_index.dtype != torch.long:
            raise ValueError(f"{name} expects edge_index of dtype torch.long, got {edge_index.dtype}")
        if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= x.size(0)):
            raise ValueError(f"{name}: edge_index refers to node {int(edge_index.max())}, "
                             f"but x has {x.size(0)} nodes")
        if batch is not None and (batch.dim() != 1 or batch.size(0) != x.size(0)):
            raise ValueError(f"{name} expects batch of shape [{x.size(0)}] (one graph id per node), "
                             f"got {list(batch.shape)}")

    def _num_graphs(self, state: Optional[State], batch: Optional[Tensor]) -> int:
        """One graph without ``batch``; else as many as the initial state has
        (trailing graphs may be empty), or the largest graph id plus one."""
        if batch is None:
            return 1
        needed = int(batch.max()) + 1 if batch.numel() else 1
        if state is None:
            return needed
        h_0 = state[0] if isinstance(state, (tuple, list)) else state
        if h_0.dim() != 3:
            return needed  # _initial_state names the expected shape.
        if h_0.size(1) < needed:
            raise ValueError(f"{type(self).__name__}: batch holds {needed} graphs, "
                             f"but the initial state has {h_0.size(1)}")
        return h_0.size(1)

    def _initial_state(self, state: Optional[State], num_graphs: int, x: Tensor):
        """``(h_0, c_0)`` ``[num_layers * num_directions, num_graphs, hidden_size]``
        each; ``c_0`` is None for cells without a cell state."""
        name = type(self).__name__
        shape = [self.num_layers * self.num_directions, num_graphs, self.hidden_size]
        if state is None:
            if self.learn_initial_state:
                h_0 = self.initial_h.expand(shape)
                c_0 = self.initial_c.expand(shape) if self.has_cell_state else None
            else:
                h_0 = x.new_zeros(shape)
                c_0 = x.new_zeros(shape) if self.has_cell_state else None
            return h_0, c_0
        if self.has_cell_state:
            if not isinstance(state, (tuple, list)) or len(state) != 2:
                raise ValueError(f"{name} expects state as a pair (h_0, c_0)")
            h_0, c_0 = state
        else:
            if not isinstance(state, Tensor):
                raise ValueError(f"{name} expects state as one tensor h_0")
            h_0, c_0 = state, None
        for label, tensor in (("h_0", h_0), ("c_0", c_0)):
            if tensor is not None and list(tensor.shape) != shape:
                raise ValueError(f"{name} expects {label} of shape {shape} "
                                 f"[num_layers * num_directions, num_graphs, hidden_size], "
                                 f"got {list(tensor.shape)}")
        return h_0, c_0

    def extra_repr_args(self) -> List[str]:
        args = [f"{self.input_size}", f"{self.hidden_size}"]
        if self.num_layers != 1:
            args.append(f"num_layers={self.num_layers}")
        if not self.bias:
            args.append("bias=False")
        if self.dropout:
            args.append(f"dropout={self.dropout}")
        if self.bidirectional:
            args.append("bidirectional=True")
        if self.learn_initial_state:
            args.append("learn_initial_state=True")
        return args

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self.extra_repr_args())})"


class ChainRNN(ChainRecurrence):
    r"""The Elman recurrent network (:class:`torch.nn.RNN` with ``tanh``)
    stepped along chains.

    .. math::
        \mathbf{h}_i = \tanh\big(\mathbf{W}_{ih}\mathbf{x}_i + \mathbf{b}_{ih}
        + \mathbf{W}_{hh}\mathbf{h}_j + \mathbf{b}_{hh}\big), \qquad j \to i

    Args: see :class:`ChainRecurrence`; the ``state_dict`` is
    :class:`torch.nn.RNN`'s.

    Shapes:
        - **input:** ``x`` :math:`(|\mathcal{V}|, F_{in})`, ``edge_index``
          :math:`(2, |\mathcal{E}|)`, ``batch`` :math:`(|\mathcal{V}|)`,
          ``state`` :math:`(L \cdot D, G, H)`
        - **output:** ``out`` :math:`(|\mathcal{V}|, D \cdot H)`, ``h_n``
          :math:`(L \cdot D, G, H)`
    """

    gate_blocks = 1

    def cell(self, projected, h, c, w_hh, hidden_bias):
        return torch.addmm(projected, h, w_hh).tanh(), None, None


class ChainLSTM(ChainRecurrence):
    r"""Long short-term memory (`Hochreiter & Schmidhuber, 1997
    <https://www.bioinf.jku.at/publications/older/2604.pdf>`_) stepped along
    chains; :class:`torch.nn.LSTM`'s cell, gate order and ``state_dict``.

    .. math::
        (\mathbf{i}, \mathbf{f}, \mathbf{g}, \mathbf{o}) &= (\sigma, \sigma, \tanh, \sigma)
        \big(\mathbf{W}_{ih}\mathbf{x}_i + \mathbf{b}_{ih} + \mathbf{W}_{hh}\mathbf{h}_j
        + \mathbf{b}_{hh}\big) \\
        \mathbf{c}_i &= \mathbf{f} \odot \mathbf{c}_j + \mathbf{i} \odot \mathbf{g}, \qquad
        \mathbf{h}_i = \mathbf{o} \odot \tanh(\mathbf{c}_i)

    Args: see :class:`ChainRecurrence`.

    Shapes:
        - **input:** ``x`` :math:`(|\mathcal{V}|, F_{in})`, ``edge_index``
          :math:`(2, |\mathcal{E}|)`, ``batch`` :math:`(|\mathcal{V}|)`,
          ``state`` ``(h_0, c_0)`` each :math:`(L \cdot D, G, H)`
        - **output:** ``out`` :math:`(|\mathcal{V}|, D \cdot H)`,
          ``(h_n, c_n)`` each :math:`(L \cdot D, G, H)`
    """

    gate_blocks = 4
    has_cell_state = True

    def cell(self, projected, h, c, w_hh, hidden_bias):
        gates = torch.addmm(projected, h, w_hh)  # [B, 4 * hidden_size]
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.addcmul(f.sigmoid() * c, i.sigmoid(), g.tanh())
        return o.sigmoid() * c.tanh(), c, None


class ChainGRU(ChainRecurrence):
    r"""The gated recurrent unit (`Cho et al., 2014
    <https://arxiv.org/abs/1406.1078>`_) stepped along chains;
    :class:`torch.nn.GRU`'s cell, gate order and ``state_dict``.

    .. math::
        \mathbf{r} &= \sigma(\mathbf{W}_{ir}\mathbf{x}_i + \mathbf{b}_{ir}
            + \mathbf{W}_{hr}\mathbf{h}_j + \mathbf{b}_{hr}), \quad
        \mathbf{z} = \sigma(\mathbf{W}_{iz}\mathbf{x}_i + \mathbf{b}_{iz}
            + \mathbf{W}_{hz}\mathbf{h}_j + \mathbf{b}_{hz}) \\
        \mathbf{n} &= \tanh\big(\mathbf{W}_{in}\mathbf{x}_i + \mathbf{b}_{in}
            + \mathbf{r} \odot (\mathbf{W}_{hn}\mathbf{h}_j + \mathbf{b}_{hn})\big), \quad
        \mathbf{h}_i = (1 - \mathbf{z}) \odot \mathbf{n} + \mathbf{z} \odot \mathbf{h}_j

    Args: see :class:`ChainRecurrence`.

    Shapes:
        - **input:** ``x`` :math:`(|\mathcal{V}|, F_{in})`, ``edge_index``
          :math:`(2, |\mathcal{E}|)`, ``batch`` :math:`(|\mathcal{V}|)`,
          ``state`` :math:`(L \cdot D, G, H)`
        - **output:** ``out`` :math:`(|\mathcal{V}|, D \cdot H)`, ``h_n``
          :math:`(L \cdot D, G, H)`
    """

    gate_blocks = 3

    def split_biases(self, bias_ih, bias_hh):
        # b_hn sits inside r * (...), so only b_hr and b_hz join the inputs.
        if bias_ih is None:
            return None, None
        hidden = self.hidden_size
        input_bias = torch.cat([bias_ih[:2 * hidden] + bias_hh[:2 * hidden], bias_ih[2 * hidden:]])
        hidden_bias = torch.cat([bias_hh.new_zeros(2 * hidden), bias_hh[2 * hidden:]])
        return input_bias, hidden_bias

    def cell(self, projected, h, c, w_hh, hidden_bias):
        if hidden_bias is None:
            recurrent = h.mm(w_hh)  # [B, 3 * hidden_size]
        else:
            recurrent = torch.addmm(hidden_bias, h, w_hh)
        hidden = h.size(1)
        r, z = (projected[:, :2 * hidden] + recurrent[:, :2 * hidden]).sigmoid().chunk(2, dim=1)
        n = torch.addcmul(projected[:, 2 * hidden:], r, recurrent[:, 2 * hidden:]).tanh()
        return torch.lerp(n, h, z), None, None


def cumax(x: Tensor, dim: int = -1) -> Tensor:
    """The cumulative softmax of ON-LSTM, ``cumsum(softmax(x))``: a soft
    version of ``(0, ..., 0, 1, ..., 1)``, non-decreasing in ``[0, 1]``."""
    return torch.cumsum(F.softmax(x, dim=dim), dim=dim)


class ChainONLSTM(ChainRecurrence):
    r"""The ordered-neurons LSTM from `"Ordered Neurons: Integrating Tree
    Structures into Recurrent Neural Networks"
    <https://arxiv.org/abs/1810.09536>`_ (Shen et al., ICLR 2019), stepped
    along chains. Master gates split the cell into high-ranking neurons that
    keep long-term information and low-ranking ones that are overwritten
    often; each master gate acts on ``hidden_size / chunk_size`` chunks.

    .. math::
        \tilde{\mathbf{f}} &= \mathrm{cumax}(\mathbf{W}_{\tilde f}\mathbf{x}_i
            + \mathbf{U}_{\tilde f}\mathbf{h}_j + \mathbf{b}_{\tilde f}), \quad
        \tilde{\mathbf{i}} = 1 - \mathrm{cumax}(\mathbf{W}_{\tilde i}\mathbf{x}_i
            + \mathbf{U}_{\tilde i}\mathbf{h}_j + \mathbf{b}_{\tilde i}),
        \quad \boldsymbol{\omega} = \tilde{\mathbf{f}} \odot \tilde{\mathbf{i}} \\
        \hat{\mathbf{f}} &= \mathbf{f} \odot \boldsymbol{\omega} + (\tilde{\mathbf{f}} - \boldsymbol{\omega}),
        \quad \hat{\mathbf{i}} = \mathbf{i} \odot \boldsymbol{\omega} + (\tilde{\mathbf{i}} - \boldsymbol{\omega}) \\
        \mathbf{c}_i &= \hat{\mathbf{f}} \odot \mathbf{c}_j + \hat{\mathbf{i}} \odot \hat{\mathbf{c}},
        \quad \mathbf{h}_i = \mathbf{o} \odot \tanh(\mathbf{c}_i)

    with :math:`\mathbf{i}, \mathbf{f}, \mathbf{o}, \hat{\mathbf{c}}` the
    LSTM's gates and candidate. The rows of every weight are, in order: master
    forget (``C = hidden_size / chunk_size``), master input (``C``), then
    input, forget, cell and output gates (``hidden_size`` each), so
    ``weight_ih_l0`` is ``[4 * hidden_size + 2 * C, input_size]``.

    After each forward, :attr:`last_distances` ``[num_nodes, num_layers *
    num_directions]`` (detached, node order) holds the split point of each
    node's master forget gate, :math:`d^f_i = C - \sum_k \tilde{f}_{ik}`, the
    syntactic distance the paper reads trees from (Sec. 4.3).

    Args:
        chunk_size (int): neurons per master-gate chunk; divides
            ``hidden_size``. (default: :obj:`1`)
        others: see :class:`ChainRecurrence`.

    Shapes:
        - **input:** ``x`` :math:`(|\mathcal{V}|, F_{in})`, ``edge_index``
          :math:`(2, |\mathcal{E}|)`, ``batch`` :math:`(|\mathcal{V}|)`,
          ``state`` ``(h_0, c_0)`` each :math:`(L \cdot D, G, H)`
        - **output:** ``out`` :math:`(|\mathcal{V}|, D \cdot H)`,
          ``(h_n, c_n)`` each :math:`(L \cdot D, G, H)`
    """

    gate_blocks = 4
    has_cell_state = True

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 dropout: float = 0.0, bidirectional: bool = False, chunk_size: int = 1,
                 learn_initial_state: bool = False, **kwargs):
        if chunk_size < 1 or hidden_size % chunk_size:
            raise ValueError(f"ChainONLSTM needs chunk_size to divide hidden_size, "
                             f"got hidden_size={hidden_size}, chunk_size={chunk_size}")
        self.chunk_size = chunk_size
        self.num_chunks = hidden_size // chunk_size
        self.last_distances: Optional[Tensor] = None
        super().__init__(input_size, hidden_size, num_layers=num_layers, bias=bias, dropout=dropout,
                         bidirectional=bidirectional, learn_initial_state=learn_initial_state, **kwargs)

    def gate_size(self) -> int:
        return 4 * self.hidden_size + 2 * self.num_chunks

    def cell(self, projected, h, c, w_hh, hidden_bias):
        gates = torch.addmm(projected, h, w_hh)  # [B, 2 * chunks + 4 * hidden_size]
        chunks, size = self.num_chunks, self.chunk_size
        master_forget = cumax(gates[:, :chunks])  # [B, chunks]
        master_input = 1.0 - cumax(gates[:, chunks:2 * chunks])
        i, f, g, o = gates[:, 2 * chunks:].chunk(4, dim=1)
        overlap = master_forget * master_input

        # Each chunk's master value applies to its chunk_size neurons.
        def chunked(t: Tensor) -> Tensor:
            return t.view(-1, chunks, size)  # [B, chunks, chunk_size]

        w, mf, mi = overlap.unsqueeze(-1), master_forget.unsqueeze(-1), master_input.unsqueeze(-1)
        forget = chunked(f.sigmoid()) * w + (mf - w)
        write = chunked(i.sigmoid()) * w + (mi - w)
        c = (forget * chunked(c) + write * chunked(g.tanh())).view(-1, chunks * size)
        distance = chunks - master_forget.sum(dim=1)  # [B]
        return o.sigmoid() * c.tanh(), c, distance

    def _keep_extras(self, extras):
        if any(extra is None for extra in extras):  # a batch without nodes
            self.last_distances = None
        else:
            self.last_distances = torch.stack(extras, dim=1).detach()

    def extra_repr_args(self) -> List[str]:
        args = super().extra_repr_args()
        args.insert(2, f"chunk_size={self.chunk_size}")
        return args
