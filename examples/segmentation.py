"""Semantic segmentation: (image, mask) pairs listed in a JSON Lines manifest, augmented
together with turboloader's transforms and torchvision's ``tv_tensors.Mask``.

``ManifestDataset(manifest, transform=pipeline, fields=("path", MaskField("mask")))`` yields
``(image, mask)``: the JPEG is decoded and transformed in one fused native call (only the
crop window is decoded) and the mask file the ``mask`` column names becomes a
``tv_tensors.Mask`` that follows the image's drawn parameters (nearest resampling, so class
ids stay class ids), as torchvision v2 transforms a mask given with its image. A pipeline
that does not fuse (``--rotate`` adds a ``RandomRotation``) runs transform by transform on
the decoded image, and the mask follows it the same way. The parameters of sample ``i`` in
epoch ``e`` come from ``sample_rng(seed, e, i)``: the same augmentation whichever worker
reads it. (``TarDataset(urls, pipeline, fields=("jpg", MaskField("seg.png")))`` does the
same for WebDataset shards, ``ParquetDataset`` for a mask column.)

    python examples/segmentation.py                 # on generated data
    python examples/segmentation.py --data train.jsonl --root images/ --workers 8

A manifest line: ``{"path": "img/0001.jpg", "mask": "masks/0001.png"}`` (mask: a PNG of
class ids). The model is a toy (a few convolutions): the point is the data path; the
script checks that every mask still lines up with its image after augmentation.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PALETTE = np.array([(240, 240, 240), (220, 40, 40), (40, 60, 220), (40, 200, 60)], np.uint8)


def make_data(root, n=48, *, seed=0):
    """``n`` JPEGs whose pixels are the palette colour of their PNG mask's class; returns
    the manifest's path."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(root, "img"), exist_ok=True)
    os.makedirs(os.path.join(root, "masks"), exist_ok=True)
    lines = []
    for i in range(n):
        h, w = int(rng.integers(80, 121)), int(rng.integers(80, 161))
        mask = np.zeros((h, w), np.uint8)
        for cls in (1, 2, 3):
            y0, x0 = int(rng.integers(0, h - 20)), int(rng.integers(0, w - 20))
            mask[y0:y0 + int(rng.integers(15, h // 2)), x0:x0 + int(rng.integers(15, w // 2))] = cls
        Image.fromarray(PALETTE[mask]).save(os.path.join(root, f"img/{i:04d}.jpg"), quality=95)
        Image.fromarray(mask).save(os.path.join(root, f"masks/{i:04d}.png"))
        lines.append(json.dumps({"path": f"img/{i:04d}.jpg", "mask": f"masks/{i:04d}.png"}))
    path = os.path.join(root, "train.jsonl")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def agreement_map(images, masks):
    """Per pixel: is the colour nearest to the palette colour of its mask's class?"""
    pal = torch.from_numpy(PALETTE).float() / 255  # (K, 3)
    dist = ((images.permute(0, 2, 3, 1)[..., None, :] - pal) ** 2).sum(-1)  # (N, H, W, K)
    return dist.argmin(-1) == masks


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="a JSON Lines manifest (default: generated)")
    p.add_argument("--root", help="directory the manifest's paths are relative to")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: all)")
    p.add_argument("--rotate", action="store_true",
                   help="add RandomRotation(10) (the pipeline then does not fuse)")
    args = p.parse_args(argv)

    from turboloader import ManifestDataset, MaskField
    from turboloader import transforms as T

    tmp = None
    manifest = args.data
    if manifest is None:
        tmp = tempfile.TemporaryDirectory()
        manifest = make_data(tmp.name)
    root = args.root or os.path.dirname(os.path.abspath(manifest))
    train = T.Compose([T.RandomResizedCrop(args.size, scale=(0.3, 1.0)),
                       T.RandomHorizontalFlip(), *([T.RandomRotation(10)] if args.rotate else []),
                       T.ToImage(), T.ToDtype(torch.float32, scale=True)])
    print("fused image path:", T.plan(train) is not None)
    ds = ManifestDataset(manifest, root=root, transform=train, fields=("path", MaskField("mask")))
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True,
                                         num_workers=args.workers, drop_last=True)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 4, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses, agree, step = [], [], 0
    for epoch in range(args.epochs):
        ds.set_epoch(epoch)
        for images, masks in loader:
            masks = masks.long()  # class ids, as stored (uint8 in the PNGs)
            assert images.shape[-2:] == masks.shape[-2:] == (args.size, args.size)
            # rotation fills the corners with 0 in both: check the pixels inside the image
            inside = images.sum(1) > 0
            match = agreement_map(images, masks) & inside
            agree.append(float(match.sum() / inside.sum()))
            loss = F.cross_entropy(model(images), masks)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
            if step % 5 == 1:
                print(f"epoch {epoch} step {step}: loss {loss:.3f}, mask/image agreement "
                      f"{agree[-1]:.3f}")
            if args.steps and step >= args.steps:
                break
        if args.steps and step >= args.steps:
            break
    print(f"{step} steps; loss {losses[0]:.3f} -> {losses[-1]:.3f}; "
          f"mask/image agreement min {min(agree):.3f}")
    if tmp is not None:
        del loader
        tmp.cleanup()
    return {"steps": step, "losses": losses, "agreement": agree}


if __name__ == "__main__":
    main()
