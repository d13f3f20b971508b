"""The Planetoid citation graphs (Cora, CiteSeer, PubMed) through PyG's own
loader, with raw files taken from the data root, a mirror, or the web, and
checked against their known checksums before PyG reads them."""
from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Dict, Optional

import torch_geometric.transforms as T
from torch_geometric.data import Data
from torch_geometric.datasets import Planetoid

from ..errors import GraphseqError
from ..io import atomic_write_text, first_sentence
from .files import Checksum, download_url, file_sha256, locate_raw_files

NAMES = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
RAW_SUFFIXES = ["x", "tx", "allx", "y", "ty", "ally", "graph", "test.index"]
URL = Planetoid.url

# Checksums of the raw files (kimiyoung/planetoid, commit af6abf46; the same
# bytes as tkipf/gcn and PyG's download). ind.pubmed.allx is known only by
# its git blob id.
CHECKSUMS: Dict[str, Dict[str, Checksum]] = {
    "Cora": {
        "ind.cora.allx": Checksum("9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543", 257305),
        "ind.cora.ally": Checksum("2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71", 47959),
        "ind.cora.graph": Checksum("58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d", 59847),
        "ind.cora.test.index": Checksum("297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875", 5000),
        "ind.cora.tx": Checksum("b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a", 148025),
        "ind.cora.ty": Checksum("41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad", 28135),
        "ind.cora.x": Checksum("23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab", 22119),
        "ind.cora.y": Checksum("94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1", 4054),
    },
    "CiteSeer": {
        "ind.citeseer.allx": Checksum("2ac30345d95c9ec933a817ee0bdd6a5f077f8c184a20e696910192d534414668", 595021),
        "ind.citeseer.ally": Checksum("f704b2d986dde6c2669934de1f3ae5696a6cf9455c0f6b2646a2d135ea0a1c95", 55623),
        "ind.citeseer.graph": Checksum("d79a4ef9d3e7169aee8946145f6b7306e35bc79bffad26346cfb94e10e9912a7", 61987),
        "ind.citeseer.test.index": Checksum("2af990671580b6b2df5d158d1038f8292e30c9cd821b5453f399659b25b723d4", 5000),
        "ind.citeseer.tx": Checksum("539a8906a2da97628d212f2fdd668c109a8b3f0d36574b59e5d3fd5b5303da21", 260321),
        "ind.citeseer.ty": Checksum("55e5bd1ba1e733a04598753ad1a8d57957f4b8f89e74519f41f4f4938767e4ce", 24135),
        "ind.citeseer.x": Checksum("d20de19150741e555de0ed037195630fc194114ebc7fd72ced62810148aa22f6", 31087),
        "ind.citeseer.y": Checksum("8ba87e515d8e3ee3cf52f6d2c5b86aa73f11ecad825a808455209ec26cd54924", 3014),
    },
    "PubMed": {
        "ind.pubmed.ally": Checksum("0c37bbe3b5014ec365e9d393cf4791925e5ed94fb194305d74f064a8d7b50f0e", 224739),
        "ind.pubmed.graph": Checksum("5b89f0036ca22909471f1e6558eb42fa06e0c730a577bde5b058b40638f81dc9", 471808),
        "ind.pubmed.test.index": Checksum("b101d421688bbaecbd82e8a18f1e282378d6830f3a37666f28ebc47f844341b5", 6000),
        "ind.pubmed.tx": Checksum("4eb5f5d0f30f26497eb0ac6ac9719d09c67e284f1ed0385c93f3ef27a671da3d", 405505),
        "ind.pubmed.ty": Checksum("ee2e0d4819d9fbcc403689c3bf2e49face401b605932f093bc58ab6461130fdd", 12135),
        "ind.pubmed.x": Checksum("fbe9cb5c47200d1b7769a26e579be3b7130b556831f9d850e77c4c74f2599b33", 23172),
        "ind.pubmed.y": Checksum("e6c807633307a07ed659249006536a147c7999c797f11a2560752990181b41b3", 854),
        "ind.pubmed.allx": Checksum(git_blob="3b86bccf08111c37c632a9dd8ab63db25ea76361"),
    },
}


def load_planetoid(name: str, root: Path, mirror: Optional[Path] = None,
                   split: str = "public", normalize_features: bool = True,
                   log: Optional[logging.Logger] = None) -> Data:
    """Loads one Planetoid graph with its standard split masks. A torn
    ``processed/`` cache (PyG's, beside ``raw/``) is rebuilt."""
    canonical = NAMES.get(name.lower())
    if canonical is None:
        raise GraphseqError(f"unknown Planetoid dataset {name!r}; known: {', '.join(NAMES.values())}")
    if split == "geom-gcn":  # PyG reads it from other folders, with split files nobody checks here.
        raise GraphseqError("the geom-gcn split is not supported (PyG keeps it in its own raw/ and processed/ "
                            "folders, with split files whose checksums graphseq does not know); use public, "
                            "full or random")
    raw = [f"ind.{canonical.lower()}.{suffix}" for suffix in RAW_SUFFIXES]
    processed = Path(root) / canonical / "processed"
    # A file where a folder goes is refused before anything is written: the
    # cache below is rebuilt by deleting the folder, never a file of the user's.
    for path in (Path(root), Path(root) / canonical, Path(root) / canonical / "raw", processed):
        if path.exists() and not path.is_dir():
            raise GraphseqError(f"{path} is not a folder (the {canonical} files and PyG's cache of them go "
                                f"there); move it away and run again")

    def download(raw_dir: Path) -> None:
        # File by file, as PyG's Planetoid.download does, but without
        # processing: the files are checked before PyG reads them.
        for file in raw:
            if not (raw_dir / file).exists():
                download_url(f"{URL}/{file}", raw_dir / file)

    raw_dir = locate_raw_files(f"{canonical}/raw", raw, Path(root), mirror, download, CHECKSUMS[canonical])
    transform = T.NormalizeFeatures() if normalize_features else None

    def read() -> Data:
        return Planetoid(str(root), canonical, split=split, transform=transform)[0]

    # PyG's cache of the raw files is used only as this loader built it (its
    # stamp names data.pt's digest): another dataset's or version's data.pt,
    # or a torn file beside it, is rebuilt from the raw files (checked above).
    stamp = processed / STAMP
    if processed.exists():
        try:
            kept = (processed / "data.pt").is_file() and stamp.read_text(encoding="utf-8") == _digest(processed)
            graph = read() if kept else None
        except Exception:  # torn
            graph = None
        if graph is not None:
            return graph
        (log or logging.getLogger("graphseq")).info(f"{processed} is not the cache this loader built; "
                                                    f"rebuilding it")
        shutil.rmtree(processed)
    try:
        graph = read()
    except Exception as error:  # A raw file no checksum covers (generated data) that PyG cannot parse.
        raise GraphseqError(f"cannot read the {canonical} files in {raw_dir}: {type(error).__name__}: "
                            f"{first_sentence(error)}; one of them may be damaged") from None
    atomic_write_text(stamp, _digest(processed))
    return graph


STAMP = "graphseq-built.txt"


def _digest(processed: Path) -> str:
    """The SHA-256 of ``processed/data.pt``, as the stamp holds it."""
    return f"data.pt sha256 {file_sha256(processed / 'data.pt')}\n"
