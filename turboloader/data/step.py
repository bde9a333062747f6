"""The one sample step: what every dataset's stream does with a gathered chunk of samples
(TAR, Parquet, TBL and folder datasets, video clips, aspect-ratio buckets alike).

For each row: the cache (a cached decoded image replaces the encoded bytes) -> sizes (the
executor's ``read_sizes``: headers, ``max_pixels``, the stored size of cached rows) -> draw
(``plan.draw``: the transform's parameters drawn from the sample's key; transforms only
draw) -> plan and run (the executor's ``plan_slots`` and ``run_batch``: decoded and
transformed into the row of the batch without the GIL, on the stream's executor) -> the
generic fallback (rows the batch call cannot do, formats without a plan, a user's loader:
the stream decoder's ``transform_source``) -> annotate (masks and boxes of ``fields=``
through the same transform with the image's draws).

``st`` is the stream's :class:`~turboloader.data.reader.StreamReader`; the decoder is the
stream's, or a group's (an aspect-ratio bucket's), and follows the declared
:class:`SampleDecoder` protocol (video clips plug in their own).
"""

from __future__ import annotations

import threading
import time
import warnings
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import torch

from turboloader.data.cache import SampleCache, is_jpeg, own_copy
from turboloader.decode import DEFAULT_MAX_PIXELS, executor
from turboloader.decode.image import decode_array, decode_rgb
from turboloader.decode.executor import GENERIC, OK
from turboloader.errors import DecodeWarning, TurboLoaderError
from turboloader.transforms import sample_key, sample_keys, sample_rng, using_rng

if TYPE_CHECKING:
    from turboloader.transforms import Plan

__all__ = ["Chunk", "DecodedCache", "Decoder", "SampleDecoder", "Timer", "batch_plan", "fill_row", "get_plan",
           "one", "run"]


class Chunk:
    """Samples gathered for one batch call, as parallel per-row lists.

    Per row: ``sources`` (encoded bytes, a decoded HWC uint8 array, a zero-argument callable
    returning an image for a custom loader, or None when the decoded image is in the cache
    under ``cache_keys``), ``sizes`` (original ``(h, w)`` of an array source, else None),
    ``labels``, ``errors`` (the exception that made the row unreadable, else None),
    ``where`` (what the dataset needs to name the sample in an error), ``slots`` (the
    random-parameter index) and ``cache_keys`` (None: not cached). ``all_jpeg``: the
    gather checked that every source is JPEG bytes (the step then skips its per-row
    test); False: not known.
    """

    __slots__ = ("sources", "sizes", "labels", "errors", "where", "slots", "cache_keys",
                 "epochs", "nbytes", "all_jpeg")

    def __init__(self):
        self.sources, self.sizes, self.labels, self.errors = [], [], [], []
        self.where, self.slots, self.cache_keys, self.epochs = [], [], [], []
        self.nbytes = 0
        self.all_jpeg = False

    def __len__(self):
        return len(self.sources)

    def add(self, source, label, where, slot, epoch, *, size=None, cache_key=None):
        self.sources.append(source)
        self.sizes.append(size)
        self.labels.append(label)
        self.errors.append(None)
        self.where.append(where)
        self.slots.append(slot)
        self.cache_keys.append(cache_key)
        self.epochs.append(epoch)

    def fail(self, exc, where, slot, epoch):
        self.add(None, None, where, slot, epoch)
        self.errors[-1] = exc


@runtime_checkable
class DecodedCache(Protocol):
    """What the step and the readers ask of a decoder's cache of decoded images
    (:class:`~turboloader.data.cache.SampleCache`, :class:`~turboloader.data.cache.ByteLRU`,
    or a compat dataset's own): membership (a gathered row that is cached reads no bytes)
    and, through :meth:`SampleDecoder.cached_array`, ``get`` / ``peek`` / ``reserve`` /
    ``put``."""

    def __contains__(self, key: Any) -> bool:
        ...

    def get(self, key: Any) -> Any:
        ...

    def peek(self, key: Any, default: Any = None) -> Any:
        ...

    def reserve(self, nbytes: int) -> Any:
        ...

    def put(self, key: Any, value: Any, nbytes: int) -> int:
        ...


