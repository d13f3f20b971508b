"""The recurrent cells fused by hand: the fast path of
:class:`~graphseq.nn.ChainRecurrence`. A cell that names a fused step
(``fused_step = "lstm"``) has its update rule run, one frontier at a time, as
a single autograd node with a hand-written backward pass, instead of one node
per op; the numbers are those of the op-by-op :meth:`cell`, which a backward
that builds a graph (``create_graph``) differentiates instead, so every order
of derivative is autograd's.

:func:`fused_steps` is the one place the engine asks whether the fused steps
may run: not while compiling (the compiler fuses by itself), under autocast
(which picks each op's precision), under a :mod:`torch.func` transform or
forward-mode AD, nor for a subclass that rewrote the cell.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import torch
from torch import Tensor

from . import compat

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


def _rows_of(like: Tensor, carried: int, d_carried: Optional[Tensor], d_ended: Optional[Tensor]) -> Tensor:
    """The gradients of a step's carried and ended rows as one tensor shaped ``like``."""
    d_state = torch.empty_like(like)
    for rows, grad in ((d_state[:carried], d_carried), (d_state[carried:], d_ended)):
        if grad is None:
            rows.zero_()
        else:
            rows.copy_(grad)
    return d_state


def _differentiable_step_grads(ctx, grads, cell: Callable, *args):
    """A fused step's gradients by autograd through the op-by-op ``cell``
    (``cell(inputs, state, *weights)`` gives the new state) on ``args``, for
    ``create_graph``; ``W_hh``'s included (see :class:`_DeferredRecurrentGrad`).
    Returns the gradients of the step's inputs, in order (None first for
    ``inputs``, whose gradient ``exact_inputs`` receives)."""
    needs_input_grad, carried, width = ctx.needs_input_grad[1:5], ctx.carried, ctx.width
    wanted = [k for k, arg in enumerate(args) if arg is not None and needs_input_grad[k]]
    with torch.enable_grad():
        # Fresh aliases, so that each argument's gradient counts this step's
        # use of it alone: the message was made from W_hh in earlier steps,
        # and a gradient taken for W_hh itself would count those paths too.
        # Higher derivatives still reach the originals through the aliases.
        args = tuple(arg.view_as(arg) if isinstance(arg, Tensor) else arg for arg in args)
        new = cell(*args)
        results = (new[:carried], new[:, :width], new[carried:])
    pairs = [(result, grad) for result, grad in zip(results, grads) if grad is not None]
    found = torch.autograd.grad([result for result, _ in pairs], [args[k] for k in wanted],
                                [grad for _, grad in pairs], create_graph=True, allow_unused=True)
    out = [None] * len(args)
    for k, grad in zip(wanted, found):
        out[k] = grad
    return (None, *out, None, None, None)


class _LSTMStep(torch.autograd.Function):
    """One LSTM step of a frontier (:meth:`ChainLSTM.cell`) fused by hand:
    the forward writes ``[h, c]`` into one tensor, the backward computes the
    gates' gradient in a handful of ops instead of one autograd node per op.
    ``W_hh``'s gradient comes from :class:`_DeferredRecurrentGrad`.

    Returns the states of the first ``carried`` rows (the chains that go on:
    the next step's messages), the output ``h`` ``[B, width]`` and the states
    of the other rows (the chains that end here), each used once: their
    gradients meet in this step's backward instead of in zero-filled tensors."""

    defers_recurrent_grad = True

    @staticmethod
    def forward(ctx, inputs: Tensor, exact_inputs: Tensor, message: Tensor, w_hh: Tensor,
                w_hr: Optional[Tensor], messages: Optional[List[Tensor]], carried: int, cell: Callable):
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
        ctx.carried, ctx.width, ctx.cell = carried, width, cell
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(exact_inputs, message, w_hh, w_hr, gates, g, tanh_c,
                              None if w_hr is None else unprojected)
        return state[:carried], out, state[carried:]

    @staticmethod
    def backward(ctx, d_carried: Optional[Tensor], d_out: Optional[Tensor], d_ended: Optional[Tensor]):
        exact_inputs, message, w_hh, w_hr, gates, g, tanh_c, unprojected = ctx.saved_tensors
        if torch.is_grad_enabled():
            return _differentiable_step_grads(ctx, (d_carried, d_out, d_ended), ctx.cell,
                                              exact_inputs, message, w_hh, w_hr)
        width = ctx.width
        d_state = _rows_of(message, ctx.carried, d_carried, d_ended)  # the state's three uses, summed
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
        return d_gates, None, d_message, None, d_w_hr, None, None, None


