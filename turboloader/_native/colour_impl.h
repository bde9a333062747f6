/* Bodies of the colour kernels' hot loops, compiled once per ISA level by colour_kernels.c
 * (TL_FN names the variant, TL_TGT is its target attribute). Plain C written so the compiler
 * vectorizes it: deinterleaved chunks, branch-free selects and clamps. */

TL_TGT static void TL_FN(apply_lut)(uint8_t *img, ptrdiff_t h, ptrdiff_t w, ptrdiff_t stride,
                                    int channels, const uint8_t *lut)
{
    const ptrdiff_t n = w * channels;
    for (ptrdiff_t y = 0; y < h; y++) {
        uint8_t *row = img + y * stride;
        for (ptrdiff_t j = 0; j < n; j++)
            row[j] = lut[row[j]];
    }
}

/* deinterleave up to TL_CHUNK pixels of a 3-channel row into rb, gb, bb */
TL_TGT TL_INLINE void TL_FN(split3)(const uint8_t *p, ptrdiff_t n, uint8_t *TL_RESTRICT rb,
                                    uint8_t *TL_RESTRICT gb, uint8_t *TL_RESTRICT bb)
{
    for (ptrdiff_t k = 0; k < n; k++) {
        rb[k] = p[3 * k];
        gb[k] = p[3 * k + 1];
        bb[k] = p[3 * k + 2];
    }
}

TL_TGT static void TL_FN(saturation)(uint8_t *img, ptrdiff_t h, ptrdiff_t w, ptrdiff_t stride,
                                     float ratio, float alpha)
{
    /* per chunk: deinterleave, torchvision's blend (luma = fma(b, wb, fma(g, wg, r * wr))
     * floored, then uint8(clamp(fma(luma, alpha, x * ratio))) per channel, each fma exact in
     * double), interleave */
    uint8_t rb[TL_CHUNK], gb[TL_CHUNK], bb[TL_CHUNK];
    for (ptrdiff_t y = 0; y < h; y++) {
        for (ptrdiff_t x0 = 0; x0 < w; x0 += TL_CHUNK) {
            const ptrdiff_t n = w - x0 < TL_CHUNK ? w - x0 : TL_CHUNK;
            uint8_t *p = img + y * stride + 3 * x0;
            TL_FN(split3)(p, n, rb, gb, bb);
            for (ptrdiff_t k = 0; k < n; k++) {
                const float gray = (float)tl_gray_floor(rb[k], gb[k], bb[k]);
                const double ga = (double)gray * (double)alpha;
                rb[k] = tl_clamp_trunc32((float)((double)((float)rb[k] * ratio) + ga));
                gb[k] = tl_clamp_trunc32((float)((double)((float)gb[k] * ratio) + ga));
                bb[k] = tl_clamp_trunc32((float)((double)((float)bb[k] * ratio) + ga));
            }
            for (ptrdiff_t k = 0; k < n; k++) {
                p[3 * k] = rb[k];
                p[3 * k + 1] = gb[k];
                p[3 * k + 2] = bb[k];
            }
        }
    }
}

/* torchvision's _rgb_to_hsv -> hue shift (fmod / remainder) -> _hsv_to_rgb on n pixels in
 * [0, 1], in place, with its float32 operations in its order; flat selects, no branches.
 * GCC vectorizes this loop only when it may evaluate both sides of every select, i.e. without
 * -ftrapping-math (TL_NO_TRAP: it changes no result, only whether FP exception flags may be
 * raised speculatively). fmod(hh, 1) and remainder(hh, 1) are single exact subtractions on the
 * ranges reached ([5/6, 11/6] and [-0.5, 1.5)); h6 >= 0, so truncation is floor. */
TL_NO_TRAP TL_TGT static void TL_FN(hue_chunk)(float *TL_RESTRICT rf, float *TL_RESTRICT gf,
                                               float *TL_RESTRICT bf, ptrdiff_t n, float hue)
{
    const float one = 1.0f, zero = 0.0f, six = 6.0f, sixth = (float)(1.0 / 6.0);
    for (ptrdiff_t k = 0; k < n; k++) {
        float r = rf[k], g = gf[k], b = bf[k];
        float maxc = r > g ? r : g; maxc = maxc > b ? maxc : b;
        float minc = r < g ? r : g; minc = minc < b ? minc : b;
        float cr = maxc - minc;
        float den = maxc == minc ? one : maxc;
        float s = cr / den;
        float crd = maxc == minc ? one : cr;
        float rc = (maxc - r) / crd, gc = (maxc - g) / crd, bc = (maxc - b) / crd;
        float hr = bc - gc, hg = (rc + 2.0f) - bc, hb = (gc + 4.0f) - rc;
        float hh = maxc == g ? hg : hb;
        hh = maxc == r ? hr : hh;
        hh = hh * sixth + one;
        hh = hh >= one ? hh - one : hh;
        hh = hh + hue;
        float hm = hh >= one ? hh - one : hh;
        hh = hh < zero ? hh + one : hm;
        float h6 = hh * six;
        float fi = (float)(int32_t)h6;
        float f = h6 - fi;
        fi = fi >= six ? zero : fi;
        float sxf = s * f, oms = one - s;
        float q = (one - sxf) * maxc, t = (sxf + oms) * maxc, pp = oms * maxc;
        q = q > zero ? q : zero; q = q < one ? q : one;
        t = t > zero ? t : zero; t = t < one ? t : one;
        pp = pp > zero ? pp : zero; pp = pp < one ? pp : one;
        float v = maxc;
        float ro = fi == 4.0f ? t : v;
        ro = fi == 2.0f ? pp : ro; ro = fi == 3.0f ? pp : ro;
        ro = fi == one ? q : ro;
        float go = fi == zero ? t : pp;
        go = fi == one ? v : go; go = fi == 2.0f ? v : go;
        go = fi == 3.0f ? q : go;
        float bo = fi == 5.0f ? q : v;
        bo = fi == 2.0f ? t : bo;
        bo = fi < 1.5f ? pp : bo;
        rf[k] = ro; gf[k] = go; bf[k] = bo;
    }
}

