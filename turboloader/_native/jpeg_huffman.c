/*
 * jpeg_huffman.c -- turboloader's own Huffman decoder for baseline/extended sequential JPEG
 * scans that hold every component (one interleaved scan, or the one scan of a greyscale
 * file), with or without restart markers: the ordinary camera/web JPEG, what
 * `convert --seekable` writes, and what the restart-interval window decodes.
 *
 * Why: libjpeg-turbo keeps its fast Huffman path off for every MCU of a scan that has restart
 * markers (jdhuff.c, decode_mcu: usefast = 0), so those files entropy-decode through its
 * slow, bit-at-a-time path (the profile of the seekable train and val steps put it at ~40%
 * of their CPU time); on scans without markers its fast path runs, and this decoder is still
 * faster (it unstuffs the scan's bytes once, then reads 64 bits at a time with a table that
 * decodes up to two AC codes with their values, or a value and the end of block, per lookup;
 * the loop is bound by the chain lookup -> shift of the bit buffer, so two symbols per link
 * is what makes it faster). It replaces libjpeg's decode_mcu for such a scan (after
 * jpeg_start_decompress, through the entropy module's function pointer) and hands libjpeg
 * the same coefficient blocks, so its IDCT, upsampling and colour conversion run unchanged;
 * jpeg_skip_scanlines and jpeg_crop_scanline call the same decode_mcu (with NULL blocks when
 * skipping; every MCU of a row when cropping), so windows decode as they do with libjpeg's.
 *
 * Exactness: coefficients are written exactly as jdhuff.c's decode_mcu_slow writes them
 * (DC prediction in int, the same natural-order table with its 16 guard entries, DC and AC
 * only where libjpeg needs them). Wherever libjpeg would warn or recover instead (a code
 * that matches nothing, bits running out before an MCU ends, bytes left over before a
 * marker, a missing or misnumbered RST marker, a marker where data should be) this decoder
 * does not try to imitate it: it ends the decode with TL_RETRY_STOCK, and tl_decode decodes
 * the same bytes again with libjpeg's own decoder (TL_STOCK_HUFFMAN). So every file decodes
 * to libjpeg's pixels, warnings and errors, corrupt ones included. (A retry can also happen
 * where libjpeg would not warn -- e.g. a few bytes of junk after the scan that its bit buffer
 * swallowed -- which costs time, never pixels.)
 *
 * Two builds of the decoder: the portable one, and one with BMI2 (TL_HUFF_BMI2, where the CPU
 * has it), whose SHLX/SHRX shift the bit buffer by a register count without the flag-merging
 * uops of SHL/SHR by CL on the lookup -> shift chain (about 2% of the train and val steps).
 *
 * The state of a decode lives in libjpeg's JPOOL_IMAGE pool of the decompressor (freed by
 * jpeg_abort/destroy_decompress on every path); the only other state is each thread's cache
 * of built tables (tl_hcache, below), read and written by that thread alone.
 */
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "jpeg_shim.h"
#include "jpeg_internal.h"
#include "simd.h"

/* libjpeg's entropy-decoder module (jpegint.h, not installed by every libjpeg-turbo; the
 * layout has not changed since IJG 6b). */
struct jpeg_entropy_decoder {
    void (*start_pass)(j_decompress_ptr cinfo);
    boolean (*decode_mcu)(j_decompress_ptr cinfo, JBLOCKROW *MCU_data);
    boolean insufficient_data;
};

#if JPEG_LIB_VERSION >= 70
#define TL_DCT_SCALED_SIZE(c) ((c)->DCT_h_scaled_size)
#else
#define TL_DCT_SCALED_SIZE(c) ((c)->DCT_scaled_size)
#endif

#define TL_LOOKUP_BITS 10
/* fast_ac entries (uint64): one or two AC symbols, codes and values, within TL_LOOKUP_BITS bits:
 *   bits 0-5    bits of all of them (the shift: x86 masks a 64-bit shift count to 6 bits, so
 *               `acc << (f & 63)` is one instruction on the decoder's critical chain)
 *   bits 8-11   run of the first symbol (coefficients skipped before its value)
 *   bits 12-16  k advance to the second value: its run + 1 (0: none; the first value is then
 *               stored again at the same place)
 *   bit 20      two symbols (TL_FAST_PAIR), bit 21 the block ends with them (TL_FAST_EOB)
 *   bits 24-29  bits of the first symbol alone (when the block ends after it, see the loop)
 *   bits 32-47  the first value, bits 48-63 the second (int16; 0 for an end of block) */
