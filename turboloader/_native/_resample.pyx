"""Resampling (Pillow's algorithm), crop and horizontal flip on 8-bit interleaved HWC buffers.

Each ``def`` here validates with the GIL held, runs one ``noexcept nogil`` kernel that returns a
status, and raises outside the ``nogil`` block. The C-level API (``_resample.pxd``) is what the
fused decode path cimports. Resampling reproduces Pillow's ``Resample.c`` (8 bpc fixed point,
horizontal pass first), so results match Pillow and torchvision's antialiased uint8 resize
within 1.
"""
from libc.math cimport ceil, isfinite
from libc.stdint cimport int32_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

from turboloader._native._cpu cimport isa_level
from turboloader._native._common cimport (
    IMGPROC_EARG, IMGPROC_EBADSIZE, IMGPROC_EBOUNDS, IMGPROC_EPLAN, IMGPROC_ESTRIDE, IMGPROC_OK,
    check_channels, overlap, raise_status,
)

NEAREST = FILTER_NEAREST
BILINEAR = FILTER_BILINEAR
BICUBIC = FILTER_BICUBIC

cdef extern from "resample_kernels.h" nogil:
    # The horizontal and vertical passes, in C so that they are compiled once per ISA level
    # (runtime dispatch); the plan below guarantees the bounds they rely on.
    void tl_resample_hpass(const uint8_t* src, Py_ssize_t src_stride, Py_ssize_t nrows,
                           uint8_t* dst, Py_ssize_t dst_stride, Py_ssize_t out_w,
                           Py_ssize_t in_w, int C, const int32_t* kk, const int32_t* bounds,
                           Py_ssize_t ksize, int isa)
    void tl_resample_vpass(const uint8_t* src, Py_ssize_t src_stride, uint8_t* dst,
                           Py_ssize_t dst_stride, Py_ssize_t out_h, Py_ssize_t rowlen,
                           const int32_t* kk, const int32_t* bounds, Py_ssize_t ksize,
                           int32_t* acc, int isa)
    int tl_resample_vpass_chw_f32(const uint8_t* src, Py_ssize_t src_stride, Py_ssize_t out_h,
                                  Py_ssize_t out_w, const int32_t* kk, const int32_t* bounds,
                                  Py_ssize_t ksize, float* dst, const float* scale,
                                  const float* bias, int flip, int isa)

cdef enum:
    PRECISION_BITS = 22            # 32 - 8 - 2, Pillow's 8 bpc coefficient precision
    MAX_SIDE = 1 << 24             # keeps every index and coefficient count in int32



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


cdef inline Py_ssize_t _ksize(float in0, float in1, Py_ssize_t out_size, int filt) noexcept nogil:
    # taps per output pixel (Pillow's precompute_coeffs)
    cdef double scale = <double>(in1 - in0) / out_size
    cdef double filterscale = scale if scale > 1.0 else 1.0
    return <Py_ssize_t>ceil(_filter_support(filt) * filterscale) * 2 + 1


cdef void _coeffs(Py_ssize_t in_size, float in0, float in1, Py_ssize_t out_size, int filt,
                  Py_ssize_t ksize, double* row, int32_t* kk, int32_t* bounds) noexcept nogil:
    # Pillow's precompute_coeffs + normalize_coeffs_8bpc into the caller's buffers (row:
    # ksize doubles; kk: out_size * ksize; bounds: out_size * 2; ksize from _ksize). The box
    # is float32 as in Pillow (its `box` is parsed as C floats), so fractional boxes match.
    cdef double scale = <double>(in1 - in0) / out_size
    cdef double filterscale = scale if scale > 1.0 else 1.0
    cdef double support = _filter_support(filt) * filterscale
    cdef double ss = 1.0 / filterscale
    cdef double center, ww, w
    cdef Py_ssize_t xx, x, xmin, xmax
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


