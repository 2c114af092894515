/* Route queries answered from the route table: the one loop that reads complete
 * GET_ROUTEINFO_BY_TOPIC frames (scan.c), takes their answer from the table
 * (routetable.c: cached, or built there) and writes it (scan.c: the route, or
 * TOPIC_NOT_EXIST). It needs no Python: the serve path of rmq._core runs it with the
 * GIL held, threads of its own can run it without (bench: _serve_threads). */
#ifndef RMQ_SERVE_H
#define RMQ_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "routetable.h"

typedef struct {
    uint64_t served;        /* routes (code 0) written */
    uint64_t not_found;     /* TOPIC_NOT_EXIST answers written */
} rs_counts;

/* A counter one thread writes and others read (the engine's per-thread counts, summed
 * at scrape): a relaxed atomic load and store, no locked add, no data race. */
#define RMQ_COUNT(field, n)                                                           \
    __atomic_store_n(&(field), __atomic_load_n(&(field), __ATOMIC_RELAXED) + (n),   \
                     __ATOMIC_RELAXED)

/* Answer the complete route-query frames at the start of p[:n] (max_frame: the
 * frame-length limit), appending the answers in serialize type stype to out, from
 * *len up to cap, the table's read lock held for the run. Stops at the first frame
 * the general path must answer (another request, a header the scanner leaves to the
 * general decoder, a route only the rules build, a topic the not-found writer leaves,
 * an incomplete frame or a bad length), once *len reaches limit (SIZE_MAX: none), or
 * when the next answer does not fit: then *need is its size (else 0), to retry with
 * room. Returns the bytes of p consumed; RT_NOMEM-free: out of memory, the frame is
 * left to the general path. */
size_t rs_serve_routes(rt_table *t, int stype, const uint8_t *p, size_t n, size_t max_frame,
                       char *out, size_t cap, size_t *len, size_t limit, size_t *need,
                       rs_counts *counts);

/* For the scaling measurement (rmq._core._serve_threads, bench/scaling.py): nthreads
 * threads each going over the frames data[:n] (complete route queries) again and
 * again for `seconds`, as I/O threads would, in one of the modes below; answers[i]
 * (nthreads of them) is what thread i did. 0, or -1 when a thread could not start or
 * data holds a frame rs_serve_routes does not answer. */
enum {
    RS_BATCH = 0,       /* all the frames per rs_serve_routes call: one read's worth */
    RS_SINGLE = 1,      /* one frame per call: the read lock taken per answer */
    RS_LOCK = 2         /* the read lock taken and released once per frame, nothing
                           served: the lock alone under N readers */
};
int rs_serve_threads(rt_table *t, int stype, const uint8_t *data, size_t n, int nthreads,
                     double seconds, int mode, uint64_t *answers);

#endif
