"""Shared fixtures: a writable data root per test session and the read-only
mirror of real datasets (``GRAPHSEQ_MIRROR``, else ``../shared/datasets``)."""
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

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


def _write_fake_planetoid(folder, name, num_features=20, num_classes=3, per_class=5,
                          num_unlabelled=600, num_test=100, seed=0):
    """Raw files in the Planetoid format (pickled scipy/numpy objects, a text
    test index), small enough to process in a second. Returns the node count."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    prefix = folder / f"ind.{name.lower()}"
    num_train = per_class * num_classes

    def features(n):
        return sp.csr_matrix((rng.random((n, num_features)) < 0.2).astype(np.float32))

    def onehot(n):
        return np.eye(num_classes, dtype=np.int32)[rng.integers(0, num_classes, n)]

    objects = {"x": features(num_train), "allx": features(num_unlabelled), "tx": features(num_test),
               "y": onehot(num_train), "ally": onehot(num_unlabelled), "ty": onehot(num_test)}
    num_nodes = num_unlabelled + num_test
    objects["graph"] = {i: sorted(set(rng.integers(0, num_nodes, 3).tolist()) - {i})
                        for i in range(num_nodes)}
    for key, value in objects.items():
        with open(f"{prefix}.{key}", "wb") as f:
            pickle.dump(value, f)
    test_index = rng.permutation(np.arange(num_unlabelled, num_nodes))
    (folder / f"ind.{name.lower()}.test.index").write_text("\n".join(map(str, test_index)) + "\n")
    return num_nodes


@pytest.fixture
def write_fake_planetoid(monkeypatch):
    """Writes generated Planetoid files; their dataset's known checksums are
    set aside for the test, since generated files are not the real ones."""
    from graphseq.data import planetoid

    def write(folder, name, **kwargs):
        monkeypatch.setitem(planetoid.CHECKSUMS, planetoid.NAMES[name.lower()], {})
        return _write_fake_planetoid(folder, name, **kwargs)

    return write
