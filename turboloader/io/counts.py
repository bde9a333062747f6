"""Sample counts of shards, for a dataset's construction: from a shard index, from the
node-local count cache, else by reading the shards, in parallel.

A dataset needs each shard's sample count before its first batch (the epoch's order and
each rank's equal share are computed from them). Counting a local ``.tar`` reads only its
headers (an ``mmap``); counting a remote shard means reading it. So for remote shards,
:func:`count_shards` takes, in this order:

1. **A shard index** next to the shards: the WebDataset ``wids`` index
   (``{"__kind__": "wids-shard-index-v1", "shardlist": [{"url": ..., "nsamples": ...}]}``,
   which ``turboloader index`` writes as ``<prefix>index.json``: ``train-index.json`` for
   ``train-00003.tar``), or the ``<prefix>manifest.json`` / ``manifest.json`` that
   ``turboloader convert`` writes. The candidate names of each shard set are fetched
   concurrently (a few requests in all, whatever the number of shards). Relative shard
   URLs in an index are relative to the index (or its ``base_path``).
2. **The node-local count cache** (``$TURBOLOADER_CACHE/counts``, default
   ``~/.cache/turboloader/counts``): one small file per shard URL (query string removed)
   holding the count with the object's size and version tag (ETag, GCS generation, or
   Last-Modified) it was counted at, taken from the responses of the read that counted
   (no request of its own). A shard with an entry costs one metadata request (concurrent)
   to see whether it changed; a shard whose size or tag changed is counted again; a store
   that gives no version tag is never cached (a change could not be seen). A read whose
   responses carried no tag (a GCS emulator without ``x-goog-generation``) or a shard
   already in a ``ShardCache`` (nothing read) asks the store after counting, and keeps
   the count only when the size is the one read.
3. **Counting**: the shards left are read in parallel, one connection each
   (``TURBOLOADER_COUNT_WORKERS`` threads, default 32), and their counts cached.

Reading a TAR's headers alone with ranged requests (skipping member bodies) would cost one
request per member: at 100 ms per request, 500 members take 50 s against 1.5 s for
reading a 15 MB shard whole at 10 MB/s, so whole shards are read, many at once.

Every rank computes the counts the same way from the same objects, so all ranks agree on
them (and so on the length of the epoch): an index is trusted as written, and a shard
whose count turns out wrong while reading raises a typed error rather than losing or
repeating samples silently (see ``docs/guide/shards-ddp.md``).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import posixpath
import re
import urllib.parse
from collections.abc import Callable, Iterable, Sequence

from turboloader.io.files import replace_file
from turboloader.io.remote import (RemoteShardError, RemoteShardNotFoundError, is_remote,
                                     open_remote, redact, seen_stat, stat, url_path)

__all__ = ["INDEX_KIND", "count_cache_dir", "count_shards", "index_candidates", "read_index",
           "write_index"]

#: The ``__kind__`` of a WebDataset ``wids`` shard index.
INDEX_KIND = "wids-shard-index-v1"
_SUFFIX = re.compile(r"(\.tar|\.tar\.gz|\.tgz)$", re.IGNORECASE)


def count_cache_dir() -> str:
    """The node-local count cache's folder: ``$TURBOLOADER_CACHE/counts``, else
    ``~/.cache/turboloader/counts``."""
    base = os.environ.get("TURBOLOADER_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "turboloader")
    return os.path.join(base, "counts")


def _workers(n, cap=None):
    if cap is None:
        try:
            cap = int(os.environ.get("TURBOLOADER_COUNT_WORKERS", "") or 32)
        except ValueError:
            cap = 32
    return max(1, min(int(cap), n))


def _split(url):
    """(folder URL or path with a trailing separator, file name)."""
    if is_remote(url):
        p = urllib.parse.urlsplit(url)
        folder, name = posixpath.split(p.path)
        return urllib.parse.urlunsplit((p.scheme, p.netloc, folder.rstrip("/") + "/", "",
                                        "")), name
    folder, name = os.path.split(os.path.abspath(url))
    return folder + os.sep, name


def index_candidates(shard: str) -> list[str]:
    """Where an index of ``shard``'s set may be, most specific first: for
    ``.../train-00003.tar``, ``.../train-index.json``, ``.../train-manifest.json``,
    ``.../index.json`` and ``.../manifest.json``."""
    folder, name = _split(shard)
    prefix = re.sub(r"\d+$", "", _SUFFIX.sub("", name))
    names = [f"{prefix}index.json", f"{prefix}manifest.json", "index.json", "manifest.json"]
    return [folder + n for n in dict.fromkeys(names)]


def _read_text(url):
    if is_remote(url):
        with open_remote(url, retries=2, backoff=0.1) as f:
            return f.read().decode("utf-8-sig")
    with open(url, encoding="utf-8-sig") as f:
        return f.read()


def _resolve(base, rel):
    if "://" in rel or os.path.isabs(rel):
        return rel
    if is_remote(base):  # urljoin knows only some schemes: joined as paths
        p = urllib.parse.urlsplit(base)
        path = posixpath.normpath(posixpath.join(p.path or "/", rel))
        return urllib.parse.urlunsplit((p.scheme, p.netloc, path, "", ""))
    return os.path.normpath(os.path.join(base, rel))


def read_index(url: str) -> dict[str, int] | None:
    """The sample counts an index (a ``wids`` shard index or a ``turboloader convert``
    manifest) gives: ``{shard URL: samples}`` with relative shard URLs resolved against the
    index's folder (or its ``base_path``); None when ``url`` is not such an index, or is a
    manifest of an unfinished conversion.

    Raises:
        RemoteShardNotFoundError / FileNotFoundError: there is no object at ``url``.
        RemoteShardError: it stayed unavailable.
    """
    try:
        doc = json.loads(_read_text(url))
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    folder = _split(url)[0]
    try:
        if isinstance(doc.get("shardlist"), list):
            base = doc.get("base_path") or folder
            if not base.endswith(("/", os.sep)):
                base += "/"
            return {_resolve(base, e["url"]): int(e["nsamples"]) for e in doc["shardlist"]}
        if doc.get("format") == "turboloader-manifest" and doc.get("layout") == "tar":
            if not doc.get("complete"):
                return None
            return {_resolve(folder, e["path"]): int(e["samples"]) for e in doc["shards"]}
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return None


def _strip_query(url):
    return redact(url) if is_remote(url) else os.path.abspath(url)


class _CountCache:
    def __init__(self, root):
        self.root = root

    def _path(self, url):
        return os.path.join(self.root, hashlib.sha256(_strip_query(url).encode()).hexdigest()[:40]
                            + ".json")

    def has(self, url):
        return os.path.exists(self._path(url))

    def get(self, url, st, strict):
        try:
            with open(self._path(url), encoding="utf-8") as f:
                e = json.load(f)
        except (OSError, ValueError):
            return None
        if (e.get("url") == _strip_query(url) and e.get("size") == st.size and e.get("etag") == st.etag
                and (e.get("strict") or not strict) and isinstance(e.get("samples"), int)):
            return e["samples"]
        return None

    def put(self, url, st, strict, n):
        try:
            os.makedirs(self.root, exist_ok=True)
            replace_file(self._path(url), json.dumps(
                {"url": _strip_query(url), "size": st.size, "etag": st.etag,
                 "strict": bool(strict), "samples": int(n)}).encode("utf-8"))
        except OSError:  # a read-only home: counting still works, uncached
            pass


def _normalise_index(index):
    return {_strip_query(k): v for k, v in index.items()}


def count_shards(urls: Iterable[str], count: Callable[[str], int], /, *, strict: bool = False,
                 use_index: bool = True, use_cache: bool = True,
                 workers: int | None = None) -> list:
    """The sample count of each shard of ``urls`` (an int, or the exception that counting
    it raised), in order, as the module docstring describes.

    Args:
        urls: shard URLs or paths.
        count: ``count(url) -> int``, how one shard is counted by reading it (local shards
            are always counted with it, in this thread).
        strict: whether ``count`` checks strictly (a cached count made without that check
            is not reused under it).
        use_index, use_cache: look for a shard index / use the node-local count cache.
        workers: shards counted at once (default ``TURBOLOADER_COUNT_WORKERS``, else 32).
    """
    urls = list(urls)
    results = {}
    remote = [u for u in urls if is_remote(u)]
    cache = _CountCache(count_cache_dir()) if use_cache else None
    # the metadata requests of the shards counted before are sent at once, while the index
    # candidates are being asked for: one round trip to the store at construction, not
    # two (a shard an index lists after all has had one request for nothing)
    early = {}
    stats = None
    if cache is not None:
        cached = [u for u in dict.fromkeys(remote) if cache.has(u)]
        if cached:
            stats = concurrent.futures.ThreadPoolExecutor(_workers(len(cached), workers))
            early = {u: stats.submit(stat, u) for u in cached}
    try:
        if remote and use_index:
            results.update(_find_indexes(remote))
        todo = [u for u in dict.fromkeys(remote) if u not in results]
        if todo:
            def one(u):
                return _count_one(u, count, cache, strict, early.get(u))

            with concurrent.futures.ThreadPoolExecutor(_workers(len(todo), workers)) as pool:
                results.update(pool.map(one, todo))
    finally:
        if stats is not None:
            stats.shutdown(wait=True, cancel_futures=True)
    out = []
    for u in urls:
        if u in results:
            out.append(results[u])
            continue
        try:
            out.append(count(u))
        except Exception as exc:
            out.append(exc)
    return out


def _count_one(u, count, cache, strict, early):
    """(``u``, its count or the exception counting it raised): from the count cache where
    the object is the one counted (``early``: its ``stat`` already asked for), else
    counted by reading it (and cached)."""
    try:
        if cache is not None and (early is not None or cache.has(u)):
            st = early.result() if early is not None else stat(u)  # the same object?
            if st.etag:
                n = cache.get(u, st, strict)
                if n is not None:
                    return u, n
        seen_stat(u, forget=True)
        n = count(u)
        if cache is not None:
            # the size and tag of what was counted: from the responses of the read
            # itself; a read whose responses carried no tag (or a shard already in a
            # ShardCache: nothing read) asks the store, and the count is kept only if
            # the size is the one read
            st = seen_stat(u)
            if st is None or not st.etag:
                now = stat(u)
                st = now if st is None or now.size == st.size else None
            if st is not None and st.etag:
                cache.put(u, st, strict, n)
        return u, n
    except Exception as exc:  # handed to the caller, in the shard's place
        return u, exc


def _find_indexes(urls):
    """{shard URL: samples} from the indexes found next to ``urls`` (the candidates
    fetched concurrently, each once)."""
    by_cands = {}
    for u in urls:
        by_cands.setdefault(tuple(index_candidates(u)), []).append(u)
    tried = sorted({c for cands in by_cands for c in cands})

    def load(c):
        try:
            got = read_index(c)
        except (RemoteShardError, OSError, ValueError):
            got = None
        return c, None if got is None else _normalise_index(got)

    with concurrent.futures.ThreadPoolExecutor(_workers(len(tried))) as pool:
        loaded = dict(pool.map(load, tried))
    counts = {}
    for cands, members in by_cands.items():
        for c in cands:  # the most specific index that lists a shard gives its count
            index = loaded.get(c)
            if not index:
                continue
            for u in members:
                k = _strip_query(u)
                if u not in counts and k in index:
                    counts[u] = index[k]
    return counts


def write_index(urls: Iterable[str], output: str, /, *, count: Sequence[int],
                name: str | None = None, sizes: Sequence[int] | None = None) -> dict:
    """Write a ``wids`` shard index of ``urls`` to ``output`` (a path or a remote URL):
    ``{"__kind__": "wids-shard-index-v1", "wids_version": 1, "name": ...,
    "shardlist": [{"url": ..., "nsamples": ..., "filesize": ...}]}``, shard URLs relative
    to the index's folder where they are in it (and for remote shards of one folder indexed
    into a local file, which is to be uploaded beside them). Counts come from ``count`` (the caller's
    parallel counting); ``sizes`` from :func:`~turboloader.io.remote.stat` / the file's
    size when not given. Returns the index.

    Raises:
        RemoteShardError: a remote output could not be written.
    """
    from turboloader.io.remote import write_object

    urls = list(urls)
    folder = _split(output)[0]
    if sizes is None:
        def size(u):
            return stat(u).size if is_remote(u) else os.path.getsize(u)

        with concurrent.futures.ThreadPoolExecutor(_workers(len(urls))) as pool:
            sizes = list(pool.map(size, urls))
    # remote shards of one folder indexed into a local file: that file is to be uploaded
    # beside them, so their names are written relative too
    beside = (not is_remote(output) and all(is_remote(u) for u in urls)
              and len({_split(u)[0] for u in urls}) == 1)
    shardlist = []
    for u, n, s in zip(urls, count, sizes):
        ref = _strip_query(u)
        if beside:
            ref = _split(ref)[1]
        elif ref.startswith(folder) and "/" not in ref[len(folder):].replace(os.sep, "/"):
            ref = ref[len(folder):]
        shardlist.append({"url": ref, "nsamples": int(n), "filesize": int(s)})
    doc = {"__kind__": INDEX_KIND, "wids_version": 1,
           "name": name or _SUFFIX.sub("", posixpath.basename(url_path(output))),
           "shardlist": shardlist}
    data = (json.dumps(doc, indent=1) + "\n").encode()
    if is_remote(output):
        write_object(output, data)
    else:
        replace_file(output, data)
    return doc
