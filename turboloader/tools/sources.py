"""The dataset layouts a conversion reads: folder, TAR shards, TBL, Parquet, manifests.

:func:`detect_format` names the layout of a path, :func:`open_source` opens it and
:func:`iter_samples` yields its :class:`Sample` records one at a time, in source order.
Samples that cannot be read are yielded as :class:`Skip` records (source, key, reason).
Names from input TARs are never trusted: absolute names and names with a ``..`` component
are skipped, and nothing is ever extracted by member name. The jobs that use them are in
:mod:`turboloader.tools.convert`.
"""

from __future__ import annotations

import os
import re
import tarfile
from dataclasses import dataclass

from turboloader.errors import SampleError, TurboLoaderError, UnreadableFileError
from turboloader.io.codec import Codec, detect_codec
from turboloader.io.manifest import int_label
from turboloader.io.tbl import MAGIC, TBLFile

__all__ = [
    "FORMATS",
    "SOURCE_FORMATS",
    "Sample",
    "Skip",
    "detect_format",
    "iter_samples",
    "open_source",
]

FORMATS = ("folder", "tar", "tbl")
#: formats read as sources only (written as one of FORMATS)
SOURCE_FORMATS = FORMATS + ("parquet", "manifest")
_PARQUET_EXT = (".parquet", ".parq", ".arrow")
_MANIFEST_EXT = (".csv", ".tsv", ".jsonl", ".ndjson", ".json", ".csv.gz", ".tsv.gz",
                 ".jsonl.gz", ".ndjson.gz", ".json.gz")
_IMAGE_EXT = {"jpg": Codec.JPEG, "jpeg": Codec.JPEG, "png": Codec.PNG, "webp": Codec.WEBP}
_EXT_OF = {Codec.JPEG: "jpg", Codec.PNG: "png", Codec.WEBP: "webp"}


@dataclass
class Sample:
    """One sample read from a dataset: its bytes, label and where it came from.

    ``data`` is an encoded image (``codec`` JPEG/PNG/WebP) or, for ``Codec.RAW``, RGB pixels
    of ``width x height``. ``source`` names the file or shard, ``offset`` the byte offset of
    the image inside it (0 for folders).
    """

    key: str
    data: object
    label: int | None
    codec: Codec
    source: str
    offset: int = 0
    width: int = 0
    height: int = 0
    reencoded: bool = False
    size_in: int = 0
    seekable: bool = False
    not_seekable: str | None = None   # why a JPEG could not be rewritten with restart markers


@dataclass
class Skip:
    """A sample that could not be used: where it is and why."""

    source: str
    key: str | None
    reason: str





