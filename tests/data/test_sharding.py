"""Exact-once coverage, equal per-rank counts and deterministic epochs across ranks x workers."""

import collections
import itertools
import json
import os
import socket
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest
import torch
import torch.utils.data

from helpers import subprocess_env
from helpers.shards import labels_of, size_of

from turboloader import TarDataset
from turboloader.data.sharding import per_rank_count, worker_items

# (shard sizes, world_size, num_workers): uneven shards, fewer shards than workers, empty shards
CASES = [
    ([5, 3, 7, 1], 2, 2),
    ([4], 3, 2),
    ([2, 2], 1, 4),
    ([6, 0, 3], 3, 3),
    ([1, 1, 1, 1, 1], 2, 3),
    ([9, 2], 4, 1),
]


def _check_epoch(per_reader, n, world, pad):
    """per_reader: {(rank, worker): [sample ids]} of one epoch."""
    per_rank = collections.Counter()
    seen = collections.Counter()
    for (rank, _), ids in per_reader.items():
        per_rank[rank] += len(ids)
        seen.update(ids)
    expected = per_rank_count(n, world, pad=pad)
    assert [per_rank[r] for r in range(world)] == [expected] * world
    if pad:
        assert set(seen) == set(range(n))
        assert sum(seen.values()) - n == expected * world - n < world
    else:
        assert all(c == 1 for c in seen.values())
        assert len(seen) == expected * world


@pytest.mark.parametrize("sizes,world,workers", CASES)
@pytest.mark.parametrize("pad", [True, False])
@pytest.mark.parametrize("fixed", [False, True])
def test_worker_items_cover_exactly(sizes, world, workers, pad, fixed):
    n = sum(sizes)
    ra = [i % 2 == 0 for i in range(len(sizes))]
    orders = {}
    for epoch in (0, 1):
        got = {}
        for r in range(world):
            for w in range(workers):
                slots, samples = worker_items(sizes, seed=7, epoch=epoch, rank=r, world_size=world,
                                              worker=w, num_workers=workers, pad=pad, fixed=fixed,
                                              random_access=ra)
                got[r, w] = samples.tolist()
                # slots: the sample's own index, or a unique padding position >= n
                for s, g in zip(slots.tolist(), samples.tolist()):
                    assert s == g or s >= n
                again = worker_items(sizes, seed=7, epoch=epoch, rank=r, world_size=world,
                                     worker=w, num_workers=workers, pad=pad, fixed=fixed,
                                     random_access=ra)
                assert again[1].tolist() == got[r, w] and again[0].tolist() == slots.tolist()
        _check_epoch(got, n, world, pad)
        orders[epoch] = got
        all_slots = [s for r in range(world) for w in range(workers)
                     for s in worker_items(sizes, seed=7, epoch=epoch, rank=r, world_size=world,
                                           worker=w, num_workers=workers, pad=pad, fixed=fixed,
                                           random_access=ra)[0].tolist()]
        assert len(set(all_slots)) == len(all_slots)
    if fixed:  # the same samples stay on the same reader
        assert all(sorted(orders[0][k]) == sorted(orders[1][k]) for k in orders[0])


def test_epochs_change_the_order():
    sizes = [50, 30, 20]
    a = worker_items(sizes, seed=1, epoch=0)[1].tolist()
    b = worker_items(sizes, seed=1, epoch=1)[1].tolist()
    c = worker_items(sizes, seed=2, epoch=0)[1].tolist()
    assert sorted(a) == sorted(b) == list(range(100))
    assert a != b and a != c
    assert worker_items(sizes, seed=1, epoch=0, shuffle=False)[1].tolist() == list(range(100))
    # the fixed assignment still reshuffles within a worker each epoch
    f0 = worker_items(sizes, seed=1, epoch=0, fixed=True, world_size=2)[1].tolist()
    f1 = worker_items(sizes, seed=1, epoch=1, fixed=True, world_size=2)[1].tolist()
    assert f0 != f1 and sorted(f0) == sorted(f1)


def test_stream_shards_keep_stream_order():
    slots, samples = worker_items([6, 6], seed=0, epoch=3, random_access=[False, True])
    s = samples.tolist()
    first = [g for g in s if g < 6]
    assert first == sorted(first) and sorted(s) == list(range(12))


def _simulate(ds, world, workers, monkeypatch, epoch):
    """Read one epoch as every (rank, worker) would, with a patched get_worker_info."""
    got = {}
    ds.set_epoch(epoch)
    for r in range(world):
        ds.rank, ds.world_size = r, world
        assert len(ds) == per_rank_count(ds.num_samples, world, pad=ds.pad)
        for w in range(workers):
            info = types.SimpleNamespace(id=w, num_workers=workers, seed=0, dataset=ds)
            monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: info)
            got[r, w] = labels_of(ds)
    monkeypatch.undo()
    return got


