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
import logging
from itertools import product
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
from torch_geometric.datasets import PPI

from ..errors import GraphseqError
from ..io import atomic_write_text, first_sentence
from .files import (STAMP, check_folder_places, check_writable, damaged_file_error, failed_cache_build, file_sha256,
                    locate_raw_files, printed_to_log, raw_file_lines, removed_if_failed, stamped_cache)
from .places import dataset_folder

FOLDER = dataset_folder("PPI")  # under the data root
SPLITS = {"train": "train", "val": "valid", "test": "test"}  # PyG's split name -> raw file prefix
RAW_FILES = [f"{prefix}_{name}" for prefix, name in
             product(SPLITS.values(), ["feats.npy", "graph_id.npy", "graph.json", "labels.npy"])]


def load_ppi(root: Path, mirror: Optional[Path] = None,
             log: Optional[logging.Logger] = None) -> Dict[str, PPI]:
    """The three splits of PPI, ``{"train": ..., "val": ..., "test": ...}``,
    each a PyG dataset of graphs with ``x`` ``[nodes, 50]`` and multi-label
    ``y`` ``[nodes, 121]``, from ``root/PPI``. Raw files are checked before
    PyG processes them; a damaged one that this call copied from the mirror
    (or downloaded) is removed from the root again. PyG's ``processed/``
    cache beside ``raw/`` is used only as this loader built it from the raw
    files there now; a torn or stale one is rebuilt."""
    log = log or logging.getLogger("graphseq")
    folder = Path(root) / FOLDER
    raw, processed = folder / "raw", folder / "processed"
    # Anything but a folder there is refused before anything is written: the
    # cache is deleted to be rebuilt, never a file of the user's.
    check_folder_places([raw, processed], "the PPI files and PyG's cache of them go there")
    fresh = {name for name in RAW_FILES if not (raw / name).exists()}
    cached = processed.exists()  # Before a download, which processes the files as it goes.
    digests: Dict[str, str] = {}  # the raw files' SHA-256s, each taken once (for both stamps)

    def download(raw_dir: Path) -> None:
        with printed_to_log(log):
            PPI(str(folder))  # PyG downloads and unpacks the zip into raw/.

    def read() -> Dict[str, PPI]:
        with printed_to_log(log):
            return {split: PPI(str(folder), split=split) for split in SPLITS}

    with removed_if_failed(raw):  # A refusal leaves no empty PPI/raw behind.
        locate_raw_files(f"{FOLDER}/raw", RAW_FILES, Path(root), mirror, download)
        # The stamp names the raw files the cache was built from and the
        # digests of what PyG wrote: a torn cache, or one of other raw files,
        # is rebuilt from the raw files, checked first. One the download made
        # (it processes the files as it goes) is rebuilt without a word.
        data = stamped_cache(processed, lambda: _stamp(raw, processed, digests), read, f"the files in {raw}",
                             "of other raw files", log if cached else None)
        if data is not None:
            return data
        try:
            for warning in _check_raw(raw):
                log.warning(warning)
        except _Damaged as error:
            mirror_copy = Path(mirror) / FOLDER / "raw" / error.name if mirror is not None else None
            raise damaged_file_error(raw, error.name, error.reason, fresh, mirror_copy, kind="PPI") from None
    check_writable(folder, "cannot build PyG's cache of the PPI files")
    try:
        data = read()
    except Exception as error:  # Something the checks above do not cover.
        refusal = failed_cache_build(processed, "PyG's cache of the PPI files", error)
        raise refusal or GraphseqError(f"cannot read the PPI files in {raw}: {type(error).__name__}: "
                                       f"{first_sentence(error)}; one of them may be damaged") from None
    atomic_write_text(processed / STAMP, _stamp(raw, processed, digests))
    return data


def _stamp(raw: Path, processed: Path, digests: Dict[str, str]) -> str:
    """What ``processed/STAMP`` holds: the name, size and SHA-256 of each raw
    file, then the SHA-256 of each file PyG wrote from them. Contents, not
    modification times: a copy of a data root (``cp -r``, a read-only
    mirror of it) keeps serving its cache. ``digests``: the raw files'
    SHA-256s this load has taken (:func:`~graphseq.data.files.raw_file_lines`)."""
    lines = raw_file_lines(raw, RAW_FILES, digests)
    lines += [f"{split}.pt sha256 {file_sha256(processed / f'{split}.pt')}" for split in SPLITS]
    return "\n".join(lines) + "\n"


class _Damaged(Exception):
    def __init__(self, name: str, reason: str):
        super().__init__(f"{name}: {reason}")
        self.name, self.reason = name, reason


def _load_npy(raw: Path, name: str) -> np.ndarray:
    try:
        array = np.load(raw / name, allow_pickle=False)
    except Exception as error:  # Truncated, empty, random or pickled bytes.
        raise _Damaged(name, first_sentence(error)) from None
    if not isinstance(array, np.ndarray):
        raise _Damaged(name, "not a single .npy array")
    return array


