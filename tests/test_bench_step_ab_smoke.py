"""benchmarks/bench_step_ab.py runs end to end on a few images: two copies of this tree's
fused step (with the resampler and output kernels beside them), both kinds, per batch and per
image, with a colour op, the outputs checked equal (exit status 0)."""

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.bench_ab import build_args, photo_folder
from turboloader._native import _chw, _colour, _fused, _resample

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow   # fresh interpreters
@pytest.mark.parametrize("kind", ["train", "val"])
@pytest.mark.parametrize("per_image,jitter", [(False, False), (True, False), (True, True)],
                         ids=["batch", "per-image", "per-image-jitter"])
def test_bench_step_ab_runs(tmp_path, kind, per_image, jitter):
    photo_folder(tmp_path / "data")
    builds = build_args(tmp_path, (_fused, _resample, _chw, _colour))
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_step_ab.py"),
                        "--data", str(tmp_path / "data"), "--rounds", "1", "--batch", "2",
                        "--kind", kind, *(["--per-image"] if per_image else []),
                        *(["--jitter"] if jitter else []), *builds],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    head = f"{kind}{' + jitter' if jitter else ''} step, 3 images"
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith(head))
    assert "images/s ratio to a: a 1.000  b " in line, line
