"""Remote shards: one retrying reader over every object store.

Stores (``url``'s scheme):

* ``s3://bucket/key``: ``boto3`` (``get_object`` with ``Range``). Endpoint, region and
  credentials come from boto3's standard chain: environment (``AWS_ENDPOINT_URL`` /
  ``AWS_ENDPOINT_URL_S3`` for S3-compatible stores, ``AWS_PROFILE``, ``AWS_ACCESS_KEY_ID``
  ...), ``~/.aws/config``, instance roles. Extra ``remote``.
* ``gs://bucket/object``: Google Cloud Storage's JSON API, authorised by ``google-auth``'s
  standard chain (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's application-default login,
  the metadata server), as ``google-cloud-storage`` does; ``STORAGE_EMULATOR_HOST`` points
  it at an emulator (no credentials). Extra ``gcs``.
* ``az://container/blob``: ``azure-storage-blob``. The account comes from
  ``AZURE_STORAGE_CONNECTION_STRING``, else ``AZURE_STORAGE_ACCOUNT_URL`` (or
  ``AZURE_STORAGE_ACCOUNT``: ``https://<account>.blob.core.windows.net``) with
  ``AZURE_STORAGE_SAS_TOKEN`` / ``AZURE_STORAGE_KEY``, or ``azure-identity``'s
  ``DefaultAzureCredential`` when it is installed. Extra ``azure``.
* ``http://``, ``https://``: the standard library (``urllib.request``; proxies and
  certificates as configured for it).
* any other URL whose scheme ``fsspec`` knows (``memory://``, ``hf://``, ...), through
  ``fsspec`` when it is installed (its own credentials per file system).

Reading. :func:`open_remote` returns a buffered, *sequential* file object that streams the
object from byte 0; :func:`read_range` returns exactly the bytes ``[start, end)``;
:func:`stat` gives the size and ETag (:func:`seen_stat`: those the latest response read
carried, without a request); :func:`glob_objects` lists the objects matching a glob
(``s3://bucket/train-*.tar``), every page. A connection that fails mid-stream (reset, truncated
body, HTTP 5xx/408/429, S3 ``SlowDown``, an unresolvable host) or that *stalls* (no byte
for ``timeout`` seconds, or fewer than 1 MiB in ``timeout`` seconds) is dropped and
re-opened at the byte where it stopped with a ``Range`` request, after an exponential
backoff with jitter (0.5x-1.5x, capped at ``max_backoff``): the answer must start at that
byte and give the same total size, else :class:`RemoteShardError` names both offsets, so
bytes are never repeated or skipped. After ``retries`` failed attempts in a row the read
raises :class:`RemoteShardError` (a :class:`~turboloader.errors.TurboLoaderError` and an
``OSError``) naming the URL and the byte offset. Messages never carry credentials: URLs
lose their query string (presigned URLs, SAS tokens) and user info, and the text of an SDK
error is quoted with the same redaction. A missing object (HTTP 404/410, S3 ``NoSuchKey``,
GCS / Azure ``BlobNotFound``) is :class:`RemoteShardNotFoundError` (also a
``FileNotFoundError``) at once, without retries.

``TURBOLOADER_REMOTE_TIMEOUT`` (seconds, default 60) sets the default stall timeout.
The node-local shard cache built on this reader is :mod:`turboloader.io.shard_cache`.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import io
import json
import os
import random
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import NamedTuple

from turboloader.errors import RemoteShardError, RemoteShardNotFoundError

__all__ = [
    "REMOTE_SCHEMES",
    "ObjectStat",
    "RemoteShardError",
    "RemoteShardNotFoundError",
    "is_remote",
    "open_remote",
    "read_range",
    "redact",
    "seen_stat",
    "can_glob",
    "default_timeout",
    "glob_objects",
    "stat",
    "url_path",
    "warm",
    "write_object",
]

#: URL schemes read remotely by turboloader's own transports (any scheme ``fsspec`` knows
#: is read through it besides these).
REMOTE_SCHEMES = ("s3", "gs", "az", "http", "https")
_CHUNK = 1 << 20
_POOL_CONNECTIONS = 64  # connections an SDK client keeps open (above the fetch pool's max)
_SDK_CHUNK = 8 << 20  # one ranged request of the SDKs read in pieces (Azure, fsspec)
_LOCAL_FSSPEC = {"file", "local", "os"}


def default_timeout() -> float:
    """The stall timeout in seconds: ``TURBOLOADER_REMOTE_TIMEOUT``, else 60."""
    try:
        return float(os.environ.get("TURBOLOADER_REMOTE_TIMEOUT", "") or 60.0)
    except ValueError:
        return 60.0


_fsspec_known = None


def _fsspec_protocols():
    global _fsspec_known
    if _fsspec_known is None:
        try:
            import fsspec

            _fsspec_known = frozenset(fsspec.available_protocols()) - _LOCAL_FSSPEC
        except ImportError:
            _fsspec_known = frozenset()
    return _fsspec_known


def _scheme(url):
    scheme, sep, _ = url.partition("://")
    return scheme.lower() if sep else ""


def is_remote(url: object) -> bool:
    """True for ``s3://``, ``gs://``, ``az://``, ``http(s)://`` URLs, and URLs of any other
    (non-local) ``fsspec`` protocol when ``fsspec`` is installed."""
    if not isinstance(url, str):
        return False
    scheme = _scheme(url)
    if not scheme:
        return False
    return scheme in REMOTE_SCHEMES or scheme in _fsspec_protocols()


def redact(url: str) -> str:
    """``url`` without query string, fragment or user info (they may hold credentials)."""
    p = urllib.parse.urlsplit(url)
    netloc = p.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((p.scheme, netloc, p.path, "", ""))


_SECRETS = re.compile(r"(?i)(\?[^\s'\"<>]*)|(//[^/\s'\"@]*@)|"
                      r"((?:sig|signature|accountkey|sharedaccesssignature|token|password|"
                      r"secret|credential)[=:]\s*[^\s;,'\"&]+)")


def _scrub(text) -> str:
    """``text`` (an SDK's error message) without query strings, user info or key=value
    secrets: what may be quoted in an error."""
    def sub(m):
        if m.group(1):
            return "?<redacted>"
        if m.group(2):
            return "//"
        return m.group(3).split("=")[0].split(":")[0] + "=<redacted>"
    return _SECRETS.sub(sub, str(text))


def url_path(url: str) -> str:
    """The path component of a URL (for suffix checks such as ``.tar.gz``)."""
    return urllib.parse.urlsplit(url).path if is_remote(url) else url


class ObjectStat(NamedTuple):
    """What :func:`stat` says of an object: ``size`` in bytes, and ``etag`` (a version
    tag that changes when the object does: the ETag, a GCS generation, else the
    Last-Modified time; None when the store gives none)."""

    size: int
    etag: str | None


_seen_lock = threading.Lock()
_seen_stats: dict[str, ObjectStat] = {}
_SEEN_MAX = 1 << 16  # URLs remembered (the oldest forgotten first)


def _seen(url, st):
    with _seen_lock:
        _seen_stats.pop(url, None)
        _seen_stats[url] = st
        while len(_seen_stats) > _SEEN_MAX:
            del _seen_stats[next(iter(_seen_stats))]


def seen_stat(url: str, /, *, forget: bool = False) -> ObjectStat | None:
    """The size and version tag (as :func:`stat` gives them) that the latest response
    read for ``url`` in this process carried, or None (nothing read yet, or the
    response carried no size). Every read through :func:`open_remote`,
    :func:`read_range` and the fetch pool, and every :func:`stat`, records it: what was
    read can be described without asking the store again (and the fetch pool asks for
    all of an object's parts at once). ``forget``: also drop it (call before a read to know
    afterwards that what is returned came from that read).
    The tag is None where a response gives none (e.g. a GCS emulator without
    ``x-goog-generation``)."""
    with _seen_lock:
        return _seen_stats.pop(url, None) if forget else _seen_stats.get(url)


# -- transports -----------------------------------------------------------------------------

class _Transient(Exception):
    """Internal: a failure worth retrying (wraps the original as __cause__)."""


def _bytes_range(start, end):
    return f"bytes={start}-" if end is None else f"bytes={start}-{end - 1}"


_CONTENT_RANGE = re.compile(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)


def _range_total(url, start, content_range, length):
    """The object's total size (None when the response does not say) from a response to a
    request for its bytes from ``start``, after checking that the bytes start there: a
    resumed read that took bytes from elsewhere would repeat or skip data silently.

    Raises:
        RemoteShardError: ``Content-Range`` starts elsewhere, does not parse, or is absent
            from the answer to a request from ``start > 0``; the message names the URL and
            both offsets.
    """
    if content_range:
        m = _CONTENT_RANGE.match(content_range)
        if m is None:
            raise RemoteShardError(f"{redact(url)}: cannot read the Content-Range "
                                   f"{content_range!r} of the answer to a request for the "
                                   f"bytes from offset {start}")
        first = int(m.group(1))
        if first != start:
            raise RemoteShardError(f"{redact(url)}: asked for the bytes from offset {start}, "
                                   f"the server sent bytes from offset {first} (Content-Range "
                                   f"{content_range!r}); reading on would repeat or skip data")
        return None if m.group(3) == "*" else int(m.group(3))
    if start:
        raise RemoteShardError(f"{redact(url)}: the answer to a request for the bytes from "
                               f"offset {start} has no Content-Range, so where its bytes start "
                               f"is unknown")
    return None if length is None else int(length)


def _status_error(url, status, reason, *, what):
    """The error for an HTTP-style status: not found, retried, or refused."""
    if status in (404, 410):
        return RemoteShardNotFoundError(errno.ENOENT, f"{what} {status}: no such object")
    if status >= 500 or status in (408, 429):
        return _Transient(f"{what} {status}")
    return RemoteShardError(f"{redact(url)}: {what} {status} {_scrub(reason or '')}".rstrip())


class _Store:
    """One store's requests. ``open`` returns (body with ``.read(n)``, total size or None,
    the object's version tag or None: as :meth:`stat` gives it, from the response's own
    headers) for the bytes ``[start, end)`` (``end`` None: to the object's end); it raises
    ``_Transient`` for what is worth retrying, :class:`RemoteShardNotFoundError`, or
    :class:`RemoteShardError`."""

    def open(self, url, start, end, timeout):
        raise NotImplementedError

    def stat(self, url, timeout) -> ObjectStat:
        raise NotImplementedError

    def put(self, url, data: bytes, timeout) -> None:
        raise RemoteShardError(f"{redact(url)}: writing is not supported for "
                               f"{_scheme(url)}:// URLs")

    def list(self, url, prefix, timeout) -> list[str]:
        """The URLs of every object under the folder ``url`` (``scheme://bucket/dir/``)
        whose name there starts with ``prefix``, every page of the listing."""
        raise RemoteShardError(f"{redact(url)}: listing is not supported for "
                               f"{_scheme(url)}:// URLs")

    def errors(self):
        """Exceptions a body's ``read`` raises that are worth a resumed request."""
        return ()

    def client(self, timeout) -> None:
        """Make this process's client (the SDK's session, credentials chain): see
        :func:`warm`."""


class _Chunked(io.RawIOBase):
    """A body made of ranged requests of up to ``_SDK_CHUNK`` bytes, fetched one after
    another as it is read: for SDKs whose download is not a socket stream."""

    def __init__(self, fetch, start, end, total, head=b""):
        self._fetch = fetch  # (start, end) -> bytes
        self._pos = start  # the offset of the first byte after ``head``
        self._end = total if end is None else (end if total is None else min(end, total))
        self._buf = memoryview(head)
        self._pos -= len(head)

    def readable(self):
        return True

    def read(self, n=-1):
        if not self._buf:
            if self._end is not None and self._pos >= self._end:
                return b""
            stop = self._pos + _SDK_CHUNK
            if self._end is not None:
                stop = min(stop, self._end)
            data = self._fetch(self._pos, stop)
            if not data:
                return b""
            self._buf = memoryview(data)
        n = len(self._buf) if n is None or n < 0 else n
        out, self._buf = self._buf[:n], self._buf[n:]
        self._pos += len(out)
        return bytes(out)


def _per_process(cache, lock, key, make):
    """The client in ``cache`` under ``key`` (``(pid, ...)``), made by ``make()`` on first
    use (``lock``: the name of its module lock, replaced in a forked child, see
    :func:`_after_fork`); clients inherited from another process (over fork) are dropped,
    never shared."""
    client = cache.get(key)
    if client is None:
        with _LOCKS[lock]:
            client = cache.get(key)
            if client is None:
                client = make()
                for k in [k for k in cache if k[0] != key[0]]:
                    del cache[k]
                cache[key] = client
    return client


def _list_split(url):
    """(bucket, folder key with its trailing "/", or "") of a folder URL to list."""
    p = urllib.parse.urlsplit(url)
    return p.netloc, p.path.lstrip("/")


def _split_bucket(url, needs):
    """(bucket or container, object name) of ``url``; ``needs`` says what a URL of its
    scheme needs, for the error."""
    p = urllib.parse.urlsplit(url)
    if not p.netloc or not p.path.strip("/"):
        raise ValueError(f"{needs}: {redact(url)!r}")
    return p.netloc, p.path.lstrip("/")


# one lock per store's client cache; a fork while another thread makes a client (warm)
# would leave the child a lock held forever: the child gets new ones
_LOCKS = {"s3": threading.Lock(), "gcs": threading.Lock(), "az": threading.Lock()}


def _after_fork():
    for name in _LOCKS:
        _LOCKS[name] = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def warm(url: str, /, *, timeout: float | None = None) -> threading.Thread | None:
    """Make this process's client for ``url``'s store in a background thread (S3: the
    boto3 session, client and credentials chain, which take a good part of a second),
    so that the first request of a pass does not wait for it. Returns the thread (None
    where the store keeps no client, or the URL is not remote). Fork-safe: a client is
    used only in the process that made it (a forked child makes its own), and a fork
    while the thread runs leaves the child usable locks. Failures are left to the first
    request (which reports them)."""
    try:
        store = _store(url)
    except ValueError:
        return None
    if type(store).client is _Store.client:
        return None
    timeout = default_timeout() if timeout is None else timeout

    def run():
        with contextlib.suppress(Exception):
            store.client(timeout)

    thread = threading.Thread(target=run, name="turboloader-warm", daemon=True)
    thread.start()
    return thread


# S3 ----------------------------------------------------------------------------------------

_s3_client = {}

_S3_MISSING = {"NoSuchKey", "NoSuchBucket", "404", "NotFound"}
_S3_TRANSIENT = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
                 "RequestTimeTooSkewed", "InternalError", "ServiceUnavailable", "503", "500"}


def _s3(timeout=None):
    """The process's S3 client for this stall ``timeout``."""
    def make():
        from turboloader.errors import require

        boto3 = require("boto3", extra="remote", feature="s3:// shards")
        Config = require("botocore.config", extra="remote", feature="s3:// shards",
                         package="boto3").Config
        kw = {} if timeout is None else {"read_timeout": timeout,
                                         "connect_timeout": min(timeout, 60)}
        # boto3's standard chain: env (AWS_ENDPOINT_URL ...), config files, roles; one
        # client per process, shared by its threads (boto3 clients are thread-safe), with
        # as many kept connections as the fetch pool opens (boto3 keeps 10: the others
        # would be closed after each request and opened again)
        return boto3.session.Session().client(
            "s3", config=Config(retries={"mode": "standard"},
                                max_pool_connections=_POOL_CONNECTIONS, **kw))

    return _per_process(_s3_client, "s3", (os.getpid(), timeout), make)


def _s3_split(url):
    return _split_bucket(url, "an S3 URL needs a bucket and a key")


_s3_modules = None


def _botocore():
    """``botocore.exceptions`` (and ``urllib3.exceptions`` or None, kept for
    :meth:`_S3.errors`), imported once under the S3 client's lock: a request's thread
    importing them while :func:`warm`'s thread imports boto3 (botocore, urllib3) could
    meet it in the import system's module locks in the other order, which Python reports
    as a ``_DeadlockError`` (a construction over ``s3://`` shards failed with it: the
    index lookups' requests start while the client is being made)."""
    global _s3_modules
    mods = _s3_modules
    if mods is None:
        from turboloader.errors import require

        with _LOCKS["s3"]:
            mods = _s3_modules
            if mods is None:
                bx = require("botocore.exceptions", extra="remote", feature="s3:// shards",
                             package="boto3")
                try:
                    import urllib3.exceptions as ux
                except ImportError:
                    ux = None
                mods = _s3_modules = (bx, ux)
    return mods[0]


def _s3_error(url, exc, bx):
    """The error for a botocore exception raised by a request."""
    if isinstance(exc, bx.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if code in _S3_MISSING or status == 404:
            return RemoteShardNotFoundError(errno.ENOENT, f"no such S3 object ({code or status})")
        if code in _S3_TRANSIENT or status >= 500 or status == 429:
            return _Transient(f"S3 {code or status}")
        return RemoteShardError(f"S3 refused the request: {code or status}")
    if isinstance(exc, (bx.NoCredentialsError, bx.ParamValidationError)):
        return RemoteShardError(f"S3 client: {type(exc).__name__}")
    return _Transient(type(exc).__name__)


class _S3(_Store):
    def client(self, timeout):
        _s3(timeout)

    def open(self, url, start, end, timeout):
        bx = _botocore()
        bucket, key = _s3_split(url)
        try:
            resp = _s3(timeout).get_object(Bucket=bucket, Key=key, Range=_bytes_range(start, end))
        except bx.ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code", "")) == "InvalidRange":
                return io.BytesIO(b""), start, None
            raise _s3_error(url, exc, bx) from exc
        except (bx.BotoCoreError, ConnectionError, socket.timeout) as exc:
            raise _s3_error(url, exc, bx) from exc
        try:
            total = _range_total(url, start, resp.get("ContentRange"), resp.get("ContentLength"))
        except RemoteShardError:
            resp["Body"].close()
            raise
        return resp["Body"], total, resp.get("ETag")

    def stat(self, url, timeout):
        bx = _botocore()
        bucket, key = _s3_split(url)
        try:
            head = _s3(timeout).head_object(Bucket=bucket, Key=key)
        except (bx.BotoCoreError, bx.ClientError, ConnectionError, socket.timeout) as exc:
            raise _s3_error(url, exc, bx) from exc
        return ObjectStat(int(head["ContentLength"]), head.get("ETag"))

    def put(self, url, data, timeout):
        bx = _botocore()
        bucket, key = _s3_split(url)
        try:
            _s3(timeout).put_object(Bucket=bucket, Key=key, Body=data)
        except (bx.BotoCoreError, bx.ClientError, ConnectionError, socket.timeout) as exc:
            raise _s3_error(url, exc, bx) from exc

    def list(self, url, prefix, timeout):
        bx = _botocore()
        bucket, folder = _list_split(url)
        try:
            pages = _s3(timeout).get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=folder + prefix)
            return [f"s3://{bucket}/{obj['Key']}" for page in pages
                    for obj in page.get("Contents", ())]
        except (bx.BotoCoreError, bx.ClientError, ConnectionError, socket.timeout) as exc:
            raise _s3_error(url, exc, bx) from exc

    def errors(self):
        bx = _botocore()
        ux = _s3_modules[1]
        return (bx.BotoCoreError,) if ux is None else (bx.BotoCoreError, ux.HTTPError)


# HTTP --------------------------------------------------------------------------------------

def _http_tag(headers):
    """An HTTP response's version tag: its ETag, else its Last-Modified."""
    tag = headers.get("ETag")
    if not tag and headers.get("Last-Modified"):
        tag = "last-modified:" + headers["Last-Modified"]
    return tag


class _HTTP(_Store):
    _errors = (urllib.error.URLError, http.client.HTTPException, ConnectionError,
               socket.timeout, TimeoutError)

    def _request(self, url, start, end, timeout):
        headers = {"Range": _bytes_range(start, end)} if (start or end is not None) else {}
        try:
            return urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                          timeout=timeout)
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code == 416:  # range past the end: nothing left to read
                return None
            raise _status_error(url, exc.code, exc.reason, what="HTTP") from None
        except self._errors as exc:
            raise _Transient(type(exc).__name__) from exc

    def open(self, url, start, end, timeout):
        resp = self._request(url, start, end, timeout)
        if resp is None:
            return io.BytesIO(b""), start, None
        if start and resp.status != 206:
            resp.close()  # the server ignored the Range header: cannot resume
            raise RemoteShardError(f"HTTP server does not honour Range requests "
                                   f"(status {resp.status})")
        try:
            total = _range_total(url, start, resp.headers.get("Content-Range"),
                                 resp.headers.get("Content-Length"))
        except RemoteShardError:
            resp.close()
            raise
        return resp, total, _http_tag(resp.headers)

    def stat(self, url, timeout):
        # a 1-byte range rather than HEAD: every server that resumes reads answers it
        resp = self._request(url, 0, 1, timeout)
        if resp is None:
            return ObjectStat(0, None)
        with resp:
            total = _range_total(url, 0, resp.headers.get("Content-Range"),
                                 resp.headers.get("Content-Length"))
            tag = _http_tag(resp.headers)
        if total is None:
            raise RemoteShardError(f"{redact(url)}: the server does not say the object's size")
        return ObjectStat(total, tag)

    def errors(self):
        return (http.client.HTTPException, ConnectionError, socket.timeout, TimeoutError)


