"""Views of trained models: pictures and pages that show what a model has
learned, drawn from its activations. For a character language model, an HTML
heat map of single hidden units over a text (Karpathy's "visualizing and
understanding recurrent networks"), with an ON-LSTM's master-forget
distances, and the units whose activations best track simple features of the
text (the position in the line, being inside quotes, ...). For a captioner
with attention, each generated word's attention over the image's regions
(the figure of "Show, Attend and Tell").

Views read a model; they never train one. ``graphseq sample RUN --html F``
and ``--units K`` draw them from the command line, as does ``graphseq caption
RUN IMAGE --attention F``. Pictures are drawn with matplotlib's
object-oriented API onto an Agg canvas (no pyplot, no global backend) and
written atomically.

For images in the terminal (what a person labelling few-shot episodes at the
prompt looks at), :func:`image_blocks` draws a grey image with Unicode
half-block characters and :func:`side_by_side` lays pictures out in rows
that fit the terminal (:func:`terminal_width`).
"""
from __future__ import annotations

import html
import math
import shutil
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .checks import is_integer
from .data.text import Vocabulary
from .errors import GraphseqError
from .io import atomic_write_text, check_output_file, write_png
from .models.charlm import CharLM


# --------------------------------------------------------------------------- #
# Character language models: single units
# --------------------------------------------------------------------------- #

# Characters the model reads at once, the state carried from window to
# window: a step's memory is bounded, whatever the length of the text.
VIEW_WINDOW = 4096


def _read_windows(model: CharLM, vocab: Vocabulary, text: str, window: int, distances: bool = False):
    """The top layer's output after each character of ``text`` ``[len(text),
    hidden]``, read as one chain in windows of ``window`` characters that
    carry the state over (the same numbers as one pass, in bounded memory),
    and with ``distances`` an ON-LSTM's master-forget distances ``[len(text), layers]``."""
    if window < 1:
        raise ValueError(f"the window must be at least 1 character, got {window}")
    model.eval()
    device = next(model.parameters()).device
    tokens = vocab.encode(text).to(device)
    outputs, extras, state = [], [], None
    for start in range(0, tokens.numel(), window):
        piece = tokens[start:start + window]
        edge_index, batch = model.chains(1, piece.numel(), device)
        embedded = model.embedding(piece)
        if distances:
            hidden, state, distance = model.rnn(embedded, edge_index, batch, state=state, return_distances=True)
            extras.append(distance.cpu())
        else:
            hidden, state = model.rnn(embedded, edge_index, batch, state=state)
        outputs.append(hidden.cpu())
    if not outputs:
        return torch.zeros(0, model.config["hidden_size"]), torch.zeros(0, model.config["num_layers"])
    return torch.cat(outputs), torch.cat(extras) if distances else None


@torch.no_grad()
def hidden_activations(model: CharLM, vocab: Vocabulary, text: str, window: int = VIEW_WINDOW) -> Tensor:
    """The top recurrent layer's output after each character of ``text``,
    ``[len(text), hidden_size]``, the text read as one chain (``window``
    characters at a time, the state carried over)."""
    return _read_windows(model, vocab, text, window)[0]


@torch.no_grad()
def master_forget_distances(model: CharLM, vocab: Vocabulary, text: str,
                            window: int = VIEW_WINDOW) -> Optional[Tensor]:
    """For an ON-LSTM, the top layer's master-forget distance after each
    character of ``text`` as a fraction of its chunks ``[len(text)]``: near 1
    when the step erases most of the ordered cell (a constituent closes),
    near 0 when it keeps it. :obj:`None` for other cells."""
    if model.config["cell"] != "onlstm":
        return None
    distances = _read_windows(model, vocab, text, window, distances=True)[1]
    return distances[:, -1] / model.rnn.num_chunks


def check_cells(cells: Sequence[int], hidden_size: int, option: str = "") -> None:
    """Refuses units a model of ``hidden_size`` units lacks (``option``
    starts the message: ``"--cells 3,999: "``)."""
    bad = [c for c in cells if not 0 <= c < hidden_size]
    if bad:
        raise GraphseqError(f"{option}unit(s) {', '.join(map(str, bad))} out of range: the model has "
                            f"{hidden_size} hidden units (0..{hidden_size - 1})")


def _colour(value: float) -> str:
    # Red for positive, blue for negative, white at zero (Karpathy's heat maps).
    v = max(-1.0, min(1.0, value))
    fade = int(255 * (1 - abs(v)))
    return f"rgb(255,{fade},{fade})" if v >= 0 else f"rgb({fade},{fade},255)"


