import errno
import os
import re
import shutil

import pytest

from graphseq.data.planetoid import load_planetoid
from graphseq.errors import GraphseqError


def test_pubmed_loads_from_a_mirror_in_the_planetoid_format(tmp_path, write_fake_planetoid):
    mirror = tmp_path / "mirror"
    num_nodes = write_fake_planetoid(mirror / "PubMed" / "raw", "PubMed")
    data = load_planetoid("PubMed", tmp_path / "root", mirror)
    assert data.num_nodes == num_nodes
    assert int(data.train_mask.sum()) == 15 and int(data.test_mask.sum()) == 100
    assert (mirror / "PubMed" / "processed").exists() is False  # The mirror is never written.


def test_missing_raw_file_is_named_with_the_places_looked(tmp_path, monkeypatch, write_fake_planetoid):
    mirror = tmp_path / "mirror"
    write_fake_planetoid(mirror / "PubMed" / "raw", "PubMed")
    (mirror / "PubMed" / "raw" / "ind.pubmed.allx").unlink()

    def offline(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr("graphseq.data.planetoid.download_url", offline)
    with pytest.raises(GraphseqError) as error:
        load_planetoid("PubMed", tmp_path / "root", mirror)
    message = str(error.value)
    assert "ind.pubmed.allx" in message and str(mirror / "PubMed" / "raw") in message
    assert "network is unreachable" in message


def test_real_cora_from_the_shared_mirror(data_root, mirror):
    data = load_planetoid("Cora", data_root, mirror)
    assert (data.num_nodes, data.num_edges, data.num_features) == (2708, 10556, 1433)
    assert int(data.train_mask.sum()) == 140


def test_unknown_dataset_lists_known_ones(tmp_path):
    with pytest.raises(GraphseqError, match="known: Cora, CiteSeer, PubMed"):
        load_planetoid("Pumbed", tmp_path)


def test_the_geom_gcn_split_is_refused_and_the_cache_kept(data_root, mirror, tmp_path):
    # PyG reads that split from Cora/geom-gcn/{raw,processed}: the checked files and the stamped cache are elsewhere.
    before = sorted((data_root / "Cora").rglob("*"))
    with pytest.raises(GraphseqError, match="the geom-gcn split is not supported"):
        load_planetoid("Cora", data_root, mirror, split="geom-gcn")
    assert sorted((data_root / "Cora").rglob("*")) == before


@pytest.mark.parametrize("damage", ["foreign", "torn beside", "folder"])
def test_a_cache_this_loader_did_not_build_is_rebuilt_from_the_raw_files(tmp_path, write_fake_planetoid, damage):
    """PyG's processed/ beside raw/: another dataset's data.pt (it trained on
    the wrong graph), a torn file beside a deleted data.pt (every later run
    failed, blaming the raw files), data.pt replaced by a folder."""
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    write_fake_planetoid(mirror / "PubMed" / "raw", "PubMed", num_features=20)
    write_fake_planetoid(mirror / "CiteSeer" / "raw", "CiteSeer", num_features=30)
    assert load_planetoid("PubMed", root, mirror).num_features == 20
    assert load_planetoid("CiteSeer", root, mirror).num_features == 30
    processed = root / "PubMed" / "processed"
    if damage == "foreign":
        (processed / "data.pt").write_bytes((root / "CiteSeer" / "processed" / "data.pt").read_bytes())
    elif damage == "torn beside":
        (processed / "data.pt").unlink()
        torn = processed / "pre_transform.pt"
        torn.write_bytes(torn.read_bytes()[: torn.stat().st_size // 2])
    else:
        (processed / "data.pt").unlink()
        (processed / "data.pt").mkdir()
    assert load_planetoid("PubMed", root, mirror).num_features == 20
    assert load_planetoid("PubMed", root, mirror).num_features == 20  # and the rebuilt cache serves


@pytest.mark.parametrize("place", ["PubMed", "PubMed/raw", "PubMed/processed"])
def test_a_file_where_a_folder_goes_is_refused_before_anything_is_written(tmp_path, write_fake_planetoid, place):
    # processed/ is deleted to rebuild PyG's cache: a file there was a NotADirectoryError traceback.
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    write_fake_planetoid(mirror / "PubMed" / "raw", "PubMed")
    (root / place).parent.mkdir(parents=True, exist_ok=True)
    (root / place).write_text("mine")
    with pytest.raises(GraphseqError, match=f"^{root / place} is not a folder .*; move it away and run again$"):
        load_planetoid("PubMed", root, mirror)
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == sorted(
        {place, *(["PubMed"] if place != "PubMed" else [])})
    assert (root / place).read_text() == "mine"


@pytest.mark.parametrize("stale", ["another dataset's folder", "other raw files"])
def test_a_stamped_cache_of_other_files_is_rebuilt(tmp_path, write_fake_planetoid, stale):
    # A processed/ copied from Cora into CiteSeer's folder, stamp and all, was
    # used: CiteSeer trained on Cora. The stamp held only data.pt's digest.
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    write_fake_planetoid(mirror / "Cora" / "raw", "Cora", num_features=20)
    write_fake_planetoid(mirror / "CiteSeer" / "raw", "CiteSeer", num_features=30)
    assert load_planetoid("CiteSeer", root, mirror).num_features == 30
    if stale == "another dataset's folder":
        assert load_planetoid("Cora", root, mirror).num_features == 20
        shutil.rmtree(root / "CiteSeer" / "processed")
        shutil.copytree(root / "Cora" / "processed", root / "CiteSeer" / "processed")
        expected = 30
    else:  # A new version of the raw files in the root.
        write_fake_planetoid(root / "CiteSeer" / "raw", "CiteSeer", num_features=40, seed=1)
        expected = 40
    assert load_planetoid("CiteSeer", root, mirror).num_features == expected
    assert load_planetoid("CiteSeer", root, mirror).num_features == expected  # and the rebuilt cache serves


@pytest.mark.parametrize("stale", ["unstamped", "another dataset's"])
def test_a_read_only_cache_that_needs_rebuilding_is_refused_by_name_and_kept(tmp_path, write_fake_planetoid,
                                                                             deny_writes, stale):
    # Deleting it failed half-way with "cannot write pre_transform.pt", naming no folder.
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    write_fake_planetoid(mirror / "Cora" / "raw", "Cora", num_features=20)
    write_fake_planetoid(mirror / "CiteSeer" / "raw", "CiteSeer", num_features=30)
    load_planetoid("CiteSeer", root, mirror)
    processed = root / "CiteSeer" / "processed"
    if stale == "unstamped":
        (processed / "graphseq-built.txt").unlink()
    else:
        load_planetoid("Cora", root, mirror)
        shutil.rmtree(processed)
        shutil.copytree(root / "Cora" / "processed", processed)
    before = {path: path.read_bytes() for path in processed.iterdir()}
    deny_writes(root)
    with pytest.raises(GraphseqError, match=f"^{re.escape(str(processed))} is not the cache this loader built from "
                                            f"the CiteSeer files in {re.escape(str(root / 'CiteSeer' / 'raw'))} "
                                            f"\\(.*\\) and cannot be rebuilt: {re.escape(str(root / 'CiteSeer'))} "
                                            f"is not writable; make it writable"):
        load_planetoid("CiteSeer", root, mirror)
    assert {path: path.read_bytes() for path in processed.iterdir()} == before


@pytest.mark.parametrize("refusal", ["by its permissions", "by a failed write"])
def test_a_read_only_root_without_a_cache_is_called_not_writable(tmp_path, write_fake_planetoid, deny_writes,
                                                                 monkeypatch, refusal):
    # The OSError of PyG's first write blamed the raw files: "one of them may be damaged".
    root = tmp_path / "root"
    write_fake_planetoid(root / "PubMed" / "raw", "PubMed")
    if refusal == "by its permissions":
        deny_writes(root)
        expected = f"cannot build PyG's cache of the PubMed files: {root / 'PubMed'} is not writable; make it writable"
    else:
        import torch_geometric.io.fs as fs

        def read_only(path, *args, **kwargs):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)

        monkeypatch.setattr(fs, "makedirs", read_only)
        expected = (f"cannot build PyG's cache of the PubMed files in {root / 'PubMed' / 'processed'}: "
                    f"Read-only file system; make the folder writable")
    before = sorted(root.rglob("*"))
    with pytest.raises(GraphseqError, match=f"^{re.escape(expected)}"):
        load_planetoid("PubMed", root)
    assert sorted(root.rglob("*")) == before


@pytest.mark.parametrize("where", ["mirror", "data root"])
def test_an_unreadable_generated_file_is_named_and_what_was_taken_goes(tmp_path, write_fake_planetoid, where):
    # The refusal named the folder ("one of them may be damaged") and left
    # the copies from the mirror and processed/ in the root.
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    raw = (mirror if where == "mirror" else root) / "PubMed" / "raw"
    write_fake_planetoid(raw, "PubMed")
    (raw / "ind.pubmed.ty").write_bytes(b"junk")
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(GraphseqError, match=f"^damaged dataset file {re.escape(str(raw / 'ind.pubmed.ty'))}: "
                                            f"UnpicklingError: .*; replace it with a good copy"):
        load_planetoid("PubMed", root, mirror)
    assert sorted(tmp_path.rglob("*")) == before


def test_each_raw_file_is_hashed_once_a_load(tmp_path, write_fake_planetoid, monkeypatch):
    # The checksum check and the cache stamp each read every raw file: twice
    # a load, three times when a stale cache was rebuilt.
    from graphseq.data import files, planetoid
    from graphseq.data.files import Checksum, file_sha256

    mirror, root = tmp_path / "mirror", tmp_path / "root"
    write_fake_planetoid(mirror / "Cora" / "raw", "Cora")
    known = {p.name: Checksum(file_sha256(p), p.stat().st_size) for p in (mirror / "Cora" / "raw").iterdir()}
    monkeypatch.setitem(planetoid.CHECKSUMS, "Cora", known)
    hashed, hash_file = [], files.hash_file  # Every hash of a dataset file is taken there.

    def counted(path, *digests):
        hashed.append(os.path.basename(path))
        hash_file(path, *digests)

    monkeypatch.setattr(files, "hash_file", counted)
    for load in ("from the mirror", "from the cache", "with a stale cache rebuilt"):
        if load == "with a stale cache rebuilt":
            (root / "Cora" / "processed" / "graphseq-built.txt").write_text("an older graphseq's stamp")
        hashed.clear()
        assert load_planetoid("Cora", root, mirror).num_features == 20
        assert sorted(name for name in hashed if name != "data.pt") == sorted(known), load
    # The digests taken once still guard: a damaged raw file is refused by name.
    (root / "Cora" / "raw" / "ind.cora.ty").write_bytes(b"junk")
    with pytest.raises(GraphseqError, match=f"^damaged dataset file {re.escape(str(root / 'Cora' / 'raw'))}"
                                            f"/ind.cora.ty \\(in the data root"):
        load_planetoid("Cora", root, mirror)
