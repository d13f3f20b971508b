"""Timing shared by the benchmark scripts: every contender runs once per
round, in turn, so that a busy machine slows them alike; the median of each
after the warm-up rounds."""
from __future__ import annotations

import statistics
import time
from typing import Callable, Dict, Hashable

import torch


def median_times(steps: Dict[Hashable, Callable[[], object]], repeats: int, device: torch.device,
                 clock: Callable[[], float] = time.perf_counter, warmup: int = 3) -> Dict[Hashable, float]:
    """Median seconds of each of ``steps`` over ``repeats`` interleaved rounds
    (``clock``: ``time.perf_counter`` for wall time, ``time.thread_time``
    for this thread's CPU time)."""
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
