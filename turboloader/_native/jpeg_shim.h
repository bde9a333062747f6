/*
 * jpeg_shim.h -- turboloader's small, hand-written C layer over libjpeg-turbo's libjpeg API.
 *
 * Why this file exists: libjpeg reports fatal errors with longjmp, and setjmp/longjmp must
 * never cross Cython-generated frames. Every libjpeg call, and the setjmp that catches its
 * errors, lives in jpeg_shim.c; callers only ever see integer status codes and messages.
 *
 * Contract for every function here:
 *   - Reentrant and thread-safe: no static buffers; all state is on the stack of the call,
 *     but for jpeg_huffman.c's per-thread cache of built Huffman tables (each thread's own,
 *     keyed by the table's bytes, freed when the thread exits). Safe to call concurrently
 *     from any number of threads without the GIL.
 *   - Never prints (libjpeg's output_message/emit_message are replaced).
 *   - Never allocates the output: pixels go into the caller's buffer. libjpeg's own working
 *     memory is allocated and freed inside the call, on success and on every error path.
 *   - Returns TL_OK (0) or one of the negative TL_ERR_* codes below; on error `errmsg`
 *     (TL_MSG_LEN bytes, always NUL-terminated when non-NULL) holds libjpeg-turbo's own
 *     message, or the shim's for errors the shim detects itself.
 *
 * This header deliberately does not include jpeglib.h, so it can be cimported from Cython
 * (jpeg_shim.pxd) without exposing libjpeg's types.
 */
#ifndef TURBOLOADER_JPEG_SHIM_H
#define TURBOLOADER_JPEG_SHIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Size of every errmsg / warnmsg buffer (libjpeg's JMSG_LENGTH_MAX). */
#define TL_MSG_LEN 200

/* Progressive files with more scans than this are rejected (a denial-of-service guard:
 * each scan walks the whole coefficient buffer; libjpeg-turbo's own fuzzers use 500). */
#define TL_MAX_SCANS 500

/* With max_pixels > 0, progressive files get a lower pixel limit (max_pixels / 4: their
 * whole coefficient buffer, 2 bytes a sample, is held while decoding) and a work budget:
 * scans x coefficient blocks <= max_pixels / 8, checked while the scans are read (a flat
 * 13000 x 13000 image with 442 scans fits in 459 KB and would cost ~20 s without it). A
 * 24-megapixel 4:2:0 camera JPEG with 10 scans uses ~6 M of the default ~22 M budget,
 * a 4:4:4 one with 12 scans ~14 M. */
#define TL_PROGRESSIVE_DIVISOR 4
#define TL_WORK_DIVISOR 8

/* Status codes. Everything except TL_ERR_ARG means "bad input data". */
#define TL_OK                  0
#define TL_ERR_DECODE         -1  /* libjpeg error: corrupt data, not a JPEG, empty input, ... */
#define TL_ERR_TRUNCATED      -2  /* premature end of data (libjpeg's JWRN_JPEG_EOF) */
#define TL_ERR_STRICT         -3  /* a libjpeg warning, made fatal by TL_STRICT */
#define TL_ERR_TOO_LARGE      -4  /* image width*height exceeds max_pixels */
#define TL_ERR_TOO_MANY_SCANS -5  /* more than TL_MAX_SCANS scans */
#define TL_ERR_UNSUPPORTED    -6  /* colour space with no RGB conversion (e.g. 2 components) */
#define TL_ERR_ARG            -7  /* invalid argument: scale, crop window, output buffer */
#define TL_ERR_TOO_MUCH_WORK  -8  /* progressive: scans x blocks over the budget (max_pixels / 8) */
#define TL_ERR_OUTPUT_FULL    -9  /* tl_jpeg_transcode_restart: out_cap too small (retry larger) */

/* tl_jpeg_info.color_space: the colour space libjpeg infers from the file's markers. */
#define TL_CS_UNKNOWN 0
#define TL_CS_GRAY    1
#define TL_CS_RGB     2
#define TL_CS_YCBCR   3
#define TL_CS_CMYK    4
#define TL_CS_YCCK    5

/* tl_jpeg_decode flags (bitwise or). */
#define TL_STRICT              1  /* every libjpeg warning is an error (TL_ERR_STRICT) */
#define TL_FAST_DCT            2  /* JDCT_IFAST instead of the accurate JDCT_ISLOW */
#define TL_NO_FANCY_UPSAMPLING 4  /* replicate chroma instead of interpolating (faster) */
#define TL_STOCK_HUFFMAN       8  /* libjpeg's own Huffman decoder for every scan (default:
                                     jpeg_huffman.c's for sequential scans, same output) */
#define TL_HUFF_BMI2          16  /* jpeg_huffman.c's decoder runs its BMI2 build (the same
                                     output); only where the CPU has BMI2 (simd.h's
                                     tl_cpu_bmi2), else an illegal instruction: the _native
                                     modules set it from _cpu's dispatch level, never users */

