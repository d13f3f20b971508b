"""Data-parallel runs with ``torch.distributed``: who this process is
(:func:`rank`, :func:`world_size`, :func:`is_main`), its part of the data
(:func:`shard`), figures averaged over all processes
(:func:`mean_over_ranks`), and the process group the runner sets up when a
pipeline is started by torch's elastic launcher (``torchrun``, or
``graphseq run NAME --nproc-per-node N``, which calls the same launcher).

With one process every function here is a cheap no-op, so a stage written
for several processes runs unchanged in one. Gloo runs the collectives on
CPU, NCCL on CUDA (one device per local rank); only rank 0 writes files.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, TypeVar, Union

import torch
import torch.distributed as dist
from torch import Tensor

from .errors import GraphseqError, end_interrupted_line, tell

T = TypeVar("T")


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process's rank among all processes of the run (0 when alone)."""
    return dist.get_rank() if is_initialized() else 0


def world_size() -> int:
    """How many processes train together (1 when alone)."""
    return dist.get_world_size() if is_initialized() else 1


def local_rank() -> int:
    """This process's rank on its own machine, which picks its GPU."""
    return int(os.environ.get("LOCAL_RANK", "0")) if is_initialized() else 0


def is_main() -> bool:
    """True in the one process that writes files (rank 0)."""
    return rank() == 0


def launched_world_size() -> int:
    """The number of processes the elastic launcher started (``WORLD_SIZE``),
    whether or not the process group is set up yet."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def planned_world_size() -> int:
    """The number of processes of the run: those the launcher is about to
    start while it checks the command in its own process (see :func:`launch`),
    else :func:`launched_world_size`."""
    return _checking or launched_world_size()


def barrier() -> None:
    """Waits until every process gets here. While the launcher checks a
    command in its own process (see :func:`launch`), the runner's barrier,
    between its checks and its first write, is where that check ends."""
    global past_checks
    if _checking is not None:
        raise _Checked
    _wait_for_all()
    past_checks = True


# Whether this process passed the runner's barrier after its checks: what
# refuses a run before it refuses it alike in every worker, and rank 0 says so.
past_checks = False


def _wait_for_all() -> None:
    if is_initialized():
        dist.barrier()


@contextmanager
def main_first() -> Iterator[None]:
    """Runs the body in rank 0 first and in the other ranks after it, for
    work that writes shared files once (a dataset's download and processing)."""
    if not is_main():
        _wait_for_all()
    yield
    if is_main():
        _wait_for_all()


def launched_rank() -> int:
    """This process's rank as the launcher set it (``RANK``), also before
    the process group is set up and after it is torn down."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def shard(items: Union[int, Tensor, Sequence[T]], pad: bool = True) -> Union[Tensor, List[T]]:
    """This rank's part of ``items`` (a count ``n`` means ``range(n)`` as a
    tensor): every ``world_size``-th element, starting at ``rank``, as
    :class:`torch.utils.data.DistributedSampler` deals them without shuffling.

    With ``pad`` the list is first extended by its own first elements to a
    multiple of ``world_size``, so that every rank takes the same number of
    steps (collectives must match); the parts are disjoint apart from those
    repeats, and together cover every element.
    """
    if isinstance(items, int):
        items = torch.arange(items)
    size, r = world_size(), rank()
    n = len(items)
    if size == 1:
        return items if isinstance(items, Tensor) else list(items)
    total = -(-n // size) * size if pad else n
    positions = [i % n for i in range(r, total, size)] if n else []
    if isinstance(items, Tensor):
        return items[torch.tensor(positions, dtype=torch.long)]
    return [items[i] for i in positions]


def mean_over_ranks(figures: Dict[str, float]) -> Dict[str, float]:
    """The mean of each figure over all ranks (every rank must pass the same
    keys, in any order); the figures themselves with one process."""
    if world_size() == 1 or not figures:
        return dict(figures)
    keys = sorted(figures)
    values = torch.tensor([float(figures[k]) for k in keys], dtype=torch.float64,
                          device=_collective_device())
    dist.all_reduce(values, op=dist.ReduceOp.SUM)
    values /= world_size()
    return dict(zip(keys, values.tolist()))


def max_over_ranks(value: float) -> float:
    """The largest ``value`` of any rank (so that all agree on when to stop)."""
    if world_size() == 1:
        return value
    tensor = torch.tensor([float(value)], dtype=torch.float64, device=_collective_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return float(tensor.item())


def gather_objects(obj: Any) -> List[Any]:
    """Every rank's ``obj``, in rank order (``[obj]`` with one process)."""
    if world_size() == 1:
        return [obj]
    gathered: List[Any] = [None] * world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def _collective_device() -> torch.device:
    if is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def setup(device: torch.device) -> torch.device:
    """Joins the process group the elastic launcher prepared (its
    ``MASTER_ADDR``, ``RANK``, ``WORLD_SIZE`` ... environment) and returns
    this process's device: ``cuda:LOCAL_RANK`` on CUDA, else ``device``."""
    if is_initialized():
        return device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    _end_with_the_launcher()
    dist.init_process_group(backend=backend_for(device))
    sys.excepthook = _lost_peer_in_one_line(sys.excepthook)
    return device


