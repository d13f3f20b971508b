"""Data-parallel training with two gloo processes on CPU: one step on two
shards equals one step on their union, and rank 0 alone writes; a launch
stopped by SIGTERM says in its log how to continue."""
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Data
from torch_geometric.nn import SAGEConv

from graphseq import distributed
from graphseq.data.neighbors import make_sampler
from graphseq.runner import launch
from graphseq.runner.config import read_config, resolve_pipeline
from graphseq.training import train_steps

REPO = Path(__file__).resolve().parent.parent


def union_batch():
    generator = torch.Generator().manual_seed(7)
    return torch.randn(8, 5, generator=generator), torch.randint(0, 3, (8,), generator=generator)


def model_and_optimizer():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))
    return model, torch.optim.Adam(model.parameters(), lr=0.05)


def one_step(out, rows):
    model, optimizer = model_and_optimizer()
    x, y = union_batch()

    def loss_fn(model, step):
        return F.cross_entropy(model(x[rows]), y[rows])

    result = train_steps(model, optimizer, loss_fn, steps=1, out=out, device=torch.device("cpu"), quiet=True,
                         log=logging.getLogger("test-distributed"), pipeline="test",
                         evaluate=lambda m: {"val_rank": float(distributed.rank())})
    return model, result


def _worker(rank, store, tmp):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        out = tmp / f"out-{rank}"
        out.mkdir()
        rows = distributed.shard(8)
        model, result = one_step(out, rows)
        torch.save({"params": [p.detach() for p in model.parameters()], "rows": rows,
                    "history": result.history}, tmp / f"rank-{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    mp.spawn(_worker, args=(tmp / "store", tmp), nprocs=2, join=True)
    return tmp, [torch.load(tmp / f"rank-{r}.pt") for r in range(2)]


@pytest.mark.slow
def test_one_step_on_two_shards_equals_one_step_on_their_union(two_ranks, tmp_path):
    _, ranks = two_ranks
    assert ranks[0]["rows"].tolist() == [0, 2, 4, 6] and ranks[1]["rows"].tolist() == [1, 3, 5, 7]
    single, _ = one_step(tmp_path, torch.arange(8))
    initial, _ = model_and_optimizer()
    for p, q0, q1, p0 in zip(single.parameters(), ranks[0]["params"], ranks[1]["params"],
                             initial.parameters()):
        assert not torch.allclose(p, p0)  # The step moved the weights.
        assert torch.allclose(q0, p, atol=1e-6) and torch.allclose(q1, p, atol=1e-6)


def test_only_rank_zero_writes(two_ranks):
    tmp, _ = two_ranks
    assert sorted(p.name for p in (tmp / "out-0").iterdir()) == ["checkpoint.pt", "curves.png"]
    assert list((tmp / "out-1").iterdir()) == []


def test_figures_are_averaged_over_ranks(two_ranks):
    _, ranks = two_ranks
    # Each rank's evaluation gave its own rank: the history holds their mean.
    assert ranks[0]["history"][0]["val_rank"] == ranks[1]["history"][0]["val_rank"] == 0.5
    assert ranks[0]["history"][0]["train_loss"] == ranks[1]["history"][0]["train_loss"]


def test_shard_pads_to_equal_parts_that_cover_everything(monkeypatch):
    monkeypatch.setattr(distributed, "world_size", lambda: 3)
    parts = []
    for r in range(3):
        monkeypatch.setattr(distributed, "rank", lambda r=r: r)
        parts.append(distributed.shard(list("abcdefg")))
    assert parts == [["a", "d", "g"], ["b", "e", "a"], ["c", "f", "b"]]
    monkeypatch.setattr(distributed, "rank", lambda: 2)
    assert distributed.shard(list("abcdefg"), pad=False) == ["c", "f"]


def test_alone_everything_is_a_no_op():
    assert distributed.rank() == 0 and distributed.world_size() == 1 and distributed.is_main()
    assert distributed.shard(3).tolist() == [0, 1, 2]
    assert distributed.mean_over_ranks({"a": 1.0}) == {"a": 1.0}
    module = nn.Linear(2, 2)
    assert distributed.wrap(module, torch.device("cpu")) is module


def tiny_node_task():
    """Six nodes on a ring with chords, five of them training seeds."""
    generator = torch.Generator().manual_seed(3)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 2], [1, 2, 3, 4, 5, 0, 3, 5]])
    data = Data(x=torch.randn(6, 4, generator=generator), edge_index=torch.cat([edge_index, edge_index.flip(0)], 1),
                y=torch.tensor([0, 1, 2, 0, 1, 2]), num_nodes=6)
    data.train_mask = torch.tensor([True, True, True, True, True, False])
    return data


