"""Mid-epoch resume: the samples not yet delivered, in the same order, by offset."""


import pytest
import torch

from helpers.shards import write_shards
from helpers.shards import size_of
from turboloader.data import TarDataset
from turboloader.data.tar_dataset import delivered_counts

SIZES = [6, 2, 7, 5]  # uneven; 20 samples
N = sum(SIZES)


def loader(ds, num_workers, batch_size):
    return torch.utils.data.DataLoader(ds, batch_size=batch_size, num_workers=num_workers,
                                       timeout=60 if num_workers else 0)


def batches(it, k=None):
    out = []
    for b, (_, lab) in enumerate(it):
        out.append(lab.tolist())
        if k is not None and b + 1 == k:
            break
    return out


@pytest.fixture
def urls(tmp_path):
    return write_shards(str(tmp_path / "s"), SIZES)


def test_delivered_counts_follow_torch_round_robin():
    # worker sizes 6, 7, 7 with batches of 3: batch counts 2, 3, 3
    assert delivered_counts([6, 7, 7], 0, 3) == ([0, 0, 0], 0)
    assert delivered_counts([6, 7, 7], 4, 3) == ([6, 3, 3], 1)
    assert delivered_counts([6, 7, 7], 6, 3) == ([6, 6, 6], 1)
    assert delivered_counts([6, 7, 7], 7, 3) == ([6, 7, 6], 2)
    assert delivered_counts([6, 7, 7], 8, 3) == ([6, 7, 7], 0)
    assert delivered_counts([6, 7, 7], 4, 3, drop_last=True) == ([6, 3, 3], 1)
    with pytest.raises(ValueError):
        delivered_counts([6, 7, 7], 9, 3)


@pytest.mark.slow
@pytest.mark.parametrize("num_workers,batch_size", [(3, 3), (2, 4)])
def test_plain_dataloader_resume_same_order(urls, num_workers, batch_size):
    ds = TarDataset(urls, size_of, seed=5)
    ds.set_epoch(2)
    full = batches(loader(ds, num_workers, batch_size))
    assert sorted(sum(full, [])) == list(range(N))
    for k in range(len(full) + 1):
        ds = TarDataset(urls, size_of, seed=5)
        ds.set_epoch(2)
        head = batches(loader(ds, num_workers, batch_size), k) if k else []
        state = ds.state_dict(batches=k, batch_size=batch_size, num_workers=num_workers)
        assert state["delivered"] == len(sum(head, []))
        fresh = TarDataset(urls, size_of, seed=5)  # a new process after a restart
        fresh.load_state_dict(state)
        assert fresh.epoch == 2
        fresh.set_epoch(2)  # the training loop's call for the resumed epoch keeps the point
        tail = batches(loader(fresh, num_workers, batch_size))
        assert head + tail == full, k
        fresh.set_epoch(3)  # the next epoch is whole again
        assert sorted(sum(batches(loader(fresh, num_workers, batch_size)), [])) == list(range(N))


def _at(epoch, *args, **kwargs):
    ds = TarDataset(*args, **kwargs)
    ds.set_epoch(epoch)
    return ds


def test_main_process_state_and_ranks(urls):
    full = {r: batches(loader(_at(0, urls, size_of, rank=r, world_size=2), 0, 4))
            for r in range(2)}
    ds = _at(0, urls, size_of, rank=0, world_size=2)
    head = batches(loader(ds, 0, 4), 2)
    state = ds.state_dict()  # num_workers=0: the stream ran in this process
    assert state["delivered"] == 8 and state["world_size"] == 2
    for r in range(2):  # rank 0's state serves every rank: equal shares, same offsets
        ds = TarDataset(urls, size_of, rank=r, world_size=2)
        ds.load_state_dict(state)
        tail = batches(loader(ds, 0, 4))
        assert full[r][:2] + tail == full[r]
    assert head == full[0][:2]


@pytest.mark.parametrize("explicit", [True, False])
def test_stateful_dataloader(urls, explicit):
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    if not explicit:
        # automatic epochs: each worker's state names the pass's word; the resumed run
        # continues that pass (compared with the rest of the interrupted pass)
        mk = lambda: sdl.StatefulDataLoader(TarDataset(urls, size_of, seed=1),  # noqa: E731
                                            batch_size=3, num_workers=2, timeout=60)
        it = iter(mk_dl := mk())
        head = [next(it)[1].tolist() for _ in range(3)]
        state = mk_dl.state_dict()
        tail = batches(it)
        assert sorted(sum(head + tail, [])) == list(range(N))
        dl2 = mk()
        dl2.load_state_dict(state)
        assert batches(dl2) == tail
        return
    make = lambda: sdl.StatefulDataLoader(_at(0, urls, size_of, seed=1), batch_size=3,  # noqa: E731
                                          num_workers=2, timeout=60)
    full = batches(make())
    dl = make()
    it = iter(dl)
    head = [next(it)[1].tolist() for _ in range(3)]
    state = dl.state_dict()
    del it
    dl2 = make()
    dl2.load_state_dict(state)
    assert head + batches(dl2) == full


