"""The fused sample path: JPEG bytes (or a decoded array) -> window -> resample -> colour
adjustments -> (flip) -> CHW slot, for one sample or a whole batch.

One implementation, `_sample` (no GIL, allocates nothing): libjpeg-turbo decodes only the
window (at a DCT scale chosen by the caller) or the window is read in place from an HWC
array, the antialiased resampler writes the output size, the ColorJitter kernels run on the
resized uint8 image in the caller's order, and the normalize/CHW kernel writes straight into
the caller's slot (a float32 slot without colour operations: written by the resampler's
vertical pass itself, 32 pixels at a time, where its AVX2 kernel applies; the same values
bit for bit). Its working memory (window, resized image, resample tables) is a
`_Scratch` sized with the GIL held before the call.

* `decode_resample_into` / `resample_array_into`: one sample; scratch allocated for the call.
* `run_batch`: every sample of a batch in one `with nogil:` block, spread over a
  `BatchRunner`'s threads; each thread has its own scratch, kept (grown only) across batches.
  A bad sample is a status for its row, never an exception for the batch.
* `read_headers`: the JPEG headers of a batch in one `with nogil:` pass.
* `plain_buffers`, `plan_windows`: the executor's per-row loops of a batch's plan (sources
  to classify, DCT scale, windows, argument checks).
"""

cimport cython
from cpython.buffer cimport PyBUF_FORMAT, PyBUF_SIMPLE, PyBUF_STRIDES, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.memoryview cimport PyMemoryView_Check, PyMemoryView_GET_BUFFER
from libc.math cimport ceil, floor
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcpy, memset, strcmp
from posix.stdlib cimport posix_memalign
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec
from posix.types cimport pid_t
from posix.unistd cimport getpid

from turboloader._native._chw cimport chw_u8, normalize_chw_f32
from turboloader._native._colour cimport (
    adjust_brightness_u8, adjust_contrast_u8, adjust_hue_u8, adjust_saturation_u8,
)
from turboloader._native._common cimport (
    IMGPROC_EARG, IMGPROC_EBADSIZE, IMGPROC_EBOUNDS, IMGPROC_EPLAN, IMGPROC_ESTRIDE, IMGPROC_OK,
)
from turboloader._native._resample cimport (
    RUN_U8, ResamplePlan, resample_plan_init_in, resample_plan_size, resample_run,
    resample_run_chw_f32,
)
from turboloader._native._cpu cimport huffman_bmi2
from turboloader._native.jpeg_shim cimport (
    TL_ERR_ARG, TL_HUFF_BMI2, TL_MSG_LEN, TL_OK, TL_RST_SCRATCH, TL_WIDE_MARGIN,
    tl_jpeg_decode_wide_rst,
    tl_jpeg_info, tl_jpeg_read_header,
)

import threading

import numpy as np

from turboloader.errors import DecodeError

# Colour operations, numbered as torchvision's ColorJitter `fn_idx`.
BRIGHTNESS = 0
CONTRAST = 1
SATURATION = 2
HUE = 3

cdef enum:
    MAX_OPS = 8
    ALIGN = 64
    # libjpeg-turbo's SIMD colour conversion writes an output row with non-temporal stores
    # (to memory, out of the cache) when the row starts on a 16-byte (SSE2) or 32-byte (AVX2)
    # boundary; the resampler then reads the window back from memory. Rows 8 bytes past a
    # 32-byte boundary take its ordinary stores and stay in the cache for the resampler.
    WINDOW_SKEW = 8

# A thread's scratch buffer larger than this is freed after its batch: one huge image must
# not hold its memory for the runner's lifetime (ordinary photos stay far below it).
cdef size_t SCRATCH_KEEP = 16 << 20

MAX_COLOUR_OPS = MAX_OPS

cdef extern from "batch_pool.h" nogil:
    ctypedef struct tl_pool:
        pass
    ctypedef void (*tl_pool_fn)(void* ctx, long item, int thread) noexcept nogil
    tl_pool* tl_pool_create(int threads, char* errmsg)
    int tl_pool_threads(const tl_pool* pool)
    pid_t tl_pool_pid(const tl_pool* pool)
    void tl_pool_run(tl_pool* pool, tl_pool_fn fn, void* ctx, long n_items)
    void tl_pool_destroy(tl_pool* pool)


cdef struct _Sample:
    # One sample: inputs filled with the GIL held, outcome written by _sample.
    const uint8_t* src          # the JPEG file (arr == NULL) ...
    size_t size
    const uint8_t* arr          # ... or the top-left pixel of a decoded HWC uint8 array
    Py_ssize_t arr_stride       # its row stride (channels and pixels contiguous)
    Py_ssize_t arr_h, arr_w
    int scale_num               # JPEG: decode at scale_num / 8
    bint full                   # JPEG: the window is the whole scaled image
    int wx, wy, ww, wh          # window, in decoded (scaled) pixels
    double bx0, by0, bx1, by1   # source box inside the window
    bint flip
    int n_ops
    int ops[MAX_OPS]
    double factors[MAX_OPS]
    float* fout                 # CHW output slot: float32 ...
    uint8_t* uout               # ... or uint8
    int status                  # TL_OK or the decoder's TL_ERR_*
    int kstatus                 # IMGPROC_OK or a kernel's status
    int n_warnings
    char errmsg[TL_MSG_LEN]
    char warnmsg[TL_MSG_LEN]


cdef struct _Common:
    # What every sample of a call shares.
    Py_ssize_t oh, ow
    int filt
    float scale[3]
    float bias[3]
    int flags
    long long max_pixels


