/* See mask_kernels.h. The inflater follows RFC 1950/1951 as zlib's contrib/puff.c decodes
 * it (canonical Huffman codes decoded a bit at a time: a mask's stream is short), with
 * back-references copied by memset / memcpy: a mask's long runs are what zlib's byte loop
 * makes slow. */
#include "mask_kernels.h"

#include <string.h>

size_t tl_png_stride(int64_t width, int bit_depth) {
    if (width <= 0 || width > ((int64_t)1 << 31) ||
        (bit_depth != 1 && bit_depth != 2 && bit_depth != 4 && bit_depth != 8 && bit_depth != 16))
        return 0;
    return (size_t)((width * bit_depth + 7) / 8);
}

/* -- inflate ------------------------------------------------------------------------------ */

#define MAXBITS 15
#define MAXLCODES 286
#define MAXDCODES 30
#define FIXLCODES 288

typedef struct {
    const uint8_t *in;
    size_t in_len, in_pos;
    uint64_t bitbuf;
    int bitcnt;
    uint8_t *out;
    size_t out_len, out_pos;
    int whole;  /* out_len is the whole stream's output: more is an error, not DONE */
} state;

typedef struct {
    short count[MAXBITS + 1];
    short symbol[FIXLCODES];
} huffman;

#define DONE 1  /* out is full (head mode) */

static int bits(state *s, int need, int *val) {
    while (s->bitcnt < need) {
        if (s->in_pos >= s->in_len) return TL_MASK_ESHORT;
        s->bitbuf |= (uint64_t)s->in[s->in_pos++] << s->bitcnt;
        s->bitcnt += 8;
    }
    *val = (int)(s->bitbuf & ((1u << need) - 1u));
    s->bitbuf >>= need;
    s->bitcnt -= need;
    return TL_MASK_OK;
}

/* a symbol of code h, or a negative status */
static int decode(state *s, const huffman *h) {
    int code = 0, first = 0, index = 0, len, count, bit, st;
    for (len = 1; len <= MAXBITS; len++) {
        if ((st = bits(s, 1, &bit)) != TL_MASK_OK) return st;
        code |= bit;
        count = h->count[len];
        if (code - count < first) return h->symbol[index + (code - first)];
        index += count;
        first += count;
        first <<= 1;
        code <<= 1;
    }
    return TL_MASK_EZLIB;  /* ran out of codes */
}

/* the code of n code lengths: 0 complete, > 0 incomplete, < 0 over-subscribed */
static int construct(huffman *h, const short *length, int n) {
    int symbol, len, left;
    short offs[MAXBITS + 1];
    for (len = 0; len <= MAXBITS; len++) h->count[len] = 0;
    for (symbol = 0; symbol < n; symbol++) h->count[length[symbol]]++;
    if (h->count[0] == n) return 0;  /* no codes: complete, decode() fails on use */
    left = 1;
    for (len = 1; len <= MAXBITS; len++) {
        left <<= 1;
        left -= h->count[len];
        if (left < 0) return left;
    }
    offs[1] = 0;
    for (len = 1; len < MAXBITS; len++) offs[len + 1] = (short)(offs[len] + h->count[len]);
    for (symbol = 0; symbol < n; symbol++)
        if (length[symbol] != 0) h->symbol[offs[length[symbol]]++] = (short)symbol;
    return left;
}

static int stored(state *s) {
    size_t len;
    s->bitbuf = 0;  /* the rest of the current byte */
    s->bitcnt = 0;
    if (s->in_len - s->in_pos < 4) return TL_MASK_ESHORT;
    len = s->in[s->in_pos] | ((size_t)s->in[s->in_pos + 1] << 8);
    if ((s->in[s->in_pos] ^ s->in[s->in_pos + 2]) != 0xff ||
        (s->in[s->in_pos + 1] ^ s->in[s->in_pos + 3]) != 0xff)  /* NLEN: LEN's complement */
        return TL_MASK_EZLIB;
    s->in_pos += 4;
    if (len > s->out_len - s->out_pos) {
        if (s->whole) return TL_MASK_EZLIB;  /* more data than the image holds */
        len = s->out_len - s->out_pos;
    }
    if (len > s->in_len - s->in_pos) return TL_MASK_ESHORT;
    memcpy(s->out + s->out_pos, s->in + s->in_pos, len);
    s->in_pos += len;
    s->out_pos += len;
    return s->out_pos == s->out_len && !s->whole ? DONE : TL_MASK_OK;
}

