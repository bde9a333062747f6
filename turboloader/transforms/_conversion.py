"""Type and dtype conversions with torchvision v2's names and semantics: ``ToTensor``,
``ToImage``, ``PILToTensor``, ``ToDtype``, ``ConvertImageDtype``, ``ToPILImage``,
``ToPureTensor``, and ``Normalize``.

Tensors these return are plain ``torch.Tensor`` (torchvision v2's ``ToImage`` returns a
``tv_tensors.Image``, a subclass its transforms treat the same way for a single image), so
the fused path and the generic path return one type. A tensor conversion, optionally
``ToDtype(torch.float32)`` / ``ConvertImageDtype(torch.float32)`` and ``Normalize``, ends
every fused pipeline (see :func:`turboloader.transforms.plan`).
"""

from __future__ import annotations

from typing import Any
import warnings

import torch

from turboloader.transforms import functional as F
from turboloader.transforms._transform import Transform, _tvf

__all__ = [
    "ConvertImageDtype",
    "Normalize",
    "PILToTensor",
    "ToDtype",
    "ToImage",
    "ToPILImage",
    "ToPureTensor",
    "ToTensor",
]



class ToTensor(Transform):
    """PIL image or HWC array -> float32 CHW tensor in [0, 1], like torchvision's
    ``ToTensor`` (uint8 is divided by 255); tensors pass through unchanged.

    Example:
        >>> ToTensor()(pil_image).dtype  # doctest: +SKIP
        torch.float32
    """

    _kinds = ("pil", "ndarray")

    def transform(self, img, params):
        from torchvision.transforms import functional as F1

        return F1.to_tensor(img)


class PILToTensor(Transform):
    """PIL image -> uint8 CHW tensor (no scaling); anything else passes through unchanged.

    Example:
        >>> PILToTensor()(pil_image).dtype  # doctest: +SKIP
        torch.uint8
    """

    _kinds = ("pil",)

    def transform(self, img, params):
        return F.pil_to_tensor(img)


class ToImage(Transform):
    """PIL image, HWC array or tensor -> CHW tensor of the same dtype, like v2's ``ToImage``.

    Returns a plain ``torch.Tensor`` (v2 returns ``tv_tensors.Image``, a subclass that
    v2 transforms treat the same way for a single image), so fused and generic outputs
    have one type.

    Example:
        >>> ToImage()(np.zeros((4, 5, 3), np.uint8)).shape
        torch.Size([3, 4, 5])
    """

    def transform(self, img, params):
        return _tvf().to_image(img).as_subclass(torch.Tensor)


class ToDtype(Transform):
    """Convert a tensor's dtype, scaling values when ``scale`` (uint8 -> float: / 255), like
    v2's ``ToDtype``. PIL images and arrays pass through unchanged, as in torchvision.

    Args:
        dtype: a ``torch.dtype``, or a dict as torchvision's: the entry for the input's type
            (a plain tensor is an image here, so after :class:`ToImage` its
            ``tv_tensors.Image`` entry applies, as it does in torchvision), else
            ``"others"``; None leaves the input unchanged.
        scale: rescale the value range between integer and float dtypes.

    Raises:
        ValueError: ``dtype`` is neither; at call time, a dict with no entry for the input
            (as torchvision). Warns (as torchvision) for a dict with entries for both
            ``torch.Tensor`` and ``tv_tensors.Image``, and when ``scale`` meets a None entry.

    Example:
        >>> ToDtype(torch.float32, scale=True)(torch.zeros(3, 2, 2, dtype=torch.uint8)).dtype
        torch.float32
    """

    _kinds = ("tensor",)

    def __init__(self, dtype: Any, scale: Any = False) -> None:
        if not isinstance(dtype, (dict, torch.dtype)):
            raise ValueError(f"dtype must be a dict or a torch.dtype, but got {type(dtype)} instead")
        if isinstance(dtype, dict) and torch.Tensor in dtype:
            from torchvision import tv_tensors

            if tv_tensors.Image in dtype or tv_tensors.Video in dtype:
                warnings.warn(
                    "Got `dtype` values for `torch.Tensor` and either `tv_tensors.Image` or "
                    "`tv_tensors.Video`. Note that a plain `torch.Tensor` will *not* be "
                    "transformed by this (or any other transformation) in case a "
                    "`tv_tensors.Image` or `tv_tensors.Video` is present in the input.",
                    stacklevel=2)
        self.dtype = dtype
        self.scale = scale

    def _dtype_for(self, img):
        """The dtype ``img`` (a tensor) converts to, or None to leave it unchanged."""
        if isinstance(self.dtype, torch.dtype):
            return self.dtype
        from torchvision import tv_tensors

        if type(img) in self.dtype:
            return self.dtype[type(img)]
        if type(img) is torch.Tensor and tv_tensors.Image in self.dtype:
            return self.dtype[tv_tensors.Image]
        if "others" in self.dtype:
            return self.dtype["others"]
        raise ValueError(
            f"No dtype was specified for type {type(img)}. If you only need to convert the "
            "dtype of images or videos, you can just pass e.g. dtype=torch.float32. If you're "
            'passing a dict as dtype, you can use "others" as a catch-all key e.g. '
            'dtype={tv_tensors.Mask: torch.int64, "others": None} to pass-through the rest of '
            "the inputs.")

    def transform(self, img, params):
        dtype = self._dtype_for(img)
        if dtype is None:
            if self.scale:
                warnings.warn("scale was set to True but no dtype was specified for images or "
                              "videos: no scaling will be done.", stacklevel=3)
            return img
        return F.to_dtype(img, dtype, scale=self.scale)

    def _extra_repr(self):
        return f"dtype={self.dtype}, scale={self.scale}"


