"""The examples in the docstrings run and print what they say."""
import doctest
import importlib
import importlib.util
import pkgutil
from pathlib import Path

import pytest

import graphseq

# The modules whose docstrings hold examples (">>>").
MODULES = sorted(info.name for info in pkgutil.walk_packages(graphseq.__path__, "graphseq.")
                 if ">>>" in Path(importlib.util.find_spec(info.name).origin).read_text(encoding="utf-8"))


def test_modules_with_examples_are_found():
    assert {"graphseq.graphs", "graphseq.data.episodes", "graphseq.data.polarity"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted and not result.failed, f"{result.failed} of {result.attempted} examples failed"
