"""The NumPy kernels behind :mod:`turboloader.transforms.functional`: HWC uint8 arrays in,
torchvision v2 semantics out.

:mod:`turboloader.transforms.functional` sends NumPy arrays here and PIL images and tensors
to torchvision's functionals; calling these directly skips that dispatch. Images are ``numpy.ndarray`` of dtype uint8, shape (H, W, C) with C = 3 (or 1), or (H, W),
C-contiguous. Every function validates its arguments here and hands the pixel loop to
the kernels in ``turboloader._native``, which run without the GIL.

Semantics follow torchvision v2 on uint8 tensors (resize and resized_crop with
``antialias=True``, the ColorJitter adjustments, normalize) and Pillow's ``Image.resize``
(``box``, NEAREST), within 1 grey level; the colour adjustments, the warps (``affine``,
``rotate``, ``perspective``) and the point operations (``posterize``, ``solarize``,
``invert``, ``rgb_to_grayscale``, ``equalize``, ``autocontrast``, ``adjust_sharpness``) match
torchvision's uint8 tensor kernels exactly, ``gaussian_blur`` within 1 level. torchvision is
never imported at module import.
"""

import math
import operator

import numpy as np

from turboloader._native import _chw, _colour, _resample, _warp
from turboloader.decode import Interpolation
from turboloader.decode.sizes import resized_sizes

_interpolation = Interpolation.parse

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
    "horizontal_flip",
    "inverse_affine_matrix",
    "invert",
    "pad",
    "permute_channels",
    "perspective",
    "perspective_coefficients",
    "posterize",
    "resize",
    "resized_crop",
    "rgb_to_grayscale",
    "rotate",
    "solarize",
    "ten_crop",
    "to_chw_normalized",
    "to_chw_uint8",
    "vertical_flip",
]


def _image(img, what, *, channels=(1, 3)):
    """Return (img as an (H, W, C) view, whether the input was 2-D) after validating it."""
    if not isinstance(img, np.ndarray):
        raise TypeError(f"{what}: img must be a numpy.ndarray, got {type(img).__name__}")
    if img.dtype != np.uint8:
        raise TypeError(f"{what}: img must have dtype uint8, got {img.dtype}")
    if img.ndim == 2:
        flat = True
    elif img.ndim == 3:
        flat = False
    else:
        raise ValueError(f"{what}: img must have shape (H, W, C) or (H, W), got {img.shape}")
    if not img.flags.c_contiguous:
        raise ValueError(f"{what}: img must be C-contiguous (use numpy.ascontiguousarray)")
    if img.shape[0] == 0 or img.shape[1] == 0:
        raise ValueError(f"{what}: img must not be empty, got shape {img.shape}")
    hwc = img[:, :, None] if flat else img
    if hwc.shape[2] not in channels:
        raise ValueError(f"{what}: img must have {' or '.join(map(str, channels))} channels, "
                         f"got {hwc.shape[2]}")
    return hwc, flat


def _index(value, name):
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None


