"""A smoke run of spv-polarity on one fold of the real sentences."""
import json
import re

import pytest

from graphseq import GraphseqError, run


@pytest.mark.slow
def test_spv_polarity_runs_one_fold_of_both_modes(tmp_path, data_root, mirror):
    summary = run("spv-polarity", overrides={"spv.run_folds": [3], "spv.epochs": 1, "spv.infer_epochs": 1,
                                             "spv.dim": 8},
                  out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=True)
    figures = summary["runs"][0]
    assert figures["folds"] == [3]
    for mode in ("dm", "dbow"):
        assert figures[f"{mode}_test_accuracy"] == figures[f"{mode}_likelihood_test_accuracy"]
        assert {f"{mode}_{rule}_val_accuracy" for rule in ("likelihood", "logistic", "nearest")} <= set(figures)
    rows = json.loads((tmp_path / "folds.json").read_text())
    assert sorted((r["fold"], r["mode"]) for r in rows) == [(3, "dbow"), (3, "dm")]
    words = (tmp_path / "class_words.txt").read_text().splitlines()
    assert len(words) == 4 and words[0].startswith("SPV-DM fold 3, nearest words to the negative class vector")
    assert (tmp_path / "curves.png").is_file()
    # A resume with other run_folds keeps the folds finished before (a fold 5, as if run earlier).
    (tmp_path / "folds.json").write_text(json.dumps(rows + [{**r, "fold": 5} for r in rows]))
    again = run("spv-polarity", overrides={"spv.run_folds": [3]}, out=tmp_path, resume=True, data_root=data_root,
                data_mirror=mirror, quiet=True)
    assert again["runs"][0]["folds"] == [3]
    kept = json.loads((tmp_path / "folds.json").read_text())
    assert sorted((r["fold"], r["mode"]) for r in kept) == [(3, "dbow"), (3, "dm"), (5, "dbow"), (5, "dm")]


def test_a_min_count_that_leaves_no_word_is_refused_before_writing(tmp_path, data_root, mirror):
    with pytest.raises(GraphseqError, match="^spv.min_count = 100000: no word occurs that often in the training "
                                            "sentences of fold 0, so there is nothing to train; lower "
                                            "spv.min_count$"):
        run("spv-polarity", overrides={"spv.run_folds": [0], "spv.modes": ["dbow"], "spv.min_count": 100000},
            out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True)
    assert not (tmp_path / "run").exists()


def test_too_many_noise_words_are_refused_before_writing(tmp_path, data_root, mirror):
    with pytest.raises(GraphseqError, match="spv.negative = 1000000000 is not allowed: "
                                            "it must be a number from 1 to 100"):
        run("spv-polarity", overrides={"spv.run_folds": [0], "spv.epochs": 1, "spv.negative": 1_000_000_000},
            out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True)
    assert not (tmp_path / "run").exists()


def test_a_window_wider_than_the_longest_sentence_is_refused_before_writing(tmp_path, data_root, mirror):
    with pytest.raises(GraphseqError, match=r"spv.window = 1000000000 is not allowed: it must be at most \d+, "
                                            r"which spans the longest sentence"):
        run("spv-polarity", overrides={"spv.run_folds": [0], "spv.window": 1_000_000_000},
            out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True)
    assert not (tmp_path / "run").exists()


def test_a_mode_named_twice_is_refused_before_writing(tmp_path):
    # Each mode of the list was trained and scored again, over the same keys.
    with pytest.raises(GraphseqError, match=re.escape("spv.modes = ['dm', 'dm'] is not allowed: it must be a "
                                                      "non-empty list of distinct items")):
        run("spv-polarity", overrides={"spv.modes": ["dm", "dm"]}, out=tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()
