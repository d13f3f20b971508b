"""PPI through PyG's loader, on small generated files in PPI's raw layout
(no copy of the real data exists here)."""
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
