"""The Planetoid citation graphs (Cora, CiteSeer, PubMed) through PyG's own
loader, with raw files taken from the data root, a mirror, or the web, and
checked against their known checksums before PyG reads them."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import torch_geometric.transforms as T
from torch_geometric.data import Data
from torch_geometric.datasets import Planetoid

from ..errors import GraphseqError
from ..io import atomic_write_text, first_sentence
from .files import (STAMP, Checksum, check_folder_places, check_writable, damaged_file_error, download_url,
                    failed_cache_build, file_sha256, locate_raw_files, printed_to_log, raw_file_lines,
                    removed_if_failed, stamped_cache)
from .places import dataset_folder

NAMES = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
dataset_folder(*NAMES.values())
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
    """Loads one Planetoid graph with its standard split masks. PyG's
    ``processed/`` cache beside ``raw/`` is used only as this loader built it
    from these raw files; any other (torn, another dataset's, older) is
    rebuilt. Raw files that PyG cannot read are named, and what this call
    took into the root goes again."""
    canonical = NAMES.get(name.lower())
    if canonical is None:
        raise GraphseqError(f"unknown Planetoid dataset {name!r}; known: {', '.join(NAMES.values())}")
    if split == "geom-gcn":  # PyG reads it from other folders, with split files nobody checks here.
        raise GraphseqError("the geom-gcn split is not supported (PyG keeps it in its own raw/ and processed/ "
                            "folders, with split files whose checksums graphseq does not know); use public, "
                            "full or random")
    raw = [f"ind.{canonical.lower()}.{suffix}" for suffix in RAW_SUFFIXES]
    raw_dir = Path(root) / canonical / "raw"
    processed = Path(root) / canonical / "processed"
    # Anything but a folder where one goes is refused before anything is
    # written: the cache below is rebuilt by deleting the folder, never a
    # file of the user's.
    check_folder_places([raw_dir, processed], f"the {canonical} files and PyG's cache of them go there")
    taken = [file for file in raw if not os.path.lexists(raw_dir / file)]  # from the mirror or the web

    def download(raw_dir: Path) -> None:
        # File by file, as PyG's Planetoid.download does, but without
        # processing: the files are checked before PyG reads them.
        for file in raw:
            if not (raw_dir / file).exists():
                download_url(f"{URL}/{file}", raw_dir / file)

    transform = T.NormalizeFeatures() if normalize_features else None

    def read() -> Data:
        with printed_to_log(log or logging.getLogger("graphseq")):
            return Planetoid(str(root), canonical, split=split, transform=transform)[0]

    # The SHA-256 of each raw file, taken once: by the checksum check where
    # the file has a known checksum, else by the first stamp that needs it.
    digests: Dict[str, str] = {}
    with removed_if_failed(raw_dir):  # A refusal leaves no folder this call made.
        locate_raw_files(f"{canonical}/raw", raw, Path(root), mirror, download, CHECKSUMS[canonical], digests)
        graph = stamped_cache(processed, lambda: _stamp(canonical, raw_dir, processed, digests), read,
                              f"the {canonical} files in {raw_dir}", "another dataset's",
                              log or logging.getLogger("graphseq"))
        if graph is None:
            graph = _build(canonical, raw_dir, processed, read, digests, taken, mirror)
    return graph


def _build(canonical: str, raw_dir: Path, processed: Path, read: Callable[[], Data], digests: Dict[str, str],
           taken: List[str], mirror: Optional[Path]) -> Data:
    """Has PyG build its cache from the raw files, and stamps it. When PyG
    cannot read a file (one no checksum covers: generated data), its cache
    and the files this call took into the root go, and the file is named."""
    check_writable(processed.parent, f"cannot build PyG's cache of the {canonical} files")
    try:
        graph = read()
    except Exception as error:
        refusal = failed_cache_build(processed, f"PyG's cache of the {canonical} files", error)
        raise (refusal or _unreadable_files(canonical, raw_dir, taken, mirror, error)) from None
    atomic_write_text(processed / STAMP, _stamp(canonical, raw_dir, processed, digests))
    return graph


def _unreadable_files(canonical: str, raw_dir: Path, taken: List[str], mirror: Optional[Path],
                      error: Exception) -> GraphseqError:
    """The refusal of raw files PyG could not read, naming the first that
    does not read on its own where it came from: the data root, or the mirror
    its copy was taken from. The files this call took into the root
    (``taken``) go again, so that a fixed mirror, or the download, is used
    next time."""
    found = _unreadable(canonical, raw_dir)
    if found is None:
        for name in taken:
            (raw_dir / name).unlink(missing_ok=True)
        return GraphseqError(f"cannot read the {canonical} files in {raw_dir} together: {type(error).__name__}: "
                             f"{first_sentence(error)}; replace them with good copies")
    file, reason = found
    mirror_copy = Path(mirror) / canonical / "raw" / file if mirror is not None else None
    return damaged_file_error(raw_dir, file, reason, taken, mirror_copy)


def _unreadable(canonical: str, raw_dir: Path) -> Optional[Tuple[str, str]]:
    """The first raw file that PyG cannot read on its own, with why; ``None``
    when each file reads and only their combination fails."""
    from torch_geometric.io.planetoid import read_file

    for suffix in RAW_SUFFIXES:
        try:
            read_file(str(raw_dir), canonical.lower(), suffix)  # PyG adds the "ind."
        except Exception as error:  # Whatever unpickling or parsing raises.
            return f"ind.{canonical.lower()}.{suffix}", f"{type(error).__name__}: {first_sentence(error)}"
    return None


def _stamp(canonical: str, raw_dir: Path, processed: Path, digests: Dict[str, str]) -> str:
    """What ``processed/STAMP`` holds: the dataset, the size and SHA-256 of
    each raw file the cache was built from, and the SHA-256 of PyG's
    ``data.pt``. A cache copied from another dataset's folder, or left from
    other raw files, does not match it (PyG itself looks only at names).
    ``digests``: the raw files' SHA-256s this load has taken
    (:func:`~graphseq.data.files.raw_file_lines`)."""
    raw = [f"ind.{canonical.lower()}.{suffix}" for suffix in RAW_SUFFIXES]
    lines = [f"graphseq's cache of Planetoid {canonical}", *raw_file_lines(raw_dir, raw, digests),
             f"data.pt sha256 {file_sha256(processed / 'data.pt')}"]
    return "\n".join(lines) + "\n"
