"""Geometric warps and blur on 8-bit interleaved HWC images: affine, perspective, Gaussian blur.

The warps reproduce torchvision v2's tensor path on uint8 images: the output grid of
``_affine_grid`` / ``_perspective_grid`` in float32, ``grid_sample(..., align_corners=False,
padding_mode="zeros")`` with nearest (round half to even) or bilinear taps, torchvision's
mask-channel fill blend, then ``round_()`` to uint8. The blur is torchvision's
``gaussian_blur`` (reflect padding, float32 taps, round half to even) done as two separable
float32 passes. Each ``def`` validates with the GIL held, runs one ``noexcept nogil`` kernel
that returns a status, and raises outside the ``nogil`` block. No kernel allocates: scratch
buffers come from the caller. Random parameters are never drawn here.
"""
from libc.math cimport fabsf, floorf, isfinite
from libc.stdint cimport int32_t, uint8_t

cdef extern from *:
    # Every float operation here mirrors one rounding of torch's; a -march build would let GCC
    # fuse a * b + c into an FMA (-ffp-contract=fast) and change results. Keep them separate.
    """
    #if defined(__GNUC__) && !defined(__clang__)
    #pragma GCC optimize ("fp-contract=off")
    #elif defined(__clang__)
    #pragma STDC FP_CONTRACT OFF
    #endif
    """

NEAREST = WARP_NEAREST
BILINEAR = WARP_BILINEAR

cdef enum:
    WARP_NEAREST = 0
    WARP_BILINEAR = 1

cdef enum:
    GRID_AFFINE = 0         # torchvision _affine_grid (centred output coordinates)
    GRID_PERSPECTIVE = 1    # torchvision _perspective_grid (pixel-centre output coordinates)

cdef enum:
    WARP_OK = 0
    WARP_EBADSIZE = -1
    WARP_ESTRIDE = -2
    WARP_EARG = -3

cdef enum:
    MAX_SIDE = 1 << 22      # _rne's exact range; coordinates stay exact in float32
    MAX_TAPS = 1025


cdef float RNE_MAGIC = 12582912.0     # 1.5 * 2^23


cdef inline float _rne(float v) noexcept nogil:
    # Round half to even (the FPU default mode, like nearbyintf, which is a libm call without
    # SSE4.1) for |v| < 2^22: adding 1.5 * 2^23 leaves no fraction bits. GCC keeps the add and
    # subtract because -fassociative-math is off.
    cdef float t = v + RNE_MAGIC
    return t - RNE_MAGIC


cdef inline uint8_t _round_u8(float v) noexcept nogil:
    # torch's round_() (half to even) then .to(uint8); v is a convex combination of bytes and
    # fill values, but clamp anyway so no cast is ever out of range.
    if not (v > 0.0):      # also NaN
        return 0
    if v > 255.0:
        return 255
    return <uint8_t>_rne(v)


cdef inline uint8_t _round_clamp_u8(float v) noexcept nogil:
    # _round_u8 without branches for finite |v| < 2^22 (integer clamps compile to cmovs)
    cdef int32_t i = <int32_t>_rne(v)
    i = i if i > 0 else 0
    i = i if i < 255 else 255
    return <uint8_t>i


cdef inline float _fma_acc(float acc, float w, uint8_t v) noexcept nogil:
    # torch's grid_sample accumulates with fused multiply-adds: one rounding per step. The
    # double product of a float and a byte and the double sum are exact, so the cast rounds once.
    return <float>(<double>acc + <double>w * <double>v)


cdef enum:
    CHUNK = 64          # output pixels per bilinear chunk (stack arrays)


