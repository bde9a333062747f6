"""Datasets: WebDataset-style TAR shards (:class:`TarDataset`), class folders
(:class:`ImageFolder`) and TBL files (:class:`TBLDataset`), with sharding, shuffling, a
decoded-sample cache and a failure policy.

Modules: :mod:`~turboloader.io.shards` (URL expansion, shard readers, sample grouping),
:mod:`~turboloader.data.sharding` (epoch order, rank/worker split), :mod:`~turboloader.data.cache`
(byte-bounded LRU), :mod:`~turboloader.data.policy` (skip/raise policy, statistics).

Names are imported on first use, so tools that need only the shard readers do not pay for
importing torch and torchvision.
"""

import importlib

_LAZY = {
    "ByteLRU": "turboloader.data.cache",
    "FailurePolicy": "turboloader.data.policy",
    "ImageFolder": "turboloader.data.folder",
    "ResumableSampler": "turboloader.data.tbl_dataset",
    "ShardCache": "turboloader.io.remote",
    "delivered_counts": "turboloader.data.tar_dataset",
    "TarDataset": "turboloader.data.tar_dataset",
    "TBLDataset": "turboloader.data.tbl_dataset",
    "braceexpand": "turboloader.io.shards",
    "expand_urls": "turboloader.io.shards",
    "per_rank_count": "turboloader.data.sharding",
    "worker_items": "turboloader.data.sharding",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'turboloader.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
