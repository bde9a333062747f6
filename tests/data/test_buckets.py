"""Aspect-ratio buckets (``TarDataset.bucketed``): one bucket per batch, each image the one
its header says, resized as decoding it alone would, every sample exactly once per epoch,
every batch kept intact."""

import io

import numpy as np
import pytest
import torch
import torch.utils.data
from helpers.shards import write_tar
from PIL import Image

import turboloader
from turboloader import transforms as T
from turboloader.data import TarDataset
from turboloader.data.buckets import _default_transform, nearest_bucket
from turboloader.errors import DecodeError
from turboloader.transforms._random import sample_rng

SIZES = [(48, 64), (64, 48), (56, 56), (40, 100), (100, 40), (60, 80), (30, 30), (90, 50)]
BUCKETS = [(32, 32), (24, 40), (40, 24)]
N = 60


def photo(i):
    h, w = SIZES[i % len(SIZES)]
    yy, xx = np.mgrid[0:h, 0:w]
    arr = np.stack([(xx * 5 + i * 13) % 256, (yy * 7 + i * 3) % 256, (xx + yy + i) % 256],
                   -1).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=90)
    return buf.getvalue()


@pytest.fixture
def shards(tmp_path):
    members = [(f"{i:05d}.{ext}", data) for i in range(N)
               for ext, data in (("jpg", photo(i)), ("cls", str(i).encode()))]
    half = len(members) // 2
    return [write_tar(tmp_path / "b-0.tar", members[:half]),
            write_tar(tmp_path / "b-1.tar", members[half:])]


def want(i, epoch, seed=0):
    h, w = SIZES[i % len(SIZES)]
    b = BUCKETS[nearest_bucket(h, w, BUCKETS)]
    return T.plan(_default_transform(b)).from_jpeg(photo(i), rng=sample_rng(seed, epoch, i))


def test_nearest_bucket():
    assert nearest_bucket(48, 64, BUCKETS) == 1 and nearest_bucket(64, 48, BUCKETS) == 2
    assert nearest_bucket(56, 56, BUCKETS) == 0
    assert nearest_bucket(10, 1000, BUCKETS) == 1
    assert nearest_bucket(100, 100, [(32, 64), (64, 32)]) == 0  # a tie: the earlier


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("drop_last", [False, True])
def test_buckets_exactly_once_and_intact(shards, workers, drop_last):
    ds = TarDataset(shards, None, seed=0)
    buckets = ds.bucketed(4, BUCKETS, drop_last=drop_last)
    dl = torch.utils.data.DataLoader(buckets, batch_size=None, num_workers=workers,
                                     persistent_workers=workers > 0)
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        batches = list(dl)  # every batch kept to the end of the epoch
        seen = []
        per_stream_partial = 0
        for images, labels in batches:
            assert 1 <= len(labels) <= 4 and images.shape[0] == len(labels)
            shape = tuple(images.shape[2:])
            assert shape in BUCKETS
            per_stream_partial += len(labels) < 4
            for img, i in zip(images, labels.tolist()):
                h, w = SIZES[i % len(SIZES)]
                assert BUCKETS[nearest_bucket(h, w, BUCKETS)] == shape
                assert torch.equal(img, want(i, epoch))
                seen.append(i)
        if drop_last:
            assert per_stream_partial == 0 and len(set(seen)) == len(seen) <= N
            assert N - len(seen) <= max(1, workers) * len(BUCKETS) * 3  # only remainders
        else:
            assert sorted(seen) == list(range(N))  # the remainders come out too


