"""Caption data: tokens and vocabulary, and the COCO and Flickr readers on
small files written in their layouts (no copy of either set exists here)."""
import io
import json
import re
import sys
import zipfile

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import Terminal
from graphseq.data.captions import (CaptionSet, caption_vocabulary, download_coco, locate_coco,
                                    read_coco_captions, read_flickr_captions, read_image, tokenize_caption)
from graphseq.data.shapes import generate_split
from graphseq.errors import GraphseqError


def _write_images(folder, names, size=40):
    """Generated shapes as image files, so that what is read can be checked pixel by pixel."""
    folder.mkdir(parents=True, exist_ok=True)
    images = generate_split("train", len(names), seed=9, image_size=size).images
    for name, image in zip(names, images):
        Image.fromarray(image.permute(1, 2, 0).numpy()).save(folder / name, quality=95)
    return images


def test_tokenize_lowers_and_drops_punctuation():
    assert tokenize_caption("A man's dog, running. In 2 PARKS!") == ["a", "man's", "dog", "running", "in", "2", "parks"]


def test_tokenize_keeps_accented_letters_and_reads_ascii_as_before():
    assert tokenize_caption("Café naïve, Zürich's ÉCOLE_2") == ["café", "naïve", "zürich's", "école", "2"]
    generator = np.random.default_rng(0)
    texts = ["".join(generator.choice(list("aZ09' ,._-!"), 40)) for _ in range(200)]
    texts += [c for caps in generate_split("train", 20, seed=0, image_size=32).captions for c in caps]
    for text in texts:
        assert tokenize_caption(text) == re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text.lower())


def test_vocabulary_puts_the_special_symbols_first_and_drops_rare_words():
    vocab = caption_vocabulary([["a", "dog"], ["a", "cat"], ["a", "dog"]], min_count=2)
    assert vocab.symbols == ["<pad>", "<start>", "<end>", "<unk>", "a", "dog"]
    assert vocab.encode(["cat", "dog"]).tolist() == [3, 5]


def _write_coco(root, split="train2014"):
    names = [f"COCO_{split}_{i:012d}.png" for i in (7, 3, 5)]
    images = _write_images(root / split, names)
    data = {"info": {}, "licenses": [],
            "images": [{"id": i, "file_name": n, "height": 40, "width": 40} for i, n in zip((7, 3, 5), names)],
            "annotations": [{"image_id": 7, "id": 1, "caption": "A dog."},
                            {"image_id": 3, "id": 2, "caption": "A cat on a mat. "},
                            {"image_id": 7, "id": 3, "caption": "Dog running"}]}
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    (root / "annotations" / f"captions_{split}.json").write_text(json.dumps(data))
    return images


def test_coco_reader_groups_captions_by_image_in_id_order(tmp_path):
    images = _write_coco(tmp_path)
    data = read_coco_captions(tmp_path / "annotations" / "captions_train2014.json", tmp_path / "train2014",
                              image_size=40)
    # Image 5 has no caption and is left out; ids 3 then 7.
    assert data.captions == [["A cat on a mat."], ["A dog.", "Dog running"]]
    assert data.tokens[1] == [["a", "dog"], ["dog", "running"]]
    assert [p.name for p in data.paths] == ["COCO_train2014_000000000003.png", "COCO_train2014_000000000007.png"]
    loaded = data.load_images([0, 1])
    assert loaded.shape == (2, 3, 40, 40)
    assert torch.allclose(loaded[0], images[1].float() / 255)
    assert torch.allclose(loaded[1], images[0].float() / 255)
    assert data.labels[1] == ["dog", "running"]  # content words, for pretraining


def test_coco_reader_resizes_images(tmp_path):
    _write_coco(tmp_path)
    data = read_coco_captions(tmp_path / "annotations" / "captions_train2014.json", tmp_path / "train2014",
                              image_size=16)
    assert data.load_images([0]).shape == (1, 3, 16, 16)


