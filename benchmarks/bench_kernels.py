"""Single-threaded kernel benchmarks: turboloader against Pillow, OpenCV, NumPy and torchvision.

Every section times each system over the same images, in the same process, interleaving the
systems slice by slice within each pass (so load from other processes hits them all alike), and
reports the median of ``--repeat`` timed passes after one warm-up pass. Ratios between rows of
one run are the figures to quote; absolute images/s move between runs and machines.

    python benchmarks/bench_kernels.py                   # ~ImageNet-sized images
    python benchmarks/bench_kernels.py --hires           # long side 1600..4000 px
    python benchmarks/bench_kernels.py --quick           # smoke run (few images, 3 repeats)
    python benchmarks/bench_kernels.py --data /path/to/imagenet/val --n 500 --out val.md

Sections (``--only`` picks some): decode, scaled, crop, resize, resized_crop, normalize, train.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import inspect
import io
import math
import os
import platform
import statistics
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

# Kernels must be single-threaded and comparable: set before torch/cv2 spin up their pools.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import PIL  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402
from PIL import Image, features  # noqa: E402
from torchvision.transforms import v2  # noqa: E402
from torchvision.transforms.v2 import functional as TVF  # noqa: E402

torch.set_num_threads(1)
try:
    import cv2  # noqa: E402

    cv2.setNumThreads(1)
except ImportError:  # the OpenCV rows are skipped
    cv2 = None

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import datasets  # noqa: E402  (benchmarks/datasets.py)

REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))  # run from a checkout without installing

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
OUT_SIZE = 224
SECTIONS = ("decode", "scaled", "crop", "resize", "resized_crop", "normalize", "train")


# --------------------------------------------------------------------------------------------
# turboloader, as far as it exists: every entry point is looked up, never assumed.

class TL:
    """The turboloader entry points this benchmark uses, or the reason each is missing."""

    def __init__(self):
        self.missing = {}
        self.version = None
        self.jpeg = self._module("turboloader.decode.jpeg")
        self.F = self._module("turboloader.transforms.functional")
        self.fused_mod = self._module("turboloader.decode.fused")
        try:
            import turboloader

            self.version = turboloader.__version__
        except Exception as exc:  # noqa: BLE001
            self.missing["turboloader"] = repr(exc)
        self.decode_jpeg = self._attr(self.jpeg, "decode_jpeg")
        self.decode_jpeg_header = self._attr(self.jpeg, "decode_jpeg_header")
        self.pick_scale = self._attr(self.jpeg, "pick_scale")
        self.scaled_size = self._attr(self.jpeg, "scaled_size")
        self.resize = self._attr(self.F, "resize")
        self.resized_crop = self._attr(self.F, "resized_crop")
        self.to_chw_normalized = self._attr(self.F, "to_chw_normalized")
        self.decode_resized_crop = self._attr(self.fused_mod, "decode_resized_crop")

    def decode_crop(self, data, crop, **kw):
        """decode_jpeg of the window ``crop=(x, y, w, h)``: ``window=(top, left, h, w)`` where
        decode_jpeg has it (0.2+), else the older ``crop=`` keyword."""
        if "window" in self.params(self.decode_jpeg):
            x, y, w, h = crop
            return self.decode_jpeg(data, window=(y, x, h, w), **kw)
        return self.decode_jpeg(data, crop=crop, **kw)

    def _module(self, name):
        try:
            return importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a module still being written may not build
            self.missing[name] = f"{type(exc).__name__}: {exc}"
            return None

    def _attr(self, mod, name):
        if mod is None:
            return None
        fn = getattr(mod, name, None)
        if fn is None:
            self.missing[f"{mod.__name__}.{name}"] = "not defined"
        return fn

    @staticmethod
    def params(fn):
        try:
            return inspect.signature(fn).parameters
        except (TypeError, ValueError):
            return {}


# --------------------------------------------------------------------------------------------
# machine description

def _loaded_libs(*needles):
    """Paths of shared objects mapped into this process whose name contains a needle."""
    found = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rsplit(None, 1)[-1]
                base = os.path.basename(path)
                if path.startswith("/") and any(n in base for n in needles) and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def _dpkg_version(path):
    import subprocess

    try:
        pkg = subprocess.run(["dpkg", "-S", os.path.realpath(path)], capture_output=True,
                             text=True, timeout=10).stdout.split(":")[0].strip()
        if not pkg:
            pkg = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True,
                                 timeout=10).stdout.split(":")[0].strip()
        if pkg:
            ver = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True,
                                 text=True, timeout=10).stdout.strip()
            return f"{pkg} {ver}"
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def _turboloader_libjpeg(tl):
    """Which libjpeg(-turbo) turboloader's extension links, as precisely as can be found."""
    for mod in (tl.jpeg, sys.modules.get("turboloader._native._jpeg")):
        for name in ("LIBJPEG_TURBO_VERSION", "libjpeg_turbo_version", "LIBJPEG_VERSION",
                     "libjpeg_version"):
            v = getattr(mod, name, None) if mod is not None else None
            if v:
                return str(v() if callable(v) else v)
    ext = sys.modules.get("turboloader._native._jpeg")
    if ext is None or not getattr(ext, "__file__", None):
        return "n/a (turboloader._native._jpeg not loaded)"
    import subprocess

    try:
        ldd = subprocess.run(["ldd", ext.__file__], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        ldd = ""
    for line in ldd.splitlines():
        if "libjpeg" in line and "=>" in line:
            path = line.split("=>")[1].split("(")[0].strip()
            pkg = _dpkg_version(path)
            return f"{os.path.realpath(path)}" + (f" ({pkg})" if pkg else "")
    return "statically linked or unknown"


def _dispatch_level():
    cpu = _dispatch()
    if cpu is None:
        return "n/a (a build without runtime dispatch)"
    return f"{cpu.isa()} (this CPU supports {', '.join(cpu.supported())})"


def machine_info(tl, args, items):
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    pil_jpeg = features.version_feature("libjpeg_turbo") if features.check_feature(
        "libjpeg_turbo") else f"libjpeg {features.version('jpg')} (not turbo)"
    pil_lib = _loaded_libs("libjpeg")
    pil_lib = [p for p in pil_lib if "pillow" in p.lower() or "PIL" in p]
    cv_jpeg = "n/a"
    if cv2 is not None:
        for line in cv2.getBuildInformation().splitlines():
            if line.strip().startswith("JPEG:"):
                cv_jpeg = line.split(":", 1)[1].strip()
    stats = datasets.describe(items)
    load = os.getloadavg()
    lines = [
        f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}",
        f"- CPU: {cpu}; {os.cpu_count()} logical CPUs, {affinity} usable; "
        f"load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        f"- {platform.system()} {platform.release()}, Python {platform.python_version()}",
        f"- turboloader {tl.version or 'n/a'}, libjpeg-turbo: {_turboloader_libjpeg(tl)}; "
        f"kernels' runtime dispatch level: {_dispatch_level()}",
        f"- Pillow {PIL.__version__}, libjpeg-turbo {pil_jpeg}"
        + (f" ({os.path.basename(pil_lib[0])})" if pil_lib else ""),
        f"- OpenCV {cv2.__version__ if cv2 else 'n/a'} (JPEG: {cv_jpeg}), "
        f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
        f"NumPy {np.__version__}",
        "- threads: torch.set_num_threads(1), cv2.setNumThreads(1); every kernel single-threaded",
        f"- images: {args.source}; n={stats['n']}, short side min/median/max "
        f"{stats['short_side']}, long side {stats['long_side']}, "
        f"{stats['mean_megapixels']} MP and {stats['mean_kbytes']} KB on average, "
        f"{stats['bits_per_pixel']} bits/pixel, chroma {stats['subsampling']}",
        f"- timing: median of {args.repeat} interleaved passes over all images after 1 warm-up "
        f"pass; 'spread' is (max - min) / median of those passes",
    ]
    if tl.missing:
        lines.append("- turboloader parts not available in this run: "
                     + "; ".join(f"`{k}` ({v})" for k, v in tl.missing.items()))
    return lines


