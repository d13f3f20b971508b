"""The reviews of the Large Movie Review Dataset (Maas et al., ACL 2011)
as pretraining documents: the 50,000 unlabelled ones (``train/unsup``) and
the text of the 25,000 labelled training ones (``train/neg`` then
``train/pos``; their labels are never read), in-domain text for
movie-review polarity, more than twenty times the words of
tiny-shakespeare and the polarity snippets together.

Each part is a folder of ``aclImdb/train`` (one review a file, named
``<id>_<rating>.txt``, the unlabelled ones rated 0), the layout of the
extracted archive: in the data root, else in the read-only mirror (read
where it lies, nothing copied), else unpacked from ``aclImdb_v1.tar.gz``
(the data root's, the mirror's or Stanford's, checked against its SHA-256
wherever it comes from). Only the parts asked for are unpacked (not the
test reviews, nor the bag-of-words files), all of them in one pass over the
archive, each into a temporary folder that is renamed into place once
whole, so a part unpacked before is kept and the others can follow; an
archive this load fetched or copied is deleted afterwards, one the user
put in the data root is kept.

A review is one document, its sentences in order. Its ``<br />`` line
breaks end sentences, its HTML entities (``&amp;``) become the characters
they stand for, and a sentence ends where ``.``, ``!`` or ``?`` (then
perhaps a closing quote or bracket) is followed by a space and a capital
letter or an opening quote: "Mr. Smith" is cut in two, a rule that is
wrong now and then and needs no model of the language.
"""
from __future__ import annotations

import contextlib
import gzip
import html
import logging
import os
import re
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import GraphseqError
from .files import (Checksum, check_folder_places, check_writable, damaged_file_error, download_url,
                    locate_raw_files, removed_if_failed, stat_fingerprint, unpacking)
from .places import dataset_folder
from .pretraining import Document

FOLDER = dataset_folder("aclImdb")  # under the data root, as the archive names its top folder
Part = Tuple[str, ...]  # a folder of reviews, under FOLDER
UNSUP: Part = ("train", "unsup")  # the 50,000 unlabelled reviews, rated 0
NEG: Part = ("train", "neg")  # the 12,500 negative training reviews, rated 1-4
POS: Part = ("train", "pos")  # the 12,500 positive training reviews, rated 7-10
TRAIN = (NEG, POS)  # the text of the labelled training reviews, in this order
ARCHIVE = "aclImdb_v1.tar.gz"
URL = f"https://ai.stanford.edu/~amaas/data/sentiment/{ARCHIVE}"
CHECKSUMS = {ARCHIVE: Checksum("c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe", 84_125_825)}
REVIEW = re.compile(r"(\d+)_(\d+)\.txt")  # <id>_<rating>.txt
LINE_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
# End punctuation (then perhaps a closing quote or bracket), the space after it (white space is one space by
# then), and a look at the capital or opening quote that follows. It starts with the punctuation, so the
# engine looks further only there: a pattern starting with look-behinds tried them at every character.
SENTENCE_END = re.compile(r"""([.!?]["')\]]?) (?=["'(\[]?[A-Z])""")


# The reviews of the last load, by the folder and the name, size and modification time of each of its files:
# a run checks its corpus before it writes anything and reads it again in its stage, and 75,000 files need
# not be split twice. Only the folders of the last load are kept.
_last_read: Dict[str, List[Document]] = {}


def load_imdb_unsup(root: Path, mirror: Optional[Path] = None,
                    log: Optional[logging.Logger] = None) -> List[Document]:
    """The unlabelled reviews, one document each, in the order of their ids
    (``0_0.txt``, ``1_0.txt``, ...)."""
    return load_imdb_parts(root, mirror, [UNSUP], log)[UNSUP]


def load_imdb_train(root: Path, mirror: Optional[Path] = None,
                    log: Optional[logging.Logger] = None) -> List[Document]:
    """The text of the labelled training reviews, one document each: the
    negative ones then the positive ones, each in the order of their ids.
    Their labels are not read: this is text to pretrain on, and the test
    reviews are never unpacked."""
    reviews = load_imdb_parts(root, mirror, TRAIN, log)
    return [review for part in TRAIN for review in reviews[part]]


def load_imdb_parts(root: Path, mirror: Optional[Path], parts: Sequence[Part],
                    log: Optional[logging.Logger] = None) -> Dict[Part, List[Document]]:
    """The reviews of each of ``parts`` (:data:`UNSUP`, :data:`NEG`,
    :data:`POS`), one document each, in the order of their ids. Those found
    nowhere are unpacked from one archive in one pass, so a caller that
    needs several asks for them together. Read again from the same
    unchanged files, they are given from memory."""
    parts = list(dict.fromkeys(parts))
    read: Dict[str, List[Document]] = {}
    reviews: Dict[Part, List[Document]] = {}
    for part, folder in zip(parts, find_parts(Path(root), mirror, parts, log)):
        paths = list_reviews(folder, part)
        key = f"{folder}\n{stat_fingerprint(folder, paths, '', 'IMDB review')}"
        read[key] = _last_read[key] if key in _last_read else [review_sentences(_read_review(p)) for p in paths]
        reviews[part] = list(read[key])
    _last_read.clear()  # the folders of this load alone
    _last_read.update(read)
    return reviews


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

def part_name(part: Part) -> str:
    """``aclImdb/train/unsup``: a part as the archive and the messages name it."""
    return "/".join((FOLDER, *part))


