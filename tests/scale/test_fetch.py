"""The fetch pool (turboloader.io.fetch) and the shard cache's downloads through it, against
loopback HTTP servers (one with per-request latency and a per-connection rate cap, that
counts requests and the connections open at once) and moto's S3 server."""

import os
import sys
import threading
import time

import numpy as np
import pytest
import torch

import turboloader
from helpers.rangeserver import range_server
from helpers.shards import size_of, write_shards
from turboloader.data import TarDataset
from turboloader.errors import RemoteShardError, RemoteShardNotFoundError
from turboloader.io import fetch, remote
from turboloader.io.fetch import FetchPool
from turboloader.io.shard_cache import ShardCache
from turboloader.io.shards import open_shard


def blob(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


@pytest.fixture
def slow(tmp_path):
    """The shared range server (tests/helpers/rangeserver.py): GET with Range, ``delay``
    seconds before each answer, at most ``rate`` bytes/s per connection; counts requests
    per name, the ranges asked and the peak of open answers."""
    root = tmp_path / "slow"
    root.mkdir()
    with range_server(root) as srv:
        yield srv


def publish(srv, blobs):
    for name, data in blobs.items():
        with open(os.path.join(srv.root, name), "wb") as fh:
            fh.write(data)
    return {name: f"{srv.url}/{name}" for name in blobs}


PART = 256 << 10
SIZES = [0, 1, 1000, PART - 1, PART, PART + 1, 3 * PART + 17]


def wait_for(cond, timeout=30):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_buffered_objects_are_exact_and_fetched_ahead(slow):
    """Every size around the part boundaries comes back byte for byte; a plan fetches
    ahead before the reader opens (observable in the server's counts and the pool's
    ``bytes_ahead``); a multi-part object is asked for with ranged requests, once each, no
    probe."""
    blobs = {f"b{i}.bin": blob(n, i) for i, n in enumerate(SIZES)}
    urls = publish(slow, blobs)
    pool = FetchPool(part_bytes=PART, buffer_bytes=64 * PART)
    pool.plan("s", list(urls.values()))
    total = sum(SIZES)
    wait_for(lambda: pool.stats()["bytes_fetched"] == total)
    assert set(slow.requests) == set(blobs)  # all asked for before any open
    for name, url in urls.items():
        with pool.open(url) as f:
            assert f.read() == blobs[name], name
    st = pool.stats()
    assert st["bytes_ahead"] == total and st["waits"] == 0
    big = [r for n, r in slow.ranges if n == "b6.bin"]
    # part 0 open-ended (its answer gives the size), the others bounded to their bytes
    assert sorted(big, key=str) == sorted(
        [None] + [f"bytes={s}-{min(s + PART, SIZES[6]) - 1}" for s in (PART, 2 * PART, 3 * PART)],
        key=str)
    assert slow.requests == {n: (4 if n == "b6.bin" else 2 if n == "b5.bin" else 1)
                             for n in blobs}


def test_buffer_bound_holds_and_readers_still_progress(slow):
    """Fetched-ahead bytes stay within ``buffer_bytes`` (+ the part a reader waits for);
    reading in plan order gets everything even though the plan is 8x the buffer."""
    blobs = {f"c{i}.bin": blob(2 * PART, 10 + i) for i in range(16)}
    urls = publish(slow, blobs)
    pool = FetchPool(part_bytes=PART, buffer_bytes=4 * PART, max_connections=4)
    pool.plan("s", list(urls.values()))
    time.sleep(0.3)
    assert pool.stats()["buffered"] <= 4 * PART
    for name, url in urls.items():
        with pool.open(url) as f:
            assert f.read() == blobs[name]
    st = pool.stats()
    assert st["peak_buffered"] <= 5 * PART and st["buffered"] == 0
    wait_for(lambda: pool.stats()["bytes_fetched"] == sum(map(len, blobs.values())))


def test_connections_grow_while_readers_wait(slow):
    """A reader starved by slow connections makes the pool add connections (K from the
    bandwidth needed), bounded by ``max_connections``; the server sees them at once."""
    slow.delay, slow.rate = 0.05, 2 << 20
    blobs = {f"d{i}.bin": blob(4 * PART, 30 + i) for i in range(6)}
    urls = publish(slow, blobs)
    pool = FetchPool(part_bytes=PART, buffer_bytes=64 * PART, max_connections=12)
    pool.plan("s", list(urls.values()))
    for name, url in urls.items():
        with pool.open(url) as f:
            assert f.read() == blobs[name]
    st = pool.stats()
    assert st["waits"] > 0 and st["connection_rate"] > 0
    assert 4 < st["peak_connections"] <= 12 and slow.peak > 4


def test_missing_and_changed_objects_are_typed_errors(slow):
    pool = FetchPool(part_bytes=PART)
    with pytest.raises(RemoteShardNotFoundError):
        with pool.open(f"{slow.url}/nope.bin") as f:
            f.read()
    # an object that grows between the first part and a ranged part: refused, named
    urls = publish(slow, {"g.bin": blob(3 * PART, 1)})
    slow.delay = 0.2
    with pool.open(urls["g.bin"]) as f:
        head = f.read(1000)
        with open(os.path.join(slow.root, "g.bin"), "ab") as fh:
            fh.write(b"x" * 100)
        with pytest.raises(RemoteShardError, match="g.bin.*changed while being read"):
            f.read()
    assert head == blob(3 * PART, 1)[:1000]


def test_file_fetch_writes_in_place(slow, tmp_path):
    data = blob(5 * PART + 3, 7)
    urls = publish(slow, {"f.bin": data})
    pool = FetchPool(part_bytes=PART)
    done, sizes = threading.Event(), []
    errors = []
    fd = os.open(tmp_path / "out", os.O_RDWR | os.O_CREAT)
    pool.fetch_to(urls["f.bin"], fd, on_size=sizes.append,
                  on_done=lambda e: (errors.append(e), done.set()))
    assert done.wait(30)
    os.close(fd)
    assert errors == [None] and sizes == [len(data)]
    assert (tmp_path / "out").read_bytes() == data
    assert slow.requests["f.bin"] == 6  # 6 parts, no probe


def _fetch_files(pool, urls, tmp_path, orders):
    """Start file fetches of ``urls`` with ``orders``; returns a wait() -> [(path, error)]."""
    jobs = []
    for i, (url, order) in enumerate(zip(urls, orders)):
        done, errors = threading.Event(), []
        fd = os.open(tmp_path / f"out{i}", os.O_RDWR | os.O_CREAT)
        pool.fetch_to(url, fd, on_size=lambda size: None, order=order,
                      on_done=lambda e, errors=errors, done=done: (errors.append(e), done.set()))
        jobs.append((fd, done, errors, tmp_path / f"out{i}"))

    def wait():
        out = []
        for fd, done, errors, path in jobs:
            assert done.wait(60)
            os.close(fd)
            out.append((path, errors[0]))
        return out
    return wait


def test_file_fetches_start_in_reading_order(slow, tmp_path):
    """One connection: file fetches queued behind a running one start by the ``order``
    their reader needs them in (the shard cache's reading order), not by when they were
    asked for."""
    slow.delay = 0.2
    blobs = {n: blob(1000 + i, i) for i, n in enumerate(["a.bin", "c.bin", "b.bin"])}
    urls = publish(slow, blobs)
    pool = FetchPool(max_connections=1)
    wait = _fetch_files(pool, [urls["a.bin"]], tmp_path, [5])
    wait_for(lambda: slow.requests.get("a.bin"))  # the connection is busy with a
    wait_rest = _fetch_files(pool, [urls["c.bin"], urls["b.bin"]], tmp_path / "..", [2, 0])
    for path, error in wait() + wait_rest():
        assert error is None
    assert [name for name, _ in slow.ranges] == ["a.bin", "b.bin", "c.bin"]


def test_file_fetch_parts_each_get_a_connection(slow, tmp_path):
    """Two shard downloads of four parts each: their parts run at once (a connection per
    part, up to ``max_connections``), not one connection per download (which capped them
    at the pool's starting K = 4); byte-exact."""
    slow.delay, slow.rate = 0.2, 256 << 10  # a part takes about a second
    blobs = {f"p{i}.bin": blob(4 * PART, 20 + i) for i in range(2)}
    urls = publish(slow, blobs)
    pool = FetchPool(max_connections=8, part_bytes=PART)
    got = _fetch_files(pool, list(urls.values()), tmp_path, [0, 1])()
    for (path, error), data in zip(got, blobs.values()):
        assert error is None and path.read_bytes() == data
    # part 0 learns the size once its first 256 KiB came (about when it ends), then the
    # other three of each download start together
    assert slow.peak > 4 and pool.stats()["peak_connections"] > 4


@pytest.mark.parametrize("backend", ["threads", "workers"])
def test_streamed_remote_shards_every_sample_once(slow, backend):
    """Remote shards without a cache, read ahead by the pool: every sample once per epoch
    on the thread backend and under torch's DataLoader worker processes (a pool each)."""
    sizes = [3, 5, 2, 4, 6, 1, 3, 4, 5, 2, 3, 2]
    write_shards(slow.root, sizes, name="s")
    url = f"{slow.url}/s-{{0000..{len(sizes) - 1:04d}}}.tar"
    ds = TarDataset(url, size_of, seed=2, shard_sizes=sizes)
    before = fetch.fetch_pool().stats()["bytes_ahead"]
    for epoch in range(2):
        ds.set_epoch(epoch)
        if backend == "threads":
            loader = turboloader.DataLoader(ds, batch_size=4, num_workers=2, backend="threads")
        else:
            loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, timeout=60)
        got = [int(v) for _, lab in loader for v in lab]
        assert sorted(got) == list(range(sum(sizes))), epoch
    if backend == "threads":  # the pool of this process read shards before they were opened
        assert fetch.fetch_pool().stats()["bytes_ahead"] > before


