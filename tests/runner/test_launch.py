"""``graphseq run NAME --nproc-per-node 2``: two gloo workers through torch's
elastic launcher, on gat-ppi over generated PPI-format files. One step of two
workers equals one step of one worker on the whole batch; the run folder gets
one metrics.json, one checkpoint and one log; a killed worker ends the run
with a clear error, and the checkpoint resumes."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # not on Windows
    fcntl = None

import pytest
import torch

from graphseq import GraphseqError, distributed, run
from graphseq.cli import main
from graphseq.data.ppi import write_ppi_raw
from graphseq.io import load_checkpoint
from graphseq.runner.config import read_config, resolve_pipeline
from graphseq.runner.launch import _what_now, check_processes
from graphseq.runner.run_folder import resume_command

REPO = Path(__file__).resolve().parents[2]
TINY = ["--set", "model.hidden_channels=8", "--set", "model.heads=2", "--set", "model.output_heads=2",
        "--set", "train.eval_every=2", "--set", "train.checkpoint_every=2"]


@pytest.fixture(scope="module")
def ppi_mirror(tmp_path_factory):
    mirror = tmp_path_factory.mktemp("ppi-mirror")
    write_ppi_raw(mirror / "PPI" / "raw", graphs=(4, 2, 2), nodes=30, features=12, labels=9)
    return mirror


def graphseq_command(*args):
    return [sys.executable, "-m", "graphseq", "run", *args]


def environment():
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1")
    env.pop("WORLD_SIZE", None)
    return env


def gat_ppi(out, mirror, root, *extra, nproc=1, check=True):
    command = graphseq_command("gat-ppi", "--quiet", "--out", str(out), "--data-root", str(root),
                               "--data-mirror", str(mirror), *TINY, *extra)
    if nproc > 1:
        command += ["--nproc-per-node", str(nproc)]
    done = subprocess.run(command, env=environment(), capture_output=True, text=True, timeout=300)
    if check:
        assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_two_workers_take_the_step_of_one_on_the_whole_batch(tmp_path, ppi_mirror):
    root = tmp_path / "data"
    gat_ppi(tmp_path / "one", ppi_mirror, root, "--set", "train.steps=1")
    done = gat_ppi(tmp_path / "two", ppi_mirror, root, "--set", "train.steps=1", nproc=2)
    one = load_checkpoint(tmp_path / "one" / "checkpoint.pt")
    two = load_checkpoint(tmp_path / "two" / "checkpoint.pt")
    assert two["world_size"] == 2 and len(two["ranks"]) == 2
    initial_moved = False
    for key, weight in one["model"].items():
        assert torch.allclose(two["model"][key], weight, atol=1e-6), key
        initial_moved |= bool((weight != 0).any())
    assert initial_moved
    # One of each file, written by rank 0 alone; one summary printed.
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == \
        ["checkpoint.pt", "config.toml", "curves.png", "log.txt", "metrics.json"]
    assert (tmp_path / "two" / "log.txt").read_text().count("pipeline gat-ppi") == 1
    assert f"out {tmp_path / 'two'}, 2 processes" in (tmp_path / "two" / "log.txt").read_text()
    assert done.stdout.count("gat-ppi: val_f1") == 1


def _worker_of_rank(launcher_pid, rank):
    """The pid of the launcher's descendant whose environment says RANK=rank."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if f"RANK={rank}".encode() in environ and b"GRAPHSEQ_TEST_LAUNCH=1" in environ:
            pid = parent
            while pid > 1:  # Is it below our launcher?
                if pid == launcher_pid:
                    return int(entry.name)
                try:
                    pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                except OSError:
                    break
    return None


