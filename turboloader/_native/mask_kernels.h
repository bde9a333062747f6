/* PNG mask rows -> a nearest-resampled window: inflate the zlib stream of a one-channel PNG
 * (grayscale or palette, 1/2/4/8/16 bits, not interlaced), checking its Adler-32, unfilter
 * the rows up to the last one the output reads and gather the output pixels through per-axis index maps.
 *
 * Callers (_native/_mask.pyx) have validated every argument; the kernels re-check what their
 * memory safety depends on and return a TL_MASK_* status. No GIL needed; nothing is
 * allocated; hostile streams end in a status, never a read or write outside the buffers. */
#ifndef TL_MASK_KERNELS_H
#define TL_MASK_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#define TL_MASK_OK 0
#define TL_MASK_EARG (-1)    /* bad size, depth, map index or buffer */
#define TL_MASK_ESHORT (-2)  /* the stream ends before the rows the maps read */
#define TL_MASK_EFILTER (-3) /* a row's filter byte is not 0-4 */
#define TL_MASK_EZLIB (-4)   /* not a valid zlib / deflate stream */

/* The bytes of one unfiltered row of `width` samples of `bit_depth` bits (0: too large). */
size_t tl_png_stride(int64_t width, int bit_depth);

/* The first `out_len` bytes the zlib stream `in` inflates to, into `out` (the rest of the
 * stream and its checksum are not read). */
int tl_inflate_head(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);

/* The whole output of the zlib stream `in`, which must be exactly `out_len` bytes, into `out`;
 * the stream's final block must end there and its Adler-32 match (TL_MASK_EZLIB otherwise;
 * TL_MASK_ESHORT: the stream or its checksum is cut short). Bytes after the checksum are not
 * read (Pillow and zlib ignore them too). */
int tl_inflate_whole(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);

/* out[oy * ow + ox] = sample(ymap[oy], xmap[ox]) * gray_scale, for oy < oh, ox < ow.
 * z: the PNG's zlib stream (its IDAT data); rows of 1 filter byte + stride; ymap
 * non-decreasing, each in [0, height); xmap each in [0, width). out: uint16 when bit_depth
 * is 16, else uint8. buf: at least height * (stride + 1) + 2 * stride bytes. */
int tl_png_mask_nearest(const uint8_t *z, size_t zlen, int64_t width, int64_t height,
                        int bit_depth, int gray_scale, const int32_t *ymap, int64_t oh,
                        const int32_t *xmap, int64_t ow, void *out, uint8_t *buf,
                        size_t buf_len);

#endif
