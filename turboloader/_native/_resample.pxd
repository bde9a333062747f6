# C-level API of the resampling kernels (Pillow's algorithm), crop and flip, cimportable by the
# other native modules (``_fused.pyx``). Status codes and conventions: ``_common.pxd``.

from libc.stdint cimport int32_t, uint8_t


# Resampling filters; values mirror turboloader.transforms.functional.Interpolation.
cdef enum:
    FILTER_NEAREST = 0      # Pillow NEAREST: sample at the output pixel centre, no antialias
    FILTER_BILINEAR = 1     # Pillow BILINEAR / torchvision bilinear with antialias=True
    FILTER_BICUBIC = 2      # Pillow BICUBIC (a = -0.5) / torchvision bicubic, antialias=True


ctypedef struct ResamplePlan:
    # Everything one resize needs, computed with the GIL held by resample_plan_init.
    # A plan may be run any number of times, but by one thread at a time: `tmp` and `acc`
    # are scratch space owned by the plan.
    Py_ssize_t in_h, in_w, out_h, out_w
    int channels
    int filter
    bint need_h, need_v         # Pillow's rule: skip a pass that would be the identity
    Py_ssize_t ksize_x, ksize_y # taps per output pixel (coefficient row length)
    int32_t* kx                 # out_w * ksize_x fixed-point (22-bit) coefficients
    int32_t* bx                 # out_w * 2: first source column, number of taps
    int32_t* ky                 # out_h * ksize_y
    int32_t* by                 # out_h * 2: first source row (relative to y_first), taps
    Py_ssize_t y_first, y_rows  # source rows the horizontal pass reads
    uint8_t* tmp                # y_rows * out_w * channels: horizontal-pass output
    int32_t* acc                # out_w * channels accumulators for the vertical pass
    Py_ssize_t* xin             # nearest: out_w source byte offsets within a row
    Py_ssize_t* yin             # nearest: out_h source rows


# Validate sizes and the float source box (x0, y0, x1, y1) (Pillow's `box`: taps near the box
# edge may read source pixels outside it, clipped to the image), then allocate and fill the
# plan. GIL held. Raises ValueError/MemoryError. Whether it succeeds or fails, the plan must
# later be passed to resample_plan_free (harmless on a failed plan).
cdef int resample_plan_init(ResamplePlan* p, Py_ssize_t in_h, Py_ssize_t in_w,
                            Py_ssize_t out_h, Py_ssize_t out_w, int channels,
                            double x0, double y0, double x1, double y1, int filter) except -1

# The same plan without the GIL and without allocating: every table is carved from the
# caller's `scratch` (64-byte aligned, scratch_size >= resample_plan_size(...)). Returns
# IMGPROC_OK or a negative status (the checks of resample_plan_init; IMGPROC_EPLAN for a
# scratch that is too small). The plan lives as long as `scratch`; never pass it to
# resample_plan_free.
cdef size_t resample_plan_size(Py_ssize_t in_h, Py_ssize_t in_w, Py_ssize_t out_h,
                               Py_ssize_t out_w, int channels, double x0, double y0, double x1,
                               double y1, int filter) noexcept nogil
cdef int resample_plan_init_in(ResamplePlan* p, Py_ssize_t in_h, Py_ssize_t in_w,
                               Py_ssize_t out_h, Py_ssize_t out_w, int channels,
                               double x0, double y0, double x1, double y1, int filter,
                               uint8_t* scratch, size_t scratch_size) noexcept nogil

# Release the plan's buffers and zero it. No GIL needed; idempotent.
cdef void resample_plan_free(ResamplePlan* p) noexcept nogil

# Resample src (in_h rows of in_w*channels bytes, rows src_stride bytes apart) into dst
# (out_h rows, dst_stride apart). Returns IMGPROC_OK or a negative status. No GIL needed.
cdef int resample_run(const ResamplePlan* p, const uint8_t* src, Py_ssize_t src_stride,
                      uint8_t* dst, Py_ssize_t dst_stride) noexcept nogil

# resample_run with the float32 CHW write (x * scale[c] + bias[c], mirrored when flip) fused
# into the vertical pass where its kernel applies: returns IMGPROC_OK when `out` (3 planes of
# out_h * out_w floats) was written, RUN_U8 when `dst` holds resample_run's output instead (the
# caller then writes `out` from it, e.g. with _chw.normalize_chw_f32), or a negative status.
# Either way the values are those of resample_run then normalize_chw_f32, bit for bit.
cdef enum:
    RUN_U8 = 1

cdef int resample_run_chw_f32(const ResamplePlan* p, const uint8_t* src, Py_ssize_t src_stride,
                              uint8_t* dst, Py_ssize_t dst_stride, float* out,
                              const float* scale, const float* bias, bint flip) noexcept nogil

# Copy the window (top, left, out_h, out_w) of src (src_h x src_w) into dst.
cdef int crop_u8(const uint8_t* src, Py_ssize_t src_h, Py_ssize_t src_w, Py_ssize_t src_stride,
                 Py_ssize_t top, Py_ssize_t left, Py_ssize_t out_h, Py_ssize_t out_w,
                 int channels, uint8_t* dst, Py_ssize_t dst_stride) noexcept nogil

# Mirror src left-right into dst (same size). src and dst must not overlap unless equal.
cdef int hflip_u8(const uint8_t* src, Py_ssize_t h, Py_ssize_t w, Py_ssize_t src_stride,
                  int channels, uint8_t* dst, Py_ssize_t dst_stride) noexcept nogil