def sampled_epoch(batch_size):
    """One epoch of the neighbour-sampled node trainer; its weights after it."""
    from graphseq.stages.node_training import Sampling, _dense, _sampled_epoch

    torch.manual_seed(0)
    model = SAGEConv(4, 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    data, sampling = tiny_node_task(), Sampling("neighbor", (-1,), batch_size)
    graph = _dense(data)
    _sampled_epoch(model, distributed.wrap(model, torch.device("cpu")), data, graph,
                   make_sampler(graph, sampling.num_neighbors), sampling, optimizer, seed=0, epoch=1)
    return [p.detach() for p in model.parameters()]


def _node_worker(rank, store, tmp):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=3)
    try:
        torch.save(sampled_epoch(batch_size=1), tmp / f"nodes-{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_three_processes_train_the_seeds_of_one_when_three_does_not_divide_them(tmp_path):
    # Five seeds over three processes: the shards repeat one seed, which must weigh nothing.
    mp.start_processes(_node_worker, args=(tmp_path / "store", tmp_path), nprocs=3, start_method="fork")
    single = sampled_epoch(batch_size=3)  # Two steps: three seeds, then two.
    torch.manual_seed(0)
    initial = list(SAGEConv(4, 3).parameters())
    for rank in range(3):
        for p, q, p0 in zip(single, torch.load(tmp_path / f"nodes-{rank}.pt"), initial):
            assert not torch.allclose(p, p0)
            assert torch.allclose(q, p, atol=1e-6)


def test_a_worker_that_lost_its_peer_says_so_in_one_line(capsys, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)  # Not started by torch's launcher: no wait.
    passed_on = []
    hook = distributed._lost_peer_in_one_line(lambda *error: passed_on.append(error))
    lost = RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:5. "
                        "This is typically caused by a remote worker crashing.\nmore")
    hook(RuntimeError, lost, None)
    assert capsys.readouterr().err == ("[rank1]: RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed "
                                       "by peer [127.0.0.1]:5. This is typically caused by a remote worker "
                                       "crashing.\n")
    other = ValueError("a bug")
    hook(ValueError, other, None)
    assert passed_on == [(ValueError, other, None)]


@pytest.mark.parametrize("said", ["Read error [127.0.0.1]:5: Connection reset by peer",
                                  "writev [127.0.0.1]:5: Broken pipe", "Socket closed [127.0.0.1]:5",
                                  "Socket unexpectedly closed [127.0.0.1]:5"])
def test_every_word_gloo_has_for_a_lost_peer_ends_the_worker_in_one_line(capsys, monkeypatch, said):
    # A peer killed mid-collective: gloo's words depend on where this worker was (reading, writing, or
    # about to), and each printed a traceback that buried the cause the launcher reports.
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    passed_on = []
    hook = distributed._lost_peer_in_one_line(lambda *error: passed_on.append(error))
    hook(RuntimeError, RuntimeError(f"[../third_party/gloo/gloo/transport/tcp/pair.cc:534] {said}"), None)
    assert capsys.readouterr().err == f"[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] " \
                                      f"{said}\n"
    assert passed_on == []


def test_only_a_worker_of_a_launch_adds_its_processes_to_the_resume_command(monkeypatch):
    # Its checkpoint resumes only with as many processes, so the command a person copies must start them.
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv(launch.LAUNCHED, "1")
    assert launch.relaunch_options() == " --nproc-per-node 2"
    monkeypatch.delenv(launch.LAUNCHED)  # torchrun's own worker: its command line is the person's
    assert launch.relaunch_options() == ""
    monkeypatch.setenv(launch.LAUNCHED, "1")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert launch.relaunch_options() == ""


def test_under_the_launcher_a_worker_that_lost_its_peer_leaves_the_word_to_it(capsys, monkeypatch):
    # The launcher stops it once it sees the other worker's end, and that end is the run's last word
    # (a refusal's one line); the worker speaks only if the launcher has not stopped it in time.
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    monkeypatch.setattr(distributed, "LAUNCHER_STOPS_WITHIN", 0.5)
    hook = distributed._lost_peer_in_one_line(lambda *error: None)
    started = time.monotonic()
    hook(RuntimeError, RuntimeError("[pair.cc:553] Connection closed by peer [127.0.0.1]:5"), None)
    assert time.monotonic() - started >= 0.5
    assert capsys.readouterr().err == "[rank1]: RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:5\n"


