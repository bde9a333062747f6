"""The paths that recycle batch memory, this checkout against another tree, same run.

    python benchmarks/bench_recycling.py --baseline /path/to/other/checkout
    python benchmarks/bench_recycling.py --baseline ../old --n 512 --rounds 3

Measures, on ImageNet-sized real photographs (``benchmarks/datasets.py``), the train pipeline
(RandomResizedCrop 224 + flip + ToTensor + Normalize, float32, batch 256, 2 workers) through:

- ``threads``:  turboloader.DataLoader(TarDataset, backend="threads")
- ``torch``:    torch.utils.data.DataLoader(TarDataset, batch_size=256, num_workers=2,
                persistent_workers=True): per-sample rows collated into recycled shared blocks
- ``batched``:  torch.utils.data.DataLoader(TarDataset.batched(256), batch_size=None, ...)

Each (tree, system) runs in its own subprocess with that tree first on ``sys.path`` (the
baseline needs its compiled extensions in place, e.g. copied from a build of the same native
sources); trees alternate round by round, so drift on a shared machine hits both alike.
Printed: median images/s over the timed epochs of each round's run, and current / baseline.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SYSTEMS = ("threads", "torch", "batched")


def child(tree, system, root, a):
    sys.path.insert(0, tree)
    import torch
    import torch.utils.data

    torch.set_num_threads(1)
    from turboloader import transforms as T
    from turboloader.data import TarDataset
    from turboloader.loader import DataLoader

    tf = T.Compose([T.RandomResizedCrop(224, antialias=True), T.RandomHorizontalFlip(),
                    T.ToTensor(), T.Normalize(MEAN, STD)])
    ds = TarDataset(sorted(str(p) for p in (Path(root) / "shards").glob("*.tar")), tf, seed=0)
    if system == "threads":
        loader = DataLoader(ds, batch_size=a.batch, num_workers=a.workers)
    elif system == "torch":
        loader = torch.utils.data.DataLoader(ds, batch_size=a.batch, num_workers=a.workers,
                                             persistent_workers=True)
    else:
        loader = torch.utils.data.DataLoader(ds.batched(a.batch), batch_size=None,
                                             num_workers=a.workers, persistent_workers=True)
    rates = []
    for epoch in range(a.epochs + 1):
        ds.set_epoch(epoch)
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        n, t = 0, time.perf_counter()
        for images, _ in loader:
            n += images.shape[0]
        if epoch:
            rates.append(n / (time.perf_counter() - t))
    print("@@" + json.dumps(statistics.median(rates)), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="another checkout (built) to compare with")
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs per run (after one warm-up)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--child", nargs=3, metavar=("TREE", "SYSTEM", "ROOT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(*a.child, a)
    sys.path.insert(0, str(HERE))
    from bench_loader import ensure_data

    root = ensure_data(a.n, 0)
    trees = {"current": str(REPO), "baseline": str(Path(a.baseline).resolve())}
    got = {(t, s): [] for t in trees for s in a.systems.split(",")}
    for r in range(a.rounds):
        for system in a.systems.split(","):
            for name, tree in (trees.items() if r % 2 == 0 else reversed(trees.items())):
                out = subprocess.run([sys.executable, __file__, "--child", tree, system, str(root),
                                      "--n", str(a.n), "--epochs", str(a.epochs),
                                      "--workers", str(a.workers), "--batch", str(a.batch),
                                      "--baseline", tree],
                                     capture_output=True, text=True, timeout=1800)
                line = [x for x in out.stdout.splitlines() if x.startswith("@@")]
                if out.returncode or not line:
                    sys.exit(f"{name}/{system} failed:\n{out.stderr[-3000:]}")
                got[(name, system)].append(json.loads(line[0][2:]))
                print(f"round {r} {system:8s} {name:8s} {got[(name, system)][-1]:8.1f} img/s",
                      flush=True)
    print(f"\nmachine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"{a.n} images, batch {a.batch}, {a.workers} workers, {a.rounds} rounds")
    print(f"{'system':10s} {'current':>10s} {'baseline':>10s} {'ratio':>7s}   per-round ratios")
    for system in a.systems.split(","):
        cur, base = got[("current", system)], got[("baseline", system)]
        ratios = [c / b for c, b in zip(cur, base)]
        print(f"{system:10s} {statistics.median(cur):10.1f} {statistics.median(base):10.1f} "
              f"{statistics.median(ratios):7.3f}   " + " ".join(f"{x:.3f}" for x in ratios))


if __name__ == "__main__":
    main()
