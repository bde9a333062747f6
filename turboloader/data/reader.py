"""The sample reader the three datasets share: decoder + cache + failure policy + statistics +
per-stream state, and the batch path that turns many gathered samples into batch rows at once.

A *stream* is what reads samples with its own decoder, cache, statistics recorder and failure
budget: the main process (``"main"``), a DataLoader worker process (``"worker{id}"``), or a
decode thread of ``turboloader.DataLoader(backend="threads")``, which names itself with
:func:`reading_as`. Each stream has one :class:`StreamReader`, made on first use in the
process that reads (never pickled).

The batch path, per chunk of samples (typically a batch):

1. the dataset *gathers* each sample into a :class:`~turboloader.data.step.Chunk`: its encoded bytes (a ``pread``
   into a reused buffer, an mmap slice, a file's bytes), or a decoded array from the cache,
   its label (a TAR shard's labels are parsed once per shard), its random-parameter index,
   and where it came from (for error messages); a sample that cannot be read is a row with
   an error instead;
2. :meth:`StreamReader.decode` (the sample step, :func:`turboloader.data.step.run`)
   decodes and transforms every row at once: keys from ``(seed, epoch, index)``, the
   executor's ``read_sizes``, ``plan.draw``, the executor's ``plan_slots`` and ``run_batch``
   (one call, the GIL released) write the rows of the batch tensor; a row the fused plan
   cannot do (a PNG, a crop larger than its image) runs the generic fallback; a row that
   fails is an error for that row, never an abort of the chunk;
3. the dataset walks the rows in order and applies the failure policy to the failed ones
   (:meth:`~turboloader.data.failures.FailureLog.record_sample`: raise with notes naming the
   shard, key and offset; or skip, keeping the per-sample order: later rows move up and the
   stream tops the batch up), and hands out each row as :func:`sample_of` or
   :func:`batch_of` makes it.

The map-style datasets (``ImageFolder``, ``TBLDataset``) share their
``__getitem__``/``__getitems__`` in :mod:`~turboloader.data.map_dataset`: a failed index is
replaced by the next readable one (wrapping around) with the requested index's random
parameters, within the budget.
"""

from __future__ import annotations

import os
import threading
import warnings
from contextlib import contextmanager

import numpy as np
import torch

from turboloader.data._buffers import BufferPool, shared_pool
from turboloader.data import step
from turboloader.data.cache import parse_size
from turboloader.data.epochs import EpochMixin, SharedEpoch
from turboloader.data.failures import FailureLog, FailurePolicy
from turboloader.data.step import fill_row
from turboloader.data.telemetry import Telemetry

__all__ = ["BATCH_CHUNK", "GATHER_BYTES", "MIN_CHUNK", "ReaderMixin",
           "SAMPLE_CHUNK", "StreamReader", "batch_of", "collate_labels", "compact", "fill_row",
           "reading_as", "sample_of", "stream_name"]

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
#: not counted) and any chunk hold ``MIN_CHUNK`` samples at least. 16 MiB holds a batch of 256
#: ImageNet-sized JPEGs (~53 KB each) in one call: the GIL-held Python per image of
#: ``bench_hotpath.py --pipeline val`` fell from 26-31 to 19-22 us against 8 MiB's two calls
#: of ~150 and ~100 (issue 42, same run, loaded 2-core machine), for at most 8 MiB more of
#: gather buffer per stream (a batch of 256 float32 224 x 224 images is 154 MB).
GATHER_BYTES = 16 << 20
MIN_CHUNK = 64

_local = threading.local()
_LOCK = threading.Lock()  # guards every dataset's _states (module level: picklable datasets)


@contextmanager
def reading_as(name: str, *, executor=None):
    """Samples read by this thread inside the block belong to the stream ``name``, whose
    batch calls run on ``executor`` (None: the CPU's; a
    :class:`~turboloader.decode.device_executor.DeviceDecode` for ``decode="gpu"``): the
    stream leased for the block holds it as ``StreamReader.executor``."""
    prev = getattr(_local, "name", None), getattr(_local, "executor", None)
    _local.name, _local.executor = name, executor
    try:
        yield
    finally:
        _local.name, _local.executor = prev


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


def _warn_unfused(transform, owner, stacklevel=3):
    """Warn once (an UnfusedWarning) that ``owner``'s ``transform`` runs unfused, and why."""
    if transform is None:
        return
    try:
        from turboloader.transforms import explain

        reason = explain(transform)
    except TypeError:
        return  # not callable: the dataset reports that when it calls it
    if reason is not None:
        from turboloader.errors import UnfusedWarning

        warnings.warn(f"{owner}: the transform is not fused into the decoder, so every sample "
                      f"is decoded to a PIL image and transformed step by step (correct, but "
                      f"slower): {reason}", UnfusedWarning, stacklevel=stacklevel)


