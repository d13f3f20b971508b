"""How graphseq's words reach a person: counts spelled as said, and
progress bars drawn only where a person watches (a terminal, a notebook),
never into a file that standard error was redirected to."""
import io
import sys

import pytest

from conftest import Terminal
from graphseq.errors import draw_bars, plural


@pytest.mark.parametrize("count, said", [(0, "0 labels"), (1, "1 label"), (999, "999 labels"),
                                         (1000, "1,000 labels"), (1234567, "1,234,567 labels")])
def test_a_count_has_its_thousands_apart(count, said):
    assert plural(count, "label") == said


def test_bars_are_drawn_on_a_terminal_unless_quiet(monkeypatch):
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert draw_bars()
    assert not draw_bars(quiet=True)


@pytest.mark.parametrize("stderr", [io.StringIO(), None], ids=["a file or pipe", "closed (2>&-)"])
def test_no_bar_is_drawn_where_no_person_watches(monkeypatch, stderr):
    monkeypatch.setattr(sys, "stderr", stderr)
    assert not draw_bars()


def test_no_bar_is_drawn_on_a_closed_stream(monkeypatch):
    closed = io.StringIO()
    closed.close()  # isatty() now raises ValueError
    monkeypatch.setattr(sys, "stderr", closed)
    assert not draw_bars()


def test_bars_are_drawn_in_a_notebook_whose_stderr_is_no_terminal(notebook, monkeypatch):
    monkeypatch.setattr(sys, "stderr", notebook)
    assert not notebook.isatty()
    assert draw_bars()
    assert not draw_bars(quiet=True)


def test_a_notebook_that_redirected_stderr_to_a_file_gets_no_bar(notebook, monkeypatch):
    # A quiet run's stderr is its log: the notebook does not show it.
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not draw_bars()


def test_asking_does_not_import_ipython(monkeypatch):
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not draw_bars()
    assert "IPython" not in sys.modules
