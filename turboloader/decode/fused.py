"""The fused train-sample path: JPEG bytes to a normalized CHW batch slot in one native call.

``decode_resized_crop`` is torchvision's ``resized_crop`` (crop a window, resize it with an
antialiased filter) applied straight to JPEG bytes: only the window's rows and iMCU
columns are decoded, at the largest DCT reduction that still leaves the window at least as
large as the output, and the result is flipped and normalized into the caller's buffer.
Everything between the bytes and the output runs without the GIL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
import operator

import numpy as np

from turboloader.decode._filters import _interpolation
from turboloader.decode._window import window_of_one as _window
from turboloader.decode.executor import normalize_affine, resample_into_slot
from turboloader.decode.jpeg import DEFAULT_MAX_PIXELS, _open

__all__ = ["decode_resized_crop", "decode_window"]


def _size(size):
    if isinstance(size, int):
        return size, size
    try:
        h, w = (operator.index(v) for v in size)
    except (TypeError, ValueError):
        raise TypeError(f"size must be an int or an (height, width) pair, got {size!r}") from None
    return h, w


def decode_window(box: Any, clip: bool, out_size: Any, decoded_size: Any, scale: Any, filt: int):
    """Where to decode and what to resample, for a source box of the full-resolution image.

    Args:
        box: ``(x0, y0, x1, y1)`` in full-resolution pixels (floats allowed): a sub-pixel
            region, as Pillow's ``Image.resize(box=...)`` and :func:`~turboloader.transforms.
            functional.resize` take it.
        clip: True for crop-then-resize (torchvision's ``resized_crop``: the filter stops
            at the box's edges); False for resize-then-crop (``Resize`` then a crop: the
            filter sees the pixels around the box, as a full resize would).
        out_size: output ``(height, width)``.
        decoded_size: ``(height, width)`` of the decoded image.
        scale: ``(sy, sx)``: source y maps to decoded ``y * sy``. For a JPEG decoded at
            DCT scale k/8 that is exactly k/8 (libjpeg maps each 8 x 8 block onto k x k
            pixels; ``dh / H`` would shift the window, as dh is rounded up).
        filt: the native filter code, for its support.

    Returns:
        ``(wx, wy, ww, wh, inner)``: the decoded-pixel window to decode (left, top, width,
        height: the native decoder's order) and the box ``(x0, y0, x1, y1)`` inside it to
        resample from.

    Example:
        >>> decode_window((10, 20, 310, 320), True, (224, 224), (480, 640), (0.5, 0.5), 1)
        (5, 10, 150, 150, (0.0, 0.0, 150.0, 150.0))
    """
    return _window(box, clip, out_size, tuple(decoded_size), tuple(scale), filt)


def decode_resized_crop(data: Any, /, top: int, left: int, height: int, width: int,
                        size: int | Sequence[int], *, flip: bool = False, mean: Any = None,
                        std: Any = None, out: Any = None, dtype: Any = np.float32,
                        interpolation: Any = "bilinear", dct_scaling: bool = True,
                        strict: bool = False, max_pixels: int | None = DEFAULT_MAX_PIXELS):
    """Decode the window ``[top:top+height, left:left+width]`` of a JPEG, resize it to
    ``size``, optionally flip it, and write it as CHW into a batch slot.

    Equivalent to ``torchvision.transforms.v2.functional.resized_crop(img, top, left,
    height, width, size, antialias=True)`` on the Pillow-decoded image, followed by
    ``horizontal_flip`` and ``to_dtype(scale=True)`` + ``normalize``: within one uint8
    level (0.02 after ImageNet normalization) with ``dct_scaling=False``. With
    ``dct_scaling`` (the default) the window is decoded at the smallest of the scales 1/8,
    1/4, 1/2 (those with a SIMD IDCT) at which it is still at least ``size``, which is several times faster for small outputs and
    differs from the full-size path as a slightly different antialiasing filter would
    (see docs/guide/transforms.md for the measured tolerance).

    Args:
        data: JPEG file bytes (bytes, memoryview such as a TarIndex member, numpy array).
        top, left, height, width: the crop window in full-resolution pixels; it must lie
            inside the image.
        size: output ``(height, width)``, or an int for a square.
        flip: mirror the output horizontally.
        mean, std: per-channel normalization of float32 output (``(x / 255 - mean) / std``);
            omit both for [0, 1] floats. Not allowed with uint8 output.
        out: a C-contiguous array of shape ``(3, H, W)`` to write into, e.g. ``batch[i]``;
            its dtype (float32 or uint8) decides the output. Allocated when omitted.
        dtype: ``numpy.float32`` or ``numpy.uint8``, when ``out`` is omitted.
        interpolation: ``"bilinear"`` (default), ``"bicubic"`` or ``"nearest"`` (or a
            torchvision ``InterpolationMode``).
        dct_scaling: decode at a reduced DCT scale when the window allows it.
        strict: make libjpeg's warnings about recoverable corruption errors.
        max_pixels: refuse larger images (decompression-bomb guard); ``None``: no limit.

    Returns:
        ``out`` (or the new array): ``(3, H, W)`` float32 or uint8.

    Raises:
        DecodeError: the data is not a decodable JPEG, is truncated or over ``max_pixels``.
        ValueError: the window is outside the image, or sizes/``out`` are invalid.
        TypeError: wrongly typed arguments.

    Warns:
        DecodeWarning: libjpeg recovered from corrupt data (when not ``strict``).

    Example:
        >>> batch = np.empty((64, 3, 224, 224), np.float32)
        >>> decode_resized_crop(jpeg, 10, 20, 300, 260, 224, flip=True,   # doctest: +SKIP
        ...                     mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
        ...                     out=batch[0])
    """
    out_h, out_w = _size(size)
    if out_h <= 0 or out_w <= 0:
        raise ValueError(f"size must be positive, got {(out_h, out_w)}")
    top, left, height, width = (operator.index(v) for v in (top, left, height, width))
    filt = int(_interpolation(interpolation))

    if out is None:
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.uint8):
            raise TypeError(f"dtype must be float32 or uint8, got {dtype}")
        out = np.empty((3, out_h, out_w), dtype)
    elif not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array, got {type(out).__name__}")
    if out.shape != (3, out_h, out_w):
        raise ValueError(f"out must have shape {(3, out_h, out_w)}, got {out.shape}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be C-contiguous and writeable (a batch[i] slot is)")
    if out.dtype == np.float32:
        m = (0.0, 0.0, 0.0) if mean is None else tuple(float(v) for v in mean)
        s = (1.0, 1.0, 1.0) if std is None else tuple(float(v) for v in std)
        if len(m) != 3 or len(s) != 3 or any(v <= 0 for v in s):
            raise ValueError(f"mean and std need 3 values each, std positive; got {m}, {s}")
        affine = normalize_affine(m, s)
    elif out.dtype == np.uint8:
        if mean is not None or std is not None:
            raise ValueError("mean/std normalize float32 output; uint8 output is raw pixels")
        affine = None
    else:
        raise TypeError(f"out must be float32 or uint8, got {out.dtype}")

    buf, header, limit = _open(data, max_pixels)
    W, H = header.width, header.height
    if height <= 0 or width <= 0 or top < 0 or left < 0 or top + height > H or left + width > W:
        raise ValueError(f"crop (top={top}, left={left}, height={height}, width={width}) is "
                         f"not a non-empty window inside the {W} x {H} image")
    return resample_into_slot((buf, header), out, box=(left, top, left + width, top + height),
                         clip=True, filt=filt, flip=bool(flip), affine=affine,
                         dct_scaling=dct_scaling, strict=strict, max_pixels=limit,
                         stacklevel=2)
