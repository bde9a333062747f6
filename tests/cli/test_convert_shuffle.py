"""Shards that train well (issue 11.2): shuffled, seeded TAR output, class names kept and
read back like torchvision's ImageFolder, a random preview, a working ``convert --help``,
quiet ``inspect | head``; and bad labels / keys as listed skips (issue 12.5)."""

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torchvision
from PIL import Image

from turboloader.tools.cli import _pick_samples, main
from turboloader.tools.convert import convert

ROOT = Path(__file__).resolve().parents[2]
CLASSES = ("ant", "bee", "cat", "dog")


def _jpeg(seed):
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (16, 16, 3), np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "folder"
    for label, c in enumerate(CLASSES):
        (root / c).mkdir(parents=True)
        for i in range(10):
            (root / c / f"{c}{i:02d}.jpg").write_bytes(_jpeg(100 * label + i))
    return root


def _shard_samples(path):
    """[(key, image bytes, label)] of a shard, read with stdlib tarfile (the oracle)."""
    with tarfile.open(path) as t:
        members = {m.name: t.extractfile(m).read() for m in t.getmembers()}
    keys = [n[:-4] for n in members if n.endswith(".jpg")]
    return [(k, members[k + ".jpg"], int(members[k + ".cls"])) for k in keys]


def _all(out):
    return [s for p in sorted(out.glob("*.tar")) for s in _shard_samples(p)]


def test_default_shuffles_across_shards_and_keeps_every_sample(tmp_path, folder):
    out = tmp_path / "shards"
    convert(folder, out, dst_format="tar", shard_size=10)
    shards = [_shard_samples(p) for p in sorted(out.glob("*.tar"))]
    assert len(shards) == 4
    # a class-ordered folder in source order would give one class per shard
    assert all(len({label for _, _, label in s}) > 1 for s in shards)
    ref = torchvision.datasets.ImageFolder(str(folder))
    expected = sorted((Path(p).read_bytes(), t) for p, t in ref.samples)
    assert sorted((b, label) for _, b, label in _all(out)) == expected


def test_seeded_and_no_shuffle(tmp_path, folder):
    a, b, c, d = (tmp_path / n for n in "abcd")
    convert(folder, a, dst_format="tar", shard_size=10, seed=3)
    convert(folder, b, dst_format="tar", shard_size=10, seed=3)
    convert(folder, c, dst_format="tar", shard_size=10, seed=4)
    assert main(["convert", str(folder), str(d), "--to", "tar", "--shard-size", "10",
                 "--no-shuffle", "-q"]) == 0
    assert [k for k, _, _ in _all(a)] == [k for k, _, _ in _all(b)]
    assert [k for k, _, _ in _all(a)] != [k for k, _, _ in _all(c)]
    keys = [k for k, _, _ in _all(d)]
    assert keys == sorted(keys)  # source order: class by class, file by file


def test_classes_read_back_like_torchvision(tmp_path, folder):
    from turboloader.data import TarDataset

    out = tmp_path / "shards"
    convert(folder, out, dst_format="tar", shard_size=10)
    ref = torchvision.datasets.ImageFolder(str(folder))
    ds = TarDataset(str(out / "shard-{00000..00003}.tar"), shuffle=False)
    assert ds.classes == ref.classes and ds.class_to_idx == ref.class_to_idx
    # labels in the shards are those indices: each sample's class name is its folder
    for key, _, label in _all(out):
        assert key.split("/")[0] == ds.classes[label]
    # without classes.json, like a WebDataset shard set from elsewhere
    (out / "classes.json").unlink()
    ds = TarDataset(str(out / "shard-00000.tar"), shuffle=False)
    assert ds.classes is None and ds.class_to_idx is None


def test_preview_picks_a_seeded_random_set(tmp_path, folder):
    out = tmp_path / "shards"
    convert(folder, out, dst_format="tar", shard_size=10, shuffle=False)
    keys = {s: [x.key for x in _pick_samples(str(out), None, 6, s)[0]] for s in (0, 0, 1)}
    first = [x.key for x in _pick_samples(str(out), None, 6, 0)[0]]
    assert keys[0] == first and keys[0] != keys[1]
    # not simply the head of the first shard
    assert {k.split("/")[0] for k in first} != {"ant"}