cdef void _nearest_tables(ResamplePlan* p, float fx0, float fx1, float fy0,
                          float fy1) noexcept nogil:
    # Pillow's ImagingScaleAffine: float box, double accumulation of the sample centre.
    cdef Py_ssize_t i, lo
    cdef double a = <double>(fx1 - fx0) / p.out_w
    cdef double pos = <double>fx0 + a * 0.5
    for i in range(p.out_w):
        lo = -1 if pos < 0.0 else <Py_ssize_t>pos
        lo = 0 if lo < 0 else (p.in_w - 1 if lo >= p.in_w else lo)
        p.xin[i] = lo * p.channels
        pos += a
    a = <double>(fy1 - fy0) / p.out_h
    pos = <double>fy0 + a * 0.5
    for i in range(p.out_h):
        lo = -1 if pos < 0.0 else <Py_ssize_t>pos
        p.yin[i] = 0 if lo < 0 else (p.in_h - 1 if lo >= p.in_h else lo)
        pos += a


cdef void _plan_layout(ResamplePlan* p, Py_ssize_t in_h, Py_ssize_t in_w, Py_ssize_t out_h,
                       Py_ssize_t out_w, int channels, float fx0, float fx1, float fy0,
                       float fy1, int filter) noexcept nogil:
    # Sizes and pass choice of a validated plan (no tables yet).
    memset(p, 0, sizeof(ResamplePlan))
    p.in_h = in_h
    p.in_w = in_w
    p.out_h = out_h
    p.out_w = out_w
    p.channels = channels
    p.filter = filter
    if filter == FILTER_NEAREST:
        return
    p.need_h = out_w != in_w or fx0 != 0.0 or fx1 != in_w
    p.need_v = out_h != in_h or fy0 != 0.0 or fy1 != in_h
    if p.need_h:
        p.ksize_x = _ksize(fx0, fx1, out_w, filter)
    p.ksize_y = _ksize(fy0, fy1, out_h, filter)


cdef void _plan_fill(ResamplePlan* p, float fx0, float fx1, float fy0, float fy1,
                     double* row) noexcept nogil:
    # Coefficients and the rows the horizontal pass produces, into a laid-out plan whose
    # kx/bx (when need_h) and ky/by are allocated; row holds max(ksize_x, ksize_y) doubles.
    cdef Py_ssize_t i, lo, hi
    if p.need_h:
        _coeffs(p.in_w, fx0, fx1, p.out_w, p.filter, p.ksize_x, row, p.kx, p.bx)
    _coeffs(p.in_h, fy0, fy1, p.out_h, p.filter, p.ksize_y, row, p.ky, p.by)
    lo = p.in_h
    hi = 0
    for i in range(p.out_h):
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
        for i in range(p.out_h):
            p.by[2 * i] -= <int32_t>lo
    elif p.need_h:
        p.y_first = 0
        p.y_rows = p.in_h   # == out_h: the horizontal pass writes the output directly


cdef int resample_plan_init(ResamplePlan* p, Py_ssize_t in_h, Py_ssize_t in_w,
                            Py_ssize_t out_h, Py_ssize_t out_w, int channels,
                            double x0, double y0, double x1, double y1, int filter) except -1:
    """Validate and fill a resample plan (GIL held); see _resample.pxd."""
    cdef Py_ssize_t rowlen, kmax
    cdef float fx0, fx1, fy0, fy1
    cdef double* row = NULL
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
    _plan_layout(p, in_h, in_w, out_h, out_w, channels, fx0, fx1, fy0, fy1, filter)
    rowlen = out_w * channels
    try:
        if filter == FILTER_NEAREST:
            p.xin = <Py_ssize_t*>malloc(out_w * sizeof(Py_ssize_t))
            p.yin = <Py_ssize_t*>malloc(out_h * sizeof(Py_ssize_t))
            if p.xin == NULL or p.yin == NULL:
                raise MemoryError("cannot allocate resampling tables")
            _nearest_tables(p, fx0, fx1, fy0, fy1)
            return 0
        kmax = p.ksize_x if p.ksize_x > p.ksize_y else p.ksize_y
        row = <double*>malloc(kmax * sizeof(double))
        if p.need_h:
            p.kx = <int32_t*>malloc(out_w * p.ksize_x * sizeof(int32_t))
            p.bx = <int32_t*>malloc(out_w * 2 * sizeof(int32_t))
        p.ky = <int32_t*>malloc(out_h * p.ksize_y * sizeof(int32_t))
        p.by = <int32_t*>malloc(out_h * 2 * sizeof(int32_t))
        if (row == NULL or p.ky == NULL or p.by == NULL
                or (p.need_h and (p.kx == NULL or p.bx == NULL))):
            raise MemoryError("cannot allocate resampling coefficients")
        _plan_fill(p, fx0, fx1, fy0, fy1, row)
        if p.need_h and p.need_v:
            p.tmp = <uint8_t*>malloc(p.y_rows * rowlen)
            if p.tmp == NULL:
                raise MemoryError("cannot allocate the resampling buffer")
        if p.need_v:
            p.acc = <int32_t*>malloc(rowlen * sizeof(int32_t))
            if p.acc == NULL:
                raise MemoryError("cannot allocate the resampling buffer")
    except BaseException:
        resample_plan_free(p)
        raise
    finally:
        free(row)
    return 0


