"""The fetch pool: network concurrency for remote shards, apart from the decode threads.

One :class:`FetchPool` per process (:func:`fetch_pool`, created on first use, and again in
a forked child: never shared over ``fork``), with up to ``max_connections`` threads, each
holding one connection at a time. An object is fetched in *parts* of ``part_bytes``: the
first request (from byte 0) learns the object's size from its own response and the rest is
asked for with ranged requests, fetched concurrently, so one large shard arrives at several
connections' speed and nothing is requested twice (no size probe). A file fetch (the shard
cache's) whose size this process saw before (:func:`~turboloader.io.remote.seen_stat`: the
count's reads and ``stat`` requests record it) asks for every part at once, each a bounded
ranged request; one its stream reads first (order 0) or that a reader waits for is cut into
parts of ``part_bytes / 4`` (the whole shard is needed before its first sample), and the
part 0 of a file fetch of unknown size keeps ``part_bytes / 4``. A buffered object its
stream reads first with nothing of it fetched ahead (a pass's cold start), whose size is
known the same way, is asked for at once too, its first ``part_bytes`` in parts of
``part_bytes / 4`` and the rest in whole parts: the reader reads bytes as they arrive, so
its first batch comes at several connections' rate, not one's. The parts of those objects
each get a connection of their own while they run: a file fetch's count within ``K`` (see
below), a first object's come on top of ``K`` (up to ``max_connections``), so the next
shards' requests start beside them. Each part is read with
:func:`turboloader.io.remote.open_remote`'s retrying reader at the part's offset: retries,
resumption and the check that a resumed answer starts where asked are its; a part whose
answer reports another total size than the first part's is a
:class:`~turboloader.errors.RemoteShardError` (the object changed while being read).

Two kinds of object:

* **Buffered** (streamed shards without a shard cache): :meth:`FetchPool.plan` names the
  shards a stream will read, in order; the pool fetches them ahead into memory, in that
  order across the process's streams, and :meth:`FetchPool.open` hands the reader a file
  object over the bytes (waiting only for bytes not fetched yet: a part is readable while
  it arrives). Memory: parts are allocated when their request starts and released as the
  reader passes them; the parts fetched ahead of the readers hold at most
  ``buffer_bytes``, and each open reader adds the one part it is in (a stream has a reader
  open on every shard of its mixing window: ``mix_shards``, 16 by default; counted within
  the bound, those parts left no room to read ahead once they filled it), so the pool's
  buffers stay below ``buffer_bytes + readers * part_bytes`` (plus ``connections * 1 MiB``
  of socket reads in flight). A part's buffer, once its fetch is done and the reader has
  passed it, is kept for a later part (buffers come in two size classes, ``part_bytes / 4``
  and ``part_bytes``): a fresh buffer costs a page fault per 4 KiB when first written,
  taken from the decode threads' CPU (anonymous memory, faulted in only where bytes are
  written: a shard's last, shorter part does not touch its buffer's tail). Kept buffers
  count within ``buffer_bytes`` (they fill only what the parts in use leave of it; a part
  0 still waiting for its answer's size does not push them out), and a part its reader
  finished before its fetch ended leaves its buffer when the fetch ends.
* **To a file** (:meth:`FetchPool.fetch_to`, the node shard cache's downloads): parts are
  written at their offsets with ``pwrite`` as they arrive; nothing is buffered. Their parts
  start in the ``order`` the caller gives (where its reader needs the object), each
  object's parts in turn, so the object needed first completes first.

How many connections: ``K`` threads fetch at once, sized from the bandwidth needed, not from
the number of readers: the rate the readers consume (bytes per second, measured) over the
rate one connection delivers (measured per request, latency included), with 50% headroom,
between 1 and ``max_connections``; while a reader waits for bytes the pool adds connections
(half again as many) until it stops waiting or reaches ``max_connections``. File fetches
the shard cache asked for at once get at least a connection per part in progress (up to
``max_connections``); the parts of a pass's first objects (above) get a connection each
beyond that. :meth:`FetchPool.stats` reports ``K``.

Configuration (environment, read when the pool is created): ``TURBOLOADER_FETCH_CONNECTIONS``
(``max_connections``, default 16), ``TURBOLOADER_FETCH_BUFFER`` (``buffer_bytes``, default
``"256MiB"``), ``TURBOLOADER_FETCH_PART`` (``part_bytes``, default ``"8MiB"``).
"""

from __future__ import annotations

import collections
import io
import math
import mmap
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from turboloader.errors import RemoteShardError
from turboloader.io.remote import _CHUNK, _RetryingReader, redact, seen_stat
from turboloader.io.sizes import parse_size

__all__ = ["FetchPool", "fetch_pool"]

_READ = 256 << 10  # bytes per socket read into a part
_FIRST_SPLIT = 4  # an object read first is fetched in parts this much smaller (see _stride)


