"""TarIndex and the native TAR kernel against the stdlib ``tarfile`` oracle."""

import io
import random
import re
import sys
import tarfile
import threading
import time

import numpy as np
import pytest

from turboloader import TarFormatError, TarIndex

BLOCK = 512
FORMATS = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}


# -- helpers ----------------------------------------------------------------------------

def _payload(i, n):
    return bytes((i * 31 + k * 7) & 0xFF for k in range(n))


def _write_tar(path, members, fmt, **kwargs):
    """members: (name, type, size or data, linkname). Returns the archive bytes."""
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=fmt, **kwargs) as tf:
        for name, typ, data, linkname in members:
            ti = tarfile.TarInfo(name)
            ti.type = typ
            ti.linkname = linkname
            if data is not None:
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
            else:
                tf.addfile(ti)
    raw = bio.getvalue()
    path.write_bytes(raw)
    return raw


def _oracle(path):
    """Regular members per tarfile: (name, offset_data, size, bytes)."""
    with tarfile.open(path, "r:") as tf:
        return [(m.name, m.offset_data, m.size, tf.extractfile(m).read())
                for m in tf.getmembers() if m.isreg()]


def _ours(path):
    with TarIndex(path) as index:
        return [(name, int(o), int(s), bytes(index.member(i)))
                for i, (name, o, s) in enumerate(zip(index.names, index.offsets, index.sizes))]


def _raw_header(name, size, typ=b"0", *, prefix=b"", linkname=b"", magic=b"ustar\x0000",
                chksum=None):
    """A hand-made header block. ``size``: int (octal) or 12 raw bytes (e.g. base-256)."""
    h = bytearray(BLOCK)
    h[0:len(name)] = name
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = size if isinstance(size, bytes) else b"%011o\0" % size
    h[136:148] = b"00000000000\0"
    h[148:156] = b" " * 8
    h[156:157] = typ
    h[157:157 + len(linkname)] = linkname
    h[257:265] = magic
    h[345:345 + len(prefix)] = prefix
    if chksum is None:
        chksum = sum(h)
    h[148:156] = b"%06o\0 " % chksum
    return bytes(h)


def _pad(data):
    return data + b"\0" * (-len(data) % BLOCK)


def _pax(records, typ=b"x"):
    """An extended header (type x or g) plus its record blocks, records given as (key, value) bytes."""
    body = b""
    for key, value in records:
        rest = b" " + key + b"=" + value + b"\n"
        n = len(rest) + 1
        while len(str(n)) + len(rest) != n:
            n += 1
        body += str(n).encode() + rest
    return _raw_header(b"././@PaxHeader", len(body), typ) + _pad(body)


def _gnu_long(name, typ=b"L"):
    data = name + b"\0"
    return _raw_header(b"././@LongLink", len(data), typ, magic=b"ustar  \0") + _pad(data)


END = b"\0" * (2 * BLOCK)


def _error_offset(excinfo):
    exc = excinfo.value
    assert isinstance(exc, TarFormatError) and isinstance(exc, ValueError)
    m = re.search(r"byte offset (\d+)", str(exc))
    assert m, str(exc)
    return int(m.group(1))


def _assert_same_as_tarfile(path, min_members):
    expected = _oracle(path)
    assert len(expected) >= min_members  # the oracle really saw the members
    assert _ours(path) == expected
    return expected


# -- oracle tests -----------------------------------------------------------------------

def _rich_members(fmt):
    long_dir = "d" * 60
    members = [
        ("a.txt", tarfile.REGTYPE, b"hello", ""),
        ("empty.bin", tarfile.REGTYPE, b"", ""),
        ("dir", tarfile.DIRTYPE, None, ""),
        ("dir/exact512", tarfile.REGTYPE, _payload(1, 512), ""),
        ("dir/odd513", tarfile.REGTYPE, _payload(2, 513), ""),
        # > 100 chars: ustar splits it into prefix + name, GNU uses L, PAX a path record
        (f"{long_dir}/{'f' * 80}.jpg", tarfile.REGTYPE, _payload(3, 2000), ""),
        ("symlink", tarfile.SYMTYPE, None, "a.txt"),
        ("hardlink", tarfile.LNKTYPE, None, "a.txt"),
        ("fifo", tarfile.FIFOTYPE, None, ""),
        ("contiguous", tarfile.CONTTYPE, _payload(4, 700), ""),
        ("oldstyle", tarfile.AREGTYPE, _payload(5, 10), ""),
        ("oldstyle-dir/", tarfile.AREGTYPE, b"", ""),   # V7: a directory, not a member
        ("dup.txt", tarfile.REGTYPE, b"first", ""),
        ("dup.txt", tarfile.REGTYPE, b"second", ""),
        ("last.txt", tarfile.REGTYPE, _payload(6, 3), ""),
    ]
    if fmt != tarfile.USTAR_FORMAT:
        members += [
            ("n" * 150 + ".bin", tarfile.REGTYPE, _payload(7, 33), ""),   # no "/" to split at
            ("longlink", tarfile.SYMTYPE, None, "t" * 150),               # GNU K / PAX linkpath
        ]
    if fmt == tarfile.PAX_FORMAT:
        members += [("ünïcödé/画像-🐍.jpg", tarfile.REGTYPE, _payload(8, 99), "")]
    return members


