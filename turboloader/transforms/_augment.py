"""Augmentation transforms with torchvision v2's names, arguments and semantics.

Geometric warps (rotation, affine, perspective), blur and AutoAugment's colour ops run on
HWC uint8 NumPy arrays through turboloader's native kernels (``_native/_warp``,
``_native/_colour``); PIL images and tensors go through torchvision v2's functionals with
the parameters drawn here, like the rest of :mod:`turboloader.transforms`. Random
parameters are drawn in :meth:`make_params` from
:func:`turboloader.transforms._random.current_rng` (or an explicit ``rng``), never in native
code. On uint8 arrays the results equal torchvision's uint8 tensor kernels given the same
parameters: bit for bit for the warps (nearest and bilinear, fills, expand), the point ops and
the colour ops; ``GaussianBlur`` (separable here, a 2-D convolution in torch) differs by 1
level on about 2 values in 100,000. See ``benchmarks/results/transforms.md``.

The AutoAugment family, ``MixUp`` and ``CutMix`` draw in torchvision's order, so under torch's
global RNG (outside a turboloader dataset) ``torch.manual_seed(s)`` selects the same
operations and magnitudes as torchvision's classes.

``MixUp`` and ``CutMix`` work on batches, ``(images, labels)`` as torchvision v2's: use them
after collation, e.g. ``DataLoader(..., collate_fn=CutMix(num_classes=1000).collate)``.
"""

import enum
import math
import numbers
import random
import warnings
from collections.abc import Sequence

import torch

from turboloader.transforms import functional as FN
from turboloader.transforms._random import TorchRandom
from turboloader.transforms._transforms import (
    Transform,
    _array,
    _check_interpolation,
    _kind,
    _rng,
    _setup_size,
    _tvf,
)

__all__ = [
    "AutoAugment",
    "AutoAugmentPolicy",
    "CutMix",
    "GaussianBlur",
    "Grayscale",
    "MixUp",
    "Pad",
    "RandAugment",
    "RandomAdjustSharpness",
    "RandomAffine",
    "RandomAutocontrast",
    "RandomEqualize",
    "RandomErasing",
    "RandomGrayscale",
    "RandomInvert",
    "RandomPerspective",
    "RandomPosterize",
    "RandomRotation",
    "RandomSolarize",
    "RandomVerticalFlip",
    "TrivialAugmentWide",
]


# ---------------------------------------------------------------------------------------------
# Argument helpers (torchvision's _setup_angle, _check_sequence_input, fill handling)
# ---------------------------------------------------------------------------------------------

def _check_p(p):
    if not isinstance(p, numbers.Real) or isinstance(p, bool) or not (0.0 <= p <= 1.0):
        raise ValueError("`p` should be a floating point value in the interval [0.0, 1.0].")
    return float(p)


def _check_sequence_input(x, name, req_sizes):
    msg = req_sizes[0] if len(req_sizes) < 2 else " or ".join([str(s) for s in req_sizes])
    if not isinstance(x, Sequence):
        raise TypeError(f"{name} should be a sequence of length {msg}.")
    if len(x) not in req_sizes:
        raise ValueError(f"{name} should be a sequence of length {msg}.")


def _setup_angle(x, name, req_sizes=(2,)):
    if isinstance(x, numbers.Number) and not isinstance(x, bool):
        if x < 0:
            raise ValueError(f"If {name} is a single number, it must be positive.")
        x = [-x, x]
    else:
        _check_sequence_input(x, name, req_sizes)
    return [float(d) for d in x]


def _setup_fill(fill):
    """torchvision's ``_setup_fill_arg`` reduced to the image entry: None, a float or a list."""
    if isinstance(fill, dict):
        from torchvision import tv_tensors

        for key in (tv_tensors.Image, torch.Tensor, "others"):
            if key in fill:
                fill = fill[key]
                break
        else:
            fill = None
    if fill is None:
        return None
    if isinstance(fill, numbers.Number) and not isinstance(fill, bool):
        return fill
    if isinstance(fill, (tuple, list)):
        return [float(v) for v in fill]
    raise TypeError("Got inappropriate fill arg, only Numbers, tuples, lists and dicts are allowed.")


def _interp(interpolation):
    interpolation = _check_interpolation(interpolation)
    if isinstance(interpolation, str):
        from torchvision.transforms import InterpolationMode

        return InterpolationMode(interpolation.lower())
    return interpolation


def _interp_repr(interpolation):
    return getattr(interpolation, "value", interpolation)


def _hwc(img):
    """A C-contiguous array view; 2-D arrays stay 2-D (the functionals accept both)."""
    return _array(img)


def _uniform(rng, a, b):
    return float(rng.uniform(a, b))


def _randint_below(rng, n):
    """An int in [0, n) (torch.randint(n) under TorchRandom)."""
    return int(rng.randint(0, n - 1))


