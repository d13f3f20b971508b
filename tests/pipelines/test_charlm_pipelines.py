"""Smoke runs of the charlm pipelines on the real tiny-shakespeare for a few
steps, resuming from a checkpoint, and ``graphseq sample``."""
import math
import re
import shutil

import pytest
import torch

from graphseq import GraphseqError, run, training
from graphseq.cli import main
from graphseq.io import load_checkpoint, save_checkpoint
from graphseq.runner.config import checked_config

# A model and budget small enough for seconds on a CPU; real data all the same.
TINY = {"model.hidden_size": 16, "model.embedding_dim": 8, "train.batch_size": 4,
        "train.window": 16, "train.minutes": 0.0, "train.steps": 4, "train.eval_every": 2,
        "train.eval_chars": 2000, "train.checkpoint_every": 2, "train.eval_batch_size": 1024,
        "sample.length": 20}


def _run(name, out, data_root, mirror, resume=False, **overrides):
    return run(name, overrides={**TINY, **overrides}, out=out, data_root=data_root,
               data_mirror=mirror, quiet=True, resume=resume)["runs"][0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, data_root, mirror):
    out = tmp_path_factory.mktemp("charlm-lstm")
    return out, _run("charlm-lstm", out, data_root, mirror)


@pytest.mark.slow
def test_charlm_lstm_writes_its_results(trained):
    out, figures = trained
    assert figures["steps"] == 4
    assert figures["val_bits"] == pytest.approx(figures["val_nats"] / torch.log(torch.tensor(2.0)).item())
    for name in ("checkpoint.pt", "curves.png", "history.json", "sample.txt", "metrics.json"):
        assert (out / name).is_file(), name
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "sample.txt").read_text().startswith("ROMEO:")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["charlm-rnn", "charlm-onlstm"])
def test_other_charlm_pipelines_run_a_few_steps(name, tmp_path, data_root, mirror):
    overrides = {"model.chunk_size": 4} if name == "charlm-onlstm" else {}
    figures = _run(name, tmp_path, data_root, mirror, **overrides)
    assert figures["steps"] == 4 and math.isfinite(figures["val_nats"])
    assert (tmp_path / "sample.txt").read_text().startswith("ROMEO:")


@pytest.mark.slow
def test_resume_continues_from_the_checkpoint(tmp_path, data_root, mirror, monkeypatch):
    straight = _run("charlm-lstm", tmp_path / "straight", data_root, mirror,
                    **{"model.dropout": 0.2})
    # The same four-step run, killed right after its checkpoint at step 2
    # (the rate schedule spans the budget, so the budget stays four steps).
    write = training._save

    def write_then_stop(path, model, optimizer, scheduler, scaler, progress, *rest):
        write(path, model, optimizer, scheduler, scaler, progress, *rest)
        if progress.step == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(training, "_save", write_then_stop)
    with pytest.raises(KeyboardInterrupt):
        _run("charlm-lstm", tmp_path / "split", data_root, mirror, **{"model.dropout": 0.2})
    monkeypatch.undo()
    assert load_checkpoint(tmp_path / "split" / "checkpoint.pt")["step"] == 2
    resumed = _run("charlm-lstm", tmp_path / "split", data_root, mirror, resume=True,
                   **{"model.dropout": 0.2})
    assert "resumed from" in (tmp_path / "split" / "log.txt").read_text()
    assert resumed["steps"] == 4
    # Dropout draws, the carried state, Adam's moments and the rate schedule
    # all continue, so two steps plus two resumed steps equal four steps in one go.
    assert resumed["val_nats"] == pytest.approx(straight["val_nats"], abs=1e-6)
    one = load_checkpoint(tmp_path / "straight" / "checkpoint.pt")
    two = load_checkpoint(tmp_path / "split" / "checkpoint.pt")
    assert [e["step"] for e in one["history"]] == [e["step"] for e in two["history"]] == [2, 4]
    assert one["optimizer"]["param_groups"][0]["lr"] == two["optimizer"]["param_groups"][0]["lr"]
    for key, weight in one["model"].items():
        assert torch.allclose(weight, two["model"][key], atol=1e-6), key


@pytest.mark.slow
def test_the_rate_ends_at_lr_end_at_the_last_step(tmp_path, data_root, mirror):
    _run("charlm-rnn", tmp_path, data_root, mirror, **{"train.lr": 0.004, "train.lr_end": 0.25})
    rate = load_checkpoint(tmp_path / "checkpoint.pt")["optimizer"]["param_groups"][0]["lr"]
    assert rate == pytest.approx(0.004 * 0.25)


def test_lr_end_without_a_step_budget_is_refused_and_the_files_own_is_let_be(tmp_path, data_root, mirror):
    # With steps = 0 the rate stays at lr: lr_end was ignored without a word.
    with pytest.raises(GraphseqError, match=re.escape(
            "train.lr_end has no use when train.steps = 0: it applies only when train.steps is a number > 0; "
            "leave it out")):
        run("charlm-lstm", overrides={**TINY, "train.steps": 0, "train.minutes": 0.01, "train.lr_end": 0.05},
            out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True)
    assert not (tmp_path / "run").exists()
    # The file's lr_end, for its step budget, is let be when --set takes the budget away.
    assert "lr_end" not in checked_config("charlm-lstm", ["train.steps=0", "train.minutes=1"])["train"]


def test_resume_without_a_checkpoint_is_an_error(trained, tmp_path, data_root, mirror):
    shutil.copytree(trained[0], tmp_path / "run")
    (tmp_path / "run" / "checkpoint.pt").unlink()
    with pytest.raises(GraphseqError, match="checkpoint.pt is missing"):
        _run("charlm-lstm", tmp_path / "run", data_root, mirror, resume=True)


