/*
 * jpeg_internal.h -- what jpeg_shim.c shares with jpeg_transcode.c and
 * jpeg_huffman.c: the error manager and
 * decompressor context (libjpeg's types, so never cimported from Cython; jpeg_shim.h is the
 * public contract), and the helpers both files call. Not part of the API.
 */
#ifndef TURBOLOADER_JPEG_INTERNAL_H
#define TURBOLOADER_JPEG_INTERNAL_H

#include <setjmp.h>
#include <stddef.h>
#include <stdio.h>

#include <jpeglib.h>

#include "jpeg_shim.h"

typedef struct {
    struct jpeg_error_mgr pub; /* first member: libjpeg's cinfo->err points here */
    jmp_buf jb;
    int status;                /* TL_ERR_* for the longjmp path */
    int strict;
    int n_warnings;
    char *errmsg;              /* TL_MSG_LEN bytes, never NULL */
    char *warnmsg;             /* TL_MSG_LEN bytes or NULL */
} tl_err;

typedef struct {
    struct jpeg_decompress_struct cinfo;
    tl_err err;
    struct jpeg_progress_mgr progress;   /* cinfo.progress points here (see tl_ctx_of) */
    long long blocks;                    /* coefficient blocks of a progressive image */
    long long max_work;                  /* > 0: limit on scans x blocks (TL_ERR_TOO_MUCH_WORK) */
    void *huff;                          /* jpeg_huffman.c's state while it decodes the scan */
} tl_ctx;

/* Internal status (never returned by the public functions): jpeg_huffman.c met data that
 * libjpeg's own decoder would warn about or recover from; tl_decode decodes again with
 * TL_STOCK_HUFFMAN. */
#define TL_RETRY_STOCK -100

/* Ends the call: longjmp to the caller's setjmp with status (a TL_ERR_* code). */
void tl_fail(j_common_ptr cinfo, int status);
/* Everything but jpeg_create_decompress, which must come after the caller's setjmp. */
void tl_ctx_init(tl_ctx *c, char *errmsg, char *warnmsg, int strict);
/* TL_ERR_ARG, with msg in errmsg. */
int tl_arg_error(char *errmsg, const char *msg);
/* The pixel limit, and for progressive files the lower limit and the work budget; after
 * jpeg_read_header, before anything allocates image-sized buffers. */
int tl_check_limits(tl_ctx *c, long long max_pixels);
/* Whether the data's last bytes are an EOI marker (FF D9), as an intact file's are. */
int tl_ends_with_eoi(const unsigned char *data, size_t size);
/* After jpeg_start_decompress: decode the scan's entropy-coded data with jpeg_huffman.c's
 * decoder instead of libjpeg's when it is a sequential Huffman scan of every component
 * (with or without restart markers) of at least TL_HUFF_MIN_BLOCKS blocks (1: installed,
 * 2: its BMI2 build installed, as flags' TL_HUFF_BMI2 asks; 0: libjpeg's decoder stays). */
int tl_huff_install(tl_ctx *c, int flags);
/* One decode with its own setjmp (tl_jpeg_decode / _wide; whole_rows: see jpeg_shim.c). */
int tl_decode(const unsigned char *data, size_t size, int scale_num,
              int crop_x, int crop_y, int crop_w, int crop_h,
              unsigned char *out, ptrdiff_t out_stride, size_t out_size,
              int flags, long long max_pixels,
              char *errmsg, int *n_warnings, char *warnmsg, int *col_offset,
              int whole_rows);

#endif
