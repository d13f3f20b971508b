"""Oracles: whoever answers the loop's questions. Each has a ``source``
(stored with every answer), ``ask(question) -> reply`` and ``tell(text)``
for news the loop wants a person to hear. A reply is a class index or one of
the commands :data:`SKIP`, :data:`UNDO`, :data:`QUIT`.

:class:`SimulatedOracle` answers from the ground truth, with label noise if
asked; :class:`FileOracle` from a CSV file of ``item,label`` rows; a
person answers at the terminal (:class:`graphseq.active.prompt.HumanOracle`)
or in the browser (:class:`graphseq.active.web.WebOracle`).
"""
from __future__ import annotations

import csv
import enum
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from ..checks import is_whole_number
from ..errors import GraphseqError, plural
from ..seeding import keyed_generator


class Command(enum.Enum):
    SKIP = "skip"   # No label for this item; it is not asked again.
    UNDO = "undo"   # Take back the last answer a person gave, and ask it again.
    QUIT = "quit"   # Stop asking; everything answered so far is kept.


SKIP, UNDO, QUIT = Command.SKIP, Command.UNDO, Command.QUIT
Reply = Union[int, Command]


class Guess(str):
    """A line of a question's details that gives the model's guess: a
    terminal prints it as any line, a page shows it on request."""


@dataclass
class PictureRow:
    """Images shown side by side under a heading, each with its caption."""

    heading: str
    images: List[Tensor]  # each [channels, height, width] or [height, width]; uint8 is shown as it is
    captions: List[str]


@dataclass
class Question:
    """What the loop asks about one item. An oracle that shows images (the
    web page) shows a question with ``pictures`` by them and its
    :class:`Guess` lines: its other details are the same pictures drawn as
    text, for the terminal."""

    item: int
    class_names: Sequence[str]
    details: List[str] = field(default_factory=list)  # What a person reads to decide.
    progress: str = ""                                # "entropy: 23 of 140 labels, round 3"
    pictures: List[PictureRow] = field(default_factory=list)


def quoted(text: str, most: int = 40) -> str:
    """``text`` in quotes as Python writes it, its first ``most`` characters
    where it is longer (a pasted page shown whole helps no one)."""
    return repr(text) if len(text) <= most else f"{text[:most]!r}..."


def item_ranges(items: Tensor, shown: int = 3) -> str:
    """Items as runs of consecutive numbers, ``"0-139, 640-1707"``: the
    first ``shown`` runs and the last, with how many items there are."""
    items = sorted(set(items.tolist()))
    runs: List[List[int]] = []
    for item in items:
        if runs and item == runs[-1][1] + 1:
            runs[-1][1] = item
        else:
            runs.append([item, item])
    text = [f"{a}-{b}" if b > a else str(a) for a, b in runs]
    if len(text) > shown + 1:
        text = text[:shown] + ["...", text[-1]]
    return f"{plural(len(items), 'item')}: {', '.join(text) or 'none'}"


def parse_class(text: str, class_names: Sequence[str]) -> int:
    """A class index from its number or its name (case-insensitive; a unique
    prefix is enough). Raises ValueError with a message a person can act on."""
    text = text.strip()
    if is_whole_number(text):
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
        raise ValueError(f"{quoted(text)} could be {' or '.join(class_names[i] for i in matches)}; type more letters")
    raise ValueError(f"{quoted(text)} is no class; the classes are {', '.join(class_names)}")


class SimulatedOracle:
    """Answers with the true label; with probability ``noise`` with another
    class drawn at random instead, from a generator of the seed and the item
    alone, so that an item gets the same answer whatever was asked before it,
    in a run resumed or not. A true label outside the classes (PyG marks
    unknown ones -1) is refused, by :meth:`check` before the loop stores
    anything, never answered."""

    source = "simulated"

    def __init__(self, truth: Tensor, noise: float = 0.0, seed: int = 0):
        if not 0.0 <= noise <= 1.0:
            raise GraphseqError(f"label noise must be between 0 and 1, got {noise}")
        self.truth = torch.as_tensor(truth).detach().cpu()
        self.noise = noise
        self.seed = seed

    def _check(self, item: Optional[int], num_classes: int) -> None:
        """Refuses noise without another class, and an ``item`` without a true class."""
        if self.noise > 0 and num_classes < 2:
            raise GraphseqError(f"SimulatedOracle: label noise needs at least two classes, got {num_classes}")
        if item is None:
            return
        if not 0 <= item < self.truth.numel():
            raise GraphseqError(f"SimulatedOracle: item {item} has no true label "
                                f"(the truth holds {self.truth.numel()} items)")
        label = int(self.truth[item])
        if not 0 <= label < num_classes:
            raise GraphseqError(f"SimulatedOracle: label {label} for item {item} is no class (0..{num_classes - 1})")

    def check(self, class_names: Sequence[str], pool: Tensor) -> None:
        """Every item of the pool has a true label among the classes."""
        pool = pool.cpu()
        known = (pool >= 0) & (pool < self.truth.numel())
        labels = torch.full_like(pool, -1)
        labels[known] = self.truth[pool[known]].to(pool.dtype)
        wrong = pool[(labels < 0) | (labels >= len(class_names))]
        self._check(int(wrong[0]) if wrong.numel() else None, len(class_names))

    def ask(self, question: Question) -> Reply:
        num_classes = len(question.class_names)
        self._check(question.item, num_classes)
        label = int(self.truth[question.item])
        if self.noise > 0:
            generator = self._generator(question.item)
            if float(torch.rand((), generator=generator)) < self.noise:
                # Shift by 1..C-1 so the wrong label is never the true one.
                shift = int(torch.randint(1, num_classes, (), generator=generator))
                label = (label + shift) % num_classes
        return label

    def _generator(self, item: int) -> torch.Generator:
        """The generator the answer for ``item`` draws from: the same for the
        same seed and item, whatever the order of the questions."""
        return keyed_generator(self.seed, "simulated", item)

    def tell(self, text: str) -> None:
        pass

    def restrict(self, pool: Tensor) -> Tensor:
        return pool


