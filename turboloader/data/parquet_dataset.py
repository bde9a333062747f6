"""ParquetDataset: (image, label) samples from Parquet files or Hugging Face datasets, as
TarDataset shards (one per row group)."""

from __future__ import annotations

from typing import Any
import os

from turboloader.data.tar_dataset import TarDataset
from turboloader.decode.jpeg import DEFAULT_MAX_PIXELS
from turboloader.io.parquet import ParquetShards

__all__ = ["ParquetDataset"]


class ParquetDataset(TarDataset):
    """``(image, label)`` samples from the rows of Parquet files (local, or remote through
    ``pyarrow.fs`` / fsspec), sharded by row group over DDP ranks and DataLoader workers;
    local Arrow IPC files (``.arrow``) and Hugging Face datasets (:meth:`from_hf`) too.

    Each row group is a shard of a :class:`TarDataset`, so everything TarDataset documents
    holds here unchanged: every sample exactly once per epoch across ranks x workers, equal
    ranks (``pad``), per-epoch shuffling (``set_epoch``; shards, then rows within windows
    of ``mix_shards`` row groups), ``state_dict`` / ``load_state_dict`` mid-epoch, the
    decoded-sample ``cache``, the failure policy (``on_error="skip"`` counts and lists a
    corrupt image, a null image or a null label and replaces it), ``stats()``, ``batched``
    and the thread backend. Only the image, label and key columns are read, a row group at
    a time when a worker first needs it (kept while the shard is open: up to
    ``mix_shards + 4`` row groups per worker, more while a chunk being read spans more).

    The image column holds encoded images (JPEG natively; PNG/WebP/... via Pillow) as
    ``binary`` or as Hugging Face's ``Image()`` feature (``struct<bytes, path>``); a row
    whose bytes are null (an image stored only by path) is read from that path when it is a
    local regular file within the member-size limit (``TURBOLOADER_MAX_FILE_BYTES``, 1 GiB),
    through the guarded reader images use; a path to a FIFO, a device or a larger file is an
    UnreadableFileError (a SampleError), a missing file a SampleError. Labels are the
    label column's values (ints for a ``ClassLabel``); ``classes`` / ``class_to_idx`` come
    from the label column's Hugging Face ``ClassLabel`` names in the file's metadata (else
    None), with ``fields=`` as without.

    Args:
        urls: a Parquet file, a directory (its ``.parquet`` / ``.arrow`` files, sorted),
            a glob, brace pattern or list of them; remote URLs
            (``s3://``, ``gs://``, ``hdfs://`` through pyarrow, others such as
            ``https://`` through fsspec) are brace-expanded, not globbed.
        transform, target_transform: as :class:`TarDataset`.
        image_column: the column of encoded images (default ``"image"``).
        label_column: the label column (default ``"label"``; None: every label is
            ``missing_label``, default -1 then).
        key_column: a column naming each row (``__key__`` in errors and ``stats()``);
            default the row's number in its file.
        filesystem: a ``pyarrow.fs.FileSystem`` or fsspec filesystem to read ``urls`` with
            (e.g. one with credentials); default: from each URL.
        rows_per_shard: rows per shard of a local Arrow IPC file (``.arrow``, e.g. a Hugging
            Face ``datasets`` cache file, memory-mapped), which has no row groups.
        shuffle, seed, missing_label, rank, world_size, pad: as :class:`TarDataset`.
        cache, cache_short_side, on_error, max_failures: as :class:`TarDataset`.
        max_pixels, stats_interval, mix_shards: as :class:`TarDataset`.
        fields: yield tuples of these columns instead of ``(image, label)``, as
            :class:`TarDataset`'s ``fields`` (see :mod:`turboloader.data.fields`):
            ``image_column`` is the image (decoded and transformed, fused when it can be),
            ``"__key__"`` the row's key (``key_column``, else its row number in the file),
            ``"__url__"`` its shard (``"<file>#rg=<k>"``), another column its value as
            ``pyarrow``'s ``to_pylist`` gives it (strings, ints, lists, dicts, ``bytes``),
            ``MaskField(column)`` an encoded mask image (binary, or ``Image()``'s
            ``{bytes, path}``, null bytes read from the path as for the image column)
            transformed with the image, ``BoxesField(column)`` boxes (a
            list of 4-number lists, a JSON string of one, or ``key`` of a struct) transformed
            with the image. Only the image, key and named columns are read; the label
            column is then read only when a field names it.

    Raises:
        FileNotFoundError: a file or glob does not exist.
        FormatError: a file is not Parquet, or has no such column.
        MissingDependencyError: pyarrow is not installed
            (``pip install 'torch-turboloader[parquet]'``).

    Example:
        >>> from turboloader import ParquetDataset, transforms as T          # doctest: +SKIP
        >>> ds = ParquetDataset("data/train-*.parquet", T.Compose([T.RandomResizedCrop(224),
        ...                     T.RandomHorizontalFlip(), T.ToTensor()]), on_error="skip")
        >>> loader = torch.utils.data.DataLoader(ds, batch_size=256, num_workers=8)
        >>> for epoch in range(90):
        ...     ds.set_epoch(epoch)
        ...     for images, labels in loader: ...
    """

    def __init__(self, urls: Any, transform: Any = None, target_transform: Any = None, *,
                 image_column: str = "image", label_column: Any = "label", key_column: Any = None,
                 filesystem: Any = None, shuffle: bool = True, seed: int = 0,
                 missing_label: Any = None, rank: Any = None, world_size: Any = None,
                 pad: bool = True, cache: Any = None, cache_short_side: Any = None,
                 on_error: str = "raise", max_failures: float = 0.01,
                 max_pixels: int | None = DEFAULT_MAX_PIXELS, stats_interval: int = 256,
                 mix_shards: int = 16, rows_per_shard: int = 1000, fields: Any = None,
                 _table: Any = None, _table_name: str = "table") -> None:
        extra = ()
        class_column = label_column  # classes: its ClassLabel names, with fields= too
        if fields is not None:
            from turboloader.data.fields import Fields

            fields = Fields(fields, image_names=(image_column,), columns=True)
            extra = tuple(a for i, (_, alts) in enumerate(fields.entries)
                          if i != fields.image for a in alts)
            label_column = None  # a field names it when it is wanted
        if label_column is None and missing_label is None:
            missing_label = -1
        self._columns = dict(image_column=image_column, label_column=label_column,
                             key_column=key_column, extra_columns=extra,
                             class_column=class_column)
        self._source: dict[str, Any] | None = dict(
            filesystem=filesystem, table=_table, table_name=_table_name,
            rows_per_shard=rows_per_shard)
        super().__init__(urls, transform, target_transform, shuffle=shuffle, seed=seed,
                         label_key=None, missing_label=missing_label, rank=rank,
                         world_size=world_size, pad=pad, cache=cache,
                         cache_short_side=cache_short_side, on_error=on_error,
                         max_failures=max_failures, max_pixels=max_pixels,
                         stats_interval=stats_interval, mix_shards=mix_shards, fields=fields)
        self.image_column, self.label_column = image_column, label_column
        self.key_column = key_column
        self._source = None  # the table lives on in self._io (pickled once)

    def _shard_io(self, urls, *, strict):
        return ParquetShards(urls, **self._columns, **self._source)

    @classmethod
    def from_hf(cls, dataset, transform=None, target_transform=None, *, image_column="image",
                label_column="label", rows_per_shard=1000, **kwargs):
        """A ParquetDataset over a Hugging Face ``datasets.Dataset``, without re-encoding.

        The dataset's Arrow table is read in place (memory-mapped when the dataset lives in
        its cache files; pickled to DataLoader workers by file name, as ``datasets`` does),
        in shards of ``rows_per_shard`` rows. A dataset with an indices mapping (after
        ``select``, ``shuffle``, ``filter`` or ``train_test_split``) must be flattened first
        (``dataset.flatten_indices()``), as reading through the mapping would copy every
        image. A ``datasets.DatasetDict`` needs a split (``dd["train"]``); an
        ``IterableDataset`` is not accepted. Parquet files of a dataset (e.g. downloaded
        from the hub) open directly with ``ParquetDataset(paths)``.

        Args:
            dataset: a ``datasets.Dataset`` with an ``Image()`` (or binary) column.
            rows_per_shard: rows per shard (the unit of sharding and shuffling windows).
            transform, target_transform, image_column, label_column: as the constructor.
            kwargs: the constructor's other keyword arguments.

        Raises:
            TypeError: not a ``datasets.Dataset``.
            ValueError: the dataset has an indices mapping.
            FormatError: no such column, or the image column is not binary/``Image()``.

        Example:
            >>> import datasets                                          # doctest: +SKIP
            >>> hf = datasets.load_dataset("imagefolder", data_dir="pets", split="train")
            >>> ds = ParquetDataset.from_hf(hf, T.Compose([T.RandomResizedCrop(224),
            ...                                            T.ToTensor()]))
        """
        table = getattr(dataset, "data", None)
        if table is None or not hasattr(dataset, "_indices") or not hasattr(dataset,
                                                                            "features"):
            raise TypeError(f"ParquetDataset.from_hf needs a datasets.Dataset, got "
                            f"{type(dataset).__name__} (a DatasetDict needs a split: "
                            f"dd['train'])")
        if dataset._indices is not None:
            raise ValueError("this datasets.Dataset has an indices mapping (from select, "
                             "shuffle, filter or a split): call dataset.flatten_indices() "
                             "first, or open its Parquet files")
        files = [f["filename"] for f in getattr(dataset, "cache_files", ()) or ()]
        name = (os.path.basename(files[0]) if files else
                (getattr(dataset, "info", None) and dataset.info.dataset_name) or "dataset")
        if label_column is not None and label_column not in dataset.column_names:
            label_column = None
        ds = cls([], transform, target_transform, image_column=image_column,
                 label_column=label_column, rows_per_shard=rows_per_shard, _table=table,
                 _table_name=name, **kwargs)
        if ds.classes is None and label_column is not None:
            names = getattr(dataset.features.get(label_column), "names", None)
            if names:
                ds.classes = list(names)
                ds.class_to_idx = {c: i for i, c in enumerate(names)}
        return ds

    def _where(self, st, where):
        if where[0] == "tar":
            _, url, j, shard = where
            if shard is not None and 0 <= j < len(shard):
                key, column, row = shard.where(j)
                return (f"ParquetDataset: shard {url!r}, row {row} (key {key!r}), column "
                        f"{column!r}", url, key, row)
            return f"ParquetDataset: shard {url!r}, row #{j} of the shard", url, None, None
        note, url, key, offset = super()._where(st, where)
        return note.replace("TarDataset", "ParquetDataset", 1), url, key, offset

    def __repr__(self):
        return (f"ParquetDataset({len(self.urls)} shards, {self.num_samples} samples, "
                f"shuffle={self.shuffle}, seed={self.seed}, pad={self.pad}, "
                f"cache={self.cache_bytes or None}, on_error={self.policy.on_error!r})")
