/* Bodies of the warp and blur loops, compiled once per ISA level by warp_kernels.c (TL_FN
 * names the variant, TL_TGT is its target attribute). A line-by-line port of the Cython
 * kernels they replace: the same operations in the same order, so every level (and the old
 * portable build) gives the same bytes. TL_NO_TRAP (no -ftrapping-math) lets GCC if-convert
 * the selects so the weight loop vectorizes; it changes no result, only whether FP exception
 * flags may be raised speculatively. */

TL_NO_TRAP TL_TGT TL_INLINE void TL_FN(bilinear_chunk)(const uint8_t *src, ptrdiff_t sh, ptrdiff_t sw,
                                            ptrdiff_t sstride, int C, const float *ixs,
                                            const float *iys, ptrdiff_t n, const float *fill,
                                            uint8_t *q)
{
    /* Bilinear taps for n (<= TL_WCHUNK) output pixels with source coordinates ixs/iys
     * (finite, |.| < 2^22), written interleaved to q. Taps outside the source read as 0 with
     * their weight kept, which is exactly torch's masked FMA chain (an FMA with a 0 tap returns
     * the accumulator), so the arithmetic is uniform: weights (vectorized), a bounds-checked
     * byte gather (scalar), then per channel a branch-free pass that vectorizes. */
    float w0[TL_WCHUNK], w1[TL_WCHUNK], w2[TL_WCHUNK], w3[TL_WCHUNK], msk[TL_WCHUNK];
    int32_t xis[TL_WCHUNK], yis[TL_WCHUNK];
    uint8_t tap[4 * 4 * TL_WCHUNK];   /* [tap][channel][pixel] */
    uint8_t outv[4 * TL_WCHUNK];      /* [channel][pixel] */
    const float one = 1.0f, zero = 0.0f;
    for (ptrdiff_t k = 0; k < n; k++) {
        const float ix = ixs[k], iy = iys[k];
        float fx = (float)(int32_t)ix;   /* floor without libm: truncate, then step down */
        float fy = (float)(int32_t)iy;   /* where truncation went up (negative fractions) */
        fx = fx - (float)(fx > ix);
        fy = fy - (float)(fy > iy);
        const float tx = ix - fx, ty = iy - fy;
        xis[k] = (int32_t)fx;
        yis[k] = (int32_t)fy;
        w0[k] = (one - tx) * (one - ty);
        w1[k] = tx * (one - ty);
        w2[k] = (one - tx) * ty;
        w3[k] = tx * ty;
    }
    for (ptrdiff_t k = 0; k < n; k++) {
        const ptrdiff_t xi = xis[k], yi = yis[k];
        const int i0 = 0 <= xi && xi < sw && 0 <= yi && yi < sh;
        const int i1 = 0 <= xi + 1 && xi + 1 < sw && 0 <= yi && yi < sh;
        const int i2 = 0 <= xi && xi < sw && 0 <= yi + 1 && yi + 1 < sh;
        const int i3 = 0 <= xi + 1 && xi + 1 < sw && 0 <= yi + 1 && yi + 1 < sh;
        if (i0 && i3) {
            msk[k] = ((w0[k] + w1[k]) + w2[k]) + w3[k];
            const uint8_t *p0 = src + yi * sstride + xi * C;
            const uint8_t *p2 = p0 + sstride;
            for (int c = 0; c < C; c++) {
                tap[(0 * 4 + c) * TL_WCHUNK + k] = p0[c];
                tap[(1 * 4 + c) * TL_WCHUNK + k] = p0[C + c];
                tap[(2 * 4 + c) * TL_WCHUNK + k] = p2[c];
                tap[(3 * 4 + c) * TL_WCHUNK + k] = p2[C + c];
            }
            continue;
        }
        const float a0 = i0 ? w0[k] : zero, a1 = i1 ? w1[k] : zero;
        const float a2 = i2 ? w2[k] : zero, a3 = i3 ? w3[k] : zero;
        msk[k] = ((a0 + a1) + a2) + a3;
        for (int c = 0; c < C; c++) {
            tap[(0 * 4 + c) * TL_WCHUNK + k] = i0 ? src[yi * sstride + xi * C + c] : 0;
            tap[(1 * 4 + c) * TL_WCHUNK + k] = i1 ? src[yi * sstride + (xi + 1) * C + c] : 0;
            tap[(2 * 4 + c) * TL_WCHUNK + k] = i2 ? src[(yi + 1) * sstride + xi * C + c] : 0;
            tap[(3 * 4 + c) * TL_WCHUNK + k] =
                i3 ? src[(yi + 1) * sstride + (xi + 1) * C + c] : 0;
        }
    }
    for (int c = 0; c < C; c++) {
        const uint8_t *t0 = &tap[(0 * 4 + c) * TL_WCHUNK];
        const uint8_t *t1 = &tap[(1 * 4 + c) * TL_WCHUNK];
        const uint8_t *t2 = &tap[(2 * 4 + c) * TL_WCHUNK];
        const uint8_t *t3 = &tap[(3 * 4 + c) * TL_WCHUNK];
        uint8_t *o = &outv[c * TL_WCHUNK];
        if (fill == NULL) {
            for (ptrdiff_t k = 0; k < n; k++) {
                float v = w0[k] * (float)t0[k];
                v = (float)((double)v + (double)w1[k] * (double)t1[k]);
                v = (float)((double)v + (double)w2[k] * (double)t2[k]);
                v = (float)((double)v + (double)w3[k] * (double)t3[k]);
                o[k] = tl_round_clamp_u8(v);
            }
        } else {
            const float f = fill[c];
            for (ptrdiff_t k = 0; k < n; k++) {
                float v = w0[k] * (float)t0[k];
                v = (float)((double)v + (double)w1[k] * (double)t1[k]);
                v = (float)((double)v + (double)w2[k] * (double)t2[k]);
                v = (float)((double)v + (double)w3[k] * (double)t3[k]);
                /* torchvision: float_img.sub_(fill).mul_(mask).add_(fill) */
                v = v - f;
                v = v * msk[k];
                o[k] = tl_round_clamp_u8(v + f);
            }
        }
    }
    if (C == 3) {
        for (ptrdiff_t k = 0; k < n; k++) {
            q[3 * k] = outv[k];
            q[3 * k + 1] = outv[TL_WCHUNK + k];
            q[3 * k + 2] = outv[2 * TL_WCHUNK + k];
        }
    } else {
        for (ptrdiff_t k = 0; k < n; k++)
            for (int c = 0; c < C; c++)
                q[k * C + c] = outv[c * TL_WCHUNK + k];
    }
}

