"""The fused sample path: JPEG bytes (or a decoded array) -> window -> resample -> colour
adjustments -> (flip) -> CHW slot.

One call, one `with nogil:` block: libjpeg-turbo decodes only the window (at a DCT scale
chosen by the caller) or the window is read in place from an HWC array, the antialiased
resampler writes the output size, the ColorJitter kernels run on the resized uint8 image in
the caller's order, and the normalize/CHW kernel writes straight into the caller's batch
slot. Temporaries and the resample plan are allocated with the GIL held before the block and
freed after it.
"""

from libc.stdint cimport uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from turboloader._native._chw cimport chw_u8, normalize_chw_f32
from turboloader._native._colour cimport (
    adjust_brightness_u8, adjust_contrast_u8, adjust_hue_u8, adjust_saturation_u8,
)
from turboloader._native._common cimport IMGPROC_OK
from turboloader._native._resample cimport (
    ResamplePlan, resample_plan_free, resample_plan_init, resample_run,
)
from turboloader._native.jpeg_shim cimport TL_ERR_ARG, TL_MSG_LEN, TL_OK, tl_jpeg_decode

from turboloader.errors import DecodeError

# Colour operations, numbered as torchvision's ColorJitter `fn_idx`.
BRIGHTNESS = 0
CONTRAST = 1
SATURATION = 2
HUE = 3

cdef enum:
    MAX_OPS = 8


cdef str _text(const char *msg):
    return msg.decode("ascii", "replace")


cdef int _colour(int op, uint8_t* img, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride,
                 double factor) noexcept nogil:
    if op == 0:
        return adjust_brightness_u8(img, h, w, stride, 3, factor)
    if op == 1:
        return adjust_contrast_u8(img, h, w, stride, 3, factor)
    if op == 2:
        return adjust_saturation_u8(img, h, w, stride, 3, factor)
    if op == 3:
        return adjust_hue_u8(img, h, w, stride, 3, factor)
    return -5


cdef int _run(const uint8_t* src, size_t size, const uint8_t* arr, Py_ssize_t arr_stride,
              int scale_num, bint full, int wx, int wy, int ww, int wh,
              double bx0, double by0, double bx1, double by1, int filt, bint flip,
              int n_ops, const int* ops, const double* factors,
              Py_ssize_t oh, Py_ssize_t ow, float* fout, uint8_t* uout,
              const float* scale, const float* bias, int flags, long long max_pixels,
              int* n_warnings, char* warnmsg) except -1:
    # GIL held on entry and exit; only the middle block runs without it.
    # Source: the JPEG `src` (arr == NULL), decoded into a temporary window buffer, or the
    # window at (wx, wy) of the HWC array `arr` (rows arr_stride bytes apart), read in place.
    cdef char errmsg[TL_MSG_LEN]
    cdef ResamplePlan plan
    cdef uint8_t* window = NULL
    cdef uint8_t* resized = NULL
    cdef const uint8_t* wpix
    cdef const uint8_t* pixels
    cdef Py_ssize_t wstride, stride, y
    cdef int status = TL_OK, kstatus = 0, i
    cdef bint identity = (ww == ow and wh == oh and bx0 == 0 and by0 == 0
                          and bx1 == ww and by1 == wh)
    # the colour kernels work in place: they need a buffer of our own at the output size
    cdef bint need_resized = (not identity) or (n_ops > 0 and arr != NULL)
    errmsg[0] = 0
    if arr == NULL:
        window = <uint8_t*>malloc(<size_t>ww * wh * 3)
    if need_resized:
        resized = <uint8_t*>malloc(<size_t>oh * ow * 3)
    try:
        if (arr == NULL and window == NULL) or (need_resized and resized == NULL):
            raise MemoryError()
        if not identity:
            resample_plan_init(&plan, wh, ww, oh, ow, 3, bx0, by0, bx1, by1, filt)
        with nogil:
            if arr == NULL:
                status = tl_jpeg_decode(src, size, scale_num,
                                        0 if full else wx, 0 if full else wy,
                                        0 if full else ww, 0 if full else wh,
                                        window, ww * 3, <size_t>ww * wh * 3, flags, max_pixels,
                                        errmsg, n_warnings, warnmsg)
                wpix, wstride = window, ww * 3
            else:
                wpix, wstride = arr + wy * arr_stride + <Py_ssize_t>wx * 3, arr_stride
            if status == TL_OK:
                pixels, stride = wpix, wstride
                if not identity:
                    kstatus = resample_run(&plan, wpix, wstride, resized, ow * 3)
                    pixels, stride = resized, ow * 3
                elif need_resized:
                    for y in range(oh):
                        memcpy(resized + y * ow * 3, wpix + y * wstride, <size_t>ow * 3)
                    pixels, stride = resized, ow * 3
                i = 0
                while kstatus == 0 and i < n_ops:
                    # pixels is `window` or `resized` here: both are ours and writable
                    kstatus = _colour(ops[i], <uint8_t*>pixels, oh, ow, stride, factors[i])
                    i += 1
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


