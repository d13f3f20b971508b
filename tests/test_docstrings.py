"""The examples in the docstrings run and print what they say."""
import doctest
import importlib
import importlib.util
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import graphseq
import graphseq.nn

# The modules whose docstrings hold examples (">>>").
MODULES = sorted(info.name for info in pkgutil.walk_packages(graphseq.__path__, "graphseq.")
                 if ">>>" in Path(importlib.util.find_spec(info.name).origin).read_text(encoding="utf-8"))


def test_modules_with_examples_are_found():
    assert {"graphseq.graphs", "graphseq.data.episodes", "graphseq.data.polarity"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted and not result.failed, f"{result.failed} of {result.attempted} examples failed"


def _arguments(doc: str) -> dict:
    """The entries of the ``Args:`` section of ``doc``, by the names they document."""
    section = re.search(r"^([ \t]*)Args:[ \t]*\n(.*?)(?=^\S|^\1\S|\Z)", doc, re.M | re.S)
    entries, names = {}, ()
    for line in section.group(2).splitlines() if section else ():
        if re.match(section.group(1) + r"    \S", line):  # a new entry: "name (type): ..." or "a, b: ..."
            names = tuple(name.split()[0] for name in line.split(":")[0].split(","))
            entries[names] = line.strip()
        elif names:
            entries[names] += " " + line.strip()
    return entries


LAYERS = [name for name in graphseq.nn.__all__ if inspect.isclass(getattr(graphseq.nn, name))]


@pytest.mark.parametrize("name", LAYERS)
def test_layer_arguments_say_their_defaults(name):
    layer = getattr(graphseq.nn, name)
    entries = _arguments(inspect.getdoc(layer) or "")
    for parameter in inspect.signature(layer.__init__).parameters.values():
        for names, text in entries.items():
            if parameter.name in names and parameter.default is not inspect.Parameter.empty:
                assert "(default:" in text or "must be" in text, f"{name}: {text}"


def test_layer_examples_take_no_public_layer_name():
    # An example class named like a public layer reads as that layer's code.
    module_docs = [inspect.getdoc(importlib.import_module(info.name)) or ""
                   for info in pkgutil.walk_packages(graphseq.nn.__path__, "graphseq.nn.")]
    for doc in module_docs + [inspect.getdoc(getattr(graphseq.nn, name)) or "" for name in LAYERS]:
        defined = set(re.findall(r"^\s*class (\w+)\b", doc, re.M))
        assert not defined & set(graphseq.nn.__all__), defined
