"""The physical limit: libjpeg-turbo full decode alone over the same files, one thread,
multiplied by the number of workers.

The JPEG bytes are read into memory first; a pass decodes every image at full size to RGB
(no resize, no normalise, no batching). Two libjpeg-turbo front ends are timed: Pillow
(``Image.open(BytesIO(b)).load()``, the libjpeg-turbo Pillow bundles) and turboloader's
``decode_jpeg`` with libjpeg-turbo's own Huffman decoder (``_STOCK_HUFFMAN``: the libjpeg-turbo
it links, unchanged), when importable; the faster one is the limit. ``decode_jpeg`` with
turboloader's Huffman decoder (``_native/jpeg_huffman.c``, the default) is timed too and
reported in the note, but is not the limit: it is faster than libjpeg-turbo itself.
With several workers, the limit's front is also timed on that many real threads at once
(each its share of the files), reported in the note only: the limit stays one thread's rate
times the workers, which two threads reach only when both get a core of their own and do not
slow each other (shared cache and memory; another process on the machine takes a core from
two threads, while one thread still finds one free).
A loader that decodes at a reduced DCT scale or only a crop window (RandomResizedCrop) can
beat this "limit": it decodes fewer pixels than a full decode.
"""
import glob
import io
import threading
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import _harness as H

#: timed and reported, not a candidate for the limit
OWN = "turboloader decode_jpeg (turboloader's Huffman decoder)"
STOCK = "turboloader decode_jpeg (libjpeg-turbo's Huffman decoder)"


def main():
    args = H.parse_args()
    files = sorted(glob.glob(f"{args.data}/folder/*/*.jpg"))
    blobs = [Path(f).read_bytes() for f in files]
    from PIL import Image

    fronts = {"Pillow Image.open().load()": lambda b: Image.open(io.BytesIO(b)).load()}
    try:
        import turboloader.decode.jpeg as tl_jpeg
        from turboloader.decode.jpeg import decode_jpeg

        def stock(b):
            tl_jpeg._STOCK_HUFFMAN = True
            try:
                return decode_jpeg(b)
            finally:
                tl_jpeg._STOCK_HUFFMAN = False

        fronts[STOCK] = stock
        fronts[OWN] = decode_jpeg
    except Exception as exc:  # noqa: BLE001
        print(f"turboloader decode_jpeg unavailable: {exc!r}")
    H._phase("PHASE", "decode")
    times = {k: [] for k in fronts}
    cpu = {k: 0.0 for k in fronts}
    for e in range(args.warmup + args.epochs):
        for k, f in fronts.items():
            H.gate(f"decode:{k}:{e}")
            c0 = time.process_time()
            t0 = time.perf_counter()
            for b in blobs:
                f(b)
            dt = time.perf_counter() - t0
            if e >= args.warmup:
                times[k].append(dt)
                cpu[k] += time.process_time() - c0
    n = len(blobs)
    single = {k: n / float(np.median(v)) for k, v in times.items()}
    best = max((k for k in single if k != OWN), key=single.get)
    W = args.workers
    threaded = []
    if W > 1:   # the limit's front on W real threads, reported, never the limit
        # (the stock front's switch is a module flag: set once around the threads)
        stock_front = best == STOCK
        f = decode_jpeg if stock_front else fronts[best]

        def work(part):
            for b in part:
                f(b)
        for e in range(args.warmup + args.epochs):
            H.gate(f"decode:threads:{e}")
            ts = [threading.Thread(target=work, args=(blobs[i::W],)) for i in range(W)]
            if stock_front:
                tl_jpeg._STOCK_HUFFMAN = True
            t0 = time.perf_counter()
            try:
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
            finally:
                if stock_front:
                    tl_jpeg._STOCK_HUFFMAN = False
            if e >= args.warmup:
                threaded.append(time.perf_counter() - t0)
    H._phase("END", "decode")
    note = (f"{best}: {single[best]:.0f} images/s on 1 thread x {args.workers}; "
            + ", ".join(f"{k} {v:.0f}/s" for k, v in single.items() if k != best))
    real = n / float(np.median(threaded)) if threaded else None
    if real is not None:
        note += (f"; the same on {W} real threads at once: {real:.0f} images/s "
                 f"({real / (single[best] * W):.2f}x the limit)")
    res = {"images_per_s": single[best] * args.workers, "single_thread": single,
           "cpu_s_per_image": cpu[best] / (n * args.epochs), "note": note, "labels": ["n/a"],
           "n": n, "real_threads_images_per_s": real}
    import PIL.features
    versions = {"PIL": __import__("PIL").__version__,
                "libjpeg-turbo": PIL.features.version_feature("libjpeg_turbo")}
    out = {"system": "decode-limit", "versions": versions,
           "pipelines": {p: dict(res, pipeline=p) for p in args.pipelines.split(",") if p}}
    H.gate("exit")
    Path(args.out).write_text(json.dumps(out, indent=1))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
