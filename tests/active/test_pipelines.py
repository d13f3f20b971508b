"""The active-learning pipelines end to end on the real data, as a user
drives them: in-process with the simulated oracle, and as a `graphseq run
--oracle human` process fed through a pipe, killed, resumed and
interrupted. Small budgets and few epochs keep each run to seconds."""
import hashlib
import io
import json
import os
import re
import select
import signal
import subprocess
import sys
import time

import pytest

import graphseq
from conftest import Terminal
from graphseq.active.oracles import QUIT
from graphseq.active.tasks import CORA_CLASSES
from graphseq.active.store import STORE_NAME, LabelStore
from graphseq.cli import main

# A tiny Cora run: 2 random labels, then 2 questions per round, 8 labels in all.
TINY = ["--set", "learner.epochs=5", "--set", "active.initial=2", "--set", "active.batch_size=2",
        "--set", "active.budget=8", "--set", "active.reference=false"]


@pytest.mark.slow
def test_active_cora_simulated_over_seeds_writes_curves_metrics_and_plots(tmp_path, data_root, mirror):
    summary = graphseq.run("active-cora", runs=2, out=tmp_path, data_root=data_root, data_mirror=mirror,
                           quiet=True, overrides={"learner.epochs": 3, "active.initial": 2, "active.batch_size": 3,
                                                  "active.budget": 5, "active.compare": ["random", "age"]})
    run = summary["runs"][1]
    assert set(run["curves"]) == {"random", "age"}
    assert [n for n, _ in run["curves"]["age"]] == [2, 5]
    assert set(summary["std"]) >= {"final_accuracy_random", "final_accuracy_age", "standard_split_accuracy"}
    with LabelStore(tmp_path / "seed-1" / STORE_NAME) as store:
        assert [len(store.answers(s)) for s in ("random", "age")] == [5, 5]
        assert {a.source for a in store.answers("age")} == {"initial", "simulated"}
    assert (tmp_path / "seed-0" / "learning_curves.png").is_file()
    assert (tmp_path / "learning_curves.png").is_file()  # drawn by the last seed, over both
    os.remove(tmp_path / "learning_curves.png")
    assert main(["plot-curves", str(tmp_path)]) == 0
    assert (tmp_path / "learning_curves.png").stat().st_size > 10_000


@pytest.mark.slow
def test_active_polarity_simulated_on_a_sample(tmp_path, data_root, mirror):
    summary = graphseq.run("active-polarity", out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=True,
                           overrides={"data.limit": 400, "learner.epochs": 5, "active.initial": 4,
                                      "active.batch_size": 4, "active.budget": 8,
                                      "active.compare": ["entropy", "coreset"]})
    assert [n for n, _ in summary["runs"][0]["curves"]["entropy"]] == [4, 8]


FILE_RUN = {"learner.epochs": 3, "active.initial": 4, "active.batch_size": 3, "active.budget": 20,
            "active.reference": False}


@pytest.mark.slow
def test_a_csv_of_answers_gives_exactly_those_labels(tmp_path, data_root, mirror):
    # Cora nodes 0-139 are the standard training split, all in the pool; the
    # labels are deliberately not the true ones, and fewer than the budget.
    rows = {i: CORA_CLASSES[(3 * i + 1) % 7] for i in range(0, 30, 3)}
    labels = tmp_path / "answers.csv"
    labels.write_text("item,label\n" + "".join(f"{i},{label}\n" for i, label in rows.items()))
    graphseq.run("active-cora", out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True,
                 oracle="file", labels=str(labels), overrides=FILE_RUN)
    with LabelStore(tmp_path / "run" / STORE_NAME) as store:
        answers = store.answers("margin")
    assert sorted((a.item, a.label) for a in answers) == sorted(rows.items())
    assert {a.source for a in answers} == {"file"}


