"""Omniglot (Lake et al., Science 2015): 1,623 handwritten characters from 50
alphabets, each drawn by 20 people, as 105x105 black-and-white PNGs in
torchvision's extracted layout (``omniglot-py/images_background/<alphabet>/
<characterNN>/<id>_<drawer>.png`` and ``images_evaluation/...``).

The folders are read from the data root, then the read-only mirror, else the
two zips are downloaded into the data root. Every PNG is decoded once,
resized (area average) and kept as one ``uint8`` tensor under the data root,
keyed by the list of source files it was built from and holding the SHA-256
of its own contents (checked on every load: a damaged cache is rebuilt), so a
second run starts in a second. When the source has a ``SHA256SUMS`` manifest
beside it, every PNG is checked against it while the cache is built (once,
not every run); a manifest that does not list every PNG found is refused as
truncated. A folder with the real alphabets must hold all 1,623 characters:
the seeded split below is a permutation of their number, so one character
missing would change every split.

Few-shot learning uses the protocol of Vinyals et al. (2016) and Garcia &
Bruna (2018): a seeded split of all 1,623 characters into 1,200 for training
and 423 for test, and each rotation by 0, 90, 180 and 270 degrees a class of
its own. Validation characters are held out of the training ones.
"""
from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch
from torch import Tensor

from ..checks import is_integer
from ..errors import GraphseqError
from ..io import load_checkpoint, read_utf8, save_checkpoint
from .files import (Checksum, check_file, check_folder_places, check_writable, download_url, hash_file,
                    removed_if_failed, stat_fingerprint, unpacking)
from .episodes import FewShotClasses
from .places import dataset_folder

FOLDER = dataset_folder("omniglot-py")
PARTS = ("images_background", "images_evaluation")
URL = "https://raw.githubusercontent.com/brendenlake/omniglot/master/python/{part}.zip"
ZIP_MD5 = {"images_background": "68d2efa1b9178cc56df9314c21c6e718",
           "images_evaluation": "6b91aef0f799c5bb55b94e3f2daec811"}
NUM_CHARACTERS, NUM_DRAWERS = 1623, 20
DRAWING_SIZE = 105  # pixels a side of every PNG
# The characters of each alphabet, numbered character01 .. characterNN in the
# zips (30 alphabets for background, 20 for evaluation: 964 + 659 = 1,623).
ALPHABETS = {
    "images_background": {
        "Alphabet_of_the_Magi": 20, "Anglo-Saxon_Futhorc": 29, "Arcadian": 26, "Armenian": 41,
        "Asomtavruli_(Georgian)": 40, "Balinese": 24, "Bengali": 46,
        "Blackfoot_(Canadian_Aboriginal_Syllabics)": 14, "Braille": 26, "Burmese_(Myanmar)": 34,
        "Cyrillic": 33, "Early_Aramaic": 22, "Futurama": 26, "Grantha": 43, "Greek": 24, "Gujarati": 48,
        "Hebrew": 22, "Inuktitut_(Canadian_Aboriginal_Syllabics)": 16, "Japanese_(hiragana)": 52,
        "Japanese_(katakana)": 47, "Korean": 40, "Latin": 26, "Malay_(Jawi_-_Arabic)": 40,
        "Mkhedruli_(Georgian)": 41, "N_Ko": 33, "Ojibwe_(Canadian_Aboriginal_Syllabics)": 14, "Sanskrit": 42,
        "Syriac_(Estrangelo)": 23, "Tagalog": 17, "Tifinagh": 55,
    },
    "images_evaluation": {
        "Angelic": 20, "Atemayar_Qelisayer": 26, "Atlantean": 26, "Aurek-Besh": 26, "Avesta": 26, "Ge_ez": 26,
        "Glagolitic": 45, "Gurmukhi": 45, "Kannada": 41, "Keble": 26, "Malayalam": 47, "Manipuri": 40,
        "Mongolian": 30, "Old_Church_Slavonic_(Cyrillic)": 45, "Oriya": 46, "Sylheti": 28, "Syriac_(Serto)": 23,
        "Tengwar": 25, "Tibetan": 42, "ULOG": 26,
    },
}
# Bump when the way images are decoded or resized changes: old caches are rebuilt.
CACHE_FORMAT = 1


