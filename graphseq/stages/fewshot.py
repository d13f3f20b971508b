"""Stages of the few-shot pipelines (``fewshot-omniglot-*``,
``fewshot-miniimagenet-*``): load a dataset's splits, build the few-shot GNN,
train it on batches of episodes by steps (resumable, with a validation
estimate at intervals), and test it on many episodes with a 95% interval.
The oracle an active model asks is :mod:`.fewshot_oracle`.

Several trainings can share one run (the semi-supervised and active
comparisons): each ``train_episodes`` / ``test_episodes`` section then has a
``name``, which suffixes its checkpoint, curves and metrics.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from .. import distributed
from ..active.store import STORE_NAME, LabelStore
from ..checks import Domain, at_least, each, non_negative, one_of, positive, probability
from ..data.episodes import EpisodeSampler, FewShotClasses
from ..data.miniimagenet import SPLITS as MINIIMAGENET_SPLITS, find_miniimagenet, load_miniimagenet, read_split
from ..data.omniglot import load_omniglot, omniglot_split
from ..errors import GraphseqError, draw_bars, plural
from ..io import first_sentence, load_checkpoint, read_json, write_json
from ..models.fewshot import EMBEDDINGS, QUERY_MODES, UNKNOWN_LABELS, FewShotConfig, FewShotModel
from ..training import CHECKPOINT, train_steps
from .active import EXISTING_FILE
from .registry import stage, stage_params

# A training's name suffixes its files and metrics: letters, digits, underscores.
NAME = Domain("empty, or letters, digits and underscores", lambda v: v == "" or v.replace("_", "").isalnum())

# Validation and test episodes come from generators with these seeds (plus
# the run's seed), the same for every model of a run, so that comparisons
# are paired: the same episodes for each model.
VALIDATION_SEED, TEST_SEED = 10_000_019, 20_000_003


@dataclass
class FewShotData:
    """The classes of each split and the shape of the episodes."""

    name: str
    splits: Dict[str, FewShotClasses]
    ways: int
    shots: int
    unlabelled: int

    def sampler(self, split: str, labelled_only: bool = False) -> EpisodeSampler:
        """Episodes of ``split``; ``labelled_only`` leaves out the unlabelled
        images (the same draws, those nodes removed)."""
        return EpisodeSampler(self.splits[split], self.ways, self.shots,
                              0 if labelled_only else self.unlabelled)


def _note_ways(check, *, ways: int, unlabelled: int = 0, val_characters: int = 1, **_) -> None:
    check.facts["fewshot_ways"] = ways  # for fewshot_oracle's precheck of a labels file
    check.facts["fewshot_unlabelled"] = unlabelled  # for fewshot_gnn's precheck of an active model
    check.facts["fewshot_validation"] = val_characters > 0  # for train_episodes' precheck of its eval_* keys
    check.facts["fewshot_data_table"] = check.section  # which the refusals of later sections name


def _check_episodes(splits: Dict[str, FewShotClasses], ways: int, shots: int, unlabelled: int,
                    classes: str) -> None:
    """Refuses, as the data is read (before a model is built for them),
    episodes a split cannot give, naming the settings."""
    for name, split in splits.items():
        if ways > split.num_classes:
            raise GraphseqError(f"ways = {ways} needs {ways} classes, but the {name} split has "
                                f"{split.num_classes} ({classes}); lower ways, or give the split more characters")
    per_class = min(split.per_class for split in splits.values())
    if shots + unlabelled + 1 > per_class:
        raise GraphseqError(f"shots = {shots} + unlabelled = {unlabelled} + 1 query need {shots + unlabelled + 1} "
                            f"images of a class, but a class has {per_class}; lower shots or unlabelled")


@stage("omniglot", checks={"ways": at_least(2), "shots": at_least(1), "unlabelled": at_least(0),
                           "train_characters": at_least(1), "val_characters": at_least(0),
                           "split_seed": at_least(0), "size": at_least(8)}, precheck=_note_ways,
       makes={"data": "a few-shot dataset"})
def omniglot(ctx, *, ways: int = 5, shots: int = 1, unlabelled: int = 0, train_characters: int = 1200,
             val_characters: int = 100, split_seed: int = 0, size: int = 28, rotations: bool = True) -> None:
    """Omniglot episodes: ``ways`` classes, ``shots`` labelled and
    ``unlabelled`` unlabelled images of each, one query. Of a seeded split of
    the characters, ``train_characters`` are for training (the last
    ``val_characters`` of them held out for validation) and the rest for
    test; with ``rotations`` each quarter turn of a character is a class."""
    images = load_omniglot(ctx.data_root, ctx.data_mirror, size=size, log=ctx.log)
    characters = len(images.characters)
    if not train_characters < characters:
        raise GraphseqError(f"omniglot: train_characters = {train_characters} must be below the {characters:,} "
                            f"characters found, so that some are left for test")
    if not val_characters < train_characters:
        raise GraphseqError(f"omniglot: val_characters = {val_characters} must be below train_characters = "
                            f"{train_characters} (validation holds out some of the training characters)")
    split = omniglot_split(characters, train_characters, val_characters, split_seed)
    splits = {name: images.classes(index, rotations) for name, index in split.items()}
    if val_characters == 0:
        splits.pop("val")
    _check_episodes(splits, ways, shots, unlabelled, "with rotations, 4 classes a character" if rotations else
                    "one class a character")
    ctx.data = FewShotData("omniglot", splits, ways, shots, unlabelled)
    ctx.log.info("omniglot: " + ", ".join(f"{name} {len(split[name])} characters = {c.num_classes} classes"
                                          for name, c in splits.items())
                 + f"; {ways}-way {shots}-shot" + (f", {unlabelled} unlabelled per class" if unlabelled else ""))


def _check_miniimagenet(check, *, ways: int, shots: int, unlabelled: int, **_) -> None:
    """The classes and images each split's CSV lists, against the episodes,
    before a run writes and before any image is decoded and cached."""
    _note_ways(check, ways=ways, unlabelled=unlabelled)
    folder = find_miniimagenet(check.data_root, check.data_mirror)
    for name in MINIIMAGENET_SPLITS:
        path = folder / f"{name}.csv"
        classes = read_split(path)
        if ways > len(classes):
            raise GraphseqError(f"ways = {ways} needs {ways} classes, but the {name} split has {len(classes)} "
                                f"({path}); lower ways")
        per_class = min(len(files) for files in classes.values())
        if shots + unlabelled + 1 > per_class:
            raise GraphseqError(f"shots = {shots} + unlabelled = {unlabelled} + 1 query need "
                                f"{shots + unlabelled + 1} images of a class, but a class of the {name} split "
                                f"has {per_class} ({path}); lower shots or unlabelled")


@stage("miniimagenet", checks={"ways": at_least(2), "shots": at_least(1), "unlabelled": at_least(0),
                               "size": at_least(8)}, precheck=_check_miniimagenet,
       makes={"data": "a few-shot dataset"})
def miniimagenet(ctx, *, ways: int = 5, shots: int = 1, unlabelled: int = 0, size: int = 84) -> None:
    """Mini-ImageNet episodes from the Ravi & Larochelle splits (64 training,
    16 validation and 20 test classes of 600 images)."""
    splits = {name: load_miniimagenet(ctx.data_root, ctx.data_mirror, name, size, ctx.log)
              for name in ("train", "val", "test")}  # their CSVs checked against the episodes by the precheck
    ctx.data = FewShotData("miniimagenet", splits, ways, shots, unlabelled)
    ctx.log.info("mini-ImageNet: " + ", ".join(f"{name} {c.num_classes} classes x {c.per_class}"
                                               for name, c in splits.items())
                 + f"; {ways}-way {shots}-shot" + (f", {unlabelled} unlabelled per class" if unlabelled else ""))


def _note_model(check, *, active: bool, **_) -> None:
    if active and check.facts.get("fewshot_unlabelled", 1) < 1:
        data = check.facts.get("fewshot_data_table", "data")
        raise GraphseqError(f"{check.section}.active: an active model asks for the label of an unlabelled "
                            f"image, and {data}.unlabelled = 0; set {data}.unlabelled to at least 1")
    check.facts["fewshot_active"] = active  # for fewshot_oracle's precheck
    check.facts["fewshot_model_table"] = check.section  # which the refusals of later sections name


@stage("fewshot_gnn", checks={"embedding": one_of("", *EMBEDDINGS), "embedding_dim": at_least(0),
                              "unknown_label": one_of(*UNKNOWN_LABELS), "num_layers": at_least(1),
                              "growth": at_least(1), "metric_ratios": each(positive),
                              "metric_width": at_least(0), "last_dropout": probability},
       precheck=_note_model,
       makes={"model": "a few-shot model"}, needs={"data": "a few-shot dataset"})
def fewshot_gnn(ctx, *, embedding: str = "", embedding_dim: int = 0, unknown_label: str = "zeros",
                num_layers: int = 2, growth: int = 48, metric_ratios: Sequence[float] = (2.0, 1.5, 1.0, 1.0),
                metric_width: int = 0, last_norm: bool = True, last_dropout: float = 0.3,
                active: bool = False) -> None:
    """The few-shot GNN (embedding CNN, blocks of learned adjacency +
    identity, class scores at the query). ``embedding`` defaults to the
    dataset's CNN; ``unknown_label`` is ``zeros`` (the authors' code) or
    ``uniform`` (the paper); ``active`` adds the query head."""
    data = ctx.require("data", "fewshot_gnn")
    if active and data.unlabelled < 1:  # (a stage called by hand, without the precheck)
        raise GraphseqError("an active model asks for the label of an unlabelled image: "
                            "give the data at least 1 unlabelled image per class")
    config = FewShotConfig(num_ways=data.ways, embedding=embedding or data.name, embedding_dim=embedding_dim,
                           unknown_label=unknown_label, num_layers=num_layers, growth=growth,
                           metric_ratios=[float(r) for r in metric_ratios], metric_width=metric_width,
                           last_norm=last_norm, last_dropout=last_dropout, active=active)
    try:
        ctx.model = FewShotModel(config).to(ctx.device)
    except ValueError as error:
        raise GraphseqError(f"fewshot_gnn: {error}") from None
    size = sum(p.numel() for p in ctx.model.parameters())
    ctx.log.info(f"model: {config.embedding} CNN -> {ctx.model.embedding_dim}, {num_layers} GNN blocks "
                 f"+ the last layer{', a query head' if active else ''}; {size:,} parameters")


def step_seed(seed: int, step: int, rank: int = 0) -> int:
    """The seed of one step's episodes: a resumed run draws the same ones."""
    return int(np.random.SeedSequence([seed, step, rank]).generate_state(1, dtype=np.uint64)[0] >> 1)


