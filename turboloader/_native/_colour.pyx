"""Colour and point-operation kernels on 8-bit interleaved HWC buffers: ColorJitter's
adjustments, AutoAugment's point operations, grayscale and sharpness.

Each ``def`` here validates with the GIL held, runs one ``noexcept nogil`` kernel that returns a
status, and raises outside the ``nogil`` block. The C-level API (``_colour.pxd``) is what the
fused decode path cimports. The kernels follow torchvision v2's uint8 tensor arithmetic in
float32.
"""
from libc.math cimport isfinite
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.string cimport memcpy

from turboloader._native._cpu cimport isa_level
from turboloader._native._common cimport (
    IMGPROC_EARG, IMGPROC_EBADSIZE, IMGPROC_ESTRIDE, IMGPROC_OK, check_channels, overlap,
    raise_status,
)


# ---------------------------------------------------------------------------------------------
# Colour (torchvision v2 uint8 semantics: float32 math, clamp, truncating cast)
#
# torch's CPU kernels compute ``a.add_(b, alpha=k)`` as one fused multiply-add (vec::fmadd),
# i.e. with a single float32 rounding. The kernels below reproduce that without FMA
# instructions: the product of two of these operands (8-bit integer x float32, or float32 x
# float32 of bounded exponent) and the sum are exact in double precision, so casting the double
# sum to float32 rounds once, exactly as the FMA does. Point operations (brightness, the
# contrast blend) become 256-entry tables computed that way and applied per byte; the contrast
# mean and grayscale (and saturation beyond factor 1e6) use per-value tables for each product
# (vectorized versions measured no faster); saturation, hue and sharpness run branch-free on
# deinterleaved chunks or rows (colour_kernels.c) so they vectorize, at every dispatch level.
# ---------------------------------------------------------------------------------------------

cdef extern from "colour_kernels.h" nogil:
    # The vectorizable loops, in C so that they are compiled once per ISA level (runtime
    # dispatch); the kernels below validate their arguments first.
    void tl_apply_lut(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                      int channels, const uint8_t* lut, int isa)
    void tl_saturation(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                       float ratio, float alpha, int isa)
    void tl_hue(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride, float hue,
                int isa)
    void tl_sharpness_interior(const uint8_t* src, Py_ssize_t h, Py_ssize_t w,
                               Py_ssize_t src_stride, int channels, uint8_t* dst,
                               Py_ssize_t dst_stride, float a, float b, float alpha,
                               int bounded, int isa)

cdef float GRAY_WR = <float>0.2989
cdef float GRAY_WG = <float>0.587
cdef float GRAY_WB = <float>0.114


cdef inline uint8_t _sat_trunc(float v) noexcept nogil:
    if v < 0.0:       # also maps NaN to 0 rather than invoking UB in the cast
        return 0
    if not (v <= 255.0):
        return 255 if v > 255.0 else 0
    return <uint8_t>v


cdef struct GrayTables:
    # torchvision's r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114) per channel value:
    # r's product rounded to float32 (a plain multiply), g's and b's kept exact for the FMA.
    double r[256]
    double g[256]
    double b[256]


cdef void _gray_tables(GrayTables* t) noexcept nogil:
    cdef int v
    for v in range(256):
        t.r[v] = <double>(<float>v * GRAY_WR)
        t.g[v] = <double>v * <double>GRAY_WG
        t.b[v] = <double>v * <double>GRAY_WB


cdef inline int32_t _gray_floor(const GrayTables* t, const uint8_t* px) noexcept nogil:
    # floor of the float32 luma; the luma is >= 0 so truncation is floor
    cdef float s = <float>(t.r[px[0]] + t.g[px[1]])
    s = <float>(<double>s + t.b[px[2]])
    return <int32_t>s


cdef void _blend_lut(uint8_t* lut, float ratio, float other, float alpha) noexcept nogil:
    # lut[x] = uint8(clamp(fma(other, alpha, float(x) * ratio))): torchvision's _blend on uint8
    # with a constant second image (other = 0 for brightness's plain multiply).
    cdef int v
    cdef double prod = <double>other * <double>alpha
    for v in range(256):
        lut[v] = _sat_trunc(<float>(<double>(<float>v * ratio) + prod))


