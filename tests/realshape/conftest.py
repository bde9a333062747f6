"""Data with the shapes users have, written once per session and shared by the tests of the
real-shape tier: hundreds to a thousand shards, ~1000 samples a shard, many small Parquet row
groups, 2-sample shards, a rare aspect ratio. Samples are tiny JPEGs (8 x 8, a few hundred
bytes), so what costs time is the number of samples and shards, as it is for users (see
``helpers.realshape``)."""

import pytest

from helpers.realshape import JPEGS, imagenet_sizes, is_wide, WIDE, write_shards


@pytest.fixture(scope="session")
def shapes_root(tmp_path_factory):
    return tmp_path_factory.mktemp("realshape")


@pytest.fixture(scope="session")
def k40(shapes_root):
    """40 shards x 1000 samples (the shape of issue #30's crash)."""
    return write_shards(str(shapes_root / "k40"), [1000] * 40)


@pytest.fixture(scope="session")
def in1k(shapes_root):
    """ImageNet's 1024 shards, each holding 5 samples (ImageNet's 1251-1252 would only add
    time; the shard -> worker assignment at full size is checked on the sharding itself)."""
    return write_shards(str(shapes_root / "in1k"), imagenet_sizes(1024, 5 * 1024 + 37))


@pytest.fixture(scope="session")
def pairs(shapes_root):
    """300 shards of 2 samples."""
    return write_shards(str(shapes_root / "pairs"), [2] * 300)


@pytest.fixture(scope="session")
def rare(shapes_root):
    """60 shards x 100 samples; about 1 in 100 is wide (8 x 16), spread over every shard."""
    return write_shards(str(shapes_root / "rare"), [100] * 60,
                        image=lambda i: WIDE if is_wide(i) else JPEGS[i % 64])


@pytest.fixture(scope="session")
def parquet_files(shapes_root):
    """4 Parquet files x 1000 rows in row groups of 10 (400 row groups)."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    root = shapes_root / "parquet"
    root.mkdir()
    paths = []
    for f in range(4):
        ids = list(range(f * 1000, (f + 1) * 1000))
        path = str(root / f"part-{f}.parquet")
        pq.write_table(pa.table({"image": [JPEGS[i % 64] for i in ids], "label": ids}), path,
                       row_group_size=10)
        paths.append(path)
    return paths