cdef int _plan_check(Py_ssize_t in_h, Py_ssize_t in_w, Py_ssize_t out_h, Py_ssize_t out_w,
                     int channels, double x0, double y0, double x1, double y1,
                     int filter) noexcept nogil:
    # resample_plan_init's checks, as a status
    if in_h <= 0 or in_w <= 0 or out_h <= 0 or out_w <= 0:
        return IMGPROC_EBADSIZE
    if in_h > MAX_SIDE or in_w > MAX_SIDE or out_h > MAX_SIDE or out_w > MAX_SIDE:
        return IMGPROC_EBADSIZE
    if channels < 1 or channels > 4:
        return IMGPROC_EBADSIZE
    if filter != FILTER_NEAREST and filter != FILTER_BILINEAR and filter != FILTER_BICUBIC:
        return IMGPROC_EARG
    if not (isfinite(x0) and isfinite(y0) and isfinite(x1) and isfinite(y1)):
        return IMGPROC_EBOUNDS
    if not (0.0 <= x0 < x1 <= in_w and 0.0 <= y0 < y1 <= in_h
            and <float>x0 < <float>x1 and <float>y0 < <float>y1):
        return IMGPROC_EBOUNDS
    return IMGPROC_OK


cdef inline size_t _aligned(size_t n) noexcept nogil:
    return (n + 63) & ~(<size_t>63)


cdef size_t _plan_bytes(const ResamplePlan* p) noexcept nogil:
    # scratch a laid-out plan needs (the horizontal-pass buffer bounded by in_h rows)
    cdef size_t rowlen = <size_t>(p.out_w * p.channels)
    cdef Py_ssize_t kmax = p.ksize_x if p.ksize_x > p.ksize_y else p.ksize_y
    if p.filter == FILTER_NEAREST:
        return _aligned(p.out_w * sizeof(Py_ssize_t)) + _aligned(p.out_h * sizeof(Py_ssize_t))
    cdef size_t n = _aligned(kmax * sizeof(double))
    if p.need_h:
        n += _aligned(p.out_w * p.ksize_x * sizeof(int32_t)) + _aligned(p.out_w * 2 * sizeof(int32_t))
    n += _aligned(p.out_h * p.ksize_y * sizeof(int32_t)) + _aligned(p.out_h * 2 * sizeof(int32_t))
    if p.need_h and p.need_v:
        n += _aligned(p.in_h * rowlen)
    if p.need_v:
        n += _aligned(rowlen * sizeof(int32_t))
    return n


cdef size_t resample_plan_size(Py_ssize_t in_h, Py_ssize_t in_w, Py_ssize_t out_h,
                               Py_ssize_t out_w, int channels, double x0, double y0, double x1,
                               double y1, int filter) noexcept nogil:
    """Scratch bytes resample_plan_init_in needs (0: invalid arguments); see _resample.pxd."""
    cdef ResamplePlan p
    if _plan_check(in_h, in_w, out_h, out_w, channels, x0, y0, x1, y1, filter) != IMGPROC_OK:
        return 0
    _plan_layout(&p, in_h, in_w, out_h, out_w, channels, <float>x0, <float>x1, <float>y0,
                 <float>y1, filter)
    return _plan_bytes(&p)


