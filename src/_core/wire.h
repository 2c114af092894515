/* Wire facts the C files and the Cython code share, written once (jsonio.pxi
 * declares this header for every .pxi): the request code the fast path answers,
 * the version rmq writes, the zlib sniff, big-endian fields, integers, the JSON
 * response header's pieces and the RMQ_DEBUG assertion.
 */
#ifndef RMQ_WIRE_H
#define RMQ_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* rmq.protocol.RequestCode.GET_ROUTEINFO_BY_TOPIC and CURRENT_VERSION (jsonio.pxi
 * refuses to import if they differ; tests/test_core_agreement.py checks them). */
enum { RMQ_GET_ROUTEINFO_BY_TOPIC = 105, RMQ_CURRENT_VERSION = 409 };

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

static inline void rmq_put_be32(char *p, uint32_t v)
{
    p[0] = (char)(v >> 24);
    p[1] = (char)(v >> 16);
    p[2] = (char)(v >> 8);
    p[3] = (char)v;
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
