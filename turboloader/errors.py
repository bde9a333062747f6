"""The public exception hierarchy.

Every error turboloader raises on bad data derives from :class:`TurboLoaderError`.
Format errors also derive from :class:`ValueError`, the builtin that callers of
``PIL.Image.open`` or ``tarfile`` already catch.
"""

__all__ = ["TurboLoaderError", "DecodeError", "TarFormatError", "DecodeWarning"]


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


class DecodeWarning(UserWarning):
    """libjpeg-turbo recovered from a problem in the data (e.g. extraneous bytes).

    Pass ``strict=True`` to the decoders to make these errors instead.
    """
