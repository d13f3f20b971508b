import hashlib
import shutil
import tracemalloc
import zipfile

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


def test_png_that_is_a_folder_is_named_before_decoding(write_fake_omniglot, tmp_path):
    folder = write_fake_omniglot(tmp_path / "a")
    path = next((folder / "images_background").rglob("*_04.png"))
    path.unlink()
    path.mkdir()
    with pytest.raises(GraphseqError, match=f"{path} is a folder, not a PNG"):
        load_omniglot(tmp_path / "root", tmp_path / "a", download=False)


def test_cache_that_is_a_folder_is_refused_up_front(write_fake_omniglot, tmp_path, monkeypatch):
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    write_fake_omniglot(mirror)
    cache = root / "omniglot-py" / "processed" / "omniglot-28x28.pt"
    (cache / "mine").mkdir(parents=True)
    monkeypatch.setattr(omniglot_module, "build_omniglot", lambda *a, **k: pytest.fail("decoded the PNGs"))
    with pytest.raises(GraphseqError, match=f"{cache} is not a file .*move it away"):
        load_omniglot(root, mirror, size=28, download=False)
    assert (cache / "mine").is_dir()
    (cache / "mine").rmdir()
    cache.rmdir()
    cache.parent.rmdir()
    cache.parent.write_text("not a folder")
    with pytest.raises(GraphseqError, match=f"{cache.parent} is not a folder .*move it away"):
        load_omniglot(root, mirror, size=28, download=False)


def test_manifest_that_is_not_utf8_is_named(write_fake_omniglot, tmp_path):
    write_fake_omniglot(tmp_path / "a", manifest=True)
    manifest = tmp_path / "a" / "SHA256SUMS"
    data = bytearray(manifest.read_bytes())
    data[100:102] = b"\xff\xfe"
    manifest.write_bytes(bytes(data))
    with pytest.raises(GraphseqError, match=f"manifest {manifest} is not UTF-8 text"):
        load_omniglot(tmp_path / "root", tmp_path / "a", download=False)