cdef inline int _check_color(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                             int channels, double factor) noexcept nogil:
    if img == NULL or h <= 0 or w <= 0 or (channels != 1 and channels != 3):
        return IMGPROC_EBADSIZE
    if stride < w * channels:
        return IMGPROC_ESTRIDE
    if not isfinite(factor) or factor < 0.0:
        return IMGPROC_EARG
    return IMGPROC_OK


cdef int adjust_brightness_u8(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                              int channels, double factor) noexcept nogil:
    """In-place brightness: uint8(clamp(x * factor)) via a 256-entry table (no GIL)."""
    cdef uint8_t lut[256]
    cdef int st = _check_color(img, h, w, stride, channels, factor)
    if st != IMGPROC_OK:
        return st
    _blend_lut(lut, <float>factor, <float>0.0, <float>0.0)
    tl_apply_lut(img, h, w, stride, channels, lut, isa_level())
    return IMGPROC_OK


cdef int adjust_contrast_u8(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                            int channels, double factor) noexcept nogil:
    """In-place contrast: blend with the mean of the floored grayscale (no GIL)."""
    cdef GrayTables gt
    cdef uint8_t lut[256]
    cdef Py_ssize_t y, x, n = w * channels
    cdef int64_t total = 0
    cdef int64_t t0, t1
    cdef const uint8_t* row
    cdef float mean
    cdef int st = _check_color(img, h, w, stride, channels, factor)
    if st != IMGPROC_OK:
        return st
    if channels == 3:
        _gray_tables(&gt)
        for y in range(h):
            row = img + y * stride
            t0 = 0
            t1 = 0
            x = 0
            while x + 1 < w:     # two independent sums shorten the dependency chain
                t0 += _gray_floor(&gt, row + 3 * x)
                t1 += _gray_floor(&gt, row + 3 * x + 3)
                x += 2
            if x < w:
                t0 += _gray_floor(&gt, row + 3 * x)
            total += t0 + t1
    else:
        for y in range(h):
            row = img + y * stride
            t0 = 0
            for x in range(n):
                t0 += row[x]
            total += t0
    mean = <float>(<double>total / (<double>h * <double>w))
    _blend_lut(lut, <float>factor, mean, <float>(1.0 - factor))
    tl_apply_lut(img, h, w, stride, channels, lut, isa_level())
    return IMGPROC_OK


cdef int adjust_saturation_u8(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                              int channels, double factor) noexcept nogil:
    """In-place saturation: blend each pixel with its floored grayscale (no GIL)."""
    cdef GrayTables gt
    cdef double scaled[256]     # float32(x * ratio), widened
    cdef double grayw[256]      # gray * alpha, exact
    cdef Py_ssize_t y, x
    cdef int v
    cdef uint8_t* p
    cdef double gd
    cdef float ratio = <float>factor, alpha = <float>(1.0 - factor)
    cdef int st = _check_color(img, h, w, stride, channels, factor)
    if st != IMGPROC_OK or channels == 1:
        return st
    if factor <= 1e6:   # the sums stay inside the vectorized 32-bit clamp's range
        tl_saturation(img, h, w, stride, ratio, alpha, isa_level())
        return IMGPROC_OK
    _gray_tables(&gt)   # beyond it, the branchy clamp through exact per-value tables
    for v in range(256):
        scaled[v] = <double>(<float>v * ratio)
        grayw[v] = <double>v * <double>alpha
    for y in range(h):
        p = img + y * stride
        for x in range(w):
            gd = grayw[_gray_floor(&gt, p)]
            p[0] = _sat_trunc(<float>(scaled[p[0]] + gd))
            p[1] = _sat_trunc(<float>(scaled[p[1]] + gd))
            p[2] = _sat_trunc(<float>(scaled[p[2]] + gd))
            p += 3
    return IMGPROC_OK


cdef int adjust_hue_u8(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                       int channels, double factor) noexcept nogil:
    """In-place hue rotation through torchvision's float32 HSV round trip (no GIL)."""
    if img == NULL or h <= 0 or w <= 0 or (channels != 1 and channels != 3):
        return IMGPROC_EBADSIZE
    if stride < w * channels:
        return IMGPROC_ESTRIDE
    if not (-0.5 <= factor <= 0.5):
        return IMGPROC_EARG
    if channels == 1:
        return IMGPROC_OK
    tl_hue(img, h, w, stride, <float>factor, isa_level())
    return IMGPROC_OK