cdef void _bilinear_chunk(const uint8_t* src, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t sstride,
                          int C, const float* ixs, const float* iys, Py_ssize_t n,
                          const float* fill, const uint8_t* fill8, uint8_t* q) noexcept nogil:
    # Bilinear taps for n (<= CHUNK) output pixels with source coordinates ixs/iys (finite,
    # |.| < 2^22), written interleaved to q. Taps outside the source read as 0 with their
    # weight kept, which is exactly torch's masked FMA chain (an FMA with a 0 tap returns the
    # accumulator), so the arithmetic is uniform: weights (vectorized), a bounds-checked byte
    # gather (scalar), then per channel a branch-free pass that GCC vectorizes, so the exact
    # double FMA emulation pipelines across pixels instead of stalling on one pixel's chain.
    cdef float w0[CHUNK]
    cdef float w1[CHUNK]
    cdef float w2[CHUNK]
    cdef float w3[CHUNK]
    cdef float msk[CHUNK]
    cdef int32_t xis[CHUNK]
    cdef int32_t yis[CHUNK]
    cdef uint8_t tap[4 * 4 * CHUNK]   # [tap][channel][pixel]
    cdef uint8_t outv[4 * CHUNK]      # [channel][pixel]
    cdef Py_ssize_t k, xi, yi
    cdef int c
    cdef float ix, iy, fx, fy, tx, ty, a0, a1, a2, a3, v, one = 1.0, zero = 0.0
    cdef bint i0, i1, i2, i3
    cdef const uint8_t* p0
    cdef const uint8_t* p2
    cdef uint8_t* t0
    cdef uint8_t* t1
    cdef uint8_t* t2
    cdef uint8_t* t3
    for k in range(n):
        ix = ixs[k]
        iy = iys[k]
        fx = <float><int32_t>ix         # floor without libm: truncate, then step down
        fy = <float><int32_t>iy         # where truncation went up (negative fractions)
        fx = fx - <float>(fx > ix)
        fy = fy - <float>(fy > iy)
        tx = ix - fx
        ty = iy - fy
        xis[k] = <int32_t>fx
        yis[k] = <int32_t>fy
        w0[k] = (one - tx) * (one - ty)
        w1[k] = tx * (one - ty)
        w2[k] = (one - tx) * ty
        w3[k] = tx * ty
    for k in range(n):
        xi = xis[k]
        yi = yis[k]
        i0 = 0 <= xi < sw and 0 <= yi < sh
        i1 = 0 <= xi + 1 < sw and 0 <= yi < sh
        i2 = 0 <= xi < sw and 0 <= yi + 1 < sh
        i3 = 0 <= xi + 1 < sw and 0 <= yi + 1 < sh
        if i0 and i3:
            msk[k] = ((w0[k] + w1[k]) + w2[k]) + w3[k]
            p0 = src + yi * sstride + xi * C
            p2 = p0 + sstride
            for c in range(C):
                tap[(0 * 4 + c) * CHUNK + k] = p0[c]
                tap[(1 * 4 + c) * CHUNK + k] = p0[C + c]
                tap[(2 * 4 + c) * CHUNK + k] = p2[c]
                tap[(3 * 4 + c) * CHUNK + k] = p2[C + c]
            continue
        a0 = w0[k] if i0 else zero
        a1 = w1[k] if i1 else zero
        a2 = w2[k] if i2 else zero
        a3 = w3[k] if i3 else zero
        msk[k] = ((a0 + a1) + a2) + a3
        for c in range(C):
            tap[(0 * 4 + c) * CHUNK + k] = src[yi * sstride + xi * C + c] if i0 else 0
            tap[(1 * 4 + c) * CHUNK + k] = src[yi * sstride + (xi + 1) * C + c] if i1 else 0
            tap[(2 * 4 + c) * CHUNK + k] = src[(yi + 1) * sstride + xi * C + c] if i2 else 0
            tap[(3 * 4 + c) * CHUNK + k] = src[(yi + 1) * sstride + (xi + 1) * C + c] if i3 else 0
    for c in range(C):
        t0 = &tap[(0 * 4 + c) * CHUNK]
        t1 = &tap[(1 * 4 + c) * CHUNK]
        t2 = &tap[(2 * 4 + c) * CHUNK]
        t3 = &tap[(3 * 4 + c) * CHUNK]
        if fill == NULL:
            for k in range(n):
                v = w0[k] * <float>t0[k]
                v = <float>(<double>v + <double>w1[k] * <double>t1[k])
                v = <float>(<double>v + <double>w2[k] * <double>t2[k])
                v = <float>(<double>v + <double>w3[k] * <double>t3[k])
                outv[c * CHUNK + k] = _round_clamp_u8(v)
        else:
            a0 = fill[c]
            for k in range(n):
                v = w0[k] * <float>t0[k]
                v = <float>(<double>v + <double>w1[k] * <double>t1[k])
                v = <float>(<double>v + <double>w2[k] * <double>t2[k])
                v = <float>(<double>v + <double>w3[k] * <double>t3[k])
                # torchvision: float_img.sub_(fill).mul_(mask).add_(fill)
                v = v - a0
                v = v * msk[k]
                outv[c * CHUNK + k] = _round_clamp_u8(v + a0)
    if C == 3:
        for k in range(n):
            q[3 * k] = outv[k]
            q[3 * k + 1] = outv[CHUNK + k]
            q[3 * k + 2] = outv[2 * CHUNK + k]
    else:
        for k in range(n):
            for c in range(C):
                q[k * C + c] = outv[c * CHUNK + k]