def _is_tbl_file(path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(8) == MAGIC
    except OSError:
        return False


def _tar_files(directory):
    from turboloader.io.shards import list_shards

    try:
        return list_shards(directory)
    except FileNotFoundError:
        return []


def detect_format(path) -> str:
    """``"tbl"``, ``"tar"`` or ``"folder"`` for an existing dataset path (or shard pattern).

    A directory that holds ``.tar`` files and no subdirectories is a set of TAR shards;
    any other directory is an ImageFolder tree. Brace patterns and globs are TAR shards.

    Raises:
        FileNotFoundError: nothing at ``path``.
        ValueError: an existing file that is neither TBL nor TAR.

    Example:
        >>> detect_format("data/train.tbl")                    # doctest: +SKIP
        'tbl'
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        entries = os.listdir(path)
        has_dirs = any(os.path.isdir(os.path.join(path, e)) for e in entries)
        return "tar" if _tar_files(path) and not has_dirs else "folder"
    if os.path.isfile(path):
        if _is_tbl_file(path):
            return "tbl"
        if path.lower().endswith(_PARQUET_EXT):
            return "parquet"
        if path.lower().endswith(_MANIFEST_EXT):
            return "manifest"
        if path.lower().endswith((".tar", ".tar.gz", ".tgz")) or tarfile.is_tarfile(path):
            return "tar"
        raise ValueError(f"{path!r} is neither a TBL file, a TAR archive nor a directory")
    if os.path.exists(path):
        raise ValueError(f"{path!r} is not a regular file or directory (a FIFO, device or "
                         f"socket); only regular files are read")
    if "{" in path or any(c in path for c in "*?["):
        return "parquet" if path.lower().endswith(_PARQUET_EXT) else "tar"
    raise FileNotFoundError(f"no such file or directory: {path!r}")


def _unsafe_name(name: str) -> str | None:
    """Why a member name must not be used as a path, or None if it is a plain relative name."""
    if not name or "\0" in name:
        return "empty name or NUL byte in name"
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "absolute member name"
    parts = re.split(r"[/\\]", name)
    if ".." in parts:
        return "member name with a '..' component"
    return None


class _FolderSource:
    """An ImageFolder tree. Symlinks are followed (as torchvision's ``ImageFolder`` and
    ``os.walk(followlinks=True)`` do), but every directory is entered once, by its
    ``(st_dev, st_ino)``: a symlink loop, or a second link to a directory already read, is a
    listed skip, so no image is read twice and the walk ends. Only regular files are read,
    with the member-size limit (``turboloader.io.files.read_file``)."""

    def __init__(self, root):
        self.root = os.fspath(root)
        self.classes = sorted(e.name for e in os.scandir(self.root) if e.is_dir())
        if not self.classes:
            raise FileNotFoundError(f"{self.root!r} has no class directories (expected "
                                    f"root/<class>/<image>)")
        files = []
        self.walk_skips = []
        seen = set()
        for label, cls in enumerate(self.classes):
            base = os.path.join(self.root, cls)
            for dirpath, dirnames, filenames in os.walk(base, followlinks=True):
                st = os.stat(dirpath)
                if (st.st_dev, st.st_ino) in seen:
                    dirnames[:] = []
                    self.walk_skips.append(Skip(dirpath, None, (
                        "UnreadableFileError: directory already read (a symlink loop or a "
                        "second link to it); not read again")))
                    continue
                seen.add((st.st_dev, st.st_ino))
                dirnames.sort()
                for name in sorted(filenames):
                    files.append((os.path.join(dirpath, name), label))
        self.files = files

    def shuffle(self, seed):
        import random

        random.Random(seed).shuffle(self.files)

    def __len__(self):
        return len(self.files)

    def __iter__(self):
        from turboloader.io.files import read_file

        yield from self.walk_skips
        for path, label in self.files:
            rel = os.path.relpath(path, self.root).replace(os.sep, "/")
            stem, dot, ext = rel.rpartition(".")
            codec = _IMAGE_EXT.get(ext.lower()) if dot else None
            if codec is None:
                yield Skip(path, rel, "not an image file (extension is not .jpg, .jpeg, "
                                      ".png or .webp)")
                continue
            try:
                data = read_file(path)
            except (UnreadableFileError, OSError) as exc:
                yield Skip(path, rel, f"{type(exc).__name__}: {exc}")
                continue
            yield Sample(stem, data, label, codec, path)


_NO_END = ("TarFormatError: no end-of-archive block: the archive may have been cut at a "
           "member boundary, so members may be missing")


class _TarSource:
    def __init__(self, urls):
        from turboloader.io.shards import expand_urls

        self.urls = expand_urls(urls)   # a directory: its shards, sorted
        for u in self.urls:
            if not os.path.exists(u):
                raise FileNotFoundError(f"TAR shard not found: {u!r}")
        from turboloader.io.shards import read_classes

        self.classes = read_classes(self.urls)
        self._sizes = None
        self.strict_end = False  # a shard without end-of-archive block is listed (verify)

    def __len__(self):
        if self._sizes is None:
            from turboloader.io.shards import count_samples

            self._sizes = [count_samples(u) for u in self.urls]
        return sum(self._sizes)

    def shuffle(self, seed):
        """Read the samples of all shards in one seeded random order (local ``.tar``
        shards; compressed or remote ones keep their order)."""
        import random

        from turboloader.io.remote import is_remote
        from turboloader.io.shards import is_stream

        if any(is_remote(u) or is_stream(u) for u in self.urls):
            return
        from turboloader.io.shards import count_samples

        order, sizes = [], []
        for u, url in enumerate(self.urls):
            try:
                n = count_samples(url)
            except TurboLoaderError:
                n = 1  # opening it again in _iter_shuffled lists the shard as skipped
            else:
                sizes.append(n)
            order += [(u, j) for j in range(n)]
        if len(sizes) == len(self.urls):
            self._sizes = sizes
        random.Random(seed).shuffle(order)
        self._order = order

    def _record(self, url, rec):
        """The Sample of one shard record, or the Skip saying why it is unusable."""
        from turboloader.io.shards import parse_label

        unsafe = _unsafe_name(rec.key)
        if unsafe:
            return Skip(url, rec.key, f"{unsafe}: {rec.member or rec.key!r}")
        if rec.problem:
            return Skip(url, rec.key, rec.problem)
        if rec.image is None:
            return Skip(url, rec.key, "no image member (.jpg, .jpeg, .png, .webp)")
        label = None
        if rec.label is not None:
            try:
                label = parse_label(rec.label, rec.label_ext, "label")
            except (SampleError, ValueError, OverflowError) as exc:
                return Skip(url, rec.key, f"{type(exc).__name__}: {exc}")
            if isinstance(label, bool) or not isinstance(label, int):
                return Skip(url, rec.key, f"label {label!r} is not an int")
        codec = _IMAGE_EXT.get(rec.image_ext.rsplit(".", 1)[-1], Codec.BYTES)
        return Sample(rec.key, rec.image, label, codec, url, rec.offset)

    def _iter_shuffled(self):
        from turboloader.io.shards import open_shard

        shards = {}
        try:
            for u, j in self._order:
                url = self.urls[u]
                if u not in shards:
                    try:
                        shards[u] = open_shard(url)
                    except TurboLoaderError as exc:
                        shards[u] = None
                        yield Skip(url, None, f"{type(exc).__name__}: {exc} (whole shard "
                                              f"skipped)")
                    else:
                        if self.strict_end and getattr(shards[u]._index, "complete", True) \
                                is False:
                            yield Skip(url, None, _NO_END)
                if shards[u] is None:
                    continue
                try:
                    rec = shards[u].sample(j)
                except (TurboLoaderError, IndexError) as exc:
                    yield Skip(url, None, f"{type(exc).__name__}: {exc} (sample {j})")
                    continue
                yield self._record(url, rec)
        finally:
            for shard in shards.values():
                if shard is not None:
                    shard.close()

    def __iter__(self):
        from turboloader.io.shards import open_shard

        if getattr(self, "_order", None) is not None:
            yield from self._iter_shuffled()
            return
        for url in self.urls:
            try:
                shard = open_shard(url)
                n = len(shard) if hasattr(shard, "__len__") else None
            except TurboLoaderError as exc:
                yield Skip(url, None, f"{type(exc).__name__}: {exc} (whole shard skipped)")
                continue
            if self.strict_end and getattr(getattr(shard, "_index", None), "complete", True) \
                    is False:
                yield Skip(url, None, _NO_END)
            try:
                j = 0
                while n is None or j < n:
                    try:
                        rec = shard.sample(j)
                    except IndexError:
                        break
                    except TurboLoaderError as exc:
                        yield Skip(url, None, f"{type(exc).__name__}: {exc} (rest of shard "
                                              f"skipped)")
                        break
                    j += 1
                    yield self._record(url, rec)
            finally:
                shard.close()


class _TBLSource:
    def __init__(self, path, *, check_crc=True):
        self.path = os.fspath(path)
        self.file = TBLFile(self.path, check_crc=check_crc)
        self.classes = self.file.metadata.get("classes")

    def __len__(self):
        return len(self.file)

    def shuffle(self, seed):
        import random

        self._order = list(range(len(self.file)))
        random.Random(seed).shuffle(self._order)

    def __iter__(self):
        f = self.file
        index = f.index
        for i in getattr(self, "_order", None) or range(len(f)):
            try:
                rec = f.record(i)
            except TurboLoaderError as exc:
                yield Skip(self.path, f.key(i), f"{type(exc).__name__}: {exc}")
                continue
            yield Sample(rec.key, rec.data, rec.label, rec.codec, self.path,
                         int(index["offset"][i]), rec.width, rec.height)


def _column_int(value):
    """A label column's value (a TBL / Parquet / dataset reader's) as an int, or None when it
    is not one: a manifest's rule (:func:`turboloader.io.manifest.int_label`), plus floats
    with an integral value (a column read as float64)."""
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    return int_label(value)


class _ParquetSource:
    """Parquet files (or Arrow IPC files, e.g. Hugging Face's cache files): the image
    column's bytes (binary, or Hugging Face's ``{bytes, path}`` struct) and an int label
    column, row groups in order (:class:`turboloader.io.parquet.ParquetShards`)."""

    def __init__(self, path, *, image_column="image", label_column="label"):
        from turboloader.io.parquet import ParquetShards

        self.path = os.fspath(path)
        self.shards = ParquetShards(self.path, image_column=image_column,
                                    label_column=label_column)
        self.names = list(self.shards.names)
        self.classes = self.shards.classes()
        self._order = None

    def __len__(self):
        return sum(self.shards.count(n) for n in self.names)

    def shuffle(self, seed):
        import random

        self._order = [(n, j) for n in self.names for j in range(self.shards.count(n))]
        random.Random(seed).shuffle(self._order)

    def _items(self):
        if self._order is not None:
            yield from self._order
            return
        for n in self.names:
            for j in range(self.shards.count(n)):
                yield n, j

    def __iter__(self):
        opened = {}
        for name, j in self._items():
            if name not in opened:
                reader = self.shards.open(name)
                # keys unique across files and row groups: the shard's name, then the row's
                prefix = re.sub(r"[^A-Za-z0-9_-]+", "_", os.path.basename(name))
                opened[name] = (reader, reader.labels()[0], prefix)
            reader, labels, prefix = opened[name]
            try:
                rec = reader.sample(j)
            except TurboLoaderError as exc:
                yield Skip(name, None, f"{type(exc).__name__}: {exc}")
                continue
            if rec.problem or rec.image is None:
                yield Skip(name, rec.key, f"SampleError: {rec.problem or 'no image'}")
                continue
            label = labels[j] if labels is not None else None
            value = _column_int(label)
            if label is not None and value is None:
                yield Skip(name, rec.key, f"SampleError: label {label!r} is not an integer "
                                          f"(convert writes int labels)")
                continue
            data = bytes(rec.image)
            codec = detect_codec(data)
            yield Sample(f"{prefix}-{rec.key}", data, value, codec, name, int(rec.offset))


class _ManifestSource:
    """A CSV / JSON Lines manifest of ``path,label`` rows (:func:`turboloader.io.manifest.
    read_manifest`), images relative to the manifest's folder; string labels are class
    names (sorted, as ``ManifestDataset`` indexes them)."""

    def __init__(self, path, *, path_column="path", label_column="label"):
        from turboloader.io.manifest import read_manifest

        self.path = os.fspath(path)
        self.root = os.path.dirname(os.path.abspath(self.path))
        rows = read_manifest(self.path, path_column=path_column, label_column=label_column)
        raw = [r.get(label_column) for r in rows]
        self.classes = None
        if any(v is not None and int_label(v) is None for v in raw):
            self.classes = sorted({str(v) for v in raw if v is not None})
            index = {c: i for i, c in enumerate(self.classes)}
            labels = [None if v is None else index[str(v)] for v in raw]
        else:
            labels = [int_label(v) for v in raw]
        self.items = [(r[path_column], y) for r, y in zip(rows, labels)]

    def __len__(self):
        return len(self.items)

    def shuffle(self, seed):
        import random

        random.Random(seed).shuffle(self.items)

    def __iter__(self):
        from turboloader.io.files import read_file

        for rel, label in self.items:
            path = rel if os.path.isabs(rel) else os.path.join(self.root, rel)
            stem = os.path.splitext(rel.replace(os.sep, "/").lstrip("/"))[0]
            try:
                data = read_file(path)
            except (UnreadableFileError, OSError) as exc:
                yield Skip(path, stem, f"{type(exc).__name__}: {exc}")
                continue
            codec = detect_codec(data)
            if codec not in _EXT_OF:
                yield Skip(path, stem, "not an image file (JPEG, PNG or WebP)")
                continue
            yield Sample(stem, data, label, codec, path)


def open_source(path, fmt=None, *, check_crc=True, image_column="image",
                label_column="label"):
    """A reader of ``path`` as ``fmt`` (detected when None): iterable of Sample / Skip,
    with ``len()`` and ``classes`` (None when the format does not name classes).
    ``image_column`` / ``label_column``: the columns of Parquet files and manifests (a
    manifest's image column is its path column)."""
    fmt = fmt or detect_format(path)
    if fmt == "folder":
        return _FolderSource(path)
    if fmt == "tar":
        return _TarSource(path)
    if fmt == "tbl":
        return _TBLSource(path, check_crc=check_crc)
    if fmt == "parquet":
        return _ParquetSource(path, image_column=image_column, label_column=label_column)
    if fmt == "manifest":
        return _ManifestSource(path, path_column="path" if image_column == "image"
                               else image_column, label_column=label_column)
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(SOURCE_FORMATS)}")


def iter_samples(path, fmt=None):
    """Yield the readable samples of a dataset as :class:`Sample` (bad ones are left out).

    Example:
        >>> for s in iter_samples("shards/"):               # doctest: +SKIP
        ...     print(s.key, s.label, len(s.data))
    """
    for item in open_source(path, fmt):
        if isinstance(item, Sample):
            yield item
