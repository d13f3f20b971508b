"""Data-parallel primitives on ``torch.distributed``: who this process is
(:func:`rank`, :func:`world_size`, :func:`is_main`), its part of the data
(:func:`shard`), metrics averaged over all processes
(:func:`mean_over_ranks`), and joining the process group that torch's
elastic launcher prepared (``torchrun``, or ``graphseq run NAME
--nproc-per-node N``, which calls the same launcher: see
:mod:`graphseq.runner.launch`).

With one process every function here is a cheap no-op, so a stage written
for several processes runs unchanged in one. Gloo runs the collectives on
CPU, NCCL on CUDA (one device per local rank); only rank 0 writes files.
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Sequence, TypeVar, Union

import torch
import torch.distributed as dist
from torch import Tensor

from .errors import tell

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


def barrier() -> None:
    """Waits until every process gets here; the runner's barrier, between its
    checks and its first write, marks this process as past its checks."""
    global past_checks
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


def mean_over_ranks(metrics: Dict[str, float]) -> Dict[str, float]:
    """The mean of each metric over all ranks (every rank must pass the same
    keys, in any order); the metrics themselves with one process."""
    if world_size() == 1 or not metrics:
        return dict(metrics)
    keys = sorted(metrics)
    values = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64,
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
