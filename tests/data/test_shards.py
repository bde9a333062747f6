"""URL expansion, shard readers, WebDataset grouping, .tar.gz and .json labels."""

import json
import os

import numpy as np
import pytest
from helpers.shards import jpeg, labelled_members, labels_of, size_of, write_tar

from turboloader import SampleError, TarDataset
from turboloader.io.shards import (
    IndexedShard,
    Shard,
    ShardSource,
    StreamShard,
    TarShard,
    braceexpand,
    count_samples,
    expand_urls,
    split_key,
)


def test_braceexpand():
    assert braceexpand("t-{000..002}.tar") == ["t-000.tar", "t-001.tar", "t-002.tar"]
    assert braceexpand("{8..11}") == ["8", "9", "10", "11"]
    assert braceexpand("{08..11}") == ["08", "09", "10", "11"]
    assert braceexpand("{a,b}/{1..2}.tar") == ["a/1.tar", "a/2.tar", "b/1.tar", "b/2.tar"]
    assert braceexpand("plain.tar") == ["plain.tar"]


def test_expand_urls(tmp_path, make_shards):
    paths = make_shards([1, 1, 1, 1])
    d = str(tmp_path)
    assert expand_urls(f"{d}/shard-{{000..003}}.tar") == paths
    assert expand_urls(f"{d}/shard-*.tar") == paths
    assert expand_urls([paths[2], f"{d}/shard-00[01].tar"]) == [paths[2], paths[0], paths[1]]
    assert expand_urls(tmp_path / "shard-000.tar") == [paths[0]]
    with pytest.raises(FileNotFoundError):
        expand_urls(f"{d}/nothing-*.tar")
    with pytest.raises(TypeError):
        expand_urls(3)
    # every form gives the same dataset
    for urls in (f"{d}/shard-{{000..003}}.tar", f"{d}/shard-*.tar", paths):
        assert sorted(labels_of(TarDataset(urls, size_of, shuffle=False))) == [0, 1, 2, 3]


def test_a_directory_is_its_shards_in_name_order(tmp_path, make_shards):
    # TarDataset("shards/") reads the folder's shards as convert and inspect do
    paths = make_shards([2, 1, 3])
    (tmp_path / "notes.txt").write_text("not a shard")
    (tmp_path / "sub").mkdir()
    (tmp_path / "shard-009.tar.tmp-123").write_bytes(b"unfinished convert")
    assert expand_urls(tmp_path) == paths
    assert expand_urls(f"{tmp_path}{os.sep}") == [p for p in paths]
    ds = TarDataset(str(tmp_path) + os.sep, size_of, shuffle=False)
    assert len(ds) == 6 and labels_of(ds) == labels_of(TarDataset(paths, size_of, shuffle=False))
    with pytest.raises(FileNotFoundError, match="no shards .* in the directory"):
        TarDataset(tmp_path / "sub", size_of)


def test_split_key():
    assert split_key("a/b.c/0001.jpg") == ("a/b.c/0001", "jpg")
    assert split_key("0001.seg.PNG") == ("0001", "seg.png")
    assert split_key("dir/README") == (None, None)
    assert split_key("dir/.hidden") == (None, None)


def test_grouping_with_dots_in_directories(tmp_path):
    members = [
        ("train.v2/n01.x/000.jpg", jpeg(0)), ("train.v2/n01.x/000.cls", b"0"),
        ("train.v2/n01.x/001.JPEG", jpeg(1)), ("train.v2/n01.x/001.cls", b"1"),
        ("train.v2/n01.x/001.txt", b"caption"),
        ("train.v2/README", b"not a sample"),
        ("train.v2/n02/002.png", jpeg(2, fmt="PNG")), ("train.v2/n02/002.json", b'{"label": 2}'),
    ]
    path = write_tar(tmp_path / "g.tar", members)
    shard = TarShard(path)
    assert [shard.key(j) for j in range(len(shard))] == [
        "train.v2/n01.x/000", "train.v2/n01.x/001", "train.v2/n02/002"]
    rec = shard.sample(1)
    assert (rec.image_ext, rec.label_ext, bytes(rec.label)) == ("jpeg", "cls", b"1")
    assert rec.member == "train.v2/n01.x/001.JPEG"
    assert bytes(rec.image) == jpeg(1)
    with open(path, "rb") as f:
        f.seek(rec.offset)
        assert f.read(len(rec.image)) == jpeg(1)
    shard.close()
    ds = TarDataset(path, size_of, shuffle=False)
    assert labels_of(ds) == [0, 1, 2]