def _ppi_launch(tmp_path, *extra):
    """``graphseq run gat-ppi --nproc-per-node 2`` on generated PPI files, as a
    process of its own session, with tiny settings and ``extra``."""
    from graphseq.data.ppi import write_ppi_raw

    mirror = tmp_path / "mirror"
    write_ppi_raw(mirror / "PPI" / "raw", graphs=(4, 2, 2), nodes=30, features=12, labels=9)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1")
    env.pop("WORLD_SIZE", None)
    command = [sys.executable, "-m", "graphseq", "run", "gat-ppi", "--quiet", "--out", str(tmp_path / "run"),
               "--data-root", str(tmp_path / "data"), "--data-mirror", str(mirror), "--set", "model.hidden_channels=8",
               "--set", "model.heads=2", "--set", "model.output_heads=2", "--set", "train.eval_every=2",
               "--set", "train.checkpoint_every=2", *extra, "--nproc-per-node", "2"]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="stops the launcher with SIGTERM")
def test_a_launch_stopped_by_sigterm_logs_how_to_continue_it(tmp_path):
    # Only the launcher's stderr said it; log.txt ended at the last step, as if the run had gone on.
    out = tmp_path / "run"
    launcher = _ppi_launch(tmp_path, "--set", "train.steps=100000")
    try:
        deadline = time.time() + 240
        while not (out / "checkpoint.pt").exists():
            assert launcher.poll() is None, launcher.communicate()[1][-3000:]
            assert time.time() < deadline, "no checkpoint appeared"
            time.sleep(0.05)
        os.kill(launcher.pid, signal.SIGTERM)
        _, stderr = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.returncode == 143, stderr[-3000:]
    last = (out / "log.txt").read_text().splitlines()[-1]
    # With the data places it was given: offline, the default ones hold no PPI.
    assert last.split(" ", 2)[2] == f"interrupted; continue with: graphseq run gat-ppi --resume --out {out} " \
                                    f"--data-root {tmp_path / 'data'} --data-mirror {tmp_path / 'mirror'} " \
                                    f"--nproc-per-node 2"


def test_the_launcher_logs_an_interrupt_once_and_only_in_a_run_that_wrote_its_log(tmp_path):
    config = read_config(resolve_pipeline("gat-ppi"))
    launch._log_interrupt(tmp_path, "gat-ppi", config, 2)
    assert not (tmp_path / "log.txt").exists()  # Stopped in its checks: the run wrote nothing.
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    said = ("2026-01-01 10:00:00 interrupted; continue with: graphseq run gat-ppi --resume --out run "
            "--nproc-per-node 2\n")
    (tmp_path / "log.txt").write_text("2026-01-01 09:59:59 gat-ppi step 2: train_loss 0.7\n" + said)
    launch._log_interrupt(tmp_path, "gat-ppi", config, 2)  # Ctrl-C: rank 0 logged it already.
    assert (tmp_path / "log.txt").read_text().endswith("train_loss 0.7\n" + said)


def test_a_launch_its_workers_refused_leaves_no_empty_out_a_late_worker_made(tmp_path, monkeypatch):
    # Rank 0 undoes what it made on refusing, but rank 1 may make --out again after that.
    import argparse

    import torch.distributed.run as elastic
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    out = tmp_path / "new" / "run"
    stored = []

    def workers(_):
        (out / "seed-1").mkdir(parents=True)
        for name in stored:
            (out / name).write_text("a stage's file")
        failure = ProcessFailure(local_rank=1, pid=1, exitcode=2, error_file="")
        raise ChildFailedError("graphseq", {1: failure})

    plan = argparse.Namespace(out=out, pipeline="gat-ppi", name="gat-ppi", quiet=True, data_root=None,
                              data_mirror=None, config={})
    monkeypatch.setattr(elastic, "run", workers)
    assert launch.launch(["run", "gat-ppi", "--out", str(out)], 2, plan) == 2
    assert list(tmp_path.iterdir()) == []  # --out and the folder made above it
    stored.append("checkpoint.pt")  # A file written is never removed.
    assert launch.launch(["run", "gat-ppi", "--out", str(out)], 2, plan) == 2
    assert (out / "checkpoint.pt").read_text() == "a stage's file"
