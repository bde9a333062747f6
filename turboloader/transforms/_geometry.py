"""torchvision-shaped transform classes: same names, arguments, defaults and semantics.

Each class works standalone on a PIL image, a torch tensor (CHW, uint8 or float) or a NumPy
HWC uint8 array, and returns the same kind it got: PIL images and tensors go through
torchvision v2's functionals with the parameters drawn here, arrays through
:mod:`turboloader.transforms.functional` (native kernels, within one grey level of
torchvision). Random parameters come from
:func:`turboloader.transforms._random.current_rng` (a per-sample ``random.Random`` inside a
turboloader dataset, torch's global RNG otherwise), never from NumPy's global state.

Unlike torchvision v2, ``make_params`` takes the image size ``(height, width)`` rather than
the flattened inputs, so parameters can be drawn from a JPEG header before anything is
decoded (see :func:`turboloader.transforms.plan`); it also accepts an explicit ``rng``.
"""

import math
import numbers
import warnings
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image

from turboloader.transforms import functional as FN
from turboloader.transforms._random import current_rng

__all__ = [
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "Normalize",
    "PILToTensor",
    "RandomCrop",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
    "ToDtype",
    "ToImage",
    "ToTensor",
    "Transform",
]


def _tvf():
    from torchvision.transforms.v2 import functional  # lazy: costs ~0.3 s to import

    return functional


def _kind(img):
    if isinstance(img, np.ndarray):
        return "ndarray"
    if isinstance(img, torch.Tensor):
        return "tensor"
    if isinstance(img, Image.Image):
        return "pil"
    raise TypeError("expected a PIL Image, a torch.Tensor or a numpy.ndarray, got "
                    f"{type(img).__name__}")


def image_size(img):
    """``(height, width)`` of a PIL image, a ``(..., H, W)`` tensor or an ``(H, W[, C])`` array."""
    kind = _kind(img)
    if kind == "pil":
        return img.height, img.width
    if kind == "tensor":
        if img.ndim < 2:
            raise ValueError(f"a tensor image needs at least 2 dimensions, got {img.ndim}")
        return int(img.shape[-2]), int(img.shape[-1])
    if img.ndim not in (2, 3):
        raise ValueError(f"an array image must be (H, W) or (H, W, C), got shape {img.shape}")
    return int(img.shape[0]), int(img.shape[1])


def _rng(rng):
    return current_rng() if rng is None else rng


def _setup_size(size, error_msg="Please provide only two dimensions (h, w) for size."):
    # torchvision's _setup_size, plus a check that the sizes are positive integers
    if isinstance(size, numbers.Number) and not isinstance(size, bool):
        size = (int(size), int(size))
    elif isinstance(size, Sequence) and len(size) == 1:
        size = (size[0], size[0])
    elif not isinstance(size, Sequence):
        raise TypeError(f"size should be an int or a sequence of ints, got {type(size).__name__}")
    if len(size) != 2:
        raise ValueError(error_msg)
    if not all(isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in size):
        raise TypeError(f"size should contain ints, got {size!r}")
    if size[0] <= 0 or size[1] <= 0:
        raise ValueError(f"size must be positive, got {tuple(size)}")
    return int(size[0]), int(size[1])


def _array(img):
    return img if img.flags.c_contiguous else np.ascontiguousarray(img)


def _fused_filter(interpolation, antialias):
    """The native filter code for the fused path, or None when it would not match torchvision
    on tensors (``"nearest"`` is torchvision's legacy floor rule; ``antialias=False``)."""
    if antialias is not True:
        return None
    name = getattr(interpolation, "value", interpolation)
    if name in ("bilinear", "bicubic", "nearest-exact"):
        return int(FN._interpolation(name))
    return None


def _check_interpolation(interpolation):
    if isinstance(interpolation, (str, FN.Interpolation)):
        FN._interpolation(interpolation)  # raises ValueError for unknown names
    elif isinstance(interpolation, int):
        pass  # PIL constant; torchvision converts it
    elif not type(interpolation).__module__.startswith("torchvision"):
        raise TypeError("interpolation must be a str or torchvision InterpolationMode, got "
                        f"{type(interpolation).__name__}")
    return interpolation