@dataclass
class Omniglot:
    """Every Omniglot drawing, resized.

    Attributes:
        images: ``uint8`` tensor ``[num_characters, 20, size, size]``; 255 is
            the white paper, 0 the ink.
        characters: ``"<alphabet>/<characterNN>"`` for each character.
    """

    images: Tensor
    characters: List[str]

    def classes(self, characters: Tensor, rotations: bool = True) -> FewShotClasses:
        """The few-shot classes of the given character indices: with
        ``rotations``, each rotation by 0/90/180/270 degrees is a class of its
        own (class ``4 k + r`` is character ``characters[k]`` turned ``r``
        quarter turns counter-clockwise)."""
        characters = torch.as_tensor(characters)
        if characters.dim() != 1 or characters.numel() and (characters.is_floating_point()
                                                            or characters.dtype == torch.bool):
            raise GraphseqError(f"Omniglot.classes needs a 1-D tensor of character indices, got "
                                f"{characters.dtype} of shape {list(characters.shape)}")
        bad = characters[(characters < 0) | (characters >= len(self.characters))]
        if bad.numel():
            raise GraphseqError(f"Omniglot.classes: character index {int(bad[0])} is out of range "
                                f"0-{len(self.characters) - 1}")
        images = self.images[characters]  # [num_characters, 20, size, size]
        names = [self.characters[int(c)] for c in characters]
        if rotations:
            images = torch.stack([torch.rot90(images, r, dims=(-2, -1)) for r in range(4)], dim=1)
            images = images.flatten(0, 1)  # [4 num_characters, 20, size, size]
            names = [f"{name}/rot{90 * r}" for name in names for r in range(4)]
        # Pixels x in [0, 255] become x / 127.5 - 1, the authors' normalisation.
        return FewShotClasses(images.unsqueeze(2), names, mean=0.5, std=0.5)


def omniglot_split(num_characters: int = NUM_CHARACTERS, train: int = 1200, val: int = 100,
                   seed: int = 0) -> Dict[str, Tensor]:
    """A seeded split of the character indices: the first ``train`` of a
    random permutation are the training characters (of which the last ``val``
    are held out for validation), the rest are the test characters."""
    if not 0 < train < num_characters:
        raise GraphseqError(f"Omniglot has {num_characters} characters; train must be between 1 and "
                            f"{num_characters - 1}, got {train}")
    if not 0 <= val < train:
        raise GraphseqError(f"val must be between 0 and train - 1 ({train - 1}), got {val}")
    order = torch.randperm(num_characters, generator=torch.Generator().manual_seed(seed))
    return {"train": order[:train - val].sort().values, "val": order[train - val:train].sort().values,
            "test": order[train:].sort().values}


# --------------------------------------------------------------------------- #
# Finding, checking and caching the images
# --------------------------------------------------------------------------- #

def read_manifest(path: Path, prefix: str = "") -> Dict[str, Checksum]:
    """The checksums of a ``sha256sum`` manifest's lines whose path starts
    with ``prefix``, by path without it; empty when there is no manifest."""
    if not path.is_file():
        return {}
    try:
        text = read_utf8(path)
    except GraphseqError as error:  # not UTF-8, named by read_utf8
        raise GraphseqError(f"the manifest {error}; replace it with a good copy") from None
    except OSError as error:
        raise GraphseqError(f"cannot read the manifest {path}: {error.strerror}") from None
    sums = {}
    for number, line in enumerate(text.splitlines(), 1):
        digest, _, name = line.partition("  ")
        if name and name.startswith(prefix):
            if not re.fullmatch(r"[0-9a-fA-F]{64}", digest):
                raise GraphseqError(f"line {number} of {path} has no SHA-256 ({digest[:20]!r}); "
                                    f"replace the manifest with a good copy")
            sums[name[len(prefix):]] = Checksum(sha256=digest.lower())
    return sums


