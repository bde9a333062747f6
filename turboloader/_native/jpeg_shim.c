/*
 * jpeg_shim.c -- every libjpeg call turboloader makes, and the setjmp that catches libjpeg's
 * errors: headers and decodes. The restart-interval window decode and the lossless transcode
 * to restart intervals are in jpeg_transcode.c; turboloader's own Huffman decoder for
 * sequential scans in jpeg_huffman.c. See jpeg_shim.h for the contract. No globals: all state lives in a tl_ctx on the
 * caller's stack, so concurrent calls from several threads never share anything.
 */
#include <limits.h>
#include <stdlib.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "jpeg_shim.h"
#include "jpeg_internal.h"

#if TL_MSG_LEN < JMSG_LENGTH_MAX
#error "TL_MSG_LEN must hold a libjpeg message (JMSG_LENGTH_MAX)"
#endif

/* Rows handed to one jpeg_read_scanlines call when writing straight into `out`. */
#define TL_ROW_BATCH 16

static tl_ctx *tl_ctx_of(j_common_ptr cinfo)
{
    return (tl_ctx *)((char *)cinfo->progress - offsetof(tl_ctx, progress));
}

void tl_fail(j_common_ptr cinfo, int status)
{
    tl_err *err = (tl_err *)cinfo->err;
    err->status = status;
    longjmp(err->jb, 1);
}

static void tl_error_exit(j_common_ptr cinfo)
{
    tl_err *err = (tl_err *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->errmsg);
    tl_fail(cinfo, TL_ERR_DECODE);
}

/* Replaces libjpeg's printing to stderr. */
static void tl_output_message(j_common_ptr cinfo)
{
    (void)cinfo;
}

static void tl_emit_message(j_common_ptr cinfo, int msg_level)
{
    tl_err *err = (tl_err *)cinfo->err;
    if (msg_level >= 0)
        return; /* trace messages */
    /* A warning: libjpeg recovered and will go on, possibly filling with grey. Running out
     * of data is never acceptable: the rest of the image would be invented. */
    if (err->pub.msg_code == JWRN_JPEG_EOF) {
        (*cinfo->err->format_message)(cinfo, err->errmsg);
        tl_fail(cinfo, TL_ERR_TRUNCATED);
    }
    if (err->strict) {
        (*cinfo->err->format_message)(cinfo, err->errmsg);
        tl_fail(cinfo, TL_ERR_STRICT);
    }
    if (err->n_warnings == 0 && err->warnmsg != NULL)
        (*cinfo->err->format_message)(cinfo, err->warnmsg);
    err->n_warnings++;
    err->pub.num_warnings++;
}

/* Called by libjpeg between units of work; stops pathological progressive files. */
static void tl_progress_monitor(j_common_ptr cinfo)
{
    tl_ctx *c;
    int scans;
    if (!cinfo->is_decompressor)
        return;
    scans = ((j_decompress_ptr)cinfo)->input_scan_number;
    if (scans > TL_MAX_SCANS) {
        tl_err *err = (tl_err *)cinfo->err;
        snprintf(err->errmsg, TL_MSG_LEN, "Progressive JPEG image has more than %d scans",
                 TL_MAX_SCANS);
        tl_fail(cinfo, TL_ERR_TOO_MANY_SCANS);
    }
    /* Each scan of a progressive file walks the whole coefficient buffer: the decode costs
     * scans x blocks, which a small file can make huge (many scans over a big, flat image). */
    c = tl_ctx_of(cinfo);
    if (c->max_work > 0 && c->blocks > 0 && (long long)scans * c->blocks > c->max_work) {
        tl_err *err = (tl_err *)cinfo->err;
        snprintf(err->errmsg, TL_MSG_LEN,
                 "Progressive JPEG needs more than %lld scan-blocks of work (%d scans x %lld "
                 "blocks so far; the budget is max_pixels / %d: raise max_pixels)",
                 c->max_work, scans, c->blocks, TL_WORK_DIVISOR);
        tl_fail(cinfo, TL_ERR_TOO_MUCH_WORK);
    }
}