class Transform:
    """Base class: ``__call__(img)`` = ``transform(img, make_params(image_size(img)))``.

    Subclasses override :meth:`make_params` (draw from ``rng``, default
    :func:`~turboloader.transforms._random.current_rng`) and :meth:`transform` (apply the
    drawn parameters; no randomness there).
    """

    _uses_size = False

    def make_params(self, size, *, rng=None):
        """Draw this call's parameters for an image of ``size = (height, width)``; a dict."""
        return {}

    def transform(self, img, params):
        """Apply the transform with ``params`` (from :meth:`make_params`) to ``img``."""
        raise NotImplementedError

    def __call__(self, img):
        size = image_size(img) if self._uses_size else None
        return self.transform(img, self.make_params(size))

    def _extra_repr(self):
        return ""

    def __repr__(self):
        return f"{type(self).__name__}({self._extra_repr()})"


class Compose:
    """Apply transforms one after the other, like ``torchvision.transforms.v2.Compose``.

    Any callable is accepted (a torchvision transform, a lambda) and is called with what the
    previous one returned. When every member is one of turboloader's transforms and the
    pipeline ends in a tensor conversion, :func:`turboloader.transforms.plan` turns it into
    one fused native call; the dataset does this automatically.

    Args:
        transforms: a sequence of callables.

    Raises:
        TypeError: ``transforms`` is not a sequence. ValueError: it is empty.

    Example:
        >>> t = Compose([RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(),
        ...              Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
        >>> x = t(pil_image)  # doctest: +SKIP
    """

    def __init__(self, transforms):
        if not isinstance(transforms, Sequence):
            raise TypeError("Argument transforms should be a sequence of callables")
        if not transforms:
            raise ValueError("Pass at least one transform")
        for t in transforms:
            if not callable(t):
                raise TypeError(f"every transform must be callable, got {type(t).__name__}")
        self.transforms = list(transforms)

    def __call__(self, *inputs):
        needs_unpacking = len(inputs) > 1
        outputs = inputs[0] if not needs_unpacking else inputs
        for t in self.transforms:
            outputs = t(*inputs)
            inputs = outputs if needs_unpacking else (outputs,)
        return outputs

    def __repr__(self):
        body = "".join(f"\n    {t!r}," for t in self.transforms)
        return f"Compose({body}\n)"


class Resize(Transform):
    """Resize to ``size``, like ``torchvision.transforms.v2.Resize``.

    Args:
        size: ``(h, w)``; an int or ``[int]`` for the shorter edge (the longer one is
            ``int(size * long / short)``); ``None`` to use ``max_size`` for the longer edge.
        interpolation: ``"bilinear"`` (default), ``"bicubic"``, ``"nearest"``,
            ``"nearest-exact"`` or an ``InterpolationMode``. NumPy arrays support
            bilinear, bicubic and Pillow's nearest (= ``"nearest-exact"``).
        max_size: cap on the longer edge when ``size`` is an int (or None).
        antialias: as torchvision (tensors); arrays are always antialiased, as Pillow.

    Raises:
        ValueError: bad ``size``/``max_size`` combinations (as torchvision).

    Example:
        >>> Resize(256)(img).shape  # doctest: +SKIP
    """

    _uses_size = True

    def __init__(self, size, interpolation="bilinear", max_size=None, antialias=True):
        if isinstance(size, int) and not isinstance(size, bool):
            size = [size]
        elif isinstance(size, Sequence) and len(size) in {1, 2}:
            size = list(size)
        elif size is None:
            if not isinstance(max_size, int):
                raise ValueError(f"max_size must be an integer when size is None, but got "
                                 f"{max_size} instead.")
        else:
            raise ValueError("size can be an integer, a sequence of one or two integers, or "
                             f"None, but got {size} instead.")
        if size is not None:
            if not all(isinstance(s, int) and not isinstance(s, bool) for s in size):
                raise TypeError(f"size must contain ints, got {size!r}")
            if any(s <= 0 for s in size):
                raise ValueError(f"size must be positive, got {size!r}")
            if max_size is not None:
                if len(size) != 1:
                    raise ValueError("max_size should only be passed if size is None or "
                                     "specifies the length of the smaller edge, i.e. size "
                                     "should be an int or a sequence of length 1 in "
                                     "torchscript mode.")
                if max_size <= size[0]:
                    raise ValueError(f"max_size = {max_size} must be strictly greater than "
                                     f"the requested size for the smaller edge size = {size}")
        self.size = size
        self.interpolation = _check_interpolation(interpolation)
        self.max_size = max_size
        self.antialias = antialias

    def output_size(self, size):
        """The resized ``(height, width)`` of an image of ``size``, torchvision's rounding."""
        h, w = size
        short, long = (w, h) if w <= h else (h, w)
        if self.size is None:
            new_short, new_long = int(self.max_size * short / long), self.max_size
            new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
        elif len(self.size) == 1:
            new_short, new_long = self.size[0], int(self.size[0] * long / short)
            if self.max_size is not None and new_long > self.max_size:
                new_short, new_long = int(self.max_size * new_short / new_long), self.max_size
            new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
        else:
            new_h, new_w = self.size
        return new_h, new_w

    def make_params(self, size, *, rng=None):
        """No randomness: ``{"size": (height, width)}``, the output size."""
        return {"size": self.output_size(size)}

    def transform(self, img, params):
        if _kind(img) != "ndarray":
            return _tvf().resize(img, self.size, interpolation=self.interpolation,
                                 max_size=self.max_size, antialias=self.antialias)
        out_h, out_w = params["size"]
        if (out_h, out_w) == img.shape[:2]:
            return img
        return FN.resize(_array(img), (out_h, out_w), _np_interp(self.interpolation))

    def _extra_repr(self):
        return (f"size={self.size}, interpolation={self.interpolation!r}, "
                f"max_size={self.max_size}, antialias={self.antialias}")


