"""A smoke run of polarity-bilstm on the real sentence-polarity data, and the
classifier's pooling."""
import json
import re

import pytest
import torch

from graphseq import GraphseqError, run
from graphseq.graphs import chain, lengths_to_batch
from graphseq.io import load_checkpoint
from graphseq.models.sentence import SentenceClassifier
from graphseq.stages.polarity import read_folds

TINY = {"model.embedding_dim": 16, "model.hidden_size": 8, "train.max_epochs": 2, "train.max_batches": 3}


@pytest.mark.slow
def test_polarity_bilstm_runs_two_folds_and_writes_their_checkpoints(tmp_path, data_root, mirror):
    summary = run("polarity-bilstm", overrides={**TINY, "data.test_folds": [0, 3]},
                  out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=True)
    figures = summary["runs"][0]
    assert [f["fold"] for f in figures["folds"]] == [0, 3]
    assert {"val_accuracy", "val_accuracy_std", "test_accuracy", "test_accuracy_std"} <= set(figures)
    assert figures["test_accuracy"] == sum(f["test_accuracy"] for f in figures["folds"]) / 2
    assert all(f["epochs"] in (1, 2) for f in figures["folds"])
    # Each accuracy counts the fold's test sentences (1,067 in fold 0, 1,066 in fold 3).
    for fold, size in zip(figures["folds"], (1067, 1066)):
        assert fold["test_accuracy"] * size == pytest.approx(round(fold["test_accuracy"] * size), abs=1e-6)
    assert json.loads((tmp_path / "folds.json").read_text()) == figures["folds"]
    checkpoint = load_checkpoint(tmp_path / "fold-3.pt")
    assert checkpoint["figures"] == figures["folds"][1]
    assert checkpoint["vocabulary"][0] == "<unk>"
    # Fold 0 of the shared folds: 8,528 training, 1,067 validation, 1,067 test sentences.
    log = (tmp_path / "log.txt").read_text()
    assert re.search(r"fold 0: 8528 training, 1067 validation, 1067 test", log)


@pytest.mark.slow
def test_a_fold_gives_the_same_figures_alone_and_resumed(tmp_path, data_root, mirror):
    alone = run("polarity-bilstm", overrides={**TINY, "data.test_folds": [3]}, out=tmp_path / "alone",
                data_root=data_root, data_mirror=mirror, quiet=True)["runs"][0]["folds"][0]
    both = tmp_path / "both"
    run("polarity-bilstm", overrides={**TINY, "data.test_folds": [3]}, out=both,
        data_root=data_root, data_mirror=mirror, quiet=True)
    resumed = run("polarity-bilstm", overrides={**TINY, "data.test_folds": [3, 5]}, out=both, resume=True,
                  data_root=data_root, data_mirror=mirror, quiet=True)["runs"][0]["folds"]
    assert resumed[0] == alone and resumed[1]["fold"] == 5
    assert "fold 3: kept from" in (both / "log.txt").read_text()


