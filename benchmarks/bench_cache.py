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

With ``--breakdown`` it prints instead where a filling epoch's time goes, per stage, in one
thread (CPU microseconds per image, the best of ``--rounds`` passes over the first
``min(--n, 512)`` images), against the batch call of the uncached epoch on the same images:
the whole decode at the cache's DCT scale, the resample to ``cache_short_side``, the same
into fresh memory (the cache's first touch of each page), the cache's whole miss path
(``Decoder.cached_array``: sizing, decode, resample, store), and the batch call that crops
the epoch's output from the stored images. ``fill floor`` adds the stages without the
memory and the Python (what the stored image needs at the least).

    python benchmarks/bench_cache.py                          # 1024 images, 2 threads
    python benchmarks/bench_cache.py --short-sides 0,160,224 --rounds 5
    python benchmarks/bench_cache.py --breakdown --short-sides 160,256 --rounds 5
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


def _cpu_us(fn, n, rounds):
    """The best of ``rounds`` calls of ``fn``, in CPU microseconds of this process per image."""
    best = float("inf")
    for _ in range(rounds):
        c = time.process_time()
        fn()
        best = min(best, time.process_time() - c)
    return best / n * 1e6


def breakdown(urls, sides, rounds, n_max=512):
    """Rows ``(stage, cache_short_side, CPU us per image)`` of a filling epoch's stages in one
    thread, with the uncached batch call and the ratios (see the module docstring)."""
    import mmap
    import tarfile

    import numpy as np
    import torch

    from turboloader._native import _jpeg, _resample
    from turboloader.data.cache import SampleCache
    from turboloader.data.step import Decoder
    from turboloader.decode.jpeg import _open
    from turboloader.decode.sizes import fit_scale_num, scaled_dims, shrunk_size
    from turboloader.transforms._random import sample_keys

    datas = []
    for url in urls:
        with tarfile.open(url) as tar:
            datas += [tar.extractfile(m).read() for m in tar.getmembers()
                      if m.name.endswith(".jpg")]
    datas = datas[:n_max]
    n = len(datas)
    plan = Decoder(_transform()).plan
    out = torch.empty((n, 3, 224, 224))
    keys = sample_keys(0, 0, list(range(n)))
    hw = [(h.height, h.width) for h in (_open(d, None)[1] for d in datas)]
    def run_uncached():
        plan.run_batch(datas, plan.prepare_batch(datas, keys), out)

    # measured again after each cache_short_side (the best of all): a neighbour's load
    # that comes and goes then hits it as it hits the stages
    uncached = _cpu_us(run_uncached, n, rounds)
    rows = [("uncached batch call (window decode, resample, flip, normalize)", "", uncached)]
    for s in sides:
        ks = [fit_scale_num(size, (s, s)) if s else 8 for size in hw]
        decoded = [scaled_dims(size, k) for size, k in zip(hw, ks)]
        finals = [shrunk_size(*size, s) for size in decoded]
        scratch = np.empty(max(h * w * 3 for h, w in decoded), np.uint8)
        images = [np.empty((*size, 3), np.uint8) for size in decoded]

        def decode(into=None):
            for d, k, img in zip(datas, ks, images):
                dst = img if into is None else into[:img.size].reshape(img.shape)
                _jpeg.decode_into(_open(d, None)[0], dst, scale_num=k, crop_x=0, crop_y=0,
                                  crop_w=0, crop_h=0, flags=0, max_pixels=0)

        decode()   # the decoded images the resample rows read
        warm = [np.empty((*f, 3), np.uint8) for f in finals]
        todo = [(img, dst) for img, dst in zip(images, warm) if img.shape != dst.shape]

        def resample_warm():
            for img, dst in todo:
                _resample.resample_into(img, dst, filter=_resample.BILINEAR)

        def resample_fresh():
            size = sum(-(-dst.nbytes // 64) * 64 for _, dst in todo) or 64
            slab = np.frombuffer(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE |
                                           mmap.MAP_ANONYMOUS), np.uint8)
            top = 0
            for img, dst in todo:
                _resample.resample_into(img, slab[top:top + dst.nbytes].reshape(dst.shape),
                                        filter=_resample.BILINEAR)
                top += -(-dst.nbytes // 64) * 64

        dec = Decoder(_transform(), cache="64GB", short_side=s)

        def miss_path():
            dec.cache = SampleCache("64GB")
            for i, d in enumerate(datas):
                dec.cached_array(i, d)

        t_decode = _cpu_us(lambda: decode(scratch), n, rounds)
        t_warm = _cpu_us(resample_warm, n, rounds)
        t_fresh = _cpu_us(resample_fresh, n, rounds)
        t_miss = _cpu_us(miss_path, n, rounds)
        stored = [dec.cached_array(i, d) for i, d in enumerate(datas)]
        srcs = [a for a, _ in stored]
        sizes = np.array([size for _, size in stored], np.int64)
        t_crop = _cpu_us(lambda: plan.run_batch(
            srcs, plan.prepare_batch(srcs, keys, source_sizes=sizes), out), n, rounds)
        side = s or "full size"
        scales = ", ".join(f"{ks.count(k)} at {k}/8" for k in sorted(set(ks)))
        rows += [
            (f"whole decode at the cache's DCT scale ({scales}), warm buffer", side, t_decode),
        ]
        if todo:   # (at full size every image is decoded straight into its slot)
            rows += [("resample to the short side, warm memory", side, t_warm),
                     ("resample to the short side, fresh memory (first touch)", side, t_fresh)]
        rows += [
            ("the cache's miss path (Decoder.cached_array: all of the above, sizing, store)",
             side, t_miss),
            ("batch call from the stored images (crop, resample, flip, normalize)", side,
             t_crop),
            ("fill (miss path + batch call from the stored images)", side, t_miss + t_crop),
            ("fill floor (decode + warm resample + batch call from the stored images)", side,
             t_decode + t_warm + t_crop),
        ]
        uncached = min(uncached, _cpu_us(run_uncached, n, rounds))
    rows[0] = rows[0][:2] + (uncached,)
    return rows


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
    p.add_argument("--breakdown", action="store_true",
                   help="print where a filling epoch's time goes, per stage, in one thread")
    a = p.parse_args(argv)

    import turboloader as tl

    urls = _data(a.n, a.seed, a.workdir)
    sides = [int(s) or None for s in a.short_sides.split(",")]
    if a.breakdown:
        rows = breakdown(urls, sides, a.rounds)
        print(f"`python benchmarks/bench_cache.py "
              f"{' '.join(argv if argv is not None else sys.argv[1:])}` "
              f"({time.strftime('%Y-%m-%d')})\n")
        print(f"machine: {os.cpu_count()} CPUs, {platform.system()} {platform.machine()}, "
              f"Python {platform.python_version()}, load average at the end "
              f"{os.getloadavg()[0]:.1f}; one thread, best of {a.rounds}\n")
        base = rows[0][2]
        print("| stage | cache_short_side | CPU us/image | uncached ÷ this |")
        print("|---|---|---:|---:|")
        for stage, side, us in rows:
            print(f"| {stage} | {side} | {us:.0f} | {base / us:.2f} |")
        return rows

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