@runtime_checkable
class SampleDecoder(Protocol):
    """What the sample step (:func:`run`, :func:`one`) and the datasets' gathers ask of a
    stream's decoder (:class:`Decoder` for images, the clip decoder of
    :mod:`turboloader.data.video`): a dataset supplies its own through ``_decoder()``.
    Nothing else of a decoder is read (``tests/data/test_step.py`` runs the step on an
    object that has only this).

    * ``transform``: the user's transform (annotations go through it too).
    * ``plan``: the fused plan of ``transform`` (the batch call runs it when it has one
      output shape, :func:`batch_plan`), or None (every row generic).
    * ``cache``: the stream's decoded-sample cache, or None.
    * ``max_pixels``: the decompression-bomb limit of the generic path (and of
      :func:`one`'s batch call; a stream's batch call takes its dataset's).
    * ``transform_source(source, *, rng, source_size=None, counters=None, out=None)``: one
      row the batch call did not do (encoded bytes, or a cached array of original size
      ``source_size``), transformed with the sample's generator; written into ``out`` when
      it can (then returned).
    * ``transform_image(img, rng)``: a decoded image (a user's loader's) through the
      transform with the sample's generator.
    * ``cached_array(key, data, *, counters=None, extra=None)`` and ``cached_extra(key,
      default=None)``: the cache's side, called only when ``cache`` is not None: a cached
      image ``(array, original (h, w))`` (decoded from ``data`` into the cache on a miss,
      ``(None, None)`` when it has no room), and the ``extra`` (label) kept with it.
    """

    transform: Any
    plan: Plan | None
    cache: DecodedCache | None
    max_pixels: int | None

    def transform_source(self, source: Any, *, rng: Any,
                         source_size: tuple[int, int] | None = None,
                         counters: dict[str, float] | None = None, out: Any = None) -> Any:
        ...

    def transform_image(self, img: Any, rng: Any) -> Any:
        ...

    def cached_array(self, key: Any, data: Any, *, counters: dict[str, float] | None = None,
                     extra: Any = None) -> tuple[Any, tuple[int, int] | None]:
        ...

    def cached_extra(self, key: Any, default: Any = None) -> Any:
        ...