TL_TGT static void TL_FN(hue)(uint8_t *img, ptrdiff_t h, ptrdiff_t w, ptrdiff_t stride,
                              float hue)
{
    float rf[TL_CHUNK], gf[TL_CHUNK], bf[TL_CHUNK], lut[256];
    const float to_u8 = (float)(255.0 + 1.0 - 1e-3);
    for (int v = 0; v < 256; v++)
        lut[v] = (float)v * (float)(1.0 / 255.0);
    for (ptrdiff_t y = 0; y < h; y++) {
        for (ptrdiff_t x0 = 0; x0 < w; x0 += TL_CHUNK) {
            const ptrdiff_t n = w - x0 < TL_CHUNK ? w - x0 : TL_CHUNK;
            uint8_t *p = img + y * stride + 3 * x0;
            for (ptrdiff_t k = 0; k < n; k++) {
                rf[k] = lut[p[3 * k]];
                gf[k] = lut[p[3 * k + 1]];
                bf[k] = lut[p[3 * k + 2]];
            }
            TL_FN(hue_chunk)(rf, gf, bf, n, hue);
            for (ptrdiff_t k = 0; k < n; k++) {   /* outputs are in [0, 1]: no overflow */
                p[3 * k] = tl_clamp_trunc(rf[k] * to_u8);
                p[3 * k + 1] = tl_clamp_trunc(gf[k] * to_u8);
                p[3 * k + 2] = tl_clamp_trunc(bf[k] * to_u8);
            }
        }
    }
}

/* one interior row of adjust_sharpness; `bounded` is a constant where it is inlined, so the
 * bounded copy is branch-free and vectorizes */
TL_TGT TL_INLINE void TL_FN(sharpness_row)(const uint8_t *r0, const uint8_t *r1,
                                           const uint8_t *r2, uint8_t *TL_RESTRICT d, ptrdiff_t C,
                                           ptrdiff_t n, float a, float b, float alpha,
                                           int bounded)
{
    for (ptrdiff_t j = C; j < n - C; j++) {
        const float x = (float)r1[j];
        float s = a * (float)r0[j - C] + a * (float)r0[j];
        s = s + a * (float)r0[j + C];
        s = s + a * (float)r1[j - C];
        s = s + b * x;
        s = s + a * (float)r1[j + C];
        s = s + a * (float)r2[j - C];
        s = s + a * (float)r2[j];
        s = s + a * (float)r2[j + C];
        const float blur = tl_rne(s);
        /* view.add_(blur - view, alpha=1 - factor): one fused multiply-add in torch */
        const float o = (float)((double)x + (double)alpha * (double)(blur - x));
        /* |o| < 2^31 when factor <= 1e6: the branch-free clamp */
        d[j] = bounded ? tl_clamp_trunc32(o) : tl_sat_trunc(o);
    }
}

TL_TGT static void TL_FN(sharpness)(const uint8_t *src, ptrdiff_t h, ptrdiff_t w,
                                    ptrdiff_t src_stride, int channels, uint8_t *dst,
                                    ptrdiff_t dst_stride, float a, float b, float alpha,
                                    int bounded)
{
    const ptrdiff_t C = channels, n = w * channels;
    for (ptrdiff_t y = 1; y < h - 1; y++) {
        const uint8_t *r0 = src + (y - 1) * src_stride;
        const uint8_t *r1 = src + y * src_stride;
        const uint8_t *r2 = src + (y + 1) * src_stride;
        uint8_t *d = dst + y * dst_stride;
        if (bounded)
            TL_FN(sharpness_row)(r0, r1, r2, d, C, n, a, b, alpha, 1);
        else
            TL_FN(sharpness_row)(r0, r1, r2, d, C, n, a, b, alpha, 0);
    }
}
