"""A local HTTP server for remote-shard tests: GET with ``Range`` (``bytes=a-b`` and
``bytes=a-``, 416 past the end), on 127.0.0.1, serving the files of a folder.

``with range_server(root) as srv:`` gives ``srv.url`` and what the tests observe and set:

* observed: ``requests`` (name -> GETs so far), ``ranges`` ((name, Range header or None)
  of each GET, in order), ``peak`` (the most answers in progress at once);
* throttling: ``delay`` (seconds before each answer), ``rate`` (bytes/s per connection,
  0: none);
* version tags: ``etags`` (True: every answer carries an ``ETag``, the content's MD5);
* faults, each a set of names: ``drop_first`` (the first request is closed before any
  response), ``cut_first`` (the first answer stops half-way and the connection dies),
  ``drip`` (a byte at a time, each within any socket timeout), ``lie_range`` (a ranged
  answer starts at byte 0 whatever was asked), ``grow`` (the object gains 512 bytes from
  its second request on: it changed between two requests);
* holding: ``held`` (names answered only once the test sets ``release``, or after
  ``hold_s`` seconds, noted in ``gave_up``: a client that waits for them is then seen, not
  hung), ``waiting`` (requests held now).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import os
import re
import threading
import time


class RangeHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        srv = self.server
        name = self.path.lstrip("/").split("?")[0]
        with srv.lock:
            srv.requests[name] = srv.requests.get(name, 0) + 1
            n = srv.requests[name]
            srv.ranges.append((name, self.headers.get("Range")))
            srv.active += 1
            srv.peak = max(srv.peak, srv.active)
        try:
            self._answer(srv, name, n)
        except OSError:  # the client closed: a part's connection once it had its bytes
            self.close_connection = True
        finally:
            with srv.lock:
                srv.active -= 1

    def _answer(self, srv, name, n):
        if name in srv.held:  # answered once the test sets srv.release
            with srv.lock:
                srv.waiting += 1
            if not srv.release.wait(srv.hold_s):
                srv.gave_up = True
            with srv.lock:
                srv.waiting -= 1
        if srv.delay:
            time.sleep(srv.delay)
        if name in srv.drop_first and n == 1:
            self.close_connection = True
            self.connection.shutdown(2)  # killed before any response
            return
        path = os.path.join(srv.root, name)
        if not os.path.isfile(path):
            self.send_error(404)
            return
        with open(path, "rb") as fh:
            data = fh.read()
        if name in srv.grow and n > 1:  # the object changed between two requests
            data += b"\0" * 512
        start, stop = 0, len(data)
        m = re.match(r"bytes=(\d+)-(\d*)$", self.headers.get("Range", ""))
        if m:
            if m.group(2):
                stop = min(stop, int(m.group(2)) + 1)
            start = 0 if name in srv.lie_range else int(m.group(1))  # a lying server: from 0
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:stop]
        self.send_header("Content-Length", str(len(body)))
        if srv.etags:
            self.send_header("ETag", '"' + hashlib.md5(data).hexdigest() + '"')
        self.end_headers()
        if name in srv.drip:
            for i in range(len(body)):
                self.wfile.write(body[i:i + 1])
                self.wfile.flush()
                time.sleep(0.02)
            return
        if name in srv.cut_first and n == 1:
            self.wfile.write(body[:len(body) // 2])  # killed mid-stream
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        step = max(1, int(srv.rate / 20)) if srv.rate else len(body) or 1
        for i in range(0, len(body), step):
            self.wfile.write(body[i:i + step])
            if srv.rate:
                time.sleep(step / srv.rate)


@contextlib.contextmanager
def range_server(root):
    """A :class:`RangeHandler` server over the folder ``root`` (see the module docstring),
    stopped on exit."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RangeHandler)
    srv.daemon_threads = True
    srv.root, srv.lock = str(root), threading.Lock()
    srv.requests, srv.ranges, srv.active, srv.peak = {}, [], 0, 0
    srv.delay, srv.rate, srv.etags = 0.0, 0, False
    srv.drop_first, srv.cut_first, srv.drip = set(), set(), set()
    srv.lie_range, srv.grow = set(), set()
    srv.held, srv.release, srv.hold_s = set(), threading.Event(), 60.0
    srv.waiting, srv.gave_up = 0, False
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        yield srv
    finally:
        srv.release.set()
        srv.shutdown()
        srv.server_close()
        t.join(timeout=10)
