"""Every byte source goes through the one guarded reader (``turboloader.io.files``): mask and
boxes files a manifest names, Hugging Face ``{bytes: null, path}`` rows, ``.tar.gz`` members.
A FIFO or a device is a typed error at once (never a hang, never a read until memory runs
out); a file or member over the member-size limit is a typed error or a counted skip that
names it, and is never read whole. Anything that could hang runs in a child interpreter
(one for the module: :class:`helpers.isolated.Interpreter`) with a timeout."""

import io
import json
import os

import numpy as np
import pytest
import torch
from helpers.isolated import Interpreter
from helpers.shards import jpeg, size_of, write_tar
from PIL import Image

from turboloader import TarDataset
from turboloader.errors import SampleError, UnreadableFileError

TIMEOUT = 120  # generous on a loaded 2-core machine; a hang is "forever"
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this OS")


@pytest.fixture
def limit(monkeypatch):
    """Set the member-size limit (the attribute every reader consults at call time)."""
    def set_limit(n):
        monkeypatch.setattr("turboloader.io.files.MAX_FILE_BYTES", n)
        return n
    return set_limit


def _png(arr):
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


def _manifest(root, mask_names, boxes_names=None):
    """A JSON Lines manifest of images with a ``mask`` (and ``boxes``) column."""
    rows = []
    for i, m in enumerate(mask_names):
        (root / f"{i}.jpg").write_bytes(jpeg(i))
        row = {"path": f"{i}.jpg", "mask": m}
        if boxes_names is not None:
            row["boxes"] = boxes_names[i]
        rows.append(row)
    path = root / "list.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def isolated():
    """One child interpreter for the module's cases that could hang: a case past ``TIMEOUT``
    fails, its child is killed, and the next case gets a new one (a fresh interpreter per
    case imported torch each time: seconds of CPU)."""
    with Interpreter() as it:
        yield it


@needs_fifo
@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_manifest_mask_naming_a_fifo_or_device_is_a_typed_error(isolated, tmp_path, kind):
    """finding 8: a ``MaskField`` column naming a FIFO hung forever, ``/dev/zero`` read until
    MemoryError; both are UnreadableFileError naming the row's key and the path, and
    ``on_error="skip"`` counts them and delivers the rest."""
    (tmp_path / "0.png").write_bytes(_png(np.zeros((48, 64), np.uint8)))
    bad = tmp_path / "bad.png"
    if kind == "fifo":
        os.mkfifo(bad)
    else:
        os.symlink("/dev/zero", bad)
    path = _manifest(tmp_path, ["0.png", "bad.png", "0.png"])
    out = isolated.run(f"""
        from turboloader import transforms as T
        from turboloader.data import ManifestDataset, MaskField
        from turboloader.errors import UnreadableFileError
        pipe = T.Compose([T.Resize(32), T.ToTensor()])
        ds = ManifestDataset({str(path)!r}, transform=pipe, fields=("path", MaskField("mask")))
        assert ds[0][1].shape == (32, 42), ds[0][1].shape
        try:
            ds[1]
        except UnreadableFileError as exc:
            print("TYPED", exc)
        ds = ManifestDataset({str(path)!r}, transform=pipe, fields=("path", MaskField("mask")),
                             on_error="skip", max_failures=1)
        got = [ds[i] for i in range(3)]
        print("SKIPPED", ds.stats()["failures"], len(got))
    """, timeout=TIMEOUT)
    assert "TYPED" in out and "'1.jpg'" in out and str(bad) in out
    assert "not a regular file" in out
    assert "SKIPPED 1 3" in out


