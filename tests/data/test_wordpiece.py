"""The WordPiece tokenizer: trained on a corpus, it reads every sentence of
that corpus back exactly, keeps the special tokens at fixed ids, and survives
a save and load."""
import pytest

from graphseq.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer
from graphseq.errors import GraphseqError

CORPUS = [
    "the movie was wonderful , and the acting amazing .",
    "a terrible , awful film that nobody should see !",
    "unwatchable : the plot is thin and the jokes are thinner .",
    "Wonderful performances make up for a thin script",
] * 5


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer.train(CORPUS, vocab_size=120, min_frequency=1)


def test_special_tokens_have_fixed_ids(tokenizer):
    assert [tokenizer.id_to_token(i) for i in range(5)] == SPECIAL_TOKENS
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id) == (0, 1, 2, 3, 4)


def test_round_trip_gives_back_every_sentence(tokenizer):
    for sentence in CORPUS:
        ids = tokenizer.encode(sentence)
        assert tokenizer.unk_id not in ids
        assert tokenizer.decode(ids) == " ".join(tokenizer.words(sentence))
        assert tokenizer.decode(ids) == sentence.lower()


def test_a_small_vocabulary_cuts_rare_words_into_marked_pieces(tokenizer):
    pieces = tokenizer.tokens("unwatchable thinner")
    assert len(pieces) > 2 and any(p.startswith("##") for p in pieces)
    assert tokenizer.decode(tokenizer.encode("unwatchable thinner")) == "unwatchable thinner"


def test_mask_written_in_text_is_the_mask_token(tokenizer):
    ids = tokenizer.encode("the movie was [MASK] .")
    assert ids.count(tokenizer.mask_id) == 1 and ids[-2] == tokenizer.mask_id
    assert tokenizer.tokens("the movie was [MASK] .")[-2] == "[MASK]"


def test_saved_tokenizer_reads_text_the_same(tokenizer, tmp_path):
    tokenizer.save(tmp_path / "tokenizer.json")
    loaded = WordPieceTokenizer.load(tmp_path)
    assert loaded.vocab_size == tokenizer.vocab_size
    assert [loaded.encode(s) for s in CORPUS] == [tokenizer.encode(s) for s in CORPUS]
    folder = tmp_path / "run"
    folder.mkdir()
    tokenizer.save(folder)  # into the folder, as load reads a folder
    assert WordPieceTokenizer.load(folder).vocab_size == tokenizer.vocab_size


def test_damaged_tokenizer_file_is_named(tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text('{"version": "1.0", "model": ')
    with pytest.raises(GraphseqError, match="damaged tokenizer file .*tokenizer.json"):
        WordPieceTokenizer.load(path)


def test_a_reason_without_words_still_gives_a_one_line_refusal(tmp_path, monkeypatch):
    # The tokenizers library may raise a bare Exception(); the refusal then names its kind.
    import tokenizers

    def from_file(path):
        raise Exception()

    monkeypatch.setattr(tokenizers.Tokenizer, "from_file", from_file)
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(GraphseqError, match=r"^damaged tokenizer file .*tokenizer.json: Exception$"):
        WordPieceTokenizer.load(tmp_path)



def test_the_same_pieces_get_the_same_ids(tokenizer):
    # The trainer's own numbering follows hash order, which varies between processes.
    pieces = [tokenizer.id_to_token(i) for i in range(5, tokenizer.vocab_size)]
    assert pieces == sorted(pieces)


def test_a_tokenizer_file_without_the_special_tokens_is_named(tokenizer, tmp_path):
    import json

    path = tmp_path / "tokenizer.json"
    tokenizer.save(path)
    saved = json.loads(path.read_text())
    saved["model"]["vocab"]["[NOMASK]"] = saved["model"]["vocab"].pop("[MASK]")
    saved["added_tokens"] = [t for t in saved["added_tokens"] if t["content"] != "[MASK]"]
    path.write_text(json.dumps(saved))
    with pytest.raises(GraphseqError, match=r"tokenizer.json: a WordPiece tokenizer must hold .* as ids 0-4"):
        WordPieceTokenizer.load(path)


@pytest.mark.parametrize("bad", [10**6, -1])
def test_decode_refuses_an_id_outside_the_vocabulary(tokenizer, bad):
    size = tokenizer.vocab_size
    with pytest.raises(GraphseqError, match=rf"WordPieceTokenizer.decode: id {bad} is outside the vocabulary's "
                                            rf"{size} pieces \(ids 0 to {size - 1}\)"):
        tokenizer.decode([5, bad])
    assert tokenizer.decode([size - 1]) == tokenizer.id_to_token(size - 1)


@pytest.mark.parametrize("bad", [10**6, -1])
def test_id_to_token_refuses_an_id_outside_the_vocabulary(tokenizer, bad):
    size = tokenizer.vocab_size
    with pytest.raises(GraphseqError, match=rf"^WordPieceTokenizer.id_to_token: id {bad} is outside the "
                                            rf"vocabulary's {size} pieces \(ids 0 to {size - 1}\)$"):
        tokenizer.id_to_token(bad)
    with pytest.raises(GraphseqError, match="id_to_token"):
        tokenizer.id_to_token(size)