def name_suffix(name: str) -> str:
    return f"_{name}" if name else ""


@torch.no_grad()
def embed_images(model: FewShotModel, classes: FewShotClasses, device: torch.device,
                 chunk: int = 1000) -> Tensor:
    """The CNN's embedding ``[classes, per_class, dim]`` of every image of a
    split. In eval mode an image's embedding does not depend on the others
    in its batch, so many episodes can share one pass over the split."""
    images = classes.images.flatten(0, 1)  # [classes * per_class, channels, height, width]
    parts = [model.embedding(classes.normalize(images[i:i + chunk].to(device)))
             for i in range(0, images.size(0), chunk)]
    return torch.cat(parts).view(classes.num_classes, classes.per_class, -1)


@torch.no_grad()
def accuracy_on(model: FewShotModel, sampler: EpisodeSampler, episodes: int, batch_size: int, seed: int,
                device: torch.device, query: str = "learned", progress: str = "") -> Tuple[int, int]:
    """Correct answers and episodes over ``episodes`` episodes drawn from a
    generator seeded by ``seed``, in batches of ``batch_size``. In eval mode
    each image of the split is embedded once (when the episodes hold more
    images than the split), not once per episode it appears in. A bar named
    ``progress`` counts the episodes where a person watches it (none without
    a name)."""
    generator = torch.Generator().manual_seed(seed)
    classes = sampler.classes
    table = None
    if not model.training and episodes * sampler.episode_size > classes.num_classes * classes.per_class:
        table = embed_images(model, classes, device)
    correct = total = 0
    with tqdm(total=episodes, desc=progress, unit="episode", disable=not (progress and draw_bars()),
              leave=False) as bar:
        while total < episodes:
            size = min(batch_size, episodes - total)
            batch = sampler.sample(size, generator, device)
            embedding = None if table is None else table[batch.image[:, 0], batch.image[:, 1]]
            logits = model(batch, query=query, embedding=embedding) if model.config.active \
                else model(batch, embedding=embedding)
            correct += int((logits.argmax(dim=1) == batch.target).sum())
            total += size
            bar.update(size)
    return correct, total


