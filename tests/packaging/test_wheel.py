"""The wheel people install: built by tools/build_wheel.sh, repaired by auditwheel so that it
carries its own libjpeg-turbo, installed into a fresh venv with no compiler on PATH and away
from the source tree, where it decodes and runs a loader epoch."""

import glob
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(["bash", str(ROOT / "tools" / "build_wheel.sh"), str(out)],
                          capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, PYTHON=sys.executable))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (whl,) = out.glob("torch_turboloader-*manylinux*.whl")
    return whl


def test_wheel_bundles_libjpeg_and_is_stripped(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        sizes = {n: z.getinfo(n).file_size for n in names}
    libs = [n for n in names if n.startswith("torch_turboloader.libs/libjpeg")]
    assert libs, names
    sos = [n for n in names if n.endswith(".so") and "/_native/" in n]
    modules = {n.rsplit("/", 1)[1].split(".", 1)[0] for n in sos}
    # setup.py's extension list, nothing else (no stale module of an earlier build)
    assert modules == {"_cpu", "_tar", "_jpeg", "_resample", "_colour", "_chw", "_warp",
                       "_fused"}, sorted(modules)
    assert len(sos) == len(modules) and max(sizes[n] for n in sos) < 3_000_000  # no debug info
    assert any(n.endswith("LICENSE") for n in names)


def test_wheel_runs_in_a_fresh_venv_without_build_tools(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, timeout=300)
    # torch, numpy, Pillow, ... from the test environment, after the venv's own packages
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "zz_test_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    script = tmp_path / "check.py"
    script.write_text(r'''
import io, os, re, shutil, tarfile, sys
import numpy as np
from PIL import Image
import turboloader
from turboloader import transforms as T
assert "/venv/" in turboloader.__file__ and "/work/" not in turboloader.__file__, turboloader.__file__
assert shutil.which("cc") is None and shutil.which("gcc") is None
buf = io.BytesIO()
Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 96, 3), np.uint8)).save(buf, "JPEG")
data = buf.getvalue()
img = turboloader.decode_jpeg(data)
assert np.array_equal(img, np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))
maps = open("/proc/self/maps").read()
jpeg_libs = set(re.findall(r"(\S*libjpeg\S*)", maps))
# ours is the bundled copy (Pillow maps its own bundled one too); never the system's
assert any("torch_turboloader.libs" in p for p in jpeg_libs), jpeg_libs
assert not any(p.startswith(("/usr/", "/lib")) for p in jpeg_libs), jpeg_libs
with tarfile.open("s.tar", "w") as tar:
    for i in range(10):
        for name, blob in ((f"{i:03d}.jpg", data), (f"{i:03d}.cls", str(i).encode())):
            info = tarfile.TarInfo(name); info.size = len(blob); tar.addfile(info, io.BytesIO(blob))
ds = turboloader.TarDataset("s.tar", T.Compose([T.RandomResizedCrop(32), T.ToTensor()]))
labels = sorted(y for _, ys in turboloader.DataLoader(ds, 4, num_workers=2) for y in ys.tolist())
assert labels == list(range(10)), labels
print("OK", sorted(jpeg_libs))
''')
    env = {"PATH": str(venv / "bin") + ":/usr/bin/env-does-not-matter", "HOME": str(tmp_path)}
    proc = subprocess.run([str(py), str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "OK" in proc.stdout
