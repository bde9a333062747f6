"""The batch plan's native loops (``_fused.plan_windows``, ``_fused.plain_buffers``) against
the NumPy form they replace on the batch path: the executor's ``_scale_and_windows`` (the DCT
scale, ``decode._window.windows``) and ``plan_slots``' argument checks, bit for bit, on rows a
real batch has (photo sizes, RandomResizedCrop and Resize + CenterCrop boxes, cached arrays
with their original size) and on rows none should (degenerate, out-of-range, NaN, huge)."""

import warnings

import numpy as np
import pytest

from turboloader._native import _fused
from turboloader.decode import executor
from turboloader.decode._window import SUPPORT


def _numpy_form(box, clip, out, hw, kind, array_hw, filt, dct):
    """What plan_slots computed before the native loop: the NumPy definition."""
    any_array = bool(kind.any())
    is_jpeg = kind == executor.JPEG if any_array else None
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # NaN rows cast to int32
        k, dims, window, inner = executor._scale_and_windows(box, clip, out, hw, is_jpeg,
                                                             array_hw, filt, dct)
        full = (window[:, 2:] == dims).all(axis=1)
        full = full & is_jpeg if any_array else full
        size = window[:, 2:]
        good = ((size > 0) & (window[:, :2] >= 0) & (inner[:, :2] >= 0)
                & (inner[:, :2] < inner[:, 2:]) & (inner[:, 2:] <= size)).all(axis=1)
        if any_array:
            good &= is_jpeg | (window[:, :2] + size <= dims).all(axis=1)
        return k.astype(np.int32), dims, window.astype(np.int32), inner, full, good


def _same_floats(a, b):
    nan = np.isnan(a)
    assert (nan == np.isnan(b)).all()
    assert (a[~nan].view(np.int64) == b[~nan].view(np.int64)).all()   # bit for bit (-0.0 too)


def _check(box, clip, out, hw, kind, array_hw, filt, dct):
    w = executor._plan_windows(box, clip, out, hw, kind, array_hw, filt, dct)
    k, dims, window, inner, full, good = _numpy_form(box, clip, out, hw, kind, array_hw,
                                                     filt, dct)
    np.testing.assert_array_equal(w.k, k)
    np.testing.assert_array_equal(w.dims, dims)
    np.testing.assert_array_equal(w.window, window)
    _same_floats(w.inner, inner)
    np.testing.assert_array_equal(w.full.view(bool), full)
    np.testing.assert_array_equal(w.good, good)
    return w


def _rows(rng, n, *, arrays):
    """A batch-like mix of sizes and boxes (float64 boxes in full-resolution pixels)."""
    H = rng.integers(1, 4000, n)
    W = rng.integers(1, 4000, n)
    odd = rng.random(n)
    H[odd < 0.05], W[odd < 0.05] = 1, 1
    H[(odd >= 0.05) & (odd < 0.08)], W[(odd >= 0.05) & (odd < 0.08)] = 65535, 2
    H[(odd >= 0.08) & (odd < 0.1)], W[(odd >= 0.08) & (odd < 0.1)] = 1, 4000
    hw = np.stack([H, W], axis=1).astype(np.int64)
    out = np.where(rng.random((n, 1)) < 0.7, 224, rng.integers(1, 600, (n, 2))).astype(np.int64)
    # RandomResizedCrop-like integer boxes inside the image, and float resize-then-crop ones
    x0 = np.floor(rng.random(n) * W)
    y0 = np.floor(rng.random(n) * H)
    x1 = x0 + np.maximum(1, np.floor(rng.random(n) * (W - x0)))
    y1 = y0 + np.maximum(1, np.floor(rng.random(n) * (H - y0)))
    box = np.stack([x0, y0, x1, y1], axis=1)
    scaled = rng.random(n) < 0.4
    box[scaled] *= (1 + rng.random((int(scaled.sum()), 1)) * 0.37)
    clip = rng.random(n) < 0.5
    kind = np.zeros(n, np.uint8)
    array_hw = np.zeros((n, 2), np.int64)
    if arrays:
        kind[rng.random(n) < 0.5] = executor.ARRAY
        shrink = rng.random((n, 1)) < 0.5
        array_hw = np.where(shrink, np.maximum(1, hw * rng.random((n, 1))).astype(np.int64), hw)
    return box, clip, out, hw, kind, array_hw


