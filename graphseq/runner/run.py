"""The run of a pipeline, in two steps: :func:`plan` checks everything the
run needs (the pipeline, its settings, the run folder, the data, the number
of processes) and writes nothing; :func:`execute` then runs the stages once
per seed, threading one :class:`~graphseq.stages.Context` through them, and
writes ``config.toml``, ``log.txt`` and ``metrics.json``. :func:`run` is the
two together, what ``graphseq run`` calls.
"""
from __future__ import annotations

import contextlib
import copy
import io
import logging
import math
import os
import statistics
import sys
import time
from collections import ChainMap, Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Sequence, Set

import tomli_w
import torch

from .. import distributed
from ..data.places import data_places
from ..devices import resolve_device
from ..errors import GraphseqError, end_interrupted_line
from ..io import atomic_write_text, check_file_place, check_stored_file, remove_temporaries, write_json
from ..seeding import MAX_SEED, seed_everything
from ..stages import Context, get_stage, stage_params, stage_spec
from ..version import __version__
from .config import (apply_overrides, check_applies, check_domains, checked_config, names_a_file, precheck,
                     read_config, resolve_pipeline, sections, _check_type)
from .launch import check_processes, relaunch_options
from .run_folder import (changed_budgets, check_file_places, check_out, check_world_size, close_lock,
                         continues_from, differences, interrupted_line, lock_folder, read_on_resume,
                         resumable_files, resume_command, seed_dir, seed_started, snapshot, stage_stored,
                         stamped, started_config, undo_run_folder)

@dataclass
class Plan:
    """A run checked and ready: what :func:`execute` needs, and nothing
    written yet. ``pipeline`` is as it was given (a name or a file), for
    the command that continues the run; ``config`` holds the settings as
    they run; ``objects`` the run options handed in as objects (an oracle);
    ``changed`` the budgets a resumed run lengthens; ``processes`` how many
    processes run it together."""

    pipeline: str | os.PathLike
    name: str
    config: Dict[str, Any]
    out: Path
    seed: int
    runs: int
    device: torch.device
    resume: bool = False
    quiet: bool = False
    threads: Optional[int] = None
    objects: Dict[str, Any] = field(default_factory=dict)
    data_root: str | os.PathLike | None = None
    data_mirror: str | os.PathLike | None = None
    changed: List[str] = field(default_factory=list)
    processes: int = 1


def run(pipeline: str | os.PathLike, overrides: Sequence[str] | Dict[str, Any] | None = None,
        seed: Optional[int] = None, runs: Optional[int] = None, device: str = "auto",
        out: str | os.PathLike | None = None, data_root: str | os.PathLike | None = None,
        data_mirror: str | os.PathLike | None = None, quiet: bool = False, resume: bool = False,
        threads: Optional[int] = None, **options: Any) -> Dict[str, Any]:
    """Runs a pipeline ``runs`` times with seeds ``seed .. seed+runs-1``
    (default: seed 0, one run, or what a run folder's ``config.toml`` says).

    Writes ``config.toml``, ``log.txt`` and ``metrics.json`` into ``out``
    (each run's own checkpoint and metrics into ``out/seed-N`` when
    ``runs > 1``) and returns the contents of ``metrics.json``: a list
    ``runs`` of per-run metrics and their ``mean`` and ``std`` (a metric
    that two sections record, each under ``SECTION.KEY``: :func:`section_metrics`).

    Extra keyword ``options`` are run options that a stage of the pipeline
    declares (``oracle="human"``, ``labels="answers.csv"``); one that none
    declares is refused. ``resume=True`` continues the run in ``out`` with
    the settings it was started with, which its ``config.toml`` records: a
    different pipeline, seed, option or ``overrides`` value is refused,
    except what a stage lets change (a budget, which may only grow: see
    :data:`~graphseq.runner.run_folder.BUDGETS`); a key config.toml does not
    record is at its stage's default. ``pipeline`` names the pipeline; given
    as a file other than ``out/config.toml`` (``other-run/config.toml``), the
    file's settings are asked for as ``overrides`` are, and compared in the
    same way (``out/config.toml`` itself, or a pipeline's name, asks for
    nothing). A run started from a file is therefore continued with
    ``graphseq run OUT/config.toml --resume``, which is what an interrupted
    run says to type. A config.toml edited by hand since the run wrote it is
    refused. Everything is checked before anything is written
    (:func:`plan`), so a refused call changes no file. ``threads`` sets
    torch's number of CPU threads. Without a standard error (``2>&-``) the
    run is quiet, as nothing can be drawn or said there; its log.txt keeps
    every line.
    """
    return execute(plan(pipeline, overrides, seed, runs, device, out, data_root, data_mirror, quiet, resume,
                        threads, **options))


