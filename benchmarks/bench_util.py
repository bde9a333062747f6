"""Where the thread backend's two cores go: utilization of ``DataLoader(backend="threads")``
against the full-decode limit, measured in the same process and window.

    python benchmarks/bench_util.py --data-root benchmarks/data --n 1024 --reps 3
    python benchmarks/bench_util.py --data-root benchmarks/data --n 1024 --sub shards-seekable

The data is ``run.py``'s (``<data-root>/bench-n<N>-s0``: its ``shards/`` and, for the limit,
the same JPEGs in ``folder/``); run ``run.py`` once to make it. Each rep runs, one after
another: the limit's loop as ``systems/decode_limit.py`` times it (libjpeg-turbo's own
Huffman decoder, full decode, **one** thread, its images/s multiplied by the workers), the
same loop on ``--workers`` real threads (each its share of the files), and one epoch of the
loader per pipeline (train: RandomResizedCrop(224) + flip + normalize, val: Resize(256) +
CenterCrop(224) + normalize; batch 256, one warm-up epoch first).

Per row: images/s, CPU ms per image (this process's user+sys), utilization (CPU seconds
over workers x wall seconds: 1.0 keeps every core busy) and, for the loader, where the
wall time went:

- ``calls``: the fraction of the epoch during which a native batch call ran (both cores
  decoding through the shared runner); outside them at most one core works (gathering,
  drawing, thread start-up: Python under the GIL);
- ``start``: from ``iter()`` to the first batch call's start (the pass's threads start, the
  first chunk is gathered and drawn); ``end``: from the last call's end to the end of the
  epoch;
- per thread kind, from ``/proc/self/task/<tid>/schedstat``: seconds running, waiting on
  the run queue (runnable, another process had the core: the machine's load) and asleep
  (blocked: waiting for the runner, a queue, the GIL, or idle).

The batch calls are timed by wrapping ``SharedRunner.run_batch`` in this process (the
loader's decode threads call it once per chunk); nothing else is changed.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "systems"))


def schedstat() -> dict:
    """{tid: (name, run s, run-queue s)} of this process's threads; Python threads by their
    ``threading`` name, native ones by their ``comm``."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out = {}
    for t in os.listdir("/proc/self/task"):
        tid = int(t)
        try:
            run, wait, _ = map(int, Path(f"/proc/self/task/{t}/schedstat").read_text().split())
            name = names.get(tid) or Path(f"/proc/self/task/{t}/comm").read_text().strip()
        except (OSError, ValueError):
            continue
        out[tid] = (name, run / 1e9, wait / 1e9)
    return out


def kind(name: str) -> str:
    if name.startswith("turboloader-decode"):
        return "decode threads"
    if name == "MainThread":
        return "main"
    if name.startswith("util-"):
        return ""
    if name.startswith("tl-batch"):
        return "runner helpers"
    return f"other: {name}"


class Threads:
    """Per-thread schedstat over a window, including threads that start and end inside it
    (sampled every 5 ms by a side thread, which is left out; a pass's stage threads are
    also read as they end, see :func:`wrap_calls`)."""

    def __init__(self):
        self.seen, self.stop = {}, threading.Event()

    def __enter__(self):
        EXITED.clear()
        self.base = schedstat()
        self.t0 = time.perf_counter()
        self.th = threading.Thread(target=self._loop, name="util-sampler", daemon=True)
        self.th.start()
        return self

    def _loop(self):
        while not self.stop.wait(0.005):
            self.seen.update(schedstat())

    def __exit__(self, *exc):
        self.stop.set()
        self.th.join()
        self.seen.update(schedstat())
        self.seen.update(EXITED)  # the pass's threads, as they ended
        EXITED.clear()
        self.wall = time.perf_counter() - self.t0

    def by_kind(self) -> dict:
        """{kind: [threads, run s, run-queue s, asleep s]} over the window (asleep: the
        window's wall less run and run queue, per thread)."""
        out = {}
        for tid, (name, run, wait) in self.seen.items():
            k = kind(name)
            if not k:
                continue
            b = self.base.get(tid, (name, 0.0, 0.0))
            r, w = run - b[1], wait - b[2]
            if r < 1e-4 and w < 1e-4:
                continue
            x = out.setdefault(k, [0, 0.0, 0.0, 0.0])
            x[0] += 1
            x[1] += r
            x[2] += w
            x[3] += max(0.0, self.wall - r - w)
        return out


def proc_cpu() -> float:
    t = os.times()
    return t.user + t.system


CALLS: list = []
EXITED: dict = {}  # tid -> (name, run s, run-queue s) of a pass's threads, read as they end


def wrap_calls():
    """Time every batch call of the thread backend's shared runner, and read each stage
    thread's schedstat as it ends (a pass's threads may start and end between samples)."""
    from turboloader.loader import _iterable, _pipeline

    guard = _pipeline.Pipeline._guard

    def _guard(self, *args):
        try:
            return guard(self, *args)
        finally:
            tid = threading.get_native_id()
            try:
                run, wait, _ = map(int, Path(f"/proc/self/task/{tid}/schedstat")
                                   .read_text().split())
                EXITED[tid] = (threading.current_thread().name, run / 1e9, wait / 1e9)
            except (OSError, ValueError):
                pass

    _pipeline.Pipeline._guard = _guard

    orig = _iterable.SharedRunner.run_batch

    def run_batch(self, *args, **kw):
        t0 = time.perf_counter()
        try:
            return orig(self, *args, **kw)
        finally:
            CALLS.append((t0, time.perf_counter()))

    _iterable.SharedRunner.run_batch = run_batch


