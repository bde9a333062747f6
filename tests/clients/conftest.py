"""The client tier: the code paths of the clients users bring (torchvision's classification
and detection references, timm, Lightning) on small generated data.

Every source holds N samples whose label is the sample's index (a folder: one class per
sample), so the labels a run saw name the samples it saw.
"""

import json
import os

import pytest

from turboloader.tools.synthetic import synthetic_jpegs

N = 16


@pytest.fixture(scope="session")
def jpegs():
    return [jpeg for jpeg, _ in synthetic_jpegs(N, seed=11, short_side=(40, 64))]


@pytest.fixture(scope="session")
def sources(jpegs, tmp_path_factory):
    """``{kind: source}`` for every kind ``TurboDataModule`` takes: a class folder, a JSON
    Lines manifest, TAR shards (brace pattern), a TBL file and a Parquet file."""
    from helpers.shards import write_tar

    d = tmp_path_factory.mktemp("clients")
    folder = d / "folder"
    for i, jpeg in enumerate(jpegs):  # class c{i:02d} holds sample i: class index == i
        (folder / f"c{i:02d}").mkdir(parents=True)
        (folder / f"c{i:02d}" / f"{i:04d}.jpg").write_bytes(jpeg)
    (d / "img").mkdir()
    rows = []
    for i, jpeg in enumerate(jpegs):
        (d / "img" / f"{i:04d}.jpg").write_bytes(jpeg)
        rows.append(json.dumps({"path": f"img/{i:04d}.jpg", "label": i}))
    (d / "train.jsonl").write_text("\n".join(rows) + "\n")
    (d / "shards").mkdir()
    for s in range(4):
        write_tar(str(d / "shards" / f"shard-{s:04d}.tar"),
                  [m for i in range(4 * s, 4 * s + 4)
                   for m in ((f"{i:06d}.jpg", jpegs[i]), (f"{i:06d}.cls", str(i).encode()))])
    from turboloader.tools.convert import convert

    convert(str(d / "shards"), str(d / "train.tbl"))
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"image": [{"bytes": j, "path": None} for j in jpegs],
                             "label": list(range(N))}), str(d / "train.parquet"))
    return {"folder": str(folder), "manifest": str(d / "train.jsonl"),
            "shards": str(d / "shards" / "shard-{0000..0003}.tar"),
            "tbl": str(d / "train.tbl"), "parquet": str(d / "train.parquet")}
