"""gat-ppi end to end on generated files in PPI's raw layout (the real data
is not on this machine): training, the kept model, test micro-F1, resume."""
import pytest
import torch

from graphseq import run
from graphseq.data.ppi import write_ppi_raw
from graphseq.io import load_checkpoint

TINY = {"model.hidden_channels": 8, "model.heads": 2, "model.output_heads": 2,
        "train.steps": 6, "train.eval_every": 2, "train.checkpoint_every": 2}


@pytest.fixture(scope="module")
def ppi_mirror(tmp_path_factory):
    mirror = tmp_path_factory.mktemp("ppi-mirror")
    write_ppi_raw(mirror / "PPI" / "raw", graphs=(4, 2, 2), nodes=30, features=12, labels=9)
    return mirror


def _run(out, mirror, root, resume=False, **overrides):
    return run("gat-ppi", overrides={**TINY, **overrides}, out=out, data_root=root,
               data_mirror=mirror, quiet=True, resume=resume)["runs"][0]


def test_gat_ppi_trains_keeps_the_best_validation_f1_and_tests_it(tmp_path, ppi_mirror):
    figures = _run(tmp_path / "run", ppi_mirror, tmp_path / "data")
    assert figures["steps"] == 6 and 0.0 <= figures["test_f1"] <= 1.0
    checkpoint = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    history = checkpoint["history"]
    assert [e["step"] for e in history] == [2, 4, 6]
    assert figures["val_f1"] == max(e["val_f1"] for e in history)
    assert figures["best_step"] == checkpoint["best"]["step"]
    for name in ("metrics.json", "log.txt", "config.toml", "curves.png"):
        assert (tmp_path / "run" / name).is_file()


def test_gat_ppi_learns_the_generated_labels(tmp_path, ppi_mirror):
    figures = _run(tmp_path, ppi_mirror, tmp_path / "data", **{"train.steps": 40, "train.eval_every": 10,
                                                                "train.checkpoint_every": 40})
    # The labels depend on the features; chance (all labels guessed half the time) is about 0.5.
    assert figures["val_f1"] > 0.6


@pytest.mark.slow
def test_gat_ppi_resumes_where_it_stopped(tmp_path, ppi_mirror):
    straight = _run(tmp_path / "straight", ppi_mirror, tmp_path / "data")
    _run(tmp_path / "split", ppi_mirror, tmp_path / "data", **{"train.steps": 4})
    resumed = _run(tmp_path / "split", ppi_mirror, tmp_path / "data", resume=True)
    assert resumed["steps"] == 6
    assert resumed["test_f1"] == straight["test_f1"] and resumed["val_f1"] == straight["val_f1"]
    one = load_checkpoint(tmp_path / "straight" / "checkpoint.pt")["model"]
    two = load_checkpoint(tmp_path / "split" / "checkpoint.pt")["model"]
    for key in one:
        assert torch.equal(one[key], two[key]), key
