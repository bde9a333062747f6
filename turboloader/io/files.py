"""The one guarded reader of local files, a limit on every member read whole, and the one
way a small file is replaced whole.

Every byte source that reads a whole file or archive member into memory goes through here:
image files (``ImageFolder``, ``ManifestDataset``, ``VideoFolder``, ``convert``), the mask and
boxes files a manifest names, the local ``path`` of a Hugging Face ``Image()`` row without
bytes, and the members of a compressed (``.tar.gz``) shard. A FIFO, a device or a socket is
refused at once (never opened blocking, never read until memory runs out) and nothing over
:data:`MAX_FILE_BYTES` is read.

Every small file turboloader writes for others to read while it may be rewritten (a
stream's statistics snapshot, a cached shard count, a shard index, the ShardCache's node
counters, ``convert``'s manifest and class list) goes through :func:`replace_file`: a
reader sees the old file or the new one whole, never a part, and a failed write leaves no
temporary file behind.
"""

from __future__ import annotations

import os
import stat
import threading

from turboloader.errors import UnreadableFileError

__all__ = ["MAX_FILE_BYTES", "check_size", "read_file", "replace_file", "sync_parent"]

#: The member-size limit: no file or archive member larger than this is read whole (images,
#: masks, boxes files, Hugging Face ``path`` rows, ``.tar.gz`` members; also by
#: ``turboloader convert/inspect/verify``). Raise it with the environment variable
#: ``TURBOLOADER_MAX_FILE_BYTES`` (bytes) or by setting this attribute.
MAX_FILE_BYTES = int(os.environ.get("TURBOLOADER_MAX_FILE_BYTES", 1 << 30))


def check_size(what, size, /, *, max_bytes=None) -> None:
    """Raise :class:`UnreadableFileError` naming ``what`` (a path, or a member and its
    archive) when ``size`` bytes are over the member-size limit (default
    :data:`MAX_FILE_BYTES`).

    Example:
        >>> check_size("'a.tar.gz' member 'x.jpg'", 100)
    """
    limit = MAX_FILE_BYTES if max_bytes is None else int(max_bytes)
    if size > limit:
        raise UnreadableFileError(
            f"{what} is {size} bytes, over the member-size limit of {limit} (raise it with "
            f"TURBOLOADER_MAX_FILE_BYTES)")


def read_file(path, /, *, max_bytes=None) -> bytes:
    """The bytes of a regular file, read with a bound; never blocks on a FIFO.

    ``path`` is checked with ``stat`` (following symlinks) before it is opened and opened
    with ``O_NONBLOCK``, so a FIFO, a device (a symlink to ``/dev/zero``) or a socket is
    refused at once, and at most ``max_bytes`` (default :data:`MAX_FILE_BYTES`) are read.

    Raises:
        UnreadableFileError: not a regular file, or larger than the limit.
        OSError: the file cannot be opened (missing, permissions).

    Example:
        >>> data = read_file("train/cat/001.jpg")        # doctest: +SKIP
    """
    limit = MAX_FILE_BYTES if max_bytes is None else int(max_bytes)
    path = os.fspath(path)
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise UnreadableFileError(f"{path!r} is not a regular file (a FIFO, device or socket)")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with open(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):  # replaced between the two calls
            raise UnreadableFileError(f"{path!r} is not a regular file")
        check_size(repr(path), st.st_size, max_bytes=limit)
        # read(n) allocates n bytes up front: ask for the size stat gave (plus one byte to
        # see growth), then go on in bounded chunks only if the file grew meanwhile
        data = f.read(st.st_size + 1)
        if len(data) > st.st_size:
            parts = [data]
            total = len(data)
            while total <= limit:
                chunk = f.read(min(1 << 20, limit + 1 - total))
                if not chunk:
                    break
                parts.append(chunk)
                total += len(chunk)
            data = b"".join(parts)
    if len(data) > limit:  # grew while being read
        raise UnreadableFileError(f"{path!r} is over the member-size limit of {limit} bytes "
                                  f"(raise it with TURBOLOADER_MAX_FILE_BYTES)")
    return data


def replace_file(path: str, data: bytes, /, *, tmp: str | None = None,
                 durable: bool = False) -> None:
    """Write ``data`` to a temporary file beside ``path`` and rename it over ``path``.

    A reader opening ``path`` meanwhile sees the old file or the new one whole. The
    temporary file (``tmp``, or ``path`` with this process's and thread's ids appended, so
    concurrent writers never share one) is removed when writing or renaming fails. Four
    system calls, each without the GIL, and no text layer: decode threads write their
    statistics snapshot this way. ``durable=True`` also flushes the file and then its
    directory to the disk before returning (a manifest that must survive a power cut);
    a file system that cannot flush a directory is accepted.

    Raises:
        OSError: the file cannot be written or renamed (e.g. its directory is gone).

    Example:
        >>> replace_file("counts.json", b'{"samples": 7}')    # doctest: +SKIP
    """
    if tmp is None:
        tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink(tmp)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    if durable:
        sync_parent(path)


def sync_parent(path: str) -> None:
    """Flush the directory holding ``path`` to the disk, so a rename into it survives a
    power cut (after the file's own ``fsync``). Never raises: a file system that cannot
    flush a directory is accepted, as is a directory that went away.

    Example:
        >>> sync_parent("shards/train-00000.tbl")    # doctest: +SKIP
    """
    try:
        dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def _unlink(path):
    try:
        os.unlink(path)
    except OSError:
        pass
