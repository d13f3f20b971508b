"""Recurrent networks as message passing on chain graphs. A recurrent layer
applies one cell along the edges of a chain, ``h_t = f(h_{t-1}, x_t)``: the
message a node receives is its predecessor's state, and the update is the
cell. RNN, LSTM, GRU and ON-LSTM share everything but that update rule, so
one engine (:class:`ChainRecurrence`) finds the order of computation from
``edge_index`` and steps every chain of a batch at once; each cell below is
only its equations.

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
step multiplies only the frontier's messages by ``W_hh``.
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

from . import checks, compat
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
    fused_step = None  # see _fused_step
    defers_recurrent_grad = False  # whether fused_step leaves W_hh's gradient to _DeferredRecurrentGrad
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
        inputs = exact_inputs = projected.split(sizes)  # per step [sizes[t], gate_size]
        step = self._fused_step(x)
        messages = None  # the h of every message, for W_hh's gradient in one product
        if step is not None and self.defers_recurrent_grad and torch.is_grad_enabled() \
                and weight_hh.requires_grad:
            messages = []
            inputs = _DeferredRecurrentGrad.apply(projected, weight_hh, messages).split(sizes)

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
                if step is None:
                    new, extra = self.cell(inputs[t], state, weights)  # [size, state_size]
                    out = new if new.size(1) == width else new[:, :width]
                    state, last = new.split([carried, size - carried])
                    if extra is not None:
                        extras.append(extra)
                else:
                    state, out, last = step(inputs[t], exact_inputs[t], state, *weights, messages, carried)
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

    def _fused_step(self, x: Tensor):
        """The cell fused by hand into one autograd node, or None to run
        :meth:`cell` op by op. The node is a :class:`torch.autograd.Function`
        taking ``inputs, exact_inputs, state, *weights, messages, carried``
        (see :class:`_DeferredRecurrentGrad`) and returning the new states of
        the first ``carried`` rows, the output and the new states of the other
        rows. The fused step gives the same numbers; torch.compile (which
        fuses by itself) and autocast (which picks each op's precision) trace
        :meth:`cell` instead, as do torch.func transforms and forward-mode AD."""
        if self.fused_step is None or torch.compiler.is_compiling() \
                or torch.is_autocast_enabled(x.device.type) or not compat.plain_autograd():
            return None
        return self.fused_step

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


class ChainRNN(ChainRecurrence):
    r"""The Elman recurrent network (:class:`torch.nn.RNN`) stepped along
    chains.

    .. math::
        \mathbf{h}_i = \sigma\big(\mathbf{W}_{ih}\mathbf{x}_i + \mathbf{b}_{ih}
        + \mathbf{W}_{hh}\mathbf{h}_j + \mathbf{b}_{hh}\big), \qquad j \to i

    with :math:`\sigma` the ``nonlinearity``.

    Args:
        nonlinearity (str): ``"tanh"`` or ``"relu"``, as for
            :class:`torch.nn.RNN`. (default: ``"tanh"``)
        others: see :class:`ChainRecurrence` (``device`` and ``dtype`` by
            keyword, passed on through ``**kwargs``); the ``state_dict`` is
            :class:`torch.nn.RNN`'s.

    Shapes:
        - **input:** ``x`` :math:`(|\mathcal{V}|, F_{in})`, ``edge_index``
          :math:`(2, |\mathcal{E}|)`, ``batch`` :math:`(|\mathcal{V}|)`,
          ``state`` :math:`(L \cdot D, G, H)`
        - **output:** ``out`` :math:`(|\mathcal{V}|, D \cdot H)`, ``h_n``
          :math:`(L \cdot D, G, H)`
    """

    gate_blocks = 1

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, *, learn_initial_state: bool = False,
                 **kwargs):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"ChainRNN's nonlinearity is 'tanh' or 'relu', got {nonlinearity!r}")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         learn_initial_state=learn_initial_state, **kwargs)

    def cell(self, inputs, state, weights):
        w_hh, _ = weights
        pre = torch.addmm(inputs, state, w_hh)  # [B, hidden_size]
        return (pre.tanh() if self.nonlinearity == "tanh" else pre.relu()), None

    def extra_repr_args(self) -> List[str]:
        args = super().extra_repr_args()
        if self.nonlinearity != "tanh":
            args.insert(2, f"nonlinearity={self.nonlinearity!r}")
        return args


# oneDNN's single-precision matrix product (torch.nn.LSTM's on a CPU) runs
# the steps' products up to twice as fast as torch.mm (MKL) on some CPUs,
# but costs more to launch: it serves products of at least these sizes, and
# only the layouts it runs fast (rows of a whole, a weight stored either
# way); others (a transposed ``a``) can run a thousand times slower.
_ONEDNN_ROWS = 8
_ONEDNN_PRODUCT = 1 << 21  # rows * inner * columns


def _matmul(a: Tensor, b: Tensor, add: Optional[Tensor] = None) -> Tensor:
    """``add + a @ b`` (``add`` broadcast, or left out when None) for the
    fused steps, which run without autograd: through oneDNN for large
    single-precision products on a CPU (unless ``torch.backends.mkldnn`` is
    disabled), else torch's ``mm``/``addmm``. The two differ by rounding."""
    rows, inner = a.shape
    if a.dtype == torch.float32 and b.dtype == torch.float32 and a.device.type == "cpu" \
            and rows >= _ONEDNN_ROWS and rows * inner * b.size(1) >= _ONEDNN_PRODUCT \
            and a.stride(1) == 1 and (b.is_contiguous() or b.t().is_contiguous()) \
            and not torch.is_grad_enabled() and torch.backends.mkldnn.enabled:
        linear = compat.onednn_linear()
        if linear is not None:
            out = linear(a, b.t(), None, "none", [], "")  # a @ b, b.t() as a linear's weight
            return out if add is None else out.add_(add)
    return a.mm(b) if add is None else torch.addmm(add, a, b)


class _DeferredRecurrentGrad(torch.autograd.Function):
    r"""The identity on the input projection ``W_ih x + b`` of every node,
    whose backward adds the gradient of ``W_hh``: the gradient of a step's
    pre-activations ``W_ih x_i + b + W_hh h_j`` is the gradient of its input
    projection, so ``dL/dW_hh = sum_t dL/dgates_t^T h_t`` is one product over
    all nodes, ``dL/dprojected^T [h_j]``, instead of a thin product and a sum
    per step (cuDNN's way too).

    A fused step takes its inputs twice, through this node (``inputs``) and
    around it (``exact_inputs``). A first-order backward (grad mode off) of a
    step returns the gates' gradient for ``inputs`` and none for ``W_hh``,
    which this node then adds. A backward that builds a graph (grad mode on,
    ``create_graph``) returns autograd's gradients through the op-by-op cell
    for ``exact_inputs`` and ``W_hh``; this node adds nothing. Gradients of
    higher order that flow through those graphs thus never pass this node,
    and those that flow through the steps' first-order nodes do."""

    @staticmethod
    def forward(ctx, projected: Tensor, weight_hh: Tensor, messages: List[Tensor]) -> Tensor:
        # Filled by the steps' forwards (so without history: no reference
        # cycle through the graph); the first-order product needs values only.
        ctx.messages = messages
        ctx.set_materialize_grads(False)
        return projected.view_as(projected)

    @staticmethod
    def backward(ctx, d_projected: Optional[Tensor]):
        if d_projected is None or torch.is_grad_enabled() or not ctx.needs_input_grad[1] \
                or not ctx.messages:  # (no nodes, no gradient)
            return d_projected, None, None
        h = torch.cat(ctx.messages)  # [num_nodes, output_size], step order
        return d_projected, d_projected.t().mm(h), None


class _LSTMStep(torch.autograd.Function):
    """One LSTM step of a frontier, :meth:`ChainLSTM.cell` fused by hand: the
    forward writes ``[h, c]`` into one tensor, the backward computes the
    gates' gradient in a handful of ops instead of one autograd node per op.
    ``W_hh``'s gradient comes from :class:`_DeferredRecurrentGrad`. With
    ``create_graph`` (double backward) it differentiates :func:`_lstm_cell`
    instead, so every order of derivative is autograd's.

    Returns the states of the first ``carried`` rows (the chains that go on:
    the next step's messages), the output ``h`` ``[B, width]`` and the states
    of the other rows (the chains that end here), each used once: their
    gradients meet in this step's backward instead of in zero-filled tensors."""

    @staticmethod
    def forward(ctx, inputs: Tensor, exact_inputs: Tensor, message: Tensor, w_hh: Tensor,
                w_hr: Optional[Tensor], messages: Optional[List[Tensor]], carried: int):
        # Written for few calls: each op on these small tensors costs more to
        # launch than to run.
        width, hidden = w_hh.size(0), inputs.size(1) // 4
        h = message[:, :width]
        if messages is not None:
            messages.append(h)  # for W_hh's gradient (see _DeferredRecurrentGrad)
        gates = _matmul(h, w_hh, inputs)  # [B, 4 * hidden]: i, f, g, o
        g = gates[:, 2 * hidden:3 * hidden].tanh()
        i, f, _, o = gates.sigmoid_().chunk(4, dim=1)  # (g's block of it unused)
        state = torch.empty_like(message)  # [B, width + hidden]
        c = torch.mul(f, message[:, width:], out=state[:, width:]).addcmul_(i, g)
        tanh_c = c.tanh()
        unprojected = o * tanh_c
        out = unprojected if w_hr is None else unprojected.mm(w_hr)  # [B, width]
        state[:, :width] = out
        ctx.carried = carried
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(exact_inputs, message, w_hh, w_hr, gates, g, tanh_c,
                              None if w_hr is None else unprojected)
        return state[:carried], out, state[carried:]

    @staticmethod
    def backward(ctx, d_carried: Optional[Tensor], d_out: Optional[Tensor], d_ended: Optional[Tensor]):
        exact_inputs, message, w_hh, w_hr, gates, g, tanh_c, unprojected = ctx.saved_tensors
        carried = ctx.carried
        if torch.is_grad_enabled():
            def outputs(*args):
                state = _lstm_cell(*args)
                return state[:carried], state[:, :w_hh.size(0)], state[carried:]
            return (None,) + _differentiable_step_grads(
                ctx.needs_input_grad[1:5], outputs, (d_carried, d_out, d_ended),
                exact_inputs, message, w_hh, w_hr) + (None, None)
        width = w_hh.size(0)
        d_state = _rows_of(message, carried, d_carried, d_ended)  # the state's three uses, summed
        if d_out is not None:
            d_state[:, :width].add_(d_out)
        d_h, d_c = d_state[:, :width], d_state[:, width:]
        d_w_hr = None
        if w_hr is not None:
            d_w_hr = unprojected.t().mm(d_h) if ctx.needs_input_grad[4] else None
            d_h = d_h.mm(w_hr.t())  # [B, hidden]
        # h = o tanh(c), c = f c_j + i g: the gradient reaching c, then each
        # gate's, first through its product, then through its activation.
        i, f, _, o = gates.chunk(4, dim=1)
        d_c = d_c.addcmul_(d_h * o, 1 - tanh_c * tanh_c)
        d_gates = torch.empty_like(gates)
        d_i, d_f, d_g, d_o = d_gates.chunk(4, dim=1)
        torch.mul(d_c, g, out=d_i)
        torch.mul(d_c, message[:, width:], out=d_f)
        torch.mul(d_h, tanh_c, out=d_o)
        d_gates.mul_(gates - gates * gates)  # sigmoid' = s (1 - s), g's block overwritten next
        torch.mul(d_c, i, out=d_g).mul_(1 - g * g)  # tanh' = 1 - g^2
        d_message = None
        if ctx.needs_input_grad[2]:
            d_message = torch.empty_like(message)
            d_message[:, :width] = _matmul(d_gates, w_hh.t())
            torch.mul(d_c, f, out=d_message[:, width:])
        return d_gates, None, d_message, None, d_w_hr, None, None


def _rows_of(like: Tensor, carried: int, d_carried: Optional[Tensor], d_ended: Optional[Tensor]) -> Tensor:
    """The gradients of a step's carried and ended rows as one tensor shaped ``like``."""
    d_state = torch.empty_like(like)
    for rows, grad in ((d_state[:carried], d_carried), (d_state[carried:], d_ended)):
        if grad is None:
            rows.zero_()
        else:
            rows.copy_(grad)
    return d_state


def _differentiable_step_grads(needs_input_grad, outputs, grads, *args):
    """A fused step's gradients by autograd through its op-by-op version
    ``outputs(*args)`` (the step's outputs, for ``grads``), for
    ``create_graph``; ``W_hh``'s included (see _DeferredRecurrentGrad)."""
    wanted = [k for k, arg in enumerate(args) if arg is not None and needs_input_grad[k]]
    with torch.enable_grad():
        # Fresh aliases, so that each argument's gradient counts this step's
        # use of it alone: the message was made from W_hh in earlier steps,
        # and a gradient taken for W_hh itself would count those paths too.
        # Higher derivatives still reach the originals through the aliases.
        args = tuple(arg.view_as(arg) if isinstance(arg, Tensor) else arg for arg in args)
        results = outputs(*args)
    pairs = [(result, grad) for result, grad in zip(results, grads) if grad is not None]
    found = torch.autograd.grad([result for result, _ in pairs], [args[k] for k in wanted],
                                [grad for _, grad in pairs], create_graph=True, allow_unused=True)
    out = [None] * len(args)
    for k, grad in zip(wanted, found):
        out[k] = grad
    return tuple(out)


def _lstm_cell(inputs: Tensor, message: Tensor, w_hh: Tensor, w_hr: Optional[Tensor]) -> Tensor:
    """The LSTM update op by op: ``inputs`` ``[B, 4 * hidden]`` (``W_ih x + b``),
    ``message`` ``[B, width + hidden]`` (``[h_j, c_j]``), ``w_hh`` ``W_hh^T``,
    ``w_hr`` ``W_hr^T`` or None; returns the new ``[h, c]``."""
    width = w_hh.size(0)
    h, c = message.split([width, message.size(1) - width], dim=1)
    gates = torch.addmm(inputs, h, w_hh)  # [B, 4 * hidden_size]
    i, f, g, o = gates.chunk(4, dim=1)
    c = torch.addcmul(f.sigmoid() * c, i.sigmoid(), g.tanh())
    h = o.sigmoid() * c.tanh()
    if w_hr is not None:
        h = h.mm(w_hr)  # [B, proj_size]
    return torch.cat([h, c], dim=1)


class ChainLSTM(ChainRecurrence):
    r"""Long short-term memory (`Hochreiter & Schmidhuber, 1997
    <https://www.bioinf.jku.at/publications/older/2604.pdf>`_) stepped along
    chains; :class:`torch.nn.LSTM`'s cell, gate order, projection and
    ``state_dict``.

    .. math::
        (\mathbf{i}, \mathbf{f}, \mathbf{g}, \mathbf{o}) &= (\sigma, \sigma, \tanh, \sigma)
        \big(\mathbf{W}_{ih}\mathbf{x}_i + \mathbf{b}_{ih} + \mathbf{W}_{hh}\mathbf{h}_j
        + \mathbf{b}_{hh}\big) \\
        \mathbf{c}_i &= \mathbf{f} \odot \mathbf{c}_j + \mathbf{i} \odot \mathbf{g}, \qquad
        \mathbf{h}_i = \mathbf{W}_{hr}\big(\mathbf{o} \odot \tanh(\mathbf{c}_i)\big)

    where :math:`\mathbf{W}_{hr}` (``weight_hr_l{k}``) is there only with a
    ``proj_size``.

    Args:
        proj_size (int): if above 0, project ``h`` to this size, as
            :class:`torch.nn.LSTM` does; ``h`` (outputs, ``h_0``, ``h_n``) then
            has ``proj_size`` columns and ``c`` keeps ``hidden_size``. (default: :obj:`0`)
        others: see :class:`ChainRecurrence` (``device`` and ``dtype`` by
            keyword, passed on through ``**kwargs``).

    Shapes:
        - **input:** ``x`` :math:`(|\mathcal{V}|, F_{in})`, ``edge_index``
          :math:`(2, |\mathcal{E}|)`, ``batch`` :math:`(|\mathcal{V}|)`,
          ``state`` ``(h_0, c_0)``, :math:`(L \cdot D, G, H_{out})` and
          :math:`(L \cdot D, G, H)`
        - **output:** ``out`` :math:`(|\mathcal{V}|, D \cdot H_{out})`,
          ``(h_n, c_n)`` shaped like ``(h_0, c_0)``, with :math:`H_{out}`
          the ``proj_size`` if set, else :math:`H`
    """

    gate_blocks = 4
    has_cell_state = True

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, *, learn_initial_state: bool = False, **kwargs):
        self.proj_size = proj_size  # checked with the other sizes, after hidden_size
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         learn_initial_state=learn_initial_state, **kwargs)

    def _check_sizes(self, input_size: int, hidden_size: int, num_layers: int) -> None:
        super()._check_sizes(input_size, hidden_size, num_layers)
        proj_size = self.proj_size
        if isinstance(proj_size, bool) or not isinstance(proj_size, int) or proj_size < 0:
            raise ValueError(f"ChainLSTM needs proj_size to be a whole number >= 0 (0: no projection), "
                             f"got {proj_size!r}")
        if proj_size >= hidden_size:
            raise ValueError(f"ChainLSTM needs 0 <= proj_size < hidden_size (as torch.nn.LSTM), "
                             f"got proj_size={proj_size}, hidden_size={hidden_size}")

    def output_size(self) -> int:
        return self.proj_size or self.hidden_size

    def _register_extra_weights(self, suffix: str, factory: dict) -> None:
        if self.proj_size:
            self.register_parameter(f"weight_hr{suffix}",
                                    Parameter(torch.empty(self.proj_size, self.hidden_size, **factory)))

    def _h_name(self) -> str:
        return "proj_size" if self.proj_size else "hidden_size"

    def cell_weights(self, suffix):
        input_bias, (w_hh, hidden_bias) = super().cell_weights(suffix)
        w_hr = getattr(self, f"weight_hr{suffix}").t() if self.proj_size else None
        return input_bias, (w_hh, w_hr)

    fused_step = _LSTMStep.apply
    defers_recurrent_grad = True

    def cell(self, inputs, state, weights):
        return _lstm_cell(inputs, state, *weights), None

    def extra_repr_args(self) -> List[str]:
        args = super().extra_repr_args()
        if self.proj_size:
            args.append(f"proj_size={self.proj_size}")
        return args


