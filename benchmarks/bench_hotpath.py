"""Where a decode thread's CPU time goes on the batch path, per image.

    python benchmarks/bench_hotpath.py                    # 512 ImageNet-sized JPEGs, train
    python benchmarks/bench_hotpath.py --pipeline val --batch 256 --rounds 5

One logical worker stream of ``TarDataset.worker_stream(batch_size=B)`` runs in this thread
(what each decode thread of the thread backend runs), after a warm-up pass. Each part of the
work is timed with the thread's CPU clock (``time.thread_time``), which other processes on a
busy machine do not inflate. What runs without the GIL is timed at the call that releases it:
the native batch call (``_fused.run_batch``: decode, resample, flip, normalize into the batch
rows), the native header pass (``_fused.read_headers``), the ``pread`` system calls
(``_tar.pread_rows``, a chunk's images of every shard in one call; ``os.preadv`` where one
image is read alone) and the statistics snapshot's file system calls
(``telemetry.replace_file``: open, write, close, rename, each releasing the GIL).
"Python per image" is the rest of the thread's CPU time, all of it: the gather's
Python (``TarDataset._gather_chunk`` less its reads), the sample step's (``data.step.run``:
keys, sizes, draws, slots, statuses, less its native calls), the walk (policy, progress,
batching, labels) and the statistics snapshot's Python (its JSON, shown apart too; the
figure with its file calls counted in, as sessions 3-5 did, is printed beside it); it is
the figure issue 14 bounds at 20 us and issue 42 at 15 us.
Batches are written into recycled tensors, as the thread backend does. Each part is net of
this benchmark's own timers (see :class:`Clock`).
"""
from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


class Clock:
    """Thread CPU seconds spent inside wrapped callables, by name (not re-entrant), and how
    many calls each label had: reading the thread's CPU clock is a system call (3.6 us per
    read on the 2-core VM, where ``perf_counter`` takes 0.1 us), so a callable wrapped per
    image (the reads) would add several microseconds per image to the figures. The wrapper's
    own cost is measured on a wrapped no-op (:meth:`calibrate`) and taken out by
    :meth:`net`: ``inner`` seconds per call land inside the label, ``outer`` outside it (in
    whatever encloses the call)."""

    def __init__(self):
        self.s = {}
        self.calls = {}
        self.inner = self.outer = 0.0

    def wrap(self, owner, name, label):
        fn = getattr(owner, name)
        clock = self

        def timed(*a, **kw):
            t = time.thread_time()
            try:
                return fn(*a, **kw)
            finally:
                clock.s[label] = clock.s.get(label, 0.0) + time.thread_time() - t
                clock.calls[label] = clock.calls.get(label, 0) + 1

        setattr(owner, name, timed)
        return fn

    def calibrate(self, n=20000):
        """Measure the wrapper's own cost per call (the median of 5 runs of ``n`` calls of a
        wrapped no-op): what it adds inside the label and what it adds around the call."""

        class Noop:
            @staticmethod
            def f():
                return None

        self.wrap(Noop, "f", "_noop")
        inner, total = [], []
        for _ in range(5):
            self.s.pop("_noop", None)
            t = time.thread_time()
            for _ in range(n):
                Noop.f()
            total.append((time.thread_time() - t) / n)
            inner.append(self.s["_noop"] / n)
        self.s.pop("_noop", None)
        self.calls.pop("_noop", None)
        self.inner = statistics.median(inner)
        self.outer = max(0.0, statistics.median(total) - self.inner)

    def net(self, label):
        """Seconds inside ``label``'s calls, less the wrapper's own share."""
        return max(0.0, self.s.get(label, 0.0) - self.calls.get(label, 0) * self.inner)



