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
