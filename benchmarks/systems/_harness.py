"""What every system script shares: arguments, the epoch loop, timing, correctness checks.

A system script defines ``build(args, pipeline, root) -> Loader`` and calls
``main(name, build, versions)``. ``Loader`` is any object with

- ``epoch(e)``: an iterable of ``(images, labels)`` batches for epoch ``e``; ``images`` a
  float32 N x 3 x 224 x 224 tensor or array (normalised), ``labels`` a tensor/array of N ints or
  ``None`` when the system delivers no labels;
- ``note`` (str, optional): how this system was configured, semantics that differ;
- ``close()`` (optional);
- ``before_epoch(e, timed)`` (optional): untimed set-up of epoch ``e``, called before its clock
  starts (a cache variant builds a fresh loader there);
- ``cache_note()`` (optional): a line appended to ``note`` after the timed epochs.

The script runs in its own process (the runner starts one per system), prints ``@@PHASE <name>``
and ``@@END <name>`` lines around each pipeline so the runner can attribute peak memory, and
writes one JSON result. Only standard library + numpy + (optionally) torch are used here, so
it runs in every benchmark venv.

Per pipeline it records
- the warm-up epoch (untimed): per-channel mean/std of every delivered pixel, how many images
  are constant (zero-filled or grey), and for the val pipeline an 8x average-pooled thumbnail
  of every image keyed by label (the runner compares them with the baseline's);
- each timed epoch: wall time, and whether every label ``0..n-1`` was delivered exactly once
  (the benchmark data gives every image its own label, so labels identify samples);
- CPU seconds of the whole process tree (this process, live workers, reaped workers) over the
  timed epochs.
Then a correctness pass over a small data set containing one truncated JPEG (label = n_good):
what the loader did with it (raised, skipped, delivered something).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

import numpy as np

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
_CLK = os.sysconf("SC_CLK_TCK")


def parse_args(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="prepared data dir (folder/, shards/, all.tar)")
    ap.add_argument("--corrupt-data", help="small prepared data dir with one truncated JPEG")
    ap.add_argument("--pipelines", default="train,val")
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="result JSON")
    ap.add_argument("--thumbs", help="write val thumbnails here (.npy)")
    ap.add_argument("--variant", default="", help="system-specific variant")
    ap.add_argument("--cache", default="4GB", help="decoded-sample cache size (cache variants)")
    ap.add_argument("--cache-short-side", type=int, default=0,
                    help="cache_short_side of the cache variants (0: full size)")
    return ap.parse_args(argv)


def manifest(root) -> dict:
    return json.loads((Path(root) / "manifest.json").read_text())


# ---------------------------------------------------------------- process-tree CPU time
def _children_map():
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
        except OSError:
            continue
        ppid = int(s[s.rfind(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def _stat_times(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return 0.0, 0.0
    fields = s[s.rfind(")") + 2:].split()
    # fields[11..14] = utime, stime, cutime, cstime (stat fields 14..17)
    own = (int(fields[11]) + int(fields[12])) / _CLK
    reaped = (int(fields[13]) + int(fields[14])) / _CLK
    return own, reaped


def tree_cpu_seconds(root_pid=None) -> float:
    """user+sys seconds of ``root_pid`` (default: this process), its live descendants and
    every descendant already reaped."""
    root_pid = root_pid or os.getpid()
    kids = _children_map()
    total, stack = 0.0, [root_pid]
    while stack:
        pid = stack.pop()
        own, reaped = _stat_times(pid)
        total += own + reaped
        stack.extend(kids.get(pid, ()))
    return total


# ---------------------------------------------------------------- numeric helpers
def _np(x):
    if x is None:
        return None
    if hasattr(x, "detach"):
        x = x.detach()
        if hasattr(x, "cpu"):
            x = x.cpu()
        return x.numpy()
    return np.asarray(x)


class _Stats:
    """Running per-channel sums over float64 (exact enough for 1e8 pixels)."""

    def __init__(self):
        self.n = 0
        self.s = np.zeros(3)
        self.s2 = np.zeros(3)
        self.constant = 0
        self.shape = None
        self.dtype = None
        self.nonfinite = 0

    def add(self, x):
        x = _np(x)
        self.shape, self.dtype = list(x.shape[1:]), str(x.dtype)
        if x.ndim != 4 or 3 not in (x.shape[1], x.shape[3]):
            raise ValueError(f"unexpected batch shape {x.shape}")
        chw = x.shape[1] == 3
        for img in x:  # one image at a time: no batch-sized float64 temporaries
            p = img.reshape(3, -1) if chw else img.reshape(-1, 3).T
            p = p.astype(np.float64)
            self.nonfinite += int((~np.isfinite(p)).sum())
            self.n += p.shape[1]
            self.s += p.sum(axis=1)
            self.s2 += (p * p).sum(axis=1)
            self.constant += int(p.max() - p.min() < 1e-6)

    def result(self):
        if not self.n:
            return None
        mean = self.s / self.n
        std = np.sqrt(np.maximum(self.s2 / self.n - mean * mean, 0))
        return {"mean": mean.round(5).tolist(), "std": std.round(5).tolist(),
                "constant_images": self.constant, "shape": self.shape, "dtype": self.dtype,
                "nonfinite": self.nonfinite}


def _thumbs(x):
    """N x 3 x 28 x 28 average-pooled thumbnails (8x8 blocks) of a N x 3 x 224 x 224 batch."""
    x = _np(x).astype(np.float32, copy=False)
    if x.shape[-1] == 3:
        x = x.transpose(0, 3, 1, 2)
    n, c, h, w = x.shape
    return x[:, :, : h // 8 * 8, : w // 8 * 8].reshape(n, c, h // 8, 8, w // 8, 8).mean(axis=(3, 5))


def _labels_check(labels, n):
    """('ok' | problem description) for one epoch's delivered labels."""
    if labels is None:
        return "no labels delivered"
    lab = np.sort(np.asarray(labels, dtype=np.int64))
    if len(lab) == n and np.array_equal(lab, np.arange(n)):
        return "ok"
    uniq, counts = np.unique(lab, return_counts=True)
    missing = n - int(np.isin(np.arange(n), uniq).sum())
    dup = int((counts > 1).sum())
    return f"{len(lab)} delivered for {n}: {missing} missing, {dup} duplicated"


