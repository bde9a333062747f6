"""Sample counts of remote shards at construction: a shard index (``turboloader index``'s
wids index, ``convert``'s manifest), the node-local count cache, parallel counting."""

import json
import os
import time

import pytest

from helpers.faultproxy import FaultProxy
from helpers.shards import size_of, write_shards
from turboloader.data import TarDataset
from turboloader.io.counts import read_index
from turboloader.tools.cli import main

pytestmark = pytest.mark.slow

SIZES = [5, 3, 7, 4, 6, 2]


def _publish(store, tmp_path, name="ds", sizes=SIZES):
    for p in write_shards(str(tmp_path / name), sizes, name=name):
        with open(p, "rb") as fh:
            store.put(os.path.basename(p), fh.read())
    return [store.url(f"{name}-{i:04d}.tar") for i in range(len(sizes))]


def _shard_bodies(store, log, name):
    """Requests in ``log`` that read a shard's bytes (not its metadata)."""
    if store.scheme == "gs":
        return [p for _, p, _ in log if name in p and "alt=media" in p]
    if store.scheme == "http":
        return [p for _, p, _ in log if name in p and p.endswith(".tar")]
    return [p for m, p, _ in log if name in p and m == "GET" and ".tar" in p]


@pytest.mark.parametrize("store", ["s3", "gs"], indirect=True)
def test_index_command_then_construction_reads_no_shard(store, tmp_path, monkeypatch, capsys):
    urls = _publish(store, tmp_path, "ix")
    pattern = store.url("ix-{0000..0005}.tar")
    assert main(["index", pattern, "-j", "4"]) == 0
    assert f"{len(SIZES)} shards, {sum(SIZES)} samples" in capsys.readouterr().out
    index = read_index(store.url("ix-index.json"))
    assert index == dict(zip(urls, SIZES))
    monkeypatch.setenv("TURBOLOADER_CACHE", str(tmp_path / "empty-cache"))
    with FaultProxy(store.upstream_port) as proxy:
        store.route(monkeypatch, proxy.port)
        ds = TarDataset(pattern, size_of, seed=1)
        assert ds.shard_sizes == SIZES
        assert not _shard_bodies(store, proxy.log, "ix-000")  # counts from the index
        assert len(proxy.log) <= 4  # the index candidates, fetched once each
        got = sorted(int(lab) for _, lab in ds)
    assert got == list(range(sum(SIZES)))


@pytest.mark.parametrize("store", ["http"], indirect=True)
def test_convert_manifest_gives_the_counts(store, tmp_path, monkeypatch):
    from turboloader.tools.manifests import _manifest

    urls = _publish(store, tmp_path, "mf")
    entries = [{"path": f"mf-{i:04d}.tar", "samples": n, "bytes": 0, "sha256": ""}
               for i, n in enumerate(SIZES)]
    doc = _manifest("tar", entries, classes=None, complete=False, shuffle_seed=None)
    store.put("mf-manifest.json", json.dumps(doc).encode())
    with FaultProxy(store.upstream_port) as proxy:
        store.route(monkeypatch, proxy.port)
        urls = [store.url(f"mf-{i:04d}.tar") for i in range(len(SIZES))]
        # an unfinished conversion's manifest is not trusted: the shards are counted
        assert TarDataset(urls, size_of).shard_sizes == SIZES
        assert len(_shard_bodies(store, proxy.log, "mf-000")) >= len(SIZES)
        doc["complete"] = True
        doc["shards"][2]["samples"] = 70  # what the manifest says is what is used
        store.put("mf-manifest.json", json.dumps(doc).encode())
        proxy.log.clear()
        assert TarDataset(urls, size_of).shard_sizes == SIZES[:2] + [70] + SIZES[3:]
        assert not _shard_bodies(store, proxy.log, "mf-000")


