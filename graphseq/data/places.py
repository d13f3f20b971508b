"""Where datasets live: the data root a run writes its datasets into, and the
read-only mirror of raw files it consults first. Each loader registers the
folders of the root it writes (:func:`dataset_folder`), so that a mirror
placed where a run would write is refused before anything is written."""
from __future__ import annotations

import importlib
import os
import pkgutil
from pathlib import Path
from typing import List, Optional

from ..errors import GraphseqError

_FOLDERS: List[str] = []


def dataset_folder(*names: str) -> str:
    """Registers ``names``, folders of the data root that a loader writes (its
    raw files, PyG's ``processed/`` cache); returns the first. A loader
    module calls it once, at import: ``FOLDER = dataset_folder("PPI")``."""
    _FOLDERS.extend(name for name in names if name not in _FOLDERS)
    return names[0]


def dataset_folders() -> tuple[str, ...]:
    """The folders of the data root that the dataset loaders write, under the
    names the loaders give them, in alphabetical order (every loader module
    of :mod:`graphseq.data` is imported, so each has registered its own)."""
    package = importlib.import_module(__package__)
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{__package__}.{module.name}")
    return tuple(sorted(_FOLDERS, key=str.lower))


def default_data_root() -> Path:
    # An empty GRAPHSEQ_DATA (``GRAPHSEQ_DATA= graphseq run ...``) is unset, as
    # the mirror's is: as a path it would be the working folder.
    return Path(os.environ.get("GRAPHSEQ_DATA") or "datasets")


def default_data_mirror() -> Optional[Path]:
    mirror = os.environ.get("GRAPHSEQ_MIRROR")
    return Path(mirror) if mirror else None


def data_places(data_root: str | os.PathLike | None, data_mirror: str | os.PathLike | None
                ) -> tuple[Path, Optional[Path]]:
    """The data root and mirror a run reads: those given, else the defaults.
    An empty one given is refused: ``--data-root "$DATA"`` with ``DATA``
    unset would otherwise write the datasets into the working folder.
    So are a data root and a mirror where the run would write into the
    mirror (:func:`_check_root_outside_mirror`)."""
    for value, option in ((data_root, "--data-root"), (data_mirror, "--data-mirror")):
        if value is not None and not str(value).strip():
            raise GraphseqError(f"{option} is empty; name a folder, or leave the option out for its default")
    root = Path(data_root) if data_root is not None else default_data_root()
    mirror = Path(data_mirror) if data_mirror is not None else default_data_mirror()
    if mirror is not None:
        _check_root_outside_mirror(root, mirror, "--data-root" if data_root is not None else
                                   "GRAPHSEQ_DATA" if os.environ.get("GRAPHSEQ_DATA") else "the default data root",
                                   "--data-mirror" if data_mirror is not None else "GRAPHSEQ_MIRROR")
    return root, mirror


def _check_root_outside_mirror(root: Path, mirror: Path, root_from: str, mirror_from: str) -> None:
    """Refuses a data root and a mirror that a run's writes would carry from
    the one into the other, as the paths resolve (links and '..' followed):
    a run writes its downloads, the raw files it copies and PyG's
    ``processed/`` caches into the data root's dataset folders
    (``ROOT/Cora``, :func:`dataset_folders`), and the mirror is read-only,
    to stay as its owner made it (it may be shared by other runs and
    machines). So the data root may not be the mirror or lie inside it, and
    a mirror may not be one of the root's dataset folders or lie inside one
    (``--data-mirror ROOT/Cora`` or ``ROOT/Cora/raw``), nor may such a
    folder be a link into the mirror (:func:`_check_mirror_outside_dataset_folders`).
    A mirror elsewhere inside the data root (``ROOT/mirror``) is let be: the
    run writes beside it, not in it, and reads it as it reads any other folder."""
    try:
        resolved_root, resolved_mirror = root.resolve(), mirror.resolve()
    except (OSError, RuntimeError):  # a link loop, a folder not to be entered: the data loaders name it
        return
    if resolved_root == resolved_mirror:
        where = "is the data mirror"
    elif resolved_root.is_relative_to(resolved_mirror):
        where = "lies inside the data mirror"
    else:
        _check_mirror_outside_dataset_folders(resolved_root, resolved_mirror, root_from, mirror_from)
        return
    raise GraphseqError(f"the data root {resolved_root} ({root_from}) {where} {resolved_mirror} ({mirror_from}), "
                        f"which a run only reads: it would write its datasets' files there; give a data root "
                        f"outside the mirror")


def _check_mirror_outside_dataset_folders(root: Path, mirror: Path, root_from: str, mirror_from: str) -> None:
    """Refuses the (resolved) ``mirror`` where one of the (resolved) data
    ``root``'s dataset folders is it, holds it, or, through a link, lies
    inside it: the run would write that dataset's files into the mirror.
    Every dataset folder counts, whichever the pipeline reads: a mirror
    there would be written by the next pipeline that reads that dataset."""
    names = dataset_folders()
    for name in names:
        try:
            folder = (root / name).resolve()
        except (OSError, RuntimeError):  # a link loop: the loader of that dataset names it
            continue
        if folder == mirror:
            where = "is"
        elif mirror.is_relative_to(folder):
            where = "holds"
        elif folder.is_relative_to(mirror):
            where = "lies inside"
        else:
            continue
        linked = folder != root / name
        remedy = (f"make {root / name} a folder of its own, not a link" if where == "lies inside" else
                  f"give a mirror outside the data root's dataset folders ({', '.join(names)})")
        raise GraphseqError(f"the data root's {name} folder {root / name} ({root_from}"
                            f"{f', a link to {folder}' if linked else ''}) {where} the data mirror {mirror} "
                            f"({mirror_from}): a run writes its {name} files there (raw copies, PyG's processed/ "
                            f"cache), and the mirror is only read; {remedy}")
