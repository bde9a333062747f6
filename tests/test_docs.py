"""The manual builds: Sphinx, warnings as errors, every page in a toctree, the API reference
generated from the docstrings (a docstring that docutils cannot read fails here)."""

import subprocess
import sys

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


def test_new_guide_pages_join_the_site():
    # the guide's toctree ends with a glob, so a page another change adds under docs/guide/
    # is part of the site without editing the index (the build fails on a page in no toctree)
    index = (DOCS / "index.md").read_text()
    guide = index[index.index(":caption: User guide"):]
    assert "\nguide/*\n" in guide[:guide.index("```")]
