/* The two passes of Pillow's 8 bpc resampler (see _resample.pyx), with runtime CPU dispatch.
 *
 * Callers (_native/_resample.pyx, resample_run) have validated the plan: coefficient rows of
 * `ksize` int32 (22-bit fixed point) with bounds (first source index, taps) inside the source,
 * row strides of at least a row. No GIL needed; nothing is allocated. `isa` is a TL_ISA_*
 * level (simd.h) the CPU supports; integer sums are exact, so every level gives the same bytes.
 */
#ifndef TL_RESAMPLE_KERNELS_H
#define TL_RESAMPLE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#define TL_PRECISION_BITS 22   /* 32 - 8 - 2, Pillow's 8 bpc coefficient precision */

/* Horizontal pass over nrows rows of in_w pixels of C (1..4) channels: dst[xx] = clip8(sum
 * of taps). Reads nothing past a row's in_w * C bytes. */
void tl_resample_hpass(const uint8_t *src, ptrdiff_t src_stride, ptrdiff_t nrows, uint8_t *dst,
                       ptrdiff_t dst_stride, ptrdiff_t out_w, ptrdiff_t in_w, int C,
                       const int32_t *kk, const int32_t *bounds, ptrdiff_t ksize, int isa);

/* Vertical pass: out_h output rows of rowlen bytes; acc holds rowlen int32 of scratch. */
void tl_resample_vpass(const uint8_t *src, ptrdiff_t src_stride, uint8_t *dst,
                       ptrdiff_t dst_stride, ptrdiff_t out_h, ptrdiff_t rowlen,
                       const int32_t *kk, const int32_t *bounds, ptrdiff_t ksize, int32_t *acc,
                       int isa);

/* The vertical pass of a 3-channel image fused with the float32 CHW write of chw_kernels.h's
 * tl_normalize_chw_f32: dst's three planes (out_h * out_w floats each) get
 * (float)byte * scale[c] + bias[c] of the pass's output bytes, mirrored when flip, equal bit for
 * bit to tl_resample_vpass (rowlen 3 * out_w) followed by tl_normalize_chw_f32. Each row is
 * written 32 pixels at a time right after they are computed: the stores of the 12-byte-per-pixel
 * float output then overlap the pass's arithmetic instead of running as a separate
 * memory-bound loop. Returns 1 when it wrote dst, 0 when it does not apply and wrote nothing
 * (a level below AVX2, out_w < 32, a row of more than 256 taps or coefficients outside the
 * exact 16-bit split): the caller then runs the two kernels. */
int tl_resample_vpass_chw_f32(const uint8_t *src, ptrdiff_t src_stride, ptrdiff_t out_h,
                              ptrdiff_t out_w, const int32_t *kk, const int32_t *bounds,
                              ptrdiff_t ksize, float *dst, const float *scale,
                              const float *bias, int flip, int isa);

#endif