def test_coco_reader_names_a_damaged_file(tmp_path):
    path = tmp_path / "captions.json"
    path.write_text('{"images": [')
    with pytest.raises(GraphseqError, match="captions.json is not a valid JSON file"):
        read_coco_captions(path, tmp_path)
    path.write_text('{"images": []}')
    with pytest.raises(GraphseqError, match="not in the COCO captions format"):
        read_coco_captions(path, tmp_path)
    path.write_text('{"images": [], "annotations": [{"image_id": 4, "caption": "x"}]}')
    with pytest.raises(GraphseqError, match="image id 4"):
        read_coco_captions(path, tmp_path)
    with pytest.raises(GraphseqError, match="not found"):
        read_coco_captions(tmp_path / "nothing.json", tmp_path)


def test_a_missing_or_damaged_image_is_named(tmp_path):
    with pytest.raises(GraphseqError, match="image not found: .*gone.png"):
        read_image(tmp_path / "gone.png", 16)
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n-- not really")
    with pytest.raises(GraphseqError, match="cannot read image .*bad.png"):
        read_image(tmp_path / "bad.png", 16)


def _png_header(width, height):
    """The first chunks of a grey PNG of ``width`` x ``height``: all Pillow
    reads before it decides whether to decode the pixels."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


@pytest.mark.parametrize("side", [10_000, 30_000])  # Pillow warns of the first and refuses the second
def test_an_image_too_large_to_decode_is_refused_without_a_warning(tmp_path, side, recwarn):
    path = tmp_path / "huge.png"
    path.write_bytes(_png_header(side, side))
    with pytest.raises(GraphseqError) as refusal:
        read_image(path, 16)
    assert str(refusal.value) == f"cannot read image {path}: too large ({side * side} pixels)"
    assert not [w for w in recwarn if issubclass(w.category, Image.DecompressionBombWarning)]



def _old_read(path, size):
    """What read_image gave before it knew of orientation, transparency and
    deep pixels: Pillow's RGB conversion, resized."""
    with Image.open(path) as image:
        array = np.asarray(image.convert("RGB").resize((size, size), Image.BILINEAR), dtype=np.uint8)
    return torch.from_numpy(array.copy()).permute(2, 0, 1).float() / 255


def test_ordinary_image_files_read_as_before(tmp_path):
    # The training sets' files (RGB JPEGs and PNGs, greyscale, palette, bilevel,
    # CMYK) give the same tensors, to the bit, as the plain RGB conversion did.
    image = Image.fromarray(_write_images(tmp_path / "shapes", ["a.png"])[0].permute(1, 2, 0).numpy())
    files = {"rgb.png": image, "rgb.jpg": image, "grey.png": image.convert("L"), "cmyk.jpg": image.convert("CMYK"),
             "palette.png": image.convert("P", palette=Image.ADAPTIVE), "palette.gif": image.convert("P"),
             "bilevel.png": image.convert("1")}
    for name, picture in files.items():
        picture.save(tmp_path / name)
        for size in (40, 24, 64):
            assert torch.equal(read_image(tmp_path / name, size), _old_read(tmp_path / name, size)), (name, size)


def test_deep_grey_pixels_read_as_the_same_picture_in_8_bits(tmp_path):
    levels = np.arange(256, dtype=np.uint8).reshape(16, 16)
    Image.fromarray(levels, "L").save(tmp_path / "8.png")
    Image.fromarray(levels.astype(np.uint16) * 257).save(tmp_path / "16.png")  # mode I;16
    Image.fromarray(levels.astype(np.int32) * 257, "I").save(tmp_path / "32.tiff")  # mode I
    Image.fromarray(levels.astype(np.float32) / 255, "F").save(tmp_path / "float.tiff")
    expected = read_image(tmp_path / "8.png", 16)
    assert torch.equal(expected[0].flatten(), torch.arange(256) / 255)
    for name, mode in [("16.png", "I;16"), ("32.tiff", "I"), ("float.tiff", "F")]:
        assert Image.open(tmp_path / name).mode == mode
        assert torch.equal(read_image(tmp_path / name, 16), expected), name
    # A 0-65535 ramp spans black to white instead of reading white from 255 on.
    ramp = read_image(tmp_path / "16.png", 16)
    assert (ramp == 1).float().mean() == 1 / 256


