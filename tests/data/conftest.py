"""Fixtures of the data loaders' tests: a data root that says it is read-only."""
import os
from pathlib import Path

import pytest


@pytest.fixture
def deny_writes(monkeypatch):
    """Makes ``os.access`` answer as a read-only mount would for everything
    under the folder given: the tests run as root, who may write anywhere,
    so permissions cannot make a folder read-only here."""
    real = os.access

    def deny(folder):
        folder = Path(folder).resolve()

        def access(path, mode, *args, **kwargs):
            if mode & os.W_OK and Path(path).resolve().is_relative_to(folder):
                return False
            return real(path, mode, *args, **kwargs)

        monkeypatch.setattr(os, "access", access)

    return deny
