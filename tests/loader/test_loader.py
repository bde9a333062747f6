"""turboloader.DataLoader: the thread backend gives torch's batches, in torch's order."""

import sys
import threading

import pytest
from helpers import sweep
import torch

from turboloader import transforms as T
from turboloader.data import ImageFolder, TarDataset
from turboloader.errors import DecodeError
from turboloader.loader import DataLoader, format_stats, profile

FLOAT = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor(),
                   T.Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))])
UINT8 = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.PILToTensor()])


def batches(ds, backend, **kw):
    return list(DataLoader(ds, backend=backend, **kw))


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert isinstance(x, list) and isinstance(y, list)
        assert x[0].dtype == y[0].dtype and torch.equal(x[0], y[0])
        assert torch.equal(x[1], y[1])


# threads of the process, not of a loader: the fetch pool's connections (they serve every
# remote stream of the process and end after 30 s idle, see turboloader.io.fetch) and a remote
# client's warm-up; a remote test run before in the same pytest process leaves them running
PROCESS_THREADS = ("turboloader-fetch", "turboloader-warm")


def live_threads():
    """The loaders' threads still alive (decode, read, collate, transfer)."""
    return [t.name for t in threading.enumerate()
            if t.name.startswith("turboloader-") and t.name not in PROCESS_THREADS]


@pytest.mark.parametrize("workers,batch,drop_last", [(0, 4, False), (2, 4, False), (2, 4, True),
                                                     (3, 5, False), (3, 5, True)])
def test_threads_equal_processes_tar(shards, workers, batch, drop_last):
    ds = TarDataset(shards, FLOAT, seed=3)
    kw = dict(batch_size=batch, num_workers=workers, drop_last=drop_last)
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        t = batches(ds, "threads", **kw)
        ds.set_epoch(epoch)
        p = batches(ds, "processes", **kw)
        assert_same(t, p)
    labels = torch.cat([b[1] for b in t]).tolist()
    if not drop_last:  # the sharding contract: every sample exactly once
        assert sorted(labels) == list(range(26))
    else:
        assert len(set(labels)) == len(labels)


def test_skip_policy_is_identical(corrupt_shards):
    ds = TarDataset(corrupt_shards, FLOAT, seed=1, on_error="skip", max_failures=2)
    t = batches(ds, "threads", batch_size=3, num_workers=2)
    p = batches(ds, "processes", batch_size=3, num_workers=2)
    assert_same(t, p)
    labels = torch.cat([b[1] for b in t]).tolist()
    assert 5 not in labels and len(labels) == 16  # replaced by one of its worker's samples


def test_ranks_cover_every_sample_once(shards):
    seen = []
    for rank in (0, 1):
        ds = TarDataset(shards, FLOAT, rank=rank, world_size=2, pad=False)
        seen += torch.cat([b[1] for b in batches(ds, "threads", batch_size=4,
                                                  num_workers=2)]).tolist()
    assert sorted(seen) == list(range(26))


def test_uint8_output(shards):
    ds = TarDataset(shards, UINT8, seed=5)
    t = batches(ds, "threads", batch_size=4, num_workers=2)
    assert t[0][0].dtype == torch.uint8 and t[0][0].shape == (4, 3, 24, 24)
    assert_same(t, batches(ds, "processes", batch_size=4, num_workers=2))


def test_image_folder_seeded_sampler(folder):
    ds = ImageFolder(folder, FLOAT, seed=2)
    kw = dict(batch_size=4, num_workers=2, shuffle=True)
    tl, pl = DataLoader(ds, backend="threads", **kw), DataLoader(ds, backend="processes", **kw)
    t0, p0 = list(tl), list(pl)
    assert_same(t0, p0)
    t1, p1 = list(tl), list(pl)  # auto_epoch: the next pass is epoch 1
    assert tl.epoch == pl.epoch == 1
    assert_same(t1, p1)
    assert torch.cat([b[1] for b in t0]).tolist() != torch.cat([b[1] for b in t1]).tolist()
    assert sorted(torch.cat([b[1] for b in t1]).tolist()) == sorted(ds.targets)


