"""Sparse kernels on CPU, for the layers' fast paths.

Two problems are sparse here. Bag-of-words node features are mostly zeros
(98.7% on Cora): multiplying them as a CSR matrix skips the zeros in the
forward pass and in the weight gradient, which torch's generic sparse
backward does not do quickly on CPU; and dropout of a zero is still zero, so
dropping out only the stored values draws exactly what dense dropout draws.
And attention along edges is a pair of
adjoint sparse products: summing ``alpha``-weighted source values into each
target is a sparse-dense product with the CSR adjacency (rows = targets), and
scoring every edge by a dot product of its two ends is the sampled
dense-dense product on the same pattern. Each is the other's gradient, so
both are written once, as autograd functions whose backward passes call each
other: gradients of any order follow.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.index import index2ptr, ptr2index


_BETA_NOTICE = "Sparse CSR tensor support is in beta state"
_beta_notice_spent = False


def csr_tensor(crow: Tensor, col: Tensor, values: Tensor, size) -> Tensor:
    """A sparse CSR tensor from trusted parts (no invariant checks), without
    torch's "CSR support is in beta" notice. The notice is silenced only
    around our first such call (torch prints it once per process, so it is
    then spent): the user's own warning filters stay as they were."""
    global _beta_notice_spent
    if _beta_notice_spent:
        return torch.sparse_csr_tensor(crow, col, values, size, check_invariants=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_BETA_NOTICE)
        out = torch.sparse_csr_tensor(crow, col, values, size, check_invariants=False)
    _beta_notice_spent = True
    return out


class _SparseDenseMM(torch.autograd.Function):
    """``x @ weight`` for a constant CSR ``x`` (no gradient of its values:
    :func:`sparse_dense_mm` sends an ``x`` that requires grad elsewhere); the
    backward multiplies by the transpose of ``x``, built in CSR by a stable
    sort of its columns."""

    @staticmethod
    def forward(ctx, crow: Tensor, col: Tensor, values: Tensor, num_cols: int,
                weight: Tensor) -> Tensor:
        ctx.save_for_backward(crow, col, values)
        ctx.num_cols = num_cols
        return csr_tensor(crow, col, values, (crow.numel() - 1, num_cols)) @ weight

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        crow, col, values = ctx.saved_tensors
        num_rows = crow.numel() - 1
        rows = ptr2index(crow, output_size=col.numel())
        col_sorted, perm = torch.sort(col, stable=True)
        x_t = csr_tensor(index2ptr(col_sorted, ctx.num_cols), rows[perm], values[perm],
                         (ctx.num_cols, num_rows))
        return None, None, None, None, x_t @ grad_out


def sparse_dense_mm(x: Tensor, weight: Tensor) -> Tensor:
    """``x @ weight`` where ``x`` is a sparse (CSR or COO) matrix and
    ``weight`` a dense one, differentiable in ``weight``, and in ``x`` too
    when it requires grad (then through torch's own product, as PyG's layers
    do: ``x.grad`` is the dense gradient, zeros included).
    Under autocast the result has autocast's dtype; on CPU, whose sparse
    kernel has no half precision, it is computed in float32 first."""
    if x.requires_grad and torch.is_grad_enabled():
        # Our kernel treats x as a constant. Torch's product is slower but
        # differentiates x, in x's own layout and dtype (a conversion of x
        # would not carry torch's dense gradient back).
        dtype = torch.get_autocast_dtype(weight.device.type) if torch.is_autocast_enabled(weight.device.type) \
            else weight.dtype
        with float32_sparse_products(x):
            return (x @ weight.to(x.dtype)).to(dtype)
    if x.layout != torch.sparse_csr:
        x = x.to_sparse_csr()
    dtype = torch.get_autocast_dtype(weight.device.type) if torch.is_autocast_enabled(weight.device.type) \
        else weight.dtype
    with float32_sparse_products(x):
        if x.device.type == "cpu" and dtype in (torch.float16, torch.bfloat16):
            weight = weight.float()
        if x.dtype != weight.dtype:
            x = x.to(weight.dtype)
        out = _SparseDenseMM.apply(x.crow_indices(), x.col_indices(), x.values(), x.size(1), weight)
    return out.to(dtype)


def float32_sparse_products(x: Tensor):
    """A context in which products with a sparse CPU ``x`` stay out of
    autocast (torch's CPU sparse kernel has no bfloat16 or float16), so they
    run in the inputs' own dtype; elsewhere it changes nothing."""
    if x.layout != torch.strided and x.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
        return torch.autocast("cpu", enabled=False)
    return contextlib.nullcontext()


def sparse_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """``F.dropout`` that also takes a sparse CSR or COO matrix, dropping out
    its stored values: the distribution of dense dropout, since zeros stay
    zero, with one random draw per non-zero instead of one per entry."""
    if x.layout == torch.strided:
        return F.dropout(x, p=p, training=training)
    if not training or p == 0.0:
        return x
    if x.layout == torch.sparse_coo:
        x = x.to_sparse_csr()
    values = F.dropout(x.values(), p=p, training=True)
    return csr_tensor(x.crow_indices(), x.col_indices(), values, x.size())