/* Everything but jpeg_create_decompress, which must come after the caller's setjmp. */
void tl_ctx_init(tl_ctx *c, char *errmsg, char *warnmsg, int strict)
{
    memset(c, 0, sizeof(*c));
    c->cinfo.err = jpeg_std_error(&c->err.pub);
    c->err.pub.error_exit = tl_error_exit;
    c->err.pub.emit_message = tl_emit_message;
    c->err.pub.output_message = tl_output_message;
    c->err.strict = strict;
    c->err.errmsg = errmsg;
    c->err.warnmsg = warnmsg;
    c->progress.progress_monitor = tl_progress_monitor;
    errmsg[0] = '\0';
    if (warnmsg != NULL)
        warnmsg[0] = '\0';
}

static int tl_color_space(J_COLOR_SPACE cs)
{
    switch (cs) {
    case JCS_GRAYSCALE: return TL_CS_GRAY;
    case JCS_RGB:       return TL_CS_RGB;
    case JCS_YCbCr:     return TL_CS_YCBCR;
    case JCS_CMYK:      return TL_CS_CMYK;
    case JCS_YCCK:      return TL_CS_YCCK;
    default:            return TL_CS_UNKNOWN;
    }
}

/* libjpeg's CMYK output is Adobe-inverted (0 = full ink); Pillow decodes every CMYK JPEG
 * as "CMYK;I" and converts with nk = 255 - K, R = nk - MULDIV255(C, nk). Reproduced exactly,
 * written in terms of the raw (inverted) samples: C = 255 - c, nk = k. */
static void tl_cmyk_to_rgb(const JSAMPLE *in, unsigned char *out, JDIMENSION n)
{
    JDIMENSION i;
    for (i = 0; i < n; i++, in += 4, out += 3) {
        int k = in[3];
        int t;
        t = (255 - in[0]) * k + 128; out[0] = (unsigned char)(k - (((t >> 8) + t) >> 8));
        t = (255 - in[1]) * k + 128; out[1] = (unsigned char)(k - (((t >> 8) + t) >> 8));
        t = (255 - in[2]) * k + 128; out[2] = (unsigned char)(k - (((t >> 8) + t) >> 8));
    }
}

int tl_arg_error(char *errmsg, const char *msg)
{
    snprintf(errmsg, TL_MSG_LEN, "%s", msg);
    return TL_ERR_ARG;
}

int tl_jpeg_read_header(const unsigned char *data, size_t size, tl_jpeg_info *info,
                        char *errmsg)
{
    tl_ctx c;
    char localmsg[TL_MSG_LEN];
    int ci;

    if (errmsg == NULL)
        errmsg = localmsg;
    if (info == NULL)
        return tl_arg_error(errmsg, "info is NULL");
    memset(info, 0, sizeof(*info));
    if (size > ULONG_MAX)
        return tl_arg_error(errmsg, "input larger than libjpeg can address");

    tl_ctx_init(&c, errmsg, NULL, 0);
    if (setjmp(c.err.jb)) {
        jpeg_destroy_decompress(&c.cinfo);
        return c.err.status;
    }
    jpeg_create_decompress(&c.cinfo);
    c.cinfo.progress = &c.progress;
    jpeg_mem_src(&c.cinfo, data, (unsigned long)size);
    jpeg_read_header(&c.cinfo, TRUE);

    info->width = (int)c.cinfo.image_width;
    info->height = (int)c.cinfo.image_height;
    info->components = c.cinfo.num_components;
    info->color_space = tl_color_space(c.cinfo.jpeg_color_space);
    info->progressive = c.cinfo.progressive_mode ? 1 : 0;
    for (ci = 0; ci < c.cinfo.num_components && ci < 4; ci++) {
        info->h_samp[ci] = c.cinfo.comp_info[ci].h_samp_factor;
        info->v_samp[ci] = c.cinfo.comp_info[ci].v_samp_factor;
    }
    info->adobe = c.cinfo.saw_Adobe_marker ? 1 : 0;
    info->restart_interval = (int)c.cinfo.restart_interval;
    jpeg_destroy_decompress(&c.cinfo);
    return TL_OK;
}

/* The pixel limit, and for progressive files the lower limit and the work budget; after
 * jpeg_read_header, before anything allocates image-sized buffers. */
