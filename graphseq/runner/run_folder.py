"""A run's folder (``--out``): the checks before a run writes there, the lock
that keeps a second run out, the stamped ``config.toml`` that a resumed run
continues with, what a resume may change (a longer budget), and the undoing
of what a run that failed before any stage stored a file wrote.

A run folder's ``config.toml`` records how the run was started: the
pipeline, every resolved setting, the seeds and the graphseq version. It is a
pipeline file itself, and ``--resume`` continues with what it says.
"""
from __future__ import annotations

import hashlib
import os
import shlex
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

try:
    import fcntl
except ImportError:  # Windows: run folders are not locked.
    fcntl = None

from .. import distributed
from ..errors import GraphseqError
from ..io import atomic_write_bytes, check_file_place, load_checkpoint, read_utf8
from ..stages import get_stage, stage_params, stage_spec
from .config import names_a_file, read_config, sections

RUNNER_FILES = ("config.toml", "log.txt")


def check_out(out: Path) -> None:
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


def check_file_places(out: Path, config: Dict[str, Any], seed: int, runs: int, prefix: str = "") -> None:
    """Refuses a folder (or a named pipe, a device) where the run writes one
    of its files: the runner's own, each seed's folder and its metrics, and
    the files the stages continue from. A file is written by renaming a
    temporary one over it, which a folder stops; found only then, the run
    would fail after its training."""
    places = [out / name for name in (*RUNNER_FILES, "metrics.json")]
    for run_seed in range(seed, seed + runs):
        folder = seed_dir(out, run_seed, runs)
        if runs > 1:
            if folder.exists() and not folder.is_dir():
                raise GraphseqError(f"{prefix}{folder} is a file, not a folder; move it away")
            places.append(folder / "metrics.json")
        places += [folder / file for file in resumable_files(config)] + read_on_resume(folder, config)
    for path in places:
        check_file_place(path, prefix)


def lock_folder(out: Path) -> Optional[int]:
    """Holds the folder ``out`` for this run with an advisory lock on the
    folder itself (no file is written), so that a second run on it is
    refused while this one lives; the descriptor to close at the end, or
    None where folders cannot be locked. Under torchrun rank 0 holds it
    (as the launcher numbered it, so also before the process group is set up)."""
    rank = distributed.rank() if distributed.is_initialized() else distributed.launched_rank()
    if fcntl is None or rank != 0:
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


def close_lock(descriptor: Optional[int]) -> None:
    if descriptor is not None:
        os.close(descriptor)


def check_world_size(path: Path, processes: int) -> None:
    """Refuses, before any worker starts, to resume the checkpoint ``path``
    with another number of ``processes`` than the one that wrote it."""
    if path.suffix != ".pt":
        return
    stored = load_checkpoint(path)
    size = stored.get("world_size") if isinstance(stored, dict) else None
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


def read_on_resume(folder: Path, config: Dict[str, Any]) -> List[Path]:
    """The files of ``folder`` besides the ones continued from that the
    pipeline's stages declare they read on resuming (``resume_reads``)."""
    patterns = [pattern for n, t in sections(config).items()
                for pattern in stage_spec(t.get("stage", n)).resume_reads]
    found = {path for pattern in patterns for path in folder.glob(pattern)}
    return sorted(found - {folder / file for file in resumable_files(config)})


def differences(started: Dict[str, Any], now: Dict[str, Any]) -> List[str]:
    """Settings of ``now`` that differ from the run as ``started``, except
    those the stages let a resumed run change, each with its stage's note
    of why it may not change where it has one. A key one of them does not
    record has its stage's default; a budget the stages let change may
    only grow (:data:`BUDGETS`). A stage's run options (who answers:
    ``--oracle``, ``--labels``) stay as the run had them once it had one,
    named by the flag: a store of answers holds one oracle's; a stage
    that had none (a few-shot run trained before anyone was asked) may
    be given one."""
    found = []
    for name, table in sections(now).items():
        kind = table.get("stage", name)
        spec, defaults = stage_spec(kind), stage_params(get_stage(kind))
        before = started.get(name, {})
        answered = any(before.get(option, defaults.get(option)) for option in spec.options)
        for key in sorted((set(table) | set(before)) - {"stage"}):
            new, old = (_listed(t.get(key, defaults.get(key))) for t in (table, before))
            if key in spec.options:
                if answered and new != old:
                    found.append(f"--{key} {new or '(none)'} (the run has {name}.{key} = {old!r}): a resumed run "
                                 f"keeps who answers its questions, so that its answers are all theirs; leave "
                                 f"--{key} out, or start a new run with another --out")
            elif key not in spec.resume_may_change and new != old:
                note = f": {spec.resume_notes[key]}" if key in spec.resume_notes else ""
                found.append(f"{name}.{key} = {new!r} (the run has {old!r}){note}")
            elif key in spec.resume_may_change and _shorter(key, new, old):
                none = ", no limit" if BUDGETS[key] and old == 0 else ""
                found.append(f"{name}.{key} = {new!r} (the run has {old!r}{none}): a resumed run may take a "
                             f"longer budget, not a shorter one")
    return found


# The budgets a stage may let a resumed run change, which may only grow;
# True where 0 means no limit (the longest). Other keys a stage lets change
# change freely: the folds to run, a test's batch size, and the
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


def changed_budgets(started: Dict[str, Any], now: Dict[str, Any]) -> List[str]:
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


def stamped(text: str) -> str:
    return f"{STAMP}{hashlib.sha256(text.encode()).hexdigest()}); change a budget with --set\n{text}"


def check_stamp(recorded: Path) -> None:
    """Refuses a run's config.toml edited since the runner wrote it; one
    written before files were stamped is taken as it is."""
    first, _, rest = read_utf8(recorded).partition("\n")
    if first.startswith(STAMP) and stamped(rest) != f"{first}\n{rest}":
        raise GraphseqError(f"--resume: {recorded} was edited after the run wrote it; undo the edit (a resumed "
                            f"run continues with the settings it was started with) and give what may change, "
                            f"a longer budget, with --set")


def started_config(out: Path, name: str, pipeline_path: Path) -> Dict[str, Any]:
    """The config a run folder recorded, checked to be of the same pipeline."""
    recorded = out / "config.toml"
    check_file_place(recorded, "--resume: ")
    if not recorded.is_file():
        raise GraphseqError(f"--resume: {out} holds no earlier run (no config.toml)")
    started = read_config(recorded)
    check_stamp(recorded)
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


def seed_dir(out: Path, seed: int, runs: int) -> Path:
    return out if runs == 1 else out / f"seed-{seed}"


def seed_started(folder: Path, config: Dict[str, Any]) -> bool:
    """Whether a seed's folder holds a file to continue from: one interrupted
    before its first (a folder, a tokenizer) starts afresh on --resume."""
    return any((folder / file).is_file() for file in resumable_files(config))


def snapshot(out: Path) -> Optional[Dict[Path, tuple]]:
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
