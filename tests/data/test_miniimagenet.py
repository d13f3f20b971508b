import os

import pytest
import torch

from graphseq.data import miniimagenet as module
from graphseq.data.miniimagenet import load_miniimagenet
from graphseq.errors import GraphseqError


def test_loads_each_split_and_caches_it(write_fake_miniimagenet, tmp_path, monkeypatch):
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    write_fake_miniimagenet(mirror, size=90)  # resized to 84
    train = load_miniimagenet(root, mirror, "train")
    assert train.images.shape == (6, 4, 3, 84, 84) and train.images.dtype == torch.uint8
    assert len(train.names) == 6 and train.names[0].startswith("n")
    assert load_miniimagenet(root, mirror, "test").num_classes == 5
    monkeypatch.setattr(module, "_decode", lambda *a: pytest.fail("decoded again"))
    assert torch.equal(load_miniimagenet(root, mirror, "train").images, train.images)
    x = train.normalize(train.images[0, :2])
    assert x.shape == (2, 3, 84, 84) and x.dtype == torch.float32


def test_bad_layouts_are_named(write_fake_miniimagenet, tmp_path):
    with pytest.raises(GraphseqError, match="mini-ImageNet not found.*cannot be downloaded"):
        load_miniimagenet(tmp_path, None, "train")
    folder = write_fake_miniimagenet(tmp_path / "a")
    (folder / "train.csv").write_text((folder / "train.csv").read_text() + "extra.jpg,nX\n")
    with pytest.raises(GraphseqError, match="same number of images"):
        load_miniimagenet(tmp_path / "a", None, "train")
    folder = write_fake_miniimagenet(tmp_path / "b")
    victim = sorted((folder / "images").iterdir())[0]
    victim.write_bytes(b"garbage")
    with pytest.raises(GraphseqError, match=f"{victim.name} is not a readable image"):
        load_miniimagenet(tmp_path / "b", None, "train")
    with pytest.raises(GraphseqError, match="unknown mini-ImageNet split"):
        load_miniimagenet(tmp_path / "b", None, "dev")


def test_a_split_csv_that_is_not_text_is_named(write_fake_miniimagenet, tmp_path):
    folder = write_fake_miniimagenet(tmp_path, classes=(2, 2, 2), per_class=2, size=8)
    (folder / "val.csv").write_bytes(b"\xff\xfe\x00garbage\x00\x80\x81\n")
    with pytest.raises(GraphseqError, match=r"val\.csv is not UTF-8 text"):
        load_miniimagenet(tmp_path, None, "val")


def test_an_image_listed_twice_is_refused_with_its_line(write_fake_miniimagenet, tmp_path):
    folder = write_fake_miniimagenet(tmp_path, classes=(2, 2, 2), per_class=2, size=8)
    lines = (folder / "train.csv").read_text().splitlines()
    lines[2] = lines[1]  # one image twice, its neighbour gone: the counts still agree
    (folder / "train.csv").write_text("\n".join(lines) + "\n")
    name = lines[1].split(",")[0]
    with pytest.raises(GraphseqError, match=rf"train\.csv, line 3: {name} is listed twice \(first on line 2\)"):
        load_miniimagenet(tmp_path, None, "train")


def test_an_image_replaced_by_one_of_the_same_size_is_decoded_again(write_fake_miniimagenet, tmp_path):
    from PIL import Image

    folder = write_fake_miniimagenet(tmp_path, classes=(2, 2, 2), per_class=2, size=8)
    before = load_miniimagenet(tmp_path, None, "train")
    first = folder / "images" / (folder / "train.csv").read_text().splitlines()[1].split(",")[0]
    stat = first.stat()
    Image.new("RGB", (8, 8), (255, 255, 255)).save(first)  # a plain white image: fewer bytes than the noisy one
    first.write_bytes(first.read_bytes().ljust(stat.st_size, b"\0"))  # padded after the JPEG's end to the old size
    assert first.stat().st_size == stat.st_size
    os.utime(first, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    after = load_miniimagenet(tmp_path, None, "train")
    assert (after.images[0, 0] > 250).all() and not (before.images[0, 0] > 250).all()


@pytest.mark.parametrize("row, message", [("n99999999.jpg,", "empty label"), (",n99999999", "empty filename")])
def test_a_row_with_an_empty_field_is_refused_with_its_line(write_fake_miniimagenet, tmp_path, row, message):
    # A file cut right after a comma made a class with an empty label, and the
    # error blamed the class sizes.
    folder = write_fake_miniimagenet(tmp_path, classes=(2, 2, 2), per_class=2, size=8)
    (folder / "train.csv").write_text((folder / "train.csv").read_text() + row)
    with pytest.raises(GraphseqError, match=rf"train\.csv, line 6: {message}$"):
        load_miniimagenet(tmp_path, None, "train")


def test_16_bit_grey_images_keep_their_grey_levels(write_fake_miniimagenet, tmp_path):
    # They were clipped to white.
    import numpy as np
    from PIL import Image

    folder = write_fake_miniimagenet(tmp_path, classes=(2, 2, 2), per_class=2, size=8)
    first = folder / "images" / (folder / "train.csv").read_text().splitlines()[1].split(",")[0]
    Image.fromarray(np.full((8, 8), 128 * 257, dtype=np.uint16)).save(first, format="PNG")
    assert (load_miniimagenet(tmp_path, None, "train").images[0, 0] == 128).all()