def _np_interp(interpolation):
    if isinstance(interpolation, int) and not isinstance(interpolation, FN.Interpolation):
        return {0: "nearest", 2: "bilinear", 3: "bicubic"}.get(interpolation, interpolation)
    return interpolation


def _pad_array(img, padding, fill=0, mode="constant"):
    """Pad an (H, W[, C]) array by ``padding = [left, top, right, bottom]``."""
    left, top, right, bottom = padding
    widths = [(top, bottom), (left, right)] + [(0, 0)] * (img.ndim - 2)
    if mode != "constant":
        return np.ascontiguousarray(np.pad(img, widths, mode=mode))
    out = np.empty((img.shape[0] + top + bottom, img.shape[1] + left + right) + img.shape[2:],
                   img.dtype)
    out[...] = np.asarray(fill if fill is not None else 0, dtype=np.float64).astype(img.dtype)
    out[top:top + img.shape[0], left:left + img.shape[1]] = img
    return out


class CenterCrop(Transform):
    """Crop the centre, like ``torchvision.transforms.v2.CenterCrop``.

    The offsets are ``int(round((H - h) / 2.0))`` (torchvision's rounding). When the crop
    is larger than the image, the image is first zero-padded as torchvision does; the fused
    path then falls back to decoding the whole image and running these classes one by one.

    Args:
        size: ``(h, w)``, or an int (or ``[int]``) for a square.

    Example:
        >>> CenterCrop(224)(img)  # doctest: +SKIP
    """

    _uses_size = True

    def __init__(self, size):
        self.size = _setup_size(size)

    def make_params(self, size, *, rng=None):
        """No randomness: the crop ``top, left, height, width`` and the zero ``padding``
        ``[left, top, right, bottom]`` needed first (all zeros unless the crop is larger)."""
        ch, cw = self.size
        h, w = size
        padding = [
            (cw - w) // 2 if cw > w else 0,
            (ch - h) // 2 if ch > h else 0,
            (cw - w + 1) // 2 if cw > w else 0,
            (ch - h + 1) // 2 if ch > h else 0,
        ]
        ph, pw = h + padding[1] + padding[3], w + padding[0] + padding[2]
        return {"top": int(round((ph - ch) / 2.0)), "left": int(round((pw - cw) / 2.0)),
                "height": ch, "width": cw, "padding": padding}

    def transform(self, img, params):
        if _kind(img) != "ndarray":
            return _tvf().center_crop(img, list(self.size))
        if any(params["padding"]):
            img = _pad_array(img, params["padding"])
        if img.shape[:2] == self.size:
            return img
        return FN.crop(_array(img), params["top"], params["left"], *self.size)

    def _extra_repr(self):
        return f"size={self.size}"


