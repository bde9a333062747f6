# Declarations of jpeg_shim.h (turboloader's C layer over libjpeg-turbo); see the header for
# the full contract. Every function is reentrant, never longjmps into the caller and may be
# called without the GIL.

from libc.stddef cimport ptrdiff_t

cdef extern from "jpeg_shim.h" nogil:
    enum:
        TL_MSG_LEN
        TL_MAX_SCANS

        TL_OK
        TL_ERR_DECODE
        TL_ERR_TRUNCATED
        TL_ERR_STRICT
        TL_ERR_TOO_LARGE
        TL_ERR_TOO_MANY_SCANS
        TL_ERR_TOO_MUCH_WORK
        TL_ERR_UNSUPPORTED
        TL_ERR_ARG
        TL_ERR_OUTPUT_FULL

        TL_CS_UNKNOWN
        TL_CS_GRAY
        TL_CS_RGB
        TL_CS_YCBCR
        TL_CS_CMYK
        TL_CS_YCCK

        TL_STRICT
        TL_FAST_DCT
        TL_NO_FANCY_UPSAMPLING
        TL_STOCK_HUFFMAN
        TL_HUFF_BMI2
        TL_WIDE_MARGIN

    ctypedef struct tl_jpeg_info:
        int width
        int height
        int components
        int color_space
        int progressive
        int h_samp[4]
        int v_samp[4]
        int adobe
        int restart_interval

    long long tl_jpeg_scaled_dim(long long dim, int num)
    size_t TL_RST_SCRATCH(size_t size)
    size_t TL_TRANSCODE_BOUND(size_t size)

    int tl_jpeg_read_header(const unsigned char *data, size_t size, tl_jpeg_info *info,
                            char *errmsg)

    int tl_jpeg_decode(const unsigned char *data, size_t size, int scale_num,
                       int crop_x, int crop_y, int crop_w, int crop_h,
                       unsigned char *out, ptrdiff_t out_stride, size_t out_size,
                       int flags, long long max_pixels,
                       char *errmsg, int *n_warnings, char *warnmsg)

    int tl_jpeg_decode_wide(const unsigned char *data, size_t size, int scale_num,
                            int crop_x, int crop_y, int crop_w, int crop_h,
                            unsigned char *out, ptrdiff_t out_stride, size_t out_size,
                            int flags, long long max_pixels,
                            char *errmsg, int *n_warnings, char *warnmsg, int *col_offset)

    int tl_jpeg_decode_rst(const unsigned char *data, size_t size, int scale_num,
                           int crop_x, int crop_y, int crop_w, int crop_h,
                           unsigned char *out, ptrdiff_t out_stride, size_t out_size,
                           int flags, long long max_pixels,
                           char *errmsg, int *n_warnings, char *warnmsg,
                           unsigned char *scratch, size_t scratch_size, int *used)

    int tl_jpeg_decode_wide_rst(const unsigned char *data, size_t size, int scale_num,
                                int crop_x, int crop_y, int crop_w, int crop_h,
                                unsigned char *out, ptrdiff_t out_stride, size_t out_size,
                                int flags, long long max_pixels,
                                char *errmsg, int *n_warnings, char *warnmsg, int *col_offset,
                                unsigned char *scratch, size_t scratch_size, int *used)

    int tl_jpeg_restart_window(const unsigned char *data, size_t size, int scale_num,
                               int crop_x, int crop_y, int crop_w, int crop_h, int sub[4])

    int tl_jpeg_transcode_restart(const unsigned char *data, size_t size, int restart_mcus,
                                  int optimize, unsigned char *out, size_t out_cap,
                                  size_t *out_size, int *restart_used, long long max_pixels,
                                  char *errmsg)

    int tl_jpeg_huffman_own(const unsigned char *data, size_t size, int scale_num, int flags,
                            char *errmsg)
