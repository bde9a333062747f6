"""Index of a TAR archive: member names, data offsets and sizes; member bytes by ``pread``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast
import mmap
import operator
import os
import stat
import warnings
import weakref

import numpy as np

from turboloader.errors import TarFormatError, TruncatedArchiveWarning

__all__ = ["TarIndex", "read_extents_into", "scan_stream"]


class TarIndex:
    """Index of the regular members of an uncompressed TAR file.

    The archive is scanned once, without the GIL, by a native kernel over an ``mmap`` of the
    file that records each regular member's name, data offset and size (no per-member Python
    objects); the mapping is released right after. Member bytes are then read with
    ``os.pread`` (one copy, no GIL held while reading), so a file that is truncated or
    rewritten while open (a re-sync, a partial copy, a full disk) gives a
    :class:`TarFormatError` naming the member and the file's new size, never a ``SIGBUS``
    crash of the process, which a mapping would give.

    Formats: ustar (``prefix`` + ``name``), GNU (``L`` long names; ``K`` long link names
    are skipped), PAX (``path`` and ``size`` records of ``x`` headers; global ``g``
    headers are skipped, their records are not applied), base-256 size fields.
    Regular members are types ``0``, ``\\0`` (unless the name ends in ``/``) and ``7``;
    directories, hard and symbolic links, devices and FIFOs are not listed. Empty
    members are listed. Names are decoded as UTF-8 with ``surrogateescape``, like
    ``tarfile``; duplicate names are all listed, and a name lookup finds the last one.

    The semantics are those of :mod:`tarfile`, except that this is stricter: a bad
    header anywhere raises (``tarfile`` silently stops reading at a bad header found
    after the first member), as do GNU sparse members and non-integer PAX sizes.

    Completeness: an archive that ends without its end-of-archive (zero) block, i.e.
    one cut exactly at a member boundary, indexes its members but ``complete`` is False
    and a :class:`~turboloader.errors.TruncatedArchiveWarning` is issued; with
    ``strict=True`` it is a ``TarFormatError``.

    Args:
        path: path of the ``.tar`` file (str or ``os.PathLike``). Only regular files are
            opened (a FIFO or a device is refused before it could block or read forever).
        strict: a missing end-of-archive block is an error instead of a warning.

    Raises:
        FileNotFoundError: ``path`` does not exist (other ``OSError`` s pass through).
        TarFormatError: ``path`` is not a regular file; with ``strict``, the archive has no
            end-of-archive block.
        TarFormatError: the file is empty (0 bytes), or malformed: bad header checksum,
            partial header block, member data running past the end of the file,
            unsupported GNU sparse member, malformed PAX header. The message names the
            byte offset of the offending header; a note names the file.

    Example:
        >>> with TarIndex("shard-000000.tar") as index:
        ...     i = index.index_of("000042.jpg")
        ...     data = index[i]                 # read-only memoryview of the bytes
        ...     n, first = len(index), index.names[0]
    """

    def __init__(self, path: Any, /, *, strict: bool = False) -> None:
        from turboloader._native._tar import index_tar

        self._path = os.fspath(path)
        self._fd: Any = None   # the open descriptor (an int), None once closed
        if not stat.S_ISREG(os.stat(self._path).st_mode):
            raise TarFormatError(f"{self._path!r} is not a regular file (a FIFO, device or "
                                 f"socket); only regular files are read")
        # O_NONBLOCK: should a FIFO replace the file after the check, open must not block
        fd = os.open(self._path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise TarFormatError(f"{self._path!r} is not a regular file")
            if st.st_size == 0:
                raise TarFormatError(f"{self._path!r}: empty file (0 bytes) is not a TAR archive")
            mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            view = memoryview(mm)
            try:
                offsets, sizes, starts, lens, arena, end = index_tar(view, with_end=True)
                self.complete = end < len(view)
                if not self.complete:
                    msg = (f"{self._path!r} ends at byte {end} without an end-of-archive block: "
                           f"it may have been cut at a member boundary (members may be missing)")
                    if strict:
                        raise TarFormatError(msg)
                    warnings.warn(msg, TruncatedArchiveWarning, stacklevel=2)
            except TarFormatError as exc:
                exc.add_note(f"archive: {self._path}")  # type: ignore[attr-defined]  # 3.11+
                raise
            finally:
                view.release()
                mm.close()
            now = os.fstat(fd).st_size
            if now != st.st_size:
                raise TarFormatError(f"{self._path!r}: the file changed size while it was being "
                                     f"indexed ({st.st_size} -> {now} bytes)")
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._closer = weakref.finalize(self, os.close, fd)
        for a in (offsets, sizes):
            a.setflags(write=False)
        self._offsets = offsets
        self._sizes = sizes
        self._extents = None   # (offsets, sizes) as lists: what a read per member indexes
        self._name_start = starts
        self._name_len = lens
        self._arena = arena
        self._names: list[str] | None = None
        self._lookup: dict[str, int] | None = None

    # -- metadata -------------------------------------------------------------------------

    @property
    def path(self) -> str:
        """The archive's path, as given."""
        return self._path

    @property
    def offsets(self) -> np.ndarray:
        """Read-only int64 array: byte offset of each member's data in the file."""
        return self._offsets

    @property
    def sizes(self) -> np.ndarray:
        """Read-only int64 array: size in bytes of each member's data."""
        return self._sizes

    @property
    def names(self) -> list[str]:
        """Member names in archive order (built once, on first use)."""
        if self._names is None:
            arena = self._arena
            self._names = [
                arena[s:s + n].decode("utf-8", "surrogateescape")
                for s, n in zip(self._name_start.tolist(), self._name_len.tolist())
            ]
        return self._names

    def __len__(self) -> int:
        return len(self._offsets)

    def __iter__(self):
        """Iterate over member names."""
        return iter(self.names)

    def __contains__(self, name) -> bool:
        return isinstance(name, str) and name in self._name_map()

    def _name_map(self) -> dict:
        if self._lookup is None:
            # later duplicates overwrite earlier ones: tarfile.getmember() finds the last
            self._lookup = {name: i for i, name in enumerate(self.names)}
        return self._lookup

    def index_of(self, name: str, /) -> int:
        """Position of the member called ``name`` (the last one, if the name repeats).

        Raises:
            KeyError: no regular member has that name.

        Example:
            >>> index.member(index.index_of("000042.jpg"))
        """
        try:
            return self._name_map()[name]
        except KeyError:
            raise KeyError(f"{name!r} is not a regular member of {self._path!r}") from None

    def group_samples(self, image_exts: Sequence[str], label_exts: Sequence[str],
                      /) -> tuple | None:
        """The members grouped into samples in one native pass
        (:func:`turboloader._native._tar.group_samples`: per sample its first member, its
        image and label members and which of ``image_exts`` / ``label_exts`` they are, its
        key's length), or None where the Python grouping must decide (non-ASCII names,
        duplicate members). Raises nothing for any archive :class:`TarIndex` accepted."""
        from turboloader._native._tar import group_samples

        return group_samples(self._arena, self._name_start, self._name_len,
                             tuple(image_exts), tuple(label_exts))

    # -- data -----------------------------------------------------------------------------

    def member(self, i, /) -> memoryview:
        """Read-only view of member ``i``'s data (negative ``i`` counts from the end), read
        from the file now. The view stays valid after :meth:`close`.

        Raises:
            IndexError: ``i`` is out of range.
            TarFormatError: the file no longer holds the member's bytes (truncated or
                replaced since it was indexed); the message names the member, its byte range
                and the file's size now.
            ValueError: the index is closed.
        """
        i, start, size = self._extent(i)
        data = os.pread(self._fd, size, start) if size else b""
        if len(data) != size:
            raise self._truncated(i, start, size)
        return memoryview(data)

    def read_into(self, i, out, /, *, head=False) -> int:
        """Read member ``i``'s data into the start of ``out`` (a writable bytes-like object
        of at least ``sizes[i]`` bytes, e.g. a slice of a buffer reused across batches) with
        one ``pread`` and no allocation. Returns the bytes read: the member's size, or with
        ``head=True`` at most ``len(out)`` (the start of a larger member, e.g. a header).

        Raises:
            IndexError, TarFormatError, ValueError: as :meth:`member`; ValueError also when
                ``out`` is too small (without ``head``).
        """
        i, start, size = self._extent(i)
        view = out if (type(out) is memoryview and out.format == "B" and out.ndim == 1
                       and out.c_contiguous) else memoryview(out).cast("B")
        if head:
            size = min(size, len(view))
        elif len(view) < size:
            raise ValueError(f"out holds {len(view)} bytes, member {i} needs {size}")
        got = os.preadv(self._fd, [view[:size]], start) if size else 0
        if got != size:
            raise self._truncated(i, start, size)
        return size

    def read_many_into(self, members, out, /) -> int:
        """Read the data of ``members`` (an integer array or sequence of member positions,
        each in range) back to back into the start of ``out`` (a writable C-contiguous byte
        buffer of at least the sum of their sizes), in one native call without the GIL:
        one ``pread`` each, no allocation. Returns how many were read whole, in order:
        ``len(members)``, or the position of the first one the file no longer holds
        (:meth:`read_into` says why).

        Raises:
            IndexError: a member out of range.
            ValueError: the index is closed, or ``out`` is too small.
        """
        from turboloader._native._tar import pread_many

        m = np.asarray(members, np.int64)
        if m.size and (int(m.min()) < 0 or int(m.max()) >= len(self._offsets)):
            raise IndexError(f"member index out of range for {len(self._offsets)} members")
        if self._fd is None:
            raise ValueError(f"TarIndex of {self._path!r} is closed")
        view = np.frombuffer(out, np.uint8) if not isinstance(out, np.ndarray) else out
        return pread_many(self._fd, np.ascontiguousarray(self._offsets[m], np.int64),
                          np.ascontiguousarray(self._sizes[m], np.int64), view)

    def fileno(self) -> int:
        """The open file's descriptor, for :func:`read_extents_into` (the members of several
        indexes in one call); valid until :meth:`close`.

        Raises:
            ValueError: the index is closed.
        """
        if self._fd is None:
            raise ValueError(f"TarIndex of {self._path!r} is closed")
        return self._fd

    def _extent(self, i):
        """``(i, start, size)`` of member ``i`` (negative counts from the end) in an open
        index; IndexError / ValueError (closed) as :meth:`member`."""
        i = operator.index(i)
        ext = self._extents
        if ext is None:   # Python ints, made once: a NumPy scalar index per read costs more
            ext = self._extents = (self._offsets.tolist(), self._sizes.tolist())
        n = len(ext[0])
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"member index {i} out of range for {n} members")
        if self._fd is None:
            raise ValueError(f"TarIndex of {self._path!r} is closed")
        return i, ext[0][i], ext[1][i]

    def _truncated(self, i, start, size) -> TarFormatError:
        now = os.fstat(self._fd).st_size
        return TarFormatError(
            f"{self._path!r}: member {self.names[i]!r} needs bytes {start}..{start + size} "
            f"but the file is now {now} bytes: it was truncated or replaced while open")

    def __getitem__(self, key) -> memoryview:
        """``index[i]`` or ``index[name]``: zero-copy view of a member's data.

        Raises:
            KeyError: ``key`` is a str that names no regular member.
            IndexError: ``key`` is an int out of range.
        """
        if isinstance(key, str):
            return self.member(self.index_of(key))
        return self.member(key)

    # -- lifetime -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._fd is None

    def close(self) -> None:
        """Close the file. Idempotent; names, offsets and sizes stay readable, and member
        views handed out earlier stay valid (they own their bytes)."""
        if self._fd is not None:
            self._fd = None
            self._closer()

    def __enter__(self) -> "TarIndex":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self)} members"
        return f"TarIndex({self._path!r}, {state})"


