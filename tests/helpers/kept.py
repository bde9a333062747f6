"""The kept-batch oracle's pieces (module level, so that spawned workers can unpickle them).

Every sample's label is its index ``i`` (0..N-1) in all three dataset kinds, so a delivered
image can be compared with decoding sample ``i`` alone with the random parameters of
``(seed, epoch, i)``.
"""

import os

import torch
import torch.utils.data
from torch.utils.data import default_collate

from helpers.shards import jpeg, labelled_members, write_tar

N, B, SEED = 48, 6, 11


def transform():
    from turboloader import transforms as T

    return T.Compose([T.RandomResizedCrop(16, scale=(0.3, 1.0)), T.RandomHorizontalFlip(),
                      T.ToTensor()])


def oracle(epochs=(0, 1), n=N):
    """``{(epoch, i): image}``: each sample decoded alone by the fused per-sample call."""
    from turboloader import transforms as T
    from turboloader.transforms._random import sample_rng

    plan = T.plan(transform())
    return {(e, i): plan.from_jpeg(jpeg(i), rng=sample_rng(SEED, e, i))
            for e in epochs for i in range(n)}


def cached_oracle(epochs=(0, 1, 2), n=N):
    """``{(epoch, i): image}`` of samples served from the decoded-sample cache: the full
    decode of sample ``i`` transformed by the per-sample call from the array."""
    from turboloader import transforms as T
    from turboloader.decode import decode_jpeg
    from turboloader.transforms._random import sample_rng

    plan = T.plan(transform())
    return {(e, i): plan.from_array(decode_jpeg(jpeg(i)), rng=sample_rng(SEED, e, i))
            for e in epochs for i in range(n)}


