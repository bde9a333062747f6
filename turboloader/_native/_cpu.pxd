# The process-wide runtime CPU dispatch level (see simd.h), cimportable by every kernel module.
# Kernels read it once per call and pass it to the dispatching C function; every level gives
# bit-identical results.

cdef extern from "simd.h" nogil:
    enum:
        TL_ISA_BASELINE
        TL_ISA_SSE41
        TL_ISA_AVX2


# The level kernels run at now (no GIL needed).
cdef int isa_level() noexcept nogil
