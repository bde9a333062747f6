"""The fused sample path: JPEG bytes -> window decode -> resample -> (flip) -> CHW slot.

One call, one `with nogil:` block: libjpeg-turbo decodes only the window (at a DCT scale
chosen by the caller), the antialiased resampler writes the output size, and the
normalize/CHW kernel writes straight into the caller's batch slot. Temporaries and the
resample plan are allocated with the GIL held before the block and freed after it.
"""

from libc.stdint cimport uint8_t
from libc.stdlib cimport free, malloc

from turboloader._native._imgproc cimport (
    ResamplePlan, chw_u8, normalize_chw_f32, resample_plan_free, resample_plan_init,
    resample_run,
)
from turboloader._native.jpeg_shim cimport TL_ERR_ARG, TL_MSG_LEN, TL_OK, tl_jpeg_decode

from turboloader.errors import DecodeError


cdef str _text(const char *msg):
    return msg.decode("ascii", "replace")


cdef int _run(const uint8_t[::1] data, int scale_num, bint full, int wx, int wy, int ww, int wh,
              double bx0, double by0, double bx1, double by1, int filt, bint flip,
              Py_ssize_t oh, Py_ssize_t ow, float* fout, uint8_t* uout,
              const float* scale, const float* bias, int flags, long long max_pixels,
              int* n_warnings, char* warnmsg) except -1:
    # GIL held on entry and exit; only the middle block runs without it.
    cdef char errmsg[TL_MSG_LEN]
    cdef ResamplePlan plan
    cdef uint8_t* window = NULL
    cdef uint8_t* resized = NULL
    cdef const uint8_t* pixels
    cdef Py_ssize_t stride
    cdef int status = TL_OK, kstatus = 0
    cdef bint identity = (ww == ow and wh == oh and bx0 == 0 and by0 == 0
                          and bx1 == ww and by1 == wh)
    cdef const unsigned char* src = &data[0] if data.shape[0] > 0 else NULL
    cdef size_t size = <size_t>data.shape[0]
    errmsg[0] = 0
    window = <uint8_t*>malloc(<size_t>ww * wh * 3)
    if not identity:
        resized = <uint8_t*>malloc(<size_t>oh * ow * 3)
    try:
        if window == NULL or (not identity and resized == NULL):
            raise MemoryError()
        if not identity:
            resample_plan_init(&plan, wh, ww, oh, ow, 3, bx0, by0, bx1, by1, filt)
        with nogil:
            status = tl_jpeg_decode(src, size, scale_num,
                                    0 if full else wx, 0 if full else wy,
                                    0 if full else ww, 0 if full else wh,
                                    window, ww * 3, <size_t>ww * wh * 3, flags, max_pixels,
                                    errmsg, n_warnings, warnmsg)
            if status == TL_OK:
                pixels, stride = window, ww * 3
                if not identity:
                    kstatus = resample_run(&plan, window, ww * 3, resized, ow * 3)
                    pixels, stride = resized, ow * 3
                if kstatus == 0:
                    if fout != NULL:
                        kstatus = normalize_chw_f32(pixels, oh, ow, stride, fout, scale, bias, flip)
                    else:
                        kstatus = chw_u8(pixels, oh, ow, stride, uout, flip)
    finally:
        if not identity:
            resample_plan_free(&plan)
        free(window)
        free(resized)
    if status == TL_ERR_ARG:
        raise ValueError(_text(errmsg))
    if status != TL_OK:
        raise DecodeError(_text(errmsg) or f"JPEG decode failed (status {status})")
    if kstatus != 0:
        raise ValueError(f"image kernel rejected its arguments (status {kstatus})")
    return 0


def decode_resample_into(const uint8_t[::1] data, out, /, *, int scale_num, bint full,
                         int win_x, int win_y, int win_w, int win_h, box, int filter,
                         bint flip, mean_scale=None, bias=None, int flags=0,
                         long long max_pixels=0):
    """Decode the window [win_x, +win_w) x [win_y, +win_h) of the image at scale
    scale_num/8 (the whole scaled image when `full`), resample the source `box`
    (x0, y0, x1, y1, in window coordinates; the filter is clipped at the window's edges)
    to out's size, flip if asked, and write CHW into `out`: float32 (3, H, W) as
    pixel * mean_scale[c] + bias[c], or uint8 (3, H, W). `out` must be C-contiguous.
    Returns (n_warnings, first_warning). Raises DecodeError on bad data, ValueError on
    bad arguments."""
    cdef float[:, :, ::1] fview
    cdef uint8_t[:, :, ::1] uview
    cdef float sc[3]
    cdef float bi[3]
    cdef float* fptr = NULL
    cdef uint8_t* uptr = NULL
    cdef char warnmsg[TL_MSG_LEN]
    cdef int n_warnings = 0
    cdef Py_ssize_t oh, ow
    cdef double bx0, by0, bx1, by1
    warnmsg[0] = 0
    if win_w <= 0 or win_h <= 0 or win_x < 0 or win_y < 0:
        raise ValueError(f"empty or negative window {(win_x, win_y, win_w, win_h)}")
    bx0, by0, bx1, by1 = box
    if not (0 <= bx0 < bx1 <= win_w and 0 <= by0 < by1 <= win_h):
        raise ValueError(f"box {tuple(box)} is not inside the {win_w} x {win_h} window")
    if out.dtype.char == "f":
        fview = out
        if fview.shape[0] != 3:
            raise ValueError(f"out must have shape (3, H, W), got {out.shape}")
        if mean_scale is None or bias is None or len(mean_scale) != 3 or len(bias) != 3:
            raise ValueError("float32 output needs 3 scale and 3 bias values")
        for c in range(3):
            sc[c] = mean_scale[c]
            bi[c] = bias[c]
        oh, ow = fview.shape[1], fview.shape[2]
        fptr = &fview[0, 0, 0] if oh > 0 and ow > 0 else NULL
    elif out.dtype.char == "B":
        uview = out
        if uview.shape[0] != 3:
            raise ValueError(f"out must have shape (3, H, W), got {out.shape}")
        oh, ow = uview.shape[1], uview.shape[2]
        uptr = &uview[0, 0, 0] if oh > 0 and ow > 0 else NULL
    else:
        raise TypeError(f"out must be float32 or uint8, got {out.dtype}")
    if oh <= 0 or ow <= 0:
        raise ValueError(f"out must not be empty, got shape {out.shape}")
    _run(data, scale_num, full, win_x, win_y, win_w, win_h, bx0, by0, bx1, by1, filter, flip,
         oh, ow, fptr, uptr, sc, bi, flags, max_pixels, &n_warnings, warnmsg)
    return n_warnings, (_text(warnmsg) if n_warnings else "")
