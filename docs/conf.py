"""Sphinx configuration of graphseq's documentation site.

The topic pages are Markdown (MyST); the API reference is read from the
docstrings by autodoc, whose Google-style ``Args:`` sections napoleon turns
into field lists, and whose reStructuredText (roles such as
``:class:`~x```, ``.. math::`` blocks) Sphinx reads natively, as PyTorch
Geometric's documentation does.

Build, with every warning an error::

    sphinx-build -W --keep-going -b html docs docs/_build/html
"""
import sys
from pathlib import Path

# The checkout's graphseq, whichever graphseq is installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

project = "graphseq"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Markdown pages: ::: fences for directives; headings get anchors, so that
# links between pages (page.md#a-heading) are checked by the build.
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

napoleon_google_docstring = True
napoleon_numpy_docstring = False
# Attributes as a field list, not as separate entries: a NamedTuple's fields
# are documented by autodoc already, and would be described twice.
napoleon_use_ivar = True
# "Shapes:" (PyG's section for tensor shapes) is kept as written, under a heading.
napoleon_custom_sections = [("Shapes", "notes_style")]

autodoc_member_order = "bysource"
autodoc_typehints = "none"
# An override without a docstring of its own (a model's train(), say) is
# left out rather than shown with torch's text.
autodoc_inherit_docstrings = False
autodoc_default_options = {"show-inheritance": True}

html_theme = "furo"
html_title = "graphseq"