def _seed_from(rng):
    """A 63-bit seed drawn from ``rng`` for noise that needs a torch generator."""
    if isinstance(rng, torch.Generator):
        return int(torch.randint(0, 2 ** 63 - 1, (), generator=rng))
    return int(rng.randint(0, 2 ** 63 - 2))


class _RandomApply(Transform):
    """Base for ``p``-gated transforms: one ``rng.random() < p`` draw decides, as torchvision's
    ``_RandomApplyTransform`` (which skips when ``torch.rand(1) >= p``)."""

    def __init__(self, p=0.5):
        self.p = _check_p(p)

    def make_params(self, size=None, *, rng=None):
        """``{"apply": bool}``: one ``rng.random()`` draw."""
        return {"apply": _rng(rng).random() < self.p}

    def transform(self, img, params):
        if not params["apply"]:
            return img
        return self._apply(img, params)

    def _apply(self, img, params):
        raise NotImplementedError

    def _extra_repr(self):
        return f"p={self.p}"


# ---------------------------------------------------------------------------------------------
# Flips, padding, grayscale
# ---------------------------------------------------------------------------------------------

class RandomVerticalFlip(_RandomApply):
    """Mirror top-bottom with probability ``p`` (flips when ``rng.random() < p``), like
    ``torchvision.transforms.v2.RandomVerticalFlip``.

    Args:
        p: probability in [0, 1] (default 0.5).

    Raises:
        ValueError: ``p`` outside [0, 1].

    Example:
        >>> RandomVerticalFlip(p=1.0)(img)  # doctest: +SKIP
    """

    def _apply(self, img, params):
        if _kind(img) == "ndarray":
            return FN.vertical_flip(_hwc(img))
        return _tvf().vertical_flip(img)


class Pad(Transform):
    """Pad the borders, like ``torchvision.transforms.v2.Pad``.

    Args:
        padding: int (all sides), ``(left/right, top/bottom)`` or ``(left, top, right, bottom)``.
        fill: constant value or one per channel (``"constant"`` mode).
        padding_mode: ``"constant"``, ``"edge"``, ``"reflect"`` or ``"symmetric"``.

    Raises:
        TypeError / ValueError: as torchvision for bad padding, fill or mode.

    Example:
        >>> Pad(4, fill=0)(img).shape  # doctest: +SKIP
    """

    def __init__(self, padding, fill=0, padding_mode="constant"):
        err = f"Padding must be an int or a 1, 2, or 4 element of tuple or list, got {padding}."
        if isinstance(padding, (tuple, list)):
            if len(padding) not in (1, 2, 4) or not all(isinstance(p, int) for p in padding):
                raise ValueError(err)
        elif not isinstance(padding, int) or isinstance(padding, bool):
            raise ValueError(err)
        if padding_mode not in ("constant", "edge", "reflect", "symmetric"):
            raise ValueError("Padding mode should be either constant, edge, reflect or symmetric")
        self.padding = padding
        self.fill = fill
        self._fill = _setup_fill(fill)
        self.padding_mode = padding_mode

    def transform(self, img, params):
        fill = 0 if self._fill is None else self._fill
        if _kind(img) == "ndarray":
            return FN.pad(_hwc(img), self.padding, fill=fill, padding_mode=self.padding_mode)
        return _tvf().pad(img, self.padding, fill=fill, padding_mode=self.padding_mode)

    def _extra_repr(self):
        return f"padding={self.padding}, fill={self.fill}, padding_mode={self.padding_mode!r}"


def _grayscale(img, num_output_channels):
    if _kind(img) == "ndarray":
        return FN.rgb_to_grayscale(_hwc(img), num_output_channels)
    return _tvf().rgb_to_grayscale(img, num_output_channels=num_output_channels)


def _channels(img):
    kind = _kind(img)
    if kind == "ndarray":
        return 1 if img.ndim == 2 else int(img.shape[2])
    if kind == "tensor":
        return int(img.shape[-3]) if img.ndim >= 3 else 1
    return len(img.getbands())


class Grayscale(Transform):
    """Convert to grayscale with torchvision's luma (``0.2989 R + 0.587 G + 0.114 B``, truncated
    on uint8), like ``torchvision.transforms.v2.Grayscale``.

    Args:
        num_output_channels: 1 or 3 (3 repeats the luma).

    Example:
        >>> Grayscale(3)(img)  # doctest: +SKIP
    """

    def __init__(self, num_output_channels=1):
        if num_output_channels not in (1, 3):
            raise ValueError(f"num_output_channels must be 1 or 3, got {num_output_channels}.")
        self.num_output_channels = num_output_channels

    def transform(self, img, params):
        return _grayscale(img, self.num_output_channels)

    def _extra_repr(self):
        return f"num_output_channels={self.num_output_channels}"


