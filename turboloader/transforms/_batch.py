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
rng=..., source_size=source_sizes[i])`` for an array). It holds by construction: the
parameters are drawn by one definition, :func:`draw` (each transform's ``_draw_batch``),
which ``Plan._draw`` runs as a batch of one with the sample's generator
(:class:`~turboloader.transforms._draws.RngDraws`) and ``prepare_batch`` runs on the whole
batch with the generators' keys (:class:`~turboloader.transforms._draws.KeyDraws`: the
counter-based :class:`~turboloader.transforms._random.SampleRandom`, draw k of every sample
one NumPy expression); the DCT scale and decode window are
:mod:`turboloader.decode._window`'s, which the per-sample path also runs as a batch of one.

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

import operator
import threading
from typing import NamedTuple

import numpy as np
import torch

from turboloader._native._fused import MAX_COLOUR_OPS, BatchRunner
from turboloader.decode.jpeg import DEFAULT_MAX_PIXELS, _as_buffer, _max_pixels
from turboloader.decode._window import scale_num, windows
from turboloader.transforms._colour import ColorJitter
from turboloader.transforms._containers import Compose, RandomApply, RandomChoice, RandomOrder
from turboloader.transforms._draws import KeyDraws
from turboloader.transforms._geometry import RandomHorizontalFlip, RandomResizedCrop
from turboloader.transforms._random import _as_u64

__all__ = [
    "FAILED",
    "GENERIC",
    "OK",
    "BatchParams",
    "BatchResult",
    "BatchRunner",
    "Fused",
    "Geometry",
    "default_runner",
    "draw",
    "out_view",
    "prepare_batch",
    "run_batch",
]

OK = 0
GENERIC = 1
FAILED = 2

