"""Smoke runs of the few-shot pipelines on the real Omniglot for a few steps
(tiny batches, few validation and test episodes), mini-ImageNet on generated
files of its layout, resuming, and the oracles of the active pipeline: a
person through a pipe (answers, garbage, undo, skip, quit, resume), a file
and the simulated one."""
import csv
import io
import json
import re
import shutil
import subprocess
import sys

import pytest
import torch

import graphseq
from graphseq.active.prompt import HumanOracle
from graphseq.active.store import STORE_NAME, LabelStore
from graphseq.io import load_checkpoint


def whole_fraction(value, total):
    """Whether ``value`` is a count out of ``total`` (up to float rounding)."""
    return abs(value * total - round(value * total)) < 1e-6


def tiny_start(**data):
    """fewshot-omniglot-active's start run (its [start] section's overrides), made tiny; ``data``: the
    settings of the start's own [data] section."""
    settings = {**tiny(("train", "test")), **{f"data.{key}": value for key, value in data.items()}}
    return {"start.overrides": [f"{key}={value}" for key, value in settings.items()]}


def tiny(*tables, steps=2):
    """Overrides that make every training and test section of a pipeline tiny."""
    overrides = {}
    for train, test in tables:
        overrides.update({f"{train}.steps": steps, f"{train}.batch_size": 2, f"{train}.eval_every": 2,
                          f"{train}.eval_episodes": 4, f"{train}.eval_batch_size": 4,
                          f"{train}.checkpoint_every": 1, f"{test}.episodes": 6, f"{test}.batch_size": 6})
    return overrides


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fewshot-omniglot-5w1s", "fewshot-omniglot-5w5s", "fewshot-omniglot-20w1s",
                                  "fewshot-omniglot-20w5s"])
def test_omniglot_pipelines_train_and_test(name, tmp_path, data_root, mirror):
    summary = graphseq.run(name, out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=True,
                           overrides=tiny(("train", "test")))
    figures = summary["runs"][0]
    assert figures["steps"] == 2 and figures["test_episodes"] == 6
    assert figures["train_cpu_minutes"] > 0  # the CPU time of the training steps is counted
    assert whole_fraction(figures["test_accuracy"], 6) and whole_fraction(figures["val_accuracy"], 4)
    assert 0.0 <= figures["test_ci95_low"] < figures["test_ci95_high"] <= 1.0
    assert figures["test_ci95_low"] <= figures["test_accuracy"] <= figures["test_ci95_high"]
    assert (tmp_path / "curves.png").is_file() and (tmp_path / "checkpoint.pt").is_file()


@pytest.mark.slow
def test_resume_continues_the_training_and_reuses_the_test(tmp_path, data_root, mirror):
    overrides = tiny(("train", "test"))
    graphseq.run("fewshot-omniglot-5w1s", out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=True,
                 overrides=overrides)
    overrides["train.steps"] = 3
    summary = graphseq.run("fewshot-omniglot-5w1s", out=tmp_path, data_root=data_root, data_mirror=mirror,
                           quiet=True, overrides=overrides, resume=True)
    assert summary["runs"][0]["steps"] == 3
    assert load_checkpoint(tmp_path / "checkpoint.pt")["step"] == 3