# GCS ---------------------------------------------------------------------------------------

_gcs_session = {}


def _gcs():
    """(session, endpoint) of this process: a ``requests`` session authorised by
    google-auth's default credentials, or a plain one for ``STORAGE_EMULATOR_HOST``."""
    def make():
        from turboloader.errors import require

        requests = require("requests", extra="gcs", feature="gs:// shards",
                           package="google-cloud-storage")
        emulator = os.environ.get("STORAGE_EMULATOR_HOST")
        if emulator:
            endpoint = emulator if "://" in emulator else "http://" + emulator
            return requests.Session(), endpoint.rstrip("/")
        gauth = require("google.auth", extra="gcs", feature="gs:// shards",
                        package="google-cloud-storage")
        treq = require("google.auth.transport.requests", extra="gcs",
                       feature="gs:// shards", package="google-cloud-storage")
        creds, _ = gauth.default(scopes=["https://www.googleapis.com/auth/devstorage.read_write"])
        return treq.AuthorizedSession(creds), "https://storage.googleapis.com"

    return _per_process(_gcs_session, "gcs", (os.getpid(),), make)


def _gcs_split(url):
    bucket, name = _split_bucket(url, "a gs:// URL needs a bucket and an object name")
    return bucket, urllib.parse.quote(name, safe="")


