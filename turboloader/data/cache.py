"""The decoded-sample cache of the datasets (the per-sample decoder that fills and uses it
is :class:`turboloader.data.step.Decoder`; the decoding is :mod:`turboloader.decode.image`'s).

:class:`SampleCache` is what ``cache="4GB"`` makes: decoded images in memory mapped in
large slabs, admitted until the bound is reached and then kept, never evicted. A training
epoch visits every sample once in a new order, so an LRU (or FIFO) cache smaller than the
dataset evicts each sample before its next visit and pays a full decode plus a copy for
every miss; kept entries give a hit rate of exactly ``capacity / size`` from the second
epoch on, and a sample that was not admitted takes the uncached path, which decodes only
its crop window. An image is decoded straight into its slot of a slab.

Memory: each process that reads samples (the main process, each DataLoader worker, each
decode thread of the thread backend) holds its own cache of up to ``capacity`` bytes. The
total is therefore ``capacity x streams x local ranks`` (x 2 when the DataLoader's workers
and the main process both iterate).

:class:`ByteLRU` is the least-recently-used mapping for callers whose accesses repeat
within a pass (the seed documents' ``HighPerformanceDataset``).
"""

from __future__ import annotations

from typing import Any
import copy
import mmap
import threading
from collections import OrderedDict

import numpy as np

from turboloader.decode import (  # noqa: F401 (decode_pil, is_jpeg: their old home)
    DEFAULT_MAX_PIXELS,
    decode_pil,
    is_jpeg,
)
from turboloader.errors import SampleError
from turboloader.io.sizes import parse_size

__all__ = [
    "ByteLRU",
    "SampleCache",
    "decode_pil",
    "is_jpeg",
    "own_copy",
    "parse_size",
]


_IMMUTABLE = frozenset({int, float, bool, str, bytes, complex, type(None)})


def own_copy(value):
    """``value`` as an object of the caller's own: ``value`` itself when nothing in it can
    be changed in place (ints, strings, ... and tuples of them), else a deep copy (tensors
    and arrays copied; dicts and lists rebuilt).

    What a dataset stores and hands out again (a cached sample's label, JSON dict, ``.npy``
    array or second image; a shard's parsed label) goes through this on the way in and on
    the way out, so that a consumer editing what it got in place never changes what a later
    epoch gets.
    """
    if type(value) in _IMMUTABLE:
        return value
    if type(value) is tuple and all(type(v) in _IMMUTABLE for v in value):
        return value
    try:
        if type(value) in _TREES:
            return _copy_tree(value)
        return copy.deepcopy(value)
    except (RecursionError, TypeError, copy.Error) as exc:  # a sample's value, not the epoch's
        raise SampleError(f"the sample's {type(value).__name__} value cannot be copied: "
                          f"{type(exc).__name__}: {exc}") from None


_TREES = (dict, list, tuple)


def _copy_tree(root):
    """``copy.deepcopy(root)`` for nested dicts, lists and tuples (a parsed JSON value, a
    Parquet row), walked with a stack instead of recursion: a label nested deeper than
    Python's recursion limit copies too. Other values inside are deep-copied; a container
    met twice is copied once (as deepcopy does)."""
    memo, deep_memo, open_tuples = {}, {}, set()

    def start(v):  # (copy, None) or (None, the frame that builds the copy)
        t = type(v)
        if t in _IMMUTABLE:
            return v, None
        if t not in _TREES:
            return copy.deepcopy(v, deep_memo), None
        if id(v) in memo:
            return memo[id(v)], None
        if t is tuple:  # built when its items are
            if id(v) in open_tuples:
                raise RecursionError("a tuple that contains itself")
            open_tuples.add(id(v))
            return None, [v, [], iter(v), None]
        new = {} if t is dict else []
        memo[id(v)] = new
        return None, [v, new, iter(v.items() if t is dict else v), None]

    def put(frame, value):
        if type(frame[0]) is dict:
            frame[1][frame[3]] = value
        else:
            frame[1].append(value)

    done, frame = start(root)
    stack = [frame]
    while stack:
        frame = stack[-1]
        src = frame[0]
        try:
            item = next(frame[2])
        except StopIteration:
            stack.pop()
            done = frame[1]
            if type(src) is tuple:
                done = tuple(done)
                memo[id(src)] = done
                open_tuples.discard(id(src))
            if stack:
                put(stack[-1], done)
            continue
        if type(src) is dict:
            frame[3], item = item
        value, child = start(item)
        if child is None:
            put(frame, value)
        else:
            stack.append(child)
    return done


