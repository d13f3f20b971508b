"""Stages that train and evaluate a node classifier on one graph with
train/validation/test masks (the Planetoid setting)."""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Data
from tqdm import tqdm

from .. import distributed
from ..checks import Domain, at_least, each, is_integer, non_negative, one_of, positive
from ..data.neighbors import layerwise_inference, make_sampler, neighbor_loader
from ..errors import GraphseqError, draw_bars, plural
from ..io import save_checkpoint
from .registry import stage


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


LOADERS = ("full", "neighbor")
INFERENCE = ("full", "layerwise", "sampled")
# A hop's fanout: a count of in-neighbours, or -1 for all of them.
FANOUT = Domain("a whole number >= -1", lambda v: is_integer(v) and v >= -1)


@dataclass
class Sampling:
    """How a node classifier sees the graph: whole (``loader="full"``) or in
    mini-batches of seed nodes with sampled neighbourhoods (``"neighbor"``:
    ``num_neighbors[k]`` in-neighbours per node at hop ``k``). Evaluation
    runs on the whole graph (``inference="full"``), layer by layer over
    batches of ``inference_batch_size`` nodes with all their neighbours
    (``"layerwise"``: the same numbers, in bounded memory; the model needs
    ``inference_layers()``), or on sampled neighbourhoods (``"sampled"``)."""

    loader: str = "full"
    num_neighbors: Sequence[int] = (10, 10)
    batch_size: int = 512
    num_workers: int = 0
    inference: str = "full"
    inference_batch_size: int = 4096

    def __post_init__(self):
        if self.loader not in LOADERS:
            raise GraphseqError(f"loader must be one of {', '.join(LOADERS)}, got {self.loader!r}")
        if self.inference not in INFERENCE:
            raise GraphseqError(f"inference must be one of {', '.join(INFERENCE)}, got {self.inference!r}")


@torch.no_grad()
def predict(model: nn.Module, data: Data, mask: torch.Tensor, sampling: Optional[Sampling] = None) -> torch.Tensor:
    """The model's logits for the nodes of ``mask``, by ``sampling.inference``."""
    model.eval()
    inference = sampling.inference if sampling is not None else "full"
    if inference == "full":
        return model(data.x, data.edge_index)[mask]
    if inference == "layerwise":
        if not hasattr(model, "inference_layers"):
            raise GraphseqError(f"inference = \"layerwise\" needs a model with inference_layers(); "
                                f"{type(model).__name__} has none: use \"sampled\" or \"full\"")
        x = data.x.to_dense() if data.x.layout != torch.strided else data.x
        return layerwise_inference(model.inference_layers(), x, data.edge_index, data.num_nodes,
                                   batch_size=sampling.inference_batch_size)[mask]
    nodes = mask.nonzero().view(-1) if mask.dtype == torch.bool else mask
    parts = []
    cuda = data.y.device.type == "cuda"
    for batch in neighbor_loader(_dense(data), sampling.num_neighbors, input_nodes=nodes.cpu(),
                                 batch_size=sampling.inference_batch_size, pin_memory=cuda):
        batch = batch.to(data.y.device, non_blocking=cuda)
        parts.append(model(batch.x, batch.edge_index)[:batch.batch_size])
    return torch.cat(parts)


def _dense(data: Data) -> Data:
    """A CPU copy of ``data`` with dense features, which PyG's loader slices."""
    x = data.x.to_dense() if data.x.layout != torch.strided else data.x
    return Data(x=x.cpu(), edge_index=data.edge_index.cpu(), y=data.y.cpu(), num_nodes=data.num_nodes)


@torch.no_grad()
def accuracy(model: nn.Module, data: Data, mask: torch.Tensor, sampling: Optional[Sampling] = None) -> float:
    pred = predict(model, data, mask, sampling).argmax(dim=-1)
    return float((pred == data.y[mask]).float().mean())


STOPPING_RULES = ("gat", "accuracy", "loss")


