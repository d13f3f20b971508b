"""The command line: every mistake in what a user asked for ends with exit
code 2 and a message that names it, never a traceback."""
import subprocess
import sys

import pytest

from graphseq.cli import main

PIPELINE = """description = "a tiny pipeline"

[data]
stage = "planetoid"
name = "Cora"
"""


def fail(capsys, *argv):
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_list_shows_each_pipeline_with_its_description(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "gat-cora" in out and "Veličković" in out


def test_unknown_pipeline_lists_the_known_ones(capsys):
    err = fail(capsys, "run", "gat-coar")
    assert "unknown pipeline 'gat-coar'" in err and "gat-cora" in err and "gat-citeseer" in err


def test_unknown_set_key_names_the_key_and_the_known_keys(capsys):
    err = fail(capsys, "run", "gat-cora", "--set", "train.learning_rate=0.1")
    assert "learning_rate" in err and "lr" in err and "weight_decay" in err and "patience" in err


def test_unknown_set_section_names_the_sections(capsys):
    err = fail(capsys, "run", "gat-cora", "--set", "trian.lr=0.1")
    assert "[trian]" in err and "train" in err and "model" in err


def test_mistyped_set_value_is_refused(capsys):
    err = fail(capsys, "run", "gat-cora", "--set", "train.patience=soon")
    assert "train.patience must be int" in err


def test_set_without_section_is_refused(capsys):
    assert "section.key=value" in fail(capsys, "run", "gat-cora", "--set", "lr=0.1")


def test_malformed_toml_names_file_and_line(capsys, tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text(PIPELINE + "[model]\nstage = gat\n")
    err = fail(capsys, "run", str(path))
    assert str(path) in err and "line 7" in err


def test_unknown_key_in_a_pipeline_file_is_named(capsys, tmp_path):
    path = tmp_path / "typo.toml"
    path.write_text(PIPELINE + "nmae = \"x\"\n")
    err = fail(capsys, "run", str(path))
    assert "data.nmae" in err and "name" in err


def test_missing_pipeline_file_is_named(capsys, tmp_path):
    err = fail(capsys, "run", str(tmp_path / "nowhere.toml"))
    assert "pipeline file not found" in err and "nowhere.toml" in err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_a_clear_error(capsys):
    assert "no CUDA device" in fail(capsys, "run", "gat-cora", "--device", "cuda")


def test_resume_needs_out(capsys):
    assert "--resume needs --out" in fail(capsys, "run", "gat-cora", "--resume")


def test_resume_of_an_empty_directory_is_refused(capsys, tmp_path):
    assert "holds no earlier run" in fail(capsys, "run", "gat-cora", "--resume", "--out", str(tmp_path))


def test_missing_dataset_is_named_without_traceback(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("graphseq.data.planetoid.download_url",
                        lambda url, path: (_ for _ in ()).throw(OSError("offline")))
    err = fail(capsys, "run", "gat-pubmed", "--data-root", str(tmp_path / "root"),
               "--data-mirror", str(tmp_path / "empty"), "--out", str(tmp_path / "out"), "--quiet")
    assert "ind.pubmed.allx" in err and "offline" in err


def test_the_installed_command_exits_2_without_traceback():
    result = subprocess.run([sys.executable, "-m", "graphseq.cli", "run", "no-such-pipeline"],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "unknown pipeline" in result.stderr and "Traceback" not in result.stderr
