"""The cached map-style dataset: ``HighPerformanceDataset`` / ``create_dataloader`` (and
``PrefetchLoader``, from :mod:`turboloader.prefetch`)."""

from __future__ import annotations

from typing import Any
import os

import numpy as np
import torch
import torch.utils.data

from turboloader.transforms.presets import imagenet_train_transform, imagenet_val_transform

from turboloader.compat.seeds._loader import _core_loader

__all__ = [
    "HighPerformanceDataset",
    "create_dataloader",
]


# ---------------------------------------------------------------------------------------
# HighPerformanceDataset / create_dataloader / PrefetchLoader
# ---------------------------------------------------------------------------------------

def _count_lru(capacity):
    """The decode cache bounded in images rather than bytes (the seed's ``cache_size``):
    turboloader's thread-safe LRU with every entry counted as one unit."""
    from turboloader.data import ByteLRU

    class CountLRU(ByteLRU):
        def reserve(self, nbytes):   # every image fits: it counts as one
            return np.empty(nbytes, np.uint8)

        def put(self, key, value, nbytes):
            return super().put(key, value, 1)

    return CountLRU(int(capacity))


class _Preloaded(dict):
    """The decode cache of a preloaded dataset: every image, never evicted (picklable, so
    worker processes receive the decoded images)."""

    hits = misses = 0

    def get(self, key):
        return super().get(key)

    def peek(self, key, default=None):
        return super().get(key, default)

    def reserve(self, nbytes):
        return np.empty(nbytes, np.uint8)

    def put(self, key, value, nbytes):
        self[key] = value
        return 0

    def stats(self):
        return {"items": len(self), "preloaded": True}


class HighPerformanceDataset(torch.utils.data.Dataset):
    """Map-style dataset of image files with an LRU cache of decoded images and optional
    preloading: ``dataset[i]`` is ``(transform(image), labels[i])``.

    Images are decoded natively (JPEG by libjpeg-turbo, other formats by Pillow, all RGB).
    When ``transform`` is a :mod:`turboloader.transforms` pipeline with a fused plan, an
    uncached JPEG is decoded and transformed in one native call, a cached one transformed
    from its decoded array; any other callable (e.g. a torchvision ``Compose``) gets a PIL
    RGB image, as with a torchvision dataset. ``transform=None`` returns the decoded
    ``PIL.Image``. Random parameters come from torch's RNG (each access draws its sample's
    seed from it, one number), so DataLoader workers differ and every epoch draws new
    augmentations; an image is read by the datasets' sample step on a chunk of one
    (:func:`turboloader.data.step.one`), so it gets exactly a batch row's pixels.

    ``cache_size`` counts images (decoded, before the transform: augmentations stay random)
    per reading process: each worker process of a DataLoader starts with an empty cache of
    its own; a threads backend shares one (the cache is thread-safe). ``preload=True``
    decodes every image in ``__init__`` and keeps them all (``cache_size`` is then unused);
    worker processes receive a copy.

    Args:
        data_paths: image file paths.
        labels: one label per path.
        transform: applied to each image (see above).
        cache_size: images kept in the LRU (0: no cache).
        preload: decode everything up front.

    Raises:
        ValueError: ``data_paths`` and ``labels`` differ in length.
        FileNotFoundError: a path does not exist (at preload or access).
        DecodeError: an image cannot be decoded (the note names the file).

    Example:
        >>> ds = HighPerformanceDataset(paths, labels, imagenet_val_transform(224),  # doctest: +SKIP
        ...                             cache_size=1000)
        >>> image, label = ds[0]
    """

    def __init__(self, data_paths: Any, labels: Any, transform: Any = None, cache_size: int = 1000,
                 preload: bool = False) -> None:
        self.data_paths = [os.fspath(p) for p in data_paths]
        self.labels = list(labels)
        if len(self.data_paths) != len(self.labels):
            raise ValueError(f"{len(self.data_paths)} data_paths but {len(self.labels)} labels")
        if int(cache_size) < 0:
            raise ValueError(f"cache_size must be >= 0, got {cache_size}")
        self.transform = transform
        self.cache_size = int(cache_size)
        self.preload = bool(preload)
        self._decoder = self._make_decoder(_Preloaded() if self.preload else None)
        if self.preload:
            for i in range(len(self.data_paths)):
                self._load(i)

    def _make_decoder(self, cache):
        from turboloader.data.step import Decoder

        decoder = Decoder(self.transform)
        if cache is None and self.cache_size:
            cache = _count_lru(self.cache_size)
        decoder.cache = cache
        return decoder

    def __len__(self):
        return len(self.data_paths)

    def _load(self, i):
        from turboloader.errors import TurboLoaderError

        path = self.data_paths[i]
        cache = self._decoder.cache
        data = None
        if cache is None or i not in cache:
            with open(path, "rb") as f:
                data = f.read()
        # torch's RNG draws the sample's seed: workers differ, every access draws anew
        seed = int(torch.randint(0, 1 << 62, ()))
        try:
            return self._decoder(data, key=i, seed=seed, slot=i)
        except TurboLoaderError as exc:
            exc.add_note(f"HighPerformanceDataset: file {path!r} (index {i})")
            raise

    def __getitem__(self, index):
        n = len(self.data_paths)
        if not -n <= index < n:
            raise IndexError(f"index {index} out of range for {n} samples")
        index %= n
        return self._load(index), self.labels[index]

    def cache_stats(self) -> dict:
        """This process's cache counters (hits, misses, evictions, items), or {} without one."""
        cache = self._decoder.cache
        return cache.stats() if cache is not None else {}

    def __getstate__(self):
        state = self.__dict__.copy()
        decoder = state.pop("_decoder")
        state["_preloaded"] = decoder.cache if self.preload else None
        return state

    def __setstate__(self, state):
        preloaded = state.pop("_preloaded")
        self.__dict__.update(state)
        self._decoder = self._make_decoder(preloaded)


