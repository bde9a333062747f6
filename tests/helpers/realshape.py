"""What the real-shape tier (``tests/realshape``) shares: its data (tiny JPEGs in shards
with the shapes users have; the label of every sample is its global id, so exactly-once is
a check on labels), the transform, the loaders it drives, and the exactly-once check.

TAR headers are written here directly (USTAR, as ``tarfile`` writes them, checked against
``tarfile`` in ``test_tar_shapes.py``): ``tarfile`` spends most of the time of writing
80,000 tiny members on building headers.
"""

import collections
import io
import os

import numpy as np
import torch
from PIL import Image

import turboloader
from turboloader import transforms as T

#: The side of the tier's square images.
SIDE = 8


def tiny_jpeg(value, *, height=SIDE, width=SIDE):
    """A ``height x width`` JPEG of one grey ``value``."""
    buf = io.BytesIO()
    Image.fromarray(np.full((height, width, 3), value, np.uint8)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


#: 64 distinct square images; sample ``i`` uses ``JPEGS[i % 64]``.
JPEGS = [tiny_jpeg(v * 4) for v in range(64)]


def _header(name, size):
    h = bytearray(512)
    raw = name.encode()
    h[0:len(raw)] = raw
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"00000000000\0"
    h[148:156] = b" " * 8
    h[156:157] = b"0"
    h[257:265] = b"ustar\x0000"
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def write_tar(path, members):
    """A USTAR archive of ``members`` ``[(name, bytes)]`` with its end-of-archive blocks."""
    parts = []
    for name, data in members:
        parts.append(_header(name, len(data)))
        parts.append(data)
        pad = -len(data) % 512
        if pad:
            parts.append(b"\0" * pad)
    parts.append(b"\0" * 1024)
    with open(path, "wb") as f:
        f.write(b"".join(parts))
    return str(path)


def write_shards(root, sizes, *, image=None, name="shard"):
    """TAR shards of ``sizes`` samples: sample ``i`` (numbered across the shards) is
    ``<i>.jpg`` (``image(i)``, default ``JPEGS[i % 64]``) and ``<i>.cls`` holding ``i``."""
    os.makedirs(root, exist_ok=True)
    paths, start = [], 0
    for k, n in enumerate(sizes):
        members = []
        for i in range(start, start + n):
            members.append((f"{i:07d}.jpg", JPEGS[i % 64] if image is None else image(i)))
            members.append((f"{i:07d}.cls", str(i).encode()))
        paths.append(write_tar(os.path.join(root, f"{name}-{k:04d}.tar"), members))
        start += n
    return paths


def imagenet_sizes(num_shards, total):
    """``total`` samples over ``num_shards`` shards as ImageNet's are cut (sizes differ by
    at most one)."""
    return [(k + 1) * total // num_shards - k * total // num_shards for k in range(num_shards)]


def is_wide(i):
    """Whether sample ``i`` of the rare-ratio shards is one of the wide (8 x 16) ones."""
    return i % 97 == 13


WIDE = tiny_jpeg(200, height=SIDE, width=2 * SIDE)

TIMEOUT = 120  # seconds a worker may take for one batch before torch gives up


def transform():
    """Fused, with one output shape: every loader takes the batch path."""
    return T.Compose([T.CenterCrop(8), T.PILToTensor()])


def torch_loader(ds, num_workers, batch_size):
    return torch.utils.data.DataLoader(ds, batch_size=batch_size, num_workers=num_workers,
                                       timeout=TIMEOUT if num_workers else 0)


def passes(ds, make_loader, epochs=2):
    """Labels of each of ``epochs`` passes (``set_epoch`` before each, as a training loop
    does), one flat list per pass."""
    out = []
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        labels = []
        for batch in make_loader():
            labels.extend(batch[1].tolist())
        out.append(labels)
    return out


def loader_passes(loader, epochs=2):
    """Labels of ``epochs`` passes of a ``turboloader.DataLoader`` (its automatic epochs:
    0, 1, ...)."""
    out = []
    for _ in range(epochs):
        labels = []
        for batch in loader:
            labels.extend(batch[1].tolist())
        out.append(labels)
    return out


def tl_loader(ds, backend, num_workers, batch_size):
    return turboloader.DataLoader(ds, batch_size=batch_size, num_workers=num_workers,
                                  backend=backend,
                                  **({"timeout": TIMEOUT} if backend == "processes" and
                                     num_workers else {}))


def assert_once(labels, n, what=""):
    """Every id in ``range(n)`` exactly once (the sharding contract, one rank, no pads)."""
    counts = collections.Counter(labels)
    dup = sorted(k for k, c in counts.items() if c > 1)
    missing = sorted(set(range(n)) - counts.keys())
    extra = sorted(k for k in counts if not 0 <= k < n)
    assert not (dup or missing or extra), (
        f"{what}: {len(labels)} labels for {n} samples; {len(dup)} repeated {dup[:10]}, "
        f"{len(missing)} never delivered {missing[:10]}, unknown {extra[:10]}")


def assert_epochs(runs, n, what=""):
    """Each pass delivers every sample once, and the passes are different epochs (orders)."""
    for e, labels in enumerate(runs):
        assert_once(labels, n, f"{what}, epoch {e}")
    assert runs[0] != runs[1], f"{what}: both passes in the same order"
