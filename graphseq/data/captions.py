"""Image-caption data: the word vocabulary of captions, one dataset type for
every source (images with several captions each, and attribute labels for
pretraining an image encoder), and readers for the two formats captioning
work uses, MS-COCO's ``captions_*.json`` beside an image folder and the
Flickr8k/Flickr30k token files (``IMAGE#N<tab>caption`` lines). The generated
shapes set (:mod:`graphseq.data.shapes`) fills the same type from memory.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
import urllib.request
import warnings
import zipfile
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

from ..errors import GraphseqError, draw_bars
from .files import check_folder_places, removed_if_failed
from .places import dataset_folder
from .text import Vocabulary, count_words

PAD, START, END, UNKNOWN = "<pad>", "<start>", "<end>", "<unk>"
SPECIALS = (PAD, START, END, UNKNOWN)

COCO_FOLDER = dataset_folder("coco")  # under the data root
COCO_URL = "http://images.cocodataset.org"
COCO_SPLITS = ("train2014", "val2014", "train2017", "val2017")
COCO_ANNOTATIONS = {"2014": "annotations/annotations_trainval2014.zip",
                    "2017": "annotations/annotations_trainval2017.zip"}

# Words too common in captions of every picture to say what is in one.
STOPWORDS = frozenset(
    "a an the of in on at to and with is are is there its it his her their this that some two "
    "three one other for by from while as near next up down".split())


def tokenize_caption(caption: str) -> List[str]:
    """Lower-cased words (letters, accented ones included, digits, inner
    apostrophes); punctuation separates them and is dropped, as the COCO
    evaluation tokenizer does."""
    return re.findall(r"[^\W_]+(?:'[^\W\d_]+)?", caption.lower())


def caption_vocabulary(captions: Iterable[Sequence[str]], min_count: int = 1) -> Vocabulary:
    """The padding, start, end and unknown symbols (ids 0-3), then every
    word used at least ``min_count`` times, most frequent first."""
    counts = count_words(captions, "caption_vocabulary", "caption", "tokenize_caption")
    words = sorted((w for w, c in counts.items() if c >= min_count and w not in SPECIALS),
                   key=lambda w: (-counts[w], w))
    return Vocabulary(list(SPECIALS) + words, unknown=UNKNOWN)


class CaptionSet(torch.utils.data.Dataset):
    """Images with their captions.

    Images are either held in memory (``images``, ``uint8 [N, 3, H, W]``) or
    read from ``paths`` when asked for, converted to RGB and resized to
    ``image_size`` squares. Item ``i`` is ``(image float [3, S, S] in [0, 1],
    captions of image i)``.

    Args:
        captions (list of list of str): the captions of each image.
        images (Tensor, optional): the images, in memory.
        paths (list of Path, optional): image files, read on demand.
        image_size (int): side of the square images files are resized to.
            (default: :obj:`64`)
        labels (list of list of str, optional): attribute labels of each image
            for pretraining an encoder; by default the content words of its
            captions.
        scenes (list, optional): the generated scene behind each image
            (shapes only), for exact scoring.
    """

    def __init__(self, captions: List[List[str]], images: Optional[Tensor] = None,
                 paths: Optional[List[Path]] = None, image_size: int = 64,
                 labels: Optional[List[List[str]]] = None, scenes: Optional[list] = None):
        if (images is None) == (paths is None):
            raise ValueError("a CaptionSet holds either images or paths")
        count = len(images) if images is not None else len(paths)
        if len(captions) != count:
            raise ValueError(f"{count} images but {len(captions)} caption lists")
        for i, caps in enumerate(captions):
            if isinstance(caps, str) or not all(isinstance(c, str) for c in caps):
                raise TypeError(f"CaptionSet takes a list of caption strings for each image, got {caps!r:.60} "
                                f"for image {i}")
        self.captions = captions
        self.tokens = [[tokenize_caption(c) for c in caps] for caps in captions]
        self.images = images
        self.paths = paths
        self.image_size = image_size if images is None else images.size(-1)
        self.labels = labels if labels is not None else [content_words(t) for t in self.tokens]
        self.scenes = scenes

    def __len__(self) -> int:
        return len(self.captions)

    def __getitem__(self, index: int):
        return self.load_images([index])[0], self.captions[index]

    def _indices(self, name: str, indices) -> List[int]:
        """``indices`` (a sequence, or a 1-d tensor or array, of ints or a boolean mask over the images) as a list."""
        if isinstance(indices, (Tensor, np.ndarray)):
            if indices.ndim != 1:
                raise TypeError(f"CaptionSet.{name} takes a sequence or 1-d tensor of indices, got a {indices.ndim}-d "
                                f"{type(indices).__name__}; pass [i] for one image (data[i] gives the item itself)")
            indices = indices.tolist()
        elif isinstance(indices, (int, np.integer, str)):
            raise TypeError(f"CaptionSet.{name} takes a sequence or 1-d tensor of indices, got {indices!r}; "
                            f"pass [i] for one image (data[i] gives the item itself)")
        indices = list(indices)
        if indices and all(isinstance(i, (bool, np.bool_)) for i in indices):
            if len(indices) != len(self):
                raise ValueError(f"CaptionSet.{name} got a boolean mask over {len(indices)} images, "
                                 f"but the set has {len(self)}")
            return [i for i, keep in enumerate(indices) if keep]
        for i in indices:
            if not isinstance(i, (int, np.integer)) or isinstance(i, (bool, np.bool_)):
                raise TypeError(f"CaptionSet.{name} takes integer indices or a boolean mask, got {i!r}")
            if not -len(self) <= i < len(self):
                raise IndexError(f"CaptionSet.{name} got index {i}, out of range for {len(self)} images")
        return [int(i) for i in indices]

    def load_images(self, indices: Sequence[int] | Tensor) -> Tensor:
        """The images at ``indices`` as ``float [len, 3, S, S]`` in ``[0, 1]``."""
        indices = self._indices("load_images", indices)
        if self.images is not None:
            return self.images[indices].float().div_(255.0)
        return torch.stack([read_image(self.paths[i], self.image_size) for i in indices])

    def subset(self, indices: Sequence[int] | Tensor | np.ndarray) -> "CaptionSet":
        """The images at ``indices`` (a sequence, or a 1-d array or tensor of ints or a boolean mask) with all
        that belongs to them."""
        indices = self._indices("subset", indices)
        pick = lambda items: None if items is None else [items[i] for i in indices]  # noqa: E731
        return CaptionSet([self.captions[i] for i in indices],
                          images=None if self.images is None else self.images[indices],
                          paths=pick(self.paths), image_size=self.image_size,
                          labels=pick(self.labels), scenes=pick(self.scenes))

    def __repr__(self) -> str:
        where = "in memory" if self.images is not None else "on disk"
        return (f"CaptionSet({len(self)} images {where}, "
                f"{sum(len(c) for c in self.captions)} captions)")


def content_words(tokenized_captions: Sequence[Sequence[str]]) -> List[str]:
    """The words of an image's captions that are not stop words: its
    "visual concepts", the attributes an encoder is pretrained to spot."""
    return sorted({w for caption in tokenized_captions for w in caption if w not in STOPWORDS})


def read_image(path: Path, size: int) -> Tensor:
    """An image file as ``float [3, size, size]`` in ``[0, 1]``: turned the
    way its EXIF orientation says (as a photo is shown), made 8-bit RGB by
    :func:`as_rgb`, and resized (squashed) to a square, as the captioning
    encoders take it."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            # Pillow only warns of an image over MAX_IMAGE_PIXELS (and refuses
            # one over twice that); both are refused here, before decoding.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as image:
                image = as_rgb(ImageOps.exif_transpose(image), path).resize((size, size), Image.BILINEAR)
                array = np.asarray(image, dtype=np.uint8).copy()
    except FileNotFoundError:
        raise GraphseqError(f"image not found: {path}") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        pixels = re.search(r"\d+", str(error))  # "Image size (N pixels) exceeds limit ..."
        raise GraphseqError(f"cannot read image {path}: too large "
                            f"({pixels[0] if pixels else 'too many'} pixels)") from None
    except (UnidentifiedImageError, OSError, ValueError) as error:  # ValueError: a mode Pillow cannot convert
        raise GraphseqError(f"cannot read image {path}: {error}") from None
    return torch.from_numpy(array).permute(2, 0, 1).float().div_(255.0)


