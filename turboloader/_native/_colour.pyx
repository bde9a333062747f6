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
# contrast blend) become 256-entry tables computed that way and applied per byte; saturation
# and the contrast mean use per-value tables for each product; hue runs branch-free on
# deinterleaved chunks so the float32 HSV round trip vectorizes.
# ---------------------------------------------------------------------------------------------

cdef enum:
    HUE_CHUNK = 128     # pixels per deinterleaved chunk (3 x 128 floats on the stack)

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


cdef inline uint8_t _clamp_trunc(float t) noexcept nogil:
    # uint8(clamp(t, 0, 255)) without branches (cvttss2si to 64 bits, integer cmovs): on
    # noisy pixels a branchy clamp mispredicts on most values. Valid for |t| < 2^63 (callers
    # guarantee it); NaN converts to INT64_MIN, i.e. 0.
    cdef int64_t i = <int64_t>t
    i = i if i > 0 else 0
    i = i if i < 255 else 255
    return <uint8_t>i


cdef inline uint8_t _clamp_trunc32(float t) noexcept nogil:
    # uint8(clamp(t, 0, 255)) for |t| < 2^31, branch-free and vectorizable (32-bit cvttps)
    cdef int32_t i = <int32_t>t
    i = i if i > 0 else 0
    i = i if i < 255 else 255
    return <uint8_t>i


cdef void _blend_lut(uint8_t* lut, float ratio, float other, float alpha) noexcept nogil:
    # lut[x] = uint8(clamp(fma(other, alpha, float(x) * ratio))): torchvision's _blend on uint8
    # with a constant second image (other = 0 for brightness's plain multiply).
    cdef int v
    cdef double prod = <double>other * <double>alpha
    for v in range(256):
        lut[v] = _sat_trunc(<float>(<double>(<float>v * ratio) + prod))


cdef void _apply_lut(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                     int channels, const uint8_t* lut) noexcept nogil:
    cdef Py_ssize_t y, j, n = w * channels
    cdef uint8_t* row
    for y in range(h):
        row = img + y * stride
        for j in range(n):
            row[j] = lut[row[j]]


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
    _apply_lut(img, h, w, stride, channels, lut)
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
    _apply_lut(img, h, w, stride, channels, lut)
    return IMGPROC_OK


cdef void _saturation_chunk(uint8_t* rb, uint8_t* gb, uint8_t* bb, Py_ssize_t n, float ratio,
                            float alpha) noexcept nogil:
    # torchvision's saturation blend on n deinterleaved pixels, in place, branch-free so it
    # vectorizes: luma = fma(b, wb, fma(g, wg, r * wr)) floored, then for each channel
    # uint8(clamp(fma(luma, alpha, x * ratio))), every fma emulated exactly in double.
    # |ratio| <= 1e6 (caller), so the sums stay inside the 32-bit clamp's range.
    cdef Py_ssize_t k
    cdef float t, gray
    cdef double ga
    for k in range(n):
        t = <float>rb[k] * GRAY_WR
        t = <float>(<double>t + <double>gb[k] * <double>GRAY_WG)
        t = <float>(<double>t + <double>bb[k] * <double>GRAY_WB)
        gray = <float><int32_t>t             # floor: the luma is >= 0
        ga = <double>gray * <double>alpha
        rb[k] = _clamp_trunc32(<float>(<double>(<float>rb[k] * ratio) + ga))
        gb[k] = _clamp_trunc32(<float>(<double>(<float>gb[k] * ratio) + ga))
        bb[k] = _clamp_trunc32(<float>(<double>(<float>bb[k] * ratio) + ga))


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
    cdef uint8_t rb[HUE_CHUNK]
    cdef uint8_t gb[HUE_CHUNK]
    cdef uint8_t bb[HUE_CHUNK]
    cdef Py_ssize_t x0, n, k
    cdef int st = _check_color(img, h, w, stride, channels, factor)
    if st != IMGPROC_OK or channels == 1:
        return st
    _gray_tables(&gt)
    for v in range(256):
        scaled[v] = <double>(<float>v * ratio)
        grayw[v] = <double>v * <double>alpha
    if factor > 1e6:    # sums may leave _clamp_trunc's range: the branchy clamp is exact
        for y in range(h):
            p = img + y * stride
            for x in range(w):
                gd = grayw[_gray_floor(&gt, p)]
                p[0] = _sat_trunc(<float>(scaled[p[0]] + gd))
                p[1] = _sat_trunc(<float>(scaled[p[1]] + gd))
                p[2] = _sat_trunc(<float>(scaled[p[2]] + gd))
                p += 3
        return IMGPROC_OK
    for y in range(h):
        x0 = 0
        while x0 < w:
            n = w - x0
            if n > HUE_CHUNK:
                n = HUE_CHUNK
            p = img + y * stride + 3 * x0
            for k in range(n):          # deinterleave
                rb[k] = p[3 * k]
                gb[k] = p[3 * k + 1]
                bb[k] = p[3 * k + 2]
            _saturation_chunk(rb, gb, bb, n, ratio, alpha)
            for k in range(n):
                p[3 * k] = rb[k]
                p[3 * k + 1] = gb[k]
                p[3 * k + 2] = bb[k]
            x0 += n
    return IMGPROC_OK
    for y in range(h):
        p = img + y * stride
        for x in range(w):
            gd = grayw[_gray_floor(&gt, p)]
            p[0] = _clamp_trunc(<float>(scaled[p[0]] + gd))
            p[1] = _clamp_trunc(<float>(scaled[p[1]] + gd))
            p[2] = _clamp_trunc(<float>(scaled[p[2]] + gd))
            p += 3
    return IMGPROC_OK


