"""The sample reader the three datasets share: decoder + cache + failure policy + statistics +
per-stream state, and the batch path that turns many gathered samples into batch rows at once.

A *stream* is what reads samples with its own decoder, cache, statistics recorder and failure
budget: the main process (``"main"``), a DataLoader worker process (``"worker{id}"``), or a
decode thread of ``turboloader.DataLoader(backend="threads")``, which names itself with
:func:`reading_as`. Each stream has one :class:`StreamReader`, made on first use in the
process that reads (never pickled).

The batch path, per chunk of samples (typically a batch):

1. the dataset *gathers* each sample into a :class:`Chunk`: its encoded bytes (a ``pread``
   into a reused buffer, an mmap slice, a file's bytes), or a decoded array from the cache,
   its label (a TAR shard's labels are parsed once per shard), its random-parameter index,
   and where it came from (for error messages); a sample that cannot be read is a row with
   an error instead;
2. :meth:`StreamReader.decode` decodes and transforms every row at once: keys from
   ``(seed, epoch, index)``, ``plan.prepare_batch`` and ``plan.run_batch`` (one call, the
   GIL released) write the rows of the batch tensor; a row the fused plan cannot do (a PNG,
   a crop larger than its image) runs the per-sample generic path; a row that fails is an
   error for that row, never an abort of the chunk;
3. the dataset walks the rows in order and applies the failure policy to the failed ones
   (raise with notes naming the shard, key and offset; or skip, keeping the per-sample
   order: later rows move up and the stream tops the batch up).

The map-style datasets (:class:`MapDataset`: ``ImageFolder``, ``TBLDataset``) share their
``__getitem__``/``__getitems__`` here: a failed index is replaced by the next readable one
(wrapping around) with the requested index's random parameters, within the budget.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from contextlib import contextmanager

import numpy as np
import torch

from turboloader.data._buffers import BufferPool, as_row, shared_pool
from turboloader.data.cache import Decoder, is_jpeg, parse_size
from turboloader.data.epochs import EpochMixin, SharedEpoch
from turboloader.data.failures import FailureLog, FailurePolicy
from turboloader.data.telemetry import Telemetry
from turboloader.errors import DecodeWarning, FailureBudgetExceeded, TurboLoaderError
from turboloader.transforms._batch import GENERIC, OK
from turboloader.transforms._random import sample_key, sample_keys, sample_rng

__all__ = ["BATCH_CHUNK", "Chunk", "GATHER_BYTES", "MIN_CHUNK", "MapDataset", "ReaderMixin",
           "SAMPLE_CHUNK", "StreamReader", "collate_labels", "compact", "fill_row", "reading_as",
           "stream_name"]

#: Samples per batch call when a dataset yields single samples (``__iter__`` under a
#: DataLoader that batches them): large enough to amortise the per-call work (16 -> 64 took
#: ``TarDataset`` under torch's ``DataLoader(num_workers=2)`` from 1.80-1.82 to 1.52 ms of CPU
#: per ImageNet-sized train sample in ``benchmarks/run.py --quick``), small enough that a
#: chunk's recycled buffer (this many output images: 38.5 MB of float32 3 x 224 x 224) stays
#: well under a batch.
SAMPLE_CHUNK = 64

#: Most samples gathered for one batch call (see :meth:`StreamReader.chunk_size`). Larger
#: calls amortise the per-call Python (drawing a chunk's parameters has a fixed cost of
#: ~0.7 ms): parts of 64 ImageNet-sized samples cost ~20 us of Python per sample in
#: ``benchmarks/bench_hotpath.py``, parts of 256 ~12 us, the ~150 of an 8 MB budget ~14 us.
BATCH_CHUNK = 256

#: ...but a chunk holds about this many encoded bytes at most (at the mean size of the
#: stream's last chunk), so a stream's gather buffer stays this size for large photographs;
#: a stream's first chunk (no sizes seen yet), map-style datasets' chunks (their reads are
#: not counted) and any chunk hold ``MIN_CHUNK`` samples at least.
GATHER_BYTES = 8 << 20
MIN_CHUNK = 64

_local = threading.local()
_LOCK = threading.Lock()  # guards every dataset's _states (module level: picklable datasets)


@contextmanager
def reading_as(name: str):
    """Samples read by this thread inside the block belong to the stream ``name``."""
    prev = getattr(_local, "name", None)
    _local.name = name
    try:
        yield
    finally:
        _local.name = prev


def stream_name(default=None) -> str:
    """The calling thread's stream: set by :func:`reading_as`, else ``default`` when given,
    else ``"worker{id}"`` in a DataLoader worker process, else ``"main"``."""
    name = getattr(_local, "name", None)
    if name is not None:
        return name
    if default is not None:
        return default
    info = torch.utils.data.get_worker_info()
    return f"worker{info.id}" if info is not None else "main"


class Chunk:
    """Samples gathered for one batch call, as parallel per-row lists.

    Per row: ``sources`` (encoded bytes, a decoded HWC uint8 array, a zero-argument callable
    returning an image for a custom loader, or None when the decoded image is in the cache
    under ``cache_keys``), ``sizes`` (original ``(h, w)`` of an array source, else None),
    ``labels``, ``errors`` (the exception that made the row unreadable, else None),
    ``where`` (what the dataset needs to name the sample in an error), ``slots`` (the
    random-parameter index) and ``cache_keys`` (None: not cached).
    """

    __slots__ = ("sources", "sizes", "labels", "errors", "where", "slots", "cache_keys",
                 "epochs", "nbytes")

    def __init__(self):
        self.sources, self.sizes, self.labels, self.errors = [], [], [], []
        self.where, self.slots, self.cache_keys, self.epochs = [], [], [], []
        self.nbytes = 0

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


class StreamReader:
    """What one stream keeps while reading: its decoder (and cache), statistics recorder,
    per-epoch failure logs, recycled chunk buffers and gather buffer. Never pickled."""

    def __init__(self, dataset, name, *, flush_failures=False):
        self.pid = os.getpid()
        self.name = name
        self.leased = False  # held by one iteration (see ReaderMixin._lease)
        self.seed = dataset.seed
        self.max_pixels = dataset.max_pixels
        self.decoder = Decoder(dataset.transform, cache=dataset.cache_bytes,
                               short_side=dataset.cache_short_side, max_pixels=dataset.max_pixels)
        plan = self.decoder.plan
        # the batch path needs one output shape for all rows; otherwise every row runs the
        # per-sample path (which still fuses JPEG decoding and the transform)
        self.plan = plan if plan is not None and plan.output_shape is not None else None
        # map-style streams report failures at once: their worker never sees a pass end
        self.recorder = dataset._telemetry.recorder(name, interval=dataset.stats_interval,
                                                    flush_failures=flush_failures)
        self.recorder.cache = self.decoder.cache
        self._seen = None  # map-style: indices read in the current pass
        self._pass = None  # map-style: (epoch, FailureLog) of the current pass
        self.buffers = BufferPool(capacity=4)
        fields = getattr(dataset, "_fields", None)
        # fields with masks / boxes: transformed with each image's draws after the batch call
        self.joint = fields if fields is not None and fields.joint else None
        self._gather = np.empty(0, np.uint8)
        self._sample_bytes = 0.0  # mean encoded size in the last chunk read (0: none yet)

    def chunk_size(self, want) -> int:
        """Samples for the next batch call of ``want`` still to fill: ``BATCH_CHUNK`` at
        most, about ``GATHER_BYTES`` of encoded bytes, at least ``MIN_CHUNK`` (both capped by
        ``BATCH_CHUNK``)."""
        n = min(MIN_CHUNK, BATCH_CHUNK)
        if self._sample_bytes > 0:
            n = max(n, min(BATCH_CHUNK, int(GATHER_BYTES // self._sample_bytes)))
        return min(want, n)

    def saw(self, chunk, n):
        """Record the encoded bytes a chunk of ``n`` samples read (for :meth:`chunk_size`)."""
        if n > 0 and chunk.nbytes > 0:
            self._sample_bytes = chunk.nbytes / n

    @property
    def out_shape(self):
        """``((3, H, W), torch dtype)`` of every sample on the batch path, else None."""
        plan = self.plan
        return None if plan is None else (tuple(plan.output_shape), plan.output_dtype)

    def pass_log(self, policy, n, epoch, indices) -> FailureLog:
        """The failure log of the map-style pass that asks for ``indices`` now (a budget
        over ``n`` samples). A pass of a sampler asks for each index at most once, so a
        stream starts a new pass, with a budget of its own, when the epoch changes or an
        index it already read in this one comes again: automatic epochs (no ``set_epoch``)
        and repeated passes over one epoch each get their own budget."""
        seen = self._seen
        if seen is None or len(seen) != n:
            seen = self._seen = np.zeros(n, bool)
            self._pass = None
        idx = np.asarray(indices, np.int64)
        if self._pass is None or self._pass[0] != epoch or seen[idx].any():
            seen[:] = False
            self._pass = (epoch, FailureLog(policy, n, epoch=epoch, recorder=self.recorder))
        seen[idx] = True
        return self._pass[1]

    def gather_buffer(self, nbytes) -> np.ndarray:
        """A byte buffer of at least ``nbytes`` for gathering a chunk's encoded samples,
        reused across chunks (replaced, never resized, so views of the old one stay valid)."""
        if self._gather.nbytes < nbytes:
            self._gather = None  # dropped first: one buffer per stream at a time
            self._gather = np.empty(nbytes + nbytes // 8, np.uint8)
        return self._gather

    def rows(self, n, *, shared=False):
        """A recycled ``(n, *shape)`` buffer for ``n`` samples of the batch path; with
        ``shared``, one of this process's shared buffers (a DataLoader worker's, sent to
        the main process by :meth:`BufferPool.send <turboloader.data._buffers.BufferPool.
        send>`)."""
        shape, dtype = self.out_shape
        return (shared_pool() if shared else self.buffers).get((n, *shape), dtype)

    # -- the batch call -------------------------------------------------------------------

    def decode(self, chunk, out, row0=0, *, counters, timing=None, decoder=None):
        """Decode and transform every readable row of ``chunk``: row ``i`` into
        ``out[row0 + i]`` on the batch path. ``decoder``: another transform's
        :class:`~turboloader.data.cache.Decoder` (no cache) instead of the stream's own (an
        aspect-ratio bucket's).

        Returns:
            ``(errors, objs)``: per row, the exception that made it fail (``chunk.errors``
            updated in place) or None; and the image when it was *not* written into
            ``out`` (the generic path, or ``out`` None), else None.
        """
        n = len(chunk)
        sources, errors, sizes = chunk.sources, chunk.errors, chunk.sizes
        objs = [None] * n
        dec = self.decoder if decoder is None else decoder
        if dec.cache is not None:
            self._through_cache(chunk, counters)
        plan = (self.plan if decoder is None else decoder.plan) if out is not None else None
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
            params = plan.prepare_batch(srcs, self._keys(chunk, fused),
                                        source_sizes=_source_sizes(sizes, fused),
                                        max_pixels=self.max_pixels)
            result = plan.run_batch(srcs, params, out, rows=rows, max_pixels=self.max_pixels)
            native = result.nogil_seconds
            status = result.status
            if self.joint is not None:
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
                counters["transform_s" if dec.cache is not None else "decode_s"] += \
                    time.perf_counter() - t
            if generic:
                generic.sort()
        t_generic = time.perf_counter()
        for i in generic:
            src = sources[i]
            rng = sample_rng(self.seed, chunk.epochs[i], chunk.slots[i])
            slot = None if out is None else out[row0 + i]
            try:
                if callable(src):  # a user's loader: its image goes through the transform
                    timer = time.perf_counter()
                    img = src()
                    if counters is not None:
                        counters["decode_s"] += time.perf_counter() - timer
                    img = dec._generic(img, rng)
                else:
                    img = dec.transform_source(src, rng=rng, source_size=sizes[i],
                                               counters=counters, out=slot)
            except Exception as exc:  # the caller applies the policy in row order (and
                errors[i] = exc           # raises what is not a turboloader error)
                continue
            if slot is None or not _is_slot(img, slot):
                objs[i] = img
        if self.joint is not None:
            done = (self.joint.annotate_batch(chunk.labels, *batch_rows, chunk.errors)
                    if batch_rows else ())
            self._annotate(chunk, dec, done)
        if timing is not None:
            # the native batch call's time without the GIL plus the rows that ran one by one;
            # the rest of this call (drawing parameters, bookkeeping) is Python
            timing("decode", native + (time.perf_counter() - t_generic))
        return errors, objs

    def _annotate(self, chunk, dec, done=()):
        """The masks and boxes of every decoded row of ``chunk`` (its ``labels``, the
        ``fields`` values) through ``dec``'s transform with the row's own draws: the
        generator the image drew from (``sample_rng(seed, epoch, slot)``, which the fused
        batch call's keys are), on the image's stored size. A row whose annotations do not
        fit its image fails like an image that does not decode."""
        from turboloader.data.fields import _image_hw

        fields, errors = self.joint, chunk.errors
        for i in range(len(chunk)):
            if errors[i] is not None or i in done:   # done: by Fields.annotate_batch
                continue
            try:
                # the size the image's draws saw: the stored size on the fused path (a cached
                # array's original), the array's own on the generic path
                src = chunk.sources[i]
                hw = _image_hw(src, chunk.sizes[i] if dec.plan is not None
                               or not isinstance(src, np.ndarray) else None)
                chunk.labels[i] = fields.annotate(
                    chunk.labels[i], hw, dec.transform,
                    sample_rng(self.seed, chunk.epochs[i], chunk.slots[i]))
            except TurboLoaderError as exc:
                errors[i] = exc

    def _keys(self, chunk, rows) -> np.ndarray:
        """uint64 keys (``sample_keys``) of ``rows``: one vectorized call when they share an
        epoch word (always, except automatic epochs of map-style datasets)."""
        epochs, slots = chunk.epochs, chunk.slots
        e0 = epochs[rows[0]]
        if len(rows) == len(slots) and epochs.count(e0) == len(epochs):
            return sample_keys(self.seed, e0, slots)
        if all(epochs[i] == e0 for i in rows):
            return sample_keys(self.seed, e0, [slots[i] for i in rows])
        return np.array([sample_key(self.seed, epochs[i], slots[i]) for i in rows], np.uint64)

    def _through_cache(self, chunk, counters):
        """Replace cached rows' sources by their decoded arrays: hits, then misses (decoded
        into the cache now, when it admits them; a full cache leaves their bytes, which the
        batch call then decodes as uncached)."""
        dec = self.decoder
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


def compact(out, good_rows, row0):
    """Move the rows ``good_rows`` (ascending, each >= its target) of ``out`` down to
    ``row0, row0 + 1, ...``: a skipped sample's later neighbours take its place, keeping
    the per-sample order."""
    dst = row0
    for r in good_rows:
        if r != dst:
            out[dst].copy_(out[r])
        dst += 1
    return dst


def collate_labels(labels):
    """Labels of a batch as ``default_collate`` makes them (an int64 tensor for ints)."""
    if labels and all(type(v) is int for v in labels):
        return torch.tensor(labels, dtype=torch.int64)
    from torch.utils.data._utils.collate import default_collate

    return default_collate(labels)


# -- the datasets' shared scaffolding --------------------------------------------------------


class ReaderMixin(EpochMixin):
    """What every turboloader dataset has: seed, transforms, cache, failure policy,
    decompression-bomb limit, statistics and epochs, and one :class:`StreamReader` per
    stream that reads it."""

    def _init_reader(self, transform, target_transform, *, seed, cache, cache_short_side,
                     on_error, max_failures, max_pixels, stats_interval):
        if int(seed) < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        from turboloader.transforms._plan import _warn_unfused

        _warn_unfused(transform, type(self).__name__, stacklevel=4)  # once, in the main process
        self.transform = transform
        self.target_transform = target_transform
        self.seed = int(seed)
        self.cache_bytes = parse_size(cache) if cache else 0
        self.cache_short_side = cache_short_side
        self.policy = FailurePolicy(on_error, max_failures)
        self.max_pixels = max_pixels
        self.stats_interval = int(stats_interval)
        self._epoch = SharedEpoch()
        self._telemetry = Telemetry()
        self._states = {}  # stream name -> StreamReader of this process

    @property
    def _cache_bytes(self):  # the name before cache_bytes was public
        return self.cache_bytes

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_states"] = {}
        return state

    def _new_reader(self, name) -> StreamReader:
        return StreamReader(self, name)

    def _lease(self, name=None) -> StreamReader:
        """A reader of stream ``name`` (default: the calling thread's, see
        :func:`stream_name`) for one iteration, or one map-style call, to use alone until
        :meth:`_release`: the stream's own, made on first use in this process and kept
        across passes (its cache, statistics and open shards), unless another iteration
        holds it; then a reader of its own (``"{name}#2"``, ...). So two passes over one
        dataset at once (two loaders, an eval pass while the train iterator is paused, two
        threads) never share a gather buffer, an open shard or a batch buffer. Readers
        inherited from a parent process (fork) are dropped, not closed."""
        name = stream_name() if name is None else name
        pid = os.getpid()
        with _LOCK:
            states = self._states
            if any(s.pid != pid for s in states.values()):
                states = self._states = {k: s for k, s in states.items() if s.pid == pid}
            k = 1
            while True:
                key = name if k == 1 else f"{name}#{k}"
                st = states.get(key)
                if st is None:
                    st = states[key] = self._new_reader(key)
                if not st.leased:
                    st.leased = True
                    return st
                k += 1

    @staticmethod
    def _release(st) -> None:
        """``st`` (from :meth:`_lease`) is free for the stream's next iteration."""
        st.leased = False

    def _own_readers(self) -> list:
        """The readers this process created (for flushing their statistics)."""
        pid = os.getpid()
        with _LOCK:
            return [s for s in self._states.values() if s.pid == pid]

    def stats(self, epoch=None) -> dict:
        """Counters of every stream that read this dataset, for ``epoch`` or all epochs.

        Returns a dict: ``samples``, ``bytes_read``, ``read_s``, ``decode_s`` (a fused
        decode + transform counts here), ``transform_s``, ``failures``, ``cache_hits``,
        ``cache_misses``, ``cache_hit_rate`` (hits / lookups, None without the cache),
        ``cache_evictions`` (0: the cache keeps what it admitted), ``cache_bytes`` (now,
        summed over streams), ``skipped`` (one dict per skipped sample: ``shard``, ``key``, ``offset``,
        ``reason``, ``epoch``, ``worker``) and ``workers`` (the same counters per stream,
        each with its ``cache`` gauge).
        """
        for st in self._own_readers():
            st.recorder.flush()
        return self._telemetry.collect(epoch)