def test_float_or_wide_integer_pixels_outside_their_range_are_refused_by_name(tmp_path):
    Image.fromarray(np.linspace(0, 255, 64, dtype=np.float32).reshape(8, 8), "F").save(tmp_path / "f.tiff")
    with pytest.raises(GraphseqError, match=r"f.tiff: its pixels are floats \(mode F\) from 0 to 255, "
                                            r"outside \[0, 1\]; save it as an 8-bit image"):
        read_image(tmp_path / "f.tiff", 8)
    Image.fromarray(np.full((8, 8), 70_000, dtype=np.int32), "I").save(tmp_path / "i.tiff")
    with pytest.raises(GraphseqError, match=r"integers \(mode I\) from 70000 to 70000, outside \[0, 65535\]"):
        read_image(tmp_path / "i.tiff", 8)


def test_transparent_pixels_are_laid_on_white(tmp_path):
    red = np.zeros((2, 2, 4), dtype=np.uint8)
    red[..., 0] = 255
    red[..., 3] = [[0, 255], [102, 255]]  # transparent, opaque, 40% opaque
    Image.fromarray(red, "RGBA").save(tmp_path / "rgba.png")
    pixels = read_image(tmp_path / "rgba.png", 2).permute(1, 2, 0) * 255
    assert pixels.tolist() == [[[255, 255, 255], [255, 0, 0]], [[255, 153, 153], [255, 0, 0]]]
    grey = Image.fromarray(np.array([[[50, 0], [50, 255]]], dtype=np.uint8), "LA")
    grey.save(tmp_path / "la.png")
    assert (read_image(tmp_path / "la.png", 2)[:, 0] * 255).tolist() == [[255, 50]] * 3
    palette = Image.fromarray(np.array([[0, 1]], dtype=np.uint8), "P")
    palette.putpalette([0, 0, 255, 0, 255, 0])
    palette.save(tmp_path / "p.png", transparency=0)  # entry 0 (blue) is transparent
    assert (read_image(tmp_path / "p.png", 2)[:, 0] * 255).tolist() == [[255, 0], [255, 255], [255, 0]]


def test_exif_orientation_turns_the_picture_as_a_viewer_shows_it(tmp_path):
    stored = np.zeros((8, 16, 3), dtype=np.uint8)
    stored[:, :8, 0] = 255  # red on the left of the stored pixels
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 degrees clockwise to show": as a phone held upright writes it
    Image.fromarray(stored).save(tmp_path / "phone.png", exif=exif)
    Image.fromarray(np.ascontiguousarray(np.rot90(stored, k=-1))).save(tmp_path / "upright.png")
    shown = read_image(tmp_path / "phone.png", 16)
    assert torch.equal(shown, read_image(tmp_path / "upright.png", 16))
    assert shown[0, :8].mean() == 1 and shown[0, 8:].mean() < 1  # red on top


def test_locate_coco_reads_the_mirror_in_place(tmp_path):
    _write_coco(tmp_path / "mirror" / "coco")
    annotation, images = locate_coco("train2014", tmp_path / "root", tmp_path / "mirror", download=False)
    assert annotation == tmp_path / "mirror" / "coco" / "annotations" / "captions_train2014.json"
    assert images == tmp_path / "mirror" / "coco" / "train2014"
    assert not (tmp_path / "root").exists()
    with pytest.raises(GraphseqError, match="COCO val2014 not found"):
        locate_coco("val2014", tmp_path / "root", tmp_path / "mirror", download=False)


def _served_coco(tmp_path):
    """A fetch that serves COCO's two 2014 archives, made from generated
    images (with a member that tries to escape), and the list of URLs it served."""
    served = tmp_path / "served"
    _write_coco(served)
    archives = {}
    annotations = tmp_path / "annotations_trainval2014.zip"
    with zipfile.ZipFile(annotations, "w") as zf:
        zf.write(served / "annotations" / "captions_train2014.json", "annotations/captions_train2014.json")
        zf.writestr("annotations/instances_train2014.json", "{}")
        zf.writestr("../escape.txt", "outside")
    archives["annotations/annotations_trainval2014.zip"] = annotations
    images = tmp_path / "train2014.zip"
    with zipfile.ZipFile(images, "w") as zf:
        for path in sorted((served / "train2014").iterdir()):
            zf.write(path, f"train2014/{path.name}")
    archives["zips/train2014.zip"] = images
    fetched = []

    def fetch(url, path):
        fetched.append(url)
        path.write_bytes(archives[url.split("cocodataset.org/", 1)[1]].read_bytes())

    return fetch, fetched


