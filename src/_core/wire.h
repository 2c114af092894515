/* Wire facts the C files and the Cython code share, written once (jsonio.pxi
 * declares this header for every .pxi): the request code the fast path answers,
 * the version rmq writes, the zlib sniff, big-endian fields, the ROCKETMQ header
 * walker, integers, the JSON response header's pieces, the topic record and the
 * RMQ_DEBUG assertion (wire.pxd declares it for the .pxi files).
 */
#ifndef RMQ_WIRE_H
#define RMQ_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* rmq.protocol.RequestCode.GET_ROUTEINFO_BY_TOPIC and REGISTER_BROKER,
 * ResponseCode.TOPIC_NOT_EXIST and CURRENT_VERSION (jsonio.pxi
 * refuses to import if they differ; tests/test_core_agreement.py checks them). */
enum { RMQ_GET_ROUTEINFO_BY_TOPIC = 105, RMQ_REGISTER_BROKER = 103, RMQ_TOPIC_NOT_EXIST = 17,
       RMQ_CURRENT_VERSION = 413 };
/* rmq.protocol.V4_9_4: from this client version on, the standard route form
 * (rmq._wire.standard_route_form; checked as the codes above are). */
enum { RMQ_V4_9_4 = 401 };

/* One topic config of a RegisterBrokerBody: what the body scanner (scan.c) reads and
 * the topic table (routetable.c) applies. The strings point into the caller's bytes
 * (the body itself, or names encoded from a dict). */
typedef struct {
    const char *key;  size_t key_len;    /* the topicConfigTable map key */
    const char *name; size_t name_len;   /* "topicName", or the key when absent */
    int32_t perm, read, write, sysflag;  /* the scanner's defaults: 6, 16, 16, 0 */
} rmq_topic_rec;

/* A zlib stream header (RFC 1950: deflate, check bits): how a compressed
 * RegisterBrokerBody is told from JSON, whatever the request header says. */
static inline int rmq_is_zlib(const uint8_t *p, size_t n)
{
    return n >= 2 && (p[0] & 0x0F) == 8 && (((unsigned)p[0] << 8) | p[1]) % 31 == 0;
}

/* Big-endian fields of the frame and of the ROCKETMQ header. */
static inline int32_t rmq_be32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static inline int16_t rmq_be16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

/* The header word after a frame's length prefix (payload: the frame's bytes after
 * it): the serialize type (0 JSON, 1 ROCKETMQ) and the header's length. */
static inline size_t rmq_header_word(const uint8_t *payload, uint32_t *stype)
{
    uint32_t word = (uint32_t)rmq_be32(payload);
    *stype = word >> 24;
    return word & 0xFFFFFF;
}

/* The frame splitter's rule, for every splitting loop (stream.pxi's and serve.c's):
 * the length of the frame at p[:n] when it is complete there, else
 * RMQ_FRAME_INCOMPLETE, or RMQ_FRAME_BAD_LENGTH (codec.pxi's check_length would
 * raise: negative, or the frame with its prefix above max_frame), reported as soon as
 * its 4 bytes are in, complete or not. */
enum { RMQ_FRAME_INCOMPLETE = -1, RMQ_FRAME_BAD_LENGTH = -2 };

static inline int64_t rmq_frame_at(const uint8_t *p, size_t n, size_t max_frame)
{
    if (n < 4)
        return RMQ_FRAME_INCOMPLETE;
    int32_t length = rmq_be32(p);
    if (length < 0 || (size_t)length + 4 > max_frame)
        return RMQ_FRAME_BAD_LENGTH;
    return n - 4 < (size_t)length ? RMQ_FRAME_INCOMPLETE : length;
}

static inline void rmq_put_be32(char *p, uint32_t v)
{
    p[0] = (char)(v >> 24);
    p[1] = (char)(v >> 16);
    p[2] = (char)(v >> 8);
    p[3] = (char)v;
}

/* The ROCKETMQ binary header, walked once for codec.pxi's decoder and scan.c's
 * route recogniser: the fixed 21 bytes, the remark, then [int16 klen][key]
 * [int32 vlen][value] ext fields. Lengths only: UTF-8 is each caller's check. */
enum { RMQ_BH_FIXED = 21, RMQ_BH_REMARK_AT = 17 };   /* the fixed part's size; the remark's offset */
enum { RMQ_BH_OK = 0, RMQ_BH_END = 0, RMQ_BH_FIELD = 1, RMQ_BH_SHORT, RMQ_BH_REMARK, RMQ_BH_EXT,
       RMQ_BH_TRUNCATED, RMQ_BH_KEY, RMQ_BH_VALUE };

typedef struct {
    int16_t code, version, klen;
    uint8_t language;
    int32_t opaque, flag, remark_len, ext_len, vlen;
    size_t pos, end, at;    /* the next ext field, the end of the ext fields, where the last began */
} rmq_bheader;

