"""One-channel PNG masks sampled straight into a batch's output grid (``MaskField``'s fast path).

A PNG's chunks are walked here (every CRC checked), then one native call for the whole
batch without the GIL (:func:`turboloader._native._mask.png_masks_nearest`) inflates each
zlib stream whole, unfilters the rows up to the last one the output reads and samples them
nearest through per-row index maps: no per-sample resampling in Python. The inflater is turboloader's own (``mask_kernels.c``, RFC 1951 as zlib's
``puff.c`` reads it, runs copied with ``memset`` / ``memcpy``): zlib copies a mask's long
runs a byte at a time, which was most of Pillow's decode of the benchmark's masks
(``zlib.decompress`` 2.4 ms of Pillow's 2.8 ms, loaded machine), and no C library is added
to the build. Like zlib (and so Pillow) it checks that the stream ends with the image's
last byte and that its Adler-32 matches: the chunk CRCs cover the compressed bytes as
written, and a writer's corrupt stream has valid CRCs. What this path takes: grayscale (1, 2, 4, 8, 16 bits) and palette
(1, 2, 4, 8 bits) PNGs, not interlaced, whose values it gives as Pillow does (palette indices
and 8/16-bit values kept, 1/2/4-bit gray scaled to 0-255). Anything else (another format,
colour, interlaced, a bad CRC, a short or corrupt stream) is ``None`` from
:func:`png_mask_header`: the caller then decodes it with Pillow, which gives the values or
names what is wrong with the file.
"""

from __future__ import annotations

import struct
import zlib  # crc32 of the chunks
from typing import NamedTuple

import numpy as np

from turboloader._native import _mask

__all__ = ["PngMask", "png_mask_header", "png_masks_nearest"]

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# (colour type, bit depth) -> the factor Pillow's unpacking gives gray levels (palette: 1)
_SCALE = {(0, 1): 255, (0, 2): 85, (0, 4): 17, (0, 8): 1, (0, 16): 1,
          (3, 1): 1, (3, 2): 1, (3, 4): 1, (3, 8): 1}
_MAX_PIXELS = 1 << 31  # beyond: Pillow's path and its decompression-bomb check


class PngMask(NamedTuple):
    """A PNG this path samples: ``(height, width)``, ``bit_depth``, ``scale`` (gray levels),
    and its zlib stream (the IDAT chunks' data, joined)."""

    height: int
    width: int
    bit_depth: int
    scale: int
    stream: bytes


def png_mask_header(data, /):
    """The :class:`PngMask` of ``data`` (bytes), or None when this path does not take it
    (see the module docstring): a None is decoded by Pillow instead."""
    if not isinstance(data, bytes) or not data.startswith(_SIGNATURE):
        return None
    view = memoryview(data)
    pos, end, ihdr, idat = 8, len(data), None, []
    unpack = struct.unpack_from
    crc32 = zlib.crc32
    while True:
        if pos + 12 > end:
            return None   # no IEND
        length, kind = unpack(">I4s", data, pos)
        stop = pos + 8 + length
        if stop + 4 > end or crc32(view[pos + 4:stop]) != unpack(">I", data, stop)[0]:
            return None
        if kind == b"IDAT":
            if ihdr is None:
                return None
            idat.append(view[pos + 8:stop])
        elif kind == b"IHDR":
            if length != 13 or ihdr is not None:
                return None
            ihdr = unpack(">IIBBBBB", data, pos + 8)
        elif kind == b"IEND":
            break
        pos = stop + 4
    if ihdr is None or not idat:
        return None
    width, height, depth, colour, compression, filtering, interlace = ihdr
    scale = _SCALE.get((colour, depth))
    if (scale is None or compression or filtering or interlace or width == 0 or height == 0
            or width * height > _MAX_PIXELS):
        return None
    stream = idat[0].tobytes() if len(idat) == 1 else b"".join(idat)
    return PngMask(height, width, depth, scale, stream)


def png_masks_nearest(masks, ymap, xmap, /):
    """Every mask of a batch sampled at its rows ``ymap[j]`` (``(n, oh)``) and columns
    ``xmap[j]`` (``(n, ow)``) of its stored pixels: ``(out8, out16, ok)``, ``uint8 (n, oh,
    ow)`` (8 bits or fewer) and ``uint16`` (16-bit masks; ``(0, oh, ow)`` when none) arrays
    and per mask whether it was written (False: its stream or rows are corrupt; Pillow's
    decode of the file then says how).

    Raises:
        ValueError: maps or masks of mismatched lengths.
    """
    n = len(masks)
    ymap = np.ascontiguousarray(ymap, np.int32)
    xmap = np.ascontiguousarray(xmap, np.int32)
    if ymap.shape[0] != n or xmap.shape[0] != n:
        raise ValueError(f"{n} masks, maps for {ymap.shape[0]} and {xmap.shape[0]}")
    oh, ow = ymap.shape[1], xmap.shape[1]
    info = np.array([(m.width, m.height, m.bit_depth, m.scale) for m in masks],
                    np.int64).reshape(n, 4)
    out8 = np.empty((n, oh, ow), np.uint8)
    wide = any(m.bit_depth == 16 for m in masks)
    out16 = np.empty((n if wide else 0, oh, ow), np.uint16)
    status = _mask.png_masks_nearest([m.stream for m in masks], info, ymap, xmap, out8, out16)
    return out8, out16, status == _mask.OK