int tl_check_limits(tl_ctx *c, long long max_pixels)
{
    j_decompress_ptr cinfo = &c->cinfo;
    char *errmsg = c->err.errmsg;
    if (max_pixels > 0 &&
        (long long)cinfo->image_width * (long long)cinfo->image_height > max_pixels) {
        snprintf(errmsg, TL_MSG_LEN,
                 "Image size %u x %u exceeds the limit of %lld pixels (max_pixels)",
                 (unsigned)cinfo->image_width, (unsigned)cinfo->image_height, max_pixels);
        return TL_ERR_TOO_LARGE;
    }
    if (max_pixels > 0 && cinfo->progressive_mode) {
        /* A progressive file buffers every coefficient (128 bytes a block) and re-walks
         * them for each scan: a lower pixel limit, and a work budget checked per scan. */
        long long blocks = 0;
        int ci;
        long long limit = max_pixels / TL_PROGRESSIVE_DIVISOR;
        if ((long long)cinfo->image_width * (long long)cinfo->image_height > limit) {
            snprintf(errmsg, TL_MSG_LEN,
                     "Progressive image size %u x %u exceeds the limit of %lld pixels for "
                     "progressive JPEGs (max_pixels / %d: raise max_pixels)",
                     (unsigned)cinfo->image_width, (unsigned)cinfo->image_height, limit,
                     TL_PROGRESSIVE_DIVISOR);
            return TL_ERR_TOO_LARGE;
        }
        for (ci = 0; ci < cinfo->num_components; ci++) {
            jpeg_component_info *comp = &cinfo->comp_info[ci];
            long long bw = ((long long)cinfo->image_width * comp->h_samp_factor
                            + 8LL * cinfo->max_h_samp_factor - 1) / (8LL * cinfo->max_h_samp_factor);
            long long bh = ((long long)cinfo->image_height * comp->v_samp_factor
                            + 8LL * cinfo->max_v_samp_factor - 1) / (8LL * cinfo->max_v_samp_factor);
            blocks += bw * bh;
        }
        c->blocks = blocks;
        c->max_work = max_pixels / TL_WORK_DIVISOR;
    }
    return TL_OK;
}

/* Whether the data's last bytes are an EOI marker (FF D9), as an intact file's are. */
int tl_ends_with_eoi(const unsigned char *data, size_t size)
{
    return size >= 2 && data[size - 2] == 0xFF && data[size - 1] == 0xD9;
}

#if JPEG_LIB_VERSION >= 70
#define TL_DCT_H(c) ((c)->DCT_h_scaled_size)
#define TL_DCT_V(c) ((c)->DCT_v_scaled_size)
#define TL_MIN_DCT_H(ci) ((ci)->min_DCT_h_scaled_size)
#define TL_MIN_DCT_V(ci) ((ci)->min_DCT_v_scaled_size)
#else
#define TL_DCT_H(c) ((c)->DCT_scaled_size)
#define TL_DCT_V(c) ((c)->DCT_scaled_size)
#define TL_MIN_DCT_H(ci) ((ci)->min_DCT_scaled_size)
#define TL_MIN_DCT_V(ci) ((ci)->min_DCT_scaled_size)
#endif

/* Whether jpeg_crop_scanline gives the full decode's pixels for this file and scale. Before
 * libjpeg-turbo 3.0 (2.1.5 is Debian's and the wheel's) it sets each component's row width
 * as if every component's IDCT ran at the smallest DCT scale (width * h / max_h). DCT scaling
 * decodes a subsampled component at a larger scale where the factors allow it (the chroma of
 * 4x2 or 2x4 luma at 1/8..7/8 is decoded at twice the luma's scale, then upsampled 2x1 or
 * 1x2): an upsampler that reads that width then interpolates from the wrong samples (issue
 * 39: 30-37 of 80 windows wrong by up to 255). A component decoded at the smallest scale has
 * the right width; one not upsampled
 * at all (the full-size copy) never reads it. Anything else decodes full rows and copies the
 * window out (tl_decode_body), which costs a full-width decode on those rare files only. */
static int tl_crop_is_exact(j_decompress_ptr cinfo)
{
    int ci;
    for (ci = 0; ci < cinfo->num_components; ci++) {
        jpeg_component_info *comp = &cinfo->comp_info[ci];
        if (TL_DCT_H(comp) == TL_MIN_DCT_H(cinfo) && TL_DCT_V(comp) == TL_MIN_DCT_V(cinfo))
            continue;
        if (comp->h_samp_factor * TL_DCT_H(comp) == cinfo->max_h_samp_factor * TL_MIN_DCT_H(cinfo)
            && comp->v_samp_factor * TL_DCT_V(comp) ==
               cinfo->max_v_samp_factor * TL_MIN_DCT_V(cinfo))
            continue;
        return 0;
    }
    return 1;
}

