"""Pretraining text: corpora read as documents of sentences, next-sentence
pairs, packing into ``[CLS] A [SEP] B [SEP]`` and BERT's masking."""
import pytest
import torch

from graphseq.data.pretraining import (IGNORE, SentencePairs, collate, mask_tokens, pack_pair,
                                       read_text_folder, shakespeare_speeches, split_held_out)
from graphseq.errors import GraphseqError

CLS, SEP, MASK, VOCAB = 2, 3, 4, 1000


def test_mask_tokens_chooses_15_percent_and_splits_them_80_10_10():
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(5, VOCAB, (400_000,), generator=generator)
    tokens[::10] = CLS  # special tokens are never chosen
    corrupted, labels = mask_tokens(tokens, VOCAB, MASK, generator)
    chosen = labels != IGNORE
    assert not chosen[::10].any()
    assert chosen.float().sum() / (tokens >= 5).sum() == pytest.approx(0.15, abs=0.002)
    assert torch.equal(labels[chosen], tokens[chosen])
    assert torch.equal(corrupted[~chosen], tokens[~chosen])
    masked = (corrupted[chosen] == MASK).float().mean()
    kept = (corrupted[chosen] == tokens[chosen]).float().mean()
    replaced = ((corrupted[chosen] != MASK) & (corrupted[chosen] != tokens[chosen])).float().mean()
    assert masked == pytest.approx(0.8, abs=0.005)
    # A random replacement draws the original token 1 time in 995: "kept" gains that much.
    assert kept == pytest.approx(0.1 + 0.1 / (VOCAB - 5), abs=0.004)
    assert replaced == pytest.approx(0.1 - 0.1 / (VOCAB - 5), abs=0.004)
    assert int(corrupted[chosen].min()) >= 4  # replacements are never [PAD], [UNK], [CLS], [SEP]


def test_pack_pair_adds_special_tokens_and_segments():
    tokens, segments = pack_pair([10, 11], [20, 21, 22], 16, CLS, SEP)
    assert tokens == [CLS, 10, 11, SEP, 20, 21, 22, SEP]
    assert segments == [0, 0, 0, 0, 1, 1, 1, 1]
    tokens, segments = pack_pair([10, 11], None, 16, CLS, SEP)
    assert tokens == [CLS, 10, 11, SEP] and segments == [0, 0, 0, 0]


def test_pack_pair_trims_the_longer_sentence_to_fit():
    tokens, _ = pack_pair(list(range(10, 20)), [30, 31], 9, CLS, SEP)
    assert tokens == [CLS, 10, 11, 12, 13, SEP, 30, 31, SEP]
    tokens, _ = pack_pair([10], list(range(30, 40)), 8, CLS, SEP)
    assert tokens == [CLS, 10, SEP, 30, 31, 32, 33, SEP]


def numbered_documents():
    # Sentence s of document d is [100 * d + s]: a pair's label can be read off its ids.
    return [[[100 * d + s] for s in range(n)] for d, n in enumerate([4, 1, 3, 5, 2, 1])]


def test_sentence_pairs_are_half_next_half_random_from_another_document():
    pairs = SentencePairs(numbered_documents(), 16, CLS, SEP)
    tokens, segments, labels = pairs.draw(20_000, torch.Generator().manual_seed(0))
    counts = {label: labels.count(label) for label in (0, 1, IGNORE)}
    # 16 sentences, 10 of them with a successor.
    assert counts[IGNORE] / len(labels) == pytest.approx(6 / 16, abs=0.015)
    assert counts[1] / (counts[0] + counts[1]) == pytest.approx(0.5, abs=0.015)
    for t, g, label in zip(tokens, segments, labels):
        if label == IGNORE:
            assert len(t) == 3 and g == [0, 0, 0]
            continue
        a, b = t[1], t[3]
        assert t == [CLS, a, SEP, b, SEP] and g == [0, 0, 0, 1, 1]
        if label == 1:
            assert b == a + 1
        else:
            assert b // 100 != a // 100


def test_pretraining_batch_is_one_graph_per_example():
    pairs = SentencePairs(numbered_documents(), 16, CLS, SEP)
    batch = pairs.batch(8, torch.Generator().manual_seed(1), VOCAB, MASK)
    sizes = torch.bincount(batch.batch).tolist()
    assert batch.num_graphs == 8 and len(sizes) == 8
    assert batch.positions.tolist() == [p for n in sizes for p in range(n)]
    assert batch.nsp_labels.shape == (8,) and batch.mlm_labels.shape == batch.tokens.shape


def test_collate_numbers_nodes_graph_after_graph():
    graphs = collate([[2, 7, 3], [2, 8, 9, 3]])
    assert graphs.batch.tolist() == [0, 0, 0, 1, 1, 1, 1]
    assert graphs.positions.tolist() == [0, 1, 2, 0, 1, 2, 3]
    assert graphs.segments.tolist() == [0] * 7