@pytest.mark.slow
def test_init_starts_from_the_weights_of_another_run_that_fit(tmp_path, data_root, mirror):
    graphseq.run("fewshot-omniglot-5w1s", out=tmp_path / "one", data_root=data_root, data_mirror=mirror,
                 quiet=True, overrides=tiny(("train", "test")))
    kept = load_checkpoint(tmp_path / "one" / "checkpoint.pt")["best_model"]
    # Trained with a vanishing lr from the 5-way model: a 20-way model keeps the
    # embedding CNN it was given, and its label slots start afresh.
    overrides = {**tiny(("train", "test")), "train.lr": 1e-30,
                 "train.init": str(tmp_path / "one" / "checkpoint.pt")}
    graphseq.run("fewshot-omniglot-20w1s", out=tmp_path / "twenty", data_root=data_root, data_mirror=mirror,
                 quiet=True, overrides=overrides)
    twenty = load_checkpoint(tmp_path / "twenty" / "checkpoint.pt")["model"]
    cnn = [k for k in kept if k.startswith("embedding.") and k.endswith(("weight", "bias"))]
    assert cnn and all(torch.allclose(twenty[k], kept[k]) for k in cnn)
    log = (tmp_path / "twenty" / "log.txt").read_text()
    assert "initialised 58 of 141 tensors" in log and "83 fresh (other shapes) in gnn.convs.0, gnn.convs.1," in log

    # A damaged or foreign file is refused, in one line that names it once, before the run folder is made.
    (tmp_path / "broken.pt").write_bytes(b"not a checkpoint")
    torch.save({"model": [1, 2]}, tmp_path / "foreign.pt")
    for name, problem in (("broken.pt", "is damaged or not a graphseq checkpoint"),
                          ("foreign.pt", "cannot read weights from")):
        with pytest.raises(graphseq.GraphseqError) as refusal:
            graphseq.run("fewshot-omniglot-5w5s", out=tmp_path / "five", data_root=data_root, data_mirror=mirror,
                         quiet=True, overrides={**tiny(("train", "test")), "train.init": str(tmp_path / name)})
        message = str(refusal.value)
        assert message.startswith("train_episodes.init: ") and problem in message
        assert message.count(name) == 1 and "\n" not in message
        assert not (tmp_path / "five").exists()


@pytest.mark.slow
def test_episodes_can_share_their_support_sets(tmp_path, data_root, mirror):
    overrides = {**tiny(("train", "test")), "train.batch_size": 4, "train.per_support": 2}
    summary = graphseq.run("fewshot-omniglot-20w1s", out=tmp_path / "shared", data_root=data_root,
                           data_mirror=mirror, quiet=True, overrides=overrides)
    assert summary["runs"][0]["steps"] == 2
    assert "2 steps of 4 episodes (21 nodes each, 2 to a support set)" in (tmp_path / "shared" / "log.txt").read_text()
    # Refused before the run stores anything: the folder is not created.
    for batch, per_support, problem in (
            (4, 3, r"episodes per support set \(3\) must .* divide the number of episodes \(4\)"),
            (20, 20, r"20 episodes per support set need 1 labelled \+ 0 unlabelled \+ 20 query")):
        with pytest.raises(graphseq.GraphseqError, match=problem):
            graphseq.run("fewshot-omniglot-20w1s", out=tmp_path / "refused", data_root=data_root,
                         data_mirror=mirror, quiet=True,
                         overrides={**overrides, "train.batch_size": batch, "train.per_support": per_support})
        assert not (tmp_path / "refused").exists()


@pytest.mark.slow
def test_semi_supervised_compares_with_and_without_unlabelled_nodes(tmp_path, data_root, mirror):
    summary = graphseq.run("fewshot-omniglot-semi", out=tmp_path, data_root=data_root, data_mirror=mirror,
                           quiet=True, overrides=tiny(("train", "test"),
                                                      ("train_labelled_only", "test_labelled_only")))
    figures = summary["runs"][0]
    for suffix in ("", "_labelled_only"):
        assert figures[f"steps{suffix}"] == 2 and figures[f"test_episodes{suffix}"] == 6
        assert whole_fraction(figures[f"test_accuracy{suffix}"], 6)
    assert (tmp_path / "checkpoint.pt").is_file() and (tmp_path / "checkpoint-labelled_only.pt").is_file()
    log = (tmp_path / "log.txt").read_text()
    assert "(26 nodes each)" in log and "(6 nodes each, labelled only)" in log


ACTIVE = {**tiny(("train", "test"), ("train_random_trained", "test_random_trained")), **tiny_start()}
ASKED = {**ACTIVE, "oracle.episodes": 5}  # with an oracle: the oracle's keys apply only then


@pytest.fixture(scope="module")
def active_run(tmp_path_factory, data_root, mirror):
    """The active pipeline trained and tested, without an oracle: it asks nobody."""
    out = tmp_path_factory.mktemp("active")
    summary = graphseq.run("fewshot-omniglot-active", out=out, data_root=data_root, data_mirror=mirror,
                           quiet=True, overrides=ACTIVE)
    return out, summary["runs"][0]


