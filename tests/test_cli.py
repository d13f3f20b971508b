"""The command line: every mistake in what a user asked for ends with exit
code 2 and a message that names it, never a traceback."""
import os
import subprocess
import sys
from pathlib import Path

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
    (["run", "active-cora", "--labels", "{tmp}/missing.csv"], "--labels {tmp}/missing.csv is not allowed: "
                                                             "it must be empty, or the path of an existing file"),
    # The flags the user typed, not the keys they set: "oracle.labels has no use when oracle.oracle = 'human'".
    (["run", "fewshot-omniglot-active", "--labels", "{tmp}/file", "--oracle", "human"],
     "--labels has no use with --oracle human: it applies only with --oracle file"),
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
    (["sample", "{tmp}/run", "--html", "{tmp}/file/units.html"], "cannot write --html {tmp}/file/units.html: "
                                                                 "Not a directory"),
    (["sample", "{tmp}", "--html", "/proc/units.html"], "cannot write --html /proc/units.html: "),
    (["caption", "{tmp}", "{tmp}/file", "--attention", "{tmp}/file"], "--attention {tmp}/file: will not overwrite "
                                                                      "a file that is not .png"),
    (["sample", "{tmp}", "--prime", "RO\udcffMEO"], "--prime is not valid UTF-8: byte 0xff at character 2"),
    # A new file of another kind: a PNG named x.jpg, a page named u.txt.
    (["caption", "{tmp}/run", "{tmp}/file", "--attention", "{tmp}/x.jpg"], "--attention {tmp}/x.jpg: the file name "
                                                                            "must end in .png"),
    (["sample", "{tmp}/run", "--html", "{tmp}/u.txt"], "--html {tmp}/u.txt: the file name must end in .html"),
    # Options that would change nothing are named, not ignored.
    (["sample", "{tmp}", "--text-file", "{tmp}/file"], "--text-file has no effect without --html or --units"),
    (["sample", "{tmp}", "--text-file", "{tmp}/file", "--units", "2", "--prime", "A", "--length", "500"],
     "--prime, --length have no effect with --text-file"),
    (["sample", "{tmp}", "--text-file", "{tmp}/file", "--html", "{tmp}/o/u.html", "--temperature", "1", "--seed", "1"],
     "--temperature, --seed have no effect with --text-file"),
    (["sample", "{tmp}", "--cells", "1,2"], "--cells has no effect without --html"),
    (["sample", "{tmp}", "--cells", "1,2", "--units", "3"], "--cells has no effect without --html"),
    (["caption", "{tmp}", "{tmp}/file", "--seed", "1"], "--seed has no effect without --sample"),
    (["caption", "{tmp}", "{tmp}/file", "--temperature", "1", "--seed", "1"],
     "--temperature, --seed have no effect without --sample"),
    (["caption", "{tmp}", "{tmp}/file", "--sample", "2", "--beam", "3"], "--beam has no effect with --sample"),
    # What a view costs grows with what it draws: refused before the model is read.
    (["caption", "{tmp}", "{tmp}/file", "--sample", "9", "--attention", "{tmp}/a.png"],
     "--attention draws at most 8 captions (the figure grows with each), got --sample 9"),
    (["sample", "{tmp}", "--prime", "ab", "--length", "99999", "--units", "1"],
     "--prime and --length ask for a sample of 100,001 characters; --html and --units read at most 100,000"),
    (["sample", "{tmp}/run", "--length", "100001", "--html", "{tmp}/o/u.html"], "--length asks for a sample of 100,001"),
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


