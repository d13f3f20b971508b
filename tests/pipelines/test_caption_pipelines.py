"""Smoke runs of the captioning pipelines (the three shapes decoders, and
caption-coco on small files in COCO's layout), resuming, and ``graphseq
caption`` on an image file."""
import json
import math
import re
import shutil

import pytest
import torch
from PIL import Image

from graphseq import GraphseqError, run
from graphseq.cli import main
from graphseq.data.shapes import generate_split
from graphseq.io import load_checkpoint
from graphseq.models.caption_search import caption_image
from graphseq.models.captioner import load_captioner

# Data, model and budget small enough for seconds on a CPU.
TINY = {"data.train": 64, "data.val": 12, "data.test": 12, "data.test_unseen": 12,
        "encoder.channels": [4, 8, 8, 16], "model.embedding_dim": 8, "model.hidden_size": 16,
        "train.steps": 4, "train.eval_every": 2, "train.eval_images": 6, "train.batch_size": 8,
        "train.checkpoint_every": 2, "train.max_length": 8, "evaluate.beam_size": 2,
        "evaluate.max_length": 8,
        # A constant rate (the cosine schedule depends on the whole budget, so
        # a resumed run with a larger one would differ) and some dropout, so
        # that resuming must restore its random state.
        "train.final_lr_fraction": 1.0, "model.dropout": 0.3}


# The encoder's pretraining, which an encoder copied from another run (encoder.from_run) does without.
PRETRAIN = {"encoder.pretrain_steps": 4, "encoder.eval_every": 2, "encoder.batch_size": 8}


def _run(name, out, resume=False, **overrides):
    pretrain = {} if overrides.get("encoder.from_run") else PRETRAIN
    return run(name, overrides={**TINY, **pretrain, **overrides}, out=out, quiet=True, resume=resume)["runs"][0]


@pytest.fixture(scope="module")
def attention_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("caption-attention")
    return out, _run("caption-shapes-attention", out)


@pytest.mark.slow
def test_attention_pipeline_writes_its_results(attention_run):
    out, figures = attention_run
    assert figures["steps"] == 4 and figures["encoder_steps"] == 4
    for split in ("val", "test", "test_unseen"):
        for method in ("greedy", "beam"):
            for key in ("bleu1", "bleu4", "objects", "object_precision", "exact"):
                value = figures[f"{split}_{method}_{key}"]
                assert 0.0 <= value <= 1.0, (split, method, key)
    for name in ("captioner.pt", "checkpoint.pt", "encoder_checkpoint.pt", "curves.png",
                 "encoder_curves.png", "attention.png", "captions_test.json", "captions_test_unseen.json"):
        assert (out / name).is_file(), name
    assert (out / "attention.png").read_bytes()[:4] == b"\x89PNG"
    captions = json.loads((out / "captions_test.json").read_text())
    assert len(captions) == 12 and set(captions[0]) == {"image", "references", "greedy", "beam"}


@pytest.fixture(scope="module")
def init_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("caption-init")
    return out, _run("caption-shapes-init", out)


@pytest.mark.slow
def test_init_pipeline_runs_a_few_steps(init_run):
    out, figures = init_run
    assert figures["steps"] == 4 and math.isfinite(figures["test_beam_bleu1"])
    assert not (out / "attention.png").exists()  # no attention to draw


def test_input_pipeline_reuses_a_pretrained_encoder_and_fine_tunes_it(attention_run, tmp_path):
    attention_out, _ = attention_run
    figures = _run("caption-shapes-input", tmp_path, **{
        "encoder.from_run": str(attention_out), "train.finetune_encoder": True, "train.encoder_lr": 0.01})
    assert figures["steps"] == 4 and math.isfinite(figures["test_beam_bleu1"])
    weight = "encoder.net.0.weight"
    pretrained = load_checkpoint(attention_out / "encoder_checkpoint.pt")["best_model"][weight]
    # The run keeps its own copy of the encoder it started from.
    assert torch.equal(load_checkpoint(tmp_path / "encoder_checkpoint.pt")["best_model"][weight], pretrained)
    assert not torch.equal(load_checkpoint(tmp_path / "captioner.pt")["model"][weight], pretrained)
    # By default the pretrained encoder stays as it is.
    assert torch.equal(load_checkpoint(attention_out / "captioner.pt")["model"][weight], pretrained)


