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

# the module's fixture runs benchmarks/run.py --quick (every system, a chart) in the first test
# one pytest process runs the module's benchmark once (the `quick` fixture)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.xdist_group("bench_smoke")]


def _rows(md, section):
    body = md.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return [ln for ln in body.splitlines() if ln.startswith("| ") and not ln.startswith("| system")]


def _run_with_failed_venv(venv, reason, argv):
    """``run.main(argv)`` with ``setup_envs`` reporting that ``venv`` failed to install."""
    real_status = run.setup_envs.status
    run.setup_envs.status = lambda name: ("failed", reason) if name == venv else real_status(name)
    try:
        return run.main(argv)
    finally:
        run.setup_envs.status = real_status


@pytest.fixture(scope="module")
def bench_data(tmp_path_factory):
    """The runs' data root: run.py writes its data sets there once (24 photographs, the 32
    with a truncated one; seconds of CPU each) and every run of this module reads them."""
    return tmp_path_factory.mktemp("bench-data")


@pytest.fixture(scope="module")
def quick(tmp_path_factory, bench_data):
    tmp = tmp_path_factory.mktemp("bench")
    systems = "torchvision,turboloader-tar,turboloader-folder,turboloader-threads,pillow-simd,decode-limit"
    rc = _run_with_failed_venv(  # pretend the pillow-simd venv failed to install
        "simd", "pip install pillow-simd: ERROR: simulated failure",
        ["--quick", "--n", "24", "--batch", "8", "--workers", "1", "--systems", systems,
         "--data-root", str(bench_data), "--out-dir", str(tmp / "results"), "--tag", "smoke"])
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
    import subprocess

    from helpers import subprocess_env

    av = pytest.importorskip("av")
    codec = "h264" if "libx264" in av.codecs_available else "mpeg4"
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_video.py"),
                          "--videos", "2", "--codec", codec,
                          "--frames", "20", "--size", "64x48", "--frames-per-clip", "4",
                          "--rounds", "1"], capture_output=True, text=True, timeout=300,
                         env=subprocess_env())
    assert out.returncode == 0, out.stderr[-2000:]
    assert "turboloader" in out.stdout and "pyav+torchvision" in out.stdout
    assert "decoded, ours vs pyav: 8/8 frames bit-equal" in out.stdout


@pytest.mark.slow
def test_bench_video_long_runs():
    """``--long``: one file, each system's clips in its own process (torchcodec's rows only
    where its venv exists), the clips checked bit-equal to PyAV's."""
    import subprocess

    from helpers import subprocess_env

    av = pytest.importorskip("av")
    codec = "h264" if "libx264" in av.codecs_available else "mpeg4"
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_video.py"),
                          "--long", "0.04", "--clips", "5", "--codec", codec,
                          "--size", "64x48", "--frames-per-clip", "4"],
                         capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert out.returncode == 0, out.stderr[-2000:]
    assert "equality: 4/4 clips bit-equal" in out.stdout
    rows = {line.split()[0] for line in out.stdout.splitlines() if line.strip()}
    assert {"turboloader", "pyav"} <= rows


def test_issue22_ratio_section_divides_rows_of_the_run():
    """The ratio table divides the named rows (images/s, and CPU time inverted) and judges the
    targets; cache rows (train only) leave their val cells empty."""
    def res(train, val=None, cpu=1e-3):
        pl = {"train": {"images_per_s": train, "cpu_s_per_image": cpu}}
        if val is not None:
            pl["val"] = {"images_per_s": val, "cpu_s_per_image": cpu}
        return {"pipelines": pl}

    results = {"turboloader-threads": res(2000, 1800), "dali": res(800, 1000, cpu=2e-3),
               "turboloader-cache-fill": res(1700), "turboloader-cache": res(8000, cpu=2e-4),
               "decode-limit": res(2000, 2000)}
    lines = run.ratio_section(results, ["train", "val"])
    rows = {ln.split(" | ")[0].strip("| "): [c.strip() for c in ln.strip("|").split("|")]
            for ln in lines if ln.startswith("| ") and not ln.startswith("| ratio")}
    dali = rows["turboloader threads ÷ NVIDIA DALI CPU"]
    assert dali[1:5] == ["2.50", "2.00", "1.80", "2.00"]
    assert "train ≥ 2: met" in dali[5] and "val ≥ 2: **not met**" in dali[5]
    hit = rows["cache (cache_short_side=None), epoch from the cache ÷ uncached epoch (thread "
               "backend)"]
    assert hit[1:5] == ["4.00", "5.00", "", ""] and "**not met**" in hit[5]
    fill = rows["cache (cache_short_side=None), filling epoch ÷ uncached epoch (thread backend)"]
    assert fill[1] == "0.85" and "met" in fill[5] and "not met" not in fill[5]
    assert not any("seekable" in k for k in rows)  # no seekable row was run


