"""The label store: every answer in a SQLite file in the run directory
(``labels.sqlite``), committed before the next question is asked, so that
Ctrl-C, a crash or a kill loses no answer.

One row per answer: the strategy that asked, the item, the class name (NULL
for a skip), where the answer came from (``human`` at the terminal, ``web``
in the browser, ``simulated``, ``file`` or ``initial``) and the time (ISO
8601, UTC). Undo deletes the last row a person wrote. The test accuracy
after each round is kept beside the answers, so that a resumed run continues
its learning curve, and so are the questions of the round in progress, so
that a resumed run finishes that round first and its curve has the points an
uninterrupted run would have. Each round's end is kept too (the last answer
of the round), so that undoing an answer of a finished round opens that
round again and takes its point off the curve.

A store that is damaged (truncated, overwritten, a table or a column gone)
is a one-line error naming the file, which is left as it was. So is one that
cannot be written (read-only, or locked by another process) when it is
opened for writing: refused before the first question, not after an answer.

The store's version (SQLite's ``user_version``) says which tables it holds.
Versions added tables, never columns: ``answers`` and ``rounds`` (1), then
``pending`` (2), then ``round_ends`` (3). Opening an older store for writing
adds the newer tables (empty) and marks it current. Stores written before
the mark (version 0) claim the newest version whose table they hold, so one
that has ``round_ends`` but lost ``pending`` is damaged, while one without
``round_ends`` is taken for a version 2 store, as nothing tells them apart.
"""
from __future__ import annotations

import csv
import io
import math
import os
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Optional

from ..errors import GraphseqError
from ..io import check_file_place, check_sqlite

STORE_NAME = "labels.sqlite"
SOURCES = ("human", "web", "simulated", "file", "initial")
PERSONS = ("human", "web")  # the sources a person answers through: their answers may be undone

SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    strategy TEXT    NOT NULL,
    item     INTEGER NOT NULL,
    label    TEXT,               -- the class name; NULL when the item was skipped
    source   TEXT    NOT NULL,   -- human, web, simulated, file or initial
    time     TEXT    NOT NULL    -- ISO 8601, UTC
);
CREATE TABLE IF NOT EXISTS rounds (
    strategy TEXT    NOT NULL,
    labels   INTEGER NOT NULL,   -- how many items were labelled when the model was trained
    accuracy REAL    NOT NULL,   -- its test accuracy
    PRIMARY KEY (strategy, labels)
);
CREATE TABLE IF NOT EXISTS round_ends (
    strategy TEXT    NOT NULL,
    answer   INTEGER NOT NULL,   -- the id of the round's last answer
    labels   INTEGER NOT NULL,   -- the point of the learning curve the round gave
    accuracy REAL    NOT NULL,
    PRIMARY KEY (strategy, answer)
);
CREATE TABLE IF NOT EXISTS pending (
    strategy TEXT    NOT NULL,
    position INTEGER NOT NULL,   -- the order in which the round asks them
    item     INTEGER NOT NULL,   -- a question of the round in progress, not answered yet
    PRIMARY KEY (strategy, position)
);
"""
# The tables each version of the store added, oldest first.
VERSIONS = (("answers", "rounds"), ("pending",), ("round_ends",))
VERSION = len(VERSIONS)
# How long opening for writing waits for another process's transaction to end.
BUSY_TIMEOUT = 5.0


def _columns(connection: sqlite3.Connection) -> Dict[str, List[str]]:
    """The columns of each store table in ``connection`` (none if it lacks it)."""
    return {table: [row[1] for row in connection.execute(f"PRAGMA table_info({table})")]
            for tables in VERSIONS for table in tables}


def _schema_columns() -> Dict[str, List[str]]:
    connection = sqlite3.connect(":memory:")
    try:
        connection.executescript(SCHEMA)
        return _columns(connection)
    finally:
        connection.close()


COLUMNS = _schema_columns()


@dataclass(frozen=True)
class Answer:
    item: int
    label: Optional[str]  # None for a skip
    source: str
    time: str


@dataclass(frozen=True)
class Undone(Answer):
    reopened: bool  # the answer ended a round, which is now in progress again


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class LabelStore:
    """Answers of one run, in ``path`` (created if missing). Every write is
    committed at once. ``read_only`` opens an existing store for looking."""

    def __init__(self, path: str | Path, read_only: bool = False):
        self.path = Path(path)
        check_file_place(self.path)
        if read_only and not self.path.exists():
            raise GraphseqError(f"no label store at {self.path} (the file does not exist)")
        if self.path.exists():
            check_sqlite(self.path)  # Before anything is written to it.
            self._check_tables()
        if read_only:
            self.connection = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.connection = self._open_for_writing()

    def _open_for_writing(self) -> sqlite3.Connection:
        """Opens the store for writing, refusing now one that could not be
        written (read-only for this user, on a read-only file system or
        folder, or locked by another process) rather than after the first
        answer. Adds the tables an older store lacks and marks its version,
        in one transaction; a current store is not written to, so that a
        run refused later leaves it as it was. (``BEGIN IMMEDIATE`` alone
        succeeds on a read-only file; writing also needs the folder, for
        SQLite's journal.)"""
        for place in (self.path, self.path.parent) if self.path.exists() else (self.path.parent,):
            if not os.access(place, os.W_OK):
                what = "the file" if place == self.path else f"its folder {place}"
                raise GraphseqError(f"{self.path} cannot be written ({what} is read-only here); make it and "
                                    f"its folder writable (SQLite writes a journal beside it), or copy the run "
                                    f"folder and use the copy; it was left as it is")
        connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT)
        try:
            connection.execute("BEGIN IMMEDIATE")  # waits for, then refuses, another process's writing
            current = connection.execute("PRAGMA user_version").fetchone()[0] == VERSION
            connection.rollback()
            if not current:
                connection.executescript(f"BEGIN IMMEDIATE; {SCHEMA} PRAGMA user_version = {VERSION}; COMMIT;")
        except sqlite3.OperationalError as error:
            connection.rollback()
            connection.close()
            if "locked" in str(error):
                raise GraphseqError(f"{self.path} is locked by another process ({error}), perhaps another run "
                                    f"in the same --out; try again when it has ended; it was left as it is") from None
            raise GraphseqError(f"{self.path} cannot be written ({error}); make it and its folder writable "
                                f"(SQLite writes a journal beside it), or copy the run folder and use the "
                                f"copy; it was left as it is") from None
        return connection

    def _check_tables(self) -> None:
        """Refuses a store that lacks a table or a column its version has
        (see the module's docstring), or that a newer graphseq wrote."""
        connection = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            present = {table: columns for table, columns in _columns(connection).items() if columns}
        finally:
            connection.close()
        if not present:
            raise GraphseqError(f"{self.path} is an SQLite file but no graphseq label store "
                                f"(no answers table); it was left as it is")
        if version > VERSION:
            raise GraphseqError(f"{self.path} is a label store of version {version}, written by a newer "
                                f"graphseq; this one knows versions up to {VERSION}; it was left as it is")
        claimed = max([version] + [number for number, tables in enumerate(VERSIONS, 1) if set(tables) & set(present)])
        missing = [f"table {table}" for tables in VERSIONS[:claimed] for table in tables if table not in present]
        missing += [f"column {column} of table {table}" for table, columns in present.items()
                    for column in COLUMNS[table] if column not in columns]
        if missing:
            raise GraphseqError(f"{self.path} is damaged: it lacks {', '.join(missing)}, which a label store "
                                f"of version {claimed} has; it was left as it is")

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> "LabelStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # Answers ------------------------------------------------------------- #

    def add(self, strategy: str, item: int, label: Optional[str], source: str,
            pending: Optional[List[int]] = None) -> None:
        """Stores one answer (``label=None``: a skip) and commits it, with the
        round's questions still ``pending`` if given (in one transaction)."""
        if source not in SOURCES:
            raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
        with self.connection:
            self.connection.execute(
                "INSERT INTO answers (strategy, item, label, source, time) VALUES (?, ?, ?, ?, ?)",
                (strategy, int(item), label, source, now()))
            if pending is not None:
                self._set_pending(strategy, pending)

    def undo(self, strategy: str, requeue: bool = False) -> Optional[Undone]:
        """Deletes the last row a person wrote for ``strategy`` (an answer or
        a skip) and returns it; None if a person wrote nothing.

        If that row ended a round, the round is open again: its point of the
        learning curve is deleted too (``reopened``). ``requeue`` puts the
        item first among the pending questions; those of a round chosen after
        the reopened one are dropped, as that round was chosen by a model
        trained on the undone answer. All in one transaction."""
        row = self.connection.execute(
            "SELECT id, item, label, source, time FROM answers WHERE strategy = ? AND source IN (?, ?) "
            "ORDER BY id DESC LIMIT 1", (strategy, *PERSONS)).fetchone()
        if row is None:
            return None
        ends = self.connection.execute("SELECT answer, labels FROM round_ends WHERE strategy = ? AND answer >= ?",
                                       (strategy, row[0])).fetchall()
        with self.connection:
            self.connection.execute("DELETE FROM answers WHERE id = ?", (row[0],))
            self.connection.execute("DELETE FROM round_ends WHERE strategy = ? AND answer >= ?", (strategy, row[0]))
            for labels in {labels for _, labels in ends}:
                # A round all of whose questions were skipped gives the point of the round before again.
                kept = self.connection.execute(
                    "SELECT accuracy FROM round_ends WHERE strategy = ? AND labels = ? ORDER BY answer DESC LIMIT 1",
                    (strategy, labels)).fetchone()
                if kept is None:
                    self.connection.execute("DELETE FROM rounds WHERE strategy = ? AND labels = ?", (strategy, labels))
                else:
                    self.connection.execute("UPDATE rounds SET accuracy = ? WHERE strategy = ? AND labels = ?",
                                            (kept[0], strategy, labels))
            if requeue:
                self._set_pending(strategy, [row[1]] + ([] if ends else self.pending(strategy)))
        return Undone(*row[1:], reopened=bool(ends))

    def answers(self, strategy: Optional[str] = None, skips: bool = False) -> List[Answer]:
        """The stored labels in the order given (with the skips if asked)."""
        sql = "SELECT item, label, source, time FROM answers WHERE (? IS NULL OR strategy = ?)"
        if not skips:
            sql += " AND label IS NOT NULL"
        return [Answer(*row) for row in self.connection.execute(sql + " ORDER BY id", (strategy, strategy))]

    def skipped(self, strategy: str) -> List[int]:
        return [a.item for a in self.answers(strategy, skips=True) if a.label is None]

    def strategies(self) -> List[str]:
        return [row[0] for row in self.connection.execute(
            "SELECT strategy FROM answers GROUP BY strategy ORDER BY MIN(id)")]

    def has_human_answers(self, strategy: str) -> bool:
        return self.connection.execute("SELECT 1 FROM answers WHERE strategy = ? AND source IN (?, ?)",
                                       (strategy, *PERSONS)).fetchone() is not None

    def clear(self, strategy: str) -> None:
        """Forgets a strategy's answers, rounds and questions (a fresh run)."""
        with self.connection:
            for table in ("answers", "rounds", "round_ends", "pending"):
                self.connection.execute(f"DELETE FROM {table} WHERE strategy = ?", (strategy,))

    # The round in progress ----------------------------------------------- #

    def _set_pending(self, strategy: str, items: List[int]) -> None:
        self.connection.execute("DELETE FROM pending WHERE strategy = ?", (strategy,))
        self.connection.executemany("INSERT INTO pending (strategy, position, item) VALUES (?, ?, ?)",
                                    [(strategy, i, int(item)) for i, item in enumerate(items)])

    def set_pending(self, strategy: str, items: List[int]) -> None:
        """The questions of the round in progress that are not answered yet."""
        with self.connection:
            self._set_pending(strategy, items)

    def pending(self, strategy: str) -> List[int]:
        return [row[0] for row in self.connection.execute(
            "SELECT item FROM pending WHERE strategy = ? ORDER BY position", (strategy,))]

    # Learning curve ------------------------------------------------------ #

    def add_round(self, strategy: str, labels: int, accuracy: float) -> None:
        """A point of the learning curve: a round ended with the last stored
        answer, and the model trained then has ``accuracy``."""
        if not math.isfinite(accuracy):
            raise ValueError(f"LabelStore.add_round: the accuracy after {labels} labels of {strategy!r} "
                             f"must be a finite number, got {accuracy}")
        with self.connection:
            self.connection.execute("INSERT OR REPLACE INTO rounds (strategy, labels, accuracy) VALUES (?, ?, ?)",
                                    (strategy, int(labels), float(accuracy)))
            self.connection.execute(
                "INSERT OR REPLACE INTO round_ends (strategy, answer, labels, accuracy) "
                "SELECT ?, MAX(id), ?, ? FROM answers WHERE strategy = ? HAVING MAX(id) IS NOT NULL",
                (strategy, int(labels), float(accuracy), strategy))

    def rounds(self, strategy: str) -> List[List[float]]:
        """The learning curve so far, ``[[num_labels, accuracy], ...]``."""
        return [[n, acc] for n, acc in self.connection.execute(
            "SELECT labels, accuracy FROM rounds WHERE strategy = ? ORDER BY labels", (strategy,))]


