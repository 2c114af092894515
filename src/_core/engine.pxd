# Declarations of engine.h, for the .pxi files of rmq._core (cimported: each C header is
# declared once, here). The I/O engine.

from libc.stdint cimport uint64_t

from routetable cimport rt_table
from serve cimport rs_counts

cdef extern from "engine.h" nogil:
    ctypedef struct re_config:
        int threads
        size_t max_frame
        size_t max_output
        int max_connections
    ctypedef struct rmq_engine:
        pass
    ctypedef struct re_event:
        re_event* next
        int kind
        uint64_t conn
        size_t len
        char data[1]
    enum:
        RE_OPEN
        RE_FRAME
        RE_CLOSED
        RE_MAX_THREADS
    rmq_engine* re_start(rt_table* t, int stype, int listen_fd, const re_config* cfg)
    void re_stop(rmq_engine* e)
    re_event* re_next(rmq_engine* e, double timeout)
    void re_free_events(re_event* ev)
    int re_send(rmq_engine* e, uint64_t conn, const char* data, size_t len, int resume)
    int re_close(rmq_engine* e, uint64_t conn)
    void re_counts(rmq_engine* e, rs_counts* out, int* connections)
