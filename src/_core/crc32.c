/*
 * crc32.c - CRC-32/IEEE 802.3 (reflected polynomial 0xEDB88320; the same
 * value as zlib.crc32 and java.util.zip.CRC32) with run-time CPU dispatch.
 *
 * Kernels:
 *   vpclmulqdq  x86-64, AVX-512 (F/VL/BW) + VPCLMULQDQ: carry-less multiply
 *               folding of 4 x 512-bit lanes (256 bytes per iteration);
 *               one 512-bit lane for 64..255 bytes, 128-bit folds for
 *               16..63, a masked load for 12..15, the table below 12.
 *   pclmulqdq   x86-64, PCLMULQDQ + SSE4.1: folding of 4 x 128-bit lanes
 *               (64 bytes per iteration); the table below 16 bytes.
 *   armv8       aarch64 CRC32 instructions (CRC32X), 3 interleaved streams
 *               combined with a software carry-less multiply + CRC32X.
 *   table       portable slicing-by-8.
 *
 * The folding kernels follow the method of V. Gopal et al., "Fast CRC
 * Computation for Generic Polynomials Using PCLMULQDQ Instruction" (Intel,
 * 2009), as also used (under BSD/zlib-style licenses) by Intel ISA-L,
 * Chromium's zlib and zlib-ng: fold 128-bit blocks forward by multiplying
 * with x^(N+32) mod P and x^(N-32) mod P, a partial last block is handled
 * with the PSHUFB/PBLENDVB shift trick, and the final 128 bits are reduced
 * to 32 with two folds and a Barrett reduction.  Slicing-by-8 is due to
 * M. Kounavis and F. Berry (Intel).  All code and constants here were
 * written/derived independently (constants: x^n mod P in the bit-reflected
 * domain, see the K* definitions).
 *
 * Dispatch: the kernel is resolved once (lazily, on first use) into an
 * atomic pointer; concurrent first calls compute the same answer and the
 * first compare-and-swap wins.  The environment variable RMQ_CRC32_KERNEL
 * (vpclmulqdq | pclmulqdq | armv8 | table) forces a kernel when the CPU
 * supports it; rmq_crc32_set_kernel() does the same programmatically.
 *
 * SIMD code is enabled only through __attribute__((target(...))) on the
 * functions that need it, so this file builds with plain "cc -O2 -c".
 */
#include "crc32.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RMQ_CRC_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif

#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__)) && \
    defined(__linux__)
#define RMQ_CRC_ARM 1
#include <arm_acle.h>
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1UL << 7)
#endif
#endif

typedef uint32_t (*crc_fn)(uint32_t, const unsigned char *, size_t);

/* ------------------------------------------------------------------------ */
/* Portable slicing-by-8.  All kernels work on the pre-inverted state.      */

/* crc_tab[0]: byte-wise table of the reflected polynomial 0xEDB88320;
 * crc_tab[k][n]: the CRC of byte n followed by k zero bytes.  Built from the
 * polynomial when the library is loaded (a constructor: before any thread can
 * call a kernel), not kept by hand as 2,048 literals. */
static uint32_t crc_tab[8][256];

