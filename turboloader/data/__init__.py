"""Datasets: WebDataset-style TAR shards (:class:`TarDataset`), class folders
(:class:`ImageFolder`), TBL files (:class:`TBLDataset`), CSV / JSON Lines manifests
(:class:`ManifestDataset`) and Parquet files or Hugging Face datasets
(:class:`ParquetDataset`), with sharding, shuffling, a decoded-sample cache and a failure
policy.

Modules: :mod:`~turboloader.data.reader` (the sample reader the datasets share: decoder,
cache, failure policy, statistics, per-stream state and the batch path),
:mod:`~turboloader.data.map_dataset` (the map-style datasets' ``__getitem__``/``__getitems__``),
:mod:`~turboloader.data.tar_reader` (how a :class:`TarDataset` reads its shards: open shards,
label tables, the chunk gather),
:mod:`~turboloader.data.sharding` (epoch order, rank/worker split), :mod:`~turboloader.data.cache`
(the decoded-sample cache, and a byte-bounded LRU), :mod:`~turboloader.data.failures` (skip/raise policy),
:mod:`~turboloader.data.epochs` (shared epochs), :mod:`~turboloader.data.telemetry`
(statistics); shard lists and readers (``expand_urls``, ``braceexpand``) and the
:class:`~turboloader.io.ShardCache` are :mod:`turboloader.io`'s, reached from there only.

Names are imported on first use, so tools that need only the shard readers do not pay for
importing torch and torchvision.
"""

from turboloader._lazy import lazy_names

_LAZY = {
    "BoxesField": "turboloader.data.fields",
    "BufferPool": "turboloader.data._buffers",
    "ByteLRU": "turboloader.data.cache",
    "FailurePolicy": "turboloader.data.failures",
    "ImageFolder": "turboloader.data.folder",
    "ManifestDataset": "turboloader.data.manifest",
    "MaskField": "turboloader.data.fields",
    "ParquetDataset": "turboloader.data.parquet_dataset",
    "ResumableSampler": "turboloader.data.tbl_dataset",
    "SampleCache": "turboloader.data.cache",
    "DetectionTargets": "turboloader.data.detection",
    "delivered_counts": "turboloader.data.checkpoint",
    "env_budget": "turboloader.data._buffers",
    "workers_exited": "turboloader.data._buffers",
    "TarBatches": "turboloader.data.tar_dataset",
    "TarBuckets": "turboloader.data.buckets",
    "TarDataset": "turboloader.data.tar_dataset",
    "TBLDataset": "turboloader.data.tbl_dataset",
    "VideoDataset": "turboloader.data.video",
    "VideoFolder": "turboloader.data.video",
    "collate_column": "turboloader.data.fields",
    "collate_fields": "turboloader.data.fields",
    "per_rank_count": "turboloader.data.sharding",
    "worker_items": "turboloader.data.sharding",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