def find_omniglot(root: Path, mirror: Optional[Path] = None, download: bool = True) -> Path:
    """The ``omniglot-py`` folder holding both parts: the data root's, else
    the mirror's, else the data root's after downloading the zips."""
    for base in [Path(root)] + ([Path(mirror)] if mirror is not None else []):
        folder = base / FOLDER
        if all((folder / part).is_dir() for part in PARTS):
            return folder
    target = Path(root) / FOLDER
    places = f"{target}" + (f" and {Path(mirror) / FOLDER}" if mirror is not None else
                            " (no mirror set: --data-mirror or GRAPHSEQ_MIRROR)")
    if not download:
        raise GraphseqError(f"Omniglot not found: looked for {', '.join(PARTS)} in {places}")
    try:
        with removed_if_failed(target):  # A refused archive leaves no empty folder behind.
            for part in PARTS:
                if not (target / part).is_dir():
                    _download_part(part, target)
    except Exception as error:  # Any failure of the network or the host.
        raise GraphseqError(f"Omniglot not found in {places}, and the download failed: {error}") from None
    return target


def _download_part(part: str, target: Path) -> None:
    """Downloads ``part``'s zip into ``target``, checks it against its
    known MD5 (read in chunks, as every dataset file is checked) and
    extracts it there; the zip is deleted either way. The part is unpacked
    into a folder of its own and then renamed into place, so that an
    extraction cut off (a full disk, Ctrl-C) leaves no half part that a
    later run would take for the whole."""
    archive_path = target / f"{part}.zip"
    download_url(URL.format(part=part), archive_path)
    try:
        md5 = hashlib.md5()
        hash_file(archive_path, md5)
        if md5.hexdigest() != ZIP_MD5[part]:
            raise OSError(f"{part}.zip arrived damaged (its MD5 is not {ZIP_MD5[part]})")
        with unpacking(target / part, inner=part) as unpacked, zipfile.ZipFile(archive_path) as archive:
            archive.extractall(unpacked)
    finally:
        archive_path.unlink(missing_ok=True)


def list_images(folder: Path) -> List[Path]:
    """Every PNG of both parts, in the order that defines the character
    indices: part, alphabet, character, file name."""
    files = []
    for part in PARTS:
        for alphabet in sorted(os.scandir(folder / part), key=lambda e: e.name):
            if not alphabet.is_dir():
                continue
            for character in sorted(os.scandir(alphabet.path), key=lambda e: e.name):
                if character.is_dir():
                    pngs = sorted((e for e in os.scandir(character.path) if e.name.endswith(".png")),
                                  key=lambda e: e.name)
                    for entry in pngs:  # The directory listing tells, with no stat of its own.
                        if not entry.is_file():
                            kind = "a folder" if entry.is_dir() else "not a file"
                            raise GraphseqError(f"{entry.path} is {kind}, not a PNG; move it away or replace "
                                                f"it with a good copy")
                    files += [Path(e.path) for e in pngs]
    return files


def _fingerprint(folder: Path, files: List[Path], size: int) -> str:
    """What a cache is built from: each file's path, size and modification
    time (:func:`~graphseq.data.files.stat_fingerprint`), the output size and
    the cache format."""
    return stat_fingerprint(folder, files, f"omniglot cache format {CACHE_FORMAT}, {size}x{size}\n",
                            "Omniglot image")


def _contents_digest(omniglot: Omniglot) -> str:
    """The SHA-256 of a cache's contents: the images' shape, type and bytes
    and the character names (about 25 MB at 28x28: a tenth of a second)."""
    images = omniglot.images
    if not isinstance(images, Tensor) or images.dtype != torch.uint8:
        raise TypeError("the cached images are not a uint8 tensor")
    digest = hashlib.sha256(f"{list(images.shape)} {images.dtype}\n".encode())
    digest.update("\n".join(omniglot.characters).encode() + b"\n")
    digest.update(memoryview(images.contiguous().numpy()).cast("B"))
    return digest.hexdigest()


