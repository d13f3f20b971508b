"""The Planetoid citation graphs (Cora, CiteSeer, PubMed) through PyG's own
loader, with raw files taken from the data root, a mirror, or the web."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch_geometric.transforms as T
from torch_geometric.data import Data
from torch_geometric.datasets import Planetoid

from ..errors import GraphseqError
from .files import locate_raw_files

NAMES = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
RAW_SUFFIXES = ["x", "tx", "allx", "y", "ty", "ally", "graph", "test.index"]


def load_planetoid(name: str, root: Path, mirror: Optional[Path] = None,
                   split: str = "public", normalize_features: bool = True) -> Data:
    """Loads one Planetoid graph with its standard split masks."""
    canonical = NAMES.get(name.lower())
    if canonical is None:
        raise GraphseqError(f"unknown Planetoid dataset {name!r}; known: {', '.join(NAMES.values())}")
    raw = [f"ind.{canonical.lower()}.{suffix}" for suffix in RAW_SUFFIXES]

    def download(raw_dir: Path) -> None:
        # PyG's loader downloads every raw file it lacks; it skips those present.
        Planetoid(str(root), canonical, split=split)

    locate_raw_files(f"{canonical}/raw", raw, Path(root), mirror, download)
    transform = T.NormalizeFeatures() if normalize_features else None
    return Planetoid(str(root), canonical, split=split, transform=transform)[0]