_BLOCK = 512
# scan_stream's windows of the default size, free for the next scan: a fresh one costs a zero
# fill and a page fault per 4 KiB; a scan returns its window only once no view of it is left
_SPARE_WINDOWS: list = []
_KEEP_WINDOWS = 4


def read_extents_into(fds: Any, starts: Any, sizes: Any, out: Any, /) -> int:
    """Read ``sizes[k]`` bytes at byte ``starts[k]`` of the open file ``fds[k]`` for every
    ``k`` (e.g. members of several :class:`TarIndex` files: their :meth:`~TarIndex.fileno`,
    ``offsets`` and ``sizes``), back to back into the start of ``out`` (a writable
    C-contiguous byte buffer of at least their sum), in one native call without the GIL:
    one ``pread`` each, no allocation. Returns how many were read whole, in order:
    ``len(starts)``, or the position of the first one its file no longer holds.

    Raises:
        ValueError: the three differ in length, a negative entry, or ``out`` is too small.
    """
    from turboloader._native._tar import pread_rows

    view = np.frombuffer(out, np.uint8) if not isinstance(out, np.ndarray) else out
    return pread_rows(np.ascontiguousarray(fds, np.int32),
                      np.ascontiguousarray(starts, np.int64),
                      np.ascontiguousarray(sizes, np.int64), view)


