/* Pillow's 8 bpc resampling passes (resample_impl.h), one copy per ISA level, and their
 * dispatch (see resample_kernels.h). */
#include "resample_kernels.h"

#include "simd.h"

#define TL_HALF ((int32_t)1 << (TL_PRECISION_BITS - 1))

TL_INLINE uint8_t tl_clip8(int32_t s)
{
    s >>= TL_PRECISION_BITS;
    return (uint8_t)(s < 0 ? 0 : (s > 255 ? 255 : s));
}

#define TL_FN(name) name##_baseline
#define TL_TGT
#include "resample_impl.h"
#undef TL_FN
#undef TL_TGT

#if TL_X86
#define TL_FN(name) name##_sse41
#define TL_TGT TL_TARGET_SSE41
#include "resample_impl.h"
#undef TL_FN
#undef TL_TGT

#define TL_FN(name) name##_avx2
#define TL_TGT TL_TARGET_AVX2
#include "resample_impl.h"
#undef TL_FN
#undef TL_TGT
#endif

#if TL_X86
#include <immintrin.h>
#include <string.h>

/* 3-channel horizontal pass with 32-bit vector multiply-adds: each tap's pixel is widened to
 * four int32 lanes (R, G, B and one spare lane the result ignores) and multiplied by the
 * broadcast coefficient. Integer sums are exact, so this equals the scalar loop bit for bit.
 * Loads are 4 (SSE4.1) or 8 (AVX2, two taps) bytes from a pixel's start: at most 2 bytes past
 * the taps' last pixel, so an output pixel whose taps reach the row's last source pixel
 * (first + taps == in_w) takes the scalar loop and nothing is read past the row. */

TL_INLINE void hpass3_scalar_px(const uint8_t *sp, const int32_t *k, ptrdiff_t n, uint8_t *d)
{
    int32_t s0 = TL_HALF, s1 = TL_HALF, s2 = TL_HALF;
    for (ptrdiff_t x = 0; x < n; x++) {
        s0 += sp[3 * x] * k[x];
        s1 += sp[3 * x + 1] * k[x];
        s2 += sp[3 * x + 2] * k[x];
    }
    d[0] = tl_clip8(s0);
    d[1] = tl_clip8(s1);
    d[2] = tl_clip8(s2);
}

/* sums (int32 R, G, B, spare) -> 3 bytes at d; `room` bytes may be written at d (>= 3) */
TL_TARGET_SSE41 TL_INLINE void store3(__m128i acc, uint8_t *d, int room)
{
    __m128i v = _mm_srai_epi32(acc, TL_PRECISION_BITS);
    v = _mm_packus_epi16(_mm_packs_epi32(v, v), v);   /* saturation == clip8's clamp */
    uint32_t bytes = (uint32_t)_mm_cvtsi128_si32(v);
    if (room >= 4) {
        memcpy(d, &bytes, 4);   /* the 4th byte is the next pixel's, written after this */
    } else {
        d[0] = (uint8_t)bytes;
        d[1] = (uint8_t)(bytes >> 8);
        d[2] = (uint8_t)(bytes >> 16);
    }
}

TL_TARGET_SSE41 static void hpass3_sse41(const uint8_t *src, ptrdiff_t src_stride,
                                         ptrdiff_t nrows, uint8_t *dst, ptrdiff_t dst_stride,
                                         ptrdiff_t out_w, ptrdiff_t in_w, const int32_t *kk,
                                         const int32_t *bounds, ptrdiff_t ksize)
{
    for (ptrdiff_t y = 0; y < nrows; y++) {
        const uint8_t *srow = src + y * src_stride;
        uint8_t *drow = dst + y * dst_stride;
        for (ptrdiff_t xx = 0; xx < out_w; xx++) {
            const int32_t *k = kk + xx * ksize;
            const ptrdiff_t first = bounds[2 * xx], n = bounds[2 * xx + 1];
            const uint8_t *sp = srow + 3 * first;
            if (first + n >= in_w) {
                hpass3_scalar_px(sp, k, n, drow + 3 * xx);
                continue;
            }
            __m128i acc = _mm_set1_epi32(TL_HALF);
            for (ptrdiff_t x = 0; x < n; x++) {
                int32_t px;
                memcpy(&px, sp + 3 * x, 4);
                __m128i v = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(px));
                acc = _mm_add_epi32(acc, _mm_mullo_epi32(v, _mm_set1_epi32(k[x])));
            }
            store3(acc, drow + 3 * xx, xx + 1 < out_w ? 4 : 3);
        }
    }
}