def test_buckets_with_a_bad_image_skip_or_raise(tmp_path):
    members = [(f"{i:05d}.jpg", photo(i) if i != 7 else b"\xff\xd8garbage" * 20)
               for i in range(20)] + [(f"{i:05d}.cls", str(i).encode()) for i in range(20)]
    members.sort()
    path = write_tar(tmp_path / "bad.tar", members)
    with pytest.raises(DecodeError):
        list(TarDataset(path, None).bucketed(4, BUCKETS))
    ds = TarDataset(path, None, on_error="skip", max_failures=2)
    ds.set_epoch(0)
    batches = list(ds.bucketed(4, BUCKETS))
    got = [i for _, labels in batches for i in labels.tolist()]
    # every readable sample once, and the skipped one replaced (as in every grouping) by a
    # good sample of the stream with its slot's draws, in its bucket, in a batch at the end
    assert len(got) == 20 and sorted(set(got)) == [i for i in range(20) if i != 7]
    (again,) = [i for i in set(got) if got.count(i) == 2]
    images, labels = batches[-1]
    assert labels.tolist() == [again]
    bucket = BUCKETS[0]  # (sample 7's header is unreadable: the first bucket)
    assert torch.equal(images[0], T.plan(_default_transform(bucket)).from_jpeg(
        photo(again), rng=sample_rng(0, 0, 7)))
    assert ds.stats()["failures"] == 1


def test_buckets_arguments(shards):
    ds = TarDataset(shards, None)
    with pytest.raises(ValueError):
        ds.bucketed(0, BUCKETS)
    with pytest.raises(ValueError):
        ds.bucketed(4, [])
    with pytest.raises(ValueError, match="delivered"):
        ds.bucketed(4, BUCKETS).state_dict(delivered=[1])


def test_buckets_under_the_process_backend(shards):
    ds = TarDataset(shards, None, seed=0)
    dl = turboloader.DataLoader(ds.bucketed(5, BUCKETS), batch_size=None, num_workers=2,
                                backend="processes")
    dl.set_epoch(3)
    ds.set_epoch(3)
    seen = []
    for images, labels in dl:
        for img, i in zip(images, labels.tolist()):
            assert torch.equal(img, want(i, 3))
            seen.append(i)
    assert sorted(seen) == list(range(N))


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_buckets_on_both_backends_equal_torchs_batches(shards, backend):
    """The thread backend runs the same worker streams in threads: the same batches, in
    the same order, as torch's DataLoader over the same workers."""
    ds = TarDataset(shards, None, seed=0)
    ds.set_epoch(2)
    ref = list(torch.utils.data.DataLoader(ds.bucketed(4, BUCKETS), batch_size=None,
                                           num_workers=2))
    dl = turboloader.DataLoader(ds.bucketed(4, BUCKETS), batch_size=None, num_workers=2,
                                backend=backend)
    dl.set_epoch(2)
    got = list(dl)  # kept
    assert len(got) == len(ref)
    for (a, la), (b, lb) in zip(got, ref):
        assert torch.equal(la, lb) and torch.equal(a, b)
    assert sorted(i for _, y in got for i in y.tolist()) == list(range(N))


def test_batched_on_the_thread_backend(shards):
    from turboloader import transforms as T2

    ds = TarDataset(shards, T2.Compose([T2.Resize(16), T2.CenterCrop(16), T2.ToTensor()]),
                    seed=0)
    ds.set_epoch(1)
    ref = list(torch.utils.data.DataLoader(ds.batched(7, drop_last=True), batch_size=None,
                                           num_workers=2))
    dl = turboloader.DataLoader(ds.batched(7, drop_last=True), batch_size=None, num_workers=2)
    dl.set_epoch(1)
    got = list(dl)
    assert len(got) == len(ref) and all(len(y) == 7 for _, y in got)
    for (a, la), (b, lb) in zip(got, ref):
        assert torch.equal(la, lb) and torch.equal(a, b)


def test_header_sizes_of_large_images_and_late_headers(tmp_path):
    """Headers come from the first 64 KiB of a member; one whose SOF sits later (a large
    ICC profile before it) is read whole."""
    rng = np.random.default_rng(0)
    big = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (300, 500, 3), dtype=np.uint8)).save(big, "JPEG",
                                                                               quality=95)
    late = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (100, 60, 3), dtype=np.uint8)).save(
        late, "JPEG", icc_profile=bytes(rng.integers(0, 255, 150_000, dtype=np.uint8)))
    assert len(big.getvalue()) > 1 << 16 and late.getvalue().find(b"\xff\xc0") > 1 << 16
    path = write_tar(tmp_path / "h.tar", [("a.jpg", big.getvalue()), ("a.cls", b"0"),
                                          ("b.jpg", late.getvalue()), ("b.cls", b"1")])
    ds = TarDataset(path, None, shuffle=False)
    got = {int(y): tuple(x.shape[2:]) for x, ys in ds.bucketed(1, BUCKETS) for y in ys}
    assert got == {0: BUCKETS[nearest_bucket(300, 500, BUCKETS)],
                   1: BUCKETS[nearest_bucket(100, 60, BUCKETS)]}


