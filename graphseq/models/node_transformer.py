"""A Transformer encoder for node classification on one graph: the nodes are
the tokens, and attention runs either along the graph's edges (each node
attends to its neighbours and itself) or over every node of the graph (the
plain Transformer, which sees the graph only through the positional
encodings). The two differ in nothing but the graph handed to attention.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import graphs
from ..nn import TransformerEncoderLayer
from ..nn.sparse import sparse_dense_mm, sparse_dropout

ATTENTION = ("neighbours", "full")


class NodeTransformer(nn.Module):
    """Dropout -> linear embedding, layer-normalised (+ a linear map of fixed
    positional encodings) -> ``layers`` pre-norm Transformer encoder layers ->
    layer norm -> dropout -> linear classifier.

    The embedding of row-normalised bag-of-words features is tiny (about
    1e-2) next to that of the encodings; normalising it first keeps the
    content from drowning.

    Args:
        in_channels (int): number of input features (sparse inputs are multiplied sparsely).
        out_channels (int): number of classes.
        hidden_channels (int): width of the encoder. (default: 64)
        heads (int): attention heads. (default: 2)
        layers (int): encoder layers. (default: 2)
        dim_feedforward (int): hidden size of each feed-forward network. (default: 128)
        dropout (float): dropout of the input features and before the classifier. (default: 0.6)
        layer_dropout (float): dropout inside each encoder layer. (default: 0.5)
        attention_dropout (float): dropout of the attention coefficients. (default: 0.6)
        attention (str): ``"neighbours"`` (along the edges, plus self-loops)
            or ``"full"`` (every node attends to every node). (default: ``"neighbours"``)
        positional_encoding (Tensor, optional): ``[num_nodes, k]`` fixed node
            encodings added through a learned linear map. (default: None)
    """

    def __init__(self, in_channels: int, out_channels: int, hidden_channels: int = 64, heads: int = 2,
                 layers: int = 2, dim_feedforward: int = 128, dropout: float = 0.6,
                 layer_dropout: float = 0.5, attention_dropout: float = 0.6, attention: str = "neighbours",
                 positional_encoding: Optional[Tensor] = None):
        super().__init__()
        if attention not in ATTENTION:
            raise ValueError(f"attention must be one of {', '.join(ATTENTION)}, got {attention!r}")
        self.attention = attention
        self.dropout = dropout
        self.embed = nn.Linear(in_channels, hidden_channels)
        self.embed_norm = nn.LayerNorm(hidden_channels)
        if positional_encoding is not None:
            self.register_buffer("positional_encoding", positional_encoding)
            self.embed_position = nn.Linear(positional_encoding.size(1), hidden_channels)
        else:
            self.positional_encoding, self.embed_position = None, None
        self.layers = nn.ModuleList([
            TransformerEncoderLayer(hidden_channels, heads, dim_feedforward, dropout=layer_dropout,
                                    activation="gelu", norm_first=True)
            for _ in range(layers)])
        for layer in self.layers:
            layer.self_attn.dropout = attention_dropout
        self.norm = nn.LayerNorm(hidden_channels)
        self.classify = nn.Linear(hidden_channels, out_channels)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        if self.positional_encoding is not None and self.positional_encoding.size(0) != x.size(0):
            raise ValueError(f"NodeTransformer's positional encoding covers {self.positional_encoding.size(0)} "
                             f"nodes, but x has {x.size(0)}: it is fixed to the graph it was made for")
        if self.attention == "neighbours":
            edge_index = graphs.with_self_loops(edge_index, x.size(0), sort=True)
        else:
            edge_index = None  # Every node of the one graph attends to every node.
        x = sparse_dropout(x, self.dropout, self.training)
        if x.layout == torch.strided:
            h = self.embed(x)
        else:
            h = sparse_dense_mm(x, self.embed.weight.t()) + self.embed.bias  # [num_nodes, hidden]
        h = self.embed_norm(h)
        if self.positional_encoding is not None:
            h = h + self.embed_position(self.positional_encoding)
        for layer in self.layers:
            h = layer(h, edge_index)
        h = F.dropout(self.norm(h), p=self.dropout, training=self.training)
        return self.classify(h)