cdef int resample_plan_init_in(ResamplePlan* p, Py_ssize_t in_h, Py_ssize_t in_w,
                               Py_ssize_t out_h, Py_ssize_t out_w, int channels,
                               double x0, double y0, double x1, double y1, int filter,
                               uint8_t* scratch, size_t scratch_size) noexcept nogil:
    """resample_plan_init without the GIL, tables carved from scratch; see _resample.pxd."""
    cdef int st = _plan_check(in_h, in_w, out_h, out_w, channels, x0, y0, x1, y1, filter)
    cdef float fx0 = <float>x0, fx1 = <float>x1, fy0 = <float>y0, fy1 = <float>y1
    cdef size_t rowlen = <size_t>(out_w * channels)
    cdef uint8_t* at = scratch
    cdef double* row
    memset(p, 0, sizeof(ResamplePlan))
    if st != IMGPROC_OK:
        return st
    _plan_layout(p, in_h, in_w, out_h, out_w, channels, fx0, fx1, fy0, fy1, filter)
    if scratch == NULL or scratch_size < _plan_bytes(p) or (<size_t>scratch & 63) != 0:
        memset(p, 0, sizeof(ResamplePlan))
        return IMGPROC_EPLAN
    if filter == FILTER_NEAREST:
        p.xin = <Py_ssize_t*>at
        at += _aligned(out_w * sizeof(Py_ssize_t))
        p.yin = <Py_ssize_t*>at
        _nearest_tables(p, fx0, fx1, fy0, fy1)
        return IMGPROC_OK
    row = <double*>at
    at += _aligned((p.ksize_x if p.ksize_x > p.ksize_y else p.ksize_y) * sizeof(double))
    if p.need_h:
        p.kx = <int32_t*>at
        at += _aligned(out_w * p.ksize_x * sizeof(int32_t))
        p.bx = <int32_t*>at
        at += _aligned(out_w * 2 * sizeof(int32_t))
    p.ky = <int32_t*>at
    at += _aligned(out_h * p.ksize_y * sizeof(int32_t))
    p.by = <int32_t*>at
    at += _aligned(out_h * 2 * sizeof(int32_t))
    _plan_fill(p, fx0, fx1, fy0, fy1, row)
    if p.need_h and p.need_v:
        p.tmp = at   # y_rows <= in_h rows: _plan_bytes reserved in_h
        at += _aligned(in_h * rowlen)
    if p.need_v:
        p.acc = <int32_t*>at
    return IMGPROC_OK


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
    cdef int isa = isa_level()
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
        tl_resample_hpass(src + p.y_first * src_stride, src_stride, p.y_rows, p.tmp, rowlen,
                          p.out_w, p.in_w, p.channels, p.kx, p.bx, p.ksize_x, isa)
        tl_resample_vpass(p.tmp, rowlen, dst, dst_stride, p.out_h, rowlen, p.ky, p.by,
                          p.ksize_y, p.acc, isa)
    elif p.need_h:
        tl_resample_hpass(src, src_stride, p.out_h, dst, dst_stride, p.out_w, p.in_w,
                          p.channels, p.kx, p.bx, p.ksize_x, isa)
    elif p.need_v:
        tl_resample_vpass(src, src_stride, dst, dst_stride, p.out_h, rowlen, p.ky, p.by,
                          p.ksize_y, p.acc, isa)
    else:
        for y in range(p.out_h):
            memcpy(dst + y * dst_stride, src + y * src_stride, rowlen)
    return IMGPROC_OK


