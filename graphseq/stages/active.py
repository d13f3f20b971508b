"""Stages of the active-learning pipelines (``active-cora``,
``active-polarity``): load a task, choose the learner, run the loop for
each query strategy, plot the learning curves.

The oracle is ``simulated`` unless the run says otherwise: the TOML keys
``active.oracle`` and ``active.labels``, which ``graphseq run ... --oracle
human|web|file --labels F.csv`` set (the stage declares both run options),
so that the run's config.toml records who answers and ``--resume`` keeps
it. ``human`` reads standard input; ``web`` serves a page on 127.0.0.1; the
Python API may hand an oracle object instead (``graphseq.run(...,
oracle=...)``), which reaches the stage as ``ctx.options["oracle"]``.
"""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Callable, List, Tuple

import torch
from tqdm.contrib.logging import logging_redirect_tqdm

from ..active.curves import PLOT_NAME, SPLIT_KEY, plot_learning_curves
from ..active.tasks import cora_task, polarity_task
from ..active.learners import GCNLearner
from ..active.loop import active_learning as run_loop
from ..active.oracles import FileOracle, SimulatedOracle
from ..active.prompt import HumanOracle, check_streams
from ..active.store import PERSONS, STORE_NAME, LabelStore
from ..active.strategies import STRATEGIES
from ..active.web import WebOracle, check_can_serve
from ..checks import Domain, at_least, each, non_negative, one_of, positive, probability
from ..data.planetoid import NAMES
from ..errors import GraphseqError, draw_bars, tell
from ..io import read_json, write_json
from .registry import stage

ORACLES = ("simulated", "human", "web", "file")
EXISTING_FILE = Domain("empty, or the path of an existing file", lambda v: not v or Path(v).is_file())


def _note_standard_split(check, **_) -> None:
    check.facts["standard_split"] = True  # for active.reference


def _note_no_standard_split(check, **_) -> None:
    check.facts["standard_split"] = False


@stage("active_cora", checks={"name": Domain(f"one of {', '.join(NAMES)}", lambda v: v.lower() in NAMES)},
       precheck=_note_standard_split,
       makes={"data": "an active-learning pool"})
def active_cora(ctx, *, name: str = "cora"):
    """Cora (or another Planetoid graph) as a pool of papers to label."""
    ctx.task, ctx.data = cora_task(ctx.data_root, ctx.data_mirror, name)
    ctx.log.info(f"{name}: {ctx.data.num_nodes} nodes, pool {ctx.task.pool.numel()}, "
                 f"test {int(ctx.data.test_mask.sum())}")


@stage("active_polarity", checks={"neighbours": at_least(1), "limit": non_negative},
       precheck=_note_no_standard_split,
       makes={"data": "an active-learning pool"})
def active_polarity(ctx, *, neighbours: int = 10, limit: int = 0):
    """Sentence-polarity snippets as nodes of a TF-IDF k-nearest-neighbour graph."""
    ctx.task, ctx.data = polarity_task(ctx.data_root, ctx.data_mirror, neighbours, limit=limit)
    ctx.log.info(f"polarity: {ctx.data.num_nodes} sentences, {ctx.data.edge_index.size(1)} edges, "
                 f"pool {ctx.task.pool.numel()}, test {int(ctx.data.test_mask.sum())}")


@stage("active_gcn", checks={"hidden": at_least(1), "epochs": at_least(1), "lr": positive,
                             "weight_decay": non_negative, "dropout": probability,
                             "evaluate": one_of("test", "val")},
       makes={"model": "an active learner"}, needs={"data": "an active-learning pool"})