cdef struct _Scratch:
    # One thread's working memory (64-byte aligned blocks; grown with the GIL, never shrunk).
    uint8_t* window
    size_t window_cap
    uint8_t* resized
    size_t resized_cap
    uint8_t* plan
    size_t plan_cap
    uint8_t* stream             # a restart-interval sub-image's JPEG (jpeg_shim.h)
    size_t stream_cap


cdef str _text(const char *msg):
    return msg.decode("ascii", "replace")


cdef inline double _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef inline bint _identity(const _Sample* s, const _Common* c) noexcept nogil:
    return (s.ww == c.ow and s.wh == c.oh and s.bx0 == 0 and s.by0 == 0
            and s.bx1 == s.ww and s.by1 == s.wh)


cdef inline size_t _window_stride(const _Sample* s) noexcept nogil:
    # JPEG window rows are TL_WIDE_MARGIN pixels wider (libjpeg decodes straight into them),
    # rounded up to whole 32-byte blocks so that every row starts WINDOW_SKEW bytes past one.
    return ((<size_t>s.ww + TL_WIDE_MARGIN) * 3 + 31) & ~(<size_t>31)


cdef inline size_t _window_bytes(const _Sample* s) noexcept nogil:
    # the buffer's bytes: the rows from WINDOW_SKEW on (the buffer is ALIGN-aligned)
    return _window_stride(s) * s.wh + WINDOW_SKEW


cdef void _needs(const _Sample* s, const _Common* c, size_t* window, size_t* resized,
                 size_t* plan, size_t* stream) noexcept nogil:
    # Scratch bytes `_sample` needs for s (0 where it needs none, or where the arguments are
    # invalid: _sample then fails before touching that buffer).
    cdef bint identity = _identity(s, c)
    window[0] = resized[0] = plan[0] = stream[0] = 0
    if s.ww <= 0 or s.wh <= 0 or c.oh <= 0 or c.ow <= 0:
        return
    if s.arr == NULL:
        window[0] = _window_bytes(s)
        if not s.full:
            stream[0] = TL_RST_SCRATCH(s.size)
    if (not identity) or (s.n_ops > 0 and s.arr != NULL):
        resized[0] = <size_t>c.oh * c.ow * 3
    if not identity:
        plan[0] = resample_plan_size(s.wh, s.ww, c.oh, c.ow, 3, s.bx0, s.by0, s.bx1, s.by1,
                                     c.filt)


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
    return IMGPROC_EARG


cdef void _sample(_Sample* s, const _Common* c, _Scratch* sc) noexcept nogil:
    # Decode/read the window, resample, colour ops, flip, CHW write; outcome in s.status,
    # s.kstatus, s.n_warnings and the messages. No GIL; no allocation outside libjpeg's own.
    # Re-checks every invariant its memory accesses depend on (the callers checked them too).
    cdef ResamplePlan plan
    cdef const uint8_t* wpix
    cdef const uint8_t* pixels
    cdef Py_ssize_t wstride, stride, y
    cdef int i, st, col = 0
    cdef bint identity = _identity(s, c)
    cdef bint need_resized = (not identity) or (s.n_ops > 0 and s.arr != NULL)
    s.status = TL_OK
    s.kstatus = IMGPROC_OK
    s.n_warnings = 0
    s.errmsg[0] = 0
    s.warnmsg[0] = 0
    if (s.ww <= 0 or s.wh <= 0 or s.wx < 0 or s.wy < 0 or c.oh <= 0 or c.ow <= 0
            or s.n_ops < 0 or s.n_ops > MAX_OPS or (s.fout == NULL and s.uout == NULL)):
        s.kstatus = IMGPROC_EBADSIZE
        return
    if s.arr != NULL:
        if (s.arr_stride < s.arr_w * 3 or s.wx + <Py_ssize_t>s.ww > s.arr_w
                or s.wy + <Py_ssize_t>s.wh > s.arr_h):
            s.kstatus = IMGPROC_EBOUNDS
            return
    elif sc.window == NULL or sc.window_cap < _window_bytes(s):
        s.kstatus = IMGPROC_EPLAN
        return
    if need_resized and (sc.resized == NULL or sc.resized_cap < <size_t>c.oh * c.ow * 3):
        s.kstatus = IMGPROC_EPLAN
        return
    if not identity:
        s.kstatus = resample_plan_init_in(&plan, s.wh, s.ww, c.oh, c.ow, 3, s.bx0, s.by0,
                                          s.bx1, s.by1, c.filt, sc.plan, sc.plan_cap)
        if s.kstatus != IMGPROC_OK:
            return
    if s.arr == NULL:
        wstride = <Py_ssize_t>_window_stride(s)
        # a file with restart markers: only the intervals under the window are decoded
        s.status = tl_jpeg_decode_wide_rst(s.src, s.size, s.scale_num,
                                           0 if s.full else s.wx, 0 if s.full else s.wy,
                                           0 if s.full else s.ww, 0 if s.full else s.wh,
                                           sc.window + WINDOW_SKEW, wstride,
                                           _window_bytes(s) - WINDOW_SKEW, c.flags,
                                           c.max_pixels, s.errmsg, &s.n_warnings, s.warnmsg,
                                           &col, sc.stream, sc.stream_cap, NULL)
        if s.status != TL_OK:
            return
        if col < 0 or col > TL_WIDE_MARGIN:
            s.kstatus = IMGPROC_EBOUNDS
            return
        wpix = sc.window + WINDOW_SKEW + <Py_ssize_t>col * 3
    else:
        wpix, wstride = s.arr + s.wy * s.arr_stride + <Py_ssize_t>s.wx * 3, s.arr_stride
    pixels, stride = wpix, wstride
    if not identity and s.fout != NULL and s.n_ops == 0:
        # the float32 CHW write fused into the vertical pass (RUN_U8: not here; the
        # resized image is in sc.resized and written below)
        st = resample_run_chw_f32(&plan, wpix, wstride, sc.resized, c.ow * 3, s.fout, c.scale,
                                  c.bias, s.flip)
        if st == IMGPROC_OK:
            return
        s.kstatus = IMGPROC_OK if st == RUN_U8 else st
        pixels, stride = sc.resized, c.ow * 3
    elif not identity:
        s.kstatus = resample_run(&plan, wpix, wstride, sc.resized, c.ow * 3)
        pixels, stride = sc.resized, c.ow * 3
    elif need_resized:
        for y in range(c.oh):
            memcpy(sc.resized + y * c.ow * 3, wpix + y * wstride, <size_t>c.ow * 3)
        pixels, stride = sc.resized, c.ow * 3
    i = 0
    while s.kstatus == IMGPROC_OK and i < s.n_ops:
        # pixels is the window or the resized image here: both ours and writable
        s.kstatus = _colour(s.ops[i], <uint8_t*>pixels, c.oh, c.ow, stride, s.factors[i])
        i += 1
    if s.kstatus == IMGPROC_OK:
        if s.fout != NULL:
            s.kstatus = normalize_chw_f32(pixels, c.oh, c.ow, stride, s.fout, c.scale, c.bias,
                                          s.flip)
        else:
            s.kstatus = chw_u8(pixels, c.oh, c.ow, stride, s.uout, s.flip)


