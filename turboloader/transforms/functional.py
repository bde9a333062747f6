"""NumPy-facing image functionals: HWC uint8 arrays in, torchvision v2 semantics out.

Images are ``numpy.ndarray`` of dtype uint8, shape (H, W, C) with C = 3 (or 1), or (H, W),
C-contiguous. Every function validates its arguments here and hands the pixel loop to
``turboloader._native._imgproc``, which runs without the GIL.

Semantics follow torchvision v2 on uint8 tensors (resize and resized_crop with
``antialias=True``, the ColorJitter adjustments, normalize) and Pillow's ``Image.resize``
(``box``, NEAREST), within 1 grey level. torchvision is never imported at module import.
"""

import enum
import math
import operator

import numpy as np

from turboloader._native import _imgproc

__all__ = [
    "Interpolation",
    "adjust_brightness",
    "adjust_contrast",
    "adjust_hue",
    "adjust_saturation",
    "crop",
    "horizontal_flip",
    "resize",
    "resized_crop",
    "to_chw_normalized",
    "to_chw_uint8",
]


class Interpolation(enum.IntEnum):
    """Resampling filters. Values are the native filter codes.

    ``NEAREST`` is Pillow's (sample at each output pixel's centre, like torchvision's
    ``"nearest-exact"``); ``BILINEAR`` and ``BICUBIC`` (a = -0.5) are antialiased when
    downscaling, as Pillow and torchvision's ``antialias=True``.
    """

    NEAREST = _imgproc.NEAREST
    BILINEAR = _imgproc.BILINEAR
    BICUBIC = _imgproc.BICUBIC


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


def _output_size(size, height, width):
    """torchvision's rule: (h, w), or an int / [int] for the shorter edge."""
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        size = [int(size)]
    try:
        size = [_index(s, "size") for s in size]
    except TypeError:
        raise TypeError(f"size must be an int or a sequence of 1 or 2 ints, got {size!r}") from None
    if len(size) == 2:
        out_h, out_w = size
    elif len(size) == 1:
        short, long = (width, height) if width <= height else (height, width)
        new_short, new_long = size[0], int(size[0] * long / short)
        out_w, out_h = (new_short, new_long) if width <= height else (new_long, new_short)
    else:
        raise ValueError(f"size must have 1 or 2 elements, got {size!r}")
    if out_h <= 0 or out_w <= 0:
        raise ValueError(f"output size must be positive, got {out_h}x{out_w}")
    return out_h, out_w


def _hwc_out(out, out_h, out_w, channels, flat, what):
    shape = (out_h, out_w) if flat else (out_h, out_w, channels)
    res = _output(out, shape, np.uint8, what)
    return res, (res[:, :, None] if flat else res)


def resize(img, size, interpolation="bilinear", *, box=None, out=None):
    """Resize an HWC uint8 image, antialiased like Pillow and torchvision (``antialias=True``).

    Args:
        img: (H, W, C) or (H, W) uint8, C-contiguous.
        size: output ``(height, width)``, or an int (or ``[int]``) for the shorter edge with the
            aspect ratio kept (torchvision's rule).
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
    out_h, out_w = _output_size(size, ref_h, ref_w)
    res, dst = _hwc_out(out, out_h, out_w, hwc.shape[2], flat, "resize")
    _imgproc.resample_into(hwc, dst, box=box, filter=int(mode))
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
    _imgproc.resample_into(hwc, dst, crop=(top, left, height, width), filter=int(mode))
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
    _imgproc.crop_into(hwc, dst, top=top, left=left)
    return res


def horizontal_flip(img):
    """Return the image mirrored left-right (a new C-contiguous array).

    Example:
        >>> mirrored = horizontal_flip(img)
    """
    hwc, flat = _image(img, "horizontal_flip", channels=(1, 2, 3, 4))
    res, dst = _hwc_out(None, hwc.shape[0], hwc.shape[1], hwc.shape[2], flat, "horizontal_flip")
    _imgproc.hflip_into(hwc, dst)
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
    return _color(_imgproc.adjust_brightness_, img, brightness_factor, inplace,
                  "adjust_brightness")


def adjust_contrast(img, contrast_factor, *, inplace=False):
    """Blend with the mean of the (truncated) grayscale image, as torchvision v2 on uint8.

    Args:
        img: (H, W, 3|1) or (H, W) uint8.
        contrast_factor: >= 0; 0 gives a flat grey image, 1 the original.
        inplace: modify ``img`` instead of returning a copy.

    Raises ValueError for a negative factor. Example: ``adjust_contrast(img, 0.7)``.
    """
    return _color(_imgproc.adjust_contrast_, img, contrast_factor, inplace, "adjust_contrast")


def adjust_saturation(img, saturation_factor, *, inplace=False):
    """Blend each pixel with its (truncated) grayscale value, as torchvision v2 on uint8.

    Args:
        img: (H, W, 3|1) or (H, W) uint8 (1-channel images are returned unchanged).
        saturation_factor: >= 0; 0 gives grayscale, 1 the original.
        inplace: modify ``img`` instead of returning a copy.

    Raises ValueError for a negative factor. Example: ``adjust_saturation(img, 1.5)``.
    """
    return _color(_imgproc.adjust_saturation_, img, saturation_factor, inplace,
                  "adjust_saturation")


def adjust_hue(img, hue_factor, *, inplace=False):
    """Rotate the hue by ``hue_factor`` turns (HSV round trip), as torchvision v2 on uint8.

    Args:
        img: (H, W, 3|1) or (H, W) uint8 (1-channel images are returned unchanged).
        hue_factor: in [-0.5, 0.5].
        inplace: modify ``img`` instead of returning a copy.

    Raises ValueError outside [-0.5, 0.5]. Example: ``adjust_hue(img, -0.1)``.
    """
    return _color(_imgproc.adjust_hue_, img, hue_factor, inplace, "adjust_hue")


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
    _imgproc.normalize_chw_into(hwc, res, mean=mean, std=std, flip=bool(flip))
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
    _imgproc.chw_into(hwc, res, flip=bool(flip))
    return res
