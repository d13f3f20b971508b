"""A captioning set graphseq draws itself: small images of one to three
coloured shapes, each with several captions from a small grammar ("a large
red circle left of a small blue square"). Everything follows from a seed, so
two machines draw the same pixels, and because the scene behind every image is
known, a generated caption can be parsed back and checked object by object.

Four shapes times four colours make sixteen colour-shape pairs; four of them
(one per colour and per shape) never occur in the training, validation or
``test`` splits. The ``test_unseen`` split puts at least one of them in every
image, which measures whether a captioner composes colour and shape words it
has only seen apart.

The grammar (every caption is one of these, words separated by spaces)::

    caption  := ["there is"] object (relation object)*
    object   := "a" SIZE COLOUR SHAPE
    relation := "left of" | "right of" | "above" | "below"

Objects are laid out along one axis, and a caption names them in order along
it, forwards ("A left of B left of C") or backwards ("C right of B right of A").
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from ..errors import GraphseqError

SHAPES = ("circle", "square", "triangle", "diamond")
COLOURS: Dict[str, Tuple[int, int, int]] = {
    "red": (220, 50, 40), "green": (40, 180, 70), "blue": (50, 100, 235), "yellow": (235, 205, 40)}
SIZES: Dict[str, float] = {"small": 5.0, "large": 9.0}  # radius in pixels of a 64-pixel image
# One held-out pair per colour and per shape (a Latin-square diagonal), so
# every word is still seen with three partners in training.
UNSEEN_PAIRS = frozenset({("red", "triangle"), ("green", "diamond"), ("blue", "circle"),
                          ("yellow", "square")})
ALL_PAIRS = tuple((colour, shape) for colour in COLOURS for shape in SHAPES)
SEEN_PAIRS = tuple(pair for pair in ALL_PAIRS if pair not in UNSEEN_PAIRS)

# The relation from an object to the next one along the axis, read forwards
# and backwards.
RELATIONS = {"horizontal": ("left of", "right of"), "vertical": ("above", "below")}
RELATION_AXIS = {"left of": ("horizontal", True), "right of": ("horizontal", False),
                 "above": ("vertical", True), "below": ("vertical", False)}
SPLITS = ("train", "val", "test", "test_unseen")
MAX_OBJECTS = 3
BACKGROUND = 40.0


@dataclass(frozen=True)
class ShapeObject:
    """One drawn object: its words and its centre in pixels (x right, y down)."""
    size: str
    colour: str
    shape: str
    x: float
    y: float

    @property
    def words(self) -> Tuple[str, str, str]:
        return (self.size, self.colour, self.shape)


@dataclass(frozen=True)
class Scene:
    """The objects of one image in order along ``axis`` (left to right, or
    top to bottom)."""
    objects: Tuple[ShapeObject, ...]
    axis: str  # "horizontal" or "vertical"

    def describe(self) -> List[Tuple[str, str, str]]:
        """``(size, colour, shape)`` of each object, in order along the axis."""
        return [o.words for o in self.objects]


@dataclass(frozen=True)
class ParsedCaption:
    """What a caption says: its objects' words and the relation between
    neighbours, as written."""
    objects: Tuple[Tuple[str, str, str], ...]
    relations: Tuple[str, ...]

    def along_axis(self) -> Tuple[Optional[str], Tuple[Tuple[str, str, str], ...]]:
        """The axis and the objects in the scene's order (left to right or top
        to bottom); ``None`` for a single object. A caption that mixes axes
        or directions is not in the grammar and raises :class:`CaptionParseError`."""
        if not self.relations:
            return None, self.objects
        meanings = {RELATION_AXIS[r] for r in self.relations}
        if len(meanings) != 1:
            raise CaptionParseError(f"relations {list(self.relations)} mix axes or directions")
        axis, forwards = meanings.pop()
        return axis, self.objects if forwards else self.objects[::-1]


class CaptionParseError(ValueError):
    """A caption outside the shapes grammar."""


# --------------------------------------------------------------------------- #
# Drawing
# --------------------------------------------------------------------------- #

def shape_mask(shape: str, cx: float, cy: float, radius: float, size: int) -> np.ndarray:
    """A boolean ``[size, size]`` mask of a shape centred at ``(cx, cy)``
    whose extent is about ``radius`` pixels from the centre."""
    centres = np.arange(size, dtype=np.float32) + 0.5  # pixel centres
    dx, dy = centres[None, :] - cx, centres[:, None] - cy  # broadcast to [size, size]
    if shape == "circle":
        return dx * dx + dy * dy <= radius * radius
    if shape == "square":
        half = 0.85 * radius  # about the area of the circle
        return (np.abs(dx) <= half) & (np.abs(dy) <= half)
    if shape == "diamond":
        return np.abs(dx) + np.abs(dy) <= 1.2 * radius
    if shape == "triangle":  # pointing up, apex at the top
        top, bottom = -radius, 0.8 * radius
        inside = (dy >= top) & (dy <= bottom)
        return inside & (np.abs(dx) <= (dy - top) / (bottom - top) * 1.1 * radius)
    raise ValueError(f"unknown shape {shape!r}; known shapes: {', '.join(SHAPES)}")


def draw(scene: Scene, size: int = 64, rng: Optional[np.random.Generator] = None) -> np.ndarray:
    """The image of a scene, ``uint8 [3, size, size]``: a dark background with
    a little noise, each object in its colour (shifted a little by ``rng``,
    so that no colour is one exact RGB value)."""
    rng = rng if rng is not None else np.random.default_rng(0)
    scale = size / 64.0
    image = np.full((size, size, 3), BACKGROUND, dtype=np.float32)
    image += rng.normal(0.0, 6.0, image.shape).astype(np.float32)
    for obj in scene.objects:
        mask = shape_mask(obj.shape, obj.x * scale, obj.y * scale, SIZES[obj.size] * scale, size)
        colour = np.asarray(COLOURS[obj.colour], dtype=np.float32) + rng.uniform(-15, 15, 3)
        image[mask] = colour
    return np.clip(image, 0, 255).round().astype(np.uint8).transpose(2, 0, 1)


# --------------------------------------------------------------------------- #
# Scenes and captions
# --------------------------------------------------------------------------- #

def random_scene(rng: np.random.Generator, pairs: Sequence[Tuple[str, str]],
                 must_include: Sequence[Tuple[str, str]] = (), max_objects: int = MAX_OBJECTS) -> Scene:
    """One to ``max_objects`` distinct objects with colour-shape pairs from
    ``pairs`` (and one from ``must_include`` if given), in slots along a
    random axis of a 64-pixel canvas, so that objects never overlap and the
    relation words are true."""
    if not 1 <= max_objects <= MAX_OBJECTS:
        raise GraphseqError(f"random_scene needs 1 <= max_objects <= {MAX_OBJECTS}, got {max_objects}")
    # Objects after the first come from ``pairs`` in two sizes and differ from each other and from the first.
    known, first = set(map(tuple, pairs)), set(map(tuple, must_include))
    distinct = len(SIZES) * len(known) + (1 if first and not first & known else 0)
    if distinct < max_objects:
        raise GraphseqError(f"random_scene cannot draw {max_objects} distinct objects from the colour-shape "
                            f"pairs {list(pairs)} (two sizes each)")
    count = int(rng.integers(1, max_objects + 1))
    chosen: List[Tuple[str, str, str]] = []
    while len(chosen) < count:
        if must_include and not chosen:
            colour, shape = must_include[int(rng.integers(len(must_include)))]
        else:
            colour, shape = pairs[int(rng.integers(len(pairs)))]
        words = (("small", "large")[int(rng.integers(2))], colour, shape)
        if words not in chosen:  # Two identical objects would make captions ambiguous.
            chosen.append(words)
    order = rng.permutation(count)  # which object takes which slot
    axis = ("horizontal", "vertical")[int(rng.integers(2))]
    slot = 64.0 / count
    objects = []
    for k in range(count):
        size, colour, shape = chosen[int(order[k])]
        radius = SIZES[size]
        room = max(0.0, slot / 2 - radius - 1.5)
        along = slot * (k + 0.5) + rng.uniform(-room, room)
        across = rng.uniform(radius + 2.0, 64.0 - radius - 2.0)
        x, y = (along, across) if axis == "horizontal" else (across, along)
        objects.append(ShapeObject(size, colour, shape, float(x), float(y)))
    return Scene(tuple(objects), axis)


def captions(scene: Scene) -> List[str]:
    """Every caption of the grammar for ``scene``: forwards and backwards
    along its axis, with and without "there is" (two for a single object)."""
    phrases = [f"a {size} {colour} {shape}" for size, colour, shape in scene.describe()]
    forward, backward = RELATIONS[scene.axis]
    orders = [f" {forward} ".join(phrases)]
    if len(phrases) > 1:
        orders.append(f" {backward} ".join(phrases[::-1]))
    return orders + [f"there is {text}" for text in orders]


def _words(caption: str | Sequence[str]) -> List[str]:
    """The words of a caption given as a string or already as words."""
    return caption.split() if isinstance(caption, str) else list(caption)


def parse_caption(caption: str | Sequence[str]) -> ParsedCaption:
    """Reads a caption of the grammar back into its objects and relations;
    anything else raises :class:`CaptionParseError` naming where it failed."""
    tokens = _words(caption)
    k = 2 if tokens[:2] == ["there", "is"] else 0
    objects, relations = [], []
    while True:
        words = tokens[k:k + 4]
        if (len(words) < 4 or words[0] != "a" or words[1] not in SIZES or words[2] not in COLOURS
                or words[3] not in SHAPES):
            raise CaptionParseError(f"expected 'a SIZE COLOUR SHAPE' at word {k} of {' '.join(tokens)!r}")
        objects.append(tuple(words[1:]))
        k += 4
        if k == len(tokens):
            return ParsedCaption(tuple(objects), tuple(relations))
        for relation in RELATION_AXIS:
            if tokens[k:k + len(relation.split())] == relation.split():
                relations.append(relation)
                k += len(relation.split())
                break
        else:
            raise CaptionParseError(f"expected a relation at word {k} of {' '.join(tokens)!r}")


def mentioned_objects(tokens: str | Sequence[str]) -> List[Tuple[str, str, str]]:
    """Every ``SIZE COLOUR SHAPE`` run of words in a caption, grammatical or
    not, so that a caption with one wrong word still gets credit for the
    objects it names right."""
    tokens = _words(tokens)
    return [tuple(tokens[k:k + 3]) for k in range(len(tokens) - 2)
            if tokens[k] in SIZES and tokens[k + 1] in COLOURS and tokens[k + 2] in SHAPES]


def score_objects(tokens: str | Sequence[str], scene: Scene) -> Tuple[int, int, bool]:
    """``(right, named, exact)``: how many of the scene's objects the caption
    (a string or its words) names with the right size, colour and shape (each
    scene object counted once), how many objects it names, and whether it
    parses to exactly the scene (the same objects in the same order along the
    right axis)."""
    tokens = _words(tokens)
    truth = Counter(scene.describe())
    named = Counter(mentioned_objects(tokens))
    right = sum((truth & named).values())
    try:
        axis, ordered = parse_caption(tokens).along_axis()
        exact = list(ordered) == scene.describe() and axis in (None, scene.axis)
        exact = exact and (axis is not None or len(ordered) == 1)
    except CaptionParseError:
        exact = False
    return right, sum(named.values()), exact


# --------------------------------------------------------------------------- #
# The splits
# --------------------------------------------------------------------------- #

@dataclass
class ShapesSplit:
    """One split: images ``uint8 [N, 3, size, size]``, their scenes, and
    each image's captions."""
    images: Tensor
    scenes: List[Scene]
    captions: List[List[str]]

    def __len__(self) -> int:
        return len(self.scenes)


