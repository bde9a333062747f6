/*
 * jpeg_transcode.c -- the restart-interval code of the JPEG shim: the window decode that
 * decodes only the restart intervals covering a crop (tl_jpeg_restart_window,
 * tl_jpeg_decode_rst, tl_jpeg_decode_wide_rst) and the lossless transcode that writes
 * restart intervals into a JPEG (tl_jpeg_transcode_restart). Same contract as jpeg_shim.c
 * (see jpeg_shim.h): no globals, status codes, libjpeg's errors caught by a setjmp in this
 * file.
 */
#include <limits.h>
#include <stdlib.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "jpeg_shim.h"
#include "jpeg_internal.h"

/* ---- restart-interval window decode ---------------------------------------------------- */

static unsigned tl_be16(const unsigned char *p)
{
    return ((unsigned)p[0] << 8) | p[1];
}

/* What the restart path needs from a file's markers. */
typedef struct {
    long long width, height;
    int ncomp;
    int hs[4], vs[4];
    int hmax, vmax;
    long long restart;        /* MCUs per interval (DRI) */
    size_t scan_pos;          /* first byte of the entropy-coded data */
    long long mcu_w, mcu_h;   /* full-resolution pixels */
    long long mpr, mrows;     /* MCUs per row, MCU rows */
} tl_rst_layout;

/* Walks the markers up to SOS; 1 when the file is one baseline Huffman scan of every
 * component with restart markers, *L filled; 0 for anything else (or malformed). */
static int tl_rst_parse(const unsigned char *d, size_t size, tl_rst_layout *L)
{
    size_t p = 2;
    int have_sof = 0, ci;
    memset(L, 0, sizeof(*L));
    if (size < 4 || d[0] != 0xFF || d[1] != 0xD8)
        return 0;
    for (;;) {
        unsigned m, len;
        if (p + 4 > size || d[p] != 0xFF)
            return 0;
        while (p + 1 < size && d[p + 1] == 0xFF)
            p++;                               /* fill bytes */
        if (p + 4 > size)
            return 0;
        m = d[p + 1];
        if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7) || m == 0xD9 || m == 0x00)
            return 0;
        len = tl_be16(d + p + 2);
        if (len < 2 || p + 2 + len > size)
            return 0;
        if (m == 0xC0 || m == 0xC1) {          /* baseline / extended sequential Huffman */
            const unsigned char *q = d + p + 4;
            if (have_sof || len < 8 || q[0] != 8)
                return 0;
            L->height = tl_be16(q + 1);
            L->width = tl_be16(q + 3);
            L->ncomp = q[5];
            if (L->ncomp < 1 || L->ncomp > 4 || len != 8 + 3u * (unsigned)L->ncomp ||
                L->width <= 0 || L->height <= 0)
                return 0;
            L->hmax = L->vmax = 1;
            for (ci = 0; ci < L->ncomp; ci++) {
                L->hs[ci] = q[7 + 3 * ci] >> 4;
                L->vs[ci] = q[7 + 3 * ci] & 15;
                if (L->hs[ci] < 1 || L->hs[ci] > 4 || L->vs[ci] < 1 || L->vs[ci] > 4)
                    return 0;
                if (L->hs[ci] > L->hmax) L->hmax = L->hs[ci];
                if (L->vs[ci] > L->vmax) L->vmax = L->vs[ci];
            }
            have_sof = 1;
        } else if ((m >= 0xC2 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) ||
                   m == 0xDC) {
            return 0;                          /* progressive, lossless, arithmetic; DNL */
        } else if (m == 0xDD) {
            if (len != 4)
                return 0;
            L->restart = tl_be16(d + p + 4);
        } else if (m == 0xDA) {
            if (!have_sof || len < 3 || d[p + 4] != L->ncomp || L->restart <= 0)
                return 0;
            L->scan_pos = p + 2 + len;
            break;
        }
        p += 2 + len;
    }
    if (L->ncomp == 1) {                       /* non-interleaved: an MCU is one block */
        L->mcu_w = L->mcu_h = 8;
        L->hmax = L->hs[0];
        L->vmax = L->vs[0];
    } else {
        L->mcu_w = 8LL * L->hmax;
        L->mcu_h = 8LL * L->vmax;
    }
    L->mpr = (L->width + L->mcu_w - 1) / L->mcu_w;
    L->mrows = (L->height + L->mcu_h - 1) / L->mcu_h;
    return 1;
}