def test_download_coco_extracts_the_captions_and_the_split_only(tmp_path):
    fetch, fetched = _served_coco(tmp_path)
    annotation, folder = locate_coco("train2014", tmp_path / "root", None, download=True, fetch=fetch)
    assert len(fetched) == 2
    coco = tmp_path / "root" / "coco"
    assert sorted(p.name for p in (coco / "annotations").iterdir()) == ["captions_train2014.json"]
    assert not (tmp_path / "root" / "escape.txt").exists() and not (coco.parent.parent / "escape.txt").exists()
    assert len(list(folder.iterdir())) == 3 and not list(coco.glob("*.zip"))
    assert sorted(p.name for p in coco.iterdir()) == ["annotations", "train2014"]  # no staging folder left
    assert len(read_coco_captions(annotation, folder)) == 2
    # Nothing is fetched again once it is there.
    download_coco(coco, "train2014", fetch)
    assert len(fetched) == 2


def test_an_interrupted_extraction_is_not_taken_for_the_split(tmp_path, monkeypatch):
    # The split folder was written in place: a run stopped half-way left a
    # train2014/ that the next run took as complete.
    import graphseq.data.captions as captions

    fetch, fetched = _served_coco(tmp_path)
    copy, copies = captions.shutil.copyfileobj, []

    def interrupted(source, target, *args):
        copies.append(target)
        if len(copies) == 3:  # the captions, then the second image
            raise KeyboardInterrupt
        copy(source, target, *args)

    monkeypatch.setattr(captions.shutil, "copyfileobj", interrupted)
    with pytest.raises(KeyboardInterrupt):
        locate_coco("train2014", tmp_path / "root", None, download=True, fetch=fetch)
    coco = tmp_path / "root" / "coco"
    assert not (coco / "train2014").exists()
    monkeypatch.setattr(captions.shutil, "copyfileobj", copy)
    annotation, folder = locate_coco("train2014", tmp_path / "root", None, download=True, fetch=fetch)
    assert len(list(folder.iterdir())) == 3 and len(read_coco_captions(annotation, folder)) == 2
    assert len(fetched) == 2  # the whole archive left by the first run was used, then deleted
    assert sorted(p.name for p in coco.iterdir()) == ["annotations", "train2014"]


@pytest.mark.parametrize("damage", ["missing", "empty"])
def test_a_missing_or_empty_listed_image_is_refused_before_reading(tmp_path, damage):
    # It was found only when first read, maybe hours into training.
    _write_coco(tmp_path)
    image = tmp_path / "train2014" / "COCO_train2014_000000000007.png"
    image.unlink() if damage == "missing" else image.write_bytes(b"")
    with pytest.raises(GraphseqError, match=rf"^{re.escape(str(image))} is {damage}.* \(listed in "
                                            rf"\S*captions_train2014\.json; 1 of its 2 captioned images"):
        read_coco_captions(tmp_path / "annotations" / "captions_train2014.json", tmp_path / "train2014")


def test_a_failed_download_is_one_clear_error(tmp_path):
    def offline(url, path):
        raise OSError("network unreachable")

    root = tmp_path / "datasets"
    with pytest.raises(GraphseqError, match="download .* failed: network unreachable"):
        locate_coco("val2014", root, None, download=True, fetch=offline)
    assert not root.exists()  # no empty coco/ folder left behind


def _write_flickr(root):
    names = ["1000_a.jpg", "2000_b.jpg", "3000_c.jpg"]
    images = _write_images(root / "Flicker8k_Dataset", names)
    lines = [f"{names[1]}#0\tA girl runs .", f"{names[0]}#0\tTwo dogs play .", f"{names[0]}#1\tDogs in snow .",
             f"{names[2]}#0\tA red bus .", ""]
    (root / "Flickr8k.token.txt").write_text("\n".join(lines))
    (root / "Flickr_8k.testImages.txt").write_text(f"{names[2]}\n{names[0]}\n")
    return names, images


