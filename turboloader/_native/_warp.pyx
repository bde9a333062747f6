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
from libc.math cimport isfinite
from libc.stdint cimport uint8_t

from turboloader._native._cpu cimport isa_level

cdef extern from "warp_kernels.h" nogil:
    # The loops, in C so that they are compiled once per ISA level (runtime dispatch); the
    # kernels below validate their arguments first.
    void tl_warp_u8(const uint8_t* src, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t sstride, int C,
                    uint8_t* dst, Py_ssize_t dh, Py_ssize_t dw, Py_ssize_t dstride, int grid,
                    const float* t, int mode, const float* fill, int isa)
    void tl_blur_u8(const uint8_t* src, Py_ssize_t h, Py_ssize_t w, Py_ssize_t sstride, int C,
                    uint8_t* dst, Py_ssize_t dstride, const float* kx, Py_ssize_t nx,
                    const float* ky, Py_ssize_t ny, float* tmp, int isa)

NEAREST = WARP_NEAREST
BILINEAR = WARP_BILINEAR

cdef enum:     # values mirror warp_kernels.h
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
    MAX_SIDE = 1 << 22      # the kernels' rounding range; coordinates stay exact in float32
    MAX_TAPS = 1025


cdef int warp_u8(const uint8_t* src, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t sstride, int C,
                 uint8_t* dst, Py_ssize_t dh, Py_ssize_t dw, Py_ssize_t dstride,
                 int grid, const float* t, int mode, const float* fill) noexcept nogil:
    """Inverse-map every output pixel through the float32 grid ``t`` and sample ``src`` (no GIL).

    ``t`` holds 6 (affine) or 8 (perspective) float32 coefficients already divided by the
    half-sizes as torchvision does; ``fill`` is NULL (torchvision ``fill=None``: zeros, no mask
    blend) or C floats. src and dst must not overlap. Every tap is bounds-checked against
    (sh, sw) before it is read (warp_kernels.c).
    """
    if src == NULL or dst == NULL or sh <= 0 or sw <= 0 or dh <= 0 or dw <= 0 or C < 1 or C > 4:
        return WARP_EBADSIZE
    if sh > MAX_SIDE or sw > MAX_SIDE or dh > MAX_SIDE or dw > MAX_SIDE:
        return WARP_EBADSIZE
    if sstride < sw * C or dstride < dw * C:
        return WARP_ESTRIDE
    if (grid != GRID_AFFINE and grid != GRID_PERSPECTIVE) or (mode != WARP_NEAREST
                                                             and mode != WARP_BILINEAR):
        return WARP_EARG
    tl_warp_u8(src, sh, sw, sstride, C, dst, dh, dw, dstride, grid, t, mode, fill, isa_level())
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
    cdef Py_ssize_t n = w * C
    if src == NULL or dst == NULL or tmp == NULL or kx == NULL or ky == NULL:
        return WARP_EBADSIZE
    if h <= 0 or w <= 0 or C < 1 or C > 4 or nx < 1 or ny < 1 or nx % 2 == 0 or ny % 2 == 0:
        return WARP_EBADSIZE
    if nx // 2 >= w or ny // 2 >= h or nx > MAX_TAPS or ny > MAX_TAPS:
        return WARP_EARG
    if sstride < n or dstride < n or tmp_len < (h + 1) * n:
        return WARP_ESTRIDE
    tl_blur_u8(src, h, w, sstride, C, dst, dstride, kx, nx, ky, ny, tmp, isa_level())
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