def wilson_interval(correct: int, total: int, z: float = 1.959964) -> Tuple[float, float]:
    """The 95% Wilson score interval of a proportion (sound near 0 and 1)."""
    if total == 0:
        return math.nan, math.nan
    p = correct / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return centre - half, centre + half


def _note_training(check, *, name: str, init: str = "", query: str = "learned", **settings) -> None:
    # For fewshot_oracle's precheck: each training's name, and whether the model it trains (the
    # latest one built) has a query head.
    active, model = check.facts.get("fewshot_active", False), check.facts.get("fewshot_model_table", "model")
    check.facts.setdefault("fewshot_trainings", {})[name] = active
    check.facts.setdefault("fewshot_training_models", {})[name] = model
    if "fewshot_active" in check.facts and not active and query != "learned":
        raise GraphseqError(f"{check.section}.query = {query!r} has no use when {model}.active = false: the query "
                            f"applies only to an active model ({model}.active = true); leave it out")
    if not check.facts.get("fewshot_validation", True):
        # The precheck sees the settings with their defaults: a value other than the default was set.
        defaults, data = stage_params(train_episodes), check.facts.get("fewshot_data_table", "data")
        for key in ("eval_every", "eval_episodes", "eval_batch_size"):
            if settings.get(key, defaults[key]) != defaults[key]:
                raise GraphseqError(f"{check.section}.{key} = {settings[key]!r} has no use when "
                                    f"{data}.val_characters = 0: it applies only with validation characters "
                                    f"({data}.val_characters > 0); leave it out")
    if init:
        _init_weights(Path(init))  # a damaged file is refused before the run folder is written


