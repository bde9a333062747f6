/* Output kernels: 3-channel HWC uint8 -> CHW planes (see chw_kernels.h).
 *
 * The wide variants deinterleave with pshufb and store each channel contiguously; the flip
 * is folded into the shuffle masks (pixels are read forwards, each block is written to its
 * mirrored position in reversed order), so it costs nothing. Blocks never read past a row's
 * 3 * w bytes. A row whose width is not a multiple of the block ends with one block aligned to
 * the row's end, overlapping the previous one (it rewrites a few outputs with the same
 * values); rows narrower than a block go through the scalar loop.
 *
 * Every path computes the same values: uint8 is a copy; float32 is an exact int -> float
 * conversion, one rounded multiply and one rounded add (-ffp-contract=off in setup.py keeps
 * GCC from fusing them into an FMA, in the scalar loop and in the intrinsics alike).
 *
 * Every helper a wide variant calls is inlined into it (TL_INLINE): a call from AVX2 code into
 * SSE-encoded code with the upper halves of the ymm registers live measured 3-4x slower here.
 */
#include "chw_kernels.h"
#include "chw_masks.h"

#include "simd.h"

#if TL_X86
#include <immintrin.h>
#endif

/* ---- scalar (row tails of narrow rows; the whole baseline variant) -------------------------- */

TL_INLINE void normalize_span(const uint8_t *TL_RESTRICT row, ptrdiff_t x0, ptrdiff_t x1,
                              ptrdiff_t w, float *TL_RESTRICT d0, float *TL_RESTRICT d1,
                              float *TL_RESTRICT d2, const float *scale, const float *bias,
                              int flip)
{
    const float s0 = scale[0], s1 = scale[1], s2 = scale[2];
    const float b0 = bias[0], b1 = bias[1], b2 = bias[2];
    if (flip) {
        /* forward reads, mirrored writes: a backward-strided load defeats vectorization */
        for (ptrdiff_t x = x0; x < x1; x++) {
            ptrdiff_t o = w - 1 - x;
            d0[o] = (float)row[3 * x] * s0 + b0;
            d1[o] = (float)row[3 * x + 1] * s1 + b1;
            d2[o] = (float)row[3 * x + 2] * s2 + b2;
        }
    } else {
        for (ptrdiff_t x = x0; x < x1; x++) {
            d0[x] = (float)row[3 * x] * s0 + b0;
            d1[x] = (float)row[3 * x + 1] * s1 + b1;
            d2[x] = (float)row[3 * x + 2] * s2 + b2;
        }
    }
}

TL_INLINE void chw_span(const uint8_t *TL_RESTRICT row, ptrdiff_t x0, ptrdiff_t x1, ptrdiff_t w,
                        uint8_t *TL_RESTRICT d0, uint8_t *TL_RESTRICT d1,
                        uint8_t *TL_RESTRICT d2, int flip)
{
    if (flip) {
        for (ptrdiff_t x = x0; x < x1; x++) {
            ptrdiff_t o = w - 1 - x;
            d0[o] = row[3 * x];
            d1[o] = row[3 * x + 1];
            d2[o] = row[3 * x + 2];
        }
    } else {
        for (ptrdiff_t x = x0; x < x1; x++) {
            d0[x] = row[3 * x];
            d1[x] = row[3 * x + 1];
            d2[x] = row[3 * x + 2];
        }
    }
}

static void normalize_baseline(const uint8_t *src, ptrdiff_t h, ptrdiff_t w, ptrdiff_t stride,
                               float *dst, const float *scale, const float *bias, int flip)
{
    const ptrdiff_t plane = h * w;
    for (ptrdiff_t y = 0; y < h; y++) {
        float *d0 = dst + y * w;
        normalize_span(src + y * stride, 0, w, w, d0, d0 + plane, d0 + 2 * plane, scale, bias,
                       flip);
    }
}

static void chw_baseline(const uint8_t *src, ptrdiff_t h, ptrdiff_t w, ptrdiff_t stride,
                         uint8_t *dst, int flip)
{
    const ptrdiff_t plane = h * w;
    for (ptrdiff_t y = 0; y < h; y++) {
        uint8_t *d0 = dst + y * w;
        chw_span(src + y * stride, 0, w, w, d0, d0 + plane, d0 + 2 * plane, flip);
    }
}

