"""A character-level language model in the manner of Karpathy's char-rnn,
built from graphseq's chain layers: the characters of a window are the nodes
of a chain graph, an embedding feeds a :class:`~graphseq.nn.ChainLSTM` (or
RNN, GRU, ON-LSTM) stepped along it, and a linear read-out predicts the next
character at every node. Also here: loading a trained run and sampling text
from it. What single hidden units respond to is drawn by :mod:`graphseq.views`.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.text import Vocabulary
from ..errors import GraphseqError
from ..graphs import chain, lengths_to_batch
from ..io import check_file_place, first_sentence, load_checkpoint
from ..nn.recurrent_cells import ChainGRU, ChainLSTM, ChainONLSTM, ChainRNN
from . import evaluating

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
        if tokens.dim() != 2:
            raise GraphseqError(f"forward_windows needs tokens of shape [num_streams, window], "
                                f"got shape {tuple(tokens.shape)}")
        num_streams, window = tokens.shape
        if window < 1:
            raise GraphseqError(f"forward_windows needs windows of at least 1 character, got tokens of shape "
                                f"{tuple(tokens.shape)}")
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
    check_file_place(path)  # a folder there is named as such, not as missing
    if not path.is_file():
        seeds = sorted(Path(run_dir).glob(f"seed-*/{CHECKPOINT}"))
        hint = f"; runs of several seeds keep theirs in {seeds[0].parent}" if seeds else \
            "; is it the output folder of a charlm pipeline?"
        raise GraphseqError(f"no {CHECKPOINT} in {run_dir}{hint}")
    checkpoint = load_checkpoint(path, map_location=device)
    try:
        model = CharLM(**checkpoint["model_config"])
        model.load_state_dict(checkpoint["model"])
        vocab = Vocabulary(checkpoint["vocabulary"])
    except Exception as error:  # The checkpoint of another pipeline (a captioner, BERT) or a foreign file.
        reason = f"no {error}" if isinstance(error, KeyError) else first_sentence(error)
        raise GraphseqError(f"{path} is not a charlm checkpoint ({reason})") from None
    return model.to(device).eval(), vocab


def tempered_softmax(logits: Tensor, temperature: float, dim: int = -1) -> Tensor:
    """``softmax(logits / temperature)`` for any finite temperature ``> 0``.
    A temperature so small that the division overflows (``1e-40`` in float32)
    would give ``inf - inf``; there the logits less their maximum are divided
    in float64, where only the likeliest symbols keep a share. Entries of
    ``-inf`` (banned symbols) stay impossible."""
    scaled = logits / temperature
    if bool(torch.isfinite(scaled.amax(dim=dim)).all()):  # The formula of old, to the bit.
        return F.softmax(scaled, dim=dim)
    wide = logits.double()
    return F.softmax((wide - wide.amax(dim=dim, keepdim=True)) / temperature, dim=dim).to(logits.dtype)


@torch.no_grad()
def sample(model: CharLM, vocab: Vocabulary, prime: str = "", length: int = 500,
           temperature: float = 1.0, seed: Optional[int] = None) -> str:
    """``prime`` followed by ``length`` characters drawn one at a time from
    the model's softmax at ``temperature`` (0 picks the likeliest character).
    An empty prime starts the model after a line break (the vocabulary must hold one)."""
    if not math.isfinite(temperature) or temperature < 0:
        raise GraphseqError(f"temperature must be a finite number >= 0, got {temperature}")
    if length < 0:
        raise GraphseqError(f"length must be non-negative, got {length}")
    if model.embedding.num_embeddings != len(vocab):
        raise GraphseqError(f"sample: the model reads {model.embedding.num_embeddings} characters but the "
                            f"vocabulary has {len(vocab)}: they come from different runs")
    if not prime and "\n" not in vocab.index:
        raise GraphseqError("sample starts after a line break when the prime is empty, but this vocabulary "
                            "has no line break: give a prime")
    with evaluating(model):
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
                char = int(torch.multinomial(tempered_softmax(last, temperature), 1, generator=generator))
            drawn.append(char)
            logits, state = model.forward_windows(torch.tensor([[char]], device=device), state)
    return prime + vocab.decode(drawn)


def nats_to_bits(nats: float) -> float:
    return nats / math.log(2)


def checkpoint_payload(model: CharLM, vocab: Vocabulary, **extra: Any) -> Dict[str, Any]:
    """What a checkpoint holds besides the training state: the weights, the
    configuration to rebuild the model, and the vocabulary."""
    return {"model": model.state_dict(), "model_config": dict(model.config),
            "vocabulary": list(vocab.symbols), **extra}
