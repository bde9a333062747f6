"""The batch path: samples decoded a chunk at a time, failures inside a chunk, recycled
memory, whole-batch mode, the loader protocol and the stage table.

The oracle for pixels is the per-sample fused call, ``plan.from_jpeg(bytes,
rng=sample_rng(seed, epoch, slot))``; for the order, the per-sample semantics of the failure
policy written out here: a worker's items in order, failed ones left out, then each failed
slot replaced by the worker's good samples cycled in order.
"""

import gc
import pickle

import numpy as np
import pytest
import torch
import torch.utils.data
from helpers import sweep
from helpers.shards import jpeg, labelled_members, write_tar

from turboloader import transforms as T
from turboloader.data import ImageFolder, TarDataset, sharding
from turboloader.data._buffers import BufferPool, new_shared
from turboloader.errors import DecodeError, FailureBudgetExceeded, SampleError
from turboloader.loader import DataLoader, format_stats
from turboloader.loader.protocol import accepts_out, has_worker_streams
from turboloader.transforms._random import sample_rng

FLOAT = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor(),
                   T.Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))])
PLAN = T.plan(FLOAT)
N = 40
BAD = {3, 4, 6, 17, 30}  # several inside one batch of 8, one per worker at least


def bad_jpeg(i):
    return b"\xff\xd8\xff" + b"garbage%d" % i * 9


@pytest.fixture
def bad_shards(tmp_path):
    """2 shards of 20; the samples in BAD are not decodable JPEGs."""
    members = labelled_members(range(N))
    members = [(n, bad_jpeg(int(n[:6])) if n.endswith(".jpg") and int(n[:6]) in BAD else d)
               for n, d in members]
    return [write_tar(tmp_path / "b-0.tar", members[:40]),
            write_tar(tmp_path / "b-1.tar", members[40:])]


def tar_or_folder(kind, bad_shards, tmp_path):
    """The bad shards as a TarDataset (skipping), or 30 good JPEGs as an ImageFolder."""
    if kind == "tar":
        return TarDataset(bad_shards, FLOAT, seed=5, on_error="skip", max_failures=5)
    for i in range(30):
        d = tmp_path / "f" / f"c{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:03d}.jpg").write_bytes(jpeg(i))
    return ImageFolder(tmp_path / "f", FLOAT, seed=5)


def expected_stream(ds, epoch, worker, W):
    """(sample id, random-parameter slot) in the order the per-sample policy delivers them."""
    slots, samples = sharding.worker_items(
        ds._counts, seed=ds.seed, epoch=epoch, shuffle=ds.shuffle, rank=0, world_size=1,
        worker=worker, num_workers=W, pad=ds.pad, fixed=False,
        random_access=ds._random_access, mix_shards=ds.mix_shards)
    good = [(int(g), int(s)) for s, g in zip(slots, samples) if int(g) not in BAD]
    failed = [int(s) for s, g in zip(slots, samples) if int(g) in BAD]
    return good + [(good[k % len(good)][0], slot) for k, slot in enumerate(failed)]


def oracle(g, slot, epoch, seed=5):
    return PLAN.from_jpeg(jpeg(g), rng=sample_rng(seed, epoch, slot))


def batched_oracle(ds, epoch, W, B, drop_last=False):
    """torch's order: each worker's stream batched, batches taken round-robin."""
    per = []
    for w in range(W):
        items = expected_stream(ds, epoch, w, W)
        chunks = [items[i:i + B] for i in range(0, len(items), B)]
        if drop_last and chunks and len(chunks[-1]) < B:
            chunks.pop()
        per.append(chunks)
    out = []
    for r in range(max(len(c) for c in per)):
        out.extend(c[r] for c in per if r < len(c))
    return out


def check_batches(got, want, epoch):
    assert len(got) == len(want)
    for (images, labels), items in zip(got, want):
        assert labels.tolist() == [g for g, _ in items]
        for img, (g, slot) in zip(images, items):
            assert torch.equal(img, oracle(g, slot, epoch))