def test_manifest_boxes_file_over_the_limit(tmp_path, limit):
    """finding 8: a boxes ``.json`` file a manifest names is read with the member-size limit."""
    from turboloader import transforms as T
    from turboloader.data import BoxesField, ManifestDataset

    small = json.dumps([[1, 2, 10, 12]])
    big = json.dumps([[1, 2, 10, 12]] * 400)
    (tmp_path / "small.json").write_text(small)
    (tmp_path / "big.json").write_text(big)
    limit(len(big) - 1)
    path = _manifest(tmp_path, ["", ""], ["small.json", "big.json"])
    ds = ManifestDataset(path, transform=T.Compose([T.Resize(48), T.ToTensor()]),
                         fields=("path", BoxesField("boxes")))
    assert ds[0][1].tolist() == [[1.0, 2.0, 10.0, 12.0]]  # resize to the same size: as stored
    with pytest.raises(UnreadableFileError, match=r"'1\.jpg'.*big\.json.*over the member-size"):
        ds[1]


# -- Hugging Face Image() rows stored by path ----------------------------------------------------


def _hf_parquet(path, images):
    """A Parquet file with Hugging Face's ``struct<bytes, path>`` image column: ``images`` are
    ``(bytes or None, path or None)``."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    col = pa.array([{"bytes": b, "path": p} for b, p in images],
                   pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    pq.write_table(pa.table({"image": col, "label": pa.array(range(len(images)), pa.int64())}),
                   path, row_group_size=2)
    return str(path)


def test_hf_path_rows_are_read_through_the_guarded_reader(tmp_path, limit):
    """finding 9: a ``{bytes: null, path}`` row is read from a regular local file (Pillow is
    the oracle), and one over the member-size limit is an UnreadableFileError naming the
    row's path, not a read of the whole file; ``on_error="skip"`` counts it."""
    from turboloader import ParquetDataset

    for i in range(4):
        (tmp_path / f"{i}.png").write_bytes(jpeg(i, fmt="PNG"))
    big = tmp_path / "big.png"
    big.write_bytes(jpeg(9, fmt="PNG") + b"\0" * 4000)
    path = _hf_parquet(tmp_path / "hf.parquet", [
        (jpeg(0), None), (None, str(tmp_path / "1.png")), (None, str(big)),
        (None, str(tmp_path / "3.png"))])
    limit(big.stat().st_size - 1)
    ds = ParquetDataset(path, shuffle=False)
    it = iter(ds)
    for i in (0, 1):
        img, y = next(it)
        ref = Image.open(io.BytesIO(jpeg(i) if i == 0 else jpeg(i, fmt="PNG"))).convert("RGB")
        assert y == i and np.array_equal(np.asarray(img), np.asarray(ref))
    with pytest.raises(UnreadableFileError, match=r"big\.png.*over the member-size limit"):
        next(it)
    ds = ParquetDataset(path, size_of, shuffle=False, on_error="skip", max_failures=1)
    got = [int(y) for _, y in ds]  # the failed row is replaced at the end of the pass
    assert got[:3] == [0, 1, 3] and len(got) == 4 and got[3] in (0, 1, 3)
    assert ds.stats()["failures"] == 1


@needs_fifo
def test_hf_path_row_naming_a_fifo(isolated, tmp_path):
    """finding 9: a row whose path is a FIFO is refused at once (UnreadableFileError),
    never opened blocking."""
    pytest.importorskip("pyarrow")
    fifo = tmp_path / "fifo.png"
    os.mkfifo(fifo)
    path = _hf_parquet(tmp_path / "hf.parquet", [(jpeg(0), None), (None, str(fifo))])
    out = isolated.run(f"""
        from turboloader import ParquetDataset
        from turboloader.errors import UnreadableFileError
        it = iter(ParquetDataset({path!r}, shuffle=False))
        next(it)
        try:
            next(it)
        except UnreadableFileError as exc:
            print("TYPED", exc)
    """, timeout=TIMEOUT)
    assert "TYPED" in out and "fifo.png" in out
    assert "not a regular file" in out


