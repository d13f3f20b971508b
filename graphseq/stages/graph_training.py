"""Stages of inductive multi-label node classification over many graphs (the
GAT paper's PPI experiment, ``gat-ppi``): load the graph splits, build the
three-layer GAT, train it on mini-batches of whole graphs with the step
trainer (data-parallel over graphs when several processes run), keep the
weights with the best validation micro-F1, and score the test graphs once.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Batch, Data

from .. import distributed
from ..checks import at_least, non_negative, one_of, positive
from ..data.ppi import load_ppi
from ..errors import GraphseqError
from ..models.inductive_gat import InductiveGAT
from ..training import CHECKPOINT, train_steps
from .registry import stage


@stage("ppi", makes={"data": "a dataset of graphs"})
def ppi(ctx) -> None:
    """PPI's training, validation and test graphs as ``ctx.data``
    (``{"train": ..., "val": ..., "test": ...}``), ``ctx.num_features`` and
    ``ctx.num_classes`` (the number of labels)."""
    with distributed.main_first():  # One process unpacks and processes the files.
        data = load_ppi(ctx.data_root, ctx.data_mirror, log=ctx.log)
    ctx.data = data
    ctx.num_features = data["train"].num_features
    ctx.num_classes = data["train"][0].y.size(1)
    if distributed.is_main():
        ctx.log.info("PPI: " + ", ".join(f"{split} {len(graphs)} graphs ({graphs._data.num_nodes:,} nodes)"
                                         for split, graphs in data.items())
                     + f"; {ctx.num_features} features, {ctx.num_classes} labels")


@stage("inductive_gat", checks={"hidden_channels": at_least(1), "heads": at_least(1),
                                "output_heads": at_least(1), "layers": at_least(2)},
       makes={"model": "a graph network"}, needs={"data": ("a graph dataset", "a dataset of graphs")})
def inductive_gat(ctx, *, hidden_channels: int = 256, heads: int = 4, output_heads: int = 6,
                  layers: int = 3) -> None:
    """The paper's PPI model (:class:`~graphseq.models.inductive_gat.InductiveGAT`) as ``ctx.model``."""
    model = InductiveGAT(ctx.require("num_features", "inductive_gat"),
                         ctx.require("num_classes", "inductive_gat"), hidden_channels=hidden_channels,
                         heads=heads, output_heads=output_heads, layers=layers)
    ctx.model = model.to(ctx.device)
    if distributed.is_main():
        ctx.log.info(f"model: {layers} GAT layers, {sum(p.numel() for p in model.parameters()):,} parameters")


def batch_of(graphs: Sequence[Data], device: torch.device) -> Batch:
    return Batch.from_data_list(list(graphs)).to(device)


@torch.no_grad()
def multilabel_scores(model: nn.Module, graphs: Sequence[Data], device: torch.device,
                      batch_size: int = 2) -> Dict[str, float]:
    """Mean binary cross-entropy and micro-F1 (labels predicted where the
    logit is positive) over all nodes of ``graphs``."""
    from sklearn.metrics import f1_score  # Imported when needed: scikit-learn is slow to load.

    model.eval()
    predictions: List[Tensor] = []
    targets: List[Tensor] = []
    loss, count = 0.0, 0
    for start in range(0, len(graphs), batch_size):
        batch = batch_of(graphs[start:start + batch_size], device)
        logits = model(batch.x, batch.edge_index)
        loss += float(F.binary_cross_entropy_with_logits(logits, batch.y, reduction="sum"))
        count += batch.y.numel()
        predictions.append((logits > 0).cpu())
        targets.append(batch.y.cpu())
    y_true, y_pred = torch.cat(targets).numpy(), torch.cat(predictions).numpy()
    return {"loss": loss / count, "f1": float(f1_score(y_true, y_pred, average="micro", zero_division=0))}


