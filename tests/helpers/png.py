"""PNGs written byte by byte (every bit depth, colour type, row filter, deflate strategy and
IDAT split), for the mask decoder's tests: Pillow writes only some of these."""

import struct
import zlib

import numpy as np


def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _filter(kind, row, prev, bpp):
    out = bytearray(len(row))
    for i, x in enumerate(row):
        a = row[i - bpp] if i >= bpp else 0
        b = prev[i]
        c = prev[i - bpp] if i >= bpp else 0
        if kind == 0:
            p = 0
        elif kind == 1:
            p = a
        elif kind == 2:
            p = b
        elif kind == 3:
            p = (a + b) // 2
        else:
            q = a + b - c
            pa, pb, pc = abs(q - a), abs(q - b), abs(q - c)
            p = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
        out[i] = (x - p) & 0xFF
    return bytes(out)


def pack_rows(values, depth):
    """Rows of ``values`` (H, W) packed at ``depth`` bits (PNG order: high bits first)."""
    h, w = values.shape
    if depth == 16:
        return [values[y].astype(">u2").tobytes() for y in range(h)]
    if depth == 8:
        return [values[y].astype(np.uint8).tobytes() for y in range(h)]
    per = 8 // depth
    stride = (w * depth + 7) // 8
    rows = []
    for y in range(h):
        row = bytearray(stride)
        for x in range(w):
            row[x // per] |= int(values[y, x]) << (8 - depth * (x % per + 1))
        rows.append(bytes(row))
    return rows


def write_png(values, colour, depth, *, filters=None, level=6, strategy=zlib.Z_DEFAULT_STRATEGY,
              split=1, interlace=0, rng=None):
    """A PNG of ``values`` written by hand: row filters ``filters`` (a type per row, or
    random), deflate ``level`` / ``strategy``, the stream in ``split`` IDAT chunks."""
    h, w = values.shape
    rng = rng or np.random.default_rng(0)
    bpp = 2 if depth == 16 else 1
    # Adam7: seven passes (row start, column start, row step, column step), each a small
    # image of its own rows; else one pass of the whole image
    passes = ([(0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2),
               (0, 1, 2, 2), (1, 0, 2, 1)] if interlace else [(0, 0, 1, 1)])
    raw = bytearray()
    for y0, x0, dy, dx in passes:
        sub = values[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        prev = bytes(len(pack_rows(sub[:1], depth)[0]))
        for y, row in enumerate(pack_rows(sub, depth)):
            f = int(rng.integers(0, 5)) if filters is None else filters[y % len(filters)]
            raw += bytes([f]) + _filter(f, row, prev, bpp)
            prev = row
    c = zlib.compressobj(level, zlib.DEFLATED, 15, 9, strategy)
    stream = c.compress(bytes(raw)) + c.flush()
    out = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, colour,
                                                            0, 0, interlace))
    if colour == 3:
        pal = rng.integers(0, 256, (1 << depth, 3), dtype=np.uint8)
        out += _chunk(b"PLTE", pal.tobytes())
    cuts = np.linspace(0, len(stream), split + 1).astype(int)
    for a, b in zip(cuts[:-1], cuts[1:]):
        out += _chunk(b"IDAT", stream[a:b])
    return out + _chunk(b"IEND", b"")
