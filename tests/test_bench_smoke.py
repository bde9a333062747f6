"""Smoke test of the end-to-end benchmark suite (benchmarks/run.py): it runs the systems that
this venv can run on tiny data and writes a well-formed table. No timing is asserted."""
import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

pytest.importorskip("torchvision")
pytest.importorskip("skimage")

import run  # noqa: E402  (benchmarks/run.py)

pytestmark = pytest.mark.slow


def _rows(md, section):
    body = md.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return [ln for ln in body.splitlines() if ln.startswith("| ") and not ln.startswith("| system")]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench")
    systems = "torchvision,turboloader-tar,turboloader-folder,turboloader-threads,pillow-simd,decode-limit"
    real_status = run.setup_envs.status

    def status(name):  # pretend the pillow-simd venv failed to install
        if name == "simd":
            return "failed", "pip install pillow-simd: ERROR: simulated failure"
        return real_status(name)

    run.setup_envs.status = status
    try:
        rc = run.main(["--quick", "--n", "24", "--batch", "8", "--workers", "1",
                       "--systems", systems, "--data-root", str(tmp / "data"),
                       "--out-dir", str(tmp / "results"), "--tag", "smoke"])
    finally:
        run.setup_envs.status = real_status
    assert rc == 0
    return tmp / "results"


def test_table_is_well_formed(quick):
    md = (quick / "smoke.md").read_text()
    assert "- machine:" in md and "- command: `python benchmarks/run.py" in md
    for section in ("train:", "val:"):
        rows = _rows(md, section)
        labels = [r.split(" | ")[0] for r in rows]
        assert len(rows) == 6, rows
        for r in rows:
            assert r.count("|") == 10, r  # 9 columns
        base = next(r for r in rows if "(Pillow)" in r)
        cells = [c.strip() for c in base.strip("|").split("|")]
        assert float(cells[1]) > 0 and cells[2] == "1.00"
        assert cells[6] == "yes" and cells[7] == "yes"  # labels, exactly once
        limit = next(r for r in rows if "decode alone" in r)
        assert float(limit.split("|")[2].strip(" *")) > 0
        simd = next(r for r in rows if "pillow-simd" in r)
        assert "simulated failure" in simd
        assert any("not available yet" in r or re.search(r"\| \d+ \|", r)
                   for r in rows if "threads" in r)
        assert labels[0].startswith("| **torchvision")


def test_turboloader_rows_run_and_match_the_baseline(quick):
    res = json.loads((quick / "smoke.json").read_text())["results"]
    for key in ("turboloader-tar", "turboloader-folder"):
        r = res[key]
        # turboloader is this checkout: its rows must run (a failure here is a bug, not a skip)
        assert "error" not in r.get("pipelines", {}).get("train", {"error": 1}), r
        for pl in ("train", "val"):
            p = r["pipelines"][pl]
            assert p["images_per_s"] > 0
            assert p["labels"] == ["ok"], p["labels"]  # every sample exactly once, labelled
            assert p["output"]["shape"] == [3, 224, 224] and p["output"]["dtype"] == "float32"
            assert p["output"]["constant_images"] == 0
        assert "corrupt" in r and r["corrupt"].get("outcome")


def test_corrupt_pass_and_chart(quick):
    md = (quick / "smoke.md").read_text()
    rows = _rows(md, "Corrupt sample")
    base = next(r for r in rows if "(Pillow)" in r)
    assert "raised" in base  # Pillow refuses a truncated JPEG by default
    assert (quick / "smoke.png").stat().st_size > 1000


def test_report_flags_zero_filled_output():
    """A loader that serves constant images is marked as differing, not scored as equal."""
    ref = {"mean": [0.1, -0.3, -0.3], "std": [1.3, 1.1, 1.1], "constant_images": 0,
           "shape": [3, 224, 224], "dtype": "float32", "nonfinite": 0}
    zero = dict(ref, mean=[0.0, 0.0, 0.0], std=[0.0, 0.0, 0.0], constant_images=24)
    base = {"pipelines": {"val": {"output": ref}}}
    bad = {"pipelines": {"val": {"output": zero}}}
    ok, notes = run.output_check(bad, base, "val", None)
    assert ok is False and "24 constant images" in notes
    ok, _ = run.output_check({"pipelines": {"val": {"output": dict(ref)}}}, base, "val", None)
    assert ok is True


@pytest.mark.slow
def test_bench_video_runs():
    pytest.importorskip("av")
    import subprocess

    from helpers import subprocess_env

    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_video.py"),
                          "--videos", "2",
                          "--frames", "20", "--size", "64x48", "--frames-per-clip", "4",
                          "--rounds", "1"], capture_output=True, text=True, timeout=300,
                         env=subprocess_env())
    assert out.returncode == 0, out.stderr[-2000:]
    assert "turboloader" in out.stdout and "pyav+torchvision" in out.stdout