/* The intervals a window needs: MCU columns [c0, c1) and rows [r0, r1) of the file, all
 * whole intervals. g > 0: intervals are g whole rows (c0 = 0, c1 = mpr). */
typedef struct {
    long long c0, c1, r0, r1;
    long long g;               /* intervals of g whole rows, else 0 */
    long long ipr, ia, ib;     /* else: ipr intervals per row, columns [ia, ib) of them */
    long long total, last;     /* intervals in the file; index of the last one selected */
} tl_rst_plan;

static int tl_rst_make_plan(const tl_rst_layout *L, int k, long long x, long long y,
                            long long w, long long h, tl_rst_plan *P)
{
    long long mws = L->mcu_w * k / 8, mhs = L->mcu_h * k / 8;
    long long ow = (L->width * k + 7) / 8, oh = (L->height * k + 7) / 8;
    long long R = L->restart, c0, c1, r0, r1, sub, base;
    int ci, mh = 0, mv = 0;
    memset(P, 0, sizeof(*P));
    if (k < 1 || k > 8 || R <= 0 || w <= 0 || h <= 0 || x < 0 || y < 0 || x + w > ow ||
        y + h > oh)
        return 0;
    /* Context for the chroma upsampler: fancy upsampling interpolates each output pixel
     * from the nearest chroma samples on both sides, so the window's pixels depend on the
     * decoded image up to one chroma sample (hmax / h output pixels; twice that here)
     * beyond its edges. Where chroma is not subsampled there is no dependency, and at DCT
     * scales where libjpeg scales chroma up in the IDCT instead, less. */
    for (ci = 0; ci < L->ncomp && L->ncomp > 1; ci++) {
        int rh = (L->hmax + L->hs[ci] - 1) / L->hs[ci];
        int rv = (L->vmax + L->vs[ci] - 1) / L->vs[ci];
        if (rh > 1 && 2 * rh > mh) mh = 2 * rh;
        if (rv > 1 && 2 * rv > mv) mv = 2 * rv;
    }
    c0 = x > mh ? (x - mh) / mws : 0;
    c1 = (x + w + mh + mws - 1) / mws;
    r0 = y > mv ? (y - mv) / mhs : 0;
    r1 = (y + h + mv + mhs - 1) / mhs;
    if (c1 > L->mpr) c1 = L->mpr;
    if (r1 > L->mrows) r1 = L->mrows;
    P->total = (L->mpr * L->mrows + R - 1) / R;
    if (L->mpr % R == 0) {
        P->ipr = L->mpr / R;
        P->ia = c0 / R;
        P->ib = (c1 + R - 1) / R;
        c0 = P->ia * R;
        c1 = P->ib * R;
        P->last = (r1 - 1) * P->ipr + P->ib - 1;
    } else if (R % L->mpr == 0) {
        P->g = R / L->mpr;
        c0 = 0; c1 = L->mpr;
        r0 = r0 / P->g * P->g;
        r1 = (r1 + P->g - 1) / P->g * P->g;
        if (r1 > L->mrows) r1 = L->mrows;
        P->last = (r1 - 1) / P->g;
    } else {
        return 0;                              /* intervals wrap rows */
    }
    P->c0 = c0; P->c1 = c1; P->r0 = r0; P->r1 = r1;
    if (P->last >= P->total)
        return 0;
    /* Worth it only when it skips a good share of the intervals the unchanged path would
     * entropy-decode (every row down to the window's bottom, full width). */
    sub = (c1 - c0) * (r1 - r0);
    base = L->mpr * ((y + h + mhs - 1) / mhs);
    if (sub * 10 > base * 9)
        return 0;
    return 1;
}

static int tl_rst_selected(const tl_rst_plan *P, long long i)
{
    if (P->g > 0)
        return i * P->g >= P->r0 && i * P->g < P->r1;
    {
        long long row = i / P->ipr, col = i % P->ipr;
        return row >= P->r0 && row < P->r1 && col >= P->ia && col < P->ib;
    }
}

