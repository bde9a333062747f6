"""A reverse HTTP proxy on 127.0.0.1 that injects network faults, per request, in front of
any local server (the HTTP test server, moto's S3, a GCS emulator, Azurite).

Each request is forwarded to the upstream over its own connection and answered with
``Connection: close``, so "a connection" and "a request" are the same thing here. Faults
are scripted per request: ``proxy.script("train-0002", "reset", "pass", "stall:3")`` gives
the first request whose path contains ``train-0002`` a reset, the second nothing, the third
a stall; requests past the script (or matching nothing) pass. ``latency`` (seconds added
to every request) and ``rate`` (bytes/s per connection) throttle all requests, as a remote
store seen from one node.

Faults:

* ``reset``: the connection is reset (RST) before any byte of the response.
* ``status:CODE``: the proxy answers ``CODE`` itself (``status:503``, ``status:429``);
  ``slowdown``: S3's ``503 SlowDown`` with its XML body.
* ``cut:N``: the response's head and the first ``N`` bytes of its body, then the
  connection is closed (a body cut short).
* ``stall:S`` / ``stall:S@N``: the head and ``N`` (default 0) bytes of the body, then
  nothing for ``S`` seconds (the connection stays open), then a reset.
* ``wrong_range``: the response's ``Content-Range`` says the bytes start at 0 whatever was
  asked (a server answering the wrong range); the body is passed on.
* ``pass``: forwarded unchanged.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
import time


def _recv_head(sock, buf=b""):
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None, buf
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def _header(lines, name):
    name = name.lower()
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == name.encode():
            return v.strip().decode("latin-1")
    return None


def _reset(sock):
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class FaultProxy:
    """``FaultProxy(upstream_port)``: a context manager; ``url`` is its base URL,
    ``log`` the ``(method, path, fault)`` of every request seen, ``max_active`` the most
    connections open at once."""

    def __init__(self, upstream_port: int, *, latency: float = 0.0, rate: float | None = None,
                 upstream_host: str = "127.0.0.1"):
        self.upstream = (upstream_host, int(upstream_port))
        self.latency = float(latency)
        self.rate = rate
        self.log = []
        self.active = 0  # connections open now
        self.max_active = 0  # the most open at once
        self._scripts = []  # [match, [faults...]]
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self._thread = None

    def script(self, match: str, *faults: str) -> None:
        """The next requests whose path contains ``match`` get ``faults``, in order."""
        with self._lock:
            self._scripts.append([match, list(faults)])

    def faults_left(self) -> int:
        with self._lock:
            return sum(len(f) for _, f in self._scripts)

    def _fault_for(self, path):
        with self._lock:
            for entry in self._scripts:
                if entry[0] in path and entry[1]:
                    return entry[1].pop(0)
        return "pass"

    def __enter__(self):
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            pass
        self._thread.join(timeout=5)
        self._sock.close()

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            if self._stop.is_set():
                conn.close()
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _send(self, sock, data):
        if not self.rate:
            sock.sendall(data)
            return
        step = max(1024, int(self.rate / 50))
        t0 = time.monotonic()
        sent = 0
        for i in range(0, len(data), step):
            sock.sendall(data[i:i + step])
            sent += len(data[i:i + step])
            ahead = sent / self.rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)

    def _handle(self, client):
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            self._handle1(client)
        finally:
            with self._lock:
                self.active -= 1

    def _handle1(self, client):
        up = None
        try:
            client.settimeout(120)
            head, rest = _recv_head(client)
            if head is None:
                client.close()
                return
            lines = head.split(b"\r\n")
            method, path = lines[0].split(b" ")[:2]
            method, path = method.decode(), path.decode("latin-1")
            n = int(_header(lines, "content-length") or 0)
            while len(rest) < n:
                chunk = client.recv(65536)
                if not chunk:
                    break
                rest += chunk
            fault = self._fault_for(path)
            with self._lock:
                self.log.append((method, path, fault))
            if self.latency:
                time.sleep(self.latency)
            if fault == "reset":
                _reset(client)
                return
            if fault.startswith("status:") or fault == "slowdown":
                code = 503 if fault == "slowdown" else int(fault.split(":")[1])
                body = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code>"
                        b"<Message>Please reduce your request rate.</Message></Error>"
                        if fault == "slowdown" else b"")
                client.sendall(f"HTTP/1.1 {code} Fault\r\nContent-Length: {len(body)}\r\n"
                               f"Connection: close\r\n\r\n".encode() + body)
                client.close()
                return
            kept = [ln for ln in lines[1:] if not ln.lower().startswith((b"connection:",
                                                                          b"keep-alive:"))]
            request = b"\r\n".join([lines[0]] + kept + [b"Connection: close"]) + b"\r\n\r\n"
            up = socket.create_connection(self.upstream, timeout=120)
            up.sendall(request + rest)
            rhead, body = _recv_head(up)
            if rhead is None:
                _reset(client)
                return
            rlines = rhead.split(b"\r\n")
            if fault == "wrong_range":
                out = []
                for ln in rlines:
                    m = re.match(rb"(?i)content-range:\s*bytes\s+(\d+)-(\d+)/(\S+)", ln)
                    if m:
                        a, b = int(m.group(1)), int(m.group(2))
                        ln = b"Content-Range: bytes 0-%d/%s" % (b - a, m.group(3))
                    out.append(ln)
                rlines = out
            rlines = [ln for ln in rlines if not ln.lower().startswith((b"connection:",
                                                                         b"keep-alive:"))]
            self._send(client, b"\r\n".join(rlines + [b"Connection: close"]) + b"\r\n\r\n")
            limit = None
            if fault.startswith("cut:"):
                limit = int(fault.split(":")[1])
            elif fault.startswith("stall:"):
                spec = fault.split(":")[1]
                limit = int(spec.partition("@")[2] or 0)
            sent = 0
            while True:
                if limit is not None and sent + len(body) >= limit:
                    self._send(client, body[:limit - sent])
                    break
                if body:
                    self._send(client, body)
                    sent += len(body)
                body = up.recv(1 << 16)
                if not body:
                    break
            if fault.startswith("stall:"):
                wait = float(fault.split(":")[1].partition("@")[0])
                deadline = time.monotonic() + wait
                while time.monotonic() < deadline and not self._stop.is_set():
                    time.sleep(0.05)
                _reset(client)
                return
            if limit is not None:  # cut short: the bytes sent arrive, then the end
                client.shutdown(socket.SHUT_WR)
                client.close()
                return
            client.shutdown(socket.SHUT_WR)
            client.close()
        except OSError:
            try:
                client.close()
            except OSError:
                pass
        finally:
            if up is not None:
                up.close()
