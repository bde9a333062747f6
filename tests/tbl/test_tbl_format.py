"""TBL format: round trips against the written bytes, corruption of every part, interrupted
writes, zero-copy and threaded reads."""

import io
import os
import pickle
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from turboloader.errors import FormatError, TurboLoaderError
from turboloader.io.tbl import (ENTRY_DTYPE, FOOTER_SIZE, Codec, Compression, TBLFile,
                             TBLWriter, write_tbl)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def jpegs():
    from turboloader.tools.synthetic import synthetic_jpegs

    return synthetic_jpegs(8, seed=11)


def _png(h, w, seed=0):
    img = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "PNG")
    return buf.getvalue()


def _write(path, jpegs, **kw):
    pixels = (np.arange(40 * 30 * 3) % 251).astype(np.uint8).reshape(40, 30, 3)
    with TBLWriter(path, **kw) as w:
        for i, (data, label) in enumerate(jpegs):
            w.write(data, key=f"cls{label}/img{i:03d}", label=label)
        w.write(_png(17, 23), key="png/one", label=3)
        w.write_array(pixels, key="raw/one", label=None)
    return pixels


def test_round_trip_bytes_labels_keys_sizes(tmp_path, jpegs):
    path = tmp_path / "a.tbl"
    pixels = _write(path, jpegs, metadata={"classes": ["a", "b"]})
    with TBLFile(path) as f:
        assert len(f) == len(jpegs) + 2
        assert f.metadata["classes"] == ["a", "b"]
        for i, (data, label) in enumerate(jpegs):
            rec = f.record(i)
            assert bytes(rec.data) == data and rec.label == label == f.labels[i]
            assert rec.key == f.keys[i] == f"cls{label}/img{i:03d}"
            w, h = Image.open(io.BytesIO(data)).size  # oracle: Pillow's header
            assert (rec.width, rec.height, rec.codec) == (w, h, Codec.JPEG)
            assert f.index_of(rec.key) == i
        png = f.record(-2)
        assert (png.codec, png.width, png.height, png.label) == (Codec.PNG, 23, 17, 3)
        assert bytes(png.data) == _png(17, 23)
        raw = f.record(-1)
        assert raw.codec == Codec.RAW and raw.label is None and f.labels[-1] == -1
        np.testing.assert_array_equal(raw.array(), pixels)
        assert f.index["compression"][-1] == Compression.LZ4  # raw pixels compress
        assert (f.index["compression"][:-1] == Compression.NONE).all()  # JPEG/PNG stored


def test_uncompressed_reads_are_zero_copy_and_survive_close(tmp_path, jpegs):
    path = tmp_path / "a.tbl"
    _write(path, jpegs)
    f = TBLFile(path)
    view = f[0]
    assert isinstance(view, memoryview) and view.readonly
    f.close()
    assert bytes(view) == jpegs[0][0]  # still mapped while the view lives
    with pytest.raises(ValueError, match="closed"):
        f[1]
    assert len(f.keys) == len(jpegs) + 2  # the index stays readable


def test_compression_modes(tmp_path, jpegs):
    for mode in ("none", "lz4"):
        path = tmp_path / f"{mode}.tbl"
        pixels = _write(path, jpegs, compression=mode)
        with TBLFile(path) as f:
            comp = f.index["compression"]
            if mode == "none":
                assert (comp == Compression.NONE).all()
            else:  # JPEG does not shrink, so it is kept as is even under "lz4"
                assert comp[-1] == Compression.LZ4
                assert (f.index["size"] <= f.index["raw_size"]).all()
            np.testing.assert_array_equal(f.record(-1).array(), pixels)
            assert bytes(f[0]) == jpegs[0][0]


def test_empty_file_is_valid_and_errors_on_access(tmp_path):
    path = tmp_path / "empty.tbl"
    assert write_tbl(path, []) == 0
    with TBLFile(path) as f:
        assert len(f) == 0 and f.keys == []
        with pytest.raises(IndexError):
            f[0]
        with pytest.raises(KeyError, match="nope"):
            f["nope"]


