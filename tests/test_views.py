"""Views of trained models: the character model's hidden-unit heat map, the
units that track features of a text, an ON-LSTM's master-forget distances,
drawn from its activations."""
import re

import pytest
import torch

from graphseq.data.text import Vocabulary
from graphseq.errors import GraphseqError
from graphseq.models.charlm import CharLM
from graphseq.views import (check_cells, heatmap_html, hidden_activations, interesting_units, master_forget_distances,
                            text_features, write_heatmap)

VOCAB = Vocabulary.of_characters("abcd:\n ")


def test_activations_cover_every_character():
    model = CharLM(len(VOCAB), embedding_dim=4, hidden_size=8)
    assert hidden_activations(model, VOCAB, "abc\nd").shape == (5, 8)


@pytest.mark.parametrize("cell, extra", [("lstm", {"num_layers": 2}), ("gru", {}), ("onlstm", {"chunk_size": 2})])
def test_windows_that_carry_the_state_read_the_text_as_one_pass(cell, extra):
    """A long text is read a window at a time, so its memory stays bounded;
    the numbers are those of one pass over the whole text."""
    torch.manual_seed(0)
    model = CharLM(len(VOCAB), cell=cell, embedding_dim=4, hidden_size=8, **extra)
    text = "ab:\ncd ab\n" * 5
    whole = hidden_activations(model, VOCAB, text, window=len(text))
    for window in (1, 7, 16):
        assert torch.allclose(hidden_activations(model, VOCAB, text, window=window), whole, atol=1e-6)
    if cell == "onlstm":
        distances = master_forget_distances(model, VOCAB, text, window=len(text))
        assert torch.allclose(master_forget_distances(model, VOCAB, text, window=7), distances, atol=1e-6)


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
    with pytest.raises(GraphseqError, match=r"^--cells 1,3,9: unit\(s\) 3, 9 out of range: the model has 3 hidden "
                                            r"units \(0..2\)$"):
        check_cells([1, 3, 9], 3, "--cells 1,3,9: ")


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