def test_tar_gz_matches_tar(tmp_path):
    members = labelled_members(range(7))
    plain = write_tar(tmp_path / "s.tar", members)
    gz = write_tar(tmp_path / "s.tar.gz", members)
    tgz = write_tar(tmp_path / "s.tgz", members)
    assert count_samples(gz) == count_samples(plain) == 7
    a = [(np.asarray(img), y) for img, y in TarDataset(plain, shuffle=False)]
    for url in (gz, tgz):
        b = [(np.asarray(img), y) for img, y in TarDataset(url, shuffle=False)]
        assert [y for _, y in a] == [y for _, y in b] == list(range(7))
        assert all((x == z).all() for (x, _), (z, _) in zip(a, b))
    # streams re-open to go back
    s = StreamShard(gz)
    assert s.sample(5).key == "000005" and s.sample(2).key == "000002"
    s.close()
    # shuffled epochs of a stream dataset still cover it
    ds = TarDataset([gz, plain], size_of, seed=3)
    ds.set_epoch(2)
    assert sorted(labels_of(ds)) == sorted(list(range(7)) * 2)


def test_json_labels(tmp_path):
    members = []
    for i in range(4):
        members.append((f"{i:03d}.jpg", jpeg(i)))
        members.append((f"{i:03d}.json", json.dumps({"label": i, "idx": 10 + i}).encode()))
    path = write_tar(tmp_path / "j.tar", members)
    assert labels_of(TarDataset(path, size_of, shuffle=False)) == [0, 1, 2, 3]
    assert labels_of(TarDataset(path, size_of, shuffle=False, label_key="idx")) == [10, 11, 12, 13]
    whole = labels_of(TarDataset(path, size_of, shuffle=False, label_key=None))
    assert whole[1] == {"label": 1, "idx": 11}
    ds = TarDataset(path, size_of, shuffle=False, label_key="nope")
    with pytest.raises(SampleError) as info:
        next(iter(ds))
    assert any("000" in n and "j.tar" in n for n in info.value.__notes__)
    # target_transform applies to the label
    assert labels_of(TarDataset(path, size_of, lambda y: y * 2, shuffle=False)) == [0, 2, 4, 6]


def test_images_match_pillow(tmp_path, make_shards):
    from PIL import Image
    import io

    (path,) = make_shards([3])
    for img, y in TarDataset(path, shuffle=False):
        ref = np.asarray(Image.open(io.BytesIO(jpeg(y))).convert("RGB"), dtype=np.int16)
        assert img.size == (64, 48)
        assert np.abs(np.asarray(img, dtype=np.int16) - ref).mean() < 1
    assert os.path.exists(path)


def test_a_chunk_pins_its_shards_past_the_open_bound(make_shards):
    """#30 finding 1, at the reader: a chunk over more shards than the stream keeps open
    (``mix_shards + 4``) reads them all (none is closed under it), and the reader shrinks
    back to its bound once the chunk is read."""
    paths = make_shards([2] * 12)
    ds = TarDataset(paths, size_of, shuffle=False, mix_shards=1)
    st = ds._lease("test")
    try:
        assert st.max_open == 5
        items = [(g, g) for g in range(0, 24, 2)]  # one sample of each of the 12 shards
        chunk = ds._gather_chunk(st, items, 0, st.recorder.counters(0))
        assert chunk.errors == [None] * 12
        assert [bytes(s) for s in chunk.sources] == [jpeg(g) for g, _ in items]
        assert chunk.labels == [g for g, _ in items]
        assert len(st.shards) == 5 and not st.pinned
        assert all(not st.shards[u]._index.closed for u in st.shards)
        assert list(st.shards) == paths[-5:]  # the most recently used kept
    finally:
        ds._release(st)


