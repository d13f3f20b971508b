"""Stage: neighbours versus everyone. One Transformer encoder is trained on a
node-classification graph twice, attending (a) along the graph's edges and
(b) over all nodes, beside (c) the GAT of the paper, with the same split, the
same seed and the same training loop; each one's test accuracy is reported.
"""
from __future__ import annotations

from typing import List

import torch
import torch_geometric.transforms as T
from torch_geometric.data import Data

from ..checks import Domain, at_least, each, non_negative, one_of, positive, probability
from ..errors import GraphseqError
from ..models import GAT
from ..models.node_transformer import NodeTransformer
from ..seeding import seed_everything
from .node_training import fit_node_classifier
from .registry import stage

VARIANTS = ("neighbours", "full", "gat")
# The Transformer's keys apply when a variant is one of its own; GAT keeps gat-cora's settings.
WITH_TRANSFORMER = Domain('a list with "neighbours" or "full" in it',
                          lambda v: any(variant != "gat" for variant in v))
TRANSFORMER_KEYS = ("hidden_channels", "heads", "layers", "dim_feedforward", "dropout", "layer_dropout",
                    "attention_dropout", "positional_encoding", "encoding_dim")
# The longest random walk whose return probabilities encode a node (the
# pipeline uses 8; random-walk encodings in the literature use a few dozen at
# most). Each step multiplies by the graph's adjacency matrix, and the product
# fills in as the walk grows (on Cora it is dense within a few steps), so a
# much longer walk runs for hours for features nobody has found useful.
MAX_WALK_LENGTH = 64


def node_encodings(data: Data, kind: str, dim: int) -> torch.Tensor | None:
    """``[num_nodes, dim]`` fixed node encodings: random-walk return
    probabilities (``"random_walk"``), Laplacian eigenvectors
    (``"laplacian"``) or none (``"none"``)."""
    if kind == "none":
        return None
    graph = Data(edge_index=data.edge_index.cpu(), num_nodes=data.num_nodes)
    if kind == "random_walk":
        graph = T.AddRandomWalkPE(walk_length=dim, attr_name="pe")(graph)
    elif kind == "laplacian":
        graph = T.AddLaplacianEigenvectorPE(k=dim, attr_name="pe", is_undirected=True)(graph)
    else:
        raise GraphseqError(f"unknown positional_encoding {kind!r}; use random_walk, laplacian or none")
    return graph.pe.to(data.edge_index.device)


def _laplacian_limit(num_nodes: int) -> int:
    """The most non-trivial Laplacian eigenvectors a graph of ``num_nodes``
    nodes gives: ``num_nodes - 1`` from the dense solver PyG uses on small
    graphs, ``num_nodes - 2`` from scipy's ``eigsh`` (which needs ``k + 1 <
    num_nodes``) on larger ones."""
    return num_nodes - (1 if num_nodes < T.AddLaplacianEigenvectorPE.SPARSE_THRESHOLD else 2)


def _check_encoding(positional_encoding: str, encoding_dim: int, num_nodes: int | None = None) -> None:
    """Refuses an ``encoding_dim`` the encoding cannot give (or give in
    reasonable time); ``num_nodes`` where the graph is known."""
    if positional_encoding == "random_walk" and encoding_dim > MAX_WALK_LENGTH:
        raise GraphseqError(f"attention_comparison: encoding_dim = {encoding_dim} is too long a random walk: "
                            f"it must be at most {MAX_WALK_LENGTH} with positional_encoding = \"random_walk\"")
    if positional_encoding == "laplacian" and num_nodes is not None and encoding_dim > _laplacian_limit(num_nodes):
        raise GraphseqError(f"attention_comparison: encoding_dim = {encoding_dim} must be at most "
                            f"{_laplacian_limit(num_nodes)} with positional_encoding = \"laplacian\" on a graph "
                            f"of {num_nodes} nodes (its non-trivial Laplacian eigenvectors)")