def test_kept_objects_are_taken_over_by_the_next_plan_of_their_lineage(slow):
    """``forget(keep_for=)`` keeps what a plan fetched ahead and did not open; the next plan
    of that lineage takes it over where it names the same URL (fetched once in all), drops
    the rest, and kept objects nobody takes over are dropped after ``keep_s``."""
    blobs = {f"k{i}.bin": blob(3000 + i, i) for i in range(4)}
    urls = publish(slow, blobs)
    pool = FetchPool(part_bytes=PART, buffer_bytes=64 * PART)
    u = [urls[f"k{i}.bin"] for i in range(4)]
    pool.plan("e0", [u[0], u[1], u[2], u[3]], lineage="w0")
    with pool.open(u[0]) as f:
        assert f.read() == blobs["k0.bin"]
    wait_for(lambda: pool.stats()["bytes_fetched"] == sum(len(b) for b in blobs.values()))
    pool.forget("e0", keep_for="w0")  # k1..k3 fetched, not opened: kept
    assert pool.stats()["buffered"] == sum(len(blobs[f"k{i}.bin"]) for i in (1, 2, 3))
    pool.plan("e1", [u[2], u[0], u[1]], lineage="w0")  # takes k2 and k1 over; k3 dropped
    for i in (2, 0, 1):
        with pool.open(u[i]) as f:
            assert f.read() == blobs[f"k{i}.bin"]
    assert slow.requests == {"k0.bin": 2, "k1.bin": 1, "k2.bin": 1, "k3.bin": 1}
    pool.forget("e1")
    assert pool.stats()["buffered"] == 0

    pool.keep_s = 0.0
    pool.plan("e2", [u[3]], lineage="w1")
    wait_for(lambda: pool.stats()["in_flight"] == 0 and slow.requests["k3.bin"] == 2)
    pool.forget("e2", keep_for="w1")
    assert pool.stats()["buffered"] == len(blobs["k3.bin"])
    time.sleep(0.01)
    pool.plan("other", [], lineage="w2")  # any plan drops kept objects past their time
    assert pool.stats()["buffered"] == 0