@pytest.fixture(params=[64, 3, "bytes"], ids=["chunk64", "chunk3", "chunk-by-bytes"])
def chunk(request, monkeypatch):
    """Batches gathered whole, in parts of 3 (a skip then moves rows across parts), or in
    parts sized by the encoded bytes seen (2 first, then about 4 KB: they vary)."""
    from turboloader.data import reader

    size = request.param
    if size == "bytes":
        size = 64
        monkeypatch.setattr(reader, "MIN_CHUNK", 2)
        monkeypatch.setattr(reader, "GATHER_BYTES", 4096)
    monkeypatch.setattr(reader, "BATCH_CHUNK", size)
    monkeypatch.setattr(reader, "SAMPLE_CHUNK", min(16, size))
    return size


@pytest.mark.parametrize("backend", ["threads", "processes"])
@pytest.mark.parametrize("W,B", sweep([(2, 5), (1, 8), (2, 8)], names=2))
def test_skip_inside_batches_keeps_the_per_sample_order(bad_shards, backend, W, B, chunk):
    ds = TarDataset(bad_shards, FLOAT, seed=5, on_error="skip", max_failures=5)
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        got = list(DataLoader(ds, batch_size=B, num_workers=W, backend=backend))
        check_batches(got, batched_oracle(ds, epoch, W, B), epoch)
    skipped = ds.stats(1)["skipped"]
    assert sorted(int(s["key"]) for s in skipped) == sorted(BAD)
    assert all(s["offset"] is not None and s["shard"] in bad_shards for s in skipped)