def test_pickle_reopens(tmp_path, jpegs):
    path = tmp_path / "a.tbl"
    _write(path, jpegs)
    with TBLFile(path) as f:
        g = pickle.loads(pickle.dumps(f))
    assert bytes(g[3]) == jpegs[3][0]
    g.close()


def test_writer_argument_errors(tmp_path, jpegs):
    path = tmp_path / "a.tbl"
    with TBLWriter(path) as w:
        with pytest.raises(TypeError):
            w.write(jpegs[0][0], key=5)
        with pytest.raises(TypeError):
            w.write(jpegs[0][0], key="k", label=True)
        with pytest.raises(ValueError, match="raw"):
            w.write(b"\0" * 10, key="k", codec="raw", width=2, height=2)
        with pytest.raises(TurboLoaderError):  # not an image: the header cannot be read
            w.write(b"\xff\xd8\xff garbage", key="k")
        assert len(w) == 0
    with pytest.raises(FileExistsError):
        TBLWriter(path)
    with pytest.raises(ValueError, match="compression"):
        TBLWriter(tmp_path / "b.tbl", compression="zstd")


# -- corruption -----------------------------------------------------------------------------


def _flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


def _rewrite_index(path, edit):
    """Apply ``edit`` to the index entries and recompute the index and footer CRCs."""
    data = bytearray(path.read_bytes())
    footer = data[-FOOTER_SIZE:]
    index_offset, n, keys_size, meta_size = struct.unpack_from("<QQQQ", footer)
    table = np.frombuffer(bytes(data[index_offset:index_offset + n * 48]), ENTRY_DTYPE).copy()
    edit(table)
    data[index_offset:index_offset + n * 48] = table.tobytes()
    end = len(data) - FOOTER_SIZE
    struct.pack_into("<I", data, end + 32, zlib.crc32(bytes(data[index_offset:end])))
    struct.pack_into("<I", data, end + 52, zlib.crc32(bytes(data[end:end + 52])))
    path.write_bytes(bytes(data))


@pytest.fixture
def tbl(tmp_path, jpegs):
    path = tmp_path / "c.tbl"
    _write(path, jpegs)
    return path


def test_bad_magic(tbl):
    _flip(tbl, 1)
    with pytest.raises(FormatError, match="not a TBL file") as e:
        TBLFile(tbl)
    assert str(tbl) in "".join(e.value.__notes__)


def test_damaged_header(tbl):
    _flip(tbl, 20)
    with pytest.raises(FormatError, match="header checksum"):
        TBLFile(tbl)


def test_newer_major_version(tbl):
    data = bytearray(tbl.read_bytes())
    struct.pack_into("<H", data, 8, 2)
    struct.pack_into("<I", data, 60, zlib.crc32(bytes(data[:60])))
    tbl.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="unsupported TBL version 2.0"):
        TBLFile(tbl)


@pytest.mark.parametrize("cut", [1, FOOTER_SIZE, 1000])
def test_truncated_file_is_incomplete(tbl, cut):
    data = tbl.read_bytes()
    tbl.write_bytes(data[:-cut])
    with pytest.raises(FormatError, match="incomplete|footer"):
        TBLFile(tbl)


def test_damaged_footer(tbl):
    size = tbl.stat().st_size
    _flip(tbl, size - FOOTER_SIZE + 3)
    with pytest.raises(FormatError, match="footer checksum"):
        TBLFile(tbl)


def test_damaged_index(tbl, jpegs):
    with TBLFile(tbl) as f:
        index_offset = int(f.index["offset"][-1] + f.index["size"][-1])
    _flip(tbl, index_offset + 8 + 48 * 2)  # inside the table, past the 8-byte alignment pad
    with pytest.raises(FormatError, match="index checksum"):
        TBLFile(tbl)


