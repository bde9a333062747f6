/* Pillow's 8 bpc resampling passes (resample_impl.h), one copy per ISA level, and their
 * dispatch (see resample_kernels.h). */
#include "resample_kernels.h"
#include "chw_masks.h"

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

/* SSE4.1, 3-channel horizontal pass with 32-bit vector multiply-adds: each tap's pixel is
 * widened to four int32 lanes (R, G, B and one spare lane the result ignores) and multiplied
 * by the broadcast coefficient. Integer sums are exact, so this equals the scalar loop bit for
 * bit. Loads are 4 bytes from a pixel's start: 1 byte past the taps' last pixel, so an output
 * pixel whose taps reach the row's last source pixel (first + taps == in_w) takes the scalar
 * loop and nothing is read past the row. */

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

/* AVX2 kernels with 16-bit multiply-adds on an exact split of Pillow's coefficients. Each
 * 22-bit coefficient k is kh * 2^11 + kl with kh = k >> 11 (arithmetic) and kl = k & 0x7ff,
 * both int16 for |k| < 2^26 (Pillow's are at most about 2^22); pmaddwd multiplies a pair of
 * taps' pixels by their halves and adds them, and the sums recombine as (hi << 11) + lo:
 * the scalar loop's integer (two's-complement arithmetic), so the bytes are equal bit for
 * bit. A coefficient row outside the int16 range takes the plain loops. */
TL_INLINE int tl_split_fits(const int32_t *k, ptrdiff_t n)
{
    for (ptrdiff_t i = 0; i < n; i++)
        if (k[i] >= (1 << 26) || k[i] < -(1 << 26))
            return 0;
    return 1;
}

/* two taps' coefficient halves as the int16 pairs pmaddwd takes: (a's, b's) */
TL_INLINE int32_t tl_pair_hi(int32_t a, int32_t b)
{
    return (int32_t)((uint32_t)(uint16_t)(int16_t)(a >> 11) |
                     ((uint32_t)(uint16_t)(int16_t)(b >> 11) << 16));
}

TL_INLINE int32_t tl_pair_lo(int32_t a, int32_t b)
{
    return (int32_t)((uint32_t)(a & 0x7ff) | ((uint32_t)(b & 0x7ff) << 16));
}

/* (hi << 11) + lo, shifted to 8 bits (not yet clamped) */
#define TL_SPLIT_SUM(h, l) _mm256_srai_epi32(_mm256_add_epi32(_mm256_slli_epi32(h, 11), l), \
                                             TL_PRECISION_BITS)

/* Horizontal pass, 3 channels: two output pixels per vector, lane 0 pixel xx and lane 1
 * pixel xx + 1, over the union of their taps (a lane's coefficients are zero outside its
 * own), for four rows at once. One 8-byte load holds source pixels x and x + 1, shuffled into
 * int16 (R_x, R_x+1, G_x, G_x+1, B_x, B_x+1, 0, 0) in both lanes. The coefficient vectors are
 * built once per chunk of pairs and reused for every row. An 8-byte load reads up to 2 bytes
 * past its second pixel, so a pair whose taps reach the row's last 2 pixels takes the scalar
 * loop. (Four rows rather than two: 1.09-1.34x in benchmarks/bench_kernels.py's resize rows
 * on the 2-core machine, the sums of four rows being independent chains behind one
 * coefficient load; separate loads per lane instead of the union of the pair's taps were
 * measured slower.) */
enum { TL_MADD_TABLE = 256 };   /* tap pairs per chunk: 2 x 8 KiB of vectors on the stack */

