"""Baseline JPEGs with any sampling factors, written in NumPy (Pillow writes only 4:4:4, 4:2:2
and 4:2:0; libjpeg's cjpeg is not on every machine).

The encoder is the textbook one (ITU T.81: level shift, the 8 x 8 DCT-II, quantisation, zigzag,
DC differences and AC run lengths, Huffman codes with byte stuffing, restart markers). Its
quantisation and Huffman tables are taken from a JPEG Pillow writes (the standard tables of
Annex K), so the files look like any camera's. Each component is sampled from the full image by
averaging (integral ratios) or nearest sampling (other ratios), so fractional layouts can be
written too (libjpeg refuses to decode those).

Also loaded by file path from ``tests/packaging/wheel_smoke.py`` (an installed wheel, away from
the source tree): NumPy and Pillow only, no test imports.
"""

import io

import numpy as np
from PIL import Image

__all__ = ["SAMPLINGS", "ODD_SAMPLINGS", "pattern", "sampling_jpeg", "sampling_name",
           "window_mismatches", "windows"]

# every luma factor 1x1..4x4 with the chroma at 1x1, 2x1 or 1x2 that a baseline frame allows
# (an interleaved MCU holds at most 10 blocks: T.81 B.2.3), as ((Y), (Cb), (Cr)) (h, v) pairs
SAMPLINGS = tuple(
    ((lh, lv), c, c)
    for lh in (1, 2, 3, 4) for lv in (1, 2, 3, 4) for c in ((1, 1), (2, 1), (1, 2))
    if lh * lv + 2 * c[0] * c[1] <= 10)
# layouts real writers produce less often: the chroma components differing, chroma finer than
# luma, one component (grey with factors), and a non-integral ratio (legal in T.81; libjpeg
# refuses it: a typed error, not pixels)
ODD_SAMPLINGS = (
    ((1, 1), (2, 1), (1, 2)),
    ((2, 2), (1, 1), (2, 1)),
    ((1, 1), (2, 2), (2, 2)),
    ((2, 1), (1, 2), (1, 1)),
    ((1, 2), (1, 1), (1, 2)),
    ((3, 1), (1, 1), (3, 1)),
    ((2, 2), (2, 1), (1, 1)),
    ((2, 2),),
    ((4, 1),),
    ((3, 2), (2, 1), (2, 1)),   # non-integral: 3 / 2
)

_ZIGZAG = np.array([
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27,
    20, 13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
    58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63])
_U = np.arange(8)
_DCT = np.sqrt(2 / 8) * np.cos((2 * _U[None, :] + 1) * _U[:, None] * np.pi / 16)
_DCT[0] /= np.sqrt(2)

_TABLES = {}


def sampling_name(sampling):
    """``"Y2x1-C1x1-1x1"``: a sampling's name for test ids and messages."""
    head = "Y%dx%d" % sampling[0]
    return head + "".join("-C%dx%d" % s for s in sampling[1:])


