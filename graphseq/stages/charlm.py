"""Stages of the character language-model pipelines (``charlm-*``): read a
text into a character stream, build a :class:`~graphseq.models.charlm.CharLM`,
train it by truncated backpropagation through time with checkpoints that a
run can resume from, and write a sample of what it learned.
"""
from __future__ import annotations

import io
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from ..data.text import TextStreams, Vocabulary, load_tiny_shakespeare, split_stream
from ..errors import GraphseqError
from ..io import atomic_write_bytes, atomic_write_text, load_checkpoint, save_checkpoint, write_json
from ..models.charlm import (CHECKPOINT, CharLM, State, checkpoint_payload, detach_state,
                             nats_to_bits, sample)
from .registry import stage


@dataclass
class CharCorpus:
    vocab: Vocabulary
    train: Tensor  # character ids
    val: Tensor


@stage("char_corpus")
def char_corpus(ctx, *, text_file: str = "", val_fraction: float = 0.1) -> None:
    """Tiny-shakespeare (or ``text_file``), its characters as the vocabulary,
    the first ``1 - val_fraction`` for training and the rest for validation."""
    if text_file:
        path = Path(text_file)
        if not path.is_file():
            raise GraphseqError(f"text_file not found: {path}")
        text = path.read_text(encoding="utf-8")
    else:
        text = load_tiny_shakespeare(ctx.data_root, ctx.data_mirror)
    vocab = Vocabulary.of_characters(text)
    train, val = split_stream(vocab.encode(text), val_fraction)
    ctx.data = CharCorpus(vocab, train, val)
    ctx.log.info(f"text: {len(text):,} characters, {len(vocab)} distinct; "
                 f"{train.numel():,} for training, {val.numel():,} for validation")


@stage("char_lm")
def char_lm(ctx, *, cell: str = "lstm", embedding_dim: int = 64, hidden_size: int = 256,
            num_layers: int = 1, dropout: float = 0.0, chunk_size: int = 8) -> None:
    """A character language model: embedding, chain recurrent layers, read-out."""
    data = ctx.require("data", "char_lm")
    ctx.model = CharLM(len(data.vocab), cell=cell, embedding_dim=embedding_dim,
                       hidden_size=hidden_size, num_layers=num_layers, dropout=dropout,
                       chunk_size=chunk_size).to(ctx.device)
    size = sum(p.numel() for p in ctx.model.parameters())
    ctx.log.info(f"model: {cell} x{num_layers}, hidden {hidden_size}, embedding {embedding_dim}, "
                 f"{size:,} parameters")


