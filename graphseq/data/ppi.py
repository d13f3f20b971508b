"""The protein-protein interaction graphs (PPI, Zitnik & Leskovec 2017) of the
GAT paper's inductive experiment, through PyG's own loader: 20 training
graphs, 2 validation and 2 test graphs of about 2,245 proteins each, 50
features and 121 binary labels per node. Raw files come from the data root,
then a mirror with the same layout, then the download.

:func:`write_ppi_raw` writes small random graphs in PPI's raw layout
(``{train,valid,test}_{graph.json,feats.npy,labels.npy,graph_id.npy}``), so
the loader and the pipeline can be exercised where the real data is absent.
"""
from __future__ import annotations

import json
from itertools import product
from pathlib import Path
from typing import Dict, Optional, Sequence

import numpy as np
from torch_geometric.datasets import PPI

from .files import locate_raw_files

SPLITS = {"train": "train", "val": "valid", "test": "test"}  # PyG's split name -> raw file prefix
RAW_FILES = [f"{prefix}_{name}" for prefix, name in
             product(SPLITS.values(), ["feats.npy", "graph_id.npy", "graph.json", "labels.npy"])]


def load_ppi(root: Path, mirror: Optional[Path] = None) -> Dict[str, PPI]:
    """The three splits of PPI, ``{"train": ..., "val": ..., "test": ...}``,
    each a PyG dataset of graphs with ``x`` ``[nodes, 50]`` and multi-label
    ``y`` ``[nodes, 121]``, from ``root/PPI``."""
    folder = Path(root) / "PPI"

    def download(raw_dir: Path) -> None:
        PPI(str(folder))  # PyG downloads and unpacks the zip into raw/.

    locate_raw_files("PPI/raw", RAW_FILES, Path(root), mirror, download)
    return {split: PPI(str(folder), split=split) for split in SPLITS}


def write_ppi_raw(raw_dir: str | Path, graphs: Sequence[int] = (4, 2, 2), nodes: int = 40,
                  features: int = 50, labels: int = 121, degree: int = 6, seed: int = 0) -> Path:
    """Writes random graphs in PPI's raw format into ``raw_dir``: ``graphs``
    graphs in the training, validation and test splits, about ``nodes`` nodes
    each (sizes vary by up to a quarter), node-link JSON edges within each
    graph, float features and 0/1 labels that depend on a node's own
    features and its neighbours' (so that there is something to learn).
    Returns ``raw_dir``."""
    from networkx.readwrite import json_graph
    import networkx as nx

    raw_dir = Path(raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal((features, labels)) / np.sqrt(features)
    for count, prefix in zip(graphs, SPLITS.values()):
        sizes = rng.integers(max(2, nodes * 3 // 4), nodes * 5 // 4 + 1, count)
        graph, offset, ids = nx.Graph(), 0, []
        for g, size in enumerate(sizes):
            size = int(size)
            graph.add_nodes_from(range(offset, offset + size))
            for u in range(size):
                for v in rng.choice(size, size=degree // 2, replace=False):
                    if u != v:
                        graph.add_edge(offset + u, offset + int(v))
            ids += [g + 1] * size  # PPI's graph ids do not start at 0.
            offset += size
        x = rng.standard_normal((offset, features)).astype(np.float32)
        mixed = x.copy()
        for u in range(offset):
            neighbours = list(graph.neighbors(u))
            if neighbours:
                mixed[u] += x[neighbours].mean(axis=0)
        y = (mixed @ weights > 0).astype(np.float32)
        with open(raw_dir / f"{prefix}_graph.json", "w") as f:
            json.dump(json_graph.node_link_data(graph, edges="links"), f)
        np.save(raw_dir / f"{prefix}_feats.npy", x)
        np.save(raw_dir / f"{prefix}_labels.npy", y)
        np.save(raw_dir / f"{prefix}_graph_id.npy", np.array(ids, dtype=np.int64))
    return raw_dir

