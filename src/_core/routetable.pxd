# Declarations of routetable.h, for the .pxi files of rmq._core (cimported: each C header is
# declared once, here). The topic table, its lock and its
# cached route answers.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

from wire cimport rmq_topic_rec

cdef extern from "routetable.h" nogil:
    ctypedef struct rt_blob:
        size_t len
        char data[1]
    ctypedef struct rt_qd:
        int32_t broker
    ctypedef struct rt_qdv:
        int32_t broker, perm, read, write, sysflag
    ctypedef struct rt_topic:
        rt_topic* next
        uint32_t peak
        uint64_t seq
        int32_t nqd
        rt_qd* qds
        rt_blob* body[2]
        size_t len
        char name[1]
    ctypedef struct rt_table:
        rt_topic** buckets
        size_t mask, count
        uint64_t version
        int32_t nbrokers, nfree
        int python_routes
        size_t budget
    enum: RT_OK, RT_NOT_FOUND, RT_PYTHON, RT_NOMEM
    enum: RT_STANDARD, RT_LEGACY, RT_ZONE
    rt_table* rt_new()
    void rt_free(rt_table* t)
    ctypedef struct rt_rwlock:
        pass
    void rt_lock_init(rt_rwlock* l)
    void rt_lock_destroy(rt_rwlock* l)
    void rt_lock_read(rt_rwlock* l)
    void rt_unlock_read(rt_rwlock* l)
    void rt_lock_write(rt_rwlock* l)
    void rt_unlock_write(rt_rwlock* l)
    void rt_rdlock(rt_table* t)
    void rt_rdunlock(rt_table* t)
    void rt_wrlock(rt_table* t)
    void rt_wrunlock(rt_table* t)
    int32_t rt_new_broker(rt_table* t)
    int rt_release_broker(rt_table* t, int32_t b)
    void rt_trim()
    int rt_set_broker(rt_table* t, int32_t b, const char* std, size_t std_len,
                      const char* legacy, size_t legacy_len, const char* qd_std,
                      size_t qd_std_len, const char* qd_legacy, size_t qd_legacy_len,
                      uint32_t jhash, int python_only, const char* zone, size_t zone_len,
                      int has_master)
    int rt_zone_form(const rt_table* t, const char* fold, size_t len)
    int rt_put(rt_table* t, const char* name, size_t len, const rt_qdv* qd)
    int rt_remove(rt_table* t, const char* name, size_t len, int32_t broker)
    size_t rt_remove_broker(rt_table* t, int32_t broker)
    size_t rt_write_perm(rt_table* t, int32_t broker, int wipe)
    int rt_apply(rt_table* t, int32_t b, const rmq_topic_rec* recs, size_t n, int force, int readonly,
                 int delete_missing, const uint8_t* only, size_t* removed)
    size_t rt_apply_diff(const rt_table* t, int32_t b, const rmq_topic_rec* recs, size_t n, int force,
                         int readonly, uint8_t* only, int* taken)
    void rt_forget(rt_table* t, const char* name, size_t len)
    rt_topic* rt_find(const rt_table* t, const char* name, size_t len)
    const rt_blob* rt_route(rt_table* t, const char* name, size_t len, int form, int* status,
                            rt_blob** temp)
    int rt_store(rt_table* t, const char* name, size_t len, int form, const char* body,
                 size_t body_len, uint64_t version)
    int rt_topic_qds(const rt_table* t, const rt_topic* e, rt_qdv* out)
    int64_t rt_first_flag(const rt_table* t, const rt_topic* e)
    int rt_topic_hashes(const rt_table* t, uint64_t** seqs, uint32_t** hashes, size_t* n)
    ctypedef struct rt_cache_stats:
        uint64_t hits, misses, shared, evictions, refused
        size_t bytes, budget, answers, entries
    void rt_set_budget(rt_table* t, size_t budget)
    void rt_get_cache_stats(rt_table* t, rt_cache_stats* out)
    uint64_t rt_work(const rt_table* t)
    void rt_buried(rt_table* t, uint64_t* since_start, size_t* now)
    # The route answer's JSON writer (bodies.pxi builds its pieces).
    ctypedef struct rt_span:
        const char* s
        size_t n
    ctypedef struct rt_qd_json:
        rt_span prefix
        rt_span val[4]
    ctypedef struct rt_route_desc:
        const rt_span* bds
        size_t nbd
        rt_span fst, otc
        const rt_qd_json* qds
        size_t nqd
        rt_span tqm
    size_t rt_route_json(char* out, const rt_route_desc* d)