cdef extern from *:
    # torchvision's _rgb_to_hsv -> hue shift (fmod / remainder) -> _hsv_to_rgb on n pixels in
    # [0, 1], in place, with its float32 operations in its order; flat selects, no branches.
    # Plain C because GCC only vectorizes this loop when it may evaluate both sides of every
    # select, i.e. without -ftrapping-math (set per function: it changes no result, only
    # whether FP exception flags may be raised speculatively). No FP contraction either: a
    # -march build would otherwise fuse hh * (1/6) + 1, which torch rounds twice.
    # fmod(hh, 1) and remainder(hh, 1) are single exact subtractions on the ranges reached
    # ([5/6, 11/6] and [-0.5, 1.5)); h6 >= 0, so truncation is floor.
    """
    #if defined(__GNUC__) && !defined(__clang__)
    #define TL_NO_TRAPPING_MATH __attribute__((optimize("no-trapping-math", "fp-contract=off")))
    #else
    #define TL_NO_TRAPPING_MATH
    #endif
    #if defined(__GNUC__) || defined(__clang__)
    #define TL_RESTRICT __restrict__
    #else
    #define TL_RESTRICT
    #endif
    static TL_NO_TRAPPING_MATH void tl_hue_chunk(float* TL_RESTRICT rf, float* TL_RESTRICT gf,
                                                 float* TL_RESTRICT bf, Py_ssize_t n, float hue) {
        const float one = 1.0f, zero = 0.0f, six = 6.0f, sixth = (float)(1.0 / 6.0);
        for (Py_ssize_t k = 0; k < n; k++) {
            float r = rf[k], g = gf[k], b = bf[k];
            float maxc = r > g ? r : g; maxc = maxc > b ? maxc : b;
            float minc = r < g ? r : g; minc = minc < b ? minc : b;
            float cr = maxc - minc;
            float den = maxc == minc ? one : maxc;
            float s = cr / den;
            float crd = maxc == minc ? one : cr;
            float rc = (maxc - r) / crd, gc = (maxc - g) / crd, bc = (maxc - b) / crd;
            float hr = bc - gc, hg = (rc + 2.0f) - bc, hb = (gc + 4.0f) - rc;
            float hh = maxc == g ? hg : hb;
            hh = maxc == r ? hr : hh;
            hh = hh * sixth + one;
            hh = hh >= one ? hh - one : hh;
            hh = hh + hue;
            float hm = hh >= one ? hh - one : hh;
            hh = hh < zero ? hh + one : hm;
            float h6 = hh * six;
            float fi = (float)(int32_t)h6;
            float f = h6 - fi;
            fi = fi >= six ? zero : fi;
            float sxf = s * f, oms = one - s;
            float q = (one - sxf) * maxc, t = (sxf + oms) * maxc, pp = oms * maxc;
            q = q > zero ? q : zero; q = q < one ? q : one;
            t = t > zero ? t : zero; t = t < one ? t : one;
            pp = pp > zero ? pp : zero; pp = pp < one ? pp : one;
            float v = maxc;
            float ro = fi == 4.0f ? t : v;
            ro = fi == 2.0f ? pp : ro; ro = fi == 3.0f ? pp : ro;
            ro = fi == one ? q : ro;
            float go = fi == zero ? t : pp;
            go = fi == one ? v : go; go = fi == 2.0f ? v : go;
            go = fi == 3.0f ? q : go;
            float bo = fi == 5.0f ? q : v;
            bo = fi == 2.0f ? t : bo;
            bo = fi < 1.5f ? pp : bo;
            rf[k] = ro; gf[k] = go; bf[k] = bo;
        }
    }
    """
    void tl_hue_chunk(float* rf, float* gf, float* bf, Py_ssize_t n, float hue) noexcept nogil


