# Java's hash tables of string keys (javatable.c): the kernels rmq.javaorder's model of
# their iteration order runs over every topic name. The twin: rmq.fallback.javatable.

from cpython.array cimport array as _carray, clone as _array_clone

from javatable cimport *

import array as _array

cdef _carray _SEQS = _array.array("Q")
cdef _carray _HASHES = _array.array("I")


cdef uint32_t _java_spread_hash(str s) except? 0:
    cdef bytes utf8
    if PyUnicode_IS_ASCII(s):       # (its characters are its UTF-8)
        return jt_spread_hash(<const unsigned char*>PyUnicode_DATA(s), PyUnicode_GET_LENGTH(s))
    # lone surrogates (from \ud800 escapes) are units of their own, as in Java
    utf8 = s.encode("utf-8", "surrogatepass")
    return jt_spread_hash(<const unsigned char*>PyBytes_AS_STRING(utf8), len(utf8))


def java_spread_hash(str s):
    """``HashMap.hash(key)`` of a Java String: ``h ^ (h >>> 16)`` of ``String.hashCode``
    (over UTF-16 code units; a lone surrogate is its own unit), as an unsigned 32-bit
    int. ``ConcurrentHashMap.spread`` also clears the sign bit, which no table index
    ever reaches. (rmq.javaorder's tables replay Java's over every topic name.)"""
    return _java_spread_hash(s)


cdef tuple _seq_hash_arrays(const uint64_t* seqs, const uint32_t* hashes, size_t n):
    """Two arrays ("Q", "I") of n numbers each, copied from C."""
    cdef _carray s = _array_clone(_SEQS, n, False)
    cdef _carray h = _array_clone(_HASHES, n, False)
    if n:
        memcpy(s.data.as_voidptr, seqs, n * sizeof(uint64_t))
        memcpy(h.data.as_voidptr, hashes, n * sizeof(uint32_t))
    return s, h


def concurrent_resizes(size_t size, seqs, hashes, dict placed):
    """The resizes of a Java ``ConcurrentHashMap`` that a table of ``size`` buckets
    makes when it holds the keys given (in insertion order: ``seqs``, increasing
    numbers, and ``hashes``, their java_spread_hash; buffers of unsigned 64- and
    32-bit ints): a ``transfer`` at each count reaching 3/4 of the table, of the keys
    present then. ``placed``: {seq: rank within its bucket} of the keys a resize put
    out of insertion order (others in it are ignored). Returns the new size and the
    new ``placed``."""
    cdef const uint64_t[::1] sv = seqs
    cdef const uint32_t[::1] hv = hashes
    cdef size_t n = sv.shape[0], i, lo, hi, mid
    cdef int32_t* rank
    cdef uint64_t seq
    cdef int rc
    if <size_t>hv.shape[0] != n:
        raise ValueError(f"{n} insertion numbers but {hv.shape[0]} hashes")
    if size == 0 or size & (size - 1):
        raise ValueError(f"a table size is a power of two, not {size}")
    rank = <int32_t*>malloc(max(n, 1) * sizeof(int32_t))
    if rank == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            rank[i] = -1
        for key, r in placed.items():
            seq = key
            lo, hi = 0, n               # the key's index: seqs increase
            while lo < hi:
                mid = (lo + hi) >> 1
                if sv[mid] < seq:
                    lo = mid + 1
                else:
                    hi = mid
            if lo < n and sv[lo] == seq:
                rank[lo] = r
        with nogil:
            rc = jt_concurrent_resizes(&size, n, &hv[0] if n else NULL, rank)
        if rc != 0:
            raise MemoryError()
        return size, {sv[i]: rank[i] for i in range(n) if rank[i] >= 0}
    finally:
        free(rank)
