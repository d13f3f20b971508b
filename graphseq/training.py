"""The step trainer: one training loop, counted in optimizer steps, for every
stage that trains for a number of steps (the character LMs, gat-ppi,
neighbour-sampled node classification, few-shot episodes, BERT, captioning).

It owns what every such loop needs and what is easy to get subtly wrong:
zero_grad/backward/clip/step (with a gradient scaler and autocast when
``amp`` on CUDA), a scheduler step per step, a progress bar, periodic
evaluation into a history, keeping the best weights by a validation metric,
an atomic checkpoint that a run resumes from exactly (two steps plus two
resumed steps equal four straight steps), ``curves.png``, and data-parallel
training: when several processes run (see :mod:`graphseq.distributed`), the
loss is computed inside :class:`~torch.nn.parallel.DistributedDataParallel`,
so gradients are averaged over ranks, metrics are averaged over ranks, and
rank 0 alone writes.

.. code-block:: python

    from graphseq.training import train_steps

    def loss_fn(model, step):
        # Draw the step's batch from a generator seeded by the step (and
        # rank), so that a resumed run draws the same batches.
        x, y = batches(step)
        loss = F.cross_entropy(model(x), y)
        return loss, {"accuracy": accuracy(...)}   # or just the loss

    result = train_steps(model, optimizer, loss_fn, steps=1000, out="runs/mine",
                         evaluate=lambda model: {"val_accuracy": ...},
                         eval_every=100, select=("val_accuracy", "max"),
                         checkpoint_every=100)
    result.history   # one record per evaluation: step, train_*, val_*, minutes
    result.best      # the record of the kept model (restored into model)

``loss_fn(model, step)`` always receives the plain ``model`` (never the DDP
wrapper) and may call any of its methods: the trainer runs ``loss_fn`` as the
forward pass of the wrapped module, which is what makes DDP average the
gradients. ``evaluate(model)`` runs on every rank; its metrics are averaged
over ranks, so it should score either the whole validation set or an equal
share of it on each rank.
"""
from __future__ import annotations

import contextlib
import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor, nn
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from . import distributed
from .checks import is_integer, is_number
from .errors import GraphseqError, draw_bars
from .io import check_file_place, first_sentence, load_checkpoint, save_checkpoint, write_png

CHECKPOINT = "checkpoint.pt"
# A run's first steps, timed, give the estimate of the rest it logs; a run
# estimated to take longer than LONG_MINUTES is called a long schedule.
PACED_STEPS = 10
LONG_MINUTES = 35

LossOutput = Union[Tensor, Tuple[Tensor, Dict[str, Any]]]
LossFn = Callable[[nn.Module, int], LossOutput]
Evaluate = Callable[[nn.Module], Dict[str, float]]


@dataclass
class TrainResult:
    """What :func:`train_steps` hands back.

    ``history``: one record per evaluation (``step``, ``train_loss`` and the
    other training metrics averaged since the previous record, what
    ``evaluate`` returned, ``minutes`` of training so far). ``best``: the
    record of the kept model (the last record without ``select``).
    ``step``: steps taken in the whole run. ``extra_state``: the stage's own
    state, as it stood at the end (as restored from the checkpoint on resume).
    ``seconds``: wall-clock time of the whole run, evaluations included;
    ``cpu_seconds``: this process's CPU time (all its threads) in the
    training steps alone, the budget a CPU comparison counts.
    """

    history: List[Dict[str, float]]
    best: Dict[str, float]
    step: int
    extra_state: Dict[str, Any]
    seconds: float = 0.0
    cpu_seconds: float = 0.0


class _LossModule(nn.Module):
    """Runs ``loss_fn(model, step)`` as a forward pass, so that DDP sees (and
    synchronises) every parameter the loss touches, whichever method of the
    model computes it."""

    def __init__(self, model: nn.Module, loss_fn: LossFn):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, step: int) -> LossOutput:
        return self.loss_fn(self.model, step)


@dataclass
class _Progress:
    step: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process's CPU time in training steps (evaluation left out)
    history: List[Dict[str, float]] = field(default_factory=list)
    best: Optional[Dict[str, float]] = None
    best_weights: Optional[Dict[str, Tensor]] = None
    running: Dict[str, float] = field(default_factory=dict)  # training metrics summed since the last record
    count: int = 0