# --------------------------------------------------------------------------------------------
# timing

class Row:
    def __init__(self, label, run, n, pair=None, note=""):
        self.label, self.run, self.n, self.pair, self.note = label, run, n, pair, note
        self.times = []
        self.error = None

    @property
    def median(self):
        return statistics.median(self.times) if self.times else math.nan

    @property
    def ips(self):
        return self.n / self.median if self.times else math.nan


class Section:
    """One table: rows timed interleaved, ratios against the named baseline rows."""

    def __init__(self, key, title, what, baselines, targets=()):
        self.key, self.title, self.what = key, title, what
        self.baselines = list(baselines)
        self.targets = list(targets)  # (row label, baseline label, min ratio, text)
        self.rows = []
        self.skipped = []  # (label, reason)
        self.notes = []

    def add(self, label, run, n, pair=None, note=""):
        self.rows.append(Row(label, run, n, pair, note))

    def skip(self, label, reason):
        self.skipped.append((label, reason))

    def measure(self, repeat, log, chunks=10):
        live = []
        for row in self.rows:  # warm-up pass; also catches a broken row before timing
            try:
                for x in row.run.xs:
                    row.run.fn(x)
                live.append(row)
            except Exception as exc:  # noqa: BLE001 - report the row as failed, keep going
                row.error = f"{type(exc).__name__}: {exc}"
                log(f"  {row.label}: FAILED {row.error}")
        if not live:
            return
        # Each pass is cut into `chunks` slices of the images, and every system runs slice c
        # before any runs slice c + 1, in an order rotated per slice and per repeat: load from
        # other processes (seconds-long compiles on a shared box) then hits all systems alike,
        # which keeps the ratios steady even when absolute times are not.
        n = len(live[0].run.xs)
        bounds = np.linspace(0, n, min(chunks, n) + 1).astype(int)
        for r in range(repeat):
            acc = [0.0] * len(live)
            for c in range(len(bounds) - 1):
                lo, hi = bounds[c], bounds[c + 1]
                k = (r + c) % len(live)
                for j in list(range(k, len(live))) + list(range(k)):
                    fn, xs = live[j].run.fn, live[j].run.xs[lo:hi]
                    t0 = time.perf_counter()
                    for x in xs:
                        fn(x)
                    acc[j] += time.perf_counter() - t0
            for j, row in enumerate(live):
                row.times.append(acc[j])
        for row in live:
            log(f"  {row.label}: {row.ips:,.1f} images/s")

    def row(self, label):
        for r in self.rows:
            if r.label == label:
                return r
        return None

    def markdown(self):
        out = [f"### {self.title}", "", self.what, ""]
        bases = [b for b in self.baselines if self.row(b) is not None and self.row(b).times]
        has_pair = any(r.pair for r in self.rows)
        head = ["system", "images/s", "ms/image", "spread"]
        head += [f"vs {b}" for b in bases]
        if has_pair:
            head.append("vs same-work baseline")
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "|".join(["---"] + ["--:"] * (len(head) - 1)) + "|")
        for r in self.rows:
            if not r.times:
                cells = [r.label, "failed", "", ""] + [""] * len(bases)
                if has_pair:
                    cells.append("")
                out.append("| " + " | ".join(cells) + " |")
                continue
            spread = (max(r.times) - min(r.times)) / r.median
            cells = [r.label + (f" <sub>{r.note}</sub>" if r.note else ""), f"{r.ips:,.1f}",
                     f"{1e3 * r.median / r.n:.3f}", f"{100 * spread:.0f}%"]
            for b in bases:
                cells.append("—" if b == r.label else f"{r.ips / self.row(b).ips:.2f}×")
            if has_pair:
                p = self.row(r.pair) if r.pair else None
                cells.append(f"{r.ips / p.ips:.2f}× {r.pair}" if p is not None and p.times
                             else "")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        for label, reason in self.skipped:
            out.append(f"- not measured: {label} — {reason}")
        for r in self.rows:
            if r.error:
                out.append(f"- failed: {r.label} — {r.error}")
        for note in self.notes:
            out.append(f"- {note}")
        for label, base, ratio, text in self.targets:
            a, b = self.row(label), self.row(base)
            if a is None or b is None or not a.times or not b.times:
                out.append(f"- target ({text}): not measured")
                continue
            got = a.ips / b.ips
            verdict = "met" if got >= ratio else "**MISSED**"
            out.append(f"- target: {text} — measured {got:.2f}× → {verdict}")
        out.append("")
        return "\n".join(out)


class over:  # noqa: N801 - reads as a verb at the call sites
    """fn applied to every element of xs, results discarded (the unit the timer slices)."""

    def __init__(self, fn, xs):
        self.fn, self.xs = fn, list(xs)