@pytest.mark.slow
def test_the_installed_command_exits_2_without_traceback():
    result = subprocess.run([sys.executable, "-m", "graphseq.cli", "run", "no-such-pipeline"],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "unknown pipeline" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_reader_that_stops_early_ends_the_output_quietly():
    process = subprocess.Popen([sys.executable, "-m", "graphseq.cli", "list"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.close()  # long before the command, still importing, writes a line
    assert process.stderr.read() == b""
    assert process.wait() == 141  # what a shell reports for a tool that SIGPIPE ended


@pytest.mark.slow
def test_importing_the_layers_loads_no_runner_stage_prompt_or_database():
    code = ("import sys, graphseq.nn; "
            "print(sorted(m for m in sys.modules if m.startswith(('graphseq.', 'sqlite3', 'networkx'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for module in ("graphseq.runner", "graphseq.stages", "graphseq.active", "sqlite3", "networkx"):
        assert f"'{module}" not in loaded, loaded


def test_a_place_the_run_cannot_write_is_named_in_one_line(monkeypatch, capsys, tmp_path):
    """A read-only data root that lacks the processed files, a full disk."""
    import errno

    import graphseq.runner

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "root" / "Cora"))

    monkeypatch.setattr(graphseq.runner, "plan", refuse)
    assert main(["run", "gat-cora", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"graphseq: error: cannot write {tmp_path / 'root' / 'Cora'}: Permission denied\n"


@pytest.mark.slow
def test_names_outside_ascii_are_escaped_where_the_output_is_ascii():
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    result = subprocess.run([sys.executable, "-m", "graphseq", "list"], capture_output=True, text=True, env=env)
    assert result.returncode == 0 and "Veli\\u010dkovi\\u0107" in result.stdout, result.stderr


def test_a_closed_standard_output_drops_what_a_command_prints(monkeypatch, capsys):
    # `graphseq list >&-`: Python has no sys.stdout then, and print drops its text; no traceback.
    monkeypatch.setattr(sys, "stdout", None)
    assert main(["list"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_threads_are_set_before_torch_loads():
    code = ("import sys; from graphseq import cli; "
            "sys.argv = ['graphseq', 'run', 'no-such-pipeline', '--threads', '1']; "
            "cli.main(sys.argv[1:]); import os, torch; "
            "print(os.environ['OMP_NUM_THREADS'], os.environ['OMP_WAIT_POLICY'], torch.get_num_threads())")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.stdout.split() == ["1", "PASSIVE", "1"], result.stderr


# --------------------------------------------------------------------------- #
# Using trained models: tiny runs written by hand, read in milliseconds
# --------------------------------------------------------------------------- #

@pytest.fixture
def charlm_run(tmp_path):
    """A run folder holding an untrained character model (8 hidden units)."""
    import torch

    from graphseq.data.text import Vocabulary
    from graphseq.io import save_checkpoint
    from graphseq.models.charlm import CHECKPOINT, CharLM

    vocab = Vocabulary.of_characters("ROMEO:\nab cd")
    torch.manual_seed(0)
    model = CharLM(len(vocab), embedding_dim=4, hidden_size=8)
    run = tmp_path / "run"
    save_checkpoint({"model_config": model.config, "model": model.state_dict(), "vocabulary": vocab.symbols},
                    run / CHECKPOINT)
    (run / "curves.png").write_bytes(b"the run's own figure")
    return run


def _captioner_run(tmp_path, end_first=False):
    """A run folder holding an untrained attention captioner of 32-pixel
    images; ``end_first`` makes it end every caption before its first word."""
    import torch

    from graphseq.data.captions import caption_vocabulary
    from graphseq.io import save_checkpoint
    from graphseq.models.captioner import MODEL_FILE, Captioner

    torch.manual_seed(0)
    model = Captioner(caption_vocabulary([["a", "red", "circle"]]), "attention", channels=(4, 8, 8, 12),
                      image_size=32, embedding_dim=6, hidden_size=8)
    if end_first:
        with torch.no_grad():
            model.decoder.readout.bias[model.end_id] = 100.0
    run = tmp_path / "run"
    save_checkpoint(model.checkpoint(), run / MODEL_FILE)
    (run / "curves.png").write_bytes(b"the run's own figure")
    return run


@pytest.fixture
def picture(tmp_path):
    from PIL import Image

    path = tmp_path / "mine.png"
    Image.new("RGB", (32, 32), (200, 30, 30)).save(path)
    return path


def _contents(folder):
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_caption_attention_never_replaces_the_image_it_reads(tmp_path, picture, capsys):
    run = _captioner_run(tmp_path)
    link = tmp_path / "link.png"
    link.symlink_to(picture)
    hard = tmp_path / "hard.png"
    os.link(picture, hard)
    before = _contents(tmp_path)
    for output in (picture, link, hard, tmp_path / "x" / ".." / "mine.png"):
        err = fail(capsys, "caption", str(run), str(picture), "--attention", str(output))
        assert f"--attention {output} is the same file as the input {picture}, which it would replace" in err
    assert _contents(tmp_path) == before


def test_sample_html_never_replaces_the_text_it_reads(tmp_path, charlm_run, capsys):
    text = tmp_path / "speech.html"
    text.write_text("ROMEO:\nab cd\n")
    err = fail(capsys, "sample", str(charlm_run), "--text-file", str(text), "--html", str(text))
    assert err == (f"graphseq: error: --html {text} is the same file as the input {text}, which it would "
                   f"replace; name another file\n")
    assert text.read_text() == "ROMEO:\nab cd\n"


@pytest.mark.parametrize("name", ["curves.png", "new.png", "sub/new.png"])
def test_caption_attention_never_writes_in_the_run_folder(tmp_path, picture, capsys, name):
    run = _captioner_run(tmp_path)
    before = _contents(run)
    for run_dir in (run, tmp_path / "." / "run"):
        err = fail(capsys, "caption", str(run_dir), str(picture), "--attention", str(run / name))
        assert err == (f"graphseq: error: --attention {run / name} is inside the run folder {run_dir}, whose "
                       f"files are the run's own; write it elsewhere\n")
    assert _contents(run) == before


@pytest.mark.parametrize("name", ["units.html", "sub/units.html"])
def test_sample_html_never_writes_in_the_run_folder(tmp_path, charlm_run, capsys, name):
    before = _contents(charlm_run)
    err = fail(capsys, "sample", str(charlm_run), "--length", "20", "--html", str(charlm_run / name))
    assert f"--html {charlm_run / name} is inside the run folder {charlm_run}" in err
    assert _contents(charlm_run) == before


@pytest.mark.slow
def test_caption_attention_writes_a_png_outside_the_run(tmp_path, picture, capsys):
    run = _captioner_run(tmp_path)
    assert main(["caption", str(run), str(picture), "--beam", "2", "--attention", str(tmp_path / "a.png")]) == 0
    assert (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_an_empty_caption_is_printed_as_such(tmp_path, picture, capsys):
    run = _captioner_run(tmp_path, end_first=True)
    assert main(["caption", str(run), str(picture)]) == 0
    assert capsys.readouterr().out == "(empty caption)\n"
    assert main(["caption", str(run), str(picture), "--sample", "2", "--seed", "0"]) == 0
    assert capsys.readouterr().out == "(empty caption)\n(empty caption)\n"


def test_sample_checks_cells_against_the_model_before_any_output(tmp_path, charlm_run, capsys):
    page = tmp_path / "z.html"
    assert main(["sample", str(charlm_run), "--units", "1", "--cells", "3,8", "--html", str(page)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("graphseq: error: --cells 3,8: unit(s) 8 out of range: the model has 8 hidden units "
                            "(0..7)\n")
    assert not page.exists()


def test_sample_refuses_a_text_file_longer_than_a_view_reads(tmp_path, charlm_run, capsys, monkeypatch):
    long = tmp_path / "long.txt"
    long.write_text("ab cd\n" * 20)  # 120 characters
    monkeypatch.setattr("graphseq.cli.VIEW_CHARACTERS", 100)
    monkeypatch.setattr("graphseq.models.charlm.load_char_lm", lambda *a: pytest.fail("the model was loaded"))
    err = fail(capsys, "sample", str(charlm_run), "--text-file", str(long), "--units", "2")
    assert err == (f"graphseq: error: --text-file {long} holds 120 characters; --html and --units read at most "
                   f"100 characters (give an excerpt)\n")
    huge = tmp_path / "huge.txt"
    with open(huge, "wb") as f:
        f.truncate(401)  # more bytes than 100 characters can take: refused before it is read
    monkeypatch.setattr("graphseq.io.read_utf8", lambda path: pytest.fail("the text was read"))
    err = fail(capsys, "sample", str(charlm_run), "--text-file", str(huge), "--units", "2")
    assert f"--text-file {huge} holds 401 bytes; --html and --units read at most 100 characters" in err


def test_sample_reads_a_text_file_as_long_as_a_view_reads(tmp_path, charlm_run, capsys, monkeypatch):
    text = tmp_path / "speech.txt"
    text.write_text("ROMEO:\nab cd\n" * 8)  # 104 characters
    monkeypatch.setattr("graphseq.cli.VIEW_CHARACTERS", 104)
    assert main(["sample", str(charlm_run), "--text-file", str(text), "--units", "1",
                 "--cells", "0,7", "--html", str(tmp_path / "u.html")]) == 0
    assert capsys.readouterr().out.endswith("wrote " + str(tmp_path / "u.html") + ": units 0, 7 over 104 characters\n")


@pytest.mark.parametrize("command, name", [
    (["sample", "{run}"], "checkpoint.pt"),
    (["caption", "{run}", "{tmp}/mine.png"], "captioner.pt"),
    (["fill-mask", "{run}", "a [MASK]"], "bert.pt"),
    (["fill-mask", "{run}", "a [MASK]"], "tokenizer.json"),
    (["labels", "{run}"], "labels.sqlite"),
    (["plot-curves", "{run}"], "metrics.json"),
])
def test_a_folder_where_a_run_keeps_a_file_is_named_as_one(tmp_path, capsys, command, name):
    run = tmp_path / "run"
    (run / name).mkdir(parents=True)
    err = fail(capsys, *[a.replace("{run}", str(run)).replace("{tmp}", str(tmp_path)) for a in command])
    assert err == f"graphseq: error: {run / name} is a folder, not a file; move it away\n"


@pytest.mark.parametrize("keep, reason", [(0, "the file is empty"), (500, "truncated, or not a file torch saved"),
                                          (-100, "truncated, or not a file torch saved")])
def test_a_truncated_checkpoint_is_named_in_words_a_user_understands(charlm_run, capsys, keep, reason):
    path = charlm_run / "checkpoint.pt"
    path.write_bytes(path.read_bytes()[:keep])  # all but the last 100 bytes: the zip's central directory is lost
    err = fail(capsys, "sample", str(charlm_run), "--length", "5")
    assert err == f"graphseq: error: {path} is damaged or not a graphseq checkpoint ({reason}); it was left as it is\n"


def test_a_label_store_another_process_writes_is_said_to_be_locked(tmp_path, capsys, monkeypatch):
    import sqlite3

    import graphseq.io
    from graphseq.active.store import STORE_NAME, LabelStore

    with LabelStore(tmp_path / STORE_NAME) as store:
        store.add("random", 1, "Theory", "initial")
    monkeypatch.setattr(graphseq.io, "BUSY_TIMEOUT", 0.05)
    writer = sqlite3.connect(tmp_path / STORE_NAME, isolation_level=None)
    try:
        writer.execute("BEGIN EXCLUSIVE")
        err = fail(capsys, "labels", str(tmp_path))
    finally:
        writer.close()
    assert err == (f"graphseq: error: {tmp_path / STORE_NAME} is locked by another process, which is writing to it "
                   f"(perhaps a run); try again when it has ended; it was left as it is\n")
    assert main(["labels", str(tmp_path)]) == 0


def test_labels_says_how_many_items_were_skipped_and_lists_them_with_skips(tmp_path, capsys):
    from graphseq.active.store import STORE_NAME, LabelStore

    with LabelStore(tmp_path / STORE_NAME) as store:
        store.add("random", 1, "Theory", "initial")
        store.add("random", 4, None, "human")
        store.add("random", 6, None, "human")
    assert main(["labels", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert [line.rsplit(",", 1)[0] for line in out.splitlines()] == ["item,label,source", "1,Theory,initial"]
    assert err == "graphseq: 2 skipped items not listed (4, 6); --skips lists them with an empty label\n"
    assert main(["labels", str(tmp_path), "--skips"]) == 0
    out, err = capsys.readouterr()
    assert [line.rsplit(",", 1)[0] for line in out.splitlines()[1:]] == ["1,Theory,initial", "4,,human", "6,,human"]
    assert err == ""


def test_labels_says_one_skipped_item_in_the_singular(tmp_path, capsys):
    from graphseq.active.store import STORE_NAME, LabelStore

    with LabelStore(tmp_path / STORE_NAME) as store:
        store.add("random", 1, "Theory", "initial")
        store.add("random", 4, None, "human")
    assert main(["labels", str(tmp_path)]) == 0
    assert capsys.readouterr().err == "graphseq: 1 skipped item not listed (4); --skips lists them with an empty label\n"


@pytest.mark.parametrize("count, said", [(0, "0 skipped items"), (1, "1 skipped item"), (2, "2 skipped items")])
def test_a_count_is_spelled_as_a_person_says_it(count, said):
    from graphseq.errors import plural

    assert plural(count, "skipped item") == said


@pytest.mark.parametrize("option", ["--data-root", "--data-mirror"])
def test_an_empty_data_folder_is_refused_not_taken_for_the_working_folder(option, capsys, tmp_path, monkeypatch):
    # '--data-root "$DATA"' with DATA unset: the datasets would go into the folder the command ran in.
    monkeypatch.chdir(tmp_path)
    err = fail(capsys, "run", "gat-cora", option, "", "--set", "train.max_epochs=1", "--out", "run")
    assert f"{option} is empty; name a folder, or leave the option out for its default" in err
    assert list(tmp_path.iterdir()) == []


def test_an_empty_graphseq_data_is_unset(monkeypatch):
    from graphseq.data.places import default_data_root

    monkeypatch.setenv("GRAPHSEQ_DATA", "")
    assert default_data_root() == Path("datasets")


def test_a_fraction_is_printed_as_one_and_a_count_as_a_whole_number(monkeypatch, capsys):
    # oracle_answers_correct = 1.0 was printed as 1, like a count.
    import graphseq.runner

    runs = [{"seed": 0, "oracle_answers": 3, "oracle_answers_correct": 1.0}]
    summary = {"pipeline": "p", "runs": runs, "mean": {"oracle_answers": 3.0, "oracle_answers_correct": 1.0},
               "std": {"oracle_answers": 0.0, "oracle_answers_correct": 0.0}}
    monkeypatch.setattr(graphseq.runner, "plan", lambda *args, **kwargs: None)
    monkeypatch.setattr(graphseq.runner, "execute", lambda plan: summary)
    assert main(["run", "gat-cora"]) == 0
    assert capsys.readouterr().out == "p: oracle_answers 3, oracle_answers_correct 1.0000\n"
