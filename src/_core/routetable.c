/* The hot half of the NameServer's route tables; see routetable.h. */
#include "routetable.h"

#include "hash.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define PERM_READ 4
#define PERM_WRITE 2
#define INITIAL_BUCKETS 1024

/* ---------------------------------------------------------------- the lock */

/* Writer-preferring: once a writer waits, new readers wait behind it, so a
 * stream of route queries cannot starve a registration (nor the reverse: a
 * writer holds the lock only for the apply, never for decoding). */

void rt_lock_init(rt_rwlock *l)
{
    pthread_mutex_init(&l->m, NULL);
    pthread_cond_init(&l->readers_cv, NULL);
    pthread_cond_init(&l->writers_cv, NULL);
    l->readers = l->writer = l->waiting_writers = 0;
}

void rt_lock_destroy(rt_rwlock *l)
{
    pthread_cond_destroy(&l->writers_cv);
    pthread_cond_destroy(&l->readers_cv);
    pthread_mutex_destroy(&l->m);
}

void rt_lock_read(rt_rwlock *l)
{
    pthread_mutex_lock(&l->m);
    while (l->writer || l->waiting_writers)
        pthread_cond_wait(&l->readers_cv, &l->m);
    l->readers++;
    pthread_mutex_unlock(&l->m);
}

void rt_unlock_read(rt_rwlock *l)
{
    pthread_mutex_lock(&l->m);
    if (--l->readers == 0 && l->waiting_writers)
        pthread_cond_signal(&l->writers_cv);
    pthread_mutex_unlock(&l->m);
}

void rt_lock_write(rt_rwlock *l)
{
    pthread_mutex_lock(&l->m);
    l->waiting_writers++;
    while (l->writer || l->readers)
        pthread_cond_wait(&l->writers_cv, &l->m);
    l->waiting_writers--;
    l->writer = 1;
    l->owner = pthread_self();
    pthread_mutex_unlock(&l->m);
}

void rt_unlock_write(rt_rwlock *l)
{
    pthread_mutex_lock(&l->m);
    l->writer = 0;
    if (l->waiting_writers)
        pthread_cond_signal(&l->writers_cv);
    else
        pthread_cond_broadcast(&l->readers_cv);
    pthread_mutex_unlock(&l->m);
}

/* RMQ_DEBUG: [W] functions run with the write lock held by this thread, [R] ones
 * with some lock held (a reader's identity is not kept). */
#define HOLDS_WRITE(t) RMQ_ASSERT((t)->lock.writer && pthread_equal((t)->lock.owner, pthread_self()))
#define HOLDS_LOCK(t) RMQ_ASSERT((t)->lock.writer || (t)->lock.readers > 0)

void rt_rdlock(rt_table *t) { rt_lock_read(&t->lock); }
void rt_rdunlock(rt_table *t) { rt_unlock_read(&t->lock); }
void rt_wrlock(rt_table *t) { rt_lock_write(&t->lock); }
void rt_wrunlock(rt_table *t) { rt_unlock_write(&t->lock); }

/* ---------------------------------------------------------------- blobs */

static rt_blob *blob_new(const char *data, size_t len)
{
    rt_blob *b = malloc(sizeof(rt_blob) + len);
    if (b) {
        b->len = len;
        memcpy(b->data, data, len);
    }
    return b;
}

/* Cached answers are installed by readers (compare-and-swap from NULL) and
 * dropped only by writers, so a reader holding the lock sees a stable blob. */
static void drop_bodies(rt_topic *e)
{
    for (int f = 0; f < 2; f++) {
        free(e->body[f]);
        e->body[f] = NULL;
    }
}

