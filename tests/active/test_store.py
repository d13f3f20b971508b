import sqlite3

import pytest

from graphseq.active.store import STORE_NAME, LabelStore, labels_csv
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