class FileOracle:
    """Answers from a CSV file of ``item,label`` rows (a header row
    ``item,label`` is optional; the label is a class name, a unique prefix or
    a number). Only items in the file are asked about. ``columns`` names the
    two columns as the task says them (``episode,class`` for the few-shot
    oracle); a header of those names or of ``item,label`` is taken.

    The whole file is read when the oracle is made (UTF-8, with or without
    a byte-order mark; two columns; whole-number items; no item twice; no
    stray quote; at least one row), and checked against the task by
    :meth:`check` (items in the pool, labels among the classes), so that
    every problem is found before the first label is stored. A file that
    cannot be read, or holds no good row, is refused at once; the problems
    of its rows otherwise wait for :meth:`check`, which lists them with its
    own, the first few in line order.
    """

    source = "file"
    SHOWN = 5  # problems listed in one error

    def __init__(self, path: str | Path, columns: Tuple[str, str] = ("item", "label")):
        self.path = Path(path)
        self.columns = columns
        self.rows: Dict[int, str] = {}
        self.lines: Dict[int, int] = {}  # item -> its line in the file
        self.problems: List[Tuple[int, str]] = []  # (line, problem) of the rows, for check() to list
        try:
            raw = self.path.read_bytes()
        except OSError as error:
            raise GraphseqError(f"cannot read the labels file {self.path}: {error.strerror}") from None
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            line = raw[:error.start].count(b"\n") + 1
            raise GraphseqError(f"{self.path}, line {line}: not UTF-8 text (byte 0x{raw[error.start]:02x}); "
                                f"save the file as UTF-8") from None
        # Strict: a stray quote is an error, not a field that swallows the rows after it.
        reader = csv.reader(io.StringIO(text, newline=""), strict=True)
        start = 1  # the line the row being read starts on
        try:
            for row in reader:
                self._read_row(start, reader.line_num, row, self.problems)
                start = reader.line_num + 1
        except csv.Error as error:  # a field over csv's size limit, a stray quote, ...
            why = str(error)
            if why == "unexpected end of data":
                why = 'a quote (") opens a field that no quote closes; remove the stray quote'
            elif "expected after" in why:
                why = f'{why}: a quote (") may only enclose a whole field; remove the stray quote'
            raise GraphseqError(f"{self.path}, line {start}: {why}") from None
        if not self.rows:  # check() could add nothing: no row passed
            self._raise(self.problems)
            raise GraphseqError(f"{self.path} holds no answers; expected rows {','.join(self.columns)}")

    def _read_row(self, number: int, end: int, row: List[str], problems: List[Tuple[int, str]]) -> None:
        """Reads the row on lines ``number`` to ``end`` (a quoted field may hold line breaks)."""
        item, label = self.columns
        cells = [cell.strip() for cell in row]
        if not any(cells) or (number == 1 and [c.lower() for c in cells] in (["item", "label"], list(self.columns))):
            return
        if end > number:
            problems.append((number, f"line {number}: a quoted field runs on to line {end}; an {item} and "
                                     f"its {label} belong on one line (a stray quote?)"))
        elif len(cells) != 2 or not is_whole_number(cells[0]) or not cells[1]:
            problems.append((number, f"line {number}: expected {item},{label} with a whole-number {item}, "
                                     f"got {','.join(row)[:80]!r}"))
        elif int(cells[0]) in self.rows:
            problems.append((number, f"line {number}: {item} {cells[0]} again (first on line "
                                     f"{self.lines[int(cells[0])]})"))
        else:
            self.rows[int(cells[0])] = cells[1]
            self.lines[int(cells[0])] = number

    def _raise(self, problems: List[Tuple[int, str]], note: str = "") -> None:
        """Refuses the file, listing the first problems in line order."""
        if problems:
            problems = [text for _, text in sorted(problems, key=lambda problem: problem[0])]
            more = f" (and {len(problems) - self.SHOWN} more)" if len(problems) > self.SHOWN else ""
            raise GraphseqError(f"{self.path}: {plural(len(problems), 'problem')}: "
                                + "; ".join(problems[:self.SHOWN]) + more + (f"; {note}" if note else ""))

    def check(self, class_names: Sequence[str], pool: Tensor) -> None:
        """Every item may be asked about, and every label names a class:
        both checked on every row, and listed with the problems found in
        reading the file (an item twice, a row that is no ``item,label``)."""
        allowed = set(pool.tolist())
        problems, outside, name = list(self.problems), False, self.columns[0]
        for item, label in self.rows.items():
            line = self.lines[item]
            if item not in allowed:
                outside = True
                problems.append((line, f"line {line}: {name} {item} is not among the {name}s that may be labelled"))
            try:
                parse_class(label, class_names)
            except ValueError as problem:
                problems.append((line, f"line {line}: {problem}"))
        self._raise(problems, f"the {name}s that may be labelled are the pool of this task "
                              f"({item_ranges(pool)})" if outside else "")

    def ask(self, question: Question) -> Reply:
        self._raise(self.problems)  # A file's problems refuse it even where check() was never called.
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
