"""The benchmark scripts time only what they have checked and print only what
they timed: the two sides must agree before a ratio is printed (every path,
at the output's own scale), warm-up steps stay out of the times, the runs a
script starts read the data the user named, and a request the data cannot
fill (a batch larger than the workload, no model at all) is refused, not
printed as something it is not. The scripts are loaded as modules, with
timing and subprocesses stubbed where only the logic around them is tested."""
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from test_benchmark_arguments import load_script


def no_timing(steps, *args, **kwargs):
    return {name: 1.0 for name in steps}


# --------------------------------------------------------------------------- #
# timing.check_agreement
# --------------------------------------------------------------------------- #

def test_check_agreement_stops_on_a_small_output_that_differs(monkeypatch, capsys):
    timing = load_script("timing.py", monkeypatch)
    monkeypatch.setattr(sys, "argv", ["bench_x.py"])
    theirs = torch.tensor([1e-3, -2e-3, 5e-4])
    with pytest.raises(SystemExit) as stop:  # 4 % off: far more than float32 rounding.
        timing.check_agreement("small", theirs * 1.04, theirs)
    assert "bench_x.py: error: small: our output and the peer's differ by up to 8.0e-05" in str(stop.value)
    assert "nothing was timed" in str(stop.value)


def test_check_agreement_passes_float32_rounding_at_any_scale(monkeypatch):
    timing = load_script("timing.py", monkeypatch)
    for scale in (1e-3, 1.0, 1e3):
        theirs = torch.randn(100, generator=torch.Generator().manual_seed(0)) * scale
        ours = (theirs.double() * (1 + 1e-6)).float()  # A few ulps off, as a different summation order is.
        ours[0] = theirs[0] + 1e-6 * theirs.abs().max()  # Near-zero results carry the rounding of large terms.
        assert timing.check_agreement("rounding", [ours, ours], [theirs, theirs]) > 0


def test_check_agreement_stops_on_nan(monkeypatch):
    timing = load_script("timing.py", monkeypatch)
    monkeypatch.setattr(sys, "argv", ["bench_x.py"])
    with pytest.raises(SystemExit, match="differ by up to nan"):
        timing.check_agreement("nan", torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 2.0]))


# --------------------------------------------------------------------------- #
# bench_scale.py
# --------------------------------------------------------------------------- #

def test_bench_scale_full_batch_times_no_cold_first_step(monkeypatch):
    """The clock is a fake that a forward pass advances: 100 s for the first
    (the cold one), 1 s for every later one."""
    import graphseq.models

    scale = load_script("bench_scale.py", monkeypatch)
    clock = types.SimpleNamespace(now=0.0, calls=0)

    class ColdFirstGAT(graphseq.models.GAT):
        def forward(self, *args, **kwargs):
            clock.now += 100.0 if clock.calls == 0 else 1.0
            clock.calls += 1
            return super().forward(*args, **kwargs)

    monkeypatch.setattr(graphseq.models, "GAT", ColdFirstGAT)
    monkeypatch.setattr(scale, "time", types.SimpleNamespace(process_time=lambda: clock.now))
    result = scale.run_child("full", 40, 2.0, steps=2, batch_size=0, fanout=[2], threads=torch.get_num_threads(),
                             guard_gb=0.0)
    assert "failed" not in result, result
    assert result["steps"] == 2 and result["step_seconds"] == 1.0
    assert result["samples_per_second"] == 40.0


# --------------------------------------------------------------------------- #
# bench_self_attention.py, sparse path
# --------------------------------------------------------------------------- #

def sparse_bench(monkeypatch, layer=None):
    bench = load_script("bench_self_attention.py", monkeypatch)
    monkeypatch.setattr(sys, "argv", ["bench_self_attention.py"])
    monkeypatch.setattr(bench, "median_times", no_timing)
    monkeypatch.setattr(bench, "memory_in_subprocess", lambda *args: {"peak": 1, "saved": 1})
    if layer is not None:
        monkeypatch.setattr(bench, "SelfAttentionConv", layer(bench.SelfAttentionConv))
    return bench


