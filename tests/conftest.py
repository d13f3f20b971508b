"""Shared fixtures: a writable data root per test session and the read-only
mirror of real datasets (``GRAPHSEQ_MIRROR``, else ``../shared/datasets``)."""
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def mirror_path() -> Path:
    return Path(os.environ.get("GRAPHSEQ_MIRROR", REPO.parent / "shared" / "datasets")).resolve()


@pytest.fixture(scope="session")
def mirror() -> Path:
    path = mirror_path()
    if not path.is_dir():
        pytest.skip(f"no dataset mirror at {path} (set GRAPHSEQ_MIRROR)")
    return path


@pytest.fixture(scope="session")
def data_root(tmp_path_factory) -> Path:
    """One writable root for the whole session, so PyG processes each dataset once."""
    return tmp_path_factory.mktemp("datasets")