typedef struct {
    int width, height;  /* of the file, unscaled */
    int components;     /* number of colour components (1, 3 or 4 in practice) */
    int color_space;    /* TL_CS_* */
    int progressive;    /* 1 for a progressive (SOF2) file */
    int h_samp[4];      /* sampling factors of the first 4 components, 0 past `components` */
    int v_samp[4];
    int adobe;          /* 1 when an Adobe APP14 marker was seen */
    int restart_interval; /* MCUs per restart interval (DRI), 0 without restart markers */
} tl_jpeg_info;

/* libjpeg's size for one dimension decoded at scale num/8: ceil(dim * num / 8). */
static inline long long tl_jpeg_scaled_dim(long long dim, int num)
{
    return (dim * num + 7) / 8;
}

/* Parse the markers up to the first SOS and fill *info. No pixel data is decoded and no
 * size limit is applied. A file that ends inside its header is TL_ERR_TRUNCATED. */
int tl_jpeg_read_header(const unsigned char *data, size_t size, tl_jpeg_info *info,
                        char *errmsg);

/*
 * Decode `data` as RGB (3 bytes per pixel) into `out`.
 *
 * scale_num   1..8: decode at scale scale_num/8 with libjpeg's DCT scaling; the decoded
 *             image is tl_jpeg_scaled_dim(width, n) x tl_jpeg_scaled_dim(height, n).
 * crop_*      crop_w == crop_h == 0: the whole decoded image. Otherwise the window
 *             [crop_x, crop_x + crop_w) x [crop_y, crop_y + crop_h) of the DECODED (scaled)
 *             image, which must lie inside it (else TL_ERR_ARG). Only the rows up to the
 *             window's last and the iMCU columns covering it (plus one iMCU either side, for
 *             the upsampler's context) are decoded; the pixels equal that window of a full
 *             decode at the same scale and flags. Data after the window's last row is read
 *             (entropy-decoded only) when the file does not end in an EOI marker, so a
 *             truncated file is an error wherever the window lies; in a file that does end
 *             in EOI, corruption confined to the rows below the window goes unnoticed.
 * out         first byte of the window's top-left pixel; row r starts at out + r*out_stride.
 * out_stride  bytes between rows, >= 3 * window width.
 * out_size    bytes writable from `out`; must be >= (h - 1) * out_stride + 3 * w.
 * flags       TL_STRICT | TL_FAST_DCT | TL_NO_FANCY_UPSAMPLING | TL_STOCK_HUFFMAN.
 * max_pixels  > 0: refuse files whose width*height exceeds it (TL_ERR_TOO_LARGE), checked
 *             right after the header, before libjpeg allocates its image buffers. <= 0: no limit.
 * errmsg      TL_MSG_LEN bytes: the error message on failure, "" on success.
 * n_warnings  out: number of libjpeg warnings (recovered corruption), may be NULL.
 * warnmsg     TL_MSG_LEN bytes, may be NULL: the first warning's message, "" if none.
 *
 * A premature end of data is always an error. Without TL_STRICT other warnings (e.g.
 * "Corrupt JPEG data: 3 extraneous bytes before marker 0xd9") are only counted; the
 * decoded pixels may then contain libjpeg's grey fill. Grayscale, YCbCr, RGB, CMYK and
 * YCCK files all produce RGB; CMYK is treated as Adobe-inverted and converted like
 * Pillow's CMYK -> RGB (R = (255 - C) * (255 - K) / 255, Pillow's rounding).
 * On error the contents of the window are unspecified (partially written).
 */
int tl_jpeg_decode(const unsigned char *data, size_t size, int scale_num,
                   int crop_x, int crop_y, int crop_w, int crop_h,
                   unsigned char *out, ptrdiff_t out_stride, size_t out_size,
                   int flags, long long max_pixels,
                   char *errmsg, int *n_warnings, char *warnmsg);

/*
 * tl_jpeg_decode without the copy a crop window otherwise costs: libjpeg writes its decoded
 * rows straight into `out`, which must therefore be TL_WIDE_MARGIN pixels wider than the
 * window (out_stride >= 3 * (crop_w + TL_WIDE_MARGIN), out_size accordingly). The window's
 * first pixel is at column *col_offset of each row (0 <= *col_offset < TL_WIDE_MARGIN); the
 * columns around it hold decoded neighbours. The window's pixels equal tl_jpeg_decode's.
 * Used by the fused path, which resamples from the window in place.
 */
#define TL_WIDE_MARGIN 128

int tl_jpeg_decode_wide(const unsigned char *data, size_t size, int scale_num,
                        int crop_x, int crop_y, int crop_w, int crop_h,
                        unsigned char *out, ptrdiff_t out_stride, size_t out_size,
                        int flags, long long max_pixels,
                        char *errmsg, int *n_warnings, char *warnmsg, int *col_offset);