cdef str _kernel_text(int kstatus):
    if kstatus == IMGPROC_EBOUNDS:
        return "window or box outside the source image"
    if kstatus == IMGPROC_EARG:
        return "colour factor out of range"
    if kstatus == IMGPROC_EPLAN:
        return "scratch buffer too small"
    if kstatus == IMGPROC_ESTRIDE:
        return "buffer rows too short"
    return "bad image size"


cdef object _error(const _Sample* s):
    # The exception a finished sample stands for, or None. GIL held.
    if s.status == TL_ERR_ARG:
        return ValueError(_text(s.errmsg))
    if s.status != TL_OK:
        return DecodeError(_text(s.errmsg) or f"JPEG decode failed (status {s.status})")
    if s.kstatus != IMGPROC_OK:
        return ValueError(f"image kernel rejected its arguments: {_kernel_text(s.kstatus)} "
                          f"(status {s.kstatus})")
    return None


cdef object _warning(const _Sample* s):
    if not s.n_warnings:
        return None
    more = f" (and {s.n_warnings - 1} more warnings)" if s.n_warnings > 1 else ""
    return f"{_text(s.warnmsg)}{more}"


cdef int _grow(uint8_t** buf, size_t* cap, size_t need) except -1:
    # GIL held. Contents are not kept.
    cdef void* p = NULL
    if need <= cap[0]:
        return 0
    need = (need + ALIGN - 1) & ~(<size_t>ALIGN - 1)
    if posix_memalign(&p, ALIGN, need) != 0:
        raise MemoryError(f"cannot allocate {need} bytes of scratch memory")
    free(buf[0])
    buf[0] = <uint8_t*>p
    cap[0] = need
    return 0


cdef void _scratch_free(_Scratch* sc) noexcept nogil:
    free(sc.window)
    free(sc.resized)
    free(sc.plan)
    free(sc.stream)
    memset(sc, 0, sizeof(_Scratch))


cdef void _scratch_trim(_Scratch* sc) noexcept nogil:
    if sc.window_cap > SCRATCH_KEEP:
        free(sc.window)
        sc.window, sc.window_cap = NULL, 0
    if sc.resized_cap > SCRATCH_KEEP:
        free(sc.resized)
        sc.resized, sc.resized_cap = NULL, 0
    if sc.plan_cap > SCRATCH_KEEP:
        free(sc.plan)
        sc.plan, sc.plan_cap = NULL, 0
    if sc.stream_cap > SCRATCH_KEEP:
        free(sc.stream)
        sc.stream, sc.stream_cap = NULL, 0


cdef int _scratch_fit(_Scratch* sc, size_t window, size_t resized, size_t plan,
                      size_t stream) except -1:
    _grow(&sc.stream, &sc.stream_cap, stream)
    _grow(&sc.window, &sc.window_cap, window)
    _grow(&sc.resized, &sc.resized_cap, resized)
    _grow(&sc.plan, &sc.plan_cap, plan)
    return 0


cdef int _run_one(_Sample* s, _Common* c) except -1:
    # One sample with scratch of its own, without the GIL; raises its error.
    cdef _Scratch sc
    cdef size_t nw, nr, npl, nst
    memset(&sc, 0, sizeof(_Scratch))
    _needs(s, c, &nw, &nr, &npl, &nst)
    try:
        _scratch_fit(&sc, nw, nr, npl, nst)
        with nogil:
            _sample(s, c, &sc)
    finally:
        _scratch_free(&sc)
    err = _error(s)
    if err is not None:
        raise err
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
            _affine(mean_scale, bias, self.sc, self.bi)
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