@pytest.mark.parametrize("sizes,world,workers", CASES[:4])
@pytest.mark.parametrize("pad", [True, False])
def test_dataset_simulated_topology(make_shards, monkeypatch, sizes, world, workers, pad):
    ds = TarDataset(make_shards(sizes), size_of, seed=5, pad=pad, rank=0, world_size=world)
    n = sum(sizes)
    e1 = _simulate(ds, world, workers, monkeypatch, 1)
    _check_epoch(e1, n, world, pad)
    e2 = _simulate(ds, world, workers, monkeypatch, 2)
    _check_epoch(e2, n, world, pad)
    assert _simulate(ds, world, workers, monkeypatch, 1) == e1  # same seed + epoch, same order
    if n > 3:
        assert e1 != e2


def test_dataloader_two_workers(make_shards):
    paths = make_shards([5, 3, 7, 1])
    ds = TarDataset(paths, size_of, seed=11)
    loader = torch.utils.data.DataLoader(ds, batch_size=3, num_workers=2)
    epochs = []
    for epoch in (0, 1, 0):
        ds.set_epoch(epoch)
        labels = torch.cat([y for _, y in loader]).tolist()
        assert sorted(labels) == list(range(16))
        epochs.append(labels)
    assert epochs[0] == epochs[2] != epochs[1]
    assert len(loader) == 6
    # persistent workers see set_epoch too
    loader = torch.utils.data.DataLoader(ds, batch_size=3, num_workers=2, persistent_workers=True)
    again = []
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        again.append(torch.cat([y for _, y in loader]).tolist())
    assert again == epochs[:2]


_DDP_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import torch, torch.distributed as dist, torch.utils.data
    from helpers.shards import size_of
    from turboloader import TarDataset

    dist.init_process_group("gloo", rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]))
    ds = TarDataset(json.loads(os.environ["SHARDS"]), size_of, seed=3)
    out = {"len": len(ds), "epochs": []}
    loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=2)
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        labels = [y for _, ys in loader for y in ys.tolist()]
        # a collective per batch would hang here if the ranks' batch counts differed
        t = torch.tensor([len(labels)])
        dist.all_reduce(t)
        out["epochs"].append(labels)
    out["total"] = int(t)
    dist.barrier()
    dist.destroy_process_group()
    with open(os.environ["OUT"], "w") as f:
        json.dump(out, f)
