"""What ``graphseq run NAME --nproc-per-node N`` writes where when it is
interrupted, as the command of one process does: its last word on a line of
its own after a terminal's ^C, and never on standard output when standard
error is closed. Torch's elastic launcher is replaced by a stand-in that
raises what the real one raises, so no worker starts."""
import argparse
import signal
import sys

import pytest
import torch.distributed.run as elastic
from torch.distributed.elastic.multiprocessing.api import SignalException

from conftest import Terminal
from graphseq import distributed
from graphseq.runner.config import read_config, resolve_pipeline
from graphseq.runner.launch import launch as launch_workers


def launch(monkeypatch, out, stop, quiet=True, rank_0_logs=False):
    """Launches gat-ppi in ``out`` with a stand-in launcher that ``stop``s it
    (after rank 0 logged its interrupt, with ``rank_0_logs``); the exit code."""
    def workers(_):
        if rank_0_logs:
            (out / "checkpoint.pt").write_bytes(b"")
            with open(out / "log.txt", "a") as log:
                log.write("2026-01-01 10:00:00 interrupted; continue with: graphseq run gat-ppi --resume\n")
        raise stop

    plan = argparse.Namespace(out=out, pipeline="gat-ppi", name="gat-ppi", quiet=quiet, data_root=None,
                              data_mirror=None, config=read_config(resolve_pipeline("gat-ppi")))
    monkeypatch.setattr(elastic, "run", workers)
    return launch_workers(["run", "gat-ppi", "--out", str(out)], 2, plan)


def ctrl_c():
    """What Ctrl-C raises in the launcher once torch's launcher handles signals
    (a fresh one: an interrupt remembers that its line was ended)."""
    return SignalException("Process 1 got signal: 2", signal.SIGINT)


@pytest.mark.parametrize("stop", [ctrl_c, KeyboardInterrupt], ids=["the launcher's handler", "before its handler"])
def test_after_ctrl_c_at_a_terminal_the_launchers_word_starts_its_own_line(tmp_path, monkeypatch, stop):
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert launch(monkeypatch, tmp_path, stop()) == 130
    assert sys.stderr.getvalue() == "\ngraphseq: interrupted; it stored no checkpoint yet, so start it again\n"


def test_after_rank_0_ended_the_ctrl_c_line_the_launcher_adds_no_empty_line(tmp_path, monkeypatch):
    # A run that is not quiet: rank 0 said on the same terminal how to continue, on a line of its own.
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert launch(monkeypatch, tmp_path, ctrl_c(), quiet=False, rank_0_logs=True) == 130
    assert sys.stderr.getvalue() == (f"graphseq: interrupted; the last checkpoint in {tmp_path} resumes: "
                                     f"run the same command with --resume\n")


def test_an_earlier_launchs_interrupt_in_the_log_does_not_end_the_ctrl_c_line(tmp_path, monkeypatch):
    # Interrupted in its checks, a resumed run logs nothing; its log still ends with the last interrupt.
    (tmp_path / "log.txt").write_text("2026-01-01 10:00:00 interrupted; continue with: graphseq run gat-ppi --resume\n")
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert launch(monkeypatch, tmp_path, ctrl_c(), quiet=False) == 130
    assert sys.stderr.getvalue() == "\ngraphseq: interrupted; it stored no checkpoint yet, so start it again\n"


def test_sigterm_echoes_nothing_at_the_terminal_so_no_line_is_ended(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert launch(monkeypatch, tmp_path, SignalException("Process 1 got signal: 15", signal.SIGTERM)) == 143
    assert sys.stderr.getvalue() == "graphseq: interrupted; it stored no checkpoint yet, so start it again\n"


def test_with_standard_error_closed_the_interrupt_is_not_written_to_standard_output(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stderr", None)  # what Python gives a command run with 2>&-
    assert launch(monkeypatch, tmp_path, ctrl_c()) == 130
    assert capsys.readouterr().out == ""


def test_with_standard_error_closed_a_worker_that_lost_its_peer_writes_nothing(monkeypatch, capsys):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)  # Not started by torch's launcher: no wait.
    monkeypatch.setattr(sys, "stderr", None)
    hook = distributed._lost_peer_in_one_line(lambda *error: None)
    hook(RuntimeError, RuntimeError("[pair.cc:553] Connection closed by peer [127.0.0.1]:5"), None)
    assert capsys.readouterr().out == ""
