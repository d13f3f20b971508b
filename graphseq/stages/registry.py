"""The stage registry: a stage is a plain function ``fn(ctx, *, key=default,
...)`` registered under a name. Its keyword parameters are the keys a
pipeline's TOML section may set, so the function's signature is the schema;
the registration adds what a signature cannot say: the values each key may
take (:mod:`graphseq.checks`), the run options the stage consumes, and the
file it continues from when a run is resumed.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

from ..checks import Condition, Domain
from ..errors import GraphseqError
from .context import PRODUCTS

STAGES: Dict[str, Callable[..., Any]] = {}
SPECS: Dict[str, "StageSpec"] = {}

@dataclass(frozen=True)
class StageSpec:
    """What the runner knows about a stage besides its signature."""

    name: str
    checks: Dict[str, Domain] = field(default_factory=dict)
    options: Tuple[str, ...] = ()            # run options it consumes ("oracle", "labels")
    resumes: str = ""                        # the file in its run folder it continues from
    resume_may_change: Tuple[str, ...] = ()  # keys --resume may set anew (budgets)
    data_parallel: Union[bool, Dict[str, Tuple[Any, ...]]] = False  # trains in several processes (with settings)
    precheck: Optional[Callable[..., None]] = None  # checks the whole pipeline and its data before a write
    resume_reads: Tuple[str, ...] = ()       # files (globs) a resumed run reads where they exist
    resume_notes: Dict[str, str] = field(default_factory=dict)  # why --resume may not change a key
    applies: Dict[str, Dict[str, Condition]] = field(default_factory=dict)  # key -> {key: values or domain}
    splits: Tuple[str, ...] = ()             # keys whose value the processes share out (a batch size)
    makes: Dict[str, str] = field(default_factory=dict)              # product -> kind it hands on
    needs: Dict[str, Tuple[str, ...]] = field(default_factory=dict)  # product -> kinds it accepts


@dataclass
class Precheck:
    """What a stage's precheck may look at: where the data lives, the run
    options handed in as objects (an oracle, through the Python API), and
    the ``facts`` that the prechecks of the pipeline's earlier stages left
    for later ones (say, the folds a pretraining stage provides), and the
    run's folders (one a seed) that ``--resume`` continues, to read what
    they hold, never to write; ``section``, the name of the section whose
    precheck runs, as a user names its keys (``--set train.steps=N``);
    ``runner``, what a stage that runs pipelines of its own checks them
    with (``checked_config``, ``precheck``)."""

    data_root: Path
    data_mirror: Optional[Path]
    options: Dict[str, Any] = field(default_factory=dict)
    facts: Dict[str, Any] = field(default_factory=dict)
    resumed: Tuple[Path, ...] = ()
    section: str = ""
    runner: Any = None


def stage(name: str, *, checks: Dict[str, Domain] | None = None, options: Sequence[str] = (),
          resumes: str = "", resume_may_change: Sequence[str] = (),
          data_parallel: bool | Dict[str, Tuple[Any, ...]] = False, precheck: Optional[Callable[..., None]] = None,
          resume_reads: Sequence[str] = (), resume_notes: Dict[str, str] | None = None,
          applies: Dict[str, Dict[str, Condition]] | None = None, splits: Sequence[str] = (),
          makes: Dict[str, str] | None = None, needs: Dict[str, str | Sequence[str]] | None = None
          ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Registers ``fn`` as the stage ``name``; a second stage of the same name is refused.

    Args:
        checks: the domain of each keyword parameter that has one, e.g.
            ``{"lr": positive, "stop_on": one_of("gat", "loss")}``.
        options: run options the stage consumes (``"oracle"``, ``"labels"``).
            The runner refuses an option that no stage of the pipeline
            declares; an option named like a parameter of the stage sets
            that parameter, so the run folder records it, and ``--resume``
            keeps it once the run has one (another oracle or labels file
            is refused): a stage that asks someone declares it here, and
            is kept to one oracle without a word of its own.
        resumes: the file in the run folder the stage continues from when
            the run is resumed (``"checkpoint.pt"``). A pipeline none of
            whose stages declares one cannot be resumed.
        resume_may_change: keys that ``--resume`` may set to other values
            than the run was started with (a longer budget).
        data_parallel: the stage trains with several processes when the run
            is launched with them (:mod:`graphseq.distributed`); a pipeline
            without such a stage refuses to run in several processes. A
            stage that is data-parallel only with some settings names them
            as ``applies`` does: ``{"loader": ("neighbor",)}``.
        precheck: ``precheck(check, **params)``, with a :class:`Precheck`
            and the stage's settings, raises :class:`GraphseqError` for what
            neither a value's domain nor the stage's first step can tell
            before the run writes a file: a fold that an earlier section must
            provide, a pipeline the stage runs inside its own, data that a
            stage after the first one reads. The runner calls the stages'
            prechecks in the pipeline's order before it writes anything.
        resume_reads: files of the run folder (globs, ``"fold-*.pt"``)
            that a resumed run reads where they exist, besides ``resumes``:
            the results of finished folds it keeps, a checkpoint that a run
            stopped in an earlier stage has not written yet. The runner
            reads each one there before it writes, so a damaged one is
            refused before a file changes.
        resume_notes: for a key that ``--resume`` may not change but a
            user may expect to (a budget), why it may not; the refusal says
            it.
        applies: keys that only some settings of other keys use, e.g.
            ``{"chunk_size": {"cell": ("onlstm",)}}``: the other key must
            hold one of the values, or, where a :class:`~graphseq.checks.Domain`
            stands for them, be in it (``{"lr_end": {"steps": positive}}``;
            the refusal quotes its ``allowed``). Where several keys are
            named, each must. A new run that sets such a key where it has
            no use is refused rather than run without it. A key the
            pipeline file sets (not ``--set``) is let be, and left out of
            what runs, where ``--set`` or a run option switched the other
            key away from the file's value, or where that key is a run
            option of the stage (``oracle``): a file may set each mode's
            keys, and the option picks the mode.
        splits: keys whose value the processes share out among them (a
            batch size of streams or graphs), which must divide evenly by
            their number; a launch that they do not divide is refused
            before any process starts.
        makes: what the stage hands on to later sections, by the name of
            the product (a field of :class:`~graphseq.stages.context.Context`)
            and its kind, as a message names it: ``{"data": "a graph dataset"}``.
        needs: what it takes from earlier sections, a kind or the kinds it
            accepts per product: ``{"data": ("a graph dataset", "a dataset
            of graphs")}``. Before a run writes anything, the runner refuses
            a section that needs what no section before it makes, or another
            kind than the latest maker's.
    """

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in STAGES:
            raise ValueError(f"stage {name!r} is registered twice "
                             f"({STAGES[name].__module__} and {fn.__module__})")
        params = stage_params(fn)
        conditions = [*(applies or {}).values(), *([data_parallel] if isinstance(data_parallel, dict) else [])]
        unknown = [k for k in [*(checks or {}), *resume_may_change, *(resume_notes or {}), *(applies or {}),
                               *(on for condition in conditions for on in condition), *splits]
                   if k not in params]
        if unknown:
            raise ValueError(f"stage {name!r} declares {', '.join(unknown)}, which are no parameters of "
                             f"{fn.__qualname__}")
        wants = {product: (kinds,) if isinstance(kinds, str) else tuple(kinds)
                 for product, kinds in (needs or {}).items()}
        strange = [product for product in [*(makes or {}), *wants] if product not in PRODUCTS]
        if strange:
            raise ValueError(f"stage {name!r} makes or needs {', '.join(strange)}, which are no products of "
                             f"graphseq.stages.Context ({', '.join(PRODUCTS)})")
        fn.data_parallel = bool(data_parallel)  # with some settings, at least
        STAGES[name] = fn
        SPECS[name] = StageSpec(name, dict(checks or {}), tuple(options), resumes, tuple(resume_may_change),
                                dict(data_parallel) if isinstance(data_parallel, dict) else data_parallel,
                                precheck, tuple(resume_reads), dict(resume_notes or {}),
                                {key: dict(conditions) for key, conditions in (applies or {}).items()},
                                tuple(splits), dict(makes or {}), wants)
        return fn

    return register


