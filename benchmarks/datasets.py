"""Deterministic ImageNet-like JPEG datasets for turboloader's benchmarks.

The pixels come from the real photographs that ship inside scikit-image and scikit-learn
(nothing is downloaded at run time). Each sample is a random crop / flip / rescale / mild colour
change of one of those photographs, re-encoded at ImageNet's size distribution: short side
about 250-500 px, aspect ratio mostly 3:4..4:3 with some wider images, quality 75-95,
4:2:0 chroma subsampling for most images. The ``hires`` variant has a long side of 1600-4000 px;
since those are upscaled, sensor-like noise and a little texture are added so that they do not
compress unrealistically well.

The same ``seed`` always gives the same bytes (for a given Pillow / libjpeg-turbo / NumPy).

Use it as a module::

    from datasets import make_jpegs, write_image_folder, write_shards
    items = make_jpegs(200, seed=0)            # [(jpeg_bytes, label), ...]
    write_image_folder("data/train", items)    # data/train/class_000/00000.jpg ...
    write_shards("data/shards", items)         # data/shards/shard-00000.tar ...

or from the command line::

    python benchmarks/datasets.py --out benchmarks/data/small --n 1000 --classes 10 --seed 0
    python benchmarks/datasets.py --out benchmarks/data/hires --n 64 --hires
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import tarfile
import time
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = [
    "SOURCE_NAMES",
    "load_sources",
    "make_jpegs",
    "write_image_folder",
    "write_shards",
    "read_image_folder",
    "describe",
]

# Colour photographs bundled with scikit-image that load without pooch / network
# (astronaut, chelsea, coffee, hubble_deep_field, immunohistochemistry, retina, rocket,
# stereo_motorcycle), plus scikit-learn's two sample photos. Synthetic images
# (colorwheel, logo, ...) are left out: they compress far better than photographs.
SOURCE_NAMES = (
    "astronaut",
    "chelsea",
    "coffee",
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
    "rocket",
    "stereo_motorcycle",
    "sklearn:china",
    "sklearn:flower",
)

# (aspect w/h, weight): ImageNet is dominated by 4:3 landscape, then 3:4 portrait, 3:2, 1:1,
# plus a tail of wide panoramas-ish images.
_ASPECTS = (
    (4 / 3, 0.40),
    (3 / 4, 0.14),
    (3 / 2, 0.14),
    (2 / 3, 0.06),
    (1.0, 0.10),
    (None, 0.10),  # uniform in log space over [3/4, 4/3]
    (16 / 9, 0.04),
    (2.0, 0.02),
)
# Noise levels (in 8-bit units) of _add_texture; chosen so that the default set encodes at
# ~2.2 bits/pixel (~50 KB/image) and the hires set at ~2.7 bits/pixel.
GRAIN, GRAIN_UP, TEX, HIRES_GAIN = 2.0, 2.0, 3.0, 1.0
# Pillow's `subsampling`: 0 = 4:4:4, 1 = 4:2:2, 2 = 4:2:0
_SUBSAMPLING = ((2, 0.85), (0, 0.10), (1, 0.05))


@lru_cache(maxsize=1)
def load_sources() -> tuple[tuple[str, np.ndarray], ...]:
    """Load the bundled colour photographs as ``(name, HxWx3 uint8)`` pairs.

    A source that fails to load (e.g. a scikit-image release that moved it behind pooch) is
    skipped with a warning; at least one must load.
    """
    out = []
    sklearn_images = None
    for name in SOURCE_NAMES:
        try:
            if name.startswith("sklearn:"):
                if sklearn_images is None:
                    from sklearn.datasets import load_sample_images

                    s = load_sample_images()
                    sklearn_images = {Path(f).stem: img for f, img in zip(s.filenames, s.images)}
                img = sklearn_images[name.split(":", 1)[1]]
            else:
                import skimage.data

                img = getattr(skimage.data, name)()
                if isinstance(img, tuple):  # stereo_motorcycle: (left, right, disparity)
                    img = img[0]
        except Exception as exc:  # noqa: BLE001 - any failure means "not available offline"
            warnings.warn(f"benchmark source {name!r} unavailable: {exc}", stacklevel=2)
            continue
        img = np.asarray(img)
        if img.ndim != 3 or img.shape[2] < 3 or img.dtype != np.uint8:
            warnings.warn(f"benchmark source {name!r} is not an RGB uint8 image", stacklevel=2)
            continue
        out.append((name, np.ascontiguousarray(img[:, :, :3])))
    if not out:
        raise RuntimeError("no benchmark source image could be loaded; install scikit-image "
                           "and scikit-learn (pip install 'torch-turboloader[bench]')")
    return tuple(out)


def _choice(rng: np.random.Generator, table):
    values = [v for v, _ in table]
    weights = np.array([w for _, w in table], dtype=np.float64)
    return values[int(rng.choice(len(values), p=weights / weights.sum()))]


def _target_size(rng: np.random.Generator, hires: bool) -> tuple[int, int]:
    """Return (width, height) of the image to encode."""
    aspect = _choice(rng, _ASPECTS)
    if aspect is None:
        aspect = float(np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3))))
    if hires:
        long_side = int(rng.integers(1600, 4001))
        if aspect >= 1:
            w, h = long_side, round(long_side / aspect)
        else:
            w, h = round(long_side * aspect), long_side
    else:
        # ImageNet: most images have their long side at 500 (Flickr's "medium" size); the rest
        # spread out. Short side ends up about 250..500.
        if rng.random() < 0.6:
            long_side = 500
            short = long_side / max(aspect, 1 / aspect)
            if short < 250:
                long_side = round(250 * max(aspect, 1 / aspect))
        else:
            short_side = int(rng.integers(250, 501))
            long_side = round(short_side * max(aspect, 1 / aspect))
        if aspect >= 1:
            w, h = long_side, round(long_side / aspect)
        else:
            w, h = round(long_side * aspect), long_side
    return max(w, 16), max(h, 16)


def _source_crop(rng: np.random.Generator, src: np.ndarray, aspect: float) -> np.ndarray:
    """A random crop of ``src`` with the given aspect ratio covering 35..100% of the largest one."""
    sh, sw = src.shape[:2]
    if sw / sh > aspect:
        max_h, max_w = sh, sh * aspect
    else:
        max_h, max_w = sw / aspect, sw
    frac = np.sqrt(rng.uniform(0.35, 1.0))
    ch = max(8, min(sh, int(round(max_h * frac))))
    cw = max(8, min(sw, int(round(max_w * frac))))
    y = int(rng.integers(0, sh - ch + 1))
    x = int(rng.integers(0, sw - cw + 1))
    return src[y:y + ch, x:x + cw]


def _colour_jitter(rng: np.random.Generator, img: np.ndarray) -> np.ndarray:
    """Mild per-image gain / gamma / channel balance so repeated sources don't look identical."""
    x = img.astype(np.float32) * (1 / 255)
    gamma = float(np.exp(rng.uniform(-0.2, 0.2)))
    gain = rng.uniform(0.85, 1.1) * rng.uniform(0.95, 1.05, size=3).astype(np.float32)
    x = np.power(x, gamma, out=x)
    x *= gain
    return x  # float32 in ~[0, 1.15]; clipped when quantised