/* Output columns to add either side of a column window before jpeg_crop_scanline rounds it
 * out to whole iMCUs, so that every requested column sees the neighbours a full decode's
 * upsampler gives it. Fancy upsampling (a component whose samples each cover r = 2 output
 * columns) makes output column x from its sample i = x / 2 and, for even x, sample i - 1,
 * for odd x sample i + 1; at the window's first and last sample jpeg_crop_scanline's
 * upsampler replicates the edge sample instead of reading its outer neighbour. Window edges
 * are iMCU boundaries, multiples of r. Widened by one column, a window starts at or before
 * x - 1, so (even) at or before x - 2 for an even x: it holds sample i - 1 and its first
 * sample is not i; it ends at or after x + w + 1, so (even) at or after x + w + 2 when the
 * last column x + w - 1 is odd: it holds sample i + 1 and its last sample is not i. Hence
 * r / 2 columns for the largest r of the components (r = 1: none; r > 2 is libjpeg's
 * replicating upsampler, which reads no neighbour, so r / 2 is more than it needs). Not an
 * integer r (libjpeg refuses such files): one whole iMCU, as before. Margin 0 fails
 * tests/native/test_jpeg.py's window tests. At 8/8 on a 4:2:0 file this is 1 column instead
 * of 16, which jpeg_crop_scanline's rounding to 16 makes one iMCU fewer each side in most
 * windows: no IDCT, upsampling or colour conversion for those columns (their Huffman
 * decoding is needed anyway). */
static JDIMENSION tl_crop_margin(j_decompress_ptr cinfo)
{
    JDIMENSION align = (JDIMENSION)TL_MIN_DCT_H(cinfo) * (JDIMENSION)cinfo->max_h_samp_factor;
    JDIMENSION margin = 0;
    int ci;
    for (ci = 0; ci < cinfo->num_components; ci++) {
        jpeg_component_info *comp = &cinfo->comp_info[ci];
        JDIMENSION out = (JDIMENSION)cinfo->max_h_samp_factor * (JDIMENSION)TL_MIN_DCT_H(cinfo);
        JDIMENSION in = (JDIMENSION)comp->h_samp_factor * (JDIMENSION)TL_DCT_H(comp);
        if (in == 0 || out % in != 0)
            return align;
        if (out / in / 2 > margin)
            margin = out / in / 2;
    }
    return margin < align ? margin : align;
}

/* n rows of `width` samples for libjpeg to write and tl_decode_body to copy from, each
 * starting 8 bytes past a 32-byte boundary (in JPOOL_IMAGE, freed with the decompressor).
 * libjpeg-turbo's SIMD colour conversion writes a row that starts on a 16-byte (SSE2) or
 * 32-byte (AVX2) boundary with non-temporal stores, out of the cache, and alloc_sarray's rows
 * all do: the copy right after then read every row back from memory (a column window of a
 * 500 x 375 photograph decoded ~1.2x slower than the whole image, most of it in memcpy). */
static JSAMPARRAY tl_cached_rows(j_decompress_ptr cinfo, JDIMENSION width, JDIMENSION n)
{
    size_t stride = ((size_t)width + 31) & ~(size_t)31;
    JSAMPARRAY rows = (JSAMPARRAY)(*cinfo->mem->alloc_small)((j_common_ptr)cinfo, JPOOL_IMAGE,
                                                             (size_t)n * sizeof(JSAMPROW));
    unsigned char *base = (unsigned char *)(*cinfo->mem->alloc_large)(
        (j_common_ptr)cinfo, JPOOL_IMAGE, stride * n + 64);
    JDIMENSION i;
    base += (8 - ((uintptr_t)base & 31)) & 31;
    for (i = 0; i < n; i++)
        rows[i] = base + (size_t)i * stride;
    return rows;
}