TL_TARGET_AVX2 static void hpass3_avx2(const uint8_t *src, ptrdiff_t src_stride,
                                       ptrdiff_t nrows, uint8_t *dst, ptrdiff_t dst_stride,
                                       ptrdiff_t out_w, ptrdiff_t in_w, const int32_t *kk,
                                       const int32_t *bounds, ptrdiff_t ksize)
{
    /* two taps per step: the 8 bytes at the pair's first pixel, broadcast to both lanes,
     * shuffled to (R, G, B, 0) of tap x in the low lane and of tap x + 1 in the high lane */
    const __m256i spread = _mm256_setr_epi8(
        0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, -1, -1, -1, -1,
        3, -1, -1, -1, 4, -1, -1, -1, 5, -1, -1, -1, -1, -1, -1, -1);
    const __m256i pair = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    for (ptrdiff_t y = 0; y < nrows; y++) {
        const uint8_t *srow = src + y * src_stride;
        uint8_t *drow = dst + y * dst_stride;
        for (ptrdiff_t xx = 0; xx < out_w; xx++) {
            const int32_t *k = kk + xx * ksize;
            const ptrdiff_t first = bounds[2 * xx], n = bounds[2 * xx + 1];
            const uint8_t *sp = srow + 3 * first;
            if (first + n >= in_w) {
                hpass3_scalar_px(sp, k, n, drow + 3 * xx);
                continue;
            }
            __m256i acc2 = _mm256_setzero_si256();
            ptrdiff_t x = 0;
            for (; x + 2 <= n; x += 2) {
                int64_t px;
                memcpy(&px, sp + 3 * x, 8);
                __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi64x(px), spread);
                __m256i w = _mm256_permutevar8x32_epi32(
                    _mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)(k + x))), pair);
                acc2 = _mm256_add_epi32(acc2, _mm256_mullo_epi32(v, w));
            }
            __m128i acc = _mm_add_epi32(_mm_set1_epi32(TL_HALF),
                                        _mm_add_epi32(_mm256_castsi256_si128(acc2),
                                                      _mm256_extracti128_si256(acc2, 1)));
            if (x < n) {
                int32_t px;
                memcpy(&px, sp + 3 * x, 4);
                __m128i v = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(px));
                acc = _mm_add_epi32(acc, _mm_mullo_epi32(v, _mm_set1_epi32(k[x])));
            }
            store3(acc, drow + 3 * xx, xx + 1 < out_w ? 4 : 3);
        }
    }
}
#endif

void tl_resample_hpass(const uint8_t *src, ptrdiff_t src_stride, ptrdiff_t nrows, uint8_t *dst,
                       ptrdiff_t dst_stride, ptrdiff_t out_w, ptrdiff_t in_w, int C,
                       const int32_t *kk, const int32_t *bounds, ptrdiff_t ksize, int isa)
{
#if TL_X86
    if (C == 3 && isa >= TL_ISA_AVX2) {
        hpass3_avx2(src, src_stride, nrows, dst, dst_stride, out_w, in_w, kk, bounds, ksize);
        return;
    }
    if (C == 3 && isa >= TL_ISA_SSE41) {
        hpass3_sse41(src, src_stride, nrows, dst, dst_stride, out_w, in_w, kk, bounds, ksize);
        return;
    }
    if (isa >= TL_ISA_AVX2) {
        hpass_avx2(src, src_stride, nrows, dst, dst_stride, out_w, C, kk, bounds, ksize);
        return;
    }
    if (isa >= TL_ISA_SSE41) {
        hpass_sse41(src, src_stride, nrows, dst, dst_stride, out_w, C, kk, bounds, ksize);
        return;
    }
#endif
    (void)isa;
    (void)in_w;
    hpass_baseline(src, src_stride, nrows, dst, dst_stride, out_w, C, kk, bounds, ksize);
}

void tl_resample_vpass(const uint8_t *src, ptrdiff_t src_stride, uint8_t *dst,
                       ptrdiff_t dst_stride, ptrdiff_t out_h, ptrdiff_t rowlen,
                       const int32_t *kk, const int32_t *bounds, ptrdiff_t ksize, int32_t *acc,
                       int isa)
{
#if TL_X86
    if (isa >= TL_ISA_AVX2) {
        vpass_avx2(src, src_stride, dst, dst_stride, out_h, rowlen, kk, bounds, ksize, acc);
        return;
    }
    if (isa >= TL_ISA_SSE41) {
        vpass_sse41(src, src_stride, dst, dst_stride, out_h, rowlen, kk, bounds, ksize, acc);
        return;
    }
#endif
    (void)isa;
    vpass_baseline(src, src_stride, dst, dst_stride, out_h, rowlen, kk, bounds, ksize, acc);
}