cdef int _affine(mean_scale, bias, float* sc, float* bi) except -1:
    if mean_scale is None or bias is None or len(mean_scale) != 3 or len(bias) != 3:
        raise ValueError("float32 output needs 3 scale and 3 bias values")
    for c in range(3):
        sc[c] = mean_scale[c]
        bi[c] = bias[c]
    return 0


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


cdef inline int _isa_flags(int flags) noexcept nogil:
    # the decoder's TL_HUFF_BMI2 from the dispatch level alone (a caller's bit could ask for
    # instructions this CPU lacks)
    return (flags & ~TL_HUFF_BMI2) | (TL_HUFF_BMI2 if huffman_bmi2() else 0)


cdef void _fill_common(_Common* c, _Out o, int filt, int flags, long long max_pixels):
    c.oh = o.oh
    c.ow = o.ow
    c.filt = filt
    c.flags = _isa_flags(flags)
    c.max_pixels = max_pixels
    memcpy(c.scale, o.sc, sizeof(c.scale))
    memcpy(c.bias, o.bi, sizeof(c.bias))


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
    cdef _Sample s
    cdef _Common c
    cdef double b[4]
    memset(&s, 0, sizeof(_Sample))
    _check_window(win_x, win_y, win_w, win_h, box, b)
    s.n_ops = _check_ops(ops, s.ops, s.factors)
    cdef _Out o = _Out(out, mean_scale, bias)
    _fill_common(&c, o, filter, flags, max_pixels)
    s.src = &data[0] if data.shape[0] > 0 else NULL
    s.size = <size_t>data.shape[0]
    s.scale_num = scale_num
    s.full = full
    s.wx, s.wy, s.ww, s.wh = win_x, win_y, win_w, win_h
    s.bx0, s.by0, s.bx1, s.by1 = b[0], b[1], b[2], b[3]
    s.flip = flip
    s.fout = o.fptr
    s.uout = o.uptr
    _run_one(&s, &c)
    return s.n_warnings, (_text(s.warnmsg) if s.n_warnings else "")


def resample_array_into(const uint8_t[:, :, ::1] src not None, out, /, *, int win_x,
                        int win_y, int win_w, int win_h, box, int filter, bint flip, ops=(),
                        mean_scale=None, bias=None):
    """The same as decode_resample_into with an already decoded (H, W, 3) uint8 array as the
    source: the window [win_x, +win_w) x [win_y, +win_h) of `src` (which it must lie inside)
    is read in place, `src` is never written. Raises ValueError on bad arguments."""
    cdef _Sample s
    cdef _Common c
    cdef double b[4]
    memset(&s, 0, sizeof(_Sample))
    if src.shape[2] != 3:
        raise ValueError(f"src must have shape (H, W, 3), got ({src.shape[0]}, {src.shape[1]}, {src.shape[2]})")
    _check_window(win_x, win_y, win_w, win_h, box, b)
    if win_x + win_w > src.shape[1] or win_y + win_h > src.shape[0]:
        raise ValueError(f"window {(win_x, win_y, win_w, win_h)} is not inside the "
                         f"{src.shape[1]} x {src.shape[0]} array")
    s.n_ops = _check_ops(ops, s.ops, s.factors)
    cdef _Out o = _Out(out, mean_scale, bias)
    _fill_common(&c, o, filter, 0, 0)
    s.arr = &src[0, 0, 0]
    s.arr_stride = src.strides[0]
    s.arr_h, s.arr_w = src.shape[0], src.shape[1]
    s.wx, s.wy, s.ww, s.wh = win_x, win_y, win_w, win_h
    s.bx0, s.by0, s.bx1, s.by1 = b[0], b[1], b[2], b[3]
    s.flip = flip
    s.fout = o.fptr
    s.uout = o.uptr
    _run_one(&s, &c)
    return None


# ---------------------------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------------------------

