"""The character language model: shapes, state carried across windows,
sampling, and the tools that look at single hidden units."""
import re

import pytest
import torch

from graphseq.data.text import Vocabulary
from graphseq.errors import GraphseqError
from graphseq.models.charlm import (CharLM, detach_state, heatmap_html, hidden_activations,
                                    interesting_units, master_forget_distances, sample,
                                    text_features, write_heatmap)

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


def test_prime_with_unknown_characters_is_an_error():
    model = CharLM(len(VOCAB), embedding_dim=4, hidden_size=8)
    with pytest.raises(GraphseqError, match="'Z'"):
        sample(model, VOCAB, "Zed", 5)


def test_activations_cover_every_character():
    model = CharLM(len(VOCAB), embedding_dim=4, hidden_size=8)
    assert hidden_activations(model, VOCAB, "abc\nd").shape == (5, 8)


def test_heatmap_has_one_coloured_span_per_character_and_unit():
    text = "a<b\n"
    activations = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 0.5], [0.5, 0.5]])
    page = heatmap_html(text, activations, [0, 1])
    spans = re.findall(r'<span style="background:([^"]+)" title="([^"]+)">', page)
    assert len(spans) == 2 * len(text)
    assert spans[0] == ("rgb(255,0,0)", "+1.000")  # unit 0 at 'a': full red
    assert spans[1] == ("rgb(0,0,255)", "-1.000")  # unit 0 at '<': full blue
    assert ">&lt;</span>" in page and "><</span>" not in page


def test_heatmap_refuses_a_unit_the_model_lacks():
    with pytest.raises(GraphseqError, match="out of range"):
        heatmap_html("ab", torch.zeros(2, 3), [3])


def test_text_features_by_hand():
    features = text_features('A:\nb "c"')
    assert features["position in line"].tolist() == [0, 1, 2, 0, 1, 2, 3, 4]
    assert features["speaker line"].tolist() == [1, 1, 1, 0, 0, 0, 0, 0]
    assert features["inside quotes"].tolist() == [0, 0, 0, 0, 0, 1, 1, 0]


def test_interesting_units_find_a_unit_that_counts_the_line():
    text = "ab:\nabcd\nab\nabcdabc\n"
    position = text_features(text)["position in line"]
    activations = torch.randn(len(text), 6, generator=torch.Generator().manual_seed(0))
    activations[:, 4] = -0.1 * position
    found = interesting_units(text, activations, top=2)
    unit, r = found["position in line"][0]
    assert unit == 4 and r == pytest.approx(-1.0)
    assert "inside quotes" not in found  # the text has no quotes


def test_onlstm_heat_map_adds_the_master_forget_distances(tmp_path):
    model = CharLM(len(VOCAB), cell="onlstm", embedding_dim=4, hidden_size=8, chunk_size=2)
    distances = master_forget_distances(model, VOCAB, "ab:\ncd")
    assert distances.shape == (6,) and bool(((distances >= 0) & (distances <= 1)).all())
    write_heatmap(model, VOCAB, "ab:\ncd", tmp_path / "units.html", cells=[1])
    page = (tmp_path / "units.html").read_text()
    assert "<h2>unit 1</h2>" in page and "master-forget distance" in page


def test_other_cells_have_no_distances():
    assert master_forget_distances(CharLM(len(VOCAB), hidden_size=8), VOCAB, "ab") is None
