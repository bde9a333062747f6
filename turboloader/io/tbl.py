"""TBL: a single-file, random-access image dataset format (writer and ``pread`` reader).

A TBL file is a header, the records back to back, an index and a fixed-size footer that says
where the index is, so a writer streams records out in one pass and the index goes last. The
index is an array of fixed 48-byte entries (offset, size, label, key, codec, width, height,
CRC-32), read zero-copy with NumPy; record ``i`` is one slice of the mapping away. Records are
stored as they came (JPEG, PNG, WebP bytes: zero-copy reads) or LZ4-compressed (raw pixels,
where it pays). The full layout is in ``docs/tbl-format.md``.

A file only becomes valid when its footer is written: :class:`TBLWriter` writes to a temporary
name next to the destination and renames it on success, so an interrupted write never leaves a
file that looks like a TBL file.

Example:
    >>> with TBLWriter("train.tbl", metadata={"classes": ["cat", "dog"]}) as w:  # doctest: +SKIP
    ...     w.write(jpeg_bytes, key="cat/0001", label=0)
    >>> with TBLFile("train.tbl") as f:                                          # doctest: +SKIP
    ...     data, label = f[0], int(f.labels[0])
"""

from __future__ import annotations

from typing import Any, cast
import enum
import json
import operator
import os
import stat
import struct
import tempfile
import weakref
import zlib
from dataclasses import dataclass

import numpy as np

from turboloader.errors import FormatError
from turboloader.io.codec import Codec, detect_codec
from turboloader.io.codec import as_codec as _codec
from turboloader.io.codec import image_size as _image_size
from turboloader.io.files import sync_parent

__all__ = [
    "Codec",
    "Compression",
    "ENTRY_DTYPE",
    "FOOTER_MAGIC",
    "FOOTER_SIZE",
    "HAS_LABEL",
    "HEADER_SIZE",
    "MAGIC",
    "TBLFile",
    "TBLRecord",
    "TBLWriter",
    "VERSION",
    "detect_codec",
    "write_tbl",
]

MAGIC = b"\x89TBL\r\n\x1a\n"
FOOTER_MAGIC = b"TBLINDEX"
#: (major, minor) written by this module. Readers accept any minor of their major.
VERSION = (1, 0)

# magic, major, minor, flags, header size, entry size, reserved, crc32 of the first 60 bytes
_HEADER = struct.Struct("<8sHHIII36xI")
# index offset, records, keys size, metadata size, index crc, major, minor, reserved,
# crc32 of the first 52 bytes, end magic
_FOOTER = struct.Struct("<QQQQIHH12xI8s")
HEADER_SIZE = _HEADER.size
FOOTER_SIZE = _FOOTER.size
assert HEADER_SIZE == 64 and FOOTER_SIZE == 64

#: One index entry. Little-endian, 48 bytes, no padding.
ENTRY_DTYPE = np.dtype([
    ("offset", "<u8"),       # byte offset of the stored record in the file
    ("size", "<u4"),         # stored size in bytes
    ("raw_size", "<u4"),     # size after decompression (== size when not compressed)
    ("label", "<i8"),        # class label; meaningful when flags & HAS_LABEL
    ("key_offset", "<u4"),   # key's UTF-8 bytes: keys[key_offset:key_offset + key_len]
    ("key_len", "<u2"),
    ("codec", "u1"),         # Codec
    ("compression", "u1"),   # Compression
    ("width", "<u4"),        # image size in pixels (0 when unknown, codec BYTES)
    ("height", "<u4"),
    ("crc", "<u4"),          # zlib.crc32 of the stored bytes
    ("flags", "<u4"),        # bit 0: HAS_LABEL
])
assert ENTRY_DTYPE.itemsize == 48
HAS_LABEL = 1

_MAX_RECORD = (1 << 32) - 1
_MAX_KEY = (1 << 16) - 1


class Compression(enum.IntEnum):
    """How a record is stored."""

    NONE = 0    #: as is; reads are zero-copy views of the mapping
    LZ4 = 1     #: one LZ4 block (``lz4.block``, no size prefix; the index has the size)


_COMPRESSION_NAMES = {c: c.name.lower() for c in Compression}