class EdgePattern:
    """The edges of a graph grouped by target (CSR, rows = targets), and the
    same edges grouped by source (:meth:`transposed`, made on first use).

    Args:
        ptr (Tensor): ``[num_targets + 1]`` offsets of each target's edges.
        index (Tensor): ``[num_edges]`` the source of each edge, in that order.
        num_sources (int): number of source nodes.
    """

    def __init__(self, ptr: Tensor, index: Tensor, num_sources: int):
        self.ptr, self.index, self.num_sources = ptr, index, num_sources
        self.num_targets = ptr.numel() - 1
        self._transposed: Optional[EdgePattern] = None
        self._perm: Optional[Tensor] = None
        self._target: Optional[Tensor] = None
        self._heads: dict = {}

    @property
    def target(self) -> Tensor:
        """``[num_edges]`` the target of each edge."""
        if self._target is None:
            self._target = ptr2index(self.ptr, output_size=self.index.numel())
        return self._target

    @property
    def perm(self) -> Tensor:
        """Reads edge values in the transposed pattern's order into this
        pattern's order: ``values = values_of_transpose[perm]``."""
        if self._perm is None:
            other = self.transposed().perm
            self._perm = torch.empty_like(other)
            self._perm[other] = torch.arange(other.numel(), device=other.device)
        return self._perm

    def transposed(self) -> "EdgePattern":
        """The same edges grouped by source (rows = sources)."""
        if self._transposed is None:
            source, perm = torch.sort(self.index, stable=True)
            transposed = EdgePattern(index2ptr(source, self.num_sources), self.target[perm], self.num_targets)
            transposed._target = source
            transposed._perm, transposed._transposed = perm, self
            self._transposed = transposed
        return self._transposed

    def interleaved(self, heads: int) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """The pattern of all ``heads`` at once, as one CSR matrix over
        ``[num_targets * heads, num_sources * heads]`` whose row ``i * heads +
        h`` holds target ``i``'s edges in head ``h`` (a block per head, heads
        interleaved so that ``[nodes, heads, channels]`` tensors are its
        dense operands as they lie in memory). Returns its ``crow`` and
        ``col``, ``order`` (where each of its values sits in an ``[num_edges,
        heads]`` tensor, flattened) and ``place`` (the inverse). Made once."""
        if heads not in self._heads:
            edges = torch.arange(self.index.numel(), device=self.index.device)
            if heads == 1:
                self._heads[heads] = (self.ptr, self.index, edges, edges)
                return self._heads[heads]
            target, degree = self.target, self.ptr.diff()
            head = torch.arange(heads, device=target.device)
            # Target i's block starts at ptr[i] * heads and holds its degree d
            # edges per head: edge e of head h sits at ptr[i] * heads + h * d + (e - ptr[i]).
            start = self.ptr[:-1].index_select(0, target)  # [num_edges]
            place = ((start * (heads - 1) + edges).unsqueeze(1)
                     + degree.index_select(0, target).unsqueeze(1) * head).view(-1)  # [num_edges * heads]
            order = torch.empty_like(place)
            order[place] = torch.arange(place.numel(), device=place.device)
            col = torch.empty_like(place)
            col[place] = (self.index.unsqueeze(1) * heads + head).view(-1)
            crow = torch.cat([((self.ptr[:-1] * heads).unsqueeze(1) + degree.unsqueeze(1) * head).view(-1),
                              self.ptr[-1:] * heads])
            self._heads[heads] = (crow, col, order, place)
        return self._heads[heads]


class SparseAggregate(torch.autograd.Function):
    """``out[i, h] = sum over edges e = (j -> i) of alpha[e, h] * value[j, h]``:
    one CSR sparse-dense product for all heads (:meth:`EdgePattern.interleaved`).
    Backward: the value gradient is the same product on the transposed
    pattern, the alpha gradient a sampled dot product (:class:`SampledDot`)."""

    @staticmethod
    def forward(ctx, pattern: EdgePattern, alpha: Tensor, value: Tensor) -> Tensor:
        ctx.pattern = pattern
        ctx.save_for_backward(alpha, value)
        num_edges, heads = alpha.shape
        channels = value.size(2)
        crow, col, order, _ = pattern.interleaved(heads)
        adjacency = csr_tensor(crow, col, alpha.reshape(-1).index_select(0, order),
                               (pattern.num_targets * heads, pattern.num_sources * heads))
        out = adjacency @ value.reshape(-1, channels)  # [num_targets * heads, channels]
        return out.view(pattern.num_targets, heads, channels)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        alpha, value = ctx.saved_tensors
        pattern = ctx.pattern
        grad_alpha = grad_value = None
        if ctx.needs_input_grad[1]:
            grad_alpha = SampledDot.apply(pattern, grad_out, value)
        if ctx.needs_input_grad[2]:
            transposed = pattern.transposed()
            grad_value = SparseAggregate.apply(transposed, alpha.index_select(0, transposed.perm), grad_out)
        return None, grad_alpha, grad_value


