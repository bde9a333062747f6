"""A node-local shard cache for remote shards.

:class:`ShardCache` keeps whole shards in a node-local directory, bounded in
bytes with least-recently-used eviction, shared by every rank and DataLoader worker of
the node that names the same directory: a shard is downloaded once per node (a per-shard
``flock`` makes the other processes wait for it), written to a temporary file and
renamed into place (readers never see a partial shard), and space is reserved before a
download under a directory lock so that the bound holds while several processes download
at once. Counters (hits, misses, bytes downloaded, evictions) are node-wide, kept in the
directory. :meth:`ShardCache.prefetch` downloads the next shards of a reading process in a
background thread.

Shards are read with :func:`turboloader.io.remote.open_remote`, with the same retries.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import threading

from turboloader.errors import RemoteShardError
from turboloader.io.remote import _CHUNK, _RetryingReader, is_remote, open_remote, redact, url_path
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


_STAT_KEYS = ("hits", "misses", "bytes_downloaded", "evictions", "downloads_failed")


class ShardCache:
    """A node-local directory of whole shards, LRU-bounded in bytes, shared safely by all
    processes of a node that use the same ``root``.

    Args:
        root: a directory on local disk (created if missing). Every rank and worker of a
            node should pass the same one; do not put it on a network file system
            (``flock`` semantics).
        max_bytes: the bound on the shards kept (int or ``"50GB"``). A shard larger than
            the bound is still downloaded (the reader needs it) and is the first evicted.
        prefetch: shards downloaded ahead of the one being read, per reading process, in a
            background thread (0: off).
        retries, backoff, timeout: passed to :func:`open_remote`.

    The object is a picklable configuration; counters live in ``root/.stats.json``.

    Example:
        >>> cache = ShardCache("/local_nvme/shards", max_bytes="200GB", prefetch=2)  # doctest: +SKIP
        >>> ds = TarDataset("s3://bucket/train-{0000..0999}.tar", tf, shard_cache=cache)
        >>> cache.stats()
        {'hits': ..., 'misses': ..., 'bytes_downloaded': ..., 'bytes': ..., 'files': ...}
    """

    def __init__(self, root, max_bytes="10GB", *, prefetch=2, retries=5, backoff=0.25,
                 timeout=60.0):
        self.root = os.path.abspath(os.fspath(root))
        self.max_bytes = parse_size(max_bytes)
        if self.max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes!r}")
        if int(prefetch) < 0:
            raise ValueError(f"prefetch must be >= 0, got {prefetch}")
        self.prefetch_count = int(prefetch)
        self.retries, self.backoff, self.timeout = int(retries), float(backoff), timeout
        os.makedirs(self.root, exist_ok=True)
        self._prefetcher = None

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_prefetcher"] = None
        return state

    def __repr__(self):
        return f"ShardCache({self.root!r}, max_bytes={self.max_bytes}, prefetch={self.prefetch_count})"

    # paths
    def path(self, url: str) -> str:
        """Where the shard of ``url`` is (or would be) cached."""
        digest = hashlib.sha256(url.encode()).hexdigest()[:32]
        base = os.path.basename(url_path(url))[-64:]
        return os.path.join(self.root, f"{digest}-{base}")

    def _dirlock(self):
        return _flock(os.path.join(self.root, ".lock"))

    def _entries(self):
        """[(mtime, size, path)] of complete shards and in-flight reservations."""
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
                out.append((st.st_mtime, st.st_size, e.path))
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
        tmp = f"{f}.{os.getpid()}.{threading.get_ident()}"
        with open(tmp, "w") as fh:
            json.dump(counts, fh)
        os.replace(tmp, f)

    def _reserve(self, nbytes, keep):
        """Evict least-recently-used shards until ``nbytes`` more fit (dir lock held)."""
        entries = sorted(self._entries())
        total = sum(size for _, size, _ in entries)
        evicted = 0
        for _, size, p in entries:
            if total + nbytes <= self.max_bytes:
                break
            name = os.path.basename(p)
            if name.startswith(".tmp-") and not _dead(name):
                continue  # in-flight downloads hold their reservation
            if p == keep:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)  # an open mmap of it stays valid
                total -= size
                evicted += 1
        return evicted

    def stats(self) -> dict:
        """Node-wide counters: ``hits``, ``misses``, ``bytes_downloaded``, ``evictions``,
        ``downloads_failed``; and now: ``bytes`` and ``files`` cached, ``max_bytes``."""
        try:
            with open(os.path.join(self.root, ".stats.json")) as fh:
                counts = json.load(fh)
        except (OSError, ValueError):
            counts = {}
        out = {k: int(counts.get(k, 0)) for k in _STAT_KEYS}
        entries = [e for e in self._entries() if not os.path.basename(e[2]).startswith(".tmp-")]
        out["bytes"] = sum(size for _, size, _ in entries)
        out["files"] = len(entries)
        out["max_bytes"] = self.max_bytes
        return out

    def _size_of(self, url):
        """The object's size from a 0-byte-range probe, or None if unknown."""
        reader = _RetryingReader(url, retries=self.retries, backoff=self.backoff,
                                 timeout=self.timeout)
        try:
            reader._connect()
            return reader.size
        finally:
            reader.close()

    def fetch(self, url: str, /, *, _count=True) -> str:
        """The local path of the shard of ``url``, downloading it first on a miss.

        Concurrent calls for one URL (any process of the node) download it once.

        Raises:
            RemoteShardError / RemoteShardNotFoundError: as :func:`open_remote`.
        """
        path = self.path(url)
        if self._touch(path, _count):
            return path
        with _flock(path + ".lock"):
            if self._touch(path, _count):  # another process downloaded it while we waited
                return path
            self._download(url, path)
        return path

    def _touch(self, path, count=True):
        try:
            os.utime(path)  # the LRU clock: last use
        except FileNotFoundError:
            return False
        if count:
            with self._dirlock():
                self._bump(hits=1)
        return True

    def _download(self, url, path):
        size = self._size_of(url)
        tmp = os.path.join(self.root, f".tmp-{os.getpid()}-{threading.get_ident()}-"
                                      f"{os.path.basename(path)}")
        with self._dirlock():
            evicted = self._reserve(size or 0, keep=None)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            if size:
                os.ftruncate(fd, size)  # the reservation: counted by _entries while in flight
            self._bump(misses=1, evictions=evicted)
        written = 0
        try:
            with os.fdopen(fd, "wb") as out, open_remote(
                    url, retries=self.retries, backoff=self.backoff, timeout=self.timeout) as src:
                while True:
                    chunk = src.read(_CHUNK)
                    if not chunk:
                        break
                    out.write(chunk)
                    written += len(chunk)
                if size is not None and written != size:
                    err = RemoteShardError(f"downloaded {written} bytes, expected {size}")
                    err.add_note(f"remote shard {redact(url)}")
                    raise err
                out.truncate(written)
                out.flush()
                os.fsync(out.fileno())
            with self._dirlock():
                os.replace(tmp, path)  # atomic: readers see no partial shard
                evicted = self._reserve(0, keep=path)
                self._bump(bytes_downloaded=written, evictions=evicted)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            with contextlib.suppress(OSError), self._dirlock():
                self._bump(downloads_failed=1)
            raise

    def clear(self) -> None:
        """Remove every cached shard and the counters."""
        with self._dirlock():
            for _, _, p in self._entries():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.root, ".stats.json"))

    # prefetch
    def prefetch(self, urls) -> None:
        """Download ``urls`` (the next shards, in order) in this process's background
        thread, without waiting; already cached or queued URLs are skipped. Failures are
        left for the reader to meet (and report) when it needs the shard."""
        if not self.prefetch_count:
            return
        p = self._prefetcher
        if p is None or p.pid != os.getpid():
            p = self._prefetcher = _Prefetcher(self)
        p.submit([u for u in urls if is_remote(u)])


class _Prefetcher:
    def __init__(self, cache):
        self.pid = os.getpid()
        self.cache = cache
        self.queue = []
        self.seen = set()
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._run, name="turboloader-prefetch", daemon=True)
        self.thread.start()

    def submit(self, urls):
        with self.cond:
            for u in urls:
                if u not in self.seen:
                    self.seen.add(u)
                    self.queue.append(u)
            self.cond.notify()

    def _run(self):
        while True:
            with self.cond:
                while not self.queue:
                    self.cond.wait()
                url = self.queue.pop(0)
            try:
                self.cache.fetch(url, _count=False)
            except Exception:  # the reader retries and reports it with context
                pass
            finally:
                with self.cond:
                    self.seen.discard(url)
