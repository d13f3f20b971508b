"""Where a run reads and writes its datasets: the data root it writes and
the read-only mirror it only reads are kept apart."""
import os

import pytest

from graphseq.cli import main
from graphseq.pipeline import data_places


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