def _wait_for_a_checkpoint(launcher: subprocess.Popen, out: Path) -> None:
    deadline = time.time() + 240
    while not (out / "checkpoint.pt").exists():
        assert launcher.poll() is None, launcher.communicate()[1][-3000:]
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the worker through /proc")
def test_a_killed_worker_ends_the_run_clearly_and_the_checkpoint_resumes(tmp_path, ppi_mirror):
    out, root = tmp_path / "run", tmp_path / "data"
    command = graphseq_command("gat-ppi", "--quiet", "--out", str(out), "--data-root", str(root),
                               "--data-mirror", str(ppi_mirror), *TINY, "--set", "train.steps=120",
                               "--nproc-per-node", "2")
    env = dict(environment(), GRAPHSEQ_TEST_LAUNCH="1")
    launcher = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_a_checkpoint(launcher, out)
        victim = _worker_of_rank(launcher.pid, 1)
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        _, stderr = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 2
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("graphseq: error: worker 1 of 2") and "SIGKILL" in last and "--resume" in last
    assert (out / "log.txt").read_text().splitlines()[-1].split(" ", 2)[2] == last.removeprefix("graphseq: error: ")
    stopped_at = load_checkpoint(out / "checkpoint.pt")["step"]
    assert 2 <= stopped_at < 120
    resumed = subprocess.run(command + ["--resume"], env=environment(), capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming at step {stopped_at}" in (out / "log.txt").read_text() or \
        f"resumed from {out / 'checkpoint.pt'} at step {stopped_at}" in (out / "log.txt").read_text()
    assert load_checkpoint(out / "checkpoint.pt")["step"] == 120


@pytest.mark.slow
def test_data_missing_after_the_workers_started_ends_in_its_one_line(tmp_path):
    # Rank 0 finds the files missing while rank 1 waits for it; rank 1 lost its peer and printed
    # "[rank1]: RuntimeError: ... Connection closed by peer ...", or exited first and was blamed.
    out, empty, mirror = tmp_path / "run", tmp_path / "empty", tmp_path / "mirror"
    empty.mkdir()
    mirror.mkdir()
    env = environment()
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):  # Offline: the download fails at once.
        env[name] = "http://127.0.0.1:9"
    for name in ("no_proxy", "NO_PROXY"):
        env.pop(name, None)
    done = subprocess.run(graphseq_command("gat-ppi", "--quiet", "--out", str(out), "--data-root", str(empty),
                                           "--data-mirror", str(mirror), *TINY, "--nproc-per-node", "2"),
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    [line] = done.stderr.splitlines()
    assert line.startswith("graphseq: error: missing dataset file(s) train_feats.npy") and str(empty) in line
    assert not out.exists()  # Nothing written, not even the folder.


def test_a_person_cannot_answer_several_processes(tmp_path, capsys):
    assert main(["run", "active-cora", "--oracle", "human", "--nproc-per-node", "2",
                 "--out", str(tmp_path / "run")]) == 2
    assert "one process" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_pipeline_without_a_data_parallel_stage_refuses_several_processes(tmp_path, capsys):
    assert main(["run", "polarity-bilstm", "--nproc-per-node", "2", "--out", str(tmp_path / "run")]) == 2
    assert "no data-parallel stage" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_under_torchrun_the_human_oracle_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(GraphseqError, match="one process"):
        run("active-cora", out=tmp_path / "run", oracle="human", quiet=True)
    assert not (tmp_path / "run").exists()


def test_full_batch_node_training_refuses_several_processes_before_any_worker_starts(tmp_path, capfd):
    assert main(["run", "gat-cora", "--set", "train.max_epochs=1", "--nproc-per-node", "2",
                 "--out", str(tmp_path / "run")]) == 2
    assert capfd.readouterr().err == (
        "graphseq: error: pipeline gat-cora has no data-parallel stage with its settings (train is data-parallel "
        "only with loader = 'neighbor'), so 2 processes would each repeat the whole run; run it with one process\n")
    assert not (tmp_path / "run").exists()


def test_neighbour_sampled_node_training_runs_in_several_processes():
    config = read_config(resolve_pipeline("gat-cora-neighbor"))
    check_processes("gat-cora-neighbor", config, {}, 3)  # No refusal.


def test_a_batch_the_processes_cannot_share_is_refused_once_before_any_worker_starts(tmp_path, capfd):
    text = tmp_path / "text.txt"
    text.write_text("ROMEO: to be, or not to be\n" * 20)
    assert main(["run", "charlm-lstm", "--set", f"data.text_file={text}", "--set", "train.batch_size=3",
                 "--nproc-per-node", "2", "--out", str(tmp_path / "run")]) == 2
    assert capfd.readouterr().err == ("graphseq: error: train.batch_size = 3 does not split evenly over 2 "
                                      "processes; --set train.batch_size to a multiple of 2\n")
    assert not (tmp_path / "run").exists()


def test_resuming_a_missing_run_is_refused_once_before_any_worker_starts(tmp_path, capfd):
    missing = tmp_path / "missing"
    assert main(["run", "charlm-lstm", "--resume", "--out", str(missing), "--nproc-per-node", "2"]) == 2
    assert capfd.readouterr().err == f"graphseq: error: --resume: {missing} holds no earlier run (no config.toml)\n"
    assert not missing.exists()


def test_after_a_worker_died_the_advice_fits_the_run(tmp_path):
    charlm = read_config(resolve_pipeline("charlm-lstm"))
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.toml").write_text("")
    (out / "log.txt").write_text("")
    assert _what_now(out, "charlm-lstm", charlm) == "it stored no checkpoint yet, so start it again"
    (out / "tokenizer.json").write_text("")  # a stage's file, but nothing to continue from: started again in place
    assert _what_now(out, "charlm-lstm", charlm) == "it stored no checkpoint yet, so start it again"
    (out / "checkpoint.pt").write_bytes(b"")
    assert _what_now(out, "charlm-lstm", charlm) == \
        f"the last checkpoint in {out} resumes: run the same command with --resume"
    neighbor = read_config(resolve_pipeline("gat-cora-neighbor"))
    assert _what_now(tmp_path / "gone", "gat-cora-neighbor", neighbor) == \
        "pipeline gat-cora-neighbor cannot resume a run, so start it again"
    assert _what_now(out, "gat-cora-neighbor", neighbor) == \
        f"pipeline gat-cora-neighbor cannot resume a run, so start it again with another --out than {out}"


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the checkpoint's writer through /proc")
@pytest.mark.parametrize("how, code", [("ctrl-c", 130), ("sigterm", 143)])
def test_an_interrupted_launch_ends_in_one_line_that_says_how_to_resume(tmp_path, ppi_mirror, how, code):
    out, root = tmp_path / "run", tmp_path / "data"
    command = graphseq_command("gat-ppi", "--quiet", "--out", str(out), "--data-root", str(root),
                               "--data-mirror", str(ppi_mirror), *TINY, "--set", "train.steps=100000",
                               "--nproc-per-node", "2")
    launcher = subprocess.Popen(command, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    try:
        _wait_for_a_checkpoint(launcher, out)
        if how == "ctrl-c":  # The terminal sends SIGINT to the whole process group.
            os.killpg(launcher.pid, signal.SIGINT)
        else:
            os.kill(launcher.pid, signal.SIGTERM)
        _, stderr = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.returncode == code, stderr[-3000:]
    assert "Traceback" not in stderr and "SignalException" not in stderr
    assert stderr.strip().splitlines()[-1] == (f"graphseq: interrupted; the last checkpoint in {out} resumes: "
                                               f"run the same command with --resume")
    # The command log.txt ends with starts the same two workers, which the checkpoint needs; written once
    # (rank 0 writes it on Ctrl-C, the launcher after SIGTERM).
    log = (out / "log.txt").read_text().splitlines()
    resume = f"interrupted; continue with: {resume_command('gat-ppi', out, root, ppi_mirror)} --nproc-per-node 2"
    assert log[-1].split(" ", 2)[2] == resume, "\n".join(log[-3:])
    assert sum(line.split(" ", 2)[2].startswith("interrupted") for line in log) == 1, "\n".join(log[-3:])


@pytest.mark.slow
def test_resuming_with_another_number_of_processes_is_refused_before_any_worker_starts(tmp_path, ppi_mirror,
                                                                                          capfd):
    out, root = tmp_path / "run", tmp_path / "data"
    gat_ppi(out, ppi_mirror, root, "--set", "train.steps=2")
    log = (out / "log.txt").read_text()
    assert main(["run", "gat-ppi", "--quiet", "--out", str(out), "--data-root", str(root),
                 "--data-mirror", str(ppi_mirror), *TINY, "--set", "train.steps=2", "--resume",
                 "--nproc-per-node", "2"]) == 2
    assert capfd.readouterr().err == (f"graphseq: error: --resume: {out / 'checkpoint.pt'} was written by 1 "
                                      f"process(es); resume it with the same number (without --nproc-per-node; "
                                      f"this run has 2)\n")
    assert (out / "log.txt").read_text() == log


@pytest.mark.skipif(fcntl is None, reason="folders are locked with fcntl")
def test_a_folder_a_live_run_holds_is_refused_before_any_worker_starts(tmp_path, capfd):
    text, out = tmp_path / "text.txt", tmp_path / "run"
    text.write_text("ROMEO: to be, or not to be\n" * 20)
    out.mkdir()
    held = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as the live run holds it
        assert main(["run", "charlm-lstm", "--set", f"data.text_file={text}", "--nproc-per-node", "2",
                     "--out", str(out)]) == 2
    finally:
        os.close(held)
    assert capfd.readouterr().err == (f"graphseq: error: --out {out} is in use by another graphseq run; "
                                      f"wait for it to end, or choose another --out\n")
    assert not any(out.iterdir())


def test_under_torchrun_rank_0_alone_says_why_the_checks_refused(tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(distributed, "past_checks", False)
    for rank, said in (("1", ""), ("0", "graphseq: error: --resume: ")):
        monkeypatch.setenv("RANK", rank)
        assert main(["run", "charlm-lstm", "--resume", "--out", str(tmp_path / "missing")]) == 2
        assert capfd.readouterr().err.startswith(said)


CHILD = """
import os, sys, time
from graphseq.distributed import _end_with_the_launcher
_end_with_the_launcher()
print(os.getpid(), flush=True)
time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_ends_when_its_launcher_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])",
                               sys.executable, "-c", CHILD], env=environment(), stdout=subprocess.PIPE, text=True)
    try:
        worker = int(parent.stdout.readline())
        parent.kill()
        parent.wait()
        deadline = time.time() + 10
        while Path(f"/proc/{worker}").exists() and "\tZ" not in _state(worker) and time.time() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{worker}").exists() or "\tZ" in _state(worker)
    finally:
        parent.kill()


def _state(pid):
    try:
        return next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("State"))
    except (OSError, StopIteration):
        return "\tZ"