#define TL_FAST_PAIR (1ULL << 20)
#define TL_FAST_EOB (1ULL << 21)
#if defined(__GNUC__) || defined(__clang__)
#define TL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define TL_UNLIKELY(x) (x)
#endif
/* Scans of fewer blocks stay with libjpeg's decoder: building the tables (~6 us) costs more
 * than the faster decoding saves on them (a 32 x 43 4:2:0 image, 36 blocks: 0.73x; 144 blocks:
 * 1.03x; 840 blocks: 1.15x, one thread). */
#define TL_HUFF_MIN_BLOCKS 256
/* Zero bytes after a segment's data: a block reads at most 64 codes of 16 bits plus 64
 * values of 16 bits (256 bytes) before the bit count is checked, and a load reads 8. */
#define TL_SEG_PAD 320

/* jdhuff.c's natural order, with its 16 guard entries (corrupt run lengths land on 63). */
static const int tl_natural_order[DCTSIZE2 + 16] = {
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5,
    12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7, 14, 21, 28,
    35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
    58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
    63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63
};

/* One Huffman table: codes of up to TL_LOOKUP_BITS bits by lookup, longer ones canonically. */
typedef struct {
    uint16_t look[1 << TL_LOOKUP_BITS];  /* (length << 8) | symbol; 0: longer code */
    int32_t maxcode[18];                  /* largest code of length l, -1 if none; [17] sentinel */
    int32_t valoff[17];                   /* symbol index of code c of length l: c + valoff[l] */
    uint8_t huffval[256];
    /* AC tables: codes and values together (layout above), 0: take the slow steps */
    uint64_t fast_ac[1 << TL_LOOKUP_BITS];
} tl_htab;

typedef struct {
    const tl_htab *dc[D_MAX_BLOCKS_IN_MCU], *ac[D_MAX_BLOCKS_IN_MCU];
    int ci[D_MAX_BLOCKS_IN_MCU];          /* scan component of each block */
    int dc_needed[D_MAX_BLOCKS_IN_MCU], ac_needed[D_MAX_BLOCKS_IN_MCU];
    int last_dc[MAX_COMPS_IN_SCAN];
    unsigned restarts_to_go, next_restart;
    long long mcus_left;                  /* MCUs of the scan not yet decoded */
    /* the input: [src, src_end) of the caller's bytes; the segment being decoded, unstuffed */
    const unsigned char *src, *src_end;
    unsigned char *seg;                   /* capacity: the scan's bytes + TL_SEG_PAD */
    size_t seg_len;                       /* data bytes in seg */
    size_t bitpos;                        /* bits of seg consumed */
    int marker;                           /* the marker after the segment */
    const unsigned char *marker_at;       /* its 0xFF (fill bytes before it skipped) */
    int started;
} tl_huff;

/* A thread's tables built by earlier decodes, keyed by the bytes they are built from
 * (tl_build_table reads nothing else: the code counts per length and the symbols): photos
 * from one encoder share their tables (most use the standard ones), so a thread builds them
 * once instead of once per image (~1.7% of the train step). Files with tables of their own
 * (optimised ones, as `convert --seekable` writes) miss and build as before. Slots are
 * replaced least recently used first, never one an install has taken (at most
 * 2 * NUM_HUFF_TBLS tables a scan, as many slots); freed when the thread exits. */
#define TL_HCACHE_SLOTS (2 * NUM_HUFF_TBLS)

typedef struct {
    tl_htab tab;
    unsigned stamp;                       /* the install that last took it */
    int valid, is_ac;
    UINT8 bits[16];                       /* the JHUFF_TBL's bits[1..16] */
    UINT8 huffval[256];                   /* and huffval (all of it: the table copies it) */
} tl_hslot;