def load_omniglot(root: Path, mirror: Optional[Path] = None, size: int = 28, download: bool = True,
                  log: Optional[logging.Logger] = None) -> Omniglot:
    """All 1,623 characters x 20 drawings at ``size`` x ``size``, from the
    cache under ``root`` when it was built from the same files and its
    contents still match their SHA-256."""
    if not is_integer(size) or size < 1:
        raise GraphseqError(f"load_omniglot needs a size of at least 1 pixel, got {size!r}")
    log = log or logging.getLogger("graphseq")
    cache = Path(root) / FOLDER / "processed" / f"omniglot-{size}x{size}.pt"
    # A file where the cache goes is refused before 32,000 PNGs are decoded
    # for a cache that cannot be written; so is a folder that cannot be written, below.
    check_folder_places([cache.parent], "the Omniglot cache goes there")
    if cache.is_dir():
        raise GraphseqError(f"{cache} is not a file (the Omniglot cache goes there); move it away and run again")
    folder = find_omniglot(root, mirror, download)
    files = list_images(folder)
    key = _fingerprint(folder, files, size)
    if cache.is_file():
        # The cache is only ever derived data: whatever is wrong with it, it is
        # rebuilt from the PNGs (checked against their manifest when there is one).
        try:
            stored = load_checkpoint(cache)
            if stored.get("key") != key:
                log.info(f"{cache} was built from other files; rebuilding it")
            elif "sha256" not in stored:
                log.info(f"{cache} has no checksum of its contents (an older graphseq built it); rebuilding it")
            else:
                omniglot = Omniglot(stored["images"], list(stored["characters"]))
                if stored["sha256"] == _contents_digest(omniglot):
                    return omniglot
                log.warning(f"{cache} is damaged (its contents do not match the SHA-256 stored with them); "
                            f"rebuilding it")
        except Exception:  # A torn or foreign file: rebuild it rather than fail.
            log.info(f"{cache} is unreadable; rebuilding it")
    check_writable(cache.parent, f"cannot build the Omniglot cache {cache.name}")
    omniglot = build_omniglot(folder, files, size, log)
    save_checkpoint({"key": key, "images": omniglot.images, "characters": omniglot.characters,
                     "sha256": _contents_digest(omniglot), "source": str(folder)}, cache)
    log.info(f"cached {omniglot.images.shape[0]} characters x {omniglot.images.shape[1]} drawings "
             f"at {size}x{size} in {cache}")
    return omniglot


def build_omniglot(folder: Path, files: List[Path], size: int,
                   log: Optional[logging.Logger] = None) -> Omniglot:
    """Decodes and resizes every PNG (checking it against the manifest beside
    ``folder`` when there is one)."""
    from PIL import Image, UnidentifiedImageError

    log = log or logging.getLogger("graphseq")
    manifest_path = folder.parent / "SHA256SUMS"
    manifest = read_manifest(manifest_path, prefix=f"{folder.name}/")
    if manifest:
        unlisted = [path for path in files if path.relative_to(folder).as_posix() not in manifest]
        if unlisted:
            raise GraphseqError(f"{manifest_path} does not list {unlisted[0]}" + _more(unlisted)
                                + "; is it truncated? Replace it with a good copy")
        missing = sorted({folder / name for name in manifest} - set(files))
        if missing:
            raise GraphseqError(f"{missing[0]} is listed in {manifest_path} but missing" + _more(missing))
    _check_all_characters(folder, files)
    log.info(f"decoding {len(files):,} Omniglot PNGs from {folder}"
             + (" (checking SHA-256 sums)" if manifest else ""))

    characters: Dict[str, int] = {}
    images = np.empty((len(files), size, size), dtype=np.uint8)
    for i, path in enumerate(files):
        relative = path.relative_to(folder).as_posix()
        if relative in manifest:
            check_file(path, manifest[relative], place=f"listed in {manifest_path}")
        try:
            data = path.read_bytes()
        except OSError as error:
            raise GraphseqError(f"cannot read {path}: {error.strerror}") from None
        try:
            with Image.open(io.BytesIO(data)) as image:
                _check_drawing(image, path)
                images[i] = np.asarray(image.convert("L").resize((size, size), Image.BOX))
        except UnidentifiedImageError:
            raise GraphseqError(f"{path} is not a readable PNG (not an image format PIL knows)") from None
        except (OSError, ValueError, SyntaxError) as error:
            raise GraphseqError(f"{path} is not a readable PNG ({error})") from None
        name = "/".join(relative.split("/")[1:3])
        characters[name] = characters.get(name, 0) + 1

    wrong = {name: n for name, n in characters.items() if n != NUM_DRAWERS}
    if wrong:
        name, n = next(iter(wrong.items()))
        raise GraphseqError(f"Omniglot character {name} has {n} drawings in {folder}, not {NUM_DRAWERS}")
    if len(characters) != NUM_CHARACTERS:
        gaps = _numbering_gaps(folder, files)
        log.warning(f"{folder} holds {len(characters)} characters, not {NUM_CHARACTERS} "
                    + (f"(missing: {_first_ten(gaps)})" if gaps else
                       "(no gap in the characterNN numbering shows which)"))
    tensor = torch.from_numpy(images).view(len(characters), NUM_DRAWERS, size, size)
    return Omniglot(tensor, list(characters))


