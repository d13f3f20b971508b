"""Sparse node features. Bag-of-words features are mostly zeros (98.7% on
Cora): multiplying them as a sparse CSR matrix skips the zeros in both the
forward pass and the weight gradient, which torch's generic sparse backward
does not do quickly on CPU; and dropout of a zero is still zero, so dropping
out only the stored values draws exactly what dense dropout draws.
"""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.index import index2ptr, ptr2index

# CSR support is stable for what is used here (matmul, values, indices); the
# "beta" notice would otherwise print on every run.
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")


class _SparseDenseMM(torch.autograd.Function):
    """``x @ weight`` for a constant CSR ``x``; the backward multiplies by the
    transpose of ``x``, built in CSR by a stable sort of its columns."""

    @staticmethod
    def forward(ctx, crow: Tensor, col: Tensor, values: Tensor, num_cols: int,
                weight: Tensor) -> Tensor:
        ctx.save_for_backward(crow, col, values)
        ctx.num_cols = num_cols
        x = torch.sparse_csr_tensor(crow, col, values, (crow.numel() - 1, num_cols),
                                    check_invariants=False)
        return x @ weight

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        crow, col, values = ctx.saved_tensors
        num_rows = crow.numel() - 1
        rows = ptr2index(crow, output_size=col.numel())
        col_sorted, perm = torch.sort(col, stable=True)
        x_t = torch.sparse_csr_tensor(index2ptr(col_sorted, ctx.num_cols), rows[perm], values[perm],
                                      (ctx.num_cols, num_rows), check_invariants=False)
        return None, None, None, None, x_t @ grad_out


def sparse_dense_mm(x: Tensor, weight: Tensor) -> Tensor:
    """``x @ weight`` where ``x`` is a sparse (CSR or COO) matrix without
    gradient and ``weight`` a dense one, differentiable in ``weight``."""
    if x.layout != torch.sparse_csr:
        x = x.to_sparse_csr()
    return _SparseDenseMM.apply(x.crow_indices(), x.col_indices(), x.values(), x.size(1), weight)


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
    return torch.sparse_csr_tensor(x.crow_indices(), x.col_indices(), values, x.size(),
                                   check_invariants=False)
