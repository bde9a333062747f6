/* Body of the resampler's passes, compiled once per ISA level by resample_kernels.c with
 * TL_FN(name) naming the variant and TL_TGT its target attribute. Straight C loops: the
 * compiler vectorizes them for each target (the vertical pass's widening multiply-add over a
 * contiguous row above all). Integer arithmetic only, so every variant is exact. */

TL_TGT static void TL_FN(hpass)(const uint8_t *src, ptrdiff_t src_stride, ptrdiff_t nrows,
                                uint8_t *dst, ptrdiff_t dst_stride, ptrdiff_t out_w, int C,
                                const int32_t *kk, const int32_t *bounds, ptrdiff_t ksize)
{
    for (ptrdiff_t y = 0; y < nrows; y++) {
        const uint8_t *srow = src + y * src_stride;
        uint8_t *drow = dst + y * dst_stride;
        if (C == 3) {
            for (ptrdiff_t xx = 0; xx < out_w; xx++) {
                const int32_t *k = kk + xx * ksize;
                const uint8_t *sp = srow + 3 * (ptrdiff_t)bounds[2 * xx];
                const ptrdiff_t n = bounds[2 * xx + 1];
                int32_t s0 = TL_HALF, s1 = TL_HALF, s2 = TL_HALF;
                for (ptrdiff_t x = 0; x < n; x++) {
                    const int32_t w = k[x];
                    s0 += sp[3 * x] * w;
                    s1 += sp[3 * x + 1] * w;
                    s2 += sp[3 * x + 2] * w;
                }
                drow[3 * xx] = tl_clip8(s0);
                drow[3 * xx + 1] = tl_clip8(s1);
                drow[3 * xx + 2] = tl_clip8(s2);
            }
        } else if (C == 1) {
            for (ptrdiff_t xx = 0; xx < out_w; xx++) {
                const int32_t *k = kk + xx * ksize;
                const uint8_t *sp = srow + bounds[2 * xx];
                const ptrdiff_t n = bounds[2 * xx + 1];
                int32_t s0 = TL_HALF;
                for (ptrdiff_t x = 0; x < n; x++)
                    s0 += sp[x] * k[x];
                drow[xx] = tl_clip8(s0);
            }
        } else {
            for (ptrdiff_t xx = 0; xx < out_w; xx++) {
                const int32_t *k = kk + xx * ksize;
                const uint8_t *sp = srow + C * (ptrdiff_t)bounds[2 * xx];
                const ptrdiff_t n = bounds[2 * xx + 1];
                for (int c = 0; c < C; c++) {
                    int32_t s0 = TL_HALF;
                    for (ptrdiff_t x = 0; x < n; x++)
                        s0 += sp[C * x + c] * k[x];
                    drow[C * xx + c] = tl_clip8(s0);
                }
            }
        }
    }
}

TL_TGT static void TL_FN(vpass)(const uint8_t *src, ptrdiff_t src_stride, uint8_t *dst,
                                ptrdiff_t dst_stride, ptrdiff_t out_h, ptrdiff_t rowlen,
                                const int32_t *kk, const int32_t *bounds, ptrdiff_t ksize,
                                int32_t *TL_RESTRICT acc)
{
    /* Blocks of 32 columns keep their sums in vector registers across the taps (a
     * contiguous widening multiply-add per tap); the last columns use `acc`. */
    for (ptrdiff_t yy = 0; yy < out_h; yy++) {
        const int32_t *k = kk + yy * ksize;
        const ptrdiff_t n = bounds[2 * yy + 1];
        const uint8_t *first = src + (ptrdiff_t)bounds[2 * yy] * src_stride;
        uint8_t *TL_RESTRICT drow = dst + yy * dst_stride;
        ptrdiff_t j0 = 0;
        for (; j0 + 32 <= rowlen; j0 += 32) {
            int32_t a[32];
            for (int t = 0; t < 32; t++)
                a[t] = TL_HALF;
            for (ptrdiff_t y = 0; y < n; y++) {
                const int32_t w = k[y];
                const uint8_t *TL_RESTRICT s = first + y * src_stride + j0;
                for (int t = 0; t < 32; t++)
                    a[t] += s[t] * w;
            }
            for (int t = 0; t < 32; t++)
                drow[j0 + t] = tl_clip8(a[t]);
        }
        if (j0 == rowlen)
            continue;
        for (ptrdiff_t j = j0; j < rowlen; j++)
            acc[j] = TL_HALF;
        for (ptrdiff_t y = 0; y < n; y++) {
            const int32_t w = k[y];
            const uint8_t *TL_RESTRICT srow = first + y * src_stride;
            for (ptrdiff_t j = j0; j < rowlen; j++)
                acc[j] += srow[j] * w;
        }
        for (ptrdiff_t j = j0; j < rowlen; j++)
            drow[j] = tl_clip8(acc[j]);
    }
}
