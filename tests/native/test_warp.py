"""The Cython layer of the warp/blur kernels (``_native/_warp``) and the point-op kernels added
to ``_native/_colour``: validation, invariants the kernels re-check, exact simple cases, and
threads (every entry point releases the GIL)."""

import threading

import numpy as np
import pytest

from turboloader._native import _colour, _warp
from turboloader.transforms import functional as FN

IDENTITY = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]


def img(h=37, w=53, c=3, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, c), dtype=np.uint8)


@pytest.mark.parametrize("c", [1, 2, 3, 4])
@pytest.mark.parametrize("mode", [_warp.NEAREST, _warp.BILINEAR])
def test_identity_matrix_copies(c, mode):
    src = img(c=c)
    out = np.empty_like(src)
    _warp.affine_into(src, out, matrix=IDENTITY, interpolation=mode, fill=7)
    np.testing.assert_array_equal(out, src)
    _warp.perspective_into(src, out, coefficients=IDENTITY + [0.0, 0.0], interpolation=mode)
    np.testing.assert_array_equal(out, src)


@pytest.mark.parametrize("mode", [_warp.NEAREST, _warp.BILINEAR])
def test_integer_translation_shifts_and_fills(mode):
    src = img()
    out = np.empty_like(src)
    # inverse matrix: output (x, y) samples input (x - 5, y + 3)
    _warp.affine_into(src, out, matrix=[1, 0, -5, 0, 1, 3], interpolation=mode, fill=[1, 2, 3])
    np.testing.assert_array_equal(out[:-3, 5:], src[3:, :-5])
    assert (out[-3:] == [1, 2, 3]).all() and (out[:, :5] == [1, 2, 3]).all()
    _warp.affine_into(src, out, matrix=[1, 0, -5, 0, 1, 3], interpolation=mode, fill=None)
    assert (out[-3:] == 0).all()


def test_everything_outside_gives_fill():
    src = img()
    out = np.empty_like(src)
    for mode in (_warp.NEAREST, _warp.BILINEAR):
        _warp.affine_into(src, out, matrix=[1, 0, 1e6, 0, 1, -1e9], interpolation=mode, fill=200)
        assert (out == 200).all()
        _warp.affine_into(src, out, matrix=[1e30, 0, 0, 0, 1, 0], interpolation=mode, fill=9)
        assert out.min() >= 0   # huge coordinates: no out-of-bounds read, no crash


def test_fill_values_round_and_clamp():
    src = img()
    out = np.empty_like(src)
    _warp.affine_into(src, out, matrix=[1, 0, 1e6, 0, 1, 0], fill=[127.5, 300, -4])
    assert out[0, 0].tolist() == [128, 255, 0]      # round half to even, clamped
    for mode in (_warp.NEAREST, _warp.BILINEAR):    # huge fills saturate, also when blended
        _warp.affine_into(src, out, matrix=[0.9, 0.2, 3.5, -0.2, 0.9, 2.5], interpolation=mode,
                          fill=[1e30, -1e30, 7])
        assert (out[..., 0] >= src.min()).all() and out[..., 0].max() == 255
        assert out[..., 1].min() == 0


def test_affine_validation():
    src, out = img(), np.empty((37, 53, 3), np.uint8)
    with pytest.raises(ValueError):
        _warp.affine_into(src, np.empty((37, 53, 1), np.uint8), matrix=IDENTITY)
    with pytest.raises(ValueError):
        _warp.affine_into(src, src, matrix=IDENTITY)                 # overlap
    with pytest.raises(ValueError):
        _warp.affine_into(src, out, matrix=IDENTITY[:5])
    with pytest.raises(ValueError):
        _warp.affine_into(src, out, matrix=[float("nan")] + IDENTITY[1:])
    with pytest.raises(ValueError):
        _warp.affine_into(src, out, matrix=IDENTITY, interpolation=2)
    with pytest.raises(ValueError):
        _warp.affine_into(src, out, matrix=IDENTITY, fill=[1, 2])
    with pytest.raises(ValueError):
        _warp.affine_into(src, out, matrix=IDENTITY, fill=float("inf"))
    with pytest.raises(ValueError):
        _warp.affine_into(img(c=5), np.empty((37, 53, 5), np.uint8), matrix=IDENTITY)
    with pytest.raises(ValueError):
        _warp.perspective_into(src, np.empty((36, 53, 3), np.uint8), coefficients=[0] * 8)
    with pytest.raises(ValueError):   # memoryview dtype check
        _warp.affine_into(src.astype(np.float32), out, matrix=IDENTITY)
    with pytest.raises(ValueError):
        _warp.affine_into(src[:, ::2], out[:, :27], matrix=IDENTITY)   # not C-contiguous


def test_rotate_expand_output_is_larger():
    src = img(20, 40)
    out = FN.rotate(src, 45, expand=True)
    assert out.shape[0] > 20 and out.shape[1] > 40


