"""Pipeline files a user writes: a section's name that TOML must quote survives
config.toml (which is itself a pipeline file, read again by a repeat or a
resume), and a name the runner cannot use, or a stage that is not a name, is
refused before anything is written."""
from pathlib import Path

import pytest
import tomli_w

from graphseq import GraphseqError
from graphseq.cli import main
from graphseq.runner.config import read_config

CHARLM = """description = "charlm with sections of the user's naming"
[data]
stage = "char_corpus"
[{model}]
stage = "char_lm"
hidden_size = 8
[train]
stage = "tbptt"
steps = 2
batch_size = 4
eval_chars = 200
"""


@pytest.mark.parametrize("name", ["modèle", "my model", "mod-el_2"])
def test_a_table_name_toml_must_quote_is_written_back_so_that_it_reads_the_same(tmp_path, name):
    path = tmp_path / "mine.toml"
    path.write_text(CHARLM.format(model=f'"{name}"'), encoding="utf-8")
    config = read_config(path)
    again = tmp_path / "again.toml"
    again.write_text(tomli_w.dumps(config), encoding="utf-8")
    assert read_config(again) == config  # '[modèle]' unquoted was malformed TOML


@pytest.mark.slow
def test_a_run_with_a_quoted_table_name_repeats_from_its_config_toml(tmp_path, capsys, mirror, data_root):
    path = tmp_path / "mine.toml"
    path.write_text(CHARLM.format(model='"modèle"'), encoding="utf-8")
    out = tmp_path / "run"
    places = ["--quiet", "--threads", "1", "--data-root", str(data_root), "--data-mirror", str(mirror)]
    assert main(["run", str(path), *places, "--out", str(out)]) == 0, capsys.readouterr().err
    assert main(["run", str(out / "config.toml"), *places, "--resume", "--out", str(out),
                 "--set", "train.steps=3"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("section, message", [
    ('"model.v2"', "[\"model.v2\"]: a section's name must be non-empty and hold no '.'"),
    ('""', "[\"\"]: a section's name must be non-empty and hold no '.'"),
    ("seed", "[seed]: seed is a setting of the run (description, pipeline, graphseq, seed, runs), not a stage's "
             "section; rename the section"),
    ("pipeline", "[pipeline]: pipeline is a setting of the run"),
])
def test_a_section_name_the_runner_cannot_use_is_refused_before_writing(tmp_path, capsys, section, message):
    path = tmp_path / "mine.toml"
    path.write_text(CHARLM.format(model=section), encoding="utf-8")
    out = tmp_path / "run"
    assert main(["run", str(path), "--quiet", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"graphseq: error: {path}: {message}") and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize("stage", ['["planetoid"]', '{ name = "planetoid" }'])
def test_a_stage_that_is_not_a_name_is_refused_in_one_line(tmp_path, capsys, stage):
    path = tmp_path / "mine.toml"
    path.write_text(f"[data]\nstage = {stage}\n", encoding="utf-8")
    assert main(["run", str(path), "--quiet", "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.startswith(f"graphseq: error: {path}: data.stage must be a stage's name "
                                              f"(a string), got ")
    assert not (tmp_path / "run").exists()


def test_two_tables_that_continue_from_one_file_are_refused_before_writing(tmp_path, capsys):
    path = tmp_path / "mine.toml"
    path.write_text(CHARLM.format(model="model") + "[more]\nstage = \"tbptt\"\nsteps = 3\n", encoding="utf-8")
    out = tmp_path / "run"
    assert main(["run", str(path), "--quiet", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        "graphseq: error: [more] (tbptt) continues from checkpoint.pt, as [train] (tbptt) does: the two would "
        "overwrite each other's and a resume would read one's for the other; run them as two pipelines\n")
    assert not out.exists()


def test_trainings_told_apart_by_their_names_may_share_a_pipeline(tmp_path):
    from graphseq.runner.config import precheck, resolve_pipeline

    text = Path(resolve_pipeline("fewshot-omniglot-5w1s")).read_text(encoding="utf-8")
    again = '\n[train_again]\nstage = "train_episodes"\nname = "again"\n'
    path = tmp_path / "mine.toml"
    path.write_text(text + again, encoding="utf-8")
    precheck(read_config(path), data_root=tmp_path / "data", data_mirror=tmp_path / "none")  # no refusal
    path.write_text(text + again.replace('name = "again"\n', ""), encoding="utf-8")
    with pytest.raises(GraphseqError, match=r"^\[train_again\] \(train_episodes\) continues from checkpoint.pt, "
                                            r"as \[train\] \(train_episodes\) does: .*give them distinct names"):
        precheck(read_config(path), data_root=tmp_path / "data", data_mirror=tmp_path / "none")
