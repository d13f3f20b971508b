"""The sentence polarity data of Pang and Lee (2005), in one place: 5,331
positive and 5,331 negative movie-review snippets, one per line, in Windows-1252
(``rt-polaritydata/rt-polarity.pos`` and ``.neg``), found in the data root,
the read-only mirror or Cornell's tarball; and the fixed cross-validation
folds that every polarity model (BiLSTM, BERT, paragraph vectors, peers) is
trained and tested on, so that their figures compare like for like; and
:class:`SnippetMatcher`, which finds the snippets in other text, so that a
pretraining corpus can drop them before it reads a test fold's sentences.

The data has no standard split; the usual protocol is 10-fold
cross-validation. :func:`cv_folds` gives each fold a validation fold of its
own inside the training part, for early stopping and for every choice of
settings, so that a test fold is touched only to report.
"""
from __future__ import annotations

import re
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

import torch
from torch import Tensor

from ..errors import GraphseqError
from .files import Checksum, download_url, locate_raw_files
from .places import dataset_folder

URL = "http://www.cs.cornell.edu/people/pabo/movie-review-data/rt-polaritydata.tar.gz"
FOLDER = dataset_folder("rt-polaritydata")
FILES = ["rt-polarity.neg", "rt-polarity.pos"]
CLASS_NAMES = ["negative", "positive"]
# The sentence polarity dataset v1.0 as first committed to
# dennybritz/cnn-text-classification-tf (5a4610cd), the copy closest to the
# tarball's bytes (Windows-1252).
CHECKSUMS = {
    "rt-polarity.neg": Checksum("4af43bf489620b498a0852c5a8c6a535155dec7985fdfea782b8f7756b957ccc", 612_290),
    "rt-polarity.pos": Checksum("d79ef14009bbf87cd6be21f91c3ea1a3cbcb73b34dfb4231aef7bbcd7677abc4", 626_168),
}

Fold = Tuple[Tensor, Tensor, Tensor]
# The shortest snippet looked for inside longer text: a one- or two-word snippet ("bad", "well done")
# would match most reviews, so such snippets are matched only as a whole sentence.
MIN_CONTAINED = 3
WORD = re.compile(r"[a-z0-9]+")


