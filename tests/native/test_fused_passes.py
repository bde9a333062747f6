"""The fused array path (_fused.resample_array_into: window, resample, flip, CHW write in one
call) against the standalone kernels run one after the other (resample_into, then NumPy's
float32 multiply and add, or a transpose): equal bit for bit for every pass combination the
resampler plans (both passes, vertical only, horizontal only, nearest, identity), output
heights that are not a multiple of 8 (a row-blocked write would end on a partial block),
flipped or not, float32 and uint8. Guards any reorganisation of the fused call's last steps
(e.g. a CHW write fused into the vertical pass)."""

import numpy as np
import pytest

from turboloader._native import _fused, _resample

SCALE = (1 / (255 * 0.229), 1 / (255 * 0.224), 1 / (255 * 0.225))
BIAS = (-0.485 / 0.229, -0.456 / 0.224, -0.406 / 0.225)


def _image(h, w, seed):
    rng = np.random.default_rng(seed)
    # smooth gradients plus noise: every tap weight matters, values span 0..255
    y, x = np.mgrid[0:h, 0:w]
    base = (x * 255 // max(w - 1, 1) + y * 3) % 256
    img = base[..., None] + rng.integers(-40, 41, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def _oracle(src, window, box, out_hw, filt, flip, dtype):
    wx, wy, ww, wh = window
    oh, ow = out_hw
    hwc = np.empty((oh, ow, 3), np.uint8)
    if (ww, wh) == (ow, oh) and box == (0.0, 0.0, float(ww), float(wh)):
        hwc[:] = src[wy:wy + wh, wx:wx + ww]
    else:
        _resample.resample_into(src, hwc, crop=(wy, wx, wh, ww), box=box, filter=filt)
    if flip:
        hwc = hwc[:, ::-1]
    chw = np.ascontiguousarray(hwc.transpose(2, 0, 1))
    if dtype == np.uint8:
        return chw
    scale = np.array(SCALE, np.float32)[:, None, None]
    bias = np.array(BIAS, np.float32)[:, None, None]
    return chw.astype(np.float32) * scale + bias   # two float32 roundings, as the kernels


# (source h, w), window (x, y, w, h), box inside the window, output (h, w)
CASES = [
    ((120, 150), (5, 7, 131, 101), (0.5, 1.25, 130.0, 99.5), (37, 53)),     # both passes
    ((120, 150), (0, 0, 150, 120), (0.0, 0.0, 150.0, 120.0), (9, 224)),     # both, 8 + 1
    ((120, 150), (3, 2, 64, 100), (0.0, 0.0, 64.0, 100.0), (17, 64)),       # vertical only
    ((120, 150), (3, 2, 100, 33), (0.0, 0.0, 100.0, 33.0), (33, 41)),       # horizontal only
    ((120, 150), (3, 2, 40, 30), (0.0, 0.0, 40.0, 30.0), (30, 40)),         # identity
    ((60, 70), (0, 0, 70, 60), (0.0, 0.0, 70.0, 60.0), (1, 70)),            # one row
    ((60, 70), (2, 1, 31, 23), (0.0, 0.0, 31.0, 23.0), (100, 90)),          # upscale
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[3][0]}x{c[3][1]}-win{c[1][2]}x{c[1][3]}")
@pytest.mark.parametrize("filt", [_resample.NEAREST, _resample.BILINEAR, _resample.BICUBIC],
                         ids=["nearest", "bilinear", "bicubic"])
@pytest.mark.parametrize("flip", [False, True], ids=["noflip", "flip"])
@pytest.mark.parametrize("dtype", [np.float32, np.uint8], ids=["f32", "u8"])
def test_fused_output_equals_the_kernels_in_turn(case, filt, flip, dtype):
    (sh, sw), window, box, out_hw = case
    src = _image(sh, sw, seed=sh * 7 + out_hw[0])
    out = np.full((3, *out_hw), 77, dtype)
    kw = dict(mean_scale=SCALE, bias=BIAS) if dtype == np.float32 else {}
    wx, wy, ww, wh = window
    _fused.resample_array_into(src, out, win_x=wx, win_y=wy, win_w=ww, win_h=wh, box=box,
                               filter=filt, flip=flip, **kw)
    expected = _oracle(src, window, box, out_hw, filt, flip, dtype)
    if dtype == np.float32:
        np.testing.assert_array_equal(out.view(np.uint32), expected.view(np.uint32))
    else:
        np.testing.assert_array_equal(out, expected)


def test_fused_with_and_without_a_colour_op_agree():
    # a colour op runs on the resized image before the CHW write; with a brightness factor
    # of 1 it is the identity, so both calls give the same bytes
    src = _image(120, 150, seed=3)
    kw = dict(win_x=5, win_y=7, win_w=131, win_h=101, box=(0.5, 1.25, 130.0, 99.5),
              filter=_resample.BILINEAR, flip=True, mean_scale=SCALE, bias=BIAS)
    plain = np.empty((3, 37, 53), np.float32)
    with_op = np.empty((3, 37, 53), np.float32)
    _fused.resample_array_into(src, plain, **kw)
    _fused.resample_array_into(src, with_op, ops=[(_fused.BRIGHTNESS, 1.0)], **kw)
    np.testing.assert_array_equal(plain.view(np.uint32), with_op.view(np.uint32))


# The float32 CHW write fused into the vertical pass (AVX2: resample_kernels.c's
# vpass_chw_f32_avx2; other levels run the two kernels in turn): output widths around its
# 32-pixel blocks (below one block, one, one and a bit, several with an overlapping last
# block), a vertical-only plan, and rows of more taps than the fused kernel takes (the
# fallback), at every level this CPU has, against the kernels run one after the other.
LEVEL_CASES = [
    ((90, 120), (4, 3, 101, 80), (0.25, 0.5, 100.0, 79.0), (29, 31)),
    ((90, 120), (4, 3, 101, 80), (0.25, 0.5, 100.0, 79.0), (29, 32)),
    ((90, 120), (4, 3, 101, 80), (0.25, 0.5, 100.0, 79.0), (23, 33)),
    ((90, 120), (0, 0, 120, 90), (0.0, 0.0, 120.0, 90.0), (41, 70)),
    ((300, 250), (10, 20, 230, 270), (1.5, 2.0, 229.0, 268.5), (224, 224)),
    ((300, 250), (10, 20, 230, 270), (1.5, 2.0, 229.0, 268.5), (99, 225)),
    ((120, 150), (3, 2, 64, 100), (0.0, 0.0, 64.0, 100.0), (17, 64)),        # vertical only
    ((700, 80), (0, 0, 80, 700), (0.0, 0.0, 80.0, 700.0), (2, 40)),          # 700 / 2: 700 taps
    ((60, 70), (2, 1, 31, 23), (0.0, 0.0, 31.0, 23.0), (100, 90)),           # upscale
]


@pytest.mark.parametrize("case", LEVEL_CASES,
                         ids=lambda c: f"{c[3][0]}x{c[3][1]}-win{c[1][2]}x{c[1][3]}")
@pytest.mark.parametrize("filt", [_resample.BILINEAR, _resample.BICUBIC],
                         ids=["bilinear", "bicubic"])
@pytest.mark.parametrize("flip", [False, True], ids=["noflip", "flip"])
def test_fused_float_write_every_level_equals_the_kernels_in_turn(level, case, filt, flip):
    (sh, sw), window, box, out_hw = case
    src = _image(sh, sw, seed=sw * 5 + out_hw[1])
    out = np.full((3, *out_hw), np.nan, np.float32)
    wx, wy, ww, wh = window
    _fused.resample_array_into(src, out, win_x=wx, win_y=wy, win_w=ww, win_h=wh, box=box,
                               filter=filt, flip=flip, mean_scale=SCALE, bias=BIAS)
    expected = _oracle(src, window, box, out_hw, filt, flip, np.float32)
    np.testing.assert_array_equal(out.view(np.uint32), expected.view(np.uint32))