def test_shakespeare_speeches_drop_the_speaker():
    text = "First Citizen:\nBefore we proceed,\nhear me speak.\n\nAll:\nSpeak, speak.\n"
    assert shakespeare_speeches(text) == [["Before we proceed,", "hear me speak."], ["Speak, speak."]]


def test_corpus_folder_has_one_document_per_file_and_per_blank_line(tmp_path):
    (tmp_path / "a.txt").write_text("one.\ntwo.\n\nthree.\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("four.\n")
    (tmp_path / "notes.md").write_text("not read\n")
    assert read_text_folder(tmp_path) == [["one.", "two."], ["three."], ["four."]]


def test_corpus_folder_errors_name_the_problem(tmp_path):
    with pytest.raises(GraphseqError, match="corpus folder not found"):
        read_text_folder(tmp_path / "missing")
    with pytest.raises(GraphseqError, match="holds no sentences"):
        read_text_folder(tmp_path)
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9\n")
    with pytest.raises(GraphseqError, match="bad.txt is not UTF-8"):
        read_text_folder(tmp_path)
    (tmp_path / "bad.txt").unlink()
    with pytest.raises(GraphseqError, match="corpus folder .*good.txt is a file; give the folder"):
        (tmp_path / "good.txt").write_text("one.\n")
        read_text_folder(tmp_path / "good.txt")
    (tmp_path / "odd.txt").mkdir()
    with pytest.raises(GraphseqError, match="odd.txt is a folder, not a text file"):
        read_text_folder(tmp_path)
    (tmp_path / "odd.txt").rmdir()
    (tmp_path / "gone.txt").symlink_to(tmp_path / "nowhere.txt")
    with pytest.raises(GraphseqError, match="cannot read .*gone.txt: No such file or directory"):
        read_text_folder(tmp_path)


def test_held_out_documents_are_whole_and_seeded():
    documents = [[f"d{i} s{j}" for j in range(3)] for i in range(40)]
    train, held = split_held_out(documents, 0.1, seed=3)
    assert len(held) == 4 and len(train) == 36
    assert sorted(train + held) == sorted(documents)
    assert split_held_out(documents, 0.1, seed=3) == (train, held)


@pytest.mark.parametrize("vocab_size,mask_id,rate,match", [
    (5, 4, 0.15, "vocab_size above the 5 special tokens"),
    (4, 4, 0.15, "vocab_size above the 5 special tokens"),
    (VOCAB, VOCAB, 0.15, f"mask_id {VOCAB} is not a token of the vocabulary of {VOCAB}"),
    (VOCAB, -1, 0.15, "mask_id -1 is not a token"),
    (VOCAB, MASK, 1.5, r"rate in \[0, 1\], got 1.5"),
    (VOCAB, MASK, -0.1, r"rate in \[0, 1\], got -0.1"),
    (VOCAB, MASK, float("nan"), r"rate in \[0, 1\], got nan"),
])
def test_mask_tokens_refuses_bad_arguments(vocab_size, mask_id, rate, match):
    with pytest.raises(GraphseqError, match=match):
        mask_tokens(torch.tensor([5, 6]), vocab_size, mask_id, torch.Generator().manual_seed(0), rate)


def test_mask_tokens_accepts_the_ends_of_the_rate_range():
    tokens = torch.tensor([2, 5, 6, 7, 3])
    _, labels = mask_tokens(tokens, 8, MASK, torch.Generator().manual_seed(0), 1.0)
    assert labels.tolist() == [IGNORE, 5, 6, 7, IGNORE]
    corrupted, labels = mask_tokens(tokens, 8, MASK, torch.Generator().manual_seed(0), 0.0)
    assert torch.equal(corrupted, tokens) and (labels == IGNORE).all()


def test_draw_refuses_a_negative_number_of_examples():
    pairs = SentencePairs(numbered_documents(), 16, CLS, SEP)
    with pytest.raises(GraphseqError, match="draw needs num >= 0 examples, got -1"):
        pairs.draw(-1, torch.Generator().manual_seed(0))
    assert pairs.draw(0, torch.Generator().manual_seed(0)) == ([], [], [])


def test_an_empty_batch_collates_to_no_nodes_and_no_graphs():
    graphs = collate([])
    assert graphs.num_graphs == 0
    for values in (graphs.tokens, graphs.segments, graphs.positions, graphs.batch):
        assert values.dtype == torch.long and values.shape == (0,)
    batch = SentencePairs([[[10, 11], [12]]], 16, CLS, SEP).batch(0, torch.Generator().manual_seed(0), VOCAB, MASK)
    assert batch.num_graphs == 0 and batch.tokens.shape == batch.mlm_labels.shape == batch.nsp_labels.shape == (0,)