@pytest.mark.parametrize("arrays", [False, True])
@pytest.mark.parametrize("dct", [True, False])
@pytest.mark.parametrize("filt", [0, 1, 2, 7])
def test_plan_windows_equals_the_numpy_form(arrays, dct, filt):
    rng = np.random.default_rng(1000 * arrays + 10 * dct + filt)
    box, clip, out, hw, kind, array_hw = _rows(rng, 3000, arrays=arrays)
    w = _check(box, clip, out, hw, kind, array_hw, filt, dct)
    assert w.good.mean() > 0.5   # mostly rows a batch has (the checks pass)
    if dct:
        assert set(np.unique(w.k[kind == executor.JPEG])) <= {1, 2, 4, 8}
        assert (w.k[kind == executor.JPEG] < 8).any()
    # one bool for every row (the per-sample path's form) is the same as a column of them
    for c in (True, False):
        _check(box, c, out, hw, kind, array_hw, filt, dct)
    assert filt in SUPPORT or filt == 7


def test_plan_windows_rows_no_batch_should_have():
    rng = np.random.default_rng(7)
    box, clip, out, hw, kind, array_hw = _rows(rng, 600, arrays=True)
    special = [np.nan, np.inf, -np.inf, -5.0, -0.0, 0.0, 1e300, 3e9, 2.5]
    box[::3] = rng.choice(special, (200, 4))
    box[1::7, 2] = box[1::7, 0]   # empty boxes
    out[::11] = (1, 1)
    with np.errstate(all="ignore"):
        w = _check(box, clip, out, hw, kind, array_hw, 1, True)
    assert not w.good[::3].all()


def test_plan_slots_fails_the_rows_the_checks_reject():
    # a window outside an array source: FAILED with the check's text, the other rows OK
    src = [np.zeros((8, 8, 3), np.uint8), np.zeros((8, 8, 3), np.uint8)]
    sizes = executor.read_sizes(src)
    spec = executor.SlotSpec(2)
    spec.box = np.array([[0, 0, 8, 8], [-4, 0, 8, 8]], np.float64)
    spec.clip = np.ones(2, bool)
    spec.out = np.array([[4, 4], [4, 4]], np.int64)
    p = executor.plan_slots(sizes, spec, filter=1)
    assert p.status.tolist() == [executor.OK, executor.FAILED]
    assert "window" in str(p.errors[1]) and p.errors[0] is None


def test_plan_windows_argument_checks():
    n = 3
    args = [np.zeros((n, 4)), np.zeros(n, np.uint8), np.ones((n, 2), np.int64),
            np.ones((n, 2), np.int64), np.zeros(n, np.uint8), np.ones((n, 2), np.int64),
            np.empty(n, np.int32), np.empty((n, 2), np.int64), np.empty((n, 4), np.int32),
            np.empty((n, 4)), np.empty(n, np.uint8), np.empty(n, np.uint8)]
    _fused.plan_windows(*args, support=1.0, dct_scaling=True)
    for i in range(len(args)):
        bad = list(args)
        bad[i] = bad[i][:2]
        with pytest.raises(ValueError, match="one row per sample"):
            _fused.plan_windows(*bad, support=1.0, dct_scaling=True)


def test_plain_buffers():
    b = np.arange(10, dtype=np.uint8)
    assert _fused.plain_buffers([])
    assert _fused.plain_buffers([b"ab", memoryview(b), b.data[2:5], memoryview(b"xy")])
    assert not _fused.plain_buffers([b"ab", b])                       # an array
    assert not _fused.plain_buffers([bytearray(b"ab")])
    assert not _fused.plain_buffers([memoryview(b).cast("b")])        # format "b"
    assert not _fused.plain_buffers([memoryview(b)[::2]])             # not contiguous
    assert not _fused.plain_buffers([memoryview(np.zeros((2, 3), np.uint8))])   # 2-D
    assert not _fused.plain_buffers([b"ab", None])
    # each view as the Python test of _classify reads it (ndim, format, c_contiguous)
    raw = np.arange(20, dtype=np.uint8)
    views = [memoryview(raw), memoryview(raw)[::2], memoryview(raw)[::5][:1],
             memoryview(raw)[3:3], memoryview(raw).cast("c"), memoryview(raw).cast("B"),
             memoryview(raw)[::-1], memoryview(raw[:8].view("<u1")),
             memoryview(raw[:8].view(np.uint16)), memoryview(raw.reshape(4, 5)[:, 1]),
             memoryview(raw.reshape(4, 5))]
    for v in views:
        assert _fused.plain_buffers([v]) == (v.ndim == 1 and v.format == "B"
                                             and v.c_contiguous), (v.format, v.strides)
    # what _classify then gives: the same as its per-row loop
    kind, srcs, shapes, any_array = executor._classify([b"ab", memoryview(b)])
    assert kind.tolist() == [0, 0] and not any_array and srcs[1].obj is b
