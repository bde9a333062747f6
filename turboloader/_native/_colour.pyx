"""Image kernels on 8-bit interleaved HWC buffers: resample, crop, flip, colour, normalize.

Each ``def`` here validates with the GIL held, runs one ``noexcept nogil`` kernel that returns a
status, and raises outside the ``nogil`` block. The C-level API (``_imgproc.pxd``) is what the
fused decode path cimports. Resampling reproduces Pillow's ``Resample.c`` (8 bpc fixed point,
horizontal pass first), so results match Pillow and torchvision's antialiased uint8 resize
within 1; the colour kernels follow torchvision v2's uint8 tensor arithmetic in float32.
"""
from libc.math cimport ceil, isfinite
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

NEAREST = FILTER_NEAREST
BILINEAR = FILTER_BILINEAR
BICUBIC = FILTER_BICUBIC

cdef enum:
    PRECISION_BITS = 22            # 32 - 8 - 2, Pillow's 8 bpc coefficient precision
    MAX_SIDE = 1 << 24             # keeps every index and coefficient count in int32

cdef int32_t HALF = 1 << (PRECISION_BITS - 1)


# ---------------------------------------------------------------------------------------------
# Resampling (Pillow's algorithm)
# ---------------------------------------------------------------------------------------------

cdef inline double _filter_support(int f) noexcept nogil:
    if f == FILTER_BICUBIC:
        return 2.0
    return 1.0


cdef inline double _filter_eval(int f, double x) noexcept nogil:
    # Pillow's bilinear_filter / bicubic_filter (a = -0.5).
    if x < 0.0:
        x = -x
    if f == FILTER_BICUBIC:
        if x < 1.0:
            return ((-0.5 + 2.0) * x - (-0.5 + 3.0)) * x * x + 1.0
        if x < 2.0:
            return (((x - 5.0) * x + 8.0) * x - 4.0) * -0.5
        return 0.0
    if x < 1.0:
        return 1.0 - x
    return 0.0


cdef inline uint8_t _clip8(int32_t s) noexcept nogil:
    s = s >> PRECISION_BITS
    if s < 0:
        return 0
    if s > 255:
        return 255
    return <uint8_t>s


cdef int _precompute(Py_ssize_t in_size, float in0, float in1, Py_ssize_t out_size, int filt,
                     Py_ssize_t* ksize_out, int32_t** kk_out, int32_t** bounds_out) except -1:
    # Pillow's precompute_coeffs + normalize_coeffs_8bpc. GIL held (allocates). The box is
    # float32 as in Pillow (its `box` is parsed as C floats), so fractional boxes match exactly.
    cdef double scale = <double>(in1 - in0) / out_size
    cdef double filterscale = scale if scale > 1.0 else 1.0
    cdef double support = _filter_support(filt) * filterscale
    cdef double ss = 1.0 / filterscale
    cdef Py_ssize_t ksize = <Py_ssize_t>ceil(support) * 2 + 1
    cdef double center, ww, w
    cdef Py_ssize_t xx, x, xmin, xmax
    cdef double* row = <double*>malloc(ksize * sizeof(double))
    cdef int32_t* kk = <int32_t*>malloc(out_size * ksize * sizeof(int32_t))
    cdef int32_t* bounds = <int32_t*>malloc(out_size * 2 * sizeof(int32_t))
    if row == NULL or kk == NULL or bounds == NULL:
        free(row)
        free(kk)
        free(bounds)
        raise MemoryError("cannot allocate resampling coefficients")
    for xx in range(out_size):
        center = in0 + (xx + 0.5) * scale
        xmin = <Py_ssize_t>(center - support + 0.5)   # C truncation, as Pillow
        if xmin < 0:
            xmin = 0
        xmax = <Py_ssize_t>(center + support + 0.5)
        if xmax > in_size:
            xmax = in_size
        xmax -= xmin
        if xmax > ksize:    # cannot happen for a valid box; keeps the tables in bounds
            xmax = ksize
        if xmax < 0:
            xmax = 0
        ww = 0.0
        for x in range(xmax):
            w = _filter_eval(filt, (x + xmin - center + 0.5) * ss)
            row[x] = w
            ww += w
        for x in range(xmax):
            if ww != 0.0:
                row[x] /= ww
            if row[x] < 0:
                kk[xx * ksize + x] = <int32_t>(-0.5 + row[x] * (1 << PRECISION_BITS))
            else:
                kk[xx * ksize + x] = <int32_t>(0.5 + row[x] * (1 << PRECISION_BITS))
        for x in range(xmax, ksize):
            kk[xx * ksize + x] = 0
        bounds[2 * xx] = <int32_t>xmin
        bounds[2 * xx + 1] = <int32_t>xmax
    free(row)
    ksize_out[0] = ksize
    kk_out[0] = kk
    bounds_out[0] = bounds
    return 0


