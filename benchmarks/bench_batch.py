"""Batch-at-a-time native execution against the per-sample fused path and the decode limit.

On the same JPEG bytes, in the same process, interleaving the systems pass by pass (so load
from other processes hits them all alike), median of ``--repeat`` timed passes after a warm-up:

* ``per-sample``: ``Plan.from_jpeg(data, rng=sample_rng(seed, epoch, i), out=batch[j])`` per
  image, the path datasets took before batches (1 thread).
* ``batch, N threads``: ``sample_keys`` + ``Plan.prepare_batch`` + ``Plan.run_batch`` per
  batch of ``--batch`` images on a ``BatchRunner(threads=N)``, into a reused batch buffer.
* ``decode limit, N threads``: ``turboloader.decode_jpeg`` of every image at full size on N
  Python threads (a thread pool over contiguous chunks), the issue's reference ceiling.

CPU ms / image is the process's CPU time (all threads) per image: unlike images/s it does
not depend on how much of the machine other processes leave free.

Then the Python (GIL-held) time per sample on the batch path and its breakdown: keys,
``prepare_batch`` (of which the native header pass, which runs without the GIL), and the
GIL-held part of ``run_batch`` (its wall time minus ``BatchResult.nogil_seconds``).

    python benchmarks/bench_batch.py                       # train + val, ~ImageNet sizes
    python benchmarks/bench_batch.py --pipeline train --n 512 --batch 256
    python benchmarks/bench_batch.py --hires --n 64 --batch 32
    python benchmarks/bench_batch.py --quick               # smoke run
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import datasets  # noqa: E402  (benchmarks/datasets.py)

REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))

import turboloader  # noqa: E402
from turboloader import transforms as T  # noqa: E402
from turboloader._native import _fused  # noqa: E402
from turboloader.decode.executor import OK, BatchRunner  # noqa: E402
from turboloader.transforms._random import sample_keys, sample_rng  # noqa: E402

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
PIPELINES = {
    "train": lambda: T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                                T.ToTensor(), T.Normalize(MEAN, STD)]),
    "val": lambda: T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                              T.Normalize(MEAN, STD)]),
    "train_uint8": lambda: T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                                      T.ToImage()]),
}
SEED, EPOCH = 0, 3


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


class Bench:
    """One pipeline's systems over the same bytes."""

    def __init__(self, plan, data, batch, threads):
        self.plan = plan
        self.data = data
        self.batch = batch
        self.out = torch.empty((batch, *plan.output_shape), dtype=plan.output_dtype)
        self.runners = {t: BatchRunner(threads=t) for t in threads}
        self.pools = {t: ThreadPoolExecutor(t) for t in threads if t > 1}
        self.python = []   # per pass: (keys, prepare, headers, run GIL-held, samples)

    def chunks(self):
        for lo in range(0, len(self.data), self.batch):
            yield lo, self.data[lo:lo + self.batch]

    def per_sample(self):
        p, out = self.plan, self.out
        for lo, chunk in self.chunks():
            for j, d in enumerate(chunk):
                p.from_jpeg(d, rng=sample_rng(SEED, EPOCH, lo + j), out=out[j])

    def batched(self, threads, record=False):
        p, out, runner = self.plan, self.out, self.runners[threads]
        t_keys = t_prep = t_hdr = t_run = 0.0
        for lo, chunk in self.chunks():
            t0 = time.perf_counter()
            keys = sample_keys(SEED, EPOCH, np.arange(lo, lo + len(chunk)))
            t1 = time.perf_counter()
            params = p.prepare_batch(chunk, keys)
            t2 = time.perf_counter()
            result = p.run_batch(chunk, params, out[:len(chunk)], runner=runner)
            t3 = time.perf_counter()
            if not (result.status == OK).all():
                bad = int((result.status != OK).sum())
                raise RuntimeError(f"{bad} rows not OK: {result.errors[:3]}")
            t_keys += t1 - t0
            t_prep += t2 - t1
            t_run += (t3 - t2) - result.nogil_seconds
            if record:
                todo = np.ones(len(chunk), np.uint8)
                h0 = time.perf_counter()
                _fused.read_headers(list(chunk), todo)
                t_hdr += time.perf_counter() - h0
        if record:
            self.python.append((t_keys, t_prep, t_hdr, t_run, len(self.data)))

    def decode(self, threads):
        data = self.data
        if threads == 1:
            for d in data:
                turboloader.decode_jpeg(d)
            return
        step = (len(data) + threads - 1) // threads

        def work(lo):
            for d in data[lo:lo + step]:
                turboloader.decode_jpeg(d)

        list(self.pools[threads].map(work, range(0, len(data), step)))


