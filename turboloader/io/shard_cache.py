"""A node-local shard cache for remote shards.

:class:`ShardCache` keeps whole shards in a node-local directory, bounded in
bytes with least-recently-used eviction, shared by every rank and DataLoader worker of
the node that names the same directory: a shard is downloaded once per node (a per-shard
``flock`` makes the other processes wait for it), written to a temporary file and
renamed into place (readers never see a partial shard), and space is reserved before a
download under a directory lock so that the bound holds while several processes download
at once. Counters (hits, misses, bytes downloaded, evictions) are node-wide, kept in the
directory.

Downloads go through the process's fetch pool (:mod:`turboloader.io.fetch`): a shard larger
than a part is fetched by concurrent ranged requests written in place, and its size comes
from the first response (no probe request). :meth:`ShardCache.prefetch` downloads the next
shards of a reading process in reading order, ``prefetch`` shards at a time (the first
mixing window of a pass all at once, its parts started by their place in each stream's
reading order, so the shard needed first completes first; the dataset's first window
admits its shards one at a time, so a pass starts once its first shard is here); a reader
that needs a shard being downloaded waits for that download. A shard evicted by another
process between its download and its opening is downloaded again
(:func:`turboloader.io.shards.open_shard`).
"""

from __future__ import annotations

from typing import Any
import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import threading
import time
import warnings
from collections.abc import Iterable

from turboloader.errors import CacheTooSmallWarning, RemoteShardError
from turboloader.io.fetch import fetch_pool
from turboloader.io.files import replace_file
from turboloader.io.remote import is_remote, redact, url_path
from turboloader.io.sizes import parse_size

__all__ = ["ShardCache"]


