"""``scan_stream``: the native TAR kernel over a window of a stream (remote ``.tar`` shards
read without a shard cache). Oracle: :class:`TarIndex` on the same bytes (itself checked
against ``tarfile`` in test_tar.py), whatever the window size and however the reader cuts
its reads."""

import io
import random
import tarfile

import pytest

from turboloader import TarFormatError, TarIndex
from turboloader.io.shards import StreamShard, TarShard
from turboloader.io.tar import scan_stream

from native.test_tar import FORMATS, _payload, _rich_members, _write_tar


class _Dribble(io.RawIOBase):
    """A stream that hands out at most a random few bytes per read, like a socket."""

    def __init__(self, raw, seed):
        self.raw, self.pos, self.rng = raw, 0, random.Random(seed)

    def readable(self):
        return True

    def readinto(self, buf):
        n = min(len(buf), self.rng.choice([1, 7, 511, 512, 513, 4000, 1 << 20]),
                len(self.raw) - self.pos)
        buf[:n] = self.raw[self.pos:self.pos + n]
        self.pos += n
        return n


def _index(path):
    with TarIndex(path) as index:
        return [(name, int(o), int(s), bytes(index.member(i)))
                for i, (name, o, s) in enumerate(zip(index.names, index.offsets, index.sizes))]


def _scan(raw, chunk, seed=0, **kw):
    return [(name, off, size, data) for name, off, size, data, problem
            in scan_stream(_Dribble(raw, seed), want=lambda name: True, chunk=chunk, **kw)]


@pytest.mark.parametrize("chunk", [512, 1000, 4096, 2 << 20])
@pytest.mark.parametrize("fmt_name", FORMATS)
def test_same_members_as_the_index_at_any_window(tmp_path, fmt_name, chunk):
    path = tmp_path / "a.tar"
    raw = _write_tar(path, _rich_members(FORMATS[fmt_name]), FORMATS[fmt_name])
    expected = _index(path)
    assert len(expected) >= 8
    for seed in range(3):
        assert _scan(raw, chunk, seed) == expected


def test_unwanted_members_are_not_read(tmp_path):
    path = tmp_path / "a.tar"
    raw = _write_tar(path, [(f"{i}.{ext}", tarfile.REGTYPE, _payload(i, 700), "")
                            for i in range(20) for ext in ("jpg", "cls", "json")],
                     tarfile.USTAR_FORMAT)
    got = list(scan_stream(io.BytesIO(raw), want=lambda n: n.endswith(".cls"), chunk=1024))
    assert [g[0] for g in got] == [e[0] for e in _index(path)]
    assert all((g[3] is None) != g[0].endswith(".cls") for g in got)


