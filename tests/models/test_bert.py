"""The small BERT: its encoder is torch's Transformer encoder with copied
weights, its masked-LM output layer is the token embedding, and a padded
batch reads each sequence as if it were alone."""
import pytest
import torch

from graphseq.data.pretraining import IGNORE, collate
from graphseq.data.wordpiece import WordPieceTokenizer
from graphseq.errors import GraphseqError
from graphseq.models.bert import (BertClassifier, BertConfig, BertEncoder, BertForPretraining, POOLS,
                                  cls_nodes, fill_mask)

CONFIG = dict(vocab_size=50, hidden_size=16, num_layers=3, num_heads=4, feedforward_size=32, max_len=12)


def random_sequences(sizes, seed=0):
    generator = torch.Generator().manual_seed(seed)
    sequences = [[2] + torch.randint(5, 50, (n - 2,), generator=generator).tolist() + [3] for n in sizes]
    segments = [[0] * (n // 2) + [1] * (n - n // 2) for n in sizes]
    return collate(sequences, segments)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_encoder_equals_torch_transformer_encoder_on_padded_batches(norm_first, activation):
    torch.manual_seed(0)
    config = BertConfig(**CONFIG, dropout=0.1, activation=activation, norm_first=norm_first)
    ours = BertEncoder(config).eval()
    for p in ours.parameters():  # Non-trivial biases and layer-norm scales.
        torch.nn.init.normal_(p, std=0.3)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, activation=activation,
                                             batch_first=True, norm_first=norm_first)
    theirs = torch.nn.TransformerEncoder(layer, 3, norm=torch.nn.LayerNorm(16) if norm_first else None,
                                         enable_nested_tensor=False).eval()
    state = {k: v for k, v in ours.state_dict().items() if k.startswith("layers.")}
    if norm_first:
        state.update({f"norm.{k}": v for k, v in ours.final_norm.state_dict().items()})
    theirs.load_state_dict(state)

    sizes = [5, 12, 3, 8]
    graphs = random_sequences(sizes)
    out = ours(graphs.tokens, graphs.segments, graphs.positions, graphs.batch)
    embedded = ours.embed(graphs.tokens, graphs.segments, graphs.positions)
    padded = torch.zeros(len(sizes), max(sizes), 16)
    padding = torch.ones(len(sizes), max(sizes), dtype=torch.bool)
    for i, part in enumerate(embedded.split(sizes)):
        padded[i, :len(part)], padding[i, :len(part)] = part, False
    with torch.no_grad():
        expected = theirs(padded, src_key_padding_mask=padding)[~padding]
    assert torch.allclose(out, expected, atol=1e-5)


def test_each_sequence_is_read_alone():
    torch.manual_seed(0)
    encoder = BertEncoder(BertConfig(**CONFIG)).eval()
    graphs = random_sequences([4, 7, 6])
    together = encoder(graphs.tokens, graphs.segments, graphs.positions, graphs.batch)
    alone = random_sequences([7], seed=0)
    mask = graphs.batch == 1
    single = encoder(graphs.tokens[mask], graphs.segments[mask], graphs.positions[mask],
                     torch.zeros(int(mask.sum()), dtype=torch.long))
    assert alone.tokens.numel() == 7
    assert torch.allclose(together[mask], single, atol=1e-5)


def test_masked_lm_output_layer_is_the_token_embedding():
    model = BertForPretraining(BertConfig(**CONFIG))
    torch.nn.init.normal_(model.mlm_bias)
    states = torch.randn(3, 16)
    hidden = model.mlm_norm(torch.nn.functional.gelu(model.mlm_transform(states)))
    expected = hidden @ model.encoder.token_embedding.weight.t() + model.mlm_bias
    assert torch.allclose(model.mlm_logits(states), expected, atol=1e-6)
    # No second [vocab, hidden] matrix: the output layer is the embedding itself.
    tables = [name for name, p in model.named_parameters() if p.shape == (50, 16)]
    assert tables == ["encoder.token_embedding.weight"]


def test_pair_loss_ignores_single_sentences():
    torch.manual_seed(0)
    model = BertForPretraining(BertConfig(**CONFIG)).eval()
    graphs = random_sequences([6, 9, 5])
    graphs.mlm_labels = torch.full_like(graphs.tokens, IGNORE)
    graphs.mlm_labels[2] = graphs.tokens[2]
    graphs.nsp_labels = torch.tensor([1, IGNORE, 0])
    with torch.no_grad():
        _, figures = model.loss(graphs)
        _, _, nsp_logits = model(graphs)
    expected = torch.nn.functional.cross_entropy(nsp_logits[[0, 2]], torch.tensor([1, 0]))
    assert figures["nsp_loss"] == pytest.approx(float(expected), rel=1e-5)
    assert figures["nsp_count"] == 2


def test_classifier_starts_from_the_pretrained_encoder_and_pooler():
    pretrained = BertForPretraining(BertConfig(**CONFIG))
    classifier = BertClassifier.from_pretraining(pretrained, num_classes=3).eval()
    for name, value in pretrained.encoder.state_dict().items():
        assert torch.equal(classifier.encoder.state_dict()[name], value)
    assert torch.equal(classifier.pooler.weight, pretrained.pooler.weight)
    graphs = random_sequences([4, 10])
    assert classifier(graphs).shape == (2, 3)
    fresh = BertClassifier.from_pretraining(pretrained, pooler=False)
    assert torch.equal(fresh.encoder.token_embedding.weight, pretrained.encoder.token_embedding.weight)
    assert not torch.equal(fresh.pooler.weight, pretrained.pooler.weight)
    assert cls_nodes(graphs.positions).tolist() == [0, 4]



def test_mean_pool_reads_each_sentence_alone():
    torch.manual_seed(0)
    pretrained = BertForPretraining(BertConfig(**CONFIG))
    classifier = BertClassifier.from_pretraining(pretrained, pool="mean").eval()
    graphs = random_sequences([4, 10, 7])
    states = classifier.encoder(graphs.tokens, graphs.segments, graphs.positions, graphs.batch)
    means = torch.stack([states[graphs.batch == g].mean(0) for g in range(3)])
    expected = classifier.classifier(torch.tanh(classifier.pooler(means)))
    torch.testing.assert_close(classifier(graphs), expected)
    alone = collate([graphs.tokens[graphs.batch == 1].tolist()], [graphs.segments[graphs.batch == 1].tolist()])
    torch.testing.assert_close(classifier(alone)[0], expected[1], rtol=1e-5, atol=1e-6)
    cls_logits = BertClassifier.from_pretraining(pretrained).eval()(graphs)
    assert not torch.allclose(cls_logits, expected)
    with pytest.raises(Exception, match="pool must be one of cls, mean"):
        BertClassifier(BertConfig(**CONFIG), pool="max")

def test_too_long_sequence_is_refused():
    encoder = BertEncoder(BertConfig(**CONFIG))
    graphs = random_sequences([13])
    with pytest.raises(Exception, match="longer than the model's 12 positions"):
        encoder(graphs.tokens, graphs.segments, graphs.positions, graphs.batch)


def test_pretraining_refuses_a_batch_without_mlm_labels_or_with_labels_of_the_wrong_length():
    model = BertForPretraining(BertConfig(**CONFIG)).eval()
    graphs = random_sequences([4, 5])
    with pytest.raises(GraphseqError, match="needs mlm_labels in the batch"):
        model(graphs)
    graphs.mlm_labels = torch.full((8,), IGNORE)
    with pytest.raises(GraphseqError, match=r"one mlm_label per token \(9\), got mlm_labels of shape \(8,\)"):
        model(graphs)
    graphs.mlm_labels = torch.full_like(graphs.tokens, IGNORE)
    graphs.nsp_labels = torch.tensor([1])
    with pytest.raises(GraphseqError, match=r"one nsp_label per sequence \(2\), got shape \(1,\)"):
        model.loss(graphs)


def test_cls_heads_refuse_an_empty_sequence():
    torch.manual_seed(0)
    graphs = collate([[2, 7, 3], [], [2, 8, 3]])
    classifier = BertClassifier(BertConfig(**CONFIG)).eval()
    with pytest.raises(GraphseqError, match="BertClassifier reads the \\[CLS\\] node of each sequence, "
                                            "but 1 of the 3 sequences are empty"):
        classifier(graphs)
    graphs.mlm_labels = torch.full_like(graphs.tokens, IGNORE)
    with pytest.raises(GraphseqError, match="BertForPretraining reads the \\[CLS\\] node"):
        BertForPretraining(BertConfig(**CONFIG)).eval()(graphs)
    # Mean pooling reads every sequence, an empty one included (as zeros).
    assert BertClassifier(BertConfig(**CONFIG), pool="mean").eval()(graphs).shape == (3, 2)


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer.train(["the movie was wonderful , and the acting amazing ."] * 3,
                                    vocab_size=60, min_frequency=1)


def test_fill_mask_refuses_a_tokenizer_of_another_size(tokenizer):
    torch.manual_seed(0)
    for size in (tokenizer.vocab_size - 3, tokenizer.vocab_size + 3):
        model = BertForPretraining(BertConfig(**{**CONFIG, "vocab_size": size}))
        with pytest.raises(GraphseqError, match=f"the model has {size} tokens but the tokenizer "
                                                f"{tokenizer.vocab_size}"):
            fill_mask(model, tokenizer, "the [MASK] was wonderful")
    model = BertForPretraining(BertConfig(**{**CONFIG, "vocab_size": tokenizer.vocab_size}))
    filled = fill_mask(model, tokenizer, "the [MASK] was wonderful", top_k=2)
    assert len(filled) == 1 and len(filled[0]) == 2 and all(isinstance(piece, str) for piece, _ in filled[0])
    everything = fill_mask(model, tokenizer, "the [MASK] was wonderful", top_k=tokenizer.vocab_size)
    assert len(everything[0]) == tokenizer.vocab_size - 5  # the special tokens are never proposed
    assert not {piece for piece, _ in everything[0]} & {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    for top_k in (0, -1):
        with pytest.raises(GraphseqError, match=f"fill_mask needs top_k >= 1, got {top_k}"):
            fill_mask(model, tokenizer, "the [MASK] was wonderful", top_k=top_k)


def test_an_empty_batch_gives_no_rows_and_a_zero_loss():
    torch.manual_seed(0)
    empty = collate([])
    for pool in POOLS:
        assert BertClassifier(BertConfig(**CONFIG), num_classes=3, pool=pool).eval()(empty).shape == (0, 3)
    empty.mlm_labels, empty.nsp_labels = torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    loss, figures = BertForPretraining(BertConfig(**CONFIG)).loss(empty)
    assert float(loss) == 0.0 and figures["mlm_count"] == figures["nsp_count"] == 0


def test_fill_mask_gives_the_model_back_in_the_mode_it_had(tokenizer):
    model = BertForPretraining(BertConfig(**{**CONFIG, "vocab_size": tokenizer.vocab_size}))
    for training in (True, False):
        model.train(training)
        fill_mask(model, tokenizer, "the [MASK] was wonderful")
        assert model.training == training and all(m.training == training for m in model.modules())


def test_fill_mask_reads_the_mask_in_any_case_and_says_how_to_write_it(tokenizer):
    # "[mask]" was lower-cased into three pieces, and the refusal gave no hint.
    torch.manual_seed(0)
    model = BertForPretraining(BertConfig(**{**CONFIG, "vocab_size": tokenizer.vocab_size}))
    assert fill_mask(model, tokenizer, "the [mask] was [Mask]") == fill_mask(model, tokenizer, "the [MASK] was [MASK]")
    with pytest.raises(GraphseqError, match=r"no \[MASK\] to fill: 'the mask was'; write \[MASK\] where"):
        fill_mask(model, tokenizer, "the mask was")
