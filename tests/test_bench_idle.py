"""benchmarks/bench_idle.py: the idle accounting on a timeline whose answer is known, and a
run of the tool on a few images (slow)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_idle_by_region_counts_the_cores_no_thread_wants():
    import bench_idle

    kinds = {1: "main", 2: "decode threads", 3: "runner helper"}
    segs = {
        1: [(0.0, 1.0, "S")],                                   # the consumer sleeps throughout
        2: [(0.0, 0.1, "Q"), (0.1, 1.0, "R")],                  # queued, then runs to the end
        3: [(0.0, 0.2, "S"), (0.2, 0.5, "R"), (0.5, 0.6, "S"),  # the helper works in each call
            (0.6, 0.7, "Q"), (0.7, 0.9, "R"), (0.9, 1.0, "S")],
    }
    r = bench_idle.idle_by_region(0.0, 1.0, [(0.2, 0.5), (0.6, 0.9)], segs, kinds.get)
    approx = pytest.approx
    assert r["first"] == 0.2 and r["last"] == 0.9 and r["calls"] == 2
    assert dict(r["dur"]) == approx({"start": 0.2, "call": 0.6, "gap": 0.1, "tail": 0.1})
    # one thread wants a core before the first call, between the calls and after the last:
    # one core idle then; during the calls both are wanted (a queued thread wants one too)
    assert dict(r["idle"]) == approx({"start": 0.2, "gap": 0.1, "tail": 0.1})
    # on a quiet machine the queued 0.1 s at the start would not have lasted
    assert dict(r["scaled"]) == approx({"start": 0.1, "gap": 0.1, "tail": 0.1})
    assert sum(r["cpu"].values()) == approx(0.9 + 0.5)
    assert r["who"][("gap", "decode threads")] == approx(0.1)
    assert r["kinds"]["runner helper"]["Q"] == approx(0.1)
    assert r["kinds"]["main"]["S"] == approx(1.0)


@pytest.mark.slow
def test_bench_idle_runs(tmp_path, capsys):
    import bench_idle
    import run

    run.prepare_data(tmp_path / "bench-n12-s0", 12, 0, False, 2)
    bench_idle.main(["--data-root", str(tmp_path), "--n", "12", "--epochs", "1", "--batch", "4",
                     "--pause", "0", "--no-perf"])
    out = capsys.readouterr().out
    assert "train epoch 1: " in out and "val epoch 1: " in out and "util" in out
