"""Seekable-JPEG benchmark (issue 22): train and val pipelines on ``convert --seekable`` TAR
shards against the original shards, and against the full-decode limit of the original JPEGs.

Rows, all measured in the same run on the same images (benchmarks/datasets.py, real
photographs at ImageNet's sizes):

* conversion: ``convert(..., seekable=True)`` TAR -> TAR (lossless rewrite with restart
  markers and optimized Huffman tables) on ``--threads`` threads, images/s and the size of
  the output against the input;
* decode limit: libjpeg-turbo full decode (``decode_jpeg`` with libjpeg-turbo's own Huffman
  decoder) of every original JPEG on one thread, times ``--threads`` (the "full-decode limit"
  of benchmarks/run.py); the same with turboloader's Huffman decoder is a kernel row;
* kernel rows, one thread, CPU time (``time.process_time``, so that other processes on a
  shared machine do not count): the full decode of every original JPEG (the decode limit of
  one thread), and the fused decode -> crop/resize -> CHW step the datasets run per sample
  (``resample_into_slot``) with torchvision's RandomResizedCrop(224) boxes (train) and
  Resize(256) + CenterCrop(224) boxes (val), on the original and on the seekable bytes (both
  also through libjpeg-turbo's own Huffman decoder, as with
  ``TURBOLOADER_STOCK_HUFFMAN=1``, against turboloader's ``jpeg_huffman.c``);
* loader rows, wall time: train (RandomResizedCrop 224 + flip + normalize) and val (Resize 256
  + CenterCrop 224 + normalize) through ``turboloader.DataLoader(TarDataset,
  backend="threads", num_workers=--threads)`` on the original and the seekable shards, against
  the full-decode limit (1 thread x threads, as in benchmarks/run.py).

Systems are interleaved pass by pass and the best pass of each is kept, so a neighbour's load
hits all of them alike. Only ratios within one run mean anything on a shared machine.

    python benchmarks/bench_seekable.py                 # 400 ImageNet-sized images, 2 threads
    python benchmarks/bench_seekable.py --n 800 --threads 2 --repeat 5
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def train_box(rng, W, H):
    """torchvision's ``RandomResizedCrop.get_params`` (default scale / ratio) drawn from the
    NumPy generator ``rng``, as a source box: ``((x0, y0, x1, y1), True)``."""
    for _ in range(10):
        area = W * H * rng.uniform(0.08, 1.0)
        ar = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        w, h = int(round(math.sqrt(area * ar))), int(round(math.sqrt(area / ar)))
        if 0 < w <= W and 0 < h <= H:
            x, y = int(rng.integers(0, W - w + 1)), int(rng.integers(0, H - h + 1))
            return (x, y, x + w, y + h), True
    return (0, 0, W, H), True


def val_box(W, H):
    """Resize(256) then CenterCrop(224) as one source box: ``((x0, y0, x1, y1), False)``."""
    c = 224 / (256 / min(W, H))
    return ((W - c) / 2, (H - c) / 2, (W + c) / 2, (H + c) / 2), False


def _transform(pipeline):
    import torch

    from turboloader import transforms as T

    if pipeline == "train":
        head = [T.RandomResizedCrop(224, antialias=True), T.RandomHorizontalFlip()]
    else:
        head = [T.Resize(256, antialias=True), T.CenterCrop(224)]
    return T.Compose([*head, T.ToImage(), T.ToDtype(torch.float32, scale=True),
                      T.Normalize(MEAN, STD)])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=400, help="images (default 400)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hires", action="store_true", help="1600-4000 px images")
    p.add_argument("--data", help="an ImageFolder tree to use instead of generated images")
    p.add_argument("--shard-size", type=int, default=100)
    p.add_argument("--threads", type=int, default=2, help="loader threads (default 2)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--repeat", type=int, default=3, help="passes per system; the best is kept")
    p.add_argument("--workdir", help="where to write the data (default: a temporary directory)")
    p.add_argument("--short-sides", default="",
                   help="also pre-size the images (convert --max-short-side S at --quality, "
                        "plain and seekable) for each S of this comma list, e.g. 160,256,320, "
                        "and add kernel rows and sizes for them")
    p.add_argument("--quality", type=int, default=90, help="JPEG quality of pre-sized images")
    p.add_argument("--no-loader", action="store_true", help="kernel rows only")
    p.add_argument("--finest", action="store_true",
                   help="also convert with one MCU per restart interval (the finest cut, "
                        "whatever the size), add its kernel rows, and split the val step "
                        "into its parts (window decode, resample) on every shard set")
    args = p.parse_args(argv)

    import numpy as np
    import torch

    import turboloader as tl
    from datasets import make_jpegs, read_image_folder, write_shards
    from turboloader.decode.jpeg import decode_jpeg
    from turboloader.tools.convert import convert

    torch.set_num_threads(1)
    tmp = tempfile.TemporaryDirectory(dir=args.workdir)
    work = Path(tmp.name)
    t0 = time.perf_counter()
    items = read_image_folder(args.data, limit=args.n) if args.data else \
        make_jpegs(args.n, seed=args.seed, hires=args.hires)
    shards = write_shards(work / "orig", items, shard_size=args.shard_size)
    n = len(items)
    print(f"data: {n} images, {np.mean([len(d) for d, _ in items]) / 1000:.1f} KB/image, "
          f"{len(shards)} shards ({time.perf_counter() - t0:.1f} s to make)", file=sys.stderr)

    # -- conversion ----------------------------------------------------------------------
    rate = 0.0
    for _ in range(args.repeat):
        rep = convert(str(work / "orig" / "*.tar"), work / "seek", dst_format="tar",
                      shard_size=args.shard_size, seekable=True, shuffle=False,
                      workers=args.threads, overwrite=True)
        assert rep.written == n and not rep.skipped, rep.summary()
        rate = max(rate, rep.written / rep.seconds)
    img_in, img_out = rep.bytes_in, rep.bytes_out
    seek_shards = sorted((work / "seek").glob("*.tar"))

    # -- kernel rows (one thread, CPU time) ------------------------------------------------
    from turboloader._native import _jpeg
    from turboloader.decode.executor import resample_into_slot
    from turboloader.decode.jpeg import _open
    from turboloader.decode.sizes import window_scale_num

    def _window_k(crop_w, crop_h, out_w, out_h):   # the executor's rule, for one row
        return int(window_scale_num([[crop_w, crop_h]], [[out_w, out_h]])[0])

    blobs = [d for d, _ in items]
    seek = [_jpeg.transcode_restart(d)[0] for d in blobs]
    finest = [_jpeg.transcode_restart(d, restart_mcus=1)[0] for d in blobs] \
        if args.finest else seek
    opened = [(_open(a, None)[:2], _open(b, None)[:2], _open(c, None)[:2])
              for a, b, c in zip(blobs, seek, finest)]
    rng = np.random.default_rng(args.seed)

    def rrc_box(W, H):
        return train_box(rng, W, H)

    boxes = {p: [f(o[0][1].width, o[0][1].height) for o in opened]
             for p, f in (("train", rrc_box), ("val", val_box))}
    slot = np.empty((3, 224, 224), np.uint8)

    import turboloader.decode.jpeg as tl_jpeg

    def kernel(which, pipeline, stock=False):
        def go():
            # stock: libjpeg-turbo's own Huffman decoder (TURBOLOADER_STOCK_HUFFMAN=1)
            tl_jpeg._STOCK_HUFFMAN = stock
            try:
                for o, (box, clip) in zip(opened, boxes[pipeline]):
                    resample_into_slot(o[which], slot, box=box, clip=clip, filt=1)
            finally:
                tl_jpeg._STOCK_HUFFMAN = False
            return len(opened)
        return go

    def full_decode(stock=True):
        def go():
            # the limit is libjpeg-turbo's own decode (its Huffman decoder)
            tl_jpeg._STOCK_HUFFMAN = stock
            try:
                for b in blobs:
                    decode_jpeg(b)
            finally:
                tl_jpeg._STOCK_HUFFMAN = False
            return len(blobs)
        return go

    ksys = {"full decode of the original JPEGs (limit)": full_decode(),
            "full decode of the original JPEGs, turboloader's Huffman decoder":
                full_decode(False)}
    for pipeline in ("train", "val"):
        ksys[f"{pipeline}: fused decode+crop+resize, original"] = kernel(0, pipeline)
        ksys[f"{pipeline}: fused decode+crop+resize, original, libjpeg-turbo's Huffman "
             "decoder"] = kernel(0, pipeline, stock=True)
        ksys[f"{pipeline}: fused decode+crop+resize, seekable"] = kernel(1, pipeline)
        ksys[f"{pipeline}: fused decode+crop+resize, seekable, libjpeg-turbo's Huffman "
             "decoder"] = kernel(1, pipeline, stock=True)
        if args.finest:
            ksys[f"{pipeline}: fused decode+crop+resize, seekable, 1 MCU per interval"] = \
                kernel(2, pipeline)

    # the val step in parts: the window's decode (the restart path where it applies), and
    # the resample of the decoded window (HWC, as the fused step runs it, without the CHW
    # normalize): the window maths of decode/_slot.py
    from turboloader._native import _resample
    from turboloader.decode._window import window_of_one

    val_windows = []
    for o, (box, clip) in zip(opened, boxes["val"]):
        W, H = o[0][1].width, o[0][1].height
        k = _window_k(box[2] - box[0], box[3] - box[1], 224, 224)
        dw, dh = (W * k + 7) // 8, (H * k + 7) // 8
        val_windows.append((k, *window_of_one(box, clip, (224, 224), (dh, dw), (k / 8, k / 8),
                                              1)))
    win_bufs = {}
    for _, _, _, ww, wh, _ in val_windows:
        win_bufs.setdefault((wh, ww), np.empty((wh, ww, 3), np.uint8))
    resized = np.empty((224, 224, 3), np.uint8)

    def window_decode(which):
        def go():
            for o, (k, wx, wy, ww, wh, _) in zip(opened, val_windows):
                _jpeg.decode_into(o[which][0], win_bufs[(wh, ww)], scale_num=k, crop_x=wx,
                                  crop_y=wy, crop_w=ww, crop_h=wh, restart=which > 0)
            return len(opened)
        return go

    def window_resample():
        for (_, _, _, ww, wh, inner) in val_windows:
            _resample.resample_into(win_bufs[(wh, ww)], resized, box=inner,
                                    filter=_resample.BILINEAR)
        return len(val_windows)

    def sub_image_share(which):
        """(share of the val windows the restart path takes, mean area of the sub-image it
        decodes as a share of the image, 1 where it does not apply)"""
        took, area = 0, 0.0
        for o, (k, wx, wy, ww, wh, _) in zip(opened, val_windows):
            sub = _jpeg.restart_window(o[which][0], scale_num=k, crop_x=wx, crop_y=wy,
                                       crop_w=ww, crop_h=wh)
            took += sub is not None
            area += sub[2] * sub[3] / (o[which][1].width * o[which][1].height) if sub else 1.0
        return took / len(opened), area / len(opened)

    def mcu_grid(data):
        """(MCU width, height, MCUs per row, MCU rows, chroma context x, y) of a baseline
        file (the seekable copy: the transcode keeps the original's sampling)."""
        b = bytes(data)
        j = b.find(b"\xff\xc0")
        if j < 0:
            j = b.find(b"\xff\xc1")
        h, w, nc = int.from_bytes(b[j + 5:j + 7], "big"), int.from_bytes(b[j + 7:j + 9], "big"), b[j + 9]
        hs = max(b[j + 11 + 3 * i] >> 4 for i in range(nc)) if nc > 1 else 1
        vs = max(b[j + 11 + 3 * i] & 15 for i in range(nc)) if nc > 1 else 1
        return 8 * hs, 8 * vs, -(-w // (8 * hs)), -(-h // (8 * vs)), 4 * (hs > 1), 4 * (vs > 1)

    def entropy_share(pipeline):
        """Mean share of the image's MCUs that a window's decode entropy-decodes: the
        original file (every MCU row down to the window's last and the upsampler's context
        row below, full width: the rows above are skipped by decoding them), the seekable file (the restart path's sub-image
        where it applies), with one MCU per interval (--finest), and at best (the MCUs
        under the window and the upsampler's one chroma sample around it); and the share
        of windows the restart path takes on the seekable files."""
        acc = np.zeros(4)
        took = 0
        for o, (box, clip) in zip(opened, boxes[pipeline]):
            W, H = o[0][1].width, o[0][1].height
            k = _window_k(box[2] - box[0], box[3] - box[1], 224, 224)
            wx, wy, ww, wh, _ = window_of_one(box, clip, (224, 224),
                                              ((H * k + 7) // 8, (W * k + 7) // 8),
                                              (k / 8, k / 8), 1)
            mw, mh, mpr, mrows, cx, cy = mcu_grid(o[1][0])
            f = 8 / k
            x0, y0, x1, y1 = wx * f, wy * f, (wx + ww) * f, (wy + wh) * f
            total = mpr * mrows
            ordinary = mpr * min(mrows, math.ceil((y1 + cy) / mh)) / total
            best = ((min(mpr, math.ceil((x1 + cx) / mw)) - int(max(0, x0 - cx) // mw)) *
                    (min(mrows, math.ceil((y1 + cy) / mh)) - int(max(0, y0 - cy) // mh))) / total
            shares = [ordinary]
            for which in (1, 2):
                sub = _jpeg.restart_window(o[which][0], scale_num=k, crop_x=wx, crop_y=wy,
                                           crop_w=ww, crop_h=wh)
                took += which == 1 and sub is not None
                shares.append(sub[2] * sub[3] / (W * H) if sub else ordinary)
            acc += [*shares, best]
        return (*(acc / len(opened)), took / len(opened))

    if args.finest:
        for which, label in ((0, "original"), (1, "seekable"), (2, "seekable, 1 MCU per interval")):
            ksys[f"val, part: window decode only, {label}"] = window_decode(which)
        ksys["val, part: resample of the decoded window to 224 x 224 (HWC)"] = window_resample

    # pre-sized copies (part 4 of issue 22): the same boxes, scaled to the smaller images
    import tarfile

    sized = {}
    for side in [int(s) for s in args.short_sides.split(",") if s.strip()]:
        for seekable in (False, True):
            out = work / f"s{side}{'-seek' if seekable else ''}"
            rep = convert(str(work / "orig" / "*.tar"), out, dst_format="tar",
                          shard_size=args.shard_size, max_short_side=side,
                          quality=args.quality, seekable=seekable, shuffle=False,
                          workers=args.threads, overwrite=True)
            data = []
            for shard in sorted(out.glob("*.tar")):
                with tarfile.open(shard) as t:
                    data += [t.extractfile(m).read() for m in t.getmembers()
                             if m.name.endswith(".jpg")]
            assert len(data) == n
            name = f"short side {side}, q{args.quality}{', seekable' if seekable else ''}"
            sized[name] = (rep.bytes_out, rep.written / rep.seconds)
            ops = [_open(d, None)[:2] for d in data]

            def sized_kernel(pipeline, ops=ops):
                def go():
                    for o, so, (box, clip) in zip(ops, opened, boxes[pipeline]):
                        f = o[1].width / so[0][1].width
                        b = tuple(v * f for v in box)
                        resample_into_slot(o, slot, box=b, clip=clip, filt=1)
                    return len(ops)
                return go
            for pipeline in ("train", "val"):
                ksys[f"{pipeline}: {name}"] = sized_kernel(pipeline)
    kbest = dict.fromkeys(ksys, 0.0)
    for _ in range(args.repeat):
        for name, fn in ksys.items():
            c0 = time.process_time()
            count = fn()
            kbest[name] = max(kbest[name], count / max(time.process_time() - c0, 1e-9))

    # -- decode limit and loaders --------------------------------------------------------
    if args.no_loader:
        systems = {}

    limit = full_decode()   # libjpeg-turbo's own decode

    def loader(root, pipeline):
        urls = sorted(str(u) for u in Path(root).glob("*.tar"))

        def go():
            ds = tl.TarDataset(urls, _transform(pipeline), shuffle=pipeline == "train",
                               seed=1)
            dl = tl.DataLoader(ds, batch_size=args.batch, num_workers=args.threads,
                               backend="threads")
            count = 0
            for x, _ in dl:
                count += len(x)
            return count
        return go

    if not args.no_loader:
        systems = {"decode limit (full decode, 1 thread x threads)": limit}
        for pipeline in ("train", "val"):
            systems[f"{pipeline}: original shards"] = loader(work / "orig", pipeline)
            systems[f"{pipeline}: seekable shards"] = loader(work / "seek", pipeline)
    best = dict.fromkeys(systems, 0.0)
    for _ in range(args.repeat):
        for name, fn in systems.items():
            t = time.perf_counter()
            count = fn()
            r = count / (time.perf_counter() - t)
            if name.startswith("decode limit"):
                r *= args.threads
            best[name] = max(best[name], r)
            assert count == n, (name, count)

    # pixels: the val pipeline (no randomness) gives the same tensors from both shard sets
    a = next(iter(tl.DataLoader(tl.TarDataset(sorted(map(str, shards)), _transform("val")),
                                batch_size=args.batch, num_workers=1, backend="threads")))[0]
    b = next(iter(tl.DataLoader(tl.TarDataset(sorted(map(str, seek_shards)),
                                              _transform("val")),
                                batch_size=args.batch, num_workers=1, backend="threads")))[0]
    identical = bool(torch.equal(a, b))

    from turboloader.tools.demo import cpu_model
    print(f"machine: {os.cpu_count()} CPUs ({cpu_model()}), {platform.system()} "
          f"{platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}")
    print(f"data: {n} {'hires' if args.hires else 'ImageNet-sized'} JPEGs"
          f"{' from ' + args.data if args.data else f' (benchmarks/datasets.py, seed {args.seed})'}, "
          f"{args.threads} threads, best of {args.repeat} interleaved passes; val tensors "
          f"{'identical' if identical else 'DIFFERENT'} between the two shard sets\n")
    print("| conversion | images/s | image bytes in | out | out / in |")
    print("|---|---:|---:|---:|---:|")
    print(f"| convert --seekable (TAR -> TAR, {args.threads} threads) | {rate:.0f} | "
          f"{img_in / 1e6:.2f} MB | {img_out / 1e6:.2f} MB | {img_out / img_in:.3f} |")
    if args.finest:
        fb = sum(map(len, finest))
        print(f"| one MCU per restart interval (transcode_restart(restart_mcus=1), not a "
              f"convert option) | | {img_in / 1e6:.2f} MB | {fb / 1e6:.2f} MB | "
              f"{fb / img_in:.3f} |")
    print()
    klim = kbest["full decode of the original JPEGs (limit)"]
    print("| kernel, 1 thread, CPU time | images/s | x full decode | x original bytes |")
    print("|---|---:|---:|---:|")
    for name, r in kbest.items():
        if "limit" in name:
            print(f"| {name} | {r:.0f} | 1.00 | |")
            continue
        if name.startswith(("val, part", "full decode")):
            print(f"| {name} | {r:.0f} | {r / klim:.2f} | |")
            continue
        pipeline = name.split(":")[0]
        base = kbest[f"{pipeline}: fused decode+crop+resize, original"]
        print(f"| {name} | {r:.0f} | {r / klim:.2f} | {r / base:.2f} |")
    for pipeline in ("train", "val"):
        o_, s_, f_, b_, took = entropy_share(pipeline)
        print(f"{pipeline} windows, share of the image's MCUs entropy-decoded: original files "
              f"{o_:.3f}, seekable {s_:.3f} (the restart path takes {took:.0%} of the windows)"
              + (f", one MCU per interval {f_:.3f}" if args.finest else "")
              + f", at best (the window's MCUs and the upsampler's context) {b_:.3f}")
    if args.finest:
        for which, label in ((1, "seekable"), (2, "seekable, 1 MCU per interval")):
            took, area = sub_image_share(which)
            print(f"val windows, {label}: the restart path takes {took:.0%} of them; the "
                  f"sub-image it decodes is {area:.0%} of the image on average (100% where "
                  f"it does not apply)")
    print()
    if sized:
        print("| pre-sized copy (convert --max-short-side) | convert images/s | image bytes "
              "| x original bytes |")
        print("|---|---:|---:|---:|")
        for name, (nbytes, crate) in sized.items():
            print(f"| {name} | {crate:.0f} | {nbytes / 1e6:.2f} MB | {nbytes / img_in:.3f} |")
        print("\nPre-sized images change the pixels a crop sees (a RandomResizedCrop of a "
              "256-px copy is not the same crop of the original): a model trained on them can "
              "score differently. Seekable copies give the original's pixels.\n")
    if args.no_loader:
        tmp.cleanup()
        return 0 if identical else 1
    lim = best["decode limit (full decode, 1 thread x threads)"]
    print(f"| loader, {args.threads} threads, wall time | images/s | x decode limit | "
          f"x original shards |")
    print("|---|---:|---:|---:|")
    for name, r in best.items():
        if name.startswith("decode limit"):
            print(f"| {name} | {r:.0f} | 1.00 | |")
            continue
        pipeline = name.split(":")[0]
        base = best[f"{pipeline}: original shards"]
        print(f"| {name} | {r:.0f} | {r / lim:.2f} | {r / base:.2f} |")
    tmp.cleanup()
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
