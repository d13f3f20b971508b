"""The benchmark scripts refuse bad arguments as argparse does (exit status 2,
the reason on stderr) before they load data or time anything. The scripts
are run as a user runs them, in a subprocess, with bad arguments only."""
import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
# How long a script may take to refuse, counted for each script from when it is awaited: loading
# torch takes seconds, and many more on a machine busy with other work (CI), which is no failure;
# a script that starts its benchmark instead of refusing still fails (it runs for minutes).
LIMIT_S = 180
# How many scripts are started together: enough to keep the machine's cores busy, few enough that
# each one's time goes to loading it rather than to waiting for the others.
BATCH = min(8, 2 * (os.cpu_count() or 1))


def load_timing():
    spec = importlib.util.spec_from_file_location("benchmark_timing", BENCHMARKS / "timing.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def refused(script: str, args: list, cwd: Path) -> subprocess.Popen:
    """Starts ``script`` in a session of its own, so that a script which starts
    work instead of refusing can be stopped with everything it started."""
    env = dict(os.environ, OMP_NUM_THREADS="1", GRAPHSEQ_DATA=str(cwd / "datasets"))
    env.pop("GRAPHSEQ_MIRROR", None)
    return subprocess.Popen([sys.executable, str(BENCHMARKS / script), *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def awaited(process: subprocess.Popen, limit_s: float = LIMIT_S) -> tuple:
    """The exit status, stdout and stderr of a script started by :func:`refused`;
    a status of None for one that ran for ``limit_s`` seconds, which is then
    stopped with everything it started."""
    try:
        out, err = process.communicate(timeout=limit_s)
        return process.returncode, out, err
    except subprocess.TimeoutExpired:
        return None, "", f"ran for {limit_s} s instead of refusing its arguments"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()


@pytest.mark.parametrize("low, text", [(1, "0"), (1, "-5"), (1, "x"), (1, "2.5"), (0, "-1")])
def test_at_least_refuses_a_count_below_its_floor(low, text):
    with pytest.raises(argparse.ArgumentTypeError, match=f"^must be a whole number >= {low}, got {text}$"):
        load_timing().at_least(low)(text)


def test_at_least_reads_a_count_or_a_number():
    at_least = load_timing().at_least
    assert at_least(1)("3") == 3 and at_least(0)("0") == 0  # --threads 0: leave torch's threads as they are
    assert at_least(0, float)("2.5") == 2.5
    with pytest.raises(argparse.ArgumentTypeError, match="must be a number >= 0, got nan"):
        at_least(0, float)("nan")


CASES = [
    ("bench_threads.py", ["--repeats", "0"], "argument --repeats: must be a whole number >= 1, got 0"),
    ("bench_threads.py", ["--epochs", "2"], "argument --epochs: must be a whole number >= 3, got 2"),
    ("bench_scale.py", ["memory", "--batch-size", "0"], "argument --batch-size: must be a whole number >= 1, got 0"),
    ("bench_scale.py", ["memory", "--degree", "-3"], "argument --degree: must be a number >= 0, got -3"),
    ("bench_recurrent.py", ["--cells", "lstm,foo"], "--cells: unknown cell(s) foo; choose from lstm, gru"),
    ("bench_recurrent.py", ["--min-length", "50", "--max-length", "10"], "--min-length 50 is above --max-length 10"),
    ("bench_self_attention.py", ["--edges", "0"], "argument --edges: must be a whole number >= 1, got 0"),
    ("bench_charlm.py", ["--window", "0"], "argument --window: must be a whole number >= 1, got 0"),
    ("polarity_peers.py", ["--folds", "0,3,0"], "argument --folds: fold(s) 0 named more than once"),
    ("polarity_peers.py", ["--folds", "3,-1"], "argument --folds: fold(s) -1 out of range: there are 10 folds, 0..9"),
    ("polarity_peers.py", ["--json", "."], "cannot write --json .: Is a directory"),
    ("bench_scale.py", ["memory", "--fanout", "abc"], "argument --fanout: must be comma-separated whole numbers >= -1, "
                                                      "got 'abc'"),
    ("bench_scale.py", ["processes", "--fanout", "1,x"], "argument --fanout: must be comma-separated whole numbers "
                                                         ">= -1, got '1,x'"),
    ("bench_scale.py", ["memory", "--full-sizes", "x"], "argument --full-sizes: must be comma-separated whole "
                                                        "numbers >= 1, got 'x'"),
    ("bench_scale.py", ["memory", "--full-sizes", "1000,2000,1000"], "--full-sizes: size(s) 1000 named more than once"),
    ("bench_scale.py", ["memory", "--guard-gb", "-1"], "argument --guard-gb: must be a number >= 0, got -1"),
    ("bench_scale.py", ["memory", "--guard-gb", "nan"], "argument --guard-gb: must be a number >= 0, got nan"),
    ("bench_scale.py", ["processes", "--guard-gb", "0"], "--guard-gb: only for memory"),
    ("bench_scale.py", ["processes", "--threads", "2", "--full-sizes", "1000", "--full-steps", "3"],
     "--full-sizes, --full-steps, --threads: only for memory"),
    ("bench_scale.py", ["memory", "--nodes", "100"], "--nodes 100 is too few for --steps 20 timed steps (after 2 "
                                                     "warm-up steps) of --batch-size 1024 seeds: need at least 22528"),
    ("bench_scale.py", ["processes", "--nodes", "40000", "--steps", "18"],
     "--nodes 40000 is too few for --steps 18 timed steps (after 2 warm-up steps) of --batch-size 1024 seeds in "
     "each of 2 processes: need at least 40960"),
    # Refused by graphseq once torch is loaded, reported the same way instead of as a traceback.
    ("bench_gat.py", ["--device", "nonsense"], "--device 'nonsense' is not supported; use auto, cpu, cuda or cuda:N"),
    ("bench_gat.py", ["--data-mirror", ""], "--data-mirror is empty; name a folder, or leave the option out for its "
                                          "default"),
    ("bench_recurrent.py", ["--device", "nonsense"], "--device 'nonsense' is not supported"),
    ("bench_charlm.py", ["--device", "nonsense"], "--device 'nonsense' is not supported"),
    ("bench_bert.py", ["--device", "nonsense"], "--device 'nonsense' is not supported"),
    ("bench_fewshot.py", ["--device", "nonsense"], "--device 'nonsense' is not supported"),
    ("bench_self_attention.py", ["--device", "nonsense"], "--device 'nonsense' is not supported"),
    ("bench_fewshot.py", ["--ways", "100"], "100-way episodes need 100 classes; this split has 64"),
    ("bench_fewshot.py", ["--shots", "30"], "30 labelled + 0 unlabelled + 1 query image per class need 31 images"),
]


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    """Every case, :data:`BATCH` at a time (each spends its seconds loading
    torch), each awaited for :data:`LIMIT_S` seconds of its own: one shared
    deadline for all of them failed the slowest on a busy machine."""
    finished = {}
    for first in range(0, len(CASES), BATCH):
        started = {}
        try:
            for script, args, _ in CASES[first:first + BATCH]:
                cwd = tmp_path_factory.mktemp("cwd")
                started[script, tuple(args)] = cwd, refused(script, args, cwd)
            for case, (cwd, process) in started.items():
                finished[case] = (cwd, *awaited(process))
        finally:  # An error here, or pytest stopped: no script is left running.
            for _, process in started.values():
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.communicate()
    return finished


@pytest.mark.slow
@pytest.mark.parametrize("script, args, message", CASES,
                         ids=lambda value: " ".join(value) if isinstance(value, list) else None)
def test_script_refuses_bad_arguments_before_any_work(refusals, script, args, message):
    cwd, returncode, out, err = refusals[script, tuple(args)]
    assert returncode == 2, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    assert f"{script}: error: {message}" in err
    assert out == "" and not (cwd / "datasets").exists()


def test_a_script_that_works_instead_of_refusing_still_fails_and_is_stopped():
    # The deadline is generous for a slow machine, not for a script that starts its benchmark.
    working = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    assert awaited(working, limit_s=0.5) == (None, "", "ran for 0.5 s instead of refusing its arguments")
    assert working.poll() is not None


@pytest.mark.slow
@pytest.mark.parametrize("script, folder, name", [("bench_gat.py", "Cora/raw", "ind.cora.x"),
                                                  ("bench_bert.py", "rt-polaritydata", "rt-polarity.neg")])
def test_script_reports_unusable_data_in_one_line(tmp_path, script, folder, name):
    blocking = tmp_path / "datasets" / folder / name
    blocking.mkdir(parents=True)  # A folder where a data file belongs: refused before any download.
    returncode, out, err = awaited(refused(script, ["--repeats", "1"], tmp_path))
    assert returncode == 2 and "Traceback" not in err, err[-2000:]
    assert f"{script}: error: {blocking} is not a file (a folder?)" in err


@pytest.mark.slow
def test_bench_gat_reads_cora_from_the_data_mirror_it_is_given(tmp_path, mirror):
    # Offline, a user points the script at the mirror as they point `graphseq run` at it (the README's
    # --data-mirror); GRAPHSEQ_MIRROR is unset here, so only the option can find Cora.
    root = tmp_path / "data"
    args = ["--cases", "cora-dense", "--repeats", "1", "--data-root", str(root), "--data-mirror", str(mirror)]
    returncode, out, err = awaited(refused("bench_gat.py", args, tmp_path))
    assert returncode == 0, err[-2000:]
    assert "cora-dense" in out and "ratio" in out
    assert (root / "Cora" / "raw" / "ind.cora.x").is_file()  # Copied into the data root given, not ./datasets.
    assert not (tmp_path / "datasets").exists()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("gensim") is not None, reason="gensim is installed")
def test_polarity_peers_asks_for_gensim_before_any_fold(tmp_path):
    returncode, out, err = awaited(refused("polarity_peers.py", ["--folds", "0", "--models", "tfidf,doc2vec-dm",
                                                                "--json", str(tmp_path / "peers.json")], tmp_path))
    assert returncode == 2, err[-2000:]
    assert ('polarity_peers.py: error: --models doc2vec-dm: gensim is not installed; install the peers extra: '
            'pip install -e ".[peers]"') in err
    assert out == "" and not (tmp_path / "datasets").exists()


def test_polarity_peers_keeps_the_finished_models_when_a_later_one_fails(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("polarity_peers", BENCHMARKS / "polarity_peers.py")
    peers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peers)
    sentences = [f"sentence {i} is {'good' if i % 2 else 'bad'}" for i in range(40)]
    monkeypatch.setattr(peers, "load_polarity", lambda root, mirror: (sentences, [i % 2 for i in range(40)]))
    monkeypatch.setattr(peers, "tfidf_fold", lambda words, labels, split: {
        "val_accuracy": 0.75, "test_accuracy": 0.5, "choice": "fixed"})

    def killed(*args, **kwargs):
        raise RuntimeError("killed")

    monkeypatch.setattr(peers, "spv_peer_fold", killed)
    monkeypatch.setattr(peers.torch, "set_num_threads", lambda threads: None)  # Leaves pytest's threads alone.
    out = tmp_path / "peers.json"
    monkeypatch.setattr(sys, "argv", ["polarity_peers.py", "--folds", "2", "--models", "tfidf,spv-dm",
                                      "--json", str(out)])
    with pytest.raises(RuntimeError, match="killed"):
        peers.main()
    rows = json.loads(out.read_text())
    assert rows["spv-dm"] == [] and len(rows["tfidf"]) == 1
    assert rows["tfidf"][0]["fold"] == 2 and rows["tfidf"][0]["test_accuracy"] == 0.5


def load_script(name: str, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), BENCHMARKS / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_threads_child_removes_its_run_folder(tmp_path, monkeypatch):
    fakes, scratch = tmp_path / "fakes", tmp_path / "tmp"
    fakes.mkdir(), scratch.mkdir()
    (fakes / "torch.py").write_text("def get_num_threads():\n    return 1\n")
    (fakes / "graphseq.py").write_text(  # Writes a run folder as graphseq.run does.
        "from pathlib import Path\n"
        "def run(name, overrides, out, quiet):\n"
        "    Path(out).mkdir(parents=True)\n"
        "    (Path(out) / 'metrics.json').write_text('{}')\n"
        "    return {'runs': [{'epoch_seconds': 0.25}]}\n")
    code = load_script("bench_threads.py", monkeypatch).CODE.format(epochs=3)
    # -S: without site-packages, so that the fakes stand in for the installed torch and graphseq.
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=LIMIT_S,
                          cwd=scratch,
                          env=dict(os.environ, PYTHONPATH=str(fakes), TMPDIR=str(scratch)))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"threads": 1, "epoch": 0.25}
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("folds", ['{"fold": 0}', '[{"fold": 0, "mode": "dm", "seconds": 1.0}]'])
def test_polarity_peers_refuses_an_spv_run_without_fold_rows(tmp_path, monkeypatch, capsys, folds):
    peers = load_script("polarity_peers.py", monkeypatch)
    run = tmp_path / "spv-run"
    run.mkdir()
    (run / "folds.json").write_text(folds)

    def loaded(root, mirror):
        raise AssertionError("the data were loaded before --spv was checked")

    monkeypatch.setattr(peers, "load_polarity", loaded)
    monkeypatch.setattr(peers.torch, "set_num_threads", lambda threads: None)  # Leaves pytest's threads alone.
    monkeypatch.setattr(sys, "argv", ["polarity_peers.py", "--spv", str(run), "--folds", "0", "--models", "tfidf"])
    with pytest.raises(SystemExit) as exit:
        peers.main()
    assert exit.value.code == 2
    assert (f"polarity_peers.py: error: --spv {run}: not a finished run ({run / 'folds.json'} is damaged"
            in capsys.readouterr().err)


