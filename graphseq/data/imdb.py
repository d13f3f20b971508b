"""The 50,000 unlabelled reviews of the Large Movie Review Dataset (Maas et
al., ACL 2011), as pretraining documents: in-domain text for movie-review
polarity, more than twenty times the words of tiny-shakespeare and the
polarity snippets together.

The reviews are read from ``aclImdb/train/unsup/*.txt`` (one review a file,
named ``<id>_0.txt``), the layout of the extracted archive: in the data
root, else in the read-only mirror (read where it lies, nothing copied),
else unpacked from ``aclImdb_v1.tar.gz`` (the data root's, the mirror's or
Stanford's, checked against its SHA-256 wherever it comes from). Only the
unlabelled reviews are unpacked (not the labelled ones, nor the
bag-of-words files), into a temporary folder that is renamed into place
once whole; an archive this
load fetched or copied is deleted afterwards, one the user put in the data
root is kept.

A review is one document, its sentences in order. Its ``<br />`` line
breaks end sentences, its HTML entities (``&amp;``) become the characters
they stand for, and a sentence ends where ``.``, ``!`` or ``?`` (then
perhaps a closing quote or bracket) is followed by a space and a capital
letter or an opening quote: "Mr. Smith" is cut in two, a rule that is
wrong now and then and needs no model of the language.
"""
from __future__ import annotations

import gzip
import html
import logging
import os
import re
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Dict, List, Optional, Tuple

from ..errors import GraphseqError
from .files import (Checksum, check_folder_places, check_writable, damaged_file_error, download_url,
                    locate_raw_files, removed_if_failed, stat_fingerprint, unpacking)
from .pretraining import Document

FOLDER = "aclImdb"  # under the data root, as the archive names its top folder
UNSUP = ("train", "unsup")  # the unlabelled reviews, under FOLDER
ARCHIVE = "aclImdb_v1.tar.gz"
URL = f"https://ai.stanford.edu/~amaas/data/sentiment/{ARCHIVE}"
CHECKSUMS = {ARCHIVE: Checksum("c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe", 84_125_825)}
REVIEW = re.compile(r"(\d+)_(\d+)\.txt")  # <id>_<rating>.txt; the unlabelled reviews are rated 0
LINE_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
# End punctuation (then perhaps a closing quote or bracket), the space after it (white space is one space by
# then), and a look at the capital or opening quote that follows. It starts with the punctuation, so the
# engine looks further only there: a pattern starting with look-behinds tried them at every character.
SENTENCE_END = re.compile(r"""([.!?]["')\]]?) (?=["'(\[]?[A-Z])""")


# The last reviews read, by the name, size and modification time of each file: a run checks its corpus
# before it writes anything and reads it again in its stage, and 50,000 files need not be split twice.
_last_read: Dict[str, List[Document]] = {}


def load_imdb_unsup(root: Path, mirror: Optional[Path] = None,
                    log: Optional[logging.Logger] = None) -> List[Document]:
    """The unlabelled reviews, one document each, in the order of their ids
    (``0_0.txt``, ``1_0.txt``, ...). Read again from the same unchanged
    files, they are given from memory."""
    folder = find_unsup(Path(root), mirror, log)
    paths = list_reviews(folder)
    key = f"{folder}\n{stat_fingerprint(folder, paths, '', 'IMDB review')}"
    if key not in _last_read:
        _last_read.clear()  # one folder's reviews at a time
        _last_read[key] = [review_sentences(_read_review(path)) for path in paths]
    return list(_last_read[key])


def review_sentences(text: str) -> Document:
    """The sentences of one review, in order: ``<br />`` breaks and the
    sentence ends of :data:`SENTENCE_END` separate them, entities are
    unescaped, and runs of white space become one space."""
    sentences = []
    for line in LINE_BREAK.split(text):
        line = " ".join((html.unescape(line) if "&" in line else line).split())  # so no line break is left
        sentences += [s for s in SENTENCE_END.sub("\\1\n", line).split("\n") if s]
    return sentences


# --------------------------------------------------------------------------- #
# Finding the reviews
# --------------------------------------------------------------------------- #

