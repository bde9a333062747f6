"""Object detection: (image, boxes, labels) listed in a JSON Lines manifest, augmented together
with turboloader's transforms and torchvision's ``tv_tensors.BoundingBoxes``.

``ManifestDataset(manifest, transform=pipeline, fields=("path", BoxesField("boxes"),
"labels"))`` yields ``(image, boxes, labels)``: the JPEG is decoded and transformed in one
fused native call and the ``boxes`` column becomes a ``tv_tensors.BoundingBoxes`` on the
image's canvas that follows the image's drawn parameters (transformed and clamped to the new
canvas, as torchvision v2 does); the collate function runs torchvision's own
``SanitizeBoundingBoxes`` to drop the boxes the crop cut away, with their labels. Targets
are dicts, as torchvision's detection references use them, and the loader keeps them as
lists (boxes per image differ in number). (``TarDataset(urls, pipeline, fields=("jpg",
BoxesField("json", key="boxes"), "json"))`` does the same for WebDataset shards.)

    python examples/detection.py                    # on generated data
    python examples/detection.py --data train.jsonl --root images/ --workers 8

A manifest line: ``{"path": "img/0001.jpg", "boxes": [[x0, y0, x1, y1], ...],
"labels": [1, ...]}``. No model here: the loop checks that every box still frames its object
after augmentation, which is what a detector's data path must get right.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import numpy as np
import torch

COLOURS = np.array([(0, 0, 0), (220, 40, 40), (40, 60, 220), (40, 200, 60)], np.uint8)


def make_data(root, n=48, *, seed=0):
    """``n`` JPEGs with up to three non-overlapping coloured rectangles (class = colour) and
    their boxes; returns the manifest's path."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(root, "img"), exist_ok=True)
    lines = []
    for i in range(n):
        h, w = int(rng.integers(90, 131)), int(rng.integers(120, 181))
        img = np.full((h, w, 3), 235, np.uint8)
        boxes, labels = [], []
        # one object per vertical third of the image: never overlapping
        for k in range(int(rng.integers(1, 4))):
            cls = int(rng.integers(1, 4))
            x_lo, x_hi = k * w // 3, (k + 1) * w // 3
            x0 = int(rng.integers(x_lo, x_hi - 20))
            x1 = int(rng.integers(x0 + 12, x_hi + 1))
            y0 = int(rng.integers(0, h - 20))
            y1 = int(rng.integers(y0 + 12, h + 1))
            img[y0:y1, x0:x1] = COLOURS[cls]
            boxes.append([x0, y0, x1, y1])
            labels.append(cls)
        Image.fromarray(img).save(os.path.join(root, f"img/{i:04d}.jpg"), quality=95)
        lines.append(json.dumps({"path": f"img/{i:04d}.jpg", "boxes": boxes, "labels": labels}))
    path = os.path.join(root, "train.jsonl")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


class Collate:
    """``(images, targets)`` of a batch of ``(image, boxes, labels)`` samples: torchvision's
    ``SanitizeBoundingBoxes`` drops the boxes the crop cut away (and their labels)."""

    def __init__(self):
        from torchvision.transforms import v2

        self.sanitize = v2.SanitizeBoundingBoxes(min_size=4)

    def __call__(self, batch):
        images, targets = [], []
        for image, boxes, labels in batch:
            out = self.sanitize({"image": image, "boxes": boxes,
                                 "labels": torch.as_tensor(labels, dtype=torch.int64)})
            images.append(out["image"])
            targets.append({"boxes": out["boxes"], "labels": out["labels"]})
        return images, targets


def box_purity(image, boxes, labels):
    """Per box, the fraction of its pixels nearest to its class colour."""
    pal = torch.from_numpy(COLOURS).float() / 255
    nearest = ((image.permute(1, 2, 0)[..., None, :] - pal) ** 2).sum(-1).argmin(-1)
    out = []
    for (x0, y0, x1, y1), cls in zip(boxes.round().int().tolist(), labels.tolist()):
        inside = nearest[y0:y1, x0:x1]
        out.append(float((inside == cls).float().mean()) if inside.numel() else 0.0)
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="a JSON Lines manifest (default: generated)")
    p.add_argument("--root", help="directory the manifest's paths are relative to")
    p.add_argument("--size", type=int, default=96)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: all)")
    args = p.parse_args(argv)

    from turboloader import BoxesField, ManifestDataset
    from turboloader import transforms as T

    tmp = None
    manifest = args.data
    if manifest is None:
        tmp = tempfile.TemporaryDirectory()
        manifest = make_data(tmp.name)
    root = args.root or os.path.dirname(os.path.abspath(manifest))
    train = T.Compose([T.RandomResizedCrop(args.size, scale=(0.4, 1.0)),
                       T.RandomHorizontalFlip(), T.ToImage(),
                       T.ToDtype(torch.float32, scale=True)])
    print("fused image path:", T.plan(train) is not None)
    ds = ManifestDataset(manifest, root=root, transform=train,
                         fields=("path", BoxesField("boxes", format="XYXY"), "labels"))
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True,
                                         num_workers=args.workers, collate_fn=Collate())
    purity, boxes_seen, step = [], 0, 0
    for epoch in range(args.epochs):
        ds.set_epoch(epoch)
        for images, targets in loader:
            for image, target in zip(images, targets):
                boxes, labels = target["boxes"], target["labels"]
                assert image.shape == (3, args.size, args.size)
                assert boxes.canvas_size == (args.size, args.size) and len(boxes) == len(labels)
                assert (boxes >= 0).all() and (boxes <= args.size).all()  # clamped
                purity += box_purity(image, boxes, labels)
                boxes_seen += len(boxes)
            step += 1
            if step % 5 == 1:
                print(f"epoch {epoch} step {step}: {sum(len(t['boxes']) for t in targets)} "
                      f"boxes in {len(images)} images")
            if args.steps and step >= args.steps:
                break
        if args.steps and step >= args.steps:
            break
    print(f"{step} steps, {boxes_seen} boxes; box purity (pixels of the box's class inside "
          f"it): median {float(np.median(purity)):.3f}, min {min(purity):.3f}")
    if tmp is not None:
        del loader
        tmp.cleanup()
    return {"steps": step, "boxes": boxes_seen, "purity": purity}


if __name__ == "__main__":
    main()