def _check_drawing(image, path: Path) -> None:
    """Refuses a PNG that is not an Omniglot drawing: 105x105 pixels, black
    and white or grey. Another size would be resized like the others and an
    alpha channel dropped by ``convert("L")``, silently, so a foreign image
    would pass for a drawing."""
    if image.size != (DRAWING_SIZE, DRAWING_SIZE):
        raise GraphseqError(f"{path} is {image.size[0]}x{image.size[1]} pixels, not an Omniglot drawing "
                            f"({DRAWING_SIZE}x{DRAWING_SIZE}); replace it with a good copy")
    if image.mode not in ("1", "L"):
        raise GraphseqError(f"{path} has colour mode {image.mode}, not an Omniglot drawing (black and white "
                            f"\"1\" or grey \"L\", no alpha); replace it with a good copy")


def _check_all_characters(folder: Path, files: List[Path]) -> None:
    """Refuses a folder with the real alphabets that lacks some of their
    characters (a character folder deleted, or emptied of its PNGs) or holds
    others: the seeded split permutes the characters found, so one missing
    or added changes every split. A folder of alphabets Omniglot does not
    have is generated data (as the tests write): it is taken as it is, and
    :func:`build_omniglot` logs the gaps in its numbering."""
    real = {(part, alphabet, f"character{n:02d}") for part, alphabets in ALPHABETS.items()
            for alphabet, count in alphabets.items() for n in range(1, count + 1)}
    alphabets = {(part, alphabet) for part, alphabet, _ in real}
    found = {path.parts[-4:-1] for path in files}  # (part, alphabet, character) of part/alphabet/character/png
    if not any(character[:2] in alphabets for character in found):
        return
    missing = sorted("/".join(character) for character in real - found)
    if missing:
        raise GraphseqError(f"{folder} lacks the Omniglot character folder(s) {_first_ten(missing)}: deleted "
                            f"or emptied of their PNGs, they would change every seeded split of the "
                            f"{NUM_CHARACTERS:,} characters; restore them from a good copy")
    extra = sorted("/".join(character) for character in found - real)
    if extra:
        raise GraphseqError(f"{folder} holds character folder(s) Omniglot does not have: {_first_ten(extra)}; "
                            f"they would change every seeded split of the {NUM_CHARACTERS:,} characters; "
                            f"move them away")


def _first_ten(names: List[str]) -> str:
    return ", ".join(names[:10]) + _more(names[9:])


def _more(items: List) -> str:
    return f" (and {len(items) - 1} more)" if len(items) > 1 else ""


def _numbering_gaps(folder: Path, files: List[Path]) -> List[str]:
    """The ``<part>/<alphabet>/characterNN`` folders missing from the
    numbering 1, 2, ... of the characters found in each alphabet."""
    numbers: Dict[str, set] = {}
    for path in files:
        part, alphabet, character = path.relative_to(folder).parts[:3]
        found = re.fullmatch(r"character(\d+)", character)
        if found:
            numbers.setdefault(f"{part}/{alphabet}", set()).add(int(found[1]))
    return [f"{group}/character{n:02d}" for group, found in numbers.items()
            for n in range(1, max(found) + 1) if n not in found]
