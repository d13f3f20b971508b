"""Mini-ImageNet in the layout of Ravi & Larochelle (ICLR 2017): a folder
``mini-imagenet/`` with ``images/`` (one JPEG per image, 600 per class) and
``train.csv``, ``val.csv``, ``test.csv`` (rows ``filename,label``; 64, 16 and
20 classes). The images are not redistributable, so nothing is downloaded:
the folder is read from the data root, then the mirror. Each split is decoded
once, resized to 84x84 and cached as a ``uint8`` tensor under the data root,
keyed by the CSV and the sizes and modification times of the files it was
built from (as ``make`` decides), so a replaced image is decoded again.
"""
from __future__ import annotations

import csv
import io
import hashlib
import logging
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

from ..errors import GraphseqError
from ..io import load_checkpoint, read_utf8, save_checkpoint
from .captions import as_rgb
from .episodes import FewShotClasses
from .files import check_folder_places
from .places import dataset_folder

FOLDER = dataset_folder("mini-imagenet")
SPLITS = ("train", "val", "test")
# The usual ImageNet channel statistics.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
CACHE_FORMAT = 2  # 2: images of more than 8 bits are no longer clipped


def find_miniimagenet(root: Path, mirror: Optional[Path] = None) -> Path:
    """The ``mini-imagenet`` folder of the data root, else of the mirror.
    The cache goes under the data root's, so anything but a folder there is
    refused first, even when the mirror has the images."""
    check_folder_places([Path(root) / FOLDER / "processed"], "the mini-ImageNet cache goes there")
    places = []
    for base in [Path(root)] + ([Path(mirror)] if mirror is not None else []):
        folder = base / FOLDER
        places.append(str(folder))
        if (folder / "images").is_dir() and all((folder / f"{s}.csv").is_file() for s in SPLITS):
            return folder
    raise GraphseqError(f"mini-ImageNet not found: looked for images/ and {', '.join(s + '.csv' for s in SPLITS)} "
                        f"in {' and '.join(places)}. It cannot be downloaded automatically; build it with "
                        f"the Ravi & Larochelle split files (see docs/data.md)")


def read_split(path: Path) -> Dict[str, List[str]]:
    """``{label: [file names]}`` of a split CSV, in the order of first appearance."""
    classes: Dict[str, List[str]] = {}
    seen: Dict[str, int] = {}
    try:
        rows = list(csv.reader(io.StringIO(read_utf8(path), newline="")))  # read_utf8 names a file not UTF-8
    except csv.Error as error:
        raise GraphseqError(f"{path} is not a readable CSV file: {error}") from None
    except OSError as error:
        raise GraphseqError(f"cannot read {path}: {error.strerror}") from None
    for number, row in enumerate(rows, start=1):
        if not row or (number == 1 and row[0].strip().lower() == "filename"):
            continue
        if len(row) != 2:
            raise GraphseqError(f"{path}, line {number}: expected filename,label, got {','.join(row)!r}")
        name, label = row[0].strip(), row[1].strip()
        for field, value in (("filename", name), ("label", label)):
            if not value:  # A file cut right after a comma, say.
                raise GraphseqError(f"{path}, line {number}: empty {field}")
        if name in seen:
            raise GraphseqError(f"{path}, line {number}: {name} is listed twice (first on line {seen[name]})")
        seen[name] = number
        classes.setdefault(label, []).append(name)
    if not classes:
        raise GraphseqError(f"{path} lists no images")
    return classes


def load_miniimagenet(root: Path, mirror: Optional[Path] = None, split: str = "train", size: int = 84,
                      log: Optional[logging.Logger] = None) -> FewShotClasses:
    """The classes of one split, every class with the same number of images."""
    if split not in SPLITS:
        raise GraphseqError(f"unknown mini-ImageNet split {split!r}; known: {', '.join(SPLITS)}")
    log = log or logging.getLogger("graphseq")
    folder = find_miniimagenet(root, mirror)
    classes = read_split(folder / f"{split}.csv")
    counts = {len(files) for files in classes.values()}
    if len(counts) != 1:
        raise GraphseqError(f"{folder / (split + '.csv')}: every class needs the same number of images, "
                            f"found {sorted(counts)}")
    key = _fingerprint(folder, split, classes, size)
    cache = Path(root) / FOLDER / "processed" / f"{split}-{size}x{size}.pt"
    if cache.is_file():
        try:
            stored = load_checkpoint(cache)
            if stored.get("key") == key:
                return FewShotClasses(stored["images"], list(stored["names"]), MEAN, STD)
            log.info(f"{cache} was built from other files; rebuilding it")
        except Exception:  # A torn or foreign file: rebuild it rather than fail.
            log.info(f"{cache} is unreadable; rebuilding it")
    images, names = _decode(folder, classes, size, log)
    save_checkpoint({"key": key, "images": images, "names": names}, cache)
    log.info(f"cached mini-ImageNet {split}: {images.shape[0]} classes x {images.shape[1]} images "
             f"at {size}x{size} in {cache}")
    return FewShotClasses(images, names, MEAN, STD)


def _fingerprint(folder: Path, split: str, classes: Dict[str, List[str]], size: int) -> str:
    digest = hashlib.sha256(f"mini-imagenet cache format {CACHE_FORMAT}, {split}, {size}x{size}\n".encode())
    for label, files in classes.items():
        for name in files:
            path = folder / "images" / name
            stat = path.stat() if path.is_file() else None
            digest.update(f"{label} {name} {stat and (stat.st_size, stat.st_mtime_ns)}\n".encode())
    return digest.hexdigest()


def _decode(folder: Path, classes: Dict[str, List[str]], size: int,
            log: logging.Logger) -> Tuple[torch.Tensor, List[str]]:
    from PIL import Image, UnidentifiedImageError

    per_class = len(next(iter(classes.values())))
    images = np.empty((len(classes), per_class, size, size, 3), dtype=np.uint8)
    log.info(f"decoding {len(classes) * per_class:,} mini-ImageNet images from {folder / 'images'}")
    for c, files in enumerate(classes.values()):
        for i, name in enumerate(files):
            path = folder / "images" / name
            if not path.is_file():
                raise GraphseqError(f"{path} is listed in the split CSV but missing")
            try:
                with Image.open(path) as image:
                    image = as_rgb(image, path)  # 16-bit and float grey scaled, not clipped
                    if image.size != (size, size):
                        image = image.resize((size, size), Image.BILINEAR)
                    images[c, i] = np.asarray(image)
            except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as error:
                raise GraphseqError(f"{path} is not a readable image ({error})") from None
    tensor = torch.from_numpy(images).permute(0, 1, 4, 2, 3).contiguous()  # [classes, per_class, 3, size, size]
    return tensor, list(classes)