@pytest.mark.slow
def test_a_damaged_record_of_finished_folds_is_refused_on_resume_before_writing(tmp_path, data_root, mirror):
    # A resumed run keeps the folds of folds.json whose fold-<i>.pt is there, and reads both before any
    # write: a torn fold-<i>.pt was kept all the same, a folds.json of other rows taken for none.
    run("polarity-bilstm", overrides={**TINY, "data.test_folds": [3]}, out=tmp_path,
        data_root=data_root, data_mirror=mirror, quiet=True)
    checkpoint, record = tmp_path / "fold-3.pt", tmp_path / "folds.json"
    whole = {path: path.read_bytes() for path in (checkpoint, record)}
    torn_checkpoint = r"fold-3\.pt is damaged or not a graphseq checkpoint"
    other_rows = r"folds\.json is damaged \(not a list of folds with fold, epochs, val_accuracy\); it was left as it is"
    for path, damaged, message in (
            (checkpoint, whole[checkpoint][:len(whole[checkpoint]) // 2], torn_checkpoint),
            (checkpoint, b"", torn_checkpoint),
            (record, whole[record][:len(whole[record]) // 2], r"folds\.json is damaged \(.+\); it was left as it is"),
            (record, b'{"fold": 3}', other_rows),
            (record, b'[{"val_accuracy": 0.5}]', other_rows),
            (record, b'[{"fold": 3, "epochs": 1}]', other_rows)):  # was a KeyError traceback
        path.write_bytes(damaged)
        before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
        with pytest.raises(GraphseqError, match=message):
            run("polarity-bilstm", overrides={**TINY, "data.test_folds": [3, 5]}, out=tmp_path, resume=True,
                data_root=data_root, data_mirror=mirror, quiet=True)
        assert {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()} == before
        path.write_bytes(whole[path])


@pytest.mark.parametrize("overrides, message", [
    # A vocabulary of <unk> alone trained to accuracy 0.5 and exit 0.
    ({"data.min_freq": 1_000_000_000, "data.test_folds": [0]},
     r"data\.min_freq = 1000000000: no word occurs that often in the training sentences of fold 0, so its "
     r"vocabulary would hold <unk> alone; lower data\.min_freq"),
    # Refused by the stage before as well; the precheck must say so too, not index a fold that is not there.
    ({"data.test_folds": [2, 10], "data.min_freq": 2}, r"data\.test_folds: fold\(s\) 10 out of range 0\.\.9"),
])
def test_settings_no_fold_can_run_with_are_refused_before_the_run_folder_is_made(overrides, message, tmp_path,
                                                                                 data_root, mirror):
    out = tmp_path / "run"
    with pytest.raises(GraphseqError, match=message):
        run("polarity-bilstm", overrides={**TINY, **overrides}, out=out, data_root=data_root, data_mirror=mirror,
            quiet=True)
    assert not out.exists()


def test_the_folds_file_reader_wants_every_key_its_stage_keeps(tmp_path):
    # bert-polarity and spv-polarity keep a fold by (fold, variant) and (fold, mode).
    path = tmp_path / "folds.json"
    assert read_folds(path) == []  # none finished yet
    path.write_text('[{"fold": 0, "variant": "scratch", "val_accuracy": 0.7}]')
    assert read_folds(path, ("variant", "val_accuracy")) == [{"fold": 0, "variant": "scratch", "val_accuracy": 0.7}]
    with pytest.raises(GraphseqError, match=r"folds\.json is damaged \(not a list of folds with fold, mode, "
                                            r"likelihood_val_accuracy\); it was left as it is"):
        read_folds(path, ("mode", "likelihood_val_accuracy"))


@pytest.mark.slow
def test_settings_can_be_chosen_without_a_test_figure(tmp_path, data_root, mirror):
    figures = run("polarity-bilstm", overrides={**TINY, "data.test_folds": [1], "train.test": False},
                  out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=True)["runs"][0]
    assert "test_accuracy" not in figures and "test_accuracy" not in figures["folds"][0]
    assert "val_accuracy" in figures


def test_max_pool_reads_each_sentence_alone():
    torch.manual_seed(0)
    model = SentenceClassifier(10, embedding_dim=4, hidden_size=3, dropout=0.0).eval()
    first, second = torch.tensor([1, 2, 3]), torch.tensor([4, 5])
    both = model(torch.cat([first, second]), chain([3, 2]), lengths_to_batch([3, 2]))
    alone = model(second, chain([2]), lengths_to_batch([2]))
    assert both.shape == (2, 2)
    assert torch.allclose(both[1], alone[0], atol=1e-6)


def test_final_states_pool_gives_one_row_per_sentence():
    model = SentenceClassifier(10, embedding_dim=4, hidden_size=3, pool="final").eval()
    logits = model(torch.tensor([1, 2, 3, 4]), chain([1, 3]), lengths_to_batch([1, 3]))
    assert logits.shape == (2, 2)


def test_the_first_fold_paces_the_rest(tmp_path, data_root, mirror):
    run("polarity-bilstm", out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True,
        overrides={"data.test_folds": [0, 1, 2], "train.max_batches": 2, "train.max_epochs": 2})
    log = (tmp_path / "run" / "log.txt").read_text()
    assert re.search(r"\d+\.\d s an epoch here; at most about \d+ seconds for the 2 folds left \(2 epochs each\)",
                     log)
