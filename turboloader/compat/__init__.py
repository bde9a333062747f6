"""The seed documents' APIs, as thin adapters over the core (:mod:`turboloader.compat.seeds`).

Code written against those APIs runs unchanged: ``turboloader.DataLoader("train.tar")``
(seed 001's path-first form, :class:`DataLoader`), the ``.apply`` transform classes
(``turboloader.Compose``, ``turboloader.Resize``, ...), the ``Pipeline`` API and
``HighPerformanceDataset`` / ``create_dataloader``. This layer sits on top of the chain
(io -> decode -> transforms -> data -> loader); nothing below imports it.

Names are imported on first use.
"""

import importlib

_SEEDS = "turboloader.compat.seeds"
_LAZY = {
    name: _SEEDS
    for name in (
        "CenterCrop",
        "ColorJitter",
        "Compose",
        "DataLoader",
        "HighPerformanceDataset",
        "ImageNetNormalize",
        "Pipeline",
        "PrefetchLoader",
        "RandomCrop",
        "RandomHorizontalFlip",
        "Resize",
        "ResizeMethod",
        "Sample",
        "SampleBatchLoader",
        "TensorFormat",
        "ToTensor",
        "TransformConfig",
        "create_dataloader",
        "seed001_loader",
    )
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'turboloader.compat' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
