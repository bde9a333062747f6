"""The JPEG corruption suite: truncated, bit-flipped, empty, random, over-limit and
pathological-progressive input. Each case must end in a DecodeError, or (for recoverable
corruption, without strict=True) an RGB array plus a DecodeWarning -- never a crash.

The cases run in one child interpreter for the module (:class:`helpers.isolated.Interpreter`)
so that a crash (a signal: negative return code) fails its test instead of killing pytest,
and the next case gets a new child.
"""

import pytest

from helpers.isolated import Interpreter

PRELUDE = '''
import io, struct, warnings
import numpy as np
from PIL import Image
from turboloader import DecodeError, DecodeWarning, decode_jpeg, decode_jpeg_header

def synth_rgb(h, w, seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([xx / w * 255, yy / h * 255,
                    128 + 100 * np.sin(xx / 7) * np.cos(yy / 11)], axis=-1)
    img += rng.normal(0, 12, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)

def encode(mode="RGB", h=120, w=160, **kw):
    im = Image.fromarray(synth_rgb(h, w))
    if mode != "RGB":
        im = im.convert(mode)
    bio = io.BytesIO()
    im.save(bio, "JPEG", quality=85, **kw)
    return bio.getvalue()

VARIANTS = {
    "baseline420": encode(),
    "progressive": encode(progressive=True),
    "restart444": encode(subsampling=0, restart_marker_blocks=2),
    "gray": encode("L"),
    "cmyk": encode("CMYK"),
}

def outcome(data, **kw):
    """('error', message) | ('ok', array) | ('warned', array); anything else raises."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            arr = decode_jpeg(data, **kw)
        except DecodeError as exc:
            assert str(exc), "DecodeError without a message"
            return "error", str(exc)
    assert all(issubclass(w.category, DecodeWarning) for w in caught), caught
    assert arr.dtype == np.uint8 and arr.ndim == 3 and arr.shape[2] == 3, arr.shape
    return ("warned" if caught else "ok"), arr
'''


@pytest.fixture(scope="module")
def interpreter():
    with Interpreter(PRELUDE) as it:
        yield it


@pytest.fixture
def run_isolated(interpreter):
    """Run ``body`` in the module's child interpreter over PRELUDE; return its stdout. A
    failed assertion or an unexpected exception fails with the child's traceback, a crash
    with its negative exit code."""
    return interpreter.run


def test_harness_detects_a_crash_and_goes_on(interpreter):
    # The suite relies on a crash failing its case (the exit code says a signal), and on the
    # next case running in a new child
    starts = interpreter.starts
    with pytest.raises(AssertionError, match=r"exited with -\d+ .*killed by a signal"):
        interpreter.run("import ctypes; ctypes.string_at(0)")
    assert interpreter.run("print(len(VARIANTS))") == "5\n"
    assert interpreter.starts == max(starts, 1) + 1
    # and a failed assertion in a case is the case's failure, with the child's traceback
    with pytest.raises(AssertionError, match="ZeroDivisionError"):
        interpreter.run("1 / 0")
    assert interpreter.run("print(decode_jpeg(VARIANTS['gray']).shape)") == "(120, 160, 3)\n"


def test_truncated_files_always_raise(run_isolated):
    # Every cut point of every variant, header or data, baseline or progressive: libjpeg
    # would fill the missing part with grey and succeed; turboloader must raise.
    out = run_isolated('''
        n = 0
        for name, data in VARIANTS.items():
            step = max(1, len(data) // 150)
            cuts = sorted(set(range(1, len(data), step)) | {1, 2, 3, len(data) - 3,
                                                            len(data) - 2, len(data) - 1})
            for cut in cuts:
                for kw in ({}, {"strict": True}, {"scale": 0.125}):
                    kind, msg = outcome(data[:cut], **kw)
                    assert kind == "error", (name, cut, kw, kind)
                    assert msg == "Premature end of JPEG file", (name, cut, kw, msg)
                    n += 1
        print(n)
    ''')
    assert int(out) > 2000


def test_truncation_raises_wherever_the_crop_lies(run_isolated):
    run_isolated('''
        for name, data in VARIANTS.items():
            full = decode_jpeg(data)
            h, w = full.shape[:2]
            for frac in (0.3, 0.5, 0.8):
                cut = data[: int(len(data) * frac)]
                for window in ((h - 10, 5, 10, 20), (0, 5, 8, 20), (0, 0, h // 2, w)):
                    kind, msg = outcome(cut, window=window)
                    assert (kind, msg) == ("error", "Premature end of JPEG file"), (name, frac, window)
    ''')


def test_bit_flips_raise_or_warn_and_strict_raises_on_every_warning(run_isolated):
    out = run_isolated('''
        from collections import Counter
        counts = Counter()
        for name, data in VARIANTS.items():
            for seed in range(150):
                rng = np.random.default_rng(seed)
                buf = bytearray(data)
                for _ in range(int(rng.integers(1, 5))):
                    pos = int(rng.integers(2, len(buf)))  # keep SOI: otherwise "Not a JPEG"
                    buf[pos] ^= 1 << int(rng.integers(0, 8))
                buf = bytes(buf)
                kind, res = outcome(buf)
                skind, sres = outcome(buf, strict=True)
                counts[kind] += 1
                if kind == "ok":      # no warning at all: strict gives the same pixels
                    assert skind == "ok" and np.array_equal(res, sres), (name, seed)
                else:                 # a warning or an error: strict must raise
                    assert skind == "error", (name, seed, kind, skind)
                if kind != "error":   # partial decodes of the same damaged data
                    h, w = res.shape[:2]
                    x, y = int(rng.integers(0, w)), int(rng.integers(0, h))
                    ckind, cres = outcome(buf, window=(y, x, h - y, w - x), scale=1)
                    if ckind != "error":
                        assert cres.shape == (h - y, w - x, 3)
                    outcome(buf, scale=0.25, fancy_upsampling=False, fast_dct=True)
        print(counts["ok"], counts["warned"], counts["error"])
    ''')
    ok, warned, error = (int(v) for v in out.split())
    # The suite really exercised all three outcomes.
    assert warned > 50 and error > 20 and ok > 0, (ok, warned, error)


