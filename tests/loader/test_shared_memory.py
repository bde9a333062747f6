"""Shared memory of DataLoader workers: a stated budget, returned when workers exit, and a
clear error (not a bus error) when ``/dev/shm`` cannot hold a batch."""

import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import kept, subprocess_env

from turboloader.data import _buffers
from turboloader.data._buffers import BufferPool, shm_budget
from turboloader.errors import SharedMemoryError


def test_a_batch_that_does_not_fit_dev_shm_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(_buffers, "_shm_free", lambda: (10 << 20, 64 << 20))  # Docker's 64 MB
    pool = BufferPool(3, shared=True)
    with pytest.raises(SharedMemoryError, match="--shm-size") as info:
        pool.get((256, 3, 224, 224))
    assert "147 MiB" in str(info.value) and "64 MiB" in str(info.value)
    assert isinstance(info.value, RuntimeError)
    small = pool.get((2, 3, 8, 8))  # what fits still works
    assert small.shape == (2, 3, 8, 8)


def test_the_budget_is_configurable_and_shared_by_the_nodes_workers(monkeypatch):
    monkeypatch.setenv("TURBOLOADER_SHM_BUDGET", "1MiB")
    assert shm_budget(8) == 1 << 20
    monkeypatch.delenv("TURBOLOADER_SHM_BUDGET")
    monkeypatch.setattr(_buffers, "_shm_free", lambda: (1 << 30, 64 << 30))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert shm_budget(8) == (64 << 30) // 8 // 64
    monkeypatch.setattr(_buffers, "_shm_free", lambda: (1 << 20, 64 << 20))
    assert shm_budget(8) < (1 << 20)  # a small /dev/shm: no recycling, torch's behaviour


def test_a_bad_budget_variable_is_an_error_naming_it_where_the_loader_is_made(monkeypatch,
                                                                              tmp_path):
    import turboloader

    monkeypatch.setenv("TURBOLOADER_SHM_BUDGET", "abc")
    ds = kept.make_dataset("tar", tmp_path)
    with pytest.raises(ValueError, match="TURBOLOADER_SHM_BUDGET='abc'"):
        turboloader.DataLoader(ds, batch_size=4, num_workers=2, backend="processes")
    with pytest.raises(ValueError, match="TURBOLOADER_SHM_BUDGET='abc'"):  # in a worker too
        shm_budget(2)
    turboloader.DataLoader(ds, batch_size=4, num_workers=2)  # threads: no shared memory
    monkeypatch.setenv("TURBOLOADER_SHM_BUDGET", "64MB")
    turboloader.DataLoader(ds, batch_size=4, num_workers=2, backend="processes")


@pytest.mark.parametrize("strategy", ["file_descriptor", "file_system"])
def test_dev_shm_filled_after_the_check_is_a_shared_memory_error(strategy, monkeypatch):
    """Two workers can pass the free-space check together and then not both fit: torch's
    allocation fails with ENOSPC, which must be the same SharedMemoryError. (A request
    larger than all of /dev/shm makes torch's allocation fail at once, for real.)"""
    import os

    import torch.multiprocessing

    monkeypatch.setattr(_buffers, "_check_shm", lambda nbytes: None)  # the check passed
    before = torch.multiprocessing.get_sharing_strategy()
    torch.multiprocessing.set_sharing_strategy(strategy)
    try:
        st = os.statvfs("/dev/shm")
        too_big = st.f_blocks * st.f_frsize + (1 << 20)
        for make in (lambda: BufferPool(3, shared=True).get((too_big,), torch.uint8),
                     lambda: _buffers.new_shared((too_big,), torch.uint8)):
            with pytest.raises(SharedMemoryError, match="--shm-size") as info:
                make()
            assert "No space left on device" in str(info.value.__cause__)
    finally:
        torch.multiprocessing.set_sharing_strategy(before)


def test_past_the_budget_batches_are_fresh_memory():
    pool = BufferPool(3, shared=True, budget=100)
    a = pool.get((4, 8))  # 128 bytes: over the budget, never kept
    assert pool.block_of(a) is None and a.is_shared()  # torch's own fresh shared memory
    del a
    pool.get((4, 8))
    assert pool.reused == 0 and pool.nbytes() == 0
    b = pool.get((4, 4))  # 64 bytes: kept
    ptr = b.data_ptr()
    del b
    assert pool.get((4, 4)).data_ptr() == ptr and pool.nbytes() == 64 and pool.reused == 1