def test_sparse_benchmark_checks_ours_against_transformer_conv(monkeypatch, capsys):
    sparse_bench(monkeypatch).bench_sparse(1, torch.device("cpu"), edges=300)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("10000, 300", "20000, 300"))]
    assert len(rows) == 4


def test_sparse_benchmark_stops_before_timing_a_layer_that_differs(monkeypatch):
    def off_by_a_bit(base):
        class Wrong(base):
            def forward(self, *args, **kwargs):
                return super().forward(*args, **kwargs) * 1.01
        return Wrong

    bench = sparse_bench(monkeypatch, off_by_a_bit)
    with pytest.raises(SystemExit) as stop:
        bench.bench_sparse(1, torch.device("cpu"), edges=300)
    assert str(stop.value).startswith("bench_self_attention.py: error: sparse 10000, 300, 64, 4: our output and "
                                      "the peer's differ by up to")


# --------------------------------------------------------------------------- #
# bench_threads.py
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("environment, args, root", [
    (None, [], "datasets"),  # The default, ./datasets, from where the script was started.
    ("shared/data", [], "shared/data"),  # A relative $GRAPHSEQ_DATA, likewise.
    ("elsewhere", ["--data-root", "mine"], "mine"),
])
def test_bench_threads_runs_read_the_data_root_given(tmp_path, monkeypatch, environment, args, root):
    threads = load_script("bench_threads.py", monkeypatch)
    started = []

    def run(command, env, cwd, **kwargs):
        started.append((env, cwd))
        return subprocess.CompletedProcess(command, 0, '{"threads": 1, "epoch": 0.5}\n', "")

    monkeypatch.setattr(threads, "subprocess", types.SimpleNamespace(run=run))
    monkeypatch.chdir(tmp_path)
    if environment is None:
        monkeypatch.delenv("GRAPHSEQ_DATA", raising=False)
    else:
        monkeypatch.setenv("GRAPHSEQ_DATA", environment)
    monkeypatch.setattr(sys, "argv", ["bench_threads.py", "--repeats", "1", "--epochs", "3", *args])
    threads.main()
    assert len(started) == len(threads.SETTINGS)
    for env, cwd in started:
        assert Path(cwd) != tmp_path  # The runs' own folders stay out of the user's.
        assert env["GRAPHSEQ_DATA"] == str(tmp_path / root)


# --------------------------------------------------------------------------- #
# bench_bert.py
# --------------------------------------------------------------------------- #

SENTENCES = [f"the film number {i} was {'good' if i % 2 else 'bad'} and the acting {word} at times"
             for i, word in zip(range(40), ["shone", "dragged", "sparkled", "faltered"] * 10)]


def test_bench_bert_refuses_a_batch_larger_than_its_workloads(monkeypatch, capsys):
    bert = load_script("bench_bert.py", monkeypatch)
    monkeypatch.setattr(bert, "load_polarity", lambda root, mirror: (SENTENCES, [i % 2 for i in range(40)]))
    monkeypatch.setattr(bert.torch, "set_num_threads", lambda threads: None)  # Leaves pytest's threads alone.
    monkeypatch.setattr(bert, "median_times", no_timing)
    monkeypatch.setattr(sys, "argv", ["bench_bert.py", "--batch", "20", "--device", "cpu"])
    with pytest.raises(SystemExit) as stop:
        bert.run_script(bert.main)
    assert stop.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("bench_bert.py: error: --batch 20 is more than the data make; use at most ")
    assert "20 sentence pairs from 40 sentences" in err


def test_bench_bert_limit_gives_full_workloads(monkeypatch):
    from graphseq.errors import GraphseqError

    bert = load_script("bench_bert.py", monkeypatch)
    tokenizer = bert.WordPieceTokenizer.train(SENTENCES, vocab_size=200, min_frequency=1)
    with pytest.raises(GraphseqError, match="use at most") as refused:
        bert.workloads(SENTENCES, tokenizer, 20, 64)
    limit = int(str(refused.value).split("use at most ")[1].split(":")[0])
    workloads = bert.workloads(SENTENCES, tokenizer, limit, 64)
    for name, graphs in workloads.items():
        sizes = torch.bincount(graphs.batch).tolist()
        assert len(sizes) == limit, name
        if name.startswith("no padding"):
            assert set(sizes) == {64}