def find_parts(root: Path, mirror: Optional[Path], parts: Sequence[Part],
               log: Optional[logging.Logger] = None) -> List[Path]:
    """The folder to read for each of ``parts``: the data root's, else the
    mirror's, else the data root's after unpacking the archive, once for
    all the parts found in neither."""
    found = {part: _found(root, mirror, part) for part in parts}
    missing = [part for part, folder in found.items() if folder is None]
    if missing:
        found.update(_unpack_parts(root, mirror, missing, log))
    return [found[part] for part in parts]


def _found(root: Path, mirror: Optional[Path], part: Part) -> Optional[Path]:
    """The extracted ``part`` in the data root, else in the mirror; None where neither has it."""
    for base in [root] + ([Path(mirror)] if mirror is not None else []):
        folder = base.joinpath(FOLDER, *part)
        if folder.is_dir():
            return folder
    return None


def _unpack_parts(root: Path, mirror: Optional[Path], parts: List[Part],
                  log: Optional[logging.Logger]) -> Dict[Part, Path]:
    """Unpacks ``parts`` into the data root from its archive (fetched or
    copied first where it is not there); returns their folders."""
    target = root / FOLDER
    places = {part: target.joinpath(*part) for part in parts}
    check_folder_places(list(places.values()), "the IMDB reviews go there")
    check_writable(target, "cannot unpack the IMDB reviews")
    taken = [] if (target / ARCHIVE).is_file() else [ARCHIVE]  # the user's own copy stays
    with contextlib.ExitStack() as stack:
        for parent in dict.fromkeys(place.parent for place in places.values()):
            stack.enter_context(removed_if_failed(parent))
        try:
            locate_raw_files(FOLDER, [ARCHIVE], root, mirror, lambda into: download_url(URL, into / ARCHIVE),
                             CHECKSUMS)
            (log or logging.getLogger("graphseq")).info(
                f"unpacking the IMDB reviews of {', '.join(map(part_name, parts))} into {root}")
            try:
                unpack_parts(target / ARCHIVE, places)
            except DamagedArchive as error:
                raise damaged_file_error(target, ARCHIVE, str(error), taken, None if mirror is None
                                         else Path(mirror) / FOLDER / ARCHIVE, "IMDB") from None
        finally:  # unpacked or not, the archive this load fetched or copied goes (before any empty folder)
            for name in taken:
                (target / name).unlink(missing_ok=True)
    return places


class DamagedArchive(Exception):
    """An archive that passed its checksum (or had none) but cannot be read."""


def unpack_parts(archive_path: Path, places: Dict[Part, Path]) -> None:
    """Writes the archive's ``aclImdb/<part>/*.txt`` into ``places[part]``
    for every part, in one pass over the compressed stream; each part is
    renamed into place only once every part is whole, and one the archive
    holds no review of refuses it. Every member is looked at as it comes:
    one whose name is absolute or climbs out with ``..``, or a review that
    is a link or a device rather than a file, refuses the archive, and what
    was unpacked goes with the temporary folders. A review is written under
    the name it matched, never the path the archive gives, so nothing lands
    outside its place."""
    try:
        with contextlib.ExitStack() as stack:
            unpacked = {PurePosixPath(part_name(part)): stack.enter_context(unpacking(place))
                        for part, place in places.items()}
            written = dict.fromkeys(unpacked, 0)
            with tarfile.open(archive_path, "r:gz") as archive:
                for member in archive:
                    path = PurePosixPath(member.name)
                    if path.is_absolute() or ".." in path.parts:
                        raise _unsafe(archive_path, member, "its path leads outside the folder it is unpacked into")
                    if path.parent not in unpacked or not REVIEW.fullmatch(path.name):
                        continue
                    if not member.isfile():
                        raise _unsafe(archive_path, member, "it is a link or a device, not a file")
                    with archive.extractfile(member) as source:
                        (unpacked[path.parent] / path.name).write_bytes(source.read())
                    written[path.parent] += 1
            empty = [str(prefix) for prefix, count in written.items() if count == 0]
            if empty:  # raised within the stack, so that no part is renamed into place
                raise DamagedArchive(f"it holds no review under {' or '.join(empty)}")
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise DamagedArchive(f"it is not a whole .tar.gz archive ({error})") from None


def _unsafe(archive_path: Path, member: tarfile.TarInfo, why: str) -> GraphseqError:
    return GraphseqError(f"refusing {archive_path}: its member {member.name!r} is unsafe to unpack ({why}); "
                         f"replace the archive with a good copy")


# --------------------------------------------------------------------------- #
# Reading the reviews
# --------------------------------------------------------------------------- #

def list_reviews(folder: Path, part: Part = UNSUP) -> List[Path]:
    """The reviews of ``folder``, the extracted ``part``, by id. Their ids
    must run 0, 1, 2, ... without a gap or a repeat: a gap is a review lost
    from a copy, refused by name, and so is an id given twice (two
    ratings)."""
    reviews: List[Tuple[int, str, str]] = []
    for entry in os.scandir(folder):
        found = REVIEW.fullmatch(entry.name)
        if found:
            reviews.append((int(found[1]), entry.name, entry.path))
    if not reviews:
        raise GraphseqError(f"{folder} holds no review (<id>_<rating>.txt files); replace it with a good copy of "
                            f"the extracted {part_name(part)}, or delete it to unpack it again")
    reviews.sort()
    for expected, (number, name, _) in enumerate(reviews):
        if number < expected:
            raise GraphseqError(f"{folder} holds review {number} twice ({reviews[expected - 1][1]} and {name}); "
                                f"restore the folder from a good copy, or delete it to unpack it again")
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
