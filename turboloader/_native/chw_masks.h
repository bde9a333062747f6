/* The byte masks of the normalize/CHW write's 8-pixel blocks, shared by chw_kernels.c's
 * normalize kernels and resample_kernels.c's vertical pass fused with the float32 write
 * (which must write bit for bit what normalize_avx2 writes): one definition.
 *
 * A block is 8 pixels (24 bytes), read as two overlapping 16-byte loads at bytes 0 and 8 of
 * the block. A pshufb with 0x80 in a dword's upper three bytes zero-extends while it
 * deinterleaves, so one shuffle per channel and load gives four int32. masks[c][L] fills
 * output positions 4L..4L+3 of channel c: pixels 4L.. from the load at 8L, or, flipped,
 * pixels 7-4L.. from the other load. */
#ifndef TL_CHW_MASKS_H
#define TL_CHW_MASKS_H

#include <stdint.h>

static inline void tl_widen_masks(uint8_t masks[3][2][16], int flip)
{
    for (int c = 0; c < 3; c++)
        for (int lane = 0; lane < 2; lane++)
            for (int k = 0; k < 16; k++) {
                const int pixel = flip ? 7 - (4 * lane + k / 4) : 4 * lane + k / 4;
                const int base = pixel >= 4 ? 8 : 0;
                masks[c][lane][k] = (uint8_t)(k % 4 ? 0x80 : 3 * pixel + c - base);
            }
}

#endif