@pytest.mark.parametrize("fmt_name", FORMATS)
def test_matches_tarfile(tmp_path, fmt_name):
    fmt = FORMATS[fmt_name]
    path = tmp_path / f"{fmt_name}.tar"
    kwargs = {"pax_headers": {"comment": "global header"}} if fmt == tarfile.PAX_FORMAT else {}
    raw = _write_tar(path, _rich_members(fmt), fmt, **kwargs)
    expected = _assert_same_as_tarfile(path, 10)
    names = [e[0] for e in expected]
    assert "dir" not in names and "symlink" not in names and "fifo" not in names
    assert "oldstyle" in names and "oldstyle-dir" not in names and "empty.bin" in names
    assert f"{'d' * 60}/{'f' * 80}.jpg" in names
    # the archive really exercises the format's long-name mechanism
    if fmt == tarfile.USTAR_FORMAT:
        assert b"d" * 60 + b"\0" in raw  # the ustar prefix field
    elif fmt == tarfile.GNU_FORMAT:
        assert b"././@LongLink" in raw and "n" * 150 + ".bin" in names
    else:
        assert b"././@PaxHeader" in raw and "ünïcödé/画像-🐍.jpg" in names


@pytest.mark.parametrize("fmt_name", FORMATS)
def test_many_members_grow_and_resume(tmp_path, fmt_name):
    # more members and name bytes than the first allocation holds, so the kernel reports
    # "full" (often with an L/x header pending) and is resumed
    fmt = FORMATS[fmt_name]
    members = [(f"{'p' * 70}/{i:05d}-{'q' * 60}.bin", tarfile.REGTYPE, _payload(i, i % 1100), "")
               for i in range(400)]
    members.append(("big/" + "z" * 20000 if fmt != tarfile.USTAR_FORMAT else "tail",
                    tarfile.REGTYPE, b"x", ""))
    path = tmp_path / "many.tar"
    _write_tar(path, members, fmt)
    _assert_same_as_tarfile(path, 401)


def test_base256_size(tmp_path):
    data = _payload(9, 777)
    size_field = b"\x80" + (777).to_bytes(11, "big")
    raw = _raw_header(b"b256.bin", size_field, magic=b"ustar  \0") + _pad(data)
    raw += _raw_header(b"after.txt", 2) + _pad(b"ok") + END
    path = tmp_path / "b256.tar"
    path.write_bytes(raw)
    expected = _assert_same_as_tarfile(path, 2)
    assert expected[0][:3] == ("b256.bin", BLOCK, 777)


def test_negative_base256_size_raises(tmp_path):
    raw = _raw_header(b"neg.bin", b"\xff" * 12) + END
    path = tmp_path / "neg.tar"
    path.write_bytes(raw)
    with pytest.raises(TarFormatError) as ei:
        TarIndex(path)
    assert _error_offset(ei) == 0


def test_pax_size_overrides_header_size(tmp_path):
    data = _payload(10, 1500)
    raw = _raw_header(b"before", 1) + _pad(b"b")
    raw += _pax([(b"size", b"1500"), (b"mtime", b"1.5")])
    raw += _raw_header(b"resized.bin", 3) + _pad(data)    # header claims 3 bytes
    raw += _raw_header(b"after", 1) + _pad(b"a") + END
    path = tmp_path / "paxsize.tar"
    path.write_bytes(raw)
    expected = _assert_same_as_tarfile(path, 3)
    assert expected[1][0] == "resized.bin" and expected[1][2] == 1500


