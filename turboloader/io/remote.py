"""Remote shards (``s3://``, ``http://``, ``https://``): a retrying sequential reader.

Reading. :func:`open_remote` returns a buffered, *sequential* file object over a remote
object that starts at byte 0 and streams: nothing is downloaded ahead of what is read.
A connection that fails mid-stream (reset, timeout, truncated body, HTTP 5xx/429, S3
``SlowDown``) is re-opened at the byte where it stopped, with a ``Range`` request, after
an exponential backoff (the answer must start at that byte and give the same total size,
else :class:`RemoteShardError` names both offsets: never repeated or skipped bytes); after
``retries`` failed attempts in a row the read raises :class:`RemoteShardError` (a
:class:`~turboloader.errors.TurboLoaderError` and an ``OSError``) with notes naming the URL
(query string removed: presigned URLs carry credentials) and the byte offset. A missing
object (HTTP 404/410, S3 ``NoSuchKey``) is :class:`RemoteShardNotFoundError` (also a
``FileNotFoundError``) at once, without retries.

* ``s3://bucket/key`` is read with ``boto3`` (``get_object`` with ``Range``). Endpoint,
  region, credentials and botocore's own retry settings come from boto3's standard
  configuration: environment (``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3`` for
  S3-compatible stores, ``AWS_PROFILE``, ``AWS_ACCESS_KEY_ID`` ...), ``~/.aws/config``,
  instance roles. One client per process, created on first use (never shared over fork).
* ``http(s)://`` is read with the standard library (``urllib.request``): proxies and
  certificates as configured for it.

The node-local shard cache built on this reader is :mod:`turboloader.io.shard_cache`.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import io
import os
import random
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from turboloader.errors import RemoteShardError, RemoteShardNotFoundError

__all__ = [
    "REMOTE_SCHEMES",
    "RemoteShardError",
    "RemoteShardNotFoundError",
    "is_remote",
    "open_remote",
    "redact",
    "url_path",
]

#: URL schemes read remotely.
REMOTE_SCHEMES = ("s3", "http", "https")
_CHUNK = 1 << 20


def is_remote(url) -> bool:
    """True for ``s3://``, ``http://`` and ``https://`` URLs."""
    if not isinstance(url, str):
        return False
    scheme, sep, _ = url.partition("://")
    return bool(sep) and scheme.lower() in REMOTE_SCHEMES


def redact(url: str) -> str:
    """``url`` without query string, fragment or user info (they may hold credentials)."""
    p = urllib.parse.urlsplit(url)
    netloc = p.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((p.scheme, netloc, p.path, "", ""))


def url_path(url: str) -> str:
    """The path component of a URL (for suffix checks such as ``.tar.gz``)."""
    return urllib.parse.urlsplit(url).path if is_remote(url) else url


# -- transports -----------------------------------------------------------------------------

class _Transient(Exception):
    """Internal: a failure worth retrying (wraps the original as __cause__)."""


_s3_lock = threading.Lock()
_s3_client = {}


def _s3():
    pid = os.getpid()
    client = _s3_client.get(pid)
    if client is None:
        with _s3_lock:
            client = _s3_client.get(pid)
            if client is None:
                from turboloader.errors import require

                boto3 = require("boto3", extra="remote", feature="s3:// shards")
                Config = require("botocore.config", extra="remote", feature="s3:// shards",
                                 package="boto3").Config

                # boto3's standard chain: env (AWS_ENDPOINT_URL ...), config files, roles
                client = boto3.session.Session().client(
                    "s3", config=Config(retries={"mode": "standard"}))
                _s3_client.clear()
                _s3_client[pid] = client
    return client


def _s3_split(url):
    p = urllib.parse.urlsplit(url)
    if not p.netloc or not p.path.strip("/"):
        raise ValueError(f"an S3 URL needs a bucket and a key: {redact(url)!r}")
    return p.netloc, p.path.lstrip("/")


_S3_MISSING = {"NoSuchKey", "NoSuchBucket", "404", "NotFound"}
_S3_TRANSIENT = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
                 "RequestTimeTooSkewed", "InternalError", "ServiceUnavailable", "503", "500"}


def _s3_open(url, start, timeout):
    """(body with .read(n), total size) for the object from byte ``start``."""
    from turboloader.errors import require

    bx = require("botocore.exceptions", extra="remote", feature="s3:// shards",
                 package="boto3")

    bucket, key = _s3_split(url)
    try:
        resp = _s3().get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-")
    except bx.ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if code in _S3_MISSING:
            raise RemoteShardNotFoundError(errno.ENOENT, f"no such S3 object ({code})") from exc
        if code == "InvalidRange":
            return io.BytesIO(b""), start
        if code in _S3_TRANSIENT or status >= 500 or status == 429:
            raise _Transient(f"S3 {code or status}") from exc
        raise RemoteShardError(f"S3 refused the request: {code or status}") from exc
    except (bx.BotoCoreError, ConnectionError, socket.timeout) as exc:
        if isinstance(exc, (bx.NoCredentialsError, bx.ParamValidationError)):
            raise RemoteShardError(f"S3 client: {type(exc).__name__}") from exc
        raise _Transient(type(exc).__name__) from exc
    try:
        total = _range_total(url, start, resp.get("ContentRange"), resp.get("ContentLength"))
    except RemoteShardError:
        resp["Body"].close()
        raise
    return resp["Body"], total


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


