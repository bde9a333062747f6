"""Batch-at-a-time execution of a fused :class:`~turboloader.transforms._plan.Plan`.

Python makes every decision once per batch, with NumPy, and one native call without the GIL
runs the whole batch on a :class:`BatchRunner`'s threads::

    keys = sample_keys(seed, epoch, indices)            # np.uint64[n]
    params = plan.prepare_batch(sources, keys)           # headers + every random draw
    result = plan.run_batch(sources, params, batch)      # decode/resample/colour/flip/CHW
    # result.status[i]: OK (row i of batch written), GENERIC or FAILED (result.errors[i])

``sources`` holds JPEG files (bytes, memoryview, 1-D uint8 array) and/or decoded
``(H, W, 3)`` uint8 arrays (e.g. cache hits), row by row.

Equivalence (tested bit for bit): row i of ``run_batch`` equals
``plan.from_jpeg(sources[i], rng=SampleRandom(keys[i]))`` (or ``plan.from_array(sources[i],
rng=..., source_size=source_sizes[i])`` for an array). ``prepare_batch`` replays exactly the
draws ``Plan._draw`` makes through the transforms' ``make_params`` with a
:class:`~turboloader.transforms._random.SampleRandom` (counter-based, so draw k of every
sample is one NumPy expression), with the same float operations in the same order
(``math.exp`` for RandomResizedCrop's aspect ratio, IEEE ``sqrt``, round-half-even), then
the same DCT scale and decode window as the per-sample path. Parameters of types the
vectorized replay does not cover (e.g. a NumPy float32 ``scale``) are drawn row by row by
the transforms themselves, so the equivalence never depends on them.

Row status codes (``BatchParams.status``, ``BatchResult.status``):

* ``OK`` (0): ready to run / written.
* ``GENERIC`` (1): the fused path cannot do this row (a crop larger than its image): run
  ``plan.from_jpeg`` / ``plan.from_array`` (the generic path) for it with its
  ``sample_rng``; nothing was drawn or written for it here.
* ``FAILED`` (2): bad data or arguments for this row; ``errors[i]`` is the exception
  (``DecodeError`` with libjpeg's message, ``ValueError``), not raised: the caller adds
  notes (shard, key, offset) and applies its failure policy.

Exceptions raised by these functions mean a bad call (wrong types, shapes, a mismatched
``params``), never a bad sample.

Threads: ``run_batch`` without ``runner`` uses a 1-thread runner private to the calling
thread (no pool threads; concurrent callers never wait for each other). A shared
``BatchRunner(threads=k)`` may be used from several threads; its batches then run one at a
time. Scratch memory is per runner thread and grows to the largest sample seen.
"""

import math
import operator
import threading

import numpy as np
import torch

from turboloader._native._fused import MAX_COLOUR_OPS, BatchRunner
from turboloader.decode.jpeg import DEFAULT_MAX_PIXELS, _as_buffer, _max_pixels
from turboloader.transforms._colour import ColorJitter
from turboloader.transforms._geometry import (
    CenterCrop, RandomCrop, RandomHorizontalFlip, RandomResizedCrop, Resize,
)
from turboloader.transforms._random import _GAMMA, _MASK64, SampleRandom, _as_u64, _mix_np, _UGAMMA

__all__ = [
    "FAILED",
    "GENERIC",
    "OK",
    "BatchParams",
    "BatchResult",
    "BatchRunner",
    "default_runner",
    "out_view",
    "prepare_batch",
    "run_batch",
]

OK = 0
GENERIC = 1
FAILED = 2

JPEG = 0
ARRAY = 1

# Half-width of each filter's kernel at scale 1 (nearest, bilinear, bicubic): fused.decode_window
_SUPPORT = {0: 0.5, 1: 1.0, 2: 2.0}
_S11, _S32, _M32 = np.uint64(11), np.uint64(32), np.uint64(0xFFFFFFFF)
_local = threading.local()


def default_runner():
    """The calling thread's own 1-thread :class:`BatchRunner` (made on first use)."""
    runner = getattr(_local, "runner", None)
    if runner is None:
        runner = _local.runner = BatchRunner(threads=1)
    return runner


