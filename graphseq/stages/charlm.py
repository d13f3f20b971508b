"""Stages of the character language-model pipelines (``charlm-*``): read a
text into a character stream, build a :class:`~graphseq.models.charlm.CharLM`,
train it by truncated backpropagation through time with checkpoints that a
run can resume from, and write a sample of what it learned.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import distributed
from ..checks import at_least, fraction, non_negative, one_of, positive, probability
from ..data.text import TextStreams, Vocabulary, load_tiny_shakespeare, split_stream
from ..errors import GraphseqError, plural
from ..io import atomic_write_text, read_utf8, write_json
from ..models import evaluating
from ..models.charlm import CELLS, CharLM, detach_state, nats_to_bits, sample
from ..training import CHECKPOINT, plot_history, train_steps
from .registry import stage


@dataclass
class CharCorpus:
    vocab: Vocabulary
    train: Tensor  # character ids
    val: Tensor


def _read_text(text_file: str, data_root: Path, data_mirror) -> str:
    """``text_file``, else tiny-shakespeare."""
    if not text_file:
        with distributed.main_first():  # One process copies or downloads the text.
            return load_tiny_shakespeare(data_root, data_mirror)
    path = Path(text_file)
    if path.is_dir():
        raise GraphseqError(f"text_file {path} is a folder, not a text file")
    if not path.is_file():
        raise GraphseqError(f"text_file not found: {path}")
    try:
        text = read_utf8(path)
    except OSError as error:  # a symlink loop, say
        raise GraphseqError(f"cannot read text_file {path}: {error.strerror}") from None
    if len(set(text)) < 2:
        # One symbol is certain after itself: the model would learn nothing and report a loss of 0.
        raise GraphseqError(f"text_file {path} holds {len(set(text))} distinct character(s); a character "
                            f"model needs at least 2")
    return text


def _note_vocabulary(check, *, text_file: str, **_) -> None:
    # For char_sample's precheck: the prime must be spelled in the text's characters.
    check.facts["char_vocabulary"] = Vocabulary.of_characters(_read_text(text_file, check.data_root,
                                                                         check.data_mirror))


@stage("char_corpus", checks={"val_fraction": fraction}, precheck=_note_vocabulary, makes={"data": "a text corpus"})
def char_corpus(ctx, *, text_file: str = "", val_fraction: float = 0.1) -> None:
    """Tiny-shakespeare (or ``text_file``), its characters as the vocabulary,
    the first ``1 - val_fraction`` for training and the rest for validation."""
    text = _read_text(text_file, ctx.data_root, ctx.data_mirror)
    vocab = Vocabulary.of_characters(text)
    train, val = split_stream(vocab.encode(text), val_fraction)
    ctx.data = CharCorpus(vocab, train, val)
    ctx.log.info(f"text: {len(text):,} characters, {len(vocab)} distinct; "
                 f"{train.numel():,} for training, {val.numel():,} for validation")


def _check_chunks(check, *, cell: str, hidden_size: int, chunk_size: int, **_) -> None:
    if cell == "onlstm" and hidden_size % chunk_size:
        raise GraphseqError(f"char_lm: chunk_size = {chunk_size} must divide hidden_size = {hidden_size} "
                            f"(ON-LSTM's master gates rank chunks of neurons)")


@stage("char_lm", checks={"cell": one_of(*CELLS), "embedding_dim": at_least(1), "hidden_size": at_least(1),
                          "num_layers": at_least(1), "dropout": probability, "chunk_size": at_least(1)},
       precheck=_check_chunks, applies={"chunk_size": {"cell": ("onlstm",)}},
       makes={"model": "a character language model"}, needs={"data": "a text corpus"})
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
    streams = TextStreams(ids, batch_size, window, drop_last=False)
    windows = len(streams) if max_chars <= 0 else min(len(streams), max(1, max_chars // (batch_size * window)))
    total, count, state = 0.0, 0, None
    with evaluating(model):
        for k in range(windows):
            inputs, targets = (t.to(device) for t in streams[k])
            logits, state = model.forward_windows(inputs, state)
            total += float(F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum"))
            count += targets.numel()
    return total / count


def cosine_rate(step: int, steps: int, end: float) -> float:
    """The learning rate at ``step`` as a fraction of the initial one: a
    half cosine from 1 at step 0 to ``end`` at step ``steps`` (and ``end``
    after it); 1 throughout when there is no step budget (``steps = 0``).
    Tied to the budget, the rate ends where the run does, whatever its
    length, instead of decaying by the clock."""
    if steps <= 0:
        return 1.0
    progress = min(step, steps) / steps
    return end + (1.0 - end) * 0.5 * (1.0 + math.cos(math.pi * progress))


@stage("tbptt", checks={
    "batch_size": at_least(1), "window": at_least(1), "lr": positive, "lr_end": probability,
    "clip": positive, "steps": non_negative, "minutes": non_negative,
    "eval_every": at_least(1), "eval_chars": non_negative, "eval_batch_size": at_least(1),
    "eval_window": at_least(1), "checkpoint_every": at_least(1)},
    resumes=CHECKPOINT, resume_may_change=("steps", "minutes"), data_parallel=True, splits=("batch_size",),
    applies={"lr_end": {"steps": positive}},
    needs={"data": "a text corpus", "model": "a character language model"})
def tbptt(ctx, *, batch_size: int = 32, window: int = 64, lr: float = 2e-3,
          lr_end: float = 0.1, clip: float = 5.0,
          steps: int = 10000, minutes: float = 0.0, eval_every: int = 250, eval_chars: int = 30000,
          eval_batch_size: int = 32, eval_window: int = 256, checkpoint_every: int = 250) -> None:
    """Trains the language model on ``batch_size`` contiguous streams of the
    training text, ``window`` characters at a time, carrying the recurrent
    state across windows and cutting the gradient between them.

    Adam at ``lr``, lowered along a half cosine to ``lr_end * lr``, reached
    as the ``steps`` steps end (see :func:`cosine_rate`), gradients clipped
    to norm ``clip``. Stops after ``steps`` steps, or earlier after
    ``minutes`` minutes of training (0: no time limit); with ``steps = 0``
    only ``minutes`` bounds the run and the rate stays at ``lr`` (``lr_end``
    is refused there). The
    schedule spans the step budget, so a resume that sets ``steps`` anew
    moves the rest of the schedule with it. Every ``eval_every`` steps about
    ``eval_chars`` validation characters are scored (the first windows of
    ``eval_batch_size`` streams spread over the whole validation text); at the
    end all of them. A checkpoint (weights, optimizer, step, carried state,
    RNG, vocabulary, history) is written every ``checkpoint_every`` steps and
    at the end; with ``--resume`` training continues from it, and the step
    and time budgets count the whole run.

    With several processes each reads its share of the ``batch_size``
    streams (which must divide evenly) and the gradients are averaged, so
    a step is the same step as in one process.
    """
    model, data = ctx.require("model", "tbptt"), ctx.require("data", "tbptt")
    streams = TextStreams(data.train, batch_size, window, text="the training text (1 - val_fraction)")
    # The validation streams, checked now rather than at the first evaluation, after training.
    TextStreams(data.val, eval_batch_size, eval_window, drop_last=False, names=("eval_batch_size", "eval_window"),
                text="the validation text (val_fraction)")
    rows = distributed.shard(batch_size)  # This rank's streams.
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: cosine_rate(s, steps, lr_end))
    carried: Dict[str, Any] = {"state": None}

    def loss_fn(model: CharLM, step: int) -> Tensor:
        k = step % len(streams)
        if k == 0:
            carried["state"] = None  # Each epoch starts every stream afresh.
        inputs, targets = (t[rows].to(ctx.device) for t in streams[k])
        logits, state = model.forward_windows(inputs, carried["state"])
        carried["state"] = detach_state(state)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    def validate(model: CharLM) -> Dict[str, float]:
        return {"val_loss": evaluate(model, data.val, eval_batch_size, eval_window, ctx.device, eval_chars)}

    if distributed.is_main():
        ctx.log.info(f"training: {len(streams)} windows of {batch_size} x {window} characters per epoch")
    result = train_steps(model, optimizer, loss_fn, steps=steps, out=ctx.out, device=ctx.device, resume=ctx.resume,
                         quiet=ctx.quiet, log=ctx.log, pipeline=ctx.pipeline, minutes=minutes,
                         scheduler=schedule, clip=clip, evaluate=validate, eval_every=eval_every,
                         checkpoint_every=checkpoint_every, extra_state=carried, desc=ctx.pipeline,
                         meta={"model_config": dict(model.config), "vocabulary": list(data.vocab.symbols)},
                         curves=None)
    val = evaluate(model, data.val, eval_batch_size, eval_window, ctx.device)
    history = result.history
    if distributed.is_main():
        plot_history(history, ctx.out / "curves.png",
                     f"{ctx.pipeline}: validation {val:.3f} nats/char after {plural(result.step, 'step')}",
                     final=("validation (all characters)", result.step, val))
        write_json(ctx.out / "history.json", {"history": history, "final_step": result.step,
                                              "final_val_loss": val})
    train_loss = history[-1].get("train_loss", math.nan) if history else math.nan
    ctx.metrics.update(val_nats=val, val_bits=nats_to_bits(val), steps=result.step,
                       train_minutes=result.seconds / 60, train_loss=train_loss)
    if distributed.is_main():
        ctx.log.info(f"validation: {val:.4f} nats/char = {nats_to_bits(val):.4f} bits/char "
                     f"after {plural(result.step, 'step')}, {result.seconds / 60:.1f} min of training")


def _check_prime(check, *, prime: str, **_) -> None:
    """A prime the text never spells would stop the run after its training."""
    if "char_vocabulary" in check.facts:
        try:
            check.facts["char_vocabulary"].encode(prime)
        except GraphseqError as error:
            raise GraphseqError(f"{check.section}.prime {prime!r}: {error}") from None


@stage("char_sample", checks={"length": non_negative, "temperature": non_negative}, precheck=_check_prime,
       needs={"data": "a text corpus", "model": "a character language model"})
def char_sample(ctx, *, prime: str = "ROMEO:", length: int = 500, temperature: float = 0.8) -> None:
    """Writes ``sample.txt``: ``length`` characters drawn after ``prime``."""
    model, data = ctx.require("model", "char_sample"), ctx.require("data", "char_sample")
    text = sample(model, data.vocab, prime, length, temperature, seed=ctx.seed)
    if not distributed.is_main():
        return
    atomic_write_text(ctx.out / "sample.txt", text + "\n")
    ctx.log.info("sample (temperature %s):\n%s", temperature, text)
