"""Image functionals with torchvision v2's names and signatures, for every image kind.

Each function looks at its input's type once, in :func:`_pick`: a NumPy array (HWC uint8,
or (H, W)) goes to turboloader's native kernels (:mod:`turboloader.transforms.functional._array`),
a PIL image or a tensor to torchvision v2's functional of the same name (imported on first
use). The transform classes of :mod:`turboloader.transforms` call these functions, so no
class branches on the input type itself.

On arrays the results equal torchvision's uint8 tensor kernels: exactly for the flips, crops,
padding, warps (``affine``, ``rotate``, ``perspective``), colour adjustments and point
operations; ``resize``/``resized_crop`` are antialiased like Pillow (within 1 level of
torchvision's tensor kernel, ``"nearest"`` is Pillow's nearest, i.e. torchvision's
``"nearest-exact"``); ``gaussian_blur`` within 1 level. Arrays must be C-contiguous (the
classes make them so); ``crop`` refuses a window outside the image instead of zero-padding.
Array-only options (``box``, ``out``, ``inplace``) raise TypeError for other kinds.

Example:
    >>> from turboloader.transforms import functional as F
    >>> F.hflip(np.zeros((4, 6, 3), np.uint8)).shape
    (4, 6, 3)
"""

import numpy as np
import torch
from PIL import Image

from turboloader.transforms.functional import _array
from turboloader.transforms.functional._array import (
    Interpolation,
    _interpolation,  # noqa: F401  (turboloader.fused resolves filter names through it)
    gaussian_kernel1d,
    inverse_affine_matrix,
    perspective_coefficients,
    to_chw_normalized,
    to_chw_uint8,
)

__all__ = [
    "Interpolation",
    "adjust_brightness",
    "adjust_contrast",
    "adjust_hue",
    "adjust_saturation",
    "adjust_sharpness",
    "affine",
    "autocontrast",
    "center_crop",
    "crop",
    "equalize",
    "erase",
    "five_crop",
    "gaussian_blur",
    "gaussian_kernel1d",
    "grayscale_to_rgb",
    "hflip",
    "horizontal_flip",
    "inverse_affine_matrix",
    "invert",
    "normalize",
    "pad",
    "permute_channels",
    "perspective",
    "perspective_coefficients",
    "pil_to_tensor",
    "posterize",
    "resize",
    "resized_crop",
    "rgb_to_grayscale",
    "rotate",
    "solarize",
    "ten_crop",
    "to_chw_normalized",
    "to_chw_uint8",
    "to_dtype",
    "to_pil_image",
    "vertical_flip",
    "vflip",
]


def _tv():
    from torchvision.transforms.v2 import functional  # lazy: costs ~0.3 s to import

    return functional


def _kind(inpt):
    """``"ndarray"``, ``"tensor"`` or ``"pil"``: the one place that looks at an input's type."""
    if isinstance(inpt, np.ndarray):
        return "ndarray"
    if isinstance(inpt, torch.Tensor):
        return "tensor"
    if isinstance(inpt, Image.Image):
        return "pil"
    raise TypeError("expected a PIL Image, a torch.Tensor or a numpy.ndarray, got "
                    f"{type(inpt).__name__}")


def _pick(name, inpt, **array_only):
    """The implementation of functional ``name`` for ``inpt``: turboloader's array kernel or
    torchvision's functional. ``array_only`` options must be unset for other kinds."""
    kind = _kind(inpt)
    if kind == "ndarray":
        return getattr(_array, name)
    given = [k for k, v in array_only.items() if v is not None and v is not False]
    if given:
        raise TypeError(f"{name}: {', '.join(given)} apply to numpy arrays only, got a "
                        f"{type(inpt).__name__}")
    return getattr(_tv(), name)


def _tensor_fill(fill):
    # torchvision's tensor kernels take a sequence fill as floats
    if isinstance(fill, (tuple, list)):
        return [float(v) for v in fill]
    return fill


# ---------------------------------------------------------------------------------------------
# Geometry
# ---------------------------------------------------------------------------------------------

