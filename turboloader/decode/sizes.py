"""The size rules, each written once: what a resize makes, what a DCT-scaled decode makes, and
which DCT scale to decode at.

Every function works on ``(n, 2)`` int64 arrays (one row per image; one image is a batch of
one) or plain ints, so the batch path, the per-sample path, the cache and the converter use
the same arithmetic. This module is the lowest floor that needs these rules (the decoders
and the cache are below the transforms), so the transforms import them from here.

* :func:`resized_sizes`: torchvision's ``Resize(size, max_size)`` output size
  (``_compute_resized_output_size``: the long side is *truncated*, ``int(s * long / short)``).
* :func:`shrunk_sizes`: the same for a short side, never enlarging (the decoded-sample cache's
  ``cache_short_side``, the converter's ``max_short_side``).
* :func:`scaled_dims`: the size libjpeg decodes at scale k/8: ``(x * k + 7) // 8``.
* :func:`fit_scale_num`: the smallest fast DCT scale k (1, 2, 4, else 8) whose decoded image
  is still at least a minimum size (a decode to a size: the cache, ``pick_scale``).
* :func:`window_scale_num`: the smallest fast k at which a source box, scaled by k/8, is still
  at least the output (a window resampled into a slot: the fused paths).
* :func:`pixel_limit`, :func:`over_pixel_limit`, :func:`pixels_error`, :func:`check_pixels`:
  the one ``max_pixels`` rule (``width * height`` over the limit, checked on the header before
  any pixel is decoded; None: no limit) and its one error text, for every decoder (JPEG, the
  batch path, Pillow's formats, raw pixels, video frames, masks).
"""

import operator

import numpy as np

from turboloader.errors import DecodeError

__all__ = ["FAST_K", "check_pixels", "fit_scale_num", "over_pixel_limit", "pixel_limit",
           "pixels_error", "resized_sizes", "scaled_dims", "shrunk_size", "shrunk_sizes",
           "window_scale_num"]


# -- max_pixels: the one rule ---------------------------------------------------------------

def pixel_limit(max_pixels: int | None) -> int:
    """``max_pixels`` as an int, 0 for no limit: one meaning everywhere (None: no limit).

    Raises:
        ValueError: not positive. TypeError: not an integer.
    """
    if max_pixels is None:
        return 0
    max_pixels = operator.index(max_pixels)
    if max_pixels <= 0:
        raise ValueError(f"max_pixels must be positive or None, got {max_pixels}")
    return max_pixels


def over_pixel_limit(height, width, limit: int):
    """Whether a ``height`` x ``width`` image is over ``limit`` pixels (from
    :func:`pixel_limit`; 0: never): ints give a bool, arrays an array of them."""
    if not limit:
        return np.zeros(np.shape(height), bool) if np.ndim(height) else False
    return height * width > limit


def pixels_error(height: int, width: int, limit: int, *, what: str = "Image",
                 kind: str | None = None) -> DecodeError:
    """The error of an image over the limit (the one text; ``kind``, e.g. ``"PNG"``, names
    its format; ``what`` the thing measured, e.g. ``"Video frame"``)."""
    fmt = f" ({kind})" if kind else ""
    return DecodeError(f"{what} size {int(width)} x {int(height)}{fmt} exceeds the limit of "
                       f"{limit} pixels (max_pixels)")


def check_pixels(height: int, width: int, limit: int, *, what: str = "Image",
                 kind: str | None = None) -> None:
    """Raise :func:`pixels_error` when ``height`` x ``width`` is over ``limit`` (0: none)."""
    if over_pixel_limit(height, width, limit):
        raise pixels_error(height, width, limit, what=what, kind=kind)

#: The DCT scale numerators with a SIMD IDCT in libjpeg-turbo, smallest first.
FAST_K = (1, 2, 4)

_K = np.array(FAST_K, np.int64)