class _GCS(_Store):
    def client(self, timeout):
        _gcs()

    def _call(self, url, method, path, timeout, **kw):
        session, endpoint = _gcs()  # first: a missing package is a MissingDependencyError
        import requests

        try:
            resp = session.request(method, endpoint + path, timeout=(min(timeout, 60), timeout),
                                   **kw)
        except (requests.RequestException, OSError) as exc:
            raise _Transient(type(exc).__name__) from None
        if resp.status_code >= 300 and resp.status_code != 416:
            reason = resp.reason
            resp.close()
            raise _status_error(url, resp.status_code, reason, what="GCS")
        return resp

    def open(self, url, start, end, timeout):
        bucket, name = _gcs_split(url)
        resp = self._call(url, "GET", f"/download/storage/v1/b/{bucket}/o/{name}?alt=media",
                          timeout, stream=True, headers={"Range": _bytes_range(start, end)})
        if resp.status_code == 416:
            resp.close()
            return io.BytesIO(b""), start, None
        try:
            if start and resp.status_code != 206:
                raise RemoteShardError(f"{redact(url)}: the server ignored the Range request "
                                       f"(status {resp.status_code})")
            cr = resp.headers.get("Content-Range") if resp.status_code == 206 else None
            total = _range_total(url, start, cr, resp.headers.get("Content-Length"))
        except RemoteShardError:
            resp.close()
            raise
        raw = resp.raw
        raw.decode_content = False
        # stat's tag is the generation; a download says it in x-goog-generation (GCS does;
        # an emulator may not: then the tag is unknown here)
        return raw, total, resp.headers.get("x-goog-generation")

    def stat(self, url, timeout):
        bucket, name = _gcs_split(url)
        resp = self._call(url, "GET", f"/storage/v1/b/{bucket}/o/{name}", timeout)
        try:
            meta = resp.json()
        except ValueError:
            raise _Transient("GCS metadata is not JSON") from None
        tag = meta.get("generation") or meta.get("etag") or meta.get("md5Hash")
        return ObjectStat(int(meta["size"]), None if tag is None else str(tag))

    def put(self, url, data, timeout):
        bucket, _ = _gcs_split(url)
        name = urllib.parse.urlsplit(url).path.lstrip("/")
        self._call(url, "POST", f"/upload/storage/v1/b/{bucket}/o", timeout,
                   params={"uploadType": "media", "name": name}, data=data,
                   headers={"Content-Type": "application/octet-stream"}).close()

    def list(self, url, prefix, timeout):
        bucket, folder = _list_split(url)
        out, params = [], {"prefix": folder + prefix}
        while True:
            with self._call(url, "GET", f"/storage/v1/b/{bucket}/o", timeout,
                            params=params) as resp:
                try:
                    page = resp.json()
                except ValueError:
                    raise _Transient("GCS listing is not JSON") from None
            out += [f"gs://{bucket}/{item['name']}" for item in page.get("items", ())]
            if not page.get("nextPageToken"):
                return out
            params = {"prefix": folder + prefix, "pageToken": page["nextPageToken"]}

    def errors(self):
        errs = []
        with contextlib.suppress(ImportError):
            import requests
            import urllib3.exceptions as ux

            errs += [requests.RequestException, ux.HTTPError]
        return tuple(errs)


