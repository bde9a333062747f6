"""Aspect-ratio buckets with a rare ratio: 60 shards x 100 samples, about 1 in 100 wide, so
the wide bucket's batch gathers its samples from nearly every shard a stream read. Through
torch's DataLoader and both turboloader backends, two epochs each: every sample exactly
once, each batch of one bucket's shape, every wide image in the wide bucket.

Issue #30 finding 1: that batch read shards the stream's LRU had already closed.
"""

import pytest

from helpers.realshape import SIDE, assert_epochs, is_wide, tl_loader, torch_loader
from turboloader import TarDataset

BUCKETS = [(SIDE, SIDE), (SIDE, 2 * SIDE)]


def _check_batches(batches):
    """Labels of the batches, after checking each one's bucket."""
    labels = []
    for images, ids in batches:
        ids = ids.tolist()
        assert tuple(images.shape[-2:]) in BUCKETS, images.shape
        wide = images.shape[-1] == 2 * SIDE
        assert all(is_wide(i) == wide for i in ids), (images.shape, ids[:8])
        labels.extend(ids)
    return labels


@pytest.mark.parametrize("num_workers", [0, 2])
def test_rare_bucket_torch_dataloader(rare, num_workers):
    ds = TarDataset(rare)
    assert sum(is_wide(i) for i in range(6000)) == 62
    buckets = ds.bucketed(64, BUCKETS)
    runs = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        runs.append(_check_batches(torch_loader(buckets, num_workers, None)))
    assert_epochs(runs, 6000, f"rare bucket, torch, {num_workers} workers")


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_rare_bucket_turboloader(rare, backend):
    loader = tl_loader(TarDataset(rare).bucketed(64, BUCKETS), backend, 2, None)
    runs = [_check_batches(loader) for _ in range(2)]
    assert_epochs(runs, 6000, f"rare bucket, {backend}, 2 workers")