def train_steps(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: LossFn, *,
                steps: int, out: Union[str, Path], device: Union[str, torch.device] = "cpu", resume: bool = False,
                quiet: bool = False, log: Optional[logging.Logger] = None, pipeline: str = "",
                scheduler: Any = None, clip: float = 0.0, amp: bool = False,
                evaluate: Optional[Evaluate] = None, eval_every: int = 0,
                select: Optional[Tuple[str, str]] = None, checkpoint_every: int = 0,
                extra_state: Optional[Dict[str, Any]] = None, meta: Optional[Dict[str, Any]] = None,
                minutes: float = 0.0, log_every: int = 10, desc: str = "train", checkpoint: str = CHECKPOINT,
                curves: Optional[str] = "curves.png",
                find_unused_parameters: bool = False) -> TrainResult:
    """Trains ``model`` for ``steps`` optimizer steps (counted over the whole
    run, resumed parts included).

    Args:
        model: the module being trained, already on ``device``.
        optimizer: its optimizer.
        loss_fn: ``loss_fn(model, step) -> loss`` or ``(loss, {name: value})``;
            the extra metrics are averaged into the history as ``train_<name>``.
        steps: the step budget (0: none, then ``minutes`` must be set).
        out: the run's folder, which holds the checkpoint and the curves.
        device: the device the model is on.
        resume: continue from the checkpoint in ``out`` (its steps count).
        quiet: draw no progress bar.
        log: where progress lines go (default: the ``graphseq`` logger).
        pipeline: the pipeline's name, for the title of the curves.
        scheduler: stepped once after every optimizer step; saved and restored.
        clip: the largest gradient norm (0: no clipping).
        amp: mixed precision (autocast and a gradient scaler) on CUDA; ignored on CPU.
        evaluate: ``evaluate(model) -> {"val_...": value}``, called every
            ``eval_every`` steps and after the last step, with the model in
            ``eval()`` mode (and set back to ``train()`` after).
        eval_every: steps between evaluations (0: only at the end).
        select: ``(metric, "max" | "min")``: keep the weights whose evaluation
            had the best ``metric`` and load them into ``model`` at the end.
        checkpoint_every: steps between checkpoints (0: only at the end).
        extra_state: a dict of the stage's own state that must survive a
            resume (a recurrent state carried across batches, say): the
            checkpoint saves its contents, each rank's own, and a resumed
            run puts them back into the same dict before the first step.
        meta: entries stored as they are in the checkpoint (a model's
            configuration, a vocabulary) so that other tools can rebuild the
            model; a resume is refused when they differ from the checkpoint's.
        minutes: an optional cap on training time over the whole run (0: none).
        log_every: steps between reads of the training metrics, which are
            summed on the device in between: a read waits for the device to
            finish its queue, so reading every step would stall a GPU. The
            progress bar shows the mean loss since the last read.
        desc: the progress bar's label.
        checkpoint: the checkpoint's file name in ``out``.
        curves: the plot of the history written into ``out`` at the end
            (``None``: no plot).
        find_unused_parameters: passed to DDP, for models whose loss skips
            some parameters in some steps.

    The checkpoint holds ``model``, ``optimizer``, ``scheduler``, ``scaler``,
    ``step``, ``seconds``, ``cpu_seconds``, ``history``, ``best``, ``best_model`` (weights of
    the best record with ``select``), ``world_size``, ``ranks`` (each rank's
    random-generator states, ``extra_state`` and running sums) and the
    entries of ``meta``. It is written atomically, by rank 0 alone.
    """
    for name, value in (("steps", steps), ("eval_every", eval_every), ("checkpoint_every", checkpoint_every)):
        if not is_integer(value) or value < 0:
            raise GraphseqError(f"{desc}: {name} must be a whole number >= 0, got {value!r}")
    if not is_integer(log_every) or log_every < 1:
        raise GraphseqError(f"{desc}: log_every must be a whole number >= 1, got {log_every!r}")
    for name, value in (("minutes", minutes), ("clip", clip)):
        if not is_number(value) or value < 0:  # nan would pass every budget and clipping test
            raise GraphseqError(f"{desc}: {name} must be a finite number >= 0, got {value!r}")
    if steps == 0 and minutes == 0:
        raise GraphseqError(f"{desc}: needs a budget, steps > 0 or minutes > 0 "
                            f"(got steps={steps}, minutes={minutes})")
    if select is not None and (len(select) != 2 or select[1] not in ("max", "min")):
        raise GraphseqError(f"{desc}: select must be (metric, 'max' or 'min'), got {select!r}")
    if select is not None and evaluate is None:
        raise GraphseqError(f"{desc}: select={select!r} needs an evaluate function")
    device = torch.device(device)
    log = log if log is not None else logging.getLogger("graphseq")
    extra_state = {} if extra_state is None else extra_state
    meta = dict(meta or {})
    path = Path(out) / checkpoint
    # A folder where the checkpoint goes would stop its first save, after
    # training: refused before the first step instead.
    check_file_place(path, "--resume: " if resume else "")
    use_amp = amp and device.type == "cuda"
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    progress = _Progress()
    if resume:
        _restore(path, device, log, model, optimizer, scheduler, scaler, progress, extra_state, meta)
    runner = distributed.wrap(_LossModule(model, loss_fn), device,
                              find_unused_parameters=find_unused_parameters)
    main = distributed.is_main()

    # The training metrics of the steps since the last read, summed where they
    # were computed (on the GPU, say), and how many steps that is.
    unread: Dict[str, Any] = {}
    unread_steps = 0

    def read() -> None:
        nonlocal unread_steps
        for key, value in unread.items():
            progress.running[key] = progress.running.get(key, 0.0) + float(value)
        if unread_steps:
            bar.set_postfix(loss=f"{float(unread['train_loss']) / unread_steps:.3f}")
        unread.clear()
        unread_steps = 0

    def save() -> None:
        read()
        _save(path, model, optimizer, scheduler, scaler, progress, extra_state, meta)

    def record() -> Dict[str, float]:
        read()
        figures = {k: v / progress.count for k, v in progress.running.items()} if progress.count else {}
        figures = distributed.mean_over_ranks(figures)
        if evaluate is not None:
            model.eval()
            with torch.no_grad():
                evaluated = {k: float(v) for k, v in evaluate(model).items()}
            model.train()
            figures.update(distributed.mean_over_ranks(evaluated))
        entry = {"step": progress.step, **figures, "minutes": progress.seconds / 60}
        progress.history.append(entry)
        progress.running, progress.count = {}, 0
        if select is not None:
            _keep_best(entry, select, model, progress, desc)
        if main:
            log.info(f"{desc} step {progress.step}: " + ", ".join(
                f"{k} {v:.4f}" for k, v in entry.items() if k not in ("step", "minutes"))
                + f" ({entry['minutes']:.1f} min)")
        return entry

    def out_of_budget() -> bool:
        if steps > 0 and progress.step >= steps:
            return True
        if minutes > 0:
            # Every rank must stop at the same step, so they agree on the time.
            return distributed.max_over_ranks(progress.seconds) >= 60 * minutes
        return False

    if main and progress.step:
        log.info(f"{desc}: resuming at step {progress.step}")
    bar = tqdm(total=steps if steps > 0 else None, initial=progress.step, desc=desc, unit="step",
               disable=not draw_bars(quiet or not main), dynamic_ncols=True)
    started = time.perf_counter() - progress.seconds
    paced = (progress.step + PACED_STEPS, progress.seconds)  # the step the estimate is made at, the time it starts
    model.train()
    # Log lines above the bar, not through it; with no bar (quiet, not rank 0,
    # or no person watching) there is nothing to keep them off, and a quiet
    # run's stderr is the log itself, which tqdm's handler would write back into.
    with logging_redirect_tqdm(loggers=[log]) if not bar.disable else contextlib.nullcontext():
        while not out_of_budget():
            cpu_started = time.process_time()
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device.type, enabled=use_amp):
                loss, figures = _split(runner(progress.step), desc)
            scaler.scale(loss).backward()
            if clip > 0:
                scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            scaler.step(optimizer)
            scaler.update()
            if scheduler is not None:
                scheduler.step()
            progress.step += 1
            for name, value in {"train_loss": loss, **figures}.items():
                key = name if name.startswith("train_") else f"train_{name}"
                value = value.detach().double() if isinstance(value, Tensor) else float(value)
                unread[key] = unread[key] + value if key in unread else value
            unread_steps += 1
            progress.count += 1
            progress.cpu_seconds += time.process_time() - cpu_started
            progress.seconds = time.perf_counter() - started
            bar.update(1)
            if progress.step % log_every == 0:
                read()
            if progress.step == paced[0] and steps > progress.step and main:
                pace = (progress.seconds - paced[1]) / PACED_STEPS
                left = (steps - progress.step) * pace / 60
                log.info(f"{desc}: {pace:.2f} s a step here; the {steps - progress.step:,} steps left take about "
                         f"{describe_minutes(left)}" + (": a long schedule (fewer steps: --set SECTION.steps=N)"
                                                if left > LONG_MINUTES else ""))
            if eval_every > 0 and progress.step % eval_every == 0:
                record()
                progress.seconds = time.perf_counter() - started
            if checkpoint_every > 0 and progress.step % checkpoint_every == 0:
                save()
    bar.close()
    # The end is evaluated once, also when a resumed run had no step left
    # (a checkpoint taken between evaluations, the budget lowered to it).
    if progress.step > 0 and (not progress.history or progress.history[-1]["step"] != progress.step):
        record()
    save()
    if main and curves and progress.history:
        name = pipeline or desc
        kept = None if progress.best is None else \
            (f"kept ({select[0]})", progress.best["step"], progress.best[select[0]])
        # A label that already starts with the pipeline's name (fewshot's) is not given it twice.
        named = desc == name or desc.startswith(f"{name} ")
        plot_history(progress.history, Path(out) / curves,
                     f"{desc if named else f'{name} {desc}'}: {progress.step} steps", final=kept)
    if select is not None and progress.best_weights is not None:
        model.load_state_dict(progress.best_weights)
    best = progress.best if select is not None else (progress.history[-1] if progress.history else {})
    return TrainResult(history=progress.history, best=dict(best or {}), step=progress.step,
                       extra_state=extra_state, seconds=progress.seconds,
                       cpu_seconds=progress.cpu_seconds)


