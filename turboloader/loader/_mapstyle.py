"""The thread backend over a map-style dataset: torch's batch sampler, each batch split
across the decode threads.

A dispatcher thread walks the batch sampler (torch's own, built by torch's DataLoader) and
splits each batch's indices into one contiguous part per decode thread; each thread reads
its part with ``dataset.__getitems__(indices, out=rows)`` (the protocol's batch hook, see
:mod:`turboloader.loader.protocol`; ``dataset[i]`` for other datasets) into its rows of a
recycled batch tensor; a collate thread hands the batches out in sampler order.
"""

from __future__ import annotations

import queue
import threading
import time

import numpy as np

from turboloader.loader._pipeline import (_POLL_S, DONE, BatchBuffer, Failure, Pipeline, Stopped,
                                          get, put, tensor_pairs)
from turboloader.loader.protocol import accepts_out


class _End:
    __slots__ = ("seq",)

    def __init__(self, seq):
        self.seq = seq


class _MapBatch:
    """A map-style batch in flight: its indices, buffer and the parts still decoding."""

    __slots__ = ("seq", "indices", "buf", "remaining", "error", "had_pair", "lock")

    def __init__(self, seq, indices, alloc):
        self.seq, self.indices = seq, indices
        self.buf = BatchBuffer(len(indices), alloc) if indices else None
        self.remaining = 0
        self.error = None
        self.had_pair = False  # an (image, label) pair was put
        self.lock = threading.Lock()

    def put(self, j, sample):
        buf = self.buf
        if buf.samples is None and not tensor_pairs(sample):
            with self.lock:
                if buf.samples is None:
                    if self.had_pair:
                        raise TypeError("a dataset's samples must all be (tensor, label) "
                                        f"pairs or none, got {type(sample).__name__}")
                    # e.g. fields tuples: collate_fn (default_collate) gets the samples; the
                    # rows they were decoded into live on in them
                    buf.samples, buf.images, buf.alloc = [None] * buf.n, None, None
        elif buf.samples is None:
            self.had_pair = True
        if buf.samples is None and buf.images is None:
            with self.lock:  # the first sample of a batch of unknown shape allocates it
                if buf.images is None:
                    buf.images = buf.alloc.like(sample[0], buf.n)
        buf.put(j, sample)

    def chunk_done(self) -> bool:
        with self.lock:
            self.remaining -= 1
            return self.remaining == 0


class MapPipeline(Pipeline):

    def _start(self, collate_out):
        self.tasks = queue.Queue()
        self.done = queue.Queue()
        self.in_flight = threading.Semaphore(self.W * self.depth)
        self.batch_hook = accepts_out(self.dataset)
        self._spawn(self._dispatch, name="turboloader-read")
        for w in range(self.W):
            self._spawn(self._worker, w, name=f"turboloader-decode-{w}")
        self._spawn(self._in_order, collate_out, name="turboloader-collate")

    def _dispatch(self):
        stats, stop, W = self.stats.stages["read"], self.stop, self.W
        alloc = self.allocator()
        seq = 0
        t = time.perf_counter()
        try:
            for indices in self.loader._batches():
                indices = list(indices)
                waited = 0.0
                t0 = time.perf_counter()
                while not self.in_flight.acquire(timeout=_POLL_S):
                    if stop.is_set():
                        raise Stopped
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
        except Stopped:
            raise
        except BaseException as exc:
            rec = _MapBatch(seq, [], None)
            rec.error, rec.remaining = exc, 0
            self.done.put(rec)
            seq += 1
        self.done.put(_End(seq))
        for _ in range(W):
            self.tasks.put(None)

    def _worker(self, w):
        self.init_worker(w)
        with self.reading(w):
            self._work(w)

    def _work(self, w):
        stats, stop, ds = self.stats.stages["decode"], self.stop, self.dataset
        timing = self.stats.timing
        while True:
            task, waited = get(self.tasks, stop)
            if task is None:
                return
            rec, a, b = task
            t = time.perf_counter()
            try:
                if rec.error is None:
                    if self.batch_hook:
                        images = rec.buf.images
                        rows = None if images is None else images[a:b]
                        samples = ds.__getitems__(rec.indices[a:b], out=rows, timing=timing)
                        for j, sample in zip(range(a, b), samples):
                            rec.put(j, sample)
                    else:
                        for j in range(a, b):
                            if stop.is_set():
                                raise Stopped
                            rec.put(j, ds[rec.indices[j]])
            except Stopped:
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
            item, waited = get(self.done, stop)
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
                    put(out, Failure(rec.error), stop)
                    return
                batch = rec.buf.collate(len(rec.indices), collate_fn=loader.collate_fn)
                rec.buf = None
                self.in_flight.release()
                busy = time.perf_counter() - t
                stats.add(busy=busy, wait_out=put(out, batch, stop), items=1)
                batch = None  # held by the consumer only, so its memory can be recycled
        put(out, DONE, stop)
