"""ParquetDataset: Parquet files written by pyarrow and Hugging Face datasets (made here, no
hub), against a Pillow oracle; exactly once per epoch across ranks x workers, set_epoch
shuffling, resume, the failure policy, from_hf."""

import io
import os

import numpy as np
import pytest
import torch
import torch.utils.data
from helpers.hf import hf_datasets
from helpers.shards import jpeg, size_of
from PIL import Image
from torchvision import transforms as tvt

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from turboloader import DecodeError, FailureBudgetExceeded, ParquetDataset  # noqa: E402
from turboloader import transforms as T  # noqa: E402
from turboloader.errors import FormatError, SampleError  # noqa: E402


def _write(path, ids, *, row_group_size=3, struct=False, corrupt=(), nulls=(), extra=True):
    images = []
    for i in ids:
        data = jpeg(i, fmt="PNG") if i % 5 == 4 else jpeg(i)
        if i in corrupt:
            data = data[: len(data) // 3]
        images.append(None if i in nulls else data)
    cols = {"label": pa.array(list(ids), pa.int64())}
    if struct:
        cols["image"] = pa.array([{"bytes": b, "path": f"{i}.jpg"} for i, b in zip(ids, images)],
                                 pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    else:
        cols["image"] = pa.array(images, pa.binary())
    if extra:
        cols["id"] = pa.array([f"img-{i:04d}" for i in ids])
        cols["caption"] = pa.array([f"caption {i} " * 50 for i in ids])  # never read
    pq.write_table(pa.table(cols), path, row_group_size=row_group_size)
    return str(path)


@pytest.fixture
def files(tmp_path):
    return [_write(tmp_path / "a.parquet", range(0, 7)),
            _write(tmp_path / "b.parquet", range(7, 12), struct=True)]


def _labels(ds):
    return [int(y) for _, y in ds]


def test_a_directory_is_its_parquet_files(tmp_path, files):
    d = os.path.dirname(files[0])
    assert ParquetDataset(d, size_of).urls == ParquetDataset(sorted(files), size_of).urls
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no .parquet or .arrow files"):
        ParquetDataset(str(tmp_path / "empty"), size_of)


def test_shards_are_row_groups(files):
    ds = ParquetDataset(files, size_of, shuffle=False)
    assert ds.urls == [f"{files[0]}#rg=0", f"{files[0]}#rg=1", f"{files[0]}#rg=2",
                       f"{files[1]}#rg=0", f"{files[1]}#rg=1"]
    assert ds.shard_sizes == [3, 3, 1, 3, 2] and len(ds) == 12
    assert _labels(ds) == list(range(12))
    assert "5 shards, 12 samples" in repr(ds)


def test_outputs_match_pillow(files):
    t = tvt.Compose([tvt.Resize(32), tvt.CenterCrop(24), tvt.ToTensor()])
    for img, y in ParquetDataset(files, t, shuffle=False):
        ref = t(Image.open(io.BytesIO(jpeg(int(y), fmt="PNG" if y % 5 == 4 else "JPEG")))
                .convert("RGB"))
        assert img.shape == ref.shape and (img - ref).abs().mean() < 1 / 255, int(y)
    fused = ParquetDataset(files, T.Compose([T.Resize(32), T.CenterCrop(24), T.ToTensor()]),
                           shuffle=False)
    for img, y in fused:
        ref = t(Image.open(io.BytesIO(jpeg(int(y), fmt="PNG" if y % 5 == 4 else "JPEG")))
                .convert("RGB"))
        assert (img - ref).abs().mean() < 5 / 255  # fused with DCT scaling
    pil, _ = next(iter(ParquetDataset(files, shuffle=False)))
    ref = np.asarray(Image.open(io.BytesIO(jpeg(0))).convert("RGB"), np.int16)
    assert np.abs(np.asarray(pil, np.int16) - ref).mean() < 1


def test_reads_only_the_needed_columns(files, monkeypatch):
    read = []
    orig = pq.ParquetFile.read_row_group

    def spy(self, i, columns=None, **kw):
        read.append(tuple(columns))
        return orig(self, i, columns=columns, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy)
    assert len(list(ParquetDataset(files, size_of, key_column="id"))) == 12
    assert set(read) == {("image", "label", "id")} and len(read) == 5  # once per row group


@pytest.mark.parametrize("world,workers", [(1, 3), (2, 2), (3, 1)])
@pytest.mark.parametrize("pad", [True, False])
def test_exactly_once_across_ranks_and_workers(files, world, workers, pad):
    ds = ParquetDataset(files, size_of, seed=4, pad=pad, rank=0, world_size=world)
    orders = []
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        got = []
        for r in range(world):
            ds.rank = r
            per_rank = [int(y) for w in range(workers)
                        for _, y in ds.worker_stream(w, workers)]
            assert len(per_rank) == len(ds)
            got += per_rank
        if pad:
            assert sorted(set(got)) == list(range(12)) and len(got) == -(-12 // world) * world
        else:
            assert sorted(got) == sorted(set(got)) and len(got) == 12 // world * world
        orders.append(got)
    assert orders[0] != orders[1]
    ds.set_epoch(0)
    ds.rank = 0
    assert [int(y) for w in range(workers) for _, y in ds.worker_stream(w, workers)] == \
        orders[0][:len(ds)]


def test_torch_dataloader_kept_batches(files):
    tf = T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.ToTensor()])
    ds = ParquetDataset(files, tf, seed=2)
    by_label = {}
    for workers in (0, 2):
        ds.set_epoch(3)
        loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=workers)
        batches = [(x.clone(), y) for x, y in loader]  # kept across the whole epoch
        labels = torch.cat([y for _, y in batches]).tolist()
        assert sorted(labels) == list(range(12))
        images = torch.cat([x for x, _ in batches])
        got = {y: images[k] for k, y in enumerate(labels)}
        if by_label:  # same epoch and seed: the same pixels whichever worker read it
            assert all(torch.equal(got[y], by_label[y]) for y in got)
        by_label = got
    ds.set_epoch(4)
    other = torch.cat([x for x, _ in torch.utils.data.DataLoader(ds, batch_size=12)])
    assert not torch.equal(other, torch.stack([by_label[y] for y in range(12)]))