class SampledDot(torch.autograd.Function):
    """``score[e, h] = query[i, h] . key[j, h]`` for every edge ``e = (j -> i)``:
    torch's sampled dense-dense product on the pattern of all heads
    (:meth:`EdgePattern.interleaved`), so no ``[num_edges, heads, channels]``
    tensor is made. Backward: two :class:`SparseAggregate` products."""

    @staticmethod
    def forward(ctx, pattern: EdgePattern, query: Tensor, key: Tensor) -> Tensor:
        ctx.pattern = pattern
        ctx.save_for_backward(query, key)
        heads, channels = query.shape[1:]
        crow, col, _, place = pattern.interleaved(heads)
        # Zero values, not empty ones: sampled_addmm adds beta * values even
        # for beta = 0, and 0 * NaN is NaN.
        mask = csr_tensor(crow, col, query.new_zeros(col.numel()),
                          (pattern.num_targets * heads, pattern.num_sources * heads))
        score = torch.sparse.sampled_addmm(mask, query.reshape(-1, channels), key.reshape(-1, channels).t(),
                                           beta=0.0)
        return score.values().index_select(0, place).view(-1, heads)  # [num_edges, heads]

    @staticmethod
    def backward(ctx, grad_score: Tensor):
        query, key = ctx.saved_tensors
        pattern = ctx.pattern
        grad_query = grad_key = None
        if ctx.needs_input_grad[1]:
            grad_query = SparseAggregate.apply(pattern, grad_score, key)
        if ctx.needs_input_grad[2]:
            transposed = pattern.transposed()
            grad_key = SparseAggregate.apply(transposed, grad_score.index_select(0, transposed.perm), query)
        return None, grad_query, grad_key


class SegmentSum(torch.autograd.Function):
    """The sum of each run of rows ``src[ptr[i]:ptr[i + 1]]`` (torch's
    segment reduction), with a backward that is itself differentiable (a
    gather by ``index``, the segment of each row), which torch's segment
    reduction lacks."""

    @staticmethod
    def forward(ctx, src: Tensor, ptr: Tensor, index: Tensor) -> Tensor:
        ctx.save_for_backward(index)
        return torch.segment_reduce(src, "sum", offsets=ptr)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        (index,) = ctx.saved_tensors
        return grad_out.index_select(0, index), None, None


class SegmentSoftmax(torch.autograd.Function):
    """The softmax of ``score`` ``[num_edges, ...]`` over each target's edges,
    given grouped by target (``ptr`` offsets, ``index`` the target of each
    edge): PyG's :func:`~torch_geometric.utils.softmax` on segments, with the
    softmax's own backward (``alpha * (g - sum(alpha * g))`` per target)
    instead of one through every step, written in differentiable operations
    so that second derivatives follow."""

    @staticmethod
    def forward(ctx, score: Tensor, ptr: Tensor, index: Tensor) -> Tensor:
        high = torch.segment_reduce(score, "max", offsets=ptr, initial=float("-inf"))
        high = torch.where(high.isinf(), 0.0, high).index_select(0, index)
        out = (score - high).exp_()
        total = torch.segment_reduce(out, "sum", offsets=ptr).index_select(0, index)
        alpha = out.div_(total.add_(1e-16))
        ctx.save_for_backward(alpha, ptr, index)
        return alpha

    @staticmethod
    def backward(ctx, grad_alpha: Tensor):
        alpha, ptr, index = ctx.saved_tensors
        weighted = alpha * grad_alpha
        return weighted - alpha * SegmentSum.apply(weighted, ptr, index).index_select(0, index), None, None


class Permute(torch.autograd.Function):
    """``values.index_select(0, perm)`` for a permutation ``perm`` of the rows
    (``inverse`` its inverse), whose backward is the inverse permutation, a
    gather too, instead of the zero-filled scatter of index_select's."""

    @staticmethod
    def forward(ctx, values: Tensor, perm: Tensor, inverse: Tensor) -> Tensor:
        ctx.perm, ctx.inverse = perm, inverse
        return values.index_select(0, perm)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return Permute.apply(grad, ctx.inverse, ctx.perm), None, None


def segment_softmax(score: Tensor, ptr: Tensor, index: Tensor) -> Tensor:
    """See :class:`SegmentSoftmax`."""
    return SegmentSoftmax.apply(score, ptr, index)


def fused_kernels_apply(tensor: Tensor) -> bool:
    """Whether the sparse kernels above serve ``tensor``'s device and dtype
    (torch's CSR products on CPU in single and double precision)."""
    return tensor.is_cpu and tensor.dtype in (torch.float32, torch.float64)