def test_samples_are_decoded_into_the_batch(shards, monkeypatch):
    """One batch call writes the rows of the batch tensor itself (no copy after): the
    sample step hands the batch tensor to the executor's ``run_batch``."""
    from turboloader.decode import executor

    rows = {}
    real = executor.run_batch

    def spy(sources, params, out, /, **kw):
        rows.setdefault(out.data_ptr(), set()).update(int(r) for r in kw["rows"])
        return real(sources, params, out, **kw)

    monkeypatch.setattr(executor, "run_batch", spy)
    ds = TarDataset(shards, FLOAT)
    got = batches(ds, "threads", batch_size=4, num_workers=2)
    for images, _ in got:
        assert images.is_contiguous()
        assert set(range(len(images))) <= rows[images.data_ptr()]


def test_pin_memory(shards):
    ds = TarDataset(shards, FLOAT)
    if torch.accelerator.is_available():
        images, _ = next(iter(DataLoader(ds, batch_size=4, num_workers=2, pin_memory=True)))
        assert images.is_pinned()
    else:
        with pytest.warns(UserWarning, match="pin"):
            loader = DataLoader(ds, batch_size=4, num_workers=2, pin_memory=True)
        images, _ = next(iter(loader))
        assert not images.is_pinned()


def test_stats_and_profile(shards, capsys):
    loader = DataLoader(TarDataset(shards, FLOAT), batch_size=4, num_workers=2)
    with pytest.raises(RuntimeError, match="no pass yet"):
        loader.stats()
    list(loader)
    st = loader.stats()
    assert st["backend"] == "threads" and st["batches"] == 8 and st["samples"] == 26  # 13 + 13: 3 full + 1 partial each
    assert set(st["stages"]) == {"read", "decode", "collate", "transfer"}
    dec = st["stages"]["decode"]
    assert dec["concurrency"] == 2 and dec["items"] == 26 and dec["busy_s"] > 0
    assert st["stages"]["read"]["busy_s"] >= 0 and st["samples_per_s"] > 0
    for s in st["stages"].values():
        assert s["wait_in_s"] >= 0 and s["wait_out_s"] >= 0
    report = profile(loader, num_batches=3)
    out = capsys.readouterr().out
    assert report["batches"] == 3
    for name in ("read", "decode", "collate", "transfer", "bottleneck"):
        assert name in out
    assert format_stats(report) in out
    assert not live_threads()


def test_process_backend_stats_and_defaults(shards):
    ds = TarDataset(shards, FLOAT, cache="10MB")
    loader = DataLoader(ds, batch_size=4, num_workers=2, backend="processes")
    assert loader.torch_loader.persistent_workers is True
    assert DataLoader(TarDataset(shards, FLOAT), batch_size=4, num_workers=2,
                      backend="processes").torch_loader.persistent_workers is False
    list(loader)
    assert loader.stats()["samples"] == 26


def test_dataset_error_propagates(corrupt_shards):
    ds = TarDataset(corrupt_shards, FLOAT)  # on_error="raise"
    for backend in ("threads", "processes"):
        got = []
        with pytest.raises(DecodeError):
            for b in DataLoader(ds, batch_size=3, num_workers=2, backend=backend):
                got.append(b)
        if backend == "threads":
            threads_got = got
            assert not live_threads()
    assert_same(threads_got, got)  # raised at the same batch


class Flaky(torch.utils.data.Dataset):
    def __len__(self):
        return 40

    def __getitem__(self, i):
        if i == 17:
            raise KeyError(f"bad index {i}")
        return torch.full((3, 4, 4), float(i)), i


def test_map_style_error_and_generic_dataset():
    loader = DataLoader(Flaky(), batch_size=5, num_workers=2)
    got = []
    with pytest.raises(KeyError, match="bad index 17"):
        for b in loader:
            got.append(b)
    assert len(got) == 3 and not live_threads()
    assert torch.equal(got[1][0][:, 0, 0, 0], torch.arange(5, 10, dtype=torch.float32))