def resize(inpt, size, interpolation="bilinear", max_size=None, antialias=True, *, box=None,
           out=None):
    """Resize, as torchvision v2's ``resize``.

    Args:
        inpt: PIL image, tensor (..., H, W) or HWC uint8 array.
        size: ``(h, w)``; an int or ``[int]`` for the shorter edge (the longer one is
            ``int(size * long / short)``); None with ``max_size`` for the longer edge.
        interpolation: a name, an ``InterpolationMode`` or a PIL constant. Arrays support
            ``"bilinear"``, ``"bicubic"`` and ``"nearest"`` (Pillow's, = ``"nearest-exact"``).
        max_size: cap on the longer edge when ``size`` is an int.
        antialias: as torchvision for tensors; arrays are always antialiased (as Pillow).
        box: arrays only: a float ``(x0, y0, x1, y1)`` source region (Pillow's ``box``).
        out: arrays only: a C-contiguous uint8 array of the output shape to write into.

    Returns:
        The resized image, same kind as ``inpt``.

    Raises:
        TypeError: an unsupported input kind or option. ValueError: bad sizes.

    Example:
        >>> resize(np.zeros((300, 400, 3), np.uint8), 256).shape
        (256, 341, 3)
    """
    f = _pick("resize", inpt, box=box, out=out)
    if f is _array.resize:
        return f(inpt, size, interpolation, max_size=max_size, box=box,
                 out=out)
    return f(inpt, size, interpolation=interpolation, max_size=max_size, antialias=antialias)


def resized_crop(inpt, top, left, height, width, size, interpolation="bilinear", antialias=True,
                 *, out=None):
    """Crop the window ``(top, left, height, width)``, then resize it to ``size``, as
    torchvision v2's ``resized_crop`` (the filter never reads outside the window).

    Args:
        inpt: PIL image, tensor or HWC uint8 array.
        top, left, height, width: the window; for arrays it must lie inside the image.
        size, interpolation, antialias: as :func:`resize`.
        out: arrays only: the output array to write into.

    Returns:
        The ``size`` crop, same kind as ``inpt``.

    Example:
        >>> resized_crop(np.zeros((100, 100, 3), np.uint8), 10, 20, 50, 40, (32, 32)).shape
        (32, 32, 3)
    """
    f = _pick("resized_crop", inpt, out=out)
    if f is _array.resized_crop:
        return f(inpt, top, left, height, width, size, interpolation,
                 out=out)
    return f(inpt, top, left, height, width, size, interpolation=interpolation,
             antialias=antialias)


def crop(inpt, top, left, height, width):
    """The window ``(top, left, height, width)``, as torchvision v2's ``crop``.

    Arrays: a window leaving the image is a ValueError (torchvision zero-pads it).

    Example:
        >>> crop(np.zeros((10, 10, 3), np.uint8), 2, 3, 4, 5).shape
        (4, 5, 3)
    """
    return _pick("crop", inpt)(inpt, top, left, height, width)


def center_crop(inpt, output_size):
    """Crop the centre to ``output_size`` (``(h, w)`` or an int), as torchvision v2's
    ``center_crop``: offsets ``int(round((H - h) / 2.0))``; an image smaller than the crop is
    zero-padded first.

    Example:
        >>> center_crop(np.zeros((10, 12, 3), np.uint8), 8).shape
        (8, 8, 3)
    """
    return _pick("center_crop", inpt)(inpt, output_size)


def five_crop(inpt, size):
    """``(top_left, top_right, bottom_left, bottom_right, center)`` crops of ``size``, as
    torchvision v2's ``five_crop``.

    Raises:
        ValueError: the crop is larger than the image.

    Example:
        >>> len(five_crop(np.zeros((10, 10, 3), np.uint8), 4))
        5
    """
    return _pick("five_crop", inpt)(inpt, size)


def ten_crop(inpt, size, vertical_flip=False):
    """:func:`five_crop` of the image and of its flipped copy (horizontal, or vertical when
    ``vertical_flip``), as torchvision v2's ``ten_crop``: 10 images.

    Example:
        >>> len(ten_crop(np.zeros((10, 10, 3), np.uint8), 4))
        10
    """
    return _pick("ten_crop", inpt)(inpt, size, vertical_flip=vertical_flip)


def horizontal_flip(inpt):
    """Mirror left-right, as torchvision v2's ``horizontal_flip``.

    Example:
        >>> horizontal_flip(np.arange(6, dtype=np.uint8).reshape(1, 6))[0].tolist()
        [5, 4, 3, 2, 1, 0]
    """
    return _pick("horizontal_flip", inpt)(inpt)


def vertical_flip(inpt):
    """Mirror top-bottom, as torchvision v2's ``vertical_flip``.

    Example:
        >>> vertical_flip(np.arange(3, dtype=np.uint8).reshape(3, 1))[:, 0].tolist()
        [2, 1, 0]
    """
    return _pick("vertical_flip", inpt)(inpt)


