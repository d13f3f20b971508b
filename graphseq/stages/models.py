"""Stages that build a model for the data an earlier stage loaded."""
from __future__ import annotations

from ..checks import at_least, probability
from ..models import GAT
from .registry import stage


@stage("gat", checks={"hidden_channels": at_least(1), "heads": at_least(1), "output_heads": at_least(1),
                      "dropout": probability, "attention_dropout": probability, "value_dropout": probability},
       makes={"model": "a graph network"}, needs={"data": ("a graph dataset", "a dataset of graphs")})
def gat(ctx, *, hidden_channels: int = 8, heads: int = 8, output_heads: int = 1,
        dropout: float = 0.6, attention_dropout: float = 0.6, value_dropout: float = 0.6) -> None:
    """The two-layer GAT of the paper as the authors' code builds it
    (:class:`~graphseq.models.GAT`), as ``ctx.model``."""
    model = GAT(ctx.require("num_features", "gat"), ctx.require("num_classes", "gat"),
                hidden_channels=hidden_channels, heads=heads, output_heads=output_heads,
                dropout=dropout, attention_dropout=attention_dropout, value_dropout=value_dropout)
    ctx.model = model.to(ctx.device)
    ctx.log.info(f"model: {model}")