# ---------------------------------------------------------------------------------------------
# Python entry points of the colour adjustments: validate (GIL) -> kernel (nogil) -> raise
# ---------------------------------------------------------------------------------------------

cdef int _color_args(uint8_t[:, :, ::1] img, double factor, str what) except -1:
    check_channels(img.shape[2], what, False)
    if img.shape[0] <= 0 or img.shape[1] <= 0:
        raise ValueError(f"{what}: sizes must be positive")
    if not isfinite(factor):
        raise ValueError(f"{what}: factor must be finite, got {factor}")
    return 0


def adjust_brightness_(uint8_t[:, :, ::1] img not None, double factor, /):
    """In place: ``img = uint8(clamp(img * factor, 0, 255))`` (torchvision v2 uint8 semantics).

    Raises ValueError if ``factor`` < 0. Example: ``adjust_brightness_(img, 1.2)``.
    """
    cdef int st
    _color_args(img, factor, "adjust_brightness")
    if factor < 0:
        raise ValueError(f"brightness_factor ({factor}) is not non-negative.")
    with nogil:
        st = adjust_brightness_u8(&img[0, 0, 0], img.shape[0], img.shape[1], img.strides[0],
                                  <int>img.shape[2], factor)
    if st != IMGPROC_OK:
        raise_status(st, "adjust_brightness")


def adjust_contrast_(uint8_t[:, :, ::1] img not None, double factor, /):
    """In place: blend with the mean of the floored grayscale (torchvision v2 uint8 semantics).

    Raises ValueError if ``factor`` < 0. Example: ``adjust_contrast_(img, 0.8)``.
    """
    cdef int st
    _color_args(img, factor, "adjust_contrast")
    if factor < 0:
        raise ValueError(f"contrast_factor ({factor}) is not non-negative.")
    with nogil:
        st = adjust_contrast_u8(&img[0, 0, 0], img.shape[0], img.shape[1], img.strides[0],
                                <int>img.shape[2], factor)
    if st != IMGPROC_OK:
        raise_status(st, "adjust_contrast")


def adjust_saturation_(uint8_t[:, :, ::1] img not None, double factor, /):
    """In place: blend each pixel with its floored grayscale (torchvision v2 uint8 semantics).

    1-channel images are left unchanged. Raises ValueError if ``factor`` < 0.
    Example: ``adjust_saturation_(img, 1.5)``.
    """
    cdef int st
    _color_args(img, factor, "adjust_saturation")
    if factor < 0:
        raise ValueError(f"saturation_factor ({factor}) is not non-negative.")
    with nogil:
        st = adjust_saturation_u8(&img[0, 0, 0], img.shape[0], img.shape[1], img.strides[0],
                                  <int>img.shape[2], factor)
    if st != IMGPROC_OK:
        raise_status(st, "adjust_saturation")


def adjust_hue_(uint8_t[:, :, ::1] img not None, double factor, /):
    """In place: rotate hue by ``factor`` turns through torchvision v2's float32 HSV round trip.

    1-channel images are left unchanged. Raises ValueError unless -0.5 <= factor <= 0.5.
    Example: ``adjust_hue_(img, 0.1)``.
    """
    cdef int st
    _color_args(img, factor, "adjust_hue")
    if not (-0.5 <= factor <= 0.5):
        raise ValueError(f"hue_factor ({factor}) is not in [-0.5, 0.5].")
    with nogil:
        st = adjust_hue_u8(&img[0, 0, 0], img.shape[0], img.shape[1], img.strides[0],
                           <int>img.shape[2], factor)
    if st != IMGPROC_OK:
        raise_status(st, "adjust_hue")


# ---------------------------------------------------------------------------------------------
# Point operations (AutoAugment's colour ops), torchvision v2 uint8 semantics
# ---------------------------------------------------------------------------------------------

cdef inline int _check_plain(const uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                             int channels) noexcept nogil:
    if img == NULL or h <= 0 or w <= 0 or channels < 1 or channels > 4:
        return IMGPROC_EBADSIZE
    if stride < w * channels:
        return IMGPROC_ESTRIDE
    return IMGPROC_OK


