"""The loader underneath every adapter, and seed 001's path-first form:
``turboloader.DataLoader("train.tar", ...)`` (:func:`seed001_loader`, batches of sample dicts)."""

from __future__ import annotations

from typing import Any
import math
import os

import numpy as np
import torch
import torch.utils.data

from turboloader import loader as _core

__all__ = [
    "DataLoader",
    "SampleBatchLoader",
    "seed001_loader",
]


def _T():
    from turboloader import transforms

    return transforms


# ---------------------------------------------------------------------------------------
# The loader underneath every adapter
# ---------------------------------------------------------------------------------------

def _as_list(samples):
    """collate_fn that keeps a batch as the list of samples (picklable: module level)."""
    return list(samples)


def _is_path(x) -> bool:
    if isinstance(x, (str, bytes, os.PathLike)):
        return True
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(
        isinstance(p, (str, os.PathLike)) for p in x)


class DataLoader(_core.DataLoader):
    """``turboloader.DataLoader``: the core loader, which also takes seed 001's path-first form.

    ``DataLoader(dataset, ...)`` with a ``torch.utils.data.Dataset`` is exactly
    :class:`turboloader.loader.DataLoader` (this class adds nothing else; its arguments,
    backends and epochs are documented there), and the result is an instance of this class.

    ``DataLoader(path, batch_size=32, num_workers=4, shuffle=False, ...)`` with a path (a
    ``str``, ``os.PathLike`` or a list of them: TAR shards) is seed 001's API: it returns
    :func:`seed001_loader`'s :class:`SampleBatchLoader`, a different class, whose batches are
    lists of ``{"image": HWC uint8, "label": int}`` dicts.

    Example:
        >>> loader = turboloader.DataLoader(dataset, batch_size=256, num_workers=8)  # doctest: +SKIP
        >>> batches = turboloader.DataLoader("train.tar", batch_size=32)             # doctest: +SKIP
        >>> type(batches).__name__                                                   # doctest: +SKIP
        'SampleBatchLoader'
    """

    def __new__(cls, dataset=None, *args, **kwargs):
        if _is_path(dataset):
            return seed001_loader(dataset, *args, **kwargs)
        return super().__new__(cls)


def _core_loader(dataset, *, batch_size, num_workers, collate_fn=None, shuffle=False,
                 sampler=None, pin_memory=False, drop_last=False, backend=None):
    """turboloader's DataLoader over ``dataset`` (the thread backend unless ``backend``)."""
    kwargs = {"batch_size": batch_size, "shuffle": shuffle, "num_workers": int(num_workers),
              "pin_memory": bool(pin_memory) and torch.cuda.is_available(),
              "drop_last": drop_last}
    if collate_fn is not None:
        kwargs["collate_fn"] = collate_fn
    if sampler is not None:
        kwargs["sampler"] = sampler
        kwargs["shuffle"] = False
    if isinstance(dataset, torch.utils.data.IterableDataset):
        kwargs["shuffle"] = None  # the dataset shuffles itself
    if backend is not None:
        kwargs["backend"] = backend
    return DataLoader(dataset, **kwargs)


def _set_epoch(loader, dataset, epoch):
    """Tell the loader (if it can hear it) or else the dataset and sampler the epoch."""
    if callable(getattr(loader, "set_epoch", None)):
        loader.set_epoch(epoch)
        return
    if callable(getattr(dataset, "set_epoch", None)):
        dataset.set_epoch(epoch)
    sampler = getattr(loader, "sampler", None)
    if callable(getattr(sampler, "set_epoch", None)):
        sampler.set_epoch(epoch)


def _decoded_chw():
    """The transform that makes the dataset return each image as decoded, a CHW uint8
    tensor: a fusable pipeline, so JPEGs are decoded natively straight into it."""
    T = _T()
    return T.Compose([T.ToImage()])


def _tar_dataset(paths, transform, *, shuffle, distributed, seed=0):
    from turboloader.data import TarDataset

    # The seeds build TARs of bare images (``tar -cf train.tar *.jpg``): label those -1.
    kw = dict(shuffle=shuffle, seed=seed, missing_label=-1)
    if distributed:  # rank and world size from torch.distributed (read at iteration time)
        return TarDataset(paths, transform, **kw)
    return TarDataset(paths, transform, rank=0, world_size=1, **kw)


