"""Pictures of tensors, with no model in them: a captioner's attention over
an image's regions, each word's map beside the image (the figure of "Show,
Attend and Tell"), and grey images drawn in the terminal with Unicode
half-block characters (what a person labelling few-shot episodes at the
prompt looks at), laid out in rows that fit the terminal, or as PNG bytes
for a web page. Figures are drawn
with matplotlib's object-oriented API onto an Agg canvas (no pyplot, no
global backend) and written atomically.
"""
from __future__ import annotations

import io
import math
import shutil
from pathlib import Path
from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .checks import is_integer
from .io import check_output_file, write_png


# --------------------------------------------------------------------------- #
# Captioners: where each word looks
# --------------------------------------------------------------------------- #

def attention_map(alpha: Tensor, size: int) -> Tensor:
    """A word's attention over a square grid of regions ``[R]`` (row by row)
    stretched smoothly to a ``[size, size]`` map that keeps each region's share."""
    side = math.isqrt(alpha.numel())
    if side * side != alpha.numel():
        raise ValueError(f"attention over {alpha.numel()} regions is not a square grid")
    grid = alpha.detach().float().cpu().view(1, 1, side, side)
    return F.interpolate(grid, size=(size, size), mode="bilinear", align_corners=False)[0, 0]


def draw_attention(images: Sequence[Tensor], captions: Sequence[Sequence[str]],
                   attention: Sequence[Tensor], path: str | Path, columns: int = 8,
                   end_symbol: str = "<end>") -> None:
    """Writes one block of panels per image: the image under its caption,
    then the image once per generated word (and the end symbol) with that
    word's attention over the regions shown bright and the rest dimmed.

    Args:
        images: images ``float [3, S, S]`` in ``[0, 1]``.
        captions: the generated words of each image.
        attention: per image ``[len(words) + 1, R]``, the attention of each
            word over the ``R`` regions (a square grid), the end symbol's last.
        path: the PNG file to write.
        columns: panels per row. (default: :obj:`8`)
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not (len(images) == len(captions) == len(attention)):
        raise ValueError("draw_attention needs one caption and one attention per image")
    if columns < 1:
        raise ValueError(f"draw_attention needs columns >= 1, got {columns}")
    check_output_file(path, ".png")
    blocks = []
    for words, alpha in zip(captions, attention):
        if alpha.size(0) < len(words) + 1:
            raise ValueError(f"{len(words)} words need {len(words) + 1} rows of attention, "
                             f"got {alpha.size(0)}")
        blocks.append(math.ceil((len(words) + 2) / columns))
    rows = sum(blocks)
    # The constrained layout makes room for each panel's title.
    figure = Figure(figsize=(1.6 * columns, 2.0 * rows), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    row = 0
    for image, words, alpha, height in zip(images, captions, attention, blocks):
        picture = image.detach().float().cpu().permute(1, 2, 0).clamp(0, 1)
        size = picture.size(0)
        panels = [(" ".join(words), None)] + [(w, alpha[i]) for i, w in enumerate(list(words) + [end_symbol])]
        for k, (title, weights) in enumerate(panels):
            axes = figure.add_subplot(rows, columns, row * columns + k + 1)
            axes.set_xticks([])
            axes.set_yticks([])
            if weights is None:
                axes.imshow(picture.numpy(), interpolation="nearest")
                axes.set_title("\n".join(_wrap(title, 26)), fontsize=7, loc="left")
                continue
            heat = attention_map(weights, size)
            heat = heat / heat.max().clamp_min(1e-12)
            axes.imshow((picture * (0.25 + 0.75 * heat[..., None])).numpy(), interpolation="nearest")
            # Coloured on the whole range 0 (no weight) to 1 (the largest region's), not stretched to the
            # map's own: attention spread evenly then reads as even, not as blobs of its noise.
            axes.imshow(heat.numpy(), cmap="inferno", alpha=0.35, interpolation="bilinear", vmin=0.0, vmax=1.0)
            axes.set_title(f"{title}  ({float(weights.max()):.2f})", fontsize=8)
        row += height
    figure.suptitle("attention of each word over the image's regions (brightest: most weight; "
                    "in brackets: the largest region's share)", fontsize=9)
    write_png(figure, path)


def _wrap(text: str, width: int) -> List[str]:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return lines + ([line] if line else [])


# --------------------------------------------------------------------------- #
# Images in the terminal
# --------------------------------------------------------------------------- #

# Upper half, lower half, both: one character cell shows two pixels stacked.
HALF_BLOCKS = {(False, False): " ", (True, False): "\u2580", (False, True): "\u2584", (True, True): "\u2588"}


# Below this spread of values (a share of the image's magnitude, at least 1) an
# image is a blank page: its faint noise is not stretched into a pattern.
MIN_CONTRAST = 0.05


def image_blocks(image: Tensor, width: int = 20, ink_is_dark: bool = True,
                 threshold: float = 0.5, min_contrast: float = MIN_CONTRAST) -> List[str]:
    """A grey image ``[height, width]`` (or ``[1, height, width]``; a colour
    image ``[3, height, width]`` is drawn in grey) as lines
    of half-block characters, ``width`` columns wide and about ``width / 2``
    lines tall (a character cell is twice as tall as it is wide, so the
    picture keeps its proportions). The image is scaled to ``width`` pixels
    by area averaging; its values are scaled to ``[0, 1]`` by its own
    minimum and maximum, and a pixel is ink where it is darker (or, without
    ``ink_is_dark``, lighter) than ``threshold``.

    Pixels that are not finite (NaN, inf) are drawn as paper, and the
    minimum and maximum are those of the finite ones. An image whose values
    spread less than ``min_contrast`` times its magnitude (at least 1) is a
    blank page: a constant image, or faint noise, is drawn as paper, not
    stretched into ink."""
    if not is_integer(width) or width < 1:
        raise ValueError(f"image_blocks needs a whole number width >= 1, got {width!r}")
    if not (image.dim() == 2 or (image.dim() == 3 and image.size(0) in (1, 3))) or image.numel() == 0:
        raise ValueError(f"image_blocks expects an image [height, width] or [channels (1 or 3), height, width], "
                         f"got shape {list(image.shape)}")
    image = image.detach().float().cpu()
    if image.dim() == 3:
        image = image.mean(dim=0)
    height = max(2, round(width * image.size(0) / image.size(1) / 2) * 2)
    blank = [" " * width] * (height // 2)
    finite = torch.isfinite(image)
    if not finite.any():
        return blank
    low, high = image[finite].min(), image[finite].max()
    image = torch.where(finite, image, high if ink_is_dark else low)  # paper
    small = F.adaptive_avg_pool2d(image[None, None], (height, width))[0, 0]
    low, high = small.min(), small.max()
    if float(high - low) < min_contrast * max(1.0, abs(float(low)), abs(float(high))):
        return blank
    small = (small - low) / (high - low)
    ink = (small < threshold) if ink_is_dark else (small > threshold)
    return ["".join(HALF_BLOCKS[(bool(ink[row, col]), bool(ink[row + 1, col]))] for col in range(width))
            for row in range(0, height, 2)]


def terminal_width(least: int = 20) -> int:
    """The terminal's width in columns (``COLUMNS`` if set; 80 where it
    cannot be read, as when the output is a pipe), at least ``least``: on a
    narrower terminal lines are laid out for ``least`` columns, and the
    terminal folds them (text cut any narrower would be hard to read).
    Pictures drawn to this width fit it, so they never fold into noise."""
    return max(least, shutil.get_terminal_size((80, 24)).columns)


def side_by_side(pictures: Sequence[List[str]], captions: Sequence[str], gap: int = 2,
                 width: Optional[int] = None) -> List[str]:
    """Pictures (lists of equally long lines) in rows that fit in ``width``
    columns (default: the terminal's), each with its caption above it; a
    picture wider than ``width`` gets a row of its own."""
    lines: List[str] = []
    if not pictures:
        return lines
    width = terminal_width() if width is None else width
    column = max(max(len(line) for line in picture) for picture in pictures)
    column = max(column, max(len(c) for c in captions))
    per_row = max(1, (width + gap) // (column + gap))
    for start in range(0, len(pictures), per_row):
        row_pictures = pictures[start:start + per_row]
        row_captions = captions[start:start + per_row]
        if lines:
            lines.append("")
        lines.append((" " * gap).join(c.ljust(column) for c in row_captions).rstrip())
        rows = [(" " * gap).join((p[k] if k < len(p) else "").ljust(column) for p in row_pictures).rstrip()
                for k in range(max(len(p) for p in row_pictures))]
        # Lines blank in every picture of the row (the paper around the ink) say nothing.
        drawn = [k for k, row in enumerate(rows) if row.strip()]
        lines += rows[drawn[0]:drawn[-1] + 1] if drawn else []
    return lines


# --------------------------------------------------------------------------- #
# Images as PNG
# --------------------------------------------------------------------------- #

def png_bytes(image: Tensor) -> bytes:
    """An image ``[height, width]`` or ``[channels (1 or 3), height, width]``
    as the bytes of a PNG file: ``uint8`` pixels as they are, any other
    values scaled to ``0-255`` by their own minimum and maximum (pixels that
    are not finite are black; a constant image is black)."""
    from PIL import Image

    if not (image.dim() == 2 or (image.dim() == 3 and image.size(0) in (1, 3))) or image.numel() == 0:
        raise ValueError(f"png_bytes expects an image [height, width] or [channels (1 or 3), height, width], "
                         f"got shape {list(image.shape)}")
    image = image.detach().cpu()
    if image.dim() == 3:
        image = image.permute(1, 2, 0) if image.size(0) == 3 else image[0]
    if image.dtype != torch.uint8:
        image = image.float()
        finite = torch.isfinite(image)
        low, high = (image[finite].min(), image[finite].max()) if finite.any() else (torch.zeros(()),) * 2
        image = torch.where(finite, image, low) - low
        scale = float(high - low)
        image = (image * (255 / scale) if scale > 0 else image).round().to(torch.uint8)
    buffer = io.BytesIO()
    Image.fromarray(image.contiguous().numpy()).save(buffer, format="PNG")
    return buffer.getvalue()