def download_polarity(target: Path) -> None:
    """Fetches Cornell's tarball and copies out only the two data files:
    no member is extracted by the name it carries, so a crafted archive
    cannot write outside ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target) as tmp:
        archive = Path(tmp) / "rt-polaritydata.tar.gz"
        download_url(URL, archive)
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar.getmembers():
                name = Path(member.name).name
                if member.isfile() and name in FILES:
                    with tar.extractfile(member) as source, open(target / name, "wb") as f:
                        shutil.copyfileobj(source, f)


def polarity_folder(root: Path, mirror: Optional[Path] = None) -> Path:
    """Makes sure ``root/rt-polaritydata`` holds the two files (from the
    mirror, else Cornell's tarball) and returns that folder."""
    return locate_raw_files(FOLDER, FILES, Path(root), mirror, download_polarity, CHECKSUMS)


def load_polarity(root: Path, mirror: Optional[Path] = None) -> Tuple[List[str], List[int]]:
    """Returns the sentences and their labels (0 negative, 1 positive): the
    negative file first, then the positive one, each in file order."""
    folder = polarity_folder(root, mirror)
    sentences: List[str] = []
    labels: List[int] = []
    for label, name in enumerate(FILES):
        # The files are Windows-1252: accented names, and dashes, quotes and
        # ellipses in bytes 0x85-0x97 that latin-1 would read as control
        # characters (U+0085, which str.strip() also removes, among them).
        lines = (folder / name).read_text(encoding="cp1252").split("\n")
        kept = [line.strip() for line in lines if line.strip()]
        sentences += kept
        labels += [label] * len(kept)
    return sentences, labels


def cv_folds(num_items: int, k: int = 10, seed: int = 0) -> List[Fold]:
    """``k`` cross-validation folds of ``range(num_items)``, each a
    ``(train, val, test)`` triple of sorted index tensors.

    The items are shuffled once by ``seed`` and cut into ``k`` parts whose
    sizes differ by at most one. Fold ``i`` tests on part ``i`` and
    validates on part ``(i + 1) % k``; it trains on the other ``k - 2``. So
    every item is tested exactly once and validated exactly once, and the
    same ``num_items``, ``k`` and ``seed`` give the same folds on every
    machine (the split does not depend on the run's seed).

    Example:
        >>> train, val, test = cv_folds(10_662)[0]
        >>> len(train), len(val), len(test)
        (8528, 1067, 1067)
    """
    if k < 3:
        raise GraphseqError(f"cross-validation with a validation fold needs k >= 3 folds, got {k}")
    if num_items < k:
        raise GraphseqError(f"cannot cut {num_items} items into {k} folds")
    order = torch.randperm(num_items, generator=torch.Generator().manual_seed(seed))
    parts = [part.sort().values for part in order.tensor_split(k)]
    folds = []
    for i in range(k):
        val_part = (i + 1) % k
        train = torch.cat([parts[j] for j in range(k) if j not in (i, val_part)]).sort().values
        folds.append((train, parts[val_part], parts[i]))
    return folds


def snippet_words(text: str) -> Tuple[str, ...]:
    """The words a snippet is compared by: lower-cased runs of letters and
    digits, so that punctuation, spacing and the tokenization of the
    snippets (``it's`` written ``it 's``) make no difference."""
    return tuple(WORD.findall(text.lower()))


class SnippetMatcher:
    """Finds the polarity snippets (``load_polarity``'s sentences) in other
    text: a pretraining that read one of them would have read a test
    sentence of some fold.

    A sentence of a document holds a snippet when its words
    (:func:`snippet_words`) equal the snippet's, or when a snippet of
    ``MIN_CONTAINED`` (3) words or more occurs as a contiguous run of the
    document's words; such a run may span sentences, and then every
    sentence it touches holds it. Snippets of one or two words are matched
    by sentence equality only: inside longer text they are common phrases,
    not a copied test sentence.

    The snippets of 3+ words are indexed by their first three words, and
    by length under each, so a scan costs one dict lookup per word, and a
    set lookup per length where three words start a snippet (IMDB's 5.9M
    words of training reviews take about 4 s on one thread).

    Example:
        >>> matcher = SnippetMatcher(["a gripping , moving film .", "dull"])
        >>> matcher.sentences_holding(["I saw it.", "A gripping, moving", "film!", "Dull."])
        [1, 2, 3]
        >>> matcher.sentences_holding(["A dull film."])
        []
    """

    def __init__(self, snippets: Iterable[str]):
        self.whole: Set[Tuple[str, ...]] = set()
        # first three words -> {length: the snippets of that length that start with them}
        self.by_start: Dict[Tuple[str, ...], Dict[int, Set[Tuple[str, ...]]]] = {}
        for snippet in snippets:
            words = snippet_words(snippet)
            if not words:
                continue
            self.whole.add(words)
            if len(words) >= MIN_CONTAINED:
                self.by_start.setdefault(words[:MIN_CONTAINED], {}).setdefault(len(words), set()).add(words)

    def sentences_holding(self, document: List[str]) -> List[int]:
        """The indices, in order, of the sentences of ``document`` that hold
        a snippet."""
        held: Set[int] = set()
        words: List[str] = []
        owner: List[int] = []  # the sentence of each word
        for i, sentence in enumerate(document):
            tokens = snippet_words(sentence)
            if tokens in self.whole:
                held.add(i)
            words += tokens
            owner += [i] * len(tokens)
        by_start = self.by_start
        for start, key in enumerate(zip(words, words[1:], words[2:])):
            lengths = by_start.get(key)
            if lengths is None:
                continue
            for length, snippets in lengths.items():
                if tuple(words[start:start + length]) in snippets:
                    held.update(range(owner[start], owner[start + length - 1] + 1))
        return sorted(held)