__attribute__((constructor)) static void crc_tab_init(void)
{
    uint32_t n, k, c;
    for (n = 0; n < 256; n++) {
        c = n;
        for (k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        crc_tab[0][n] = c;
    }
    for (k = 1; k < 8; k++)
        for (n = 0; n < 256; n++)
            crc_tab[k][n] = (crc_tab[k - 1][n] >> 8) ^ crc_tab[0][crc_tab[k - 1][n] & 0xff];
}

static inline uint32_t load32le(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static uint32_t crc_table_kernel(uint32_t c, const unsigned char *p,
                                 size_t len)
{
    while (len >= 8) {
        uint32_t a = c ^ load32le(p);
        uint32_t b = load32le(p + 4);
        c = crc_tab[7][a & 0xff] ^ crc_tab[6][(a >> 8) & 0xff] ^
            crc_tab[5][(a >> 16) & 0xff] ^ crc_tab[4][a >> 24] ^
            crc_tab[3][b & 0xff] ^ crc_tab[2][(b >> 8) & 0xff] ^
            crc_tab[1][(b >> 16) & 0xff] ^ crc_tab[0][b >> 24];
        p += 8;
        len -= 8;
    }
    if (len >= 4) {
        uint32_t a = c ^ load32le(p);
        c = crc_tab[3][a & 0xff] ^ crc_tab[2][(a >> 8) & 0xff] ^
            crc_tab[1][(a >> 16) & 0xff] ^ crc_tab[0][a >> 24];
        p += 4;
        len -= 4;
    }
    /* 1..3 bytes in one step: c = (c >> 8k) ^ sum T[k-1-i][byte i]. */
    switch (len) {
    case 3: {
        uint32_t a = c ^ ((uint32_t)p[0] | ((uint32_t)p[1] << 8) |
                          ((uint32_t)p[2] << 16));
        c = (c >> 24) ^ crc_tab[2][a & 0xff] ^ crc_tab[1][(a >> 8) & 0xff] ^
            crc_tab[0][(a >> 16) & 0xff];
        break;
    }
    case 2: {
        uint32_t a = c ^ ((uint32_t)p[0] | ((uint32_t)p[1] << 8));
        c = (c >> 16) ^ crc_tab[1][a & 0xff] ^ crc_tab[0][(a >> 8) & 0xff];
        break;
    }
    case 1:
        c = (c >> 8) ^ crc_tab[0][(c ^ p[0]) & 0xff];
        break;
    default:
        break;
    }
    return c;
}

/* ------------------------------------------------------------------------ */
/* x86-64: PCLMULQDQ / VPCLMULQDQ folding.                                   */
#ifdef RMQ_CRC_X86

/*
 * Bit-reflected domain: a 128-bit register holds message bits with bit 0
 * (LSB of byte 0) as the highest power.  A 64x33-bit carry-less product of
 * qword a with constant reflect32(k) << 1 equals a * k * x^32 in the 128-bit
 * frame, so folding a block forward by N bits uses
 *     lo qword * (x^(N+32) mod P)  xor  hi qword * (x^(N-32) mod P).
 * K<n> below is reflect32(x^n mod P) << 1.
 */
#define K64 0x163cd6124ULL /* x^64 mod P */
#define K96 0x0ccaa009eULL /* x^96 mod P */
#define K160 0x1751997d0ULL /* x^160 mod P */
#define K224 0x15a546366ULL /* x^224 mod P */
#define K288 0x0f1da05aaULL /* x^288 mod P */
#define K352 0x174359406ULL /* x^352 mod P */
#define K416 0x03db1ecdcULL /* x^416 mod P */
#define K480 0x1c6e41596ULL /* x^480 mod P */
#define K544 0x154442bd4ULL /* x^544 mod P */
#define K992 0x14a7fe880ULL /* x^992 mod P */
#define K1056 0x1e88ef372ULL /* x^1056 mod P */
#define K1504 0x12e958ac4ULL /* x^1504 mod P */
#define K1568 0x1821d8bc0ULL /* x^1568 mod P */
#define K2016 0x1322d1430ULL /* x^2016 mod P */
#define K2080 0x11542778aULL /* x^2080 mod P */
#define KPOLY 0x1db710641ULL /* P(x), bit-reflected, 33 bits */
#define KMU 0x1f7011641ULL /* floor(x^64 / P(x)), bit-reflected, 33 bits */

#define TGT_CLMUL __attribute__((target("pclmul,sse4.1")))
#define TGT_AVX512 \
    __attribute__((target("avx512f,avx512vl,avx512bw,vpclmulqdq,pclmul,sse4.1")))
/* Below this many bytes the table beats the masked-load clmul path. */
#define CRC_MASKED_MIN 12
#define INLINE static inline __attribute__((always_inline))

/* PSHUFB control for the partial-block trick: bytes (k - 16) & 0xff. */
static const unsigned char crc_shuf_tab[32] __attribute__((aligned(32))) = {
    0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7,
    0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff,
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
    0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
};

INLINE TGT_CLMUL __m128i kpair(uint64_t lo, uint64_t hi)
{
    return _mm_set_epi64x((long long)hi, (long long)lo);
}

/* x * x^N mod P (as a 128-bit value), k = kpair(K(N+32), K(N-32)). */
INLINE TGT_CLMUL __m128i fold16(__m128i x, __m128i k)
{
    return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00),
                         _mm_clmulepi64_si128(x, k, 0x11));
}