def test_corruption_gives_the_index_s_error_or_members(tmp_path):
    """Random byte flips and cuts: the stream scan ends exactly like TarIndex on the same
    bytes (same members, or a TarFormatError with the same text), never a crash."""
    path = tmp_path / "c.tar"
    raw = _write_tar(path, [(f"m{i}.bin", tarfile.REGTYPE, _payload(i, 3000), "")
                            for i in range(6)], tarfile.GNU_FORMAT)
    rng = random.Random(7)
    outcomes = set()
    for case in range(200):
        bad = bytearray(raw)
        for _ in range(rng.randint(1, 3)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        if rng.random() < 0.4:
            bad = bad[:rng.randrange(1, len(bad) + 1)]
        path.write_bytes(bad)
        try:
            expected = _index(path)
        except TarFormatError as exc:
            expected = ("error", str(exc).splitlines()[0])
        try:
            got = _scan(bytes(bad), rng.choice([512, 2048, 1 << 20]), case)
        except TarFormatError as exc:
            got = ("error", str(exc).splitlines()[0])
        assert got == expected, case
        outcomes.add(got[0] if isinstance(got, tuple) else "ok")
    assert outcomes == {"error", "ok"}


def test_a_member_over_the_limit_is_reported_and_skipped(tmp_path):
    path = tmp_path / "big.tar"
    raw = _write_tar(path, [("a.jpg", tarfile.REGTYPE, _payload(1, 100), ""),
                            ("b.jpg", tarfile.REGTYPE, _payload(2, 50_000), ""),
                            ("c.jpg", tarfile.REGTYPE, _payload(3, 100), "")],
                     tarfile.USTAR_FORMAT)
    got = list(scan_stream(_Dribble(raw, 1), want=lambda n: True, chunk=1024, max_member=4096))
    assert [(g[0], g[2]) for g in got] == [("a.jpg", 100), ("b.jpg", 50_000), ("c.jpg", 100)]
    assert got[1][3] is None and "over the member-size limit of 4096" in got[1][4]
    assert got[2][3] == _payload(3, 100) and got[0][4] is None and got[2][4] is None


def test_a_stream_cut_inside_a_skipped_member_is_an_error(tmp_path):
    path = tmp_path / "cut.tar"
    raw = _write_tar(path, [("b.jpg", tarfile.REGTYPE, _payload(2, 50_000), "")],
                     tarfile.USTAR_FORMAT)
    with pytest.raises(TarFormatError, match="truncated member"):
        list(scan_stream(io.BytesIO(raw[:20_000]), want=lambda n: True, chunk=1024,
                         max_member=4096))


def test_stream_shard_over_a_reader_matches_the_indexed_shard(tmp_path):
    """A remote ``.tar`` read as a stream gives the records a local TarShard gives."""
    path = tmp_path / "s.tar"
    members = []
    for i in range(30):
        members += [(f"k{i:03d}.jpg", tarfile.REGTYPE, _payload(i, 900 + i), ""),
                    (f"k{i:03d}.cls", tarfile.REGTYPE, str(i % 5).encode(), "")]
    raw = _write_tar(path, members, tarfile.PAX_FORMAT)
    local = TarShard(str(path))
    stream = StreamShard("s3://bucket/s.tar", opener=lambda: _Dribble(raw, 3))
    assert stream.count() == len(local) == 30
    for j in range(30):
        a, b = local.sample(j), stream.sample(j)
        assert (a.key, a.member, a.offset, bytes(a.image), bytes(a.label)) == \
               (b.key, b.member, b.offset, bytes(b.image), bytes(b.label))


def test_windows_are_reused_only_after_a_scan_and_never_change_what_it_gave(tmp_path):
    """A scan's window serves the next scan once the first has ended (run out, closed
    midway or failed: a fresh window costs a page fault per 4 KiB), and the member bytes a
    scan yielded are the caller's own: a later scan writing the same window never changes
    them."""
    from turboloader.io import tar

    chunk = 8192
    paths = []
    for k in range(3):
        path = tmp_path / f"w{k}.tar"
        _write_tar(path, [(f"{i}.bin", tarfile.REGTYPE, _payload(100 * k + i, 3000 + 97 * i), "")
                          for i in range(12)], FORMATS[next(iter(FORMATS))])
        paths.append(path)
    tar._SPARE_WINDOWS.clear()
    kept = _scan(paths[0].read_bytes(), chunk)   # run out: its window goes back
    assert [len(b) for b in tar._SPARE_WINDOWS] == [chunk]
    window = tar._SPARE_WINDOWS[0]
    it = scan_stream(io.BytesIO(paths[1].read_bytes()), want=lambda name: True, chunk=chunk)
    first = next(it)
    assert not tar._SPARE_WINDOWS  # taken by the running scan
    it.close()                      # closed midway: back
    assert [id(b) for b in tar._SPARE_WINDOWS] == [id(window)]
    assert _scan(paths[2].read_bytes(), chunk) == _index(paths[2])  # reuses it, exact
    assert kept == _index(paths[0]) and first[3] == _index(paths[1])[0][3]
    with pytest.raises(TarFormatError):  # a failed scan gives its window back too
        _scan(b"\x01" * 1024, chunk)
    assert [id(b) for b in tar._SPARE_WINDOWS] == [id(window)]
