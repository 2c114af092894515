/* SipHash-1-3 (Aumasson and Bernstein; CPython's choice for str since 3.11):
 * one compression round per 8-byte word and three finalization rounds, enough
 * against hash flooding, and cheap on short names (bench/README.md). See hash.h. */
#include "hash.h"

#include <string.h>

static uint64_t key0, key1;

static inline uint64_t le64(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    return w;
}

void rmq_hash_set_key(const unsigned char key[16])
{
    key0 = le64(key);
    key1 = le64(key + 8);
}

#define ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                        \
    do {                                                                \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);       \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                          \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                          \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);       \
    } while (0)

uint64_t rmq_siphash13(uint64_t k0, uint64_t k1, const void *src, size_t n)
{
    const unsigned char *p = src;
    uint64_t v0 = k0 ^ 0x736f6d6570736575ULL, v1 = k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = k0 ^ 0x6c7967656e657261ULL, v3 = k1 ^ 0x7465646279746573ULL;
    uint64_t last = (uint64_t)n << 56, m;
    size_t i;
    for (; n >= 8; p += 8, n -= 8) {
        m = le64(p);
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    for (i = 0; i < n; i++)             /* the 0-7 bytes left, little-endian */
        last |= (uint64_t)p[i] << (8 * i);
    v3 ^= last;
    SIPROUND;
    v0 ^= last;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t rmq_hash(const void *p, size_t n)
{
    return rmq_siphash13(key0, key1, p, n);
}