def test_an_encoder_from_a_run_of_other_data_is_refused(attention_run, tmp_path):
    attention_out, _ = attention_run
    with pytest.raises(GraphseqError, match="other attributes"):
        _run("caption-shapes-init", tmp_path, **{"encoder.from_run": str(attention_out), "data.max_objects": 1})
    with pytest.raises(GraphseqError, match="no encoder_checkpoint.pt"):
        _run("caption-shapes-init", tmp_path, **{"encoder.from_run": str(tmp_path)})


def test_heads_that_do_not_divide_the_width_are_refused_before_writing(tmp_path):
    # Found by the captioner stage, it came after the encoder's pretraining had written its checkpoint.
    with pytest.raises(GraphseqError, match="model.heads = 3 must divide model.hidden_size = 16"):
        _run("caption-shapes-attention", tmp_path / "run", **{"model.heads": 3})
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name,overrides,message", [
    # A copied encoder is not pretrained: the pretraining's keys were ignored.
    ("caption-shapes-input", {"encoder.from_run": "elsewhere", "encoder.pretrain_steps": 4},
     "encoder.pretrain_steps has no use when encoder.from_run = 'elsewhere': it applies only when "
     "encoder.from_run is empty (not set)"),
    ("caption-shapes-init", {"train.encoder_lr": 0.01},
     "train.encoder_lr has no use when train.finetune_encoder = False: it applies only with True"),
    ("caption-shapes-init", {"evaluate.figure_images": 2},
     "evaluate.figure_images = 2 has no use when model.decoder = 'init'"),
    ("caption-shapes-attention", {"evaluate.figure_images": 2, "evaluate.splits": ["val"]},
     "evaluate.figure_images has no use when evaluate.splits = ['val']: it applies only when evaluate.splits is "
     "a list that holds 'test'"),
    ("caption-shapes-attention", {"evaluate.figure_images": 2, "data.test": 0},
     "evaluate.figure_images = 2 has no use when data.test = 0"),
    # It was cut to the 12 validation images without a word.
    ("caption-shapes-attention", {"train.eval_images": 13},
     "train.eval_images = 13 is more than the 12 validation images (data.val = 12)"),
    ("caption-shapes-attention", {"evaluate.splits": ["val", "val"]},
     "evaluate.splits = ['val', 'val'] is not allowed: it must be a non-empty list of distinct items"),
])
def test_settings_the_run_would_ignore_are_refused_before_writing(tmp_path, name, overrides, message):
    with pytest.raises(GraphseqError, match=re.escape(message)):
        _run(name, tmp_path / "run", **overrides)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_resume_continues_from_the_checkpoint(init_run, tmp_path):
    straight_out, straight = init_run
    _run("caption-shapes-init", tmp_path, **{"train.steps": 2})
    resumed = _run("caption-shapes-init", tmp_path, resume=True)
    assert resumed["steps"] == 4
    one = load_checkpoint(straight_out / "checkpoint.pt")["model"]
    two = load_checkpoint(tmp_path / "checkpoint.pt")["model"]
    for key, weight in one.items():
        assert torch.allclose(weight, two[key], atol=1e-6), key
    assert resumed["test_greedy_bleu1"] == pytest.approx(straight["test_greedy_bleu1"])


