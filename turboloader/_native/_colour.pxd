# C-level API of the colour and point-operation kernels (torchvision v2 uint8 semantics),
# cimportable by the other native modules (``_fused.pyx``). Status codes and conventions:
# ``_common.pxd``.

from libc.stdint cimport int64_t, uint8_t


# ColorJitter adjustments, in place, torchvision v2 uint8 semantics. channels is 1 or 3
# (saturation and hue leave 1-channel images unchanged, as torchvision does).
cdef int adjust_brightness_u8(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                              int channels, double factor) noexcept nogil
cdef int adjust_contrast_u8(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                            int channels, double factor) noexcept nogil
cdef int adjust_saturation_u8(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                              int channels, double factor) noexcept nogil
cdef int adjust_hue_u8(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                       int channels, double factor) noexcept nogil

# Point operations used by AutoAugment & co., torchvision v2 uint8 semantics, in place unless
# a dst is given. channels is 1 to 4 unless stated.
# x & mask keeping the top `bits` (0..8) bits.
cdef int posterize_u8(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                      int channels, int bits) noexcept nogil
# x >= threshold ? 255 - x : x, threshold an integer in [0, 256] (256: no-op).
cdef int solarize_u8(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                     int channels, int threshold) noexcept nogil
# 255 - x.
cdef int invert_u8(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                   int channels) noexcept nogil
# dst[c][x] = lut[c * 256 + x], one 256-entry table per channel.
cdef int lut_u8(uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                int channels, const uint8_t* lut) noexcept nogil
# hist[c * 256 + v] += count of value v in channel c (hist is not cleared).
cdef int histogram_u8(const uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                      int channels, int64_t* hist) noexcept nogil
# 3-channel src -> dst with out_channels (1 or 3) copies of the truncated float32 luma.
cdef int grayscale_u8(const uint8_t* src, Py_ssize_t h, Py_ssize_t w, Py_ssize_t src_stride,
                      uint8_t* dst, Py_ssize_t dst_stride, int out_channels) noexcept nogil
# torchvision adjust_sharpness: blend with the rounded 3x3 (1,1,1/1,5,1/1,1,1)/13 blur inside
# the 1-pixel border; src and dst (same size, channels 1 or 3) must not overlap.
cdef int sharpness_u8(const uint8_t* src, Py_ssize_t h, Py_ssize_t w, Py_ssize_t src_stride,
                      int channels, uint8_t* dst, Py_ssize_t dst_stride,
                      double factor) noexcept nogil