def covered(intervals) -> float:
    total, cur = 0.0, None
    for s, e in sorted(intervals):
        if cur is None or s > cur[1]:
            if cur is not None:
                total += cur[1] - cur[0]
            cur = [s, e]
        else:
            cur[1] = max(cur[1], e)
    return total + (cur[1] - cur[0] if cur else 0.0)


def limit_pass(blobs, threads):
    """(images/s, CPU s) of the full-decode loop on ``threads`` threads (1: the limit's)."""
    import turboloader.decode.jpeg as J

    J._STOCK_HUFFMAN = True  # libjpeg-turbo's own Huffman decoder, as decode_limit.py
    try:
        c0, t0 = proc_cpu(), time.perf_counter()
        if threads == 1:
            for b in blobs:
                J.decode_jpeg(b)
        else:
            def work(part):
                for b in part:
                    J.decode_jpeg(b)
            ts = [threading.Thread(target=work, args=(blobs[i::threads],), name=f"util-limit{i}")
                  for i in range(threads)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        dt = time.perf_counter() - t0
        return len(blobs) / dt, proc_cpu() - c0
    finally:
        J._STOCK_HUFFMAN = False


def loader_epoch(ds, dl, e, n):
    CALLS.clear()
    ds.set_epoch(e)
    dl.set_epoch(e)
    c0 = proc_cpu()
    with Threads() as th:
        t0 = time.perf_counter()
        count = 0
        for images, _labels in dl:
            count += len(images)
        t1 = time.perf_counter()
    cpu = proc_cpu() - c0
    wall = t1 - t0
    calls = [(s - t0, e - t0) for s, e in CALLS]
    return {"images_s": count / wall, "cpu_ms": cpu / count * 1e3, "cpu": cpu, "wall": wall,
            "calls": covered(calls) / wall if calls else 0.0,
            "start_ms": min(s for s, _ in calls) * 1e3 if calls else float("nan"),
            "end_ms": (wall - max(e for _, e in calls)) * 1e3 if calls else float("nan"),
            "ncalls": len(calls), "threads": th.by_kind(), "count": count}


def main(argv=None) -> list:
    """Run the reps; return the loader rows (dicts of ``loader_epoch`` plus ``pipeline``,
    ``rep`` and ``limit``, the limit's images/s of that rep)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-root", default=str(HERE / "data"))
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--sub", default="shards", help="shards/ or shards-seekable/")
    ap.add_argument("--pipelines", default="train,val")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=256)
    a = ap.parse_args(argv)
    import torch
    import turboloader as tl
    from tl_ours import transform

    data = Path(a.data_root) / f"bench-n{a.n}-s0"
    urls = sorted(glob.glob(f"{data}/{a.sub}/*.tar"))
    blobs = [Path(f).read_bytes() for f in sorted(glob.glob(f"{data}/folder/*/*.jpg"))]
    if not urls or not blobs:
        sys.exit(f"no data under {data}: run benchmarks/run.py --n {a.n} once to make it")
    W = a.workers
    wrap_calls()
    print(f"# bench_util: {len(blobs)} JPEGs, {a.sub}/, {W} workers, turboloader from "
          f"{os.path.dirname(tl.__file__)}, torch threads {torch.get_num_threads()}, "
          f"load average {os.getloadavg()[0]:.2f} at the start")
    loaders = {}
    for p in a.pipelines.split(","):
        ds = tl.TarDataset(urls, transform(p), shuffle=p == "train", seed=0)
        dl = tl.DataLoader(ds, batch_size=a.batch, num_workers=W, backend="threads")
        loader_epoch(ds, dl, 0, a.n)  # warm-up
        loaders[p] = (ds, dl)
    limit_pass(blobs[:64], 1)  # warm-up
    hdr = (f"{'rep':>3} {'row':34} {'img/s':>7} {'x limit':>7} {'cpu ms/img':>10} {'util':>5} "
           f"{'calls':>5} {'start ms':>8} {'end ms':>6}  per thread kind: n run/rq/asleep s")
    print(hdr)
    rows = []
    for rep in range(a.reps):
        rate1, cpu1 = limit_pass(blobs, 1)
        lim = rate1 * W
        print(f"{rep:>3} {'limit: 1 thread x %d' % W:34} {lim:7.0f} {1.0:7.2f} "
              f"{cpu1 / len(blobs) * 1e3:10.3f} {cpu1 / (len(blobs) / rate1):5.2f}")
        rateW, cpuW = limit_pass(blobs, W)
        print(f"{rep:>3} {'same loop on %d real threads' % W:34} {rateW:7.0f} {rateW / lim:7.2f} "
              f"{cpuW / len(blobs) * 1e3:10.3f} {cpuW / (W * len(blobs) / rateW):5.2f}")
        for p, (ds, dl) in loaders.items():
            r = loader_epoch(ds, dl, 1 + rep, a.n)
            rows.append(dict(r, pipeline=p, rep=rep, limit=lim))
            kinds = "; ".join(f"{k} {v[0]} {v[1]:.2f}/{v[2]:.2f}/{v[3]:.2f}"
                              for k, v in sorted(r["threads"].items()))
            print(f"{rep:>3} {'loader ' + p:34} {r['images_s']:7.0f} {r['images_s'] / lim:7.2f} "
                  f"{r['cpu_ms']:10.3f} {r['cpu'] / (W * r['wall']):5.2f} {r['calls']:5.2f} "
                  f"{r['start_ms']:8.1f} {r['end_ms']:6.1f}  {kinds}", flush=True)
    for ds, dl in loaders.values():
        if hasattr(dl, "close"):
            dl.close()
    print(f"# load average {os.getloadavg()[0]:.2f} at the end")
    return rows


if __name__ == "__main__":
    main()