def test_parts_follow_the_gather_byte_budget(bad_shards, monkeypatch):
    """A batch is gathered in parts of MIN_CHUNK first, then of about GATHER_BYTES at the
    mean size of the last part (never more than BATCH_CHUNK); the batches stay exact."""
    from turboloader.data import reader

    monkeypatch.setattr(reader, "BATCH_CHUNK", 16)
    monkeypatch.setattr(reader, "MIN_CHUNK", 2)
    monkeypatch.setattr(reader, "GATHER_BYTES", 4 * len(jpeg(0)))
    parts = []
    saw = reader.StreamReader.saw

    def spy(self, chunk, n):
        parts.append((n, chunk.nbytes))
        saw(self, chunk, n)

    monkeypatch.setattr(reader.StreamReader, "saw", spy)
    ds = TarDataset(bad_shards, FLOAT, seed=5, on_error="skip", max_failures=5)
    ds.set_epoch(0)
    got = list(DataLoader(ds, batch_size=40, num_workers=1, backend="threads"))
    check_batches(got, batched_oracle(ds, 0, 1, 40), 0)
    sizes = [n for n, _ in parts]
    assert sizes[0] == 2 and len(set(sizes)) > 2
    # each later part: about 4 JPEGs' worth at the previous part's mean size, fewer only
    # where a batch or the pass ends
    full = 0
    for (n, _), (m, prev) in zip(parts[1:], parts):
        want = min(16, max(2, int(4 * len(jpeg(0)) // (prev / m))))
        assert n <= want
        full += n == want
    assert full >= len(parts) - 1 - 2 * len(got)


def test_sample_mode_is_the_same_stream(bad_shards, chunk):
    """Iterating the dataset (chunks of SAMPLE_CHUNK, views of a recycled buffer)."""
    ds = TarDataset(bad_shards, FLOAT, seed=5, on_error="skip", max_failures=5)
    ds.set_epoch(2)
    got = [(x.clone(), y) for x, y in ds]
    want = expected_stream(ds, 2, 0, 1)
    assert [y for _, y in got] == [g for g, _ in want]
    for (x, _), (g, slot) in zip(got, want):
        assert torch.equal(x, oracle(g, slot, 2))


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_raise_inside_a_batch_names_the_sample(bad_shards, backend):
    ds = TarDataset(bad_shards, FLOAT, seed=5)
    ds.set_epoch(0)
    with pytest.raises(DecodeError) as info:
        list(DataLoader(ds, batch_size=8, num_workers=2, backend=backend))
    text = str(info.value) + "\n".join(getattr(info.value, "__notes__", []))
    assert "shard" in text and "byte offset" in text and ".jpg" in text


def test_raise_in_sample_mode_delivers_the_samples_before_it(bad_shards):
    """The failing row is in the middle of a chunk: the rows before it come out first."""
    ds = TarDataset(bad_shards, FLOAT, seed=5, shuffle=False)
    ds.set_epoch(0)
    got = []
    with pytest.raises(DecodeError):
        for _, y in ds:
            got.append(y)
    assert got == [0, 1, 2]  # sample 3 is the first bad one


def test_budget_inside_a_batch(bad_shards):
    ds = TarDataset(bad_shards, FLOAT, seed=5, on_error="skip", max_failures=1, shuffle=False)
    ds.set_epoch(0)
    with pytest.raises(FailureBudgetExceeded):
        list(DataLoader(ds, batch_size=8, num_workers=0))
    got = []
    with pytest.raises(FailureBudgetExceeded):
        for _, y in ds:
            got.append(y)
    assert got == [0, 1, 2]  # 3 skipped (the budget), 4 over it: 0..2 came out first


def test_bad_label_inside_a_batch_is_a_sample_error(tmp_path):
    members = labelled_members(range(10))
    members[7] = ("000003.cls", b"three")
    ds = TarDataset([write_tar(tmp_path / "l.tar", members)], FLOAT, shuffle=False)
    ds.set_epoch(0)
    with pytest.raises(SampleError, match="not an integer"):
        list(DataLoader(ds, batch_size=8, num_workers=0))
    ds = TarDataset([write_tar(tmp_path / "l2.tar", members)], FLOAT, shuffle=False,
                    on_error="skip", max_failures=2)
    ds.set_epoch(0)
    labels = torch.cat([b[1] for b in DataLoader(ds, batch_size=4)]).tolist()
    assert labels == [0, 1, 2, 4, 5, 6, 7, 8, 9, 0]


def _resume_matches(make, epoch):
    """Run a pass whole; then for a few k, k batches, a state, and a fresh loader from it."""
    dl = make()
    dl.set_epoch(epoch) if hasattr(dl, "set_epoch") else None
    full = [(b[0].clone(), b[1]) for b in dl]
    for k in (1, 3, len(full) - 1):
        dl = make()
        dl.set_epoch(epoch) if hasattr(dl, "set_epoch") else None
        it = iter(dl)
        head = [(x.clone(), y) for x, y in (next(it) for _ in range(k))]
        state = dl.state_dict()
        del it
        dl2 = make()
        dl2.load_state_dict(state)
        got = head + [(x.clone(), y) for x, y in dl2]
        assert len(got) == len(full), k
        for (a, la), (b, lb) in zip(got, full):
            assert torch.equal(la, lb) and torch.equal(a, b), k


def test_resume_mid_epoch_with_skips_threads(bad_shards):
    _resume_matches(lambda: DataLoader(
        TarDataset(bad_shards, FLOAT, seed=5, on_error="skip", max_failures=5),
        batch_size=6, num_workers=2), 3)


def test_resume_mid_epoch_processes(tmp_path):
    shards = [write_tar(tmp_path / "ok.tar", labelled_members(range(30)))]
    _resume_matches(lambda: DataLoader(TarDataset(shards, FLOAT, seed=5), batch_size=6,
                                       num_workers=2, backend="processes"), 3)


@pytest.mark.parametrize("epoch", [1, 3])
def test_resume_mid_epoch_with_skips_processes(bad_shards, epoch):
    """The main process names where torch's workers stand although it did not run their
    streams: each worker reports the items it skipped before handing out the batch that
    skips them, so the resumed pass continues the uninterrupted sequence exactly."""
    _resume_matches(lambda: DataLoader(
        TarDataset(bad_shards, FLOAT, seed=5, on_error="skip", max_failures=5),
        batch_size=6, num_workers=2, backend="processes"), epoch)


def test_resume_mid_epoch_with_skips_stateful_workers(bad_shards):
    """Worker processes save their own states: the decoded-ahead rows of a chunk are not
    counted as delivered."""
    sdl = pytest.importorskip("torchdata.stateful_dataloader")

    def make():
        ds = TarDataset(bad_shards, FLOAT, seed=5, on_error="skip", max_failures=5)
        ds.set_epoch(2)
        return sdl.StatefulDataLoader(ds, batch_size=5, num_workers=2, timeout=60)

    _resume_matches(make, 2)


def test_two_epochs_fresh_augmentations_without_set_epoch(bad_shards):
    """Automatic epochs under torch's DataLoader, whole-batch mode included: every epoch
    new parameters, every sample once."""
    ds = TarDataset(bad_shards, FLOAT, seed=5, on_error="skip", max_failures=5)
    for loader in (torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2),
                   torch.utils.data.DataLoader(ds.batched(8), batch_size=None, num_workers=2)):
        epochs = []
        for _ in range(2):
            images = {}
            for x, y in loader:
                for img, g in zip(x, y.tolist()):
                    images.setdefault(g, img)
            epochs.append(images)
        good = set(range(N)) - BAD
        assert set(epochs[0]) == good and set(epochs[1]) == good
        assert sum(not torch.equal(epochs[0][g], epochs[1][g]) for g in good) > len(good) // 2


@pytest.mark.parametrize("W,B,drop_last", [(1, 8, False), (2, 8, False), (2, 6, True)])
def test_batched_equals_torch_batching(bad_shards, W, B, drop_last):
    ds = TarDataset(bad_shards, FLOAT, seed=5, on_error="skip", max_failures=5)
    ds.set_epoch(1)
    want = list(torch.utils.data.DataLoader(ds, batch_size=B, num_workers=W,
                                            drop_last=drop_last))
    got = list(torch.utils.data.DataLoader(ds.batched(B, drop_last=drop_last), batch_size=None,
                                           num_workers=W))
    assert len(got) == len(want) == len(ds.batched(B, drop_last=drop_last, num_workers=W))
    for (a, la), (b, lb) in zip(got, want):
        assert torch.equal(la, lb) and torch.equal(a, b)
    assert all(type(x) is torch.Tensor for x, _ in got)  # the worker's wrapper stays there


def test_shared_batches_cross_processes_by_handle():
    """A batch made in shared memory pickles (torch's worker queue) to a handle, not data."""
    import torch.multiprocessing  # noqa: F401  (registers the tensor reductions)
    from multiprocessing.reduction import ForkingPickler

    t = new_shared((64, 3, 64, 64), torch.float32)
    assert t.is_shared() and t.shape == (64, 3, 64, 64)
    assert len(ForkingPickler.dumps(t)) < 10_000 < t.numel() * 4


def send(pool, tensor):
    """What a worker's result queue does to a batch: pickle, then unpickle in the receiver."""
    import torch.multiprocessing  # noqa: F401  (registers the tensor reductions)
    from multiprocessing.reduction import ForkingPickler

    return ForkingPickler.loads(ForkingPickler.dumps(pool.send(tensor)))


def test_shared_pool_reuses_a_buffer_once_the_receiver_drops_it():
    pool = BufferPool(2, shared=True)
    a = pool.get((4, 3, 8, 8))
    ptr = a.data_ptr()
    a.copy_(torch.arange(a.numel()).view(a.shape))
    got = send(pool, a)
    assert type(got) is torch.Tensor and torch.equal(got, a)
    del a
    assert pool.get((4, 3, 8, 8)).data_ptr() != ptr  # the receiver still holds it
    view = got[1:]
    del got
    assert pool.get((4, 3, 8, 8)).data_ptr() != ptr  # ... through a view
    del view
    b = pool.get((4, 3, 8, 8))
    assert b.data_ptr() == ptr  # released: recycled
    part = send(pool, b[:2])  # a partial batch raises the same buffer's flag
    del b
    assert pool.get((4, 3, 8, 8)).data_ptr() != ptr
    arr = part.numpy()
    del part
    assert pool.get((4, 3, 8, 8)).data_ptr() != ptr  # a NumPy array of it
    del arr
    assert pool.get((4, 3, 8, 8)).data_ptr() == ptr


def test_shared_pool_never_reuses_what_the_worker_still_holds_or_never_got_back():
    pool = BufferPool(1, shared=True)
    a = pool.get((2, 5))
    ptr = a.data_ptr()
    assert pool.get((2, 5)).data_ptr() != ptr  # held here, not yet sent
    a.fill_(3)
    import torch.multiprocessing  # noqa: F401
    from multiprocessing.reduction import ForkingPickler

    message = ForkingPickler.dumps(pool.send(a))  # sent by handle, never received: no release
    del a
    held = [pool.get((2, 5)) for _ in range(3)]  # over capacity: new memory every time
    assert ptr not in {h.data_ptr() for h in held} and len({h.data_ptr() for h in held}) == 3
    assert pool.send(held[0]) is held[0]  # not one of the pool's blocks: sent as it is
    got = ForkingPickler.loads(message)  # received late: still the batch that was sent
    assert torch.equal(got, torch.full((2, 5), 3.0))


def test_a_batch_pickled_by_pickle_is_a_copy_and_frees_the_block():
    pool = BufferPool(1, shared=True)
    a = pool.get((2, 5))
    ptr = a.data_ptr()
    a.fill_(2)
    data = pickle.dumps(pool.send(a))  # torch.save / pickle: the data itself
    del a
    assert pool.get((2, 5)).data_ptr() == ptr
    assert torch.equal(pickle.loads(data), torch.full((2, 5), 2.0))


@pytest.mark.parametrize("make", [lambda x: x.permute(1, 0), lambda x: x[1:], lambda x: x.detach(),
                                  lambda x: torch.split(x, 1)[0]],
                         ids=["permute", "slice", "detach", "split"])
def test_a_view_that_leaves_by_torchs_pickler_is_a_copy_and_never_rewritten(make):
    """Memory leaves a worker without a copy only through the pool's own send: a view
    pickled by torch's reduction is copied out (and the block is free again here once the
    sender's tensor is gone)."""
    import torch.multiprocessing  # noqa: F401
    from multiprocessing.reduction import ForkingPickler

    pool = BufferPool(1, shared=True)
    a = pool.get((3, 4))
    ptr = a.data_ptr()
    a.copy_(torch.arange(12.0).view(3, 4))
    want = make(a).clone()
    message = ForkingPickler.dumps(make(a))
    del a
    b = pool.get((3, 4))
    assert b.data_ptr() == ptr  # the block came back: nothing else maps it
    b.fill_(-1)
    assert torch.equal(ForkingPickler.loads(message), want)


def test_a_received_batch_held_at_a_fork_is_never_released():
    import multiprocessing as mp

    pool = BufferPool(1, shared=True)
    a = pool.get((2, 3))
    ptr = a.data_ptr()
    a.fill_(4)
    got = send(pool, a)
    del a
    p = mp.get_context("fork").Process(target=lambda: None)
    p.start()
    p.join()
    del got  # the child may still have held it: no release
    assert all(pool.get((2, 3)).data_ptr() != ptr for _ in range(3))


@pytest.mark.parametrize("shared", [True, False])
def test_a_batch_moved_to_shared_memory_keeps_its_block_until_it_dies(shared):
    """share_memory_() copies a hand-out into new shared memory and lets go of the block's
    memory, while a NumPy view taken before still points there: the block is neither
    rewritten nor unmapped until the batch's storage (held by the view) dies."""
    pool = BufferPool(1, shared=shared)
    a = pool.get((3, 4))
    ptr = a.data_ptr()
    a.fill_(7)
    got = send(pool, a) if shared else a
    del a
    view = got.numpy()
    got.share_memory_()
    assert got.is_shared() and got.data_ptr() != ptr
    del got
    other = pool.get((3, 4))  # the block is still out: new memory
    assert other.data_ptr() != ptr
    other.fill_(-1)
    assert (view == 7).all()
    del view
    assert pool.get((3, 4)).data_ptr() == ptr  # the storage died: the block is back


@pytest.mark.parametrize("W", [1, 2])
def test_batched_consumer_that_keeps_every_batch_gets_intact_batches(bad_shards, W):
    ds = TarDataset(bad_shards, FLOAT, seed=5, on_error="skip", max_failures=5)
    dl = torch.utils.data.DataLoader(ds.batched(4), batch_size=None, num_workers=W,
                                     persistent_workers=True)
    for e in (0, 1):
        ds.set_epoch(e)
        copies = [(x.clone(), y.clone()) for x, y in dl]  # dropped at once: recycled
        ds.set_epoch(e)
        kept = list(dl)  # every batch kept: none may be overwritten
        assert len(kept) == len(copies) == 10
        for (a, la), (b, lb) in zip(kept, copies):
            assert torch.equal(la, lb) and torch.equal(a, b)


@pytest.mark.parametrize("dataset", ["tar", "folder"])
def test_samples_collate_into_recycled_shared_batches_intact(bad_shards, tmp_path, dataset):
    """Per-sample datasets under torch's DataLoader: default_collate stacks the workers' rows
    into recycled shared buffers; batches kept by the consumer are never overwritten and
    equal the main process's own batches (num_workers=0)."""
    ds = tar_or_folder(dataset, bad_shards, tmp_path)
    ds.set_epoch(0)
    dl = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=1, persistent_workers=True)
    # one worker: the same stream and order as in-process
    ref = list(torch.utils.data.DataLoader(ds, batch_size=4))
    for _ in range(2):
        copies = [(x.clone(), y.clone()) for x, y in dl]  # dropped at once: recycled
        kept = list(dl)
        assert len(kept) == len(copies) == len(ref)
        for (a, la), (b, lb), (c, lc) in zip(kept, copies, ref):
            assert type(a) is torch.Tensor
            assert torch.equal(la, lc) and torch.equal(lb, lc)
            assert torch.equal(a, c) and torch.equal(b, c)


def test_a_batch_of_a_buffers_leading_rows_is_sent_without_a_copy():
    from turboloader.data._buffers import _leading_rows, as_row

    pool = BufferPool(2, shared=True)
    buf = pool.get((6, 3, 4, 4))
    rows = [as_row(buf[i]) for i in range(6)]
    whole = _leading_rows(pool, rows[:4])
    assert whole.shape == (4, 3, 4, 4) and whole.data_ptr() == buf.data_ptr()
    for bad in (rows[1:5], [rows[0], rows[2], rows[1]], [rows[0], buf[1]],  # not rows 0..n-1
                [as_row(x) for x in torch.zeros(3, 3, 4, 4)]):               # not the pool's
        assert _leading_rows(pool, bad) is None


def test_a_row_of_a_shared_buffer_sent_alone_is_a_copy():
    """A custom collate_fn may send a row itself: torch's own reduction copies it out of the
    block, so the main process's row is its own and the block is free again (once the
    worker's tensors are gone)."""
    import torch.multiprocessing  # noqa: F401
    from multiprocessing.reduction import ForkingPickler

    from turboloader.data import _buffers

    pool = _buffers.shared_pool()
    buf = pool.get((2, 3))
    buf.copy_(torch.arange(6.0).view(2, 3))
    ptr = buf.data_ptr()
    message = ForkingPickler.dumps(_buffers.as_row(buf[1]))
    del buf
    again = pool.get((2, 3))
    assert again.data_ptr() == ptr
    again.fill_(0)
    got = ForkingPickler.loads(message)
    assert type(got) is torch.Tensor and torch.equal(got, torch.tensor([3.0, 4.0, 5.0]))
    pool.clear()


def test_rows_are_plain_tensors_to_a_custom_collate_and_outside_workers(bad_shards):
    ds = TarDataset(bad_shards, FLOAT, seed=5, on_error="skip", max_failures=5)
    ds.set_epoch(0)
    ref = [img for img, _ in ds]
    got = [img for batch in torch.utils.data.DataLoader(ds, batch_size=4, num_workers=1,
                                                        collate_fn=lambda b: b)
           for img, _ in batch]
    assert all(type(x) is torch.Tensor for x in got) and len(got) == len(ref)
    assert all(torch.equal(a, b) for a, b in zip(got, ref))
    from torch.utils.data import default_collate

    from turboloader.data._buffers import as_row
    rows = [as_row(x) for x in ref[:4]]  # outside a worker: torch's own collate
    assert torch.equal(default_collate(rows), torch.stack(ref[:4]))


# -- recycled memory ------------------------------------------------------------------------


def test_pool_reuses_only_what_nobody_references():
    pool = BufferPool(3)
    a = pool.get((4, 3))
    ptr = a.data_ptr()
    del a
    b = pool.get((4, 3))
    assert b.data_ptr() == ptr  # dropped: reused
    view = b[1:]
    arr = pool.get((4, 3)).numpy()
    del b
    assert pool.get((4, 3)).data_ptr() not in (ptr, arr.ctypes.data)  # a view / an array
    held = [pool.get((4, 3)) for _ in range(5)]  # over capacity: new memory every time
    assert len({h.data_ptr() for h in held} | {ptr, arr.ctypes.data}) == 7
    del view, arr, held
    gc.collect()
    s = pool.get((4, 3))
    s.share_memory_()  # another process may map it now: never reused
    ptr = s.data_ptr()
    del s
    assert all(pool.get((4, 3)).data_ptr() != ptr for _ in range(4))


@pytest.mark.parametrize("dataset", ["tar", "folder"])
def test_a_consumer_that_keeps_every_batch_gets_distinct_correct_batches(bad_shards, tmp_path,
                                                                          dataset):
    ds = tar_or_folder(dataset, bad_shards, tmp_path)
    dl = DataLoader(ds, batch_size=4, num_workers=2, prefetch_factor=1)
    dl.set_epoch(0)
    copies = [(x.clone(), y.clone()) for x, y in dl]  # dropped at once: memory recycled
    assert dl._pool.reused > 0
    dl.set_epoch(0)
    kept = list(dl)  # every batch kept: each must stay intact
    assert len({x.data_ptr() for x, _ in kept}) == len(kept)
    for (a, la), (b, lb) in zip(kept, copies):
        assert torch.equal(la, lb) and torch.equal(a, b)


def test_user_views_keep_their_memory(bad_shards):
    ds = TarDataset(bad_shards, FLOAT, seed=5, on_error="skip", max_failures=5)
    dl = DataLoader(ds, batch_size=4, num_workers=1, prefetch_factor=1)
    dl.set_epoch(0)
    firsts, copies = [], []
    for x, _ in dl:
        firsts.append(x[0])  # a view of the batch only
        copies.append(x[0].clone())
    assert all(torch.equal(a, b) for a, b in zip(firsts, copies))


# -- map-style batches ------------------------------------------------------------------------


@pytest.fixture
def image_folder(tmp_path):
    root = tmp_path / "folder"
    for i in range(23):
        d = root / f"class{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:03d}.jpg").write_bytes(bad_jpeg(i) if i in (4, 5, 9) else jpeg(i))
    return root


