"""Completeness is checkable (issue 12.4): a TAR without its end-of-archive blocks is
reported, converters write a manifest last and atomically, and verify requires and checks
it, including after a convert killed mid-run with SIGKILL."""

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from turboloader.tools.convert import check_manifest, convert, verify_dataset
from turboloader.errors import ManifestError, TarFormatError, TruncatedArchiveWarning
from turboloader.io.tar import TarIndex

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120


def _jpeg(seed):
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (20, 20, 3), np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "turboloader.tools.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=TIMEOUT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "folder"
    for label, c in enumerate(("a", "b", "c")):
        (root / c).mkdir(parents=True)
        for i in range(4):
            (root / c / f"{c}{i}.jpg").write_bytes(_jpeg(10 * label + i))
    return root


def _cut_tar(tmp_path, n=3):
    """A TAR cut exactly after its last member: no end-of-archive blocks."""
    path = tmp_path / "cut.tar"
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for i in range(n):
            data = _jpeg(i)
            info = tarfile.TarInfo(f"{i:03d}.jpg")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
            info = tarfile.TarInfo(f"{i:03d}.cls")
            info.size = 1
            t.addfile(info, io.BytesIO(b"0"))
    raw = path.read_bytes()
    end = 0
    with tarfile.open(path) as t:
        for m in t.getmembers():
            end = m.offset_data + -(-m.size // 512) * 512
    path.write_bytes(raw[:end])
    assert len(raw) > end and not any(raw[end:])  # only zero blocks were removed
    return path


def test_missing_end_of_archive_warns_and_strict_raises(tmp_path):
    path = _cut_tar(tmp_path)
    with tarfile.open(path) as t:  # oracle: stdlib reads the same members
        oracle = [(m.name, m.offset_data, m.size) for m in t.getmembers()]
    with pytest.warns(TruncatedArchiveWarning, match="without an end-of-archive block"):
        index = TarIndex(path)
    with index:
        assert not index.complete
        assert list(zip(index.names, index.offsets.tolist(), index.sizes.tolist())) == oracle
    with pytest.raises(TarFormatError, match="end-of-archive") as info:
        TarIndex(path, strict=True)
    assert str(path) in " ".join(info.value.__notes__)


def test_complete_archive_gives_no_warning(tmp_path):
    path = tmp_path / "ok.tar"
    with tarfile.open(path, "w") as t:
        info = tarfile.TarInfo("x.cls")
        info.size = 1
        t.addfile(info, io.BytesIO(b"1"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with TarIndex(path, strict=True) as index:
            assert index.complete and index.names == ["x.cls"]


def test_verify_fails_on_a_tar_cut_at_a_member_boundary(tmp_path):
    path = _cut_tar(tmp_path)
    proc = _cli("verify", path, "--no-manifest", "-q")
    assert proc.returncode == 1
    assert f"{path}: None: TarFormatError: no end-of-archive block" in proc.stdout


def test_tar_manifest_matches_stdlib_and_hashlib(tmp_path, folder):
    out = tmp_path / "shards"
    report = convert(folder, out, dst_format="tar", shard_size=5)
    man = json.loads((out / "manifest.json").read_text())
    assert man["complete"] and man["layout"] == "tar" and man["samples"] == 12
    assert man["classes"] == ["a", "b", "c"]
    assert [os.path.join(out, e["path"]) for e in man["shards"]] == report.outputs
    for e in man["shards"]:
        p = out / e["path"]
        with tarfile.open(p) as t:
            assert e["samples"] == len([m for m in t.getnames() if m.endswith(".jpg")])
        assert e["bytes"] == p.stat().st_size
        assert e["sha256"] == hashlib.sha256(p.read_bytes()).hexdigest()
    assert check_manifest(out)["samples"] == 12
    assert _cli("verify", out, "-q").returncode == 0


@pytest.mark.slow
def test_folder_manifest(tmp_path, folder):
    out = tmp_path / "copy"
    convert(folder, out)
    man = check_manifest(out)
    assert man["layout"] == "folder" and man["samples"] == 12
    assert {e["path"]: e["samples"] for e in man["shards"]} == {"a": 4, "b": 4, "c": 4}
    assert _cli("verify", out, "-q").returncode == 0
    (out / "b" / "b1.jpg").unlink()
    with pytest.raises(ManifestError, match="'b': samples is 3, the manifest records 4"):
        check_manifest(out)


def test_verify_requires_the_manifest(tmp_path, folder):
    out = tmp_path / "shards"
    convert(folder, out, dst_format="tar", shard_size=5)
    (out / "manifest.json").unlink()
    proc = _cli("verify", out, "-q")
    assert proc.returncode == 1 and "has no manifest.json" in proc.stderr
    assert "--no-manifest" in proc.stderr
    assert _cli("verify", out, "-q", "--no-manifest").returncode == 0


@pytest.mark.parametrize("damage", ["delete", "replace", "extra"])
def test_manifest_mismatch_is_named(tmp_path, folder, damage):
    out = tmp_path / "shards"
    convert(folder, out, dst_format="tar", shard_size=5)
    victim = out / "shard-00001.tar"
    if damage == "delete":
        victim.unlink()
        match = "shard 'shard-00001.tar' is missing"
    elif damage == "replace":  # a complete-looking shard with fewer samples
        with tarfile.open(victim) as t:
            members = [(m, t.extractfile(m).read()) for m in t.getmembers()][:4]
        with tarfile.open(victim, "w") as t:
            for m, data in members:
                t.addfile(m, io.BytesIO(data))
        match = "'shard-00001.tar': bytes is"
    else:
        (out / "shard-00009.tar").write_bytes(victim.read_bytes())
        match = "shard-00009.tar' is not in the manifest"
    with pytest.raises(ManifestError, match=match):
        verify_dataset(out, manifest=True, workers=1)
    proc = _cli("verify", out, "-q")
    assert proc.returncode == 1 and "ManifestError" not in proc.stdout
    assert "shard-0000" in proc.stderr


_KILLABLE = """
import os, sys, time
import turboloader.tools.convert as C
calls = [0]
real = C._Processor.__call__
def slow(self, s):
    calls[0] += 1
    if calls[0] == int(sys.argv[3]):
        print("STALLED", flush=True)
        time.sleep(3600)  # the test SIGKILLs us here, mid-run
    return real(self, s)
C._Processor.__call__ = slow
C.convert(sys.argv[1], sys.argv[2], dst_format=sys.argv[4], shard_size=2)
"""


@pytest.mark.slow
@pytest.mark.parametrize("dst_format", ["tar", "folder"])
def test_convert_killed_mid_run_is_rejected_by_verify(tmp_path, folder, dst_format):
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-c", _KILLABLE, str(folder), str(out), "8",
                             dst_format], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert proc.stdout.readline().strip() == "STALLED"
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=TIMEOUT) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if dst_format == "tar":
        # complete-looking shards were left behind: stdlib reads them without complaint
        finished = sorted(out.glob("*.tar"))
        assert len(finished) == 3
        for p in finished:
            with tarfile.open(p) as t:
                assert len(t.getnames()) == 4
    else:
        assert len(list(out.rglob("*.jpg"))) == 7
    man = json.loads((out / "manifest.json").read_text())
    assert man["complete"] is False
    res = _cli("verify", out, "-q")
    assert res.returncode == 1
    assert "did not finish" in res.stderr and "incomplete" in res.stderr


def test_tar_dataset_strict_tar(tmp_path):
    from turboloader.data import TarDataset

    path = _cut_tar(tmp_path)
    with pytest.warns(TruncatedArchiveWarning):
        assert len(TarDataset(str(path), shuffle=False)) == 3
    with pytest.raises(TarFormatError, match="end-of-archive") as info:
        TarDataset(str(path), shuffle=False, strict_tar=True)
    assert str(path) in " ".join(info.value.__notes__)
    with pytest.warns(RuntimeWarning, match="leaving out malformed shard"):
        ds = TarDataset(str(path), shuffle=False, strict_tar=True, on_error="skip")
    assert ds.urls == [] and ds.failed_shards[0]["shard"] == str(path)


def test_single_tar_outputs_have_their_own_manifest(tmp_path, folder):
    convert(folder, tmp_path / "a.tar")
    convert(folder, tmp_path / "b.tar", shuffle=False)
    for name in ("a.tar", "b.tar"):
        man = check_manifest(tmp_path / name)
        assert [e["path"] for e in man["shards"]] == [name] and man["samples"] == 12
        assert _cli("verify", tmp_path / name, "-q").returncode == 0
    # a shard the manifest does not list is not vouched for
    (tmp_path / "sub").mkdir()
    convert(folder, tmp_path / "sub" / "s-%02d.tar", shard_size=6)
    (tmp_path / "sub" / "other.tar").write_bytes((tmp_path / "a.tar").read_bytes())
    with pytest.raises(ManifestError, match="other.tar' is not in the manifest"):
        check_manifest(tmp_path / "sub" / "other.tar")
    assert check_manifest(tmp_path / "sub" / "s-01.tar")["samples"] == 12


@pytest.mark.slow
def test_splits_share_a_folder_each_with_its_manifest_and_classes(tmp_path, folder):
    # converting val into the folder that holds train replaced train's manifest.json and
    # classes.json: `verify shards` then failed ("shard ... is not in the manifest") and
    # train's class names were val's. One manifest and classes file per output prefix:
    val = tmp_path / "val"
    for label, c in enumerate(("x", "y")):
        (val / c).mkdir(parents=True)
        for i in range(3):
            (val / c / f"{c}{i}.jpg").write_bytes(_jpeg(100 + 10 * label + i))
    out = tmp_path / "shards"
    train_r = convert(folder, out / "train-%05d.tar", shard_size=5)
    val_r = convert(val, out / "val-%05d.tar", shard_size=4)
    assert sorted(p.name for p in out.iterdir()) == [
        "train-00000.tar", "train-00001.tar", "train-00002.tar", "train-classes.json",
        "train-manifest.json", "val-00000.tar", "val-00001.tar", "val-classes.json",
        "val-manifest.json"]
    man = json.loads((out / "train-manifest.json").read_text())
    assert [os.path.join(out, e["path"]) for e in man["shards"]] == train_r.outputs
    assert man["classes"] == ["a", "b", "c"]
    # each split, and the folder as a whole, verifies against its manifests
    assert check_manifest(out / "val-{00000..00001}.tar")["samples"] == 6
    assert check_manifest(out / "train-00001.tar")["samples"] == 12
    whole = check_manifest(out)
    assert whole["samples"] == 18 and whole["classes"] is None
    assert len(whole["manifests"]) == 2
    for arg in (out, out / "train-*.tar", out / "val-00000.tar"):
        proc = _cli("verify", arg, "-q")
        assert proc.returncode == 0, proc.stdout + proc.stderr
    # each split's dataset has its own class names; labels index them as ImageFolder's
    from turboloader.data import TarDataset

    train = TarDataset(str(out / "train-*.tar"), shuffle=False)
    valds = TarDataset(val_r.outputs, shuffle=False)
    assert train.classes == ["a", "b", "c"] and valds.classes == ["x", "y"]
    assert sorted(train.classes[y] for _, y in train) == sorted(["a", "b", "c"] * 4)
    # a shard added to the folder by hand is in no manifest: verify says so
    (out / "val-00002.tar").write_bytes((out / "val-00000.tar").read_bytes())
    with pytest.raises(ManifestError, match="val-00002.tar' is not in the manifest"):
        check_manifest(out)
    proc = _cli("verify", out, "-q")
    assert proc.returncode == 1 and "val-00002.tar' is not in the manifest" in proc.stderr


def test_a_refused_conversion_leaves_the_existing_manifest_alone(tmp_path, folder):
    out = tmp_path / "shards"
    convert(folder, out / "train-%05d.tar", shard_size=5)
    before = (out / "train-manifest.json").read_bytes()
    with pytest.raises(FileExistsError, match="train-manifest.json' exists"):
        convert(folder, out / "train-%05d.tar", shard_size=5)
    assert (out / "train-manifest.json").read_bytes() == before
    assert check_manifest(out)["samples"] == 12
    # overwrite=True replaces the set, manifest included
    convert(folder, out / "train-%05d.tar", shard_size=6, overwrite=True)
    assert check_manifest(out / "train-00000.tar")["shards"][0]["samples"] == 6