@stage("train_episodes", checks={"steps": at_least(1), "batch_size": at_least(1), "lr": positive,
                                  "halve_every": at_least(0), "weight_decay": non_negative,
                                  "query": one_of(*QUERY_MODES), "eval_every": at_least(0),
                                  "eval_episodes": at_least(0), "eval_batch_size": at_least(1),
                                  "checkpoint_every": at_least(0), "name": NAME, "init": EXISTING_FILE,
                                  "per_support": at_least(1)},
        resumes=CHECKPOINT, resume_may_change=("steps",), resume_reads=("checkpoint-*.pt",),
        precheck=_note_training,
        applies={"eval_every": {"eval_episodes": positive}, "eval_batch_size": {"eval_episodes": positive}},
       makes={"trained": "a trained few-shot model"}, needs={"data": "a few-shot dataset", "model": "a few-shot model"})
def train_episodes(ctx, *, steps: int = 100000, batch_size: int = 300, lr: float = 1e-3,
                   halve_every: int = 10000, weight_decay: float = 0.0, labelled_only: bool = False,
                   query: str = "learned", eval_every: int = 2000, eval_episodes: int = 2000,
                   eval_batch_size: int = 100, checkpoint_every: int = 500, name: str = "",
                   init: str = "", per_support: int = 1) -> None:
    """Trains the model on ``batch_size`` episodes a step for ``steps``
    steps with Adam at ``lr``, halved every ``halve_every`` steps (the
    authors' schedule). Every ``eval_every`` steps (and at the end) the
    accuracy on ``eval_episodes`` validation episodes (the same ones each
    time) is estimated, and the weights with the best one are kept;
    ``eval_episodes = 0`` estimates none (``eval_every`` and
    ``eval_batch_size`` then have no use).

    ``labelled_only`` trains without the unlabelled images (the baseline of
    the semi-supervised comparison); ``query`` is how an active model picks
    the image to ask about (``learned`` or ``random``). With ``name``, the
    checkpoint is ``checkpoint-NAME.pt`` and the metrics end in ``_NAME``.
    A checkpoint is written every ``checkpoint_every`` steps; ``--resume``
    continues from it.

    ``init`` starts from the kept weights of another run's checkpoint (a
    shorter way to a 5-shot model is the 1-shot one): every tensor of the
    same name and shape is copied, the rest (say, the label slots of a model
    with more ways) keep their fresh initialisation, and the log says which.
    Without ``init``, a ``start_run`` section before this one gives the run
    to start from (its ``checkpoint.pt``), where the pipeline has one.

    ``per_support`` > 1 lets that many episodes of a batch share their
    support set and differ in the query: the CNN embeds each distinct image
    once, so a step gives ``per_support`` losses for little more than the
    cost of one (the paper draws every episode on its own: ``1``). Each
    episode's graph, and so the model, is unchanged; only the draw is.
    """
    data, model = ctx.require("data", "train_episodes"), ctx.require("model", "train_episodes")
    if ctx.resume:
        _refuse_changing_an_asking_model(ctx, name, steps)
    if labelled_only and model.config.active:
        raise GraphseqError("an active model needs the unlabelled images; labelled_only must be false")
    train = data.sampler("train", labelled_only)
    val = data.sampler("val", labelled_only) if "val" in data.splits else None
    world, rank = distributed.world_size(), distributed.rank()
    if batch_size % world:
        raise GraphseqError(f"batch_size ({batch_size}) must be a multiple of the number of processes ({world})")
    local_batch = batch_size // world
    try:
        train.check_per_support(local_batch, per_support)
    except GraphseqError as error:
        raise GraphseqError(f"train_episodes.per_support: {error}") from None
    kwargs = {"query": query} if model.config.active else {}

    def loss_fn(module: FewShotModel, step: int):
        generator = torch.Generator().manual_seed(step_seed(ctx.seed, step, rank))
        batch = train.sample(local_batch, generator, ctx.device, per_support)
        logits = module(batch, **kwargs)
        loss = F.cross_entropy(logits, batch.target)
        return loss, {"accuracy": float((logits.argmax(dim=1) == batch.target).float().mean())}

    def evaluate(module: FewShotModel) -> Dict[str, float]:
        # Every rank scores the same episodes: the metric needs no gathering.
        correct, total = accuracy_on(module, val, eval_episodes, eval_batch_size,
                                     ctx.seed + VALIDATION_SEED, ctx.device, query)
        return {"val_accuracy": correct / total}

    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=halve_every, gamma=0.5) \
        if halve_every > 0 else None
    checkpoint = f"checkpoint{'-' + name if name else ''}.pt"
    # A run of several trainings may have stopped before this one began.
    resume = ctx.resume and ((ctx.out / checkpoint).is_file() or not name)
    init = init or (str(ctx.start / CHECKPOINT) if ctx.start is not None else "")
    if init and not (resume and (ctx.out / checkpoint).is_file()):
        _initialise(model, Path(init), ctx.log)
    episodes = train.episode_size
    ctx.log.info(f"training{' ' + name if name else ''}: {plural(steps, 'step')} of {plural(batch_size, 'episode')} "
                 f"({episodes} nodes each{', labelled only' if labelled_only else ''}"
                 + (f", {per_support} to a support set" if per_support > 1 else "") + f"), Adam lr {lr}"
                 + (f" halved every {halve_every} steps" if halve_every > 0 else ""))
    result = train_steps(model, optimizer, loss_fn, steps=steps, out=ctx.out, device=ctx.device, resume=resume,
                         quiet=ctx.quiet, log=ctx.log, pipeline=ctx.pipeline, scheduler=scheduler,
                         evaluate=evaluate if val is not None and eval_episodes > 0 else None,
                         eval_every=eval_every,
                         select=("val_accuracy", "max") if val is not None and eval_episodes > 0 else None,
                         checkpoint_every=checkpoint_every,
                         meta={"fewshot_config": dataclasses.asdict(model.config)},
                         desc=f"{ctx.pipeline}{' ' + name if name else ''}", checkpoint=checkpoint,
                         curves=f"curves{'-' + name if name else ''}.png")
    if ctx.trained is None:
        ctx.trained = {}
    ctx.trained[name] = model  # Later stages may ask for it by name (the oracle).
    suffix = name_suffix(name)
    ctx.metrics[f"steps{suffix}"] = result.step
    ctx.metrics[f"train_minutes{suffix}"] = result.seconds / 60
    ctx.metrics[f"train_cpu_minutes{suffix}"] = result.cpu_seconds / 60  # the budget the issue counts
    if "val_accuracy" in result.best:
        ctx.metrics[f"val_accuracy{suffix}"] = result.best["val_accuracy"]
        ctx.metrics[f"best_step{suffix}"] = int(result.best["step"])