cdef int warp_u8(const uint8_t* src, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t sstride, int C,
                 uint8_t* dst, Py_ssize_t dh, Py_ssize_t dw, Py_ssize_t dstride,
                 int grid, const float* t, int mode, const float* fill) noexcept nogil:
    """Inverse-map every output pixel through the float32 grid ``t`` and sample ``src`` (no GIL).

    ``t`` holds 6 (affine) or 8 (perspective) float32 coefficients already divided by the
    half-sizes as torchvision does; ``fill`` is NULL (torchvision ``fill=None``: zeros, no mask
    blend) or C floats. src and dst must not overlap. Every tap is bounds-checked against
    (sh, sw) before it is read.
    """
    cdef Py_ssize_t i, j
    cdef int c
    cdef float x, y, gx, gy, den, ix, iy, fx, fy
    cdef float x0f = 0.0, y0f = 0.0
    cdef float half_w = <float>sw * <float>0.5
    cdef float half_h = <float>sh * <float>0.5
    cdef float one = 1.0
    cdef float lim = 4194304.0      # 2^22: _rne's range; anything beyond is far outside
    cdef uint8_t fill8[4]
    cdef float ixs[CHUNK]
    cdef float iys[CHUNK]
    cdef Py_ssize_t j0, n, k
    cdef bint far
    cdef float park = -8.0
    cdef const uint8_t* p0
    cdef uint8_t* q
    if src == NULL or dst == NULL or sh <= 0 or sw <= 0 or dh <= 0 or dw <= 0 or C < 1 or C > 4:
        return WARP_EBADSIZE
    if sh > MAX_SIDE or sw > MAX_SIDE or dh > MAX_SIDE or dw > MAX_SIDE:
        return WARP_EBADSIZE
    if sstride < sw * C or dstride < dw * C:
        return WARP_ESTRIDE
    if (grid != GRID_AFFINE and grid != GRID_PERSPECTIVE) or (mode != WARP_NEAREST
                                                             and mode != WARP_BILINEAR):
        return WARP_EARG
    for c in range(C):
        fill8[c] = _round_u8(fill[c]) if fill != NULL else 0
    if grid == GRID_AFFINE:
        # torch.linspace((1 - ow) / 2, (ow - 1) / 2, ow): exact half-integers in float32
        x0f = <float>((1.0 - <double>dw) * 0.5)
        y0f = <float>((1.0 - <double>dh) * 0.5)
    else:
        x0f = 0.5
        y0f = 0.5
    for i in range(dh):
        y = y0f + <float>i
        q = dst + i * dstride
        j0 = 0
        while j0 < dw:
            n = dw - j0
            if n > CHUNK:
                n = CHUNK
            for k in range(n):      # the grid: vectorizable
                x = x0f + <float>(j0 + k)
                # torch's bmm of (x, y, 1) with the rescaled theta: (x a + y b) + c, no FMA
                gx = x * t[0] + y * t[1]
                gx = gx + t[2]
                gy = x * t[3] + y * t[4]
                gy = gy + t[5]
                if grid == GRID_PERSPECTIVE:
                    den = x * t[6] + y * t[7]
                    den = den + one
                    gx = gx / den - one
                    gy = gy / den - one
                # grid_sample's unnormalize, align_corners=False: (g + 1) * (size / 2) - 0.5,
                # one fused multiply-add in torch's AVX2/NEON kernels (exact double product
                # and sum, so the cast rounds once)
                ix = <float>(<double>(gx + one) * <double>half_w - 0.5)
                iy = <float>(<double>(gy + one) * <double>half_h - 0.5)
                # beyond 2^22 (or NaN) every tap is outside: park it at -8 (all taps outside,
                # value 0, mask 0), which gives the same output and keeps casts in range
                far = (fabsf(ix) >= lim) | (fabsf(iy) >= lim) | (ix != ix) | (iy != iy)
                ixs[k] = park if far else ix
                iys[k] = park if far else iy
            if mode == WARP_BILINEAR:
                _bilinear_chunk(src, sh, sw, sstride, C, ixs, iys, n, fill, fill8, q)
                q += n * C
                j0 += n
                continue
            for k in range(n):
                ix = ixs[k]
                iy = iys[k]
                if not (-lim < ix < lim and -lim < iy < lim):     # also NaN
                    for c in range(C):
                        q[c] = fill8[c]
                    q += C
                    continue
                fx = _rne(ix)
                fy = _rne(iy)
                if fx >= 0.0 and fx < <float>sw and fy >= 0.0 and fy < <float>sh:
                    p0 = src + <Py_ssize_t>fy * sstride + <Py_ssize_t>fx * C
                    for c in range(C):
                        q[c] = p0[c]
                else:
                    for c in range(C):
                        q[c] = fill8[c]
                q += C
            j0 += n
    return WARP_OK