def plan(pipeline: str | os.PathLike, overrides: Sequence[str] | Dict[str, Any] | None = None,
         seed: Optional[int] = None, runs: Optional[int] = None, device: str = "auto",
         out: str | os.PathLike | None = None, data_root: str | os.PathLike | None = None,
         data_mirror: str | os.PathLike | None = None, quiet: bool = False, resume: bool = False,
         threads: Optional[int] = None, processes: Optional[int] = None, **options: Any) -> Plan:
    """Checks a run as :func:`run` takes it, and writes nothing: what refuses
    it is found here. ``processes``: how many processes will run it together
    (default: as many as torch's launcher started, else one); the launcher
    of several processes plans the run once, in its own process, before it
    starts any."""
    quiet = quiet or sys.stderr is None
    processes = distributed.launched_world_size() if processes is None else processes
    path = resolve_pipeline(pipeline)
    config = read_config(path)
    name = config.get("pipeline") or path.stem
    if threads is not None:
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise GraphseqError(f"--threads must be a whole number of at least 1, got {threads!r}")
    options = {k: _plain(v) for k, v in options.items() if v is not None}
    if isinstance(options.get("labels"), str):
        options["labels"] = str(Path(options["labels"]).resolve())  # Found again from any folder.
    out = Path(out) if out is not None else Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"

    from_file: Dict[str, Any] = {}  # a pipeline file's settings a resumed run is asked for
    if resume:
        if not resumable_files(config):
            raise GraphseqError(f"--resume has no use in pipeline {name}: none of its stages "
                                f"continues from a file; run it again instead")
        started = started_config(out, name, path)
        if names_a_file(pipeline) and path.resolve() != (out / "config.toml").resolve():
            from_file = copy.deepcopy(config)  # Another file than the run's own asks for its settings, as --set does.
        config = copy.deepcopy(started)  # The overrides may change it; started stays.
        for option in ("seed", "runs"):
            if option in from_file and from_file[option] != started.get(option, from_file[option]):
                raise GraphseqError(f"--resume: {path} has {option} = {from_file[option]}, the run's "
                                    f"{option} = {started[option]}; resume with {out / 'config.toml'}")
        for section, table in sections(from_file).items():
            if section not in config:
                raise GraphseqError(f"--resume: {path} has a section [{section}], which the run in {out} has not; "
                                    f"resume with {out / 'config.toml'}")
            config[section].update({k: v for k, v in table.items() if k != "stage"})
        seed = started.get("seed", 0) if seed is None else seed
        runs = started.get("runs", 1) if runs is None else runs
        for option, asked in (("seed", seed), ("runs", runs)):
            if option in started and started[option] != asked:
                raise GraphseqError(f"--resume: --{option} {asked} differs from the run's "
                                    f"{option} = {started[option]}; leave it out to continue the run")
    else:
        seed = config.get("seed", 0) if seed is None else seed
        runs = config.get("runs", 1) if runs is None else runs
    _check_seeds(seed, runs)
    changed: List[str] = []  # the budgets a resumed run lengthens
    written = copy.deepcopy(config)
    given = apply_overrides(config, overrides)
    objects, flags = _apply_options(config, options, name)
    check_domains(config, name, flags)
    if not resume:  # A run started before a key was found unused still continues.
        # Keys let be are not recorded: config.toml holds what runs, and runs again as a pipeline file.
        for section, key in check_applies(config, name, written, given, flags):
            config[section].pop(key, None)
    elif from_file:  # The file's keys for another mode were let be when the run started from it.
        for section, key in check_applies(config, name, from_file, given, flags):
            if key not in started[section]:
                config[section].pop(key, None)
    torch_device = resolve_device(device)
    check_processes(name, config, options, processes)
    check_out(out)
    if not resume:  # (--resume checked it as it read the run's config.toml)
        check_file_place(out / "config.toml")
    if resume:
        files = resumable_files(config)
        differ, changed = differences(started, config), changed_budgets(started, config)
        if differ:
            raise GraphseqError(f"--resume: the run in {out} was started with other settings: "
                                + "; ".join(differ))
        check_file_places(out, config, seed, runs, "--resume: ")
        for run_seed in range(seed, seed + runs):
            folder = seed_dir(out, run_seed, runs)
            if runs > 1 and not seed_started(folder, config):
                continue  # This seed had stored nothing to continue from; it starts afresh.
            for file in files:
                if not (folder / file).is_file():
                    advice = ("it stopped before it stored anything to continue from, so start it again without "
                              "--resume" if not continues_from(out, config) else "start a new run with another --out")
                    raise GraphseqError(f"--resume: {folder / file} is missing, so the run cannot "
                                        f"continue where it stopped; {advice}")
                check_stored_file(folder / file)
                check_world_size(folder / file, processes)
            for stored in read_on_resume(folder, config):
                check_stored_file(stored)
    elif (out / "config.toml").is_file():
        # A run that stopped before a stage stored anything (only config.toml
        # and log.txt), or anything to continue from (a tokenizer before the
        # first checkpoint), is started again in its folder; any other is kept.
        restart = not stage_stored(out, None) or (
            resumable_files(config) and not continues_from(out, config)
            and read_config(out / "config.toml").get("pipeline") == name)
        if not restart:
            raise GraphseqError(f"--out {out} already holds a run; continue it with --resume, "
                                f"or choose another --out" if resumable_files(config) else
                                f"--out {out} already holds a run, and {name} cannot resume one; "
                                f"choose another --out")
    elif out.is_dir() and any(out.iterdir()):
        raise GraphseqError(f"--out {out} holds files but no graphseq run (no config.toml); "
                            f"choose a new or an empty folder")
    if not resume:
        check_file_places(out, config, seed, runs)

    resumed = [folder for folder in (seed_dir(out, s, runs) for s in range(seed, seed + runs)) if folder.is_dir()]
    precheck(config, data_root, data_mirror, objects, resumed if resume else (), runner=RUNNER)
    if out.is_dir():  # A run that holds the folder refuses this one here, before any worker starts.
        close_lock(lock_folder(out))
    config = {"description": config.get("description", ""), "pipeline": name, "graphseq": __version__,
              "seed": seed, "runs": runs, **sections(config)}
    return Plan(pipeline, name, config, out, seed, runs, torch_device, resume, quiet, threads, objects,
                data_root, data_mirror, changed, processes)