def test_blur_delta_and_validation():
    src = np.zeros((9, 11, 1), np.uint8)
    src[4, 5] = 255
    k = FN.gaussian_kernel1d(3, 1.0)
    out = np.empty_like(src)
    _warp.gaussian_blur_into(src, out, kx=k, ky=k, tmp=np.empty(src.size + 11, np.float32))
    expect = np.round(np.outer(k, k) * 255).astype(np.uint8)
    np.testing.assert_array_equal(out[3:6, 4:7, 0], expect)
    assert out.sum() == out[3:6, 4:7].sum()
    # in place is allowed (the first pass goes to tmp)
    inplace = src.copy()
    _warp.gaussian_blur_into(inplace, inplace, kx=k, ky=k, tmp=np.empty(src.size + 11, np.float32))
    np.testing.assert_array_equal(inplace, out)
    with pytest.raises(ValueError):
        _warp.gaussian_blur_into(src, out, kx=np.ones(4, np.float32), ky=k,
                                 tmp=np.empty(src.size + 11, np.float32))
    with pytest.raises(ValueError):
        _warp.gaussian_blur_into(src, out, kx=k, ky=k, tmp=np.empty(src.size + 10, np.float32))
    with pytest.raises(ValueError):   # reflect padding needs half-width < side
        _warp.gaussian_blur_into(src, out, kx=np.ones(23, np.float32), ky=k,
                                 tmp=np.empty(src.size + 11, np.float32))


def test_point_op_kernels_exact():
    src = img(c=3)
    a = src.copy()
    _colour.posterize_(a, 3)
    np.testing.assert_array_equal(a, src & 0b11100000)
    a = src.copy()
    _colour.solarize_(a, 100)
    np.testing.assert_array_equal(a, np.where(src >= 100, 255 - src, src))
    a = src.copy()
    _colour.solarize_(a, 256)
    np.testing.assert_array_equal(a, src)
    a = src.copy()
    _colour.invert_(a)
    np.testing.assert_array_equal(a, 255 - src)
    lut = np.stack([np.arange(256)[::-1], np.arange(256), np.full(256, 9)]).astype(np.uint8)
    a = src.copy()
    _colour.lut_(a, lut)
    np.testing.assert_array_equal(a, np.stack([255 - src[..., 0], src[..., 1],
                                               np.full_like(src[..., 2], 9)], -1))
    hist = _colour.histogram(src)
    for c in range(3):
        np.testing.assert_array_equal(hist[c], np.bincount(src[..., c].ravel(), minlength=256))
    four = img(c=4)
    assert _colour.histogram(four).sum() == four.size


def test_point_op_validation():
    src = img()
    with pytest.raises(ValueError):
        _colour.posterize_(src, 9)
    with pytest.raises(ValueError):
        _colour.solarize_(src, -1)
    with pytest.raises(ValueError):
        _colour.lut_(src, np.zeros((1, 256), np.uint8))
    with pytest.raises(ValueError):
        _colour.grayscale_into(img(c=1), np.empty((37, 53, 1), np.uint8))
    with pytest.raises(ValueError):
        _colour.grayscale_into(src, np.empty((37, 53, 2), np.uint8))
    with pytest.raises(ValueError):
        _colour.sharpness_into(src, src, 1.5)                       # overlap
    with pytest.raises(ValueError):
        _colour.sharpness_into(src, np.empty_like(src), -1.0)
    ro = src.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        _colour.invert_(ro)


def test_sharpness_keeps_border_and_small_images():
    src = img()
    out = np.empty_like(src)
    _colour.sharpness_into(src, out, 3.0)
    np.testing.assert_array_equal(out[0], src[0])
    np.testing.assert_array_equal(out[:, -1], src[:, -1])
    tiny = img(2, 5)
    out = np.empty_like(tiny)
    _colour.sharpness_into(tiny, out, 3.0)
    np.testing.assert_array_equal(out, tiny)


def test_colour_kernels_extreme_factors_saturate():
    src = img()
    a = src.copy()
    _colour.adjust_saturation_(a, 1e12)     # beyond the branch-free clamp's range
    gray = FN.rgb_to_grayscale(src, 1).astype(np.int64)
    assert ((src > gray) <= (a == 255)).all() and ((src < gray) <= (a == 0)).all()
    a = src.copy()
    _colour.adjust_brightness_(a, 1e30)
    np.testing.assert_array_equal(a, np.where(src > 0, 255, 0))


def _serial_and_threaded(fn, inputs):
    expect = [fn(x) for x in inputs]
    got = [None] * len(inputs)
    errors = []

    def work(i):
        try:
            for _ in range(5):
                got[i] = fn(inputs[i])
        except Exception as exc:   # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for e, g in zip(expect, got):
        np.testing.assert_array_equal(e, g)


def test_threads_give_identical_results():
    inputs = [img(120, 160, seed=s) for s in range(4)]
    _serial_and_threaded(lambda x: FN.rotate(x, 17, "bilinear", fill=3), inputs)
    _serial_and_threaded(lambda x: FN.affine(x, 5, [3, 1], 0.9, [4, 2], "nearest"), inputs)
    _serial_and_threaded(lambda x: FN.perspective(x, [[0, 0], [159, 0], [159, 119], [0, 119]],
                                                  [[4, 2], [150, 8], [155, 110], [1, 115]]),
                         inputs)
    _serial_and_threaded(lambda x: FN.gaussian_blur(x, 7, 1.5), inputs)
    _serial_and_threaded(lambda x: FN.equalize(FN.solarize(FN.posterize(x, 5), 90)), inputs)
    _serial_and_threaded(lambda x: FN.adjust_hue(FN.adjust_sharpness(x, 1.7), 0.2), inputs)
