"""The thread backend over an iterable dataset: one logical worker stream per decode thread.

torch's DataLoader over an ``IterableDataset`` with ``W`` workers batches each worker's
stream separately (each drops its own last partial batch when ``drop_last``) and returns
the workers' batches round-robin, skipping workers that are exhausted. This layout runs the
same ``W`` streams (the dataset's ``worker_stream``, see :mod:`turboloader.loader.protocol`),
one per decode thread, and re-orders their batches the same way, so items, order, transform
parameters and the failure policy are identical by construction. A stream that yields whole
batches (``batch_size=``) writes them straight into recycled batch tensors. With up to
:data:`SHARED_RUNNER_MAX` decode threads, their native batch calls share one runner
(:class:`SharedRunner`), so no core idles while another stream still has images to decode.
"""

from __future__ import annotations

import collections
import queue
import time

from turboloader.data.reader import reading_as
from turboloader.decode import executor
from turboloader.loader._pipeline import (_POLL_S, DONE, BatchBuffer, Failure, Pipeline, Stopped,
                                          put, tensor_pairs)
from turboloader.loader.protocol import has_worker_streams

#: The most decode threads whose batch calls share one runner (:class:`SharedRunner`). With
#: more, one call at a time would leave a thread per call idle at its end and serialize the
#: calls' set-up (under the GIL); each thread then keeps its own 1-thread runner.
SHARED_RUNNER_MAX = 4

#: Samples in each stream's first batch call of a pass on a shared runner: until one call
#: starts no core decodes (the pass's threads start, gather and draw their first chunk, under
#: the GIL), so the first gather is short and the other streams gather theirs while it
#: decodes. With full first chunks (256 ImageNet-sized samples, 6-12 ms of CPU to gather
#: each, both streams at once on the GIL) the first call started 20-114 ms after ``iter()``
#: on the loaded 2-core VM; with 32, 2.9-15 ms when the streams' first shards were open
#: (``benchmarks/bench_util.py``, results/issue42-util.md). It costs one more call per
#: stream and pass.
FIRST_CHUNK = 32


class SharedRunner:
    """The native batch calls of a loader's decode threads, on one
    :class:`~turboloader.decode.executor.BatchRunner` with a thread per decode thread (the
    calling one included): each call runs on all of them, its images handed out one at a
    time, and calls run one after another. So whenever any stream has a gathered chunk,
    every core decodes it: a stream that reaches the end of its share of the pass (or waits
    for room in its queue) does not leave its core idle while another stream still decodes,
    and one stream's gather and draws (Python) overlap the other's call. Each image is
    decoded alone from its own draws into its own row, so the rows are exactly the
    1-thread call's.

    The stream's executor (:func:`turboloader.data.reader.reading_as`), as a
    :class:`~turboloader.decode.device_executor.DeviceDecode` is for ``decode="gpu"``.
    """

    #: read by the stream walker (``turboloader.data.stream``) at the start of each pass
    first_chunk = FIRST_CHUNK

    def __init__(self, threads: int):
        self.threads = int(threads)
        self.runner = executor.BatchRunner(threads=self.threads)

    def run_batch(self, sources, params, out, /, **kw) -> executor.BatchResult:
        """:func:`turboloader.decode.executor.run_batch` on the shared runner; its
        ``nogil_seconds`` include the wait for the runner (no GIL is held then either), so
        the loader's statistics count that wait as decoding, not as Python."""
        t = time.perf_counter()
        result = executor.run_batch(sources, params, out, runner=self.runner, **kw)
        result.nogil_seconds = max(result.nogil_seconds, time.perf_counter() - t)
        return result


def shared_runner(loader, threads: int) -> SharedRunner | None:
    """``loader``'s :class:`SharedRunner` for ``threads`` decode threads (made on first
    use, kept across passes with its threads' scratch memory), or None: one thread, more
    than :data:`SHARED_RUNNER_MAX`, or ``decode="gpu"`` (the device executor runs the
    calls)."""
    if not 2 <= threads <= SHARED_RUNNER_MAX or loader._device is not None:
        return None
    runner = loader._shared_runner
    if runner is None or runner.threads != threads:
        runner = loader._shared_runner = SharedRunner(threads)
    return runner