TL_NO_TRAP TL_TGT static void TL_FN(warp)(const uint8_t *src, ptrdiff_t sh, ptrdiff_t sw,
                               ptrdiff_t sstride, int C, uint8_t *dst, ptrdiff_t dh,
                               ptrdiff_t dw, ptrdiff_t dstride, int grid, const float *t,
                               int mode, const float *fill)
{
    const float half_w = (float)sw * 0.5f, half_h = (float)sh * 0.5f;
    const float one = 1.0f;
    const float lim = 4194304.0f;   /* 2^22: tl_rne's range; anything beyond is far outside */
    const float park = -8.0f;
    float x0f, y0f;
    uint8_t fill8[4];
    float ixs[TL_WCHUNK], iys[TL_WCHUNK];
    for (int c = 0; c < C; c++)
        fill8[c] = fill != NULL ? tl_round_u8(fill[c]) : 0;
    if (grid == TL_GRID_AFFINE) {
        /* torch.linspace((1 - ow) / 2, (ow - 1) / 2, ow): exact half-integers in float32 */
        x0f = (float)((1.0 - (double)dw) * 0.5);
        y0f = (float)((1.0 - (double)dh) * 0.5);
    } else {
        x0f = 0.5f;
        y0f = 0.5f;
    }
    for (ptrdiff_t i = 0; i < dh; i++) {
        const float y = y0f + (float)i;
        uint8_t *q = dst + i * dstride;
        for (ptrdiff_t j0 = 0; j0 < dw; j0 += TL_WCHUNK) {
            const ptrdiff_t n = dw - j0 < TL_WCHUNK ? dw - j0 : TL_WCHUNK;
            for (ptrdiff_t k = 0; k < n; k++) {   /* the grid: vectorizable */
                const float x = x0f + (float)(int32_t)(j0 + k);   /* exact: < 2^22 */
                /* torch's bmm of (x, y, 1) with the rescaled theta: (x a + y b) + c, no FMA */
                float gx = x * t[0] + y * t[1];
                gx = gx + t[2];
                float gy = x * t[3] + y * t[4];
                gy = gy + t[5];
                if (grid == TL_GRID_PERSPECTIVE) {
                    float den = x * t[6] + y * t[7];
                    den = den + one;
                    gx = gx / den - one;
                    gy = gy / den - one;
                }
                /* grid_sample's unnormalize, align_corners=False: (g + 1) * (size / 2) - 0.5,
                 * one fused multiply-add in torch's AVX2/NEON kernels (exact double product
                 * and sum, so the cast rounds once) */
                const float ix = (float)((double)(gx + one) * (double)half_w - 0.5);
                const float iy = (float)((double)(gy + one) * (double)half_h - 0.5);
                /* beyond 2^22 (or NaN) every tap is outside: park it at -8 (all taps outside,
                 * value 0, mask 0), which gives the same output and keeps casts in range */
                const int far = (fabsf(ix) >= lim) | (fabsf(iy) >= lim) | (ix != ix) | (iy != iy);
                ixs[k] = far ? park : ix;
                iys[k] = far ? park : iy;
            }
            if (mode == TL_WARP_BILINEAR) {
                TL_FN(bilinear_chunk)(src, sh, sw, sstride, C, ixs, iys, n, fill, q);
                q += n * C;
                continue;
            }
            for (ptrdiff_t k = 0; k < n; k++) {
                const float ix = ixs[k], iy = iys[k];
                if (!(-lim < ix && ix < lim && -lim < iy && iy < lim)) {   /* also NaN */
                    for (int c = 0; c < C; c++)
                        q[c] = fill8[c];
                    q += C;
                    continue;
                }
                const float fx = tl_rne(ix), fy = tl_rne(iy);
                if (fx >= 0.0f && fx < (float)sw && fy >= 0.0f && fy < (float)sh) {
                    const uint8_t *p0 = src + (ptrdiff_t)fy * sstride + (ptrdiff_t)fx * C;
                    for (int c = 0; c < C; c++)
                        q[c] = p0[c];
                } else {
                    for (int c = 0; c < C; c++)
                        q[c] = fill8[c];
                }
                q += C;
            }
        }
    }
}