def execute(plan: Plan) -> Dict[str, Any]:
    """Runs a :func:`plan`: joins the other processes where there are
    several, and from there on writes. A run that fails before any stage
    stored a file leaves the folder as it found it."""
    out = plan.out
    device = distributed.setup(plan.device) if plan.processes > 1 else plan.device
    # What was there, seen before the barrier: after it, another worker may make --out first.
    before = snapshot(out)
    made = [folder for folder in (out, *out.parents) if not folder.exists()]  # --out and new folders above it
    distributed.barrier()  # Every process has checked before rank 0 writes.
    if plan.threads is not None:
        torch.set_num_threads(plan.threads)
    lock = lock_folder(out) if out.is_dir() else None  # Refused here, a second run has written nothing.
    out.mkdir(parents=True, exist_ok=True)
    lock = lock if lock is not None else lock_folder(out)  # A folder made at once by two runs: one goes on.
    log = None
    recorded = stamped(tomli_w.dumps(plan.config))
    try:
        if distributed.is_main():
            remove_temporaries(out)  # what a run killed while writing left (the folder is locked)
        if distributed.is_main() and (
                not plan.resume or recorded != (out / "config.toml").read_text(encoding="utf-8")):
            atomic_write_text(out / "config.toml", recorded)
        log = _logger(out, plan.quiet)
        return _run_seeds(plan, device, log)
    except BaseException as error:
        line = None
        if isinstance(error, KeyboardInterrupt) and log is not None:
            # A launched worker's checkpoint resumes only with as many workers; the launcher then
            # sees the line written and leaves it (see launch.log_interrupt).
            line = interrupted_line(plan.pipeline, out, plan.config, before, relaunch_options(), plan.data_root,
                                    plan.data_mirror)
            if line is not None:
                for handler in _console_handlers(log):
                    end_interrupted_line(error, handler.stream)
                log.info(line)
        _close(log)
        undo = distributed.is_main() and (not plan.resume or isinstance(error, GraphseqError))
        if isinstance(error, KeyboardInterrupt) and line is None and distributed.is_main():
            # Said with the interrupt (the command's last word) where the log, which may go, did not say it.
            error.add_note(f"kept what the run stored in {out}" if not undo or stage_stored(out, before) else
                           f"removed {out}, which held nothing yet" if before is None else
                           f"nothing stored yet; {out} is left as the run found it")
        if undo:
            undo_run_folder(out, before, made)
        raise
    finally:
        _close(log)
        if lock is not None:
            os.close(lock)
        distributed.teardown()


# What a stage that runs or checks pipelines of its own is handed (ctx.runner,
# and check.runner in its precheck), so that no stage imports the runner.
RUNNER = SimpleNamespace(run=run, checked_config=checked_config, precheck=precheck)


