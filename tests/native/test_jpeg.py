"""decode_jpeg / decode_jpeg_header against the Pillow oracle, crop-decode exactness, buffers,
out=, argument validation and threads."""

import io
import mmap
import struct
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import numpy as np
import pytest
from helpers import sweep
from PIL import Image, JpegImagePlugin

from turboloader import DecodeError, DecodeWarning, JpegHeader, decode_jpeg, decode_jpeg_header
from turboloader.decode.jpeg import DEFAULT_MAX_PIXELS, FAST_SCALES, pick_scale, scaled_size

# -- data -------------------------------------------------------------------------------


def synth_rgb(h, w, seed=0, noise=12.0):
    """Smooth gradients + a periodic pattern + seeded noise: realistic enough for a codec."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack(
        [xx / w * 255, yy / h * 255, 128 + 100 * np.sin(xx / 7) * np.cos(yy / 11)], axis=-1
    )
    img += rng.normal(0, noise, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def encode(arr, mode="RGB", **kw):
    im = Image.fromarray(arr)
    if mode != "RGB":
        im = im.convert(mode)
    bio = io.BytesIO()
    im.save(bio, "JPEG", **kw)
    return bio.getvalue()


def strip_segment(data, marker):
    """Remove the first marker segment (e.g. 0xEE, Adobe APP14) from a JPEG."""
    i = data.index(bytes([0xFF, marker]))
    (length,) = struct.unpack(">H", data[i + 2 : i + 4])
    return data[:i] + data[i + 2 + length :]


H, W = 203, 317  # deliberately not multiples of 8 or 16
IMAGE = synth_rgb(H, W)

# name -> (Pillow save kwargs, mode)
VARIANTS = {
    "444": (dict(subsampling=0), "RGB"),
    "422": (dict(subsampling=1), "RGB"),
    "420": (dict(subsampling=2), "RGB"),
    "progressive420": (dict(progressive=True, subsampling=2), "RGB"),
    "progressive444": (dict(progressive=True, subsampling=0), "RGB"),
    "gray": ({}, "L"),
    "cmyk": ({}, "CMYK"),
    "restart_blocks": (dict(restart_marker_blocks=3), "RGB"),
    "restart_rows": (dict(restart_marker_rows=1, subsampling=1), "RGB"),
}
_CACHE = {}


def jpeg(name, quality=90):
    key = (name, quality)
    if key not in _CACHE:
        kw, mode = VARIANTS[name]
        _CACHE[key] = encode(IMAGE, mode, quality=quality, **kw)
    return _CACHE[key]


def pillow_rgb(data):
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def mad(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


# -- the Pillow oracle ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("quality", [75, 95])
def test_decode_matches_pillow(name, quality):
    data = jpeg(name, quality)
    got = decode_jpeg(data)
    ref = pillow_rgb(data)
    assert got.dtype == np.uint8 and got.shape == (H, W, 3)
    assert mad(got, ref) < 1.0


def test_restart_markers_are_present():
    # Guard for the oracle above: Pillow really wrote restart markers (DRI + RSTn).
    for name in ("restart_blocks", "restart_rows"):
        data = jpeg(name)
        assert b"\xff\xdd" in data and any(bytes([0xFF, 0xD0 + n]) in data for n in range(8))


@pytest.mark.parametrize("strip_adobe", [False, True])
def test_cmyk_conversion_matches_pillow_exactly(strip_adobe):
    # Pillow reads every CMYK JPEG as Adobe-inverted ("CMYK;I"), with or without APP14, and
    # converts with its MULDIV255 rounding. The CMYK samples come out of the same ISLOW IDCT
    # in both libraries, so any difference would be the conversion's: require equality.
    rng = np.random.default_rng(5)
    cmyk = np.concatenate(
        [synth_rgb(64, 96, seed=5), rng.integers(0, 256, (64, 96, 1), dtype=np.uint8)], axis=-1
    )
    cmyk[:8, :, 3] = 0
    cmyk[8:16, :, 3] = 255
    bio = io.BytesIO()
    Image.fromarray(cmyk, "CMYK").save(bio, "JPEG", quality=95)
    data = bio.getvalue()
    assert b"\xff\xee" in data
    if strip_adobe:
        data = strip_segment(data, 0xEE)
        assert b"\xff\xee" not in data
    got = decode_jpeg(data)
    np.testing.assert_array_equal(got, pillow_rgb(data))
    assert decode_jpeg_header(data).color_space == "cmyk"


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_header_matches_pillow(name):
    data = jpeg(name)
    hdr = decode_jpeg_header(data)
    im = Image.open(io.BytesIO(data))
    assert isinstance(hdr, JpegHeader)
    assert (hdr.width, hdr.height) == im.size
    assert hdr.components == {"L": 1, "RGB": 3, "CMYK": 4}[im.mode]
    assert hdr.color_space == {"L": "gray", "RGB": "ycbcr", "CMYK": "cmyk"}[im.mode]
    assert hdr.progressive == bool(im.info.get("progressive", 0))
    pil_sampling = JpegImagePlugin.get_sampling(im)  # 0/1/2 for 4:4:4/4:2:2/4:2:0, -1 else
    if im.mode == "L":
        assert hdr.subsampling == "gray"
    elif im.mode == "RGB":
        assert hdr.subsampling == {0: "4:4:4", 1: "4:2:2", 2: "4:2:0"}[pil_sampling]
    else:
        assert hdr.subsampling == "4:4:4"  # Pillow writes CMYK unsubsampled


def test_header_is_frozen_and_accepts_buffers():
    data = jpeg("420")
    hdr = decode_jpeg_header(memoryview(data))
    assert hdr == decode_jpeg_header(np.frombuffer(data, np.uint8))
    with pytest.raises(AttributeError):
        hdr.width = 1


@pytest.mark.parametrize("name", ["444", "422", "420", "progressive420", "gray", "cmyk"])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_scaled_decode_matches_pillow_draft(name, k):
    data = jpeg(name)
    im = Image.open(io.BytesIO(data))
    im.draft("RGB", ((W * k) // 8, (H * k) // 8))
    # Pillow's draft picks a 1/1, 1/2, 1/4 or 1/8 scale: make sure it picked k/8.
    assert im.size == scaled_size((H, W), Fraction(k, 8))[::-1]
    ref = np.asarray(im.convert("RGB"))
    got = decode_jpeg(data, scale=Fraction(k, 8))
    assert got.shape == ref.shape
    assert mad(got, ref) < 1.0


@pytest.mark.parametrize("name", ["444", "420"])
@pytest.mark.parametrize("k", [3, 5, 6, 7])
def test_odd_scales_are_a_resize(name, k):
    # Pillow's draft has no 3/8, 5/8, ...: compare with a full Pillow decode resized with
    # Lanczos. The scaled IDCT is a different low-pass filter, hence the looser bound, and a
    # low-noise image (noise aliases differently through the two filters): observed 1.2-2.4
    # mean abs difference here, ~60 for a wrong scale.
    subsampling = {"444": 0, "420": 2}[name]
    data = encode(synth_rgb(H, W, seed=3, noise=2.0), quality=90, subsampling=subsampling)
    got = decode_jpeg(data, scale=k / 8)
    assert got.shape[:2] == (-(-H * k // 8), -(-W * k // 8))
    full = Image.open(io.BytesIO(data)).convert("RGB")
    ref = np.asarray(full.resize((got.shape[1], got.shape[0]), Image.LANCZOS))
    assert mad(got, ref) < 3.0
    wrong = np.asarray(full.resize((got.shape[1], got.shape[0]), Image.LANCZOS, box=(0, 0, W // 2, H // 2)))
    assert mad(got, wrong) > 10.0


def test_full_scale_forms_are_equivalent():
    data = jpeg("420")
    full = decode_jpeg(data)
    for s in (1, 1.0, Fraction(1), Fraction(8, 8), np.float64(1.0)):
        np.testing.assert_array_equal(decode_jpeg(data, scale=s), full)
    half = decode_jpeg(data, scale=0.5)
    np.testing.assert_array_equal(decode_jpeg(data, scale=Fraction(4, 8)), half)
    assert half.shape == (102, 159, 3)


@pytest.mark.parametrize("fast_dct", [False, True])
@pytest.mark.parametrize("fancy", [False, True])
def test_dct_and_upsampling_options_stay_close_to_pillow(fast_dct, fancy):
    # Pillow decodes with ISLOW + fancy upsampling; the faster options are approximations of
    # it. Observed: fast DCT ~1.0, chroma replication ~1.9-2.2 on this noisy 4:2:0 image.
    data = jpeg("420")
    got = decode_jpeg(data, fast_dct=fast_dct, fancy_upsampling=fancy)
    assert mad(got, pillow_rgb(data)) < (1.5 if fancy else 3.0)
    if fast_dct or not fancy:  # the options really change the decode
        assert not np.array_equal(got, decode_jpeg(data))


# -- scale arguments --------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, 2, -1, 0.3, 1.5, 9 / 8, Fraction(1, 3), float("nan"), float("inf")])
def test_invalid_scale_is_value_error(bad):
    with pytest.raises(ValueError, match="k/8"):
        decode_jpeg(jpeg("420"), scale=bad)


@pytest.mark.parametrize("bad", ["1/2", None, True, (1, 2)])
def test_wrongly_typed_scale_is_type_error(bad):
    with pytest.raises(TypeError):
        decode_jpeg(jpeg("420"), scale=bad)


def test_scaled_size():
    assert scaled_size((750, 1001), Fraction(3, 8)) == (282, 376)
    assert scaled_size((1, 1), 0.125) == (1, 1)
    assert scaled_size((9, 17), 1) == (9, 17)
    for k in range(1, 9):
        h, w = scaled_size((H, W), Fraction(k, 8))
        assert decode_jpeg(jpeg("422"), scale=Fraction(k, 8)).shape == (h, w, 3)
    with pytest.raises(ValueError):
        scaled_size((5, 0), 1)
    with pytest.raises(ValueError):
        scaled_size((5, 5), 0.2)


def test_pick_scale():
    assert pick_scale((768, 1024), (224, 224)) == Fraction(1, 2)
    assert pick_scale((768, 1024), (224, 224), fast_only=False) == Fraction(3, 8)
    assert pick_scale((768, 1024), (96, 128)) == Fraction(1, 8)
    assert pick_scale((768, 1024), (97, 128)) == Fraction(1, 4)
    assert pick_scale((768, 1024), (97, 128), fast_only=False) == Fraction(2, 8)
    assert pick_scale((100, 100), (200, 50)) == Fraction(1)  # never upscales
    assert isinstance(pick_scale((8, 8), (1, 1)), Fraction)
    rng = np.random.default_rng(1)
    for fast_only, allowed in ((False, [Fraction(k, 8) for k in range(1, 9)]),
                               (True, list(FAST_SCALES))):
        for _ in range(200):
            w, h = (int(v) for v in rng.integers(1, 3000, 2))
            mh, mw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
            s = pick_scale((h, w), (mh, mw), fast_only=fast_only)
            assert s in allowed
            sh, sw = scaled_size((h, w), s)
            assert sw >= mw and sh >= mh
            smaller = [a for a in allowed if a < s]
            if smaller:  # the next smaller allowed scale would be too small
                ph, pw = scaled_size((h, w), smaller[-1])
                assert pw < mw or ph < mh


def test_min_size():
    data = jpeg("420")
    got = decode_jpeg(data, min_size=(60, 100))
    k = pick_scale((H, W), (60, 100))
    assert k == Fraction(1, 2)  # 3/8 would do, but 1/2 has libjpeg-turbo's SIMD IDCT
    np.testing.assert_array_equal(got, decode_jpeg(data, scale=k))
    with pytest.raises(ValueError, match="not both"):
        decode_jpeg(data, scale=0.5, min_size=(10, 10))
    with pytest.raises(ValueError):
        decode_jpeg(data, min_size=(0, 10))
    with pytest.raises(TypeError):
        decode_jpeg(data, min_size=100)


# -- crop-only decode -------------------------------------------------------------------

CROP_VARIANTS = ["444", "422", "420", "progressive420", "progressive444", "gray", "cmyk",
                 "restart_rows"]


def _windows(w, h, rng, n_random=12):
    """Corners, edges, 1-pixel windows, windows starting/ending on and next to iMCU
    boundaries (where the upsampler's context matters), and seeded random ones."""
    wins = [(0, 0, w, h), (0, 0, 1, 1), (w - 1, h - 1, 1, 1), (w - 1, 0, 1, h), (0, h - 1, w, 1),
            (1, 1, w - 2, h - 2), (w // 2, h // 3, w - w // 2, h - h // 3)]
    for x in (7, 8, 9, 15, 16, 17, 31, 32, 33):
        for cw in (1, 2, 15, 16, 17):
            if x + cw <= w:
                wins.append((x, min(x, h - 1), cw, min(cw + 3, h - min(x, h - 1))))
    for _ in range(n_random):
        cw, ch = int(rng.integers(1, w + 1)), int(rng.integers(1, h + 1))
        wins.append((int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1)), cw, ch))
    return wins


@pytest.mark.parametrize("name", sweep(CROP_VARIANTS, fast=2))
@pytest.mark.parametrize("fancy", [True, False])
def test_crop_equals_window_of_full_decode_exactly(name, fancy):
    # Established: with the column window widened by one iMCU each side before
    # jpeg_crop_scanline, the crop is bit-exact at every scale 1/8..8/8 (without the
    # widening, fancy 4:2:2/4:2:0 crops differ by up to ~18 at their edge columns).
    data = jpeg(name, 85)
    rng = np.random.default_rng(abs(hash(name)) % 1000 + fancy)
    for k in range(1, 9):
        full = decode_jpeg(data, scale=Fraction(k, 8), fancy_upsampling=fancy)
        fh, fw = full.shape[:2]
        for x, y, cw, ch in _windows(fw, fh, rng):
            got = decode_jpeg(data, scale=Fraction(k, 8), window=(y, x, ch, cw),
                              fancy_upsampling=fancy)
            assert got.shape == (ch, cw, 3)
            if not np.array_equal(got, full[y : y + ch, x : x + cw]):
                pytest.fail(f"{name} scale {k}/8 fancy={fancy} crop {(x, y, cw, ch)} differs")


def test_crop_exact_with_fast_dct():
    data = jpeg("420", 85)
    full = decode_jpeg(data, scale=0.75, fast_dct=True)
    got = decode_jpeg(data, scale=0.75, fast_dct=True, window=(21, 37, 80, 100))
    np.testing.assert_array_equal(got, full[21:101, 37:137])


def test_crop_of_an_intact_file_stops_after_its_last_row_but_truncation_always_raises():
    # Whether a sample is intact must not depend on where the window falls: a truncated
    # file (no EOI at the end) raises even for a crop of its top rows...
    data = jpeg("420")
    cut = data[: int(len(data) * 0.6)]
    for window in ((0, 10, 40, 200), (0, 10, H, 200)):
        with pytest.raises(DecodeError, match="Premature end"):
            decode_jpeg(cut, window=window)
    with pytest.raises(DecodeError, match="Premature end"):
        decode_jpeg(cut)
    # ...while in a file that ends in EOI the rows below the window are not decoded, so
    # damage confined to them (here: entropy data replaced by a premature EOI) goes unseen.
    early_eoi = cut + b"\xff\xd9"
    np.testing.assert_array_equal(decode_jpeg(early_eoi, window=(0, 10, 40, 200)),
                                  decode_jpeg(data)[0:40, 10:210])
    with pytest.raises(DecodeError):
        with warnings.catch_warnings():
            warnings.simplefilter("error", DecodeWarning)
            decode_jpeg(early_eoi, strict=True)


@pytest.mark.parametrize(
    "crop",
    [(0, 0, 0, 10), (0, 0, 10, 0), (-1, 0, 10, 10), (0, -1, 10, 10), (W - 9, 0, 10, 10),
     (0, H - 9, 10, 10), (0, 0, W + 1, H)],
)
def test_crop_outside_image_is_value_error(crop):
    x, y, w, h = crop
    with pytest.raises(ValueError, match="window"):
        decode_jpeg(jpeg("420"), window=(y, x, h, w))


def test_crop_is_in_scaled_coordinates():
    data = jpeg("420")
    with pytest.raises(ValueError):
        decode_jpeg(data, scale=0.5, window=(0, 0, 10, 160))  # 159 wide at 1/2
    assert decode_jpeg(data, scale=0.5, window=(0, 0, 102, 159)).shape == (102, 159, 3)


@pytest.mark.parametrize("crop", [(0, 0, 10), (0, 0, 10, 10, 1)])
def test_crop_wrong_length_is_value_error(crop):
    with pytest.raises(ValueError):
        decode_jpeg(jpeg("420"), window=crop)


@pytest.mark.parametrize("crop", [(0.0, 0, 10, 10), 5, ("0", 0, 1, 1)])
def test_crop_wrong_type_is_type_error(crop):
    with pytest.raises(TypeError):
        decode_jpeg(jpeg("420"), window=crop)


# -- out= and input buffers -------------------------------------------------------------


@pytest.mark.parametrize("window", [None, (30, 20, 50, 100)])
def test_out_slice_of_bigger_buffer(window):
    data = jpeg("420")
    ref = decode_jpeg(data, scale=0.5, window=window)
    h, w = ref.shape[:2]
    big = np.full((h + 20, w + 30, 3), 77, np.uint8)
    view = big[5 : 5 + h, 7 : 7 + w]
    assert not view.flags.c_contiguous
    res = decode_jpeg(data, scale=0.5, window=window, out=view)
    assert res is view
    np.testing.assert_array_equal(big[5 : 5 + h, 7 : 7 + w], ref)
    mask = np.ones(big.shape[:2], bool)
    mask[5 : 5 + h, 7 : 7 + w] = False
    assert (big[mask] == 77).all()


def test_out_contiguous():
    data = jpeg("gray")
    out = np.zeros((H, W, 3), np.uint8)
    assert decode_jpeg(data, out=out) is out
    np.testing.assert_array_equal(out, decode_jpeg(data))


@pytest.mark.parametrize(
    "out",
    [np.zeros((H, W - 1, 3), np.uint8), np.zeros((H + 1, W, 3), np.uint8),
     np.zeros((H, W, 4), np.uint8), np.zeros((H, W), np.uint8),
     np.zeros((H, W * 2, 3), np.uint8)[:, ::2],   # pixels not contiguous
     np.zeros((3, H, W), np.uint8).transpose(1, 2, 0)],  # channels not contiguous
)
def test_out_wrong_shape_or_layout_is_value_error(out):
    with pytest.raises(ValueError, match="out"):
        decode_jpeg(jpeg("420"), out=out)


def test_out_wrong_dtype_or_type():
    with pytest.raises(TypeError):
        decode_jpeg(jpeg("420"), out=np.zeros((H, W, 3), np.float32))
    with pytest.raises(TypeError):
        decode_jpeg(jpeg("420"), out=bytearray(H * W * 3))


def test_out_readonly_is_value_error():
    out = np.zeros((H, W, 3), np.uint8)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        decode_jpeg(jpeg("420"), out=out)


def test_input_buffer_types(tmp_path):
    data = jpeg("420")
    ref = decode_jpeg(data)
    for buf in (bytearray(data), memoryview(data), np.frombuffer(data, np.uint8),
                np.frombuffer(data, np.uint8).copy()):
        np.testing.assert_array_equal(decode_jpeg(buf), ref)
    # A slice of an mmap: the JPEG sits in the middle of a bigger file (a TAR member).
    path = tmp_path / "blob"
    path.write_bytes(b"x" * 1000 + data + b"y" * 333)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)[1000 : 1000 + len(data)]
        try:
            np.testing.assert_array_equal(decode_jpeg(view), ref)
            assert decode_jpeg_header(view).width == W
        finally:
            view.release()