class BatchParams:
    """Everything :meth:`Plan.run_batch` needs for a batch, drawn by :meth:`Plan.prepare_batch`.

    Attributes (arrays have one row per sample):
        n: number of samples.
        status: ``int32``: ``OK``, ``GENERIC`` or ``FAILED`` (module docstring).
        errors: list: the exception of each ``FAILED`` row, else None.
        kind: ``uint8``: 0 a JPEG source, 1 a decoded array.
        source_size: ``int64 (n, 2)``: the (height, width) the parameters were drawn on.
        out_size: ``int32 (n, 2)``: output (height, width).
        scale_num: ``int32``: DCT scale numerator k (decode at k/8; 8 for arrays).
        full: ``uint8``: the window is the whole (scaled) image.
        window: ``int32 (n, 4)``: ``(x, y, width, height)`` in decoded pixels.
        box: ``float64 (n, 4)``: the source box ``(x0, y0, x1, y1)`` inside the window.
        flip: ``uint8``: mirror the output.
        n_ops, ops, factors: ColorJitter operations in order (``int32 (n, 8)`` ids as
            torchvision's ``fn_idx``, ``float64 (n, 8)`` factors), ``n_ops`` of them.
        counter: ``int64``: draws consumed per sample (rows drawn: OK ones).
    """

    __slots__ = ("n", "status", "errors", "kind", "source_size", "out_size", "scale_num",
                 "full", "window", "box", "flip", "n_ops", "ops", "factors", "counter")

    def __init__(self, n):
        self.n = n
        self.status = np.zeros(n, np.int32)
        self.errors = [None] * n
        self.kind = np.zeros(n, np.uint8)
        self.source_size = np.ones((n, 2), np.int64)
        self.out_size = np.ones((n, 2), np.int32)
        self.scale_num = np.full(n, 8, np.int32)
        self.full = np.zeros(n, np.uint8)
        self.window = np.zeros((n, 4), np.int32)
        self.box = np.zeros((n, 4), np.float64)
        self.flip = np.zeros(n, np.uint8)
        self.n_ops = np.zeros(n, np.int32)
        self.ops = np.zeros((n, MAX_COLOUR_OPS), np.int32)
        self.factors = np.zeros((n, MAX_COLOUR_OPS), np.float64)
        self.counter = np.zeros(n, np.int64)

    def fail(self, i, error):
        """Mark row ``i`` FAILED with ``error`` (an exception instance)."""
        self.status[i] = FAILED
        self.errors[i] = error

    def __repr__(self):
        counts = np.bincount(self.status, minlength=3)
        return (f"BatchParams(n={self.n}, ok={counts[OK]}, generic={counts[GENERIC]}, "
                f"failed={counts[FAILED]})")


class BatchResult:
    """What :meth:`Plan.run_batch` did, row by row.

    Attributes:
        status: ``int32[n]``: ``OK`` (the row of ``out`` was written), else ``GENERIC`` or
            ``FAILED`` (not written; see the module docstring).
        errors: list of the exception for each ``FAILED`` row (else None), not raised.
        warnings: list of libjpeg's warning text for rows that decoded with recovered
            corruption (``DecodeWarning`` material; else None). Only when not ``strict``.
        nogil_seconds: wall time of the native block that ran without the GIL (the rest
            of the call held it: for profiling).
    """

    __slots__ = ("status", "errors", "warnings", "nogil_seconds")

    def __init__(self, status, errors, warnings, nogil_seconds=0.0):
        self.status = status
        self.errors = errors
        self.warnings = warnings
        self.nogil_seconds = nogil_seconds

    @property
    def n(self):
        return len(self.status)

    def __repr__(self):
        counts = np.bincount(self.status, minlength=3)
        return (f"BatchResult(n={self.n}, ok={counts[OK]}, generic={counts[GENERIC]}, "
                f"failed={counts[FAILED]})")


# -- the counter-based draws, vectorized ----------------------------------------------------

class _Draws:
    """Each row's SampleRandom, replayed: ``next(mask)`` is the next 64-bit draw of every row
    (rows where mask is False do not advance)."""

    def __init__(self, keys):
        self.keys = keys
        self.ctr = np.zeros(len(keys), np.uint64)

    def next(self, mask=None):
        x = _mix_np(self.keys + self.ctr * _UGAMMA)
        if mask is None:
            self.ctr += np.uint64(1)
        else:
            self.ctr += mask.astype(np.uint64)
        return x