def _run_seeds(plan: Plan, device: torch.device, log: logging.Logger) -> Dict[str, Any]:
    root, mirror = data_places(plan.data_root, plan.data_mirror)
    out, seed, runs = plan.out, plan.seed, plan.runs
    log.info(f"pipeline {plan.name} on {device}, seeds {seed}..{seed + runs - 1}, out {out}"
             + (f", {plan.processes} processes" if plan.processes > 1 else "") + (" (resumed)" if plan.resume else ""))
    log.info(f"sections: {outline(plan.config)}")
    if plan.changed:  # config.toml holds the new value, as if the run had been started with it
        log.info(f"resumed with {', '.join(plan.changed)}; config.toml now records it, so graphseq run "
                 f"{out / 'config.toml'} would go straight to it, which need not repeat this resumed run "
                 f"(whose schedule was set for the first budget, then stretched)")
    command = resume_command(plan.pipeline, out, plan.data_root, plan.data_mirror) + relaunch_options()
    results = []
    # Quiet: what stages and libraries print to stderr (PyG's "Processing...",
    # warnings) goes to log.txt instead of the console.
    with contextlib.redirect_stderr(_LogStream(log)) if plan.quiet else contextlib.nullcontext():
        for run_seed in range(seed, seed + runs):
            run_out = seed_dir(out, run_seed, runs)
            ctx = Context(pipeline=plan.name, out=run_out, device=device, seed=run_seed, data_root=root,
                          data_mirror=mirror, quiet=plan.quiet,
                          resume=plan.resume and (runs == 1 or seed_started(run_out, plan.config)),
                          log=log, options=dict(plan.objects), resume_command=command, runner=RUNNER)
            metrics = _run_seed(plan.config, ctx, runs)
            results.append(metrics)
            if ctx.stopped:
                log.info(f"stopped at seed {run_seed}; continue with: {command}")
                break

    summary = {"pipeline": plan.name, "runs": results, **summarize(results)}
    if len(results) < runs:
        summary["stopped"] = True
    if distributed.is_main():
        write_json(out / "metrics.json", summary)
    if len(results) > 1:
        log.info("mean over %d runs: %s", len(results), _format(summary["mean"], summary["std"]))
    return summary


def _run_seed(config: Dict[str, Any], ctx: Context, runs: int) -> Dict[str, Any]:
    """Runs the stages once, for one seed (``ctx.seed``); returns its metrics."""
    ctx.out.mkdir(parents=True, exist_ok=True)
    seed_everything(ctx.seed)
    own: Dict[str, Dict[str, Any]] = {}  # each section's metrics
    for section, table in sections(config).items():
        params = {k: v for k, v in table.items() if k != "stage"}
        ctx.section = section
        # A stage reads the metrics of the sections before it (a key's latest first) and writes its own.
        own[section] = {}
        ctx.metrics = ChainMap(*reversed(own.values()))
        get_stage(table.get("stage", section))(ctx, **params)
    metrics = {"seed": ctx.seed, **section_metrics(own)}
    if runs > 1 and distributed.is_main():
        write_json(ctx.out / "metrics.json", metrics)
    ctx.log.info("seed %d: %s", ctx.seed, _format(metrics))
    return metrics


def _check_seeds(seed: Any, runs: Any) -> None:
    if not isinstance(runs, int) or isinstance(runs, bool) or runs < 1:
        raise GraphseqError(f"--runs must be a whole number of at least 1, got {runs!r}")
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
        raise GraphseqError(f"--seed must be a whole number from 0 to {MAX_SEED}, got {seed!r}")
    if seed + runs - 1 > MAX_SEED:
        raise GraphseqError(f"--seed {seed} --runs {runs}: the last seed, {seed + runs - 1}, "
                            f"is beyond {MAX_SEED}")


def _apply_options(config: Dict[str, Any], options: Dict[str, Any], name: str
                   ) -> tuple[Dict[str, Any], Set[tuple[str, str]]]:
    """Refuses run options no stage consumes; an option named like a
    parameter of a stage that declares it sets that parameter (recorded in
    config.toml). Returns what the stages get as ``ctx.options``: objects
    (an oracle handed in through the Python API); and the keys set, as
    (section, key), which refusals name by the option."""
    objects, flags = {}, set()
    for option, value in options.items():
        tables = [(t, table) for t, table in sections(config).items()
                  if option in stage_spec(table.get("stage", t)).options]
        if not tables:
            raise GraphseqError(f"--{option.replace('_', '-')} has no use in pipeline {name}: "
                                f"none of its stages takes it")
        if isinstance(value, (str, int, float, bool)):
            setting = value
        else:
            objects[option] = value
            setting = getattr(value, "source", None)  # An oracle object: who answers.
        for table_name, table in tables:
            params = stage_params(get_stage(table.get("stage", table_name)))
            if option in params and setting is not None:
                table[option] = _check_type(f"{table_name}.{option}", setting, params[option],
                                            f"--{option}")
                flags.add((table_name, option))
    return objects, flags


