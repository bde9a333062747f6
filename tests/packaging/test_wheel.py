"""The wheel people install: built by tools/build_wheel.sh (zig cc targeting glibc 2.17, a
static libjpeg-turbo linked in), checked and tagged manylinux2014 by auditwheel, installed into
a fresh venv with no compiler on PATH and away from the source tree, where it decodes and runs
a loader epoch."""

import os
import platform
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    # building libjpeg-turbo and the wheel (its subprocess may take 900 s), then a fresh venv
    pytest.mark.timeout(1800),
    pytest.mark.skipif(platform.machine() != "x86_64", reason="the script builds x86_64 wheels"),
    # one pytest process builds the wheel once (the module's fixture, a minute of CPU), beside
    # the other tests that run setup.py; the build itself writes nothing in the checkout
    pytest.mark.xdist_group("build"),
]
# what a manylinux2014 extension may link against (PEP 599's allowlist, the part we could use)
ALLOWED_LIBS = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1"}


def _build_files():
    """What a build in the checkout would write: build/, the egg-info, Cython's C, the
    in-place extensions (each path with its size and time stamp)."""
    paths = [*(ROOT / "build").rglob("*"), *ROOT.glob("*.egg-info/*"),
             *(ROOT / "turboloader" / "_native").glob("_*.c"),
             *(ROOT / "turboloader" / "_native").glob("*.so")]
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in paths if p.is_file()}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    before = _build_files()
    proc = subprocess.run(["bash", str(ROOT / "tools" / "build_wheel.sh"), str(out)],
                          capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, PYTHON=sys.executable))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    # built from a private copy of the tree: the checkout's build files are as they were (two
    # builds at once, or a build beside ./dev.sh's in-place one, share nothing there)
    assert _build_files() == before
    # auditwheel show, before the repair: nothing newer than glibc 2.17, no outside library
    assert 'consistent\nwith the following platform tag: "manylinux_2_17_x86_64"' in proc.stdout, \
        proc.stdout[-3000:]
    (whl,) = out.glob("torch_turboloader-*.whl")
    return whl


def test_wheel_is_tagged_manylinux2014(wheel):
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert wheel.name == (f"torch_turboloader-0.1.0-{py}-{py}-"
                          "manylinux2014_x86_64.manylinux_2_17_x86_64.whl"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        meta = z.read("torch_turboloader-0.1.0.dist-info/WHEEL").decode()
    tags = set(re.findall(r"^Tag: (\S+)$", meta, re.M))
    assert tags == {f"{py}-{py}-manylinux_2_17_x86_64", f"{py}-{py}-manylinux2014_x86_64"}, meta


def test_wheel_links_libjpeg_turbo_statically(wheel, tmp_path):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        z.extractall(tmp_path)
    # nothing grafted by auditwheel: libjpeg-turbo is inside the extensions, its licence beside ours
    assert not [n for n in names if ".libs/" in n], names
    assert {"torch_turboloader-0.1.0.dist-info/licenses/libjpeg-turbo/LICENSE.md",
            "torch_turboloader-0.1.0.dist-info/licenses/libjpeg-turbo/README.ijg"} <= set(names)
    for so in (tmp_path / "turboloader" / "_native").glob("*.so"):
        dyn = subprocess.run(["readelf", "-d", "-W", "--dyn-syms", str(so)], capture_output=True,
                             text=True, check=True).stdout
        needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dyn))
        assert needed <= ALLOWED_LIBS, (so.name, needed)
        # only the module's init function is exported: libjpeg's jpeg_* stay local
        exported = {line.split()[-1] for line in dyn.splitlines()
                    if re.search(r"\b(FUNC|OBJECT)\s+GLOBAL\s+DEFAULT\s+\d+\s", line)}
        assert exported == {"PyInit_" + so.name.split(".")[0]}, (so.name, exported)
        glibc = {tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_([\d.]+)", dyn)}
        assert glibc and max(glibc) <= (2, 17), (so.name, sorted(glibc))
    # the libjpeg-turbo inside carries its SIMD code (nasm's AVX2 IDCT and colour conversion:
    # thousands of ymm instructions; the shim and Cython's C around it have none)
    (jpeg,) = (tmp_path / "turboloader" / "_native").glob("_jpeg.*.so")
    asm = subprocess.run(["objdump", "-d", str(jpeg)], capture_output=True, text=True,
                         check=True).stdout
    assert asm.count("%ymm") > 1000, asm.count("%ymm")


def test_wheel_has_exactly_the_extensions_and_is_stripped(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        sizes = {n: z.getinfo(n).file_size for n in names}
    sos = [n for n in names if n.endswith(".so") and "/_native/" in n]
    modules = {n.rsplit("/", 1)[1].split(".", 1)[0] for n in sos}
    # setup.py's extension list, nothing else (no stale module of an earlier build)
    assert modules == {"_cpu", "_tar", "_jpeg", "_resample", "_colour", "_chw", "_warp",
                       "_mask", "_draws", "_fused"}, sorted(modules)
    assert len(sos) == len(modules) and max(sizes[n] for n in sos) < 3_000_000  # no debug info
    assert any(n.endswith("LICENSE") for n in names)
    # PEP 561: typed, with the extensions' stubs
    assert "turboloader/py.typed" in names and "turboloader/_native/_fused.pyi" in names


def test_wheel_runs_in_a_fresh_venv_without_build_tools(wheel, tmp_path):
    venv = tmp_path / "venv"
    py = venv / "bin" / "python"
    # without PYTHONPATH: a checkout on it (PYTHONPATH=<checkout> pytest) with an egg-info
    # there (test_packaging's sdist writes one) made pip find the package installed and skip it
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    install = ["install", "-q", "--no-deps", "--no-index", str(wheel)]
    import pip

    if tuple(int(v) for v in pip.__version__.split(".")[:2]) >= (22, 3):
        # a venv without its own pip (ensurepip's install of pip into it is seconds of CPU);
        # this environment's pip installs the wheel into it, run by the venv's interpreter
        # (--python), as the venv's own pip would
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                       timeout=300)
        cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(py)]
    else:   # a pip without --python: the venv gets its own
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        cmd = [str(py), "-m", "pip"]
    subprocess.run(cmd + install, check=True, timeout=300, env=clean)
    # torch, numpy, Pillow, ... from the test environment, after the venv's own packages
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "zz_test_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    # the check the release workflow runs on every wheel, here with no compiler on PATH
    env = {"PATH": str(venv / "bin"), "HOME": str(tmp_path)}
    proc = subprocess.run([str(py), str(ROOT / "tests" / "packaging" / "wheel_smoke.py"),
                           "--no-compiler"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "OK" in proc.stdout