TL_TARGET_AVX2 static void hpass3_avx2_madd(const uint8_t *src, ptrdiff_t src_stride,
                                            ptrdiff_t nrows, uint8_t *dst,
                                            ptrdiff_t dst_stride, ptrdiff_t out_w,
                                            ptrdiff_t in_w, const int32_t *kk,
                                            const int32_t *bounds, ptrdiff_t ksize)
{
    __m256i thi[TL_MADD_TABLE], tlo[TL_MADD_TABLE];
    int32_t pfirst[TL_MADD_TABLE], ppairs[TL_MADD_TABLE], poff[TL_MADD_TABLE];
    const __m256i shuf = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1,
                                          0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
    const __m128i pack6 = _mm_setr_epi8(0, 1, 2, 4, 5, 6, -1, -1, 8, 9, 10, 12, 13, 14, -1, -1);
    const ptrdiff_t npairs = out_w / 2;
    ptrdiff_t p0 = 0;
    while (p0 < npairs) {
        ptrdiff_t count = 0, used = 0;
        while (p0 + count < npairs && count < TL_MADD_TABLE) {
            const ptrdiff_t a = 2 * (p0 + count), b = a + 1;
            const ptrdiff_t fa = bounds[2 * a], na = bounds[2 * a + 1];
            const ptrdiff_t fb = bounds[2 * b], nb = bounds[2 * b + 1];
            const ptrdiff_t lo = fa < fb ? fa : fb;
            const ptrdiff_t hi = fa + na > fb + nb ? fa + na : fb + nb;
            const ptrdiff_t np = (hi - lo + 1) / 2;
            if (used + np > TL_MADD_TABLE || !tl_split_fits(kk + a * ksize, na) ||
                !tl_split_fits(kk + b * ksize, nb))
                break;
            for (ptrdiff_t q = 0; q < np; q++) {
                int32_t ka[2], kb[2];
                for (int t = 0; t < 2; t++) {
                    const ptrdiff_t x = lo + 2 * q + t, ia = x - fa, ib = x - fb;
                    ka[t] = (ia >= 0 && ia < na) ? kk[a * ksize + ia] : 0;
                    kb[t] = (ib >= 0 && ib < nb) ? kk[b * ksize + ib] : 0;
                }
                const int32_t ha = tl_pair_hi(ka[0], ka[1]), hb = tl_pair_hi(kb[0], kb[1]);
                const int32_t la = tl_pair_lo(ka[0], ka[1]), lb = tl_pair_lo(kb[0], kb[1]);
                thi[used + q] = _mm256_setr_epi32(ha, ha, ha, ha, hb, hb, hb, hb);
                tlo[used + q] = _mm256_setr_epi32(la, la, la, la, lb, lb, lb, lb);
            }
            pfirst[count] = (int32_t)lo;
            ppairs[count] = (int32_t)np;
            poff[count] = (int32_t)used;
            used += np;
            count++;
        }
        if (count == 0) {
            /* one pair's taps do not fit the table or the int16 halves: per pixel */
            const ptrdiff_t a = 2 * p0;
            for (ptrdiff_t y = 0; y < nrows; y++)
                for (ptrdiff_t xx = a; xx < a + 2; xx++)
                    hpass3_scalar_px(src + y * src_stride + 3 * (ptrdiff_t)bounds[2 * xx],
                                     kk + xx * ksize, bounds[2 * xx + 1],
                                     dst + y * dst_stride + 3 * xx);
            p0++;
            continue;
        }
        /* four rows at a time (they share the coefficient loads and the loop; the sums of
         * the four are independent chains), the last rows with copies of the first */
        for (ptrdiff_t y = 0; y < nrows; y += 4) {
            const int nr = nrows - y < 4 ? (int)(nrows - y) : 4;
            const uint8_t *s0 = src + y * src_stride;
            const uint8_t *s1 = nr > 1 ? s0 + src_stride : s0;
            const uint8_t *s2 = nr > 2 ? s0 + 2 * src_stride : s0;
            const uint8_t *s3 = nr > 3 ? s0 + 3 * src_stride : s0;
            uint8_t *d0 = dst + y * dst_stride;
            for (ptrdiff_t c = 0; c < count; c++) {
                const ptrdiff_t xx = 2 * (p0 + c);
                const ptrdiff_t lo = pfirst[c], np = ppairs[c];
                const __m256i *kh = thi + poff[c], *kl = tlo + poff[c];
                if (lo + 2 * np + 1 > in_w) {
                    /* the last load ends at byte 3 * (lo + 2 * np) + 2 of the row */
                    for (int r = 0; r < nr; r++) {
                        const uint8_t *srow = s0 + r * src_stride;
                        uint8_t *d = d0 + r * dst_stride + 3 * xx;
                        hpass3_scalar_px(srow + 3 * (ptrdiff_t)bounds[2 * xx], kk + xx * ksize,
                                         bounds[2 * xx + 1], d);
                        hpass3_scalar_px(srow + 3 * (ptrdiff_t)bounds[2 * xx + 2],
                                         kk + (xx + 1) * ksize, bounds[2 * xx + 3], d + 3);
                    }
                    continue;
                }
                const ptrdiff_t off = 3 * lo;
                __m256i h0 = _mm256_setzero_si256(), l0 = _mm256_set1_epi32(TL_HALF);
                __m256i h1 = h0, l1 = l0, h2 = h0, l2 = l0, h3 = h0, l3 = l0;
                for (ptrdiff_t q = 0; q < np; q++) {
                    int64_t x0, x1, x2, x3;
                    memcpy(&x0, s0 + off + 6 * q, 8);
                    memcpy(&x1, s1 + off + 6 * q, 8);
                    memcpy(&x2, s2 + off + 6 * q, 8);
                    memcpy(&x3, s3 + off + 6 * q, 8);
                    const __m256i ch = _mm256_load_si256(kh + q), cl = _mm256_load_si256(kl + q);
                    const __m256i v0 = _mm256_shuffle_epi8(_mm256_set1_epi64x(x0), shuf);
                    const __m256i v1 = _mm256_shuffle_epi8(_mm256_set1_epi64x(x1), shuf);
                    h0 = _mm256_add_epi32(h0, _mm256_madd_epi16(v0, ch));
                    l0 = _mm256_add_epi32(l0, _mm256_madd_epi16(v0, cl));
                    h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(v1, ch));
                    l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(v1, cl));
                    const __m256i v2 = _mm256_shuffle_epi8(_mm256_set1_epi64x(x2), shuf);
                    const __m256i v3 = _mm256_shuffle_epi8(_mm256_set1_epi64x(x3), shuf);
                    h2 = _mm256_add_epi32(h2, _mm256_madd_epi16(v2, ch));
                    l2 = _mm256_add_epi32(l2, _mm256_madd_epi16(v2, cl));
                    h3 = _mm256_add_epi32(h3, _mm256_madd_epi16(v3, ch));
                    l3 = _mm256_add_epi32(l3, _mm256_madd_epi16(v3, cl));
                }
                /* lane 0 of v: rows 0-3 of pixel xx, 4 bytes each (R, G, B, 0); lane 1: the
                 * same of pixel xx + 1 (saturating packs == clip8's clamp). Interleaved and
                 * compressed, each 8-byte half of r01 / r23 is one row's two pixels, 6 bytes */
                const __m256i v = _mm256_packus_epi16(
                    _mm256_packs_epi32(TL_SPLIT_SUM(h0, l0), TL_SPLIT_SUM(h1, l1)),
                    _mm256_packs_epi32(TL_SPLIT_SUM(h2, l2), TL_SPLIT_SUM(h3, l3)));
                const __m128i a = _mm256_castsi256_si128(v), b = _mm256_extracti128_si256(v, 1);
                const __m128i r01 = _mm_shuffle_epi8(_mm_unpacklo_epi32(a, b), pack6);
                const __m128i r23 = _mm_shuffle_epi8(_mm_unpackhi_epi32(a, b), pack6);
                /* 8-byte stores write 2 bytes of pixel xx + 2, which is written after this;
                 * the row's last pair stores its 6 bytes alone */
                uint8_t *e = d0 + 3 * xx;
                if (xx + 2 < out_w) {
                    _mm_storel_epi64((__m128i *)e, r01);
                    if (nr > 1)
                        _mm_storeh_pd((double *)(e + dst_stride), _mm_castsi128_pd(r01));
                    if (nr > 2)
                        _mm_storel_epi64((__m128i *)(e + 2 * dst_stride), r23);
                    if (nr > 3)
                        _mm_storeh_pd((double *)(e + 3 * dst_stride), _mm_castsi128_pd(r23));
                } else {
                    uint8_t six[32];
                    _mm_storeu_si128((__m128i *)six, r01);
                    _mm_storeu_si128((__m128i *)(six + 16), r23);
                    for (int r = 0; r < nr; r++)
                        memcpy(e + r * dst_stride, six + 8 * r, 6);
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

/* Horizontal pass, any channel count: eight output BYTES per vector (lane e of 8 is byte B + e
 * of the output row, its pixel o = (B + e) / C and channel (B + e) % C), so no lane is idle,
 * each lane runs only its own pixel's taps (not the union of a pair's), and a block of four
 * groups packs to 32 contiguous output bytes with one permute. Each 128-bit half (4 bytes:
 * 1-4 pixels) loads the 16 source bytes from its first pixel's first tap; a per-group pshufb
 * mask, the same at every tap step (the loads move 2 pixels a step), gathers each lane's
 * two taps into the int16 pair pmaddwd multiplies by the split coefficients (hi, lo, as
 * above). Masks and coefficient vectors are built once per call and shared by all rows, four
 * rows at a time. A group whose loads would pass the row's end reads a zero-padded copy of
 * the row's tail. Returns 0 where the layout does not fit: a lane's taps more than 16 bytes
 * from its half's first pixel (downscales by more than about 3 for 3 channels), more than
 * 2 * TL_HB_STEPS taps, coefficients outside the int16 halves, or rows shorter than 32 bytes;
 * the caller then runs the per-pixel kernels, which write every byte (a row whose table
 * takes several chunks may have had its first ones written: the same bytes again). */
enum {
    TL_HB_VECS = 512,     /* table vectors per chunk of blocks: 16 KiB on the stack */
    TL_HB_GROUPS = TL_HB_VECS / 3,   /* a group takes a mask and >= 2 coefficient vectors */
    TL_HB_STEPS = 16,     /* tap pairs per pixel */
    TL_HB_TAIL = 256      /* bytes of a row's zero-padded tail copy */
};

typedef struct {
    int32_t o[8], c[8];   /* each lane's output pixel and channel */
    ptrdiff_t start[2];   /* each half's first load: byte C * first[pa] of the row */
    int steps;            /* tap pairs: ceil(max taps of the group's pixels / 2) */
    int ok;
} tl_hgroup;

/* byte offset in the output row of group g (blocks of 4; the last block ends at the row's end) */
TL_INLINE ptrdiff_t tl_hgroup_byte(ptrdiff_t g, ptrdiff_t nblocks, ptrdiff_t L)
{
    const ptrdiff_t blk = g / 4;
    return (blk == nblocks - 1 ? L - 32 : 32 * blk) + 8 * (g % 4);
}

static void tl_hgroup_info(tl_hgroup *G, ptrdiff_t B, int C, const int32_t *bounds)
{
    int32_t o = (int32_t)(B / C), c = (int32_t)(B % C), nmax = 0;
    G->ok = 1;
    for (int e = 0; e < 8; e++) {
        G->o[e] = o;
        G->c[e] = c;
        if (bounds[2 * o + 1] > nmax)
            nmax = bounds[2 * o + 1];
        if (++c == C) {
            c = 0;
            o++;
        }
    }
    for (int h = 0; h < 2; h++) {
        const ptrdiff_t fa = bounds[2 * G->o[4 * h]];
        G->start[h] = C * fa;
        for (int e = 4 * h; e < 4 * h + 4; e++) {
            const ptrdiff_t idx = C * ((ptrdiff_t)bounds[2 * G->o[e]] - fa) + G->c[e];
            if (idx < 0 || idx + C > 15)
                G->ok = 0;
        }
    }
    G->steps = (nmax + 1) / 2;
    if (G->steps > TL_HB_STEPS)
        G->ok = 0;
}

/* one group of 8 output bytes for 4 rows (base[r] + offsets: the rows' bytes or tail copies):
 * `steps` tap pairs from the table entry t (mask, then hi and lo per pair) into sum[r][i] */
TL_TARGET_AVX2 TL_INLINE void hb_group(const __m256i *t, int steps, const uint8_t *const *base,
                                       ptrdiff_t a0, ptrdiff_t a1, int C, __m256i sum[4][4],
                                       int i)
{
    const __m256i mask = _mm256_load_si256(t);
    const uint8_t *p0 = base[0], *p1 = base[1], *p2 = base[2], *p3 = base[3];
    __m256i h0 = _mm256_setzero_si256(), l0 = _mm256_set1_epi32(TL_HALF);
    __m256i h1 = h0, l1 = l0, h2 = h0, l2 = l0, h3 = h0, l3 = l0;
    for (int s = 0; s < steps; s++) {
        const __m256i ch = _mm256_load_si256(t + 1 + 2 * s);
        const __m256i cl = _mm256_load_si256(t + 2 + 2 * s);
#define TL_HB_LOAD(p) _mm256_shuffle_epi8(_mm256_inserti128_si256( \
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)((p) + a0))), \
        _mm_loadu_si128((const __m128i *)((p) + a1)), 1), mask)
        const __m256i v0 = TL_HB_LOAD(p0), v1 = TL_HB_LOAD(p1);
        h0 = _mm256_add_epi32(h0, _mm256_madd_epi16(v0, ch));
        l0 = _mm256_add_epi32(l0, _mm256_madd_epi16(v0, cl));
        h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(v1, ch));
        l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(v1, cl));
        const __m256i v2 = TL_HB_LOAD(p2), v3 = TL_HB_LOAD(p3);
        h2 = _mm256_add_epi32(h2, _mm256_madd_epi16(v2, ch));
        l2 = _mm256_add_epi32(l2, _mm256_madd_epi16(v2, cl));
        h3 = _mm256_add_epi32(h3, _mm256_madd_epi16(v3, ch));
        l3 = _mm256_add_epi32(l3, _mm256_madd_epi16(v3, cl));