@pytest.mark.parametrize("content, problem", [
    ("item,label\n5,Theory\n9999,Theory\n", "line 3: item 9999 is not among the items that may be labelled"),
    ("item,label\n5,Theory\n2000,Theory\n", "line 3: item 2000 is not among"),  # a test node
    ("item,label\n5,Theory\n6,Astrology\n", "line 3: 'Astrology' is no class"),
    ("", "holds no answers"),
])
def test_a_bad_csv_is_refused_before_any_label_is_stored(content, problem, tmp_path, data_root, mirror, capsys):
    labels = tmp_path / "answers.csv"
    labels.write_text(content)
    assert main(["run", "active-cora", "--labels", str(labels), "--out", str(tmp_path / "run"), "--quiet",
                 "--data-root", str(data_root), "--data-mirror", str(mirror)]) == 2
    err = capsys.readouterr().err
    assert problem in err and str(labels) in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()
    assert labels.read_text() == content


# --------------------------------------------------------------------------- #
# graphseq run --oracle human as a process
# --------------------------------------------------------------------------- #

def start(out, data_root, mirror, *extra):
    # A shell starts a background job (`pytest ... &`) with SIGINT ignored,
    # and its children inherit that: Ctrl-C would then be lost, as it never
    # is for a person's foreground run. The child gets the default back.
    return subprocess.Popen(
        [sys.executable, "-m", "graphseq.cli", "run", "active-cora", "--oracle", "human", "--quiet",
         "--out", str(out), "--data-root", str(data_root), "--data-mirror", str(mirror), *TINY, *extra],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def read_prompts(process, count, seen=""):
    """What the process wrote until its ``count``-th prompt (a guard against
    hanging, not a timed assertion: a slow machine just waits longer)."""
    text = seen
    deadline = time.monotonic() + 300
    while text.count("label> ") < count:
        assert time.monotonic() < deadline, f"no prompt number {count}; output so far:\n{text}"
        ready, _, _ = select.select([process.stdout], [], [], 1.0)
        if ready:
            chunk = os.read(process.stdout.fileno(), 65536).decode()
            assert chunk, f"the process ended early; output:\n{text}\n{process.stderr.read().decode()}"
            text += chunk
    return text


def answer(process, line):
    process.stdin.write((line + "\n").encode())
    process.stdin.flush()


def asked_items(output):
    return [int(i) for i in re.findall(r"\] item (\d+)", output)]


def human_rows(out):
    with LabelStore(out / STORE_NAME) as store:
        return [(a.item, a.label) for a in store.answers("margin") if a.source == "human"]


def piped(data: bytes):
    """Standard input as a pipe of ``data`` under a UTF-8 locale whose errors are strict."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="strict")


@pytest.mark.slow
def test_a_byte_order_mark_and_bytes_that_are_no_utf8_keep_each_piped_answer_on_its_item(
        tmp_path, data_root, mirror, monkeypatch, capsys):
    # A byte-order mark made the first answer garbage and shifted every later one an item off;
    # the second line, no UTF-8, was a traceback. It is no class, asked again: "neural" answers that item.
    out = tmp_path / "run"
    monkeypatch.setattr("sys.stdin", piped(b"\xef\xbb\xbftheory\n\xffgen\nneural\n"))
    assert main(["run", "active-cora", "--oracle", "human", "--quiet", "--out", str(out),
                 "--data-root", str(data_root), "--data-mirror", str(mirror), *TINY]) == 0
    printed = capsys.readouterr()
    assert "Traceback" not in printed.err
    assert "'\\udcffgen' is no class" in printed.out
    first, second = asked_items(printed.out)[:2]
    assert human_rows(out) == [(first, "Theory"), (second, "Neural_Networks")]


@pytest.mark.slow
def test_numbers_typed_with_stray_punctuation_store_no_label(tmp_path, data_root, mirror, monkeypatch, capsys):
    # "-1", "_2" and "1-" were stored as classes 1, 2 and 1.
    out = tmp_path / "run"
    monkeypatch.setattr("sys.stdin", piped(b"-1\n_2\n1-\nq\n"))
    assert main(["run", "active-cora", "--oracle", "human", "--quiet", "--out", str(out),
                 "--data-root", str(data_root), "--data-mirror", str(mirror), *TINY]) == 0
    printed = capsys.readouterr().out
    assert all(f"{typo!r} is no class" in printed for typo in ("-1", "_2", "1-"))
    assert "stored:" not in printed
    assert human_rows(out) == []


@pytest.mark.parametrize("closed, problem", [("stdin", "reads your answers from standard input, which is closed"),
                                             ("stdout", "shows its questions on standard output, which is closed")])
def test_a_persons_run_with_a_closed_standard_stream_is_refused_before_any_file(
        closed, problem, tmp_path, data_root, mirror, monkeypatch, capsys):
    monkeypatch.setattr(f"sys.{closed}", None)  # what Python makes of `<&-` and `>&-`
    assert main(["run", "active-cora", "--oracle", "human", "--quiet", "--out", str(tmp_path / "run"),
                 "--data-root", str(data_root), "--data-mirror", str(mirror), *TINY]) == 2
    err = capsys.readouterr().err
    assert problem in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_piped_answers_garbage_undo_skip_and_end_of_input(tmp_path, data_root, mirror, capsys):
    out = tmp_path / "run"
    script = "theory\nbanana\nreinf\nu\ngen\ns\n3\n"  # then the input ends
    done = subprocess.run(
        [sys.executable, "-m", "graphseq.cli", "run", "active-cora", "--oracle", "human", "--quiet",
         "--out", str(out), "--data-root", str(data_root), "--data-mirror", str(mirror), *TINY],
        input=script.encode(), capture_output=True, timeout=600)
    stdout, stderr = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert "'banana' is no class" in stdout
    assert "end of input" in stdout
    # Two questions a round (the first round: the random initial items), then u
    # at the third's prompt takes back the second, which ended the first round:
    # it is asked again, and the next round is chosen anew, by the model of the
    # answers kept, as in a run that never had the undone answer.
    first, second, third, again, rechosen, fourth = asked_items(stdout)[:6]
    assert again == second
    straight = subprocess.run(
        [sys.executable, "-m", "graphseq.cli", "run", "active-cora", "--oracle", "human", "--quiet",
         "--out", str(tmp_path / "straight"), "--data-root", str(data_root), "--data-mirror", str(mirror), *TINY],
        input=b"theory\ngen\nq\n", capture_output=True, timeout=600)
    assert asked_items(straight.stdout.decode())[2] == rechosen
    assert human_rows(out) == [(first, "Theory"), (second, "Genetic_Algorithms"), (fourth, "Neural_Networks")]

    assert main(["labels", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "item,label,source,time"
    # The two initial items were asked of the person too: every label is theirs.
    assert [line.split(",")[2] for line in lines[1:]] == ["human", "human", "human"]
    assert not any(line.startswith(f"{rechosen},") for line in lines)  # skipped: no label


@pytest.mark.slow
def test_killed_run_loses_no_answer_and_resumes_then_survives_ctrl_c(tmp_path, data_root, mirror):
    out = tmp_path / "run"
    process = start(out, data_root, mirror)
    text = read_prompts(process, 1)
    answer(process, "theory")
    text = read_prompts(process, 2, text)
    answer(process, "rule")
    text = read_prompts(process, 3, text)  # both answers are stored before this prompt
    process.send_signal(signal.SIGKILL)
    process.wait()
    before = human_rows(out)
    assert [label for _, label in before] == ["Theory", "Rule_Learning"]
    assert [item for item, _ in before] == asked_items(text)[:2]

    process = start(out, data_root, mirror, "--resume")
    text = read_prompts(process, 1)
    assert not set(asked_items(text)) & {item for item, _ in before}  # nothing asked twice
    answer(process, "case")
    text = read_prompts(process, 2, text)
    process.send_signal(signal.SIGINT)  # Ctrl-C at the prompt
    process.wait(timeout=300)  # a terminal keeps its input open after Ctrl-C
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130
    assert "Traceback" not in stderr.decode()
    assert human_rows(out) == before + [(asked_items(text)[0], "Case_Based")]


def folder_hash(folder):
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.mark.slow
def test_a_persons_run_resumed_without_its_flags_stays_a_persons_run(tmp_path, data_root, mirror, capsys):
    out = tmp_path / "run"
    first = subprocess.run(
        [sys.executable, "-m", "graphseq.cli", "run", "active-cora", "--oracle", "human", "--quiet",
         "--out", str(out), "--data-root", str(data_root), "--data-mirror", str(mirror), *TINY],
        input=b"theory\nneural\ntheory\nq\n", capture_output=True, timeout=600)
    assert first.returncode == 0, first.stderr.decode()
    assert f"continue with: graphseq run active-cora --resume --out {out}" in first.stdout.decode()
    # No --oracle, no --set: the run's own settings (a person, 8 labels in rounds of 2).
    again = subprocess.run(
        [sys.executable, "-m", "graphseq.cli", "run", "active-cora", "--resume", "--quiet", "--out", str(out),
         "--data-root", str(data_root), "--data-mirror", str(mirror)],
        input=b"rule\ncase\ngen\nprob\nreinf\ntheory\n", capture_output=True, timeout=600)
    assert again.returncode == 0, again.stderr.decode()
    assert again.stdout.decode().count("label> ") == 5  # 3 answered before, 8 in all
    assert main(["labels", str(out)]) == 0
    sources = [line.split(",")[2] for line in capsys.readouterr().out.splitlines()[1:]]
    assert sources == ["human"] * 8


@pytest.mark.slow
def test_resume_of_a_persons_run_with_other_flags_is_refused_and_changes_nothing(tmp_path, data_root, mirror,
                                                                                 capsys):
    out = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "graphseq.cli", "run", "active-cora", "--oracle", "human", "--quiet",
                    "--out", str(out), "--data-root", str(data_root), "--data-mirror", str(mirror), *TINY],
                   input=b"theory\nq\n", capture_output=True, timeout=600, check=True)
    before = folder_hash(out)
    common = ["--out", str(out), "--quiet", "--data-root", str(data_root), "--data-mirror", str(mirror)]
    for extra, message in [(["--oracle", "simulated"], "--oracle simulated (the run has active.oracle = 'human')"),
                           (["--set", "active.strategy=entropy"], "active.strategy = 'entropy' (the run has 'margin')"),
                           (["--seed", "1"], "--seed 1 differs from the run's seed = 0")]:
        assert main(["run", "active-cora", "--resume", *common, *extra]) == 2
        assert message in capsys.readouterr().err
        assert folder_hash(out) == before
    (out / STORE_NAME).write_bytes((out / STORE_NAME).read_bytes()[:100])
    damaged = folder_hash(out)
    assert main(["run", "active-cora", "--resume", *common]) == 2
    assert f"{out / STORE_NAME} is damaged" in capsys.readouterr().err
    assert main(["labels", str(out)]) == 2
    assert f"{out / STORE_NAME} is damaged" in capsys.readouterr().err
    assert folder_hash(out) == damaged
    (out / STORE_NAME).unlink()
    assert main(["run", "active-cora", "--resume", *common]) == 2
    assert f"{out / STORE_NAME} is missing" in capsys.readouterr().err


@pytest.mark.slow
def test_quit_in_the_first_seed_stops_the_run_and_its_hint_resumes_it(tmp_path, data_root, mirror, capsys):
    out = tmp_path / "run"
    common = ["--quiet", "--data-root", str(data_root), "--data-mirror", str(mirror)]
    first = subprocess.run([sys.executable, "-m", "graphseq.cli", "run", "active-cora", "--oracle", "human",
                            "--runs", "2", "--out", str(out), *common, *TINY],
                           input=b"theory\nq\n", capture_output=True, timeout=600)
    assert first.returncode == 0, first.stderr.decode()
    assert (out / "seed-0" / STORE_NAME).is_file() and not (out / "seed-1").exists()
    hint = re.search(r"continue with: (graphseq run .*)", first.stdout.decode()).group(1).split()
    again = subprocess.run([sys.executable, "-m", "graphseq.cli", *hint[1:], *common],
                           input=b"\n".join([b"theory"] * 20) + b"\n", capture_output=True, timeout=600)
    assert again.returncode == 0, again.stderr.decode()
    for seed in (0, 1):
        assert main(["labels", str(out / f"seed-{seed}")]) == 0
        assert len(capsys.readouterr().out.splitlines()) == 1 + 8
    assert main(["labels", str(out)]) == 2
    assert f"{out / 'seed-0'}, {out / 'seed-1'}" in capsys.readouterr().err


class Scripted:
    """A person who answers item i with class i % 7, and quits after ``until`` answers."""

    source = "human"

    def __init__(self, until=None):
        self.until, self.given = until, 0

    def ask(self, question):
        if self.given == self.until:
            return QUIT
        self.given += 1
        return question.item % 7

    def tell(self, text):
        pass

    def restrict(self, pool):
        return pool


@pytest.mark.slow
def test_a_resumed_random_run_asks_and_plots_what_an_uninterrupted_one_does(tmp_path, data_root, mirror):
    common = {"data_root": data_root, "data_mirror": mirror, "quiet": True}
    overrides = {"learner.epochs": 3, "active.initial": 2, "active.batch_size": 2, "active.budget": 8,
                 "active.strategy": "random", "active.reference": False}
    straight = graphseq.run("active-cora", oracle=Scripted(), out=tmp_path / "straight", overrides=overrides,
                            **common)["runs"][0]
    out = tmp_path / "split"
    graphseq.run("active-cora", oracle=Scripted(until=3), out=out, overrides=overrides, **common)
    # A smaller budget than the run's is refused before anything is written (it would be exceeded).
    before = folder_hash(out)
    with pytest.raises(graphseq.GraphseqError, match=r"active.budget = 2 \(the run has 8\): a resumed run may take "
                                                     r"a longer budget, not a shorter one"):
        graphseq.run("active-cora", oracle=Scripted(), out=out, resume=True, overrides={"active.budget": 2},
                     **common)
    assert folder_hash(out) == before
    resumed = graphseq.run("active-cora", oracle=Scripted(), out=out, resume=True, **common)["runs"][0]
    with LabelStore(tmp_path / "straight" / STORE_NAME) as first, LabelStore(out / STORE_NAME) as second:
        assert [a.item for a in second.answers("random")] == [a.item for a in first.answers("random")]
    assert resumed["curves"] == straight["curves"] and [n for n, _ in resumed["curves"]["random"]] == [2, 4, 6, 8]


@pytest.mark.slow
def test_learning_curves_can_measure_the_validation_nodes(tmp_path, data_root, mirror):
    overrides = {"learner.epochs": 3, "active.initial": 2, "active.batch_size": 3, "active.budget": 5,
                 "active.compare": ["random"], "active.reference": False}
    test = graphseq.run("active-cora", out=tmp_path / "test", data_root=data_root, data_mirror=mirror,
                        quiet=True, overrides=overrides)["runs"][0]
    val = graphseq.run("active-cora", out=tmp_path / "val", data_root=data_root, data_mirror=mirror,
                       quiet=True, overrides={**overrides, "learner.evaluate": "val"})["runs"][0]
    # The same labels and models, measured on Cora's 500 validation nodes instead of the 1,000 test nodes.
    assert [n for n, _ in val["curves"]["random"]] == [n for n, _ in test["curves"]["random"]]
    assert all(abs(a * 500 - round(a * 500)) < 1e-3 for _, a in val["curves"]["random"])
    assert [a for _, a in val["curves"]["random"]] != [a for _, a in test["curves"]["random"]]


def test_validation_curves_need_a_validation_split(tmp_path, data_root, mirror):
    with pytest.raises(graphseq.GraphseqError, match="learner.evaluate = 'val': this task has no val nodes"):
        graphseq.run("active-polarity", out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=True,
                     overrides={"data.limit": 100, "learner.evaluate": "val"})


def test_a_budget_below_the_initial_labels_is_refused_before_the_run_folder_is_made(tmp_path, data_root, mirror,
                                                                                    capsys):
    # The loop refused it only after labels.sqlite, config.toml and log.txt were written, and that
    # folder then blocked the corrected run ("already holds a run").
    out = tmp_path / "run"
    assert main(["run", "active-cora", "--out", str(out), "--quiet", "--data-root", str(data_root),
                 "--data-mirror", str(mirror), "--set", "learner.epochs=1", "--set", 'active.compare=["random"]',
                 "--set", "active.budget=5", "--set", "active.initial=14"]) == 2
    assert not out.exists()
    assert re.search(r"active\.budget \(5\) is smaller than the initial labelled set \(active\.initial = 14\)",
                     capsys.readouterr().err)


CHECKED = ["--quiet", "--set", "learner.epochs=1"]


@pytest.mark.parametrize("args, message", [
    (["--set", "active.strategy=degree"],
     "active.strategy has no use when active.oracle = 'simulated': it applies only with 'human' or 'web' or 'file'"),
    (["--oracle", "human", "--set", "active.noise=0.4"],
     "active.noise has no use with --oracle human: it applies only with --oracle simulated"),
    (["--oracle", "human", "--set", 'active.compare=["degree"]'],
     "active.compare has no use with --oracle human: it applies only with --oracle simulated"),
    (["--set", "active.initial_from_truth=true"],
     "active.initial_from_truth has no use when active.oracle = 'simulated'"),
    (["--set", 'active.compare=["random", "random"]'],
     "active.compare = ['random', 'random'] is not allowed: it must be a non-empty list of distinct items"),
])
def test_a_setting_for_another_oracle_or_a_repeated_strategy_is_refused(args, message, tmp_path, data_root,
                                                                        mirror, capsys):
    # The file's own keys for the other oracle are let be (every --oracle runs it); a key typed is not.
    out = tmp_path / "run"
    assert main(["run", "active-cora", "--out", str(out), "--data-root", str(data_root),
                 "--data-mirror", str(mirror), *CHECKED, *args]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_a_labels_file_for_another_oracle_is_refused_before_the_run_folder_is_made(tmp_path, data_root, mirror):
    labels = tmp_path / "answers.csv"
    labels.write_text("item,label\n5,Theory\n")
    with pytest.raises(graphseq.GraphseqError, match="--labels has no use with --oracle simulated: it applies only "
                                                     "with --oracle file"):
        graphseq.run("active-cora", out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True,
                     oracle="simulated", labels=str(labels))
    assert not (tmp_path / "run").exists()


def test_a_reference_where_the_task_has_no_standard_split_is_refused_before_the_run_folder_is_made(
        tmp_path, data_root, mirror):
    with pytest.raises(graphseq.GraphseqError, match="active.reference = true has no use here: this task has no "
                                                     "standard training split"):
        graphseq.run("active-polarity", out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True,
                     overrides={"data.limit": 100, "active.reference": True})
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("key, value", [("budget", 500), ("initial", 90)])
def test_a_budget_beyond_the_pool_is_refused_before_any_label_is_stored(key, value, tmp_path, data_root, mirror):
    # 100 sentences: 20 held out for testing, a pool of 80; the run stopped at 80 labels without a word.
    overrides = {"data.limit": 100, "learner.epochs": 1, "active.compare": ["random"], "active.budget": 500,
                 f"active.{key}": value}
    with pytest.raises(graphseq.GraphseqError, match=f"active.{key} = {value} is more than the 80 items of the "
                                                     f"pool, which the run would run out of; set it to 80 at most"):
        graphseq.run("active-polarity", out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True,
                     overrides=overrides)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_validation_curves_are_named_val_in_the_metrics_the_log_and_curves_json(tmp_path, data_root, mirror):
    overrides = {"learner.epochs": 3, "active.initial": 2, "active.batch_size": 3, "active.budget": 5,
                 "active.compare": ["random"], "learner.evaluate": "val"}
    run = graphseq.run("active-cora", out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=True,
                       overrides=overrides)["runs"][0]
    assert run["evaluated_on"] == "val"
    assert json.loads((tmp_path / "curves.json").read_text())["evaluated_on"] == "val"
    log = (tmp_path / "log.txt").read_text()
    assert "standard split (140 labels): val accuracy " in log and "test accuracy" not in log


def test_log_lines_of_the_loop_go_above_its_progress_bar(tmp_path, data_root, mirror, monkeypatch):
    """The loop logs each point of the curve while its bar is drawn: through tqdm, not onto the bar."""
    import graphseq.stages.active as stages
    from tqdm.contrib.logging import _TqdmLoggingHandler

    handlers = []
    loop = stages.run_loop

    def watched(*args, **kwargs):
        handlers.append([type(h) for h in kwargs["log"].handlers])
        return loop(*args, **kwargs)

    monkeypatch.setattr(stages, "run_loop", watched)
    monkeypatch.setattr(sys, "stderr", Terminal())  # A bar is drawn where a person watches only.
    graphseq.run("active-cora", out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=False,
                 overrides={"learner.epochs": 2, "active.initial": 2, "active.batch_size": 2, "active.budget": 4,
                            "active.compare": ["random"], "active.reference": False})
    assert handlers and all(_TqdmLoggingHandler in h for h in handlers)
