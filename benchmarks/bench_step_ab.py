"""A/B of builds of the fused batch step in ONE process: what the thread backend's native call
does per batch (``_fused.run_batch``: decode window -> resample -> flip -> normalize into a
float32 ``(N, 3, 224, 224)`` batch tensor), several builds loaded side by side, each batch run
through every build in a rotating order, ``--rounds`` times, thread CPU time of a 1-thread
``BatchRunner`` (the work runs on the calling thread). Unlike bench_huffman_ab.py's per-image
uint8 slot, the output is a whole batch tensor of float32 (154 MB for 256 rows), as the loader
writes it, so the normalize store's memory traffic is part of the step.

A build is ``LABEL=DIR``, DIR holding copies of a tree's ``_fused``, ``_resample`` and
``_chw`` ``.cpython-*.so`` (the ``_resample`` / ``_chw`` beside a ``_fused`` are the kernels it
runs); the first is the baseline of the ratios; give it twice (the second copy is the noise
floor). ``--kind train``: RandomResizedCrop(224) boxes (torchvision's draws, seeded) and a
random flip; ``val``: Resize(256)+CenterCrop(224). Both with Normalize(ImageNet mean/std).
The outputs of every build are compared with the first's (bit for bit) once.

    python benchmarks/bench_step_ab.py --data /tmp/data/bench-n2048-s0/folder --kind train \\
        --build main=/tmp/main --build new=/tmp/new --build main2=/tmp/main2
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_seekable import train_box, val_box  # noqa: E402  (the boxes both benchmarks draw)

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
DEPS = ("_resample", "_chw", "_colour")   # modules _fused cimports: the copy beside it


def load_fused(label: str, folder: str):
    """The ``_fused`` copy in ``folder``, bound to the ``_resample``/``_chw``/``_colour``
    copies beside it (Cython binds cimported functions from whatever module ``sys.modules``
    holds under their names when the importing module loads)."""
    (path,) = glob.glob(os.path.join(folder, "_fused.cpython-*.so"))
    saved = {}
    try:
        for dep in DEPS:
            found = glob.glob(os.path.join(folder, f"{dep}.cpython-*.so"))
            key = f"turboloader._native.{dep}"
            if found:
                saved[key] = sys.modules.get(key)
                spec = importlib.util.spec_from_file_location(f"ab_{label}.{dep}", found[0])
                m = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(m)
                sys.modules[key] = m
        spec = importlib.util.spec_from_file_location(f"ab_{label}._fused", path)
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
    finally:
        for key, old in saved.items():
            sys.modules[key] = old
    return m


class _Row:
    """Row ``b`` of a BatchParams, as the arrays ``_fused.run_batch`` reads."""

    def __init__(self, params, b):
        for name in ("kind", "window", "full", "scale_num", "box", "flip", "n_ops", "ops",
                     "factors"):
            setattr(self, name, np.ascontiguousarray(getattr(params, name)[b:b + 1]))
        self.filter = params.filter


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="a folder of JPEGs (searched recursively)")
    p.add_argument("--n", type=int, default=1024, help="images (default 1024)")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--rounds", type=int, default=3, help="runs of each batch per build")
    p.add_argument("--kind", choices=["train", "val"], default="train")
    p.add_argument("--build", action="append", required=True, metavar="LABEL=DIR")
    p.add_argument("--jitter", action="store_true",
                   help="a brightness op (factor 1.1) on every row: the colour-op path")
    p.add_argument("--per-image", action="store_true",
                   help="interleave the builds per image (1-row calls, best of --rounds) "
                        "rather than per batch")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    from turboloader.decode import executor

    builds = [b.split("=", 1) for b in a.build]
    mods = [(label, load_fused(label, d)) for label, d in builds]
    runners = [m.BatchRunner(threads=1) for _, m in mods]
    files = sorted(f for f in glob.glob(os.path.join(a.data, "**", "*"), recursive=True)
                   if f.lower().endswith((".jpg", ".jpeg")))[:a.n]
    blobs = [Path(f).read_bytes() for f in files]
    rng = np.random.default_rng(a.seed)
    scale, bias = executor.normalize_affine(MEAN, STD)

    batches = []
    for s in range(0, len(blobs), a.batch):
        srcs = blobs[s:s + a.batch]
        n = len(srcs)
        sizes = executor.read_sizes(srcs)
        spec = executor.SlotSpec(n)
        spec.box = np.zeros((n, 4))
        spec.clip = np.zeros(n, bool)
        spec.out = np.full((n, 2), 224, np.int64)
        for i, (h, w) in enumerate(sizes.hw.tolist()):
            box, clip = train_box(rng, w, h) if a.kind == "train" else val_box(w, h)
            spec.box[i] = box
            spec.clip[i] = clip
            spec.flip[i] = a.kind == "train" and rng.random() < 0.5
            if a.jitter:   # one brightness op: the resized image, then the separate write
                spec.ops[i, 0], spec.factors[i, 0], spec.n_ops[i] = 0, 1.1, 1
        params = executor.plan_slots(sizes, spec, filter=1)
        assert (params.status == executor.OK).all()
        batches.append((srcs, params))
    # one batch tensor per build, as the loader recycles them: a call writes a row that has
    # left the core's caches since its last write (rows rotate), so the float32 store costs
    # what it costs the loader
    outs = [np.zeros((a.batch, 3, 224, 224), np.float32) for _ in mods]

    def run(j, srcs, params, rows):
        m = mods[j][1]
        n = len(srcs)
        failed, errors, _, _ = m.run_batch(
            runners[j], srcs, outs[j], todo=np.ones(n, np.uint8), kind=params.kind,
            rows=rows, window=params.window, full=params.full,
            scale_num=params.scale_num, box=params.box, flip=params.flip,
            n_ops=params.n_ops, ops=params.ops, factors=params.factors,
            filter=params.filter, mean_scale=scale, bias=bias, flags=0, max_pixels=0)
        assert not failed.any(), errors

    names = [label for label, _ in mods]
    V = len(mods)
    for srcs, params in batches:   # every row written, and equal to the first build's
        rows = np.arange(len(srcs), dtype=np.int64)
        for j in range(V):
            run(j, srcs, params, rows)
        for j in range(1, V):
            if not np.array_equal(outs[j][:len(srcs)].view(np.uint32),
                                  outs[0][:len(srcs)].view(np.uint32)):
                raise SystemExit(f"{names[j]}'s output differs from {names[0]}'s")
    clock = time.thread_time_ns
    total = np.zeros(V)
    if a.per_image:
        # each image through every build in a rotating order, --rounds times, the best time
        # of each build and image summed (filters out the passes another process disturbed)
        i = 0
        for srcs, params in batches:
            for b in range(len(srcs)):
                one = _Row(params, b)
                best = [1 << 62] * V
                for r in range(a.rounds):
                    row = np.array([(i * a.rounds + r) % a.batch], np.int64)
                    for j in ((j + i + r) % V for j in range(V)):
                        t0 = clock()
                        run(j, srcs[b:b + 1], one, row)
                        best[j] = min(best[j], clock() - t0)
                total += best
                i += 1
        images = i
    else:
        k = 0
        for r in range(a.rounds):
            for srcs, params in batches:
                rows = np.arange(len(srcs), dtype=np.int64)
                for j in ((j + k) % V for j in range(V)):
                    t0 = clock()
                    run(j, srcs, params, rows)
                    total[j] += clock() - t0
                k += 1
        images = a.rounds * sum(len(b[0]) for b in batches)
    how = (f"per image, best of {a.rounds}" if a.per_image
           else f"whole batches of {a.batch}, {a.rounds} rounds summed")
    print(f"{a.kind}{' + jitter' if a.jitter else ''} step, {len(blobs)} images, {how}, float32 + normalize into batch "
          f"tensors, thread CPU time; images/s ratio to {names[0]}: "
          + "  ".join(f"{nm} {total[0] / t:.3f}" for nm, t in zip(names, total))
          + f"  ({names[0]}: {images / (total[0] * 1e-9):.0f} images/s, "
          f"{total[0] * 1e-3 / images:.0f} us/image)")


if __name__ == "__main__":
    main()
