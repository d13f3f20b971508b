"""Timing shared by the benchmark scripts: every contender runs once per
round, in turn, so that a busy machine slows them alike; the median of each
after the warm-up rounds. And :func:`at_least`, which refuses a count such
as ``--repeats 0`` when the arguments are parsed, before any work."""
from __future__ import annotations

import argparse
import statistics
import time
from typing import TYPE_CHECKING, Callable, Dict, Hashable

if TYPE_CHECKING:
    import torch


def at_least(low: float, kind: type = int) -> Callable[[str], float]:
    """An argparse ``type=`` that reads a number of ``kind`` (a whole number
    by default) and refuses one below ``low``: ``type=at_least(1)``."""
    def number(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not value >= low:
            raise argparse.ArgumentTypeError(
                f"must be a {'whole number' if kind is int else 'number'} >= {low}, got {text}")
        return value
    return number


def median_times(steps: Dict[Hashable, Callable[[], object]], repeats: int, device: torch.device,
                 clock: Callable[[], float] = time.perf_counter, warmup: int = 3) -> Dict[Hashable, float]:
    """Median seconds of each of ``steps`` over ``repeats`` interleaved rounds
    (``clock``: ``time.perf_counter`` for wall time, ``time.thread_time``
    for this thread's CPU time)."""
    import torch  # Here, so that scripts which only parse arguments need not load it.

    times = {name: [] for name in steps}
    for lap in range(warmup + repeats):
        for name, run in steps.items():
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = clock()
            run()
            if device.type == "cuda":
                torch.cuda.synchronize()
            if lap >= warmup:
                times[name].append(clock() - start)
    return {name: statistics.median(t) for name, t in times.items()}