def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--pipeline", choices=("train", "val", "train-uint8"), default="train")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from bench_loader import MEAN, STD, ensure_data

    from turboloader import transforms as T
    from turboloader._native import _fused
    from turboloader.data import TarDataset, tar_dataset
    from turboloader.data._buffers import BufferPool

    if a.pipeline == "val":
        head = [T.Resize(256), T.CenterCrop(224)]
    else:
        head = [T.RandomResizedCrop(224), T.RandomHorizontalFlip()]
    tail = [T.PILToTensor()] if a.pipeline == "train-uint8" else [T.ToTensor(), T.Normalize(MEAN, STD)]
    root = ensure_data(a.n, a.seed)
    ds = TarDataset(sorted(glob.glob(str(root / "shards" / "*.tar"))), T.Compose(head + tail),
                    seed=a.seed)
    clock = Clock()
    clock.calibrate()
    from turboloader.data import step
    from turboloader.data.telemetry import Recorder

    # what runs without the GIL: the pread syscalls, the native header pass and batch call;
    # everything else a decode thread runs holds it
    from turboloader._native import _tar

    clock.wrap(os, "preadv", "pread")   # one image (TarIndex.read_into)
    # a chunk's images of every shard (pread_rows, which pread_many calls), or of one shard
    clock.wrap(_tar, "pread_rows" if hasattr(_tar, "pread_rows") else "pread_many", "pread")
    clock.wrap(_fused, "read_headers", "headers")
    from turboloader.data import telemetry

    if hasattr(telemetry, "replace_file"):   # the snapshot's open, write, close, rename
        clock.wrap(telemetry, "replace_file", "files")
    clock.wrap(_fused, "run_batch", "run")
    # where the Python is: the gather, the sample step (sizes, draw, slots, run), the
    # statistics snapshot; the rest is the walk (policy, progress, batching, labels)
    clock.wrap(tar_dataset.TarDataset, "_gather_chunk", "gather")
    clock.wrap(step, "run", "step")
    clock.wrap(Recorder, "flush", "flush")
    rows = []
    pool = BufferPool(3)  # recycled batch tensors, as turboloader.DataLoader's
    for r in range(a.rounds + 1):
        clock.s.clear()
        clock.calls.clear()
        ds.set_epoch(r)
        n = 0
        t0, w0 = time.thread_time(), time.perf_counter()
        for images, labels in ds.worker_stream(0, 1, batch_size=a.batch, out=pool.get):
            n += len(labels)
        images = labels = None
        cpu, wall = time.thread_time() - t0, time.perf_counter() - w0
        if r == 0:
            continue  # warm-up: shards opened, labels parsed, buffers grown
        # each part net of the wrappers' own cost: a part's own wrapper (net), and the whole
        # cost of the wrappers of the calls inside it (the reads' in the gather, the
        # native calls' in the step); the stream's CPU time less every wrapper's cost
        net, each = clock.net, clock.inner + clock.outer
        calls = clock.calls.get
        s = {k: net(k) for k in ("gather", "pread", "step", "headers", "run", "flush", "files")}
        gather = s["gather"] - calls("pread", 0) * each - s["pread"]
        stepped = s["step"] - (calls("headers", 0) + calls("run", 0)) * each \
            - s["headers"] - s["run"]
        flush = s["flush"] - calls("files", 0) * each - s["files"]
        timer = sum(clock.calls.values()) * each
        cpu -= timer
        nogil = s["pread"] + s["headers"] + s["run"] + s["files"]
        other = cpu - nogil - gather - stepped - flush
        rows.append({"total": cpu / n, "pread": s["pread"] / n, "gather": gather / n,
                     "headers": s["headers"] / n, "run": s["run"] / n, "step": stepped / n,
                     "other": other / n, "wall": wall / n, "flush": flush / n,
                     "files": s["files"] / n, "timer": timer / n,
                     "python": (cpu - nogil) / n, "with_files": (cpu - nogil + s["files"]) / n})
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), "?")
    print(f"machine: {os.cpu_count()} cores, {cpu}")
    print(f"{a.pipeline}, {a.n} images, batch {a.batch}, one stream in this thread, "
          f"median of {a.rounds} passes (thread CPU time per image, us)")
    for k, label in (("run", "native batch call (_fused.run_batch: decode+resample+output, no GIL)"),
                     ("headers", "JPEG headers (_fused.read_headers, no GIL)"),
                     ("pread", "reading (the pread syscall of each image, no GIL)"),
                     ("files", "snapshot's file calls (open, write, close, rename, no GIL)"),
                     ("gather", "gather, Python (shard lookup, labels, rows, read calls)"),
                     ("step", "sample step, Python (keys, sizes, draw, slots, statuses)"),
                     ("other", "walk, Python (policy, progress, batching, labels)"),
                     ("flush", "statistics snapshot, Python (once a pass or a second)")):
        print(f"  {label:<70}{med[k] * 1e6:>9.1f}")
    print(f"  {'total CPU per image':<70}{med['total'] * 1e6:>9.1f}")
    print(f"  {'Python per image (holding the GIL: all but the no-GIL parts)':<70}"
          f"{med['python'] * 1e6:>9.1f}")
    print(f"  {'  the same with the snapshot file calls counted in (sessions 3-5)':<70}"
          f"{med['with_files'] * 1e6:>9.1f}")
    print(f"  {'wall time per image (this machine now)':<70}{med['wall'] * 1e6:>9.1f}")
    print(f"  (taken out: this benchmark's timers, {clock.inner * 1e6:.2f} + "
          f"{clock.outer * 1e6:.2f} us per timed call (inside + around), "
          f"{med['timer'] * 1e6:.1f} us per image)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
