"""Every sampling layout a baseline JPEG may have (luma 1x1..4x4 with chroma 1x1, 2x1 or 1x2,
and odd ones: chroma components that differ, chroma finer than luma, grey with factors,
non-integral ratios), written by the tests' own encoder: a window decode gives exactly the
same pixels as the same window of the full decode, at every DCT scale, with and without
fancy upsampling and the fast IDCT, on the crop path and on the restart-interval path with
either Huffman decoder; the full decode agrees with Pillow; layouts libjpeg cannot decode are a
typed error on every path. (libjpeg-turbo 2.1.5's jpeg_crop_scanline sized the chroma rows of
4x2 and 2x4 files wrongly at DCT scales 1/8..7/8: wrong pixels and uninitialised reads.)
tests/packaging/wheel_smoke.py runs the same check on the wheel's bundled libjpeg-turbo."""

import io

import numpy as np
import pytest
from PIL import Image

from turboloader import decode_jpeg
from turboloader._native import _jpeg
from turboloader.errors import DecodeError

from helpers.jpeg_sampling import (ODD_SAMPLINGS, SAMPLINGS, pattern, sampling_jpeg,
                                   sampling_name, window_mismatches)

LAYOUTS = SAMPLINGS + ODD_SAMPLINGS
FLAGS = (0, _jpeg.NO_FANCY_UPSAMPLING, _jpeg.FAST_DCT)


def integral(sampling):
    hmax, vmax = max(s[0] for s in sampling), max(s[1] for s in sampling)
    return all(hmax % h == 0 and vmax % v == 0 for h, v in sampling)


@pytest.fixture(scope="module", params=LAYOUTS, ids=sampling_name)
def layout(request):
    img = pattern(77, 103, seed=len(request.param))
    return request.param, img, sampling_jpeg(img, request.param)


def test_the_writer_makes_the_layout_asked_for(layout):
    sampling, img, data = layout
    header = _jpeg.read_header(np.frombuffer(data, np.uint8))
    assert header[:3] == (103, 77, len(sampling))
    assert tuple(zip(header[5], header[6]))[:len(sampling)] == sampling


def test_full_decode_agrees_with_pillow(layout):
    sampling, img, data = layout
    if not integral(sampling):
        with pytest.raises(DecodeError, match="Fractional sampling"):
            decode_jpeg(data)
        return
    ours = decode_jpeg(data)
    with Image.open(io.BytesIO(data)) as im:
        theirs = np.asarray(im.convert("RGB"))
    # the same decoder family; Pillow's bundled libjpeg-turbo may be another release
    d = np.abs(ours.astype(int) - theirs)
    assert d.mean() < 0.5 and d.max() <= 8, (d.mean(), d.max())
    # and it is the image that was written (the encoder itself is right)
    ref = img if len(sampling) == 3 else np.repeat(
        np.asarray(Image.fromarray(img).convert("L"))[..., None], 3, axis=2)
    assert np.abs(ours.astype(int) - ref).mean() < 30


def test_every_window_is_the_full_decodes_window(layout):
    sampling, _, data = layout
    if not integral(sampling):
        return
    assert window_mismatches(_jpeg, data, flags=FLAGS) == []


def test_public_window_equals_the_full_decode():
    # the finding's files: 4x2 and 2x4 luma, chroma 1x1, windows of a scaled decode
    for sampling in (((4, 2), (1, 1), (1, 1)), ((2, 4), (1, 1), (1, 1))):
        data = sampling_jpeg(pattern(120, 160, seed=3), sampling)
        for scale in (0.25, 0.5, 0.75):
            full = decode_jpeg(data, scale=scale)
            h, w = full.shape[:2]
            rng = np.random.default_rng(7)
            for _ in range(20):
                ch, cw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
                top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
                got = decode_jpeg(data, scale=scale, window=(top, left, ch, cw))
                np.testing.assert_array_equal(got, full[top:top + ch, left:left + cw])


@pytest.mark.parametrize("stock", [False, True], ids=["own-huffman", "libjpeg-huffman"])
def test_restart_interval_windows_every_layout(layout, stock):
    sampling, _, data = layout
    conv = _jpeg.transcode_restart(np.frombuffer(data, np.uint8), restart_mcus=1)[0]
    if not integral(sampling):
        out = np.empty((10, 10, 3), np.uint8)
        with pytest.raises(DecodeError, match="Fractional sampling"):
            _jpeg.decode_into(np.frombuffer(conv, np.uint8), out, crop_x=3, crop_y=3,
                              crop_w=10, crop_h=10, restart=True)
        return
    flags = _jpeg.STOCK_HUFFMAN if stock else 0
    assert window_mismatches(_jpeg, conv, scales=(8, 4, 3, 2), flags=(flags,),
                             restart=True) == []
    # and the transcode is lossless: the full decodes agree
    np.testing.assert_array_equal(decode_jpeg(conv), decode_jpeg(data))


def test_native_markers_in_the_written_file_take_the_restart_path():
    # a file written with restart markers (not transcoded) in the 4x2 layout
    data = sampling_jpeg(pattern(96, 130, seed=5), ((4, 2), (1, 1), (1, 1)), restart_interval=1)
    assert window_mismatches(_jpeg, data, scales=(8, 4, 2), restart=True) == []
