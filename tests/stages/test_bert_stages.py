"""The BERT stages on the IMDB reviews: bert-pretrain smoke runs on tiny
trees of the real layout (the unlabelled reviews, the text of the training
ones), such runs serving every test fold of bert-polarity, both texts
unpacked in one pass over the archive, corpus.texts naming the texts it
knows, the reviews read once for the check before writing and the stage,
and the sentences encoded alike however they are cut into calls. A corpus
without polarity text (IMDB, a folder) drops the sentences that hold a
polarity snippet, and only a run that did so serves every fold."""
import hashlib
import io
import json
import logging
import tarfile
import types

import pytest

from graphseq import run
from graphseq.data import imdb, polarity
from graphseq.data.files import Checksum
from graphseq.data.imdb import load_imdb_unsup
from graphseq.data.wordpiece import WordPieceTokenizer
from graphseq.errors import GraphseqError
from graphseq.stages import bert
from graphseq.stages.bert import _corpus_documents, bert_corpus, encode_documents
from graphseq.stages.bert_polarity import _runs_plan, read_pretraining

TINY = {"model.hidden_size": 16, "model.feedforward_size": 32, "model.num_heads": 2, "tokenizer.vocab_size": 300,
        "pretrain.batch_size": 4, "pretrain.eval_examples": 16, "pretrain.eval_every": 2}
WORDS = "the film plot actor scene ending music story camera light".split()


# A stand-in polarity snippet, planted in corpora: the others are made of words that no review holds.
SNIPPET = "a gripping , moving film ."
NO_SNIPPET = "corpus: dropped 0 sentences that hold a polarity snippet"


def sentences(i):
    """The four sentences of five words of review ``i``."""
    return [" ".join(WORDS[(i + j + k) % len(WORDS)] for k in range(5)).capitalize() + "." for j in range(4)]


def review(i):
    """Review ``i``: its four sentences, in two paragraphs."""
    return " ".join(sentences(i)[:2]) + "<br /><br />" + " ".join(sentences(i)[2:])


@pytest.fixture
def polarity_mirror(monkeypatch):
    """Writes stand-in polarity files into a mirror (12 negative snippets,
    SNIPPET among them, and 12 positive ones) and returns it; the real
    files' checksums are set aside for the test."""
    monkeypatch.setattr(polarity, "CHECKSUMS", {})

    def write(mirror):
        folder = mirror / "rt-polaritydata"
        folder.mkdir(parents=True)
        negative = [SNIPPET] + [f"a dreary snippet , number {i} ." for i in range(11)]
        (folder / "rt-polarity.neg").write_text("\n".join(negative) + "\n", encoding="cp1252")
        (folder / "rt-polarity.pos").write_text("".join(f"a joyous snippet , number {i} .\n" for i in range(12)),
                                                encoding="cp1252")
        return mirror

    return write


def write_reviews(base, count=12, part="unsup", rating=0):
    """``count`` reviews rated ``rating`` under ``base/aclImdb/train/<part>``."""
    folder = base / "aclImdb" / "train" / part
    folder.mkdir(parents=True)
    for i in range(count):
        (folder / f"{i}_{rating}.txt").write_text(review(i))
    return folder


def test_bert_pretrain_reads_the_imdb_reviews_and_serves_every_polarity_fold(tmp_path, polarity_mirror):
    mirror, out = polarity_mirror(tmp_path / "mirror"), tmp_path / "run"
    write_reviews(mirror)
    summary = run("bert-pretrain", overrides={**TINY, "pretrain.steps": 2, "corpus.texts": ["imdb"],
                                              "corpus.held_out": 0.25},
                  out=out, data_root=tmp_path / "root", data_mirror=mirror, quiet=True)
    assert summary["runs"][0]["steps"] == 2 and "val_nsp_accuracy" in summary["runs"][0]  # reviews give pairs
    log = (out / "log.txt").read_text()
    assert "corpus: 12 unlabelled IMDB reviews (48 sentences)" in log and NO_SNIPPET in log
    info = json.loads((out / "pretraining.json").read_text())
    assert info["texts"] == ["imdb"] and info["polarity_checked"] is True and info["polarity_sentences_dropped"] == 0
    assert read_pretraining(out, folds=10, fold_seed=0) == list(range(10))
    assert _runs_plan([out], folds=10, fold_seed=0) == {fold: out for fold in range(10)}


