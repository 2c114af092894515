/* Java's hash tables of string keys: the String hash and ConcurrentHashMap's resize
 * order (see javatable.h; the model and its tests are rmq.javaorder's). */
#include "javatable.h"

#include <stdlib.h>
#include <string.h>

static inline int continuation(unsigned char b)
{
    return (b & 0xC0) == 0x80;
}

uint32_t jt_spread_hash(const unsigned char *p, size_t n)
{
    uint32_t h = 0;                 /* Java's int arithmetic: modulo 2**32 */
    size_t i = 0;
    while (i < n) {
        uint32_t c = p[i];
        if (c < 0x80) {
            i += 1;
        } else if ((c & 0xE0) == 0xC0 && n - i > 1 && continuation(p[i + 1])) {
            c = ((c & 0x1F) << 6) | (p[i + 1] & 0x3F);
            i += 2;
        } else if ((c & 0xF0) == 0xE0 && n - i > 2 && continuation(p[i + 1])
                   && continuation(p[i + 2])) {
            /* (a lone surrogate too: one UTF-16 unit, as Java holds it) */
            c = ((c & 0x0F) << 12) | ((p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F);
            i += 3;
        } else if ((c & 0xF8) == 0xF0 && n - i > 3 && continuation(p[i + 1])
                   && continuation(p[i + 2]) && continuation(p[i + 3])) {
            c = ((c & 0x07) << 18) | ((p[i + 1] & 0x3F) << 12) | ((p[i + 2] & 0x3F) << 6)
                | (p[i + 3] & 0x3F);
            i += 4;
            if (c > 0xFFFF) {       /* a surrogate pair in UTF-16 */
                c -= 0x10000;
                h = 31 * h + (0xD800 + (c >> 10));
                c = 0xDC00 + (c & 0x3FF);
            }
        } else {
            i += 1;                 /* malformed: never from Python's encoder */
        }
        h = 31 * h + c;
    }
    return h ^ (h >> 16);
}

static inline size_t threshold(size_t size)
{
    return size - (size >> 2);      /* sizeCtl: 3/4 of the table */
}

/* A bucket's keys sorted as the table iterates them: those a resize placed by their
 * rank, then the others by insertion. One 64-bit word each: the class (bit 63), the
 * rank or the insertion (bits 32-62), the key's index (bits 0-31). */
static inline uint64_t iteration_key(const int32_t *rank, uint32_t i)
{
    return rank[i] >= 0 ? ((uint64_t)(uint32_t)rank[i] << 32) | i
                        : (UINT64_C(1) << 63) | ((uint64_t)i << 32) | i;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void sort_keys(uint64_t *k, size_t m)
{
    if (m > 16) {
        qsort(k, m, sizeof *k, cmp_u64);
        return;
    }
    for (size_t i = 1; i < m; i++) {
        uint64_t v = k[i];
        size_t j = i;
        for (; j > 0 && k[j - 1] > v; j--)
            k[j] = k[j - 1];
        k[j] = v;
    }
}

typedef struct {
    uint32_t *ends;                 /* per bucket: the end of its keys in members */
    uint32_t *members;              /* the keys present, by bucket, in insertion order */
    uint64_t *keys;                 /* one bucket's, sorted (iteration_key) */
    uint32_t *half;                 /* one half of a bucket, as the new table has it */
    int32_t *fresh;                 /* the ranks after the resize */
} scratch;

/* One half of a split bucket (bit: its hashes' bit of the old size), as transfer
 * links it: the keys before the last run, pushed in front one by one (so reversed),
 * then the last run as it was, when it is bound for this half. Keys out of insertion
 * order get their rank. */
static void place_half(const scratch *w, size_t m, size_t last_run, uint32_t bit,
                       uint32_t last_bit, const uint32_t *hashes, size_t old_size)
{
    size_t len = 0;
    for (size_t j = last_run; j-- > 0;) {
        uint32_t i = (uint32_t)w->keys[j];
        if ((hashes[i] & old_size) == bit)
            w->half[len++] = i;
    }
    if (bit == last_bit)
        for (size_t j = last_run; j < m; j++)
            w->half[len++] = (uint32_t)w->keys[j];
    for (size_t r = 1; r < len; r++) {
        if (w->half[r] < w->half[r - 1]) {       /* out of order: all of it placed */
            for (size_t q = 0; q < len; q++)
                w->fresh[w->half[q]] = (int32_t)q;
            return;
        }
    }
}

/* ConcurrentHashMap.transfer from size to 2 x size of the keys present at the
 * resize: the first threshold(size) of them. Only buckets of two keys or more can
 * come out of insertion order. */
static void transfer(const scratch *w, size_t size, size_t n, const uint32_t *hashes,
                     int32_t *rank)
{
    size_t present = threshold(size), mask = size - 1;
    memset(w->ends, 0, size * sizeof *w->ends);
    for (size_t i = 0; i < present; i++)
        w->ends[hashes[i] & mask]++;
    uint32_t total = 0;
    for (size_t b = 0; b < size; b++) {     /* counts -> starts */
        uint32_t c = w->ends[b];
        w->ends[b] = total;
        total += c;
    }
    for (size_t i = 0; i < present; i++)    /* starts -> ends */
        w->members[w->ends[hashes[i] & mask]++] = (uint32_t)i;
    for (size_t i = 0; i < n; i++)
        w->fresh[i] = -1;
    uint32_t begin = 0;
    for (size_t b = 0; b < size; begin = w->ends[b], b++) {
        size_t m = w->ends[b] - begin;
        const uint32_t *in = w->members + begin;
        if (m < 2 || (m == 2 && rank[in[0]] < 0 && rank[in[1]] < 0))
            continue;               /* two keys in insertion order: no reversal */
        for (size_t j = 0; j < m; j++)
            w->keys[j] = iteration_key(rank, in[j]);
        sort_keys(w->keys, m);
        uint32_t last_bit = hashes[(uint32_t)w->keys[m - 1]] & size;
        size_t last_run = m - 1;
        while (last_run > 0 && (hashes[(uint32_t)w->keys[last_run - 1]] & size) == last_bit)
            last_run--;
        place_half(w, m, last_run, 0, last_bit, hashes, size);
        place_half(w, m, last_run, (uint32_t)size, last_bit, hashes, size);
    }
    memcpy(rank, w->fresh, n * sizeof *rank);
}

int jt_concurrent_resizes(size_t *size, size_t n, const uint32_t *hashes, int32_t *rank)
{
    size_t last = *size;            /* the size the last resize doubles */
    if (n < threshold(last) || last >= JT_MAXIMUM_CAPACITY)
        return 0;
    while (n >= threshold(last << 1) && (last << 1) < JT_MAXIMUM_CAPACITY)
        last <<= 1;
    if (n > INT32_MAX)              /* (keys indexed in 31 bits) */
        return -1;
    /* all memory first: a failure changes nothing */
    scratch w = {
        .ends = malloc(last * sizeof(uint32_t)),
        .members = malloc(threshold(last) * sizeof(uint32_t)),
        .keys = malloc(threshold(last) * sizeof(uint64_t)),
        .half = malloc(threshold(last) * sizeof(uint32_t)),
        .fresh = malloc(n * sizeof(int32_t)),
    };
    int rc = -1;
    if (w.ends && w.members && w.keys && w.half && w.fresh) {
        for (size_t s = *size; s <= last; s <<= 1)
            transfer(&w, s, n, hashes, rank);
        *size = last << 1;
        rc = 0;
    }
    free(w.ends);
    free(w.members);
    free(w.keys);
    free(w.half);
    free(w.fresh);
    return rc;
}
