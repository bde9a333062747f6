"""CLIP-style (image, caption) training over Parquet, with ParquetDataset.

Image-text data is usually shared as Parquet (an image column and a text column, the layout
of Hugging Face datasets). ``ParquetDataset(..., label_column="caption")`` reads only those
two columns, a row group at a time, decodes and augments each image in one native call and
yields ``(image, caption)``; the DataLoader collates captions into a list of strings.

    python examples/clip_captions.py                        # on generated data
    python examples/clip_captions.py --data 'train-*.parquet' --image-column jpg \\
        --caption-column txt --workers 8 --size 224

The model is a toy (a small CNN and a bag of hashed words, trained with CLIP's symmetric
contrastive loss): the point is the data path.
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

COLOURS = {"red": (220, 40, 40), "green": (40, 200, 60), "blue": (40, 60, 220),
           "yellow": (230, 220, 40)}
SHAPES = ("square", "stripe", "dot")


def make_data(root, n=96, *, row_group_size=16, seed=0):
    """A Parquet file of ``n`` JPEGs of a coloured shape and its caption; returns its path."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    rng = np.random.default_rng(seed)
    images, captions = [], []
    for _ in range(n):
        colour = list(COLOURS)[rng.integers(len(COLOURS))]
        shape = SHAPES[rng.integers(len(SHAPES))]
        h, w = int(rng.integers(64, 97)), int(rng.integers(64, 129))
        img = np.full((h, w, 3), 245, np.uint8)
        if shape == "square":
            img[h // 4:3 * h // 4, w // 4:3 * w // 4] = COLOURS[colour]
        elif shape == "stripe":
            img[:, w // 3:2 * w // 3] = COLOURS[colour]
        else:
            yy, xx = np.mgrid[:h, :w]
            img[(yy - h / 2) ** 2 + (xx - w / 2) ** 2 < (min(h, w) / 4) ** 2] = COLOURS[colour]
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, "JPEG", quality=90)
        images.append(buf.getvalue())
        captions.append(f"a {colour} {shape}")
    path = os.path.join(root, "captions.parquet")
    pq.write_table(pa.table({"image": images, "caption": captions}), path,
                   row_group_size=row_group_size)
    return path


class ImageEncoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                                 nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, dim))

    def forward(self, x):
        return self.net(x)


class TextEncoder(nn.Module):
    """A bag of hashed words."""

    def __init__(self, dim, buckets=1024):
        super().__init__()
        self.buckets = buckets
        self.embed = nn.EmbeddingBag(buckets, dim)

    def forward(self, captions):
        ids, offsets = [], []
        for text in captions:
            offsets.append(len(ids))
            ids.extend(zlib.crc32(w.encode()) % self.buckets for w in text.lower().split())
        return self.embed(torch.tensor(ids), torch.tensor(offsets))


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="Parquet file(s) or glob (default: generated)")
    p.add_argument("--image-column", default="image")
    p.add_argument("--caption-column", default="caption")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: all)")
    args = p.parse_args(argv)

    from turboloader import ParquetDataset, transforms as T

    tmp = None
    data = args.data
    if data is None:
        tmp = tempfile.TemporaryDirectory()
        data = make_data(tmp.name)
    ds = ParquetDataset(data, T.Compose([
        T.RandomResizedCrop(args.size, scale=(0.5, 1.0)), T.RandomHorizontalFlip(), T.ToTensor(),
        T.Normalize((0.481, 0.458, 0.408), (0.269, 0.261, 0.276))]),  # CLIP's statistics
        image_column=args.image_column, label_column=args.caption_column, seed=0)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size,
                                         num_workers=args.workers, drop_last=True,
                                         persistent_workers=args.workers > 0)
    torch.manual_seed(0)
    image_enc, text_enc = ImageEncoder(64), TextEncoder(64)
    scale = nn.Parameter(torch.tensor(2.0))
    opt = torch.optim.Adam([*image_enc.parameters(), *text_enc.parameters(), scale], lr=3e-3)
    losses, step = [], 0
    for epoch in range(args.epochs):
        ds.set_epoch(epoch)
        for images, captions in loader:
            assert isinstance(captions, (list, tuple)) and isinstance(captions[0], str)
            zi = F.normalize(image_enc(images), dim=-1)
            zt = F.normalize(text_enc(captions), dim=-1)
            logits = scale.exp() * zi @ zt.T
            target = torch.arange(len(captions))
            loss = (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
            if step % 5 == 1:
                print(f"epoch {epoch} step {step}: loss {loss:.3f}  e.g. {captions[0]!r}")
            if args.steps and step >= args.steps:
                break
        if args.steps and step >= args.steps:
            break
    print(f"{step} steps, {ds.stats()['samples']} samples read; first loss {losses[0]:.3f}, "
          f"last {losses[-1]:.3f}")
    if tmp is not None:
        del loader
        tmp.cleanup()
    return {"steps": step, "losses": losses, "image_shape": tuple(images.shape),
            "captions": list(captions)}


if __name__ == "__main__":
    main()
