"""Views of trained models: the character model's hidden-unit heat map, the
units that track features of a text, an ON-LSTM's master-forget distances,
a captioner's attention picture and images drawn in the terminal."""
import re

import pytest
import torch

from graphseq.data.text import Vocabulary
from graphseq.errors import GraphseqError
from graphseq.models.charlm import CharLM
from graphseq.views import (check_cells, draw_attention, heatmap_html, hidden_activations, image_blocks, interesting_units,
                            master_forget_distances, side_by_side, terminal_width, text_features, write_heatmap)

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


@pytest.mark.parametrize("columns", [0, -1])
def test_draw_attention_refuses_fewer_than_one_column(tmp_path, columns):
    with pytest.raises(ValueError, match=f"draw_attention needs columns >= 1, got {columns}"):
        draw_attention([torch.rand(3, 8, 8)], [["a"]], [torch.rand(2, 4)], tmp_path / "a.png", columns=columns)
    assert not (tmp_path / "a.png").exists()


def test_draw_attention_will_not_overwrite_a_file_that_is_not_png(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("keep")
    with pytest.raises(GraphseqError, match="will not overwrite a file that is not .png"):
        draw_attention([torch.rand(3, 8, 8)], [["a"]], [torch.rand(2, 4)], config)
    assert config.read_text() == "keep"


@pytest.mark.parametrize("name", ["a.jpg", "a", "a.png.txt"])
def test_draw_attention_refuses_a_new_file_not_named_png(tmp_path, name):
    with pytest.raises(GraphseqError, match=r"the file name must end in \.png"):
        draw_attention([torch.rand(3, 8, 8)], [["a"]], [torch.rand(2, 4)], tmp_path / name)
    assert list(tmp_path.iterdir()) == []


def test_draw_attention_writes_a_png(tmp_path):
    draw_attention([torch.rand(3, 8, 8)], [["a"]], [torch.rand(2, 4)], tmp_path / "a.png", columns=2)
    assert (tmp_path / "a.png").read_bytes().startswith(b"\x89PNG")


def test_image_blocks_draws_a_grey_or_channels_first_image():
    image = torch.zeros(4, 4)
    image[:, :2] = 1.0  # light left half: the ink is on the right
    assert image_blocks(image, 4) == ["  \u2588\u2588"] * 2
    assert image_blocks(image.expand(3, 4, 4), 4) == image_blocks(image[None], 4) == image_blocks(image, 4)


@pytest.mark.parametrize("width", [0, -3, 2.5])
def test_image_blocks_refuses_a_width_below_one_column(width):
    with pytest.raises(ValueError, match=f"image_blocks needs a whole number width >= 1, got {width}"):
        image_blocks(torch.rand(28, 28), width)


@pytest.mark.parametrize("shape", [(28, 28, 3), (1, 1, 4, 4), (0, 5)])
def test_image_blocks_refuses_shapes_it_does_not_draw(shape):
    expected = r"image_blocks expects an image \[height, width\] or \[channels \(1 or 3\), height, width\], " \
        + re.escape(f"got shape {list(shape)}")
    with pytest.raises(ValueError, match=expected):
        image_blocks(torch.rand(shape), 8)


def test_side_by_side_fits_the_terminal_width(monkeypatch):
    pictures = [["\u2588" * 20] * 3] * 5
    captions = [f"class {c}" for c in range(5)]
    monkeypatch.setenv("COLUMNS", "44")
    lines = side_by_side(pictures, captions)
    assert max(len(line) for line in lines) <= 44
    assert [line for line in lines if line.startswith("class")] == ["class 0               class 1",
                                                                    "class 2               class 3", "class 4"]
    monkeypatch.setenv("COLUMNS", "120")
    assert max(len(line) for line in side_by_side(pictures, captions)) == 20 * 5 + 2 * 4  # one row
    assert side_by_side(pictures, captions, width=44) == lines


def test_terminal_width_reads_columns_with_a_floor_of_40(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert terminal_width() == 100
    monkeypatch.setenv("COLUMNS", "20")
    assert terminal_width() == 40


def _attention_overlays(monkeypatch, tmp_path, attention):
    """The attention layers drawn over each word's panel (caught where the figure is written)."""
    import graphseq.views as views

    caught = {}
    monkeypatch.setattr(views, "write_png", lambda figure, path: caught.update(figure=figure))
    image = torch.zeros(3, 64, 64)
    image[:, :16, :16] = 1.0
    draw_attention([image], [["w"]], [attention], tmp_path / "a.png", columns=4)
    return [axes.get_images()[1] for axes in caught["figure"].axes if len(axes.get_images()) == 2]


def test_attention_spread_evenly_is_drawn_even_and_focused_attention_focused(tmp_path, monkeypatch):
    torch.manual_seed(0)
    even = torch.full((2, 64), 1 / 64) + torch.randn(2, 64) * 1e-4  # the noise of a trained model
    even = even / even.sum(1, keepdim=True)
    for overlay in _attention_overlays(monkeypatch, tmp_path, even):
        assert overlay.get_clim() == (0.0, 1.0)
        shown = overlay.norm(overlay.get_array())
        assert float(shown.max() - shown.min()) < 0.05  # one colour, not blobs of the noise
    focused = torch.zeros(2, 64)
    focused[:, 0] = 1.0
    for overlay in _attention_overlays(monkeypatch, tmp_path, focused):
        shown = overlay.norm(overlay.get_array())
        assert float(shown.max()) == pytest.approx(1.0) and float(shown.min()) < 0.05


@pytest.mark.parametrize("image", [torch.ones(28, 28), torch.zeros(28, 28), torch.full((28, 28), 0.5),
                                   torch.ones(28, 28) + torch.randn(28, 28) * 1e-3,
                                   torch.full((28, 28), float("nan"))],
                         ids=["white", "black", "grey", "faint noise", "all NaN"])
def test_image_blocks_draws_a_blank_page_as_paper(image):
    assert image_blocks(image, 8) == [" " * 8] * 4
    assert image_blocks(image, 8, ink_is_dark=False) == [" " * 8] * 4


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_image_blocks_draws_a_pixel_that_is_not_finite_as_paper(bad):
    image = torch.ones(4, 4)
    image[:, 2:] = 0.0  # ink on the right
    expected = image_blocks(image, 4)
    image[0, 0] = bad
    assert image_blocks(image, 4) == expected == ["  \u2588\u2588"] * 2
