"""The two-layer GAT of Veličković et al. (ICLR 2018) for transductive node
classification, as in its Cora, CiteSeer and PubMed experiments.

Bag-of-words features are almost all zeros (98.7% on Cora). Kept sparse, they
are dropped out and multiplied sparsely (:mod:`graphseq.nn.sparse`): the same
model at a fraction of the cost.
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .. import graphs
from ..nn import GATConv, checks
from ..nn.sparse import sparse_dropout


class GAT(nn.Module):
    """Dropout -> GATConv (``heads`` x ``hidden_channels``, concatenated) -> ELU
    -> dropout -> GATConv (``output_heads``, averaged).

    The model of the authors' code (github.com/PetarV-/GAT, ``models/gat.py``
    and ``utils/layers.py``): each layer drops out its input, its attention
    coefficients and the transformed features it sums (``value_dropout``),
    all at 0.6 by default; ELU between the layers; the output heads averaged.
    Two details of that code are not followed: each head there draws its own
    dropout mask of the layer's input (here one mask serves all heads), and
    its attention scores carry a bias that the softmax nearly cancels (PyG's
    GATConv has none).

    Args:
        in_channels (int): number of input features.
        hidden_channels (int): features per head of the hidden layer. (default: 8)
        out_channels (int): number of classes.
        heads (int): heads of the hidden layer. (default: 8)
        output_heads (int): heads of the output layer, averaged. (default: 1)
        dropout (float): dropout of each layer's input. (default: 0.6)
        attention_dropout (float): dropout of the attention coefficients. (default: 0.6)
        value_dropout (float): dropout of each layer's transformed features
            before they are summed, as in the authors' code. (default: 0.6)
    """

    def __init__(self, in_channels: int, out_channels: int, hidden_channels: int = 8,
                 heads: int = 8, output_heads: int = 1, dropout: float = 0.6,
                 attention_dropout: float = 0.6, value_dropout: float = 0.6):
        super().__init__()
        self.dropout = dropout
        # Both layers attend over the same graph with self-loops, so the
        # loops are added (and edges sorted by target) once per forward pass.
        self.conv1 = GATConv(in_channels, hidden_channels, heads=heads, dropout=attention_dropout,
                             add_self_loops=False, value_dropout=value_dropout)
        self.conv2 = GATConv(hidden_channels * heads, out_channels, heads=output_heads,
                             concat=False, dropout=attention_dropout, add_self_loops=False,
                             value_dropout=value_dropout)
        self._graph = None

    def reset_parameters(self):
        self.conv1.reset_parameters()
        self.conv2.reset_parameters()

    def graph_with_self_loops(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        """The edges with one self-loop per node, sorted by target. Training
        passes the same graph every epoch, so the result is kept for as long
        as the same, unmodified ``edge_index`` tensor comes back."""
        checks.check_tensor(self, edge_index, "edge_index")
        key = (edge_index, checks.kept_stamp(edge_index), num_nodes)
        if self._graph is not None and self._graph[0] is key[0] and self._graph[1:3] == key[1:]:
            return self._graph[3]
        graph = graphs.with_self_loops(edge_index, num_nodes, sort=True)
        self._graph = None if key[1] is None else (*key, graph)
        return graph

    def inference_layers(self):
        """The two hops as functions ``(x, edge_index) -> x``, for inference
        layer by layer over a graph too large to pass through whole
        (:func:`graphseq.data.neighbors.layerwise_inference`)."""
        def first(x: Tensor, edge_index: Tensor) -> Tensor:
            edge_index = self.graph_with_self_loops(edge_index, x.size(0))
            return F.elu(self.conv1(sparse_dropout(x, self.dropout, self.training), edge_index))

        def second(x: Tensor, edge_index: Tensor) -> Tensor:
            edge_index = self.graph_with_self_loops(edge_index, x.size(0))
            return self.conv2(F.dropout(x, p=self.dropout, training=self.training), edge_index)

        return [first, second]

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        edge_index = self.graph_with_self_loops(edge_index, x.size(0))
        x = sparse_dropout(x, self.dropout, self.training)
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, p=self.dropout, training=self.training)
        return self.conv2(x, edge_index)
