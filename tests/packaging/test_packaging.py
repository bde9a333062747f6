"""The package as people install it: its own distribution name, an sdist that builds without
a C toolchain and ships no orphan tests, the command line's --version and ``python -m``,
and install hints (typed errors) for every optional dependency that is missing."""

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import turboloader
from turboloader.errors import DISTRIBUTION, MissingDependencyError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_version_and_python_m():
    for cmd in (["-m", "turboloader", "--version"], ["-m", "turboloader.tools.cli", "--version"]):
        proc = subprocess.run([sys.executable, *cmd], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0
        assert proc.stdout.strip() == f"turboloader {turboloader.__version__} (distribution " \
                                      f"{DISTRIBUTION})"
    proc = subprocess.run([sys.executable, "-m", "turboloader", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "convert" in proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)   # the sdist build (300 s) and an import check (120 s)
@pytest.mark.xdist_group("build")   # setup.py writes the checkout's egg-info (test_wheel.py)
def test_sdist_builds_without_toolchain_or_headers(tmp_path):
    env = dict(os.environ, CC=str(tmp_path / "no-cc"), TURBOLOADER_JPEG_ROOT=str(tmp_path / "x"),
               PATH=os.path.dirname(sys.executable))
    proc = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sdist,) = tmp_path.glob("torch_turboloader-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = [n.split("/", 1)[1] for n in tar.getnames() if "/" in n]
    assert "LICENSE" in names and "README.md" in names and "docs/tbl-format.md" in names
    assert "turboloader/_native/jpeg_shim.c" in names and "turboloader/_native/_jpeg.pyx" in names
    assert "turboloader/_native/jpeg_huffman.c" in names   # the own Huffman decoder builds too
    # PEP 561: the package says it is typed, and the extensions' stubs come with it
    assert "turboloader/py.typed" in names and "turboloader/_native/_fused.pyi" in names
    assert not any(n.startswith(("tests/", "benchmarks/")) or n.endswith(".so") for n in names)
    assert not any(n.startswith("turboloader/_native/_") and n.endswith(".c") for n in names)


def _without(modules, code):
    """Run ``code`` in a fresh interpreter where importing ``modules`` fails."""
    stub = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules)
    return subprocess.run([sys.executable, "-c", stub + code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_s3_without_boto3_names_the_extra():
    proc = _without(["boto3", "botocore", "botocore.config", "botocore.exceptions"], """
from turboloader.errors import MissingDependencyError
from turboloader.io.remote import open_remote
try:
    open_remote("s3://bucket/shard-0000.tar", retries=0).read(1)
except MissingDependencyError as exc:
    assert isinstance(exc, ImportError)
    print("HINT", exc)
""")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "HINT" in proc.stdout and "pip install 'torch-turboloader[remote]'" in proc.stdout


@pytest.mark.slow
def test_lightning_missing_names_the_extra():
    proc = _without(["lightning", "lightning.pytorch", "pytorch_lightning"], """
from turboloader.errors import MissingDependencyError
try:
    import turboloader.lightning
except MissingDependencyError as exc:
    print("HINT", exc)
""")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "pip install 'torch-turboloader[lightning]'" in proc.stdout


@pytest.mark.slow
def test_progress_bar_without_tqdm_falls_back():
    proc = _without(["tqdm", "tqdm.auto"], """
import torch, turboloader
loader = turboloader.DataLoader(torch.utils.data.TensorDataset(torch.arange(8)), 4,
                                progress=True)
print("N", sum(len(b[0]) for b in loader))
""")
    assert proc.returncode == 0 and "N 8" in proc.stdout, proc.stderr[-2000:]


def test_require_is_typed():
    from turboloader.errors import require

    with pytest.raises(MissingDependencyError, match=r"\[extra\]"):
        require("no_such_module_here", extra="extra", feature="a feature")
