"""benchmarks/bench_hotpath.py runs on a few images against the current call structure (it
broke silently once when the step stopped calling ``Plan.run_batch``): every part is printed,
and "Python per image" is what the thread ran less the calls that release the GIL."""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


@pytest.mark.parametrize("pipeline", ["train", "val"])
def test_bench_hotpath_runs_and_adds_up(tmp_path, monkeypatch, capsys, pipeline):
    import bench_hotpath
    import bench_loader

    monkeypatch.setattr(bench_loader, "HERE", tmp_path)   # its data in tmp, not the checkout
    assert bench_hotpath.main(["--n", "6", "--batch", "4", "--rounds", "1",
                               "--pipeline", pipeline]) == 0
    out = capsys.readouterr().out
    part = {}
    for key, label in (("run", "native batch call"), ("headers", "JPEG headers"),
                       ("pread", "reading"), ("total", "total CPU per image"),
                       ("python", "Python per image"), ("gather", "gather, Python"),
                       ("step", "sample step, Python"), ("files", "snapshot's file calls")):
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(label))
        part[key] = float(re.findall(r"-?\d+\.\d+", line)[-1])
    # the snapshot written at the end of the pass: its file calls timed apart
    assert part["run"] > 0 and part["pread"] > 0 and part["headers"] > 0 and part["files"] > 0
    # the no-GIL calls were timed (each wrapper was called) and the rest is Python
    assert abs(part["total"] - part["run"] - part["headers"] - part["pread"] - part["files"]
               - part["python"]) < 0.4   # six rounded figures
