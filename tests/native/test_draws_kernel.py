"""The native batch draw (``_native/_draws.pyx``) on its own: its argument checks, and rows
outside the mask. Its numbers against the NumPy form of the definition:
``tests/transforms/test_draws.py``."""

import numpy as np
import pytest

from turboloader._native import _draws
from turboloader.transforms._random import sample_keys

ARGS = (0.08, 0.92, np.log(3 / 4), np.log(4 / 3) - np.log(3 / 4), 3 / 4, 4 / 3)


def _call(n=5, *, sizes=None, mask=None, out_rows=None, counter_rows=None):
    keys = sample_keys(1, 2, np.arange(n))
    counter = np.zeros(n if counter_rows is None else counter_rows, np.uint64)
    sizes = np.full((n, 2), 300, np.int64) if sizes is None else sizes
    mask = np.ones(n, np.uint8) if mask is None else mask
    out = np.full((n if out_rows is None else out_rows, 4), -1, np.int64)
    _draws.resized_crop(keys, counter, sizes, mask, out, *ARGS)
    return out, counter


@pytest.mark.parametrize("kw", [{"out_rows": 4}, {"counter_rows": 6},
                                {"mask": np.ones(3, np.uint8)},
                                {"sizes": np.full((5, 3), 300, np.int64)}])
def test_mismatched_rows_are_a_value_error(kw):
    with pytest.raises(ValueError, match="one row per sample"):
        _call(**kw)


@pytest.mark.parametrize("bad", [0, -3, 0xFFFFFFFF])
def test_a_size_outside_the_draws_reach_is_a_value_error(bad):
    sizes = np.full((5, 2), 300, np.int64)
    sizes[2, 1] = bad
    with pytest.raises(ValueError, match="reach"):
        _call(sizes=sizes)
    mask = np.ones(5, np.uint8)
    mask[2] = 0   # a row outside the mask is not drawn, whatever its size
    out, _ = _call(sizes=sizes, mask=mask)
    assert out[2].tolist() == [0, 0, 300, bad]


def test_rows_outside_the_mask_draw_nothing_and_the_others_fit():
    sizes = np.array([[300, 400], [1, 1], [50, 2000], [640, 480], [7, 9]], np.int64)
    mask = np.array([1, 0, 1, 1, 0], np.uint8)
    out, counter = _call(sizes=sizes, mask=mask)
    assert out[1].tolist() == [0, 0, 1, 1] and out[4].tolist() == [0, 0, 7, 9]
    assert counter[1] == counter[4] == 0 and (counter[mask == 1] >= 4).all()
    top, left, h, w = out.T
    assert ((h >= 1) & (w >= 1) & (top >= 0) & (left >= 0)
            & (top + h <= sizes[:, 0]) & (left + w <= sizes[:, 1])).all()
