"""The two-layer GCN of Kipf and Welling (ICLR 2017), the model the
active-learning loop retrains after every round. It also returns its hidden
layer, the embeddings that some query strategies (coreset, AGE) read.
"""
from __future__ import annotations

from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import GCNConv

from ..nn import checks
from ..nn.sparse import float32_sparse_products, sparse_dropout


class GCN(torch.nn.Module):
    """Dropout -> GCNConv -> ReLU -> dropout -> GCNConv.

    Args:
        in_channels (int): number of input features (sparse CSR features
            are dropped out sparsely).
        hidden_channels (int): width of the hidden layer.
        out_channels (int): number of classes.
        dropout (float): dropout of each layer's input. (default: :obj:`0.5`)

    Shapes:
        - **input:** node features :math:`(|\\mathcal{V}|, F_{in})`, edges
          :math:`(2, |\\mathcal{E}|)` or a sparse (transposed) adjacency matrix
        - **output:** logits :math:`(|\\mathcal{V}|, F_{out})` and the hidden
          layer :math:`(|\\mathcal{V}|, \\text{hidden\\_channels})`
    """

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int, dropout: float = 0.5):
        super().__init__()
        self.dropout = dropout
        self.conv1 = GCNConv(in_channels, hidden_channels, cached=True)
        self.conv2 = GCNConv(hidden_channels, out_channels, cached=True)
        self._graph = None  # what the layers' cached normalisation was made from

    def forward(self, x: Tensor, edge_index: Tensor) -> Tuple[Tensor, Tensor]:
        # The layers keep their normalised graph (cached=True, for retraining
        # on one graph); it is made again for any other or edited graph.
        key = (edge_index, checks.kept_stamp(edge_index), x.size(0))
        if key[1] is None or self._graph is None or self._graph[0] is not edge_index or self._graph[1:] != key[1:]:
            for conv in (self.conv1, self.conv2):
                conv._cached_edge_index = conv._cached_adj_t = None
            self._graph = None if key[1] is None else key
        x = sparse_dropout(x, self.dropout, self.training)
        with float32_sparse_products(x):
            hidden = F.relu(self.conv1(x, edge_index))  # [num_nodes, hidden_channels]
        x = F.dropout(hidden, p=self.dropout, training=self.training)
        return self.conv2(x, edge_index), hidden  # [num_nodes, out_channels]