def test_thread_backend_streams_delivered(urls):
    """Logical worker streams run in this process (the thread backend's protocol)."""
    ds = _at(0, urls, size_of, seed=9)
    streams = [ds.worker_stream(w, 2) for w in range(2)]
    got = [[next(streams[0])[1] for _ in range(3)], [next(streams[1])[1] for _ in range(1)]]
    next(streams[1])  # produced (prefetched) but not delivered
    state = ds.state_dict(delivered=[3, 1])
    rest = []
    for w in range(2):
        rest.append([lab for _, lab in ds.worker_stream(w, 2)])
    fresh = TarDataset(urls, size_of, seed=9)
    fresh.load_state_dict(state)
    resumed = [[lab for _, lab in fresh.worker_stream(w, 2)] for w in range(2)]
    assert resumed == [rest[0][3:], rest[1][1:]]
    assert got == [rest[0][:3], rest[1][:1]]


def test_skip_policy_resume(tmp_path):
    from helpers.shards import labelled_members, write_tar

    members = labelled_members(range(8))
    members[6] = (members[6][0], b"not a jpeg")  # sample 3's image
    urls = [write_tar(tmp_path / "a.tar", members)]
    mk = lambda: TarDataset(urls, size_of, shuffle=False, on_error="skip", max_failures=2)  # noqa: E731
    full = batches(loader(mk(), 0, 2))
    assert sum(full, []) == [0, 1, 2, 4, 5, 6, 7, 0]  # slot 3 replaced at the end
    for k in range(len(full) + 1):
        ds = mk()
        head = batches(loader(ds, 0, 2), k) if k else []
        fresh = mk()
        fresh.load_state_dict(ds.state_dict())
        assert head + batches(loader(fresh, 0, 2)) == full, k


def test_mismatched_state_is_refused(urls):
    ds = _at(0, urls, size_of, seed=1)
    state = ds.state_dict(batches=1, batch_size=2, num_workers=2)
    with pytest.raises(ValueError, match="seed"):
        TarDataset(urls, size_of, seed=2).load_state_dict(state)
    with pytest.raises(ValueError, match="format"):
        ds.load_state_dict({"epoch": 0})
    ds.load_state_dict(state)
    with pytest.raises(ValueError, match="num_workers"):
        list(ds.worker_stream(0, 3))


@pytest.mark.slow
def test_tbl_resumable_sampler(tmp_path):
    from turboloader import transforms as T
    from turboloader.tools.convert import convert
    from turboloader.data.tbl_dataset import ResumableSampler, TBLDataset
    from turboloader.tools.synthetic import synthetic_jpegs

    folder = tmp_path / "folder"
    for i, (jpeg, label) in enumerate(synthetic_jpegs(11, seed=2, num_classes=2)):
        (folder / f"c{label}").mkdir(parents=True, exist_ok=True)
        (folder / f"c{label}" / f"{i:03d}.jpg").write_bytes(jpeg)
    convert(folder, tmp_path / "all.tbl")
    tf = T.Compose([T.RandomResizedCrop(16), T.ToTensor()])

    def run(state=None, stop=None, rank=1):
        ds = TBLDataset(tmp_path / "all.tbl", tf, seed=4)
        sampler = ResumableSampler(ds, num_replicas=2, rank=rank, seed=3)
        sampler.set_epoch(5)
        ds.set_epoch(5)
        if state is not None:
            sampler.load_state_dict(state["sampler"])
            ds.load_state_dict(state["dataset"])
        out = []
        for images, _ in torch.utils.data.DataLoader(ds, batch_size=2, sampler=sampler,
                                                     num_workers=2, timeout=60):
            out.append(images)
            if stop is not None and len(out) == stop:
                break
        return out, {"sampler": sampler.state_dict(batches=len(out), batch_size=2),
                     "dataset": ds.state_dict()}

    full, _ = run()
    assert len(full) == 3  # 6 of the 12 padded positions, batches of 2
    head, state = run(stop=2)
    fresh = TBLDataset(tmp_path / "all.tbl", tf)
    fresh.load_state_dict(state["dataset"])
    assert fresh.epoch == 5
    tail, _ = run(state=state, rank=1)
    assert len(head) + len(tail) == len(full)
    assert all(torch.equal(a, b) for a, b in zip(head + tail, full))
    with pytest.raises(ValueError):
        ResumableSampler(fresh, num_replicas=3, rank=0).load_state_dict(state["sampler"])