_PADDING_MODES = ("constant", "edge", "reflect", "symmetric")


class RandomCrop(Transform):
    """Crop at a random place, like ``torchvision.transforms.v2.RandomCrop``.

    Args:
        size: ``(h, w)`` or an int for a square.
        padding: int, or 1, 2 or 4 ints (left/right/top/bottom as torchvision), applied
            before cropping.
        pad_if_needed: pad an image smaller than ``size`` (on both sides).
        fill: constant padding value: a number, or one per channel.
        padding_mode: ``"constant"``, ``"edge"``, ``"reflect"`` or ``"symmetric"``.

    The fused path handles ``padding=None, pad_if_needed=False`` only.

    Raises:
        ValueError: bad padding / padding_mode; at call time, an image smaller than
            ``size`` (after padding). TypeError: bad ``fill``.

    Example:
        >>> RandomCrop(32, padding=4)(img)  # doctest: +SKIP
    """

    _uses_size = True

    def __init__(self, size, padding=None, pad_if_needed=False, fill=0,
                 padding_mode="constant"):
        self.size = _setup_size(size)
        if pad_if_needed or padding is not None:
            if padding is not None:
                msg = f"Padding must be an int or a 1, 2, or 4 element of tuple or list, got {padding}."
                if isinstance(padding, (tuple, list)):
                    if len(padding) not in (1, 2, 4) or not all(isinstance(p, int) for p in padding):
                        raise ValueError(msg)
                elif not isinstance(padding, int):
                    raise ValueError(msg)
            if padding_mode not in _PADDING_MODES:
                raise ValueError("Padding mode should be either constant, edge, reflect or symmetric")
        if fill is not None and not isinstance(fill, (numbers.Number, tuple, list)):
            raise TypeError("Got inappropriate fill arg, only Numbers, tuples and lists are "
                            "supported.")
        if padding:
            if isinstance(padding, int):
                padding = [padding] * 4
            elif len(padding) == 1:
                padding = [padding[0]] * 4
            elif len(padding) == 2:
                padding = [padding[0], padding[0], padding[1], padding[1]]
            else:
                padding = [padding[0], padding[2], padding[1], padding[3]]
            self.padding = padding  # [left, right, top, bottom], as torchvision stores it
        else:
            self.padding = None
        self.pad_if_needed = pad_if_needed
        self.fill = fill
        self.padding_mode = padding_mode

    def make_params(self, size, *, rng=None):
        """torchvision's draw: ``top``/``left`` uniform over the (padded) image via
        ``rng.randint``; also ``height``, ``width``, ``needs_crop``, ``needs_pad`` and
        ``padding = [left, top, right, bottom]``. Raises ValueError if the crop does not fit."""
        padded_h, padded_w = size
        if self.padding is not None:
            pad_left, pad_right, pad_top, pad_bottom = self.padding
            padded_h += pad_top + pad_bottom
            padded_w += pad_left + pad_right
        else:
            pad_left = pad_right = pad_top = pad_bottom = 0
        ch, cw = self.size
        if self.pad_if_needed:
            if padded_h < ch:
                diff = ch - padded_h
                pad_top += diff
                pad_bottom += diff
                padded_h += 2 * diff
            if padded_w < cw:
                diff = cw - padded_w
                pad_left += diff
                pad_right += diff
                padded_w += 2 * diff
        if padded_h < ch or padded_w < cw:
            raise ValueError(
                f"Required crop size {(ch, cw)} is larger than "
                f"{'padded ' if self.padding is not None else ''}input image size "
                f"{(padded_h, padded_w)}.")
        padding = [pad_left, pad_top, pad_right, pad_bottom]
        rng = _rng(rng)
        top = rng.randint(0, padded_h - ch) if padded_h > ch else 0
        left = rng.randint(0, padded_w - cw) if padded_w > cw else 0
        return {"needs_crop": padded_h > ch or padded_w > cw, "top": top, "left": left,
                "height": ch, "width": cw, "needs_pad": any(padding), "padding": padding}

    def transform(self, img, params):
        kind = _kind(img)
        if params["needs_pad"]:
            if kind == "ndarray":
                img = _pad_array(img, params["padding"], self.fill, self.padding_mode)
            else:
                fill = self.fill
                if isinstance(fill, (tuple, list)) and kind == "tensor":
                    fill = [float(v) for v in fill]
                img = _tvf().pad(img, params["padding"], fill=fill, padding_mode=self.padding_mode)
        if params["needs_crop"]:
            args = params["top"], params["left"], params["height"], params["width"]
            img = FN.crop(_array(img), *args) if kind == "ndarray" else _tvf().crop(img, *args)
        return img

    def _extra_repr(self):
        return (f"size={self.size}, padding={self.padding}, pad_if_needed={self.pad_if_needed}, "
                f"fill={self.fill}, padding_mode={self.padding_mode!r}")


