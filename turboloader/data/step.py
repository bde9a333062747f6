"""The one sample step: what every dataset's stream does with a gathered chunk of samples
(TAR, Parquet, TBL and folder datasets, video clips, aspect-ratio buckets alike).

For each row: the cache (a cached decoded image replaces the encoded bytes) -> sizes (the
stored size of cached rows) -> draw and run (the fused plan's batch call: the transform's
parameters drawn from the sample's key, decoded and transformed into the row of the batch
without the GIL) -> the generic fallback (rows the batch call cannot do, formats without a
plan, a user's loader: the stream decoder's ``transform_source``) -> annotate (masks and
boxes of ``fields=`` through the same transform with the image's draws).

``st`` is the stream's :class:`~turboloader.data.reader.StreamReader`; the decoder is the
stream's, or a group's (an aspect-ratio bucket's), and follows the declared
:class:`SampleDecoder` protocol (video clips plug in their own).
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from turboloader.data.cache import is_jpeg
from turboloader.decode.executor import GENERIC, OK
from turboloader.errors import DecodeWarning, TurboLoaderError
from turboloader.transforms import sample_key, sample_keys, sample_rng

__all__ = ["SampleDecoder", "fill_row", "run"]


@runtime_checkable
class SampleDecoder(Protocol):
    """What the sample step asks of a stream's decoder
    (:class:`~turboloader.data.cache.Decoder` for images, the clip decoder of
    :mod:`turboloader.data.video`): a dataset supplies its own through ``_decoder()``.

    * ``transform``: the user's transform (annotations go through it too).
    * ``plan``: the fused plan that the batch call runs, or None (every row generic).
    * ``cache``: the stream's decoded-sample cache, or None.
    * ``transform_source(source, *, rng, source_size=None, counters=None, out=None)``: one
      row the batch call did not do (encoded bytes, or a cached array of original size
      ``source_size``), transformed with the sample's generator; written into ``out`` when
      it can (then returned).
    * ``transform_image(img, rng)``: a decoded image (a user's loader's) through the
      transform with the sample's generator.
    """

    transform: Any
    plan: Any   # a turboloader.transforms.Plan, or None
    cache: Any  # a turboloader.data.cache.SampleCache, or None

    def transform_source(self, source: Any, *, rng: Any,
                         source_size: tuple[int, int] | None = None,
                         counters: dict[str, float] | None = None, out: Any = None) -> Any:
        ...

    def transform_image(self, img: Any, rng: Any) -> Any:
        ...


def run(st, chunk, out, row0=0, *, counters, timing=None, decoder=None):
    """Decode and transform every readable row of ``chunk``: row ``i`` into
    ``out[row0 + i]`` on the batch path. ``decoder``: another transform's
    :class:`~turboloader.data.cache.Decoder` instead of the stream's own (an
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
    fused, generic = [], []
    for i in range(n):
        if errors[i] is not None:
            continue
        src = sources[i]
        if plan is not None and (isinstance(src, np.ndarray) or
                                 (not callable(src) and is_jpeg(src))):
            fused.append(i)
        else:
            generic.append(i)
    native = 0.0
    batch_rows = ()   # rows the fused call wrote: their masks / boxes follow its params
    if fused:
        t = time.perf_counter()
        if len(fused) == n:   # every row (the usual case): no per-row selection
            srcs, rows = sources, np.arange(row0, row0 + n, dtype=np.int64)
        else:
            srcs, rows = [sources[i] for i in fused], np.asarray(fused, np.int64) + row0
        params = plan.prepare_batch(srcs, _keys(st, chunk, fused),
                                    source_sizes=_source_sizes(sizes, fused),
                                    max_pixels=st.max_pixels)
        # the stream's executor: the CPU's, or DataLoader(decode="gpu")'s DeviceDecode
        result = plan.run_batch(srcs, params, out, rows=rows, executor=st.executor)
        native = result.nogil_seconds
        status = result.status
        if st.joint is not None:
            ok = np.flatnonzero(status == OK)
            batch_rows = ([fused[j] for j in ok.tolist()], params, ok)
        if status.any():
            status = status.tolist()
            for j, i in enumerate(fused):
                if status[j] == GENERIC:
                    generic.append(i)
                elif status[j] != OK:
                    errors[i] = result.errors[j]
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
