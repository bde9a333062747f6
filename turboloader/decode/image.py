"""Any image's bytes to RGB pixels: the codec dispatch (JPEG / Pillow / raw) of every whole-image
decode, written here once.

:func:`decode_image` for callers, and the datasets' decode step (``turboloader.data.cache``'s
``Decoder``): :func:`decode_array` (the decoded-sample cache's HWC array, reduced to a short
side) and :func:`decode_rgb` (the RGB image an unfused transform gets). JPEG goes to
libjpeg-turbo, everything else to Pillow. The fused path (``Plan.from_jpeg``,
``decode_resized_crop``) decodes only a JPEG's window, in the same native call that resamples
it (:mod:`turboloader.decode.executor`).
"""

from __future__ import annotations

from typing import Any
import io
import struct
from typing import TYPE_CHECKING, Callable

import numpy as np

from turboloader.decode.jpeg import DEFAULT_MAX_PIXELS, _flags, decode_jpeg
from turboloader.decode.sizes import check_pixels, over_pixel_limit, pixel_limit, pixels_error
from turboloader.decode.sizes import fit_scale_num, scaled_dims, shrunk_size
from turboloader.errors import DecodeError
from turboloader.io.codec import Codec, as_codec, detect_codec

if TYPE_CHECKING:
    from PIL import Image

__all__ = ["decode_array", "decode_image", "decode_pil", "decode_rgb", "is_jpeg"]


def is_jpeg(data: Any, /) -> bool:
    """True when ``data`` starts with a JPEG's SOI marker (the cheap per-sample test).

    Example:
        >>> is_jpeg(b"\\xff\\xd8\\xff\\xe0..."), is_jpeg(b"\\x89PNG")
        (True, False)
    """
    if type(data) is bytes:
        return data.startswith(_SOI)
    if type(data) is memoryview and data.ndim == 1 and data.format == "B":
        # (a batch's gathered bytes: three indexings cost less than a slice and a copy)
        return len(data) > 2 and data[0] == 0xFF and data[1] == 0xD8 and data[2] == 0xFF
    return bytes(data[:3]) == _SOI


_SOI = b"\xff\xd8\xff"


def decode_pil(data: Any, /, max_pixels: int | None = DEFAULT_MAX_PIXELS, *,
               mode: str | None = "RGB"):
    """Decode any Pillow-readable image (PNG, WebP, ...) to an RGB ``PIL.Image``.

    Args:
        data: the file's bytes.
        max_pixels: applies as it does to JPEGs: the header's width x height is checked
            before any pixel is decoded (a 33 KB PNG can claim 3000 x 3000). None: no limit
            (Pillow's own decompression-bomb limit still applies).
        mode: the Pillow mode to convert to; None keeps the file's own (a segmentation
            mask's ``L`` or ``P``), loaded.

    Returns:
        A ``PIL.Image.Image`` in ``mode``.

    Raises:
        DecodeError: the data does not decode, or the image is larger than ``max_pixels``.

    Example:
        >>> decode_pil(png_bytes).mode  # doctest: +SKIP
        'RGB'
    """
    from PIL import Image

    limit = pixel_limit(max_pixels)
    too_large = None
    try:
        with Image.open(io.BytesIO(data)) as img:
            w, h = img.size
            if over_pixel_limit(h, w, limit):
                too_large = pixels_error(h, w, limit, kind=img.format)
            elif mode is None:
                img.load()
                return img.copy()   # closing the file would release the loaded pixels
            else:
                return img.convert(mode)
    except (OSError, ValueError, SyntaxError, EOFError, struct.error, IndexError,
            Image.DecompressionBombError) as exc:
        # Pillow signals bad data with all of these; ours are never raised from here
        raise DecodeError(f"Pillow cannot decode the image: {type(exc).__name__}: {exc}") from exc
    raise too_large


def decode_image(data: Any, /, *, codec: Any = None, strict: bool = False,
                 max_pixels: int | None = DEFAULT_MAX_PIXELS, size: tuple[int, int] | None = None
                ) -> np.ndarray:
    """Decode an image's bytes to an ``(H, W, 3)`` uint8 RGB array, whatever the codec.

    JPEG goes to libjpeg-turbo (:func:`~turboloader.decode.decode_jpeg`), raw pixels are
    viewed in place, anything else to Pillow (PNG, WebP, GIF, BMP, ...).

    Args:
        data: the encoded bytes (bytes, memoryview, numpy array).
        codec: a :class:`~turboloader.io.Codec`, its name (``"jpeg"``, ``"png"``, ``"webp"``,
            ``"raw"``, ``"bytes"``) or None to detect it from the first bytes. ``"raw"``
            (row-major RGB, uint8) needs ``size``; ``"bytes"`` means "let Pillow identify it".
        strict: make libjpeg's warnings about recoverable corruption errors (JPEG only;
            Pillow has no such warnings).
        max_pixels: refuse images whose width * height exceeds this, checked on the header
            before any pixel is decoded; None: no limit. The same meaning everywhere in
            turboloader (datasets, :class:`~turboloader.transforms.Plan`, the decoders).
        size: ``(height, width)`` of raw pixels.

    Returns:
        ``(H, W, 3)`` uint8 RGB array (for raw pixels, a read-only view of ``data``).

    Raises:
        DecodeError: the data does not decode, or is over ``max_pixels``.
        ValueError: raw pixels without ``size`` or of the wrong length; an unknown codec.

    Warns:
        DecodeWarning: libjpeg recovered from corrupt data (JPEG, when not ``strict``).

    Example:
        >>> img = decode_image(open("cat.png", "rb").read())  # doctest: +SKIP
        >>> img.shape, img.dtype                               # doctest: +SKIP
        ((480, 640, 3), dtype('uint8'))
    """
    codec = detect_codec(data) if codec is None else as_codec(codec)
    if codec == Codec.JPEG:
        return decode_jpeg(data, strict=strict, max_pixels=max_pixels)
    if codec == Codec.RAW:
        if size is None:
            raise ValueError("raw pixels need size=(height, width)")
        h, w = (int(v) for v in size)
        check_pixels(h, w, pixel_limit(max_pixels), kind="raw")
        pixels = np.frombuffer(data, np.uint8)
        if pixels.size != h * w * 3:
            raise ValueError(f"raw pixels of {h} x {w} x 3 need {h * w * 3} bytes, got "
                             f"{pixels.size}")
        return pixels.reshape(h, w, 3)
    return np.asarray(decode_pil(data, max_pixels))


