"""``turboloader.DataLoader``: torch's DataLoader with good defaults, or a thread backend.

Two backends, one contract (same batches, same order, same sharding for the same seed and
epoch):

``backend="processes"``
    ``torch.utils.data.DataLoader`` itself (``loader.torch_loader``), with defaults that suit
    turboloader's datasets: ``persistent_workers`` when the dataset's decoded-sample cache is
    on (a new worker process starts with an empty cache), the epoch forwarded to the dataset
    and sampler from the main process, ``shuffle`` checked against an iterable dataset's own.

``backend="threads"``
    A staged pipeline of native threads in this process (SPDL's design: stages with their
    own concurrency, bounded queues between them)::

        read ──► decode+transform (num_workers threads) ──► collate (1) ──► transfer (0/1) ──► you

    * **read**: where samples' bytes come from. For a map-style dataset a dispatcher thread
      walks the batch sampler (torch's own, built by torch's DataLoader) and splits each
      batch's indices across the decode threads; for an iterable dataset each decode thread
      reads its own logical worker's stream. The bytes themselves are read inside the
      decode threads (an mmap slice of a shard, a file), and that time is reported as the
      read stage's (from the dataset's ``read_s`` counter).
    * **decode+transform**: ``num_workers`` threads. libjpeg-turbo decoding and the fused
      transform run without the GIL and write each sample straight into its row of a
      preallocated batch tensor (pinned when ``pin_memory`` and an accelerator exists).
    * **collate**: one thread puts the batches back in torch's order and collates labels.
    * **transfer**: pins batches that could not be allocated pinned (custom ``collate_fn``,
      non-tensor samples); absent otherwise. Host-to-device copies and on-device
      normalisation belong to :class:`turboloader.PrefetchLoader`.

    ``loader.stats()`` reports each stage's busy time, the time it starved on its input or
    blocked on its output queue, and throughput; :func:`profile` prints it as a table.

Ordering contract (iterable datasets). torch's DataLoader over an ``IterableDataset`` with
``W`` workers batches each worker's stream separately (each drops its own last partial
batch when ``drop_last``) and returns the workers' batches round-robin, skipping workers
that are exhausted. The thread backend runs the same ``W`` logical worker streams, from the
dataset's own per-worker generator (``TarDataset._stream``), one per thread, and re-orders
their batches the same way, so items, order, transform parameters and the failure policy
(skips, replacements, budgets per worker) are identical by construction. Map-style datasets
use torch's sampler / batch sampler and ``dataset[i]``, as torch does.

Memory: float32 batches of 224 x 224 images are 600 KB per sample; a pipeline ending in
``ToImage()`` / ``PILToTensor()`` (no ``ToDtype``/``Normalize``) gives uint8 batches, 4x
less memory traffic, to be normalised on the device with
``PrefetchLoader(loader, "cuda", mean=..., std=...)``.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
import warnings

import numpy as np
import torch
import torch.utils.data
from torch.utils.data import IterableDataset
from torch.utils.data._utils.collate import default_collate

from turboloader.data._streams import reading_as

__all__ = [
    "DataLoader",
    "STAGES",
    "format_stats",
    "profile",
]

_POLL_S = 0.05  # how often a blocked stage thread looks at the stop flag
_JOIN_S = 30.0
STAGES = ("read", "decode", "collate", "transfer")


def _dataset_plan(dataset):
    """The fused plan of ``dataset.transform`` (turboloader pipelines), or None."""
    tf = getattr(dataset, "transform", None)
    if tf is None:
        return None
    try:
        from turboloader.data.cache import get_plan

        return get_plan(tf)
    except Exception:  # a transform we cannot plan is simply the generic path
        return None


def _cache_on(dataset) -> bool:
    return bool(getattr(dataset, "_cache_bytes", 0))


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _accelerator() -> bool:
    acc = getattr(torch, "accelerator", None)
    if acc is not None:
        return bool(acc.is_available())
    return torch.cuda.is_available()


# -- statistics -------------------------------------------------------------------------


class _StageStats:
    """Counters of one stage, added to by its threads (a lock per add: once per batch)."""

    __slots__ = ("name", "concurrency", "busy_s", "wait_in_s", "wait_out_s", "items", "_lock")

    def __init__(self, name, concurrency):
        self.name, self.concurrency = name, concurrency
        self.busy_s = self.wait_in_s = self.wait_out_s = 0.0
        self.items = 0
        self._lock = threading.Lock()

    def add(self, busy=0.0, wait_in=0.0, wait_out=0.0, items=0):
        with self._lock:
            self.busy_s += busy
            self.wait_in_s += wait_in
            self.wait_out_s += wait_out
            self.items += items


class _RunStats:
    """Everything measured during one pass (one ``iter(loader)``)."""

    def __init__(self, backend, epoch, concurrency, dataset):
        self.backend, self.epoch = backend, epoch
        self.stages = {name: _StageStats(name, c) for name, c in concurrency.items()}
        self.start = time.perf_counter()
        self.end = None
        self.batches = self.samples = 0
        self.consumer_wait_s = 0.0
        self.dataset = dataset
        self.read_s0 = self._dataset_read_s()

    def _dataset_read_s(self):
        stats = getattr(self.dataset, "stats", None)
        if stats is None:
            return None
        try:
            return float(stats(self.epoch)["read_s"])
        except Exception:  # a dataset whose stats() differs: no read figure
            return None

    def report(self) -> dict:
        elapsed = (self.end or time.perf_counter()) - self.start
        out = {"backend": self.backend, "epoch": self.epoch, "batches": self.batches,
               "samples": self.samples, "elapsed_s": elapsed,
               "samples_per_s": self.samples / elapsed if elapsed > 0 else 0.0,
               "batches_per_s": self.batches / elapsed if elapsed > 0 else 0.0,
               "consumer_wait_s": self.consumer_wait_s, "stages": {}}
        read_s = self._dataset_read_s()
        read_s = None if read_s is None or self.read_s0 is None else read_s - self.read_s0
        for name, s in self.stages.items():
            busy = s.busy_s
            if name == "read" and read_s is not None:
                busy += read_s
            if name == "decode" and read_s is not None and self.backend == "threads":
                busy = max(0.0, busy - read_s)  # decode threads' time, less their reads
            items = s.items if name != "read" or s.items else self.samples
            out["stages"][name] = {
                "concurrency": s.concurrency, "busy_s": busy, "wait_in_s": s.wait_in_s,
                "wait_out_s": s.wait_out_s, "items": items,
                "items_per_s": items / elapsed if elapsed > 0 else 0.0,
                # share of the stage's thread-time spent working
                "utilisation": (busy / (elapsed * s.concurrency)
                                if elapsed > 0 and isinstance(s.concurrency, int) and s.concurrency
                                else None)}
        return out


def _bottleneck(report) -> str:
    stages = {k: v for k, v in report["stages"].items() if v["utilisation"] is not None}
    if not stages:
        return "unknown"
    if report["elapsed_s"] > 0 and report["consumer_wait_s"] < 0.05 * report["elapsed_s"]:
        return "the training loop (the loader was ahead)"
    name = max(stages, key=lambda k: stages[k]["utilisation"])
    return f"{name} (busiest per thread: {stages[name]['utilisation']:.0%})"


def format_stats(report) -> str:
    """``loader.stats()`` as the text table :func:`profile` prints."""
    lines = [f"turboloader.DataLoader ({report['backend']}), epoch {report['epoch']}: "
             f"{report['batches']} batches, {report['samples']} samples in "
             f"{report['elapsed_s']:.2f} s = {report['samples_per_s']:.1f} samples/s; "
             f"the loop waited {report['consumer_wait_s']:.2f} s for batches",
             f"{'stage':<10}{'threads':>8}{'busy s':>9}{'util':>7}{'starved s':>11}"
             f"{'blocked s':>11}{'items':>8}{'items/s':>10}"]
    for name, s in report["stages"].items():
        util = "-" if s["utilisation"] is None else f"{s['utilisation']:.0%}"
        lines.append(f"{name:<10}{s['concurrency']!s:>8}{s['busy_s']:>9.2f}{util:>7}"
                     f"{s['wait_in_s']:>11.2f}{s['wait_out_s']:>11.2f}{s['items']:>8}"
                     f"{s['items_per_s']:>10.1f}")
    lines.append(f"bottleneck: {_bottleneck(report)}")
    return "\n".join(lines)


# -- plumbing ---------------------------------------------------------------------------


class _Stopped(Exception):
    """The pipeline is shutting down: leave the stage loop quietly."""


class _Failure:
    """An exception travelling down the pipeline in place of a batch."""

    __slots__ = ("exc",)

    def __init__(self, exc):
        self.exc = exc


_DONE = object()


def _put(q, item, stop):
    """Put ``item``, waiting for room; the seconds waited. Raises _Stopped on shutdown."""
    try:
        q.put_nowait(item)
        return 0.0
    except queue.Full:
        pass
    t = time.perf_counter()
    while True:
        if stop.is_set():
            raise _Stopped
        try:
            q.put(item, timeout=_POLL_S)
            return time.perf_counter() - t
        except queue.Full:
            continue


def _get(q, stop):
    """(item, seconds waited). Raises _Stopped on shutdown."""
    try:
        return q.get_nowait(), 0.0
    except queue.Empty:
        pass
    t = time.perf_counter()
    while True:
        if stop.is_set():
            raise _Stopped
        try:
            return q.get(timeout=_POLL_S), time.perf_counter() - t
        except queue.Empty:
            continue


class _BatchBuffer:
    """One batch being filled: a preallocated images tensor (when the sample shape is known,
    or from the first sample on) and the labels."""

    __slots__ = ("images", "labels", "samples", "n", "alloc")

    def __init__(self, n, alloc):
        self.n = n
        self.alloc = alloc  # (shape, dtype) -> tensor, or None when samples are kept as is
        self.images = alloc.first() if alloc is not None else None
        self.labels = [None] * n
        self.samples = None if alloc is not None else [None] * n

    def slot(self, j):
        return None if self.images is None else self.images[j]

    def put(self, j, sample):
        """Store sample ``j``; an image already decoded into its slot is not copied."""
        if self.samples is not None:
            self.samples[j] = sample
            return
        img, label = sample
        if self.images is None:
            self.images = self.alloc.like(img)
        dst = self.images[j]
        if not (img.data_ptr() == dst.data_ptr() and img.dtype == dst.dtype
                and img.shape == dst.shape):  # not decoded into its slot: copy it there
            if tuple(img.shape) != tuple(dst.shape):
                raise RuntimeError(
                    f"stack expects each tensor to be equal size, but got {tuple(dst.shape)} "
                    f"and {tuple(img.shape)} in one batch (turboloader.DataLoader)")
            dst.copy_(img)
        self.labels[j] = label

    def collate(self, n=None, collate_fn=None):
        n = self.n if n is None else n
        if self.samples is not None:
            return (collate_fn or default_collate)(self.samples[:n])
        images = self.images if n == self.images.shape[0] else self.images[:n]
        return [images, default_collate(self.labels[:n])]


class _Allocator:
    """Allocates batch tensors of ``batch_size`` rows, pinned when asked and possible."""

    def __init__(self, batch_size, shape, dtype, pin):
        self.batch_size, self.shape, self.dtype, self.pin = batch_size, shape, dtype, pin

    def first(self):
        if self.shape is None:
            return None
        return torch.empty((self.batch_size, *self.shape), dtype=self.dtype, pin_memory=self.pin)

    def like(self, img):
        if not isinstance(img, torch.Tensor):
            raise TypeError(f"expected a tensor image, got {type(img).__name__}")
        return torch.empty((self.batch_size, *img.shape), dtype=img.dtype, pin_memory=self.pin)


def _tensor_pairs(sample) -> bool:
    return (isinstance(sample, tuple) and len(sample) == 2 and isinstance(sample[0], torch.Tensor))


class _Pipeline:
    """The threads of one pass of the thread backend and the queues between them.

    Threads reference this object, never the generator the user iterates, so dropping or
    closing that generator (a ``break``) runs :meth:`shutdown`.
    """

    def __init__(self, loader, epoch):
        self.loader = loader
        self.dataset = loader.dataset
        self.stop = threading.Event()
        self.threads = []
        W = max(1, loader.num_workers)
        self.W = W
        self.first_stream, loader._first_stream = loader._first_stream, 0
        transfer = 1 if loader._pin and loader.collate_fn is not None else 0
        self.stats = _RunStats("threads", epoch, {"read": "in decode", "decode": W,
                                                  "collate": 1, "transfer": transfer},
                               self.dataset)
        depth = max(1, loader.prefetch_factor)
        self.out = queue.Queue(maxsize=depth)
        self.transfer_q = queue.Queue(maxsize=depth) if transfer else None
        plan = _dataset_plan(self.dataset)
        shape = tuple(plan.output_shape) if plan is not None and plan.output_shape else None
        dtype = plan.output_dtype if plan is not None else None
        self.shape_dtype = (shape, dtype)
        collate_out = self.transfer_q if transfer else self.out
        if loader._iterable:
            self.worker_qs = [queue.Queue(maxsize=depth) for _ in range(W)]
            for w in range(W):
                self._spawn(self._iterable_worker, w, name=f"turboloader-decode-{w}")
            self._spawn(self._round_robin, collate_out, name="turboloader-collate")
        else:
            self.tasks = queue.Queue()
            self.done = queue.Queue()
            self.in_flight = threading.Semaphore(W * depth)
            self._spawn(self._dispatch, name="turboloader-read")
            for w in range(W):
                self._spawn(self._map_worker, w, name=f"turboloader-decode-{w}")
            self._spawn(self._in_order, collate_out, name="turboloader-collate")
        if transfer:
            self._spawn(self._transfer, name="turboloader-transfer")

    def _spawn(self, fn, *args, name):
        t = threading.Thread(target=self._guard, args=(fn, *args), name=name, daemon=True)
        self.threads.append(t)
        t.start()

    def _guard(self, fn, *args):
        try:
            fn(*args)
        except _Stopped:
            pass
        except BaseException as exc:  # a bug in a stage: end the pass with it, never hang
            try:
                self.out.put(_Failure(exc), timeout=1.0)
            except queue.Full:
                pass
            self.stop.set()

    def _allocator(self, shape_dtype=None):
        shape, dtype = shape_dtype or self.shape_dtype
        if self.loader.collate_fn is not None:
            return None
        return _Allocator(self.loader.batch_size, shape, dtype, self.loader._pin)

    # -- iterable datasets: one logical worker stream per decode thread --------------------

    def _open_stream(self, w, cur):
        ds, loader = self.dataset, self.loader
        if hasattr(ds, "_stream"):
            num = loader.num_workers
            name = f"thread{w}" if num > 0 else "thread-main"
            return ds._stream(w, max(1, num), name, out_slots=cur.slot)
        return iter(ds)  # one stream only (checked in DataLoader): torch's num_workers=0

    def _init_worker(self, w):
        """``worker_init_fn(w)`` in decode thread ``w``, once per thread (threads are made
        per pass, as torch's non-persistent worker processes are)."""
        fn = self.loader.worker_init_fn
        if fn is not None:
            fn(w)

    def _iterable_worker(self, w):
        self._init_worker(w)
        stats, stop, q, B = self.stats.stages["decode"], self.stop, self.worker_qs[w], None
        loader = self.loader
        B = loader.batch_size
        alloc = self._allocator()
        stream = None

        class Cursor:
            buf = None
            j = 0

            def slot(self):
                return self.buf.slot(self.j) if self.buf is not None else None

        cur = Cursor()
        try:
            cur.buf = _BatchBuffer(B, alloc)
            stream = self._open_stream(w, cur)
            t = time.perf_counter()
            for sample in stream:
                if cur.buf.samples is None and not _tensor_pairs(sample):
                    if cur.j == 0:
                        cur.buf = _BatchBuffer(B, None)  # not (tensor, label): keep samples
                        alloc = None
                    else:
                        raise TypeError("a dataset's samples must all be (tensor, label) pairs "
                                        f"or none, got {type(sample).__name__}")
                cur.buf.put(cur.j, sample)
                cur.j += 1
                if stop.is_set():
                    raise _Stopped
                if cur.j == B:
                    batch = cur.buf.collate(collate_fn=loader.collate_fn)
                    cur.buf, cur.j = _BatchBuffer(B, alloc), 0
                    busy = time.perf_counter() - t
                    waited = _put(q, batch, stop)
                    stats.add(busy=busy, wait_out=waited, items=B)
                    t = time.perf_counter()
            busy = time.perf_counter() - t
            if cur.j and not loader.drop_last:
                n = cur.j
                batch = cur.buf.collate(n, collate_fn=loader.collate_fn)
                stats.add(busy=busy, wait_out=_put(q, batch, stop), items=n)
            else:
                stats.add(busy=busy)
            _put(q, _DONE, stop)
        except _Stopped:
            raise
        except BaseException as exc:
            exc.add_note(f"turboloader.DataLoader: in decode thread {w} (logical worker {w} "
                         f"of {self.W}), epoch {self.stats.epoch}")
            _put(q, _Failure(exc), stop)
        finally:
            if stream is not None and hasattr(stream, "close"):
                stream.close()  # in this thread: flushes the stream's statistics

    def _round_robin(self, out):
        """torch's order: workers' batches round-robin, exhausted workers skipped."""
        stats, stop = self.stats.stages["collate"], self.stop
        # after a resume, the stream whose batch was next comes first (torch's workers rotate
        # their logical streams the same way in TarDataset.__iter__)
        first = self.first_stream % self.W
        active = [(first + i) % self.W for i in range(self.W)]
        while active:
            for w in list(active):
                item, waited = _get(self.worker_qs[w], stop)
                t = time.perf_counter()
                if item is _DONE:
                    active.remove(w)
                    stats.add(wait_in=waited)
                    continue
                busy = time.perf_counter() - t
                stats.add(busy=busy, wait_in=waited, wait_out=_put(out, item, stop),
                          items=0 if isinstance(item, _Failure) else 1)
                if isinstance(item, _Failure):
                    return
        _put(out, _DONE, stop)

    # -- map-style datasets: torch's batch sampler, each batch split across threads --------

    def _dispatch(self):
        stats, stop, W = self.stats.stages["read"], self.stop, self.W
        alloc = self._allocator()
        seq = 0
        t = time.perf_counter()
        try:
            for indices in self.loader._batches():
                indices = list(indices)
                waited = 0.0
                t0 = time.perf_counter()
                while not self.in_flight.acquire(timeout=_POLL_S):
                    if stop.is_set():
                        raise _Stopped
                waited += time.perf_counter() - t0
                rec = _MapBatch(seq, indices, alloc)
                k = min(W, len(indices))
                bounds = np.linspace(0, len(indices), k + 1).round().astype(int)
                rec.remaining = k
                for a, b in zip(bounds[:-1], bounds[1:]):
                    self.tasks.put((rec, int(a), int(b)))
                seq += 1
                stats.add(busy=time.perf_counter() - t - waited, wait_out=waited, items=0)
                t = time.perf_counter()
        except _Stopped:
            raise
        except BaseException as exc:
            rec = _MapBatch(seq, [], None)
            rec.error, rec.remaining = exc, 0
            self.done.put(rec)
            seq += 1
        self.done.put(_End(seq))
        for _ in range(W):
            self.tasks.put(None)

    def _map_worker(self, w):
        # this thread reads as its own stream: its own decoder, statistics and failure budget
        # in datasets that keep them per stream (ImageFolder, TBLDataset), as a worker process
        name = f"rank{_rank()}-thread{w}" if self.loader.num_workers > 0 else \
            f"rank{_rank()}-thread-main"
        self._init_worker(w)
        with reading_as(name):
            self._map_work(w)

    def _map_work(self, w):
        stats, stop, ds = self.stats.stages["decode"], self.stop, self.dataset
        while True:
            task, waited = _get(self.tasks, stop)
            if task is None:
                return
            rec, a, b = task
            t = time.perf_counter()
            try:
                if rec.error is None:
                    for j in range(a, b):
                        if stop.is_set():
                            raise _Stopped
                        rec.put(j, ds[rec.indices[j]])
            except _Stopped:
                raise
            except BaseException as exc:
                exc.add_note(f"turboloader.DataLoader: decode thread {w}, batch {rec.seq}")
                rec.error = rec.error or exc
            stats.add(busy=time.perf_counter() - t, wait_in=waited, items=b - a)
            if rec.chunk_done():
                self.done.put(rec)

    def _in_order(self, out):
        stats, stop, loader = self.stats.stages["collate"], self.stop, self.loader
        pending, want, end = {}, 0, None
        while end is None or want < end:
            item, waited = _get(self.done, stop)
            stats.add(wait_in=waited)
            if isinstance(item, _End):
                end = item.seq
                continue
            pending[item.seq] = item
            while want in pending:
                rec = pending.pop(want)
                want += 1
                t = time.perf_counter()
                if rec.error is not None:
                    _put(out, _Failure(rec.error), stop)
                    return
                batch = rec.buf.collate(len(rec.indices), collate_fn=loader.collate_fn)
                rec.buf = None
                self.in_flight.release()
                busy = time.perf_counter() - t
                stats.add(busy=busy, wait_out=_put(out, batch, stop), items=1)
        _put(out, _DONE, stop)

    # -- transfer ------------------------------------------------------------------------

    def _transfer(self):
        from torch.utils.data._utils.pin_memory import pin_memory

        stats, stop = self.stats.stages["transfer"], self.stop
        while True:
            item, waited = _get(self.transfer_q, stop)
            t = time.perf_counter()
            if not (item is _DONE or isinstance(item, _Failure)):
                item = pin_memory(item)
            busy = time.perf_counter() - t
            stats.add(busy=busy, wait_in=waited, wait_out=_put(self.out, item, stop),
                      items=0 if item is _DONE or isinstance(item, _Failure) else 1)
            if item is _DONE or isinstance(item, _Failure):
                return

    # -- the consumer side ---------------------------------------------------------------

    def next(self, timeout):
        t = time.perf_counter()
        try:
            item = self.out.get(timeout=timeout if timeout > 0 else None)
        except queue.Empty:
            raise RuntimeError(f"turboloader.DataLoader timed out after {timeout} s waiting "
                               "for a batch") from None
        self.stats.consumer_wait_s += time.perf_counter() - t
        return item

    def shutdown(self):
        self.stop.set()
        me = threading.current_thread()
        deadline = time.monotonic() + _JOIN_S
        for t in self.threads:
            if t is not me:
                t.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self.threads if t.is_alive()]
        if alive:
            warnings.warn(f"turboloader.DataLoader: threads still running after {_JOIN_S:.0f} s: "
                          f"{alive}", RuntimeWarning, stacklevel=2)
        if self.stats.end is None:
            self.stats.end = time.perf_counter()


