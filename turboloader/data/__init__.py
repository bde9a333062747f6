"""Datasets: WebDataset-style TAR shards (:class:`TarDataset`) and class folders
(:class:`ImageFolder`), with sharding, shuffling, a decoded-sample cache and a failure policy.

Modules: :mod:`~turboloader.data.shards` (URL expansion, shard readers, sample grouping),
:mod:`~turboloader.data.sharding` (epoch order, rank/worker split), :mod:`~turboloader.data.cache`
(byte-bounded LRU), :mod:`~turboloader.data.policy` (skip/raise policy, statistics).
"""

from turboloader.data.cache import ByteLRU
from turboloader.data.folder import ImageFolder
from turboloader.data.policy import FailurePolicy
from turboloader.data.shards import braceexpand, expand_urls
from turboloader.data.sharding import per_rank_count, worker_items
from turboloader.data.tar_dataset import TarDataset

__all__ = [
    "ByteLRU",
    "FailurePolicy",
    "ImageFolder",
    "TarDataset",
    "braceexpand",
    "expand_urls",
    "per_rank_count",
    "worker_items",
]
