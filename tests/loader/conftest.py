"""Fixtures for the loader tests: tiny TAR shards and an image folder in tmp_path."""

import pytest

from helpers.shards import jpeg, labelled_members, write_tar


@pytest.fixture
def shards(tmp_path):
    """3 shards of 10, 9 and 7 samples; sample ids (= labels) 0..25."""
    paths, start = [], 0
    for k, n in enumerate((10, 9, 7)):
        paths.append(write_tar(tmp_path / f"s-{k}.tar", labelled_members(range(start, start + n))))
        start += n
    return paths


@pytest.fixture
def corrupt_shards(tmp_path):
    """2 shards of 8 samples; sample 5 is not a decodable JPEG."""
    members = labelled_members(range(16))
    bad = [(n, b"\xff\xd8\xff" + b"garbage" * 9) if n == "000005.jpg" else (n, d) for n, d in members]
    return [write_tar(tmp_path / "c-0.tar", bad[:16]), write_tar(tmp_path / "c-1.tar", bad[16:])]


@pytest.fixture
def folder(tmp_path):
    """An ImageFolder tree: 3 classes, 21 images."""
    root = tmp_path / "folder"
    for i in range(21):
        d = root / f"class{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:03d}.jpg").write_bytes(jpeg(i))
    return root
