"""Text for BERT-style pretraining: corpora as documents of sentences, the
next-sentence pairs drawn from them, and the masking of the masked language
model (Devlin et al., NAACL 2019).

A corpus is any folder of UTF-8 text files: one document per file, one
sentence per line; a blank line also ends a document, so one file may hold
several. The shared texts are tiny-shakespeare, read as speeches (the
speaker's line dropped, consecutive lines of a speech are next sentences),
and the sentence-polarity snippets, each a document of one sentence.

Each example is one graph: the tokens ``[CLS] A [SEP] B [SEP]`` of a sentence
pair (or ``[CLS] A [SEP]`` for a sentence without a successor) are its nodes,
numbered graph after graph as PyG's batches are, and the encoder connects
every pair of nodes of a graph.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..errors import GraphseqError, plural
from ..io import read_utf8
from .wordpiece import SPECIAL_TOKENS

Document = List[str]  # sentences
IGNORE = -100  # the label of a position or pair that no loss reads (PyTorch's ignore_index)


# --------------------------------------------------------------------------- #
# Corpora
# --------------------------------------------------------------------------- #

def split_documents(text: str) -> List[Document]:
    """Blank lines separate documents; every other line is a sentence."""
    documents: List[Document] = []
    for block in re.split(r"\n\s*\n", text):
        sentences = [line.strip() for line in block.split("\n") if line.strip()]
        if sentences:
            documents.append(sentences)
    return documents


def read_text_folder(folder: str | Path) -> List[Document]:
    """Every ``*.txt`` file under ``folder`` (sorted by path): one document per
    file, one sentence per line, blank lines ending a document early."""
    folder = Path(folder)
    if folder.is_file():
        raise GraphseqError(f"corpus folder {folder} is a file; give the folder that holds the *.txt files")
    if not folder.is_dir():
        raise GraphseqError(f"corpus folder not found: {folder}")
    documents: List[Document] = []
    for path in sorted(folder.rglob("*.txt")):
        if path.is_dir():
            raise GraphseqError(f"corpus folder {folder}: {path} is a folder, not a text file")
        try:
            documents += split_documents(read_utf8(path))
        except OSError as error:  # a dangling link, a link loop
            raise GraphseqError(f"corpus folder {folder}: cannot read {path}: {error.strerror}") from None
    if not documents:
        raise GraphseqError(f"corpus folder {folder} holds no sentences (one document per *.txt "
                            f"file, one sentence per line)")
    return documents


def shakespeare_speeches(text: str) -> List[Document]:
    """Tiny-shakespeare's speeches: blocks separated by blank lines whose first
    line names the speaker (``ROMEO:``), which is dropped."""
    speeches = []
    for block in split_documents(text):
        if len(block) > 1 and block[0].endswith(":"):
            block = block[1:]
        speeches.append(block)
    return speeches


def split_held_out(documents: List[Document], fraction: float,
                   seed: int = 0) -> Tuple[List[Document], List[Document]]:
    """A seeded random ``fraction`` of the documents held out (whole
    documents, so no held-out sentence pair was seen in training); at least
    one document on each side."""
    if len(documents) < 2:
        raise GraphseqError(f"a corpus of {plural(len(documents), 'document')} leaves none to hold out for "
                            f"scoring: give 2 or more (each *.txt file is one, and a blank line ends one)")
    order = list(range(len(documents)))
    random.Random(seed).shuffle(order)
    cut = min(max(1, round(len(documents) * fraction)), len(documents) - 1)
    held = set(order[:cut])
    return ([d for i, d in enumerate(documents) if i not in held],
            [d for i, d in enumerate(documents) if i in held])


# --------------------------------------------------------------------------- #
# Examples: sentence pairs as fully connected token graphs
# --------------------------------------------------------------------------- #

@dataclass
class TokenGraphs:
    """A batch of token sequences as one big graph of token nodes.

    ``tokens``, ``segments`` (0 for ``[CLS] A [SEP]``, 1 for ``B [SEP]``),
    ``positions`` (within the sequence) and ``batch`` (the sequence of each
    node) are ``[num_nodes]``. A pretraining batch also has ``mlm_labels``
    ``[num_nodes]`` (the original token where it was chosen for prediction,
    :data:`IGNORE` elsewhere) and ``nsp_labels`` ``[num_graphs]`` (1 is next,
    0 random, :data:`IGNORE` for a single sentence).
    """

    tokens: Tensor
    segments: Tensor
    positions: Tensor
    batch: Tensor
    num_graphs: int
    mlm_labels: Optional[Tensor] = None
    nsp_labels: Optional[Tensor] = None

    def to(self, device: torch.device) -> "TokenGraphs":
        move = {k: v.to(device) if isinstance(v, Tensor) else v for k, v in vars(self).items()}
        return TokenGraphs(**move)


def pack_pair(a: Sequence[int], b: Optional[Sequence[int]], max_len: int, cls_id: int,
              sep_id: int) -> Tuple[List[int], List[int]]:
    """``[CLS] a [SEP] b [SEP]`` (or ``[CLS] a [SEP]``) and its segment ids,
    cut to ``max_len`` tokens by trimming the end of the longer sentence, as
    BERT does."""
    a, b = list(a), (list(b) if b is not None else None)
    budget = max_len - (3 if b is not None else 2)
    if budget < 2:
        raise GraphseqError(f"max_len {max_len} leaves no room for the sentences")
    while len(a) + (len(b) if b is not None else 0) > budget:
        if b is not None and len(b) > len(a):
            b.pop()
        else:
            a.pop()
    tokens = [cls_id] + a + [sep_id]
    segments = [0] * len(tokens)
    if b is not None:
        tokens += b + [sep_id]
        segments += [1] * (len(b) + 1)
    return tokens, segments


def collate(sequences: List[List[int]], segments: Optional[List[List[int]]] = None) -> TokenGraphs:
    """Concatenates token sequences into one batch of token graphs."""
    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.long)
    tokens = torch.tensor([t for s in sequences for t in s], dtype=torch.long)
    batch = torch.repeat_interleave(torch.arange(len(sequences)), lengths)
    starts = torch.cumsum(lengths, 0) - lengths
    positions = torch.arange(tokens.numel()) - starts[batch]
    seg = (torch.zeros_like(tokens) if segments is None
           else torch.tensor([s for part in segments for s in part], dtype=torch.long))
    return TokenGraphs(tokens, seg, positions, batch, len(sequences))


class SentencePairs:
    """Draws next-sentence-prediction examples from tokenised documents.

    An example starts from a sentence drawn uniformly from the corpus. If it
    has a successor in its document, the example is a pair: half the time
    ``B`` is that successor (label 1), otherwise a sentence drawn from
    another document (label 0). A sentence without a successor (the last of a
    document, or a one-sentence document) is an example of one segment whose
    pair label is :data:`IGNORE`: it trains the masked LM only.

    Args:
        documents: each document a list of sentences, each sentence its ids.
        max_len (int): tokens per example, special tokens included.
        cls_id, sep_id (int): the ids of ``[CLS]`` and ``[SEP]``.
    """

    def __init__(self, documents: List[List[List[int]]], max_len: int, cls_id: int, sep_id: int):
        self.documents = [[s for s in doc if s] for doc in documents]
        self.documents = [doc for doc in self.documents if doc]
        if not self.documents:
            raise GraphseqError("the corpus has no sentence with a token in it")
        self.max_len, self.cls_id, self.sep_id = max_len, cls_id, sep_id
        self.index = [(d, s) for d, doc in enumerate(self.documents) for s in range(len(doc))]
        self.has_pairs = any(len(doc) > 1 for doc in self.documents)  # else masked LM only

    def __len__(self) -> int:
        return len(self.index)

    def draw(self, num: int, generator: torch.Generator) -> Tuple[List[List[int]], List[List[int]], List[int]]:
        """``num`` examples: token ids, segment ids and pair labels."""
        if num < 0:
            raise GraphseqError(f"SentencePairs.draw needs num >= 0 examples, got {num}")
        picks = torch.randint(len(self.index), (num,), generator=generator).tolist()
        coins = torch.rand(num, generator=generator).tolist()
        tokens, segments, labels = [], [], []
        for pick, coin in zip(picks, coins):
            d, s = self.index[pick]
            doc = self.documents[d]
            if s + 1 >= len(doc):
                b, label = None, IGNORE
            elif coin < 0.5 or len(self.documents) == 1:
                b, label = doc[s + 1], 1
            else:
                b, label = self._random_sentence(d, generator), 0
            t, g = pack_pair(doc[s], b, self.max_len, self.cls_id, self.sep_id)
            tokens.append(t), segments.append(g), labels.append(label)
        return tokens, segments, labels

    def _random_sentence(self, avoid_document: int, generator: torch.Generator) -> List[int]:
        while True:
            d, s = self.index[int(torch.randint(len(self.index), (1,), generator=generator))]
            if d != avoid_document:
                return self.documents[d][s]

    def batch(self, num: int, generator: torch.Generator, vocab_size: int, mask_id: int,
              mask_rate: float = 0.15) -> TokenGraphs:
        """A masked pretraining batch of ``num`` examples."""
        tokens, segments, labels = self.draw(num, generator)
        graphs = collate(tokens, segments)
        graphs.tokens, graphs.mlm_labels = mask_tokens(graphs.tokens, vocab_size, mask_id, generator,
                                                       mask_rate)
        graphs.nsp_labels = torch.tensor(labels, dtype=torch.long)
        return graphs


def mask_tokens(tokens: Tensor, vocab_size: int, mask_id: int, generator: torch.Generator,
                rate: float = 0.15, num_special: int = len(SPECIAL_TOKENS)) -> Tuple[Tensor, Tensor]:
    """BERT's masking: each token that is not special is chosen with
    probability ``rate``; a chosen token becomes ``[MASK]`` 80% of the time,
    a random non-special token 10%, and stays itself 10%. Returns the
    corrupted tokens and the labels (the original token where chosen,
    :data:`IGNORE` elsewhere)."""
    if not 0.0 <= rate <= 1.0:
        raise GraphseqError(f"mask_tokens needs rate in [0, 1], got {rate}")
    if vocab_size <= num_special:
        raise GraphseqError(f"mask_tokens needs vocab_size above the {num_special} special tokens "
                            f"(random replacements are drawn from the others), got {vocab_size}")
    if not 0 <= mask_id < vocab_size:
        raise GraphseqError(f"mask_tokens: mask_id {mask_id} is not a token of the vocabulary of {vocab_size}")
    chosen = (torch.rand(tokens.shape, generator=generator) < rate) & (tokens >= num_special)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, IGNORE))
    action = torch.rand(tokens.shape, generator=generator)
    random_tokens = torch.randint(num_special, vocab_size, tokens.shape, generator=generator)
    corrupted = torch.where(chosen & (action < 0.8), torch.full_like(tokens, mask_id), tokens)
    corrupted = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_tokens, corrupted)
    return corrupted, labels