def run_answers(run_dir: str | Path, strategy: Optional[str] = None) -> List[Answer]:
    """The answers stored in a run directory, skips included (label None),
    in the order given. A run that compared several strategies holds one
    set of answers per strategy; name one with ``strategy``."""
    path = Path(run_dir) / STORE_NAME
    check_file_place(path)  # a folder there is named as such, not as missing
    if not path.is_file():
        seeds = sorted(p.parent for p in Path(run_dir).glob(f"seed-*/{STORE_NAME}"))
        hint = (f"; this run has one per seed, so name its folder: {', '.join(map(str, seeds))}"
                if seeds else "")
        raise GraphseqError(f"no label store in {run_dir} (no {STORE_NAME}){hint}")
    # Read-only, so that looking never changes a run.
    with LabelStore(path, read_only=True) as store:
        known = store.strategies()
        if strategy is None and len(known) > 1:
            raise GraphseqError(f"{path} holds the labels of {len(known)} strategies; "
                                f"choose one with --strategy: {', '.join(known)}")
        if strategy is not None and strategy not in known:
            raise GraphseqError(f"{path} holds no labels of strategy {strategy!r}; "
                                f"it holds: {', '.join(known) or '(none)'}")
        return store.answers(strategy, skips=True)


def answers_csv(answers: List[Answer], skips: bool = False) -> str:
    """Answers as CSV, header ``item,label,source,time``; a skip (with
    ``skips``; else it is left out) has an empty label."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["item", "label", "source", "time"])
    for answer in answers:
        if answer.label is not None or skips:
            writer.writerow([answer.item, answer.label, answer.source, answer.time])
    return text.getvalue()


def labels_csv(run_dir: str | Path, strategy: Optional[str] = None, skips: bool = False) -> str:
    """The labels stored in a run directory as CSV, header ``item,label,source,time``;
    with ``skips``, the skipped items too, with an empty label.

    A run that compared several strategies holds one set of labels per
    strategy; name one with ``strategy``."""
    return answers_csv(run_answers(run_dir, strategy), skips)