#undef TL_HB_LOAD
        a0 += 2 * C;
        a1 += 2 * C;
    }
    sum[0][i] = TL_SPLIT_SUM(h0, l0);
    sum[1][i] = TL_SPLIT_SUM(h1, l1);
    sum[2][i] = TL_SPLIT_SUM(h2, l2);
    sum[3][i] = TL_SPLIT_SUM(h3, l3);
}

TL_TARGET_AVX2 static int hpass_avx2_lanes(const uint8_t *src, ptrdiff_t src_stride,
                                           ptrdiff_t nrows, uint8_t *dst, ptrdiff_t dst_stride,
                                           ptrdiff_t out_w, ptrdiff_t in_w, int C,
                                           const int32_t *kk, const int32_t *bounds,
                                           ptrdiff_t ksize)
{
    const ptrdiff_t L = (ptrdiff_t)C * out_w, rowlen = (ptrdiff_t)C * in_w;
    if (L < 32)
        return 0;
    const ptrdiff_t nblocks = (L + 31) / 32, ngroups = 4 * nblocks;
    for (ptrdiff_t xx = 0; xx < out_w; xx++)
        if (!tl_split_fits(kk + xx * ksize, bounds[2 * xx + 1]))
            return 0;
    /* int32 lanes written in place (vector stores from scalar arrays would stall on store
     * forwarding), read back as vectors */
    int32_t table[8 * TL_HB_VECS] __attribute__((aligned(32)));
    int32_t gvec[TL_HB_GROUPS], gsteps[TL_HB_GROUPS];
    int32_t goff[TL_HB_GROUPS][2];
    uint8_t gtail[TL_HB_GROUPS];
    uint8_t tails[4][TL_HB_TAIL] __attribute__((aligned(32)));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    ptrdiff_t g0 = 0;
    while (g0 < ngroups) {
        /* the table of whole blocks from group g0; [tail0, tail1): the bytes that the
         * groups whose loads pass the row's end read from a zero-padded copy */
        ptrdiff_t count = 0, used = 0, tail0 = rowlen, tail1 = rowlen;
        while (g0 + count < ngroups) {
            ptrdiff_t need = 0;
            tl_hgroup Gs[4];
            for (int i = 0; i < 4; i++) {
                tl_hgroup_info(&Gs[i], tl_hgroup_byte(g0 + count + i, nblocks, L), C, bounds);
                if (!Gs[i].ok)
                    return 0;
                need += 1 + 2 * Gs[i].steps;
            }
            if (used + need > TL_HB_VECS || count + 4 > TL_HB_GROUPS)
                break;   /* a block always fits an empty table: 4 * (1 + 2 * TL_HB_STEPS) */
            for (int i = 0; i < 4; i++) {
                const tl_hgroup *G = &Gs[i];
                int t = 0;
                for (int h = 0; h < 2; h++) {
                    const ptrdiff_t end = G->start[h] + 2 * C * (G->steps - 1) + 16;
                    if (end > rowlen) {
                        const ptrdiff_t lo = G->start[0] < G->start[1] ? G->start[0] : G->start[1];
                        tail0 = lo < tail0 ? lo : tail0;
                        tail1 = end > tail1 ? end : tail1;
                        t = 1;
                    }
                }
                gtail[count + i] = (uint8_t)t;
                for (int h = 0; h < 2; h++)
                    goff[count + i][h] = (int32_t)G->start[h];
                gsteps[count + i] = G->steps;
                gvec[count + i] = (int32_t)used;
                int8_t *mask = (int8_t *)(table + 8 * used++);
                for (int e = 0; e < 8; e++) {
                    const int h = e / 4, o = G->o[e];
                    const int idx = (int)(C * bounds[2 * o] - G->start[h]) + G->c[e];
                    mask[16 * h + 4 * (e % 4) + 0] = (int8_t)idx;
                    mask[16 * h + 4 * (e % 4) + 1] = -1;
                    mask[16 * h + 4 * (e % 4) + 2] = (int8_t)(idx + C);
                    mask[16 * h + 4 * (e % 4) + 3] = -1;
                }
                for (int s = 0; s < G->steps; s++) {
                    int32_t *hi = table + 8 * used, *lo = table + 8 * (used + 1);
                    used += 2;
                    for (int e = 0; e < 8; e++) {
                        const ptrdiff_t o = G->o[e], n = bounds[2 * o + 1];
                        const int32_t *k = kk + o * ksize;
                        const int32_t ka = 2 * s < n ? k[2 * s] : 0;
                        const int32_t kb = 2 * s + 1 < n ? k[2 * s + 1] : 0;
                        hi[e] = tl_pair_hi(ka, kb);
                        lo[e] = tl_pair_lo(ka, kb);
                    }
                }
            }
            count += 4;
        }
        if (count == 0 || tail1 - tail0 > TL_HB_TAIL)
            return 0;
        for (ptrdiff_t y = 0; y < nrows; y += 4) {
            const int nr = nrows - y < 4 ? (int)(nrows - y) : 4;
            const uint8_t *srow[4], *trow[4];
            for (int r = 0; r < 4; r++) {
                srow[r] = src + (y + (r < nr ? r : 0)) * src_stride;
                trow[r] = tails[r];
                if (tail0 < rowlen && r < nr) {
                    memset(tails[r], 0, (size_t)(tail1 - tail0));
                    memcpy(tails[r], srow[r] + tail0, (size_t)(rowlen - tail0));
                }
            }
            if (nr < 4 && tail0 < rowlen)
                for (int r = nr; r < 4; r++)
                    trow[r] = tails[0];
            for (ptrdiff_t c = 0; c < count; c += 4) {
                __m256i sum[4][4];
                for (int i = 0; i < 4; i++) {
                    const ptrdiff_t gi = c + i;
                    const uint8_t *const *base = gtail[gi] ? trow : srow;
                    const __m256i *t = (const __m256i *)(table + 8 * gvec[gi]);
                    const ptrdiff_t shift = gtail[gi] ? tail0 : 0;
                    const ptrdiff_t a0 = goff[gi][0] - shift, a1 = goff[gi][1] - shift;
                    /* the common tap-pair counts unrolled (no data-dependent inner loop) */
                    switch (gsteps[gi]) {
                    case 1: hb_group(t, 1, base, a0, a1, C, sum, i); break;
                    case 2: hb_group(t, 2, base, a0, a1, C, sum, i); break;
                    case 3: hb_group(t, 3, base, a0, a1, C, sum, i); break;
                    default: hb_group(t, gsteps[gi], base, a0, a1, C, sum, i); break;
                    }
                }
                /* per row: dwords (g0 0-3, g1 0-3, g2 0-3, g3 0-3 | g0 4-7, ...) after the
                 * in-lane packs (saturating == clip8's clamp), put in order by one permute */
                const ptrdiff_t B = tl_hgroup_byte(g0 + c, nblocks, L);
                for (int r = 0; r < nr; r++) {
                    const __m256i v = _mm256_packus_epi16(
                        _mm256_packs_epi32(sum[r][0], sum[r][1]),
                        _mm256_packs_epi32(sum[r][2], sum[r][3]));
                    _mm256_storeu_si256((__m256i *)(dst + (y + r) * dst_stride + B),
                                        _mm256_permutevar8x32_epi32(v, order));
                }
            }
        }
        g0 += count;
    }
    return 1;
}