/* State x covers the message up to p; r (1..15) bytes remain at p, and at
 * least 16 bytes precede p + r.  Returns the new 128-bit state. */
INLINE TGT_CLMUL __m128i fold_partial(__m128i x, const unsigned char *p,
                                      size_t r)
{
    const __m128i k128 = kpair(K160, K96);
    __m128i last = _mm_loadu_si128((const __m128i *)(p + r - 16));
    __m128i m1 = _mm_loadu_si128((const __m128i *)(crc_shuf_tab + r));
    __m128i m2 = _mm_xor_si128(m1, _mm_set1_epi8((char)0x80));
    __m128i hi = _mm_shuffle_epi8(x, m1); /* first r bytes, moved to end */
    __m128i lo = _mm_blendv_epi8(_mm_shuffle_epi8(x, m2), last, m2);
    return _mm_xor_si128(fold16(hi, k128), lo);
}

/* Reduce a 128-bit state x (message poly M) to M * x^32 mod P. */
INLINE TGT_CLMUL uint32_t reduce128(__m128i x)
{
    const __m128i mask32 = _mm_setr_epi32(-1, 0, 0, 0);
    const __m128i kb = kpair(KPOLY, KMU);
    /* 128 -> 96 bits: hi qword shifted up, lo qword * x^96. */
    __m128i t = _mm_xor_si128(_mm_srli_si128(x, 8),
                              _mm_clmulepi64_si128(x, kpair(K96, 0), 0x00));
    /* 96 -> 64 bits: top 32 bits * x^64. */
    t = _mm_xor_si128(_mm_srli_si128(t, 4),
                      _mm_clmulepi64_si128(_mm_and_si128(t, mask32),
                                           kpair(K64, 0), 0x00));
    /* Barrett: q = floor(hi32 * mu / x^32); r = t - q * P. */
    __m128i q = _mm_clmulepi64_si128(_mm_and_si128(t, mask32), kb, 0x10);
    q = _mm_clmulepi64_si128(_mm_and_si128(q, mask32), kb, 0x00);
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(t, q), 1);
}

/* Core for len >= 16: 4 x 128-bit lanes, then 16-byte folds, tail, reduce. */
INLINE TGT_CLMUL uint32_t crc_clmul128_body(uint32_t c, const unsigned char *p,
                                            size_t len)
{
    __m128i x0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p),
                               _mm_cvtsi32_si128((int)c));
    const __m128i k128 = kpair(K160, K96);
    p += 16;
    len -= 16;
    if (len >= 48) {
        const __m128i k512 = kpair(K544, K480);
        __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 0));
        __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 16));
        __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 32));
        p += 48;
        len -= 48;
        while (len >= 64) {
            x0 = _mm_xor_si128(fold16(x0, k512),
                               _mm_loadu_si128((const __m128i *)(p + 0)));
            x1 = _mm_xor_si128(fold16(x1, k512),
                               _mm_loadu_si128((const __m128i *)(p + 16)));
            x2 = _mm_xor_si128(fold16(x2, k512),
                               _mm_loadu_si128((const __m128i *)(p + 32)));
            x3 = _mm_xor_si128(fold16(x3, k512),
                               _mm_loadu_si128((const __m128i *)(p + 48)));
            p += 64;
            len -= 64;
        }
        x0 = _mm_xor_si128(
            _mm_xor_si128(fold16(x0, kpair(K416, K352)),
                          fold16(x1, kpair(K288, K224))),
            _mm_xor_si128(fold16(x2, k128), x3));
    }
    while (len >= 16) {
        x0 = _mm_xor_si128(fold16(x0, k128),
                           _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }
    if (len)
        x0 = fold_partial(x0, p, len);
    return reduce128(x0);
}