class RandomResizedCrop(Transform):
    """Crop a random area and aspect ratio, then resize it, like
    ``torchvision.transforms.v2.RandomResizedCrop`` (same ``get_params`` algorithm: 10
    attempts, then the centre-crop fallback).

    In a fused pipeline the window is drawn from the JPEG header's size, only the window is
    decoded, at the largest DCT reduction that leaves it at least ``size`` (unless
    ``plan(..., dct_scaling=False)``), and the filter is clipped at the window edges as
    torchvision's ``resized_crop`` does. At full scale the result is within 1 uint8 level
    of torchvision on the Pillow-decoded image; DCT scaling differs like a slightly different
    antialiasing filter (measured on 1600-4000 px photographs at 224 x 224: mean |diff|
    0.6 uint8 levels, 99th percentile 4, worst pixel 23 on hard edges; see
    ``turboloader.transforms._plan``).

    Args:
        size: output ``(h, w)`` or an int for a square.
        scale: ``(min, max)`` fraction of the image area.
        ratio: ``(min, max)`` aspect ratio (width / height), positive.
        interpolation: as :class:`Resize`.
        antialias: as :class:`Resize`.

    Raises:
        TypeError: ``scale``/``ratio`` not pairs. ValueError: non-positive ratio or size,
        negative scale. Warns (like torchvision) when a pair is not ``(min, max)``.

    Example:
        >>> t = RandomResizedCrop(224)
        >>> t.make_params((480, 640))  # doctest: +SKIP
        {'top': 31, 'left': 102, 'height': 402, 'width': 371}
    """

    _uses_size = True

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                 interpolation="bilinear", antialias=True):
        self.size = _setup_size(size)
        if not isinstance(scale, Sequence) or len(scale) != 2:
            raise TypeError("Scale should be a sequence of two floats.")
        if not isinstance(ratio, Sequence) or len(ratio) != 2:
            raise TypeError("Ratio should be a sequence of two floats.")
        if any(not isinstance(v, numbers.Real) for v in (*scale, *ratio)):
            raise TypeError(f"scale and ratio must hold numbers, got {scale!r}, {ratio!r}")
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            warnings.warn("Scale and ratio should be of kind (min, max)", stacklevel=2)
        if min(ratio) <= 0:
            raise ValueError(f"ratio values must be positive, got {tuple(ratio)}")
        if min(scale) < 0:
            raise ValueError(f"scale values must be non-negative, got {tuple(scale)}")
        self.scale = scale
        self.ratio = ratio
        self.interpolation = _check_interpolation(interpolation)
        self.antialias = antialias
        self._log_ratio = (math.log(ratio[0]), math.log(ratio[1]))

    def make_params(self, size, *, rng=None):
        """torchvision's ``get_params`` drawn from ``rng``: ``{"top", "left", "height",
        "width"}`` of the crop in an image of ``size = (height, width)``."""
        height, width = size
        rng = _rng(rng)
        area = height * width
        for _ in range(10):
            target_area = area * rng.uniform(self.scale[0], self.scale[1])
            aspect_ratio = math.exp(rng.uniform(self._log_ratio[0], self._log_ratio[1]))
            w = int(round(math.sqrt(target_area * aspect_ratio)))
            h = int(round(math.sqrt(target_area / aspect_ratio)))
            if 0 < w <= width and 0 < h <= height:
                i = rng.randint(0, height - h)
                j = rng.randint(0, width - w)
                break
        else:
            in_ratio = float(width) / float(height)
            if in_ratio < min(self.ratio):
                w = width
                h = int(round(w / min(self.ratio)))
            elif in_ratio > max(self.ratio):
                h = height
                w = int(round(h * max(self.ratio)))
            else:
                w = width
                h = height
            i = (height - h) // 2
            j = (width - w) // 2
        return {"top": i, "left": j, "height": h, "width": w}

    def transform(self, img, params):
        args = params["top"], params["left"], params["height"], params["width"]
        if _kind(img) != "ndarray":
            return _tvf().resized_crop(img, *args, size=list(self.size),
                                       interpolation=self.interpolation,
                                       antialias=self.antialias)
        return FN.resized_crop(_array(img), *args, self.size, _np_interp(self.interpolation))

    def _extra_repr(self):
        return (f"size={self.size}, scale={tuple(self.scale)}, ratio={tuple(self.ratio)}, "
                f"interpolation={self.interpolation!r}, antialias={self.antialias}")


