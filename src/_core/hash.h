/* The keyed hash of the core's hash tables (routetable.c's topic table,
 * scan.c's duplicate-key check): SipHash-1-3, 64-bit, as CPython's str hash.
 *
 * Topic names and topicConfigTable keys are chosen by clients and brokers: with
 * an unkeyed hash, names crafted to share a bucket turn every insert and lookup
 * into a walk of one long chain. Keyed with a secret, random per process, the
 * buckets cannot be predicted from outside.
 *
 * The key: 16 bytes from os.urandom, set once at import of rmq._core (scan.pxi)
 * before any table exists. A forked child inherits it, as it inherits CPython's
 * hash secret; it must, since the tables it inherits are hashed with it.
 */
#ifndef RMQ_HASH_H
#define RMQ_HASH_H

#include <stddef.h>
#include <stdint.h>

/* Set the process key (16 bytes, little-endian k0 then k1). Call once, before
 * any rmq_hash: a table hashed under another key cannot be searched. */
void rmq_hash_set_key(const unsigned char key[16]);

/* SipHash-1-3 of p[0:n] under the process key. */
uint64_t rmq_hash(const void *p, size_t n);

/* SipHash-1-3 under an explicit key (for the test vectors). */
uint64_t rmq_siphash13(uint64_t k0, uint64_t k1, const void *p, size_t n);

#endif
