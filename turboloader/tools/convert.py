"""Conversion jobs behind the ``turboloader`` command line: folder / TAR shards / TBL.

Three dataset layouts, read and written by this module:

* ``folder``: a torchvision ``ImageFolder`` tree, ``root/<class>/<file>.jpg``; the label is
  the index of the class directory in sorted order, the key the path without extension.
* ``tar``: WebDataset-style TAR shards, members ``<key>.jpg`` (or ``.jpeg``/``.png``/
  ``.webp``) and ``<key>.cls`` (the label as decimal text) or ``<key>.json``.
* ``tbl``: a :mod:`turboloader.io.tbl` file.

Every job streams: samples are read one at a time, checked (the image header must parse),
optionally re-encoded (``max_short_side``/``quality``, or ``codec="raw"``), and written, in
source order. Bad samples are skipped and listed with their shard, key and reason (or, with
``strict=True``, the first one stops the job). Names from input TARs are never trusted:
absolute names and names with a ``..`` component are skipped, and nothing is ever
extracted by member name.
"""

from __future__ import annotations

import collections
import io
import os
import re
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from turboloader.errors import (
    ManifestError,
    SampleError,
    TurboLoaderError,
    UnreadableFileError,
)
from turboloader.decode import decode_image
from turboloader.decode.executor import resample_into_slot
from turboloader.decode.sizes import resized_sizes, shrunk_size
from turboloader.io.codec import Codec, detect_codec, image_size
from turboloader.io.tbl import MAGIC, TBLFile, TBLWriter