class MapDataset(ReaderMixin):
    """The map-style datasets' reading: ``__getitem__`` and ``__getitems__`` over the batch
    path, with the skip-and-advance failure policy.

    A subclass provides ``__len__``, ``_gather(st, chunk, i, slot, epoch, counters)`` (add
    sample ``i`` to the chunk: its source and label, or the error that made it unreadable;
    errors that are not turboloader's propagate) and ``_where(st, where)`` (``(note,
    shard, key, offset)`` naming a gathered sample in errors and in ``stats()``).
    """

    _fields = None  # a turboloader.data.fields.Fields when the dataset yields fields

    def _new_reader(self, name) -> StreamReader:
        return StreamReader(self, name, flush_failures=True)

    def __getitem__(self, index):
        """``(image, target)`` for ``index`` (or, under "skip", for the next readable index).

        With a sequence of indices (a list, tuple, 1-D array or tensor), the whole batch:
        ``[images, targets]`` as ``default_collate`` makes them, the images decoded straight
        into one tensor, in recycled shared memory inside a DataLoader worker so that
        handing it to the main process copies nothing. That is torch's way to load batches from a
        map-style dataset::

            sampler = torch.utils.data.BatchSampler(RandomSampler(ds), 256, drop_last=False)
            loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=None,
                                                 num_workers=8)
        """
        if isinstance(index, (list, tuple, np.ndarray, torch.Tensor)) and np.ndim(index) == 1:
            return self._batch([int(i) for i in index])
        return self.__getitems__([index])[0]

    def _batch(self, indices):
        st = self._lease()
        try:
            n = len(indices)
            out = None
            # in a worker the batch crosses to the main process by handle
            worker = torch.utils.data.get_worker_info() is not None
            if st.plan is not None and n:
                out = st.rows(n, shared=worker)
            samples = self._read(st, indices, out, None)
        finally:
            self._release(st)
        fields = self._fields
        images = [s[fields.image] for s in samples] if fields is not None else \
            [img for img, _ in samples]
        if out is not None:
            for r, img in enumerate(images):
                if not _is_slot(img, out[r]):
                    fill_row(out, r, img)
        else:
            from torch.utils.data._utils.collate import default_collate

            out = default_collate(images) if images else torch.empty(0)
        if worker:
            out = shared_pool().send(out)
        if fields is not None:
            return fields.batch(out, samples)
        return [out, collate_labels([label for _, label in samples])]

    def __getitems__(self, indices, *, out=None, timing=None) -> list:
        """``[(image, target), ...]`` for ``indices``, decoded and transformed as one batch
        (what torch's DataLoader calls to fetch a batch; ``__getitem__`` is a batch of one).

        Args:
            indices: sample indices (negative ones count from the end).
            out: optional ``(len(indices), C, H, W)`` CPU tensor the images are written
                into (the thread backend's batch rows); images on the batch path are then
                ``out[j]``. Without it they are views of a buffer recycled once nothing
                references it (e.g. after the DataLoader's collate copied them).
            timing: optional ``timing(stage, seconds)`` called with the time spent reading
                (``"read"``) and decoding (``"decode"``).

        Raises:
            IndexError: an index out of range. The typed error of a sample that does not
                read, under ``on_error="raise"``, with a note naming it;
                FailureBudgetExceeded over the skip budget.
        """
        st = self._lease()
        try:
            return self._read(st, indices, out, timing)
        finally:
            self._release(st)

    def _read(self, st, indices, out, timing) -> list:
        """``__getitems__`` with the reader ``st`` this call leased."""
        n = len(self)
        idx = []
        for index in indices:
            index = int(index)
            if not -n <= index < n:
                raise IndexError(f"index {index} out of range for {n} samples")
            idx.append(index % n)
        epoch = self.epoch
        counters = st.recorder.counters(epoch)
        log = st.pass_log(self.policy, n, epoch, idx)
        row = None
        if out is None and st.plan is not None:
            # in a worker: rows of a recycled shared buffer, which torch's collate hands to
            # the main process as the batch without a copy
            worker = torch.utils.data.get_worker_info() is not None
            out = st.rows(len(idx), shared=worker)
            row = as_row if worker else None
        samples = []
        a = 0
        while a < len(idx):
            part = idx[a:a + st.chunk_size(len(idx) - a)]
            t0 = time.perf_counter()
            chunk = Chunk()
            for i in part:
                self._gather(st, chunk, i, i, self._sample_epoch(), counters)
                if i in log.bad and chunk.errors[-1] is None:  # failed before in this pass:
                    chunk.errors[-1] = log.bad[i]             # not decoded or counted again
            st.saw(chunk, len(part))
            if timing is not None:
                timing("read", time.perf_counter() - t0)
            errors, objs = st.decode(chunk, out, a, counters=counters, timing=timing)
            for r in range(len(part)):
                if errors[r] is not None:
                    img, label = self._replace(st, log, chunk, r, part[r], errors[r], out, a,
                                               counters)
                    if row is not None and out is not None and _is_slot(img, out[a + r]):
                        img = row(img)
                else:
                    img = objs[r]
                    if img is None:
                        img = out[a + r] if row is None else row(out[a + r])
                    label = chunk.labels[r]
                if self._fields is not None:
                    samples.append(self._fields.sample(img, label))
                    continue
                if self.target_transform is not None:
                    label = self.target_transform(label)
                samples.append((img, label))
            a += len(part)
        counters["samples"] += len(samples)
        st.recorder.sample_done(len(samples))
        return samples

    def _replace(self, st, log, chunk, r, index, exc, out, row0, counters):
        """Row ``r`` (of ``out``'s row ``row0 + r``), sample ``index``, failed with ``exc``:
        apply the policy (raise) or read the next indices in turn, with row ``r``'s random
        parameters, until one reads (skip). Each sample that fails is counted once per pass
        and never decoded again in it; a run of bad samples is jumped over once it is known
        (linear time however long the run)."""
        n = len(self)
        slot, epoch = chunk.slots[r], chunk.epochs[r]
        self._failed(st, log, index, exc, chunk.where[r])
        run = [index]
        cand = index
        for _ in range(n - 1):
            cand = log.jump.get(cand, (cand + 1) % n)
            if cand == index:
                break
            if cand in log.bad:
                run.append(cand)
                continue
            one = Chunk()
            self._gather(st, one, cand, slot, epoch, counters)
            errors, objs = st.decode(one, out, row0 + r, counters=counters)
            if errors[0] is None:
                for b in run:
                    log.jump[b] = cand
                img = objs[0] if objs[0] is not None else out[row0 + r]
                return img, one.labels[0]
            self._failed(st, log, cand, errors[0], one.where[0])
            run.append(cand)
        raise FailureBudgetExceeded(f"no sample of {self!r} could be read", log.failures)

    def _failed(self, st, log, index, exc, where):
        """Sample ``index`` failed with ``exc``: the policy decides (raise, or count it once
        per pass and remember it)."""
        if index in log.bad:
            return
        note, shard, key, offset = self._where(st, where)
        if isinstance(exc, TurboLoaderError) and note not in getattr(exc, "__notes__", ()):
            exc.add_note(note)
        log.record(exc, shard=shard, key=key, offset=offset)
        log.bad[index] = exc
