"""The thread backend's plumbing: stage threads, bounded queues, shutdown, batch buffers.

:class:`Pipeline` is one pass of the thread backend; its two layouts are
:class:`~turboloader.loader._iterable.IterablePipeline` (one logical worker stream per decode
thread, batches round-robin) and :class:`~turboloader.loader._mapstyle.MapPipeline` (torch's
batch sampler, each batch split across the decode threads). Threads reference the pipeline,
never the generator the user iterates, so dropping or closing that generator (a ``break``)
runs :meth:`Pipeline.shutdown`.
"""

from __future__ import annotations

import queue
import threading
import time
import warnings

import torch

from turboloader._exit import stop_at_exit
from turboloader.data.reader import reading_as
from turboloader.loader.stats import RunStats

_POLL_S = 0.05  # how often a blocked stage thread looks at the stop flag
_JOIN_S = 30.0


class Stopped(Exception):
    """The pipeline is shutting down: leave the stage loop quietly."""


class Failure:
    """An exception travelling down the pipeline in place of a batch."""

    __slots__ = ("exc",)

    def __init__(self, exc):
        self.exc = exc


DONE = object()


def put(q, item, stop):
    """Put ``item``, waiting for room; the seconds waited. Raises Stopped on shutdown."""
    try:
        q.put_nowait(item)
        return 0.0
    except queue.Full:
        pass
    t = time.perf_counter()
    while True:
        if stop.is_set():
            raise Stopped
        try:
            q.put(item, timeout=_POLL_S)
            return time.perf_counter() - t
        except queue.Full:
            continue


def get(q, stop):
    """(item, seconds waited). Raises Stopped on shutdown."""
    try:
        return q.get_nowait(), 0.0
    except queue.Empty:
        pass
    t = time.perf_counter()
    while True:
        if stop.is_set():
            raise Stopped
        try:
            return q.get(timeout=_POLL_S), time.perf_counter() - t
        except queue.Empty:
            continue


def dataset_plan(dataset):
    """The fused plan of ``dataset.transform`` (turboloader pipelines) when it makes the
    sample's image, or None (a video dataset's transform makes each frame of a clip:
    its samples' shape is the first sample's)."""
    tf = getattr(dataset, "transform", None)
    if tf is None or getattr(dataset, "frames_per_clip", None) is not None:
        return None
    try:
        from turboloader.data.step import get_plan

        return get_plan(tf)
    except Exception:  # a transform we cannot plan is simply the generic path
        return None


def rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def tensor_pairs(sample) -> bool:
    return (isinstance(sample, tuple) and len(sample) == 2 and isinstance(sample[0], torch.Tensor))


class Allocator:
    """Batch tensors of ``batch_size`` rows from the loader's recycled pool (pinned when
    asked and possible); with a ``batch_sampler`` (``batch_size`` None) as many rows as the
    batch has samples."""

    def __init__(self, batch_size, shape, dtype, get):
        self.batch_size, self.shape, self.dtype, self.get = batch_size, shape, dtype, get

    def _rows(self, n):
        B = self.batch_size
        return n if B is None or n is None or n > B else B

    def first(self, n=None):
        if self.shape is None:
            return None
        return self.get((self._rows(n), *self.shape), self.dtype)

    def like(self, img, n=None):
        if not isinstance(img, torch.Tensor):
            raise TypeError(f"expected a tensor image, got {type(img).__name__}")
        return self.get((self._rows(n), *img.shape), img.dtype)


class BatchBuffer:
    """One batch being filled sample by sample: a batch tensor (when the sample shape is
    known, or from the first sample on) and the labels; or, for samples that are not
    ``(tensor, label)`` pairs, the samples themselves for ``collate_fn``.

    Collated as :func:`turboloader.data.fields.collate_fields` collates (what the process
    backend's default ``collate_fn`` is too): images of different sizes, and labels that
    cannot be stacked (detection targets with different box counts), become lists."""

    __slots__ = ("images", "labels", "samples", "n", "alloc", "ragged")

    def __init__(self, n, alloc):
        self.n = n
        self.alloc = alloc  # an Allocator, or None when samples are kept as is
        self.images = alloc.first(n) if alloc is not None else None
        self.labels = [None] * n
        self.samples = None if alloc is not None else [None] * n
        self.ragged = {}  # {row: image} for images whose shape is not the batch tensor's

    def put(self, j, sample):
        """Store sample ``j``; an image already decoded into its row is not copied."""
        if self.samples is not None:
            self.samples[j] = sample
            return
        img, label = sample
        if self.images is None:
            self.images = self.alloc.like(img, self.n)
        dst = self.images[j]
        if not (img.data_ptr() == dst.data_ptr() and img.dtype == dst.dtype
                and img.shape == dst.shape):  # not decoded into its row: copy it there
            if tuple(img.shape) != tuple(dst.shape) or img.dtype != dst.dtype:
                self.ragged[j] = img  # images of several sizes: the batch is a list of them
            else:
                dst.copy_(img)
        self.labels[j] = label

    def collate(self, n=None, collate_fn=None):
        from turboloader.data.fields import collate_column, collate_fields

        n = self.n if n is None else n
        if self.samples is not None:
            if collate_fn is None:  # default_collate, with lists where it cannot (boxes of
                # different counts per image), as a dataset's own fields batches
                collate_fn = collate_fields
            return collate_fn(self.samples[:n])
        if self.ragged:
            images = [self.ragged.get(j, self.images[j]) for j in range(n)]
        else:
            images = self.images if n == self.images.shape[0] else self.images[:n]
        return [images, collate_column(tuple(self.labels[:n]))]


