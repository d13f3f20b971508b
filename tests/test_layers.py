"""The layers of the house, as pyproject.toml's ``[tool.importlinter]``
contract lists them: each part of graphseq imports only the parts below it
(imports inside functions count too), so no import circle can form."""
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_each_layer_imports_only_the_layers_below_it(monkeypatch, capsys):
    cli = pytest.importorskip("importlinter.cli", reason="import-linter comes with the [test] extra")
    monkeypatch.chdir(REPO)
    code = cli.lint_imports(no_cache=True, no_logo=True)
    assert code == 0, capsys.readouterr().out
