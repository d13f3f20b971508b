"""Reads a named pipeline (``pipelines/NAME.toml``), applies ``--set``
overrides, and threads one :class:`Context` through its stages, once per seed.

A pipeline file is data only: a ``description`` and one table per stage, in
the order they run. A table's ``stage`` key names the registered stage (the
table's own name if absent); every other key is a keyword argument of that
stage function, checked against its signature before anything runs.
"""
from __future__ import annotations

import inspect
import logging
import math
import os
import random
import statistics
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch

from .errors import GraphseqError
from .io import atomic_write_text, write_json
from .stages import get_stage, stage_params

PACKAGE_PIPELINES = Path(__file__).resolve().parent.parent / "pipelines"


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
    if text.endswith(".toml") or os.sep in text:
        path = Path(text)
        if not path.is_file():
            raise GraphseqError(f"pipeline file not found: {path}")
        return path
    known = available_pipelines()
    if text not in known:
        raise GraphseqError(f"unknown pipeline {text!r}; known pipelines: {', '.join(known) or '(none)'}")
    return known[text]


def read_config(path: Path) -> Dict[str, Any]:
    try:
        with open(path, "rb") as f:
            config = tomllib.load(f)
    except tomllib.TOMLDecodeError as error:
        # tomllib's message ends in "(at line L, column C)", which names the place.
        raise GraphseqError(f"malformed TOML in {path}: {error}") from None
    except OSError as error:
        raise GraphseqError(f"cannot read pipeline file {path}: {error.strerror}") from None
    validate_config(config, source=str(path))
    return config


def sections(config: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    return {k: v for k, v in config.items() if isinstance(v, dict)}


def validate_config(config: Dict[str, Any], source: str) -> None:
    if not sections(config):
        raise GraphseqError(f"{source}: a pipeline needs at least one [stage] table")
    for name, table in sections(config).items():
        fn = get_stage(table.get("stage", name))
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


def _check_type(key: str, value: Any, default: Any, source: str) -> Any:
    if default is None or default is _REQUIRED:
        return value
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, str):
        ok = isinstance(value, str)
    elif isinstance(default, (list, tuple)):
        ok = isinstance(value, list)
    else:
        ok = True
    if not ok:
        raise GraphseqError(f"{source}: {key} must be {type(default).__name__} "
                            f"(like its default {default!r}), got {value!r}")
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


def apply_overrides(config: Dict[str, Any], overrides: Sequence[str] | Dict[str, Any] | None) -> None:
    if not overrides:
        return
    items = (overrides.items() if isinstance(overrides, dict)
             else [(f"{s}.{k}", v) for s, k, v in map(parse_override, overrides)])
    tables = sections(config)
    for key, value in items:
        section, _, name = key.partition(".")
        if section not in tables:
            raise GraphseqError(f"--set {key}: no section [{section}]; "
                                f"sections of this pipeline: {', '.join(tables)}")
        known = stage_params(get_stage(tables[section].get("stage", section)))
        if name not in known:
            raise GraphseqError(f"--set {key}: unknown key {name!r}; "
                                f"known keys of [{section}]: {', '.join(known)}")
        tables[section][name] = _check_type(key, value, known[name], "--set")


