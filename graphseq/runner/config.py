"""A pipeline's configuration: finding a named pipeline (``pipelines/NAME.toml``),
reading it, applying ``--set`` overrides, and checking every key's type,
domain and use against the stage that takes it, before anything is written.

A pipeline file is data only: a ``description`` and one section per stage, in
the order they run. A section's ``stage`` key names the registered stage (the
section's own name if absent); every other key is a keyword argument of that
stage function, checked against its signature and its domain
(:mod:`graphseq.checks`); so is what only the whole pipeline can tell, by the
stages' prechecks (:func:`precheck`).
"""
from __future__ import annotations

import copy
import inspect
import json
import math
import os
import tomllib
from pathlib import Path
from typing import Any, Collection, Dict, List, Optional, Sequence, Set

from ..checks import Domain, holds, refusal
from ..data.places import data_places
from ..errors import GraphseqError
from ..stages import Precheck, check_order, get_stage, stage_params, stage_spec

# An installed wheel carries the pipelines inside the package (the build
# copies the top-level pipelines/ there); a source checkout reads them from
# the top-level folder itself, the one place they are written.
_PACKAGE = Path(__file__).resolve().parent.parent
PACKAGE_PIPELINES = (_PACKAGE / "pipelines" if (_PACKAGE / "pipelines").is_dir()
                     else _PACKAGE.parent / "pipelines")

# What config.toml records besides the stage sections; a pipeline file may set
# them too (a run folder's config.toml is a pipeline file).
RUN_KEYS = {"description": str, "pipeline": str, "graphseq": str, "seed": int, "runs": int}


def pipeline_dirs() -> List[Path]:
    """Where named pipelines are looked up: ``$GRAPHSEQ_PIPELINES``, then the
    repository's ``pipelines/`` folder."""
    dirs = [Path(p) for p in os.environ.get("GRAPHSEQ_PIPELINES", "").split(os.pathsep) if p]
    return dirs + [PACKAGE_PIPELINES]


def available_pipelines() -> Dict[str, Path]:
    found: Dict[str, Path] = {}
    for folder in reversed(pipeline_dirs()):
        if folder.is_dir():
            for path in sorted(folder.glob("*.toml")):
                found[path.stem] = path
    return dict(sorted(found.items()))


def resolve_pipeline(name_or_path: str | os.PathLike) -> Path:
    text = str(name_or_path)
    if names_a_file(text):
        path = Path(text)
        if not path.is_file():
            raise GraphseqError(f"pipeline file not found: {path}")
        return path
    known = available_pipelines()
    if text not in known:
        raise GraphseqError(f"unknown pipeline {text!r}; known pipelines: {', '.join(known) or '(none)'}")
    return known[text]


def names_a_file(name_or_path: str | os.PathLike) -> bool:
    """Whether a pipeline argument is a file's path (``x.toml``, ``dir/x``), not a pipeline's name."""
    text = str(name_or_path)
    return text.endswith(".toml") or os.sep in text


def read_config(path: Path) -> Dict[str, Any]:
    try:
        with open(path, "rb") as f:
            config = tomllib.load(f)
    except tomllib.TOMLDecodeError as error:
        # tomllib's message ends in "(at line L, column C)", which names the place.
        raise GraphseqError(f"malformed TOML in {path}: {error}") from None
    except UnicodeDecodeError:
        raise GraphseqError(f"{path} is not UTF-8 text; a pipeline file is TOML in UTF-8") from None
    except OSError as error:
        raise GraphseqError(f"cannot read pipeline file {path}: {error.strerror}") from None
    validate_config(config, source=str(path))
    return config


