"""Fixtures for the scale tests: tiny shards, a Range-capable HTTP server with fault
injection and a moto S3 server, all on 127.0.0.1, started and stopped by the tests."""

import contextlib
import http.server
import os
import re
import sys
import threading

import pytest

from helpers.shards import write_shards


@pytest.fixture
def shard_dir(tmp_path):
    def make(sizes, **kw):
        return write_shards(str(tmp_path / "shards"), sizes, **kw)
    return make


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        srv = self.server
        name = self.path.lstrip("/").split("?")[0]
        with srv.lock:
            srv.requests[name] = srv.requests.get(name, 0) + 1
            n = srv.requests[name]
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
        start = 0
        m = re.match(r"bytes=(\d+)-$", self.headers.get("Range", ""))
        if m:
            start = 0 if name in srv.lie_range else int(m.group(1))  # a lying server: from 0
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if name in srv.drip:  # a byte at a time, each well within any socket timeout
            import time

            for i in range(len(body)):
                try:
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.02)
            return
        if name in srv.cut_first and n == 1:
            self.wfile.write(body[:len(body) // 2])  # killed mid-stream
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(body)


@contextlib.contextmanager
def http_server(root):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.root, srv.lock, srv.requests = root, threading.Lock(), {}
    srv.drop_first, srv.cut_first, srv.drip = set(), set(), set()
    srv.lie_range, srv.grow = set(), set()
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(timeout=10)


@pytest.fixture
def http_root(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    with http_server(str(root)) as srv:
        yield srv


@pytest.fixture
def s3(monkeypatch):
    """A moto S3 server on loopback; AWS_* environment pointing boto3 at it."""
    pytest.importorskip("boto3")
    server_mod = pytest.importorskip("moto.server")
    from turboloader.io import remote

    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)
    remote._s3_client.clear()
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket="bucket")
    try:
        yield client
    finally:
        remote._s3_client.clear()
        server.stop()