__all__ = [
    "ConvertReport",
    "FORMATS",
    "SOURCE_FORMATS",
    "MANIFEST",
    "Progress",
    "Sample",
    "Skip",
    "check_manifest",
    "convert",
    "detect_format",
    "find_manifest",
    "inspect_dataset",
    "iter_samples",
    "open_source",
    "verify_dataset",
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


def _shown_key(key):
    """A sample key for a summary line: repr'd, long ones cut."""
    return repr(key) if key is None or len(key) <= 80 else \
        f"{key[:60]!r}... ({len(key)} characters)"


@dataclass
class ConvertReport:
    """What a conversion did.

    Attributes:
        written: samples written. skipped: :class:`Skip` entries (source, key, reason).
        bytes_in / bytes_out: image bytes read / written. reencoded: samples re-encoded.
        seekable: JPEGs rewritten with restart markers (``seekable=True``);
        seekable_kept: JPEGs that could not be rewritten (corrupt data) and were copied as is;
        ``not_seekable`` lists them as :class:`Skip` entries (source, key, libjpeg's reason),
        although they were written.
        seconds: wall time. outputs: the files (or the directory) written.
    """

    written: int = 0
    skipped: list = field(default_factory=list)
    bytes_in: int = 0
    bytes_out: int = 0
    reencoded: int = 0
    seekable: int = 0
    seekable_kept: int = 0
    not_seekable: list = field(default_factory=list)
    seconds: float = 0.0
    outputs: list = field(default_factory=list)

    def summary(self, *, max_listed=20) -> str:
        """A human-readable multi-line summary, with skip reasons grouped and listed."""
        rate = self.written / self.seconds if self.seconds > 0 else 0.0
        lines = [f"samples written: {self.written} ({rate:.0f} samples/s, {self.seconds:.1f} s)",
                 f"bytes: {_human(self.bytes_in)} read, {_human(self.bytes_out)} written"
                 + (f", {self.reencoded} images re-encoded" if self.reencoded else "")]
        if self.seekable or self.seekable_kept:
            lines.append(f"seekable: {self.seekable} JPEGs rewritten with restart markers"
                         + (f", {self.seekable_kept} copied as is (could not be rewritten)"
                            if self.seekable_kept else ""))
            for s in self.not_seekable[:max_listed]:
                lines.append(f"  - {s.source}: key {_shown_key(s.key)}: {s.reason[:300]}")
            if len(self.not_seekable) > max_listed:
                lines.append(f"  ... and {len(self.not_seekable) - max_listed} more")
        if len(self.outputs) == 1:
            lines.append(f"output: {self.outputs[0]}")
        elif self.outputs:
            lines.append(f"outputs: {len(self.outputs)} files, {self.outputs[0]} .. "
                         f"{self.outputs[-1]}")
        lines.append(f"skipped: {len(self.skipped)}")
        if self.skipped:
            reasons = collections.Counter(_reason_class(s.reason) for s in self.skipped)
            for reason, n in reasons.most_common():
                lines.append(f"  {n:6d}  {reason}")
            for s in self.skipped[:max_listed]:
                lines.append(f"  - {s.source}: key {_shown_key(s.key)}: {s.reason[:300]}")
            if len(self.skipped) > max_listed:
                lines.append(f"  ... and {len(self.skipped) - max_listed} more")
        return "\n".join(lines)


def _reason_class(reason: str) -> str:
    """The reason without sample-specific details, for grouping."""
    head = reason.split(":", 2)
    text = ":".join(head[:2]) if len(head) > 1 else reason
    return re.sub(r"'[^']*'|\d+", "_", text)[:100]


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


# -- formats and sources ---------------------------------------------------------------------


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


def _int_label(value):
    """``value`` as an int label, or None when it is not one."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


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
            value = _int_label(label)
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
        if any(v is not None and _int_label(v) is None for v in raw):
            self.classes = sorted({str(v) for v in raw if v is not None})
            index = {c: i for i, c in enumerate(self.classes)}
            labels = [None if v is None else index[str(v)] for v in raw]
        else:
            labels = [_int_label(v) for v in raw]
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


# -- per-sample work -------------------------------------------------------------------------


class _Processor:
    """Check a sample's header and re-encode it when asked. Thread-safe (no shared state)."""

    def __init__(self, *, max_short_side=None, quality=90, codec=None, seekable=False,
                 restart_mcus=0, max_side=None):
        if not 0 <= int(restart_mcus) <= 65535:
            raise ValueError(f"restart_mcus must be in 0..65535, got {restart_mcus}")
        self.seekable = bool(seekable)
        self.restart_mcus = int(restart_mcus)
        if max_short_side is not None and int(max_short_side) < 1:
            raise ValueError(f"max_short_side must be >= 1, got {max_short_side}")
        if max_side is not None and int(max_side) < 1:
            raise ValueError(f"max_side must be >= 1, got {max_side}")
        self.max_side = None if max_side is None else int(max_side)
        if not 1 <= int(quality) <= 100:
            raise ValueError(f"quality must be in 1..100, got {quality}")
        if codec not in (None, "keep", "raw", "jpeg"):
            raise ValueError(f"codec must be 'keep', 'jpeg' or 'raw', got {codec!r}")
        self.max_short_side = None if max_short_side is None else int(max_short_side)
        self.quality = int(quality)
        self.codec = None if codec == "keep" else codec

    @property
    def reencodes(self) -> bool:
        return bool(self.max_short_side or self.max_side or self.codec or self.seekable)

    def _pixels(self, s):
        """Decoded RGB pixels of a sample, shrunk to max_short_side / max_side."""
        w, h = s.width, s.height
        # Full-resolution decode: a DCT-scaled one is faster but measurably different
        # (mean 2-5 levels on grainy images), and conversion runs once.
        img = np.ascontiguousarray(decode_image(s.data, codec=s.codec, size=(h, w)))
        size = _shrunk_size(h, w, self.max_short_side, self.max_side)
        if size != (h, w):
            return _shrink_to(img, size)
        return img

    def __call__(self, s):
        """The sample ready to write, with width/height set; Skip if it is unusable."""
        s.size_in = len(s.data)
        try:
            if s.codec != Codec.RAW:
                codec = detect_codec(s.data)
                if codec == Codec.BYTES:
                    return Skip(s.source, s.key, "not a JPEG, PNG or WebP image (by content)")
                s.codec = codec
                if not (s.width and s.height):
                    s.width, s.height = image_size(s.data, codec)
            big = _shrunk_size(s.height, s.width, self.max_short_side,
                               self.max_side) != (s.height, s.width)
            if self.codec == "raw" and s.codec != Codec.RAW or big or \
                    (self.codec == "jpeg" and s.codec != Codec.JPEG):
                img = self._pixels(s)
                s.height, s.width = img.shape[:2]
                if self.codec == "raw":
                    s.data, s.codec = img.reshape(-1), Codec.RAW
                else:
                    s.data, s.codec = _encode_jpeg(img, self.quality), Codec.JPEG
                s.reencoded = True
            if self.seekable and s.codec == Codec.JPEG:
                self._make_seekable(s)
        except TurboLoaderError as exc:
            return Skip(s.source, s.key, f"{type(exc).__name__}: {exc}")
        return s


    def _make_seekable(self, s):
        """Rewrite a JPEG sample losslessly with restart markers (same DCT coefficients,
        optimized Huffman tables); a JPEG libjpeg reports as corrupt is left as it is."""
        from turboloader._native import _jpeg
        from turboloader.errors import DecodeError

        try:
            s.data, _ = _jpeg.transcode_restart(s.data, restart_mcus=self.restart_mcus)
        except DecodeError as exc:
            s.not_seekable = f"{type(exc).__name__}: {exc}"
            return
        s.seekable = True


def _shrunk_size(h, w, short_side=None, max_side=None):
    """``(h, w)`` after shrinking (never enlarging) to a shorter side of ``short_side``
    (torchvision's ``Resize(short_side)``), then to a longer side of at most ``max_side``
    (torchvision's ``Resize(None, max_size=max_side)``, never below 1 pixel)."""
    h, w = shrunk_size(h, w, short_side)
    if max_side and max(h, w) > max_side:
        h, w = (max(1, int(v)) for v in resized_sizes(None, [[h, w]], max_side)[0])
    return h, w


def _shrink(img, short_side):
    """``img`` (HWC uint8) bicubic-resized so that its shorter side is ``short_side``
    (torchvision's rule for an int size), antialiased: the resample-into-slot entry into a
    uint8 CHW slot, returned as HWC."""
    return _shrink_to(img, resized_sizes([short_side], [img.shape[:2]])[0].tolist())


def _shrink_to(img, size):
    """``img`` (HWC uint8) antialiased-bicubic-resized to ``size`` (h, w), as HWC."""
    from turboloader.decode import Interpolation

    h, w = img.shape[:2]
    slot = np.empty((3, *size), np.uint8)
    resample_into_slot(img, slot, box=(0, 0, w, h), clip=True, filt=int(Interpolation.BICUBIC))
    return np.ascontiguousarray(slot.transpose(1, 2, 0))


def _encode_jpeg(img, quality):
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def _encode_png(img):
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "PNG", compress_level=1)
    return buf.getvalue()