/* The sub-image's size in full-resolution pixels. */
static void tl_rst_sub(const tl_rst_layout *L, const tl_rst_plan *P, long long sub[4])
{
    long long x1 = P->c1 * L->mcu_w, y1 = P->r1 * L->mcu_h;
    sub[0] = P->c0 * L->mcu_w;
    sub[1] = P->r0 * L->mcu_h;
    sub[2] = (x1 < L->width ? x1 : L->width) - sub[0];
    sub[3] = (y1 < L->height ? y1 : L->height) - sub[1];
}

/* Writes the sub-image's JPEG into out[0, cap): the header (SOI up to SOS, without APP1-13,
 * APP15 and COM segments, SOF resized), the selected intervals with RST markers renumbered,
 * EOI. Returns its size, or 0 when the data is not exactly what the header promises (the
 * caller then takes the unchanged path, which reports corruption as usual). */
static size_t tl_rst_build(const unsigned char *d, size_t size, const tl_rst_layout *L,
                           const tl_rst_plan *P, unsigned char *out, size_t cap)
{
    size_t p = 2, o = 0, start;
    long long sub[4], i, nsel = 0;
    tl_rst_sub(L, P, sub);
    if (cap < 4)
        return 0;
    out[o++] = 0xFF; out[o++] = 0xD8;
    while (p < L->scan_pos) {
        unsigned m, len;
        while (d[p + 1] == 0xFF)
            p++;
        m = d[p + 1];
        len = tl_be16(d + p + 2);
        if (!((m >= 0xE1 && m <= 0xED) || m == 0xEF || m == 0xFE)) {
            if (o + 2 + len > cap)
                return 0;
            memcpy(out + o, d + p, 2 + (size_t)len);
            if (m == 0xC0 || m == 0xC1) {
                out[o + 5] = (unsigned char)(sub[3] >> 8); out[o + 6] = (unsigned char)sub[3];
                out[o + 7] = (unsigned char)(sub[2] >> 8); out[o + 8] = (unsigned char)sub[2];
            }
            o += 2 + (size_t)len;
        }
        p += 2 + len;
    }
    /* Entropy-coded data: interval i ends at the first marker after its start that is not
     * a stuffed 0xFF00 (fill 0xFFs before it belong to the interval, harmlessly). */
    start = p = L->scan_pos;
    for (i = 0; i <= P->last; i++) {
        const unsigned char *q;
        size_t e;
        unsigned m;
        for (;;) {
            q = memchr(d + p, 0xFF, size - p);
            if (q == NULL || (size_t)(q - d) + 1 >= size)
                return 0;
            e = (size_t)(q - d);
            m = d[e + 1];
            if (m == 0x00) { p = e + 2; continue; }
            if (m == 0xFF) { p = e + 1; continue; }
            break;
        }
        /* interval i must end in RST(i mod 8), the file's last one in EOI */
        if (i + 1 < P->total ? m != 0xD0u + (unsigned)(i & 7) : m != 0xD9)
            return 0;
        if (tl_rst_selected(P, i)) {
            if (o + (e - start) + 4 > cap)
                return 0;
            if (nsel > 0) {
                out[o++] = 0xFF;
                out[o++] = (unsigned char)(0xD0 + ((nsel - 1) & 7));
            }
            memcpy(out + o, d + start, e - start);
            o += e - start;
            nsel++;
        }
        start = p = e + 2;
    }
    out[o++] = 0xFF; out[o++] = 0xD9;
    return o;
}

int tl_jpeg_restart_window(const unsigned char *data, size_t size, int scale_num,
                           int crop_x, int crop_y, int crop_w, int crop_h, int sub[4])
{
    tl_rst_layout L;
    tl_rst_plan P;
    long long s[4];
    if (sub == NULL || data == NULL || !tl_ends_with_eoi(data, size) ||
        !tl_rst_parse(data, size, &L) ||
        !tl_rst_make_plan(&L, scale_num, crop_x, crop_y, crop_w, crop_h, &P))
        return 0;
    tl_rst_sub(&L, &P, s);
    sub[0] = (int)s[0]; sub[1] = (int)s[1]; sub[2] = (int)s[2]; sub[3] = (int)s[3];
    return 1;
}