def test_getitems_equals_getitem_with_skips(image_folder, chunk):
    ds = ImageFolder(image_folder, FLOAT, seed=2, on_error="skip", max_failures=5)
    ds.set_epoch(4)
    idx = [0, 3, 4, 5, 6, 9, 22, 1]
    batch = ds.__getitems__(idx)
    single = [ds[i] for i in idx]
    for (a, la), (b, lb) in zip(batch, single):
        assert la == lb and torch.equal(a, b)
    # a failed index is replaced by the next readable one, with the requested index's
    # parameters
    i4 = [k for k, (p, _) in enumerate(ds.samples) if p.endswith("004.jpg")][0]
    img, label = ds[i4]
    nxt = i4 + 1
    while ds.samples[nxt][0].endswith(("005.jpg", "009.jpg")):
        nxt += 1
    with open(ds.samples[nxt][0], "rb") as f:
        want = PLAN.from_jpeg(f.read(), rng=sample_rng(2, 4, i4))
    assert torch.equal(img, want) and label == ds.samples[nxt][1]


def test_getitems_out_writes_the_rows(image_folder):
    ds = ImageFolder(image_folder, FLOAT, seed=2, on_error="skip", max_failures=5)
    ds.set_epoch(0)
    out = torch.empty(4, 3, 24, 24)
    samples = ds.__getitems__([0, 1, 2, 3], out=out)
    for j, (img, _) in enumerate(samples):
        assert img.data_ptr() == out[j].data_ptr()


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_map_style_skip_inside_batches(image_folder, backend):
    ds = ImageFolder(image_folder, FLOAT, seed=2, on_error="skip", max_failures=5)
    ds.set_epoch(1)
    got = list(DataLoader(ds, batch_size=7, num_workers=2, backend=backend))
    ds.set_epoch(1)
    want = [ds[i] for i in range(len(ds))]
    flat = [(x, int(y)) for b in got for x, y in zip(b[0], b[1])]
    assert len(flat) == len(want)
    for (a, la), (b, lb) in zip(flat, want):
        assert la == lb and torch.equal(a, b)


