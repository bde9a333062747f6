"""Conversion jobs: folder -> TAR -> TBL -> folder round trips, pre-resizing, raw pixels,
hostile TAR member names, bad samples."""

import io
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from turboloader.tools.convert import convert, detect_format, iter_samples, verify_dataset
from turboloader.errors import TurboLoaderError
from turboloader.io.tbl import Codec, TBLFile


@pytest.fixture(scope="module")
def jpegs():
    from turboloader.tools.synthetic import synthetic_jpegs

    return synthetic_jpegs(10, seed=5, num_classes=3)


@pytest.fixture
def folder(tmp_path, jpegs):
    root = tmp_path / "folder"
    for i, (data, label) in enumerate(jpegs):
        d = root / f"class_{'abc'[label]}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:04d}.jpg").write_bytes(data)
    return root


def _folder_contents(root):
    """{relative path: (bytes, label)} of an ImageFolder tree (label = sorted class index)."""
    classes = sorted(p.name for p in Path(root).iterdir() if p.is_dir())
    return {f"{p.parent.name}/{p.name}": (p.read_bytes(), classes.index(p.parent.name))
            for p in Path(root).rglob("*") if p.is_file() and p.parent != Path(root)}


def test_round_trip_folder_tar_tbl_folder(tmp_path, folder, jpegs):
    r1 = convert(folder, tmp_path / "shards", dst_format="tar", shard_size=4)
    assert r1.written == 10 and not r1.skipped and len(r1.outputs) == 3
    assert detect_format(tmp_path / "shards") == "tar"
    r2 = convert(tmp_path / "shards", tmp_path / "all.tbl")
    assert r2.written == 10 and r2.bytes_out == sum(len(d) for d, _ in jpegs)
    r3 = convert(tmp_path / "all.tbl", tmp_path / "back")
    assert r3.written == 10
    src = _folder_contents(folder)
    back = _folder_contents(tmp_path / "back")
    # TAR carries no class names, so directories are renamed, but labels and bytes survive
    assert sorted((b, l) for b, l in src.values()) == sorted((b, l) for b, l in back.values())
    with TBLFile(tmp_path / "all.tbl") as f:
        by_key = {k: (bytes(f[i]), int(f.labels[i])) for i, k in enumerate(f.keys)}
    for rel, (data, label) in src.items():
        assert by_key[rel.rsplit(".", 1)[0]] == (data, label)


def test_folder_to_tbl_keeps_class_names_and_order(tmp_path, folder):
    convert(folder, tmp_path / "a.tbl")
    with TBLFile(tmp_path / "a.tbl") as f:
        assert f.metadata["classes"] == ["class_a", "class_b", "class_c"]
        assert f.keys == sorted(f.keys)
    assert [s.key for s in iter_samples(tmp_path / "a.tbl")] == [
        s.key for s in iter_samples(folder)]


def test_pre_resize(tmp_path, folder, jpegs):
    from turboloader.decode.jpeg import decode_jpeg

    report = convert(folder, tmp_path / "small.tbl", max_short_side=200, quality=92, workers=2)
    assert report.reencoded == 10 and report.bytes_out < report.bytes_in
    with TBLFile(tmp_path / "small.tbl") as f:
        assert f.metadata["max_short_side"] == 200
        for i, s in enumerate(iter_samples(folder)):
            rec = f.record(i)
            src = Image.open(io.BytesIO(s.data))
            w, h = src.size
            assert min(rec.width, rec.height) == 200
            assert abs(rec.width / rec.height - w / h) < 0.02
            # oracle: Pillow's antialiased bicubic resize, then Pillow's JPEG at quality 92
            resized = src.convert("RGB").resize((rec.width, rec.height), Image.Resampling.BICUBIC)
            buf = io.BytesIO()
            resized.save(buf, "JPEG", quality=92)
            oracle = np.asarray(Image.open(buf), np.float32)
            got = decode_jpeg(rec.data).astype(np.float32)
            assert np.abs(got - oracle).mean() < 0.5


def test_pre_resize_copies_small_images_byte_for_byte(tmp_path, folder, jpegs):
    convert(folder, tmp_path / "same.tbl", max_short_side=10_000)
    with TBLFile(tmp_path / "same.tbl") as f:
        assert sorted(bytes(f[i]) for i in range(len(f))) == sorted(d for d, _ in jpegs)


