"""Seekable JPEGs: the lossless restart-marker transcode (``_jpeg.transcode_restart``) and the
window decode through restart intervals (``tl_jpeg_decode_rst`` / ``_wide_rst``), against
the unchanged crop path, a full decode and Pillow: bit-identical on every subsampling, odd
sizes, every DCT scale, windows touching each edge; fallbacks for intervals that wrap rows
and files without markers; corrupt marker data ends in DecodeError or the unchanged path."""

import io
import struct
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from PIL import Image

from turboloader import DecodeError
from turboloader._native import _jpeg

# -- data -------------------------------------------------------------------------------


def synth(h, w, seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([xx / w * 255, yy / h * 255,
                    128 + 100 * np.sin(xx / 7) * np.cos(yy / 11)], axis=-1)
    img += rng.normal(0, 14, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def encode(arr, mode="RGB", quality=90, **kw):
    im = Image.fromarray(arr)
    if mode != "RGB":
        im = im.convert(mode)
    bio = io.BytesIO()
    im.save(bio, "JPEG", quality=quality, **kw)
    return bio.getvalue()


# name -> (Pillow save kwargs, mode)
KINDS = {
    "444": (dict(subsampling=0), "RGB"),
    "422": (dict(subsampling=1), "RGB"),
    "420": (dict(subsampling=2), "RGB"),
    "gray": ({}, "L"),
    "progressive420": (dict(progressive=True, subsampling=2), "RGB"),
    "cmyk": ({}, "CMYK"),
}
SIZES = [(203, 317), (64, 48), (97, 161)]   # odd sizes, and one of whole MCUs


def pillow(data):
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


def decode(data, k=8, crop=None, restart=True, flags=0):
    W, H = _jpeg.read_header(np.frombuffer(data, np.uint8))[:2]
    dw, dh = (W * k + 7) // 8, (H * k + 7) // 8
    x, y, w, h = crop or (0, 0, 0, 0)
    out = np.empty((h or dh, w or dw, 3), np.uint8)
    _jpeg.decode_into(np.frombuffer(data, np.uint8), out, scale_num=k, crop_x=x, crop_y=y,
                      crop_w=w, crop_h=h, flags=flags, restart=restart)
    return out


def window(data, k, crop):
    x, y, w, h = crop
    return _jpeg.restart_window(np.frombuffer(data, np.uint8), scale_num=k, crop_x=x,
                                crop_y=y, crop_w=w, crop_h=h)


def dri(data):
    """The DRI value of a JPEG's header (0 if none)."""
    i = data.find(b"\xff\xdd")
    return 0 if i < 0 else struct.unpack(">H", data[i + 4:i + 6])[0]


@pytest.fixture(scope="module", params=[(k, s) for k in KINDS for s in SIZES],
                ids=lambda p: f"{p[0]}-{p[1][1]}x{p[1][0]}")
def pair(request):
    kind, (h, w) = request.param
    kw, mode = KINDS[kind]
    orig = encode(synth(h, w, seed=h + w), mode, **kw)
    conv, r = _jpeg.transcode_restart(orig)
    return kind, orig, conv, r


def windows(H, W, k):
    """Crop windows (decoded pixels) touching each edge, in the middle and thin ones."""
    dh, dw = (H * k + 7) // 8, (W * k + 7) // 8
    ww, wh = max(1, dw // 3), max(1, dh // 3)
    out = {(0, 0, ww, wh), (dw - ww, 0, ww, wh), (0, dh - wh, ww, wh),
           (dw - ww, dh - wh, ww, wh), (dw // 3, dh // 3, ww, wh),
           (0, dh // 2, dw, max(1, dh // 4)), (dw // 2, 0, max(1, dw // 5), dh),
           (dw - 1, dh - 1, 1, 1), (dw // 2, dh // 2, 1, 1)}
    # windows whose edges sit on, and 1..3 pixels either side of, MCU boundaries: the
    # upsampler's context is what these exercise
    m = 2 * k
    for d in (-3, -2, -1, 0, 1, 2, 3):
        x0 = min(max(0, 2 * m + d), dw - 1)
        y0 = min(max(0, 2 * m + d), dh - 1)
        x1 = min(max(x0 + 1, 4 * m + d), dw)
        y1 = min(max(y0 + 1, 4 * m + d), dh)
        out.add((x0, y0, x1 - x0, y1 - y0))
    rng = np.random.default_rng(k)
    for _ in range(4):
        w = int(rng.integers(1, dw + 1))
        h = int(rng.integers(1, dh + 1))
        out.add((int(rng.integers(0, dw - w + 1)), int(rng.integers(0, dh - h + 1)), w, h))
    return sorted(out)


# -- the transcode ------------------------------------------------------------------------


def test_transcode_is_lossless_and_seekable(pair):
    kind, orig, conv, r = pair
    assert conv[:2] == b"\xff\xd8" and conv[-2:] == b"\xff\xd9"
    assert dri(conv) == r > 0
    assert not _jpeg.read_header(np.frombuffer(conv, np.uint8))[4]   # baseline
    np.testing.assert_array_equal(pillow(conv), pillow(orig))
    np.testing.assert_array_equal(decode(conv), decode(orig))
    # optimized Huffman tables pay for the markers; progressive scans compress better than
    # one baseline scan, so a progressive original grows a little more
    assert len(conv) <= (1.12 if "progressive" in kind else 1.05) * len(orig) + 200


def test_transcode_decodes_the_same_in_torchvision(pair):
    tv_io = pytest.importorskip("torchvision.io")
    torch = pytest.importorskip("torch")
    kind, orig, conv, _ = pair
    if kind == "cmyk":
        pytest.skip("torchvision reads CMYK JPEGs through its own conversion")
    a = tv_io.decode_jpeg(torch.frombuffer(bytearray(orig), dtype=torch.uint8))
    b = tv_io.decode_jpeg(torch.frombuffer(bytearray(conv), dtype=torch.uint8))
    assert torch.equal(a, b)


def test_automatic_interval_divides_the_row_within_the_size_budget():
    for h, w, sub, mcu in [(40, 317, 2, 16), (200, 317, 0, 8), (375, 500, 2, 16),
                           (300, 500, 1, 16), (333, 460, 2, 16)]:
        orig = encode(synth(h, w), subsampling=sub)
        conv, r = _jpeg.transcode_restart(orig)
        mpr, mrows = -(-w // mcu), -(-h // (16 if sub == 2 else 8))
        assert mpr % r == 0, (w, sub, r)
        assert len(conv) <= 1.05 * len(orig)
        # a finer interval would have spent more than the ~3% budget
        finer = [d for d in range(1, r) if mpr % d == 0]
        if finer:
            assert len(_jpeg.transcode_restart(orig, restart_mcus=max(finer))[0]) > \
                1.02 * len(orig)
    # a flat image, already with optimized tables, compresses to little: finer markers
    # would cost too much, so whole rows
    flat = encode(np.full((64, 31 * 16, 3), 128, np.uint8), subsampling=2, optimize=True)
    assert _jpeg.transcode_restart(flat)[1] == 31


def test_explicit_interval_and_no_optimize():
    orig = encode(synth(64, 100), subsampling=2)
    conv, r = _jpeg.transcode_restart(orig, restart_mcus=3, optimize=False)
    assert r == 3 and dri(conv) == 3
    np.testing.assert_array_equal(pillow(conv), pillow(orig))


def test_transcode_rejects_corrupt_input():
    orig = encode(synth(64, 64))
    with pytest.raises(DecodeError):
        _jpeg.transcode_restart(orig[: len(orig) // 2])
    with pytest.raises(DecodeError):
        _jpeg.transcode_restart(b"not a jpeg at all")
    with pytest.raises(DecodeError):
        _jpeg.transcode_restart(b"")


def test_transcode_keeps_app_markers():
    orig = encode(synth(32, 32), exif=b"Exif\x00\x00II*\x00" + b"\x00" * 20,
                  comment=b"hello")
    conv, _ = _jpeg.transcode_restart(orig)
    assert b"Exif\x00\x00II*" in conv and b"hello" in conv


# -- window decode ------------------------------------------------------------------------


@pytest.mark.parametrize("k", range(1, 9))
def test_window_decode_is_bit_identical(pair, k):
    kind, orig, conv, _ = pair
    W, H = _jpeg.read_header(np.frombuffer(orig, np.uint8))[:2]
    full = decode(orig, k)
    used = 0
    for crop in windows(H, W, k):
        x, y, w, h = crop
        want = full[y:y + h, x:x + w]
        got = decode(conv, k, crop)
        np.testing.assert_array_equal(got, want, err_msg=f"{kind} k={k} crop={crop}")
        np.testing.assert_array_equal(decode(conv, k, crop, restart=False), want)
        np.testing.assert_array_equal(decode(orig, k, crop), want)
        used += window(conv, k, crop) is not None
        assert window(orig, k, crop) is None           # no markers: the unchanged path
    if min(H, W) >= 97:
        assert used >= 3, "the restart path should take most of these windows"


@pytest.mark.parametrize("k", [8, 4, 1])
def test_window_decode_matches_pillow(k):
    orig = encode(synth(203, 317), subsampling=2)
    conv, _ = _jpeg.transcode_restart(orig)
    ref = pillow(orig) if k == 8 else None
    for crop in windows(203, 317, k):
        x, y, w, h = crop
        got = decode(conv, k, crop)
        if ref is not None:
            np.testing.assert_array_equal(got, ref[y:y + h, x:x + w])
        else:
            with Image.open(io.BytesIO(orig)) as im:
                im.draft("RGB", ((317 * k + 7) // 8, (203 * k + 7) // 8))
                ref_k = np.asarray(im.convert("RGB"))
            if ref_k.shape[:2] == ((203 * k + 7) // 8, (317 * k + 7) // 8):
                np.testing.assert_array_equal(got, ref_k[y:y + h, x:x + w])


def test_the_sub_image_is_whole_intervals_with_context():
    orig = encode(synth(160, 320), subsampling=2)      # 20 x 10 MCUs of 16 x 16
    conv, r = _jpeg.transcode_restart(orig, restart_mcus=4)
    assert r == 4
    # window over MCUs 5..6 x 4..5: one MCU of context, then whole 4-MCU intervals
    sub = window(conv, 8, (5 * 16 + 3, 4 * 16 + 5, 20, 20))
    # MCU columns 5..6 -> the interval 4..7; rows 4..5 (4 px of context stay inside them)
    assert sub == (4 * 16, 4 * 16, 4 * 16, 2 * 16)
    # 1 px from an MCU boundary: the upsampler's context reaches into the MCUs before
    sub = window(conv, 8, (4 * 16 + 1, 4 * 16 + 1, 20, 20))
    assert sub == (0, 3 * 16, 8 * 16, 3 * 16)   # columns 3..5, rows 3..5
    sub = window(conv, 8, (300, 140, 20, 20))          # bottom-right corner
    assert sub == (16 * 16, 8 * 16, 4 * 16, 2 * 16)
    assert window(conv, 8, (0, 0, 320, 160)) is None   # nothing to skip


def test_native_markers_of_whole_rows():
    img = synth(203, 317)
    try:
        orig = encode(img, subsampling=2, restart_marker_rows=2)
    except TypeError:
        pytest.skip("this Pillow cannot write restart markers")
    if not dri(orig):
        pytest.skip("this Pillow cannot write restart markers")
    full = decode(orig)
    crop = (100, 150, 60, 40)
    assert window(orig, 8, crop) is not None
    np.testing.assert_array_equal(decode(orig, 8, crop), full[150:190, 100:160])


def test_intervals_that_wrap_rows_fall_back():
    orig = encode(synth(120, 200), subsampling=2)      # 13 MCUs a row
    conv, r = _jpeg.transcode_restart(orig, restart_mcus=3)
    full = decode(orig)
    for crop in windows(120, 200, 8):
        assert window(conv, 8, crop) is None
        x, y, w, h = crop
        np.testing.assert_array_equal(decode(conv, 8, crop), full[y:y + h, x:x + w])


# -- corruption ---------------------------------------------------------------------------


def _entropy_start(data):
    i = data.index(b"\xff\xda")
    return i + 2 + struct.unpack(">H", data[i + 2:i + 4])[0]


def _outcome(data, crop, restart, flags=0):
    try:
        return decode(data, 8, crop, restart=restart, flags=flags)
    except (DecodeError, ValueError) as exc:
        return DecodeError if isinstance(exc, DecodeError) else ValueError


@pytest.fixture(scope="module")
def seekable420():
    orig = encode(synth(203, 317), subsampling=2)
    return orig, _jpeg.transcode_restart(orig)[0]


def test_misnumbered_or_missing_markers_take_the_unchanged_path(seekable420):
    _, conv = seekable420
    crop = (200, 120, 60, 50)
    start = _entropy_start(conv)
    rsts = [i for i in range(start, len(conv) - 1)
            if conv[i] == 0xFF and 0xD0 <= conv[i + 1] <= 0xD7]
    assert len(rsts) > 20
    cases = []
    b = bytearray(conv)
    b[rsts[5] + 1] = 0xD0 + (b[rsts[5] + 1] - 0xD0 + 3) % 8       # misnumbered
    cases.append(bytes(b))
    cases.append(conv[:rsts[7]] + conv[rsts[7] + 2:])             # one marker missing
    cases.append(conv[:rsts[9]] + b"\xff\xd3" + conv[rsts[9]:])   # one too many
    for bad in cases:
        a, b_ = _outcome(bad, crop, True), _outcome(bad, crop, False)
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b_)
        else:
            assert a is b_


def test_truncated_seekable_file_is_an_error_wherever_the_window_is(seekable420):
    _, conv = seekable420
    for cut in (len(conv) - 2, len(conv) - 300, len(conv) // 2, _entropy_start(conv) + 10):
        bad = conv[:cut]
        for crop in [(0, 0, 40, 40), (250, 150, 60, 50), (100, 60, 80, 60)]:
            with pytest.raises(DecodeError):
                decode(bad, 8, crop)


def test_bit_flips_never_crash(seekable420):
    _, conv = seekable420
    rng = np.random.default_rng(7)
    start = _entropy_start(conv)
    crops = [(200, 120, 60, 50), (0, 0, 64, 64), (250, 0, 67, 203)]
    for trial in range(60):
        b = bytearray(conv)
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(start, len(b) - 2))
            b[i] ^= 1 << int(rng.integers(0, 8))
        bad = bytes(b)
        for crop in crops:
            r = _outcome(bad, crop, True, flags=_jpeg.STRICT)
            assert isinstance(r, np.ndarray) or r is DecodeError
            r = _outcome(bad, crop, True)
            assert isinstance(r, np.ndarray) or r is DecodeError


def test_header_corruption_never_crashes(seekable420):
    _, conv = seekable420
    start = _entropy_start(conv)
    crop = (200, 120, 60, 50)
    for i in range(2, start):
        for v in (0x00, 0xFF, conv[i] ^ 0x10):
            b = bytearray(conv)
            b[i] = v
            r = _outcome(bytes(b), crop, True)
            assert isinstance(r, np.ndarray) or r is DecodeError or r is ValueError


def test_too_large_is_checked_on_the_file_not_the_sub_image(seekable420):
    _, conv = seekable420
    out = np.empty((50, 60, 3), np.uint8)
    with pytest.raises(DecodeError, match="max_pixels"):
        _jpeg.decode_into(np.frombuffer(conv, np.uint8), out, crop_x=200, crop_y=120,
                          crop_w=60, crop_h=50, max_pixels=317 * 203 - 1)


# -- threads and the fused path -----------------------------------------------------------


def test_threads(seekable420):
    orig, conv = seekable420
    full = decode(orig)
    crops = windows(203, 317, 8) * 8

    def one(crop):
        x, y, w, h = crop
        return np.array_equal(decode(conv, 8, crop), full[y:y + h, x:x + w])

    with ThreadPoolExecutor(4) as ex:
        assert all(ex.map(one, crops))


@pytest.mark.parametrize("kind", ["420", "444", "gray"])
def test_fused_resized_crop_is_identical_on_converted_files(kind):
    from turboloader.decode.executor import resample_into_slot
    from turboloader.decode.jpeg import _open

    kw, mode = KINDS[kind]
    orig = encode(synth(375, 500, seed=3), mode, **kw)
    conv, _ = _jpeg.transcode_restart(orig)
    rng = np.random.default_rng(1)
    for _ in range(12):
        x0, y0 = rng.uniform(0, 300), rng.uniform(0, 200)
        box = (x0, y0, x0 + rng.uniform(20, 200), y0 + rng.uniform(20, 175))
        for clip in (True, False):
            outs = []
            for data in (orig, conv):
                out = np.empty((3, 56, 56), np.uint8)
                buf, header, _ = _open(data, None)
                resample_into_slot((buf, header), out, box=box, clip=clip, filt=1)
                outs.append(out)
            np.testing.assert_array_equal(outs[0], outs[1])


def test_transcode_in_threads_gives_the_same_bytes(seekable420):
    orig, conv = seekable420
    with ThreadPoolExecutor(4) as ex:
        outs = list(ex.map(lambda _: _jpeg.transcode_restart(orig)[0], range(16)))
    assert all(o == conv for o in outs)