/* Vertical pass: rows y and y + 1 interleaved into int16 (row y, row y + 1) pairs, so one
 * pmaddwd adds both taps for 8 columns. 32 columns of one output row from column j: */
TL_TARGET_AVX2 TL_INLINE void vblock32(const uint8_t *first, ptrdiff_t src_stride, ptrdiff_t n,
                                      const __m256i *khi, const __m256i *klo, ptrdiff_t j,
                                      uint8_t *d)
{
    const __m256i zero = _mm256_setzero_si256();
    __m256i h0 = zero, h1 = zero, h2 = zero, h3 = zero;
    __m256i l0 = _mm256_set1_epi32(TL_HALF), l1 = l0, l2 = l0, l3 = l0;
    for (ptrdiff_t p = 0; 2 * p < n; p++) {
        const uint8_t *r0 = first + 2 * p * src_stride + j;
        /* an odd last tap pairs with itself under a zero coefficient */
        const uint8_t *r1 = 2 * p + 1 < n ? r0 + src_stride : r0;
        const __m256i a = _mm256_loadu_si256((const __m256i *)r0);
        const __m256i b = _mm256_loadu_si256((const __m256i *)r1);
        const __m256i ab0 = _mm256_unpacklo_epi8(a, b), ab1 = _mm256_unpackhi_epi8(a, b);
        const __m256i w0 = _mm256_unpacklo_epi8(ab0, zero), w1 = _mm256_unpackhi_epi8(ab0, zero);
        const __m256i w2 = _mm256_unpacklo_epi8(ab1, zero), w3 = _mm256_unpackhi_epi8(ab1, zero);
        h0 = _mm256_add_epi32(h0, _mm256_madd_epi16(w0, khi[p]));
        l0 = _mm256_add_epi32(l0, _mm256_madd_epi16(w0, klo[p]));
        h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(w1, khi[p]));
        l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(w1, klo[p]));
        h2 = _mm256_add_epi32(h2, _mm256_madd_epi16(w2, khi[p]));
        l2 = _mm256_add_epi32(l2, _mm256_madd_epi16(w2, klo[p]));
        h3 = _mm256_add_epi32(h3, _mm256_madd_epi16(w3, khi[p]));
        l3 = _mm256_add_epi32(l3, _mm256_madd_epi16(w3, klo[p]));
    }
    /* h0 holds columns 0-3 | 16-19, h1 4-7 | 20-23, h2 8-11 | 24-27, h3 12-15 | 28-31: the
     * two in-lane packs put them back in order (saturating packs == clip8's clamp) */
    const __m256i out = _mm256_packus_epi16(
        _mm256_packs_epi32(TL_SPLIT_SUM(h0, l0), TL_SPLIT_SUM(h1, l1)),
        _mm256_packs_epi32(TL_SPLIT_SUM(h2, l2), TL_SPLIT_SUM(h3, l3)));
    _mm256_storeu_si256((__m256i *)d, out);
}