def active_gcn(ctx, *, hidden: int = 16, epochs: int = 200, lr: float = 0.01,
               weight_decay: float = 5e-4, dropout: float = 0.5, evaluate: str = "test"):
    """The learner retrained every round: a two-layer GCN. The learning
    curves measure its accuracy on the ``test`` nodes, or on the ``val``
    nodes (never in the pool), which is what settings such as the default
    strategy are chosen on."""
    data = ctx.require("data", "active_gcn")
    num_classes = len(ctx.require("task", "active_gcn").class_names)
    if not isinstance(getattr(data, f"{evaluate}_mask", None), torch.Tensor):
        raise GraphseqError(f"{ctx.section}.evaluate = {evaluate!r}: this task has no {evaluate} nodes "
                            f"(active-polarity holds out test sentences only)")
    ctx.model = lambda: GCNLearner(data, num_classes, ctx.device, seed=ctx.seed, hidden=hidden,
                                          epochs=epochs, lr=lr, weight_decay=weight_decay, dropout=dropout,
                                          evaluate=evaluate)


def make_oracle(kind, labels: str, truth: torch.Tensor, noise: float, seed: int,
                columns: Tuple[str, str] = ("item", "label"), announce: Callable[[str], None] = tell):
    """The oracle named ``kind``; ``columns``: the two columns of a labels
    file; ``announce``: where the web oracle gives its page's address."""
    if not isinstance(kind, str):
        return kind  # An oracle object handed in through graphseq.run(..., oracle=...).
    if kind == "simulated":
        return SimulatedOracle(truth, noise, seed)
    if kind == "human":
        return HumanOracle(sys.stdin, sys.stdout)
    if kind == "web":
        return WebOracle(announce)
    if kind == "file":
        if not labels:
            raise GraphseqError(f"--oracle file needs --labels F.csv (rows {','.join(columns)})")
        return FileOracle(labels, columns)
    raise GraphseqError(f"unknown oracle {kind!r}; choose one of {', '.join(ORACLES)}")


def check_human_streams() -> None:
    """Refuses a person's oracle with standard input or output closed, in a
    precheck: found at the first question, it would end a run whose folder
    was written already."""
    check_streams(sys.stdin, sys.stdout)


def check_person(oracle) -> None:
    """That a person's oracle (``--oracle human`` or ``web``) can ask, in a
    precheck, before any training: open standard streams for the terminal;
    for the browser, an address to serve the page on, and standard error
    to say it on."""
    if oracle == "human":
        check_human_streams()
    elif oracle == "web":
        check_can_serve()
        if sys.stderr is None or getattr(sys.stderr, "closed", False):
            raise GraphseqError("the web oracle (--oracle web) prints its page's address on standard error, "
                                "which is closed; give it a terminal or a file (2> address.txt)")


def announcer(ctx) -> Callable[[str], None]:
    """How a stage's web oracle gives its page's address: whole on the
    console, a quiet run's too (the person needs it to answer), and in
    log.txt without its token, as other users may read the run's folder."""
    def announce(line: str) -> None:
        console = sys.__stderr__ if ctx.quiet else sys.stderr  # a quiet run's sys.stderr goes to log.txt
        try:
            console.write(line + "\n")
            console.flush()
        except (AttributeError, OSError, ValueError):  # no console (2>&-), or a closed one
            pass
        ctx.log.debug(f"{line.split('?token=')[0]} (its token is printed on the terminal only)")
    return announce


def closing(oracle, kind):
    """Closes, when the stage ends, an oracle it made that holds something
    open (the web oracle's server); one handed in through ``graphseq.run``
    is left to its owner."""
    if isinstance(kind, str) and callable(getattr(oracle, "close", None)):
        return contextlib.closing(oracle)
    return contextlib.nullcontext()


def _check_active(check, *, budget: int, initial: int, oracle: str, reference: bool, **_) -> None:
    # What the stage would find only after the run folder is made.
    if budget < initial:  # The loop refuses it too, but only after labels.sqlite is made.
        raise GraphseqError(f"{check.section}.budget ({budget}) is smaller than the initial labelled set "
                            f"({check.section}.initial = {initial}); the budget counts the initial labels too")
    check_person(check.options.get("oracle", oracle))  # (an oracle object handed to graphseq.run, or a name)
    if reference and check.facts.get("standard_split") is False:
        raise GraphseqError(f"{check.section}.reference = true has no use here: this task has no standard training "
                            "split to compare with (active-polarity holds out test sentences only); "
                            "set it to false")


