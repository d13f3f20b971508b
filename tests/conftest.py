"""Shared fixtures: a writable data root per test session and the read-only
mirror of real datasets (``GRAPHSEQ_MIRROR``, else ``../shared/datasets``);
and :class:`Terminal`, a standard error that says it is a terminal, which
tests import (``from conftest import Terminal``).

The tests come in two tiers. ``python -m pytest`` runs the fast one: the
layers, the units, the command's checks and the quick pipeline smoke runs.
Tests marked ``slow`` (real-data training, several processes, the longer
smoke runs: more than a second or two each) run too with ``--all``."""
import io
import os
import pickle
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

REPO = Path(__file__).resolve().parent.parent


def pytest_addoption(parser):
    parser.addoption("--all", action="store_true", help="run every tier: the slow tests too")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--all"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


class Terminal(io.StringIO):
    """A terminal's standard error, as a test can read it back."""

    def isatty(self):
        return True


class _KernelStream(io.StringIO):
    """A Jupyter kernel's standard error (ipykernel's OutStream): no
    terminal, yet a person watches what is drawn on it."""


_KernelStream.__module__ = "ipykernel.iostream"


@pytest.fixture
def notebook(monkeypatch):
    """Runs the test as a Jupyter notebook's cell: IPython (imported) says
    its shell is a kernel's. Gives the kernel's standard error, which the
    test sets as ``sys.stderr`` itself (pytest's capture sets its own again
    between a fixture and the test)."""
    class ZMQInteractiveShell:
        pass

    ipython = types.ModuleType("IPython")
    ipython.get_ipython = ZMQInteractiveShell
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    return _KernelStream()


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


def _write_fake_omniglot(base, alphabets=(("Alpha", 2), ("Beta", 1)), evaluation=(("Gamma", 1),), size=105,
                         manifest=False):
    """torchvision's extracted Omniglot layout with a few characters of 20
    one-bit PNGs each: a vertical bar whose place depends on the character.
    With ``manifest``, a SHA256SUMS beside it lists every PNG."""
    import hashlib

    from PIL import Image

    folder = base / "omniglot-py"
    lines = []
    number = 0
    for part, groups in (("images_background", alphabets), ("images_evaluation", evaluation)):
        for alphabet, characters in groups:
            for c in range(1, characters + 1):
                number += 1
                directory = folder / part / alphabet / f"character{c:02d}"
                directory.mkdir(parents=True)
                for drawer in range(1, 21):
                    pixels = np.ones((size, size), dtype=bool)
                    pixels[10:90, 10 * number:10 * number + 8] = False
                    path = directory / f"{number:04d}_{drawer:02d}.png"
                    Image.fromarray(pixels).save(path)
                    lines.append(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  "
                                 f"omniglot-py/{path.relative_to(folder).as_posix()}")
    if manifest:
        (base / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    return folder


def _write_fake_miniimagenet(base, classes=(6, 5, 5), per_class=4, size=84, seed=0):
    """The Ravi & Larochelle mini-ImageNet layout on a tiny scale: images/ of
    JPEGs named like the real ones and the three split CSVs."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    folder = base / "mini-imagenet"
    (folder / "images").mkdir(parents=True)
    wnid = 1000000
    for split, count in zip(("train", "val", "test"), classes):
        rows = ["filename,label"]
        for _ in range(count):
            wnid += 1
            colour = rng.integers(0, 256, 3)
            for i in range(per_class):
                name = f"n{wnid:08d}{i + 1:08d}.jpg"
                pixels = np.clip(colour + rng.integers(-20, 20, (size, size, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / "images" / name)
                rows.append(f"{name},n{wnid:08d}")
        (folder / f"{split}.csv").write_text("\n".join(rows) + "\n")
    return folder


@pytest.fixture
def write_fake_omniglot():
    return _write_fake_omniglot


@pytest.fixture
def write_fake_miniimagenet():
    return _write_fake_miniimagenet


@pytest.fixture
def deny_writes(monkeypatch):
    """A data root that says it is read-only, for the loaders' tests: makes
    ``os.access`` answer as a read-only mount would for everything under the
    folder given. The tests run as root, who may write anywhere, so
    permissions cannot make a folder read-only here."""
    real = os.access

    def deny(folder):
        folder = Path(folder).resolve()

        def access(path, mode, *args, **kwargs):
            if mode & os.W_OK and Path(path).resolve().is_relative_to(folder):
                return False
            return real(path, mode, *args, **kwargs)

        monkeypatch.setattr(os, "access", access)

    return deny