def create_dataloader(data_paths: Any, labels: Any, batch_size: int = 32, num_workers: int = 4,
                      img_size: int = 224, cache_size: int = 1000, preload: bool = False,
                      augment: bool = True, pin_memory: bool = True, prefetch_device: Any = None):
    """A shuffling DataLoader of ``(images, labels)`` batches over image files.

    The dataset is a :class:`HighPerformanceDataset` with the standard ImageNet pipeline
    at ``img_size`` (``augment=True``: :func:`imagenet_train_transform`, random resized
    crop + flip; ``augment=False``: :func:`imagenet_val_transform`, resize + centre crop;
    both end in ToTensor + ImageNet Normalize): batches are float32
    ``(batch, 3, img_size, img_size)`` and int64 labels. Samples are shuffled every
    epoch, in both modes.

    Args:
        data_paths, labels: image files and their labels.
        batch_size: samples per batch.
        num_workers: loader workers.
        img_size: output side in pixels.
        cache_size: decoded images cached per reading process (0: none).
        preload: decode every image up front.
        augment: training (True) or evaluation (False) transforms.
        pin_memory: pin batches (only when CUDA is available).
        prefetch_device: wrap the loader in ``PrefetchLoader(loader, device)`` so batches
            arrive on that device (None: no wrapper).

    Returns:
        The DataLoader (``turboloader.DataLoader``, or torch's if that is absent), or a
        ``PrefetchLoader`` over it.

    Example:
        >>> loader = create_dataloader(paths, labels, batch_size=64, num_workers=4,  # doctest: +SKIP
        ...                            prefetch_device=torch.device("cuda"))
        >>> for images, labels in loader: ...
    """
    transform = imagenet_train_transform(img_size) if augment else imagenet_val_transform(img_size)
    dataset = HighPerformanceDataset(data_paths, labels, transform, cache_size=cache_size,
                                     preload=preload)
    loader = _core_loader(dataset, batch_size=batch_size, num_workers=num_workers, shuffle=True,
                          pin_memory=pin_memory)
    if prefetch_device is not None:
        from turboloader.prefetch import PrefetchLoader

        loader = PrefetchLoader(loader, prefetch_device)
    return loader
