"""Views of trained models: pictures and pages that show what a model has
learned, drawn from its activations. For a character language model, an HTML
heat map of single hidden units over a text (Karpathy's "visualizing and
understanding recurrent networks"), with an ON-LSTM's master-forget
distances, and the units whose activations best track simple features of the
text (the position in the line, being inside quotes, ...). Pictures with no
model in them (a captioner's attention, images in the terminal) are in
:mod:`graphseq.pictures`.

Views read a model; they never train one. ``graphseq sample RUN --html F``
and ``--units K`` draw them from the command line. Pictures are drawn with
matplotlib's object-oriented API onto an Agg canvas (no pyplot, no global
backend) and written atomically.
"""
from __future__ import annotations

import html
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .data.text import Vocabulary
from .errors import GraphseqError
from .io import atomic_write_text, check_output_file
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
