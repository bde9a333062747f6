"""Bytes in: where an image's encoded bytes come from, before anything is decoded.

The first stage of the sample path (shard -> bytes -> decode -> transform -> batch -> device):

* :mod:`~turboloader.io.tar`: :class:`TarIndex`, a native index of a TAR file's members,
  read zero-copy through ``mmap``.
* :mod:`~turboloader.io.shards`: shard lists (brace expansion, globs), local and remote shard
  readers, webdataset's grouping of members into samples, label parsing.
* :mod:`~turboloader.io.remote`: ``s3://`` and ``http(s)://`` shards, streamed with retries.
* :mod:`~turboloader.io.fetch`: the per-process fetch pool: connections sized from the
  bandwidth needed, ranged parts fetched concurrently, bounded read-ahead of remote shards.
* :mod:`~turboloader.io.shard_cache`: :class:`ShardCache`, remote shards fetched once per node
  into a local directory, LRU-bounded in bytes.
* :mod:`~turboloader.io.tbl`: the TBL single-file format, writer and ``pread`` reader.
* :mod:`~turboloader.io.codec`: what the bytes are (:func:`detect_codec`) and their image size
  from the header, without decoding.
* :mod:`~turboloader.io.sizes`: byte sizes such as ``"2GiB"``.
* :mod:`~turboloader.io.files`: :func:`read_file`, the one guarded reader of local files
  (regular files only, never blocking, at most :data:`MAX_FILE_BYTES`), and
  :func:`replace_file`, the one way a small file is replaced whole.
* :mod:`~turboloader.io.parquet`: Parquet row groups and Arrow tables as shards (``pyarrow``).
* :mod:`~turboloader.io.manifest`: CSV / TSV / JSON Lines lists of image files and labels.
* :mod:`~turboloader.io.counts`: remote shards' sample counts at construction: a shard
  index, the node-local count cache, else counted in parallel.

Nothing here imports decoders, transforms, torch or the datasets: data flows downward.
Names are imported on first use.
"""

from turboloader._lazy import lazy_names

_LAZY = {
    "Codec": "turboloader.io.codec",
    "Compression": "turboloader.io.tbl",
    "ShardCache": "turboloader.io.shard_cache",
    "TBLFile": "turboloader.io.tbl",
    "TBLRecord": "turboloader.io.tbl",
    "TBLWriter": "turboloader.io.tbl",
    "TarIndex": "turboloader.io.tar",
    "braceexpand": "turboloader.io.shards",
    "detect_codec": "turboloader.io.codec",
    "expand_urls": "turboloader.io.shards",
    "image_size": "turboloader.io.codec",
    "open_remote": "turboloader.io.remote",
    "open_shard": "turboloader.io.shards",
    "open_parquet": "turboloader.io.parquet",
    "parse_size": "turboloader.io.sizes",
    "read_manifest": "turboloader.io.manifest",
    "write_tbl": "turboloader.io.tbl",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