cdef int resample_run_chw_f32(const ResamplePlan* p, const uint8_t* src, Py_ssize_t src_stride,
                              uint8_t* dst, Py_ssize_t dst_stride, float* out,
                              const float* scale, const float* bias, bint flip) noexcept nogil:
    """resample_run, with the float32 CHW write fused into the vertical pass where its kernel
    applies (3 channels, both passes or the vertical one, AVX2, rows of >= 32 pixels): returns
    IMGPROC_OK when `out` (3 planes of out_h * out_w) holds (float)byte * scale[c] + bias[c]
    of the resampled image (mirrored when flip; bit for bit what resample_run then
    normalize_chw_f32 give), RUN_U8 when instead `dst` holds resample_run's output (the
    caller writes `out` from it), or a negative status. `dst` is written only in that case
    (the horizontal pass writes the plan's `tmp`)."""
    cdef int isa = isa_level()
    cdef Py_ssize_t rowlen
    if (p == NULL or src == NULL or out == NULL or scale == NULL or bias == NULL
            or p.filter == FILTER_NEAREST or not p.need_v or p.channels != 3):
        return _run_u8(p, src, src_stride, dst, dst_stride)
    if p.in_h <= 0 or p.in_w <= 0 or p.out_h <= 0 or p.out_w <= 0:
        return IMGPROC_EPLAN
    rowlen = p.out_w * p.channels
    if src_stride < p.in_w * p.channels:
        return IMGPROC_ESTRIDE
    if p.ky == NULL or p.by == NULL or p.acc == NULL:
        return IMGPROC_EPLAN
    if p.need_h:
        if p.kx == NULL or p.bx == NULL or p.tmp == NULL:
            return IMGPROC_EPLAN
        if p.y_first < 0 or p.y_first + p.y_rows > p.in_h:
            return IMGPROC_EPLAN
        tl_resample_hpass(src + p.y_first * src_stride, src_stride, p.y_rows, p.tmp, rowlen,
                          p.out_w, p.in_w, p.channels, p.kx, p.bx, p.ksize_x, isa)
        if tl_resample_vpass_chw_f32(p.tmp, rowlen, p.out_h, p.out_w, p.ky, p.by, p.ksize_y,
                                     out, scale, bias, flip, isa):
            return IMGPROC_OK
        if dst == NULL:
            return IMGPROC_EPLAN
        if dst_stride < rowlen:
            return IMGPROC_ESTRIDE
        tl_resample_vpass(p.tmp, rowlen, dst, dst_stride, p.out_h, rowlen, p.ky, p.by,
                          p.ksize_y, p.acc, isa)
        return RUN_U8
    if tl_resample_vpass_chw_f32(src, src_stride, p.out_h, p.out_w, p.ky, p.by, p.ksize_y, out,
                                 scale, bias, flip, isa):
        return IMGPROC_OK
    return _run_u8(p, src, src_stride, dst, dst_stride)


cdef inline int _run_u8(const ResamplePlan* p, const uint8_t* src, Py_ssize_t src_stride,
                        uint8_t* dst, Py_ssize_t dst_stride) noexcept nogil:
    cdef int st = resample_run(p, src, src_stride, dst, dst_stride)
    return RUN_U8 if st == IMGPROC_OK else st


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


# ---------------------------------------------------------------------------------------------
# Python entry points: validate (GIL) -> kernel (nogil) -> raise
# ---------------------------------------------------------------------------------------------

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
    check_channels(C, "resample")
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
        raise_status(st, "resample")


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
    check_channels(C, "crop")
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
        raise_status(st, "crop")


def hflip_into(const uint8_t[:, :, ::1] src not None, uint8_t[:, :, ::1] dst not None, /):
    """Mirror ``src`` left-right into ``dst`` (same shape); ``dst`` may be ``src`` itself.

    Raises ValueError on shape mismatch or partially overlapping buffers.
    Example: ``hflip_into(img, img)`` flips in place.
    """
    cdef int st
    cdef Py_ssize_t H = src.shape[0], W = src.shape[1], C = src.shape[2]
    if dst.shape[0] != H or dst.shape[1] != W or dst.shape[2] != C:
        raise ValueError(f"hflip: dst shape {(dst.shape[0], dst.shape[1], dst.shape[2])} != src shape {(H, W, C)}")
    check_channels(C, "hflip")
    if H <= 0 or W <= 0:
        raise ValueError("hflip: sizes must be positive")
    if (<const uint8_t*>&dst[0, 0, 0] != &src[0, 0, 0]
            and overlap(&src[0, 0, 0], H * W * C, &dst[0, 0, 0], H * W * C)):
        raise ValueError("hflip: src and dst partially overlap")
    with nogil:
        st = hflip_u8(&src[0, 0, 0], H, W, src.strides[0], <int>C, &dst[0, 0, 0], dst.strides[0])
    if st != IMGPROC_OK:
        raise_status(st, "hflip")