def resized_sizes(size, hw, max_size=None):
    """torchvision's resize rule for every row of ``hw`` (``(n, 2)`` int64 (height, width)).

    Args:
        size: None, ``[s]`` (the shorter edge becomes ``s``, the longer
            ``int(s * long / short)``) or ``[h, w]``; already validated.
        hw: ``int64 (n, 2)`` source (height, width).
        max_size: cap on the longer edge (with ``[s]`` or None), or None.

    Returns:
        ``int64 (n, 2)`` output (height, width). ``s * long / short`` is the correctly rounded
        quotient of the exact product, as Python's int / int is, while the product is below
        2**53.
    """
    hw = np.asarray(hw, np.int64)
    h, w = hw[:, 0], hw[:, 1]
    if size is not None and len(size) == 2:
        return np.broadcast_to(np.array(size, np.int64), hw.shape).copy()
    portrait = w <= h
    short, long = np.minimum(h, w), np.maximum(h, w)
    if size is None:
        new_short = (max_size * short / long).astype(np.int64)
        new_long = np.full_like(short, max_size)
    else:
        s = size[0]
        new_short = np.full_like(short, s)
        new_long = (s * long / short).astype(np.int64)
        if max_size is not None:
            cap = new_long > max_size
            new_short = np.where(cap, (max_size * new_short / np.where(cap, new_long, 1))
                                 .astype(np.int64), new_short)
            new_long = np.where(cap, max_size, new_long)
    new_h = np.where(portrait, new_long, new_short)
    new_w = np.where(portrait, new_short, new_long)
    return np.stack([new_h, new_w], axis=1)


def shrunk_sizes(hw, short_side):
    """``hw`` (``(n, 2)`` (height, width)) resized to ``short_side`` as torchvision's
    ``Resize(short_side)`` sizes it, for the rows whose short side is longer; the other rows
    (and every row when ``short_side`` is falsy) keep their size. ``int64 (n, 2)``."""
    hw = np.asarray(hw, np.int64)
    if not short_side:
        return hw.copy()
    return np.where((hw.min(axis=1) > short_side)[:, None],
                    resized_sizes([int(short_side)], hw), hw)


def shrunk_size(height, width, short_side):
    """:func:`shrunk_sizes` of one image: ``(height, width)`` as Python ints."""
    h, w = shrunk_sizes([[height, width]], short_side)[0].tolist()
    return h, w


def scaled_dims(size, k):
    """The size libjpeg decodes ``size`` (pixels: an int, a pair or an ``(n, 2)`` array, in
    any axis order) to at DCT scale ``k/8`` (``k``: an int or one per row): ``(x * k + 7) // 8``
    per axis. Ints in, ints out; arrays in, int64 arrays out."""
    if isinstance(size, (int, np.integer)):
        return (size * k + 7) // 8
    if isinstance(size, tuple) and not isinstance(k, np.ndarray):
        return tuple((int(x) * k + 7) // 8 for x in size)
    size = np.asarray(size, np.int64)
    k = np.asarray(k, np.int64)
    if k.ndim == 1 and size.ndim == 2:
        k = k[:, None]
    return (size * k + 7) // 8


def fit_scale_num(hw, min_hw, candidates=FAST_K):
    """The smallest ``k`` in ``candidates`` (ascending) at which ``scaled_dims(hw, k)`` is at
    least ``min_hw`` on both axes, else 8 (decoders never upscale). One image: ints."""
    for k in candidates:
        dh, dw = scaled_dims(tuple(hw), k)
        if dh >= min_hw[0] and dw >= min_hw[1]:
            return k
    return 8


def window_scale_num(box_wh, out_wh):
    """The DCT scale numerator k per row: the smallest k in (1, 2, 4) at which the source
    box (``box_wh``: ``(n, 2)`` full-resolution (width, height), floats allowed) is still
    at least the output (``out_wh``: ``(n, 2)`` (width, height)) on both axes, else 8.
    Returns ``int64 (n,)``."""
    box_wh = np.asarray(box_wh)
    out_wh = np.asarray(out_wh)
    fits = (box_wh[:, None, :] * _K[None, :, None] >= out_wh[:, None, :] * 8).all(axis=2)
    return np.where(fits.any(axis=1), _K[fits.argmax(axis=1)], 8)
