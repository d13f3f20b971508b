"""What the command writes where: its last word on standard error, on a
line of its own after a terminal's ^C, and never on standard output, which
may be a pipe of results."""
import errno
import io
import sys

import pytest

from conftest import Terminal
from graphseq.cli import main
from graphseq.stages import stage


class BrokenStream(io.StringIO):
    """A standard error whose descriptor was closed under it (``2>&-`` behind a wrapper that opened fd 2)."""

    def write(self, text):
        raise OSError(errno.EBADF, "Bad file descriptor")


@stage("test_ctrl_c_after_storing", resumes="state.txt")
def ctrl_c_after_storing(ctx, *, stored: bool = True):
    """Stores its state (or not), then the user presses Ctrl-C."""
    if stored:
        (ctx.out / "state.txt").write_text("step 1")
    raise KeyboardInterrupt


@pytest.fixture
def pipeline(tmp_path):
    path = tmp_path / "ctrl c.toml"
    path.write_text('[work]\nstage = "test_ctrl_c_after_storing"\n')
    return path


def test_after_ctrl_c_at_a_terminal_the_runs_word_starts_its_own_line_once(pipeline, tmp_path, monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    out = tmp_path / "run"
    assert main(["run", str(pipeline), "--out", str(out)]) == 130
    lines = terminal.getvalue().split("\n")
    # The line the terminal echoed ^C on is ended (empty here), then the run's word and the command's.
    assert lines[-4:] == ["", f"interrupted; continue with: graphseq run {out / 'config.toml'} --resume --out {out}",
                          "graphseq: interrupted", ""]
    assert lines[-6].startswith("pipeline ctrl c on cpu") and lines[-5] == "sections: [work] test_ctrl_c_after_storing"
    assert "" not in (out / "log.txt").read_text().splitlines()  # log.txt saw no ^C


def test_after_ctrl_c_in_a_quiet_run_the_commands_word_starts_its_own_line(pipeline, tmp_path, monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["run", str(pipeline), "--out", str(tmp_path / "run"), "--quiet"]) == 130
    assert terminal.getvalue() == "\ngraphseq: interrupted\n"
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)  # A run that stored nothing logs no word of its own.
    assert main(["run", str(pipeline), "--out", str(tmp_path / "none"), "--set", "work.stored=false"]) == 130
    assert terminal.getvalue().endswith(f"cpu, seeds 0..0, out {tmp_path / 'none'}\nsections: [work] "
                                        f"test_ctrl_c_after_storing\n\ngraphseq: interrupted; removed "
                                        f"{tmp_path / 'none'}, which held nothing yet\n")


def test_after_ctrl_c_a_stderr_that_is_no_terminal_gets_no_empty_line(pipeline, tmp_path, capsys):
    assert main(["run", str(pipeline), "--out", str(tmp_path / "run"), "--quiet"]) == 130
    assert capsys.readouterr().err == "graphseq: interrupted\n"


def test_with_standard_error_closed_an_error_is_not_written_to_standard_output(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stderr", None)  # what Python gives a command run with 2>&-
    assert main(["run", "no-such-pipeline"]) == 2
    assert capsys.readouterr().out == ""


def test_with_standard_error_broken_an_error_exits_2_without_a_traceback(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stderr", BrokenStream())
    assert main(["run", "no-such-pipeline"]) == 2
    assert capsys.readouterr().out == ""


def test_with_standard_error_closed_the_labels_csv_stays_the_labels_alone(tmp_path, capsys, monkeypatch):
    from graphseq.active.store import STORE_NAME, LabelStore

    with LabelStore(tmp_path / STORE_NAME) as store:
        store.add("random", 1, "Theory", "initial")
        store.add("random", 4, None, "human")
    monkeypatch.setattr(sys, "stderr", None)
    assert main(["labels", str(tmp_path)]) == 0
    assert [line.rsplit(",", 1)[0] for line in capsys.readouterr().out.splitlines()] == \
        ["item,label,source", "1,Theory,initial"]


def test_a_run_without_standard_error_goes_quiet_and_logs_to_its_file(tmp_path, monkeypatch, capsys, data_root,
                                                                      mirror):
    # `graphseq run ... 2>&-`: Python's sys.stderr is None; the progress bar used to fail writing to it.
    monkeypatch.setattr(sys, "stderr", None)
    code = main(["run", "gat-cora", "--set", "train.max_epochs=2", "--threads", "1", "--data-root", str(data_root),
                 "--data-mirror", str(mirror), "--out", str(tmp_path / "run")])
    assert code == 0
    assert capsys.readouterr().out.startswith("gat-cora: val_accuracy ")
    log = (tmp_path / "run" / "log.txt").read_text()
    assert "stopped after 2 epochs" in log and "test_accuracy" in log


@pytest.mark.parametrize("existing, said", [(False, "removed {out}, which held nothing yet"),
                                             (True, "nothing stored yet; {out} is left as the run found it")])
def test_a_run_interrupted_before_it_stored_anything_says_what_became_of_its_folder(pipeline, tmp_path, capsys,
                                                                                     existing, said):
    # The folder went without a word.
    out = tmp_path / "run"
    if existing:
        out.mkdir()
    assert main(["run", str(pipeline), "--out", str(out), "--quiet", "--set", "work.stored=false"]) == 130
    assert capsys.readouterr().err == f"graphseq: interrupted; {said.format(out=out)}\n"
    assert out.exists() == existing


@stage("test_ctrl_c_after_a_file", resumes="")
def ctrl_c_after_a_file(ctx):
    """A stage of a pipeline that cannot resume writes a file, then the user presses Ctrl-C."""
    (ctx.out / "figure.png").write_bytes(b"drawn")
    raise KeyboardInterrupt


def test_a_run_that_cannot_resume_says_it_kept_what_it_stored(tmp_path, capsys):
    pipeline = tmp_path / "kept.toml"
    pipeline.write_text('[work]\nstage = "test_ctrl_c_after_a_file"\n')
    out = tmp_path / "run"
    assert main(["run", str(pipeline), "--out", str(out), "--quiet"]) == 130
    assert capsys.readouterr().err == f"graphseq: interrupted; kept what the run stored in {out}\n"
    assert (out / "figure.png").is_file()