def test_pending_requests_are_counted_apart_from_those_in_flight(slow):
    """``stats()``: with one connection, a plan of two objects has one request in flight and
    one pending; both are 0 only once every byte planned is fetched (``in_flight`` alone
    is 0 between two requests of a connection, with the next one still pending)."""
    blobs = {"q0.bin": blob(1500, 90), "q1.bin": blob(1600, 91)}
    urls = publish(slow, blobs)
    slow.held.add("q0.bin")
    pool = FetchPool(part_bytes=PART, buffer_bytes=64 * PART, max_connections=1)
    pool.plan("s", [urls["q0.bin"], urls["q1.bin"]])
    wait_for(lambda: slow.waiting == 1)
    st = pool.stats()
    assert (st["in_flight"], st["pending"]) == (1, 1)
    slow.release.set()
    wait_for(lambda: (lambda s: s["in_flight"] == 0 and s["pending"] == 0)(pool.stats()))
    assert pool.stats()["bytes_fetched"] == sum(map(len, blobs.values()))
    pool.forget("s")


def settled(pool):
    """Nothing queued or being fetched by ``pool`` (see :meth:`FetchPool.stats`)."""
    st = pool.stats()
    return st["in_flight"] == 0 and st["pending"] == 0


def test_an_opener_gets_its_pass_not_a_next_pass_read_ahead(slow):
    """Two streams plan the same URL: one for its pass, the other as the first shard of its
    next pass (``next_pass``). When the reader opens it, it gets the object planned for its
    pass, even when both are next in their plans' order and the other was planned first:
    the read-ahead stays for the next pass, which takes it over (the URL is asked for twice,
    once per pass). (Before, the opener took the read-ahead made first, its own object
    stayed unopened and the next pass asked for the URL a third time.)"""
    blobs = {f"n{i}.bin": blob(2000 + i, 70 + i) for i in range(4)}
    urls = publish(slow, blobs)
    pool = FetchPool(part_bytes=PART, buffer_bytes=64 * PART)
    u = [urls[f"n{i}.bin"] for i in range(4)]
    pool.plan("b", [u[1], u[2]], next_pass=[u[3]], lineage="wb")  # planned first
    pool.plan("a", [u[0], u[3]], lineage="wa")
    for i in (1, 2):  # stream b's pass is read: its next object is the read-ahead of u3
        with pool.open(u[i]) as f:
            assert f.read() == blobs[f"n{i}.bin"]
    for i in (0, 3):  # stream a reads its pass: u3 too
        with pool.open(u[i]) as f:
            assert f.read() == blobs[f"n{i}.bin"]
    wait_for(lambda: pool.stats()["in_flight"] == 0)
    pool.forget("a", keep_for="wa")
    pool.forget("b", keep_for="wb")
    assert pool.stats()["buffered"] == len(blobs["n3.bin"])  # b's read-ahead, kept
    pool.plan("b2", [u[3]], lineage="wb")  # b's next pass takes its read-ahead over
    with pool.open(u[3]) as f:
        assert f.read() == blobs["n3.bin"]
    pool.forget("b2")
    assert slow.requests == {"n0.bin": 1, "n1.bin": 1, "n2.bin": 1, "n3.bin": 2}
    assert pool.stats()["buffered"] == 0


def test_a_streamed_epoch_starts_from_bytes_read_ahead(slow, monkeypatch):
    """A remote pass reads the next epoch's first shards ahead and the next pass takes them
    over: two epochs ask for no shard body more often than without the read-ahead, beyond
    the read-ahead of a third epoch's first shards (at most 2 per stream); the second
    epoch, whose streams read two shards each, never waits for bytes (without the
    read-ahead it does); every sample comes once."""
    from turboloader.data import tar_dataset

    sizes = [4, 4, 4, 4]  # two whole shards per stream
    slow.delay = 0.1
    write_shards(slow.root, sizes, name="e")
    url = f"{slow.url}/e-{{0000..{len(sizes) - 1:04d}}}.tar"
    pool = fetch.fetch_pool()

    def two_epochs():
        slow.requests.clear()
        ds = TarDataset(url, size_of, seed=5, shard_sizes=sizes)
        for epoch in range(2):
            ds.set_epoch(epoch)
            loader = turboloader.DataLoader(ds, batch_size=4, num_workers=2, backend="threads")
            got = [int(v) for _, lab in loader for v in lab]
            assert sorted(got) == list(range(sum(sizes))), epoch
            wait_for(lambda: settled(pool))  # the next epoch's read-ahead is here
            if epoch == 0:
                waits = pool.stats()["waits"]
        return dict(slow.requests), pool.stats()["waits"] - waits

    monkeypatch.setattr(tar_dataset, "_NEXT_EPOCH_AHEAD", 0)
    without, waited = two_epochs()
    assert waited > 0
    monkeypatch.setattr(tar_dataset, "_NEXT_EPOCH_AHEAD", 2)
    with_ahead, second_epoch_waits = two_epochs()
    assert all(with_ahead[n] >= c for n, c in without.items())
    assert sum(with_ahead.values()) <= sum(without.values()) + 2 * 2, (without, with_ahead)
    assert second_epoch_waits == 0


