"""Fixtures for the seed-example tests: a tiny labelled TAR shard and image files (the
helpers the tests import are in tests/helpers/seeds.py)."""

import io
import tarfile

import pytest

from helpers.seeds import N
from turboloader.tools.synthetic import synthetic_jpegs


@pytest.fixture(scope="session")
def data(tmp_path_factory):
    """A dict: ``tar`` (one labelled shard, N samples, labels = index), ``paths`` (the same
    JPEGs as files), ``labels``."""
    d = tmp_path_factory.mktemp("seeddata")
    jpegs = [j for j, _ in synthetic_jpegs(N, seed=5, short_side=(40, 64))]
    tar = d / "train.tar"
    with tarfile.open(tar, "w", format=tarfile.USTAR_FORMAT) as tf:
        for i, jpeg in enumerate(jpegs):
            for name, blob in ((f"{i:06d}.jpg", jpeg), (f"{i:06d}.cls", str(i).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(blob)
                tf.addfile(info, io.BytesIO(blob))
    paths = []
    for i, jpeg in enumerate(jpegs):
        p = d / f"img{i:03d}.jpg"
        p.write_bytes(jpeg)
        paths.append(str(p))
    return {"tar": str(tar), "paths": paths, "labels": list(range(N)), "dir": str(d)}