def get_stage(name: str) -> Callable[..., Any]:
    if name not in STAGES:
        raise GraphseqError(f"unknown stage {name!r}; known stages: {', '.join(sorted(STAGES))}")
    return STAGES[name]


def stage_spec(name: str) -> StageSpec:
    get_stage(name)  # An unknown name gets the message that lists the known ones.
    return SPECS[name]


def stage_params(fn: Callable[..., Any]) -> Dict[str, Any]:
    """The keys a stage accepts and their defaults (``inspect.Parameter.empty`` if required)."""
    params = list(inspect.signature(fn).parameters.values())[1:]  # the first is ctx
    return {p.name: p.default for p in params
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}


def check_order(tables: Sequence[Tuple[str, str]]) -> None:
    """Walks a pipeline's ``(section, stage)`` pairs in order and refuses the
    first section that needs what no section before it makes (``needs`` of
    :func:`stage`), or another kind of it than the latest section that makes
    it: a run checks this before it writes anything."""
    made: Dict[str, Tuple[str, str, str]] = {}  # product -> (section, stage, kind) of its latest maker
    for position, (table, name) in enumerate(tables):
        spec = stage_spec(name)
        for product, kinds in spec.needs.items():
            wanted = " or ".join(kinds)
            if product in made:
                maker, maker_stage, kind = made[product]
                if kind not in kinds:
                    raise GraphseqError(f"[{table}] ({name}) needs {wanted}, but the latest {PRODUCTS[product]} "
                                        f"comes from [{maker}] ({maker_stage}: {kind})")
                continue
            verb = "loads" if product == "data" else "makes"
            later = [later for later, later_stage in tables[position + 1:]
                     if stage_spec(later_stage).makes.get(product) in kinds]
            makers = sorted(stage_name for stage_name, other in SPECS.items() if other.makes.get(product) in kinds)
            advice = (f"move a {product} section ([{later[0]}]) before it" if later else
                      "add a section before it with " + " or ".join(f'stage = "{m}"' for m in makers))
            raise GraphseqError(f"[{table}] ({name}) needs {wanted}; no section before it {verb} one: {advice}")
        for product, kind in spec.makes.items():
            made[product] = (table, name, kind)