cdef inline Py_ssize_t _reflect(Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    # torch reflect padding (edge not repeated); valid while the pad is < n
    if i < 0:
        i = -i
    if i >= n:
        i = 2 * (n - 1) - i
    if i < 0:
        i = 0
    return i


cdef int blur_u8(const uint8_t* src, Py_ssize_t h, Py_ssize_t w, Py_ssize_t sstride, int C,
                 uint8_t* dst, Py_ssize_t dstride, const float* kx, Py_ssize_t nx,
                 const float* ky, Py_ssize_t ny, float* tmp, Py_ssize_t tmp_len) noexcept nogil:
    """Separable Gaussian blur with reflect padding: src -> tmp (float rows) -> dst (no GIL).

    ``nx``/``ny`` are odd tap counts with half-widths smaller than ``w``/``h``; ``tmp`` holds at
    least ``(h + 1) * w * C`` floats (the last row accumulates the vertical pass). src and dst
    may be the same buffer. Taps are summed in ascending order in both passes.
    """
    cdef Py_ssize_t y, x, k, j, rx = nx // 2, ry = ny // 2, n = w * C, xx, lo, hi
    cdef int c
    cdef float acc, wk
    cdef const uint8_t* row
    cdef const float* trow
    cdef float* hrow
    cdef float* vacc
    cdef uint8_t* drow
    if src == NULL or dst == NULL or tmp == NULL or kx == NULL or ky == NULL:
        return WARP_EBADSIZE
    if h <= 0 or w <= 0 or C < 1 or C > 4 or nx < 1 or ny < 1 or nx % 2 == 0 or ny % 2 == 0:
        return WARP_EBADSIZE
    if rx >= w or ry >= h or nx > MAX_TAPS or ny > MAX_TAPS:
        return WARP_EARG
    if sstride < n or dstride < n or tmp_len < (h + 1) * n:
        return WARP_ESTRIDE
    vacc = tmp + h * n
    lo = rx * C                 # interior: every tap inside the row
    hi = (w - rx) * C
    for y in range(h):
        row = src + y * sstride
        hrow = tmp + y * n
        for j in range(n):
            hrow[j] = 0.0
        for k in range(nx):     # tap-major over contiguous bytes: vectorizes
            wk = kx[k]
            for j in range(lo, hi):
                hrow[j] = hrow[j] + wk * <float>row[j + (k - rx) * C]
        for x in range(w):      # the reflected border columns
            if x >= rx and x + rx < w:
                continue
            for c in range(C):
                acc = 0.0
                for k in range(nx):
                    xx = _reflect(x - rx + k, w)
                    acc = acc + kx[k] * <float>row[xx * C + c]
                hrow[x * C + c] = acc
    for y in range(h):
        for j in range(n):
            vacc[j] = 0.0
        for k in range(ny):
            trow = tmp + _reflect(y - ry + k, h) * n
            wk = ky[k]
            for j in range(n):
                vacc[j] = vacc[j] + wk * trow[j]
        drow = dst + y * dstride
        for j in range(n):
            drow[j] = _round_u8(vacc[j])
    return WARP_OK


# ---------------------------------------------------------------------------------------------
# Python entry points: validate (GIL) -> kernel (nogil) -> raise
# ---------------------------------------------------------------------------------------------

cdef int _raise(int st, str what) except -1:
    if st == WARP_ESTRIDE:
        raise ValueError(f"{what}: buffer too small")
    if st == WARP_EARG:
        raise ValueError(f"{what}: bad argument")
    raise ValueError(f"{what}: bad image size or channel count (status {st})")


cdef int _fill_arg(fill, int C, float* out) except -1:
    # torchvision: a number applies to every channel; a sequence has 1 or C values
    cdef int c
    if isinstance(fill, (int, float)):
        vals = [float(fill)] * C
    else:
        vals = [float(v) for v in fill]
        if len(vals) == 1:
            vals = vals * C
        if len(vals) != C:
            raise ValueError(f"fill must have 1 or {C} values, got {len(vals)}")
    for c in range(C):
        if not isfinite(vals[c]):
            raise ValueError(f"fill values must be finite, got {vals}")
        # beyond [0, 255] a fill only saturates; bounding it keeps every blended value inside
        # the kernels' branch-free rounding range (|v| < 2^22)
        out[c] = <float>min(max(vals[c], -65536.0), 65536.0)
    return 0


cdef int _check_pair(const uint8_t[:, :, ::1] src, uint8_t[:, :, ::1] dst, str what) except -1:
    if dst.shape[2] != src.shape[2]:
        raise ValueError(f"{what}: src has {src.shape[2]} channels but dst has {dst.shape[2]}")
    if src.shape[2] < 1 or src.shape[2] > 4:
        raise ValueError(f"{what}: images must have 1 to 4 channels, got {src.shape[2]}")
    if src.shape[0] <= 0 or src.shape[1] <= 0 or dst.shape[0] <= 0 or dst.shape[1] <= 0:
        raise ValueError(f"{what}: sizes must be positive")
    if max(src.shape[0], src.shape[1], dst.shape[0], dst.shape[1]) > MAX_SIDE:
        raise ValueError(f"{what}: sides must be at most {MAX_SIDE}")
    cdef const uint8_t* a = &src[0, 0, 0]
    cdef const uint8_t* b = &dst[0, 0, 0]
    cdef Py_ssize_t na = src.shape[0] * src.strides[0], nb = dst.shape[0] * dst.strides[0]
    if a < b + nb and b < a + na:
        raise ValueError(f"{what}: src and dst overlap")
    return 0


def affine_into(const uint8_t[:, :, ::1] src not None, uint8_t[:, :, ::1] dst not None, /, *,
                matrix, int interpolation=WARP_NEAREST, fill=None):
    """Warp ``src`` into ``dst`` with torchvision's inverse affine ``matrix`` (6 numbers).

    ``matrix`` is ``_get_inverse_affine_matrix``'s output: it maps output coordinates centred
    on the output image to source coordinates centred on the source image. ``dst`` may be
    larger than ``src`` (``rotate(expand=True)``).

    Args:
        src: C-contiguous (H, W, C) uint8, C in 1..4.
        dst: C-contiguous (h, w, C) uint8 output, not overlapping ``src``.
        matrix: 6 finite numbers.
        interpolation: ``NEAREST`` or ``BILINEAR``.
        fill: None (zeros, as torchvision's ``fill=None``) or a number / 1 or C numbers.

    Raises:
        ValueError: bad shapes, channels, matrix, fill or interpolation.

    Example:
        >>> affine_into(img, out, matrix=[1, 0, -3, 0, 1, 2], interpolation=BILINEAR, fill=0)
    """
    cdef float t[8]
    cdef float fv[4]
    cdef const float* fp = NULL
    cdef int st, C
    _check_pair(src, dst, "affine")
    C = <int>src.shape[2]
    m = [float(v) for v in matrix]
    if len(m) != 6 or not all(isfinite(v) for v in m):
        raise ValueError(f"affine: matrix must be 6 finite numbers, got {matrix!r}")
    if interpolation != WARP_NEAREST and interpolation != WARP_BILINEAR:
        raise ValueError(f"affine: interpolation must be NEAREST or BILINEAR, got {interpolation}")
    # torch.tensor(matrix, float32) then rescaled_theta = theta.T / [0.5 w, 0.5 h] (float32)
    cdef float hw = <float>(0.5 * src.shape[1]), hh = <float>(0.5 * src.shape[0])
    t[0] = <float>m[0] / hw
    t[1] = <float>m[1] / hw
    t[2] = <float>m[2] / hw
    t[3] = <float>m[3] / hh
    t[4] = <float>m[4] / hh
    t[5] = <float>m[5] / hh
    if fill is not None:
        _fill_arg(fill, C, fv)
        fp = fv
    with nogil:
        st = warp_u8(&src[0, 0, 0], src.shape[0], src.shape[1], src.strides[0], C,
                     &dst[0, 0, 0], dst.shape[0], dst.shape[1], dst.strides[0],
                     GRID_AFFINE, t, interpolation, fp)
    if st != WARP_OK:
        _raise(st, "affine")


def perspective_into(const uint8_t[:, :, ::1] src not None, uint8_t[:, :, ::1] dst not None, /,
                     *, coefficients, int interpolation=WARP_BILINEAR, fill=None):
    """Warp ``src`` into ``dst`` (same size) with torchvision's 8 perspective ``coefficients``.

    Output pixel (x, y) samples the source at
    ``((a x + b y + c) / (g x + h y + 1), (d x + e y + f) / (g x + h y + 1))``, computed on
    the float32 grid of torchvision's ``_perspective_grid``.

    Raises ValueError on shapes, non-finite coefficients, fill or interpolation.
    Example: ``perspective_into(img, out, coefficients=coeffs, interpolation=BILINEAR)``.
    """
    cdef float t[8]
    cdef float fv[4]
    cdef const float* fp = NULL
    cdef int st, C
    _check_pair(src, dst, "perspective")
    if dst.shape[0] != src.shape[0] or dst.shape[1] != src.shape[1]:
        raise ValueError("perspective: dst must have the shape of src")
    C = <int>src.shape[2]
    co = [float(v) for v in coefficients]
    if len(co) != 8 or not all(isfinite(v) for v in co):
        raise ValueError(f"perspective: coefficients must be 8 finite numbers, got {coefficients!r}")
    if interpolation != WARP_NEAREST and interpolation != WARP_BILINEAR:
        raise ValueError(f"perspective: interpolation must be NEAREST or BILINEAR, got {interpolation}")
    cdef float how = <float>(0.5 * dst.shape[1]), hoh = <float>(0.5 * dst.shape[0])
    t[0] = <float>co[0] / how
    t[1] = <float>co[1] / how
    t[2] = <float>co[2] / how
    t[3] = <float>co[3] / hoh
    t[4] = <float>co[4] / hoh
    t[5] = <float>co[5] / hoh
    t[6] = <float>co[6]
    t[7] = <float>co[7]
    if fill is not None:
        _fill_arg(fill, C, fv)
        fp = fv
    with nogil:
        st = warp_u8(&src[0, 0, 0], src.shape[0], src.shape[1], src.strides[0], C,
                     &dst[0, 0, 0], dst.shape[0], dst.shape[1], dst.strides[0],
                     GRID_PERSPECTIVE, t, interpolation, fp)
    if st != WARP_OK:
        _raise(st, "perspective")


def gaussian_blur_into(const uint8_t[:, :, ::1] src not None, uint8_t[:, :, ::1] dst not None,
                       /, *, const float[::1] kx not None, const float[::1] ky not None,
                       float[::1] tmp not None):
    """Blur ``src`` into ``dst`` (same shape, may be ``src``) with separable taps ``kx``, ``ky``.

    Reflect padding as torch's ``pad(mode="reflect")``; ``tmp`` is float32 scratch of at least
    ``(H + 1) * W * C`` elements (nothing is allocated without the GIL).

    Raises ValueError on shapes, even or too-long kernels (half-width >= the side, as torch).
    Example: ``gaussian_blur_into(img, out, kx=k, ky=k, tmp=np.empty(img.size, np.float32))``.
    """
    cdef int st
    cdef Py_ssize_t H = src.shape[0], W = src.shape[1], C = src.shape[2]
    if dst.shape[0] != H or dst.shape[1] != W or dst.shape[2] != C:
        raise ValueError("gaussian_blur: dst must have the shape of src")
    if C < 1 or C > 4 or H <= 0 or W <= 0:
        raise ValueError(f"gaussian_blur: bad image shape {(H, W, C)}")
    if kx.shape[0] % 2 == 0 or ky.shape[0] % 2 == 0 or kx.shape[0] > MAX_TAPS or ky.shape[0] > MAX_TAPS:
        raise ValueError("gaussian_blur: kernel sizes must be odd and at most 1025")
    if kx.shape[0] // 2 >= W or ky.shape[0] // 2 >= H:
        raise ValueError(f"gaussian_blur: padding ({kx.shape[0] // 2}, {ky.shape[0] // 2}) must "
                         f"be smaller than the image ({W}x{H}) for reflect padding")
    if tmp.shape[0] < (H + 1) * W * C:
        raise ValueError(f"gaussian_blur: tmp needs {(H + 1) * W * C} floats, got {tmp.shape[0]}")
    with nogil:
        st = blur_u8(&src[0, 0, 0], H, W, src.strides[0], <int>C, &dst[0, 0, 0], dst.strides[0],
                     &kx[0], kx.shape[0], &ky[0], ky.shape[0], &tmp[0], tmp.shape[0])
    if st != WARP_OK:
        _raise(st, "gaussian_blur")