@pytest.mark.slow
def test_a_run_stopped_before_the_decoders_first_checkpoint_resumes(tmp_path):
    _run("caption-shapes-init", tmp_path, **{"train.steps": 2})
    before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    (tmp_path / "checkpoint.pt").unlink()
    # The checkpoint lost after the decoder's training had started: a resume would train it afresh, silently.
    with pytest.raises(GraphseqError, match=rf"^--resume: {re.escape(str(tmp_path / 'checkpoint.pt'))} is "
                                            r"missing, but the decoder's training had started \(captioner\.pt, "
                                            r"captions_test\.json, .*curves\.png are there\)"):
        _run("caption-shapes-init", tmp_path, resume=True)
    assert {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()} == \
        {path: data for path, data in before.items() if path.name != "checkpoint.pt"}
    for name in ("captioner.pt", "curves.png", "captions_val.json", "captions_test.json", "captions_test_unseen.json",
                 "metrics.json"):
        (tmp_path / name).unlink()  # as if stopped right after pretraining
    resumed = _run("caption-shapes-init", tmp_path, resume=True)
    assert resumed["steps"] == 4 and resumed["encoder_steps"] == 4
    assert "resumed from" in (tmp_path / "log.txt").read_text()  # the encoder's checkpoint


def test_a_damaged_decoder_checkpoint_is_refused_on_resume_and_changes_no_file(tmp_path):
    # It was found by the decoder's training, after the encoder's stage had rewritten its files.
    _run("caption-shapes-init", tmp_path, **{"train.steps": 2})
    (tmp_path / "checkpoint.pt").write_bytes((tmp_path / "checkpoint.pt").read_bytes()[:300])
    before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    with pytest.raises(GraphseqError, match=r"checkpoint\.pt is damaged or not a graphseq checkpoint"):
        _run("caption-shapes-init", tmp_path, resume=True)
    assert {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()} == before


def _write_coco(root, split, count, offset):
    data = generate_split("train", count, seed=offset, image_size=32)
    (root / split).mkdir(parents=True)
    images, notes = [], []
    for i, (image, texts) in enumerate(zip(data.images, data.captions)):
        name = f"COCO_{split}_{offset + i:012d}.jpg"
        Image.fromarray(image.permute(1, 2, 0).numpy()).save(root / split / name, quality=95)
        images.append({"id": offset + i, "file_name": name, "height": 32, "width": 32})
        notes += [{"image_id": offset + i, "id": len(notes), "caption": t.capitalize() + "."} for t in texts]
    (root / "annotations").mkdir(exist_ok=True)
    (root / "annotations" / f"captions_{split}.json").write_text(json.dumps({"images": images, "annotations": notes}))


@pytest.mark.slow
def test_caption_coco_runs_on_files_in_cocos_layout(tmp_path):
    mirror = tmp_path / "mirror"
    _write_coco(mirror / "coco", "train2014", 24, 0)
    _write_coco(mirror / "coco", "val2014", 8, 100)
    overrides = {"data.val": 4, "data.test": 4, "data.image_size": 32, "data.min_count": 1,
                 "data.download": False, "encoder.channels": [4, 8, 8, 16], "encoder.pretrain_steps": 2,
                 "encoder.eval_every": 1, "encoder.batch_size": 4, "model.embedding_dim": 8,
                 "model.hidden_size": 16, "train.steps": 2, "train.eval_every": 1, "train.eval_images": 4,
                 "train.batch_size": 4, "evaluate.max_length": 6, "train.max_length": 6,
                 "evaluate.splits": ["val", "test", "test_unseen"]}
    summary = run("caption-coco", overrides=overrides, out=tmp_path / "out", data_root=tmp_path / "root",
                  data_mirror=mirror, quiet=True)
    figures = summary["runs"][0]
    assert figures["steps"] == 2 and 0.0 <= figures["test_beam_bleu4"] <= 1.0
    assert "test_beam_objects" not in figures  # COCO has no scenes to check objects against
    assert (tmp_path / "out" / "attention.png").is_file()
    # Asked for, but COCO has no unseen pairs: said, not silently dropped.
    assert "test_unseen: the data has no such split" in (tmp_path / "out" / "log.txt").read_text()
    assert "test_unseen_beam_bleu4" not in figures