def test_a_streamed_pass_reads_its_streams_next_four_shards_ahead(slow):
    """By default a remote pass reads ahead the next epoch's first four shards of each of its
    streams (``tar_dataset._NEXT_EPOCH_AHEAD``; two were too few for a stream reading 36 MB/s
    over 10 MB/s connections with 100 ms per request: it waited for its third shard at every
    epoch start): when the first epoch ends, exactly those shards have been asked for a
    second time and no others; the next epoch takes them over (asks for them no more) and
    every sample of both epochs comes once."""
    from turboloader.data import tar_dataset

    assert tar_dataset._NEXT_EPOCH_AHEAD == 4
    sizes = [2] * 12  # six shards per stream
    slow.delay = 0.05
    write_shards(slow.root, sizes, name="a")
    url = f"{slow.url}/a-{{0000..{len(sizes) - 1:04d}}}.tar"
    pool = fetch.fetch_pool()
    wait_for(lambda: settled(pool))
    slow.requests.clear()
    ds = TarDataset(url, size_of, seed=11, shard_sizes=sizes)
    name = lambda u: u.rsplit("/", 1)[1]  # noqa: E731
    ahead = {name(u) for w in range(2)
             for u in ds._shard_order(ds._worker_items(1, w, 2)[1])[:4]}
    assert len(ahead) == 8  # (each stream's own shards)
    for epoch in range(2):
        ds.set_epoch(epoch)
        loader = turboloader.DataLoader(ds, batch_size=4, num_workers=2, backend="threads")
        got = [int(v) for _, lab in loader for v in lab]
        assert sorted(got) == list(range(sum(sizes))), epoch
        wait_for(lambda: settled(pool))
        if epoch == 0:
            twice = {n for n, c in slow.requests.items() if c == 2}
            assert twice == ahead, (sorted(twice), sorted(ahead))
            assert all(c == 1 for n, c in slow.requests.items() if n not in ahead)
            first = dict(slow.requests)
    # the second epoch asked for its other shards only (and the third epoch's read-ahead)
    second = {n: slow.requests[n] - first.get(n, 0) for n in slow.requests}
    third = {name(u) for w in range(2) for u in ds._shard_order(ds._worker_items(2, w, 2)[1])[:4]}
    for n, c in second.items():
        assert c == (n not in ahead) + (n in third), (n, c)


def test_pool_is_per_process():
    import multiprocessing as mp

    pool = fetch.fetch_pool()
    assert fetch.fetch_pool() is pool
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=lambda: q.put(fetch.fetch_pool().pid))
    p.start()
    child = q.get(timeout=60)
    p.join(timeout=60)
    assert child != pool.pid and child == p.pid


# -- the shard cache through the pool -----------------------------------------------------

def test_cache_no_probe_and_prefetch_runs_n_at_once(slow, tmp_path, monkeypatch):
    """``prefetch=N`` has N shard downloads in flight at once (the server sees N answers
    open together; more than the pool's starting K), each asked for once (no probe
    request), byte-exact."""
    monkeypatch.setattr(fetch, "_pool", FetchPool(max_connections=16))
    slow.delay = 0.3
    blobs = {f"p{i}.tar": blob(100_000 + i, 50 + i) for i in range(12)}
    urls = publish(slow, blobs)
    cache = ShardCache(tmp_path / "cache", max_bytes="100MB", prefetch=6)
    cache.prefetch(list(urls.values()))
    wait_for(lambda: cache.stats()["files"] == 12)
    assert slow.peak == 6 > fetch.fetch_pool().stats()["connections"]
    assert slow.requests == {n: 1 for n in blobs}
    for name, url in urls.items():
        with open(cache.fetch(url), "rb") as fh:
            assert fh.read() == blobs[name]
    st = cache.stats()
    assert st["misses"] == 12 and st["hits"] == 12 and st["bytes_downloaded"] == sum(
        map(len, blobs.values()))


def test_cache_fetch_joins_a_prefetch_and_splits_large_shards(slow, tmp_path, monkeypatch):
    """A reader asking for a shard being prefetched waits for that download (no second
    request); a shard larger than a part is fetched by concurrent ranged requests."""
    monkeypatch.setattr(fetch, "_pool", FetchPool(part_bytes=PART, max_connections=8))
    slow.delay, slow.rate = 0.1, 4 << 20
    data = blob(6 * PART, 3)
    urls = publish(slow, {"big.tar": data})
    cache = ShardCache(tmp_path / "cache", prefetch=1)
    cache.prefetch([urls["big.tar"]])
    with open(cache.fetch(urls["big.tar"]), "rb") as fh:
        assert fh.read() == data
    assert slow.requests["big.tar"] == 6 and slow.peak > 1


def test_cache_shard_evicted_between_fetch_and_open(slow, tmp_path):
    """Another process evicts the shard after fetch() returned its path: opening it
    fetches it again instead of failing."""
    write_shards(slow.root, [5], name="e")
    url = f"{slow.url}/e-0000.tar"

    class Evicting(ShardCache):
        evicted = 0

        def fetch(self, url, /, **kw):
            path = super().fetch(url, **kw)
            if not self.evicted:
                type(self).evicted += 1
                os.unlink(path)
            return path

    cache = Evicting(tmp_path / "cache", prefetch=0)
    shard = open_shard(url, cache=cache)
    try:
        assert len(shard) == 5
    finally:
        shard.close()
    assert slow.requests["e-0000.tar"] == 2


def test_cache_failed_download_is_reported_and_cleaned(slow, tmp_path):
    cache = ShardCache(tmp_path / "cache", prefetch=2)
    with pytest.raises(RemoteShardNotFoundError) as info:
        cache.fetch(f"{slow.url}/missing.tar")
    assert any("missing.tar" in n for n in info.value.__notes__)
    assert not [f for f in os.listdir(cache.root) if f.startswith(".tmp-")]
    assert cache.stats()["downloads_failed"] == 1