class ByteLRU:
    """Least-recently-used mapping whose values' sizes add up to at most ``capacity`` bytes.

    A value larger than the whole capacity is not stored. Thread-safe (a lock around each
    operation): the thread backend's decode threads may share one (map-style datasets).

    Example:
        >>> lru = ByteLRU(100)
        >>> lru.put("a", b"x" * 60, 60); lru.put("b", b"y" * 60, 60)
        0
        1
        >>> lru.get("a") is None, lru.stats()["evictions"]
        (True, 1)
    """

    def __init__(self, capacity: Any) -> None:
        self.capacity = parse_size(capacity)
        self._data = OrderedDict()
        self.nbytes = 0
        self.hits = self.misses = self.evictions = 0
        self._lock = threading.Lock()

    def get(self, key):
        """The value for ``key`` (now most recently used), or None; counts a hit or a miss."""
        with self._lock:
            entry = self._data.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return entry[0]

    def put(self, key, value, nbytes: int) -> int:
        """Store ``value`` of ``nbytes`` bytes, evicting the least recently used as needed.

        Returns:
            The number of entries evicted.
        """
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self.nbytes -= old[1]
            if nbytes > self.capacity:
                return 0
            evicted = 0
            while self.nbytes + nbytes > self.capacity:
                _, (_, size) = self._data.popitem(last=False)
                self.nbytes -= size
                evicted += 1
            self._data[key] = (value, nbytes)
            self.nbytes += nbytes
            self.evictions += evicted
            return evicted

    def peek(self, key, default=None):
        """The value for ``key`` without counting a hit or refreshing it."""
        entry = self._data.get(key)
        return default if entry is None else entry[0]

    def reserve(self, nbytes):
        """Memory for a value of ``nbytes`` bytes about to be :meth:`put`: a new uint8
        array (an LRU admits everything that fits the whole capacity, evicting on ``put``),
        or None when it never could fit."""
        return np.empty(nbytes, np.uint8) if nbytes <= self.capacity else None

    def __len__(self):
        return len(self._data)

    def __contains__(self, key):
        return key in self._data

    def clear(self):
        with self._lock:
            self._data.clear()
            self.nbytes = 0

    def stats(self) -> dict:
        return {"hits": self.hits, "misses": self.misses, "evictions": self.evictions,
                "bytes": self.nbytes, "items": len(self._data), "capacity": self.capacity}


_SLAB = 16 << 20   # bytes mapped at a time (the last slab is cut to the capacity left)
_ALIGN = 64        # every slot starts on a cache line


def _map(nbytes):
    """``nbytes`` of zeroed private memory. Its pages are faulted in as the decoder first
    writes them, so each is zeroed just before it is filled, while in cache: populating a
    slab ahead (``MAP_POPULATE``) was measured slower, 800-950 against 900-1200 images/s
    for a filling epoch at full size on the 2-core VM, zeroing memory that is cold again by
    the time it is written. Transparent huge pages (``MADV_HUGEPAGE`` on each slab) halved
    the faults of a filling epoch (143 to 75 per image at ``cache_short_side=256``) and did
    not make it faster (CPU per image 2599 µs with them against 2547 without, medians of 8
    alternated fills in one process; 2384-2415 against 2103-2284 at full size): the kernel
    then zeroes 2 MiB at a time (``clear_page_erms`` 2 % -> 8 % of the epoch), cold again
    when the decoder writes it, the same trade as ``MAP_POPULATE``. ``MADV_POPULATE_WRITE``
    over each slot just before it is written gained nothing either (a resample into fresh
    memory 511 against 522 µs per image): a page costs its allocation, zeroing and
    charging, not the trap (``benchmarks/results/cache.md``, issue 32)."""
    return np.frombuffer(mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS),
                         np.uint8)