hflip = horizontal_flip
vflip = vertical_flip


def pad(inpt, padding, fill=0, padding_mode="constant"):
    """Pad the borders, as torchvision v2's ``pad``.

    Args:
        inpt: PIL image, tensor or HWC uint8 array.
        padding: an int (all sides), ``(left/right, top/bottom)`` or
            ``(left, top, right, bottom)``.
        fill: the constant: a number or one per channel (None: 0); on uint8 a float is
            truncated, as torch converts it.
        padding_mode: ``"constant"``, ``"edge"``, ``"reflect"`` or ``"symmetric"``.

    Raises:
        ValueError: bad mode or padding; reflect padding not smaller than the image side.

    Example:
        >>> pad(np.zeros((2, 2, 3), np.uint8), [1, 2]).shape
        (6, 4, 3)
    """
    kind = _kind(inpt)
    f = _pick("pad", inpt)
    if kind == "tensor":
        fill = _tensor_fill(fill)
    return f(inpt, padding, fill=fill, padding_mode=padding_mode)


def affine(inpt, angle, translate, scale, shear, interpolation="nearest", fill=None,
           center=None):
    """Affine warp about the centre (or ``center``), as torchvision v2's ``affine``.

    Args:
        angle: degrees, counter-clockwise. translate: ``(tx, ty)`` pixels. scale: > 0.
        shear: a number (x shear) or ``(sx, sy)`` in degrees.
        interpolation: ``"nearest"`` or ``"bilinear"`` (PIL images also ``"bicubic"``).
        fill: None (zeros), a number, or one number per channel.
        center: optional ``(x, y)`` in pixels.

    Example:
        >>> affine(np.zeros((8, 8, 3), np.uint8), 15.0, [1, 0], 1.0, [0.0, 0.0]).shape
        (8, 8, 3)
    """
    return _pick("affine", inpt)(inpt, angle, translate, scale, shear,
                                 interpolation=interpolation, fill=fill, center=center)


def rotate(inpt, angle, interpolation="nearest", expand=False, center=None, fill=None):
    """Rotate counter-clockwise by ``angle`` degrees, as torchvision v2's ``rotate``.

    Example:
        >>> rotate(np.zeros((4, 6, 3), np.uint8), 90.0, expand=True).shape
        (6, 4, 3)
    """
    return _pick("rotate", inpt)(inpt, angle, interpolation=interpolation, expand=expand,
                                 center=center, fill=fill)


def perspective(inpt, startpoints, endpoints, interpolation="bilinear", fill=None,
                coefficients=None):
    """Perspective warp mapping ``startpoints`` to ``endpoints`` (or by ``coefficients``), as
    torchvision v2's ``perspective``.

    Example:
        >>> corners = [[0, 0], [7, 0], [7, 7], [0, 7]]
        >>> perspective(np.zeros((8, 8, 3), np.uint8), corners, corners).shape
        (8, 8, 3)
    """
    return _pick("perspective", inpt)(inpt, startpoints, endpoints, interpolation=interpolation,
                                      fill=fill, coefficients=coefficients)


def erase(inpt, i, j, h, w, v, inplace=False):
    """Set the window ``(i, j, h, w)`` to ``v``, as torchvision v2's ``erase``.

    Args:
        inpt: a tensor or HWC uint8 array (torchvision has no PIL kernel either).
        v: a tensor broadcastable to ``(C, h, w)``, as torchvision's, converted to the
            image's dtype as torch's assignment does (truncation); for arrays also a
            scalar, one value per channel or an ``(h, w[, C])`` block.
        inplace: modify ``inpt`` (a read-only array is copied instead).

    Example:
        >>> erase(np.ones((4, 4, 3), np.uint8), 0, 0, 2, 2, 0)[0, 0].tolist()
        [0, 0, 0]
    """
    f = _pick("erase", inpt)
    if f is not _array.erase:
        return f(inpt, i, j, h, w, v, inplace=inplace)
    if isinstance(v, torch.Tensor):
        v = v.to(torch.uint8)
        # (C, 1, 1) -> one value per channel; (C, h, w) -> an (h, w, C) block
        v = v[:, 0, 0].numpy() if v.shape[-2:] == (1, 1) else v.permute(1, 2, 0).numpy()
        if inpt.ndim == 2:
            v = v[..., 0]
    return f(inpt, i, j, h, w, v, inplace=inplace and inpt.flags.writeable)


