/* The colour kernels' hot loops (colour_impl.h), one copy per ISA level, and their dispatch
 * (see colour_kernels.h). */
#include "colour_kernels.h"

#include "simd.h"

#define TL_CHUNK 128   /* pixels per deinterleaved chunk (3 x 128 floats on the stack) */

#if defined(__GNUC__) && !defined(__clang__)
#define TL_NO_TRAP __attribute__((optimize("no-trapping-math")))
#else
#define TL_NO_TRAP
#endif

static const float TL_GRAY_WR = 0.2989f;
static const float TL_GRAY_WG = 0.587f;
static const float TL_GRAY_WB = 0.114f;

/* floor of torchvision's float32 luma r.mul(wr).add_(g, alpha=wg).add_(b, alpha=wb): r's
 * product rounded (a plain multiply), each add_ one fused multiply-add (exact in double, one
 * rounding); the luma is >= 0, so truncation is floor */
TL_INLINE int32_t tl_gray_floor(uint8_t r, uint8_t g, uint8_t b)
{
    float t = (float)r * TL_GRAY_WR;
    t = (float)((double)t + (double)g * (double)TL_GRAY_WG);
    t = (float)((double)t + (double)b * (double)TL_GRAY_WB);
    return (int32_t)t;
}

/* uint8(clamp(t, 0, 255)) for |t| < 2^31, branch-free and vectorizable (32-bit cvttps) */
TL_INLINE uint8_t tl_clamp_trunc32(float t)
{
    int32_t i = (int32_t)t;
    i = i > 0 ? i : 0;
    i = i < 255 ? i : 255;
    return (uint8_t)i;
}

/* uint8(clamp(t, 0, 255)) for |t| < 2^63 (64-bit cvttss2si, integer cmovs) */
TL_INLINE uint8_t tl_clamp_trunc(float t)
{
    int64_t i = (int64_t)t;
    i = i > 0 ? i : 0;
    i = i < 255 ? i : 255;
    return (uint8_t)i;
}

/* uint8(clamp(t, 0, 255)) for any float; NaN -> 0 */
TL_INLINE uint8_t tl_sat_trunc(float v)
{
    if (v < 0.0f)
        return 0;
    if (!(v <= 255.0f))
        return v > 255.0f ? 255 : 0;
    return (uint8_t)v;
}

/* round half to even for |v| < 2^22 (nearbyintf is a libm call without SSE4.1); exact as
 * long as the compiler does not reassociate (no -ffast-math) */
TL_INLINE float tl_rne(float v)
{
    const float magic = 12582912.0f;   /* 1.5 * 2^23 */
    float t = v + magic;
    return t - magic;
}

#define TL_IMPL "colour_impl.h"
#include "isa_variants.h"
#undef TL_IMPL

#if TL_X86
#define TL_DISPATCH(fn, args)              \
    do {                                   \
        if (isa >= TL_ISA_AVX2) {          \
            fn##_avx2 args;                \
            return;                        \
        }                                  \
        if (isa >= TL_ISA_SSE41) {         \
            fn##_sse41 args;               \
            return;                        \
        }                                  \
        fn##_baseline args;                \
    } while (0)
#else
#define TL_DISPATCH(fn, args) \
    do {                      \
        (void)isa;            \
        fn##_baseline args;   \
    } while (0)
#endif

void tl_apply_lut(uint8_t *img, ptrdiff_t h, ptrdiff_t w, ptrdiff_t stride, int channels,
                  const uint8_t *lut, int isa)
{
    TL_DISPATCH(apply_lut, (img, h, w, stride, channels, lut));
}

void tl_saturation(uint8_t *img, ptrdiff_t h, ptrdiff_t w, ptrdiff_t stride, float ratio,
                   float alpha, int isa)
{
    TL_DISPATCH(saturation, (img, h, w, stride, ratio, alpha));
}

void tl_hue(uint8_t *img, ptrdiff_t h, ptrdiff_t w, ptrdiff_t stride, float hue, int isa)
{
    TL_DISPATCH(hue, (img, h, w, stride, hue));
}

void tl_sharpness_interior(const uint8_t *src, ptrdiff_t h, ptrdiff_t w, ptrdiff_t src_stride,
                           int channels, uint8_t *dst, ptrdiff_t dst_stride, float a, float b,
                           float alpha, int bounded, int isa)
{
    TL_DISPATCH(sharpness, (src, h, w, src_stride, channels, dst, dst_stride, a, b, alpha,
                            bounded));
}