typedef struct {
    unsigned clock;                       /* installs so far, never 0 */
    tl_hslot slot[TL_HCACHE_SLOTS];
} tl_hcache;

static pthread_key_t tl_hcache_key;
static pthread_once_t tl_hcache_once = PTHREAD_ONCE_INIT;
static int tl_hcache_key_ok;

static void tl_hcache_make_key(void)
{
    tl_hcache_key_ok = pthread_key_create(&tl_hcache_key, free) == 0;
}

/* The calling thread's cache (made on its first call), NULL without memory or a key. */
static tl_hcache *tl_hcache_get(void)
{
    tl_hcache *hc;
    if (pthread_once(&tl_hcache_once, tl_hcache_make_key) != 0 || !tl_hcache_key_ok)
        return NULL;
    hc = (tl_hcache *)pthread_getspecific(tl_hcache_key);
    if (hc == NULL) {
        hc = (tl_hcache *)calloc(1, sizeof(*hc));
        if (hc != NULL && pthread_setspecific(tl_hcache_key, hc) != 0) {
            free(hc);
            hc = NULL;
        }
    }
    return hc;
}

static void tl_retry(j_decompress_ptr cinfo)
{
    tl_fail((j_common_ptr)cinfo, TL_RETRY_STOCK);
}

/* Builds a table the way jdhuff.c's jpeg_make_d_derived_tbl does (which has already
 * checked it: libjpeg built its own from the same JHUFF_TBL at the start of the scan). */
static int tl_build_table(const JHUFF_TBL *t, tl_htab *h, int is_ac)
{
    int l, i, p = 0, n;
    int32_t code = 0;
    unsigned char size[257];
    int32_t codes[257];
    memset(h, 0, offsetof(tl_htab, fast_ac));   /* fast_ac: written whole below (AC only) */
    for (l = 1; l <= 16; l++) {
        n = t->bits[l];
        if (n < 0 || p + n > 256)
            return 0;
        for (i = 0; i < n; i++)
            size[p++] = (unsigned char)l;
    }
    size[p] = 0;
    n = p;
    p = 0;
    l = size[0];
    while (size[p]) {
        while ((int)size[p] == l) {
            codes[p++] = code;
            code++;
        }
        if (code >= (1L << l))
            return 0;
        code <<= 1;
        l++;
    }
    p = 0;
    for (l = 1; l <= 16; l++) {
        if (t->bits[l]) {
            h->valoff[l] = p - codes[p];
            p += t->bits[l];
            h->maxcode[l] = codes[p - 1];
        } else {
            h->maxcode[l] = -1;
        }
    }
    h->maxcode[17] = 0x7FFFFFFF;
    memcpy(h->huffval, t->huffval, sizeof(h->huffval));
    for (i = 0; i < n; i++) {
        int len = size[i];
        if (len <= TL_LOOKUP_BITS) {
            int shift = TL_LOOKUP_BITS - len, j;
            for (j = 0; j < (1 << shift); j++)
                h->look[(codes[i] << shift) | j] = (uint16_t)((len << 8) | t->huffval[i]);
        }
    }
    if (is_ac) {
        /* one symbol per entry first: a value of run 0-15 and size 1-15 whose code and value
         * bits fit TL_LOOKUP_BITS, or an end of block (the run of 16 zeros, 0xF0, and longer
         * codes or values take the slow steps) */
        uint64_t one[1 << TL_LOOKUP_BITS];
        memset(one, 0, sizeof(one));
        for (i = 0; i < n; i++) {
            int len = size[i], run = t->huffval[i] >> 4, sz = t->huffval[i] & 15, r, j;
            if (!sz) {
                if (run != 15 && len <= TL_LOOKUP_BITS)
                    for (j = codes[i] << (TL_LOOKUP_BITS - len);
                         j < (codes[i] + 1) << (TL_LOOKUP_BITS - len); j++)
                        one[j] = TL_FAST_EOB | (uint64_t)len;
                continue;
            }
            if (len + sz > TL_LOOKUP_BITS)
                continue;
            for (r = 0; r < (1 << sz); r++) {
                int v = r < (1 << (sz - 1)) ? r - (1 << sz) + 1 : r;   /* HUFF_EXTEND */
                int shift = TL_LOOKUP_BITS - len - sz;
                uint64_t e = ((uint64_t)(uint16_t)(int16_t)v << 32) |
                             ((uint64_t)(uint16_t)(int16_t)v << 48) | ((uint64_t)run << 8) |
                             (uint64_t)(len + sz);
                for (j = ((codes[i] << sz) | r) << shift;
                     j < (((codes[i] << sz) | r) + 1) << shift; j++)
                    one[j] = e;
            }
        }
        /* then a second symbol wholly within the bits after a value (the lookup of the bits
         * that follow it, zeros below them, gives it when it is no longer than those bits) */
        for (i = 0; i < (1 << TL_LOOKUP_BITS); i++) {
            uint64_t f = one[i], g;
            int len1 = (int)(f & 63);
            h->fast_ac[i] = f;
            if (!f || (f & TL_FAST_EOB))
                continue;
            g = one[(i << len1) & ((1 << TL_LOOKUP_BITS) - 1)];
            if (!g || (int)(g & 63) > TL_LOOKUP_BITS - len1)
                continue;
            /* the first value and its run, both lengths, then the second value or the end */
            f = (f & 0x0000FFFF00000F00ULL) | TL_FAST_PAIR | ((uint64_t)len1 << 24) |
                (uint64_t)(len1 + (int)(g & 63));
            if (g & TL_FAST_EOB)
                f |= TL_FAST_EOB | ((f & 0x0000FFFF00000000ULL) << 16);
            else
                f |= ((g & 0x0000FFFF00000000ULL) << 16) | ((((g >> 8) & 15) + 1) << 12);
            h->fast_ac[i] = f;
        }
    }
    return 1;
}

