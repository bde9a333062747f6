"""The manual builds: Sphinx, warnings as errors, every page in a toctree, the API reference
generated from the docstrings (a docstring that docutils cannot read fails here)."""

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, subprocess_env

DOCS = ROOT / "docs"


@pytest.mark.slow
def test_sphinx_build_has_no_warnings(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    out = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-q", "-b", "html",
         "-d", str(tmp_path / "doctrees"), str(DOCS), str(tmp_path / "html")],
        env=subprocess_env(), capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    html = tmp_path / "html"
    # the reference is generated, not empty: the datasets' pages name their classes
    data = (html / "api" / "data.html").read_text()
    assert 'id="turboloader.data.TarDataset"' in data and "on_error" in data
    # every Markdown page is part of the site (a page missing from the toctrees is a warning)
    for page in DOCS.rglob("*.md"):
        rel = page.relative_to(DOCS).with_suffix(".html")
        if rel.name != "pypi.html" and not any(p.startswith("_") for p in rel.parts):
            assert (html / rel).exists(), rel


def test_every_guide_page_is_reachable_from_the_index():
    # the guide's toctree is a glob, so a new page joins it; the pages the README links to exist
    index = (DOCS / "index.md").read_text()
    assert "guide/*" in index
    readme = (ROOT / "README.md").read_text()
    import re
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / target).exists(), target