def _sampled_epoch(model: nn.Module, trained: nn.Module, data: Data, graph: Data, sampler: Any,
                   sampling: Sampling, optimizer: torch.optim.Optimizer, seed: int, epoch: int) -> torch.Tensor:
    """One pass over the training nodes in mini-batches with sampled
    neighbourhoods; with several processes each takes its share of the
    seeds (the same shuffle everywhere, disjoint parts), and a step of N
    processes is the step of one process with N times the batch size.
    Returns the mean loss."""
    train = data.train_mask.nonzero().view(-1).cpu()
    order = train[torch.randperm(train.numel(), generator=torch.Generator().manual_seed(seed * 100_003 + epoch))]
    size, rank = distributed.world_size(), distributed.rank()
    seeds = distributed.shard(order)
    losses = []
    # On CUDA the batches are sampled into pinned memory and copied while the GPU works.
    cuda = data.y.device.type == "cuda"
    for step, batch in enumerate(neighbor_loader(graph, sampling.num_neighbors, input_nodes=seeds,
                                                 batch_size=sampling.batch_size, num_workers=sampling.num_workers,
                                                 sampler=sampler, pin_memory=cuda)):
        batch = batch.to(data.y.device, non_blocking=cuda)
        # The shard repeats first seeds so that every rank takes as many steps;
        # a repeat weighs nothing, and each seed 1 / (the step's seeds on all ranks),
        # so DDP's mean over the ranks is the mean loss of the step's seeds.
        first = step * sampling.batch_size
        position = rank + size * torch.arange(first, first + batch.batch_size, device=data.y.device)
        weight = (position < order.numel()).float()
        step_seeds = min((first + sampling.batch_size) * size, order.numel()) - first * size
        optimizer.zero_grad()
        out = trained(batch.x, batch.edge_index)[:batch.batch_size]
        loss = F.cross_entropy(out, batch.y[:batch.batch_size], reduction="none") @ weight * size / step_seeds
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses).mean()


def fit_node_classifier(model: nn.Module, data: Data, *, lr: float, weight_decay: float,
                        max_epochs: int = 100_000, patience: int = 100, stop_on: str = "gat",
                        quiet: bool = True, checkpoint: Optional[str] = None,
                        log: Any = None, sampling: Optional[Sampling] = None,
                        seed: int = 0) -> Dict[str, float]:
    """Trains with Adam and early stopping, then restores the kept model (and
    saves it to ``checkpoint``) before the test accuracy is measured.

    ``stop_on="gat"`` is the GAT authors' rule: the patience counter resets
    whenever validation accuracy or loss improves, and the model kept is the
    last one that improved both. ``"accuracy"`` keeps the best validation
    accuracy (ties to the lower loss); ``"loss"`` the lowest validation loss.

    ``sampling`` (default: full batch) chooses mini-batches of sampled
    neighbourhoods and how validation runs; with several processes the
    model is wrapped in DDP and each process trains on its share of the seeds.

    Returns ``val_accuracy``, ``test_accuracy``, ``epochs`` and
    ``epoch_seconds`` (median time of a training epoch plus a validation pass).
    """
    if stop_on not in STOPPING_RULES:
        raise GraphseqError(f"stop_on must be one of {', '.join(STOPPING_RULES)}, got {stop_on!r}")
    sampling = sampling or Sampling()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    device = data.y.device
    trained = distributed.wrap(model, device)  # DDP when several processes run.
    if sampling.loader == "neighbor":
        graph = _dense(data)
        sampler = make_sampler(graph, sampling.num_neighbors)
    best_acc, best_loss, waited = 0.0, math.inf, 0
    kept = {k: v.detach().clone() for k, v in model.state_dict().items()}
    kept_acc, epoch_seconds = 0.0, []
    # Early stopping decides how many epochs run, so the bar counts epochs
    # without a total (and no ETA) unless patience cannot end the run first.
    bar = tqdm(desc="train", unit="epoch", total=max_epochs if patience >= max_epochs else None,
               disable=not draw_bars(quiet), leave=False)
    epoch = 0
    for epoch in range(1, max_epochs + 1):
        _synchronize(device)
        start = time.perf_counter()
        model.train()
        if sampling.loader == "neighbor":
            loss = _sampled_epoch(model, trained, data, graph, sampler, sampling, optimizer, seed, epoch)
        else:
            optimizer.zero_grad()
            out = trained(data.x, data.edge_index)
            loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
            loss.backward()
            optimizer.step()

        out = predict(model, data, data.val_mask, sampling)
        figures = distributed.mean_over_ranks({  # Every process then takes the same decisions.
            "loss": float(F.cross_entropy(out, data.y[data.val_mask])),
            "acc": float((out.argmax(-1) == data.y[data.val_mask]).float().mean())})
        val_loss, val_acc = figures["loss"], figures["acc"]
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
    if checkpoint is not None and distributed.is_main():
        save_checkpoint(kept, checkpoint)
    figures = {
        "val_accuracy": kept_acc,
        "test_accuracy": accuracy(model, data, data.test_mask, sampling),
        "epochs": epoch,
        "epoch_seconds": statistics.median(epoch_seconds),
    }
    if log is not None:
        log.info(f"stopped after {plural(epoch, 'epoch')}; kept model: val accuracy {kept_acc:.4f}")
    return figures