/* The table built from t for the install hc->clock: the thread's cached copy when an earlier
 * decode built it from the same bytes, else built into a free or the least recently used slot
 * that this install has not taken, or (no cache) into the decompressor's pool. NULL: t is not
 * a valid table. */
static const tl_htab *tl_table(j_decompress_ptr cinfo, tl_hcache *hc, const JHUFF_TBL *t,
                               int is_ac)
{
    tl_htab *tab;
    int i, victim = -1;
    if (hc != NULL) {
        for (i = 0; i < TL_HCACHE_SLOTS; i++) {
            tl_hslot *sl = &hc->slot[i];
            if (sl->valid && sl->is_ac == is_ac && memcmp(sl->bits, t->bits + 1, 16) == 0 &&
                memcmp(sl->huffval, t->huffval, 256) == 0) {
                sl->stamp = hc->clock;
                return &sl->tab;
            }
        }
        for (i = 0; i < TL_HCACHE_SLOTS; i++) {
            const tl_hslot *sl = &hc->slot[i];
            if (sl->valid && sl->stamp == hc->clock)
                continue;                     /* taken by this install */
            /* a free slot, else the one unused for the most installs (wrapping ages) */
            if (victim < 0 || !sl->valid ||
                (hc->slot[victim].valid &&
                 hc->clock - sl->stamp > hc->clock - hc->slot[victim].stamp))
                victim = i;
            if (!sl->valid)
                break;
        }
    }
    if (victim >= 0) {
        tl_hslot *sl = &hc->slot[victim];
        sl->valid = 0;
        if (!tl_build_table(t, &sl->tab, is_ac))
            return NULL;
        sl->valid = 1;
        sl->stamp = hc->clock;
        sl->is_ac = is_ac;
        memcpy(sl->bits, t->bits + 1, 16);
        memcpy(sl->huffval, t->huffval, 256);
        return &sl->tab;
    }
    tab = (tl_htab *)(*cinfo->mem->alloc_small)((j_common_ptr)cinfo, JPOOL_IMAGE, sizeof(tl_htab));
    return tl_build_table(t, tab, is_ac) ? tab : NULL;
}

static inline uint64_t tl_be64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_bswap64(v);
#else
    return ((v & 0xFFULL) << 56) | ((v & 0xFF00ULL) << 40) | ((v & 0xFF0000ULL) << 24) |
           ((v & 0xFF000000ULL) << 8) | ((v >> 8) & 0xFF000000ULL) |
           ((v >> 24) & 0xFF0000ULL) | ((v >> 40) & 0xFF00ULL) | (v >> 56);
