/* See mask_kernels.h. */
#include "mask_kernels.h"

#include <string.h>

size_t tl_png_stride(int64_t width, int bit_depth) {
    if (width <= 0 || width > ((int64_t)1 << 31) ||
        (bit_depth != 1 && bit_depth != 2 && bit_depth != 4 && bit_depth != 8 && bit_depth != 16))
        return 0;
    return (size_t)((width * bit_depth + 7) / 8);
}

static inline uint8_t paeth(uint8_t a, uint8_t b, uint8_t c) {
    int p = (int)a + b - c;
    int pa = p > a ? p - a : a - p, pb = p > b ? p - b : b - p, pc = p > c ? p - c : c - p;
    if (pa <= pb && pa <= pc) return a;
    return pb <= pc ? b : c;
}

/* cur = unfilter(raw) against prev (the previous unfiltered row, zeros for the first). */
static int unfilter(int type, const uint8_t *raw, const uint8_t *prev, uint8_t *cur,
                    size_t stride, size_t bpp) {
    size_t i;
    switch (type) {
    case 0:
        memcpy(cur, raw, stride);
        return TL_MASK_OK;
    case 1:
        for (i = 0; i < bpp && i < stride; i++) cur[i] = raw[i];
        for (; i < stride; i++) cur[i] = (uint8_t)(raw[i] + cur[i - bpp]);
        return TL_MASK_OK;
    case 2:
        for (i = 0; i < stride; i++) cur[i] = (uint8_t)(raw[i] + prev[i]);
        return TL_MASK_OK;
    case 3:
        for (i = 0; i < bpp && i < stride; i++) cur[i] = (uint8_t)(raw[i] + (prev[i] >> 1));
        for (; i < stride; i++)
            cur[i] = (uint8_t)(raw[i] + (((unsigned)cur[i - bpp] + prev[i]) >> 1));
        return TL_MASK_OK;
    case 4:
        for (i = 0; i < bpp && i < stride; i++) cur[i] = (uint8_t)(raw[i] + prev[i]);
        for (; i < stride; i++)
            cur[i] = (uint8_t)(raw[i] + paeth(cur[i - bpp], prev[i], prev[i - bpp]));
        return TL_MASK_OK;
    default:
        return TL_MASK_EFILTER;
    }
}

int tl_png_mask_nearest(const uint8_t *z, size_t zlen, int64_t width, int64_t rows,
                        int bit_depth, int gray_scale, const int32_t *ymap, int64_t oh,
                        const int32_t *xmap, int64_t ow, void *out, uint8_t *scratch,
                        size_t scratch_len) {
    size_t stride = tl_png_stride(width, bit_depth);
    size_t bpp = bit_depth == 16 ? 2 : 1;
    int64_t y, oy, ox;
    uint8_t *prev, *cur, *t;
    int status;

    if (z == NULL || ymap == NULL || xmap == NULL || out == NULL || scratch == NULL ||
        stride == 0 || rows <= 0 || oh <= 0 || ow <= 0 || gray_scale < 1 || gray_scale > 255 ||
        scratch_len < 2 * stride)
        return TL_MASK_EARG;
    /* the maps stay inside the rows and columns read (the unfilter runs rows in order) */
    for (oy = 0; oy < oh; oy++)
        if (ymap[oy] < 0 || ymap[oy] >= rows || (oy && ymap[oy] < ymap[oy - 1]))
            return TL_MASK_EARG;
    for (ox = 0; ox < ow; ox++)
        if (xmap[ox] < 0 || xmap[ox] >= width) return TL_MASK_EARG;
    if ((uint64_t)rows > (uint64_t)(zlen / (stride + 1))) return TL_MASK_ESHORT;

    prev = scratch;
    cur = scratch + stride;
    memset(prev, 0, stride);
    oy = 0;
    for (y = 0; y < rows && oy < oh; y++) {
        const uint8_t *raw = z + (size_t)y * (stride + 1);
        status = unfilter(raw[0], raw + 1, prev, cur, stride, bpp);
        if (status != TL_MASK_OK) return status;
        for (; oy < oh && ymap[oy] == y; oy++) {
            if (bit_depth == 16) {
                uint16_t *o = (uint16_t *)out + oy * ow;
                for (ox = 0; ox < ow; ox++) {
                    const uint8_t *s = cur + 2 * (size_t)xmap[ox];
                    o[ox] = (uint16_t)((s[0] << 8) | s[1]);
                }
            } else if (bit_depth == 8) {
                uint8_t *o = (uint8_t *)out + oy * ow;
                if (gray_scale == 1)
                    for (ox = 0; ox < ow; ox++) o[ox] = cur[xmap[ox]];
                else
                    for (ox = 0; ox < ow; ox++) o[ox] = (uint8_t)(cur[xmap[ox]] * gray_scale);
            } else {  /* 1, 2, 4 bits, the first sample in a byte's high bits */
                uint8_t *o = (uint8_t *)out + oy * ow;
                unsigned per = 8u / (unsigned)bit_depth, mask = (1u << bit_depth) - 1u;
                for (ox = 0; ox < ow; ox++) {
                    unsigned x = (unsigned)xmap[ox];
                    unsigned shift = 8u - (unsigned)bit_depth * (x % per + 1u);
                    o[ox] = (uint8_t)(((cur[x / per] >> shift) & mask) * (unsigned)gray_scale);
                }
            }
        }
        t = prev; prev = cur; cur = t;
    }
    return oy == oh ? TL_MASK_OK : TL_MASK_EARG;
}