# --------------------------------------------------------------------------- #
# polarity_peers.py
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("models, message", [
    (",", "--models ',' names no model; choose from tfidf, "),
    ("tfidf,spv-dm,tfidf", "--models: model(s) tfidf named more than once"),
])
def test_polarity_peers_refuses_models_it_cannot_tabulate(monkeypatch, capsys, models, message):
    peers = load_script("polarity_peers.py", monkeypatch)

    def loaded(root, mirror):
        raise AssertionError("the data were loaded before --models was checked")

    monkeypatch.setattr(peers, "load_polarity", loaded)
    monkeypatch.setattr(peers.torch, "set_num_threads", lambda threads: None)  # Leaves pytest's threads alone.
    monkeypatch.setattr(sys, "argv", ["polarity_peers.py", "--folds", "0", "--models", models])
    with pytest.raises(SystemExit) as stop:
        peers.main()
    assert stop.value.code == 2
    assert f"polarity_peers.py: error: {message}" in capsys.readouterr().err


# --------------------------------------------------------------------------- #
# bench_charlm.py
# --------------------------------------------------------------------------- #

def test_bench_charlm_checks_the_plain_torch_model_trains_alike_before_timing(monkeypatch, capsys):
    charlm = load_script("bench_charlm.py", monkeypatch)
    monkeypatch.setattr(charlm, "median_times", no_timing)
    monkeypatch.setattr(charlm.torch, "set_num_threads", lambda threads: None)  # Leaves pytest's threads alone.
    monkeypatch.setattr(sys, "argv", ["bench_charlm.py", "--batch", "3", "--window", "5", "--vocab", "7",
                                      "--embedding", "4", "--hidden", "6", "--windows", "2", "--device", "cpu"])
    charlm.main()
    assert "ratio ours / plain torch (its fastest): 1.00" in capsys.readouterr().out


def test_bench_charlm_times_nothing_when_the_two_models_differ(monkeypatch):
    charlm = load_script("bench_charlm.py", monkeypatch)
    monkeypatch.setattr(charlm, "median_times", lambda *args, **kwargs: pytest.fail("timed"))
    monkeypatch.setattr(charlm.torch, "set_num_threads", lambda threads: None)
    monkeypatch.setattr(charlm, "copy_weights", lambda ours, theirs: None)  # the peer keeps its own weights
    monkeypatch.setattr(sys, "argv", ["bench_charlm.py", "--batch", "3", "--window", "5", "--vocab", "7",
                                      "--embedding", "4", "--hidden", "6", "--device", "cpu"])
    with pytest.raises(SystemExit, match="do not compute the same thing"):
        charlm.main()


# --------------------------------------------------------------------------- #
# polarity_peers.py: the bag-of-bigram peers
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("peer", ["mnb_fold", "nbsvm_fold"])
def test_bigram_peers_learn_a_polarity_that_only_a_bigram_tells(peer, monkeypatch):
    # "not good" is negative and "good" alone positive: the unigrams alone cannot tell every sentence.
    peers = load_script("polarity_peers.py", monkeypatch)
    generator = torch.Generator().manual_seed(0)
    fillers = ["the", "film", "was", "a", "plot", "it"]
    words, labels = [], []
    for i in range(300):
        filler = [fillers[int(j)] for j in torch.randint(0, len(fillers), (4,), generator=generator)]
        negative = i % 2 == 0
        words.append(filler[:2] + (["not", "good"] if negative else ["good", "not"][:1 + i % 3 // 2]) + filler[2:])
        labels.append(0 if negative else 1)
    order = torch.randperm(300, generator=generator)
    split = (order[:200], order[200:250], order[250:])
    row = getattr(peers, peer)(words, peers.np.asarray(labels), split)
    assert row["val_accuracy"] == 1.0 and row["test_accuracy"] == 1.0
    assert row["choice"].startswith("alpha" if peer == "mnb_fold" else "C ")