class StreamReader:
    """What one stream keeps while reading: its decoder (and cache), statistics recorder,
    per-epoch failure logs, recycled chunk buffers and gather buffer. Never pickled."""

    def __init__(self, dataset, name, *, flush_failures=False):
        self.pid = os.getpid()
        self.name = name
        self.leased = False  # held by one iteration (see ReaderMixin._lease)
        self.seed = dataset.seed
        self.max_pixels = dataset.max_pixels
        self.decoder = dataset._decoder()  # a SampleDecoder (turboloader.data.step)
        # what runs the batch calls (set by each lease, see reading_as): None, the CPU's
        # executor; a DeviceDecode with DataLoader(decode="gpu")
        self.executor = None
        self.plan = step.batch_plan(self.decoder)
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

    # -- the batch call: the one sample step (turboloader.data.step) -----------------------

    def decode(self, chunk, out, row0=0, *, counters, timing=None, decoder=None):
        """:func:`turboloader.data.step.run` with this stream's reader."""
        return step.run(self, chunk, out, row0, counters=counters, timing=timing,
                        decoder=decoder)


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


_INT = {int}


def collate_labels(labels):
    """Labels of a batch as ``default_collate`` makes them (an int64 tensor for ints)."""
    if labels and set(map(type, labels)) == _INT:
        # written into a tensor torch owns through its NumPy view (a third of
        # torch.tensor's time; the batch call writes its images that way too), never
        # torch.from_numpy: a decode thread making a tensor of NumPy's memory while the
        # interpreter exits made torch call std::terminate
        # (tests/loader/test_quiet_exit.py[threads] failed 3 of 14 runs that way)
        out = torch.empty(len(labels), dtype=torch.int64)
        out.numpy()[:] = labels
        return out
    from torch.utils.data._utils.collate import default_collate

    return default_collate(labels)


def sample_of(ds, image, label):
    """The sample ``ds`` hands out for a decoded row (every walk: map-style, stream): the
    fields tuple of ``fields=``, else ``(image, target_transform(label))``."""
    fields = ds._fields
    if fields is not None:
        return fields.sample(image, label)
    tt = ds.target_transform
    return image, (label if tt is None else tt(label))


def batch_of(ds, images, labels) -> list:
    """The batch ``ds`` hands out for decoded rows (every walk and grouping): ``images``
    (one tensor, or what ``default_collate`` made) with the labels after
    ``target_transform`` collated (:func:`collate_labels`), or the fields' batch."""
    fields = ds._fields
    if fields is not None:
        return fields.batch(images, labels)
    tt = ds.target_transform
    if tt is not None:
        labels = [tt(v) for v in labels]
    return [images, collate_labels(labels)]


# -- the datasets' shared scaffolding --------------------------------------------------------


class ReaderMixin(EpochMixin):
    """What every turboloader dataset has: seed, transforms, cache, failure policy,
    decompression-bomb limit, statistics and epochs, and one :class:`StreamReader` per
    stream that reads it."""

    def _init_reader(self, transform, target_transform, *, seed, cache, cache_short_side,
                     on_error, max_failures, max_pixels, stats_interval):
        if int(seed) < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
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
    def transform(self):
        """The image transform (fused into the decoder when it plans). Assigning one after
        construction (``timm.data.create_loader`` does) warns as the constructor does when
        it cannot fuse (:class:`~turboloader.errors.UnfusedWarning`)."""
        return self.__dict__.get("_transform")

    @transform.setter
    def transform(self, value):
        if "_states" in self.__dict__ and value is not self.__dict__.get("_transform"):
            _warn_unfused(value, f"{type(self).__name__}.transform", stacklevel=3)
            # the idle readers decode with the old transform (and cache its outputs): the
            # next pass makes new ones; their statistics are kept
            with _LOCK:
                idle = [k for k, st in self._states.items() if not st.leased]
                dropped = [self._states.pop(k) for k in idle]
            for st in dropped:
                if st.pid == os.getpid():
                    st.recorder.flush()
        self.__dict__["_transform"] = value

    @property
    def _cache_bytes(self):  # the name before cache_bytes was public
        return self.cache_bytes

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_states"] = {}
        return state

    def _decoder(self):
        """The :class:`~turboloader.data.step.SampleDecoder` of a new stream: images through
        the transform (fused when it plans), with the cache. Video clips supply their own."""
        return step.Decoder(self.transform, cache=self.cache_bytes, short_side=self.cache_short_side,
                       max_pixels=self.max_pixels)

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
                    # the batch calls' executor: the one the stream's context names
                    st.executor = getattr(_local, "executor", None)
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