# Azure -------------------------------------------------------------------------------------

_az_client = {}


def _azure(timeout):
    """This process's ``BlobServiceClient`` (see the module docstring for the account and
    credentials); its own retries are off: :class:`_RetryingReader` retries."""
    def make():
        from turboloader.errors import require

        blob = require("azure.storage.blob", extra="azure", feature="az:// shards",
                       package="azure-storage-blob")
        kw = {"retry_total": 0, "connection_timeout": min(timeout, 60), "read_timeout": timeout}
        conn = os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
        if conn:
            return blob.BlobServiceClient.from_connection_string(conn, **kw)
        account_url = os.environ.get("AZURE_STORAGE_ACCOUNT_URL")
        account = os.environ.get("AZURE_STORAGE_ACCOUNT")
        if not account_url and account:
            account_url = f"https://{account}.blob.core.windows.net"
        if not account_url:
            raise RemoteShardError(
                "az:// URLs need an account: set AZURE_STORAGE_CONNECTION_STRING, "
                "or AZURE_STORAGE_ACCOUNT_URL / AZURE_STORAGE_ACCOUNT")
        cred = os.environ.get("AZURE_STORAGE_SAS_TOKEN")
        if not cred and os.environ.get("AZURE_STORAGE_KEY") and account:
            cred = {"account_name": account, "account_key": os.environ["AZURE_STORAGE_KEY"]}
        if not cred:
            with contextlib.suppress(ImportError):
                from azure.identity import DefaultAzureCredential

                cred = DefaultAzureCredential()
        return blob.BlobServiceClient(account_url, credential=cred, **kw)

    return _per_process(_az_client, "az", (os.getpid(), timeout), make)