def test_sample_prints_prime_and_length_characters(trained, capsys):
    out, _ = trained
    assert main(["sample", str(out), "--prime", "ROMEO:", "--length", "50",
                 "--temperature", "0.8", "--seed", "0"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("ROMEO:") and len(text) == len("ROMEO:") + 50 + 1  # print's line break


def test_sample_writes_a_heat_map_of_the_chosen_units(trained, tmp_path, capsys):
    out, _ = trained
    source = tmp_path / "speech.txt"
    source.write_text("ROMEO:\nBut, soft! what light through yonder window breaks?\n")
    page = tmp_path / "units.html"
    assert main(["sample", str(out), "--cells", "3,7", "--text-file", str(source),
                 "--html", str(page)]) == 0
    spans = re.findall(r"<span style=\"background:rgb", page.read_text())
    assert len(spans) == 2 * len(source.read_text())
    assert "units 3, 7" in capsys.readouterr().out


def test_sample_of_a_folder_without_a_checkpoint_fails_cleanly(tmp_path, capsys):
    assert main(["sample", str(tmp_path)]) == 2
    assert "no checkpoint.pt" in capsys.readouterr().err


# What the checkpoint.pt of a bert-pretrain and of a caption-* run hold at the top.
OTHER_CHECKPOINTS = {"bert": {"model": {}, "config": {"vocab_size": 300, "hidden_size": 16}},
                     "caption": {"model": {}, "model_config": {"decoder": "attention", "image_size": 64},
                                 "vocabulary": ["<pad>", "<start>", "<end>", "<unk>", "a"]}}


@pytest.mark.parametrize("kind, reason", [("bert", "no 'model_config'"),
                                          ("caption", "unexpected keyword argument 'decoder'")])
def test_sample_of_another_pipelines_checkpoint_fails_cleanly(kind, reason, tmp_path, capsys):
    save_checkpoint(OTHER_CHECKPOINTS[kind], tmp_path / "checkpoint.pt")
    assert main(["sample", str(tmp_path), "--length", "5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"graphseq: error: {tmp_path / 'checkpoint.pt'} is not a charlm checkpoint (")
    assert reason in err and err.count("\n") == 1


def test_sample_refuses_a_text_file_that_is_not_utf8(trained, tmp_path, capsys):
    out, _ = trained
    source = tmp_path / "latin1.txt"
    source.write_bytes("ROMEO: Adi\xf3s\n".encode("latin-1"))
    page = tmp_path / "units.html"
    assert main(["sample", str(out), "--text-file", str(source), "--html", str(page)]) == 2
    err = capsys.readouterr().err
    assert err == f"graphseq: error: {source} is not UTF-8 text: invalid continuation byte at byte 10\n"
    assert not page.exists()


@pytest.mark.parametrize("name", ["config.toml", "checkpoint.pt", "metrics.json"])
def test_sample_html_never_overwrites_a_file_of_the_run(trained, name, capsys):
    out, _ = trained
    before = (out / name).read_bytes()
    assert main(["sample", str(out), "--length", "20", "--html", str(out / name)]) == 2
    assert capsys.readouterr().err == (f"graphseq: error: --html {out / name}: "
                                       f"will not overwrite a file that is not .html\n")
    assert (out / name).read_bytes() == before


NOTHING_VARIES = ("no feature of the text (line position, quotes, words, ...) varies along it, "
                  "so no unit tracks one")


@pytest.mark.parametrize("text, args, message", [
    ("", ["--html"], "the text is empty; --html and --units need at least 2 characters"),
    ("R", ["--html"], "the text is 1 character long; --html and --units need at least 2 characters"),
    (None, ["--length", "0", "--html"], "the text is empty; --html and --units need at least 2 characters"),
    (None, ["--prime", "R", "--length", "0", "--units", "2", "--html"], "the text is 1 character long"),
    ("\n\n\n", ["--html"], f"{NOTHING_VARIES}; name the units to draw with --cells"),
    ("\n\n\n", ["--units", "2", "--html"], NOTHING_VARIES),
], ids=["empty", "one character", "length 0", "prime only", "no feature varies", "units"])
def test_sample_refuses_to_map_units_over_a_text_too_short(trained, tmp_path, capsys, text, args, message):
    out, _ = trained
    if text is not None:
        (tmp_path / "speech.txt").write_text(text)
        args = ["--text-file", str(tmp_path / "speech.txt")] + args
    page = tmp_path / "units.html"
    assert main(["sample", str(out)] + args + [str(page)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not page.exists()


@pytest.mark.parametrize("setting,message", [
    ({"train.batch_size": 10**9}, r"the training text \(1 - val_fraction\) of .* is too short for batch_size = "
                                  r"1,000,000,000 streams .*; lower batch_size or window"),
    # Found before the first step, not at the first evaluation after training.
    ({"train.eval_batch_size": 10**9}, r"the validation text \(val_fraction\) .* too short for eval_batch_size = "
                                       r"1,000,000,000 streams .*; lower eval_batch_size$"),
])
def test_streams_too_many_for_the_text_name_their_setting_before_any_step(tmp_path, data_root, mirror,
                                                                         monkeypatch, setting, message):
    from graphseq.stages import charlm
    monkeypatch.setattr(charlm, "train_steps", lambda *a, **k: pytest.fail("reached training"))
    with pytest.raises(GraphseqError, match=message):
        _run("charlm-lstm", tmp_path / "run", data_root, mirror, **setting)
    assert not (tmp_path / "run").exists()
