"""The one slot executor: n sources -> their sizes -> n slots, run from a spec. One sample is n = 1.

Three steps, every fused decode goes through them (the datasets' batch path, ``Plan.from_jpeg``
/ ``Plan.from_array``, ``decode_resized_crop``, the converter)::

    sizes = read_sizes(sources, max_pixels=...)        # header pass (no GIL), max_pixels
    spec = <the transforms draw on sizes.hw>            # a SlotSpec: box, output size, flip, ops
    params = plan_slots(sizes, spec, filter=..., dct_scaling=...)   # DCT scale, windows
    result = run_batch(sources, params, out, ...)       # one native call for every row

``sources`` holds JPEG files (bytes, memoryview, 1-D uint8 array) and/or decoded ``(H, W, 3)``
uint8 arrays (e.g. cache hits), row by row. :func:`resample_into_slot` is the same plan for
one source, run by the per-sample native entry.

The transforms draw and describe (they fill a :class:`SlotSpec`); this module decodes. It
imports neither the transforms nor torch (a ``torch.Tensor`` output is recognised when torch is
already loaded).

``max_pixels`` is checked here once, by one rule, in :func:`read_sizes` (and
:func:`resample_into_slot`'s ``_open``): a JPEG whose header's width * height exceeds it is a
FAILED row before anything is sized for it; ``None`` means no limit, as everywhere in
turboloader. The native decoder re-checks the same limit (its memory safety depends on it).

Row status codes (``BatchParams.status``, ``BatchResult.status``):

* ``OK`` (0): ready to run / written.
* ``GENERIC`` (1): the fused path cannot do this row (the spec says so: a crop larger than its
  image); nothing was drawn or written for it here.
* ``FAILED`` (2): bad data or arguments for this row; ``errors[i]`` is the exception
  (``DecodeError`` with libjpeg's message, ``ValueError``), not raised: the caller adds
  notes (shard, key, offset) and applies its failure policy.

Exceptions raised by these functions mean a bad call (wrong types, shapes, a mismatched
``params``), never a bad sample.

Threads: :func:`run_batch` without ``runner`` uses a 1-thread runner private to the calling
thread (no pool threads; concurrent callers never wait for each other). A shared
``BatchRunner(threads=k)`` may be used from several threads; its batches then run one at a
time. Scratch memory is per runner thread and grows to the largest sample seen.
"""

import sys
import threading
from typing import Any

import numpy as np

from turboloader._native import _fused, _jpeg
from turboloader._native._fused import MAX_COLOUR_OPS, BatchRunner
from turboloader.decode._window import SUPPORT, windows
from turboloader.decode.jpeg import DEFAULT_MAX_PIXELS, _as_buffer, _flags, _open, _warn
from turboloader.decode.sizes import (over_pixel_limit, pixel_limit, pixels_error, scaled_dims,
                                      window_scale_num)
from turboloader.errors import DecodeError

__all__ = [
    "ARRAY",
    "MAX_COLOUR_OPS",
    "FAILED",
    "GENERIC",
    "JPEG",
    "OK",
    "BatchParams",
    "BatchResult",
    "BatchRunner",
    "SlotSpec",
    "SourceSizes",
    "batch_rows",
    "default_runner",
    "normalize_affine",
    "open_jpeg",
    "out_view",
    "plan_slots",
    "read_sizes",
    "resample_into_slot",
    "run_batch",
]

OK = 0
GENERIC = 1
FAILED = 2

# source kinds (BatchParams.kind): a JPEG file, a decoded (H, W, 3) uint8 array
JPEG = 0
ARRAY = 1

_local = threading.local()


def default_runner():
    """The calling thread's own 1-thread :class:`BatchRunner` (made on first use)."""
    runner = getattr(_local, "runner", None)
    if runner is None:
        runner = _local.runner = BatchRunner(threads=1)
    return runner