# k * gamma mod 2**64 for the draw numbers RandomResizedCrop's attempts use (exact offsets)
_OFFSETS = np.array([(k * _GAMMA) & _MASK64 for k in range(24)], np.uint64)
_RANDINTS = np.array([[2, 3]], np.int64)


def _u01(x):
    # SampleRandom.random(): (x >> 11) * 2**-53
    return (x >> _S11).astype(np.float64) * (1.0 / 9007199254740992.0)


def _below(x, n):
    # SampleRandom._randbelow(n) = (x * n) >> 64, exactly, for 1 <= n < 2**32
    n = np.asarray(n, np.int64)
    if n.size and (n.min() < 1 or n.max() >= 1 << 32):
        raise AssertionError("n out of the vectorized range")
    return _below_ok(x, n)


def _below_ok(x, n):
    # _below for an int64 n known to be in range (wider values of rows never used wrap)
    n = n.astype(np.uint64)
    return (((x >> _S32) * n + (((x & _M32) * n) >> _S32)) >> _S32).astype(np.int64)


def _plain(*values):
    return all(type(v) in (int, float) for v in values)


def _vectorizable(plan):
    """Whether _draw replays this plan's draws (exactly the classes and parameter types it
    knows); anything else is drawn row by row by Plan._draw itself (_draw_rows), so a grammar
    extension of the planner can never make the two paths disagree."""
    crop, resize = plan._crop, plan._resize
    if type(crop) is RandomResizedCrop:
        if resize is not None or not _plain(*crop.scale, *crop.ratio):
            return False
    elif crop is not None and type(crop) not in (CenterCrop, RandomCrop):
        return False
    if resize is not None and type(resize) is not Resize:
        return False
    for t in plan._post:
        if type(t) is RandomHorizontalFlip:
            if not _plain(t.p):
                return False
        elif type(t) is not ColorJitter:
            return False
    return True