/* tl_decode, through the restart path when it applies. */
static int tl_decode_any(const unsigned char *data, size_t size, int scale_num,
                         int crop_x, int crop_y, int crop_w, int crop_h,
                         unsigned char *out, ptrdiff_t out_stride, size_t out_size,
                         int flags, long long max_pixels,
                         char *errmsg, int *n_warnings, char *warnmsg, int *col_offset,
                         unsigned char *scratch, size_t scratch_size, int *used)
{
    tl_rst_layout L;
    tl_rst_plan P;
    if (used != NULL)
        *used = 0;
    if (scratch != NULL && data != NULL && crop_w > 0 && crop_h > 0 &&
        scale_num >= 1 && scale_num <= 8 && size <= ULONG_MAX &&
        scratch_size >= TL_RST_SCRATCH(size) && tl_ends_with_eoi(data, size) &&
        tl_rst_parse(data, size, &L) &&
        !(max_pixels > 0 && L.width * L.height > max_pixels) &&
        tl_rst_make_plan(&L, scale_num, crop_x, crop_y, crop_w, crop_h, &P)) {
        size_t n = tl_rst_build(data, size, &L, &P, scratch, scratch_size);
        if (n > 0) {
            long long sub[4];
            tl_rst_sub(&L, &P, sub);
            if (used != NULL)
                *used = 1;
            /* sub[0], sub[1] are multiples of the MCU size: exact at every scale */
            return tl_decode(scratch, n, scale_num, crop_x - (int)(sub[0] * scale_num / 8),
                             crop_y - (int)(sub[1] * scale_num / 8), crop_w, crop_h, out,
                             out_stride, out_size, flags, max_pixels, errmsg, n_warnings,
                             warnmsg, col_offset, 1);
        }
    }
    return tl_decode(data, size, scale_num, crop_x, crop_y, crop_w, crop_h, out, out_stride,
                     out_size, flags, max_pixels, errmsg, n_warnings, warnmsg, col_offset, 0);
}

int tl_jpeg_decode_rst(const unsigned char *data, size_t size, int scale_num,
                       int crop_x, int crop_y, int crop_w, int crop_h,
                       unsigned char *out, ptrdiff_t out_stride, size_t out_size,
                       int flags, long long max_pixels,
                       char *errmsg, int *n_warnings, char *warnmsg,
                       unsigned char *scratch, size_t scratch_size, int *used)
{
    return tl_decode_any(data, size, scale_num, crop_x, crop_y, crop_w, crop_h, out,
                         out_stride, out_size, flags, max_pixels, errmsg, n_warnings, warnmsg,
                         NULL, scratch, scratch_size, used);
}

int tl_jpeg_decode_wide_rst(const unsigned char *data, size_t size, int scale_num,
                            int crop_x, int crop_y, int crop_w, int crop_h,
                            unsigned char *out, ptrdiff_t out_stride, size_t out_size,
                            int flags, long long max_pixels,
                            char *errmsg, int *n_warnings, char *warnmsg, int *col_offset,
                            unsigned char *scratch, size_t scratch_size, int *used)
{
    int local = 0;
    return tl_decode_any(data, size, scale_num, crop_x, crop_y, crop_w, crop_h, out,
                         out_stride, out_size, flags, max_pixels, errmsg, n_warnings, warnmsg,
                         col_offset != NULL ? col_offset : &local, scratch, scratch_size, used);
}

/* ---- lossless transcode to restart intervals ----------------------------------------- */

typedef struct {
    struct jpeg_destination_mgr pub;
    unsigned char *buf;
    size_t cap;
} tl_dest;

static void tl_dest_init(j_compress_ptr cinfo)
{
    tl_dest *d = (tl_dest *)cinfo->dest;
    d->pub.next_output_byte = d->buf;
    d->pub.free_in_buffer = d->cap;
}