def _array(raw: Path, name: str, ndim: int, kinds: str, kind: str, rows: Optional[tuple] = None) -> np.ndarray:
    """``raw/name`` as an ``ndim``-d array of a dtype kind in ``kinds``, with
    ``rows = (count, file)`` rows when given, like that file."""
    array = _load_npy(raw, name)
    if array.ndim != ndim or array.dtype.kind not in kinds:
        raise _Damaged(name, f"expected a {ndim}-d {kind} array, found {array.ndim}-d {array.dtype}")
    if rows is not None and array.shape[0] != rows[0]:
        raise _Damaged(name, f"{array.shape[0]} rows, but {rows[1]} has {rows[0]}")
    return array


def _load_json(raw: Path, name: str) -> object:
    try:
        with open(raw / name, encoding="utf-8") as f:
            return json.load(f)
    except Exception as error:  # Malformed JSON, bytes that are not UTF-8.
        raise _Damaged(name, first_sentence(error)) from None


def _ids(entries: object, keys: Sequence[str], name: str, what: str) -> np.ndarray:
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise _Damaged(name, f'"{what}" is not a list of objects')
    try:
        ids = [[e[k] for k in keys] for e in entries]
    except KeyError as error:
        raise _Damaged(name, f'an entry of "{what}" has no {error}') from None
    if not all(type(i) is int for row in ids for i in row):
        raise _Damaged(name, f'"{what}" has ids that are not integers')
    return np.array(ids, dtype=np.int64).reshape(len(ids), len(keys))


def _check_raw(raw: Path) -> List[str]:
    """Checks PPI's raw files in ``raw`` as PyG's processing reads them;
    raises ``_Damaged`` naming the first file that is not as it should be.
    Returns warnings: the graphs whose first node has no links, whose edges
    PyG's processing numbers from their lowest linked node (PyG's PPI is what
    published PPI figures use, so it is kept and said)."""
    columns: Dict[str, tuple] = {}
    warnings = []
    for prefix in SPLITS.values():
        feats, labels, ids, graph = (f"{prefix}_{n}" for n in ("feats.npy", "labels.npy", "graph_id.npy",
                                                              "graph.json"))
        x = _array(raw, feats, 2, "f", "float")
        rows = x.shape[0]
        if rows == 0:
            raise _Damaged(feats, "it has no rows")
        if not np.isfinite(x).all():
            raise _Damaged(feats, "the features hold NaN or inf")
        y = _array(raw, labels, 2, "biuf", "numeric", (rows, feats))
        if not np.isin(y, (0, 1)).all():
            raise _Damaged(labels, "labels other than 0 and 1")
        g = _array(raw, ids, 1, "iuf", "integer", (rows, feats))
        if g.dtype.kind == "f" and not (np.isfinite(g).all() and (g == np.round(g)).all()):
            raise _Damaged(ids, "graph ids that are not whole numbers")
        present = np.unique(g)
        if present[-1] - present[0] + 1 != len(present):
            raise _Damaged(ids, "the graph ids are not consecutive (a graph without nodes)")
        # PyG numbers a graph's edges from the lowest row its links name, as
        # if the graph's rows were together and the first of them had links.
        g = g.astype(np.int64)
        present, first, count = np.unique(g, return_index=True, return_counts=True)
        last = len(g) - 1 - np.unique(g[::-1], return_index=True)[1]
        apart = np.flatnonzero(last - first + 1 != count)
        if apart.size:
            raise _Damaged(ids, f"the rows of graph {present[apart[0]]} are not together; PyG's PPI would "
                                f"misnumber its edges")
        data = _load_json(raw, graph)
        if not isinstance(data, dict) or "links" not in data or "nodes" not in data:
            raise _Damaged(graph, 'expected a node-link object with "nodes" and "links"')
        nodes = _ids(data["nodes"], ["id"], graph, "nodes")[:, 0]
        if nodes.size and (nodes.min() < 0 or nodes.max() >= rows or len(np.unique(nodes)) != len(nodes)):
            raise _Damaged(graph, f"its node ids are not distinct rows of {feats} (0 to {rows - 1})")
        links = _ids(data["links"], ["source", "target"], graph, "links")
        if links.size and (links.min() < 0 or links.max() >= rows):
            raise _Damaged(graph, f"a link names a node outside 0 to {rows - 1} (the rows of {feats})")
        inside = links[g[links[:, 0]] == g[links[:, 1]]]  # PyG drops links between graphs.
        lowest = np.full(len(present), rows)
        np.minimum.at(lowest, np.searchsorted(present, g[inside[:, 0]]), inside.min(axis=1))
        for graph_id, start, low in zip(present, first, lowest):
            if low == rows:
                raise _Damaged(graph, f"graph {graph_id} has no links between its nodes; PyG's PPI fails on "
                                      f"such a graph")
            if low != start:
                warnings.append(f"{raw / graph}: the first node of graph {graph_id} (row {start}) has no links "
                                f"in its graph; PyG's PPI numbers the graph's edges from row {low}, as "
                                f"every PyG user gets them")
        for name, array, kind in ((feats, x, "feature"), (labels, y, "label")):
            first = columns.setdefault(kind, (name, array.shape[1]))
            if array.shape[1] != first[1]:
                raise _Damaged(name, f"{array.shape[1]} {kind} columns, but {first[0]} has {first[1]}")
    return warnings


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