# -- the protocol --------------------------------------------------------------------------


class Squares(torch.utils.data.IterableDataset):
    """The protocol's docstring example: a third-party iterable dataset."""

    def __init__(self, n):
        self.n = n

    def worker_sizes(self, num_workers):
        return [len(range(w, self.n, num_workers)) for w in range(num_workers)]

    def worker_stream(self, worker, num_workers, *, batch_size=None, out=None, timing=None):
        from torch.utils.data._utils.collate import default_collate

        items = ((torch.full((3,), float(i * i)), i) for i in range(worker, self.n, num_workers))
        if batch_size is None:
            yield from items
            return
        chunk = []
        for item in items:
            chunk.append(item)
            if len(chunk) == batch_size:
                yield default_collate(chunk)
                chunk = []
        if chunk:
            yield default_collate(chunk)

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        w, n = (info.id, info.num_workers) if info else (0, 1)
        return iter(self.worker_stream(w, n))


@pytest.mark.parametrize("drop_last", [False, True])
def test_a_third_party_dataset_runs_over_the_protocol(drop_last):
    ds = Squares(23)
    assert has_worker_streams(ds) and not accepts_out(ds)
    threads = list(DataLoader(ds, batch_size=4, num_workers=3, drop_last=drop_last))
    procs = list(DataLoader(ds, batch_size=4, num_workers=3, drop_last=drop_last,
                            backend="processes"))
    assert len(threads) == len(procs) == len(DataLoader(ds, batch_size=4, num_workers=3,
                                                        drop_last=drop_last))
    for (a, la), (b, lb) in zip(threads, procs):
        assert torch.equal(a, b) and torch.equal(la, lb)


