"""Failure accounting: by distinct sample, in linear time, with a budget per pass (map-style
datasets replace a failed index by the next readable one)."""

import os
import time

import pytest
import torch
import torch.utils.data
from helpers.shards import jpeg

from turboloader import transforms as T
from turboloader.data import ImageFolder, TBLDataset
from turboloader.errors import FailureBudgetExceeded
from turboloader.io.tbl import TBLWriter

TF = T.Compose([T.Resize(8), T.CenterCrop(8), T.ToTensor()])


def folder(tmp_path, n, bad):
    for i in range(n):
        d = tmp_path / "f" / f"c{i:03d}"
        d.mkdir(parents=True)
        data = jpeg(i)
        (d / "x.jpg").write_bytes(data[: len(data) // 3] if i in bad else data)
    return str(tmp_path / "f")


def test_consecutive_bad_files_count_once_each(tmp_path):
    root = folder(tmp_path, 20, bad={5, 6, 7, 8, 9})
    ds = ImageFolder(root, TF, on_error="skip", max_failures=5)
    got = ds.__getitems__(list(range(20)))
    assert [y for _, y in got] == list(range(5)) + [10] * 5 + list(range(10, 20))
    st = ds.stats()
    assert st["failures"] == 5
    assert sorted(s["key"] for s in st["skipped"]) == [f"c{i:03d}/x.jpg" for i in range(5, 10)]


def test_a_truncated_tbl_file_is_counted_per_record_in_linear_time(tmp_path):
    path = str(tmp_path / "t.tbl")
    with TBLWriter(path) as w:
        for i in range(800):
            w.write(jpeg(i % 50), key=f"{i:05d}", label=i)
    ds = TBLDataset(path, TF, on_error="skip", max_failures=0.5, check_crc=False)
    it = iter(torch.utils.data.DataLoader(ds, batch_size=50))
    labels = next(it)[1].tolist()
    with open(path, "r+b") as f:  # cut mid-epoch, the file open: the last records are gone
        f.truncate(os.path.getsize(path) * 9 // 10)
    t = time.perf_counter()
    labels += [y for _, ys in it for y in ys.tolist()]
    elapsed = time.perf_counter() - t
    failures = ds.stats()["failures"]
    assert len(labels) == 800 and 0 < failures < 200
    assert failures == sum(1 for y, i in zip(labels, range(800)) if y != i)
    assert elapsed < 20  # was quadratic: 22 s for 800 records with 79 bad


@pytest.mark.parametrize("persistent", [False, True])
def test_each_automatic_pass_has_its_own_budget(tmp_path, persistent):
    """No set_epoch: one bad file of 128 within the default 1 % budget, every epoch."""
    root = folder(tmp_path, 128, bad={17})
    ds = ImageFolder(root, TF, on_error="skip")
    dl = torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True, num_workers=2,
                                     persistent_workers=persistent)
    for _ in range(4):
        assert sum(len(y) for _, y in dl) == 128


def test_over_budget_within_one_pass_still_raises(tmp_path):
    root = folder(tmp_path, 40, bad={3, 11, 25})
    ds = ImageFolder(root, TF, on_error="skip", max_failures=2)
    with pytest.raises(FailureBudgetExceeded, match="3 samples failed"):
        list(torch.utils.data.DataLoader(ds, batch_size=8))