@torch.no_grad()
def evaluate(model: CharLM, ids: Tensor, batch_size: int, window: int, device: torch.device,
             max_chars: int = 0) -> float:
    """Mean cross-entropy in nats per character over ``ids`` read as
    ``batch_size`` streams with the state carried from window to window.
    With ``max_chars`` only the first windows of each stream are read, so
    that a quick estimate still samples the whole text."""
    was_training = model.training
    model.eval()
    streams = TextStreams(ids, batch_size, window, drop_last=False)
    windows = len(streams) if max_chars <= 0 else min(len(streams), max(1, max_chars // (batch_size * window)))
    total, count, state = 0.0, 0, None
    for k in range(windows):
        inputs, targets = (t.to(device) for t in streams[k])
        logits, state = model.forward_windows(inputs, state)
        total += float(F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum"))
        count += targets.numel()
    model.train(was_training)
    return total / count


def _rng_state() -> Dict[str, Any]:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def _plot_curves(history: Dict[str, List[float]], final: tuple[int, float], path: Path,
                 title: str) -> None:
    # The object-oriented API with the Agg canvas: no pyplot, no global backend.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4.5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.plot(history["train_step"], history["train_loss"], label="train (mean since last point)")
    axes.plot(history["val_step"], history["val_loss"], "o-", label="validation (sample)")
    axes.plot(*final, "*", markersize=12, label="validation (all characters)")
    axes.set_xlabel("step")
    axes.set_ylabel("cross-entropy (nats / character)")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    atomic_write_bytes(path, buffer.getvalue())


@stage("tbptt")
def tbptt(ctx, *, batch_size: int = 32, window: int = 64, lr: float = 2e-3,
          lr_decay: float = 0.5, decay_steps: int = 2000, clip: float = 5.0,
          steps: int = 0, minutes: float = 25.0, eval_every: int = 250, eval_chars: int = 30000,
          eval_batch_size: int = 32, eval_window: int = 256, checkpoint_every: int = 250) -> None:
    """Trains the language model on ``batch_size`` contiguous streams of the
    training text, ``window`` characters at a time, carrying the recurrent
    state across windows and cutting the gradient between them.

    Adam at ``lr``, multiplied by ``lr_decay`` every ``decay_steps`` steps
    (smoothly), gradients clipped to norm ``clip``. Stops after ``steps``
    steps or ``minutes`` minutes of training, whichever comes first (0: no
    limit). Every ``eval_every`` steps about ``eval_chars`` validation
    characters are scored (the first windows of ``eval_batch_size`` streams
    spread over the whole validation text); at the end all of them. A checkpoint (weights,
    optimizer, step, carried state, RNG, vocabulary, curves) is written every
    ``checkpoint_every`` steps and at the end; with ``--resume`` training
    continues from it, and the step and time budgets count the whole run.
    """
    model, data = ctx.require("model", "tbptt"), ctx.require("data", "tbptt")
    if steps <= 0 and minutes <= 0:
        raise GraphseqError("tbptt needs a budget: steps > 0 or minutes > 0")
    streams = TextStreams(data.train, batch_size, window)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    path = ctx.out / CHECKPOINT
    step, seconds, state = 0, 0.0, None
    running, count = 0.0, 0  # the training loss summed since the last evaluation
    history: Dict[str, List[float]] = {"train_step": [], "train_loss": [], "val_step": [], "val_loss": [],
                                       "val_minutes": []}
    if ctx.resume:
        step, seconds, state, history, (running, count) = _restore(ctx, path, model, optimizer, data.vocab)

    def save() -> None:
        save_checkpoint(checkpoint_payload(
            model, data.vocab, optimizer=optimizer.state_dict(), step=step, seconds=seconds,
            state=state, rng=_rng_state(), history=history, running=[running, count]), path)

    def out_of_budget() -> bool:
        return (steps > 0 and step >= steps) or (minutes > 0 and seconds >= 60 * minutes)

    ctx.log.info(f"training: {len(streams)} windows of {batch_size} x {window} characters per epoch"
                 + (f", resuming at step {step}" if step else ""))
    model.train()
    bar = tqdm(total=steps if steps > 0 else None, initial=step, desc=ctx.pipeline,
               disable=ctx.quiet, unit="step", dynamic_ncols=True)
    started = time.perf_counter() - seconds
    while not out_of_budget():
        k = step % len(streams)
        if k == 0:
            state = None  # Each epoch starts every stream afresh.
        inputs, targets = (t.to(ctx.device) for t in streams[k])
        for group in optimizer.param_groups:
            group["lr"] = lr * lr_decay ** (step / decay_steps)
        logits, state = model.forward_windows(inputs, state)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        state = detach_state(state)
        step += 1
        loss = float(loss.detach())
        running, count = running + loss, count + 1
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}")
        if step % eval_every == 0:
            val = evaluate(model, data.val, eval_batch_size, eval_window, ctx.device, eval_chars)
            history["train_step"].append(step)
            history["train_loss"].append(running / count)
            history["val_step"].append(step)
            history["val_loss"].append(val)
            history["val_minutes"].append((time.perf_counter() - started) / 60)
            ctx.log.info(f"step {step}: train {running / count:.4f}, validation (about "
                         f"{eval_chars:,} characters) {val:.4f} nats/char, "
                         f"{(time.perf_counter() - started) / 60:.1f} min")
            running, count = 0.0, 0
        seconds = time.perf_counter() - started
        if step % checkpoint_every == 0:
            save()
    bar.close()

    save()
    val = evaluate(model, data.val, eval_batch_size, eval_window, ctx.device)
    _plot_curves(history, (step, val), ctx.out / "curves.png",
                 f"{ctx.pipeline}: validation {val:.3f} nats/char after {step} steps")
    write_json(ctx.out / "history.json", {**history, "final_step": step, "final_val_loss": val})
    train_loss = running / count if count else (history["train_loss"] or [math.nan])[-1]
    ctx.metrics.update(val_nats=val, val_bits=nats_to_bits(val), steps=step,
                       train_minutes=seconds / 60, train_loss=train_loss)
    ctx.log.info(f"validation: {val:.4f} nats/char = {nats_to_bits(val):.4f} bits/char "
                 f"after {step} steps, {seconds / 60:.1f} min of training")


def _restore(ctx, path: Path, model: CharLM, optimizer: torch.optim.Optimizer,
             vocab: Vocabulary) -> tuple[int, float, Optional[State], Dict[str, List[float]], list]:
    if not path.is_file():
        raise GraphseqError(f"--resume: no {CHECKPOINT} in {ctx.out}; the run stopped before its "
                            f"first checkpoint, so start it again without --resume")
    checkpoint = load_checkpoint(path, map_location=ctx.device)
    if checkpoint["vocabulary"] != vocab.symbols:
        raise GraphseqError(f"--resume: {path} was trained on a text with other characters")
    if checkpoint["model_config"] != model.config:
        raise GraphseqError(f"--resume: {path} holds a model {checkpoint['model_config']}, "
                            f"but the pipeline now builds {model.config}")
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    _set_rng_state(checkpoint["rng"])
    ctx.log.info(f"resumed from {path} at step {checkpoint['step']}")
    return (checkpoint["step"], checkpoint["seconds"], checkpoint["state"], checkpoint["history"],
            checkpoint["running"])


@stage("char_sample")
def char_sample(ctx, *, prime: str = "ROMEO:", length: int = 500, temperature: float = 0.8) -> None:
    """Writes ``sample.txt``: ``length`` characters drawn after ``prime``."""
    model, data = ctx.require("model", "char_sample"), ctx.require("data", "char_sample")
    text = sample(model, data.vocab, prime, length, temperature, seed=ctx.seed)
    atomic_write_text(ctx.out / "sample.txt", text + "\n")
    ctx.log.info("sample (temperature %s):\n%s", temperature, text)