def run(st, chunk, out, row0=0, *, counters, timing=None, decoder=None):
    """Decode and transform every readable row of ``chunk``: row ``i`` into
    ``out[row0 + i]`` on the batch path. ``decoder``: another transform's
    :class:`Decoder` instead of the stream's own (an
    aspect-ratio bucket's); the stream's cache serves it too (cached images are stored
    before any transform).

    Returns:
        ``(errors, objs)``: per row, the exception that made it fail (``chunk.errors``
        updated in place) or None; and the image when it was *not* written into
        ``out`` (the generic path, or ``out`` None), else None.
    """
    n = len(chunk)
    sources, errors, sizes = chunk.sources, chunk.errors, chunk.sizes
    objs = [None] * n
    dec = st.decoder if decoder is None else decoder
    cached = st.decoder.cache is not None
    if cached:
        _through_cache(st, chunk, counters)
    plan = (st.plan if decoder is None else decoder.plan) if out is not None else None
    # the rows the batch call takes (decoded arrays, JPEG bytes) and the generic rest, by
    # comprehension: no per-row Python beyond the JPEG test
    live = range(n) if errors.count(None) == n else [i for i in range(n) if errors[i] is None]
    if plan is None:
        fused = []
    elif chunk.all_jpeg:   # the gather tested every row (cached rows became arrays)
        fused = list(live)
    else:
        fused = [i for i in live if isinstance(src := sources[i], np.ndarray)
                 or (not callable(src) and is_jpeg(src))]
    generic = [] if len(fused) == len(live) else sorted(set(live).difference(fused))
    native = 0.0
    batch_rows = ()   # rows the fused call wrote: their masks / boxes follow its params
    if fused:
        t = time.perf_counter()
        if len(fused) == n:   # every row (the usual case): no per-row selection
            srcs, rows = sources, np.arange(row0, row0 + n, dtype=np.int64)
        else:
            srcs, rows = [sources[i] for i in fused], np.asarray(fused, np.int64) + row0
        # the executor reads the sizes (headers, max_pixels), the transforms draw on them,
        # the executor plans the slots and runs them: the stream's executor, the CPU's or
        # DataLoader(decode="gpu")'s DeviceDecode
        found = executor.read_sizes(srcs, source_sizes=_source_sizes(sizes, fused),
                                    max_pixels=st.max_pixels)
        spec = plan.draw(found.hw, _keys(st, chunk, fused), found.status == OK)
        params = executor.plan_slots(found, spec, filter=plan.filter,
                                     dct_scaling=plan.dct_scaling)
        run_batch = executor.run_batch if st.executor is None else st.executor.run_batch
        result = run_batch(srcs, params, out, rows=rows, **plan.slot_format())
        native = result.nogil_seconds
        status = result.status
        if st.joint is not None:
            ok = np.flatnonzero(status == OK)
            batch_rows = ([fused[j] for j in ok.tolist()], params, ok)
        if status.any():   # only the rows that did not run (OK is 0)
            for j in np.flatnonzero(status).tolist():
                if status[j] == GENERIC:
                    generic.append(fused[j])
                else:
                    errors[fused[j]] = result.errors[j]
        if any(result.warnings):
            for j, i in enumerate(fused):
                if result.warnings[j] and errors[i] is None:
                    warnings.warn(result.warnings[j], DecodeWarning, stacklevel=3)
        if counters is not None:
            counters["transform_s" if cached else "decode_s"] += \
                time.perf_counter() - t
        if generic:
            generic.sort()
    t_generic = time.perf_counter()
    for i in generic:
        src = sources[i]
        rng = sample_rng(st.seed, chunk.epochs[i], chunk.slots[i])
        # a device batch (decode="gpu") takes a CPU image: the caller copies it
        slot = None if out is None or (isinstance(out, torch.Tensor)
                                       and out.device.type != "cpu") else out[row0 + i]
        try:
            if callable(src):  # a user's loader: its image goes through the transform
                timer = time.perf_counter()
                img = src()
                if counters is not None:
                    counters["decode_s"] += time.perf_counter() - timer
                img = dec.transform_image(img, rng)
            else:
                img = dec.transform_source(src, rng=rng, source_size=sizes[i],
                                           counters=counters, out=slot)
        except Exception as exc:  # the caller applies the policy in row order (and
            errors[i] = exc           # raises what is not a turboloader error)
            continue
        if slot is None or not _is_slot(img, slot):
            objs[i] = img
    if st.joint is not None:
        done = (st.joint.annotate_batch(chunk.labels, *batch_rows, chunk.errors,
                                        max_pixels=st.max_pixels)
                if batch_rows else ())
        _annotate(st, chunk, dec, done)
    if timing is not None:
        # the native batch call's time without the GIL plus the rows that ran one by one;
        # the rest of this call (drawing parameters, bookkeeping) is Python
        timing("decode", native + (time.perf_counter() - t_generic))
    return errors, objs


def _annotate(st, chunk, dec, done=()):
    """The masks and boxes of every decoded row of ``chunk`` (its ``labels``, the
    ``fields`` values) through ``dec``'s transform with the row's own draws: the
    generator the image drew from (``sample_rng(seed, epoch, slot)``, which the fused
    batch call's keys are), on the image's stored size. A row whose annotations do not
    fit its image fails like an image that does not decode."""
    from turboloader.data.fields import _image_hw

    fields, errors = st.joint, chunk.errors
    for i in range(len(chunk)):
        if errors[i] is not None or i in done:   # done: by Fields.annotate_batch
            continue
        try:
            # the annotations are in the original image's coordinates (a cached array's
            # original size); the fused path draws on that size, the generic path on a
            # cached array's stored (cache_short_side) size: there they are mapped to it
            src = chunk.sources[i]
            hw = _image_hw(src, chunk.sizes[i])
            stored = (src.shape[:2] if dec.plan is None and isinstance(src, np.ndarray)
                      else None)
            chunk.labels[i] = fields.annotate(
                chunk.labels[i], hw, dec.transform,
                sample_rng(st.seed, chunk.epochs[i], chunk.slots[i]), stored=stored,
                max_pixels=st.max_pixels)
        except TurboLoaderError as exc:
            errors[i] = exc


