/* Runtime CPU dispatch for turboloader's kernels.
 *
 * A portable build (x86-64 baseline, SSE2) also compiles the hot loops for wider instruction
 * sets with GCC/clang target attributes; the level to run is chosen once per process by
 * _native/_cpu.pyx (the CPU's best, capped by TURBOLOADER_ISA) and passed to every
 * dispatching kernel as its `isa` argument. Every variant of a kernel computes the same
 * result bit for bit: float code is built with -ffp-contract=off (no FMA contraction) and
 * wider vectors never reassociate (no -ffast-math), so dispatch changes speed only.
 *
 * Levels (values mirror _cpu.pxd):
 *   TL_ISA_BASELINE  the build's own target (plain C; the only level off x86)
 *   TL_ISA_SSE41     SSSE3 + SSE4.1 (pshufb, pmovzx)
 *   TL_ISA_AVX2      AVX2 (256-bit integer vectors)
 */
#ifndef TL_SIMD_H
#define TL_SIMD_H

#define TL_ISA_BASELINE 0
#define TL_ISA_SSE41 1
#define TL_ISA_AVX2 2

/* TL_NO_DISPATCH (-DTL_NO_DISPATCH) builds the baseline only, as on other architectures */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) \
    && !defined(TL_NO_DISPATCH)
#define TL_X86 1
#define TL_TARGET_SSE41 __attribute__((target("ssse3,sse4.1")))
#define TL_TARGET_AVX2 __attribute__((target("avx2")))
#else
#define TL_X86 0
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TL_RESTRICT __restrict__
#define TL_INLINE static inline __attribute__((always_inline))
#else
#define TL_RESTRICT
#define TL_INLINE static inline
#endif

#if TL_X86
#include <cpuid.h>
#endif

/* The highest level this CPU and OS support (AVX state enabled by the OS included).
 * CPUID and XGETBV directly rather than __builtin_cpu_supports, which needs the compiler's
 * runtime library to fill in its CPU model: zig cc's (the manylinux2014 wheel's toolchain,
 * tools/build_wheel.sh) reports no feature at all, which left that wheel on the baseline. */
static inline int tl_cpu_detect(void)
{
#if TL_X86
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return TL_ISA_BASELINE;
    const int ssse3 = (c >> 9) & 1, sse41 = (c >> 19) & 1;
    const int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    if (osxsave && avx) {
        unsigned int xcr0_lo, xcr0_hi;
        __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
        /* the OS saves XMM and YMM state (XCR0 bits 1 and 2) */
        if ((xcr0_lo & 6u) == 6u && __get_cpuid_max(0, 0) >= 7) {
            __cpuid_count(7, 0, a, b, c, d);
            if ((b >> 5) & 1)
                return TL_ISA_AVX2;
        }
    }
    if (ssse3 && sse41)
        return TL_ISA_SSE41;
#endif
    return TL_ISA_BASELINE;
}

/* Whether the CPU has BMI2 (SHLX/SHRX: shifts by a register count that neither read nor
 * write the flags). jpeg_huffman.c's decoder has a BMI2 build of its bit reader, run at the
 * avx2 level on such CPUs (_cpu.pyx's huffman_bmi2); the same code, so the same coefficients. */
static inline int tl_cpu_bmi2(void)
{
#if TL_X86
    unsigned int a, b, c, d;
    if (__get_cpuid_max(0, 0) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return (b >> 8) & 1;
#else
    return 0;
#endif
}

#endif