def test_non_byte_buffers_are_reinterpreted_as_bytes():
    data = jpeg("420")
    padded = data + b"\0" * (-len(data) % 4)
    as_u32 = np.frombuffer(padded, np.uint32)
    np.testing.assert_array_equal(decode_jpeg(as_u32), decode_jpeg(data))


@pytest.mark.parametrize("bad", ["not bytes", 123, None, [0xFF, 0xD8]])
def test_non_buffer_data_is_type_error(bad):
    with pytest.raises(TypeError):
        decode_jpeg(bad)
    with pytest.raises(TypeError):
        decode_jpeg_header(bad)


def test_non_contiguous_data_is_value_error():
    arr = np.frombuffer(jpeg("420") * 2, np.uint8)[::2]
    with pytest.raises(ValueError, match="contiguous"):
        decode_jpeg(arr)


def test_positional_only_and_keyword_only():
    data = jpeg("420")
    with pytest.raises(TypeError):
        decode_jpeg(data=data)
    with pytest.raises(TypeError):
        decode_jpeg(data, 0.5)
    with pytest.raises(TypeError):
        decode_jpeg_header(data=data)


# -- warnings, strict, limits -----------------------------------------------------------


def test_extraneous_bytes_warn_or_raise_in_strict():
    # Junk between two header segments: libjpeg skips it with a warning. (Junk just before
    # EOI is not reliably reported: the Huffman decoder's read-ahead may swallow it.)
    data = jpeg("420")
    i = data.index(b"\xff\xdb")
    damaged = data[:i] + b"\x00\x01\x02" + data[i:]
    with pytest.warns(DecodeWarning, match="3 extraneous bytes before marker 0xdb"):
        got = decode_jpeg(damaged)
    np.testing.assert_array_equal(got, decode_jpeg(data))
    with pytest.raises(DecodeError, match="3 extraneous bytes before marker 0xdb"):
        decode_jpeg(damaged, strict=True)
    with pytest.raises(DecodeError, match="extraneous"):
        decode_jpeg(damaged, strict=True, window=(0, 0, 8, 8))


