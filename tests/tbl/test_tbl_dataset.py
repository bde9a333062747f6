"""TBLDataset: agreement with ImageFolder, per-sample randomness, failure policy, cache,
RAW records, several files, DataLoader workers with DistributedSampler."""

import pytest
import torch

from turboloader import transforms as T
from turboloader.tools.convert import convert
from turboloader.data.tbl_dataset import TBLDataset
from turboloader.errors import DecodeError, FailureBudgetExceeded, FormatError
from turboloader.io.tbl import TBLFile


def _train():
    return T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from turboloader.tools.synthetic import synthetic_jpegs

    root = tmp_path_factory.mktemp("ds")
    folder = root / "folder"
    for i, (jpeg, label) in enumerate(synthetic_jpegs(12, seed=3, num_classes=3)):
        d = folder / f"c{label}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:03d}.jpg").write_bytes(jpeg)
    convert(folder, root / "all.tbl")
    return root


def test_same_samples_as_image_folder(data):
    from turboloader.data import ImageFolder

    tbl = TBLDataset(data / "all.tbl", _train(), seed=7)
    ref = ImageFolder(str(data / "folder"), _train(), seed=7)
    assert len(tbl) == len(ref) == 12 and tbl.classes == ref.classes
    assert tbl.targets.tolist() == ref.targets
    for epoch in (0, 3):
        tbl.set_epoch(epoch)
        ref.set_epoch(epoch)
        for i in range(len(tbl)):
            x, y = tbl[i]
            rx, ry = ref[i]
            assert y == ry and x.shape == (3, 64, 64)
            torch.testing.assert_close(x, rx, rtol=0, atol=0)


def test_randomness_is_per_index_and_epoch(data):
    ds = TBLDataset(data / "all.tbl", _train())
    assert not torch.equal(ds[5][0], ds[5][0])  # no set_epoch: fresh draws, as torchvision
    ds.set_epoch(0)
    a, b = ds[5][0], ds[5][0]
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    ds.set_epoch(1)
    assert not torch.equal(ds[5][0], a)


def test_no_transform_gives_pil_images(data):
    ds = TBLDataset(data / "all.tbl")
    img, label = ds[0]
    with TBLFile(data / "all.tbl") as f:
        assert img.size == (int(f.widths[0]), int(f.heights[0])) and label == f.labels[0]


def test_cache_and_stats(data):
    ds = TBLDataset(data / "all.tbl", _train(), cache="64MB")
    for _ in range(2):
        for i in range(len(ds)):
            ds[i]
    stats = ds.stats()
    assert stats["samples"] == 24 and stats["cache_hits"] == 12 and stats["cache_misses"] == 12
    assert stats["bytes_read"] > 0


def _damage(src, dst, record):
    data = bytearray(src.read_bytes())
    with TBLFile(src) as f:
        offset, key = int(f.index["offset"][record]), f.keys[record]
    data[offset + 200] ^= 0xFF
    dst.write_bytes(bytes(data))
    return key


def test_failure_policy(data, tmp_path):
    key = _damage(data / "all.tbl", tmp_path / "bad.tbl", 4)
    strict = TBLDataset(tmp_path / "bad.tbl", _train())
    with pytest.raises(FormatError, match="CRC-32") as e:
        strict[4]
    assert any(key in n and "bad.tbl" in n for n in e.value.__notes__)
    skip = TBLDataset(tmp_path / "bad.tbl", _train(), on_error="skip", max_failures=2)
    x, y = skip[4]
    assert y == skip.targets[5]  # replaced by the next readable index
    skipped = skip.stats()["skipped"]
    assert [(s["key"], s["shard"]) for s in skipped] == [(key, str(tmp_path / "bad.tbl"))]
    tight = TBLDataset(tmp_path / "bad.tbl", _train(), on_error="skip", max_failures=0)
    with pytest.raises(FailureBudgetExceeded):
        tight[4]
    unchecked = TBLDataset(tmp_path / "bad.tbl", _train(), check_crc=False)
    with pytest.raises(DecodeError):  # without the CRC the decoder meets the damage
        unchecked[4]


def test_raw_records_match_jpeg_records(data, tmp_path):
    convert(data / "folder", tmp_path / "raw.tbl", codec="raw")
    raw = TBLDataset(tmp_path / "raw.tbl", T.Compose([T.Resize(48), T.CenterCrop(48),
                                                     T.ToTensor()]))
    jpg = TBLDataset(data / "all.tbl", T.Compose([T.Resize(48), T.CenterCrop(48),
                                                 T.ToTensor()]))
    for i in range(len(raw)):
        (a, ya), (b, yb) = raw[i], jpg[i]
        assert ya == yb
        # the JPEG path may decode at a reduced DCT scale; the raw path resizes full pixels
        assert (a - b).abs().mean() < 0.03


def test_several_files_and_bad_paths(data, tmp_path):
    ds = TBLDataset([data / "all.tbl", data / "all.tbl"])
    assert len(ds) == 24 and ds.locate(13) == (str(data / "all.tbl"), 1)
    assert ds.targets[13] == ds.targets[1]
    with pytest.raises(FileNotFoundError):
        TBLDataset(tmp_path / "missing.tbl")
    (tmp_path / "junk.tbl").write_bytes(b"junk" * 50)
    with pytest.raises(FormatError):
        TBLDataset(tmp_path / "junk.tbl")
    with pytest.raises(IndexError):
        ds[24]


def test_distributed_sampler_with_workers(data):
    ds = TBLDataset(data / "all.tbl", _train())
    seen = []
    for rank in range(2):
        sampler = torch.utils.data.distributed.DistributedSampler(ds, num_replicas=2, rank=rank,
                                                                  shuffle=True, seed=1)
        sampler.set_epoch(2)
        loader = torch.utils.data.DataLoader(ds, batch_size=4, sampler=sampler, num_workers=2)
        indices = list(sampler)
        labels = torch.cat([y for _, y in loader]).tolist()
        assert labels == ds.targets[indices].tolist()
        seen += indices
    assert sorted(seen) == list(range(12))


def test_skipped_reaches_stats_from_torch_workers(data, tmp_path):
    key = _damage(data / "all.tbl", tmp_path / "bad.tbl", 4)
    ds = TBLDataset(tmp_path / "bad.tbl", _train(), on_error="skip", max_failures=2,
                    stats_interval=1000)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2,
                                         persistent_workers=True)
    assert len(torch.cat([y for _, y in loader])) == len(ds)
    st = ds.stats()  # the workers are alive: the skip was reported when it happened
    assert st["failures"] == 1
    assert [(s["key"], s["shard"]) for s in st["skipped"]] == [(key, str(tmp_path / "bad.tbl"))]
    assert st["skipped"][0]["reason"].startswith("FormatError")


def test_thread_backend_streams_are_per_thread(data):
    from turboloader.loader import DataLoader

    ds = TBLDataset(data / "all.tbl", _train())
    batches = list(DataLoader(ds, batch_size=6, num_workers=2, backend="threads"))
    assert sum(len(y) for _, y in batches) == len(ds)
    workers = ds.stats()["workers"]
    # each decode thread its own recorder (a batch of 6 is split 3 + 3 between them)
    assert set(workers) <= {"rank0-thread0", "rank0-thread1"} and workers
    assert sum(w["samples"] for w in workers.values()) == len(ds)