def _init_weights(path: Path) -> Dict[str, Tensor]:
    """The kept (else last) weights of the training checkpoint ``path``."""
    try:
        saved = load_checkpoint(path)
        weights = saved.get("best_model") or saved["model"]
        if not all(isinstance(k, str) and isinstance(v, Tensor) for k, v in weights.items()):
            raise TypeError("its weights are not named tensors")
    except GraphseqError as error:  # A damaged file, named by load_checkpoint.
        raise GraphseqError(f"train_episodes.init: {error}") from None
    except Exception as error:  # A checkpoint of something else: name it, in one line.
        raise GraphseqError(f"train_episodes.init: cannot read weights from {path}: "
                            f"{first_sentence(error)}") from None
    return weights


def _initialise(model: FewShotModel, path: Path, log) -> None:
    """Copies the tensors of ``path``'s kept (else last) weights that match
    ``model``'s by name and shape."""
    weights = _init_weights(path)
    own = model.state_dict()
    copied = {k: v for k, v in weights.items() if k in own and own[k].shape == v.shape}
    if not copied:
        raise GraphseqError(f"train_episodes.init: no tensor of {path} fits this model")
    own.update(copied)
    model.load_state_dict(own)
    fresh = sorted(set(own) - set(copied))
    # Named by their modules, three levels deep at most (gnn.convs.0).
    modules = sorted({".".join(k.split(".")[:min(3, k.count("."))]) for k in fresh})
    log.info(f"initialised {len(copied)} of {len(own)} tensors from {path}"
             + (f"; {len(fresh)} fresh (other shapes) in {', '.join(modules)}" if fresh else ""))