static const rt_blob *install_body(rt_topic *e, int legacy, rt_blob *b)
{
    rt_blob *expected = NULL;
    if (__atomic_compare_exchange_n(&e->body[legacy], &expected, b, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        return b;
    free(b);                        /* another reader built it first */
    return expected;
}

/* ---------------------------------------------------------------- the map */

/* Topic names come from clients and brokers: keyed (hash.h), so that no one
 * can choose names that share a chain. */
static uint32_t hash_name(const char *p, size_t n)
{
    return (uint32_t)rmq_hash(p, n);
}

rt_table *rt_new(void)
{
    rt_table *t = calloc(1, sizeof(rt_table));
    if (!t)
        return NULL;
    t->buckets = calloc(INITIAL_BUCKETS, sizeof(rt_topic *));
    if (!t->buckets) {
        free(t);
        return NULL;
    }
    t->mask = INITIAL_BUCKETS - 1;
    rt_lock_init(&t->lock);
    return t;
}

static void free_topic(rt_topic *e)
{
    drop_bodies(e);
    free(e->qds);
    free(e);
}

void rt_free(rt_table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i <= t->mask; i++) {
        rt_topic *e = t->buckets[i];
        while (e) {
            rt_topic *next = e->next;
            free_topic(e);
            e = next;
        }
    }
    free(t->buckets);
    for (int32_t b = 0; b < t->nbrokers; b++) {
        for (int f = 0; f < 2; f++) {
            free(t->brokers[b].frag[f]);
            free(t->brokers[b].qd_prefix[f]);
        }
    }
    free(t->brokers);
    rt_lock_destroy(&t->lock);
    free(t);
}

rt_topic *rt_find(const rt_table *t, const char *name, size_t len)
{
    uint32_t h = hash_name(name, len);
    for (rt_topic *e = t->buckets[h & t->mask]; e; e = e->next)
        if (e->hash == h && e->len == len && memcmp(e->name, name, len) == 0)
            return e;
    return NULL;
}

/* Move every topic to a bucket array of n (a power of two) buckets; on no
 * memory keep the old one: chains of another length, still correct. */
static void rehash(rt_table *t, size_t n)
{
    rt_topic **nb = calloc(n, sizeof(rt_topic *));
    if (!nb)
        return;
    for (size_t i = 0; i <= t->mask; i++) {
        rt_topic *e = t->buckets[i];
        while (e) {
            rt_topic *next = e->next;
            e->next = nb[e->hash & (n - 1)];
            nb[e->hash & (n - 1)] = e;
            e = next;
        }
    }
    free(t->buckets);
    t->buckets = nb;
    t->mask = n - 1;
}

/* After removals: a table that held a large broker's topics gives its bucket
 * array back once it is less than 1/8 full (to a size it grows out of again
 * only when the count doubles). Not called while a FOR_BROKER_TOPICS walk runs. */
static void shrink(rt_table *t)
{
    size_t n = t->mask + 1;
    if (n <= INITIAL_BUCKETS || t->count >= n / 8)
        return;
    while (n > INITIAL_BUCKETS && t->count < n / 4)
        n /= 2;
    rehash(t, n);
}

static rt_topic *insert_topic(rt_table *t, const char *name, size_t len)
{
    rt_topic *e = calloc(1, sizeof(rt_topic) + len);
    if (!e)
        return NULL;
    memcpy(e->name, name, len);
    e->len = len;
    e->hash = hash_name(name, len);
    e->seq = t->seq++;
    if (t->count >= t->mask + 1)
        rehash(t, (t->mask + 1) * 2);
    e->next = t->buckets[e->hash & t->mask];
    t->buckets[e->hash & t->mask] = e;
    t->count++;
    return e;
}

static void unlink_topic(rt_table *t, rt_topic *e)
{
    rt_topic **pp = &t->buckets[e->hash & t->mask];
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    t->count--;
    free_topic(e);
}

static int find_qd(const rt_topic *e, int32_t broker)
{
    for (int i = 0; i < e->nqd; i++)
        if (e->qds[i].broker == broker)
            return i;
    return -1;
}

static void changed(rt_table *t, rt_topic *e)
{
    drop_bodies(e);
    t->version++;
}

static int put_qd(rt_table *t, rt_topic *e, const rt_qd *qd)
{
    int i = find_qd(e, qd->broker);
    if (i >= 0) {
        rt_qd *old = &e->qds[i];
        if (old->perm == qd->perm && old->read == qd->read && old->write == qd->write
            && old->sysflag == qd->sysflag)
            return 0;
        *old = *qd;
    } else {
        if (e->nqd == e->cap) {
            int32_t cap = e->cap ? e->cap * 2 : 4;
            rt_qd *q = realloc(e->qds, cap * sizeof(rt_qd));
            if (!q)
                return RT_NOMEM;
            e->qds = q;
            e->cap = cap;
        }
        e->qds[e->nqd++] = *qd;
        t->brokers[qd->broker].nqd++;
    }
    changed(t, e);
    return 1;
}

int rt_put(rt_table *t, const char *name, size_t len, const rt_qd *qd)
{
    HOLDS_WRITE(t);
    rt_topic *e = rt_find(t, name, len);
    if (!e && !(e = insert_topic(t, name, len)))
        return RT_NOMEM;
    int r = put_qd(t, e, qd);
    if (r == RT_NOMEM && e->nqd == 0)
        unlink_topic(t, e);
    return r;
}

/* Remove position i of e; frees e when it was the last. */
static void remove_at(rt_table *t, rt_topic *e, int i)
{
    t->brokers[e->qds[i].broker].nqd--;
    memmove(&e->qds[i], &e->qds[i + 1], (e->nqd - i - 1) * sizeof(rt_qd));
    e->nqd--;
    changed(t, e);
    if (e->nqd == 0)
        unlink_topic(t, e);
}

int rt_remove(rt_table *t, const char *name, size_t len, int32_t broker)
{
    HOLDS_WRITE(t);
    rt_topic *e = rt_find(t, name, len);
    int i = e ? find_qd(e, broker) : -1;
    if (i < 0)
        return 0;
    remove_at(t, e, i);
    shrink(t);
    return 1;
}

/* Calls fn on every topic with a QueueData of broker (fn may free the topic). */
#define FOR_BROKER_TOPICS(t, broker, e, i, body)                         \
    for (size_t _b = 0; _b <= (t)->mask; _b++) {                        \
        rt_topic *e = (t)->buckets[_b], *_next;                         \
        for (; e; e = _next) {                                          \
            _next = e->next;                                            \
            int i = find_qd(e, (broker));                               \
            if (i >= 0) { body }                                        \
        }                                                               \
    }

size_t rt_remove_broker(rt_table *t, int32_t broker)
{
    HOLDS_WRITE(t);
    size_t n = 0;
    FOR_BROKER_TOPICS(t, broker, e, i, { remove_at(t, e, i); n++; })
    shrink(t);
    return n;
}

size_t rt_write_perm(rt_table *t, int32_t broker, int wipe)
{
    HOLDS_WRITE(t);
    size_t n = 0;
    FOR_BROKER_TOPICS(t, broker, e, i, {
        rt_qd *q = &e->qds[i];
        int32_t perm = wipe ? (q->perm & ~PERM_WRITE) : (PERM_READ | PERM_WRITE);
        if (perm != q->perm) {
            q->perm = perm;
            changed(t, e);
        }
        n++;
    })
    return n;
}

size_t rt_apply_diff(const rt_table *t, int32_t b, const rt_rec *recs, size_t n, int force,
                     int readonly, uint8_t *only, int *taken)
{
    HOLDS_LOCK(t);
    size_t differ = 0;
    *taken = 0;
    for (size_t k = 0; k < n; k++) {
        const rt_rec *r = &recs[k];
        const rt_topic *e = rt_find(t, r->name, r->name_len);
        int i = e ? find_qd(e, b) : -1;
        only[k] = 0;
        if (!force && i >= 0)
            continue;
        *taken = 1;
        int32_t perm = readonly ? (r->perm & ~PERM_WRITE) : r->perm;
        if (i >= 0) {
            const rt_qd *q = &e->qds[i];
            if (q->perm == perm && q->read == r->read && q->write == r->write
                && q->sysflag == r->sysflag)
                continue;
        }
        only[k] = 1;
        differ++;
    }
    return differ;
}

int rt_apply(rt_table *t, int32_t b, const rt_rec *recs, size_t n, int force, int readonly,
             int delete_missing, const uint8_t *only)
{
    HOLDS_WRITE(t);
    int wrote = 0;
    if (delete_missing) {
        uint32_t stamp = ++t->stamp;
        for (size_t k = 0; k < n; k++) {
            rt_topic *e = rt_find(t, recs[k].key, recs[k].key_len);
            if (e)
                e->stamp = stamp;
        }
        FOR_BROKER_TOPICS(t, b, e, i, {
            if (e->stamp != stamp)
                remove_at(t, e, i);
        })
        shrink(t);
    }
    for (size_t k = 0; k < n; k++) {
        const rt_rec *r = &recs[k];
        if (only && !only[k])
            continue;
        rt_topic *e = rt_find(t, r->name, r->name_len);
        if (!force && e && find_qd(e, b) >= 0)
            continue;
        rt_qd qd = {b, readonly ? (r->perm & ~PERM_WRITE) : r->perm, r->read, r->write,
                    r->sysflag};
        if (!e && !(e = insert_topic(t, r->name, r->name_len)))
            return RT_NOMEM;
        if (put_qd(t, e, &qd) == RT_NOMEM) {
            if (e->nqd == 0)
                unlink_topic(t, e);
            return RT_NOMEM;
        }
        wrote = 1;
    }
    return wrote;
}

void rt_forget(rt_table *t, const char *name, size_t len)
{
    HOLDS_WRITE(t);
    if (name) {
        rt_topic *e = rt_find(t, name, len);
        if (e)
            drop_bodies(e);
    } else {
        for (size_t i = 0; i <= t->mask; i++)
            for (rt_topic *e = t->buckets[i]; e; e = e->next)
                drop_bodies(e);
    }
    t->version++;
}

/* ---------------------------------------------------------------- brokers */

/* Broker slots are reused: broker names are chosen by brokers, and a table that
 * kept a slot per name ever seen would grow with every restart under a new name. */

int32_t rt_new_broker(rt_table *t)
{
    HOLDS_WRITE(t);
    int32_t b;
    if (t->free_head) {
        b = t->free_head - 1;
        t->free_head = t->brokers[b].next_free;
        t->nfree--;
    } else {
        if (t->nbrokers == t->cap_brokers) {
            int32_t cap = t->cap_brokers ? t->cap_brokers * 2 : 16;
            rt_broker *nb = realloc(t->brokers, cap * sizeof(rt_broker));
            if (!nb)
                return RT_NOMEM;
            t->brokers = nb;
            t->cap_brokers = cap;
        }
        b = t->nbrokers++;
    }
    memset(&t->brokers[b], 0, sizeof(rt_broker));
    t->brokers[b].used = 1;
    return b;
}

int rt_release_broker(rt_table *t, int32_t b)
{
    HOLDS_WRITE(t);
    rt_broker *br = &t->brokers[b];
    if (!br->used || br->frag[0] || br->nqd)
        return 0;
    for (int f = 0; f < 2; f++)
        free(br->qd_prefix[f]);     /* frag[] is NULL: not registered */
    memset(br, 0, sizeof *br);
    br->next_free = t->free_head;
    t->free_head = b + 1;
    t->nfree++;
    return 1;
}

void rt_trim(void)
{
#ifdef __GLIBC__
    /* glibc keeps freed small blocks (topic entries) in its heap; this hands
     * the whole free pages back to the system. */
    malloc_trim(0);
#endif
}

int rt_set_broker(rt_table *t, int32_t b, const char *std, size_t std_len,
                  const char *legacy, size_t legacy_len, const char *qd_std,
                  size_t qd_std_len, const char *qd_legacy, size_t qd_legacy_len,
                  uint32_t jhash, int python_only)
{
    HOLDS_WRITE(t);
    assert(b >= 0 && b < t->nbrokers && t->brokers[b].used);
    rt_blob *s = NULL, *l = NULL;
    rt_blob *qs = blob_new(qd_std, qd_std_len), *ql = blob_new(qd_legacy, qd_legacy_len);
    if (std) {
        s = blob_new(std, std_len);
        l = blob_new(legacy, legacy_len);
    }
    if (!qs || !ql || (std && (!s || !l))) {
        free(s);
        free(l);
        free(qs);
        free(ql);
        return RT_NOMEM;
    }
    rt_broker *br = &t->brokers[b];
    for (int f = 0; f < 2; f++) {
        free(br->frag[f]);
        free(br->qd_prefix[f]);
    }
    br->frag[0] = s;
    br->frag[1] = l;
    br->qd_prefix[0] = qs;
    br->qd_prefix[1] = ql;
    br->jhash = jhash;
    br->python_only = python_only;
    FOR_BROKER_TOPICS(t, b, e, i, { (void)i; drop_bodies(e); })
    t->version++;
    return 0;
}

/* ---------------------------------------------------------------- routes */

/* Up to this many QueueData (most topics: a few brokers) an insertion sort
 * beats the heapsort; its O(n^2) stays bounded. */
#define JAVA_ORDER_INSERTION 16

/* Position i's sort key: its broker's bucket, then i (insertion order). Keys
 * are distinct, so any correct sort gives the one stable order. */
static inline uint64_t java_key(const rt_table *t, const rt_topic *e, uint32_t mask, int32_t i)
{
    return (uint64_t)(t->brokers[e->qds[i].broker].jhash & mask) << 32 | (uint32_t)i;
}

static void sift_down(const rt_table *t, const rt_topic *e, uint32_t mask, int32_t *a,
                      int32_t root, int32_t n)
{
    int32_t top = a[root];
    uint64_t key = java_key(t, e, mask, top);
    for (int32_t child; (child = 2 * root + 1) < n; root = child) {
        if (child + 1 < n && java_key(t, e, mask, a[child + 1]) > java_key(t, e, mask, a[child]))
            child++;
        if (java_key(t, e, mask, a[child]) <= key)
            break;
        a[root] = a[child];
    }
    a[root] = top;
}

void rt_java_order(const rt_table *t, const rt_topic *e, int32_t *order)
{
    int32_t n = e->nqd;
    uint32_t cap = 16;              /* HashMap resizes past 0.75 * capacity */
    while ((uint32_t)n > cap * 3 / 4)
        cap <<= 1;
    uint32_t mask = cap - 1;
    if (n <= JAVA_ORDER_INSERTION) {
        for (int32_t i = 0; i < n; i++) {
            uint64_t key = java_key(t, e, mask, i);
            int32_t j = i;
            for (; j > 0 && java_key(t, e, mask, order[j - 1]) > key; j--)
                order[j] = order[j - 1];
            order[j] = i;
        }
        return;
    }
    /* Heapsort: O(n log n) even for a topic on thousands of brokers, in place. */
    for (int32_t i = 0; i < n; i++)
        order[i] = i;
    for (int32_t i = n / 2 - 1; i >= 0; i--)
        sift_down(t, e, mask, order, i, n);
    for (int32_t end = n - 1; end > 0; end--) {
        int32_t top = order[0];
        order[0] = order[end];
        order[end] = top;
        sift_down(t, e, mask, order, 0, end);
    }
}

/* ---------------------------------------------------------------- the route answer */

/* A writer that only counts when p is NULL: rt_route_json's one body both sizes
 * and writes, so the budget is exact by construction (and asserted). */
typedef struct { char *p; size_t n; } wr;

static void wr_put(wr *w, const char *s, size_t n)
{
    if (w->p)
        memcpy(w->p + w->n, s, n);
    w->n += n;
}

#define WR_LIT(w, s) wr_put((w), (s), RMQ_LIT_LEN(s))

static void wr_span(wr *w, rt_span s) { wr_put(w, s.s, s.n); }

size_t rt_route_json(char *out, const rt_route_desc *d)
{
#define SPAN_LIT(s) {(s), RMQ_LIT_LEN(s)}
    static const rt_span QD_KEYS[4] = {SPAN_LIT(",\"perm\":"), SPAN_LIT(",\"readQueueNums\":"),
                                       SPAN_LIT(",\"topicSysFlag\":"), SPAN_LIT(",\"writeQueueNums\":")};
    char digits[24];
    wr w = {out, 0};
    WR_LIT(&w, "{\"brokerDatas\":[");
    for (size_t i = 0; i < d->nbd; i++) {
        wr_put(&w, ",", i > 0);
        wr_span(&w, d->bds[i]);
    }
    WR_LIT(&w, "],\"filterServerTable\":");
    wr_span(&w, d->fst);
    if (d->otc.s) {
        WR_LIT(&w, ",\"orderTopicConf\":");
        wr_span(&w, d->otc);
    }
    WR_LIT(&w, ",\"queueDatas\":[");
    for (size_t k = 0; k < d->nqd; k++) {
        const rt_qd_json *q = &d->qds[k];
        wr_put(&w, ",", k > 0);
        wr_span(&w, q->prefix);
        for (int j = 0; j < 4; j++) {        /* the caller's JSON text, or the number */
            wr_span(&w, QD_KEYS[j]);
            if (q->val[j].s)
                wr_span(&w, q->val[j]);
            else
                wr_put(&w, digits, rmq_fmt_int(digits, q->num[j]));
        }
        wr_put(&w, "}", 1);
    }
    wr_put(&w, "]", 1);
    if (d->tqm.s) {
        WR_LIT(&w, ",\"topicQueueMappingByBroker\":");
        wr_span(&w, d->tqm);
    }
    wr_put(&w, "}", 1);
    return w.n;
}

const rt_blob *rt_route(rt_table *t, const char *name, size_t len, int legacy, int *status)
{
    HOLDS_LOCK(t);
    rt_topic *e = rt_find(t, name, len);
    if (!e) {
        *status = RT_NOT_FOUND;
        return NULL;
    }
    const rt_blob *cached = __atomic_load_n(&e->body[legacy], __ATOMIC_ACQUIRE);
    if (cached) {
        *status = RT_OK;
        return cached;
    }
    if (t->python_routes) {
        *status = RT_PYTHON;
        return NULL;
    }
    /* Java's order, then the pieces in it (built once per change, then cached). */
    size_t n = (size_t)e->nqd, nbd = 0;
    rt_qd_json *qds = malloc(1 + n * (sizeof(rt_qd_json) + sizeof(rt_span) + sizeof(int32_t)));
    if (!qds) {
        *status = RT_NOMEM;
        return NULL;
    }
    rt_span *bds = (rt_span *)(qds + n);
    int32_t *order = (int32_t *)(bds + n);
    rt_java_order(t, e, order);
    for (size_t k = 0; k < n; k++) {
        const rt_qd *q = &e->qds[order[k]];
        const rt_broker *br = &t->brokers[q->broker];
        const rt_blob *f = br->frag[legacy], *pre = br->qd_prefix[legacy];
        if (f) {
            if (br->python_only) {
                *status = RT_PYTHON;
                goto done;
            }
            bds[nbd++] = (rt_span){f->data, f->len};
        }
        qds[k] = (rt_qd_json){{pre->data, pre->len}, {q->perm, q->read, q->sysflag, q->write}, {{0}}};
    }
    if (!nbd) {
        *status = RT_NOT_FOUND;
        goto done;
    }
    rt_route_desc d = {bds, nbd, {"{}", 2}, {NULL, 0}, qds, n, {NULL, 0}};
    size_t size = rt_route_json(NULL, &d);
    rt_blob *b = malloc(sizeof(rt_blob) + size);
    if (!b) {
        *status = RT_NOMEM;
        goto done;
    }
    b->len = rt_route_json(b->data, &d);
    RMQ_ASSERT(b->len == size);
    cached = install_body(e, legacy, b);
    *status = RT_OK;
done:
    free(qds);
    return cached;
}

int rt_store(rt_table *t, const char *name, size_t len, int legacy, const char *body,
             size_t body_len, uint64_t version)
{
    HOLDS_LOCK(t);
    rt_topic *e = rt_find(t, name, len);
    if (!e || t->version != version)
        return 0;
    rt_blob *b = blob_new(body, body_len);
    if (!b)
        return RT_NOMEM;
    install_body(e, legacy, b);
    return 1;
}