@stage("train_nodes", checks={"lr": positive, "weight_decay": non_negative, "max_epochs": at_least(1),
                              "patience": at_least(1), "stop_on": one_of(*STOPPING_RULES),
                              "loader": one_of(*LOADERS), "batch_size": at_least(1),
                              "num_workers": non_negative, "inference": one_of(*INFERENCE),
                              "inference_batch_size": at_least(1), "num_neighbors": each(FANOUT)},
       data_parallel={"loader": ("neighbor",)}, applies={
           **{key: {"loader": ("neighbor",)} for key in ("num_neighbors", "batch_size", "num_workers", "inference")},
           "inference_batch_size": {"loader": ("neighbor",), "inference": ("layerwise", "sampled")}},
       needs={"data": "a graph dataset", "model": "a graph network"})
def train_nodes(ctx, *, lr: float = 0.005, weight_decay: float = 5e-4, max_epochs: int = 100_000,
                patience: int = 100, stop_on: str = "gat", loader: str = "full",
                num_neighbors: List[int] = [10, 10], batch_size: int = 512, num_workers: int = 0,
                inference: str = "layerwise", inference_batch_size: int = 4096) -> None:
    """Trains ``ctx.model`` on ``ctx.data``; writes ``best.pt`` into the run directory.

    ``loader = "full"`` trains on the whole graph every epoch;
    ``"neighbor"`` on mini-batches of ``batch_size`` training nodes with
    ``num_neighbors`` sampled in-neighbours per hop (PyG's NeighborLoader,
    ``num_workers`` processes), and then evaluates by ``inference``
    (``"layerwise"``, ``"sampled"`` or ``"full"``; see :class:`Sampling`).
    With several processes each trains on its share of the seed nodes;
    the full-batch loader has no shares, so it runs in one process only."""
    sampling = Sampling(loader, tuple(num_neighbors), batch_size, num_workers,
                        inference if loader == "neighbor" else "full", inference_batch_size)
    ctx.sampling = sampling  # evaluate_nodes infers the same way.
    figures = fit_node_classifier(
        ctx.require("model", "train_nodes"), ctx.require("data", "train_nodes"),
        lr=lr, weight_decay=weight_decay, max_epochs=max_epochs, patience=patience,
        stop_on=stop_on, quiet=ctx.quiet or not distributed.is_main(),
        checkpoint=str(ctx.out / "best.pt"), log=ctx.log, sampling=sampling, seed=ctx.seed)
    figures.pop("test_accuracy")  # Measured by its own stage, so a pipeline can leave it out.
    ctx.metrics.update(figures)


@stage("evaluate_nodes", checks={"mask": one_of("train_mask", "val_mask", "test_mask")},
       needs={"data": "a graph dataset", "model": "a graph network"})
def evaluate_nodes(ctx, *, mask: str = "test_mask") -> None:
    """Accuracy of ``ctx.model`` on one of the data's masks, as ``<split>_accuracy``."""
    data = ctx.require("data", "evaluate_nodes")
    split = mask.removesuffix("_mask")
    ctx.metrics[f"{split}_accuracy"] = accuracy(ctx.require("model", "evaluate_nodes"), data, data[mask],
                                                getattr(ctx, "sampling", None))