def describe_minutes(minutes: float) -> str:
    """A duration as a person reads it: "40 seconds", "12 minutes", "3.5 hours"."""
    if minutes < 1:
        return f"{max(1, round(minutes * 60))} seconds"
    if minutes < 90:
        return f"{round(minutes)} minute{'s' * (round(minutes) != 1)}"
    return f"{minutes / 60:.1f} hours"


def _split(output: LossOutput, desc: str) -> Tuple[Tensor, Dict[str, Any]]:
    if isinstance(output, Tensor):
        return output, {}
    if isinstance(output, (tuple, list)) and len(output) == 2 and isinstance(output[0], Tensor):
        return output[0], dict(output[1])
    raise GraphseqError(f"{desc}: loss_fn must return a loss tensor or (loss, metrics), "
                        f"got {type(output).__name__}")


def _keep_best(entry: Dict[str, float], select: Tuple[str, str], model: nn.Module,
               progress: _Progress, desc: str) -> None:
    key, mode = select
    if key not in entry:
        raise GraphseqError(f"{desc}: select names {key!r}, but the evaluation gave "
                            f"{', '.join(k for k in entry if k != 'step')}")
    value = entry[key]
    if math.isnan(value):
        return
    best = progress.best
    if best is None or (value > best[key] if mode == "max" else value < best[key]):
        progress.best = dict(entry)
        progress.best_weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