# ---------------------------------------------------------------------------------------------
# Colour
# ---------------------------------------------------------------------------------------------

def _colour(name, inpt, factor, inplace):
    f = _pick(name, inpt, inplace=inplace)
    if f is getattr(_array, name):
        return f(inpt, factor, inplace=inplace)
    return f(inpt, factor)


def adjust_brightness(inpt, brightness_factor, *, inplace=False):
    """Multiply by ``brightness_factor`` (clamped), as torchvision v2's ``adjust_brightness``;
    ``inplace`` (arrays only) modifies ``inpt``.

    Example:
        >>> adjust_brightness(np.full((1, 1, 3), 100, np.uint8), 1.5)[0, 0].tolist()
        [150, 150, 150]
    """
    return _colour("adjust_brightness", inpt, brightness_factor, inplace)


def adjust_contrast(inpt, contrast_factor, *, inplace=False):
    """Blend with the mean grey level (of the truncated grayscale image), as torchvision v2's
    ``adjust_contrast``.

    Example:
        >>> adjust_contrast(np.full((1, 1, 3), 100, np.uint8), 0.0)[0, 0].tolist()  # luma 99.99
        [99, 99, 99]
    """
    return _colour("adjust_contrast", inpt, contrast_factor, inplace)


def adjust_saturation(inpt, saturation_factor, *, inplace=False):
    """Blend with the grayscale image, as torchvision v2's ``adjust_saturation``.

    Example:
        >>> adjust_saturation(np.zeros((1, 1, 3), np.uint8), 2.0).shape
        (1, 1, 3)
    """
    return _colour("adjust_saturation", inpt, saturation_factor, inplace)


def adjust_hue(inpt, hue_factor, *, inplace=False):
    """Rotate the hue by ``hue_factor`` turns (in [-0.5, 0.5]), as torchvision v2's
    ``adjust_hue``.

    Example:
        >>> adjust_hue(np.zeros((1, 1, 3), np.uint8), 0.1).shape
        (1, 1, 3)
    """
    return _colour("adjust_hue", inpt, hue_factor, inplace)


def adjust_sharpness(inpt, sharpness_factor):
    """Blend with a 3x3 smoothing of the interior, as torchvision v2's ``adjust_sharpness``.

    Example:
        >>> adjust_sharpness(np.zeros((4, 4, 3), np.uint8), 2.0).shape
        (4, 4, 3)
    """
    return _pick("adjust_sharpness", inpt)(inpt, sharpness_factor)


def _point(name, inpt, inplace, *args):
    f = _pick(name, inpt, inplace=inplace)
    if f is getattr(_array, name):
        return f(inpt, *args, inplace=inplace)
    return f(inpt, *args)


def posterize(inpt, bits, *, inplace=False):
    """Keep the top ``bits`` bits of each value, as torchvision v2's ``posterize``.

    Example:
        >>> posterize(np.full((1, 1, 3), 255, np.uint8), 1)[0, 0].tolist()
        [128, 128, 128]
    """
    return _point("posterize", inpt, inplace, bits)


def solarize(inpt, threshold, *, inplace=False):
    """Invert the values ``>= threshold``, as torchvision v2's ``solarize``.

    Example:
        >>> solarize(np.full((1, 1, 3), 200, np.uint8), 128)[0, 0].tolist()
        [55, 55, 55]
    """
    return _point("solarize", inpt, inplace, threshold)


def invert(inpt, *, inplace=False):
    """``max - inpt``, as torchvision v2's ``invert``.

    Example:
        >>> invert(np.zeros((1, 1, 3), np.uint8))[0, 0].tolist()
        [255, 255, 255]
    """
    return _point("invert", inpt, inplace)


def autocontrast(inpt, *, inplace=False):
    """Stretch each channel to the full range, as torchvision v2's ``autocontrast``.

    Example:
        >>> autocontrast(np.zeros((2, 2, 3), np.uint8)).shape
        (2, 2, 3)
    """
    return _point("autocontrast", inpt, inplace)


def equalize(inpt, *, inplace=False):
    """Equalize each channel's histogram, as torchvision v2's ``equalize``.

    Example:
        >>> equalize(np.zeros((2, 2, 3), np.uint8)).shape
        (2, 2, 3)
    """
    return _point("equalize", inpt, inplace)