@pytest.mark.parametrize("num_workers", [0, 2])
def test_cached_cold_pass_every_sample_once_with_eviction(slow, tmp_path, num_workers):
    """A cold pass through a small cache (eviction while other processes download and
    read): every sample once, on the thread path and under DataLoader workers."""
    slow.delay = 0.02
    sizes = [4, 6, 3, 5, 2, 6, 4, 3]
    paths = write_shards(slow.root, sizes, name="c")
    url = f"{slow.url}/c-{{0000..{len(sizes) - 1:04d}}}.tar"
    biggest = max(os.path.getsize(p) for p in paths)
    cache = ShardCache(tmp_path / "cache", max_bytes=3 * biggest, prefetch=2)
    ds = TarDataset(url, size_of, seed=5, shard_sizes=sizes, shard_cache=cache, mix_shards=2)
    for epoch in range(2):
        ds.set_epoch(epoch)
        loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=num_workers,
                                             timeout=60 if num_workers else 0)
        got = [int(v) for _, lab in loader for v in lab]
        assert sorted(got) == list(range(sum(sizes))), epoch
    st = cache.stats()
    assert st["evictions"] >= 1 and st["bytes"] <= cache.max_bytes


@pytest.mark.slow
def test_s3_through_the_pool(s3, tmp_path, monkeypatch):
    """moto's S3: a multi-part object through boto3's ranged GETs, streamed and cached."""
    monkeypatch.setattr(fetch, "_pool", FetchPool(part_bytes=PART))
    data = blob(4 * PART + 5, 9)
    s3.put_object(Bucket="bucket", Key="x/big.bin", Body=data)
    with fetch.fetch_pool().open("s3://bucket/x/big.bin") as f:
        assert f.read() == data
    cache = ShardCache(tmp_path / "cache", prefetch=1)
    with open(cache.fetch("s3://bucket/x/big.bin"), "rb") as fh:
        assert fh.read() == data
    sizes = [3, 4, 2, 5]
    for p in write_shards(str(tmp_path / "src"), sizes, name="t"):
        s3.upload_file(p, "bucket", f"t/{os.path.basename(p)}")
    ds = TarDataset("s3://bucket/t/t-{0000..0003}.tar", size_of, seed=1)
    loader = torch.utils.data.DataLoader(ds, batch_size=3, num_workers=2, timeout=60)
    assert sorted(int(v) for _, lab in loader for v in lab) == list(range(sum(sizes)))


# -- the first request: sizes known ahead, finer first parts, the client made ahead -----------

def _ranges(n, stride):
    return sorted(f"bytes={s}-{min(s + stride, n) - 1}" for s in range(0, n, stride))


def test_known_size_that_changed_is_a_typed_error(slow, tmp_path, monkeypatch):
    """The size seen before is not the object's any more (replaced since): the cache's
    download is refused with the URL named, never a silently short or long shard."""
    monkeypatch.setattr(fetch, "_pool", FetchPool(part_bytes=PART))
    urls = publish(slow, {"s.tar": blob(3 * PART, 5)})
    remote.stat(urls["s.tar"])
    with open(os.path.join(slow.root, "s.tar"), "ab") as fh:
        fh.write(b"x" * 10)
    cache = ShardCache(tmp_path / "cache", prefetch=1)
    with pytest.raises(RemoteShardError, match="s.tar.*changed while being read"):
        cache.fetch(urls["s.tar"])
    assert not os.path.exists(cache.path(urls["s.tar"]))


def test_cache_download_of_known_size_starts_every_part_at_once(slow, tmp_path, monkeypatch):
    """A shard cache download whose size the count's ``stat`` gave: its ranged parts start
    together (the reservation made once, before any part writes), the file byte-exact."""
    monkeypatch.setattr(fetch, "_pool", FetchPool(part_bytes=PART, max_connections=8))
    data = blob(6 * PART + 7, 4)
    urls = publish(slow, {"k.tar": data})
    remote.stat(urls["k.tar"])
    slow.ranges.clear()
    slow.requests.clear()
    slow.delay = 0.2
    cache = ShardCache(tmp_path / "cache", prefetch=1)
    with open(cache.fetch(urls["k.tar"]), "rb") as fh:
        assert fh.read() == data
    assert sorted(r for _, r in slow.ranges) == _ranges(len(data), PART)
    assert slow.peak == 7
    assert cache.stats()["misses"] == 1


def test_lock_held_at_fork_leaves_the_child_usable_locks():
    """A fork while another thread makes a store client (``warm``): the child's client
    locks are new ones, not a copy held forever."""
    import multiprocessing as mp

    lock = remote._LOCKS["s3"]
    lock.acquire()
    try:
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=lambda: q.put(remote._LOCKS["s3"].acquire(timeout=10)))
        p.start()
        assert q.get(timeout=60) is True
        p.join(timeout=60)
    finally:
        lock.release()


@pytest.mark.slow
def test_warm_makes_the_client_ahead_and_a_forked_child_makes_its_own(s3, tmp_path):
    """``TarDataset`` over s3:// makes the process's client while it is constructed (in the
    background, before any request); a forked child never uses it: it makes its own."""
    import multiprocessing as mp

    assert remote.warm("/local/path") is None and remote.warm("http://127.0.0.1/x") is None
    sizes = [3, 2]
    for p in write_shards(str(tmp_path / "src"), sizes, name="w"):
        s3.upload_file(p, "bucket", f"w/{os.path.basename(p)}")
    remote._s3_client.clear()
    TarDataset("s3://bucket/w/w-{0000..0001}.tar", size_of, shard_sizes=sizes)
    wait_for(lambda: any(k[0] == os.getpid() for k in list(remote._s3_client)))
    parent = remote._s3(remote.default_timeout())
    ctx = mp.get_context("fork")
    q = ctx.Queue()

    def child():
        with remote.open_remote("s3://bucket/w/w-0000.tar") as f:
            ok = len(f.read()) == os.path.getsize(tmp_path / "src" / "w-0000.tar")
        q.put((ok, remote._s3(remote.default_timeout()) is not parent))

    p = ctx.Process(target=child)
    p.start()
    assert q.get(timeout=120) == (True, True)
    p.join(timeout=60)


