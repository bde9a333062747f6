"""benchmarks/bench_seekable.py runs end to end on a few images: every table is printed and the
val tensors from the seekable shards equal those from the originals (exit status 0)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(900)   # its subprocess may take 600 s
def test_bench_seekable_runs(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_seekable.py"),
                        "--n", "8", "--repeat", "1", "--batch", "4", "--short-sides", "128",
                        "--finest", "--workdir", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    for row in ("convert --seekable", "train: fused decode+crop+resize, seekable",
                "short side 128, q90, seekable", "val: seekable shards",
                "seekable, 1 MCU per interval", "val, part: window decode only, seekable",
                "val, part: resample of the decoded window", "the restart path takes",
                "share of the image's MCUs entropy-decoded"):
        assert row in r.stdout, r.stdout
    assert "val tensors identical" in r.stdout
    # the MCUs a window entropy-decodes: never more on the seekable files than on the
    # originals, never less than the window's own MCUs
    for pipeline in ("train", "val"):
        line = next(x for x in r.stdout.splitlines()
                    if x.startswith(f"{pipeline} windows, share of the image's MCUs"))
        nums = [float(t.rstrip(",)")) for t in line.replace("(", " ").split()
                if t.rstrip(",)").replace(".", "", 1).isdigit() and "." in t]
        original, seekable, finest, best = nums
        assert original >= seekable >= best > 0, line
        assert original >= finest >= best, line
