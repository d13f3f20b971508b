"""Stages of ``bert-polarity``: a ``bert-pretrain`` run for each group of
cross-validation folds (leaving out every sentence of the group's test
folds), or finished runs named, then fine-tuning on sentence polarity from
the pretrained weights and from scratch, fold by fold.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Tuple

import torch
import torch.nn.functional as F

from .. import distributed
from ..checks import at_least, between, non_negative, one_of, positive, text_list
from ..data.polarity import cv_folds, load_polarity
from ..data.pretraining import TokenGraphs, collate, pack_pair
from ..data.wordpiece import WordPieceTokenizer
from ..errors import GraphseqError
from ..io import check_run_folder, read_json, write_json, write_png
from ..models.bert import POOLS, WEIGHTS_FILE, BertClassifier, load_pretrained
from ..seeding import MAX_SEED
from ..training import CHECKPOINT, train_steps
from .bert import (CORPUS_FILE, DEFAULT_TEXTS, POLARITY_CHECKED, adamw, check_tokenizer, fold_list,
                   step_generator, warmup_linear_decay)
from .polarity import FOLD_LIST, read_folds
from .registry import stage

PLAN_FILE = "plan.json"  # the pretraining each test fold fine-tunes from
FOLDS_FILE = "folds.json"  # the metrics of every finished fold
# Chosen by bert-polarity itself from its folds for each group's pretraining (_group_overrides).
GROUP_KEYS = ("corpus.exclude_folds", "corpus.folds", "corpus.fold_seed")


def read_pretraining(folder: Path, folds: int, fold_seed: int) -> List[int]:
    """The polarity test folds a finished ``bert-pretrain`` run left out:
    all of them if it read no polarity text and dropped every sentence that
    holds a snippet (its record says ``polarity_checked``); of a run that
    read polarity, those it left out (none if it cut other folds). A run
    that read no polarity text, recorded before that check, is refused:
    its text was never checked (IMDB's training reviews hold polarity
    snippets)."""
    path = folder / CORPUS_FILE
    check_run_folder(folder, "name the --out folder of a finished bert-pretrain run")
    if not (folder / WEIGHTS_FILE).is_file() or not path.is_file():
        raise GraphseqError(f"{folder} is not a finished bert-pretrain run (no {WEIGHTS_FILE} "
                            f"and {CORPUS_FILE})")
    info = read_json(path)
    try:
        excluded = [int(f) for f in info["excluded_polarity_folds"]]
        shared = info["source"] == "shared"
        same_folds = shared and info["folds"] == folds and info["fold_seed"] == fold_seed
        texts = info.get("texts", list(DEFAULT_TEXTS))  # runs before texts was recorded read polarity
        read_polarity = shared and "polarity" in texts
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise GraphseqError(f"{path} is damaged ({type(error).__name__}: {error}); it was left as it is") from None
    if read_polarity:
        return excluded if same_folds else []
    if POLARITY_CHECKED not in info:
        raise GraphseqError(f"{folder} was pretrained before graphseq checked corpora for polarity snippets, so "
                            f"its text may hold test sentences of any fold; run bert-pretrain again (it drops "
                            f"them) and name the new run")
    return list(range(folds)) if info[POLARITY_CHECKED] is True else []


def check_pretraining_tokenizer(folder: Path, fix: str) -> None:
    """Refuses the ``tokenizer.json`` of a ``bert-pretrain`` run that is not
    the one its model was trained with: the one its ``pretraining.json``
    recorded once it finished, else its checkpoint's (a run to continue)."""
    if (folder / WEIGHTS_FILE).is_file():
        check_tokenizer(folder, CORPUS_FILE, WEIGHTS_FILE, fix)
    elif (folder / CHECKPOINT).is_file():
        check_tokenizer(folder, CHECKPOINT, CHECKPOINT, fix)


def _load_pretraining(folder: Path, device: torch.device | str = "cpu"):
    """The model and tokenizer of a finished ``bert-pretrain`` run, the tokenizer checked to be its own."""
    check_pretraining_tokenizer(folder, "put the run's own tokenizer.json back")
    return load_pretrained(folder, device)


