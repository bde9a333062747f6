"""Output kernels: 3-channel HWC uint8 -> CHW planes, float32 normalized or uint8, optionally
mirrored left-right, written into the caller's buffer (e.g. one slot of a batch).

Each ``def`` validates with the GIL held, runs one ``noexcept nogil`` kernel that returns a
status, and raises outside the ``nogil`` block. The C-level API (``_chw.pxd``) is what the fused
decode path cimports.
"""
from libc.math cimport isfinite
from libc.stdint cimport uint8_t

from turboloader._native._common cimport (
    IMGPROC_EBADSIZE, IMGPROC_ESTRIDE, IMGPROC_OK, raise_status,
)


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
# Python entry points: validate (GIL) -> kernel (nogil) -> raise
# ---------------------------------------------------------------------------------------------

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
        raise_status(st, "normalize")


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
        raise_status(st, "to_chw")