def pattern(height, width, seed=0):
    """A ``(height, width, 3)`` uint8 image with smooth gradients, sharp colour edges and
    noise: chroma detail at every scale, so wrong upsampling shows."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    img = np.empty((height, width, 3))
    img[..., 0] = 128 + 100 * np.sin(x / 5.0 + y / 13.0)
    img[..., 1] = 128 + 100 * np.cos(y / 4.0 - x / 17.0)
    img[..., 2] = np.where((x // 6 + y // 5) % 2 == 0, 30, 220)
    img += rng.normal(0, 12, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _tables(quality):
    """``(dqt, dht)``: the DQT (two tables) and DHT (DC/AC 0 and 1) segments Pillow writes at
    ``quality``, as bytes, and the quantisation tables as ``(2, 64)`` natural-order arrays."""
    if quality in _TABLES:
        return _TABLES[quality]
    buf = io.BytesIO()
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(buf, "JPEG", quality=quality,
                                                          subsampling=0)
    data = buf.getvalue()
    pos, dqt, dht = 2, b"", b""
    q = np.zeros((2, 64), np.int64)
    while data[pos] == 0xFF and data[pos + 1] not in (0xDA, 0xD9):
        marker = data[pos + 1]
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        seg = data[pos:pos + 2 + length]
        if marker == 0xDB:
            dqt += seg
            body = seg[4:]
            while body:
                assert body[0] >> 4 == 0, "8-bit tables"
                q[body[0] & 15][_ZIGZAG] = np.frombuffer(body[1:65], np.uint8)
                body = body[65:]
        elif marker == 0xC4:
            dht += seg
        pos += 2 + length
    codes = {}
    body = dht
    while body:
        length = int.from_bytes(body[2:4], "big")
        seg = body[4:2 + length]
        while seg:
            tc, th = seg[0] >> 4, seg[0] & 15
            counts = seg[1:17]
            vals = seg[17:17 + sum(counts)]
            code, k, table = 0, 0, {}
            for bits_len in range(1, 17):
                for _ in range(counts[bits_len - 1]):
                    table[vals[k]] = (code, bits_len)
                    code += 1
                    k += 1
                code <<= 1
            codes[(tc, th)] = table
            seg = seg[17 + sum(counts):]
        body = body[2 + length:]
    _TABLES[quality] = (dqt, dht, q, codes)
    return _TABLES[quality]


class _Bits:
    def __init__(self):
        self.out = bytearray()
        self.acc = 0
        self.n = 0

    def put(self, value, length):
        self.acc = (self.acc << length) | (value & ((1 << length) - 1))
        self.n += length
        while self.n >= 8:
            self.n -= 8
            byte = (self.acc >> self.n) & 0xFF
            self.out.append(byte)
            if byte == 0xFF:
                self.out.append(0)
        self.acc &= (1 << self.n) - 1

    def flush(self):
        if self.n:
            self.put((1 << (8 - self.n)) - 1, 8 - self.n)


def _category(v):
    return int(abs(int(v))).bit_length()


def _plane(full, h, v, hmax, vmax, bw, bh):
    """The component's samples: ``full`` (padded to the MCU grid) reduced by hmax/h x vmax/v,
    cropped to ``bh`` x ``bw`` blocks."""
    H, W = full.shape
    ch, cw = H * v // vmax, W * h // hmax
    if hmax % h == 0 and vmax % v == 0:
        fy, fx = vmax // v, hmax // h
        plane = full.reshape(ch, fy, cw, fx).mean(axis=(1, 3))
    else:
        ys = ((np.arange(ch) + 0.5) * vmax / v).astype(np.int64).clip(0, H - 1)
        xs = ((np.arange(cw) + 0.5) * hmax / h).astype(np.int64).clip(0, W - 1)
        plane = full[ys][:, xs]
    return plane[:bh * 8, :bw * 8]


def sampling_jpeg(rgb, sampling, *, quality=90, restart_interval=0):
    """A baseline JPEG of ``rgb`` (``(H, W, 3)`` uint8) with the sampling factors
    ``sampling``: ``((h, v),)`` for one component (grey: the image's luma) or three pairs
    (Y, Cb, Cr), each factor 1..4. ``restart_interval``: MCUs between restart markers (0:
    none). The frame's MCU may hold more than the 10 blocks T.81 allows (libjpeg then refuses
    the file): the caller picks the layouts."""
    rgb = np.asarray(rgb, np.float64)
    H, W = rgb.shape[:2]
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    planes = [0.299 * r + 0.587 * g + 0.114 * b,
              -0.168736 * r - 0.331264 * g + 0.5 * b + 128,
              0.5 * r - 0.418688 * g - 0.081312 * b + 128][:len(sampling)]
    hmax = max(s[0] for s in sampling)
    vmax = max(s[1] for s in sampling)
    dqt, dht, qt, codes = _tables(quality)
    ncomp = len(sampling)
    tq = [0] + [1] * (ncomp - 1)
    if ncomp == 1:   # a single-component scan is not interleaved: one block per MCU
        mcux, mcuy = -(-W // 8), -(-H // 8)   # the component is the whole image
        grid = [(mcux, mcuy)]
        padw, padh = -(-W // (8 * hmax)) * 8 * hmax, -(-H // (8 * vmax)) * 8 * vmax
    else:
        mcux, mcuy = -(-W // (8 * hmax)), -(-H // (8 * vmax))
        grid = [(mcux * h, mcuy * v) for h, v in sampling]
        padw, padh = mcux * 8 * hmax, mcuy * 8 * vmax
    coefs = []
    for ci, ((h, v), plane) in enumerate(zip(sampling, planes)):
        full = np.pad(plane, ((0, padh - H), (0, padw - W)), mode="edge")
        bw, bh = grid[ci]
        comp = _plane(full, h, v, hmax, vmax, bw, bh) - 128
        blocks = comp.reshape(bh, 8, bw, 8).transpose(0, 2, 1, 3)
        dct = _DCT @ blocks @ _DCT.T
        q = np.round(dct.reshape(bh, bw, 64) / qt[tq[ci]]).astype(np.int64)
        coefs.append(q[..., _ZIGZAG])

    bits = _Bits()
    pred = [0] * ncomp
    dc = [codes[(0, t)] for t in tq]
    ac = [codes[(1, t)] for t in tq]

    def block(ci, zz):
        diff = int(zz[0]) - pred[ci]
        pred[ci] = int(zz[0])
        s = _category(diff)
        bits.put(*dc[ci][s])
        if s:
            bits.put(diff if diff > 0 else diff - 1, s)
        run = 0
        for k in range(1, 64):
            c = int(zz[k])
            if c == 0:
                run += 1
                continue
            while run > 15:
                bits.put(*ac[ci][0xF0])
                run -= 16
            s = _category(c)
            bits.put(*ac[ci][(run << 4) | s])
            bits.put(c if c > 0 else c - 1, s)
            run = 0
        if run:
            bits.put(*ac[ci][0x00])

    mcus = [(mx, my) for my in range(mcuy) for mx in range(mcux)]
    for n, (mx, my) in enumerate(mcus):
        if restart_interval and n and n % restart_interval == 0:
            bits.flush()
            bits.out += bytes([0xFF, 0xD0 + (n // restart_interval - 1) % 8])
            pred = [0] * ncomp
        if ncomp == 1:
            block(0, coefs[0][my, mx])
            continue
        for ci, (h, v) in enumerate(sampling):
            for by in range(v):
                for bx in range(h):
                    block(ci, coefs[ci][my * v + by, mx * h + bx])
    bits.flush()

    sof = bytes([8]) + H.to_bytes(2, "big") + W.to_bytes(2, "big") + bytes([ncomp])
    for ci, (h, v) in enumerate(sampling):
        sof += bytes([ci + 1, (h << 4) | v, tq[ci]])
    sos = bytes([ncomp])
    for ci in range(ncomp):
        sos += bytes([ci + 1, (tq[ci] << 4) | tq[ci]])
    sos += bytes([0, 63, 0])

    def segment(marker, body):
        return bytes([0xFF, marker]) + (len(body) + 2).to_bytes(2, "big") + body

    jfif = segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
    dri = segment(0xDD, restart_interval.to_bytes(2, "big")) if restart_interval else b""
    return (b"\xff\xd8" + jfif + dqt + segment(0xC0, sof) + dht + dri + segment(0xDA, sos)
            + bytes(bits.out) + b"\xff\xd9")


def windows(dw, dh, mcu_w, mcu_h, seed=0, n_random=4):
    """``(x, y, w, h)`` windows of a ``dw`` x ``dh`` decoded image: at each edge, in the
    middle, one column and one row, edges on and 1..3 pixels either side of the MCU boundaries
    (``mcu_w`` x ``mcu_h`` decoded pixels: the upsampler's context), and ``n_random`` random."""
    ww, wh = max(1, dw // 3), max(1, dh // 3)
    out = {(0, 0, ww, wh), (dw - ww, 0, ww, wh), (0, dh - wh, ww, wh),
           (dw - ww, dh - wh, ww, wh), (dw // 3, dh // 3, ww, wh), (dw // 2, 0, 1, dh),
           (0, dh // 2, dw, 1), (1, 0, dw - 1, dh), (0, 0, dw - 1, dh)}
    for d in (-3, -1, 0, 1, 3):
        x0 = min(max(0, mcu_w + d), dw - 1)
        y0 = min(max(0, mcu_h + d), dh - 1)
        x1 = min(max(x0 + 1, 3 * mcu_w + d), dw)
        y1 = min(max(y0 + 1, 3 * mcu_h + d), dh)
        out.add((x0, y0, x1 - x0, y1 - y0))
    rng = np.random.default_rng(seed)
    for _ in range(n_random):
        w, h = int(rng.integers(1, dw + 1)), int(rng.integers(1, dh + 1))
        out.add((int(rng.integers(0, dw - w + 1)), int(rng.integers(0, dh - h + 1)), w, h))
    return sorted(out)


def window_mismatches(jpeg, data, *, scales=range(1, 9), flags=(0,), restart=False,
                      n_random=4):
    """The windows of ``data`` that turboloader's native decoder (``jpeg``: the module
    ``turboloader._native._jpeg``) does not decode to the same pixels as the same window of
    its full decode: a list of ``(scale, flags, window, max difference)``, empty when every
    one matches. ``restart``: decode windows through the restart-interval path (``data`` then
    has restart markers). The full decode must succeed (the caller checks refusals)."""
    buf = np.frombuffer(data, np.uint8)
    header = jpeg.read_header(buf)
    W, H = header[:2]
    hmax, vmax = max(header[5]), max(header[6])
    bad = []
    for k in scales:
        dw, dh = (W * k + 7) // 8, (H * k + 7) // 8
        for f in flags:
            full = np.zeros((dh, dw, 3), np.uint8)
            jpeg.decode_into(buf, full, scale_num=k, flags=f)
            for x, y, w, h in windows(dw, dh, hmax * k, vmax * k, seed=k, n_random=n_random):
                # a non-zero fill: a pixel the decoder does not write shows
                out = np.full((h, w, 3), 77, np.uint8)
                jpeg.decode_into(buf, out, scale_num=k, crop_x=x, crop_y=y, crop_w=w,
                                 crop_h=h, flags=f, restart=restart)
                ref = full[y:y + h, x:x + w]
                if not np.array_equal(out, ref):
                    diff = int(np.abs(out.astype(int) - ref).max())
                    bad.append((k, f, (x, y, w, h), diff))
    return bad
