"""Timing shared by the benchmark scripts: every contender runs once per
round, in turn, so that a busy machine slows them alike; the median of each
after the warm-up rounds. And what every script parses and reports alike:
:func:`at_least` and :func:`whole_numbers`, which refuse a count such as
``--repeats 0`` when the arguments are parsed, before any work,
:func:`run_script`, which reports a :class:`GraphseqError` raised later
(no CUDA, no data) as argparse reports a usage error, :data:`CLOCKS`, what
``--clock`` names, and :func:`check_agreement`, which stops a script whose
contenders disagree before anything is timed."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import TYPE_CHECKING, Callable, Dict, Hashable

if TYPE_CHECKING:
    import torch

# --clock: wall time, or the CPU time of the whole process, every thread's
# (torch's OpenMP workers too, which time.thread_time would miss).
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


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


def whole_numbers(low: int, empty: bool = False) -> Callable[[str], list]:
    """An argparse ``type=`` that reads comma-separated whole numbers, each at
    least ``low`` (none at all only if ``empty``): ``--fanout 10,10``."""
    def numbers(text: str):
        try:
            values = [int(part) for part in text.split(",") if part.strip()]
        except ValueError:
            values = None
        if values is None or any(value < low for value in values) or not (values or empty):
            raise argparse.ArgumentTypeError(f"must be comma-separated whole numbers >= {low}, got {text!r}")
        return values
    return numbers


def run_script(main: Callable[[], None]) -> None:
    """Runs a script's ``main``; a :class:`GraphseqError` (a problem with what
    was asked for: no CUDA device, no data, episodes larger than the data)
    ends it as argparse ends a usage error, one line on stderr and exit status 2."""
    from graphseq.errors import GraphseqError  # Here, so that parsing the arguments need not load torch.

    try:
        main()
    except GraphseqError as error:
        print(f"{os.path.basename(sys.argv[0])}: error: {error}", file=sys.stderr)
        sys.exit(2)


def check_agreement(what: str, ours, theirs, rtol: float = 1e-4, atol: float = 1e-5) -> float:
    """The largest absolute difference between our output and the peer's
    (tensors of one shape, or sequences of them compared in turn), which the
    two sides should compute alike. Each tensor of ours must lie within
    ``atol + rtol * max|peer's|`` of the peer's, element by element. The
    bound follows the tensor's own scale, small or large: float32 rounding
    grows with the values summed into an element, which the largest value
    measures, not the element itself (a near-zero difference of large terms
    keeps their rounding, so an element-wise ``rtol`` would stop scripts that
    agree to float32 precision). Past it, or on a shape that differs, the
    script stops there, the reason on stderr and exit status 1: a ratio of
    two different computations means nothing."""
    import torch

    ours = [ours] if isinstance(ours, torch.Tensor) else list(ours)
    theirs = [theirs] if isinstance(theirs, torch.Tensor) else list(theirs)
    script = os.path.basename(sys.argv[0])
    shapes = [(tuple(a.shape), tuple(b.shape)) for a, b in zip(ours, theirs)]
    if len(ours) != len(theirs) or any(a != b for a, b in shapes):
        sys.exit(f"{script}: error: {what}: the outputs differ in shape (ours, peer's: {shapes}); not timed")
    # torch's max, not Python's, which could pass over a NaN.
    differences = torch.stack([(a.detach() - b.detach()).abs().max() for a, b in zip(ours, theirs)])
    limits = torch.stack([atol + rtol * b.detach().abs().max() for b in theirs])
    worst = int((differences / limits).nan_to_num(float("inf")).argmax())
    difference, limit = float(differences[worst]), float(limits[worst])
    if not difference <= limit:  # NaN too
        sys.exit(f"{script}: error: {what}: our output and the peer's differ by up to {difference:.1e}, more "
                 f"than the {limit:.1e} that float32 rounding allows at their scale; they do not compute the "
                 f"same thing, so nothing was timed")
    return float(differences.max())


def median_times(steps: Dict[Hashable, Callable[[], object]], repeats: int, device: torch.device,
                 clock: Callable[[], float] = time.perf_counter, warmup: int = 3) -> Dict[Hashable, float]:
    """Median seconds of each of ``steps`` over ``repeats`` interleaved rounds
    (``clock``: one of :data:`CLOCKS`)."""
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
