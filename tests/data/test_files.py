"""Raw dataset files are checked against their known checksums wherever they
are found (data root, mirror, download): a damaged one stops the run with one
line naming the file and the place, and never reaches the data root."""
import errno
import hashlib
import os
import re
import shutil
import stat

import pytest

from graphseq.cli import main
from graphseq.data import planetoid, polarity, text
from graphseq.data.captions import locate_coco
from graphseq.data.files import Checksum, DamagedFileError, check_file, locate_raw_files, unpacking
from graphseq.data.miniimagenet import load_miniimagenet
from graphseq.data.omniglot import load_omniglot
from graphseq.data.planetoid import load_planetoid
from graphseq.data.ppi import load_ppi, write_ppi_raw
from graphseq.data.polarity import load_polarity
from graphseq.errors import GraphseqError
from graphseq.io import load_checkpoint

GOOD = b"first line\nsecond line\n"
CHECKSUMS = {"a.txt": Checksum(hashlib.sha256(GOOD).hexdigest(), len(GOOD))}


def test_a_good_copy_passes(tmp_path):
    (tmp_path / "a.txt").write_bytes(GOOD)
    check_file(tmp_path / "a.txt", CHECKSUMS["a.txt"])


def test_a_truncated_file_is_named_with_both_sizes(tmp_path):
    (tmp_path / "a.txt").write_bytes(GOOD[:10])
    with pytest.raises(DamagedFileError) as error:
        check_file(tmp_path / "a.txt", CHECKSUMS["a.txt"], "in the mirror")
    message = str(error.value)
    assert str(tmp_path / "a.txt") in message and "in the mirror" in message
    assert "10 bytes where a good copy has 23 (truncated)" in message
    assert "\n" not in message


def test_an_altered_file_of_the_right_size_fails_on_its_digest(tmp_path):
    (tmp_path / "a.txt").write_bytes(GOOD.replace(b"first", b"FIRST"))
    with pytest.raises(DamagedFileError, match="SHA-256 .* is not the known"):
        check_file(tmp_path / "a.txt", CHECKSUMS["a.txt"])


def test_a_git_blob_id_is_checked_as_git_hash_object_computes_it(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"hello\n")
    # `printf 'hello\n' | git hash-object --stdin`
    check_file(tmp_path / "a.txt", Checksum(git_blob="ce013625030ba8dba906f756967f9e9ca394464a"))
    with pytest.raises(DamagedFileError, match="git blob id"):
        check_file(tmp_path / "a.txt", Checksum(git_blob="0" * 40))


def test_a_damaged_mirror_file_is_named_and_not_copied(tmp_path):
    (tmp_path / "mirror" / "set").mkdir(parents=True)
    (tmp_path / "mirror" / "set" / "a.txt").write_bytes(GOOD[:-1])
    with pytest.raises(DamagedFileError, match=f"{tmp_path / 'mirror' / 'set' / 'a.txt'} \\(in the mirror"):
        locate_raw_files("set", ["a.txt"], tmp_path / "root", tmp_path / "mirror", checksums=CHECKSUMS)
    assert not (tmp_path / "root" / "set" / "a.txt").exists()


def test_a_damaged_file_in_the_root_is_named_and_left_as_it_was(tmp_path):
    (tmp_path / "root" / "set").mkdir(parents=True)
    (tmp_path / "root" / "set" / "a.txt").write_bytes(b"junk")
    with pytest.raises(DamagedFileError, match="in the data root; delete it to fetch it again"):
        locate_raw_files("set", ["a.txt"], tmp_path / "root", checksums=CHECKSUMS)
    assert (tmp_path / "root" / "set" / "a.txt").read_bytes() == b"junk"


def test_a_damaged_download_is_deleted(tmp_path):
    def download(folder):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "a.txt").write_bytes(b"<html>rate limited</html>")

    with pytest.raises(DamagedFileError, match="just downloaded, now deleted"):
        locate_raw_files("set", ["a.txt"], tmp_path / "root", download=download, checksums=CHECKSUMS)
    assert not (tmp_path / "root" / "set" / "a.txt").exists()