def _check_heads(check, *, variants: List[str], hidden_channels: int, heads: int,
                 positional_encoding: str, encoding_dim: int, **_) -> None:
    if any(v != "gat" for v in variants) and hidden_channels % heads:
        raise GraphseqError(f"attention_comparison: hidden_channels = {hidden_channels} must be divisible by "
                            f"heads = {heads} (each head reads hidden_channels / heads features)")
    if any(v != "gat" for v in variants):
        _check_encoding(positional_encoding, encoding_dim)  # The graph's size is known only when it is loaded.


@stage("attention_comparison", checks={
    "variants": each(one_of(*VARIANTS), distinct=True), "hidden_channels": at_least(1), "heads": at_least(1),
    "layers": at_least(1), "dim_feedforward": at_least(1), "dropout": probability,
    "layer_dropout": probability, "attention_dropout": probability,
    "positional_encoding": one_of("random_walk", "laplacian", "none"), "encoding_dim": at_least(1),
    "lr": positive, "weight_decay": non_negative, "max_epochs": at_least(1), "patience": at_least(1)},
       precheck=_check_heads,
       applies={**{key: {"variants": WITH_TRANSFORMER} for key in TRANSFORMER_KEYS},
                "encoding_dim": {"variants": WITH_TRANSFORMER,
                                 "positional_encoding": ("random_walk", "laplacian")}},
       needs={"data": "a graph dataset"})
def attention_comparison(ctx, *, variants: List[str] = list(VARIANTS), hidden_channels: int = 64,
                         heads: int = 2, layers: int = 2, dim_feedforward: int = 128,
                         dropout: float = 0.6, layer_dropout: float = 0.5, attention_dropout: float = 0.6,
                         positional_encoding: str = "random_walk", encoding_dim: int = 8,
                         lr: float = 0.005, weight_decay: float = 5e-4, max_epochs: int = 100_000,
                         patience: int = 100) -> None:
    """Trains each of ``variants`` from the run's seed and sets
    ``test_accuracy_<variant>``, ``val_accuracy_<variant>``,
    ``epochs_<variant>`` and ``epoch_seconds_<variant>``.

    The Transformer's keys (``TRANSFORMER_KEYS``: its size, its dropouts,
    its ``positional_encoding`` and the ``encoding_dim`` of a random-walk
    or Laplacian one) apply to ``"neighbours"`` and ``"full"`` only:
    ``"gat"`` is gat-cora's model with the paper's settings (its dropout
    too), so with ``variants = ["gat"]`` they are refused. ``lr``,
    ``weight_decay``, ``max_epochs`` and ``patience`` train every variant."""
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise GraphseqError(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    data = ctx.require("data", "attention_comparison")
    num_features = ctx.require("num_features", "attention_comparison")
    num_classes = ctx.require("num_classes", "attention_comparison")
    encoding = None
    if any(v != "gat" for v in variants):
        _check_encoding(positional_encoding, encoding_dim, data.num_nodes)
        encoding = node_encodings(data, positional_encoding, encoding_dim)

    for variant in variants:
        seed_everything(ctx.seed)  # Every model starts from the same seed.
        if variant == "gat":
            model = GAT(num_features, num_classes)  # The paper's settings, as in gat-cora.
        else:
            model = NodeTransformer(num_features, num_classes, hidden_channels=hidden_channels,
                                    heads=heads, layers=layers, dim_feedforward=dim_feedforward,
                                    dropout=dropout, layer_dropout=layer_dropout,
                                    attention_dropout=attention_dropout,
                                    attention=variant, positional_encoding=encoding)
        ctx.log.info(f"{variant}: {sum(p.numel() for p in model.parameters())} parameters")
        figures = fit_node_classifier(model.to(ctx.device), data, lr=lr, weight_decay=weight_decay,
                                      max_epochs=max_epochs, patience=patience, quiet=ctx.quiet,
                                      checkpoint=str(ctx.out / f"best-{variant}.pt"), log=ctx.log)
        ctx.log.info(f"{variant}: test accuracy {figures['test_accuracy']:.4f}")
        ctx.metrics.update({f"{key}_{variant}": value for key, value in figures.items()})
