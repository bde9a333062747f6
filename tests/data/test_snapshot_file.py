"""The statistics snapshot's file: written whole and renamed over the old one
(``telemetry.replace_file``), read back by ``stats()``."""

import json
import os

import pytest

from turboloader.data.telemetry import Recorder, replace_file


def test_replace_file_writes_the_bytes_and_replaces_the_old_file(tmp_path):
    path, tmp = str(tmp_path / "w.json"), str(tmp_path / "w.json.tmp")
    replace_file(tmp, path, b"old")
    data = bytes(range(256)) * 4096   # larger than one write may take
    replace_file(tmp, path, data)
    with open(path, "rb") as fh:
        assert fh.read() == data
    assert sorted(os.listdir(tmp_path)) == ["w.json"]


def test_replace_file_removes_its_temporary_file_when_the_rename_fails(tmp_path):
    target = tmp_path / "a_directory"
    (target / "inside").mkdir(parents=True)   # a non-empty directory: rename fails
    tmp = str(tmp_path / "x.tmp")
    with pytest.raises(OSError):
        replace_file(tmp, str(target), b"{}")
    assert sorted(os.listdir(tmp_path)) == ["a_directory"]


def test_replace_file_raises_when_the_directory_is_gone(tmp_path):
    gone = tmp_path / "gone"
    with pytest.raises(FileNotFoundError):
        replace_file(str(gone / "x.tmp"), str(gone / "x.json"), b"{}")


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
