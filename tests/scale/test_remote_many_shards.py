"""A real-shape remote dataset: 1000 shards of 2 samples on a loopback HTTP store, through
every loader (the thread backend, torch's DataLoader with workers, a DDP-style rank
split): every sample exactly once, equal per-rank lengths; construction from the index
``turboloader index`` wrote reads no shard."""

import os

import pytest
import torch

from helpers.faultproxy import FaultProxy
from helpers.shards import size_of, write_shards
from turboloader.data import TarDataset
from turboloader.tools.cli import main

pytestmark = pytest.mark.slow

SHARDS, PER = 1000, 2
N = SHARDS * PER


@pytest.fixture(scope="module")
def many(_http_store, tmp_path_factory):
    src = tmp_path_factory.mktemp("many")
    for p in write_shards(str(src), [PER] * SHARDS, name="many"):
        with open(p, "rb") as fh:
            _http_store.put(os.path.basename(p), fh.read())
    return _http_store


def _labels(loader):
    return [int(v) for _, lab in loader for v in lab]


@pytest.mark.parametrize("store", ["http"], indirect=True)
def test_thousand_remote_shards_every_loader_exactly_once(many, store, tmp_path, monkeypatch):
    import turboloader

    monkeypatch.setenv("TURBOLOADER_CACHE", str(tmp_path / "cache"))
    pattern = store.url(f"many-{{0000..{SHARDS - 1:04d}}}.tar")
    # the command counts the shards in parallel and writes the index
    index = tmp_path / "many-index.json"
    assert main(["index", pattern, "-o", str(index)]) == 0
    store.put("many-index.json", index.read_bytes())
    monkeypatch.setenv("TURBOLOADER_CACHE", str(tmp_path / "cache2"))
    with FaultProxy(store.upstream_port) as proxy:
        store.route(monkeypatch, proxy.port)
        pattern = store.url(f"many-{{0000..{SHARDS - 1:04d}}}.tar")
        ds = TarDataset(pattern, size_of, seed=4)
        assert ds.shard_sizes == [PER] * SHARDS
        assert not [p for _, p, _ in proxy.log if p.endswith(".tar")]  # the index only
        # the thread backend
        got = _labels(turboloader.DataLoader(ds, batch_size=64, num_workers=2,
                                             backend="threads"))
        assert sorted(got) == list(range(N))
        # torch's DataLoader with worker processes, next epoch
        ds.set_epoch(1)
        got = _labels(torch.utils.data.DataLoader(ds, batch_size=64, num_workers=2,
                                                  timeout=120))
        assert sorted(got) == list(range(N))
        # a DDP-style split over 3 ranks: equal lengths (padded), together every sample
        world = 3
        per_rank = []
        for rank in range(world):
            r = TarDataset(pattern, size_of, seed=4, rank=rank, world_size=world)
            labs = _labels(torch.utils.data.DataLoader(r, batch_size=100, num_workers=0))
            assert len(labs) == len(r)
            per_rank.append(labs)
        assert len({len(p) for p in per_rank}) == 1
        flat = [v for p in per_rank for v in p]
        assert set(flat) == set(range(N)) and len(flat) == world * -(-N // world)
