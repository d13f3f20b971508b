"""The pipeline runner: reading, overriding, seeding, and what a run writes."""
import json
import tomllib

import pytest

from graphseq import run
from graphseq.errors import GraphseqError
from graphseq.pipeline import apply_overrides, dump_toml, parse_override, read_config, resolve_pipeline
from graphseq.stages import STAGES, stage

FAST = {"train.max_epochs": 3}


def test_parse_override_reads_toml_values():
    assert parse_override("train.lr=0.01") == ("train", "lr", 0.01)
    assert parse_override("data.name=CiteSeer") == ("data", "name", "CiteSeer")
    assert parse_override('data.name="Cora"') == ("data", "name", "Cora")
    assert parse_override("model.flag=true") == ("model", "flag", True)


def test_override_changes_the_config(tmp_path):
    config = read_config(resolve_pipeline("gat-cora"))
    apply_overrides(config, ["train.lr=0.01", "model.heads=4"])
    assert config["train"]["lr"] == 0.01 and config["model"]["heads"] == 4


def test_int_override_of_a_float_key_becomes_float():
    config = read_config(resolve_pipeline("gat-cora"))
    apply_overrides(config, {"train.lr": 1})
    assert config["train"]["lr"] == 1.0 and isinstance(config["train"]["lr"], float)


def test_dump_toml_round_trips():
    config = {"description": 'say "hi"', "a": {"x": 1, "y": 0.5, "z": "s", "w": [1, 2], "b": True}}
    assert tomllib.loads(dump_toml(config)) == config


def test_registry_refuses_a_second_stage_of_the_same_name():
    with pytest.raises(ValueError, match="registered twice"):
        stage("planetoid")(lambda ctx: None)


def test_unknown_stage_lists_the_known_ones(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text('[data]\nstage = "planetoidd"\n')
    with pytest.raises(GraphseqError, match="known stages: .*planetoid"):
        read_config(path)
    assert "planetoid" in STAGES


def test_run_writes_config_log_checkpoint_and_metrics(tmp_path, data_root, mirror):
    out = tmp_path / "run"
    summary = run("gat-cora", overrides=FAST, out=out, data_root=data_root, data_mirror=mirror, quiet=True)
    for name in ["config.toml", "log.txt", "best.pt", "metrics.json"]:
        assert (out / name).is_file(), name
    assert json.loads((out / "metrics.json").read_text()) == summary
    assert tomllib.loads((out / "config.toml").read_text())["train"]["max_epochs"] == 3
    figures = summary["runs"][0]
    assert set(figures) >= {"test_accuracy", "val_accuracy", "epochs", "epoch_seconds"}
    assert figures["epochs"] == 3


def test_runs_repeat_with_consecutive_seeds_and_summarise(tmp_path, data_root, mirror):
    out = tmp_path / "runs"
    summary = run("gat-cora", overrides=FAST, seed=5, runs=2, out=out, data_root=data_root,
                  data_mirror=mirror, quiet=True)
    assert [r["seed"] for r in summary["runs"]] == [5, 6]
    accuracies = [r["test_accuracy"] for r in summary["runs"]]
    assert summary["mean"]["test_accuracy"] == pytest.approx(sum(accuracies) / 2)
    assert summary["std"]["test_accuracy"] >= 0
    assert (out / "seed-5" / "best.pt").is_file() and (out / "seed-6" / "metrics.json").is_file()


def test_same_seed_same_result(tmp_path, data_root, mirror):
    first, second = (run("gat-cora", overrides=FAST, seed=3, out=tmp_path / str(i), data_root=data_root,
                         data_mirror=mirror, quiet=True)["runs"][0]["test_accuracy"] for i in range(2))
    assert first == second


def test_checkpoint_loads_with_weights_only(tmp_path, data_root, mirror):
    from graphseq.io import load_checkpoint

    run("gat-cora", overrides=FAST, out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=True)
    state = load_checkpoint(tmp_path / "best.pt")
    assert "conv1.lin.weight" in state


@pytest.mark.parametrize("rule", ["gat", "accuracy", "loss"])
def test_each_stopping_rule_keeps_a_model_and_stops(rule, tmp_path, data_root, mirror):
    summary = run("gat-cora", overrides={"train.stop_on": rule, "train.patience": 5, "train.max_epochs": 200},
                  out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=True)
    figures = summary["runs"][0]
    assert figures["epochs"] < 200 and figures["val_accuracy"] > 0.3


def test_unknown_stopping_rule_is_named(tmp_path, data_root, mirror):
    with pytest.raises(GraphseqError, match="stop_on must be one of gat, accuracy, loss"):
        run("gat-cora", overrides={"train.stop_on": "patience"}, out=tmp_path, data_root=data_root,
            data_mirror=mirror, quiet=True)