def test_bert_pretrain_reads_the_imdb_training_reviews_and_serves_every_polarity_fold(tmp_path, polarity_mirror):
    mirror, out = polarity_mirror(tmp_path / "mirror"), tmp_path / "run"
    write_reviews(mirror, 6, "neg", rating=2)
    write_reviews(mirror, 6, "pos", rating=9)
    summary = run("bert-pretrain", overrides={**TINY, "pretrain.steps": 2, "corpus.texts": ["imdb-train"],
                                              "corpus.held_out": 0.25},
                  out=out, data_root=tmp_path / "root", data_mirror=mirror, quiet=True)
    assert summary["runs"][0]["steps"] == 2 and "val_nsp_accuracy" in summary["runs"][0]
    log = (out / "log.txt").read_text()
    assert "corpus: 12 IMDB training reviews, their labels unread (48 sentences)" in log and NO_SNIPPET in log
    info = json.loads((out / "pretraining.json").read_text())
    assert info["texts"] == ["imdb-train"] and info["polarity_checked"] is True
    assert read_pretraining(out, folds=10, fold_seed=0) == list(range(10))
    assert _runs_plan([out], folds=10, fold_seed=0) == {fold: out for fold in range(10)}


def test_both_imdb_texts_are_unpacked_by_one_pass_over_one_archive(tmp_path, monkeypatch):
    """With nothing unpacked, "imdb" and "imdb-train" together download the
    archive once and read it once; the unlabelled reviews come first."""
    archive = tmp_path / "served.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for part, texts in (("pos", ["A fine film."] * 2), ("unsup", ["No label."] * 2), ("neg", ["Dull."] * 2)):
            for i, text in enumerate(texts):
                member = tarfile.TarInfo(f"aclImdb/train/{part}/{i}_{dict(pos=8, neg=3).get(part, 0)}.txt")
                member.size = len(text)
                tar.addfile(member, io.BytesIO(text.encode()))
    downloads, opened = [], []

    def download_url(url, path):
        downloads.append(url)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(archive.read_bytes())

    monkeypatch.setattr(imdb, "download_url", download_url)
    monkeypatch.setitem(imdb.CHECKSUMS, imdb.ARCHIVE, Checksum(hashlib.sha256(archive.read_bytes()).hexdigest()))
    real_open = tarfile.open
    monkeypatch.setattr(imdb.tarfile, "open", lambda *args, **kw: opened.append(args[0]) or real_open(*args, **kw))
    documents, _, _ = _corpus_documents(tmp_path / "root", None, "", ["imdb-train", "imdb"], [], 10, 0)
    assert documents == [["No label."]] * 2 + [["Dull."]] * 2 + [["A fine film."]] * 2
    assert len(downloads) == 1 and len(opened) == 1