/* The part of tl_decode that may longjmp out; the caller owns setjmp and cleanup. */
static int tl_decode_body(tl_ctx *c, const unsigned char *data, size_t size, int scale_num,
                          int crop_x, int crop_y, int crop_w, int crop_h,
                          unsigned char *out, ptrdiff_t out_stride, size_t out_size,
                          int flags, long long max_pixels, int *col_offset, int whole_rows)
{
    j_decompress_ptr cinfo = &c->cinfo;
    char *errmsg = c->err.errmsg;
    JDIMENSION ow, oh, x, y, w, h, col0, dec_w, row;
    int comps;

    jpeg_mem_src(cinfo, data, (unsigned long)size);
    jpeg_read_header(cinfo, TRUE);

    /* Before jpeg_start_decompress, which allocates buffers proportional to the size. */
    {
        int st = tl_check_limits(c, max_pixels);
        if (st != TL_OK)
            return st;
    }

    switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE:
    case JCS_YCbCr:
    case JCS_RGB:
        cinfo->out_color_space = JCS_RGB;
        break;
    case JCS_CMYK:
    case JCS_YCCK:
        cinfo->out_color_space = JCS_CMYK;
        break;
    default:
        snprintf(errmsg, TL_MSG_LEN,
                 "Unsupported JPEG colour space (%d components) for RGB output",
                 cinfo->num_components);
        return TL_ERR_UNSUPPORTED;
    }
    cinfo->scale_num = (unsigned)scale_num;
    cinfo->scale_denom = 8;
    cinfo->dct_method = (flags & TL_FAST_DCT) ? JDCT_IFAST : JDCT_ISLOW;
    cinfo->do_fancy_upsampling = (flags & TL_NO_FANCY_UPSAMPLING) ? FALSE : TRUE;
    jpeg_calc_output_dimensions(cinfo);
    ow = cinfo->output_width;
    oh = cinfo->output_height;

    /* Re-check the window and the buffer here: memory safety depends on them. */
    if (crop_w == 0 && crop_h == 0) {
        if (crop_x != 0 || crop_y != 0)
            return tl_arg_error(errmsg, "crop_x/crop_y must be 0 when crop_w == crop_h == 0");
        x = 0; y = 0; w = ow; h = oh;
    } else {
        if (crop_x < 0 || crop_y < 0 || crop_w <= 0 || crop_h <= 0 ||
            (long long)crop_x + crop_w > (long long)ow ||
            (long long)crop_y + crop_h > (long long)oh) {
            snprintf(errmsg, TL_MSG_LEN,
                     "crop (%d, %d, %d, %d) is not inside the %u x %u decoded image",
                     crop_x, crop_y, crop_w, crop_h, (unsigned)ow, (unsigned)oh);
            return TL_ERR_ARG;
        }
        x = (JDIMENSION)crop_x; y = (JDIMENSION)crop_y;
        w = (JDIMENSION)crop_w; h = (JDIMENSION)crop_h;
    }
    if (out == NULL)
        return tl_arg_error(errmsg, "out is NULL");
    {
        /* wide mode (col_offset != NULL): rows may hold TL_WIDE_MARGIN more pixels */
        unsigned long long row_px = (unsigned long long)w + (col_offset ? TL_WIDE_MARGIN : 0);
        if ((unsigned long long)out_stride < 3ULL * row_px)
            return tl_arg_error(errmsg, col_offset ? "out_stride is smaller than 3 * (width "
                                "+ TL_WIDE_MARGIN)" : "out_stride is smaller than 3 * width");
        if ((unsigned long long)(h - 1) * (unsigned long long)out_stride + 3ULL * row_px >
            (unsigned long long)out_size)
            return tl_arg_error(errmsg, "out_size is too small for the output window");
    }
    if (col_offset != NULL)
        *col_offset = 0;

    jpeg_start_decompress(cinfo);
    comps = cinfo->output_components;
    if (cinfo->output_width != ow || cinfo->output_height != oh || (comps != 3 && comps != 4)) {
        snprintf(errmsg, TL_MSG_LEN, "libjpeg changed the output geometry unexpectedly");
        jpeg_abort_decompress(cinfo);
        return TL_ERR_DECODE;
    }
    /* jpeg_huffman.c's decoder for a sequential Huffman scan of every component (restart
     * markers or not): faster than libjpeg-turbo's (whose fast path is off for scans with
     * markers), the same coefficients (else tl_decode retries without). */
    if (!(flags & TL_STOCK_HUFFMAN))
        tl_huff_install(c, flags);

    col0 = x;
    /* whole_rows: the image is a restart-interval sub-image, hardly wider than the window;
     * decoding its few extra columns costs less than jpeg_crop_scanline's set-up. */
    if ((x > 0 || w < ow) && !(whole_rows && ow < w + TL_WIDE_MARGIN) &&
        tl_crop_is_exact(cinfo)) {
        /* Fancy upsampling interpolates chroma from the neighbouring column, which
         * jpeg_crop_scanline cuts off at the edges of its window (replicating the edge
         * sample instead). Widen by tl_crop_margin either side so the requested columns
         * see their true neighbours, then copy out only the requested columns. */
        JDIMENSION margin = tl_crop_margin(cinfo);
        JDIMENSION x0 = x > margin ? x - margin : 0;
        JDIMENSION x1 = (ow - (x + w)) > margin ? x + w + margin : ow;
        JDIMENSION cw = x1 - x0;
        jpeg_crop_scanline(cinfo, &x0, &cw);
        if (x0 > x || x0 + cinfo->output_width < x + w) {
            snprintf(errmsg, TL_MSG_LEN, "jpeg_crop_scanline returned a window missing the crop");
            jpeg_abort_decompress(cinfo);
            return TL_ERR_DECODE;
        }
        col0 = x - x0;
    }
    dec_w = cinfo->output_width;

    if (y > 0 && jpeg_skip_scanlines(cinfo, y) != y) {
        snprintf(errmsg, TL_MSG_LEN, "jpeg_skip_scanlines skipped fewer rows than asked");
        jpeg_abort_decompress(cinfo);
        return TL_ERR_DECODE;
    }

    row = 0;
    if (comps == 3 && ((col0 == 0 && dec_w == w) ||
                       (col_offset != NULL && dec_w <= w + TL_WIDE_MARGIN))) {
        /* Decoded rows are exactly the window's, or (wide mode) fit the caller's wider
         * rows: let libjpeg write into `out`, no copy; the window starts at column col0. */
        if (col_offset != NULL)
            *col_offset = (int)col0;
        while (row < h) {
            JSAMPROW rows[TL_ROW_BATCH];
            JDIMENSION n = h - row < TL_ROW_BATCH ? h - row : TL_ROW_BATCH, i, got;
            for (i = 0; i < n; i++)
                rows[i] = out + (ptrdiff_t)(row + i) * out_stride;
            got = jpeg_read_scanlines(cinfo, rows, n);
            if (got == 0)
                break;
            row += got;
        }
    } else {
        /* Freed by jpeg_destroy_decompress on every path (JPOOL_IMAGE). */
        JDIMENSION nb = cinfo->rec_outbuf_height > 0 ? (JDIMENSION)cinfo->rec_outbuf_height : 1;
        JSAMPARRAY tmp = tl_cached_rows(cinfo, dec_w * (JDIMENSION)comps, nb);
        while (row < h) {
            JDIMENSION n = h - row < nb ? h - row : nb, i, got;
            got = jpeg_read_scanlines(cinfo, tmp, n);
            if (got == 0)
                break;
            for (i = 0; i < got; i++) {
                unsigned char *dst = out + (ptrdiff_t)(row + i) * out_stride;
                const JSAMPLE *src = tmp[i] + (size_t)col0 * (size_t)comps;
                if (comps == 4)
                    tl_cmyk_to_rgb(src, dst, w);
                else
                    memcpy(dst, src, (size_t)w * 3);
            }
            row += got;
        }
    }
    if (row < h) {
        snprintf(errmsg, TL_MSG_LEN, "libjpeg returned no scanlines");
        jpeg_abort_decompress(cinfo);
        return TL_ERR_DECODE;
    }

    if (y + h < oh && !tl_ends_with_eoi(data, size)) {
        /* A file that does not end in EOI is probably truncated. Its window decoded, but
         * whether the sample is intact must not depend on where the window fell: entropy-
         * decode the remaining rows (no IDCT or colour work) so truncation is an error. */
        JDIMENSION left = oh - (y + h);
        JSAMPARRAY last;
        /* Skipping to the very end reads nothing (libjpeg just marks EOI reached), so skip
         * all but the last row and decode that one. */
        if (left > 1)
            jpeg_skip_scanlines(cinfo, left - 1);
        last = (*cinfo->mem->alloc_sarray)((j_common_ptr)cinfo, JPOOL_IMAGE,
                                           cinfo->output_width * (JDIMENSION)comps,
                                           cinfo->rec_outbuf_height > 0 ?
                                           (JDIMENSION)cinfo->rec_outbuf_height : 1);
        while (cinfo->output_scanline < oh)
            if (jpeg_read_scanlines(cinfo, last, 1) == 0)
                break;
    }
    if (cinfo->output_scanline == oh)
        jpeg_finish_decompress(cinfo); /* reads to EOI: truncation at the end is an error */
    else
        jpeg_abort_decompress(cinfo);  /* the rest of an intact file is not needed */
    return TL_OK;
}