enum { TL_VPAIRS = 128 };   /* tap pairs of one output row on the stack (256 taps) */

TL_TARGET_AVX2 static void vpass_avx2_madd(const uint8_t *src, ptrdiff_t src_stride,
                                           uint8_t *dst, ptrdiff_t dst_stride, ptrdiff_t out_h,
                                           ptrdiff_t rowlen, const int32_t *kk,
                                           const int32_t *bounds, ptrdiff_t ksize, int32_t *acc)
{
    __m256i khi[TL_VPAIRS], klo[TL_VPAIRS];
    for (ptrdiff_t yy = 0; yy < out_h; yy++) {
        const int32_t *k = kk + yy * ksize;
        const ptrdiff_t n = bounds[2 * yy + 1];
        const uint8_t *first = src + (ptrdiff_t)bounds[2 * yy] * src_stride;
        uint8_t *drow = dst + yy * dst_stride;
        if ((n + 1) / 2 > TL_VPAIRS || !tl_split_fits(k, n) || rowlen < 32) {
            vpass_avx2(src, src_stride, drow, dst_stride, 1, rowlen, k, bounds + 2 * yy,
                       ksize, acc);
            continue;
        }
        for (ptrdiff_t p = 0; 2 * p < n; p++) {
            const int32_t a = k[2 * p], b = 2 * p + 1 < n ? k[2 * p + 1] : 0;
            khi[p] = _mm256_set1_epi32(tl_pair_hi(a, b));
            klo[p] = _mm256_set1_epi32(tl_pair_lo(a, b));
        }
        ptrdiff_t j = 0;
        for (; j + 32 <= rowlen; j += 32)
            vblock32(first, src_stride, n, khi, klo, j, drow + j);
        if (j < rowlen)  /* the last 32 columns again: overlapping, the same bytes */
            vblock32(first, src_stride, n, khi, klo, rowlen - 32, drow + rowlen - 32);
    }
}