cdef int posterize_u8(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                      int channels, int bits) noexcept nogil:
    """In place ``x & mask`` keeping the top ``bits`` bits (no GIL; vectorizes)."""
    cdef Py_ssize_t y, j, n = w * channels
    cdef uint8_t* row
    cdef uint8_t mask
    cdef int st = _check_plain(img, h, w, stride, channels)
    if st != IMGPROC_OK:
        return st
    if bits < 0 or bits > 8:
        return IMGPROC_EARG
    mask = <uint8_t>(((1 << bits) - 1) << (8 - bits))
    for y in range(h):
        row = img + y * stride
        for j in range(n):
            row[j] = row[j] & mask
    return IMGPROC_OK


cdef int solarize_u8(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                     int channels, int threshold) noexcept nogil:
    """In place ``x >= threshold ? 255 - x : x`` for an integer threshold in [0, 256] (no GIL)."""
    cdef Py_ssize_t y, j, n = w * channels
    cdef uint8_t* row
    cdef uint8_t v, t
    cdef int st = _check_plain(img, h, w, stride, channels)
    if st != IMGPROC_OK:
        return st
    if threshold < 0 or threshold > 256:
        return IMGPROC_EARG
    if threshold == 256:
        return IMGPROC_OK
    t = <uint8_t>threshold
    for y in range(h):
        row = img + y * stride
        for j in range(n):
            v = row[j]
            row[j] = (255 - v) if v >= t else v
    return IMGPROC_OK


cdef int invert_u8(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                   int channels) noexcept nogil:
    """In place ``255 - x`` (no GIL; vectorizes)."""
    cdef Py_ssize_t y, j, n = w * channels
    cdef uint8_t* row
    cdef int st = _check_plain(img, h, w, stride, channels)
    if st != IMGPROC_OK:
        return st
    for y in range(h):
        row = img + y * stride
        for j in range(n):
            row[j] = 255 - row[j]
    return IMGPROC_OK


cdef int lut_u8(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                int channels, const uint8_t* lut) noexcept nogil:
    """In place per-channel table lookup; ``lut`` holds ``channels * 256`` bytes (no GIL)."""
    cdef Py_ssize_t y, x
    cdef uint8_t* row
    cdef int st = _check_plain(img, h, w, stride, channels)
    if st != IMGPROC_OK:
        return st
    if lut == NULL:
        return IMGPROC_EARG
    for y in range(h):
        row = img + y * stride
        if channels == 3:
            for x in range(w):
                row[3 * x] = lut[row[3 * x]]
                row[3 * x + 1] = lut[256 + row[3 * x + 1]]
                row[3 * x + 2] = lut[512 + row[3 * x + 2]]
        elif channels == 1:
            for x in range(w):
                row[x] = lut[row[x]]
        else:
            for x in range(w * channels):
                row[x] = lut[(x % channels) * 256 + row[x]]
    return IMGPROC_OK


cdef int histogram_u8(const uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                      int channels, int64_t* hist) noexcept nogil:
    """Add per-channel value counts to ``hist`` (``channels * 256`` int64; no GIL)."""
    cdef Py_ssize_t y, x
    cdef const uint8_t* row
    cdef int st = _check_plain(img, h, w, stride, channels)
    if st != IMGPROC_OK:
        return st
    if hist == NULL:
        return IMGPROC_EARG
    for y in range(h):
        row = img + y * stride
        if channels == 3:
            for x in range(w):
                hist[row[3 * x]] += 1
                hist[256 + row[3 * x + 1]] += 1
                hist[512 + row[3 * x + 2]] += 1
        else:
            for x in range(w * channels):
                hist[(x % channels) * 256 + row[x]] += 1
    return IMGPROC_OK


