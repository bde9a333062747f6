"""Decode work is bounded: a small progressive JPEG with a large flat image and many scans
(scans x coefficient blocks) or a progressive image beyond max_pixels / 4 is a DecodeError
that names the limit and how to raise it, within a time and memory bound; ordinary
progressive photos are unaffected."""

import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import turboloader
from turboloader.errors import DecodeError

ROOT = Path(__file__).resolve().parents[2]


def split_scans(data: bytes):
    """(head, [scan segments], tail): a JPEG cut at its SOS markers (tables between scans
    stay with the scan after them)."""
    i, segs, head_end = 2, [], None
    while i < len(data):
        assert data[i] == 0xFF, i
        m = data[i + 1]
        if m == 0xD9:
            return data[:head_end], segs, data[i:]
        n = int.from_bytes(data[i + 2:i + 4], "big")
        if m == 0xDA:
            j = i + 2 + n
            while not (data[j] == 0xFF and data[j + 1] not in (0x00, *range(0xD0, 0xD8))):
                j += 1
            head_end = i if head_end is None else head_end
            segs.append(data[i:j])
            i = j
        elif head_end is not None:
            segs.append(data[i:i + 2 + n])
            i += 2 + n
        else:
            i += 2 + n
    raise ValueError("no EOI marker")


def many_scans(side, extra):
    """A flat greyscale progressive JPEG of side x side whose last scan repeats ``extra``
    times: a few dozen KB that costs (scans x blocks) to decode."""
    buf = io.BytesIO()
    Image.new("L", (side, side), 128).save(buf, "JPEG", progressive=True, quality=75)
    head, segs, tail = split_scans(buf.getvalue())
    return head + b"".join(segs) + segs[-1] * extra + tail


def with_size(data: bytes, width, height):
    """The same JPEG with its SOF's claimed dimensions changed."""
    b = bytearray(data)
    i = 2
    while True:
        m, n = b[i + 1], int.from_bytes(b[i + 2:i + 4], "big")
        if m in (0xC0, 0xC1, 0xC2):
            b[i + 5:i + 7] = height.to_bytes(2, "big")
            b[i + 7:i + 9] = width.to_bytes(2, "big")
            return bytes(b)
        i += 2 + n


@pytest.mark.slow
def test_many_scans_hit_the_work_budget_in_bounded_time_and_memory(tmp_path):
    path = tmp_path / "scans.jpg"
    path.write_bytes(many_scans(4096, 400))
    assert path.stat().st_size < 150_000
    code = textwrap.dedent(f"""
        import time
        import turboloader
        data = open({str(path)!r}, "rb").read()
        t = time.perf_counter()
        try:
            turboloader.decode_jpeg(data)
        except turboloader.DecodeError as exc:
            print("ERR", exc)
        print("TIME", time.perf_counter() - t)
        hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0]
        print("RSS_MB", int(hwm.split()[1]) // 1024)  # peak RSS of this process (exec resets it)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "scan-blocks of work" in out and "raise max_pixels" in out
    scans = int(out.split(" scans x ")[0].rsplit("(", 1)[1])
    assert scans <= 100  # stopped at the budget (max_pixels / 8 over 262144 blocks: 86)
    assert float(out.split("TIME")[1].split()[0]) < 30  # generous: a loaded 2-core machine
    assert int(out.split("RSS_MB")[1].split()[0]) < 400


def test_raising_max_pixels_raises_the_budget():
    data = many_scans(1024, 60)  # 16384 blocks x ~70 scans ~ 1.1 M scan-blocks
    with pytest.raises(DecodeError, match="scan-blocks"):
        turboloader.decode_jpeg(data, max_pixels=5_000_000)  # budget 0.625 M
    img = turboloader.decode_jpeg(data, max_pixels=80_000_000)
    assert img.shape == (1024, 1024, 3) and int(img.std()) == 0
    assert turboloader.decode_jpeg(data, max_pixels=None).shape == (1024, 1024, 3)


def test_progressive_pixel_limit_is_a_quarter_of_max_pixels():
    buf = io.BytesIO()
    Image.new("L", (64, 64), 100).save(buf, "JPEG", progressive=True)
    huge = with_size(buf.getvalue(), 13000, 13000)  # 169 M pixels < the default max_pixels
    with pytest.raises(DecodeError, match="progressive JPEGs.*raise max_pixels"):
        turboloader.decode_jpeg(huge)
    with pytest.raises(DecodeError, match="progressive"):
        turboloader.decode_resized_crop(huge, 0, 0, 13000, 13000, (32, 32))
    with pytest.raises(DecodeError, match="progressive"):
        turboloader.decode_jpeg(with_size(buf.getvalue(), 8000, 8000))
    base = io.BytesIO()
    Image.new("L", (64, 64), 100).save(base, "JPEG")  # baseline: only the plain limit applies
    with pytest.raises(DecodeError) as info:  # (strict: its data ends after 64 rows)
        turboloader.decode_jpeg(with_size(base.getvalue(), 8000, 8000), strict=True)
    assert "progressive" not in str(info.value)


def test_ordinary_progressive_photos_decode_like_pillow():
    rng = np.random.default_rng(0)
    for h, w, sub in ((333, 500, 2), (1200, 1800, 0)):
        arr = rng.integers(0, 256, (h // 8, w // 8, 3), np.uint8).repeat(8, 0).repeat(8, 1)
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, "JPEG", progressive=True, quality=90, subsampling=sub)
        ours = turboloader.decode_jpeg(buf.getvalue())
        ref = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
        assert np.array_equal(ours, ref)