class ConvertImageDtype(Transform):
    """``ToDtype(dtype, scale=True)`` under its older name, like
    ``torchvision.transforms.v2.ConvertImageDtype`` (which torchvision's classification
    presets use): tensors are converted and rescaled, PIL images and arrays pass through.

    Args:
        dtype: the ``torch.dtype`` to convert to (default ``torch.float32``).

    Raises:
        RuntimeError: at call time, float -> int32/int64 or float64 -> int64 (as torchvision).

    Example:
        >>> ConvertImageDtype(torch.float)(torch.full((1, 1, 1), 255, dtype=torch.uint8)).item()
        1.0
    """

    _kinds = ("tensor",)

    def __init__(self, dtype: Any = torch.float32) -> None:
        self.dtype = dtype
        self.scale = True

    def transform(self, img, params):
        return F.to_dtype(img, self.dtype, scale=True)

    def _extra_repr(self):
        return f"dtype={self.dtype}"


class ToPILImage(Transform):
    """A CHW tensor or HWC array as a PIL image, like ``torchvision.transforms.v2.ToPILImage``
    (float images are scaled by 255; PIL images pass through).

    Args:
        mode: Pillow's mode of the input data; None guesses it from the channels
            (4: RGBA, 3: RGB, 2: LA, 1: by dtype).

    Example:
        >>> ToPILImage()(torch.zeros(3, 4, 5, dtype=torch.uint8)).size
        (5, 4)
    """

    _kinds = ("tensor", "ndarray")

    def __init__(self, mode: str | None = None) -> None:
        self.mode = mode

    def transform(self, img, params):
        return F.to_pil_image(img, mode=self.mode)

    def _extra_repr(self):
        return f"mode={self.mode}"


class ToPureTensor(Transform):
    """``tv_tensors`` (e.g. ``tv_tensors.Image``) as plain ``torch.Tensor``, like
    ``torchvision.transforms.v2.ToPureTensor``; anything else passes through unchanged.
    (turboloader's own transforms already return plain tensors.)

    Example:
        >>> type(ToPureTensor()(torch.zeros(1))) is torch.Tensor
        True
    """

    _kinds = ("tensor",)

    def transform(self, img, params):
        return img if type(img) is torch.Tensor else img.as_subclass(torch.Tensor)


class Normalize(Transform):
    """``(x - mean[c]) / std[c]`` on a float tensor, like ``torchvision.transforms.v2.Normalize``.

    Args:
        mean, std: per-channel sequences.
        inplace: modify the tensor in place.

    Raises:
        TypeError: a PIL image or array (torchvision raises for PIL too), or a non-float tensor.

    Example:
        >>> Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))(x)  # doctest: +SKIP
    """

    def __init__(self, mean: Any, std: Any, inplace: bool = False) -> None:
        self.mean = list(mean)
        self.std = list(std)
        self.inplace = inplace

    def transform(self, img, params):
        return F.normalize(img, self.mean, self.std, self.inplace)

    def _extra_repr(self):
        return f"mean={self.mean}, std={self.std}, inplace={self.inplace}"