def as_rgb(image, path: Path):
    """A Pillow image as 8-bit RGB. Transparent pixels are laid on white, as
    a viewer shows them (and as Hugging Face's ``convert_to_rgb`` does): the
    background of the generated shapes is a noisy dark grey of one data set,
    while this reader serves every set. Grey levels of more than 8 bits are
    scaled by the range their mode stands for, so that a picture reads the
    same saved with 8 or 16 bits: ``I;16`` (and Pillow's ``I`` of a 16-bit
    PNG or PGM) from 0-65535, floats (``F``) from [0, 1]. An ``I`` or ``F``
    image outside that range is refused by name: nothing in the file says
    what its numbers mean (counts, depths, 0-255 floats)."""
    from PIL import Image

    if image.mode in ("RGBA", "LA", "PA", "RGBa") or (image.mode in ("P", "L", "RGB")
                                                      and "transparency" in image.info):
        rgba = image.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")
    if image.mode.startswith("I") or image.mode == "F":
        grey = np.asarray(image, dtype=np.float32)  # exact for every 16-bit level
        top = 1.0 if image.mode == "F" else 65535.0
        if not np.isfinite(grey).all() or grey.min() < 0 or grey.max() > top:
            kind = "floats" if image.mode == "F" else "integers"
            raise GraphseqError(f"cannot read image {path}: its pixels are {kind} (mode {image.mode}) from "
                                f"{np.nanmin(grey):g} to {np.nanmax(grey):g}, outside [0, {top:g}]; save it as "
                                f"an 8-bit image")
        return Image.fromarray(np.round(grey * np.float32(255.0 / top)).astype(np.uint8), "L").convert("RGB")
    return image.convert("RGB")


