"""JPEG decoding with libjpeg-turbo: whole images, DCT-scaled, and crop-only partial decodes.

The work happens in :mod:`turboloader._native._jpeg` with the GIL released, so decodes in
several threads run in parallel. This module validates arguments and sets policy (warnings,
size limits, scale choice).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast
import numbers
import operator
import os
import warnings
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from turboloader._native import _jpeg
from turboloader.decode.sizes import (FAST_K, check_pixels, fit_scale_num, pixel_limit, scaled_dims,
                                       window_scale_num)
from turboloader.errors import DecodeError, DecodeWarning

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "FAST_SCALES",
    "JpegHeader",
    "decode_jpeg",
    "decode_jpeg_header",
    "pick_scale",
    "scaled_size",
    "window_scale",
]

#: Files with more pixels (width * height, before scaling) are refused. Pillow's
#: ``Image.MAX_IMAGE_PIXELS * 2``, the size at which Pillow raises DecompressionBombError.
DEFAULT_MAX_PIXELS = 178956970

#: ``TURBOLOADER_STOCK_HUFFMAN=1`` in the environment (read at import): every JPEG, ordinary
#: or ``convert --seekable``, entropy-decodes through libjpeg-turbo's own Huffman decoder
#: instead of turboloader's (``_native/jpeg_huffman.c``; same pixels, faster). For comparison
#: (``benchmarks/run.py``'s ``turboloader-threads-stock`` / ``turboloader-seekable-stock``
#: rows) and as an escape hatch.
_STOCK_HUFFMAN = os.environ.get("TURBOLOADER_STOCK_HUFFMAN", "") not in ("", "0")


def _flags(strict=False):
    """The native decode flags every JPEG decode passes: STRICT when asked, and the Huffman
    decoder choice (:data:`_STOCK_HUFFMAN`, read at call time so a benchmark can switch it)."""
    return (_jpeg.STRICT if strict else 0) | (_jpeg.STOCK_HUFFMAN if _STOCK_HUFFMAN else 0)

_SUBSAMPLING = {
    (1, 1): "4:4:4",
    (2, 1): "4:2:2",
    (2, 2): "4:2:0",
    (1, 2): "4:4:0",
    (4, 1): "4:1:1",
}


@dataclass(frozen=True)
class JpegHeader:
    """What a JPEG's header says, read without decoding any pixels.

    Attributes:
        width, height: size of the full-resolution image in pixels.
        components: number of colour components in the file (1 gray, 3 colour, 4 CMYK/YCCK).
        color_space: ``'gray'``, ``'ycbcr'``, ``'rgb'``, ``'cmyk'``, ``'ycck'``, or
            ``'unknown'`` (a component count libjpeg cannot interpret).
        progressive: True for a progressive (SOF2) file.
        subsampling: chroma subsampling, ``'4:4:4'``, ``'4:2:2'``, ``'4:2:0'``, ``'4:4:0'``,
            ``'4:1:1'``, ``'gray'`` for one component, or ``'other'``.
    """

    width: int
    height: int
    components: int
    color_space: str
    progressive: bool
    subsampling: str


def _as_buffer(data):
    """A 1-D unsigned-byte view of any C-contiguous buffer (no copy)."""
    if isinstance(data, str):
        raise TypeError("data must be a bytes-like object, not str")
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(
            f"data must be a bytes-like object (bytes, memoryview, numpy array), "
            f"not {type(data).__name__}"
        ) from None
    if not view.c_contiguous:
        raise ValueError("data must be a C-contiguous buffer")
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def _subsampling(components, h_samp, v_samp):
    if components == 1:
        return "gray"
    if components not in (3, 4) or any((h, v) != (1, 1) for h, v in zip(h_samp[1:], v_samp[1:])):
        return "other"
    return _SUBSAMPLING.get((h_samp[0], v_samp[0]), "other")


def _read_header(buf):
    width, height, components, color_space, progressive, h_samp, v_samp, _adobe = (
        _jpeg.read_header(buf)
    )
    return JpegHeader(
        width=width,
        height=height,
        components=components,
        color_space=color_space,
        progressive=progressive,
        subsampling=_subsampling(components, h_samp, v_samp),
    )


def decode_jpeg_header(data: Any, /) -> JpegHeader:
    """Read a JPEG's size, colour space and layout without decoding pixels.

    Args:
        data: the JPEG file's bytes: bytes, bytearray, memoryview (an mmap slice works),
            or a contiguous numpy array.

    Returns:
        A :class:`JpegHeader`.

    Raises:
        DecodeError: the data is empty, not a JPEG, or ends inside the header.
        TypeError: ``data`` is not a buffer.

    Example:
        >>> hdr = decode_jpeg_header(open("cat.jpg", "rb").read())  # doctest: +SKIP
        >>> hdr.width, hdr.height, hdr.subsampling                   # doctest: +SKIP
        (640, 480, '4:2:0')
    """
    return _read_header(_as_buffer(data))


def _scale_num(scale) -> int:
    """The k of a scale k/8, validating the scale."""
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a number (k/8), not {type(scale).__name__}")
    if isinstance(scale, numbers.Rational):
        frac = Fraction(int(scale.numerator), int(scale.denominator))
    else:
        value = float(scale)
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"scale must be k/8 with k in 1..8, got {scale!r}")
        frac = Fraction(value)
    k = frac * 8
    if k.denominator != 1 or not 1 <= k <= 8:
        raise ValueError(f"scale must be k/8 with k in 1..8, got {scale!r}")
    return int(k)


def _int(value, name):
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be integers, not {type(value).__name__}") from None


def _positive_int(value, name):
    value = _int(value, name)
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


def _pair(value, name):
    """``(height, width)`` from a pair of positive ints."""
    try:
        h, w = value
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a (height, width) pair, got {value!r}") from None
    return _positive_int(h, name), _positive_int(w, name)


def scaled_size(size: Sequence[int], scale: Any):
    """Size of an image decoded with DCT scaling, as libjpeg computes it: ceil(dim * k / 8).

    Args:
        size: full-resolution ``(height, width)``.
        scale: k/8 with k in 1..8, as an int (1), float or :class:`fractions.Fraction`.

    Returns:
        ``(scaled_height, scaled_width)``.

    Raises:
        ValueError: ``scale`` is not k/8 with k in 1..8, or a size is not positive.

    Example:
        >>> scaled_size((750, 1001), Fraction(3, 8))
        (282, 376)
    """
    height, width = _pair(size, "size")
    return scaled_dims((height, width), _scale_num(scale))


#: DCT scales with a SIMD IDCT in libjpeg-turbo (8x8, 4x4, 2x2, 1x1 blocks). The other
#: k/8 scales run libjpeg's plain-C IDCTs and are measured slower than a full decode
#: (benchmarks/results/kernels.md: 7/8 at 0.60x, 3/4 at 0.73x of full-size decode speed).
FAST_SCALES = (Fraction(1, 8), Fraction(1, 4), Fraction(1, 2), Fraction(1))


def pick_scale(size: Sequence[int], min_size: Sequence[int], *, fast_only: bool = True) -> Fraction:
    """The smallest DCT scale at which the decoded image is still at least the minimum size.

    Decoding at a smaller scale is much faster; use this to decode no more pixels than a
    later resize to ``min_size`` needs. When even full size is smaller than the minimum,
    returns ``Fraction(1)`` (decoders never upscale).

    Args:
        size: full-resolution ``(height, width)``.
        min_size: the smallest acceptable decoded ``(height, width)``.
        fast_only: consider only 1/8, 1/4, 1/2 and 1 (:data:`FAST_SCALES`, like Pillow's
            ``draft``), which libjpeg-turbo decodes with SIMD; ``False`` considers every k/8.

    Returns:
        The scale as a :class:`fractions.Fraction` k/8.

    Raises:
        ValueError: a size is not positive.

    Example:
        >>> pick_scale((768, 1024), (224, 224))
        Fraction(1, 2)
        >>> pick_scale((768, 1024), (224, 224), fast_only=False)
        Fraction(3, 8)
    """
    height, width = _pair(size, "size")
    min_height, min_width = _pair(min_size, "min_size")
    k = fit_scale_num((height, width), (min_height, min_width),
                      FAST_K if fast_only else range(1, 9))
    return Fraction(k, 8)


def window_scale(window_size: Any, out_size: Any) -> int:
    """The k of the smallest fast DCT scale k/8 (1, 2, 4 or 8) at which a window of
    ``window_size`` full-resolution pixels is still at least ``out_size``.

    libjpeg maps each 8 x 8 block onto k x k pixels, so the window's decoded size is its
    full-resolution size times k/8. Returns 8 (no reduction) when the window is smaller
    than the output.

    Args:
        window_size: ``(height, width)`` of the window in full-resolution pixels (floats
            allowed: a sub-pixel source box).
        out_size: ``(height, width)`` it is resampled to.

    Returns:
        k in (1, 2, 4, 8).

    Example:
        >>> window_scale((700, 900), (224, 224))
        2
    """
    (crop_h, crop_w), (out_h, out_w) = window_size, out_size
    return int(window_scale_num([[crop_w, crop_h]], [[out_w, out_h]])[0])


def _check_out(out, h, w):
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array, not {type(out).__name__}")
    if out.dtype != np.uint8:
        raise TypeError(f"out must have dtype uint8, not {out.dtype}")
    if out.shape != (h, w, 3):
        raise ValueError(f"out must have shape {(h, w, 3)}, got {out.shape}")
    if not out.flags.writeable:
        raise ValueError("out must be writeable")
    if out.strides[2] != 1 or (w > 1 and out.strides[1] != 3) or (h > 1 and out.strides[0] < 3 * w):
        raise ValueError(
            "out's last two dimensions must be contiguous (a row slice of a larger array is "
            f"fine), got strides {out.strides}"
        )


def _open(data, max_pixels):
    """``(buffer, header, limit)`` of a JPEG: its bytes as a 1-D view, its header, and
    ``max_pixels`` as an int (0: no limit) already checked against the header.

    Raises:
        DecodeError: not a JPEG, or over ``max_pixels``.
    """
    buf = _as_buffer(data)
    limit = pixel_limit(max_pixels)
    header = _read_header(buf)
    check_pixels(header.height, header.width, limit)
    return buf, header, limit


def _warn(n_warnings, message, stacklevel):
    """Issue libjpeg's recovered-corruption warnings as one DecodeWarning."""
    if n_warnings:
        more = f" (and {n_warnings - 1} more warnings)" if n_warnings > 1 else ""
        warnings.warn(f"{message}{more}", DecodeWarning, stacklevel=stacklevel + 1)


