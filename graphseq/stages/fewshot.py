"""Stages of the few-shot pipelines (``fewshot-omniglot-*``,
``fewshot-miniimagenet-*``): load a dataset's splits, build the few-shot GNN,
train it on batches of episodes by steps (resumable, with a validation
estimate at intervals), and test it on many episodes with a 95% interval.

Several trainings can share one run (the semi-supervised and active
comparisons): each ``train_episodes`` / ``test_episodes`` section then has a
``name``, which suffixes its checkpoint, curves and metrics.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data
from tqdm import tqdm

from .. import distributed
from ..checks import Domain, at_least, each, non_negative, one_of, positive, probability
from ..data.episodes import EpisodeSampler, FewShotClasses
from ..data.miniimagenet import SPLITS as MINIIMAGENET_SPLITS, find_miniimagenet, load_miniimagenet, read_split
from ..data.omniglot import load_omniglot, omniglot_split
from ..errors import GraphseqError, draw_bars, plural
from ..active.loop import store_answer, undo_answer
from ..active.oracles import QUIT, UNDO, FileOracle, Guess, PictureRow, Question
from ..active.store import STORE_NAME, LabelStore
from ..io import first_sentence, load_checkpoint, read_json, write_json
from ..models.fewshot import EMBEDDINGS, QUERY_MODES, UNKNOWN_LABELS, FewShotConfig, FewShotModel
from ..training import CHECKPOINT, train_steps
from ..pictures import image_blocks, side_by_side, terminal_width
from .active import EXISTING_FILE, ORACLES, announcer, check_person, closing, make_oracle
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


def _suffix(name: str) -> str:
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
    suffix = _suffix(name)
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
        key = _suffix(name) + (f"_{mode}" if model.config.active and (len(modes) > 1 or not name) else "")
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


# --------------------------------------------------------------------------- #
# Asking a person (or a simulated or file oracle)
# --------------------------------------------------------------------------- #

ORACLE_SEED = 30_000_001
# Which image the oracle was asked about in each episode, beside labels.sqlite.
ORACLE_RECORD = "oracle-images.json"
# The columns of a --labels file: an episode, counted from 0 (the prompt's "item"), and its class number.
LABELS_COLUMNS = ("episode", "class")


def oracle_episodes(sampler: EpisodeSampler, episodes: int, seed: int, device: torch.device) -> Data:
    """``episodes`` episodes as one batch, episode ``e`` drawn from a
    generator of its own (seeded by ``seed`` and ``e``): episode ``e`` is
    the same however many there are, so a resumed run that asks about more
    episodes only adds some."""
    parts = [sampler.sample(1, torch.Generator().manual_seed(step_seed(seed, e))) for e in range(episodes)]
    size = sampler.episode_size
    fields = ("x", "y", "labelled", "query", "target", "classes", "image")
    return Data(**{key: torch.cat([part[key] for part in parts]).to(device) for key in fields},
                edge_index=sampler.edges(episodes).to(device),
                batch=torch.arange(episodes, device=device).repeat_interleave(size),
                ptr=torch.arange(episodes + 1, device=device) * size, num_nodes=episodes * size)


def _asking(model: FewShotModel, batch: Data, query: str, answers: Tensor, seed: int) -> Tensor:
    """The model's answers with the oracle's answers written in; a random
    query chooses the same images at every call (a seeded generator, the
    global one left as it was)."""
    devices = [batch.x.device] if batch.x.device.type == "cuda" else []
    with torch.no_grad(), torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        return model(batch, query=query, answers=answers)


def _read_record(path: Path) -> Dict:
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
    record = _read_record(path)
    if record["training"] != name or record["steps"] == steps:
        return
    with LabelStore(ctx.out / STORE_NAME, read_only=True) as store:
        answered = len(store.answers(record["query"]))
    if answered:
        raise GraphseqError(f"train_episodes{' ' + name if name else ''}: steps = {steps}, but {store.path} "
                            f"holds {answered} oracle answers about the images the model of {record['steps']} "
                            f"steps asked for, and a longer training would ask about others; keep steps = "
                            f"{record['steps']}, or train longer in a new --out")


def _check_asked(path: Path, stored: Dict[int, str], images: List[List[int]], strategy: str,
                 training: str) -> None:
    """Each stored answer is about the image the model asks about now."""
    if not stored:
        return
    if not path.is_file():
        raise GraphseqError(f"{path.parent / STORE_NAME} holds oracle answers but {path} is missing, so the "
                            f"images they were about are unknown; choose another --out")
    record = _read_record(path)
    if record["training"] != training or record["query"] != strategy:
        raise GraphseqError(f"{path}: the stored answers were given to training {record['training']!r} "
                            f"asking with {record['query']!r}, not {training!r} with {strategy!r}")
    for episode in sorted(stored):
        if episode >= len(record["asked"]) or record["asked"][episode] != images[episode]:
            was = record["asked"][episode] if episode < len(record["asked"]) else None
            raise GraphseqError(f"fewshot_oracle: episode {episode} was answered about test image {was} "
                                f"(class, drawing), but the model now asks about {images[episode]}: it is "
                                f"not the model the answers were given to; choose another --out")


def _wrapped(text: str, width: int, indent: str = "") -> List[str]:
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)


def _episode_nodes(batch, episode: int, ways: int) -> Tuple[List[Tuple[int, int]], int]:
    """The labelled nodes of an episode with their class, class by class,
    and its query node."""
    nodes = range(int(batch.ptr[episode]), int(batch.ptr[episode + 1]))
    labelled = [(node, way) for way in range(ways) for node in nodes
                if bool(batch.labelled[node]) and int(batch.y[node]) == way]
    return labelled, next(node for node in nodes if bool(batch.query[node]))


def _describe_episode(batch, episode: int, asked: int, before: torch.Tensor, ways: int,
                      picture_width: int, width: int) -> List[str]:
    """What a person sees at the terminal, in lines of at most ``width``
    columns: the labelled images of each class, the image the model asks
    about, the query, and the model's answer for the query so far (a
    :class:`Guess`, which the prompt wraps)."""
    labelled, query = _episode_nodes(batch, episode, ways)
    picture_width = min(picture_width, width)
    pictures = [image_blocks(batch.x[node], picture_width) for node, _ in labelled]
    lines = _wrapped("The labelled images of each class:", width)
    lines += side_by_side(pictures, [f"class {way}" for _, way in labelled], width=width)
    pair = side_by_side([image_blocks(batch.x[asked], picture_width), image_blocks(batch.x[query], picture_width)],
                        ["which class is this?", "query"], width=width)
    # Its first line holds the captions of the first row: both where the two fit beside each other.
    first, second = ("image on the left", "the right one") if "query" in pair[0] else \
        ("upper image", "the lower one")
    lines += [""] + _wrapped(f"The model asks about the {first}; {second} is the query it must classify:", width)
    lines += pair
    return lines + [_guess(before)]


def _guess(before: torch.Tensor) -> Guess:
    probabilities = before.softmax(dim=-1)
    guess = int(probabilities.argmax())
    return Guess(f"The model's answer for the query without your label: class {guess} "
                 f"(probability {float(probabilities[guess]):.2f})")


def _episode_pictures(batch, episode: int, asked: int, ways: int, images: Tensor) -> List[PictureRow]:
    """The same episode as images for a page: the labelled images of each
    class, then the image the model asks about beside the query, as the
    split's ``images`` ``[classes, per_class, channels, height, width]``
    hold them (the model's inputs are normalised)."""
    labelled, query = _episode_nodes(batch, episode, ways)

    def image(node: int) -> Tensor:
        kind, drawing = batch.image[node].tolist()
        return images[kind, drawing]

    return [PictureRow("The labelled images of each class", [image(node) for node, _ in labelled],
                       [f"class {way}" for _, way in labelled]),
            PictureRow("The model asks about the image on the left; the right one is the query it must classify",
                       [image(asked), image(query)], ["which class is this?", "the query"])]


def _check_training(table: str, training: str, trainings: Dict[str, bool], models: Dict[str, str] = {}) -> None:
    """The training the oracle asks for exists, and its model has a query
    head (``trainings``: each training's name, and whether its model has one;
    ``section``: the oracle's section, which the refusals name; ``models``: each
    training's model section, where known)."""
    if training not in trainings:
        raise GraphseqError(f"{table}.training = {training!r}: no earlier training of that name; "
                            f"the trainings of this pipeline: {', '.join(repr(n) for n in trainings)}")
    if not trainings[training]:
        raise GraphseqError(f"{table}.training = {training!r} trains a model without a query head; the oracle "
                            f"needs an active model ({models.get(training, 'model')}.active = true)")


def _stored_answers(table: str, path: Path, strategy: str, episodes: int, ways: Optional[int]) -> Dict[int, str]:
    """The class each episode was answered with in the label store ``path``
    (opened to read), refused where a run of ``episodes`` episodes (and
    ``ways`` classes, where known) cannot hold an answer: a resumed run keeps
    every answer (``section``: the oracle's, which the refusal names). Episodes
    are counted from 1, as the questions count them."""
    with LabelStore(path, read_only=True) as store:
        stored = {answer.item: answer.label for answer in store.answers(strategy)}
    last = max(stored, default=-1)
    if last >= episodes:
        raise GraphseqError(f"{table}.episodes = {episodes}, but {path} holds an answer for episode "
                            f"{last + 1} (item {last} in 'graphseq labels'), and a resumed run keeps every "
                            f"answer; set {table}.episodes to at least {last + 1}")
    for item, label in stored.items():
        if item < 0 or (ways is not None and label not in [str(way) for way in range(ways)]):
            classes = f"classes 0-{ways - 1}" if ways is not None else "classes from 0"
            raise GraphseqError(f"{path}: item {item} has the answer {label!r}, which this run cannot hold "
                                f"(items from 0, {classes}); it was left as it is")
    return stored


def _check_oracle(check, *, episodes: int, oracle: str, labels: str, training: str, query: str = "learned",
                  **_) -> None:
    """What would stop the oracle after the training: the training it names,
    an active model, ``--oracle file``'s labels file, every row, and, on
    ``--resume``, stored answers the run cannot hold."""
    if not oracle and "oracle" not in check.options:
        return  # No oracle: the stage is skipped.
    check_person(check.options.get("oracle", oracle))
    for folder in check.resumed:  # the run's folders that --resume continues
        if (folder / STORE_NAME).is_file():
            _stored_answers(check.section, folder / STORE_NAME, query, episodes, check.facts.get("fewshot_ways"))
    if "oracle" in check.options:
        return  # An oracle object answers as it is.
    if "fewshot_trainings" in check.facts:  # Else the stage itself says what it needs.
        _check_training(check.section, training, check.facts["fewshot_trainings"],
                        check.facts.get("fewshot_training_models", {}))
    if oracle == "file":
        answers = make_oracle(oracle, labels, torch.zeros(0), 0.0, 0, LABELS_COLUMNS)  # a missing or unreadable file
        if "fewshot_ways" in check.facts:
            answers.check([str(way) for way in range(check.facts["fewshot_ways"])], torch.arange(episodes))


@stage("fewshot_oracle", checks={"episodes": at_least(1), "oracle": one_of("", *ORACLES), "labels": EXISTING_FILE,
                                  "noise": probability, "query": one_of(*QUERY_MODES), "training": NAME,
                                  "picture_width": at_least(8)},
        options=("oracle", "labels"),
        resume_may_change=("episodes", "noise", "picture_width"),  # the last: display only
        resume_reads=(STORE_NAME, ORACLE_RECORD), precheck=_check_oracle,
        applies={"episodes": {"oracle": ORACLES}, "query": {"oracle": ORACLES}, "training": {"oracle": ORACLES},
                 "noise": {"oracle": ("simulated",)}, "labels": {"oracle": ("file",)},
                 "picture_width": {"oracle": ("human",)}},
       needs={"data": "a few-shot dataset", "trained": "a trained few-shot model"})
def fewshot_oracle(ctx, *, episodes: int = 20, oracle: str = "", labels: str = "", noise: float = 0.0,
                   query: str = "learned", training: str = "", picture_width: int = 28) -> None:
    """An active model asks, in each of ``episodes`` test episodes, for the
    label of the image its query head chooses; the oracle answers and the
    model's answer for the query is shown before and after.

    The oracle is ``--oracle human`` (you, at the terminal: the images are
    drawn with block characters, ``picture_width`` columns each (28, one
    column a pixel of Omniglot's images; narrower where the terminal is),
    and the text is wrapped to the terminal's width), ``--oracle web`` (a
    page in your browser), ``file`` (``--labels F.csv``
    of ``episode,class`` rows, the episode counted from 0 as the prompt's
    ``item`` and ``graphseq labels`` count it: the prompt's "episode 1" is
    episode 0; a header ``episode,class`` or ``item,label`` is taken) or
    ``simulated`` (the true labels, flipped with probability ``noise``);
    none (the default) skips the stage, and its
    other keys have no use then (nor ``noise``, ``labels`` and
    ``picture_width`` with another oracle than their own). The
    model is that of the training named ``training`` (the pipeline's
    unnamed one by default). Every answer goes into ``labels.sqlite`` at
    once (``graphseq labels DIR`` lists them; item = the episode's number
    from 0, label = the class number), the image it is about into
    ``oracle-images.json``, and ``--resume`` asks only what is unanswered.
    Episode ``e`` is the same for any ``episodes``, so a resumed run may ask
    about more; a model that asks about other images than the stored
    answers are about is refused.
    """
    kind = ctx.options.get("oracle") or oracle
    labels = ctx.options.get("labels") or labels
    if not kind:
        ctx.log.info("fewshot_oracle: no oracle (use --oracle human, file or simulated); skipped")
        return
    data = ctx.require("data", "fewshot_oracle")
    trained = ctx.require("trained", "fewshot_oracle")
    _check_training(ctx.section, training, {name: model.config.active for name, model in trained.items()})
    model = trained[training]

    model.eval()
    seed = ctx.seed + ORACLE_SEED
    batch = oracle_episodes(data.sampler("test"), episodes, seed, ctx.device)
    nothing = torch.full((episodes,), -1, dtype=torch.long, device=ctx.device)
    with torch.no_grad():
        before = model(batch, query="none").cpu()
    _asking(model, batch, query, nothing, seed)
    asked = model.asked.clone()
    images = batch.image[asked].tolist()  # [episodes, 2]: the (class, drawing) of the test split asked about
    truth = batch.y[asked].cpu()
    strategy = query
    width = terminal_width()
    path, record = ctx.out / STORE_NAME, ctx.out / ORACLE_RECORD
    stored = {}
    if ctx.resume and path.is_file():  # Checked before anything is written (and before the run, by the precheck).
        stored = _stored_answers(ctx.section, path, strategy, episodes, data.ways)
        _check_asked(record, stored, images, strategy, training)

    the_oracle = make_oracle(kind, labels, truth, noise, ctx.seed, LABELS_COLUMNS, announcer(ctx))
    names = [str(way) for way in range(data.ways)]
    if isinstance(the_oracle, FileOracle):
        the_oracle.check(names, torch.arange(episodes))  # Every row, before the first answer is stored.
    with closing(the_oracle, kind), LabelStore(path) as store:
        if not ctx.resume:
            if store.has_human_answers(strategy):
                raise GraphseqError(f"{store.path} already holds answers a person gave; continue them with "
                                    f"--resume, or choose another --out")
            store.clear(strategy)
        written = {"training": training, "query": strategy,
                   "steps": int(ctx.metrics.get(f"steps{_suffix(training)}", 0)), "asked": images}
        if distributed.is_main() and (not record.is_file() or read_json(record) != written):
            write_json(record, written)  # Before the first answer is stored.
        answers = nothing.clone()
        for answer in store.answers(strategy):
            answers[answer.item] = names.index(answer.label)
        skipped = set(store.skipped(strategy))
        queue = [e for e in range(episodes) if int(answers[e]) < 0 and e not in skipped]
        ctx.log.info(f"oracle {the_oracle.source}: {episodes} test episodes, "
                     f"{episodes - len(queue)} answered or skipped before")
        while queue:
            e = queue.pop(0)
            question = Question(e, names, _describe_episode(batch, e, int(asked[e]), before[e], data.ways,
                                                            picture_width, width),
                                f"episode {e + 1} of {episodes}",
                                _episode_pictures(batch, e, int(asked[e]), data.ways, data.splits["test"].images))
            reply = the_oracle.ask(question)
            if reply is QUIT:
                the_oracle.tell("\n".join(_wrapped(f"stopped; your answers are stored in {store.path}; "
                                                   f"continue with:", width)
                                          + [f"{ctx.resume_command or f'--resume --out {ctx.out}'} "
                                             f"--oracle {the_oracle.source}"]))
                ctx.stopped = True
                break
            if reply is UNDO:
                queue.insert(0, e)
                undone = undo_answer(store, strategy, the_oracle, lambda answer: f"episode {answer.item + 1} " + (
                    f"= class {answer.label}" if answer.label is not None else "(skipped)"))
                if undone is not None:
                    answers[undone.item] = -1
                    skipped.discard(undone.item)
                    queue.insert(0, undone.item)
                continue
            label = store_answer(store, strategy, e, reply, names, the_oracle, "fewshot_oracle")
            if label is None:
                skipped.add(e)
            else:
                answers[e] = label
                after = _asking(model, batch, query, answers, seed)[e].softmax(dim=-1)
                guess, was = int(after.argmax()), int(before[e].argmax())
                the_oracle.tell("\n".join(_wrapped(
                    f"with your answer the model says class {guess} (probability {float(after[guess]):.2f}); "
                    f"before it said class {was}; the query is class {int(batch.target[e])}", width, "  ")))
        given = answers >= 0
        after = _asking(model, batch, query, answers, seed).argmax(dim=1).cpu()
    model.train()
    given, target = given.cpu(), batch.target.cpu()
    count = int(given.sum())
    ctx.metrics["oracle_answers"] = count
    if count:
        ctx.metrics["oracle_answers_correct"] = float((answers.cpu()[given] == truth[given]).float().mean())
        ctx.metrics["oracle_query_accuracy_before"] = float((before.argmax(dim=1)[given] == target[given]).float().mean())
        ctx.metrics["oracle_query_accuracy_after"] = float((after[given] == target[given]).float().mean())
    ctx.log.info(f"oracle: {plural(count, 'answer')} stored in {ctx.out / STORE_NAME}")
