"""Views of trained models: the character model's hidden-unit heat map, the
units that track features of a text, and an ON-LSTM's master-forget distances."""
import re

import pytest
import torch

from graphseq.data.text import Vocabulary
from graphseq.errors import GraphseqError
from graphseq.models.charlm import CharLM
from graphseq.views import (heatmap_html, hidden_activations, interesting_units,
                            master_forget_distances, text_features, write_heatmap)

VOCAB = Vocabulary.of_characters("abcd:\n ")


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
