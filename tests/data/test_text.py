"""The text loaders: vocabularies, char-rnn's streams, the tiny-shakespeare
split, and the errors a user sees."""
import pytest
import torch

from graphseq.data import text
from graphseq.data.text import TextStreams, Vocabulary, load_tiny_shakespeare, split_stream, tfidf, tokenize
from graphseq.errors import GraphseqError


def test_character_vocabulary_round_trip():
    vocab = Vocabulary.of_characters("hello\n")
    assert vocab.symbols == ["\n", "e", "h", "l", "o"]
    ids = vocab.encode("hole")
    assert ids.tolist() == [2, 4, 3, 1]
    assert vocab.decode(ids) == "hole"


def test_character_vocabulary_names_unknown_characters():
    with pytest.raises(GraphseqError, match="'z'"):
        Vocabulary.of_characters("abc").encode("abz")


def test_word_vocabulary_maps_rare_and_unseen_words_to_unknown():
    vocab = Vocabulary.of_words([["a", "b", "a"], ["c", "a", "b"]], min_freq=2)
    assert vocab.symbols == ["<unk>", "a", "b"]
    assert vocab.encode(["b", "c", "zebra"]).tolist() == [2, 0, 0]


def test_streams_continue_from_window_to_window():
    ids = torch.arange(27)
    streams = TextStreams(ids, batch_size=2, window=4)
    # (27 - 1) // 2 = 13 characters per stream, 3 whole windows of 4.
    assert len(streams) == 3
    first, _ = streams[0]
    second, targets = streams[1]
    assert first.tolist() == [[0, 1, 2, 3], [13, 14, 15, 16]]
    assert second.tolist() == [[4, 5, 6, 7], [17, 18, 19, 20]]
    assert torch.equal(targets, second + 1)


def test_streams_keep_the_tail_without_drop_last():
    streams = TextStreams(torch.arange(27), batch_size=2, window=4, drop_last=False)
    assert len(streams) == 4
    inputs, targets = streams[3]
    assert inputs.tolist() == [[12], [25]]
    assert targets.tolist() == [[13], [26]]


def test_streams_refuse_a_text_too_short():
    with pytest.raises(GraphseqError, match="too short"):
        TextStreams(torch.arange(10), batch_size=4, window=8)


def test_tiny_shakespeare_split_sizes(data_root, mirror):
    chars = load_tiny_shakespeare(data_root, mirror)
    assert len(chars) == 1_115_394
    vocab = Vocabulary.of_characters(chars)
    assert len(vocab) == 65
    train, val = split_stream(vocab.encode(chars), 0.1)
    assert (train.numel(), val.numel()) == (1_003_854, 111_540)
    assert vocab.decode(train[:14]) == "First Citizen:"


def test_missing_text_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(text, "TINY_SHAKESPEARE_URL", (tmp_path / "nowhere.txt").as_uri())
    with pytest.raises(GraphseqError, match="input.txt.*download failed"):
        load_tiny_shakespeare(tmp_path / "root", mirror=tmp_path / "empty-mirror")


def test_text_downloads_when_root_and_mirror_lack_it(tmp_path, monkeypatch):
    source = tmp_path / "served.txt"
    source.write_text("To be, or not to be\n")
    monkeypatch.setattr(text, "TINY_SHAKESPEARE_URL", source.as_uri())
    monkeypatch.setattr(text, "TINY_SHAKESPEARE", {})  # A stand-in, not the real text.
    assert load_tiny_shakespeare(tmp_path / "root") == "To be, or not to be\n"
    assert (tmp_path / "root" / "tinyshakespeare" / "input.txt").is_file()


def test_split_fraction_must_be_a_fraction():
    with pytest.raises(GraphseqError, match="val_fraction"):
        split_stream(torch.arange(10), 1.5)


def test_tokenize_lowercases_and_splits_on_non_word_characters():
    assert tokenize("It's a GREAT film -- 10/10!") == ["it", "s", "a", "great", "film", "10", "10"]


def test_tfidf_rows_are_unit_vectors_over_the_shared_words():
    x = tfidf(["a great film", "a great cast", "a dull film", "nothing"], min_df=2)
    assert x.layout == torch.sparse_csr and x.shape == (4, 2)  # film, great; "a" is a stop word
    dense = x.to_dense()
    assert torch.allclose(dense[:3].norm(dim=1), torch.ones(3))
    assert (dense[3] == 0).all()  # no word seen twice


def test_word_vocabulary_refuses_a_sentence_given_as_a_string():
    with pytest.raises(TypeError, match="of_words takes each sentence as a list of words, got the string 'ab'"):
        Vocabulary.of_words(["ab", "cd"])
    assert Vocabulary.of_words([("ab", "cd")]).symbols == ["<unk>", "ab", "cd"]


@pytest.mark.parametrize("bad", [3, -1])
def test_decode_refuses_ids_outside_the_vocabulary(bad):
    vocab = Vocabulary(list("abc"))
    with pytest.raises(GraphseqError, match=f"id {bad} is outside the vocabulary's 3 symbols"):
        vocab.decode([0, bad])
    with pytest.raises(GraphseqError, match=f"id {bad} is outside"):
        vocab.decode(torch.tensor([bad]))