cdef class BatchRunner:
    """A small native thread pool that runs batch calls (``Plan.run_batch``).

    ``threads`` threads work on each batch: the calling thread and ``threads - 1`` POSIX
    threads started here (none for ``threads=1``), which never touch Python objects. Each
    thread keeps its own scratch memory (decoded window, resized image, resample tables),
    grown to the largest sample seen and reused by later batches, so a steady stream of
    similar batches allocates nothing.

    Sharing: a runner may be used from several Python threads; their batch calls run one
    at a time (a second caller waits, without the GIL, for the first to finish). For
    parallel callers give each its own runner (the default runner of ``run_batch`` is one
    1-thread runner per calling thread). After ``os.fork`` the child starts its own threads
    on first use.

    Args:
        threads: number of threads per batch, the caller's included (1..1024).

    Raises:
        ValueError: ``threads`` out of range. OSError: the threads could not be started.

    Example:
        >>> runner = BatchRunner(threads=2)
        >>> runner.threads
        2
    """

    cdef tl_pool* _pool
    cdef int _threads
    cdef _Scratch* _scratch
    cdef _Sample* _samples
    cdef Py_ssize_t _samples_cap
    cdef object _lock
    cdef pid_t _pid
    cdef object __weakref__

    def __cinit__(self, *, int threads=1):
        cdef char errmsg[200]
        if threads < 1 or threads > 1024:
            raise ValueError(f"threads must be in 1..1024, got {threads}")
        self._threads = threads
        self._scratch = <_Scratch*>malloc(threads * sizeof(_Scratch))
        if self._scratch == NULL:
            raise MemoryError()
        memset(self._scratch, 0, threads * sizeof(_Scratch))
        self._lock = threading.Lock()
        self._pid = getpid()
        self._pool = tl_pool_create(threads, errmsg)
        if self._pool == NULL:
            raise OSError(_text(errmsg))

    def __dealloc__(self):
        cdef int i
        if self._pool != NULL:
            if tl_pool_pid(self._pool) == getpid():
                with nogil:
                    tl_pool_destroy(self._pool)
            # else: a forked child's copy has no threads to stop; it is abandoned
            self._pool = NULL
        if self._scratch != NULL:
            for i in range(self._threads):
                _scratch_free(&self._scratch[i])
            free(self._scratch)
            self._scratch = NULL
        free(self._samples)
        self._samples = NULL

    @property
    def threads(self):
        """Threads per batch, the caller's included."""
        return self._threads

    def scratch_bytes(self):
        """Bytes of scratch memory held by the runner's threads (for statistics)."""
        cdef size_t total = 0
        cdef int i
        for i in range(self._threads):
            total += (self._scratch[i].window_cap + self._scratch[i].resized_cap
                      + self._scratch[i].plan_cap + self._scratch[i].stream_cap)
        return total

    def __repr__(self):
        return f"BatchRunner(threads={self._threads})"

    cdef int _check_pool(self) except -1:
        # GIL and self._lock held
        cdef char errmsg[200]
        if self._pool != NULL and tl_pool_pid(self._pool) != getpid():
            self._pool = NULL  # inherited through fork: its threads exist only in the parent
        if self._pool == NULL:
            self._pool = tl_pool_create(self._threads, errmsg)
            if self._pool == NULL:
                raise OSError(_text(errmsg))
        return 0

    cdef int _reserve(self, Py_ssize_t n) except -1:
        cdef _Sample* p
        if n <= self._samples_cap:
            return 0
        p = <_Sample*>realloc(self._samples, n * sizeof(_Sample))
        if p == NULL:
            raise MemoryError()
        self._samples = p
        self._samples_cap = n
        return 0


cdef struct _Job:
    _Sample* samples
    const _Common* common
    _Scratch* scratch


cdef void _job_item(void* ctx, long item, int thread) noexcept nogil:
    cdef _Job* job = <_Job*>ctx
    _sample(&job.samples[item], job.common, &job.scratch[thread])


cdef class _Sources:
    # The buffers of a batch's sources, held (exported) until release(). GIL held.
    cdef Py_buffer* views
    cdef Py_ssize_t n, held
    cdef list keep

    def __cinit__(self, Py_ssize_t n):
        self.views = <Py_buffer*>malloc((n if n > 0 else 1) * sizeof(Py_buffer))
        if self.views == NULL:
            raise MemoryError()
        self.n = n
        self.held = 0
        self.keep = []

    cdef int jpeg(self, obj, const uint8_t** ptr, size_t* size) except -1:
        cdef Py_buffer* v
        if PyBytes_CheckExact(obj):
            self.keep.append(obj)   # immutable: holding a reference keeps the bytes alive
            ptr[0] = <const uint8_t*>PyBytes_AS_STRING(obj)
            size[0] = <size_t>PyBytes_GET_SIZE(obj)
            return 0
        v = &self.views[self.held]
        PyObject_GetBuffer(obj, v, PyBUF_SIMPLE)   # C-contiguous bytes, or BufferError
        self.held += 1
        ptr[0] = <const uint8_t*>v.buf
        size[0] = <size_t>v.len
        return 0

    cdef int array(self, obj, _Sample* s) except -1:
        cdef Py_buffer* v = &self.views[self.held]
        PyObject_GetBuffer(obj, v, PyBUF_STRIDES | PyBUF_FORMAT)
        self.held += 1
        if (v.ndim != 3 or v.itemsize != 1 or v.format == NULL
                or not (v.format[0] == b"B" and v.format[1] == 0)):
            raise TypeError("decoded sources must be (H, W, 3) uint8 arrays")
        if (v.shape[2] != 3 or v.shape[0] <= 0 or v.shape[1] <= 0 or v.strides[2] != 1
                or v.strides[1] != 3 or v.strides[0] < 3 * v.shape[1]):
            raise ValueError("decoded sources must be (H, W, 3) uint8 arrays with contiguous "
                             f"rows, got shape {tuple(v.shape[i] for i in range(v.ndim))}")
        s.arr = <const uint8_t*>v.buf
        s.arr_h = v.shape[0]
        s.arr_w = v.shape[1]
        s.arr_stride = v.strides[0]
        return 0

    cdef void release(self):
        while self.held > 0:
            self.held -= 1
            PyBuffer_Release(&self.views[self.held])
        self.keep = []

    def __dealloc__(self):
        self.release()
        free(self.views)