cdef int resample_plan_init(ResamplePlan* p, Py_ssize_t in_h, Py_ssize_t in_w,
                            Py_ssize_t out_h, Py_ssize_t out_w, int channels,
                            double x0, double y0, double x1, double y1, int filter) except -1:
    """Validate and fill a resample plan (GIL held); see _imgproc.pxd."""
    cdef Py_ssize_t i, lo, hi, rowlen
    cdef float fx0, fx1, fy0, fy1
    cdef double a, pos
    memset(p, 0, sizeof(ResamplePlan))
    if in_h <= 0 or in_w <= 0 or out_h <= 0 or out_w <= 0:
        raise ValueError(f"resample sizes must be positive, got input {in_h}x{in_w}, "
                         f"output {out_h}x{out_w}")
    if in_h > MAX_SIDE or in_w > MAX_SIDE or out_h > MAX_SIDE or out_w > MAX_SIDE:
        raise ValueError(f"resample sizes must be at most {MAX_SIDE}, got input {in_h}x{in_w}, "
                         f"output {out_h}x{out_w}")
    if channels < 1 or channels > 4:
        raise ValueError(f"channels must be 1 to 4, got {channels}")
    if filter != FILTER_NEAREST and filter != FILTER_BILINEAR and filter != FILTER_BICUBIC:
        raise ValueError(f"unknown resampling filter {filter}")
    if not (isfinite(x0) and isfinite(y0) and isfinite(x1) and isfinite(y1)):
        raise ValueError(f"box ({x0}, {y0}, {x1}, {y1}) must be finite")
    fx0 = <float>x0
    fx1 = <float>x1
    fy0 = <float>y0
    fy1 = <float>y1
    if not (0.0 <= x0 < x1 <= in_w and 0.0 <= y0 < y1 <= in_h and fx0 < fx1 and fy0 < fy1):
        raise ValueError(f"box ({x0}, {y0}, {x1}, {y1}) must satisfy 0 <= x0 < x1 <= {in_w} "
                         f"and 0 <= y0 < y1 <= {in_h}")
    p.in_h = in_h
    p.in_w = in_w
    p.out_h = out_h
    p.out_w = out_w
    p.channels = channels
    p.filter = filter
    rowlen = out_w * channels
    try:
        if filter == FILTER_NEAREST:
            # Pillow's ImagingScaleAffine: float box, double accumulation of the sample centre.
            p.xin = <Py_ssize_t*>malloc(out_w * sizeof(Py_ssize_t))
            p.yin = <Py_ssize_t*>malloc(out_h * sizeof(Py_ssize_t))
            if p.xin == NULL or p.yin == NULL:
                raise MemoryError("cannot allocate resampling tables")
            a = <double>(fx1 - fx0) / out_w
            pos = <double>fx0 + a * 0.5
            for i in range(out_w):
                lo = -1 if pos < 0.0 else <Py_ssize_t>pos
                lo = 0 if lo < 0 else (in_w - 1 if lo >= in_w else lo)
                p.xin[i] = lo * channels
                pos += a
            a = <double>(fy1 - fy0) / out_h
            pos = <double>fy0 + a * 0.5
            for i in range(out_h):
                lo = -1 if pos < 0.0 else <Py_ssize_t>pos
                p.yin[i] = 0 if lo < 0 else (in_h - 1 if lo >= in_h else lo)
                pos += a
            return 0

        p.need_h = out_w != in_w or fx0 != 0.0 or fx1 != in_w
        p.need_v = out_h != in_h or fy0 != 0.0 or fy1 != in_h
        if p.need_h:
            _precompute(in_w, fx0, fx1, out_w, filter, &p.ksize_x, &p.kx, &p.bx)
        _precompute(in_h, fy0, fy1, out_h, filter, &p.ksize_y, &p.ky, &p.by)
        lo = in_h
        hi = 0
        for i in range(out_h):
            if p.by[2 * i] < lo:
                lo = p.by[2 * i]
            if p.by[2 * i] + p.by[2 * i + 1] > hi:
                hi = p.by[2 * i] + p.by[2 * i + 1]
        if hi <= lo:
            lo = 0
            hi = 1
        if p.need_h and p.need_v:
            # The horizontal pass only produces the source rows the vertical pass reads.
            p.y_first = lo
            p.y_rows = hi - lo
            for i in range(out_h):
                p.by[2 * i] -= <int32_t>lo
            p.tmp = <uint8_t*>malloc(p.y_rows * rowlen)
            if p.tmp == NULL:
                raise MemoryError("cannot allocate the resampling buffer")
        elif p.need_h:
            p.y_first = 0
            p.y_rows = in_h   # == out_h: the horizontal pass writes the output directly
        if p.need_v:
            p.acc = <int32_t*>malloc(rowlen * sizeof(int32_t))
            if p.acc == NULL:
                raise MemoryError("cannot allocate the resampling buffer")
    except BaseException:
        resample_plan_free(p)
        raise
    return 0


