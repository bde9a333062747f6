"""The byte-bounded LRU and the dataset cache across epochs and workers."""

import numpy as np
import pytest
import torch
import torch.utils.data
from helpers.shards import labels_of, size_of

from turboloader import ImageFolder, TarDataset
from turboloader.data.cache import ByteLRU, parse_size

IMG = 64 * 48 * 3  # bytes of one decoded sample


def test_lru_bounds_and_order():
    lru = ByteLRU(100)
    assert lru.put("a", 1, 40) == 0 and lru.put("b", 2, 40) == 0
    assert lru.get("a") == 1  # a is now the most recent: b goes first
    assert lru.put("c", 3, 40) == 1
    assert "b" not in lru and lru.get("b") is None
    assert lru.put("big", 4, 101) == 0 and "big" not in lru  # larger than the whole cache
    assert lru.put("a", 5, 61) == 1  # replacing a resizes it and evicts c
    assert lru.nbytes == 61 and lru.get("a") == 5
    s = lru.stats()
    assert (s["hits"], s["misses"], s["evictions"], s["bytes"], s["items"]) == (2, 1, 2, 61, 1)


def test_parse_size():
    assert parse_size("2GiB") == 2**31 and parse_size("1.5k") == 1500 and parse_size("512MB") == 512e6
    with pytest.raises(ValueError):
        parse_size("lots")
    with pytest.raises(TypeError):
        parse_size(1.5)


def test_second_epoch_decodes_nothing(make_shards):
    ds = TarDataset(make_shards([7, 5, 6]), size_of, seed=4, cache=18 * IMG, stats_interval=4)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, persistent_workers=True)
    per_epoch = []
    for epoch in (0, 1, 2):
        ds.set_epoch(epoch)
        per_epoch.append(torch.cat([y for _, y in loader]).tolist())
        assert sorted(per_epoch[-1]) == list(range(18))
    assert per_epoch[1] != per_epoch[2]  # still reshuffled within each worker
    first, second = ds.stats(epoch=0), ds.stats(epoch=1)
    assert first["cache_misses"] == 18 and first["cache_hits"] == 0
    assert second["cache_hits"] == second["samples"] == 18 and second["cache_misses"] == 0
    assert second["decode_s"] == 0 and second["bytes_read"] == 0 and second["read_s"] == 0
    assert first["bytes_read"] > 18 * 1000
    assert len(second["workers"]) == 2
    for name, w in second["workers"].items():
        assert w["samples"] == 9 and w["cache_hits"] == 9 and w["cache_misses"] == 0, name
        assert w["cache"]["bytes"] == 9 * IMG <= w["cache"]["capacity"]
    assert ds.stats()["cache_hits"] == 36


def test_cache_that_does_not_fit_stays_bounded(make_shards):
    cap = 3 * IMG + 100
    ds = TarDataset(make_shards([10, 10]), size_of, cache=cap)
    loader = torch.utils.data.DataLoader(ds, batch_size=5, num_workers=2, persistent_workers=True)
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        assert sorted(torch.cat([y for _, y in loader]).tolist()) == list(range(20))
    st = ds.stats()
    assert st["cache_evictions"] > 0 and st["cache_misses"] > 20
    for w in st["workers"].values():
        assert 0 < w["cache"]["bytes"] <= cap and w["cache"]["items"] == 3


def test_cache_outputs_match_uncached(make_shards):
    paths = make_shards([6])
    plain = {y: np.asarray(img) for img, y in TarDataset(paths, shuffle=False)}
    cached = TarDataset(paths, shuffle=False, cache="1MB")
    for _ in range(2):
        for img, y in cached:
            assert (np.asarray(img) == plain[y]).all()
    assert cached.stats(epoch=0)["cache_hits"] == 6


def test_cache_short_side(make_shards):
    ds = TarDataset(make_shards([4]), size_of, cache="1MB", cache_short_side=24, shuffle=False)
    labels_of(ds)
    arr, source, label = ds._state.decoder.cache.get(0)
    assert label == 0
    assert arr.shape == (24, 32, 3) and tuple(source) == (48, 64)
    assert not arr.flags.writeable


def test_image_folder_cache(tmp_path):
    from helpers.shards import jpeg

    for i in range(6):
        d = tmp_path / f"c{i % 2}"
        d.mkdir(exist_ok=True)
        (d / f"{i}.jpg").write_bytes(jpeg(i))
    ds = ImageFolder(str(tmp_path), size_of, cache="1MB")
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        assert [ds[i][1] for i in range(6)] == ds.targets
    st = ds.stats(epoch=1)
    assert st["cache_hits"] == 6 and st["cache_misses"] == 0 and st["bytes_read"] == 0