def sections(config: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    return {k: v for k, v in config.items() if isinstance(v, dict)}


def validate_config(config: Dict[str, Any], source: str) -> None:
    """Checks the keys and the types of every section (domains come later,
    after ``--set``: see :func:`check_domains`)."""
    if not sections(config):
        raise GraphseqError(f"{source}: a pipeline needs at least one [stage] section")
    for key, value in config.items():
        if isinstance(value, dict):
            continue
        if key not in RUN_KEYS:
            raise GraphseqError(f"{source}: unknown top-level key {key!r}; a pipeline file has "
                                f"{', '.join(RUN_KEYS)} and one section per stage")
        if not isinstance(value, RUN_KEYS[key]) or isinstance(value, bool):
            raise GraphseqError(f"{source}: {key} must be {RUN_KEYS[key].__name__}, got {value!r}")
    for name, table in sections(config).items():
        if name in RUN_KEYS:  # config.toml's run settings would overwrite it, and the run its name
            raise GraphseqError(f"{source}: [{name}]: {name} is a setting of the run ({', '.join(RUN_KEYS)}), "
                                f"not a stage's section; rename the section")
        if not name or "." in name:
            raise GraphseqError(f"{source}: [{json.dumps(name, ensure_ascii=False)}]: a section's name must be "
                                f"non-empty and hold no '.', which --set SECTION.KEY splits at; rename the section")
        if not isinstance(table.get("stage", name), str):
            raise GraphseqError(f"{source}: {name}.stage must be a stage's name (a string), "
                                f"got {table['stage']!r}")
        try:
            fn = get_stage(table.get("stage", name))
        except GraphseqError as error:  # which file, which section
            raise GraphseqError(f"{source}: [{name}]: {error}") from None
        known = stage_params(fn)
        for key, value in table.items():
            if key == "stage":
                continue
            if key not in known:
                raise GraphseqError(f"{source}: unknown key {name}.{key}; "
                                    f"known keys of [{name}]: {', '.join(known)}")
            table[key] = _check_type(f"{name}.{key}", value, known[key], source)
        missing = [k for k, d in known.items() if d is _REQUIRED and k not in table]
        if missing:
            raise GraphseqError(f"{source}: [{name}] needs {', '.join(missing)}")


_REQUIRED = inspect.Parameter.empty


def _check_type(key: str, value: Any, default: Any, source: str, current: Any = _REQUIRED) -> Any:
    """``value`` of ``key`` as its stage takes it (an int where a float is
    meant becomes a float), or an error that shows the type wanted: by the
    value the pipeline has (``current``), else by the stage's default."""
    if default is None or default is _REQUIRED:
        return value
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
        if ok and not math.isfinite(value):
            raise GraphseqError(f"{source}: {key} = {value!r} is not allowed: it must be a finite number")
    elif isinstance(default, str):
        ok = isinstance(value, str)
    elif isinstance(default, (list, tuple)):
        ok = isinstance(value, list)
    else:
        ok = True
    if not ok:
        like = (f"like {current!r}, its value in the pipeline" if current is not _REQUIRED
                else f"like its default {default!r}")
        raise GraphseqError(f"{source}: {key} must be {type(default).__name__} ({like}), got {value!r}")
    return value


def parse_override(text: str) -> tuple[str, str, Any]:
    """``"train.lr=0.01"`` -> ``("train", "lr", 0.01)``; the value is read as a
    TOML value, and as a plain string if it is not one."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise GraphseqError(f"--set takes section.key=value, got {text!r}")
    key, raw = text.split("=", 1)
    section, name = key.strip().split(".", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return section, name.strip(), value


def apply_overrides(config: Dict[str, Any], overrides: Sequence[str] | Dict[str, Any] | None
                    ) -> Set[tuple[str, str]]:
    """Sets each ``section.key`` of ``overrides`` in ``config``; returns the
    keys set, as (section, key), for :func:`check_applies`."""
    if not overrides:
        return set()
    items = (overrides.items() if isinstance(overrides, dict)
             else [(f"{s}.{k}", v) for s, k, v in map(parse_override, overrides)])
    tables, given = sections(config), set()
    for key, value in items:
        section, _, name = key.partition(".")
        if section not in tables:
            raise GraphseqError(f"--set {key}: no section [{section}]; "
                                f"sections of this pipeline: {', '.join(tables)}")
        known = stage_params(get_stage(tables[section].get("stage", section)))
        if name not in known:
            raise GraphseqError(f"--set {key}: unknown key {name!r}; "
                                f"known keys of [{section}]: {', '.join(known)}")
        tables[section][name] = _check_type(key, value, known[name], "--set",
                                            tables[section].get(name, _REQUIRED))
        given.add((section, name))
    return given


def check_domains(config: Dict[str, Any], source: str, flags: Collection[tuple[str, str]] = ()) -> None:
    """Every value of every section against its stage's declared domain;
    ``flags``: the keys a run option set, as (section, key), which the
    refusal names by the option (``--labels F``)."""
    for name, table in sections(config).items():
        checks = stage_spec(table.get("stage", name)).checks
        for key, value in table.items():
            if key in checks and not checks[key](value):
                if (name, key) in flags:
                    raise GraphseqError(f"--{key} {value} is not allowed: it must be {checks[key].allowed}")
                raise GraphseqError(f"{source}: {refusal(f'{name}.{key}', value, checks[key])}")


def check_applies(config: Dict[str, Any], source: str, written: Optional[Dict[str, Any]] = None,
                  overridden: Collection[tuple[str, str]] = (), flags: Collection[tuple[str, str]] = ()
                  ) -> List[tuple[str, str]]:
    """A key set where its stage has no use for it (``chunk_size`` for an
    LSTM cell) is refused: the run would ignore it without a word.

    ``written`` is the pipeline file as read, and ``overridden`` the keys
    that ``--set`` gave, as (section, key) (what :func:`apply_overrides`
    returns). A key of the file's own, which ``--set`` did not give, is let
    be where the file sets it for another mode than the one that runs: one
    that ``--set`` or a run option switched away from (the neighbour
    loader's settings after ``train.loader=full``), or any other than the
    one a run option picks (``active.strategy``, which a person answers
    for, when the simulated oracle runs ``active.compare``); the user chose
    the mode and cannot take the file's keys out. Returns them, as
    (section, key), for the run to leave out of what it records. A key a
    run option set (``flags``, as (section, key)) is named by the option,
    as the user typed it: "--labels has no use with --oracle human"."""
    file_tables = sections(written) if written is not None else {}
    let_be = []
    for name, table in sections(config).items():
        kind = table.get("stage", name)
        defaults, spec = stage_params(get_stage(kind)), stage_spec(kind)
        in_file = file_tables.get(name, {})
        for key, conditions in spec.applies.items():
            if key not in table:
                continue
            own = key in in_file and (name, key) not in overridden and in_file[key] == table[key]
            for on, condition in conditions.items():
                setting = table.get(on, defaults[on])
                if holds(condition, setting):
                    continue
                if not (own and (in_file.get(on, defaults[on]) != setting or on in spec.options)):
                    flag = (name, on) in flags
                    if isinstance(condition, Domain):
                        when = f"when {f'--{on}' if flag else f'{name}.{on}'} is {condition.allowed}"
                    elif tuple(condition) in (("",), ([],)):  # "with ''" tells a user nothing
                        when = f"without --{on}" if flag else f"when {name}.{on} is empty (not set)"
                    else:
                        when = "with " + " or ".join(f"--{on} {value}" if flag else repr(value) for value in condition)
                    subject = f"--{key}" if (name, key) in flags else f"{name}.{key}"
                    now = f"with --{on} {setting}" if flag else f"when {name}.{on} = {setting!r}"
                    raise GraphseqError(f"{source}: {subject} has no use {now}: it applies only {when}; leave it out")
                let_be.append((name, key))
    return let_be


def precheck(config: Dict[str, Any], data_root: str | os.PathLike | None = None,
             data_mirror: str | os.PathLike | None = None, options: Optional[Dict[str, Any]] = None,
             resumed: Sequence[Path] = (), runner: Any = None) -> None:
    """Each stage's precheck (see :func:`~graphseq.stages.registry.stage`),
    in the pipeline's order: what only the whole pipeline or its data can
    tell, checked before the run writes anything; ``resumed``, the folders
    a ``--resume`` continues, for what they hold; ``runner``, what a stage
    that runs pipelines of its own checks them with. First, that each
    section has what it needs from the sections before it (its data, its
    model)."""
    check_order([(name, table.get("stage", name)) for name, table in sections(config).items()])
    _check_shared_files(config)
    check = Precheck(*data_places(data_root, data_mirror), dict(options or {}), resumed=tuple(resumed),
                     runner=runner)
    for name, table in sections(config).items():
        kind = table.get("stage", name)
        if stage_spec(kind).precheck is None:
            continue
        params = {k: v for k, v in stage_params(get_stage(kind)).items() if v is not _REQUIRED}
        params.update({k: v for k, v in table.items() if k != "stage"})
        check.section = name
        stage_spec(kind).precheck(check, **params)


def _check_shared_files(config: Dict[str, Any]) -> None:
    """Two sections whose stages continue from the same file (two ``tbptt``
    sections: one ``checkpoint.pt``) would overwrite each other's, and a
    resume would read one's for the other: refused, unless the stage takes
    a ``name`` that tells their files apart and the sections give distinct ones."""
    writers: Dict[tuple, str] = {}  # (file, name) -> "[section] (stage)" that continues from it
    for name, table in sections(config).items():
        kind = table.get("stage", name)
        spec, params = stage_spec(kind), stage_params(get_stage(kind))
        if not spec.resumes:
            continue
        key = (spec.resumes, table.get("name", params["name"]) if "name" in params else None)
        if key in writers:
            advice = ("give them distinct names (name = ...)" if "name" in params
                      else "run them as two pipelines")
            raise GraphseqError(f"[{name}] ({kind}) continues from {spec.resumes}, as {writers[key]} does: the "
                                f"two would overwrite each other's and a resume would read one's for the other; "
                                f"{advice}")
        writers[key] = f"[{name}] ({kind})"


def checked_config(pipeline: str | os.PathLike, overrides: Sequence[str] | Dict[str, Any] | None = None
                   ) -> Dict[str, Any]:
    """The settings of ``pipeline`` with ``overrides``, their keys, types,
    domains and uses checked as :func:`run` checks them (less the file's
    settings :func:`check_applies` lets be); writes nothing. A stage that
    runs a pipeline of its own checks it with this (and :func:`precheck`)
    before its run writes a file."""
    path = resolve_pipeline(pipeline)
    config = read_config(path)
    written = copy.deepcopy(config)
    given = apply_overrides(config, overrides)
    check_domains(config, config.get("pipeline") or path.stem)
    for section, key in check_applies(config, config.get("pipeline") or path.stem, written, given):
        config[section].pop(key, None)
    return config