cdef int grayscale_u8(const uint8_t* src, Py_ssize_t h, Py_ssize_t w, Py_ssize_t src_stride,
                      uint8_t* dst, Py_ssize_t dst_stride, int out_channels) noexcept nogil:
    """3-channel ``src`` -> 1 or 3 channel ``dst``: torchvision's float32 luma, truncated."""
    cdef GrayTables gt
    cdef Py_ssize_t y, x
    cdef const uint8_t* row
    cdef uint8_t* drow
    cdef uint8_t v
    if src == NULL or dst == NULL or h <= 0 or w <= 0 or (out_channels != 1 and out_channels != 3):
        return IMGPROC_EBADSIZE
    if src_stride < 3 * w or dst_stride < out_channels * w:
        return IMGPROC_ESTRIDE
    _gray_tables(&gt)
    for y in range(h):
        row = src + y * src_stride
        drow = dst + y * dst_stride
        if out_channels == 1:
            for x in range(w):
                drow[x] = <uint8_t>_gray_floor(&gt, row + 3 * x)
        else:
            for x in range(w):
                v = <uint8_t>_gray_floor(&gt, row + 3 * x)
                drow[3 * x] = v
                drow[3 * x + 1] = v
                drow[3 * x + 2] = v
    return IMGPROC_OK


cdef int sharpness_u8(const uint8_t* src, Py_ssize_t h, Py_ssize_t w, Py_ssize_t src_stride,
                      int channels, uint8_t* dst, Py_ssize_t dst_stride,
                      double factor) noexcept nogil:
    """torchvision ``adjust_sharpness`` on uint8: src -> dst, borders copied (no GIL)."""
    cdef Py_ssize_t y, n = w * channels
    cdef float a = <float>(1.0 / 13.0), b = <float>(5.0 / 13.0)
    cdef float alpha = <float>(1.0 - factor)
    if src == NULL or dst == NULL or h <= 0 or w <= 0 or (channels != 1 and channels != 3):
        return IMGPROC_EBADSIZE
    if src_stride < n or dst_stride < n:
        return IMGPROC_ESTRIDE
    if not isfinite(factor) or factor < 0.0:
        return IMGPROC_EARG
    for y in range(h):
        memcpy(dst + y * dst_stride, src + y * src_stride, n)
    if h <= 2 or w <= 2:
        return IMGPROC_OK
    tl_sharpness_interior(src, h, w, src_stride, channels, dst, dst_stride, a, b, alpha,
                          factor <= 1e6, isa_level())
    return IMGPROC_OK


cdef int _plain_args(const uint8_t[:, :, ::1] img, str what) except -1:
    if img.shape[2] < 1 or img.shape[2] > 4:
        raise ValueError(f"{what}: images must have 1 to 4 channels, got {img.shape[2]}")
    if img.shape[0] <= 0 or img.shape[1] <= 0:
        raise ValueError(f"{what}: sizes must be positive")
    return 0


def posterize_(uint8_t[:, :, ::1] img not None, int bits, /):
    """In place: keep the top ``bits`` (0..8) bits of every value (torchvision ``posterize``).

    Raises ValueError for bits outside 0..8. Example: ``posterize_(img, 4)``.
    """
    cdef int st
    _plain_args(img, "posterize")
    if bits < 0 or bits > 8:
        raise ValueError(f"posterize: bits must be in [0, 8], got {bits}")
    with nogil:
        st = posterize_u8(&img[0, 0, 0], img.shape[0], img.shape[1], img.strides[0],
                          <int>img.shape[2], bits)
    if st != IMGPROC_OK:
        raise_status(st, "posterize")


def solarize_(uint8_t[:, :, ::1] img not None, int threshold, /):
    """In place: invert values ``>= threshold`` (an integer in [0, 256]; 256 changes nothing).

    Raises ValueError outside [0, 256]. Example: ``solarize_(img, 128)``.
    """
    cdef int st
    _plain_args(img, "solarize")
    if threshold < 0 or threshold > 256:
        raise ValueError(f"solarize: threshold must be in [0, 256], got {threshold}")
    with nogil:
        st = solarize_u8(&img[0, 0, 0], img.shape[0], img.shape[1], img.strides[0],
                         <int>img.shape[2], threshold)
    if st != IMGPROC_OK:
        raise_status(st, "solarize")


def invert_(uint8_t[:, :, ::1] img not None, /):
    """In place ``img = 255 - img``. Example: ``invert_(img)``."""
    cdef int st
    _plain_args(img, "invert")
    with nogil:
        st = invert_u8(&img[0, 0, 0], img.shape[0], img.shape[1], img.strides[0],
                       <int>img.shape[2])
    if st != IMGPROC_OK:
        raise_status(st, "invert")