def _gru_cell(inputs: Tensor, h: Tensor, w_hh: Tensor, hidden_bias: Optional[Tensor]) -> Tensor:
    """The GRU update op by op: ``inputs`` ``[B, 3 * hidden]`` (``W_ih x + b``
    with ``b_hr``, ``b_hz`` in), ``h`` the message, ``w_hh`` ``W_hh^T``,
    ``hidden_bias`` ``[0, 0, b_hn]`` or None; returns the new ``h``."""
    if hidden_bias is None:
        recurrent = h.mm(w_hh)  # [B, 3 * hidden_size]
    else:
        recurrent = torch.addmm(hidden_bias, h, w_hh)
    hidden = h.size(1)
    r, z = (inputs[:, :2 * hidden] + recurrent[:, :2 * hidden]).sigmoid().chunk(2, dim=1)
    n = torch.addcmul(inputs[:, 2 * hidden:], r, recurrent[:, 2 * hidden:]).tanh()
    return torch.lerp(n, h.to(n.dtype), z)  # (autocast leaves h in full precision)


class _GRUStep(torch.autograd.Function):
    """One GRU step of a frontier, :func:`_gru_cell` fused by hand (see
    :class:`_LSTMStep`); returns the new ``h`` of the first ``carried`` rows,
    of all rows (the output) and of the other rows. Its weight gradients come
    per step, since ``r`` scales part of ``W_hh h``."""

    @staticmethod
    def forward(ctx, inputs: Tensor, exact_inputs: Tensor, h: Tensor, w_hh: Tensor,
                hidden_bias: Optional[Tensor], messages: None, carried: int):
        hidden = h.size(1)
        recurrent = _matmul(h, w_hh, hidden_bias)  # [B, 3 * hidden]: r, z, n parts of W_hh h (+ b_hn)
        rz = torch.add(inputs[:, :2 * hidden], recurrent[:, :2 * hidden]).sigmoid_()
        r, z = rz.chunk(2, dim=1)
        n = torch.addcmul(inputs[:, 2 * hidden:], r, recurrent[:, 2 * hidden:]).tanh_()
        ctx.carried = carried
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(exact_inputs, h, w_hh, hidden_bias, rz, n, recurrent)
        new = torch.lerp(n, h, z)
        return new[:carried], new, new[carried:]

    @staticmethod
    def backward(ctx, d_carried: Optional[Tensor], d_new: Optional[Tensor], d_ended: Optional[Tensor]):
        exact_inputs, h, w_hh, hidden_bias, rz, n, recurrent = ctx.saved_tensors
        carried = ctx.carried
        if torch.is_grad_enabled():
            def outputs(*args):
                new = _gru_cell(*args)
                return new[:carried], new, new[carried:]
            return (None,) + _differentiable_step_grads(
                ctx.needs_input_grad[1:5], outputs, (d_carried, d_new, d_ended),
                exact_inputs, h, w_hh, hidden_bias) + (None, None)
        d_h = _rows_of(h, carried, d_carried, d_ended)
        if d_new is not None:
            d_h.add_(d_new)
        hidden = h.size(1)
        r, z = rz.chunk(2, dim=1)
        # h' = n + z (h - n), n = tanh(i_n + r (W_hn h + b_hn)), r and z sigmoids.
        d_inputs = torch.empty_like(recurrent)  # the pre-activations' gradient
        d_r, d_z, d_n = d_inputs.chunk(3, dim=1)
        torch.mul(torch.addcmul(d_h, d_h, z, value=-1), 1 - n * n, out=d_n)
        torch.mul(d_h, h - n, out=d_z)
        torch.mul(d_n, recurrent[:, 2 * hidden:], out=d_r)
        d_inputs[:, :2 * hidden].mul_(rz * (1 - rz))
        d_recurrent = torch.cat([d_inputs[:, :2 * hidden], d_n * r], dim=1)
        d_prev = _matmul(d_recurrent, w_hh.t(), d_h.mul_(z)) if ctx.needs_input_grad[2] else None
        d_w_hh = h.t().mm(d_recurrent) if ctx.needs_input_grad[3] else None
        d_bias = d_recurrent.sum(0) if hidden_bias is not None and ctx.needs_input_grad[4] else None
        return d_inputs, None, d_prev, d_w_hh, d_bias, None, None


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

    def cell_weights(self, suffix):
        # b_hn sits inside r * (...), so only b_hr and b_hz join the inputs.
        bias_ih = getattr(self, f"bias_ih{suffix}", None)
        bias_hh = getattr(self, f"bias_hh{suffix}", None)
        w_hh = getattr(self, f"weight_hh{suffix}").t()
        if bias_ih is None:
            return None, (w_hh, None)
        hidden = self.hidden_size
        input_bias = torch.cat([bias_ih[:2 * hidden] + bias_hh[:2 * hidden], bias_ih[2 * hidden:]])
        hidden_bias = torch.cat([bias_hh.new_zeros(2 * hidden), bias_hh[2 * hidden:]])
        return input_bias, (w_hh, hidden_bias)

    fused_step = _GRUStep.apply

    def cell(self, inputs, state, weights):
        return _gru_cell(inputs, state, *weights), None


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

    ``forward(..., return_distances=True)`` also returns the split point of
    each node's master forget gate, :math:`d^f_i = C - \sum_k \tilde{f}_{ik}`,
    the syntactic distance the paper reads trees from (Sec. 4.3),
    ``[num_nodes, num_layers * num_directions]`` in node order.

    Args:
        chunk_size (int): neurons per master-gate chunk; divides
            ``hidden_size``. (default: :obj:`1`)
        others: see :class:`ChainRecurrence` (``device`` and ``dtype`` by
            keyword, passed on through ``**kwargs``).

    Shapes:
        - **input:** ``x`` :math:`(|\mathcal{V}|, F_{in})`, ``edge_index``
          :math:`(2, |\mathcal{E}|)`, ``batch`` :math:`(|\mathcal{V}|)`,
          ``state`` ``(h_0, c_0)`` each :math:`(L \cdot D, G, H)`
        - **output:** ``out`` :math:`(|\mathcal{V}|, D \cdot H)`,
          ``(h_n, c_n)`` each :math:`(L \cdot D, G, H)`, and with
          ``return_distances`` the distances :math:`(|\mathcal{V}|, L \cdot D)`
    """

    gate_blocks = 4
    has_cell_state = True

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 chunk_size: int = 1, *, learn_initial_state: bool = False, **kwargs):
        self.chunk_size = chunk_size  # checked with the other sizes, after hidden_size
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         learn_initial_state=learn_initial_state, **kwargs)

    def _check_sizes(self, input_size: int, hidden_size: int, num_layers: int) -> None:
        super()._check_sizes(input_size, hidden_size, num_layers)
        checks.check_sizes(self, chunk_size=self.chunk_size)
        if hidden_size % self.chunk_size:
            raise ValueError(f"ChainONLSTM needs chunk_size to divide hidden_size, "
                             f"got hidden_size={hidden_size}, chunk_size={self.chunk_size}")

    @property
    def num_chunks(self) -> int:
        """The number of master-gate chunks, ``hidden_size / chunk_size``."""
        return self.hidden_size // self.chunk_size

    def gate_size(self) -> int:
        return 4 * self.hidden_size + 2 * self.num_chunks

    def forward(self, x: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None,
                state: Optional[State] = None, schedule: Optional[ChainSchedule] = None,
                return_distances: bool = False):
        """As :meth:`ChainRecurrence.forward`; with ``return_distances``, also
        the master-forget distances ``[num_nodes, num_layers * num_directions]``."""
        out, state, extras = self._run(x, edge_index, batch, state, schedule)
        if not return_distances:
            return out, state
        if x.size(0) == 0:
            distances = x.new_zeros(0, len(extras))
        else:
            distances = torch.stack(extras, dim=1)
        return out, state, distances

    def cell(self, inputs, state, weights):
        w_hh, _ = weights
        hidden = self.hidden_size
        h, c = state[:, :hidden], state[:, hidden:]
        gates = torch.addmm(inputs, h, w_hh)  # [B, 2 * chunks + 4 * hidden_size]
        chunks, size = self.num_chunks, self.chunk_size
        master_forget = cumax(gates[:, :chunks])  # [B, chunks]
        master_input = 1.0 - cumax(gates[:, chunks:2 * chunks])
        i, f, g, o = gates[:, 2 * chunks:].chunk(4, dim=1)
        overlap = master_forget * master_input

        # Each chunk's master value applies to its chunk_size neurons.
        def chunked(t: Tensor) -> Tensor:
            return t.reshape(-1, chunks, size)  # [B, chunks, chunk_size]

        w, mf, mi = overlap.unsqueeze(-1), master_forget.unsqueeze(-1), master_input.unsqueeze(-1)
        forget = chunked(f.sigmoid()) * w + (mf - w)
        write = chunked(i.sigmoid()) * w + (mi - w)
        c = (forget * chunked(c) + write * chunked(g.tanh())).view(-1, chunks * size)
        distance = chunks - master_forget.sum(dim=1)  # [B]
        return torch.cat([o.sigmoid() * c.tanh(), c], dim=1), distance

    def extra_repr_args(self) -> List[str]:
        args = super().extra_repr_args()
        args.insert(2, f"chunk_size={self.chunk_size}")
        return args
