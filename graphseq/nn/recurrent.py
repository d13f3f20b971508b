"""Recurrent networks as message passing on chain graphs. A recurrent layer
applies one cell along the edges of a chain, ``h_t = f(h_{t-1}, x_t)``: the
message a node receives is its predecessor's state, and the update is the
cell. RNN, LSTM, GRU and ON-LSTM share everything but that update rule, so
one engine (:class:`ChainRecurrence`) finds the order of computation from
``edge_index`` and steps every chain of a batch at once; each cell
(:mod:`graphseq.nn.recurrent_cells`) is only its equations.

How the engine maps onto :class:`~torch_geometric.nn.MessagePassing`: the
step of a node is its depth along its chain. At step ``t`` the frontier (all
nodes of depth ``t``) receives one message each, ``message(state_j) =
state_j``, through :meth:`propagate` along the edges from the frontier of step
``t - 1``, so PyG's message and aggregate hooks (and its explainers) see every
message of every step. The nodes are laid out step after step with chains
sorted by length (the layout of a :class:`torch.nn.utils.rnn.PackedSequence`,
see :func:`chain_schedule`): the predecessors of the frontier are the first
rows of the previous frontier, edge ``k`` of a step ends at row ``k``, and the
sum over each node's single incoming message is the message itself. The
inputs of all nodes are projected in one matrix product before the loop; each
step multiplies only the frontier's messages by ``W_hh``. A cell fused by
hand (:mod:`graphseq.nn.fused_recurrent`) may run in place of the op-by-op
one, with the same numbers; the engine asks once per layer and direction.
"""
from __future__ import annotations

import math
import warnings
from typing import List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter
from torch_geometric.nn import MessagePassing

from . import checks, compat, fused_recurrent
from .chain_schedule import ChainSchedule, chain_schedule, check_schedule

State = Union[Tensor, Tuple[Tensor, Tensor]]


