import csv
import io
import os
import shutil
import signal
import sqlite3
import subprocess
import sys

import pytest

import graphseq.active.store as store_module
from graphseq.active.store import SCHEMA, STORE_NAME, VERSION, VERSIONS, LabelStore, labels_csv
from graphseq.errors import GraphseqError


def test_answers_survive_closing_and_reopening(tmp_path):
    with LabelStore(tmp_path / STORE_NAME) as store:
        store.add("age", 3, "Theory", "initial")
        store.add("age", 7, "Case_Based", "human")
        store.add("age", 9, None, "human")  # a skip
    with LabelStore(tmp_path / STORE_NAME) as store:
        assert [(a.item, a.label, a.source) for a in store.answers("age")] == [
            (3, "Theory", "initial"), (7, "Case_Based", "human")]
        assert store.skipped("age") == [9]


def test_every_answer_is_committed_at_once(tmp_path):
    store = LabelStore(tmp_path / STORE_NAME)
    store.add("age", 1, "Theory", "human")
    # A second connection sees the row while the first is still open: it is on disk.
    other = sqlite3.connect(tmp_path / STORE_NAME)
    assert other.execute("SELECT item, label FROM answers").fetchall() == [(1, "Theory")]
    other.close()
    store.close()


def test_undo_deletes_the_last_human_row_only(tmp_path):
    with LabelStore(tmp_path / STORE_NAME) as store:
        store.add("age", 1, "Theory", "initial")
        store.add("age", 2, "Theory", "human")
        store.add("age", 3, None, "human")
        assert store.undo("age").item == 3
        assert store.undo("age").item == 2
        assert store.undo("age") is None  # the initial label is not a person's answer
        assert [a.item for a in store.answers("age", skips=True)] == [1]


def test_answers_given_in_the_browser_are_a_persons_to_undo(tmp_path):
    with LabelStore(tmp_path / STORE_NAME) as store:
        store.add("age", 1, "Theory", "simulated")
        assert not store.has_human_answers("age")
        store.add("age", 2, "Theory", "web")
        assert store.has_human_answers("age")  # a fresh run in the same --out is refused
        assert store.undo("age").source == "web"
        assert store.undo("age") is None


def test_unknown_source_is_refused(tmp_path):
    with LabelStore(tmp_path / STORE_NAME) as store, pytest.raises(ValueError, match="source"):
        store.add("age", 1, "Theory", "guess")


def test_labels_csv_has_the_header_and_the_labels_without_skips(tmp_path):
    with LabelStore(tmp_path / STORE_NAME) as store:
        store.add("age", 1, "Theory", "initial")
        store.add("age", 4, None, "human")
        store.add("age", 2, "Rule_Learning", "human")
    lines = labels_csv(tmp_path).splitlines()
    assert lines[0] == "item,label,source,time"
    assert [line.rsplit(",", 1)[0] for line in lines[1:]] == ["1,Theory,initial", "2,Rule_Learning,human"]


def test_labels_csv_lists_the_skipped_items_with_an_empty_label_when_asked(tmp_path):
    with LabelStore(tmp_path / STORE_NAME) as store:
        store.add("age", 1, "Theory", "initial")
        store.add("age", 4, None, "human")
        store.add("age", 2, "Rule_Learning", "human")
    rows = list(csv.reader(io.StringIO(labels_csv(tmp_path, skips=True))))
    assert [row[:3] for row in rows] == [["item", "label", "source"], ["1", "Theory", "initial"],
                                         ["4", "", "human"], ["2", "Rule_Learning", "human"]]


def test_labels_csv_asks_which_strategy_when_there_are_several(tmp_path):
    with LabelStore(tmp_path / STORE_NAME) as store:
        store.add("random", 1, "Theory", "simulated")
        store.add("age", 2, "Theory", "simulated")
    with pytest.raises(GraphseqError, match="--strategy: random, age"):
        labels_csv(tmp_path)
    assert labels_csv(tmp_path, "age").splitlines()[1].startswith("2,Theory,simulated,")


def test_labels_csv_names_a_missing_store(tmp_path):
    with pytest.raises(GraphseqError, match="no label store"):
        labels_csv(tmp_path)


@pytest.mark.parametrize("accuracy", [float("nan"), float("inf")])
def test_a_round_without_a_finite_accuracy_is_refused(tmp_path, accuracy):
    with LabelStore(tmp_path / STORE_NAME) as store:
        with pytest.raises(ValueError, match=f"add_round: the accuracy after 3 labels of 'age' must be a finite "
                                             f"number, got {accuracy}"):
            store.add_round("age", 3, accuracy)
        assert store.rounds("age") == []