def _end_with_the_launcher() -> None:
    """On Linux, asks the kernel to send this worker SIGTERM when its parent
    (the launcher) dies, even by SIGKILL, so that no worker trains on alone
    (and holds the run's folder); elsewhere, or where that fails, nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        pass


# What gloo's error says when another process of the group went away: it read
# the end of the connection, or the connection was reset, while reading ("Read
# error ...: Connection reset by peer") or writing ("writev ...: Broken pipe"), or
# it found the connection closed before a send or receive ("Socket closed ...",
# "Socket unexpectedly closed ...").
LOST_PEER = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "Socket closed",
             "Socket unexpectedly closed")

# How long a worker whose peer went away waits for torch's elastic launcher to
# stop it. The launcher looks at its workers every 0.1 s (--monitor-interval)
# and, once one has ended, stops the others with SIGTERM.
LAUNCHER_STOPS_WITHIN = 30.0


def _lost_peer_in_one_line(excepthook: Any) -> Any:
    """``excepthook``, except for the error of a collective whose peer went
    away: another worker ended (it refused the run, failed, or was killed),
    and this error is only a consequence. Under torch's elastic launcher the
    worker waits for the launcher to stop it, so that the run ends with the
    cause alone: the other worker's one-line refusal, or the launcher's word
    on which worker ended the run, and how. Should the launcher not stop it
    within :data:`LAUNCHER_STOPS_WITHIN` seconds, or without the launcher,
    the worker says so itself, in one line rather than a traceback."""
    def hook(kind: type, error: BaseException, trace: Any) -> None:
        if not (isinstance(error, RuntimeError) and any(words in str(error) for words in LOST_PEER)):
            excepthook(kind, error, trace)
            return
        if "TORCHELASTIC_RUN_ID" in os.environ:  # Set by the launcher in its workers.
            try:
                time.sleep(LAUNCHER_STOPS_WITHIN)
            except KeyboardInterrupt:
                return  # Ctrl-C reached the launcher as well, which says that the run was interrupted.
        tell(f"[rank{launched_rank()}]: {kind.__name__}: {str(error).splitlines()[0]}")

    return hook


def teardown() -> None:
    if is_initialized():
        dist.destroy_process_group()


def wrap(module: torch.nn.Module, device: torch.device, **options: Any) -> torch.nn.Module:
    """``module`` inside :class:`~torch.nn.parallel.DistributedDataParallel`
    when several processes run; ``module`` itself otherwise."""
    if world_size() == 1:
        return module
    from torch.nn.parallel import DistributedDataParallel

    device_ids: Optional[List[int]] = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=device_ids, **options)


# --------------------------------------------------------------------------- #
# The runner's side: checks, set-up, and launching workers
# --------------------------------------------------------------------------- #

# The number of processes about to be launched, while the launcher checks
# their command in its own process; None otherwise.
_checking: Optional[int] = None


class _Checked(BaseException):
    """Ends the launcher's check of a command where the runner would write."""


def is_data_parallel(stage_fn: Any) -> bool:
    """Whether a stage was registered with ``data_parallel`` (with some settings, at least)."""
    return bool(getattr(stage_fn, "data_parallel", False))


