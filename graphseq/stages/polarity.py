"""Stages of the sentence-classification pipeline (``polarity-bilstm``): the
sentence-polarity snippets as word chains, cut into the fixed 10-fold
cross-validation of :func:`graphseq.data.polarity.cv_folds`; a bidirectional
chain-LSTM classifier; and its training on each fold, stopped early and
chosen on that fold's validation part, then tested on its test part.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from ..checks import Domain, at_least, between, non_negative, one_of, positive, probability
from ..data.polarity import Fold, cv_folds, load_polarity
from ..data.text import Vocabulary, tokenize
from ..errors import GraphseqError, draw_bars, plural
from ..graphs import chain, lengths_to_batch
from ..io import read_json, save_checkpoint, write_json
from ..models.sentence import POOLS, SentenceClassifier
from ..seeding import MAX_SEED
from ..training import LONG_MINUTES, describe_minutes
from .registry import stage


@dataclass
class Sentences:
    """One fold's sentences as word ids, over a vocabulary of its training words."""

    vocab: Vocabulary
    train: List[Tensor]  # word ids of each sentence
    train_labels: Tensor
    val: List[Tensor]
    val_labels: Tensor
    test: List[Tensor]
    test_labels: Tensor


@dataclass
class SentenceFolds:
    """The tokenised sentences, their labels and the cross-validation folds."""

    words: List[List[str]]
    labels: Tensor
    folds: List[Fold]
    test_folds: List[int]  # the folds to run, each testing on its own part
    min_freq: int = 1

    def fold(self, i: int) -> Sentences:
        """Fold ``i``: the vocabulary holds its training words seen at least
        ``min_freq`` times; other words become ``<unk>``."""
        train, val, test = self.folds[i]
        vocab = Vocabulary.of_words((self.words[j] for j in train.tolist()), min_freq=self.min_freq)

        def encode(ids: Tensor) -> List[Tensor]:
            # A sentence without words still needs a node: it reads as one unknown word.
            return [vocab.encode(self.words[j] or [vocab.unknown]) for j in ids.tolist()]

        return Sentences(vocab, encode(train), self.labels[train], encode(val), self.labels[val],
                         encode(test), self.labels[test])


FOLD_LIST = Domain("a list of distinct fold numbers (empty: every fold)",
                   lambda v: isinstance(v, list) and len(set(v)) == len(v)
                   and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v))


def _chosen_folds(test_folds: List[int], folds: int, table: str) -> List[int]:
    chosen = list(test_folds) or list(range(folds))
    bad = [i for i in chosen if not 0 <= i < folds]
    if bad:
        raise GraphseqError(f"{table}.test_folds: fold(s) {', '.join(map(str, bad))} out of range "
                            f"0..{folds - 1}")
    return chosen


def _check_vocabulary(check, *, folds: int, split_seed: int, test_folds: List[int], min_freq: int, **_) -> None:
    # Each chosen fold's vocabulary, before the run writes a file: one of <unk> alone trains a model
    # that sees every sentence as the same string of unknown words (accuracy 0.5).
    chosen = _chosen_folds(test_folds, folds, check.section)
    if min_freq <= 1:
        return  # Every training word is kept.
    sentences, _ = load_polarity(check.data_root, check.data_mirror)
    words = [tokenize(s) for s in sentences]
    all_folds = cv_folds(len(sentences), folds, split_seed)
    for i in chosen:
        if len(Vocabulary.of_words((words[j] for j in all_folds[i][0].tolist()), min_freq=min_freq)) <= 1:
            raise GraphseqError(f"{check.section}.min_freq = {min_freq}: no word occurs that often in the training "
                                f"sentences of fold {i}, so its vocabulary would hold <unk> alone; "
                                f"lower {check.section}.min_freq")


@stage("sentence_polarity", checks={"folds": at_least(3), "split_seed": between(0, MAX_SEED),
                                    "test_folds": FOLD_LIST, "min_freq": at_least(1)},
       resume_may_change=("test_folds",), precheck=_check_vocabulary,
       makes={"data": "a sentence-polarity dataset"})
def sentence_polarity(ctx, *, folds: int = 10, split_seed: int = 0, test_folds: List[int] = [],
                      min_freq: int = 1) -> None:
    """The 10,662 snippets, lower-cased and split into words, and ``folds``
    cross-validation folds fixed by ``split_seed`` (not the run's seed, so
    every run and every model sees the same folds). ``test_folds`` picks
    which folds to run (empty: all of them). Training words seen fewer
    than ``min_freq`` times read as ``<unk>``; a ``min_freq`` that leaves a
    chosen fold no other word is refused before the run writes a file."""
    sentences, labels = load_polarity(ctx.data_root, ctx.data_mirror)
    all_folds = cv_folds(len(sentences), folds, split_seed)
    chosen = _chosen_folds(test_folds, folds, ctx.section)
    ctx.data = SentenceFolds([tokenize(s) for s in sentences], torch.as_tensor(labels, dtype=torch.long),
                             all_folds, chosen, min_freq)
    train, val, test = all_folds[chosen[0]]
    ctx.log.info(f"sentence polarity: {len(sentences)} sentences in {folds} folds (split seed {split_seed}); "
                 f"fold {chosen[0]}: {len(train)} training, {len(val)} validation, {len(test)} test; "
                 f"running fold(s) {', '.join(map(str, chosen))}")


