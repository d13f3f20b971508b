"""The few-shot oracle stage with a person at the prompt, on generated
Omniglot: a closed standard input is refused before the run writes a file,
a resumed run may draw the pictures at another width, and keeps its oracle."""
import io

import pytest

import graphseq
from graphseq.active.store import STORE_NAME, LabelStore


def tiny(*tables):
    overrides = {}
    for train, test in tables:
        overrides.update({f"{train}.steps": 2, f"{train}.batch_size": 2, f"{train}.eval_every": 2,
                          f"{train}.eval_episodes": 4, f"{train}.eval_batch_size": 4,
                          f"{train}.checkpoint_every": 1, f"{test}.episodes": 6, f"{test}.batch_size": 6})
    return overrides


def tiny_start(**data):
    """The [start] run's overrides, tiny, on the same data."""
    settings = {**tiny(("train", "test")), **{f"data.{key}": value for key, value in data.items()}}
    return {"start.overrides": [f"{key}={value}" for key, value in settings.items()]}


SMALL = {**tiny(("train", "test"), ("train_random_trained", "test_random_trained")),
         "data.train_characters": 5, "data.val_characters": 2, "oracle.episodes": 3,
         **tiny_start(train_characters=5, val_characters=2)}


@pytest.fixture(scope="module")
def omniglot(tmp_path_factory):
    from conftest import _write_fake_omniglot

    base = tmp_path_factory.mktemp("fake_omniglot")
    _write_fake_omniglot(base / "mirror", alphabets=(("Alpha", 3), ("Beta", 2)), evaluation=(("Gamma", 2),))
    return {"data_root": base / "data", "data_mirror": base / "mirror"}


def test_a_closed_standard_input_is_refused_before_any_file(omniglot, tmp_path, monkeypatch):
    monkeypatch.setattr("sys.stdin", None)  # what Python makes of `<&-`
    with pytest.raises(graphseq.GraphseqError, match="reads your answers from standard input, which is closed"):
        graphseq.run("fewshot-omniglot-active", out=tmp_path / "run", quiet=True, oracle="human", overrides=SMALL,
                     **omniglot)
    assert not (tmp_path / "run").exists()


def test_the_picture_width_is_a_setting_a_resumed_run_may_change():
    from graphseq.runner.run_folder import differences

    started = {"oracle": {"stage": "fewshot_oracle", "oracle": "human", "picture_width": 20}}
    assert differences(started, {"oracle": {**started["oracle"], "picture_width": 12}}) == []


@pytest.mark.slow
def test_a_resumed_persons_run_may_draw_the_pictures_at_another_width(omniglot, tmp_path, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.setattr("sys.stdin", io.StringIO("0\nq\n"))
    graphseq.run("fewshot-omniglot-active", out=out, quiet=True, oracle="human", overrides=SMALL, **omniglot)
    monkeypatch.setattr("sys.stdin", io.StringIO("1\n1\n"))
    summary = graphseq.run("fewshot-omniglot-active", out=out, quiet=True, resume=True, oracle="human",
                           overrides={**SMALL, "oracle.picture_width": 12}, **omniglot)
    assert summary["runs"][0]["oracle_answers"] == 3
    with LabelStore(out / STORE_NAME) as store:
        assert [(a.item, a.label) for a in store.answers("learned")] == [(0, "0"), (1, "1"), (2, "1")]


@pytest.mark.parametrize("started, now, refused", [
    ({"oracle": "human"}, {"oracle": "simulated"}, "--oracle simulated (the run has oracle.oracle = 'human')"),
    ({"oracle": "human"}, {"oracle": "file", "labels": "/a.csv"}, "--labels /a.csv (the run has oracle.labels = '')"),
    ({"oracle": "file", "labels": "/a.csv"}, {"oracle": "file", "labels": "/b.csv"},
     "--labels /b.csv (the run has oracle.labels = '/a.csv')"),
    ({}, {"oracle": "human"}, None),  # trained without an oracle: nobody answered yet
    ({"oracle": "human"}, {"oracle": "human"}, None),
])
def test_a_resumed_run_keeps_its_oracle_and_labels_file(started, now, refused):
    from graphseq.runner.run_folder import differences

    section = {"stage": "fewshot_oracle"}
    found = differences({"oracle": {**section, **started}}, {"oracle": {**section, **now}})
    assert (refused is None and found == []) or refused in found[0]


@pytest.mark.slow
def test_a_persons_run_resumed_with_another_oracle_is_refused_and_changes_no_file(omniglot, tmp_path, monkeypatch,
                                                                                 capsys):
    # It ran on: the store then mixed human and simulated answers, and config.toml said simulated.
    from graphseq.cli import main

    out = tmp_path / "run"
    monkeypatch.setattr("sys.stdin", io.StringIO("0\nq\n"))
    graphseq.run("fewshot-omniglot-active", out=out, quiet=True, oracle="human", overrides=SMALL, **omniglot)
    assert "oracle: 1 answer stored" in (out / "log.txt").read_text()  # was "1 answers"
    labels = tmp_path / "answers.csv"
    labels.write_text("item,label\n1,0\n")
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    common = ["run", "fewshot-omniglot-active", "--resume", "--quiet", "--out", str(out),
              "--data-root", str(omniglot["data_root"]), "--data-mirror", str(omniglot["data_mirror"]),
              *(f"--set={key}={value}" for key, value in SMALL.items())]
    for flags, said in [(["--oracle", "simulated"], "--oracle simulated (the run has oracle.oracle = 'human')"),
                        (["--labels", str(labels)], f"--labels {labels} (the run has oracle.labels = '')")]:
        assert main([*common, *flags]) == 2
        assert said in capsys.readouterr().err
        assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before
    with LabelStore(out / STORE_NAME) as store:
        assert [(a.item, a.source) for a in store.answers("learned")] == [(0, "human")]