""")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.distributed
def test_torch_distributed_gloo(make_shards, tmp_path):
    paths = make_shards([5, 2, 4])  # 11 samples, 2 ranks: one pad
    script = tmp_path / "ddp.py"
    script.write_text(_DDP_SCRIPT)
    port = _free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), SHARDS=json.dumps(paths),
                   OUT=str(tmp_path / f"rank{rank}.json"),
                   PYTHONPATH=subprocess_env()["PYTHONPATH"])
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    for p in procs:
        try:
            out, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("DDP run hung")
        assert p.returncode == 0, out.decode()[-3000:]
    res = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert res[0]["len"] == res[1]["len"] == 6
    for e in range(2):
        a, b = res[0]["epochs"][e], res[1]["epochs"][e]
        assert len(a) == len(b) == 6
        assert set(a) | set(b) == set(range(11))
        assert len(a + b) - len(set(a + b)) == 1  # exactly one pad repeat
    assert res[0]["epochs"][0] != res[0]["epochs"][1]
    assert res[0]["total"] == 12


@pytest.mark.parametrize("fixed", [False, True])
def test_mix_shards_bounds_the_shards_a_worker_interleaves(fixed):
    sizes = [4] * 12
    shard = np.repeat(np.arange(12), 4)
    for mix in (1, 3, 16):
        seq = shard[worker_items(sizes, seed=2, epoch=1, mix_shards=mix, fixed=fixed)[1]]
        spans = []
        for s in range(12):
            where = np.flatnonzero(seq == s)
            spans.append(len(set(seq[where[0]:where[-1] + 1].tolist())))
        assert max(spans) <= mix
        if mix == 16:
            assert max(spans) > 3  # the whole piece mixes
    with pytest.raises(ValueError):
        worker_items(sizes, mix_shards=0)


# -- the first window's ramp (a ShardCache's cold pass) ------------------------------------

# with fixed=True the windows are read in a permuted order, so where a worker's piece has more
# than one window the first one read is not the piece's first (the oracle below): those
# combinations are not generated
_RAMP_CASES = [(sizes, world, workers, fixed, mix)
               for sizes, world, workers in CASES + [([7, 5, 9, 6, 8, 4, 7], 2, 2)]
               for fixed in (False, True) for mix in (2, 16)
               if not (fixed and mix < len(sizes))]


@pytest.mark.parametrize("sizes,world,workers,fixed,mix", _RAMP_CASES)
def test_ramp_keeps_each_readers_samples_and_ramps_its_first_window(sizes, world, workers,
                                                                     fixed, mix):
    """The ramp only reorders within a reader: every (rank, worker) reads the very samples
    (and slots) it reads without it, so exactly-once and the equal per-rank counts are the
    unramped ones; in the first window read, shard ``k`` in order of first use appears no
    earlier than ``floor(ramp * samples of the shards before it)``; with ``fixed=False`` the
    windows after the first are unchanged; ``ramp=1`` reads the window shard by shard."""
    offsets = np.cumsum([0] + sizes)
    for r, w, pad in itertools.product(range(world), range(workers), (True, False)):
        kw = dict(seed=3, epoch=2, rank=r, world_size=world, worker=w, num_workers=workers,
                  fixed=fixed, mix_shards=mix, pad=pad)
        base_slots, base = worker_items(sizes, **kw)
        slots, got = worker_items(sizes, ramp=0.5, **kw)
        assert sorted(zip(got.tolist(), slots.tolist())) == sorted(
            zip(base.tolist(), base_slots.tolist()))
        assert np.array_equal(got, worker_items(sizes, ramp=0.5, **kw)[1])  # deterministic
    for r in range(world):
        for w in range(workers):
            # (pads repeat the epoch's first samples at a piece's end: a run of their own)
            kw = dict(seed=3, epoch=2, rank=r, world_size=world, worker=w, num_workers=workers,
                      fixed=fixed, mix_shards=mix, pad=False)
            base = worker_items(sizes, **kw)[1]
            got = worker_items(sizes, ramp=0.5, **kw)[1]
            shard = np.searchsorted(offsets, got, side="right") - 1
            base_shard = np.searchsorted(offsets, base, side="right") - 1
            # the first window read: positions until every shard of it has been drawn (its
            # length is the same as without the ramp: the same runs, mixed differently)
            first = [int(s) for s in dict.fromkeys(shard.tolist())][:mix]
            in_first = np.isin(shard, first)
            end = len(got) if in_first.all() else int(np.argmin(in_first))
            assert set(shard[:end].tolist()) == set(base_shard[:end].tolist())
            # the window's shards in piece order: each its own window (mix_shards=1) keeps
            # it; fixed pieces are in shard order
            alone = worker_items(sizes, **{**kw, "mix_shards": 1})[1]
            order = sorted(set(first)) if fixed else [
                s for s in dict.fromkeys(
                    (np.searchsorted(offsets, alone, side="right") - 1).tolist()) if s in first]
            counts = [int((shard[:end] == s).sum()) for s in order]
            before = np.cumsum([0] + counts[:-1])
            firsts = [int(np.flatnonzero(shard[:end] == s)[0]) for s in order]
            assert all(f >= int(0.5 * b) for f, b in zip(firsts, before)), (firsts, before)
            if not fixed:
                assert np.array_equal(got[end:], base[end:])
            seq = worker_items(sizes, ramp=1.0, **kw)[1]
            s1 = np.searchsorted(offsets, seq[:end], side="right") - 1
            assert (np.diff(s1) != 0).sum() == max(len(set(s1.tolist())) - 1, 0)  # in turn


def test_ramp_admits_the_next_shard_at_half_what_came_before():
    """Four 10-sample shards in one worker's window: the first 5 positions draw only the
    first shard, positions 5..9 only the first two, 10..14 the first three."""
    sizes = [10, 10, 10, 10]
    offsets = np.cumsum([0] + sizes)
    for seed in range(5):
        got = worker_items(sizes, seed=seed, ramp=0.5)[1]
        shard = (np.searchsorted(offsets, got, side="right") - 1).tolist()
        order = list(dict.fromkeys(shard))
        rank = [order.index(s) for s in shard]
        assert max(rank[:5]) == 0 and max(rank[5:10]) <= 1 and max(rank[10:15]) <= 2
        assert sorted(got.tolist()) == list(range(40))
        # shards join in the epoch's shard order (each shard its own window: mix_shards=1)
        alone = worker_items(sizes, seed=seed, mix_shards=1)[1]
        assert order == list(dict.fromkeys(
            (np.searchsorted(offsets, alone, side="right") - 1).tolist()))
    with pytest.raises(ValueError):
        worker_items(sizes, ramp=1.5)