# -- manifests -------------------------------------------------------------------------------

MANIFEST = "manifest.json"


def _sha256_file(path):
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_json_atomic(path, obj):
    """Write ``obj`` as JSON to ``path`` through a temporary file and a rename, so a reader
    sees the old file or the whole new one, never a partial one."""
    import json

    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _manifest(layout, entries, *, classes, complete, shuffle_seed):
    return {"format": "turboloader-manifest", "version": 1, "layout": layout,
            "complete": bool(complete), "samples": sum(e["samples"] for e in entries),
            "classes": None if classes is None else list(classes),
            "shuffle_seed": shuffle_seed, "shards": entries}


def _folder_digest(directory):
    """``(samples, bytes, sha256)`` of the image files directly inside ``directory``: the
    hash runs over the sorted names and each file's bytes."""
    import hashlib

    h = hashlib.sha256()
    n = nbytes = 0
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.rpartition(".")[2].lower() not in _IMAGE_EXT or not os.path.isfile(path):
            continue
        from turboloader.io.files import read_file

        data = read_file(path)
        h.update(name.encode("utf-8", "surrogateescape") + b"\0")
        h.update(hashlib.sha256(data).digest())
        n += 1
        nbytes += len(data)
    return n, nbytes, h.hexdigest()


def _manifests_in(directory):
    """The TAR manifests in ``directory``: ``manifest.json`` and ``<prefix>manifest.json``
    (one per shard set), ``<shard>.tar.manifest.json`` (a single-file output)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(os.path.join(directory, n) for n in names if n.endswith(MANIFEST))


def _manifest_of_shard(shard):
    from turboloader.io.shards import _shard_set_file

    own = os.path.abspath(os.fspath(shard)) + "." + MANIFEST
    return own if os.path.isfile(own) else _shard_set_file(shard, MANIFEST)


def find_manifest(path, fmt=None):
    """The manifest that describes the dataset at ``path`` (a converted folder, a shard
    directory, a shard, a shard pattern), or None if there is none. A shard's manifest is
    its own ``<shard>.tar.manifest.json``, else its shard set's ``<prefix>manifest.json``
    (``train-manifest.json`` for ``train-00003.tar``; ``manifest.json`` for a directory
    output); a directory's is its ``manifest.json``, else its first shard set's."""
    path = os.fspath(path)
    if os.path.isdir(path):
        own = os.path.join(path, MANIFEST)
        if os.path.isfile(own) or (fmt or detect_format(path)) == "folder":
            return own if os.path.isfile(own) else None
        found = _manifests_in(path)
        return found[0] if found else None
    try:
        first = _TarSource(path).urls[0]
    except (OSError, ValueError):
        first = path
    return _manifest_of_shard(first)


def _load_manifest(found):
    import json

    with open(found, encoding="utf-8-sig") as f:
        try:
            man = json.load(f)
        except ValueError as exc:
            raise ManifestError(f"{found!r} is not valid JSON: {exc}") from None
    if not isinstance(man, dict) or man.get("format") != "turboloader-manifest":
        raise ManifestError(f"{found!r} is not a turboloader manifest")
    if not man.get("complete"):
        raise ManifestError(f"{found!r}: the conversion that wrote this output did not finish "
                            f"(killed or failed); the output is incomplete")
    return man


def _check_entries(found, man):
    """Every shard (class directory) ``man`` lists matches; returns their absolute paths."""
    base = os.path.dirname(found)
    listed = set()
    for e in man["shards"]:
        p = os.path.join(base, e["path"])
        listed.add(os.path.abspath(p))
        if man["layout"] == "folder":
            if not os.path.isdir(p):
                raise ManifestError(f"{found!r}: class directory {e['path']!r} is missing")
            got = dict(zip(("samples", "bytes", "sha256"), _folder_digest(p)))
        else:
            if not os.path.isfile(p):
                raise ManifestError(f"{found!r}: shard {e['path']!r} is missing")
            from turboloader.io.shards import count_samples

            got = {"bytes": os.path.getsize(p)}
            if got["bytes"] == e["bytes"]:
                got["sha256"] = _sha256_file(p)
                if got["sha256"] == e["sha256"]:
                    got["samples"] = count_samples(p)
        for k in ("samples", "bytes", "sha256"):
            if k in got and got[k] != e[k]:
                raise ManifestError(f"{found!r}: {e['path']!r}: {k} is {got[k]}, the manifest "
                                    f"records {e[k]}")
    return listed


def check_manifest(path, fmt=None):
    """Check a converted folder or TAR-shard output against its manifest.

    Every shard (TAR) or class directory (folder) listed must exist with the recorded
    sample count, size and SHA-256, and every shard asked about (all of a directory's) must
    be listed in its manifest. A directory holding several shard sets (``train-*.tar`` and
    ``val-*.tar``, each with its ``<prefix>manifest.json``) is checked set by set.

    Returns:
        The manifest (a dict); for several shard sets, their union (``samples`` summed,
        ``shards`` concatenated, ``manifests``: their paths).

    Raises:
        ManifestError: no manifest, a manifest of an unfinished conversion, or a mismatch
            (the message names the shard and the field).

    Example:
        >>> check_manifest("out/shards")["samples"]       # doctest: +SKIP
        3000
    """
    fmt = fmt or detect_format(path)
    path = os.fspath(path)
    missing = ManifestError(
        f"{path!r} has no {MANIFEST}: its completeness cannot be checked (a "
        f"conversion killed before the end leaves no manifest); re-run 'turboloader "
        f"convert', or pass --no-manifest to verify data not written by it")
    if fmt == "folder":
        found = find_manifest(path, fmt)
        if found is None:
            raise missing
        man = _load_manifest(found)
        _check_entries(found, man)
        return man
    urls = _TarSource(path).urls
    per_shard = {u: _manifest_of_shard(u) for u in urls}
    found = set(per_shard.values()) - {None}
    if os.path.isdir(path):
        found |= set(_manifests_in(path))
    if not found:  # shards beside other outputs' manifests are in none of them
        found = {m for u in urls for m in _manifests_in(os.path.dirname(os.path.abspath(u)))}
    if not found:
        raise missing
    mans = {}
    for f in sorted(found):
        man = _load_manifest(f)
        mans[f] = (man, _check_entries(f, man))
    for u, f in per_shard.items():
        if f is None or os.path.abspath(u) not in mans[f][1]:
            where = f or ", ".join(sorted(mans))
            raise ManifestError(f"{where!r}: shard {u!r} is not in the manifest")
    if len(mans) == 1:
        return next(iter(mans.values()))[0]
    all_ = [m for m, _ in mans.values()]
    classes = [m.get("classes") for m in all_]
    return {"format": "turboloader-manifest", "version": 1, "layout": "tar",
            "complete": True, "samples": sum(m["samples"] for m in all_),
            "classes": classes[0] if all(c == classes[0] for c in classes) else None,
            "shards": [e for m in all_ for e in m["shards"]], "manifests": sorted(mans)}


# -- sinks -----------------------------------------------------------------------------------


class _TBLSink:
    def __init__(self, path, *, classes, metadata, compression, overwrite):
        meta = dict(metadata)
        if classes is not None:
            meta["classes"] = list(classes)
        self.writer = TBLWriter(path, compression=compression, metadata=meta,
                                overwrite=overwrite)
        self.outputs = [os.fspath(path)]

    def write(self, s):
        before = self.writer._pos
        try:
            self.writer.write(s.data, key=s.key, label=s.label, codec=s.codec, width=s.width,
                              height=s.height)
        except (ValueError, OverflowError) as exc:  # a label or key TBL cannot store
            if isinstance(exc, TurboLoaderError):
                raise
            raise SampleError(f"cannot be stored in TBL: {exc}") from exc
        return self.writer._pos - before

    def close(self):
        self.writer.close()

    def abort(self):
        self.writer.abort()


def _tar_info(name, size):
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


class _TarSink:
    """WebDataset shards ``pattern % i``; each written to a temporary name and renamed."""

    def __init__(self, pattern, *, shard_size, overwrite, classes=None, shuffle_seed=None,
                 prefix=None):
        self.pattern = pattern
        self.shard_size = shard_size
        self.overwrite = overwrite
        self.outputs = []
        self._tar = self._tmp = None
        self._count = 0
        self.directory = directory = os.path.dirname(os.path.abspath(pattern))
        os.makedirs(directory, exist_ok=True)
        self.classes = classes
        self.shuffle_seed = shuffle_seed
        self._entries = []
        # an unfinished conversion leaves this "complete": false manifest behind. One
        # manifest (and classes.json) per shard set: <prefix>manifest.json for the pattern
        # <prefix>%05d.tar (train-manifest.json; manifest.json for a directory output), so
        # the splits of one dataset share a folder; a single x.tar gets x.tar.manifest.json
        if "%" in pattern:
            if prefix is None:
                base = os.path.basename(pattern)
                prefix = base[:base.index("%")]
            self._manifest = os.path.join(directory, prefix + MANIFEST)
            self._classes = os.path.join(directory, prefix + "classes.json")
        else:
            self._manifest = os.path.abspath(pattern) + "." + MANIFEST
            self._classes = os.path.join(directory, "classes.json")
        if not overwrite and os.path.exists(self._manifest):
            # checked before anything is written: a conversion refused here must not
            # leave the existing output's manifest marked unfinished
            raise FileExistsError(f"{self._manifest!r} exists: another conversion wrote "
                                  f"into {pattern!r} (use --overwrite, or overwrite=True, "
                                  f"to replace it, or another output name)")
        _write_json_atomic(self._manifest, _manifest("tar", [], classes=classes, complete=False,
                                                     shuffle_seed=shuffle_seed))

    def _open(self):
        path = self.pattern % len(self.outputs) if "%" in self.pattern else self.pattern
        if not self.overwrite and os.path.exists(path):
            raise FileExistsError(f"{path!r} exists (use --overwrite, or overwrite=True, to "
                                  f"replace it)")
        self._path = path
        self._tmp = f"{path}.tmp-{os.getpid()}"
        self._tar = tarfile.open(self._tmp, "w", format=tarfile.GNU_FORMAT)
        self._count = 0

    def _finish(self):
        if self._tar is not None:
            self._tar.close()
            os.replace(self._tmp, self._path)
            self.outputs.append(self._path)
            self._tar = None
            self._entries.append({"path": os.path.relpath(self._path, self.directory),
                                  "samples": self._count,
                                  "bytes": os.path.getsize(self._path),
                                  "sha256": _sha256_file(self._path)})

    def write(self, s):
        if s.codec == Codec.RAW:
            data, ext = _encode_png(np.frombuffer(s.data, np.uint8).reshape(s.height, s.width, 3)), "png"
        else:
            data, ext = s.data, _EXT_OF[s.codec]
        unsafe = _unsafe_name(s.key)
        if unsafe:
            raise SampleError(f"{unsafe}: {s.key!r}")
        if self._tar is None:
            self._open()
        self._tar.addfile(_tar_info(f"{s.key}.{ext}", len(data)), io.BytesIO(data))
        n = len(data)
        if s.label is not None:
            cls = str(s.label).encode("ascii")
            self._tar.addfile(_tar_info(f"{s.key}.cls", len(cls)), io.BytesIO(cls))
        self._count += 1
        if self.shard_size and self._count >= self.shard_size and "%" in self.pattern:
            self._finish()
        return n

    def close(self):
        self._finish()
        if self.classes is not None:
            _write_json_atomic(self._classes, list(self.classes))
        # last, and atomically: its presence says every shard above is complete
        _write_json_atomic(self._manifest, _manifest("tar", self._entries, classes=self.classes,
                                                     complete=True,
                                                     shuffle_seed=self.shuffle_seed))

    def abort(self):
        if self._tar is not None:
            self._tar.close()
            os.unlink(self._tmp)
            self._tar = None


class _FolderSink:
    """``root/<class>/<basename>.<ext>``; class names from the source, else ``class_NNNNN``."""

    def __init__(self, root, *, classes, overwrite, shuffle_seed=None):
        self.root = os.fspath(root)
        if os.path.isdir(self.root) and os.listdir(self.root) and not overwrite:
            raise FileExistsError(f"{self.root!r} is not empty (use --overwrite, or "
                                  f"overwrite=True, to write into it)")
        os.makedirs(self.root, exist_ok=True)
        self.classes = classes
        self.outputs = [self.root]
        self._seen = set()
        self.shuffle_seed = shuffle_seed
        self._manifest = os.path.join(self.root, MANIFEST)
        _write_json_atomic(self._manifest, _manifest("folder", [], classes=classes,
                                                     complete=False, shuffle_seed=shuffle_seed))

    def write(self, s):
        if s.label is None:
            raise SampleError("sample has no label, so no class directory")
        if self.classes is not None and 0 <= s.label < len(self.classes):
            cls = self.classes[s.label]
        else:
            cls = f"class_{s.label:05d}"
        base = s.key.replace("\\", "/").rsplit("/", 1)[-1]
        for part in (cls, base):
            if _unsafe_name(part) or "/" in part or part in ("", ".", ".."):
                raise SampleError(f"unsafe path component {part!r}")
        if s.codec == Codec.RAW:
            data = _encode_png(np.frombuffer(s.data, np.uint8).reshape(s.height, s.width, 3))
            ext = "png"
        else:
            data, ext = s.data, _EXT_OF[s.codec]
        rel = f"{cls}/{base}.{ext}"
        if rel in self._seen:
            raise SampleError(f"duplicate file name {rel!r} in the output folder")
        self._seen.add(rel)
        d = os.path.join(self.root, cls)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{base}.{ext}"), "wb") as f:
            f.write(data)
        return len(data)

    def close(self):
        entries = []
        for cls in sorted({rel.split("/", 1)[0] for rel in self._seen}):
            n, nbytes, digest = _folder_digest(os.path.join(self.root, cls))
            entries.append({"path": cls, "samples": n, "bytes": nbytes, "sha256": digest})
        _write_json_atomic(self._manifest, _manifest("folder", entries, classes=self.classes,
                                                     complete=True,
                                                     shuffle_seed=self.shuffle_seed))

    def abort(self):
        pass


def _dst_format(dst, to):
    if to:
        return to
    low = dst.lower()
    if low.endswith(".tbl"):
        return "tbl"
    if low.endswith(".tar") or "%" in dst:
        return "tar"
    return "folder"


def _tar_pattern(dst, shard_size):
    if "%" in dst:
        return dst
    if dst.lower().endswith(".tar"):
        return dst if not shard_size else dst[:-4] + "-%05d.tar"
    return os.path.join(dst, "shard-%05d.tar")


# -- progress --------------------------------------------------------------------------------


class Progress:
    """A one-line progress bar on a stream (stderr), redrawn at most 5 times a second."""

    def __init__(self, total, *, label="", stream=None, enabled=True):
        self.total = total
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.done = 0
        self.t0 = self._last = time.perf_counter()

    def update(self, n=1):
        self.done += n
        now = time.perf_counter()
        if self.enabled and (now - self._last > 0.2 or self.done == self.total):
            self._last = now
            self._draw(now)

    def _draw(self, now):
        rate = self.done / max(now - self.t0, 1e-9)
        if self.total:
            frac = min(self.done / self.total, 1.0)
            bar = "#" * int(frac * 30) + "-" * (30 - int(frac * 30))
            eta = (self.total - self.done) / rate if rate > 0 else 0
            text = f"{self.label} [{bar}] {self.done}/{self.total} {rate:.0f}/s ETA {eta:.0f}s"
        else:
            text = f"{self.label} {self.done} {rate:.0f}/s"
        self.stream.write("\r" + text)
        self.stream.flush()

    def close(self):
        if self.enabled:
            self._draw(time.perf_counter())
            self.stream.write("\n")
            self.stream.flush()


# -- the jobs --------------------------------------------------------------------------------


def _ordered(items, fn, workers):
    """``map(fn, items)`` in order, on ``workers`` threads with a bounded window."""
    if workers <= 1:
        for item in items:
            yield fn(item) if isinstance(item, Sample) else item
        return
    window = collections.deque()
    with ThreadPoolExecutor(workers) as pool:
        for item in items:
            window.append(pool.submit(fn, item) if isinstance(item, Sample) else item)
            if len(window) >= 4 * workers:
                head = window.popleft()
                yield head if isinstance(head, Skip) else head.result()
        while window:
            head = window.popleft()
            yield head if isinstance(head, Skip) else head.result()


def convert(src, dst, /, *, src_format=None, dst_format=None, shard_size=None,
            max_short_side=None, quality=90, codec=None, compression="auto", workers=None,
            overwrite=False, strict=False, progress=False, shuffle=None,
            seed=0, seekable=False, restart_mcus=0, max_side=None, image_column="image",
            label_column="label") -> ConvertReport:
    """Convert a dataset between the folder, TAR-shard and TBL layouts.

    Args:
        src: an ImageFolder root, TAR shard(s) (a file, a directory of ``.tar`` files, a
            brace pattern or glob) or a TBL file.
        dst: the output: ``*.tbl`` -> TBL; ``*.tar`` or a ``%``-pattern such as
            ``out/train-%05d.tar`` -> TAR shards; anything else -> an ImageFolder tree.
        src: also Parquet / Arrow files (``*.parquet``, a glob of them; the image and label
            columns ``image_column`` / ``label_column``, Hugging Face's image structs
            included) and CSV / JSON Lines manifests (``path,label`` rows relative to the
            manifest's folder; string labels become sorted class names).
        image_column, label_column: the source's columns (Parquet; a manifest's path column
            is ``image_column`` when it is not ``"image"``).
        src_format, dst_format: ``"folder"``, ``"tar"`` or ``"tbl"`` (sources also
            ``"parquet"``, ``"manifest"``) to override detection
            (``dst_format="tar"`` with a directory writes ``dst/shard-00000.tar``, ...).
        shard_size: samples per TAR shard (default 5000 for a directory or pattern; a plain
            ``x.tar`` without it is one file).
        max_short_side: re-encode images whose shorter side is longer than this, resized so
            it is exactly this (antialiased bicubic) and encoded as JPEG at ``quality``.
            Smaller images are copied byte for byte.
        max_side: likewise for the longer side (after ``max_short_side``, if both): images
            whose longer side is longer are shrunk so that it is this, re-encoded at
            ``quality``. Re-encoded (pre-sized) images change the pixels a model sees;
            the guide page "Seekable JPEG" has a speed / size table and the caveat.
        quality: JPEG quality of re-encoded images (1..100).
        codec: ``"keep"``/None (default), ``"jpeg"`` (re-encode PNG/WebP as JPEG) or
            ``"raw"`` (TBL only: store decoded RGB pixels, LZ4-compressed where it pays).
        compression: TBL record compression, ``"auto"``, ``"none"`` or ``"lz4"``.
        workers: threads for checking and re-encoding (default: CPU count when
            re-encoding, else 1; plain copies are I/O-bound).
        overwrite: replace existing outputs.
        strict: stop at the first bad sample (raising its error) instead of skipping it.
        progress: draw a progress bar on stderr.
        shuffle: write the samples in a random order (seeded by ``seed``), so shards of a
            class-ordered folder are not class-skewed; ``False`` keeps the source order.
            Default (None): shuffle TAR outputs (read sequentially, shard by shard), keep
            the order for TBL and folder outputs (random access: the dataset shuffles).
            Local ``.tar`` sources are shuffled across shards; compressed or remote
            shards keep their order.
        seed: the seed of that order (the same seed gives the same output).
        seekable: rewrite every JPEG losslessly (the same DCT coefficients, as ``jpegtran
            -restart N -optimize`` does) as a baseline JPEG with restart markers whose
            intervals never wrap a row, so that a crop decodes only the intervals under it
            (see the guide page "Seekable JPEG"). The files stay ordinary JPEGs. A JPEG that
            libjpeg reports as corrupt is copied as it is (``ConvertReport.seekable_kept``).
        restart_mcus: with ``seekable``, MCUs per restart interval (0: automatic, a divisor
            of the MCUs per row: the smallest whose markers add at most ~3% to
            the size, so crops are cut finely and intervals never wrap a row).

    Folder and TAR outputs get a manifest (written first as "complete": false, replaced
    atomically at the end with each shard's sample count, size and SHA-256;
    :func:`check_manifest` and ``turboloader verify`` check it); TAR outputs also get a
    classes file when the source names its classes. One of each per shard set, named after
    the output's prefix: ``out/train-%05d.tar`` gets ``out/train-manifest.json`` and
    ``out/train-classes.json``, so ``out/val-%05d.tar`` can share the folder; a directory
    output gets ``manifest.json`` and ``classes.json``, a single ``x.tar``
    ``x.tar.manifest.json``. A conversion whose manifest exists is refused before it writes
    anything (unless ``overwrite``).

    Returns:
        A :class:`ConvertReport`.

    Raises:
        FileNotFoundError, ValueError: bad paths or options. FileExistsError: output exists.
        TurboLoaderError: with ``strict``, the first bad sample's error (notes name it).

    Example:
        >>> report = convert("imagenet/train", "train-256.tbl", max_short_side=256)  # doctest: +SKIP
        >>> print(report.summary())                                                 # doctest: +SKIP
    """
    t0 = time.perf_counter()
    dst = os.fspath(dst)
    dst_format = _dst_format(dst, dst_format)
    if dst_format not in FORMATS:
        raise ValueError(f"unknown output format {dst_format!r}; expected one of "
                         f"{', '.join(FORMATS)}")
    if codec == "raw" and dst_format != "tbl":
        raise ValueError("codec='raw' (decoded pixels) can only be stored in a TBL file")
    if shard_size is not None and int(shard_size) < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    source = open_source(src, src_format, image_column=image_column, label_column=label_column)
    if shuffle is None:
        shuffle = dst_format == "tar"
    shuffle_seed = int(seed) if shuffle else None
    if shuffle:
        source.shuffle(shuffle_seed)
    if codec == "raw" and seekable:
        raise ValueError("seekable=True rewrites JPEGs; codec='raw' stores no JPEG")
    proc = _Processor(max_short_side=max_short_side, quality=quality, codec=codec,
                      seekable=seekable, restart_mcus=restart_mcus, max_side=max_side)
    if workers is None:
        workers = (os.cpu_count() or 1) if proc.reencodes else 1
    workers = max(1, int(workers))

    if dst_format == "tbl":
        if not overwrite and os.path.exists(dst):
            raise FileExistsError(f"{dst!r} exists (use --overwrite, or overwrite=True, to "
                                  f"replace it)")
        meta = {"source": os.fspath(src) if isinstance(src, (str, os.PathLike)) else None}
        if max_short_side:
            meta.update(max_short_side=int(max_short_side), quality=int(quality))
        if max_side:
            meta.update(max_side=int(max_side), quality=int(quality))
        if seekable:
            meta.update(seekable=True)
        sink = _TBLSink(dst, classes=source.classes, metadata=meta, compression=compression,
                        overwrite=overwrite)
    elif dst_format == "tar":
        if shard_size is None and not dst.lower().endswith(".tar"):
            shard_size = 5000
        # a directory output is one shard set: its manifest is plain manifest.json
        sink = _TarSink(_tar_pattern(dst, shard_size), shard_size=shard_size,
                        overwrite=overwrite, classes=source.classes, shuffle_seed=shuffle_seed,
                        prefix="" if "%" not in dst and not dst.lower().endswith(".tar")
                        else None)
    else:
        sink = _FolderSink(dst, classes=source.classes, overwrite=overwrite,
                           shuffle_seed=shuffle_seed)

    report = ConvertReport()
    try:
        total = len(source)
    except TurboLoaderError:
        total = None
    bar = Progress(total, label="convert", enabled=progress)
    try:
        for item in _ordered(source, proc, workers):
            bar.update()
            if isinstance(item, Sample):
                report.bytes_in += item.size_in or len(item.data)
                try:
                    report.bytes_out += sink.write(item)
                except (TurboLoaderError, ValueError, OverflowError) as exc:
                    # a label the output cannot store, a key over its limit: one sample
                    item = Skip(item.source, item.key, f"{type(exc).__name__}: {exc}")
                else:
                    report.written += 1
                    report.reencoded += item.reencoded
                    if seekable and item.codec == Codec.JPEG:
                        report.seekable += item.seekable
                        report.seekable_kept += not item.seekable
                        if not item.seekable:
                            report.not_seekable.append(Skip(item.source, item.key,
                                                            item.not_seekable or "not rewritten"))
                    continue
            if strict:
                key = item.key if item.key is None or len(item.key) <= 80 else \
                    f"{item.key[:60]}... ({len(item.key)} characters)"
                err = SampleError(f"{item.source}: key {key!r}: {item.reason[:300]}")
                err.add_note(f"strict: stopped at the first bad sample, after {report.written} "
                             f"written; the unfinished output is removed")
                raise err
            report.skipped.append(item)
        sink.close()
    except BaseException:
        sink.abort()
        raise
    finally:
        bar.close()
    report.outputs = list(sink.outputs)
    report.seconds = time.perf_counter() - t0
    return report


# -- inspect and verify ----------------------------------------------------------------------


def inspect_dataset(path, fmt=None, *, limit=None) -> dict:
    """Statistics of a dataset: samples, keys, labels, image sizes, codecs, bytes.

    For TBL files everything comes from the index (no record is read); folders and TAR
    shards are scanned (image headers only).

    Returns:
        A dict: ``format``, ``samples``, ``first_keys``, ``last_keys``, ``labels``
        (label -> count), ``unlabelled``, ``codecs`` (name -> count), ``widths`` and
        ``heights`` (arrays), ``bytes``, ``skipped`` (list of Skip), ``classes``, and for
        TBL ``compression`` (name -> count), ``metadata`` and ``version``.
    """
    fmt = fmt or detect_format(path)
    if fmt == "tbl":
        from turboloader.io.tbl import Compression

        with TBLFile(path) as f:
            t = f.index
            labels = f.labels
            keys = f.keys
            return {
                "format": "tbl", "path": os.fspath(path), "version": f.version,
                "samples": len(f), "first_keys": keys[:5], "last_keys": keys[-3:],
                "labels": collections.Counter(labels[labels >= 0].tolist()),
                "unlabelled": int((labels < 0).sum()),
                "codecs": collections.Counter(Codec(c).name.lower() for c in t["codec"].tolist()),
                "compression": collections.Counter(Compression(c).name.lower()
                                                   for c in t["compression"].tolist()),
                "widths": np.array(t["width"]), "heights": np.array(t["height"]),
                "bytes": int(t["size"].sum()), "raw_bytes": int(t["raw_size"].sum()),
                "file_bytes": os.path.getsize(path), "metadata": f.metadata,
                "classes": f.metadata.get("classes"), "skipped": [],
            }
    source = open_source(path, fmt)
    proc = _Processor()
    keys, labels, codecs, widths, heights, skipped = [], collections.Counter(), \
        collections.Counter(), [], [], []
    nbytes = unlabelled = 0
    for item in source:
        if isinstance(item, Sample):
            item = proc(item)
        if isinstance(item, Skip):
            skipped.append(item)
            continue
        keys.append(item.key)
        if item.label is None:
            unlabelled += 1
        else:
            labels[item.label] += 1
        codecs[item.codec.name.lower()] += 1
        widths.append(item.width)
        heights.append(item.height)
        nbytes += len(item.data)
        if limit and len(keys) >= limit:
            break
    return {"format": fmt, "path": os.fspath(path), "samples": len(keys),
            "first_keys": keys[:5], "last_keys": keys[-3:], "labels": labels,
            "unlabelled": unlabelled, "codecs": codecs, "widths": np.array(widths, np.int64),
            "heights": np.array(heights, np.int64), "bytes": nbytes, "classes": source.classes,
            "skipped": skipped}


def _decode_check(s, strict):
    """Fully decode one sample; return None if fine, else the reason."""
    import warnings

    from turboloader.errors import DecodeWarning

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DecodeWarning)
            if s.codec == Codec.BYTES:
                return "not a JPEG, PNG or WebP image (by content)"
            img = decode_image(s.data, codec=s.codec, strict=strict, size=(s.height, s.width))
        if s.width and s.height and img.shape[:2] != (s.height, s.width):
            return (f"decoded size {img.shape[1]} x {img.shape[0]} differs from the recorded "
                    f"{s.width} x {s.height}")
        if caught:
            return f"DecodeWarning: {caught[0].message}"
    except TurboLoaderError as exc:
        return f"{type(exc).__name__}: {exc}"
    except ValueError as exc:  # reshape of a damaged raw record
        return f"ValueError: {exc}"
    return None


def verify_dataset(path, fmt=None, *, workers=None, strict=False, progress=False,
                   manifest=False):
    """Decode every sample of a dataset; return ``(checked, bad)``.

    ``bad`` lists :class:`Skip` entries (source, key, reason) for samples that cannot be read
    or decoded: damaged records (CRC), undecodable or truncated images, unsafe names,
    missing images. libjpeg warnings (recoverable corruption) count as bad, and so does a
    TAR shard without its end-of-archive block (cut at a member boundary).

    ``manifest=True`` (the command line's default for folders and TAR shards) first checks
    the output against the ``manifest.json`` written by :func:`convert`
    (:func:`check_manifest`). A folder without any manifest is verified by reading it: an
    ImageFolder tree made by other tools has none, and a folder that :func:`convert` was
    writing has one from the start (``"complete": false`` until it ends). TAR shards always
    need theirs: a conversion killed half-way leaves shards that look complete.

    Raises:
        FileNotFoundError, ValueError: bad path. FormatError / TarFormatError: the file's
        header or index is damaged, so no sample can be located. ManifestError: with
        ``manifest``, the manifest is missing (TAR shards), unfinished, or does not match.
    """
    fmt = fmt or detect_format(path)
    if manifest and (fmt == "tar" or (fmt == "folder" and find_manifest(path, fmt) is not None)):
        check_manifest(path, fmt)
    source = open_source(path, fmt)
    if isinstance(source, _TarSource):
        source.strict_end = True
    workers = max(1, int(workers or os.cpu_count() or 1))
    bad = []
    checked = 0
    try:
        total = len(source)
    except TurboLoaderError:
        total = None
    bar = Progress(total, label="verify", enabled=progress)

    def check(s):
        reason = _decode_check(s, strict)
        return Skip(s.source, s.key, reason) if reason else s

    try:
        for item in _ordered(source, check, workers):
            bar.update()
            checked += 1
            if isinstance(item, Skip):
                bad.append(item)
    finally:
        bar.close()
    return checked, bad
