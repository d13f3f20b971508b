"""The sentence-polarity data: loading the real files, the download from
Cornell's tarball, the cross-validation folds every polarity model
shares, and finding the snippets in other text."""
import io
import tarfile
from pathlib import Path

import pytest
import torch

from graphseq.data import polarity
from graphseq.data.polarity import SnippetMatcher, cv_folds, load_polarity, polarity_folder
from graphseq.errors import GraphseqError


def test_load_polarity_reads_both_files_negative_first(data_root, mirror):
    sentences, labels = load_polarity(data_root, mirror)
    assert len(sentences) == len(labels) == 10_662
    assert labels[:5331] == [0] * 5331 and labels[5331:] == [1] * 5331
    assert sentences[5331].startswith("the rock is destined to be the 21st century's new \" conan \"")
    # Windows-1252: dashes, quotes and ellipses, not the control characters latin-1 reads there.
    text = "\n".join(sentences)
    assert "\u2013" in text and "\u2026" in text and not any("\x80" <= c <= "\x9f" for c in text)
    assert sum(s.startswith("\u2026") for s in sentences) > 0  # an ellipsis str.strip() took for whitespace


def test_each_fold_splits_every_item_into_exactly_one_part():
    for train, val, test in cv_folds(103, k=10, seed=0):
        assert sorted(torch.cat([train, val, test]).tolist()) == list(range(103))
        assert val.numel() in (10, 11) and test.numel() in (10, 11)


def test_every_item_is_tested_once_and_validated_once():
    folds = cv_folds(103, k=10, seed=0)
    tested = torch.cat([test for _, _, test in folds])
    validated = torch.cat([val for _, val, _ in folds])
    assert sorted(tested.tolist()) == list(range(103))
    assert sorted(validated.tolist()) == list(range(103))
    # The validation fold of fold i is the test fold of fold i + 1.
    assert all(torch.equal(folds[i][1], folds[(i + 1) % 10][2]) for i in range(10))


def test_folds_are_fixed_by_the_seed_alone():
    first, again, other = cv_folds(50, 5, seed=1), cv_folds(50, 5, seed=1), cv_folds(50, 5, seed=2)
    torch.manual_seed(123)  # The global generator plays no part.
    assert all(torch.equal(a, b) for fa, fb in zip(first, again) for a, b in zip(fa, fb))
    assert not torch.equal(first[0][2], other[0][2])
    assert first[0][2].tolist() == sorted(first[0][2].tolist())


def test_polarity_folds_have_the_usual_sizes():
    folds = cv_folds(10_662)
    # 10,662 = 2 x 1,067 + 8 x 1,066: the first two parts take one item more.
    assert [f[2].numel() for f in folds] == [1067, 1067] + [1066] * 8
    assert [f[0].numel() for f in folds] == [8528, 8529] + [8530] * 7 + [8529]


def test_folds_refuse_too_few_items_or_folds():
    with pytest.raises(GraphseqError, match="k >= 3"):
        cv_folds(10, k=2)
    with pytest.raises(GraphseqError, match="cannot cut 4 items into 10 folds"):
        cv_folds(4)


def _tarball(path: Path, members: dict) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_polarity_download_copies_only_the_data_files(tmp_path, monkeypatch):
    archive = tmp_path / "rt-polaritydata.tar.gz"
    _tarball(archive, {"rt-polaritydata/rt-polarity.pos": b"good\n",
                       "rt-polaritydata/rt-polarity.neg": b"bad\n",
                       "../escaped.txt": b"should not be written"})
    monkeypatch.setattr(polarity, "URL", archive.as_uri())
    monkeypatch.setattr(polarity, "CHECKSUMS", {})  # Stand-ins, not the real files.
    folder = polarity_folder(tmp_path / "root")
    assert sorted(p.name for p in folder.iterdir()) == ["rt-polarity.neg", "rt-polarity.pos"]
    assert not (tmp_path / "root" / "escaped.txt").exists()
    assert (folder / "rt-polarity.pos").read_bytes() == b"good\n"


SNIPPETS = ["the rock is destined to be the 21st century's new \" conan \"", "a gripping , moving film .",
            "dull", "well done !"]


def test_a_sentence_with_the_words_of_a_snippet_holds_it_whatever_its_case_and_punctuation():
    matcher = SnippetMatcher(SNIPPETS)
    document = ["I went.", "The Rock is destined to be the 21st century's new Conan!", "Dull...", "Well-done."]
    assert matcher.sentences_holding(document) == [1, 2, 3]


def test_a_snippet_inside_longer_text_marks_every_sentence_it_touches():
    matcher = SnippetMatcher(SNIPPETS)
    assert matcher.sentences_holding(["I saw it.", "Truly a gripping, moving", "film", "it was."]) == [1, 2]
    assert matcher.sentences_holding(["It is a gripping, moving film indeed."]) == [0]


def test_snippets_of_one_or_two_words_are_matched_only_as_a_whole_sentence():
    matcher = SnippetMatcher(SNIPPETS)
    assert matcher.sentences_holding(["A dull film.", "It was well done!", "dull", "well done"]) == [2, 3]


def test_a_near_miss_holds_no_snippet():
    matcher = SnippetMatcher(SNIPPETS)
    near = ["A gripping, moving story.",  # one word differs
            "a grippingmoving film",  # two words run together
            "Dullness, well done then.",  # the short snippets inside longer text
            "The rock is destined to be the 21st century's new"]  # a snippet cut short where the document ends
    assert matcher.sentences_holding(near) == []
    assert SnippetMatcher([]).sentences_holding(["dull"]) == [] and matcher.sentences_holding([]) == []