/* The vertical pass fused with the float32 CHW write (tl_resample_vpass_chw_f32): each output
 * row is computed 32 pixels (96 bytes) at a time by vblock32 into a block on the stack, and the
 * block is written at once to the three planes as chw_kernels.c's normalize_avx2 writes 8
 * pixels: one vpshufb per channel widens the block's bytes to int32 in output order (mirrored
 * when flipped), then (float)byte * scale[c] + bias[c], a multiply and an add (two roundings,
 * never an FMA). The last block of a row overlaps the one before it when out_w is not a
 * multiple of 32 (it rewrites those outputs with the same values). */
enum { TL_CHW_AHEAD = 256 };   /* floats of a plane prefetched ahead of the stores */

TL_TARGET_AVX2 static int vpass_chw_f32_avx2(const uint8_t *src, ptrdiff_t src_stride,
                                             ptrdiff_t out_h, ptrdiff_t out_w,
                                             const int32_t *kk, const int32_t *bounds,
                                             ptrdiff_t ksize, float *dst, const float *scale,
                                             const float *bias, int flip)
{
    if (out_w < 32)
        return 0;
    for (ptrdiff_t yy = 0; yy < out_h; yy++) {   /* every row fits, or nothing is written */
        const ptrdiff_t n = bounds[2 * yy + 1];
        if ((n + 1) / 2 > TL_VPAIRS || !tl_split_fits(kk + yy * ksize, n))
            return 0;
    }
    __m256i khi[TL_VPAIRS], klo[TL_VPAIRS];
    uint8_t blk[96] __attribute__((aligned(32)));
    uint8_t mb[3][2][16];
    tl_widen_masks(mb, flip);  /* chw_masks.h: normalize_avx2's masks */
    const __m256i m0 = _mm256_loadu_si256((const __m256i *)mb[0]);
    const __m256i m1 = _mm256_loadu_si256((const __m256i *)mb[1]);
    const __m256i m2 = _mm256_loadu_si256((const __m256i *)mb[2]);
    const __m256 s0 = _mm256_set1_ps(scale[0]), s1 = _mm256_set1_ps(scale[1]);
    const __m256 s2 = _mm256_set1_ps(scale[2]);
    const __m256 b0 = _mm256_set1_ps(bias[0]), b1 = _mm256_set1_ps(bias[1]);
    const __m256 b2 = _mm256_set1_ps(bias[2]);
    const ptrdiff_t plane = out_h * out_w, first8 = flip ? 8 : 0;
    for (ptrdiff_t yy = 0; yy < out_h; yy++) {
        const int32_t *k = kk + yy * ksize;
        const ptrdiff_t n = bounds[2 * yy + 1];
        const uint8_t *first = src + (ptrdiff_t)bounds[2 * yy] * src_stride;
        float *d0 = dst + yy * out_w, *d1 = d0 + plane, *d2 = d1 + plane;
        for (ptrdiff_t p = 0; 2 * p < n; p++) {
            const int32_t a = k[2 * p], b = 2 * p + 1 < n ? k[2 * p + 1] : 0;
            khi[p] = _mm256_set1_epi32(tl_pair_hi(a, b));
            klo[p] = _mm256_set1_epi32(tl_pair_lo(a, b));
        }
        for (ptrdiff_t x = 0;; x += 32) {
            if (x > out_w - 32)
                x = out_w - 32;   /* the last block, aligned to the row's end */
            /* the lines TL_CHW_AHEAD floats on in each plane (about a row ahead), for the
             * stores: without it every store's line is fetched when the store reaches it
             * (a float32 batch tensor is far out of the cache) and the loop waits on them */
            const ptrdiff_t ahead = yy * out_w + x + TL_CHW_AHEAD;
            if (ahead + 32 <= plane) {
                __builtin_prefetch(dst + ahead, 1, 3);
                __builtin_prefetch(dst + ahead + 16, 1, 3);
                __builtin_prefetch(dst + plane + ahead, 1, 3);
                __builtin_prefetch(dst + plane + ahead + 16, 1, 3);
                __builtin_prefetch(dst + 2 * plane + ahead, 1, 3);
                __builtin_prefetch(dst + 2 * plane + ahead + 16, 1, 3);
            }
            vblock32(first, src_stride, n, khi, klo, 3 * x, blk);
            vblock32(first, src_stride, n, khi, klo, 3 * x + 32, blk + 32);
            vblock32(first, src_stride, n, khi, klo, 3 * x + 64, blk + 64);
            for (int q = 0; q < 32; q += 8) {
                const uint8_t *bp = blk + 3 * q;
                const __m256i v = _mm256_inserti128_si256(
                    _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(bp + first8))),
                    _mm_loadu_si128((const __m128i *)(bp + 8 - first8)), 1);
                const ptrdiff_t o = flip ? out_w - (x + q) - 8 : x + q;
#define TL_NORM8(m, s, bb, d)                                                                \
    _mm256_storeu_ps((d), _mm256_add_ps(_mm256_mul_ps(                                       \
                              _mm256_cvtepi32_ps(_mm256_shuffle_epi8(v, (m))), (s)), (bb)))
                TL_NORM8(m0, s0, b0, d0 + o);
                TL_NORM8(m1, s1, b1, d1 + o);
                TL_NORM8(m2, s2, b2, d2 + o);
#undef TL_NORM8
            }
            if (x == out_w - 32)
                break;
        }
    }
    return 1;
}
#undef TL_SPLIT_SUM
#endif