def test_caption_coco_refuses_a_test_split_larger_than_held_out_and_drops_an_empty_one(tmp_path):
    mirror = tmp_path / "mirror"
    _write_coco(mirror / "coco", "train2014", 24, 0)
    _write_coco(mirror / "coco", "val2014", 8, 100)
    overrides = {"data.val": 4, "data.image_size": 32, "data.min_count": 1, "data.download": False,
                 "encoder.channels": [4, 8, 8, 16], "encoder.pretrain_steps": 1, "encoder.eval_every": 1,
                 "encoder.batch_size": 4, "model.embedding_dim": 8, "model.hidden_size": 16, "train.steps": 1,
                 "train.eval_every": 1, "train.eval_images": 4, "train.batch_size": 4, "evaluate.max_length": 6,
                 "train.max_length": 6}
    # It used to be cut to the 4 images left without a word.
    with pytest.raises(GraphseqError, match=r"COCO val2014 has 8 images, fewer than val=4 \+ test=5"):
        run("caption-coco", overrides={**overrides, "data.test": 5}, out=tmp_path / "out",
            data_root=tmp_path / "root", data_mirror=mirror, quiet=True)
    assert not (tmp_path / "out").exists()
    # An empty test split used to be scored: a bare NaN in metrics.json, which is no JSON. Without
    # "test" among the splits scored (naming it is refused), the run scores the rest.
    figures = run("caption-coco", overrides={**overrides, "data.test": 0, "evaluate.splits": ["val"]},
                  out=tmp_path / "out", data_root=tmp_path / "root", data_mirror=mirror, quiet=True)["runs"][0]
    assert not any(key.startswith("test_") for key in figures)
    json.loads((tmp_path / "out" / "metrics.json").read_text(),
               parse_constant=lambda constant: pytest.fail(f"metrics.json holds {constant}"))


def test_caption_coco_without_coco_offline_says_where_it_looked(tmp_path):
    with pytest.raises(GraphseqError, match="COCO train2014 not found"):
        run("caption-coco", overrides={"data.download": False}, out=tmp_path / "out",
            data_root=tmp_path / "root", data_mirror=tmp_path / "nothing", quiet=True)


@pytest.fixture(scope="module")
def picture(tmp_path_factory):
    path = tmp_path_factory.mktemp("images") / "shapes.png"
    image = generate_split("test", 1, seed=0, image_size=96).images[0]
    Image.fromarray(image.permute(1, 2, 0).numpy()).save(path)  # resized to 64 when read
    return path


def test_caption_prints_a_caption_of_an_image_file(attention_run, picture, capsys):
    out, _ = attention_run
    assert main(["caption", str(out), str(picture)]) == 0
    printed = capsys.readouterr()
    lines = printed.out.splitlines()
    assert len(lines) == 1 and len(lines[0].split()) <= 20
    assert "warning" not in printed.err  # a test image of the shapes it was trained on
    low, high = load_checkpoint(out / "captioner.pt")["image_range"]  # what an image is compared with
    assert len(low) == len(high) == 6 and all(a <= b for a, b in zip(low, high))


def test_caption_draws_the_attention_of_each_word(attention_run, picture, tmp_path, capsys):
    out, _ = attention_run
    figure = tmp_path / "attention.png"
    assert main(["caption", str(out), str(picture), "--beam", "2", "--attention", str(figure)]) == 0
    assert figure.read_bytes()[:4] == b"\x89PNG"
    assert "wrote" in capsys.readouterr().err


@pytest.mark.slow
def test_caption_samples_several_captions_from_a_seed(attention_run, picture, capsys):
    out, _ = attention_run
    args = ["caption", str(out), str(picture), "--sample", "3", "--temperature", "0.8", "--seed", "1",
            "--max-length", "6"]
    assert main(args) == 0
    first = capsys.readouterr().out.splitlines()
    assert len(first) == 3 and all(len(line.split()) <= 6 for line in first)
    assert main(args) == 0
    assert capsys.readouterr().out.splitlines() == first


def test_caption_refuses_bad_requests_before_writing_anything(init_run, tmp_path, picture, capsys):
    init_run, _ = init_run
    figure = tmp_path / "attention.png"
    assert main(["caption", str(init_run), str(picture), "--attention", str(figure)]) == 2
    assert "'init' decoder" in capsys.readouterr().err and not figure.exists()
    assert main(["caption", str(tmp_path / "nowhere"), str(picture)]) == 2
    assert "no captioner.pt" in capsys.readouterr().err
    assert main(["caption", str(init_run), str(tmp_path / "missing.png")]) == 2
    assert "image not found" in capsys.readouterr().err
    assert main(["caption", str(init_run), str(picture), "--beam", "0"]) == 2
    assert capsys.readouterr().err == "graphseq: error: --beam must be at least 1, got 0\n"