def test_opening_a_missing_store_read_only_names_the_file(tmp_path):
    with pytest.raises(GraphseqError, match=f"no label store at {tmp_path / 'missing.sqlite'}"):
        LabelStore(tmp_path / "missing.sqlite", read_only=True)
    assert not (tmp_path / "missing.sqlite").exists()


def test_undo_of_a_rounds_last_answer_reopens_the_round(tmp_path):
    with LabelStore(tmp_path / STORE_NAME) as store:
        store.add("age", 1, "Theory", "human")
        store.add_round("age", 1, 0.25)
        store.add("age", 2, None, "human")
        store.add("age", 3, None, "human")
        store.add_round("age", 1, 0.5)  # a round skipped whole: the same point again
        store.set_pending("age", [4, 5])
        undone = store.undo("age", requeue=True)
        assert (undone.item, undone.reopened) == (3, True)
        assert store.rounds("age") == [[1, 0.25]]
        assert store.pending("age") == [3]  # 4 and 5 were chosen by the model after the undone round
        undone = store.undo("age", requeue=True)
        assert (undone.item, undone.reopened) == (2, False)
        assert store.pending("age") == [2, 3]
        assert store.undo("age", requeue=True).reopened
        assert store.rounds("age") == [] and store.pending("age") == [1]