class _GRUStep(torch.autograd.Function):
    """One GRU step of a frontier (:meth:`ChainGRU.cell`) fused by hand (see
    :class:`_LSTMStep`); returns the new ``h`` of the first ``carried`` rows,
    of all rows (the output) and of the other rows. Its weight gradients come
    per step, since ``r`` scales part of ``W_hh h``."""

    defers_recurrent_grad = False

    @staticmethod
    def forward(ctx, inputs: Tensor, exact_inputs: Tensor, h: Tensor, w_hh: Tensor,
                hidden_bias: Optional[Tensor], messages: None, carried: int, cell: Callable):
        hidden = h.size(1)
        recurrent = _matmul(h, w_hh, hidden_bias)  # [B, 3 * hidden]: r, z, n parts of W_hh h (+ b_hn)
        rz = torch.add(inputs[:, :2 * hidden], recurrent[:, :2 * hidden]).sigmoid_()
        r, z = rz.chunk(2, dim=1)
        n = torch.addcmul(inputs[:, 2 * hidden:], r, recurrent[:, 2 * hidden:]).tanh_()
        ctx.carried, ctx.width, ctx.cell = carried, hidden, cell
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(exact_inputs, h, w_hh, hidden_bias, rz, n, recurrent)
        new = torch.lerp(n, h, z)
        return new[:carried], new, new[carried:]

    @staticmethod
    def backward(ctx, d_carried: Optional[Tensor], d_new: Optional[Tensor], d_ended: Optional[Tensor]):
        exact_inputs, h, w_hh, hidden_bias, rz, n, recurrent = ctx.saved_tensors
        if torch.is_grad_enabled():
            return _differentiable_step_grads(ctx, (d_carried, d_new, d_ended), ctx.cell,
                                              exact_inputs, h, w_hh, hidden_bias)
        d_h = _rows_of(h, ctx.carried, d_carried, d_ended)
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
        return d_inputs, None, d_prev, d_w_hh, d_bias, None, None, None


# The cells fused here, by the name a cell gives as its fused_step.
STEPS = {"lstm": _LSTMStep, "gru": _GRUStep}


class FusedSteps:
    """The fused steps of one layer and direction: ``steps(t, state,
    weights, carried)`` runs step ``t`` on the messages ``state`` and returns
    the new states of the first ``carried`` rows, the output and the new
    states of the other rows."""

    def __init__(self, layer, step, projected: Tensor, inputs: Sequence[Tensor], weight_hh: Tensor):
        self.step = step
        self.inputs = self.exact_inputs = inputs
        self.messages = None  # the h of every message, for W_hh's gradient in one product
        if step.defers_recurrent_grad and torch.is_grad_enabled() and weight_hh.requires_grad:
            self.messages = []
            sizes = [rows.size(0) for rows in inputs]
            self.inputs = _DeferredRecurrentGrad.apply(projected, weight_hh, self.messages).split(sizes)
        # The op-by-op cell, which a backward that builds a graph differentiates.
        self.cell = lambda inputs, state, *weights: layer.cell(inputs, state, weights)[0]

    def __call__(self, t: int, state: Tensor, weights: tuple, carried: int):
        return self.step.apply(self.inputs[t], self.exact_inputs[t], state, *weights, self.messages, carried,
                               self.cell)


def fused_steps(layer, projected: Tensor, inputs: Sequence[Tensor], weight_hh: Tensor) -> Optional[FusedSteps]:
    """The hand-fused steps of ``layer``'s cell for one layer and direction
    (``projected``: ``W_ih x + b`` of every node in step order, ``inputs``:
    its split into steps), or None where :meth:`cell` must run op by op: no
    fused step is named by the class that wrote the cell (a subclass that
    rewrites it runs its own), the layer's ``fused_step`` is None, or
    torch.compile, autocast, a :mod:`torch.func` transform or forward-mode
    AD is at work."""
    author = next(cls for cls in type(layer).__mro__ if "cell" in vars(cls))
    name = vars(author).get("fused_step")
    if name is None or layer.fused_step is None or torch.compiler.is_compiling() \
            or torch.is_autocast_enabled(projected.device.type) or not compat.plain_autograd():
        return None
    return FusedSteps(layer, STEPS[name], projected, inputs, weight_hh)