TL_TGT static void TL_FN(blur)(const uint8_t *src, ptrdiff_t h, ptrdiff_t w, ptrdiff_t sstride,
                               int C, uint8_t *dst, ptrdiff_t dstride, const float *kx,
                               ptrdiff_t nx, const float *ky, ptrdiff_t ny, float *tmp)
{
    /* src -> tmp (h rows of float32) -> dst; taps summed in ascending order in both passes */
    const ptrdiff_t rx = nx / 2, ry = ny / 2, n = w * C;
    const ptrdiff_t lo = rx * C, hi = (w - rx) * C;   /* interior: every tap inside the row */
    float *vacc = tmp + h * n;
    /* |sum| <= 255 * sum|kx| * sum|ky| (plus rounding slack): below 2^21 the branch-free
     * rounding is exact (torch's taps sum to 1; any finite taps of moderate size qualify) */
    float sx = 0.0f, sy = 0.0f;
    for (ptrdiff_t k = 0; k < nx; k++)
        sx += fabsf(kx[k]);
    for (ptrdiff_t k = 0; k < ny; k++)
        sy += fabsf(ky[k]);
    const int bounded = sx <= 64.0f && sy <= 64.0f;   /* false for NaN and infinities */
    for (ptrdiff_t y = 0; y < h; y++) {
        const uint8_t *row = src + y * sstride;
        float *TL_RESTRICT hrow = tmp + y * n;
        for (ptrdiff_t j = 0; j < n; j++)
            hrow[j] = 0.0f;
        for (ptrdiff_t k = 0; k < nx; k++) {   /* tap-major over contiguous bytes: vectorizes */
            const float wk = kx[k];
            const ptrdiff_t shift = (k - rx) * C;
            for (ptrdiff_t j = lo; j < hi; j++)
                hrow[j] = hrow[j] + wk * (float)row[j + shift];
        }
        for (ptrdiff_t x = 0; x < w; x++) {    /* the reflected border columns */
            if (x >= rx && x + rx < w)
                continue;
            for (int c = 0; c < C; c++) {
                float acc = 0.0f;
                for (ptrdiff_t k = 0; k < nx; k++) {
                    const ptrdiff_t xx = tl_reflect(x - rx + k, w);
                    acc = acc + kx[k] * (float)row[xx * C + c];
                }
                hrow[x * C + c] = acc;
            }
        }
    }
    for (ptrdiff_t y = 0; y < h; y++) {
        for (ptrdiff_t j = 0; j < n; j++)
            vacc[j] = 0.0f;
        for (ptrdiff_t k = 0; k < ny; k++) {
            const float *TL_RESTRICT trow = tmp + tl_reflect(y - ry + k, h) * n;
            const float wk = ky[k];
            for (ptrdiff_t j = 0; j < n; j++)
                vacc[j] = vacc[j] + wk * trow[j];
        }
        uint8_t *drow = dst + y * dstride;
        if (bounded) {   /* branch-free rounding: vectorizes */
            for (ptrdiff_t j = 0; j < n; j++)
                drow[j] = tl_round_clamp_u8(vacc[j]);
        } else {
            for (ptrdiff_t j = 0; j < n; j++)
                drow[j] = tl_round_u8(vacc[j]);
        }
    }
}
