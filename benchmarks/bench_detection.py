"""torchvision's detection reference on turboloader (issue 40): the loader its ``train.py``
builds (``GroupedBatchSampler`` over a ``RandomSampler``, ``collate_fn = tuple(zip(*b))``,
the ``hflip`` policy: images at their own sizes, flipped with their boxes, float32) over a
turboloader ``ManifestDataset`` seen as ``(image, target)`` pairs (``DetectionTargets``),
on the thread backend and on the process backend, same workers, same run.

With worker processes each float32 image (4 bytes a pixel) crosses a process boundary;
threads hand the same tensors over in memory. Systems are interleaved pass by pass and the
best pass of each is kept, so a neighbour's load hits both alike.

    python benchmarks/bench_detection.py                       # 192 images, 2 workers
    python benchmarks/bench_detection.py --n 384 --workers 4 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_data(root, n, seed=0):
    """``n`` photograph-like JPEGs at COCO-like sizes (portrait and landscape, 480-640 px
    sides) with 1-8 boxes each; returns the manifest and the aspect ratios."""
    from turboloader.tools.synthetic import synthetic_jpegs

    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(root, "img"), exist_ok=True)
    lines, ratios = [], []
    for i, (jpeg, _) in enumerate(synthetic_jpegs(n, seed=seed, short_side=(360, 480))):
        from PIL import Image
        import io

        w, h = Image.open(io.BytesIO(jpeg)).size
        with open(os.path.join(root, "img", f"{i:05d}.jpg"), "wb") as f:
            f.write(jpeg)
        boxes = []
        for _ in range(int(rng.integers(1, 9))):
            x0, y0 = float(rng.uniform(0, w - 40)), float(rng.uniform(0, h - 40))
            boxes.append([x0, y0, x0 + float(rng.uniform(20, 40)), y0 + float(rng.uniform(20, 40))])
        lines.append(json.dumps({"path": f"img/{i:05d}.jpg", "boxes": boxes,
                                 "labels": [int(v) for v in rng.integers(1, 91, len(boxes))],
                                 "image_id": i}))
        ratios.append(h / w)
    path = os.path.join(root, "train.jsonl")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path, ratios


def collate_fn(batch):
    """The reference's ``utils.collate_fn``."""
    return tuple(zip(*batch))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=192)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=2, help="the reference's default: 2")
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args(argv)

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "tests"))
    from helpers.detection import GroupedBatchSampler, create_aspect_ratio_groups

    import turboloader
    from turboloader import BoxesField, ManifestDataset
    from turboloader import transforms as T
    from turboloader.data import DetectionTargets

    tmp = tempfile.TemporaryDirectory()
    manifest, ratios = make_data(tmp.name, args.n)
    hflip = T.Compose([T.RandomHorizontalFlip(0.5), T.ToImage(),
                       T.ToDtype(torch.float32, scale=True)])
    ds = DetectionTargets(ManifestDataset(manifest, transform=hflip,
                                          fields=("path", BoxesField("boxes"), "labels",
                                                  "image_id")),
                          names=("boxes", "labels", "image_id"))
    groups = create_aspect_ratio_groups(ratios, k=3)

    def loader(backend):
        sampler = torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(0))
        return turboloader.DataLoader(ds, batch_sampler=GroupedBatchSampler(
            sampler, groups, args.batch_size), num_workers=args.workers,
            collate_fn=collate_fn, backend=backend)

    best = {}
    for _ in range(args.repeat):
        for backend in ("threads", "processes"):
            t = time.perf_counter()
            seen = 0
            for images, targets in loader(backend):
                seen += len(images)
                assert all(tg["boxes"].shape[0] == len(tg["labels"]) for tg in targets)
            rate = seen / (time.perf_counter() - t)
            best[backend] = max(best.get(backend, 0.0), rate)
    print(f"machine: {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}, torch {torch.__version__}; load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"data: {args.n} JPEGs, short side 360-480, batch {args.batch_size}, "
          f"{args.workers} workers, best of {args.repeat} passes (whole epoch, start-up included)")
    print("| backend | images/s | vs processes |")
    print("|---|---:|---:|")
    for backend in ("threads", "processes"):
        print(f"| {backend} | {best[backend]:.0f} | {best[backend] / best['processes']:.2f}x |")
    return best


if __name__ == "__main__":
    main()