def _split(batch):
    if len(batch) == 3:
        return batch
    images, lab = batch
    return images, lab, None


def run_epoch(loader, e, *, stats=None, thumbs=None):
    """One epoch: (seconds, images, labels or None, ids or None, tree CPU seconds)."""
    cpu0 = tree_cpu_seconds()
    t0 = time.perf_counter()
    labels, ids, count = [], [], 0
    for batch in loader.epoch(e):
        images, lab, idx = _split(batch)
        count += len(images)
        lab = None if lab is None else _np(lab).reshape(-1).astype(np.int64)
        idx = None if idx is None else _np(idx).reshape(-1).astype(np.int64)
        labels.append(lab)
        ids.append(idx)
        if stats is not None:
            stats.add(images)
        if thumbs is not None:
            thumbs.append((_thumbs(images), lab if lab is not None else idx))
    dt = time.perf_counter() - t0
    cpu = tree_cpu_seconds() - cpu0
    lab = np.concatenate(labels) if labels and all(x is not None for x in labels) else None
    idx = np.concatenate(ids) if ids and all(x is not None for x in ids) else None
    return dt, count, lab, idx, cpu


def _check(lab, idx, n):
    if lab is not None:
        return _labels_check(lab, n)
    if idx is not None:
        r = _labels_check(idx, n)
        return "no labels delivered; by sample index: " + r
    return "no labels delivered"


def gate(step):
    """Lockstep with the runner (BENCH_LOCKSTEP=1): announce the next step and wait for the
    token, so that only one system works at a time and systems alternate epoch by epoch."""
    if os.environ.get("BENCH_LOCKSTEP") == "1":
        print(f"@@READY {step}", flush=True)
        line = sys.stdin.readline()
        if not line:  # runner gone
            os._exit(3)


def _phase(tag, name):
    print(f"@@{tag} {name}", flush=True)


def _before(loader, e, timed):
    hook = getattr(loader, "before_epoch", None)
    if hook:
        hook(e, timed)


def run_pipeline(build, args, pipeline, root):
    n = manifest(root)["n"]
    res = {"pipeline": pipeline, "n": n}
    gate(f"{pipeline}:build")
    loader = build(args, pipeline, root)
    res["note"] = getattr(loader, "note", "")
    try:
        stats = _Stats()
        thumbs = [] if pipeline == "val" and args.thumbs else None
        warm = []
        for w in range(args.warmup):
            gate(f"{pipeline}:warmup{w}")
            _before(loader, w, False)
            dt, count, lab, idx, cpu = run_epoch(loader, w, stats=stats if w == 0 else None,
                                                 thumbs=thumbs if w == 0 else None)
            warm.append({"seconds": dt, "images": count, "labels": _check(lab, idx, n),
                         "cpu_s": cpu})
        res["warmup"] = warm
        res["output"] = stats.result()
        if thumbs:
            th = np.concatenate([t[0] for t in thumbs])
            if all(t[1] is not None for t in thumbs):
                key = np.concatenate([t[1] for t in thumbs])
                out = np.full((n, *th.shape[1:]), np.nan, np.float32)
                ok = (key >= 0) & (key < n)
                out[key[ok]] = th[ok]
            else:  # nothing identifies the images: keep delivery order
                out = th.astype(np.float32)
                res["thumbs_order"] = "delivery"
            np.save(args.thumbs, out)
        epochs = []
        for e in range(args.warmup, args.warmup + args.epochs):
            gate(f"{pipeline}:epoch{e}")
            _before(loader, e, True)
            dt, count, lab, idx, cpu = run_epoch(loader, e)
            epochs.append({"seconds": dt, "images": count, "labels": _check(lab, idx, n),
                           "cpu_s": cpu})
        res["epochs"] = epochs
        timed_images = sum(ep["images"] for ep in epochs)
        rates = sorted(ep["images"] / ep["seconds"] for ep in epochs)
        res["images_per_s"] = float(np.median(rates))
        res["rates"] = rates
        res["cpu_s_per_image"] = sum(ep["cpu_s"] for ep in epochs) / max(timed_images, 1)
        res["labels"] = sorted({ep["labels"] for ep in epochs + warm})
        extra = getattr(loader, "cache_note", None)
        extra = extra() if extra else ""
        if extra:
            res["note"] = f"{res['note']}; {extra}" if res["note"] else extra
    finally:
        close = getattr(loader, "close", None)
        if close:
            close()
    return res