class RandomGrayscale(_RandomApply):
    """Convert to grayscale with probability ``p`` (default 0.1), keeping the channel count,
    like ``torchvision.transforms.v2.RandomGrayscale``.

    Example:
        >>> RandomGrayscale(p=0.2)(img)  # doctest: +SKIP
    """

    def __init__(self, p=0.1):
        super().__init__(p)

    def _apply(self, img, params):
        return _grayscale(img, _channels(img))


# ---------------------------------------------------------------------------------------------
# Geometric warps and blur
# ---------------------------------------------------------------------------------------------

class RandomRotation(Transform):
    """Rotate by an angle drawn uniformly from ``degrees``, like
    ``torchvision.transforms.v2.RandomRotation``.

    On arrays the rotation is a native nogil kernel reproducing torchvision's uint8 tensor
    path (inverse affine matrix, float32 grid, ``grid_sample`` taps, fill blend, rounding).

    Args:
        degrees: a number ``d >= 0`` (range ``(-d, d)``) or a ``(min, max)`` pair.
        interpolation: ``"nearest"`` (default) or ``"bilinear"`` (PIL images also accept
            ``"bicubic"``, through torchvision).
        expand: enlarge the output to hold the whole rotated image.
        center: optional ``(x, y)`` centre of rotation in pixels.
        fill: value outside the rotated image: a number, one per channel, or None.

    Raises:
        ValueError / TypeError: as torchvision for bad degrees, center or fill.

    Example:
        >>> t = RandomRotation(30)
        >>> t.make_params((224, 224))  # doctest: +SKIP
        {'angle': -12.7}
    """

    def __init__(self, degrees, interpolation="nearest", expand=False, center=None, fill=0):
        self.degrees = _setup_angle(degrees, name="degrees", req_sizes=(2,))
        self.interpolation = _check_interpolation(interpolation)
        self.expand = expand
        if center is not None:
            _check_sequence_input(center, "center", req_sizes=(2,))
        self.center = center
        self.fill = fill
        self._fill = _setup_fill(fill)

    def make_params(self, size=None, *, rng=None):
        """``{"angle": float}`` drawn uniformly from ``degrees``."""
        return {"angle": _uniform(_rng(rng), self.degrees[0], self.degrees[1])}

    def transform(self, img, params):
        if _kind(img) == "ndarray":
            return FN.rotate(_hwc(img), params["angle"], self.interpolation, expand=self.expand,
                             center=self.center, fill=self._fill)
        return _tvf().rotate(img, params["angle"], interpolation=_interp(self.interpolation),
                             expand=self.expand, center=self.center, fill=self._fill)

    def _extra_repr(self):
        return (f"degrees={self.degrees}, interpolation={_interp_repr(self.interpolation)!r}, "
                f"expand={self.expand}, center={self.center}, fill={self.fill}")


class RandomAffine(Transform):
    """Random rotation, translation, scale and shear about the centre, like
    ``torchvision.transforms.v2.RandomAffine`` (same draws: angle, then tx, ty rounded to
    ints, scale, shear x, shear y).

    Args:
        degrees: number ``d`` (``(-d, d)``) or ``(min, max)``; 0 for no rotation.
        translate: optional ``(a, b)`` maximum fractions of width and height.
        scale: optional ``(min, max)`` positive scale range.
        shear: optional number ``s`` (x shear in ``(-s, s)``), ``(min, max)`` (x) or 4 values
            (x then y ranges), in degrees.
        interpolation: ``"nearest"`` (default) or ``"bilinear"``.
        fill: value outside the image: a number, one per channel, or None.
        center: optional ``(x, y)`` centre in pixels.

    Raises:
        ValueError / TypeError: as torchvision.

    Example:
        >>> RandomAffine(15, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=5)(img)  # doctest: +SKIP
    """

    _uses_size = True

    def __init__(self, degrees, translate=None, scale=None, shear=None, interpolation="nearest",
                 fill=0, center=None):
        self.degrees = _setup_angle(degrees, name="degrees", req_sizes=(2,))
        if translate is not None:
            _check_sequence_input(translate, "translate", req_sizes=(2,))
            for t in translate:
                if not (0.0 <= t <= 1.0):
                    raise ValueError("translation values should be between 0 and 1")
        self.translate = translate
        if scale is not None:
            _check_sequence_input(scale, "scale", req_sizes=(2,))
            for s in scale:
                if s <= 0:
                    raise ValueError("scale values should be positive")
        self.scale = scale
        self.shear = None if shear is None else _setup_angle(shear, name="shear", req_sizes=(2, 4))
        self.interpolation = _check_interpolation(interpolation)
        self.fill = fill
        self._fill = _setup_fill(fill)
        if center is not None:
            _check_sequence_input(center, "center", req_sizes=(2,))
        self.center = center

    def make_params(self, size, *, rng=None):
        """``{"angle", "translate": (tx, ty) ints, "scale", "shear": (sx, sy)}`` for an image
        of ``size = (height, width)``."""
        rng = _rng(rng)
        height, width = size
        angle = _uniform(rng, self.degrees[0], self.degrees[1])
        if self.translate is not None:
            max_dx = float(self.translate[0] * width)
            max_dy = float(self.translate[1] * height)
            translate = (int(round(_uniform(rng, -max_dx, max_dx))),
                         int(round(_uniform(rng, -max_dy, max_dy))))
        else:
            translate = (0, 0)
        scale = _uniform(rng, self.scale[0], self.scale[1]) if self.scale is not None else 1.0
        shear_x = shear_y = 0.0
        if self.shear is not None:
            shear_x = _uniform(rng, self.shear[0], self.shear[1])
            if len(self.shear) == 4:
                shear_y = _uniform(rng, self.shear[2], self.shear[3])
        return {"angle": angle, "translate": translate, "scale": scale, "shear": (shear_x, shear_y)}

    def transform(self, img, params):
        args = (params["angle"], list(params["translate"]), params["scale"], list(params["shear"]))
        if _kind(img) == "ndarray":
            return FN.affine(_hwc(img), *args, interpolation=self.interpolation,
                             fill=self._fill, center=self.center)
        return _tvf().affine(img, *args, interpolation=_interp(self.interpolation),
                             fill=self._fill, center=self.center)

    def _extra_repr(self):
        return (f"degrees={self.degrees}, translate={self.translate}, scale={self.scale}, "
                f"shear={self.shear}, interpolation={_interp_repr(self.interpolation)!r}, "
                f"fill={self.fill}, center={self.center}")