#if TL_X86

/* chw_u8 blocks: 16 pixels (48 bytes, three 16-byte loads). masks[c][r] picks channel c's
 * bytes out of the block's r-th load (0x80 zeroes the positions the other loads fill);
 * byte k of channel c's result is pixel k, or pixel 15 - k when flipped. */
static void byte_masks(uint8_t masks[3][3][16], int flip)
{
    for (int c = 0; c < 3; c++)
        for (int r = 0; r < 3; r++)
            for (int k = 0; k < 16; k++) {
                int byte = 3 * (flip ? 15 - k : k) + c;
                masks[c][r][k] = (uint8_t)((byte >> 4) == r ? (byte & 15) : 0x80);
            }
}

/* ---- SSSE3 + SSE4.1 ------------------------------------------------------------------------ */

TL_TARGET_SSE41 static void normalize_sse41(const uint8_t *src, ptrdiff_t h, ptrdiff_t w,
                                            ptrdiff_t stride, float *dst, const float *scale,
                                            const float *bias, int flip)
{
    const ptrdiff_t plane = h * w;
    uint8_t mb[3][2][16];
    tl_widen_masks(mb, flip);  /* chw_masks.h */
    const __m128i m00 = _mm_loadu_si128((const __m128i *)mb[0][0]);
    const __m128i m01 = _mm_loadu_si128((const __m128i *)mb[0][1]);
    const __m128i m10 = _mm_loadu_si128((const __m128i *)mb[1][0]);
    const __m128i m11 = _mm_loadu_si128((const __m128i *)mb[1][1]);
    const __m128i m20 = _mm_loadu_si128((const __m128i *)mb[2][0]);
    const __m128i m21 = _mm_loadu_si128((const __m128i *)mb[2][1]);
    const __m128 s0 = _mm_set1_ps(scale[0]), s1 = _mm_set1_ps(scale[1]);
    const __m128 s2 = _mm_set1_ps(scale[2]);
    const __m128 b0 = _mm_set1_ps(bias[0]), b1 = _mm_set1_ps(bias[1]);
    const __m128 b2 = _mm_set1_ps(bias[2]);
    for (ptrdiff_t y = 0; y < h; y++) {
        const uint8_t *row = src + y * stride;
        float *d0 = dst + y * w, *d1 = d0 + plane, *d2 = d1 + plane;
        if (w < 8) {
            normalize_span(row, 0, w, w, d0, d1, d2, scale, bias, flip);
            continue;
        }
        for (ptrdiff_t x = 0;; x += 8) {
            if (x > w - 8)
                x = w - 8; /* the last block, aligned to the row's end */
            const __m128i lo = _mm_loadu_si128((const __m128i *)(row + 3 * x));
            const __m128i hi = _mm_loadu_si128((const __m128i *)(row + 3 * x + 8));
            const __m128i a = flip ? hi : lo, b = flip ? lo : hi;
            const ptrdiff_t o = flip ? w - x - 8 : x;
#define TL_NORM4(v, m, s, bb, d)                                                          \
    _mm_storeu_ps((d), _mm_add_ps(_mm_mul_ps(_mm_cvtepi32_ps(_mm_shuffle_epi8((v), (m))), \
                                             (s)),                                        \
                                  (bb)))
            TL_NORM4(a, m00, s0, b0, d0 + o);
            TL_NORM4(b, m01, s0, b0, d0 + o + 4);
            TL_NORM4(a, m10, s1, b1, d1 + o);
            TL_NORM4(b, m11, s1, b1, d1 + o + 4);
            TL_NORM4(a, m20, s2, b2, d2 + o);
            TL_NORM4(b, m21, s2, b2, d2 + o + 4);
#undef TL_NORM4
            if (x == w - 8)
                break;
        }
    }
}

