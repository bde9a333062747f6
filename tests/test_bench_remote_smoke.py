"""benchmarks/bench_remote.py runs end to end on a few images: moto's S3 behind the
throttling proxy, every turboloader row measured (no timing is asserted)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(900)  # streaming's rows too where its venv exists (not on CI)
def test_bench_remote_runs(tmp_path):
    pytest.importorskip("moto.server")
    pytest.importorskip("skimage")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_remote.py"),
                        "--n", "24", "--shards", "3", "--batch", "8", "--epochs", "2",
                        "--settings", "20:50", "--systems", "local,remote,cache,streaming",
                        "--workdir", str(tmp_path)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    for row in ("| turboloader local |", "| turboloader remote (streamed) |",
                "| turboloader + ShardCache", "## 20 ms per request, 50 MB/s per connection"):
        assert row in out, out
    rows = [ln for ln in out.splitlines() if ln.startswith("| turboloader")]
    assert len(rows) == 4 and not any("not run" in ln for ln in rows), out
    assert "| turboloader local, again after the remote rows |" in out, out
    # each turboloader row's CPU and page faults per image, one figure per epoch
    table = [ln for ln in out.splitlines() if ln.startswith(("| local |", "| local again |",
                                                             "| remote 20:50 |", "| cache 20:50 |"))]
    assert len(table) == 4, out
    assert all(ln.split("|")[3].count("/") == 1 and "?" not in ln for ln in table), out
    # streaming's row: measured where its venv exists (benchmarks/setup_envs.py streaming),
    # else a row saying how to make it
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import setup_envs

    row = [ln for ln in out.splitlines() if ln.startswith("| mosaicml streaming local")]
    assert len(row) == 1, out
    if setup_envs.status("streaming")[0] == "ok":
        assert "not run" not in row[0], out
        remote = [ln for ln in out.splitlines() if ln.startswith("| mosaicml streaming remote")]
        assert len(remote) == 1 and "not run" not in remote[0], out
    else:
        assert "not run" in row[0] and "setup_envs.py streaming" in row[0], out
