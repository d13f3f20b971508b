"""A dense reference for :class:`~graphseq.models.fewshot.FewShotGNN`,
written the way the authors' ``gnn_iclr.py`` computes it: episodes as a
batch of ``[N, F]`` matrices, the learned adjacency as an ``N x N`` matrix
per episode made by 1x1 convolutions over ``|x_i - x_j|``, and graph
convolution as batched matrix products. It loads the message-passing
network's weights (:meth:`DenseFewShotGNN.load_from`), so tests can prove the
two equal and ``benchmarks/bench_fewshot.py`` can time them side by side.
"""
from __future__ import annotations

from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .fewshot import FewShotGNN


class DenseAdjacency(nn.Module):
    """The authors' ``Wcompute`` with the ``J2`` operator: the learned
    adjacency (softmax over each row, the diagonal left out) beside the
    identity, ``[batch, N, N, 2]``."""

    def __init__(self, in_channels: int, hidden: List[int], dropout: float = 0.0,
                 negative_slope: float = 0.01):
        super().__init__()
        widths = [in_channels] + hidden
        self.convs = nn.ModuleList(nn.Conv2d(a, b, 1) for a, b in zip(widths[:-1], widths[1:]))
        self.norms = nn.ModuleList(nn.BatchNorm2d(b) for b in hidden)
        self.conv_last = nn.Conv2d(widths[-1], 1, 1)
        self.dropout = dropout
        self.negative_slope = negative_slope

    def forward(self, x: Tensor, identity: Tensor) -> Tensor:
        w = torch.abs(x.unsqueeze(2) - x.unsqueeze(1))  # [batch, N, N, F]
        w = w.transpose(1, 3)                           # [batch, F, N, N]
        for k, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            w = F.leaky_relu(norm(conv(w)), self.negative_slope)
            if k == 0 and self.dropout > 0:
                w = F.dropout(w, self.dropout, self.training)
        w = self.conv_last(w).transpose(1, 3)           # [batch, N, N, 1]
        w = w - identity * 1e8                          # no node in its own softmax
        w = F.softmax(w.transpose(2, 3), dim=-1).transpose(2, 3)  # softmax over j of w[:, i, j]
        return torch.cat([identity, w], dim=3)          # [batch, N, N, 2]


def graph_multiply(w: Tensor, x: Tensor) -> Tensor:
    """The authors' ``gmul``: ``[W_1 x, W_2 x, ...]`` for operators ``w``
    ``[batch, N, N, J]`` and features ``x`` ``[batch, N, F]``."""
    n = w.size(-2)
    w = torch.cat(w.split(1, dim=3), dim=1).squeeze(3)  # [batch, J N, N]
    out = torch.bmm(w, x)                               # [batch, J N, F]
    return torch.cat(out.split(n, dim=1), dim=2)        # [batch, N, J F]


class DenseGraphConv(nn.Module):
    """The authors' ``Gconv``: a linear map of ``[x, A x]``, then BatchNorm."""

    def __init__(self, in_channels: int, out_channels: int, norm: bool = True):
        super().__init__()
        self.fc = nn.Linear(2 * in_channels, out_channels)
        self.norm = nn.BatchNorm1d(out_channels) if norm else None

    def forward(self, w: Tensor, x: Tensor) -> Tensor:
        h = graph_multiply(w, x)                        # [batch, N, 2 F]
        shape = h.shape
        h = self.fc(h.reshape(-1, shape[-1]))
        if self.norm is not None:
            h = self.norm(h)
        return h.view(*shape[:-1], -1)


def _norm_pairs(dense: nn.Module, ours: nn.Module) -> List[Tuple[Tensor, Tensor]]:
    names = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
    return [(getattr(dense, name), getattr(ours, name)) for name in names]


class DenseFewShotGNN(nn.Module):
    """``GNN_nl`` on a batch of equal-sized episodes ``[batch, N, F]``;
    returns the class scores of every node ``[batch, N, num_ways]``."""

    def __init__(self, gnn: FewShotGNN):
        super().__init__()
        self.negative_slope = gnn.negative_slope
        self.adjacencies = nn.ModuleList(
            DenseAdjacency(c.in_channels, c.hidden_channels, c.metric_dropout, c.negative_slope)
            for c in list(gnn.convs) + [gnn.last])
        self.convs = nn.ModuleList(DenseGraphConv(c.in_channels, c.out_channels) for c in gnn.convs)
        self.last = DenseGraphConv(gnn.last.in_channels, gnn.last.out_channels, norm=gnn.last_norm is not None)
        self.load_from(gnn)

    def weight_pairs(self, gnn: FewShotGNN) -> List[Tuple[Tensor, Tensor]]:
        """``(dense tensor, message-passing tensor)`` for every weight and
        BatchNorm statistic: the same numbers, the dense ones in the shapes
        of 1x1 convolutions."""
        pairs = []
        for dense, conv in zip(self.adjacencies, list(gnn.convs) + [gnn.last]):
            for target, lin in zip(list(dense.convs) + [dense.conv_last], conv.metric.lins):
                pairs += [(target.weight, lin.weight), (target.bias, lin.bias)]
            for target, norm in zip(dense.norms, conv.metric.norms):
                pairs += _norm_pairs(target, norm.module)
        for dense, conv, norm in zip(list(self.convs) + [self.last], list(gnn.convs) + [gnn.last],
                                     list(gnn.norms) + [gnn.last_norm]):
            pairs += [(dense.fc.weight, conv.lin.weight), (dense.fc.bias, conv.lin.bias)]
            if norm is not None:
                pairs += _norm_pairs(dense.norm, norm)
        return pairs

    @torch.no_grad()
    def load_from(self, gnn: FewShotGNN) -> None:
        """Copies the weights (and BatchNorm statistics) of ``gnn``."""
        for dense, ours in self.weight_pairs(gnn):
            dense.copy_(ours.view_as(dense))

    def forward(self, x: Tensor) -> Tensor:
        batch, n = x.shape[:2]
        identity = torch.eye(n, device=x.device, dtype=x.dtype).expand(batch, n, n).unsqueeze(3)
        for adjacency, conv in zip(self.adjacencies[:-1], self.convs):
            new = F.leaky_relu(conv(adjacency(x, identity), x), self.negative_slope)
            x = torch.cat([x, new], dim=2)
        return self.last(self.adjacencies[-1](x, identity), x)
