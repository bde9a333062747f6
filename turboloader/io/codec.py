"""What an image's bytes are: the codec from the first bytes, the size from the header.

Both read only a few bytes and decode no pixel: the TBL writer needs them to index a record,
the decoders (:mod:`turboloader.decode`) to pick a codec. Pixels are :mod:`turboloader.decode`'s.
"""

from __future__ import annotations

from typing import Any, cast
import enum
import io

from turboloader.errors import DecodeError

__all__ = ["Codec", "as_codec", "detect_codec", "image_size"]


class Codec(enum.IntEnum):
    """What an image's (decompressed) bytes are. The values are TBL's on-disk codes."""

    BYTES = 0   #: opaque bytes; width and height are 0
    JPEG = 1
    PNG = 2
    WEBP = 3
    RAW = 4     #: RGB pixels, uint8, row-major ``(height, width, 3)``


_NAMES = {c: c.name.lower() for c in Codec}


def detect_codec(data: Any, /) -> Codec:
    """The image codec of ``data`` from its first bytes: JPEG, PNG, WebP or BYTES.

    Args:
        data: the file's bytes (any buffer).

    Returns:
        A :class:`Codec`; ``BYTES`` for anything else (RAW pixels cannot be recognised).

    Example:
        >>> detect_codec(b"\\xff\\xd8\\xff\\xe0...")
        <Codec.JPEG: 1>
    """
    head = bytes(memoryview(data)[:12])
    if head[:3] == b"\xff\xd8\xff":
        return Codec.JPEG
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return Codec.PNG
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return Codec.WEBP
    return Codec.BYTES


def as_codec(value) -> Codec:
    """A :class:`Codec` from itself, its int code or its name (``"jpeg"``, case-insensitive).

    Raises:
        ValueError: an unknown name or code.

    Example:
        >>> as_codec("png")
        <Codec.PNG: 2>
    """
    if isinstance(value, str):
        try:
            return Codec[value.upper()]
        except KeyError:
            raise ValueError(f"unknown codec {value!r}; expected one of "
                             f"{', '.join(_NAMES.values())}") from None
    return Codec(value)


def image_size(data: Any, codec: Any, /):
    """``(width, height)`` from an encoded image's header, without decoding pixels.

    Args:
        data: the file's bytes.
        codec: its :class:`Codec` (see :func:`detect_codec`).

    Returns:
        ``(width, height)``; ``(0, 0)`` for ``BYTES`` (and ``RAW``, whose size is not in
        its bytes).

    Raises:
        DecodeError: the header is unreadable.

    Example:
        >>> image_size(jpeg_bytes, Codec.JPEG)  # doctest: +SKIP
        (640, 480)
    """
    if codec == Codec.JPEG:
        from turboloader._native import _jpeg

        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        width, height = _jpeg.read_header(view)[:2]
        return width, height
    if codec in (Codec.PNG, Codec.WEBP):
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(io.BytesIO(data)) as im:
                return im.size
        except (UnidentifiedImageError, OSError, ValueError) as exc:
            raise DecodeError(f"unreadable {codec.name} header: {exc}") from None
    return 0, 0