# The simulated oracle runs every strategy of compare; a person or a file answers for strategy alone.
BY_ORACLE = {"compare": ("simulated",), "noise": ("simulated",), "strategy": ("human", "web", "file"),
             "initial_from_truth": ("human", "web", "file"), "labels": ("file",)}


@stage("active_learning", checks={
    "compare": each(one_of(*STRATEGIES), distinct=True), "strategy": one_of(*STRATEGIES), "budget": at_least(1),
    "initial": at_least(1), "batch_size": at_least(1), "oracle": one_of(*ORACLES), "noise": probability,
    "labels": EXISTING_FILE},
    options=("oracle", "labels"), resumes=STORE_NAME, resume_may_change=("budget",), precheck=_check_active,
    applies={key: {"oracle": oracles} for key, oracles in BY_ORACLE.items()},
    makes={"curves": "learning curves"}, needs={"data": "an active-learning pool", "model": "an active learner"})
def active_learning(ctx, *, compare: List[str] = ("random", "entropy", "margin", "least_confidence",
                                                  "degree", "pagerank", "age", "coreset"),
                    strategy: str = "margin", budget: int = 140, initial: int = 14, batch_size: int = 14,
                    oracle: str = "simulated", labels: str = "", noise: float = 0.0,
                    initial_from_truth: bool = False, reference: bool = True):
    """Runs the loop, writing every answer to ``labels.sqlite`` in the run directory.

    With the simulated oracle every strategy in ``compare`` is run from the
    same ``initial`` random labels, taken from the dataset. A person
    (``human``, ``web``) or a labels file (``file``, ``labels``) answers for
    ``strategy`` alone, and is asked about the ``initial`` random items too,
    so that every label of the run is theirs (unless ``initial_from_truth``).
    Each of these keys applies to its oracles only (``BY_ORACLE``): one set
    for the other oracle is refused, except a pipeline file's own, which
    the run's ``--oracle`` lets be. ``budget`` counts every label, the
    initial ones included, and neither may exceed the pool. ``reference``
    also trains on the dataset's standard training split for comparison
    (a task without one, polarity, refuses it). Metrics:
    ``final_accuracy_<strategy>``, ``labels_<strategy>``, the ``curves`` and
    ``evaluated_on``, the nodes their accuracy is measured on (``test`` or ``val``).
    """
    task, data = ctx.require("task", "active_learning"), ctx.require("data", "active_learning")
    make_learner = ctx.require("model", "active_learning")
    size = task.pool.numel()
    for key, value in (("initial", initial), ("budget", budget)):  # before labels.sqlite is made
        if value > size:
            raise GraphseqError(f"{ctx.section}.{key} = {value} is more than the {size} items of the pool, which the "
                                f"run would run out of; set it to {size} at most")
    kind = ctx.options.get("oracle", oracle)  # An oracle object handed to graphseq.run, or a name.
    the_oracle = make_oracle(kind, labels, data.y, noise, ctx.seed, announce=announcer(ctx))
    if isinstance(the_oracle, FileOracle):
        the_oracle.check(task.class_names, task.pool)  # Every row, before the first label is stored.
    names = list(compare) if the_oracle.source == "simulated" else [strategy]
    ctx.log.info(f"oracle {the_oracle.source}, strategies {', '.join(names)}, budget {budget}")

    # The same initial items for every strategy of this seed.
    generator = torch.Generator().manual_seed(ctx.seed)
    pool = the_oracle.restrict(task.pool).cpu()
    first = pool[torch.randperm(pool.numel(), generator=generator)[:initial]].tolist()
    if the_oracle.source == "simulated" or initial_from_truth:
        first = {i: int(data.y[i]) for i in first}

    curves = {}
    # No bar for a person: the prompt is on the terminal, the page shows the progress.
    progress = the_oracle.source not in PERSONS and draw_bars(ctx.quiet)
    # The loop logs each point of the curve while its bar is drawn: the lines go above the bar, not
    # through it. Without a bar there is nothing to keep them off (and a quiet run's stderr is the log).
    with closing(the_oracle, kind), LabelStore(Path(ctx.out) / STORE_NAME) as store, \
            logging_redirect_tqdm(loggers=[ctx.log]) if progress else contextlib.nullcontext():
        for name in names:
            learner = make_learner()
            ctx.metrics[SPLIT_KEY] = _evaluated_on(learner)
            outcome = run_loop(task, learner, the_oracle, store, strategy=name, initial=first,
                               budget=budget, batch_size=batch_size,
                               seed=ctx.seed + 1, resume=ctx.resume,
                               progress=progress, log=ctx.log,
                               resume_hint=ctx.resume_command)
            curves[name] = outcome.curve
            if outcome.curve:
                ctx.metrics[f"final_accuracy_{name}"] = outcome.curve[-1][1]
            ctx.metrics[f"labels_{name}"] = outcome.labels
            if outcome.stopped:
                ctx.stopped = True
                break
    if reference and hasattr(data, "train_mask"):
        learner = make_learner()
        learner.fit(data.train_mask.nonzero().view(-1), data.y[data.train_mask])
        ctx.metrics["standard_split_accuracy"] = learner.accuracy()
        ctx.log.info(f"standard split ({int(data.train_mask.sum())} labels): "
                     f"{_evaluated_on(learner)} accuracy {ctx.metrics['standard_split_accuracy']:.4f}")
    ctx.metrics["curves"] = curves
    ctx.curves = curves