def check_run(pipeline: str, stage_fns: Sequence[Any], options: Dict[str, Any], processes: int) -> None:
    """Refuses, before anything is written, a run of ``processes`` workers
    that cannot work: a pipeline without a data-parallel stage, or a person
    answering questions (one terminal cannot serve several processes)."""
    if processes <= 1:
        return
    if processes > 1 and _asks_a_person(options.get("oracle")):
        raise GraphseqError("--oracle human asks you at this terminal, which one process alone can do; "
                            "run it without --nproc-per-node (or torchrun)")
    if not any(is_data_parallel(fn) for fn in stage_fns):
        raise GraphseqError(f"pipeline {pipeline} has no data-parallel stage, so {processes} processes "
                            f"would each repeat the whole run; run it with one process")


def check_settings(pipeline: str, config: Dict[str, Any], processes: int) -> None:
    """Refuses a run of ``processes`` workers that the pipeline's settings
    (``config``, its tables as they run) do not allow: no stage is
    data-parallel with them (node training with the full-batch loader), or
    a value the processes share out (a batch size) does not divide by
    their number."""
    if processes <= 1:
        return
    from .pipeline import sections
    from .stages import get_stage, stage_params, stage_spec

    tables = {}
    for name, table in sections(config).items():
        kind = table.get("stage", name)
        tables[name] = (stage_spec(kind), {**stage_params(get_stage(kind)), **table})
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


def _asks_a_person(oracle: Any) -> bool:
    return oracle == "human" or type(oracle).__name__ == "HumanOracle"


def join(pipeline: str, config: Dict[str, Any], device: torch.device,
         options: Dict[str, Any]) -> torch.device:
    """The runner's hook: in a worker started by the elastic launcher
    (``WORLD_SIZE`` > 1), checks the run (:func:`check_run`, and its settings
    ``config`` with :func:`check_settings`) and joins the process group;
    returns the device this process trains on. Alone, or while the launcher
    checks the command, returns ``device``."""
    from .pipeline import sections
    from .stages import get_stage

    processes = planned_world_size()
    check_run(pipeline, [get_stage(t.get("stage", n)) for n, t in sections(config).items()], options, processes)
    check_settings(pipeline, config, processes)
    if processes > 1 and _checking is None:
        return setup(device)
    return device


def launch(args: Sequence[str], nproc_per_node: int, out: Optional[str] = None) -> int:
    """Runs ``graphseq ARGS`` in ``nproc_per_node`` worker processes on this
    machine through torch's elastic launcher (what ``torchrun --standalone
    --nproc-per-node N -m graphseq ARGS`` does).

    First the command runs here, in one process, as far as the runner
    checks it before it writes (:func:`join` checking its settings against
    the number of processes among that): what refuses the run refuses it
    once, before any worker starts. A worker that fails ends the
    run: the launcher stops the others, and the error says which worker,
    how, and whether the run resumes from its last checkpoint. An interrupt
    (Ctrl-C, SIGTERM) ends it in one line that says the same, with exit
    status 128 + the signal's number (130 for Ctrl-C), and the run's
    log.txt ends with how to continue it, as a run of one process's does."""
    import logging
    import signal

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    command, name, config = _check_command(args, nproc_per_node)
    launcher = parse_args(["--standalone", f"--nproc-per-node={nproc_per_node}", "--max-restarts=0",
                           "-m", "graphseq", *args])
    # The launcher's own log lines would come after graphseq's message, which is to be the last line.
    elastic = [logging.getLogger(logger) for logger in ["torch.distributed.elastic", *logging.root.manager.loggerDict]
               if logger.startswith("torch.distributed.elastic")]
    levels = [logger.level for logger in elastic]
    for logger in elastic:
        logger.setLevel(logging.CRITICAL)
    place = Path(out or command.out)
    made = [folder for folder in (place, *place.parents) if not folder.exists()]  # by the workers, if at all
    logged = _log_size(place)  # what an earlier launch in the folder logged
    os.environ[LAUNCHED] = "1"  # Its workers leave the word on an interrupt to the launcher.
    try:
        run(launcher)
    except (SignalException, KeyboardInterrupt) as stop:
        number = int(getattr(stop, "sigval", signal.SIGINT))
        said = _log_interrupt(place, command.pipeline, config, nproc_per_node, logged, command.data_root,
                              command.data_mirror)
        # Ctrl-C's "^C" at a terminal has no line end, unless rank 0 ended that line on its console.
        if number == signal.SIGINT and (command.quiet or not said):
            end_interrupted_line(stop, sys.stderr)
        tell(f"graphseq: interrupted; {_what_now(place, name, config)}")
        return 128 + number
    except ChildFailedError as error:
        # The first failure is the cause; workers the launcher stopped after it got SIGTERM.
        rank, first = min(error.failures.items(),
                          key=lambda item: (item[1].signal_name() == "SIGTERM", item[1].timestamp, item[0]))
        if first.exitcode == 2:  # A usage error, which the worker printed already.
            if made:  # Rank 0 undid what the run made, but another worker may have made --out again since.
                from .pipeline import undo_run_folder

                undo_run_folder(place, None, made)
            return 2
        how = (f"was killed by {first.signal_name()}" if first.exitcode < 0
               else f"exited with code {first.exitcode}")
        raise GraphseqError(f"worker {rank} of {nproc_per_node} (pid {first.pid}) {how}, so the launcher "
                            f"stopped the others; {_what_now(Path(out or command.out), name, config)}") from None
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