def generate_split(split: str, count: int, seed: int = 0, image_size: int = 64,
                   max_objects: int = MAX_OBJECTS) -> ShapesSplit:
    """``count`` images of ``split`` (one of ``train``, ``val``, ``test``,
    ``test_unseen``) drawn from ``seed``; the same arguments always give the
    same pixels, and the splits of one seed are drawn from separate streams."""
    if split not in SPLITS:
        raise GraphseqError(f"unknown shapes split {split!r}; known splits: {', '.join(SPLITS)}")
    if count < 0 or image_size < 16 or not 1 <= max_objects <= MAX_OBJECTS:
        raise GraphseqError(f"shapes: need count >= 0, image_size >= 16 and 1 <= max_objects <= "
                            f"{MAX_OBJECTS}, got {count}, {image_size}, {max_objects}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, SPLITS.index(split)]))
    unseen = sorted(UNSEEN_PAIRS) if split == "test_unseen" else ()
    # Scene and image one after the other, so a smaller split is a prefix of a larger one.
    scenes, images = [], np.zeros((count, 3, image_size, image_size), dtype=np.uint8)
    for i in range(count):
        scenes.append(random_scene(rng, SEEN_PAIRS, unseen, max_objects))
        images[i] = draw(scenes[-1], image_size, rng)
    return ShapesSplit(torch.from_numpy(images), scenes, [captions(s) for s in scenes])


def scene_attributes(scene: Scene) -> List[str]:
    """The attribute labels of an image for pretraining an encoder: each
    shape, colour and size present, each colour-shape pair present, and the
    number of objects."""
    labels = set()
    for size, colour, shape in scene.describe():
        labels |= {shape, colour, size, f"{colour} {shape}"}
    labels.add(f"{len(scene.objects)} objects")
    return sorted(labels)



def load_shapes(split: str, count: int, seed: int = 0, image_size: int = 64,
                max_objects: int = MAX_OBJECTS):
    """A generated split as a :class:`~graphseq.data.captions.CaptionSet`
    (images in memory, the scenes kept for exact scoring, the scene
    attributes as labels)."""
    from .captions import CaptionSet

    data = generate_split(split, count, seed, image_size, max_objects)
    return CaptionSet(data.captions, images=data.images, scenes=data.scenes,
                      labels=[scene_attributes(s) for s in data.scenes])