def _output(out, shape, dtype, what):
    if out is None:
        return np.empty(shape, dtype)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{what}: out must be a numpy.ndarray, got {type(out).__name__}")
    if out.dtype != dtype:
        raise TypeError(f"{what}: out must have dtype {np.dtype(dtype)}, got {out.dtype}")
    if out.shape != tuple(shape):
        raise ValueError(f"{what}: out must have shape {tuple(shape)}, got {out.shape}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"{what}: out must be C-contiguous and writeable")
    return out


def _output_size(size, height, width, max_size=None):
    """:func:`_resized_size`, which must be positive."""
    out_h, out_w = _resized_size(size, height, width, max_size)
    if out_h <= 0 or out_w <= 0:
        raise ValueError(f"output size must be positive, got {out_h}x{out_w}")
    return out_h, out_w


def _resized_size(size, height, width, max_size=None):
    """torchvision's rule (``_compute_resized_output_size``): (h, w); an int / [int] for the
    shorter edge, the longer one ``int(size * long / short)``, capped by ``max_size``; or
    None with ``max_size`` for the longer edge."""
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        size = [int(size)]
    if size is not None:
        try:
            size = [_index(s, "size") for s in size]
        except TypeError:
            raise TypeError(f"size must be an int or a sequence of 1 or 2 ints, got {size!r}") from None
        if len(size) not in (1, 2):
            raise ValueError(f"size must have 1 or 2 elements, got {size!r}")
    elif max_size is None:
        raise ValueError("max_size must be an integer when size is None")
    if max_size is not None:
        max_size = _index(max_size, "max_size")
        if size is not None and len(size) != 1:
            raise ValueError("max_size should only be passed if size is None or specifies the "
                             "length of the smaller edge, i.e. size should be an int or a "
                             "sequence of length 1")
        if size is not None and max_size <= size[0]:
            raise ValueError(f"max_size = {max_size} must be strictly greater than the "
                             f"requested size for the smaller edge size = {size}")
    return tuple(int(v) for v in resized_sizes(size, np.array([[height, width]], np.int64),
                                                 max_size)[0])


def _hwc_out(out, out_h, out_w, channels, flat, what):
    shape = (out_h, out_w) if flat else (out_h, out_w, channels)
    res = _output(out, shape, np.uint8, what)
    return res, (res[:, :, None] if flat else res)


def resize(img, size, interpolation="bilinear", *, max_size=None, box=None, out=None):
    """Resize an HWC uint8 image, antialiased like Pillow and torchvision (``antialias=True``).

    Args:
        img: (H, W, C) or (H, W) uint8, C-contiguous.
        size: output ``(height, width)``, or an int (or ``[int]``) for the shorter edge with the
            aspect ratio kept (torchvision's rule); None with ``max_size``.
        max_size: cap on the longer edge when ``size`` is an int (torchvision's ``max_size``).
        interpolation: ``"nearest"``, ``"bilinear"``, ``"bicubic"``, an :class:`Interpolation`
            or a torchvision ``InterpolationMode``.
        box: optional float ``(x0, y0, x1, y1)`` source region, as Pillow's
            ``Image.resize(box=...)``: a sub-pixel crop fused into the resize; taps near its
            edges read the pixels just outside it.
        out: optional C-contiguous uint8 array of the output shape to write into.

    Returns:
        The resized image, (h, w, C) or (h, w) uint8 (``out`` if given).

    Raises:
        TypeError: wrong array type/dtype or interpolation type.
        ValueError: bad shapes, non-contiguous input, zero sizes, box outside the image.

    Example:
        >>> small = resize(img, (224, 224), "bicubic", box=(10.5, 20.0, 310.5, 320.0))
    """
    hwc, flat = _image(img, "resize", channels=(1, 2, 3, 4))
    mode = _interpolation(interpolation)
    if box is not None:
        try:
            box = tuple(float(v) for v in box)
        except TypeError:
            raise TypeError(f"resize: box must be 4 numbers (x0, y0, x1, y1), got {box!r}") from None
        if len(box) != 4:
            raise ValueError(f"resize: box must be 4 numbers (x0, y0, x1, y1), got {box!r}")
        x0, y0, x1, y1 = box
        H, W = hwc.shape[:2]
        if not all(math.isfinite(v) for v in box) or not (0 <= x0 < x1 <= W and 0 <= y0 < y1 <= H):
            raise ValueError(f"resize: box {box} must satisfy 0 <= x0 < x1 <= {W} and "
                             f"0 <= y0 < y1 <= {H}")
        ref_h, ref_w = max(1, round(y1 - y0)), max(1, round(x1 - x0))
    else:
        ref_h, ref_w = hwc.shape[:2]
    out_h, out_w = _output_size(size, ref_h, ref_w, max_size)
    res, dst = _hwc_out(out, out_h, out_w, hwc.shape[2], flat, "resize")
    _resample.resample_into(hwc, dst, box=box, filter=int(mode))
    return res


def resized_crop(img, top, left, height, width, size, interpolation="bilinear", *, out=None):
    """Crop then resize, like torchvision's ``resized_crop(..., antialias=True)``, in one pass.

    The window ``(top, left, height, width)`` is the whole source: filter taps never read
    outside it (torchvision's semantics; use :func:`resize` with ``box`` for Pillow's).

    Args:
        img: (H, W, C) or (H, W) uint8, C-contiguous.
        top, left, height, width: integer window, inside the image.
        size: output ``(height, width)`` or shorter-edge int, as in :func:`resize`.
        interpolation: as in :func:`resize`.
        out: optional output array.

    Returns:
        The (h, w, C) or (h, w) uint8 result.

    Raises:
        TypeError / ValueError: as :func:`resize`; ValueError if the window leaves the image.

    Example:
        >>> patch = resized_crop(img, 10, 20, 200, 150, (224, 224))
    """
    hwc, flat = _image(img, "resized_crop", channels=(1, 2, 3, 4))
    mode = _interpolation(interpolation)
    top, left = _index(top, "top"), _index(left, "left")
    height, width = _index(height, "height"), _index(width, "width")
    H, W = hwc.shape[:2]
    if height <= 0 or width <= 0:
        raise ValueError(f"resized_crop: height and width must be positive, got {height}x{width}")
    if top < 0 or left < 0 or top + height > H or left + width > W:
        raise ValueError(f"resized_crop: window (top={top}, left={left}, height={height}, "
                         f"width={width}) is outside the {H}x{W} image")
    out_h, out_w = _output_size(size, height, width)
    res, dst = _hwc_out(out, out_h, out_w, hwc.shape[2], flat, "resized_crop")
    _resample.resample_into(hwc, dst, crop=(top, left, height, width), filter=int(mode))
    return res


def crop(img, top, left, height, width):
    """Copy the window ``(top, left, height, width)`` of an image into a new array.

    Unlike torchvision, a window leaving the image is an error rather than zero-padded.

    Returns:
        (height, width, C) or (height, width) uint8, C-contiguous.

    Raises:
        TypeError: non-integer coordinates, wrong dtype. ValueError: window outside the image.

    Example:
        >>> patch = crop(img, 0, 0, 32, 32)
    """
    hwc, flat = _image(img, "crop", channels=(1, 2, 3, 4))
    top, left = _index(top, "top"), _index(left, "left")
    height, width = _index(height, "height"), _index(width, "width")
    H, W = hwc.shape[:2]
    if height <= 0 or width <= 0:
        raise ValueError(f"crop: height and width must be positive, got {height}x{width}")
    if top < 0 or left < 0 or top + height > H or left + width > W:
        raise ValueError(f"crop: window (top={top}, left={left}, height={height}, "
                         f"width={width}) is outside the {H}x{W} image")
    res, dst = _hwc_out(None, height, width, hwc.shape[2], flat, "crop")
    _resample.crop_into(hwc, dst, top=top, left=left)
    return res


def horizontal_flip(img):
    """Return the image mirrored left-right (a new C-contiguous array).

    Example:
        >>> mirrored = horizontal_flip(img)
    """
    hwc, flat = _image(img, "horizontal_flip", channels=(1, 2, 3, 4))
    res, dst = _hwc_out(None, hwc.shape[0], hwc.shape[1], hwc.shape[2], flat, "horizontal_flip")
    _resample.hflip_into(hwc, dst)
    return res


def _color(kernel, img, factor, inplace, what):
    hwc, _ = _image(img, what)
    try:
        factor = float(factor)
    except (TypeError, ValueError):
        raise TypeError(f"{what}: factor must be a number, got {type(factor).__name__}") from None
    if inplace:
        if not img.flags.writeable:
            raise ValueError(f"{what}: img is read-only; pass inplace=False")
        target, res = hwc, img
    else:
        res = img.copy()
        target = res[:, :, None] if res.ndim == 2 else res
    kernel(target, factor)
    return res


def adjust_brightness(img, brightness_factor, *, inplace=False):
    """``uint8(clamp(img * brightness_factor, 0, 255))`` as torchvision v2 on uint8.

    Args:
        img: (H, W, 3|1) or (H, W) uint8.
        brightness_factor: >= 0; 0 gives black, 1 the original.
        inplace: modify ``img`` instead of returning a copy.

    Raises ValueError for a negative factor. Example: ``adjust_brightness(img, 1.3)``.
    """
    return _color(_colour.adjust_brightness_, img, brightness_factor, inplace,
                  "adjust_brightness")


def adjust_contrast(img, contrast_factor, *, inplace=False):
    """Blend with the mean of the (truncated) grayscale image, as torchvision v2 on uint8.

    Args:
        img: (H, W, 3|1) or (H, W) uint8.
        contrast_factor: >= 0; 0 gives a flat grey image, 1 the original.
        inplace: modify ``img`` instead of returning a copy.

    Raises ValueError for a negative factor. Example: ``adjust_contrast(img, 0.7)``.
    """
    return _color(_colour.adjust_contrast_, img, contrast_factor, inplace, "adjust_contrast")


def adjust_saturation(img, saturation_factor, *, inplace=False):
    """Blend each pixel with its (truncated) grayscale value, as torchvision v2 on uint8.

    Args:
        img: (H, W, 3|1) or (H, W) uint8 (1-channel images are returned unchanged).
        saturation_factor: >= 0; 0 gives grayscale, 1 the original.
        inplace: modify ``img`` instead of returning a copy.

    Raises ValueError for a negative factor. Example: ``adjust_saturation(img, 1.5)``.
    """
    return _color(_colour.adjust_saturation_, img, saturation_factor, inplace,
                  "adjust_saturation")


def adjust_hue(img, hue_factor, *, inplace=False):
    """Rotate the hue by ``hue_factor`` turns (HSV round trip), as torchvision v2 on uint8.

    Args:
        img: (H, W, 3|1) or (H, W) uint8 (1-channel images are returned unchanged).
        hue_factor: in [-0.5, 0.5].
        inplace: modify ``img`` instead of returning a copy.

    Raises ValueError outside [-0.5, 0.5]. Example: ``adjust_hue(img, -0.1)``.
    """
    return _color(_colour.adjust_hue_, img, hue_factor, inplace, "adjust_hue")


def _three(values, name):
    if isinstance(values, (int, float, np.number)):
        values = (values,) * 3
    try:
        values = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number or 3 numbers, got {values!r}") from None
    if len(values) == 1:
        values = values * 3
    if len(values) != 3:
        raise ValueError(f"{name} must have 1 or 3 values, got {len(values)}")
    return values


def to_chw_normalized(img, mean, std, *, flip=False, out=None):
    """HWC uint8 -> normalized CHW float32: ``(img / 255 - mean[c]) / std[c]``.

    Equal (to float32 rounding) to torchvision's
    ``normalize(to_dtype(img, torch.float32, scale=True), mean, std)`` on the CHW tensor.

    Args:
        img: (H, W, 3) uint8, C-contiguous.
        mean, std: 3 numbers (or one, broadcast); std must be non-zero.
        flip: mirror left-right while reading (a fused horizontal flip).
        out: optional (3, H, W) float32 C-contiguous array, e.g. ``batch[i]``.

    Returns:
        (3, H, W) float32 (``out`` if given).

    Raises:
        TypeError: dtypes. ValueError: shapes, non-contiguous input, zero or non-finite std.

    Example:
        >>> x = to_chw_normalized(img, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), flip=True)
    """
    hwc, _ = _image(img, "to_chw_normalized", channels=(3,))
    mean, std = _three(mean, "mean"), _three(std, "std")
    res = _output(out, (3,) + hwc.shape[:2], np.float32, "to_chw_normalized")
    _chw.normalize_chw_into(hwc, res, mean=mean, std=std, flip=bool(flip))
    return res


def to_chw_uint8(img, *, flip=False, out=None):
    """HWC uint8 -> CHW uint8 (``img.transpose(2, 0, 1)``, contiguous), optionally mirrored.

    Args:
        img: (H, W, 3) uint8, C-contiguous.
        flip: mirror left-right while reading.
        out: optional (3, H, W) uint8 C-contiguous array.

    Returns:
        (3, H, W) uint8 (``out`` if given).

    Example:
        >>> chw = to_chw_uint8(img, flip=True)
    """
    hwc, _ = _image(img, "to_chw_uint8", channels=(3,))
    res = _output(out, (3,) + hwc.shape[:2], np.uint8, "to_chw_uint8")
    _chw.chw_into(hwc, res, flip=bool(flip))
    return res


# ---------------------------------------------------------------------------------------------
# Geometry: flips, padding, warps (torchvision v2's uint8 tensor path), blur, erasing
# ---------------------------------------------------------------------------------------------

def vertical_flip(img):
    """Return the image mirrored top-bottom (a new C-contiguous array).

    Example:
        >>> upside_down = vertical_flip(img)
    """
    _image(img, "vertical_flip", channels=(1, 2, 3, 4))
    return np.ascontiguousarray(img[::-1])


def _pad_arg(padding):
    # torchvision's [all] / [left/right, top/bottom] / [left, top, right, bottom]
    if isinstance(padding, (int, np.integer)) and not isinstance(padding, bool):
        padding = [int(padding)]
    try:
        padding = [_index(p, "padding") for p in padding]
    except TypeError:
        raise TypeError(f"padding must be an int or a sequence of ints, got {padding!r}") from None
    if len(padding) == 1:
        return [padding[0]] * 4
    if len(padding) == 2:
        return [padding[0], padding[1], padding[0], padding[1]]
    if len(padding) == 4:
        return padding
    raise ValueError(f"padding must have 1, 2 or 4 elements, got {len(padding)}")


def pad(img, padding, fill=0, padding_mode="constant"):
    """Pad like torchvision's ``pad``: ``padding`` = int, (lr, tb) or (left, top, right, bottom).

    Args:
        img: (H, W[, C]) uint8.
        padding: as torchvision; a negative value removes that many pixels from that side
            (torch's ``pad`` semantics), in any mode.
        fill: constant value, or one per channel (``"constant"`` mode only).
        padding_mode: ``"constant"``, ``"edge"``, ``"reflect"`` or ``"symmetric"``.

    Returns:
        A new C-contiguous array.

    Raises:
        ValueError: bad mode or padding length; reflect padding not smaller than the side.

    Example:
        >>> padded = pad(img, [4, 4], fill=(124, 116, 104))
    """
    hwc, flat = _image(img, "pad", channels=(1, 2, 3, 4))
    if padding_mode not in ("constant", "edge", "reflect", "symmetric"):
        raise ValueError("Padding mode should be either constant, edge, reflect or symmetric")
    left, top, right, bottom = _pad_arg(padding)
    # negative padding crops, as torch's pad does
    hwc = hwc[max(0, -top):hwc.shape[0] - max(0, -bottom), max(0, -left):hwc.shape[1] - max(0, -right)]
    left, top, right, bottom = (max(0, v) for v in (left, top, right, bottom))
    if hwc.shape[0] <= 0 or hwc.shape[1] <= 0:
        raise ValueError("pad: negative padding removes the whole image")
    widths = [(top, bottom), (left, right), (0, 0)]
    if padding_mode == "constant":
        C = hwc.shape[2]
        vals = np.broadcast_to(np.asarray(0 if fill is None else fill, np.float64).reshape(-1), (C,))
        out = np.empty((hwc.shape[0] + top + bottom, hwc.shape[1] + left + right, C), np.uint8)
        # torch converts a float fill to uint8 by truncation (7.6 -> 7); values outside
        # [0, 255] are clipped here (torch raises for a scalar one)
        out[...] = np.clip(vals, 0, 255).astype(np.uint8)
        out[top:top + hwc.shape[0], left:left + hwc.shape[1]] = hwc
    else:
        if padding_mode == "reflect" and (max(top, bottom) >= hwc.shape[0]
                                          or max(left, right) >= hwc.shape[1]):
            raise ValueError("pad: reflect padding must be smaller than the image side")
        out = np.ascontiguousarray(np.pad(hwc, widths, mode=padding_mode))
    return out[:, :, 0] if flat else out


_WARP_MODES = {"nearest": _warp.NEAREST, "bilinear": _warp.BILINEAR}


def _warp_mode(interpolation):
    name = getattr(interpolation, "value", interpolation)
    if isinstance(name, (int, np.integer)) and not isinstance(name, bool):
        name = {0: "nearest", 2: "bilinear"}.get(int(name), name)   # PIL constants
    if isinstance(name, str) and name.lower() in _WARP_MODES:
        return _WARP_MODES[name.lower()]
    raise ValueError(f"interpolation must be 'nearest' or 'bilinear' for warps (as torchvision's "
                     f"tensor kernels), got {interpolation!r}")


def _warp_fill(fill):
    if fill is None or isinstance(fill, (int, float, np.number)):
        return None if fill is None else float(fill)
    return [float(v) for v in fill]


def inverse_affine_matrix(center, angle, translate, scale, shear):
    """torchvision's ``_get_inverse_affine_matrix`` (output -> input, centred coordinates).

    Example:
        >>> inverse_affine_matrix([0.0, 0.0], 0.0, [0.0, 0.0], 1.0, [0.0, 0.0])
        [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    """
    rot = math.radians(angle)
    sx, sy = math.radians(shear[0]), math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    matrix = [x / scale for x in (d, -b, 0.0, -c, a, 0.0)]
    matrix[2] += matrix[0] * (-cx - tx) + matrix[1] * (-cy - ty)
    matrix[5] += matrix[3] * (-cx - tx) + matrix[4] * (-cy - ty)
    matrix[2] += cx
    matrix[5] += cy
    return matrix


def _shear_pair(shear):
    if isinstance(shear, (int, float, np.number)):
        return [float(shear), 0.0]
    shear = [float(v) for v in shear]
    if len(shear) == 1:
        return [shear[0], shear[0]]
    if len(shear) != 2:
        raise ValueError(f"shear should be a sequence of length 2, got {len(shear)}")
    return shear


def affine(img, angle, translate, scale, shear, interpolation="nearest", fill=None, center=None):
    """Affine warp with torchvision v2's uint8 tensor semantics (``F.affine``).

    Same matrix (``_get_inverse_affine_matrix``), float32 sampling grid and
    ``grid_sample(align_corners=False)`` taps, fill blend and round-half-even as torchvision;
    measured identical on the tests' images (see ``tests/transforms/test_augment.py``).

    Args:
        img: (H, W[, C]) uint8, C in 1..4.
        angle: degrees, counter-clockwise. translate: (tx, ty) pixels. scale: > 0.
        shear: a number (x shear) or (sx, sy) in degrees.
        interpolation: ``"nearest"`` or ``"bilinear"`` (or the InterpolationMode / PIL code).
        fill: None (zeros), a number, or one number per channel.
        center: optional (cx, cy) pixel centre of rotation; default the image centre.

    Returns:
        A new (H, W[, C]) uint8 array.

    Raises:
        ValueError: bad interpolation, scale <= 0, bad translate/shear/fill lengths.

    Example:
        >>> tilted = affine(img, 15.0, [4, -2], 1.1, [5.0, 0.0], "bilinear", fill=0)
    """
    hwc, flat = _image(img, "affine", channels=(1, 2, 3, 4))
    mode = _warp_mode(interpolation)
    if not scale > 0.0:
        raise ValueError("Argument scale should be positive")
    translate = [float(t) for t in translate]
    if len(translate) != 2:
        raise ValueError(f"translate should be a sequence of length 2, got {len(translate)}")
    H, W = hwc.shape[:2]
    center_f = [0.0, 0.0] if center is None else [c - s * 0.5 for c, s in zip(center, (W, H))]
    matrix = inverse_affine_matrix(center_f, float(angle), translate, float(scale),
                                   _shear_pair(shear))
    res, dst = _hwc_out(None, H, W, hwc.shape[2], flat, "affine")
    _warp.affine_into(hwc, dst, matrix=matrix, interpolation=mode, fill=_warp_fill(fill))
    return res


def _expanded_size(matrix, w, h):
    # torchvision's _compute_affine_output_size (tensor variant: float32, 1e-4 truncation)
    half_w, half_h = 0.5 * w, 0.5 * h
    m = np.asarray(matrix, np.float32).reshape(2, 3)
    pts = np.array([[-half_w, -half_h, 1.0], [-half_w, half_h, 1.0], [half_w, half_h, 1.0],
                    [half_w, -half_h, 1.0]], np.float32)
    new = pts @ m.T
    lo = new.min(axis=0) + np.array([half_w, half_h], np.float32)
    hi = new.max(axis=0) + np.array([half_w, half_h], np.float32)
    cmax = np.ceil(np.trunc(hi * np.float32(1e4)) * np.float32(1e-4))
    cmin = np.floor(np.trunc(lo * np.float32(1e4)) * np.float32(1e-4))
    size = cmax - cmin
    return int(size[0]), int(size[1])


def rotate(img, angle, interpolation="nearest", expand=False, center=None, fill=None):
    """Rotate counter-clockwise by ``angle`` degrees, as torchvision v2's ``F.rotate`` on uint8.

    Multiples of 90 degrees take torchvision's exact fast paths (rot90) where it does.

    Args:
        img: (H, W[, C]) uint8.
        angle: degrees. interpolation: ``"nearest"`` or ``"bilinear"``.
        expand: grow the output to hold the whole rotated image (torchvision's size rule).
        center: optional (cx, cy) pixel centre; default the image centre.
        fill: None (zeros), a number or one per channel.

    Returns:
        A new uint8 array.

    Example:
        >>> turned = rotate(img, 30.0, "bilinear", fill=0)
    """
    hwc, flat = _image(img, "rotate", channels=(1, 2, 3, 4))
    angle = float(angle) % 360
    H, W = hwc.shape[:2]
    if center is None:
        k = None
        if angle == 0:
            k = 0
        elif angle == 180:
            k = 2
        elif (expand or H == W) and angle in (90.0, 270.0):
            k = 1 if angle == 90 else 3
        if k is not None:
            out = np.ascontiguousarray(np.rot90(hwc, k=k, axes=(0, 1)))
            return out[:, :, 0] if flat else out
    mode = _warp_mode(interpolation)
    center_f = [0.0, 0.0] if center is None else [c - s * 0.5 for c, s in zip(center, (W, H))]
    matrix = inverse_affine_matrix(center_f, -angle, [0.0, 0.0], 1.0, [0.0, 0.0])
    ow, oh = _expanded_size(matrix, W, H) if expand else (W, H)
    res, dst = _hwc_out(None, oh, ow, hwc.shape[2], flat, "rotate")
    _warp.affine_into(hwc, dst, matrix=matrix, interpolation=mode, fill=_warp_fill(fill))
    return res


def perspective_coefficients(startpoints, endpoints):
    """torchvision's ``_get_perspective_coeffs``: 8 float32-rounded coefficients mapping
    output (``endpoints``) to input (``startpoints``) corners.

    Example:
        >>> perspective_coefficients([[0, 0], [9, 0], [9, 9], [0, 9]], [[0, 0], [9, 0], [9, 9], [0, 9]])
        [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    """
    if len(startpoints) != 4 or len(endpoints) != 4:
        raise ValueError(f"Please provide exactly four corners, got {len(startpoints)} "
                         f"startpoints and {len(endpoints)} endpoints.")
    a = np.zeros((8, 8), np.float64)
    for i, (p1, p2) in enumerate(zip(endpoints, startpoints)):
        a[2 * i] = [p1[0], p1[1], 1, 0, 0, 0, -p2[0] * p1[0], -p2[0] * p1[1]]
        a[2 * i + 1] = [0, 0, 0, p1[0], p1[1], 1, -p2[1] * p1[0], -p2[1] * p1[1]]
    b = np.asarray(startpoints, np.float64).reshape(8)
    res = np.linalg.lstsq(a, b, rcond=None)[0].astype(np.float32)
    return [float(v) for v in res]


def perspective(img, startpoints, endpoints, interpolation="bilinear", fill=None,
                coefficients=None):
    """Perspective warp, as torchvision v2's ``F.perspective`` on uint8 tensors.

    Args:
        img: (H, W[, C]) uint8.
        startpoints, endpoints: four ``[x, y]`` corners each (top-left, top-right,
            bottom-right, bottom-left), or None when ``coefficients`` is given.
        interpolation: ``"nearest"`` or ``"bilinear"``.
        fill: None (zeros), a number or one per channel.
        coefficients: the 8 coefficients directly.

    Returns:
        A new uint8 array of the same shape.

    Example:
        >>> warped = perspective(img, [[0, 0], [99, 0], [99, 99], [0, 99]],
        ...                      [[5, 3], [90, 0], [99, 95], [2, 99]])
    """
    hwc, flat = _image(img, "perspective", channels=(1, 2, 3, 4))
    mode = _warp_mode(interpolation)
    if coefficients is not None:
        if startpoints is not None and endpoints is not None:
            raise ValueError("The startpoints/endpoints and the coefficients shouldn't be "
                             "defined concurrently.")
        if len(coefficients) != 8:
            raise ValueError("Argument coefficients should have 8 float values")
        coeffs = [float(c) for c in coefficients]
    elif startpoints is not None and endpoints is not None:
        coeffs = perspective_coefficients(startpoints, endpoints)
    else:
        raise ValueError("Either the startpoints/endpoints or the coefficients must have non "
                         "`None` values.")
    res, dst = _hwc_out(None, hwc.shape[0], hwc.shape[1], hwc.shape[2], flat, "perspective")
    _warp.perspective_into(hwc, dst, coefficients=coeffs, interpolation=mode,
                           fill=_warp_fill(fill))
    return res


def gaussian_kernel1d(kernel_size, sigma):
    """torchvision's float32 1-D Gaussian taps: ``softmax(-(linspace(-lim, lim) / sigma)^2)``."""
    lim = (kernel_size - 1) / (2.0 * math.sqrt(2.0))
    x = np.linspace(-lim, lim, kernel_size, dtype=np.float32) if kernel_size > 1 else \
        np.zeros(1, np.float32)
    z = -np.square(x / np.float32(sigma))
    e = np.exp(z - z.max())
    return (e / e.sum(dtype=np.float32)).astype(np.float32)


def gaussian_blur(img, kernel_size, sigma=None):
    """Gaussian blur as torchvision v2's ``F.gaussian_blur`` on uint8 (reflect padding).

    Args:
        img: (H, W[, C]) uint8.
        kernel_size: odd positive int or (kx, ky).
        sigma: float or (sx, sy); default ``0.3 * ((k - 1) * 0.5 - 1) + 0.8`` as torchvision
            (``k * 0.15 + 0.35``).

    Returns:
        A new uint8 array.

    Raises:
        ValueError: even or non-positive sizes, non-positive sigma, kernel half-width not
            smaller than the image side (torch's reflect-padding limit).

    Example:
        >>> soft = gaussian_blur(img, 9, 2.0)
    """
    hwc, flat = _image(img, "gaussian_blur", channels=(1, 2, 3, 4))
    if isinstance(kernel_size, (int, np.integer)):
        kernel_size = [int(kernel_size)] * 2
    kernel_size = [_index(k, "kernel_size") for k in kernel_size]
    if len(kernel_size) != 2:
        raise ValueError(f"If kernel_size is a sequence its length should be 2. Got {len(kernel_size)}")
    for k in kernel_size:
        if k % 2 == 0 or k < 0:
            raise ValueError(f"kernel_size should have odd and positive integers. Got {kernel_size}")
    if sigma is None:
        sigma = [k * 0.15 + 0.35 for k in kernel_size]
    elif isinstance(sigma, (int, float, np.number)):
        sigma = [float(sigma)] * 2
    else:
        sigma = [float(s) for s in sigma]
        if len(sigma) == 1:
            sigma = sigma * 2
        if len(sigma) != 2:
            raise ValueError(f"If sigma is a sequence, its length should be 2. Got {len(sigma)}")
    if any(s <= 0.0 for s in sigma):
        raise ValueError(f"sigma should have positive values. Got {sigma}")
    kx = gaussian_kernel1d(kernel_size[0], sigma[0])
    ky = gaussian_kernel1d(kernel_size[1], sigma[1])
    res, dst = _hwc_out(None, hwc.shape[0], hwc.shape[1], hwc.shape[2], flat, "gaussian_blur")
    tmp = np.empty(hwc.size + hwc.shape[1] * hwc.shape[2], np.float32)
    _warp.gaussian_blur_into(hwc, dst, kx=kx, ky=ky, tmp=tmp)
    return res


def erase(img, i, j, h, w, v, inplace=False):
    """Set the window ``(i, j, h, w)`` to ``v`` (a scalar, per-channel values or an
    (h, w[, C]) block), as torchvision's ``erase``.

    Example:
        >>> cut = erase(img, 10, 10, 32, 32, 0)
    """
    _image(img, "erase", channels=(1, 2, 3, 4))
    out = img if inplace else img.copy()
    out[i:i + h, j:j + w] = v
    return out


# ---------------------------------------------------------------------------------------------
# Point operations (AutoAugment's colour ops)
# ---------------------------------------------------------------------------------------------

def _point(img, what, inplace):
    hwc, _ = _image(img, what, channels=(1, 2, 3, 4))
    if inplace:
        if not img.flags.writeable:
            raise ValueError(f"{what}: img is read-only; pass inplace=False")
        return img, hwc
    res = img.copy()
    return res, (res[:, :, None] if res.ndim == 2 else res)


def posterize(img, bits, *, inplace=False):
    """Keep the top ``bits`` bits of each value (torchvision ``posterize`` on uint8).

    Raises TypeError unless ``bits`` is an int in [0, 8]. Example: ``posterize(img, 4)``.
    """
    if not isinstance(bits, (int, np.integer)) or isinstance(bits, bool) or not 0 <= bits <= 8:
        raise TypeError(f"bits must be a positive integer in the range [0, 8], got {bits} instead.")
    res, target = _point(img, "posterize", inplace)
    _colour.posterize_(target, int(bits))
    return res


def solarize(img, threshold, *, inplace=False):
    """Invert values ``>= threshold`` (torchvision ``solarize`` on uint8).

    Raises TypeError when threshold > 255 (as torchvision). Example: ``solarize(img, 128)``.
    """
    threshold = float(threshold)
    if threshold > 255:
        raise TypeError(f"Threshold should be less or equal the maximum value of the dtype, "
                        f"but got {threshold}")
    res, target = _point(img, "solarize", inplace)
    # torch compares the uint8 image with the threshold in float32; for integer x,
    # x >= t  <=>  x >= ceil(t)
    t32 = float(np.float32(threshold))
    _colour.solarize_(target, min(256, max(0, math.ceil(t32))))
    return res


def invert(img, *, inplace=False):
    """``255 - img``. Example: ``invert(img)``."""
    res, target = _point(img, "invert", inplace)
    _colour.invert_(target)
    return res


def rgb_to_grayscale(img, num_output_channels=1):
    """torchvision's uint8 ``rgb_to_grayscale``: truncated float32 ``0.2989 R + 0.587 G + 0.114 B``.

    Args:
        img: (H, W, 3) uint8, or a 1-channel image (copied / repeated).
        num_output_channels: 1 or 3.

    Returns:
        (H, W, num_output_channels) uint8 ((H, W) for a 2-D 1-channel input and 1 output).

    Example:
        >>> g = rgb_to_grayscale(img, 3)
    """
    if num_output_channels not in (1, 3):
        raise ValueError(f"num_output_channels must be 1 or 3, got {num_output_channels}.")
    hwc, flat = _image(img, "rgb_to_grayscale", channels=(1, 3))
    if hwc.shape[2] == 1:
        if num_output_channels == 1:
            return img.copy()
        return np.repeat(hwc, 3, axis=2)
    out = np.empty(hwc.shape[:2] + (num_output_channels,), np.uint8)
    _colour.grayscale_into(hwc, out)
    return out


def autocontrast(img, *, inplace=False):
    """Stretch each channel to [0, 255] (torchvision ``autocontrast`` on uint8, float32 math).

    Example: ``autocontrast(img)``.
    """
    res, target = _point(img, "autocontrast", inplace)
    hist = _colour.histogram(target)
    C = target.shape[2]
    lut = np.empty((C, 256), np.uint8)
    v = np.arange(256, dtype=np.float32)
    for c in range(C):
        nz = np.flatnonzero(hist[c])
        lo, hi = np.float32(nz[0]), np.float32(nz[-1])
        if lo == hi:
            lo, inv_scale = np.float32(0.0), np.float32(1.0)
        else:
            inv_scale = (hi - lo) * np.float32(1.0 / 255)
        lut[c] = np.clip((v - lo) / inv_scale, 0, 255).astype(np.uint8)
    _colour.lut_(target, lut)
    return res


def equalize(img, *, inplace=False):
    """Histogram equalization per channel (torchvision ``equalize`` / PIL's LUT rule).

    Example: ``equalize(img)``.
    """
    res, target = _point(img, "equalize", inplace)
    hist = _colour.histogram(target)
    C = target.shape[2]
    n = target.shape[0] * target.shape[1]
    lut = np.empty((C, 256), np.uint8)
    ident = np.arange(256, dtype=np.uint8)
    for c in range(C):
        cum = np.cumsum(hist[c])
        last = int(np.argmax(cum))                 # first bin reaching the total
        step = (n - int(hist[c][last])) // 255
        if step == 0:
            lut[c] = ident
            continue
        lut[c, 0] = 0
        lut[c, 1:] = np.clip((cum[:-1] + step // 2) // step, 0, 255)
    _colour.lut_(target, lut)
    return res


def adjust_sharpness(img, sharpness_factor):
    """torchvision's uint8 ``adjust_sharpness``: blend with a 3x3 smoothing of the interior.

    Raises ValueError for a negative factor. Example: ``adjust_sharpness(img, 1.8)``.
    """
    hwc, flat = _image(img, "adjust_sharpness")
    res, dst = _hwc_out(None, hwc.shape[0], hwc.shape[1], hwc.shape[2], flat, "adjust_sharpness")
    _colour.sharpness_into(hwc, dst, float(sharpness_factor))
    return res


# ---------------------------------------------------------------------------------------------
# Centre and multi crops, channel permutation
# ---------------------------------------------------------------------------------------------

def _crop_size(output_size, what):
    if isinstance(output_size, (int, np.integer)) and not isinstance(output_size, bool):
        output_size = [int(output_size)]
    try:
        size = [_index(s, "output_size") for s in output_size]
    except TypeError:
        raise TypeError(f"{what}: size must be an int or a sequence of 1 or 2 ints, got "
                        f"{output_size!r}") from None
    if len(size) == 1:
        size = size * 2
    if len(size) != 2:
        raise ValueError(f"{what}: size must have 1 or 2 elements, got {output_size!r}")
    if size[0] <= 0 or size[1] <= 0:
        raise ValueError(f"{what}: size must be positive, got {tuple(size)}")
    return size[0], size[1]


def _center_padding(image_size, output_size):
    """torchvision's ``center_crop`` padding: ``[left, top, right, bottom]`` zeros added first
    when the crop ``(h, w)`` is larger than the image ``(H, W)`` (all 0 otherwise)."""
    (h, w), (ch, cw) = image_size, output_size
    return [(cw - w) // 2 if cw > w else 0, (ch - h) // 2 if ch > h else 0,
            (cw - w + 1) // 2 if cw > w else 0, (ch - h + 1) // 2 if ch > h else 0]


def center_crop(img, output_size):
    """Crop the centre, as torchvision's ``center_crop``: offsets
    ``int(round((H - h) / 2.0))``; an image smaller than the crop is zero-padded first.

    Args:
        img: (H, W[, C]) uint8.
        output_size: ``(h, w)``, or an int (or ``[int]``) for a square.

    Returns:
        A new (h, w[, C]) uint8 array (``img`` itself when it already has that size).

    Example:
        >>> middle = center_crop(img, 224)
    """
    hwc, _ = _image(img, "center_crop", channels=(1, 2, 3, 4))
    ch, cw = _crop_size(output_size, "center_crop")
    padding = _center_padding(hwc.shape[:2], (ch, cw))
    if any(padding):
        img = pad(img, padding)
    H, W = img.shape[:2]
    if (H, W) == (ch, cw):
        return img
    return crop(img, int(round((H - ch) / 2.0)), int(round((W - cw) / 2.0)), ch, cw)


def five_crop(img, size):
    """The four corners and the centre, as torchvision's ``five_crop``: a tuple
    ``(top_left, top_right, bottom_left, bottom_right, center)`` of new arrays.

    Raises:
        ValueError: the crop is larger than the image (as torchvision).

    Example:
        >>> tl, tr, bl, br, c = five_crop(img, 32)
    """
    hwc, _ = _image(img, "five_crop", channels=(1, 2, 3, 4))
    ch, cw = _crop_size(size, "five_crop")
    H, W = hwc.shape[:2]
    if ch > H or cw > W:
        raise ValueError(f"Requested crop size {(ch, cw)} is bigger than input size {(H, W)}")
    return (crop(img, 0, 0, ch, cw), crop(img, 0, W - cw, ch, cw), crop(img, H - ch, 0, ch, cw),
            crop(img, H - ch, W - cw, ch, cw), center_crop(img, (ch, cw)))


_vertical_flip = vertical_flip  # ten_crop's argument of that name hides the function


def ten_crop(img, size, vertical_flip=False):
    """:func:`five_crop` of the image, then of its horizontally (or vertically) flipped copy,
    as torchvision's ``ten_crop``: a tuple of 10 arrays.

    Example:
        >>> crops = ten_crop(img, 32, vertical_flip=True)
    """
    flipped = _vertical_flip(img) if vertical_flip else horizontal_flip(img)
    return five_crop(img, size) + five_crop(flipped, size)


def permute_channels(img, permutation):
    """Reorder the channels: output channel ``i`` is input channel ``permutation[i]``, as
    torchvision's ``permute_channels`` (a new array).

    Raises:
        ValueError: ``len(permutation)`` is not the number of channels.

    Example:
        >>> bgr = permute_channels(img, [2, 1, 0])
    """
    hwc, flat = _image(img, "permute_channels", channels=(1, 2, 3, 4))
    permutation = [_index(p, "permutation") for p in permutation]
    if len(permutation) != hwc.shape[2]:
        raise ValueError(f"Length of permutation does not match number of channels: "
                         f"{len(permutation)} != {hwc.shape[2]}")
    out = np.ascontiguousarray(hwc[:, :, permutation])
    return out[:, :, 0] if flat else out


def grayscale_to_rgb(img):
    """A 1-channel image as 3 equal channels (a new (H, W, 3) array); an image with 3 or more
    channels unchanged, as torchvision's ``grayscale_to_rgb``.

    Example:
        >>> grayscale_to_rgb(np.zeros((4, 5), np.uint8)).shape
        (4, 5, 3)
    """
    hwc, _ = _image(img, "grayscale_to_rgb", channels=(1, 2, 3, 4))
    if hwc.shape[2] >= 3:
        return img
    return np.ascontiguousarray(np.repeat(hwc[:, :, :1], 3, axis=2))