# --------------------------------------------------------------------------- #
# MS-COCO captions
# --------------------------------------------------------------------------- #

def read_coco_captions(annotation_file: Path, image_folder: Path, image_size: int = 64) -> CaptionSet:
    """A COCO captions file (``{"images": [{"id", "file_name"}, ...],
    "annotations": [{"image_id", "caption"}, ...]}``) and the folder of its
    images, as a :class:`CaptionSet` ordered by image id. Images without a
    caption are left out."""
    annotation_file, image_folder = Path(annotation_file), Path(image_folder)
    try:
        data = json.loads(annotation_file.read_text(encoding="utf-8"))
        images, notes = data["images"], data["annotations"]
        files: Dict[int, str] = {}
        for number, image in enumerate(images):
            image_id = _coco_id(annotation_file, f"image {number}", image["id"])
            if not isinstance(image["file_name"], str) or not image["file_name"].strip():
                raise GraphseqError(f"{annotation_file}: image id {image_id} has file_name {image['file_name']!r}, "
                                    f"expected a file name")
            if image_id in files:
                raise GraphseqError(f"{annotation_file}: image id {image_id} is listed twice among its images "
                                    f"({files[image_id]} and {image['file_name']})")
            files[image_id] = image["file_name"]
        captions: Dict[int, List[str]] = {}
        for number, note in enumerate(notes):
            image_id = _coco_id(annotation_file, f"annotation {number}", note["image_id"])
            caption = note["caption"]
            if not isinstance(caption, str) or not caption.strip():
                raise GraphseqError(f"{annotation_file}: annotation {number} (image id {image_id}) has caption "
                                    f"{caption!r}, expected a non-blank string")
            captions.setdefault(image_id, []).append(caption.strip())
    except FileNotFoundError:
        raise GraphseqError(f"COCO captions file not found: {annotation_file}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise GraphseqError(f"{annotation_file} is not a valid JSON file: {error}") from None
    except (KeyError, TypeError, ValueError) as error:
        raise GraphseqError(f"{annotation_file} is not in the COCO captions format "
                            f"(missing or bad {error})") from None
    unknown = sorted(set(captions) - set(files))
    if unknown:
        raise GraphseqError(f"{annotation_file}: captions of image id {unknown[0]}, which is not "
                            f"among its images")
    if not captions:
        raise GraphseqError(f"{annotation_file} has no captions")
    ids = sorted(i for i in files if i in captions)
    paths = [image_folder / files[i] for i in ids]
    _check_images(paths, f"listed in {annotation_file}")
    return CaptionSet([captions[i] for i in ids], paths=paths, image_size=image_size)


def _check_images(paths: Sequence[Path], where: str) -> None:
    """Refuses, before any is read (maybe hours into training), the first
    image file that is missing or empty, with how many are: one ``stat``
    each, nothing decoded."""
    bad = []
    for path in paths:
        try:
            info = path.stat()
        except OSError:  # Gone, or a folder on the way is.
            bad.append((path, "missing"))
            continue
        if not stat.S_ISREG(info.st_mode):
            bad.append((path, "not a file"))
        elif info.st_size == 0:
            bad.append((path, "empty (0 bytes)"))
    if bad:
        raise GraphseqError(f"{bad[0][0]} is {bad[0][1]} ({where}; {len(bad)} of its {len(paths)} captioned "
                            f"images are missing or empty)")


def _coco_id(annotation_file: Path, where: str, value) -> int:
    """An image id of a COCO captions file: an integer, or a string of one."""
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise GraphseqError(f"{annotation_file}: {where} has image id {value!r}, expected an integer")
    return value


def _fetch(url: str, path: Path) -> None:
    """Downloads ``url`` to ``path`` through a temporary file, with a progress bar."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as f:
        tmp = Path(f.name)
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                total = int(response.headers.get("Content-Length") or 0) or None
                with tqdm(total=total, unit="B", unit_scale=True, desc=path.name, disable=not draw_bars()) as bar:
                    while chunk := response.read(1 << 20):
                        f.write(chunk)
                        bar.update(len(chunk))
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    tmp.replace(path)


def _extract(archive: Path, target: Path, keep: Callable[[str], bool]) -> None:
    """Extracts the members of a zip that ``keep`` accepts, each under its
    own name but never outside ``target`` (no absolute paths, no ``..``)."""
    with zipfile.ZipFile(archive) as zf:
        for member in zf.infolist():
            parts = Path(member.filename).parts
            if member.is_dir() or not keep(member.filename) or ".." in parts or Path(member.filename).is_absolute():
                continue
            out = target.joinpath(*parts)
            out.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(member) as source, open(out, "wb") as f:
                shutil.copyfileobj(source, f)


def _fetch_and_extract(url: str, folder: Path, prefix: str, fetch: Callable[[str, Path], None]) -> Path:
    """The members of the zip at ``url`` whose names start with ``prefix``
    (``NAME/...``), extracted into a staging folder ``folder/.NAME.partial``
    that is returned whole: what is moved into place from it is never half
    written. The archive, kept beside until then, is used again by a run
    that stopped before the end."""
    archive = folder / Path(url).name
    if not archive.is_file():  # _fetch leaves nothing under the name until the archive is whole.
        fetch(url, archive)
    staging = folder / f".{prefix.split('/')[0]}.partial"
    shutil.rmtree(staging, ignore_errors=True)  # One a killed run left.
    try:
        _extract(archive, staging, lambda member: member.startswith(prefix))
    except zipfile.BadZipFile as error:
        shutil.rmtree(staging, ignore_errors=True)
        archive.unlink()
        raise GraphseqError(f"{archive} is not a whole zip file ({error}); it was removed, "
                            f"run again to fetch it again") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging


def download_coco(folder: Path, split: str, fetch: Callable[[str, Path], None] = _fetch) -> None:
    """Fetches what ``folder`` lacks of a COCO split (``train2014``,
    ``val2014``, ``train2017``, ``val2017``): the captions file from the
    year's annotation archive (241 MB for 2014) and the split's images
    (13 GB for train2014, 6 GB for val2014). Both are extracted beside their
    place and moved into it whole, so that a run stopped half-way leaves no
    partial split folder; archives are deleted once extracted."""
    year = split[-4:]
    if year not in COCO_ANNOTATIONS:
        raise GraphseqError(f"unknown COCO split {split!r}; known: train2014, val2014, train2017, val2017")
    folder.mkdir(parents=True, exist_ok=True)
    annotation = folder / "annotations" / f"captions_{split}.json"
    if not annotation.is_file():
        url = f"{COCO_URL}/{COCO_ANNOTATIONS[year]}"
        staging = _fetch_and_extract(url, folder, "annotations/captions_", fetch)
        annotation.parent.mkdir(exist_ok=True)
        for path in sorted((staging / "annotations").glob("*")):  # the year's other split too
            if not (annotation.parent / path.name).exists():
                os.replace(path, annotation.parent / path.name)
        shutil.rmtree(staging, ignore_errors=True)  # none if the archive holds no captions
        (folder / Path(url).name).unlink()
    if not (folder / split).is_dir():
        url = f"{COCO_URL}/zips/{split}.zip"
        staging = _fetch_and_extract(url, folder, f"{split}/", fetch)
        if not (staging / split).is_dir():
            shutil.rmtree(staging, ignore_errors=True)
            raise GraphseqError(f"{folder / Path(url).name} holds no {split}/ images; delete it to fetch it again")
        os.replace(staging / split, folder / split)
        shutil.rmtree(staging)
        (folder / Path(url).name).unlink()


def locate_coco(split: str, root: Path, mirror: Optional[Path] = None, download: bool = True,
                fetch: Callable[[str, Path], None] = _fetch) -> tuple[Path, Path]:
    """The captions file and image folder of a COCO split: under
    ``root/coco`` (``annotations/captions_SPLIT.json`` and ``SPLIT/``), else
    under the read-only ``mirror/coco`` (read in place, never copied: the
    images are many gigabytes), else downloaded into ``root/coco``. A
    place that is a file, or a link to nothing, is refused by name before
    it is passed over: the download it would lead to is many gigabytes, and
    into the root it fails half-way."""
    places = [Path(root) / COCO_FOLDER] + ([Path(mirror) / COCO_FOLDER] if mirror is not None else [])
    for folder, goes_there in zip(places, ("the COCO files go there", "the mirror's COCO files are read there")):
        check_folder_places([folder], goes_there)
        annotation = folder / "annotations" / f"captions_{split}.json"
        if annotation.is_file() and (folder / split).is_dir():
            return annotation, folder / split
    if not download:
        raise GraphseqError(f"COCO {split} not found: looked for annotations/captions_{split}.json "
                            f"and {split}/ in {' and '.join(map(str, places))}")
    try:
        with removed_if_failed(places[0]):  # no empty coco/ left by a failed download
            download_coco(places[0], split, fetch)
    except GraphseqError:
        raise
    except Exception as error:  # Any failure of the network or the host.
        raise GraphseqError(f"COCO {split} is not in {' or '.join(map(str, places))}, and the "
                            f"download from {COCO_URL} failed: {error}") from None
    return places[0] / "annotations" / f"captions_{split}.json", places[0] / split


# --------------------------------------------------------------------------- #
# Flickr8k / Flickr30k
# --------------------------------------------------------------------------- #

def read_flickr_captions(token_file: Path, image_folder: Path, split_file: Optional[Path] = None,
                         image_size: int = 64) -> CaptionSet:
    """A Flickr8k (``Flickr8k.token.txt``) or Flickr30k
    (``results_20130124.token``) caption file, lines ``IMAGE.jpg#N<tab>caption``,
    with the folder of its images. ``split_file`` (Flickr8k's
    ``Flickr_8k.trainImages.txt``, ...: one file name a line) keeps only the
    images it lists, in its order; without it all images, sorted by name."""
    token_file, image_folder = Path(token_file), Path(image_folder)
    captions: Dict[str, List[str]] = {}
    try:
        lines = token_file.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise GraphseqError(f"Flickr captions file not found: {token_file}") from None
    except UnicodeDecodeError as error:
        raise GraphseqError(f"{token_file} is not UTF-8 text: {error}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        key, tab, caption = line.partition("\t")
        name, hash_, _ = key.partition("#")
        if not tab or not hash_ or not name:
            raise GraphseqError(f"{token_file}, line {number}: expected 'IMAGE.jpg#N<tab>caption', "
                                f"got {line[:60]!r}")
        captions.setdefault(name.strip(), []).append(caption.strip())
    if split_file is None:
        names = sorted(captions)
    else:
        try:
            names = [n.strip() for n in Path(split_file).read_text(encoding="utf-8").splitlines() if n.strip()]
        except FileNotFoundError:
            raise GraphseqError(f"Flickr split file not found: {split_file}") from None
        missing = [n for n in names if n not in captions]
        if missing:
            raise GraphseqError(f"{split_file} lists {len(missing)} image(s) without captions in "
                                f"{token_file}, e.g. {missing[0]}")
    return CaptionSet([captions[n] for n in names], paths=[image_folder / n for n in names],
                      image_size=image_size)