def test_extended_header_precedence(tmp_path):
    # tarfile: the first extended header in a chain wins (L before x -> L name; x before L -> x path)
    raw = _gnu_long(b"from-L") + _pax([(b"path", b"from-x")])
    raw += _raw_header(b"header-name", 1, prefix=b"pre") + _pad(b"1")
    raw += _pax([(b"path", b"x-first/")]) + _gnu_long(b"L-second")
    raw += _raw_header(b"header-name2", 1) + _pad(b"2")
    raw += _raw_header(b"plain", 1, prefix=b"pre") + _pad(b"3")
    raw += _gnu_long(b"link-target", b"K") + _raw_header(b"kname", 1) + _pad(b"4") + END
    path = tmp_path / "chain.tar"
    path.write_bytes(raw)
    expected = _assert_same_as_tarfile(path, 4)
    assert [e[0] for e in expected] == ["from-L", "x-first", "pre/plain", "kname"]


def test_global_pax_header_skipped(tmp_path):
    raw = _pax([(b"comment", b"hi")], b"g") + _raw_header(b"m", 2) + _pad(b"mm") + END
    path = tmp_path / "g.tar"
    path.write_bytes(raw)
    _assert_same_as_tarfile(path, 1)


def test_links_with_nonzero_size_do_not_skip_data(tmp_path):
    # tarfile skips data blocks only for regular files and unknown types
    raw = _raw_header(b"hl", 5, b"1", linkname=b"x") + _raw_header(b"sl", 700, b"2", linkname=b"x")
    raw += _raw_header(b"d", 600, b"5") + _raw_header(b"real", 4) + _pad(b"real")
    raw += _raw_header(b"unknown", 600, b"V") + _pad(b"v" * 600)   # unknown type: data skipped
    raw += _raw_header(b"tail", 1) + _pad(b"t") + END
    path = tmp_path / "links.tar"
    path.write_bytes(raw)
    expected = _assert_same_as_tarfile(path, 2)
    assert [e[0] for e in expected] == ["real", "tail"]


def test_octal_fields_with_spaces_and_eof_at_block_boundary(tmp_path):
    h = bytearray(_raw_header(b"spaced", 0))
    h[124:136] = b"     12     "
    h[148:156] = b" " * 8
    h[148:156] = b" %06o " % sum(h)
    raw = bytes(h) + _pad(b"0123456789")      # no end-of-archive blocks at all
    path = tmp_path / "spaces.tar"
    path.write_bytes(raw)
    expected = _assert_same_as_tarfile(path, 1)
    assert expected[0][2] == 10


def test_signed_checksum_accepted(tmp_path):
    name = "é".encode() * 3   # bytes >= 0x80: signed and unsigned sums differ
    h = _raw_header(name, 1, chksum=None)
    signed = sum(b - 256 if b >= 128 else b for b in h[:148] + b" " * 8 + h[156:])
    raw = _raw_header(name, 1, chksum=signed) + _pad(b"s") + END
    path = tmp_path / "signed.tar"
    path.write_bytes(raw)
    assert _assert_same_as_tarfile(path, 1)[0][0] == "ééé"


def test_starts_with_end_block_is_empty(tmp_path):
    path = tmp_path / "zeros.tar"
    path.write_bytes(END + _raw_header(b"ignored", 1) + _pad(b"i"))
    assert _oracle(path) == []
    with TarIndex(path) as index:
        assert len(index) == 0 and index.names == [] and index.offsets.dtype == np.int64


# -- corruption -------------------------------------------------------------------------

@pytest.fixture
def plain_tar(tmp_path):
    members = [(f"m{i}.bin", tarfile.REGTYPE, _payload(i, 3000), "") for i in range(4)]
    path = tmp_path / "plain.tar"
    raw = _write_tar(path, members, tarfile.USTAR_FORMAT)
    with tarfile.open(path) as tf:
        headers = [m.offset for m in tf.getmembers()]
    assert headers == [0, 3584, 7168, 10752]
    return path, raw, headers


@pytest.mark.parametrize("which", [0, 2])
def test_bad_checksum(plain_tar, which):
    path, raw, headers = plain_tar
    bad = bytearray(raw)
    bad[headers[which] + 1] ^= 0x10   # a name byte
    path.write_bytes(bad)
    with pytest.raises(TarFormatError, match="checksum") as ei:
        TarIndex(path)
    assert _error_offset(ei) == headers[which]


def test_truncated_member_data(plain_tar):
    path, raw, headers = plain_tar
    path.write_bytes(raw[:headers[2] + BLOCK + 1000])
    with pytest.raises(TarFormatError, match="truncated member") as ei:
        TarIndex(path)
    assert _error_offset(ei) == headers[2]