static boolean tl_dest_full(j_compress_ptr cinfo)
{
    tl_err *err = (tl_err *)cinfo->err;
    snprintf(err->errmsg, TL_MSG_LEN, "transcoded JPEG does not fit the %zu-byte output buffer",
             ((tl_dest *)cinfo->dest)->cap);
    tl_fail((j_common_ptr)cinfo, TL_ERR_OUTPUT_FULL);
    return FALSE;
}

static void tl_dest_term(j_compress_ptr cinfo)
{
    (void)cinfo;
}

/* Bytes one restart interval adds, about: the RST marker, the padding to a byte boundary,
 * and the DC differences coded from zero again (measured ~4.7 on photographs). */
#define TL_RST_COST 5
/* How much larger than the input an automatically chosen interval may make the output. */
#define TL_RST_BUDGET_PERCENT 3

/* The smallest divisor of mcus_per_row (so intervals never wrap a row, and crops are cut as
 * finely as possible) whose markers fit `budget` bytes; the whole row when none does. */
static long long tl_pick_restart(long long mpr, long long mrows, long long budget)
{
    long long d;
    for (d = 1; d < mpr && d <= 65535; d++)
        if (mpr % d == 0 && TL_RST_COST * ((mpr / d) * mrows) <= budget)
            return d;
    return mpr;
}

typedef struct {
    tl_ctx c;                                  /* the decompressor and the shared error mgr */
    struct jpeg_compress_struct dst;
    tl_dest dest;
    int dst_created;
} tl_tc_ctx;

/* One transcode; restart_mcus 0: whole rows. *mpr and *mrows: the MCU grid. */
static int tl_transcode_body(tl_tc_ctx *t, const unsigned char *data, size_t size,
                             int restart_mcus, int optimize, long long max_pixels,
                             size_t *out_size, int *restart_used, long long *mpr_out,
                             long long *mrows_out)
{
    j_decompress_ptr src = &t->c.cinfo;
    j_compress_ptr dst = &t->dst;
    jvirt_barray_ptr *coefs;
    jpeg_saved_marker_ptr mk;
    long long mcu_w, mcu_h, mpr, mrows;
    int st, m;

    jpeg_mem_src(src, data, (unsigned long)size);
    jpeg_save_markers(src, JPEG_COM, 0xFFFF);
    for (m = 0; m < 16; m++)
        jpeg_save_markers(src, JPEG_APP0 + m, 0xFFFF);
    jpeg_read_header(src, TRUE);
    st = tl_check_limits(&t->c, max_pixels);
    if (st != TL_OK)
        return st;
    coefs = jpeg_read_coefficients(src);

    jpeg_copy_critical_parameters(src, dst);
    dst->optimize_coding = optimize ? TRUE : FALSE;
    mcu_w = src->num_components == 1 ? 8 : 8LL * src->max_h_samp_factor;
    mcu_h = src->num_components == 1 ? 8 : 8LL * src->max_v_samp_factor;
    mpr = ((long long)src->image_width + mcu_w - 1) / mcu_w;
    mrows = ((long long)src->image_height + mcu_h - 1) / mcu_h;
    *mpr_out = mpr;
    *mrows_out = mrows;
    if (mpr > 65535 && restart_mcus == 0) {
        snprintf(t->c.err.errmsg, TL_MSG_LEN, "image too wide for a restart interval per row");
        return TL_ERR_UNSUPPORTED;
    }
    dst->restart_interval = restart_mcus > 0 ? (unsigned)restart_mcus : (unsigned)mpr;
    if (restart_used != NULL)
        *restart_used = (int)dst->restart_interval;
    jpeg_write_coefficients(dst, coefs);
    /* what jpegtran -copy all writes: every saved marker but the JFIF / Adobe ones that
     * libjpeg has just written itself */
    for (mk = src->marker_list; mk != NULL; mk = mk->next) {
        if (dst->write_JFIF_header && mk->marker == JPEG_APP0 && mk->data_length >= 5 &&
            memcmp(mk->data, "JFIF", 5) == 0)
            continue;
        if (dst->write_Adobe_marker && mk->marker == JPEG_APP0 + 14 &&
            mk->data_length >= 5 && memcmp(mk->data, "Adobe", 5) == 0)
            continue;
        jpeg_write_marker(dst, mk->marker, mk->data, mk->data_length);
    }
    jpeg_finish_compress(dst);
    jpeg_finish_decompress(src);
    *out_size = t->dest.cap - t->dest.pub.free_in_buffer;
    return TL_OK;
}