class SampleBatchLoader:
    """Batches of ``batch_size`` samples, each turned into a seed-API item, with one epoch
    per iteration (``set_epoch`` is called for the user: the seed APIs have none).

    Batching happens here, in the main process, over what the core loader yields, so
    ``drop_last`` drops at most one short batch per epoch and ``len`` is exact, whatever
    the number of workers (an iterable dataset batched inside several workers would leave
    one short batch per worker).
    """

    def __init__(self, dataset: Any, loader: Any, batch_size: Any, *, drop_last: bool = False,
                 make_item: Any = None) -> None:
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.dataset = dataset
        self.loader = loader
        self.batch_size = int(batch_size)
        self.drop_last = bool(drop_last)
        self.make_item = make_item
        self.epoch = 0

    def __len__(self):
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def set_epoch(self, epoch):
        """Set the epoch of the next iteration (otherwise each iteration is the next epoch)."""
        self.epoch = int(epoch)

    def samples(self):
        """The samples of one epoch, in order (no batching); advances the epoch."""
        _set_epoch(self.loader, self.dataset, self.epoch)
        self.epoch += 1
        make = self.make_item
        for chunk in self.loader:
            for sample in chunk:
                yield make(sample) if make is not None else sample

    def __iter__(self):
        batch = []
        for item in self.samples():
            batch.append(item)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch


# ---------------------------------------------------------------------------------------
# Sample-dict loader: turboloader.DataLoader("train.tar", ...)
# ---------------------------------------------------------------------------------------

def _sample_dict(sample):
    image, label = sample
    return {"image": np.ascontiguousarray(image.permute(1, 2, 0).numpy()), "label": label}


def seed001_loader(path: Any, batch_size: int = 32, num_workers: int = 4, shuffle: bool = False,
                   enable_distributed: bool = False, drop_last: bool = False, *, seed: int = 0,
                   backend: Any = None, pin_memory: bool = False):
    """Batches of sample dicts from TAR shards: what ``turboloader.DataLoader(path, ...)``
    returns when its first argument is a path (a ``str`` or ``os.PathLike``, or a list of
    them) rather than a Dataset.

    Each batch is a ``list`` of ``{"image": (H, W, 3) uint8 ndarray, "label": int}`` at the
    images' own sizes (apply ``turboloader.Compose(...).apply`` per sample, as the seed
    examples do). Each ``for batch in loader`` is one epoch; with ``shuffle=True`` every
    epoch has a new order (epoch counter kept here, ``set_epoch(e)`` to override).

    Args:
        path: a TAR path, glob, brace pattern (``"train-{0000..0099}.tar"``) or list of them
            (WebDataset layout: ``key.jpg`` + ``key.cls``/``key.json`` per sample).
        batch_size: samples per batch.
        num_workers: loader workers (0: read in the calling thread).
        shuffle: shuffle shards and samples per epoch.
        enable_distributed: split the samples over ``torch.distributed`` ranks (the group
            must be initialised before iterating); every rank gets the same number of
            samples (the epoch is padded with repeats, like ``DistributedSampler``).
            Without it every process reads every sample.
        drop_last: drop the last short batch.
        seed: the shuffle's seed.
        backend, pin_memory: passed to the core loader.

    Returns:
        A :class:`SampleBatchLoader` (iterable, with ``len`` = batches per epoch).

    Raises:
        FileNotFoundError: a shard does not exist. TarFormatError: a shard is malformed.
        SampleError: a sample has no image or no label member (when iterated).

    Example:
        >>> loader = turboloader.DataLoader("train.tar", batch_size=32, shuffle=True)  # doctest: +SKIP
        >>> for batch in loader:
        ...     labels = torch.tensor([s["label"] for s in batch])
    """
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    elif isinstance(path, (list, tuple)):
        path = [os.fspath(p) for p in path]
    dataset = _tar_dataset(path, _decoded_chw(), shuffle=shuffle,
                           distributed=enable_distributed, seed=seed)
    loader = _core_loader(dataset, batch_size=batch_size, num_workers=num_workers,
                          collate_fn=_as_list, pin_memory=pin_memory, backend=backend)
    return SampleBatchLoader(dataset, loader, batch_size, drop_last=drop_last,
                             make_item=_sample_dict)