def _http_open(url, start, timeout):
    req = urllib.request.Request(url, headers={"Range": f"bytes={start}-"} if start else {})
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code in (404, 410):
            raise RemoteShardNotFoundError(errno.ENOENT, f"HTTP {exc.code}") from None
        if exc.code == 416:  # range past the end: nothing left to read
            return io.BytesIO(b""), start
        if exc.code >= 500 or exc.code in (408, 429):
            raise _Transient(f"HTTP {exc.code}") from None
        raise RemoteShardError(f"HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, http.client.HTTPException, ConnectionError, socket.timeout,
            TimeoutError) as exc:
        raise _Transient(type(exc).__name__) from exc
    if start and resp.status != 206:
        resp.close()  # the server ignored the Range header: cannot resume
        raise RemoteShardError(f"HTTP server does not honour Range requests (status {resp.status})")
    try:
        total = _range_total(url, start, resp.headers.get("Content-Range"),
                             resp.headers.get("Content-Length"))
    except RemoteShardError:
        resp.close()
        raise
    return resp, total


def _transport(url):
    scheme = url.partition("://")[0].lower()
    if scheme == "s3":
        return _s3_open
    if scheme in ("http", "https"):
        return _http_open
    raise ValueError(f"not a remote URL: {redact(url)!r}")


def _read_errors():
    errs = [ConnectionError, socket.timeout, TimeoutError, http.client.HTTPException]
    try:
        import botocore.exceptions as bx
        import urllib3.exceptions as ux

        errs += [bx.BotoCoreError, ux.HTTPError]
    except ImportError:  # no boto3: HTTP only
        pass
    return tuple(errs)


class _RetryingReader(io.RawIOBase):
    """A sequential raw stream over a remote object that re-opens at the current byte on
    transient errors, with exponential backoff; ``retries`` failures in a row raise."""

    def __init__(self, url, *, retries=5, backoff=0.25, max_backoff=8.0, timeout=60.0):
        self.url = url
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.timeout = timeout
        self.pos = 0
        self.size = None
        self.attempts = 0  # connections opened (for tests and stats)
        self._body = None
        self._stalled = False  # the last read ran out of time before its bytes came
        self._slow = 0  # stalled requests in a row
        self._open = _transport(url)
        self._errors = _read_errors()
        self._jitter = random.Random(hash((os.getpid(), url)))  # spreads retries of many ranks

    def readable(self):
        return True

    def _fail(self, exc, *, note):
        exc.add_note(f"remote shard {redact(self.url)}, at byte offset {self.pos}"
                     + (f" of {self.size}" if self.size is not None else ""))
        if note:
            exc.add_note(note)
        return exc

    def _retry(self, failures, cause):
        if failures > self.retries:
            err = RemoteShardError(
                f"remote shard unavailable after {failures} failed attempts: {cause}")
            raise self._fail(err, note=None) from cause
        delay = min(self.max_backoff, self.backoff * 2 ** (failures - 1))
        time.sleep(delay * (0.5 + self._jitter.random()))

    def _connect(self):
        failures = 0
        while True:
            try:
                self.attempts += 1
                body, total = self._open(self.url, self.pos, self.timeout)
            except _Transient as exc:
                failures += 1
                self._retry(failures, exc.__cause__ or exc)
                continue
            except RemoteShardError as exc:
                raise self._fail(exc, note=None)
            if total is not None:
                if self.size is not None and total != self.size:
                    body.close()
                    err = RemoteShardError(
                        f"{redact(self.url)} is {total} bytes now, {self.size} when reading "
                        f"began: it changed while being read")
                    raise self._fail(err, note=None)
                self.size = total
            self._body = body
            return

    def readinto(self, buf):
        n = len(buf)
        if n == 0 or (self.size is not None and self.pos >= self.size):
            return 0
        failures = 0
        while True:
            if self._body is None:
                self._connect()
                if self.size is not None and self.pos >= self.size:
                    return 0
            try:
                data = self._read(n)
            except self._errors as exc:
                self._drop()
                failures += 1
                self._retry(failures, exc)
                continue
            if not data and self.size is not None and self.pos < self.size:
                # the connection ended early (killed): resume from here
                self._drop()
                failures += 1
                self._retry(failures, ConnectionError(
                    f"connection closed at byte {self.pos} of {self.size}"))
                continue
            k = len(data)
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
                    raise self._fail(err, note=None)
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

    def _drop(self):
        body, self._body = self._body, None
        if body is not None:
            with contextlib.suppress(Exception):
                body.close()

    def close(self):
        self._drop()
        super().close()


def open_remote(url: str, /, *, retries=5, backoff=0.25, timeout=60.0):
    """A buffered sequential binary file over a remote object, retrying as described in
    the module docstring.

    Args:
        url: ``s3://bucket/key`` or ``http(s)://...``.
        retries: failed attempts in a row tolerated before :class:`RemoteShardError`.
        backoff: first backoff in seconds (doubled per failure, capped at 8 s, jittered).
        timeout: seconds for HTTP: each socket wait, and each read of up to 1 MiB as a
            whole, so a server that trickles bytes is re-asked and, ``retries`` stalls in a
            row, given up on (S3 uses botocore's settings).

    Raises:
        RemoteShardNotFoundError: the object does not exist (raised on first read).
        RemoteShardError: unreachable after the retries, or the request was refused.

    Example:
        >>> with open_remote("https://example.org/train-0000.tar") as f:   # doctest: +SKIP
        ...     header = f.read(512)
    """
    return io.BufferedReader(_RetryingReader(url, retries=retries, backoff=backoff,
                                             timeout=timeout), buffer_size=_CHUNK)
