"""The character language model: shapes, state carried across windows,
and sampling. The views of its hidden units are tested in tests/test_views.py."""
import pytest
import torch
import torch.nn.functional as F

from graphseq.data.text import Vocabulary
from graphseq.errors import GraphseqError
from graphseq.models.charlm import CharLM, detach_state, sample, tempered_softmax

VOCAB = Vocabulary.of_characters("abcd:\n ")


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru", "onlstm"])
def test_logits_per_node_and_state_per_stream(cell):
    torch.manual_seed(0)
    model = CharLM(len(VOCAB), cell=cell, embedding_dim=4, hidden_size=8, num_layers=2, chunk_size=4)
    logits, state = model.forward_windows(torch.randint(0, len(VOCAB), (3, 5)))
    assert logits.shape == (3, 5, len(VOCAB))
    h = state[0] if isinstance(state, tuple) else state
    assert h.shape == (2, 3, 8)


def test_two_windows_with_carried_state_equal_one_long_window():
    torch.manual_seed(0)
    model = CharLM(len(VOCAB), embedding_dim=4, hidden_size=8, num_layers=2).eval()
    tokens = torch.randint(0, len(VOCAB), (3, 10))
    whole, _ = model.forward_windows(tokens)
    first, state = model.forward_windows(tokens[:, :4])
    second, _ = model.forward_windows(tokens[:, 4:], detach_state(state))
    assert torch.allclose(torch.cat([first, second], dim=1), whole, atol=1e-6)


def test_detached_state_has_no_history():
    model = CharLM(len(VOCAB), embedding_dim=4, hidden_size=8)
    _, state = model.forward_windows(torch.zeros(2, 3, dtype=torch.long))
    assert all(s.grad_fn is not None for s in state)
    assert all(s.grad_fn is None for s in detach_state(state))


def test_unknown_cell_is_refused():
    with pytest.raises(GraphseqError, match="known cells"):
        CharLM(5, cell="transformer")


def test_sample_has_prime_and_requested_length_and_repeats_with_a_seed():
    torch.manual_seed(0)
    model = CharLM(len(VOCAB), embedding_dim=4, hidden_size=8)
    text = sample(model, VOCAB, prime="ab:", length=40, temperature=0.8, seed=1)
    assert text.startswith("ab:") and len(text) == 43
    assert set(text) <= set(VOCAB.symbols)
    assert sample(model, VOCAB, "ab:", 40, 0.8, seed=1) == text


def test_greedy_sample_takes_the_likeliest_character():
    model = CharLM(len(VOCAB), embedding_dim=4, hidden_size=8)
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.copy_(torch.arange(len(VOCAB), dtype=torch.float))
    assert sample(model, VOCAB, "a", 5, temperature=0) == "a" + VOCAB.symbols[-1] * 5



@pytest.mark.parametrize("temperature", [1e-40, 1e-300, 5e-324])
def test_a_tiny_temperature_takes_the_likeliest_character_instead_of_failing(temperature):
    # 1e-40 overflowed the float32 division, and softmax of inf - inf is nan.
    torch.manual_seed(0)
    model = CharLM(len(VOCAB), embedding_dim=4, hidden_size=8)
    greedy = sample(model, VOCAB, "ab", 20, temperature=0)
    assert sample(model, VOCAB, "ab", 20, temperature=temperature, seed=3) == greedy


def test_ordinary_temperatures_keep_the_plain_softmax_to_the_bit():
    torch.manual_seed(0)
    logits = torch.randn(5, 9) * 4
    logits[:, 2] = float("-inf")  # a banned symbol, as the captioner has
    for temperature in (1e-3, 0.1, 0.7, 1.0, 2.5, 1e6):
        assert torch.equal(tempered_softmax(logits, temperature), F.softmax(logits / temperature, dim=-1))
    model = CharLM(len(VOCAB), embedding_dim=4, hidden_size=8)
    for temperature, seed in [(0.8, 1), (1.0, 2), (0.05, 3)]:
        generator = torch.Generator().manual_seed(seed)
        logits, state = model.forward_windows(VOCAB.encode("ab").view(1, -1))
        drawn = []
        with torch.no_grad():
            for _ in range(30):  # sample's loop as it was
                probs = F.softmax(logits[0, -1].float() / temperature, dim=-1)
                drawn.append(int(torch.multinomial(probs, 1, generator=generator)))
                logits, state = model.forward_windows(torch.tensor([[drawn[-1]]]), state)
        assert sample(model, VOCAB, "ab", 30, temperature, seed=seed) == "ab" + VOCAB.decode(drawn)


def test_tempered_softmax_shares_a_tiny_temperature_among_tied_maxima():
    logits = torch.tensor([[1.0, 3.0, 3.0, float("-inf")], [0.0, -1.0, 0.0, -0.5]])
    assert tempered_softmax(logits, 1e-40).tolist() == [[0.0, 0.5, 0.5, 0.0], [0.5, 0.0, 0.5, 0.0]]
    assert tempered_softmax(logits, 1e-40).dtype == torch.float32

@pytest.mark.parametrize("temperature", [float("nan"), float("inf"), -1.0])
def test_a_temperature_that_is_not_a_finite_number_at_least_zero_is_refused(temperature):
    model = CharLM(len(VOCAB), embedding_dim=4, hidden_size=8)
    with pytest.raises(GraphseqError, match="temperature must be a finite number >= 0"):
        sample(model, VOCAB, "a", 5, temperature=temperature)


def test_prime_with_unknown_characters_is_an_error():
    model = CharLM(len(VOCAB), embedding_dim=4, hidden_size=8)
    with pytest.raises(GraphseqError, match="'Z'"):
        sample(model, VOCAB, "Zed", 5)


def test_sample_refuses_a_vocabulary_of_another_size():
    small = Vocabulary(list("abc"))
    with pytest.raises(GraphseqError, match="the model reads 5 characters but the vocabulary has 3"):
        sample(CharLM(5, embedding_dim=4, hidden_size=8), small, "ab", 20)
    with pytest.raises(GraphseqError, match="the model reads 2 characters but the vocabulary has 3"):
        sample(CharLM(2, embedding_dim=4, hidden_size=8), small, "c", 20)


def test_empty_prime_without_a_line_break_in_the_vocabulary_asks_for_a_prime():
    model = CharLM(3, embedding_dim=4, hidden_size=8)
    with pytest.raises(GraphseqError, match="prime is empty, but this vocabulary has no line break: give a prime"):
        sample(model, Vocabulary(list("abc")), "", 5)
    assert len(sample(model, Vocabulary(list("abc")), "a", 5, seed=0)) == 6


def test_forward_windows_names_the_shape_it_needs():
    model = CharLM(len(VOCAB), embedding_dim=4, hidden_size=8)
    with pytest.raises(GraphseqError, match=r"tokens of shape \[num_streams, window\], got shape \(3,\)"):
        model.forward_windows(torch.tensor([1, 2, 3]))


def test_sample_gives_the_model_back_in_the_mode_it_had():
    model = CharLM(len(VOCAB), embedding_dim=4, hidden_size=8, dropout=0.3)
    for training in (True, False):
        model.train(training)
        sample(model, VOCAB, "ab", 5, seed=0)
        assert model.training == training and all(m.training == training for m in model.modules())


def test_forward_windows_refuses_windows_of_no_characters():
    model = CharLM(len(VOCAB), embedding_dim=4, hidden_size=8)
    with pytest.raises(GraphseqError, match=r"forward_windows needs windows of at least 1 character, "
                                            r"got tokens of shape \(2, 0\)"):
        model.forward_windows(torch.zeros(2, 0, dtype=torch.long))
