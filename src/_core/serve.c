/* Route queries answered from the route table (serve.h). */
#include "serve.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "scan.h"
#include "wire.h"

/* A query read ahead of the one answered. */
typedef struct {
    rq_route req;
    size_t end;                     /* the offset in p after its frame */
    uint32_t hash;                  /* its topic's */
} rs_query;

/* Queries read ahead of the one answered: a topic's entry is in no cache when its
 * query comes (10,000 topics, the kernel's work between reads), and its lookup
 * waits for memory twice, bucket then entry. Reading up to AHEAD queries ahead, each
 * lookup's memory is asked for while the answers before it are written
 * (rt_prefetch: a query's bucket when it is read, its entry when the query
 * ENTRY_AFTER later is read, a zone-mode query's zone answers as the query before
 * it is answered). bench/README.md, "One read per lone query". */
enum { AHEAD = 4, RING = AHEAD + 1, ENTRY_AFTER = 2 };

size_t rs_serve_routes(rt_table *t, int stype, const uint8_t *p, size_t n, size_t max_frame,
                       char *out, size_t cap, size_t *len, size_t limit, size_t *need,
                       rs_counts *counts)
{
    rs_query ring[RING];
    size_t pos = 0, next = 0;       /* after the last query answered, and read */
    size_t answered = 0, read = 0;  /* queries: ring[i % RING] holds query i */
    int more = 1;
    char zone[RQ_MAX_ZONE];
    *need = 0;
    rt_rdlock(t);
    while (*len < limit) {
        while (more && read - answered <= AHEAD) {
            rs_query *a = &ring[read % RING];
            int64_t length = rmq_frame_at(p + next, n - next, max_frame);
            /* Nothing read ahead (a lone query, or a read's first): its bucket is asked
             * for from where its topic probably is, so that it comes while the header
             * is read */
            const char *hint = NULL;
            size_t hint_len = 0;
            uint32_t hint_hash = 0;
            if (length >= 0 && read == answered &&
                rq_topic_hint(p + next + 4, (size_t)length, &hint, &hint_len)) {
                hint_hash = rt_topic_hash(hint, hint_len);
                rt_prefetch(t, hint_hash, 0);
            }
            if (length < 0 || !rq_scan_route(p + next + 4, (size_t)length, &a->req)) {
                more = 0;
                break;
            }
            next += 4 + (size_t)length;
            a->end = next;
            if (hint && a->req.topic == hint && a->req.topic_len == hint_len) {
                a->hash = hint_hash;        /* (its bucket asked for already) */
            } else {
                a->hash = rt_topic_hash(a->req.topic, a->req.topic_len);
                rt_prefetch(t, a->hash, 0);
            }
            if (read - answered >= ENTRY_AFTER)
                rt_prefetch(t, ring[(read - ENTRY_AFTER) % RING].hash, 1);
            read++;
        }
        if (answered == read)
            break;
        const rs_query *q = &ring[answered % RING];
        const rq_route *req = &q->req;
        /* a zone-mode answer waits for a third line, the entry's zone answers: the
         * next query's asked for now (its entry was, reads ago) */
        if (answered + 1 < read && ring[(answered + 1) % RING].req.zone_mode)
            rt_prefetch(t, ring[(answered + 1) % RING].hash, 2);
        int zn = rq_route_zone(req, zone), status, form;
        if (zn >= 0)
            form = rt_zone_form(t, zone, (size_t)zn);
        else
            form = req->version >= RMQ_V4_9_4 || req->accept_standard ? RT_STANDARD : RT_LEGACY;
        rt_blob *temp = NULL;
        const rt_blob *blob = rt_route_hashed(t, req->topic, req->topic_len, q->hash, form,
                                              &status, &temp);
        size_t size;
        if (blob) {
            size = rq_route_answer_size(req, stype, blob->len);
            if (cap - *len < size) {
                *need = size;
                free(temp);
                break;
            }
            *len += (size_t)rq_write_route_answer(out + *len, cap - *len, req, stype,
                                                  blob->data, blob->len);
            free(temp);         /* an answer the cache refused: built for this query only */
            RMQ_COUNT(counts->served, 1);
        } else {
            /* TOPIC_NOT_EXIST (%RETRY% topics, probes, typos) is written here too */
            if (status != RT_NOT_FOUND || !rq_not_found_here(req))
                break;
            size = rq_not_found_answer_size(req, stype);
            if (cap - *len < size) {
                *need = size;
                break;
            }
            *len += (size_t)rq_write_not_found_answer(out + *len, cap - *len, req, stype);
            RMQ_COUNT(counts->not_found, 1);
        }
        pos = q->end;
        answered++;
    }
    rt_rdunlock(t);
    return pos;
}

/* ---------------------------------------------------------------- the scaling run */

typedef struct {
    rt_table *t;
    int stype;
    const uint8_t *data;
    size_t n;
    double seconds;
    int mode;           /* RS_BATCH, RS_SINGLE, RS_LOCK */
    uint64_t answers;
    int failed;
} rs_reader;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *rs_reader_main(void *arg)
{
    rs_reader *r = arg;
    size_t cap = 64 * 1024, len, need;
    char *out = malloc(cap);
    rs_counts counts = {0, 0};
    if (!out) {
        r->failed = 1;
        return NULL;
    }
    double end = now_s() + r->seconds;
    while (!r->failed && now_s() < end) {
        for (size_t pos = 0; pos < r->n;) {     /* one read's worth, as a connection's */
            size_t n = r->n - pos;
            if (r->mode != RS_BATCH) {
                int64_t length = rmq_frame_at(r->data + pos, n, SIZE_MAX);
                n = length < 0 ? n : 4 + (size_t)length;
            }
            if (r->mode == RS_LOCK) {
                rt_rdlock(r->t);
                rt_rdunlock(r->t);
                counts.served++;
                pos += n;
                continue;
            }
            len = 0;
            size_t used = rs_serve_routes(r->t, r->stype, r->data + pos, n, SIZE_MAX,
                                          out, cap, &len, cap, &need, &counts);
            if (need) {                     /* an answer larger than the buffer */
                char *bigger = realloc(out, cap = need + cap);
                if (!bigger) {
                    r->failed = 1;
                    break;
                }
                out = bigger;
            } else if (!used) {
                r->failed = 1;              /* a frame the loop leaves to Python */
                break;
            }
            pos += used;
        }
    }
    r->answers = counts.served + counts.not_found;
    free(out);
    return NULL;
}

int rs_serve_threads(rt_table *t, int stype, const uint8_t *data, size_t n, int nthreads,
                     double seconds, int mode, uint64_t *answers)
{
    rs_reader *readers = calloc((size_t)nthreads, sizeof *readers);
    pthread_t *threads = calloc((size_t)nthreads, sizeof *threads);
    int started = 0, rc = 0;
    if (!readers || !threads) {
        free(readers);
        free(threads);
        return -1;
    }
    for (; started < nthreads; started++) {
        readers[started] = (rs_reader){t, stype, data, n, seconds, mode, 0, 0};
        if (pthread_create(&threads[started], NULL, rs_reader_main, &readers[started]) != 0) {
            rc = -1;
            break;
        }
    }
    for (int i = 0; i < started; i++) {
        pthread_join(threads[i], NULL);
        answers[i] = readers[i].answers;
        rc |= -readers[i].failed;
    }
    free(readers);
    free(threads);
    return rc;
}
