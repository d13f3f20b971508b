"""The command line: every mistake in what a user asked for ends with exit
code 2 and a message that names it, never a traceback."""
import os
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


# Each bad command of issue 9, as typed, with what its one-line error names.
# None of them gets as far as loading data or writing a file.
BAD_COMMANDS = [
    (["run", "gat-cora", "--set", "model.heads=0"], "model.heads = 0 is not allowed: it must be a number >= 1"),
    (["run", "gat-cora", "--set", "model.heads=-1"], "model.heads = -1"),
    (["run", "gat-cora", "--set", "train.lr=-1"], "train.lr = -1.0 is not allowed: it must be a number > 0"),
    (["run", "gat-cora", "--set", "train.lr=nan"], "train.lr = nan is not allowed: it must be a finite number"),
    (["run", "gat-cora", "--set", "train.lr=inf"], "train.lr = inf"),
    (["run", "gat-cora", "--set", "train.max_epochs=0"], "train.max_epochs = 0"),
    (["run", "gat-cora", "--set", "model.dropout=2"], "model.dropout = 2.0 is not allowed: it must be a number from 0 to 1"),
    (["run", "gat-cora", "--set", "evaluate.mask=x"], "evaluate.mask = 'x' is not allowed: it must be one of train_mask"),
    (["run", "gat-cora", "--set", "data.name=Coraa"], "data.name = 'Coraa'"),
    (["run", "active-cora", "--set", "active.compare=[]"], "active.compare = []"),
    (["run", "active-cora", "--set", "active.strategy=guess"], "active.strategy = 'guess'"),
    (["run", "gat-cora", "--seed", str(2**64)], "--seed must be a whole number from 0 to 4294967295"),
    (["run", "gat-cora", "--seed", "-1"], "--seed must be a whole number"),
    (["run", "gat-cora", "--seed", "x"], "--seed: expected a whole number, got 'x'"),
    (["run", "gat-cora", "--seed", str(2**32 - 1), "--runs", "2"], "the last seed, 4294967296, is beyond"),
    (["run", "gat-cora", "--runs", "0"], "--runs must be a whole number of at least 1"),
    (["run", "gat-cora", "--threads", "0"], "--threads must be at least 1"),
    (["run", "gat-cora", "--threads", "100000"], "--threads 100000: this machine has "),
    (["run", "gat-cora", "--device", "mps"], "--device 'mps' is not supported; use auto, cpu, cuda or cuda:N"),
    (["run", "gat-cora", "--device", "meta"], "--device 'meta' is not supported"),
    (["run", "gat-cora", "--device", "cuda:\u00b2"], "--device 'cuda:\u00b2' is not supported"),  # isdigit, not int
    (["run", "gat-cora", "--oracle", "human"], "--oracle has no use in pipeline gat-cora"),
    (["run", "gat-cora", "--labels", "answers.csv"], "--labels has no use in pipeline gat-cora"),
    (["run", "charlm-lstm", "--oracle", "simulated"], "--oracle has no use in pipeline charlm-lstm"),
    (["run", "active-cora", "--labels", "{tmp}/missing.csv"], "active.labels = '{tmp}/missing.csv' is not allowed: "
                                                             "it must be empty, or the path of an existing file"),
    (["run", "gat-cora", "--resume", "--out", "{tmp}"], "--resume has no use in pipeline gat-cora"),
    (["run", "charlm-lstm", "--resume", "--out", "{tmp}"], "holds no earlier run"),
    (["run", "gat-cora", "--out", "{tmp}/file"], "is a file, not a folder"),
    (["run", "gat-cora", "--out", "{tmp}/file/run"], "is a file, so no folder can be made under it"),
    (["sample", "{tmp}", "--temperature", "nan"], "--temperature must be a finite number >= 0, got nan"),
    (["sample", "{tmp}", "--temperature", "-1"], "--temperature must be a finite number >= 0"),
    (["sample", "{tmp}", "--length", "-5"], "--length must be at least 0"),
    (["caption", "{tmp}", "{tmp}/file", "--temperature", "inf"], "--temperature must be a finite number >= 0, got inf"),
    (["caption", "{tmp}", "{tmp}/file", "--temperature", "nan"], "--temperature must be a finite number >= 0, got nan"),
    (["caption", "{tmp}", "{tmp}/file", "--seed", str(2**64)], "--seed must be a whole number from 0 to 4294967295"),
    (["caption", "{tmp}", "{tmp}/file", "--seed", "-1"], "--seed must be a whole number from 0 to 4294967295"),
    (["caption", "{tmp}", "{tmp}/file", "--seed", "x"], "--seed: expected a whole number, got 'x'"),
    (["sample", "{tmp}", "--cells", "3,-1", "--html", "x.html"], "--cells takes comma-separated whole numbers"),
    (["sample", "{tmp}", "--html", "{tmp}"], "cannot write --html {tmp}: Is a directory"),
    (["sample", "{tmp}", "--html", "{tmp}/file"], "--html {tmp}/file: will not overwrite a file that is not .html"),
    (["sample", "{tmp}", "--html", "{tmp}/file/units.html"], "cannot write --html {tmp}/file/units.html: "
                                                             "Not a directory"),
    (["sample", "{tmp}", "--html", "/proc/units.html"], "cannot write --html /proc/units.html: "),
    (["caption", "{tmp}", "{tmp}/file", "--attention", "{tmp}/file"], "--attention {tmp}/file: will not overwrite "
                                                                      "a file that is not .png"),
    (["sample", "{tmp}", "--prime", "RO\udcffMEO"], "--prime is not valid UTF-8: byte 0xff at character 2"),
    (["fill-mask", "{tmp}", "\udcff\udcfe [MASK]"], "the text is not valid UTF-8: byte 0xff at character 0"),
]


