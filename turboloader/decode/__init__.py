"""Bytes to pixels: every decoder, and the window maths and per-sample entry of a batch slot.

The second stage of the sample path (shard -> bytes -> **decode** -> transform -> batch ->
device). One meaning of every argument everywhere:

* ``max_pixels``: refuse images whose full-resolution width * height exceeds it, checked on
  the header before any pixel is decoded; default :data:`DEFAULT_MAX_PIXELS` (Pillow's
  decompression-bomb size); ``None``: no limit.
* ``strict``: libjpeg's warnings about recoverable corruption become :class:`DecodeError`
  (otherwise a :class:`~turboloader.DecodeWarning`).
* coordinates: torchvision's ``(top, left, height, width)`` windows and ``(height, width)``
  sizes; a float source region is Pillow's ``box=(x0, y0, x1, y1)``.

Functions: :func:`decode_image` (any codec: JPEG, Pillow, raw), :func:`decode_jpeg`
(DCT-scaled and crop-only decodes), :func:`decode_jpeg_header`, :func:`decode_resized_crop`
(JPEG window -> resized, flipped, normalized CHW slot in one native call) and the
scale helpers; :mod:`turboloader.decode.executor`, the one slot executor (n sources -> sizes
-> n slots from a spec; one sample is n = 1), and :mod:`turboloader.decode.sizes`, the size
rules. Nothing here imports the transforms, the datasets or torch.

Example:
    >>> from turboloader.decode import decode_image, decode_resized_crop
    >>> img = decode_image(data)                                  # doctest: +SKIP
    >>> x = decode_resized_crop(data, 0, 0, 300, 300, 224)        # doctest: +SKIP
"""

from turboloader.decode._filters import Interpolation
from turboloader.decode.fused import decode_resized_crop, decode_window
from turboloader.decode.image import decode_image, decode_pil, is_jpeg
from turboloader.decode.jpeg import (
    DEFAULT_MAX_PIXELS,
    FAST_SCALES,
    JpegHeader,
    decode_jpeg,
    decode_jpeg_header,
    pick_scale,
    scaled_size,
    window_scale,
)

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "FAST_SCALES",
    "Interpolation",
    "JpegHeader",
    "decode_image",
    "decode_jpeg",
    "decode_jpeg_header",
    "decode_pil",
    "decode_resized_crop",
    "decode_window",
    "is_jpeg",
    "pick_scale",
    "scaled_size",
    "window_scale",
]