def _az_split(url):
    return _split_bucket(url, "an az:// URL needs a container and a blob name")


def _az_error(url, exc):
    import azure.core.exceptions as ax

    if isinstance(exc, ax.ResourceNotFoundError):
        return RemoteShardNotFoundError(errno.ENOENT, "no such Azure blob")
    if isinstance(exc, ax.HttpResponseError) and getattr(exc, "status_code", None):
        code = exc.status_code
        if code == 416:
            return None
        return _status_error(url, code, getattr(exc, "reason", ""), what="Azure")
    if isinstance(exc, (ax.ServiceRequestError, ax.ServiceResponseError, ax.IncompleteReadError,
                        ax.HttpResponseError, ConnectionError, socket.timeout, OSError)):
        return _Transient(type(exc).__name__)
    if isinstance(exc, ax.ClientAuthenticationError):
        return RemoteShardError(f"Azure refused the credentials: {type(exc).__name__}")
    return RemoteShardError(f"Azure client: {type(exc).__name__}: {_scrub(exc)}")


class _Azure(_Store):
    def client(self, timeout):
        _azure(timeout)

    def _blob(self, url, timeout):
        container, name = _az_split(url)
        return _azure(timeout).get_blob_client(container, name)

    def open(self, url, start, end, timeout):
        client = self._blob(url, timeout)
        first = {}

        def fetch(a, b):
            answers = []  # (Range asked, Content-Range answered) of each response

            def hook(resp):
                asked = resp.http_request.headers
                answers.append((asked.get("x-ms-range") or asked.get("Range") or "",
                                resp.http_response.headers.get("Content-Range")))
                first.setdefault("etag", resp.http_response.headers.get("ETag"))

            try:
                down = client.download_blob(offset=a, length=b - a, max_concurrency=1,
                                            timeout=timeout, raw_response_hook=hook)
                data = down.readall()
                total = None
                # the SDK reports the range it asked for: what each answer said is checked
                for asked, cr in answers:
                    m = re.match(r"bytes=(\d+)-", asked)
                    total = _range_total(url, int(m.group(1)) if m else 0, cr, None)
            except RemoteShardError:
                raise
            except Exception as exc:  # mapped: not found, retried, refused
                err = _az_error(url, exc)
                if err is None:
                    return b""
                raise err from None
            if "total" not in first:
                first["total"] = total
            elif total is not None and first["total"] is not None and total != first["total"]:
                raise RemoteShardError(f"{redact(url)} is {total} bytes now, {first['total']} "
                                       f"when reading began: it changed while being read")
            if len(data) > b - a:
                raise RemoteShardError(f"{redact(url)}: asked for {b - a} bytes from offset "
                                       f"{a}, the server sent {len(data)}")
            return data

        data = fetch(start, start + _SDK_CHUNK if end is None else min(end, start + _SDK_CHUNK))
        total = first.get("total")
        return (_Chunked(fetch, start + len(data), end, total, head=data), total,
                first.get("etag"))

    def stat(self, url, timeout):
        try:
            props = self._blob(url, timeout).get_blob_properties(timeout=timeout)
        except Exception as exc:
            err = _az_error(url, exc)
            raise (err or RemoteShardError(f"{redact(url)}: no properties")) from None
        return ObjectStat(int(props.size), props.etag)

    def put(self, url, data, timeout):
        try:
            self._blob(url, timeout).upload_blob(data, overwrite=True, timeout=timeout)
        except Exception as exc:
            err = _az_error(url, exc)
            raise (err or RemoteShardError(f"{redact(url)}: upload refused")) from None

    def list(self, url, prefix, timeout):
        container, folder = _list_split(url)
        try:
            blobs = _azure(timeout).get_container_client(container).list_blobs(
                name_starts_with=(folder + prefix) or None, timeout=timeout)
            return [f"az://{container}/{b.name}" for b in blobs]
        except RemoteShardError:
            raise
        except Exception as exc:
            err = _az_error(url, exc)
            raise (err or RemoteShardError(f"{redact(url)}: listing refused")) from None


