"""Stage: a run of another pipeline inside this one, for the trainings after
it to start from. A pipeline whose recipe begins from another run's weights
(a 5-shot model from a 1-shot one, a long training's head start) then builds
that run itself, or reuses it, in one command::

    [start]
    stage = "start_run"
    pipeline = "fewshot-omniglot-5w1s"
    overrides = ["train.steps=6500", "train.batch_size=16"]

The run goes into the section's folder of the run folder (``OUT/start``): a
finished one (its ``metrics.json`` written) is reused, one that stopped is
continued, and ``--resume`` of this run continues it where it stopped.
"""
from __future__ import annotations

from ..checks import Domain, text_list
from ..errors import GraphseqError
from ..training import CHECKPOINT
from .registry import stage

PIPELINE = Domain("a pipeline's name or a .toml file", lambda v: isinstance(v, str) and bool(v.strip()))


def _check_start_run(check, *, pipeline: str, overrides: list, **_) -> None:
    """The pipeline and its overrides, checked as the runner checks a run, before anything is written."""
    try:
        config = check.runner.checked_config(pipeline, overrides)
    except GraphseqError as error:
        raise GraphseqError(f"{check.section}.pipeline = {pipeline!r}: {error}") from None
    check.runner.precheck(config, check.data_root, check.data_mirror)


@stage("start_run", checks={"pipeline": PIPELINE, "overrides": text_list}, precheck=_check_start_run,
       makes={"start": "a finished run"})
def start_run(ctx, *, pipeline: str, overrides: list = []) -> None:
    """Runs ``pipeline`` with ``overrides`` (``--set`` values, ``"SECTION.KEY=VALUE"``)
    into this run's folder ``OUT/SECTION``, with this run's seed, device and
    data, unless it finished there already; ``ctx.start`` is that folder."""
    folder = ctx.out / ctx.section
    if (folder / "metrics.json").is_file():
        ctx.log.info(f"{ctx.section}: reusing the finished {pipeline} run in {folder}")
    else:
        resume = (folder / CHECKPOINT).is_file()
        ctx.log.info(f"{ctx.section}: {'continuing' if resume else 'running'} {pipeline} in {folder}")
        ctx.runner.run(pipeline, overrides=overrides, seed=ctx.seed, device=str(ctx.device), out=folder,
                       data_root=ctx.data_root, data_mirror=ctx.data_mirror, quiet=ctx.quiet, resume=resume)
    ctx.start = folder
