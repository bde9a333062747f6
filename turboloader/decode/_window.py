"""The window maths of a resample into a slot, written once, for a batch of rows.

Which window of the decoded image the filter reads: :func:`windows` works on ``(n, 2)``
arrays (one row per sample); the DCT scale is :func:`turboloader.decode.sizes.window_scale_num`.
The executor (:mod:`turboloader.decode.executor`) combines the two once, for a batch
(``plan_slots``) and for one sample (``resample_into_slot``, a batch of one), as do
:func:`turboloader.decode.window_scale` and :func:`turboloader.decode.decode_window`. Same
float64 operations in the same order either way, so the two paths decode the same pixels.
"""

import numpy as np

__all__ = []

# Half-width of each filter's kernel at scale 1 (nearest, bilinear, bicubic); other codes: 2
SUPPORT = {0: 0.5, 1: 1.0, 2: 2.0}

def windows(box, clip, out_hw, dims, f, filt):
    """Where to decode and what to resample, per row.

    Args:
        box: ``float64 (n, 4)`` source boxes ``(x0, y0, x1, y1)`` in full-resolution pixels.
        clip: a bool for every row, or ``bool (n,)``: the filter stops at the box (True)
            or reads around it (False: the window is widened by the filter's reach, +2 for
            rounding, clamped to the image).
        out_hw: ``(n, 2)`` output (height, width).
        dims: ``(n, 2)`` decoded image (width, height).
        f: ``(n, 2)`` or ``(n, 1)`` decoded pixels per full-resolution pixel (x, y).
        filt: the native filter code (:data:`SUPPORT`).

    Returns:
        ``(window, inner)``: ``float64 (n, 4)`` each, the window ``(x, y, width, height)``
        in decoded pixels (integral values) and the box inside it ``(x0, y0, x1, y1)``.
    """
    lo = box[:, :2] * f
    hi = np.minimum(box[:, 2:] * f, dims)
    ilo_c, ihi_c = np.floor(lo), np.minimum(np.ceil(hi), dims)
    if clip is not True and clip is not False:   # one bool per row: all alike is the usual
        c = np.asarray(clip)
        clip = True if c.all() else False if not c.any() else clip
    if clip is True:
        ilo, ihi = ilo_c, ihi_c
    else:
        m = SUPPORT.get(filt, 2.0) * np.maximum((hi - lo) / out_hw[:, ::-1], 1.0) + 2
        if clip is False:
            ilo, ihi = np.maximum(0, np.floor(lo - m)), np.minimum(dims, np.ceil(hi + m))
        else:
            c = np.asarray(clip)[:, None]
            ilo = np.where(c, ilo_c, np.maximum(0, np.floor(lo - m)))
            ihi = np.where(c, ihi_c, np.minimum(dims, np.ceil(hi + m)))
    size = ihi - ilo
    window = np.concatenate([ilo, size], axis=1)
    inner = np.concatenate([lo - ilo, np.minimum(hi - ilo, size)], axis=1)
    return window, inner


def window_of_one(box, clip, out_size, decoded_size, scale, filt):
    """:func:`windows` for one row, as Python numbers: ``(wx, wy, ww, wh, inner)`` with
    ``inner = (x0, y0, x1, y1)``; ``out_size``, ``decoded_size``, ``scale``: (y, x) pairs."""
    (dh, dw), (fy, fx) = decoded_size, scale
    window, inner = windows(np.array([box], np.float64), bool(clip),
                            np.array([out_size], np.float64), np.array([[dw, dh]], np.float64),
                            np.array([[fx, fy]], np.float64), filt)
    wx, wy, ww, wh = (int(v) for v in window[0])
    return wx, wy, ww, wh, tuple(inner[0].tolist())