@pytest.mark.parametrize("budget", ["0", "64MB"])
def test_kept_batches_are_intact_with_or_without_recycling(budget, tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOLOADER_SHM_BUDGET", budget)  # inherited by the workers
    want = kept.oracle((0, 1))
    ds = kept.make_dataset("tar", tmp_path)
    dl = torch.utils.data.DataLoader(ds, batch_size=kept.B, num_workers=2,
                                     persistent_workers=True)
    for e in (0, 1):
        ds.set_epoch(e)
        batches = list(dl)
        got = [(img, y) for x, ys in batches for img, y in zip(x, ys.tolist())]
        assert sorted(y for _, y in got) == list(range(kept.N))
        assert all(torch.equal(img, want[(e, y)]) for img, y in got)


LEAK = textwrap.dedent("""
    import gc, os, sys
    import torch.multiprocessing, torch.utils.data
    torch.multiprocessing.set_sharing_strategy(sys.argv[2])
    from helpers import kept
    root = sys.argv[1]
    ds = kept.make_dataset("tar", root)
    # what is alive so far (the imports, the dataset) to the permanent generation: each
    # epoch's full collection below then walks only what the epoch made (its loader, its
    # batches), not torch's objects (0.16 CPU-s a collection)
    gc.freeze()

    def init(_):
        open(os.path.join(root, f"pid-{os.getpid()}"), "w").close()

    def ours():  # shared-memory files made by this process tree
        pids = {str(os.getpid())} | {p[4:] for p in os.listdir(root) if p.startswith("pid-")}
        return [f for f in os.listdir("/dev/shm") if f.startswith("torch_")
                and f.split("_")[1] in pids]

    counts = []
    for e in range(6):
        ds.set_epoch(e)
        for batch in torch.utils.data.DataLoader(ds, batch_size=6, num_workers=2,
                                                 worker_init_fn=init):
            pass
        gc.collect()
        counts.append(len(ours()))
    print(counts)
""")


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["file_system", "file_descriptor"])
def test_shared_memory_is_returned_when_workers_exit(strategy, tmp_path):
    """Non-persistent workers, 6 epochs: the workers' recycled blocks are freed as they
    exit, so /dev/shm does not grow epoch after epoch (it did under file_system)."""
    out = subprocess.run([sys.executable, "-c", LEAK, str(tmp_path), strategy],
                         capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert out.returncode == 0, out.stderr[-3000:]
    counts = eval(out.stdout.strip().splitlines()[-1])
    assert counts[-1] <= counts[0] + 1, counts


KILLED = textwrap.dedent("""
    import gc, os, signal, sys, time
    import torch.multiprocessing
    torch.multiprocessing.set_sharing_strategy("file_system")
    import turboloader
    from helpers import kept
    root = sys.argv[1]
    ds = kept.make_dataset("tar", root, n=240)

    def init(_):
        open(os.path.join(root, f"pid-{os.getpid()}"), "w").close()

    def sizes(pid):  # the worker's shared-memory files: their sizes
        return sorted(os.path.getsize("/dev/shm/" + f) for f in os.listdir("/dev/shm")
                      if f.startswith(f"torch_{pid}_"))

    dl = turboloader.DataLoader(ds, batch_size=kept.B, num_workers=2, backend="processes",
                                worker_init_fn=init)
    try:
        for i, batch in enumerate(dl):
            del batch
            if i == 12:
                victim = int(next(p for p in os.listdir(root) if p.startswith("pid-"))[4:])
                before = sizes(victim)
                os.kill(victim, signal.SIGKILL)
                time.sleep(1)
    except RuntimeError as exc:
        assert "killed by signal" in str(exc), exc
    else:
        raise AssertionError("the killed worker went unnoticed")
    gc.collect()
    print((before, sizes(victim)))
""")


@pytest.mark.slow
def test_a_killed_workers_blocks_are_freed_under_file_system_sharing(tmp_path):
    """A SIGKILLed worker never lets go of its recycled blocks (files in /dev/shm under the
    file_system strategy): once the loader has seen it die, none of its batch-sized files
    is left (torch's own small label tensors in flight may be, as with plain torch)."""
    out = subprocess.run([sys.executable, "-c", KILLED, str(tmp_path)],
                         capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert out.returncode == 0, out.stderr[-3000:]
    before, after = eval(out.stdout.strip().splitlines()[-1])
    batch = kept.B * 3 * 16 * 16 * 4  # a float32 batch of 16 x 16 images
    assert any(size >= batch for size in before), before  # the pool's blocks were there
    assert [size for size in after if size >= batch] == [], (before, after)
