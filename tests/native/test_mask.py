"""The PNG mask kernel (``_native/_mask``, ``decode/mask.py``): PNG rows inflated,
unfiltered and sampled nearest through index maps, against the oracles Pillow (the decoded
values) then torchvision v2 (``resized_crop`` / ``resize`` + ``crop`` and ``horizontal_flip``
of a ``Mask``), and zlib (the inflater). PNGs are written byte by byte (``helpers/png.py``) so that every
bit depth, colour type, filter type, deflate block type and IDAT split is covered."""

import io
import threading
import zlib

import numpy as np
import pytest
import torch
from helpers.png import write_png
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as TF

from turboloader._native import _mask
from turboloader.data.fields import _decode_image
from turboloader.decode.mask import png_mask_header, png_masks_nearest
from turboloader.transforms.annotations import nearest_maps
from turboloader.transforms._batch import Geometry

KINDS = [(0, 1), (0, 2), (0, 4), (0, 8), (0, 16), (3, 1), (3, 2), (3, 4), (3, 8)]


def random_values(rng, h, w, depth, *, runs=True):
    top = (1 << depth) - 1
    if not runs:
        return rng.integers(0, top + 1, (h, w))
    v = np.zeros((h, w), np.int64)   # a few rectangles, as a class map has
    for _ in range(4):
        y0, x0 = int(rng.integers(0, h)), int(rng.integers(0, w))
        v[y0:int(rng.integers(y0, h) + 1), x0:int(rng.integers(x0, w) + 1)] = \
            int(rng.integers(0, top + 1))
    return v


def random_geometry(rng, h, w, oh, ow, crop_first):
    """A Geometry of one row, and torchvision's version of it on a Mask."""
    axes = np.zeros((1, 2, 4), np.int64)
    if crop_first:   # RandomResizedCrop: crop [top, top + ch) then resize to (oh, ow)
        ch, cw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
        top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        axes[0, 0], axes[0, 1] = (top, 0, ch, oh), (left, 0, cw, ow)

        def tv(m):
            return TF.resized_crop(m, top, left, ch, cw, [oh, ow])
    else:            # Resize to (rh, rw), then a crop of (oh, ow) at (top, left)
        rh, rw = int(rng.integers(oh, 3 * h + oh)), int(rng.integers(ow, 3 * w + ow))
        top, left = int(rng.integers(0, rh - oh + 1)), int(rng.integers(0, rw - ow + 1))
        axes[0, 0], axes[0, 1] = (0, top, h, rh), (0, left, w, rw)

        def tv(m):
            return TF.crop(TF.resize(m, [rh, rw]), top, left, oh, ow)
    return Geometry(axes, crop_first, True), tv


def pillow_mask(data):
    t = _decode_image(data, "test")
    return tv_tensors.Mask(t[0] if t.shape[0] == 1 else t)


@pytest.mark.parametrize("colour, depth", KINDS)
def test_png_masks_equal_pillow_then_torchvision(colour, depth):
    rng = np.random.default_rng(depth * 10 + colour)
    for trial in range(8):
        h, w = int(rng.integers(1, 70)), int(rng.integers(1, 90))
        oh, ow = int(rng.integers(1, 50)), int(rng.integers(1, 60))
        values = random_values(rng, h, w, depth, runs=trial % 3 != 0)
        level, strategy = [(6, zlib.Z_DEFAULT_STRATEGY), (0, zlib.Z_DEFAULT_STRATEGY),
                           (1, zlib.Z_FIXED), (9, zlib.Z_RLE)][trial % 4]
        data = write_png(values, colour, depth, level=level, strategy=strategy,
                         split=1 + trial % 3, rng=rng)
        head = png_mask_header(data)
        assert head is not None and (head.height, head.width) == (h, w)
        ref = pillow_mask(data)
        geometry, tv = random_geometry(rng, h, w, oh, ow, crop_first=trial % 2 == 0)
        flip = np.array([trial % 4 < 2])
        ymap, xmap = nearest_maps(geometry, np.array([0]), flip, (oh, ow))
        out8, out16, ok = png_masks_nearest([head], ymap, xmap)
        assert ok.all()
        got = torch.from_numpy(out16[0].astype(np.int64) if depth == 16 else out8[0])
        want = tv(ref)
        if flip[0]:
            want = TF.horizontal_flip(want)
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        assert torch.equal(got, want.as_subclass(torch.Tensor)), (colour, depth, trial)


def test_nearest_maps_are_torchs_at_awkward_scales():
    # ratios whose float32 products land near integers (torch's float32 floor)
    rng = np.random.default_rng(7)
    for _ in range(60):
        h, w = int(rng.integers(1, 500)), int(rng.integers(1, 500))
        oh, ow = int(rng.integers(1, 300)), int(rng.integers(1, 300))
        crop_first = bool(rng.integers(0, 2))
        if not crop_first and (oh > 3 * h or ow > 3 * w):
            continue
        geometry, tv = random_geometry(rng, h, w, oh, ow, crop_first)
        idx = torch.arange(h * w, dtype=torch.int32).reshape(h, w).float()
        want = tv(tv_tensors.Mask(idx)).as_subclass(torch.Tensor).long()
        ymap, xmap = nearest_maps(geometry, np.array([0]), np.array([False]), (oh, ow))
        got = torch.from_numpy(ymap[0].astype(np.int64)[:, None] * w + xmap[0][None, :])
        assert torch.equal(got, want), (h, w, oh, ow, crop_first)