def test_unknown_size_part_zero_keeps_a_quarter_part(slow, tmp_path, monkeypatch):
    """A cache download of unknown size: part 0 is open-ended (its answer gives the size)
    and keeps ``part_bytes / 4`` of it, so its connection is soon free; the rest follows in
    ranged parts of ``part_bytes`` (a shard read later than first); byte-exact."""
    monkeypatch.setattr(fetch, "_pool", FetchPool(part_bytes=4 * PART))
    n = 8 * PART + 5
    data = blob(n, 71)
    urls = publish(slow, {"u1.tar": data})
    cache = ShardCache(tmp_path / "cache", prefetch=1)
    cache.prefetch([urls["u1.tar"]], start=1)
    wait_for(lambda: cache.stats()["files"] == 1)
    with open(cache.fetch(urls["u1.tar"]), "rb") as fh:
        assert fh.read() == data
    assert sorted(slow.ranges, key=str) == sorted(
        [("u1.tar", None), ("u1.tar", f"bytes={PART}-{5 * PART - 1}"),
         ("u1.tar", f"bytes={5 * PART}-{n - 1}")], key=str)


def test_cold_window_parts_over_several_connections_in_reading_order(slow, tmp_path,
                                                                     monkeypatch):
    """A cold pass asks for its first window at once (``prefetch(at_once=3)``), sizes known
    from the count: each shard comes in ranged parts over several connections (the
    stream's first shard in parts of a quarter of ``part_bytes``, the others in
    ``part_bytes``), started in the stream's reading order: every request of a shard
    reaches the server before any request of the shard two places later (only parts
    started together, at most one per connection, may arrive in another order).
    Byte-exact, each byte asked for once."""
    monkeypatch.setattr(fetch, "_pool", FetchPool(part_bytes=2 * PART, max_connections=4))
    n = 6 * PART + 9
    names = ["c.tar", "a.tar", "d.tar", "b.tar"]  # reading order, not name order
    blobs = {name: blob(n, 80 + i) for i, name in enumerate(names)}
    urls = publish(slow, blobs)
    for name in names:  # the count's stat: every part asked for at once
        remote.stat(urls[name])
    slow.ranges.clear()
    slow.delay = 0.1
    cache = ShardCache(tmp_path / "cache", prefetch=1)
    cache.prefetch([urls[name] for name in names], at_once=3)
    wait_for(lambda: cache.stats()["files"] == 4)
    for name in names:
        with open(cache.fetch(urls[name]), "rb") as fh:
            assert fh.read() == blobs[name]
    for k, name in enumerate(names):
        stride = PART if k == 0 else 2 * PART
        assert sorted(r for got, r in slow.ranges if got == name) == _ranges(n, stride)
    assert slow.peak > 1
    place = {name: k for k, name in enumerate(names)}
    seq = [place[name] for name, _ in slow.ranges]
    for k in range(len(names) - 2):
        assert max(i for i, p in enumerate(seq) if p == k) < min(
            i for i, p in enumerate(seq) if p == k + 2)


def test_part_buffers_are_reused_and_never_change_what_was_read(slow):
    """A part's buffer, once its fetch is done and the reader is past it, serves a later
    part (no fresh allocation: each costs a page fault per 4 KiB on first write), and the
    bytes every reader got are exact, with later parts written into reused buffers; spare
    buffers and the parts' buffers together stay within ``buffer_bytes``."""
    sizes = [3 * PART + 17, 2 * PART, 4 * PART + 5, PART - 3, 3 * PART]
    blobs = {f"r{i}.bin": blob(n, 100 + i) for i, n in enumerate(sizes)}
    urls = publish(slow, blobs)
    pool = FetchPool(part_bytes=PART, buffer_bytes=6 * PART, max_connections=4)
    seen = set()
    orig = pool._part_buffer
    made = []

    def spy(part, n):
        spare = {id(b) for b in pool._spare}
        orig(part, n)
        made.append(id(part.buf) in spare)
        seen.add(id(part.buf))
        assert pool._reserved + pool._spare_bytes <= pool.buffer_bytes + 2 * PART

    pool._part_buffer = spy
    got = {}
    for name, url in urls.items():  # one object at a time: the earlier ones' parts are spare
        pool.plan(name, [url])
        with pool.open(url) as f:
            got[name] = f.read()
        pool.forget(name)
    assert got == blobs
    assert any(made), "no part reused a released buffer"
    assert pool._spare_bytes + pool._reserved <= pool.buffer_bytes


READ = fetch._READ  # bytes per socket read into a part