static int tl_transcode_once(const unsigned char *data, size_t size, int restart_mcus,
                             int optimize, unsigned char *out, size_t out_cap,
                             size_t *out_size, int *restart_used, long long max_pixels,
                             char *errmsg, long long *mpr, long long *mrows)
{
    tl_tc_ctx t;
    char localmsg[TL_MSG_LEN];
    int status;

    if (errmsg == NULL)
        errmsg = localmsg;
    *out_size = 0;
    memset(&t, 0, sizeof(t));
    /* strict: a warning means corrupt data, which a rewrite must not bake in */
    tl_ctx_init(&t.c, errmsg, NULL, 1);
    if (setjmp(t.c.err.jb)) {
        if (t.dst_created)
            jpeg_destroy_compress(&t.dst);
        jpeg_destroy_decompress(&t.c.cinfo);
        *out_size = 0;
        return t.c.err.status;
    }
    jpeg_create_decompress(&t.c.cinfo);
    t.c.cinfo.progress = &t.c.progress;
    t.dst.err = &t.c.err.pub;
    jpeg_create_compress(&t.dst);
    t.dst_created = 1;
    t.dest.buf = out;
    t.dest.cap = out_cap;
    t.dest.pub.init_destination = tl_dest_init;
    t.dest.pub.empty_output_buffer = tl_dest_full;
    t.dest.pub.term_destination = tl_dest_term;
    t.dst.dest = &t.dest.pub;
    status = tl_transcode_body(&t, data, size, restart_mcus, optimize, max_pixels, out_size,
                               restart_used, mpr, mrows);
    jpeg_destroy_compress(&t.dst);
    jpeg_destroy_decompress(&t.c.cinfo);
    return status;
}

int tl_jpeg_transcode_restart(const unsigned char *data, size_t size, int restart_mcus,
                              int optimize, unsigned char *out, size_t out_cap,
                              size_t *out_size, int *restart_used, long long max_pixels,
                              char *errmsg)
{
    char localmsg[TL_MSG_LEN];
    long long mpr = 0, mrows = 0, budget, d;
    int status;

    if (errmsg == NULL)
        errmsg = localmsg;
    errmsg[0] = '\0';
    if (out_size == NULL || out == NULL || out_cap == 0)
        return tl_arg_error(errmsg, "no output buffer");
    *out_size = 0;
    if (restart_used != NULL)
        *restart_used = 0;
    if (restart_mcus < 0 || restart_mcus > 65535)
        return tl_arg_error(errmsg, "restart_mcus must be in 0..65535");
    if (size > ULONG_MAX)
        return tl_arg_error(errmsg, "input larger than libjpeg can address");
    if (restart_mcus > 0)
        return tl_transcode_once(data, size, restart_mcus, optimize, out, out_cap, out_size,
                                 restart_used, max_pixels, errmsg, &mpr, &mrows);
    /* Automatic: first whole-row intervals (almost free), which also measures what the
     * optimized tables saved; then the finest interval whose markers the rest of the budget
     * pays for, so the output stays within TL_RST_BUDGET_PERCENT of the input. */
    status = tl_transcode_once(data, size, 0, optimize, out, out_cap, out_size, restart_used,
                               max_pixels, errmsg, &mpr, &mrows);
    if (status != TL_OK)
        return status;
    budget = (long long)size + (long long)size * TL_RST_BUDGET_PERCENT / 100
             - (long long)*out_size + TL_RST_COST * mrows;   /* the rows' markers are paid */
    d = tl_pick_restart(mpr, mrows, budget);
    if (d >= mpr)
        return TL_OK;
    return tl_transcode_once(data, size, (int)d, optimize, out, out_cap, out_size,
                             restart_used, max_pixels, errmsg, &mpr, &mrows);
}
