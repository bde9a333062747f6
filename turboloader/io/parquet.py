"""Parquet files and Arrow tables as shards: one shard per Parquet row group (or per slice of
an Arrow table or Arrow IPC file, such as a Hugging Face ``datasets`` cache file), read a
column at a time with ``pyarrow``; no decoding here.

A :class:`ColumnShard` offers what a TAR shard offers the datasets (``len``,
``image_size(j)``, ``read_image_into(j, out)``, ``labels()``, ``key(j)``, ``where(j)``,
``sample(j)``, ``close()``), so :class:`turboloader.ParquetDataset` reuses
:class:`turboloader.TarDataset`'s sharding, epochs, resume, cache and failure policy.

Shard names are ``"<file>#rg=<k>"`` (row group ``k`` of a Parquet file) or
``"<name>#rows=<a>:<b>"`` (rows ``a..b`` of a table). Image columns are ``binary`` /
``large_binary`` or Hugging Face's ``struct<bytes: binary, path: string>``.
"""

from __future__ import annotations

from typing import Any, cast
import json
import os
import stat
import threading

import numpy as np

from turboloader.errors import (FormatError, SampleError, TurboLoaderError,
                                UnreadableFileError, require)
from turboloader.io.files import check_size, read_file
from turboloader.io.remote import can_glob, glob_objects
from turboloader.io.shards import SampleRecord, braceexpand, expand_urls, is_remote

__all__ = ["ColumnShard", "ParquetShards", "hf_class_names", "open_parquet"]


def _pa():
    return require("pyarrow", extra="parquet", feature="ParquetDataset")


def _filesystem(url, filesystem=None):
    """``(pyarrow filesystem, path)`` for a local path or a remote URL (``s3://``, ``gs://``,
    ``hdfs://`` natively; others such as ``https://`` through fsspec when installed)."""
    if filesystem is not None:
        if not hasattr(filesystem, "open_input_file"):  # an fsspec filesystem
            from pyarrow.fs import FSSpecHandler, PyFileSystem

            filesystem = PyFileSystem(FSSpecHandler(filesystem))
        return filesystem, url
    if not is_remote(url) and "://" not in url:
        return None, url
    from pyarrow import fs as pafs

    try:
        return pafs.FileSystem.from_uri(url)
    except Exception:  # noqa: BLE001 (pyarrow does not know the scheme: try fsspec)
        fsspec = require("fsspec", extra="parquet", feature=f"reading {url.split('://')[0]}://")
        from pyarrow.fs import FSSpecHandler, PyFileSystem

        fs, path = fsspec.core.url_to_fs(url)
        return PyFileSystem(FSSpecHandler(fs)), path


def open_parquet(url: str, /, *, filesystem: Any = None):
    """A ``pyarrow.parquet.ParquetFile`` for a local path or remote URL.

    Raises:
        FormatError: not a Parquet file (pyarrow's message, naming the file).
        FileNotFoundError: no such file.
    """
    _pa()
    import pyarrow
    import pyarrow.parquet as pq

    fs, path = _filesystem(url, filesystem)
    try:
        if fs is None:
            return pq.ParquetFile(path, memory_map=True)
        return pq.ParquetFile(fs.open_input_file(path))
    except (pyarrow.ArrowInvalid, OSError) as exc:
        if isinstance(exc, FileNotFoundError) or "not found" in str(exc).lower() and \
                not os.path.exists(path):
            raise FileNotFoundError(f"no Parquet file {url!r}") from exc
        raise FormatError(f"{url!r} is not a readable Parquet file: {exc}") from None


def hf_class_names(schema, column):
    """Class names of ``column`` from the Hugging Face ``datasets`` features stored in an
    Arrow/Parquet schema's metadata (a ``ClassLabel``), else None."""
    meta = schema.metadata or {}
    raw = meta.get(b"huggingface")
    if raw is None or column is None:
        return None
    try:
        feature = json.loads(raw)["info"]["features"][column]
    except (ValueError, KeyError, TypeError):
        return None
    if isinstance(feature, dict) and feature.get("_type") == "ClassLabel":
        names = feature.get("names")
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            return names
    return None