/*
 * Restart-interval window decode ("seekable" JPEGs).
 *
 * A baseline, single-scan JPEG with restart markers (DRI) whose intervals never wrap an MCU
 * row (the interval divides the MCUs per row, or is a whole number of rows) is a grid of
 * independently decodable tiles: DC predictors reset at every marker. The *_rst decoders
 * below copy the intervals covering a crop window (plus one MCU of context on each side
 * where chroma is subsampled, for the upsampler) into `scratch` as a smaller, ordinary JPEG
 * (same tables, smaller SOF, renumbered RST markers, EOI) and decode that, so the Huffman
 * decoding of every other interval is skipped. The window's pixels are bit-identical to
 * tl_jpeg_decode's. Any other file, a window for which it would not save work, a file that
 * does not end in EOI, or marker data that is not exactly as the header says (a missing,
 * misnumbered or extra marker) takes the unchanged path, which reports corruption as before.
 * Corruption confined to intervals outside the window then goes unnoticed (as it does for
 * rows below the window on the unchanged path).
 *
 * scratch       caller's buffer for the sub-image stream, scratch_size >= TL_RST_SCRATCH(size)
 *               (smaller, or NULL: the unchanged path). Never read before written.
 * used          out, may be NULL: 1 when the restart path decoded the window, else 0.
 */
#define TL_RST_SCRATCH(size) ((size_t)(size) + 64)

int tl_jpeg_decode_rst(const unsigned char *data, size_t size, int scale_num,
                       int crop_x, int crop_y, int crop_w, int crop_h,
                       unsigned char *out, ptrdiff_t out_stride, size_t out_size,
                       int flags, long long max_pixels,
                       char *errmsg, int *n_warnings, char *warnmsg,
                       unsigned char *scratch, size_t scratch_size, int *used);

int tl_jpeg_decode_wide_rst(const unsigned char *data, size_t size, int scale_num,
                            int crop_x, int crop_y, int crop_w, int crop_h,
                            unsigned char *out, ptrdiff_t out_stride, size_t out_size,
                            int flags, long long max_pixels,
                            char *errmsg, int *n_warnings, char *warnmsg, int *col_offset,
                            unsigned char *scratch, size_t scratch_size, int *used);

/*
 * Whether the restart path applies to this window, and the sub-image it would decode:
 * returns 1 and sub = {x, y, width, height} in full-resolution pixels of the file, or 0.
 * Parses markers only (no Huffman decoding); never fails.
 */
int tl_jpeg_restart_window(const unsigned char *data, size_t size, int scale_num,
                           int crop_x, int crop_y, int crop_w, int crop_h, int sub[4]);

/*
 * Lossless transcode to a "seekable" baseline JPEG (what `jpegtran -restart N [-optimize]
 * -copy all` does): the DCT coefficients, quantisation tables and sampling are copied
 * unchanged (jpeg_read_coefficients -> jpeg_write_coefficients), the output is one
 * interleaved baseline scan with a restart marker every `restart_mcus` MCUs. APPn and COM
 * markers are kept (JFIF/Adobe ones are rewritten by libjpeg).
 *
 * restart_mcus  > 0: that interval; 0: the smallest divisor of the MCUs per row (so that
 *               intervals never wrap a row) that keeps the output within ~3% of the
 *               input's size: a first pass with whole-row intervals measures what the
 *               optimized tables saved, the markers (~5 bytes an interval) spend the rest
 *               (two transcodes); the whole row when nothing finer fits.
 * optimize      1: optimized Huffman tables (two passes), 0: the standard tables.
 * out, out_cap  the caller's buffer; TL_ERR_OUTPUT_FULL when the result does not fit
 *               (TL_TRANSCODE_BOUND(size) is a first guess: grow it and call again).
 * out_size      out: bytes written. restart_used: out, the interval chosen (may be NULL).
 * max_pixels    as for tl_jpeg_decode (progressive inputs get its lower limit and budget).
 * Every libjpeg warning (recoverable corruption) is an error here (TL_ERR_STRICT): a
 * rewrite must not turn damaged data into a clean-looking file.
 */
#define TL_TRANSCODE_BOUND(size) (2 * (size_t)(size) + 65536)

int tl_jpeg_transcode_restart(const unsigned char *data, size_t size, int restart_mcus,
                              int optimize, unsigned char *out, size_t out_cap,
                              size_t *out_size, int *restart_used, long long max_pixels,
                              char *errmsg);

/* Which Huffman decoder tl_jpeg_decode would run on this file's scan at scale_num/8 with
 * flags (only TL_STOCK_HUFFMAN and TL_HUFF_BMI2 matter): 1 jpeg_huffman.c's, 2 its BMI2
 * build, 0 libjpeg's (progressive,
 * arithmetic, multi-scan or small files, TL_STOCK_HUFFMAN), or a TL_ERR_* status (bad header;
 * message in errmsg). Decodes no entropy-coded data; for tests and benchmarks. */
int tl_jpeg_huffman_own(const unsigned char *data, size_t size, int scale_num, int flags,
                        char *errmsg);

#ifdef __cplusplus
}
#endif

#endif /* TURBOLOADER_JPEG_SHIM_H */
