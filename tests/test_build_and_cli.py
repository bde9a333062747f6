"""The build's dependency check, the command line and the demo, run as a user would."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # two setup.py runs in fresh interpreters
@pytest.mark.xdist_group("build")   # setup.py in the checkout (test_wheel.py)
def test_setup_names_the_package_to_install_when_libjpeg_turbo_is_missing(tmp_path):
    env = dict(os.environ, TURBOLOADER_JPEG_ROOT=str(tmp_path / "nowhere"))
    # metadata needs no libjpeg (an sdist builds without a toolchain) ...
    meta = subprocess.run([sys.executable, "setup.py", "--name"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert meta.returncode == 0 and meta.stdout.strip() == "torch-turboloader", meta.stderr
    # ... building the extensions does, and says exactly what to install
    proc = subprocess.run([sys.executable, "setup.py", "build_ext", "-b", str(tmp_path / "b"),
                           "-t", str(tmp_path / "t")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    for package in ("libjpeg62-turbo-dev", "libjpeg-turbo-devel", "brew install jpeg-turbo",
                    "conda-forge libjpeg-turbo"):
        assert package in proc.stderr, proc.stderr
    assert str(tmp_path / "nowhere") in proc.stderr


def test_cli_help_and_bad_command():
    ok = subprocess.run([sys.executable, "-m", "turboloader.tools.cli", "demo", "--help"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "RandomResizedCrop" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "turboloader.tools.cli", "nonsense"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


@pytest.mark.slow
def test_demo_runs_and_agrees_with_torchvision():
    from turboloader.tools.demo import run_demo

    lines = []
    assert run_demo(num_images=40, seed=3, workers=2, batch_size=16, epochs=1,
                    print=lines.append) == 0
    report = "\n".join(lines)
    assert "torchvision ImageFolder + v2, torch DataLoader" in report and "1.00x" in report
    assert "turboloader TarDataset, thread backend" in report
    assert "40 samples, 40 cache hits, 0 misses" in report  # epoch 2 decodes nothing
    assert "exactly once" in report and "FAILED" not in report


@pytest.mark.slow
def test_synthetic_jpegs_are_deterministic_and_imagenet_sized():
    from PIL import Image
    import io

    from turboloader.tools.synthetic import synthetic_jpegs

    a = synthetic_jpegs(6, seed=7)
    assert a == synthetic_jpegs(6, seed=7)
    assert a != synthetic_jpegs(6, seed=8)
    for data, label in a:
        img = Image.open(io.BytesIO(data))
        assert img.format == "JPEG" and img.mode == "RGB"
        assert 250 <= min(img.size) <= 500 and 0 <= label < 10
        assert np.asarray(img).std() > 10  # textured, not flat


# one interpreter imports the third-party packages (torch alone is seconds of CPU), then forks a
# child per module, in which nothing of turboloader has been imported yet
_IMPORT_FIRST = """
import os, sys, traceback
import numpy, PIL.Image, torch, torchvision
assert not [m for m in sys.modules if m.split(".")[0] == "turboloader"]
failed = 0
for name, module in (line.split() for line in sys.argv[1:]):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            import turboloader
            getattr(turboloader, name)
            __import__(module)
            code = 0
        except BaseException:
            os.write(w, traceback.format_exc()[-2000:].encode())
            code = 1
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        err = f.read().decode()
    status = os.waitpid(pid, 0)[1]
    if status != 0:
        failed += 1
        print(f"{module} first (status {status}): {err}")
print("imported first:", len(sys.argv) - 1 - failed)
"""


@pytest.mark.slow
def test_every_public_module_imports_first_in_a_fresh_interpreter():
    # Lazy names resolve their module on first use, in whatever order users touch them: a
    # circular import between modules shows up only when one of them is imported first.
    import turboloader

    modules = sorted(set(turboloader._LAZY.values()))
    pairs = [f"{next(n for n, m in turboloader._LAZY.items() if m == module)} {module}"
             for module in modules]
    proc = subprocess.run([sys.executable, "-c", _IMPORT_FIRST, *pairs], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith(f"imported first: {len(modules)}"), proc.stdout[-4000:]
