"""Where a run reads and writes its datasets: the data root it writes and
the read-only mirror it only reads are kept apart."""
import hashlib
import io
import os
import tarfile

import pytest

from graphseq.cli import main
from graphseq.errors import GraphseqError
from graphseq.data.places import data_places


def tree(folder):
    """Every path under ``folder`` with its contents (None for a folder)."""
    return {path: None if path.is_dir() else path.read_bytes() for path in sorted(folder.rglob("*"))}


@pytest.fixture
def mirror_folder(tmp_path):
    mirror = tmp_path / "mirror"
    (mirror / "Cora" / "raw").mkdir(parents=True)
    (mirror / "Cora" / "raw" / "ind.cora.x").write_bytes(b"raw file")
    os.symlink(mirror, tmp_path / "link to mirror")
    return mirror


@pytest.mark.parametrize("root, where", [
    ("mirror", "is the data mirror"),
    ("link to mirror", "is the data mirror"),
    ("mirror/Cora/..", "is the data mirror"),
    ("mirror/datasets", "lies inside the data mirror"),
    ("link to mirror/Cora", "lies inside the data mirror"),
])
def test_a_data_root_that_is_the_mirror_or_inside_it_is_refused_before_anything_is_written(
        root, where, mirror_folder, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = tree(tmp_path)
    code = main(["run", "gat-cora", "--set", "train.max_epochs=1", "--data-root", root,
                 "--data-mirror", "mirror", "--out", "run"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    resolved = (tmp_path / root).resolve()
    assert err == (f"graphseq: error: the data root {resolved} (--data-root) {where} {mirror_folder.resolve()} "
                   f"(--data-mirror), which a run only reads: it would write its datasets' files there; give a "
                   f"data root outside the mirror\n")
    assert tree(tmp_path) == before  # no processed/ in the mirror, no run folder


def test_the_environments_data_root_inside_its_mirror_is_refused_by_name(mirror_folder, tmp_path, capsys,
                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GRAPHSEQ_DATA", "mirror/datasets")
    monkeypatch.setenv("GRAPHSEQ_MIRROR", "link to mirror")
    before = tree(tmp_path)
    assert main(["run", "gat-cora", "--out", "run"]) == 2
    err = capsys.readouterr().err
    assert f"the data root {mirror_folder.resolve() / 'datasets'} (GRAPHSEQ_DATA) lies inside the data " \
           f"mirror {mirror_folder.resolve()} (GRAPHSEQ_MIRROR)" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert tree(tmp_path) == before


def test_a_mirror_inside_the_data_root_is_let_be(tmp_path):
    # The run writes only into the root's dataset folders, beside the mirror.
    root, mirror = tmp_path / "datasets", tmp_path / "datasets" / "mirror"
    assert data_places(root, mirror) == (root, mirror)
    assert data_places(tmp_path / "root", tmp_path / "root-mirror") == (tmp_path / "root", tmp_path / "root-mirror")


def test_a_data_root_that_cannot_be_resolved_is_left_to_the_data_loaders_to_name(tmp_path):
    # A link loop: the dataset loaders refuse it by name ("loop is a link to loop, which does not exist").
    os.symlink("loop", tmp_path / "loop")
    assert data_places(tmp_path / "loop", tmp_path / "mirror") == (tmp_path / "loop", tmp_path / "mirror")


@pytest.mark.parametrize("mirror, where", [
    ("root/Cora", "is"),
    ("root/Cora/raw", "holds"),
    ("root/omniglot-py", "is"),  # every dataset folder counts, not only the pipeline's
])
def test_a_mirror_that_is_or_lies_in_a_dataset_folder_of_the_root_is_refused_before_anything_is_written(
        mirror, where, tmp_path, capsys, monkeypatch):
    # Planetoid would copy the raw files from ROOT/Cora/Cora/raw into ROOT/Cora/raw and
    # build ROOT/Cora/processed: into the mirror.
    monkeypatch.chdir(tmp_path)
    (tmp_path / mirror / "Cora" / "raw").mkdir(parents=True)
    (tmp_path / mirror / "Cora" / "raw" / "ind.cora.x").write_bytes(b"raw file")
    before = tree(tmp_path)
    code = main(["run", "gat-cora", "--set", "train.max_epochs=1", "--data-root", "root",
                 "--data-mirror", mirror, "--out", "run"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    root = (tmp_path / "root").resolve()
    folder = mirror.split("/")[1]
    assert err == (f"graphseq: error: the data root's {folder} folder {root / folder} (--data-root) {where} the "
                   f"data mirror {(tmp_path / mirror).resolve()} (--data-mirror): a run writes its {folder} files "
                   f"there (raw copies, PyG's processed/ cache), and the mirror is only read; give a mirror "
                   f"outside the data root's dataset folders (aclImdb, CiteSeer, coco, Cora, mini-imagenet, "
                   f"omniglot-py, PPI, PubMed, rt-polaritydata, tinyshakespeare)\n")
    assert tree(tmp_path) == before  # no processed/ in the mirror, no run folder


def test_a_dataset_folder_of_the_root_that_links_into_the_mirror_is_refused(mirror_folder, tmp_path, capsys,
                                                                             monkeypatch):
    # ROOT/Cora -> MIRROR/Cora: PyG would build its processed/ cache in the mirror's Cora.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "root").mkdir()
    os.symlink(mirror_folder / "Cora", tmp_path / "root" / "Cora")
    monkeypatch.setenv("GRAPHSEQ_MIRROR", "mirror")
    before = tree(tmp_path)
    assert main(["run", "gat-cora", "--data-root", "root", "--out", "run"]) == 2
    err = capsys.readouterr().err
    link, target = tmp_path.resolve() / "root" / "Cora", (mirror_folder / "Cora").resolve()
    assert err == (f"graphseq: error: the data root's Cora folder {link} (--data-root, a link to {target}) lies "
                   f"inside the data mirror {mirror_folder.resolve()} (GRAPHSEQ_MIRROR): a run writes its Cora "
                   f"files there (raw copies, PyG's processed/ cache), and the mirror is only read; make {link} "
                   f"a folder of its own, not a link\n")
    assert tree(tmp_path) == before


@pytest.mark.parametrize("mirror", ["datasets/mirror", "datasets/mirror/Cora/..", "datasets/Cora-mirror",
                                    "datasets/processed"])
def test_a_mirror_elsewhere_in_the_data_root_is_let_be(mirror, tmp_path):
    # The run writes beside it: ROOT/Cora is not ROOT/Cora-mirror, nor ROOT/mirror/Cora.
    (tmp_path / "datasets" / "mirror" / "Cora").mkdir(parents=True)
    root = tmp_path / "datasets"
    assert data_places(root, tmp_path / mirror) == (root, tmp_path / mirror)


def test_the_dataset_folders_are_those_the_loaders_write(mirror, write_fake_planetoid, write_fake_omniglot,
                                                          write_fake_miniimagenet, tmp_path, monkeypatch):
    # Each loader is run on a fresh root; the folder it makes there must be the one named.
    from graphseq.data import imdb
    from graphseq.data.captions import locate_coco
    from graphseq.data.files import Checksum
    from graphseq.data.miniimagenet import load_miniimagenet
    from graphseq.data.omniglot import load_omniglot
    from graphseq.data.planetoid import load_planetoid
    from graphseq.data.polarity import load_polarity
    from graphseq.data.ppi import load_ppi, write_ppi_raw
    from graphseq.data.text import load_tiny_shakespeare
    from graphseq.data.places import dataset_folders

    fakes = tmp_path / "fakes"
    for name in ("Cora", "CiteSeer", "PubMed"):
        write_fake_planetoid(fakes / name / "raw", name)
    write_ppi_raw(fakes / "PPI" / "raw", graphs=(1, 1, 1), nodes=10)
    write_fake_omniglot(fakes)
    write_fake_miniimagenet(fakes)
    # The IMDB reviews are unpacked into the root from an archive (a tree in the mirror is read where it lies).
    archive = fakes / imdb.FOLDER / imdb.ARCHIVE
    archive.parent.mkdir(parents=True)
    with tarfile.open(archive, "w:gz") as tar:
        review = tarfile.TarInfo("aclImdb/train/unsup/0_0.txt")
        review.size = len(b"A review.")
        tar.addfile(review, io.BytesIO(b"A review."))
    monkeypatch.setitem(imdb.CHECKSUMS, imdb.ARCHIVE, Checksum(hashlib.sha256(archive.read_bytes()).hexdigest()))
    loads = [lambda root, name=name: load_planetoid(name, root, fakes) for name in ("cora", "citeseer", "pubmed")]
    loads += [lambda root: load_ppi(root, fakes), lambda root: load_omniglot(root, fakes, download=False),
              lambda root: load_miniimagenet(root, fakes, "val", 84),
              lambda root: load_polarity(root, mirror), lambda root: load_tiny_shakespeare(root, mirror),
              lambda root: imdb.load_imdb_unsup(root, fakes)]
    written = []
    for number, load in enumerate(loads):
        load(tmp_path / f"root{number}")
        written += [path.name for path in (tmp_path / f"root{number}").iterdir()]
    # COCO is many gigabytes: where its download would go is enough.
    places = []

    def offline(url, path):
        places.append(path)
        raise OSError("offline")

    with pytest.raises(GraphseqError, match="offline"):
        locate_coco("val2014", tmp_path / "coco-root", None, fetch=offline)
    written += [places[0].relative_to(tmp_path / "coco-root").parts[0]]
    assert sorted(written, key=str.lower) == list(dataset_folders())
