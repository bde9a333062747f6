"""The AutoAugment family with torchvision v2's names, arguments and semantics:
``AutoAugment`` (ImageNet, CIFAR10 and SVHN policies), ``RandAugment``,
``TrivialAugmentWide`` and ``AugMix``.

They draw in torchvision's order, so under torch's global RNG (outside a turboloader
dataset) ``torch.manual_seed(s)`` selects the same operations and magnitudes as
torchvision's classes; inside a dataset the sample's generator draws them. The operations
run through :mod:`turboloader.transforms.functional`: torchvision's functionals for PIL
images and tensors, native kernels (bit for bit torchvision's uint8 tensor kernels) for HWC
uint8 arrays. These transforms do not fuse with the decoder: in a dataset they run on the
decoded PIL image, as torchvision's do.
"""

from __future__ import annotations

from typing import Any
import enum
import math

import numpy as np
import torch
from PIL import Image

from turboloader.transforms import functional as F
from turboloader.transforms._random import TorchRandom
from turboloader.transforms._transform import (
    Transform,
    _check_interpolation,
    _contiguous,
    _interp_repr,
    _kind,
    _randint_below,
    _rng,
    _setup_fill,
)

__all__ = ["AugMix", "AutoAugment", "AutoAugmentPolicy", "RandAugment", "TrivialAugmentWide"]



class AutoAugmentPolicy(enum.Enum):
    """AutoAugment policies learned on ImageNet, CIFAR10 and SVHN (torchvision's values; its
    own ``AutoAugmentPolicy`` members are accepted too)."""

    IMAGENET = "imagenet"
    CIFAR10 = "cifar10"
    SVHN = "svhn"


