# Declarations of javatable.h, for the .pxi files of rmq._core (cimported: each C
# header is declared once, here). Java's hash tables of string keys.

from libc.stdint cimport int32_t, uint32_t

cdef extern from "javatable.h" nogil:
    enum:
        JT_MAXIMUM_CAPACITY
    uint32_t jt_spread_hash(const unsigned char* p, size_t n)
    int jt_concurrent_resizes(size_t* size, size_t n, const uint32_t* hashes, int32_t* rank)
