"""Finding raw dataset files and making sure they are the right ones.

A loader names the files it needs; :func:`locate_raw_files` looks for them in
the data root first, then in a read-only mirror with the same layout (copied
into the root, never written to), then downloads them. When the loader knows
a file's checksum, the file is checked wherever it was found, before it is
used: a damaged file (truncated, altered) stops the run with one line naming
the file and the place, and is never copied into the data root; a damaged
download is deleted. When all places fail, the error names every file and
place tried.

The checks are reusable: a loader passes its table of :class:`Checksum`
values, and :func:`check_file` checks any single file (one extracted from an
archive, say) and gives back its SHA-256, for a cache stamp to use without
reading the file again. :func:`damaged_file_error` is the refusal of a file
that passed its checksum (or had none) but that the loader cannot read.
:func:`check_folder_places` and :func:`check_writable` are
what every loader asks before it writes under the data root: that its
folders are folders (not files, not links to nothing) and that it may write
there, so that a refusal names the folder instead of ending in a traceback.
:func:`unpacking` is where a loader unpacks a downloaded archive, so that an
extraction cut off leaves no half folder behind.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import logging
import os
import shutil
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, TypeVar

from ..errors import GraphseqError
from ..io import _temporary

CHUNK = 1 << 20


@dataclass(frozen=True)
class Checksum:
    """What a good copy of a file is known to be: its SHA-256 and size in
    bytes, or, where only that is known, its git blob id (the SHA-1 of
    ``b"blob <size>\\0"`` and the bytes, what ``git hash-object`` prints)."""

    sha256: str = ""
    size: int = -1
    git_blob: str = ""

    def __post_init__(self):
        if not (self.sha256 or self.git_blob):
            raise ValueError("a Checksum needs a sha256 or a git_blob")


class DamagedFileError(GraphseqError):
    """A dataset file whose bytes are not those of a good copy."""


def _short(digest: str) -> str:
    return digest[:12] + "..."


def _where(place: str) -> str:
    return f" ({place})" if place else ""


def hash_file(path: Path, *digests) -> None:
    """Feeds the bytes of the file at ``path``, read once in chunks, to each
    of ``digests`` (``hashlib`` objects): a file whose SHA-256 and git blob
    id are both wanted is read once. The checks and stamps here hash files
    through it and nowhere else."""
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            for digest in digests:
                digest.update(chunk)


def file_sha256(path: Path) -> str:
    """The SHA-256 of the file at ``path``, read in chunks, as hex."""
    digest = hashlib.sha256()
    hash_file(path, digest)
    return digest.hexdigest()


def check_file(path: Path, checksum: Checksum, place: str = "") -> str:
    """Raises :class:`DamagedFileError` naming ``path`` (and ``place``, where
    it was found) unless the file matches ``checksum``. Returns the file's
    SHA-256, taken in the same read, so that a caller that records it (a
    cache stamp) need not read the file again."""
    path = Path(path)
    size = path.stat().st_size
    if checksum.size >= 0 and size != checksum.size:
        hint = "truncated" if size < checksum.size else "too long"
        raise DamagedFileError(f"damaged dataset file {path}{_where(place)}: {size:,} bytes where a good "
                               f"copy has {checksum.size:,} ({hint}); replace it with a good copy")
    sha256, git_blob = hashlib.sha256(), hashlib.sha1(f"blob {size}\0".encode())
    hash_file(path, sha256, git_blob)
    for name, expected, found in (("SHA-256", checksum.sha256, sha256.hexdigest()),
                                  ("git blob id", checksum.git_blob, git_blob.hexdigest())):
        if expected and found != expected:
            raise DamagedFileError(f"damaged dataset file {path}{_where(place)}: its {name} {_short(found)} "
                                   f"is not the known {_short(expected)} (altered or truncated); "
                                   f"replace it with a good copy")
    return sha256.hexdigest()


def damaged_file_error(raw_dir: Path, name: str, reason: str, taken: Iterable[str],
                       mirror_copy: Optional[Path], kind: str = "dataset") -> GraphseqError:
    """The refusal of ``raw_dir/name``, a file that passed its checksum (or
    had none) but cannot be read, for ``reason``; ``kind`` names the data
    ("PPI"). The files of ``taken``, which this load copied from the mirror
    or downloaded, are removed first, so that the next run uses a fixed
    mirror or the download and the root is left as it was found. The message
    names the file where it came from: the data root (the user's, kept), the
    mirror (``mirror_copy``, where its copy was taken from), or the download.
    """
    taken = list(taken)
    for each in taken:
        (Path(raw_dir) / each).unlink(missing_ok=True)
    path = Path(raw_dir) / name
    if name not in taken:
        return GraphseqError(f"damaged {kind} file {path}: {reason}; replace it with a good copy "
                             f"(or delete it to fetch it again)")
    if mirror_copy is not None and Path(mirror_copy).is_file():
        return GraphseqError(f"damaged {kind} file {mirror_copy}: {reason}; replace it with a good copy "
                             f"(the copies taken into {raw_dir} were removed)")
    return GraphseqError(f"damaged {kind} file {path}: {reason}; it was removed, run again to fetch it")


def check_folder_places(folders: Sequence[Path], goes_there: str) -> None:
    """Refuses each of ``folders``, or the first of its parents that exists,
    when it is not a folder: a file, a link to a file, or a link whose
    target is gone. ``exists()`` takes a dangling link for nothing at all,
    and ``mkdir`` then fails with a FileExistsError traceback, so names are
    looked at with ``os.path.lexists``. ``goes_there`` says what the folder
    is for ("the Omniglot cache goes there"), for the message. Called
    before a loader writes anything."""
    for folder in folders:
        for path in (Path(folder), *Path(folder).parents):
            if not os.path.lexists(path):
                continue
            if path.is_dir():
                break
            if path.is_symlink() and not path.exists():
                raise GraphseqError(f"{path} is a link to {os.readlink(path)}, which does not exist "
                                    f"({goes_there}); restore its target or remove the link, and run again")
            raise GraphseqError(f"{path} is not a folder ({goes_there}); move it away and run again")


@contextlib.contextmanager
def printed_to_log(log: logging.Logger) -> Iterator[None]:
    """What PyG prints on standard error while it downloads or builds its
    cache ("Processing...", "Done!") as debug lines of ``log``, which a
    run's log.txt keeps and its console leaves out: a run says only its own
    words there."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stderr(printed):
            yield
    finally:
        for line in printed.getvalue().splitlines():
            if line.strip():
                log.debug(f"PyG: {line.strip()}")


STAMP = "graphseq-built.txt"  # beside PyG's cache in processed/: what this package built it from
Cached = TypeVar("Cached")


def stamped_cache(processed: Path, stamp: Callable[[], str], read: Callable[[], Cached], built_from: str,
                  others: str, log: Optional[logging.Logger]) -> Optional[Cached]:
    """What ``read`` gives from PyG's cache in ``processed`` when the stamp
    this package wrote beside it (``STAMP``) is ``stamp()`` now: the cache
    was built by the loader from ``built_from`` ("the files in RAW") as they
    are. Else ``None``, with the cache deleted to be rebuilt (said in
    ``log``, unless ``None``); one that cannot be deleted is refused and left
    whole, the message saying what it may be instead (``others``: "another
    dataset's"). PyG itself looks only at file names."""
    if not processed.exists():
        return None
    try:
        data = read() if (processed / STAMP).read_text(encoding="utf-8") == stamp() else None
    except Exception:  # torn
        data = None
    if data is not None:
        return data
    check_removable(processed, f"{processed} is not the cache this loader built from {built_from} ({others}, an "
                               f"older graphseq's, or torn) and cannot be rebuilt")
    if log is not None:
        log.info(f"{processed} is not the cache this loader built; rebuilding it")
    shutil.rmtree(processed)
    return None


def stat_fingerprint(folder: Path, files: Sequence[Path], header: str, what: str) -> str:
    """The SHA-256 of ``header`` and each file's path under ``folder``, size
    and modification time, as ``make`` decides (an image redrawn at the same
    size in bytes changes only the time): what a cache of ``files`` is keyed
    by, without reading them. A changed, added or removed file changes it;
    one that cannot be looked at (a dangling link) is named as ``what``."""
    digest = hashlib.sha256(header.encode())
    for path in files:
        try:
            stat = path.stat()
        except OSError as error:
            raise GraphseqError(f"cannot read the {what} {path}: {error.strerror}") from None
        digest.update(f"{path.relative_to(folder).as_posix()} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def raw_file_lines(raw_dir: Path, names: Sequence[str], digests: Dict[str, str]) -> List[str]:
    """A cache stamp's line for each raw file of ``names``: its name, size
    and SHA-256. ``digests`` holds the SHA-256s this load has taken already
    (by :func:`check_file`, or an earlier stamp), by name; a file not in it
    is read and added, so that a load reads each raw file once however many
    stamps it writes or compares."""
    for name in names:
        if name not in digests:
            digests[name] = file_sha256(Path(raw_dir) / name)
    return [f"{name} {(Path(raw_dir) / name).stat().st_size} bytes, sha256 {digests[name]}" for name in names]


def check_writable(folder: Path, why: str) -> None:
    """Refuses, naming it, a ``folder`` (or the first of its parents that
    exists, where it would be made) that this process may not write;
    ``why`` begins the message ("cannot build the cache"). Asked before a
    cache is deleted to be rebuilt, so that a read-only data root is refused
    with the cache as it was, not half deleted."""
    existing = next(path for path in (Path(folder), *Path(folder).parents) if os.path.lexists(path))
    if not os.access(existing, os.W_OK):
        raise GraphseqError(f"{why}: {existing} is not writable; make it writable, or choose a data root you "
                            f"can write (--data-root or GRAPHSEQ_DATA)")


def check_removable(folder: Path, why: str) -> None:
    """:func:`check_writable` for deleting ``folder`` (a stale cache, to be
    rebuilt): that writes both the folder and the one that holds it."""
    for place in (Path(folder).parent, Path(folder)):
        check_writable(place, why)


def failed_cache_build(processed: Path, what: str, error: BaseException) -> Optional[GraphseqError]:
    """After PyG failed to build ``what`` (its cache) in ``processed``: the
    half-built cache is removed, and a place that may not be written is
    named, as the refusal returned; ``None`` for any other failure, which the
    loader explains from its raw files."""
    shutil.rmtree(processed, ignore_errors=True)
    if not not_writable(error):
        return None
    return GraphseqError(f"cannot build {what} in {processed}: {error.strerror}; make the folder writable, or "
                         f"choose a data root you can write (--data-root or GRAPHSEQ_DATA)")


def not_writable(error: BaseException) -> bool:
    """Whether ``error`` says a place may not be written (permissions, a
    read-only file system), not that a file is damaged."""
    return isinstance(error, OSError) and error.errno in (errno.EACCES, errno.EPERM, errno.EROFS)


def _copy(source: Path, target: Path) -> None:
    """Copies ``source`` to ``target`` through a temporary file beside it, so
    a crash never leaves half a file under the name."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(target)
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)


def locate_raw_files(folder: str, names: Sequence[str], root: Path,
                     mirror: Optional[Path] = None,
                     download: Optional[Callable[[Path], None]] = None,
                     checksums: Optional[Mapping[str, Checksum]] = None,
                     digests: Optional[Dict[str, str]] = None) -> Path:
    """Makes sure ``root/folder/NAME`` exists, and is a good copy where
    ``checksums`` knows ``NAME``, for every name; returns ``root/folder``.
    ``digests``, where given, gets the SHA-256 of each file checked, by
    name, for a caller that records them (a cache stamp) without reading
    the files again.

    Files already in the root are checked first. Missing files are copied
    from ``mirror/folder`` when it has them (checked before they are
    copied); what is still missing is handed to ``download(root/folder)``,
    and every downloaded file is checked (a damaged one is deleted). Errors
    from the download (offline, say) become a :class:`GraphseqError` naming
    the files. A refusal takes back what the mirror gave this call, and the
    folders it made: the root is left as it was found.
    """
    checksums = checksums or {}
    digests = {} if digests is None else digests
    target = Path(root) / folder
    check_folder_places([target], f"the {folder} files go there")
    for name in names:
        if (target / name).exists() and not (target / name).is_file():
            raise GraphseqError(f"{target / name} is not a file (a folder?); move it away and run again")
        if (target / name).is_file() and name in checksums:
            digests[name] = check_file(target / name, checksums[name],
                                       "in the data root; delete it to fetch it again")
    missing = [n for n in names if not (target / n).exists()]
    copied: List[Path] = []
    with removed_if_failed(target):
        try:
            if missing and mirror is not None:
                source = Path(mirror) / folder
                for name in list(missing):
                    if (source / name).is_file():
                        if name in checksums:
                            digests[name] = check_file(source / name, checksums[name],
                                                       "in the mirror; nothing was copied")
                        try:
                            _copy(source / name, target / name)
                        except OSError as error:
                            if not_writable(error):  # A read-only data root, not a damaged file.
                                raise GraphseqError(f"cannot copy {name} from the mirror into {target}: "
                                                    f"{error.strerror}; make the data root writable, or "
                                                    f"choose another (--data-root or GRAPHSEQ_DATA)") from None
                            raise
                        copied.append(target / name)
                        missing.remove(name)
            if not missing:
                return target
            places = f"{target}" + (f" and the mirror {Path(mirror) / folder}" if mirror is not None else
                                    " (no mirror set: --data-mirror or GRAPHSEQ_MIRROR)")
            if download is None:
                raise GraphseqError(f"missing dataset file(s) {', '.join(missing)}; looked in {places}")
            try:
                download(target)
            except Exception as error:  # Any failure of the network or the host.
                raise GraphseqError(f"missing dataset file(s) {', '.join(missing)}; looked in {places}, "
                                    f"and the download failed: {error}") from None
        except BaseException:  # Refused: what this call copied from the mirror goes too.
            for path in copied:
                path.unlink(missing_ok=True)
            raise
    still = [n for n in names if not (target / n).exists()]
    if still:
        raise GraphseqError(f"missing dataset file(s) {', '.join(still)} after downloading into {target}")
    for name in missing:
        if name in checksums:
            try:
                digests[name] = check_file(target / name, checksums[name], "just downloaded, now deleted")
            except DamagedFileError:
                (target / name).unlink()
                raise
    return target


def download_url(url: str, path: Path) -> None:
    """Downloads ``url`` to ``path`` through a temporary file beside it, so
    an interrupted download never leaves a partial file under the name
    (PyG's ``download_url`` writes in place). A failed download also takes
    away the folders it made, so that no empty dataset folder is left."""
    path = Path(path)
    with removed_if_failed(path.parent):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _temporary(path)
        try:
            with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as f:
                shutil.copyfileobj(response, f)
            Path(tmp).replace(path)
        finally:
            Path(tmp).unlink(missing_ok=True)


@contextlib.contextmanager
def removed_if_failed(folder: Path) -> Iterator[None]:
    """If the block fails, removes ``folder`` and those of its parents that
    did not exist before it, deepest first, stopping at the first that is
    not empty."""
    made = [f for f in (folder, *folder.parents) if not f.exists()]
    try:
        yield
    except BaseException:
        for f in made:
            try:
                f.rmdir()
            except OSError:
                break
        raise


@contextlib.contextmanager
def unpacking(place: Path, inner: str = "") -> Iterator[Path]:
    """A new temporary folder beside ``place`` for an archive to be unpacked
    into; when the block ends without error, the folder (or its ``inner``
    folder, the one the archive's members start with) is renamed to
    ``place`` in one step. An extraction cut off (a full disk, Ctrl-C, a
    damaged archive) so leaves nothing under ``place`` that a later run
    would take for the whole; the temporary folder goes either way."""
    place.parent.mkdir(parents=True, exist_ok=True)
    unpacked = Path(tempfile.mkdtemp(prefix=f".{place.name}-", dir=place.parent))
    try:
        yield unpacked
        os.replace(unpacked / inner, place)
    finally:
        shutil.rmtree(unpacked, ignore_errors=True)
