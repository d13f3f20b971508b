"""PPI through PyG's loader, on small generated files in PPI's raw layout
(no copy of the real data exists here)."""
import logging

import pytest
import torch

from graphseq.data.ppi import RAW_FILES, load_ppi, write_ppi_raw
from graphseq.errors import GraphseqError


def test_generated_files_have_ppis_raw_layout(tmp_path):
    write_ppi_raw(tmp_path, graphs=(3, 1, 1), nodes=20)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(RAW_FILES)


def test_loads_the_splits_from_the_mirror_without_writing_to_it(tmp_path):
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    write_ppi_raw(mirror / "PPI" / "raw", graphs=(3, 2, 1), nodes=20, features=7, labels=5)
    before = sorted(p.relative_to(mirror) for p in mirror.rglob("*"))
    data = load_ppi(root, mirror)
    assert {split: len(graphs) for split, graphs in data.items()} == {"train": 3, "val": 2, "test": 1}
    graph = data["train"][0]
    assert graph.x.shape[1] == 7 and graph.y.shape == (graph.num_nodes, 5)
    assert set(graph.y.unique().tolist()) <= {0.0, 1.0}
    # Edges stay inside each graph and are numbered from 0 in it.
    for graphs in data.values():
        for g in graphs:
            assert g.edge_index.min() >= 0 and g.edge_index.max() < g.num_nodes
    assert sorted(p.relative_to(mirror) for p in mirror.rglob("*")) == before
    assert (root / "PPI" / "processed").is_dir()


def test_graphs_keep_their_own_nodes(tmp_path):
    write_ppi_raw(tmp_path / "PPI" / "raw", graphs=(4, 1, 1), nodes=30, seed=3)
    train = load_ppi(tmp_path)["train"]
    import numpy as np
    ids = np.load(tmp_path / "PPI" / "raw" / "train_graph_id.npy")
    feats = torch.from_numpy(np.load(tmp_path / "PPI" / "raw" / "train_feats.npy"))
    sizes = [int((ids == g).sum()) for g in np.unique(ids)]
    assert [g.num_nodes for g in train] == sizes
    assert torch.equal(train[1].x, feats[sizes[0]:sizes[0] + sizes[1]])


def test_missing_files_are_named_when_offline(tmp_path, monkeypatch):
    import graphseq.data.ppi as ppi

    class Offline:
        def __init__(self, *args, **kwargs):
            raise OSError("no network")

    monkeypatch.setattr(ppi, "PPI", Offline)
    with pytest.raises(GraphseqError, match="train_feats.npy.*download failed: no network"):
        load_ppi(tmp_path / "root", tmp_path / "empty-mirror")


def _raw(tmp_path):
    return write_ppi_raw(tmp_path / "PPI" / "raw", graphs=(2, 1, 1), nodes=10, features=4, labels=3)