def heatmap_html(text: str, activations: Tensor, cells: Sequence[int],
                 title: str = "hidden units", rows: Optional[Dict[str, Tensor]] = None) -> str:
    """An HTML page with one block per unit of ``cells``: every character of
    ``text`` is a span whose background is that unit's activation after it
    (red positive, blue negative, scaled by the unit's largest magnitude when
    it exceeds 1). Hovering a character shows the value. ``rows`` adds named
    blocks of other per-character values ``[len(text)]`` drawn the same way."""
    if activations.shape[0] != len(text):
        raise ValueError(f"expected activations of shape [{len(text)}, hidden], "
                         f"got {list(activations.shape)}")
    check_cells(cells, activations.shape[1])
    named = [(f"unit {cell}", activations[:, cell]) for cell in cells] + list((rows or {}).items())
    blocks = []
    for name, values in named:
        scale = max(1.0, float(values.abs().max())) if values.numel() else 1.0
        spans = []
        for char, value in zip(text, values.tolist()):
            shown = "\u21b5\n" if char == "\n" else html.escape(char)
            spans.append(f'<span style="background:{_colour(value / scale)}" '
                         f'title="{value:+.3f}">{shown}</span>')
        blocks.append(f"<h2>{html.escape(name)}</h2>\n<pre>{''.join(spans)}</pre>")
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif} pre{font-size:14px;line-height:1.5;"
            "white-space:pre-wrap}</style></head><body>\n"
            f"<h1>{html.escape(title)}</h1>\n" + "\n".join(blocks) + "\n</body></html>\n")


def text_features(text: str) -> Dict[str, Tensor]:
    """Per-character features a unit might track: the position in the line,
    the characters left until the line ends, being inside double quotes or
    parentheses, inside a word, and on a speaker's line (``ROMEO:``)."""
    position, remaining, quoted, bracketed, in_word, speaker = [], [], [], [], [], []
    inside_quotes = False
    depth = 0
    for line in text.split("\n"):
        is_speaker = line.rstrip().endswith(":") and len(line) > 1
        for i, char in enumerate(line + "\n"):
            if char == '"':
                inside_quotes = not inside_quotes
            depth += (char == "(") - (char == ")")
            position.append(i)
            remaining.append(len(line) - i)
            quoted.append(inside_quotes)
            bracketed.append(depth > 0)
            in_word.append(char.isalpha())
            speaker.append(is_speaker)
    n = len(text)  # The loop adds one line break too many at the very end.
    features = {"position in line": position, "characters to line end": remaining,
                "inside quotes": quoted, "inside parentheses": bracketed,
                "inside a word": in_word, "speaker line": speaker}
    return {name: torch.tensor(values[:n], dtype=torch.float) for name, values in features.items()}


NOTHING_VARIES = ("no feature of the text (line position, quotes, words, ...) varies along it, "
                  "so no unit tracks one")


def interesting_units(text: str, activations: Tensor, top: int = 5) -> Dict[str, List[Tuple[int, float]]]:
    """For each feature of :func:`text_features` that varies over ``text``,
    the ``top`` units whose activation correlates most strongly with it, as
    ``(unit, Pearson r)`` pairs, strongest first."""
    centred = activations - activations.mean(0)
    spread = centred.norm(dim=0).clamp_min(1e-12)
    found = {}
    for name, feature in text_features(text).items():
        feature = feature - feature.mean()
        if float(feature.norm()) == 0.0:
            continue  # A constant feature (no quotes in the text, say) says nothing.
        r = (centred * feature[:, None]).sum(0) / (spread * feature.norm())
        order = r.abs().argsort(descending=True)[:top]
        found[name] = [(int(u), float(r[u])) for u in order]
    return found


def describe_units(found: Dict[str, List[Tuple[int, float]]]) -> str:
    """:func:`interesting_units` as lines of text, one feature per line."""
    return "\n".join(f"{name}: " + ", ".join(f"unit {u} (r={r:+.2f})" for u, r in units)
                     for name, units in found.items())


def write_heatmap(model: CharLM, vocab: Vocabulary, text: str, path: str | Path,
                  cells: Optional[Sequence[int]] = None, top: int = 2) -> List[int]:
    """Writes :func:`heatmap_html` of ``cells`` over ``text`` to ``path``.
    Without ``cells`` it draws, for each feature of :func:`text_features`,
    the ``top`` units that track it best. An ON-LSTM's master-forget
    distances come last. Returns the units drawn. A ``path`` whose name
    does not end in ``.html`` is refused before anything is read."""
    check_output_file(path, ".html")
    activations = hidden_activations(model, vocab, text)
    if cells is None:
        found = interesting_units(text, activations, top)
        cells = list(dict.fromkeys(u for units in found.values() for u, _ in units))
        if not cells:
            raise GraphseqError(f"{NOTHING_VARIES}; name the units to draw with --cells")
    distances = master_forget_distances(model, vocab, text)
    rows = None if distances is None else {"master-forget distance (top layer, share of chunks)": distances}
    atomic_write_text(path, heatmap_html(text, activations, cells, rows=rows,
                                         title=f"{model.config['cell']} hidden units"))
    return list(cells)


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


def terminal_width(least: int = 40) -> int:
    """The terminal's width in columns (``COLUMNS`` if set; 80 where it
    cannot be read, as when the output is a pipe), at least ``least``: on a
    narrower terminal lines are laid out for ``least`` columns, and the
    terminal folds them (text cut any narrower would be hard to read)."""
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
