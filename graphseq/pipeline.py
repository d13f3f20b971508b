"""Reads a named pipeline (``pipelines/NAME.toml``), applies ``--set``
overrides, and threads one :class:`Context` through its stages, once per seed.

A pipeline file is data only: a ``description`` and one table per stage, in
the order they run. A table's ``stage`` key names the registered stage (the
table's own name if absent); every other key is a keyword argument of that
stage function, checked against its signature and its domain
(:mod:`graphseq.checks`) before anything is written; so is what only the
whole pipeline can tell, by the stages' prechecks (:func:`precheck`).

A run folder's ``config.toml`` records how the run was started: the
pipeline, every resolved setting, the seeds and the graphseq version. It is a
pipeline file itself, and ``--resume`` continues with what it says.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import inspect
import io
import json
import logging
import math
import os
import re
import shlex
import shutil
import statistics
import sys
import time
import tomllib
from collections import ChainMap, Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Dict, List, Optional, Sequence, Set

import torch

try:
    import fcntl
except ImportError:  # Windows: run folders are not locked.
    fcntl = None

from . import __version__, distributed
from .checks import Domain, holds, is_whole_number, refusal
from .errors import GraphseqError, end_interrupted_line
from .io import (atomic_write_bytes, atomic_write_text, check_file_place, check_stored_file, load_checkpoint,
                 read_utf8, remove_temporaries, write_json)
from .seeding import MAX_SEED, seed_everything
from .stages import Precheck, get_stage, stage_params, stage_spec

# An installed wheel carries the pipelines inside the package (the build
# copies the top-level pipelines/ there); a source checkout reads them from
# the top-level folder itself, the one place they are written.
_PACKAGE = Path(__file__).resolve().parent
PACKAGE_PIPELINES = (_PACKAGE / "pipelines" if (_PACKAGE / "pipelines").is_dir()
                     else _PACKAGE.parent / "pipelines")

# What config.toml records besides the stage tables; a pipeline file may set
# them too (a run folder's config.toml is a pipeline file).
RUN_KEYS = {"description": str, "pipeline": str, "graphseq": str, "seed": int, "runs": int}


# --------------------------------------------------------------------------- #
# Finding and reading pipelines
# --------------------------------------------------------------------------- #

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
    """Checks the keys and the types of every table (domains come later,
    after ``--set``: see :func:`check_domains`)."""
    if not sections(config):
        raise GraphseqError(f"{source}: a pipeline needs at least one [stage] table")
    for key, value in config.items():
        if isinstance(value, dict):
            continue
        if key not in RUN_KEYS:
            raise GraphseqError(f"{source}: unknown top-level key {key!r}; a pipeline file has "
                                f"{', '.join(RUN_KEYS)} and one table per stage")
        if not isinstance(value, RUN_KEYS[key]) or isinstance(value, bool):
            raise GraphseqError(f"{source}: {key} must be {RUN_KEYS[key].__name__}, got {value!r}")
    for name, table in sections(config).items():
        if name in RUN_KEYS:  # config.toml's run settings would overwrite it, and the run its name
            raise GraphseqError(f"{source}: [{name}]: {name} is a setting of the run ({', '.join(RUN_KEYS)}), "
                                f"not a stage's table; rename the table")
        if not name or "." in name:
            raise GraphseqError(f"{source}: [{json.dumps(name, ensure_ascii=False)}]: a table's name must be "
                                f"non-empty and hold no '.', which --set TABLE.KEY splits at; rename the table")
        if not isinstance(table.get("stage", name), str):
            raise GraphseqError(f"{source}: {name}.stage must be a stage's name (a string), "
                                f"got {table['stage']!r}")
        try:
            fn = get_stage(table.get("stage", name))
        except GraphseqError as error:  # which file, which table
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


def check_domains(config: Dict[str, Any], source: str) -> None:
    """Every value of every table against its stage's declared domain."""
    for name, table in sections(config).items():
        checks = stage_spec(table.get("stage", name)).checks
        for key, value in table.items():
            if key in checks and not checks[key](value):
                raise GraphseqError(f"{source}: {refusal(f'{name}.{key}', value, checks[key])}")


