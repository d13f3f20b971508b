"""Several processes on this machine: ``graphseq run NAME --nproc-per-node N``
starts N workers through torch's elastic launcher (what ``torchrun
--standalone --nproc-per-node N -m graphseq run NAME`` does), after the run
has been planned once in the launcher's own process, so that what refuses it
refuses it once, before any worker starts. Also the checks that a run of
several processes can work at all (:func:`check_processes`), which every
run's plan makes.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from ..distributed import launched_world_size
from ..errors import GraphseqError, end_interrupted_line, tell
from ..stages import get_stage, stage_params, stage_spec
from .config import sections
from .run_folder import continues_from, interrupted_line, resumable_files, stage_stored, undo_run_folder


def check_processes(pipeline: str, config: Dict[str, Any], options: Dict[str, Any], processes: int) -> None:
    """Refuses, before anything is written, a run of ``processes`` workers
    that cannot work: a person answering questions (one terminal cannot
    serve several processes), a pipeline with no stage that is data-parallel
    with its settings (``config``, its sections as they run: node training
    with the full-batch loader is not), or a value the processes share out
    (a batch size) that does not divide by their number."""
    if processes <= 1:
        return
    person = _asks_a_person(options.get("oracle"))
    if person:
        raise GraphseqError(f"--oracle {person} asks you {PERSON_ORACLES[person]}, which one process alone can do; "
                            f"run it without --nproc-per-node (or torchrun)")
    tables = {}
    for name, table in sections(config).items():
        kind = table.get("stage", name)
        tables[name] = (stage_spec(kind), {**stage_params(get_stage(kind)), **table})
    if not any(spec.data_parallel for spec, _ in tables.values()):
        raise GraphseqError(f"pipeline {pipeline} has no data-parallel stage, so {processes} processes "
                            f"would each repeat the whole run; run it with one process")
    if not any(_parallel_with(spec.data_parallel, settings) for spec, settings in tables.values()):
        needs = "; ".join(f"{name} is data-parallel only with "
                          + " and ".join(f"{key} = {' or '.join(map(repr, values))}"
                                         for key, values in spec.data_parallel.items())
                          for name, (spec, _) in tables.items() if isinstance(spec.data_parallel, dict))
        raise GraphseqError(f"pipeline {pipeline} has no data-parallel stage with its settings ({needs}), "
                            f"so {processes} processes would each repeat the whole run; "
                            f"run it with one process")
    for name, (spec, settings) in tables.items():
        for key in spec.splits:
            if settings[key] % processes:
                raise GraphseqError(f"{name}.{key} = {settings[key]} does not split evenly over {processes} "
                                    f"processes; --set {name}.{key} to a multiple of {processes}")


def _parallel_with(data_parallel: Any, settings: Dict[str, Any]) -> bool:
    if isinstance(data_parallel, dict):
        return all(settings[key] in values for key, values in data_parallel.items())
    return bool(data_parallel)


# The oracles that ask a person, and where.
PERSON_ORACLES = {"human": "at this terminal", "web": "on one page in the browser"}


def _asks_a_person(oracle: Any) -> Optional[str]:
    """The person's oracle that ``oracle`` is (a name, or an oracle object), or None."""
    source = oracle if isinstance(oracle, str) else getattr(oracle, "source", None)
    return source if source in PERSON_ORACLES else None