@stage("train_graphs", checks={"lr": positive, "weight_decay": non_negative, "batch_size": at_least(1),
                               "steps": at_least(1), "eval_every": at_least(1), "checkpoint_every": at_least(1)},
       resumes=CHECKPOINT, resume_may_change=("steps",), data_parallel=True, splits=("batch_size",),
       needs={"data": "a dataset of graphs", "model": "a graph network"})
def train_graphs(ctx, *, lr: float = 0.005, weight_decay: float = 0.0, batch_size: int = 2,
                 steps: int = 5000, eval_every: int = 10, checkpoint_every: int = 100) -> None:
    """Trains ``ctx.model`` on mini-batches of ``batch_size`` training graphs
    (drawn without replacement, a new order every epoch) with Adam and binary
    cross-entropy, for ``steps`` steps; scores the validation graphs every
    ``eval_every`` steps and keeps the weights with the best micro-F1.

    With several processes each takes its share of every batch's graphs
    (``batch_size`` must divide evenly), and the loss is weighted so that a
    step equals the single-process step on the whole batch.
    """
    model, data = ctx.require("model", "train_graphs"), ctx.require("data", "train_graphs")
    train, val = list(data["train"]), list(data["val"])
    size = distributed.world_size()
    if batch_size > len(train):
        raise GraphseqError(f"train_graphs: batch_size {batch_size} exceeds the {len(train)} training graphs")
    per_epoch = len(train) // batch_size
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)

    def loss_fn(model: nn.Module, step: int) -> Tensor:
        # Every rank draws the same order from the seed and the epoch, then
        # takes its own graphs of this step's batch.
        epoch, k = divmod(step, per_epoch)
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(ctx.seed * 100_003 + epoch))
        chosen = order[k * batch_size:(k + 1) * batch_size]
        entries = sum(train[i].y.numel() for i in chosen.tolist())
        batch = batch_of([train[i] for i in distributed.shard(chosen).tolist()], ctx.device)
        logits = model(batch.x, batch.edge_index)
        # DDP averages the ranks' gradients; weighting each rank's sum by
        # size / entries makes that average the mean over the whole batch.
        return F.binary_cross_entropy_with_logits(logits, batch.y, reduction="sum") * size / entries

    def evaluate(model: nn.Module) -> Dict[str, float]:
        scores = multilabel_scores(model, val, ctx.device)
        return {"val_loss": scores["loss"], "val_f1": scores["f1"]}

    result = train_steps(model, optimizer, loss_fn, steps=steps, out=ctx.out, device=ctx.device, resume=ctx.resume,
                         quiet=ctx.quiet, log=ctx.log, pipeline=ctx.pipeline, evaluate=evaluate,
                         eval_every=eval_every, select=("val_f1", "max"),
                         checkpoint_every=checkpoint_every, desc=ctx.pipeline)
    ctx.metrics.update(val_f1=result.best["val_f1"], best_step=result.best["step"], steps=result.step,
                       train_minutes=result.seconds / 60)
    if distributed.is_main():
        ctx.log.info(f"kept the weights of step {result.best['step']}: validation micro-F1 "
                     f"{result.best['val_f1']:.4f}")


@stage("evaluate_graphs", checks={"split": one_of("train", "val", "test")}, needs={"data": "a dataset of graphs", "model": "a graph network"})
def evaluate_graphs(ctx, *, split: str = "test") -> None:
    """Micro-F1 of ``ctx.model`` on one split's graphs, as ``<split>_f1``."""
    data = ctx.require("data", "evaluate_graphs")
    if split not in data:
        raise GraphseqError(f"evaluate_graphs: unknown split {split!r}; known: {', '.join(data)}")
    scores = multilabel_scores(ctx.require("model", "evaluate_graphs"), list(data[split]), ctx.device)
    ctx.metrics[f"{split}_f1"] = scores["f1"]
    if distributed.is_main():
        ctx.log.info(f"{split} micro-F1 {scores['f1']:.4f}")
