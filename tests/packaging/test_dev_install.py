"""The checkout's development install (``./dev.sh``) imports from anywhere.

A fresh clone in ``/tmp/nc/turboloader`` with a script ``/tmp/nc/main.py`` beside it: the
script's folder comes first on ``sys.path``, where ``turboloader`` is the clone itself (a
folder without ``__init__.py``). setuptools' default editable install is an import hook that
runs after the path scan, so the clone was imported as an empty namespace package
(``AttributeError: module 'turboloader' has no attribute 'ImageFolder'``). dev.sh installs a
path entry instead, which finds the real package during the scan.
"""

import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from helpers import ROOT

SCRIPT = """\
import sys
import turboloader
from turboloader._native import _jpeg   # the compiled extensions, built in place
print(turboloader.__file__)
print(*(getattr(turboloader, name).__name__ for name in sys.argv[1:]))
"""


def _editable_checkout():
    """The folder this environment's turboloader is installed from in editable mode, or None.

    Looked up in the environment's site-packages only: the sdist test
    (tests/packaging/test_packaging.py) leaves an egg-info in the checkout, which comes first
    on ``sys.path`` when pytest runs from it and carries no ``direct_url.json`` (the test was
    then skipped in CI)."""
    site = sysconfig.get_paths()
    dists = list(importlib.metadata.distributions(
        name="torch-turboloader", path=list(dict.fromkeys([site["purelib"], site["platlib"]]))))
    if not dists:
        return None
    dist = dists[0]
    info = json.loads(dist.read_text("direct_url.json") or "{}")
    if not info.get("dir_info", {}).get("editable") or not info.get("url", "").startswith("file:"):
        return None
    return Path(unquote(urlparse(info["url"]).path))


@pytest.mark.slow
def test_a_script_beside_the_clone_imports_the_package(tmp_path):
    checkout = _editable_checkout()
    if checkout is None or checkout.resolve() != ROOT.resolve():
        pytest.skip("turboloader is not installed editable from this checkout "
                    "(./dev.sh test does that; CI runs it)")
    parent = tmp_path / "nc"
    parent.mkdir()
    (parent / "turboloader").symlink_to(ROOT, target_is_directory=True)   # the clone
    (parent / "main.py").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}     # the installed env
    # Each launch puts a different entry first on sys.path (the script's folder, from there
    # or from elsewhere; '' for -c): the real package's __init__.py and its extensions prove
    # the path entry won. The public names then resolve through the package's own lazy
    # lookup, the same code whichever entry found it: the first launch (the report's)
    # resolves the two it named (ImageFolder's module imports torchvision, seconds of CPU),
    # the others two lazy names of other rooms that import neither torch nor torchvision.
    for cwd, argv, names in (
            (parent, ["main.py"], ["ImageFolder", "TarDataset"]),
            (tmp_path, [str(parent / "main.py")], ["TBLFile", "JpegHeader"]),
            (parent, ["-c", SCRIPT], ["JpegHeader", "TBLFile"])):
        out = subprocess.run([sys.executable, *argv, *names], cwd=cwd, env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, (cwd, argv, out.stderr)
        path, got = out.stdout.splitlines()
        assert Path(path).resolve() == (ROOT / "turboloader" / "__init__.py").resolve()
        assert got == " ".join(names)