def test_byte_order_mark_in_labels_and_classes(tmp_path):
    """A .cls / .json label member and a classes.json written with a UTF-8 byte-order mark
    read as the same text without it (Python's json.loads of the bytes is the oracle)."""
    bom = b"\xef\xbb\xbf"
    members = []
    for i in range(4):
        members.append((f"{i:03d}.jpg", jpeg(i)))
        label = (str(i).encode() if i % 2 else json.dumps({"label": i}).encode())
        members.append((f"{i:03d}." + ("cls" if i % 2 else "json"), bom + label))
    path = write_tar(tmp_path / "b.tar", members)
    (tmp_path / "classes.json").write_bytes(bom + json.dumps(["a", "b", "c", "d"]).encode())
    assert json.loads(bom + b"7") == 7  # the oracle reads through the mark
    ds = TarDataset(path, size_of, shuffle=False)
    assert labels_of(ds) == [0, 1, 2, 3]
    assert ds.classes == ["a", "b", "c", "d"]


def test_shard_readers_follow_the_declared_protocols(tmp_path, make_shards):
    """The shard readers a dataset's stream uses are the declared protocols: a ``.tar`` is
    an IndexedShard (random access), a ``.tar.gz`` a Shard read in order, and the dataset's
    shard source a ShardSource; each reads the samples tarfile sees."""
    import tarfile

    paths = make_shards([3])
    gz = str(tmp_path / "s.tar.gz")
    with tarfile.open(paths[0]) as src, tarfile.open(gz, "w:gz") as dst:
        for m in src.getmembers():
            dst.addfile(m, src.extractfile(m))
    ds = TarDataset(paths + [gz], size_of, shuffle=False)
    assert isinstance(ds._io, ShardSource)
    tar, stream = ds._io.open(paths[0]), ds._io.open(gz)
    try:
        assert isinstance(tar, IndexedShard) and tar.random_access
        assert isinstance(stream, Shard) and not stream.random_access
        assert not isinstance(stream, IndexedShard)
        with tarfile.open(paths[0]) as oracle:
            keys = sorted({m.name.split(".")[0] for m in oracle.getmembers()})
        assert [tar.key(j) for j in range(len(tar))] == keys
        assert [stream.sample(j).key for j in range(3)] == keys
    finally:
        tar.close()
        stream.close()


def test_batch_reads_match_tarfile_and_follow_the_image_extensions(tmp_path):
    """image_size / read_image_into (the gather's per-sample reads, from lists made once)
    give tarfile's bytes for each sample's image member, -1 where a sample has none, and
    follow use_image_extensions after the lists were made."""
    import tarfile

    members = [("000000.jpg", jpeg(0)), ("000000.png", b"png-0"), ("000000.cls", b"0"),
               ("000001.cls", b"1"),                              # no image member
               ("000002.png", b"png-2"), ("000002.jpg", jpeg(2))]
    path = write_tar(tmp_path / "s.tar", members)
    with tarfile.open(path) as tf:
        oracle = {m.name: tf.extractfile(m).read() for m in tf.getmembers()}
    shard = TarShard(path)

    def read(j):
        size = shard.image_size(j)
        if size < 0:
            return None
        buf = bytearray(size + 5)
        view = memoryview(buf)[2:2 + size]   # a slice of a larger buffer, as the gather's
        assert shard.read_image_into(j, view) == size
        return bytes(view)

    assert [read(j) for j in range(3)] == [oracle["000000.jpg"], None, oracle["000002.jpg"]]
    shard.use_image_extensions(["png", "jpg"])
    assert [read(j) for j in range(3)] == [oracle["000000.png"], None, oracle["000002.png"]]
    assert shard.image_size(-1) == len(b"png-2")
    with pytest.raises(IndexError):
        shard.image_size(3)
    shard.close()


