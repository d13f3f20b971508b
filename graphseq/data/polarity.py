"""The sentence polarity data of Pang and Lee (2005): 5,331 positive and
5,331 negative movie-review snippets, one per line, in latin-1
(``rt-polaritydata/rt-polarity.pos`` and ``.neg``). Sentences a person can
read and label, which is why the active-learning pipeline uses them.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

from .files import locate_raw_files

FOLDER = "rt-polaritydata"
FILES = ["rt-polarity.neg", "rt-polarity.pos"]
CLASS_NAMES = ["negative", "positive"]


def load_polarity(root: Path, mirror: Optional[Path] = None) -> Tuple[List[str], List[int]]:
    """Returns the sentences and their labels (0 negative, 1 positive): the
    negative file first, then the positive one, each in file order."""
    folder = locate_raw_files(FOLDER, FILES, Path(root), mirror)
    sentences: List[str] = []
    labels: List[int] = []
    for label, name in enumerate(FILES):
        # The files are latin-1; a few lines hold accented names.
        # Split on newlines only: latin-1 decodes byte 0x85 to U+0085, which
        # str.splitlines() would also take for a line break.
        lines = (folder / name).read_text(encoding="latin-1").split("\n")
        kept = [line.strip() for line in lines if line.strip()]
        sentences += kept
        labels += [label] * len(kept)
    return sentences, labels