/* The fixed part and the remark/ext lengths of the header d[0, n): RMQ_BH_OK, or
 * the first length that does not fit (RMQ_BH_SHORT, _REMARK, _EXT). */
static inline int rmq_bh_start(const uint8_t *d, size_t n, rmq_bheader *h)
{
    if (n < RMQ_BH_FIXED)
        return RMQ_BH_SHORT;
    h->code = rmq_be16(d);
    h->language = d[2];
    h->version = rmq_be16(d + 3);
    h->opaque = rmq_be32(d + 5);
    h->flag = rmq_be32(d + 9);
    h->remark_len = rmq_be32(d + 13);
    if (h->remark_len < 0 || (size_t)h->remark_len > n - RMQ_BH_FIXED)
        return RMQ_BH_REMARK;
    h->pos = RMQ_BH_FIXED + (size_t)h->remark_len;
    h->ext_len = rmq_be32(d + h->pos - 4);
    if (h->ext_len < 0 || (size_t)h->ext_len > n - h->pos)
        return RMQ_BH_EXT;
    h->end = h->pos + (size_t)h->ext_len;
    return RMQ_BH_OK;
}

/* The next ext field (key d + h->at + 2, value after it): RMQ_BH_FIELD, RMQ_BH_END,
 * or the length that does not fit (RMQ_BH_TRUNCATED, _KEY, _VALUE). */
static inline int rmq_bh_next(const uint8_t *d, rmq_bheader *h)
{
    size_t left = h->end - h->pos;
    h->at = h->pos;
    if (left == 0)
        return RMQ_BH_END;
    if (left < 2)
        return RMQ_BH_TRUNCATED;
    h->klen = rmq_be16(d + h->pos);
    if (h->klen < 0 || (size_t)h->klen + 6 > left)
        return RMQ_BH_KEY;
    h->vlen = rmq_be32(d + h->pos + 2 + h->klen);
    if (h->vlen < 0 || (size_t)h->vlen > left - 6 - (size_t)h->klen)
        return RMQ_BH_VALUE;
    h->pos += 6 + (size_t)h->klen + (size_t)h->vlen;
    return RMQ_BH_FIELD;
}

/* The decimal digits of v into buf (room for 20); returns their count. */
static inline size_t rmq_fmt_int(char *buf, int64_t v)
{
    char tmp[24];
    size_t i = sizeof tmp, n;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        tmp[--i] = '-';
    n = sizeof tmp - i;
    memcpy(buf, tmp + i, n);
    return n;
}

/* A JSON number at p (exact grammar; *is_int: no fraction, no exponent): the
 * position after it, or NULL with *at where it goes wrong and *why 1 (digits),
 * 2 (fraction) or 3 (exponent). jsonio.pxi's reader and scan.c's both use it. */
static inline const uint8_t *rmq_digits(const uint8_t *p, const uint8_t *end)
{
    while (p < end && *p >= '0' && *p <= '9')
        p++;
    return p;
}

static inline const uint8_t *rmq_scan_num(const uint8_t *p, const uint8_t *end, int *is_int,
                                          const uint8_t **at, int *why)
{
    const uint8_t *d;
    *is_int = 1;
    *why = 1;
    if (p < end && *p == '-')
        p++;
    d = p;
    p = p < end && *p == '0' ? p + 1 : rmq_digits(p, end);     /* no leading zeros */
    if (p == d)
        goto bad;
    if (p < end && *p == '.') {
        *is_int = 0;
        *why = 2;
        d = p + 1;
        if ((p = rmq_digits(d, end)) == d)
            goto bad;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_int = 0;
        *why = 3;
        d = p + 1 + (end - p > 1 && (p[1] == '+' || p[1] == '-'));
        if ((p = rmq_digits(d, end)) == d)
            goto bad;
    }
    return p;
bad:
    *at = p;
    return NULL;
}

/* The fixed pieces of a JSON response header as encode_json_header writes it
 * (fastjson: fields in alphabetical order), for it and for scan.c's route answer. */
#define RMQ_JH_CODE "{\"code\":"
#define RMQ_JH_FLAG ",\"flag\":"
#define RMQ_JH_LANGUAGE ",\"language\":"
#define RMQ_JH_OPAQUE ",\"opaque\":"
#define RMQ_JH_TAIL ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":"
#define RMQ_LIT_LEN(s) (sizeof(s) - 1)   /* s: a string literal, never a pointer */

/* Buffer budgets and lock ownership, checked in RMQ_DEBUG builds only. */
#if RMQ_DEBUG
#include <assert.h>
#define RMQ_ASSERT(c) assert(c)
#else
#define RMQ_ASSERT(c) ((void)0)
#endif

#endif