class SampleCache:
    """Decoded samples bounded in bytes: admitted until ``capacity`` is reached, then kept.

    Nothing is ever evicted or rewritten, so an entry's memory stays valid as long as
    anything refers to it. :meth:`reserve` hands out a slot of a slab (memory mapped
    ``16 MiB`` at a time, never more than ``capacity`` in all) that the caller decodes into
    and then :meth:`put` s; once the slabs are full, :meth:`reserve` answers None and the
    sample is counted as not admitted. Thread-safe (a lock around each operation): the
    thread backend's decode threads may share one (map-style datasets).

    Example:
        >>> cache = SampleCache(1000)
        >>> slot = cache.reserve(600); slot[:] = 7; cache.put("a", (slot, None, 3), 600)
        0
        >>> cache.reserve(600) is None, cache.get("a")[2], cache.stats()["not_admitted"]
        (True, 3, 1)
    """

    def __init__(self, capacity: Any) -> None:
        self.capacity = parse_size(capacity)
        self._data = {}
        self._slab = np.empty(0, np.uint8)   # the slab being filled, and its next free byte
        self._top = 0
        self.mapped = 0                      # bytes of every slab mapped so far
        self.nbytes = 0
        self.hits = self.misses = self.not_admitted = 0
        self.evictions = 0                   # always 0: kept for ByteLRU's counters
        self._lock = threading.Lock()

    def reserve(self, nbytes):
        """A writable uint8 slot of ``nbytes`` bytes for a sample about to be :meth:`put`,
        or None when the cache is full (counted in ``not_admitted``). A slot that is
        never put is lost to the cache (its bytes stay counted in ``mapped``)."""
        with self._lock:
            top = -(-self._top // _ALIGN) * _ALIGN
            if top + nbytes > len(self._slab):
                size = min(max(_SLAB, nbytes), self.capacity - self.mapped)
                if size < nbytes:
                    self.not_admitted += 1
                    return None
                self._slab, top = _map(size), 0
                self.mapped += size
            self._top = top + nbytes
            return self._slab[top:top + nbytes]

    def put(self, key, value, nbytes: int) -> int:
        """Store ``value`` (whose pixels live in a reserved slot) under ``key``. Returns 0,
        the number of entries evicted (ByteLRU's contract)."""
        with self._lock:
            if key not in self._data:
                self.nbytes += nbytes
            self._data[key] = value
        return 0

    def get(self, key):
        """The value for ``key``, or None; counts a hit or a miss."""
        value = self._data.get(key)
        with self._lock:
            if value is None:
                self.misses += 1
            else:
                self.hits += 1
        return value

    def peek(self, key, default=None):
        """The value for ``key`` without counting a hit or a miss."""
        return self._data.get(key, default)

    def __len__(self):
        return len(self._data)

    def __contains__(self, key):
        return key in self._data

    def clear(self):
        """Forget every entry and drop the slabs (the memory goes back to the system once
        nothing refers to an entry any more)."""
        with self._lock:
            self._data.clear()
            self._slab, self._top = np.empty(0, np.uint8), 0
            self.nbytes = self.mapped = 0

    def stats(self) -> dict:
        """``hits``, ``misses``, ``hit_rate`` (hits / lookups, None before any),
        ``not_admitted`` (misses that found the cache full), ``evictions`` (0), ``bytes``
        (pixels stored), ``mapped`` (memory held), ``items``, ``capacity``."""
        looked = self.hits + self.misses
        return {"hits": self.hits, "misses": self.misses,
                "hit_rate": self.hits / looked if looked else None,
                "not_admitted": self.not_admitted, "evictions": 0, "bytes": self.nbytes,
                "mapped": self.mapped, "items": len(self._data), "capacity": self.capacity}