def _evaluated_on(learner) -> str:
    """The nodes a learner's accuracy is measured on (its mask: ``test`` or ``val``)."""
    return getattr(learner, "mask_name", "test_mask").removesuffix("_mask")


@stage("active_curves", needs={"curves": "learning curves"})
def active_curves(ctx, *, title: str = ""):
    """Plots this run's learning curves into ``learning_curves.png``.

    With ``--runs N`` each seed runs in ``OUT/seed-N``; this stage then also
    redraws ``OUT/learning_curves.png`` from every seed of the same run done
    so far (those whose curves were written after the run's ``config.toml``),
    so after the last seed it shows the mean and spread over all of them.
    ``graphseq plot-curves OUT`` redraws it from ``OUT/metrics.json``."""
    curves = ctx.require("curves", "active_curves")
    if not any(curves.values()):
        ctx.log.info("no learning curve to plot yet: the run stopped before its first model")
        return
    title = title or ctx.pipeline
    reference = ctx.metrics.get("standard_split_accuracy")
    split = ctx.metrics.get(SPLIT_KEY, "test")
    out = Path(ctx.out)
    write_json(out / "curves.json", {"curves": curves, "standard_split_accuracy": reference, SPLIT_KEY: split})
    plot_learning_curves([curves], out / PLOT_NAME, f"{title}, seed {ctx.seed}", reference, split=split)
    parent = out.parent
    if out.name == f"seed-{ctx.seed}" and (parent / "config.toml").is_file():
        started = (parent / "config.toml").stat().st_mtime
        seeds = [read_json(p) for p in sorted(parent.glob("seed-*/curves.json"))
                 if p.stat().st_mtime >= started]
        references = [s["standard_split_accuracy"] for s in seeds if s.get("standard_split_accuracy") is not None]
        splits = sorted({str(s.get(SPLIT_KEY) or "test") for s in seeds})  # runs before it was kept: test
        plot_learning_curves([s["curves"] for s in seeds], parent / PLOT_NAME, title,
                             sum(references) / len(references) if references else None, split="/".join(splits))