def _rrc(t, HW, d):
    # RandomResizedCrop.make_params for every row: (n, 4) float64 source box (x0, y0, x1,
    # y1). Attempt a uses draws 2a (area) and 2a + 1 (log ratio); on success draws 2a + 2
    # and 2a + 3 are the randints. All 10 attempts are computed for every row at once
    # (attempts past a row's first success change nothing): a few more math.exp calls,
    # far fewer NumPy calls than drawing the rows left over attempt by attempt.
    n = len(HW)
    s0, s1 = t.scale
    l0, l1 = t._log_ratio
    H, W = HW[:, :1], HW[:, 1:]
    area = (H * W).astype(np.float64)
    # draws 0..21 of every row: the 20 the attempts use, and the randints of attempt 9
    X = _mix_np(d.keys[:, None] + _OFFSETS[:22])
    u = _u01(X[:, :20])
    # uniform(a, b) = a + (b - a) * random()
    target = area * (s0 + (s1 - s0) * u[:, 0::2])
    # math.exp, as make_params: NumPy's exp may differ from it in the last bit
    logr = (l0 + (l1 - l0) * u[:, 1::2]).ravel().tolist()
    ratio = np.fromiter(map(math.exp, logr), np.float64, len(logr)).reshape(target.shape)
    h = np.rint(np.sqrt(target / ratio))
    w = np.rint(np.sqrt(target * ratio))
    ok = (h > 0) & (h <= H) & (w > 0) & (w <= W)
    j = ok.argmax(axis=1)   # the first success (0 where none: replaced below)
    rows = np.arange(n)
    hw = np.empty((n, 2), np.int64)
    hw[:, 0], hw[:, 1] = h[rows, j], w[rows, j]
    c = 2 * j
    x = X[rows[:, None], c[:, None] + _RANDINTS]
    yx = _below_ok(x, HW - hw + 1)   # randint(0, H - h), (0, W - w)
    d.ctr[:] = c + 4
    miss = ~ok[rows, j]
    if miss.any():
        # torchvision's fallback after 10 failed attempts (20 draws): a centre crop
        todo = np.flatnonzero(miss)
        d.ctr[todo] = 20
        Hm, Wm = HW[todo, 0], HW[todo, 1]
        Hf, Wf = Hm.astype(np.float64), Wm.astype(np.float64)
        in_ratio = Wf / Hf
        rmin, rmax = min(t.ratio), max(t.ratio)
        fh, fw = Hm.copy(), Wm.copy()
        narrow = in_ratio < rmin
        wide = ~narrow & (in_ratio > rmax)
        fh[narrow] = np.rint(Wf[narrow] / rmin).astype(np.int64)
        fw[wide] = np.rint(Hf[wide] * rmax).astype(np.int64)
        yx[todo] = np.stack([(Hm - fh) // 2, (Wm - fw) // 2], axis=1)
        hw[todo] = np.stack([fh, fw], axis=1)
    tl = yx[:, ::-1]
    return np.concatenate([tl, tl + hw[:, ::-1]], axis=1).astype(np.float64)


def _jitter(t, d, n):
    # ColorJitter.make_params + ColorJitter.ops for every row: (ids, factors), (n, k) each
    perm = np.tile(np.arange(4, dtype=np.int64), (n, 1))
    rows = np.arange(n)
    for i in (3, 2, 1):  # random.Random.shuffle: Fisher-Yates from the end
        j = _below(d.next(), i + 1)
        pi, pj = perm[:, i].copy(), perm[rows, j]
        perm[:, i] = pj
        perm[rows, j] = pi
    ranges = (t.brightness, t.contrast, t.saturation, t.hue)
    table = np.zeros((n, 4), np.float64)
    for fi, r in enumerate(ranges):
        if r is not None:
            table[:, fi] = r[0] + (r[1] - r[0]) * _u01(d.next())
    is_set = np.array([r is not None for r in ranges])
    k = int(is_set.sum())
    ids = perm[is_set[perm]].reshape(n, k)
    return ids, np.take_along_axis(table, ids, axis=1)


class _Drawn:
    """Plan._draw for every row: box (n, 4) float64 source pixels, clip (n,) or a bool for
    all rows, out (n, 2) output size, resized (n, 2) (Resize's size), flip, ops/factors
    (n, 8), n_ops (n,), generic, counter."""

    __slots__ = ("box", "clip", "out", "resized", "flip", "ops", "factors", "n_ops", "generic",
                 "counter")


def _output_size(t, HW):
    # Resize.output_size for every row: (n, 2) int64. Python's int * int / int is the
    # correctly rounded quotient of the exact product, as float64 division of the exact
    # (< 2**53) product is; int() truncates like astype.
    h, w = HW[:, 0], HW[:, 1]
    if t.size is not None and len(t.size) == 2:
        return np.broadcast_to(np.array(t.size, np.int64), HW.shape).copy()
    portrait = w <= h
    short, long = np.minimum(h, w), np.maximum(h, w)
    if t.size is None:
        new_short = (t.max_size * short / long).astype(np.int64)
        new_long = np.full_like(short, t.max_size)
    else:
        s = t.size[0]
        new_short = np.full_like(short, s)
        new_long = (s * long / short).astype(np.int64)
        if t.max_size is not None:
            cap = new_long > t.max_size
            new_short = np.where(cap, (t.max_size * new_short / np.where(cap, new_long, 1))
                                 .astype(np.int64), new_short)
            new_long = np.where(cap, t.max_size, new_long)
    new_h = np.where(portrait, new_long, new_short)
    new_w = np.where(portrait, new_short, new_long)
    return np.stack([new_h, new_w], axis=1)


def _draw(plan, HW, keys):
    n = len(HW)
    r = _Drawn()
    d = _Draws(keys)
    crop, resize = plan._crop, plan._resize
    r.generic = None   # no row needs the generic path
    r.resized = HW
    if isinstance(crop, RandomResizedCrop):
        r.box = _rrc(crop, HW, d)
        r.clip = True
        r.out = np.empty((n, 2), np.int64)
        r.out[:] = crop.size
    else:
        if resize is not None:
            r.resized = _output_size(resize, HW)
        rh, rw = r.resized[:, 0], r.resized[:, 1]
        if crop is not None:
            ch, cw = crop.size
            r.generic = (ch > rh) | (cw > rw)
            if isinstance(crop, CenterCrop):
                top = np.rint((rh - ch) / 2.0).astype(np.int64)
                left = np.rint((rw - cw) / 2.0).astype(np.int64)
            else:  # RandomCrop without padding: rng.randint(0, rh - ch) if rh > ch else 0
                ty = ~r.generic & (rh > ch)
                top = np.where(ty, _below(d.next(ty), np.where(ty, rh - ch + 1, 1)), 0)
                tx = ~r.generic & (rw > cw)
                left = np.where(tx, _below(d.next(tx), np.where(tx, rw - cw + 1, 1)), 0)
            r.out = np.broadcast_to(np.array(crop.size, np.int64), (n, 2))
        else:
            top = left = np.zeros(n, np.int64)
            r.out = r.resized
        tl = np.stack([left, top], axis=1)
        box = np.concatenate([tl, tl + r.out[:, ::-1]], axis=1)
        if resize is None:
            r.clip = True
            r.box = box.astype(np.float64)
        else:
            # resize-then-crop: the crop box in source pixels (the float scale W / rw)
            r.clip = (rh == HW[:, 0]) & (rw == HW[:, 1])
            scale = np.tile(HW[:, ::-1] / r.resized[:, ::-1], 2)
            r.box = np.where(r.clip[:, None], box.astype(np.float64), box * scale)
    r.flip = None
    r.ops = np.zeros((n, MAX_COLOUR_OPS), np.int32)
    r.factors = np.zeros((n, MAX_COLOUR_OPS), np.float64)
    n_ops = 0
    for t in plan._post:
        if isinstance(t, RandomHorizontalFlip):
            flip = _u01(d.next()) < t.p
            r.flip = flip if r.flip is None else r.flip ^ flip
        else:
            ids, f = _jitter(t, d, n)
            k = ids.shape[1]
            r.ops[:, n_ops:n_ops + k] = ids
            r.factors[:, n_ops:n_ops + k] = f
            n_ops += k
    if r.flip is None:
        r.flip = np.zeros(n, bool)
    r.n_ops = np.full(n, n_ops, np.int32)
    r.counter = d.ctr.view(np.int64)   # < 2**63 draws
    return r


def _draw_rows(plan, HW, keys, rows):
    """Plan._draw row by row with each row's SampleRandom (exotic parameter types)."""
    n = len(HW)
    r = _Drawn()
    r.box = np.zeros((n, 4), np.float64)
    r.clip = np.ones(n, bool)
    r.out = np.ones((n, 2), np.int64)
    r.resized = HW.copy()
    r.flip = np.zeros(n, bool)
    r.ops = np.zeros((n, MAX_COLOUR_OPS), np.int32)
    r.factors = np.zeros((n, MAX_COLOUR_OPS), np.float64)
    r.n_ops = np.zeros(n, np.int32)
    r.generic = np.zeros(n, bool)
    r.counter = np.zeros(n, np.int64)
    for i in rows:
        rng = SampleRandom(int(keys[i]))
        size = (int(HW[i, 0]), int(HW[i, 1]))
        drawn = plan._draw(*size, rng)
        r.counter[i] = rng.counter
        if drawn is None:
            r.generic[i] = True
            continue
        r.box[i], r.clip[i], r.out[i], r.flip[i], row_ops = drawn
        r.n_ops[i] = len(row_ops)
        for j, (kind, f) in enumerate(row_ops):
            r.ops[i, j], r.factors[i, j] = kind, f
    return r


_K = np.array([1, 2, 4], np.int64)


def _window_scale(cwh, owh):
    # turboloader.decode.jpeg._window_k for every row: the smallest k in (1, 2, 4) with
    # crop * k >= out * 8 on both axes, else 8 (cwh, owh: (n, 2) as (w, h))
    fits = (cwh[:, None, :] * _K[None, :, None] >= owh[:, None, :] * 8).all(axis=2)
    return np.where(fits.any(axis=1), _K[fits.argmax(axis=1)], 8)


def _decode_window(box, clip, out, dims, f, filt):
    """turboloader.fused.decode_window for every row (the same operations in the same
    order, on (n, 2) arrays holding the x and y columns): (window (n, 4) as x, y, w, h;
    inner box (n, 4))."""
    lo = box[:, :2] * f
    hi = np.minimum(box[:, 2:] * f, dims)
    ilo_c, ihi_c = np.floor(lo), np.minimum(np.ceil(hi), dims)
    if clip is True:
        ilo, ihi = ilo_c, ihi_c
    else:  # widen by the filter's reach (+2 for rounding), clamped to the image
        m = _SUPPORT.get(filt, 2.0) * np.maximum((hi - lo) / out[:, ::-1], 1.0) + 2
        c = clip[:, None]
        ilo = np.where(c, ilo_c, np.maximum(0, np.floor(lo - m)))
        ihi = np.where(c, ihi_c, np.minimum(dims, np.ceil(hi + m)))
    size = ihi - ilo
    window = np.concatenate([ilo, size], axis=1)
    inner = np.concatenate([lo - ilo, np.minimum(hi - ilo, size)], axis=1)
    return window, inner


def _classify(sources):
    # (kinds, the sources as the native call takes them, array sizes (h, w)); raises
    n = len(sources)
    kind = np.zeros(n, np.uint8)
    srcs = list(sources)
    shapes = np.zeros((n, 2), np.int64)
    any_array = False
    for i, src in enumerate(srcs):
        t = type(src)
        if t is bytes or (t is memoryview and src.ndim == 1 and src.format == "B"
                          and src.c_contiguous):
            continue   # already what _as_buffer makes
        if isinstance(src, np.ndarray) and src.ndim == 3:
            if src.dtype != np.uint8:
                raise TypeError(f"source {i}: a decoded image must be a uint8 array, got "
                                f"{src.dtype}")
            if src.shape[2] != 3 or src.shape[0] == 0 or src.shape[1] == 0:
                raise ValueError(f"source {i}: a decoded image must have shape (H, W, 3), got "
                                 f"{src.shape}")
            if src.strides[2] != 1 or src.strides[1] != 3 or src.strides[0] < 3 * src.shape[1]:
                srcs[i] = np.ascontiguousarray(src)
            kind[i] = ARRAY
            shapes[i] = src.shape[:2]
            any_array = True
        else:
            try:
                srcs[i] = _as_buffer(src)
            except (TypeError, ValueError) as e:
                raise type(e)(f"source {i}: {e}") from None
    return kind, srcs, shapes, any_array


def _too_large(hw, max_pixels):
    from turboloader.errors import DecodeError

    # Plan.from_jpeg's (and jpeg_shim's) message
    return DecodeError(f"Image size {hw[1]} x {hw[0]} exceeds the limit of {max_pixels} pixels "
                       "(max_pixels)")


def prepare_batch(plan, sources, keys, /, *, source_sizes=None, max_pixels=None):
    """Draw every parameter of a batch: see :meth:`Plan.prepare_batch`."""
    from turboloader._native import _fused

    n = len(sources)
    keys = _as_u64(keys)
    if keys.shape != (n,):
        raise ValueError(f"keys must have shape ({n},), got {keys.shape}")
    if max_pixels is not None:
        max_pixels = operator.index(max_pixels)
        if max_pixels <= 0:
            raise ValueError(f"max_pixels must be positive or None, got {max_pixels}")
    kind, srcs, shapes, any_array = _classify(sources)
    status = np.zeros(n, np.int32)
    errors = [None] * n
    is_jpeg = kind == JPEG
    if any_array:
        HW = shapes.copy()
        if source_sizes is not None:
            sizes = np.asarray(source_sizes)
            if sizes.shape != (n, 2) or sizes.dtype.kind not in "iu":
                raise ValueError(f"source_sizes must be an integer array of shape ({n}, 2)")
            use = ~is_jpeg & (sizes > 0).all(axis=1)
            HW[use] = sizes[use]
    else:
        HW = shapes   # every row is a JPEG: filled from the headers below
        if source_sizes is not None and np.shape(source_sizes) != (n, 2):
            raise ValueError(f"source_sizes must be an integer array of shape ({n}, 2)")
    if n and (not any_array or is_jpeg.any()):
        hh, ww, header_errors = _fused.read_headers(srcs, is_jpeg.view(np.uint8))
        if any_array:
            HW[is_jpeg, 0], HW[is_jpeg, 1] = hh[is_jpeg], ww[is_jpeg]
        else:
            HW[:, 0], HW[:, 1] = hh, ww
        failed = None
        if header_errors.count(None) != n:
            failed = np.array([e is not None for e in header_errors], bool)
        if max_pixels is not None:
            big = HW[:, 0] * HW[:, 1] > max_pixels
            if any_array:
                big &= is_jpeg
            failed = big if failed is None else failed | big
        if failed is not None and failed.any():
            for i in np.flatnonzero(failed).tolist():
                status[i] = FAILED
                errors[i] = header_errors[i] or _too_large(HW[i], max_pixels)
            HW[failed] = 1   # placeholders: nothing drawn for these rows is used

    if _vectorizable(plan):
        r = _draw(plan, HW, keys)
    else:
        r = _draw_rows(plan, HW, keys, np.flatnonzero(status == OK).tolist())
    if r.generic is not None:
        status[r.generic & (status == OK)] = GENERIC

    # the decode scale and window, as Plan.from_jpeg / Plan.from_array
    box, out = r.box, r.out
    if plan.dct_scaling:   # the smallest fast scale at which the source box stays >= out
        k = _window_scale(box[:, 2:] - box[:, :2], out[:, ::-1])
    else:
        k = np.full(n, 8, np.int64)
    if any_array:
        k[~is_jpeg] = 8
        dims = np.where(is_jpeg[:, None], (HW[:, ::-1] * k[:, None] + 7) // 8, shapes[:, ::-1])
        f = np.where(is_jpeg[:, None], (k / 8)[:, None], dims / HW[:, ::-1])
    else:
        dims = (HW[:, ::-1] * k[:, None] + 7) // 8
        f = (k / 8)[:, None]
    window, inner = _decode_window(box, r.clip, out, dims, f, plan._filter)

    p = BatchParams.__new__(BatchParams)
    p.n, p.status, p.errors, p.kind = n, status, errors, kind
    p.source_size = HW
    p.out_size = np.ascontiguousarray(out, np.int32)
    p.scale_num = k.astype(np.int32)
    full = (window[:, 2:] == dims).all(axis=1)
    p.full = (full & is_jpeg if any_array else full).view(np.uint8)
    p.window = window.astype(np.int32)
    p.box = inner
    p.flip = r.flip.view(np.uint8)
    p.n_ops, p.ops, p.factors, p.counter = r.n_ops, r.ops, r.factors, r.counter
    # the argument checks of the native entry points, as a row status
    size = window[:, 2:]
    good = ((size > 0) & (window[:, :2] >= 0) & (inner[:, :2] >= 0) & (inner[:, :2] < inner[:, 2:])
            & (inner[:, 2:] <= size)).all(axis=1)
    if any_array:
        good &= is_jpeg | (window[:, :2] + size <= dims).all(axis=1)
    if good.all():
        return p
    for i in np.flatnonzero(~good & (status == OK)).tolist():
        win = tuple(int(v) for v in window[i])
        if win[2] <= 0 or win[3] <= 0 or win[0] < 0 or win[1] < 0:
            p.fail(i, ValueError(f"empty or negative window {win}"))
        elif not (0 <= inner[i, 0] < inner[i, 2] <= win[2]
                  and 0 <= inner[i, 1] < inner[i, 3] <= win[3]):
            p.fail(i, ValueError(f"box {tuple(inner[i].tolist())} is not inside the "
                                 f"{win[2]} x {win[3]} window"))
        else:
            p.fail(i, ValueError(f"window {win} is not inside the {dims[i, 0]} x "
                                 f"{dims[i, 1]} array"))
    return p


def out_view(out, dtype):
    """The NumPy view of an output buffer ``out`` (a CPU ``torch.Tensor`` or a NumPy array)
    of ``dtype`` (``torch.float32`` or ``torch.uint8``), checked to be C-contiguous and
    writeable; its shape is the caller's to check.

    Raises:
        TypeError: ``out`` is neither, or has another dtype.
        ValueError: a tensor not on the CPU, or a view that is not C-contiguous and
            writeable.
    """
    np_dtype = np.float32 if dtype is torch.float32 else np.uint8
    if isinstance(out, torch.Tensor):
        if out.device.type != "cpu":
            raise ValueError(f"out must be a CPU tensor, got device {out.device}")
        if out.dtype is not dtype:
            raise TypeError(f"out must have dtype {dtype}, got {out.dtype}")
        view = out.numpy()
    elif isinstance(out, np.ndarray):
        if out.dtype != np_dtype:
            raise TypeError(f"out must have dtype {np.dtype(np_dtype)}, got {out.dtype}")
        view = out
    else:
        raise TypeError(f"out must be a torch.Tensor or numpy.ndarray, got {type(out).__name__}")
    if not view.flags.c_contiguous or not view.flags.writeable:
        raise ValueError("out must be C-contiguous and writeable (a batch[i] slot is)")
    return view


def _out_array(plan, out):
    view = out_view(out, plan.output_dtype)
    if view.ndim != 4 or view.shape[1] != 3 or 0 in view.shape[2:]:
        raise ValueError(f"out must have shape (N, 3, H, W), got {tuple(view.shape)}")
    if plan.output_shape is not None and view.shape[1:] != tuple(plan.output_shape):
        raise ValueError(f"out must have shape (N, {', '.join(map(str, plan.output_shape))}), "
                         f"got {tuple(view.shape)}")
    return view


def run_batch(plan, sources, params, out, /, *, rows=None, runner=None, strict=False,
              max_pixels=DEFAULT_MAX_PIXELS):
    """Decode and transform a prepared batch into ``out``: see :meth:`Plan.run_batch`."""
    from turboloader._native import _fused, _jpeg

    if not isinstance(params, BatchParams):
        raise TypeError(f"params must come from prepare_batch, got {type(params).__name__}")
    n = params.n
    if len(sources) != n:
        raise ValueError(f"params are for {n} sources, got {len(sources)}")
    max_pixels = _max_pixels(max_pixels)   # 0: no limit
    if runner is None:
        runner = default_runner()
    elif not isinstance(runner, BatchRunner):
        raise TypeError(f"runner must be a BatchRunner, got {type(runner).__name__}")
    view = _out_array(plan, out)
    N = view.shape[0]
    if rows is None:
        if n > N:
            raise ValueError(f"out has {N} rows for {n} samples")
        rows = np.arange(n, dtype=np.int64)
    else:   # range and distinctness: checked by the native call (ValueError)
        rows = np.asarray(rows)
        if rows.shape != (n,) or rows.dtype.kind not in "iu":
            raise ValueError(f"rows must be an integer array of shape ({n},)")
        rows = rows.astype(np.int64, copy=False)
    status = params.status.copy()
    errors = list(params.errors)
    todo = status == OK
    if plan.output_shape is None:   # only then can a row's size differ from out's
        bad = todo & (params.out_size != view.shape[2:]).any(axis=1)
        for i in np.flatnonzero(bad).tolist():
            status[i] = FAILED
            errors[i] = ValueError(f"out must have shape {(3, *params.out_size[i].tolist())}, "
                                   f"got {tuple(view.shape[1:])}")
        todo &= ~bad
    if max_pixels:   # before any scratch memory is sized for them (the decoder refuses them)
        big = todo & (params.source_size[:, 0] * params.source_size[:, 1] > max_pixels)
        big &= params.kind == JPEG
        for i in np.flatnonzero(big).tolist():
            status[i] = FAILED
            errors[i] = _too_large(params.source_size[i], max_pixels)
        todo &= ~big
    if view.dtype == np.float32:
        scale, bias = plan._affine
    else:
        scale = bias = None
    srcs = list(sources)
    if params.kind.any():
        for i in np.flatnonzero(todo & (params.kind == ARRAY)).tolist():
            a = srcs[i]
            if (isinstance(a, np.ndarray) and a.ndim == 3 and (a.strides[2] != 1
                    or a.strides[1] != 3 or a.strides[0] < 3 * a.shape[1])):
                srcs[i] = np.ascontiguousarray(a)   # as prepare_batch did
    failed, run_errors, warnings, nogil = _fused.run_batch(
        runner, srcs, view,
        todo=todo.view(np.uint8), kind=params.kind, rows=rows, window=params.window,
        full=params.full, scale_num=params.scale_num, box=params.box, flip=params.flip,
        n_ops=params.n_ops, ops=params.ops, factors=params.factors, filter=plan._filter,
        mean_scale=scale, bias=bias, flags=_jpeg.STRICT if strict else 0,
        max_pixels=max_pixels)
    for i in np.flatnonzero(failed).tolist():
        status[i] = FAILED
        errors[i] = run_errors[i]
    return BatchResult(status, errors, warnings, nogil)
