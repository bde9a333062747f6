/* The warp and blur loops (warp_impl.h), one copy per ISA level, and their dispatch (see
 * warp_kernels.h). */
#include "warp_kernels.h"

#include <math.h>

#include "simd.h"

#define TL_WCHUNK 64   /* output pixels per bilinear chunk (stack arrays) */

#if defined(__GNUC__) && !defined(__clang__)
#define TL_NO_TRAP __attribute__((optimize("no-trapping-math")))
#else
#define TL_NO_TRAP
#endif

/* Round half to even (the FPU default mode, like nearbyintf, which is a libm call without
 * SSE4.1) for |v| < 2^22: adding 1.5 * 2^23 leaves no fraction bits. The compiler keeps the
 * add and subtract because -fassociative-math is off. */
TL_INLINE float tl_rne(float v)
{
    const float magic = 12582912.0f;
    float t = v + magic;
    return t - magic;
}

/* torch's round_() (half to even) then .to(uint8); clamped so no cast is out of range */
TL_INLINE uint8_t tl_round_u8(float v)
{
    if (!(v > 0.0f))   /* also NaN */
        return 0;
    if (v > 255.0f)
        return 255;
    return (uint8_t)tl_rne(v);
}

/* tl_round_u8 without branches for finite |v| < 2^22 (integer clamps compile to selects) */
TL_INLINE uint8_t tl_round_clamp_u8(float v)
{
    int32_t i = (int32_t)tl_rne(v);
    i = i > 0 ? i : 0;
    i = i < 255 ? i : 255;
    return (uint8_t)i;
}

/* torch reflect padding (edge not repeated); valid while the pad is < n */
TL_INLINE ptrdiff_t tl_reflect(ptrdiff_t i, ptrdiff_t n)
{
    if (i < 0)
        i = -i;
    if (i >= n)
        i = 2 * (n - 1) - i;
    if (i < 0)
        i = 0;
    return i;
}

#define TL_IMPL "warp_impl.h"
#include "isa_variants.h"
#undef TL_IMPL

void tl_warp_u8(const uint8_t *src, ptrdiff_t sh, ptrdiff_t sw, ptrdiff_t sstride, int C,
                uint8_t *dst, ptrdiff_t dh, ptrdiff_t dw, ptrdiff_t dstride, int grid,
                const float *t, int mode, const float *fill, int isa)
{
#if TL_X86
    if (isa >= TL_ISA_AVX2) {
        warp_avx2(src, sh, sw, sstride, C, dst, dh, dw, dstride, grid, t, mode, fill);
        return;
    }
    if (isa >= TL_ISA_SSE41) {
        warp_sse41(src, sh, sw, sstride, C, dst, dh, dw, dstride, grid, t, mode, fill);
        return;
    }
#endif
    (void)isa;
    warp_baseline(src, sh, sw, sstride, C, dst, dh, dw, dstride, grid, t, mode, fill);
}

void tl_blur_u8(const uint8_t *src, ptrdiff_t h, ptrdiff_t w, ptrdiff_t sstride, int C,
                uint8_t *dst, ptrdiff_t dstride, const float *kx, ptrdiff_t nx,
                const float *ky, ptrdiff_t ny, float *tmp, int isa)
{
#if TL_X86
    if (isa >= TL_ISA_AVX2) {
        blur_avx2(src, h, w, sstride, C, dst, dstride, kx, nx, ky, ny, tmp);
        return;
    }
    if (isa >= TL_ISA_SSE41) {
        blur_sse41(src, h, w, sstride, C, dst, dstride, kx, nx, ky, ny, tmp);
        return;
    }
#endif
    (void)isa;
    blur_baseline(src, h, w, sstride, C, dst, dstride, kx, nx, ky, ny, tmp);
}