@pytest.mark.skipif(importlib.util.find_spec("gensim") is None, reason="gensim is not installed")
def test_doc2vec_fold_times_the_chosen_fit_alone(monkeypatch):
    import torch

    peers = load_script("polarity_peers.py", monkeypatch)
    words = [f"sentence {i} is {'good' if i % 2 else 'bad'} really".split() for i in range(30)]
    labels = np.array([i % 2 for i in range(30)])
    split = (torch.arange(0, 20), torch.arange(20, 25), torch.arange(25, 30))
    monkeypatch.setattr(peers, "DOC2VEC_GRID", {1: ({"epochs": 2}, {"epochs": 3})})
    started = time.perf_counter()
    row = peers.doc2vec_fold(words, labels, split, dm=1)
    assert 0 < row["fit_seconds"] < time.perf_counter() - started


def test_polarity_peers_sets_spv_beside_one_doc2vec_fit(tmp_path, monkeypatch, capsys):
    pytest.importorskip("gensim", reason="the Doc2Vec peer comes with the [peers] extra")
    peers = load_script("polarity_peers.py", monkeypatch)
    sentences = [f"sentence {i}" for i in range(40)]
    monkeypatch.setattr(peers, "load_polarity", lambda root, mirror: (sentences, [i % 2 for i in range(40)]))
    row = {"val_accuracy": 0.75, "test_accuracy": 0.5, "choice": "fixed"}
    monkeypatch.setattr(peers, "doc2vec_fold", lambda words, labels, split, dm: {**row, "fit_seconds": 1e-9})
    monkeypatch.setattr(peers, "spv_peer_fold", lambda *args: dict(row))
    monkeypatch.setattr(peers.torch, "set_num_threads", lambda threads: None)  # Leaves pytest's threads alone.
    monkeypatch.setattr(sys, "argv", ["polarity_peers.py", "--folds", "2", "--models",
                                      "doc2vec-dm,doc2vec-dbow,spv-dm,spv-dbow"])
    peers.main()
    out = capsys.readouterr().out
    for mode in ("DM", "DBOW"):
        assert f"seconds per fold, SPV-{mode} / one Doc2Vec PV-{mode} fit of the chosen setting: " in out
        assert "vs 0.0 s)" in out