def test_a_failed_download_leaves_no_empty_folder(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise OSError("Name or service not known")

    monkeypatch.setattr("graphseq.data.files.urllib.request.urlopen", offline)
    root = tmp_path / "datasets"
    for load in (load_polarity, text.load_tiny_shakespeare):
        with pytest.raises(GraphseqError, match="the download failed: Name or service not known"):
            load(root, None)
        assert not root.exists()  # polarity makes its folder before it downloads


def test_a_refusal_takes_back_what_the_mirror_gave_and_the_folders_it_made(tmp_path, mirror, monkeypatch):
    def offline(*args, **kwargs):
        raise OSError("Name or service not known")

    monkeypatch.setattr("graphseq.data.files.urllib.request.urlopen", offline)
    root = tmp_path / "datasets"
    root.mkdir()
    # The shared PubMed lacks ind.pubmed.allx: seven files could come from the mirror, one cannot.
    with pytest.raises(GraphseqError, match="ind.pubmed.allx; .* and the download failed"):
        load_planetoid("PubMed", root, mirror)
    assert list(root.iterdir()) == []
    (tmp_path / "mirror" / "set").mkdir(parents=True)
    (tmp_path / "mirror" / "set" / "a.txt").write_bytes(GOOD)
    with pytest.raises(GraphseqError, match="missing dataset file\\(s\\) b.txt"):  # no download at all
        locate_raw_files("set", ["a.txt", "b.txt"], root, tmp_path / "mirror", checksums=CHECKSUMS)
    assert list(root.iterdir()) == []


def test_good_files_are_copied_and_files_without_a_checksum_pass(tmp_path):
    (tmp_path / "mirror" / "set").mkdir(parents=True)
    (tmp_path / "mirror" / "set" / "a.txt").write_bytes(GOOD)
    (tmp_path / "mirror" / "set" / "b.txt").write_bytes(b"anything")
    folder = locate_raw_files("set", ["a.txt", "b.txt"], tmp_path / "root", tmp_path / "mirror",
                              checksums=CHECKSUMS)
    assert (folder / "a.txt").read_bytes() == GOOD and (folder / "b.txt").read_bytes() == b"anything"
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE((folder / "a.txt").stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0600


# --------------------------------------------------------------------------- #
# The real datasets, with one file truncated in a temporary mirror
# --------------------------------------------------------------------------- #

def _mirror_with_truncated(tmp_path, mirror, folder, name):
    copy = tmp_path / "mirror" / folder
    shutil.copytree(mirror / folder, copy)
    data = (copy / name).read_bytes()
    (copy / name).write_bytes(data[:len(data) // 2])
    return tmp_path / "mirror"


def test_a_truncated_cora_test_index_stops_the_run_with_one_line(tmp_path, mirror, capsys):
    damaged = _mirror_with_truncated(tmp_path, mirror, "Cora/raw", "ind.cora.test.index")
    assert main(["run", "gat-cora", "--data-root", str(tmp_path / "root"), "--data-mirror", str(damaged),
                 "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"damaged dataset file {damaged / 'Cora' / 'raw' / 'ind.cora.test.index'} (in the mirror" in err
    assert "2,500 bytes where a good copy has 5,000 (truncated)" in err
    assert not (tmp_path / "root" / "Cora" / "raw" / "ind.cora.test.index").exists()


@pytest.mark.parametrize("name", ["ind.citeseer.graph", "ind.citeseer.x", "ind.citeseer.allx", "ind.citeseer.y"])
def test_truncated_planetoid_files_are_refused_before_pyg_reads_them(tmp_path, mirror, name):
    damaged = _mirror_with_truncated(tmp_path, mirror, "CiteSeer/raw", name)
    with pytest.raises(DamagedFileError, match=name):
        load_planetoid("CiteSeer", tmp_path / "root", damaged)
    assert not (tmp_path / "root" / "CiteSeer" / "raw" / name).exists()
    assert not (tmp_path / "root" / "CiteSeer" / "processed").exists()


def test_truncated_tiny_shakespeare_is_refused(tmp_path, mirror):
    damaged = _mirror_with_truncated(tmp_path, mirror, "tinyshakespeare", "input.txt")
    with pytest.raises(DamagedFileError, match="input.txt .*truncated"):
        text.load_tiny_shakespeare(tmp_path / "root", damaged)


def test_truncated_polarity_file_is_refused(tmp_path, mirror):
    damaged = _mirror_with_truncated(tmp_path, mirror, "rt-polaritydata", "rt-polarity.pos")
    with pytest.raises(DamagedFileError, match="rt-polarity.pos .*truncated"):
        load_polarity(tmp_path / "root", damaged)


def test_every_known_checksum_matches_the_shared_mirror(mirror):
    tables = [(f"{name}/raw", table) for name, table in planetoid.CHECKSUMS.items()]
    tables += [("tinyshakespeare", text.TINY_SHAKESPEARE), ("rt-polaritydata", polarity.CHECKSUMS)]
    checked = 0
    for folder, table in tables:
        for name, checksum in table.items():
            if (mirror / folder / name).is_file():  # ind.pubmed.allx is absent here.
                check_file(mirror / folder / name, checksum)
                checked += 1
    assert checked == 26  # 8 Cora, 8 CiteSeer, 7 PubMed, 1 text, 2 polarity


def test_an_unreadable_file_without_a_checksum_is_a_one_line_error(tmp_path, write_fake_planetoid):
    write_fake_planetoid(tmp_path / "mirror" / "PubMed" / "raw", "PubMed")
    graph = tmp_path / "mirror" / "PubMed" / "raw" / "ind.pubmed.graph"
    graph.write_bytes(graph.read_bytes()[:100])
    with pytest.raises(GraphseqError, match=r"^damaged dataset file \S*mirror/PubMed/raw/ind\.pubmed\.graph: "
                                            r"UnpicklingError: .*replace it with a good copy"):
        load_planetoid("PubMed", tmp_path / "root", tmp_path / "mirror")


@pytest.mark.parametrize("damage", [lambda b: b[:5000], lambda b: b"", lambda b: b"garbage"])
def test_a_torn_processed_cache_is_rebuilt_from_the_checked_raw_files(tmp_path, mirror, damage, caplog):
    first = load_planetoid("Cora", tmp_path / "root", mirror)
    cache = tmp_path / "root" / "Cora" / "processed" / "data.pt"
    cache.write_bytes(damage(cache.read_bytes()))
    with caplog.at_level("INFO", logger="graphseq"):
        again = load_planetoid("Cora", tmp_path / "root", mirror)
    assert "processed is not the cache this loader built; rebuilding it" in caplog.text
    assert again.x.equal(first.x) and again.edge_index.equal(first.edge_index) and again.y.equal(first.y)
    assert load_checkpoint(cache)  # whole again


def test_a_folder_where_a_dataset_file_belongs_is_named(tmp_path, mirror):
    (tmp_path / "root" / "tinyshakespeare" / "input.txt").mkdir(parents=True)
    with pytest.raises(GraphseqError, match=r"tinyshakespeare/input.txt is not a file \(a folder\?\)"):
        text.load_tiny_shakespeare(tmp_path / "root", mirror)


def _mirror_for(loader, mirror, request):
    """Writes the generated files ``loader`` reads into ``mirror``."""
    if loader == "planetoid":
        request.getfixturevalue("write_fake_planetoid")(mirror / "PubMed" / "raw", "PubMed")
    elif loader == "ppi":
        write_ppi_raw(mirror / "PPI" / "raw", graphs=(2, 1, 1), nodes=10, features=4, labels=3)
    elif loader == "omniglot":
        request.getfixturevalue("write_fake_omniglot")(mirror)
    elif loader == "coco":  # What locate_coco looks for; it reads no image.
        (mirror / "coco" / "train2014").mkdir(parents=True)
        (mirror / "coco" / "annotations").mkdir()
        (mirror / "coco" / "annotations" / "captions_train2014.json").write_text("{}")
    else:
        request.getfixturevalue("write_fake_miniimagenet")(mirror)


LOADERS = {  # the folder each loader writes under the data root, and the loader
    "planetoid": ("PubMed", lambda root, mirror: load_planetoid("PubMed", root, mirror)),
    "ppi": ("PPI", lambda root, mirror: load_ppi(root, mirror)),
    "omniglot": ("omniglot-py", lambda root, mirror: load_omniglot(root, mirror, size=28, download=False)),
    "miniimagenet": ("mini-imagenet", lambda root, mirror: load_miniimagenet(root, mirror, "train")),
    "coco": ("coco", lambda root, mirror: locate_coco("train2014", root, mirror, fetch=_no_download)),
}


def _no_download(url, path):
    pytest.fail(f"fetched {url}")


def _not_a_folder(path, kind, gone):
    """Puts a file, or a link to the missing ``gone``, at ``path``; returns
    how a refusal names it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "file":
        path.write_text("mine")
        return f"{path} is not a folder"
    path.symlink_to(gone)
    return f"{path} is a link to {gone}, which does not exist"


@pytest.mark.parametrize("kind", ["file", "dangling link"])
@pytest.mark.parametrize("place", ["data root", "dataset folder"])
@pytest.mark.parametrize("loader", LOADERS)
def test_a_data_root_or_dataset_folder_that_is_not_a_folder_is_refused_by_name(tmp_path, request, monkeypatch,
                                                                               loader, place, kind):
    # They were FileExistsError and NotADirectoryError tracebacks, and
    # Omniglot and mini-ImageNet decoded every image before failing to cache them.
    from graphseq.data import miniimagenet, omniglot

    monkeypatch.setattr(omniglot, "build_omniglot", lambda *a, **k: pytest.fail("decoded the PNGs"))
    monkeypatch.setattr(miniimagenet, "_decode", lambda *a, **k: pytest.fail("decoded the images"))
    mirror, base = tmp_path / "mirror", tmp_path / "base"
    _mirror_for(loader, mirror, request)
    folder, load = LOADERS[loader]
    root = base / "root"
    path = root if place == "data root" else root / folder
    named = _not_a_folder(path, kind, tmp_path / "gone")
    before = sorted(base.rglob("*"))
    with pytest.raises(GraphseqError, match=f"^{re.escape(named)} \\(the .* goe?s? there\\); "):
        load(root, mirror)
    assert sorted(base.rglob("*")) == before
    if kind == "file":
        assert path.read_text() == "mine"
    else:
        assert path.is_symlink() and not os.path.lexists(tmp_path / "gone")


@pytest.mark.parametrize("kind", ["file", "dangling link"])
def test_a_mirror_coco_folder_that_is_not_a_folder_is_refused_by_name(tmp_path, kind):
    # It was passed over as "not found", and the download of the split (13 GB for train2014) began.
    root, mirror = tmp_path / "root", tmp_path / "mirror"
    named = _not_a_folder(mirror / "coco", kind, tmp_path / "gone")
    before = sorted(tmp_path.rglob("*"))
    for download in (False, True):
        with pytest.raises(GraphseqError, match=f"^{re.escape(named)} \\(the mirror's COCO files are read there\\); "):
            locate_coco("train2014", root, mirror, download=download, fetch=_no_download)
        assert sorted(tmp_path.rglob("*")) == before


def test_a_read_only_data_root_is_named_when_a_mirror_file_cannot_be_copied(tmp_path, monkeypatch):
    # The OSError of the copy was a traceback.
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    (mirror / "data").mkdir(parents=True)
    (mirror / "data" / "a.txt").write_bytes(GOOD)
    root.mkdir()

    def read_only(source, target, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(target))

    monkeypatch.setattr(shutil, "copyfile", read_only)
    with pytest.raises(GraphseqError, match=f"^cannot copy a.txt from the mirror into {re.escape(str(root / 'data'))}: "
                                            f"Read-only file system; make the data root writable"):
        locate_raw_files("data", ["a.txt"], root, mirror, checksums=CHECKSUMS)
    assert list(root.iterdir()) == []


def test_an_archive_unpacks_beside_its_place_and_is_renamed_in_whole(tmp_path):
    place = tmp_path / "data" / "part"
    with unpacking(place, inner="part") as unpacked:
        assert unpacked.parent == place.parent and not place.exists()
        (unpacked / "part" / "sub").mkdir(parents=True)
        (unpacked / "part" / "sub" / "a.txt").write_text("a")
    assert (place / "sub" / "a.txt").read_text() == "a"
    assert os.listdir(tmp_path / "data") == ["part"]  # no temporary folder left


def test_an_unpacking_cut_off_leaves_nothing_under_its_place(tmp_path):
    place = tmp_path / "data" / "part"
    with pytest.raises(OSError, match="No space left"):
        with unpacking(place) as unpacked:
            (unpacked / "a.txt").write_text("a")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert os.listdir(tmp_path / "data") == []
