"""A/B of builds of the JPEG extension in ONE process, interleaved per image (the method of
benchmarks/results/huffman-tuning.md): several copies of ``_jpeg`` (or ``_fused``) loaded side
by side, each image decoded through every build in a rotating order, ``--passes`` times, thread
CPU time, the best pass of each build and image summed. Finer than alternating processes
(bench_seekable.py, bench_builds.py) on a loaded machine: give the baseline twice (the second
copy is the noise floor).

A build is ``LABEL=DIR``, DIR holding ``_jpeg.cpython-*.so`` and/or ``_fused.cpython-*.so``
(e.g. copied aside after ``TURBOLOADER_ONLY=_jpeg,_fused python setup.py build_ext
--inplace``); the first is the baseline of the ratios. A ``_resample.cpython-*.so`` beside a
``_fused`` copy is the resampler that copy runs (A/B of the resample kernels in the train / val
steps; copy both from each tree). The images are the ``--data`` folder's
JPEGs rewritten with restart markers (``convert --seekable``'s transcode) unless
``--original``. Kinds: ``full`` (``decode_into``, whole image), ``full8`` (at 1/8 scale, almost
all Huffman), ``full4`` / ``full2`` (at 1/4 / 1/2 scale), ``train`` / ``val`` (the fused
decode+crop+resize step of bench_seekable.py with RandomResizedCrop(224) /
Resize(256)+CenterCrop(224) boxes; needs ``_fused`` builds). A last
column ``stock`` is the baseline with libjpeg-turbo's Huffman decoder; ``--limit`` adds the
full-size decode of each original image with it (the full-decode limit, one thread) and prints every
build's images/s over the limit's.

    python benchmarks/bench_huffman_ab.py --data benchmarks/data/bench-n1024-s0/folder \\
        --kind full --build base=/tmp/old --build pair=/tmp/new --build base2=/tmp/old2
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


def _load(label: str, folder: str, mod: str):
    (path,) = glob.glob(os.path.join(folder, f"{mod}.cpython-*.so"))
    spec = importlib.util.spec_from_file_location(f"ab_{label}.{mod}", path)
    m = importlib.util.module_from_spec(spec)
    # a _resample copy beside a _fused one is the resampler that copy runs: _fused binds the
    # C functions of whatever module sys.modules holds under _resample's name when it loads
    res = glob.glob(os.path.join(folder, "_resample.cpython-*.so")) if mod == "_fused" else []
    key = "turboloader._native._resample"
    saved = sys.modules.get(key)
    if res:
        rspec = importlib.util.spec_from_file_location(f"ab_{label}._resample", res[0])
        r = importlib.util.module_from_spec(rspec)
        rspec.loader.exec_module(r)
        sys.modules[key] = r
    try:
        spec.loader.exec_module(m)
    finally:
        if res:
            sys.modules[key] = saved
    return m


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="a folder of JPEGs (searched recursively)")
    p.add_argument("--n", type=int, default=150, help="images (default 150)")
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--kind", choices=["full", "full2", "full4", "full8", "train", "val"],
                   default="full")
    p.add_argument("--original", action="store_true", help="the files as they are")
    p.add_argument("--build", action="append", required=True, metavar="LABEL=DIR")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", action="store_true",
                   help="add a column 'limit': the full-size decode of each image with "
                        "libjpeg-turbo's Huffman decoder through the first build's _jpeg "
                        "(the full-decode limit of benchmarks/run.py, one thread), interleaved "
                        "like the rest; printed as each build's images/s over it")
    a = p.parse_args()

    from turboloader._native import _jpeg
    from turboloader.decode import executor
    import turboloader.decode.jpeg as tl_jpeg
    from turboloader.decode.jpeg import _open

    mod = "_fused" if a.kind in ("train", "val") else "_jpeg"
    builds = [b.split("=", 1) for b in a.build]
    mods = [(label, _load(label, d, mod)) for label, d in builds]
    lim = _load(f"{builds[0][0]}_limit", builds[0][1], "_jpeg") if a.limit else None
    files = sorted(f for f in glob.glob(os.path.join(a.data, "**", "*"), recursive=True)
                   if f.lower().endswith((".jpg", ".jpeg")))[:a.n]
    blobs = [np.frombuffer(Path(f).read_bytes(), np.uint8) for f in files]
    originals = blobs                 # the limit decodes the original files either way
    if not a.original:
        blobs = [np.frombuffer(_jpeg.transcode_restart(b)[0], np.uint8) for b in blobs]
    rng = np.random.default_rng(a.seed)

    calls = []
    for b, ob in zip(blobs, originals):
        W, H = _jpeg.read_header(b)[:2]
        if a.kind.startswith("full"):
            k = {"full": 8, "full2": 4, "full4": 2, "full8": 1}[a.kind]
            out = np.empty(((H * k + 7) // 8, (W * k + 7) // 8, 3), np.uint8)
            fs = [(lambda m=m, b=b, out=out, k=k: m.decode_into(b, out, scale_num=k))
                  for _, m in mods]
            m0 = mods[0][1]
            fs.append(lambda m=m0, b=b, out=out, k=k:
                      m.decode_into(b, out, scale_num=k, flags=m.STOCK_HUFFMAN))
        else:
            o = _open(b, None)[:2]
            box, clip = train_box(rng, W, H) if a.kind == "train" else val_box(W, H)
            slot = np.empty((3, 224, 224), np.uint8)

            def step(m, stock=False, o=o, box=box, clip=clip, slot=slot):
                def go():
                    executor._fused = m   # the build this call runs
                    tl_jpeg._STOCK_HUFFMAN = stock
                    try:
                        executor.resample_into_slot(o, slot, box=box, clip=clip, filt=1)
                    finally:
                        tl_jpeg._STOCK_HUFFMAN = False
                return go
            fs = [step(m) for _, m in mods] + [step(mods[0][1], True)]
        if a.limit:
            full = np.empty((H, W, 3), np.uint8)
            fs.append(lambda ob=ob, full=full, m=lim: m.decode_into(ob, full,
                                                                    flags=m.STOCK_HUFFMAN))
        calls.append(fs)

    names = [label for label, _ in mods] + ["stock"] + (["limit"] if a.limit else [])
    V = len(names)
    total = np.zeros(V)
    clock = time.thread_time_ns
    for i, fs in enumerate(calls):
        best = [1 << 62] * V
        for ps in range(a.passes):
            for j in ((j + i + ps) % V for j in range(V)):
                t0 = clock()
                fs[j]()
                dt = clock() - t0
                best[j] = min(best[j], dt)
        total += best
    print(f"{a.kind}, {len(calls)} {'original' if a.original else 'seekable'} images, "
          f"best of {a.passes}, thread CPU time; images/s ratio to {names[0]}: "
          + "  ".join(f"{nm} {total[0] / t:.3f}" for nm, t in zip(names, total))
          + f"  ({names[0]}: {len(calls) / (total[0] * 1e-9):.0f} images/s)")
    if a.limit:
        print("  x the full-decode limit (libjpeg-turbo full decode of the original files, same run): "
              + "  ".join(f"{nm} {total[-1] / t:.3f}" for nm, t in zip(names[:-1], total)))


if __name__ == "__main__":
    main()