TL_TARGET_SSE41 static void chw_sse41(const uint8_t *src, ptrdiff_t h, ptrdiff_t w,
                                      ptrdiff_t stride, uint8_t *dst, int flip)
{
    const ptrdiff_t plane = h * w;
    uint8_t mb[3][3][16];
    byte_masks(mb, flip);
    __m128i m[3][3];
    for (int c = 0; c < 3; c++)
        for (int r = 0; r < 3; r++)
            m[c][r] = _mm_loadu_si128((const __m128i *)mb[c][r]);
    for (ptrdiff_t y = 0; y < h; y++) {
        const uint8_t *row = src + y * stride;
        uint8_t *d[3] = {dst + y * w, dst + plane + y * w, dst + 2 * plane + y * w};
        if (w < 16) {
            chw_span(row, 0, w, w, d[0], d[1], d[2], flip);
            continue;
        }
        for (ptrdiff_t x = 0;; x += 16) {
            if (x > w - 16)
                x = w - 16;
            const uint8_t *p = row + 3 * x;
            const __m128i a = _mm_loadu_si128((const __m128i *)p);
            const __m128i b = _mm_loadu_si128((const __m128i *)(p + 16));
            const __m128i c = _mm_loadu_si128((const __m128i *)(p + 32));
            const ptrdiff_t o = flip ? w - x - 16 : x;
            for (int ch = 0; ch < 3; ch++)
                _mm_storeu_si128((__m128i *)(d[ch] + o),
                                 _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, m[ch][0]),
                                                           _mm_shuffle_epi8(b, m[ch][1])),
                                              _mm_shuffle_epi8(c, m[ch][2])));
            if (x == w - 16)
                break;
        }
    }
}

/* ---- AVX2 ---------------------------------------------------------------------------------- */

TL_TARGET_AVX2 TL_INLINE __m256i load_lanes(const uint8_t *lo, const uint8_t *hi)
{
    return _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)lo)),
        _mm_loadu_si128((const __m128i *)hi), 1);
}

enum { TL_NORM_AHEAD = 256 };   /* floats of a plane prefetched ahead of the stores */

TL_TARGET_AVX2 static void normalize_avx2(const uint8_t *src, ptrdiff_t h, ptrdiff_t w,
                                          ptrdiff_t stride, float *dst, const float *scale,
                                          const float *bias, int flip)
{
    /* one 8-pixel block per step, its two loads in the two 128-bit lanes (swapped when
     * flipped): one vpshufb per channel gives the channel's 8 int32 in output order */
    const ptrdiff_t plane = h * w;
    uint8_t mb[3][2][16];
    tl_widen_masks(mb, flip);  /* chw_masks.h */
    const __m256i m0 = _mm256_loadu_si256((const __m256i *)mb[0]);
    const __m256i m1 = _mm256_loadu_si256((const __m256i *)mb[1]);
    const __m256i m2 = _mm256_loadu_si256((const __m256i *)mb[2]);
    const __m256 s0 = _mm256_set1_ps(scale[0]), s1 = _mm256_set1_ps(scale[1]);
    const __m256 s2 = _mm256_set1_ps(scale[2]);
    const __m256 b0 = _mm256_set1_ps(bias[0]), b1 = _mm256_set1_ps(bias[1]);
    const __m256 b2 = _mm256_set1_ps(bias[2]);
    const ptrdiff_t first = flip ? 8 : 0;
    for (ptrdiff_t y = 0; y < h; y++) {
        const uint8_t *row = src + y * stride;
        float *d0 = dst + y * w, *d1 = d0 + plane, *d2 = d1 + plane;
        if (w < 8) {
            normalize_span(row, 0, w, w, d0, d1, d2, scale, bias, flip);
            continue;
        }
        for (ptrdiff_t x = 0;; x += 8) {
            if (x > w - 8)
                x = w - 8;
            /* every 32 pixels, the planes' lines TL_NORM_AHEAD floats on (about a row
             * ahead): a batch tensor is far out of the cache, and a store whose line is
             * fetched only when the store reaches it stalls the loop */
            const ptrdiff_t ahead = y * w + x + TL_NORM_AHEAD;
            if ((x & 31) == 0 && ahead + 32 <= plane) {
                __builtin_prefetch(d0 - y * w + ahead, 1, 3);
                __builtin_prefetch(d0 - y * w + ahead + 16, 1, 3);
                __builtin_prefetch(d1 - y * w + ahead, 1, 3);
                __builtin_prefetch(d1 - y * w + ahead + 16, 1, 3);
                __builtin_prefetch(d2 - y * w + ahead, 1, 3);
                __builtin_prefetch(d2 - y * w + ahead + 16, 1, 3);
            }
            const uint8_t *p = row + 3 * x;
            const __m256i v = load_lanes(p + first, p + 8 - first);
            const ptrdiff_t o = flip ? w - x - 8 : x;
#define TL_NORM8(m, s, bb, d)                                            \
    _mm256_storeu_ps((d), _mm256_add_ps(_mm256_mul_ps(                   \
                              _mm256_cvtepi32_ps(_mm256_shuffle_epi8(v, (m))), (s)), \
                          (bb)))
            TL_NORM8(m0, s0, b0, d0 + o);
            TL_NORM8(m1, s1, b1, d1 + o);
            TL_NORM8(m2, s2, b2, d2 + o);
#undef TL_NORM8
            if (x == w - 8)
                break;
        }
    }
}

