"""Every store (HTTP, S3 on moto's server, GCS on its emulator, Azure on Azurite), directly
and through a fault-injecting proxy: exact bytes or a typed error naming the URL."""

import os
import random
import socket
import time

import pytest

from helpers.faultproxy import FaultProxy
from helpers.shards import size_of, write_shards
from turboloader.errors import RemoteShardError, RemoteShardNotFoundError
from turboloader.io.remote import open_remote, read_range, stat

pytestmark = pytest.mark.slow

DATA = random.Random(38).randbytes(3 << 20)


def _read_all(url, **kw):
    with open_remote(url, backoff=0.01, **kw) as f:
        return f.read()


def test_bytes_ranges_and_stat(store):
    store.put("blob.bin", DATA)
    url = store.url("blob.bin")
    assert _read_all(url) == DATA
    rng = random.Random(1)
    for _ in range(5):
        a = rng.randrange(len(DATA))
        b = rng.randrange(a, len(DATA) + 1)
        assert read_range(url, a, b) == DATA[a:b]
    assert read_range(url, len(DATA) - 7, len(DATA)) == DATA[-7:]
    with pytest.raises(RemoteShardError, match=r"blob\.bin.*\[3145700, 3145800\).*3145728 bytes"):
        read_range(url, len(DATA) - 28, len(DATA) + 72)
    st = stat(url)
    assert st.size == len(DATA)
    if store.scheme != "http":  # the test HTTP server sends no ETag
        assert st.etag
        store.put("blob.bin", DATA[:-1] + b"!")
        assert stat(url).etag != st.etag
    with pytest.raises(RemoteShardNotFoundError) as info:
        _read_all(store.url("nope.bin"))
    assert "nope.bin" in " ".join(info.value.__notes__)
    with pytest.raises(RemoteShardNotFoundError):
        stat(store.url("nope.bin"))