class RandomPerspective(_RandomApply):
    """Random perspective warp with probability ``p``, like
    ``torchvision.transforms.v2.RandomPerspective`` (same corner draws).

    Args:
        distortion_scale: in [0, 1], how far corners may move (default 0.5).
        p: probability (default 0.5).
        interpolation: ``"bilinear"`` (default) or ``"nearest"``.
        fill: value outside the image: a number, one per channel, or None.

    Raises:
        ValueError: distortion_scale or p outside [0, 1].

    Example:
        >>> RandomPerspective(0.3, p=1.0)(img)  # doctest: +SKIP
    """

    _uses_size = True

    def __init__(self, distortion_scale=0.5, p=0.5, interpolation="bilinear", fill=0):
        super().__init__(p)
        if not (0 <= distortion_scale <= 1):
            raise ValueError("Argument distortion_scale value should be between 0 and 1")
        self.distortion_scale = distortion_scale
        self.interpolation = _check_interpolation(interpolation)
        self.fill = fill
        self._fill = _setup_fill(fill)

    def make_params(self, size, *, rng=None):
        """``{"apply": bool, "coefficients": 8 floats}`` (corners drawn only when applied)."""
        rng = _rng(rng)
        if not rng.random() < self.p:
            return {"apply": False, "coefficients": None}
        height, width = size
        half_height, half_width = height // 2, width // 2
        bound_height = int(self.distortion_scale * half_height) + 1
        bound_width = int(self.distortion_scale * half_width) + 1

        def draw(lo, hi):   # torch.randint(lo, hi): hi excluded
            return int(rng.randint(lo, hi - 1))

        topleft = [draw(0, bound_width), draw(0, bound_height)]
        topright = [draw(width - bound_width, width), draw(0, bound_height)]
        botright = [draw(width - bound_width, width), draw(height - bound_height, height)]
        botleft = [draw(0, bound_width), draw(height - bound_height, height)]
        startpoints = [[0, 0], [width - 1, 0], [width - 1, height - 1], [0, height - 1]]
        endpoints = [topleft, topright, botright, botleft]
        return {"apply": True,
                "coefficients": FN.perspective_coefficients(startpoints, endpoints)}

    def _apply(self, img, params):
        if _kind(img) == "ndarray":
            return FN.perspective(_hwc(img), None, None, self.interpolation, fill=self._fill,
                                  coefficients=params["coefficients"])
        return _tvf().perspective(img, None, None, interpolation=_interp(self.interpolation),
                                  fill=self._fill, coefficients=params["coefficients"])

    def _extra_repr(self):
        return (f"distortion_scale={self.distortion_scale}, p={self.p}, "
                f"interpolation={_interp_repr(self.interpolation)!r}, fill={self.fill}")


