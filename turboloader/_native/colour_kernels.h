/* Hot loops of the colour kernels (_native/_colour.pyx), with runtime CPU dispatch.
 *
 * torchvision v2 uint8 semantics, one float32 rounding per torch operation (torch's fused
 * multiply-adds emulated exactly in double, never contracted: -ffp-contract=off). Callers have
 * validated every argument (h, w > 0, rows of at least w * channels bytes `stride` apart, 3
 * channels where stated, factors in range). No GIL needed; nothing is allocated. `isa` is a
 * TL_ISA_* level (simd.h) the CPU supports; every level gives identical bytes.
 */
#ifndef TL_COLOUR_KERNELS_H
#define TL_COLOUR_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* img[y][j] = lut[img[y][j]] over w * channels bytes per row, in place */
void tl_apply_lut(uint8_t *img, ptrdiff_t h, ptrdiff_t w, ptrdiff_t stride, int channels,
                  const uint8_t *lut, int isa);

/* saturation blend of a 3-channel image in place: x = uint8(clamp(fma(gray, alpha, x * ratio)))
 * with gray the floored float32 luma; requires |ratio| <= 1e6 (the 32-bit clamp's range) */
void tl_saturation(uint8_t *img, ptrdiff_t h, ptrdiff_t w, ptrdiff_t stride, float ratio,
                   float alpha, int isa);

/* hue rotation of a 3-channel image in place through torchvision's float32 HSV round trip;
 * -0.5 <= hue <= 0.5 */
void tl_hue(uint8_t *img, ptrdiff_t h, ptrdiff_t w, ptrdiff_t stride, float hue, int isa);

/* adjust_sharpness's interior rows 1..h-2, columns channels..(w-1)*channels: dst = blend of src
 * with its rounded 3x3 blur; h > 2, w > 2, channels 1 or 3; bounded: factor <= 1e6 */
void tl_sharpness_interior(const uint8_t *src, ptrdiff_t h, ptrdiff_t w, ptrdiff_t src_stride,
                           int channels, uint8_t *dst, ptrdiff_t dst_stride, float a, float b,
                           float alpha, int bounded, int isa);

#endif