_POLICIES = {
    "imagenet": [
        (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)),
        (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
        (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
        (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
        (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
        (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
        (("Solarize", 0.6, 3), ("Equalize", 0.6, None)),
        (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
        (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)),
        (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
        (("Rotate", 0.8, 8), ("Color", 0.4, 0)),
        (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
        (("Equalize", 0.0, None), ("Equalize", 0.8, None)),
        (("Invert", 0.6, None), ("Equalize", 1.0, None)),
        (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
        (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
        (("Color", 0.8, 8), ("Solarize", 0.8, 7)),
        (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
        (("ShearX", 0.6, 5), ("Equalize", 1.0, None)),
        (("Color", 0.4, 0), ("Equalize", 0.6, None)),
        (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
        (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
        (("Invert", 0.6, None), ("Equalize", 1.0, None)),
        (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
        (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
    ],
    "cifar10": [
        (("Invert", 0.1, None), ("Contrast", 0.2, 6)),
        (("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)),
        (("Sharpness", 0.8, 1), ("Sharpness", 0.9, 3)),
        (("ShearY", 0.5, 8), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.5, None), ("Equalize", 0.9, None)),
        (("ShearY", 0.2, 7), ("Posterize", 0.3, 7)),
        (("Color", 0.4, 3), ("Brightness", 0.6, 7)),
        (("Sharpness", 0.3, 9), ("Brightness", 0.7, 9)),
        (("Equalize", 0.6, None), ("Equalize", 0.5, None)),
        (("Contrast", 0.6, 7), ("Sharpness", 0.6, 5)),
        (("Color", 0.7, 7), ("TranslateX", 0.5, 8)),
        (("Equalize", 0.3, None), ("AutoContrast", 0.4, None)),
        (("TranslateY", 0.4, 3), ("Sharpness", 0.2, 6)),
        (("Brightness", 0.9, 6), ("Color", 0.2, 8)),
        (("Solarize", 0.5, 2), ("Invert", 0.0, None)),
        (("Equalize", 0.2, None), ("AutoContrast", 0.6, None)),
        (("Equalize", 0.2, None), ("Equalize", 0.6, None)),
        (("Color", 0.9, 9), ("Equalize", 0.6, None)),
        (("AutoContrast", 0.8, None), ("Solarize", 0.2, 8)),
        (("Brightness", 0.1, 3), ("Color", 0.7, 0)),
        (("Solarize", 0.4, 5), ("AutoContrast", 0.9, None)),
        (("TranslateY", 0.9, 9), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.9, None), ("Solarize", 0.8, 3)),
        (("Equalize", 0.8, None), ("Invert", 0.1, None)),
        (("TranslateY", 0.7, 9), ("AutoContrast", 0.9, None)),
    ],
    "svhn": [
        (("ShearX", 0.9, 4), ("Invert", 0.2, None)),
        (("ShearY", 0.9, 8), ("Invert", 0.7, None)),
        (("Equalize", 0.6, None), ("Solarize", 0.6, 6)),
        (("Invert", 0.9, None), ("Equalize", 0.6, None)),
        (("Equalize", 0.6, None), ("Rotate", 0.9, 3)),
        (("ShearX", 0.9, 4), ("AutoContrast", 0.8, None)),
        (("ShearY", 0.9, 8), ("Invert", 0.4, None)),
        (("ShearY", 0.9, 5), ("Solarize", 0.2, 6)),
        (("Invert", 0.9, None), ("AutoContrast", 0.8, None)),
        (("Equalize", 0.6, None), ("Rotate", 0.9, 3)),
        (("ShearX", 0.9, 4), ("Solarize", 0.3, 3)),
        (("ShearY", 0.8, 8), ("Invert", 0.7, None)),
        (("Equalize", 0.9, None), ("TranslateY", 0.6, 6)),
        (("Invert", 0.9, None), ("Equalize", 0.6, None)),
        (("Contrast", 0.3, 3), ("Rotate", 0.8, 4)),
        (("Invert", 0.8, None), ("TranslateY", 0.0, 2)),
        (("ShearY", 0.7, 6), ("Solarize", 0.4, 8)),
        (("Invert", 0.6, None), ("Rotate", 0.8, 4)),
        (("ShearY", 0.3, 7), ("TranslateX", 0.9, 3)),
        (("ShearX", 0.1, 6), ("Invert", 0.6, None)),
        (("Solarize", 0.7, 2), ("TranslateY", 0.6, 7)),
        (("ShearY", 0.8, 4), ("Invert", 0.8, None)),
        (("ShearX", 0.7, 9), ("TranslateY", 0.8, 3)),
        (("ShearY", 0.8, 5), ("AutoContrast", 0.7, None)),
        (("ShearX", 0.7, 2), ("Invert", 0.1, None)),
    ],
}


def _lin(a, b):
    return lambda n, h, w: torch.linspace(a, b, n)


def _posterize_bins(div):
    return lambda n, h, w: (8 - (torch.arange(n) / ((n - 1) / div))).round().int()


_NONE = (lambda n, h, w: None, False)

# name -> (magnitudes(num_bins, height, width) computed with torch as torchvision, signed)
_AA_SPACE = {
    "ShearX": (_lin(0.0, 0.3), True),
    "ShearY": (_lin(0.0, 0.3), True),
    "TranslateX": (lambda n, h, w: torch.linspace(0.0, 150.0 / 331.0 * w, n), True),
    "TranslateY": (lambda n, h, w: torch.linspace(0.0, 150.0 / 331.0 * h, n), True),
    "Rotate": (_lin(0.0, 30.0), True),
    "Brightness": (_lin(0.0, 0.9), True),
    "Color": (_lin(0.0, 0.9), True),
    "Contrast": (_lin(0.0, 0.9), True),
    "Sharpness": (_lin(0.0, 0.9), True),
    "Posterize": (_posterize_bins(4), False),
    "Solarize": (_lin(1.0, 0.0), False),
    "AutoContrast": _NONE,
    "Equalize": _NONE,
    "Invert": _NONE,
}
_RA_SPACE = {"Identity": _NONE, **{k: v for k, v in _AA_SPACE.items() if k != "Invert"}}
_TA_SPACE = {
    "Identity": _NONE,
    "ShearX": (_lin(0.0, 0.99), True),
    "ShearY": (_lin(0.0, 0.99), True),
    "TranslateX": (_lin(0.0, 32.0), True),
    "TranslateY": (_lin(0.0, 32.0), True),
    "Rotate": (_lin(0.0, 135.0), True),
    "Brightness": (_lin(0.0, 0.99), True),
    "Color": (_lin(0.0, 0.99), True),
    "Contrast": (_lin(0.0, 0.99), True),
    "Sharpness": (_lin(0.0, 0.99), True),
    "Posterize": (_posterize_bins(6), False),
    "Solarize": (_lin(1.0, 0.0), False),
    "AutoContrast": _NONE,
    "Equalize": _NONE,
}


def _apply_op(img, op, magnitude, interpolation="nearest", fill=None):
    # One AutoAugment operation by name, with torchvision v2's mapping of `magnitude` to
    # functional arguments (_AutoAugmentBase._apply_image_or_video_transform); the
    # functionals send arrays to turboloader's kernels, tensors and PIL images to torchvision.
    img = _contiguous(img)
    if op == "Identity":
        return img
    if op in ("ShearX", "ShearY"):
        s = math.degrees(math.atan(magnitude))
        shear = [s, 0.0] if op == "ShearX" else [0.0, s]
        return F.affine(img, 0.0, [0, 0], 1.0, shear, interpolation=interpolation, fill=fill,
                        center=[0, 0])
    if op in ("TranslateX", "TranslateY"):
        t = [int(magnitude), 0] if op == "TranslateX" else [0, int(magnitude)]
        return F.affine(img, 0.0, t, 1.0, [0.0, 0.0], interpolation=interpolation, fill=fill)
    if op == "Rotate":
        return F.rotate(img, magnitude, interpolation=interpolation, fill=fill)
    if op == "Brightness":
        return F.adjust_brightness(img, 1.0 + magnitude)
    if op == "Color":
        return F.adjust_saturation(img, 1.0 + magnitude)
    if op == "Contrast":
        return F.adjust_contrast(img, 1.0 + magnitude)
    if op == "Sharpness":
        return F.adjust_sharpness(img, 1.0 + magnitude)
    if op == "Posterize":
        return F.posterize(img, int(magnitude))
    if op == "Solarize":
        bound = 255.0 if (_kind(img) != "tensor" or img.dtype == torch.uint8) else 1.0
        return F.solarize(img, bound * magnitude)
    if op == "AutoContrast":
        return F.autocontrast(img)
    if op == "Equalize":
        return F.equalize(img)
    if op == "Invert":
        return F.invert(img)
    raise ValueError(f"No transform available for {op}")


class _AutoAugmentBase(Transform):
    _uses_size = True
    # some of the ops move pixels (shear, translate, rotate): a mask or boxes would not follow,
    # so joint samples with them are refused (TypeError), as torchvision v2 refuses them
    _geometric = True

    def __init__(self, *, interpolation="nearest", fill=None):
        self.interpolation = _check_interpolation(interpolation)
        self.fill = fill
        self._fill = _setup_fill(fill)

    @staticmethod
    def _magnitude(space, op, index, num_bins, size, rng):
        fn, signed = space[op]
        mags = fn(num_bins, size[0], size[1])
        if mags is None:
            return 0.0
        m = float(mags[index])
        if signed and rng.random() <= 0.5:   # torchvision: torch.rand(()) <= 0.5
            m *= -1
        return m

    def transform(self, img, params):
        for op, magnitude in params["ops"]:
            img = _apply_op(img, op, magnitude, self.interpolation, self._fill)
        return img

    def _extra_repr(self):
        return f"interpolation={_interp_repr(self.interpolation)!r}, fill={self.fill}"


class AutoAugment(_AutoAugmentBase):
    """AutoAugment (Cubuk et al.) with the ImageNet, CIFAR10 or SVHN policy, like
    ``torchvision.transforms.v2.AutoAugment``: one of 25 sub-policies, each of two operations
    applied with its probability and fixed magnitude (sign drawn for signed ops).

    Under torch's RNG (outside a dataset) the draws are torchvision's own, in the same order,
    so ``torch.manual_seed(s)`` gives the same operations as torchvision.

    Args:
        policy: an :class:`AutoAugmentPolicy` (or torchvision's, or ``"imagenet"``...).
        interpolation: ``"nearest"`` (default) or ``"bilinear"`` for the geometric ops.
        fill: fill for the geometric ops: None, a number or one per channel.

    Raises:
        ValueError: unknown policy.

    Example:
        >>> AutoAugment(AutoAugmentPolicy.CIFAR10)(img)  # doctest: +SKIP
    """

    def __init__(self, policy: Any = AutoAugmentPolicy.IMAGENET, interpolation: Any = "nearest",
                 fill: Any = None) -> None:
        super().__init__(interpolation=interpolation, fill=fill)
        name = getattr(policy, "value", policy)
        if name not in _POLICIES:
            raise ValueError(f"The provided policy {policy} is not recognized.")
        self.policy = AutoAugmentPolicy(name)
        self._policies = _POLICIES[name]

    def make_params(self, size, *, rng=None):
        """``{"ops": [(name, magnitude), ...]}``: the operations that fire, in order."""
        rng = _rng(rng)
        policy = self._policies[_randint_below(rng, len(self._policies))]
        ops = []
        for op, probability, index in policy:
            if not rng.random() <= probability:
                continue
            ops.append((op, self._magnitude(_AA_SPACE, op, index, 10, size, rng)))
        return {"ops": ops}

    def _extra_repr(self):
        return f"policy={self.policy}, " + super()._extra_repr()


class RandAugment(_AutoAugmentBase):
    """RandAugment (Cubuk et al.): ``num_ops`` operations drawn uniformly, all at one
    ``magnitude`` out of ``num_magnitude_bins``, like ``torchvision.transforms.v2.RandAugment``.

    Args:
        num_ops: number of operations (>= 0). magnitude: bin index. num_magnitude_bins: bins.
        interpolation, fill: as :class:`AutoAugment`.

    Example:
        >>> RandAugment(num_ops=2, magnitude=9)(img)  # doctest: +SKIP
    """

    def __init__(self, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31,
                 interpolation: Any = "nearest", fill: Any = None) -> None:
        super().__init__(interpolation=interpolation, fill=fill)
        if not isinstance(num_ops, int) or num_ops < 0:
            raise ValueError(f"num_ops should be a non-negative integer, but got {num_ops} instead.")
        self.num_ops = num_ops
        self.magnitude = magnitude
        self.num_magnitude_bins = num_magnitude_bins

    def make_params(self, size, *, rng=None):
        """``{"ops": [(name, magnitude), ...]}``, ``num_ops`` entries."""
        rng = _rng(rng)
        keys = tuple(_RA_SPACE)
        ops = []
        for _ in range(self.num_ops):
            op = keys[_randint_below(rng, len(keys))]
            ops.append((op, self._magnitude(_RA_SPACE, op, self.magnitude,
                                            self.num_magnitude_bins, size, rng)))
        return {"ops": ops}

    def _extra_repr(self):
        return (f"num_ops={self.num_ops}, magnitude={self.magnitude}, "
                f"num_magnitude_bins={self.num_magnitude_bins}, " + super()._extra_repr())


class TrivialAugmentWide(_AutoAugmentBase):
    """TrivialAugment Wide (Müller & Hutter): one operation and one magnitude bin drawn
    uniformly, like ``torchvision.transforms.v2.TrivialAugmentWide``.

    Example:
        >>> TrivialAugmentWide()(img)  # doctest: +SKIP
    """

    def __init__(self, num_magnitude_bins: int = 31, interpolation: Any = "nearest",
                 fill: Any = None) -> None:
        super().__init__(interpolation=interpolation, fill=fill)
        self.num_magnitude_bins = num_magnitude_bins

    def make_params(self, size, *, rng=None):
        """``{"ops": [(name, magnitude)]}``."""
        rng = _rng(rng)
        keys = tuple(_TA_SPACE)
        op = keys[_randint_below(rng, len(keys))]
        fn, _ = _TA_SPACE[op]
        if fn(self.num_magnitude_bins, size[0], size[1]) is None:
            return {"ops": [(op, 0.0)]}
        index = _randint_below(rng, self.num_magnitude_bins)
        return {"ops": [(op, self._magnitude(_TA_SPACE, op, index, self.num_magnitude_bins,
                                             size, rng))]}

    def _extra_repr(self):
        return f"num_magnitude_bins={self.num_magnitude_bins}, " + super()._extra_repr()


# AugMix's operations: torchvision's _PARTIAL_AUGMENTATION_SPACE and _AUGMENTATION_SPACE
_AUGMIX_PARTIAL_SPACE = {
    "ShearX": (_lin(0.0, 0.3), True),
    "ShearY": (_lin(0.0, 0.3), True),
    "TranslateX": (lambda n, h, w: torch.linspace(0.0, w / 3.0, n), True),
    "TranslateY": (lambda n, h, w: torch.linspace(0.0, h / 3.0, n), True),
    "Rotate": (_lin(0.0, 30.0), True),
    "Posterize": (lambda n, h, w: (4 - (torch.arange(n) / ((n - 1) / 4))).round().int(), False),
    "Solarize": (_lin(1.0, 0.0), False),
    "AutoContrast": _NONE,
    "Equalize": _NONE,
}
_AUGMIX_SPACE = {
    **_AUGMIX_PARTIAL_SPACE,
    "Brightness": (_lin(0.0, 0.9), True),
    "Color": (_lin(0.0, 0.9), True),
    "Contrast": (_lin(0.0, 0.9), True),
    "Sharpness": (_lin(0.0, 0.9), True),
}


def _dirichlet(rng, alphas):
    """One Dirichlet(alphas) draw as a float32 (1, k) tensor: torchvision's own
    (``torch._sample_dirichlet``) under torch's RNG, normalised gamma variates from ``rng``
    otherwise."""
    if isinstance(rng, TorchRandom):
        return torch._sample_dirichlet(torch.tensor(alphas).expand(1, -1))
    g = [rng.gammavariate(a, 1.0) for a in alphas]
    total = sum(g)
    return torch.tensor([[x / total for x in g]], dtype=torch.float32)


class AugMix(_AutoAugmentBase):
    """AugMix (Hendrycks et al.), like ``torchvision.transforms.v2.AugMix``: ``mixture_width``
    chains of 1-3 (or ``chain_depth``) random operations at up to ``severity`` are mixed with
    Dirichlet(``alpha``) weights, then blended with the original by a Beta(``alpha``) weight.

    As in torchvision, a PIL image is mixed as its uint8 tensor (float32 arithmetic,
    truncated back to uint8), so the three image kinds give the same pixels; under torch's
    RNG the draws are torchvision's own, in its order.

    Args:
        severity: the magnitude bin bound, in [1, 10].
        mixture_width: the number of chains.
        chain_depth: operations per chain; a value <= 0 draws 1 to 3 per chain.
        alpha: the Dirichlet and Beta parameter.
        all_ops: include brightness, colour, contrast and sharpness.
        interpolation: ``"bilinear"`` (default) or ``"nearest"`` for the geometric ops.
        fill: fill for the geometric ops: None, a number or one per channel.

    Raises:
        ValueError: ``severity`` outside [1, 10].

    Example:
        >>> AugMix(severity=3)(img)  # doctest: +SKIP
    """

    _PARAMETER_MAX = 10

    def __init__(self, severity: int = 3, mixture_width: int = 3, chain_depth: int = -1,
                 alpha: float = 1.0, all_ops: bool = True, interpolation: Any = "bilinear",
                 fill: Any = None) -> None:
        super().__init__(interpolation=interpolation, fill=fill)
        if not (1 <= severity <= self._PARAMETER_MAX):
            raise ValueError(f"The severity must be between [1, {self._PARAMETER_MAX}]. Got "
                             f"{severity} instead.")
        self.severity = severity
        self.mixture_width = mixture_width
        self.chain_depth = chain_depth
        self.alpha = alpha
        self.all_ops = all_ops

    def make_params(self, size, *, rng=None):
        """``{"m": (1, 2) float32 Beta weights (original, augmented), "weights": (1,
        mixture_width) float32 chain weights, "chains": [[(name, magnitude), ...], ...]}``
        for an image of ``size = (height, width)``."""
        rng = _rng(rng)
        height, width = size
        space = _AUGMIX_SPACE if self.all_ops else _AUGMIX_PARTIAL_SPACE
        keys = tuple(space)
        m = _dirichlet(rng, [self.alpha, self.alpha])
        weights = _dirichlet(rng, [self.alpha] * self.mixture_width) * m[:, 1].reshape([1, -1])
        chains = []
        for _ in range(self.mixture_width):
            depth = self.chain_depth if self.chain_depth > 0 else rng.randint(1, 3)
            ops = []
            for _ in range(depth):
                op = keys[_randint_below(rng, len(keys))]
                fn, signed = space[op]
                magnitudes = fn(self._PARAMETER_MAX, height, width)
                if magnitudes is None:
                    magnitude = 0.0
                else:
                    magnitude = float(magnitudes[_randint_below(rng, self.severity)])
                    if signed and rng.random() <= 0.5:   # torchvision: torch.rand(()) <= 0.5
                        magnitude *= -1
                ops.append((op, magnitude))
            chains.append(ops)
        return {"m": m, "weights": weights, "chains": chains}

    def transform(self, img, params):
        kind = _kind(img)
        if kind == "pil":
            # torchvision mixes pil_to_tensor(img); the array kernels equal its tensor kernels
            return Image.fromarray(self._mix(np.array(img), params).numpy())
        out = self._mix(img, params)
        return out.numpy() if kind == "ndarray" else out

    def _mix(self, img, params):
        as_tensor = torch.from_numpy if isinstance(img, np.ndarray) else (lambda x: x)
        base = as_tensor(img)
        mix = params["m"][0, 0] * base
        for i, chain in enumerate(params["chains"]):
            aug = img
            for op, magnitude in chain:
                aug = _apply_op(aug, op, magnitude, self.interpolation, self._fill)
            mix.add_(params["weights"][0, i] * as_tensor(aug))
        return mix.to(dtype=base.dtype)

    def _extra_repr(self):
        return (f"severity={self.severity}, mixture_width={self.mixture_width}, "
                f"chain_depth={self.chain_depth}, alpha={self.alpha}, all_ops={self.all_ops}, "
                + super()._extra_repr())