def test_stage_table_reports_measured_stages(bad_shards):
    ds = TarDataset(bad_shards, FLOAT, seed=5, on_error="skip", max_failures=5)
    dl = DataLoader(ds, batch_size=8, num_workers=2)
    list(dl)
    st = dl.stats()
    dt = st["decode_threads"]
    assert dt["read_s"] > 0 and dt["decode_s"] > 0 and dt["python_s"] >= 0
    assert dt["read_s"] + dt["decode_s"] <= dt["busy_s"] * 1.01
    assert st["stages"]["read"]["measured"]
    text = format_stats(st)
    assert "decode threads:" in text and "bottleneck:" in text
    # a dataset that reports nothing: its read stage is not made up
    dl = DataLoader(Squares(20), batch_size=4, num_workers=2)
    list(dl)
    st = dl.stats()
    assert not st["stages"]["read"]["measured"]
    assert f"{'read':<10}{'in decode':>8}{'-':>9}" in format_stats(st)


def test_reader_state_is_not_pickled(bad_shards):
    ds = TarDataset(bad_shards, FLOAT, seed=5, shuffle=False)
    ds.set_epoch(0)
    next(iter(ds))
    assert ds._states
    assert pickle.loads(pickle.dumps(ds))._states == {}
    assert np.asarray(ds.worker_sizes(3)).sum() == len(ds)