@stage("bilstm_classifier", checks={"embedding_dim": at_least(1), "hidden_size": at_least(1),
                                    "num_layers": at_least(1), "dropout": probability, "pool": one_of(*POOLS)},
       makes={"model": "a sentence classifier"})
def bilstm_classifier(ctx, *, embedding_dim: int = 300, hidden_size: int = 150, num_layers: int = 1,
                      dropout: float = 0.5, pool: str = "max") -> None:
    """A bidirectional chain-LSTM sentence classifier, built afresh for each
    fold (its vocabulary differs from fold to fold): ``ctx.model`` is what
    builds it, ``ctx.model(vocab_size, num_classes)``, and its ``keywords``
    the configuration a checkpoint records."""
    ctx.model = partial(SentenceClassifier, embedding_dim=embedding_dim, hidden_size=hidden_size,
                        num_layers=num_layers, dropout=dropout, pool=pool)


def sentence_batch(sentences: List[Tensor], device: torch.device) -> Tuple[Tensor, Tensor, Tensor]:
    """Word ids, chain edges and the sentence of each word, for a list of sentences."""
    lengths = [s.numel() for s in sentences]
    return (torch.cat(sentences).to(device), chain(lengths).to(device),
            lengths_to_batch(lengths).to(device))


def length_buckets(lengths: Tensor, batch_size: int, generator: torch.Generator,
                   pool: int = 20) -> List[Tensor]:
    """Shuffled batches of similar-length sentences: a chain layer takes as
    many steps as its longest chain, so mixing lengths wastes steps. The
    shuffled ids are sorted by length within pools of ``pool`` batches."""
    order = torch.randperm(lengths.numel(), generator=generator)
    batches = []
    for start in range(0, order.numel(), batch_size * pool):
        chunk = order[start:start + batch_size * pool]
        chunk = chunk[lengths[chunk].argsort(stable=True)]
        batches += list(chunk.split(batch_size))
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


@torch.no_grad()
def accuracy(model: SentenceClassifier, sentences: List[Tensor], labels: Tensor,
             device: torch.device, batch_size: int = 500) -> float:
    model.eval()
    correct = 0
    for start in range(0, len(sentences), batch_size):
        part = sentences[start:start + batch_size]
        tokens, edge_index, batch = sentence_batch(part, device)
        predicted = model(tokens, edge_index, batch, len(part)).argmax(dim=1).cpu()
        correct += int((predicted == labels[start:start + batch_size]).sum())
    return correct / max(len(sentences), 1)