def _mid_epoch_state(urls, k=2):
    """A state after ``k`` batches of 2 (main process), and the labels delivered."""
    ds = _at(0, urls, size_of, seed=3)
    head = sum(batches(loader(ds, 0, 2), k), [])
    return ds.state_dict(), head


@pytest.mark.parametrize("change", ["reordered", "recut", "other"])
def test_state_over_other_shards_is_refused(tmp_path, change):
    """#30 finding 7: the state names its shards and their sizes. The same shards listed
    in another order, or re-cut into shards of other sizes with the same total (which
    before this check resumed silently, delivering some samples twice and others never),
    raise a StateMismatchError naming the shard that differs."""
    from turboloader.errors import StateMismatchError

    urls = write_shards(str(tmp_path / "s"), SIZES)
    state, _ = _mid_epoch_state(urls)
    if change == "reordered":
        other, match = [urls[1], urls[0], *urls[2:]], r"shard #0 is 'shard-0000.tar' there"
    elif change == "recut":  # same names, same total (20), other sizes
        other = write_shards(str(tmp_path / "r"), [5, 3, 7, 5])
        match = r"shard #0 \('shard-0000.tar'\) holds 6 samples there, 5 here"
    else:
        other = write_shards(str(tmp_path / "o"), SIZES, name="other")
        match = r"shard #0 is 'shard-0000.tar' there, 'other-0000.tar' here"
    ds = TarDataset(other, size_of, seed=3)
    assert ds.num_samples == N  # the old fingerprint (counts only) matched
    with pytest.raises(StateMismatchError, match=match):
        ds.load_state_dict(state)
    with pytest.raises(ValueError):  # still the builtin callers catch
        ds.load_state_dict(state)


def test_state_resumes_over_moved_shards(tmp_path):
    """The same shards in another directory (a copy on a new node) resume exactly: the
    rest of the epoch, each sample once."""
    import shutil

    urls = write_shards(str(tmp_path / "s"), SIZES)
    state, head = _mid_epoch_state(urls)
    moved = shutil.copytree(tmp_path / "s", tmp_path / "elsewhere" / "s")
    fresh = TarDataset(sorted(str(p) for p in moved.glob("*.tar")), size_of, seed=3)
    fresh.load_state_dict(state)
    tail = sum(batches(loader(fresh, 0, 2)), [])
    assert sorted(head + tail) == list(range(N)) and len(head) == 4


def test_state_without_shard_list_is_refused(urls):
    from turboloader.errors import StateMismatchError

    state, _ = _mid_epoch_state(urls)
    del state["shards"], state["shard_sizes"]
    with pytest.raises(StateMismatchError, match="no shard list"):
        TarDataset(urls, size_of, seed=3).load_state_dict(state)


def test_parquet_state_over_reordered_files_is_refused(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from helpers.shards import jpeg
    from turboloader import ParquetDataset
    from turboloader.errors import StateMismatchError

    paths = []
    for f in range(2):
        ids = list(range(f * 10, f * 10 + 10))
        path = str(tmp_path / f"p{f}.parquet")
        pq.write_table(pa.table({"image": [jpeg(i) for i in ids], "label": ids}), path,
                       row_group_size=5)
        paths.append(path)
    ds = ParquetDataset(paths, size_of, seed=1)
    ds.set_epoch(0)
    next(iter(loader(ds, 0, 2)))
    state = ds.state_dict()
    with pytest.raises(StateMismatchError, match=r"shard #0 is 'p0.parquet#rg=0' there"):
        ParquetDataset(paths[::-1], size_of, seed=1).load_state_dict(state)
    ParquetDataset(paths, size_of, seed=1).load_state_dict(state)  # the same files: fine


def test_tbl_state_over_reordered_files_is_refused(tmp_path):
    """A map-style sampler's indices name samples through the file order: TBLDataset's
    state records the files and their record counts."""
    from turboloader.data.tbl_dataset import TBLDataset
    from turboloader.errors import StateMismatchError
    from helpers.shards import jpeg
    from turboloader.io.tbl import TBLWriter

    paths = []
    for f, n in enumerate([3, 4]):
        path = str(tmp_path / f"t{f}.tbl")
        with TBLWriter(path) as w:
            for i in range(n):
                w.write(jpeg(i), key=f"k{f}-{i}", label=i)
        paths.append(path)
    state = TBLDataset(paths).state_dict()
    assert state["shards"] == ["t0.tbl", "t1.tbl"] and state["shard_sizes"] == [3, 4]
    with pytest.raises(StateMismatchError, match=r"shard #0 is 't0.tbl' there"):
        TBLDataset(paths[::-1]).load_state_dict(state)
    TBLDataset(paths).load_state_dict(state)