TGT_CLMUL static uint32_t crc_pclmul_kernel(uint32_t c, const unsigned char *p,
                                            size_t len)
{
    if (len < 16)
        return crc_table_kernel(c, p, len);
    return crc_clmul128_body(c, p, len);
}

INLINE TGT_AVX512 __m512i fold64(__m512i x, __m512i k, __m512i data)
{
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                     _mm512_clmulepi64_epi128(x, k, 0x11),
                                     data, 0x96);
}

INLINE TGT_AVX512 __m512i kpair512(uint64_t lo, uint64_t hi)
{
    return _mm512_set4_epi64((long long)hi, (long long)lo, (long long)hi,
                             (long long)lo);
}

TGT_AVX512 static uint32_t crc_vpclmul_kernel(uint32_t c,
                                              const unsigned char *p,
                                              size_t len)
{
    __m512i z0;
    if (len < 64) {
        if (len >= 16)
            return crc_clmul128_body(c, p, len);
        if (len < CRC_MASKED_MIN)
            return crc_table_kernel(c, p, len);
        /* CRC_MASKED_MIN (>= 4) .. 15 bytes: masked load (no over-read),
         * state xored into the first 4 bytes, message moved to the end of
         * the register. */
        {
            __m128i x = _mm_maskz_loadu_epi8((__mmask16)((1u << len) - 1), p);
            x = _mm_xor_si128(x, _mm_cvtsi32_si128((int)c));
            x = _mm_shuffle_epi8(
                x, _mm_loadu_si128((const __m128i *)(crc_shuf_tab + len)));
            return reduce128(x);
        }
    }
    z0 = _mm512_xor_si512(_mm512_loadu_si512((const void *)p),
                          _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)c)));
    p += 64;
    len -= 64;
    if (len >= 192) {
        const __m512i k2048 = kpair512(K2080, K2016);
        __m512i z1 = _mm512_loadu_si512((const void *)(p + 0));
        __m512i z2 = _mm512_loadu_si512((const void *)(p + 64));
        __m512i z3 = _mm512_loadu_si512((const void *)(p + 128));
        p += 192;
        len -= 192;
        while (len >= 256) {
            z0 = fold64(z0, k2048, _mm512_loadu_si512((const void *)(p + 0)));
            z1 = fold64(z1, k2048, _mm512_loadu_si512((const void *)(p + 64)));
            z2 = fold64(z2, k2048, _mm512_loadu_si512((const void *)(p + 128)));
            z3 = fold64(z3, k2048, _mm512_loadu_si512((const void *)(p + 192)));
            p += 256;
            len -= 256;
        }
        /* 4 x 512 -> 512 bits. */
        z0 = fold64(z0, kpair512(K1568, K1504),
                    fold64(z1, kpair512(K1056, K992),
                           fold64(z2, kpair512(K544, K480), z3)));
    }
    {
        const __m512i k512 = kpair512(K544, K480);
        while (len >= 64) {
            z0 = fold64(z0, k512, _mm512_loadu_si512((const void *)p));
            p += 64;
            len -= 64;
        }
    }
    /* 4 x 128 -> 128 bits: lanes 0..2 folded by 384/256/128 bits. */
    {
        const __m512i kl = _mm512_set_epi64(0, 0, (long long)K96,
                                            (long long)K160, (long long)K224,
                                            (long long)K288, (long long)K352,
                                            (long long)K416);
        __m512i t = fold64(z0, kl, _mm512_maskz_mov_epi64(0xc0, z0));
        __m256i y = _mm256_xor_si256(_mm512_castsi512_si256(t),
                                     _mm512_extracti64x4_epi64(t, 1));
        __m128i x = _mm_xor_si128(_mm256_castsi256_si128(y),
                                  _mm256_extracti128_si256(y, 1));
        const __m128i k128 = kpair(K160, K96);
        while (len >= 16) {
            x = _mm_xor_si128(fold16(x, k128),
                              _mm_loadu_si128((const __m128i *)p));
            p += 16;
            len -= 16;
        }
        if (len)
            x = fold_partial(x, p, len);
        return reduce128(x);
    }
}