class SlotSpec:
    """What each of n slots is to hold, as the transforms describe it (the executor's input).

    Attributes (one row per sample):
        box: ``float64 (n, 4)``: the source region ``(x0, y0, x1, y1)`` in full-resolution
            pixels that maps onto the output.
        clip: ``bool (n,)``: the filter stops at the box (crop-then-resize) rather than reading
            around it (resize-then-crop).
        out: ``int64 (n, 2)``: output (height, width).
        flip: ``bool (n,)``: mirror the output.
        ops, factors, n_ops: colour operations in order (``int32 (n, MAX_COLOUR_OPS)`` ids as
            torchvision's ColorJitter ``fn_idx``, ``float64`` factors), ``n_ops`` of them.
        generic: ``bool (n,)``: rows the fused path cannot do (nothing drawn for them).
        counter: ``int64 (n,)`` draws consumed per row, or None.
        geometry: the transforms' description of the drawn crop and resize for annotations
            that follow the image (opaque to the executor; carried to :class:`BatchParams`).
    """

    __slots__ = ("box", "clip", "out", "flip", "ops", "factors", "n_ops", "generic", "counter",
                 "geometry")
    box: np.ndarray
    clip: np.ndarray
    out: np.ndarray
    flip: np.ndarray
    ops: np.ndarray
    factors: np.ndarray
    n_ops: np.ndarray
    generic: np.ndarray
    counter: np.ndarray | None
    geometry: Any

    def __init__(self, n: int) -> None:
        self.generic = np.zeros(n, bool)
        self.flip = np.zeros(n, bool)
        self.ops = np.zeros((n, MAX_COLOUR_OPS), np.int32)
        self.factors = np.zeros((n, MAX_COLOUR_OPS), np.float64)
        self.n_ops = np.zeros(n, np.int32)
        self.counter = None
        self.geometry = None


class SourceSizes:
    """What :func:`read_sizes` found: ``kind`` (``uint8 (n,)``, 0 JPEG, 1 array), ``sources``
    (as the native call takes them), ``array_hw`` (``int64 (n, 2)``, arrays' own size),
    ``hw`` (``int64 (n, 2)``: the size to draw on; 1 x 1 for FAILED rows), ``status`` and
    ``errors`` (rows FAILED here), ``any_array``, ``max_pixels`` (the limit applied, 0: none)."""

    __slots__ = ("kind", "sources", "array_hw", "hw", "status", "errors", "any_array",
                 "max_pixels")


class BatchParams:
    """Everything :func:`run_batch` needs for a batch: :func:`plan_slots`' result.

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
        filter: the native filter code the windows were planned for.
        max_pixels: the pixel limit :func:`read_sizes` applied (0: none), which the native
            decoder re-checks.
        geometry: the drawn crop and resize on the source grid (the transforms'
            ``Geometry``, opaque here), for annotations (masks, boxes) that follow the image,
            or None.
        source_box: ``float64 (n, 4)``: the drawn source box ``(x0, y0, x1, y1)`` in
            full-resolution pixels, before any DCT scale (what a device decode crops).
        clip: ``bool``: the filter stops at ``source_box`` (crop-then-resize), else it
            reads around it (resize-then-crop).
    """

    __slots__ = ("n", "status", "errors", "kind", "source_size", "out_size", "scale_num",
                 "full", "window", "box", "flip", "n_ops", "ops", "factors", "counter",
                 "filter", "max_pixels", "source_box", "clip", "geometry")

    def fail(self, i, error):
        """Mark row ``i`` FAILED with ``error`` (an exception instance)."""
        self.status[i] = FAILED
        self.errors[i] = error

    def __repr__(self):
        counts = np.bincount(self.status, minlength=3)
        return (f"BatchParams(n={self.n}, ok={counts[OK]}, generic={counts[GENERIC]}, "
                f"failed={counts[FAILED]})")


