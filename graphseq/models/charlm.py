"""A character-level language model in the manner of Karpathy's char-rnn,
built from graphseq's chain layers: the characters of a window are the nodes
of a chain graph, an embedding feeds a :class:`~graphseq.nn.ChainLSTM` (or
RNN, GRU, ON-LSTM) stepped along it, and a linear read-out predicts the next
character at every node. Also here: loading a trained run, sampling text from
it, and looking at what single hidden units respond to (an HTML heat map and
the units that best track simple features of the text).
"""
from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.text import Vocabulary
from ..errors import GraphseqError
from ..graphs import chain, lengths_to_batch
from ..io import atomic_write_text, load_checkpoint
from ..nn.recurrent import ChainGRU, ChainLSTM, ChainONLSTM, ChainRNN

State = Union[Tensor, Tuple[Tensor, ...]]
CELLS = {"rnn": ChainRNN, "lstm": ChainLSTM, "gru": ChainGRU, "onlstm": ChainONLSTM}
CHECKPOINT = "checkpoint.pt"


class CharLM(nn.Module):
    """Embedding, a stack of chain recurrent layers, and a linear read-out.

    Args:
        vocab_size (int): number of distinct characters.
        cell (str): ``"rnn"``, ``"lstm"``, ``"gru"`` or ``"onlstm"``. (default: ``"lstm"``)
        embedding_dim (int): size of each character embedding. (default: :obj:`64`)
        hidden_size (int): size of each recurrent layer's state. (default: :obj:`256`)
        num_layers (int): stacked recurrent layers. (default: :obj:`1`)
        dropout (float): dropout between recurrent layers and before the
            read-out. (default: :obj:`0.`)
        chunk_size (int): ON-LSTM's master-gate chunk size. (default: :obj:`8`)

    Shapes:
        - **input:** character ids :math:`(|\\mathcal{V}|)`, chain edges
          :math:`(2, |\\mathcal{E}|)`, graph ids :math:`(|\\mathcal{V}|)`, state
          as the recurrent layer takes it
        - **output:** logits :math:`(|\\mathcal{V}|, \\text{vocab\\_size})` and
          the final state
    """

    def __init__(self, vocab_size: int, cell: str = "lstm", embedding_dim: int = 64,
                 hidden_size: int = 256, num_layers: int = 1, dropout: float = 0.0,
                 chunk_size: int = 8):
        super().__init__()
        if cell not in CELLS:
            raise GraphseqError(f"unknown cell {cell!r}; known cells: {', '.join(CELLS)}")
        # Everything needed to rebuild the model from a checkpoint.
        self.config = dict(vocab_size=vocab_size, cell=cell, embedding_dim=embedding_dim,
                           hidden_size=hidden_size, num_layers=num_layers, dropout=dropout,
                           chunk_size=chunk_size)
        extra = {"chunk_size": chunk_size} if cell == "onlstm" else {}
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.rnn = CELLS[cell](embedding_dim, hidden_size, num_layers,
                               dropout=dropout if num_layers > 1 else 0.0, **extra)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(hidden_size, vocab_size)
        self._graphs: Dict[Tuple[int, int, str], Tuple[Tensor, Tensor]] = {}

    def encode(self, tokens: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None,
               state: Optional[State] = None) -> Tuple[Tensor, State]:
        """The top recurrent layer's output at every node ``[num_nodes, hidden]``, and the state."""
        return self.rnn(self.embedding(tokens), edge_index, batch=batch, state=state)

    def forward(self, tokens: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None,
                state: Optional[State] = None) -> Tuple[Tensor, State]:
        hidden, state = self.encode(tokens, edge_index, batch, state)
        return self.head(self.dropout(hidden)), state  # [num_nodes, vocab_size]

    def chains(self, num_streams: int, window: int, device: torch.device) -> Tuple[Tensor, Tensor]:
        """``edge_index`` and ``batch`` of ``num_streams`` chains of ``window`` nodes (cached)."""
        key = (num_streams, window, str(device))
        if key not in self._graphs:
            lengths = [window] * num_streams
            self._graphs[key] = (chain(lengths).to(device), lengths_to_batch(lengths).to(device))
        return self._graphs[key]

    def forward_windows(self, tokens: Tensor, state: Optional[State] = None) -> Tuple[Tensor, State]:
        """Reads one window of each stream, ``tokens`` ``[num_streams, window]``,
        continuing from ``state``; returns logits ``[num_streams, window, vocab_size]``."""
        num_streams, window = tokens.shape
        edge_index, batch = self.chains(num_streams, window, tokens.device)
        logits, state = self(tokens.reshape(-1), edge_index, batch, state)
        return logits.view(num_streams, window, -1), state


