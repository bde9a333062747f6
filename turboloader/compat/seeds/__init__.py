"""Compatibility adapters: the APIs of other loaders' documentation, over turboloader's core.

Code written against those APIs runs unchanged; every adapter is a thin layer over
:class:`~turboloader.TarDataset`, :mod:`turboloader.transforms`, the decode cache and the
loader, so the pixels, the sharding and the randomness are the core's.

* **Pipeline API** -- :class:`TransformConfig`, :class:`ResizeMethod`, :class:`Pipeline`
  (``start()`` / ``next_batch(n)`` / ``stop()``, samples with ``get_image()``).
* **Sample-dict loader and ``.apply`` transforms** -- :func:`seed001_loader` (what
  ``turboloader.DataLoader("train.tar", ...)`` dispatches to: batches are lists of
  ``{"image": HWC uint8, "label": int}``) and :class:`Compose`, :class:`Resize`,
  :class:`RandomCrop`, :class:`CenterCrop`, :class:`RandomHorizontalFlip`,
  :class:`ColorJitter`, :class:`ImageNetNormalize`, :class:`ToTensor`, :class:`TensorFormat`.
* **Cached map-style dataset** -- :class:`HighPerformanceDataset`, :func:`create_dataloader`
  and ``PrefetchLoader`` (re-exported from :mod:`turboloader.prefetch`).

**Two families of transform classes.** The classes here are the seed documents': sizes as
``(width, height)`` (``Resize(224, 224)``), HWC NumPy arrays through ``.apply(img)``; they are
what ``turboloader.Compose``, ``turboloader.Resize``, ``turboloader.ToTensor`` etc. name at
the top level. The classes of :mod:`turboloader.transforms` are torchvision v2's, exactly
(``Resize(size)`` with ``size=(h, w)`` or a short side, PIL/tensor/array in, same kind out,
``ToTensor`` scales to [0, 1]); use those with the datasets, where they fuse into one native
call per sample. So that no call means one thing here and another in torchvision:

* ``.apply(img)`` (a name torchvision does not have) is the seed contract: an HWC array (a
  PIL image is converted) in, an HWC array out, ``ToTensor().apply`` a CHW array of the same
  dtype (no scaling; the documented pattern is ``torch.from_numpy(img).float() / 255.0``),
  crops larger than the image zero-padded.
* Calling an object (``t(img)``) means what torchvision's class of that name means, on a PIL
  image, a tensor or an HWC array: ``turboloader.ToTensor()(img)`` is a float tensor in
  [0, 1], ``turboloader.Resize(w, h)(img)`` is ``turboloader.transforms.Resize((h, w))(img)``,
  ``turboloader.RandomCrop(224)(img)`` raises for a smaller image as torchvision's does.
* Constructor calls that torchvision reads differently raise a TypeError naming the
  :mod:`turboloader.transforms` class: ``Resize(224)`` (torchvision: shorter side 224; here
  it would be a 224 x 224 square), ``Resize((h, w))``, ``CenterCrop((h, w))``,
  ``RandomCrop((h, w))`` (torchvision's order is (h, w), the seed's (w, h)).
* One seed form is also a valid torchvision call with another meaning: ``RandomCrop(w, h)``
  (torchvision: ``RandomCrop(size=w, padding=h)``). The seed examples use it, so it keeps the
  seed meaning for ``.apply``; calling such an object raises a TypeError instead of guessing.
* Random parameters come from torch's global RNG (``torch.manual_seed`` applies), as with
  torchvision; inside a turboloader dataset from the sample's seeded generator.

The package has one module per seed API: ``_loader`` (the core loader underneath, and seed
001's ``turboloader.DataLoader("train.tar")`` / :func:`seed001_loader`), ``_pipeline`` (the
Pipeline API), ``_apply`` (the ``.apply`` transforms) and ``_dataset``
(:class:`HighPerformanceDataset`, :func:`create_dataloader`).
"""

from turboloader.compat.names import SEED_NAMES
from turboloader.compat.seeds._apply import (
    CenterCrop,
    ColorJitter,
    Compose,
    ImageNetNormalize,
    RandomCrop,
    RandomHorizontalFlip,
    Resize,
    TensorFormat,
    ToTensor,
)
from turboloader.compat.seeds._dataset import HighPerformanceDataset, create_dataloader
from turboloader.compat.seeds._loader import DataLoader, SampleBatchLoader, seed001_loader
from turboloader.compat.seeds._pipeline import Pipeline, ResizeMethod, Sample, TransformConfig
from turboloader.transforms.presets import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    imagenet_train_transform,
    imagenet_val_transform,
)

# the seed names (written once, in turboloader.compat) and the presets they are used with
__all__ = sorted([*SEED_NAMES, "IMAGENET_MEAN", "IMAGENET_STD", "imagenet_train_transform",
                  "imagenet_val_transform"])


def __getattr__(name):
    if name == "PrefetchLoader":  # seed 004 imports it from here; it lives in prefetch.py
        from turboloader.prefetch import PrefetchLoader

        return PrefetchLoader
    raise AttributeError(f"module 'turboloader.compat.seeds' has no attribute {name!r}")