# -- uint8 end to end ------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_uint8_batches_normalised_by_prefetch_equal_the_float_pipeline(bad_shards, backend):
    """A pipeline ending in ToImage() yields uint8 batches (4x less memory); PrefetchLoader
    normalises them (on the device, here the CPU fallback) to what ToTensor + Normalize
    gives on the same draws."""
    from turboloader.prefetch import PrefetchLoader

    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    head = [T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ColorJitter(0.3, 0.3, 0.3)]
    u8 = TarDataset(bad_shards, T.Compose(head + [T.ToImage()]), seed=5, on_error="skip",
                    max_failures=5)
    fl = TarDataset(bad_shards, T.Compose(head + [T.ToTensor(), T.Normalize(mean, std)]),
                    seed=5, on_error="skip", max_failures=5)
    kw = dict(batch_size=8, num_workers=2, backend=backend)
    raw = list(DataLoader(u8, **kw))
    assert all(x.dtype == torch.uint8 and x.shape[1:] == (3, 24, 24) for x, _ in raw)
    got = list(PrefetchLoader(DataLoader(u8, **kw), "cpu", mean=mean, std=std))
    want = list(DataLoader(fl, **kw))
    assert len(got) == len(want)
    for (a, la), (b, lb) in zip(got, want):
        assert a.dtype == torch.float32 and torch.equal(la, lb)
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("workers", [0, 2])
def test_map_style_whole_batches(image_folder, workers):
    """ds[list of indices] is a whole batch (torch's BatchSampler + batch_size=None recipe),
    in recycled shared memory from the workers, equal to torch's own batching of the samples
    (every batch kept: a recycled buffer must not overwrite one the consumer holds)."""
    ds = ImageFolder(image_folder, FLOAT, seed=2, on_error="skip", max_failures=10)
    ds.set_epoch(0)
    sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(ds), 6, False)
    got = list(torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=None,
                                           num_workers=workers))
    want = list(torch.utils.data.DataLoader(ds, batch_size=6, num_workers=workers))
    assert len(got) == len(want)
    for (a, la), (b, lb) in zip(got, want):
        assert torch.equal(la, lb) and torch.equal(a, b)
