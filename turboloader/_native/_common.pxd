# Declarations shared by the 8-bit image kernel modules (_resample, _colour, _chw) and the
# fused path that cimports them: the kernel status codes and the GIL-side helpers that turn a
# status into an exception. Declarations and inline helpers only: there is no _common module.
#
# Images are 8-bit, interleaved HWC, addressed as (pointer, height, width, row stride in bytes).
# Kernels are single-threaded, run without the GIL, allocate nothing and report failure with a
# negative ``IMGPROC_*`` status; callers turn statuses into exceptions once the GIL is back.


# Kernel status codes (0 is success).
cdef enum:
    IMGPROC_OK = 0
    IMGPROC_EBADSIZE = -1   # zero/negative size or unsupported channel count
    IMGPROC_EBOUNDS = -2    # window or box outside the source
    IMGPROC_ESTRIDE = -3    # row stride smaller than a row
    IMGPROC_EPLAN = -4      # resample plan not initialised (or init failed)
    IMGPROC_EARG = -5       # bad scalar argument (e.g. hue factor outside [-0.5, 0.5])


# Raise the exception for a kernel's negative status (GIL held); `what` names the operation.
cdef inline int raise_status(int status, str what) except -1:
    if status == IMGPROC_EBOUNDS:
        raise ValueError(f"{what}: window outside the source image")
    if status == IMGPROC_ESTRIDE:
        raise ValueError(f"{what}: buffer rows too short or overlapping buffers")
    if status == IMGPROC_EARG:
        raise ValueError(f"{what}: factor out of range")
    if status == IMGPROC_EPLAN:
        raise RuntimeError(f"{what}: resample plan not initialised")
    raise ValueError(f"{what}: bad image size or channel count (status {status})")


# Accept 1 or 3 channels (and 2 or 4 when allow4), else raise ValueError naming `what`.
cdef inline int check_channels(Py_ssize_t c, str what, bint allow4=True) except -1:
    if c == 1 or c == 3 or (allow4 and (c == 2 or c == 4)):
        return 0
    raise ValueError(f"{what}: images must have 1 or 3 channels, got {c}")


# Whether the byte ranges [a, a + na) and [b, b + nb) intersect.
cdef inline bint overlap(const void* a, Py_ssize_t na, const void* b,
                         Py_ssize_t nb) noexcept nogil:
    return <const char*>a < <const char*>b + nb and <const char*>b < <const char*>a + na