def test_zero_length_input(run_isolated):
    run_isolated('''
        for empty in (b"", bytearray(), memoryview(b""), np.empty(0, np.uint8),
                      memoryview(b"abc")[3:]):
            for kw in ({}, {"strict": True}, {"window": (0, 0, 1, 1)}):
                assert outcome(empty, **kw) == ("error", "Empty input file"), (empty, kw)
            try:
                decode_jpeg_header(empty)
            except DecodeError as exc:
                assert str(exc) == "Empty input file"
            else:
                raise AssertionError("header of empty input did not raise")
    ''')


def test_random_bytes(run_isolated):
    run_isolated('''
        for seed in range(200):
            rng = np.random.default_rng(seed)
            junk = rng.integers(0, 256, int(rng.integers(1, 5000)), dtype=np.uint8).tobytes()
            if junk[:2] == b"\\xff\\xd8":
                junk = b"\\x00" + junk
            kind, msg = outcome(junk)
            assert kind == "error" and msg.startswith("Not a JPEG file"), (seed, msg)
            # Random bytes after a valid SOI: any error or warning, never a crash.
            outcome(b"\\xff\\xd8" + junk)
            outcome(b"\\xff\\xd8" + junk, strict=True)
        for text in (b"hello world", b"\\x89PNG\\r\\n\\x1a\\n" + bytes(100), b"\\xff"):
            kind, msg = outcome(text)
            assert kind == "error", text
    ''')


def test_huge_claimed_dimensions_are_refused_before_allocating(run_isolated):
    run_isolated('''
        from turboloader._native import _jpeg
        from turboloader.decode.jpeg import DEFAULT_MAX_PIXELS
        for name in ("baseline420", "progressive", "cmyk"):
            data = VARIANTS[name]
            sof = max(data.find(b"\\xff\\xc0"), data.find(b"\\xff\\xc2"))
            buf = bytearray(data)
            buf[sof + 5 : sof + 9] = struct.pack(">HH", 65000, 65000)  # height, width
            buf = bytes(buf)
            hdr = decode_jpeg_header(buf)
            assert (hdr.width, hdr.height) == (65000, 65000)
            for kw in ({}, {"scale": 0.125}, {"window": (0, 0, 16, 16)}):
                kind, msg = outcome(buf, **kw)
                assert kind == "error" and "max_pixels" in msg, (name, kw, msg)
            # The native layer refuses it too, before jpeg_start_decompress allocates.
            out = np.zeros((16, 16, 3), np.uint8)
            try:
                _jpeg.decode_into(buf, out, scale_num=8, crop_w=16, crop_h=16,
                                  max_pixels=DEFAULT_MAX_PIXELS)
            except DecodeError as exc:
                assert "max_pixels" in str(exc)
            else:
                raise AssertionError("native decode of a 65000x65000 claim did not raise")
        # Nothing near 65000*65000*3 bytes (12 GB) was ever allocated. VmHWM is this
        # process image's peak (ru_maxrss is not: Linux keeps the forking parent's peak
        # across fork and exec, and pytest's own process passes 2 GB in a full run)
        with open("/proc/self/status") as f:
            hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
        assert hwm < 2_000_000, hwm  # KiB
    ''')


def test_zero_dimension_in_header(run_isolated):
    run_isolated('''
        data = VARIANTS["baseline420"]
        sof = data.find(b"\\xff\\xc0")
        for hw in ((0, 160), (120, 0)):
            buf = bytearray(data)
            buf[sof + 5 : sof + 9] = struct.pack(">HH", *hw)
            kind, msg = outcome(bytes(buf))
            assert kind == "error", (hw, kind)
    ''')


def test_pathological_number_of_scans_is_refused(run_isolated):
    run_isolated('''
        data = encode(progressive=True, h=32, w=32)

        def scans(data):
            """(start, end) of every SOS segment including its entropy-coded data."""
            i, found = 2, []
            while True:
                marker = data[i + 1]
                if marker == 0xD9:
                    return found
                (length,) = struct.unpack(">H", data[i + 2 : i + 4])
                j = i + 2 + length
                if marker == 0xDA:
                    while not (data[j] == 0xFF and data[j + 1] != 0 and
                               not 0xD0 <= data[j + 1] <= 0xD7):
                        j += 1
                    found.append((i, j))
                i = j

        start, end = scans(data)[-1]
        assert data[end:] == b"\\xff\\xd9"
        # Repeat the last refinement scan: each repeat is a (bogus but recoverable) scan.
        many = data[:end] + data[start:end] * 600 + data[end:]
        kind, msg = outcome(many)
        assert (kind, msg) == ("error", "Progressive JPEG image has more than 500 scans"), msg
        some = data[:end] + data[start:end] * 100 + data[end:]
        kind, _ = outcome(some)
        assert kind == "warned", kind  # under the limit: decoded, with a warning
        assert outcome(some, strict=True)[0] == "error"
    ''')
