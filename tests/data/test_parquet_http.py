"""ParquetDataset over ``http://``: a local ``http.server`` thread serving pyarrow-written files
(with byte ranges, as object stores and CDNs serve them; no internet), read through fsspec's
HTTP filesystem; the same rows as the local files, fields included, under workers."""

import http.server
import os
import re
import threading

import pytest
import torch
import torch.utils.data
from helpers.shards import jpeg

import turboloader
from turboloader import transforms as T
from turboloader.transforms._random import sample_rng

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("fsspec.implementations.http")  # needs aiohttp

N = 14
TF = T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.ToTensor()])


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Static files with ``Range: bytes=a-b`` (what a remote Parquet reader asks for)."""

    requests = []

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        rng = self.headers.get("Range")
        path = self.translate_path(self.path)
        type(self).requests.append((self.path, rng))
        if rng is None or not os.path.isfile(path):
            return super().do_GET()
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
        size = os.path.getsize(path)
        if m is None:
            self.send_error(416)
            return
        a, b = m.groups()
        if a == "":  # the last b bytes
            start, end = max(0, size - int(b)), size - 1
        else:
            start, end = int(a), min(size - 1, int(b) if b else size - 1)
        with open(path, "rb") as f:
            f.seek(start)
            body = f.read(end - start + 1)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server(tmp_path):
    """``(base URL, directory)`` of a local HTTP server; stopped after the test."""
    handler = type("Handler", (_RangeHandler,), {"requests": []})

    def make(*args, **kwargs):
        return handler(*args, directory=str(tmp_path), **kwargs)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", tmp_path, handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def _write(path, ids):
    pq.write_table(pa.table({"image": [jpeg(i) for i in ids], "label": list(ids),
                             "caption": [f"c{i}" for i in ids]}),
                   str(path), row_group_size=4)


@pytest.mark.parametrize("how", ["direct", "torch2", "threads"])
def test_http_parquet_same_rows_as_local(server, how):
    from turboloader.data import ParquetDataset

    base, root, handler = server
    _write(root / "p-0.parquet", range(0, 8))
    _write(root / "p-1.parquet", range(8, N))
    ds = ParquetDataset(f"{base}/p-{{0..1}}.parquet", TF, seed=3,
                        fields=("image", "label", "caption", "__url__"))
    local = ParquetDataset([str(root / "p-0.parquet"), str(root / "p-1.parquet")], TF, seed=3,
                           fields=("image", "label", "caption"))
    assert ds.shard_sizes == local.shard_sizes == [4, 4, 4, 2]
    ds.set_epoch(1)
    if how == "direct":
        rows = list(ds)
    else:
        if how == "torch2":
            dl = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2)
        else:
            dl = turboloader.DataLoader(ds, batch_size=4, num_workers=2)
            dl.set_epoch(1)
        rows = [(b[0][k], int(b[1][k]), b[2][k], b[3][k]) for b in list(dl)
                for k in range(len(b[2]))]
    assert sorted(r[1] for r in rows) == list(range(N))
    plan = T.plan(TF)
    for image, label, caption, url in rows:
        assert caption == f"c{label}" and url.startswith(base) and "#rg=" in url
        assert torch.equal(image, plan.from_jpeg(jpeg(label), rng=sample_rng(3, 1, label)))
    # read by byte ranges (fsspec's HTTP file), not as whole downloads per row group
    assert any(r is not None for _, r in handler.requests)


def test_http_missing_file_is_file_not_found(server):
    from turboloader.data import ParquetDataset

    base, _, _ = server
    with pytest.raises(FileNotFoundError):
        ParquetDataset(f"{base}/missing.parquet", TF)
