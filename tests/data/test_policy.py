"""The failure policy: corrupt, truncated, PNG, CMYK and label-less samples, raise vs skip."""

import os

import numpy as np
import pytest
import torch
import torch.utils.data
from helpers.shards import jpeg, labels_of, size_of, write_tar

from turboloader import (
    DecodeError,
    FailureBudgetExceeded,
    SampleError,
    TarDataset,
    TarFormatError,
)
from turboloader.data.failures import FailurePolicy
from turboloader.io.shards import TarShard

BAD = {"000001": DecodeError, "000002": DecodeError, "000005": SampleError, "000012": DecodeError}


def _mixed_members(n=16):
    rng = np.random.default_rng(0)
    members = []
    for i in range(n):
        key = f"{i:06d}"
        if i == 1:  # corrupt: a JPEG marker, then noise
            data, ext = b"\xff\xd8\xff\xe0" + rng.integers(0, 256, 600, np.uint8).tobytes(), "jpg"
        elif i == 2:  # truncated
            data, ext = jpeg(i)[: len(jpeg(i)) // 2], "jpg"
        elif i == 3:
            data, ext = jpeg(i, fmt="PNG"), "png"
        elif i == 4:
            data, ext = jpeg(i, mode="CMYK"), "jpg"
        elif i == 12:  # not an image at all
            data, ext = b"this is not a PNG file" * 10, "png"
        else:
            data, ext = jpeg(i), "jpg"
        members.append((f"{key}.{ext}", data))
        if i != 5:  # 5 has no label
            members.append((f"{key}.cls", str(i).encode()))
    return members


@pytest.fixture
def mixed(tmp_path):
    return write_tar(tmp_path / "mixed.tar", _mixed_members())


def test_raise_names_shard_key_offset(mixed):
    ds = TarDataset(mixed, size_of, shuffle=False)
    it = iter(ds)
    assert next(it)[1] == 0
    with pytest.raises(DecodeError) as info:
        next(it)
    shard = TarShard(mixed)
    offset = shard.sample(1).offset
    shard.close()
    notes = "\n".join(info.value.__notes__)
    assert mixed in notes and "'000001'" in notes and f"byte offset {offset}" in notes
    assert info.value.args  # libjpeg's own message, not rewritten


def test_raise_label_less(tmp_path):
    path = write_tar(tmp_path / "nolabel.tar", [("x/a.jpg", jpeg(0)), ("x/a.cls", b"0"),
                                                ("x/b.jpg", jpeg(1)), ("x/c.cls", b"2")])
    ds = TarDataset(path, size_of, shuffle=False)
    it = iter(ds)
    assert next(it)[1] == 0
    with pytest.raises(SampleError, match="no label") as info:
        next(it)
    assert "'x/b'" in "\n".join(info.value.__notes__)
    path = write_tar(tmp_path / "noimage.tar", [("c.cls", b"2"), ("c.txt", b"caption")])
    with pytest.raises(SampleError, match="no image"):
        labels_of(TarDataset(path, size_of))


def test_pngs_and_cmyk_decode(mixed):
    ds = TarDataset(mixed, on_error="skip", max_failures=4, shuffle=False)
    out = {y: img for img, y in ds}
    assert out[3].mode == "RGB" and out[3].size == (64, 48)
    ref = np.asarray(out[0], np.int16)
    assert np.asarray(out[4]).shape == (48, 64, 3)
    assert ref.shape == (48, 64, 3)


def test_skip_lists_counts_and_replaces(mixed):
    ds = TarDataset(mixed, size_of, on_error="skip", max_failures=4, seed=1)
    labels = labels_of(ds)
    good = set(range(16)) - {int(k) for k in BAD}
    assert len(labels) == len(ds) == 16
    assert set(labels) == good  # every good sample, plus 4 replacements from them
    st = ds.stats()
    assert st["failures"] == 4 and st["samples"] == 16
    assert {s["key"] for s in st["skipped"]} == set(BAD)
    for s in st["skipped"]:
        assert s["shard"] == mixed and s["reason"].startswith(BAD[s["key"]].__name__)
        assert isinstance(s["offset"], int)
    # the budget: one fewer allowed -> FailureBudgetExceeded, caused by the last failure
    ds = TarDataset(mixed, size_of, on_error="skip", max_failures=3, shuffle=False)
    with pytest.raises(FailureBudgetExceeded) as info:
        labels_of(ds)
    assert len(info.value.failures) == 4 and isinstance(info.value.__cause__, DecodeError)
    # fractions of the process's share
    assert len(labels_of(TarDataset(mixed, size_of, on_error="skip", max_failures=0.25))) == 16
    with pytest.raises(FailureBudgetExceeded):
        labels_of(TarDataset(mixed, size_of, on_error="skip", max_failures=0.2))


def test_skip_keeps_batches_full_with_workers(mixed):
    ds = TarDataset(mixed, size_of, on_error="skip", max_failures=4, seed=2)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2)
    batches = [y for _, y in loader]
    assert [len(b) for b in batches] == [4, 4, 4, 4]
    labels = torch.cat(batches).tolist()
    assert set(labels) == set(range(16)) - {int(k) for k in BAD}
    st = ds.stats()
    assert st["failures"] == 4 and st["samples"] == 16
    assert {s["key"] for s in st["skipped"]} == set(BAD)
    assert sorted(st["workers"]) == ["rank0-worker0", "rank0-worker1"]
    assert sum(w["failures"] for w in st["workers"].values()) == 4


