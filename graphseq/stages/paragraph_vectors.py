"""The ``spv-polarity`` stage: supervised paragraph vectors (SPV-DM and
SPV-DBOW) on sentence polarity with the shared 10-fold cross-validation.
For each fold and mode, word, document and class vectors are trained on the
training sentences; every sentence then gets an inferred vector (class
nodes left out, everything but the new document vectors frozen), and three
rules predict its class, each scored on the validation and the test fold:

- ``likelihood``: the class whose vector best predicts the sentence's
  words (:func:`~graphseq.models.paragraph_vectors.class_log_likelihood`);
- ``logistic``: logistic regression on the inferred vectors of the training
  sentences, its inverse regularisation C chosen on the validation fold
  (what Doc2Vec users do);
- ``nearest``: the class vector nearest (cosine) to the inferred vector.
"""
from __future__ import annotations

import contextlib
import math
import time
from collections import Counter
from typing import Any, Dict, List, Sequence

import torch
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from ..checks import at_least, between, each, non_negative, one_of, positive
from ..data.polarity import CLASS_NAMES, cv_folds, load_polarity
from ..errors import GraphseqError, draw_bars
from ..io import atomic_write_text, write_json, write_png
from ..models.paragraph_vectors import (MODES, FlatCorpus, SupervisedParagraphVectors, class_log_likelihood,
                                        fit, infer, keep_probability, noise_distribution)
from ..seeding import MAX_SEED
from .polarity import FOLD_LIST, read_folds
from .registry import stage

RULES = ("likelihood", "logistic", "nearest")
LOGISTIC_C = (0.1, 1.0, 10.0)
FOLDS_FILE = "folds.json"  # the metrics of every finished fold and mode
# The most noise words per target: word2vec's authors advise 5-20 on small
# data and 2-5 on large; each target scores 1 + negative output vectors, so a
# batch holds batch_size x (1 + negative) x dim numbers.
MAX_NEGATIVE = 100
MODE_LIST = each(one_of(*MODES), distinct=True)  # a mode twice would be trained and scored twice


def words_of(sentence: str) -> List[str]:
    """The snippets come tokenised (words and punctuation separated by
    spaces); punctuation such as ``!`` and ``?`` is kept as words."""
    return sentence.lower().split()


def fold_vocabulary(words: Sequence[List[str]], train: torch.Tensor, min_count: int
                    ) -> tuple[List[str], Counter]:
    """The words that occur at least ``min_count`` times in the training
    sentences ``train``, the most frequent first, and every word's count there."""
    counts = Counter(w for i in train.tolist() for w in words[i])
    vocabulary = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    if not vocabulary:
        raise GraphseqError(f"no word occurs min_count={min_count} times in the training sentences")
    return vocabulary, counts


def spv_fold(sentences: Sequence[str], labels: torch.Tensor, split, *, mode: str, dim: int = 100,
             window: int = 5, negative: int = 5, sample: float = 1e-3, min_count: int = 2, epochs: int = 10,
             infer_epochs: int = 10, lr: float = 0.1, batch_size: int = 1024, train_words: bool = False,
             seed: int = 0, device: str | torch.device = "cpu", class_words: int = 10,
             progress=None) -> Dict[str, Any]:
    """Trains SPV in ``mode`` on ``split``'s training sentences, infers a
    vector for every sentence of the split and scores each rule on its
    validation and test sentences. Returns the accuracies
    (``{rule}_{val|test}_accuracy``), the chosen C, each class's nearest
    words, the training losses and the seconds taken."""
    from sklearn.linear_model import LogisticRegression

    started = time.perf_counter()
    train, val, test = split
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    words = [words_of(s) for s in sentences]
    vocabulary, counts = fold_vocabulary(words, train, min_count)
    index = {w: i for i, w in enumerate(vocabulary)}
    frequency = torch.tensor([counts[w] for w in vocabulary])
    # Words outside the vocabulary are skipped, as word2vec and Doc2Vec do.
    encode = lambda ids: [[index[w] for w in words[i] if w in index] for i in ids.tolist()]  # noqa: E731
    noise, keep = noise_distribution(frequency), keep_probability(frequency, sample)
    settings = dict(window=window, negative=negative, batch_size=batch_size, noise_distribution=noise,
                    keep=keep, generator=generator)

    model = SupervisedParagraphVectors(len(vocabulary), len(train), len(CLASS_NAMES), dim, mode,
                                       train_words).to(device)
    losses = fit(model, FlatCorpus.of(encode(train)), labels[train], model.parameters(), epochs=epochs,
                 lr=lr, progress=progress, **settings)
    everything = torch.cat([train, val, test])
    corpus = FlatCorpus.of(encode(everything))
    vectors = infer(model, corpus, epochs=infer_epochs, lr=lr, **settings)  # [documents, dim]
    parts = dict(zip(("train", "val", "test"), vectors.cpu().split([len(train), len(val), len(test)])))
    truth = {"train": labels[train], "val": labels[val], "test": labels[test]}

    predictions: Dict[str, Dict[str, torch.Tensor]] = {}
    scores = class_log_likelihood(model, corpus, vectors, window).cpu()
    predictions["likelihood"] = dict(zip(("train", "val", "test"),
                                         scores.argmax(1).split([len(train), len(val), len(test)])))
    predictions["nearest"] = {k: model.class_similarity(v.to(device)).argmax(1).cpu() for k, v in parts.items()}
    best_c, best_val = LOGISTIC_C[0], -1.0
    for c in LOGISTIC_C:
        classifier = LogisticRegression(C=c, max_iter=2000).fit(parts["train"].numpy(), truth["train"].numpy())
        score = classifier.score(parts["val"].numpy(), truth["val"].numpy())
        if score > best_val:
            best_c, best_val, chosen = c, score, classifier
    predictions["logistic"] = {k: torch.as_tensor(chosen.predict(v.numpy())) for k, v in parts.items()}

    result: Dict[str, Any] = {"mode": mode, "logistic_C": best_c, "losses": losses,
                              "vocabulary": len(vocabulary)}
    for rule in RULES:
        for split_name in ("val", "test"):
            correct = (predictions[rule][split_name] == truth[split_name]).float().mean()
            result[f"{rule}_{split_name}_accuracy"] = float(correct)
    shown = frequency >= 5  # rare words' vectors are mostly noise
    result["class_words"] = {name: [vocabulary[i] for i in model.nearest_words(c, class_words, shown.to(device))]
                             for c, name in enumerate(CLASS_NAMES)}
    result["seconds"] = time.perf_counter() - started
    return result


