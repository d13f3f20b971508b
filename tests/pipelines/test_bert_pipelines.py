"""Smoke runs of bert-pretrain and bert-polarity on the real texts (a few
steps of a tiny model), the corpus that leaves a test fold out, resuming a
pretraining (only with the tokenizer it was trained with), and ``graphseq
fill-mask``. Every corpus reads the polarity snippets (one without
polarity text drops those it holds), so runs given no data places read
them from the session's data root and the mirror."""
import hashlib
import json
import logging
import re
import shutil
import tomllib
import types

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import mirror_path

from graphseq import run
from graphseq.cli import main
from graphseq.data.polarity import cv_folds, load_polarity
from graphseq.errors import GraphseqError
from graphseq.io import load_checkpoint
from graphseq.models.bert import BertClassifier, BertConfig
from graphseq.data.places import data_places
from graphseq.stages.bert import adamw, bert_corpus, bert_tokenizer
from graphseq.stages.bert_polarity import read_pretraining

TINY = {"model.hidden_size": 16, "model.feedforward_size": 32, "model.num_heads": 2, "tokenizer.vocab_size": 300,
        "pretrain.batch_size": 4, "pretrain.eval_examples": 16, "pretrain.eval_every": 2}


@pytest.fixture(autouse=True)
def default_data_places(monkeypatch, data_root):
    """The session's data root, and the mirror where there is one, for runs
    given none: a corpus folder is checked against the polarity snippets,
    which must not land in the repository's datasets/."""
    monkeypatch.setenv("GRAPHSEQ_DATA", str(data_root))
    if mirror_path().is_dir():
        monkeypatch.setenv("GRAPHSEQ_MIRROR", str(mirror_path()))


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, data_root, mirror):
    out = tmp_path_factory.mktemp("bert") / "pretrain"
    summary = run("bert-pretrain", overrides={**TINY, "pretrain.steps": 4, "corpus.exclude_folds": [0]},
                  out=out, data_root=data_root, data_mirror=mirror, quiet=True)
    return out, summary["runs"][0]


@pytest.mark.slow
def test_bert_pretrain_writes_model_tokenizer_and_scores(pretrained):
    out, figures = pretrained
    for name in ("bert.pt", "tokenizer.json", "checkpoint.pt", "curves.png", "metrics.json", "pretraining.json"):
        assert (out / name).is_file(), name
    assert figures["steps"] == 4
    assert set(figures) >= {"val_mlm_accuracy", "val_nsp_accuracy", "val_mlm_loss", "train_minutes"}
    info = json.loads((out / "pretraining.json").read_text())
    assert info["excluded_polarity_folds"] == [0] and info["texts"] == ["shakespeare", "polarity"]
    # It left out its test folds' snippets by text, and was not scanned for them.
    assert info["polarity_checked"] is False and "polarity_sentences_dropped" not in info
    assert read_pretraining(out, folds=10, fold_seed=0) == [0]
    assert read_pretraining(out, folds=10, fold_seed=1) == []  # other folds: it may have read any sentence


def read_corpus(data_root, mirror, **settings):
    """The corpus bert_corpus reads with ``settings``."""
    ctx = types.SimpleNamespace(data_root=data_root, data_mirror=mirror, log=types.SimpleNamespace(info=print))
    bert_corpus(ctx, held_out=0.05, **settings)
    return ctx.corpus


def polarity_test_folds(data_root, mirror, *chosen):
    """The polarity sentences, and those of the test folds ``chosen`` (of the shared folds)."""
    sentences, _ = load_polarity(data_root, mirror)
    folds = cv_folds(len(sentences))
    return sentences, {sentences[i] for f in chosen for i in folds[f][2].tolist()}


def test_corpus_leaves_out_every_sentence_of_the_held_out_folds(data_root, mirror):
    corpus = read_corpus(data_root, mirror, exclude_folds=[2, 5])
    read = {s for doc in corpus.train + corpus.held_out for s in doc}
    _, left_out = polarity_test_folds(data_root, mirror, 2, 5)
    _, kept = polarity_test_folds(data_root, mirror, 0, 1, 3, 4, 6, 7, 8, 9)
    assert not read & left_out
    assert kept - left_out <= read
    assert any(len(doc) > 1 for doc in corpus.train)  # Shakespeare's speeches give sentence pairs


def test_corpus_texts_choose_the_shared_texts(data_root, mirror):
    corpus = read_corpus(data_root, mirror, texts=["polarity"], exclude_folds=[2, 5])
    documents = corpus.train + corpus.held_out
    _, left_out = polarity_test_folds(data_root, mirror, 2, 5)
    sentences, kept = polarity_test_folds(data_root, mirror, 0, 1, 3, 4, 6, 7, 8, 9)
    assert all(len(doc) == 1 for doc in documents)  # one-sentence documents: masked LM only
    assert {doc[0] for doc in documents} == kept - left_out
    corpus = read_corpus(data_root, mirror, texts=["shakespeare"])
    assert not {s for doc in corpus.train + corpus.held_out for s in doc} & set(sentences)


