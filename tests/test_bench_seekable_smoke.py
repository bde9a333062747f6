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
                "val, part: resample of the decoded window", "the restart path takes"):
        assert row in r.stdout, r.stdout
    assert "val tensors identical" in r.stdout