cdef class _Out:
    # The validated output slot and per-channel affine (GIL held).
    cdef float[:, :, ::1] fview
    cdef uint8_t[:, :, ::1] uview
    cdef float sc[3]
    cdef float bi[3]
    cdef float* fptr
    cdef uint8_t* uptr
    cdef Py_ssize_t oh, ow

    def __init__(self, out, mean_scale, bias):
        self.fptr = NULL
        self.uptr = NULL
        if out.dtype.char == "f":
            self.fview = out
            if self.fview.shape[0] != 3:
                raise ValueError(f"out must have shape (3, H, W), got {out.shape}")
            if mean_scale is None or bias is None or len(mean_scale) != 3 or len(bias) != 3:
                raise ValueError("float32 output needs 3 scale and 3 bias values")
            for c in range(3):
                self.sc[c] = mean_scale[c]
                self.bi[c] = bias[c]
            self.oh, self.ow = self.fview.shape[1], self.fview.shape[2]
            if self.oh > 0 and self.ow > 0:
                self.fptr = &self.fview[0, 0, 0]
        elif out.dtype.char == "B":
            self.uview = out
            if self.uview.shape[0] != 3:
                raise ValueError(f"out must have shape (3, H, W), got {out.shape}")
            self.oh, self.ow = self.uview.shape[1], self.uview.shape[2]
            if self.oh > 0 and self.ow > 0:
                self.uptr = &self.uview[0, 0, 0]
        else:
            raise TypeError(f"out must be float32 or uint8, got {out.dtype}")
        if self.oh <= 0 or self.ow <= 0:
            raise ValueError(f"out must not be empty, got shape {out.shape}")


cdef int _check_window(int win_x, int win_y, int win_w, int win_h, box, double* b) except -1:
    if win_w <= 0 or win_h <= 0 or win_x < 0 or win_y < 0:
        raise ValueError(f"empty or negative window {(win_x, win_y, win_w, win_h)}")
    b[0], b[1], b[2], b[3] = box
    if not (0 <= b[0] < b[2] <= win_w and 0 <= b[1] < b[3] <= win_h):
        raise ValueError(f"box {tuple(box)} is not inside the {win_w} x {win_h} window")
    return 0


cdef int _check_ops(ops, int* kinds, double* factors) except -1:
    n = len(ops)
    if n > MAX_OPS:
        raise ValueError(f"at most {MAX_OPS} colour operations, got {n}")
    for i, (kind, factor) in enumerate(ops):
        if kind not in (0, 1, 2, 3):
            raise ValueError(f"unknown colour operation {kind!r}")
        factor = float(factor)
        if kind == 3 and not (-0.5 <= factor <= 0.5):
            raise ValueError(f"hue_factor ({factor}) is not in [-0.5, 0.5].")
        if kind != 3 and not factor >= 0:
            raise ValueError(f"colour factor ({factor}) is not non-negative.")
        kinds[i] = kind
        factors[i] = factor
    return <int>n


def decode_resample_into(const uint8_t[::1] data, out, /, *, int scale_num, bint full,
                         int win_x, int win_y, int win_w, int win_h, box, int filter,
                         bint flip, ops=(), mean_scale=None, bias=None, int flags=0,
                         long long max_pixels=0):
    """Decode the window [win_x, +win_w) x [win_y, +win_h) of the image at scale
    scale_num/8 (the whole scaled image when `full`), resample the source `box`
    (x0, y0, x1, y1, in window coordinates; the filter is clipped at the window's edges)
    to out's size, apply the colour `ops` ((kind, factor) pairs, kind BRIGHTNESS..HUE, in
    order, torchvision uint8 semantics), flip if asked, and write CHW into `out`: float32
    (3, H, W) as pixel * mean_scale[c] + bias[c], or uint8 (3, H, W). `out` must be
    C-contiguous. Returns (n_warnings, first_warning). Raises DecodeError on bad data,
    ValueError on bad arguments."""
    cdef char warnmsg[TL_MSG_LEN]
    cdef int n_warnings = 0, n_ops
    cdef double b[4]
    cdef int kinds[MAX_OPS]
    cdef double factors[MAX_OPS]
    warnmsg[0] = 0
    _check_window(win_x, win_y, win_w, win_h, box, b)
    n_ops = _check_ops(ops, kinds, factors)
    cdef _Out o = _Out(out, mean_scale, bias)
    _run(&data[0] if data.shape[0] > 0 else NULL, <size_t>data.shape[0], NULL, 0,
         scale_num, full, win_x, win_y, win_w, win_h, b[0], b[1], b[2], b[3], filter, flip,
         n_ops, kinds, factors, o.oh, o.ow, o.fptr, o.uptr, o.sc, o.bi, flags, max_pixels,
         &n_warnings, warnmsg)
    return n_warnings, (_text(warnmsg) if n_warnings else "")


def resample_array_into(const uint8_t[:, :, ::1] src not None, out, /, *, int win_x,
                        int win_y, int win_w, int win_h, box, int filter, bint flip, ops=(),
                        mean_scale=None, bias=None):
    """The same as decode_resample_into with an already decoded (H, W, 3) uint8 array as the
    source: the window [win_x, +win_w) x [win_y, +win_h) of `src` (which it must lie inside)
    is read in place, `src` is never written. Raises ValueError on bad arguments."""
    cdef int n_ops
    cdef double b[4]
    cdef int kinds[MAX_OPS]
    cdef double factors[MAX_OPS]
    cdef int n_warnings = 0
    cdef char warnmsg[TL_MSG_LEN]
    if src.shape[2] != 3:
        raise ValueError(f"src must have shape (H, W, 3), got ({src.shape[0]}, {src.shape[1]}, {src.shape[2]})")
    _check_window(win_x, win_y, win_w, win_h, box, b)
    if win_x + win_w > src.shape[1] or win_y + win_h > src.shape[0]:
        raise ValueError(f"window {(win_x, win_y, win_w, win_h)} is not inside the "
                         f"{src.shape[1]} x {src.shape[0]} array")
    n_ops = _check_ops(ops, kinds, factors)
    cdef _Out o = _Out(out, mean_scale, bias)
    _run(NULL, 0, &src[0, 0, 0], src.strides[0], 8, False, win_x, win_y, win_w, win_h,
         b[0], b[1], b[2], b[3], filter, flip, n_ops, kinds, factors, o.oh, o.ow, o.fptr,
         o.uptr, o.sc, o.bi, 0, 0, &n_warnings, warnmsg)
    return None