class ChainRecurrence(compat.WholeRowMessages, MessagePassing):
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
    nodes sit in memory. The message along an edge is the whole state of its
    source (``[h_j, c_j]`` for the LSTMs).

    A subclass writes :meth:`cell` op by op, reading its weights from its
    ``weights`` argument alone. A cell that :mod:`graphseq.nn.fused_recurrent`
    holds fused by hand gives its name there as ``fused_step`` (``"lstm"``,
    ``"gru"``), and the engine runs that step wherever it may (see
    :func:`~graphseq.nn.fused_recurrent.fused_steps`); a subclass that rewrites
    the cell runs its own. Setting ``fused_step = None`` on a layer runs its
    cell op by op.

    Args:
        input_size (int): size of each node's input features.
        hidden_size (int): size of the hidden state.
        num_layers (int): number of stacked layers. (default: :obj:`1`)
        bias (bool): learn the biases ``b_ih`` and ``b_hh``. (default: :obj:`True`)
        batch_first (bool): accepted as :obj:`False` only: nodes have no
            batch dimension. It stands where :class:`torch.nn.LSTM` has it, so
            that torch's positional arguments mean the same here.
            (default: :obj:`False`)
        dropout (float): dropout probability on the outputs of every layer
            but the last, during training. (default: :obj:`0.`)
        bidirectional (bool): also run along the reversed chains and
            concatenate both directions' outputs. (default: :obj:`False`)
        learn_initial_state (bool): learn one initial state per layer and
            direction, shared by all graphs, instead of zeros.
            (default: :obj:`False`)
        device, dtype: where and in which precision to create the parameters,
            as for :class:`torch.nn.LSTM`. (default: :obj:`None`)
    """

    gate_blocks: int = 1  # the input projection has gate_blocks * hidden_size rows
    has_cell_state: bool = False
    fused_step: Optional[str] = None  # the name of the cell fused by hand in graphseq.nn.fused_recurrent
    propagate_type = {"state": Tensor, "aligned": bool, "edge_id": Optional[Tensor]}

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, *,
                 learn_initial_state: bool = False, device=None, dtype=None, **kwargs):
        # The chain fixes the message passing (one message per node, summed),
        # so none of MessagePassing's own options apply.
        checks.check_kwargs(self, kwargs, allowed=())
        checks.check_option(self, "batch_first", batch_first, False,
                            "nodes are rows of x [num_nodes, input_size]; there is no batch dimension")
        super().__init__(aggr="sum", node_dim=0)
        name = type(self).__name__
        self._check_sizes(input_size, hidden_size, num_layers)
        checks.check_probability(self, "dropout", dropout)
        if dropout > 0 and num_layers == 1:  # torch.nn.RNNBase warns the same way
            warnings.warn(f"{name}: dropout acts between stacked layers, so dropout={dropout} with "
                          f"num_layers=1 has no effect", stacklevel=2)
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.dropout = dropout
        self.bidirectional = bidirectional
        self.num_directions = 2 if bidirectional else 1
        self.learn_initial_state = learn_initial_state

        factory = dict(device=device, dtype=dtype)
        rows, out = self.gate_size(), self.output_size()
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else out * self.num_directions
            for suffix in self._suffixes(layer):
                self.register_parameter(f"weight_ih{suffix}",
                                        Parameter(torch.empty(rows, layer_input, **factory)))
                self.register_parameter(f"weight_hh{suffix}", Parameter(torch.empty(rows, out, **factory)))
                if bias:
                    self.register_parameter(f"bias_ih{suffix}", Parameter(torch.empty(rows, **factory)))
                    self.register_parameter(f"bias_hh{suffix}", Parameter(torch.empty(rows, **factory)))
                self._register_extra_weights(suffix, factory)
        if learn_initial_state:
            shape = (num_layers * self.num_directions, 1)
            self.initial_h = Parameter(torch.empty(*shape, out, **factory))
            self.initial_c = Parameter(torch.empty(*shape, hidden_size, **factory)) \
                if self.has_cell_state else None
        self.reset_parameters()

    def _check_sizes(self, input_size: int, hidden_size: int, num_layers: int) -> None:
        """Refuses by name every size that is not a whole number in range
        (floats and bools too, which would fail later inside torch), before
        any weight is made. A cell with sizes of its own (``proj_size``,
        ``chunk_size``, stored before this runs) checks them after these, so
        that a bad ``hidden_size`` is named as such, not through them."""
        checks.check_sizes(self, input_size=input_size, hidden_size=hidden_size, num_layers=num_layers)

    def gate_size(self) -> int:
        """Rows of each weight matrix: all gates of the cell stacked."""
        return self.gate_blocks * self.hidden_size

    def output_size(self) -> int:
        """Width of ``h``, the output of each node and direction."""
        return self.hidden_size

    def state_size(self) -> int:
        """Width of a message: ``h``, then ``c`` for cells with a cell state."""
        return self.output_size() + (self.hidden_size if self.has_cell_state else 0)

    def _register_extra_weights(self, suffix: str, factory: dict) -> None:
        """Cells with weights beyond torch.nn.RNNBase's four register them here."""

    def _suffixes(self, layer: int) -> List[str]:
        return [f"_l{layer}", f"_l{layer}_reverse"][:self.num_directions]

    def reset_parameters(self):
        super().reset_parameters()
        # torch.nn.RNNBase's initialisation: U(-1/sqrt(hidden), 1/sqrt(hidden)).
        bound = 1.0 / math.sqrt(self.hidden_size)
        for name, parameter in self.named_parameters():
            if name.startswith("initial_"):
                torch.nn.init.zeros_(parameter)
            else:
                torch.nn.init.uniform_(parameter, -bound, bound)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None,
                state: Optional[State] = None,
                schedule: Optional[ChainSchedule] = None) -> Tuple[Tensor, State]:
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
                initial state, else zeros. It may hold more graphs than
                ``batch`` names (graphs without nodes at the end of a batch,
                which ``batch`` cannot show): their rows come back unchanged,
                so a smaller last batch of a stateful loop is not noticed here.
            schedule (ChainSchedule, optional): the step order of these
                chains from :func:`chain_schedule`, computed once and reused
                (needed under ``torch.compile(fullgraph=True)``).

        Returns:
            ``out`` ``[num_nodes, num_directions * hidden_size]`` (``proj_size``
            for a projected LSTM) and the final state of each graph, shaped
            like ``state``.
        """
        out, state, _ = self._run(x, edge_index, batch, state, schedule)
        return out, state

    def _run(self, x: Tensor, edge_index: Tensor, batch: Optional[Tensor], state: Optional[State],
             schedule: Optional[ChainSchedule]) -> Tuple[Tensor, State, List[Optional[Tensor]]]:
        """The forward pass; also returns each layer's and direction's per-node
        extras of the cell (None for cells without)."""
        checks.check_features(self, x, self.input_size)
        if x.dtype != self.weight_ih_l0.dtype and not torch.is_autocast_enabled(x.device.type):
            # Said as torch.nn.LSTM says it, not deep inside a matmul (autocast mixes dtypes itself).
            raise ValueError(f"{type(self).__name__} expects x of dtype {self.weight_ih_l0.dtype}, like its "
                             f"weights, got {x.dtype}; convert x (x.to({self.weight_ih_l0.dtype})) or the "
                             f"layer (layer.to({x.dtype}))")
        self._check_device(x=x, edge_index=edge_index, batch=batch)
        given_graphs = self._graphs_in_state(state, batch)
        if schedule is None:
            schedule = chain_schedule(edge_index, x.size(0), batch, given_graphs, self)
        else:
            check_schedule(self, schedule, x, edge_index, batch, given_graphs)
        h_0, c_0 = self._initial_state(state, schedule.num_graphs, x)

        extras = []
        h_n, c_n = [], []
        layer_input = x
        for layer in range(self.num_layers):
            if layer > 0 and self.dropout > 0 and self.training:
                layer_input = F.dropout(layer_input, p=self.dropout, training=True)
            outputs = []
            for direction in range(self.num_directions):
                index = layer * self.num_directions + direction
                out, h_last, c_last, extra = self._run_direction(
                    layer_input, schedule, layer, direction, h_0[index],
                    None if c_0 is None else c_0[index])
                outputs.append(out)
                h_n.append(h_last)
                c_n.append(c_last)
                extras.append(extra)
            layer_input = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=1)

        h_n = torch.stack(h_n)  # [num_layers * num_directions, num_graphs, output_size]
        if c_0 is None:
            return layer_input, h_n, extras
        return layer_input, (h_n, torch.stack(c_n)), extras

    def _check_device(self, **tensors: Optional[Tensor]) -> None:
        """Each tensor of ``tensors`` must be on the weights' device, said as
        torch.nn.LSTM says it, not deep inside an index or a matrix product
        (what is not a tensor is left to the type checks)."""
        device = self.weight_ih_l0.device
        for label, tensor in tensors.items():
            if label == "batch" and isinstance(tensor, Tensor) and tensor.device.type == "cpu":
                continue  # read on the host only: a CPU batch serves weights anywhere, as it always has
            if isinstance(tensor, Tensor) and tensor.device != device:
                raise ValueError(f"{type(self).__name__} expects {label} on {device}, like its weights, got "
                                 f"{tensor.device}; move {label} ({label}.to({str(device)!r})) or the layer "
                                 f"(layer.to({str(tensor.device)!r}))")

    def _run_direction(self, x: Tensor, schedule: ChainSchedule, layer: int, direction: int,
                       h_0: Tensor, c_0: Optional[Tensor]):
        """One layer in one direction: project every input at once, then step
        the frontiers, each step's messages through :meth:`propagate`. Returns
        the outputs in node order, the final states per graph and the
        per-node extras of the cell (or None)."""
        suffix = self._suffixes(layer)[direction]
        weight_ih = getattr(self, f"weight_ih{suffix}")
        weight_hh = getattr(self, f"weight_hh{suffix}")
        input_bias, weights = self.cell_weights(suffix)

        sizes, position = schedule.sizes, schedule.positions[direction]
        x = x.index_select(0, schedule.orders[direction])  # step order
        if input_bias is None:
            projected = x.matmul(weight_ih.t())  # [num_nodes, gate_size]
        else:
            projected = torch.addmm(input_bias, x, weight_ih.t())
        # Split, not slice: the backward of a slice fills a zero tensor the
        # size of the whole input per step, the backward of one split
        # concatenates once.
        inputs = projected.split(sizes)  # per step [sizes[t], gate_size]
        fused = fused_recurrent.fused_steps(self, projected, inputs, weight_hh)  # None: cell() runs

        # The first step's messages are the initial states of the chains.
        state = h_0.index_select(0, schedule.chain_graph)  # [num_chains, output_size]
        if c_0 is not None:
            state = torch.cat([state, c_0.index_select(0, schedule.chain_graph)], dim=1)
        # The edge ids tell hooks and explainers which edge each message is.
        step_edges, edge_ids = schedule.step_edges, schedule.edge_ids[direction]
        width = self.output_size()
        outputs, ended, extras = [], [], []
        with self.whole_rows():  # Edge k of a step leaves row k of the state: no gather.
            for t, size in enumerate(sizes):
                if t > 0:  # state: the states of the chains that go on, by rank
                    state = self.propagate(step_edges[t - 1], state=state, size=(size, size),
                                           aligned=True, edge_id=edge_ids[t - 1])
                carried = sizes[t + 1] if t + 1 < len(sizes) else 0  # chains past this step
                if fused is not None:
                    state, out, last = fused(t, state, weights, carried)
                else:
                    new, extra = self.cell(inputs[t], state, weights)  # [size, state_size]
                    out = new if new.size(1) == width else new[:, :width]
                    state, last = new.split([carried, size - carried])
                    if extra is not None:
                        extras.append(extra)
                outputs.append(out)
                if carried < size:
                    ended.append(last)

        # Without nodes, a slice of the projection keeps outputs attached to
        # the graph (x and the weights), as an empty tensor should be.
        out = torch.cat(outputs) if outputs else projected[:, :width]
        out = out.index_select(0, position)  # [num_nodes, output_size], node order
        extra = torch.cat(extras).index_select(0, position) if extras else None
        # The chains end shortest first, so the ends come in reverse rank order.
        last = torch.cat(ended[::-1]) if ended else projected[:0, :self.state_size()]
        h_n = self._per_graph(h_0, last[:, :width], schedule)  # [num_graphs, output_size]
        c_n = None if c_0 is None else self._per_graph(c_0, last[:, width:], schedule)
        return out, h_n, c_n, extra

    @staticmethod
    def _per_graph(initial: Tensor, last: Tensor, schedule: ChainSchedule) -> Tensor:
        """The final state of each graph: its chain's end, or the initial
        state if the graph has no nodes."""
        if last.size(0) == 0:
            return initial
        if schedule.graph_chain is not None:  # One chain per graph.
            return last.index_select(0, schedule.graph_chain)
        return initial.index_copy(0, schedule.chain_graph, last)

    def cell_weights(self, suffix: str) -> Tuple[Optional[Tensor], tuple]:
        """The bias added to the input projection once for all nodes, and what
        :meth:`cell` needs of one layer and direction: ``W_hh^T``, the bias the
        cell adds to the hidden projection itself, and extras. Both biases sit
        outside any non-linearity for most cells, so both go to the inputs."""
        bias_ih = getattr(self, f"bias_ih{suffix}", None)
        bias_hh = getattr(self, f"bias_hh{suffix}", None)
        input_bias = None if bias_ih is None else bias_ih + bias_hh
        return input_bias, (getattr(self, f"weight_hh{suffix}").t(), None)

    def cell(self, inputs: Tensor, state: Tensor, weights: tuple) -> Tuple[Tensor, Optional[Tensor]]:
        """The update rule for one frontier: ``inputs`` ``[B, gate_size]`` is
        ``W_ih x_i + b``, ``state`` ``[B, state_size]`` the messages from the
        predecessors, ``weights`` what :meth:`cell_weights` gives. Returns the
        new state ``[B, state_size]`` and a per-node extra (or None)."""
        name = type(self).__name__
        raise NotImplementedError(
            f"{name} has no cell(): ChainRecurrence is the engine the recurrent layers share, not a layer "
            f"itself; subclass it with a cell() (the update rule of one step), or use ChainRNN, ChainLSTM, "
            f"ChainGRU or ChainONLSTM")

    def message(self, state_j: Tensor) -> Tensor:
        return state_j  # [num_edges, state_size]

    def aggregate(self, inputs: Tensor, index: Tensor, ptr: Optional[Tensor] = None,
                  dim_size: Optional[int] = None, aligned: bool = False) -> Tensor:
        """The sum of each node's messages. The engine's step edges are
        ``aligned``: edge ``k`` ends at row ``k`` and every row gets one, so the
        sum is the messages as they are."""
        if aligned:
            return inputs
        return super().aggregate(inputs, index, ptr=ptr, dim_size=dim_size)

    def explain_message(self, inputs: Tensor, dim_size: Optional[int],
                        edge_id: Optional[Tensor] = None) -> Tensor:
        """Scales each message by the explainer's mask of the edge of
        ``edge_index`` that carries it (``edge_id``), so masks learned by PyG's
        explainers are in the user's edge order."""
        if edge_id is None:
            return super().explain_message(inputs, dim_size)
        edge_mask = compat.explainer_edge_mask(self)
        if edge_mask is None:
            raise ValueError(f"{type(self).__name__}: no edge_mask to explain with; "
                             f"did you forget to set one?")
        return inputs * edge_mask.index_select(0, edge_id).unsqueeze(-1)

    def _graphs_in_state(self, state: Optional[State], batch: Optional[Tensor]) -> Optional[int]:
        """The number of graphs a given initial state is for (one without
        ``batch``); None when there is no state to tell (or it is malformed,
        which :meth:`_initial_state` reports)."""
        if batch is None:
            return 1
        h_0 = state[0] if isinstance(state, (tuple, list)) and len(state) else state
        if not isinstance(h_0, Tensor) or h_0.dim() != 3:
            return None
        return h_0.size(1)

    def _initial_state(self, state: Optional[State], num_graphs: int, x: Tensor):
        """``(h_0, c_0)`` ``[num_layers * num_directions, num_graphs, width]``
        each; ``c_0`` is None for cells without a cell state."""
        name = type(self).__name__
        rows = self.num_layers * self.num_directions
        h_shape = [rows, num_graphs, self.output_size()]
        c_shape = [rows, num_graphs, self.hidden_size]
        if state is None:
            if self.learn_initial_state:
                h_0 = self.initial_h.expand(h_shape)
                c_0 = self.initial_c.expand(c_shape) if self.has_cell_state else None
            else:
                h_0 = x.new_zeros(h_shape)
                c_0 = x.new_zeros(c_shape) if self.has_cell_state else None
            return h_0, c_0
        if self.has_cell_state:
            if not isinstance(state, (tuple, list)) or len(state) != 2:
                raise ValueError(f"{name} expects state as a pair (h_0, c_0)")
            h_0, c_0 = state
        else:
            if not isinstance(state, Tensor):
                raise ValueError(f"{name} expects state as one tensor h_0")
            h_0, c_0 = state, None
        for label, tensor, shape in (("h_0", h_0, h_shape), ("c_0", c_0, c_shape)):
            if tensor is None and (label == "h_0" or self.has_cell_state) or \
                    tensor is not None and not isinstance(tensor, Tensor):
                raise ValueError(f"{name} expects {label} to be a tensor, got {type(tensor).__name__}")
            if tensor is not None and tensor.dtype != x.dtype and not torch.is_autocast_enabled(x.device.type):
                raise ValueError(f"{name} expects {label} of dtype {x.dtype}, like x, got {tensor.dtype}")
            self._check_device(**{label: tensor})
            if tensor is not None and list(tensor.shape) != shape:
                raise ValueError(f"{name} expects {label} of shape {shape} "
                                 f"[num_layers * num_directions, num_graphs, "
                                 f"{'hidden_size' if shape is c_shape else self._h_name()}], "
                                 f"got {list(tensor.shape)}")
        return h_0, c_0

    def _h_name(self) -> str:
        return "hidden_size"

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