def test_missing_padding_is_truncation(plain_tar):
    # tarfile also rejects this ("unexpected end of data")
    path, raw, headers = plain_tar
    path.write_bytes(raw[:headers[3] + BLOCK + 3000])
    with pytest.raises(tarfile.ReadError):
        _oracle(path)
    with pytest.raises(TarFormatError) as ei:
        TarIndex(path)
    assert _error_offset(ei) == headers[3]


def test_partial_header_block(plain_tar):
    path, raw, headers = plain_tar
    path.write_bytes(raw[:headers[1] + 100])
    with pytest.raises(TarFormatError, match="header block") as ei:
        TarIndex(path)
    assert _error_offset(ei) == headers[1]


def test_size_past_end(plain_tar):
    path, raw, headers = plain_tar
    h = bytearray(raw[headers[3]:headers[3] + BLOCK])
    h[124:136] = b"%011o\0" % (8 ** 11 - 1)
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    path.write_bytes(raw[:headers[3]] + bytes(h) + raw[headers[3] + BLOCK:])
    with pytest.raises(TarFormatError) as ei:
        TarIndex(path)
    assert _error_offset(ei) == headers[3]


def test_dangling_long_name(tmp_path):
    raw = _raw_header(b"ok", 1) + _pad(b"k") + _gnu_long(b"never-used" * 20)
    path = tmp_path / "dangling.tar"
    for tail in (b"", END):
        path.write_bytes(raw + tail)
        with pytest.raises(TarFormatError, match="not followed") as ei:
            TarIndex(path)
        assert _error_offset(ei) == 2 * BLOCK


@pytest.mark.parametrize("kind", ["S", "pax"])
def test_gnu_sparse_unsupported(tmp_path, kind):
    if kind == "S":
        body = _raw_header(b"sparse", 512, b"S", magic=b"ustar  \0") + b"\0" * BLOCK
    else:
        body = _pax([(b"GNU.sparse.major", b"1"), (b"GNU.sparse.minor", b"0")])
        body += _raw_header(b"sparse", 512) + b"\0" * BLOCK
    path = tmp_path / "sparse.tar"
    path.write_bytes(_raw_header(b"first", 1) + _pad(b"f") + body + END)
    with pytest.raises(TarFormatError, match="sparse") as ei:
        TarIndex(path)
    assert _error_offset(ei) == 2 * BLOCK


def test_bad_pax_records(tmp_path):
    path = tmp_path / "badpax.tar"
    for records in ([(b"size", b"12x")], [(b"size", b"-5")]):
        path.write_bytes(_raw_header(b"a", 1) + _pad(b"a") + _pax(records)
                         + _raw_header(b"b", 1) + _pad(b"b") + END)
        with pytest.raises(TarFormatError) as ei:
            TarIndex(path)
        assert _error_offset(ei) == 2 * BLOCK
    body = b"0 path=x\n"                                  # zero record length
    path.write_bytes(_raw_header(b"././@PaxHeader", len(body), b"x") + _pad(body)
                     + _raw_header(b"b", 1) + _pad(b"b") + END)
    with pytest.raises(tarfile.ReadError):
        _oracle(path)
    with pytest.raises(TarFormatError, match="PAX") as ei:
        TarIndex(path)
    assert _error_offset(ei) == 0


