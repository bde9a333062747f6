"""Python-facing wrappers around jpeg_shim (libjpeg-turbo). Validation and policy live in
turboloader.jpeg; this module only checks what the C call's memory safety needs, releases the
GIL around the decode, and turns status codes into exceptions."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stddef cimport ptrdiff_t
from libc.stdint cimport uint8_t
from libc.stdlib cimport free, malloc

from turboloader._native._cpu cimport huffman_bmi2
from turboloader._native.jpeg_shim cimport (
    TL_CS_CMYK, TL_CS_GRAY, TL_CS_RGB, TL_CS_YCBCR, TL_CS_YCCK, TL_ERR_ARG, TL_FAST_DCT,
    TL_ERR_OUTPUT_FULL, TL_HUFF_BMI2, TL_MAX_SCANS, TL_MSG_LEN, TL_NO_FANCY_UPSAMPLING, TL_OK,
    TL_RST_SCRATCH, TL_STOCK_HUFFMAN, TL_STRICT, TL_TRANSCODE_BOUND, tl_jpeg_decode_rst,
    tl_jpeg_huffman_own, tl_jpeg_info,
    tl_jpeg_read_header, tl_jpeg_restart_window, tl_jpeg_transcode_restart,
)

from turboloader.errors import DecodeError

STRICT = TL_STRICT
FAST_DCT = TL_FAST_DCT
NO_FANCY_UPSAMPLING = TL_NO_FANCY_UPSAMPLING
STOCK_HUFFMAN = TL_STOCK_HUFFMAN
MAX_SCANS = TL_MAX_SCANS

_COLOR_SPACES = {
    TL_CS_GRAY: "gray",
    TL_CS_RGB: "rgb",
    TL_CS_YCBCR: "ycbcr",
    TL_CS_CMYK: "cmyk",
    TL_CS_YCCK: "ycck",
}


cdef inline int _isa_flags(int flags) noexcept nogil:
    # TL_HUFF_BMI2 from the dispatch level alone (a caller's bit could ask for instructions
    # this CPU lacks)
    return (flags & ~TL_HUFF_BMI2) | (TL_HUFF_BMI2 if huffman_bmi2() else 0)


cdef str _text(const char *msg):
    return msg.decode("ascii", "replace")


cdef int _check(int status, const char *errmsg) except -1:
    # Called with the GIL held, after the nogil section.
    if status == TL_OK:
        return 0
    if status == TL_ERR_ARG:
        raise ValueError(_text(errmsg))
    raise DecodeError(_text(errmsg) or f"JPEG decode failed (status {status})")


def read_header(const uint8_t[::1] data, /):
    """Parse a JPEG's header. Returns (width, height, components, color_space, progressive,
    h_samp, v_samp, adobe); raises DecodeError on bad data."""
    cdef tl_jpeg_info info
    cdef char errmsg[TL_MSG_LEN]
    cdef const unsigned char *ptr = &data[0] if data.shape[0] > 0 else NULL
    cdef size_t size = <size_t>data.shape[0]
    cdef int status
    with nogil:
        status = tl_jpeg_read_header(ptr, size, &info, errmsg)
    _check(status, errmsg)
    n = min(info.components, 4)
    return (
        info.width,
        info.height,
        info.components,
        _COLOR_SPACES.get(info.color_space, "unknown"),
        bool(info.progressive),
        tuple(info.h_samp[i] for i in range(n)),
        tuple(info.v_samp[i] for i in range(n)),
        bool(info.adobe),
    )


def decode_into(const uint8_t[::1] data, uint8_t[:, :, :] out, /, *, int scale_num=8,
                int crop_x=0, int crop_y=0, int crop_w=0, int crop_h=0, int flags=0,
                long long max_pixels=0, bint restart=True):
    """Decode into `out` (H, W, 3) uint8 whose last two dims are contiguous (rows may be
    strided). crop_w == crop_h
    == 0 decodes the whole image at scale scale_num/8 (out must then be that size); otherwise
    the crop window, whose size must equal out's. restart: a crop of a file with restart
    markers entropy-decodes only the intervals it needs (same pixels; False: never).
    Returns (n_warnings, first_warning); raises DecodeError on bad data, ValueError on bad
    arguments."""
    cdef char errmsg[TL_MSG_LEN]
    cdef char warnmsg[TL_MSG_LEN]
    cdef int n_warnings = 0
    cdef int status
    cdef Py_ssize_t h = out.shape[0], w = out.shape[1]
    cdef ptrdiff_t stride
    cdef size_t out_size
    cdef const unsigned char *ptr = &data[0] if data.shape[0] > 0 else NULL
    cdef size_t size = <size_t>data.shape[0]
    if out.shape[2] != 3:
        raise ValueError(f"out must have 3 channels, got {out.shape[2]}")
    if h == 0 or w == 0:
        raise ValueError("out must not be empty")
    if out.strides[2] != 1 or (w > 1 and out.strides[1] != 3):
        raise ValueError("out's last two dimensions must be contiguous")
    stride = out.strides[0] if h > 1 else 3 * w
    if stride < 3 * w:
        raise ValueError("out's rows overlap or run backwards (row stride < 3 * width)")
    if (crop_w or crop_h) and (crop_w != w or crop_h != h):
        raise ValueError(f"out has shape ({h}, {w}, 3) but the crop is {crop_h} x {crop_w}")
    out_size = <size_t>((h - 1) * stride + 3 * w)
    cdef unsigned char *scratch = NULL
    cdef size_t scratch_size = 0
    cdef int sub[4]
    cdef int applies = 0
    if restart and crop_w > 0 and crop_h > 0:
        with nogil:  # markers only: most files have no restart markers, and need no scratch
            applies = tl_jpeg_restart_window(ptr, size, scale_num, crop_x, crop_y, crop_w,
                                             crop_h, sub)
    if applies:
        scratch_size = TL_RST_SCRATCH(size)
        scratch = <unsigned char *>malloc(scratch_size)
        if scratch == NULL:
            scratch_size = 0
    try:
        with nogil:
            status = tl_jpeg_decode_rst(ptr, size, scale_num, crop_x, crop_y, crop_w, crop_h,
                                        &out[0, 0, 0], stride, out_size, _isa_flags(flags),
                                        max_pixels, errmsg, &n_warnings, warnmsg, scratch,
                                        scratch_size, NULL)
    finally:
        free(scratch)
    _check(status, errmsg)
    return n_warnings, (_text(warnmsg) if n_warnings else "")


def restart_window(const uint8_t[::1] data, /, *, int scale_num, int crop_x, int crop_y,
                   int crop_w, int crop_h):
    """The sub-image ``(x, y, width, height)`` (full-resolution pixels) that a crop's decode
    entropy-decodes through the file's restart intervals, or None when that path does not
    apply (no restart markers, intervals that wrap rows, progressive, a window that would
    not save work, ...). Parses markers only."""
    cdef int sub[4]
    cdef int ok
    cdef const unsigned char *ptr = &data[0] if data.shape[0] > 0 else NULL
    cdef size_t size = <size_t>data.shape[0]
    with nogil:
        ok = tl_jpeg_restart_window(ptr, size, scale_num, crop_x, crop_y, crop_w, crop_h, sub)
    return (sub[0], sub[1], sub[2], sub[3]) if ok else None


def transcode_restart(const uint8_t[::1] data, /, *, int restart_mcus=0, bint optimize=True,
                      long long max_pixels=0):
    """Losslessly rewrite a JPEG (baseline or progressive) as a baseline JPEG with a restart
    marker every ``restart_mcus`` MCUs (0: the smallest divisor of the MCUs per row whose
    markers add at most ~3% to the size; the whole row when none does).
    Returns ``(jpeg_bytes, restart_mcus_used)``; raises DecodeError on bad data."""
    cdef char errmsg[TL_MSG_LEN]
    cdef const unsigned char *ptr = &data[0] if data.shape[0] > 0 else NULL
    cdef size_t size = <size_t>data.shape[0]
    cdef size_t cap = TL_TRANSCODE_BOUND(size), n = 0
    cdef int used = 0, status
    cdef bytes out
    cdef unsigned char *dst
    while True:
        # sized first, trimmed after: bytes are immutable only once handed out
        out = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>cap)
        dst = <unsigned char *>PyBytes_AS_STRING(out)
        with nogil:
            status = tl_jpeg_transcode_restart(ptr, size, restart_mcus, optimize, dst, cap,
                                               &n, &used, max_pixels, errmsg)
        if status != TL_ERR_OUTPUT_FULL:
            break
        cap *= 2
    _check(status, errmsg)
    return out[:n], used


def huffman_decoder(const uint8_t[::1] data, /, *, int scale_num=8, int flags=0,
                    bint build=False):
    """Which Huffman decoder a decode of ``data`` at ``scale_num``/8 with ``flags`` runs:
    ``"turboloader"`` (``_native/jpeg_huffman.c``) or ``"libjpeg"``; raises DecodeError on a
    bad header. ``build``: ``"turboloader-bmi2"`` for its BMI2 build (at the avx2 dispatch
    level on a CPU with BMI2). For tests and benchmarks: all give the same pixels."""
    cdef char errmsg[TL_MSG_LEN]
    cdef const unsigned char *ptr = &data[0] if data.shape[0] > 0 else NULL
    cdef size_t size = <size_t>data.shape[0]
    cdef int status
    with nogil:
        status = tl_jpeg_huffman_own(ptr, size, scale_num, _isa_flags(flags), errmsg)
    if status < 0:
        _check(status, errmsg)
    if status == 0:
        return "libjpeg"
    return "turboloader-bmi2" if build and status == 2 else "turboloader"