@pytest.mark.parametrize("strategy", [zlib.Z_DEFAULT_STRATEGY, zlib.Z_FIXED, zlib.Z_RLE,
                                      zlib.Z_HUFFMAN_ONLY])
def test_inflate_head_equals_zlib(strategy):
    rng = np.random.default_rng(strategy)
    for trial in range(12):
        n = int(rng.integers(0, 60_000))
        kind = trial % 3
        if kind == 0:
            data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        elif kind == 1:
            data = np.repeat(rng.integers(0, 4, n // 50 + 1, dtype=np.uint8),
                             rng.integers(1, 300, n // 50 + 1)).tobytes()
        else:
            data = bytes(rng.integers(0, 8, n, dtype=np.uint8) * 37)
        level = int(rng.integers(0, 10))
        c = zlib.compressobj(level, zlib.DEFLATED, int(rng.integers(9, 16)), 8, strategy)
        stream = c.compress(data) + c.flush()
        for take in {len(data), int(rng.integers(0, len(data) + 1))}:
            out = np.zeros(take, np.uint8)
            assert _mask.inflate_head(np.frombuffer(stream, np.uint8), out) == _mask.OK
            assert out.tobytes() == data[:take]
        if data:   # asking for more than the stream holds
            out = np.zeros(len(data) + 1, np.uint8)
            assert _mask.inflate_head(np.frombuffer(stream, np.uint8), out) == _mask.ESHORT


def test_hostile_streams_end_in_a_status():
    """Truncated, bit-flipped and random streams: a status (or, where the damaged stream
    still inflates, zlib's bytes), never a read past the input or a write past the output."""
    rng = np.random.default_rng(3)
    data = np.repeat(rng.integers(0, 5, 3000, dtype=np.uint8), rng.integers(1, 40, 3000))
    stream = zlib.compress(data.tobytes(), 9)
    arr = np.frombuffer(stream, np.uint8)
    for cut in range(0, len(stream), 7):   # truncated
        out = np.zeros(len(data), np.uint8)
        assert _mask.inflate_head(arr[:cut].copy(), out) in (_mask.ESHORT, _mask.EZLIB)
    for _ in range(200):                   # bit flips
        bad = arr.copy()
        for _ in range(int(rng.integers(1, 4))):
            bad[int(rng.integers(0, len(bad)))] ^= 1 << int(rng.integers(0, 8))
        take = int(rng.integers(1, len(data) + 1))
        out = np.zeros(take + 64, np.uint8)
        out[take:] = 0xAB                  # a guard past the requested bytes
        st = _mask.inflate_head(bad, out[:take])
        assert st in (_mask.OK, _mask.ESHORT, _mask.EZLIB)
        assert (out[take:] == 0xAB).all()
        if st == _mask.OK:
            try:
                ref = zlib.decompressobj().decompress(bad.tobytes(), take)
            except zlib.error:
                continue   # zlib reads further before it fails (e.g. the checksum)
            if len(ref) == take:
                assert out[:take].tobytes() == ref
    for _ in range(300):                   # noise after a valid header
        noise = np.concatenate([[0x78, 0x9C], rng.integers(0, 256, int(rng.integers(0, 300)))])
        out = np.zeros(int(rng.integers(1, 5000)), np.uint8)
        assert _mask.inflate_head(noise.astype(np.uint8), out) in (
            _mask.OK, _mask.ESHORT, _mask.EZLIB)


def _zlib_whole(stream, n):
    """zlib's verdict on a stream that should inflate to ``n`` bytes: its bytes, or None
    (an error, a stream that does not end, or another length)."""
    d = zlib.decompressobj()
    try:
        got = d.decompress(stream)
    except zlib.error:
        return None
    return got if d.eof and len(got) == n else None


def test_inflate_whole_refuses_what_zlib_refuses():
    """inflate_whole (the batch path's) reads the stream to its end and checks the Adler-32:
    OK exactly where zlib inflates the stream to the same bytes, on intact, bit-flipped,
    truncated, re-checksummed and over-long streams."""
    rng = np.random.default_rng(11)
    data = np.repeat(rng.integers(0, 5, 2000, dtype=np.uint8),
                     rng.integers(1, 40, 2000)).tobytes()
    streams = [zlib.compress(data, level) for level in (0, 1, 6, 9)]
    c = zlib.compressobj(6, zlib.DEFLATED, 15, 8, zlib.Z_FIXED)
    streams.append(c.compress(data) + c.flush())
    cases = []
    for stream in streams:
        cases += [stream, stream[:-4], stream[:-1], stream + b"trailing",
                  stream[:-4] + bytes(4), stream[:-4] + zlib.adler32(data[:-1]).to_bytes(4, "big")]
        raw = bytearray(data)
        raw[len(raw) // 2] ^= 1    # a byte changed under the original checksum
        cases.append(zlib.compress(bytes(raw), 9)[:-4] + stream[-4:])
        for _ in range(60):
            bad = bytearray(stream)
            bad[int(rng.integers(2, len(bad)))] ^= 1 << int(rng.integers(0, 8))
            cases.append(bytes(bad))
    for stream in cases:
        for n in (len(data), len(data) - 1, len(data) + 1):
            out = np.zeros(n + 16, np.uint8)
            out[n:] = 0xAB
            st = _mask.inflate_whole(np.frombuffer(stream, np.uint8), out[:n])
            assert (out[n:] == 0xAB).all()
            ref = _zlib_whole(stream, n)
            if ref is None:
                assert st in (_mask.ESHORT, _mask.EZLIB), (n, len(data))
            else:
                assert st == _mask.OK and out[:n].tobytes() == ref


def _one(data, oh=5, ow=6):
    head = png_mask_header(data)
    ymap = np.zeros((1, oh), np.int32)
    xmap = np.zeros((1, ow), np.int32)
    return head, ymap, xmap


def test_bad_filter_bytes_and_maps_are_statuses():
    values = np.arange(48).reshape(6, 8) % 7
    data = write_png(values, 0, 8, filters=[0])
    head, ymap, xmap = _one(data)
    ymap[0] = np.arange(5)
    raw = bytearray(zlib.decompress(head.stream))
    raw[3 * 9] = 5                          # row 3's filter byte: no such filter
    bad = head._replace(stream=zlib.compress(bytes(raw)))
    out8 = np.zeros((1, 5, 6), np.uint8)
    out16 = np.zeros((0, 5, 6), np.uint16)
    info = np.array([[8, 6, 8, 1]], np.int64)
    assert _mask.png_masks_nearest([bad.stream], info, ymap, xmap, out8, out16)[0] == \
        _mask.EFILTER
    assert _mask.png_masks_nearest([head.stream], info, ymap, xmap, out8, out16)[0] == _mask.OK
    for y, x in (([0, 1, 2, 3, 6], None), (None, [0, 8, 0, 0, 0, 0]), ([0, 2, 1, 3, 4], None),
                 ([-1, 0, 0, 0, 0], None)):
        ym, xm = ymap.copy(), xmap.copy()
        if y is not None:
            ym[0] = y
        if x is not None:
            xm[0] = x
        assert _mask.png_masks_nearest([head.stream], info, ym, xm, out8, out16)[0] == \
            _mask.EARG
    with pytest.raises(ValueError):
        _mask.png_masks_nearest([head.stream], info, ymap, xmap[:, :3].copy(), out8, out16)
    with pytest.raises(ValueError):   # a 16-bit mask without its output
        _mask.png_masks_nearest([head.stream], np.array([[4, 6, 16, 1]], np.int64), ymap,
                                xmap, out8, out16)
    with pytest.raises(TypeError):
        _mask.png_masks_nearest([bytearray(head.stream)], info, ymap, xmap, out8, out16)


def test_pngs_this_path_leaves_to_pillow():
    """What png_mask_header does not take (None): Pillow's path then decodes it or raises."""
    v = np.zeros((9, 11), np.int64)
    good = write_png(v, 0, 8)
    assert png_mask_header(good) is not None
    rgb = io.BytesIO()
    Image.fromarray(np.zeros((9, 11, 3), np.uint8)).save(rgb, "PNG")
    bad_crc = bytearray(good)
    bad_crc[-20] ^= 1                       # inside the IDAT chunk: its CRC no longer holds
    for data in (write_png(v, 0, 8, interlace=1), rgb.getvalue(), bytes(bad_crc),
                 good[:-12],                # no IEND
                 good[:30], b"", b"GIF89a", encode_jpeg()):
        assert png_mask_header(data) is None


def encode_jpeg():
    buf = io.BytesIO()
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def test_concurrent_batches_agree():
    """Four threads decoding batches at once (the kernel runs without the GIL)."""
    rng = np.random.default_rng(11)
    heads, refs = [], []
    for k in range(12):
        colour, depth = KINDS[k % len(KINDS)]
        if depth == 16:
            colour, depth = 0, 8
        v = random_values(rng, 120, 150, depth)
        heads.append(png_mask_header(write_png(v, colour, depth, rng=rng)))
    geometry = Geometry(np.tile(np.array([[[3, 0, 100, 64], [7, 0, 130, 48]]]), (12, 1, 1)),
                        True, True)
    ymap, xmap = nearest_maps(geometry, np.arange(12), np.arange(12) % 2 == 0, (64, 48))
    ref = png_masks_nearest(heads, ymap, xmap)[0]
    errors = []

    def run():
        try:
            for _ in range(20):
                out8, _, ok = png_masks_nearest(heads, ymap, xmap)
                assert ok.all() and np.array_equal(out8, ref)
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
