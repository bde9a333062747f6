"""The fused train-sample path: JPEG bytes to a normalized CHW batch slot in one native call.

``decode_resized_crop`` is torchvision's ``resized_crop`` (crop a window, resize it with an
antialiased filter) applied straight to JPEG bytes: only the window's rows and iMCU
columns are decoded, at the largest DCT reduction that still leaves the window at least as
large as the output, and the result is flipped and normalized into the caller's buffer.
Everything between the bytes and the output runs without the GIL.
"""

import math
import operator
import warnings

import numpy as np

from turboloader._native import _fused, _jpeg
from turboloader.errors import DecodeError, DecodeWarning
from turboloader.jpeg import DEFAULT_MAX_PIXELS, _as_buffer, _read_header, window_scale

__all__ = ["decode_resized_crop", "decode_window"]


def _size(size):
    if isinstance(size, int):
        return size, size
    try:
        h, w = (operator.index(v) for v in size)
    except (TypeError, ValueError):
        raise TypeError(f"size must be an int or an (height, width) pair, got {size!r}") from None
    return h, w


# Half-width of each filter's kernel at scale 1 (nearest, bilinear, bicubic).
_SUPPORT = {0: 0.5, 1: 1.0, 2: 2.0}


def decode_window(box, clip, out_size, dw, dh, scale, filt):
    """Where to decode and what to resample, for a source box of the full-resolution image.

    Args:
        box: ``(x0, y0, x1, y1)`` in full-resolution pixels (floats allowed).
        clip: True for crop-then-resize (torchvision's ``resized_crop``: the filter stops
            at the box's edges); False for resize-then-crop (``Resize`` then a crop: the
            filter sees the pixels around the box, as a full resize would).
        out_size: output ``(height, width)``.
        dw, dh: size of the decoded image.
        scale: ``(fx, fy)``: source x maps to decoded ``x * fx``. For a JPEG decoded at
            DCT scale k/8 that is exactly k/8 (libjpeg maps each 8 x 8 block onto k x k
            pixels; ``dw / W`` would shift the window, as dw is rounded up).
        filt: the native filter code, for its support.

    Returns:
        ``(wx, wy, ww, wh, inner)``: the decoded-pixel window to decode and the box
        ``(x0, y0, x1, y1)`` inside it to resample from.
    """
    fx, fy = scale
    x0, y0 = box[0] * fx, box[1] * fy
    x1, y1 = min(box[2] * fx, dw), min(box[3] * fy, dh)
    if clip:
        ix0, iy0 = math.floor(x0), math.floor(y0)
        ix1, iy1 = min(math.ceil(x1), dw), min(math.ceil(y1), dh)
    else:  # widen by the filter's reach (+2 for rounding), clamped to the image
        support = _SUPPORT.get(filt, 2.0)
        mx = support * max((x1 - x0) / out_size[1], 1.0) + 2
        my = support * max((y1 - y0) / out_size[0], 1.0) + 2
        ix0, iy0 = max(0, math.floor(x0 - mx)), max(0, math.floor(y0 - my))
        ix1, iy1 = min(dw, math.ceil(x1 + mx)), min(dh, math.ceil(y1 + my))
    ww, wh = ix1 - ix0, iy1 - iy0
    return ix0, iy0, ww, wh, (x0 - ix0, y0 - iy0, min(x1 - ix0, ww), min(y1 - iy0, wh))


def decode_resized_crop(data, /, top, left, height, width, size, *, flip=False, mean=None,
                        std=None, out=None, dtype=np.float32, interpolation="bilinear",
                        dct_scaling=True, strict=False, max_pixels=DEFAULT_MAX_PIXELS):
    """Decode the window ``[top:top+height, left:left+width]`` of a JPEG, resize it to
    ``size``, optionally flip it, and write it as CHW into a batch slot.

    Equivalent to ``torchvision.transforms.v2.functional.resized_crop(img, top, left,
    height, width, size, antialias=True)`` on the Pillow-decoded image, followed by
    ``horizontal_flip`` and ``to_dtype(scale=True)`` + ``normalize``: within one uint8
    level (0.02 after ImageNet normalization) with ``dct_scaling=False``. With
    ``dct_scaling`` (the default) the window is decoded at the smallest of the scales 1/8,
    1/4, 1/2 (those with a SIMD IDCT) at which it is still at least ``size``, which is several times faster for small outputs and
    differs from the full-size path as a slightly different antialiasing filter would
    (see the README for the measured tolerance).

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
    buf = _as_buffer(data)
    out_h, out_w = _size(size)
    if out_h <= 0 or out_w <= 0:
        raise ValueError(f"size must be positive, got {(out_h, out_w)}")
    top, left, height, width = (operator.index(v) for v in (top, left, height, width))
    # imported here: turboloader.transforms imports this module (decode_window)
    from turboloader.transforms.functional import _interpolation

    filt = int(_interpolation(interpolation))
    if max_pixels is not None:
        max_pixels = operator.index(max_pixels)
        if max_pixels <= 0:
            raise ValueError(f"max_pixels must be positive or None, got {max_pixels}")

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
        mean_scale = tuple(1.0 / (255.0 * v) for v in s)
        bias = tuple(-a / b for a, b in zip(m, s))
    elif out.dtype == np.uint8:
        if mean is not None or std is not None:
            raise ValueError("mean/std normalize float32 output; uint8 output is raw pixels")
        mean_scale = bias = None
    else:
        raise TypeError(f"out must be float32 or uint8, got {out.dtype}")

    header = _read_header(buf)
    W, H = header.width, header.height
    if max_pixels is not None and W * H > max_pixels:
        raise DecodeError(f"Image size {W} x {H} exceeds the limit of {max_pixels} pixels "
                          "(max_pixels)")
    if height <= 0 or width <= 0 or top < 0 or left < 0 or top + height > H or left + width > W:
        raise ValueError(f"crop (top={top}, left={left}, height={height}, width={width}) is "
                         f"not a non-empty window inside the {W} x {H} image")

    k = window_scale(width, height, out_w, out_h) if dct_scaling else 8
    sw, sh = (W * k + 7) // 8, (H * k + 7) // 8
    box = (left, top, left + width, top + height)
    ix0, iy0, win_w, win_h, box = decode_window(box, True, (out_h, out_w), sw, sh, (k / 8, k / 8), filt)

    flags = _jpeg.STRICT if strict else 0
    n_warnings, message = _fused.decode_resample_into(
        buf, out, scale_num=k, full=(win_w == sw and win_h == sh), win_x=ix0, win_y=iy0,
        win_w=win_w, win_h=win_h, box=box, filter=filt, flip=bool(flip),
        mean_scale=mean_scale, bias=bias, flags=flags, max_pixels=max_pixels or 0)
    if n_warnings:
        more = f" (and {n_warnings - 1} more warnings)" if n_warnings > 1 else ""
        warnings.warn(f"{message}{more}", DecodeWarning, stacklevel=2)
    return out
