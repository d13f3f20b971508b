"""Stages that train and evaluate a node classifier on one graph with
train/validation/test masks (the Planetoid setting)."""
from __future__ import annotations

import math
import statistics
import time
from typing import Any, Dict, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Data
from tqdm import tqdm

from ..checks import at_least, non_negative, one_of, positive
from ..errors import GraphseqError
from ..io import save_checkpoint
from .registry import stage


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def accuracy(model: nn.Module, data: Data, mask: torch.Tensor) -> float:
    model.eval()
    pred = model(data.x, data.edge_index)[mask].argmax(dim=-1)
    return float((pred == data.y[mask]).float().mean())


STOPPING_RULES = ("gat", "accuracy", "loss")


def fit_node_classifier(model: nn.Module, data: Data, *, lr: float, weight_decay: float,
                        max_epochs: int = 100_000, patience: int = 100, stop_on: str = "gat",
                        quiet: bool = True, checkpoint: Optional[str] = None,
                        log: Any = None) -> Dict[str, float]:
    """Trains with Adam and early stopping, then restores the kept model (and
    saves it to ``checkpoint``) before the test accuracy is measured.

    ``stop_on="gat"`` is the GAT authors' rule: the patience counter resets
    whenever validation accuracy or loss improves, and the model kept is the
    last one that improved both. ``"accuracy"`` keeps the best validation
    accuracy (ties to the lower loss); ``"loss"`` the lowest validation loss.

    Returns ``val_accuracy``, ``test_accuracy``, ``epochs`` and
    ``epoch_seconds`` (median time of a training step plus a validation pass).
    """
    if stop_on not in STOPPING_RULES:
        raise GraphseqError(f"stop_on must be one of {', '.join(STOPPING_RULES)}, got {stop_on!r}")
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    device = data.y.device
    best_acc, best_loss, waited = 0.0, math.inf, 0
    kept = {k: v.detach().clone() for k, v in model.state_dict().items()}
    kept_acc, epoch_seconds = 0.0, []
    # Early stopping decides how many epochs run, so the bar counts epochs
    # without a total (and no ETA) unless patience cannot end the run first.
    bar = tqdm(desc="train", unit="epoch", total=max_epochs if patience >= max_epochs else None,
               disable=quiet, leave=False)
    epoch = 0
    for epoch in range(1, max_epochs + 1):
        _synchronize(device)
        start = time.perf_counter()
        model.train()
        optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        optimizer.step()

        model.eval()
        with torch.no_grad():
            out = model(data.x, data.edge_index)
            val_loss = float(F.cross_entropy(out[data.val_mask], data.y[data.val_mask]))
            val_acc = float((out[data.val_mask].argmax(-1) == data.y[data.val_mask]).float().mean())
        _synchronize(device)
        epoch_seconds.append(time.perf_counter() - start)
        bar.update(1)

        if stop_on == "gat":
            improved = val_acc >= best_acc or val_loss <= best_loss
            keep = val_acc >= best_acc and val_loss <= best_loss
        elif stop_on == "accuracy":
            improved = keep = val_acc > best_acc or (val_acc == best_acc and val_loss < best_loss)
        else:
            improved = keep = val_loss < best_loss
        if keep:
            kept = {k: v.detach().clone() for k, v in model.state_dict().items()}
            kept_acc = val_acc
        if improved:
            if stop_on == "gat":
                best_acc, best_loss = max(val_acc, best_acc), min(val_loss, best_loss)
            else:
                best_acc, best_loss = val_acc, val_loss
            waited = 0
        else:
            waited += 1
            if waited >= patience:
                break
        bar.set_postfix(loss=f"{loss.item():.3f}", val_acc=f"{val_acc:.3f}", best=f"{best_acc:.3f}",
                        patience=f"{waited}/{patience}")
    bar.close()

    model.load_state_dict(kept)
    if checkpoint is not None:
        save_checkpoint(kept, checkpoint)
    figures = {
        "val_accuracy": kept_acc,
        "test_accuracy": accuracy(model, data, data.test_mask),
        "epochs": epoch,
        "epoch_seconds": statistics.median(epoch_seconds),
    }
    if log is not None:
        log.info(f"stopped after {epoch} epochs; kept model: val accuracy {kept_acc:.4f}")
    return figures


@stage("train_nodes", checks={"lr": positive, "weight_decay": non_negative, "max_epochs": at_least(1),
                              "patience": at_least(1), "stop_on": one_of(*STOPPING_RULES)})
def train_nodes(ctx, *, lr: float = 0.005, weight_decay: float = 5e-4, max_epochs: int = 100_000,
                patience: int = 100, stop_on: str = "gat") -> None:
    """Trains ``ctx.model`` on ``ctx.data``; writes ``best.pt`` into the run directory."""
    figures = fit_node_classifier(
        ctx.require("model", "train_nodes"), ctx.require("data", "train_nodes"),
        lr=lr, weight_decay=weight_decay, max_epochs=max_epochs, patience=patience,
        stop_on=stop_on, quiet=ctx.quiet, checkpoint=str(ctx.out / "best.pt"), log=ctx.log)
    figures.pop("test_accuracy")  # Measured by its own stage, so a pipeline can leave it out.
    ctx.metrics.update(figures)


@stage("evaluate_nodes", checks={"mask": one_of("train_mask", "val_mask", "test_mask")})
def evaluate_nodes(ctx, *, mask: str = "test_mask") -> None:
    """Accuracy of ``ctx.model`` on one of the data's masks, as ``<split>_accuracy``."""
    data = ctx.require("data", "evaluate_nodes")
    split = mask.removesuffix("_mask")
    ctx.metrics[f"{split}_accuracy"] = accuracy(ctx.require("model", "evaluate_nodes"), data, data[mask])
