"""TBL benchmark: TAR -> TBL conversion speed, and the train pipeline from TBL vs from TAR.

Rows, all measured in the same run on the same images:

* conversion: ``turboloader.tools.convert.convert`` TAR shards -> TBL as stored (bytes copied, headers
  checked) and pre-resized to a 256-px short side at JPEG quality 90 (on ``--threads``
  threads), in images/s, with the output sizes;
* train pipeline (RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize; fused
  decode + transform), one process, no DataLoader, images/s of:
  ``TarDataset`` (shuffled within shards, the TAR reader's order), ``TBLDataset`` as stored
  (random order over the whole file), ``TBLDataset`` pre-resized to 256 px;
  the ratio column is against the TAR row.

Systems are interleaved pass by pass and the best pass of each is kept, so a neighbour's load
hits all of them alike.

    python benchmarks/bench_tbl.py                  # 400 ImageNet-sized images
    python benchmarks/bench_tbl.py --n 64 --hires   # 1600-4000 px images
    python benchmarks/bench_tbl.py --data /path/to/ImageFolder --n 1000
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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=400, help="images (default 400)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hires", action="store_true", help="1600-4000 px images instead of ImageNet-sized")
    p.add_argument("--data", help="an ImageFolder tree to use instead of generated images")
    p.add_argument("--shard-size", type=int, default=100)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="threads for the pre-resizing conversion (default: CPU count)")
    p.add_argument("--repeat", type=int, default=3, help="passes per system; the best is kept")
    p.add_argument("--workdir", help="where to write the data (default: a temporary directory)")
    args = p.parse_args(argv)

    import numpy as np
    import torch

    from datasets import make_jpegs, read_image_folder, write_shards
    from turboloader.tools.convert import convert
    from turboloader.data import TarDataset
    from turboloader.data.tbl_dataset import TBLDataset

    torch.set_num_threads(1)
    tmp = tempfile.TemporaryDirectory(dir=args.workdir)
    work = Path(tmp.name)
    t0 = time.perf_counter()
    items = read_image_folder(args.data, limit=args.n) if args.data else \
        make_jpegs(args.n, seed=args.seed, hires=args.hires)
    shards = write_shards(work / "shards", items, shard_size=args.shard_size)
    n = len(items)
    print(f"data: {n} images, {np.mean([len(d) for d, _ in items]) / 1000:.1f} KB/image, "
          f"{len(shards)} shards ({time.perf_counter() - t0:.1f} s to make)", file=sys.stderr)
    tar_glob = str(work / "shards" / "*.tar")

    # -- conversion ----------------------------------------------------------------------
    conv = {"TAR -> TBL (as stored)": {}, "TAR -> TBL (256 px, q90)": {}}
    for r in range(args.repeat):
        rep = convert(tar_glob, work / "stored.tbl", overwrite=True)
        conv["TAR -> TBL (as stored)"] = max(conv["TAR -> TBL (as stored)"] or {"rate": 0},
                                             {"rate": rep.written / rep.seconds}, key=lambda d: d["rate"])
        rep = convert(tar_glob, work / "small.tbl", overwrite=True, max_short_side=256,
                      quality=90, workers=args.threads)
        conv["TAR -> TBL (256 px, q90)"] = max(conv["TAR -> TBL (256 px, q90)"] or {"rate": 0},
                                               {"rate": rep.written / rep.seconds}, key=lambda d: d["rate"])
        assert rep.written == n and not rep.skipped
    sizes = {"TAR shards": sum(s.stat().st_size for s in shards),
             "TBL as stored": (work / "stored.tbl").stat().st_size,
             "TBL 256 px": (work / "small.tbl").stat().st_size}

    # -- train pipeline --------------------------------------------------------------------
    def run_tar():
        ds = TarDataset(tar_glob, _train(), shuffle=True, seed=1)
        count = 0
        for x, _ in ds:
            count += 1
        return count

    def run_tbl(path):
        def go():
            ds = TBLDataset(path, _train(), seed=1)
            order = np.random.default_rng(1).permutation(len(ds)).tolist()
            for i in order:
                ds[i]
            return len(order)
        return go

    systems = {"TarDataset (TAR shards)": run_tar,
               "TBLDataset (TBL as stored)": run_tbl(work / "stored.tbl"),
               "TBLDataset (TBL 256 px)": run_tbl(work / "small.tbl")}
    best = dict.fromkeys(systems, 0.0)
    for _ in range(args.repeat):
        for name, fn in systems.items():
            t = time.perf_counter()
            count = fn()
            best[name] = max(best[name], count / (time.perf_counter() - t))
            assert count == n, (name, count)

    from turboloader.tools.demo import cpu_model
    print(f"machine: {os.cpu_count()} CPUs ({cpu_model()}), {platform.system()} "
          f"{platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}")
    print(f"data: {n} {'hires' if args.hires else 'ImageNet-sized'} JPEGs"
          f"{' from ' + args.data if args.data else f' (benchmarks/datasets.py, seed {args.seed})'}, "
          f"best of {args.repeat} interleaved passes\n")
    print("| conversion | images/s | output size |")
    print("|---|---:|---:|")
    print(f"| TAR -> TBL (as stored), 1 thread | {conv['TAR -> TBL (as stored)']['rate']:.0f} | "
          f"{sizes['TBL as stored'] / 1e6:.1f} MB ({sizes['TBL as stored'] / sizes['TAR shards']:.2f}x TAR) |")
    print(f"| TAR -> TBL (256 px short side, q90), {args.threads} threads | "
          f"{conv['TAR -> TBL (256 px, q90)']['rate']:.0f} | {sizes['TBL 256 px'] / 1e6:.1f} MB "
          f"({sizes['TBL 256 px'] / sizes['TAR shards']:.2f}x TAR) |")
    print(f"\nTAR shards: {sizes['TAR shards'] / 1e6:.1f} MB\n")
    base = best["TarDataset (TAR shards)"]
    print("| train pipeline (RandomResizedCrop 224 + flip + normalize), 1 process | images/s | vs TAR |")
    print("|---|---:|---:|")
    for name, rate in best.items():
        print(f"| {name} | {rate:.0f} | {rate / base:.2f}x |")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
