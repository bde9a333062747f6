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
"""

from __future__ import annotations

import threading
import time

import torch

__all__ = ["BufferPool", "new_shared"]

try:
    _use_count = torch._C._storage_Use_Count
except AttributeError:  # an unknown torch: never reuse (always correct, only slower)
    _use_count = None


def _unreferenced(storage) -> bool:
    """True when only the pool holds ``storage``: its base tensor plus the storage object
    made to ask."""
    return _use_count is not None and _use_count(storage._cdata) <= 2


def new_shared(shape, dtype) -> torch.Tensor:
    """An uninitialised tensor in shared memory from the start, so that sending it to another
    process (a DataLoader worker's result queue) copies nothing: torch's pickler passes
    shared storage by handle."""
    numel = 1
    for v in shape:
        numel *= int(v)
    storage = torch.UntypedStorage._new_shared(numel * torch.empty((), dtype=dtype).element_size())
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
        shared: allocate in shared memory (see :func:`new_shared`); never pooled.

    Thread-safe.
    """

    def __init__(self, capacity=8, *, pin=False, shared=False):
        self.capacity = int(capacity)
        self.pin = bool(pin)
        self.shared = bool(shared)
        self._kinds = {}
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
        if self.shared:
            self.allocated += 1
            return new_shared(shape, dtype)
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
                base = torch.empty(shape, dtype=dtype)
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
        return torch.empty(shape, dtype=dtype)

    def _reuse(self, key):
        bases = self._kinds.setdefault(key, [])
        for base in list(bases):
            storage = base.untyped_storage()
            if storage.is_shared():  # another process may map it: never reuse
                bases.remove(base)
            elif _unreferenced(storage):
                self.reused += 1
                return base[:]
        return None

    def clear(self) -> None:
        """Forget every pooled buffer (memory still referenced elsewhere lives on there)."""
        with self._lock:
            self._kinds.clear()

    def nbytes(self) -> int:
        """Bytes of the buffers the pool keeps."""
        with self._lock:
            return sum(b.untyped_storage().nbytes() for bases in self._kinds.values()
                       for b in bases)