def test_many_images_read_at_once_match_tarfile(tmp_path):
    """image_sizes / read_images_into (a chunk's reads: one native call per shard) give
    tarfile's bytes back to back in the order asked, repeats included, follow
    use_image_extensions, and say -1 for a sample without an image."""
    import tarfile

    members = [("000000.jpg", jpeg(0)), ("000000.png", b"png-0"), ("000000.cls", b"0"),
               ("000001.cls", b"1"),                              # no image member
               ("000002.png", b"png-2"), ("000002.jpg", jpeg(2)), ("000003.jpg", b"")]
    path = write_tar(tmp_path / "s.tar", members)
    with tarfile.open(path) as tf:
        oracle = {m.name: tf.extractfile(m).read() for m in tf.getmembers()}
    shard = TarShard(path)
    assert shard.image_sizes(np.array([0, 1, 2, 3])).tolist() == [
        len(oracle["000000.jpg"]), -1, len(oracle["000002.jpg"]), 0]
    for exts, want in ((None, ["000002.jpg", "000000.jpg", "000003.jpg", "000002.jpg"]),
                       (["png", "jpg"], ["000002.png", "000000.png", "000003.jpg",
                                         "000002.png"])):
        if exts is not None:
            shard.use_image_extensions(exts)
        js = np.array([2, 0, 3, 2])
        sizes = shard.image_sizes(js)
        buf = bytearray(int(sizes.sum()) + 7)
        view = memoryview(buf)[3:3 + int(sizes.sum())]   # a slice of a larger buffer
        assert shard.read_images_into(js, view) == 4
        assert bytes(view) == b"".join(oracle[m] for m in want)
        with pytest.raises(ValueError, match="out holds"):
            shard.read_images_into(js, bytearray(int(sizes.sum()) - 1))
    shard.close()


def test_many_members_read_at_once_stop_where_the_file_ends(tmp_path):
    """TarIndex.read_many_into counts the members read whole, in order, up to the first
    one a truncated file no longer holds (the per-member read then says why); a member out
    of range is an IndexError, a closed index a ValueError."""
    from turboloader import TarIndex

    members = [(f"{i:06d}.bin", bytes([i]) * (1000 + i)) for i in range(4)]
    path = write_tar(tmp_path / "m.tar", members)
    index = TarIndex(path)
    buf = bytearray(8000)
    assert index.read_many_into([3, 0], buf) == 2
    assert bytes(buf[:1003 + 1000]) == bytes([3]) * 1003 + bytes([0]) * 1000
    os.truncate(path, int(index.offsets[2]) + 10)   # member 2 cut, member 3 gone
    assert index.read_many_into([0, 1, 2, 3], buf) == 2
    assert index.read_many_into([3, 0], buf) == 0
    with pytest.raises(IndexError):
        index.read_many_into([4], buf)
    index.close()
    with pytest.raises(ValueError, match="closed"):
        index.read_many_into([0], buf)


def test_images_of_several_shards_read_in_one_call_match_tarfile(tmp_path):
    """TarShard.image_extents and io.tar.read_extents_into (a chunk's reads over every
    shard it spans: one native call) give tarfile's bytes back to back in the order asked,
    shards interleaved and repeats included; they count the extents read whole up to the
    first a truncated file no longer holds; bad arguments are ValueErrors."""
    import tarfile

    from turboloader.io.tar import read_extents_into

    shards, oracle = [], []
    for s in range(2):
        members = [(f"{s}{i:05d}.jpg", jpeg(10 * s + i)) for i in range(3)]
        members.append((f"{s}00009.cls", b"1"))   # a sample without an image
        path = write_tar(tmp_path / f"s{s}.tar", members)
        with tarfile.open(path) as tf:
            oracle.append([tf.extractfile(m).read() for m in tf.getmembers()])
        shards.append(TarShard(path))
    order = [(1, 2), (0, 0), (1, 0), (0, 2), (0, 0)]   # (shard, sample)
    parts = [shards[s].image_extents(np.array([j])) for s, j in order]
    fds = [p[0] for p in parts]
    starts = np.concatenate([p[1] for p in parts])
    sizes = np.concatenate([p[2] for p in parts])
    assert sizes.tolist() == [len(oracle[s][j]) for s, j in order]
    assert shards[0].image_extents(np.array([3]))[2].tolist() == [-1]   # no image
    out = np.zeros(int(sizes.sum()) + 5, np.uint8)
    assert read_extents_into(fds, starts, sizes, out) == 5
    assert out[:int(sizes.sum())].tobytes() == b"".join(oracle[s][j] for s, j in order)
    assert not out[int(sizes.sum()):].any()
    with pytest.raises(ValueError, match="out holds"):
        read_extents_into(fds, starts, sizes, bytearray(int(sizes.sum()) - 1))
    with pytest.raises(ValueError, match="entries"):
        read_extents_into(fds[:4], starts, sizes, out)
    with pytest.raises(ValueError, match="negative"):
        read_extents_into([-1] + fds[1:], starts, sizes, out)
    # shard 0's sample 2 cut: the extents before it in the order are read, none after
    os.truncate(shards[0].url, int(starts[3]) + 10)
    assert read_extents_into(fds, starts, sizes, out) == 3
    for shard in shards:
        shard.close()
    with pytest.raises(ValueError, match="closed"):
        shards[0].image_extents(np.array([0]))


