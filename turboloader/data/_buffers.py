"""Recycled batch memory.

A fresh batch tensor costs more than filling it: the kernel zeroes every page on the first
write (a 64 x 3 x 224 x 224 float32 batch, 38.5 MB, takes ~40 ms to fault in on the project's
2-core machine and ~2 ms to overwrite once touched). :class:`BufferPool` hands out tensors
whose memory it reuses, but only once nothing outside the pool references that memory any
more: a tensor the user (or a queue, or a view) still holds is never written again, and the
pool allocates instead. Correctness never depends on anyone releasing a batch; only the
speed does.

"Nothing references it" is read from the storage's reference count: the pool keeps one base
tensor per buffer and only ever hands out *views* of it (new tensor objects on the same
storage), so every tensor, view, NumPy array (``.numpy()`` holds the tensor) or DLPack
capsule derived from a handed-out batch keeps the count up. Memory that was moved to shared
memory (``share_memory_()``, or pickled to another process, which does that) is dropped from
the pool for good: another process may still read it and its references are not counted here.

Shared batches (:func:`shared_pool`, inside DataLoader worker processes) are recycled too,
with a return channel, because the reader is another process: each buffer is shared memory
with a release flag after the data. The worker sets the flag when its batch is pickled to
the main process (:class:`_Recycled`'s reduction), and the main process clears it when the
last reference to its copy of the tensor dies (the tensor it gets is ``torch.from_numpy`` of
the mapped memory, so its storage's deleter is an ordinary Python object that a finalizer
watches; views, NumPy arrays, ``pin_memory`` or ``share_memory_()`` copies all keep or end it
correctly). A buffer is written again only when both the worker and the main process have
let go of it; a batch that went anywhere else (a third process, ``torch.save``) never clears
the flag, and its buffer is simply not reused.

Samples (``DataLoader(dataset, batch_size=B)``) reach the same shared buffers through torch's
collate: in a worker, the images a dataset yields from its recycled chunk buffers are
:class:`_Row` tensors, for which ``torch.utils.data.default_collate`` (through
``default_collate_fn_map``, torch's documented way to extend it) stacks the batch into a
recycled shared buffer instead of fresh shared memory.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
import weakref

import numpy as np
import torch

__all__ = ["BufferPool", "as_row", "collated_batch_size", "new_shared", "shared_pool"]

_FLAG_BYTES = 64  # after the data of a shared buffer: byte 0 is 1 while the main process holds it

try:
    _use_count = torch._C._storage_Use_Count
except AttributeError:  # an unknown torch: never reuse (always correct, only slower)
    _use_count = None


def _unreferenced(storage) -> bool:
    """True when only the pool holds ``storage``: its base tensor plus the storage object
    made to ask."""
    return _use_count is not None and _use_count(storage._cdata) <= 2


def _nbytes(shape, dtype) -> int:
    numel = 1
    for v in shape:
        numel *= int(v)
    return numel * torch.empty((), dtype=dtype).element_size()


def new_shared(shape, dtype) -> torch.Tensor:
    """An uninitialised tensor in shared memory from the start, so that sending it to another
    process (a DataLoader worker's result queue) copies nothing: torch's pickler passes
    shared storage by handle."""
    storage = torch.UntypedStorage._new_shared(_nbytes(shape, dtype))
    return torch.empty((0,), dtype=dtype).set_(storage, 0, tuple(shape))


class BufferPool:
    """Tensors of a few (shape, dtype) kinds, reused once unreferenced.

    Args:
        capacity: buffers kept per kind; past it, new buffers are handed out untracked
            (freed as usual when dropped), so a consumer that keeps every batch never makes
            the pool grow without bound.
        pin: allocate in pinned memory. Pinned buffers are not pooled here: torch's caching
            host allocator already recycles pinned blocks, and it also waits for
            asynchronous copies still reading a block before reusing it, which a reference
            count cannot see.
        shared: allocate in shared memory (see :func:`new_shared`), for batches a worker
            process sends to the main process: reused once neither the worker nor the main
            process references them (see the module docstring). Hand a batch out through
            :meth:`send` so that the main process reports its release.

    Thread-safe.
    """

    def __init__(self, capacity=8, *, pin=False, shared=False):
        self.capacity = int(capacity)
        self.pin = bool(pin)
        self.shared = bool(shared)
        self._kinds = {}
        self._flags = {}  # shared: storage data_ptr -> (flag array, its byte offset)
        self._lock = threading.Lock()
        self.allocated = self.reused = self.waited = 0

    def get(self, shape, dtype=torch.float32, *, wait=None) -> torch.Tensor:
        """A tensor of ``shape`` and ``dtype`` with undefined contents that nothing else
        references: a view of a pooled buffer no one holds any more, or new memory.

        Args:
            wait: when all ``capacity`` buffers of the kind are in use, poll (every 0.5 to 5 ms)
                for one to be released for as long as ``wait()`` is False, then allocate an
                untracked buffer. A loader passes "the consumer is not waiting for a batch":
                while the consumer works on a batch, the producers, already ahead, wait for
                the one it drops next instead of growing the resident set; once it waits, a
                consumer that keeps its batches gets new memory at once. None: allocate at
                once.
        """
        shape = tuple(int(v) for v in shape)
        if self.pin:
            self.allocated += 1
            return torch.empty(shape, dtype=dtype, pin_memory=True)
        key = (shape, dtype)
        with self._lock:
            got = self._reuse(key)
            if got is not None:
                return got
            bases = self._kinds[key]
            if len(bases) < self.capacity:
                self.allocated += 1
                base = self._new(shape, dtype)
                bases.append(base)
                return base[:]
        if wait is not None:
            pause = 0.0005
            while not wait():
                time.sleep(pause)
                pause = min(pause * 2, 0.005)  # a consumer busy for long costs few wake-ups
                with self._lock:
                    got = self._reuse(key)
                if got is not None:
                    self.waited += 1
                    return got
        self.allocated += 1
        return new_shared(shape, dtype) if self.shared else torch.empty(shape, dtype=dtype)

    def _new(self, shape, dtype):
        if not self.shared:
            return torch.empty(shape, dtype=dtype)
        nbytes = _nbytes(shape, dtype)
        storage = torch.UntypedStorage._new_shared(nbytes + _FLAG_BYTES)
        base = torch.empty((0,), dtype=dtype).set_(storage, 0, shape)
        # a view by address, not a tensor: it must not count as a reference to the storage
        # (the pool keeps `base`, so the address stays valid as long as the entry)
        flag = np.ctypeslib.as_array((ctypes.c_uint8 * 1).from_address(storage.data_ptr() + nbytes))
        flag[0] = 0
        self._flags[storage.data_ptr()] = (flag, nbytes)
        return base

    def _reuse(self, key):
        bases = self._kinds.setdefault(key, [])
        for base in list(bases):
            storage = base.untyped_storage()
            if self.shared:
                # this process's references first, then the flag: a batch is released
                # here only after it was pickled, which raised the flag
                if _unreferenced(storage) and not self._flags[storage.data_ptr()][0][0]:
                    self.reused += 1
                    return base[:]
            elif storage.is_shared():  # another process may map it: never reuse
                bases.remove(base)
            elif _unreferenced(storage):
                self.reused += 1
                return base[:]
        return None

    def _flag(self, tensor):
        """``(flag array, its byte offset)`` of the shared buffer ``tensor`` lies in, or None
        when it is not one of this pool's."""
        return self._flags.get(tensor.untyped_storage().data_ptr()) if self.shared else None

    def send(self, tensor):
        """``tensor`` ready to cross to the main process: when it lies in one of this
        pool's shared buffers, the same memory as a tensor whose pickling raises the
        buffer's flag and makes the receiver clear it on release; otherwise ``tensor``."""
        flag = self._flag(tensor)
        if flag is None or tensor.dtype not in _NUMPY_DTYPES:  # the receiver maps it via NumPy
            return tensor
        out = tensor.as_subclass(_Recycled)
        out._tl_flag = flag
        return out

    def retire(self, tensor) -> None:
        """Never write the shared buffer ``tensor`` lies in again (it leaves for a reader
        that reports no release); a tensor outside this pool's buffers is ignored."""
        flag = self._flag(tensor)
        if flag is not None:
            flag[0][0] = 1

    def clear(self) -> None:
        """Forget every pooled buffer (memory still referenced elsewhere lives on there)."""
        with self._lock:
            self._kinds.clear()
            self._flags.clear()

    def nbytes(self) -> int:
        """Bytes of the buffers the pool keeps."""
        with self._lock:
            return sum(b.untyped_storage().nbytes() for bases in self._kinds.values()
                       for b in bases)


class _Recycled(torch.Tensor):
    """A batch in a pooled shared buffer on its way to the main process (see
    :meth:`BufferPool.send`). Operations on it give plain tensors."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __reduce_ex__(self, protocol):
        flag, offset = self._tl_flag
        flag[0] = 1  # before anyone else can see the batch: cleared by the receiver
        return _received, (self.as_subclass(torch.Tensor), offset)


def _received(tensor, offset):
    """The receiving side of :class:`_Recycled`: the same memory, as a tensor whose storage
    going away clears the buffer's flag."""
    flag = torch.empty((0,), dtype=torch.uint8).set_(tensor.untyped_storage(), offset, (1,))
    array = tensor.numpy()
    weakref.finalize(array, _release, flag, os.getpid()).atexit = False
    return torch.from_numpy(array)


def _release(flag, pid):
    if os.getpid() == pid:  # not in a process forked from the receiver, which may still hold it
        flag.zero_()


_NUMPY_DTYPES = {torch.float16, torch.float32, torch.float64, torch.uint8, torch.int8,
                 torch.int16, torch.int32, torch.int64, torch.bool}
_shared = (None, None)  # (pid, pool): a forked child makes its own


def shared_pool(*, create=True):
    """This process's pool of shared batch buffers (each worker process has its own); with
    ``create=False``, None when this process has none yet."""
    global _shared
    pid, pool = _shared
    if pid != os.getpid():
        if not create:
            return None
        pool = BufferPool(3, shared=True)  # a batch being written, one queued, one held
        _shared = (os.getpid(), pool)
    return pool


# -- samples through torch's default_collate ---------------------------------------------------


class _Row(torch.Tensor):
    """A sample's image inside a DataLoader worker, a row of a recycled buffer (see
    :func:`as_row`). Operations on it give plain tensors; pickled, it is a plain tensor."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __reduce_ex__(self, protocol):
        # a row leaving alone (a custom collate_fn): the main process may hold its buffer
        # for good through torch's own sharing, which reports no release
        pool = shared_pool(create=False)
        if pool is not None:
            pool.retire(self)
        return _same, (self.as_subclass(torch.Tensor),)


def _same(x):
    return x


def as_row(image: torch.Tensor) -> torch.Tensor:
    """``image`` (a row of a dataset's recycled buffer, in a DataLoader worker) as a tensor
    that ``default_collate`` stacks into a recycled shared batch."""
    return image.as_subclass(_Row)


_collated = [0]  # the batch size default_collate last stacked rows into, in this process


def collated_batch_size() -> int:
    """The size of the last batch of rows ``default_collate`` made in this process (0:
    none yet): a worker's dataset writes its next samples into a shared buffer of that many
    rows, starting at a batch boundary, so that collating them copies nothing."""
    return _collated[0]


def _collate_rows(batch, *, collate_fn_map=None):
    """``default_collate``'s tensor case for :class:`_Row` samples: the same stacked batch,
    in one of the worker's recycled shared buffers: the rows' own buffer when the batch is
    exactly its first rows in order (nothing copied), else a copy into a new one."""
    elem = batch[0]
    if torch.utils.data.get_worker_info() is None:
        return _torch_collate(batch, collate_fn_map=collate_fn_map)
    _collated[0] = len(batch)
    pool = shared_pool()
    whole = _leading_rows(pool, batch)
    if whole is not None:
        return pool.send(whole)
    out = pool.get((len(batch), *elem.shape), elem.dtype)
    torch.stack(batch, 0, out=out)
    return pool.send(out)


def _leading_rows(pool, batch):
    """Rows ``0..n-1`` of one of ``pool``'s buffers as an ``(n, ...)`` tensor when ``batch``
    is exactly those rows, in order; else None."""
    elem = batch[0]
    storage = elem.untyped_storage()
    ptr = storage.data_ptr()
    if pool._flag(elem) is None or elem.storage_offset() != 0 or not elem.is_contiguous():
        return None
    step = elem.numel()
    for i, x in enumerate(batch):
        if (type(x) is not _Row or x.untyped_storage().data_ptr() != ptr or x.shape != elem.shape
                or x.dtype != elem.dtype or x.storage_offset() != i * step
                or not x.is_contiguous()):
            return None
    return torch.empty((0,), dtype=elem.dtype).set_(storage, 0, (len(batch), *elem.shape))


try:
    from torch.utils.data._utils.collate import collate_tensor_fn as _torch_collate
    from torch.utils.data._utils.collate import default_collate_fn_map
except ImportError:  # another torch: rows collate as plain tensors (fresh shared memory)
    pass
else:
    default_collate_fn_map.setdefault(_Row, _collate_rows)
