"""A/B of builds of the resample extension (``_resample``) in ONE process, interleaved per image
(the method of bench_huffman_ab.py, for ``_native/resample_kernels.c``): each build's
``resample_into`` run on the same decoded pixels in a rotating order, ``--passes`` times,
thread CPU time, the best pass of each build and image summed; the outputs of every build are
checked equal. Give the baseline twice (the second copy is the noise floor).

A build is ``LABEL=DIR``, DIR holding ``_resample.cpython-*.so`` (e.g. copied aside from a
tree after ``TURBOLOADER_ONLY=_resample python setup.py build_ext --inplace``); the first is
the baseline of the ratios. Kinds: ``val`` / ``train``: the window the fused step decodes for
Resize(256)+CenterCrop(224) / RandomResizedCrop(224) (bench_seekable.py's boxes, the DCT
scale and window of ``plan_slots``), resampled to 224x224; ``resize``: the whole decoded
image to 224x224 (bench_kernels.py's resize section). Each kind is timed twice: ``full``
(both passes) and ``horizontal`` (the same columns over all the window's rows, so only the
horizontal pass runs). ``--channels 1|2|4`` resamples the first channel(s) of the pixels (4:
plus an alpha plane) instead of RGB.

    python benchmarks/bench_resample_ab.py --data benchmarks/data/bench-n1024-s0/folder \\
        --kind val --build base=/tmp/a --build new=turboloader/_native --build base2=/tmp/a2
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

OUT = 224


def _load(label: str, folder: str):
    (path,) = glob.glob(os.path.join(folder, "_resample.cpython-*.so"))
    spec = importlib.util.spec_from_file_location(f"ab_{label}._resample", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def _cases(files, kind, seed):
    """(pixels, box) per image: the fused step's decoded window and its box in it, or the
    whole image."""
    from turboloader._native import _jpeg
    from turboloader.decode.executor import _plan_windows

    rng = np.random.default_rng(seed)
    for f in files:
        b = np.frombuffer(Path(f).read_bytes(), np.uint8)
        W, H = _jpeg.read_header(b)[:2]
        if kind == "resize":
            img = np.empty((H, W, 3), np.uint8)
            _jpeg.decode_into(b, img)
            yield img, (0.0, 0.0, float(W), float(H))
            continue
        box, clip = train_box(rng, W, H) if kind == "train" else val_box(W, H)
        hw = np.array([[H, W]], np.int64)
        w = _plan_windows(np.array([box], np.float64), bool(clip),
                          np.array([[OUT, OUT]], np.int64), hw, np.zeros(1, np.uint8), hw,
                          1, True)
        wx, wy, ww, wh = w.window[0].tolist()
        win = np.empty((wh, ww, 3), np.uint8)
        _jpeg.decode_into(b, win, scale_num=int(w.k[0]), crop_x=wx, crop_y=wy, crop_w=ww,
                          crop_h=wh)
        yield win, tuple(w.inner[0].tolist())


def _channels(img, c):
    if c == 3:
        return img
    if c == 4:
        return np.ascontiguousarray(np.concatenate([img, img[..., :1] ^ 0x5a], axis=2))
    return np.ascontiguousarray(img[..., :c])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="a folder of JPEGs (searched recursively)")
    p.add_argument("--n", type=int, default=200, help="images (default 200)")
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--kind", choices=["val", "train", "resize"], default="val")
    p.add_argument("--build", action="append", required=True, metavar="LABEL=DIR")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--channels", type=int, choices=[1, 2, 3, 4], default=3)
    a = p.parse_args()

    mods = [(label, _load(label, d)) for label, d in (b.split("=", 1) for b in a.build)]
    files = sorted(f for f in glob.glob(os.path.join(a.data, "**", "*"), recursive=True)
                   if f.lower().endswith((".jpg", ".jpeg")))[:a.n]
    cases = [(_channels(img, a.channels), box) for img, box in _cases(files, a.kind, a.seed)]
    V = len(mods)
    clock = time.thread_time_ns
    for part in ("full", "horizontal"):
        total = np.zeros(V)
        for i, (img, box) in enumerate(cases):
            if part == "full":
                shape = (OUT, OUT, a.channels)
            else:   # all rows, no vertical resampling: the horizontal pass alone
                shape = (img.shape[0], OUT, a.channels)
                box = (box[0], 0.0, box[2], float(img.shape[0]))
            outs = [np.empty(shape, np.uint8) for _ in mods]
            best = [1 << 62] * V
            for ps in range(a.passes):
                for j in ((j + i + ps) % V for j in range(V)):
                    m = mods[j][1]
                    t0 = clock()
                    m.resample_into(img, outs[j], box=box, filter=m.BILINEAR)
                    best[j] = min(best[j], clock() - t0)
            for (label, _), o in zip(mods[1:], outs[1:]):
                if not np.array_equal(o, outs[0]):
                    raise SystemExit(f"{label} differs from {mods[0][0]} on {img.shape} {box}")
            total += best
        print(f"{a.kind} {part}, {len(cases)} images, {a.channels} channels, best of {a.passes}, thread CPU time; "
              "speed ratio to " + mods[0][0] + ": "
              + "  ".join(f"{label} {total[0] / t:.3f}" for (label, _), t in zip(mods, total))
              + f"  ({mods[0][0]}: {total[0] / len(cases) / 1e3:.1f} us/image)")


if __name__ == "__main__":
    main()
