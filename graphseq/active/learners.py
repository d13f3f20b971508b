"""What the loop retrains after every round: a model over all items of a
graph, fitted to the labelled ones. :class:`GCNLearner` trains the two-layer
:class:`~graphseq.models.gcn.GCN` from the same seeded start each round, so
that two labelled sets are compared, not two initialisations.
"""
from __future__ import annotations

import warnings
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import remove_self_loops, to_torch_csr_tensor

from ..errors import GraphseqError
from ..graphs import to_csr
from ..models.gcn import GCN


class GCNLearner:
    """Fits a fresh :class:`GCN` on the labelled nodes of ``data`` (``x``,
    ``edge_index``, and the mask :meth:`accuracy` reads: ``test_mask``, or
    ``val_mask`` with ``evaluate="val"`` for choosing settings on validation
    figures) with Adam, the recipe of the GCN paper by default."""

    def __init__(self, data: Data, num_classes: int, device: torch.device, seed: int = 0,
                 hidden: int = 16, epochs: int = 200, lr: float = 0.01,
                 weight_decay: float = 5e-4, dropout: float = 0.5, evaluate: str = "test"):
        if not isinstance(getattr(data, f"{evaluate}_mask", None), Tensor):
            raise GraphseqError(f"learner.evaluate = {evaluate!r}: this task's data has no {evaluate}_mask")
        if not bool(getattr(data, f"{evaluate}_mask").any()):
            raise GraphseqError(f"GCNLearner: the {evaluate}_mask selects no nodes, so there is no "
                                f"{evaluate} accuracy to measure")
        self.mask_name = f"{evaluate}_mask"
        self.data = data.to(device)
        # Bag-of-words features are mostly zeros; kept sparse, dropout is cheap.
        self.x = self.data.x
        if self.x.layout == torch.strided and (self.x != 0).float().mean() < 0.1:
            self.x = to_csr(self.x)
        # The normalised adjacency as a sparse matrix: GCNConv then multiplies
        # instead of gathering and scattering along every edge, several times
        # faster on a CPU. PyG reads a sparse adjacency transposed (row = target).
        edge_index, _ = remove_self_loops(self.data.edge_index)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse (CSR tensor support|invariant checks)")
            self.adj_t = to_torch_csr_tensor(edge_index.flip(0), size=(data.num_nodes, data.num_nodes))
        self.num_classes = num_classes
        self.device = device
        self.seed = seed
        self.hidden, self.epochs, self.lr = hidden, epochs, lr
        self.weight_decay, self.dropout = weight_decay, dropout
        self.model = None

    def fit(self, items: Tensor, labels: Tensor) -> None:
        torch.manual_seed(self.seed)
        self.model = GCN(self.x.size(1), self.hidden, self.num_classes, self.dropout).to(self.device)
        optimizer = torch.optim.Adam(self.model.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        items, labels = items.to(self.device), labels.to(self.device)
        self.model.train()
        for _ in range(self.epochs):
            optimizer.zero_grad()
            logits, _ = self.model(self.x, self.adj_t)
            F.cross_entropy(logits[items], labels).backward()
            optimizer.step()

    @torch.no_grad()
    def predict(self) -> Tuple[Tensor, Tensor]:
        """Class probabilities ``[num_nodes, num_classes]`` and embeddings
        ``[num_nodes, hidden]`` of every node."""
        self.model.eval()
        logits, hidden = self.model(self.x, self.adj_t)
        return logits.softmax(dim=-1), hidden

    @torch.no_grad()
    def accuracy(self) -> float:
        """Accuracy on the nodes of the evaluated mask (``test_mask`` by default)."""
        probabilities, _ = self.predict()
        mask = self.data[self.mask_name]
        return float((probabilities[mask].argmax(dim=-1) == self.data.y[mask]).float().mean())