def find_unsup(root: Path, mirror: Optional[Path] = None, log: Optional[logging.Logger] = None) -> Path:
    """The ``aclImdb/train/unsup`` folder to read: the data root's, else the
    mirror's, else the data root's after unpacking the archive."""
    for base in [root] + ([Path(mirror)] if mirror is not None else []):
        folder = base.joinpath(FOLDER, *UNSUP)
        if folder.is_dir():
            return folder
    target = root / FOLDER
    place = target.joinpath(*UNSUP)
    check_folder_places([place], "the IMDB reviews go there")
    check_writable(target, "cannot unpack the IMDB reviews")
    taken = [] if (target / ARCHIVE).is_file() else [ARCHIVE]  # the user's own copy stays
    with removed_if_failed(place.parent):
        try:
            locate_raw_files(FOLDER, [ARCHIVE], root, mirror, lambda into: download_url(URL, into / ARCHIVE),
                             CHECKSUMS)
            (log or logging.getLogger("graphseq")).info(f"unpacking the unlabelled IMDB reviews into {place}")
            try:
                unpack_unsup(target / ARCHIVE, place)
            except DamagedArchive as error:
                raise damaged_file_error(target, ARCHIVE, str(error), taken, None if mirror is None
                                         else Path(mirror) / FOLDER / ARCHIVE, "IMDB") from None
        finally:  # unpacked or not, the archive this load fetched or copied goes (before any empty folder)
            for name in taken:
                (target / name).unlink(missing_ok=True)
    return place


class DamagedArchive(Exception):
    """An archive that passed its checksum (or had none) but cannot be read."""


def unpack_unsup(archive_path: Path, place: Path) -> None:
    """Writes the archive's ``aclImdb/train/unsup/*.txt`` into ``place``,
    in one pass over the compressed stream. Every member is looked at as it
    comes: one whose name is absolute or climbs out with ``..``, or a
    review that is a link or a device rather than a file, refuses the
    archive, and what was unpacked goes with the temporary folder. A review
    is written under the name it matched, never the path the archive gives,
    so nothing lands outside ``place``."""
    prefix = PurePosixPath(FOLDER, *UNSUP)
    try:
        with unpacking(place) as unpacked, tarfile.open(archive_path, "r:gz") as archive:
            for member in archive:
                path = PurePosixPath(member.name)
                if path.is_absolute() or ".." in path.parts:
                    raise _unsafe(archive_path, member, "its path leads outside the folder it is unpacked into")
                if path.parent != prefix or not REVIEW.fullmatch(path.name):
                    continue
                if not member.isfile():
                    raise _unsafe(archive_path, member, "it is a link or a device, not a file")
                with archive.extractfile(member) as source:
                    (unpacked / path.name).write_bytes(source.read())
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise DamagedArchive(f"it is not a whole .tar.gz archive ({error})") from None


def _unsafe(archive_path: Path, member: tarfile.TarInfo, why: str) -> GraphseqError:
    return GraphseqError(f"refusing {archive_path}: its member {member.name!r} is unsafe to unpack ({why}); "
                         f"replace the archive with a good copy")


# --------------------------------------------------------------------------- #
# Reading the reviews
# --------------------------------------------------------------------------- #

def list_reviews(folder: Path) -> List[Path]:
    """The reviews of ``folder`` by id. Their ids must run 0, 1, 2, ...
    without a gap: a gap is a review lost from a copy, refused by name."""
    reviews: List[Tuple[int, str, str]] = []
    for entry in os.scandir(folder):
        found = REVIEW.fullmatch(entry.name)
        if found:
            reviews.append((int(found[1]), entry.name, entry.path))
    if not reviews:
        raise GraphseqError(f"{folder} holds no review (<id>_0.txt files); replace it with a good copy of "
                            f"the extracted aclImdb/train/unsup, or delete it to unpack it again")
    reviews.sort()
    for expected, (number, name, _) in enumerate(reviews):
        if number != expected:
            raise GraphseqError(f"{folder} lacks review {expected} (it holds {name} next, and {len(reviews):,} "
                                f"reviews in all); restore it from a good copy, or delete the folder to "
                                f"unpack it again")
    return [Path(path) for _, _, path in reviews]


def _read_review(path: Path) -> str:
    """The text of one review; one that cannot be read or is not UTF-8 is
    named."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise GraphseqError(f"damaged IMDB review {path}: not UTF-8 text ({error.reason} at byte "
                            f"{error.start}); replace it with a good copy") from None
    except OSError as error:  # a folder under a review's name, a dangling link
        raise GraphseqError(f"cannot read the IMDB review {path}: {error.strerror}") from None