def _chosen_folds(run_folds: list, folds: int) -> List[int]:
    chosen = sorted(set(run_folds)) or list(range(folds))
    if any(f >= folds for f in chosen):
        raise GraphseqError(f"spv.run_folds must name folds 0..{folds - 1}, got {list(run_folds)}")
    return chosen


def _check_vocabulary(check, *, folds: int, fold_seed: int, run_folds: list, min_count: int, window: int,
                      **_) -> None:
    # Each chosen fold's vocabulary before folds.json is written (the words of all ten folds are
    # counted in under a second).
    sentences, _ = load_polarity(check.data_root, check.data_mirror)
    words = [words_of(s) for s in sentences]
    reach = max(map(len, words)) - 1  # A window this wide spans the longest sentence.
    if window > reach:
        raise GraphseqError(f"spv.window = {window} is not allowed: it must be at most {reach}, which spans "
                            f"the longest sentence ({reach + 1} words)")
    splits = cv_folds(len(sentences), folds, fold_seed)
    for fold in _chosen_folds(run_folds, folds):
        try:
            fold_vocabulary(words, splits[fold][0], min_count)
        except GraphseqError:  # said with the key to change, as the user set it
            raise GraphseqError(f"{check.section}.min_count = {min_count}: no word occurs that often in the training "
                                f"sentences of fold {fold}, so there is nothing to train; lower "
                                f"{check.section}.min_count") from None


@stage("spv_polarity", checks={"modes": MODE_LIST, "folds": at_least(3), "fold_seed": between(0, MAX_SEED),
                               "run_folds": FOLD_LIST, "dim": at_least(1), "window": at_least(1),
                               "negative": between(1, MAX_NEGATIVE), "sample": non_negative, "min_count": at_least(1),
                               "epochs": at_least(1), "infer_epochs": at_least(1), "lr": positive,
                               "batch_size": at_least(1), "classify": one_of(*RULES)},
       resumes=FOLDS_FILE, resume_may_change=("run_folds",), precheck=_check_vocabulary)
