"""Oracles: whoever answers the loop's questions. Each has a ``source``
(stored with every answer), ``ask(question) -> reply`` and ``tell(text)``
for news the loop wants a person to hear. A reply is a class index or one of
the commands :data:`SKIP`, :data:`UNDO`, :data:`QUIT`.

:class:`SimulatedOracle` answers from the ground truth, with label noise if
asked; :class:`FileOracle` from a CSV file of ``item,label`` rows; the
person at the terminal is :class:`graphseq.active.prompt.HumanOracle`.
"""
from __future__ import annotations

import csv
import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import torch
from torch import Tensor

from ..errors import GraphseqError


class Command(enum.Enum):
    SKIP = "skip"   # No label for this item; it is not asked again.
    UNDO = "undo"   # Take back the last answer a person gave, and ask it again.
    QUIT = "quit"   # Stop asking; everything answered so far is kept.


SKIP, UNDO, QUIT = Command.SKIP, Command.UNDO, Command.QUIT
Reply = Union[int, Command]


@dataclass
class Question:
    """What the loop asks about one item."""

    item: int
    class_names: Sequence[str]
    details: List[str] = field(default_factory=list)  # What a person reads to decide.
    progress: str = ""                                # "entropy: 23 of 140 labels, round 3"


def parse_class(text: str, class_names: Sequence[str]) -> int:
    """A class index from its number or its name (case-insensitive; a unique
    prefix is enough). Raises ValueError with a message a person can act on."""
    text = text.strip()
    if text.isdigit():
        index = int(text)
        if index < len(class_names):
            return index
        raise ValueError(f"no class number {index}; the numbers are 0 to {len(class_names) - 1}")
    lowered = [name.lower() for name in class_names]
    if text.lower() in lowered:
        return lowered.index(text.lower())
    matches = [i for i, name in enumerate(lowered) if text and name.startswith(text.lower())]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ValueError(f"{text!r} could be {' or '.join(class_names[i] for i in matches)}; type more letters")
    raise ValueError(f"{text!r} is no class; the classes are {', '.join(class_names)}")


class SimulatedOracle:
    """Answers with the true label; with probability ``noise`` with another
    class drawn at random instead (seeded, so runs repeat)."""

    source = "simulated"

    def __init__(self, truth: Tensor, noise: float = 0.0, seed: int = 0):
        if not 0.0 <= noise <= 1.0:
            raise GraphseqError(f"label noise must be between 0 and 1, got {noise}")
        self.truth = truth.detach().cpu()
        self.noise = noise
        self.generator = torch.Generator().manual_seed(seed)

    def ask(self, question: Question) -> Reply:
        label = int(self.truth[question.item])
        num_classes = len(question.class_names)
        if self.noise > 0 and float(torch.rand((), generator=self.generator)) < self.noise:
            # Shift by 1..C-1 so the wrong label is never the true one.
            shift = int(torch.randint(1, num_classes, (), generator=self.generator))
            label = (label + shift) % num_classes
        return label

    def tell(self, text: str) -> None:
        pass

    def restrict(self, pool: Tensor) -> Tensor:
        return pool


class FileOracle:
    """Answers from a CSV file of ``item,label`` rows (a header row is
    optional; the label is a class name, a unique prefix or a number). Only
    items in the file are asked about."""

    source = "file"

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.rows: Dict[int, str] = {}
        try:
            with open(self.path, newline="", encoding="utf-8") as f:
                for number, row in enumerate(csv.reader(f), start=1):
                    if not row or (number == 1 and row[0].strip().lower() == "item"):
                        continue
                    if len(row) < 2 or not row[0].strip().isdigit():
                        raise GraphseqError(f"{self.path}, line {number}: expected item,label "
                                            f"with a whole-number item, got {','.join(row)!r}")
                    self.rows[int(row[0])] = row[1].strip()
        except OSError as error:
            raise GraphseqError(f"cannot read the labels file {self.path}: {error.strerror}") from None

    def ask(self, question: Question) -> Reply:
        if question.item not in self.rows:
            return SKIP
        try:
            return parse_class(self.rows[question.item], question.class_names)
        except ValueError as problem:
            raise GraphseqError(f"{self.path}: item {question.item}: {problem}") from None

    def tell(self, text: str) -> None:
        pass

    def restrict(self, pool: Tensor) -> Tensor:
        known = torch.tensor(sorted(self.rows), dtype=pool.dtype, device=pool.device)
        return pool[torch.isin(pool, known)]