@pytest.mark.slow
def test_issue22_rows_run(tmp_path, bench_data):
    """The seekable and cache rows run on tiny data (the quick run's) and deliver every
    sample once; a DALI venv that failed to install shows its reason in the row."""
    rc = _run_with_failed_venv(
        "dali", "pip install nvidia-dali-cuda120==2.4.0: ERROR: simulated failure",
        ["--quick", "--n", "24", "--batch", "8", "--workers", "1",
         "--systems", "turboloader-threads,dali,turboloader-seekable,"
         "turboloader-cache-fill,turboloader-cache,decode-limit",
         "--cache-short-side", "0,128", "--cache-epochs", "2",
         "--data-root", str(bench_data), "--out-dir", str(tmp_path), "--tag", "i22"])
    assert rc == 0
    md = (tmp_path / "i22.md").read_text()
    res = json.loads((tmp_path / "i22.json").read_text())["results"]
    for key in ("turboloader-seekable", "turboloader-cache-fill", "turboloader-cache",
                "turboloader-cache-fill-s128", "turboloader-cache-s128"):
        pls = res[key]["pipelines"]
        assert set(pls) == ({"train"} if "cache" in key else {"train", "val"}), key
        for p in pls.values():
            assert p["labels"] == ["ok"] and p["images_per_s"] > 0, (key, p)
    assert len(res["turboloader-cache"]["pipelines"]["train"]["epochs"]) == 2
    assert "simulated failure" in md and "seekable shards: `turboloader convert" in md
    ratios = md.split("## Ratios of issue 22", 1)[1].split("\n## ", 1)[0]
    assert "seekable shards ÷ full-decode limit" in ratios
    assert "Seekable vs original shards, val output" in ratios and ": identical." in ratios
    for side in ("None", "128"):
        assert f"cache (cache_short_side={side}), epoch from the cache ÷ uncached" in ratios
    assert "'cache_short_side': 128" in res["turboloader-cache-s128"]["pipelines"]["train"]["note"]
    dali = next(ln for ln in ratios.splitlines() if "NVIDIA DALI" in ln)
    assert "train ≥ 2: not measured" in dali  # its venv failed: the target is not judged
    hits = res["turboloader-cache"]["pipelines"]["train"]["note"]
    assert re.search(r"cache over this loader's epochs: [1-9]\d* hits", hits), hits


@pytest.mark.slow
def test_datago_row_runs(tmp_path):
    """datago's val row (benchmarks/.venv-datago) delivers every sample once, labelled, and
    matches the baseline's val images (its Lanczos3 resize is the only difference); its train
    row says why it is not run; the truncated JPEG's fate is reported."""
    if run.setup_envs.status("datago")[0] != "ok":
        pytest.skip("benchmarks/.venv-datago not set up (python benchmarks/setup_envs.py datago)")
    rc = run.main(["--quick", "--n", "16", "--batch", "8", "--workers", "1",
                   "--systems", "torchvision,datago", "--data-root", str(tmp_path / "data"),
                   "--out-dir", str(tmp_path), "--tag", "dg"])
    assert rc == 0
    res = json.loads((tmp_path / "dg.json").read_text())["results"]
    val = res["datago"]["pipelines"]["val"]
    assert val["labels"] == ["ok"] and val["images_per_s"] > 0, val
    assert val["output"]["shape"] == [3, 224, 224] and val["output"]["dtype"] == "float32"
    assert "crop_and_resize" in val["note"]
    assert "not implemented" in res["datago"]["pipelines"]["train"]["error"]
    md = (tmp_path / "dg.md").read_text()
    row = next(r for r in _rows(md, "val:") if r.startswith("| datago"))
    assert "differs" not in row, row  # thumbnails within 0.1 of torchvision's, channel stats too
    mad = float(re.search(r"val thumbs abs Δ median ([0-9.]+)", row).group(1))
    assert mad < 0.03, row  # Lanczos3 vs bilinear: well under two 8-bit levels
    train = next(r for r in _rows(md, "train:") if r.startswith("| datago"))
    assert "no random crop" in train, train
    corrupt = next(r for r in _rows(md, "Corrupt sample") if r.startswith("| datago"))
    assert re.search(r"raised|skipped|delivered", corrupt), corrupt


def test_bench_cache_breakdown_rows(tmp_path, capsys):
    """``bench_cache.py --breakdown`` times a filling epoch's stages against the uncached
    batch call on the same images: every stage per ``cache_short_side`` (the resample rows
    only where an image is resampled), the fill the sum of its two steps. No timing is
    asserted beyond being positive."""
    import bench_cache

    rows = bench_cache.main(["--breakdown", "--n", "6", "--rounds", "1",
                             "--short-sides", "0,160", "--workdir", str(tmp_path)])
    by = {(stage.split(" (")[0], side): us for stage, side, us in rows}
    assert by[("uncached batch call", "")] > 0
    for side in ("full size", 160):
        miss, crop = by[("the cache's miss path", side)], by[("batch call from the stored "
                                                                "images", side)]
        assert miss > 0 and crop > 0
        assert by[("fill", side)] == pytest.approx(miss + crop)
        assert by[("fill floor", side)] > 0
    assert ("resample to the short side, warm memory", 160) in by
    assert ("resample to the short side, warm memory", "full size") not in by
    out = capsys.readouterr().out
    assert "| stage | cache_short_side | CPU us/image | uncached ÷ this |" in out


def test_sampler_reads_pss_only_outside_timed_epochs():
    """PSS (a page-table walk that costs the system being timed) is not read by the periodic
    samples of a timed epoch, but the sample at a step's end reads it; RSS is always read."""
    import os
    import types
    h = types.SimpleNamespace(proc=types.SimpleNamespace(pid=os.getpid()), peaks={}, phase="train")
    s = run.Sampler()
    s.active, s.timed = h, True
    s.sample(pss=not s.timed)  # what run() does during a timed epoch
    assert h.peaks["train"]["rss"] > 0 and h.peaks["train"]["pss"] == 0
    s.sample(h)  # the end of the step
    assert h.peaks["train"]["pss"] > 0
