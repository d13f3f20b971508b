"""Files a run stores. Writes are atomic: results and checkpoints go to a
temporary file beside their destination that is renamed over it, so a crash
or a kill leaves either the old file or the new one, never half of one.
Reads never trust a file: a damaged checkpoint or label store is a one-line
error that names it, and the file is left as it was.
"""
from __future__ import annotations

import errno
import io
import json
import os
import re
import sqlite3
import stat
import tempfile
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from .errors import GraphseqError


def read_utf8(path: str | os.PathLike) -> str:
    """The text of ``path``; one that is not UTF-8 is a one-line error naming
    the file and the first bad byte."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise GraphseqError(f"{path} is not UTF-8 text: {error.reason} at byte {error.start}") from None


def _file_mode() -> int:
    """The mode open() gives a new file (0o666 less the umask): a run's files
    are as readable as the user's other files; mkstemp alone makes them 0600."""
    try:
        with open("/proc/self/status") as status:  # Linux: read without changing it.
            umask = next(int(line.split()[1], 8) for line in status if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask


_TEMPORARY = re.compile(r"\..+\.[A-Za-z0-9_]{8}\.tmp")  # the names _temporary gives (mkstemp's 8 letters)


def _temporary(path: Path) -> str:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.fchmod(fd, _file_mode())
    os.close(fd)
    return tmp


def remove_temporaries(folder: Path) -> None:
    """Removes the temporary files under ``folder`` that a process killed
    while writing left behind (its writes go through ``_temporary``); only
    for a folder no other process writes to."""
    for path in folder.rglob(".*.tmp"):
        if path.is_file() and _TEMPORARY.fullmatch(path.name):
            path.unlink(missing_ok=True)


def check_file_place(path: str | os.PathLike, prefix: str = "") -> None:
    """Refuses something other than a regular file where a file is to be
    written: ``os.replace`` cannot put a file over a folder, and a named pipe
    or a device is no place for a run's results. A missing path, or a link to
    a file, is let be. ``prefix`` starts the message (``"--resume: "``)."""
    path = Path(path)
    if not path.exists() or path.is_file():
        return
    mode = path.stat().st_mode
    if stat.S_ISDIR(mode):
        raise GraphseqError(f"{prefix}{path} is a folder, not a file; move it away")
    kind = ("a named pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "something else")
    raise GraphseqError(f"{prefix}{path} is {kind}, not a regular file; move it away")


def check_run_folder(folder: str | os.PathLike, fix: str) -> None:
    """Refuses a run's folder, given to be read, that does not exist or is
    not a folder (a typo, or one of the run's files named instead), saying
    which before ``fix`` ("give the --out folder of ...") rather than naming
    a file the folder lacks."""
    if not Path(folder).is_dir():
        what = "does not exist" if not Path(folder).exists() else "is not a folder"
        raise GraphseqError(f"{folder} {what}; {fix}")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    check_file_place(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_json(path: str | os.PathLike) -> Any:
    """The JSON document in ``path``; a truncated, empty or garbled file is a
    :class:`GraphseqError` that names it."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise GraphseqError(f"{path} is damaged ({first_sentence(error)}); it was left as it is") from None
    except OSError as error:
        raise GraphseqError(f"cannot read {path}: {error.strerror}") from None


def check_output_file(path: str | os.PathLike, suffix: str, option: str = "", *,
                      inputs: Sequence[str | os.PathLike] = (), run_dir: Optional[str | os.PathLike] = None) -> None:
    """Refuses, before any work, an output file of ``option`` that would
    replace a file it should not, or cannot be written: a name that does not
    end in ``suffix`` (the kind of file written there, so that ``--html
    RUN/config.toml`` replaces nothing and a PNG is never named ``x.jpg``),
    the same file as one of ``inputs`` (an image or a text the command
    reads), or a place inside ``run_dir`` (the run whose model is read: its
    files are its record). Missing folders above it are made when it is
    written."""
    path = Path(path)
    named = f"{option} {path}" if option else str(path)
    if path.is_dir():
        raise GraphseqError(f"cannot write {named}: Is a directory")
    if path.suffix.lower() != suffix:
        if path.exists():
            raise GraphseqError(f"{named}: will not overwrite a file that is not {suffix}")
        raise GraphseqError(f"{named}: the file name must end in {suffix}, the kind of file written there")
    for source in inputs:
        if source is not None and _same_file(path, Path(source)):
            raise GraphseqError(f"{named} is the same file as the input {source}, which it would replace; "
                                f"name another file")
    existing = path.parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise GraphseqError(f"cannot write {named}: {os.strerror(errno.ENOTDIR)}")
    if run_dir is not None and path.resolve().is_relative_to(Path(run_dir).resolve()):
        raise GraphseqError(f"{named} is inside the run folder {run_dir}, whose files are the run's own; "
                            f"write it elsewhere")
    try:
        # Permissions and read-only mounts say too little (root may write
        # anywhere but /proc): a temporary file made and removed answers.
        os.unlink(_temporary(existing / path.name))
    except OSError as error:
        raise GraphseqError(f"cannot write {named}: {error.strerror}") from None


def _same_file(a: Path, b: Path) -> bool:
    """Whether two names lead to one file (through links, ``..`` or a hard link)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # One of them does not exist (yet): compare where they would be.
        return a.resolve() == b.resolve()


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_png(figure: Any, path: str | os.PathLike) -> None:
    """A matplotlib figure as a PNG file, written atomically."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    atomic_write_bytes(path, buffer.getvalue())


def write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def save_checkpoint(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` through a temporary file, so a checkpoint is never torn."""
    path = Path(path)
    check_file_place(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        if os.path.exists(tmp):
            os.unlink(tmp)
        interrupt = _interrupt_behind(error)
        if interrupt is not None:
            # Ctrl-C inside torch's zip writer: its clean-up then fails on the
            # half-written record ("unexpected pos"), and that RuntimeError
            # would hide the interrupt behind a traceback.
            raise interrupt.with_traceback(None) from None
        raise


def _interrupt_behind(error: BaseException | None) -> KeyboardInterrupt | None:
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return error
        seen.add(id(error))
        error = error.__context__
    return None


def first_sentence(error: BaseException, limit: int = 120) -> str:
    """The first sentence of an error's message, cut at a word within
    ``limit`` characters (torch's messages about a damaged file run on for
    several sentences of advice). A first line that ends in a colon takes
    the detail of the next ("Error(s) in loading state_dict for Bert:" /
    "size mismatch for ...")."""
    text = str(error).strip()
    if not text:
        return type(error).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    sentence = lines[0] + (f" {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else "")
    sentence = sentence.split(". ")[0]
    return sentence if len(sentence) <= limit else sentence[:limit].rsplit(" ", 1)[0] + " ..."


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> Any:
    """Loads tensors and plain containers only (``weights_only=True``): a
    checkpoint file can never run code. A missing, truncated or foreign file
    is a :class:`GraphseqError` that names it."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise GraphseqError(f"checkpoint not found: {path}") from None
    except IsADirectoryError:
        raise GraphseqError(f"{path} is a folder, not a checkpoint file") from None
    except Exception as error:  # torch raises many kinds for a damaged file.
        if isinstance(error, OSError) and error.errno not in (errno.EINVAL, None):
            raise GraphseqError(f"cannot read {path}: {error.strerror}") from None
        raise GraphseqError(f"{path} is damaged or not a graphseq checkpoint ({_damage(path, error)}); "
                            f"it was left as it is") from None


def _damage(path: str | os.PathLike, error: Exception) -> str:
    """What is wrong with a file ``torch.load`` could not read, in a user's words."""
    try:
        if os.path.getsize(path) == 0:
            return "the file is empty"
    except OSError:
        pass
    # Bytes of no format torch knows end in its old format's KeyError of the first byte ('101').
    if isinstance(error, KeyError):
        return "not a file torch saved"
    # A zip archive cut short: its reader finds no end record (EINVAL when it seeks to it, or
    # "failed finding central directory"); an old-format file cut short ends in EOFError.
    if isinstance(error, (OSError, EOFError)) or "central directory" in str(error):
        return "truncated, or not a file torch saved"
    return first_sentence(error)


def _unfinished_transaction(path: Path) -> Optional[Path]:
    """The rollback journal or write-ahead log a process killed during a
    commit left beside the SQLite file ``path``; None if there is none, or if
    ``path`` is no SQLite file (rolling a journal back into it could only
    damage it further)."""
    logs = [log for log in (Path(f"{path}-journal"), Path(f"{path}-wal")) if log.is_file() and log.stat().st_size]
    try:
        with open(path, "rb") as f:
            is_database = f.read(16) == b"SQLite format 3\x00"
    except OSError:
        is_database = False
    return logs[0] if logs and is_database else None


BUSY_TIMEOUT = 5.0  # seconds an SQLite read waits for another process's write to end (sqlite3's default)


def check_sqlite(path: str | os.PathLike) -> None:
    """Opens an SQLite file and runs its quick integrity check; a damaged one
    is a :class:`GraphseqError` that names it.

    The file is opened read-only, unless a process killed during a commit left
    its rollback journal (or write-ahead log) beside it. Then it is opened for
    writing, so that SQLite rolls the unfinished transaction back, as any open
    that reads it does: that restores the last commit and loses nothing
    committed, while a read-only open cannot read the file at all."""
    path = Path(path)
    unfinished = _unfinished_transaction(path)
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode={'rw' if unfinished else 'ro'}", uri=True,
                                     timeout=BUSY_TIMEOUT)
        try:
            result = connection.execute("PRAGMA quick_check").fetchone()
        finally:
            connection.close()
    except sqlite3.Error as error:
        if unfinished and "readonly" in str(error):
            raise GraphseqError(f"{path} holds a transaction a killed process left unfinished ({unfinished.name}), "
                                f"which SQLite rolls back only where it may write the file ({error}); "
                                f"open it once with write permission; it was left as it is") from None
        if "locked" in str(error):  # SQLITE_BUSY: another process writes it (a run, a labelling session).
            raise GraphseqError(f"{path} is locked by another process, which is writing to it (perhaps a run); "
                                f"try again when it has ended; it was left as it is") from None
        raise GraphseqError(f"{path} is damaged or not an SQLite database ({error}); "
                            f"it was left as it is") from None
    if result is None or result[0] != "ok":
        raise GraphseqError(f"{path} is damaged ({result[0] if result else 'no answer'}); "
                            f"it was left as it is")


def check_stored_file(path: str | os.PathLike) -> None:
    """Reads a file a run continues from, without changing it: a checkpoint
    (``.pt``), a database (``.sqlite``; one a killed commit left with its
    journal is rolled back to its last commit, see :func:`check_sqlite`) or
    a record of figures (``.json``)."""
    path = Path(path)
    if path.suffix == ".sqlite":
        check_sqlite(path)
    elif path.suffix == ".pt":
        load_checkpoint(path)
    elif path.suffix == ".json":
        read_json(path)