@cython.boundscheck(True)
@cython.wraparound(False)
def run_batch(BatchRunner runner not None, list sources not None, out, /, *,
              const uint8_t[::1] todo, const uint8_t[::1] kind, const int64_t[::1] rows,
              const int32_t[:, ::1] window, const uint8_t[::1] full,
              const int32_t[::1] scale_num, const double[:, ::1] box,
              const uint8_t[::1] flip, const int32_t[::1] n_ops, const int32_t[:, ::1] ops,
              const double[:, ::1] factors, int filter, mean_scale=None, bias=None,
              int flags=0, long long max_pixels=0):
    """Run the samples of a batch whose `todo` is set, in one nogil call on `runner`.

    Sample i reads sources[i] (JPEG bytes when kind[i] == 0, an (H, W, 3) uint8 array when
    kind[i] == 1) and writes row rows[i] of `out` ((N, 3, H, W) float32 or uint8,
    C-contiguous): the window `window[i]` = (x, y, w, h) (decoded at scale_num[i]/8 for a
    JPEG; `full[i]` when it is the whole scaled image), resampled from the box `box[i]`
    inside it, colour ops `ops[i, :n_ops[i]]` with `factors`, flipped if `flip[i]`, as
    decode_resample_into. Returns (failed, errors, warnings, nogil_seconds): failed a uint8
    array (1 where the sample could not be written), errors a list (exception or None),
    warnings a list (libjpeg's warning text or None), nogil_seconds the wall time of the
    block without the GIL. Raises only for arguments that are not a batch
    (TypeError/ValueError) and MemoryError; a bad sample is an entry of `errors`."""
    cdef Py_ssize_t n = len(sources), m = 0, i, j, N
    cdef _Common c
    cdef _Job job
    cdef _Sample* s
    cdef size_t nw, nr, npl, nst, mw = 0, mr = 0, mp = 0, ms = 0
    cdef float[:, :, :, ::1] fout
    cdef uint8_t[:, :, :, ::1] uout
    cdef bint is_float
    cdef double t0 = 0, t1 = 0
    if (todo.shape[0] != n or kind.shape[0] != n or rows.shape[0] != n or full.shape[0] != n
            or scale_num.shape[0] != n or flip.shape[0] != n or n_ops.shape[0] != n):
        raise ValueError(f"every per-sample array needs {n} entries")
    if (window.shape[0] != n or window.shape[1] != 4 or box.shape[0] != n or box.shape[1] != 4
            or ops.shape[0] != n or ops.shape[1] != MAX_OPS or factors.shape[0] != n
            or factors.shape[1] != MAX_OPS):
        raise ValueError("window and box need (n, 4) entries, ops and factors (n, 8)")
    if not isinstance(out, np.ndarray) or out.ndim != 4:
        raise TypeError("out must be a 4-dimensional numpy array")
    is_float = out.dtype == np.float32
    if is_float:
        fout = out
        _affine(mean_scale, bias, c.scale, c.bias)
        N, c.oh, c.ow = fout.shape[0], fout.shape[2], fout.shape[3]
        if fout.shape[1] != 3:
            raise ValueError(f"out must have shape (N, 3, H, W), got {out.shape}")
    elif out.dtype == np.uint8:
        uout = out
        N, c.oh, c.ow = uout.shape[0], uout.shape[2], uout.shape[3]
        if uout.shape[1] != 3:
            raise ValueError(f"out must have shape (N, 3, H, W), got {out.shape}")
    else:
        raise TypeError(f"out must be float32 or uint8, got {out.dtype}")
    if c.oh <= 0 or c.ow <= 0:
        raise ValueError(f"out must not be empty, got shape {out.shape}")
    c.filt = filter
    c.flags = _isa_flags(flags)
    c.max_pixels = max_pixels
    failed = np.zeros(n, np.uint8)
    errors = [None] * n
    warnings = [None] * n
    cdef uint8_t[::1] failed_v = failed
    cdef _Sources held = _Sources(n)
    cdef Py_ssize_t* which = <Py_ssize_t*>malloc((n if n > 0 else 1) * sizeof(Py_ssize_t))
    cdef uint8_t* taken = <uint8_t*>calloc(N if N > 0 else 1, 1)
    if which == NULL or taken == NULL:
        free(which)
        free(taken)
        raise MemoryError()
    if runner._pid != getpid():
        # a forked child: the parent's lock may have been held by a thread that does not
        # exist here (the pool itself is replaced by _check_pool)
        runner._lock = threading.Lock()
        runner._pid = getpid()
    try:
        for i in range(n):   # every row of out is written by one sample at most
            if not todo[i]:
                continue
            if rows[i] < 0 or rows[i] >= N:
                raise ValueError(f"row {rows[i]} of sample {i} is outside out (N={N})")
            if taken[rows[i]]:
                raise ValueError(f"two samples would write row {rows[i]} of out")
            taken[rows[i]] = 1
        with runner._lock:
            runner._check_pool()
            runner._reserve(n)
            for i in range(n):
                if not todo[i]:
                    continue
                if rows[i] < 0 or rows[i] >= N:
                    raise ValueError(f"row {rows[i]} of sample {i} is outside out (N={N})")
                s = &runner._samples[m]
                memset(s, 0, sizeof(_Sample))
                if kind[i] == 0:
                    held.jpeg(sources[i], &s.src, &s.size)
                elif kind[i] == 1:
                    held.array(sources[i], s)
                else:
                    raise ValueError(f"unknown source kind {kind[i]}")
                s.scale_num = scale_num[i]
                s.full = full[i] != 0
                s.wx, s.wy, s.ww, s.wh = window[i, 0], window[i, 1], window[i, 2], window[i, 3]
                if (kind[i] == 0 and max_pixels > 0
                        and <long long>s.ww * <long long>s.wh > max_pixels):
                    # never size scratch memory for it (the decoder would refuse the file)
                    failed_v[i] = 1
                    errors[i] = DecodeError(f"decode window {s.ww} x {s.wh} exceeds the limit "
                                            f"of {max_pixels} pixels (max_pixels)")
                    continue
                s.bx0, s.by0, s.bx1, s.by1 = box[i, 0], box[i, 1], box[i, 2], box[i, 3]
                s.flip = flip[i] != 0
                s.n_ops = n_ops[i]
                if s.n_ops < 0 or s.n_ops > MAX_OPS:
                    raise ValueError(f"sample {i}: n_ops must be in 0..{MAX_OPS}")
                for j in range(s.n_ops):
                    s.ops[j] = ops[i, j]
                    s.factors[j] = factors[i, j]
                if is_float:
                    s.fout = &fout[rows[i], 0, 0, 0]
                else:
                    s.uout = &uout[rows[i], 0, 0, 0]
                _needs(s, &c, &nw, &nr, &npl, &nst)
                ms = nst if nst > ms else ms
                mw = nw if nw > mw else mw
                mr = nr if nr > mr else mr
                mp = npl if npl > mp else mp
                which[m] = i
                m += 1
            for j in range(runner._threads):
                _scratch_fit(&runner._scratch[j], mw, mr, mp, ms)
            job.samples = runner._samples
            job.common = &c
            job.scratch = runner._scratch
            with nogil:
                t0 = _now()
                tl_pool_run(runner._pool, _job_item, &job, m)
                t1 = _now()
                for j in range(runner._threads):
                    _scratch_trim(&runner._scratch[j])
            for j in range(m):
                s = &runner._samples[j]
                err = _error(s)
                if err is not None:
                    failed_v[which[j]] = 1
                    errors[which[j]] = err
                if s.n_warnings:
                    warnings[which[j]] = _warning(s)
    finally:
        free(which)
        free(taken)
        held.release()
    return failed, errors, warnings, t1 - t0