# --------------------------------------------------------------------------- #
# Checkpoints
# --------------------------------------------------------------------------- #

def rng_state() -> Dict[str, Any]:
    """This process's random-generator states (torch, CUDA, NumPy, Python),
    in types that ``torch.load(weights_only=True)`` reads back."""
    np_state = np.random.get_state()
    state = {"torch": torch.get_rng_state(),
             "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)),
                       int(np_state[2]), int(np_state[3]), float(np_state[4])],
             "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"].cpu())
    if "numpy" in state:
        name, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        # One state per GPU the saving process saw; this one may see fewer.
        for index, saved in enumerate(state["cuda"][:torch.cuda.device_count()]):
            torch.cuda.set_rng_state(saved.cpu(), index)


def _save(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
          scaler: torch.amp.GradScaler, progress: _Progress, extra_state: Dict[str, Any],
          meta: Dict[str, Any]) -> None:
    # Every rank takes part in the gather; rank 0 alone writes.
    ranks = distributed.gather_objects({"rng": rng_state(), "extra_state": _to_cpu(extra_state),
                                        "running": dict(progress.running), "count": progress.count})
    if not distributed.is_main():
        return
    payload = {
        **meta,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict(),
        "step": progress.step,
        "seconds": progress.seconds,
        "cpu_seconds": progress.cpu_seconds,
        "history": progress.history,
        "best": progress.best,
        "best_model": progress.best_weights,
        "world_size": distributed.world_size(),
        "ranks": ranks,
    }
    save_checkpoint(payload, path)


