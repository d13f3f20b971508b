"""Pictures with no model in them: a captioner's attention over an image, and
grey images drawn in the terminal."""
import re

import pytest
import torch

from graphseq.errors import GraphseqError
from graphseq.pictures import draw_attention, image_blocks, png_bytes, side_by_side, terminal_width


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


def test_terminal_width_reads_columns_with_a_floor_of_20(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert terminal_width() == 100
    monkeypatch.setenv("COLUMNS", "30")  # a narrow terminal: its own width, so pictures do not fold
    assert terminal_width() == 30
    monkeypatch.setenv("COLUMNS", "12")
    assert terminal_width() == 20


def _attention_overlays(monkeypatch, tmp_path, attention):
    """The attention layers drawn over each word's panel (caught where the figure is written)."""
    import graphseq.pictures as pictures

    caught = {}
    monkeypatch.setattr(pictures, "write_png", lambda figure, path: caught.update(figure=figure))
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


def _decoded(data):
    import io

    import numpy as np
    from PIL import Image

    return np.array(Image.open(io.BytesIO(data)))


def test_png_bytes_keeps_uint8_pixels_and_channels():
    grey = torch.arange(12, dtype=torch.uint8).view(1, 3, 4)
    assert _decoded(png_bytes(grey)).tolist() == grey[0].tolist()
    colour = torch.randint(0, 256, (3, 5, 2), dtype=torch.uint8)
    assert _decoded(png_bytes(colour)).tolist() == colour.permute(1, 2, 0).tolist()


def test_png_bytes_scales_other_values_by_their_range_and_draws_what_is_not_finite_black():
    image = torch.tensor([[-1.0, 0.0], [float("nan"), 1.0]])
    assert _decoded(png_bytes(image)).tolist() == [[0, 128], [0, 255]]
    assert _decoded(png_bytes(torch.full((2, 2), 7.0))).tolist() == [[0, 0], [0, 0]]


@pytest.mark.parametrize("shape", [(2, 3, 3), (1, 1, 3, 3), (0, 4)])
def test_png_bytes_refuses_shapes_that_are_no_image(shape):
    with pytest.raises(ValueError, match="png_bytes expects an image"):
        png_bytes(torch.zeros(shape))