def run_corrupt(build, args, root):
    """One val epoch over a data set with one truncated JPEG; describe what happened."""
    m = manifest(root)
    n, bad = m["n"], m["corrupt_label"]
    res = {"n": n, "corrupt_label": bad}
    try:
        loader = build(args, "val", root)
    except Exception as exc:  # noqa: BLE001 - report whatever the system does
        res["outcome"] = f"loader construction raised {type(exc).__name__}: {_one_line(exc)}"
        return res
    try:
        stats = _Stats()
        labels, per_label = [], {}
        count = 0
        try:
            for batch in loader.epoch(0):
                images, lab, idx = _split(batch)
                if lab is None and idx is not None:
                    lab = idx  # identifies the sample (position = label in the benchmark data)
                count += len(images)
                stats.add(images)
                arr = _np(images)
                if lab is not None:
                    lab = _np(lab).reshape(-1)
                    labels.append(lab)
                    for i in np.nonzero(lab == bad)[0]:
                        x = arr[i]
                        per_label[int(bad)] = {"mean": float(x.mean()), "std": float(x.std())}
            err = None
        except Exception as exc:  # noqa: BLE001
            err = exc
        lab = np.concatenate(labels) if labels else None
        res["delivered"] = count
        res["output"] = stats.result()
        if err is not None:
            res["outcome"] = (f"raised {type(err).__name__}: {_one_line(err)} "
                              f"(epoch aborted after {count}/{n})")
            res["kind"] = "raised"
        elif lab is None:
            res["outcome"] = (f"no error; {count}/{n} images delivered, no labels to tell "
                              f"whether the corrupt one was among them; "
                              f"{stats.constant} constant images")
            res["kind"] = "silent" if count == n else "skipped?"
        elif bad in per_label:
            s = per_label[bad]
            res["outcome"] = (f"delivered the corrupt image with no error (mean {s['mean']:.3f}, "
                              f"std {s['std']:.3f}); {count}/{n} delivered")
            res["kind"] = "delivered"
        else:
            good = np.setdiff1d(np.arange(n), [bad])
            seen = np.isin(good, lab)
            res["outcome"] = (f"skipped it: {count}/{n} delivered, "
                              f"{int(seen.sum())}/{len(good)} good samples seen"
                              + (f", {count - len(np.unique(lab))} repeats" if count > len(np.unique(lab)) else ""))
            res["kind"] = "skipped"
        extra = getattr(loader, "failure_report", None)
        if extra:
            try:
                res["outcome"] += f"; {extra()}"
            except Exception as exc:  # noqa: BLE001
                res["outcome"] += f"; (failure report failed: {exc})"
    finally:
        close = getattr(loader, "close", None)
        if close:
            try:
                close()
            except Exception:  # noqa: BLE001
                pass
    return res


def _one_line(exc) -> str:
    s = str(exc).strip().splitlines()
    # torch's worker re-raise wraps the original; its last line is the real message
    msg = s[-1] if s else ""
    if "Original Traceback" in str(exc):
        msg = s[-1]
    return msg[:240]


def main(name, build, versions=None, build_corrupt=None):
    args = parse_args()
    out = {"system": name, "variant": args.variant, "pid": os.getpid(),
           "python": platform.python_version(), "versions": {}, "pipelines": {}}
    try:
        out["versions"] = versions() if callable(versions) else (versions or {})
    except Exception as exc:  # noqa: BLE001
        out["versions"] = {"error": repr(exc)}
    status = 0
    for p in [p for p in args.pipelines.split(",") if p]:
        _phase("PHASE", p)
        try:
            out["pipelines"][p] = run_pipeline(build, args, p, args.data)
        except Exception as exc:  # noqa: BLE001 - a failing system gets a row saying why
            traceback.print_exc()
            out["pipelines"][p] = {"error": f"{type(exc).__name__}: {_one_line(exc)}"}
            status = 1
        _phase("END", p)
    if args.corrupt_data:
        _phase("PHASE", "corrupt")
        try:
            gate("corrupt")
            out["corrupt"] = run_corrupt(build_corrupt or build, args, args.corrupt_data)
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            out["corrupt"] = {"outcome": f"harness error {type(exc).__name__}: {_one_line(exc)}"}
        _phase("END", "corrupt")
    gate("exit")
    Path(args.out).write_text(json.dumps(out, indent=1))
    sys.stdout.flush()
    # os._exit: some loaders' background threads keep a normal exit waiting
    os._exit(status)
