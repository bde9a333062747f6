"""benchmarks/bench_resample_ab.py runs end to end on a few images: two copies of this tree's
resampler, every kind and part timed, the outputs checked equal (exit status 0)."""

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.bench_ab import build_args, photo_folder
from turboloader._native import _resample

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow   # fresh interpreters
@pytest.mark.parametrize("kind,channels", [("val", 3), ("train", 3), ("resize", 3),
                                           ("resize", 1), ("resize", 4)])
def test_bench_resample_ab_runs(tmp_path, kind, channels):
    photo_folder(tmp_path / "data")
    builds = build_args(tmp_path, (_resample,))
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_resample_ab.py"),
                        "--data", str(tmp_path / "data"), "--passes", "1", "--kind", kind,
                        "--channels", str(channels), *builds], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    for part in ("full", "horizontal"):
        line = next(ln for ln in r.stdout.splitlines()
                    if ln.startswith(f"{kind} {part}, 3 images, {channels} channels"))
        assert "speed ratio to a: a 1.000  b " in line, line