RESUMED = ("model", "optimizer", "scheduler", "scaler", "step", "seconds", "history", "best", "best_model",
           "world_size", "ranks")  # what _restore reads from a checkpoint that _save wrote


def _restore(path: Path, device: torch.device, log: logging.Logger, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
             scaler: torch.amp.GradScaler, progress: _Progress, extra_state: Dict[str, Any],
             meta: Dict[str, Any]) -> None:
    if not path.is_file():
        raise GraphseqError(f"--resume: no {path.name} in {path.parent}; the run stopped before its "
                            f"first checkpoint, so start it again without --resume")
    try:
        # Onto the CPU: load_state_dict moves the weights and the optimizer's
        # state to the model's device, and the RNG states must stay there.
        checkpoint = load_checkpoint(path, map_location="cpu")
    except GraphseqError as error:  # A truncated or foreign file, named by load_checkpoint.
        raise GraphseqError(f"--resume: {error}") from None
    missing = [key for key in RESUMED if not isinstance(checkpoint, dict) or key not in checkpoint]
    if missing:
        raise GraphseqError(f"--resume: {path} is not a checkpoint of this training loop (it lacks "
                            f"{', '.join(missing)})")
    for key, value in meta.items():
        if checkpoint.get(key) != value:
            raise GraphseqError(f"--resume: {path} was written with {_difference(key, checkpoint.get(key), value)}; "
                                f"the run's config.toml holds the settings it was started with")
    size = distributed.world_size()
    if checkpoint["world_size"] != size:
        raise GraphseqError(f"--resume: {path} was written by {checkpoint['world_size']} process(es); "
                            f"resume it with the same number (this run has {size})")
    try:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        if scheduler is not None and checkpoint["scheduler"] is not None:
            scheduler.load_state_dict(checkpoint["scheduler"])
            if isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
                # The optimizer's state put back the rate the old schedule set; a
                # resume that moved the schedule (a new budget) steps at the new one's.
                for group, base, rate in zip(optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas):
                    group["lr"] = base * rate(scheduler.last_epoch)
                scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]
        if checkpoint["scaler"]:  # empty when saved without mixed precision (on a CPU): a fresh scale then
            scaler.load_state_dict(checkpoint["scaler"])
    except (RuntimeError, ValueError, KeyError, TypeError) as error:  # another model's or optimizer's state
        raise GraphseqError(f"--resume: {path} does not fit this model ({first_sentence(error)})") from None
    progress.step, progress.seconds = checkpoint["step"], checkpoint["seconds"]
    progress.cpu_seconds = checkpoint.get("cpu_seconds", 0.0)  # absent before it was counted
    progress.history, progress.best = checkpoint["history"], checkpoint["best"]
    progress.best_weights = checkpoint["best_model"]
    mine = checkpoint["ranks"][distributed.rank()]
    progress.running, progress.count = mine["running"], mine["count"]
    extra_state.clear()
    extra_state.update(_to_device(mine["extra_state"], device))
    set_rng_state(mine["rng"])
    if distributed.is_main():
        log.info(f"resumed from {path} at step {progress.step}")