class _End:
    __slots__ = ("seq",)

    def __init__(self, seq):
        self.seq = seq


class _MapBatch:
    """A map-style batch in flight: its indices, buffer and the chunks still decoding."""

    __slots__ = ("seq", "indices", "buf", "remaining", "error", "lock")

    def __init__(self, seq, indices, alloc):
        self.seq, self.indices = seq, indices
        self.buf = _BatchBuffer(len(indices), alloc) if indices else None
        self.remaining = 0
        self.error = None
        self.lock = threading.Lock()

    def put(self, j, sample):
        buf = self.buf
        if buf.samples is None and not _tensor_pairs(sample):
            with self.lock:
                if buf.samples is None:
                    if buf.images is not None and buf.alloc.shape is not None:
                        raise TypeError("a dataset's samples must all be (tensor, label) "
                                        f"pairs or none, got {type(sample).__name__}")
                    buf.samples, buf.images, buf.alloc = [None] * buf.n, None, None
        if buf.samples is None and buf.images is None:
            with self.lock:  # the first sample of a batch of unknown shape allocates it
                if buf.images is None:
                    buf.images = buf.alloc.like(sample[0])
        buf.put(j, sample)

    def chunk_done(self) -> bool:
        with self.lock:
            self.remaining -= 1
            return self.remaining == 0