def launch(args: Sequence[str], nproc_per_node: int, plan: Any) -> int:
    """Runs ``graphseq ARGS`` in ``nproc_per_node`` worker processes on this
    machine through torch's elastic launcher; ``plan`` is the run's
    :class:`~graphseq.runner.run.Plan`, made here for as many processes.

    A worker that fails ends the run: the launcher stops the others, and the
    error says which worker, how, and whether the run resumes from its last
    checkpoint. An interrupt (Ctrl-C, SIGTERM) ends it in one line that says
    the same, with exit status 128 + the signal's number (130 for Ctrl-C),
    and the run's log.txt ends with how to continue it, as a run of one
    process's does."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    launcher = parse_args(["--standalone", f"--nproc-per-node={nproc_per_node}", "--max-restarts=0",
                           "-m", "graphseq", *args])
    # The launcher's own log lines would come after graphseq's message, which is to be the last line.
    elastic = [logging.getLogger(logger) for logger in ["torch.distributed.elastic", *logging.root.manager.loggerDict]
               if logger.startswith("torch.distributed.elastic")]
    levels = [logger.level for logger in elastic]
    for logger in elastic:
        logger.setLevel(logging.CRITICAL)
    place, name, config = Path(plan.out), plan.name, plan.config
    made = [folder for folder in (place, *place.parents) if not folder.exists()]  # by the workers, if at all
    logged = _log_size(place)  # what an earlier launch in the folder logged
    os.environ[LAUNCHED] = "1"  # Its workers leave the word on an interrupt to the launcher.
    try:
        run(launcher)
    except (SignalException, KeyboardInterrupt) as stop:
        number = int(getattr(stop, "sigval", signal.SIGINT))
        said = _log_interrupt(place, plan.pipeline, config, nproc_per_node, logged, plan.data_root,
                              plan.data_mirror)
        # Ctrl-C's "^C" at a terminal has no line end, unless rank 0 ended that line on its console.
        if number == signal.SIGINT and (plan.quiet or not said):
            end_interrupted_line(stop, sys.stderr)
        tell(f"graphseq: interrupted; {_what_now(place, name, config)}")
        return 128 + number
    except ChildFailedError as error:
        # The first failure is the cause; workers the launcher stopped after it got SIGTERM.
        rank, first = min(error.failures.items(),
                          key=lambda item: (item[1].signal_name() == "SIGTERM", item[1].timestamp, item[0]))
        if first.exitcode == 2:  # A usage error, which the worker printed already.
            if made:  # Rank 0 undid what the run made, but another worker may have made --out again since.
                undo_run_folder(place, None, made)
            return 2
        how = (f"was killed by {first.signal_name()}" if first.exitcode < 0
               else f"exited with code {first.exitcode}")
        said = (f"worker {rank} of {nproc_per_node} (pid {first.pid}) {how}, so the launcher stopped the others; "
                f"{_what_now(place, name, config)}")
        _append_to_log(place, said)  # The workers cannot log their own death.
        raise GraphseqError(said) from None
    finally:
        for logger, level in zip(elastic, levels):
            logger.setLevel(level)
        os.environ.pop(LAUNCHED, None)
    return 0


# Set in the workers ``graphseq run --nproc-per-node N`` starts (their launcher has the last word;
# cli.py reads it by this name).
LAUNCHED = "GRAPHSEQ_LAUNCHED"


def relaunch_options() -> str:
    """What a command to continue this run adds to ``graphseq run ...
    --resume``: `` --nproc-per-node N`` in a worker of ``graphseq run
    --nproc-per-node N``, whose checkpoints resume only with as many
    processes; nothing in a run of one process (or under torchrun, which
    a person starts again with its own command line)."""
    processes = launched_world_size()
    return f" --nproc-per-node {processes}" if os.environ.get(LAUNCHED) and processes > 1 else ""


def _log_interrupt(out: Path, pipeline: str, config: Dict[str, Any], processes: int, logged: int = 0,
                   data_root: Optional[str] = None, data_mirror: Optional[str] = None) -> bool:
    """Appends to the run's log.txt, once its workers are stopped, the line
    an interrupted run of one process logs: how to continue it (with
    ``--nproc-per-node``, and the data root and mirror it was given). Rank 0
    logs it itself when the interrupt reached it (Ctrl-C reaches every
    process); SIGTERM to the launcher stops the workers before they can. Returns whether rank 0 logged it, past the
    ``logged`` bytes the log held before the launch (a run that is not
    quiet then said it on the console too, on a line of its own)."""
    log = out / "log.txt"
    if not log.is_file():
        return False  # Stopped before the run wrote (its checks).
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    if lines and lines[-1].split(" ", 2)[-1].startswith("interrupted"):
        return _log_size(out) > logged
    line = interrupted_line(pipeline, out, config, None, f" --nproc-per-node {processes}", data_root, data_mirror)
    if line is not None:  # (None: a run that cannot resume, or stored nothing)
        _append_to_log(out, line)
    return False


def _append_to_log(out: Path, line: str) -> None:
    """Ends the run's log.txt with ``line``, as the run logs its own, where
    the run wrote one (none: it stopped in its checks)."""
    log = out / "log.txt"
    if log.is_file():  # One write to a file opened for appending, as the run's own log lines are.
        with open(log, "a", encoding="utf-8") as file:
            file.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")


def _log_size(out: Path) -> int:
    """The size of the run's log.txt in bytes (0 where there is none yet)."""
    try:
        return (out / "log.txt").stat().st_size
    except OSError:
        return 0


def _what_now(out: Path, name: str, config: Dict[str, Any]) -> str:
    """What a person does after a worker failed: resume from the checkpoint
    the run stored, or start it again (in another folder where a stage's
    file is in the way of a pipeline that cannot resume)."""
    if continues_from(out, config):
        return f"the last checkpoint in {out} resumes: run the same command with --resume"
    if resumable_files(config):
        return "it stored no checkpoint yet, so start it again"
    return (f"pipeline {name} cannot resume a run, so start it again"
            + (f" with another --out than {out}" if out.is_dir() and stage_stored(out, None) else ""))