def test_an_unknown_text_lists_the_known_ones_imdb_among_them(tmp_path):
    with pytest.raises(GraphseqError, match=r"corpus.texts = \['wikipedia'\] is not allowed: .* each item one of "
                                            r"shakespeare, polarity, imdb, imdb-train$"):
        run("bert-pretrain", overrides={**TINY, "corpus.texts": ["wikipedia"]}, out=tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()


def test_the_reviews_are_split_once_while_their_files_are_unchanged(tmp_path, monkeypatch):
    folder = write_reviews(tmp_path / "mirror")
    split = []
    real = imdb.review_sentences
    monkeypatch.setattr(imdb, "review_sentences", lambda text: split.append(text) or real(text))
    first = load_imdb_unsup(tmp_path / "root", tmp_path / "mirror")
    assert load_imdb_unsup(tmp_path / "root", tmp_path / "mirror") == first and len(split) == 12
    (folder / "3_0.txt").write_text("A review rewritten.")
    again = load_imdb_unsup(tmp_path / "root", tmp_path / "mirror")
    assert again[3] == ["A review rewritten."] and len(split) == 24


def test_sentences_are_encoded_alike_however_they_are_cut_into_calls():
    documents = [["The film ends.", "A scene."], [], ["Music!"], ["The plot.", "Light and camera.", "Story."]]
    tokenizer = WordPieceTokenizer.train((s for d in documents for s in d), vocab_size=60, min_frequency=1)
    each = [tokenizer.encode_batch(document) for document in documents]
    assert encode_documents(tokenizer, documents, chunk=2) == each
    assert encode_documents(tokenizer, documents) == each


def fake_pretraining(folder, excluded, texts=("polarity",), source="shared"):
    """A finished bert-pretrain run as bert-polarity's check reads it first:
    its record of the texts it read and the polarity test folds it left out
    (the model is not read before the runs are refused), as written before
    the corpora were checked for polarity snippets."""
    folder.mkdir()
    (folder / "bert.pt").write_bytes(b"")
    (folder / "pretraining.json").write_text(json.dumps({"source": source, "texts": list(texts),
                                                         "excluded_polarity_folds": excluded, "folds": 10,
                                                         "fold_seed": 0}))
    return str(folder)


def refused_runs(capsys, tmp_path, runs):
    """The one-line stderr of bert-polarity refusing ``pretrain.runs = runs``, having written nothing."""
    from graphseq.cli import main

    out = tmp_path / "polarity"
    argv = ["run", "bert-polarity", "--out", str(out), "--data-root", str(tmp_path / "root"),
            "--data-mirror", str(tmp_path / "mirror"), "--set", f"pretrain.runs={json.dumps(runs)}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()
    return err


def test_bert_polarity_names_a_missing_run_folder_and_a_file_as_such(tmp_path, capsys):
    served = fake_pretraining(tmp_path / "a", [0])
    (tmp_path / "notes.txt").write_text("not a run")
    assert f"{tmp_path / 'nope'} does not exist; name the --out folder of a finished bert-pretrain run" in \
        refused_runs(capsys, tmp_path, [str(tmp_path / "nope"), served])
    assert f"{tmp_path / 'notes.txt'} is not a folder; name the --out folder" in \
        refused_runs(capsys, tmp_path, [served, str(tmp_path / "notes.txt")])
    assert "pretrain.runs holds an empty path" in refused_runs(capsys, tmp_path, [served, ""])


def test_bert_polarity_refuses_a_run_named_twice_or_serving_no_fold(tmp_path, capsys):
    first, second = fake_pretraining(tmp_path / "a", [0, 1]), fake_pretraining(tmp_path / "b", [1, 0])
    read_all, other = fake_pretraining(tmp_path / "all", []), fake_pretraining(tmp_path / "c", [5])
    assert f"pretrain.runs names {first} twice" in refused_runs(capsys, tmp_path, [first, other, first])
    assert f"pretrain.runs names {first} twice" in refused_runs(capsys, tmp_path, [first, f"{tmp_path}/./a"])
    assert (f"pretrain.runs: {read_all} serves no test fold: it may have read the sentences of every polarity "
            f"test fold (of folds = 10, fold_seed = 0)") in refused_runs(capsys, tmp_path, [first, read_all])
    assert f"pretrain.runs: {second} serves no test fold: the runs before it serve its folds [0, 1]" in \
        refused_runs(capsys, tmp_path, [first, second])


def test_fold_numbers_out_of_range_are_named_with_their_table(tmp_path):
    with pytest.raises(GraphseqError, match=r"^corpus\.exclude_folds must name folds 0\.\.9, got \[12\]$"):
        run("bert-pretrain", overrides={**TINY, "corpus.exclude_folds": [3, 12]}, out=tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()


def write_corpus(folder, documents):
    """A corpus folder: one file a document, one sentence a line."""
    folder.mkdir()
    for d, document in enumerate(documents):
        (folder / f"doc{d:02d}.txt").write_text("\n".join(document) + "\n")
    return folder


@pytest.mark.slow
def test_a_corpus_folder_drops_a_planted_snippet_and_serves_every_polarity_fold(tmp_path, polarity_mirror,
                                                                                monkeypatch):
    mirror, out = polarity_mirror(tmp_path / "mirror"), tmp_path / "run"
    documents = [sentences(i) for i in range(8)]
    documents[3][1] = "And yet, A Gripping, Moving Film!"
    scans = []
    monkeypatch.setattr(bert, "SnippetMatcher", lambda snippets: scans.append(1) or polarity.SnippetMatcher(snippets))
    run("bert-pretrain", overrides={**TINY, "pretrain.steps": 2, "corpus.held_out": 0.25,
                                    "corpus.folder": str(write_corpus(tmp_path / "corpus", documents))},
        out=out, data_root=tmp_path / "root", data_mirror=mirror, quiet=True)
    assert "corpus: dropped 1 sentence that holds a polarity snippet" in (out / "log.txt").read_text()
    assert len(scans) == 1  # the stage reuses what its check before writing found
    info = json.loads((out / "pretraining.json").read_text())
    assert info["polarity_checked"] is True and info["polarity_sentences_dropped"] == 1
    assert info["training_documents"] + info["held_out_documents"] == 8
    assert read_pretraining(out, folds=10, fold_seed=0) == list(range(10))
    summary = run("bert-polarity", overrides={"pretrain.runs": [str(out)], "finetune.run_folds": [4],
                                              "finetune.max_steps": 1, "finetune.batch_size": 4,
                                              "finetune.scratch": False, "finetune.test": False},
                  out=tmp_path / "polarity", data_root=tmp_path / "root", data_mirror=mirror, quiet=True)
    assert summary["runs"][0]["folds"] == [4]
    assert json.loads((tmp_path / "polarity" / "plan.json").read_text()) == {str(f): str(out) for f in range(10)}


def test_the_sentences_that_hold_a_snippet_are_dropped_and_a_document_left_empty_with_them(tmp_path,
                                                                                         polarity_mirror):
    mirror = polarity_mirror(tmp_path / "mirror")
    documents = [sentences(i) for i in range(6)] + [["A gripping,", "moving film."]]
    documents[2] = documents[2][:2] + ["so: a gripping, moving film", "the end"] + documents[2][2:]
    ctx = types.SimpleNamespace(data_root=tmp_path / "root", data_mirror=mirror, log=logging.getLogger("test"))
    bert_corpus(ctx, folder=str(write_corpus(tmp_path / "corpus", documents)), held_out=0.25)
    expected = [sentences(i) for i in range(6)]
    expected[2] = expected[2][:2] + ["the end"] + expected[2][2:]
    assert sorted(ctx.corpus.train + ctx.corpus.held_out) == sorted(expected)
    assert ctx.corpus.polarity_checked and ctx.corpus.polarity_sentences_dropped == 3


def test_a_corpus_left_with_one_document_is_refused_before_writing(tmp_path, polarity_mirror):
    # The check before writing splits what the stage would train on, not the folder as it stands.
    mirror = polarity_mirror(tmp_path / "mirror")
    folder = write_corpus(tmp_path / "corpus", [sentences(0), ["It is a gripping, moving film."]])
    with pytest.raises(GraphseqError, match="a corpus of 1 document leaves none to hold out for scoring"):
        run("bert-pretrain", overrides={**TINY, "corpus.folder": str(folder)}, out=tmp_path / "run",
            data_root=tmp_path / "root", data_mirror=mirror, quiet=True)
    assert not (tmp_path / "run").exists()


def test_a_run_without_polarity_text_recorded_before_the_snippet_check_is_refused_with_the_fix(tmp_path, capsys):
    for name, texts, source in (("imdb", ["imdb"], "shared"), ("folder", [], str(tmp_path / "corpus"))):
        old = fake_pretraining(tmp_path / name, [], texts=texts, source=source)
        assert refused_runs(capsys, tmp_path, [old]) == (
            f"graphseq: error: {old} was pretrained before graphseq checked corpora for polarity snippets, so its "
            f"text may hold test sentences of any fold; run bert-pretrain again (it drops them) and name the new "
            f"run\n")


def test_a_run_that_read_polarity_text_still_serves_the_folds_it_left_out(tmp_path):
    # Such a run leaves its test folds' snippets out by text and is not scanned; its record, with or
    # without polarity_checked (false), serves those folds as before the check.
    old = fake_pretraining(tmp_path / "old", [2, 7])
    assert read_pretraining(tmp_path / "old", folds=10, fold_seed=0) == [2, 7]
    assert read_pretraining(tmp_path / "old", folds=10, fold_seed=1) == []
    assert _runs_plan([old], folds=10, fold_seed=0) == {2: tmp_path / "old", 7: tmp_path / "old"}