class BatchResult:
    """What :func:`run_batch` did, row by row.

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


# -- step 1: the sizes -----------------------------------------------------------------------

def _contiguous_rgb(src):
    # an (H, W, 3) array as the native call reads it (rows may be padded)
    if src.strides[2] != 1 or src.strides[1] != 3 or src.strides[0] < 3 * src.shape[1]:
        return np.ascontiguousarray(src)
    return src


def _classify(sources):
    # (kinds, the sources as the native call takes them, array sizes (h, w)); raises
    n = len(sources)
    kind = np.zeros(n, np.uint8)
    srcs = list(sources)
    shapes = np.zeros((n, 2), np.int64)
    any_array = False
    if _fused.plain_buffers(srcs):   # bytes and byte views only (a gathered chunk): as they are
        return kind, srcs, shapes, any_array
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
            srcs[i] = _contiguous_rgb(src)
            kind[i] = ARRAY
            shapes[i] = src.shape[:2]
            any_array = True
        else:
            try:
                srcs[i] = _as_buffer(src)
            except (TypeError, ValueError) as e:
                raise type(e)(f"source {i}: {e}") from None
    return kind, srcs, shapes, any_array


def normalize_affine(mean, std, /, *, scale=1.0 / 255.0):
    """The ``affine=(scale, bias)`` of :func:`run_batch` for ``Normalize(mean, std)`` after a
    conversion that multiplies pixels by ``scale`` (``1 / 255``: ``ToTensor``,
    ``ToDtype(float32, scale=True)``; 1.0: no scaling): ``(x * scale - mean) / std`` folded
    into one multiply-add per channel, ``x * (scale / std) + (-mean / std)``. The one fold of
    a normalisation into the executor's arithmetic (the fused plan and
    :func:`~turboloader.decode.fused.decode_resized_crop` both ask it).

    Args:
        mean, std: three floats each (checked by the caller: finite, std non-zero).
        scale: what the conversion before the normalisation multiplies pixels by.

    Returns:
        ``((s0, s1, s2), (b0, b1, b2))``, floats.

    Example:
        >>> normalize_affine((0.5, 0.5, 0.5), (0.25, 0.25, 0.25), scale=1.0)
        ((4.0, 4.0, 4.0), (-2.0, -2.0, -2.0))
    """
    return (tuple(scale / float(s) for s in std),
            tuple(-float(m) / float(s) for m, s in zip(mean, std)))


def open_jpeg(data, /, *, max_pixels=DEFAULT_MAX_PIXELS):
    """Step 1 for one JPEG: ``(buffer, header, limit)``, its bytes as a 1-D view, its
    :class:`~turboloader.decode.JpegHeader` and ``max_pixels`` as an int (0: no limit),
    already checked against the header (:func:`read_sizes`' rule). Raises DecodeError."""
    return _open(data, max_pixels)


def read_sizes(sources, /, *, source_sizes=None, max_pixels=DEFAULT_MAX_PIXELS):
    """Step 1: every source's kind and size, JPEG headers read natively in one pass without
    the GIL, and the one ``max_pixels`` check.

    Args:
        sources: n JPEG files and/or ``(H, W, 3)`` uint8 arrays.
        source_sizes: optional ``int[n, 2]`` (height, width) of the full-resolution originals
            of array rows (rows with a non-positive entry, and JPEG rows, use their own size).
        max_pixels: a JPEG whose header's width * height exceeds it is a FAILED row
            (default :data:`~turboloader.decode.DEFAULT_MAX_PIXELS`; None: no limit). Arrays
            are already decoded: no limit applies to them.

    Returns:
        A :class:`SourceSizes`.

    Raises:
        TypeError / ValueError: a source that is neither, bad ``source_sizes`` or
            ``max_pixels`` (bad *data* is a row status).
    """
    n = len(sources)
    limit = pixel_limit(max_pixels)
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
        if limit:   # the one max_pixels rule, on the full-resolution header size
            big = over_pixel_limit(HW[:, 0], HW[:, 1], limit)
            if any_array:
                big &= is_jpeg
            failed = big if failed is None else failed | big
        if failed is not None and failed.any():
            for i in np.flatnonzero(failed).tolist():
                status[i] = FAILED
                errors[i] = header_errors[i] or pixels_error(HW[i, 0], HW[i, 1], limit)
            HW[failed] = 1   # placeholders: nothing drawn for these rows is used
    s = SourceSizes()
    s.kind, s.sources, s.array_hw, s.hw = kind, srcs, shapes, HW
    s.status, s.errors, s.any_array, s.max_pixels = status, errors, any_array, limit
    return s


# -- step 2: the slots -----------------------------------------------------------------------

def _scale_and_windows(box, clip, out, hw, is_jpeg, array_hw, filt, dct_scaling):
    """The DCT scale and the decode window of every row, one definition for a batch and for
    one sample: ``(k, dims (w, h), window, inner)``. ``is_jpeg``: ``bool (n,)`` or None (all
    JPEG). The NumPy form (``_plan_windows`` runs the same operations row by row in C)."""
    n = len(box)
    if dct_scaling:   # the smallest fast scale at which the source box stays >= out
        k = window_scale_num(box[:, 2:] - box[:, :2], out[:, ::-1])
    else:
        k = np.full(n, 8, np.int64)
    if is_jpeg is None:
        dims = scaled_dims(hw[:, ::-1], k)
        f = (k / 8)[:, None]
    else:
        k[~is_jpeg] = 8
        dims = np.where(is_jpeg[:, None], scaled_dims(hw[:, ::-1], k), array_hw[:, ::-1])
        f = np.where(is_jpeg[:, None], (k / 8)[:, None], dims / hw[:, ::-1])
    window, inner = windows(box, clip, out, dims, f, filt)
    return k, dims, window, inner


class _Windows:
    # what _plan_windows writes, one row per sample
    __slots__ = ("k", "dims", "window", "inner", "full", "good")


def _plan_windows(box, clip, out, hw, kind, array_hw, filt, dct_scaling):
    """:func:`_scale_and_windows` and :func:`plan_slots`' argument checks of every row in
    one native loop (``_fused.plan_windows``: the same float64 operations in the same order,
    bit for bit, ``tests/native/test_plan_windows.py``): a :class:`_Windows` with ``k``
    (int32), ``dims`` (decoded (w, h)), ``window`` (int32 ``(x, y, w, h)``), ``inner``,
    ``full`` (uint8: the whole decoded JPEG) and ``good`` (bool: the native run's checks
    hold). ``kind``: ``uint8 (n,)`` (:data:`JPEG`, :data:`ARRAY`); ``clip``: a bool or
    ``bool (n,)``."""
    n = len(box)
    w = _Windows()
    w.k = np.empty(n, np.int32)
    w.dims = np.empty((n, 2), np.int64)
    w.window = np.empty((n, 4), np.int32)
    w.inner = np.empty((n, 4), np.float64)
    w.full = np.empty(n, np.uint8)
    good = np.empty(n, np.uint8)
    if clip is True or clip is False:
        clip = np.full(n, clip, np.uint8)
    else:
        clip = np.ascontiguousarray(clip, bool).view(np.uint8)
    _fused.plan_windows(np.ascontiguousarray(box, np.float64), clip,
                        np.ascontiguousarray(out, np.int64), np.ascontiguousarray(hw, np.int64),
                        np.ascontiguousarray(kind, np.uint8),
                        np.ascontiguousarray(array_hw, np.int64), w.k, w.dims, w.window,
                        w.inner, w.full, good, support=SUPPORT.get(filt, 2.0),
                        dct_scaling=bool(dct_scaling))
    w.good = good.view(bool)
    return w


def plan_slots(sizes, spec, /, *, filter, dct_scaling=True):
    """Step 2: the DCT scale and decode window of every row of ``spec`` (a :class:`SlotSpec`
    drawn on ``sizes.hw``), and the argument checks of the native call as a row status.

    Returns:
        A :class:`BatchParams` for :func:`run_batch`.
    """
    n = len(sizes.kind)
    status, errors, kind, HW = sizes.status, sizes.errors, sizes.kind, sizes.hw
    if spec.generic.any():
        status[spec.generic & (status == OK)] = GENERIC
    box, out = spec.box, spec.out
    w = _plan_windows(box, spec.clip, out, HW, kind, sizes.array_hw, filter, dct_scaling)
    window, inner, dims = w.window, w.inner, w.dims
    p = BatchParams.__new__(BatchParams)
    p.n, p.status, p.errors, p.kind = n, status, errors, kind
    p.source_size = HW
    p.out_size = np.ascontiguousarray(out, np.int32)
    p.scale_num, p.full, p.window, p.box = w.k, w.full, window, inner
    p.flip = spec.flip.view(np.uint8)
    p.n_ops, p.ops, p.factors, p.counter = spec.n_ops, spec.ops, spec.factors, spec.counter
    p.filter, p.max_pixels = filter, sizes.max_pixels
    p.source_box, p.clip = box, spec.clip   # what a device decode crops (decode='gpu')
    p.geometry = spec.geometry   # what MaskField / BoxesField follow (data/fields.py)
    # the argument checks of the native entry points, as a row status
    good = w.good
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


# -- step 3: run -----------------------------------------------------------------------------

def out_view(out, dtype):
    """The NumPy view of an output buffer ``out`` (a CPU ``torch.Tensor`` or a NumPy array)
    of ``dtype`` (``numpy.float32`` or ``numpy.uint8``), checked to be C-contiguous and
    writeable; its shape is the caller's to check.

    Raises:
        TypeError: ``out`` is neither, or has another dtype.
        ValueError: a tensor not on the CPU, or a view that is not C-contiguous and
            writeable.
    """
    dtype = np.dtype(dtype)
    torch = sys.modules.get("torch")   # a tensor means torch is loaded; never imported here
    if torch is not None and isinstance(out, torch.Tensor):
        if out.device.type != "cpu":
            raise ValueError(f"out must be a CPU tensor, got device {out.device}")
        if out.dtype is not (torch.float32 if dtype == np.float32 else torch.uint8):
            raise TypeError(f"out must have dtype {dtype}, got {out.dtype}")
        view = out.numpy()
    elif isinstance(out, np.ndarray):
        if out.dtype != dtype:
            raise TypeError(f"out must have dtype {dtype}, got {out.dtype}")
        view = out
    else:
        raise TypeError(f"out must be a torch.Tensor or numpy.ndarray, got {type(out).__name__}")
    if not view.flags.c_contiguous or not view.flags.writeable:
        raise ValueError("out must be C-contiguous and writeable (a batch[i] slot is)")
    return view


def _out_array(out, dtype, shape):
    view = out_view(out, dtype)
    if view.ndim != 4 or view.shape[1] != 3 or 0 in view.shape[2:]:
        raise ValueError(f"out must have shape (N, 3, H, W), got {tuple(view.shape)}")
    if shape is not None and view.shape[1:] != tuple(shape):
        raise ValueError(f"out must have shape (N, {', '.join(map(str, shape))}), "
                         f"got {tuple(view.shape)}")
    return view


def batch_rows(sources, params, rows, N, /, *, distinct=False):
    """The argument checks every executor's ``run_batch`` makes (the CPU's here, the device's
    in :mod:`turboloader.decode.device_executor`): ``params`` from :func:`plan_slots` for
    ``sources``, and ``rows`` (default ``arange(n)``) of an ``out`` with ``N`` rows.
    ``distinct``: check the rows' range and distinctness here (the native call checks them
    itself).

    Returns:
        ``int64[n]``: the row of ``out`` each source is written to.

    Raises:
        TypeError / ValueError: ``params`` of another kind or size, bad ``rows``.
    """
    if not isinstance(params, BatchParams):
        raise TypeError(f"params must come from prepare_batch, got {type(params).__name__}")
    n = params.n
    if len(sources) != n:
        raise ValueError(f"params are for {n} sources, got {len(sources)}")
    if rows is None:
        if n > N:
            raise ValueError(f"out has {N} rows for {n} samples")
        return np.arange(n, dtype=np.int64)
    rows = np.asarray(rows)
    if rows.shape != (n,) or rows.dtype.kind not in "iu":
        raise ValueError(f"rows must be an integer array of shape ({n},)")
    rows = rows.astype(np.int64, copy=False)
    if distinct and n and (rows.min() < 0 or rows.max() >= N or len(np.unique(rows)) != n):
        raise ValueError(f"rows must be distinct rows of out (0..{N - 1})")
    return rows


def run_batch(sources, params, out, /, *, dtype, shape=None, affine=None, rows=None,
              runner=None, strict=False):
    """Step 3: decode and transform a planned batch into ``out`` in one native call without
    the GIL, on ``runner``'s threads.

    Args:
        sources: the same sequence given to :func:`read_sizes`.
        params: its :class:`BatchParams` (from :func:`plan_slots`).
        out: ``(N, 3, H, W)`` CPU tensor or ndarray of ``dtype``, C-contiguous.
        dtype: ``numpy.float32`` or ``numpy.uint8``.
        shape: ``(3, H, W)`` every row has, or None (then each row's ``out_size`` must be
            ``out``'s).
        affine: ``(scale, bias)`` per channel for float32 output (``pixel * scale + bias``).
        rows: ``int[n]``: the row of ``out`` each source is written to (default
            ``arange(n)``); distinct for the rows that run.
        runner: a :class:`BatchRunner`; default: a 1-thread runner private to the calling
            thread.
        strict: make libjpeg's warnings about recoverable corruption errors.

    Returns:
        A :class:`BatchResult`.

    Raises:
        TypeError / ValueError: a bad ``out``, ``rows``, ``runner`` or ``params`` (a bad
            sample is a row status, never an exception).
    """
    if runner is None:
        runner = default_runner()
    elif not isinstance(runner, BatchRunner):
        raise TypeError(f"runner must be a BatchRunner, got {type(runner).__name__}")
    view = _out_array(out, dtype, shape)
    # range and distinctness of rows: checked by the native call (ValueError)
    rows = batch_rows(sources, params, rows, view.shape[0])
    status = params.status.copy()
    errors = list(params.errors)
    todo = status == OK
    if shape is None:   # only then can a row's size differ from out's
        bad = todo & (params.out_size != view.shape[2:]).any(axis=1)
        for i in np.flatnonzero(bad).tolist():
            status[i] = FAILED
            errors[i] = ValueError(f"out must have shape {(3, *params.out_size[i].tolist())}, "
                                   f"got {tuple(view.shape[1:])}")
        todo &= ~bad
    scale, bias = affine if view.dtype == np.float32 and affine is not None else (None, None)
    srcs = list(sources) if type(sources) is not list or params.kind.any() else sources
    if srcs is not sources:   # a copy: array rows made what the native call reads
        for i in np.flatnonzero(todo & (params.kind == ARRAY)).tolist():
            a = srcs[i]
            if isinstance(a, np.ndarray) and a.ndim == 3:
                srcs[i] = _contiguous_rgb(a)   # as read_sizes did
    failed, run_errors, warnings, nogil = _fused.run_batch(
        runner, srcs, view,
        todo=todo.view(np.uint8), kind=params.kind, rows=rows, window=params.window,
        full=params.full, scale_num=params.scale_num, box=params.box, flip=params.flip,
        n_ops=params.n_ops, ops=params.ops, factors=params.factors, filter=params.filter,
        mean_scale=scale, bias=bias, flags=_flags(strict),
        max_pixels=params.max_pixels)
    if failed.any():
        for i in np.flatnonzero(failed).tolist():
            status[i] = FAILED
            errors[i] = run_errors[i]
    return BatchResult(status, errors, warnings, nogil)


def resample_into_slot(src, out, *, box, clip, filt, source_size=None, flip=False, ops=(),
                       affine=None, dct_scaling=True, strict=False, max_pixels=0,
                       stacklevel=1):
    """One sample (n = 1): write the source region ``box`` of ``src``, resampled to ``out``'s
    size, into ``out``, with the scale and window :func:`plan_slots` gives a batch row.

    Args:
        src: ``(buffer, header)`` of a JPEG (from ``jpeg._open``, which applied
            ``max_pixels``: a 1-D byte view and its :class:`JpegHeader`), or an
            ``(h, w, 3)`` C-contiguous uint8 array.
        out: the validated slot, a C-contiguous ``(3, H, W)`` float32 or uint8 ndarray.
        box: ``(x0, y0, x1, y1)``, the float source region in the coordinates of the
            full-resolution image (``source_size``) that maps onto ``out``.
        clip: True: the filter stops at the box's edges (crop-then-resize, torchvision's
            ``resized_crop``); False: it reads the pixels around the box (a full resize
            followed by a crop).
        filt: native filter code (:class:`Interpolation`).
        source_size: ``(height, width)`` that ``box`` refers to: a JPEG's full size (its
            header's, the default) or, for an array that is a downscaled copy, the
            original's (default: the array's own).
        flip, ops: horizontal flip; colour ops ``(kind, factor)`` run on the resized image.
        affine: ``(scale, bias)`` per channel for float32 output (``pixel * scale + bias``).
        dct_scaling: JPEG only: decode at the smallest fast DCT scale (1/8, 1/4, 1/2) that
            leaves the box at least ``out``'s size.
        strict, max_pixels: JPEG only: libjpeg warnings as errors; the pixel limit (0: none)
            ``_open`` applied, which the native decoder re-checks.
        stacklevel: of the DecodeWarning, counted from the caller of this function.

    Raises:
        DecodeError: the JPEG does not decode. ValueError: a bad window or slot.
    """
    out_hw = np.array([out.shape[1:]], np.int64)
    box_a = np.array([box], np.float64)
    scale, bias = affine or (None, None)
    if isinstance(src, np.ndarray):   # a batch of one: plan_slots' windows
        array_hw = np.array([src.shape[:2]], np.int64)
        hw = array_hw if source_size is None else np.array([source_size], np.int64)
        w = _plan_windows(box_a, bool(clip), out_hw, hw, np.ones(1, np.uint8), array_hw,
                          filt, False)
        wx, wy, ww, wh = w.window[0].tolist()
        _fused.resample_array_into(src, out, win_x=wx, win_y=wy, win_w=ww, win_h=wh,
                                   box=tuple(w.inner[0].tolist()), filter=filt, flip=flip,
                                   ops=ops, mean_scale=scale, bias=bias)
        return out
    buf, header = src
    hw = np.array([[header.height, header.width]], np.int64)
    w = _plan_windows(box_a, bool(clip), out_hw, hw, np.zeros(1, np.uint8), hw, filt,
                      dct_scaling)
    wx, wy, ww, wh = w.window[0].tolist()
    n_warnings, message = _fused.decode_resample_into(
        buf, out, scale_num=int(w.k[0]), full=bool(w.full[0]),
        win_x=wx, win_y=wy, win_w=ww, win_h=wh, box=tuple(w.inner[0].tolist()), filter=filt,
        flip=flip, ops=ops, mean_scale=scale, bias=bias,
        flags=_flags(strict), max_pixels=max_pixels)
    _warn(n_warnings, message, stacklevel + 1)
    return out
