# Declarations of bufpool.h, for the .pxi files of rmq._core (cimported: each C header is
# declared once, here). The big buffers the I/O engine keeps for reuse.

cdef extern from "bufpool.h" nogil:
    enum:
        RP_MIN
    void* rp_take(size_t min, size_t* cap)
    void rp_give(void* p, size_t cap)
    void rp_trim(double now)
    void rp_stats(size_t* buffers, size_t* bytes)
    ctypedef struct rp_shared:
        size_t refs
        size_t len
        char* data
    rp_shared* rp_shared_new(const void* data, size_t len)
    void rp_shared_hold(rp_shared* s)
    void rp_shared_drop(rp_shared* s)