cdef void resample_plan_free(ResamplePlan* p) noexcept nogil:
    """Free a plan's buffers and zero it (idempotent)."""
    if p == NULL:
        return
    free(p.kx)
    free(p.bx)
    free(p.ky)
    free(p.by)
    free(p.tmp)
    free(p.acc)
    free(p.xin)
    free(p.yin)
    memset(p, 0, sizeof(ResamplePlan))


cdef void _hpass(const uint8_t* src, Py_ssize_t src_stride, Py_ssize_t nrows,
                 uint8_t* dst, Py_ssize_t dst_stride, Py_ssize_t out_w, int C,
                 const int32_t* kk, const int32_t* bounds, Py_ssize_t ksize) noexcept nogil:
    # Horizontal 8 bpc pass over nrows rows; bounds/kk come from _precompute (in range).
    cdef Py_ssize_t y, xx, x, n
    cdef int c
    cdef const uint8_t* srow
    cdef const uint8_t* sp
    cdef uint8_t* drow
    cdef const int32_t* k
    cdef int32_t s0, s1, s2, s3, w
    for y in range(nrows):
        srow = src + y * src_stride
        drow = dst + y * dst_stride
        if C == 3:
            for xx in range(out_w):
                k = kk + xx * ksize
                sp = srow + 3 * bounds[2 * xx]
                n = bounds[2 * xx + 1]
                s0 = HALF
                s1 = HALF
                s2 = HALF
                for x in range(n):
                    w = k[x]
                    s0 += sp[3 * x] * w
                    s1 += sp[3 * x + 1] * w
                    s2 += sp[3 * x + 2] * w
                drow[3 * xx] = _clip8(s0)
                drow[3 * xx + 1] = _clip8(s1)
                drow[3 * xx + 2] = _clip8(s2)
        elif C == 1:
            for xx in range(out_w):
                k = kk + xx * ksize
                sp = srow + bounds[2 * xx]
                n = bounds[2 * xx + 1]
                s0 = HALF
                for x in range(n):
                    s0 += sp[x] * k[x]
                drow[xx] = _clip8(s0)
        else:
            for xx in range(out_w):
                k = kk + xx * ksize
                sp = srow + C * bounds[2 * xx]
                n = bounds[2 * xx + 1]
                for c in range(C):
                    s0 = HALF
                    for x in range(n):
                        s0 += sp[C * x + c] * k[x]
                    drow[C * xx + c] = _clip8(s0)


cdef void _vpass(const uint8_t* src, Py_ssize_t src_stride, uint8_t* dst, Py_ssize_t dst_stride,
                 Py_ssize_t out_h, Py_ssize_t rowlen, const int32_t* kk, const int32_t* bounds,
                 Py_ssize_t ksize, int32_t* acc) noexcept nogil:
    # Vertical 8 bpc pass: whole output rows at a time so the inner loop is a contiguous
    # widening multiply-add the compiler vectorizes. acc holds rowlen int32.
    cdef Py_ssize_t yy, y, j, n
    cdef const uint8_t* srow
    cdef uint8_t* drow
    cdef const int32_t* k
    cdef int32_t w
    for yy in range(out_h):
        k = kk + yy * ksize
        n = bounds[2 * yy + 1]
        for j in range(rowlen):
            acc[j] = HALF
        for y in range(n):
            w = k[y]
            srow = src + (bounds[2 * yy] + y) * src_stride
            for j in range(rowlen):
                acc[j] += srow[j] * w
        drow = dst + yy * dst_stride
        for j in range(rowlen):
            drow[j] = _clip8(acc[j])