class RandomHorizontalFlip(Transform):
    """Mirror left-right with probability ``p``: flips when ``rng.random() < p``.

    Args:
        p: probability in [0, 1] (default 0.5).

    Raises:
        ValueError: ``p`` outside [0, 1].

    Example:
        >>> RandomHorizontalFlip(p=1.0)(img)  # doctest: +SKIP
    """

    def __init__(self, p=0.5):
        if not isinstance(p, numbers.Real) or not (0.0 <= p <= 1.0):
            raise ValueError("`p` should be a floating point value in the interval [0.0, 1.0].")
        self.p = p

    def make_params(self, size=None, *, rng=None):
        """``{"flip": bool}``: one ``rng.random()`` draw, even when ``p`` is 0 or 1."""
        return {"flip": _rng(rng).random() < self.p}

    def transform(self, img, params):
        if not params["flip"]:
            return img
        kind = _kind(img)
        if kind == "ndarray":
            return FN.horizontal_flip(_array(img))
        return _tvf().horizontal_flip(img)

    def _extra_repr(self):
        return f"p={self.p}"


class ColorJitter(Transform):
    """Randomly change brightness, contrast, saturation and hue, like
    ``torchvision.transforms.v2.ColorJitter``: the order of the four adjustments is a random
    permutation (``fn_idx``), drawn first, then each factor uniformly from its range.

    In a fused pipeline the adjustments run on the resized uint8 image, i.e. after the
    geometry, which is where the standard ImageNet recipe puts ColorJitter (a ColorJitter
    before the geometry makes the pipeline non-fusable). Results are within 1 uint8 level of
    torchvision's uint8 tensor kernels (PIL images go through Pillow, as in torchvision).

    Args:
        brightness, contrast, saturation: a number ``x >= 0`` (factor in
            ``[max(0, 1 - x), 1 + x]``) or a ``(min, max)`` pair; None for no change.
        hue: a number in [0, 0.5] (factor in ``[-x, x]``) or a pair inside [-0.5, 0.5].

    Raises:
        ValueError: out-of-range values. TypeError: neither a number nor a pair.

    Example:
        >>> ColorJitter(0.4, 0.4, 0.4, 0.1)(img)  # doctest: +SKIP
    """

    def __init__(self, brightness=None, contrast=None, saturation=None, hue=None):
        self.brightness = self._check_input(brightness, "brightness")
        self.contrast = self._check_input(contrast, "contrast")
        self.saturation = self._check_input(saturation, "saturation")
        self.hue = self._check_input(hue, "hue", center=0, bound=(-0.5, 0.5),
                                     clip_first_on_zero=False)

    @staticmethod
    def _check_input(value, name, center=1.0, bound=(0, float("inf")), clip_first_on_zero=True):
        if value is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if value < 0:
                raise ValueError(f"If {name} is a single number, it must be non negative.")
            value = [center - value, center + value]
            if clip_first_on_zero:
                value[0] = max(value[0], 0.0)
        elif isinstance(value, Sequence) and len(value) == 2:
            value = [float(v) for v in value]
        else:
            raise TypeError(f"{name}={value} should be a single number or a sequence with length 2.")
        if not bound[0] <= value[0] <= value[1] <= bound[1]:
            raise ValueError(f"{name} values should be between {bound} and increasing, but got {value}.")
        return None if value[0] == value[1] == center else (float(value[0]), float(value[1]))

    def make_params(self, size=None, *, rng=None):
        """``{"fn_idx": [permutation of 0..3], "brightness_factor", "contrast_factor",
        "saturation_factor", "hue_factor"}`` (None for an unset adjustment)."""
        rng = _rng(rng)
        fn_idx = [0, 1, 2, 3]
        rng.shuffle(fn_idx)
        factors = [None if r is None else float(rng.uniform(r[0], r[1]))
                   for r in (self.brightness, self.contrast, self.saturation, self.hue)]
        return {"fn_idx": fn_idx, "brightness_factor": factors[0],
                "contrast_factor": factors[1], "saturation_factor": factors[2],
                "hue_factor": factors[3]}

    @staticmethod
    def ops(params):
        """The adjustments to run, in order: a list of ``(fn_id, factor)``."""
        factors = (params["brightness_factor"], params["contrast_factor"],
                   params["saturation_factor"], params["hue_factor"])
        return [(int(i), factors[int(i)]) for i in params["fn_idx"] if factors[int(i)] is not None]

    def transform(self, img, params):
        ops = self.ops(params)
        if not ops:
            return img
        if _kind(img) == "ndarray":
            kernels = (FN.adjust_brightness, FN.adjust_contrast, FN.adjust_saturation,
                       FN.adjust_hue)
            img = np.array(img, order="C", copy=True)
            for i, factor in ops:
                kernels[i](img, factor, inplace=True)
            return img
        F = _tvf()
        kernels = (F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue)
        for i, factor in ops:
            img = kernels[i](img, factor)
        return img

    def _extra_repr(self):
        return (f"brightness={self.brightness}, contrast={self.contrast}, "
                f"saturation={self.saturation}, hue={self.hue}")


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

    def __init__(self, mean, std, inplace=False):
        self.mean = list(mean)
        self.std = list(std)
        self.inplace = inplace

    def transform(self, img, params):
        if _kind(img) != "tensor":
            raise TypeError(f"{type(self).__name__}() supports tensors only, got "
                            f"{type(img).__name__}")
        return _tvf().normalize(img, mean=self.mean, std=self.std, inplace=self.inplace)

    def _extra_repr(self):
        return f"mean={self.mean}, std={self.std}, inplace={self.inplace}"