def _plain(value: Any) -> Any:
    return str(Path(value).resolve()) if isinstance(value, os.PathLike) else value


def _logger(out: Path, quiet: bool) -> logging.Logger:
    log = logging.getLogger(f"graphseq.run.{out.resolve()}")
    log.handlers.clear()
    log.setLevel(logging.DEBUG)  # log.txt keeps what libraries said (debug lines); the console leaves it out
    log.propagate = False
    if not distributed.is_main():  # Rank 0 alone logs, once for all.
        log.addHandler(logging.NullHandler())
        return log
    handler = logging.FileHandler(out / "log.txt")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    log.addHandler(handler)
    if not quiet:
        console = logging.StreamHandler(sys.stderr)
        console.setLevel(logging.INFO)
        console.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(console)
    return log


def summarize(runs: List[Dict[str, Any]]) -> Dict[str, Dict[str, float]]:
    """Mean and (sample) standard deviation of every numeric metric of the runs."""
    mean, std = {}, {}
    for key in runs[0]:
        if key == "seed":
            continue
        values = [r.get(key) for r in runs]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            mean[key] = statistics.fmean(values)
            std[key] = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": mean, "std": std}


# The keys that say how long a stage works, as an outline of the run names them.
BUDGET_KEYS = ("steps", "pretrain_steps", "max_epochs", "epochs", "episodes", "budget", "patience")


def outline(config: Dict[str, Any]) -> str:
    """What a run will do, section by section, with each stage's budget:
    ``[data] omniglot; [train] train_episodes, 21,500 steps; ...``."""
    parts = []
    for name, table in sections(config).items():
        kind = table.get("stage", name)
        settings = {**stage_params(get_stage(kind)), **table}
        budgets = [f"{key} {settings[key]:,}" if key == "patience" else f"{settings[key]:,} {key.replace('_', ' ')}"
                   for key in BUDGET_KEYS if isinstance(settings.get(key), int) and not isinstance(settings[key], bool)]
        parts.append(f"[{name}] {kind}" + (f", {', '.join(budgets)}" if budgets else ""))
    return "; ".join(parts)


def section_metrics(own: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """The metrics of a run's sections (``own``: section -> its metrics) as
    ``metrics.json`` records them: a key that one section set as it is, and
    a key that several set (two sections of one stage: two tests) as
    ``SECTION.KEY`` for each of them (``test.test_accuracy``,
    ``test_again.test_accuracy``), so that no section's metric silently
    replaces another's. A section's name holds no '.', so the two forms
    never meet."""
    sections_of = Counter(key for metrics in own.values() for key in metrics)
    return {(key if sections_of[key] == 1 else f"{section}.{key}"): value
            for section, metrics in own.items() for key, value in metrics.items()}


class _LogStream(io.TextIOBase):
    """A text stream whose lines go to a logger."""

    def __init__(self, log: logging.Logger):
        self.log, self.pending, self.writing = log, "", False

    def write(self, text: str) -> int:
        # A handler of the log that writes to stderr (tqdm's, say) would land
        # here again: such a nested write is dropped instead of looping.
        if self.writing:
            return len(text)
        self.writing = True
        try:
            lines = (self.pending + text).split("\n")
            self.pending = lines.pop()
            for line in lines:
                if line.strip():
                    self.log.info(line.rstrip())
        finally:
            self.writing = False
        return len(text)


def _console_handlers(log: logging.Logger) -> List[logging.StreamHandler]:
    """The handlers of ``log`` that write to the console, not to log.txt."""
    return [h for h in log.handlers if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)]


def _close(log: Optional[logging.Logger]) -> None:
    for handler in log.handlers if log is not None else []:
        handler.close()


def _format(mean: Dict[str, Any], std: Optional[Dict[str, float]] = None) -> str:
    parts = []
    for key, value in mean.items():
        if key == "seed" or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        text = f"{value:.4f}" if isinstance(value, float) and not math.isnan(value) else str(value)
        if std is not None and key in std:
            text += f" ± {std[key]:.4f}"
        parts.append(f"{key}={text}")
    return ", ".join(parts)