cdef void _nearest(const ResamplePlan* p, const uint8_t* src, Py_ssize_t src_stride,
                   uint8_t* dst, Py_ssize_t dst_stride) noexcept nogil:
    cdef Py_ssize_t yy, xx, o
    cdef int c, C = p.channels
    cdef const uint8_t* srow
    cdef uint8_t* drow
    for yy in range(p.out_h):
        srow = src + p.yin[yy] * src_stride
        drow = dst + yy * dst_stride
        if C == 3:
            for xx in range(p.out_w):
                o = p.xin[xx]
                drow[3 * xx] = srow[o]
                drow[3 * xx + 1] = srow[o + 1]
                drow[3 * xx + 2] = srow[o + 2]
        else:
            for xx in range(p.out_w):
                o = p.xin[xx]
                for c in range(C):
                    drow[C * xx + c] = srow[o + c]


cdef int resample_run(const ResamplePlan* p, const uint8_t* src, Py_ssize_t src_stride,
                      uint8_t* dst, Py_ssize_t dst_stride) noexcept nogil:
    """Run a plan on src into dst (no GIL); returns IMGPROC_OK or a negative status."""
    cdef Py_ssize_t y, rowlen
    if p == NULL or src == NULL or dst == NULL:
        return IMGPROC_EPLAN
    if p.in_h <= 0 or p.in_w <= 0 or p.out_h <= 0 or p.out_w <= 0:
        return IMGPROC_EPLAN
    if p.channels < 1 or p.channels > 4:
        return IMGPROC_EPLAN
    rowlen = p.out_w * p.channels
    if src_stride < p.in_w * p.channels or dst_stride < rowlen:
        return IMGPROC_ESTRIDE
    if p.filter == FILTER_NEAREST:
        if p.xin == NULL or p.yin == NULL:
            return IMGPROC_EPLAN
        _nearest(p, src, src_stride, dst, dst_stride)
        return IMGPROC_OK
    if p.ky == NULL or p.by == NULL:
        return IMGPROC_EPLAN
    if p.need_h and (p.kx == NULL or p.bx == NULL):
        return IMGPROC_EPLAN
    if p.need_v and (p.acc == NULL or (p.need_h and p.tmp == NULL)):
        return IMGPROC_EPLAN
    if p.need_h and p.need_v:
        if p.y_first < 0 or p.y_first + p.y_rows > p.in_h:
            return IMGPROC_EPLAN
        _hpass(src + p.y_first * src_stride, src_stride, p.y_rows, p.tmp, rowlen,
               p.out_w, p.channels, p.kx, p.bx, p.ksize_x)
        _vpass(p.tmp, rowlen, dst, dst_stride, p.out_h, rowlen, p.ky, p.by, p.ksize_y, p.acc)
    elif p.need_h:
        _hpass(src, src_stride, p.out_h, dst, dst_stride, p.out_w, p.channels,
               p.kx, p.bx, p.ksize_x)
    elif p.need_v:
        _vpass(src, src_stride, dst, dst_stride, p.out_h, rowlen, p.ky, p.by, p.ksize_y, p.acc)
    else:
        for y in range(p.out_h):
            memcpy(dst + y * dst_stride, src + y * src_stride, rowlen)
    return IMGPROC_OK


# ---------------------------------------------------------------------------------------------
# Crop, flip, layout
# ---------------------------------------------------------------------------------------------

cdef int crop_u8(const uint8_t* src, Py_ssize_t src_h, Py_ssize_t src_w, Py_ssize_t src_stride,
                 Py_ssize_t top, Py_ssize_t left, Py_ssize_t out_h, Py_ssize_t out_w,
                 int channels, uint8_t* dst, Py_ssize_t dst_stride) noexcept nogil:
    """Copy a window of src into dst (no GIL)."""
    cdef Py_ssize_t y, rowlen = out_w * channels
    if src == NULL or dst == NULL or channels < 1 or channels > 4:
        return IMGPROC_EBADSIZE
    if out_h <= 0 or out_w <= 0 or src_h <= 0 or src_w <= 0:
        return IMGPROC_EBADSIZE
    if (top < 0 or left < 0 or out_h > src_h or out_w > src_w
            or top > src_h - out_h or left > src_w - out_w):
        return IMGPROC_EBOUNDS
    if src_stride < src_w * channels or dst_stride < rowlen:
        return IMGPROC_ESTRIDE
    for y in range(out_h):
        memcpy(dst + y * dst_stride, src + (top + y) * src_stride + left * channels, rowlen)
    return IMGPROC_OK