class GaussianBlur(Transform):
    """Gaussian blur with ``sigma`` drawn uniformly from a range, like
    ``torchvision.transforms.v2.GaussianBlur`` (reflect padding; uint8 rounding).

    Args:
        kernel_size: odd positive int or ``(kx, ky)``.
        sigma: a positive number (fixed) or a ``(min, max)`` range (default ``(0.1, 2.0)``).

    Raises:
        ValueError: even/non-positive kernel sizes, non-positive or decreasing sigma.

    Example:
        >>> GaussianBlur(9, sigma=(0.1, 2.0))(img)  # doctest: +SKIP
    """

    def __init__(self, kernel_size, sigma=(0.1, 2.0)):
        self.kernel_size = _setup_size(kernel_size, "Kernel size should be a tuple/list of two integers")
        for ks in self.kernel_size:
            if ks <= 0 or ks % 2 == 0:
                raise ValueError("Kernel size value should be an odd and positive number.")
        if isinstance(sigma, numbers.Real) and not isinstance(sigma, bool):
            if sigma <= 0:
                raise ValueError("If sigma is a single number, it must be positive.")
            sigma = (float(sigma), float(sigma))
        elif isinstance(sigma, Sequence) and len(sigma) == 2:
            if not 0.0 < sigma[0] <= sigma[1]:
                raise ValueError("sigma values should be positive and of the form (min, max).")
        else:
            raise TypeError("sigma should be a single int or float or a list/tuple with length 2 floats.")
        self.sigma = [float(s) for s in sigma]

    def make_params(self, size=None, *, rng=None):
        """``{"sigma": [s, s]}`` with ``s`` uniform in the sigma range."""
        s = _uniform(_rng(rng), self.sigma[0], self.sigma[1])
        return {"sigma": [s, s]}

    def transform(self, img, params):
        if _kind(img) == "ndarray":
            return FN.gaussian_blur(_hwc(img), list(self.kernel_size), params["sigma"])
        return _tvf().gaussian_blur(img, list(self.kernel_size), params["sigma"])

    def _extra_repr(self):
        return f"kernel_size={self.kernel_size}, sigma={self.sigma}"


class RandomErasing(Transform):
    """Erase a random rectangle with probability ``p``, like
    ``torchvision.transforms.v2.RandomErasing`` (same 10-attempt area/ratio search).

    ``value="random"`` fills with standard-normal noise from a torch generator seeded from the
    current rng (torchvision draws it from torch's global RNG); like torchvision, it is
    converted to the image dtype, so it is meant for float tensors.

    Args:
        p: probability (default 0.5).
        scale: ``(min, max)`` fraction of the area, within [0, 1].
        ratio: ``(min, max)`` aspect ratio of the rectangle.
        value: a number, one per channel, or ``"random"``.
        inplace: modify the input (tensors and writeable arrays).

    Raises:
        TypeError / ValueError: as torchvision.

    Example:
        >>> RandomErasing(p=1.0, value=0)(tensor_image)  # doctest: +SKIP
    """

    _uses_size = True

    def __init__(self, p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0.0, inplace=False):
        self.p = _check_p(p)
        if not isinstance(value, (numbers.Number, str, tuple, list)):
            raise TypeError("Argument value should be either a number or str or a sequence")
        if isinstance(value, str) and value != "random":
            raise ValueError("If value is str, it should be 'random'")
        if not isinstance(scale, Sequence):
            raise TypeError("Scale should be a sequence")
        if not isinstance(ratio, Sequence):
            raise TypeError("Ratio should be a sequence")
        if (scale[0] > scale[1]) or (ratio[0] > ratio[1]):
            warnings.warn("Scale and ratio should be of kind (min, max)", stacklevel=2)
        if scale[0] < 0 or scale[1] > 1:
            raise ValueError("Scale should be between 0 and 1")
        self.scale = scale
        self.ratio = ratio
        if isinstance(value, (int, float)):
            self.value = [float(value)]
        elif isinstance(value, str):
            self.value = None
        else:
            self.value = [float(v) for v in value]
        self.inplace = inplace
        # torchvision's float32 log of the ratio range
        self._log_ratio = [float(v) for v in torch.log(torch.tensor(self.ratio))]

    def make_params(self, size, *, rng=None):
        """``{"apply", "i", "j", "h", "w", "noise_seed"}``; ``apply`` is False when the coin
        says so or no rectangle fits in 10 attempts."""
        rng = _rng(rng)
        none = {"apply": False, "i": 0, "j": 0, "h": 0, "w": 0, "noise_seed": None}
        if not rng.random() < self.p:
            return none
        img_h, img_w = size
        area = img_h * img_w
        for _ in range(10):
            erase_area = area * _uniform(rng, self.scale[0], self.scale[1])
            aspect_ratio = math.exp(_uniform(rng, self._log_ratio[0], self._log_ratio[1]))
            h = int(round(math.sqrt(erase_area * aspect_ratio)))
            w = int(round(math.sqrt(erase_area / aspect_ratio)))
            if not (h < img_h and w < img_w):
                continue
            seed = _seed_from(rng) if self.value is None else None
            i = int(rng.randint(0, img_h - h))
            j = int(rng.randint(0, img_w - w))
            return {"apply": True, "i": i, "j": j, "h": h, "w": w, "noise_seed": seed}
        return none

    def _value(self, params, channels):
        if self.value is None:
            g = torch.Generator().manual_seed(params["noise_seed"])
            return torch.empty([channels, params["h"], params["w"]], dtype=torch.float32).normal_(
                generator=g)
        if len(self.value) not in (1, channels):
            raise ValueError("If value is a sequence, it should have either a single value or "
                             f"{channels} (number of inpt channels)")
        return torch.tensor(self.value)[:, None, None]

    def transform(self, img, params):
        if not params["apply"]:
            return img
        kind = _kind(img)
        args = params["i"], params["j"], params["h"], params["w"]
        v = self._value(params, _channels(img))
        if kind == "ndarray":
            # torch's assignment converts the float value to uint8; do the same conversion
            if self.value is None:
                block = v.to(torch.uint8).permute(1, 2, 0).numpy()
            else:
                block = v[:, 0, 0].to(torch.uint8).numpy()
            if img.ndim == 2:
                block = block[..., 0]
            inplace = self.inplace and img.flags.writeable
            return FN.erase(img if inplace else _hwc(img), *args, block, inplace=inplace)
        if kind == "pil":
            raise TypeError("RandomErasing does not support PIL images (as torchvision)")
        return _tvf().erase(img, *args, v, inplace=self.inplace)

    def _extra_repr(self):
        value = "random" if self.value is None else self.value
        return (f"p={self.p}, scale={tuple(self.scale)}, ratio={tuple(self.ratio)}, "
                f"value={value}, inplace={self.inplace}")


