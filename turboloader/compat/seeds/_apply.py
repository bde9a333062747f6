"""The seed documents' ``.apply(img)`` transforms on HWC arrays; sizes as (width, height)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
import enum

import numpy as np
import torch

from turboloader.compat.seeds._loader import _T
from turboloader.compat.seeds._pipeline import ResizeMethod
from turboloader.transforms.presets import IMAGENET_MEAN, IMAGENET_STD

__all__ = [
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "ImageNetNormalize",
    "RandomCrop",
    "RandomHorizontalFlip",
    "Resize",
    "TensorFormat",
    "ToTensor",
]


# ---------------------------------------------------------------------------------------
# .apply(img) transforms on HWC arrays; sizes as (width, height)
# ---------------------------------------------------------------------------------------

class TensorFormat(enum.Enum):
    """Layouts of :class:`ToTensor`."""

    PYTORCH_CHW = "CHW"
    TENSORFLOW_HWC = "HWC"


def _hwc(img):
    if isinstance(img, np.ndarray):
        return img
    if isinstance(img, torch.Tensor):
        raise TypeError("these transforms take HWC NumPy arrays; for tensors use "
                        "turboloader.transforms (torchvision's classes)")
    return np.asarray(img)  # a PIL image


class _Apply:
    """Base: ``apply(img)`` is the seed contract (an HWC array in and out); calling the object
    is torchvision's meaning of the class name: :meth:`torchvision_transform` applied to a PIL
    image, a tensor or an HWC array (see the module docstring)."""

    transform = None  # the turboloader.transforms class that .apply delegates to

    def apply(self, img):
        return self.transform(_hwc(img))

    def torchvision_transform(self):
        """The :mod:`turboloader.transforms` transform that calling this object runs."""
        return self.transform

    def __call__(self, img):
        return self.torchvision_transform()(img)

    def __repr__(self):
        return f"{type(self).__name__}({self.transform!r})"


def _is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _wh(name, width, height, *, square_ok):
    """``(width, height)`` of a seed transform, refusing the calls torchvision reads
    differently (a TypeError naming the torchvision-exact class)."""
    exact = f"turboloader.transforms.{name}"
    if isinstance(width, (tuple, list)):
        raise TypeError(
            f"turboloader.{name}({tuple(width)}): the seed API's {name} takes (width, height) "
            f"as two ints; a size sequence is torchvision's (height, width) order, which is "
            f"{exact}({tuple(width)})")
    if height is None and not square_ok:
        raise TypeError(
            f"turboloader.{name}({width!r}) is ambiguous: the seed API's {name}(width, height) "
            f"needs both sides (turboloader.{name}({width!r}, {width!r}) for a square), while "
            f"torchvision's {name}({width!r}) resizes the shorter side to {width!r}: that is "
            f"{exact}({width!r})")
    if not _is_int(width) or not (height is None or _is_int(height)):
        raise TypeError(f"turboloader.{name}(width, height) takes ints, got {width!r}, "
                        f"{height!r} (torchvision's arguments go to {exact})")
    width = int(width)
    height = width if height is None else int(height)
    if width < 1 or height < 1:
        raise ValueError(f"width and height must be >= 1, got {width}x{height}")
    return width, height


class Resize(_Apply):
    """Resize to exactly ``width`` x ``height``; the aspect ratio is not kept. Equivalent to
    ``turboloader.transforms.Resize((height, width))``, which calling the object runs.

    ``Resize(224)`` (one side) raises TypeError: torchvision's ``Resize(224)`` would resize the
    shorter side, so use ``turboloader.transforms.Resize(224)`` for that, or
    ``Resize(224, 224)`` for the square.

    Example:
        >>> Resize(224, 224).apply(np.zeros((300, 400, 3), np.uint8)).shape
        (224, 224, 3)
    """

    def __init__(self, width: int, height: int | None = None, method: Any = ResizeMethod.BILINEAR
                ) -> None:
        self.width, self.height = _wh("Resize", width, height, square_ok=False)
        method = method.value if isinstance(method, ResizeMethod) else method
        self.transform = _T().Resize((self.height, self.width), interpolation=method,
                                     antialias=True)


class CenterCrop(_Apply):
    """Central ``width`` x ``height`` window (zero-padded when larger than the image), i.e.
    ``turboloader.transforms.CenterCrop((height, width))``; ``CenterCrop(224)`` is the
    square, as in torchvision.

    Example:
        >>> CenterCrop(224, 224).apply(np.zeros((256, 256, 3), np.uint8)).shape
        (224, 224, 3)
    """

    def __init__(self, width: int, height: int | None = None) -> None:
        self.width, self.height = _wh("CenterCrop", width, height, square_ok=True)
        self.transform = _T().CenterCrop((self.height, self.width))


class RandomCrop(_Apply):
    """A random ``width`` x ``height`` window; for ``.apply`` an image smaller than that is
    zero-padded first (torchvision's ``pad_if_needed=True``).

    Calling the object is torchvision's ``RandomCrop(size, padding=...)`` (no
    ``pad_if_needed``) when only ``width`` is given; ``RandomCrop(w, h)`` objects refuse to be
    called (torchvision reads that as ``RandomCrop(size=w, padding=h)``): use ``.apply``, or
    ``turboloader.transforms.RandomCrop((h, w))``.

    Example:
        >>> RandomCrop(224, 224).apply(np.zeros((256, 256, 3), np.uint8)).shape
        (224, 224, 3)
    """

    def __init__(self, width: int, height: int | None = None,
                 padding: int | Sequence[int] | None = None) -> None:
        self._square = height is None
        self.width, self.height = _wh("RandomCrop", width, height, square_ok=True)
        self.padding = padding
        self.transform = _T().RandomCrop((self.height, self.width), padding=padding,
                                         pad_if_needed=True)

    def torchvision_transform(self):
        if not self._square:
            raise TypeError(
                f"turboloader.RandomCrop({self.width}, {self.height}) is the seed API's "
                f"(width, height) crop: use .apply(img). Called like torchvision's "
                f"RandomCrop({self.width}, {self.height}) it would mean padding={self.height}; "
                f"torchvision's crop of that size is "
                f"turboloader.transforms.RandomCrop(({self.height}, {self.width}))")
        return _T().RandomCrop(self.width, padding=self.padding)


class RandomHorizontalFlip(_Apply):
    """Mirror left-right with probability ``p`` (torchvision's ``RandomHorizontalFlip``)."""

    def __init__(self, p: float = 0.5) -> None:
        self.p = float(p)
        self.transform = _T().RandomHorizontalFlip(self.p)


class ColorJitter(_Apply):
    """Random brightness, contrast, saturation and hue (torchvision's factors and order)
    on HWC uint8.

    Example:
        >>> ColorJitter(0.2, 0.2, 0.2, 0.1).apply(np.zeros((8, 8, 3), np.uint8)).dtype
        dtype('uint8')
    """

    def __init__(self, brightness: Any = 0.0, contrast: Any = 0.0, saturation: Any = 0.0,
                 hue: Any = 0.0) -> None:
        self.transform = _T().ColorJitter(brightness or None, contrast or None,
                                          saturation or None, hue or None)


class ImageNetNormalize(_Apply):
    """HWC uint8 (or float in [0, 1]) -> HWC float32 ``(x / 255 - mean) / std``.

    A CHW float input (after :class:`ToTensor`) is normalised along its first axis.

    Args:
        mean, std: per-channel statistics (default ImageNet's).

    Example:
        >>> ImageNetNormalize().apply(np.full((2, 2, 3), 255, np.uint8))[0, 0].round(3)
        array([2.249, 2.429, 2.64 ], dtype=float32)
    """

    def __init__(self, mean: Any = IMAGENET_MEAN, std: Any = IMAGENET_STD) -> None:
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        self.transform = None

    def __call__(self, img):  # no torchvision class of this name: the seed meaning
        return self.apply(img)

    def apply(self, img):
        from turboloader.transforms import functional as F

        img = _hwc(img)
        if img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3:
            # native HWC -> CHW normalise; hand back an HWC view of the CHW result, so a
            # following ToTensor(PYTORCH_CHW) is a free transpose
            return F.to_chw_normalized(np.ascontiguousarray(img), self.mean, self.std).transpose(1, 2, 0)
        x = img.astype(np.float32) / (255.0 if img.dtype == np.uint8 else 1.0)
        chw = x.ndim == 3 and x.shape[0] == len(self.mean) and x.shape[-1] != len(self.mean)
        shape = (-1, 1, 1) if chw else (1, 1, -1)
        mean = np.asarray(self.mean, np.float32).reshape(shape)
        std = np.asarray(self.std, np.float32).reshape(shape)
        return (x - mean) / std

    def __repr__(self):
        return f"ImageNetNormalize(mean={self.mean}, std={self.std})"


class ToTensor(_Apply):
    """``.apply`` changes the layout: HWC -> CHW for ``PYTORCH_CHW`` (default), unchanged for
    ``TENSORFLOW_HWC``. The dtype is kept (no scaling; see the module docstring) and the
    result is a C-contiguous NumPy array, ready for ``torch.from_numpy``.

    Calling ``ToTensor()`` (or ``ToTensor(PYTORCH_CHW)``) is torchvision's ``ToTensor``: a
    float32 CHW tensor in [0, 1]. ``ToTensor(TENSORFLOW_HWC)``, which torchvision has no
    counterpart of, does the same as ``.apply`` when called.

    Example:
        >>> ToTensor(TensorFormat.PYTORCH_CHW).apply(np.zeros((4, 6, 3), np.uint8)).shape
        (3, 4, 6)
    """

    def __init__(self, format: TensorFormat | str = TensorFormat.PYTORCH_CHW) -> None:
        self.format = TensorFormat(format)

    def torchvision_transform(self):
        return _T().ToTensor()

    def __call__(self, img):
        if self.format is TensorFormat.TENSORFLOW_HWC:
            return self.apply(img)
        return self.torchvision_transform()(img)

    def apply(self, img):
        img = _hwc(img)
        if img.ndim == 2:
            img = img[:, :, None]
        if self.format is TensorFormat.PYTORCH_CHW:
            img = img.transpose(2, 0, 1)
        return np.ascontiguousarray(img)

    def __repr__(self):
        return f"ToTensor({self.format})"


class Compose(_Apply):
    """Apply ``transforms`` in order: ``Compose([...]).apply(img)``.

    Members may be the classes of this module (their ``apply`` is called) or any callable,
    e.g. a :mod:`turboloader.transforms` class (called on the array as is). Calling the
    object is torchvision's ``Compose``: each member is called in turn (for the classes of
    this module, their torchvision meaning; see the module docstring).

    Example:
        >>> t = Compose([Resize(32, 32), ImageNetNormalize(), ToTensor()])
        >>> t.apply(np.zeros((48, 64, 3), np.uint8)).shape
        (3, 32, 32)
    """

    def __init__(self, transforms: Any) -> None:
        self.transforms = list(transforms)
        for t in self.transforms:
            if not (callable(t) or callable(getattr(t, "apply", None))):
                raise TypeError(f"Compose members must be transforms, got {type(t).__name__}")

    def apply(self, img):
        img = _hwc(img)
        for t in self.transforms:
            apply = getattr(t, "apply", None)
            img = apply(img) if callable(apply) else t(img)
        return img

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img

    def __repr__(self):
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"Compose([{inner}])"