@contextlib.contextmanager
def _flock(path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released by the kernel if this process dies
        yield
    finally:
        os.close(fd)


def _dead(tmp_name):
    """True for a ``.tmp-<pid>-...`` download whose process no longer exists (killed)."""
    try:
        pid = int(tmp_name.split("-")[1])
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (ValueError, IndexError, PermissionError):
        return False
    return False


#: a released shard's mtime is this minus the time of its release (see ShardCache.release):
#: before every shard in use (their mtime is their last use, now or earlier), the latest
#: released lowest (2**31 s: 2038; the marks are years before any real use time)
_RELEASED = float(2 ** 31)

#: the use times ShardCache.order gives a pass's shards, apart (see there)
_ORDER_STEP_NS = 50_000_000

#: the most ShardCache leaves free by default (a tenth of the file system up to this)
_MIN_FREE_MAX = 10 * 2 ** 30

_STAT_KEYS = ("hits", "misses", "bytes_downloaded", "evictions", "evicted_unread",
              "downloads_failed")
_warned = False  # CacheTooSmallWarning given in this process


class ShardCache:
    """A node-local directory of whole shards, LRU-bounded in bytes, shared safely by all
    processes of a node that use the same ``root``.

    Args:
        root: a directory on local disk (created if missing). Every rank and worker of a
            node should pass the same one; do not put it on a network file system
            (``flock`` semantics).
        max_bytes: the bound on the shards kept (int or ``"50GB"``), or None (the
            default): as much as ``root``'s file system has room for. Either way the cache
            never takes the file system below ``min_free`` free bytes (checkpoints and logs
            written beside it keep their room): a dataset that fits on the disk is kept
            whole, as MosaicML Streaming, webdataset's and Hugging Face's caches keep it,
            and one that does not is evicted from instead of filling the disk. A shard
            larger than the room is still downloaded (the reader needs it) and is the
            first evicted. Eviction: the shards a pass's readers are done with first, the
            latest first (:meth:`release`), then the least recently used, a pass's shards
            not read yet ordered by when it needs them (:meth:`order`).
        min_free: the bytes of ``root``'s file system the cache leaves free (int or
            ``"20GB"``); default the smaller of a tenth of the file system and 10 GiB. Free
            space is what an unprivileged process may use (``statvfs``'s ``f_bavail``),
            checked under the directory lock at each download's reservation (the bytes
            other downloads still have to write counted as used).
        prefetch: shards downloaded at once ahead of the one being read, per reading
            process (0: off); the first mixing window of a pass is asked for at once.
        retries, backoff, timeout: of each request (see :func:`open_remote`).

    The object is a picklable configuration; counters live in ``root/.stats.json``.

    Example:
        >>> cache = ShardCache("/local_nvme/shards", max_bytes="200GB", prefetch=2)  # doctest: +SKIP
        >>> ds = TarDataset("s3://bucket/train-{0000..0999}.tar", tf, shard_cache=cache)
        >>> cache.stats()
        {'hits': ..., 'misses': ..., 'bytes_downloaded': ..., 'bytes': ..., 'files': ...}
    """

    def __init__(self, root: Any, max_bytes: Any = None, *, min_free: Any = None,
                 prefetch: int = 2, retries: int = 5, backoff: float = 0.25,
                 timeout: float = 60.0) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.max_bytes = None if max_bytes is None else parse_size(max_bytes)
        if self.max_bytes is not None and self.max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes!r}")
        self.min_free = None if min_free is None else parse_size(min_free)
        if self.min_free is not None and self.min_free < 0:
            raise ValueError(f"min_free must be >= 0, got {min_free!r}")
        if int(prefetch) < 0:
            raise ValueError(f"prefetch must be >= 0, got {prefetch}")
        self.prefetch_count = int(prefetch)
        self.retries, self.backoff, self.timeout = int(retries), float(backoff), timeout
        os.makedirs(self.root, exist_ok=True)

    def __repr__(self):
        return (f"ShardCache({self.root!r}, max_bytes={self.max_bytes}, min_free={self.min_free}, "
                f"prefetch={self.prefetch_count})")

    # paths
    def path(self, url: str) -> str:
        """Where the shard of ``url`` is (or would be) cached."""
        digest = hashlib.sha256(url.encode()).hexdigest()[:32]
        base = os.path.basename(url_path(url))[-64:]
        return os.path.join(self.root, f"{digest}-{base}")

    def _dirlock(self):
        return _flock(os.path.join(self.root, ".lock"))

    def _entries(self):
        """[(mtime, size, path, unread, allocated)] of complete shards and in-flight
        reservations; ``unread``: a shard downloaded and not opened since (its access time
        is 0, as the download leaves it: see :meth:`_finish`); ``allocated``: the bytes of
        disk it takes now (a reservation is a sparse file its download fills)."""
        out = []
        with os.scandir(self.root) as it:
            for e in it:
                if e.name.startswith(".") and not e.name.startswith(".tmp-"):
                    continue
                if e.name.endswith(".lock"):
                    continue
                try:
                    st = e.stat()
                except FileNotFoundError:
                    continue
                out.append((st.st_mtime, st.st_size, e.path, st.st_atime_ns == 0,
                            st.st_blocks * 512))
        return out

    def _bump(self, **inc):
        """Add to the node-wide counters (caller holds the directory lock)."""
        f = os.path.join(self.root, ".stats.json")
        try:
            with open(f) as fh:
                counts = json.load(fh)
        except (OSError, ValueError):
            counts = {}
        for k, v in inc.items():
            counts[k] = counts.get(k, 0) + v
        replace_file(f, json.dumps(counts).encode("utf-8"))

    def _room(self):
        """(free, min_free): the bytes ``root``'s file system has free for this process,
        and those the cache leaves free (``min_free``, else a tenth of the file system up
        to 10 GiB); ``free`` None where the file system reports no size (some FUSE and
        network file systems answer ``statvfs`` with zeros): no floor there."""
        st = os.statvfs(self.root)
        if not st.f_blocks:
            return None, self.min_free or 0
        free = st.f_bavail * st.f_frsize
        if self.min_free is not None:
            return free, self.min_free
        return free, min(st.f_blocks * st.f_frsize // 10, _MIN_FREE_MAX)

    def _reserve(self, nbytes, keep):
        """Evict shards until ``nbytes`` more fit (dir lock held) within ``max_bytes`` and
        leave ``min_free`` of the file system free (the bytes in-flight downloads have yet
        to write count as used: their reservations are sparse files), the earliest
        modification time first: released shards (the latest released first,
        :meth:`release`), then the least recently used (a pass's shards not read yet: the
        one needed last first, :meth:`order`). An evicted shard's disk counts as free at
        once (a reader that has it open keeps it until it closes it). Counts those evicted
        unread (:class:`CacheTooSmallWarning`)."""
        entries = sorted(self._entries())
        total = sum(e[1] for e in entries)
        free, min_free = self._room()
        if free is None:  # (a file system of no reported size: max_bytes alone)
            free = min_free
        else:  # what the disk still owes: in-flight downloads' unwritten bytes, and this one's
            free -= nbytes + sum(max(0, size - alloc) for _, size, p, _, alloc in entries
                                 if os.path.basename(p).startswith(".tmp-"))
        bound = self.max_bytes
        evicted = unread = 0
        for _, size, p, fresh, alloc in entries:
            if (bound is None or total + nbytes <= bound) and free >= min_free:
                break
            name = os.path.basename(p)
            if name.startswith(".tmp-") and not _dead(name):
                continue  # in-flight downloads hold their reservation
            if p == keep:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)  # an open mmap of it stays valid
                total -= size
                free += max(alloc, size) if name.startswith(".tmp-") else alloc
                evicted += 1
                unread += fresh and not name.startswith(".tmp-")
        if unread:
            self._bump(evicted_unread=unread)
            self._too_small(total + nbytes)
        return evicted

    def _too_small(self, need):
        global _warned
        if not _warned:
            _warned = True
            warnings.warn(
                f"{self!r} evicted a shard it had downloaded ahead before any reader opened "
                f"it: it is smaller than what this node's readers need at once (their mixing "
                f"windows and the shards read ahead, at least {need / 1e9:.2f} GB here now), "
                f"so such shards are downloaded again when needed (stats()['evicted_unread'] "
                f"counts them). Give it room (max_bytes, and disk beyond min_free) for at "
                f"least local ranks x workers x (2 x mix_shards + prefetch) shards.",
                CacheTooSmallWarning, stacklevel=2)

    def stats(self) -> dict:
        """Node-wide counters: ``hits``, ``misses``, ``bytes_downloaded``, ``evictions``,
        ``evicted_unread`` (shards downloaded ahead and evicted before any reader opened
        them: the cache is too small, see :class:`~turboloader.errors.CacheTooSmallWarning`),
        ``downloads_failed``; and now: ``bytes`` and ``files`` cached, ``max_bytes``
        (None: bounded by the disk), ``disk_free`` (the file system's free bytes; None
        where it reports no size) and ``min_free`` (those the cache leaves free)."""
        try:
            with open(os.path.join(self.root, ".stats.json")) as fh:
                counts = json.load(fh)
        except (OSError, ValueError):
            counts = {}
        out: dict[str, int | None] = {k: int(counts.get(k, 0)) for k in _STAT_KEYS}
        entries = [e for e in self._entries() if not os.path.basename(e[2]).startswith(".tmp-")]
        out["bytes"] = sum(e[1] for e in entries)
        out["files"] = len(entries)
        out["max_bytes"] = self.max_bytes
        out["disk_free"], out["min_free"] = self._room()
        return out

    def fetch(self, url: str, /, *, _count=True) -> str:
        """The local path of the shard of ``url``, downloading it first on a miss.

        Concurrent calls for one URL (any process of the node) download it once; a
        download this process already runs (:meth:`prefetch`) is joined, not repeated.

        Raises:
            RemoteShardError / RemoteShardNotFoundError: as :func:`open_remote`.
        """
        path = self.path(url)
        if self._touch(path, _count):
            return path
        downloads = _downloads()
        t0 = time.monotonic()
        while True:
            with downloads.lock:
                job = downloads.jobs.get((self.root, url))
            mine = job is None
            if mine:
                job = self._start(url, blocking=True)
                if job is None:  # another process downloaded it while we waited
                    if self._touch(path, _count):
                        return path
                    continue
            else:
                fetch_pool().hurry(job.fd)
            job.done.wait()
            if job.error is not None:
                raise job.error
            if self._touch(path, _count and not mine):  # a miss (counted) when mine
                fetch_pool().handed(job.size or 0, time.monotonic() - t0)
                return path
            # evicted by another process between its download and now: fetch it again

    def order(self, urls: Iterable[str], /) -> None:
        """The shards a pass reads, in its reading order: those cached are evicted in the
        reverse order, the one needed last first (after every released shard, see
        :meth:`release`). Each gets a use time 50 ms before the one read before it, the
        first needed the latest: the streams of a node order their passes within a few
        milliseconds of each other, so their shards interleave by place in the reading
        order, as the streams read them. The shards the pass downloads are the most recent
        when they arrive (they are needed soonest). Never raises: a shard not cached, or a
        file whose times cannot be set, is left as it is (the order is a hint)."""
        now = time.time_ns()
        for i, url in enumerate(u for u in urls if is_remote(u)):
            t, path = now - _ORDER_STEP_NS * i, self.path(url)
            with contextlib.suppress(OSError):  # (gone; not a read: the access time stays)
                os.utime(path, ns=(os.stat(path).st_atime_ns, t))

    def release(self, url: str, /) -> None:
        """A reader is done with the shard of ``url`` (a pass's stream is past its last
        sample, or the pass ended): it becomes the first to be evicted, before every shard
        not released since its last use, and among released shards the latest released
        goes first.

        A pass reads each shard once, so a shard just read is needed again only in the
        next pass, while one not yet read is needed in this one: least-recently-used
        eviction drops exactly those (the shards the previous pass read first), and with a
        cache a little smaller than the dataset nearly every shard was downloaded again
        each epoch (48 shards, 39 cached: 44 misses in the second epoch). Evicting the
        latest released first keeps what the pass still needs; in an unshuffled order it is
        also what the next pass needs last. A released shard read again is used as
        before (its next :meth:`fetch` makes it the most recent again). Never raises, as
        :meth:`order`."""
        with contextlib.suppress(OSError):  # (evicted already; eviction order is a hint)
            now = time.time()
            os.utime(self.path(url), (now, max(1.0, _RELEASED - now)))

    def _touch(self, path, count=True):
        try:
            os.utime(path)  # the LRU clock: last use
        except FileNotFoundError:
            return False
        if count:
            with self._dirlock():
                self._bump(hits=1)
        return True

    def _start(self, url, *, blocking, order=0):
        """Start this process's download of ``url`` (through the fetch pool: concurrent
        ranged requests written in place, the size taken from the first response), holding
        the shard's node-wide lock until it ends. Returns the job, or None when the shard is
        cached already or (``blocking`` False) another process holds its lock."""
        path = self.path(url)
        lock_fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(lock_fd)
            return None
        except BaseException:
            os.close(lock_fd)
            raise
        if os.path.exists(path):
            os.close(lock_fd)
            return None
        tmp = os.path.join(self.root, f".tmp-{os.getpid()}-{threading.get_ident()}-"
                                      f"{os.path.basename(path)}")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        job = _Download(url, path, tmp, fd, lock_fd)
        downloads = _downloads()
        with downloads.lock:
            downloads.jobs[(self.root, url)] = job
        fetch_pool().fetch_to(url, fd, on_size=lambda size: self._reserve_for(job, size),
                              on_done=lambda error: self._finish(job, error), urgent=blocking,
                              order=order,
                              retries=self.retries, backoff=self.backoff, timeout=self.timeout)
        return job

    def _reserve_for(self, job, size):
        """The first response told the size: make room for it (the reservation is the
        temporary file's length, counted by every process's eviction while in flight)."""
        job.size = size
        with self._dirlock():
            evicted = self._reserve(size or 0, keep=None)
            if size:
                os.ftruncate(job.fd, size)
            self._bump(misses=1, evictions=evicted)

    def _finish(self, job, error):
        """The download ended (a pool thread): publish it atomically, or clean up."""
        try:
            if error is None:
                os.fsync(job.fd)
                written = os.fstat(job.fd).st_size
                os.close(job.fd)
                job.fd = -1
                # not opened yet (access time 0, see _entries); the modification time is
                # now: a shard downloaded is needed soon
                with contextlib.suppress(OSError):  # (a hint: no download fails for it)
                    os.utime(job.tmp, ns=(0, time.time_ns()))
                with self._dirlock():
                    os.replace(job.tmp, job.path)  # atomic: readers see no partial shard
                    evicted = self._reserve(0, keep=job.path)
                    self._bump(bytes_downloaded=written, evictions=evicted)
        except BaseException as exc:  # noqa: BLE001 - the reader meets it
            error = exc
        if error is not None:
            if job.fd >= 0:
                os.close(job.fd)
                job.fd = -1
            with contextlib.suppress(FileNotFoundError):
                os.unlink(job.tmp)
            with contextlib.suppress(OSError), self._dirlock():
                self._bump(downloads_failed=1)
            if isinstance(error, Exception):
                error.add_note(f"while caching remote shard {redact(job.url)}")
        job.error = error
        os.close(job.lock_fd)  # releases the shard's node-wide lock
        downloads = _downloads()
        with downloads.lock:
            downloads.jobs.pop((self.root, job.url), None)
            for key, queue in downloads.queues.items():
                if key[0] == self.root:
                    queue.running.discard(job.url)
        job.done.set()
        self._pump()

    def clear(self) -> None:
        """Remove every cached shard and the counters."""
        with self._dirlock():
            for _, _, p, _, _ in self._entries():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.root, ".stats.json"))

    # prefetch
    def prefetch(self, urls: Iterable[str], *, at_once: int = 0, stream: str = "",
                 start: int = 0, ahead: int | None = None) -> None:
        """Download ``urls`` (the shards a reading stream reads next, in reading order) in
        the background, without waiting: ``prefetch`` of them at a time (at least
        ``at_once``: a mixing window read all at once), each through the process's fetch
        pool (:mod:`turboloader.io.fetch`: concurrent ranged requests). ``start``: the
        place of ``urls[0]`` in the stream's reading order; the pool starts the parts of
        every stream's downloads by that place (the shards needed first complete first,
        across the process's streams). Replaces the list of an earlier call for the same
        ``stream`` (each stream of a process has its own); cached URLs are skipped, a
        shard another process downloads is left to it. ``ahead``: only the first ``ahead``
        of ``urls`` (the reader's next places, cached or not): a cache smaller than the
        dataset then does not evict shards the pass needs soon for ones it needs much later
        (with no bound the queue downloaded a stream's whole pass as fast as the link
        allowed). Failures are left for the reader to meet (and report) when it needs the
        shard."""
        if not self.prefetch_count:
            return
        downloads = _downloads()
        with downloads.lock:
            queue = downloads.queues.get((self.root, stream))
            if queue is None:
                queue = downloads.queues[(self.root, stream)] = _Queue()
            urls = list(urls) if ahead is None else list(itertools.islice(urls, int(ahead)))
            queue.urls = [(int(start) + i, u) for i, u in enumerate(urls) if is_remote(u)]
            queue.width = max(self.prefetch_count, int(at_once))
        self._pump()

    def _pump(self):
        """Start queued prefetches while fewer than each queue's width run."""
        downloads = _downloads()
        with downloads.lock:
            queues = [q for k, q in downloads.queues.items() if k[0] == self.root]
        for queue in queues:
            self._pump_queue(queue)

    def _pump_queue(self, queue):
        downloads = _downloads()
        while True:
            with downloads.lock:
                if len(queue.running) >= queue.width or not queue.urls:
                    return
                order, url = queue.urls.pop(0)
                if (self.root, url) in downloads.jobs or os.path.exists(self.path(url)):
                    continue
                queue.running.add(url)
            try:
                job = self._start(url, blocking=False, order=order)
            except Exception:  # the reader meets it (and reports it with context)
                job = None
            if job is None:
                with downloads.lock:
                    queue.running.discard(url)


class _Download:
    """One download of this process: its file, the shard's lock, and when it is done."""

    def __init__(self, url, path, tmp, fd, lock_fd):
        self.url, self.path, self.tmp = url, path, tmp
        self.fd, self.lock_fd = fd, lock_fd
        self.size = None
        self.error = None
        self.done = threading.Event()


class _Queue:
    def __init__(self):
        self.urls = []
        self.running = set()
        self.width = 0


class _Downloads:
    """This process's downloads ((root, url) -> _Download) and prefetch queues ((root,
    stream) -> _Queue); a forked child starts with none."""

    def __init__(self):
        self.lock = threading.Lock()
        self.jobs = {}
        self.queues = {}
        self.pid = os.getpid()


_state = None


def _downloads():
    global _state
    state = _state
    if state is None or state.pid != os.getpid():
        state = _state = _Downloads()
    return state