# fsspec ------------------------------------------------------------------------------------

def _fsspec_tag(info):
    """The version tag in an fsspec ``info`` dict (the first of the usual fields)."""
    for k in ("ETag", "etag", "generation", "md5Hash", "md5", "mtime", "LastModified",
              "last_modified", "created"):
        if info.get(k) is not None:
            return f"{k}:{info[k]}"
    return None


class _Fsspec(_Store):
    def _fs(self, url):
        import fsspec.core

        return fsspec.core.url_to_fs(url)

    def _map(self, url, exc):
        if isinstance(exc, FileNotFoundError):
            return RemoteShardNotFoundError(errno.ENOENT, "no such object")
        if isinstance(exc, (ConnectionError, TimeoutError, socket.timeout, OSError)):
            return _Transient(type(exc).__name__)
        return RemoteShardError(f"fsspec: {type(exc).__name__}: {_scrub(exc)}")

    def open(self, url, start, end, timeout):
        try:
            fs, path = self._fs(url)
            info = fs.info(path)
            size = int(info["size"])
        except Exception as exc:
            raise self._map(url, exc) from None

        def fetch(a, b):
            try:
                return fs.cat_file(path, start=a, end=b)
            except Exception as exc:
                raise self._map(url, exc) from None

        return _Chunked(fetch, start, end, size), size, _fsspec_tag(info)

    def stat(self, url, timeout):
        try:
            fs, path = self._fs(url)
            info = fs.info(path)
        except Exception as exc:
            raise self._map(url, exc) from None
        return ObjectStat(int(info["size"]), _fsspec_tag(info))

    def put(self, url, data, timeout):
        try:
            fs, path = self._fs(url)
            fs.pipe_file(path, data)
        except Exception as exc:
            raise self._map(url, exc) from None

    def list(self, url, prefix, timeout):
        # url: the folder (ends with "/"); an fsspec file system lists folders, not prefixes
        try:
            fs, path = self._fs(url)
            root = path.rstrip("/")
            found = fs.find(root) if fs.exists(root) else []
        except Exception as exc:
            raise self._map(url, exc) from None
        out = []
        for name in found:
            if name.startswith(root + "/"):
                rel = name[len(root) + 1:]
                if rel.startswith(prefix):
                    out.append(url + rel)
        return out


_STORES = {"s3": _S3(), "gs": _GCS(), "az": _Azure(), "http": _HTTP(), "https": _HTTP()}
_FSSPEC = _Fsspec()


def _store(url) -> _Store:
    scheme = _scheme(url)
    store = _STORES.get(scheme)
    if store is not None:
        return store
    if scheme in _fsspec_protocols():
        return _FSSPEC
    raise ValueError(f"not a remote URL: {redact(url)!r}")


def _read_errors(store):
    errs = [ConnectionError, socket.timeout, TimeoutError, http.client.HTTPException, _Transient]
    try:
        errs += list(store.errors())
    except ImportError:
        pass
    return tuple(errs)


class _Retry:
    """Exponential backoff with jitter between failed attempts; ``retries`` failures in a
    row raise :class:`RemoteShardError` naming the URL."""

    def __init__(self, url, retries, backoff, max_backoff):
        self.url = url
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self._jitter = random.Random(hash((os.getpid(), url, time.time_ns())))

    def wait(self, failures, cause, fail):
        """Sleep before attempt ``failures + 1``, or raise once ``failures > retries``.
        ``cause``: what failed (quoted with credentials removed)."""
        if failures > self.retries:
            err = RemoteShardError(f"remote shard unavailable after {failures} failed "
                                   f"attempts: {type(cause).__name__}: {_scrub(cause)}")
            raise fail(err) from None  # the cause's text may hold credentials: not chained
        delay = min(self.max_backoff, self.backoff * 2 ** (failures - 1))
        time.sleep(delay * (0.5 + self._jitter.random()))


def _describe(exc):
    """``exc`` with its cause's class, for a retry's message (``_Transient`` wraps)."""
    cause = exc.__cause__ if isinstance(exc, _Transient) and exc.__cause__ else exc
    return cause


def _plain_response(body):
    """The ``http.client`` response under an S3 body (botocore's ``StreamingBody`` over
    urllib3's response), when its bytes can be read straight into the caller's buffer: a
    body of known length, neither chunked nor content-encoded, not read yet. Else None (the
    body is read through its SDK). Reading it directly skips the SDK's two copies of every
    byte (``bytes`` per read, then into the part buffer): a fifth of a fetch thread's CPU
    per shard, requests included (measured against moto, s4-stream branch report). A
    body that checks a checksum as it is read is left to its SDK."""
    kind = type(body)
    if (kind.__module__, kind.__name__) != ("botocore.response", "StreamingBody"):
        return None  # e.g. botocore's StreamingChecksumBody: its reads check a checksum
    stream = getattr(body, "_raw_stream", None)
    resp = getattr(stream, "_fp", None)
    if type(resp) is not http.client.HTTPResponse or resp.chunked or resp.length is None:
        return None
    if getattr(stream, "_fp_bytes_read", None) != 0 or \
            stream.headers.get("content-encoding", "identity").lower() not in ("identity", ""):
        return None
    if not callable(getattr(stream, "release_conn", None)):
        return None
    return resp


