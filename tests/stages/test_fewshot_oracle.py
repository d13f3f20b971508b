"""The few-shot oracle stage with a person at the prompt, on generated
Omniglot: a closed standard input is refused before the run writes a file,
and a resumed run may draw the pictures at another width."""
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


SMALL = {**tiny(("train", "test"), ("train_random_trained", "test_random_trained")),
         "data.train_characters": 5, "data.val_characters": 2, "oracle.episodes": 3}


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
