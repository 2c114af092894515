# Declarations of scan.h, for the .pxi files of rmq._core (cimported: each C header is
# declared once, here). The nogil scanners.

from libc.stdint cimport int32_t, int64_t, uint8_t

from wire cimport rmq_topic_rec

cdef extern from "scan.h" nogil:
    ctypedef long ssize_t

    ctypedef struct rb_body:
        int64_t counter, state_version, timestamp
        int has_timestamp
        rmq_topic_rec* topics
        size_t ntopics, cap

    enum:
        RB_OK, RB_SLOW, RB_NOMEM

    int rb_scan_register_body(const char* p, size_t n, rb_body* out)
    int rb_scan_compressed_body(const char* p, size_t n, rb_body* out)

    ctypedef struct rb_partial:
        rb_body body
        int state

    enum:
        RBP_OFF, RBP_TABLE, RBP_ENTRIES

    void rb_partial_init(rb_partial* s, size_t total)
    bint rb_partial_has_entries(const rb_partial* s)
    void rb_partial_step(rb_partial* s, const char* body, size_t avail)
    void rb_partial_move(rb_partial* s, const char* body)
    void rb_partial_free(rb_partial* s)
    int rb_scan_register_body_from(const char* p, size_t n, rb_partial* s, rb_body* out)
    void rb_body_free(rb_body* b)

    ctypedef struct rq_route:
        int32_t opaque, version
        int serialize_type
        const char* topic
        size_t topic_len
        int accept_standard
        int zone_mode
        const char* zone
        size_t zone_len

    enum:
        RQ_MAX_ZONE

    int rq_scan_route(const uint8_t* payload, size_t n, rq_route* out)
    size_t rq_scan_request(const uint8_t* payload, size_t n, int32_t* code)
    size_t RQ_UNUSUAL
    enum:
        RQ_MAX_REQUEST_HEADER
    int rq_route_zone(const rq_route* req, char* out)
    ssize_t rq_write_route_answer(char* out, size_t cap, const rq_route* req, int stype,
                                  const char* body, size_t body_len)
    size_t rq_route_answer_size(const rq_route* req, int stype, size_t body_len)
    bint rq_not_found_here(const rq_route* req)
    ssize_t rq_write_not_found_answer(char* out, size_t cap, const rq_route* req, int stype)
    size_t rq_not_found_answer_size(const rq_route* req, int stype)