def test_default_transform_covers_the_bucket_at_a_random_position():
    """The default transform's claim: the largest window of the bucket's aspect ratio, at a
    uniformly random position (with RandomResizedCrop(scale=(1, 1)) 17 of 18 images fell
    back to the centre: its attempts fit only an image of the bucket's exact ratio)."""
    crop = _default_transform((24, 40)).transforms[0]
    for h, w in [(48, 64), (64, 48), (30, 100), (40, 67)]:
        want_h, want_w = (h, round(h * 40 / 24)) if w * 24 > h * 40 else (round(w * 24 / 40), w)
        seen = set()
        for s in range(600):
            p = crop.make_params((h, w), rng=sample_rng(0, 0, s))
            assert (p["height"], p["width"]) == (want_h, want_w)
            assert 0 <= p["top"] <= h - want_h and 0 <= p["left"] <= w - want_w
            seen.add((p["top"], p["left"]))
        # positions spread over the whole range, the extremes included (not the centre)
        for got, n in (({t for t, _ in seen}, h - want_h + 1),
                       ({left for _, left in seen}, w - want_w + 1)):
            assert {0, n - 1} <= got and len(got) >= 0.9 * n
    assert T.plan(_default_transform((24, 40))) is not None  # still fused


def _mask(i):
    h, w = SIZES[i % len(SIZES)]
    yy, xx = np.mgrid[0:h, 0:w]
    return ((xx // 3 + yy // 2 + i) % 7).astype(np.uint8)


@pytest.fixture
def mask_shards(tmp_path):
    members = []
    for i in range(N):
        png = io.BytesIO()
        Image.fromarray(_mask(i)).save(png, "PNG")
        members += [(f"{i:05d}.cls", str(i).encode()), (f"{i:05d}.jpg", photo(i)),
                    (f"{i:05d}.seg.png", png.getvalue())]
    return [write_tar(tmp_path / "m-0.tar", members[:90]),
            write_tar(tmp_path / "m-1.tar", members[90:])]


@pytest.mark.parametrize("cache", [None, "4MB"])
def test_buckets_with_fields_masks_and_the_cache(mask_shards, cache):
    """Fields (a mask following the image) and the cache through the buckets: each image
    as decoding it alone would give (cached: from the decoded image), its mask the stored one through torchvision's
    resized_crop with the image's window, every sample once; with the cache, the same in
    every epoch (the second one served from memory)."""
    from torchvision import tv_tensors
    from torchvision.transforms.v2 import functional as TF

    from turboloader.data import MaskField

    ds = TarDataset(mask_shards, None, seed=0, cache=cache,
                    fields=("jpg", MaskField("seg.png"), "cls"))
    loader = torch.utils.data.DataLoader(ds.bucketed(4, BUCKETS), batch_size=None,
                                         num_workers=2, persistent_workers=True)
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        seen = []
        for images, masks, labels in loader:
            for img, mask, i in zip(images, masks, labels.tolist()):
                h, w = SIZES[i % len(SIZES)]
                b = BUCKETS[nearest_bucket(h, w, BUCKETS)]
                if cache is None:
                    assert torch.equal(img, want(i, epoch))
                else:  # cached images are stored decoded, at full scale: cropped from that
                    full = np.asarray(Image.open(io.BytesIO(photo(i))).convert("RGB"))
                    assert torch.equal(img, T.plan(_default_transform(b)).from_array(
                        full, rng=sample_rng(0, epoch, i)))
                p = _default_transform(b).transforms[0].make_params(
                    (h, w), rng=sample_rng(0, epoch, i))
                ref = TF.resized_crop(tv_tensors.Mask(torch.from_numpy(_mask(i))), p["top"],
                                      p["left"], p["height"], p["width"], list(b))
                assert torch.equal(mask, ref)
                seen.append(i)
        assert sorted(seen) == list(range(N))
    if cache is not None:
        assert ds.stats(1)["cache_hits"] == N