def _pretrain_group(ctx, out: Path, overrides: List[str]) -> None:
    """Runs ``bert-pretrain`` into ``out`` as a run of its own (continuing it
    on ``--resume``), unless it has finished there already."""
    if (out / WEIGHTS_FILE).is_file():
        return
    started = (out / "config.toml").is_file()
    if started and not (out / CHECKPOINT).is_file():
        raise GraphseqError(f"the pretraining in {out} stopped before its first checkpoint; delete that "
                            f"folder and resume, and it starts again")
    ctx.runner.run("bert-pretrain", overrides=overrides, seed=ctx.seed, device=str(ctx.device), out=out,
                   data_root=ctx.data_root, data_mirror=ctx.data_mirror, quiet=ctx.quiet, resume=started)


def _groups(groups: int, folds: int, table: str) -> List[List[int]]:
    """The ``folds`` test folds cut into ``groups`` contiguous groups."""
    if groups > folds:
        raise GraphseqError(f"{table}.groups = {groups} is more than the {folds} folds")
    return [part.tolist() for part in torch.arange(folds).tensor_split(groups)]


def _group_overrides(pretrain_set: list, part: List[int], folds: int, fold_seed: int, table: str) -> List[str]:
    """The settings of the pretraining that serves the test folds ``part``."""
    for entry in pretrain_set:
        section, _, name = entry.split("=", 1)[0].partition(".")
        key = f"{section.strip()}.{name.strip()}"
        if key in GROUP_KEYS:
            raise GraphseqError(f"{table}.pretrain_set: {key} is not allowed; bert-polarity sets "
                                f"{', '.join(GROUP_KEYS)} itself from its folds (set {table}.folds and "
                                f"{table}.fold_seed instead)")
    return list(pretrain_set) + [f"corpus.exclude_folds={part}", f"corpus.folds={folds}",
                                 f"corpus.fold_seed={fold_seed}"]


def _runs_plan(runs: list, folds: int, fold_seed: int, table: str = "pretrain") -> Dict[int, Path]:
    """Each test fold's first finished run (of ``runs``) that left its sentences
    out. A run named twice, or one that would serve no fold, is refused: it is
    a slip (another run meant), and running without it would hide that."""
    plan: Dict[int, Path] = {}
    seen: Dict[Path, str] = {}
    for name in runs:
        if not str(name).strip():
            raise GraphseqError(f"{table}.runs holds an empty path; name the --out folder of each bert-pretrain run")
        folder = Path(name)
        if folder.resolve() in seen:
            raise GraphseqError(f"{table}.runs names {seen[folder.resolve()]} twice; name each run once")
        seen[folder.resolve()] = name
        left_out = read_pretraining(folder, folds, fold_seed)
        if not left_out:
            raise GraphseqError(f"{table}.runs: {folder} serves no test fold: it may have read the sentences of "
                                f"every polarity test fold (of folds = {folds}, fold_seed = {fold_seed}); pretrain "
                                f"with corpus.exclude_folds, or leave it out")
        if all(fold in plan for fold in left_out):
            raise GraphseqError(f"{table}.runs: {folder} serves no test fold: the runs before it serve its folds "
                                f"{sorted(left_out)}; leave it out")
        for fold in left_out:
            plan.setdefault(fold, folder)
    return plan


def _check_pretrained_groups(check, *, runs: list, groups: int, folds: int, fold_seed: int,
                             pretrain_set: list, **_) -> None:
    """The finished runs, or the settings and texts of the pretrainings to
    run; leaves the folds served for bert_finetune's precheck."""
    if runs:
        plan = _runs_plan(runs, folds, fold_seed, check.section)
        for folder in dict.fromkeys(plan.values()):
            _load_pretraining(folder)  # a damaged model or tokenizer file is named now, not after plan.json
        served = set(plan)
    else:
        overrides = _group_overrides(pretrain_set, _groups(groups, folds, check.section)[0], folds, fold_seed,
                                     check.section)
        try:
            config = check.runner.checked_config("bert-pretrain", overrides)
        except GraphseqError as error:
            raise GraphseqError(f"pretrain_set: {error}") from None
        check.runner.precheck(config, check.data_root, check.data_mirror)
        served = set(range(folds))
    check.facts["bert_folds"] = (folds, served)