#endif
}

/* Copies the entropy-coded bytes from h->src up to the next marker into h->seg without the
 * stuffed zeros; records the marker and where its 0xFF is. 0 when no marker ends the data. */
static int tl_load_segment(tl_huff *h)
{
    const unsigned char *p = h->src, *end = h->src_end;
    unsigned char *o = h->seg;
    for (;;) {
        const unsigned char *q = memchr(p, 0xFF, (size_t)(end - p));
        size_t n;
        if (q == NULL || q + 1 >= end)
            return 0;
        n = (size_t)(q - p);
        memcpy(o, p, n);
        o += n;
        if (q[1] == 0x00) {                   /* a stuffed 0xFF data byte */
            *o++ = 0xFF;
            p = q + 2;
            continue;
        }
        h->marker_at = q;
        while (q + 1 < end && q[1] == 0xFF)   /* fill bytes before a marker */
            q++;
        if (q + 1 >= end)
            return 0;
        h->marker = q[1];
        h->src = q + 2;                       /* where the next segment starts */
        break;
    }
    h->seg_len = (size_t)(o - h->seg);
    memset(o, 0, TL_SEG_PAD);
    h->bitpos = 0;
    return 1;
}

/* The segment just decoded must have ended exactly: every byte used (only the padding bits
 * of its last byte left), as libjpeg's decoder would find it without a warning. */
static int tl_segment_exact(const tl_huff *h)
{
    return h->bitpos <= 8 * h->seg_len && (h->bitpos + 7) / 8 == h->seg_len;
}

static boolean tl_decode_mcu(j_decompress_ptr cinfo, JBLOCKROW *MCU_data);
#if TL_X86
static boolean tl_decode_mcu_bmi2(j_decompress_ptr cinfo, JBLOCKROW *MCU_data);
#endif