# ---------------------------------------------------------------------------------------------
# Point operations
# ---------------------------------------------------------------------------------------------

class RandomPosterize(_RandomApply):
    """Keep the top ``bits`` bits of each value with probability ``p``, like
    ``torchvision.transforms.v2.RandomPosterize`` (uint8 images).

    Example:
        >>> RandomPosterize(bits=4, p=1.0)(img)  # doctest: +SKIP
    """

    def __init__(self, bits, p=0.5):
        super().__init__(p)
        self.bits = bits

    def _apply(self, img, params):
        if _kind(img) == "ndarray":
            return FN.posterize(_hwc(img), self.bits)
        return _tvf().posterize(img, bits=self.bits)

    def _extra_repr(self):
        return f"bits={self.bits}, p={self.p}"


class RandomSolarize(_RandomApply):
    """Invert values ``>= threshold`` with probability ``p``, like
    ``torchvision.transforms.v2.RandomSolarize``.

    Example:
        >>> RandomSolarize(threshold=192.0, p=1.0)(img)  # doctest: +SKIP
    """

    def __init__(self, threshold, p=0.5):
        super().__init__(p)
        self.threshold = threshold

    def _apply(self, img, params):
        if _kind(img) == "ndarray":
            return FN.solarize(_hwc(img), self.threshold)
        return _tvf().solarize(img, threshold=self.threshold)

    def _extra_repr(self):
        return f"threshold={self.threshold}, p={self.p}"


class RandomInvert(_RandomApply):
    """Invert the colours with probability ``p``, like ``torchvision.transforms.v2.RandomInvert``.

    Example:
        >>> RandomInvert(p=1.0)(img)  # doctest: +SKIP
    """

    def _apply(self, img, params):
        if _kind(img) == "ndarray":
            return FN.invert(_hwc(img))
        return _tvf().invert(img)


class RandomEqualize(_RandomApply):
    """Equalize the histogram with probability ``p``, like
    ``torchvision.transforms.v2.RandomEqualize``.

    Example:
        >>> RandomEqualize(p=1.0)(img)  # doctest: +SKIP
    """

    def _apply(self, img, params):
        if _kind(img) == "ndarray":
            return FN.equalize(_hwc(img))
        return _tvf().equalize(img)


class RandomAutocontrast(_RandomApply):
    """Stretch each channel to the full range with probability ``p``, like
    ``torchvision.transforms.v2.RandomAutocontrast``.

    Example:
        >>> RandomAutocontrast(p=1.0)(img)  # doctest: +SKIP
    """

    def _apply(self, img, params):
        if _kind(img) == "ndarray":
            return FN.autocontrast(_hwc(img))
        return _tvf().autocontrast(img)


