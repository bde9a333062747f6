"""Sphinx configuration for turboloader's manual.

Why Sphinx, autodoc + napoleon and MyST-Parser (rather than MkDocs + mkdocstrings): torchvision
and PyTorch, whose users this library serves, document themselves with Sphinx, so the API
reference reads and cross-links like theirs; the package's docstrings are Google style, which
``sphinx.ext.napoleon`` reads as they are; and MyST-Parser keeps every page Markdown, so the
existing docs/*.md (architecture, batch API, TBL format) join the site unchanged and render on
the code host as well. CI builds it with warnings as errors (tests/test_docs.py) and runs
every ```python block of the pages (tests/test_doc_examples.py).
"""

import os
import sys

# the checkout's package (an editable install provides it too; this keeps a plain
# `sphinx-build docs out` from a source tree working once the extensions are built)
sys.path.insert(0, os.path.abspath(".."))

import turboloader  # noqa: E402

project = "turboloader"
author = "the turboloader authors"
copyright = "2026, the turboloader authors"
release = turboloader.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "myst_parser",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
# pypi.md is the package index's page (pyproject's readme), not part of the manual
exclude_patterns = ["_build", "pypi.md"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # [text](page.md#a-heading) links, as on the code host

autodoc_member_order = "bysource"
autodoc_typehints = "description"
# a method without its own docstring is not documented with its base class's (Lightning's and
# torchvision's are written for their own Sphinx sites, with their own roles and labels)
autodoc_inherit_docstrings = False
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

html_theme = "alabaster"
html_title = f"turboloader {release}"
html_theme_options = {"description": "Fast, drop-in image data loading for PyTorch",
                      "fixed_sidebar": True}
