/* PNG mask rows -> a nearest-resampled window: unfilter the inflated rows of a one-channel
 * PNG (grayscale or palette, 1/2/4/8/16 bits, not interlaced) and gather the output pixels
 * through per-axis index maps, one source row at a time (no whole-mask buffer).
 *
 * Callers (_native/_mask.pyx) have validated every argument; the kernel re-checks what its
 * memory safety depends on and returns a TL_MASK_* status. No GIL needed; nothing is
 * allocated; `scratch` holds two rows (2 * stride bytes). */
#ifndef TL_MASK_KERNELS_H
#define TL_MASK_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#define TL_MASK_OK 0
#define TL_MASK_EARG (-1)    /* bad size, depth, map index or buffer */
#define TL_MASK_ESHORT (-2)  /* fewer inflated bytes than the rows the maps read */
#define TL_MASK_EFILTER (-3) /* a row's filter byte is not 0-4 */

/* The bytes of one unfiltered row of `width` samples of `bit_depth` bits (0: too large). */
size_t tl_png_stride(int64_t width, int bit_depth);

/* out[oy * ow + ox] = sample(ymap[oy], xmap[ox]) * gray_scale, for oy < oh, ox < ow.
 * z: `zlen` inflated IDAT bytes, rows of 1 filter byte + stride; ymap non-decreasing, each
 * in [0, rows); xmap each in [0, width). out: uint16 when bit_depth is 16, else uint8. */
int tl_png_mask_nearest(const uint8_t *z, size_t zlen, int64_t width, int64_t rows,
                        int bit_depth, int gray_scale, const int32_t *ymap, int64_t oh,
                        const int32_t *xmap, int64_t ow, void *out, uint8_t *scratch,
                        size_t scratch_len);

#endif