def _image_values(column, name, where):
    """``(offsets int64[n + 1], data uint8[], valid bool[n])`` of a binary image column (or
    the ``bytes`` field of a ``{bytes, path}`` struct), zero-copy over Arrow's buffers."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    valid = np.ones(len(arr), bool)
    if pa.types.is_struct(arr.type):
        if arr.type.get_field_index("bytes") < 0:
            raise FormatError(f"{where}: image column {name!r} is a struct without a 'bytes' "
                              f"field ({arr.type})")
        if arr.null_count:
            valid &= ~np.asarray(arr.is_null())
        arr = pc.struct_field(arr, "bytes")
    if hasattr(pa.types, "is_binary_view") and pa.types.is_binary_view(arr.type):
        arr = arr.cast(pa.large_binary())
    if not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)):
        raise FormatError(f"{where}: image column {name!r} is {arr.type}, not binary or a "
                          f"{{bytes, path}} struct")
    if arr.null_count:
        valid &= ~np.asarray(arr.is_null())
    bufs = arr.buffers()
    dtype = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    offsets = np.frombuffer(bufs[1], dtype=dtype)[arr.offset:arr.offset + len(arr) + 1]
    data = (np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None
            else np.empty(0, np.uint8))
    return offsets.astype(np.int64), data, valid


class ColumnShard:
    """Random-access rows of one shard (a Parquet row group, or a slice of a table) with an
    image column, an optional label column and an optional key column, all read at open
    (only those columns) and kept while the shard is open.

    Raises:
        FormatError: the columns are missing or of the wrong type, or the data does not
            read (pyarrow's message).
    """

    random_access = True

    def __init__(self, url, table, /, *, image_column, label_column=None, key_column=None,
                 first_row=0, extra_columns=()):
        self.url = url
        self.image_column = image_column
        # other columns a dataset's fields name: Python values, converted once per shard
        self._extra = {c: table.column(c).to_pylist() for c in extra_columns}
        self._first_row = int(first_row)
        self._n = table.num_rows
        self._offsets, self._data, self._valid = _image_values(
            table.column(image_column), image_column, url)
        self._labels = (table.column(label_column).to_pylist() if label_column is not None
                        else [None] * self._n)
        self._keys = (None if key_column is None
                      else [str(k) for k in table.column(key_column).to_pylist()])
        self._paths = None  # a {bytes, path} struct's paths, for naming a row without bytes
        import pyarrow as pa

        col = table.column(image_column)
        if pa.types.is_struct(col.type) and col.type.get_field_index("path") >= 0:
            self._paths = col.combine_chunks().field("path").to_pylist()

    def __len__(self) -> int:
        return self._n

    def key(self, j: int) -> str:
        if self._keys is not None:
            return self._keys[j]
        return f"{self._first_row + j}"

    def use_image_extensions(self, exts, /) -> None:
        """The image is :attr:`image_column` (a ``fields`` spec's image entry names it)."""

    def members(self, j: int, columns, /) -> dict:
        """``{column: value}`` of row ``j`` for those of ``columns`` that were read (the
        ``extra_columns``), as Python values (``to_pylist``: binary as ``bytes``, a
        ``{bytes, path}`` struct as a dict, lists as lists)."""
        return {c: self._extra[c][j] for c in columns if c in self._extra}

    def _local_file(self, j):
        """``(path, size)`` of the local file of a ``{bytes: null, path}`` row (Hugging Face
        keeps local images by path until they are embedded), else None (no path, or no such
        file: the row has no image).

        Raises:
            UnreadableFileError: the path names a FIFO, device or socket, or a file over the
                member-size limit (:data:`turboloader.io.files.MAX_FILE_BYTES`).
        """
        path = self._paths[j] if self._paths is not None else None
        if not path:
            return None
        try:
            st = os.stat(path)
        except (OSError, ValueError):  # not a local file (a URL, a missing file)
            return None
        where = f"row {self._first_row + j} of {self.url!r}: path {path!r}"
        if not stat.S_ISREG(st.st_mode):
            raise UnreadableFileError(f"{where} is not a regular file (a FIFO, device or "
                                      f"socket)")
        check_size(where, st.st_size)
        return path, st.st_size

    def _read_local(self, j, path, size):
        """The bytes of row ``j``'s local file, through the guarded reader."""
        data = read_file(path)
        if len(data) != size:
            raise SampleError(f"row {self._first_row + j} of {self.url!r}: {path!r} changed "
                              f"size while being read")
        return data

    def image_size(self, j: int, /) -> int:
        """Bytes of row ``j``'s image, or -1 when it has none (a null without a local
        file).

        Raises:
            UnreadableFileError: a null row's path is not a regular file, or is over the
                member-size limit.
        """
        if not 0 <= j < self._n:
            return -1
        if not self._valid[j]:
            local = self._local_file(j)
            return -1 if local is None else local[1]
        return int(self._offsets[j + 1] - self._offsets[j])

    def read_image_into(self, j: int, out, /) -> int:
        """Copy row ``j``'s image bytes into ``out`` (at least :meth:`image_size` bytes);
        returns their size.

        Raises:
            SampleError: a row's local image file changed size since :meth:`image_size`,
                or is no longer a readable regular file (UnreadableFileError).
        """
        view = np.frombuffer(out, np.uint8)
        if not self._valid[j]:
            local = self._local_file(j)
            if local is None:
                raise SampleError(f"row {self._first_row + j} of {self.url!r}: its image "
                                  f"file is gone")
            data = self._read_local(j, *local)
            if len(data) > len(view):
                raise SampleError(f"row {self._first_row + j} of {self.url!r}: {local[0]!r} "
                                  f"changed size since it was measured")
            view[:len(data)] = np.frombuffer(data, np.uint8)
            return len(data)
        a, b = int(self._offsets[j]), int(self._offsets[j + 1])
        view[:b - a] = self._data[a:b]
        return b - a

    def image(self, j: int, /):
        """Row ``j``'s image bytes as a read-only view (None for a null, even one with a
        local file: :meth:`sample` reads that)."""
        if not 0 <= j < self._n or not self._valid[j]:
            return None
        a, b = int(self._offsets[j]), int(self._offsets[j + 1])
        return memoryview(self._data[a:b])

    def where(self, j: int, /) -> tuple:
        """``(key, column, row of the file or table)`` of row ``j``, for error messages."""
        return self.key(j), self.image_column, self._first_row + j

    def labels(self, label_key=None, /) -> tuple:
        """``(values, errors)`` as ``TarShard.labels``: the label column's values (None for
        nulls); no errors (the column's type is checked at open)."""
        return self._labels, {}

    def sample(self, j: int, /) -> SampleRecord:
        """Row ``j`` as a record (used for rows without an image: its ``problem`` says so)."""
        if not 0 <= j < self._n:
            raise SampleError(f"shard {self.url!r} has {self._n} rows, so there is no row "
                              f"#{j}: the file changed since its rows were counted")
        image = self.image(j)
        problem = None
        local = self._local_file(j) if image is None else None
        if local is not None:
            image = memoryview(self._read_local(j, *local))
        if image is None:
            path = self._paths[j] if self._paths is not None else None
            problem = (f"row {self._first_row + j} has no image bytes (null in column "
                       f"{self.image_column!r}" + (f"; path {path!r}" if path else "") + ")")
        return SampleRecord(self.url, self.key(j), self.image_column, self._first_row + j,
                            image, None, self._labels[j], None, problem,
                            0 if image is None else len(image))

    def close(self) -> None:
        self._offsets = self._data = self._valid = None
        self._extra = {}


class ParquetShards:
    """How :class:`turboloader.ParquetDataset` finds, counts and opens its shards (the
    ``TarDataset`` hook): every row group of every Parquet file, or slices of an Arrow
    table (``table``: a ``pyarrow.Table`` or a Hugging Face ``datasets`` table, which
    pickles by file name when memory-mapped).

    Raises (at construction):
        FileNotFoundError: a file or glob does not exist.
        FormatError: a file is not Parquet, or lacks a needed column.
    """

    def __init__(self, urls=None, *, image_column, label_column=None, key_column=None,
                 filesystem=None, table=None, table_name="table", rows_per_shard=1000,
                 extra_columns=(), class_column=None):
        _pa()
        self.image_column, self.label_column = image_column, label_column
        # whose ClassLabel names classes() gives: the label column's, also when it is read
        # as one of the extra columns (fields=) rather than as the label
        class_column = label_column if class_column is None else class_column
        self.key_column = key_column
        self.filesystem = filesystem
        base = [c for c in (image_column, label_column, key_column) if c is not None]
        self.extra_columns = [c for c in dict.fromkeys(extra_columns) if c not in
                              (image_column,)]
        self.columns = list(dict.fromkeys(base + self.extra_columns))
        self._table = table
        self._local = threading.local()  # per thread: open ParquetFiles (see _file)
        self._shards = {}  # shard name -> (file or None, row group or (start, stop), rows, first row)
        self.names = []
        self.class_names = None
        if table is not None:
            t = _as_arrow(table)
            self._check_columns(t.schema, table_name)
            self.class_names = hf_class_names(t.schema, class_column)
            step = max(1, int(rows_per_shard))
            for a in range(0, t.num_rows, step):
                b = min(t.num_rows, a + step)
                name = f"{table_name}#rows={a}:{b}"
                self._shards[name] = (None, (a, b), b - a, a)
                self.names.append(name)
            return
        files = []
        for url in ([urls] if isinstance(urls, (str, os.PathLike)) else list(urls)):
            url = os.fspath(url)
            if is_remote(url) or ("://" in url and not url.startswith("file://")):
                for item in braceexpand(url):  # a glob over a store: its listing
                    files.extend(glob_objects(item) if can_glob(item) else [item])
            else:
                local = url[7:] if url.startswith("file://") else url
                if os.path.isdir(local):  # a folder of Parquet / Arrow files, sorted
                    found = sorted(os.path.join(local, n) for n in os.listdir(local)
                                   if n.lower().endswith((".parquet", ".arrow")))
                    if not found:
                        raise FileNotFoundError(f"no .parquet or .arrow files in the "
                                                f"directory {local!r}")
                    files.extend(found)
                else:
                    files.extend(expand_urls(local))
        step = max(1, int(rows_per_shard))
        for f in files:
            if f.lower().endswith(".arrow") and "://" not in f:
                # an Arrow IPC file (a Hugging Face datasets cache file): slices of its
                # memory-mapped table, as for a table
                t = _read_arrow(f)
                self._check_columns(t.schema, f)
                if self.class_names is None:
                    self.class_names = hf_class_names(t.schema, class_column)
                for a in range(0, t.num_rows, step):
                    b = min(t.num_rows, a + step)
                    name = f"{f}#rows={a}:{b}"
                    self._shards[name] = (f, (a, b), b - a, a)
                    self.names.append(name)
                continue
            pf = open_parquet(f, filesystem=filesystem)
            self._check_columns(pf.schema_arrow, f)
            if self.class_names is None:
                self.class_names = hf_class_names(pf.schema_arrow, class_column)
            md = pf.metadata
            first = 0
            for k in range(md.num_row_groups):
                n = md.row_group(k).num_rows
                name = f"{f}#rg={k}"
                self._shards[name] = (f, k, n, first)
                self.names.append(name)
                first += n
        if not self.names:
            raise ValueError("no rows in the Parquet / Arrow files")

    def _check_columns(self, schema, where):
        missing = [c for c in self.columns if schema.get_field_index(c) < 0]
        if missing:
            raise FormatError(f"{where!r} has no column {missing[0]!r} (columns: "
                              f"{', '.join(schema.names)})")

    def count(self, name) -> int:
        """Rows in shard ``name`` (from the file's metadata, read at construction)."""
        return self._shards[name][2]

    def random_access(self, name) -> bool:
        return True

    def classes(self):
        """Class names of the label column (a Hugging Face ``ClassLabel``), else None."""
        return self.class_names

    def open(self, name) -> ColumnShard:
        """The shard ``name``, its needed columns read now.

        Raises:
            FormatError: the data does not read (a damaged file).
        """
        import pyarrow

        path, part, _, first = self._shards[name]
        try:
            if path is None or isinstance(part, tuple):
                a, b = part
                whole = _as_arrow(self._table) if path is None else self._arrow(path)
                table = whole.select(self.columns).slice(a, b - a)
            else:
                table = self._file(path).read_row_group(part, columns=self.columns)
        except (pyarrow.ArrowException, OSError) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise FormatError(f"shard {name!r} does not read: {exc}") from None
        try:
            return ColumnShard(name, table, image_column=self.image_column,
                               label_column=self.label_column, key_column=self.key_column,
                               first_row=first, extra_columns=self.extra_columns)
        except TurboLoaderError:
            raise
        except (pyarrow.ArrowException, ValueError) as exc:
            raise FormatError(f"shard {name!r}: {exc}") from None

    def _file(self, path):
        """``path``'s ParquetFile, kept open per thread (its footer is read once, not once per
        row group: one request fewer per row group on a remote file); the 4 most recent."""
        files = getattr(self._local, "files", None)
        if files is None:
            files = self._local.files = {}
        pf = files.pop(path, None)
        if pf is None:
            pf = open_parquet(path, filesystem=self.filesystem)
            while len(files) >= 4:
                files.pop(next(iter(files)))
        files[path] = pf  # most recent last
        return pf

    def _arrow(self, path):
        """The memory-mapped table of Arrow file ``path``, kept per thread (the 4 most
        recent)."""
        tables = getattr(self._local, "tables", None)
        if tables is None:
            tables = self._local.tables = {}
        t = tables.pop(path, None)
        if t is None:
            t = _read_arrow(path)
            while len(tables) >= 4:
                tables.pop(next(iter(tables)))
        tables[path] = t
        return t

    def __getstate__(self):
        state = self.__dict__.copy()
        del state["_local"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._local = threading.local()

    def location(self, name) -> tuple:
        """``(file or None, row group or (start, stop))`` of shard ``name``."""
        path, part, _, _ = self._shards[name]
        return path, part


def _read_arrow(path):
    """The table of an Arrow IPC stream or file, memory-mapped (no copy).

    Raises:
        FormatError: not an Arrow IPC file. FileNotFoundError: no such file.
    """
    import pyarrow as pa

    try:
        try:
            return pa.ipc.open_stream(pa.memory_map(path)).read_all()
        except pa.ArrowInvalid:
            return pa.ipc.open_file(pa.memory_map(path)).read_all()
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError) as exc:
        raise FormatError(f"{path!r} is not a readable Arrow IPC file: {exc}") from None


def _as_arrow(table):
    """A ``pyarrow.Table`` from a pyarrow table or a ``datasets`` Table wrapper."""
    inner = getattr(table, "table", None)
    return inner if inner is not None else table