def spv_polarity(ctx, *, modes: list = ["dm", "dbow"], folds: int = 10, fold_seed: int = 0, run_folds: list = [],
                 dim: int = 100, window: int = 5, negative: int = 5, sample: float = 1e-3, min_count: int = 2,
                 epochs: int = 10, infer_epochs: int = 10, lr: float = 0.1, batch_size: int = 1024,
                 train_words: bool = False, classify: str = "likelihood", test: bool = True) -> None:
    """Supervised paragraph vectors in each of ``modes`` on every fold (or
    ``run_folds``) of ``cv_folds(10662, folds, fold_seed)``: ``epochs``
    passes of training and ``infer_epochs`` of inference, Adagrad at ``lr``
    decaying linearly, ``negative`` noise words, windows of ``window`` words
    each side, words rarer than ``min_count`` dropped and frequent ones
    down-sampled by ``sample``. The metrics of every rule are reported;
    ``classify`` names the one each mode's headline accuracy uses;
    ``test = false`` reports validation metrics alone, for choosing
    settings. ``folds.json`` holds every finished fold and mode; a resumed
    run keeps them and runs the rest."""
    sentences, labels = load_polarity(ctx.data_root, ctx.data_mirror)
    labels = torch.tensor(labels)
    splits = cv_folds(len(sentences), folds, fold_seed)
    chosen = _chosen_folds(run_folds, folds)
    settings = dict(dim=dim, window=window, negative=negative, sample=sample, min_count=min_count, epochs=epochs,
                    infer_epochs=infer_epochs, lr=lr, batch_size=batch_size, train_words=train_words)
    finished = read_folds(ctx.out / FOLDS_FILE, ("mode", "likelihood_val_accuracy")) if ctx.resume else []
    done = {(r["fold"], r["mode"]): r for r in finished}
    # Folds outside run_folds stay recorded; only the chosen ones are reported.
    write_json(ctx.out / FOLDS_FILE, list(done.values()))
    bar = tqdm(total=len(chosen) * len(modes), desc="spv folds", disable=not draw_bars(ctx.quiet),
               dynamic_ncols=True)
    # Each fold's line goes above the bar, not through it; without a bar there is nothing to keep it off.
    with logging_redirect_tqdm(loggers=[ctx.log]) if not bar.disable else contextlib.nullcontext():
        for fold in chosen:
            for mode in modes:
                if (fold, mode) not in done:
                    result = spv_fold(sentences, labels, splits[fold], mode=mode, seed=ctx.seed * 1000 + fold,
                                      device=ctx.device, **settings,
                                      progress=lambda loss: bar.set_postfix(fold=fold, mode=mode,
                                                                            loss=f"{loss:.3f}"))
                    if not test:
                        result = {k: v for k, v in result.items() if "_test_" not in k}
                    result["fold"] = fold
                    done[(fold, mode)] = result
                    write_json(ctx.out / FOLDS_FILE, list(done.values()))
                result = done[(fold, mode)]
                bar.update(1)
                ctx.log.info(f"fold {fold} SPV-{mode.upper()}: " + ", ".join(
                    f"{rule} {result[f'{rule}_val_accuracy']:.4f}"
                    + (f"/{result[f'{rule}_test_accuracy']:.4f}" if test else "") for rule in RULES)
                    + (" (validation/test)" if test else " (validation)") + f", {result['seconds']:.0f} s")
    bar.close()
    _report(ctx, {mode: [done[(f, mode)] for f in chosen] for mode in modes}, classify, test)


def _report(ctx, results: Dict[str, List[Dict[str, Any]]], classify: str, test: bool) -> None:
    lines = []
    splits = ("val", "test") if test else ("val",)
    for mode, rows in results.items():
        for rule in RULES:
            for split in splits:
                values = [r[f"{rule}_{split}_accuracy"] for r in rows]
                mean = sum(values) / len(values)
                std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
                ctx.metrics[f"{mode}_{rule}_{split}_accuracy"] = mean
                ctx.metrics[f"{mode}_{rule}_{split}_std"] = std
        for split in splits:
            ctx.metrics[f"{mode}_{split}_accuracy"] = ctx.metrics[f"{mode}_{classify}_{split}_accuracy"]
            ctx.metrics[f"{mode}_{split}_std"] = ctx.metrics[f"{mode}_{classify}_{split}_std"]
        ctx.metrics[f"{mode}_minutes"] = sum(r["seconds"] for r in rows) / 60
        first = rows[0]
        for name, words in first["class_words"].items():
            lines.append(f"SPV-{mode.upper()} fold {first['fold']}, nearest words to the {name} class vector: "
                         + ", ".join(words))
    ctx.metrics["folds"] = [r["fold"] for r in next(iter(results.values()))]
    atomic_write_text(ctx.out / "class_words.txt", "\n".join(lines) + "\n")
    for line in lines:
        ctx.log.info(line)
    _plot_losses(results, ctx.out / "curves.png", ctx.pipeline)


def _plot_losses(results: Dict[str, List[Dict[str, Any]]], path, title: str) -> None:
    """The training loss per pass, one line per fold, a panel per mode."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(6 * len(results), 4.5), dpi=100)
    FigureCanvasAgg(figure)
    for i, (mode, rows) in enumerate(results.items()):
        axes = figure.add_subplot(1, len(results), i + 1)
        for row in rows:
            axes.plot(range(1, len(row["losses"]) + 1), row["losses"], "o-", markersize=3, label=f"fold {row['fold']}")
        axes.set_title(f"SPV-{mode.upper()}")
        axes.set_xlabel("pass over the training sentences")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))  # passes are whole
        axes.set_ylabel("negative-sampling loss per word")
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7)
    figure.suptitle(title)
    write_png(figure, path)
