"""Test data generators: tiny 64x48 images and TAR shards written on the spot."""

import functools
import io
import os
import tarfile

import numpy as np
import torch
from PIL import Image

W, H = 64, 48


@functools.lru_cache(maxsize=None)
def jpeg(i, *, mode="RGB", fmt="JPEG"):
    """A distinct small image for id ``i``."""
    yy, xx = np.mgrid[0:H, 0:W]
    r = (xx * 4 + i * 37) % 256
    g = (yy * 5 + i * 11) % 256
    b = ((xx + yy) * 3 + i * 101) % 256
    arr = np.stack([r, g, b], -1).astype(np.uint8)
    img = Image.fromarray(arr)
    if mode != "RGB":
        img = img.convert(mode)
    buf = io.BytesIO()
    img.save(buf, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


def write_tar(path, members):
    """Write ``members`` [(name, bytes)] to a .tar or .tar.gz (by suffix)."""
    mode = "w:gz" if str(path).endswith((".gz", ".tgz")) else "w"
    with tarfile.open(path, mode, format=tarfile.USTAR_FORMAT) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return str(path)


def labelled_members(ids, prefix=""):
    out = []
    for i in ids:
        out.append((f"{prefix}{i:06d}.jpg", jpeg(i)))
        out.append((f"{prefix}{i:06d}.cls", str(i).encode()))
    return out




def size_of(img):
    """A cheap picklable transform: the image size as a tensor."""
    return torch.tensor(img.size)


def labels_of(dataset):
    return [label for _, label in dataset]


def write_shards(root, sizes, *, name="shard", suffix=".tar"):
    """Shards of ``sizes`` samples; sample ids (= labels) run 0..n-1 across them."""
    paths, start = [], 0
    os.makedirs(root, exist_ok=True)
    for k, n in enumerate(sizes):
        paths.append(write_tar(os.path.join(root, f"{name}-{k:04d}{suffix}"),
                               labelled_members(range(start, start + n))))
        start += n
    return paths
