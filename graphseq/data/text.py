"""Text for sequence models: vocabularies of characters or words, a word
tokenizer, TF-IDF vectors, and tiny-shakespeare as one character stream for language models
(read window by window from contiguous streams, as char-rnn does). Its raw
file comes from the data root, the read-only mirror, or the web, through
:func:`graphseq.data.files.locate_raw_files`. The sentence-polarity data
lives in :mod:`graphseq.data.polarity`.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from ..errors import GraphseqError
from ..graphs import to_csr
from .files import Checksum, download_url, locate_raw_files
from .places import dataset_folder

TINY_SHAKESPEARE_FOLDER = dataset_folder("tinyshakespeare")  # under the data root
TINY_SHAKESPEARE_URL = ("https://raw.githubusercontent.com/karpathy/char-rnn/master/"
                        "data/tinyshakespeare/input.txt")
# karpathy/char-rnn, commit 6f9487a6.
TINY_SHAKESPEARE = {"input.txt": Checksum("86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
                                          1_115_394)}


# --------------------------------------------------------------------------- #
# Vocabularies
# --------------------------------------------------------------------------- #

def count_words(sentences: Iterable[Sequence[str]], reader: str, item: str, tokenizer: str) -> Counter:
    """How often each word of ``sentences`` (each a list of words) occurs. A
    sentence given as a string is refused: it would be counted character by
    character."""
    counts: Counter = Counter()
    for sentence in sentences:
        if isinstance(sentence, str):
            raise TypeError(f"{reader} takes each {item} as a list of words, got the string {sentence[:40]!r}; "
                            f"split it with {tokenizer}")
        counts.update(sentence)
    return counts


class Vocabulary:
    """Symbols (characters or words) and their ids.

    Args:
        symbols (list of str): the symbols, in id order.
        unknown (str, optional): a symbol of the list that stands for every
            symbol outside it. Without one, encoding an unknown symbol raises
            a :class:`GraphseqError` naming it. (default: :obj:`None`)
    """

    def __init__(self, symbols: Sequence[str], unknown: Optional[str] = None):
        self.symbols = list(symbols)
        self.index = {s: i for i, s in enumerate(self.symbols)}
        if len(self.index) != len(self.symbols):
            raise ValueError("a vocabulary's symbols must be distinct")
        if unknown is not None and unknown not in self.index:
            raise ValueError(f"the unknown symbol {unknown!r} is not among the symbols")
        self.unknown = unknown

    @classmethod
    def of_characters(cls, text: str) -> "Vocabulary":
        """Every character of ``text``, sorted (char-rnn's vocabulary)."""
        return cls(sorted(set(text)))

    @classmethod
    def of_words(cls, sentences: Iterable[Sequence[str]], min_freq: int = 1,
                 unknown: str = "<unk>") -> "Vocabulary":
        """Words seen at least ``min_freq`` times, most frequent first, after
        the unknown-word symbol (id 0). Each sentence is a list of words, as
        :func:`tokenize` gives; a sentence given as a string is refused, since
        it would be read character by character (:meth:`of_characters` does that)."""
        counts = count_words(sentences, "Vocabulary.of_words", "sentence", "tokenize()")
        words = sorted((w for w, c in counts.items() if c >= min_freq and w != unknown),
                       key=lambda w: (-counts[w], w))
        return cls([unknown] + words, unknown=unknown)

    def __len__(self) -> int:
        return len(self.symbols)

    def encode(self, symbols: Iterable[str]) -> Tensor:
        """The ids of ``symbols`` (a string is read character by character)."""
        symbols = list(symbols)
        if self.unknown is None:
            missing = sorted({s for s in symbols if s not in self.index})
            if missing:
                raise GraphseqError(f"{len(missing)} symbol(s) not in the vocabulary: "
                                    f"{', '.join(map(repr, missing[:10]))}")
            return torch.tensor([self.index[s] for s in symbols], dtype=torch.long)
        fallback = self.index[self.unknown]
        return torch.tensor([self.index.get(s, fallback) for s in symbols], dtype=torch.long)

    def decode(self, ids: Iterable[int] | Tensor, separator: str = "") -> str:
        """The symbols of ``ids``, joined by ``separator``."""
        ids = ids.tolist() if isinstance(ids, Tensor) else list(ids)
        outside = [i for i in ids if not 0 <= i < len(self.symbols)]
        if outside:
            raise GraphseqError(f"Vocabulary.decode: id {outside[0]} is outside the vocabulary's "
                                f"{len(self.symbols)} symbols (ids 0 to {len(self.symbols) - 1})")
        return separator.join(self.symbols[i] for i in ids)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Vocabulary) and self.symbols == other.symbols
                and self.unknown == other.unknown)

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} symbols)"