cdef int adjust_hue_u8(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                       int channels, double factor) noexcept nogil:
    """In-place hue rotation through torchvision's float32 HSV round trip (no GIL)."""
    cdef float rf[HUE_CHUNK]
    cdef float gf[HUE_CHUNK]
    cdef float bf[HUE_CHUNK]
    cdef float lut[256]
    cdef Py_ssize_t y, x0, k, n
    cdef uint8_t* p
    cdef float hue = <float>factor
    cdef float to_u8 = <float>(255.0 + 1.0 - 1e-3)
    cdef int v
    if img == NULL or h <= 0 or w <= 0 or (channels != 1 and channels != 3):
        return IMGPROC_EBADSIZE
    if stride < w * channels:
        return IMGPROC_ESTRIDE
    if not (-0.5 <= factor <= 0.5):
        return IMGPROC_EARG
    if channels == 1:
        return IMGPROC_OK
    for v in range(256):
        lut[v] = <float>v * <float>(1.0 / 255.0)
    for y in range(h):
        x0 = 0
        while x0 < w:
            n = w - x0
            if n > HUE_CHUNK:
                n = HUE_CHUNK
            p = img + y * stride + 3 * x0
            for k in range(n):
                rf[k] = lut[p[3 * k]]
                gf[k] = lut[p[3 * k + 1]]
                bf[k] = lut[p[3 * k + 2]]
            tl_hue_chunk(rf, gf, bf, n, hue)
            for k in range(n):          # outputs are in [0, 1]: the cast cannot overflow
                p[3 * k] = _clamp_trunc(rf[k] * to_u8)
                p[3 * k + 1] = _clamp_trunc(gf[k] * to_u8)
                p[3 * k + 2] = _clamp_trunc(bf[k] * to_u8)
            x0 += n
    return IMGPROC_OK


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
    cdef Py_ssize_t y, j, n = w * channels, C = channels
    cdef const uint8_t* r0
    cdef const uint8_t* r1
    cdef const uint8_t* r2
    cdef uint8_t* d
    cdef float a = <float>(1.0 / 13.0), b = <float>(5.0 / 13.0)
    cdef float alpha = <float>(1.0 - factor)
    cdef float s, x, blur, o
    cdef bint bounded
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
    bounded = factor <= 1e6
    for y in range(1, h - 1):
        r0 = src + (y - 1) * src_stride
        r1 = src + y * src_stride
        r2 = src + (y + 1) * src_stride
        d = dst + y * dst_stride
        for j in range(C, n - C):
            x = <float>r1[j]
            s = a * <float>r0[j - C] + a * <float>r0[j]
            s = s + a * <float>r0[j + C]
            s = s + a * <float>r1[j - C]
            s = s + b * x
            s = s + a * <float>r1[j + C]
            s = s + a * <float>r2[j - C]
            s = s + a * <float>r2[j]
            s = s + a * <float>r2[j + C]
            blur = _rne_f(s)
            # view.add_(blur - view, alpha=1 - factor): one fused multiply-add in torch
            o = <float>(<double>x + <double>alpha * <double>(blur - x))
            # |o| < 2^31 when factor <= 1e6: the branch-free clamp lets the loop vectorize
            d[j] = _clamp_trunc32(o) if bounded else _sat_trunc(o)
    return IMGPROC_OK


cdef inline float _rne_f(float v) noexcept nogil:
    # round half to even for |v| < 2^22 (nearbyintf is a libm call without SSE4.1)
    cdef float t = v + <float>12582912.0
    return t - <float>12582912.0


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
