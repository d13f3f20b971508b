"""Finding raw dataset files: the data root first, then a read-only mirror
with the same layout (copied into the root, never written to), then a
download. When all three fail the error names every file and place tried."""
from __future__ import annotations

import os
import shutil
import tempfile
import urllib.request
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..errors import GraphseqError


def locate_raw_files(folder: str, names: Sequence[str], root: Path,
                     mirror: Optional[Path] = None,
                     download: Optional[Callable[[Path], None]] = None) -> Path:
    """Makes sure ``root/folder/NAME`` exists for every name and returns
    ``root/folder``.

    Missing files are copied from ``mirror/folder`` when it has them; what is
    still missing is handed to ``download(root/folder)``. Errors from the
    download (offline, say) become a :class:`GraphseqError` naming the files.
    """
    target = Path(root) / folder
    missing = [n for n in names if not (target / n).exists()]
    if missing and mirror is not None:
        source = Path(mirror) / folder
        for name in list(missing):
            if (source / name).is_file():
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source / name, target / name)
                missing.remove(name)
    if not missing:
        return target
    places = f"{target}" + (f" and the mirror {Path(mirror) / folder}" if mirror is not None else
                            " (no mirror set: --data-mirror or GRAPHSEQ_MIRROR)")
    if download is None:
        raise GraphseqError(f"missing dataset file(s) {', '.join(missing)}; looked in {places}")
    try:
        download(target)
    except Exception as error:  # Any failure of the network or the host.
        raise GraphseqError(f"missing dataset file(s) {', '.join(missing)}; looked in {places}, "
                            f"and the download failed: {error}") from None
    still = [n for n in names if not (target / n).exists()]
    if still:
        raise GraphseqError(f"missing dataset file(s) {', '.join(still)} after downloading into {target}")
    return target


def download_url(url: str, path: Path) -> None:
    """Downloads ``url`` to ``path`` through a temporary file beside it, so
    an interrupted download never leaves a partial file under the name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as f:
            shutil.copyfileobj(response, f)
        Path(tmp).replace(path)
    finally:
        Path(tmp).unlink(missing_ok=True)