def _add_texture(rng: np.random.Generator, x: np.ndarray, upscale: float,
                 hires: bool) -> np.ndarray:
    """Add sensor-like noise: per-pixel luminance grain, a little chroma noise, and (for
    upscaled images) a mid-frequency texture, so outputs carry camera-like entropy. ``x`` is float32 HWC
    in [0, 1]-ish and is modified in place."""
    h, w = x.shape[:2]
    # More grain the more the image was blown up (an upscaled photo is otherwise very smooth).
    sigma = (GRAIN + GRAIN_UP * min(max(upscale - 1.0, 0.0), 3.0) / 3.0) / 255
    if hires:
        sigma *= HIRES_GAIN
    grain = rng.standard_normal((h, w), dtype=np.float32)
    grain *= sigma
    x += grain[:, :, None]
    del grain
    # Chroma noise, at half resolution (as a camera's demosaicing would leave it).
    ch, cw = (h + 1) // 2, (w + 1) // 2
    chroma = rng.standard_normal((ch, cw, 3), dtype=np.float32) * np.float32(0.5 / 255)
    x += np.repeat(np.repeat(chroma, 2, axis=0), 2, axis=1)[:h, :w]
    del chroma
    if upscale > 1.5:
        # Mid-frequency texture (2x coarser), like surface detail the source never resolved.
        th, tw = max(2, h // 2), max(2, w // 2)
        tex = rng.standard_normal((th, tw), dtype=np.float32)
        tex_img = Image.fromarray(tex).resize((w, h), Image.BILINEAR)
        amp = TEX * (HIRES_GAIN if hires else 1.0) / 255
        x += np.asarray(tex_img, dtype=np.float32)[:, :, None] * np.float32(amp)
    return x


def _one_jpeg(rng: np.random.Generator, sources, hires: bool, progressive: float) -> bytes:
    name, src = sources[int(rng.integers(len(sources)))]
    w, h = _target_size(rng, hires)
    crop = _source_crop(rng, src, w / h)
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    upscale = max(w / crop.shape[1], h / crop.shape[0])
    x = _colour_jitter(rng, np.ascontiguousarray(crop))
    # Resample in 8 bits per channel with Pillow (fast, and it's what photo tools do).
    pil = Image.fromarray(np.clip(x * 255 + 0.5, 0, 255).astype(np.uint8))
    resample = Image.LANCZOS if upscale < 1 else Image.BICUBIC
    pil = pil.resize((w, h), resample)
    # Every image gets grain: the bundled photos are small and already compressed, so without
    # it the outputs would be smoother (and decode faster) than camera photographs.
    x = np.asarray(pil, dtype=np.float32) * np.float32(1 / 255)
    x = _add_texture(rng, x, upscale, hires)
    np.multiply(x, 255, out=x)
    x += 0.5
    np.clip(x, 0, 255, out=x)
    pil = Image.fromarray(x.astype(np.uint8))
    del x
    # 75..95, skewed high (mean ~89) like Flickr-sourced ImageNet files
    quality = int(round(75 + 20 * rng.beta(2.5, 1.2)))
    subsampling = _choice(rng, _SUBSAMPLING)
    prog = bool(rng.random() < progressive)
    buf = io.BytesIO()
    pil.save(buf, format="JPEG", quality=quality, subsampling=subsampling, progressive=prog,
             optimize=False)
    return buf.getvalue()


def make_jpegs(n: int, seed: int = 0, hires: bool = False, *, num_classes: int = 10,
               progressive: float = 0.0, start: int = 0) -> list[tuple[bytes, int]]:
    """Make ``n`` deterministic ImageNet-like JPEGs.

    Args:
        n: number of images.
        seed: every image ``i`` is drawn from its own generator seeded by ``(seed, i, hires)``,
            so ``make_jpegs(10, s)`` is a prefix of ``make_jpegs(100, s)``.
        hires: long side 1600..4000 px instead of ImageNet's short side 250..500 px.
        num_classes: labels are ``0..num_classes-1``, drawn per image (roughly balanced).
        progressive: fraction of images encoded as progressive JPEGs (ImageNet has a few).
        start: the index of the first image: ``make_jpegs(n, s, start=k)`` is images
            ``k..k+n-1`` of ``make_jpegs(k + n, s)`` (for making a dataset in parallel).

    Returns:
        ``[(jpeg_bytes, label), ...]``; every JPEG is baseline (unless progressive), RGB (YCbCr).

    Example:
        >>> items = make_jpegs(4, seed=1)
        >>> len(items), items[0][0][:2]
        (4, b'\\xff\\xd8')
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    sources = load_sources()
    out = []
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    for i in range(start, start + n):
        rng = np.random.Generator(np.random.PCG64([seed, i, int(hires)]))
        label = int(rng.integers(num_classes))
        out.append((_one_jpeg(rng, sources, hires, progressive), label))
    return out


def write_image_folder(root, items, *, start: int = 0) -> list[Path]:
    """Write ``items`` as a torchvision ImageFolder tree ``root/class_xxx/nnnnn.jpg``.

    The file number is the sample index (``start + i``), so the same index names the same image
    in the folder tree and in the shards.
    """
    root = Path(root)
    paths = []
    for i, (data, label) in enumerate(items, start):
        d = root / f"class_{label:03d}"
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"{i:05d}.jpg"
        p.write_bytes(data)
        paths.append(p)
    return paths


def _add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0  # reproducible archives
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def write_shards(root, items, *, shard_size: int = 256, prefix: str = "shard",
                 start: int = 0) -> list[Path]:
    """Write ``items`` as WebDataset-style TAR shards ``root/{prefix}-00000.tar``, ...

    Each sample ``i`` becomes two members, ``{i:08d}.jpg`` and ``{i:08d}.cls`` (the label as
    ASCII decimal), adjacent in the archive as webdataset expects. Archives are USTAR with
    zeroed mtime/uid/gid, so the same items always give the same bytes.
    """
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    items = list(items)
    for s, lo in enumerate(range(0, len(items), shard_size)):
        path = root / f"{prefix}-{s:05d}.tar"
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i, (data, label) in enumerate(items[lo:lo + shard_size], start + lo):
                key = f"{i:08d}"
                _add_member(tar, f"{key}.jpg", data)
                _add_member(tar, f"{key}.cls", str(label).encode("ascii"))
        paths.append(path)
    return paths


def read_image_folder(root, limit: int | None = None) -> list[tuple[bytes, int]]:
    """Read ``root/<class>/*.jp*g`` back as ``[(bytes, label)]`` (classes in sorted order).

    Works on any ImageFolder tree, e.g. a real ImageNet validation folder.
    """
    root = Path(root)
    classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    files = []
    for label, c in enumerate(classes):
        for p in sorted((root / c).iterdir()):
            if p.suffix.lower() in (".jpg", ".jpeg"):
                files.append((p, label))
    if not files:
        raise FileNotFoundError(f"no JPEG files under {root}/<class>/")
    if limit is not None:
        # spread the selection over classes rather than taking the first class only
        step = max(1, len(files) // limit)
        files = files[::step][:limit]
    return [(p.read_bytes(), label) for p, label in files]


def describe(items) -> dict:
    """Summary statistics of a list of ``(jpeg_bytes, label)``: sizes, bits/pixel, qualities."""
    widths, heights, nbytes, sub = [], [], [], {}
    for data, _ in items:
        with Image.open(io.BytesIO(data)) as im:
            w, h = im.size
            try:
                from PIL import JpegImagePlugin

                s = JpegImagePlugin.get_sampling(im)
            except Exception:  # noqa: BLE001
                s = -1
        widths.append(w)
        heights.append(h)
        nbytes.append(len(data))
        name = {0: "4:4:4", 1: "4:2:2", 2: "4:2:0"}.get(s, "other")
        sub[name] = sub.get(name, 0) + 1
    if not items:
        return {"n": 0}
    w = np.array(widths)
    h = np.array(heights)
    b = np.array(nbytes)
    short = np.minimum(w, h)
    long_ = np.maximum(w, h)
    px = w * h
    return {
        "n": len(items),
        "short_side": [int(short.min()), int(np.median(short)), int(short.max())],
        "long_side": [int(long_.min()), int(np.median(long_)), int(long_.max())],
        "mean_megapixels": round(float(px.mean()) / 1e6, 3),
        "mean_kbytes": round(float(b.mean()) / 1024, 1),
        "bits_per_pixel": round(float((b * 8).sum() / px.sum()), 2),
        "subsampling": sub,
        "classes": len({label for _, label in items}),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--n", type=int, default=1000, help="number of images (default 1000)")
    p.add_argument("--classes", type=int, default=10, help="number of classes (default 10)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hires", action="store_true", help="long side 1600..4000 px")
    p.add_argument("--progressive", type=float, default=0.0,
                   help="fraction of progressive JPEGs (default 0)")
    p.add_argument("--shard-size", type=int, default=256, help="samples per TAR shard")
    p.add_argument("--format", default="folder,tar",
                   help="comma-separated: folder (ImageFolder tree under OUT/folder), "
                        "tar (shards under OUT/shards); default both")
    args = p.parse_args(argv)
    formats = {f.strip() for f in args.format.split(",") if f.strip()}
    unknown = formats - {"folder", "tar"}
    if unknown:
        p.error(f"unknown format(s): {', '.join(sorted(unknown))}")

    t0 = time.perf_counter()
    items = make_jpegs(args.n, args.seed, args.hires, num_classes=args.classes,
                       progressive=args.progressive)
    t1 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if "folder" in formats:
        write_image_folder(out / "folder", items)
    if "tar" in formats:
        write_shards(out / "shards", items, shard_size=args.shard_size)
    stats = describe(items)
    manifest = {
        "n": args.n, "classes": args.classes, "seed": args.seed, "hires": args.hires,
        "progressive": args.progressive, "shard_size": args.shard_size,
        "sources": [name for name, _ in load_sources()],
        "pillow": Image.__version__, "numpy": np.__version__, "stats": stats,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"made {args.n} JPEGs in {t1 - t0:.1f} s -> {out}", file=sys.stderr)
    print(json.dumps(stats, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