def resumed(active_run, tmp_path, data_root, mirror, **options):
    """A copy of the trained run, resumed with an oracle: training and test
    are done, so it goes straight to the questions."""
    out = tmp_path / "run"
    shutil.copytree(active_run[0], out)
    summary = graphseq.run("fewshot-omniglot-active", out=out, data_root=data_root, data_mirror=mirror,
                           quiet=True, overrides=ASKED, resume=True, **options)
    return out, summary["runs"][0]


@pytest.mark.slow
def test_active_compares_learned_and_random_queries(active_run):
    out, figures = active_run
    for key in ("test_accuracy_learned", "test_accuracy_random", "test_accuracy_random_trained"):
        assert whole_fraction(figures[key], 6)
    assert "oracle_answers" not in figures and not (out / STORE_NAME).exists()
    assert (out / "checkpoint.pt").is_file() and (out / "checkpoint-random_trained.pt").is_file()


@pytest.mark.slow
def test_simulated_oracle_answers_every_episode_truthfully(active_run, tmp_path, data_root, mirror):
    out, figures = resumed(active_run, tmp_path, data_root, mirror, oracle="simulated")
    assert figures["oracle_answers"] == 5 and figures["oracle_answers_correct"] == 1.0
    assert figures["test_accuracy_learned"] == active_run[1]["test_accuracy_learned"]  # the stored test
    with LabelStore(out / STORE_NAME) as store:
        assert [(a.item, a.source) for a in store.answers("learned")] == [(e, "simulated") for e in range(5)]


@pytest.mark.slow
def test_resume_with_a_damaged_answer_store_changes_no_file(active_run, tmp_path, data_root, mirror):
    out, _ = resumed(active_run, tmp_path, data_root, mirror, oracle="simulated")
    store = out / STORE_NAME
    store.write_bytes(store.read_bytes()[:2000])
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(graphseq.GraphseqError, match=f"{store} is damaged or not an SQLite database"):
        graphseq.run("fewshot-omniglot-active", out=out, data_root=data_root, data_mirror=mirror, quiet=True,
                     overrides=ASKED, resume=True, oracle="simulated")
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # it used to test again first