def lut_(uint8_t[:, :, ::1] img not None, const uint8_t[:, ::1] lut not None, /):
    """In place per-channel lookup: ``img[..., c] = lut[c][img[..., c]]``; lut is (C, 256).

    Raises ValueError on a lut of the wrong shape. Example: ``lut_(img, np.tile(np.arange(256, dtype=np.uint8)[::-1], (3, 1)))``.
    """
    cdef int st
    _plain_args(img, "lut")
    if lut.shape[0] != img.shape[2] or lut.shape[1] != 256:
        raise ValueError(f"lut: table must have shape ({img.shape[2]}, 256), got "
                         f"{(lut.shape[0], lut.shape[1])}")
    with nogil:
        st = lut_u8(&img[0, 0, 0], img.shape[0], img.shape[1], img.strides[0],
                    <int>img.shape[2], &lut[0, 0])
    if st != IMGPROC_OK:
        raise_status(st, "lut")


def histogram(const uint8_t[:, :, ::1] img not None, /):
    """Per-channel 256-bin histograms of ``img`` as a (C, 256) int64 array.

    Example: ``histogram(img)[0].sum() == img.shape[0] * img.shape[1]``.
    """
    import numpy as np
    cdef int st
    _plain_args(img, "histogram")
    hist = np.zeros((img.shape[2], 256), np.int64)
    cdef int64_t[:, ::1] hv = hist
    with nogil:
        st = histogram_u8(&img[0, 0, 0], img.shape[0], img.shape[1], img.strides[0],
                          <int>img.shape[2], &hv[0, 0])
    if st != IMGPROC_OK:
        raise_status(st, "histogram")
    return hist


def grayscale_into(const uint8_t[:, :, ::1] src not None, uint8_t[:, :, ::1] dst not None, /):
    """(H, W, 3) ``src`` -> (H, W, 1 or 3) ``dst``: torchvision's uint8 ``rgb_to_grayscale``.

    Raises ValueError on shapes. Example: ``grayscale_into(img, np.empty(img.shape[:2] + (1,), np.uint8))``.
    """
    cdef int st
    if src.shape[2] != 3:
        raise ValueError(f"grayscale: src must have 3 channels, got {src.shape[2]}")
    if dst.shape[0] != src.shape[0] or dst.shape[1] != src.shape[1] or dst.shape[2] not in (1, 3):
        raise ValueError("grayscale: dst must be (H, W, 1) or (H, W, 3) with src's H and W")
    if src.shape[0] <= 0 or src.shape[1] <= 0:
        raise ValueError("grayscale: sizes must be positive")
    with nogil:
        st = grayscale_u8(&src[0, 0, 0], src.shape[0], src.shape[1], src.strides[0],
                          &dst[0, 0, 0], dst.strides[0], <int>dst.shape[2])
    if st != IMGPROC_OK:
        raise_status(st, "grayscale")


def sharpness_into(const uint8_t[:, :, ::1] src not None, uint8_t[:, :, ::1] dst not None,
                   double factor, /):
    """torchvision's uint8 ``adjust_sharpness(src, factor)`` written into ``dst``.

    Raises ValueError on shapes, overlapping buffers or a negative factor.
    Example: ``sharpness_into(img, out, 1.8)``.
    """
    cdef int st
    cdef Py_ssize_t H = src.shape[0], W = src.shape[1], C = src.shape[2]
    check_channels(C, "adjust_sharpness", False)
    if dst.shape[0] != H or dst.shape[1] != W or dst.shape[2] != C:
        raise ValueError("adjust_sharpness: dst must have the shape of src")
    if H <= 0 or W <= 0:
        raise ValueError("adjust_sharpness: sizes must be positive")
    if not isfinite(factor) or factor < 0:
        raise ValueError(f"sharpness_factor ({factor}) is not non-negative.")
    if overlap(&src[0, 0, 0], H * src.strides[0], &dst[0, 0, 0], H * dst.strides[0]):
        raise ValueError("adjust_sharpness: src and dst overlap")
    with nogil:
        st = sharpness_u8(&src[0, 0, 0], H, W, src.strides[0], <int>C, &dst[0, 0, 0],
                          dst.strides[0], factor)
    if st != IMGPROC_OK:
        raise_status(st, "adjust_sharpness")
