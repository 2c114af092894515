/* Java's hash tables of string keys, as far as their iteration order needs: the
 * String hash, and the reordering a ConcurrentHashMap's resize makes. rmq.javaorder
 * keeps the tables' state and the rules; these are its kernels over a million topic
 * names, which it asks of the core (javatable.pxi; the pure-Python twin is
 * rmq.fallback.javatable). */
#ifndef RMQ_JAVATABLE_H
#define RMQ_JAVATABLE_H

#include <stddef.h>
#include <stdint.h>

enum {
    JT_MAXIMUM_CAPACITY = 1 << 30,  /* ConcurrentHashMap.MAXIMUM_CAPACITY */
};

/* HashMap.hash of a Java String given in UTF-8 (lone surrogates as their 3-byte
 * forms, as Python's "surrogatepass" writes them): h ^ (h >>> 16) of
 * String.hashCode over its UTF-16 code units. Reads p[0:n] only, whatever it holds
 * (a malformed byte counts as one unit of its value). */
uint32_t jt_spread_hash(const unsigned char *p, size_t n);

/* The resizes of a ConcurrentHashMap of n keys (hashes: jt_spread_hash of each, in
 * insertion order) from a table of *size buckets: each time the count reaches 3/4 of
 * the table, ConcurrentHashMap.transfer of the keys present then (the first 3/4 x
 * size) into a table twice the size. rank[i]: the place of key i within its bucket
 * where a resize put the bucket out of insertion order, else -1; updated in place
 * for the new table, *size with it. 0, or -1: out of memory (nothing changed). */
int jt_concurrent_resizes(size_t *size, size_t n, const uint32_t *hashes, int32_t *rank);

#endif