def test_clean_file_gives_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in VARIANTS:
            decode_jpeg(jpeg(name), strict=True)
            decode_jpeg(jpeg(name), window=(4, 3, 60, 50))


def test_missing_eoi_is_truncation():
    data = jpeg("420")
    assert data.endswith(b"\xff\xd9")
    with pytest.raises(DecodeError, match="Premature end of JPEG file"):
        decode_jpeg(data[:-2])


def test_max_pixels():
    data = jpeg("420")
    with pytest.raises(DecodeError, match="max_pixels"):
        decode_jpeg(data, max_pixels=H * W - 1)
    assert decode_jpeg(data, max_pixels=H * W).shape == (H, W, 3)
    assert decode_jpeg(data, max_pixels=None).shape == (H, W, 3)
    with pytest.raises(ValueError):
        decode_jpeg(data, max_pixels=0)
    assert DEFAULT_MAX_PIXELS == 2 * Image.MAX_IMAGE_PIXELS


def test_native_layer_rechecks_limits_and_window():
    # The C shim checks what memory safety depends on even when called directly (as the
    # fused path does), not only what turboloader.decode.jpeg validated.
    from turboloader._native import _jpeg

    data = np.frombuffer(jpeg("420"), np.uint8)
    out = np.zeros((10, 10, 3), np.uint8)
    with pytest.raises(DecodeError, match="max_pixels"):
        _jpeg.decode_into(data, out, scale_num=8, crop_w=10, crop_h=10, max_pixels=100)
    with pytest.raises(ValueError, match="not inside"):
        _jpeg.decode_into(data, out, scale_num=8, crop_x=W - 5, crop_w=10, crop_h=10)
    with pytest.raises(ValueError, match="out_stride"):  # whole image into a 10x10 buffer
        _jpeg.decode_into(data, out, scale_num=8)
    rows = np.zeros((10, W, 3), np.uint8)  # rows wide enough, but too few of them
    with pytest.raises(ValueError, match="out_size"):
        _jpeg.decode_into(data, rows, scale_num=8)
    with pytest.raises(ValueError, match="scale_num"):
        _jpeg.decode_into(data, out, scale_num=9, crop_w=10, crop_h=10)
    n, msg = _jpeg.decode_into(data, out, scale_num=8, crop_x=5, crop_y=6, crop_w=10, crop_h=10)
    assert (n, msg) == (0, "")
    np.testing.assert_array_equal(out, decode_jpeg(data)[6:16, 5:15])