def detach_state(state: Optional[State]) -> Optional[State]:
    """Cuts the graph behind a carried state: truncated backpropagation through time."""
    if state is None:
        return None
    if isinstance(state, Tensor):
        return state.detach()
    return tuple(detach_state(s) for s in state)


def load_char_lm(run_dir: str | Path, device: str | torch.device = "cpu") -> Tuple[CharLM, Vocabulary]:
    """The model and vocabulary stored in a charlm run's checkpoint."""
    path = Path(run_dir) / CHECKPOINT
    if not path.is_file():
        seeds = sorted(Path(run_dir).glob(f"seed-*/{CHECKPOINT}"))
        hint = f"; runs of several seeds keep theirs in {seeds[0].parent}" if seeds else \
            "; is it the output folder of a charlm pipeline?"
        raise GraphseqError(f"no {CHECKPOINT} in {run_dir}{hint}")
    checkpoint = load_checkpoint(path, map_location=device)
    model = CharLM(**checkpoint["model_config"]).to(device)
    model.load_state_dict(checkpoint["model"])
    model.eval()
    return model, Vocabulary(checkpoint["vocabulary"])


@torch.no_grad()
def sample(model: CharLM, vocab: Vocabulary, prime: str = "", length: int = 500,
           temperature: float = 1.0, seed: Optional[int] = None) -> str:
    """``prime`` followed by ``length`` characters drawn one at a time from
    the model's softmax at ``temperature`` (0 picks the likeliest character).
    An empty prime starts the model after a line break."""
    if temperature < 0:
        raise GraphseqError(f"temperature must be non-negative, got {temperature}")
    if length < 0:
        raise GraphseqError(f"length must be non-negative, got {length}")
    model.eval()
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    context = vocab.encode(prime or "\n").to(device)
    logits, state = model.forward_windows(context.view(1, -1))
    drawn: List[int] = []
    for _ in range(length):
        last = logits[0, -1].float().cpu()
        if temperature == 0:
            char = int(last.argmax())
        else:
            char = int(torch.multinomial(F.softmax(last / temperature, dim=-1), 1, generator=generator))
        drawn.append(char)
        logits, state = model.forward_windows(torch.tensor([[char]], device=device), state)
    return prime + vocab.decode(drawn)


@torch.no_grad()
def hidden_activations(model: CharLM, vocab: Vocabulary, text: str) -> Tensor:
    """The top recurrent layer's output after each character of ``text``,
    ``[len(text), hidden_size]``, the text read as one chain."""
    model.eval()
    device = next(model.parameters()).device
    tokens = vocab.encode(text).to(device)
    edge_index, batch = model.chains(1, tokens.numel(), device)
    hidden, _ = model.encode(tokens, edge_index, batch)
    return hidden.cpu()


@torch.no_grad()
def master_forget_distances(model: CharLM, vocab: Vocabulary, text: str) -> Optional[Tensor]:
    """For an ON-LSTM, the top layer's master-forget distance after each
    character of ``text`` as a fraction of its chunks ``[len(text)]``: near 1
    when the step erases most of the ordered cell (a constituent closes),
    near 0 when it keeps it. :obj:`None` for other cells."""
    if model.config["cell"] != "onlstm":
        return None
    hidden_activations(model, vocab, text)  # The layer keeps the distances of its last call.
    return model.rnn.last_distances[:, -1].cpu() / model.rnn.num_chunks


# --------------------------------------------------------------------------- #
# Looking at single units
# --------------------------------------------------------------------------- #

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
    hidden = activations.shape[1]
    bad = [c for c in cells if not 0 <= c < hidden]
    if bad:
        raise GraphseqError(f"unit(s) {', '.join(map(str, bad))} out of range: the model has "
                            f"{hidden} hidden units (0..{hidden - 1})")
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
    distances come last. Returns the units drawn."""
    activations = hidden_activations(model, vocab, text)
    if cells is None:
        found = interesting_units(text, activations, top)
        cells = list(dict.fromkeys(u for units in found.values() for u, _ in units))
    distances = master_forget_distances(model, vocab, text)
    rows = None if distances is None else {"master-forget distance (top layer, share of chunks)": distances}
    atomic_write_text(path, heatmap_html(text, activations, cells, rows=rows,
                                         title=f"{model.config['cell']} hidden units"))
    return list(cells)


def nats_to_bits(nats: float) -> float:
    return nats / math.log(2)


def checkpoint_payload(model: CharLM, vocab: Vocabulary, **extra: Any) -> Dict[str, Any]:
    """What a checkpoint holds besides the training state: the weights, the
    configuration to rebuild the model, and the vocabulary."""
    return {"model": model.state_dict(), "model_config": dict(model.config),
            "vocabulary": list(vocab.symbols), **extra}