@pytest.mark.parametrize("labels", ["cls", "json"])
def test_a_chunk_gathered_at_once_is_the_chunk_gathered_row_by_row(tmp_path, labels):
    """The gather of a chunk of local .tar images at once (TarDataset._gather_images) makes
    exactly the chunk the per-row gather makes: bytes, labels, where, slots, epochs, sizes
    of the reads; a chunk it cannot take (a sample without an image, a JSON label that
    would need copying) is gathered row by row."""
    from turboloader.data.tar_reader import _TarGather

    paths = []
    for s in range(3):
        members = []
        for i in range(5):
            k = s * 5 + i
            members.append((f"{k:06d}.jpg", jpeg(k)))
            if labels == "cls":
                members.append((f"{k:06d}.cls", str(k % 4).encode()))
            else:
                members.append((f"{k:06d}.json", json.dumps({"label": k % 4}).encode()))
        paths.append(write_tar(tmp_path / f"s{s}.tar", members))
    ds = TarDataset(paths, seed=0)
    st = ds._lease("t")
    items = [(g, 100 + r) for r, g in enumerate([7, 0, 14, 3, 3, 9, 12])]
    counters = {"read_s": 0.0, "bytes_read": 0}
    fast = ds._gather_images(st, items, 5, set())
    assert fast is not None
    fast_bytes = [bytes(v) for v in fast.sources]
    slow, read = _TarGather._gather_rows(ds, st, items, 5, set())
    assert read and fast_bytes == [bytes(v) for v in slow.sources]
    for name in ("labels", "slots", "epochs", "sizes", "errors", "cache_keys", "nbytes"):
        assert getattr(fast, name) == getattr(slow, name), name
    assert len(fast.where) == len(items)   # made per row when asked
    assert [fast.where[i] for i in range(len(items))] == list(fast.where) == slow.where
    assert fast.labels == [g % 4 for g, _ in items]
    assert ds._gather_chunk(st, items, 5, counters).labels == fast.labels
    assert counters["bytes_read"] == fast.nbytes
    # a JSON dict label is handed out as a copy: row by row
    ds2 = TarDataset(paths, seed=0, label_key=None)
    st2 = ds2._lease("t2")
    assert (ds2._gather_images(st2, items, 5, set()) is None) == (labels == "json")
    ds._release(st)
    ds2._release(st2)


def test_is_jpeg_agrees_with_the_first_three_bytes():
    """is_jpeg's fast forms (bytes, a 1-D byte view) answer as the copy of the first three
    bytes does, for short, empty and other inputs too."""
    from turboloader.decode import is_jpeg

    soi = b"\xff\xd8\xff"
    for data in (soi + b"\xe0rest", soi, b"\xff\xd8", b"", b"\x89PNG\r\n", b"\xff\xd8\x00x",
                 b"x" + soi):
        want = bytes(data[:3]) == soi
        assert is_jpeg(data) is want
        assert is_jpeg(memoryview(bytearray(data))) == want
        assert is_jpeg(memoryview(b"--" + data)[2:]) == want
        assert is_jpeg(bytearray(data)) == want
        assert bool(is_jpeg(np.frombuffer(data, np.uint8))) == want
    wide = memoryview(bytearray(soi + b"\x00")).cast("H")   # not a byte view: the copy path
    assert is_jpeg(wide) == (bytes(wide[:3]) == soi)


def _python_grouped(path):
    """A TarShard whose per-sample tables come from the Python definition (``_group``)."""
    from turboloader.io.shards import _group

    shard = TarShard(path)
    shard._from_groups(_group(shard._index.names))
    return shard


def _reference_labels(shard):
    """``labels(None)`` as the Python definition has it: each label member read on its own
    and parsed by ``parse_label``."""
    from turboloader.errors import TurboLoaderError
    from turboloader.io.shards import parse_label

    values, errors = [None] * len(shard), {}
    for j in range(len(shard)):
        rec = shard.sample(j)
        if rec.label is not None:
            try:
                values[j] = parse_label(rec.label, rec.label_ext, None)
            except TurboLoaderError as exc:
                errors[j] = exc
    return values, errors