# -- threads ----------------------------------------------------------------------------


def test_threads_give_identical_results():
    jobs = [(name, dict(scale=Fraction(k, 8), window=None)) for name in VARIANTS for k in (2, 5, 8)]
    jobs += [("420", dict(scale=0.5, window=(5, 3, 40, 70))), ("cmyk", dict(window=(9, 9, 9, 9)))]
    serial = [decode_jpeg(jpeg(name), **kw) for name, kw in jobs]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            results = list(pool.map(lambda job: decode_jpeg(jpeg(job[0]), **job[1]), jobs))
            for a, b in zip(serial, results):
                np.testing.assert_array_equal(a, b)


def test_errors_in_threads_are_isolated():
    # libjpeg state (error manager, jmp_buf) is per call: failing decodes in some threads
    # must not disturb good decodes in others.
    good, bad = jpeg("progressive420"), jpeg("420")[:3000]
    ref = decode_jpeg(good)

    def work(i):
        if i % 2:
            with pytest.raises(DecodeError):
                decode_jpeg(bad)
            return None
        return decode_jpeg(good)

    with ThreadPoolExecutor(4) as pool:
        for res in pool.map(work, range(40)):
            if res is not None:
                np.testing.assert_array_equal(res, ref)


def test_gil_is_released_during_decode():
    # No timing assert: with a huge switch interval a thread holding the GIL is never asked
    # to drop it, so the main thread can only run while the worker is inside a `nogil`
    # section (or once it has finished all decodes). The image is large so that each nogil
    # section (tens of ms) dwarfs the main thread's wake-up latency.
    data = encode(synth_rgb(1536, 2048, seed=9), quality=90)
    done = []
    n = 8

    def worker():
        for _ in range(n):
            decode_jpeg(data)
            done.append(1)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        t = threading.Thread(target=worker)
        t.start()  # the main thread resumes only when the worker releases the GIL
        seen = len(done)
        t.join()
    finally:
        sys.setswitchinterval(old)
    assert len(done) == n
    assert seen < n, "the main thread never ran while the worker decoded: GIL held"