@pytest.mark.parametrize("args, message", [
    (["--sample", "2", "--temperature", "inf"], "--temperature must be a finite number >= 0, got inf"),
    (["--sample", "2", "--temperature", "nan"], "--temperature must be a finite number >= 0, got nan"),
    (["--sample", "2", "--seed", str(2**64)], "--seed must be a whole number from 0 to 4294967295"),
    (["--sample", "2", "--seed", "-1"], "--seed must be a whole number from 0 to 4294967295"),
    (["--max-length", "1000000000000"], "--max-length must be at most 100 words, got 1000000000000"),
    (["--sample", "1000000000000"], "--sample must be at most 1000 captions, got 1000000000000"),
    (["--beam", "100000"], "the number of words the model knows, got 100000"),
    # Each bound names the option typed (they used to say 'need beam_size >= 1, samples >= 0, ...').
    (["--sample", "-3"], "--sample must be at least 0, got -3"),
    (["--max-length", "0"], "--max-length must be at least 1 word, got 0"),
    (["--attention", "{run}"], "cannot write --attention {run}: Is a directory"),
    (["--attention", "{run}/config.toml/a.png"], "cannot write --attention {run}/config.toml/a.png: Not a directory"),
    (["--attention", "/proc/attention.png"], "cannot write --attention /proc/attention.png: "),
])
def test_caption_refuses_bad_options_in_one_line(attention_run, picture, capsys, args, message):
    out, _ = attention_run
    assert main(["caption", str(out), str(picture)] + [a.replace("{run}", str(out)) for a in args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphseq: error: ") and message.replace("{run}", str(out)) in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("name", ["captioner.pt", "config.toml", "metrics.json", "captions_test.json"])
def test_caption_attention_never_overwrites_a_file_of_the_run(attention_run, picture, capsys, name):
    out, _ = attention_run
    before = (out / name).read_bytes()
    assert main(["caption", str(out), str(picture), "--attention", str(out / name)]) == 2
    assert capsys.readouterr().err == (f"graphseq: error: --attention {out / name}: "
                                       f"will not overwrite a file that is not .png\n")
    assert (out / name).read_bytes() == before


def test_caption_beam_may_be_as_wide_as_the_vocabulary(attention_run, picture, capsys):
    out, _ = attention_run
    words = len(load_captioner(out).vocab)
    assert main(["caption", str(out), str(picture), "--beam", str(words), "--max-length", "4"]) == 0
    assert len(capsys.readouterr().out.split()) <= 4
    assert main(["caption", str(out), str(picture), "--beam", str(words + 1)]) == 2
    assert capsys.readouterr().err == (f"graphseq: error: --beam must be at most {words}, the number of "
                                       f"words the model knows, got {words + 1}\n")


def test_caption_names_the_seed_folders_of_a_run_of_several_seeds(attention_run, picture, tmp_path, capsys):
    out, _ = attention_run
    (tmp_path / "runs" / "seed-0").mkdir(parents=True)
    shutil.copy(out / "captioner.pt", tmp_path / "runs" / "seed-0" / "captioner.pt")
    assert main(["caption", str(tmp_path / "runs"), str(picture)]) == 2
    assert capsys.readouterr().err == (f"graphseq: error: no captioner.pt in {tmp_path / 'runs'}; runs of several "
                                       f"seeds keep theirs in {tmp_path / 'runs' / 'seed-0'}\n")
    assert main(["caption", str(tmp_path / "runs" / "seed-0"), str(picture)]) == 0


def test_an_unseeded_sample_leaves_the_global_generator_as_it_was(attention_run, picture):
    out, _ = attention_run
    draws = []
    for _ in range(2):
        torch.manual_seed(5)
        caption_image(out, picture, samples=2, max_length=4)
        draws.append(torch.rand(3))
    assert torch.equal(*draws)  # torch.seed() used to reseed it at every call