@pytest.mark.slow
def test_pretraining_on_one_sentence_documents_reports_no_next_sentence_figures(tmp_path, data_root, mirror):
    summary = run("bert-pretrain", overrides={**TINY, "pretrain.steps": 2, "corpus.texts": ["polarity"]},
                  out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=True)
    figures = summary["runs"][0]
    assert {"val_mlm_accuracy", "val_mlm_loss"} <= set(figures)
    assert "val_nsp_accuracy" not in figures and "val_nsp_loss" not in figures
    assert "no sentence pairs in the corpus: masked LM only" in (tmp_path / "log.txt").read_text()
    assert json.loads((tmp_path / "pretraining.json").read_text())["texts"] == ["polarity"]


@pytest.mark.slow
def test_a_pretraining_without_polarity_text_serves_every_test_fold(tmp_path, data_root, mirror):
    run("bert-pretrain", overrides={**TINY, "pretrain.steps": 1, "corpus.texts": ["shakespeare"],
                                    "corpus.exclude_folds": [3]},
        out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=True)
    info = json.loads((tmp_path / "pretraining.json").read_text())
    assert info["texts"] == ["shakespeare"] and info["polarity_checked"] is True
    assert f"corpus: dropped {info['polarity_sentences_dropped']} sentence" in (tmp_path / "log.txt").read_text()
    assert read_pretraining(tmp_path, folds=10, fold_seed=0) == list(range(10))
    assert read_pretraining(tmp_path, folds=5, fold_seed=1) == list(range(5))


def test_corpus_refuses_an_unknown_text(tmp_path, data_root, mirror):
    with pytest.raises(GraphseqError, match="corpus.texts"):
        run("bert-pretrain", overrides={**TINY, "corpus.texts": ["wikipedia"]}, out=tmp_path / "run",
            data_root=data_root, data_mirror=mirror, quiet=True)
    assert not (tmp_path / "run").exists()

@pytest.mark.parametrize("setting,message", [
    # The model is built after the tokenizer is trained and saved; bert-polarity runs the same pretraining.
    ({"model.num_heads": 3}, r"bert_model: hidden_size = 16 must be divisible by num_heads = 3 \(each head reads"),
    # [CLS] A [SEP] B [SEP] with a token of each sentence takes 5; 4 was refused only after tokenizer.json.
    ({"model.max_len": 4}, r"model.max_len = 4 is not allowed: it must be a number >= 5"),
])
def test_model_settings_are_refused_before_writing_in_both_pipelines(tmp_path, data_root, mirror, setting, message):
    with pytest.raises(GraphseqError, match=message):
        run("bert-pretrain", overrides={**TINY, **setting}, out=tmp_path / "run",
            data_root=data_root, data_mirror=mirror, quiet=True)
    assert not (tmp_path / "run").exists()
    pretrain_set = [f"{k}={json.dumps(v)}" for k, v in {**TINY, **setting}.items()]
    with pytest.raises(GraphseqError, match=message):
        run("bert-polarity", overrides={"pretrain.pretrain_set": pretrain_set}, out=tmp_path / "polarity",
            data_root=data_root, data_mirror=mirror, quiet=True)
    assert not (tmp_path / "polarity").exists()


def small_corpus(folder):
    """A corpus folder: documents of a few made-up sentences, one file each."""
    folder.mkdir()
    words = "the a movie film was is good bad great awful plot actors story scene funny dull".split()
    generator = torch.Generator().manual_seed(0)
    for d in range(30):
        sentences = [" ".join(words[i] for i in torch.randint(len(words), (6,), generator=generator).tolist())
                     for _ in range(4)]
        (folder / f"doc{d:02d}.txt").write_text("\n".join(sentences) + "\n")
    return folder