def batch_len(batch) -> int:
    import torch

    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    if isinstance(batch, (list, tuple)) and batch:
        return batch_len(batch[0])
    if isinstance(batch, dict) and batch:
        return batch_len(next(iter(batch.values())))
    try:
        return len(batch)
    except TypeError:
        return 1


class IterablePipeline(Pipeline):

    collate_threads = "in loop"  # the consumer takes the streams' batches in order itself

    def _start(self, collate_out):
        loader = self.loader
        # after a resume, the stream whose batch was next comes first (torch's workers rotate
        # their logical streams the same way in TarDataset.__iter__), however the resume
        # point was loaded (the loader's state, the dataset's, Lightning's)
        first_stream = getattr(self.dataset, "first_stream", None)
        self.first_stream = int(first_stream(self.W)) if callable(first_stream) else 0
        first = self.first_stream % self.W
        self.active = collections.deque((first + i) % self.W for i in range(self.W))
        # prefetch_factor batches per stream, as torch counts them: the one being decoded
        # plus those waiting in its queue
        self.worker_qs = [queue.Queue(maxsize=max(1, self.depth - 1)) for _ in range(self.W)]
        self.awaited = -1  # the stream the consumer is blocked on
        self.taken = 0  # batches the consumer has taken
        self.reused0, self.allocated0 = self.pool.reused, self.pool.allocated
        self.runner = shared_runner(loader, self.W)
        for w in range(self.W):
            self._spawn(self._worker, w, name=f"turboloader-decode-{w}")
        # the consumer (or the transfer thread) takes the streams' batches round-robin
        # itself: no collate thread, no queue after it, one batch less in flight

    def reading(self, w):
        """Decode thread ``w``'s stream context: its batch calls on the shared runner when
        there is one (see :class:`SharedRunner`)."""
        if self.runner is None:
            return super().reading(w)
        return reading_as(self.stream_name(w), executor=self.runner)

    def _worker(self, w):
        self.init_worker(w)
        with self.reading(w):
            self._work(w)

    def _work(self, w):
        ds, loader, q, stop = self.dataset, self.loader, self.worker_qs[w], self.stop
        B = loader.batch_size
        streams = has_worker_streams(ds)
        stream = None
        try:
            if B is None:  # a dataset of whole batches (yields_batches)
                stream = ds.worker_stream(w, self.W, out=self.stream_alloc(w),
                                          timing=self.stats.timing)
                self._batches(stream, q, None)
            elif streams and loader.collate_fn is None:
                # whole batches, decoded into recycled (pinned) batch tensors
                stream = ds.worker_stream(w, self.W, batch_size=B, out=self.stream_alloc(w),
                                          timing=self.stats.timing)
                self._batches(stream, q, B)
            else:
                stream = (ds.worker_stream(w, self.W, timing=self.stats.timing) if streams
                          else iter(ds))  # one stream only (checked in DataLoader)
                self._samples(stream, q, B)
            put(q, DONE, stop)
        except Stopped:
            raise
        except BaseException as exc:
            exc.add_note(f"turboloader.DataLoader: in decode thread {w} (logical worker {w} "
                         f"of {self.W}), epoch {self.stats.epoch}")
            put(q, Failure(exc), stop)
        finally:
            if stream is not None and hasattr(stream, "close"):
                stream.close()  # in this thread: flushes the stream's statistics

    def _batches(self, stream, q, B):
        stats, stop, drop_last = self.stats.stages["decode"], self.stop, self.loader.drop_last
        t = time.perf_counter()
        for batch in stream:
            if stop.is_set():
                raise Stopped
            n = batch_len(batch)
            if B is not None and n < B and drop_last:  # a stream's last, partial batch
                break
            busy = time.perf_counter() - t
            stats.add(busy=busy, wait_out=put(q, batch, stop), items=n)
            batch = None  # the stream's next batch may reuse its memory once consumed
            t = time.perf_counter()
        stats.add(busy=time.perf_counter() - t)

    def _samples(self, stream, q, B):
        stats, stop, loader = self.stats.stages["decode"], self.stop, self.loader
        alloc = self.allocator()
        buf, j = BatchBuffer(B, alloc), 0
        t = time.perf_counter()
        for sample in stream:
            if buf.samples is None and not tensor_pairs(sample):
                if j == 0:
                    buf = BatchBuffer(B, None)  # not (tensor, label): keep samples
                    alloc = None
                else:
                    raise TypeError("a dataset's samples must all be (tensor, label) pairs "
                                    f"or none, got {type(sample).__name__}")
            buf.put(j, sample)
            j += 1
            if stop.is_set():
                raise Stopped
            if j == B:
                batch = buf.collate(collate_fn=loader.collate_fn)
                buf, j = BatchBuffer(B, alloc), 0
                busy = time.perf_counter() - t
                stats.add(busy=busy, wait_out=put(q, batch, stop), items=B)
                t = time.perf_counter()
        busy = time.perf_counter() - t
        if j and not loader.drop_last:
            batch = buf.collate(j, collate_fn=loader.collate_fn)
            stats.add(busy=busy, wait_out=put(q, batch, stop), items=j)
        else:
            stats.add(busy=busy)

    def _round_robin(self):
        """The next batch in torch's order (workers' batches round-robin, exhausted workers
        skipped), DONE at the end, or a Failure; a stage's crash (see Pipeline._guard) comes
        out here too."""
        stats, active = self.stats.stages["collate"], self.active
        while active:
            w = active[0]
            q = self.worker_qs[w]
            t = time.perf_counter()
            try:
                item = q.get_nowait()
            except queue.Empty:
                item = self._wait(q, w)
            stats.add(wait_in=time.perf_counter() - t, items=0 if item is DONE else 1)
            if item is DONE:
                active.popleft()
                continue
            active.rotate(-1)
            self.taken += 1
            return item
        return DONE

    def stream_alloc(self, w):
        """Stream ``w``'s batch allocator: a recycled tensor; when all are in use, the
        stream waits for the consumer to drop one unless the consumer is waiting for this
        very stream, or took two batches meanwhile (so it keeps them), or keeps batches
        altogether (nothing recycled after many batches): then new memory."""
        pool, q = self.pool, self.worker_qs[w]

        def alloc(shape, dtype):
            taken0 = self.taken

            def give_up():
                # (the consumer waits on an empty queue: a batch still in it is being taken)
                return (self.stop.is_set() or (self.awaited == w and q.empty())
                        or self.taken - taken0 >= 2 or self.keeps_batches())

            return pool.get(shape, dtype, wait=give_up)

        return alloc

    def keeps_batches(self) -> bool:
        return (self.pool.reused == self.reused0
                and self.pool.allocated - self.allocated0 > 2 * self.pool.capacity)

    def _wait(self, q, w):
        stop = self.stop
        waiting = self.consumer_waiting if self.transfer_q is None else None
        if waiting is not None:
            waiting.set()
            self.awaited = w
        try:
            while True:
                try:
                    return q.get(timeout=_POLL_S)
                except queue.Empty:
                    if stop.is_set():
                        try:
                            return self.out.get_nowait()  # a stage's crash (Pipeline._guard)
                        except queue.Empty:
                            raise Stopped from None
        finally:
            if waiting is not None:
                self.awaited = -1
                waiting.clear()

    def _source(self):
        return self._round_robin()

    def next(self, timeout):
        if self.transfer_q is not None:
            return super().next(timeout)
        t = time.perf_counter()
        try:
            item = self._round_robin()
        except Stopped:
            item = Failure(RuntimeError("turboloader.DataLoader: the pipeline was shut down"))
        self.stats.consumer_wait_s += time.perf_counter() - t
        return item
