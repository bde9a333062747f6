"""The byte-bounded LRU and the dataset cache across epochs and workers."""

import numpy as np
import pytest
import torch
import torch.utils.data
from helpers.shards import labels_of, size_of

from turboloader import ImageFolder, TarDataset
from turboloader.data.cache import ByteLRU, SampleCache, parse_size

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
    cap = 3 * IMG + 100   # three images per stream (each slot starts on 64 bytes)
    ds = TarDataset(make_shards([10, 10]), size_of, cache=cap)
    loader = torch.utils.data.DataLoader(ds, batch_size=5, num_workers=2, persistent_workers=True)
    for epoch in (0, 1, 2):
        ds.set_epoch(epoch)
        assert sorted(torch.cat([y for _, y in loader]).tolist()) == list(range(20))
    # admitted until full, then kept: the same 3 per worker hit in every later epoch
    later = ds.stats(epoch=2)
    assert later["cache_hits"] == 6 and later["cache_misses"] == 14
    assert later["cache_hit_rate"] == pytest.approx(6 / 20) and later["cache_evictions"] == 0
    for w in ds.stats()["workers"].values():
        c = w["cache"]
        assert c["items"] == 3 and c["bytes"] == 3 * IMG and c["mapped"] <= cap
        assert c["not_admitted"] == 7 * 3 and c["evictions"] == 0


def test_sample_cache_admits_until_full_and_keeps():
    cache = SampleCache(1000)
    a = cache.reserve(300)
    assert a.dtype == np.uint8 and a.shape == (300,) and a.flags.writeable
    a[:] = 1
    cache.put("a", (a, (10, 10), 0), 300)
    b = cache.reserve(300)   # starts on the next 64-byte boundary: 320
    b[:] = 2
    cache.put("b", (b, (10, 10), 1), 300)
    assert cache.reserve(400) is None      # 640 + 400 > 1000: not admitted
    c = cache.reserve(300)                 # a smaller one still fits
    assert c is not None and c.ctypes.data % 64 == 0
    cache.put("c", (c, None, 2), 300)
    assert cache.get("a")[0].tolist() == [1] * 300 and cache.get("b")[2] == 1   # kept
    assert cache.get("zz") is None and "c" in cache and len(cache) == 3
    s = cache.stats()
    assert (s["hits"], s["misses"], s["not_admitted"], s["evictions"]) == (2, 1, 1, 0)
    assert s["bytes"] == 900 and s["mapped"] == 1000 and s["hit_rate"] == pytest.approx(2 / 3)
    assert cache.reserve(2000) is None     # larger than the whole capacity


def test_sample_cache_maps_slabs_within_capacity():
    from turboloader.data import cache as mod

    cache = SampleCache(3 * mod._SLAB // 2)
    slots = [cache.reserve(mod._SLAB // 2) for _ in range(4)]
    assert all(s is not None for s in slots[:3]) and slots[3] is None
    assert cache.mapped == 3 * mod._SLAB // 2
    # entries stay valid (their memory is never handed out again)
    for i, s in enumerate(slots[:3]):
        s[:8] = i
    assert [int(s[0]) for s in slots[:3]] == [0, 1, 2]


def test_full_cache_decodes_the_rest_as_uncached(make_shards):
    """A sample the full cache did not admit is decoded from its bytes by the fused path:
    pixel for pixel what the dataset without a cache gives."""
    from turboloader import transforms as T

    paths = make_shards([12])
    pipe = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToImage(),
                      T.ToDtype(torch.float32, scale=True)])
    plain = TarDataset(paths, pipe, seed=3, shuffle=False)
    cached = TarDataset(paths, pipe, seed=3, shuffle=False, cache=4 * IMG + 200)
    for epoch in (0, 1):
        plain.set_epoch(epoch)
        cached.set_epoch(epoch)
        want = {y: x for x, y in plain}
        got = {y: x for x, y in cached}
        assert sorted(got) == list(range(12))
        for y in range(4, 12):   # admitted: the first four read
            assert torch.equal(got[y], want[y]), (epoch, y)
    st = cached.stats(epoch=1)
    assert st["cache_hits"] == 4 and st["cache_misses"] == 8


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


@pytest.mark.parametrize("size", [(375, 500), (500, 375), (161, 300), (40, 60), (700, 1000),
                                  (161, 172), (172, 161), (333, 500)])
@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_cache_short_side_is_the_stored_short_side(size, fmt):
    """``cache_short_side=S`` stores the image resized to short side S (never enlarged):
    a JPEG decoded at the smallest DCT scale still at least S, then resampled as Pillow's
    antialiased bilinear resize does, at the size torchvision's ``Resize(S)`` makes (the
    oracle: torchvision itself, which truncates the long side: 161 x 172 -> 160 x 170)."""
    import io

    import torch
    from PIL import Image
    from torchvision.transforms import v2

    from turboloader.decode import decode_jpeg, pick_scale
    from turboloader.decode.image import decode_array

    rng = np.random.default_rng(sum(size))
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (*size, 3), np.uint8)).save(buf, fmt)
    data = buf.getvalue()
    cache = SampleCache(10**7)
    arr, source = decode_array(data, short_side=160, alloc=cache.reserve)
    assert source == size
    h, w = size
    if fmt == "JPEG":
        decoded = Image.fromarray(decode_jpeg(data, scale=pick_scale(size, (160, 160))))
    else:
        decoded = Image.open(io.BytesIO(data)).convert("RGB")
    if min(size) <= 160:
        want_hw = size
    else:
        want_hw = tuple(v2.Resize(160)(torch.zeros(3, h, w, dtype=torch.uint8)).shape[1:])
    assert arr.shape == (*want_hw, 3) and min(want_hw) == min(160, min(size))
    if decoded.size != want_hw[::-1]:
        decoded = decoded.resize(want_hw[::-1], Image.Resampling.BILINEAR)
    assert (arr == np.asarray(decoded)).all()
    assert cache.stats()["mapped"] >= arr.nbytes   # it lives in the cache's memory