#define F_PCLMUL 1u
#define F_VPCLMUL 2u

static unsigned x86_detect(void)
{
    unsigned a, b, c, d, f = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    if ((c & (1u << 1)) && (c & (1u << 19))) /* PCLMULQDQ, SSE4.1 */
        f |= F_PCLMUL;
    /* OSXSAVE + AVX, then XCR0: SSE|AVX (bits 1,2), opmask|ZMM (5,6,7). */
    if ((f & F_PCLMUL) && (c & (1u << 27)) && (c & (1u << 28)) &&
        __get_cpuid_max(0, NULL) >= 7) {
        unsigned lo, hi;
        __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        if ((lo & 0xe6) == 0xe6) {
            __cpuid_count(7, 0, a, b, c, d);
            if ((b & (1u << 16)) && (b & (1u << 30)) && (b & (1u << 31)) &&
                (c & (1u << 10))) /* AVX512F, BW, VL; VPCLMULQDQ */
                f |= F_VPCLMUL;
        }
    }
    return f;
}
#endif /* RMQ_CRC_X86 */

/* ------------------------------------------------------------------------ */
/* aarch64: ARMv8 CRC32 instructions.                                        */
#ifdef RMQ_CRC_ARM

#define TGT_CRC __attribute__((target("+crc")))

/* n * (x^(8*128-33) mod P), bit-reflected, n = 0..15 */
static const uint64_t arm_shift1_128[16] = {
    0x000000000ULL, 0x0910eeec1ULL, 0x1221ddd82ULL, 0x1b3133343ULL,
    0x2443bbb04ULL, 0x2d53555c5ULL, 0x366266686ULL, 0x3f7288847ULL,
    0x488777608ULL, 0x4197998c9ULL, 0x5aa6aab8aULL, 0x53b64454bULL,
    0x6cc4ccd0cULL, 0x65d4223cdULL, 0x7ee51108eULL, 0x77f5ffe4fULL,
};
/* n * (x^(8*256-33) mod P), bit-reflected, n = 0..15 */
static const uint64_t arm_shift2_128[16] = {
    0x000000000ULL, 0x0e95c1271ULL, 0x1d2b824e2ULL, 0x13be43693ULL,
    0x3a57049c4ULL, 0x34c2c5bb5ULL, 0x277c86d26ULL, 0x29e947f57ULL,
    0x74ae09388ULL, 0x7a3bc81f9ULL, 0x69858b76aULL, 0x67104a51bULL,
    0x4ef90da4cULL, 0x406ccc83dULL, 0x53d28feaeULL, 0x5d474ecdfULL,
};
/* n * (x^(8*1024-33) mod P), bit-reflected, n = 0..15 */
static const uint64_t arm_shift1_1024[16] = {
    0x000000000ULL, 0x0bbf2f6d6ULL, 0x177e5edacULL, 0x1cc171b7aULL,
    0x2efcbdb58ULL, 0x254392d8eULL, 0x3982e36f4ULL, 0x323dcc022ULL,
    0x5df97b6b0ULL, 0x564654066ULL, 0x4a8725b1cULL, 0x41380adcaULL,
    0x7305c6de8ULL, 0x78bae9b3eULL, 0x647b98044ULL, 0x6fc4b7692ULL,
};
/* n * (x^(8*2048-33) mod P), bit-reflected, n = 0..15 */
static const uint64_t arm_shift2_1024[16] = {
    0x000000000ULL, 0x07b4aa8b7ULL, 0x0f695516eULL, 0x08ddff9d9ULL,
    0x1ed2aa2dcULL, 0x196600a6bULL, 0x11bbff3b2ULL, 0x160f55b05ULL,
    0x3da5545b8ULL, 0x3a11fed0fULL, 0x32cc014d6ULL, 0x3578abc61ULL,
    0x2377fe764ULL, 0x24c354fd3ULL, 0x2c1eab60aULL, 0x2baa01ebdULL,
};

