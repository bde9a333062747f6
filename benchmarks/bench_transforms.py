"""Single-threaded augmentation benchmark: turboloader's transforms against torchvision v2 and
Pillow, with the same parameters, plus each one's agreement with torchvision.

For every transform, parameters are drawn once per image with turboloader's ``make_params``
(per-sample ``random.Random``); then

- ``turboloader``: ``t.transform(hwc_uint8_array, params)`` (native kernels),
- ``torchvision``: the v2 functional with those parameters on the uint8 CHW tensor,
- ``Pillow``: the v2 functional on a PIL image (torchvision's PIL kernels, i.e. Pillow's own
  ``rotate``/``transform``/``ImageOps``/``ImageEnhance``), where Pillow has the operation.

The systems are timed interleaved, pass by pass, over the same images (median of ``--repeat``
passes after a warm-up), so load from other processes hits them alike; ratios within one run
are the figures to quote. The ``max|diff|`` and ``differing`` columns compare turboloader's
output with torchvision's tensor output on every image of the run.

    python benchmarks/bench_transforms.py                     # 224x224, 64 images
    python benchmarks/bench_transforms.py --size 512 --n 32 --repeat 7 --runs 3
    python benchmarks/bench_transforms.py --only RandomRotation,GaussianBlur --out t.md
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import PIL  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision.transforms import v2  # noqa: E402
from torchvision.transforms.v2 import functional as F  # noqa: E402

torch.set_num_threads(1)

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from turboloader import transforms as T  # noqa: E402
from turboloader.tools.synthetic import synthetic_image  # noqa: E402
from turboloader.transforms._auto_augment import _apply_op  # noqa: E402
from turboloader.transforms._random import sample_rng  # noqa: E402

BIL = v2.InterpolationMode.BILINEAR
NEAR = v2.InterpolationMode.NEAREST


def _ops_tv(img, params):
    for op, m in params["ops"]:
        img = _apply_op(img, op, m)
    return img


def cases():
    """name -> (turboloader transform, torchvision call(img, params) or None, Pillow or None).

    The torchvision call is used for tensors and PIL images alike (v2 functionals dispatch on
    the input type); None in the Pillow slot means Pillow has no such operation.
    """
    def rot(interp):
        return lambda x, p: F.rotate(x, p["angle"], interpolation=interp, fill=0)

    def aff(x, p):
        return F.affine(x, p["angle"], list(p["translate"]), p["scale"], list(p["shear"]),
                        interpolation=BIL, fill=0)

    def persp(x, p):
        return F.perspective(x, None, None, interpolation=BIL, fill=0,
                             coefficients=p["coefficients"])

    def erase(x, p):
        return F.erase(x, p["i"], p["j"], p["h"], p["w"], torch.zeros(3, 1, 1, dtype=torch.uint8))

    yes = True
    return {
        "RandomRotation(30), nearest": (T.RandomRotation(30), rot(NEAR), yes),
        "RandomRotation(30), bilinear": (T.RandomRotation(30, interpolation="bilinear"),
                                         rot(BIL), yes),
        "RandomAffine(15, (0.1,0.1), (0.9,1.1), 10), bilinear": (
            T.RandomAffine(15, (0.1, 0.1), (0.9, 1.1), 10, interpolation="bilinear"), aff, yes),
        "RandomPerspective(0.5, p=1), bilinear": (T.RandomPerspective(0.5, p=1.0), persp, yes),
        "GaussianBlur(9, (0.1, 2))": (T.GaussianBlur(9), lambda x, p: F.gaussian_blur(
            x, [9, 9], p["sigma"]), yes),
        "GaussianBlur(23, (0.1, 2))": (T.GaussianBlur(23), lambda x, p: F.gaussian_blur(
            x, [23, 23], p["sigma"]), yes),
        "Pad(16, reflect)": (T.Pad(16, padding_mode="reflect"),
                             lambda x, p: F.pad(x, 16, padding_mode="reflect"), yes),
        "RandomErasing(p=1)": (T.RandomErasing(p=1.0), erase, None),
        "Grayscale(3)": (T.Grayscale(3), lambda x, p: F.rgb_to_grayscale(x, 3), yes),
        "RandomVerticalFlip(p=1)": (T.RandomVerticalFlip(1.0), lambda x, p: F.vertical_flip(x),
                                    yes),
        "RandomPosterize(4, p=1)": (T.RandomPosterize(4, 1.0), lambda x, p: F.posterize(x, 4),
                                    yes),
        "RandomSolarize(128, p=1)": (T.RandomSolarize(128, 1.0),
                                     lambda x, p: F.solarize(x, 128), yes),
        "RandomInvert(p=1)": (T.RandomInvert(1.0), lambda x, p: F.invert(x), yes),
        "RandomEqualize(p=1)": (T.RandomEqualize(1.0), lambda x, p: F.equalize(x), yes),
        "RandomAutocontrast(p=1)": (T.RandomAutocontrast(1.0), lambda x, p: F.autocontrast(x),
                                    yes),
        "RandomAdjustSharpness(2, p=1)": (T.RandomAdjustSharpness(2.0, 1.0),
                                          lambda x, p: F.adjust_sharpness(x, 2.0), yes),
        "ColorJitter(0.4, 0.4, 0.4, 0.1)": (T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                                            lambda x, p: T.ColorJitter.transform(
                                                CJ, x, p), yes),
        "AutoAugment(IMAGENET)": (T.AutoAugment(), _ops_tv, yes),
        "RandAugment()": (T.RandAugment(), _ops_tv, yes),
        "TrivialAugmentWide()": (T.TrivialAugmentWide(), _ops_tv, yes),
    }


CJ = T.ColorJitter(0.4, 0.4, 0.4, 0.1)


def machine():
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = os.getloadavg()
    return (f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}\n"
            f"- CPU: {cpu}; {os.cpu_count()} logical CPUs; load average at start "
            f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n"
            f"- {platform.system()} {platform.release()}, Python {platform.python_version()}, "
            f"NumPy {np.__version__}, torch {torch.__version__} "
            f"(CPU capability {torch.backends.cpu.get_cpu_capability()}), torchvision "
            f"{torchvision.__version__}, Pillow {PIL.__version__}\n"
            f"- single-threaded (torch.set_num_threads(1), OMP/MKL threads 1)")


def time_pass(fn, inputs, params):
    t = time.perf_counter()
    for x, p in zip(inputs, params):
        fn(x, p)
    return time.perf_counter() - t


def run_case(name, t, tv_call, pil, arrays, tensors, pils, repeat):
    size = arrays[0].shape[:2]
    params = [t.make_params(size, rng=sample_rng(0, 0, i)) for i in range(len(arrays))]
    systems = {"turboloader": (lambda x, p: t.transform(x, p), arrays),
               "torchvision": (tv_call, tensors)}
    if pil:
        systems["Pillow"] = (tv_call, pils)
    # agreement with torchvision's tensor kernel, same parameters
    mx, n, tot = 0, 0, 0
    for a, x, p in zip(arrays, tensors, params):
        ours = t.transform(a, p)
        ref = tv_call(x, p).permute(1, 2, 0).numpy()
        d = np.abs(ours.astype(np.int16).reshape(ref.shape) - ref.astype(np.int16))
        mx, n, tot = max(mx, int(d.max())), n + int((d > 0).sum()), tot + d.size
    times = {k: [] for k in systems}
    for k, (fn, xs) in systems.items():      # warm-up
        time_pass(fn, xs, params)
    for _ in range(repeat):
        for k, (fn, xs) in systems.items():
            times[k].append(time_pass(fn, xs, params))
    ips = {k: len(arrays) / statistics.median(v) for k, v in times.items()}
    return ips, mx, n / tot


def run_mix(args):
    """MixUp / CutMix on a float batch: same torch ops as torchvision (ratio ~1 expected)."""
    rows = []
    x = torch.rand(args.batch, 3, args.size, args.size)
    y = torch.randint(0, 1000, (args.batch,))
    for name in ("MixUp", "CutMix"):
        ours, theirs = getattr(T, name)(num_classes=1000), getattr(v2, name)(num_classes=1000)
        tl, tv = [], []
        ours(x, y), theirs(x, y)     # warm-up
        for _ in range(max(args.repeat, 7)):
            torch.manual_seed(0)
            s = time.perf_counter()
            a = ours(x, y)
            tl.append(time.perf_counter() - s)
            torch.manual_seed(0)
            s = time.perf_counter()
            b = theirs(x, y)
            tv.append(time.perf_counter() - s)
        same = torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        rows.append((f"{name}(num_classes=1000), batch {args.batch}",
                     args.batch / statistics.median(tl), args.batch / statistics.median(tv), same))
    return rows


def _median_row(name, rs):
    """rs: per-run (tl, tv, pil, maxdiff, frac); medians of images/s and of the ratios."""
    med = statistics.median
    tl, tv = med(r[0] for r in rs), med(r[1] for r in rs)
    pl = None if rs[0][2] is None else med(r[2] for r in rs)
    r_tv = med(r[0] / r[1] for r in rs)
    r_pl = None if pl is None else med(r[0] / r[2] for r in rs)
    mx, frac = max(r[3] for r in rs), max(r[4] for r in rs)
    spread = ""
    if len(rs) > 1:
        lo, hi = min(r[0] / r[1] for r in rs), max(r[0] / r[1] for r in rs)
        spread = f" ({lo:.2f}-{hi:.2f})"
    return (f"| {name} | {tl:,.0f} | {tv:,.0f} | {'' if pl is None else f'{pl:,.0f}'} | "
            f"{r_tv:.2f}x{spread} | {'' if r_pl is None else f'{r_pl:.2f}x'} | {mx} | "
            f"{frac * 100:.4f}% |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=224, help="square image side (default 224)")
    ap.add_argument("--n", type=int, default=64, help="images per pass (default 64)")
    ap.add_argument("--repeat", type=int, default=5, help="timed passes per run (default 5)")
    ap.add_argument("--runs", type=int, default=1,
                    help="repeat the whole suite; the table shows medians over runs and the "
                         "range of the torchvision ratio (default 1)")
    ap.add_argument("--batch", type=int, default=64, help="MixUp/CutMix batch (default 64)")
    ap.add_argument("--only", default="", help="comma-separated name prefixes to run")
    ap.add_argument("--out", default=None, help="also write the markdown report here")
    args = ap.parse_args(argv)

    rng = np.random.default_rng(0)
    arrays = [synthetic_image(rng, args.size, args.size) for _ in range(args.n)]
    tensors = [torch.from_numpy(a).permute(2, 0, 1).contiguous() for a in arrays]
    pils = [Image.fromarray(a) for a in arrays]
    only = [s.strip() for s in args.only.split(",") if s.strip()]

    lines = [f"# Transforms: turboloader vs torchvision v2 vs Pillow, {args.size}x{args.size} "
             f"uint8 RGB", "", machine(),
             f"- {args.n} synthetic images per pass, median of {args.repeat} interleaved passes "
             f"after one warm-up, {args.runs} run(s) of the whole suite (medians over runs; "
             "the torchvision ratio's range in brackets); images/s, higher is better", "",
             "| transform | turboloader img/s | torchvision img/s | Pillow img/s | "
             "vs torchvision | vs Pillow | max\\|diff\\| vs tv | differing |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    results = {}
    for run in range(args.runs):
        for name, (t, tv_call, pil) in cases().items():
            if only and not any(name.startswith(o) for o in only):
                continue
            ips, mx, frac = run_case(name, t, tv_call, pil, arrays, tensors, pils, args.repeat)
            results.setdefault(name, []).append(
                (ips["turboloader"], ips["torchvision"], ips.get("Pillow"), mx, frac))
        if not only or any("Mix" in o or "Cut" in o for o in only):
            for name, tl, tv, same in run_mix(args):
                results.setdefault(name, []).append((tl, tv, None, 0 if same else -1, 0.0))
        print(f"(run {run + 1}/{args.runs} done)", file=sys.stderr, flush=True)
    for name, rs in results.items():
        row = _median_row(name, rs)
        lines.append(row)
        print(row, flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