def test_thread_backend(files):
    from turboloader.loader import DataLoader

    ds = ParquetDataset(files, T.Compose([T.Resize(20), T.CenterCrop(16), T.ToTensor()]))
    loader = DataLoader(ds, batch_size=4, num_workers=2, backend="threads")
    labels = torch.cat([y for _, y in loader]).tolist()
    assert sorted(labels) == list(range(12))


def test_resume_mid_epoch(files):
    tf = T.Compose([T.RandomResizedCrop(16), T.ToTensor()])
    ds = ParquetDataset(files, tf, seed=1)
    ds.set_epoch(2)
    loader = torch.utils.data.DataLoader(ds, batch_size=3)
    it = iter(loader)
    [next(it) for _ in range(2)]
    state = ds.state_dict(batches=2, batch_size=3, num_workers=0)
    rest = list(it)
    ds2 = ParquetDataset(files, tf, seed=1)
    ds2.load_state_dict(state)
    resumed = list(torch.utils.data.DataLoader(ds2, batch_size=3))
    assert [y.tolist() for _, y in resumed] == [y.tolist() for _, y in rest]
    assert all(torch.equal(a[0], b[0]) for a, b in zip(resumed, rest))
    with pytest.raises(ValueError, match="other data"):
        ParquetDataset(files[:1], tf, seed=1).load_state_dict(state)


def test_corrupt_and_null_images(tmp_path):
    path = _write(tmp_path / "c.parquet", range(10), corrupt={2}, nulls={6}, struct=True)
    with pytest.raises(DecodeError) as info:
        list(ParquetDataset(path, size_of, shuffle=False, key_column="id"))
    assert any("img-0002" in n and "ParquetDataset" in n for n in info.value.__notes__)
    nulls = _write(tmp_path / "n.parquet", range(4), nulls={1}, struct=True)
    with pytest.raises(SampleError, match="no image bytes.*1.jpg"):
        list(ParquetDataset(nulls, size_of, shuffle=False))
    ds = ParquetDataset(path, size_of, shuffle=False, on_error="skip", max_failures=2,
                        key_column="id")
    labels = _labels(ds)
    assert len(labels) == 10 and set(labels) == set(range(10)) - {2, 6}
    st = ds.stats()
    assert st["failures"] == 2
    assert sorted(s["key"] for s in st["skipped"]) == ["img-0002", "img-0006"]
    assert {s["reason"].split(":")[0] for s in st["skipped"]} == {"DecodeError", "SampleError"}
    with pytest.raises(FailureBudgetExceeded):
        list(ParquetDataset(path, size_of, on_error="skip", max_failures=1))