def _keys(st, chunk, rows) -> np.ndarray:
    """uint64 keys (``sample_keys``) of ``rows``: one vectorized call when they share an
    epoch word (always, except automatic epochs of map-style datasets)."""
    epochs, slots = chunk.epochs, chunk.slots
    e0 = epochs[rows[0]]
    if len(rows) == len(slots) and epochs.count(e0) == len(epochs):
        return sample_keys(st.seed, e0, slots)
    if all(epochs[i] == e0 for i in rows):
        return sample_keys(st.seed, e0, [slots[i] for i in rows])
    return np.array([sample_key(st.seed, epochs[i], slots[i]) for i in rows], np.uint64)


def _through_cache(st, chunk, counters):
    """Replace cached rows' sources by their decoded arrays: hits, then misses (decoded
    into the cache now, when it admits them; a full cache leaves their bytes, which the
    batch call then decodes as uncached)."""
    dec = st.decoder
    sources, errors, keys = chunk.sources, chunk.errors, chunk.cache_keys
    misses = []
    for i, key in enumerate(keys):
        if key is None or errors[i] is not None:
            continue
        if sources[i] is None:
            sources[i], chunk.sizes[i] = dec.cached_array(key, None, counters=counters)
        else:
            misses.append(i)
    t = time.perf_counter()
    for i in misses:
        try:
            arr, size = dec.cached_array(keys[i], sources[i], counters=counters,
                                         extra=chunk.labels[i])
        except TurboLoaderError as exc:
            errors[i] = exc
            continue
        if arr is not None:   # else not admitted: decoded from its bytes, uncached
            sources[i], chunk.sizes[i] = arr, size
    if misses and counters is not None:
        counters["decode_s"] += time.perf_counter() - t


def _source_sizes(sizes, rows):
    """``prepare_batch``'s ``source_sizes`` for ``rows``: the original ``(h, w)`` of array
    rows from the cache, 0 (their own size) elsewhere; None when no row has one."""
    if sizes.count(None) == len(sizes) or all(sizes[i] is None for i in rows):
        return None
    out = np.zeros((len(rows), 2), np.int64)
    for j, i in enumerate(rows):
        if sizes[i] is not None:
            out[j] = sizes[i]
    return out


def _is_slot(img, slot) -> bool:
    return (isinstance(img, torch.Tensor) and img.data_ptr() == slot.data_ptr()
            and img.dtype == slot.dtype and img.shape == slot.shape)


def fill_row(out, r, img):
    """Copy ``img`` into ``out[r]`` (a generic-path image of a batch on the batch path).

    Raises:
        RuntimeError: the shapes differ (torch's ``stack`` message, naming turboloader).
        TypeError: ``img`` is not a tensor.
    """
    if not isinstance(img, torch.Tensor):
        raise TypeError(f"expected a tensor image, got {type(img).__name__}")
    dst = out[r]
    if tuple(img.shape) != tuple(dst.shape):
        raise RuntimeError(f"stack expects each tensor to be equal size, but got "
                           f"{tuple(dst.shape)} and {tuple(img.shape)} in one batch "
                           f"(turboloader)")
    dst.copy_(img)


# -- the per-sample decoder of image streams (moved from data/cache.py, which holds caches) --

def get_plan(transform):
    """The fused plan of a turboloader transform pipeline, or None (generic path)."""
    if transform is None:
        return None
    try:
        from turboloader.transforms import plan
    except ImportError:
        return None
    return plan(transform)


