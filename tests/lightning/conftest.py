"""Fixtures for the Lightning tests: tiny TAR shards and class folders in tmp dirs.

Labels are the sample indices (0..n-1), so a label identifies the sample a rank saw.
"""

import io
import os
import tarfile

import pytest

from turboloader.tools.synthetic import synthetic_jpegs

N = 16


def write_shards(directory, jpegs, per_shard):
    paths = []
    for s in range(0, len(jpegs), per_shard):
        path = os.path.join(directory, f"shard-{s // per_shard:04d}.tar")
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
            for i in range(s, min(s + per_shard, len(jpegs))):
                for name, data in ((f"{i:06d}.jpg", jpegs[i]), (f"{i:06d}.cls", str(i).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
        paths.append(path)
    return paths


@pytest.fixture(scope="session")
def jpegs():
    return [jpeg for jpeg, _ in synthetic_jpegs(N, seed=3, short_side=(40, 64))]


@pytest.fixture(scope="session")
def shards(jpegs, tmp_path_factory):
    """Brace pattern of 4 shards x 4 samples, labels 0..15."""
    d = tmp_path_factory.mktemp("shards")
    write_shards(str(d), jpegs, 4)
    return str(d / "shard-{0000..0003}.tar")


@pytest.fixture(scope="session")
def folder(jpegs, tmp_path_factory):
    """Class folders a/ and b/ with 8 JPEGs each (ImageFolder labels 0 and 1)."""
    d = tmp_path_factory.mktemp("folder")
    for i, jpeg in enumerate(jpegs):
        sub = d / ("a" if i % 2 == 0 else "b")
        sub.mkdir(exist_ok=True)
        (sub / f"{i:06d}.jpg").write_bytes(jpeg)
    return str(d)
