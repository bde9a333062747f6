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
    isa = None
    for mod in ("turboloader._native._cpu",):
        try:
            import importlib

            m = importlib.import_module(mod)
            isa = m.isa_level_name()
        except Exception:  # noqa: BLE001 - builds without runtime dispatch
            pass
    print(json.dumps({"root": str(root), "isa": isa, "results": results}))


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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", action="append", default=[], metavar="LABEL=PATH[:ISA]",
                    help="a checkout with built extensions (repeat; the first is the baseline)")
    ap.add_argument("--rounds", type=int, default=5, help="child runs per build (interleaved)")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions inside each child")
    ap.add_argument("--only", default="", help="comma-separated substrings of kernel names")
    ap.add_argument("--out", help="also write the markdown table here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args)
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
    times = {label: {} for label, _, _ in builds}
    isas = {}
    for r in range(args.rounds):
        for label, path, isa in builds:
            env = dict(os.environ, PYTHONPATH=path)
            env.pop("TURBOLOADER_ISA", None)
            if isa:
                env["TURBOLOADER_ISA"] = isa
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--reps",
                   str(args.reps), "--only", args.only]
            proc = subprocess.run(cmd, env=env, cwd="/", capture_output=True, text=True)
            if proc.returncode:
                sys.exit(f"build {label} failed:\n{proc.stderr[-3000:]}")
            res = json.loads(proc.stdout.strip().splitlines()[-1])
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
