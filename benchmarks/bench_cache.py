"""Decoded-sample cache benchmark (issue 22): the train pipeline's uncached epoch, the epoch
that fills the cache, and the epochs served from it, in the same run.

Rows, all on the same images (benchmarks/datasets.py, real photographs at ImageNet's sizes)
through ``turboloader.DataLoader(TarDataset(..., cache=, cache_short_side=),
backend="threads", num_workers=--threads)``, train = RandomResizedCrop(224) + flip +
normalize, batch ``--batch``:

* uncached, first epoch: the first epoch of a fresh loader without the cache (it also
  fills the loader's recycled batch buffers, as any first epoch does);
* uncached: its second epoch (warm);
* fill: the first epoch of a fresh loader with the cache on (each sample decoded whole, at
  the DCT scale for ``cache_short_side`` and resized to it, into the cache's memory),
  against the uncached first epoch: both start from the same cold loader;
* cached: the epoch after the fill (every sample from memory when the cache holds them),
  against the warm uncached epoch;
* partial (``--partial F``): a cache sized to a fraction F of what the fill stored per
  stream, its third epoch (each later epoch serves the admitted share from memory and
  decodes the rest as uncached).

Each round builds fresh datasets and runs the rows back to back, so a neighbour's load hits
them alike; per row the median over ``--rounds`` is kept. Two measures: wall images/s, and
CPU microseconds per image of this process (``time.process_time`` over the epoch, all
threads; other processes do not count, so it is the steadier one on a shared machine).
Only ratios within one run mean anything.

    python benchmarks/bench_cache.py                          # 1024 images, 2 threads
    python benchmarks/bench_cache.py --short-sides 0,160,224 --rounds 5
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _transform():
    import torch

    from turboloader import transforms as T

    return T.Compose([T.RandomResizedCrop(224, antialias=True), T.RandomHorizontalFlip(),
                      T.ToImage(), T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)])


def _data(n, seed, workdir):
    import datasets

    root = Path(workdir) / f"cache-n{n}-s{seed}"
    shards = root / "shards"
    if not sorted(shards.glob("*.tar")):
        items = datasets.make_jpegs(n, seed)
        datasets.write_shards(shards, items, shard_size=128)
    return sorted(glob.glob(str(shards / "*.tar")))


def _epoch(loader, ds, epoch):
    ds.set_epoch(epoch)
    c, t, n = time.process_time(), time.perf_counter(), 0
    for images, _ in loader:
        n += len(images)
    return n / (time.perf_counter() - t), (time.process_time() - c) / n * 1e6, n


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1024, help="images (default 1024)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cache", default="8GB", help="cache size per stream (default 8GB)")
    p.add_argument("--short-sides", default="0,160",
                   help="cache_short_side values to measure, 0 = full size (default 0,160)")
    p.add_argument("--partial", type=float, default=0.0,
                   help="also time a cache holding this fraction of the data (default: off)")
    p.add_argument("--workdir", default=str(HERE / "data"))
    a = p.parse_args(argv)

    import turboloader as tl

    urls = _data(a.n, a.seed, a.workdir)
    sides = [int(s) or None for s in a.short_sides.split(",")]

    def loader(**kw):
        ds = tl.TarDataset(urls, _transform(), shuffle=True, seed=a.seed, **kw)
        return tl.DataLoader(ds, batch_size=a.batch, num_workers=a.threads,
                             backend="threads"), ds

    rows = {}
    for r in range(a.rounds):
        dl, ds = loader()
        rows.setdefault("first", []).append(_epoch(dl, ds, 0))
        rows.setdefault("uncached", []).append(_epoch(dl, ds, 1))
        for s in sides:
            dl, ds = loader(cache=a.cache, cache_short_side=s)
            rows.setdefault(("fill", s), []).append(_epoch(dl, ds, 0))
            rows.setdefault(("cached", s), []).append(_epoch(dl, ds, 1))
            st = ds.stats(epoch=1)
            hit = st["cache_hits"] / max(1, st["cache_hits"] + st["cache_misses"])
            rows.setdefault(("stats", s), []).append((hit, st["cache_bytes"] / a.n))
            if a.partial:
                size = int(a.partial * st["cache_bytes"] / a.threads)
                dl, ds = loader(cache=size, cache_short_side=s)
                for e in (0, 1):
                    _epoch(dl, ds, e)
                rows.setdefault(("partial", s), []).append(_epoch(dl, ds, 2))
                st = ds.stats(epoch=2)
                hit = st["cache_hits"] / max(1, st["cache_hits"] + st["cache_misses"])
                rows.setdefault(("pstats", s), []).append((hit, st["cache_bytes"] / a.n))
            del dl, ds
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)

    med = {k: (statistics.median(v[0] for v in vs), statistics.median(v[1] for v in vs))
           for k, vs in rows.items() if k[0] not in ("stats", "pstats")}
    base_ips, base_cpu = med["uncached"]
    first_ips, first_cpu = med["first"]
    print(f"`python benchmarks/bench_cache.py {' '.join(argv if argv is not None else sys.argv[1:])}`"
          f" ({time.strftime('%Y-%m-%d')})\n")
    print(f"machine: {os.cpu_count()} CPUs, {platform.system()} {platform.machine()}, "
          f"Python {platform.python_version()}, load average at the end "
          f"{os.getloadavg()[0]:.1f}")
    print(f"data: {a.n} ImageNet-sized JPEGs (benchmarks/datasets.py, seed {a.seed}), "
          f"train pipeline, thread backend with {a.threads} threads, batch {a.batch}, "
          f"cache {a.cache} per stream; median of {a.rounds} rounds\n")
    print("| epoch | cache_short_side | images/s | x uncached | CPU us/image | x uncached (CPU) "
          "| hit rate | cached bytes/image |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    print(f"| uncached, first epoch | | {first_ips:.0f} | 1.00 | {first_cpu:.0f} | 1.00 | | |")
    print(f"| uncached | | {base_ips:.0f} | 1.00 | {base_cpu:.0f} | 1.00 | | |")
    for s in sides:
        hit, per = rows[("stats", s)][-1]
        for kind in ("fill", "cached", "partial"):
            if (kind, s) not in med:
                continue
            ips, cpu = med[(kind, s)]
            ref_ips, ref_cpu = (first_ips, first_cpu) if kind == "fill" else (base_ips, base_cpu)
            if kind == "partial":
                hit, per = rows[("pstats", s)][-1]
                kind = f"partial ({a.partial:g}), epoch 3"
            extra = f"{hit:.2f} | {per / 1e3:.0f} KB" if kind != "fill" else " | "
            print(f"| {kind} | {s or 'full size'} | {ips:.0f} | {ips / ref_ips:.2f} | "
                  f"{cpu:.0f} | {ref_cpu / cpu:.2f} | {extra} |")


if __name__ == "__main__":
    main()
