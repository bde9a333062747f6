"""Output kernels: 3-channel HWC uint8 -> CHW planes, float32 normalized or uint8, optionally
mirrored left-right, written into the caller's buffer (e.g. one slot of a batch).

The loops are hand-vectorized C (``chw_kernels.c``: pshufb deinterleave, contiguous stores)
with runtime CPU dispatch (``_cpu``); every dispatch level gives the same bytes. Each ``def``
validates with the GIL held, runs one ``noexcept nogil`` kernel that returns a status, and
raises outside the ``nogil`` block. The C-level API (``_chw.pxd``) is what the fused decode
path cimports.
"""
from libc.math cimport isfinite
from libc.stdint cimport uint8_t

from turboloader._native._common cimport (
    IMGPROC_EBADSIZE, IMGPROC_ESTRIDE, IMGPROC_OK, raise_status,
)
from turboloader._native._cpu cimport isa_level

cdef extern from "chw_kernels.h" nogil:
    void tl_normalize_chw_f32(const uint8_t* src, Py_ssize_t h, Py_ssize_t w,
                              Py_ssize_t src_stride, float* dst, const float* scale,
                              const float* bias, int flip, int isa)
    void tl_chw_u8(const uint8_t* src, Py_ssize_t h, Py_ssize_t w, Py_ssize_t src_stride,
                   uint8_t* dst, int flip, int isa)


cdef int normalize_chw_f32(const uint8_t* src, Py_ssize_t h, Py_ssize_t w, Py_ssize_t src_stride,
                           float* dst, const float* scale, const float* bias,
                           bint flip) noexcept nogil:
    """3-channel HWC uint8 -> CHW float32 planes, in * scale[c] + bias[c] (no GIL)."""
    if src == NULL or dst == NULL or scale == NULL or bias == NULL or h <= 0 or w <= 0:
        return IMGPROC_EBADSIZE
    if src_stride < 3 * w:
        return IMGPROC_ESTRIDE
    tl_normalize_chw_f32(src, h, w, src_stride, dst, scale, bias, flip, isa_level())
    return IMGPROC_OK


cdef int chw_u8(const uint8_t* src, Py_ssize_t h, Py_ssize_t w, Py_ssize_t src_stride,
                uint8_t* dst, bint flip) noexcept nogil:
    """3-channel HWC uint8 -> CHW uint8 planes (no GIL)."""
    if src == NULL or dst == NULL or h <= 0 or w <= 0:
        return IMGPROC_EBADSIZE
    if src_stride < 3 * w:
        return IMGPROC_ESTRIDE
    tl_chw_u8(src, h, w, src_stride, dst, flip, isa_level())
    return IMGPROC_OK


# ---------------------------------------------------------------------------------------------
# Python entry points: validate (GIL) -> kernel (nogil) -> raise
# ---------------------------------------------------------------------------------------------

cdef Py_ssize_t _row_stride(const uint8_t[:, :, :] src, Py_ssize_t d0, Py_ssize_t d1,
                            Py_ssize_t d2, str what) except -1:
    # Sources may be row-strided views (e.g. a crop of a larger image): pixels and channels
    # contiguous, rows any distance >= 3 * W apart. Returns the row stride in bytes.
    cdef Py_ssize_t H = src.shape[0], W = src.shape[1], C = src.shape[2]
    if C != 3:
        raise ValueError(f"{what}: expected a 3-channel image, got {C} channels")
    if H <= 0 or W <= 0:
        raise ValueError(f"{what}: sizes must be positive, got {H}x{W}")
    if d0 != 3 or d1 != H or d2 != W:
        raise ValueError(f"{what}: out must have shape {(3, H, W)}, got {(d0, d1, d2)}")
    # the stride of a length-1 axis is meaningless (NumPy may set anything there)
    if src.strides[2] != 1 or (W > 1 and src.strides[1] != 3):
        raise ValueError(f"{what}: the source's pixels must be contiguous (strides "
                         f"{(src.strides[0], src.strides[1], src.strides[2])}); only rows may be apart")
    if H == 1:
        return 3 * W
    if src.strides[0] < 3 * W:
        raise ValueError(f"{what}: source rows must be at least {3 * W} bytes apart and in "
                         f"order, got a row stride of {src.strides[0]}")
    return src.strides[0]


def normalize_chw_into(const uint8_t[:, :, :] src not None, float[:, :, ::1] dst not None, /,
                       *, mean, std, bint flip=False):
    """``dst[c, y, x] = (src[y, x', c] / 255 - mean[c]) / std[c]`` with x' mirrored if ``flip``.

    Args:
        src: (H, W, 3) uint8 image; C-contiguous, or rows of contiguous pixels any
            distance apart (e.g. a crop view of a larger image).
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
    cdef double m[3]
    cdef double sd[3]
    cdef Py_ssize_t stride = _row_stride(src, dst.shape[0], dst.shape[1], dst.shape[2],
                                         "normalize")
    if not isinstance(mean, (tuple, list)):
        mean = tuple(mean)
    if not isinstance(std, (tuple, list)):
        std = tuple(std)
    if len(mean) != 3 or len(std) != 3:
        raise ValueError(f"normalize: mean and std need 3 values, got {len(mean)} and {len(std)}")
    for c in range(3):
        m[c] = float(mean[c])
        sd[c] = float(std[c])
        if not (isfinite(m[c]) and isfinite(sd[c])) or sd[c] == 0.0:
            raise ValueError(f"normalize: mean {tuple(mean)} and std {tuple(std)} must be "
                             f"finite, std non-zero")
        # in double, then rounded once: the kernels' float32 scale and bias
        scale[c] = <float>(1.0 / (255.0 * sd[c]))
        bias[c] = <float>(-m[c] / sd[c])
    with nogil:
        st = normalize_chw_f32(&src[0, 0, 0], H, W, stride, &dst[0, 0, 0], scale, bias, flip)
    if st != IMGPROC_OK:
        raise_status(st, "normalize")


def chw_into(const uint8_t[:, :, :] src not None, uint8_t[:, :, ::1] dst not None, /, *,
             bint flip=False):
    """Transpose (H, W, 3) uint8 ``src`` into (3, H, W) uint8 ``dst``, mirrored if ``flip``.

    ``src`` may be row-strided as in :func:`normalize_chw_into`; ``dst`` is C-contiguous.
    Raises ValueError on shapes or strides. Example: ``chw_into(img, batch[i], flip=True)``.
    """
    cdef int st
    cdef Py_ssize_t H = src.shape[0], W = src.shape[1]
    cdef Py_ssize_t stride = _row_stride(src, dst.shape[0], dst.shape[1], dst.shape[2],
                                         "to_chw")
    with nogil:
        st = chw_u8(&src[0, 0, 0], H, W, stride, &dst[0, 0, 0], flip)
    if st != IMGPROC_OK:
        raise_status(st, "to_chw")
