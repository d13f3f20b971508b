import numpy as np
import pytest
import torch

from graphseq.data import omniglot as omniglot_module
from graphseq.data.omniglot import load_omniglot, omniglot_split
from graphseq.errors import GraphseqError


def test_loads_resizes_and_caches(write_fake_omniglot, tmp_path, monkeypatch):
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    write_fake_omniglot(mirror)
    data = load_omniglot(root, mirror, size=28, download=False)
    assert data.images.shape == (4, 20, 28, 28) and data.images.dtype == torch.uint8
    assert data.characters == ["Alpha/character01", "Alpha/character02", "Beta/character01", "Gamma/character01"]
    # The third character's bar is at columns 30-37 of 105 (8-9 of 28): ink there, paper elsewhere.
    column = data.images[2, 0].float().mean(dim=0)
    assert float(column[8:10].mean()) < 150 and float(column[12:].mean()) > 250
    assert (root / "omniglot-py" / "processed" / "omniglot-28x28.pt").is_file()
    assert not (mirror / "omniglot-py" / "processed").exists()  # the mirror is never written

    # A second load reads the cache and decodes nothing.
    monkeypatch.setattr(omniglot_module, "build_omniglot", lambda *a, **k: pytest.fail("rebuilt the cache"))
    again = load_omniglot(root, mirror, size=28, download=False)
    assert torch.equal(again.images, data.images) and again.characters == data.characters


def test_cache_is_rebuilt_when_its_source_changes(write_fake_omniglot, tmp_path):
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    folder = write_fake_omniglot(mirror)
    first = load_omniglot(root, mirror, size=28, download=False)
    # Replace one drawing by a blank page of another size in bytes.
    from PIL import Image
    path = next((folder / "images_evaluation").rglob("*_01.png"))
    Image.fromarray(np.ones((105, 105), dtype=bool)).save(path)
    second = load_omniglot(root, mirror, size=28, download=False)
    assert not torch.equal(first.images[3, 0], second.images[3, 0])
    assert int(second.images[3, 0].min()) == 255


def test_checks_the_manifest_while_building(write_fake_omniglot, tmp_path):
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    folder = write_fake_omniglot(mirror, manifest=True)
    load_omniglot(root, mirror, size=28, download=False)  # every sum matches
    path = next((folder / "images_background").rglob("*_05.png"))
    path.write_bytes(path.read_bytes()[:-20])  # truncated
    with pytest.raises(GraphseqError, match=f"damaged dataset file .*{path.name}.*SHA-256"):
        load_omniglot(tmp_path / "other-root", mirror, size=28, download=False)


def test_damaged_png_and_missing_drawings_are_named(write_fake_omniglot, tmp_path):
    folder = write_fake_omniglot(tmp_path / "a")
    path = next((folder / "images_background").rglob("*_03.png"))
    path.write_bytes(b"not a png")
    with pytest.raises(GraphseqError, match=f"{path.name} is not a readable PNG"):
        load_omniglot(tmp_path / "a", None, download=False)
    folder = write_fake_omniglot(tmp_path / "b")
    next((folder / "images_evaluation").rglob("*_07.png")).unlink()
    with pytest.raises(GraphseqError, match="Gamma/character01 has 19 drawings"):
        load_omniglot(tmp_path / "b", None, download=False)


def test_missing_dataset_names_the_places(tmp_path):
    with pytest.raises(GraphseqError, match="Omniglot not found.*no mirror set"):
        load_omniglot(tmp_path, None, download=False)


def test_a_failed_download_leaves_no_folder_behind(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise OSError("Name or service not known")

    monkeypatch.setattr("graphseq.data.files.urllib.request.urlopen", offline)
    root = tmp_path / "datasets"
    with pytest.raises(GraphseqError, match="download failed: Name or service not known"):
        load_omniglot(root, None)
    assert not root.exists()
    root.mkdir()
    (root / "README.md").write_text("kept")
    with pytest.raises(GraphseqError, match="download failed"):
        load_omniglot(root, None)
    assert [p.name for p in root.iterdir()] == ["README.md"]


def test_split_and_rotations():
    split = omniglot_split()
    assert [len(split[s]) for s in ("train", "val", "test")] == [1100, 100, 423]
    everything = torch.cat(list(split.values()))
    assert torch.equal(everything.sort().values, torch.arange(1623))
    assert torch.equal(omniglot_split()["test"], split["test"])  # seeded
    assert not torch.equal(omniglot_split(seed=1)["test"], split["test"])
    with pytest.raises(GraphseqError, match="between 1 and 1622"):
        omniglot_split(train=1623)

    images = torch.arange(3 * 20 * 4 * 4, dtype=torch.uint8).view(3, 20, 4, 4)
    data = omniglot_module.Omniglot(images, ["A/character01", "A/character02", "B/character01"])
    classes = data.classes(torch.tensor([2, 0]))
    assert classes.images.shape == (8, 20, 1, 4, 4)
    assert classes.names[:5] == ["B/character01/rot0", "B/character01/rot90", "B/character01/rot180",
                                 "B/character01/rot270", "A/character01/rot0"]
    assert torch.equal(classes.images[1, 3, 0], torch.rot90(images[2, 3], 1))
    assert data.classes(torch.tensor([1]), rotations=False).images.shape == (1, 20, 1, 4, 4)


@pytest.mark.slow
def test_real_omniglot(mirror, data_root):
    data = load_omniglot(data_root, mirror)
    assert data.images.shape == (1623, 20, 28, 28)
    assert len(set(data.characters)) == 1623
    # Paper is white (most pixels), ink dark; every drawing has some ink.
    assert float(data.images.float().mean()) > 200
    assert bool((data.images.flatten(2).min(dim=2).values < 128).all())


@pytest.mark.parametrize("size", [0, -3, 2.5])
def test_bad_size_is_refused_before_any_file_is_read(size, write_fake_omniglot, tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    write_fake_omniglot(mirror)
    monkeypatch.setattr(omniglot_module, "find_omniglot", lambda *a, **k: pytest.fail("looked for the files"))
    with pytest.raises(GraphseqError, match=f"load_omniglot needs a size of at least 1 pixel, got {size}"):
        load_omniglot(tmp_path / "root", mirror, size=size, download=False)


def test_classes_refuse_character_indices_out_of_range():
    data = omniglot_module.Omniglot(torch.zeros(3, 20, 4, 4, dtype=torch.uint8), ["A/c1", "A/c2", "B/c1"])
    for index in (-1, 3):
        with pytest.raises(GraphseqError, match=f"character index {index} is out of range 0-2"):
            data.classes(torch.tensor([0, index]))
    with pytest.raises(GraphseqError, match="needs a 1-D tensor of character indices"):
        data.classes(torch.tensor([0.0, 1.0]))
    assert data.classes(torch.tensor([], dtype=torch.long)).num_classes == 0
