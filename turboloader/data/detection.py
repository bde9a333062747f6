"""``(image, target)`` samples for torchvision's detection references: a dataset of
``fields=`` samples (image, boxes, labels, ...) seen as the ``(image, target dict)`` pairs
their engine (``train_one_epoch``, ``evaluate``) and models take.

Example:
    >>> ds = DetectionTargets(ManifestDataset("train.jsonl", transform=pipeline,  # doctest: +SKIP
    ...     fields=("path", BoxesField("boxes"), "labels", "image_id")),
    ...     names=("boxes", "labels", "image_id"))
    >>> image, target = ds[0]        # target["boxes"]: BoundingBoxes (XYXY), "labels": int64
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils.data

__all__ = ["DetectionTargets"]

_INT64 = frozenset({"labels", "iscrowd"})
_FLOAT = frozenset({"area"})


class DetectionTargets(torch.utils.data.Dataset):
    """``(image, target)`` from a dataset whose samples are ``(image, *values)``.

    ``target`` is ``dict(zip(names, values))`` with the types the detection references
    use: ``labels`` and ``iscrowd`` int64 tensors, ``area`` a float32 tensor, ``boxes`` the
    ``tv_tensors.BoundingBoxes`` a ``BoxesField`` gives (already transformed with the image),
    ``masks`` a ``tv_tensors.Mask`` (an ``(H, W)`` instance-index mask, pixel ``k + 1`` for
    the ``k``-th box, as :func:`turboloader.tools.coco.coco_to_manifest` writes it, becomes
    Mask R-CNN's ``(N, H, W)`` uint8 masks, one per box); ``image_id`` and any other value
    as the dataset gives it.
    The image is the dataset's (fused decode and transform, written into the loader's batch
    rows on the thread backend: the batch path, ``__getitems__``, is kept).

    ``transforms``: a torchvision v2 transform applied to each ``(image, target)`` pair after
    that, where torchvision applies its detection transforms: ``SanitizeBoundingBoxes``
    (which needs the labels beside the boxes), ``RandomIoUCrop`` and ``RandomZoomOut`` (the
    reference's ``ssd`` / ``ssdlite`` policies), which a dataset's ``fields=`` pipeline
    cannot take (it replays the image's draws on each annotation alone, and refuses them
    with a ValueError at construction).

    Args:
        dataset: a map-style dataset of ``(image, *values)`` tuples (``fields=`` samples).
        names: the target keys of the values, in order (default ``("boxes", "labels")``).
        transforms: a callable ``(image, target) -> (image, target)``, e.g. a
            ``torchvision.transforms.v2.Compose``, or None.

    Raises:
        ValueError: a sample has another number of values than ``names``.
    """

    def __init__(self, dataset: torch.utils.data.Dataset, names: Sequence[str] = ("boxes", "labels"),
                 *, transforms: Callable[[Any, dict], tuple] | None = None) -> None:
        self.dataset = dataset
        self.names = tuple(names)
        if transforms is not None and not callable(transforms):
            raise TypeError(f"transforms must be callable, got {type(transforms).__name__}")
        self.transforms = transforms

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]  # a map-style dataset has a length

    def target(self, sample) -> tuple:
        """``(image, target dict)`` of one ``(image, *values)`` sample."""
        image, *values = sample
        if len(values) != len(self.names):
            raise ValueError(f"DetectionTargets: a sample has {len(values)} values after the "
                             f"image but names={self.names} has {len(self.names)}")
        target = {}
        for name, value in zip(self.names, values):
            if name in _INT64:
                value = torch.as_tensor(value, dtype=torch.int64)
            elif name in _FLOAT:
                value = torch.as_tensor(value, dtype=torch.float32)
            elif name == "masks" and isinstance(value, torch.Tensor):
                from torchvision import tv_tensors

                value = tv_tensors.Mask(value)
            target[name] = value
        masks = target.get("masks")
        if isinstance(masks, torch.Tensor) and masks.ndim == 2:
            # an instance-index mask (pixel k + 1: instance k; coco_to_manifest's form):
            # Mask R-CNN's (N, H, W), one mask per box
            from torchvision import tv_tensors

            n = len(target.get("labels", target.get("boxes", ())))
            ids = torch.arange(1, n + 1, dtype=masks.dtype).view(-1, 1, 1)
            target["masks"] = tv_tensors.Mask((masks.as_subclass(torch.Tensor)[None] == ids)
                                              .to(torch.uint8))
        if self.transforms is not None:
            image, target = self.transforms(image, target)
        return image, target

    def get_height_and_width(self, index: int) -> tuple:
        """``(height, width)`` of image ``index`` as stored: the row's ``height`` and
        ``width`` when the manifest has them (``coco_to_manifest`` writes them), else from
        the image file's header. torchvision's ``create_aspect_ratio_groups`` uses this
        instead of decoding every image."""
        rows = getattr(self.dataset, "rows", None)
        if rows is not None and "height" in rows[index] and "width" in rows[index]:
            return int(rows[index]["height"]), int(rows[index]["width"])
        samples = getattr(self.dataset, "samples", None)
        if samples is None:
            raise TypeError(f"{type(self.dataset).__name__} names no image files: its sizes "
                            "are known only by reading the samples")
        from PIL import Image

        with Image.open(samples[index][0]) as img:  # the header only
            w, h = img.size
        return h, w

    def __getitem__(self, index):
        return self.target(self.dataset[index])

    def __getitems__(self, indices, *, out=None, timing=None) -> list:
        """The wrapped dataset's batch path, each sample made a pair."""
        from turboloader.data.map_dataset import MapDataset

        if isinstance(self.dataset, MapDataset):
            samples = self.dataset.__getitems__(indices, out=out, timing=timing)
        else:
            samples = [self.dataset[i] for i in indices]
        return [self.target(s) for s in samples]

    @property
    def transform(self):
        """The wrapped dataset's transform (the loader plans batch rows from it)."""
        return getattr(self.dataset, "transform", None)

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    @property
    def epoch(self):
        return getattr(self.dataset, "epoch", None)
