# C-level API of the image kernels, cimportable by the other native modules (``_fused.pyx``).
#
# Images are 8-bit, interleaved HWC, addressed as (pointer, height, width, row stride in bytes).
# Kernels are single-threaded, run without the GIL, allocate nothing and report failure with a
# negative ``IMGPROC_*`` status; callers turn statuses into exceptions once the GIL is back.

from libc.stdint cimport int32_t, int64_t, uint8_t


# Kernel status codes (0 is success).
cdef enum:
    IMGPROC_OK = 0
    IMGPROC_EBADSIZE = -1   # zero/negative size or unsupported channel count
    IMGPROC_EBOUNDS = -2    # window or box outside the source
    IMGPROC_ESTRIDE = -3    # row stride smaller than a row
    IMGPROC_EPLAN = -4      # resample plan not initialised (or init failed)
    IMGPROC_EARG = -5       # bad scalar argument (e.g. hue factor outside [-0.5, 0.5])


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

# Release the plan's buffers and zero it. No GIL needed; idempotent.
cdef void resample_plan_free(ResamplePlan* p) noexcept nogil

# Resample src (in_h rows of in_w*channels bytes, rows src_stride bytes apart) into dst
# (out_h rows, dst_stride apart). Returns IMGPROC_OK or a negative status. No GIL needed.
cdef int resample_run(const ResamplePlan* p, const uint8_t* src, Py_ssize_t src_stride,
                      uint8_t* dst, Py_ssize_t dst_stride) noexcept nogil

# Copy the window (top, left, out_h, out_w) of src (src_h x src_w) into dst.
cdef int crop_u8(const uint8_t* src, Py_ssize_t src_h, Py_ssize_t src_w, Py_ssize_t src_stride,
                 Py_ssize_t top, Py_ssize_t left, Py_ssize_t out_h, Py_ssize_t out_w,
                 int channels, uint8_t* dst, Py_ssize_t dst_stride) noexcept nogil

# Mirror src left-right into dst (same size). src and dst must not overlap unless equal.
cdef int hflip_u8(const uint8_t* src, Py_ssize_t h, Py_ssize_t w, Py_ssize_t src_stride,
                  int channels, uint8_t* dst, Py_ssize_t dst_stride) noexcept nogil

# dst[c, y, x] = src[y, x', c] * scale[c] + bias[c], x' = w-1-x when flip; 3-channel src.
# dst is 3 contiguous planes of h*w floats.
cdef int normalize_chw_f32(const uint8_t* src, Py_ssize_t h, Py_ssize_t w, Py_ssize_t src_stride,
                           float* dst, const float* scale, const float* bias,
                           bint flip) noexcept nogil

# dst[c, y, x] = src[y, x', c]; 3-channel src; dst is 3 contiguous planes of h*w bytes.
cdef int chw_u8(const uint8_t* src, Py_ssize_t h, Py_ssize_t w, Py_ssize_t src_stride,
                uint8_t* dst, bint flip) noexcept nogil

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
