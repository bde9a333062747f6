"""benchmarks/bench_shard_open.py runs on a few small shards, prints every row, and checks
that the native and Python groupings (and the two label reads) agree."""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_bench_shard_open_runs(capsys):
    import bench_shard_open

    assert bench_shard_open.main(["--shards", "2", "--samples", "20", "--reps", "2"]) == 0
    out = capsys.readouterr().out
    assert "2 shards, 40 samples" in out
    row = {}
    for label in ("index", "grouping, native", "grouping, Python", "labels, one call",
                  "labels, per member"):
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(label))
        row[label] = float(re.findall(r"-?\d+\.\d+", line)[-1])
    # rows timed directly are positive (the grouping rows are differences of two timings)
    assert row["index"] > 0 and row["labels, one call"] > 0 and row["labels, per member"] > 0
