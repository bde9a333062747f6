"""``convert --max-side`` (issue 22.4): images whose long side is longer are shrunk to it and
re-encoded; smaller ones are copied byte for byte; combined with --max-short-side and
--seekable."""

import io
import tarfile

import numpy as np
from PIL import Image

from turboloader.tools.cli import main
from turboloader.tools.convert import _shrunk_size, convert


def _jpeg(h, w, seed=0):
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (h, w, 3), np.uint8)).save(buf, "JPEG", quality=85)
    return buf.getvalue()


def _members(path):
    with tarfile.open(path) as t:
        return {m.name[:-4]: t.extractfile(m).read() for m in t.getmembers()
                if m.name.endswith(".jpg")}


def test_shrunk_size_rules():
    assert _shrunk_size(120, 170, None, 100) == (70, 100)
    assert _shrunk_size(170, 120, None, 100) == (100, 70)
    assert _shrunk_size(90, 60, None, 100) == (90, 60)           # never enlarged
    assert _shrunk_size(400, 600, 200, 250) == (166, 250)        # short side, then the cap
    assert _shrunk_size(400, 600, 200, None) == (200, 300)
    assert _shrunk_size(1, 5000, None, 100) == (1, 100)          # never 0


def test_max_side_through_the_command_line(tmp_path):
    root = tmp_path / "folder" / "a"
    root.mkdir(parents=True)
    big, small = _jpeg(120, 170, 1), _jpeg(50, 60, 2)
    (root / "big.jpg").write_bytes(big)
    (root / "small.jpg").write_bytes(small)
    out = tmp_path / "out.tar"
    assert main(["convert", str(tmp_path / "folder"), str(out), "--max-side", "100",
                 "--quality", "80", "--no-shuffle"]) == 0
    m = _members(out)
    assert m["a/small"] == small
    with Image.open(io.BytesIO(m["a/big"])) as im:
        assert im.size == (100, 70)


def test_max_side_with_seekable(tmp_path):
    root = tmp_path / "folder" / "a"
    root.mkdir(parents=True)
    (root / "big.jpg").write_bytes(_jpeg(300, 200, 3))
    report = convert(tmp_path / "folder", tmp_path / "out.tar", max_side=160, seekable=True,
                     shuffle=False)
    assert report.reencoded == 1 and report.seekable == 1
    data = _members(tmp_path / "out.tar")["a/big"]
    assert b"\xff\xdd" in data[:data.index(b"\xff\xda")]
    with Image.open(io.BytesIO(data)) as im:
        assert im.size == (106, 160)
