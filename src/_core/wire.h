/* Wire facts the C files and the Cython code share, declared once (jsonio.pxi
 * declares this header for Cython): the request code the fast path answers, the
 * version rmq writes, the zlib sniff, and the RMQ_DEBUG assertion.
 */
#ifndef RMQ_WIRE_H
#define RMQ_WIRE_H

#include <stddef.h>
#include <stdint.h>

/* rmq.protocol.RequestCode.GET_ROUTEINFO_BY_TOPIC and CURRENT_VERSION (scan.pxi
 * refuses to import if they differ; tests/test_core_agreement.py checks them). */
enum { RMQ_GET_ROUTEINFO_BY_TOPIC = 105, RMQ_CURRENT_VERSION = 409 };

/* A zlib stream header (RFC 1950: deflate, check bits): how a compressed
 * RegisterBrokerBody is told from JSON, whatever the request header says. */
static inline int rmq_is_zlib(const uint8_t *p, size_t n)
{
    return n >= 2 && (p[0] & 0x0F) == 8 && (((unsigned)p[0] << 8) | p[1]) % 31 == 0;
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