_NO_ROOM = object()


def _slot_of(alloc, hw):
    """Where an ``hw`` HWC uint8 array is stored: None (nowhere yet: allocate it), the
    ``alloc`` buffer shaped so, or ``_NO_ROOM`` (``alloc`` has none)."""
    if alloc is None:
        return None
    flat = alloc(hw[0] * hw[1] * 3)
    return _NO_ROOM if flat is None else flat.reshape(*hw, 3)


def decode_array(data, /, *, short_side: int | None = None,
                 max_pixels: int | None = DEFAULT_MAX_PIXELS,
                 alloc: Callable[[int], np.ndarray | None] | None = None,
                 scratch: Callable[[int], np.ndarray] | None = None
                 ) -> tuple[np.ndarray | None, tuple[int, int]]:
    """A dataset sample's bytes to ``(HWC uint8 array, original (height, width))``.

    With ``short_side`` the array is resized to that short side when it is longer
    (bilinear with antialiasing, as torchvision's ``Resize(short_side)``); a JPEG is first
    decoded at the smallest DCT scale that keeps it at least that large. (Keeping a decode
    within 1.25 x ``short_side`` as it is made the cache's filling epoch about a tenth
    faster and every epoch from the cache 10-20 % slower: those are most epochs.)

    ``alloc(nbytes)``: where the array goes, a flat uint8 buffer or None (nowhere: the
    array is then None). Sizes are known from a JPEG's header, so nothing is decoded when
    there is no room; a JPEG at its final size is decoded straight into the buffer.
    ``scratch(nbytes)``: a reusable flat uint8 buffer for a JPEG decoded at a larger size
    than it is stored (default: a new array). Raises DecodeError.

    Example:
        >>> arr, (h, w) = decode_array(jpeg, short_side=160)  # doctest: +SKIP
        >>> min(arr.shape[:2]) == min(160, h, w)  # doctest: +SKIP
        True
    """
    from turboloader._native import _resample

    s = short_side
    if is_jpeg(data):
        from turboloader._native import _jpeg
        from turboloader.decode.jpeg import _open, _warn

        buf, hdr, limit = _open(data, max_pixels)   # DecodeError over max_pixels
        size = (hdr.height, hdr.width)
        # the smallest fast DCT scale at least s on both sides (pick_scale's)
        k = fit_scale_num(size, (s, s)) if s else 8
        decoded = scaled_dims(size, k)
        final = shrunk_size(*size, s)
        if final[0] > decoded[0] or final[1] > decoded[1]:   # (a rounding pixel short)
            final = decoded
        out = _slot_of(alloc, final)
        if out is _NO_ROOM:
            return None, size
        if final != decoded:   # decoded larger than stored: into scratch, resampled below
            n = decoded[0] * decoded[1] * 3
            flat = np.empty(n, np.uint8) if scratch is None else scratch(n)[:n]
            into = flat.reshape(*decoded, 3)
        else:
            into = np.empty((*decoded, 3), np.uint8) if out is None else out
        n_warnings, message = _jpeg.decode_into(
            buf, into, scale_num=k, crop_x=0, crop_y=0, crop_w=0, crop_h=0, flags=_flags(),
            max_pixels=limit)
        _warn(n_warnings, message, stacklevel=3)
        if final == decoded:
            return into, size
        arr = into
    else:
        arr = np.asarray(decode_pil(data, max_pixels))
        size = arr.shape[:2]
        final = shrunk_size(*size, s)
        out = _slot_of(alloc, final)
        if out is _NO_ROOM:
            return None, size
        if final == size:
            if out is None:
                return np.ascontiguousarray(arr), size
            out[...] = arr
            return out, size
        arr = np.ascontiguousarray(arr)
    if out is None:
        out = np.empty((*final, 3), np.uint8)
    _resample.resample_into(arr, out, filter=_resample.BILINEAR)
    return out, size


def decode_rgb(data, /, *, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> Image.Image:
    """A dataset sample's bytes to an RGB ``PIL.Image`` (JPEG with libjpeg-turbo, other
    formats with Pillow): what an unfused transform is called on. Raises DecodeError.

    Example:
        >>> decode_rgb(jpeg).mode  # doctest: +SKIP
        'RGB'
    """
    if is_jpeg(data):
        from PIL import Image

        return Image.fromarray(decode_jpeg(data, max_pixels=max_pixels))
    return decode_pil(data, max_pixels)