def scan_stream(fileobj, /, *, want, chunk: int = 2 << 20, max_member: int | None = None):
    """The regular members of an uncompressed TAR archive read front to back from
    ``fileobj`` (anything with ``readinto``: a file, a remote reader), indexed by the same
    native kernel as :class:`TarIndex` over a window of the stream, so the same archive
    gives the same members and errors whether it is a local file or a stream.

    Yields ``(name, data_offset, size, data, problem)`` per regular member, in archive
    order: ``data`` is the member's bytes when ``want(name)`` is true, else None;
    ``problem`` is None, or why a wanted member was not read (it is over ``max_member``
    bytes, default :data:`~turboloader.io.files.MAX_FILE_BYTES`: its bytes are skipped,
    never held). Memory: one window of ``chunk`` bytes, or of one member with its headers
    when that is larger (up to ``max_member``).

    Raises:
        TarFormatError: a malformed archive (bad checksum, a header or member cut short, a
            bad PAX record, ...); the message names the byte offset, as :class:`TarIndex`'s.
    """
    from turboloader.io.files import MAX_FILE_BYTES

    limit = MAX_FILE_BYTES if max_member is None else int(max_member)
    cap = 4096
    offsets, sizes = np.empty(cap, np.int64), np.empty(cap, np.int64)
    starts, lens = np.empty(cap, np.int64), np.empty(cap, np.int32)
    arena = np.empty(cap * 128, np.uint8)
    buf = None
    try:
        buf = _SPARE_WINDOWS.pop()
    except IndexError:
        pass
    if buf is None or len(buf) != chunk:
        buf = bytearray(chunk)
    try:
        yield from _scan(fileobj, want, chunk, limit, buf, offsets, sizes, starts, lens, arena)
    finally:
        # the window's bytes reached the caller only as copies (``tobytes``), and each
        # memoryview of it was released: the next scan may overwrite it
        if len(_SPARE_WINDOWS) < _KEEP_WINDOWS:
            _SPARE_WINDOWS.append(buf)


