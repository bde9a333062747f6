"""The thread backend's decode threads share one native batch runner (up to
SHARED_RUNNER_MAX of them): every batch call runs on a thread per decode thread, and the
batches are exactly those of per-thread runners and of torch's worker processes."""

import pytest
import torch

from turboloader import transforms as T
from turboloader.data import TarDataset
from turboloader.decode import executor
from turboloader.loader import DataLoader
from turboloader.loader import _iterable

FLOAT = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor(),
                   T.Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))])
VAL = T.Compose([T.Resize(28), T.CenterCrop(24), T.PILToTensor()])


@pytest.fixture
def runners(monkeypatch):
    """The ``runner`` of every native batch call, in call order."""
    seen = []
    real = executor.run_batch

    def run_batch(*args, runner=None, **kw):
        seen.append(runner)
        return real(*args, runner=runner, **kw)

    monkeypatch.setattr(executor, "run_batch", run_batch)
    return seen


def passes(ds, epochs=(0, 1), **kw):
    loader = DataLoader(ds, backend="threads", **kw)
    out = []
    for e in epochs:
        loader.set_epoch(e)
        out.append(list(loader))
    return loader, out


def assert_same(a, b):
    assert len(a) == len(b)
    for pa, pb in zip(a, b):
        assert len(pa) == len(pb)
        for x, y in zip(pa, pb):
            assert x[0].dtype == y[0].dtype and torch.equal(x[0], y[0])
            assert torch.equal(x[1], y[1])


@pytest.mark.parametrize("workers", [2, 3])
def test_every_batch_call_runs_on_one_runner_of_a_thread_per_stream(shards, runners, workers):
    loader, out = passes(TarDataset(shards, FLOAT, seed=3), batch_size=4, num_workers=workers)
    assert runners, "no native batch call"
    first = runners[0]
    assert isinstance(first, executor.BatchRunner) and first.threads == workers
    # both passes, every stream: the loader's one runner (its threads and scratch are kept)
    assert all(r is first for r in runners)
    assert sorted(torch.cat([b[1] for b in out[1]]).tolist()) == list(range(26))


def test_more_threads_than_the_limit_keep_their_own_runners(shards, runners, monkeypatch):
    monkeypatch.setattr(_iterable, "SHARED_RUNNER_MAX", 2)
    passes(TarDataset(shards, FLOAT, seed=3), epochs=(0,), batch_size=4, num_workers=3)
    assert runners and all(r is None for r in runners)  # the calling thread's 1-thread runner


@pytest.mark.parametrize("tf,shuffle", [(FLOAT, True), (VAL, False)])
@pytest.mark.parametrize("workers,batch", [(2, 4), (3, 5), (4, 3)])
def test_rows_equal_per_thread_runners_and_processes(shards, monkeypatch, tf, shuffle,
                                                     workers, batch):
    kw = dict(batch_size=batch, num_workers=workers)
    _, shared = passes(TarDataset(shards, tf, seed=5, shuffle=shuffle), **kw)
    monkeypatch.setattr(_iterable, "SHARED_RUNNER_MAX", 1)
    _, own = passes(TarDataset(shards, tf, seed=5, shuffle=shuffle), **kw)
    assert_same(shared, own)
    ds = TarDataset(shards, tf, seed=5, shuffle=shuffle)
    procs = []
    for e in (0, 1):
        ds.set_epoch(e)
        procs.append(list(DataLoader(ds, backend="processes", **kw)))
    assert_same(shared, procs)


def test_failures_through_the_shared_runner(corrupt_shards, runners):
    """A sample that does not decode is a row status of the shared call: skipped and
    replaced as with per-thread runners (and torch's workers)."""
    ds = TarDataset(corrupt_shards, FLOAT, seed=1, on_error="skip", max_failures=2)
    _, out = passes(ds, epochs=(0,), batch_size=3, num_workers=2)
    assert any(isinstance(r, executor.BatchRunner) for r in runners)
    ds2 = TarDataset(corrupt_shards, FLOAT, seed=1, on_error="skip", max_failures=2)
    ds2.set_epoch(0)
    procs = list(DataLoader(ds2, backend="processes", batch_size=3, num_workers=2))
    assert_same(out, [procs])
    labels = torch.cat([b[1] for b in out[0]]).tolist()
    assert 5 not in labels and len(labels) == 16
    assert ds.stats(0)["failures"] == 1



@pytest.fixture
def call_sizes(monkeypatch):
    """``(decode thread name, samples)`` of every native batch call, in call order."""
    import threading

    seen = []
    real = executor.run_batch

    def run_batch(sources, *args, **kw):
        seen.append((threading.current_thread().name, len(sources)))
        return real(sources, *args, **kw)

    monkeypatch.setattr(executor, "run_batch", run_batch)
    return seen


def test_a_pass_starts_with_a_short_call_per_stream(shards, call_sizes, monkeypatch):
    """Until a pass's first batch call starts no core decodes: on a shared runner each
    stream's first call of every pass has ``first_chunk`` samples, the rest full chunks,
    and the batches are those of per-thread runners (whose calls are not split)."""
    monkeypatch.setattr(_iterable.SharedRunner, "first_chunk", 3)
    kw = dict(batch_size=8, num_workers=2)
    _, shared = passes(TarDataset(shards, FLOAT, seed=5, shuffle=True), **kw)
    firsts = {}
    for name, n in call_sizes:
        firsts.setdefault(name, []).append(n)
    assert sorted(firsts) == ["turboloader-decode-0", "turboloader-decode-1"]
    # 2 passes: each stream's first call of each pass is short, then the batch's rest
    for sizes in firsts.values():
        assert sizes.count(3) >= 2 and sizes[0] == 3
        assert sum(sizes) == 26  # 13 samples per stream and pass (10 + 9 + 7 over 2)
    monkeypatch.setattr(_iterable, "SHARED_RUNNER_MAX", 1)
    call_sizes.clear()
    _, own = passes(TarDataset(shards, FLOAT, seed=5, shuffle=True), **kw)
    assert 3 not in {n for _, n in call_sizes}  # per-thread runners: whole batches
    assert_same(shared, own)
