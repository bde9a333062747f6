"""Fixtures for the data tests: tiny shards generated in tmp_path."""

import pytest
from helpers.shards import labelled_members, write_tar


@pytest.fixture
def make_shards(tmp_path):
    """make_shards([3, 5, 1], suffix=".tar") -> paths; sample ids (= labels) run 0..n-1."""

    def make(sizes, suffix=".tar", name="shard"):
        paths, start = [], 0
        for k, n in enumerate(sizes):
            paths.append(write_tar(tmp_path / f"{name}-{k:03d}{suffix}",
                                   labelled_members(range(start, start + n))))
            start += n
        return paths

    return make