static int tl_decode_once(const unsigned char *data, size_t size, int scale_num,
                          int crop_x, int crop_y, int crop_w, int crop_h,
                          unsigned char *out, ptrdiff_t out_stride, size_t out_size,
                          int flags, long long max_pixels,
                          char *errmsg, int *n_warnings, char *warnmsg, int *col_offset,
                          int whole_rows)
{
    tl_ctx c;
    char localmsg[TL_MSG_LEN];
    int status;

    if (errmsg == NULL)
        errmsg = localmsg;
    if (n_warnings != NULL)
        *n_warnings = 0;
    if (warnmsg != NULL)
        warnmsg[0] = '\0';
    errmsg[0] = '\0';
    if (scale_num < 1 || scale_num > 8)
        return tl_arg_error(errmsg, "scale_num must be in 1..8");
    if (size > ULONG_MAX)
        return tl_arg_error(errmsg, "input larger than libjpeg can address");

    tl_ctx_init(&c, errmsg, warnmsg, (flags & TL_STRICT) != 0);
    if (setjmp(c.err.jb)) {
        /* Only memory (c), never registers, is read after the longjmp. */
        jpeg_destroy_decompress(&c.cinfo);
        if (n_warnings != NULL)
            *n_warnings = c.err.n_warnings;
        return c.err.status;
    }
    jpeg_create_decompress(&c.cinfo);
    c.cinfo.progress = &c.progress;
    status = tl_decode_body(&c, data, size, scale_num, crop_x, crop_y, crop_w, crop_h,
                            out, out_stride, out_size, flags, max_pixels, col_offset,
                            whole_rows);
    jpeg_destroy_decompress(&c.cinfo);
    if (n_warnings != NULL)
        *n_warnings = c.err.n_warnings;
    return status;
}