class Pipeline:
    """The threads of one pass and the queues between them; subclasses add the decode
    layout (``_start``)."""

    collate_threads: int | str = 1  # or where the ordering runs, when it has no thread of its own

    def __init__(self, loader, epoch):
        self.loader = loader
        self.dataset = loader.dataset
        self.stop = threading.Event()
        self.threads = []
        self.W = max(1, loader.num_workers)
        self.pool = loader._pool
        # set while the consumer is blocked waiting for a batch: then a producer short of a
        # free buffer allocates rather than waits for the consumer to drop one
        self.consumer_waiting = threading.Event()
        transfer = 1 if loader._pin and loader.collate_fn is not None else 0
        self.stats = RunStats("threads", epoch, {"read": "in decode", "decode": self.W,
                                                 "collate": self.collate_threads,
                                                 "transfer": transfer},
                              self.dataset)
        self.depth = max(1, loader.prefetch_factor)
        self.out = queue.Queue(maxsize=self.depth)
        self.transfer_q = queue.Queue(maxsize=self.depth) if transfer else None
        plan = dataset_plan(self.dataset)
        shape = tuple(plan.output_shape) if plan is not None and plan.output_shape else None
        dtype = plan.output_dtype if plan is not None else None
        self.shape_dtype = (shape, dtype)
        stop_at_exit(self, Pipeline.shutdown)
        self._start(self.transfer_q if transfer else self.out)
        if transfer:
            self._spawn(self._transfer, name="turboloader-transfer")

    def _source(self):
        """The next collated batch for the transfer stage (DONE at the end)."""
        return get(self.transfer_q, self.stop)[0]

    def _start(self, collate_out):
        raise NotImplementedError

    def _spawn(self, fn, *args, name):
        t = threading.Thread(target=self._guard, args=(fn, *args), name=name, daemon=True)
        self.threads.append(t)
        t.start()

    def _guard(self, fn, *args):
        try:
            fn(*args)
        except Stopped:
            pass
        except BaseException as exc:  # a bug in a stage: end the pass with it, never hang
            try:
                self.out.put(Failure(exc), timeout=1.0)
            except queue.Full:
                pass
            self.stop.set()

    def alloc(self, shape, dtype):
        """A batch tensor from the loader's pool (see BufferPool.get's ``wait``)."""
        return self.pool.get(shape, dtype, wait=self._may_allocate)

    def _may_allocate(self) -> bool:
        return self.consumer_waiting.is_set() or self.stop.is_set()

    def allocator(self):
        """Batch tensors for samples that arrive one at a time (None: the user's collate_fn
        gets the samples)."""
        if self.loader.collate_fn is not None:
            return None
        shape, dtype = self.shape_dtype
        return Allocator(self.loader.batch_size, shape, dtype, self.alloc)

    def stream_name(self, w) -> str:
        """Decode thread ``w`` reads as its own stream: its own decoder, statistics and
        failure budget in the dataset, as a worker process has."""
        return (f"rank{rank()}-thread{w}" if self.loader.num_workers > 0
                else f"rank{rank()}-thread-main")

    def reading(self, w):
        """The context decode thread ``w`` reads in: its stream's name and, with
        ``decode="gpu"``, the loader's device executor."""
        return reading_as(self.stream_name(w), executor=self.loader._device)

    def init_worker(self, w):
        """``worker_init_fn(w)`` in decode thread ``w``, once per thread (threads are made
        per pass, as torch's non-persistent worker processes are)."""
        fn = self.loader.worker_init_fn
        if fn is not None:
            fn(w)

    # -- transfer ------------------------------------------------------------------------

    def _transfer(self):
        from torch.utils.data._utils.pin_memory import pin_memory

        stats, stop = self.stats.stages["transfer"], self.stop
        while True:
            t = time.perf_counter()
            item = self._source()
            waited = time.perf_counter() - t
            t = time.perf_counter()
            end = item is DONE or isinstance(item, Failure)
            if not end:
                item = pin_memory(item)
            busy = time.perf_counter() - t
            stats.add(busy=busy, wait_in=waited, wait_out=put(self.out, item, stop),
                      items=0 if end else 1)
            if end:
                return

    # -- the consumer side ---------------------------------------------------------------

    def next(self, timeout):
        try:
            return self.out.get_nowait()
        except queue.Empty:
            pass
        t = time.perf_counter()
        self.consumer_waiting.set()
        try:
            item = self.out.get(timeout=timeout if timeout > 0 else None)
        except queue.Empty:
            raise RuntimeError(f"turboloader.DataLoader timed out after {timeout} s waiting "
                               "for a batch") from None
        finally:
            self.consumer_waiting.clear()
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