int tl_huff_install(tl_ctx *c, int flags)
{
    j_decompress_ptr cinfo = &c->cinfo;
    tl_huff *h;
    tl_hcache *hc;
    const tl_htab *tabs[2 * NUM_HUFF_TBLS] = {0};   /* DC tables 0-3 / AC tables 0-3 at 4-7 */
    int blkn, ci, t;
    int used_dc[NUM_HUFF_TBLS] = {0}, used_ac[NUM_HUFF_TBLS] = {0};
    /* A sequential scan of every component is the file's only scan (jdinput.c: no
     * has_multiple_scans; a second SOS is JERR_EOI_EXPECTED), not yet started. A file of
     * several scans has been decoded into the coefficient buffer by jpeg_start_decompress
     * already, and keeps libjpeg's decoder. */
    if (cinfo->progressive_mode || cinfo->arith_code ||
        cinfo->data_precision != 8 || cinfo->comps_in_scan != cinfo->num_components ||
        cinfo->comps_in_scan < 1 || cinfo->comps_in_scan > MAX_COMPS_IN_SCAN ||
        cinfo->Ss != 0 || cinfo->Se != DCTSIZE2 - 1 || cinfo->Ah != 0 || cinfo->Al != 0 ||
        cinfo->blocks_in_MCU < 1 || cinfo->blocks_in_MCU > D_MAX_BLOCKS_IN_MCU ||
        cinfo->entropy == NULL || cinfo->src == NULL || cinfo->unread_marker != 0 ||
        cinfo->input_scan_number != 1 || cinfo->input_iMCU_row != 0 ||
        (long long)cinfo->MCUs_per_row * cinfo->MCU_rows_in_scan * cinfo->blocks_in_MCU <
            TL_HUFF_MIN_BLOCKS)
        return 0;
    for (ci = 0; ci < cinfo->comps_in_scan; ci++) {
        jpeg_component_info *comp = cinfo->cur_comp_info[ci];
        int d = comp->dc_tbl_no, a = comp->ac_tbl_no;
        if (d < 0 || d >= NUM_HUFF_TBLS || a < 0 || a >= NUM_HUFF_TBLS ||
            cinfo->dc_huff_tbl_ptrs[d] == NULL || cinfo->ac_huff_tbl_ptrs[a] == NULL)
            return 0;   /* libjpeg has already refused such a scan (JERR_NO_HUFF_TABLE) */
        used_dc[d] = used_ac[a] = 1;
    }
    h = (tl_huff *)(*cinfo->mem->alloc_small)((j_common_ptr)cinfo, JPOOL_IMAGE, sizeof(tl_huff));
    memset(h, 0, sizeof(*h));
    hc = tl_hcache_get();
    if (hc != NULL && ++hc->clock == 0)
        hc->clock = 1;
    for (t = 0; t < NUM_HUFF_TBLS; t++) {
        /* only the tables a component uses; build failures leave libjpeg's decoder on */
        if (used_dc[t] && (tabs[t] = tl_table(cinfo, hc, cinfo->dc_huff_tbl_ptrs[t], 0)) == NULL)
            return 0;
        if (used_ac[t] && (tabs[NUM_HUFF_TBLS + t] =
                               tl_table(cinfo, hc, cinfo->ac_huff_tbl_ptrs[t], 1)) == NULL)
            return 0;
    }
    for (blkn = 0; blkn < cinfo->blocks_in_MCU; blkn++) {
        int k = cinfo->MCU_membership[blkn];
        jpeg_component_info *comp;
        if (k < 0 || k >= cinfo->comps_in_scan)
            return 0;
        comp = cinfo->cur_comp_info[k];
        h->ci[blkn] = k;
        h->dc[blkn] = tabs[comp->dc_tbl_no];
        h->ac[blkn] = tabs[NUM_HUFF_TBLS + comp->ac_tbl_no];
        /* as jdhuff.c's start_pass_huff_decoder */
        h->dc_needed[blkn] = comp->component_needed ? 1 : 0;
        h->ac_needed[blkn] = comp->component_needed && TL_DCT_SCALED_SIZE(comp) > 1;
    }
    h->restarts_to_go = cinfo->restart_interval;
    h->next_restart = 0;
    h->mcus_left = (long long)cinfo->MCUs_per_row * (long long)cinfo->MCU_rows_in_scan;
    h->src = cinfo->src->next_input_byte;
    h->src_end = h->src + cinfo->src->bytes_in_buffer;
    h->seg = (unsigned char *)(*cinfo->mem->alloc_large)(
        (j_common_ptr)cinfo, JPOOL_IMAGE, cinfo->src->bytes_in_buffer + TL_SEG_PAD);
    c->huff = h;
    cinfo->entropy->decode_mcu = tl_decode_mcu;
#if TL_X86
    if (flags & TL_HUFF_BMI2) {
        cinfo->entropy->decode_mcu = tl_decode_mcu_bmi2;
        return 2;
    }
#else
    (void)flags;
#endif
    return 1;
}

/* The bit reader: acc holds cnt unread bits, left-aligned (the bits below them are zero),
 * p the next byte of seg not yet in acc. After TL_REFILL, cnt >= 32: enough for a code
 * (<= 16 bits) and its value (<= 15 bits). Bits consumed so far: 8 * (p - seg) - cnt. Past
 * the segment's data seg holds zeros (TL_SEG_PAD), which libjpeg's reader also feeds in at a
 * marker; using them is caught by the per-block check against the segment's length. */
#define TL_REFILL()                                                  \
    do {                                                             \
        if (cnt < 32) {                                              \
            acc |= tl_be64(p) >> cnt;                                \
            p += (63 - cnt) >> 3;                                    \
            cnt |= 56;                                               \
        }                                                            \
    } while (0)

/* Decodes one symbol of table t into sym; -1: no code matches (bits consumed: undefined). */
#define TL_SYMBOL(t, sym)                                                               \
    do {                                                                                \
        unsigned e_ = (t)->look[acc >> (64 - TL_LOOKUP_BITS)];                          \
        if (e_) {                                                                       \
            acc <<= (e_ >> 8);                                                          \
            cnt -= (int)(e_ >> 8);                                                      \
            sym = (int)(e_ & 0xFF);                                                     \
        } else {                                                                        \
            int l_ = TL_LOOKUP_BITS + 1;                                                \
            int32_t code_ = (int32_t)(acc >> (64 - l_));                                \
            while (code_ > (t)->maxcode[l_]) {                                          \
                l_++;                                                                   \
                code_ = (int32_t)(acc >> (64 - l_));                                    \
            }                                                                           \
            if (l_ > 16) {                                                              \
                sym = -1;                                                               \
            } else {                                                                    \
                acc <<= l_;                                                             \
                cnt -= l_;                                                              \
                sym = (t)->huffval[(code_ + (t)->valoff[l_]) & 0xFF];                   \
            }                                                                           \
        }                                                                               \
    } while (0)