@stage("bert_pretrained_groups", checks={"runs": text_list, "groups": at_least(1), "folds": at_least(3),
                                         "fold_seed": between(0, MAX_SEED), "pretrain_set": text_list},
       resumes=PLAN_FILE, precheck=_check_pretrained_groups,
       applies={"groups": {"runs": ([],)}, "pretrain_set": {"runs": ([],)}},
       makes={"pretrained": "pretrained BERT models"})
def bert_pretrained_groups(ctx, *, runs: list = [], groups: int = 2, folds: int = 10, fold_seed: int = 0,
                           pretrain_set: list = []) -> None:
    """The pretrained model each test fold fine-tunes from, written to
    ``plan.json``. With ``runs`` (folders of finished ``bert-pretrain``
    runs), each test fold takes the first run that left its sentences out.
    Without, the ``folds`` test folds are cut into ``groups`` contiguous
    groups, each served by a ``bert-pretrain`` run in ``pretrain-G/`` that
    leaves out the sentences of the group's test folds, with the
    ``pretrain_set`` overrides (``"pretrain.steps=4000"``, ...). Fine-tuning
    runs a group's pretraining when it comes to the group's first fold, so
    a run of some folds pretrains only for their groups; a resumed run
    continues an unfinished pretraining."""
    if runs:
        plan, pending = _runs_plan(runs, folds, fold_seed, ctx.section), {}
    else:
        parts = _groups(groups, folds, ctx.section)
        plan = {fold: ctx.out / f"pretrain-{g}" for g, part in enumerate(parts) for fold in part}
        pending = {ctx.out / f"pretrain-{g}": (part, _group_overrides(pretrain_set, part, folds, fold_seed,
                                                                      ctx.section))
                   for g, part in enumerate(parts)}
    for folder in dict.fromkeys(plan.values()):  # a resumed run's pretrainings, before plan.json is written
        check_pretraining_tokenizer(folder, "put the run's own tokenizer.json back" if runs else
                                    f"put the run's own tokenizer.json back, or delete {folder} and resume, "
                                    f"and it pretrains again")
    if distributed.is_main():
        write_json(ctx.out / PLAN_FILE, {str(f): str(p) for f, p in sorted(plan.items())})
    ctx.pretrained = PretrainedFolds(plan, folds, fold_seed, pending)


@dataclass
class PretrainedFolds:
    """What ``bert_pretrained_groups`` hands to ``bert_finetune``: the
    pretraining folder that serves each test fold (``plan``), the folds'
    setup, and the pretrainings still to run, each with the test folds it
    leaves out and its overrides."""
    plan: Dict[int, Path]
    folds: int
    fold_seed: int
    pending: Dict[Path, Tuple[List[int], List[str]]]


@dataclass
class SentenceFold:
    train: List[List[int]]
    val: List[List[int]]
    test: List[List[int]]
    train_labels: torch.Tensor
    val_labels: torch.Tensor
    test_labels: torch.Tensor


def sentence_batch(sentences: List[List[int]], tokenizer: WordPieceTokenizer, max_len: int) -> TokenGraphs:
    return collate([pack_pair(s, None, max_len, tokenizer.cls_id, tokenizer.sep_id)[0] for s in sentences])


@torch.no_grad()
def classify(model: BertClassifier, sentences: List[List[int]], tokenizer: WordPieceTokenizer,
             device, batch_size: int = 256) -> torch.Tensor:
    predictions = []
    for start in range(0, len(sentences), batch_size):
        batch = sentence_batch(sentences[start:start + batch_size], tokenizer, model.config.max_len)
        predictions.append(model(batch.to(device)).argmax(-1).cpu())
    return torch.cat(predictions) if predictions else torch.zeros(0, dtype=torch.long)


