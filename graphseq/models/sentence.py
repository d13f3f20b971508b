"""A sentence classifier from graphseq's chain layers: the words of each
sentence are the nodes of a chain, a bidirectional
:class:`~graphseq.nn.ChainLSTM` reads it both ways, and each sentence's
node states are pooled (max over its nodes, or the two final states) into
one vector for a linear classifier.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import global_max_pool, global_mean_pool

from ..errors import GraphseqError
from ..nn.recurrent_cells import ChainLSTM

POOLS = ("max", "mean", "final")


class SentenceClassifier(nn.Module):
    """Embedding -> dropout -> bidirectional ChainLSTM -> pool per sentence
    -> dropout -> linear.

    Args:
        vocab_size (int): number of words (id 0 may stand for unknown ones).
        num_classes (int): number of classes. (default: :obj:`2`)
        embedding_dim (int): size of each word embedding. (default: :obj:`300`)
        hidden_size (int): state size of each direction. (default: :obj:`150`)
        num_layers (int): stacked LSTM layers. (default: :obj:`1`)
        dropout (float): dropout of the embeddings and of the pooled
            sentence vector. (default: :obj:`0.5`)
        pool (str): ``"max"`` or ``"mean"`` over each sentence's node
            outputs, or ``"final"`` for the last states of both directions.
            (default: ``"max"``)

    Shapes:
        - **input:** word ids :math:`(|\\mathcal{V}|)`, chain edges
          :math:`(2, |\\mathcal{E}|)`, sentence of each word :math:`(|\\mathcal{V}|)`
        - **output:** logits :math:`(G, \\text{num\\_classes})`
    """

    def __init__(self, vocab_size: int, num_classes: int = 2, embedding_dim: int = 300,
                 hidden_size: int = 150, num_layers: int = 1, dropout: float = 0.5,
                 pool: str = "max"):
        super().__init__()
        if pool not in POOLS:
            raise GraphseqError(f"unknown pool {pool!r}; use one of {', '.join(POOLS)}")
        self.pool = pool
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.dropout = nn.Dropout(dropout)
        self.rnn = ChainLSTM(embedding_dim, hidden_size, num_layers, bidirectional=True,
                             dropout=dropout if num_layers > 1 else 0.0)
        self.classifier = nn.Linear(2 * hidden_size, num_classes)

    def forward(self, tokens: Tensor, edge_index: Tensor, batch: Tensor,
                num_graphs: Optional[int] = None) -> Tensor:
        if num_graphs is None:
            num_graphs = int(batch.max()) + 1 if batch.numel() else 0
        x = self.dropout(self.embedding(tokens))  # [num_nodes, embedding_dim]
        out, (h_n, _) = self.rnn(x, edge_index, batch)  # out: [num_nodes, 2 * hidden]
        if self.pool == "max":
            sentence = global_max_pool(out, batch, size=num_graphs)
        elif self.pool == "mean":
            sentence = global_mean_pool(out, batch, size=num_graphs)
        else:
            # The last layer's final states of both directions. An empty sentence keeps the zero
            # initial state (the other pools give it zeros too); empty sentences at the end, which
            # batch cannot show, get zero rows, and an empty batch (one row in h_n) none.
            if h_n.size(1) > num_graphs and tokens.numel():
                raise GraphseqError(f"SentenceClassifier: batch holds {h_n.size(1)} sentences, "
                                    f"but num_graphs is {num_graphs}")
            sentence = torch.cat([h_n[-2], h_n[-1]], dim=1)[:num_graphs]
            sentence = F.pad(sentence, (0, 0, 0, num_graphs - sentence.size(0)))  # [num_graphs, 2 * hidden]
        return self.classifier(self.dropout(sentence))  # [num_graphs, num_classes]