class _RetryingReader(io.RawIOBase):
    """A sequential raw stream over the bytes ``[start, end)`` of a remote object that
    re-opens at the current byte on transient errors and stalls, with exponential backoff;
    ``retries`` failures in a row raise."""

    def __init__(self, url, *, retries=5, backoff=0.25, max_backoff=8.0, timeout=None,
                 start=0, end=None):
        self.url = url
        self.retries = int(retries)
        self.timeout = default_timeout() if timeout is None else timeout
        self.pos = int(start)
        self.end = None if end is None else int(end)
        self.size = None
        self.attempts = 0  # connections opened (for tests and stats)
        self._body = None
        self._raw = None  # the body's http.client response, read directly (or None)
        self._stalled = False  # the last read ran out of time before its bytes came
        self._slow = 0  # stalled requests in a row
        self._store = _store(url)
        self._errors = _read_errors(self._store)
        self._retry = _Retry(url, retries, backoff, max_backoff)

    def readable(self):
        return True

    def _fail(self, exc, *, note=None):
        if getattr(exc, "_tl_located", False):
            return exc
        exc._tl_located = True
        exc.add_note(f"remote shard {redact(self.url)}, at byte offset {self.pos}"
                     + (f" of {self.size}" if self.size is not None else ""))
        if note:
            exc.add_note(note)
        return exc

    def _stop(self):
        """Where this reader ends: ``end``, the object's size, or None (unknown)."""
        if self.end is None:
            return self.size
        return self.end if self.size is None else min(self.end, self.size)

    def _connect(self):
        failures = 0
        while True:
            try:
                self.attempts += 1
                opened = self._store.open(self.url, self.pos, self.end, self.timeout)
                body, total = opened[0], opened[1]
            except _Transient as exc:
                failures += 1
                self._retry.wait(failures, _describe(exc), self._fail)
                continue
            except RemoteShardError as exc:
                raise self._fail(exc) from None
            if total is not None:
                if self.size is not None and total != self.size:
                    with contextlib.suppress(Exception):
                        body.close()
                    err = RemoteShardError(
                        f"{redact(self.url)} is {total} bytes now, {self.size} when reading "
                        f"began: it changed while being read")
                    raise self._fail(err)
                self.size = total
                _seen(self.url, ObjectStat(total, opened[2] if len(opened) > 2 else None))
            self._body = body
            self._raw = _plain_response(body)
            return

    def readinto(self, buf):
        n = len(buf)
        stop = self._stop()
        if stop is not None:
            n = min(n, stop - self.pos)
        if n <= 0:
            return 0
        failures = 0
        while True:
            if self._body is None:
                self._connect()
                stop = self._stop()
                if stop is not None:
                    n = min(n, stop - self.pos)
                    if n <= 0:
                        return 0
            raw = self._raw
            try:
                if raw is not None:  # straight into the caller's buffer (see _plain_response)
                    with memoryview(buf) as view:
                        k = raw.readinto(view[:n])
                    data = None
                    if raw.length == 0:  # the whole answer: its connection serves the next
                        self._release()
                else:
                    data = self._read(n)
                    k = len(data)
            except RemoteShardError as exc:
                self._drop()
                raise self._fail(exc) from None
            except self._errors as exc:
                self._drop()
                failures += 1
                self._retry.wait(failures, _describe(exc), self._fail)
                continue
            stop = self._stop()
            if not k and stop is not None and self.pos < stop:
                # the connection ended early (killed): resume from here
                self._drop()
                failures += 1
                self._retry.wait(failures, ConnectionError(
                    f"connection closed at byte {self.pos} of {self.size}"), self._fail)
                continue
            if k > n:  # a body longer than asked for: never delivered
                self._drop()
                raise self._fail(RemoteShardError(
                    f"{redact(self.url)}: the server sent more bytes than the range asked for"))
            if data is not None:
                buf[:k] = data
            self.pos += k
            if self._stalled:  # keep what came; the rest is asked for again, or it is over
                self._stalled = False
                self._drop()
                self._slow += 1
                if self._slow > self.retries:
                    err = RemoteShardError(
                        f"remote shard too slow: {self._slow} requests in a row delivered "
                        f"fewer than {n} bytes in {self.timeout} s")
                    raise self._fail(err)
            else:
                self._slow = 0
            return k

    def _read(self, n):
        """Up to ``n`` bytes of the open request. ``timeout`` bounds the socket's waits and
        also the whole read: a server that trickles bytes (each wait shorter than the
        timeout) has ``timeout`` seconds to deliver ``n`` (or the end); then the request
        counts as stalled and is made again from where it stopped."""
        body = self._body
        read1 = getattr(body, "read1", None)
        if read1 is None or not self.timeout:
            return body.read(n)
        deadline = time.monotonic() + self.timeout
        parts, got = [], 0
        while got < n:
            part = read1(n - got)
            if not part:
                break
            parts.append(part)
            got += len(part)
            if got < n and time.monotonic() > deadline:
                self._stalled = True
                break
        return b"".join(parts)

    def _release(self):
        """The answer was read whole: its connection goes back to the SDK's pool (as
        when the SDK reads the end itself), and the body is done."""
        release = getattr(getattr(self._body, "_raw_stream", None), "release_conn", None)
        if release is not None:
            release()
        self._raw = None
        self._drop()

    def _drop(self):
        self._raw = None
        body, self._body = self._body, None
        if body is not None:
            with contextlib.suppress(Exception):
                body.close()

    def close(self):
        self._drop()
        super().close()


def open_remote(url: str, /, *, retries: int = 5, backoff: float = 0.25,
                timeout: float | None = None) -> io.BufferedReader:
    """A buffered sequential binary file over a remote object, retrying as described in
    the module docstring.

    Args:
        url: ``s3://bucket/key``, ``gs://bucket/object``, ``az://container/blob``,
            ``http(s)://...``, or an ``fsspec`` URL.
        retries: failed attempts in a row tolerated before :class:`RemoteShardError`.
        backoff: first backoff in seconds (doubled per failure, capped at 8 s, jittered).
        timeout: the stall timeout in seconds (default :func:`default_timeout`): each
            socket wait, and for HTTP and GCS each read of up to 1 MiB as a whole, so a
            connection that stalls or trickles bytes is dropped and resumed; ``retries``
            stalls in a row give up.

    Raises:
        RemoteShardNotFoundError: the object does not exist (raised on first read).
        RemoteShardError: unreachable after the retries, or the request was refused.

    Example:
        >>> with open_remote("https://example.org/train-0000.tar") as f:   # doctest: +SKIP
        ...     header = f.read(512)
    """
    return io.BufferedReader(_RetryingReader(url, retries=retries, backoff=backoff,
                                             timeout=timeout), buffer_size=_CHUNK)