def _scan(fileobj, want, chunk, limit, buf, offsets, sizes, starts, lens, arena):
    """:func:`scan_stream`'s loop over the window ``buf`` (of ``chunk`` bytes)."""
    from turboloader._native._tar import DONE, FULL, MORE, TRUNCATED, error_message, scan_pass

    base = filled = pos = 0  # buf[0] is byte ``base`` of the stream; buf[pos] a header
    eof = False
    while True:
        while not eof and filled < len(buf):
            with memoryview(buf) as mv:
                got = fileobj.readinto(mv[filled:])
            if not got:
                eof = True
            else:
                filled += got
        with memoryview(buf) as mv:
            status, end, count, used, err_at, err_value = scan_pass(
                mv[:filled], offsets, sizes, starts, lens, arena, pos, 0, 0, not eof)
        names = arena[:used].tobytes()
        with memoryview(buf) as view:
            for off, size, s, n in zip(offsets[:count].tolist(), sizes[:count].tolist(),
                                       starts[:count].tolist(), lens[:count].tolist()):
                name = names[s:s + n].decode("utf-8", "surrogateescape")
                yield name, base + off, size, (view[off:off + size].tobytes() if want(name)
                                               else None), None
        pos = end
        if status == DONE:
            return
        if status == FULL:
            if err_value > len(arena):  # a name longer than the arena
                arena = np.empty(err_value, np.uint8)
            continue
        if status != MORE:
            raise TarFormatError(error_message(status, base + err_at, err_value, base + filled))
        # the window ends inside the header or member at ``pos``: keep it, read on
        member = -(-err_value // _BLOCK) * _BLOCK
        need = err_at + member
        if member > limit + _BLOCK and err_at >= _BLOCK:
            # a member over the size limit: report it and skip its bytes, never hold them
            header = bytes(buf[pos + err_at - _BLOCK:pos + err_at])
            name = _header_name(header)
            yield (name, base + pos + err_at, err_value, None,
                   f"member {name!r} is {err_value} bytes, over the member-size limit of {limit} "
                   f"(raise it with TURBOLOADER_MAX_FILE_BYTES)")
            skip_to = base + pos + need  # stream offset after the member's padded data
            have = base + filled
            left = skip_to - have
            while left > 0:
                with memoryview(buf) as mv:
                    got = fileobj.readinto(mv[:min(len(buf), left)])
                if not got:
                    raise TarFormatError(error_message(TRUNCATED, base + pos + err_at - _BLOCK, err_value,
                                                       skip_to - left))
                left -= got
            base, filled, pos = skip_to, 0, 0
            continue
        tail = filled - pos
        if need > len(buf):
            new = bytearray(need + chunk)
            new[:tail] = buf[pos:filled]
            buf = new
        else:
            buf[:tail] = buf[pos:filled]
        base, filled, pos = base + pos, tail, 0


def _header_name(header):
    """The ustar name (``prefix/name``) of a header block, for messages."""
    def nts(b):
        return b.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    name, prefix = nts(header[:100]), nts(header[345:500]) if header[257:262] == b"ustar" else ""
    return f"{prefix}/{name}" if prefix else name