KILLED_DURING_COMMIT = """
import os, signal, sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("PRAGMA cache_size=1")  # pages spill to the file before the commit
connection.execute("BEGIN")
for i in range(3000):
    connection.execute("INSERT INTO answers (strategy, item, label, source, time) VALUES ('age', ?, ?, 'human', 't')",
                       (10**5 + i, "y" * 200))
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_store_killed_during_a_commit_keeps_every_committed_answer(tmp_path):
    path = tmp_path / STORE_NAME
    with LabelStore(path) as store:
        store.add("age", 1, "Theory", "human")
        store.add("age", 2, "Case_Based", "human")
    killed = subprocess.run([sys.executable, "-c", KILLED_DURING_COMMIT, str(path)])
    assert killed.returncode == -signal.SIGKILL
    assert (tmp_path / f"{STORE_NAME}-journal").stat().st_size > 0  # a hot journal
    assert [line.rsplit(",", 1)[0] for line in labels_csv(tmp_path).splitlines()[1:]] == [
        "1,Theory,human", "2,Case_Based,human"]
    assert not (tmp_path / f"{STORE_NAME}-journal").exists()
    with LabelStore(path) as store:  # --resume opens it too
        assert [a.item for a in store.answers("age")] == [1, 2]


def test_a_damaged_store_beside_a_journal_is_named_and_left_as_it_is(tmp_path):
    path = tmp_path / STORE_NAME
    path.write_bytes(b"not a database" * 100)
    (tmp_path / f"{STORE_NAME}-journal").write_bytes(b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7" + b"x" * 600)
    with pytest.raises(GraphseqError, match=f"{path} is damaged or not an SQLite database"):
        labels_csv(tmp_path)
    assert path.read_bytes() == b"not a database" * 100


def old_store(path, tables):
    """A store as a graphseq from before the version mark wrote it: only
    ``tables`` (their columns never changed), ``user_version`` 0."""
    connection = sqlite3.connect(path)
    for statement in SCHEMA.split(");"):  # (a comment holds a semicolon)
        if any(f"EXISTS {table} (" in statement for table in tables):
            connection.execute(statement + ")")
    connection.execute("INSERT INTO answers (strategy, item, label, source, time) VALUES ('age', 1, 'Theory', "
                       "'human', 't')")
    connection.commit()
    connection.close()


def tables_of(path):
    connection = sqlite3.connect(path)
    try:
        return ({row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")},
                connection.execute("PRAGMA user_version").fetchone()[0])
    finally:
        connection.close()


def test_every_table_of_the_schema_belongs_to_a_version(tmp_path):
    with LabelStore(tmp_path / STORE_NAME):
        pass
    tables, version = tables_of(tmp_path / STORE_NAME)
    assert tables - {"sqlite_sequence"} == {table for added in VERSIONS for table in added}
    assert version == VERSION


@pytest.mark.parametrize("tables", [("answers", "rounds"), ("answers", "rounds", "pending")])
def test_a_store_of_an_older_version_is_upgraded_and_keeps_its_answers(tmp_path, tables):
    old_store(tmp_path / STORE_NAME, tables)
    assert labels_csv(tmp_path).splitlines()[1] == "1,Theory,human,t"  # read as it is
    with LabelStore(tmp_path / STORE_NAME) as store:
        assert [a.item for a in store.answers("age")] == [1]
        store.add_round("age", 1, 0.5)
        assert store.pending("age") == [] and store.rounds("age") == [[1, 0.5]]
    assert tables_of(tmp_path / STORE_NAME) == ({"answers", "rounds", "pending", "round_ends", "sqlite_sequence"},
                                                VERSION)


def current_store(path):
    with LabelStore(path) as store:
        store.add("age", 1, "Theory", "human")
        store.add_round("age", 1, 0.5)
        store.add("age", 2, "Theory", "human", pending=[3, 4])


def edit(path, statement):
    """Runs one SQL statement on the store at ``path``, as a person with sqlite3 would."""
    connection = sqlite3.connect(path)
    connection.execute(statement)
    connection.commit()
    connection.close()


@pytest.mark.parametrize("table", ["pending", "round_ends", "rounds", "answers"])
@pytest.mark.parametrize("read_only", [False, True])
def test_a_store_that_lost_a_table_is_named_and_left_as_it_is(tmp_path, table, read_only):
    path = tmp_path / STORE_NAME
    current_store(path)
    edit(path, f"DROP TABLE {table}")
    before = path.read_bytes()
    with pytest.raises(GraphseqError, match=f"^{path} is damaged: it lacks table {table}, which a label store "
                                            f"of version 3 has; it was left as it is$"):
        LabelStore(path, read_only=read_only)
    assert path.read_bytes() == before  # not recreated empty, so the round in progress is not lost unseen


@pytest.mark.parametrize("read_only", [False, True])
def test_a_store_that_lost_a_column_is_named_and_left_as_it_is(tmp_path, read_only):
    path = tmp_path / STORE_NAME
    current_store(path)
    edit(path, "ALTER TABLE answers DROP COLUMN source")
    before = path.read_bytes()
    with pytest.raises(GraphseqError, match=f"^{path} is damaged: it lacks column source of table answers"):
        LabelStore(path, read_only=read_only)
    with pytest.raises(GraphseqError, match="lacks column source of table answers"):
        labels_csv(tmp_path)
    assert path.read_bytes() == before


@pytest.mark.parametrize("tables, lost", [(("answers", "rounds", "round_ends"), "table pending"),
                                          (("answers", "pending"), "table rounds")])
def test_a_store_from_before_the_version_mark_that_lost_a_table_is_named(tmp_path, tables, lost):
    # round_ends came after pending, and answers and rounds came together: no version wrote these.
    old_store(tmp_path / STORE_NAME, tables)
    with pytest.raises(GraphseqError, match=f"is damaged: it lacks {lost}, which"):
        LabelStore(tmp_path / STORE_NAME)
    assert tables_of(tmp_path / STORE_NAME) == (set(tables) | {"sqlite_sequence"}, 0)


def test_a_store_of_a_newer_version_is_refused(tmp_path):
    path = tmp_path / STORE_NAME
    current_store(path)
    edit(path, f"PRAGMA user_version = {VERSION + 1}")
    with pytest.raises(GraphseqError, match=f"version {VERSION + 1}, written by a newer graphseq"):
        LabelStore(path)


def test_a_store_another_process_holds_locked_is_refused_when_opened(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT", 0.1)
    path = tmp_path / STORE_NAME
    current_store(path)
    holder = sqlite3.connect(path)
    holder.execute("BEGIN IMMEDIATE")  # another writer's transaction, which does not end
    try:
        with pytest.raises(GraphseqError, match=f"^{path} is locked by another process"):
            LabelStore(path)  # at once, not at the first answer
        assert labels_csv(tmp_path).splitlines()[1].startswith("1,Theory,human,")  # reading still works
    finally:
        holder.close()


@pytest.fixture
def read_only_file():
    """Makes a file read-only: chmod for a user, ``chattr +i`` for root (whom
    chmod does not stop); skips where neither does."""
    made = []

    def make(path):
        if os.geteuid() == 0:
            if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)],
                                                                capture_output=True).returncode:
                pytest.skip("root, and chattr +i does not work here")
            made.append(path)
        else:
            path.chmod(0o444)
        if os.access(path, os.W_OK):
            pytest.skip("the file stays writable")

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_read_only_store_is_refused_when_opened_for_writing_and_read_all_the_same(tmp_path, read_only_file):
    path = tmp_path / STORE_NAME
    current_store(path)
    before = path.read_bytes()
    read_only_file(path)
    with pytest.raises(GraphseqError, match=f"^{path} cannot be written \\(the file is read-only here\\)"):
        LabelStore(path)  # at once, before a person is asked anything
    assert [line.rsplit(",", 1)[0] for line in labels_csv(tmp_path).splitlines()[1:]] == [
        "1,Theory,human", "2,Theory,human"]
    with LabelStore(path, read_only=True) as store:
        assert store.pending("age") == [3, 4] and store.rounds("age") == [[1, 0.5]]
    assert path.read_bytes() == before
