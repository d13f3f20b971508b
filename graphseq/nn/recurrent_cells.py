"""The recurrent cells: RNN, LSTM, GRU and ON-LSTM, each only its update
rule (:meth:`cell`) on top of the engine that steps it along chains
(:class:`~graphseq.nn.ChainRecurrence`), with torch's weight names, gate
orders and ``state_dict`` where torch has the cell.
"""
from __future__ import annotations

from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter

from . import checks
from .chain_schedule import ChainSchedule
from .recurrent import ChainRecurrence, State


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
    fused_step = "lstm"  # fused by hand in graphseq.nn.fused_recurrent

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

    def cell(self, inputs, state, weights):
        w_hh, w_hr = weights
        width = w_hh.size(0)
        h, c = state.split([width, state.size(1) - width], dim=1)  # the message [h_j, c_j]
        gates = torch.addmm(inputs, h, w_hh)  # [B, 4 * hidden_size]
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.addcmul(f.sigmoid() * c, i.sigmoid(), g.tanh())
        h = o.sigmoid() * c.tanh()
        if w_hr is not None:
            h = h.mm(w_hr)  # [B, proj_size]
        return torch.cat([h, c], dim=1), None

    def extra_repr_args(self) -> List[str]:
        args = super().extra_repr_args()
        if self.proj_size:
            args.append(f"proj_size={self.proj_size}")
        return args


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
    fused_step = "gru"  # fused by hand in graphseq.nn.fused_recurrent

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

    def cell(self, inputs, state, weights):
        w_hh, hidden_bias = weights  # hidden_bias: [0, 0, b_hn] (or None)
        h, hidden = state, state.size(1)
        recurrent = h.mm(w_hh) if hidden_bias is None else torch.addmm(hidden_bias, h, w_hh)  # [B, 3 * hidden]
        r, z = (inputs[:, :2 * hidden] + recurrent[:, :2 * hidden]).sigmoid().chunk(2, dim=1)
        n = torch.addcmul(inputs[:, 2 * hidden:], r, recurrent[:, 2 * hidden:]).tanh()
        return torch.lerp(n, h.to(n.dtype), z), None  # (autocast leaves h in full precision)


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
