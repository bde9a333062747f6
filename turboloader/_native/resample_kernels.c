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

#define TL_IMPL "resample_impl.h"
#include "isa_variants.h"
#undef TL_IMPL

#if TL_X86
#include <immintrin.h>
#include <string.h>

/* 3-channel horizontal pass with 32-bit vector multiply-adds: each tap's pixel is widened to
 * four int32 lanes (R, G, B and one spare lane the result ignores) and multiplied by the
 * broadcast coefficient. Integer sums are exact, so this equals the scalar loop bit for bit.
 * Loads are 4 bytes from a pixel's start: 1 byte past the taps' last pixel, so an output
 * pixel (or AVX2 pair) whose taps reach the row's last source pixel (first + taps == in_w)
 * takes the scalar loop and nothing is read past the row. */

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

/* AVX2, two output pixels per vector: lane 0 holds pixel xx's (R, G, B, spare) sums, lane 1
 * pixel xx + 1's. Both read the same source pixels, the union of their tap ranges, so one
 * 4-byte load (widened to both lanes) serves both; each lane's coefficients are zero outside
 * its own range. The coefficient vectors are built once per chunk of pairs and reused for
 * every row, which removes the per-pixel coefficient loads and half the stores.
 * Integer sums with zero terms added: equal to the scalar loop bit for bit. */
enum { TL_PAIR_TABLE = 512 };   /* 32-byte coefficient vectors on the stack: 16 KiB */

TL_TARGET_AVX2 static void hpass3_avx2_pairs(const uint8_t *src, ptrdiff_t src_stride,
                                             ptrdiff_t nrows, uint8_t *dst,
                                             ptrdiff_t dst_stride, ptrdiff_t out_w,
                                             ptrdiff_t in_w, const int32_t *kk,
                                             const int32_t *bounds, ptrdiff_t ksize)
{
    __m256i table[TL_PAIR_TABLE];
    int32_t pfirst[TL_PAIR_TABLE], pspan[TL_PAIR_TABLE], poff[TL_PAIR_TABLE];
    const ptrdiff_t npairs = out_w / 2;
    ptrdiff_t p0 = 0;
    while (p0 < npairs) {
        ptrdiff_t count = 0, used = 0;
        while (p0 + count < npairs && count < TL_PAIR_TABLE) {
            const ptrdiff_t a = 2 * (p0 + count), b = a + 1;
            const ptrdiff_t fa = bounds[2 * a], na = bounds[2 * a + 1];
            const ptrdiff_t fb = bounds[2 * b], nb = bounds[2 * b + 1];
            const ptrdiff_t lo = fa < fb ? fa : fb;
            const ptrdiff_t hi = fa + na > fb + nb ? fa + na : fb + nb;
            const ptrdiff_t span = hi - lo;
            if (used + span > TL_PAIR_TABLE)
                break;
            for (ptrdiff_t x = 0; x < span; x++) {
                const ptrdiff_t ia = x + lo - fa, ib = x + lo - fb;
                const int32_t ka = (ia >= 0 && ia < na) ? kk[a * ksize + ia] : 0;
                const int32_t kb = (ib >= 0 && ib < nb) ? kk[b * ksize + ib] : 0;
                table[used + x] = _mm256_setr_epi32(ka, ka, ka, ka, kb, kb, kb, kb);
            }
            pfirst[count] = (int32_t)lo;
            pspan[count] = (int32_t)span;
            poff[count] = (int32_t)used;
            used += span;
            count++;
        }
        if (count == 0) {
            /* one pair's taps do not fit the table (extreme downscaling): per pixel */
            const ptrdiff_t a = 2 * p0;
            for (ptrdiff_t y = 0; y < nrows; y++)
                for (ptrdiff_t xx = a; xx < a + 2; xx++)
                    hpass3_scalar_px(src + y * src_stride + 3 * (ptrdiff_t)bounds[2 * xx],
                                     kk + xx * ksize, bounds[2 * xx + 1],
                                     dst + y * dst_stride + 3 * xx);
            p0++;
            continue;
        }
        for (ptrdiff_t y = 0; y < nrows; y++) {
            const uint8_t *srow = src + y * src_stride;
            uint8_t *drow = dst + y * dst_stride;
            for (ptrdiff_t c = 0; c < count; c++) {
                const ptrdiff_t xx = 2 * (p0 + c);
                const ptrdiff_t lo = pfirst[c], span = pspan[c];
                const __m256i *k = table + poff[c];
                const uint8_t *sp = srow + 3 * lo;
                uint8_t *d = drow + 3 * xx;
                if (lo + span >= in_w) {
                    /* a 4-byte load at the row's last pixel would read past the row */
                    hpass3_scalar_px(srow + 3 * (ptrdiff_t)bounds[2 * xx], kk + xx * ksize,
                                     bounds[2 * xx + 1], d);
                    hpass3_scalar_px(srow + 3 * (ptrdiff_t)bounds[2 * xx + 2],
                                     kk + (xx + 1) * ksize, bounds[2 * xx + 3], d + 3);
                    continue;
                }
                __m256i acc = _mm256_set1_epi32(TL_HALF);
                for (ptrdiff_t x = 0; x < span; x++) {
                    int32_t px;
                    memcpy(&px, sp + 3 * x, 4);
                    __m256i v = _mm256_cvtepu8_epi32(_mm_set1_epi32(px));
                    acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(v, k[x]));
                }
                __m256i v = _mm256_srai_epi32(acc, TL_PRECISION_BITS);
                v = _mm256_packus_epi16(_mm256_packs_epi32(v, v), v);  /* clip8, per lane */
                uint32_t ba = (uint32_t)_mm256_cvtsi256_si32(v);
                uint32_t bb = (uint32_t)_mm_cvtsi128_si32(_mm256_extracti128_si256(v, 1));
                memcpy(d, &ba, 4);   /* its 4th byte is pixel xx + 1's, written next */
                if (xx + 2 < out_w) {
                    memcpy(d + 3, &bb, 4);
                } else {
                    d[3] = (uint8_t)bb;
                    d[4] = (uint8_t)(bb >> 8);
                    d[5] = (uint8_t)(bb >> 16);
                }
            }
        }
        p0 += count;
    }
    if (out_w & 1) {
        const ptrdiff_t xx = out_w - 1;
        for (ptrdiff_t y = 0; y < nrows; y++)
            hpass3_scalar_px(src + y * src_stride + 3 * (ptrdiff_t)bounds[2 * xx],
                             kk + xx * ksize, bounds[2 * xx + 1], dst + y * dst_stride + 3 * xx);
    }
}
#endif

void tl_resample_hpass(const uint8_t *src, ptrdiff_t src_stride, ptrdiff_t nrows, uint8_t *dst,
                       ptrdiff_t dst_stride, ptrdiff_t out_w, ptrdiff_t in_w, int C,
                       const int32_t *kk, const int32_t *bounds, ptrdiff_t ksize, int isa)
{
#if TL_X86
    if (C == 3 && isa >= TL_ISA_AVX2) {
        hpass3_avx2_pairs(src, src_stride, nrows, dst, dst_stride, out_w, in_w, kk, bounds, ksize);
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