def train_fold(model: SentenceClassifier, data: Sentences, *, device: torch.device, seed: int,
               max_epochs: int, patience: int, batch_size: int, lr: float, weight_decay: float,
               clip: float, max_batches: int = 0, quiet: bool = True, desc: str = "",
               log: Any = None) -> Dict[str, float]:
    """Adam on the fold's training sentences, one validation pass after each
    epoch; stops after ``patience`` epochs without a better validation
    accuracy (0: runs all ``max_epochs``) and restores the epoch of the best
    one (the earlier on a tie). Returns ``epochs`` (the epoch kept),
    ``epochs_run``, ``val_accuracy`` and ``train_loss`` of the kept epoch."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([s.numel() for s in data.train])
    best = {"val_accuracy": -1.0}
    kept = None
    for epoch in range(1, max_epochs + 1):
        model.train()
        batches = length_buckets(lengths, batch_size, generator)
        if max_batches > 0:
            batches = batches[:max_batches]
        total, seen = 0.0, 0
        bar = tqdm(batches, desc=f"{desc}epoch {epoch}/{max_epochs}", disable=not draw_bars(quiet), dynamic_ncols=True,
                   leave=False)
        for ids in bar:
            ids = ids.tolist()
            tokens, edge_index, batch = sentence_batch([data.train[i] for i in ids], device)
            logits = model(tokens, edge_index, batch, len(ids))
            loss = F.cross_entropy(logits, data.train_labels[ids].to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            loss = float(loss.detach())
            total, seen = total + loss * len(ids), seen + len(ids)
            bar.set_postfix(loss=f"{loss:.3f}")
        bar.close()
        val = accuracy(model, data.val, data.val_labels, device)
        if log is not None:
            log.info(f"{desc}epoch {epoch}: training loss {total / max(seen, 1):.4f}, "
                     f"validation accuracy {val:.4f}")
        if val > best["val_accuracy"]:
            best = {"epochs": epoch, "val_accuracy": val, "train_loss": total / max(seen, 1)}
            kept = {k: v.detach().clone() for k, v in model.state_dict().items()}
        elif patience and epoch - best["epochs"] >= patience:
            break
    model.load_state_dict(kept)
    return {**best, "epochs_run": epoch}


FOLDS_FILE = "folds.json"


def read_folds(path: Path, keys: Sequence[str] = ()) -> List[Dict[str, Any]]:
    """The metrics of the folds a run finished, from its ``folds.json`` (none
    where there is none yet): a list of objects, each with its ``fold`` and
    ``keys``. Anything else is refused, naming the file, and left as it is."""
    if not path.is_file():
        return []
    folds = read_json(path)
    if not isinstance(folds, list) or not all(
            isinstance(f, dict) and isinstance(f.get("fold"), int) and set(keys) <= set(f) for f in folds):
        raise GraphseqError(f"{path} is damaged (not a list of folds with "
                            f"{', '.join(['fold', *keys])}); it was left as it is")
    return folds


def _mean_std(values: List[float]) -> Tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


@stage("train_sentences", checks={"max_epochs": at_least(1), "patience": at_least(0), "batch_size": at_least(1),
                                  "lr": positive, "weight_decay": non_negative, "clip": positive,
                                  "max_batches": non_negative},
       resumes=FOLDS_FILE, resume_reads=("fold-*.pt",),
       needs={"data": "a sentence-polarity dataset", "model": "a sentence classifier"})
def train_sentences(ctx, *, max_epochs: int = 10, patience: int = 3, batch_size: int = 50, lr: float = 4e-3,
                    weight_decay: float = 0.0, clip: float = 5.0, test: bool = True,
                    max_batches: int = 0) -> None:
    """Trains a fresh classifier on each fold of ``ctx.data`` (see
    :func:`train_fold`), writes its kept weights to ``fold-<i>.pt`` and
    measures it on the fold's test part (unless ``test`` is false, for
    choosing settings on validation metrics alone). Metrics: the mean and
    standard deviation over the folds of ``val_accuracy`` and
    ``test_accuracy``, and each fold's metrics (also in ``folds.json``). A
    resumed run keeps the folds already finished and runs the rest. ``max_batches`` > 0 stops each
    epoch early, for smoke tests."""
    data: SentenceFolds = ctx.require("data", "train_sentences")
    make_model: partial = ctx.require("model", "train_sentences")
    # folds.json holds the metrics of every fold finished so far (their
    # weights are in fold-<i>.pt); a resumed run keeps those and runs the rest.
    done = {f["fold"]: f for f in (read_folds(ctx.out / FOLDS_FILE, ("epochs", "val_accuracy")) if ctx.resume
                                        else [])
            if (ctx.out / f"fold-{f['fold']}.pt").is_file()}
    write_json(ctx.out / FOLDS_FILE, list(done.values()))
    results = []
    left = [i for i in data.test_folds if i not in done]
    for i in data.test_folds:
        if i in done:
            figures = done[i]
            ctx.log.info(f"fold {i}: kept from fold-{i}.pt")
        else:
            fold = data.fold(i)
            torch.manual_seed((ctx.seed + 1_000_003 * i) % 2**63)  # Each fold's start, whichever folds run.
            model = make_model(len(fold.vocab), int(data.labels.max()) + 1).to(ctx.device)
            started = time.perf_counter()
            figures = {"fold": i, **train_fold(
                model, fold, device=ctx.device, seed=ctx.seed + i, max_epochs=max_epochs, patience=patience,
                batch_size=batch_size, lr=lr, weight_decay=weight_decay, clip=clip, max_batches=max_batches,
                quiet=ctx.quiet, desc=f"fold {i} ", log=ctx.log)}
            if i == left[0] and len(left) > 1:  # the first fold trained here paces the rest
                epoch = (time.perf_counter() - started) / figures["epochs_run"]
                most = epoch * max_epochs * (len(left) - 1) / 60
                ctx.log.info(f"{epoch:.1f} s an epoch here; at most about {describe_minutes(most)} for the "
                             f"{plural(len(left) - 1, 'fold')} left ({max_epochs} epochs each)"
                             + (": a long schedule (fewer folds: --set data.test_folds=[...])"
                                if most > LONG_MINUTES else ""))
            if test:
                figures["test_accuracy"] = accuracy(model, fold.test, fold.test_labels, ctx.device)
            save_checkpoint({"model": model.state_dict(), "model_config": dict(make_model.keywords),
                             "vocabulary": list(fold.vocab.symbols), "figures": figures}, ctx.out / f"fold-{i}.pt")
            done[i] = figures
            write_json(ctx.out / FOLDS_FILE, list(done.values()))
        results.append(figures)
        ctx.log.info(f"fold {i}: epoch {figures['epochs']} kept, validation accuracy "
                     f"{figures['val_accuracy']:.4f}" + (f", test accuracy {figures['test_accuracy']:.4f}"
                                                        if "test_accuracy" in figures else ""))
    for key in ("val_accuracy", "test_accuracy"):
        if all(key in r for r in results):
            ctx.metrics[key], ctx.metrics[f"{key}_std"] = _mean_std([r[key] for r in results])
    ctx.metrics["epochs"] = statistics.fmean(r["epochs"] for r in results)
    ctx.metrics["folds"] = results
