# Declarations of engine.h, for the .pxi files of rmq._core (cimported: each C header is
# declared once, here). The I/O engine.

from libc.stdint cimport uint8_t, uint32_t, uint64_t

from bufpool cimport rp_shared
from routetable cimport rt_table
from scan cimport rb_partial

cdef extern from "engine.h" nogil:
    ctypedef struct re_config:
        int threads
        int control_thread
        size_t max_frame
        size_t max_output
        size_t resume_output
        int max_connections
        double idle_seconds
        size_t max_total_output
        int sndbuf
        int rcvbuf
        size_t trace_bytes
        void* tls_ctx
        int tls_enforcing
    ctypedef struct rmq_engine:
        pass
    ctypedef struct re_stats:
        uint64_t served
        uint64_t not_found
        uint64_t bytes_in
        uint64_t bytes_out
        uint64_t accepted
        uint64_t refused
        uint64_t closed[9]          # RE_WHY_COUNT (the C header's size is what counts)
        uint64_t queued_output
        uint64_t trace_dropped
    ctypedef struct re_conn_state:
        int found
        size_t queued_output
        size_t buffered_input
        size_t output_buffers
        int with_python
        int paused
        int closing
        int tls
        int thread
    ctypedef struct re_event:
        re_event* next
        int kind
        uint64_t conn
        size_t len
        char* data
        rb_partial* partial
    enum:
        RE_OPEN
        RE_FRAME
        RE_CLOSED
        RE_DRAINED
        RE_MAX_THREADS
        RE_WHY_PEER
        RE_WHY_BAD_FRAME
        RE_WHY_IDLE
        RE_WHY_OUTPUT_BUDGET
        RE_WHY_NO_MEMORY
        RE_WHY_CLOSED
        RE_WHY_UNSENT
        RE_WHY_TLS
        RE_WHY_TLS_REQUIRED
        RE_WHY_COUNT
    rmq_engine* re_start(rt_table* t, int stype, int listen_fd, const re_config* cfg)
    int re_thread_count(const rmq_engine* e)
    void re_stop(rmq_engine* e)
    re_event* re_next(rmq_engine* e, double timeout)
    int re_event_fd(const rmq_engine* e)
    void re_free_partial(rb_partial* s)
    void re_free_events(re_event* ev)
    void re_free_event(re_event* ev)
    int re_send(rmq_engine* e, uint64_t conn, const char* data, size_t len, int resume)
    int re_send_owned(rmq_engine* e, uint64_t conn, char* data, size_t len, int resume,
                      int notify)
    ctypedef struct re_part:
        char* data
        size_t len
        rp_shared* shared
    int re_send_parts(rmq_engine* e, uint64_t conn, re_part* parts, size_t n, int resume,
                      int notify)
    int re_close(rmq_engine* e, uint64_t conn)
    ctypedef struct re_trace_head:
        uint64_t time_ns
        uint64_t conn
        uint32_t len
        uint32_t kind
    enum:
        RE_TRACE_IN
        RE_TRACE_OUT
        RE_TRACE_OPEN
        RE_TRACE_CLOSE
    size_t re_trace_take(rmq_engine* e, int thread, uint8_t* out, size_t cap)
    uint64_t re_trace_watermark(rmq_engine* e)
    int re_conn_state_read(rmq_engine* e, uint64_t conn, re_conn_state* out)
    void re_route_queries(rmq_engine* e, int in_c)
    void re_stop_accepting(rmq_engine* e)
    void re_stats_read(rmq_engine* e, re_stats* out, int* connections)