def _described(shard, reference=False):
    """Everything a TarShard says about its samples, labels included."""
    values, errors = _reference_labels(shard) if reference else shard.labels(None)
    recs = [shard.sample(j) for j in range(len(shard))]
    return {
        "len": len(shard),
        "keys": [shard.key(j) for j in range(len(shard))],
        "where": [shard.where(j) for j in range(len(shard))],
        "records": [(r.key, r.member, r.offset, r.image_ext, r.label_ext, r.problem,
                     None if r.image is None else bytes(r.image),
                     None if r.label is None else bytes(r.label)) for r in recs],
        "sizes": shard.image_sizes(np.arange(len(shard))).tolist(),
        "extensions": shard.extensions(),
        "members": [shard.members(j, ("cls", "txt", "seg.png")) for j in range(len(shard))],
        "labels": values,
        "errors": {j: (type(e), str(e)) for j, e in errors.items()},
    }


LABEL_TEXTS = [b"12", b" 7\n", b"\xef\xbb\xbf5", b"\x1c9", b"abc", b"99999999999999999999",
               b"-9223372036854775808", b"9223372036854775808", b"1_000", b"\xd9\xa1", b"",
               b"+4", b"3\x00", b"0x10", b" -0 "]


@pytest.mark.parametrize("case", ["plain", "duplicate", "non-ascii", "json"])
def test_native_grouping_and_label_reads_are_the_python_definition(tmp_path, case):
    """The native grouping (and the labels read in one call) of a shard says the same as
    the Python definition (``split_key`` / ``_group`` / ``parse_label`` per member) about
    every sample: keys, members, image and label choice, problems, label values and the
    errors of labels that do not parse. Shards it leaves to Python (a duplicate member, a
    non-ASCII name) take the Python path."""
    members = [("a.jpg", jpeg(0)), ("a.cls", b"0"), ("b.JPG", jpeg(1)), ("b.CLS", b"1"),
               ("c.png", jpeg(2, fmt="PNG")), ("c.jpg", jpeg(3)), ("c.cls", b"2"),
               ("d.webp", b"not decoded here"), ("README", b"x"), (".hidden", b"x"),
               ("dir.x/g.jpg", jpeg(4)), ("dir/.h.jpg", jpeg(5)), ("h.tar.gz.jpg", jpeg(6)),
               ("i.seg.png", jpeg(7, fmt="PNG")), ("i.Jpeg", jpeg(8)), ("i.txt", b"cap"),
               ("l.", b"empty extension"), ("M.JPG", jpeg(9)), ("m.cls", b"3"),
               ("n.cls", b"4")]
    members += [(f"lab{i:02d}.jpg", jpeg(i)) for i in range(len(LABEL_TEXTS))]
    members = [m for pair in zip(members[-len(LABEL_TEXTS):],
                                 [(f"lab{i:02d}.cls", t) for i, t in enumerate(LABEL_TEXTS)])
               for m in pair] + members[:-len(LABEL_TEXTS)]
    if case == "duplicate":
        members += [("z.jpg", jpeg(10)), ("z.JPG", jpeg(11)), ("z.cls", b"5")]
    elif case == "non-ascii":
        members += [("\u00fc.jpg", jpeg(12)), ("\u00fc.cls", b"6")]
    elif case == "json":
        members += [("y.jpg", jpeg(13)), ("y.json", b'{"label": 7}')]
    path = write_tar(tmp_path / "s.tar", members)
    native, python = TarShard(path), _python_grouped(path)
    taken = native._index.group_samples(("jpg", "jpeg", "png", "webp"), ("cls", "json"))
    assert (taken is None) == (case in ("duplicate", "non-ascii"))
    assert _described(native) == _described(python, reference=True)
    # the image choice follows use_image_extensions on both (the member maps made on demand)
    for shard in (native, python):
        shard.use_image_extensions(("png", "jpg"))
    assert _described(native) == _described(python, reference=True)
    assert _described(native)["labels"][:len(LABEL_TEXTS)] == [12, 7, 5, 9, None, None,
                                                                -(1 << 63), None, 1000, 1,
                                                                None, 4, None, None, 0]