# -- progress ---------------------------------------------------------------------------


class _StderrBar:
    """A minimal progress bar for when tqdm is not installed."""

    def __init__(self, iterable, total, desc="turboloader"):
        self.iterable, self.total, self.desc = iterable, total, desc

    def __iter__(self):
        start = last = time.perf_counter()
        n = 0
        try:
            for item in self.iterable:
                n += 1
                now = time.perf_counter()
                if now - last > 0.5 or n == self.total:
                    last = now
                    self._draw(n, now - start)
                yield item
        finally:
            sys.stderr.write("\n")
            sys.stderr.flush()

    def _draw(self, n, elapsed):
        rate = n / elapsed if elapsed > 0 else 0.0
        if self.total:
            frac = min(1.0, n / self.total)
            bar = "#" * int(30 * frac)
            line = f"\r{self.desc}: [{bar:<30}] {n}/{self.total} batches, {rate:.1f} it/s"
        else:
            line = f"\r{self.desc}: {n} batches, {rate:.1f} it/s"
        sys.stderr.write(line)
        sys.stderr.flush()


def _progress(iterable, total):
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _StderrBar(iterable, total)
    return tqdm(iterable, total=total, unit="batch", desc="turboloader")


# -- the loader -------------------------------------------------------------------------


class _ResumableSampler(torch.utils.data.Sampler):
    """A map-style sampler that can leave out the first ``n`` indices of its next pass (what
    a loaded state already delivered); everything else is the wrapped sampler's."""

    def __init__(self, sampler):
        self.sampler = sampler
        self._skip = 0

    def skip_next(self, n: int) -> None:
        self._skip = int(n)

    def set_epoch(self, epoch):
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __iter__(self):
        skip, self._skip = self._skip, 0
        it = iter(self.sampler)
        for _ in range(skip):
            if next(it, None) is None:
                return
        yield from it

    def __len__(self):
        return len(self.sampler)

    def __getattr__(self, name):
        if name == "sampler":
            raise AttributeError(name)
        return getattr(self.sampler, name)