/* The next s bits (1 <= s <= 15), made signed as jdhuff.c's HUFF_EXTEND does. */
#define TL_VALUE(s, v)                                                                  \
    do {                                                                                \
        int r_ = (int)(acc >> (64 - (s)));                                              \
        acc <<= (s);                                                                    \
        cnt -= (s);                                                                     \
        v = r_ - (int)((((unsigned)r_ >> ((s) - 1)) - 1u) & ((1u << (s)) - 1u));        \
    } while (0)

/* The decoder's one body, inlined into each build below. */
TL_INLINE boolean tl_decode_mcu_body(j_decompress_ptr cinfo, JBLOCKROW *MCU_data)
{
    tl_ctx *c = (tl_ctx *)((char *)cinfo->progress - offsetof(tl_ctx, progress));
    tl_huff *h = c->huff;
    const unsigned char *seg, *p;
    uint64_t acc;
    int cnt;
    size_t limit;
    int blkn;

    if (h->mcus_left <= 0)
        tl_retry(cinfo);                      /* more MCUs than the scan has */
    if (!h->started) {
        if (!tl_load_segment(h))
            tl_retry(cinfo);
        h->started = 1;
    }
    if (cinfo->restart_interval) {
        if (h->restarts_to_go == 0) {
            /* the segment must have ended exactly at RST(next_restart) */
            if (!tl_segment_exact(h) || h->marker != 0xD0 + (int)h->next_restart ||
                !tl_load_segment(h))
                tl_retry(cinfo);
            h->next_restart = (h->next_restart + 1) & 7;
            memset(h->last_dc, 0, sizeof(h->last_dc));
            h->restarts_to_go = cinfo->restart_interval;
        }
        h->restarts_to_go--;
    }

    seg = h->seg;
    p = seg + h->bitpos / 8;
    acc = 0;
    cnt = 0;
    TL_REFILL();
    /* start mid-byte: drop the bits of p's first byte already consumed */
    acc <<= h->bitpos & 7;
    cnt -= (int)(h->bitpos & 7);
    limit = 8 * h->seg_len;
    for (blkn = 0; blkn < cinfo->blocks_in_MCU; blkn++) {
        JBLOCKROW block = MCU_data ? MCU_data[blkn] : NULL;
        const tl_htab *ac = h->ac[blkn];
        int s, k, r, v;

        TL_REFILL();
        TL_SYMBOL(h->dc[blkn], s);
        if (s < 0)
            tl_retry(cinfo);
        if (s) {
            if (s > 15)
                tl_retry(cinfo);
            TL_VALUE(s, v);
            s = v;
        }
        if (h->dc_needed[blkn]) {
            int ci = h->ci[blkn];
            /* int arithmetic as libjpeg's (which wraps on hostile input: unsigned here) */
            s = (int)((unsigned)s + (unsigned)h->last_dc[ci]);
            h->last_dc[ci] = s;
            if (block)
                (*block)[0] = (JCOEF)s;
        }
        if (h->ac_needed[blkn] && block) {
            for (k = 1; k < DCTSIZE2; k++) {
                uint64_t f;
                TL_REFILL();
                f = ac->fast_ac[acc >> (64 - TL_LOOKUP_BITS)];
                if (f) {
                    k += (int)(f >> 8) & 15;
                    if (TL_UNLIKELY(k >= DCTSIZE2 - 1) && (f & TL_FAST_PAIR)) {
                        /* libjpeg reads no symbol after a value at 63: the first alone */
                        acc <<= (f >> 24) & 63;
                        cnt -= (int)(f >> 24) & 63;
                        (*block)[tl_natural_order[k]] = (JCOEF)(f >> 32);
                        continue;
                    }
                    acc <<= f & 63;
                    cnt -= (int)(f & 63);
                    /* the first value; the second (or the first again, or a 0 at an end of
                     * block: that coefficient is still zero) */
                    (*block)[tl_natural_order[k]] = (JCOEF)(f >> 32);
                    k += (int)(f >> 12) & 31;
                    (*block)[tl_natural_order[k]] = (JCOEF)(f >> 48);
                    if (f & TL_FAST_EOB)
                        break;
                    continue;
                }
                TL_SYMBOL(ac, s);
                if (s < 0)
                    tl_retry(cinfo);
                r = s >> 4;
                s &= 15;
                if (s) {
                    k += r;
                    TL_VALUE(s, v);
                    (*block)[tl_natural_order[k]] = (JCOEF)v;
                } else {
                    if (r != 15)
                        break;
                    k += 15;
                }
            }
        } else {
            for (k = 1; k < DCTSIZE2; k++) {
                uint64_t f;
                TL_REFILL();
                f = ac->fast_ac[acc >> (64 - TL_LOOKUP_BITS)];
                if (f) {
                    k += (int)(f >> 8) & 15;
                    if (TL_UNLIKELY(k >= DCTSIZE2 - 1) && (f & TL_FAST_PAIR)) {
                        acc <<= (f >> 24) & 63;
                        cnt -= (int)(f >> 24) & 63;
                        continue;
                    }
                    acc <<= f & 63;
                    cnt -= (int)(f & 63);
                    k += (int)(f >> 12) & 31;
                    if (f & TL_FAST_EOB)
                        break;
                    continue;
                }
                TL_SYMBOL(ac, s);
                if (s < 0)
                    tl_retry(cinfo);
                r = s >> 4;
                s &= 15;
                if (s) {
                    k += r;
                    acc <<= s;
                    cnt -= s;
                } else {
                    if (r != 15)
                        break;
                    k += 15;
                }
            }
        }
        if ((size_t)(p - seg) * 8 - (size_t)cnt > limit)
            tl_retry(cinfo);                  /* ran out of data: libjpeg would warn */
    }
    h->bitpos = (size_t)(p - seg) * 8 - (size_t)cnt;

    if (--h->mcus_left == 0) {
        /* The scan's last MCU: its segment must end exactly too, and libjpeg's marker
         * reader takes over at the marker after it (EOI in an intact file). */
        if (!tl_segment_exact(h))
            tl_retry(cinfo);
        cinfo->src->next_input_byte = h->marker_at;
        cinfo->src->bytes_in_buffer = (size_t)(h->src_end - h->marker_at);
    }
    return TRUE;
}