class RandomAdjustSharpness(_RandomApply):
    """Adjust sharpness by ``sharpness_factor`` with probability ``p``, like
    ``torchvision.transforms.v2.RandomAdjustSharpness``.

    Example:
        >>> RandomAdjustSharpness(2.0, p=1.0)(img)  # doctest: +SKIP
    """

    def __init__(self, sharpness_factor, p=0.5):
        super().__init__(p)
        if sharpness_factor < 0:
            raise ValueError("sharpness_factor should be non-negative")
        self.sharpness_factor = float(sharpness_factor)

    def _apply(self, img, params):
        if _kind(img) == "ndarray":
            return FN.adjust_sharpness(_hwc(img), self.sharpness_factor)
        return _tvf().adjust_sharpness(img, sharpness_factor=self.sharpness_factor)

    def _extra_repr(self):
        return f"sharpness_factor={self.sharpness_factor}, p={self.p}"


# ---------------------------------------------------------------------------------------------
# AutoAugment family
# ---------------------------------------------------------------------------------------------

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
    # functional arguments (_AutoAugmentBase._apply_image_or_video_transform); arrays use
    # turboloader's kernels, tensors and PIL images torchvision's.
    nd = _kind(img) == "ndarray"
    F = FN if nd else _tvf()
    if nd:
        img = _hwc(img)
    else:
        interpolation = _interp(interpolation)
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
        bound = 255.0 if (nd or _kind(img) == "pil" or img.dtype == torch.uint8) else 1.0
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

    def __init__(self, policy=AutoAugmentPolicy.IMAGENET, interpolation="nearest", fill=None):
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

    def __init__(self, num_ops=2, magnitude=9, num_magnitude_bins=31, interpolation="nearest",
                 fill=None):
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

    def __init__(self, num_magnitude_bins=31, interpolation="nearest", fill=None):
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


# ---------------------------------------------------------------------------------------------
# Batch-level MixUp / CutMix
# ---------------------------------------------------------------------------------------------

_BETAS = {}


def _beta(rng, alpha):
    """One Beta(alpha, alpha) draw: torchvision's own distribution under torch's RNG."""
    if isinstance(rng, TorchRandom):
        dist = _BETAS.get(alpha)
        if dist is None:
            dist = _BETAS[alpha] = torch.distributions.Beta(torch.tensor([alpha]),
                                                            torch.tensor([alpha]))
        return float(dist.sample(()))
    if isinstance(rng, torch.Generator):
        rng = random.Random(_seed_from(rng))
    return float(rng.betavariate(alpha, alpha))


def _as_rng(rng):
    if isinstance(rng, torch.Generator):
        return random.Random(_seed_from(rng))
    return _rng(rng)


class _BaseMixUpCutMix:
    def __init__(self, *, alpha=1.0, num_classes=None, labels_getter="default"):
        self.alpha = float(alpha)
        if not self.alpha > 0:
            raise ValueError(f"alpha must be positive, got {alpha}")
        self.num_classes = num_classes
        if labels_getter != "default" and not callable(labels_getter):
            raise ValueError("labels_getter should either be 'default' or a callable")
        self.labels_getter = labels_getter

    def _split(self, inputs):
        sample = inputs if len(inputs) > 1 else inputs[0]
        if self.labels_getter != "default":
            labels = self.labels_getter(sample)
            images = sample[0] if isinstance(sample, (tuple, list)) else None
        elif isinstance(sample, dict):
            key = next((k for k in sample if isinstance(k, str) and k.lower() in ("labels", "label")), None)
            if key is None:
                raise ValueError("Could not infer where the labels are in the sample")
            labels = sample[key]
            images = next(v for k, v in sample.items() if k != key and isinstance(v, torch.Tensor))
        elif isinstance(sample, (tuple, list)) and len(sample) >= 2:
            images, labels = sample[0], sample[1]
        else:
            raise ValueError("expected (images, labels)")
        return sample, images, labels

    def _check(self, images, labels):
        if not isinstance(labels, torch.Tensor):
            raise ValueError(f"The labels must be a tensor, but got {type(labels)} instead.")
        if labels.ndim not in (1, 2):
            raise ValueError("labels should be index based with shape (batch_size,) or probability "
                             f"based with shape (batch_size, num_classes), but got a tensor of "
                             f"shape {labels.shape} instead.")
        if labels.ndim == 2 and self.num_classes is not None and labels.shape[-1] != self.num_classes:
            raise ValueError("When passing 2D labels, the number of elements in last dimension must "
                             f"match num_classes: {labels.shape[-1]} != {self.num_classes}. You can "
                             "Leave num_classes to None.")
        if labels.ndim == 1 and self.num_classes is None:
            raise ValueError("num_classes must be passed if the labels are index-based (1D)")
        if not isinstance(images, torch.Tensor):
            raise ValueError(f"{type(self).__name__}() expects a batch tensor of images, got "
                             f"{type(images).__name__}")
        if images.ndim != 4:
            raise ValueError(f"Expected a batched input with 4 dims, but got {images.ndim} "
                             "dimensions instead.")
        if images.shape[0] != labels.shape[0]:
            raise ValueError("The batch size of the image or video does not match the batch size "
                             f"of the labels: {images.shape[0]} != {labels.shape[0]}.")

    def _mix_labels(self, labels, lam):
        if labels.ndim == 1:
            labels = torch.nn.functional.one_hot(labels, num_classes=self.num_classes)
        if not labels.dtype.is_floating_point:
            labels = labels.float()
        return labels.roll(1, 0).mul_(1.0 - lam).add_(labels.mul(lam))

    def __call__(self, *inputs):
        sample, images, labels = self._split(inputs)
        self._check(images, labels)
        params = self.make_params(tuple(images.shape[-2:]))
        out_images, out_labels = self.transform_batch(images, labels, params)
        if isinstance(sample, dict):
            out = dict(sample)
            for k, v in sample.items():
                if v is labels:
                    out[k] = out_labels
                elif v is images:
                    out[k] = out_images
            return out
        rest = tuple(sample[2:]) if isinstance(sample, (tuple, list)) else ()
        return (out_images, out_labels) + rest

    def collate(self, batch):
        """``collate_fn`` for a DataLoader: ``default_collate`` then this transform.

        Example:
            >>> loader = DataLoader(ds, batch_size=64, collate_fn=MixUp(num_classes=10).collate)  # doctest: +SKIP
        """
        from torch.utils.data import default_collate

        return self(*default_collate(batch))

    def __repr__(self):
        return f"{type(self).__name__}(alpha={self.alpha}, num_classes={self.num_classes})"