def test_resume_with_a_damaged_named_checkpoint_changes_no_file(active_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(active_run[0], out)
    named = out / "checkpoint-random_trained.pt"  # the second training's, which --resume also continues
    named.write_bytes(named.read_bytes()[:3000])
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(graphseq.GraphseqError, match=f"{named} is damaged or not a graphseq checkpoint"):
        graphseq.run("fewshot-omniglot-active", out=out, quiet=True, overrides=ACTIVE, resume=True)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_resume_with_a_damaged_test_record_changes_no_file(active_run, tmp_path):
    # A resumed run reuses a finished test's figures from its test-<name>.json.
    out = tmp_path / "run"
    shutil.copytree(active_run[0], out)
    records = sorted(out.glob("test*.json"))
    assert records
    records[-1].write_text(records[-1].read_text()[:40])
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(graphseq.GraphseqError, match=f"{records[-1]} is damaged"):
        graphseq.run("fewshot-omniglot-active", out=out, quiet=True, overrides=ACTIVE, resume=True)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_file_oracle_answers_the_episodes_it_lists(active_run, tmp_path, data_root, mirror):
    labels = tmp_path / "answers.csv"
    labels.write_text("item,label\n1,3\n3,0\n")
    out, figures = resumed(active_run, tmp_path, data_root, mirror, oracle="file", labels=str(labels))
    assert figures["oracle_answers"] == 2
    with LabelStore(out / STORE_NAME) as store:
        assert [(a.item, a.label, a.source) for a in store.answers("learned")] == [(1, "3", "file"), (3, "0", "file")]


def test_an_oracle_that_could_not_ask_is_refused_before_the_training(tmp_path, data_root, mirror):
    # The oracle comes after hours of training: what would stop it is found first.
    answers = tmp_path / "answers.csv"
    answers.write_text("item,label\n1,3\n2,7\n")  # 5-way: no class 7
    for options, overrides, message in [
        ({"oracle": "file"}, {}, r"--oracle file needs --labels"),
        ({"oracle": "file", "labels": str(answers)}, {}, r"line 3: no class number 7; the numbers are 0 to 4"),
        ({"oracle": "simulated"}, {"oracle.training": "nosuch"}, r"training = 'nosuch': no earlier training"),
        ({"oracle": "simulated"}, {"model.active": False, "test.queries": ["learned"]}, r"needs an active model"),
    ]:
        with pytest.raises(graphseq.GraphseqError, match=message):
            graphseq.run("fewshot-omniglot-active", out=tmp_path / "refused", data_root=data_root,
                         data_mirror=mirror, quiet=True, overrides={**ASKED, **overrides}, **options)
        assert not (tmp_path / "refused").exists()


@pytest.mark.parametrize("options,overrides,message", [
    # --labels was silently ignored by the simulated (and the human) oracle.
    ({"oracle": "simulated", "labels": "answers.csv"}, {},
     "--labels has no use with --oracle simulated: it applies only with --oracle file"),
    ({}, {"oracle.noise": 0.1}, "oracle.noise has no use when oracle.oracle = '': it applies only with 'simulated'"),
    ({"oracle": "human"}, {"oracle.noise": 0.1},
     "oracle.noise has no use with --oracle human: it applies only with --oracle simulated"),
    ({"oracle": "simulated"}, {"oracle.picture_width": 30},
     "oracle.picture_width has no use with --oracle simulated: it applies only with --oracle human"),
    ({}, {"oracle.episodes": 3}, "oracle.episodes has no use when oracle.oracle = '': it applies only with "
                                 "'simulated' or 'human' or 'web' or 'file'"),
    ({}, {"oracle.training": "random_trained"}, "oracle.training has no use when oracle.oracle = ''"),
])
def test_oracle_settings_the_run_would_ignore_are_refused(tmp_path, monkeypatch, options, overrides, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "answers.csv").write_text("item,label\n0,1\n")
    with pytest.raises(graphseq.GraphseqError, match=re.escape(message)):
        graphseq.run("fewshot-omniglot-active", out=tmp_path / "refused", quiet=True,
                     overrides={**ACTIVE, **overrides}, **options)
    assert not (tmp_path / "refused").exists()


def run_human(out, data_root, mirror, answers):
    """``graphseq run fewshot-omniglot-active --oracle human --resume`` as a
    process whose standard input is a pipe holding ``answers``."""
    command = [sys.executable, "-m", "graphseq.cli", "run", "fewshot-omniglot-active", "--oracle", "human",
               "--resume", "--quiet", "--out", str(out), "--data-root", str(data_root),
               "--data-mirror", str(mirror)]
    command += [f"--set={key}={value}" for key, value in ASKED.items()]
    process = subprocess.run(command, input=answers, capture_output=True, text=True, timeout=1800)
    assert process.returncode == 0, process.stderr
    return process.stdout


def stored(out):
    with LabelStore(out / STORE_NAME) as store:
        return [(a.item, a.label, a.source) for a in store.answers("learned", skips=True)]


@pytest.mark.slow
def test_human_oracle_through_a_pipe_stores_exactly_the_accepted_answers(active_run, tmp_path, data_root,
                                                                         mirror):
    out = tmp_path / "me"
    shutil.copytree(active_run[0], out)
    # Episode 1: 0, then garbage, then undo (episode 1 again): 3; episode 2
    # skipped; episode 3: 1; then quit.
    transcript = run_human(out, data_root, mirror, "0\nbanana\nu\n3\ns\n1\nq\n")
    assert "'banana' is no class" in transcript
    assert "undone: episode 1 = class 0" in transcript
    assert "which class is this?" in transcript and "\u2588" in transcript  # the pictures
    assert "The model's answer for the query without your label" in transcript
    assert "with your answer the model says" in transcript
    assert stored(out) == [(0, "3", "human"), (1, None, "human"), (2, "1", "human")]

    # Resumed again: undo takes back episode 3's answer; then 4 for it, 2 for
    # episode 4, and the end of the input saves and stops.
    transcript = run_human(out, data_root, mirror, "u\n4\n2\n")
    assert "undone: episode 3 = class 1" in transcript
    assert "[episode 1 of" not in transcript and "[episode 2 of" not in transcript  # answered before
    assert stored(out) == [(0, "3", "human"), (1, None, "human"), (2, "4", "human"), (3, "2", "human")]

    listing = subprocess.run([sys.executable, "-m", "graphseq.cli", "labels", str(out)], capture_output=True,
                             text=True, check=True).stdout
    rows = list(csv.reader(io.StringIO(listing)))
    assert rows[0] == ["item", "label", "source", "time"]
    assert [row[:3] for row in rows[1:]] == [["0", "3", "human"], ["2", "4", "human"], ["3", "2", "human"]]

    # A run that is not resumed would start afresh: it is refused, and nothing is lost.
    with pytest.raises(graphseq.GraphseqError, match="already holds a run"):
        graphseq.run("fewshot-omniglot-active", out=out, data_root=data_root, data_mirror=mirror, quiet=True,
                     overrides=ACTIVE, oracle=HumanOracle(io.StringIO("1\n"), io.StringIO()))
    assert len(stored(out)) == 4


# On generated Omniglot (7 characters: 3 for training, 2 for validation, 2 = 8
# classes with the rotations for test), trained in seconds.
FAKE_ACTIVE = {**ASKED, "data.train_characters": 5, "data.val_characters": 2, "oracle.episodes": 3,
               **tiny_start(train_characters=5, val_characters=2)}


@pytest.fixture(scope="module")
def fake_omniglot(tmp_path_factory):
    from conftest import _write_fake_omniglot

    base = tmp_path_factory.mktemp("fake_omniglot")
    _write_fake_omniglot(base / "mirror", alphabets=(("Alpha", 3), ("Beta", 2)), evaluation=(("Gamma", 2),))
    return {"data_root": base / "data", "data_mirror": base / "mirror"}


@pytest.fixture(scope="module")
def answered_run(tmp_path_factory, fake_omniglot):
    """The active pipeline on generated Omniglot, its 3 episodes answered by the simulated oracle."""
    out = tmp_path_factory.mktemp("answered") / "run"
    summary = graphseq.run("fewshot-omniglot-active", out=out, quiet=True, overrides=FAKE_ACTIVE,
                           oracle="simulated", **fake_omniglot)
    assert summary["runs"][0]["oracle_answers_correct"] == 1.0
    return out


@pytest.fixture(scope="module")
def hand_answered_run(tmp_path_factory, fake_omniglot):
    """The same, its 3 episodes answered by a person (a script of class numbers): a resumed run keeps its oracle."""
    out = tmp_path_factory.mktemp("answered-by-hand") / "run"
    summary = graphseq.run("fewshot-omniglot-active", out=out, quiet=True, overrides=FAKE_ACTIVE,
                           oracle=HumanOracle(io.StringIO("0\n1\n2\n"), io.StringIO()), **fake_omniglot)
    assert summary["runs"][0]["oracle_answers"] == 3
    return out


def files_of(out):
    return {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_more_oracle_episodes_on_resume_keep_every_answer_on_its_image(active_run, tmp_path, data_root, mirror):
    # A truthful oracle's answers stay right only where each is applied to the image it was given for.
    out = tmp_path / "run"
    shutil.copytree(active_run[0], out)
    records = []
    for episodes in (3, 6):
        summary = graphseq.run("fewshot-omniglot-active", out=out, data_root=data_root, data_mirror=mirror,
                               quiet=True, resume=True, oracle="simulated",
                               overrides={**ACTIVE, "oracle.episodes": episodes})
        figures = summary["runs"][0]
        assert figures["oracle_answers"] == episodes and figures["oracle_answers_correct"] == 1.0
        records.append({p.name: p.read_text() for p in out.glob("*.json")})
    asked = [json.loads(record["oracle-images.json"])["asked"] for record in records]
    assert len(asked[0]) == 3 and asked[1][:3] == asked[0]
    assert [item for item, _, _ in stored(out)] == list(range(6))


@pytest.mark.slow
@pytest.mark.parametrize("oracle", ["simulated", None])
def test_a_longer_training_of_the_answered_model_is_refused_before_a_file_changes(answered_run, fake_omniglot,
                                                                                  tmp_path, oracle):
    out = tmp_path / "run"
    shutil.copytree(answered_run, out)
    before = files_of(out)
    with pytest.raises(graphseq.GraphseqError, match=r"^train_episodes: steps = 4, but .*labels.sqlite holds 3 "
                                                     r"oracle answers about the images the model of 2 steps asked "
                                                     r"for, .* keep steps = 2, or train longer in a new --out$"):
        graphseq.run("fewshot-omniglot-active", out=out, quiet=True, resume=True, oracle=oracle,
                     overrides={**FAKE_ACTIVE, "train.steps": 4}, **fake_omniglot)
    assert files_of(out) == before
    # The other training's model answers nothing: it may train on.
    summary = graphseq.run("fewshot-omniglot-active", out=out, quiet=True, resume=True, oracle="simulated",
                           overrides={**FAKE_ACTIVE, "train_random_trained.steps": 4}, **fake_omniglot)
    assert summary["runs"][0]["steps_random_trained"] == 4 and summary["runs"][0]["oracle_answers_correct"] == 1.0


@pytest.mark.slow
def test_answers_about_other_images_than_the_model_asks_about_are_refused(answered_run, fake_omniglot, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(answered_run, out)
    record = out / "oracle-images.json"
    images = json.loads(record.read_text())
    images["asked"][1] = [images["asked"][1][0], (images["asked"][1][1] + 1) % 20]
    record.write_text(json.dumps(images))
    for problem in (rf"^fewshot_oracle: episode 1 was answered about test image \[{images['asked'][1][0]}, "
                    r"\d+\] \(class, drawing\), but the model now asks about \[",
                    f"holds oracle answers but {re.escape(str(record))} is missing"):
        before = files_of(out)
        with pytest.raises(graphseq.GraphseqError, match=problem):
            graphseq.run("fewshot-omniglot-active", out=out, quiet=True, resume=True, oracle="simulated",
                         overrides=FAKE_ACTIVE, **fake_omniglot)
        # Refused after the (resumed, finished) trainings and tests, before a question: the answers stay.
        assert {p: v for p, v in files_of(out).items() if p.name in (STORE_NAME, record.name)} == \
            {p: v for p, v in before.items() if p.name in (STORE_NAME, record.name)}
        record.unlink(missing_ok=True)  # the second time: no record at all


@pytest.mark.slow
def test_answers_for_more_oracle_episodes_than_the_run_has_are_refused_before_a_file_changes(
        answered_run, fake_omniglot, tmp_path):
    # A folder as a refused resume used to leave it: config.toml saying 2 episodes, the store holding 3 answers.
    # The refusal came after the trainings and tests had run again and rewritten their files.
    out = tmp_path / "run"
    shutil.copytree(answered_run, out)
    config = out / "config.toml"
    lines = [line for line in config.read_text().splitlines() if not line.startswith("# graphseq wrote")]
    assert lines.count("episodes = 3") == 1  # the oracle's
    config.write_text("\n".join(lines).replace("episodes = 3", "episodes = 2") + "\n")
    before = files_of(out)
    message = (rf"^oracle.episodes = 2, but {re.escape(str(out / STORE_NAME))} holds an answer for episode 3 "
               r"\(item 2 in 'graphseq labels'\), and a resumed run keeps every answer; set "
               r"oracle.episodes to at least 3$")
    settings = {key: value for key, value in FAKE_ACTIVE.items() if key != "oracle.episodes"}
    with pytest.raises(graphseq.GraphseqError, match=message):
        graphseq.run("fewshot-omniglot-active", out=out, quiet=True, resume=True, overrides=settings,
                     oracle="simulated", **fake_omniglot)
    assert files_of(out) == before
    summary = graphseq.run("fewshot-omniglot-active", out=out, quiet=True, resume=True,
                           overrides={**settings, "oracle.episodes": 3}, **fake_omniglot)
    assert summary["runs"][0]["oracle_answers"] == 3


@pytest.mark.slow
@pytest.mark.parametrize("columns", [30, 40, 60, 80])
def test_the_human_prompt_fits_the_terminal_width(hand_answered_run, fake_omniglot, tmp_path, monkeypatch,
                                                  columns):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(hand_answered_run, "run")
    monkeypatch.setenv("COLUMNS", str(columns))
    output = io.StringIO()
    graphseq.run("fewshot-omniglot-active", out="run", quiet=True, resume=True,
                 oracle=HumanOracle(io.StringIO("0\n1\nq\n"), output),
                 overrides={**FAKE_ACTIVE, "oracle.episodes": 6}, **fake_omniglot)
    lines = output.getvalue().splitlines()
    command = (f"graphseq run fewshot-omniglot-active --resume --out run --data-root {fake_omniglot['data_root']} "
               f"--data-mirror {fake_omniglot['data_mirror']} --oracle human")
    assert lines[-1] == command  # whole, to copy (with the data places the run was given)
    said = " ".join(output.getvalue().split())  # the text as read, wrapped at any width
    assert "which class is this?" in said and "with your answer the model says" in said
    assert max(len(line) for line in lines[:-1]) <= columns
    # The pictures fill the width: as many 28-column pictures as fit, 2 columns apart.
    assert max(len(line) for line in lines if "\u2588" in line) > columns - 30
    # Two pictures of 28 columns (Omniglot's own pixels) fit beside each other from 58 columns on; below, the
    # query is under the image, and below 28 columns the pictures shrink to the terminal's width.
    where = "the image on the left; the right one" if columns >= 58 else "the upper image; the lower one"
    assert f"The model asks about {where} is the query" in said


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fewshot-miniimagenet-5w1s", "fewshot-miniimagenet-5w5s"])
def test_miniimagenet_pipelines_on_generated_files(name, tmp_path, write_fake_miniimagenet):
    write_fake_miniimagenet(tmp_path / "data", classes=(6, 5, 5), per_class=7)
    summary = graphseq.run(name, out=tmp_path / "run", data_root=tmp_path / "data", quiet=True,
                           overrides=tiny(("train", "test")))
    assert summary["runs"][0]["test_episodes"] == 6


@pytest.mark.parametrize("overrides,message", [
    # 100,000 ways used to build a model that filled the memory before the classes were counted.
    ({"data.ways": 100_000}, r"ways = 100000 needs 100000 classes, but the train split has 12 "
                             r"\(with rotations, 4 classes a character\); lower ways"),
    ({"data.shots": 15, "data.unlabelled": 5}, r"shots = 15 \+ unlabelled = 5 \+ 1 query need 21 images of a "
                                               r"class, but a class has 20; lower shots or unlabelled"),
    ({"data.val_characters": 5}, r"val_characters = 5 must be below train_characters = 5"),
    ({"data.train_characters": 7}, r"train_characters = 7 must be below the 7 characters found"),
])
def test_episodes_the_data_cannot_give_are_refused_by_setting_before_a_model_is_built(
        fake_omniglot, tmp_path, monkeypatch, overrides, message):
    from graphseq.models import fewshot

    monkeypatch.setattr(fewshot.FewShotGNN, "__init__", lambda *a, **k: pytest.fail("built a model"))
    with pytest.raises(graphseq.GraphseqError, match=message):
        graphseq.run("fewshot-omniglot-5w1s", out=tmp_path / "run", quiet=True,
                     overrides={**tiny(("train", "test")), "data.train_characters": 5, "data.val_characters": 2,
                                **overrides}, **fake_omniglot)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name,overrides,message", [
    # A model without a query head trains and tests with none: the query settings were ignored.
    ("fewshot-omniglot-5w1s", {"train.query": "random"},
     "train.query = 'random' has no use when model.active = false"),
    ("fewshot-omniglot-5w1s", {"test.queries": ["random"]},
     "test.queries = ['random'] has no use when model.active = false"),
    ("fewshot-omniglot-active", {"test.queries": ["learned", "learned"]},
     "test.queries = ['learned', 'learned'] is not allowed: it must be a non-empty list of distinct items"),
    # Without validation characters there are no validation episodes to score.
    ("fewshot-omniglot-5w1s", {"data.val_characters": 0},
     "train.eval_every = 2 has no use when data.val_characters = 0"),
    # Without validation episodes there is nothing to score, at any interval or in any batches.
    ("fewshot-omniglot-5w1s", {"train.eval_episodes": 0},
     "train.eval_every has no use when train.eval_episodes = 0: it applies only when train.eval_episodes is a "
     "number > 0"),
])
def test_settings_the_training_would_ignore_are_refused_before_writing(fake_omniglot, tmp_path, name, overrides,
                                                                      message):
    settings = ACTIVE if name.endswith("active") else tiny(("train", "test"))
    with pytest.raises(graphseq.GraphseqError, match=re.escape(message)):
        graphseq.run(name, out=tmp_path / "run", quiet=True, overrides={**settings, **overrides}, **fake_omniglot)
    assert not (tmp_path / "run").exists()


def test_a_training_without_validation_runs_with_the_pipelines_own_eval_settings(fake_omniglot, tmp_path):
    overrides = {key: value for key, value in tiny(("train", "test")).items() if ".eval_" not in key}
    summary = graphseq.run("fewshot-omniglot-5w1s", out=tmp_path / "run", quiet=True, **fake_omniglot,
                           overrides={**overrides, "data.train_characters": 5, "data.val_characters": 0})
    assert summary["runs"][0]["steps"] == 2 and "val_accuracy" not in summary["runs"][0]


@pytest.mark.parametrize("overrides,split,message", [
    ({"data.shots": 5}, "train", r"shots = 5 \+ unlabelled = 0 \+ 1 query need 6 images of a class, but a class of "
                                 r"the train split has 3 \(.*train\.csv\); lower shots or unlabelled"),
    ({"data.ways": 6}, "val", r"ways = 6 needs 6 classes, but the val split has 5 \(.*val\.csv\); lower ways"),
])
def test_miniimagenet_episodes_its_csvs_cannot_give_are_refused_before_decoding(
        tmp_path, write_fake_miniimagenet, monkeypatch, overrides, split, message):
    from graphseq.data import miniimagenet

    write_fake_miniimagenet(tmp_path / "data", classes=(6, 5, 5), per_class=3)
    monkeypatch.setattr(miniimagenet, "_decode", lambda *a, **k: pytest.fail("decoded the images"))
    with pytest.raises(graphseq.GraphseqError, match=message):
        graphseq.run("fewshot-miniimagenet-5w1s", out=tmp_path / "run", data_root=tmp_path / "data", quiet=True,
                     overrides={**tiny(("train", "test")), **overrides})
    assert not (tmp_path / "run").exists() and not (tmp_path / "data" / "mini-imagenet" / "processed").exists()


def test_the_papers_schedule_of_the_active_pipeline_is_one_switch_away(fake_omniglot, tmp_path):
    # fewshot-omniglot-active is the CPU recipe, which builds its own start; -paper is the paper's schedule.
    from graphseq.runner.config import read_config, resolve_pipeline
    paper, cpu = (read_config(resolve_pipeline(name)) for name in ("fewshot-omniglot-active-paper",
                                                                   "fewshot-omniglot-active"))
    assert paper["train"]["steps"] == paper["train_random_trained"]["steps"] == 80_000 and "start" not in paper
    assert cpu["start"]["pipeline"] == "fewshot-omniglot-5w1s" and cpu["train"]["steps"] == 1_000
    overrides = {**tiny(("train", "test"), ("train_random_trained", "test_random_trained")),
                 "data.train_characters": 5, "data.val_characters": 2}
    summary = graphseq.run("fewshot-omniglot-active-paper", out=tmp_path / "run", quiet=True, overrides=overrides,
                           **fake_omniglot)
    assert summary["runs"][0]["steps"] == summary["runs"][0]["steps_random_trained"] == 2
    assert not (tmp_path / "run" / "start").exists()