def batch_plan(decoder: SampleDecoder) -> Any:
    """The plan a stream's batch call runs for ``decoder``: its plan when every row has one
    output shape, else None (every row then takes the generic path, which still fuses a
    JPEG's decode and transform)."""
    plan = decoder.plan
    return plan if plan is not None and plan.output_shape is not None else None


class Timer:
    """Per-epoch time counters of a Recorder (a no-op without one)."""

    __slots__ = ("counters", "t")

    def __init__(self, counters):
        self.counters = counters
        self.t = time.perf_counter()

    def lap(self, name):
        now = time.perf_counter()
        if self.counters is not None:
            self.counters[name] += now - self.t
        self.t = now


class Decoder:
    """Bytes of an encoded image to the transformed sample, through the cache when on.

    The decoding itself is :mod:`turboloader.decode.image`'s (``decode_array``,
    ``decode_rgb``); this class composes it with the cache, the fused plan and the sample's
    generator, and stays in ``data/`` because it calls the plan (a floor below it), which a
    class in ``decode/`` could only do by calling up a floor.

    * plan and JPEG, no cache: ``plan.from_jpeg`` (fused decode + transform; its time is
      counted as decode).
    * cache: decode (resized to ``short_side`` when set) to an HWC uint8 array once, into
      the cache's memory, then ``plan.from_array`` (or the generic path on
      ``PIL.Image.fromarray``) on every use; a sample the full cache did not admit takes
      the uncached path.
    * otherwise: decode to a PIL RGB image (JPEG with libjpeg-turbo, others with Pillow)
      and call ``transform(img)`` with the sample's generator current.
    """

    def __init__(self, transform, *, cache=None, short_side=None, max_pixels=DEFAULT_MAX_PIXELS):
        self.transform = transform
        self.plan = get_plan(transform)
        self.cache = SampleCache(cache) if cache else None
        self.short_side = short_side
        self.max_pixels = max_pixels

    def _scratch(self, nbytes):
        """A flat uint8 buffer of at least ``nbytes``, reused by the calling thread: the
        full-size decode of an image the cache stores smaller, without faulting in fresh
        memory for each."""
        local = self.__dict__.setdefault("_local", threading.local())
        buf = getattr(local, "buf", None)
        if buf is None or buf.nbytes < nbytes:
            buf = local.buf = np.empty(nbytes + nbytes // 4, np.uint8)
        return buf

    def transform_image(self, img, rng):
        """A decoded image through ``transform`` with the sample's generator ``rng``."""
        if self.transform is None:
            return img
        with using_rng(rng):
            return self.transform(img)

    def cached_extra(self, key, default=None):
        """A copy (:func:`own_copy`) of the ``extra`` stored with ``key``'s cached image
        (e.g. its label), or ``default``."""
        if self.cache is None:
            return default
        entry = self.cache.peek(key)
        return default if entry is None else own_copy(entry[2])

    def cached_array(self, key, data, *, counters=None, extra=None):
        """``(array, original (h, w))`` of the cached image ``key``: from the cache, or on a
        miss decoded from ``data`` (downscaled to ``short_side`` when set) into memory the
        cache reserves and stored with ``extra``; ``(None, None)`` when the cache has no
        room for it (the caller decodes ``data`` as if uncached). Needs the cache on.

        Raises:
            DecodeError: ``data`` does not decode (nothing is cached then).
        """
        cache = self.cache
        hit = cache.get(key)
        if hit is not None:
            if counters is not None:
                counters["cache_hits"] += 1
            return hit[0], hit[1]
        if counters is not None:
            counters["cache_misses"] += 1
        arr, source = decode_array(data, short_side=self.short_side,
                                    max_pixels=self.max_pixels, alloc=cache.reserve,
                                    scratch=self._scratch)
        if arr is None:
            return None, None
        arr.setflags(write=False)
        evicted = cache.put(key, (arr, source, own_copy(extra)), arr.nbytes)
        if counters is not None:
            counters["cache_evictions"] += evicted
        return arr, source

    def transform_source(self, source, *, rng, source_size=None, counters=None, out=None):
        """The transformed image of one gathered source: encoded bytes (JPEG: the fused plan
        when there is one; other formats: Pillow, then ``transform``), or a decoded HWC uint8
        array (from the cache; ``source_size`` its original ``(h, w)``). ``out``: as in
        :meth:`__call__`."""
        timer = Timer(counters)
        plan = self.plan
        if isinstance(source, np.ndarray):
            if plan is not None:
                src = None if source_size is None or tuple(source_size) == source.shape[:2] \
                    else tuple(source_size)
                out = plan.from_array(source, rng=rng, source_size=src, out=out)
            else:
                from PIL import Image

                out = self.transform_image(Image.fromarray(source), rng)
            timer.lap("transform_s")
            return out
        if plan is not None and is_jpeg(source):
            out = plan.from_jpeg(source, rng=rng, max_pixels=self.max_pixels, out=out)
            timer.lap("decode_s")
            return out
        img = decode_rgb(source, max_pixels=self.max_pixels)
        timer.lap("decode_s")
        out = self.transform_image(img, rng)
        timer.lap("transform_s")
        return out

    def __call__(self, data: Any, *, key: Any = None, seed: int = 0, epoch: int = 0,
                 slot: int = 0, counters: dict[str, float] | None = None, extra: Any = None,
                 out: Any = None) -> Any:
        """One sample: :func:`one` with this decoder (the step on a chunk of one)."""
        return one(self, data, key=key, seed=seed, epoch=epoch, slot=slot,
                   counters=counters, extra=extra, out=out)


class _Lone:
    """What :func:`run` reads of a stream, for :func:`one`'s chunk of one: the decoder's
    own plan and ``max_pixels``, the CPU's executor, no fields."""

    __slots__ = ("decoder", "plan", "seed", "max_pixels", "executor", "joint")

    def __init__(self, decoder, seed):
        self.decoder = decoder
        self.plan = batch_plan(decoder)
        self.seed = seed
        self.max_pixels = decoder.max_pixels
        self.executor = None
        self.joint = None


def one(decoder: SampleDecoder, data: Any, *, key: Any = None, seed: int = 0,
        epoch: int = 0, slot: int = 0, counters: dict[str, float] | None = None,
        extra: Any = None, out: Any = None) -> Any:
    """The transformed image of one sample: :func:`run` on a chunk of one, so it is the
    batch path's (the same cache, sizes, draws, executor, generic fallback and failures):
    exactly the pixels a dataset's batch row of ``seed``, ``epoch`` and ``slot`` gets
    (random parameters those of ``sample_rng(seed, epoch, slot)``).

    Args:
        decoder: a :class:`SampleDecoder` (:class:`Decoder` for images).
        data: encoded bytes, a decoded ``(H, W, 3)`` uint8 array, a zero-argument callable
            returning an image (a user's loader), or None when ``key`` is cached.
        key: the sample's name in the decoder's cache (None: not cached), where ``extra``
            is kept with it.
        out: an optional C-contiguous ``(3, H, W)`` CPU tensor of the plan's output
            written and returned when the batch path runs (e.g. ``batch[i]``); the generic
            path may return another image: callers check ``result is out``.

    Raises:
        The sample's exception: a turboloader error (``DecodeError``, over
        ``max_pixels``, ...) or whatever the transform or loader raised.
    """
    chunk = Chunk()
    cached = key is not None and decoder.cache is not None
    chunk.add(data, extra, None, slot, epoch, cache_key=key if cached else None)
    st = _Lone(decoder, seed)
    rows: Any = None   # the batch of one: out as a row, or a new one on the batch path
    if out is not None:
        rows = out[None]
    elif st.plan is not None:
        rows = torch.empty((1, *st.plan.output_shape), dtype=st.plan.output_dtype)
    errors, objs = run(st, chunk, rows, counters=counters)
    if errors[0] is not None:
        raise errors[0]
    if objs[0] is not None:
        return objs[0]
    return out if out is not None else rows[0]
