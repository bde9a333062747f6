"""ImageFolder: torchvision's class-per-directory dataset with native decoding."""

from __future__ import annotations

from typing import Any
import functools
import os

import torchvision.datasets

from turboloader.data.map_dataset import MapDataset, gather_file
from turboloader.decode.jpeg import DEFAULT_MAX_PIXELS
# the guarded reader lives with the other byte sources; these names stay importable from here
from turboloader.io.files import MAX_FILE_BYTES, read_file  # noqa: F401

__all__ = ["ImageFolder", "MAX_FILE_BYTES", "read_file"]


class ImageFolder(MapDataset, torchvision.datasets.ImageFolder):
    """``torchvision.datasets.ImageFolder`` with libjpeg-turbo decoding and fused transforms.

    Same constructor, ``classes``, ``class_to_idx``, ``samples``, ``targets`` and
    ``imgs`` as torchvision's (it is a subclass: the directory scan is torchvision's own
    ``find_classes``/``make_dataset``). What differs is how a sample is read: the file's
    bytes are decoded natively; when ``transform`` is a turboloader pipeline with a fused
    plan, JPEGs are decoded and transformed in one call (``plan.from_jpeg``); otherwise
    (other formats, torchvision transforms) ``transform`` gets a PIL RGB image, as with
    torchvision. A user ``loader`` is honoured and then used as is (no native decoding).
    Random transform parameters of index ``i`` in epoch ``e`` come from
    ``sample_rng(seed, e, i)``: call ``set_epoch`` from the main process each epoch.

    ``on_error="skip"``: a sample that fails with a turboloader error (corrupt, truncated
    or undecodable image) is replaced by the next index that reads (wrapping around), with
    the requested index's transform parameters, and the failure is recorded in
    ``stats()``; each reading stream (the main process, a DataLoader worker, or a decode
    thread of ``turboloader.DataLoader(backend="threads")``) may skip ``max_failures`` per
    epoch (an int, or a fraction of ``len(dataset)``), then FailureBudgetExceeded is
    raised. Under "raise" (default) the typed error carries a note naming the file.
    Errors that are not turboloader's (a missing file, a TypeError in a transform, anything
    a user ``loader`` raises) always propagate.

    ``cache``: a per-stream (process, or decode thread of the thread backend) LRU of
    decoded images bounded in bytes (total = cache x workers x local ranks). A map-style DataLoader hands indices to workers round-robin,
    so with a shuffling sampler and several workers a worker gets a different subset each
    epoch and hits its cache for only about 1/num_workers of its samples; with
    ``num_workers=0`` (or a sampler that keeps indices on workers) every repeat hits.

    Args:
        root, transform, target_transform, loader, is_valid_file, allow_empty: as
            torchvision's ``ImageFolder``.
        seed: seed of the per-sample transform parameters (int >= 0).
        cache, cache_short_side: decoded-image cache size (int bytes or ``"4GB"``) and the
            optional pre-downscale of cached images (see :class:`TarDataset`).
        on_error, max_failures: the failure policy (``"raise"`` or ``"skip"``; default
            budget 0.01).
        max_pixels: refuse larger images (decompression-bomb guard).
        stats_interval: samples between statistics snapshots from each worker (at most
            one a second).
        fields: not supported (a ``ValueError``): a class folder has no place for a mask,
            boxes or text; ``ManifestDataset(..., fields=...)`` reads them from a list.

    Example:
        >>> from turboloader import ImageFolder, transforms as T             # doctest: +SKIP
        >>> ds = ImageFolder("imagenet/train", T.Compose([T.RandomResizedCrop(224),
        ...                  T.RandomHorizontalFlip(), T.ToTensor()]), on_error="skip")
        >>> ds.classes[:2], ds[0][0].shape
    """

    def __init__(self, root: Any, transform: Any = None, target_transform: Any = None,
                 loader: Any = None, is_valid_file: Any = None, allow_empty: bool = False, *,
                 seed: int = 0, cache: Any = None, cache_short_side: Any = None,
                 on_error: str = "raise", max_failures: float = 0.01,
                 max_pixels: int | None = DEFAULT_MAX_PIXELS, stats_interval: int = 256,
                 fields: Any = None) -> None:
        if fields is not None:
            raise ValueError(
                "ImageFolder does not take fields=: a class folder holds one image file per "
                "sample and its class, with no place for a mask, boxes or text; list each "
                "sample's files and values in a manifest and use ManifestDataset(..., "
                "fields=...) (see the WebDataset fields guide)")
        self._custom_loader = loader is not None
        super().__init__(root, transform=transform, target_transform=target_transform,
                         loader=loader if loader is not None else torchvision.datasets.folder.default_loader,
                         is_valid_file=is_valid_file, allow_empty=allow_empty)
        self._init_reader(transform, target_transform, seed=seed, cache=cache,
                          cache_short_side=cache_short_side, on_error=on_error,
                          max_failures=max_failures, max_pixels=max_pixels,
                          stats_interval=stats_interval)

    def _gather(self, st, chunk, i, slot, epoch, counters):
        path, target = self.samples[i]
        if self._custom_loader:  # the user's loader, then the transform: the generic path
            chunk.add(functools.partial(self.loader, path), target, i, slot, epoch)
            return
        gather_file(st, chunk, path, target, i, slot, epoch, counters)

    def _where(self, st, i):
        path = self.samples[i][0]
        return (f"ImageFolder: file {path!r} (index {i})", path, os.path.relpath(path, self.root),
                0)

    def stats(self, epoch=None) -> dict:
        """Counters of every process that read this dataset (see ``TarDataset.stats``).

        Workers report every ``stats_interval`` samples, on every skipped sample (so
        ``skipped`` is complete as soon as the batch is delivered) and when they exit;
        sample counters of live persistent workers can lag by up to ``stats_interval``
        samples (or one second of reading, whichever is more). The thread backend's decode threads are listed as ``"rank{r}-thread{w}"``.
        """
        return super().stats(epoch)
