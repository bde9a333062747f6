"""benchmarks/bench_util.py runs on a few images against the thread backend's call structure
(it times ``SharedRunner.run_batch``): every loader epoch has batch calls, their share of
the epoch is a fraction, and the pass's first calls are the short ones of ``first_chunk``."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


@pytest.mark.slow
def test_bench_util_runs_and_times_the_calls(tmp_path, capsys):
    import bench_util
    import run

    run.prepare_data(tmp_path / "bench-n12-s0", 12, 0, False, 2)
    rows = bench_util.main(["--data-root", str(tmp_path), "--n", "12", "--reps", "1",
                            "--batch", "4"])
    out = capsys.readouterr().out
    assert "limit: 1 thread x 2" in out and "same loop on 2 real threads" in out
    assert sorted(r["pipeline"] for r in rows) == ["train", "val"]
    for r in rows:
        assert r["count"] == 12 and r["ncalls"] >= 2   # one call per stream at least
        assert 0 < r["calls"] <= 1 and r["start_ms"] >= 0 and r["limit"] > 0
        assert "decode threads" in r["threads"] and r["threads"]["decode threads"][0] == 2
