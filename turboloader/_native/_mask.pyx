"""Segmentation masks resampled nearest into a batch: the zlib streams of one-channel PNGs
(grayscale or palette, 1-16 bits) inflated whole (the stream's end and Adler-32 checked),
unfiltered up to the last row the output reads and gathered through per-row index maps (``mask_kernels.c``), every mask of a batch in one
call without the GIL.

Validate with the GIL held, one ``noexcept nogil`` kernel per mask returning a status, the
statuses returned (the caller turns a failed row into its typed error: the row's PNG is
then decoded by Pillow, which names what is wrong with it).
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t
from libc.stdlib cimport free, malloc

import numpy as np

cdef extern from "mask_kernels.h" nogil:
    int TL_MASK_OK, TL_MASK_EARG, TL_MASK_ESHORT, TL_MASK_EFILTER, TL_MASK_EZLIB
    size_t tl_png_stride(int64_t width, int bit_depth)
    int tl_inflate_head(const uint8_t *src, size_t in_len, uint8_t *out, size_t out_len)
    int tl_inflate_whole(const uint8_t *src, size_t in_len, uint8_t *out, size_t out_len)
    int tl_png_mask_nearest(const uint8_t *z, size_t zlen, int64_t width, int64_t height,
                            int bit_depth, int gray_scale, const int32_t *ymap, int64_t oh,
                            const int32_t *xmap, int64_t ow, void *out, uint8_t *buf,
                            size_t buf_len)

OK = TL_MASK_OK
EARG = TL_MASK_EARG
ESHORT = TL_MASK_ESHORT
EFILTER = TL_MASK_EFILTER
EZLIB = TL_MASK_EZLIB

# a mask's rows are at most an image's (max_pixels): a buffer past this is a bad call
cdef size_t _MAX_BUFFER = (<size_t>1) << 34


def png_stride(int64_t width, int bit_depth, /):
    """The bytes of one unfiltered row (0: a width or depth the kernel does not take)."""
    return tl_png_stride(width, bit_depth)


def inflate_head(const uint8_t[::1] data not None, uint8_t[::1] out not None, /):
    """Fill ``out`` with the first ``len(out)`` bytes the zlib stream ``data`` inflates to.

    Returns:
        The kernel's status: ``OK`` (0), ``ESHORT`` (the stream ends first) or ``EZLIB``.
    """
    cdef int st
    cdef const uint8_t *src = &data[0] if data.shape[0] else <const uint8_t *>b""
    cdef uint8_t dummy
    cdef uint8_t *dst = &out[0] if out.shape[0] else &dummy
    with nogil:
        st = tl_inflate_head(src, data.shape[0], dst, out.shape[0])
    return st


def inflate_whole(const uint8_t[::1] data not None, uint8_t[::1] out not None, /):
    """Fill ``out`` with everything the zlib stream ``data`` inflates to, which must be
    exactly ``len(out)`` bytes, its final block ending there and its Adler-32 matching.

    Returns:
        The kernel's status: ``OK`` (0), ``ESHORT`` (the stream or its checksum ends first)
        or ``EZLIB`` (not deflate, more data than ``out`` holds, or the checksum differs).
    """
    cdef int st
    cdef const uint8_t *src = &data[0] if data.shape[0] else <const uint8_t *>b""
    cdef uint8_t dummy
    cdef uint8_t *dst = &out[0] if out.shape[0] else &dummy
    with nogil:
        st = tl_inflate_whole(src, data.shape[0], dst, out.shape[0])
    return st


def png_masks_nearest(list data not None, const int64_t[:, ::1] info not None,
                      const int32_t[:, ::1] ymap not None, const int32_t[:, ::1] xmap not None,
                      uint8_t[:, :, ::1] out8 not None, uint16_t[:, :, ::1] out16 not None, /):
    """Mask ``j``: ``data[j]`` (bytes, the zlib stream of the IDAT chunks) of a PNG
    ``info[j] = (width, height, bit_depth, gray_scale)`` sampled at ``ymap[j]`` x
    ``xmap[j]`` into ``out8[j]`` (``out16[j]`` for 16 bits).

    Returns:
        ``int32[n]``: per mask ``OK`` (0) or ``EARG`` / ``ESHORT`` / ``EFILTER`` / ``EZLIB``
        (its row of the output is then unspecified).

    Raises:
        TypeError / ValueError: the arguments disagree in length or shape.
    """
    cdef Py_ssize_t n = len(data), j
    cdef Py_ssize_t oh = out8.shape[1], ow = out8.shape[2]
    if info.shape[0] != n or info.shape[1] != 4 or ymap.shape[0] != n or xmap.shape[0] != n \
            or out8.shape[0] != n:
        raise ValueError(f"png_masks_nearest: {n} masks need info (n, 4), maps and out8 of "
                         f"n rows")
    if ymap.shape[1] != oh or xmap.shape[1] != ow or oh == 0 or ow == 0:
        raise ValueError(f"png_masks_nearest: maps of {ymap.shape[1]} x {xmap.shape[1]} for "
                         f"an output of {oh} x {ow}")
    cdef bint any16 = False
    cdef size_t buf_len = 0, s, need
    for j in range(n):
        if type(data[j]) is not bytes:
            raise TypeError(f"png_masks_nearest: data[{j}] must be bytes")
        if info[j, 2] == 16:
            any16 = True
        s = tl_png_stride(info[j, 0], <int>info[j, 2])
        need = <size_t>max(info[j, 1], 0) * (s + 1) + 2 * s  # every row: the checksum
        if s > _MAX_BUFFER or need > _MAX_BUFFER:
            raise ValueError(f"png_masks_nearest: mask {j} is too large")
        if need > buf_len:
            buf_len = need
    if any16 and (out16.shape[0] != n or out16.shape[1] != oh or out16.shape[2] != ow):
        raise ValueError("png_masks_nearest: 16-bit masks need out16 of out8's shape")
    status = np.zeros(n, np.int32)
    cdef int32_t[::1] st = status
    if n == 0:
        return status
    cdef const uint8_t **ptrs = <const uint8_t **>malloc(n * sizeof(uint8_t *))
    cdef size_t *lens = <size_t *>malloc(n * sizeof(size_t))
    cdef uint8_t *buf = <uint8_t *>malloc(buf_len if buf_len else 1)
    if ptrs == NULL or lens == NULL or buf == NULL:
        free(ptrs); free(lens); free(buf)
        raise MemoryError()
    cdef void *dst
    try:
        for j in range(n):
            ptrs[j] = <const uint8_t *>PyBytes_AS_STRING(data[j])
            lens[j] = <size_t>PyBytes_GET_SIZE(data[j])
        with nogil:  # data's bytes stay referenced by the caller's list
            for j in range(n):
                if info[j, 2] == 16:
                    dst = <void *>&out16[j, 0, 0]
                else:
                    dst = <void *>&out8[j, 0, 0]
                st[j] = tl_png_mask_nearest(ptrs[j], lens[j], info[j, 0], info[j, 1],
                                            <int>info[j, 2], <int>info[j, 3], &ymap[j, 0], oh,
                                            &xmap[j, 0], ow, dst, buf, buf_len)
    finally:
        free(ptrs); free(lens); free(buf)
    return status