# --------------------------------------------------------------------------------------------
# helpers shared by the sections

def pil_decode_only(b):
    im = Image.open(io.BytesIO(b))
    im.load()
    return im


def pil_decode_array(b):
    return np.asarray(Image.open(io.BytesIO(b)).convert("RGB"))


def pil_draft(b, req):
    im = Image.open(io.BytesIO(b))
    im.draft("RGB", req)
    return np.asarray(im.convert("RGB"))


def rrc_windows(sizes, seed):
    """One RandomResizedCrop window per (width, height), drawn with torchvision's own
    get_params (scale (0.08, 1), ratio (3/4, 4/3)) under a seeded torch RNG. Returns
    [(top, left, height, width)] and flips [bool], without disturbing torch's global RNG."""
    from torchvision.transforms import RandomResizedCrop

    wins, flips = [], []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for w, h in sizes:
            # get_params only reads the image's dimensions: an unmaterialised tensor will do
            fake = torch.empty((3, h, w), dtype=torch.uint8, device="meta")
            wins.append(tuple(int(v) for v in RandomResizedCrop.get_params(
                fake, scale=[0.08, 1.0], ratio=[3 / 4, 4 / 3])))
            flips.append(bool(torch.rand(1).item() < 0.5))
    return wins, flips


def _pick_scale_for(tl, w, h, min_h, min_w, pow2=False):
    """Largest reduction keeping a (w, h) region at least (min_w, min_h): turboloader's
    pick_scale (any k/8) when present and not ``pow2``, else the power-of-two rule (the scales
    libjpeg-turbo has SIMD IDCTs for, and the only ones Pillow's draft() uses)."""
    if tl.pick_scale is not None and not pow2:
        try:  # 0.2+: (height, width) pairs
            return Fraction(tl.pick_scale((h, w), (min_h, min_w), fast_only=False))
        except TypeError:
            pass
        try:
            return Fraction(tl.pick_scale(w, h, min_h, min_w, fast_only=False))
        except TypeError:  # before pick_scale grew fast_only (it then considered any k/8)
            return Fraction(tl.pick_scale(w, h, min_h, min_w))
    s = Fraction(1)
    for cand in (Fraction(1, 2), Fraction(1, 4), Fraction(1, 8)):
        if math.ceil(w * cand) >= min_w and math.ceil(h * cand) >= min_h:
            s = cand
    return s


def _scaled_dims(tl, w, h, scale):
    if tl.scaled_size is not None:
        try:  # 0.2+: (height, width)
            sh, sw = tl.scaled_size((h, w), scale)
        except TypeError:
            sw, sh = tl.scaled_size(w, h, scale)
        return int(sw), int(sh)
    return math.ceil(w * scale), math.ceil(h * scale)


def _scaled_window(tl, size, win, pow2=False):
    """(scale, (x, y, w, h) in the scaled image) covering the (top, left, height, width)
    window of a full-size image, at the largest reduction keeping it >= OUT_SIZE."""
    w, h = size
    t, l, wh, ww = win
    sc = _pick_scale_for(tl, ww, wh, OUT_SIZE, OUT_SIZE, pow2=pow2)
    sw, sh = _scaled_dims(tl, w, h, sc)
    x0, y0 = math.floor(l * sc), math.floor(t * sc)
    x1, y1 = min(sw, math.ceil((l + ww) * sc)), min(sh, math.ceil((t + wh) * sc))
    return sc, (x0, y0, x1 - x0, y1 - y0)


def _scaled_crops(tl, data, sizes, wins, pow2=False):
    return [(b, *_scaled_window(tl, size, win, pow2)) for b, size, win in zip(data, sizes, wins)]


def _agreement(pairs):
    """'mean |a - b| m, max M' over pairs of same-shaped arrays (compared as float64)."""
    diffs = []
    for a, b in pairs:
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        if a.shape != b.shape:
            return f"shape mismatch {a.shape} vs {b.shape}"
        diffs.append(np.abs(a - b))
    if not diffs:
        return "nothing compared"
    return (f"mean |Δ| {np.mean([d.mean() for d in diffs]):.3g}, "
            f"max |Δ| {max(d.max() for d in diffs):.3g}")


def _check(section, text, fn):
    """Add an output-agreement note; a check that raises is reported, not fatal."""
    try:
        section.notes.append(f"output check, {text}: {fn()}")
    except Exception as exc:  # noqa: BLE001
        section.notes.append(f"output check, {text}: failed ({type(exc).__name__}: {exc})")


NCHECK = 8  # images used for the output-agreement notes


# --------------------------------------------------------------------------------------------
# sections

def sec_decode(tl, data, sizes):
    s = Section(
        "decode", "Full decode (JPEG bytes → H×W×3 uint8)",
        "Whole image at full size. `Pillow decode only` is `Image.open(...).load()` (the pixels "
        "stay inside Pillow); `+ asarray` adds `.convert('RGB')` and `np.asarray`, i.e. what a "
        "NumPy-based loader pays.",
        baselines=["Pillow decode only", "Pillow decode + asarray"],
        targets=[("turboloader decode_jpeg", "Pillow decode only", 0.95,
                  "turboloader ≥ 0.95× Pillow's libjpeg-turbo (decode only)")])
    n = len(data)
    if tl.decode_jpeg is not None:
        s.add("turboloader decode_jpeg", over(tl.decode_jpeg, data), n)
        _check(s, "turboloader vs Pillow (uint8 levels)", lambda: _agreement(
            (tl.decode_jpeg(b), pil_decode_array(b)) for b in data[:NCHECK]))
        if "fast_dct" in tl.params(tl.decode_jpeg):
            s.add("turboloader decode_jpeg(fast_dct=True)",
                  over(lambda b: tl.decode_jpeg(b, fast_dct=True), data), n,
                  note="not bit-exact")
        if "fancy_upsampling" in tl.params(tl.decode_jpeg):
            s.add("turboloader decode_jpeg(fancy_upsampling=False)",
                  over(lambda b: tl.decode_jpeg(b, fancy_upsampling=False), data), n,
                  note="not bit-exact")
    else:
        s.skip("turboloader decode_jpeg", tl.missing.get("turboloader.decode.jpeg", "missing"))
    s.add("Pillow decode only", over(pil_decode_only, data), n)
    s.add("Pillow decode + asarray", over(pil_decode_array, data), n)
    if cv2 is not None:
        def cv_decode(b):
            bgr = cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_COLOR)
            return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)

        s.add("OpenCV imdecode + BGR→RGB", over(cv_decode, data), n)
    tv_data = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in data]
    s.add("torchvision.io.decode_jpeg (CHW)",
          over(lambda t: torchvision.io.decode_jpeg(t, mode=torchvision.io.ImageReadMode.RGB),
               tv_data), n)
    return s