def check_applies(config: Dict[str, Any], source: str, written: Optional[Dict[str, Any]] = None,
                  overridden: Collection[tuple[str, str]] = ()) -> List[tuple[str, str]]:
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
    (section, key), for the run to leave out of what it records."""
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
                    if isinstance(condition, Domain):
                        when = f"when {name}.{on} is {condition.allowed}"
                    elif tuple(condition) in (("",), ([],)):  # "with ''" tells a user nothing
                        when = f"when {name}.{on} is empty (not set)"
                    else:
                        when = f"with {' or '.join(map(repr, condition))}"
                    raise GraphseqError(f"{source}: {name}.{key} has no use when {name}.{on} = {setting!r}: it "
                                        f"applies only {when}; leave it out")
                let_be.append((name, key))
    return let_be


def precheck(config: Dict[str, Any], data_root: str | os.PathLike | None = None,
             data_mirror: str | os.PathLike | None = None, options: Optional[Dict[str, Any]] = None,
             resumed: Sequence[Path] = ()) -> None:
    """Each stage's precheck (see :func:`~graphseq.stages.registry.stage`),
    in the pipeline's order: what only the whole pipeline or its data can
    tell, checked before the run writes anything; ``resumed``, the folders
    a ``--resume`` continues, for what they hold. First, that each table
    has what it needs from the tables before it (its data, its model)."""
    from .stages import check_order  # (the stages' registry walks the tables it describes)
    check_order([(name, table.get("stage", name)) for name, table in sections(config).items()])
    _check_shared_files(config)
    check = Precheck(*data_places(data_root, data_mirror), dict(options or {}), resumed=tuple(resumed))
    for name, table in sections(config).items():
        kind = table.get("stage", name)
        if stage_spec(kind).precheck is None:
            continue
        params = {k: v for k, v in stage_params(get_stage(kind)).items() if v is not _REQUIRED}
        params.update({k: v for k, v in table.items() if k != "stage"})
        check.table = name
        stage_spec(kind).precheck(check, **params)


def _check_shared_files(config: Dict[str, Any]) -> None:
    """Two tables whose stages continue from the same file (two ``tbptt``
    tables: one ``checkpoint.pt``) would overwrite each other's, and a
    resume would read one's for the other: refused, unless the stage takes
    a ``name`` that tells their files apart and the tables give distinct ones."""
    writers: Dict[tuple, str] = {}  # (file, name) -> "[table] (stage)" that continues from it
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


def dump_toml(config: Dict[str, Any]) -> str:
    """Writes the flat two-level configs graphseq uses back as TOML."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v, ensure_ascii=False)  # JSON's escapes are TOML's
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        raise TypeError(f"cannot write {v!r} as TOML")

    def key(name: str) -> str:  # a bare key where TOML allows one, else a quoted one ("modèle", "my data")
        return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name, ensure_ascii=False)

    lines = [f"{k} = {value(v)}" for k, v in config.items() if not isinstance(v, dict)]
    for name, table in sections(config).items():
        lines += ["", f"[{key(name)}]"] + [f"{key(k)} = {value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- #
# Running
# --------------------------------------------------------------------------- #

@dataclass
class Context:
    """What one run's stages share. Stages add their products as attributes
    (``ctx.data``, ``ctx.model``, ...) and their figures to ``ctx.metrics``
    (in a run, each table's own, read through to the earlier tables'; see
    :func:`table_figures` for how metrics.json records them).

    ``resume`` tells a stage to continue from its file in ``out``;
    ``resume_command`` is what a person types to continue this run, and a
    stage sets ``stopped`` when its oracle asked to stop (no later seed runs).
    """

    pipeline: str
    out: Path
    device: torch.device
    seed: int
    data_root: Path
    data_mirror: Optional[Path]
    quiet: bool = False
    resume: bool = False
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("graphseq"))
    metrics: Dict[str, Any] = field(default_factory=dict)
    options: Dict[str, Any] = field(default_factory=dict)
    resume_command: str = ""
    stopped: bool = False
    table: str = ""  # the running stage's table, as a user names its keys (--set train.steps=N)

    def require(self, name: str, stage: str) -> Any:
        if not hasattr(self, name):
            where = f"[{self.table}] ({stage})" if self.table else f"stage {stage!r}"  # (a stage called by hand)
            raise GraphseqError(f"{where} needs {name!r}, which no table before it made; "
                                f"check the order of the pipeline's tables")
        return getattr(self, name)


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``auto`` (CUDA if there is one), ``cpu``, ``cuda`` or ``cuda:N``."""
    name = str(device)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or (name.startswith("cuda:") and is_whole_number(name[5:])):
        if not torch.cuda.is_available():
            raise GraphseqError(f"--device {name} was asked for, but this machine has no CUDA device "
                                "(or this torch build has no CUDA); use --device cpu or auto")
        index = int(name[5:]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise GraphseqError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA "
                                f"device(s), cuda:0 to cuda:{torch.cuda.device_count() - 1}")
        return torch.device(name)
    raise GraphseqError(f"--device {name!r} is not supported; use auto, cpu, cuda or cuda:N")


def default_data_root() -> Path:
    # An empty GRAPHSEQ_DATA (``GRAPHSEQ_DATA= graphseq run ...``) is unset, as
    # the mirror's is: as a path it would be the working folder.
    return Path(os.environ.get("GRAPHSEQ_DATA") or "datasets")


def default_data_mirror() -> Optional[Path]:
    mirror = os.environ.get("GRAPHSEQ_MIRROR")
    return Path(mirror) if mirror else None


def data_places(data_root: str | os.PathLike | None, data_mirror: str | os.PathLike | None
                ) -> tuple[Path, Optional[Path]]:
    """The data root and mirror a run reads: those given, else the defaults.
    An empty one given is refused: ``--data-root "$DATA"`` with ``DATA``
    unset would otherwise write the datasets into the working folder.
    So are a data root and a mirror where the run would write into the
    mirror (:func:`_check_root_outside_mirror`)."""
    for value, option in ((data_root, "--data-root"), (data_mirror, "--data-mirror")):
        if value is not None and not str(value).strip():
            raise GraphseqError(f"{option} is empty; name a folder, or leave the option out for its default")
    root = Path(data_root) if data_root is not None else default_data_root()
    mirror = Path(data_mirror) if data_mirror is not None else default_data_mirror()
    if mirror is not None:
        _check_root_outside_mirror(root, mirror, "--data-root" if data_root is not None else
                                   "GRAPHSEQ_DATA" if os.environ.get("GRAPHSEQ_DATA") else "the default data root",
                                   "--data-mirror" if data_mirror is not None else "GRAPHSEQ_MIRROR")
    return root, mirror


def dataset_folders() -> tuple[str, ...]:
    """The folders of the data root that the dataset loaders write (the raw
    files they copy or download, PyG's ``processed/`` caches), under the
    names the loaders give them."""
    from .data import captions, imdb, miniimagenet, omniglot, planetoid, polarity, ppi, text
    return (*planetoid.NAMES.values(), ppi.FOLDER, omniglot.FOLDER, miniimagenet.FOLDER, polarity.FOLDER,
            text.TINY_SHAKESPEARE_FOLDER, imdb.FOLDER, captions.COCO_FOLDER)


def _check_root_outside_mirror(root: Path, mirror: Path, root_from: str, mirror_from: str) -> None:
    """Refuses a data root and a mirror that a run's writes would carry from
    the one into the other, as the paths resolve (links and '..' followed):
    a run writes its downloads, the raw files it copies and PyG's
    ``processed/`` caches into the data root's dataset folders
    (``ROOT/Cora``, :func:`dataset_folders`), and the mirror is read-only,
    to stay as its owner made it (it may be shared by other runs and
    machines). So the data root may not be the mirror or lie inside it, and
    a mirror may not be one of the root's dataset folders or lie inside one
    (``--data-mirror ROOT/Cora`` or ``ROOT/Cora/raw``), nor may such a
    folder be a link into the mirror (:func:`_check_mirror_outside_dataset_folders`).
    A mirror elsewhere inside the data root (``ROOT/mirror``) is let be: the
    run writes beside it, not in it, and reads it as it reads any other folder."""
    try:
        resolved_root, resolved_mirror = root.resolve(), mirror.resolve()
    except (OSError, RuntimeError):  # a link loop, a folder not to be entered: the data loaders name it
        return
    if resolved_root == resolved_mirror:
        where = "is the data mirror"
    elif resolved_root.is_relative_to(resolved_mirror):
        where = "lies inside the data mirror"
    else:
        _check_mirror_outside_dataset_folders(resolved_root, resolved_mirror, root_from, mirror_from)
        return
    raise GraphseqError(f"the data root {resolved_root} ({root_from}) {where} {resolved_mirror} ({mirror_from}), "
                        f"which a run only reads: it would write its datasets' files there; give a data root "
                        f"outside the mirror")


def _check_mirror_outside_dataset_folders(root: Path, mirror: Path, root_from: str, mirror_from: str) -> None:
    """Refuses the (resolved) ``mirror`` where one of the (resolved) data
    ``root``'s dataset folders is it, holds it, or, through a link, lies
    inside it: the run would write that dataset's files into the mirror.
    Every dataset folder counts, whichever the pipeline reads: a mirror
    there would be written by the next pipeline that reads that dataset."""
    names = dataset_folders()
    for name in names:
        try:
            folder = (root / name).resolve()
        except (OSError, RuntimeError):  # a link loop: the loader of that dataset names it
            continue
        if folder == mirror:
            where = "is"
        elif mirror.is_relative_to(folder):
            where = "holds"
        elif folder.is_relative_to(mirror):
            where = "lies inside"
        else:
            continue
        linked = folder != root / name
        remedy = (f"make {root / name} a folder of its own, not a link" if where == "lies inside" else
                  f"give a mirror outside the data root's dataset folders ({', '.join(names)})")
        raise GraphseqError(f"the data root's {name} folder {root / name} ({root_from}"
                            f"{f', a link to {folder}' if linked else ''}) {where} the data mirror {mirror} "
                            f"({mirror_from}): a run writes its {name} files there (raw copies, PyG's processed/ "
                            f"cache), and the mirror is only read; {remedy}")


def _logger(out: Path, quiet: bool) -> logging.Logger:
    log = logging.getLogger(f"graphseq.run.{out.resolve()}")
    log.handlers.clear()
    log.setLevel(logging.INFO)
    log.propagate = False
    if not distributed.is_main():  # Rank 0 alone logs, once for all.
        log.addHandler(logging.NullHandler())
        return log
    handler = logging.FileHandler(out / "log.txt")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    log.addHandler(handler)
    if not quiet:
        console = logging.StreamHandler(sys.stderr)
        console.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(console)
    return log


def summarize(runs: List[Dict[str, Any]]) -> Dict[str, Dict[str, float]]:
    """Mean and (sample) standard deviation of every numeric figure of the runs."""
    mean, std = {}, {}
    for key in runs[0]:
        if key == "seed":
            continue
        values = [r.get(key) for r in runs]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            mean[key] = statistics.fmean(values)
            std[key] = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": mean, "std": std}


# --------------------------------------------------------------------------- #
# Checks before a run writes anything
# --------------------------------------------------------------------------- #

def _check_seeds(seed: Any, runs: Any) -> None:
    if not isinstance(runs, int) or isinstance(runs, bool) or runs < 1:
        raise GraphseqError(f"--runs must be a whole number of at least 1, got {runs!r}")
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
        raise GraphseqError(f"--seed must be a whole number from 0 to {MAX_SEED}, got {seed!r}")
    if seed + runs - 1 > MAX_SEED:
        raise GraphseqError(f"--seed {seed} --runs {runs}: the last seed, {seed + runs - 1}, "
                            f"is beyond {MAX_SEED}")


def _check_out(out: Path) -> None:
    """``out`` is a folder, or can become one: no file in the way, and a
    writable folder above it."""
    if out.is_symlink() and not out.exists():
        raise GraphseqError(f"--out {out} is a link to {os.readlink(out)}, which does not exist")
    if out.exists() and not out.is_dir():
        raise GraphseqError(f"--out {out} is a file, not a folder")
    existing = out
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise GraphseqError(f"--out {out}: {existing} is a file, so no folder can be made under it")
    read_only_fs = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
    if read_only_fs or not os.access(existing, os.W_OK | os.X_OK):
        raise GraphseqError(f"--out {out}: cannot write in {existing}" +
                            (" (a read-only file system)" if read_only_fs else " (no permission)"))


def _check_file_places(out: Path, config: Dict[str, Any], seed: int, runs: int, prefix: str = "") -> None:
    """Refuses a folder (or a named pipe, a device) where the run writes one
    of its files: the runner's own, each seed's folder and its metrics, and
    the files the stages continue from. A file is written by renaming a
    temporary one over it, which a folder stops; found only then, the run
    would fail after its training."""
    places = [out / name for name in (*RUNNER_FILES, "metrics.json")]
    for run_seed in range(seed, seed + runs):
        folder = _seed_dir(out, run_seed, runs)
        if runs > 1:
            if folder.exists() and not folder.is_dir():
                raise GraphseqError(f"{prefix}{folder} is a file, not a folder; move it away")
            places.append(folder / "metrics.json")
        places += [folder / file for file in resumable_files(config)] + _read_on_resume(folder, config)
    for path in places:
        check_file_place(path, prefix)


def _apply_options(config: Dict[str, Any], options: Dict[str, Any], name: str) -> Dict[str, Any]:
    """Refuses run options no stage consumes; an option named like a
    parameter of a stage that declares it sets that parameter (recorded in
    config.toml). Returns what the stages get as ``ctx.options``: objects
    (an oracle handed in through the Python API)."""
    objects = {}
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
    return objects


def _lock_out(out: Path) -> Optional[int]:
    """Holds the folder ``out`` for this run with an advisory lock on the
    folder itself (no file is written), so that a second run on it is
    refused while this one lives; the descriptor to close at the end, or
    None where folders cannot be locked. Under torchrun rank 0 holds it."""
    if fcntl is None or not distributed.is_main():
        return None
    try:
        descriptor = os.open(out, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise GraphseqError(f"--out {out} is in use by another graphseq run; wait for it to end, "
                            f"or choose another --out") from None
    except OSError:  # a file system without locks
        os.close(descriptor)
        return None
    return descriptor


def _close_lock(descriptor: Optional[int]) -> None:
    if descriptor is not None:
        os.close(descriptor)


def _check_world_size(path: Path) -> None:
    """Refuses, before any worker starts, to resume the checkpoint ``path``
    with another number of processes than the one that wrote it."""
    if path.suffix != ".pt":
        return
    stored = load_checkpoint(path)
    size = stored.get("world_size") if isinstance(stored, dict) else None
    processes = distributed.planned_world_size()
    if isinstance(size, int) and size != processes:
        raise GraphseqError(f"--resume: {path} was written by {size} process(es); resume it with the same "
                            f"number (" + (f"--nproc-per-node {size}" if size > 1 else "without --nproc-per-node")
                            + f"; this run has {processes})")


def resumable_files(config: Dict[str, Any]) -> List[str]:
    """The files the pipeline's stages continue from."""
    return [stage_spec(t.get("stage", n)).resumes for n, t in sections(config).items()
            if stage_spec(t.get("stage", n)).resumes]


def continues_from(out: Path, config: Dict[str, Any]) -> bool:
    """Whether ``out`` (or one of its seed folders) holds a file a stage of
    the pipeline continues from, so that ``--resume`` has something to read."""
    return any(path.is_file() for file in resumable_files(config) for path in (out / file, *out.glob(f"seed-*/{file}")))


def interrupted_line(pipeline: str | os.PathLike, out: Path, config: Dict[str, Any],
                     before: Optional[Dict[Path, tuple]], resume_options: str = "",
                     data_root: str | os.PathLike | None = None,
                     data_mirror: str | os.PathLike | None = None) -> Optional[str]:
    """What the log of a run interrupted in ``out`` ends with: how to
    continue it (``resume_options`` added to the command, ``--nproc-per-node
    N`` for a launch), or that the same command starts it again where a stage
    stored a file since ``before`` but nothing to continue from; None for a
    pipeline that cannot resume or a run that stored nothing."""
    if not resumable_files(config):
        return None
    if continues_from(out, config):
        return f"interrupted; continue with: {resume_command(pipeline, out, data_root, data_mirror)}{resume_options}"
    if stage_stored(out, before):
        return (f"interrupted before anything was stored to continue from; the same command starts it again "
                f"in {shlex.quote(str(out))}")
    return None


def _read_on_resume(folder: Path, config: Dict[str, Any]) -> List[Path]:
    """The files of ``folder`` besides the ones continued from that the
    pipeline's stages declare they read on resuming (``resume_reads``)."""
    patterns = [pattern for n, t in sections(config).items()
                for pattern in stage_spec(t.get("stage", n)).resume_reads]
    found = {path for pattern in patterns for path in folder.glob(pattern)}
    return sorted(found - {folder / file for file in resumable_files(config)})


def _differences(started: Dict[str, Any], now: Dict[str, Any]) -> List[str]:
    """Settings of ``now`` that differ from the run as ``started``, except
    those the stages let a resumed run change, each with its stage's note
    of why it may not change where it has one. A key one of them does not
    record has its stage's default; a budget the stages let change may
    only grow (:data:`BUDGETS`)."""
    found = []
    for name, table in sections(now).items():
        kind = table.get("stage", name)
        spec, defaults = stage_spec(kind), stage_params(get_stage(kind))
        before = started.get(name, {})
        for key in sorted((set(table) | set(before)) - {"stage"}):
            new, old = (_listed(t.get(key, defaults.get(key))) for t in (table, before))
            if key not in spec.resume_may_change and new != old:
                note = f": {spec.resume_notes[key]}" if key in spec.resume_notes else ""
                found.append(f"{name}.{key} = {new!r} (the run has {old!r}){note}")
            elif key in spec.resume_may_change and _shorter(key, new, old):
                none = ", no limit" if BUDGETS[key] and old == 0 else ""
                found.append(f"{name}.{key} = {new!r} (the run has {old!r}{none}): a resumed run may take a "
                             f"longer budget, not a shorter one")
    return found


# The budgets a stage may let a resumed run change, which may only grow;
# True where 0 means no limit (the longest). Other keys a stage lets change
# change freely: an oracle, the folds to run, a test's batch size, and the
# episodes of a test or an oracle (the stage refuses fewer than it answered).
BUDGETS = {"steps": True, "minutes": True, "budget": False}


def _listed(value: Any) -> Any:
    """A stage's default list (a tuple in its signature) as TOML reads one."""
    return list(value) if isinstance(value, tuple) else value


def _shorter(key: str, new: Any, old: Any) -> bool:
    """Whether ``new`` is a shorter budget ``key`` than ``old``."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (new, old))
    if key not in BUDGETS or not numbers:
        return False
    if BUDGETS[key]:
        return (old == 0 and new != 0) or 0 < new < old
    return new < old


def _changed_budgets(started: Dict[str, Any], now: Dict[str, Any]) -> List[str]:
    """The budgets a resumed run lengthens, as ``name.key = new (was old)``."""
    changed = []
    for name, table in sections(now).items():
        kind = table.get("stage", name)
        spec, defaults = stage_spec(kind), stage_params(get_stage(kind))
        for key in (k for k in spec.resume_may_change if k in BUDGETS):
            new, old = table.get(key, defaults.get(key)), started.get(name, {}).get(key, defaults.get(key))
            if new != old:
                changed.append(f"{name}.{key} = {new!r} (was {old!r})")
    return changed


# config.toml begins with this comment and the SHA-256 of the rest: a
# resumed run refuses the file edited by hand, which would contradict its
# stored state (another lr, a shorter budget) without a word.
STAMP = "# graphseq wrote this file; --resume refuses it edited (sha256 "


def _stamped(text: str) -> str:
    return f"{STAMP}{hashlib.sha256(text.encode()).hexdigest()}); change a budget with --set\n{text}"


def _check_stamp(recorded: Path) -> None:
    """Refuses a run's config.toml edited since the runner wrote it; one
    written before files were stamped is taken as it is."""
    first, _, rest = read_utf8(recorded).partition("\n")
    if first.startswith(STAMP) and _stamped(rest) != f"{first}\n{rest}":
        raise GraphseqError(f"--resume: {recorded} was edited after the run wrote it; undo the edit (a resumed "
                            f"run continues with the settings it was started with) and give what may change, "
                            f"a longer budget, with --set")


def _started_config(out: Path, name: str, pipeline_path: Path) -> Dict[str, Any]:
    """The config a run folder recorded, checked to be of the same pipeline."""
    recorded = out / "config.toml"
    check_file_place(recorded, "--resume: ")
    if not recorded.is_file():
        raise GraphseqError(f"--resume: {out} holds no earlier run (no config.toml)")
    started = read_config(recorded)
    _check_stamp(recorded)
    started_name = started.get("pipeline", "")
    if started_name != name:
        raise GraphseqError(f"--resume: {out} holds a run of pipeline {started_name or '(unknown)'!r}, "
                            f"not {name!r}; resume it with 'graphseq run {started_name or 'NAME'} "
                            f"--resume --out {out}'")
    return started


def resume_command(pipeline: str | os.PathLike, out: Path, data_root: str | os.PathLike | None = None,
                   data_mirror: str | os.PathLike | None = None) -> str:
    """What a person types to continue the run in ``out``. A run started
    from a pipeline file continues from its own config.toml: the file may
    not hold the settings given with --set, which a resume compares it with.
    The data root and mirror the run was given are given again: without
    them it would look for its datasets in the default places, and offline
    find none."""
    given = out / "config.toml" if names_a_file(pipeline) else pipeline
    return f"graphseq run {shlex.quote(str(given))} --resume --out {shlex.quote(str(out))}" + "".join(
        f" {option} {shlex.quote(str(value))}"
        for option, value in (("--data-root", data_root), ("--data-mirror", data_mirror)) if value is not None)


def _seed_dir(out: Path, seed: int, runs: int) -> Path:
    return out if runs == 1 else out / f"seed-{seed}"


def _seed_started(folder: Path, config: Dict[str, Any]) -> bool:
    """Whether a seed's folder holds a file to continue from: one interrupted
    before its first (a folder, a tokenizer) starts afresh on --resume."""
    return any((folder / file).is_file() for file in resumable_files(config))


def _plain(value: Any) -> Any:
    return str(Path(value).resolve()) if isinstance(value, os.PathLike) else value


# --------------------------------------------------------------------------- #
# The run
# --------------------------------------------------------------------------- #

def run(pipeline: str | os.PathLike, overrides: Sequence[str] | Dict[str, Any] | None = None,
        seed: Optional[int] = None, runs: Optional[int] = None, device: str = "auto",
        out: str | os.PathLike | None = None, data_root: str | os.PathLike | None = None,
        data_mirror: str | os.PathLike | None = None, quiet: bool = False, resume: bool = False,
        threads: Optional[int] = None, **options: Any) -> Dict[str, Any]:
    """Runs a pipeline ``runs`` times with seeds ``seed .. seed+runs-1``
    (default: seed 0, one run, or what a run folder's ``config.toml`` says).

    Writes ``config.toml``, ``log.txt`` and ``metrics.json`` into ``out``
    (each run's own checkpoint and figures into ``out/seed-N`` when
    ``runs > 1``) and returns the contents of ``metrics.json``: a list
    ``runs`` of per-run figures and their ``mean`` and ``std`` (a figure
    that two tables record, each under ``TABLE.KEY``: :func:`table_figures`).

    Extra keyword ``options`` are run options that a stage of the pipeline
    declares (``oracle="human"``, ``labels="answers.csv"``); one that none
    declares is refused. ``resume=True`` continues the run in ``out`` with
    the settings it was started with, which its ``config.toml`` records: a
    different pipeline, seed, option or ``overrides`` value is refused,
    except what a stage lets change (a budget, which may only grow: see
    :data:`BUDGETS`); a key config.toml does not record is at its stage's
    default. ``pipeline`` names the pipeline; given as a file other than
    ``out/config.toml`` (``other-run/config.toml``), the file's settings
    are asked for as ``overrides`` are, and compared in the same way
    (``out/config.toml`` itself, or a pipeline's name, asks for nothing).
    A run started from a file is therefore continued with ``graphseq run
    OUT/config.toml --resume``, which is what an interrupted run says to
    type. A config.toml edited by hand since the run wrote it is refused.
    Everything is checked before anything is written, so a refused call
    changes no file. ``threads`` sets torch's number of CPU threads.
    Without a standard error (``2>&-``) the run is quiet, as nothing can
    be drawn or said there; its log.txt keeps every line.
    """
    quiet = quiet or sys.stderr is None
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
        started = _started_config(out, name, path)
        if names_a_file(pipeline) and path.resolve() != (out / "config.toml").resolve():
            from_file = copy.deepcopy(config)  # Another file than the run's own asks for its settings, as --set does.
        config = copy.deepcopy(started)  # The overrides may change it; started stays.
        for option in ("seed", "runs"):
            if option in from_file and from_file[option] != started.get(option, from_file[option]):
                raise GraphseqError(f"--resume: {path} has {option} = {from_file[option]}, the run's "
                                    f"{option} = {started[option]}; resume with {out / 'config.toml'}")
        for section, table in sections(from_file).items():
            if section not in config:
                raise GraphseqError(f"--resume: {path} has a table [{section}], which the run in {out} has not; "
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
    objects = _apply_options(config, options, name)
    check_domains(config, name)
    if not resume:  # A run started before a key was found unused still continues.
        # Keys let be are not recorded: config.toml holds what runs, and runs again as a pipeline file.
        for section, key in check_applies(config, name, written, given):
            config[section].pop(key, None)
    elif from_file:  # The file's keys for another mode were let be when the run started from it.
        for section, key in check_applies(config, name, from_file, given):
            if key not in started[section]:
                config[section].pop(key, None)
    torch_device = resolve_device(device)
    # Several processes (torchrun, --nproc-per-node): check, then join the group.
    torch_device = distributed.join(name, config, torch_device, options)
    _check_out(out)
    if not resume:  # (--resume checked it as it read the run's config.toml)
        check_file_place(out / "config.toml")
    if resume:
        files = resumable_files(config)
        differ, changed = _differences(started, config), _changed_budgets(started, config)
        if differ:
            raise GraphseqError(f"--resume: the run in {out} was started with other settings: "
                                + "; ".join(differ))
        _check_file_places(out, config, seed, runs, "--resume: ")
        for run_seed in range(seed, seed + runs):
            folder = _seed_dir(out, run_seed, runs)
            if runs > 1 and not _seed_started(folder, config):
                continue  # This seed had stored nothing to continue from; it starts afresh.
            for file in files:
                if not (folder / file).is_file():
                    advice = ("it stopped before it stored anything to continue from, so start it again without "
                              "--resume" if not continues_from(out, config) else "start a new run with another --out")
                    raise GraphseqError(f"--resume: {folder / file} is missing, so the run cannot "
                                        f"continue where it stopped; {advice}")
                check_stored_file(folder / file)
                _check_world_size(folder / file)
            for stored in _read_on_resume(folder, config):
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
        _check_file_places(out, config, seed, runs)

    resumed = [folder for folder in (_seed_dir(out, s, runs) for s in range(seed, seed + runs)) if folder.is_dir()]
    precheck(config, data_root, data_mirror, objects, resumed if resume else ())
    if out.is_dir():  # A run that holds the folder refuses this one here, before any worker starts.
        _close_lock(_lock_out(out))
    # What was there, seen before the barrier: after it, another worker may make --out first.
    before = _snapshot(out)
    made = [folder for folder in (out, *out.parents) if not folder.exists()]  # --out and new folders above it
    distributed.barrier()  # Every process has checked before rank 0 writes.
    # Checked: from here on the run writes.
    if threads is not None:
        torch.set_num_threads(threads)
    config = {"description": config.get("description", ""), "pipeline": name, "graphseq": __version__,
              "seed": seed, "runs": runs, **sections(config)}
    lock = _lock_out(out) if out.is_dir() else None  # Refused here, a second run has written nothing.
    out.mkdir(parents=True, exist_ok=True)
    lock = lock if lock is not None else _lock_out(out)  # A folder made at once by two runs: one goes on.
    log = None
    try:
        if distributed.is_main():
            remove_temporaries(out)  # what a run killed while writing left (the folder is locked)
        if distributed.is_main() and (
                not resume or _stamped(dump_toml(config)) != (out / "config.toml").read_text(encoding="utf-8")):
            atomic_write_text(out / "config.toml", _stamped(dump_toml(config)))
        log = _logger(out, quiet)
        return _run_seeds(config, name, out, seed, runs, torch_device, resume, quiet, log, objects,
                          data_root, data_mirror, pipeline, changed)
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt) and log is not None:
            # A launched worker's checkpoint resumes only with as many workers; the launcher then
            # sees the line written and leaves it (see distributed._log_interrupt).
            line = interrupted_line(pipeline, out, config, before, distributed.relaunch_options(), data_root,
                                    data_mirror)
            if line is not None:
                for handler in _console_handlers(log):
                    end_interrupted_line(error, handler.stream)
                log.info(line)
        _close(log)
        if distributed.is_main() and (not resume or isinstance(error, GraphseqError)):
            undo_run_folder(out, before, made)
        raise
    finally:
        _close(log)
        if lock is not None:
            os.close(lock)
        distributed.teardown()


def _run_seeds(config: Dict[str, Any], name: str, out: Path, seed: int, runs: int,
               device: torch.device, resume: bool, quiet: bool, log: logging.Logger,
               objects: Dict[str, Any], data_root: Any, data_mirror: Any,
               pipeline: str | os.PathLike, changed: Sequence[str] = ()) -> Dict[str, Any]:
    root, mirror = data_places(data_root, data_mirror)
    log.info(f"pipeline {name} on {device}, seeds {seed}..{seed + runs - 1}, out {out}"
             + (" (resumed)" if resume else ""))
    if changed:  # config.toml holds the new value, as if the run had been started with it
        log.info(f"resumed with {', '.join(changed)}; config.toml now records it, so graphseq run "
                 f"{out / 'config.toml'} would go straight to it, which need not repeat this resumed run "
                 f"(whose schedule was set for the first budget, then stretched)")
    command = resume_command(pipeline, out, data_root, data_mirror) + distributed.relaunch_options()
    results = []
    # Quiet: what stages and libraries print to stderr (PyG's "Processing...",
    # warnings) goes to log.txt instead of the console.
    with contextlib.redirect_stderr(_LogStream(log)) if quiet else contextlib.nullcontext():
        for run_seed in range(seed, seed + runs):
            metrics, stopped = _run_seed(config, out, run_seed, runs, device, resume, quiet, log,
                                         objects, root, mirror, name, command)
            results.append(metrics)
            if stopped:
                log.info(f"stopped at seed {run_seed}; continue with: {command}")
                break

    summary = {"pipeline": name, "runs": results, **summarize(results)}
    if len(results) < runs:
        summary["stopped"] = True
    if distributed.is_main():
        write_json(out / "metrics.json", summary)
    if len(results) > 1:
        log.info("mean over %d runs: %s", len(results), _format(summary["mean"], summary["std"]))
    return summary


def _run_seed(config: Dict[str, Any], out: Path, run_seed: int, runs: int, device: torch.device,
              resume: bool, quiet: bool, log: logging.Logger, objects: Dict[str, Any], root: Path,
              mirror: Optional[Path], name: str, resume_command: str) -> tuple[Dict[str, Any], bool]:
    """Runs the stages once, for one seed; returns its figures and whether its
    oracle asked to stop."""
    run_out = _seed_dir(out, run_seed, runs)
    seed_resume = resume and (runs == 1 or _seed_started(run_out, config))
    run_out.mkdir(parents=True, exist_ok=True)
    seed_everything(run_seed)
    ctx = Context(pipeline=name, out=run_out, device=device, seed=run_seed,
                  data_root=root, data_mirror=mirror, quiet=quiet, resume=seed_resume,
                  log=log, options=dict(objects), resume_command=resume_command)
    own: Dict[str, Dict[str, Any]] = {}  # each table's figures
    for table_name, table in sections(config).items():
        params = {k: v for k, v in table.items() if k != "stage"}
        ctx.table = table_name
        # A stage reads the figures of the tables before it (a key's latest first) and writes its own.
        own[table_name] = {}
        ctx.metrics = ChainMap(*reversed(own.values()))
        get_stage(table.get("stage", table_name))(ctx, **params)
    figures = table_figures(own)
    metrics = {"seed": run_seed, **figures}
    if runs > 1 and distributed.is_main():
        write_json(run_out / "metrics.json", metrics)
    log.info("seed %d: %s", run_seed, _format(figures))
    return metrics, ctx.stopped


def table_figures(own: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """The figures of a run's tables (``own``: table -> its figures) as
    ``metrics.json`` records them: a key that one table set as it is, and
    a key that several set (two tables of one stage: two tests) as
    ``TABLE.KEY`` for each of them (``test.test_accuracy``,
    ``test_again.test_accuracy``), so that no table's figure silently
    replaces another's. A table's name holds no '.', so the two forms
    never meet."""
    tables_of = Counter(key for figures in own.values() for key in figures)
    return {(key if tables_of[key] == 1 else f"{table}.{key}"): value
            for table, figures in own.items() for key, value in figures.items()}


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


def _snapshot(out: Path) -> Optional[Dict[Path, tuple]]:
    """Every file under ``out`` with its size, time and (for the runner's own
    files) contents, and every folder (or other thing) there with
    ``(None, None, None)``, so that what the run found is told from what it
    made; None if ``out`` does not exist yet."""
    if not out.is_dir():
        return None
    found = {}
    for path in out.rglob("*"):
        if path.is_file():
            kept = path.read_bytes() if path.name in RUNNER_FILES and path.parent == out else None
            found[path] = (path.stat().st_size, path.stat().st_mtime_ns, kept)
        else:
            found[path] = (None, None, None)
    return found


RUNNER_FILES = ("config.toml", "log.txt")


def stage_stored(out: Path, before: Optional[Dict[Path, tuple]]) -> bool:
    """Whether a stage wrote or changed a file under ``out`` since ``before``."""
    for path in (p for p in out.rglob("*") if p.is_file()):
        if path.parent == out and path.name in RUNNER_FILES:
            continue
        if before is None or path not in before or before[path][:2] != (path.stat().st_size,
                                                                         path.stat().st_mtime_ns):
            return True
    return False


def undo_run_folder(out: Path, before: Optional[Dict[Path, tuple]], made: Sequence[Path]) -> None:
    """Undoes what a run that failed before any stage stored a file did to
    ``out`` (:func:`_undo_runner_writes`); ``made``: ``--out`` and the
    folders above it that were missing, which go with it if it went."""
    _undo_runner_writes(out, before)
    for folder in made[1:]:
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def _undo_runner_writes(out: Path, before: Optional[Dict[Path, tuple]]) -> None:
    """A run that failed before any stage stored a file leaves the folder as
    it found it: a new folder is removed, the runner's config.toml and
    log.txt are put back, and what else the run made (an empty folder) goes.
    Nothing the run found is removed, an empty folder included. A stage's
    file (a label, a checkpoint) is never touched: if one was written,
    everything stays."""
    if not out.is_dir() or stage_stored(out, before):
        return  # A stage stored something: keep the run as it is.
    if before is None:
        shutil.rmtree(out, ignore_errors=True)
        return
    for name in RUNNER_FILES:
        path = out / name
        if path not in before:
            path.unlink(missing_ok=True)
        elif before[path][2] is not None:  # a file of the runner's, not a folder there
            if path.read_bytes() != before[path][2]:
                atomic_write_bytes(path, before[path][2])
            os.utime(path, ns=(before[path][1], before[path][1]))  # as the run found it: its time too
    for folder in sorted((p for p in out.rglob("*") if p.is_dir()), reverse=True):
        if folder not in before and not folder.is_symlink() and not any(folder.iterdir()):
            folder.rmdir()


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