class DataLoader:
    """Batches from a turboloader (or any torch) dataset, with worker processes or threads.

    Args:
        dataset: a ``torch.utils.data.Dataset``: a map-style one (``ImageFolder``,
            ``TBLDataset``, ...) or an ``IterableDataset`` (``TarDataset``). (The top-level
            ``turboloader.DataLoader``, a subclass, also takes seed 001's path-first form:
            see :class:`turboloader.compat.DataLoader`.)
        batch_size: samples per batch (default 1).
        shuffle: map-style: shuffle with a ``RandomSampler`` seeded from ``(seed, epoch)``,
            or drawn from ``generator`` when one is given (default False). Iterable: shuffling is the dataset's own (``TarDataset(shuffle=)``);
            None accepts it, True/False must agree with ``dataset.shuffle`` (ValueError
            otherwise, or for an iterable dataset without one, as torch does).
        num_workers: worker processes, or decode threads (0: the process backend reads in
            the main process; the thread backend runs one stream in one thread).
        backend: ``"threads"`` (default) or ``"processes"``.
        pin_memory: allocate batches in pinned memory (when an accelerator exists;
            otherwise a warning, as torch gives, and ordinary memory).
        drop_last: drop the last partial batch (of each worker's stream, for iterables).
        sampler, batch_sampler, collate_fn, timeout, worker_init_fn,
            multiprocessing_context, generator, pin_memory_device, in_order: as torch's
            DataLoader, in torch's positional order (``DataLoader(ds, 8, True)`` is batch
            size 8, shuffled). On the thread backend ``worker_init_fn(worker_id)`` runs once
            in each decode thread per pass (threads are made per pass), ``generator`` drives
            the map-style shuffle, and ``timeout``, ``multiprocessing_context``,
            ``pin_memory_device`` and ``in_order=False`` raise ``ValueError`` (they need
            worker processes) rather than being dropped.
        prefetch_factor: batches buffered per worker (default 2, torch's).
        persistent_workers: keep worker processes across epochs (default: True when the
            dataset's cache is on and ``num_workers > 0``).
        seed: seed of the map-style shuffle (default ``dataset.seed``, else 0).
        auto_epoch: each new pass uses the next epoch (see :meth:`set_epoch`). Default True.
        progress: show a progress bar (tqdm when installed, else a plain one on stderr).

    Epochs: the epoch of a pass is, in order of precedence, the one given to
    :meth:`set_epoch` since the last pass; the dataset's own if it was changed with
    ``dataset.set_epoch`` since; else (``auto_epoch``) the previous pass's plus one. It is
    set on the dataset and the sampler (``set_epoch``) from the main process before the
    pass starts.

    Raises:
        ValueError: bad arguments; ``shuffle`` against an iterable dataset's own; the thread
            backend with ``num_workers > 1`` on an iterable dataset that has no per-worker
            stream (``_stream``), which torch shards through ``get_worker_info()``, a
            per-process global threads cannot fake.

    Example:
        >>> import turboloader as tl                                      # doctest: +SKIP
        >>> from turboloader import transforms as T
        >>> ds = tl.TarDataset("train-{0000..0099}.tar", T.Compose([
        ...     T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()]))
        >>> loader = tl.DataLoader(ds, batch_size=256, num_workers=8, pin_memory=True)
        >>> gpu = tl.PrefetchLoader(loader, "cuda", mean=(0.485, 0.456, 0.406),
        ...                         std=(0.229, 0.224, 0.225))
        >>> for epoch in range(90):
        ...     for images, labels in gpu: ...     # float32 on the GPU, normalised there
        >>> tl.profile(loader, num_batches=20)   # the stage table: where is the bottleneck?
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None, persistent_workers=None, pin_memory_device="",
                 in_order=True, backend="threads", seed=None, auto_epoch=True, progress=False):
        if not isinstance(dataset, torch.utils.data.Dataset):
            raise TypeError("dataset must be a torch.utils.data.Dataset or a path, got "
                            f"{type(dataset).__name__}")
        if backend not in ("threads", "processes"):
            raise ValueError(f'backend must be "threads" or "processes", got {backend!r}')
        if int(num_workers) < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        self.dataset = dataset
        self.backend = backend
        self.num_workers = int(num_workers)
        self.drop_last = bool(drop_last)
        self.collate_fn = collate_fn
        self.timeout = float(timeout)
        self.progress = bool(progress)
        self.auto_epoch = bool(auto_epoch)
        self.prefetch_factor = 2 if prefetch_factor is None else int(prefetch_factor)
        self.worker_init_fn = worker_init_fn
        self.generator = generator
        if worker_init_fn is not None and not callable(worker_init_fn):
            raise TypeError("worker_init_fn must be callable")
        if backend == "threads":
            # what the thread backend cannot honour is an error, never silently dropped
            if multiprocessing_context is not None:
                raise ValueError("multiprocessing_context is for backend='processes': the thread "
                                 "backend starts no processes")
            if timeout:
                raise ValueError("timeout is for backend='processes' (torch's per-batch worker "
                                 "timeout); the thread backend has no worker processes to wait on")
            if pin_memory_device:
                raise ValueError("pin_memory_device is for backend='processes'; the thread "
                                 "backend pins for the current accelerator (pin_memory=True)")
            # persistent_workers is honoured by construction: the thread backend keeps its
            # reading states (and caches) across epochs
        self._iterable = isinstance(dataset, IterableDataset)
        self.seed = int(seed if seed is not None else getattr(dataset, "seed", 0) or 0)
        self._pin_requested = bool(pin_memory)

        self._sampler_gen = None
        if self._iterable:
            own = getattr(dataset, "shuffle", None)
            if shuffle is not None and own is None and shuffle:
                raise ValueError("shuffle=True needs a map-style dataset: an IterableDataset "
                                 "shuffles itself (torch's DataLoader rejects it too)")
            if shuffle is not None and own is not None and bool(shuffle) != bool(own):
                raise ValueError(f"shuffle={shuffle} but {type(dataset).__name__} was made with "
                                 f"shuffle={own}: an iterable dataset shuffles itself; pass "
                                 "shuffle to the dataset (or leave it None here)")
            if backend == "threads" and self.num_workers > 1 and not hasattr(dataset, "_stream"):
                raise ValueError(
                    f"backend='threads' with num_workers={self.num_workers} needs an iterable "
                    "dataset with per-worker streams (TarDataset); this one shards through "
                    "get_worker_info(): use backend='processes' or num_workers <= 1")
            shuffle = None
        elif shuffle and sampler is None and batch_sampler is None:
            sampler = self._distributed_sampler(dataset, True)
            if sampler is None and generator is not None:
                # torch's contract: the generator drives the shuffle (and advances with it)
                sampler = torch.utils.data.RandomSampler(dataset, generator=generator)
            elif sampler is None:
                self._sampler_gen = torch.Generator()
                sampler = torch.utils.data.RandomSampler(dataset, generator=self._sampler_gen)
            shuffle = None
        elif sampler is None and batch_sampler is None:
            sampler = self._distributed_sampler(dataset, False)
            if sampler is None:
                sampler = torch.utils.data.SequentialSampler(dataset)
            shuffle = None
        if not self._iterable and batch_sampler is None and sampler is not None:
            sampler = _ResumableSampler(sampler)  # can skip what a loaded state delivered

        if persistent_workers is None:
            persistent_workers = self.num_workers > 0 and _cache_on(dataset)
        procs = backend == "processes"
        # torch's DataLoader validates the arguments and builds the samplers for both backends
        self.torch_loader = torch.utils.data.DataLoader(
            dataset, batch_size=batch_size, shuffle=shuffle, sampler=sampler,
            batch_sampler=batch_sampler, num_workers=self.num_workers if procs else 0,
            collate_fn=collate_fn, pin_memory=bool(pin_memory) if procs else False,
            drop_last=drop_last, timeout=timeout if procs else 0,
            worker_init_fn=worker_init_fn if procs else None,
            multiprocessing_context=multiprocessing_context if procs else None,
            generator=generator, prefetch_factor=prefetch_factor if procs else None,
            persistent_workers=bool(persistent_workers) if procs else False,
            pin_memory_device=pin_memory_device if procs else "", in_order=in_order)
        self.batch_size = self.torch_loader.batch_size
        self.sampler = self.torch_loader.sampler
        self.batch_sampler = self.torch_loader.batch_sampler
        if not procs:
            if self.batch_size is None:
                raise ValueError("backend='threads' needs batching (batch_size or batch_sampler)")
            if self._iterable and batch_sampler is not None:
                raise ValueError("batch_sampler is for map-style datasets")
            if not in_order:
                raise ValueError("backend='threads' always returns batches in order")
        self._pin = False
        if pin_memory and not procs:
            if _accelerator():
                self._pin = True
            else:
                warnings.warn("'pin_memory' argument is set as true but no accelerator is "
                              "found, then device pinned memory won't be used.", stacklevel=2)
        self._next_epoch = None  # from set_epoch()
        self._last_epoch = None  # the epoch of the previous pass
        self._yielded, self._finished = 0, False  # batches handed out in the pass; its end
        self._resumed_batches = 0  # batches a loaded state already delivered
        self._first_stream = 0  # thread backend: the stream a resumed pass starts from
        self._pass_generator_state = None
        self._run = None

    @staticmethod
    def _distributed_sampler(dataset, shuffle):
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return torch.utils.data.DistributedSampler(
                dataset, shuffle=shuffle, seed=int(getattr(dataset, "seed", 0) or 0))
        return None

    # -- epochs ------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next pass (then, with ``auto_epoch``, count on from it)."""
        epoch = int(epoch)
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self._next_epoch = epoch

    @property
    def epoch(self):
        """The epoch of the current (or last) pass; None before the first."""
        return self._last_epoch

    def _begin_epoch(self) -> int:
        ds = self.dataset
        ds_epoch = getattr(ds, "epoch", None)
        if self._next_epoch is not None:
            epoch, self._next_epoch = self._next_epoch, None
        elif ds_epoch is not None and (self._last_epoch is None or ds_epoch != self._last_epoch):
            epoch = int(ds_epoch)  # first pass, or the user set the dataset's epoch directly
        elif self._last_epoch is not None and self.auto_epoch:
            epoch = self._last_epoch + 1
        else:
            epoch = self._last_epoch or 0
        if hasattr(ds, "set_epoch"):
            ds.set_epoch(epoch)
        sampler = self.sampler
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        if self._sampler_gen is not None:
            words = np.random.SeedSequence([self.seed, epoch, 0x5A4D]).generate_state(2, np.uint64)
            self._sampler_gen.manual_seed(int(words[0] >> np.uint64(1)))
        self._last_epoch = epoch
        self._pass_generator_state = None
        if self.generator is not None and not self._iterable:
            self._pass_generator_state = self.generator.get_state()
            if self.backend == "threads":
                # torch's iterator draws its workers' base seed from the generator before the
                # sampler does: draw it too, so the shuffle is torch's for the same generator
                torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        self._yielded, self._finished = self._resumed_batches, False
        self._resumed_batches = 0
        return epoch

    # -- checkpoints -------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Where this loader stands, for :meth:`load_state_dict` (torchdata's
        ``StatefulDataLoader`` shape: call it between batches, save it with the model).

        Returns a JSON-able dict: ``format``, ``epoch`` (of the current or last pass),
        ``batches`` handed out in that pass, ``finished`` (the pass ended), ``dataset`` (an
        iterable dataset's own ``state_dict(batches=...)``, e.g. ``TarDataset``'s) and, when a
        ``generator`` drives the shuffle, its state at the start of the pass.

        Raises:
            ValueError: the position cannot be named (e.g. a custom ``batch_sampler``, or an
                iterable dataset without ``state_dict``).
        """
        state = {"format": "turboloader.DataLoader/1", "epoch": self._last_epoch,
                 "batches": int(self._yielded), "finished": bool(self._finished)}
        if self._last_epoch is None or self._finished:
            return state
        if self._iterable:
            if not hasattr(self.dataset, "state_dict"):
                raise ValueError(f"{type(self.dataset).__name__} has no state_dict: a mid-pass "
                                 "position of an iterable dataset must come from the dataset")
            state["dataset"] = self.dataset.state_dict(
                batches=self._yielded, batch_size=self.batch_size,
                num_workers=max(1, self.num_workers) if self.backend == "threads"
                else self.num_workers, drop_last=self.drop_last)
        elif not isinstance(self.sampler, _ResumableSampler):
            raise ValueError("a custom batch_sampler has no position to save: pass a sampler "
                             "and batch_size instead")
        if self._pass_generator_state is not None:
            state["generator"] = self._pass_generator_state.tolist()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict`: the next pass is the saved epoch without the
        batches already handed out (nothing of them is read or decoded again), or, if that
        pass had finished, the epoch after it.

        Raises:
            ValueError: not a loader state, or negative / impossible positions.
        """
        if not isinstance(state, dict) or state.get("format") != "turboloader.DataLoader/1":
            raise ValueError("not a turboloader.DataLoader state "
                             "(expected format 'turboloader.DataLoader/1')")
        epoch, batches = state.get("epoch"), int(state.get("batches", 0))
        if epoch is None:
            return  # taken before the first pass
        epoch = int(epoch)
        if epoch < 0 or batches < 0:
            raise ValueError(f"negative position in the loader state: epoch {epoch}, "
                             f"batches {batches}")
        if state.get("finished"):
            self.set_epoch(epoch + 1)
            return
        try:
            total = len(self)
        except TypeError:
            total = None
        if total is not None and batches > total:
            raise ValueError(f"the state says {batches} batches were handed out but a pass of "
                             f"this loader has {total}")
        self.set_epoch(epoch)
        if self._iterable:
            self.dataset.load_state_dict(state["dataset"])
            self._first_stream = int(state["dataset"].get("next_worker", 0))
        else:
            self.sampler.skip_next(batches * self.batch_size)
            if "generator" in state and self.generator is not None:
                self.generator.set_state(torch.tensor(state["generator"], dtype=torch.uint8))
        self._resumed_batches = batches

    def _batches(self):
        return iter(self.batch_sampler)

    # -- iteration ---------------------------------------------------------------------

    def __len__(self) -> int:
        """Batches per pass. For an iterable dataset that knows its per-worker shares
        (``TarDataset``) the exact count: each of the ``max(1, num_workers)`` streams batches
        its own share, so the sum over workers of ``ceil(share / batch_size)`` (floor with
        ``drop_last``), whichever backend. Otherwise torch's count (for other iterable
        datasets with several workers and ``drop_last=False`` it can be up to
        ``workers - 1`` short)."""
        shares = getattr(self.dataset, "_worker_sizes", None)
        if self._iterable and shares is not None and self.batch_size is not None:
            B = self.batch_size
            sizes = shares(max(1, self.num_workers))
            return sum(n // B if self.drop_last else -(-n // B) for n in sizes)
        return len(self.torch_loader)

    def __iter__(self):
        epoch = self._begin_epoch()
        if self.backend == "processes":
            it = self._iter_processes(epoch)
        else:
            it = self._iter_threads(epoch)
        it = self._counted(it)
        if self.progress:
            try:
                total = len(self)
            except TypeError:
                total = None
            return iter(_progress(it, total))
        return it

    def _counted(self, it):
        try:
            for batch in it:
                self._yielded += 1
                yield batch
            self._finished = True
        finally:
            it.close()  # a consumer that stops early shuts the pass down now

    def _iter_processes(self, epoch):
        run = self._run = _RunStats("processes", epoch, {
            "read": "in workers", "decode": self.num_workers or "main", "collate": "in workers",
            "transfer": 1 if self.torch_loader.pin_memory else 0}, self.dataset)
        it = iter(self.torch_loader)
        try:
            while True:
                t = time.perf_counter()
                try:
                    batch = next(it)
                except StopIteration:
                    return
                run.consumer_wait_s += time.perf_counter() - t
                run.batches += 1
                run.samples += _batch_len(batch)
                yield batch
        finally:
            run.end = time.perf_counter()
            del it

    def _iter_threads(self, epoch):
        pipe = _Pipeline(self, epoch)
        self._run = pipe.stats
        try:
            while True:
                item = pipe.next(self.timeout)
                if item is _DONE:
                    return
                if isinstance(item, _Failure):
                    pipe.shutdown()
                    raise item.exc
                pipe.stats.batches += 1
                pipe.stats.samples += _batch_len(item)
                yield item
        finally:
            pipe.shutdown()

    # -- statistics ----------------------------------------------------------------------

    def stats(self) -> dict:
        """What the current (or last) pass measured.

        Returns a dict: ``backend``, ``epoch``, ``batches``, ``samples``, ``elapsed_s``,
        ``samples_per_s``, ``batches_per_s``, ``consumer_wait_s`` (time your loop waited
        for a batch: near zero means the loader keeps up), and ``stages``: for ``read``,
        ``decode``, ``collate`` and ``transfer``, ``concurrency`` (threads; a string where
        the work runs inside another stage or process), ``busy_s`` (thread-seconds
        working), ``wait_in_s`` (starved: waiting on the input queue), ``wait_out_s``
        (blocked: waiting for room in the output queue), ``items`` (samples for read and
        decode, batches after), ``items_per_s`` and ``utilisation`` (busy / (elapsed x
        threads)). The process backend measures only what the main process sees (its
        ``read``/``decode`` times come from the dataset's counters, when it has ``stats()``).
        """
        if self._run is None:
            raise RuntimeError("no pass yet: iterate the loader (or use turboloader.profile)")
        return self._run.report()

    def __repr__(self):
        return (f"DataLoader({type(self.dataset).__name__}, batch_size={self.batch_size}, "
                f"num_workers={self.num_workers}, backend={self.backend!r}, "
                f"drop_last={self.drop_last}, pin_memory={self._pin_requested})")


def _batch_len(batch) -> int:
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    if isinstance(batch, (list, tuple)) and batch:
        return _batch_len(batch[0])
    if isinstance(batch, dict) and batch:
        return _batch_len(next(iter(batch.values())))
    try:
        return len(batch)
    except TypeError:
        return 1


def profile(loader, num_batches=20, *, file=None) -> dict:
    """Run ``num_batches`` batches of ``loader``, print the stage table, return the stats.

    Args:
        loader: a :class:`DataLoader`.
        num_batches: how many batches to time (fewer if the pass ends first).
        file: where to print (default ``sys.stdout``); None output with ``file=False``.

    Returns:
        ``loader.stats()`` of that partial pass.

    Example:
        >>> turboloader.profile(loader, num_batches=50)                    # doctest: +SKIP
        turboloader.DataLoader (threads), epoch 0: 50 batches, ...
        stage      threads   busy s   util  starved s  blocked s   items   items/s
        read     in decode     0.41      -       0.00       0.00   12800    1650.2
        decode           2    14.98    97%       0.00       0.20   12800    1650.2
        ...
    """
    if not isinstance(loader, DataLoader):
        raise TypeError(f"profile needs a turboloader.DataLoader, got {type(loader).__name__}")
    if int(num_batches) < 1:
        raise ValueError(f"num_batches must be >= 1, got {num_batches}")
    it = loader._iter_threads(loader._begin_epoch()) if loader.backend == "threads" else \
        loader._iter_processes(loader._begin_epoch())
    try:
        for i, _ in enumerate(it, 1):
            if i >= num_batches:
                break
    finally:
        it.close()
    report = loader.stats()
    if file is not False:
        print(format_stats(report), file=file or sys.stdout)
    return report