def _check_queries(check, *, queries: List[str], **_) -> None:
    if "fewshot_active" in check.facts and not check.facts["fewshot_active"] and list(queries) != ["learned"]:
        model = check.facts.get("fewshot_model_table", "model")
        raise GraphseqError(f"{check.section}.queries = {list(queries)!r} has no use when {model}.active = false: "
                            f"the queries apply only to an active model ({model}.active = true); leave it out")


@stage("test_episodes", checks={"episodes": at_least(1), "batch_size": at_least(1),
                                 "queries": each(one_of(*QUERY_MODES), distinct=True), "name": NAME},
        resume_may_change=("episodes", "batch_size"), resume_reads=("test*.json",), precheck=_check_queries,
       needs={"data": "a few-shot dataset", "model": "a few-shot model"})
def test_episodes(ctx, *, episodes: int = 30000, batch_size: int = 100, labelled_only: bool = False,
                  queries: List[str] = ("learned",), name: str = "") -> None:
    """Tests the model on ``episodes`` episodes of the test classes (the same
    episodes for every model of a run) and records the accuracy with its 95%
    Wilson interval: ``test_accuracy``, ``test_ci95_low``, ``test_ci95_high``
    (suffixed with ``_NAME``; for an active model tested with several
    ``queries``, or without a name, also with the query: ``_learned``,
    ``_random``)."""
    data, model = ctx.require("data", "test_episodes"), ctx.require("model", "test_episodes")
    sampler = data.sampler("test", labelled_only)
    modes = list(queries) if model.config.active else ["learned"]
    # A resumed run whose model is unchanged reuses the metrics of the test it already ran.
    record = ctx.out / f"test{'-' + name if name else ''}.json"
    settings = {"weights": weights_digest(model), "episodes": episodes, "labelled_only": labelled_only,
                "seed": ctx.seed, "ways": data.ways, "shots": data.shots, "unlabelled": data.unlabelled}
    done = {}
    if ctx.resume and record.is_file():
        stored = read_json(record)
        if isinstance(stored, dict) and stored.get("settings") == settings:
            done = stored["results"]
    model.eval()
    results = {}
    for mode in modes:
        # An active model's metrics name the query when there are several, or no name.
        key = name_suffix(name) + (f"_{mode}" if model.config.active and (len(modes) > 1 or not name) else "")
        if key in done:
            correct, total = done[key]
        else:
            correct, total = accuracy_on(model, sampler, episodes, batch_size, ctx.seed + TEST_SEED,
                                         ctx.device, mode,
                                         progress="" if ctx.quiet or not distributed.is_main()
                                         else f"test{key.replace('_', ' ')}")
        low, high = wilson_interval(correct, total)
        results[key] = (correct, total)
        ctx.metrics.update({f"test_accuracy{key}": correct / total, f"test_ci95_low{key}": low,
                            f"test_ci95_high{key}": high, f"test_episodes{key}": total})
        ctx.log.info(f"test{key.replace('_', ' ')}: accuracy {correct / total:.4f} "
                     f"(95% interval {low:.4f} - {high:.4f}) on {plural(total, 'episode')} of "
                     f"{data.ways}-way {data.shots}-shot"
                     + ("" if labelled_only or not data.unlabelled else f" + {data.unlabelled} unlabelled"))
    model.train()
    if distributed.is_main():
        write_json(record, {"settings": settings, "results": results})