def read_headers(list sources not None, const uint8_t[::1] todo, /):
    """Read the JPEG headers of sources[i] where todo[i], in one nogil pass.

    Returns (height, width, errors): int64 arrays (0 where not read or bad) and a list of
    the exception _jpeg.read_header would raise (DecodeError for a bad header) or None."""
    cdef Py_ssize_t n = len(sources), i
    if todo.shape[0] != n:
        raise ValueError(f"todo needs {n} entries")
    height = np.zeros(n, np.int64)
    width = np.zeros(n, np.int64)
    errors = [None] * n
    cdef int64_t[::1] hv = height
    cdef int64_t[::1] wv = width
    cdef _Sources held = _Sources(n)
    cdef const uint8_t** ptrs = <const uint8_t**>malloc((n if n > 0 else 1) * sizeof(uint8_t*))
    cdef size_t* sizes = <size_t*>malloc((n if n > 0 else 1) * sizeof(size_t))
    cdef int* status = <int*>malloc((n if n > 0 else 1) * sizeof(int))
    cdef char* msgs = <char*>malloc((n if n > 0 else 1) * TL_MSG_LEN)
    cdef tl_jpeg_info info
    try:
        if ptrs == NULL or sizes == NULL or status == NULL or msgs == NULL:
            raise MemoryError()
        for i in range(n):
            ptrs[i] = NULL
            sizes[i] = 0
            if todo[i]:
                held.jpeg(sources[i], &ptrs[i], &sizes[i])
        with nogil:
            for i in range(n):
                status[i] = TL_OK
                msgs[i * TL_MSG_LEN] = 0
                if todo[i]:
                    status[i] = tl_jpeg_read_header(ptrs[i] if sizes[i] > 0 else NULL, sizes[i],
                                                    &info, msgs + i * TL_MSG_LEN)
                    if status[i] == TL_OK:
                        hv[i] = info.height
                        wv[i] = info.width
        for i in range(n):
            if status[i] == TL_ERR_ARG:   # as _jpeg.read_header
                errors[i] = ValueError(_text(msgs + i * TL_MSG_LEN))
            elif status[i] != TL_OK:
                text = _text(msgs + i * TL_MSG_LEN)
                errors[i] = DecodeError(text or f"JPEG decode failed (status {status[i]})")
    finally:
        held.release()
        free(ptrs)
        free(sizes)
        free(status)
        free(msgs)
    return height, width, errors


# -- the batch plan's loops (the executor's read_sizes / plan_slots) ------------------------

def plain_buffers(list sources not None, /):
    """Whether every source is what the native calls read as it is: ``bytes``, or a 1-D
    C-contiguous memoryview of format ``"B"`` (the executor's ``_classify`` then has
    nothing to convert: a chunk's gathered images are such views)."""
    cdef Py_ssize_t i, n = len(sources)
    cdef object src
    cdef Py_buffer* view
    for i in range(n):
        src = sources[i]
        if PyBytes_CheckExact(src):
            continue
        if not PyMemoryView_Check(src):
            return False
        view = PyMemoryView_GET_BUFFER(src)   # as .ndim, .format, .c_contiguous read it
        if view.ndim != 1 or not (view.format == NULL or strcmp(view.format, b"B") == 0):
            return False
        if not (view.shape[0] <= 1 or view.strides == NULL
                or view.strides[0] == view.itemsize):
            return False
    return True


cdef inline double _fmin(double a, double b) noexcept nogil:
    # numpy.minimum: NaN propagates
    if a != a:
        return a
    if b != b:
        return b
    return a if a <= b else b


cdef inline double _fmax(double a, double b) noexcept nogil:
    # numpy.maximum: NaN propagates
    if a != a:
        return a
    if b != b:
        return b
    return a if a >= b else b


cdef inline int32_t _to_i32(double v) noexcept nogil:
    # numpy's float64 -> int32 cast on x86: truncation, INT32_MIN for NaN and out of range
    if v >= -2147483648.0 and v < 2147483648.0:
        return <int32_t>v
    return <int32_t>(-2147483647 - 1)


cdef inline int64_t _floordiv(int64_t a, int64_t b) noexcept nogil:
    cdef int64_t q = a // b
    if (a % b != 0) and ((a < 0) != (b < 0)):
        q -= 1
    return q