# -- .tar.gz members ---------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".tar.gz", ".tar"])
def test_archive_member_over_the_limit_is_a_counted_skip(tmp_path, limit, suffix):
    """finding 9: a ``.tar.gz`` member over the member-size limit was read whole (a 9 MB
    archive holding a 2 GiB member: MemoryError). Its header's size is checked before the
    read: a SampleError naming the member and the limit, or a counted skip; every other
    sample exactly once. The plain ``.tar`` reader applies the same limit."""
    members = []
    for i in range(6):
        data = jpeg(i) + (b"\0" * 20000 if i == 3 else b"")  # bytes after EOI still decode
        members += [(f"{i:03d}.jpg", data), (f"{i:03d}.cls", str(i).encode())]
    path = write_tar(tmp_path / f"a{suffix}", members)
    limit(len(jpeg(3)) + 10000)
    with pytest.raises(SampleError, match=r"'003\.jpg'.*over the member-size limit") as info:
        list(TarDataset(path, size_of, shuffle=False))
    assert any("a" + suffix in n for n in info.value.__notes__)
    ds = TarDataset(path, size_of, shuffle=False, on_error="skip", max_failures=1)
    got = [int(y) for _, y in ds]  # the failed sample is replaced at the end of the pass
    assert got[:5] == [0, 1, 2, 4, 5] and len(got) == 6 and got[5] != 3
    st = ds.stats()
    assert st["failures"] == 1 and st["skipped"][0]["key"] == "003"


def test_hf_mask_stored_by_path(tmp_path, limit):
    """A ``MaskField`` column of Hugging Face ``Image()`` values stored by path (null bytes)
    is read from the path through the guarded reader, as the image column is: equal to the
    same mask stored as bytes; a path over the member-size limit is an UnreadableFileError
    naming the row's key."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from turboloader import ParquetDataset
    from turboloader import transforms as T
    from turboloader.data import MaskField

    mask = np.zeros((48, 64), np.uint8)
    mask[10:30, 5:40] = 3
    png = _png(mask)
    (tmp_path / "m.png").write_bytes(png)
    (tmp_path / "big.png").write_bytes(png + b"\0" * 4000)
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    masks = [{"bytes": png, "path": None}, {"bytes": None, "path": str(tmp_path / "m.png")},
             {"bytes": None, "path": str(tmp_path / "big.png")}]
    pq.write_table(pa.table({"image": [jpeg(i) for i in range(3)],
                             "mask": pa.array(masks, struct), "id": ["a", "b", "c"]}),
                   str(tmp_path / "m.parquet"))
    limit(len(png) + 100)
    ds = ParquetDataset(str(tmp_path / "m.parquet"), T.Compose([T.Resize(24), T.ToTensor()]),
                        shuffle=False, key_column="id", fields=("image", MaskField("mask")))
    it = iter(ds)
    (_, by_bytes), (_, by_path) = next(it), next(it)
    assert by_bytes.shape == (24, 32) and torch.equal(by_bytes, by_path)
    with pytest.raises(UnreadableFileError, match=r"'c'.*big\.png.*over the member-size"):
        next(it)


@pytest.mark.parametrize("suffix", [".tar", ".tar.gz"])
def test_mask_member_over_the_limit(tmp_path, limit, suffix):
    """A ``MaskField`` member (read whole, besides the image) is held to the member-size
    limit too, in a plain and a compressed shard: a SampleError naming the member."""
    from turboloader import transforms as T
    from turboloader.data import MaskField

    small = _png(np.zeros((48, 64), np.uint8))
    members = [("a.jpg", jpeg(0)), ("a.seg.png", small),
               ("b.jpg", jpeg(1)), ("b.seg.png", small + b"\0" * 50000)]
    path = write_tar(tmp_path / f"m{suffix}", members)
    limit(max(len(small), len(jpeg(0)), len(jpeg(1))) + 1000)
    it = iter(TarDataset(path, T.Compose([T.Resize(24), T.ToTensor()]), shuffle=False,
                         fields=("jpg", MaskField("seg.png"))))
    assert next(it)[1].shape == (24, 32)
    with pytest.raises(SampleError, match=r"'b\.seg\.png'.*over the member-size limit"):
        next(it)