def test_manifest_must_list_every_png(write_fake_omniglot, tmp_path):
    write_fake_omniglot(tmp_path / "a", manifest=True)
    manifest = tmp_path / "a" / "SHA256SUMS"
    text = manifest.read_text()
    manifest.write_text(text[:len(text) // 2])  # torn in the middle of a line
    with pytest.raises(GraphseqError, match=f"{manifest} does not list .*\\.png \\(and \\d+ more\\); is it truncated"):
        load_omniglot(tmp_path / "root", tmp_path / "a", download=False)
    manifest.write_text("".join(text.splitlines(keepends=True)[:40]))  # whole lines only
    with pytest.raises(GraphseqError, match=f"{manifest} does not list .*0003_01.png"):
        load_omniglot(tmp_path / "root", tmp_path / "a", download=False)


def test_manifest_line_without_a_sha256_is_named(write_fake_omniglot, tmp_path):
    write_fake_omniglot(tmp_path / "a", manifest=True)
    manifest = tmp_path / "a" / "SHA256SUMS"
    lines = manifest.read_text().splitlines(keepends=True)
    lines[2] = lines[2][:30] + lines[2][64:]
    manifest.write_text("".join(lines))
    with pytest.raises(GraphseqError, match=f"line 3 of {manifest} has no SHA-256"):
        load_omniglot(tmp_path / "root", tmp_path / "a", download=False)


def test_missing_character_folder_is_named_in_the_log(write_fake_omniglot, tmp_path, caplog):
    import shutil

    folder = write_fake_omniglot(tmp_path / "a", alphabets=(("Alpha", 3), ("Beta", 1)))
    shutil.rmtree(folder / "images_background" / "Alpha" / "character02")
    with caplog.at_level("WARNING", logger="graphseq"):
        data = load_omniglot(tmp_path / "root", tmp_path / "a", download=False)
    assert len(data.characters) == 4
    assert "holds 4 characters, not 1623 (missing: images_background/Alpha/character02)" in caplog.text


def test_unidentified_png_names_the_file_not_a_buffer(write_fake_omniglot, tmp_path):
    folder = write_fake_omniglot(tmp_path / "a")
    path = next((folder / "images_background").rglob("*_03.png"))
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(GraphseqError, match=f"{path} is not a readable PNG") as raised:
        load_omniglot(tmp_path / "a", None, download=False)
    assert "BytesIO" not in str(raised.value) and "0x" not in str(raised.value)


def _cache_of(root):
    return root / "omniglot-py" / "processed" / "omniglot-28x28.pt"


@pytest.mark.parametrize("damage", ["flipped byte", "zeroed block"])
def test_a_damaged_cache_is_rebuilt_not_used(write_fake_omniglot, tmp_path, caplog, monkeypatch, damage):
    # The cache is keyed on the PNGs' paths and sizes: damage inside it left the key as it was.
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    write_fake_omniglot(mirror)
    good = load_omniglot(root, mirror, size=28, download=False)
    cache = _cache_of(root)
    data = bytearray(cache.read_bytes())
    pixels = good.images.numpy().tobytes()
    start = data.find(pixels[len(pixels) // 2:len(pixels) // 2 + 64])  # inside the stored tensor's bytes
    assert start > 0
    if damage == "flipped byte":
        data[start + 10] ^= 0x01
    else:
        data[start:start + 2000] = bytes(2000)
    cache.write_bytes(bytes(data))
    with caplog.at_level("INFO", logger="graphseq"):
        again = load_omniglot(root, mirror, size=28, download=False)
    assert torch.equal(again.images, good.images) and again.characters == good.characters
    assert f"{cache} is damaged (its contents do not match the SHA-256 stored with them); rebuilding it" in caplog.text
    # The rebuilt cache serves the next run.
    monkeypatch.setattr(omniglot_module, "build_omniglot", lambda *a, **k: pytest.fail("rebuilt the cache"))
    assert torch.equal(load_omniglot(root, mirror, size=28, download=False).images, good.images)


def test_a_cache_without_a_checksum_is_rebuilt_once(write_fake_omniglot, tmp_path, caplog, monkeypatch):
    from graphseq.io import load_checkpoint, save_checkpoint

    mirror, root = tmp_path / "mirror", tmp_path / "root"
    write_fake_omniglot(mirror)
    good = load_omniglot(root, mirror, size=28, download=False)
    cache = _cache_of(root)
    old = load_checkpoint(cache)
    old.pop("sha256")  # as graphseq built it before the checksum
    old["images"] = torch.zeros_like(old["images"])
    save_checkpoint(old, cache)
    with caplog.at_level("INFO", logger="graphseq"):
        again = load_omniglot(root, mirror, size=28, download=False)
    assert torch.equal(again.images, good.images)
    assert f"{cache} has no checksum of its contents (an older graphseq built it); rebuilding it" in caplog.text
    assert "sha256" in load_checkpoint(cache)
    monkeypatch.setattr(omniglot_module, "build_omniglot", lambda *a, **k: pytest.fail("rebuilt the cache"))
    load_omniglot(root, mirror, size=28, download=False)


def _write_real_layout(base):
    """Omniglot's 1,623 character folders under their real names, each with one
    empty file for a PNG: enough to list, never decoded."""
    folder = base / "omniglot-py"
    for part, alphabets in omniglot_module.ALPHABETS.items():
        for alphabet, count in alphabets.items():
            for n in range(1, count + 1):
                (folder / part / alphabet / f"character{n:02d}").mkdir(parents=True)
                (folder / part / alphabet / f"character{n:02d}" / "0001_01.png").touch()
    return folder


def test_a_real_layout_missing_a_character_is_refused_by_name(tmp_path):
    # The seeded split permutes the characters found: with 1,622 every split changed, with only a warning.
    folder = _write_real_layout(tmp_path / "a")
    assert sum(map(len, omniglot_module.ALPHABETS.values())) == 50
    assert sum(sum(a.values()) for a in omniglot_module.ALPHABETS.values()) == 1623
    # All of them: the listing passes, and the (empty) PNGs are decoded.
    with pytest.raises(GraphseqError, match="0001_01.png is not a readable PNG"):
        load_omniglot(tmp_path / "root", tmp_path / "a", download=False)

    (folder / "images_background" / "Korean" / "character07" / "0001_01.png").unlink()  # emptied
    (folder / "images_background" / "Korean" / "character07" / "Thumbs.db").touch()
    with pytest.raises(GraphseqError, match=f"^{folder} lacks the Omniglot character folder\\(s\\) "
                                            f"images_background/Korean/character07: deleted or emptied"):
        load_omniglot(tmp_path / "root", tmp_path / "a", download=False)
    import shutil
    shutil.rmtree(folder / "images_evaluation" / "Tengwar" / "character25")  # the last of its alphabet: no gap
    with pytest.raises(GraphseqError, match="character folder\\(s\\) images_background/Korean/character07, "
                                            "images_evaluation/Tengwar/character25: deleted"):
        load_omniglot(tmp_path / "root", tmp_path / "a", download=False)
    assert not (tmp_path / "root").exists()


def test_a_real_layout_with_a_character_added_is_refused(tmp_path):
    folder = _write_real_layout(tmp_path / "a")
    (folder / "images_background" / "Latin" / "character27").mkdir()
    (folder / "images_background" / "Latin" / "character27" / "0001_01.png").touch()
    with pytest.raises(GraphseqError, match=f"^{folder} holds character folder\\(s\\) Omniglot does not have: "
                                            f"images_background/Latin/character27; .*move them away$"):
        load_omniglot(tmp_path / "root", tmp_path / "a", download=False)


def test_the_alphabet_table_is_the_real_layout(mirror):
    folder = mirror / "omniglot-py"
    if not folder.is_dir():
        pytest.skip(f"no Omniglot in the mirror {mirror}")
    for part, alphabets in omniglot_module.ALPHABETS.items():
        found = {a.name: sorted(c.name for c in a.iterdir()) for a in (folder / part).iterdir() if a.is_dir()}
        assert found == {alphabet: [f"character{n:02d}" for n in range(1, count + 1)]
                         for alphabet, count in alphabets.items()}


@pytest.mark.parametrize("mode, size, message", [
    ("1", (104, 105), "is 104x105 pixels, not an Omniglot drawing (105x105)"),
    ("L", (210, 210), "is 210x210 pixels, not an Omniglot drawing (105x105)"),
    ("LA", (105, 105), "has colour mode LA, not an Omniglot drawing"),
    ("RGBA", (105, 105), "has colour mode RGBA, not an Omniglot drawing"),
])
def test_a_png_that_is_not_a_drawing_is_refused_by_name(write_fake_omniglot, tmp_path, mode, size, message):
    # It was resized like the others, its alpha channel dropped, silently.
    import re

    from PIL import Image

    folder = write_fake_omniglot(tmp_path / "a")
    path = next((folder / "images_background").rglob("*_04.png"))
    Image.new(mode, size, 255 if mode != "1" else 1).save(path)
    with pytest.raises(GraphseqError, match=f"^{re.escape(str(path))} {re.escape(message)}"):
        load_omniglot(tmp_path / "a", None, size=28, download=False)
    assert not (folder / "processed").exists()


def test_a_drawing_edited_at_the_same_size_in_bytes_rebuilds_the_cache(write_fake_omniglot, tmp_path):
    # The cache was keyed on the PNGs' paths and sizes only: the edit was never seen.
    import os

    mirror, root = tmp_path / "mirror", tmp_path / "root"
    folder = write_fake_omniglot(mirror)
    first = load_omniglot(root, mirror, size=28, download=False)
    edited = folder / "images_background" / "Alpha" / "character01" / "0001_01.png"
    other = folder / "images_background" / "Beta" / "character01" / "0003_01.png"
    assert edited.stat().st_size == other.stat().st_size  # so that only the modification time tells
    stat = edited.stat()
    edited.write_bytes(other.read_bytes())
    os.utime(edited, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10 ** 9))
    second = load_omniglot(root, mirror, size=28, download=False)
    assert torch.equal(second.images[0, 0], first.images[2, 0])
    assert not torch.equal(second.images[0, 0], first.images[0, 0])


def test_a_data_root_that_cannot_be_written_is_refused_before_decoding(write_fake_omniglot, tmp_path, monkeypatch,
                                                                       deny_writes):
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    write_fake_omniglot(mirror)
    root.mkdir()
    deny_writes(root)
    monkeypatch.setattr(omniglot_module, "build_omniglot", lambda *a, **k: pytest.fail("decoded the PNGs"))
    with pytest.raises(GraphseqError, match=f"cannot build the Omniglot cache omniglot-28x28.pt: {root} is not "
                                            f"writable"):
        load_omniglot(root, mirror, size=28, download=False)
    assert list(root.iterdir()) == []


def _serve_archives(tmp_path, monkeypatch, archives):
    """Stands in for the web: ``download_url`` copies ``archives[part]``
    (a file made by the test) to where the part's zip is asked for."""
    def download_url(url, path):
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(archives[url.rsplit("/", 1)[1].removesuffix(".zip")], path)

    monkeypatch.setattr(omniglot_module, "download_url", download_url)


def test_a_downloaded_archive_with_the_wrong_md5_is_refused_by_name(tmp_path, monkeypatch):
    wrong = tmp_path / "wrong.zip"
    wrong.write_bytes(b"not the Omniglot archive")
    _serve_archives(tmp_path, monkeypatch, {part: wrong for part in omniglot_module.PARTS})
    root = tmp_path / "datasets"
    with pytest.raises(GraphseqError, match=r"download failed: images_background\.zip arrived damaged \(its MD5 is "
                                            r"not 68d2efa1b9178cc56df9314c21c6e718\)"):
        omniglot_module.find_omniglot(root, None)
    assert not root.exists()  # neither the archive nor an empty omniglot-py is left


def _md5(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "md5").hexdigest()


def test_the_archives_are_checked_in_chunks_then_extracted(tmp_path, monkeypatch):
    # Each archive holds 8 MiB; checking its MD5 must not read it whole into memory.
    archives, payload = {}, 8 << 20
    for part in omniglot_module.PARTS:
        archives[part] = tmp_path / f"{part}.zip"
        with zipfile.ZipFile(archives[part], "w") as archive:  # stored, so the zip is as large
            archive.writestr(f"{part}/Alpha/character01/drawing.bin", bytes(payload))
        monkeypatch.setitem(omniglot_module.ZIP_MD5, part, _md5(archives[part]))
    _serve_archives(tmp_path, monkeypatch, archives)
    root = tmp_path / "datasets"
    tracemalloc.start()
    try:
        folder = omniglot_module.find_omniglot(root, None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < payload // 2
    assert folder == root / "omniglot-py"
    assert sorted(p.name for p in folder.iterdir()) == sorted(omniglot_module.PARTS)  # the zips are gone
    assert (folder / "images_evaluation" / "Alpha" / "character01" / "drawing.bin").stat().st_size == payload


def test_an_extraction_cut_off_leaves_no_part_a_later_run_takes_for_whole(tmp_path, monkeypatch):
    archives = {}
    for part in omniglot_module.PARTS:
        archives[part] = tmp_path / f"{part}.zip"
        with zipfile.ZipFile(archives[part], "w") as archive:
            archive.writestr(f"{part}/Alpha/character01/drawing.png", b"png")
            archive.writestr(f"{part}/Beta/character01/drawing.png", b"png")
        monkeypatch.setitem(omniglot_module.ZIP_MD5, part, _md5(archives[part]))
    _serve_archives(tmp_path, monkeypatch, archives)
    extractall = zipfile.ZipFile.extractall

    def cut_off(archive, path=None, members=None, pwd=None):  # the disk fills after the first file
        archive.extract(archive.namelist()[0], path)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(zipfile.ZipFile, "extractall", cut_off)
    root = tmp_path / "datasets"
    with pytest.raises(GraphseqError, match="download failed: .*No space left on device"):
        omniglot_module.find_omniglot(root, None)
    assert not root.exists()  # no half part, no zip, no empty folder
    monkeypatch.setattr(zipfile.ZipFile, "extractall", extractall)
    folder = omniglot_module.find_omniglot(root, None)  # a later run downloads both parts whole
    assert sorted(p.name for p in folder.iterdir()) == sorted(omniglot_module.PARTS)
    assert (folder / "images_background" / "Beta" / "character01" / "drawing.png").read_bytes() == b"png"
