"""The active-learning pipelines end to end on the real data, as a user
drives them: in-process with the simulated oracle, and as a `graphseq run
--oracle human` process fed through a pipe, killed, resumed and
interrupted. Small budgets and few epochs keep each run to seconds."""
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
from graphseq.active.store import STORE_NAME, LabelStore
from graphseq.cli import main

# A tiny Cora run: 2 random labels, then 2 questions per round, 8 labels in all.
TINY = ["--set", "learner.epochs=5", "--set", "active.initial=2", "--set", "active.batch_size=2",
        "--set", "active.budget=8", "--set", "active.reference=false"]


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


def test_active_polarity_simulated_on_a_sample(tmp_path, data_root, mirror):
    summary = graphseq.run("active-polarity", out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=True,
                           overrides={"data.limit": 400, "learner.epochs": 5, "active.initial": 4,
                                      "active.batch_size": 4, "active.budget": 8,
                                      "active.compare": ["entropy", "coreset"]})
    assert [n for n, _ in summary["runs"][0]["curves"]["entropy"]] == [4, 8]


def test_file_oracle_labels_only_the_items_in_the_file(tmp_path, data_root, mirror):
    labels = tmp_path / "answers.csv"
    # Cora nodes 0-139 are the standard training split, all in the pool.
    labels.write_text("item,label\n" + "".join(f"{i},{i % 7}\n" for i in range(20)))
    graphseq.run("active-cora", out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True,
                 oracle="file", labels=str(labels),
                 overrides={"learner.epochs": 3, "active.initial": 2, "active.batch_size": 3,
                            "active.budget": 8, "active.reference": False})
    with LabelStore(tmp_path / "run" / STORE_NAME) as store:
        answers = store.answers("margin")
    assert len(answers) == 8
    assert all(a.item < 20 for a in answers)
    assert {a.source for a in answers[2:]} == {"file"}


# --------------------------------------------------------------------------- #
# graphseq run --oracle human as a process
# --------------------------------------------------------------------------- #

def start(out, data_root, mirror, *extra):
    return subprocess.Popen(
        [sys.executable, "-m", "graphseq.cli", "run", "active-cora", "--oracle", "human", "--quiet",
         "--out", str(out), "--data-root", str(data_root), "--data-mirror", str(mirror), *TINY, *extra],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


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
    # Two questions a round: first and second, then u at the third's prompt
    # takes back the second, which is asked again before the third.
    first, second, third, again, third_again, fourth = asked_items(stdout)[:6]
    assert (again, third_again) == (second, third)
    assert human_rows(out) == [(first, "Theory"), (second, "Genetic_Algorithms"), (fourth, "Neural_Networks")]

    assert main(["labels", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "item,label,source,time"
    assert [line.split(",")[2] for line in lines[1:]] == ["initial", "initial", "human", "human", "human"]
    assert not any(line.startswith(f"{third},") for line in lines)  # skipped: no label


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
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130
    assert "Traceback" not in stderr.decode()
    assert human_rows(out) == before + [(asked_items(text)[0], "Case_Based")]