def test_random_corruption_never_crashes(plain_tar):
    path, raw, _ = plain_tar
    rng = random.Random(1234)
    outcomes = set()
    for _ in range(300):
        bad = bytearray(raw)
        for _ in range(rng.randint(1, 4)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        bad = bad[:rng.randrange(1, len(bad) + 1)] if rng.random() < 0.3 else bad
        path.write_bytes(bad)
        try:
            with TarIndex(path) as index:
                assert np.all(index.offsets + index.sizes <= len(bad))
                outcomes.add("ok")
        except TarFormatError:
            outcomes.add("error")
    assert outcomes == {"ok", "error"}


def test_empty_file_and_missing_path(tmp_path):
    empty = tmp_path / "empty.tar"
    empty.write_bytes(b"")
    with pytest.raises(TarFormatError, match="empty"):
        TarIndex(empty)
    missing = tmp_path / "nope.tar"
    with pytest.raises(FileNotFoundError, match="nope.tar"):
        TarIndex(missing)


def test_error_carries_archive_note(plain_tar):
    path, raw, headers = plain_tar
    path.write_bytes(raw[:headers[1] + 10])
    with pytest.raises(TarFormatError) as ei:
        TarIndex(path)
    assert any(str(path) in note for note in getattr(ei.value, "__notes__", [str(path)]))


# -- API --------------------------------------------------------------------------------

def test_api(tmp_path):
    path = tmp_path / "api.tar"
    _write_tar(path, [("a", tarfile.REGTYPE, b"AAA", ""), ("dup", tarfile.REGTYPE, b"one", ""),
                      ("dup", tarfile.REGTYPE, b"two", ""), ("z", tarfile.REGTYPE, b"", "")],
               tarfile.GNU_FORMAT)
    index = TarIndex(str(path))
    assert len(index) == 4 and list(index) == ["a", "dup", "dup", "z"]
    assert index.offsets.dtype == np.int64 and index.sizes.dtype == np.int64
    assert not index.offsets.flags.writeable
    with tarfile.open(path) as tf:
        assert bytes(index["dup"]) == tf.extractfile(tf.getmember("dup")).read() == b"two"
    assert index.index_of("dup") == 2 and "a" in index and "b" not in index and 0 not in index
    view = index.member(-4)
    assert isinstance(view, memoryview) and view.readonly and bytes(view) == b"AAA"
    assert bytes(index[np.int64(3)]) == b""
    with pytest.raises(IndexError):
        index.member(4)
    with pytest.raises(KeyError):
        index["missing"]
    index.close()
    index.close()
    assert index.closed and bytes(view) == b"AAA"   # views outlive close()
    with pytest.raises(ValueError):
        index.member(0)
    assert index.names[0] == "a"
    with TarIndex(path) as again:
        assert not again.closed
    assert again.closed


# -- threads ----------------------------------------------------------------------------

def test_concurrent_indexing(tmp_path):
    members = [(f"shard/{i:06d}" + "/x" * (i % 70), tarfile.REGTYPE, _payload(i, i % 3000), "")
               for i in range(1500)]
    path = tmp_path / "threads.tar"
    _write_tar(path, members, tarfile.GNU_FORMAT)
    expected = _oracle(path)
    results, errors = [None] * 4, []
    barrier = threading.Barrier(4)

    def work(k):
        try:
            barrier.wait()
            for _ in range(3):
                with TarIndex(path) as index:
                    results[k] = (list(index.names), index.offsets.copy(), index.sizes.copy(),
                                  [bytes(index[i]) for i in range(0, len(index), 97)])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    names, offsets, sizes, sample = results[0]
    assert names == [e[0] for e in expected]
    assert offsets.tolist() == [e[1] for e in expected] and sizes.tolist() == [e[2] for e in expected]
    assert sample == [e[3] for e in expected[::97]]
    for other in results[1:]:
        assert other[0] == names and np.array_equal(other[1], offsets)
        assert np.array_equal(other[2], sizes) and other[3] == sample



def test_kernel_releases_the_gil():
    # Deterministic, not a timing race: with a long switch interval a thread gives the GIL
    # away only when it blocks or releases it explicitly. A kernel pass that kept the GIL
    # would run from t0 to t1 without the main thread ticking once; a nogil pass hands the
    # GIL to the waiting main thread for the whole scan (~tens of ms for 150k headers).
    from turboloader._native._tar import _DONE, _scan_pass

    count = 150_000
    buf = _raw_header(b"same.jpg", 0) * count + END
    out = (np.empty(count, np.int64), np.empty(count, np.int64), np.empty(count, np.int64),
           np.empty(count, np.int32), np.empty(count * 8, np.uint8))
    window, ticks = {}, []
    ready = threading.Event()

    def work():
        ready.set()
        window["t0"] = time.perf_counter()
        window["result"] = _scan_pass(buf, *out)
        window["t1"] = time.perf_counter()

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.5)
    try:
        worker = threading.Thread(target=work)
        worker.start()
        ready.wait()
        while worker.is_alive():
            ticks.append(time.perf_counter())
        worker.join()
    finally:
        sys.setswitchinterval(old)
    status, _, n, used, _, _ = window["result"]
    assert (status, n, used) == (_DONE, count, count * 8)
    assert out[0][-1] == count * BLOCK   # data of the last (empty) member
    assert sum(window["t0"] < t < window["t1"] for t in ticks) > 0


def test_capacity_hint_validated():
    from turboloader._native._tar import index_tar

    buf = _raw_header(b"a", 1) + _pad(b"a") + END
    assert index_tar(buf, capacity=1)[0].tolist() == [BLOCK]
    with pytest.raises(ValueError):
        index_tar(buf, capacity=0)
