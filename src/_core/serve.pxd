# Declarations of serve.h, for the .pxi files of rmq._core (cimported: each C header is
# declared once, here). Route queries answered from the route table.

from libc.stdint cimport uint8_t, uint64_t

from routetable cimport rt_table

cdef extern from "serve.h" nogil:
    ctypedef struct rs_counts:
        uint64_t served
        uint64_t not_found
    size_t rs_serve_routes(rt_table* t, int stype, const uint8_t* p, size_t n, size_t max_frame,
                           char* out, size_t cap, size_t* len, size_t limit, size_t* need,
                           rs_counts* counts)
    int rs_serve_threads(rt_table* t, int stype, const uint8_t* data, size_t n, int nthreads,
                         double seconds, int mode, uint64_t* answers)
    enum: RS_BATCH, RS_SINGLE, RS_LOCK