def weights_digest(model: torch.nn.Module) -> str:
    """A digest of a model's weights and buffers: equal digests, equal model."""
    digest = hashlib.sha256()
    for key, tensor in model.state_dict().items():
        digest.update(key.encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


# Which image the oracle was asked about in each episode, beside labels.sqlite.
ORACLE_RECORD = "oracle-images.json"


def read_oracle_record(path: Path) -> Dict:
    record = read_json(path)
    if not (isinstance(record, dict) and isinstance(record.get("asked"), list)
            and isinstance(record.get("steps"), int) and {"training", "query"} <= set(record)):
        raise GraphseqError(f"{path} is no record of the images the oracle was asked about; it was left as it is")
    return record


def _refuse_changing_an_asking_model(ctx, name: str, steps: int) -> None:
    """A resumed training whose model the oracle's stored answers were given
    to may not train further: the model would then ask about other images."""
    path = ctx.out / ORACLE_RECORD
    if not path.is_file() or not (ctx.out / STORE_NAME).is_file():
        return
    record = read_oracle_record(path)
    if record["training"] != name or record["steps"] == steps:
        return
    with LabelStore(ctx.out / STORE_NAME, read_only=True) as store:
        answered = len(store.answers(record["query"]))
    if answered:
        raise GraphseqError(f"train_episodes{' ' + name if name else ''}: steps = {steps}, but {store.path} "
                            f"holds {answered} oracle answers about the images the model of {record['steps']} "
                            f"steps asked for, and a longer training would ask about others; keep steps = "
                            f"{record['steps']}, or train longer in a new --out")