# --------------------------------------------------------------------------- #
# Character streams
# --------------------------------------------------------------------------- #

def load_tiny_shakespeare(root: Path, mirror: Optional[Path] = None) -> str:
    """The 1,115,394 characters of Karpathy's tiny-shakespeare."""
    folder = locate_raw_files(TINY_SHAKESPEARE_FOLDER, ["input.txt"], Path(root), mirror,
                              lambda target: download_url(TINY_SHAKESPEARE_URL, target / "input.txt"),
                              TINY_SHAKESPEARE)
    return (folder / "input.txt").read_text(encoding="utf-8")


def split_stream(ids: Tensor, val_fraction: float = 0.1) -> Tuple[Tensor, Tensor]:
    """The first ``1 - val_fraction`` of a stream for training, the rest for validation."""
    if not 0.0 < val_fraction < 1.0:
        raise GraphseqError(f"val_fraction must lie strictly between 0 and 1, got {val_fraction}")
    cut = int(ids.numel() * (1.0 - val_fraction))
    return ids[:cut], ids[cut:]


class TextStreams:
    """A stream of ids cut into ``batch_size`` contiguous streams read window
    by window, char-rnn's batching: row ``b`` of window ``k+1`` continues row
    ``b`` of window ``k``, so a recurrent state can be carried across windows.

    Window ``k`` is ``(inputs, targets)``, both ``[batch_size, window]``; the
    targets are the inputs shifted one character on. With
    ``drop_last=False`` a shorter last window covers the tail of every stream.
    ``names`` (of ``batch_size`` and ``window``) and ``text`` word the error
    of a text too short for them.
    """

    def __init__(self, ids: Tensor, batch_size: int, window: int, drop_last: bool = True,
                 names: Tuple[str, str] = ("batch_size", "window"), text: str = "a text"):
        if batch_size < 1 or window < 1:
            raise GraphseqError(f"{names[0]} and {names[1]} must be positive, got {batch_size} and {window}")
        length = (ids.numel() - 1) // batch_size
        if length < (window if drop_last else 1):
            lower = f"{names[0]} or {names[1]}" if drop_last else names[0]
            raise GraphseqError(f"{text} of {ids.numel():,} characters is too short for {names[0]} = "
                                f"{batch_size:,} streams read {names[1]} = {window:,} characters at a time; "
                                f"lower {lower}")
        self.window = window
        self.inputs = ids[:length * batch_size].view(batch_size, length)
        self.targets = ids[1:length * batch_size + 1].view(batch_size, length)
        self.num_windows = length // window if drop_last else -(-length // window)

    def __len__(self) -> int:
        return self.num_windows

    def __getitem__(self, k: int) -> Tuple[Tensor, Tensor]:
        if not 0 <= k < self.num_windows:
            raise IndexError(f"window {k} of {self.num_windows}")
        cols = slice(k * self.window, (k + 1) * self.window)
        return self.inputs[:, cols], self.targets[:, cols]


# --------------------------------------------------------------------------- #
# Words
# --------------------------------------------------------------------------- #

def tokenize(sentence: str) -> List[str]:
    """Lower-cased runs of word characters; everything else separates them."""
    return re.findall(r"\w+", sentence.lower())


def tfidf(sentences: Sequence[str], min_df: int = 2, stop_words: Optional[str] = "english",
          dtype: torch.dtype = torch.float32) -> Tensor:
    """TF-IDF vectors of the sentences, ``[num_sentences, vocabulary]`` as a
    sparse CSR matrix with L2-normalised rows (scikit-learn's
    ``TfidfVectorizer``, sub-linear term frequencies): words in fewer than
    ``min_df`` sentences and English stop words are left out, which keeps
    similarities about content rather than about "the"."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    matrix = TfidfVectorizer(sublinear_tf=True, min_df=min_df, stop_words=stop_words)
    coo = matrix.fit_transform(sentences).tocoo()
    indices = torch.as_tensor(np.stack([coo.row, coo.col]), dtype=torch.long)
    return to_csr(torch.sparse_coo_tensor(indices, torch.as_tensor(coo.data, dtype=dtype), coo.shape,
                                          check_invariants=False).coalesce())
