"""Resampling filter names -> native filter codes, shared by the decoders and the transforms
(which import it from here: decode never imports transforms)."""

import enum

from turboloader._native import _resample


class Interpolation(enum.IntEnum):
    """Resampling filters. Values are the native filter codes.

    ``NEAREST`` is Pillow's (sample at each output pixel's centre, like torchvision's
    ``"nearest-exact"``); ``BILINEAR`` and ``BICUBIC`` (a = -0.5) are antialiased when
    downscaling, as Pillow and torchvision's ``antialias=True``.
    """

    NEAREST = _resample.NEAREST
    BILINEAR = _resample.BILINEAR
    BICUBIC = _resample.BICUBIC

    @classmethod
    def parse(cls, mode):
        """The :class:`Interpolation` for a name (``"bilinear"``, ``"nearest-exact"``...), an
        Interpolation or a torchvision ``InterpolationMode``.

        Raises:
            ValueError: an unknown or unsupported mode. TypeError: another type.

        Example:
            >>> Interpolation.parse("bicubic") is Interpolation.BICUBIC
            True
        """
        return _interpolation(mode)


_BY_NAME = {
    "nearest": Interpolation.NEAREST,
    "nearest-exact": Interpolation.NEAREST,
    "nearest_exact": Interpolation.NEAREST,
    "bilinear": Interpolation.BILINEAR,
    "linear": Interpolation.BILINEAR,
    "bicubic": Interpolation.BICUBIC,
    "cubic": Interpolation.BICUBIC,
}


def _interpolation(mode):
    """The :class:`Interpolation` for a name, an Interpolation or a torchvision
    ``InterpolationMode``; ValueError for unknown or unsupported modes, TypeError otherwise."""
    if isinstance(mode, Interpolation):
        return mode
    if isinstance(mode, str):
        found = _BY_NAME.get(mode.lower())
        if found is None:
            raise ValueError(f"interpolation must be one of {sorted(_BY_NAME)}, got {mode!r}")
        return found
    if type(mode).__module__.startswith("torchvision"):
        from torchvision.transforms import InterpolationMode  # lazy: torchvision is optional

        if isinstance(mode, InterpolationMode):
            found = _BY_NAME.get(mode.value)
            if found is None:
                raise ValueError(f"interpolation {mode} is not supported; use NEAREST, "
                                 "NEAREST_EXACT, BILINEAR or BICUBIC")
            return found
    raise TypeError("interpolation must be a str, turboloader Interpolation or torchvision "
                    f"InterpolationMode, got {type(mode).__name__}")