TL_TARGET_AVX2 static void chw_avx2(const uint8_t *src, ptrdiff_t h, ptrdiff_t w,
                                    ptrdiff_t stride, uint8_t *dst, int flip)
{
    /* 32 pixels per step: two 16-pixel blocks, one per 128-bit lane */
    const ptrdiff_t plane = h * w;
    uint8_t mb[3][3][16];
    byte_masks(mb, flip);
    __m256i m[3][3];
    for (int c = 0; c < 3; c++)
        for (int r = 0; r < 3; r++)
            m[c][r] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)mb[c][r]));
    for (ptrdiff_t y = 0; y < h; y++) {
        const uint8_t *row = src + y * stride;
        uint8_t *d[3] = {dst + y * w, dst + plane + y * w, dst + 2 * plane + y * w};
        for (ptrdiff_t x = 0;; x += 32) {   /* w >= 32 (the dispatcher) */
            if (x > w - 32)
                x = w - 32;
            const uint8_t *p = row + 3 * x;
            const __m256i a = load_lanes(p, p + 48);
            const __m256i b = load_lanes(p + 16, p + 64);
            const __m256i c = load_lanes(p + 32, p + 80);
            const ptrdiff_t o = flip ? w - x - 32 : x;
            for (int ch = 0; ch < 3; ch++) {
                __m256i v = _mm256_or_si256(_mm256_or_si256(_mm256_shuffle_epi8(a, m[ch][0]),
                                                            _mm256_shuffle_epi8(b, m[ch][1])),
                                            _mm256_shuffle_epi8(c, m[ch][2]));
                /* flipped, the lanes hold pixels 15..0 | 31..16: swap them */
                if (flip)
                    v = _mm256_permute4x64_epi64(v, 0x4E);
                _mm256_storeu_si256((__m256i *)(d[ch] + o), v);
            }
            if (x == w - 32)
                break;
        }
    }
}

#endif /* TL_X86 */

/* ---- dispatch ------------------------------------------------------------------------------ */

void tl_normalize_chw_f32(const uint8_t *src, ptrdiff_t h, ptrdiff_t w, ptrdiff_t src_stride,
                          float *dst, const float *scale, const float *bias, int flip, int isa)
{
#if TL_X86
    if (isa >= TL_ISA_AVX2) {
        normalize_avx2(src, h, w, src_stride, dst, scale, bias, flip);
        return;
    }
    if (isa >= TL_ISA_SSE41) {
        normalize_sse41(src, h, w, src_stride, dst, scale, bias, flip);
        return;
    }
#endif
    (void)isa;
    normalize_baseline(src, h, w, src_stride, dst, scale, bias, flip);
}

void tl_chw_u8(const uint8_t *src, ptrdiff_t h, ptrdiff_t w, ptrdiff_t src_stride,
               uint8_t *dst, int flip, int isa)
{
#if TL_X86
    if (isa >= TL_ISA_AVX2 && w >= 32) {   /* narrower rows: 16-pixel blocks */
        chw_avx2(src, h, w, src_stride, dst, flip);
        return;
    }
    if (isa >= TL_ISA_SSE41) {
        chw_sse41(src, h, w, src_stride, dst, flip);
        return;
    }
#endif
    (void)isa;
    chw_baseline(src, h, w, src_stride, dst, flip);
}