cdef int hflip_u8(const uint8_t* src, Py_ssize_t h, Py_ssize_t w, Py_ssize_t src_stride,
                  int channels, uint8_t* dst, Py_ssize_t dst_stride) noexcept nogil:
    """Mirror src left-right into dst; src == dst (same stride) flips in place (no GIL)."""
    cdef Py_ssize_t y, x, r
    cdef int c, C = channels
    cdef const uint8_t* s
    cdef uint8_t* d
    cdef uint8_t t
    if src == NULL or dst == NULL or C < 1 or C > 4 or h <= 0 or w <= 0:
        return IMGPROC_EBADSIZE
    if src_stride < w * C or dst_stride < w * C:
        return IMGPROC_ESTRIDE
    if <const uint8_t*>dst == src:
        if src_stride != dst_stride:
            return IMGPROC_ESTRIDE
        for y in range(h):
            d = dst + y * dst_stride
            for x in range(w // 2):
                r = w - 1 - x
                for c in range(C):
                    t = d[C * x + c]
                    d[C * x + c] = d[C * r + c]
                    d[C * r + c] = t
        return IMGPROC_OK
    for y in range(h):
        s = src + y * src_stride
        d = dst + y * dst_stride
        if C == 3:
            for x in range(w):
                r = 3 * (w - 1 - x)
                d[3 * x] = s[r]
                d[3 * x + 1] = s[r + 1]
                d[3 * x + 2] = s[r + 2]
        elif C == 1:
            for x in range(w):
                d[x] = s[w - 1 - x]
        else:
            for x in range(w):
                for c in range(C):
                    d[C * x + c] = s[C * (w - 1 - x) + c]
    return IMGPROC_OK


cdef int normalize_chw_f32(const uint8_t* src, Py_ssize_t h, Py_ssize_t w, Py_ssize_t src_stride,
                           float* dst, const float* scale, const float* bias,
                           bint flip) noexcept nogil:
    """3-channel HWC uint8 -> CHW float32 planes, in * scale[c] + bias[c] (no GIL)."""
    cdef Py_ssize_t y, x, plane = h * w
    cdef const uint8_t* row
    cdef float* d0
    cdef float* d1
    cdef float* d2
    cdef float s0, s1, s2, b0, b1, b2
    if src == NULL or dst == NULL or scale == NULL or bias == NULL or h <= 0 or w <= 0:
        return IMGPROC_EBADSIZE
    if src_stride < 3 * w:
        return IMGPROC_ESTRIDE
    s0 = scale[0]
    s1 = scale[1]
    s2 = scale[2]
    b0 = bias[0]
    b1 = bias[1]
    b2 = bias[2]
    for y in range(h):
        row = src + y * src_stride
        d0 = dst + y * w
        d1 = d0 + plane
        d2 = d1 + plane
        if flip:
            # forward reads, mirrored writes: a backward-strided load defeats vectorization
            d0 += w - 1
            d1 += w - 1
            d2 += w - 1
            for x in range(w):
                d0[-x] = row[3 * x] * s0 + b0
                d1[-x] = row[3 * x + 1] * s1 + b1
                d2[-x] = row[3 * x + 2] * s2 + b2
        else:
            for x in range(w):
                d0[x] = row[3 * x] * s0 + b0
                d1[x] = row[3 * x + 1] * s1 + b1
                d2[x] = row[3 * x + 2] * s2 + b2
    return IMGPROC_OK


cdef int chw_u8(const uint8_t* src, Py_ssize_t h, Py_ssize_t w, Py_ssize_t src_stride,
                uint8_t* dst, bint flip) noexcept nogil:
    """3-channel HWC uint8 -> CHW uint8 planes (no GIL)."""
    cdef Py_ssize_t y, x, plane = h * w
    cdef const uint8_t* row
    cdef uint8_t* d0
    cdef uint8_t* d1
    cdef uint8_t* d2
    if src == NULL or dst == NULL or h <= 0 or w <= 0:
        return IMGPROC_EBADSIZE
    if src_stride < 3 * w:
        return IMGPROC_ESTRIDE
    for y in range(h):
        row = src + y * src_stride
        d0 = dst + y * w
        d1 = d0 + plane
        d2 = d1 + plane
        if flip:
            d0 += w - 1
            d1 += w - 1
            d2 += w - 1
            for x in range(w):
                d0[-x] = row[3 * x]
                d1[-x] = row[3 * x + 1]
                d2[-x] = row[3 * x + 2]
        else:
            for x in range(w):
                d0[x] = row[3 * x]
                d1[x] = row[3 * x + 1]
                d2[x] = row[3 * x + 2]
    return IMGPROC_OK


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


# ---------------------------------------------------------------------------------------------
# Python entry points: validate (GIL) -> kernel (nogil) -> raise
# ---------------------------------------------------------------------------------------------

cdef int _raise_status(int status, str what) except -1:
    if status == IMGPROC_EBOUNDS:
        raise ValueError(f"{what}: window outside the source image")
    if status == IMGPROC_ESTRIDE:
        raise ValueError(f"{what}: buffer rows too short or overlapping buffers")
    if status == IMGPROC_EARG:
        raise ValueError(f"{what}: factor out of range")
    if status == IMGPROC_EPLAN:
        raise RuntimeError(f"{what}: resample plan not initialised")
    raise ValueError(f"{what}: bad image size or channel count (status {status})")


cdef int _check_channels(Py_ssize_t c, str what, bint allow4=True) except -1:
    if c == 1 or c == 3 or (allow4 and (c == 2 or c == 4)):
        return 0
    raise ValueError(f"{what}: images must have 1 or 3 channels, got {c}")


def resample_into(const uint8_t[:, :, ::1] src not None, uint8_t[:, :, ::1] dst not None, /, *,
                  crop=None, box=None, int filter=FILTER_BILINEAR):
    """Resample ``src`` (H, W, C) uint8 into ``dst`` (h, w, C) uint8 with Pillow's algorithm.

    Args:
        src: C-contiguous (H, W, C) uint8 image, C in 1..4.
        dst: C-contiguous (h, w, C) uint8 output; its shape is the output size.
        crop: optional integer window ``(top, left, height, width)`` of ``src`` that is treated
            as the whole source (torchvision's crop-then-resize: taps never leave the window).
        box: optional float ``(x0, y0, x1, y1)`` region of the (cropped) source, as Pillow's
            ``Image.resize(box=...)``: taps near its edges may read pixels outside it.
        filter: ``NEAREST``, ``BILINEAR`` or ``BICUBIC`` (module constants).

    Raises:
        ValueError: zero sizes, mismatched channels, crop or box outside the source.

    Example:
        >>> out = np.empty((224, 224, 3), np.uint8)
        >>> resample_into(img, out, box=(10.5, 0.0, 300.0, 200.0), filter=BILINEAR)
    """
    cdef ResamplePlan plan
    cdef Py_ssize_t top = 0, left = 0, in_h = src.shape[0], in_w = src.shape[1]
    cdef Py_ssize_t C = src.shape[2]
    cdef double x0, y0, x1, y1
    cdef int st
    cdef const uint8_t* sp
    if dst.shape[2] != C:
        raise ValueError(f"resample: src has {C} channels but dst has {dst.shape[2]}")
    _check_channels(C, "resample")
    if crop is not None:
        top, left, in_h, in_w = crop
        if in_h <= 0 or in_w <= 0:
            raise ValueError(f"resample: crop size must be positive, got {in_h}x{in_w}")
        if (top < 0 or left < 0 or in_h > src.shape[0] or in_w > src.shape[1]
                or top > src.shape[0] - in_h or left > src.shape[1] - in_w):
            raise ValueError(f"resample: crop (top={top}, left={left}, height={in_h}, "
                             f"width={in_w}) outside the {src.shape[0]}x{src.shape[1]} image")
    if box is None:
        x0, y0, x1, y1 = 0.0, 0.0, in_w, in_h
    else:
        x0, y0, x1, y1 = box
    resample_plan_init(&plan, in_h, in_w, dst.shape[0], dst.shape[1], <int>C, x0, y0, x1, y1,
                       filter)
    try:
        sp = &src[top, left, 0]
        with nogil:
            st = resample_run(&plan, sp, src.strides[0], &dst[0, 0, 0], dst.strides[0])
    finally:
        resample_plan_free(&plan)
    if st != IMGPROC_OK:
        _raise_status(st, "resample")


def crop_into(const uint8_t[:, :, ::1] src not None, uint8_t[:, :, ::1] dst not None, /, *,
              Py_ssize_t top, Py_ssize_t left):
    """Copy the window of ``src`` at (``top``, ``left``) with ``dst``'s size into ``dst``.

    Raises ValueError when the window leaves ``src`` or the channel counts differ.
    Example: ``crop_into(img, np.empty((64, 64, 3), np.uint8), top=5, left=7)``.
    """
    cdef int st
    cdef Py_ssize_t C = src.shape[2]
    if dst.shape[2] != C:
        raise ValueError(f"crop: src has {C} channels but dst has {dst.shape[2]}")
    _check_channels(C, "crop")
    if dst.shape[0] <= 0 or dst.shape[1] <= 0 or src.shape[0] <= 0 or src.shape[1] <= 0:
        raise ValueError("crop: sizes must be positive")
    if (top < 0 or left < 0 or dst.shape[0] > src.shape[0] or dst.shape[1] > src.shape[1]
            or top > src.shape[0] - dst.shape[0] or left > src.shape[1] - dst.shape[1]):
        raise ValueError(f"crop: window (top={top}, left={left}, height={dst.shape[0]}, "
                         f"width={dst.shape[1]}) outside the {src.shape[0]}x{src.shape[1]} image")
    with nogil:
        st = crop_u8(&src[0, 0, 0], src.shape[0], src.shape[1], src.strides[0], top, left,
                     dst.shape[0], dst.shape[1], <int>C, &dst[0, 0, 0], dst.strides[0])
    if st != IMGPROC_OK:
        _raise_status(st, "crop")


cdef bint _overlap(const uint8_t* a, Py_ssize_t na, const uint8_t* b, Py_ssize_t nb) noexcept:
    return a < b + nb and b < a + na


def hflip_into(const uint8_t[:, :, ::1] src not None, uint8_t[:, :, ::1] dst not None, /):
    """Mirror ``src`` left-right into ``dst`` (same shape); ``dst`` may be ``src`` itself.

    Raises ValueError on shape mismatch or partially overlapping buffers.
    Example: ``hflip_into(img, img)`` flips in place.
    """
    cdef int st
    cdef Py_ssize_t H = src.shape[0], W = src.shape[1], C = src.shape[2]
    if dst.shape[0] != H or dst.shape[1] != W or dst.shape[2] != C:
        raise ValueError(f"hflip: dst shape {(dst.shape[0], dst.shape[1], dst.shape[2])} != src shape {(H, W, C)}")
    _check_channels(C, "hflip")
    if H <= 0 or W <= 0:
        raise ValueError("hflip: sizes must be positive")
    if (<const uint8_t*>&dst[0, 0, 0] != &src[0, 0, 0]
            and _overlap(&src[0, 0, 0], H * W * C, &dst[0, 0, 0], H * W * C)):
        raise ValueError("hflip: src and dst partially overlap")
    with nogil:
        st = hflip_u8(&src[0, 0, 0], H, W, src.strides[0], <int>C, &dst[0, 0, 0], dst.strides[0])
    if st != IMGPROC_OK:
        _raise_status(st, "hflip")


cdef int _check_chw(Py_ssize_t H, Py_ssize_t W, Py_ssize_t C, tuple dshape, str what) except -1:
    if C != 3:
        raise ValueError(f"{what}: expected a 3-channel image, got {C} channels")
    if H <= 0 or W <= 0:
        raise ValueError(f"{what}: sizes must be positive, got {H}x{W}")
    if dshape != (3, H, W):
        raise ValueError(f"{what}: out must have shape {(3, H, W)}, got {dshape}")
    return 0


def normalize_chw_into(const uint8_t[:, :, ::1] src not None, float[:, :, ::1] dst not None, /,
                       *, mean, std, bint flip=False):
    """``dst[c, y, x] = (src[y, x', c] / 255 - mean[c]) / std[c]`` with x' mirrored if ``flip``.

    Args:
        src: C-contiguous (H, W, 3) uint8 image.
        dst: C-contiguous (3, H, W) float32 output (e.g. one slot of a batch buffer).
        mean, std: three floats each; std must be non-zero.
        flip: read the source mirrored left-right (fused horizontal flip).

    Raises ValueError on shapes or non-finite/zero std.
    Example: ``normalize_chw_into(img, batch[i], mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))``
    """
    cdef float scale[3]
    cdef float bias[3]
    cdef int st, c
    cdef Py_ssize_t H = src.shape[0], W = src.shape[1]
    _check_chw(H, W, src.shape[2], (dst.shape[0], dst.shape[1], dst.shape[2]), "normalize")
    mean = tuple(float(m) for m in mean)
    std = tuple(float(s) for s in std)
    if len(mean) != 3 or len(std) != 3:
        raise ValueError(f"normalize: mean and std need 3 values, got {len(mean)} and {len(std)}")
    for c in range(3):
        if not (isfinite(mean[c]) and isfinite(std[c])) or std[c] == 0.0:
            raise ValueError(f"normalize: mean {mean} and std {std} must be finite, std non-zero")
        scale[c] = <float>(1.0 / (255.0 * std[c]))
        bias[c] = <float>(-mean[c] / std[c])
    with nogil:
        st = normalize_chw_f32(&src[0, 0, 0], H, W, src.strides[0], &dst[0, 0, 0], scale, bias,
                               flip)
    if st != IMGPROC_OK:
        _raise_status(st, "normalize")


def chw_into(const uint8_t[:, :, ::1] src not None, uint8_t[:, :, ::1] dst not None, /, *,
             bint flip=False):
    """Transpose (H, W, 3) uint8 ``src`` into (3, H, W) uint8 ``dst``, mirrored if ``flip``.

    Raises ValueError on shapes. Example: ``chw_into(img, batch[i], flip=True)``.
    """
    cdef int st
    cdef Py_ssize_t H = src.shape[0], W = src.shape[1]
    _check_chw(H, W, src.shape[2], (dst.shape[0], dst.shape[1], dst.shape[2]), "to_chw")
    with nogil:
        st = chw_u8(&src[0, 0, 0], H, W, src.strides[0], &dst[0, 0, 0], flip)
    if st != IMGPROC_OK:
        _raise_status(st, "to_chw")


cdef int _color_args(uint8_t[:, :, ::1] img, double factor, str what) except -1:
    _check_channels(img.shape[2], what, False)
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
        _raise_status(st, "adjust_brightness")


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
        _raise_status(st, "adjust_contrast")


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
        _raise_status(st, "adjust_saturation")


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
        _raise_status(st, "adjust_hue")


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
        _raise_status(st, "posterize")


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
        _raise_status(st, "solarize")


def invert_(uint8_t[:, :, ::1] img not None, /):
    """In place ``img = 255 - img``. Example: ``invert_(img)``."""
    cdef int st
    _plain_args(img, "invert")
    with nogil:
        st = invert_u8(&img[0, 0, 0], img.shape[0], img.shape[1], img.strides[0],
                       <int>img.shape[2])
    if st != IMGPROC_OK:
        _raise_status(st, "invert")


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
        _raise_status(st, "lut")


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
        _raise_status(st, "histogram")
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
        _raise_status(st, "grayscale")


def sharpness_into(const uint8_t[:, :, ::1] src not None, uint8_t[:, :, ::1] dst not None,
                   double factor, /):
    """torchvision's uint8 ``adjust_sharpness(src, factor)`` written into ``dst``.

    Raises ValueError on shapes, overlapping buffers or a negative factor.
    Example: ``sharpness_into(img, out, 1.8)``.
    """
    cdef int st
    cdef Py_ssize_t H = src.shape[0], W = src.shape[1], C = src.shape[2]
    _check_channels(C, "adjust_sharpness", False)
    if dst.shape[0] != H or dst.shape[1] != W or dst.shape[2] != C:
        raise ValueError("adjust_sharpness: dst must have the shape of src")
    if H <= 0 or W <= 0:
        raise ValueError("adjust_sharpness: sizes must be positive")
    if not isfinite(factor) or factor < 0:
        raise ValueError(f"sharpness_factor ({factor}) is not non-negative.")
    if _overlap(&src[0, 0, 0], H * src.strides[0], &dst[0, 0, 0], H * dst.strides[0]):
        raise ValueError("adjust_sharpness: src and dst overlap")
    with nogil:
        st = sharpness_u8(&src[0, 0, 0], H, W, src.strides[0], <int>C, &dst[0, 0, 0],
                          dst.strides[0], factor)
    if st != IMGPROC_OK:
        _raise_status(st, "adjust_sharpness")