def _new_buffer(size):
    """A fresh part buffer of ``size`` bytes: anonymous memory, each page faulted in when
    the fetched bytes are first written into it. (A ``bytearray`` zero-fills all of it
    first: every page faulted at once by the fill, the tail past a shard's last, shorter
    part too, and the fill's own pass over the bytes.) Private: a forked child (whose pool
    is its own) shares none of it."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)


class _Object:
    """One remote object being fetched: its parts, their bytes (buffered) or a file (sink)."""

    def __init__(self, pool, url, *, key=None, pos=0, sink=None, on_size=None, on_done=None):
        self.pool, self.url = pool, url
        self.key, self.pos = key, pos  # the plan it belongs to and its place there
        self.seq = pool._seq = pool._seq + 1
        pool.counters["objects"] += 1
        self.retry = (pool.retries, pool.backoff, pool.timeout)
        self.sink, self.on_size, self.on_done = sink, on_size, on_done
        self.size = None
        self.parts = [_Part(self, 0, 0, None)]
        self.opened = False  # a reader took it: its parts come first
        self.cancelled = False
        self.error = None  # set when the object cannot be fetched (before its size is known)
        self.first_error = None  # a file fetch: the first part that failed
        self.left = 1  # parts not finished (sink: on_done runs when it reaches 0)
        self.read_part = 0  # the part its reader is in (outside the budget: FetchPool._held)
        self.kept_until = 0.0  # kept from an ended plan (see FetchPool.forget): until then
        self.known = False  # its size was known before its first request (every part ranged)
        self.sizing = threading.Lock()  # a known-size file fetch: on_size runs once, first
        self.first = False  # read first by its stream, or waited for: finer parts (_stride)
        # its parts each get a connection (_limit): a file fetch's, and a buffered object
        # read first whose size is known (_start)
        self.eager = sink is not None


class _Part:
    def __init__(self, obj, index, start, length):
        self.obj, self.index, self.start, self.length = obj, index, start, length
        self.buf = None  # buffered objects: the bytes, allocated when the request starts
        self.filled = 0
        self.state = "pending"  # pending -> running -> done
        self.error = None
        self.reserved = 0  # bytes counted against the pool's buffer
        self.waiters = 0  # readers waiting for its bytes (see FetchPool._filled)
        self.late = None  # its buffer, released while its fetch still ran: spare at the end


class FetchPool:
    """A process's connections to remote stores (see the module docstring).

    Args:
        max_connections: the most requests in flight at once (threads).
        buffer_bytes: bytes fetched ahead of the readers, at most (int or ``"256MiB"``).
        part_bytes: bytes per request; an object larger than this is fetched in ranged
            parts, concurrently.
        retries, backoff, timeout: of each request, as :func:`~turboloader.io.remote.open_remote`
            (``timeout`` None: its default).
    """

    def __init__(self, *, max_connections: int = 16, buffer_bytes: int | str = "256MiB",
                 part_bytes: int | str = "8MiB", retries: int = 5, backoff: float = 0.25,
                 timeout: float | None = None):
        self.max_connections = int(max_connections)
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        self.buffer_bytes = parse_size(buffer_bytes)
        self.part_bytes = max(_READ, parse_size(part_bytes))
        self.retries, self.backoff, self.timeout = int(retries), float(backoff), timeout
        self.pid = os.getpid()
        # reentrant: a reader's close() can run inside the lock when the garbage collector
        # finalizes an abandoned shard stream (e.g. while _dispatch starts a thread)
        self._lock = threading.RLock()
        # two conditions on the one lock: idle connection threads wait for work (woken one
        # by one, as many as there are parts to start), readers wait for bytes; a part's
        # progress wakes only the readers, never the idle threads
        self._work = threading.Condition(self._lock)
        self._bytes = threading.Condition(self._lock)
        self._pending = []  # parts waiting for a connection
        self._objects = {}  # url -> [buffered _Object] planned, not yet opened
        self._plans = {}  # key -> {"urls": [...], "end": i (next_pass from), "next": i, "taken": i}
        self._orphans = {}  # lineage -> [buffered _Object] kept from an ended plan, in order
        self._heirs = {}  # key -> orphans its plan (being made) may take over
        self.keep_s = 30.0
        self._threads = 0  # connection threads alive
        self._running = 0  # of them, those fetching or about to (at most K)
        self._in_flight = 0  # requests being made now
        self._idle = 0  # of them, those waiting for work
        self._wakeups = 0  # idle threads _dispatch has woken (and counted as running)
        self._seq = 0
        self._reserved = 0  # bytes of buffered parts allocated and not yet released
        self._unheld = 0  # of them, reserved by parts started without a buffer yet (part 0)
        # part buffers released whole (their fetch done, the reader past them or cancelled):
        # reused by later parts, as fresh ones cost a page fault per 4 KiB when first written
        # (and a zero fill); they hold at most buffer_bytes - _reserved (see _spare_trim)
        self._spare = []
        self._closing = collections.deque()  # objects whose readers left them to be cancelled
        self._spare_bytes = 0
        self._readers = set()  # buffered objects a reader has opened and not closed (_held)
        self._eager = 0  # parts of eager objects not finished (each gets a connection: _limit)
        self._eager_buf = 0  # of them, those of buffered objects (a pass's first: beyond K)
        self.k = min(4, self.max_connections)  # connections wanted now
        # measurements
        self._conn_rate = None  # bytes/s one request delivers (EWMA)
        self._consumed = 0  # bytes readers took (buffered) or were handed (files)
        self._window = (time.monotonic(), 0)  # (since, consumed then)
        self._demand = 0.0
        self._starved = False  # a reader waited for bytes since the last adjustment
        self.counters = {"requests": 0, "bytes_fetched": 0, "bytes_ahead": 0, "waits": 0,
                         "wait_s": 0.0, "peak_connections": 0, "peak_buffered": 0,
                         "objects": 0, "cpu_s": 0.0, "new_buffers": 0,
                         "new_buffer_bytes": 0}

    # -- public ---------------------------------------------------------------------------

    def plan(self, key: Hashable, urls: Iterable[str], *, next_pass: Iterable[str] = (),
             lineage: Hashable = None) -> None:
        """Read-ahead for a stream: the remote ``urls`` it will open (with :meth:`open`), in
        order. Replaces ``key``'s previous plan; its objects fetched ahead and not opened are
        dropped. The pool fetches a plan's objects while the bytes ahead of all readers fit
        in ``buffer_bytes``, earlier plan positions first across plans.

        ``next_pass``: URLs read ahead after ``urls`` for the stream's next pass (its next
        epoch's first shards), which this pass does not open: they are kept for the next
        plan of ``lineage`` (see :meth:`forget`), and an :meth:`open` of their URL gets an
        object planned for a pass being read first (another stream's, or this one's).

        ``lineage``: the plan continues the plans of that lineage that ended with
        ``forget(key, keep_for=lineage)`` (the same worker stream's previous epoch, whose
        plan named this epoch's first shards): their objects fetched ahead and not opened
        are taken over, in order, where this plan names the same URL; the rest are dropped."""
        with self._lock:
            self._drop_plan(key)
            urls = list(urls)
            self._plans[key] = {"urls": urls + list(next_pass), "end": len(urls), "next": 0,
                                "taken": 0}
            self._heirs[key] = self._orphans.pop(lineage, []) if lineage is not None else []
            self._advance(key)
            for obj in self._heirs.pop(key):  # not named by the new plan
                self._drop_object(obj)
            self._expire()
            self._dispatch()

    def forget(self, key: Hashable, *, keep_for: Hashable = None) -> None:
        """End ``key``'s plan: drop what it fetched ahead that was not opened, or with
        ``keep_for`` (a lineage), keep it for the next :meth:`plan` of that lineage (for
        at most ``keep_s`` seconds; it still counts against ``buffer_bytes``)."""
        with self._lock:
            if keep_for is not None and self._plans.pop(key, None) is not None:
                kept = [obj for objs in self._objects.values() for obj in objs if obj.key == key]
                kept.sort(key=lambda obj: obj.pos)
                for obj in kept:
                    obj.key = ("kept", keep_for)
                    obj.kept_until = time.monotonic() + self.keep_s
                self._drop_lineage(keep_for)
                self._orphans[keep_for] = kept
            else:
                self._drop_plan(key)
            self._dispatch()

    def open(self, url: str, /) -> io.BufferedReader:
        """A buffered binary file reading the remote object ``url`` from byte 0: the
        bytes a plan fetched ahead, else fetched now. Errors are those of
        :func:`~turboloader.io.remote.open_remote`, raised when the bytes are read."""
        with self._lock:
            objs = self._objects.get(url)
            obj = objs.pop(min(range(len(objs)), key=lambda i: self._due(objs[i]))) \
                if objs else None
            if objs == []:
                del self._objects[url]
            if obj is None:
                obj = _Object(self, url)
                obj.first = True
                self._start(obj)
            else:
                plan = self._plans.get(obj.key)
                if plan is not None:
                    if obj.pos < plan["end"]:  # (a next pass's read-ahead: not this pass's)
                        plan["taken"] = max(plan["taken"], obj.pos + 1)
                        self._advance(obj.key)
                else:  # kept from an ended plan: a reader has it now, no plan takes it over
                    kept = self._orphans.get(obj.key[1]) if isinstance(obj.key, tuple) else None
                    if kept is not None and obj in kept:
                        kept.remove(obj)
            obj.opened = True
            self._readers.add(obj)
            self._dispatch()
        return io.BufferedReader(_ObjectReader(obj), buffer_size=_CHUNK)

    def fetch_to(self, url: str, fd: int, /, *, on_size: Callable[[int | None], None],
                 on_done: Callable[[BaseException | None], None], urgent: bool = False,
                 order: int = 0, retries: int | None = None, backoff: float | None = None,
                 timeout: float | None = None) -> None:
        """Fetch ``url`` into the file descriptor ``fd`` (parts written at their offsets),
        without waiting. ``on_size(size)`` runs once the first response tells the size
        (``None``: unknown), before any byte is written (an exception it raises fails the
        fetch); ``on_done(error)`` runs once every part is written (``error`` None) or the
        fetch failed, in a pool thread. ``urgent``: a reader waits for it (comes first).
        ``order``: where its reader will need it (e.g. its place in a stream's reading
        order): the parts of file fetches not urgent start lowest ``order`` first, a
        fetch's parts in order, so the shard needed next is complete first.
        ``retries``, ``backoff``, ``timeout``: this fetch's, instead of the pool's."""
        with self._lock:
            obj = _Object(self, url, pos=int(order), sink=fd, on_size=on_size, on_done=on_done)
            obj.retry = (self.retries if retries is None else int(retries),
                         self.backoff if backoff is None else float(backoff),
                         self.timeout if timeout is None else timeout)
            obj.opened = bool(urgent)
            obj.first = obj.opened or obj.pos == 0
            self._start(obj)
            self._dispatch()

    def hurry(self, fd: int, /) -> None:
        """A reader now waits for the file fetch into ``fd``: its parts come first."""
        with self._lock:
            for part in self._pending:
                if part.obj.sink == fd:
                    part.obj.opened = True
            self._starved = True
            self._adjust()
            self._dispatch()

    def handed(self, nbytes: int, waited_s: float = 0.0) -> None:
        """A reader took ``nbytes`` fetched to a file (for the demand measurement)."""
        with self._lock:
            self._consumed += nbytes
            if waited_s > 0:
                self.counters["waits"] += 1
                self.counters["wait_s"] += waited_s

    def stats(self) -> dict:
        """Counters: ``requests``, ``bytes_fetched``, ``bytes_ahead`` (fetched before a
        reader asked for them), ``waits`` / ``wait_s`` (reads that waited for bytes, and
        for how long), ``peak_connections``, ``peak_buffered`` (bytes), ``cpu_s`` (CPU
        time of the connection threads' requests), ``new_buffers`` / ``new_buffer_bytes``
        (part buffers allocated rather than reused: each page of one is faulted in when
        first written); and now:
        ``connections`` (K), ``in_flight`` (requests being made), ``pending`` (requests
        queued, not started: waiting for a connection or for room in the buffer; each is
        pending, then in flight, then done, so nothing is left to fetch when both are 0,
        while ``in_flight`` alone is 0 between two requests of a connection),
        ``connection_rate`` (bytes/s per request, measured),
        ``demand`` (bytes/s the readers consume, measured), ``buffered``."""
        with self._lock:
            out: dict[str, Any] = dict(self.counters)
            out.update(connections=self.k, in_flight=self._in_flight, pending=len(self._pending),
                       connection_rate=self._conn_rate,
                       demand=self._demand, buffered=self._reserved,
                       max_connections=self.max_connections, buffer_bytes=self.buffer_bytes,
                       part_bytes=self.part_bytes)
            return out

    # -- scheduling (lock held) -------------------------------------------------------------

    def _drop_plan(self, key):
        if self._plans.pop(key, None) is None:
            return
        for url in list(self._objects):
            keep = []
            for obj in self._objects[url]:
                if obj.key == key:
                    self._cancel(obj)
                else:
                    keep.append(obj)
            if keep:
                self._objects[url] = keep
            else:
                del self._objects[url]

    def _advance(self, key):
        """Create ``key``'s next planned objects, a bounded number ahead of its reader (or
        take over the object its lineage's previous plan fetched for the same URL)."""
        plan = self._plans[key]
        urls = plan["urls"]
        heirs = self._heirs.get(key)
        ahead = max(2, self.buffer_bytes // self.part_bytes)
        while plan["next"] < len(urls) and plan["next"] < plan["taken"] + ahead:
            url, pos = urls[plan["next"]], plan["next"]
            plan["next"] += 1
            heir = next((i for i, h in enumerate(heirs) if h.url == url), None) if heirs else None
            if heir is not None:
                obj = heirs.pop(heir)
                obj.key, obj.pos = key, pos
                continue
            obj = _Object(self, url, key=key, pos=pos)
            obj.first = pos == plan["taken"]  # its reader opens it next: nothing of it ahead
            self._objects.setdefault(obj.url, []).append(obj)
            self._start(obj)

    def _drop_object(self, obj):
        if obj.opened:  # a reader has it: its parts go as it reads or closes
            return
        objs = self._objects.get(obj.url, [])
        if obj in objs:
            objs.remove(obj)
            if not objs:
                del self._objects[obj.url]
        self._cancel(obj)

    def _drop_lineage(self, lineage):
        for obj in self._orphans.pop(lineage, []):
            self._drop_object(obj)

    def _expire(self):
        """Drop kept objects no plan took over in time."""
        now = time.monotonic()
        for lineage, objs in list(self._orphans.items()):
            if objs and objs[0].kept_until < now:
                self._drop_lineage(lineage)

    def _start(self, obj):
        """Queue ``obj``'s requests. A file fetch, or a buffered object its reader opens
        next (``first``), whose size is known from a response this process read before
        (:func:`~turboloader.io.remote.seen_stat`: the count, a ``stat``, an earlier pass):
        every part at once, each a bounded range (no request waits for another's answer; a
        part whose answer gives another total size is an error, as below), each part on a
        connection of its own (``eager``: :meth:`_limit`). Else part 0, from byte 0 and
        open-ended: its answer gives the size, then :meth:`_first` queues the rest."""
        # buffered objects read later keep part 0 open-ended: through bench_remote's proxy
        # on a loaded 2-core VM, streamed objects all asked for at once, or in finer parts,
        # reached a stream's first 3.5 MB later (more requests at once slowed the ones read
        # first; s3-cold and s7-fault, benchmarks/results/remote.md)
        st = seen_stat(obj.url) if obj.sink is not None or obj.first else None
        if st is not None and st.size:
            obj.size, obj.known, obj.eager = st.size, True, True
            obj.parts = [_Part(obj, i, s, n) for i, (s, n) in enumerate(self._cuts(obj))]
            obj.left = len(obj.parts)
        if obj.eager:
            self._eager += len(obj.parts)
            if obj.sink is None:
                self._eager_buf += len(obj.parts)
        for part in obj.parts:
            self._queue(part)

    def _cuts(self, obj):
        """``(start, length)`` of the parts of ``obj``, its size known: strides of
        :meth:`_stride`; a buffered object read first has only its first ``part_bytes``
        in parts of ``part_bytes / 4``, the rest in whole parts (its reader reads the bytes
        as they arrive: the first ones come over several connections at once, and a whole
        part asked for at the same time is in before the reader is past the small ones)."""
        size, stride = obj.size, self._stride(obj)
        fine = size if obj.sink is not None else min(size, self.part_bytes)
        cuts = [(s, min(stride, fine - s)) for s in range(0, fine, stride)]
        return cuts + [(s, min(self.part_bytes, size - s))
                       for s in range(fine, size, self.part_bytes)]

    def _stride(self, obj):
        """Bytes per part of ``obj``: ``part_bytes``, or ``part_bytes / 4`` (at least one
        socket read) for a file fetch read first (a stream's first shard, or one a reader
        waits for): the whole shard must be here before it is read, and it comes over
        several connections at once, so a pass's first batch does not wait for one
        connection's rate; and for a buffered object read first whose size was known
        before its first request (its first ``part_bytes`` only: :meth:`_cuts`)."""
        fine = obj.first and (obj.sink is not None or obj.known)
        return max(_READ, self.part_bytes // _FIRST_SPLIT) if fine else self.part_bytes

    def _queue(self, part):
        self._pending.append(part)

    def _cancel(self, obj):
        obj.cancelled = True
        self._readers.discard(obj)
        for part in obj.parts:
            self._release(part)
        keep = [p for p in self._pending if p.obj is not obj]
        obj.left -= len(self._pending) - len(keep)  # never started: finished now
        if obj.eager:
            self._eager -= len(self._pending) - len(keep)
            if obj.sink is None:
                self._eager_buf -= len(self._pending) - len(keep)
        self._pending = keep

    def _release(self, part):
        buf, part.buf = part.buf, None
        if part.reserved:
            self._reserved -= part.reserved
            if buf is None:
                self._unheld -= part.reserved
            part.reserved = 0
        # a buffer no one writes or reads any more: its fetch is over (a running part's
        # thread may still write into it) and readers copy out under the lock
        if buf is not None and part.length is not None:
            if part.state == "done":
                self._spare_add(buf)
            else:  # its thread may still write (its last bytes read, its end not counted yet)
                part.late = buf

    def _spare_add(self, buf):
        self._spare.append(buf)
        self._spare_bytes += len(buf)
        self._spare_trim()

    def _spare_trim(self):
        """Drop spare buffers (the largest first) until they and the parts' buffers together
        hold at most the pool's bound, ``buffer_bytes`` and a part per open reader (bounding
        them by the parts the readers hold at the moment dropped a spare whenever a reader
        passed into a part not fetched yet, and the next part then faulted in a fresh one:
        344 MB of fresh buffers in a 669 MB epoch over 48 shards, 128 MB with this bound).
        A part started without its buffer yet (a part 0, sized by its answer) does not
        count: a spare is what serves it, and dropping one for it would make it allocate a
        fresh one."""
        spare = self._spare
        room = self.buffer_bytes + len(self._readers) * self.part_bytes
        while spare and self._reserved - self._unheld + self._spare_bytes > room:
            big = max(range(len(spare)), key=lambda i: len(spare[i]))
            self._spare_bytes -= len(spare.pop(big))

    def _part_buffer(self, part, n):
        """A buffer of at least ``n`` bytes for ``part``, counted in ``part.reserved`` at its
        real size: a spare one of ``n``'s size class (``part_bytes / 4`` or ``part_bytes``,
        the two strides, so that a shard's last, shorter part leaves a buffer the next
        shard's parts can use; ``n`` under half the smaller class is its own class), else a
        new one of that class (:func:`_new_buffer`: its pages are faulted in only where the
        part writes, not past a shorter part's bytes). Its bytes past what the part fills
        are stale: readers read only up to ``part.filled``."""
        quarter = max(_READ, self.part_bytes // _FIRST_SPLIT)
        # (an object under half a class is a buffer of its own size: few pages, no waste)
        size = (n if n < quarter // 2 else quarter if n <= quarter
                else self.part_bytes if n <= self.part_bytes else n)
        if part.buf is None:
            self._unheld -= part.reserved
        spare, best = self._spare, -1
        for i, b in enumerate(spare):
            if size <= len(b) <= 2 * size and (best < 0 or len(b) < len(spare[best])):
                best = i
        if best >= 0:
            buf = spare.pop(best)
            self._spare_bytes -= len(buf)
        else:
            buf = _new_buffer(size)
            self.counters["new_buffers"] += 1
            self.counters["new_buffer_bytes"] += size
        self._reserved += len(buf) - part.reserved
        part.reserved = len(buf)
        self._spare_trim()
        part.buf = buf

    def _due(self, obj):
        """Which of the objects planned for one URL an opener takes: the one its plan will
        open soonest (streams open their plan's objects in order; two streams may plan the
        same shard, e.g. one for this epoch and another for the next), those read ahead for
        a next pass (``next_pass``) and kept ones last: a stream whose pass is read has its
        next pass's first shard next in its plan, as the stream opening it for its pass
        has, and taking it would leave the opener's own object unopened and the next pass
        without its read-ahead."""
        plan = self._plans.get(obj.key)
        if plan is None or obj.pos >= plan["end"]:
            return (2, obj.pos, obj.seq)
        ahead = obj.pos - plan["taken"]
        return (0 if ahead >= 0 else 1, abs(ahead), obj.seq)

    def _rank(self, part):
        obj = part.obj
        if obj.opened:
            return (0, obj.seq, part.index)
        plan = self._plans.get(obj.key)
        if plan is None:  # kept from an ended plan: after every live plan's reads
            return (2, obj.pos, part.index, obj.seq)
        return (1, obj.pos - plan["taken"], part.index, obj.seq)

    def _held(self):
        """Bytes of the parts the open readers are in: outside ``buffer_bytes``, which
        bounds the bytes fetched ahead of the readers. A stream reads the shards of its
        mixing window at once (``mix_shards``, 16 by default), each reader inside one part,
        so counting those parts would leave no room to fetch ahead once a window's parts
        exceed the bound (two streams of 16 open 14 MB shards hold 34 parts of 8 MiB: the
        readers then waited for every shard's bytes on one connection each)."""
        return sum(o.parts[o.read_part].reserved for o in self._readers
                   if o.read_part < len(o.parts))

    def _startable(self, part, held):
        obj = part.obj
        if obj.sink is not None:
            return True
        need = part.length if part.length is not None else self.part_bytes
        return (self._reserved - held + need <= self.buffer_bytes or self._reserved == 0
                or (obj.opened and part.index == obj.read_part))

    def _next_part(self):
        best, held = None, self._held()
        for part in self._pending:
            if self._startable(part, held) and (best is None or self._rank(part) < self._rank(best)):
                best = part
        if best is not None:
            self._pending.remove(best)
            best.state = "running"
            self._in_flight += 1
            if best.obj.sink is None:
                best.reserved = best.length if best.length is not None else self.part_bytes
                self._reserved += best.reserved
                self._unheld += best.reserved  # until its buffer is given (_part_buffer)
                if best.length is not None:  # a ranged part (part 0 allocates in _first)
                    self._part_buffer(best, best.length)
                self.counters["peak_buffered"] = max(self.counters["peak_buffered"],
                                                     self._reserved)
        return best

    def _limit(self):
        """Requests at once: K, or one per part in progress of the file fetches (the shard
        cache asked for those downloads at once) where they are more, and on top of that
        one per part in progress of a pass's first objects of known size (their first bytes,
        :meth:`_start`): those do not take the K connections that fetch the stream's next
        shards, so a pass's second shards are asked for at its start, not once its first
        ones are in (through bench_remote's proxy at 100 ms / 10 MB/s a second shard's
        8 MiB part 0 takes about a second, about what a stream takes to read its first
        shard: the readers waited for it at a cold pass start)."""
        files = self._eager - self._eager_buf
        return min(self.max_connections,
                   max(self.k, min(self.max_connections, files)) + self._eager_buf)

    def _dispatch(self):
        """Wake idle threads, or start new ones, for the startable parts, up to K at once."""
        while self._closing:  # readers closed while the lock was held (_ObjectReader.close)
            self._cancel(self._closing.popleft())
        held = self._held()
        want = min(self._limit() - self._running,
                   sum(1 for p in self._pending if self._startable(p, held)))
        if want <= 0:
            return
        wake = min(want, self._idle - self._wakeups)
        if wake > 0:
            self._wakeups += wake
            self._running += wake
            self._work.notify(wake)
        for _ in range(want - max(wake, 0)):
            self._threads += 1
            self._running += 1
            threading.Thread(target=self._worker, name="turboloader-fetch", daemon=True).start()
        self.counters["peak_connections"] = max(self.counters["peak_connections"],
                                                self._running)
        while self._closing:  # (closed in a thread being started just now)
            self._cancel(self._closing.popleft())

    def _adjust(self):
        """K from the measured demand and connection rate (see the module docstring)."""
        now = time.monotonic()
        since, consumed = self._window
        if now - since < 0.25:
            return
        rate = (self._consumed - consumed) / (now - since)
        self._demand = rate if not self._demand else 0.5 * self._demand + 0.5 * rate
        self._window = (now, self._consumed)
        if self._starved:  # a reader waited: more connections, half again as many
            self._starved = False
            self.k = min(self.max_connections, self.k + max(1, self.k // 2))
        elif self._conn_rate and self._demand:
            need = math.ceil(1.5 * self._demand / self._conn_rate)
            if need < self.k:
                self.k = max(1, self.k - 1)  # down one at a time
            else:
                self.k = min(self.max_connections, need)

    # -- the connection threads -------------------------------------------------------------

    def _worker(self):
        """A connection thread: runs while it is one of the K running (``_running`` counts
        it), then waits idle for a wake-up from :meth:`_dispatch`, and ends after 30 s
        idle."""
        lock = self._lock
        while True:
            with lock:
                part = self._next_part() if self._running <= self._limit() else None
                if part is None:
                    self._running -= 1
                    self._idle += 1
                    deadline = time.monotonic() + 30.0
                    while not self._wakeups:
                        if not self._work.wait(timeout=max(0.0, deadline - time.monotonic())) \
                                and not self._wakeups and time.monotonic() >= deadline:
                            self._idle -= 1
                            self._threads -= 1
                            self._expire()
                            return
                    self._wakeups -= 1  # _dispatch counted this thread as running
                    self._idle -= 1
                    continue
            self._fetch(part)

    def _fetch(self, part):
        obj = part.obj
        retries, backoff, timeout = obj.retry
        # part 0 of an object of unknown size is open-ended (its answer gives the size);
        # the others ask for their bytes only (a bounded Range: the server sends nothing
        # past the part, and the connection is kept for the next request)
        ranged = (part.index or obj.known) and part.length is not None
        end = part.start + part.length if ranged else None
        reader = _RetryingReader(obj.url, retries=retries, backoff=backoff, timeout=timeout,
                                 start=part.start, end=end)
        t0, cpu0 = time.monotonic(), time.thread_time()
        got = 0
        error = None
        try:
            if obj.known and obj.sink is not None and obj.on_size is not None:
                self._sized(obj)
            if part.index == 0 and not obj.known:
                got = self._first(part, reader)
            else:
                got = self._rest(part, reader)
        except BaseException as exc:  # noqa: BLE001 - handed to whoever reads the object
            error = exc
        finally:
            reader.close()
        dt = time.monotonic() - t0
        done_cb = None
        with self._lock:
            self.counters["requests"] += 1
            self.counters["cpu_s"] += time.thread_time() - cpu0
            self.counters["bytes_fetched"] += got
            if got >= _READ and error is None:
                rate = got / max(dt, 1e-6)
                self._conn_rate = rate if self._conn_rate is None else \
                    0.7 * self._conn_rate + 0.3 * rate
            part.state = "done"
            self._in_flight -= 1
            if obj.eager:
                self._eager -= 1
                if obj.sink is None:
                    self._eager_buf -= 1
            if part.late is not None:  # released by its reader while this thread wrote
                buf, part.late = part.late, None
                self._spare_add(buf)
            if error is not None:
                part.error = error
                if part.index == 0 and obj.size is None:
                    obj.error = error
            if obj.sink is not None:
                # on_done runs once no part runs any more: the caller closes the file then
                obj.left -= 1
                if error is not None and obj.first_error is None:
                    obj.first_error = error
                    self._cancel(obj)
                if obj.left == 0 and obj.on_done is not None:
                    done_cb, obj.on_done = obj.on_done, None
                    error = obj.first_error
            self._adjust()
            self._dispatch()
            self._bytes.notify_all()
        if done_cb is not None:
            done_cb(error)

    def _sized(self, obj):
        """A file fetch of known size: ``on_size`` runs once, before any part writes (the
        other parts wait for it)."""
        with obj.sizing:
            if obj.on_size is not None:
                on_size, obj.on_size = obj.on_size, None
                on_size(obj.size)

    def _first(self, part, reader):
        """Part 0 of an object of unknown size: from byte 0, open-ended; its response gives
        the size, then the other parts queue. A file fetch's part 0 keeps ``part_bytes / 4``
        of the answer (its connection is soon free for the parts needed first)."""
        obj = part.obj
        first = bytearray(_READ)
        n = reader.readinto(memoryview(first))
        size = reader.size
        if obj.cancelled:
            return n
        if obj.on_size is not None:
            obj.on_size(size)
        with self._lock:
            if obj.cancelled:  # (cancelled since the check above: queue nothing for it)
                return n
            obj.size = size
            # a file fetch's part 0 stops after a quarter part: its connection is soon free
            # for the parts needed first (this shard's or another's), then the rest in strides
            stride = self._stride(obj)
            head = max(_READ, self.part_bytes // _FIRST_SPLIT) if obj.sink is not None else stride
            if size is None or size <= head:
                part.length = size
            else:
                part.length = head
                starts = range(head, size, stride)
                for i, s in enumerate(starts, 1):
                    p = _Part(obj, i, s, min(stride, size - s))
                    obj.parts.append(p)
                    self._queue(p)
                obj.left += len(starts)
                if obj.eager:
                    self._eager += len(starts)
                self._dispatch()
            if obj.sink is None:
                if part.length is not None:
                    self._part_buffer(part, part.length)
                else:  # open-ended: grown as it arrives (_rest)
                    want = max(n, _READ)
                    self._unheld -= part.reserved
                    self._reserved += want - part.reserved
                    part.reserved = want
                    part.buf = bytearray(want)
                part.buf[:n] = first[:n]
            self._bytes.notify_all()
        if obj.sink is not None:
            os.pwrite(obj.sink, memoryview(first)[:n], 0)
        self._filled(part, n)
        return n + self._rest(part, reader, n)

    def _rest(self, part, reader, done=0):
        obj = part.obj
        got = done
        chunk = bytearray(_READ) if obj.sink is not None else None
        whole = None  # a part of known length is written without the lock: readers see
        # ``filled`` grow and are woken only when they wait for it (see _filled)
        if obj.sink is None and part.length is not None:
            with self._lock:
                if part.buf is None:
                    return 0
                whole = memoryview(part.buf)
        while part.length is None or got < part.length:
            if obj.cancelled:
                return got - done
            want = _READ if part.length is None else min(_READ, part.length - got)
            if whole is not None:
                n = reader.readinto(whole[got:got + want])
            elif obj.sink is None:
                with self._lock:
                    if part.buf is None:  # released (cancelled, or the reader closed)
                        return got - done
                    if part.length is None and len(part.buf) < got + want:
                        part.buf.extend(bytes(max(want, len(part.buf))))
                        self._reserved += len(part.buf) - part.reserved
                        part.reserved = len(part.buf)
                    view = memoryview(part.buf)[got:got + want]
                try:
                    n = reader.readinto(view)
                finally:
                    view.release()
            else:
                n = reader.readinto(memoryview(chunk)[:want])
                if n:
                    os.pwrite(obj.sink, memoryview(chunk)[:n], part.start + got)
            if (part.index or obj.known) and reader.size is not None and obj.size is not None \
                    and reader.size != obj.size:
                raise RemoteShardError(
                    f"{redact(obj.url)} is {reader.size} bytes now, {obj.size} when reading "
                    f"began: it changed while being read")
            if n == 0:
                if part.length is None:
                    with self._lock:
                        part.length = got
                        if obj.size is None:
                            obj.size = got
                    break
                raise RemoteShardError(
                    f"{redact(obj.url)}: the answer ended at byte {part.start + got}, "
                    f"{part.start + part.length} expected")
            got += n
            self._filled(part, got)
        return got - done

    def _filled(self, part, n):
        """``n`` bytes of ``part`` are in: readers waiting for them are woken. A reader
        counts itself in ``part.waiters`` before it looks at ``filled`` for the last time
        and waits, so a wake-up is never lost while the lock is not taken per chunk."""
        part.filled = n
        if part.waiters:
            with self._lock:
                self._bytes.notify_all()


class _ObjectReader(io.RawIOBase):
    """A reader's view of a buffered object: sequential, waiting only for bytes not
    fetched yet; parts are released as it passes them."""

    def __init__(self, obj):
        self.obj = obj
        self.pos = 0  # (the part it is in: obj.read_part)

    def readable(self):
        return True

    def readinto(self, buf):
        obj, pool = self.obj, self.obj.pool
        lock, cv = pool._lock, pool._bytes
        with lock:
            waited = None
            while True:
                if obj.error is not None:
                    raise obj.error
                if obj.size is not None and self.pos >= obj.size:
                    return 0
                if obj.read_part >= len(obj.parts):
                    if obj.size is None:
                        cv.wait()
                        continue
                    return 0
                part = obj.parts[obj.read_part]
                if part.error is not None:
                    raise part.error
                off = self.pos - part.start
                if part.length is not None and off >= part.length:
                    pool._release(part)
                    obj.read_part += 1
                    pool._dispatch()
                    continue
                if part.filled > off and part.buf is not None:
                    n = min(len(buf), part.filled - off)
                    with memoryview(part.buf) as src:
                        buf[:n] = src[off:off + n]
                    if waited is None:  # these bytes were there before the reader asked
                        pool.counters["bytes_ahead"] += n
                    self.pos += n
                    pool._consumed += n
                    return n
                if part.state == "done":
                    if part.length is None:
                        return 0
                    raise RemoteShardError(  # a part that ended without its bytes or an error
                        f"{redact(obj.url)}: the read of bytes {part.start}.."
                        f"{part.start + part.length} stopped at {part.start + part.filled}")
                # the reader waits for bytes (its part, obj.read_part, may pass the bound)
                if waited is None:
                    waited = time.monotonic()
                    pool.counters["waits"] += 1
                    pool._starved = True
                    pool._adjust()
                    pool._dispatch()
                part.waiters += 1
                try:
                    if part.filled <= off and part.state != "done":  # looked at once more
                        cv.wait(timeout=1.0)
                finally:
                    part.waiters -= 1
                if waited is not None:
                    now = time.monotonic()
                    pool.counters["wait_s"] += now - waited
                    waited = now

    def close(self):
        if not self.closed:
            pool = self.obj.pool
            # the garbage collector can close an abandoned shard stream in a thread being
            # started by _dispatch, whose starter holds the lock until that thread runs:
            # waiting for the lock there would hang both, so after a while the cancel is left
            # to the lock's holder (_dispatch ends by doing the ones left)
            if pool._lock.acquire(timeout=0.2):
                try:
                    pool._cancel(self.obj)
                    pool._dispatch()
                finally:
                    pool._lock.release()
            else:
                pool._closing.append(self.obj)
        super().close()


_pool = None
_pool_lock = threading.Lock()


def _reset_after_fork():
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def fetch_pool() -> FetchPool:
    """This process's :class:`FetchPool`, created on first use (in a forked child: its own,
    never the parent's), configured from the environment (see the module docstring)."""
    global _pool
    pool = _pool
    if pool is None or pool.pid != os.getpid():
        with _pool_lock:
            pool = _pool
            if pool is None or pool.pid != os.getpid():
                env = os.environ.get
                pool = _pool = FetchPool(
                    max_connections=int(env("TURBOLOADER_FETCH_CONNECTIONS", "16")),
                    buffer_bytes=env("TURBOLOADER_FETCH_BUFFER", "256MiB"),
                    part_bytes=env("TURBOLOADER_FETCH_PART", "8MiB"))
    return pool
