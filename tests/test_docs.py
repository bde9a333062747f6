"""The manual builds as docs/development.md says (``pip install '.[docs]'``, then
``sphinx-build -W --keep-going``): Sphinx, warnings as errors, every page in a toctree, the
API reference generated from the docstrings (a docstring that docutils cannot read fails
here), with only the packages the ``docs`` extra installs."""

import importlib.metadata
import re
import subprocess
import sys
import tomllib

import pytest

from helpers import ROOT, subprocess_env

DOCS = ROOT / "docs"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
DIST = PROJECT["name"]


def _name(req):
    from packaging.requirements import Requirement

    return Requirement(req).name.lower().replace("_", "-")


def _extra(name):
    """The distributions an extra of this project names, its own extras expanded."""
    from packaging.requirements import Requirement

    out = set()
    for req in PROJECT["optional-dependencies"][name]:
        r = Requirement(req)
        if r.name == DIST:
            for e in r.extras:
                out |= _extra(e)
        else:
            out.add(_name(req))
    return out


def _installed_closure(names):
    """``names`` and everything they require, as installed here (extras not taken)."""
    from packaging.requirements import Requirement

    seen, todo = set(), list(names)
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        try:
            reqs = importlib.metadata.requires(n) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for req in reqs:
            r = Requirement(req)
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                todo.append(r.name.lower().replace("_", "-"))
    return seen


def _not_in_docs_extra():
    """``(modules, distributions)``: the other extras' packages that ``pip install '.[docs]'``
    does not install (neither the core dependencies nor the docs extra require them), and
    their top-level modules."""
    core = {_name(r) for r in PROJECT["dependencies"]}
    kept = _installed_closure(core | _extra("docs"))
    other = set()
    for extra in PROJECT["optional-dependencies"]:
        other |= _extra(extra)
    dists = _installed_closure(other) - kept
    modules = set()
    for module, owners in importlib.metadata.packages_distributions().items():
        if {o.lower().replace("_", "-") for o in owners} & dists and not \
                {o.lower().replace("_", "-") for o in owners} & kept:
            modules.add(module)
    return sorted(modules), sorted(dists)


# runs sphinx-build with the imports of packages outside the docs extra failing, as they do
# in an environment made by `pip install '.[docs]'`
_BUILD = """
import importlib.machinery
import sys

BLOCKED = set(sys.argv[1].split(","))
DISTS = set(sys.argv[2].split(","))


class NotInstalled(importlib.machinery.PathFinder):
    # what an absent package looks like to `import`, to importlib.util.find_spec and to
    # importlib.metadata (Lightning and torchmetrics probe optional packages both ways)
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            return None
        return super().find_spec(name, path, target)

    @classmethod
    def find_distributions(cls, *args, **kwargs):
        for d in super().find_distributions(*args, **kwargs):
            if d.metadata["Name"].lower().replace("_", "-") not in DISTS:
                yield d


sys.meta_path[:] = [NotInstalled if f is importlib.machinery.PathFinder else f
                    for f in sys.meta_path]
from sphinx.cmd.build import main
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.slow
@pytest.mark.timeout(1200)   # sphinx-build of the manual (its subprocess may take 900 s)
def test_sphinx_build_has_no_warnings(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    blocked, dists = _not_in_docs_extra()
    assert "pyarrow" in blocked and "sphinx" not in blocked   # the simulation is real
    out = subprocess.run(
        [sys.executable, "-c", _BUILD, ",".join(blocked), ",".join(dists),
         "-W", "--keep-going", "-E", "-q", "-b", "html",
         "-d", str(tmp_path / "doctrees"), str(DOCS), str(tmp_path / "html")],
        env=subprocess_env(), capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    html = tmp_path / "html"
    # the reference is generated, not empty: the datasets' pages name their classes
    data = (html / "api" / "data.html").read_text()
    assert 'id="turboloader.data.TarDataset"' in data and "on_error" in data
    lightning = (html / "api" / "lightning.html").read_text()
    assert 'id="turboloader.lightning.TurboDataModule"' in lightning
    # the top-level page opens with the datasets, the loader and the transforms, and
    # documents every public name (the exceptions last)
    import turboloader

    top = (html / "api" / "turboloader.html").read_text()
    names = re.findall(r'<span class="pre">turboloader\.</span></span>'
                       r'<span class="sig-name descname"><span class="pre">(\w+)</span>', top)
    assert names[:3] == ["TarDataset", "ImageFolder", "TBLDataset"], names[:10]
    order = {n: names.index(n) for n in turboloader.__all__ if n not in ("__version__",
                                                                          "transforms")}
    assert order["DataLoader"] < order["TurboLoaderError"]
    assert max(order, key=order.get) in turboloader.errors.__all__
    # the seed documents' names resolve at the top level but are documented under compat
    assert "create_dataloader" not in names and "Pipeline" not in names
    assert 'href="transforms.html"' in top
    # every Markdown page is part of the site (a page missing from the toctrees is a warning)
    for page in DOCS.rglob("*.md"):
        rel = page.relative_to(DOCS).with_suffix(".html")
        if rel.name != "pypi.html" and not any(p.startswith("_") for p in rel.parts):
            assert (html / rel).exists(), rel


def test_docs_extra_installs_what_the_build_imports():
    # the Lightning page's module imports lightning: without it in the docs extra, the
    # documented build failed (-W) or left the page empty
    assert "lightning" in _extra("docs")
    assert {"sphinx", "myst-parser"} <= _extra("docs")


def test_new_guide_pages_join_the_site():
    # the guide's toctree ends with a glob, so a page another change adds under docs/guide/
    # is part of the site without editing the index (the build fails on a page in no toctree)
    index = (DOCS / "index.md").read_text()
    guide = index[index.index(":caption: User guide"):]
    assert "\nguide/*\n" in guide[:guide.index("```")]