void tl_resample_hpass(const uint8_t *src, ptrdiff_t src_stride, ptrdiff_t nrows, uint8_t *dst,
                       ptrdiff_t dst_stride, ptrdiff_t out_w, ptrdiff_t in_w, int C,
                       const int32_t *kk, const int32_t *bounds, ptrdiff_t ksize, int isa)
{
#if TL_X86
    if (isa >= TL_ISA_AVX2 && hpass_avx2_lanes(src, src_stride, nrows, dst, dst_stride, out_w,
                                               in_w, C, kk, bounds, ksize))
        return;
    if (C == 3 && isa >= TL_ISA_AVX2) {
        hpass3_avx2_madd(src, src_stride, nrows, dst, dst_stride, out_w, in_w, kk, bounds, ksize);
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
        vpass_avx2_madd(src, src_stride, dst, dst_stride, out_h, rowlen, kk, bounds, ksize, acc);
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

int tl_resample_vpass_chw_f32(const uint8_t *src, ptrdiff_t src_stride, ptrdiff_t out_h,
                              ptrdiff_t out_w, const int32_t *kk, const int32_t *bounds,
                              ptrdiff_t ksize, float *dst, const float *scale,
                              const float *bias, int flip, int isa)
{
#if TL_X86
    if (isa >= TL_ISA_AVX2)
        return vpass_chw_f32_avx2(src, src_stride, out_h, out_w, kk, bounds, ksize, dst, scale,
                                  bias, flip);
#endif
    (void)src; (void)src_stride; (void)out_h; (void)out_w; (void)kk; (void)bounds;
    (void)ksize; (void)dst; (void)scale; (void)bias; (void)flip; (void)isa;
    return 0;
}