class TBLWriter:
    """Stream records into a new TBL file; it appears at ``path`` only when :meth:`close` succeeds.

    Records go to a temporary file in the destination's directory (``.<name>.tmp-XXXX``);
    ``close()`` appends the index and footer, flushes to disk and renames it to ``path``.
    Leaving the ``with`` block through an exception, or calling :meth:`abort`, deletes the
    temporary file, and a process killed mid-write leaves only that temporary file, which has
    no footer and is refused by :class:`TBLFile`.

    Args:
        path: destination file (conventionally ``*.tbl``).
        compression: ``"auto"`` (LZ4 for RAW and BYTES records when it saves at least
            5 %; JPEG, PNG and WebP, which LZ4 does not shrink, stored as is), ``"none"``
            or ``"lz4"`` (every record, kept only where it is smaller).
        metadata: a JSON-serializable dict stored in the index (e.g. ``{"classes": [...]}``).
        overwrite: replace an existing ``path``; otherwise it is an error.

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is false.
        ValueError: bad ``compression``; ``metadata`` not JSON-serializable.

    Example:
        >>> with TBLWriter("out.tbl") as w:                        # doctest: +SKIP
        ...     for key, jpeg, label in samples:
        ...         w.write(jpeg, key=key, label=label)
    """

    def __init__(self, path: Any, /, *, compression: Any = "auto", metadata: Any = None,
                 overwrite: bool = False) -> None:
        if compression not in ("auto", "none", "lz4"):
            raise ValueError(f"compression must be 'auto', 'none' or 'lz4', got {compression!r}")
        self._path = os.fspath(path)
        if not overwrite and os.path.exists(self._path):
            raise FileExistsError(f"{self._path!r} exists (pass overwrite=True to replace it)")
        self._compression = compression
        self._metadata = dict(metadata or {})
        try:
            json.dumps(self._metadata)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"metadata must be JSON-serializable: {exc}") from None
        directory = os.path.dirname(os.path.abspath(self._path))
        fd, self._tmp = tempfile.mkstemp(prefix=f".{os.path.basename(self._path)}.tmp-",
                                         dir=directory)
        self._file = os.fdopen(fd, "wb", buffering=1 << 20)
        self._entries = []
        self._keys = bytearray()
        self._pos = 0
        self._closed = False
        try:
            head = _HEADER.pack(MAGIC, VERSION[0], VERSION[1], 0, HEADER_SIZE,
                                ENTRY_DTYPE.itemsize, 0)[:-4]
            self._write(head + struct.pack("<I", zlib.crc32(head)))
        except BaseException:
            self.abort()
            raise

    def _write(self, data):
        self._file.write(data)
        self._pos += len(data)

    @property
    def path(self) -> str:
        """The destination path."""
        return self._path

    def __len__(self) -> int:
        """Records written so far."""
        return len(self._entries)

    def write(self, data, /, *, key, label=None, codec=None, width=None, height=None) -> int:
        """Append one record; return its position.

        Args:
            data: the record's bytes (bytes, memoryview, ...): an encoded image, or for
                ``codec="raw"`` RGB pixels (prefer :meth:`write_array`).
            key: the sample's key (str, at most 65535 UTF-8 bytes).
            label: int class label, or None for none.
            codec: a :class:`Codec` or its name; detected from the bytes when omitted.
            width, height: image size; read from the image header when omitted (required
                for ``raw``).

        Returns:
            The record's index in the file.

        Raises:
            DecodeError: the image header cannot be read (the record is not written).
            ValueError: the key, label or sizes are out of range, or the writer is closed.
            TypeError: wrongly typed arguments.
        """
        if self._closed:
            raise ValueError(f"TBLWriter for {self._path!r} is closed")
        view = memoryview(data)
        if not view.c_contiguous:
            raise ValueError("data must be a C-contiguous buffer")
        view = view.cast("B") if (view.format != "B" or view.ndim != 1) else view
        if not isinstance(key, str):
            raise TypeError(f"key must be a str, not {type(key).__name__}")
        key_bytes = key.encode("utf-8", "surrogateescape")
        if len(key_bytes) > _MAX_KEY:
            raise ValueError(f"key is {len(key_bytes)} bytes long; the limit is {_MAX_KEY}")
        flags = 0
        if label is not None:
            if isinstance(label, bool):
                raise TypeError("label must be an int or None, not bool")
            label = operator.index(label)
            if not -(1 << 63) <= label < (1 << 63):
                raise ValueError(f"label {label} does not fit in int64")
            flags |= HAS_LABEL
        codec = detect_codec(view) if codec is None else _codec(codec)
        if codec == Codec.RAW:
            if width is None or height is None:
                raise ValueError("raw records need width and height")
            width, height = operator.index(width), operator.index(height)
            if width <= 0 or height <= 0 or len(view) != width * height * 3:
                raise ValueError(f"raw record of {len(view)} bytes is not {width} x {height} x 3")
        elif width is None or height is None:
            width, height = _image_size(view, codec)
        width, height = operator.index(width), operator.index(height)
        if not (0 <= width < (1 << 32) and 0 <= height < (1 << 32)):
            raise ValueError(f"image size {width} x {height} out of range")
        if len(view) > _MAX_RECORD:
            raise ValueError(f"record of {len(view)} bytes exceeds the 4 GiB limit")

        stored, compression = view, Compression.NONE
        if self._compression == "lz4" or (self._compression == "auto"
                                          and codec in (Codec.RAW, Codec.BYTES)):
            import lz4.block

            packed = lz4.block.compress(view, store_size=False)
            limit = len(view) if self._compression == "lz4" else len(view) * 0.95
            if len(packed) < limit:
                stored, compression = packed, Compression.LZ4
        if len(self._keys) + len(key_bytes) > _MAX_RECORD:
            raise ValueError("the keys of this file exceed 4 GiB in total")
        crc = zlib.crc32(stored)
        offset = self._pos
        self._write(stored)
        self._entries.append((offset, len(stored), len(view), label if label is not None else 0,
                              len(self._keys), len(key_bytes), int(codec), int(compression),
                              width, height, crc, flags))
        self._keys += key_bytes
        return len(self._entries) - 1

    def write_array(self, img, /, *, key, label=None) -> int:
        """Append an ``(height, width, 3)`` uint8 RGB array as a RAW record; return its position.

        Raises:
            ValueError: not an (H, W, 3) uint8 array.
        """
        img = np.asarray(img)
        if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
            raise ValueError(f"expected an (H, W, 3) uint8 array, got {img.dtype} {img.shape}")
        img = np.ascontiguousarray(img)
        return self.write(img.reshape(-1), key=key, label=label, codec=Codec.RAW,
                          width=img.shape[1], height=img.shape[0])

    def close(self) -> None:
        """Write the index and footer, flush to disk and rename into place. Idempotent.

        Raises:
            OSError: writing or renaming failed (the temporary file is removed).
        """
        if self._closed:
            return
        try:
            pad = (-self._pos) % 8
            self._write(b"\0" * pad)
            index_offset = self._pos
            table = np.array(self._entries, dtype=ENTRY_DTYPE) if self._entries else \
                np.zeros(0, ENTRY_DTYPE)
            meta = dict(self._metadata)
            meta.setdefault("writer", "turboloader")
            meta_bytes = json.dumps(meta, sort_keys=True).encode("utf-8")
            crc = zlib.crc32(table.tobytes())
            crc = zlib.crc32(self._keys, crc)
            crc = zlib.crc32(meta_bytes, crc)
            self._write(table.tobytes())
            self._write(self._keys)
            self._write(meta_bytes)
            head = _FOOTER.pack(index_offset, len(table), len(self._keys), len(meta_bytes), crc,
                                VERSION[0], VERSION[1], 0, FOOTER_MAGIC)
            footer_crc = zlib.crc32(head[:52])
            self._write(_FOOTER.pack(index_offset, len(table), len(self._keys), len(meta_bytes),
                                     crc, VERSION[0], VERSION[1], footer_crc, FOOTER_MAGIC))
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            os.chmod(self._tmp, 0o666 & ~_umask())
            os.replace(self._tmp, self._path)
        except BaseException:
            self.abort()
            raise
        self._closed = True
        sync_parent(self._path)   # make the rename durable

    def abort(self) -> None:
        """Discard everything written; ``path`` is left untouched. Idempotent."""
        self._closed = True
        try:
            self._file.close()
        except OSError:
            pass
        try:
            os.unlink(self._tmp)
        except FileNotFoundError:
            pass

    def __enter__(self) -> "TBLWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self):
        # an unclosed writer never publishes a file
        if not getattr(self, "_closed", True):
            self.abort()


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_tbl(path: Any, samples: Any, /, **kwargs: Any) -> int:
    """Write ``samples`` to a new TBL file; return how many were written.

    Args:
        path: destination.
        samples: iterable of ``(data, label)`` (keys become ``"00000000"``, ``"00000001"``,
            ...) or ``(key, data, label)``; ``data`` is encoded image bytes, or a uint8
            ``(H, W, 3)`` array (stored RAW).
        **kwargs: passed to :class:`TBLWriter` (``compression``, ``metadata``, ``overwrite``).

    Example:
        >>> write_tbl("tiny.tbl", [(jpeg_a, 0), (jpeg_b, 1)])   # doctest: +SKIP
        2
    """
    with TBLWriter(path, **kwargs) as w:
        for i, item in enumerate(samples):
            if len(item) == 2:
                (data, label), key = item, f"{i:08d}"
            else:
                key, data, label = item
            if isinstance(data, np.ndarray) and data.ndim == 3:
                w.write_array(data, key=key, label=label)
            else:
                w.write(data, key=key, label=label)
        return len(w)