static const short lbase[29] = {3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31,
                                35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
static const short lext[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2,
                               3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const short dbase[30] = {1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193,
                                257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145,
                                8193, 12289, 16385, 24577};
static const short dext[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6,
                               7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

static int codes(state *s, const huffman *lencode, const huffman *distcode) {
    int symbol, extra, st;
    size_t len, dist, n, c;
    for (;;) {
        symbol = decode(s, lencode);
        if (symbol < 0) return symbol;
        if (symbol < 256) {
            if (s->out_pos == s->out_len) return TL_MASK_EZLIB;  /* whole: too much data */
            s->out[s->out_pos++] = (uint8_t)symbol;
            if (s->out_pos == s->out_len && !s->whole) return DONE;
        } else if (symbol == 256) {
            return TL_MASK_OK;
        } else {
            symbol -= 257;
            if (symbol >= 29) return TL_MASK_EZLIB;
            if ((st = bits(s, lext[symbol], &extra)) != TL_MASK_OK) return st;
            len = (size_t)(lbase[symbol] + extra);
            symbol = decode(s, distcode);
            if (symbol < 0) return symbol;
            if (symbol >= 30) return TL_MASK_EZLIB;
            if ((st = bits(s, dext[symbol], &extra)) != TL_MASK_OK) return st;
            dist = (size_t)(dbase[symbol] + extra);
            if (dist > s->out_pos) return TL_MASK_EZLIB;  /* before the start: no dictionary */
            n = s->out_len - s->out_pos;
            if (len > n) {
                if (s->whole) return TL_MASK_EZLIB;
                len = n;
            }
            if (dist == 1) {
                memset(s->out + s->out_pos, s->out[s->out_pos - 1], len);
                s->out_pos += len;
            } else {
                while (len) {  /* the repeating pattern: dist bytes at a time */
                    c = len < dist ? len : dist;
                    memcpy(s->out + s->out_pos, s->out + s->out_pos - dist, c);
                    s->out_pos += c;
                    len -= c;
                }
            }
            if (s->out_pos == s->out_len && !s->whole) return DONE;
        }
    }
}

static int fixed(state *s) {
    huffman lencode, distcode;
    short lengths[FIXLCODES];
    int symbol;
    for (symbol = 0; symbol < 144; symbol++) lengths[symbol] = 8;
    for (; symbol < 256; symbol++) lengths[symbol] = 9;
    for (; symbol < 280; symbol++) lengths[symbol] = 7;
    for (; symbol < FIXLCODES; symbol++) lengths[symbol] = 8;
    construct(&lencode, lengths, FIXLCODES);
    for (symbol = 0; symbol < MAXDCODES; symbol++) lengths[symbol] = 5;
    construct(&distcode, lengths, MAXDCODES);
    return codes(s, &lencode, &distcode);
}

static int dynamic(state *s) {
    static const short order[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2,
                                    14, 1, 15};
    int nlen, ndist, ncode, index, symbol, len, err, st, v;
    short lengths[MAXLCODES + MAXDCODES];
    huffman lencode, distcode;

    if ((st = bits(s, 5, &nlen)) != TL_MASK_OK) return st;
    if ((st = bits(s, 5, &ndist)) != TL_MASK_OK) return st;
    if ((st = bits(s, 4, &ncode)) != TL_MASK_OK) return st;
    nlen += 257;
    ndist += 1;
    ncode += 4;
    if (nlen > MAXLCODES || ndist > MAXDCODES) return TL_MASK_EZLIB;
    for (index = 0; index < ncode; index++) {
        if ((st = bits(s, 3, &v)) != TL_MASK_OK) return st;
        lengths[order[index]] = (short)v;
    }
    for (; index < 19; index++) lengths[order[index]] = 0;
    if (construct(&lencode, lengths, 19) != 0) return TL_MASK_EZLIB;  /* must be complete */
    index = 0;
    while (index < nlen + ndist) {
        symbol = decode(s, &lencode);
        if (symbol < 0) return symbol;
        if (symbol < 16) {
            lengths[index++] = (short)symbol;
        } else {
            len = 0;
            if (symbol == 16) {
                if (index == 0) return TL_MASK_EZLIB;  /* no last length */
                len = lengths[index - 1];
                if ((st = bits(s, 2, &v)) != TL_MASK_OK) return st;
                symbol = 3 + v;
            } else if (symbol == 17) {
                if ((st = bits(s, 3, &v)) != TL_MASK_OK) return st;
                symbol = 3 + v;
            } else {
                if ((st = bits(s, 7, &v)) != TL_MASK_OK) return st;
                symbol = 11 + v;
            }
            if (index + symbol > nlen + ndist) return TL_MASK_EZLIB;
            while (symbol--) lengths[index++] = (short)len;
        }
    }
    if (lengths[256] == 0) return TL_MASK_EZLIB;  /* no end-of-block code */
    err = construct(&lencode, lengths, nlen);
    if (err && (err < 0 || nlen != lencode.count[0] + lencode.count[1])) return TL_MASK_EZLIB;
    err = construct(&distcode, lengths + nlen, ndist);
    if (err && (err < 0 || ndist != distcode.count[0] + distcode.count[1]))
        return TL_MASK_EZLIB;
    return codes(s, &lencode, &distcode);
}

/* RFC 1950's Adler-32 of n bytes */
static uint32_t adler32(const uint8_t *p, size_t n) {
    uint32_t a = 1, b = 0;
    while (n) {
        size_t k = n < 5552 ? n : 5552;  /* zlib's NMAX: no overflow before the modulo */
        n -= k;
        while (k--) {
            a += *p++;
            b += a;
        }
        a %= 65521u;
        b %= 65521u;
    }
    return (b << 16) | a;
}

static int inflate(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len, int whole) {
    state s;
    int last, type, st;
    if (in == NULL || out == NULL) return TL_MASK_EARG;
    if (out_len == 0 && !whole) return TL_MASK_OK;
    if (in_len < 2) return TL_MASK_ESHORT;
    /* zlib header: deflate, window <= 32 KB, no preset dictionary, check bits */
    if ((in[0] & 0x0f) != 8 || (in[0] >> 4) > 7 || (in[1] & 0x20) ||
        ((unsigned)in[0] * 256u + in[1]) % 31u)
        return TL_MASK_EZLIB;
    s.in = in;
    s.in_len = in_len;
    s.in_pos = 2;
    s.bitbuf = 0;
    s.bitcnt = 0;
    s.out = out;
    s.out_len = out_len;
    s.out_pos = 0;
    s.whole = whole;
    do {
        if ((st = bits(&s, 1, &last)) != TL_MASK_OK) return st;
        if ((st = bits(&s, 2, &type)) != TL_MASK_OK) return st;
        if (type == 0) st = stored(&s);
        else if (type == 1) st = fixed(&s);
        else if (type == 2) st = dynamic(&s);
        else return TL_MASK_EZLIB;
        if (st == DONE) return TL_MASK_OK;
        if (st != TL_MASK_OK) return st;
    } while (!last);
    if (!whole || s.out_pos != s.out_len) return TL_MASK_ESHORT;  /* ended before out was full */
    /* the final block ended: the rest of its byte is padding (bits() loads a byte only when
     * it needs one), then the big-endian Adler-32 of everything inflated */
    if (s.in_len - s.in_pos < 4) return TL_MASK_ESHORT;
    if ((((uint32_t)in[s.in_pos] << 24) | ((uint32_t)in[s.in_pos + 1] << 16) |
         ((uint32_t)in[s.in_pos + 2] << 8) | in[s.in_pos + 3]) != adler32(out, out_len))
        return TL_MASK_EZLIB;
    return TL_MASK_OK;
}

int tl_inflate_head(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len) {
    return inflate(in, in_len, out, out_len, 0);
}

int tl_inflate_whole(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len) {
    return inflate(in, in_len, out, out_len, 1);
}

/* -- unfilter and sample ------------------------------------------------------------------ */

static inline uint8_t paeth(uint8_t a, uint8_t b, uint8_t c) {
    int p = (int)a + b - c;
    int pa = p > a ? p - a : a - p, pb = p > b ? p - b : b - p, pc = p > c ? p - c : c - p;
    if (pa <= pb && pa <= pc) return a;
    return pb <= pc ? b : c;
}

/* cur = unfilter(raw) against prev (the previous unfiltered row, zeros for the first). */
static int unfilter(int type, const uint8_t *raw, const uint8_t *prev, uint8_t *cur,
                    size_t stride, size_t bpp) {
    size_t i;
    switch (type) {
    case 0:
        memcpy(cur, raw, stride);
        return TL_MASK_OK;
    case 1:
        for (i = 0; i < bpp && i < stride; i++) cur[i] = raw[i];
        for (; i < stride; i++) cur[i] = (uint8_t)(raw[i] + cur[i - bpp]);
        return TL_MASK_OK;
    case 2:
        for (i = 0; i < stride; i++) cur[i] = (uint8_t)(raw[i] + prev[i]);
        return TL_MASK_OK;
    case 3:
        for (i = 0; i < bpp && i < stride; i++) cur[i] = (uint8_t)(raw[i] + (prev[i] >> 1));
        for (; i < stride; i++)
            cur[i] = (uint8_t)(raw[i] + (((unsigned)cur[i - bpp] + prev[i]) >> 1));
        return TL_MASK_OK;
    case 4:
        for (i = 0; i < bpp && i < stride; i++) cur[i] = (uint8_t)(raw[i] + prev[i]);
        for (; i < stride; i++)
            cur[i] = (uint8_t)(raw[i] + paeth(cur[i - bpp], prev[i], prev[i - bpp]));
        return TL_MASK_OK;
    default:
        return TL_MASK_EFILTER;
    }
}

int tl_png_mask_nearest(const uint8_t *z, size_t zlen, int64_t width, int64_t height,
                        int bit_depth, int gray_scale, const int32_t *ymap, int64_t oh,
                        const int32_t *xmap, int64_t ow, void *out, uint8_t *buf,
                        size_t buf_len) {
    size_t stride = tl_png_stride(width, bit_depth);
    size_t bpp = bit_depth == 16 ? 2 : 1, need;
    int64_t y, oy, ox, rows;
    uint8_t *prev, *cur, *t;
    int status;

    if (z == NULL || ymap == NULL || xmap == NULL || out == NULL || buf == NULL ||
        stride == 0 || height <= 0 || oh <= 0 || ow <= 0 || gray_scale < 1 || gray_scale > 255)
        return TL_MASK_EARG;
    /* the maps stay inside the rows and columns read (the rows are unfiltered in order) */
    for (oy = 0; oy < oh; oy++)
        if (ymap[oy] < 0 || ymap[oy] >= height || (oy && ymap[oy] < ymap[oy - 1]))
            return TL_MASK_EARG;
    for (ox = 0; ox < ow; ox++)
        if (xmap[ox] < 0 || xmap[ox] >= width) return TL_MASK_EARG;
    rows = (int64_t)ymap[oh - 1] + 1;
    /* every row is inflated, and the stream's end and Adler-32 checked: the chunk CRCs cover
     * the compressed bytes as written, not whether the writer's stream was right */
    if ((uint64_t)height > (SIZE_MAX - 2 * stride) / (stride + 1)) return TL_MASK_EARG;
    need = (size_t)height * (stride + 1);
    if (buf_len < need + 2 * stride) return TL_MASK_EARG;
    status = tl_inflate_whole(z, zlen, buf, need);
    if (status != TL_MASK_OK) return status;

    prev = buf + need;
    cur = prev + stride;
    memset(prev, 0, stride);
    oy = 0;
    for (y = 0; y < rows && oy < oh; y++) {
        const uint8_t *raw = buf + (size_t)y * (stride + 1);
        status = unfilter(raw[0], raw + 1, prev, cur, stride, bpp);
        if (status != TL_MASK_OK) return status;
        for (; oy < oh && ymap[oy] == y; oy++) {
            if (bit_depth == 16) {
                uint16_t *o = (uint16_t *)out + oy * ow;
                for (ox = 0; ox < ow; ox++) {
                    const uint8_t *p = cur + 2 * (size_t)xmap[ox];
                    o[ox] = (uint16_t)((p[0] << 8) | p[1]);
                }
            } else if (bit_depth == 8) {
                uint8_t *o = (uint8_t *)out + oy * ow;
                if (gray_scale == 1)
                    for (ox = 0; ox < ow; ox++) o[ox] = cur[xmap[ox]];
                else
                    for (ox = 0; ox < ow; ox++) o[ox] = (uint8_t)(cur[xmap[ox]] * gray_scale);
            } else {  /* 1, 2, 4 bits, the first sample in a byte's high bits */
                uint8_t *o = (uint8_t *)out + oy * ow;
                unsigned per = 8u / (unsigned)bit_depth, mask = (1u << bit_depth) - 1u;
                for (ox = 0; ox < ow; ox++) {
                    unsigned x = (unsigned)xmap[ox];
                    unsigned shift = 8u - (unsigned)bit_depth * (x % per + 1u);
                    o[ox] = (uint8_t)(((cur[x / per] >> shift) & mask) * (unsigned)gray_scale);
                }
            }
        }
        t = prev; prev = cur; cur = t;
    }
    return oy == oh ? TL_MASK_OK : TL_MASK_EARG;
}
