/* Output kernels: 3-channel HWC uint8 rows -> CHW planes, with runtime CPU dispatch.
 *
 * Callers (_native/_chw.pyx) have validated every argument: h, w > 0, src rows of at least
 * 3 * w bytes `src_stride` apart, dst three contiguous planes of h * w elements, scale and
 * bias three floats each. No GIL needed; nothing is allocated; the source is only read.
 * `isa` is a TL_ISA_* level (simd.h) the CPU supports; every level gives identical output.
 */
#ifndef TL_CHW_KERNELS_H
#define TL_CHW_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* dst[c][y][x] = (float)src[y][x'][c] * scale[c] + bias[c] (two roundings, never an FMA),
 * x' = w - 1 - x when flip, else x. */
void tl_normalize_chw_f32(const uint8_t *src, ptrdiff_t h, ptrdiff_t w, ptrdiff_t src_stride,
                          float *dst, const float *scale, const float *bias, int flip, int isa);

/* dst[c][y][x] = src[y][x'][c], x' as above. */
void tl_chw_u8(const uint8_t *src, ptrdiff_t h, ptrdiff_t w, ptrdiff_t src_stride,
               uint8_t *dst, int flip, int isa);

#endif