@dataclass(frozen=True)
class TBLRecord:
    """One record of a TBL file.

    Attributes:
        index: position in the file.
        key: the sample's key.
        data: the record's bytes: a zero-copy ``memoryview`` of the mapping when stored
            uncompressed, ``bytes`` after LZ4 decompression.
        label: int label, or None.
        codec: a :class:`Codec`.
        width, height: image size in pixels (0 for BYTES).
    """

    index: int
    key: str
    data: object
    label: int | None
    codec: Codec
    width: int
    height: int

    def array(self) -> np.ndarray:
        """A RAW record's pixels as a read-only ``(height, width, 3)`` uint8 array (no copy).

        Raises:
            ValueError: the record's codec is not RAW.
        """
        if self.codec != Codec.RAW:
            raise ValueError(f"record {self.key!r} is {self.codec.name}, not RAW pixels")
        return np.frombuffer(self.data, np.uint8).reshape(self.height, self.width, 3)


def _fmt_error(path, message):
    err = FormatError(message)
    err.add_note(f"file: {path}")
    return err


class TBLFile:
    """Read a TBL file: O(1) random access; records read with ``os.pread`` (no mapping, so a
    file truncated while open is a typed :class:`FormatError`, never a crash).

    Opening checks the header, the footer and the index (their CRC-32s, version, every
    entry's bounds, codec and compression) without touching the records. Each read then
    checks the record's CRC-32 unless ``check_crc=False``.

    Instances can be pickled (they re-open by path), so they travel to DataLoader workers.

    Args:
        path: the ``.tbl`` file.
        check_crc: verify each record's CRC-32 when it is read (about 5 GB/s; off saves that).

    Raises:
        FileNotFoundError: ``path`` does not exist (other ``OSError`` s pass through).
        FormatError: not a TBL file, an unsupported major version, an incomplete file (no
            footer: interrupted write or truncation), or a damaged header, footer or index.
            The message says which; a note names the file.

    Example:
        >>> with TBLFile("train.tbl") as f:                 # doctest: +SKIP
        ...     rec = f.record(42)                          # TBLRecord
        ...     jpeg, label = f[42], int(f.labels[42])      # zero-copy memoryview, int
        ...     i = f.index_of("n01440764/ILSVRC2012_val_00000293")
    """

    def __init__(self, path: Any, /, *, check_crc: bool = True) -> None:
        self._path = os.fspath(path)
        self._check_crc = bool(check_crc)
        self._fd = None
        fd = os.open(self._path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _fmt_error(self._path, "not a regular file")
            size = st.st_size
            if size < HEADER_SIZE + FOOTER_SIZE:
                head = os.pread(fd, 8, 0)
                if head[:8] != MAGIC[:len(head)] or not head:
                    raise _fmt_error(self._path, f"not a TBL file ({size} bytes, no TBL magic)")
                raise _fmt_error(self._path, f"truncated TBL file ({size} bytes; the smallest "
                                             f"valid file has {HEADER_SIZE + FOOTER_SIZE})")
            self._parse(lambda offset, n: self._pread(fd, offset, n), size)
        except BaseException:
            os.close(fd)
            raise
        # records are read with os.pread, never through a mapping: a file truncated while
        # open gives a FormatError naming the record, not a SIGBUS crash
        self._fd = fd
        self._closer = weakref.finalize(self, os.close, fd)
        self._keys: list[str] | None = None
        self._lookup: dict[str, int] | None = None

    def _pread(self, fd, offset, n):
        data = os.pread(fd, n, offset) if n else b""
        if len(data) != n:
            now = os.fstat(fd).st_size
            raise _fmt_error(self._path, f"bytes {offset}..{offset + n} are gone: the file is "
                                         f"now {now} bytes (truncated or replaced while open)")
        return data

    def _parse(self, read, size):
        path = self._path
        header = read(0, HEADER_SIZE)
        magic, major, minor, flags, header_size, entry_size, crc = _HEADER.unpack(header)
        if magic != MAGIC:
            raise _fmt_error(path, f"not a TBL file (magic {bytes(magic)!r} at offset 0)")
        if zlib.crc32(header[:-4]) != crc:
            raise _fmt_error(path, "header checksum mismatch (bytes 0..63 are damaged)")
        if major != VERSION[0]:
            raise _fmt_error(path, f"unsupported TBL version {major}.{minor} (this reader "
                                   f"reads {VERSION[0]}.x)")
        if header_size != HEADER_SIZE or entry_size != ENTRY_DTYPE.itemsize:
            raise _fmt_error(path, f"unexpected header size {header_size} or index entry size "
                                   f"{entry_size}")
        footer = read(size - FOOTER_SIZE, FOOTER_SIZE)
        (index_offset, n, keys_size, meta_size, index_crc, fmajor, fminor, footer_crc,
         end) = _FOOTER.unpack(footer)
        if end != FOOTER_MAGIC:
            raise _fmt_error(path, "incomplete TBL file: no footer at the end (the write was "
                                   "interrupted, or the file is truncated)")
        if zlib.crc32(footer[:52]) != footer_crc:
            raise _fmt_error(path, f"footer checksum mismatch (bytes {size - FOOTER_SIZE}.."
                                   f"{size - 1} are damaged)")
        index_size = n * ENTRY_DTYPE.itemsize + keys_size + meta_size
        if (fmajor, fminor) != (major, minor) or index_offset < HEADER_SIZE or \
                index_offset + index_size != size - FOOTER_SIZE:
            raise _fmt_error(path, f"footer is inconsistent with the file (index at "
                                   f"{index_offset}, {n} entries, file of {size} bytes)")
        region = read(index_offset, index_size)
        if zlib.crc32(region) != index_crc:
            raise _fmt_error(path, f"index checksum mismatch (index at bytes {index_offset}.."
                                   f"{index_offset + index_size - 1})")
        table = np.frombuffer(region, ENTRY_DTYPE, count=n)
        keys_at = n * ENTRY_DTYPE.itemsize
        self._arena = region[keys_at:keys_at + keys_size]
        try:
            self._metadata = json.loads(region[keys_at + keys_size:keys_at + keys_size
                                               + meta_size] or b"{}")
        except ValueError as exc:
            raise _fmt_error(path, f"index metadata is not JSON: {exc}") from None
        bad = ((table["offset"] < HEADER_SIZE)
               | (table["offset"] + table["size"] > index_offset)
               | (table["key_offset"].astype(np.uint64) + table["key_len"] > keys_size)
               | (table["codec"] > max(Codec))
               | (table["compression"] > max(Compression))
               | ((table["compression"] == Compression.NONE) & (table["size"] != table["raw_size"]))
               | ((table["codec"] == Codec.RAW) & (table["raw_size"].astype(np.uint64)
                  != table["width"].astype(np.uint64) * table["height"] * 3)))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            e = table[i]
            raise _fmt_error(path, f"index entry {i} is invalid (offset {int(e['offset'])}, "
                                   f"size {int(e['size'])}, codec {int(e['codec'])}, "
                                   f"compression {int(e['compression'])}; records end at "
                                   f"{index_offset})")
        self._table = table
        self._version = (major, minor)

    # -- metadata -------------------------------------------------------------------------

    @property
    def path(self) -> str:
        """The file's path, as given."""
        return self._path

    @property
    def version(self) -> tuple:
        """``(major, minor)`` format version of the file."""
        return self._version

    @property
    def metadata(self) -> dict:
        """The JSON metadata stored by the writer (e.g. ``classes``, ``max_short_side``)."""
        return self._metadata

    @property
    def index(self) -> np.ndarray:
        """The read-only structured array of index entries (fields of ``ENTRY_DTYPE``)."""
        return self._table

    @property
    def labels(self) -> np.ndarray:
        """int64 labels (-1 where a record has none)."""
        t = self._table
        return np.where(t["flags"] & HAS_LABEL, t["label"], -1)

    @property
    def widths(self) -> np.ndarray:
        return self._table["width"]

    @property
    def heights(self) -> np.ndarray:
        return self._table["height"]

    @property
    def codecs(self) -> np.ndarray:
        return self._table["codec"]

    @property
    def keys(self) -> list[str]:
        """Keys in file order (built once, on first use)."""
        if self._keys is None:
            arena = self._arena
            t = self._table
            self._keys = [arena[s:s + n].decode("utf-8", "surrogateescape")
                          for s, n in zip(t["key_offset"].tolist(), t["key_len"].tolist())]
        return self._keys

    def key(self, i, /) -> str:
        """Key of record ``i`` (without building the whole key list)."""
        e = self._table[self._pos(i)]
        s = int(e["key_offset"])
        return self._arena[s:s + int(e["key_len"])].decode("utf-8", "surrogateescape")

    def index_of(self, key: str, /) -> int:
        """Position of the record with ``key`` (the last one if the key repeats).

        Raises:
            KeyError: no record has that key.
        """
        if self._lookup is None:
            self._lookup = {k: i for i, k in enumerate(self.keys)}
        try:
            return self._lookup[key]
        except KeyError:
            raise KeyError(f"{key!r} is not a key of {self._path!r}") from None

    def __len__(self) -> int:
        return len(self._table)

    # -- data -----------------------------------------------------------------------------

    def _pos(self, i):
        i = operator.index(i)
        n = len(self._table)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"record index {i} out of range for {n} records")
        return i

    def _record_error(self, i, e, message):
        err = FormatError(f"record {i} (key {self.key(i)!r}, offset {int(e['offset'])}): "
                          f"{message}")
        err.add_note(f"file: {self._path}")
        return err

    def data(self, i, /):
        """The bytes of record ``i``: a zero-copy ``memoryview`` if stored as is, else
        ``bytes`` after LZ4 decompression. Negative ``i`` counts from the end.

        Raises:
            IndexError: ``i`` out of range.
            FormatError: CRC mismatch (when checked), or the record does not decompress to
                its recorded size. The message names the record, its key and offset.
            ValueError: the file is closed.
        """
        i = self._pos(i)
        if self._fd is None:
            raise ValueError(f"TBLFile of {self._path!r} is closed")
        e = self._table[i]
        start, size = int(e["offset"]), int(e["size"])
        stored = os.pread(self._fd, size, start) if size else b""
        if len(stored) != size:
            now = os.fstat(self._fd).st_size
            raise self._record_error(i, e, f"needs bytes {start}..{start + size} but the file "
                                           f"is now {now} bytes: it was truncated or replaced "
                                           f"while open")
        stored = memoryview(stored)
        if self._check_crc:
            crc = zlib.crc32(stored)
            if crc != int(e["crc"]):
                raise self._record_error(i, e, f"CRC-32 mismatch (stored {int(e['crc']):#010x}, "
                                               f"computed {crc:#010x})")
        if e["compression"] == Compression.NONE:
            return stored
        import lz4.block

        raw_size = int(e["raw_size"])
        try:
            raw = lz4.block.decompress(stored, uncompressed_size=raw_size)
        except lz4.block.LZ4BlockError as exc:
            raise self._record_error(i, e, f"LZ4 block does not decompress: {exc}") from None
        if len(raw) != raw_size:
            raise self._record_error(i, e, f"decompressed to {len(raw)} bytes, index says "
                                           f"{raw_size}")
        return raw

    def record(self, i, /) -> TBLRecord:
        """Record ``i`` with its key, label, codec and size (see :meth:`data` for errors)."""
        i = self._pos(i)
        data = self.data(i)
        e = self._table[i]
        label = int(e["label"]) if int(e["flags"]) & HAS_LABEL else None
        return TBLRecord(i, self.key(i), data, label, Codec(int(e["codec"])), int(e["width"]),
                         int(e["height"]))

    def __getitem__(self, key):
        """``f[i]`` or ``f[key]``: the record's bytes (see :meth:`data`)."""
        if isinstance(key, str):
            return self.data(self.index_of(key))
        return self.data(key)

    def __iter__(self):
        """Iterate over records (:class:`TBLRecord`) in file order."""
        for i in range(len(self)):
            yield self.record(i)

    # -- lifetime -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._fd is None

    def close(self) -> None:
        """Close the file. Idempotent; the index stays readable, and record views handed out
        earlier stay valid (they own their bytes)."""
        if self._fd is not None:
            self._fd = None
            self._closer()

    def __enter__(self) -> "TBLFile":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __reduce__(self):
        return (_reopen, (self._path, self._check_crc))

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self)} records"
        return f"TBLFile({self._path!r}, {state})"


def _reopen(path, check_crc):
    return TBLFile(path, check_crc=check_crc)
