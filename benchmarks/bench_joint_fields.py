"""Images with masks and boxes: the cost of MaskField / BoxesField inside TarDataset, against
the image alone and against the ways a user had before, measured in the same run.

Rows, all on the same JPEGs (``benchmarks/datasets.py``) with a PNG mask of the image's size
and 1-3 boxes per sample, train pipeline RandomResizedCrop(224) + RandomHorizontalFlip +
ToImage + ToDtype(float32) + Normalize, shuffled:

* ``TarDataset, image + label``: ``fields=("jpg", "cls")`` (the floor: no annotations);
* ``TarDataset + MaskField + BoxesField``: ``fields=("jpg", MaskField("seg.png"),
  BoxesField("json", key="boxes"), "cls")``: image fused on the batch path, annotations
  replayed with its draws;
* ``map-style + transform_jointly``: a torch Dataset over the same samples in memory calling
  ``turboloader.transforms.transform_jointly`` per sample (the fused image one at a time;
  what examples/segmentation.py did before the fields);
* ``PIL + torchvision v2``: the same Dataset decoding with Pillow and transforming
  ``(image, Mask, BoundingBoxes)`` with torchvision v2's own classes.

Each under ``torch.utils.data.DataLoader(batch_size=--batch, num_workers=--workers,
collate_fn=collate_fields)``; systems interleaved pass by pass, the best pass of each kept;
the ratio column is against the MaskField + BoxesField row of the same run.

    python benchmarks/bench_joint_fields.py                 # 256 ImageNet-sized images
    python benchmarks/bench_joint_fields.py --n 512 --repeat 5
"""

from __future__ import annotations

import argparse
import io
import json
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


def annotations(data, i):
    """A PNG mask of the image's size (a few class rectangles) and their boxes."""
    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        w, h = im.size
    rng = np.random.default_rng(i)
    mask = np.zeros((h, w), np.uint8)
    boxes = []
    for _ in range(int(rng.integers(1, 4))):
        x0, y0 = int(rng.integers(0, w // 2)), int(rng.integers(0, h // 2))
        x1, y1 = int(rng.integers(x0 + 8, w)), int(rng.integers(y0 + 8, h))
        mask[y0:y1, x0:x1] = int(rng.integers(1, 20))
        boxes.append([x0, y0, x1, y1])
    buf = io.BytesIO()
    Image.fromarray(mask).save(buf, "PNG")
    return buf.getvalue(), boxes


class InMemory:
    """A map-style dataset of ``(jpeg, mask png, boxes, label)`` kept in memory."""

    def __init__(self, samples, mode, seed=1):
        self.samples, self.mode, self.seed, self.epoch = samples, mode, seed, 0
        self.t = None

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __len__(self):
        return len(self.samples)

    def _pipeline(self):
        import torch

        if self.mode == "joint":
            from turboloader import transforms as T

            return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToImage(),
                              T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)])
        from torchvision.transforms import v2

        return v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(), v2.ToImage(),
                           v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])

    def __getitem__(self, i):
        import numpy as np
        import torch
        from PIL import Image
        from torchvision import tv_tensors

        if self.t is None:
            self.t = self._pipeline()
        data, png, boxes, label = self.samples[i]
        mask = tv_tensors.Mask(torch.from_numpy(np.array(Image.open(io.BytesIO(png)))))
        h, w = mask.shape
        bb = tv_tensors.BoundingBoxes(torch.tensor(boxes, dtype=torch.float32), format="XYXY",
                                      canvas_size=(h, w))
        if self.mode == "joint":
            from turboloader import sample_rng
            from turboloader.transforms import transform_jointly

            image, mask, bb = transform_jointly(self.t, data, mask, bb,
                                                rng=sample_rng(self.seed, self.epoch, i))
        else:
            image = Image.open(io.BytesIO(data)).convert("RGB")
            image, mask, bb = self.t(image, mask, bb)
        return image, mask, bb, label


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=256, help="images (default 256)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shard-size", type=int, default=128)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--workers", type=int, default=0, help="DataLoader workers (default 0)")
    p.add_argument("--repeat", type=int, default=3, help="passes per system; the best is kept")
    args = p.parse_args(argv)

    import numpy as np
    import torch
    import torch.utils.data

    from datasets import make_jpegs
    from turboloader import BoxesField, MaskField, TarDataset
    from turboloader import transforms as T
    from turboloader.data import collate_fields

    torch.set_num_threads(1)
    tmp = tempfile.TemporaryDirectory()
    work = Path(tmp.name)
    t0 = time.perf_counter()
    items = make_jpegs(args.n, seed=args.seed)
    samples = []
    for i, (data, label) in enumerate(items):
        png, boxes = annotations(data, i)
        samples.append((data, png, boxes, label))
    import tarfile

    shards = []
    for s in range(0, len(samples), args.shard_size):
        path = work / f"joint-{s // args.shard_size:05d}.tar"
        with tarfile.open(path, "w") as tf:
            for i in range(s, min(len(samples), s + args.shard_size)):
                data, png, boxes, label = samples[i]
                for ext, blob in (("jpg", data), ("seg.png", png), ("cls", str(label).encode()),
                                  ("json", json.dumps({"boxes": boxes}).encode())):
                    info = tarfile.TarInfo(f"{i:06d}.{ext}")
                    info.size = len(blob)
                    tf.addfile(info, io.BytesIO(blob))
        shards.append(str(path))
    n = len(samples)
    print(f"data: {n} images, {np.mean([len(s[0]) for s in samples]) / 1000:.1f} KB/image, "
          f"{np.mean([len(s[1]) for s in samples]) / 1000:.1f} KB/mask "
          f"({time.perf_counter() - t0:.1f} s to make)", file=sys.stderr)

    def train():
        return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToImage(),
                          T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)])

    ours = "TarDataset + MaskField + BoxesField"
    systems = {
        "TarDataset, image + label (no annotations)": TarDataset(shards, train(), seed=1,
                                                                  fields=("jpg", "cls")),
        ours: TarDataset(shards, train(), seed=1, fields=(
            "jpg", MaskField("seg.png"), BoxesField("json", key="boxes"), "cls")),
        "map-style + transform_jointly per sample": InMemory(samples, "joint"),
        "PIL + torchvision v2 (image, Mask, BoundingBoxes)": InMemory(samples, "v2"),
    }

    def loader(ds):
        shuffle = True if isinstance(ds, InMemory) else None
        return torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=shuffle,
                                           num_workers=args.workers, collate_fn=collate_fields)

    best = dict.fromkeys(systems, 0.0)
    for epoch in range(args.repeat):
        for name, ds in systems.items():
            ds.set_epoch(epoch)
            t = time.perf_counter()
            count = sum(len(b[-1]) for b in loader(ds))
            best[name] = max(best[name], count / (time.perf_counter() - t))
            assert count == n, (name, count)

    from turboloader.tools.demo import cpu_model
    print(f"machine: {os.cpu_count()} CPUs ({cpu_model()}), {platform.system()} "
          f"{platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}")
    print(f"data: {n} ImageNet-sized JPEGs (benchmarks/datasets.py, seed {args.seed}) with a "
          f"PNG mask and 1-3 boxes each; DataLoader(batch_size={args.batch}, num_workers="
          f"{args.workers}); best of {args.repeat} interleaved passes\n")
    base = best[ours]
    print("| RandomResizedCrop 224 + flip + normalize, with mask and boxes | images/s | "
          "vs MaskField + BoxesField |")
    print("|---|---:|---:|")
    for name, rate in best.items():
        print(f"| {name} | {rate:.0f} | {rate / base:.2f}x |")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