def test_convert_help_shows_the_pattern_example():
    proc = subprocess.run([sys.executable, "-m", "turboloader.tools.cli", "convert", "--help"],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr
    assert "val-shards/val-%05d.tar" in proc.stdout and "%%" not in proc.stdout.split(
        "positional arguments")[0]
    assert "--no-shuffle" in proc.stdout and "--seed" in proc.stdout


def test_inspect_into_head_exits_quietly(tmp_path):
    from turboloader.io.tbl import TBLWriter

    path = tmp_path / "many.tbl"
    jpg = _jpeg(0)
    with TBLWriter(path) as w:
        for i in range(3000):  # 3000 label lines: far more than a pipe buffer holds
            w.write(jpg, key=f"k{i}", label=i)
    cmd = f"{sys.executable} -m turboloader.tools.cli inspect {path} --top 100000 | head -n 2"
    proc = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.stdout.splitlines()[0].endswith("many.tbl: tbl v1.0") or \
        "many.tbl: tbl" in proc.stdout.splitlines()[0]
    assert len(proc.stdout.splitlines()) == 2
    assert proc.stderr == ""  # no BrokenPipeError traceback, no "Exception ignored"


def _hostile_labels_tar(path):
    jpg = _jpeg(1)
    samples = [("a", b"1"), ("k" * 65536, b"2"), ("b", b"99999999999999999999999"),
               ("c", b"x1"), ("d", b"3")]
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
        for key, label in samples:
            for ext, data in (("jpg", jpg), ("cls", label)):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))


def test_bad_label_and_huge_key_are_listed_skips(tmp_path, capsys):
    src = tmp_path / "s.tar"
    _hostile_labels_tar(src)
    report = convert(src, tmp_path / "o.tbl")
    assert report.written == 2
    skipped = {s.key[:8]: s.reason for s in report.skipped}
    assert set(skipped) == {"k" * 8, "b", "c"}
    assert skipped["k" * 8].startswith("SampleError") and "key is 65536 bytes" in skipped["k" * 8]
    assert "int64" in skipped["b"]
    from turboloader.io.tbl import TBLFile

    with TBLFile(tmp_path / "o.tbl") as f:
        assert sorted(zip(f.keys, f.labels.tolist())) == [("a", 1), ("d", 3)]
    # the CLI: exit 3 with the skips listed (keys shortened); --strict stops with exit 1
    assert main(["convert", str(src), str(tmp_path / "p.tbl"), "-q"]) == 3
    out = capsys.readouterr().out
    assert "skipped: 3" in out and "(65536 characters)" in out and len(out) < 5000
    assert main(["convert", str(src), str(tmp_path / "q.tbl"), "-q", "--strict"]) == 1


def test_strict_names_the_sample_and_says_what_happened(tmp_path, capsys):
    src = tmp_path / "s.tar"
    _hostile_labels_tar(src)
    assert main(["convert", str(src), str(tmp_path / "q.tbl"), "-q", "--strict",
                 "--no-shuffle"]) == 1
    err = capsys.readouterr().err
    assert "(65536 characters)" in err and len(err) < 2000
    assert "strict: stopped at the first bad sample, after 1 written" in err
    assert not (tmp_path / "q.tbl").exists()


def test_shuffled_tar_source_with_a_malformed_shard_lists_it(tmp_path, folder):
    out = tmp_path / "shards"
    convert(folder, out, dst_format="tar", shard_size=10, shuffle=False)
    (out / "shard-00001.tar").write_bytes(b"\x01" * 1024)  # bad header checksum
    report = convert(out, tmp_path / "again", dst_format="tar", shard_size=10, seed=5)
    assert report.written == 30
    assert [s.source for s in report.skipped] == [str(out / "shard-00001.tar")]
    assert report.skipped[0].reason.startswith("TarFormatError")
