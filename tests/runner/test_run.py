"""The pipeline runner: reading, overriding, seeding, and what a run writes."""
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tomllib

import pytest

import graphseq
from graphseq import run
from graphseq.checks import at_least
from graphseq.errors import GraphseqError
from graphseq.cli import main
from graphseq.runner.config import (apply_overrides, available_pipelines, check_applies, check_domains,
                                    checked_config, parse_override, read_config, resolve_pipeline)
from graphseq.runner.run import _apply_options
from graphseq.runner.run_folder import resume_command
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


def test_registry_refuses_a_second_stage_of_the_same_name():
    with pytest.raises(ValueError, match="registered twice"):
        stage("planetoid")(lambda ctx: None)


def test_unknown_stage_lists_the_known_ones(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text('[data]\nstage = "planetoidd"\n')
    with pytest.raises(GraphseqError, match=r"p.toml: \[data\]: unknown stage 'planetoidd'; known stages: .*planetoid"):
        read_config(path)
    assert "planetoid" in STAGES


@pytest.mark.slow
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


@pytest.mark.slow
def test_runs_repeat_with_consecutive_seeds_and_summarise(tmp_path, data_root, mirror):
    out = tmp_path / "runs"
    summary = run("gat-cora", overrides=FAST, seed=5, runs=2, out=out, data_root=data_root,
                  data_mirror=mirror, quiet=True)
    assert [r["seed"] for r in summary["runs"]] == [5, 6]
    accuracies = [r["test_accuracy"] for r in summary["runs"]]
    assert summary["mean"]["test_accuracy"] == pytest.approx(sum(accuracies) / 2)
    assert summary["std"]["test_accuracy"] == pytest.approx(abs(accuracies[0] - accuracies[1]) / 2 ** 0.5)
    assert (out / "seed-5" / "best.pt").is_file() and (out / "seed-6" / "metrics.json").is_file()


@pytest.mark.slow
def test_same_seed_same_result(tmp_path, data_root, mirror):
    first, second = (run("gat-cora", overrides=FAST, seed=3, out=tmp_path / str(i), data_root=data_root,
                         data_mirror=mirror, quiet=True)["runs"][0]["test_accuracy"] for i in range(2))
    assert first == second


def test_checkpoint_loads_with_weights_only(tmp_path, data_root, mirror):
    from graphseq.io import load_checkpoint

    run("gat-cora", overrides=FAST, out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=True)
    state = load_checkpoint(tmp_path / "best.pt")
    assert "conv1.lin.weight" in state


@pytest.mark.slow
@pytest.mark.parametrize("rule", ["gat", "accuracy", "loss"])
def test_each_stopping_rule_keeps_a_model_and_stops(rule, tmp_path, data_root, mirror):
    summary = run("gat-cora", overrides={"train.stop_on": rule, "train.patience": 5, "train.max_epochs": 200},
                  out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=True)
    figures = summary["runs"][0]
    assert figures["epochs"] < 200 and figures["val_accuracy"] > 0.3


def test_unknown_stopping_rule_is_named(tmp_path, data_root, mirror):
    with pytest.raises(GraphseqError, match="train.stop_on = 'patience' is not allowed: it must be one of gat, accuracy, loss"):
        run("gat-cora", overrides={"train.stop_on": "patience"}, out=tmp_path, data_root=data_root,
            data_mirror=mirror, quiet=True)


# --------------------------------------------------------------------------- #
# What a run folder records, and resuming with it
# --------------------------------------------------------------------------- #

CHARLM = {"model.hidden_size": 8, "model.embedding_dim": 4, "train.batch_size": 2, "train.window": 8,
          "train.minutes": 0.0, "train.steps": 2, "train.eval_every": 2, "train.eval_chars": 500,
          "train.checkpoint_every": 2, "train.eval_batch_size": 64, "sample.length": 5}


def folder_hash(folder):
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def charlm_run(tmp_path_factory, data_root, mirror):
    out = tmp_path_factory.mktemp("charlm") / "run"
    run("charlm-lstm", overrides=CHARLM, seed=3, out=out, data_root=data_root, data_mirror=mirror, quiet=True)
    return out


def test_config_records_pipeline_settings_seeds_and_version(charlm_run):
    config = tomllib.loads((charlm_run / "config.toml").read_text())
    assert (config["pipeline"], config["seed"], config["runs"]) == ("charlm-lstm", 3, 1)
    assert config["graphseq"] == graphseq.__version__
    assert config["model"]["hidden_size"] == 8 and config["train"]["steps"] == 2


def test_run_files_are_as_readable_as_other_files(charlm_run):
    umask = os.umask(0)
    os.umask(umask)
    for name in ("config.toml", "metrics.json", "checkpoint.pt"):
        assert stat.S_IMODE((charlm_run / name).stat().st_mode) == 0o666 & ~umask, name


def test_a_run_from_its_config_is_named_after_its_pipeline(charlm_run, tmp_path, data_root, mirror):
    summary = run(charlm_run / "config.toml", out=tmp_path / "again", data_root=data_root,
                  data_mirror=mirror, quiet=True)
    assert summary["pipeline"] == "charlm-lstm" and summary["runs"][0]["seed"] == 3
    again = json.loads((tmp_path / "again" / "metrics.json").read_text())["runs"][0]
    first = json.loads((charlm_run / "metrics.json").read_text())["runs"][0]
    assert again["val_nats"] == first["val_nats"]


REFUSED_RESUMES = [
    ({"pipeline": "gat-cora"}, "--resume has no use in pipeline gat-cora"),
    ({"pipeline": "charlm-rnn"}, "holds a run of pipeline 'charlm-lstm', not 'charlm-rnn'"),
    ({"overrides": {"model.hidden_size": 16}}, "model.hidden_size = 16 (the run has 8)"),
    ({"overrides": {"train.lr": 0.1}}, "train.lr = 0.1 (the run has 0.002)"),
    ({"overrides": {"train.steps": 1}}, "train.steps = 1 (the run has 2): a resumed run may take a longer budget, "
                                        "not a shorter one"),
    # Every budget a resumed run may change may only grow; 0 minutes is no limit, the longest.
    ({"overrides": {"train.minutes": 1.0}}, "train.minutes = 1.0 (the run has 0.0, no limit): a resumed run may take "
                                            "a longer budget, not a shorter one"),
    # A key config.toml does not record has its default.
    ({"overrides": {"train.eval_window": 128}}, "train.eval_window = 128 (the run has 256)"),
    ({"seed": 4}, "--seed 4 differs from the run's seed = 3"),
    ({"runs": 2}, "--runs 2 differs from the run's runs = 1"),
    ({"oracle": "human"}, "--oracle has no use"),
    ({"overrides": {"train.lr": -1.0}}, "train.lr = -1.0 is not allowed"),
    ({"device": "meta"}, "--device 'meta' is not supported"),
]


@pytest.mark.parametrize("change, message", REFUSED_RESUMES)
def test_a_refused_resume_names_the_difference_and_changes_no_file(change, message, charlm_run,
                                                                   data_root, mirror):
    before = folder_hash(charlm_run)
    arguments = {"pipeline": "charlm-lstm", **change}
    with pytest.raises(GraphseqError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run(arguments.pop("pipeline"), out=charlm_run, resume=True, data_root=data_root,
            data_mirror=mirror, quiet=True, **arguments)
    assert folder_hash(charlm_run) == before


@pytest.mark.parametrize("damage", [lambda b: b[: len(b) // 2], lambda b: os.urandom(len(b)), lambda b: b""])
def test_a_damaged_checkpoint_is_named_and_left_as_it_is(damage, charlm_run, tmp_path, data_root, mirror, capsys):
    out = tmp_path / "run"
    out.mkdir()
    for path in charlm_run.iterdir():
        (out / path.name).write_bytes(path.read_bytes())
    (out / "checkpoint.pt").write_bytes(damage((charlm_run / "checkpoint.pt").read_bytes()))
    before = folder_hash(out)
    assert main(["run", "charlm-lstm", "--resume", "--out", str(out), "--data-root", str(data_root),
                 "--data-mirror", str(mirror), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{out / 'checkpoint.pt'} is damaged" in err and err.count("\n") == 1
    assert folder_hash(out) == before
    assert main(["sample", str(out)]) == 2
    assert "checkpoint.pt is damaged" in capsys.readouterr().err


def test_resume_may_lengthen_the_budget_and_records_it(charlm_run, tmp_path, data_root, mirror):
    out = tmp_path / "run"
    out.mkdir()
    for path in charlm_run.iterdir():
        (out / path.name).write_bytes(path.read_bytes())
    summary = run("charlm-lstm", overrides={"train.steps": 4}, out=out, resume=True,
                  data_root=data_root, data_mirror=mirror, quiet=True)
    assert summary["runs"][0]["steps"] == 4 and summary["runs"][0]["seed"] == 3
    assert tomllib.loads((out / "config.toml").read_text())["train"]["steps"] == 4
    # config.toml now says 4 steps; run as a pipeline file it would not take this run's stretched schedule.
    assert "resumed with train.steps = 4 (was 2); config.toml now records it, so graphseq run " \
        f"{out / 'config.toml'} would go straight to it" in (out / "log.txt").read_text()
    from graphseq.runner.run_folder import check_stamp
    check_stamp(out / "config.toml")  # the runner's own rewrite is no edit


def test_a_resume_may_set_a_key_to_its_default_that_the_run_did_not_record(charlm_run, tmp_path, data_root,
                                                                          mirror):
    out = tmp_path / "run"
    shutil.copytree(charlm_run, out)
    assert "eval_window" not in read_config(out / "config.toml")["train"]
    summary = run("charlm-lstm", overrides={"train.eval_window": 256}, out=out, resume=True,
                  data_root=data_root, data_mirror=mirror, quiet=True)
    assert summary["runs"][0]["steps"] == 2


@pytest.mark.parametrize("edit", [("lr = 0.002", "lr = 0.1"), ("steps = 2", "steps = 1"), ("seed = 3", "seed = 4")])
def test_a_config_edited_by_hand_is_refused_on_resume_and_left_as_it_is(edit, charlm_run, tmp_path, data_root,
                                                                       mirror, capsys):
    out = tmp_path / "run"
    shutil.copytree(charlm_run, out)
    config = out / "config.toml"
    assert edit[0] in config.read_text()
    config.write_text(config.read_text().replace(edit[0], edit[1]))
    before = folder_hash(out)
    assert main(["run", "charlm-lstm", "--resume", "--out", str(out), "--data-root", str(data_root),
                 "--data-mirror", str(mirror), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == (f"graphseq: error: --resume: {config} was edited after the run wrote it; undo the edit (a "
                   f"resumed run continues with the settings it was started with) and give what may change, a "
                   f"longer budget, with --set\n")
    assert folder_hash(out) == before


def test_a_pipeline_file_given_on_resume_is_compared_with_the_run(charlm_run, tmp_path, data_root, mirror):
    """The file's settings are asked for as --set's are; the run's own config.toml continues it as it is."""
    recorded = (charlm_run / "config.toml").read_text()
    other = tmp_path / "other.toml"
    before = folder_hash(charlm_run)
    for old, new, message in [("lr = 0.002", "lr = 0.1", "train.lr = 0.1 (the run has 0.002)"),
                              ("steps = 2", "steps = 1", "train.steps = 1 (the run has 2): a resumed run may take"),
                              ("seed = 3", "seed = 4", f"{other} has seed = 4, the run's seed = 3")]:
        other.write_text(recorded.replace(old, new))
        with pytest.raises(GraphseqError, match=re.escape(message)):
            run(other, out=charlm_run, resume=True, data_root=data_root, data_mirror=mirror, quiet=True)
    assert folder_hash(charlm_run) == before


def test_a_new_run_into_a_run_folder_is_refused(charlm_run, data_root, mirror):
    before = folder_hash(charlm_run)
    with pytest.raises(GraphseqError, match="already holds a run; continue it with --resume"):
        run("charlm-lstm", overrides=CHARLM, out=charlm_run, data_root=data_root, data_mirror=mirror, quiet=True)
    assert folder_hash(charlm_run) == before


def test_a_folder_in_use_by_another_run_is_refused_and_left_alone(charlm_run, tmp_path, data_root, mirror):
    """Two runs on one folder (two --resume at once) would interleave their
    checkpoints and answers: the folder is locked while a run lives."""
    fcntl = pytest.importorskip("fcntl")
    before = folder_hash(charlm_run)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    held = [os.open(folder, os.O_RDONLY) for folder in (charlm_run, fresh)]  # what running runs hold
    try:
        for descriptor in held:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(GraphseqError, match=f"--out {charlm_run} is in use by another graphseq run"):
            run("charlm-lstm", overrides={**CHARLM, "train.steps": 4}, out=charlm_run, resume=True,
                data_root=data_root, data_mirror=mirror, quiet=True)
        with pytest.raises(GraphseqError, match="is in use by another graphseq run"):
            run("charlm-lstm", overrides=CHARLM, out=fresh, data_root=data_root, data_mirror=mirror, quiet=True)
    finally:
        for descriptor in held:
            os.close(descriptor)
    assert folder_hash(charlm_run) == before and not any(fresh.iterdir())
    run("charlm-lstm", overrides=CHARLM, out=fresh, data_root=data_root, data_mirror=mirror, quiet=True)


def test_a_folder_of_other_files_is_refused_and_left_alone(tmp_path, data_root, mirror):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "metrics.json").write_text("{}")  # a person's own file, not a run's
    with pytest.raises(GraphseqError, match="holds files but no graphseq run \\(no config.toml\\)"):
        run("charlm-lstm", overrides=CHARLM, out=out, data_root=data_root, data_mirror=mirror, quiet=True)
    assert [p.name for p in out.iterdir()] == ["metrics.json"] and (out / "metrics.json").read_text() == "{}"
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(GraphseqError, match="--out .*link is a link to .*gone, which does not exist"):
        run("charlm-lstm", overrides=CHARLM, out=link, data_root=data_root, data_mirror=mirror, quiet=True)


def test_a_run_killed_before_storing_anything_is_started_again_in_its_folder(charlm_run, tmp_path, data_root,
                                                                            mirror):
    """Killed after config.toml and before its first checkpoint: --resume has
    nothing to continue from and says so; a new run takes the folder."""
    out = tmp_path / "killed"
    out.mkdir()
    for name in ("config.toml", "log.txt"):
        (out / name).write_bytes((charlm_run / name).read_bytes())
    with pytest.raises(GraphseqError, match="it stopped before it stored anything to continue from, so start it "
                                            "again without --resume"):
        run("charlm-lstm", out=out, resume=True, data_root=data_root, data_mirror=mirror, quiet=True)
    run("charlm-lstm", overrides=CHARLM, seed=3, out=out, data_root=data_root, data_mirror=mirror, quiet=True)
    assert (out / "checkpoint.pt").is_file() and (out / "metrics.json").is_file()


def test_a_finished_run_of_a_pipeline_that_cannot_resume_says_so(tmp_path, data_root, mirror):
    out = tmp_path / "gat"
    run("gat-cora", overrides=FAST, out=out, data_root=data_root, data_mirror=mirror, quiet=True)
    with pytest.raises(GraphseqError, match="already holds a run, and gat-cora cannot resume one; choose another"):
        run("gat-cora", overrides=FAST, out=out, data_root=data_root, data_mirror=mirror, quiet=True)


def test_a_run_that_fails_before_storing_anything_leaves_no_folder(tmp_path, data_root):
    out = tmp_path / "runs" / "failed"
    with pytest.raises(GraphseqError, match="text_file not found"):
        run("charlm-lstm", overrides={**CHARLM, "data.text_file": str(tmp_path / "missing.txt")},
            out=out, data_root=data_root, quiet=True)
    assert not out.exists()


@pytest.mark.parametrize("overrides,message", [
    ({"sample.prime": "ROMEO\u20ac"}, r"sample.prime 'ROMEO\u20ac': 1 symbol\(s\) not in the vocabulary: '\u20ac'"),
    ({"data.text_file": "{tmp}/latin1.txt"}, r"latin1.txt is not UTF-8 text: invalid continuation byte at byte 3"),
    # One symbol is certain after itself: a loss of 0 from learning nothing.
    ({"data.text_file": "{tmp}/same.txt"}, r"same.txt holds 1 distinct character\(s\); a character model needs"),
    ({"data.text_file": "{tmp}"}, r"text_file .* is a folder, not a text file"),
])
def test_a_run_that_would_fail_after_its_training_is_refused_before_it(tmp_path, data_root, mirror, overrides,
                                                                       message):
    (tmp_path / "latin1.txt").write_bytes("caf\u00e9 au lait".encode("latin-1"))
    (tmp_path / "same.txt").write_text("a" * 5000)
    overrides = {k: v.replace("{tmp}", str(tmp_path)) for k, v in overrides.items()}
    with pytest.raises(GraphseqError, match=message):
        run("charlm-lstm", overrides={**CHARLM, **overrides}, out=tmp_path / "run", data_root=data_root,
            data_mirror=mirror, quiet=True)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("pipeline,overrides,message", [
    ("charlm-onlstm", {"model.hidden_size": 20}, r"chunk_size = 8 must divide hidden_size = 20"),
    ("polarity-bilstm", {"data.test_folds": [True]}, r"data.test_folds = \[True\] is not allowed"),
    ("polarity-bilstm", {"data.test_folds": [0, 0]}, r"data.test_folds = \[0, 0\] is not allowed: it must be "
                                                     r"a list of distinct fold numbers"),
    ("spv-polarity", {"spv.run_folds": [False]}, r"spv.run_folds = \[False\] is not allowed"),
])
def test_settings_that_could_not_run_are_refused_before_the_run_folder_is_made(tmp_path, data_root, mirror,
                                                                              pipeline, overrides, message):
    with pytest.raises(GraphseqError, match=message):
        run(pipeline, overrides=overrides, out=tmp_path / "run", data_root=data_root, data_mirror=mirror,
            quiet=True)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("pipeline,overrides,message", [
    ("charlm-lstm", {"model.chunk_size": 4},
     "model.chunk_size has no use when model.cell = 'lstm': it applies only with 'onlstm'"),
    ("caption-shapes-init", {"model.heads": 2},
     "model.heads has no use when model.decoder = 'init': it applies only with 'attention'"),
    ("gat-cora", {"train.batch_size": 64},
     "train.batch_size has no use when train.loader = 'full': it applies only with 'neighbor'"),
])
def test_a_setting_the_run_would_ignore_is_refused(tmp_path, data_root, mirror, capsys, pipeline, overrides,
                                                   message):
    with pytest.raises(GraphseqError, match=message):
        run(pipeline, overrides=overrides, out=tmp_path / "run", data_root=data_root, data_mirror=mirror,
            quiet=True)
    assert not (tmp_path / "run").exists()
    key, value = next(iter(overrides.items()))
    assert main(["run", pipeline, "--set", f"{key}={value}", "--out", str(tmp_path / "run")]) == 2
    assert message in capsys.readouterr().err


def test_a_setting_is_refused_where_any_of_its_conditions_fails(tmp_path, data_root, mirror):
    # inference_batch_size needs the neighbour loader and a batched inference.
    with pytest.raises(GraphseqError, match="train.inference_batch_size has no use when train.inference = 'full': "
                                            "it applies only with 'layerwise' or 'sampled'"):
        run("gat-cora-neighbor", overrides={"train.inference": "full", "train.inference_batch_size": 64},
            out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True)
    assert not (tmp_path / "run").exists()


def test_switching_the_mode_by_set_lets_the_pipeline_files_settings_for_the_other_mode_be(
        tmp_path, data_root, mirror):
    # The file sets the neighbour loader's keys; a user who switches to the
    # full graph cannot take them out, so they are not held against the run.
    metrics = run("gat-cora-neighbor", overrides={"train.loader": "full", "train.max_epochs": 2},
                  out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True)
    assert metrics["runs"][0]["epochs"] == 2
    recorded = read_config(tmp_path / "run" / "config.toml")["train"]
    assert recorded["loader"] == "full" and "num_neighbors" not in recorded and "batch_size" not in recorded
    # config.toml records what ran, so it runs again as a pipeline file.
    again = run(tmp_path / "run" / "config.toml", out=tmp_path / "again", data_root=data_root, data_mirror=mirror,
                quiet=True)
    figures = lambda summary: {k: v for k, v in summary["runs"][0].items() if k != "epoch_seconds"}  # noqa: E731
    assert figures(again) == figures(metrics)


def test_a_setting_given_by_set_is_refused_where_unused_even_at_the_files_value(tmp_path, data_root, mirror):
    # The file says batch_size = 64 too; typed with --set, it is the user's, and would be dropped.
    with pytest.raises(GraphseqError, match="train.batch_size has no use when train.loader = 'full'"):
        run("gat-cora-neighbor", overrides={"train.loader": "full", "train.batch_size": 64},
            out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True)
    assert not (tmp_path / "run").exists()
    assert apply_overrides(read_config(resolve_pipeline("gat-cora")), ["train.lr=0.01", "model.heads=4"]) == {
        ("train", "lr"), ("model", "heads")}


def test_checked_config_refuses_a_setting_the_run_would_ignore_and_lets_the_files_own_be():
    # What bert-polarity checks its pretrain_set with, before its run writes.
    with pytest.raises(GraphseqError, match="charlm-lstm: model.chunk_size has no use when model.cell = 'lstm'"):
        checked_config("charlm-lstm", ["model.chunk_size=4"])
    train = checked_config("gat-cora-neighbor", ["train.loader=full"])["train"]
    assert train["loader"] == "full" and "batch_size" not in train and "num_neighbors" not in train


def test_every_pipeline_file_passes_its_checks_with_every_oracle():
    for name, path in available_pipelines().items():
        for oracle in ("simulated", "human", "file"):
            config = read_config(path)
            written = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
            try:
                _apply_options(config, {"oracle": oracle}, name)
            except GraphseqError:  # --oracle has no use in this pipeline
                pass
            check_domains(config, name)
            check_applies(config, name, written)


def test_a_run_started_with_a_setting_found_unused_later_still_resumes(charlm_run, tmp_path, data_root, mirror):
    out = tmp_path / "run"
    shutil.copytree(charlm_run, out)
    config = (out / "config.toml").read_text().partition("\n")[2]  # written before config.toml was stamped
    (out / "config.toml").write_text(config.replace('cell = "lstm"\n', 'cell = "lstm"\nchunk_size = 8\n'))
    assert "chunk_size = 8" in (out / "config.toml").read_text()
    summary = run("charlm-lstm", out=out, resume=True, data_root=data_root, data_mirror=mirror, quiet=True)
    assert summary["runs"][0]["steps"] == 2


def test_a_run_refused_after_its_folder_was_made_takes_the_new_folders_above_it(tmp_path, data_root, mirror):
    out = tmp_path / "new" / "deeper" / "run"
    with pytest.raises(GraphseqError, match="needs a budget"):  # found by the training stage, not before
        run("charlm-lstm", overrides={**CHARLM, "train.steps": 0}, out=out, data_root=data_root,
            data_mirror=mirror, quiet=True)
    assert list(tmp_path.iterdir()) == []


def _provide_count(check, *, count, **_):
    check.facts["count"] = count


def _demand_at_most_count(check, *, want, **_):
    if want > check.facts["count"]:
        raise GraphseqError(f"want = {want} is more than count = {check.facts['count']}")


@stage("test_writes_first", checks={"count": at_least(0)}, precheck=_provide_count)
def writes_first(ctx, *, count: int = 1):
    (ctx.out / "stored.txt").write_text(f"{count} stored")


@stage("test_checked_later", checks={"want": at_least(0)}, precheck=_demand_at_most_count)
def checked_later(ctx, *, want: int = 1):
    ctx.metrics["want"] = want


def test_a_later_stage_is_prechecked_before_an_earlier_one_writes(tmp_path):
    pipeline = tmp_path / "two.toml"
    pipeline.write_text('[first]\nstage = "test_writes_first"\ncount = 2\n\n[second]\nstage = "test_checked_later"\n')
    with pytest.raises(GraphseqError, match="want = 3 is more than count = 2"):
        run(pipeline, overrides={"second.want": 3}, out=tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()
    assert run(pipeline, out=tmp_path / "run", quiet=True)["runs"][0]["want"] == 1  # prechecked at its default
    assert (tmp_path / "run" / "stored.txt").read_text() == "2 stored"


def test_a_mistyped_override_shows_the_type_by_the_pipelines_own_value_else_the_default(tmp_path):
    pipeline = tmp_path / "two.toml"
    pipeline.write_text('[first]\nstage = "test_writes_first"\ncount = 2\n\n[second]\nstage = "test_checked_later"\n')
    with pytest.raises(GraphseqError, match=r"first.count must be int \(like 2, its value in the pipeline\), "
                                            r"got 'many'"):
        run(pipeline, overrides=["first.count=many"], out=tmp_path / "run", quiet=True)
    with pytest.raises(GraphseqError, match=r"second.want must be int \(like its default 1\), got 'lots'"):
        run(pipeline, overrides=["second.want=lots"], out=tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()


@stage("test_noisy_library")
def noisy_library(ctx, *, message: str = "Processing..."):
    """Prints to stderr as PyG's dataset processing does."""
    print(message, file=sys.stderr)


def test_quiet_sends_what_libraries_print_to_the_log(tmp_path, capfd):
    pipeline = tmp_path / "noisy.toml"
    pipeline.write_text('[noise]\nstage = "test_noisy_library"\n')
    run(pipeline, out=tmp_path / "run", quiet=True)
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""
    log = (tmp_path / "run" / "log.txt").read_text()
    assert "Processing..." in log


def test_a_quiet_run_whose_log_handler_writes_to_stderr_does_not_loop(tmp_path):
    # A quiet run sends stderr to its log; a handler of that log that writes to
    # stderr (tqdm's logging redirect does) must not feed the log its own lines.
    import contextlib
    import logging

    from graphseq.runner.run import _LogStream

    class ToStderr(logging.Handler):
        def emit(self, record):
            sys.stderr.write(self.format(record) + "\n")

    log = logging.getLogger("graphseq.test.quiet-loop")
    log.handlers.clear()
    log.propagate = False
    log.setLevel(logging.INFO)
    log.addHandler(logging.FileHandler(tmp_path / "log.txt"))
    log.addHandler(ToStderr())
    with contextlib.redirect_stderr(_LogStream(log)):
        print("Processing...", file=sys.stderr)
    for handler in log.handlers:
        handler.close()
    assert (tmp_path / "log.txt").read_text().splitlines() == ["Processing..."]


@stage("test_interrupted", resumes="state.txt")
def interrupted(ctx, *, stored: bool = True):
    """Stores its state (or not), then the user presses Ctrl-C."""
    if stored:
        (ctx.out / "state.txt").write_text("step 1")
    raise KeyboardInterrupt


def test_an_interrupted_run_logs_how_to_continue_it_when_there_is_something_to_continue(tmp_path):
    pipeline = tmp_path / "ctrl c.toml"
    pipeline.write_text('[work]\nstage = "test_interrupted"\n')
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run(pipeline, out=out, quiet=True)
    # The run's own config.toml, not the file: the file need not hold what --set gave.
    assert f"interrupted; continue with: graphseq run {out / 'config.toml'} --resume --out {out}" in \
        (out / "log.txt").read_text()
    with pytest.raises(KeyboardInterrupt):  # nothing stored: no run to continue, and no folder left
        run(pipeline, out=tmp_path / "empty", overrides={"work.stored": False}, quiet=True)
    assert not (tmp_path / "empty").exists()


def test_the_command_to_continue_an_interrupted_run_gives_its_data_places_again(tmp_path):
    # Offline, a run continued without them would look for its datasets in the default places and find none.
    pipeline = tmp_path / "ctrl c.toml"
    pipeline.write_text('[work]\nstage = "test_interrupted"\n')
    out, root, mirror = tmp_path / "run", tmp_path / "my data", tmp_path / "mirror"
    with pytest.raises(KeyboardInterrupt):
        run(pipeline, out=out, data_root=root, data_mirror=mirror, quiet=True)
    assert (f"interrupted; continue with: graphseq run {out / 'config.toml'} --resume --out {out} "
            f"--data-root '{root}' --data-mirror {mirror}") in (out / "log.txt").read_text()
    assert resume_command("gat-cora", out) == f"graphseq run gat-cora --resume --out {out}"  # defaults: as they are


INTERRUPTED = []  # the seeds in which the user presses Ctrl-C


@stage("test_interrupted_in_a_seed", resumes="state.txt")
def interrupted_in_a_seed(ctx):
    """Writes a file of its own (a tokenizer), then stores its state, unless Ctrl-C comes first."""
    (ctx.out / "tokens.txt").write_text("made before the state")
    if ctx.seed in INTERRUPTED:
        raise KeyboardInterrupt
    ctx.metrics["resumed"] = int(ctx.resume)
    (ctx.out / "state.txt").write_text("done")


def test_runs_interrupted_before_a_later_seed_stored_its_state_resume_with_that_seed_afresh(tmp_path):
    pipeline = tmp_path / "seeds.toml"
    pipeline.write_text('[work]\nstage = "test_interrupted_in_a_seed"\n')
    out = tmp_path / "run"
    INTERRUPTED[:] = [6]
    try:
        with pytest.raises(KeyboardInterrupt):
            run(pipeline, seed=5, runs=3, out=out, quiet=True)
    finally:
        INTERRUPTED.clear()
    assert (out / "seed-6" / "tokens.txt").is_file() and not (out / "seed-6" / "state.txt").exists()
    assert f"continue with: graphseq run {out / 'config.toml'} --resume --out {out}" in (out / "log.txt").read_text()
    summary = run(out / "config.toml", out=out, resume=True, quiet=True)
    assert [(r["seed"], r["resumed"]) for r in summary["runs"]] == [(5, 1), (6, 0), (7, 0)]


@stage("test_refused_on_resume", resumes="state.txt")
def refused_on_resume(ctx):
    """Stores its state; a resumed run finds, inside the stage, that it cannot go on."""
    if ctx.resume:
        raise GraphseqError("this state cannot continue")
    (ctx.out / "state.txt").write_text("step 1")


def test_a_resume_refused_inside_a_stage_leaves_the_runners_files_as_they_were_times_too(tmp_path):
    pipeline = tmp_path / "late.toml"
    pipeline.write_text('[work]\nstage = "test_refused_on_resume"\n')
    out = tmp_path / "run"
    run(pipeline, out=out, quiet=True)
    past = 1_000_000_000 * 10**9  # 2001: any change of time shows
    for name in ("config.toml", "log.txt"):
        os.utime(out / name, ns=(past, past))
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()}
    with pytest.raises(GraphseqError, match="this state cannot continue"):
        run(pipeline, out=out, resume=True, quiet=True)
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()} == before


def test_a_resume_removes_the_temporary_files_of_a_run_killed_while_writing(charlm_run, tmp_path, data_root,
                                                                             mirror):
    out = tmp_path / "run"
    shutil.copytree(charlm_run, out)
    torn = out / ".checkpoint.pt.k2x9_qzm.tmp"  # what SIGKILL during torch.save leaves
    torn.write_bytes(b"\x00" * 100)
    mine = out / "notes.tmp"  # not one of ours
    mine.write_text("kept")
    run("charlm-lstm", out=out, resume=True, data_root=data_root, data_mirror=mirror, quiet=True)
    assert not torn.exists() and mine.read_text() == "kept"


def _killed_before_storing(tmp_path):
    """A run of the tiny resumable pipeline killed before its stage stored
    anything: only config.toml and log.txt in its folder."""
    pipeline = tmp_path / "late.toml"
    pipeline.write_text('[work]\nstage = "test_refused_on_resume"\n')
    out = tmp_path / "run"
    run(pipeline, out=out, quiet=True)
    for name in ("state.txt", "metrics.json"):
        (out / name).unlink()
    return pipeline, out


def _entries(folder, folder_times=True):
    """Every entry under ``folder``: its kind, contents and time (a folder's
    changes when a file in it comes and goes)."""
    return {p: (p.is_dir(), None if p.is_dir() else p.read_bytes(),
                p.stat().st_mtime_ns if folder_times or not p.is_dir() else None)
            for p in [folder, *folder.rglob("*")]}


@pytest.mark.parametrize("name", ["state.txt", "config.toml", "log.txt", "metrics.json"])
def test_a_folder_where_the_run_writes_a_file_is_refused_before_anything_is_written(tmp_path, capsys, name):
    """os.replace cannot put a file over a folder: found at the first
    checkpoint, the run would fail after its training (and a resume would
    call the folder missing)."""
    pipeline, out = _killed_before_storing(tmp_path)
    (out / name).unlink(missing_ok=True)
    (out / name).mkdir()
    before = _entries(out)
    for resume in ([], ["--resume"]):
        assert main(["run", str(pipeline), "--out", str(out), "--quiet", *resume]) == 2
        err = capsys.readouterr().err
        assert err == (f"graphseq: error: {'--resume: ' if resume else ''}{out / name} is a folder, not a file; "
                       f"move it away\n")
        assert _entries(out) == before


def test_a_file_where_a_seed_folder_goes_is_refused(tmp_path):
    pipeline, out = _killed_before_storing(tmp_path)
    (out / "seed-1").write_text("mine")
    with pytest.raises(GraphseqError, match=f"^{out / 'seed-1'} is a file, not a folder; move it away$"):
        run(pipeline, out=out, runs=2, quiet=True)
    assert (out / "seed-1").read_text() == "mine" and not (out / "seed-0").exists()


@stage("test_fails_after_a_folder")
def fails_after_a_folder(ctx):
    """Makes an empty folder of its own, then fails before storing a file."""
    (ctx.out / "scratch").mkdir()
    raise GraphseqError("this stage failed")


def test_a_failed_run_removes_the_folders_it_made_and_keeps_the_empty_ones_it_found(tmp_path):
    pipeline = tmp_path / "fails.toml"
    pipeline.write_text('[work]\nstage = "test_fails_after_a_folder"\n')
    out = tmp_path / "run"
    (out / "mine" / "inner").mkdir(parents=True)  # a person's empty folders
    (out / "empty").mkdir()
    (out / "config.toml").write_text('pipeline = "fails"\n')  # a run killed before storing anything
    (out / "log.txt").write_text("started\n")
    before = _entries(out, folder_times=False)
    with pytest.raises(GraphseqError, match="this stage failed"):
        run(pipeline, out=out, quiet=True)
    assert _entries(out, folder_times=False) == before  # scratch/, which the run made, went; the rest is as it was


# What each section needs from the sections before it (its data, its model) is checked before a run writes: a stage
# given another family's product crashed with a traceback, some after earlier stages had stored files.
CHARS = 'stage = "char_corpus"\ntext_file = "{text}"\n'
WALKS = [
    (f'[data]\n{CHARS}[model]\nstage = "char_lm"\nhidden_size = 8\n[train]\nstage = "train_nodes"\nmax_epochs = 1\n',
     "[train] (train_nodes) needs a graph dataset, but the latest data comes from [data] (char_corpus: a text "
     "corpus)"),
    ('[data]\nstage = "planetoid"\n[model]\nstage = "char_lm"\nhidden_size = 8\n[train]\nstage = "tbptt"\n'
     'steps = 2\n', "[model] (char_lm) needs a text corpus, but the latest data comes from [data] (planetoid: a "
     "graph dataset)"),
    ('[data]\nstage = "planetoid"\n[model]\nstage = "fewshot_gnn"\n',
     "[model] (fewshot_gnn) needs a few-shot dataset, but the latest data comes from [data] (planetoid: a graph "
     "dataset)"),
    ('[data]\nstage = "planetoid"\n[model]\nstage = "gat"\n[train]\nstage = "train_episodes"\nsteps = 2\n',
     "[train] (train_episodes) needs a few-shot dataset, but the latest data comes from [data] (planetoid: a "
     "graph dataset)"),
    ('[data]\nstage = "planetoid"\n[model]\nstage = "gat"\n[train]\nstage = "train_nodes"\nmax_epochs = 1\n'
     '[sample]\nstage = "char_sample"\nlength = 10\n',
     "[sample] (char_sample) needs a text corpus, but the latest data comes from [data] (planetoid: a graph "
     "dataset)"),
    (f'[cora]\nstage = "planetoid"\n[text]\n{CHARS}[gat]\nstage = "gat"\n[train_gat]\nstage = "train_nodes"\n',
     "[gat] (gat) needs a graph dataset or a dataset of graphs, but the latest data comes from [text] "
     "(char_corpus: a text corpus)"),
    # The training stored its checkpoint, then [plot] found no curves: the folder could neither rerun nor resume.
    (f'[data]\n{CHARS}[model]\nstage = "char_lm"\nhidden_size = 8\n[train]\nstage = "tbptt"\nsteps = 2\n'
     'batch_size = 2\nwindow = 8\neval_chars = 64\n[plot]\nstage = "active_curves"\n',
     '[plot] (active_curves) needs learning curves; no section before it makes one: add a section before it with '
     'stage = "active_learning"'),
    ('[net]\nstage = "gat"\n[loader]\nstage = "planetoid"\n[fit]\nstage = "train_nodes"\nmax_epochs = 1\n',
     "[net] (gat) needs a graph dataset or a dataset of graphs; no section before it loads one: move a data section "
     "([loader]) before it"),
    ('[loader]\nstage = "planetoid"\n[fit]\nstage = "train_nodes"\nmax_epochs = 1\n[net]\nstage = "gat"\n',
     "[fit] (train_nodes) needs a graph network; no section before it makes one: move a model section ([net]) before "
     "it"),
    ('[data]\nstage = "planetoid"\n[train]\nstage = "train_nodes"\nmax_epochs = 1\n',
     '[train] (train_nodes) needs a graph network; no section before it makes one: add a section before it with '
     'stage = "gat" or stage = "inductive_gat"'),
]


@pytest.mark.parametrize("text,message", WALKS)
def test_a_table_given_what_its_stage_cannot_use_is_refused_before_anything_is_written(tmp_path, capsys, text,
                                                                                        message):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("ROMEO: But soft, what light through yonder window breaks?\n" * 80, encoding="utf-8")
    path = tmp_path / "mine.toml"
    path.write_text(text.replace("{text}", corpus.as_posix()), encoding="utf-8")
    out = tmp_path / "run"
    assert main(["run", str(path), "--quiet", "--threads", "1", "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"graphseq: error: {message}\n"
    assert not out.exists()


@pytest.mark.parametrize("name", sorted(available_pipelines()))
def test_every_shipped_pipeline_gives_each_table_what_it_needs(name):
    from graphseq.stages import check_order
    config = read_config(resolve_pipeline(name))
    check_order([(table, section.get("stage", table)) for table, section in config.items()
                 if isinstance(section, dict)])


def test_a_missing_product_found_by_a_stage_names_its_table(tmp_path):
    import torch
    from graphseq.stages import Context
    ctx = Context("mine", tmp_path, torch.device("cpu"), 0, tmp_path, None, section="net")
    with pytest.raises(GraphseqError, match=re.escape("[net] (gat) needs 'num_features', which no section before it "
                                                      "made; check the order of the pipeline's sections")):
        ctx.require("num_features", "gat")


def test_a_run_says_first_what_each_section_will_do_and_for_how_long():
    from graphseq.runner.run import outline
    config = read_config(resolve_pipeline("fewshot-omniglot-5w1s"))
    apply_overrides(config, ["train.steps=21500"])
    assert outline(config) == ("[data] omniglot; [model] fewshot_gnn; [train] train_episodes, 21,500 steps; "
                               "[test] test_episodes, 30,000 episodes")