@cython.boundscheck(False)
@cython.wraparound(False)
def plan_windows(const double[:, ::1] box not None, const uint8_t[::1] clip not None,
                 const int64_t[:, ::1] out not None, const int64_t[:, ::1] hw not None,
                 const uint8_t[::1] kind not None, const int64_t[:, ::1] array_hw not None,
                 int32_t[::1] scale_num not None, int64_t[:, ::1] dims not None,
                 int32_t[:, ::1] window not None, double[:, ::1] inner not None,
                 uint8_t[::1] full not None, uint8_t[::1] good not None, /, *,
                 double support, bint dct_scaling):
    """The executor's ``_scale_and_windows`` and ``plan_slots``' argument checks for every
    row, in one loop: the same float64 operations in the same order as the NumPy form
    (``turboloader.decode.executor``, ``decode._window.windows``; bit for bit:
    ``tests/native/test_plan_windows.py``), written into the caller's arrays.

    Per row ``i``: ``box[i]`` the source box ``(x0, y0, x1, y1)`` in full-resolution pixels,
    ``clip[i]`` crop-then-resize, ``out[i]`` the output (height, width), ``hw[i]`` the
    size drawn on, ``kind[i]`` 0 a JPEG (decoded at ``k/8``), 1 an array of
    ``array_hw[i]``. Written: ``scale_num`` (k; 8 for arrays), ``dims`` (decoded (width,
    height)), ``window`` (``(x, y, width, height)``, int32 as NumPy casts it), ``inner``
    (the box inside the window), ``full`` (the window is the whole decoded image, JPEG
    rows) and ``good`` (the native run's argument checks hold). ``support``: the filter's
    half-width at scale 1 (what a resize-then-crop window is widened by).

    Raises:
        ValueError: arrays of other lengths.
    """
    cdef Py_ssize_t n = box.shape[0], i, a
    if (box.shape[1] != 4 or clip.shape[0] != n or out.shape[0] != n or out.shape[1] != 2
            or hw.shape[0] != n or hw.shape[1] != 2 or kind.shape[0] != n
            or array_hw.shape[0] != n or array_hw.shape[1] != 2 or scale_num.shape[0] != n
            or dims.shape[0] != n or dims.shape[1] != 2 or window.shape[0] != n
            or window.shape[1] != 4 or inner.shape[0] != n or inner.shape[1] != 4
            or full.shape[0] != n or good.shape[0] != n):
        raise ValueError("plan_windows needs one row per sample in every array")
    cdef int64_t k, kk
    cdef int64_t d[2]
    cdef int64_t o[2]
    cdef double f[2]
    cdef double lo[2]
    cdef double hi[2]
    cdef double ilo[2]
    cdef double ihi[2]
    cdef double size[2]
    cdef double m, bw, bh
    cdef bint ok, whole
    with nogil:
        for i in range(n):
            if kind[i] == 0:
                k = 8
                if dct_scaling:   # sizes.window_scale_num: the smallest of 1, 2, 4 that fits
                    bw = box[i, 2] - box[i, 0]
                    bh = box[i, 3] - box[i, 1]
                    kk = 1
                    while kk <= 4:
                        if (bw * <double>kk >= <double>(out[i, 1] * 8)
                                and bh * <double>kk >= <double>(out[i, 0] * 8)):
                            k = kk
                            break
                        kk *= 2
                d[0] = _floordiv(hw[i, 1] * k + 7, 8)   # sizes.scaled_dims, (w, h)
                d[1] = _floordiv(hw[i, 0] * k + 7, 8)
                f[0] = f[1] = <double>k / 8.0
            else:
                k = 8
                d[0], d[1] = array_hw[i, 1], array_hw[i, 0]
                f[0] = <double>d[0] / <double>hw[i, 1]
                f[1] = <double>d[1] / <double>hw[i, 0]
            o[0], o[1] = out[i, 1], out[i, 0]
            scale_num[i] = <int32_t>k
            dims[i, 0], dims[i, 1] = d[0], d[1]
            for a in range(2):   # _window.windows, axis x then y
                lo[a] = box[i, a] * f[a]
                hi[a] = _fmin(box[i, 2 + a] * f[a], <double>d[a])
                if clip[i]:
                    ilo[a] = floor(lo[a])
                    ihi[a] = _fmin(ceil(hi[a]), <double>d[a])
                else:
                    m = support * _fmax((hi[a] - lo[a]) / <double>o[a], 1.0) + 2
                    ilo[a] = _fmax(0.0, floor(lo[a] - m))
                    ihi[a] = _fmin(<double>d[a], ceil(hi[a] + m))
                size[a] = ihi[a] - ilo[a]
                window[i, a] = _to_i32(ilo[a])
                window[i, 2 + a] = _to_i32(size[a])
                inner[i, a] = lo[a] - ilo[a]
                inner[i, 2 + a] = _fmin(hi[a] - ilo[a], size[a])
            ok = 1
            whole = 1
            for a in range(2):   # plan_slots' checks of the native run's arguments
                if not (size[a] > 0 and ilo[a] >= 0 and inner[i, a] >= 0
                        and inner[i, a] < inner[i, 2 + a] and inner[i, 2 + a] <= size[a]):
                    ok = 0
                if kind[i] != 0 and not (ilo[a] + size[a] <= <double>d[a]):
                    ok = 0
                if not (size[a] == <double>d[a]):
                    whole = 0
            good[i] = ok
            full[i] = whole and kind[i] == 0