def _check_command(args: Sequence[str], processes: int) -> tuple[argparse.Namespace, str, Dict[str, Any]]:
    """Runs ``graphseq ARGS`` in this process up to the runner's barrier
    after its checks (:func:`join` among them, for ``processes``); returns
    the parsed command, the pipeline's name and its settings."""
    global _checking
    from .cli import build_parser
    from .pipeline import apply_overrides, read_config, resolve_pipeline

    command = build_parser().parse_args(list(args))
    command.argv = list(args)
    _checking = processes
    try:
        command.handler(command)
    except _Checked:
        pass
    finally:
        _checking = None
    # Checked: the pipeline reads, and a resumed run's folder holds the settings it continues with.
    path = Path(command.out) / "config.toml" if command.resume else resolve_pipeline(command.pipeline)
    config = read_config(path)
    apply_overrides(config, command.overrides)
    return command, config.get("pipeline") or path.stem, config


def _log_interrupt(out: Path, pipeline: str, config: Dict[str, Any], processes: int, logged: int = 0,
                   data_root: Optional[str] = None, data_mirror: Optional[str] = None) -> bool:
    """Appends to the run's log.txt, once its workers are stopped, the line
    an interrupted run of one process logs: how to continue it (with
    ``--nproc-per-node``, and the data root and mirror it was given). Rank 0
    logs it itself when the interrupt reached it (Ctrl-C reaches every
    process); SIGTERM to the launcher stops the workers before they can. Returns whether rank 0 logged it, past the
    ``logged`` bytes the log held before the launch (a run that is not
    quiet then said it on the console too, on a line of its own)."""
    from .pipeline import interrupted_line

    log = out / "log.txt"
    if not log.is_file():
        return False  # Stopped before the run wrote (its checks).
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    if lines and lines[-1].split(" ", 2)[-1].startswith("interrupted"):
        return _log_size(out) > logged
    line = interrupted_line(pipeline, out, config, None, f" --nproc-per-node {processes}", data_root, data_mirror)
    if line is None:
        return False  # A run that cannot resume, or stored nothing.
    # One write to a file opened for appending, as the run's own log lines are.
    with open(log, "a", encoding="utf-8") as file:
        file.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")
    return False


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
    from .pipeline import continues_from, resumable_files, stage_stored

    if continues_from(out, config):
        return f"the last checkpoint in {out} resumes: run the same command with --resume"
    if resumable_files(config):
        return "it stored no checkpoint yet, so start it again"
    return (f"pipeline {name} cannot resume a run, so start it again"
            + (f" with another --out than {out}" if out.is_dir() and stage_stored(out, None) else ""))


def check_launch(pipeline: str, overrides: Sequence[str], oracle: Optional[str], processes: int) -> str:
    """What the launcher checks before it starts any worker: the pipeline
    and its overrides read, and :func:`check_run` passes. Returns the
    pipeline's name."""
    from .pipeline import apply_overrides, read_config, resolve_pipeline, sections
    from .stages import get_stage

    path = resolve_pipeline(pipeline)
    config = read_config(path)
    apply_overrides(config, overrides)
    stage_fns = [get_stage(table.get("stage", name)) for name, table in sections(config).items()]
    check_run(path.stem, stage_fns, {"oracle": oracle}, processes)
    return path.stem