def _difference(key: str, was: Any, now: Any) -> str:
    """``key = was, but this run has now``; of dicts (a model's settings),
    only the entries that differ, so a long one does not hide them."""
    if isinstance(was, dict) and isinstance(now, dict):
        keys = [k for k in {**was, **now} if was.get(k, _ABSENT) != now.get(k, _ABSENT)]
        return ", ".join(f"{key}[{k!r}] = {_short(was.get(k, _ABSENT))}, but this run has "
                         f"{_short(now.get(k, _ABSENT))}" for k in keys)
    return f"{key} = {_short(was)}, but this run has {key} = {_short(now)}"


class _Absent:
    def __repr__(self) -> str:
        return "(none)"


_ABSENT = _Absent()


def _short(value: Any, width: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def _to_cpu(obj: Any) -> Any:
    return _map_tensors(obj, lambda t: t.detach().cpu())


def _to_device(obj: Any, device: torch.device) -> Any:
    return _map_tensors(obj, lambda t: t.to(device))


def _map_tensors(obj: Any, fn: Callable[[Tensor], Tensor]) -> Any:
    if isinstance(obj, Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_tensors(v, fn) for v in obj)
    return obj


# --------------------------------------------------------------------------- #
# Curves
# --------------------------------------------------------------------------- #

def plot_history(history: List[Dict[str, float]], path: Union[str, Path], title: str,
                 final: Optional[Tuple[str, int, float]] = None) -> None:
    """Draws the history's losses (and, in a second panel, its other metrics)
    against the step into a PNG, written atomically. ``final`` adds one
    marked point ``(label, step, value)``: to the panel of the metric its
    label names, else to the loss panel. The step axis spans the whole
    history, and a panel whose metrics stop being finite (a loss that
    diverged to inf or NaN, which no line can show) is marked with a
    vertical line at the first such step, "loss not finite from step N"."""
    # The object-oriented API with the Agg canvas: no pyplot, no global backend.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    keys = [k for k in history[0] if k not in ("step", "minutes")] if history else []
    for entry in history[1:]:
        keys += [k for k in entry if k not in keys and k not in ("step", "minutes")]
    losses = [k for k in keys if "loss" in k or "nats" in k or "perplexity" in k]
    others = [k for k in keys if k not in losses]
    panels = [p for p in (losses, others) if p]
    if not panels:
        return
    figure = Figure(figsize=(7 * len(panels), 4.5), dpi=100)
    FigureCanvasAgg(figure)
    first, last = min(e["step"] for e in history), max(e["step"] for e in history)
    pad = max(0.5, 0.03 * (last - first))
    for i, names in enumerate(panels):
        axes = figure.add_subplot(1, len(panels), i + 1)
        for name in names:
            points = [(e["step"], e[name]) for e in history if name in e]
            axes.plot(*zip(*points), "o-" if len(points) < 30 else "-", markersize=3, label=name)
        if final is not None and (final[0] in names or any(n in final[0] for n in names)
                                  or (names is losses and not any(n in final[0] for n in others))):
            axes.plot(final[1], final[2], "*", markersize=12, label=final[0])
        broken = [e["step"] for e in history for name in names
                  if name in e and not math.isfinite(float(e[name]))]
        if broken:
            what = "loss" if names is losses else ", ".join(
                n for n in names if any(n in e and not math.isfinite(float(e[n])) for e in history))
            at = min(broken)
            left = at <= (first + last) / 2  # the text on the side with room
            axes.axvline(at, color="red", linestyle=":", linewidth=1.5)
            axes.text(at, 0.97, f" {what} not finite from step {at} ", color="red",
                      transform=axes.get_xaxis_transform(), va="top", ha="left" if left else "right", fontsize=9)
        axes.set_xlim(first - pad, last + pad)
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_xlabel("step")
        axes.grid(alpha=0.3)
        axes.legend()
    figure.suptitle(title)
    write_png(figure, path)
