# C-level API of the output kernels: 3-channel HWC uint8 -> CHW planes (float32 normalized or
# uint8), optionally mirrored, cimportable by the other native modules (``_fused.pyx``).
# Status codes and conventions: ``_common.pxd``.

from libc.stdint cimport uint8_t


# dst[c, y, x] = src[y, x', c] * scale[c] + bias[c], x' = w-1-x when flip; 3-channel src.
# dst is 3 contiguous planes of h*w floats.
cdef int normalize_chw_f32(const uint8_t* src, Py_ssize_t h, Py_ssize_t w, Py_ssize_t src_stride,
                           float* dst, const float* scale, const float* bias,
                           bint flip) noexcept nogil

# dst[c, y, x] = src[y, x', c]; 3-channel src; dst is 3 contiguous planes of h*w bytes.
cdef int chw_u8(const uint8_t* src, Py_ssize_t h, Py_ssize_t w, Py_ssize_t src_stride,
                uint8_t* dst, bint flip) noexcept nogil