def sec_scaled(tl, data, sizes):
    s = Section(
        "scaled", "DCT-scaled decode (libjpeg scales inside the IDCT)",
        "`min 224` picks the largest reduction that keeps the short side ≥ 224 (turboloader: "
        "`pick_scale`, any n/8; Pillow: `draft('RGB', (224, 224))`, powers of two only). "
        "`min 224 (powers of 2)`: the same rule restricted to 1, 1/2, 1/4, 1/8 (the scales "
        "libjpeg-turbo has SIMD IDCTs for). `k/8`: fixed scales; Pillow via `draft` with the "
        "matching size.",
        baselines=["turboloader full", "Pillow full + asarray"],
        targets=[("turboloader 1/2", "turboloader full", 1.0, "1/2 faster than full decode"),
                 ("turboloader 1/4", "turboloader 1/2", 1.0, "1/4 faster than 1/2")])
    n = len(data)
    scales_min = [_pick_scale_for(tl, w, h, OUT_SIZE, OUT_SIZE) for w, h in sizes]
    scales_pow2 = [_pick_scale_for(tl, w, h, OUT_SIZE, OUT_SIZE, pow2=True) for w, h in sizes]
    hist = {}
    for sc in scales_min:
        hist[str(sc)] = hist.get(str(sc), 0) + 1
    s.notes.append("scales picked for `min 224`: " + ", ".join(
        f"{k}: {v}" for k, v in sorted(hist.items(), key=lambda kv: -Fraction(kv[0]))))

    if tl.decode_jpeg is not None and "scale" in tl.params(tl.decode_jpeg):
        s.add("turboloader full", over(tl.decode_jpeg, data), n)
        s.add("turboloader min 224",
              over(lambda a: tl.decode_jpeg(a[0], scale=a[1]), list(zip(data, scales_min))), n,
              pair="Pillow draft min 224")
        s.add("turboloader min 224 (powers of 2)",
              over(lambda a: tl.decode_jpeg(a[0], scale=a[1]), list(zip(data, scales_pow2))), n,
              pair="Pillow draft min 224")
        _check(s, "turboloader 1/2 vs Pillow draft 1/2", lambda: _agreement(
            (tl.decode_jpeg(b, scale=Fraction(1, 2)), pil_draft(b, (w // 2, h // 2)))
            for b, (w, h) in list(zip(data, sizes))[:NCHECK]))
        pairs = {Fraction(1, 2): "Pillow draft 1/2", Fraction(1, 4): "Pillow draft 1/4"}
        for k in (7, 6, 5, 4, 3, 2, 1):
            sc = Fraction(k, 8)
            s.add(f"turboloader {sc}",
                  over(lambda b, sc=sc: tl.decode_jpeg(b, scale=sc), data), n,
                  pair=pairs.get(sc))
    else:
        s.skip("turboloader scaled decode", "decode_jpeg(scale=...) not available")
    s.add("Pillow full + asarray", over(pil_decode_array, data), n)
    s.add("Pillow draft min 224",
          over(lambda b: pil_draft(b, (OUT_SIZE, OUT_SIZE)), data), n)
    s.add("Pillow draft 1/2",
          over(lambda a: pil_draft(a[0], (a[1][0] // 2, a[1][1] // 2)), list(zip(data, sizes))),
          n)
    s.add("Pillow draft 1/4",
          over(lambda a: pil_draft(a[0], (a[1][0] // 4, a[1][1] // 4)), list(zip(data, sizes))),
          n)
    return s


def sec_crop(tl, data, sizes, seed):
    wins, _ = rrc_windows(sizes, seed)
    frac = [(wh * ww) / (w * h) for (_, _, wh, ww), (w, h) in zip(wins, sizes)]
    # rows the decoder must run through: everything above the window's bottom edge
    rows = [(t + wh) / h for (t, _, wh, _), (_, h) in zip(wins, sizes)]
    s = Section(
        "crop", "Crop-only decode of a RandomResizedCrop window",
        "One window per image from torchvision's `RandomResizedCrop.get_params` (scale "
        "(0.08, 1), ratio (3/4, 4/3), seeded); `crop=(x, y, w, h)` decodes only the rows down "
        "to the window's bottom and the iMCU columns covering it. The min-224 row also "
        "DCT-scales so that the window stays ≥ 224 px on both sides.",
        baselines=["turboloader full", "Pillow full + asarray"],
        targets=[("turboloader crop", "turboloader full", 1.0,
                  "crop decode faster than a full decode")])
    s.notes.append(f"window area / image area: mean {np.mean(frac):.3f}, median "
                   f"{np.median(frac):.3f}; window bottom / image height: mean "
                   f"{np.mean(rows):.3f} (the decoder still entropy-decodes every row above "
                   f"the window's bottom)")
    n = len(data)
    if tl.decode_jpeg is not None and {"crop", "window"} & set(tl.params(tl.decode_jpeg)):
        s.add("turboloader full", over(tl.decode_jpeg, data), n)
        args = [(b, (l, t, ww, wh)) for b, (t, l, wh, ww) in zip(data, wins)]
        s.add("turboloader crop", over(lambda a: tl.decode_crop(a[0], a[1]), args), n,
              pair="Pillow full + crop copy")
        _check(s, "turboloader crop vs the same window of its full decode", lambda: _agreement(
            (tl.decode_crop(b, (x, y, w, h)), tl.decode_jpeg(b)[y:y + h, x:x + w])
            for b, (x, y, w, h) in args[:NCHECK]))
        if "scale" in tl.params(tl.decode_jpeg):
            sargs = _scaled_crops(tl, data, sizes, wins)
            s.add("turboloader crop + scale (min 224)",
                  over(lambda a: tl.decode_crop(a[0], a[2], scale=a[1]), sargs), n)
            pargs = _scaled_crops(tl, data, sizes, wins, pow2=True)
            s.add("turboloader crop + scale (min 224, powers of 2)",
                  over(lambda a: tl.decode_crop(a[0], a[2], scale=a[1]), pargs), n)
            hist = {}
            for _, sc, _ in sargs:
                hist[str(sc)] = hist.get(str(sc), 0) + 1
            s.notes.append("scales picked for the windows (min 224): " + ", ".join(
                f"{k}: {v}" for k, v in sorted(hist.items(), key=lambda kv: -Fraction(kv[0]))))
    else:
        s.skip("turboloader crop decode", "decode_jpeg(crop=...) not available")
    s.add("Pillow full + asarray", over(pil_decode_array, data), n)

    def pil_crop(a):
        b, (t, l, wh, ww) = a
        im = Image.open(io.BytesIO(b)).convert("RGB")
        return np.asarray(im.crop((l, t, l + ww, t + wh)))

    s.add("Pillow full + crop copy", over(pil_crop, list(zip(data, wins))), n)
    return s


def sec_resize(tl, arrays):
    n = len(arrays)
    size = (OUT_SIZE, OUT_SIZE)
    s = Section(
        "resize", f"Resize decoded images to {OUT_SIZE}×{OUT_SIZE} (bilinear, antialiased)",
        "Input: the fully decoded images (H×W×3 uint8, prepared before timing, in each "
        "library's own container). Pillow's BILINEAR and OpenCV's INTER_AREA are antialiased "
        "when downscaling; INTER_LINEAR is not (shown for reference, different output).",
        baselines=["Pillow resize BILINEAR"],
        targets=[("turboloader resize", "Pillow resize BILINEAR", 1.0,
                  "turboloader ≥ Pillow")])
    if tl.resize is not None:
        s.add("turboloader resize", over(lambda a: tl.resize(a, size, "bilinear"), arrays), n)
        _check(s, "turboloader vs Pillow BILINEAR", lambda: _agreement(
            (tl.resize(a, size, "bilinear"),
             np.asarray(Image.fromarray(a).resize(size, Image.BILINEAR)))
            for a in arrays[:NCHECK]))
        if "out" in tl.params(tl.resize):
            buf = np.empty((OUT_SIZE, OUT_SIZE, 3), np.uint8)
            s.add("turboloader resize(out=)",
                  over(lambda a: tl.resize(a, size, "bilinear", out=buf), arrays), n)
    else:
        s.skip("turboloader resize",
               tl.missing.get("turboloader.transforms.functional", "missing"))
    pils = [Image.fromarray(a) for a in arrays]
    s.add("Pillow resize BILINEAR", over(lambda im: im.resize(size, Image.BILINEAR), pils), n)
    if cv2 is not None:
        s.add("OpenCV INTER_AREA",
              over(lambda a: cv2.resize(a, size, interpolation=cv2.INTER_AREA), arrays), n)
        s.add("OpenCV INTER_LINEAR",
              over(lambda a: cv2.resize(a, size, interpolation=cv2.INTER_LINEAR), arrays), n,
              note="no antialias")
    chw = [torch.from_numpy(a).permute(2, 0, 1).contiguous() for a in arrays]
    hwc = [torch.from_numpy(a).permute(2, 0, 1) for a in arrays]  # channels-last view
    tv = lambda t: TVF.resize(t, list(size), interpolation=v2.InterpolationMode.BILINEAR,  # noqa: E731
                              antialias=True)
    s.add("torchvision v2 resize (CHW uint8)", over(tv, chw), n)
    s.add("torchvision v2 resize (channels-last uint8)", over(tv, hwc), n)
    return s


def sec_resized_crop(tl, arrays, seed):
    n = len(arrays)
    size = (OUT_SIZE, OUT_SIZE)
    wins, _ = rrc_windows([(a.shape[1], a.shape[0]) for a in arrays], seed)
    s = Section(
        "resized_crop", f"Crop + resize to {OUT_SIZE}×{OUT_SIZE} (RandomResizedCrop windows)",
        "The same RandomResizedCrop windows as the crop-decode section, applied to the decoded "
        "images: only the window is resampled (Pillow: `resize(box=...)`, OpenCV: a slice, "
        "torchvision: `resized_crop`).",
        baselines=["Pillow resize(box=) BILINEAR"],
        targets=[("turboloader resized_crop", "Pillow resize(box=) BILINEAR", 1.0,
                  "turboloader ≥ Pillow")])
    args = list(zip(arrays, wins))
    if tl.resized_crop is not None:
        s.add("turboloader resized_crop",
              over(lambda a: tl.resized_crop(a[0], *a[1], size), args), n)
        _check(s, "turboloader resized_crop vs torchvision resized_crop (both: taps stay "
                  "inside the window)", lambda: _agreement(
                      (tl.resized_crop(a, t, l, wh, ww, size),
                       TVF.resized_crop(torch.from_numpy(a).permute(2, 0, 1), t, l, wh, ww,
                                        list(size), antialias=True).permute(1, 2, 0).numpy())
                      for a, (t, l, wh, ww) in args[:NCHECK]))
    else:
        s.skip("turboloader resized_crop",
               tl.missing.get("turboloader.transforms.functional", "missing"))
    if tl.resize is not None and "box" in tl.params(tl.resize):
        bargs = [(a, (l, t, l + ww, t + wh)) for a, (t, l, wh, ww) in args]
        s.add("turboloader resize(box=)",
              over(lambda a: tl.resize(a[0], size, "bilinear", box=a[1]), bargs), n,
              pair="Pillow resize(box=) BILINEAR")
        _check(s, "turboloader resize(box=) vs Pillow resize(box=) (both: taps may read just "
                  "outside the box)", lambda: _agreement(
                      (tl.resize(a, size, "bilinear", box=bx),
                       np.asarray(Image.fromarray(a).resize(size, Image.BILINEAR, box=bx)))
                      for a, bx in bargs[:NCHECK]))
    pargs = [(Image.fromarray(a), (l, t, l + ww, t + wh)) for a, (t, l, wh, ww) in args]
    s.add("Pillow resize(box=) BILINEAR",
          over(lambda a: a[0].resize(size, Image.BILINEAR, box=a[1]), pargs), n)
    if cv2 is not None:
        s.add("OpenCV slice + INTER_AREA",
              over(lambda a: cv2.resize(a[0][a[1][0]:a[1][0] + a[1][2],
                                             a[1][1]:a[1][1] + a[1][3]], size,
                                        interpolation=cv2.INTER_AREA), args), n)
    targs = [(torch.from_numpy(a).permute(2, 0, 1).contiguous(), w) for a, w in args]
    s.add("torchvision v2 resized_crop (CHW uint8)",
          over(lambda a: TVF.resized_crop(a[0], *a[1], list(size), antialias=True), targs), n)
    return s


def _dispatch():
    """turboloader's runtime-dispatch module, or None (an older build has none)."""
    try:
        from turboloader._native import _cpu
    except ImportError:
        return None
    return _cpu


def _at_level(cpu, level, fn):
    """fn run with the kernels' dispatch level forced to ``level`` (restored after each call)."""
    def run(x):
        prev = cpu._set_isa(level)
        try:
            return fn(x)
        finally:
            cpu._set_isa(prev)
    return run


def sec_normalize(tl, small):
    n = len(small)
    cpu = _dispatch()
    best = cpu.isa() if cpu is not None else None
    s = Section(
        "normalize", f"Output kernels: HWC uint8 → CHW float32 normalized, and → CHW uint8 "
        f"({OUT_SIZE}×{OUT_SIZE}×3 uint8 in)",
        "`(x / 255 - mean) / std` into a contiguous 3×H×W float32, and the plain HWC→CHW uint8 "
        "transpose. `(out=)` rows write into one reused slot (a batch row), as the loaders do. "
        "`[level]` rows force turboloader's runtime CPU dispatch to that level; `baseline` is "
        "the scalar loop every build had before dispatch (the same arithmetic, so the same "
        "bits). torch: `to_dtype(float32, scale=True)` + `normalize` on the CHW tensor (what a "
        "v2 pipeline runs), with and without the `permute(2, 0, 1).contiguous()` it needs from "
        "HWC; `uint8→float32 copy_` is torch's bare conversion of the CHW image into a reused "
        "float tensor (no scaling): the floor for any normalize.",
        baselines=["torch to_dtype + normalize (CHW in)", "torch uint8→float32 copy_ (CHW in)"],
        targets=[("turboloader _chw.normalize_chw_into(out)",
                  "torch uint8→float32 copy_ (CHW in)", 1.0,
                  "the normalize kernel into a reused slot at least as fast as torch's bare "
                  "uint8→float32 conversion"),
                 ("turboloader to_chw_normalized(out=)", "torch to_dtype + normalize (CHW in)",
                  1.0, "functional normalize (with its Python checks) faster than torch's "
                  "to_dtype + normalize"),
                 ("turboloader to_chw_uint8(out=)", "torch permute copy_ (uint8, reused out)",
                  1.0, "CHW uint8 at least as fast as torch's permuted copy")])
    mean = np.array(MEAN, np.float32)
    std = np.array(STD, np.float32)
    levels = list(cpu.supported()) if cpu is not None else []
    if tl.to_chw_normalized is not None:
        p = tl.params(tl.to_chw_normalized)
        buf = np.empty((3, OUT_SIZE, OUT_SIZE), np.float32)
        if "out" in p:
            s.add("turboloader to_chw_normalized(out=)",
                  over(lambda a: tl.to_chw_normalized(a, MEAN, STD, out=buf), small), n,
                  note=f"dispatch: {best}" if best else "")
            s.add("turboloader to_chw_normalized(out=, flip=True)",
                  over(lambda a: tl.to_chw_normalized(a, MEAN, STD, flip=True, out=buf), small),
                  n, pair="numpy affine + flip")
            native = sys.modules.get("turboloader._native._chw")
            if native is not None:
                s.add("turboloader _chw.normalize_chw_into(out)",
                      over(lambda a: native.normalize_chw_into(a, buf, mean=MEAN, std=STD),
                           small), n, note="the native entry, without the functional layer's "
                      "Python checks")
            for lv in levels[:-1]:
                s.add(f"turboloader to_chw_normalized(out=) [{lv}]",
                      over(_at_level(cpu, lv, lambda a: tl.to_chw_normalized(
                          a, MEAN, STD, out=buf)), small), n)
        s.add("turboloader to_chw_normalized", over(
            lambda a: tl.to_chw_normalized(a, MEAN, STD), small), n)
        _check(s, "turboloader vs numpy naive (float32)", lambda: _agreement(
            (tl.to_chw_normalized(a, MEAN, STD),
             ((a.astype(np.float32) / 255 - mean) / std).transpose(2, 0, 1))
            for a in small[:NCHECK]))
        _check(s, "flip=True vs numpy of the mirrored image", lambda: _agreement(
            (tl.to_chw_normalized(a, MEAN, STD, flip=True),
             ((a[:, ::-1].astype(np.float32) / 255 - mean) / std).transpose(2, 0, 1))
            for a in small[:NCHECK]))
        if levels:
            def same_bits():
                outs = []
                for lv in levels:
                    prev = cpu._set_isa(lv)
                    try:
                        outs.append([tl.to_chw_normalized(a, MEAN, STD, flip=f).tobytes()
                                     for a in small[:NCHECK] for f in (False, True)])
                    finally:
                        cpu._set_isa(prev)
                return ("identical bytes at every level" if all(o == outs[0] for o in outs)
                        else "**DIFFERENT** bytes between levels")
            _check(s, f"levels {', '.join(levels)} against each other", same_bits)
    else:
        s.skip("turboloader to_chw_normalized",
               tl.missing.get("turboloader.transforms.functional", "missing"))
    to_u8 = getattr(tl.F, "to_chw_uint8", None) if tl.F is not None else None
    if to_u8 is not None:
        ubuf = np.empty((3, OUT_SIZE, OUT_SIZE), np.uint8)
        s.add("turboloader to_chw_uint8(out=)", over(lambda a: to_u8(a, out=ubuf), small), n,
              note=f"dispatch: {best}" if best else "")
        s.add("turboloader to_chw_uint8(out=, flip=True)",
              over(lambda a: to_u8(a, flip=True, out=ubuf), small), n)
        for lv in levels[:-1]:
            s.add(f"turboloader to_chw_uint8(out=) [{lv}]",
                  over(_at_level(cpu, lv, lambda a: to_u8(a, out=ubuf)), small), n)
        _check(s, "to_chw_uint8 vs numpy transpose", lambda: _agreement(
            (to_u8(a), a.transpose(2, 0, 1)) for a in small[:NCHECK]))
    s.add("numpy naive",
          over(lambda a: np.ascontiguousarray(
              ((a.astype(np.float32) / 255 - mean) / std).transpose(2, 0, 1)), small), n)
    scale = (1 / (255 * std))[:, None, None]
    shift = (-mean / std)[:, None, None]

    def np_affine(a):
        x = a.transpose(2, 0, 1).astype(np.float32)
        x *= scale
        x += shift
        return x

    s.add("numpy affine", over(np_affine, small), n)
    s.add("numpy affine + flip", over(lambda a: np_affine(a[:, ::-1]), small), n)

    def torch_norm(a):
        t = torch.from_numpy(a).permute(2, 0, 1).contiguous()
        t = TVF.to_dtype(t, torch.float32, scale=True)
        return TVF.normalize(t, MEAN, STD)

    s.add("torch to_dtype + normalize", over(torch_norm, small), n,
          note="HWC in: permute + contiguous first")
    chw = [torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1))) for a in small]
    s.add("torch to_dtype + normalize (CHW in)", over(
        lambda t: TVF.normalize(TVF.to_dtype(t, torch.float32, scale=True), MEAN, STD), chw), n)
    fslot = torch.empty((3, OUT_SIZE, OUT_SIZE), dtype=torch.float32)
    s.add("torch uint8→float32 copy_ (CHW in)", over(lambda t: fslot.copy_(t), chw), n)
    uslot = torch.empty((3, OUT_SIZE, OUT_SIZE), dtype=torch.uint8)
    s.add("torch permute copy_ (uint8, reused out)",
          over(lambda a: uslot.copy_(torch.from_numpy(a).permute(2, 0, 1)), small), n)
    return s


def sec_train(tl, data, sizes, seed):
    n = len(data)
    s = Section(
        "train", "Full train-sample path, per image, single-threaded",
        f"JPEG bytes → RandomResizedCrop({OUT_SIZE}, scale=(0.08, 1), ratio=(3/4, 4/3)) → "
        "random horizontal flip → float32 3×224×224 normalised with ImageNet's mean/std. "
        "turboloader rows use windows from the same seeded `get_params`; the torchvision rows "
        "draw their own from a seeded torch RNG (same distribution). turboloader writes into a "
        "preallocated slot where it can; the baselines allocate (and a loader would still copy "
        "them into the batch in `collate`).",
        baselines=["Pillow + v2 on PIL", "Pillow + v2 on tensor"],
        targets=[("turboloader fused", "Pillow + v2 on PIL", 1.0,
                  "fused faster than Pillow + torchvision v2")])
    wins, flips = rrc_windows(sizes, seed)
    check_fns = {}
    slot = np.empty((3, OUT_SIZE, OUT_SIZE), np.float32)
    size = (OUT_SIZE, OUT_SIZE)

    if tl.decode_resized_crop is not None:
        fused = _fused_adapter(tl, slot)
        if fused is None:
            s.skip("turboloader fused", "decode_resized_crop signature not understood: "
                   f"{inspect.signature(tl.decode_resized_crop)}")
        else:
            args = list(zip(data, wins, flips))
            s.add("turboloader fused", over(lambda a: fused(*a), args), n)
            check_fns["turboloader fused"] = lambda a: np.array(fused(*a[:3]))
            if "dct_scaling" in tl.params(tl.decode_resized_crop):
                exact = _fused_adapter(tl, slot, dct_scaling=False)
                s.add("turboloader fused (dct_scaling=False)", over(lambda a: exact(*a), args), n)
                check_fns["turboloader fused (dct_scaling=False)"] = (
                    lambda a: np.array(exact(*a[:3])))
    else:
        s.skip("turboloader fused", tl.missing.get("turboloader.decode.fused",
                                                   "turboloader.decode.fused not available"))

    if (tl.decode_jpeg is not None and tl.resize is not None
            and tl.to_chw_normalized is not None):
        p = tl.params(tl.decode_jpeg)
        has_scale = "scale" in p
        has_box = "box" in tl.params(tl.resize)

        def unfused(a, pow2=False):
            b, (t, l, wh, ww), flip, size_ = a
            if has_scale:
                sc, crop = _scaled_window(tl, size_, (t, l, wh, ww), pow2=pow2)
                img = tl.decode_crop(b, crop, scale=sc)
                if has_box:
                    # the exact (sub-pixel) window inside the decoded, integer-aligned crop
                    x0, y0, cw, ch = crop
                    bx = (max(0.0, float(l * sc - x0)), max(0.0, float(t * sc - y0)),
                          min(float(cw), float((l + ww) * sc - x0)),
                          min(float(ch), float((t + wh) * sc - y0)))
                    img = tl.resize(img, size, "bilinear", box=bx)
                else:
                    img = tl.resize(img, size, "bilinear")
            else:
                img = tl.decode_crop(b, (l, t, ww, wh))
                img = tl.resize(img, size, "bilinear")
            return tl.to_chw_normalized(img, MEAN, STD, flip=flip, out=slot)

        uargs = list(zip(data, wins, flips, sizes))
        s.add("turboloader unfused", over(unfused, uargs), n,
              note="decode_jpeg(scale, crop) → resize(box) → to_chw_normalized(flip)")
        check_fns["turboloader unfused"] = lambda a: np.array(unfused(a))
        if has_scale:
            s.add("turboloader unfused (powers-of-2 scales)",
                  over(lambda a: unfused(a, pow2=True), uargs), n,
                  note="scale restricted to 1, 1/2, 1/4, 1/8")
            check_fns["turboloader unfused (powers-of-2 scales)"] = (
                lambda a: np.array(unfused(a, pow2=True)))
    else:
        s.skip("turboloader unfused", "decode_jpeg / resize / to_chw_normalized not all present")

    def reference(a):
        # Pillow decode, then torchvision's resized_crop (antialias) on the same window,
        # flip, to_dtype + normalize: what the fused path documents itself to match.
        b, (t, l, wh, ww), flip, _ = a
        x = torch.from_numpy(np.array(Image.open(io.BytesIO(b)).convert("RGB")))
        x = TVF.resized_crop(x.permute(2, 0, 1), t, l, wh, ww, list(size), antialias=True)
        if flip:
            x = TVF.horizontal_flip(x)
        return TVF.normalize(TVF.to_dtype(x, torch.float32, scale=True), MEAN, STD).numpy()

    checks = list(zip(data, wins, flips, sizes))[:NCHECK]
    for row in s.rows:
        fn = check_fns.get(row.label)
        if fn is not None:
            _check(s, f"{row.label} vs Pillow + torchvision resized_crop on the same window "
                      f"(normalised units; one 8-bit level ≈ 0.017)",
                   lambda fn=fn: _agreement((fn(a), reference(a)) for a in checks))

    norm = [v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]
    rrc = v2.RandomResizedCrop(size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), antialias=True)
    on_pil = v2.Compose([rrc, v2.RandomHorizontalFlip(), v2.ToImage(), *norm])
    on_tensor = v2.Compose([v2.ToImage(), rrc, v2.RandomHorizontalFlip(), *norm])
    torch.manual_seed(seed)  # the v2 transforms draw from torch's global RNG
    s.add("Pillow + v2 on PIL",
          over(lambda b: on_pil(Image.open(io.BytesIO(b)).convert("RGB")), data), n,
          note="ImageFolder loader, v2 RRC on PIL")
    s.add("Pillow + v2 on tensor",
          over(lambda b: on_tensor(Image.open(io.BytesIO(b)).convert("RGB")), data), n,
          note="v2.ToImage first")
    tv_data = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in data]
    tv_pipe = v2.Compose([rrc, v2.RandomHorizontalFlip(), *norm])
    s.add("torchvision.io.decode_jpeg + v2",
          over(lambda t: tv_pipe(torchvision.io.decode_jpeg(
              t, mode=torchvision.io.ImageReadMode.RGB)), tv_data), n)
    return s


def _fused_adapter(tl, slot, **extra):
    """Map (jpeg bytes, (top, left, height, width) window, flip) onto whatever
    decode_resized_crop's signature is. Returns None if it isn't recognised."""
    fn = tl.decode_resized_crop
    p = tl.params(fn)
    kw = dict(extra)
    if "mean" in p:
        kw["mean"] = MEAN
    if "std" in p:
        kw["std"] = STD
    if "out" in p:
        kw["out"] = slot
    size = (OUT_SIZE, OUT_SIZE)
    if "crop" in p or "box" in p or "window" in p:
        key = "crop" if "crop" in p else ("box" if "box" in p else "window")
        size_key = "size" if "size" in p else None

        def call(b, win, flip):
            t, l, wh, ww = win
            k = dict(kw)
            k[key] = (l, t, ww, wh)
            if "flip" in p:
                k["flip"] = flip
            if size_key:
                k[size_key] = size
            return fn(b, **k)

        return call
    if all(x in p for x in ("top", "left", "height", "width")):
        def call(b, win, flip):
            t, l, wh, ww = win
            k = dict(kw, top=t, left=l, height=wh, width=ww)
            if "flip" in p:
                k["flip"] = flip
            if "size" in p:
                k["size"] = size
            return fn(b, **k)

        return call
    return None


# --------------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--n", type=int, default=None,
                    help="images per pass (default 200; 24 with --hires; 24 with --quick)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="timed passes per system (default 7; 3 with --quick)")
    ap.add_argument("--hires", action="store_true", help="long side 1600..4000 px")
    ap.add_argument("--seed", type=int, default=0, help="dataset and crop-window seed")
    ap.add_argument("--quick", action="store_true", help="few images and repeats (smoke run)")
    ap.add_argument("--data", default=None,
                    help="read JPEGs from this ImageFolder tree instead of making them")
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help=f"comma-separated sections (default all): {', '.join(SECTIONS)}")
    ap.add_argument("--out", default=None, help="also write the Markdown report to this file")
    args = ap.parse_args(argv)
    only = [x.strip() for x in args.only.split(",") if x.strip()]
    bad = set(only) - set(SECTIONS)
    if bad:
        ap.error(f"unknown section(s): {', '.join(sorted(bad))}")
    if args.n is None:
        args.n = 24 if (args.quick or args.hires) else 200
    if args.repeat is None:
        args.repeat = 3 if args.quick else 7
    if args.n < 1 or args.repeat < 1:
        ap.error("--n and --repeat must be >= 1")

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    t_start = time.perf_counter()
    if args.data:
        items = datasets.read_image_folder(args.data, limit=args.n)
        args.source = f"ImageFolder `{args.data}`"
    else:
        log(f"making {args.n} {'high-resolution ' if args.hires else ''}JPEGs (seed {args.seed})")
        items = datasets.make_jpegs(args.n, args.seed, args.hires)
        args.source = (f"`benchmarks/datasets.py` make_jpegs(n={args.n}, seed={args.seed}, "
                       f"hires={args.hires})")
    data = [b for b, _ in items]
    sizes = []
    for b in data:
        with Image.open(io.BytesIO(b)) as im:
            sizes.append(im.size)  # (width, height)

    tl = TL()
    header = machine_info(tl, args, items)
    need_arrays = {"resize", "resized_crop", "normalize"} & set(only)
    arrays = [pil_decode_array(b) for b in data] if need_arrays else []
    small = ([np.asarray(Image.fromarray(a).resize((OUT_SIZE, OUT_SIZE), Image.BILINEAR))
              for a in arrays] if "normalize" in only else [])

    sections = []
    builders = {
        "decode": lambda: sec_decode(tl, data, sizes),
        "scaled": lambda: sec_scaled(tl, data, sizes),
        "crop": lambda: sec_crop(tl, data, sizes, args.seed),
        "resize": lambda: sec_resize(tl, arrays),
        "resized_crop": lambda: sec_resized_crop(tl, arrays, args.seed),
        "normalize": lambda: sec_normalize(tl, small),
        "train": lambda: sec_train(tl, data, sizes, args.seed),
    }
    for key in SECTIONS:
        if key not in only:
            continue
        sec = builders[key]()
        log(f"[{key}] {sec.title}")
        sec.measure(args.repeat, log)
        sections.append(sec)

    load = os.getloadavg()
    title = ("## turboloader kernel benchmark" + (" (high resolution)" if args.hires else ""))
    cmd = "python " + " ".join([os.path.relpath(__file__)] + (argv if argv is not None
                                                              else sys.argv[1:]))
    parts = [title, "", f"`{cmd}`", "", *header,
             f"- load average at end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
             f"total wall time {time.perf_counter() - t_start:.0f} s", ""]
    parts += [sec.markdown() for sec in sections]
    report = "\n".join(parts)
    print(report)
    if args.out:
        Path(args.out).write_text(report)
        log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
