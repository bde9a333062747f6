"""Parquet with many small row groups (each row group is a shard): 4 files x 1000 rows in
row groups of 10, through every loader, two epochs each, every row exactly once.

Issue #30 finding 1: a chunk spanning more row groups than the stream keeps open read one
already closed (``TypeError: 'NoneType' object is not subscriptable``).
"""

import pytest

from helpers.realshape import (assert_epochs, loader_passes, passes, tl_loader, torch_loader,
                               transform)

pytest.importorskip("pyarrow")

from turboloader import ParquetDataset  # noqa: E402


def test_row_groups_plain_iteration(parquet_files):
    ds = ParquetDataset(parquet_files, transform())
    assert len(ds._counts) == 400
    runs = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        runs.append([int(label) for _, label in ds])
    assert_epochs(runs, 4000, "400 row groups, plain iteration")


@pytest.mark.parametrize("num_workers", [1, 2])
def test_row_groups_torch_dataloader(parquet_files, num_workers):
    ds = ParquetDataset(parquet_files, transform())
    assert_epochs(passes(ds, lambda: torch_loader(ds, num_workers, 100)), 4000,
                  f"400 row groups, torch, {num_workers} workers")


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_row_groups_turboloader(parquet_files, backend):
    runs = loader_passes(tl_loader(ParquetDataset(parquet_files, transform()), backend, 2, 256))
    assert_epochs(runs, 4000, f"400 row groups, {backend}, 2 workers")
