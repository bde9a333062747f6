/* The warp and blur kernels' loops (_native/_warp.pyx), with runtime CPU dispatch.
 *
 * Every float operation mirrors one rounding of torch's (its fused multiply-adds emulated
 * exactly in double; -ffp-contract=off keeps the compiler from fusing anything else). Callers
 * have validated every argument (positive sizes at most 2^22, 1..4 channels, strides of at
 * least a row, a known grid and mode, odd tap counts whose half-width is below the side, a tmp
 * buffer of (h + 1) * w * C floats). No GIL needed; nothing is allocated. `isa` is a TL_ISA_*
 * level (simd.h) the CPU supports; every level gives identical bytes.
 */
#ifndef TL_WARP_KERNELS_H
#define TL_WARP_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#define TL_WARP_NEAREST 0
#define TL_WARP_BILINEAR 1
#define TL_GRID_AFFINE 0        /* torchvision _affine_grid (centred output coordinates) */
#define TL_GRID_PERSPECTIVE 1   /* torchvision _perspective_grid (pixel-centre coordinates) */

/* Inverse-map every output pixel through the float32 grid coefficients t (6 or 8) and sample
 * src; fill is NULL (zeros, no mask blend) or C floats in [-65536, 65536]. src and dst do not
 * overlap. Every tap is bounds-checked against (sh, sw) before it is read. */
void tl_warp_u8(const uint8_t *src, ptrdiff_t sh, ptrdiff_t sw, ptrdiff_t sstride, int C,
                uint8_t *dst, ptrdiff_t dh, ptrdiff_t dw, ptrdiff_t dstride, int grid,
                const float *t, int mode, const float *fill, int isa);

/* Separable blur with reflect padding: src -> tmp (float rows) -> dst; src may be dst. */
void tl_blur_u8(const uint8_t *src, ptrdiff_t h, ptrdiff_t w, ptrdiff_t sstride, int C,
                uint8_t *dst, ptrdiff_t dstride, const float *kx, ptrdiff_t nx,
                const float *ky, ptrdiff_t ny, float *tmp, int isa);

#endif
