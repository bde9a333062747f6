"""Small files replaced whole (``io.files.replace_file``: the statistics snapshot, cached
counts, the ShardCache's counters, manifests), and the snapshot read back by ``stats()``."""

import json
import os
import threading

import pytest

from turboloader.data.telemetry import Recorder
from turboloader.io.files import replace_file


def test_replace_file_writes_the_bytes_and_replaces_the_old_file(tmp_path):
    path, tmp = str(tmp_path / "w.json"), str(tmp_path / "w.json.tmp")
    replace_file(path, b"old", tmp=tmp)
    data = bytes(range(256)) * 4096   # larger than one write may take
    replace_file(path, data, tmp=tmp)
    with open(path, "rb") as fh:
        assert fh.read() == data
    assert sorted(os.listdir(tmp_path)) == ["w.json"]


def test_replace_file_removes_its_temporary_file_when_the_rename_fails(tmp_path):
    target = tmp_path / "a_directory"
    (target / "inside").mkdir(parents=True)   # a non-empty directory: rename fails
    tmp = str(tmp_path / "x.tmp")
    with pytest.raises(OSError):
        replace_file(str(target), b"{}", tmp=tmp)
    assert sorted(os.listdir(tmp_path)) == ["a_directory"]


def test_replace_file_raises_when_the_directory_is_gone(tmp_path):
    gone = tmp_path / "gone"
    with pytest.raises(FileNotFoundError):
        replace_file(str(gone / "x.json"), b"{}", tmp=str(gone / "x.tmp"))


def test_without_tmp_a_failed_rename_leaves_no_file_behind(tmp_path):
    target = tmp_path / "a_directory"
    (target / "inside").mkdir(parents=True)
    with pytest.raises(OSError):
        replace_file(str(target), b"{}")
    with pytest.raises(OSError):
        replace_file(str(target), b"{}", durable=True)
    assert sorted(os.listdir(tmp_path)) == ["a_directory"]


def test_durable_writes_the_same_bytes(tmp_path):
    path = str(tmp_path / "m.json")
    replace_file(path, b"first", durable=True)
    replace_file(path, b"second", durable=True)
    with open(path, "rb") as fh:
        assert fh.read() == b"second"
    assert os.listdir(tmp_path) == ["m.json"]


def test_concurrent_writers_never_show_a_partial_file(tmp_path):
    # four threads replace one file with their own whole contents while a reader reads it:
    # every read is one writer's bytes entire (each thread's temporary file is its own)
    path = str(tmp_path / "c.json")
    bodies = [bytes([65 + i]) * (1 << 18) for i in range(4)]
    replace_file(path, bodies[0])
    stop = threading.Event()
    errors = []

    def write(body):
        try:
            while not stop.is_set():
                replace_file(path, body)
        except BaseException as e:   # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    try:
        for _ in range(300):
            with open(path, "rb") as fh:
                got = fh.read()
            assert got in bodies
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    assert os.listdir(tmp_path) == ["c.json"]


def test_a_flushed_snapshot_is_the_counters_as_json(tmp_path):
    path = str(tmp_path / "s.json")
    rec = Recorder(path, "stream-0")
    rec.counters(3)["samples"] += 7
    rec.flush()
    with open(path, encoding="ascii") as fh:
        snap = json.load(fh)
    assert snap["name"] == "stream-0" and snap["pid"] == os.getpid()
    assert snap["epochs"]["3"]["samples"] == 7
    assert Recorder(path, "stream-0").epochs[3]["samples"] == 7   # read back on reopen
    assert sorted(os.listdir(tmp_path)) == ["s.json"]   # no temporary file left
    os.remove(path)
    os.rmdir(tmp_path)
    rec.flush()   # the owning dataset's directory is gone: nothing written, nothing raised
