"""Hostile folders: FIFOs, devices, symlink loops and oversized files are typed, named skips
or errors, never a hang or an unbounded read (issue 12.3). Anything that could hang runs in
a subprocess with a timeout."""

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from turboloader.tools.convert import convert, verify_dataset
from turboloader.io.files import read_file
from turboloader.errors import TarFormatError, UnreadableFileError

pytestmark = pytest.mark.slow  # command-line runs in subprocesses, with timeouts

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120  # generous on a loaded 2-core machine; a hang would be "forever"


def _jpeg(seed, size=24):
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (size, size, 3), np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def _cli(*args, env=None):
    """Run ``turboloader ARGS`` in a fresh interpreter; a hang fails the test via timeout."""
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "turboloader.tools.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=TIMEOUT, env=full_env,
                          stdin=subprocess.DEVNULL)


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "root"
    for c in ("cat", "dog"):
        (root / c).mkdir(parents=True)
        for i in range(3):
            (root / c / f"{i}.jpg").write_bytes(_jpeg(hash((c, i)) % 1000))
    return root


needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this OS")


@needs_fifo
@pytest.mark.parametrize("command", [["convert", "{root}", "{tmp}/out.tbl"],
                                     ["verify", "{root}", "--no-manifest", "-q"],
                                     ["inspect", "{root}"]])
def test_fifo_named_jpg_is_skipped_not_waited_on(tmp_path, tree, command):
    fifo = tree / "cat" / "blocker.jpg"
    os.mkfifo(fifo)
    args = [a.format(root=tree, tmp=tmp_path) for a in command]
    proc = _cli(*args)
    if command[0] == "convert":
        assert proc.returncode == 3, proc.stderr  # finished, with a listed skip
        assert "blocker" in proc.stdout and "not a regular file" in proc.stdout
        assert "samples written: 6" in proc.stdout
    elif command[0] == "verify":
        assert proc.returncode == 1, proc.stderr
        assert f"{fifo}" in proc.stdout and "not a regular file" in proc.stdout
        assert "checked 7 samples: 6 ok, 1 bad" in proc.stdout
    else:
        assert proc.returncode == 0, proc.stderr
        assert "samples: 6" in proc.stdout and "unreadable: 1" in proc.stdout


@needs_fifo
def test_fifo_named_tar_is_a_typed_error(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    os.mkfifo(shards / "a.tar")
    proc = _cli("verify", shards, "--no-manifest", "-q")
    assert proc.returncode == 1
    assert "not a regular file" in proc.stdout + proc.stderr
    with pytest.raises(TarFormatError, match="not a regular file"):
        from turboloader.io.tar import TarIndex

        TarIndex(shards / "a.tar")
    proc = _cli("inspect", shards / "a.tar")
    assert proc.returncode == 1 and "not a regular file" in proc.stderr


def test_symlink_loop_ends_and_reads_each_image_once(tmp_path, tree):
    (tree / "cat" / "loop").symlink_to(tree / "cat", target_is_directory=True)
    (tree / "dog" / "up").symlink_to(tree, target_is_directory=True)
    proc = _cli("convert", tree, tmp_path / "out.tbl")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "samples written: 6" in proc.stdout  # no image twice
    assert "symlink loop" in proc.stdout and str(tree / "cat" / "loop") in proc.stdout
    from turboloader.io.tbl import TBLFile

    with TBLFile(tmp_path / "out.tbl") as f:
        keys = f.keys
    assert sorted(keys) == sorted(f"{c}/{i}" for c in ("cat", "dog") for i in range(3))


def test_symlink_to_dev_zero_fails_at_once_like_torchvision(tmp_path, tree):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    (tree / "cat" / "zero.jpg").symlink_to("/dev/zero")
    script = f"""
import sys, torchvision
import turboloader
from turboloader.errors import UnreadableFileError
root = {str(tree)!r}
ref = torchvision.datasets.ImageFolder(root)
idx = [i for i, (p, _) in enumerate(ref.samples) if p.endswith('zero.jpg')][0]
try:
    ref[idx]
except Exception as exc:
    print('torchvision:', type(exc).__name__)
ds = turboloader.ImageFolder(root)
assert [p for p, _ in ds.samples] == [p for p, _ in ref.samples]
try:
    ds[idx]
except UnreadableFileError as exc:
    print('turboloader:', type(exc).__name__, exc, *getattr(exc, '__notes__', ()))
skip = turboloader.ImageFolder(root, on_error='skip', max_failures=1)
img, label = skip[idx]
print('skipped:', len(skip.stats()['skipped']))
# this process image's peak: ru_maxrss would carry pytest's own peak across fork and exec
print('peak MiB:', next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')) // 1024)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=TIMEOUT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "torchvision: UnidentifiedImageError" in out  # the oracle fails at once too
    assert "turboloader: UnreadableFileError" in out and "zero.jpg" in out
    assert "not a regular file" in out
    assert "skipped: 1" in out
    peak = int(out.rsplit("peak MiB:", 1)[1].split()[0])
    assert peak < 2048  # nothing like "read until MemoryError"


def test_member_size_limit_is_a_named_skip_and_can_be_raised(tmp_path, tree):
    big = tree / "dog" / "big.jpg"
    big.write_bytes(_jpeg(7, size=256))
    limit = big.stat().st_size - 1
    proc = _cli("convert", tree, tmp_path / "a.tbl", env={"TURBOLOADER_MAX_FILE_BYTES": str(limit)})
    assert proc.returncode == 3
    assert "big" in proc.stdout and "member-size limit" in proc.stdout
    assert "TURBOLOADER_MAX_FILE_BYTES" in proc.stdout
    proc = _cli("convert", tree, tmp_path / "b.tbl",
                env={"TURBOLOADER_MAX_FILE_BYTES": str(limit + 1)})
    assert proc.returncode == 0 and "samples written: 7" in proc.stdout


def test_read_file_bounds(tmp_path):
    p = tmp_path / "x.bin"
    p.write_bytes(b"a" * 100)
    assert read_file(p) == b"a" * 100
    assert read_file(p, max_bytes=100) == b"a" * 100
    with pytest.raises(UnreadableFileError, match="over the member-size limit of 99"):
        read_file(p, max_bytes=99)
    with pytest.raises(UnreadableFileError, match="not a regular file"):
        read_file(tmp_path)  # a directory
    with pytest.raises(FileNotFoundError):
        read_file(tmp_path / "missing.jpg")


def test_verify_api_lists_a_device_member(tmp_path, tree):
    if not os.path.exists("/dev/null"):
        pytest.skip("no /dev/null")
    (tree / "dog" / "null.jpg").symlink_to("/dev/null")
    checked, bad = verify_dataset(tree, workers=1)
    assert checked == 7 and len(bad) == 1
    assert bad[0].source.endswith("null.jpg") and "UnreadableFileError" in bad[0].reason
    report = convert(tree, tmp_path / "o.tbl")
    assert report.written == 6 and [s.key for s in report.skipped] == ["dog/null.jpg"]