def test_a_damaged_mirror_file_is_named_and_its_root_copy_removed(tmp_path):
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    raw = _raw(mirror)
    good = (raw / "train_feats.npy").read_bytes()
    (raw / "train_feats.npy").write_bytes(good[:len(good) // 2])
    with pytest.raises(GraphseqError, match=r"damaged PPI file .*mirror/PPI/raw/train_feats\.npy: Failed to read"):
        load_ppi(root, mirror)
    assert not (root / "PPI" / "raw" / "train_feats.npy").exists()
    (raw / "train_feats.npy").write_bytes(good)
    assert len(load_ppi(root, mirror)["train"]) == 2


@pytest.mark.parametrize("name, data", [("train_feats.npy", b""), ("valid_labels.npy", b"\x93NUMPY junk"),
                                        ("test_graph.json", b"\xff\xfe{"), ("train_graph.json", b'{"links": [')])
def test_unreadable_files_in_the_root_are_named(tmp_path, name, data):
    (_raw(tmp_path) / name).write_bytes(data)
    with pytest.raises(GraphseqError, match=rf"damaged PPI file \S*PPI/raw/{name}: .*delete it"):
        load_ppi(tmp_path)


def _save(raw, name, change):
    import numpy as np
    np.save(raw / name, change(np.load(raw / name)))


def _edit_json(raw, name, change):
    import json
    data = json.loads((raw / name).read_text())
    change(data)
    (raw / name).write_text(json.dumps(data))


def _far_link(data):
    data["links"].append({"source": 0, "target": len(data["nodes"]) + 3})


def _nan(x):
    x[0, 0] = float("nan")
    return x


@pytest.mark.parametrize("name, damage, message", [
    ("train_feats.npy", lambda x: x.reshape(-1), "expected a 2-d float array"),
    ("train_feats.npy", _nan, "NaN or inf"),
    ("train_labels.npy", lambda y: y * 3, "labels other than 0 and 1"),
    ("valid_labels.npy", lambda y: y[:-1], "rows, but valid_feats.npy has"),
    ("test_graph_id.npy", lambda g: g[:-2], "rows, but test_feats.npy has"),
    ("train_graph_id.npy", lambda g: g + 0.5, "not whole numbers"),
    ("test_labels.npy", lambda y: y[:, :-1], "2 label columns, but train_labels.npy has 3"),
    ("valid_feats.npy", lambda x: x[:, :-1], "3 feature columns, but train_feats.npy has 4"),
])
def test_arrays_of_the_wrong_shape_or_values_are_named(tmp_path, name, damage, message):
    _save(_raw(tmp_path), name, damage)
    with pytest.raises(GraphseqError, match=rf"damaged PPI file \S*{name}: .*{message}"):
        load_ppi(tmp_path)


@pytest.mark.parametrize("damage, message", [
    (_far_link, "a link names a node outside"),
    (lambda d: d.pop("links"), 'with "nodes" and "links"'),
    (lambda d: d["nodes"].append(dict(d["nodes"][0])), "node ids are not distinct rows of"),  # one node twice
])
def test_graphs_that_do_not_fit_the_features_are_named(tmp_path, damage, message):
    _edit_json(_raw(tmp_path), "valid_graph.json", damage)
    with pytest.raises(GraphseqError, match=rf"damaged PPI file \S*valid_graph\.json: .*{message}"):
        load_ppi(tmp_path)


def _graph_edges(graph):
    return sorted(map(tuple, graph.edge_index.t().tolist()))


def test_a_torn_cache_is_rebuilt_from_the_raw_files(tmp_path):
    # Every later run was a traceback from PyG's torch.load.
    _raw(tmp_path)
    edges = _graph_edges(load_ppi(tmp_path)["train"][1])
    torn = tmp_path / "PPI" / "processed" / "train.pt"
    torn.write_bytes(torn.read_bytes()[:100])
    assert _graph_edges(load_ppi(tmp_path)["train"][1]) == edges
    assert len(load_ppi(tmp_path)["train"]) == 2  # and the rebuilt cache serves


def test_a_cache_of_other_raw_files_is_rebuilt(tmp_path):
    # It was used silently: the old features after the raw files changed.
    write_ppi_raw(tmp_path / "PPI" / "raw", graphs=(2, 1, 1), nodes=10, features=4, labels=3)
    assert load_ppi(tmp_path)["train"][0].x.shape[1] == 4
    write_ppi_raw(tmp_path / "PPI" / "raw", graphs=(2, 1, 1), nodes=10, features=6, labels=3)
    assert load_ppi(tmp_path)["train"][0].x.shape[1] == 6


def test_a_refused_mirror_file_leaves_the_root_as_found(tmp_path):
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    root.mkdir()
    _save(_raw(mirror), "valid_labels.npy", lambda y: y * 3)
    with pytest.raises(GraphseqError, match="damaged PPI file .*mirror/PPI/raw/valid_labels.npy"):
        load_ppi(root, mirror)
    assert list(root.iterdir()) == []


def test_a_damaged_root_file_is_named_and_the_copies_taken_beside_it_go(tmp_path):
    # The copies this load took from the mirror stayed in the root, as
    # Planetoid's loader, which refuses the same way, did not leave them.
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    _raw(mirror)
    (root / "PPI" / "raw").mkdir(parents=True)
    (root / "PPI" / "raw" / "valid_feats.npy").write_bytes(b"mine, damaged")
    with pytest.raises(GraphseqError, match=r"^damaged PPI file \S*root/PPI/raw/valid_feats\.npy: .*; replace it "
                                            r"with a good copy \(or delete it to fetch it again\)$"):
        load_ppi(root, mirror)
    assert [p.name for p in root.rglob("*") if p.is_file()] == ["valid_feats.npy"]
    assert (root / "PPI" / "raw" / "valid_feats.npy").read_bytes() == b"mine, damaged"


def _unlink_node(row):
    def change(data):
        data["links"] = [e for e in data["links"] if row not in (e["source"], e["target"])]
    return change


def test_a_graph_without_links_is_named(tmp_path):
    # PyG's processing stopped with a RuntimeError traceback (min of nothing).
    _edit_json(_raw(tmp_path), "train_graph.json", lambda d: d.update(links=[]))
    with pytest.raises(GraphseqError, match=r"damaged PPI file \S*train_graph\.json: graph 1 has no links.*PyG"):
        load_ppi(tmp_path)


def test_a_first_node_without_links_is_said(tmp_path, caplog):
    # PyG numbers a graph's edges from its lowest linked node, so a first
    # node without links shifts every edge of its graph. PyG's numbering is
    # what every PPI figure uses: it is kept, and said, not silent.
    _edit_json(_raw(tmp_path), "train_graph.json", _unlink_node(0))
    with caplog.at_level(logging.WARNING, logger="graphseq"):
        data = load_ppi(tmp_path)
    assert "the first node of graph 1 (row 0) has no links" in caplog.text
    assert "train_graph.json" in caplog.text
    assert len(data["train"]) == 2


def _swap_ends(g):
    g[[0, -1]] = g[[-1, 0]]
    return g


def test_graphs_whose_rows_are_not_together_are_named(tmp_path):
    # PyG takes a graph's rows wherever they are but numbers its edges as if they were together.
    _save(_raw(tmp_path), "train_graph_id.npy", _swap_ends)  # graph ids 2, 1, ..., 1, 2, ..., 2, 1
    with pytest.raises(GraphseqError, match=r"damaged PPI file \S*train_graph_id\.npy: the rows of graph 1 "
                                            r"are not together.*PyG"):
        load_ppi(tmp_path)


def test_a_copied_data_root_keeps_serving_its_cache(tmp_path, deny_writes):
    # The stamp held the raw files' modification times: a copy (cp -r) of a
    # built root, read-only, was refused, and a writable one rebuilt.
    import os
    import shutil

    first, copy = tmp_path / "first", tmp_path / "copy"
    _raw(first)
    load_ppi(first)
    shutil.copytree(first, copy)
    for path in (copy / "PPI" / "raw").iterdir():  # As cp -r leaves them: copied now.
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10 ** 9))
    processed = copy / "PPI" / "processed"
    before = {path: path.stat().st_mtime_ns for path in processed.iterdir()}
    deny_writes(copy)
    assert len(load_ppi(copy)["train"]) == 2
    assert {path: path.stat().st_mtime_ns for path in processed.iterdir()} == before  # served, not rebuilt


def test_a_read_only_cache_of_other_raw_files_is_refused_by_name_and_kept(tmp_path, deny_writes):
    write_ppi_raw(tmp_path / "PPI" / "raw", graphs=(2, 1, 1), nodes=10, features=4, labels=3)
    load_ppi(tmp_path)
    write_ppi_raw(tmp_path / "PPI" / "raw", graphs=(2, 1, 1), nodes=10, features=6, labels=3)
    processed = tmp_path / "PPI" / "processed"
    before = {path: path.read_bytes() for path in processed.iterdir()}
    deny_writes(tmp_path)
    with pytest.raises(GraphseqError, match=f"^{processed} is not the cache this loader built .* and cannot be "
                                            f"rebuilt: {tmp_path / 'PPI'} is not writable; make it writable"):
        load_ppi(tmp_path)
    assert {path: path.read_bytes() for path in processed.iterdir()} == before