def _window(window):
    """``(top, left, height, width)`` from ``window``."""
    try:
        values = tuple(window)
    except TypeError:
        raise TypeError("window must be a sequence (top, left, height, width)") from None
    if len(values) != 4:
        raise ValueError(f"window must have 4 items (top, left, height, width), got {len(values)}")
    return values


def decode_jpeg(
    data: Any,
    /,
    *,
    scale: Any = 1,
    min_size: Sequence[int] | None = None,
    window: Any = None,
    out: Any = None,
    strict: bool = False,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    fast_dct: bool = False,
    fancy_upsampling: bool = True,
) -> np.ndarray:
    """Decode a JPEG to an RGB uint8 array, optionally DCT-scaled and cropped.

    Grayscale, YCbCr, RGB, CMYK and YCCK files, baseline or progressive, all decode to RGB.
    CMYK is converted like Pillow does (Adobe-inverted, R = (255 - C) * (255 - K) / 255).
    The GIL is released while decoding.

    Args:
        data: the JPEG file's bytes: bytes, bytearray, memoryview (an mmap slice works),
            or a contiguous numpy array.
        scale: decode at k/8 of full size (k in 1..8) using libjpeg's scaled IDCT, which is
            much faster than decoding then resizing; int ``1``, a float such as ``0.375``, or
            a :class:`fractions.Fraction`. The decoded size is ``ceil(dim * k / 8)``.
        min_size: ``(height, width)``: instead of ``scale``, use the smallest of the fast
            scales 1/8, 1/4, 1/2, 1 whose whole decoded image is at least this size (see
            :func:`pick_scale`).
        window: ``(top, left, height, width)`` of the decoded (scaled) image to return
            (torchvision's ``crop`` order). Only the rows down to the window's bottom and
            the columns around it are decoded; the result equals the same window of a full
            decode. A truncated file (one that does not end in an EOI marker) is an error
            wherever the window lies; corruption confined to the rows below the window of
            an otherwise intact file is not detected.
        out: a uint8 array of shape exactly ``(h, w, 3)`` to decode into, with contiguous
            pixels and channels (its rows may be a slice of a larger buffer). Returned.
        strict: turn every libjpeg warning (recoverable corruption) into a DecodeError.
            Otherwise the warning is issued as a :class:`DecodeWarning`.
        max_pixels: refuse files whose full-resolution width * height exceeds this, before
            allocating anything; ``None`` for no limit (the meaning it has everywhere).
        fast_dct: use the faster, slightly less accurate integer IDCT (JDCT_IFAST).
        fancy_upsampling: interpolate chroma (libjpeg's default, matches Pillow); False
            replicates it, which is faster.

    Returns:
        ``(h, w, 3)`` uint8 RGB array (``out`` when given).

    Raises:
        DecodeError: the data is empty, corrupt, truncated, not a JPEG, over ``max_pixels``,
            or (with ``strict``) libjpeg warned about it. The message is libjpeg-turbo's.
        ValueError: invalid ``scale``, ``min_size``, ``window`` or ``out``.
        TypeError: wrongly typed arguments.

    Warns:
        DecodeWarning: libjpeg recovered from corrupt data (only when not ``strict``).

    Example:
        >>> img = decode_jpeg(jpeg_bytes, scale=0.5, window=(20, 10, 224, 224))  # doctest: +SKIP
        >>> img.shape                                                            # doctest: +SKIP
        (224, 224, 3)
    """
    buf, header, limit = _open(data, max_pixels)

    if min_size is not None:
        if not (isinstance(scale, numbers.Real) and not isinstance(scale, bool) and scale == 1):
            raise ValueError("pass either scale or min_size, not both")
        try:
            min_h, min_w = min_size
        except (TypeError, ValueError):
            raise TypeError("min_size must be a (height, width) pair") from None
        k = int(pick_scale((header.height, header.width), (min_h, min_w)) * 8)
    else:
        k = _scale_num(scale)
    dec_h, dec_w = scaled_dims((header.height, header.width), k)

    if window is None:
        x = y = cw = ch = 0
        h, w = dec_h, dec_w
    else:
        y, x, ch, cw = (_int(v, "window") for v in _window(window))
        if cw <= 0 or ch <= 0 or x < 0 or y < 0 or x + cw > dec_w or y + ch > dec_h:
            given = f"window (top={y}, left={x}, height={ch}, width={cw})"
            raise ValueError(f"{given} is not a non-empty window inside the decoded "
                             f"{dec_w} x {dec_h} image (scale {k}/8)")
        h, w = ch, cw

    if out is None:
        out = np.empty((h, w, 3), dtype=np.uint8)
    else:
        _check_out(out, h, w)

    flags = _flags(strict)
    if fast_dct:
        flags |= _jpeg.FAST_DCT
    if not fancy_upsampling:
        flags |= _jpeg.NO_FANCY_UPSAMPLING
    n_warnings, message = _jpeg.decode_into(
        buf, out, scale_num=k, crop_x=x, crop_y=y, crop_w=cw, crop_h=ch, flags=flags,
        max_pixels=limit,
    )
    _warn(n_warnings, message, stacklevel=2)
    return out
