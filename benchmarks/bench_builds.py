"""Per-kernel timings of several *builds* of turboloader, interleaved: the same kernels on the
same images, one child process per build and round (A B C A B C ...), so load from other
processes hits every build alike.

A build is a checkout whose extensions are built in place (``python setup.py build_ext
--inplace``), named ``LABEL=PATH``; the first one is the baseline of the ratio columns. A build
may also be given as ``LABEL=PATH:ISA``, which runs that checkout with ``TURBOLOADER_ISA=ISA``
(the runtime dispatch capped at that level, e.g. ``baseline``) where the build supports it.

    git archive OLD | tar -x -C /tmp/old && (cd /tmp/old && python setup.py build_ext --inplace)
    git archive HEAD | tar -x -C /tmp/nat && (cd /tmp/nat && TURBOLOADER_MARCH=native \\
        python setup.py build_ext --inplace)
    python benchmarks/bench_builds.py --build old=/tmp/old --build new=. \\
        --build new-baseline=.:baseline --build native=/tmp/nat --rounds 7
    python benchmarks/bench_builds.py --check-outputs --build old=/tmp/old --build new=. \\
        --build new-baseline=.:baseline --build native=/tmp/nat

Every kernel is called through the public functional API (``turboloader.transforms.functional``),
which all builds share, single-threaded, writing into a reused output where the API allows it.
Reported: the median over rounds of each child's best-of-``--reps`` time per call, in µs, and
the ratio of the baseline's time to each build's (> 1: faster than the baseline).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _child(args):
    # Runs inside one build: its checkout is first on sys.path (set by the parent).
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    import numpy as np

    import turboloader
    from turboloader.transforms import functional as TF

    root = Path(turboloader.__file__).resolve().parent.parent
    rng = np.random.default_rng(0)

    def photo(h, w):
        # smooth gradients plus noise: resampling and colour kernels see realistic values
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)),
                         ((x + y) * 127 // max(h + w - 2, 1))], -1)
        noise = rng.integers(-20, 21, (h, w, 3))
        return np.clip(base + noise, 0, 255).astype(np.uint8)

    big = photo(375, 500)
    small = photo(224, 224)
    f32 = np.empty((3, 224, 224), np.float32)
    u8 = np.empty((3, 224, 224), np.uint8)
    out224 = np.empty((224, 224, 3), np.uint8)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    corners = [[0, 0], [223, 0], [223, 223], [0, 223]]
    moved = [[10, 5], [215, 12], [220, 210], [3, 218]]

    kernels = {
        "normalize (224, reused out)": lambda: TF.to_chw_normalized(small, mean, std, out=f32),
        "normalize flip (224, reused out)":
            lambda: TF.to_chw_normalized(small, mean, std, flip=True, out=f32),
        "chw uint8 (224, reused out)": lambda: TF.to_chw_uint8(small, out=u8),
        "chw uint8 flip (224, reused out)": lambda: TF.to_chw_uint8(small, flip=True, out=u8),
        "resize 500x375 -> 224 bilinear": lambda: TF.resize(big, (224, 224), out=out224),
        "resize 500x375 -> 224 bicubic":
            lambda: TF.resize(big, (224, 224), "bicubic", out=out224),
        "resized_crop 300x250 -> 224 bilinear":
            lambda: TF.resized_crop(big, 40, 60, 250, 300, (224, 224), out=out224),
        "hflip 224": lambda: TF.horizontal_flip(small),
        "adjust_brightness 224": lambda: TF.adjust_brightness(small, 1.3),
        "adjust_contrast 224": lambda: TF.adjust_contrast(small, 0.7),
        "adjust_saturation 224": lambda: TF.adjust_saturation(small, 1.4),
        "adjust_hue 224": lambda: TF.adjust_hue(small, 0.1),
        "grayscale 224": lambda: TF.rgb_to_grayscale(small, 3),
        "equalize 224": lambda: TF.equalize(small),
        "adjust_sharpness 224": lambda: TF.adjust_sharpness(small, 1.8),
        "rotate 224 nearest": lambda: TF.rotate(small, 30.0, "nearest", fill=0),
        "rotate 224 bilinear": lambda: TF.rotate(small, 30.0, "bilinear", fill=0),
        "affine 224 bilinear":
            lambda: TF.affine(small, 15.0, (5, -3), 1.1, (5.0, 0.0), "bilinear", fill=0),
        "perspective 224 bilinear":
            lambda: TF.perspective(small, corners, moved, "bilinear", fill=0),
        "gaussian_blur 224 k=9": lambda: TF.gaussian_blur(small, 9, 1.5),
        "gaussian_blur 224 k=23": lambda: TF.gaussian_blur(small, 23, 4.0),
    }
    only = [s for s in args.only.split(",") if s] if args.only else None
    results = {}
    for name, fn in kernels.items():
        if only and not any(o in name for o in only):
            continue
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - a kernel an old build lacks
            results[name] = f"error: {type(exc).__name__}: {exc}"
            continue
        # calls per timed rep: ~20 ms of work
        t0 = time.perf_counter()
        fn()
        once = max(time.perf_counter() - t0, 1e-6)
        calls = max(1, int(0.02 / once))
        best = float("inf")
        for _ in range(args.reps):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            best = min(best, (time.perf_counter() - t0) / calls)
        results[name] = best
    try:
        from turboloader._native import _cpu

        isa = _cpu.isa()
    except ImportError:  # a build without runtime dispatch
        isa = None
    print(json.dumps({"root": str(root), "isa": isa, "results": results}))


def _child_outputs():
    # Hash of every kernel's output over a fixed set of images and parameters (the builds
    # should agree bit for bit: runtime dispatch and -march change speed only).
    import hashlib
    import io

    import numpy as np
    from PIL import Image

    import turboloader
    from turboloader.transforms import functional as TF

    def noise(h, w, seed):
        img = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
        y, x = np.mgrid[0:h, 0:w]
        img[: h // 2] = (np.stack([x, y, x + y], -1)[: h // 2] * 3 % 256).astype(np.uint8)
        return img

    out = {}

    def rec(name, arr):
        out[name] = hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()[:16]

    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    imgs = [noise(h, w, i) for i, (h, w) in enumerate(
        [(375, 500), (224, 224), (223, 225), (7, 33), (1, 1), (500, 333)])]
    for i, im in enumerate(imgs):
        h, w = im.shape[:2]
        for flip in (False, True):
            rec(f"to_chw_normalized {i} {flip}", TF.to_chw_normalized(im, mean, std, flip=flip))
            rec(f"to_chw_uint8 {i} {flip}", TF.to_chw_uint8(im, flip=flip))
        for mode in ("nearest", "bilinear", "bicubic"):
            for size in [(224, 224), (max(h // 3, 1), max(w // 2, 1)), (h + 5, w + 3)]:
                rec(f"resize {i} {mode} {size}", TF.resize(im, size, mode))
                if h > 1 and w > 1:
                    rec(f"resize box {i} {mode} {size}",
                        TF.resize(im, size, mode, box=(0.5, 0.25, w - 0.75, h - 0.5)))
            if h > 4 and w > 4:
                rec(f"resized_crop {i} {mode}",
                    TF.resized_crop(im, 1, 2, h - 3, w - 4, (224, 224), mode))
        for op, fs in [("brightness", (0.3, 1.7)), ("contrast", (0.4, 2.0)),
                       ("saturation", (0.2, 1.9)), ("hue", (-0.3, 0.2)),
                       ("sharpness", (0.5, 2.5))]:
            for f in fs:
                rec(f"adjust_{op} {i} {f}", getattr(TF, f"adjust_{op}")(im, f))
        rec(f"grayscale {i}", TF.rgb_to_grayscale(im, 3))
        rec(f"equalize {i}", TF.equalize(im))
        rec(f"autocontrast {i}", TF.autocontrast(im))
        rec(f"posterize {i}", TF.posterize(im, 3))
        rec(f"solarize {i}", TF.solarize(im, 100))
        rec(f"invert {i}", TF.invert(im))
        corners = [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]
        moved = [[min(3, w - 1), 1], [w - 2, min(4, h - 1)], [max(w - 3, 0), h - 2],
                 [1, max(h - 4, 0)]]
        for interp in ("nearest", "bilinear"):
            for fill in (None, 0, [10, 200, 30]):
                rec(f"rotate {i} {interp} {fill}", TF.rotate(im, 33.0, interp, fill=fill))
                rec(f"rotate expand {i} {interp} {fill}",
                    TF.rotate(im, -120.0, interp, expand=True, fill=fill))
                rec(f"affine {i} {interp} {fill}",
                    TF.affine(im, 20.0, (5, -3), 1.2, (10.0, -5.0), interp, fill=fill))
                rec(f"perspective {i} {interp} {fill}",
                    TF.perspective(im, corners, moved, interp, fill=fill))
        for k, sigma in [(3, 0.8), (9, 1.5), (23, 4.0)]:
            if k // 2 < min(h, w):
                rec(f"gaussian_blur {i} {k}", TF.gaussian_blur(im, k, sigma))
    for i, im in enumerate(imgs[:3] + imgs[5:]):
        buf = io.BytesIO()
        Image.fromarray(im).save(buf, "JPEG", quality=90)
        h, w = im.shape[:2]
        for flip in (False, True):
            for dct in (False, True):
                rec(f"decode_resized_crop {i} {flip} {dct}", turboloader.decode_resized_crop(
                    buf.getvalue(), 10, 20, h // 2, w // 2, (224, 224), flip=flip, mean=mean,
                    std=std, dct_scaling=dct))
                rec(f"decode_resized_crop uint8 {i} {flip} {dct}", turboloader.decode_resized_crop(
                    buf.getvalue(), 10, 20, h // 2, w // 2, (224, 224), flip=flip,
                    dtype=np.uint8, dct_scaling=dct))
    print(json.dumps(out))


def _cpu():
    model = platform.processor() or "?"
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    simd = [f for f in ("sse4_1", "avx2", "fma", "avx512f", "avx512bw") if f in flags]
    return f"{model}; {os.cpu_count()} logical CPUs; SIMD: {', '.join(simd) or 'n/a'}"


def _run_child(path, isa, flag, extra=()):
    env = dict(os.environ, PYTHONPATH=path)
    env.pop("TURBOLOADER_ISA", None)
    if isa:
        env["TURBOLOADER_ISA"] = isa
    cmd = [sys.executable, str(Path(__file__).resolve()), flag, *extra]
    proc = subprocess.run(cmd, env=env, cwd="/", capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"build at {path} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check_outputs(builds):
    hashes = {}
    for label, path, isa in builds:
        hashes[label] = _run_child(path, isa, "--child-outputs")
        print(f"{label}: {len(hashes[label])} outputs hashed", file=sys.stderr, flush=True)
    base = builds[0][0]
    bad = 0
    for label, _, _ in builds[1:]:
        diff = [k for k in hashes[base] if hashes[base][k] != hashes[label].get(k)]
        bad += len(diff)
        print(f"{label} vs {base}: {len(hashes[base]) - len(diff)} of {len(hashes[base])} "
              f"outputs identical" + (f"; different: {', '.join(diff[:30])}" if diff else ""))
    return 1 if bad else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", action="append", default=[], metavar="LABEL=PATH[:ISA]",
                    help="a checkout with built extensions (repeat; the first is the baseline)")
    ap.add_argument("--rounds", type=int, default=5, help="child runs per build (interleaved)")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions inside each child")
    ap.add_argument("--only", default="", help="comma-separated substrings of kernel names")
    ap.add_argument("--out", help="also write the markdown table here")
    ap.add_argument("--check-outputs", action="store_true",
                    help="instead of timing, hash every kernel's output in each build and "
                    "report the outputs that differ from the first build's")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-outputs", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args)
        return 0
    if args.child_outputs:
        _child_outputs()
        return 0
    if not args.build:
        ap.error("at least one --build is required")

    builds = []
    for spec in args.build:
        label, _, rest = spec.partition("=")
        path, _, isa = rest.partition(":")
        if not label or not path:
            ap.error(f"--build wants LABEL=PATH[:ISA], got {spec!r}")
        builds.append((label, str(Path(path).resolve()), isa or None))
    if args.check_outputs:
        return _check_outputs(builds)
    times = {label: {} for label, _, _ in builds}
    isas = {}
    for r in range(args.rounds):
        for label, path, isa in builds:
            res = _run_child(path, isa, "--child", ["--reps", str(args.reps), "--only",
                                                    args.only])
            if Path(res["root"]).resolve() != Path(path):
                sys.exit(f"build {label}: imported turboloader from {res['root']}, not {path}")
            isas[label] = res["isa"]
            for name, t in res["results"].items():
                times[label].setdefault(name, []).append(t)
            print(f"round {r + 1}/{args.rounds}: {label} done", file=sys.stderr, flush=True)

    base = builds[0][0]
    names = list(times[base])
    head = ["kernel"] + [f"{lb} µs" for lb, _, _ in builds] + [
        f"{lb} vs {base}" for lb, _, _ in builds[1:]]
    lines = [
        "## turboloader builds, per kernel",
        "",
        f"`python {os.path.relpath(__file__)} "
        + " ".join(a for a in (argv if argv is not None else sys.argv[1:])) + "`",
        "",
        f"- CPU: {_cpu()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        f"- {args.rounds} interleaved rounds; each: best of {args.reps} timed repetitions "
        "(~20 ms each); table: median over rounds",
    ]
    for label, path, isa in builds:
        lines.append(f"- {label}: `{path}`" + (f" with TURBOLOADER_ISA={isa}" if isa else "")
                     + f"; runtime dispatch level: {isas.get(label) or 'n/a (no dispatch)'}")
    lines += ["", "| " + " | ".join(head) + " |", "|---" + "|--:" * (len(head) - 1) + "|"]
    for name in names:
        cells, med = [name], {}
        for label, _, _ in builds:
            vals = times[label].get(name, [])
            nums = [v for v in vals if isinstance(v, float)]
            if nums:
                med[label] = statistics.median(nums)
                cells.append(f"{med[label] * 1e6:,.1f}")
            else:
                cells.append(str(vals[0]) if vals else "-")
        for label, _, _ in builds[1:]:
            cells.append(f"{med[base] / med[label]:.2f}×" if base in med and label in med
                         else "-")
        lines.append("| " + " | ".join(cells) + " |")
    report = "\n".join(lines)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
