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

# Whether the JPEG Huffman decoder runs its BMI2 build now (the avx2 level on a CPU with BMI2;
# the _native modules pass it to jpeg_shim as TL_HUFF_BMI2).
cdef int huffman_bmi2() noexcept nogil