def test_index_entry_out_of_bounds_with_valid_checksums(tbl):
    def edit(table):
        table["size"][1] = 1 << 31

    _rewrite_index(tbl, edit)
    with pytest.raises(FormatError, match="index entry 1 is invalid"):
        TBLFile(tbl)


def test_damaged_record_names_the_record(tbl, jpegs):
    with TBLFile(tbl) as f:
        offset = int(f.index["offset"][2])
    _flip(tbl, offset + 500)
    with TBLFile(tbl) as f:
        assert bytes(f[1]) == jpegs[1][0]  # neighbours are fine
        with pytest.raises(FormatError, match=r"record 2 \(key 'cls\d/img002', offset \d+\): "
                                              r"CRC-32 mismatch") as e:
            f[2]
        assert str(tbl) in "".join(e.value.__notes__)
    with TBLFile(tbl, check_crc=False) as f:
        assert bytes(f[2]) != jpegs[2][0]  # unchecked: the damaged bytes come back


def test_damaged_compressed_record(tbl):
    with TBLFile(tbl) as f:
        offset, size = int(f.index["offset"][-1]), int(f.index["size"][-1])
    _flip(tbl, offset + size // 2)
    with TBLFile(tbl) as f:
        with pytest.raises(FormatError, match="record 9 .*CRC-32"):
            f.record(-1)


def test_tiny_and_missing_files(tmp_path):
    (tmp_path / "zero.tbl").write_bytes(b"")
    with pytest.raises(FormatError, match="not a TBL file"):
        TBLFile(tmp_path / "zero.tbl")
    (tmp_path / "text.tbl").write_bytes(b"hello world\n" * 20)
    with pytest.raises(FormatError, match="not a TBL file"):
        TBLFile(tmp_path / "text.tbl")
    with pytest.raises(FileNotFoundError):
        TBLFile(tmp_path / "missing.tbl")


# -- interrupted writes ---------------------------------------------------------------------


def test_exception_inside_writer_leaves_nothing(tmp_path, jpegs):
    path = tmp_path / "x.tbl"
    with pytest.raises(RuntimeError, match="boom"):
        with TBLWriter(path) as w:
            w.write(jpegs[0][0], key="a", label=0)
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_failed_overwrite_keeps_the_old_file(tmp_path, jpegs):
    path = tmp_path / "x.tbl"
    write_tbl(path, jpegs[:2])
    before = path.read_bytes()
    with pytest.raises(RuntimeError):
        with TBLWriter(path, overwrite=True) as w:
            w.write(jpegs[3][0], key="a", label=0)
            raise RuntimeError("boom")
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["x.tbl"]


def test_killed_writer_leaves_no_valid_looking_file(tmp_path):
    path = tmp_path / "killed.tbl"
    script = textwrap.dedent(f"""
        import sys
        from turboloader.io.tbl import TBLWriter
        from turboloader.tools.synthetic import synthetic_jpegs
        data = synthetic_jpegs(1, seed=0)[0][0]
        w = TBLWriter({str(path)!r})
        for i in range(100000):
            w.write(data, key=str(i), label=0, width=10, height=10)
            if i == 200:
                w._file.flush()
                print("written", flush=True)
        """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.stdout.readline().strip() == "written"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert not path.exists()
    leftovers = list(tmp_path.iterdir())
    assert len(leftovers) == 1 and leftovers[0].name.startswith(".killed.tbl.tmp-")
    assert leftovers[0].stat().st_size > 200 * 1000  # it was mid-write
    with pytest.raises(FormatError, match="incomplete"):
        TBLFile(leftovers[0])


# -- threads --------------------------------------------------------------------------------


def test_threaded_reads(tbl, jpegs):
    errors = []
    with TBLFile(tbl) as f:
        def reader(seed):
            rng = np.random.default_rng(seed)
            for _ in range(300):
                i = int(rng.integers(len(jpegs)))
                if bytes(f[i]) != jpegs[i][0]:
                    errors.append(i)

        threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