class MixUp(_BaseMixUpCutMix):
    """MixUp on a batch, like ``torchvision.transforms.v2.MixUp``: each image is blended with
    its neighbour in the batch (``roll(1, 0)``) by ``lam ~ Beta(alpha, alpha)``; index labels
    become one-hot and are mixed the same way.

    Called as ``images, labels = MixUp(num_classes=N)(images, labels)`` on a (B, C, H, W)
    tensor and (B,) or (B, N) labels. Under torch's RNG the draw is torchvision's own; inside
    a turboloader dataset (or with ``make_params(rng=...)``, a ``random.Random`` or a
    ``torch.Generator``) it comes from that generator.

    Args:
        alpha: Beta distribution parameter (> 0). num_classes: for one-hot labels.
        labels_getter: ``"default"`` (second element / ``"labels"`` key) or a callable.

    Raises:
        ValueError: as torchvision for bad shapes or missing num_classes.

    Example:
        >>> images, labels = MixUp(alpha=0.2, num_classes=10)(images, labels)  # doctest: +SKIP
    """

    def make_params(self, size=None, *, rng=None):
        """``{"lam": float}``."""
        return {"lam": _beta(_rng(rng) if not isinstance(rng, torch.Generator) else rng, self.alpha)}

    def transform_batch(self, images, labels, params):
        """Apply drawn ``params`` to a batch; returns ``(images, labels)``."""
        lam = params["lam"]
        out = images.roll(1, 0).mul_(1.0 - lam).add_(images.mul(lam))
        return out, self._mix_labels(labels, lam)


class CutMix(_BaseMixUpCutMix):
    """CutMix on a batch, like ``torchvision.transforms.v2.CutMix``: a box of area fraction
    ``1 - lam`` (``lam ~ Beta(alpha, alpha)``) is pasted from the neighbouring image
    (``roll(1, 0)``); labels are mixed by the box's actual area.

    Args and call convention as :class:`MixUp`.

    Example:
        >>> images, labels = CutMix(num_classes=1000)(images, labels)  # doctest: +SKIP
    """

    def make_params(self, size, *, rng=None):
        """``{"box": (x1, y1, x2, y2), "lam_adjusted": float}`` for images of ``size = (H, W)``."""
        rng = _rng(rng) if not isinstance(rng, torch.Generator) else rng
        H, W = size
        lam = _beta(rng, self.alpha)
        rng = _as_rng(rng)
        r_x = _randint_below(rng, W)
        r_y = _randint_below(rng, H)
        r = 0.5 * math.sqrt(1.0 - lam)
        r_w_half = int(r * W)
        r_h_half = int(r * H)
        x1 = max(r_x - r_w_half, 0)
        y1 = max(r_y - r_h_half, 0)
        x2 = min(r_x + r_w_half, W)
        y2 = min(r_y + r_h_half, H)
        lam_adjusted = float(1.0 - (x2 - x1) * (y2 - y1) / (W * H))
        return {"box": (x1, y1, x2, y2), "lam_adjusted": lam_adjusted}

    def transform_batch(self, images, labels, params):
        """Apply drawn ``params`` to a batch; returns ``(images, labels)``."""
        x1, y1, x2, y2 = params["box"]
        rolled = images.roll(1, 0)
        out = images.clone()
        out[..., y1:y2, x1:x2] = rolled[..., y1:y2, x1:x2]
        return out, self._mix_labels(labels, params["lam_adjusted"])