@pytest.mark.slow
def test_resumed_pretraining_equals_straight_pretraining(tmp_path):
    common = dict(quiet=True)
    straight = {**TINY, "tokenizer.vocab_size": 60, "pretrain.steps": 4, "pretrain.checkpoint_every": 2,
                "corpus.held_out": 0.2, "corpus.folder": str(small_corpus(tmp_path / "corpus"))}
    run("bert-pretrain", overrides=straight, out=tmp_path / "straight", **common)
    # Tokenizer training may break ties differently in another run: read the same pieces.
    del straight["tokenizer.vocab_size"]  # (a tokenizer file has its own)
    straight["tokenizer.file"] = str(tmp_path / "straight" / "tokenizer.json")
    run("bert-pretrain", overrides={**straight, "pretrain.minutes": 1e-9}, out=tmp_path / "resumed", **common)
    first = load_checkpoint(tmp_path / "resumed" / "checkpoint.pt")
    assert 1 <= first["step"] < 4  # stopped early by the time cap
    # A resumed run keeps the settings it was started with: lift the time cap.
    run("bert-pretrain", overrides={**straight, "pretrain.minutes": 0.0}, out=tmp_path / "resumed", resume=True,
        **common)
    a = load_checkpoint(tmp_path / "straight" / "bert.pt")["model"]
    b = load_checkpoint(tmp_path / "resumed" / "bert.pt")["model"]
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_a_corpus_too_small_for_false_sentence_pairs_is_refused_before_writing(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for name in "abc":  # held_out 0.05 keeps one document back: all its pairs would be true ones
        (folder / f"{name}.txt").write_text(f"first sentence of {name}\nsecond sentence of {name}\n")
    with pytest.raises(GraphseqError, match="the corpus has 3 documents and its held-out part 1: next-sentence "
                                            "prediction takes its false pairs from another document"):
        run("bert-pretrain", overrides={**TINY, "pretrain.steps": 2, "corpus.folder": str(folder)},
            out=tmp_path / "out", quiet=True)
    assert not (tmp_path / "out").exists()


def test_a_resume_after_the_corpus_folder_changed_is_refused(tmp_path):
    folder = small_corpus(tmp_path / "corpus")
    settings = {**TINY, "tokenizer.vocab_size": 60, "pretrain.steps": 2, "corpus.held_out": 0.2,
                "corpus.folder": str(folder)}
    run("bert-pretrain", overrides=settings, out=tmp_path / "out", quiet=True)
    (folder / "doc99.txt").write_text("a new film\nwith a new plot\n")  # moves documents between the parts
    with pytest.raises(GraphseqError, match=r"checkpoint\.pt was written with corpus_sha256 = .*, but this run "
                                            r"has corpus_sha256"):
        run("bert-pretrain", overrides=settings, out=tmp_path / "out", resume=True, quiet=True)


def files_under(folder):
    """Every path under ``folder``: a file's bytes and time, None for a folder."""
    return {path: (path.read_bytes(), path.stat().st_mtime_ns) if path.is_file() else None
            for path in sorted(folder.rglob("*"))}


def swap_two_pieces(path):
    """Writes, in place of the tokenizer ``path``, one of the same size that
    numbers two pieces the other way round: what a new training that
    differs in a piece does to thousands of sorted ids."""
    tokenizer = json.loads(path.read_text())
    vocab = tokenizer["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[20:22]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    path.write_text(json.dumps(tokenizer))


@pytest.fixture(scope="module")
def small_pretraining(tmp_path_factory, data_root):
    """A finished tiny pretraining on a corpus folder, with its checkpoint, and its settings."""
    tmp = tmp_path_factory.mktemp("small")
    settings = {**TINY, "tokenizer.vocab_size": 60, "pretrain.steps": 2, "pretrain.checkpoint_every": 1,
                "pretrain.amp": False, "corpus.held_out": 0.2, "corpus.folder": str(small_corpus(tmp / "corpus"))}
    # Module-wide, so before default_data_places: the data places of a test's runs, given.
    run("bert-pretrain", overrides=settings, out=tmp / "run", data_root=data_root,
        data_mirror=mirror_path() if mirror_path().is_dir() else None, quiet=True)
    return tmp / "run", settings


def test_the_checkpoint_and_pretraining_json_record_the_tokenizer_digest(small_pretraining):
    out, _ = small_pretraining
    digest = hashlib.sha256((out / "tokenizer.json").read_bytes()).hexdigest()
    assert load_checkpoint(out / "checkpoint.pt")["tokenizer_sha256"] == digest
    assert json.loads((out / "pretraining.json").read_text())["tokenizer_sha256"] == digest


@pytest.mark.parametrize("damage,message", [
    ("missing", r"--resume: .*/tokenizer\.json is missing: .*/checkpoint\.pt embeds the pieces of the tokenizer it "
                r"was trained with"),
    ("folder", r"--resume: .*/tokenizer\.json is a folder"),
    ("replaced", r"--resume: .*/tokenizer\.json is not the tokenizer .*/checkpoint\.pt was trained with \(its "
                 r"SHA-256 is [0-9a-f]{16}\.\.\., the run recorded [0-9a-f]{16}\.\.\.\)"),
])
def test_a_resume_without_its_own_tokenizer_is_refused_and_changes_no_file(small_pretraining, tmp_path, damage,
                                                                           message):
    # A new tokenizer may number the pieces otherwise: the checkpoint's embeddings would belong to other pieces.
    out = tmp_path / "run"
    shutil.copytree(small_pretraining[0], out)
    tokenizer = out / "tokenizer.json"
    if damage == "replaced":
        swap_two_pieces(tokenizer)
    else:
        tokenizer.unlink()
        if damage == "folder":
            tokenizer.mkdir()
    before = files_under(out)
    with pytest.raises(GraphseqError, match=message):
        run("bert-pretrain", out=out, resume=True, quiet=True)
    assert files_under(out) == before


def test_a_checkpoint_written_before_the_tokenizer_digest_still_resumes(small_pretraining, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(small_pretraining[0], out)
    checkpoint = load_checkpoint(out / "checkpoint.pt")
    del checkpoint["tokenizer_sha256"]
    torch.save(checkpoint, out / "checkpoint.pt")
    (out / "bert.pt").unlink()
    assert run("bert-pretrain", out=out, resume=True, quiet=True)["runs"][0]["steps"] == 2
    assert (out / "bert.pt").is_file()


def interrupt_before_training(monkeypatch, settings, out):
    """A bert-pretrain run into ``out`` stopped (^C) as its training would start: its tokenizer saved, no checkpoint."""
    import graphseq.stages.bert as stages

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(stages, "train_steps", interrupted)
        with pytest.raises(KeyboardInterrupt):
            run("bert-pretrain", overrides=settings, out=out, quiet=True)


def test_a_folder_where_a_new_run_saves_its_tokenizer_is_refused_before_writing(small_pretraining, tmp_path,
                                                                                monkeypatch):
    # A run that stopped before its first checkpoint starts again in its folder and saves a new tokenizer.
    out, settings = tmp_path / "run", small_pretraining[1]
    interrupt_before_training(monkeypatch, settings, out)
    (out / "tokenizer.json").unlink()
    (out / "tokenizer.json").mkdir()
    (out / "tokenizer.json" / "notes.txt").write_text("mine\n")
    before = files_under(out)
    with pytest.raises(GraphseqError, match=r"/tokenizer\.json is a folder"):
        run("bert-pretrain", overrides=settings, out=out, quiet=True)
    assert files_under(out) == before


def _tokenizer_worker(rank, store, folder, data_places):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        if rank:  # Another training could number the pieces otherwise: rank 1 must read rank 0's.
            from graphseq.data.wordpiece import WordPieceTokenizer
            WordPieceTokenizer.train = None
        ctx = types.SimpleNamespace(out=folder, resume=False, log=logging.getLogger("test-bert-tokenizer"),
                                    data_root=data_places[0], data_mirror=data_places[1],
                                    require=lambda name, stage: getattr(ctx, name))
        bert_corpus(ctx, folder=str(folder / "corpus"), held_out=0.2)
        bert_tokenizer(ctx, vocab_size=60)
        (folder / f"vocab-{rank}.json").write_text(json.dumps(ctx.tokenizer.tokenizer.get_vocab()))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_every_process_reads_the_tokenizer_rank_zero_trained(tmp_path):
    small_corpus(tmp_path / "corpus")
    mp.spawn(_tokenizer_worker, args=(tmp_path / "store", tmp_path, data_places(None, None)), nprocs=2, join=True)
    saved = json.loads((tmp_path / "tokenizer.json").read_text())["model"]["vocab"]
    assert json.loads((tmp_path / "vocab-0.json").read_text()) == saved
    assert json.loads((tmp_path / "vocab-1.json").read_text()) == saved


@pytest.mark.slow
def test_a_tokenizer_file_is_used_as_it_is_and_a_vocab_size_beside_it_is_refused(tmp_path):
    settings = {**TINY, "tokenizer.vocab_size": 60, "pretrain.steps": 1, "corpus.held_out": 0.2,
                "corpus.folder": str(small_corpus(tmp_path / "corpus"))}
    run("bert-pretrain", overrides=settings, out=tmp_path / "first", quiet=True)
    file = str(tmp_path / "first" / "tokenizer.json")
    del settings["tokenizer.vocab_size"]
    # A vocab_size was ignored: the file's pieces were used.
    for key, value in (("vocab_size", 500), ("min_frequency", 3)):
        with pytest.raises(GraphseqError, match=re.escape(f"tokenizer.{key} has no use when tokenizer.file = "
                                                          f"{file!r}: it applies only when tokenizer.file is "
                                                          f"empty (not set)")):
            run("bert-pretrain", overrides={**settings, "tokenizer.file": file, f"tokenizer.{key}": value},
                out=tmp_path / "second", quiet=True)
        assert not (tmp_path / "second").exists()
    run("bert-pretrain", overrides={**settings, "tokenizer.file": file}, out=tmp_path / "second", quiet=True)
    pieces = [json.loads((tmp_path / run_out / "tokenizer.json").read_text())["model"]["vocab"]
              for run_out in ("first", "second")]
    assert pieces[0] == pieces[1]


@pytest.mark.parametrize("name,overrides,message", [
    # A corpus folder is read as it is: the shared texts and their folds were ignored.
    ("bert-pretrain", {"corpus.folder": "{folder}", "corpus.texts": ["polarity"]},
     "corpus.texts has no use when corpus.folder = '{folder}': it applies only when corpus.folder is empty "
     "(not set)"),
    ("bert-pretrain", {"corpus.folder": "{folder}", "corpus.fold_seed": 3},
     "corpus.fold_seed has no use when corpus.folder = '{folder}'"),
    ("bert-pretrain", {"corpus.texts": ["polarity", "polarity"]},
     "corpus.texts = ['polarity', 'polarity'] is not allowed: it must be a non-empty list of distinct items"),
    # Finished runs are used as they are: the groups and the pretraining settings were ignored, unchecked.
    ("bert-polarity", {"pretrain.runs": ["{folder}"], "pretrain.groups": 3},
     "pretrain.groups has no use when pretrain.runs = ['{folder}']: it applies only when pretrain.runs is "
     "empty (not set)"),
    ("bert-polarity", {"pretrain.runs": ["{folder}"], "pretrain.pretrain_set": ["pretrain.steps=-1"]},
     "pretrain.pretrain_set has no use when pretrain.runs = ['{folder}']"),
    ("bert-polarity", {"finetune.scratch": False, "finetune.scratch_lr": 0.01},
     "finetune.scratch_lr has no use when finetune.scratch = False: it applies only with True"),
])
def test_settings_the_run_would_ignore_are_refused_before_writing(tmp_path, name, overrides, message):
    folder = str(tmp_path / "corpus")
    with pytest.raises(GraphseqError, match=re.escape(message.replace("{folder}", folder))):
        run(name, overrides={k: json.loads(json.dumps(v).replace("{folder}", folder)) for k, v in overrides.items()},
            out=tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()


def test_the_pipelines_own_shared_texts_let_a_corpus_folder_be_set(tmp_path):
    # bert-pretrain's file sets texts, folds and fold_seed for its shared texts, which --set corpus.folder replaces.
    summary = run("bert-pretrain", overrides={**TINY, "tokenizer.vocab_size": 60, "pretrain.steps": 1,
                                              "corpus.held_out": 0.2,
                                              "corpus.folder": str(small_corpus(tmp_path / "corpus"))},
                  out=tmp_path / "run", quiet=True)
    assert summary["runs"][0]["steps"] == 1
    recorded = tomllib.loads((tmp_path / "run" / "config.toml").read_text())["corpus"]
    assert not {"texts", "exclude_folds", "folds", "fold_seed"} & set(recorded)  # not what ran: left out


def test_a_vocab_size_below_the_alphabet_is_said_to_be_exceeded(tmp_path):
    settings = {**TINY, "tokenizer.vocab_size": 16, "pretrain.steps": 1, "corpus.held_out": 0.2,
                "corpus.folder": str(small_corpus(tmp_path / "corpus"))}
    run("bert-pretrain", overrides=settings, out=tmp_path / "run", quiet=True)
    pieces = json.loads((tmp_path / "run" / "tokenizer.json").read_text())["model"]["vocab"]
    assert len(pieces) > 16
    assert (f"tokenizer: it holds {len(pieces):,} pieces, more than tokenizer.vocab_size = 16, because the "
            f"special tokens and every character of the corpus need a piece each"
            in (tmp_path / "run" / "log.txt").read_text())


def test_more_held_out_examples_than_the_maximum_are_refused_before_writing(tmp_path):
    # They are all built before the first step: 10**9 hung the run after it saved its tokenizer.
    with pytest.raises(GraphseqError, match="pretrain.eval_examples = 1000000000 is not allowed: it must be "
                                            "a number from 1 to 100000"):
        run("bert-pretrain", overrides={**TINY, "pretrain.eval_examples": 10**9, "corpus.folder": str(
            small_corpus(tmp_path / "corpus"))}, out=tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()


def test_a_pretraining_interrupted_before_its_first_checkpoint_starts_again_in_its_folder(tmp_path, monkeypatch):
    # Its tokenizer is stored, but nothing --resume could continue from.
    settings = {**TINY, "tokenizer.vocab_size": 60, "pretrain.steps": 2, "corpus.held_out": 0.2,
                "corpus.folder": str(small_corpus(tmp_path / "corpus"))}
    out = tmp_path / "out"
    interrupt_before_training(monkeypatch, settings, out)
    assert (out / "tokenizer.json").is_file() and not (out / "checkpoint.pt").exists()
    assert "the same command starts it again" in (out / "log.txt").read_text()
    with pytest.raises(GraphseqError, match="stopped before it stored anything to continue from, so start it "
                                            "again without --resume"):
        run("bert-pretrain", overrides=settings, out=out, resume=True, quiet=True)
    assert run("bert-pretrain", overrides=settings, out=out, quiet=True)["runs"][0]["steps"] == 2
    with pytest.raises(GraphseqError, match="already holds a run; continue it with --resume"):
        run("bert-pretrain", overrides=settings, out=out, quiet=True)


def test_a_longer_resumed_pretraining_is_refused_and_says_why(pretrained, tmp_path, data_root, mirror):
    # Warm-up and linear decay are laid over the whole budget: a longer one is not the same schedule.
    out, _ = pretrained
    for path in out.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    before = {path: path.read_bytes() for path in tmp_path.iterdir()}
    with pytest.raises(GraphseqError, match=r"pretrain\.steps = 8 \(the run has 4\): the learning rate warms up "
                                            r"and decays to zero over the steps the run was started with"):
        run("bert-pretrain", overrides={"pretrain.steps": 8}, out=tmp_path, resume=True, data_root=data_root,
            data_mirror=mirror, quiet=True)
    assert {path: path.read_bytes() for path in tmp_path.iterdir()} == before


def test_fill_mask_prints_the_likeliest_pieces(pretrained, capsys):
    out, _ = pretrained
    assert main(["fill-mask", str(out), "the movie was [MASK] .", "--top-k", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "[MASK] 1" and len(lines) == 4
    probabilities = [float(line.split()[0]) for line in lines[1:]]
    assert probabilities == sorted(probabilities, reverse=True) and 0 < sum(probabilities) <= 1


@pytest.mark.parametrize("args,message", [
    (["the movie was good ."], "no [MASK] to fill"),
    (["[MASK]", "--top-k", "0"], "--top-k must be at least 1"),
    (["\udcff\udcfe [MASK]"], "the text is not valid UTF-8: byte 0xff at character 0"),  # argv of bytes 0xff 0xfe
])
def test_fill_mask_refuses_bad_requests(pretrained, capsys, args, message):
    out, _ = pretrained
    assert main(["fill-mask", str(out)] + args) == 2
    assert message in capsys.readouterr().err


def test_a_corpus_folder_of_one_document_is_refused_with_the_fix_before_writing(tmp_path, capsys):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "one.txt").write_text("A sentence.\nAnother sentence.\n")
    assert main(["run", "bert-pretrain", "--out", str(tmp_path / "run"), "--set",
                 f"corpus.folder={json.dumps(str(tmp_path / 'corpus'))}"]) == 2
    assert capsys.readouterr().err == ("graphseq: error: a corpus of 1 document leaves none to hold out for scoring: "
                                       "give 2 or more (each *.txt file is one, and a blank line ends one)\n")
    assert not (tmp_path / "run").exists()


def test_fill_mask_names_a_folder_without_a_model(tmp_path, capsys):
    assert main(["fill-mask", str(tmp_path), "a [MASK] ."]) == 2
    assert "holds no pretrained BERT" in capsys.readouterr().err


@pytest.mark.parametrize("name,message", [
    ("nope", "{run} does not exist; give the --out folder of a bert-pretrain run"),
    ("notes.txt", "{run} is not a folder; give the --out folder of a bert-pretrain run"),
    ("bert.pt", "{run} is not a folder; give the --out folder of a bert-pretrain run ({tmp}, here)"),
])
def test_fill_mask_names_a_missing_folder_or_a_file_given_as_the_run(tmp_path, capsys, name, message):
    for file in ("notes.txt", "bert.pt"):
        (tmp_path / file).write_text("not a run folder")
    run_dir = tmp_path / name
    assert main(["fill-mask", str(run_dir), "a [MASK] ."]) == 2
    err = capsys.readouterr().err
    assert err == f"graphseq: error: {message.format(run=run_dir, tmp=tmp_path)}\n"


@pytest.mark.slow
@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_bert_polarity_fine_tunes_pretrained_and_scratch(pretrained, tmp_path, data_root, mirror, pool):
    out, _ = pretrained
    summary = run("bert-polarity", overrides={"pretrain.runs": [str(out)], "finetune.run_folds": [0],
                                              "finetune.max_steps": 3, "finetune.batch_size": 8,
                                              "finetune.pool": pool},
                  out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=True)
    figures = summary["runs"][0]
    assert figures["folds"] == [0]
    assert len(figures["pretrained_test_by_fold"]) == len(figures["scratch_test_by_fold"]) == 1
    rows = json.loads((tmp_path / "folds.json").read_text())
    assert sorted(r["variant"] for r in rows) == ["pretrained", "scratch"]
    assert all(r["steps"] == 3 and r["fold"] == 0 and r["pretraining"] == str(out) for r in rows)
    assert json.loads((tmp_path / "plan.json").read_text()) == {"0": str(out)}
    assert (tmp_path / "folds.png").is_file()
    # A resume with other run_folds keeps the folds finished before (a fold 1, as if run earlier).
    (tmp_path / "folds.json").write_text(json.dumps(rows + [{**r, "fold": 1} for r in rows]))
    again = run("bert-polarity", overrides={"pretrain.runs": [str(out)], "finetune.run_folds": [0],
                                            "finetune.max_steps": 3, "finetune.batch_size": 8, "finetune.pool": pool},
                out=tmp_path, resume=True, data_root=data_root, data_mirror=mirror, quiet=True)
    assert again["runs"][0]["folds"] == [0]
    kept = json.loads((tmp_path / "folds.json").read_text())
    assert sorted((r["fold"], r["variant"]) for r in kept) == [(0, "pretrained"), (0, "scratch"),
                                                                (1, "pretrained"), (1, "scratch")]


@pytest.mark.parametrize("folds,message", [
    ([1], r"no pretraining left out the sentences of test fold\(s\) \[1\]"),  # it read fold 1
    ([0, 10], r"finetune\.run_folds must name folds 0\.\.9, got \[10\]"),
])
def test_bert_polarity_refuses_folds_it_cannot_run_before_writing(pretrained, tmp_path, data_root, mirror,
                                                                  folds, message):
    out, _ = pretrained
    with pytest.raises(GraphseqError, match=message):
        run("bert-polarity", overrides={"pretrain.runs": [str(out)], "finetune.run_folds": folds},
            out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True)
    assert not (tmp_path / "run").exists()



def test_bert_polarity_names_a_damaged_pretrained_model_before_writing(pretrained, tmp_path, data_root, mirror):
    out, _ = pretrained
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for name in ("tokenizer.json", "pretraining.json"):
        (damaged / name).write_bytes((out / name).read_bytes())
    (damaged / "bert.pt").write_bytes((out / "bert.pt").read_bytes()[:300])
    with pytest.raises(GraphseqError, match=r"damaged/bert\.pt is damaged or not a graphseq checkpoint"):
        run("bert-polarity", overrides={"pretrain.runs": [str(damaged)], "finetune.run_folds": [0]},
            out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("damage,message", [
    ("missing", r"damaged/tokenizer\.json is missing: .*damaged/bert\.pt embeds the pieces"),
    ("folder", r"damaged/tokenizer\.json is a folder, not a file: .*damaged/bert\.pt embeds the pieces"),
    ("replaced", r"damaged/tokenizer\.json is not the tokenizer .*damaged/bert\.pt was trained with"),
])
def test_bert_polarity_refuses_a_pretraining_without_its_own_tokenizer_before_writing(pretrained, tmp_path,
                                                                                      data_root, mirror, damage,
                                                                                      message):
    out, _ = pretrained
    damaged = tmp_path / "damaged"
    shutil.copytree(out, damaged)
    tokenizer = damaged / "tokenizer.json"
    if damage == "replaced":
        swap_two_pieces(tokenizer)  # of the same size: the model's check of its vocabulary size lets it by
    else:
        tokenizer.unlink()
        if damage == "folder":
            tokenizer.mkdir()
    with pytest.raises(GraphseqError, match=message):
        run("bert-polarity", overrides={"pretrain.runs": [str(damaged)], "finetune.run_folds": [0]},
            out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("record,problem", [
    ('{"source": "shared", "excl', r"is damaged \(Unterminated string"),
    ('["shared"]', r"is damaged \(TypeError: list indices"),
    ('{"source": "shared"}', r"is damaged \(KeyError: 'excluded_polarity_folds'\)"),
])
def test_bert_polarity_names_a_damaged_pretraining_record_in_the_house_words(pretrained, tmp_path, data_root,
                                                                             mirror, record, problem):
    out, _ = pretrained
    damaged = tmp_path / "damaged"
    shutil.copytree(out, damaged)
    (damaged / "pretraining.json").write_text(record)
    with pytest.raises(GraphseqError, match=rf"damaged/pretraining\.json {problem}.*; it was left as it is"):
        run("bert-polarity", overrides={"pretrain.runs": [str(damaged)], "finetune.run_folds": [0]},
            out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True)
    assert not (tmp_path / "run").exists()


def test_bert_polarity_checks_its_pretrainings_before_writing(tmp_path, monkeypatch, data_root, mirror):
    # The pretrainings run inside the fine-tuning run, after its first file: their settings and
    # texts are checked before it.
    with pytest.raises(GraphseqError, match="pretrain_set: --set pretrain.stepz: unknown key 'stepz'"):
        run("bert-polarity", overrides={"pretrain.pretrain_set": ["pretrain.stepz=5"]},
            out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True)

    def offline(*args, **kwargs):
        raise OSError("Name or service not known")

    monkeypatch.setattr("graphseq.data.files.urllib.request.urlopen", offline)
    monkeypatch.delenv("GRAPHSEQ_MIRROR", raising=False)  # CI sets it; no mirror, no network: no texts
    with pytest.raises(GraphseqError, match="missing dataset file.*input.txt"):
        run("bert-polarity", out=tmp_path / "run", data_root=tmp_path / "datasets", data_mirror=None, quiet=True)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("entry", ["corpus.exclude_folds=[]", "corpus.folds=5", "corpus.fold_seed = 3"])
def test_bert_polarity_refuses_the_fold_settings_it_sets_itself_in_pretrain_set(tmp_path, data_root, mirror, entry):
    # They were silently replaced: "corpus.exclude_folds=[]" pretrained without the group's test folds.
    key = "corpus." + entry.split(".")[1].split("=")[0].strip()
    pretrain_set = [f"{k}={json.dumps(v)}" for k, v in {**TINY, "pretrain.steps": 1}.items()] + [entry]
    with pytest.raises(GraphseqError, match=rf"pretrain.pretrain_set: {key} is not allowed; bert-polarity sets "
                                            r"corpus.exclude_folds, corpus.folds, corpus.fold_seed itself from "
                                            r"its folds"):
        run("bert-polarity", overrides={"pretrain.pretrain_set": pretrain_set, "finetune.run_folds": [0],
                                        "finetune.max_steps": 1, "finetune.scratch": False,
                                        "finetune.test": False},
            out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_bert_polarity_pretrains_first_when_given_no_run(tmp_path, data_root, mirror):
    pretrain_set = [f"{k}={json.dumps(v)}" for k, v in {**TINY, "pretrain.steps": 2}.items()]
    summary = run("bert-polarity", overrides={"pretrain.groups": 2, "pretrain.pretrain_set": pretrain_set,
                                              "finetune.run_folds": [7], "finetune.max_steps": 2,
                                              "finetune.scratch": False, "finetune.test": False},
                  out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=True)
    info = json.loads((tmp_path / "pretrain-1" / "pretraining.json").read_text())
    assert info["excluded_polarity_folds"] == [5, 6, 7, 8, 9]
    assert not (tmp_path / "pretrain-0").exists()  # fold 7 needs only its own group's pretraining
    figures = summary["runs"][0]
    assert figures["folds"] == [7] and "pretrained_val_accuracy" in figures
    # Choosing settings: neither the test fold nor the model from scratch was read.
    assert not any("test" in key or "scratch" in key for key in figures)
    # A resume whose pretraining has another tokenizer is refused before plan.json is written again.
    swap_two_pieces(tmp_path / "pretrain-1" / "tokenizer.json")
    before = files_under(tmp_path)
    with pytest.raises(GraphseqError, match=r"pretrain-1/tokenizer\.json is not the tokenizer .*pretrain-1/bert\.pt "
                                            r"was trained with .*or delete .*pretrain-1 and resume"):
        run("bert-polarity", overrides={"pretrain.groups": 2, "pretrain.pretrain_set": pretrain_set,
                                        "finetune.run_folds": [5], "finetune.max_steps": 2,
                                        "finetune.scratch": False, "finetune.test": False},
            out=tmp_path, resume=True, data_root=data_root, data_mirror=mirror, quiet=True)
    assert files_under(tmp_path) == before


@pytest.mark.parametrize("norm_first", [False, True])
def test_layer_decay_trains_each_layer_at_a_factor_of_the_rate_above_it(norm_first):
    """The head at the rate, the top layer (and a pre-norm encoder's final
    norm) at decay x rate, the layer below at decay², the embeddings at
    decay³; biases and norms still without weight decay."""
    model = BertClassifier(BertConfig(vocab_size=50, hidden_size=8, num_layers=2, num_heads=2,
                                      feedforward_size=16, max_len=12, norm_first=norm_first), pool="mean")
    optimizer = adamw(model, 1e-3, 0.01, layer_decay=0.5)
    rate = {id(p): (group["lr"], group["weight_decay"]) for group in optimizer.param_groups for p in group["params"]}
    expected = {"classifier.weight": 1e-3, "pooler.bias": 1e-3, "encoder.layers.1.linear1.weight": 5e-4,
                "encoder.layers.0.linear1.weight": 2.5e-4, "encoder.token_embedding.weight": 1.25e-4,
                "encoder.embedding_norm.weight": 1.25e-4}
    if norm_first:
        expected["encoder.final_norm.weight"] = 5e-4
    params = dict(model.named_parameters())
    assert len(rate) == len(params)  # every parameter trains, once
    for name, lr in expected.items():
        assert rate[id(params[name])][0] == pytest.approx(lr), name
    assert rate[id(params["encoder.layers.0.linear1.weight"])][1] == 0.01
    assert rate[id(params["encoder.embedding_norm.weight"])][1] == 0.0
    assert {lr for lr, _ in map(rate.get, map(id, params.values()))} == {1e-3, 5e-4, 2.5e-4, 1.25e-4}
    assert {group["lr"] for group in adamw(model, 1e-3, 0.01).param_groups} == {1e-3}  # no decay: one rate


def test_layer_decay_zero_trains_the_head_alone():
    model = BertClassifier(BertConfig(vocab_size=50, hidden_size=8, num_layers=2, num_heads=2,
                                      feedforward_size=16, max_len=12), pool="mean")
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = adamw(model, 1e-2, 0.01, layer_decay=0.0)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert changed == {"pooler.weight", "pooler.bias", "classifier.weight", "classifier.bias"}