class ToTensor(Transform):
    """PIL image or HWC array -> float32 CHW tensor in [0, 1], like torchvision's
    ``ToTensor`` (uint8 is divided by 255); tensors pass through unchanged.

    Example:
        >>> ToTensor()(pil_image).dtype  # doctest: +SKIP
        torch.float32
    """

    def transform(self, img, params):
        if _kind(img) == "tensor":
            return img
        from torchvision.transforms import functional as F1

        return F1.to_tensor(img)


class PILToTensor(Transform):
    """PIL image -> uint8 CHW tensor (no scaling); anything else passes through unchanged.

    Example:
        >>> PILToTensor()(pil_image).dtype  # doctest: +SKIP
        torch.uint8
    """

    def transform(self, img, params):
        if _kind(img) != "pil":
            return img
        return _tvf().pil_to_tensor(img)


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
    v2's ``ToDtype``. PIL images and arrays pass through unchanged.

    Args:
        dtype: a ``torch.dtype`` (or a dict as torchvision; its ``torch.Tensor``,
            ``tv_tensors.Image`` or ``"others"`` entry is used).
        scale: rescale the value range between integer and float dtypes.

    Example:
        >>> ToDtype(torch.float32, scale=True)(torch.zeros(3, 2, 2, dtype=torch.uint8)).dtype
        torch.float32
    """

    def __init__(self, dtype, scale=False):
        if not isinstance(dtype, (dict, torch.dtype)):
            raise ValueError(f"dtype must be a dict or a torch.dtype, but got {type(dtype)} instead")
        self.dtype = dtype
        self.scale = scale

    def _tensor_dtype(self):
        if isinstance(self.dtype, torch.dtype):
            return self.dtype
        from torchvision import tv_tensors

        for key in (tv_tensors.Image, torch.Tensor, "others"):
            if key in self.dtype:
                return self.dtype[key]
        return None

    def transform(self, img, params):
        dtype = self._tensor_dtype()
        if _kind(img) != "tensor" or dtype is None:
            return img
        return _tvf().to_dtype(img, dtype, scale=self.scale)

    def _extra_repr(self):
        return f"dtype={self.dtype}, scale={self.scale}"