def rgb_to_grayscale(inpt, num_output_channels=1):
    """torchvision's luma ``0.2989 R + 0.587 G + 0.114 B`` (truncated on uint8), 1 or 3
    channels, as torchvision v2's ``rgb_to_grayscale``.

    Example:
        >>> rgb_to_grayscale(np.zeros((2, 2, 3), np.uint8), 3).shape
        (2, 2, 3)
    """
    return _pick("rgb_to_grayscale", inpt)(inpt, num_output_channels=num_output_channels)


def grayscale_to_rgb(inpt):
    """A grayscale image as RGB (3 equal channels); an RGB image unchanged, as torchvision
    v2's ``grayscale_to_rgb`` (PIL images: ``convert("RGB")``).

    Example:
        >>> grayscale_to_rgb(np.zeros((4, 5, 1), np.uint8)).shape
        (4, 5, 3)
    """
    return _pick("grayscale_to_rgb", inpt)(inpt)


def permute_channels(inpt, permutation):
    """Output channel ``i`` is input channel ``permutation[i]``, as torchvision v2's
    ``permute_channels``.

    Raises:
        ValueError: ``permutation`` has the wrong length.

    Example:
        >>> permute_channels(np.array([[[1, 2, 3]]], np.uint8), [2, 1, 0])[0, 0].tolist()
        [3, 2, 1]
    """
    return _pick("permute_channels", inpt)(inpt, permutation=list(permutation))


def gaussian_blur(inpt, kernel_size, sigma=None):
    """Gaussian blur with reflect padding, as torchvision v2's ``gaussian_blur``.

    Args:
        kernel_size: odd positive int or ``(kx, ky)``.
        sigma: float or ``(sx, sy)``; default ``0.3 * ((k - 1) * 0.5 - 1) + 0.8``.

    Example:
        >>> gaussian_blur(np.zeros((8, 8, 3), np.uint8), 3, 1.0).shape
        (8, 8, 3)
    """
    return _pick("gaussian_blur", inpt)(inpt, kernel_size, sigma)


# ---------------------------------------------------------------------------------------------
# Tensors: normalize, dtype, conversions
# ---------------------------------------------------------------------------------------------

def _tensor_only(name, inpt, hint=""):
    if _kind(inpt) != "tensor":
        raise TypeError(f"{name}() supports tensors only, got {type(inpt).__name__}{hint}")
    return getattr(_tv(), name)


def normalize(inpt, mean, std, inplace=False):
    """``(inpt - mean[c]) / std[c]`` on a float tensor, as torchvision v2's ``normalize``.

    Raises:
        TypeError: a PIL image or an array (as torchvision; for HWC uint8 arrays see
            :func:`to_chw_normalized`). ValueError: an integer tensor, a zero std.

    Example:
        >>> normalize(torch.ones(3, 1, 1), [0.5] * 3, [0.5] * 3).flatten().tolist()
        [1.0, 1.0, 1.0]
    """
    hint = "; HWC uint8 arrays: to_chw_normalized()" if _kind(inpt) == "ndarray" else ""
    return _tensor_only("normalize", inpt, hint)(inpt, mean=mean, std=std, inplace=inplace)


def to_dtype(inpt, dtype=torch.float, scale=False):
    """Convert a tensor to ``dtype``, rescaling the value range between integer and float
    types when ``scale`` (uint8 -> float: / 255), as torchvision v2's ``to_dtype``.

    Raises:
        TypeError: a PIL image or an array (as torchvision).

    Example:
        >>> to_dtype(torch.full((1,), 255, dtype=torch.uint8), torch.float32, scale=True)
        tensor([1.])
    """
    return _tensor_only("to_dtype", inpt)(inpt, dtype=dtype, scale=scale)


def to_pil_image(pic, mode=None):
    """A CHW tensor or HWC array as a PIL image (torchvision's ``to_pil_image``: float
    images are scaled by 255; ``mode`` as Pillow's, guessed from the channels when None).

    Example:
        >>> to_pil_image(np.zeros((4, 6, 3), np.uint8)).size
        (6, 4)
    """
    return _tv().to_pil_image(pic, mode=mode)


def pil_to_tensor(pic):
    """A PIL image as a CHW tensor of the same dtype (no scaling), as torchvision's
    ``pil_to_tensor``.

    Example:
        >>> pil_to_tensor(Image.new("RGB", (6, 4))).shape
        torch.Size([3, 4, 6])
    """
    return _tv().pil_to_tensor(pic).as_subclass(torch.Tensor)
