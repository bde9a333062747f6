"""The public exception hierarchy.

Every error turboloader raises on bad data derives from :class:`TurboLoaderError`.
Format errors also derive from :class:`ValueError`, the builtin that callers of
``PIL.Image.open`` or ``tarfile`` already catch.
"""

from __future__ import annotations

from typing import Any
__all__ = [
    "TurboLoaderError",
    "DecodeError",
    "TarFormatError",
    "FormatError",
    "SampleError",
    "FailureBudgetExceeded",
    "RemoteShardError",
    "RemoteShardNotFoundError",
    "SharedMemoryError",
    "DeviceUnavailableError",
    "DecodeWarning",
    "UnreadableFileError",
    "ManifestError",
    "StateMismatchError",
    "TruncatedArchiveWarning",
    "UnfusedWarning",
    "CacheTooSmallWarning",
    "MissingDependencyError",
    "DISTRIBUTION",
    "require",
]

#: The distribution to install (``pip install torch-turboloader``); it imports as
#: ``turboloader``. The PyPI project called ``turboloader`` is an unrelated C++ loader.
DISTRIBUTION = "torch-turboloader"


class TurboLoaderError(Exception):
    """Base class of every error turboloader raises about its input."""


class DecodeError(TurboLoaderError, ValueError):
    """An image could not be decoded: corrupt, truncated, empty, not a JPEG, or over a limit.

    The message carries libjpeg-turbo's own text. Higher layers add the shard, member
    and key as exception notes (``exc.add_note``).
    """


class TarFormatError(TurboLoaderError, ValueError):
    """A TAR archive is malformed: bad header checksum, truncated member, size past the end.

    The message names the byte offset of the offending header.
    """


class FormatError(TurboLoaderError, ValueError):
    """A TBL file is malformed: bad magic or version, damaged header, index or footer,
    a record past the end, a checksum mismatch or a record that does not decompress.

    The message names the file and, for a bad record, its position, key and byte offset.
    An incompletely written file (no valid footer) is reported as such.
    """


class SampleError(TurboLoaderError, ValueError):
    """A sample is unusable as a whole: no image member, no label, an unreadable label.

    The message names the sample's key and shard (or file) and what is missing.
    """


class FailureBudgetExceeded(TurboLoaderError):
    """More samples failed than ``max_failures`` allows under ``on_error="skip"``.

    ``.failures`` lists what was skipped: ``(shard, key, reason)`` tuples. The last
    failure's exception is chained as ``__cause__``.
    """

    def __init__(self, message: str, failures: Any = ()) -> None:
        super().__init__(message)
        self.failures = list(failures)


class RemoteShardError(TurboLoaderError, OSError):
    """A remote shard could not be read: unreachable after the retries, or refused.

    Notes name the URL (without its query string) and the byte offset reached.
    """


class RemoteShardNotFoundError(RemoteShardError, FileNotFoundError):
    """The remote object does not exist (HTTP 404/410, S3 NoSuchKey/NoSuchBucket)."""


class SharedMemoryError(TurboLoaderError, RuntimeError):
    """Shared memory (``/dev/shm``) cannot hold a batch a DataLoader worker must send. The
    message gives the sizes and names the fixes (Docker's ``--shm-size``, a smaller batch,
    fewer workers, or the thread backend). Never skipped by the failure policy: it is not a
    sample's fault."""


class DeviceUnavailableError(TurboLoaderError, RuntimeError):
    """A device a loader was asked to decode on (``turboloader.DataLoader(...,
    decode="gpu")``) does not exist here: torch sees no CUDA device, or not that index.
    Raised when the loader is made, never a silent run on the CPU instead."""


class DecodeWarning(UserWarning):
    """libjpeg-turbo recovered from a problem in the data (e.g. extraneous bytes).

    Pass ``strict=True`` to the decoders to make these errors instead.
    """


class UnreadableFileError(SampleError):
    """A dataset file that turboloader refuses to read: not a regular file (a FIFO, a
    device, a socket, e.g. a symlink to ``/dev/zero``), larger than the member-size limit
    (``turboloader.io.files.MAX_FILE_BYTES``, env ``TURBOLOADER_MAX_FILE_BYTES``), or a
    directory reached again through a symlink loop. The message names the path.
    """


class ManifestError(TurboLoaderError, ValueError):
    """A converted output does not match its manifest (``manifest.json``): the manifest is
    missing or marks an unfinished conversion, or a shard's sample count, size or checksum
    differs. The message names the manifest and the shard. Also raised for a malformed
    dataset manifest (:class:`turboloader.ManifestDataset`'s CSV / JSON Lines list), naming
    the file and line or row.
    """


class StateMismatchError(TurboLoaderError, ValueError):
    """A checkpoint state (``load_state_dict``) was taken over other data or another
    topology than the dataset it is loaded into: other shards, the same shards in another
    order or cut differently, another seed, world size, ... Continuing would deliver some
    samples twice and others never. The message names what differs (for shards: the first
    shard whose name or sample count differs, with both values).
    """


class TruncatedArchiveWarning(UserWarning):
    """A TAR archive ends without its end-of-archive (zero) blocks: it may have been cut
    at a member boundary (a partial copy or an interrupted write), so members may be
    missing. ``TarIndex(path, strict=True)`` and ``turboloader verify`` make it an error.
    """


class UnfusedWarning(UserWarning):
    """A dataset's transform pipeline does not fuse into the decoder, so every sample is
    decoded to a PIL image and the transforms run one by one (correct, but slower). Issued
    once, when the dataset is made; the message names the first member that prevents fusion,
    as ``turboloader.transforms.explain(transform)`` does. Silence it with
    ``warnings.filterwarnings("ignore", category=UnfusedWarning)``.
    """


class CacheTooSmallWarning(UserWarning):
    """A :class:`~turboloader.io.shard_cache.ShardCache` evicted a shard it had downloaded
    ahead before any reader opened it: the cache is smaller than what the node's readers
    need at once (the ranks' workers' mixing windows and the shards read ahead), so such
    shards are downloaded again when they are needed. Issued once per process; the
    ``evicted_unread`` counter of ``ShardCache.stats()`` counts them all. The message names
    the cache and its bound, the bytes in use when it evicted, and the sizing rule.
    """


class MissingDependencyError(TurboLoaderError, ImportError):
    """An optional dependency a feature needs is not installed; the message names the
    ``pip install 'torch-turboloader[extra]'`` that adds it."""


def require(module: str, *, extra: str, feature: str, package: str | None = None):
    """Import ``module`` or raise :class:`MissingDependencyError` with the install hint."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{feature} needs {package or module.split('.')[0]}, which is not installed: "
            f"pip install '{DISTRIBUTION}[{extra}]' ({exc})") from None