def test_flickr_reader_groups_the_numbered_captions_of_each_image(tmp_path):
    names, images = _write_flickr(tmp_path)
    data = read_flickr_captions(tmp_path / "Flickr8k.token.txt", tmp_path / "Flicker8k_Dataset", image_size=40)
    assert data.captions == [["Two dogs play .", "Dogs in snow ."], ["A girl runs ."], ["A red bus ."]]
    # JPEG is lossy: the pixels come back close, not equal.
    assert (data.load_images([1])[0] - images[1].float() / 255).abs().mean() < 0.03


def test_flickr_split_file_keeps_its_images_in_its_order(tmp_path):
    _write_flickr(tmp_path)
    data = read_flickr_captions(tmp_path / "Flickr8k.token.txt", tmp_path / "Flicker8k_Dataset",
                                split_file=tmp_path / "Flickr_8k.testImages.txt")
    assert data.captions == [["A red bus ."], ["Two dogs play .", "Dogs in snow ."]]


def test_flickr_reader_names_the_bad_line(tmp_path):
    (tmp_path / "tokens.txt").write_text("a.jpg#0\tfine\nno tab here\n")
    with pytest.raises(GraphseqError, match="line 2"):
        read_flickr_captions(tmp_path / "tokens.txt", tmp_path)
    (tmp_path / "tokens.txt").write_text("a.jpg#0\tfine\n")
    (tmp_path / "split.txt").write_text("b.jpg\n")
    with pytest.raises(GraphseqError, match="b.jpg"):
        read_flickr_captions(tmp_path / "tokens.txt", tmp_path, split_file=tmp_path / "split.txt")


def test_caption_set_subset_keeps_everything_aligned():
    images = torch.arange(4 * 3 * 8 * 8, dtype=torch.uint8).view(4, 3, 8, 8)
    data = CaptionSet([["a b"], ["c"], ["d e"], ["f"]], images=images, labels=[["x"], ["y"], ["z"], ["w"]])
    part = data.subset([2, 0])
    assert part.captions == [["d e"], ["a b"]] and part.labels == [["z"], ["x"]]
    assert torch.equal(part.images, images[[2, 0]])
    with pytest.raises(ValueError, match="either images or paths"):
        CaptionSet([["a"]])


def test_caption_set_subset_takes_tensor_and_array_indices():
    images = torch.arange(4 * 3 * 8 * 8, dtype=torch.uint8).view(4, 3, 8, 8)
    data = CaptionSet([["a"], ["b"], ["c"], ["d"]], images=images)
    for indices in (torch.tensor([2, 0]), np.array([2, 0]), [2, 0]):
        part = data.subset(indices)
        assert part.captions == [["c"], ["a"]] and torch.equal(part.images, images[[2, 0]])
    assert sorted(data.subset(torch.randperm(4)).captions) == data.captions


def test_sentences_where_lists_are_expected_are_refused():
    with pytest.raises(TypeError, match="caption_vocabulary takes each caption as a list of words, got the "
                                        "string 'a cat'"):
        caption_vocabulary(["a cat"])
    with pytest.raises(TypeError, match="list of words"):
        caption_vocabulary(caption for caption in [["a", "dog"], "a cat"])
    images = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    with pytest.raises(TypeError, match="a list of caption strings for each image, got 'a cat' for image 0"):
        CaptionSet(["a cat", "a dog"], images=images)
    with pytest.raises(TypeError, match="for image 1"):
        CaptionSet([["a cat"], [["a", "dog"]]], images=images)