def finetune_fold(ctx, model: BertClassifier, data: SentenceFold, tokenizer: WordPieceTokenizer, *,
                  fold: int, epochs: int, batch_size: int, lr: float, warmup: float, weight_decay: float,
                  clip: float, amp: bool, evals_per_epoch: int, max_steps: int, test: bool,
                  layer_decay: float = 1.0) -> Dict[str, Any]:
    """Fine-tunes on the fold's training sentences, keeps the weights with
    the best validation accuracy, and scores the test sentences once (when
    ``test``)."""
    per_epoch = math.ceil(len(data.train) / batch_size)
    steps = epochs * per_epoch if max_steps <= 0 else min(max_steps, epochs * per_epoch)
    max_len = model.config.max_len

    def loss_fn(model: BertClassifier, step: int):
        epoch, k = divmod(step, per_epoch)
        order = torch.randperm(len(data.train), generator=step_generator(ctx.seed, epoch, stream=fold + 1))
        ids = order[k * batch_size:(k + 1) * batch_size].tolist()
        batch = sentence_batch([data.train[i] for i in ids], tokenizer, max_len).to(ctx.device)
        logits = model(batch)
        labels = data.train_labels[ids].to(ctx.device)
        return F.cross_entropy(logits, labels), {"accuracy": float((logits.argmax(-1) == labels).float().mean())}

    def evaluate(model: BertClassifier) -> Dict[str, float]:
        predicted = classify(model, data.val, tokenizer, ctx.device)
        return {"val_accuracy": float((predicted == data.val_labels).float().mean())}

    optimizer = adamw(model, lr, weight_decay, layer_decay)
    result = train_steps(model, optimizer, loss_fn, steps=steps, out=ctx.out, device=ctx.device, resume=ctx.resume,
                         quiet=ctx.quiet, log=ctx.log, pipeline=ctx.pipeline,
                         scheduler=warmup_linear_decay(optimizer, steps, warmup), clip=clip, amp=amp,
                         evaluate=evaluate, eval_every=max(1, per_epoch // evals_per_epoch),
                         select=("val_accuracy", "max"), meta={"bert_config": asdict(model.config)},
                         desc=f"fold {fold} {ctx.out.name}")
    model.eval()
    figures = {"val_accuracy": result.best["val_accuracy"], "best_step": result.best["step"],
               "steps": result.step, "minutes": result.seconds / 60, "history": result.history}
    if test:
        figures["test_accuracy"] = float((classify(model, data.test, tokenizer, ctx.device)
                                          == data.test_labels).float().mean())
    return figures


def _chosen_folds(run_folds: list, folds: int, served, table: str = "finetune") -> List[int]:
    """The folds to fine-tune (``run_folds``, or all), each served by a
    pretraining that left its sentences out."""
    chosen = fold_list(run_folds, folds, f"{table}.run_folds") or list(range(folds))
    missing = [f for f in chosen if f not in served]
    if missing:
        raise GraphseqError(f"no pretraining left out the sentences of test fold(s) {missing}; pretrain with "
                            f"corpus.exclude_folds naming them, or let bert-polarity pretrain")
    return chosen


def _check_finetune(check, *, run_folds: list, **_) -> None:
    """The folds against the pretrainings (before they run), and the data."""
    if "bert_folds" in check.facts:  # Without a pretraining stage, the stage itself says what it needs.
        _chosen_folds(run_folds, *check.facts["bert_folds"], check.section)
    load_polarity(check.data_root, check.data_mirror)


@stage("bert_finetune", checks={"run_folds": FOLD_LIST, "epochs": at_least(1), "batch_size": at_least(1),
                                "lr": positive, "scratch_lr": non_negative, "layer_decay": between(0, 1),
                                "pool": one_of(*POOLS),
                                "warmup": between(0, 1), "weight_decay": non_negative, "clip": non_negative,
                                "evals_per_epoch": at_least(1), "max_steps": non_negative},
       resume_may_change=("run_folds",), resume_reads=(FOLDS_FILE,), precheck=_check_finetune,
       applies={"scratch_lr": {"scratch": (True,)}},
       needs={"pretrained": "pretrained BERT models"})
def bert_finetune(ctx, *, run_folds: list = [], epochs: int = 3, batch_size: int = 32, lr: float = 1e-3,
                  scratch_lr: float = 0.0, layer_decay: float = 1.0, pool: str = "cls",
                  pretrained_pooler: bool = False, warmup: float = 0.1, weight_decay: float = 0.01, clip: float = 1.0,
                  amp: bool = True, evals_per_epoch: int = 2, scratch: bool = True, test: bool = True,
                  max_steps: int = 0) -> None:
    """Fine-tunes on sentence polarity, fold by fold (``run_folds``, or
    every fold): from the pretrained weights and, with ``scratch``, the
    same model and tokenizer from random weights (at ``scratch_lr``, 0 for
    ``lr``: a model from scratch may want another rate). With
    ``layer_decay`` < 1 the pretrained variant's encoder layers train at
    decaying rates below its head's (:func:`adamw`; 0 trains the head
    alone); the model from scratch has nothing to keep and trains every
    layer at its rate. The classifier reads the ``[CLS]`` node (``pool =
    "cls"``) or the mean of the sentence's nodes (``"mean"``);
    ``pretrained_pooler`` starts its pooler
    from the one next-sentence prediction trained (else afresh). Each
    trains for ``epochs`` epochs (``max_steps`` > 0 caps them, for smoke
    tests), AdamW with warm-up and linear decay (mixed precision on CUDA
    with ``amp``), is scored on its validation fold ``evals_per_epoch``
    times an epoch, keeps its best weights, and reads its test fold once
    (``test = false`` leaves the test folds unread, for choosing settings).
    ``folds.json`` holds the metrics of every finished fold; a resumed run
    keeps them and runs the rest (an unfinished fold continues from its
    checkpoint)."""
    pretrained: PretrainedFolds = ctx.require("pretrained", "bert_finetune")
    folds, fold_seed, pending = pretrained.folds, pretrained.fold_seed, pretrained.pending
    chosen = _chosen_folds(run_folds, folds, pretrained.plan, ctx.section)
    sentences, labels = load_polarity(ctx.data_root, ctx.data_mirror)
    labels = torch.tensor(labels)
    variants = ["pretrained", "scratch"] if scratch else ["pretrained"]
    finished = read_folds(ctx.out / FOLDS_FILE, ("variant", "val_accuracy")) if ctx.resume else []
    done = {(r["fold"], r["variant"]): r for r in finished}
    # Folds outside run_folds stay recorded; only the chosen ones are reported.
    loaded: Dict[Path, Any] = {}
    for fold in chosen:
        if all((fold, v) in done for v in variants):
            ctx.log.info(f"fold {fold}: kept from {FOLDS_FILE}")
            continue
        source = pretrained.plan[fold]
        if source in pending:
            part, overrides = pending.pop(source)
            ctx.log.info(f"pretraining in {source}, leaving out the sentences of test folds {part}")
            _pretrain_group(ctx, source, overrides)
        if source not in loaded:
            loaded = {source: _load_pretraining(source, ctx.device)}  # one pretraining in memory at a time
        base, tokenizer = loaded[source]
        train, val, test_ids = cv_folds(len(sentences), folds, fold_seed)[fold]
        encode = lambda ids: tokenizer.encode_batch([sentences[i] for i in ids.tolist()])  # noqa: E731
        data = SentenceFold(encode(train), encode(val), encode(test_ids), labels[train], labels[val],
                            labels[test_ids])
        for variant in variants:
            if (fold, variant) in done:
                continue
            out = ctx.out / f"fold-{fold}" / variant
            out.mkdir(parents=True, exist_ok=True)
            torch.manual_seed(ctx.seed * 1000 + fold)  # the same classifier layer for both variants
            model = (BertClassifier.from_pretraining(base, pooler=pretrained_pooler, pool=pool)
                     if variant == "pretrained" else BertClassifier(base.config, pool=pool)).to(ctx.device)
            sub = replace(ctx, out=out, resume=ctx.resume and (out / CHECKPOINT).is_file())
            result = finetune_fold(sub, model, data, tokenizer, fold=fold, epochs=epochs, batch_size=batch_size,
                                   lr=lr if variant == "pretrained" or scratch_lr <= 0 else scratch_lr,
                                   warmup=warmup, weight_decay=weight_decay, clip=clip, amp=amp,
                                   evals_per_epoch=evals_per_epoch, max_steps=max_steps, test=test,
                                   layer_decay=layer_decay if variant == "pretrained" else 1.0)
            result.update(fold=fold, variant=variant, pretraining=str(source))
            done[(fold, variant)] = result
            if distributed.is_main():
                write_json(ctx.out / FOLDS_FILE, list(done.values()))
                # folds.json holds what the fold gave; its checkpoint is no longer needed.
                (out / CHECKPOINT).unlink(missing_ok=True)
            ctx.log.info(f"fold {fold} {variant}: validation {result['val_accuracy']:.4f}"
                         + (f", test {result['test_accuracy']:.4f}" if test else "")
                         + f" (best at step {result['best_step']})")
    if distributed.is_main():
        write_json(ctx.out / FOLDS_FILE, list(done.values()))
    _report(ctx, {v: [done[(f, v)] for f in chosen] for v in variants}, test)


def _mean_std(values: List[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return mean, std


def _report(ctx, results: Dict[str, List[Dict[str, Any]]], test: bool) -> None:
    splits = ("val", "test") if test else ("val",)
    for variant, rows in results.items():
        for split in splits:
            mean, std = _mean_std([r[f"{split}_accuracy"] for r in rows])
            ctx.metrics[f"{variant}_{split}_accuracy"], ctx.metrics[f"{variant}_{split}_std"] = mean, std
        ctx.metrics[f"{variant}_{splits[-1]}_by_fold"] = [r[f"{splits[-1]}_accuracy"] for r in rows]
        ctx.metrics[f"{variant}_minutes"] = sum(r["minutes"] for r in rows)
    if "scratch" in results:
        split = splits[-1]
        gains = [p[f"{split}_accuracy"] - s[f"{split}_accuracy"]
                 for p, s in zip(results["pretrained"], results["scratch"])]
        ctx.metrics[f"gain_{split}_accuracy"], ctx.metrics["gain_std"] = _mean_std(gains)
    ctx.metrics["folds"] = [r["fold"] for r in results["pretrained"]]
    if distributed.is_main():
        _plot_folds(results, ctx.out / "folds.png", ctx.pipeline, splits[-1])
    ctx.log.info(", ".join(f"{v}: {splits[-1]} {ctx.metrics[f'{v}_{splits[-1]}_accuracy']:.4f} ± "
                           f"{ctx.metrics[f'{v}_{splits[-1]}_std']:.4f}" for v in results)
                 + f" over {len(results['pretrained'])} fold(s)")


def _plot_folds(results: Dict[str, List[Dict[str, Any]]], path: Path, title: str, split: str) -> None:
    """Validation accuracy during fine-tuning (one line per fold and variant)
    and each fold's final accuracy (test, or validation without test)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(13, 4.5), dpi=100)
    FigureCanvasAgg(figure)
    curves, bars = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    colours = {"pretrained": "tab:blue", "scratch": "tab:orange"}
    for variant, rows in results.items():
        for i, row in enumerate(rows):
            points = [(h["step"], h["val_accuracy"]) for h in row.get("history", []) if "val_accuracy" in h]
            if points:
                curves.plot(*zip(*points), color=colours.get(variant), alpha=0.6,
                            label=variant if i == 0 else None)
        offset = -0.2 if variant == "pretrained" else 0.2
        bars.bar([r["fold"] + offset for r in rows], [r[f"{split}_accuracy"] for r in rows], width=0.4,
                 color=colours.get(variant), label=variant)
    curves.set_xlabel("fine-tuning step")
    curves.set_ylabel("validation accuracy")
    curves.grid(alpha=0.3)
    curves.legend()
    bars.set_xlabel("fold")
    bars.set_ylabel(f"{'test' if split == 'test' else 'validation'} accuracy")
    low = min(r[f"{split}_accuracy"] for rows in results.values() for r in rows)
    bars.set_ylim(max(0.0, low - 0.05), 1.0)
    bars.legend()
    figure.suptitle(title)
    write_png(figure, path)