/* tl_decode_once, and again with libjpeg's own Huffman decoder where jpeg_huffman.c's met
 * data that libjpeg would warn about or recover from (its warnings, errors and pixels are
 * then exactly libjpeg's). */
int tl_decode(const unsigned char *data, size_t size, int scale_num,
              int crop_x, int crop_y, int crop_w, int crop_h,
              unsigned char *out, ptrdiff_t out_stride, size_t out_size,
              int flags, long long max_pixels,
              char *errmsg, int *n_warnings, char *warnmsg, int *col_offset,
              int whole_rows)
{
    int status = tl_decode_once(data, size, scale_num, crop_x, crop_y, crop_w, crop_h, out,
                                out_stride, out_size, flags, max_pixels, errmsg, n_warnings,
                                warnmsg, col_offset, whole_rows);
    if (status == TL_RETRY_STOCK && !(flags & TL_STOCK_HUFFMAN))
        status = tl_decode_once(data, size, scale_num, crop_x, crop_y, crop_w, crop_h, out,
                                out_stride, out_size, flags | TL_STOCK_HUFFMAN, max_pixels,
                                errmsg, n_warnings, warnmsg, col_offset, whole_rows);
    return status;
}

int tl_jpeg_decode(const unsigned char *data, size_t size, int scale_num,
                   int crop_x, int crop_y, int crop_w, int crop_h,
                   unsigned char *out, ptrdiff_t out_stride, size_t out_size,
                   int flags, long long max_pixels,
                   char *errmsg, int *n_warnings, char *warnmsg)
{
    return tl_decode(data, size, scale_num, crop_x, crop_y, crop_w, crop_h, out, out_stride,
                     out_size, flags, max_pixels, errmsg, n_warnings, warnmsg, NULL, 0);
}

int tl_jpeg_decode_wide(const unsigned char *data, size_t size, int scale_num,
                        int crop_x, int crop_y, int crop_w, int crop_h,
                        unsigned char *out, ptrdiff_t out_stride, size_t out_size,
                        int flags, long long max_pixels,
                        char *errmsg, int *n_warnings, char *warnmsg, int *col_offset)
{
    int local = 0;
    return tl_decode(data, size, scale_num, crop_x, crop_y, crop_w, crop_h, out, out_stride,
                     out_size, flags, max_pixels, errmsg, n_warnings, warnmsg,
                     col_offset != NULL ? col_offset : &local, 0);
}
