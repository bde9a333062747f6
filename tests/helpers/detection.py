"""The calls torchvision's detection reference makes to build its training loader
(``references/detection/train.py``, ``group_by_aspect_ratio.py``), and a tiny detection
manifest to make them on.

``GroupedBatchSampler``, ``_quantize`` and ``create_aspect_ratio_groups`` are vendored from
torchvision's ``references/detection/group_by_aspect_ratio.py`` (BSD 3-Clause License,
Copyright (c) Soumith Chintala 2016, all rights reserved), shortened: the references are not
an installable package. The logic of the batches is theirs, line for line.
"""

import bisect
import copy
import json
import os
from collections import defaultdict

import numpy as np
import torch
from torch.utils.data.sampler import BatchSampler, Sampler


class GroupedBatchSampler(BatchSampler):
    """torchvision's: batches of ``batch_size`` indices of one aspect-ratio group each, in
    an order close to ``sampler``'s; the groups' leftovers are topped up at the end."""

    def __init__(self, sampler, group_ids, batch_size):
        if not isinstance(sampler, Sampler):
            raise ValueError(f"sampler should be an instance of torch.utils.data.Sampler, "
                             f"but got sampler={sampler}")
        self.sampler = sampler
        self.group_ids = group_ids
        self.batch_size = batch_size

    def __iter__(self):
        buffer_per_group = defaultdict(list)
        samples_per_group = defaultdict(list)

        num_batches = 0
        for idx in self.sampler:
            group_id = self.group_ids[idx]
            buffer_per_group[group_id].append(idx)
            samples_per_group[group_id].append(idx)
            if len(buffer_per_group[group_id]) == self.batch_size:
                yield buffer_per_group[group_id]
                num_batches += 1
                del buffer_per_group[group_id]
            assert len(buffer_per_group[group_id]) < self.batch_size

        expected_num_batches = len(self)
        num_remaining = expected_num_batches - num_batches
        if num_remaining > 0:
            for group_id, _ in sorted(buffer_per_group.items(), key=lambda x: len(x[1]),
                                      reverse=True):
                remaining = self.batch_size - len(buffer_per_group[group_id])
                samples_from_group_id = _repeat_to_at_least(samples_per_group[group_id],
                                                            remaining)
                buffer_per_group[group_id].extend(samples_from_group_id[:remaining])
                assert len(buffer_per_group[group_id]) == self.batch_size
                yield buffer_per_group[group_id]
                num_remaining -= 1
                if num_remaining == 0:
                    break
        assert num_remaining == 0

    def __len__(self):
        return len(self.sampler) // self.batch_size


def _repeat_to_at_least(iterable, n):
    from itertools import chain, repeat
    import math

    repeat_times = math.ceil(n / len(iterable))
    return list(chain.from_iterable(repeat(iterable, repeat_times)))


def _quantize(x, bins):
    bins = sorted(copy.deepcopy(bins))
    return [bisect.bisect_right(bins, y) for y in x]


def compute_aspect_ratios(dataset):
    """torchvision's fast path (``_compute_aspect_ratios_custom_dataset``): a dataset with
    ``get_height_and_width`` is asked, no image is read."""
    ratios = []
    for i in range(len(dataset)):
        height, width = dataset.get_height_and_width(i)
        ratios.append(float(height) / float(width))
    return ratios


def create_aspect_ratio_groups(aspect_ratios, k=0):
    """torchvision's, given the aspect ratios (height / width) it computes from the dataset."""
    bins = (2 ** np.linspace(-1, 1, 2 * k + 1)).tolist() if k > 0 else [1.0]
    return _quantize(aspect_ratios, bins)


def collate_fn(batch):
    """The reference's ``utils.collate_fn``."""
    return tuple(zip(*batch))


# -- data ------------------------------------------------------------------------------


def make_detection_manifest(root, n=12, *, seed=0):
    """``n`` JPEGs of several sizes and aspect ratios, each with 1-3 boxes; the manifest's
    ``id`` column is the row number (a sample's identity in a batch). Returns the path of
    ``train.jsonl``."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(root, "img"), exist_ok=True)
    lines = []
    for i in range(n):
        h, w = ((48, 80) if i % 3 else (80, 48)) if i % 2 else (64, 64 + 8 * (i % 4))
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        boxes = []
        for _ in range(1 + i % 3):
            x0, y0 = int(rng.integers(0, w - 12)), int(rng.integers(0, h - 12))
            boxes.append([x0, y0, x0 + int(rng.integers(6, 12)), y0 + int(rng.integers(6, 12))])
        Image.fromarray(img).save(os.path.join(root, f"img/{i:04d}.jpg"), quality=90)
        lines.append(json.dumps({"path": f"img/{i:04d}.jpg", "boxes": boxes,
                                 "labels": [1 + (i + k) % 3 for k in range(len(boxes))],
                                 "id": i, "height": h, "width": w}))
    path = os.path.join(root, "train.jsonl")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def aspect_ratios(manifest):
    with open(manifest) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r["height"] / r["width"] for r in rows]


def seeded_sampler(dataset, seed):
    return torch.utils.data.RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))