def run(name, bench, threads, repeat, log):
    systems = [("per-sample `from_jpeg`, 1 thread", bench.per_sample)]
    for t in threads:
        systems.append((f"batch `prepare_batch`+`run_batch`, {t} thread{'s' * (t > 1)}",
                        lambda t=t: bench.batched(t)))
    for t in threads:
        systems.append((f"decode limit `decode_jpeg`, {t} thread{'s' * (t > 1)}",
                        lambda t=t: bench.decode(t)))
    times = {label: [] for label, _ in systems}
    cpu = {label: [] for label, _ in systems}
    for f in (f for _, f in systems):   # warm-up: scratch memory, caches, pools
        f()
    for r in range(repeat):
        for label, f in systems:
            c0, t0 = time.process_time(), time.perf_counter()
            f()
            times[label].append(time.perf_counter() - t0)
            cpu[label].append(time.process_time() - c0)
        bench.batched(threads[0], record=True)   # untimed pass for the Python breakdown
        log(f"  {name}: pass {r + 1}/{repeat}")
    n = len(bench.data)
    rate = {label: n / statistics.median(ts) for label, ts in times.items()}
    base = rate[systems[0][0]]
    lines = [f"### {name}", "",
             "| system | images/s | × per-sample | × decode limit (same threads) | CPU ms / image |",
             "|---|---:|---:|---:|---:|"]
    for label, _ in systems:
        t = 1
        for cand in threads:
            if label.endswith(f" {cand} thread") or label.endswith(f" {cand} threads"):
                t = cand
        limit = rate[f"decode limit `decode_jpeg`, {t} thread{'s' * (t > 1)}"]
        lines.append(f"| {label} | {rate[label]:.0f} | {rate[label] / base:.2f}× | "
                     f"{rate[label] / limit:.2f}× | "
                     f"{statistics.median(cpu[label]) / n * 1e3:.3f} |")
    rows = np.array([r[:4] for r in bench.python]) / np.array([[r[4]] for r in bench.python])
    med = np.median(rows, axis=0) * 1e6
    total = med[0] + (med[1] - med[2]) + med[3]
    lines += ["", f"Python (GIL-held) time per sample on the batch path ({threads[0]} thread "
              f"runner, batch {bench.batch}, median of {repeat} passes): **{total:.1f} µs**",
              "", "| part | µs / sample |", "|---|---:|",
              f"| `sample_keys` | {med[0]:.2f} |",
              f"| `prepare_batch` draws, scale, windows (GIL held) | {med[1] - med[2]:.2f} |",
              f"| `prepare_batch` native header pass (no GIL) | {med[2]:.2f} |",
              f"| `run_batch` setup + results (GIL held) | {med[3]:.2f} |", ""]
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--n", type=int, default=None, help="images (default 512; 64 --hires)")
    ap.add_argument("--batch", type=int, default=None, help="batch size (default 256; 32 --hires)")
    ap.add_argument("--repeat", type=int, default=None, help="timed passes (default 5)")
    ap.add_argument("--threads", default="1,2", help="runner/decoder threads (default 1,2)")
    ap.add_argument("--pipeline", default="train,val",
                    help=f"comma-separated: {', '.join(PIPELINES)} (default train,val)")
    ap.add_argument("--no-dct", action="store_true", help="plan(..., dct_scaling=False)")
    ap.add_argument("--hires", action="store_true", help="long side 1600..4000 px")
    ap.add_argument("--seed", type=int, default=0, help="dataset seed")
    ap.add_argument("--quick", action="store_true", help="smoke run (64 images, 2 passes)")
    ap.add_argument("--out", default=None, help="also write the Markdown report here")
    args = ap.parse_args(argv)
    if args.n is None:
        args.n = 64 if (args.quick or args.hires) else 512
    if args.batch is None:
        args.batch = 32 if (args.quick or args.hires) else 256
    if args.repeat is None:
        args.repeat = 2 if args.quick else 5
    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    names = [p.strip() for p in args.pipeline.split(",") if p.strip()]
    if any(p not in PIPELINES for p in names) or not threads or min(threads) < 1:
        ap.error("bad --pipeline or --threads")

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    log(f"making {args.n} {'high-resolution ' if args.hires else ''}JPEGs (seed {args.seed})")
    data = [b for b, _ in datasets.make_jpegs(args.n, args.seed, args.hires)]
    stats = datasets.describe([(d, 0) for d in data])
    load = os.getloadavg()
    lines = [
        "## Batch-at-a-time native execution (`benchmarks/bench_batch.py`)", "",
        f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}",
        f"- CPU: {cpu_model()}; {os.cpu_count()} logical CPUs; load average at start "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        f"- Python {platform.python_version()}, torch {torch.__version__}, "
        f"NumPy {np.__version__}, turboloader {turboloader.__version__}",
        f"- images: `datasets.make_jpegs(n={args.n}, seed={args.seed}, hires={args.hires})`, "
        f"short side min/median/max {'/'.join(map(str, stats['short_side']))} px, "
        f"mean {stats['mean_kbytes']:.0f} KiB",
        f"- batch {args.batch}, DCT scaling {'off' if args.no_dct else 'on'}, "
        f"median of {args.repeat} passes, systems interleaved", "",
    ]
    for name in names:
        plan = T.plan(PIPELINES[name](), dct_scaling=not args.no_dct)
        log(f"{name}: {plan}")
        lines += run(name, Bench(plan, data, args.batch, threads), threads, args.repeat, log)
    report = "\n".join(lines)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
