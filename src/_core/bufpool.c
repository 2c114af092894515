/* Big buffers kept for reuse (bufpool.h). */
#include "bufpool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    POOL_SLOTS = 16,
    POOL_BYTES = 32 * 1024 * 1024,
};
#define POOL_IDLE 10.0              /* seconds a buffer is kept unused */

typedef struct {
    void *p;
    size_t cap;
    double since;                   /* monotonic seconds: when it was given back */
} rp_slot;

static pthread_mutex_t pool_m = PTHREAD_MUTEX_INITIALIZER;
static rp_slot pool[POOL_SLOTS];
static size_t pool_count, pool_bytes;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void drop_slot(size_t i, void **out)
{
    *out = pool[i].p;
    pool_bytes -= pool[i].cap;
    pool[i] = pool[--pool_count];
}

void *rp_take(size_t min, size_t *cap)
{
    void *p = NULL;
    size_t best = POOL_SLOTS;
    if (min < RP_MIN) {
        if ((p = malloc(min ? min : 1)))
            *cap = min;
        return p;
    }
    pthread_mutex_lock(&pool_m);
    for (size_t i = 0; i < pool_count; i++)
        if (pool[i].cap >= min && pool[i].cap / 4 <= min &&
            (best == POOL_SLOTS || pool[i].cap < pool[best].cap))
            best = i;
    if (best < POOL_SLOTS) {
        *cap = pool[best].cap;
        drop_slot(best, &p);
    }
    pthread_mutex_unlock(&pool_m);
    if (!p && (p = malloc(min)))
        *cap = min;
    return p;
}

void rp_give(void *p, size_t cap)
{
    if (!p)
        return;
    if (cap >= RP_MIN && cap <= RP_MAX_ONE) {
        double now = now_seconds();
        pthread_mutex_lock(&pool_m);
        if (pool_count < POOL_SLOTS && pool_bytes + cap <= POOL_BYTES) {
            pool[pool_count++] = (rp_slot){p, cap, now};
            pool_bytes += cap;
            p = NULL;
        }
        pthread_mutex_unlock(&pool_m);
    }
    free(p);
}

void rp_trim(double now)
{
    void *old[POOL_SLOTS];
    size_t n = 0;
    pthread_mutex_lock(&pool_m);
    for (size_t i = 0; i < pool_count;)
        if (now - pool[i].since >= POOL_IDLE)
            drop_slot(i, &old[n++]);
        else
            i++;
    pthread_mutex_unlock(&pool_m);
    while (n)
        free(old[--n]);             /* (unmapped outside the lock) */
}

void rp_stats(size_t *buffers, size_t *bytes)
{
    pthread_mutex_lock(&pool_m);
    *buffers = pool_count;
    *bytes = pool_bytes;
    pthread_mutex_unlock(&pool_m);
}

rp_shared *rp_shared_new(const void *data, size_t len)
{
    rp_shared *s = malloc(sizeof *s + (len ? len : 1));
    if (!s)
        return NULL;
    s->refs = 1;
    s->len = len;
    if (len)
        memcpy(s->data, data, len);
    return s;
}

void rp_shared_hold(rp_shared *s)
{
    __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
}

void rp_shared_drop(rp_shared *s)
{
    /* (acquire-release: the last holder's free comes after every other's reads) */
    if (s && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0)
        free(s);
}