@pytest.mark.parametrize("argv, message", BAD_COMMANDS, ids=[" ".join(a[1:4]) for a, _ in BAD_COMMANDS])
def test_bad_command_is_one_line_exit_2_and_writes_nothing(argv, message, tmp_path, capsys):
    (tmp_path / "file").write_text("keep me")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    err = fail(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert message.replace("{tmp}", str(tmp_path)) in err
    assert err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert (tmp_path / "file").read_text() == "keep me"


def test_out_on_a_read_only_file_system_is_refused(capsys, tmp_path, monkeypatch):
    class ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr("os.statvfs", lambda path: ReadOnly())
    err = fail(capsys, "run", "gat-cora", "--out", str(tmp_path / "run"))
    assert f"cannot write in {tmp_path} (a read-only file system)" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into any folder")
def test_out_in_a_folder_without_write_permission_is_refused(capsys, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    assert "(no permission)" in fail(capsys, "run", "gat-cora", "--out", str(locked / "run"))


def test_top_level_help_says_what_graphseq_is_in_whole_sentences(capsys):
    assert main(["--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "run named pipelines, label data at the terminal, sample models." in help_text


def test_list_shows_each_pipeline_with_its_description(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "gat-cora" in out and "Veličković" in out


def test_list_names_a_broken_pipeline_file_and_still_lists_the_rest(capsys, tmp_path, monkeypatch):
    (tmp_path / "aaa-broken.toml").write_text("[train]\nlr = \n")
    monkeypatch.setenv("GRAPHSEQ_PIPELINES", str(tmp_path))
    assert main(["list"]) == 2
    captured = capsys.readouterr()
    assert "aaa-broken.toml" in captured.err and "line 2" in captured.err
    assert "gat-cora" in captured.out and "aaa-broken" not in captured.out


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
    assert "no CUDA device" in fail(capsys, "run", "gat-cora", "--device", "cuda:1")


def test_resume_needs_out(capsys):
    assert "--resume needs --out" in fail(capsys, "run", "gat-cora", "--resume")


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


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("argv", [["list"], ["--help"], ["labels", "{tmp}"]])
def test_output_to_a_full_disk_is_one_line_exit_2(argv, tmp_path):
    from graphseq.active.store import STORE_NAME, LabelStore

    with LabelStore(tmp_path / STORE_NAME) as store:
        store.add("random", 1, "Theory", "initial")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "graphseq.cli"] + argv, stdout=full,
                                stderr=subprocess.PIPE, text=True)
    assert result.stderr == "graphseq: error: cannot write the output: No space left on device\n"
    assert result.returncode == 2


def test_a_reader_that_stops_early_ends_the_output_quietly():
    process = subprocess.Popen([sys.executable, "-m", "graphseq.cli", "list"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.close()  # long before the command, still importing, writes a line
    assert process.stderr.read() == b""
    assert process.wait() == 141  # what a shell reports for a tool that SIGPIPE ended


def test_importing_the_layers_loads_no_runner_stage_prompt_or_database():
    code = ("import sys, graphseq.nn; "
            "print(sorted(m for m in sys.modules if m.startswith(('graphseq.', 'sqlite3', 'networkx'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for module in ("graphseq.pipeline", "graphseq.stages", "graphseq.active", "sqlite3", "networkx"):
        assert f"'{module}" not in loaded, loaded


def test_a_place_the_run_cannot_write_is_named_in_one_line(monkeypatch, capsys, tmp_path):
    """A read-only data root that lacks the processed files, a full disk."""
    import errno

    import graphseq.pipeline

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "root" / "Cora"))

    monkeypatch.setattr(graphseq.pipeline, "run", refuse)
    assert main(["run", "gat-cora", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"graphseq: error: cannot write {tmp_path / 'root' / 'Cora'}: Permission denied\n"


def test_names_outside_ascii_are_escaped_where_the_output_is_ascii():
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    result = subprocess.run([sys.executable, "-m", "graphseq", "list"], capture_output=True, text=True, env=env)
    assert result.returncode == 0 and "Veli\\u010dkovi\\u0107" in result.stdout, result.stderr


def test_threads_are_set_before_torch_loads():
    code = ("import sys; from graphseq import cli; "
            "sys.argv = ['graphseq', 'run', 'no-such-pipeline', '--threads', '1']; "
            "cli.main(sys.argv[1:]); import os, torch; "
            "print(os.environ['OMP_NUM_THREADS'], os.environ['OMP_WAIT_POLICY'], torch.get_num_threads())")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.stdout.split() == ["1", "PASSIVE", "1"], result.stderr