def dump_toml(config: Dict[str, Any]) -> str:
    """Writes the flat two-level configs graphseq uses back as TOML."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        raise TypeError(f"cannot write {v!r} as TOML")

    lines = [f"{k} = {value(v)}" for k, v in config.items() if not isinstance(v, dict)]
    for name, table in sections(config).items():
        lines += ["", f"[{name}]"] + [f"{k} = {value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- #
# Running
# --------------------------------------------------------------------------- #

@dataclass
class Context:
    """What one run's stages share. Stages add their products as attributes
    (``ctx.data``, ``ctx.model``, ...) and their figures to ``ctx.metrics``."""

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

    def require(self, name: str, stage: str) -> Any:
        if not hasattr(self, name):
            raise GraphseqError(f"stage {stage!r} needs {name!r}, which no earlier stage made; "
                                f"check the order of the pipeline's tables")
        return getattr(self, name)


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    name = str(device)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise GraphseqError("--device cuda was asked for, but this machine has no CUDA device "
                            "(or this torch build has no CUDA); use --device cpu or auto")
    try:
        return torch.device(name)
    except RuntimeError:
        raise GraphseqError(f"unknown device {name!r}; use auto, cpu or cuda") from None


def default_data_root() -> Path:
    return Path(os.environ.get("GRAPHSEQ_DATA", "datasets"))


def default_data_mirror() -> Optional[Path]:
    mirror = os.environ.get("GRAPHSEQ_MIRROR")
    return Path(mirror) if mirror else None


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _logger(out: Path, quiet: bool) -> logging.Logger:
    log = logging.getLogger(f"graphseq.run.{out.resolve()}")
    log.handlers.clear()
    log.setLevel(logging.INFO)
    log.propagate = False
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


def run(pipeline: str | os.PathLike, overrides: Sequence[str] | Dict[str, Any] | None = None,
        seed: int = 0, runs: int = 1, device: str = "auto", out: str | os.PathLike | None = None,
        data_root: str | os.PathLike | None = None, data_mirror: str | os.PathLike | None = None,
        quiet: bool = False, resume: bool = False, **options: Any) -> Dict[str, Any]:
    """Runs a pipeline ``runs`` times with seeds ``seed .. seed+runs-1``.

    Writes ``config.toml``, ``log.txt`` and ``metrics.json`` into ``out``
    (each run's own checkpoint and figures into ``out/seed-N`` when
    ``runs > 1``) and returns the contents of ``metrics.json``: a list
    ``runs`` of per-run figures and their ``mean`` and ``std``. Extra keyword
    ``options`` reach the stages as ``ctx.options`` (an oracle, say).
    """
    path = resolve_pipeline(pipeline)
    config = read_config(path)
    apply_overrides(config, overrides)
    if runs < 1:
        raise GraphseqError(f"--runs must be at least 1, got {runs}")
    torch_device = resolve_device(device)
    name = path.stem
    if out is None:
        out = Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    out = Path(out)
    if resume and not (out / "config.toml").is_file():
        raise GraphseqError(f"--resume: {out} holds no earlier run (no config.toml)")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.toml", dump_toml(config))
    log = _logger(out, quiet)
    root = Path(data_root) if data_root is not None else default_data_root()
    mirror = Path(data_mirror) if data_mirror is not None else default_data_mirror()
    log.info(f"pipeline {name} ({path}) on {torch_device}, seeds {seed}..{seed + runs - 1}, out {out}")

    results = []
    for run_seed in range(seed, seed + runs):
        run_out = out if runs == 1 else out / f"seed-{run_seed}"
        run_out.mkdir(parents=True, exist_ok=True)
        seed_everything(run_seed)
        ctx = Context(pipeline=name, out=run_out, device=torch_device, seed=run_seed,
                      data_root=root, data_mirror=mirror, quiet=quiet, resume=resume,
                      log=log, options=dict(options))
        for table_name, table in sections(config).items():
            params = {k: v for k, v in table.items() if k != "stage"}
            get_stage(table.get("stage", table_name))(ctx, **params)
        metrics = {"seed": run_seed, **ctx.metrics}
        if runs > 1:
            write_json(run_out / "metrics.json", metrics)
        log.info("seed %d: %s", run_seed, _format(ctx.metrics))
        results.append(metrics)

    summary = {"pipeline": name, "runs": results, **summarize(results)}
    write_json(out / "metrics.json", summary)
    if runs > 1:
        log.info("mean over %d runs: %s", runs, _format(summary["mean"], summary["std"]))
    for handler in log.handlers:
        handler.close()
    return summary


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