def _settle(timeout=30.0):
    from turboloader.io.fetch import fetch_pool

    deadline = time.monotonic() + timeout
    while fetch_pool().stats()["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not fetch_pool().stats()["in_flight"]


def test_dataset_every_sample_once_and_counts_cached(store, tmp_path, monkeypatch):
    from turboloader.data import TarDataset

    monkeypatch.setenv("TURBOLOADER_CACHE", str(tmp_path / "cache"))
    sizes = [5, 3, 7, 4]
    for p in write_shards(str(tmp_path / "src"), sizes, name="ds"):
        with open(p, "rb") as fh:
            store.put(os.path.basename(p), fh.read())
    urls = [store.url(f"ds-{i:04d}.tar") for i in range(4)]
    with FaultProxy(store.upstream_port) as proxy:
        store.route(monkeypatch, proxy.port)
        urls = [store.url(f"ds-{i:04d}.tar") for i in range(4)]
        ds = TarDataset(urls, size_of, shuffle=True, seed=2)
        assert ds.shard_sizes == sizes
        got = sorted(int(lab) for _, lab in ds)
        assert got == list(range(sum(sizes)))
        _settle()  # the pass read the next epoch's first shards ahead: let those end
        proxy.log.clear()
        ds2 = TarDataset(urls, size_of)
        assert ds2.shard_sizes == sizes
        # counted before (the stores give a version tag): metadata requests only (S3, Azure:
        # HEAD; GCS: the object's JSON), no shard body
        if store.scheme != "http":
            bodies = [p for m, p, _ in proxy.log if "ds-000" in p and (
                "alt=media" in p if store.scheme == "gs" else m == "GET")]
            assert not bodies and 4 <= len(proxy.log) <= 4 + 4


FAULTS = ["reset", "status:503", "status:429", "slowdown", "cut:100000", "stall:30@200000"]


@pytest.mark.parametrize("fault", FAULTS)
def test_faults_give_exact_bytes(store, monkeypatch, fault):
    """One fault on the first request: the read is retried (or resumed with a Range
    request from the byte where it stopped) and the bytes are exact; a stall (no byte for
    the timeout) is dropped in about the timeout."""
    store.put("f.bin", DATA)
    with FaultProxy(store.upstream_port) as proxy:
        store.route(monkeypatch, proxy.port)
        proxy.script("f.bin", fault)
        t = time.monotonic()
        assert _read_all(store.url("f.bin"), timeout=1.5) == DATA
        assert time.monotonic() - t < 20
        assert proxy.faults_left() == 0 and len(proxy.log) >= 2
        if fault.startswith(("cut", "stall")):
            assert len(proxy.log) == 2 or store.scheme in ("s3",)


def test_wrong_range_is_refused(store, monkeypatch):
    """A server answering another range than the one asked for: an error naming the URL
    and both offsets, never its bytes. A body cut short, then a resumed request answered
    from another offset: exact bytes (Azure's SDK re-asks within its download) or that
    error, after an exact prefix."""
    store.put("w.bin", DATA)
    with FaultProxy(store.upstream_port) as proxy:
        store.route(monkeypatch, proxy.port)
        proxy.script("w.bin", "wrong_range")
        with pytest.raises(RemoteShardError, match=r"w\.bin.*offset 1000.*offset 0"):
            read_range(store.url("w.bin"), 1000, 5000, backoff=0.01)
        proxy.script("w.bin", "cut:1500000", "wrong_range")
        got = bytearray()
        try:
            with open_remote(store.url("w.bin"), backoff=0.01) as f:
                while chunk := f.read(65536):
                    got += chunk
        except RemoteShardError as exc:
            assert bytes(got) == DATA[:len(got)] and len(got) < len(DATA)
            text = str(exc) + " ".join(exc.__notes__)
            assert store.url("w.bin").split("://")[1] in text and "offset 0" in text
        else:
            assert store.scheme == "az" and bytes(got) == DATA, proxy.log


def test_retries_are_bounded_and_name_the_url_without_credentials(store, monkeypatch):
    store.put("r.bin", DATA[:1000])
    with FaultProxy(store.upstream_port) as proxy:
        store.route(monkeypatch, proxy.port)
        proxy.script("r.bin", *["status:503"] * 200)
        url = store.url("r.bin") + ("?X-Amz-Signature=s3cr3t-sig" if store.scheme == "http"
                                    else "")
        t = time.monotonic()
        with pytest.raises(RemoteShardError) as info:
            _read_all(url, retries=2)
        assert time.monotonic() - t < 30
        text = str(info.value) + " ".join(info.value.__notes__)
        assert "r.bin" in text and "failed attempts" in text
        for secret in ("s3cr3t", "AccountKey", "Eby8vdM02"):
            assert secret not in text


def test_unresolvable_host(store, monkeypatch):
    """A DNS failure is retried, then a RemoteShardError naming the URL (no lookup leaves
    the machine: the resolver is replaced)."""
    real = socket.getaddrinfo

    def getaddrinfo(host, *a, **kw):
        if isinstance(host, str) and host.endswith(".invalid"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *a, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    store.put("d.bin", b"x" * 10)
    env = store._env(1)
    for k, v in env.items():
        monkeypatch.setenv(k, v.replace("127.0.0.1:1", "shards.invalid:1"))
    store.route(monkeypatch, 1)
    for k, v in env.items():
        monkeypatch.setenv(k, v.replace("127.0.0.1:1", "shards.invalid:1"))
    url = (store.url("d.bin").replace("127.0.0.1:1", "shards.invalid:1"))
    with pytest.raises(RemoteShardError) as info:
        _read_all(url, retries=1)
    text = str(info.value) + " ".join(info.value.__notes__)
    assert "d.bin" in text and "failed attempts" in text


def test_fsspec_url(tmp_path, monkeypatch):
    """Any URL fsspec knows (its in-memory file system here) is read through it: bytes,
    ranges, stat, missing objects, a dataset's every sample once."""
    fsspec = pytest.importorskip("fsspec")
    from turboloader.data import TarDataset
    from turboloader.io.remote import is_remote, write_object

    monkeypatch.setenv("TURBOLOADER_CACHE", str(tmp_path / "cache"))
    fs = fsspec.filesystem("memory")
    assert is_remote("memory://x/y.tar") and not is_remote("file:///x/y.tar")
    write_object("memory://tl-test/blob.bin", DATA)
    url = "memory://tl-test/blob.bin"
    assert _read_all(url) == DATA and read_range(url, 10, 20000) == DATA[10:20000]
    assert stat(url).size == len(DATA)
    with pytest.raises(RemoteShardNotFoundError):
        _read_all("memory://tl-test/nope.bin")
    sizes = [4, 2, 5]
    for p in write_shards(str(tmp_path / "m"), sizes, name="mem"):
        with open(p, "rb") as fh:
            fs.pipe_file(f"/tl-test/{os.path.basename(p)}", fh.read())
    ds = TarDataset("memory://tl-test/mem-{0000..0002}.tar", size_of)
    assert ds.shard_sizes == sizes
    assert sorted(int(lab) for _, lab in ds) == list(range(sum(sizes)))


@pytest.mark.parametrize("store", ["s3", "gs"], indirect=True)
def test_dataset_through_stalls_and_cuts_every_sample_once(store, tmp_path, monkeypatch):
    """A streamed dataset whose shard reads stall (TURBOLOADER_REMOTE_TIMEOUT) or are cut
    short: resumed where they stopped, every sample exactly once."""
    from turboloader.data import TarDataset

    monkeypatch.setenv("TURBOLOADER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TURBOLOADER_REMOTE_TIMEOUT", "1")
    sizes = [40, 30]
    for p in write_shards(str(tmp_path / "src"), sizes, name="st"):
        with open(p, "rb") as fh:
            store.put(os.path.basename(p), fh.read())
    urls = [store.url(f"st-{i:04d}.tar") for i in range(2)]
    ds = TarDataset(urls, size_of, shuffle=False, shard_sizes=sizes)
    with FaultProxy(store.upstream_port) as proxy:
        store.route(monkeypatch, proxy.port)
        proxy.script("st-0000", "stall:30@20000")
        proxy.script("st-0001", "cut:30000", "reset")
        t = time.monotonic()
        got = [int(lab) for _, lab in ds]
        assert got == list(range(sum(sizes)))
        assert proxy.faults_left() == 0 and time.monotonic() - t < 30