static boolean tl_decode_mcu(j_decompress_ptr cinfo, JBLOCKROW *MCU_data)
{
    return tl_decode_mcu_body(cinfo, MCU_data);
}

#if TL_X86
__attribute__((target("bmi2"))) static boolean tl_decode_mcu_bmi2(j_decompress_ptr cinfo,
                                                                  JBLOCKROW *MCU_data)
{
    return tl_decode_mcu_body(cinfo, MCU_data);
}
#endif

int tl_jpeg_huffman_own(const unsigned char *data, size_t size, int scale_num, int flags,
                        char *errmsg)
{
    tl_ctx c;
    char localmsg[TL_MSG_LEN];
    int own = 0;
    if (errmsg == NULL)
        errmsg = localmsg;
    if (scale_num < 1 || scale_num > 8)
        return tl_arg_error(errmsg, "scale_num must be in 1..8");
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
    if (tl_check_limits(&c, 178956970LL) == TL_OK /* decode.jpeg's DEFAULT_MAX_PIXELS */) {
        c.cinfo.scale_num = (unsigned)scale_num;
        c.cinfo.scale_denom = 8;
        /* as tl_decode: the output colour space does not change the scan's decoding */
        jpeg_start_decompress(&c.cinfo);
        own = (flags & TL_STOCK_HUFFMAN) ? 0 : tl_huff_install(&c, flags);
    }
    jpeg_destroy_decompress(&c.cinfo);
    return own;
}
