"""A glob over a store (``TarDataset("s3://bucket/prefix/train-*.tar")``): the store is
listed (every page) and the glob expanded, sorted, with ``glob.glob``'s rule (``*`` stays
within one ``/`` segment); against moto's S3, the GCS emulator, Azurite and fsspec's memory
file system. Nothing matching, or a listing refused: a typed error naming the pattern."""

import fnmatch
import glob
import itertools
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from helpers.faultproxy import FaultProxy
from helpers.shards import size_of, write_shards
from turboloader.errors import RemoteShardError, RemoteShardNotFoundError
from turboloader.io.remote import can_glob, glob_objects
from turboloader.io.shards import expand_urls

pytestmark = pytest.mark.slow

LISTING = ["s3", "gs", "az"]
_n = itertools.count()


def _fresh():
    """A folder name no other test of the session (same emulator) has used."""
    return f"glob{os.getpid()}-{next(_n)}"


NAMES = ["train-0003.tar", "train-0000.tar", "train-0002.tar", "train-0001.tar",
         "train-0001.tar.idx", "val-0000.tar", "sub/train-0009.tar", ".train-0004.tar"]


@pytest.mark.parametrize("store", LISTING, indirect=True)
def test_glob_lists_and_matches_like_a_local_glob(store, tmp_path):
    top = _fresh()
    for name in NAMES:  # put in another order than the sorted one
        store.put(f"{top}/{name}", b"x")
    store.put(f"{top}x/train-0005.tar", b"x")  # a folder sharing the prefix: not listed
    # the oracle: the same names as files, globbed by the standard library
    local = tmp_path / top
    for name in NAMES:
        (local / name).parent.mkdir(parents=True, exist_ok=True)
        (local / name).write_bytes(b"x")
    for pat in ("train-*.tar", "train-000[13].tar", "train-000?.tar", "*/train-*.tar",
                "train-*", "*.tar"):
        want = sorted(os.path.relpath(p, local) for p in
                      glob.glob(str(local / pat)))
        if pat in ("*.tar", "train-*"):  # stores have no hidden objects: .train-0004 too
            want = sorted(set(want) | {n for n in NAMES if "/" not in n
                                       and fnmatch.fnmatchcase(n, pat)})
        got = expand_urls(store.url(f"{top}/{pat}"))
        assert got == [store.url(f"{top}/{n}") for n in want], pat
    # braces first, then globs, as for local paths; plain URLs kept in order
    got = expand_urls([store.url(f"{top}/{{val,train}}-000[0].tar"), store.url("plain.tar")])
    assert got == [store.url(f"{top}/val-0000.tar"), store.url(f"{top}/train-0000.tar"),
                   store.url("plain.tar")]


@pytest.mark.parametrize("store", LISTING, indirect=True)
def test_dataset_from_a_glob_every_sample_once(store, tmp_path, monkeypatch):
    from turboloader.data import TarDataset

    monkeypatch.setenv("TURBOLOADER_CACHE", str(tmp_path / "cache"))
    top = _fresh()
    sizes = [3, 5, 2, 4]
    for p in write_shards(str(tmp_path / "src"), sizes, name="ds"):
        with open(p, "rb") as fh:
            store.put(f"{top}/{os.path.basename(p)}", fh.read())
    ds = TarDataset(store.url(f"{top}/ds-*.tar"), size_of, shuffle=True, seed=1)
    assert ds.shard_sizes == sizes  # sorted: the order the shards were written in
    assert sorted(int(lab) for _, lab in ds) == list(range(sum(sizes)))


@pytest.mark.parametrize("store", LISTING, indirect=True)
def test_nothing_matches_names_the_pattern(store):
    top = _fresh()
    store.put(f"{top}/val-0000.tar", b"x")
    pattern = store.url(f"{top}/train-*.tar")
    with pytest.raises(RemoteShardNotFoundError, match=r"no object matches .*train-\*\.tar") \
            as info:
        expand_urls(pattern)
    assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(RemoteShardNotFoundError, match=r"train-\?\.tar"):
        glob_objects(store.url(f"{top}/train-?.tar"))


@pytest.mark.parametrize("store", LISTING, indirect=True)
def test_listing_refused_is_a_typed_error_without_credentials(store, monkeypatch):
    top = _fresh()
    store.put(f"{top}/train-0000.tar", b"x")
    # the listing request's path: S3 ?list-type=2, GCS /o?prefix=, Azure comp=list
    match = {"s3": "list-type", "gs": "/o?", "az": "comp=list"}[store.scheme]
    with FaultProxy(store.upstream_port) as proxy:
        store.route(monkeypatch, proxy.port)
        proxy.script(match, "status:403")
        with pytest.raises(RemoteShardError) as info:
            glob_objects(store.url(f"{top}/train-*.tar"), backoff=0.01)
        assert not isinstance(info.value, RemoteShardNotFoundError)
        text = str(info.value) + " ".join(info.value.__notes__)
        assert f"{top}/train-*.tar" in text and "403" in text
        for secret in ("s3cr3t", "AccountKey", "Eby8vdM02"):
            assert secret not in text
        # a transient answer is retried, then the listing goes through
        proxy.script(match, "status:503")
        assert glob_objects(store.url(f"{top}/train-*.tar"), backoff=0.01) == [
            store.url(f"{top}/train-0000.tar")]
        assert proxy.faults_left() == 0


@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_s3_listing_is_paginated(store):
    """Over 1000 objects: S3 answers 1000 keys a page; every page is read. The objects go
    straight into moto's backend (the server runs in this process): 1003 PUTs over HTTP
    take a minute on a loaded 2-core machine."""
    top = _fresh()
    names = [f"{top}/s-{i:05d}.tar" for i in range(1003)]
    try:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
        for n in names:
            backend.put_object("bucket", n, b"")
    except (ImportError, AttributeError, KeyError):  # another moto: through its API
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda n: store.put(n, b""), names))
    got = glob_objects(store.url(f"{top}/s-*.tar"))
    assert got == [store.url(n) for n in names]
    assert glob_objects(store.url(f"{top}/s-0100?.tar")) == [store.url(n) for n in names[1000:]]


def test_fsspec_glob():
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    top = _fresh()
    for name in NAMES:
        fs.pipe_file(f"/tl-glob/{top}/{name}", b"x")
    got = expand_urls(f"memory://tl-glob/{top}/train-*.tar")
    assert got == [f"memory://tl-glob/{top}/train-000{i}.tar" for i in range(4)]
    assert expand_urls(f"memory://tl-glob/{top}/*/t*.tar") == [
        f"memory://tl-glob/{top}/sub/train-0009.tar"]
    with pytest.raises(RemoteShardNotFoundError, match="nope-"):
        expand_urls(f"memory://tl-glob/{top}/nope-*.tar")
    with pytest.raises(RemoteShardNotFoundError, match="missing"):
        expand_urls(f"memory://tl-glob/missing/*.tar")


def test_which_urls_glob():
    assert can_glob("s3://b/train-*.tar") and can_glob("gs://b/x/[ab].tar")
    assert can_glob("az://c/p/t?.tar")
    # HTTP has no listing and '?' starts its query string; a glob in the bucket is not one
    assert not can_glob("https://host/train-*.tar?sig=1") and not can_glob("http://h/a?b")
    assert not can_glob("s3://b/train-0000.tar") and not can_glob("s3://buck*/x.tar")
    assert expand_urls("https://host/x-*.tar") == ["https://host/x-*.tar"]
    with pytest.raises(ValueError, match="not a glob"):
        glob_objects("s3://b/plain.tar")