def read_range(url: str, start: int, end: int, /, *, retries: int = 5, backoff: float = 0.25,
               timeout: float | None = None) -> bytes:
    """Exactly the bytes ``[start, end)`` of a remote object, in one ranged request
    (resumed at the byte where it stopped on a failure or stall, as :func:`open_remote`).

    Raises:
        RemoteShardError: the object has fewer than ``end`` bytes (the message names the
            URL, the range and the size), or it stayed unavailable after the retries.
        RemoteShardNotFoundError: the object does not exist.

    Example:
        >>> header = read_range("s3://bucket/train-0000.tar", 0, 512)   # doctest: +SKIP
    """
    start, end = int(start), int(end)
    if not 0 <= start <= end:
        raise ValueError(f"need 0 <= start <= end, got [{start}, {end})")
    if start == end:
        return b""
    reader = _RetryingReader(url, retries=retries, backoff=backoff, timeout=timeout,
                             start=start, end=end)
    out = bytearray(end - start)
    view = memoryview(out)
    got = 0
    try:
        while got < len(out):
            k = reader.readinto(view[got:])
            if not k:
                break
            got += k
    finally:
        reader.close()
    if got != len(out):
        raise reader._fail(RemoteShardError(
            f"{redact(url)}: asked for the bytes [{start}, {end}), the object has "
            f"{reader.size if reader.size is not None else start + got} bytes"))
    return bytes(out)


def _with_retries(url, call, *, retries, backoff, max_backoff=8.0):
    retry = _Retry(url, retries, backoff, max_backoff)

    def fail(exc):
        exc.add_note(f"remote object {redact(url)}")
        return exc

    failures = 0
    while True:
        try:
            return call()
        except _Transient as exc:
            failures += 1
            retry.wait(failures, _describe(exc), fail)
        except RemoteShardError as exc:
            raise fail(exc) from None


def stat(url: str, /, *, retries: int = 5, backoff: float = 0.25,
         timeout: float | None = None) -> ObjectStat:
    """The size and version tag (:class:`ObjectStat`) of a remote object: one metadata
    request (HTTP: a 1-byte range request), retried as :func:`open_remote`.

    Raises:
        RemoteShardNotFoundError: the object does not exist.
        RemoteShardError: unreachable after the retries, refused, or no size given.
    """
    timeout = default_timeout() if timeout is None else timeout
    store = _store(url)
    st = _with_retries(url, lambda: store.stat(url, timeout), retries=retries,
                       backoff=backoff)
    _seen(url, st)  # the fetch pool then asks for the object's parts at once
    return st


def write_object(url: str, data: bytes, /, *, retries: int = 5, backoff: float = 0.25,
                 timeout: float | None = None) -> None:
    """Write ``data`` as the whole object ``url`` (``s3://``, ``gs://``, ``az://``,
    ``fsspec`` URLs; not ``http(s)://``), retried as :func:`open_remote`.

    Raises:
        RemoteShardError: the store refused it, or stayed unavailable.
    """
    timeout = default_timeout() if timeout is None else timeout
    store = _store(url)
    _with_retries(url, lambda: store.put(url, bytes(data), timeout), retries=retries,
                  backoff=backoff)


_MAGIC = re.compile(r"[*?[]")


def can_glob(url: str) -> bool:
    """True for a remote URL with a glob character (``*``, ``?``, ``[``) in its object name,
    on a store that lists (``s3://``, ``gs://``, ``az://``, ``fsspec`` URLs; not
    ``http(s)://``, where ``?`` starts a query string and nothing lists)."""
    return (is_remote(url) and _scheme(url) not in ("http", "https")
            and _MAGIC.search(url.partition("://")[2].partition("/")[2]) is not None)


def _shown(pattern):
    """``pattern`` without user info (``redact`` would also cut a ``?`` glob as a query)."""
    scheme, _, rest = pattern.partition("://")
    netloc, slash, path = rest.partition("/")
    return f"{scheme}://{netloc.rpartition('@')[2]}{slash}{path}"


def _name_match(pattern: str, name: str) -> bool:
    """``glob``'s rule on ``/``-separated names: ``*``, ``?`` and ``[...]`` match within
    one path segment, never across a ``/``."""
    import fnmatch

    pat, got = pattern.split("/"), name.split("/")
    return len(pat) == len(got) and all(fnmatch.fnmatchcase(g, p) for g, p in zip(got, pat))


def glob_objects(pattern: str, /, *, retries: int = 5, backoff: float = 0.25,
                 timeout: float | None = None) -> list[str]:
    """The URLs of the objects matching ``pattern`` (``s3://bucket/train/train-*.tar``),
    sorted, as :func:`glob.glob` on a local folder: ``*``, ``?`` and ``[...]`` match within
    one ``/``-separated segment of the object name (a name starting with ``.`` matches
    too: stores have no hidden objects). The store is listed from the pattern's literal
    prefix, every page (S3 ``ListObjectsV2``, the GCS JSON API, Azure ``List Blobs``,
    ``fsspec``'s ``find``), retried as :func:`open_remote`.

    Raises:
        RemoteShardNotFoundError: nothing matches (or the bucket does not exist); the
            message names the pattern.
        RemoteShardError: the store refused the listing (no permission to list), or
            stayed unavailable; the message names the pattern, never credentials.
        ValueError: the pattern has no glob character in its object name, or is not a
            URL of a store that lists (``http(s)://`` is not).

    Example:
        >>> glob_objects("s3://bucket/train/train-*.tar")            # doctest: +SKIP
        ['s3://bucket/train/train-00000.tar', 's3://bucket/train/train-00001.tar']
    """
    scheme, _, rest = pattern.partition("://")
    bucket, _, name = rest.partition("/")
    magic = _MAGIC.search(name)
    if magic is None or not can_glob(pattern):
        raise ValueError(f"not a glob over a store that lists: {_shown(pattern)!r}")
    literal = name[:magic.start()]
    folder = f"{scheme}://{bucket}/{literal.rpartition('/')[0]}"
    folder += "/" if not folder.endswith("/") else ""
    prefix = literal.rpartition("/")[2]
    timeout = default_timeout() if timeout is None else timeout
    store = _store(pattern)

    def fail(exc):
        exc.add_note(f"listing the objects matching {_shown(pattern)}")
        return exc

    try:
        urls = _with_retries(folder, lambda: store.list(folder, prefix, timeout),
                             retries=retries, backoff=backoff)
    except RemoteShardError as exc:
        raise fail(exc) from None
    want = name[len(literal.rpartition("/")[0]) + 1 if "/" in literal else 0:]
    out = sorted(u for u in urls if u.startswith(folder) and _name_match(want, u[len(folder):]))
    if not out:
        raise RemoteShardNotFoundError(errno.ENOENT, f"no object matches {_shown(pattern)} "
                                       f"({len(urls)} listed under {_shown(folder)}{prefix}*)")
    return out