static inline uint64_t load64le(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* 32x32 -> 64-bit carry-less product of c with a constant, via a table of
 * the constant's multiples by 0..15. */
static inline uint64_t clmul_tab(uint32_t c, const uint64_t *t)
{
    uint64_t r = 0;
    int i;
    for (i = 0; i < 32; i += 4)
        r ^= t[(c >> i) & 15] << i;
    return r;
}

/* Three interleaved streams of blk bytes each; the partial CRCs are combined
 * with crc(A|B|C) = shift(crcA, 2 blk) ^ shift(crcB, blk) ^ crcC where
 * shift(c, n) = crc32d(0, clmul(c, x^(8n-33) mod P)) (linear, so one crc32d
 * reduces both products). */
static inline __attribute__((always_inline)) TGT_CRC uint32_t
arm_3way(uint32_t c, const unsigned char **pp, size_t *plen, const size_t blk,
         const uint64_t *t1, const uint64_t *t2)
{
    const unsigned char *p = *pp;
    size_t len = *plen;
    while (len >= 3 * blk) {
        uint32_t c1 = 0, c2 = 0;
        size_t i;
        for (i = 0; i < blk; i += 8) {
            c = __crc32d(c, load64le(p + i));
            c1 = __crc32d(c1, load64le(p + blk + i));
            c2 = __crc32d(c2, load64le(p + 2 * blk + i));
        }
        c = __crc32d(0, clmul_tab(c, t2) ^ clmul_tab(c1, t1)) ^ c2;
        p += 3 * blk;
        len -= 3 * blk;
    }
    *pp = p;
    *plen = len;
    return c;
}

TGT_CRC static uint32_t crc_armv8_kernel(uint32_t c, const unsigned char *p,
                                         size_t len)
{
    if (len >= 3 * 1024)
        c = arm_3way(c, &p, &len, 1024, arm_shift1_1024, arm_shift2_1024);
    if (len >= 3 * 128)
        c = arm_3way(c, &p, &len, 128, arm_shift1_128, arm_shift2_128);
    while (len >= 32) {
        c = __crc32d(c, load64le(p));
        c = __crc32d(c, load64le(p + 8));
        c = __crc32d(c, load64le(p + 16));
        c = __crc32d(c, load64le(p + 24));
        p += 32;
        len -= 32;
    }
    while (len >= 8) {
        c = __crc32d(c, load64le(p));
        p += 8;
        len -= 8;
    }
    if (len & 4) {
        c = __crc32w(c, load32le(p));
        p += 4;
    }
    if (len & 2) {
        c = __crc32h(c, (uint16_t)(p[0] | (p[1] << 8)));
        p += 2;
    }
    if (len & 1)
        c = __crc32b(c, p[0]);
    return c;
}
#endif /* RMQ_CRC_ARM */

/* ------------------------------------------------------------------------ */
/* Dispatch.                                                                 */

struct crc_kernel {
    const char *name;
    crc_fn fn;
};

enum { KI_VPCLMUL, KI_PCLMUL, KI_ARMV8, KI_TABLE, KI_COUNT };

static const struct crc_kernel crc_kernels[KI_COUNT] = {
#ifdef RMQ_CRC_X86
    {"vpclmulqdq", crc_vpclmul_kernel},
    {"pclmulqdq", crc_pclmul_kernel},
#else
    {"vpclmulqdq", NULL},
    {"pclmulqdq", NULL},
#endif
#ifdef RMQ_CRC_ARM
    {"armv8", crc_armv8_kernel},
#else
    {"armv8", NULL},
#endif
    {"table", crc_table_kernel},
};

static const struct crc_kernel *crc_active; /* atomic; NULL = unresolved */
static unsigned crc_feat;                   /* atomic; bit 31 = detected */

#define KBIT(i) (1u << (i))
#define FEAT_DONE 0x80000000u

/* Bitmask of usable kernels (KBIT(KI_*)); idempotent, race-free. */
static unsigned crc_supported(void)
{
    unsigned f = __atomic_load_n(&crc_feat, __ATOMIC_RELAXED);
    if (f & FEAT_DONE)
        return f;
    f = FEAT_DONE | KBIT(KI_TABLE);
#ifdef RMQ_CRC_X86
    {
        unsigned x = x86_detect();
        if (x & F_PCLMUL)
            f |= KBIT(KI_PCLMUL);
        if (x & F_VPCLMUL)
            f |= KBIT(KI_VPCLMUL);
    }
#endif
#ifdef RMQ_CRC_ARM
    if (getauxval(AT_HWCAP) & HWCAP_CRC32)
        f |= KBIT(KI_ARMV8);
#endif
    __atomic_store_n(&crc_feat, f, __ATOMIC_RELAXED);
    return f;
}

static int crc_find(const char *name)
{
    int i;
    if (name == NULL)
        return -1;
    for (i = 0; i < KI_COUNT; i++)
        if (strcmp(name, crc_kernels[i].name) == 0)
            return i;
    return -1;
}

static int crc_best(unsigned f)
{
    int i;
    for (i = 0; i < KI_COUNT; i++)
        if (f & KBIT(i))
            return i;
    return KI_TABLE;
}

static const struct crc_kernel *crc_resolve(void)
{
    const struct crc_kernel *k, *expected = NULL;
    unsigned f = crc_supported();
    int i = crc_find(getenv("RMQ_CRC32_KERNEL"));
    if (i < 0 || !(f & KBIT(i)))
        i = crc_best(f);
    k = &crc_kernels[i];
    /* First resolver wins; an explicit set_kernel() is never overwritten. */
    if (!__atomic_compare_exchange_n(&crc_active, &expected, k, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        k = expected;
    return k;
}

static inline const struct crc_kernel *crc_get(void)
{
    const struct crc_kernel *k = __atomic_load_n(&crc_active, __ATOMIC_ACQUIRE);
    return k ? k : crc_resolve();
}

uint32_t rmq_crc32(uint32_t crc, const void *data, size_t len)
{
    if (len == 0)
        return crc;
    return ~crc_get()->fn(~crc, (const unsigned char *)data, len);
}

const char *rmq_crc32_kernel(void)
{
    return crc_get()->name;
}

int rmq_crc32_set_kernel(const char *name)
{
    unsigned f = crc_supported();
    int i;
    if (name != NULL && strcmp(name, "auto") == 0)
        i = crc_best(f);
    else
        i = crc_find(name);
    if (i < 0 || !(f & KBIT(i)))
        return -1;
    __atomic_store_n(&crc_active, &crc_kernels[i], __ATOMIC_RELEASE);
    return 0;
}

const char *rmq_crc32_kernels_available(void)
{
    /* One literal per reachable combination (no shared mutable buffer). */
    static const char *const names[16] = {
        "", "vpclmulqdq", "pclmulqdq", "vpclmulqdq,pclmulqdq",
        "armv8", "vpclmulqdq,armv8", "pclmulqdq,armv8",
        "vpclmulqdq,pclmulqdq,armv8",
        "table", "vpclmulqdq,table", "pclmulqdq,table",
        "vpclmulqdq,pclmulqdq,table", "armv8,table", "vpclmulqdq,armv8,table",
        "pclmulqdq,armv8,table", "vpclmulqdq,pclmulqdq,armv8,table",
    };
    return names[crc_supported() & 15u];
}
