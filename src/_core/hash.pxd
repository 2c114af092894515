# Declarations of hash.h, for the .pxi files of rmq._core (cimported: each C header is
# declared once, here). The keyed hash of the C tables.

from libc.stdint cimport uint64_t

cdef extern from "hash.h" nogil:
    void rmq_hash_set_key(const unsigned char* key)
    uint64_t rmq_hash(const void* p, size_t n)
    uint64_t rmq_siphash13(uint64_t k0, uint64_t k1, const void* p, size_t n)
