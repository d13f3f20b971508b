"""The three-layer GAT of Veličković et al. (ICLR 2018) for the inductive PPI
experiment: the test graphs are never seen in training, and every protein
has 121 independent binary labels.

Layers of ``heads`` x ``hidden_channels`` (4 x 256) concatenated, ELU, a
skip connection across the middle layer (a linear map of its input added
before the activation, as in the authors' code), and an output layer of
``output_heads`` (6) heads averaged into one logit per label. No dropout.
"""
from __future__ import annotations

from typing import Callable, List

import torch.nn.functional as F
from torch import Tensor, nn

from ..nn import GATConv


class InductiveGAT(nn.Module):
    """GATConv -> ELU -> (GATConv + linear skip) -> ELU -> GATConv (heads averaged).

    Args:
        in_channels (int): number of input features (PPI: 50).
        out_channels (int): number of labels (PPI: 121).
        hidden_channels (int): features per head of the hidden layers. (default: 256)
        heads (int): heads of each hidden layer, concatenated. (default: 4)
        output_heads (int): heads of the output layer, averaged. (default: 6)
        layers (int): attention layers, at least 2; every layer strictly
            between the first and the last gets a skip connection. (default: 3)

    Shapes:
        - **input:** node features :math:`(|\\mathcal{V}|, F_{in})`, edge
          indices :math:`(2, |\\mathcal{E}|)`
        - **output:** logits :math:`(|\\mathcal{V}|, \\text{out\\_channels})`
    """

    def __init__(self, in_channels: int, out_channels: int, hidden_channels: int = 256,
                 heads: int = 4, output_heads: int = 6, layers: int = 3):
        super().__init__()
        if layers < 2:
            raise ValueError(f"InductiveGAT needs at least 2 layers, got {layers}")
        width = heads * hidden_channels
        self.convs = nn.ModuleList(
            [GATConv(in_channels, hidden_channels, heads=heads)]
            + [GATConv(width, hidden_channels, heads=heads) for _ in range(layers - 2)]
            + [GATConv(width, out_channels, heads=output_heads, concat=False)])
        self.skips = nn.ModuleList([nn.Linear(width, width) for _ in range(layers - 2)])

    def reset_parameters(self) -> None:
        for module in [*self.convs, *self.skips]:
            module.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for layer in self.inference_layers():
            x = layer(x, edge_index)
        return x

    def inference_layers(self) -> List[Callable[[Tensor, Tensor], Tensor]]:
        """One function ``(x, edge_index) -> x`` per hop of message passing,
        so that inference can run layer by layer over a graph too large to
        pass through whole (see :func:`graphseq.data.neighbors.layerwise_inference`)."""
        def first(x: Tensor, edge_index: Tensor) -> Tensor:
            return F.elu(self.convs[0](x, edge_index))

        def middle(conv: GATConv, skip: nn.Linear) -> Callable[[Tensor, Tensor], Tensor]:
            return lambda x, edge_index: F.elu(conv(x, edge_index) + skip(x))

        return ([first] + [middle(c, s) for c, s in zip(self.convs[1:-1], self.skips)]
                + [lambda x, edge_index: self.convs[-1](x, edge_index)])