def test_bad_files_and_columns(tmp_path, files):
    with pytest.raises(FormatError, match="no column 'img'"):
        ParquetDataset(files, image_column="img")
    with pytest.raises(FormatError, match="no column 'y'"):
        ParquetDataset(files, label_column="y")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all" * 10)
    with pytest.raises(FormatError, match="bad.parquet"):
        ParquetDataset(str(bad))
    with pytest.raises(FileNotFoundError):
        ParquetDataset(str(tmp_path / "missing-*.parquet"))
    ds = ParquetDataset(files, size_of, label_column=None, shuffle=False)
    assert _labels(ds) == [-1] * 12


def test_hugging_face_datasets(tmp_path):
    with hf_datasets() as datasets:
        _check_hugging_face(datasets, tmp_path)


def _check_hugging_face(datasets, tmp_path):
    feats = datasets.Features({"image": datasets.Image(),
                               "label": datasets.ClassLabel(names=["cat", "dog", "eel"])})
    hf = datasets.Dataset.from_dict(
        {"image": [{"bytes": jpeg(i), "path": None} for i in range(9)],
         "label": [i % 3 for i in range(9)]}, features=feats)
    # its Parquet files (as on the hub): the Image() struct column, class names from metadata
    hf.to_parquet(str(tmp_path / "hf.parquet"), batch_size=4)
    ds = ParquetDataset(str(tmp_path / "hf.parquet"), size_of, shuffle=False)
    assert ds.classes == ["cat", "dog", "eel"] and ds.class_to_idx["eel"] == 2
    assert _labels(ds) == [i % 3 for i in range(9)]
    # with fields= naming the label column, or not, the class names are the same
    for fields in (("image", "label", "__key__"), ("image", "__key__")):
        ds = ParquetDataset(str(tmp_path / "hf.parquet"), size_of, shuffle=False, fields=fields)
        assert ds.classes == ["cat", "dog", "eel"] and ds.class_to_idx["eel"] == 2, fields
    assert [s[1] for s in ParquetDataset(str(tmp_path / "hf.parquet"), size_of, shuffle=False,
                                         fields=("image", "label"))] == [i % 3 for i in range(9)]
    t = tvt.Compose([tvt.Resize(20), tvt.ToTensor()])
    ref = [t(hf[i]["image"].convert("RGB")) for i in range(9)]
    ds = ParquetDataset(str(tmp_path / "hf.parquet"), t, shuffle=False)
    assert all((a - b).abs().mean() < 1 / 255 for (a, _), b in zip(ds, ref))
    # the datasets.Dataset itself, in memory and memory-mapped from disk, under workers
    hf.save_to_disk(str(tmp_path / "saved"))
    for src in (hf, datasets.load_from_disk(str(tmp_path / "saved"))):
        ds = ParquetDataset.from_hf(src, t, rows_per_shard=4, seed=1)
        assert ds.shard_sizes == [4, 4, 1] and ds.classes == ["cat", "dog", "eel"]
        ds.set_epoch(0)
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
        got = list(loader)
        assert sorted(int(y) for _, y in got) == sorted(i % 3 for i in range(9))
        assert len(got) == 9
    # its Arrow cache files on disk, memory-mapped (no datasets import needed to read them)
    arrow = sorted(str(p) for p in (tmp_path / "saved").glob("*.arrow"))
    ds = ParquetDataset(arrow, size_of, rows_per_shard=4, shuffle=False)
    assert ds.shard_sizes == [4, 4, 1] and ds.classes == ["cat", "dog", "eel"]
    assert _labels(ds) == [i % 3 for i in range(9)]
    assert ParquetDataset.from_hf(hf.select(range(2, 6)), size_of, shuffle=False).num_samples == 4
    with pytest.raises(ValueError, match="flatten_indices"):
        ParquetDataset.from_hf(hf.shuffle(seed=0))
    with pytest.raises(TypeError):
        ParquetDataset.from_hf([1, 2, 3])
    # local images kept by path (bytes null) are read from their files
    img_dir = tmp_path / "imgs"
    img_dir.mkdir()
    for i in range(3):
        (img_dir / f"{i}.jpg").write_bytes(jpeg(i))
    by_path = datasets.Dataset.from_dict(
        {"image": [str(img_dir / f"{i}.jpg") for i in range(3)], "label": [0, 1, 2]}
    ).cast_column("image", datasets.Image())
    ds = ParquetDataset.from_hf(by_path, size_of, shuffle=False)
    assert _labels(ds) == [0, 1, 2] and all(x.tolist() == [64, 48] for x, _ in ds)