def test_break_stops_threads(shards):
    loader = DataLoader(TarDataset(shards, FLOAT), batch_size=2, num_workers=2,
                        prefetch_factor=1)
    for _ in loader:
        break
    assert not live_threads()
    it = iter(loader)
    next(it)
    it.close()
    assert not live_threads()


def test_argument_checks(shards):
    with pytest.raises(ValueError, match="shuffle"):
        DataLoader(TarDataset(shards, FLOAT, shuffle=False), batch_size=2, shuffle=True)
    DataLoader(TarDataset(shards, FLOAT), batch_size=2, shuffle=True)  # agrees: fine

    class Plain(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter([(torch.zeros(3), 0)])

    with pytest.raises(ValueError, match="shuffle=True needs a map-style"):
        DataLoader(Plain(), batch_size=2, shuffle=True)
    with pytest.raises(ValueError, match="per-worker streams"):
        DataLoader(Plain(), batch_size=2, num_workers=2)
    assert len(list(DataLoader(Plain(), batch_size=2, num_workers=1))) == 1
    with pytest.raises(ValueError, match="backend"):
        DataLoader(Plain(), backend="fibers")


def test_path_goes_to_seed001(monkeypatch):
    # the path-first form is the top-level turboloader.DataLoader's (compat), not the core's
    import turboloader
    from turboloader.compat.seeds import _loader

    calls = []
    monkeypatch.setattr(_loader, "seed001_loader",
                        lambda *a, **k: calls.append((a, k)) or "seed001")
    assert turboloader.DataLoader("x.tar", 32, 4, True, enable_distributed=False) == "seed001"
    assert calls == [(("x.tar", 32, 4, True), {"enable_distributed": False})]
    assert turboloader.DataLoader(["a.tar", "b.tar"], batch_size=8) == "seed001"
    with pytest.raises(TypeError, match="Dataset"):
        DataLoader("x.tar", 32)


def test_progress_bar(shards, capsys):
    loader = DataLoader(TarDataset(shards, FLOAT), batch_size=4, num_workers=1, progress=True)
    assert len(list(loader)) == 7
    err = capsys.readouterr().err
    try:
        import tqdm  # noqa: F401
    except ImportError:
        assert "7/7 batches" in err
    else:
        assert "7/7" in err


@pytest.mark.parametrize("workers,batch", sweep([(0, 4), (2, 4), (3, 5), (1, 4), (3, 4),
                                                 (4, 3), (5, 4)], fast=3, names=2))
@pytest.mark.parametrize("drop_last", [False, True])
def test_len_is_the_batches_a_pass_yields(shards, workers, batch, drop_last):
    # 26 samples: 3 workers of 4 -> shares 8, 9, 9 -> 3 + 3 + 3 = 9 batches (torch says 7)
    for ds in (TarDataset(shards, FLOAT), TarDataset(shards, FLOAT, rank=1, world_size=3),
               TarDataset(shards, FLOAT, rank=2, world_size=3, pad=False)):
        backends = ("threads", "processes") if workers in (0, 3) else ("threads",)
        for backend in backends:
            loader = DataLoader(ds, batch_size=batch, num_workers=workers, backend=backend,
                                drop_last=drop_last)
            assert len(loader) == len(list(loader)), (backend, ds)


def test_map_style_threads_read_as_separate_streams(folder):
    ds = ImageFolder(str(folder), FLOAT, on_error="skip")
    loader = DataLoader(ds, batch_size=8, num_workers=2)
    assert sum(len(y) for _, y in loader) == 21
    st = ds.stats()
    # one recorder per decode thread, named like TarDataset's thread streams
    assert set(st["workers"]) <= {"rank0-thread0", "rank0-thread1"}
    assert st["samples"] == 21
    list(DataLoader(ds, batch_size=8, num_workers=0))
    assert "rank0-thread-main" in ds.stats()["workers"]
    assert ds.stats()["samples"] == 42