def _resident_bytes(buf):
    """Bytes of the pages spanning the writable buffer ``buf`` resident now (``mincore``)."""
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    page = os.sysconf("SC_PAGE_SIZE")
    start = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    addr = start - start % page
    length = start + len(buf) - addr
    vec = (ctypes.c_ubyte * -(-length // page))()
    if libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(length), vec) != 0:
        raise OSError(ctypes.get_errno(), "mincore")
    return sum(v & 1 for v in vec) * page


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="counts resident pages with mincore(), which reports anonymous memory on Linux only")
def test_a_fresh_buffer_is_faulted_in_only_where_its_part_writes(slow):
    """A shard's last part, shorter than a part, gets a fresh buffer of a whole part's class
    (later parts of any length reuse it) whose pages are faulted in only where the part's
    bytes are written: not zero-filled first (a page fault per 4 KiB of it, the tail past
    the part's bytes too); the bytes read are exact."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as fh:
            if "[always]" in fh.read():
                pytest.skip("this kernel backs all anonymous memory with 2 MiB huge pages (THP 'always'), "
                            "so one written byte makes 2 MiB resident and residency cannot show "
                            "where the part wrote")
    except OSError:
        pass
    part = 8 * READ
    size = 2 * part + 3 * READ - 100  # parts: part, part, 3 socket reads less 100 bytes
    data = blob(size, 7)
    (url,) = publish(slow, {"s.bin": data}).values()
    pool = FetchPool(part_bytes=part, buffer_bytes=64 * part, max_connections=4)
    orig, last = pool._part_buffer, []

    def spy(p, n):
        orig(p, n)
        if p.index == 2:
            last.append(p.buf)

    pool._part_buffer = spy
    pool.plan("s", [url])
    with pool.open(url) as f:
        assert f.read() == data
    pool.forget("s")
    (buf,) = last
    assert len(buf) == part
    assert _resident_bytes(buf) <= 3 * READ + 4096, _resident_bytes(buf)


def test_later_passes_reuse_every_buffer_when_the_bytes_fit(slow):
    """Passes over shards whose part buffers fit in ``buffer_bytes`` take every part buffer
    of the second and later passes from the spares of the first: none is allocated (and
    page-faulted) again, as the spares are not trimmed for parts 0 waiting for their
    answers, and a part its reader finished before its fetch's end was counted still leaves
    its buffer; every pass reads the exact bytes."""
    part = 8 * READ
    sizes = [part + 5 * READ + 11, part + 6 * READ - 7, part + 5 * READ + 300]
    blobs = {f"t{i}.bin": blob(n, 40 + i) for i, n in enumerate(sizes)}
    urls = list(publish(slow, blobs).values())
    need = 2 * part * len(sizes)  # a part's buffer each (the last parts' too: one class)
    pool = FetchPool(part_bytes=part, buffer_bytes=need + READ, max_connections=4)
    orig, made = pool._part_buffer, []

    def spy(p, n):  # (part index, part length, buffer length, reused from the spares)
        spare = {id(b) for b in pool._spare}
        orig(p, n)
        made.append((p.index, n, len(p.buf), id(p.buf) in spare))

    pool._part_buffer = spy
    fresh, every = [], []
    for epoch in range(4):
        del made[:]
        # (each pass starts as if the first shard's size were unknown: one known is cut into
        # finer parts, test_a_first_object_of_known_size_comes_in_fine_parts_at_once)
        remote.seen_stat(urls[0], forget=True)
        pool.plan("s", urls)  # the whole pass read ahead, as a stream plans it
        for url, name in zip(urls, blobs):
            with pool.open(url) as f:
                assert f.read() == blobs[name]
        pool.forget("s")
        deadline = time.monotonic() + 10  # the pass's fetches end (a reader can be done first)
        while pool.stats()["in_flight"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(made) == 2 * len(sizes)
        every += [m[2] for m in made if not m[3]]
        if epoch:
            fresh += [m for m in made if not m[3]]
    # (a buffer can come back to the spares a moment after its pass: one fresh allocation
    # in three passes is let through)
    assert len(fresh) <= 1, fresh
    st = pool.stats()  # the pool's own count of fresh buffers agrees
    assert st["new_buffers"] == len(every) and st["new_buffer_bytes"] == sum(every)
    assert pool._spare_bytes + pool._reserved <= pool.buffer_bytes
    assert pool._reserved == pool._unheld == 0  # every part released, none left counted


def test_a_reader_closed_while_another_thread_holds_the_lock_does_not_hang(slow):
    """The garbage collector can close an abandoned shard stream's reader in a thread that
    ``_dispatch`` is starting, while the starting thread holds the pool's lock and waits
    for that thread to run: the close stops waiting for the lock after a while and leaves
    the cancel to the lock's holder, done at its next dispatch (before, both threads hung
    for good, and every later user of the pool with them)."""
    data = blob(3 * PART, 5)
    (url,) = publish(slow, {"h.bin": data}).values()
    pool = FetchPool(part_bytes=PART, buffer_bytes=64 * PART)
    pool.plan("s", [url])
    f = pool.open(url)
    obj = f.raw.obj
    closed = threading.Event()
    with pool._lock:  # the starter's hold
        closer = threading.Thread(target=lambda: (f.close(), closed.set()), daemon=True)
        closer.start()
        assert closed.wait(10), "the close waited for the lock its caller's starter holds"
        assert not obj.cancelled
        pool._dispatch()
        assert obj.cancelled
    closer.join()
    pool.forget("s")
    wait_for(lambda: settled(pool))
    assert pool.stats()["buffered"] == 0


def test_a_pass_next_shard_is_asked_for_beside_its_first_shard_parts(slow):
    """At a cold pass start, the parts of the stream's first shard (size known: every part
    at once) get connections on top of the pool's K: the plan's next shard is asked for
    while every one of them is still in progress, not once one of them is done (a second
    shard's first part then arrived a request late at every cold start, and the readers
    waited for it). Bytes exact."""
    slow.delay = 3.0  # no request of the first shard is answered within 3 s (a loaded VM)
    part = 8 * READ
    blobs = {"h0.bin": blob(part + part // 2 + 5, 70), "h1.bin": blob(part + 11, 71)}
    urls = publish(slow, blobs)
    for url in urls.values():
        remote.stat(url)
    del slow.ranges[:]
    pool = FetchPool(part_bytes=part, buffer_bytes=64 * part, max_connections=16)
    assert pool.k == 4  # fewer than the first shard's 5 parts
    t0 = time.monotonic()
    pool.plan("s", [urls["h0.bin"], urls["h1.bin"]])
    wait_for(lambda: any(name == "h1.bin" for name, _ in slow.ranges), timeout=10)
    done = pool.stats()["requests"]  # requests finished when the next shard's was made
    assert done == 0, (done, time.monotonic() - t0)
    # and all five of the first shard's parts are asked for beside it, before any answer
    # (their threads may reach the server just after the next shard's: wait, then check
    # that still no request has finished)
    wait_for(lambda: sum(name == "h0.bin" for name, _ in slow.ranges) == 5, timeout=2)
    done = pool.stats()["requests"]
    assert done == 0, (done, time.monotonic() - t0)
    for name in ("h0.bin", "h1.bin"):
        with pool.open(urls[name]) as f:
            assert f.read() == blobs[name]
    pool.forget("s")
    wait_for(lambda: settled(pool))
    assert pool.stats()["buffered"] == 0


def test_a_first_object_of_known_size_comes_in_fine_parts_at_once(slow):
    """The shard a stream reads first, its size known from an earlier response (the count's
    ``stat``): every part asked for at once, bounded, its first ``part_bytes`` in parts of
    ``part_bytes / 4``, each on a connection of its own (more than the pool's first K of
    4), so the first bytes come at several connections' rate; the plan's next shard still
    starts with an open-ended part 0, and so does a first shard of unknown size; bytes
    exact."""
    slow.delay = 0.3  # every request of the first shard is in progress at once
    part = 8 * READ
    quarter = part // 4
    blobs = {"f0.bin": blob(part + part // 2 + 5, 60), "f1.bin": blob(part + 7, 61),
             "g0.bin": blob(part + 9, 62)}
    urls = publish(slow, blobs)
    remote.stat(urls["f0.bin"])
    remote.stat(urls["f1.bin"])
    del slow.ranges[:]
    slow.peak = 0
    pool = FetchPool(part_bytes=part, buffer_bytes=64 * part, max_connections=16)
    pool.plan("s", [urls["f0.bin"], urls["f1.bin"]])
    for name in ("f0.bin", "f1.bin"):
        with pool.open(urls[name]) as f:
            assert f.read() == blobs[name]
    pool.forget("s")
    n = len(blobs["f0.bin"])
    asked = [r for got, r in slow.ranges if got == "f0.bin"]
    assert sorted(asked, key=str) == sorted(
        [f"bytes={s}-{s + quarter - 1}" for s in range(0, part, quarter)]
        + [f"bytes={part}-{n - 1}"], key=str)
    # first, all at once (the plan's next shard may be asked for beside them: its part 0
    # does not wait for theirs, see test_a_pass_next_shard_is_asked_for_beside_...)
    assert sum(got == "f0.bin" for got, _ in slow.ranges[:6]) == 5
    assert slow.peak >= 5
    assert [r for got, r in slow.ranges if got == "f1.bin"][0] is None  # open-ended part 0
    other = FetchPool(part_bytes=part, buffer_bytes=64 * part, max_connections=16)
    other.plan("t", [urls["g0.bin"]])  # not stat'ed: its size is unknown
    with other.open(urls["g0.bin"]) as f:
        assert f.read() == blobs["g0.bin"]
    other.forget("t")
    assert [r for got, r in slow.ranges if got == "g0.bin"][0] is None


def test_s3_modules_are_imported_behind_the_client_being_made(tmp_path):
    """A request's thread imports botocore's (and urllib3's) exception modules only once
    the thread making the S3 client (``warm``, at construction) is done: two threads
    importing boto3 and botocore at once could take the import system's module locks in
    opposite orders, which Python raises as a ``_DeadlockError`` (seen in a construction
    over s3:// shards). Checked in a fresh interpreter (nothing of botocore imported yet)
    with the client's lock held, as ``warm`` holds it while it makes the client."""
    import subprocess

    code = """
import sys, threading, time
from turboloader.io import remote
assert "botocore.exceptions" not in sys.modules
lock = remote._LOCKS["s3"]
lock.acquire()  # as warm's thread while it makes the client
errors = []
t = threading.Thread(target=lambda: errors.append(remote._S3().errors()))
t.start()
time.sleep(0.5)
assert t.is_alive() and "botocore.exceptions" not in sys.modules, "imported while the client was made"
lock.release()
t.join(60)
import botocore.exceptions, urllib3.exceptions
assert errors == [(botocore.exceptions.BotoCoreError, urllib3.exceptions.HTTPError)], errors
print("OK")
"""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=root))
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-2000:]


