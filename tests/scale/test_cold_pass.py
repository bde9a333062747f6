"""A ShardCache's cold pass over remote shards: the first window ramps (the first batch needs
only the first shard of each stream), every sample once across ranks and workers, and a
resume mid-pass reproduces the rest of the order (issue #38, item 3)."""

import numpy as np
import pytest
import torch

from helpers.shards import size_of, write_shards
from turboloader.data import TarDataset
from turboloader.data.sharding import worker_items
from turboloader.data.tar_dataset import MIX_RAMP
from turboloader.errors import StateMismatchError
from turboloader.io.shard_cache import ShardCache

SIZES = [8, 6, 9, 7, 8, 5, 8, 7]  # uneven; 58 samples
N = sum(SIZES)


@pytest.fixture
def held(http_root):
    """The scale tests' HTTP server (``held`` names wait for ``release``) with the shards."""
    write_shards(http_root.root, SIZES, name="c")
    http_root.pattern = f"{http_root.url}/c-{{0000..{len(SIZES) - 1:04d}}}.tar"
    http_root.names = [f"c-{i:04d}.tar" for i in range(len(SIZES))]
    return http_root


def labels(ds, num_workers, batch_size, k=None, on_first=None):
    """Label batches of ``ds`` under torch's DataLoader; whole batches from the streams
    (``batched``: a stream decodes a batch at a time; yielding single samples it would
    decode ``SAMPLE_CHUNK`` at a time, more than the first shard's ramp here)."""
    loader = torch.utils.data.DataLoader(ds.batched(batch_size), batch_size=None,
                                         num_workers=num_workers,
                                         timeout=120 if num_workers else 0)
    out = []
    for b, (_, lab) in enumerate(loader):
        if b == 0 and on_first is not None:
            on_first()
        out.append(lab.tolist())
        if k is not None and b + 1 == k:
            break
    return out


def first_shards(num_workers, epoch, seed, world=1, rank=0):
    """The shard each stream reads first, from the sharding's own order (the oracle)."""
    offsets = np.cumsum([0] + SIZES)
    out = set()
    for w in range(num_workers):
        samples = worker_items(SIZES, seed=seed, epoch=epoch, rank=rank, world_size=world,
                               worker=w, num_workers=num_workers, ramp=MIX_RAMP)[1]
        if len(samples):
            out.add(int(np.searchsorted(offsets, samples[0], side="right") - 1))
    return out


@pytest.mark.parametrize("num_workers", [0, 2])
def test_first_batch_while_later_shards_still_download(held, tmp_path, num_workers):
    """The server holds every shard but the first one of each stream until the first batch
    is delivered: with the ramp it comes anyway (the window's other shards are still
    downloading then), and the pass is the sharding's ramped order, every sample once."""
    seed, epoch, batch = 4, 1, 3  # a batch within the first shard's ramp (< 0.5 * 5)
    firsts = first_shards(max(num_workers, 1), epoch, seed)
    held.held = {n for i, n in enumerate(held.names) if i not in firsts}
    cache = ShardCache(tmp_path / "cache", max_bytes="50MB", prefetch=2)
    ds = TarDataset(held.pattern, size_of, seed=seed, shard_sizes=SIZES, shard_cache=cache)
    ds.set_epoch(epoch)
    seen = {}

    def first():  # the downloads of the held shards were asked for and are not done
        seen["waiting"] = held.waiting
        seen["gave_up"] = held.gave_up
        held.release.set()

    got = labels(ds, num_workers, batch, on_first=first)
    assert not seen["gave_up"] and seen["waiting"] >= 1, seen
    flat = sum(got, [])
    assert sorted(flat) == list(range(N))
    W = max(num_workers, 1)
    streams = [worker_items(SIZES, seed=seed, epoch=epoch, worker=w, num_workers=W,
                            ramp=MIX_RAMP)[1].tolist() for w in range(W)]
    # torch takes the workers' batches round-robin; one stream on the main process
    expect = []
    for b in range(max(-(-len(s) // batch) for s in streams)):
        for s in streams:
            expect.extend(s[b * batch:(b + 1) * batch])
    assert flat == expect
    assert all(held.requests[n] == 1 for n in held.names)  # each shard fetched once


def test_cold_pass_every_sample_once_across_ranks_and_workers(held, tmp_path):
    """Two ranks x two DataLoader workers sharing one node cache, cold: every sample once
    (plus the pad), each rank the same count, each shard downloaded once for the node."""
    cache = ShardCache(tmp_path / "cache", max_bytes="50MB", prefetch=2)
    got = []
    for rank in range(2):
        ds = TarDataset(held.pattern, size_of, seed=9, shard_sizes=SIZES, shard_cache=cache,
                        rank=rank, world_size=2, mix_shards=3)
        ds.set_epoch(0)
        mine = sum(labels(ds, 2, 4), [])
        assert len(mine) == len(ds) == -(-N // 2)
        got += mine
    assert sorted(set(got)) == list(range(N)) and len(got) - N == len(got) - len(set(got)) <= 1
    assert all(held.requests[n] == 1 for n in held.names)


@pytest.mark.parametrize("num_workers,batch_size",
                         [(0, 4), pytest.param(2, 3, marks=pytest.mark.slow)])
def test_resume_mid_cold_pass_reproduces_the_rest(held, tmp_path, num_workers, batch_size):
    """A pass interrupted after k batches of a cold cache and resumed in a fresh dataset (the
    cache now partly warm, or another cold one) delivers exactly the rest of the
    uninterrupted pass, in order; the state names the ramp, and a dataset that does not
    ramp (no cache) refuses it."""
    def make(cache_dir):
        return TarDataset(held.pattern, size_of, seed=2, shard_sizes=SIZES,
                          shard_cache=ShardCache(tmp_path / cache_dir, max_bytes="50MB"))

    ds = make("full")
    ds.set_epoch(3)
    full = labels(ds, num_workers, batch_size)
    assert sorted(sum(full, [])) == list(range(N))
    for k, cache_dir in ((2, "part"), (5, "part"), (3, "cold")):
        ds = make("part")
        ds.set_epoch(3)
        head = labels(ds, num_workers, batch_size, k)
        state = ds.state_dict(batches=k, batch_size=batch_size, num_workers=num_workers)
        assert state["mix_ramp"] == MIX_RAMP
        fresh = make(cache_dir if cache_dir == "part" else f"cold-{k}")
        fresh.load_state_dict(state)
        fresh.set_epoch(3)
        assert head + labels(fresh, num_workers, batch_size) == full, k
    plain = TarDataset(held.pattern, size_of, seed=2, shard_sizes=SIZES)  # streamed
    with pytest.raises(StateMismatchError, match="mix_ramp"):
        plain.load_state_dict(state)