def test_skip_keeps_ranks_equal(mixed):
    counts = []
    for rank in range(3):
        ds = TarDataset(mixed, size_of, on_error="skip", max_failures=4, rank=rank, world_size=3)
        counts.append(len(labels_of(ds)))
    assert counts == [6, 6, 6]


def test_programming_errors_propagate_under_skip(mixed):
    def bad_transform(img):
        raise TypeError("bug in the transform")

    ds = TarDataset(mixed, bad_transform, on_error="skip", max_failures=100)
    with pytest.raises(TypeError, match="bug in the transform"):
        labels_of(ds)
    ds = TarDataset(mixed, size_of, lambda y: y + "x", on_error="skip", max_failures=100)
    with pytest.raises(TypeError):
        labels_of(ds)


def test_errors_cross_worker_processes_typed(mixed):
    ds = TarDataset(mixed, size_of, shuffle=False)
    loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=1)
    it = iter(loader)
    with pytest.raises(DecodeError, match="000001"):
        list(it)
    # the exception's traceback keeps torch's iterator alive; left to the garbage collector,
    # its workers exit only at their 5 s status check (torch's behaviour, any dataset)
    it._shutdown_workers()


def test_malformed_shard(tmp_path, mixed):
    good = write_tar(tmp_path / "good.tar", [("a.jpg", jpeg(0)), ("a.cls", b"7")])
    bad = tmp_path / "bad.tar"
    data = bytearray(open(good, "rb").read())
    data[0] ^= 0x20  # the first header's checksum no longer matches
    bad.write_bytes(bytes(data))
    with pytest.raises(TarFormatError) as info:
        TarDataset([good, str(bad)], size_of)
    assert any(str(bad) in n for n in info.value.__notes__)
    with pytest.warns(RuntimeWarning, match="bad.tar"):
        ds = TarDataset([good, str(bad), mixed], size_of, on_error="skip", max_failures=4)
    assert ds.urls == [good, mixed] and len(ds) == 17
    assert [f["shard"] for f in ds.stats()["failed_shards"]] == [str(bad)]
    assert len(labels_of(ds)) == 17
    # a shard that disappears after indexing is an environment error: never skipped
    ds = TarDataset([good, mixed], size_of, on_error="skip", max_failures=4, shuffle=False)
    os.remove(good)
    with pytest.raises(FileNotFoundError):
        labels_of(ds)


def test_policy_validation():
    with pytest.raises(ValueError):
        FailurePolicy("ignore")
    with pytest.raises(ValueError):
        FailurePolicy("skip", 1.5)
    with pytest.raises(ValueError):
        FailurePolicy("skip", -1)
    with pytest.raises(TypeError):
        FailurePolicy("skip", "10")
    assert FailurePolicy("skip", 0.1).budget(50) == 5
    assert FailurePolicy("skip", 3).budget(50) == 3


def test_duplicate_and_empty_members(tmp_path):
    path = write_tar(tmp_path / "dup.tar", [
        ("a.jpg", jpeg(0)), ("a.cls", b"0"), ("a.jpg", jpeg(1)),  # duplicate within a sample
        ("b.jpg", b""), ("b.cls", b"1"),                          # zero-length image
        ("c.jpg", jpeg(2)), ("c.cls", b"2"),
    ])
    with pytest.raises(SampleError, match="duplicate member 'a.jpg'"):
        labels_of(TarDataset(path, size_of, shuffle=False))
    ds = TarDataset(path, size_of, on_error="skip", max_failures=2, shuffle=False)
    assert labels_of(ds) == [2, 2, 2]
    reasons = {s["key"]: s["reason"] for s in ds.stats()["skipped"]}
    assert reasons["a"].startswith("SampleError") and reasons["b"].startswith("DecodeError")