def test_readers_of_a_mixing_window_leave_the_buffer_to_the_read_ahead(slow):
    """The parts the open readers are in do not count against ``buffer_bytes``: a stream
    reads the shards of its mixing window at once (16 by default), and once those parts
    filled the bound nothing more was fetched ahead (every next part came only when a
    reader waited for it, one connection per reader). Here six readers are each inside the
    first part of their object, more than the 4-part bound: four more parts are still asked
    for before anyone waits for them, the bytes stay exact, and the buffers
    stay within the bound plus one part per open reader."""
    blobs = {f"w{i}.bin": blob(2 * PART, 60 + i) for i in range(10)}
    urls = publish(slow, blobs)
    names = list(blobs)
    pool = FetchPool(part_bytes=PART, buffer_bytes=4 * PART, max_connections=4)
    pool.plan("s", [urls[n] for n in names])
    wait_for(lambda: pool.stats()["bytes_fetched"] == 4 * PART)  # the bound: four parts
    readers = [pool.open(urls[n]) for n in names[:6]]  # the window
    for f, n in zip(readers, names):
        assert f.read(1) == blobs[n][:1]
    # beyond the six parts the readers are in, four more (the bound) are asked for with no
    # reader waiting for them: second parts of the open objects and first parts of the
    # next ones, in an order set by when each first answer gave its object's size
    ahead = lambda: [(n, r) for n, r in slow.ranges if not (n in names[:6] and r is None)]
    wait_for(lambda: len(ahead()) >= 4, timeout=10)
    waits = pool.stats()["waits"]
    for f, n in zip(readers, names):
        assert f.read() == blobs[n][1:]
        f.close()
    for n in names[6:]:
        with pool.open(urls[n]) as f:
            assert f.read() == blobs[n]
    st = pool.stats()
    assert st["waits"] >= waits and st["buffered"] == 0
    assert st["peak_buffered"] <= (4 + 6 + 1) * PART
