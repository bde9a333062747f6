"""benchmarks/bench_resample_ab.py runs end to end on a few images: two copies of this tree's
resampler, every kind and part timed, the outputs checked equal (exit status 0)."""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from turboloader._native import _resample

Image = pytest.importorskip("PIL.Image")

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow   # fresh interpreters
@pytest.mark.parametrize("kind,channels", [("val", 3), ("train", 3), ("resize", 3),
                                           ("resize", 1), ("resize", 4)])
def test_bench_resample_ab_runs(tmp_path, kind, channels):
    rng = np.random.default_rng(0)
    data = tmp_path / "data" / "class_0"
    data.mkdir(parents=True)
    for i, (h, w) in enumerate([(375, 500), (333, 250), (260, 300)]):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(data / f"{i}.jpg")
    builds = []
    for label in ("a", "b"):
        d = tmp_path / label
        d.mkdir()
        shutil.copy(_resample.__file__, d)
        builds += ["--build", f"{label}={d}"]
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_resample_ab.py"),
                        "--data", str(tmp_path / "data"), "--passes", "1", "--kind", kind,
                        "--channels", str(channels), *builds], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    for part in ("full", "horizontal"):
        line = next(ln for ln in r.stdout.splitlines()
                    if ln.startswith(f"{kind} {part}, 3 images, {channels} channels"))
        assert "speed ratio to a: a 1.000  b " in line, line