def test_fsspec_filesystems(files):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    with open(files[0], "rb") as f:
        fs.pipe("/bucket/a-0.parquet", f.read())
    with open(files[1], "rb") as f:
        fs.pipe("/bucket/a-1.parquet", f.read())
    # a URL pyarrow.fs does not know goes through fsspec; braces expand, globs do not
    ds = ParquetDataset("memory://bucket/a-{0..1}.parquet", size_of, shuffle=False)
    assert ds.shard_sizes == [3, 3, 1, 3, 2] and _labels(ds) == list(range(12))
    ds = ParquetDataset("/bucket/a-1.parquet", size_of, shuffle=False, filesystem=fs)
    assert _labels(ds) == list(range(7, 12))
    with pytest.raises(FileNotFoundError):
        ParquetDataset("memory://bucket/missing.parquet")


@pytest.mark.parametrize("how", ["torch", "batched", "threads"])
def test_kept_batches_stay_intact(files, how):
    """Batches the consumer keeps are never overwritten by recycled buffers, and equal the
    samples read one by one in the main process (same epoch, seed and global index)."""
    from turboloader.loader import DataLoader

    tf = T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.ToTensor()])
    ds = ParquetDataset(files, tf, seed=5)
    if how == "torch":
        dl = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=1,
                                         persistent_workers=True)
    elif how == "batched":
        dl = torch.utils.data.DataLoader(ds.batched(4), batch_size=None, num_workers=1,
                                         persistent_workers=True)
    else:
        dl = DataLoader(ds, batch_size=4, num_workers=2, backend="threads")
    def begin(epoch):
        ds.set_epoch(epoch)
        if how == "threads":
            dl.set_epoch(epoch)  # the thread backend's own epochs count on otherwise

    for epoch in (0, 1):
        begin(epoch)
        copies = [(x.clone(), y.clone()) for x, y in dl]  # dropped at once: recycled
        begin(epoch)
        kept = list(dl)  # every batch kept: none may be overwritten
        e = ds.epoch
        assert sum(len(y) for _, y in kept) == sum(len(y) for _, y in copies) == 12
        ds.set_epoch(e)
        ref = {int(y): x.clone() for x, y in ds}
        for (a, la), (b, lb) in zip(kept, copies):
            assert torch.equal(la, lb) and torch.equal(a, b)
            for r, y in enumerate(la.tolist()):
                assert torch.equal(a[r], ref[y])


def test_arrow_ipc_files(tmp_path):
    table = pa.table({"image": [jpeg(i) for i in range(5)], "label": list(range(5))})
    with pa.ipc.new_file(str(tmp_path / "f.arrow"), table.schema) as w:  # the file format
        w.write_table(table)
    with pa.ipc.new_stream(str(tmp_path / "s.arrow"), table.schema) as w:  # the stream format
        w.write_table(table)
    ds = ParquetDataset([str(tmp_path / "f.arrow"), str(tmp_path / "s.arrow")], size_of,
                        rows_per_shard=2, shuffle=False)
    assert ds.shard_sizes == [2, 2, 1, 2, 2, 1]
    assert _labels(ds) == list(range(5)) * 2
    (tmp_path / "bad.arrow").write_bytes(b"nope" * 100)
    with pytest.raises(FormatError, match="Arrow"):
        ParquetDataset(str(tmp_path / "bad.arrow"))


def test_parquet_shards_follow_the_declared_shard_protocols(files):
    """ParquetShards / ColumnShard are what TarDataset's stream declares it reads
    (io.shards.ShardSource, IndexedShard), and an opened row group reads as its rows."""
    from turboloader.io.shards import IndexedShard, Shard, ShardSource

    ds = ParquetDataset(files, size_of, shuffle=False)
    source = ds._io
    assert isinstance(source, ShardSource)
    shard = source.open(ds.urls[0])
    try:
        assert isinstance(shard, Shard) and isinstance(shard, IndexedShard)
        assert shard.random_access and len(shard) == source.count(ds.urls[0])
        size = shard.image_size(0)
        buf = bytearray(size)
        assert shard.read_image_into(0, buf) == size and bytes(buf) == jpeg(0)
    finally:
        shard.close()
