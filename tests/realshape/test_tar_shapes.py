"""TAR shards with the shapes users have, through every loader, two epochs each: every
sample exactly once per epoch.

Issue #30 finding 1: a read chunk spanning more shards than the stream's LRU keeps open
(``mix_shards + 4``: the end of one mixing window and the start of the next, or tiny
shards) read a shard the LRU had closed (``TarIndex ... is closed``). Each test here but
the sharding one failed that way before chunks pinned their shards.
"""

import tarfile

import numpy as np
import pytest

from helpers.realshape import (JPEGS, assert_epochs, assert_once, imagenet_sizes, loader_passes,
                               passes, tl_loader, torch_loader, transform)
from turboloader import TarDataset
from turboloader.data import sharding


def test_generated_shards_read_like_tarfile(k40):
    """The tier's hand-written USTAR shards, against the stdlib's reader."""
    with tarfile.open(k40[7]) as tf:
        members = tf.getmembers()
        assert [m.name for m in members[:4]] == ["0007000.jpg", "0007000.cls", "0007001.jpg",
                                                 "0007001.cls"]
        assert len(members) == 2000
        assert tf.extractfile(members[0]).read() == JPEGS[7000 % 64]
        assert tf.extractfile(members[-1]).read() == b"7999"


# -- 40 shards x 1000 samples ---------------------------------------------------------------


def test_k40_torch_dataloader(k40):
    """torch's DataLoader, one worker, batches of 120 (a chunk ends 40 samples into the
    next mixing window: 14 shards of one window and 12 of the next in one chunk)."""
    ds = TarDataset(k40, transform())
    assert_epochs(passes(ds, lambda: torch_loader(ds, 1, 120)), 40_000, "k40, torch, 1 worker")


@pytest.mark.parametrize("backend,batch_size", [("threads", 256), ("processes", 120)])
def test_k40_turboloader(k40, backend, batch_size):
    """Both backends, one stream (with more, a stream's 20 or fewer shards make one window
    and a short one). The thread backend gathers whole batches of 256 (issue #30's second
    crash), so a chunk ends the first mixing window of 16 shards and starts the next; the
    processes backend's workers gather 64 samples at a time, so batches of 120 put a chunk
    across that boundary."""
    runs = loader_passes(tl_loader(TarDataset(k40, transform()), backend, 1, batch_size))
    assert_epochs(runs, 40_000, f"k40, {backend}, 1 worker")


# -- ImageNet's 1024 shards over 8 workers --------------------------------------------------


def _most_open(shard_of, num_shards):
    """Shards a reader of this order must hold open at once to open each one once: the most
    shards whose first and last positions straddle one point."""
    n = len(shard_of)
    pos = np.arange(n)
    first, last = np.full(num_shards, n), np.full(num_shards, -1)
    np.minimum.at(first, shard_of, pos)
    np.maximum.at(last, shard_of, pos)
    read = last >= 0
    events = np.zeros(n + 1, np.int64)
    np.add.at(events, first[read], 1)
    np.add.at(events, last[read] + 1, -1)
    return int(np.cumsum(events).max())


def test_imagenet_assignment_at_full_shape():
    """ImageNet's 1,281,167 samples in 1024 shards over 8 workers (one rank, and 2 ranks),
    two epochs: every sample once across the workers; each worker reads a contiguous piece
    of the shard order (at most 1024 / workers + 2 shards) and, mixing 16 at a time, never
    needs more than 16 open to open each one once per epoch."""
    counts = imagenet_sizes(1024, 1_281_167)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    for epoch, world in ((0, 1), (1, 1), (0, 2)):
        seen = []
        for rank in range(world):
            for w in range(8):
                _, samples = sharding.worker_items(counts, seed=0, epoch=epoch, rank=rank,
                                                   world_size=world, worker=w, num_workers=8)
                shard_of = np.searchsorted(offsets, samples, side="right") - 1
                where = (epoch, world, rank, w)
                distinct = np.count_nonzero(np.bincount(shard_of, minlength=1024))
                assert distinct <= 1024 // (8 * world) + 2, where
                assert _most_open(shard_of, 1024) <= 16, where
                seen.append(samples)
        times = np.bincount(np.concatenate(seen), minlength=1_281_167)
        assert len(times) == 1_281_167 and times.min() == 1, (epoch, world)
        assert times.sum() - 1_281_167 < world  # the pads: fewer than world_size


@pytest.mark.parametrize("num_workers", [2, 8])
def test_in1k_torch_dataloader(in1k, num_workers):
    """1024 shards of 5 samples through torch's DataLoader: a chunk of 64 spans 13 or more
    shards, and at a mixing window's end up to 32."""
    ds = TarDataset(in1k, transform())
    n = ds.num_samples
    assert_epochs(passes(ds, lambda: torch_loader(ds, num_workers, 64)), n,
                  f"1024 shards, torch, {num_workers} workers")


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_in1k_turboloader_8_workers(in1k, backend):
    ds = TarDataset(in1k, transform())
    runs = loader_passes(tl_loader(ds, backend, 8, 256))
    assert_epochs(runs, ds.num_samples, f"1024 shards, {backend}, 8 workers")


# -- 2-sample shards ------------------------------------------------------------------------


def test_pairs_plain_iteration(pairs):
    """Iterating the dataset itself (no loader): a chunk of 64 samples spans 32 shards."""
    ds = TarDataset(pairs, transform())
    runs = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        runs.append([int(label) for _, label in ds])
    assert_epochs(runs, 600, "2-sample shards, plain iteration")


@pytest.mark.parametrize("num_workers", [0, 1, 3])
def test_pairs_torch_dataloader(pairs, num_workers):
    ds = TarDataset(pairs, transform())
    assert_epochs(passes(ds, lambda: torch_loader(ds, num_workers, 32)), 600,
                  f"2-sample shards, torch, {num_workers} workers")


@pytest.mark.parametrize("backend,num_workers", [("threads", 0), ("threads", 3),
                                                 ("processes", 2)])
def test_pairs_turboloader(pairs, backend, num_workers):
    runs = loader_passes(tl_loader(TarDataset(pairs, transform()), backend, num_workers, 100))
    assert_epochs(runs, 600, f"2-sample shards, {backend}, {num_workers} workers")


def test_pairs_batched_torch_workers(pairs):
    """``batched()`` under torch's workers: whole batches of 128 from 64 shards each."""
    ds = TarDataset(pairs, transform())
    runs = passes(ds, lambda: torch_loader(ds.batched(128), 2, None))
    assert_epochs(runs, 600, "2-sample shards, batched(128), torch, 2 workers")


def test_pairs_stream_shards(tmp_path):
    """Compressed stream shards (``.tar.gz``, read front to back) of 2 samples, whose
    readers the same LRU closes and reopens."""
    from helpers.shards import write_shards

    urls = write_shards(str(tmp_path / "gz"), [2] * 40, suffix=".tar.gz")
    ds = TarDataset(urls, transform())
    assert_epochs(passes(ds, lambda: torch_loader(ds, 0, 64)), 80, "2-sample .tar.gz shards")
    assert_once([int(y) for _, y in ds], 80, "2-sample .tar.gz shards, plain iteration")
