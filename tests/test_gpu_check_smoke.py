"""benchmarks/gpu_check.sh, the GPU device check, before it ever runs on a GPU: its --dry-run
runs the same steps on the CPU (the prerequisites, the build check, benchmarks/bench_gpu.py
with the CPU stand-in decoder) and prints a well-formed table; without libjpeg-turbo's headers
and nothing carried it stops at once saying what to carry, before importing a Python
package. No timing is asserted."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200),   # the script's runs: 900 s each
              pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")]


def run(*args, env=None, timeout=900):
    e = {**os.environ, "PYTHON": sys.executable, **(env or {})}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, env=e, cwd=ROOT)


def test_dry_run_prints_the_table(tmp_path):
    pytest.importorskip("skimage")
    pytest.importorskip("sklearn")
    r = run("--dry-run", "--skip-tests", "--", "--data", str(tmp_path / "data"),
            env={"OUT": str(tmp_path / "out")})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    for phase in ("what the run needs", "libjpeg-turbo and the build", "measurements",
                  "done: all passed"):
        assert phase in out, out
    table = (tmp_path / "out" / "gpu_table.md").read_text()
    rows = [ln for ln in table.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert [r.split(" | ")[:2] for r in rows] == [
        ["| model on device-resident batches", "train"],
        ["| CPU threads (2) + PrefetchLoader", "loader only"],
        ["| CPU threads (2) + PrefetchLoader", "train"],
        ["| decode='gpu' (1 threads)", "loader only"],
        ["| decode='gpu' (1 threads)", "train"]]
    for row in rows:
        assert row.count("|") == 8, row   # 7 columns
        assert float(row.split("|")[3]) > 0   # images/s
    # every row of decode='gpu' went through the device flow (the stand-in), none to the CPU
    assert re.search(r"device \d+, cpu 0", table), table
    assert (tmp_path / "out" / "gpu_check.log").read_text().count("measurements") == 1


def test_without_jpeg_headers_or_a_carry_it_stops_at_once_saying_what_to_carry(tmp_path):
    r = run("--dry-run", "--build", "--skip-tests",
            env={"GPU_CHECK_JPEG_SEARCH": str(tmp_path / "none"),
                 "GPU_CHECK_CARRY": str(tmp_path / "empty")}, timeout=300)
    out = r.stdout + r.stderr   # (the script tees both into one log)
    assert r.returncode == 3, out
    assert "FAILED: libjpeg-turbo's headers" in out
    assert "gpu_check.sh --prepare" in out and 'carry [".gpu_carry"]' in out
    assert "measurements" not in out   # nothing after the failed step ran
    # the cheap checks come first: no Python package was imported (torch's and
    # torchvision's imports are seconds of CPU) before the missing headers stopped it
    assert "CUDA available" not in out and not re.search(r"^python \d", out, re.M), out


def test_help_and_bad_arguments():
    r = run("--help", timeout=60)
    assert r.returncode == 0 and "--prepare" in r.stdout and "--dry-run" in r.stdout
    r = run("--frobnicate", timeout=60)
    assert r.returncode == 2 and "unknown argument" in r.stderr + r.stdout
