"""The same images from TAR shards, Parquet and a CSV manifest: the train pipeline's throughput
of TarDataset, ParquetDataset and ManifestDataset, measured in the same run.

Rows, all on the same JPEGs (``benchmarks/datasets.py``), train pipeline RandomResizedCrop(224)
+ RandomHorizontalFlip + ToTensor + Normalize (fused decode + transform), shuffled, labels:

* ``TarDataset``: WebDataset TAR shards of ``--shard-size`` samples;
* ``ParquetDataset``: one Parquet file, row groups of ``--shard-size`` rows (an image and a
  label column, plus a caption column it never reads);
* ``ManifestDataset``: one JPEG file per image and a CSV manifest, read in random order.

Each runs under ``torch.utils.data.DataLoader(batch_size=--batch, num_workers=--workers)``
(the map-style manifest with ``shuffle=True``). Systems are interleaved pass by pass and the
best pass of each is kept, so a neighbour's load hits all of them alike; the ratio column is
against the TarDataset row of the same run.

    python benchmarks/bench_datasets.py                     # 512 ImageNet-sized images
    python benchmarks/bench_datasets.py --n 1024 --workers 2 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def _train():
    from turboloader import transforms as T

    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])


def write_sources(work, items, shard_size):
    """TAR shards, a Parquet file and a manifest + files of ``items``; returns their paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from datasets import write_shards  # benchmarks/datasets.py

    write_shards(work / "shards", items, shard_size=shard_size)
    pq.write_table(pa.table({"image": [d for d, _ in items], "label": [y for _, y in items],
                             "caption": [f"image number {i}" for i in range(len(items))]}),
                   work / "train.parquet", row_group_size=shard_size)
    (work / "files").mkdir()
    lines = ["path,label"]
    for i, (data, label) in enumerate(items):
        (work / "files" / f"{i:06d}.jpg").write_bytes(data)
        lines.append(f"{i:06d}.jpg,{label}")
    (work / "files" / "train.csv").write_text("\n".join(lines) + "\n")
    return {"tar": str(work / "shards" / "*.tar"), "parquet": str(work / "train.parquet"),
            "manifest": str(work / "files" / "train.csv")}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=512, help="images (default 512)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hires", action="store_true", help="1600-4000 px images")
    p.add_argument("--shard-size", type=int, default=128,
                   help="samples per TAR shard and rows per Parquet row group")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--workers", type=int, default=0, help="DataLoader workers (default 0)")
    p.add_argument("--repeat", type=int, default=3, help="passes per system; the best is kept")
    p.add_argument("--workdir", help="where to write the data (default: a temporary directory)")
    args = p.parse_args(argv)

    import numpy as np
    import torch

    from datasets import make_jpegs
    from turboloader import ManifestDataset, ParquetDataset, TarDataset

    torch.set_num_threads(1)
    tmp = tempfile.TemporaryDirectory(dir=args.workdir)
    work = Path(tmp.name)
    t0 = time.perf_counter()
    items = make_jpegs(args.n, seed=args.seed, hires=args.hires)
    paths = write_sources(work, items, args.shard_size)
    n = len(items)
    print(f"data: {n} images, {np.mean([len(d) for d, _ in items]) / 1000:.1f} KB/image "
          f"({time.perf_counter() - t0:.1f} s to make)", file=sys.stderr)

    datasets = {
        "TarDataset (TAR shards)": TarDataset(paths["tar"], _train(), seed=1),
        "ParquetDataset (row groups)": ParquetDataset(paths["parquet"], _train(), seed=1),
        "ManifestDataset (CSV + files)": ManifestDataset(paths["manifest"], transform=_train(),
                                                         seed=1),
    }

    def loader(ds):
        shuffle = True if isinstance(ds, ManifestDataset) else None
        return torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=shuffle,
                                           num_workers=args.workers)

    best = dict.fromkeys(datasets, 0.0)
    for epoch in range(args.repeat):
        for name, ds in datasets.items():
            ds.set_epoch(epoch)
            t = time.perf_counter()
            count = sum(len(y) for _, y in loader(ds))
            best[name] = max(best[name], count / (time.perf_counter() - t))
            assert count == n, (name, count)

    from turboloader.tools.demo import cpu_model
    print(f"machine: {os.cpu_count()} CPUs ({cpu_model()}), {platform.system()} "
          f"{platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}")
    print(f"data: {n} {'hires' if args.hires else 'ImageNet-sized'} JPEGs (benchmarks/"
          f"datasets.py, seed {args.seed}), {args.shard_size} per shard / row group; "
          f"DataLoader(batch_size={args.batch}, num_workers={args.workers}); best of "
          f"{args.repeat} interleaved passes\n")
    base = best["TarDataset (TAR shards)"]
    print("| train pipeline (RandomResizedCrop 224 + flip + normalize) | images/s | vs TAR |")
    print("|---|---:|---:|")
    for name, rate in best.items():
        print(f"| {name} | {rate:.0f} | {rate / base:.2f}x |")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