def test_raw_pixels(tmp_path, folder):
    from turboloader.decode.jpeg import decode_jpeg
    from turboloader.transforms import functional as F

    convert(folder, tmp_path / "raw.tbl", codec="raw", max_short_side=128)
    with TBLFile(tmp_path / "raw.tbl") as f:
        assert set(f.codecs.tolist()) == {int(Codec.RAW)}
        for i, s in enumerate(iter_samples(folder)):
            # oracle: the full decode, resized like torchvision's Resize(128) (Pillow-exact)
            np.testing.assert_array_equal(f.record(i).array(),
                                          F.resize(decode_jpeg(s.data), 128, "bicubic"))
    with pytest.raises(ValueError, match="TBL"):
        convert(folder, tmp_path / "raw-folder", codec="raw")


def _add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def hostile_tar(tmp_path, jpegs):
    path = tmp_path / "hostile.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        names = ["good0", "../evil", "/abs/evil", "ok/../../evil2", "good1"]
        for k, name in enumerate(names):
            _add(tar, f"{name}.jpg", jpegs[k][0])
            _add(tar, f"{name}.cls", b"1")
    return path


@pytest.mark.parametrize("dst", ["out", "out.tbl", "out-%03d.tar"])
def test_hostile_tar_names_are_skipped(tmp_path, hostile_tar, dst):
    work = tmp_path / "w" / "x"
    work.mkdir(parents=True)
    report = convert(hostile_tar, work / dst)
    assert report.written == 2
    reasons = sorted(s.reason.split(":")[0] for s in report.skipped)
    assert reasons == ["absolute member name", "member name with a '..' component",
                       "member name with a '..' component"]
    every = [p.name for p in (tmp_path).rglob("*")]
    assert not any("evil" in n for n in every)
    keys = [s.key for s in iter_samples(next(iter(
        sorted(p for p in work.iterdir() if p.suffix != ".json"))) if dst != "out"
        else work / "out")]
    assert sorted(k.rsplit("/", 1)[-1] for k in keys) == ["good0", "good1"]


def test_bad_samples_are_skipped_with_reasons(tmp_path, folder, jpegs):
    (folder / "class_a" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really")
    (folder / "class_b" / "notes.txt").write_text("hello")
    (folder / "class_c" / "fake.png").write_bytes(b"GIF89a....")
    report = convert(folder, tmp_path / "a.tbl")
    assert report.written == 10
    skipped = {s.key: s.reason for s in report.skipped}
    assert set(skipped) == {"class_a/broken", "class_b/notes.txt", "class_c/fake"}
    assert skipped["class_a/broken"].startswith("DecodeError")
    assert "extension" in skipped["class_b/notes.txt"]
    assert "not a JPEG, PNG or WebP" in skipped["class_c/fake"]
    assert "skipped: 3" in report.summary()
    with pytest.raises(TurboLoaderError, match="broken"):
        convert(folder, tmp_path / "b.tbl", strict=True)
    assert not (tmp_path / "b.tbl").exists()


def test_damaged_tbl_record_is_skipped_and_verified(tmp_path, folder):
    convert(folder, tmp_path / "a.tbl")
    with TBLFile(tmp_path / "a.tbl") as f:
        offset, key = int(f.index["offset"][4]), f.keys[4]
    data = bytearray((tmp_path / "a.tbl").read_bytes())
    data[offset + 300] ^= 1
    (tmp_path / "a.tbl").write_bytes(bytes(data))
    report = convert(tmp_path / "a.tbl", tmp_path / "b.tbl")
    assert report.written == 9 and report.skipped[0].key == key
    assert "CRC-32 mismatch" in report.skipped[0].reason
    checked, bad = verify_dataset(tmp_path / "a.tbl", workers=2)
    assert checked == 10 and [b.key for b in bad] == [key]


def test_existing_outputs_and_bad_paths(tmp_path, folder):
    convert(folder, tmp_path / "a.tbl")
    with pytest.raises(FileExistsError):
        convert(folder, tmp_path / "a.tbl")
    assert convert(folder, tmp_path / "a.tbl", overwrite=True).written == 10
    with pytest.raises(FileNotFoundError):
        convert(tmp_path / "missing", tmp_path / "b.tbl")
    (tmp_path / "junk.bin").write_bytes(b"junk" * 100)
    with pytest.raises(ValueError, match="neither"):
        convert(tmp_path / "junk.bin", tmp_path / "c.tbl")
    assert sorted(os.listdir(tmp_path)) == ["a.tbl", "folder", "junk.bin"]