def test_caption_set_subset_takes_boolean_masks_and_refuses_a_single_index():
    images = torch.arange(3 * 3 * 8 * 8, dtype=torch.uint8).view(3, 3, 8, 8)
    data = CaptionSet([["a"], ["b"], ["c"]], images=images, labels=[["x"], ["y"], ["z"]])
    for mask in (torch.tensor([True, False, True]), np.array([True, False, True]), [True, False, True]):
        part = data.subset(mask)
        assert part.captions == [["a"], ["c"]] and part.labels == [["x"], ["z"]]
        assert torch.equal(part.images, images[[0, 2]])
    assert data.subset(torch.tensor([-1])).captions == [["c"]] and data.subset([]).captions == []
    assert torch.equal(data.load_images(torch.tensor([True, False, False])), images[:1].float() / 255)
    for single in (torch.tensor(1), 1, np.int64(1)):
        with pytest.raises(TypeError, match=r"^CaptionSet.subset takes a sequence or 1-d tensor of indices, got .*; "
                                            r"pass \[i\] for one image"):
            data.subset(single)
    with pytest.raises(TypeError, match=r"^CaptionSet.load_images takes a sequence or 1-d tensor of indices, got a "
                                        r"0-d Tensor"):
        data.load_images(torch.tensor(0))
    with pytest.raises(IndexError, match="^CaptionSet.subset got index 3, out of range for 3 images$"):
        data.subset(torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="^CaptionSet.subset got a boolean mask over 2 images, but the set has 3$"):
        data.subset(torch.tensor([True, False]))
    with pytest.raises(TypeError, match="^CaptionSet.subset takes integer indices or a boolean mask, got 1.0$"):
        data.subset(torch.tensor([1.0]))


def _damaged_coco(tmp_path, change):
    _write_coco(tmp_path)
    path = tmp_path / "annotations" / "captions_train2014.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("caption", [5, None, "   "])
def test_coco_caption_that_is_not_a_sentence_is_refused(tmp_path, caption):
    path = _damaged_coco(tmp_path, lambda d: d["annotations"][1].update(caption=caption))
    with pytest.raises(GraphseqError, match=rf"captions_train2014\.json: annotation 1 \(image id 3\) has caption "
                                            rf"{re.escape(repr(caption))}, expected a non-blank string"):
        read_coco_captions(path, tmp_path / "train2014")


def test_coco_file_name_that_is_not_a_string_is_refused(tmp_path):
    path = _damaged_coco(tmp_path, lambda d: d["images"][0].update(file_name=7))
    with pytest.raises(GraphseqError, match=r"captions_train2014\.json: image id 7 has file_name 7"):
        read_coco_captions(path, tmp_path / "train2014")


def test_coco_file_without_captions_is_refused(tmp_path):
    path = _damaged_coco(tmp_path, lambda d: d.update(annotations=[]))
    with pytest.raises(GraphseqError, match=r"captions_train2014\.json has no captions"):
        read_coco_captions(path, tmp_path / "train2014")


def test_coco_image_id_listed_twice_is_named_as_a_duplicate(tmp_path):
    path = _damaged_coco(tmp_path, lambda d: d["images"][1].update(id=7))
    with pytest.raises(GraphseqError, match=r"captions_train2014\.json: image id 7 is listed twice among its images"):
        read_coco_captions(path, tmp_path / "train2014")


@pytest.mark.parametrize("where,key,value", [("images", "id", 7.0), ("annotations", "image_id", 3.2),
                                             ("annotations", "image_id", True)])
def test_coco_image_ids_that_are_not_integers_are_refused(tmp_path, where, key, value):
    path = _damaged_coco(tmp_path, lambda d: d[where][0].update({key: value}))
    with pytest.raises(GraphseqError, match=rf"{where[:-1]} 0 has image id {value!r}, expected an integer"):
        read_coco_captions(path, tmp_path / "train2014")


@pytest.mark.parametrize("terminal", [True, False])
def test_the_download_bar_is_drawn_on_a_terminal_only(tmp_path, monkeypatch, terminal):
    # A stderr redirected to a file (`2> run.log`) would fill with the bar's \r redraws.
    import graphseq.data.captions as captions

    class Response(io.BytesIO):
        headers = {"Content-Length": "5"}

    monkeypatch.setattr(captions.urllib.request, "urlopen", lambda url, timeout: Response(b"bytes"))
    stderr = Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    captions._fetch("https://example.org/annotations.zip", tmp_path / "annotations.zip")
    assert (tmp_path / "annotations.zip").read_bytes() == b"bytes"
    assert ("annotations.zip: 100%" in stderr.getvalue()) == terminal