JPEG = 0
ARRAY = 1

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
        geometry: the drawn crop and resize on the source grid, for annotations (masks,
            boxes) that follow the image: :class:`Geometry`, or None (not drawn here).
    """

    __slots__ = ("n", "status", "errors", "kind", "source_size", "out_size", "scale_num",
                 "full", "window", "box", "flip", "n_ops", "ops", "factors", "counter",
                 "geometry")

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
        self.geometry = None

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


# -- a fused Compose's draws, for a batch of rows: the definition ---------------------------

class _Drawn:
    """What :func:`draw` returns: box (n, 4) float64 source pixels, clip (n,) bool, out
    (n, 2) output size, flip (n,) bool, ops/factors (n, 8), n_ops (n,), generic (n,) bool
    (rows that need the generic path: nothing drawn for them), counter (KeyDraws only),
    geometry (:class:`Geometry`)."""

    __slots__ = ("box", "clip", "out", "flip", "ops", "factors", "n_ops", "generic", "counter",
                 "geometry")


class Geometry(NamedTuple):
    """A batch's drawn geometry as torchvision applies it to a ``Mask`` or ``BoundingBoxes``
    given with the image (what ``MaskField`` / ``BoxesField`` follow without replaying the
    pipeline). ``axes``: ``int64 (n, 2, 4)``, per row and axis (y, x) ``(origin, offset,
    size, resized)``: source pixel ``j`` of the output along that axis is
    ``origin + min(floor((offset + j) * (size / resized)), size - 1)`` (torch's nearest
    index, float32). ``crop_first``: crop ``[origin, origin + size)`` then resize it to
    ``resized`` (RandomResizedCrop, or a crop alone: ``size == resized``); else resize the
    whole ``size`` to ``resized``, then crop the output from ``offset`` when ``crop``."""

    axes: np.ndarray
    crop_first: bool
    crop: bool


class Fused(NamedTuple):
    """A fused pipeline as the draws and the native calls see it (``Plan._fused``):
    ``[crop | resize [crop]] post... -> output``. ``filter``: the native filter code;
    ``affine``: ``(scale, bias)`` per channel for float32 output, else None;
    ``output_shape``: ``(3, H, W)`` or None when it depends on the image."""

    crop: object
    resize: object
    post: tuple
    filter: int
    affine: object
    dct_scaling: bool
    output_shape: object
    output_dtype: object


def draw(fused, HW, d, live=None):
    """Every parameter of a :class:`Fused` pipeline ``[crop | resize [crop]] post...`` for each row
    of ``HW`` (``int64 (n, 2)`` source (height, width)), drawn from ``d`` (a
    :class:`~turboloader.transforms._draws.KeyDraws` for a batch, an ``RngDraws`` for one
    sample: ``Plan._draw`` is this with n = 1) in Compose order; rows outside ``live`` draw
    nothing. Each transform's sampling is its own ``_draw_batch``.

    The source box ``(x0, y0, x1, y1)`` maps onto the output; ``clip``: the filter stops at
    it (crop-then-resize, or no resize) rather than reading around it (resize-then-crop:
    the crop box in source pixels at the float scale ``W / rw``)."""
    crop, resize = fused.crop, fused.resize
    n = len(HW)
    live = np.ones(n, bool) if live is None else np.array(live, bool)
    r = _Drawn()
    r.generic = np.zeros(n, bool)
    axes = np.zeros((n, 2, 4), np.int64)   # Geometry.axes: (origin, offset, size, resized)
    if isinstance(crop, RandomResizedCrop):
        p = crop._draw_batch(HW, d, live)
        r.box = box = np.empty((n, 4), np.float64)
        box[:, 0], box[:, 1] = p["left"], p["top"]
        box[:, 2], box[:, 3] = p["left"] + p["width"], p["top"] + p["height"]
        r.clip = np.ones(n, bool)
        r.out = np.empty((n, 2), np.int64)
        r.out[:] = crop.size
        axes[:, 0, 0], axes[:, 0, 2], axes[:, 0, 3] = p["top"], p["height"], crop.size[0]
        axes[:, 1, 0], axes[:, 1, 2], axes[:, 1, 3] = p["left"], p["width"], crop.size[1]
    else:
        resized = HW if resize is None else resize._output_sizes(HW)
        rh, rw = resized[:, 0], resized[:, 1]
        if crop is not None:
            ch, cw = crop.size
            r.generic = (ch > rh) | (cw > rw)
            live &= ~r.generic
            p = crop._draw_batch(resized, d, live)
            top, left = p["top"], p["left"]
            r.out = np.empty((n, 2), np.int64)
            r.out[:] = crop.size
        else:
            top = left = 0
            r.out = resized
        box = np.empty((n, 4), np.int64)
        box[:, 0], box[:, 1] = left, top
        box[:, 2], box[:, 3] = left + r.out[:, 1], top + r.out[:, 0]
        if resize is None:
            r.clip = np.ones(n, bool)
            r.box = box.astype(np.float64)
        else:
            r.clip = (rh == HW[:, 0]) & (rw == HW[:, 1])
            with np.errstate(divide="ignore", invalid="ignore"):   # generic rows: unused
                scale = np.tile(HW[:, ::-1] / resized[:, ::-1], 2)
                r.box = np.where(r.clip[:, None], box.astype(np.float64), box * scale)
        if resize is None:   # a crop alone: crop_first with size == resized
            axes[:, 0, 0], axes[:, 1, 0] = top, left
            axes[:, :, 2] = axes[:, :, 3] = r.out
        else:
            axes[:, 0, 1], axes[:, 1, 1] = top, left
            axes[:, :, 2], axes[:, :, 3] = HW, resized
    r.geometry = Geometry(axes, resize is None, crop is not None)
    r.flip = np.zeros(n, bool)
    r.ops = np.zeros((n, MAX_COLOUR_OPS), np.int32)
    r.factors = np.zeros((n, MAX_COLOUR_OPS), np.float64)
    r.n_ops = np.zeros(n, np.int32)
    for t in fused.post:
        _draw_post(t, d, live, r)
    r.counter = d.counter if isinstance(d, KeyDraws) else None
    return r


def _draw_post(t, d, mask, r):
    # post-geometry member t for the rows in mask, in call order: flips commute with the
    # colour operations, which are appended to each row's list
    cls = type(t)
    if cls is RandomHorizontalFlip:
        r.flip ^= t._draw_batch(d, mask)
    elif cls is ColorJitter:
        ids, f = t._batch_ops(*t._draw_batch(d, mask))
        k = ids.shape[1]
        if k and len(mask) and mask.all() and (r.n_ops == r.n_ops[0]).all():   # every row at one column
            c = int(r.n_ops[0])
            r.ops[:, c:c + k], r.factors[:, c:c + k] = ids, f
            r.n_ops += k
            return
        rows = np.flatnonzero(mask)
        if k and rows.size:
            cols = r.n_ops[rows, None] + np.arange(k)
            r.ops[rows[:, None], cols] = ids[rows]
            r.factors[rows[:, None], cols] = f[rows]
            r.n_ops[rows] += k
    elif cls is RandomApply:
        apply = mask & t._draw_batch(d, mask)
        for m in t.transforms:
            _draw_post(m, d, apply, r)
    elif cls is RandomChoice:
        index = t._draw_batch(d, mask)
        for i, m in enumerate(t.transforms):
            _draw_post(m, d, mask & (index == i), r)
    elif cls is RandomOrder:
        order = t._draw_batch(d, mask)
        for j in range(order.shape[1]):
            for i, m in enumerate(t.transforms):
                _draw_post(m, d, mask & (order[:, j] == i), r)
    elif cls is Compose:
        for m in t.transforms:
            _draw_post(m, d, mask, r)
    # else Identity: nothing


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


def prepare_batch(fused, sources, keys, /, *, source_sizes=None, max_pixels=None):
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

    r = draw(fused, HW, KeyDraws(keys), status == OK)
    status[r.generic & (status == OK)] = GENERIC

    # the decode scale and window, as Plan.from_jpeg / Plan.from_array
    box, out = r.box, r.out
    if fused.dct_scaling:   # the smallest fast scale at which the source box stays >= out
        k = scale_num(box[:, 2:] - box[:, :2], out[:, ::-1])
    else:
        k = np.full(n, 8, np.int64)
    if any_array:
        k[~is_jpeg] = 8
        dims = np.where(is_jpeg[:, None], (HW[:, ::-1] * k[:, None] + 7) // 8, shapes[:, ::-1])
        f = np.where(is_jpeg[:, None], (k / 8)[:, None], dims / HW[:, ::-1])
    else:
        dims = (HW[:, ::-1] * k[:, None] + 7) // 8
        f = (k / 8)[:, None]
    window, inner = windows(box, r.clip, out, dims, f, fused.filter)

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
    p.geometry = r.geometry   # what MaskField / BoxesField follow (data/fields.py)
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


def _out_array(fused, out):
    view = out_view(out, fused.output_dtype)
    if view.ndim != 4 or view.shape[1] != 3 or 0 in view.shape[2:]:
        raise ValueError(f"out must have shape (N, 3, H, W), got {tuple(view.shape)}")
    if fused.output_shape is not None and view.shape[1:] != tuple(fused.output_shape):
        raise ValueError(f"out must have shape (N, {', '.join(map(str, fused.output_shape))}), "
                         f"got {tuple(view.shape)}")
    return view


def run_batch(fused, sources, params, out, /, *, rows=None, runner=None, strict=False,
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
    view = _out_array(fused, out)
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
    if fused.output_shape is None:   # only then can a row's size differ from out's
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
        scale, bias = fused.affine
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
        n_ops=params.n_ops, ops=params.ops, factors=params.factors, filter=fused.filter,
        mean_scale=scale, bias=bias, flags=_jpeg.STRICT if strict else 0,
        max_pixels=max_pixels)
    for i in np.flatnonzero(failed).tolist():
        status[i] = FAILED
        errors[i] = run_errors[i]
    return BatchResult(status, errors, warnings, nogil)