def make_dataset(kind, root, n=N, **kw):
    """The same ``n`` images as a TarDataset (2 shards), an ImageFolder (one class per image,
    so the class index is the image's index), a TBLDataset, a ParquetDataset (3 row groups)
    or a ManifestDataset (a CSV of files); ``kw`` go to the constructor. Each kind imports
    its own dataset module only: an ImageFolder's imports torchvision, seconds of CPU in the
    fresh interpreters that write tar shards here (tests/loader/test_moved_batches.py,
    test_shared_memory.py)."""
    root = str(root)
    if kind == "tar":
        from turboloader.data import TarDataset

        members = labelled_members(range(n))
        half = len(members) // 2
        paths = [write_tar(os.path.join(root, "k-0.tar"), members[:half]),
                 write_tar(os.path.join(root, "k-1.tar"), members[half:])]
        return TarDataset(paths, transform(), seed=SEED, **kw)
    if kind == "folder":
        from turboloader.data import ImageFolder

        for i in range(n):
            d = os.path.join(root, "folder", f"c{i:03d}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "x.jpg"), "wb") as f:
                f.write(jpeg(i))
        return ImageFolder(os.path.join(root, "folder"), transform(), seed=SEED, **kw)
    if kind == "tbl":
        from turboloader.data import TBLDataset
        from turboloader.io.tbl import TBLWriter

        path = os.path.join(root, "k.tbl")
        with TBLWriter(path, overwrite=True) as w:
            for i in range(n):
                w.write(jpeg(i), key=f"{i:06d}", label=i)
        return TBLDataset(path, transform(), seed=SEED, **kw)
    if kind == "parquet":  # 3 row groups
        import pyarrow as pa
        import pyarrow.parquet as pq

        from turboloader.data import ParquetDataset

        path = os.path.join(root, "k.parquet")
        pq.write_table(pa.table({"image": [jpeg(i) for i in range(n)], "label": list(range(n))}),
                       path, row_group_size=max(1, -(-n // 3)))
        return ParquetDataset(path, transform(), seed=SEED, **kw)
    if kind == "manifest":
        from turboloader.data import ManifestDataset

        os.makedirs(os.path.join(root, "files"), exist_ok=True)
        lines = ["path,label"]
        for i in range(n):
            with open(os.path.join(root, "files", f"{i:06d}.jpg"), "wb") as f:
                f.write(jpeg(i))
            lines.append(f"{i:06d}.jpg,{i}")
        with open(os.path.join(root, "files", "list.csv"), "w") as f:
            f.write("\n".join(lines) + "\n")
        return ManifestDataset(os.path.join(root, "files", "list.csv"), transform=transform(),
                               seed=SEED, **kw)
    raise ValueError(kind)


# -- masks and boxes (MaskField / BoxesField) ---------------------------------------------------


def joint_arrays(i):
    """Sample ``i``'s mask (48 x 64, distinct per sample) and ``[[x0, y0, x1, y1]]`` boxes."""
    import numpy as np

    mask = np.zeros((48, 64), np.uint8)
    x0, y0 = (i * 7) % 40, (i * 5) % 30
    mask[y0:y0 + 16, x0:x0 + 20] = 1 + i % 3
    return mask, [[x0, y0, x0 + 20, y0 + 16], [i % 10, 0, 30 + i % 10, 10]]


def joint_fields():
    from turboloader.data import BoxesField, MaskField

    return ("jpg", MaskField("png"), BoxesField("json", key="boxes"), "cls")


def make_joint_dataset(root, n=N, kind="tar", **kw):
    """``(image, mask, boxes, label = i)`` samples as a TarDataset (2 shards), a
    ParquetDataset (3 row groups) or a ManifestDataset (JSON Lines + files)."""
    import io
    import json

    from PIL import Image

    from turboloader.data import BoxesField, MaskField

    root = str(root)
    rows = []
    for i in range(n):
        mask, boxes = joint_arrays(i)
        buf = io.BytesIO()
        Image.fromarray(mask).save(buf, "PNG")
        rows.append((jpeg(i), buf.getvalue(), boxes))
    if kind == "tar":
        from turboloader.data import TarDataset

        members = []
        for i, (jpg, png, boxes) in enumerate(rows):
            members += [(f"{i:06d}.jpg", jpg), (f"{i:06d}.png", png),
                        (f"{i:06d}.json", json.dumps({"boxes": boxes}).encode()),
                        (f"{i:06d}.cls", str(i).encode())]
        half = len(members) // 2 // 4 * 4
        paths = [write_tar(os.path.join(root, "j-0.tar"), members[:half]),
                 write_tar(os.path.join(root, "j-1.tar"), members[half:])]
        return TarDataset(paths, transform(), seed=SEED, fields=joint_fields(), **kw)
    if kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        from turboloader.data import ParquetDataset

        path = os.path.join(root, "j.parquet")
        pq.write_table(pa.table({"image": [r[0] for r in rows], "mask": [r[1] for r in rows],
                                 "boxes": [r[2] for r in rows], "label": list(range(n))}),
                       path, row_group_size=max(1, -(-n // 3)))
        return ParquetDataset(path, transform(), seed=SEED, fields=(
            "image", MaskField("mask"), BoxesField("boxes"), "label"), **kw)
    if kind == "manifest":
        from turboloader.data import ManifestDataset

        os.makedirs(os.path.join(root, "jf"), exist_ok=True)
        lines = []
        for i, (jpg, png, boxes) in enumerate(rows):
            for name, data in ((f"{i:06d}.jpg", jpg), (f"{i:06d}.png", png)):
                with open(os.path.join(root, "jf", name), "wb") as f:
                    f.write(data)
            lines.append(json.dumps({"path": f"{i:06d}.jpg", "mask": f"{i:06d}.png",
                                     "boxes": boxes, "label": i}))
        with open(os.path.join(root, "jf", "list.jsonl"), "w") as f:
            f.write("\n".join(lines) + "\n")
        return ManifestDataset(os.path.join(root, "jf", "list.jsonl"), transform=transform(),
                               seed=SEED, fields=("path", MaskField("mask"), BoxesField("boxes"),
                                                  "label"), **kw)
    raise ValueError(kind)


def joint_oracle(epochs=(0, 1), n=N):
    """``{(epoch, i): (mask, boxes)}``: each sample's annotations through ``transform()``
    alone, drawn from ``sample_rng(SEED, epoch, i)`` (the image's draws)."""
    from torchvision import tv_tensors

    from turboloader.transforms._random import sample_rng, using_rng

    out = {}
    for e in epochs:
        for i in range(n):
            mask, boxes = joint_arrays(i)
            with using_rng(sample_rng(SEED, e, i)):
                out[(e, i)] = transform()(
                    tv_tensors.Mask(torch.from_numpy(mask)),
                    tv_tensors.BoundingBoxes(torch.tensor(boxes, dtype=torch.float32),
                                             format="XYXY", canvas_size=(48, 64)))
    return out


# -- collates: what users return from collate_fn -----------------------------------------------


def collate_list(batch):
    return batch


def collate_view(batch):
    images, labels = default_collate(batch)
    return images.permute(0, 2, 3, 1), labels


def collate_tv(batch):
    from torchvision import tv_tensors

    images, labels = default_collate(batch)
    return tv_tensors.Image(images), labels


COLLATES = {"default": None, "list": collate_list, "view": collate_view, "tv": collate_tv}


def normalise(batch, collate, wrapper=None):
    """``(images as (n, C, H, W), labels as ints)`` of a delivered batch."""
    if collate == "list":
        images = [img for img, _ in batch]
        labels = [int(y) for _, y in batch]
        if wrapper == "view":
            images = [img.permute(2, 0, 1) for img in images]
        return images, labels
    images, labels = batch[0], batch[1]
    images = images.as_subclass(torch.Tensor)
    if collate == "view" or wrapper == "view":
        images = images.permute(0, 3, 1, 2)
    return list(images), [int(y) for y in labels]


# -- wrappers: what users put around a dataset -------------------------------------------------


class ViewMap(torch.utils.data.Dataset):
    """A map-style wrapper returning a view of the sample's image (HWC)."""

    def __init__(self, ds):
        self.ds = ds

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        x, y = self.ds[i]
        return x.permute(1, 2, 0), y


class ViewIter(torch.utils.data.IterableDataset):
    """An iterable wrapper returning a view of each sample's image (HWC)."""

    def __init__(self, ds):
        self.ds = ds

    def __iter__(self):
        for x, y in self.ds:
            yield x.permute(1, 2, 0), y


class ViewBatch(torch.utils.data.Dataset):
    """``ds[list]`` (a whole batch) returned as an NHWC view."""

    def __init__(self, ds):
        self.ds = ds

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, indices):
        x, y = self.ds[indices]
        return x.permute(0, 2, 3, 1), y


def hold_in_child(batches, go, result):
    """A forked child: wait until the parent has dropped the batches and run on, then
    report whether the batches it inherited are still what was delivered."""
    go.wait(60)
    want = oracle((0,))
    bad = sum(not torch.equal(img, want[(0, y)]) for imgs, ys in batches
              for img, y in zip(imgs, ys.tolist()))
    result.put(bad)