@pytest.mark.parametrize("store", ["s3", "az"], indirect=True)
def test_counts_cached_by_etag_and_counted_in_parallel(store, tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOLOADER_CACHE", str(tmp_path / "cache"))
    urls = _publish(store, tmp_path, "cc", sizes=[3] * 12)
    with FaultProxy(store.upstream_port, latency=0.2) as proxy:
        store.route(monkeypatch, proxy.port)
        assert TarDataset(urls, size_of).shard_sizes == [3] * 12
        assert len(_shard_bodies(store, proxy.log, "cc-00")) >= 12
        # the ETag and size kept with the counts come from the reads: no HEAD per shard
        assert not [p for m, p, _ in proxy.log if m == "HEAD"], proxy.log
        assert proxy.max_active >= 4  # many connections, not one after another
        proxy.log.clear()
        assert TarDataset(urls, size_of).shard_sizes == [3] * 12
        assert not _shard_bodies(store, proxy.log, "cc-00")  # the node-local cache
        # a changed object (another ETag) is counted again
        p = write_shards(str(tmp_path / "changed"), [5], name="x")[0]
        with open(p, "rb") as fh:
            store.put("cc-0004.tar", fh.read())
        proxy.log.clear()
        assert TarDataset(urls, size_of).shard_sizes == [3] * 4 + [5] + [3] * 7
        assert len(_shard_bodies(store, proxy.log, "cc-00")) == 1


class _Timed(list):
    """A request log that also keeps when each request arrived (``times``)."""

    def __init__(self):
        super().__init__()
        self.times = []

    def append(self, item):
        self.times.append(time.monotonic())
        super().append(item)


@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_cached_counts_are_checked_while_the_index_is_looked_for(store, tmp_path, monkeypatch):
    """A construction whose shards are in the node-local count cache sends their metadata
    requests at once with the index lookups, not after the lookups' answers: one round
    trip to the store before the counts are known, not two. The counts are the cached
    ones, no shard is read."""
    monkeypatch.setenv("TURBOLOADER_CACHE", str(tmp_path / "cache"))
    urls = _publish(store, tmp_path, "ov", sizes=[3] * 6)
    assert TarDataset(urls, size_of).shard_sizes == [3] * 6  # counted, and cached
    latency = 1.0
    with FaultProxy(store.upstream_port, latency=latency) as proxy:
        store.route(monkeypatch, proxy.port)
        proxy.log = log = _Timed()
        assert TarDataset(urls, size_of).shard_sizes == [3] * 6
    assert not _shard_bodies(store, log, "ov-000")
    heads = [t for (m, _, _), t in zip(log, log.times) if m == "HEAD"]
    lookups = [t for (m, p, _), t in zip(log, log.times) if m == "GET" and ".json" in p]
    assert len(heads) == 6 and lookups, log
    # every HEAD reached the store before the first index lookup could have been answered
    assert max(heads) < min(lookups) + latency, (heads, lookups)


def test_cold_count_takes_the_etag_from_its_own_read(http_root, tmp_path, monkeypatch):
    """Counting a shard cold reads it and nothing else: the count cache's size and ETag come
    from the read's own responses (no metadata request per shard). The next construction
    asks each shard's tag once (one small request), reads none, and a shard that changed
    (another ETag) is read again."""
    monkeypatch.setenv("TURBOLOADER_CACHE", str(tmp_path / "cache"))
    http_root.etags = True
    sizes = [3, 5, 2, 4]
    write_shards(http_root.root, sizes, name="et")
    urls = [f"{http_root.url}/et-{i:04d}.tar" for i in range(len(sizes))]
    names = [u.rsplit("/", 1)[1] for u in urls]
    assert TarDataset(urls, size_of).shard_sizes == sizes
    assert {n: http_root.requests.get(n) for n in names} == {n: 1 for n in names}
    http_root.requests.clear()
    assert TarDataset(urls, size_of).shard_sizes == sizes  # from the count cache
    assert {n: http_root.requests.get(n) for n in names} == {n: 1 for n in names}
    # the one request per shard was the tag's (a 1-byte range), not a read of the shard
    from turboloader.io.remote import seen_stat

    assert seen_stat(urls[0]).size == os.path.getsize(os.path.join(http_root.root, names[0]))
    write_shards(str(tmp_path / "new"), [6], name="x")
    os.replace(str(tmp_path / "new" / "x-0000.tar"), os.path.join(http_root.root, names[2]))
    http_root.requests.clear()
    assert TarDataset(urls, size_of).shard_sizes == [3, 5, 6, 4]
    assert http_root.requests.get(names[2]) == 2 and http_root.requests.get(names[0]) == 1
    # without tags nothing is cached (a change could not be seen): read every time
    http_root.etags = False
    monkeypatch.setenv("TURBOLOADER_CACHE", str(tmp_path / "cache2"))
    http_root.requests.clear()
    assert TarDataset(urls, size_of).shard_sizes == [3, 5, 6, 4]
    assert TarDataset(urls, size_of).shard_sizes == [3, 5, 6, 4]
    assert all(http_root.requests.get(n) >= 2 for n in names)
    kept = tmp_path / "cache2" / "counts"
    assert not kept.exists() or not os.listdir(kept)


def test_index_command_local(tmp_path, capsys):
    paths = write_shards(str(tmp_path / "loc"), [4, 2, 3], name="train")
    assert main(["index", str(tmp_path / "loc")]) == 0
    out = str(tmp_path / "loc" / "train-index.json")
    doc = json.loads(open(out).read())
    assert doc["__kind__"] == "wids-shard-index-v1"
    assert [(e["url"], e["nsamples"], e["filesize"]) for e in doc["shardlist"]] == [
        (os.path.basename(p), n, os.path.getsize(p)) for p, n in zip(paths, [4, 2, 3])]
    assert read_index(out) == dict(zip(paths, [4, 2, 3]))
    # a shard that cannot be counted: an error, and no index
    with open(paths[1], "r+b") as fh:
        fh.write(b"garbage" * 100)
    os.remove(out)
    assert main(["index", str(tmp_path / "loc")]) == 1
    assert not os.path.exists(out)
