/* The hot half of the NameServer's route tables; see routetable.h. */
#include "routetable.h"

#include "hash.h"
#include "javatable.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define PERM_READ 4
#define PERM_WRITE 2
#define INITIAL_BUCKETS 1024
#define INITIAL_ANSWER_BUCKETS 64
#define INITIAL_VAL_BUCKETS 16

/* ---------------------------------------------------------------- the lock */

/* Writer-preferring, with one turn for readers: once a writer waits, new readers wait
 * behind it, so a stream of route queries cannot starve a registration; and the
 * readers that waited while a writer held the lock go in when it lets go, before the
 * next writer, so a registration applied in slices (routes.pxi's APPLY_SLICE: the
 * writer takes the lock again at once) cannot starve them either: a route query
 * waits for one slice at most. A writer holds the lock only for the apply, never
 * for decoding.
 *
 * Those rules live under the mutex; readers take it only when the gate is closed.
 * With no writer near, a reader counts itself in its thread's slot and looks at the
 * gate; a writer closes the gate and then counts the slots. Each puts a full fence
 * between its write and its look (Dekker's pattern; C11's fence-to-fence rule): either
 * the reader sees the gate closed, steps back and takes the mutex, or the writer sees
 * the reader's count and waits for it to leave. So a route query on the fast path
 * writes only its own slot's cache line: the readers of many cores share no written
 * line (a mutex or one shared count would move between their caches on every query). */

/* glibc keeps room for a module's few initial-exec bytes when it is loaded later: a
 * load relative to the thread pointer, not a call to __tls_get_addr per query. musl
 * does not promise that room: the general model there. */
#ifdef __GLIBC__
#define RT_TLS_MODEL __attribute__((tls_model("initial-exec")))
#else
#define RT_TLS_MODEL
#endif
static __thread int thread_slot RT_TLS_MODEL = -1;
static unsigned slots_given;

/* The calling thread's slot (threads take them in turn, for every lock). */
static inline int my_slot(void)
{
    if (thread_slot < 0)
        thread_slot = (int)(__atomic_fetch_add(&slots_given, 1, __ATOMIC_RELAXED)
                            % RT_READER_SLOTS);
    return thread_slot;
}

/* A count kept in slots: their sum. */
static uint64_t slots_sum(const rt_slot_count *slots)
{
    uint64_t n = 0;
    for (int i = 0; i < RT_READER_SLOTS; i++)
        n += __atomic_load_n(&slots[i].n, __ATOMIC_ACQUIRE);
    return n;
}

/* The readers in, as the slots show them (after the caller's full fence, or under
 * the mutex for the readers it let in). */
static uint64_t readers_in(rt_rwlock *l)
{
    return slots_sum(l->slots);
}

/* [m] From now on, arriving readers take the mutex. */
static void close_gate(rt_rwlock *l)
{
    __atomic_store_n(&l->gate, 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* [m] What the writer changed is seen by every reader that finds the gate open. */
static void open_gate(rt_rwlock *l)
{
    __atomic_store_n(&l->gate, 0, __ATOMIC_RELEASE);
}

void rt_lock_init(rt_rwlock *l)
{
    memset(l, 0, sizeof *l);
    pthread_mutex_init(&l->m, NULL);
    pthread_cond_init(&l->readers_cv, NULL);
    pthread_cond_init(&l->writers_cv, NULL);
}

void rt_lock_destroy(rt_rwlock *l)
{
    pthread_cond_destroy(&l->writers_cv);
    pthread_cond_destroy(&l->readers_cv);
    pthread_mutex_destroy(&l->m);
}

/* A reader out of its slot; a writer waiting for the slots hears of it. */
static void leave(rt_rwlock *l, int slot)
{
    __atomic_fetch_sub(&l->slots[slot].n, 1, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&l->gate, __ATOMIC_RELAXED)) {
        pthread_mutex_lock(&l->m);
        if (l->waiting_writers)
            pthread_cond_signal(&l->writers_cv);
        pthread_mutex_unlock(&l->m);
    }
}

void rt_lock_read(rt_rwlock *l)
{
    int slot = my_slot();
    __atomic_fetch_add(&l->slots[slot].n, 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&l->gate, __ATOMIC_ACQUIRE))
        return;
    leave(l, slot);                 /* the gate is closed: by the rules, under the mutex */
    pthread_mutex_lock(&l->m);
    uint64_t since = l->releases;
    int waited = 0;
    /* a reader that waited through a writer's release has its turn (l->turn) */
    while (l->writer || (l->waiting_writers && !(waited && l->releases != since))) {
        if (!waited) {
            waited = 1;
            l->waiting_readers++;
        }
        pthread_cond_wait(&l->readers_cv, &l->m);
    }
    if (waited) {
        l->waiting_readers--;
        if (l->releases != since)
            l->turn--;              /* it was waiting at the last release: counted there */
    }
    __atomic_fetch_add(&l->slots[slot].n, 1, __ATOMIC_RELAXED);
    /* as the fast path's: alone() relies on every reader's fence after its count */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&l->m);
}

void rt_unlock_read(rt_rwlock *l)
{
    leave(l, my_slot());
}

void rt_lock_write(rt_rwlock *l)
{
    pthread_mutex_lock(&l->m);
    l->waiting_writers++;
    close_gate(l);
    while (l->writer || l->turn || readers_in(l))
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
    l->releases++;
    l->turn = l->waiting_readers;   /* the readers waiting now go before the next writer */
    if (!l->waiting_writers)
        open_gate(l);
    if (l->turn || !l->waiting_writers)
        pthread_cond_broadcast(&l->readers_cv);
    else
        pthread_cond_signal(&l->writers_cv);
    pthread_mutex_unlock(&l->m);
}

/* RMQ_DEBUG: [W] functions run with the write lock held by this thread, [R] ones
 * with some lock held (a reader's identity is not kept). */
#define HOLDS_WRITE(t) RMQ_ASSERT((t)->lock.writer && pthread_equal((t)->lock.owner, pthread_self()))
#define HOLDS_LOCK(t) RMQ_ASSERT((t)->lock.writer || readers_in(&(t)->lock) > 0)

static void free_grave(rt_blob *b)
{
    while (b) {
        rt_blob *next = b->next;
        free(b);
        b = next;
    }
}

/* The graveyard, detached and no longer counted in bytes: to free_grave. Only
 * when no reader can hold one of its answers. */
static rt_blob *take_grave(rt_table *t)
{
    rt_blob *grave = t->grave;
    __atomic_store_n(&t->grave, NULL, __ATOMIC_RELAXED);
    for (rt_blob *b = grave; b; b = b->next)
        t->bytes -= b->size;
    return grave;
}

void rt_rdlock(rt_table *t) { rt_lock_read(&t->lock); }

/* A reader leaving with answers in the graveyard frees them if it can have the table
 * to itself for a moment: it closes the gate and counts the slots (as a writer does),
 * and takes the graveyard when no reader is in; readers arriving meanwhile wait for
 * the mutex it holds. Only one tries at a time (trylock) and never with a writer near
 * (the writer frees the graveyard itself): a stream of readers cannot queue behind it. */
void rt_rdunlock(rt_table *t)
{
    rt_rwlock *l = &t->lock;
    leave(l, my_slot());
    if (!__atomic_load_n(&t->grave, __ATOMIC_RELAXED) || pthread_mutex_trylock(&l->m))
        return;
    rt_blob *grave = NULL;
    if (!l->writer && !l->waiting_writers) {
        close_gate(l);
        if (!readers_in(l))
            grave = take_grave(t);
        open_gate(l);
    }
    pthread_mutex_unlock(&l->m);
    free_grave(grave);
}

void rt_wrlock(rt_table *t)
{
    rt_lock_write(&t->lock);
    free_grave(take_grave(t));
}

void rt_wrunlock(rt_table *t) { rt_unlock_write(&t->lock); }

void rt_buried(rt_table *t, uint64_t *since_start, size_t *now)
{
    HOLDS_LOCK(t);
    pthread_mutex_lock(&t->cache_m);
    *since_start = t->buried;
    *now = 0;
    for (rt_blob *b = t->grave; b; b = b->next)
        ++*now;
    pthread_mutex_unlock(&t->cache_m);
}

uint64_t rt_work(const rt_table *t) { return __atomic_load_n(&t->work, __ATOMIC_RELAXED); }

static inline void add_work(rt_table *t, uint64_t n)
{
    __atomic_fetch_add(&((rt_table *)t)->work, n, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------- blobs */

static rt_blob *blob_alloc(size_t len, int32_t nkey)
{
    size_t size = sizeof(rt_blob) + ((len + 3) & ~(size_t)3) + (size_t)nkey * sizeof(int32_t);
    rt_blob *b = malloc(size);
    if (b) {
        b->next = NULL;
        b->hash = 0;
        b->refs = 0;
        b->nkey = nkey;
        b->size = size;
        b->len = len;
    }
    return b;
}

static rt_blob *blob_new(const char *data, size_t len)
{
    rt_blob *b = blob_alloc(len, 0);
    if (b)
        memcpy(b->data, data, len);
    return b;
}

static inline int32_t *blob_key(rt_blob *b)
{
    return (int32_t *)(b->data + ((b->len + 3) & ~(size_t)3));
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
    t->abuckets = calloc(INITIAL_ANSWER_BUCKETS, sizeof(rt_blob *));
    t->val_buckets = calloc(INITIAL_VAL_BUCKETS, sizeof(int32_t));
    if (!t->buckets || !t->abuckets || !t->val_buckets) {
        free(t->buckets);
        free(t->abuckets);
        free(t->val_buckets);
        free(t);
        return NULL;
    }
    t->mask = INITIAL_BUCKETS - 1;
    t->amask = INITIAL_ANSWER_BUCKETS - 1;
    t->val_mask = INITIAL_VAL_BUCKETS - 1;
    t->budget = (size_t)-1;
    rt_lock_init(&t->lock);
    pthread_mutex_init(&t->cache_m, NULL);
    return t;
}

static void free_topic(rt_topic *e)
{
    free(e->qds);
    free(e->idx);
    free(e->zans);
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
    for (size_t i = 0; i <= t->amask; i++)
        free_grave(t->abuckets[i]);
    free(t->abuckets);
    free_grave(t->grave);
    free(t->ring);
    for (int32_t b = 0; b < t->nbrokers; b++) {
        for (int f = 0; f < 2; f++) {
            free(t->brokers[b].frag[f]);
            free(t->brokers[b].qd_prefix[f]);
        }
        free(t->brokers[b].topics);
    }
    free(t->brokers);
    for (int32_t z = 0; z < t->nzones; z++)
        free(t->zones[z].fold);
    free(t->zones);
    free(t->vals);
    free(t->val_buckets);
    pthread_mutex_destroy(&t->cache_m);
    rt_lock_destroy(&t->lock);
    free(t);
}

static rt_topic *find_hashed(const rt_table *t, const char *name, size_t len, uint32_t h)
{
    for (rt_topic *e = t->buckets[h & t->mask]; e; e = e->next)
        if (e->hash == h && e->len == len && memcmp(e->name, name, len) == 0)
            return e;
    return NULL;
}

rt_topic *rt_find(const rt_table *t, const char *name, size_t len)
{
    return find_hashed(t, name, len, hash_name(name, len));
}

uint32_t rt_topic_hash(const char *name, size_t len)
{
    return hash_name(name, len);
}

/* rt_prefetch's work, inlined where the table prefetches for itself (a registration's
 * lookahead: an exported function is called, not inlined, in a shared object) */
static inline void prefetch_lookup(const rt_table *t, uint32_t hash, int stage)
{
    if (stage == 0) {
        __builtin_prefetch(&t->buckets[hash & t->mask]);
        return;
    }
    const rt_topic *e = t->buckets[hash & t->mask];
    if (!e)
        return;
    if (stage == 1) {
        __builtin_prefetch(e);
        __builtin_prefetch(e->name);    /* (the entry's second line, as often as not) */
    } else {
        __builtin_prefetch(__atomic_load_n(&e->zans, __ATOMIC_ACQUIRE));  /* (NULL: none) */
    }
}

void rt_prefetch(const rt_table *t, uint32_t hash, int stage)
{
    prefetch_lookup(t, hash, stage);
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
 * only when the count doubles). */
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
    e->slot[0] = e->slot[1] = -1;
    if (t->count >= t->mask + 1)
        rehash(t, (t->mask + 1) * 2);
    e->next = t->buckets[e->hash & t->mask];
    t->buckets[e->hash & t->mask] = e;
    t->count++;
    return e;
}

static void drop_bodies(rt_table *t, rt_topic *e);

static void unlink_topic(rt_table *t, rt_topic *e)
{
    rt_topic **pp = &t->buckets[e->hash & t->mask];
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    t->count--;
    drop_bodies(t, e);
    free_topic(e);
}

/* ---------------------------------------------------------------- values */

/* Double a slot array's capacity (16 first): 0, or RT_NOMEM with nothing changed. */
static int grow_slots(void **slots, int32_t *cap, size_t size)
{
    int32_t n = *cap ? *cap * 2 : 16;
    void *p = realloc(*slots, (size_t)n * size);
    if (!p)
        return RT_NOMEM;
    *slots = p;
    *cap = n;
    return 0;
}

/* QueueData values are interned: a cluster's topics mostly share a handful of
 * (perm, queue counts, flag), so a QueueData holds a slot, not four numbers. */

static inline uint32_t val_hash(int32_t perm, int32_t read, int32_t write, int32_t sysflag)
{
    uint64_t h = (uint64_t)(uint32_t)perm * 0x9E3779B97F4A7C15ull;
    h = (h ^ (uint32_t)read) * 0xC2B2AE3D27D4EB4Full;
    h = (h ^ (uint32_t)write) * 0x165667B19E3779F9ull;
    h = (h ^ (uint32_t)sysflag) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

static void val_rehash(rt_table *t, uint32_t n)
{
    int32_t *nb = calloc(n, sizeof(int32_t));
    if (!nb)
        return;                     /* longer chains, still correct */
    for (int32_t v = 0; v < t->nvals; v++) {
        if (!t->vals[v].refs)
            continue;
        uint32_t h = t->vals[v].hash & (n - 1);
        t->vals[v].next = nb[h];
        nb[h] = v + 1;
    }
    free(t->val_buckets);
    t->val_buckets = nb;
    t->val_mask = n - 1;
}

/* A reference to the slot holding these values (interned on first use); RT_NOMEM. */
static int32_t val_ref(rt_table *t, int32_t perm, int32_t read, int32_t write, int32_t sysflag)
{
    uint32_t h = val_hash(perm, read, write, sysflag);
    for (int32_t v = t->val_buckets[h & t->val_mask]; v; v = t->vals[v - 1].next) {
        rt_val *x = &t->vals[v - 1];
        if (x->hash == h && x->perm == perm && x->read == read && x->write == write
            && x->sysflag == sysflag) {
            x->refs++;
            return v - 1;
        }
    }
    int32_t v;
    if (t->free_val) {
        v = t->free_val - 1;
        t->free_val = t->vals[v].next;
    } else {
        if (t->nvals == t->cap_vals && grow_slots((void **)&t->vals, &t->cap_vals, sizeof(rt_val)))
            return RT_NOMEM;
        v = t->nvals++;
    }
    t->vals[v] = (rt_val){perm, read, write, sysflag, 1, h, t->val_buckets[h & t->val_mask]};
    t->val_buckets[h & t->val_mask] = v + 1;
    if ((uint32_t)t->nvals > t->val_mask + 1)
        val_rehash(t, (t->val_mask + 1) * 2);
    return v;
}

static void val_unref(rt_table *t, int32_t v)
{
    rt_val *x = &t->vals[v];
    if (--x->refs)
        return;
    int32_t *pp = &t->val_buckets[x->hash & t->val_mask];
    while (*pp != v + 1)
        pp = &t->vals[*pp - 1].next;
    *pp = x->next;
    x->next = t->free_val;
    t->free_val = v + 1;
}

static inline int same_val(const rt_val *x, const rt_qdv *q)
{
    return x->perm == q->perm && x->read == q->read && x->write == q->write
        && x->sysflag == q->sysflag;
}

/* ---------------------------------------------------------------- a topic's QueueData */

/* A topic's QueueData are found by broker in O(1) whatever the route's width: a
 * linear scan up to IDX_MIN of them, an open-addressing index (linear probing,
 * backward-shift deletion) past it. */
#define IDX_MIN 8

static inline uint32_t idx_home(const rt_topic *e, int32_t broker)
{
    return ((uint32_t)broker * 2654435761u) & e->idx_mask;
}

static void idx_insert(rt_topic *e, int32_t pos)
{
    uint32_t i = idx_home(e, e->qds[pos].broker);
    while (e->idx[i])
        i = (i + 1) & e->idx_mask;
    e->idx[i] = (uint32_t)pos + 1;
}

/* Index e's QueueData in a table of n slots (a power of two); 0, or RT_NOMEM. */
static int idx_build(rt_topic *e, uint32_t n)
{
    uint32_t *idx = calloc(n, sizeof(uint32_t));
    if (!idx)
        return RT_NOMEM;
    free(e->idx);
    e->idx = idx;
    e->idx_mask = n - 1;
    for (int32_t k = 0; k < e->nqd; k++)
        idx_insert(e, k);
    return 0;
}

static int find_qd(const rt_topic *e, int32_t broker, uint64_t *work)
{
    if (!e->idx) {
        for (int i = 0; i < e->nqd; i++)
            if (e->qds[i].broker == broker) {
                *work += (uint64_t)i + 1;
                return i;
            }
        *work += (uint64_t)e->nqd + 1;
        return -1;
    }
    for (uint32_t i = idx_home(e, broker);; i = (i + 1) & e->idx_mask) {
        ++*work;
        uint32_t p = e->idx[i];
        if (!p)
            return -1;
        if (e->qds[p - 1].broker == broker)
            return (int)p - 1;
    }
}

/* The index slot holding position pos (present). */
static uint32_t idx_slot(const rt_topic *e, int32_t pos)
{
    uint32_t i = idx_home(e, e->qds[pos].broker);
    while (e->idx[i] != (uint32_t)pos + 1)
        i = (i + 1) & e->idx_mask;
    return i;
}

static void idx_delete(rt_topic *e, uint32_t i)
{
    for (uint32_t j = i;;) {
        j = (j + 1) & e->idx_mask;
        if (!e->idx[j])
            break;
        uint32_t k = idx_home(e, e->qds[e->idx[j] - 1].broker);
        /* Move j back into the hole at i unless its home lies in (i, j]. */
        if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
            continue;
        e->idx[i] = e->idx[j];
        i = j;
    }
    e->idx[i] = 0;
}

/* ---------------------------------------------------------------- changes */

static void changed(rt_table *t, rt_topic *e)
{
    drop_bodies(t, e);
    t->version++;
}

/* Broker b lists topic e (its QueueData at position i of e). */
static int broker_add_topic(rt_table *t, int32_t b, rt_topic *e, int i)
{
    rt_broker *br = &t->brokers[b];
    if (br->ntopics == br->cap_topics) {
        int32_t cap = br->cap_topics ? br->cap_topics + br->cap_topics / 2 + 1 : 4;
        rt_topic **nt = realloc(br->topics, (size_t)cap * sizeof(rt_topic *));
        if (!nt)
            return RT_NOMEM;
        br->topics = nt;
        br->cap_topics = cap;
    }
    e->qds[i].bpos = br->ntopics;
    br->topics[br->ntopics++] = e;
    return 0;
}

static void broker_drop_topic(rt_table *t, int32_t b, int32_t bpos, uint64_t *work)
{
    rt_broker *br = &t->brokers[b];
    rt_topic *last = br->topics[--br->ntopics];
    if (bpos != br->ntopics) {
        br->topics[bpos] = last;
        last->qds[find_qd(last, b, work)].bpos = bpos;
    }
}

static void order_by(const rt_table *t, const rt_topic *e, uint32_t mask, int32_t *order);

static int put_qd(rt_table *t, rt_topic *e, const rt_qdv *q, uint64_t *work)
{
    int i = find_qd(e, q->broker, work);
    if (i >= 0 && same_val(&t->vals[e->qds[i].val], q))
        return 0;
    int32_t v = val_ref(t, q->perm, q->read, q->write, q->sysflag);
    if (v < 0)
        return RT_NOMEM;
    if (i >= 0) {
        val_unref(t, e->qds[i].val);
        e->qds[i].val = v;
    } else {
        if (e->nqd == e->cap) {
            int32_t cap = e->cap ? e->cap + e->cap / 2 + 1 : 2;
            rt_qd *nq = realloc(e->qds, (size_t)cap * sizeof(rt_qd));
            if (!nq) {
                val_unref(t, v);
                return RT_NOMEM;
            }
            e->qds = nq;
            e->cap = cap;
        }
        if (e->ins_next == UINT32_MAX) {
            /* Renumber in insertion order (unreachable in practice: 2^32 insertions). */
            int32_t *order = malloc((size_t)e->nqd * sizeof(int32_t) + 1);
            if (!order) {
                val_unref(t, v);
                return RT_NOMEM;
            }
            order_by(t, e, 0, order);
            for (int32_t k = 0; k < e->nqd; k++)
                e->qds[order[k]].ins = (uint32_t)k;
            e->ins_next = (uint32_t)e->nqd;
            free(order);
        }
        i = e->nqd;
        e->qds[i] = (rt_qd){q->broker, v, e->ins_next, 0};
        if (broker_add_topic(t, q->broker, e, i) < 0) {
            val_unref(t, v);
            return RT_NOMEM;
        }
        e->ins_next++;
        e->nqd++;
        if ((uint32_t)e->nqd > e->peak)
            e->peak = (uint32_t)e->nqd;
        if (e->idx && (uint32_t)e->nqd * 4 > (e->idx_mask + 1) * 3) {
            if (idx_build(e, (e->idx_mask + 1) * 2) < 0) {
                free(e->idx);       /* no memory: a scan, still correct */
                e->idx = NULL;
            }
        } else if (e->idx) {
            idx_insert(e, i);
        } else if (e->nqd > IDX_MIN) {
            idx_build(e, 32);       /* no memory: a scan, still correct */
        }
    }
    changed(t, e);
    return 1;
}
int rt_put(rt_table *t, const char *name, size_t len, const rt_qdv *qd)
{
    HOLDS_WRITE(t);
    uint64_t work = 0;
    rt_topic *e = rt_find(t, name, len);
    if (!e && !(e = insert_topic(t, name, len)))
        return RT_NOMEM;
    int r = put_qd(t, e, qd, &work);
    if (r == RT_NOMEM && e->nqd == 0)
        unlink_topic(t, e);
    add_work(t, work);
    return r;
}

/* Remove position i of e; frees e when it was the last. */
static void remove_at(rt_table *t, rt_topic *e, int i, uint64_t *work)
{
    rt_qd gone = e->qds[i];
    int32_t last = e->nqd - 1;
    broker_drop_topic(t, gone.broker, gone.bpos, work);
    val_unref(t, gone.val);
    if (e->idx) {
        idx_delete(e, idx_slot(e, i));
        if (i != last)              /* the last one moves into the hole */
            e->idx[idx_slot(e, last)] = (uint32_t)i + 1;
    }
    e->qds[i] = e->qds[last];
    e->nqd--;
    if (e->idx && e->nqd <= IDX_MIN / 2) {
        free(e->idx);
        e->idx = NULL;
    }
    changed(t, e);
    if (e->nqd == 0)
        unlink_topic(t, e);
}

int rt_remove(rt_table *t, const char *name, size_t len, int32_t broker)
{
    HOLDS_WRITE(t);
    uint64_t work = 0;
    rt_topic *e = rt_find(t, name, len);
    int i = e ? find_qd(e, broker, &work) : -1;
    if (i >= 0) {
        remove_at(t, e, i, &work);
        shrink(t);
    }
    add_work(t, work);
    return i >= 0;
}

/* body runs on every topic e where broker has QueueData (at position i), from the
 * broker's list: what is keyed by a broker touches only its own topics. body may
 * remove that QueueData: the list's last entry (visited already) moves into its place. */
#define FOR_BROKER_TOPICS(t, broker, e, i, work, ...)                    \
    for (int32_t _k = (t)->brokers[(broker)].ntopics - 1; _k >= 0; _k--) { \
        rt_topic *e = (t)->brokers[(broker)].topics[_k];                \
        int i = find_qd(e, (broker), (work));                           \
        __VA_ARGS__                                                     \
    }

size_t rt_remove_broker(rt_table *t, int32_t broker)
{
    HOLDS_WRITE(t);
    uint64_t work = 0;
    size_t n = 0;
    FOR_BROKER_TOPICS(t, broker, e, i, &work, { remove_at(t, e, i, &work); n++; })
    shrink(t);
    add_work(t, work);
    return n;
}

size_t rt_write_perm(rt_table *t, int32_t broker, int wipe)
{
    HOLDS_WRITE(t);
    uint64_t work = 0;
    size_t n = 0;
    FOR_BROKER_TOPICS(t, broker, e, i, &work, {
        const rt_val *x = &t->vals[e->qds[i].val];
        rt_qdv q = {broker, wipe ? (x->perm & ~PERM_WRITE) : (PERM_READ | PERM_WRITE),
                    x->read, x->write, x->sysflag};
        if (q.perm != x->perm)
            put_qd(t, e, &q, &work);    /* no memory: that one keeps its permission */
        n++;
    })
    add_work(t, work);
    return n;
}

/* A registration's walk over its topics (rt_apply_diff, rt_apply) is bound by memory:
 * each topic is a bucket, an entry, its QueueData index and its QueueData, four
 * dependent loads from a table of megabytes (300 brokers x 10,000 topics: 70 MB),
 * each a cache miss in turn. The walk asks for them ahead, one stage each
 * AHEAD records apart (the name's hash and its bucket, the entry, the index slot and
 * where the broker's QueueData goes, the QueueData), so that the misses of
 * several topics overlap (bench/README.md, W3). Prefetches only: whatever they
 * find, the lookup that follows is the same. */
enum { AHEAD = 8, AHEAD_RING = 4 * AHEAD };

typedef struct {
    const rt_table *t;
    const rmq_topic_rec *recs;
    const uint8_t *only;            /* NULL: every record */
    size_t n;
    int32_t broker;
    uint32_t hash[AHEAD_RING];      /* the names' hashes, record k at k % AHEAD_RING */
} lookahead;

static inline const rt_topic *ahead_entry(const lookahead *la, size_t k)
{
    uint32_t h = la->hash[k % AHEAD_RING];
    const rt_topic *e = la->t->buckets[h & la->t->mask];
    return e && e->hash == h ? e : NULL;
}

static inline void ahead_stage(lookahead *la, size_t k, int stage)
{
    if (k >= la->n || (la->only && !la->only[k]))
        return;
    const rt_topic *e;
    switch (stage) {
    case 0:
        la->hash[k % AHEAD_RING] = hash_name(la->recs[k].name, la->recs[k].name_len);
        prefetch_lookup(la->t, la->hash[k % AHEAD_RING], 0);
        break;
    case 1:
        prefetch_lookup(la->t, la->hash[k % AHEAD_RING], 1);
        break;
    case 2:
        if ((e = ahead_entry(la, k))) {
            if (e->idx)
                __builtin_prefetch(&e->idx[idx_home(e, la->broker)]);
            if (e->qds)             /* (where a new QueueData goes, or the first) */
                __builtin_prefetch(&e->qds[e->nqd < e->cap ? e->nqd : 0], 1);
        }
        break;
    default:
        if ((e = ahead_entry(la, k)) && e->idx) {
            uint32_t p = e->idx[idx_home(e, la->broker)];
            if (p)
                __builtin_prefetch(&e->qds[p - 1]);
        }
    }
}

static void ahead_start(lookahead *la, const rt_table *t, const rmq_topic_rec *recs, size_t n,
                        const uint8_t *only, int32_t broker)
{
    *la = (lookahead){t, recs, only, n, broker, {0}};
    for (size_t k = 0; k < 3 * AHEAD; k++)
        ahead_stage(la, k, 0);
    for (size_t k = 0; k < 2 * AHEAD; k++)
        ahead_stage(la, k, 1);
    for (size_t k = 0; k < AHEAD; k++)
        ahead_stage(la, k, 2);
}

/* At record k (every k, looked up or not): the later records' stages. */
static inline void ahead_step(lookahead *la, size_t k)
{
    ahead_stage(la, k + 3 * AHEAD, 0);
    ahead_stage(la, k + 2 * AHEAD, 1);
    ahead_stage(la, k + AHEAD, 2);
    ahead_stage(la, k + AHEAD / 2, 3);
}

/* Record k's entry, its name's hash computed ahead (k a record of la->only). */
static inline rt_topic *ahead_find(const lookahead *la, size_t k)
{
    return find_hashed(la->t, la->recs[k].name, la->recs[k].name_len, la->hash[k % AHEAD_RING]);
}

size_t rt_apply_diff(const rt_table *t, int32_t b, const rmq_topic_rec *recs, size_t n, int force,
                     int readonly, uint8_t *only, int *taken)
{
    HOLDS_LOCK(t);
    /* A broker with no QueueData yet (its first registration) has none to compare:
     * every record is written. A walk over the table would say so for each record,
     * four dependent loads each, in a table of tens of MB (W3's first round). */
    if (t->brokers[b].ntopics == 0) {
        memset(only, 1, n);
        *taken = n > 0;
        add_work((rt_table *)t, n);
        return n;
    }
    uint64_t work = 0;
    size_t differ = 0;
    int keyed_otherwise = 0;
    lookahead la;
    ahead_start(&la, t, recs, n, NULL, b);
    *taken = 0;
    for (size_t k = 0; k < n; k++) {
        const rmq_topic_rec *r = &recs[k];
        ahead_step(&la, k);
        const rt_topic *e = ahead_find(&la, k);
        int i = e ? find_qd(e, b, &work) : -1;
        keyed_otherwise |= r->key_len != r->name_len || memcmp(r->key, r->name, r->key_len) != 0;
        only[k] = 0;
        if (!force && i >= 0)
            continue;
        *taken = 1;
        rt_qdv q = {b, readonly ? (r->perm & ~PERM_WRITE) : r->perm, r->read, r->write,
                    r->sysflag};
        if (i >= 0 && same_val(&t->vals[e->qds[i].val], &q))
            continue;
        only[k] = 1;
        differ++;
    }
    if (keyed_otherwise)            /* (rt_apply decides for each, in order) */
        memset(only, 1, n);
    add_work((rt_table *)t, work + n);
    return differ;
}

int rt_apply(rt_table *t, int32_t b, const rmq_topic_rec *recs, size_t n, int force, int readonly,
             int delete_missing, const uint8_t *only, size_t *removed)
{
    HOLDS_WRITE(t);
    uint64_t work = n;
    int wrote = 0;
    size_t gone = 0;
    if (delete_missing) {
        uint32_t stamp = ++t->stamp;
        for (size_t k = 0; k < n; k++) {
            rt_topic *e = rt_find(t, recs[k].key, recs[k].key_len);
            if (e)
                e->stamp = stamp;
        }
        FOR_BROKER_TOPICS(t, b, e, i, &work, {
            if (e->stamp != stamp) {
                remove_at(t, e, i, &work);
                gone++;
            }
        })
        shrink(t);
    }
    if (removed)
        *removed = gone;
    lookahead la;
    ahead_start(&la, t, recs, n, only, b);
    for (size_t k = 0; k < n; k++) {
        const rmq_topic_rec *r = &recs[k];
        ahead_step(&la, k);
        if (only && !only[k])
            continue;
        rt_topic *e = ahead_find(&la, k);
        if (!force && e && find_qd(e, b, &work) >= 0)
            continue;
        rt_qdv q = {b, readonly ? (r->perm & ~PERM_WRITE) : r->perm, r->read, r->write,
                    r->sysflag};
        if (!e && !(e = insert_topic(t, r->name, r->name_len))) {
            wrote = RT_NOMEM;
            break;
        }
        if (put_qd(t, e, &q, &work) == RT_NOMEM) {
            if (e->nqd == 0)
                unlink_topic(t, e);
            wrote = RT_NOMEM;
            break;
        }
        wrote = 1;
    }
    add_work(t, work);
    return wrote;
}

void rt_forget(rt_table *t, const char *name, size_t len)
{
    HOLDS_WRITE(t);
    if (name) {
        rt_topic *e = rt_find(t, name, len);
        if (e)
            drop_bodies(t, e);
    } else {
        for (size_t i = 0; i <= t->mask; i++)
            for (rt_topic *e = t->buckets[i]; e; e = e->next)
                drop_bodies(t, e);
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
        if (t->nbrokers == t->cap_brokers
            && grow_slots((void **)&t->brokers, &t->cap_brokers, sizeof(rt_broker)))
            return RT_NOMEM;
        b = t->nbrokers++;
    }
    memset(&t->brokers[b], 0, sizeof(rt_broker));
    t->brokers[b].used = 1;
    t->brokers[b].zone = -1;
    return b;
}

int rt_release_broker(rt_table *t, int32_t b)
{
    HOLDS_WRITE(t);
    rt_broker *br = &t->brokers[b];
    if (!br->used || br->frag[0] || br->ntopics)
        return 0;
    for (int f = 0; f < 2; f++)
        free(br->qd_prefix[f]);     /* frag[] is NULL: not registered */
    free(br->topics);
    memset(br, 0, sizeof *br);
    br->next_free = t->free_head;
    t->free_head = b + 1;
    t->nfree++;
    return 1;
}

typedef struct {
    uint64_t seq;
    uint32_t hash;
} seq_hash;

int rt_topic_hashes(const rt_table *t, uint64_t **seqs, uint32_t **hashes, size_t *n)
{
    size_t count = t->count, k = 0;
    uint64_t top = 0;
    seq_hash *a = malloc((count ? count : 1) * sizeof *a);
    seq_hash *b = malloc((count ? count : 1) * sizeof *b);
    size_t *counts = malloc(65536 * sizeof *counts);
    *seqs = malloc((count ? count : 1) * sizeof **seqs);
    *hashes = malloc((count ? count : 1) * sizeof **hashes);
    if (!a || !b || !counts || !*seqs || !*hashes) {
        free(a); free(b); free(counts); free(*seqs); free(*hashes);
        *seqs = NULL; *hashes = NULL;
        return RT_NOMEM;
    }
    for (size_t i = 0; i <= t->mask; i++) {
        for (const rt_topic *e = t->buckets[i]; e; e = e->next) {
            a[k].seq = e->seq;
            a[k].hash = jt_spread_hash((const unsigned char *)e->name, e->len);
            top |= e->seq;
            k++;
        }
    }
    assert(k == count);
    /* into insertion order: radix sort, 16 bits of the number at a time, as many
     * passes as its highest bit needs (two below 2**32 insertions) */
    for (unsigned shift = 0; shift < 64 && (top >> shift); shift += 16) {
        memset(counts, 0, 65536 * sizeof *counts);
        for (size_t i = 0; i < k; i++)
            counts[(a[i].seq >> shift) & 0xFFFF]++;
        size_t total = 0;
        for (size_t d = 0; d < 65536; d++) {
            size_t c = counts[d];
            counts[d] = total;
            total += c;
        }
        for (size_t i = 0; i < k; i++)
            b[counts[(a[i].seq >> shift) & 0xFFFF]++] = a[i];
        seq_hash *swap = a;
        a = b;
        b = swap;
    }
    for (size_t i = 0; i < k; i++) {
        (*seqs)[i] = a[i].seq;
        (*hashes)[i] = a[i].hash;
    }
    *n = k;
    free(a);
    free(b);
    free(counts);
    return 0;
}

void rt_trim(void)
{
#ifdef __GLIBC__
    /* glibc keeps freed small blocks (topic entries) in its heap; this hands
     * the whole free pages back to the system. */
    malloc_trim(0);
#endif
}

static void drop_zone_answers(rt_table *t);

/* [W] The zone class of folded zone name z (one more broker in it), a new one
 * when no broker has it; RT_NOMEM. Every zone answer is dropped first when the set
 * of zones changes: a class's answers hold for its zone only, and each topic's
 * array of them has one entry per class. */
static int32_t zone_ref(rt_table *t, const char *z, size_t n)
{
    int32_t free_slot = -1;
    for (int32_t k = 0; k < t->nzones; k++) {
        rt_zone *zn = &t->zones[k];
        if (!zn->refs)
            free_slot = free_slot < 0 ? k : free_slot;
        else if (zn->len == n && memcmp(zn->fold, z, n) == 0) {
            zn->refs++;
            return k + 1;
        }
    }
    char *copy = malloc(n ? n : 1);
    if (!copy)
        return RT_NOMEM;
    memcpy(copy, z, n);
    if (free_slot < 0) {
        if (t->nzones == t->cap_zones
            && grow_slots((void **)&t->zones, &t->cap_zones, sizeof(rt_zone))) {
            free(copy);
            return RT_NOMEM;
        }
        free_slot = t->nzones;
    }
    drop_zone_answers(t);
    if (free_slot == t->nzones)
        t->nzones++;
    t->zones[free_slot] = (rt_zone){copy, n, 1};
    return free_slot + 1;
}

/* [W] One broker fewer in zone class z (> 0); the last one frees the class. */
static void zone_unref(rt_table *t, int32_t z)
{
    rt_zone *zn = &t->zones[z - 1];
    if (--zn->refs)
        return;
    drop_zone_answers(t);
    free(zn->fold);
    *zn = (rt_zone){NULL, 0, 0};
}

int rt_zone_form(const rt_table *t, const char *fold, size_t len)
{
    HOLDS_LOCK(t);
    for (int32_t k = 0; k < t->nzones; k++) {
        const rt_zone *zn = &t->zones[k];
        if (zn->refs && zn->len == len && memcmp(zn->fold, fold, len) == 0)
            return RT_ZONE + k + 1;
    }
    return RT_ZONE;
}

int rt_set_broker(rt_table *t, int32_t b, const char *std, size_t std_len,
                  const char *legacy, size_t legacy_len, const char *qd_std,
                  size_t qd_std_len, const char *qd_legacy, size_t qd_legacy_len,
                  uint32_t jhash, int python_only, const char *zone, size_t zone_len,
                  int has_master)
{
    HOLDS_WRITE(t);
    assert(b >= 0 && b < t->nbrokers && t->brokers[b].used);
    rt_blob *s = NULL, *l = NULL;
    int32_t old_zone = t->brokers[b].zone, new_zone = -1;
    if (std && zone) {
        const rt_zone *zn = old_zone > 0 ? &t->zones[old_zone - 1] : NULL;
        if (zn && zn->len == zone_len && memcmp(zn->fold, zone, zone_len) == 0)
            new_zone = old_zone;    /* the same: no change to the set of zones */
        else if ((new_zone = zone_ref(t, zone, zone_len)) == RT_NOMEM)
            return RT_NOMEM;
    }
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
        if (new_zone > 0 && new_zone != old_zone)
            zone_unref(t, new_zone);
        return RT_NOMEM;
    }
    rt_broker *br = &t->brokers[b];
    if (old_zone > 0 && old_zone != new_zone)
        zone_unref(t, old_zone);
    br->zone = new_zone;
    br->has_master = has_master;
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
    for (int32_t k = 0; k < br->ntopics; k++)
        drop_bodies(t, br->topics[k]);
    add_work(t, (uint64_t)br->ntopics);
    t->version++;
    return 0;
}

/* ---------------------------------------------------------------- routes */

/* Up to this many QueueData (most topics: a few brokers) an insertion sort
 * beats the heapsort; its O(n^2) stays bounded. */
#define JAVA_ORDER_INSERTION 16

/* Position i's sort key: its broker's bucket, then its insertion order. Keys
 * are distinct, so any correct sort gives the one stable order. */
static inline uint64_t java_key(const rt_table *t, const rt_topic *e, uint32_t mask, int32_t i)
{
    return (uint64_t)(t->brokers[e->qds[i].broker].jhash & mask) << 32 | e->qds[i].ins;
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

/* Positions of e's QueueData by (bucket under mask, insertion): mask 0 gives
 * insertion order. */
static void order_by(const rt_table *t, const rt_topic *e, uint32_t mask, int32_t *order)
{
    int32_t n = e->nqd;
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

/* HashMap's table for n keys from a capacity of `cap` (a power of two): it doubles
 * once its size exceeds 3/4 of the table. */
static uint32_t hash_map_table(uint32_t cap, uint32_t n)
{
    while (n > cap / 4 * 3 && cap < (1u << 30))
        cap <<= 1;
    return cap;
}

void rt_java_order(const rt_table *t, const rt_topic *e, int32_t *order)
{
    order_by(t, e, hash_map_table(16, e->peak) - 1, order);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

uint32_t rt_java_broker_order(const rt_table *t, const rt_topic *e, const int32_t *order,
                              int32_t *border)
{
    uint32_t n = (uint32_t)e->nqd;
    /* (int) (n / .75f) + 1 is 4n/3 + 1 in integers: n / .75 never lands within float
     * rounding of the integer above it (n < 2^22: far more brokers than exist). */
    uint32_t asked = 4 * (uint64_t)n / 3 + 1, cap = 16;
    while (cap < asked && cap < (1u << 30))
        cap <<= 1;                  /* tableSizeFor */
    uint32_t size = hash_map_table(cap, n);
    if (size == hash_map_table(16, e->peak))
        return 0;                   /* one table, one order: the map's */
    /* By bucket in the set's table, ties in the map's order (its rank k). */
    uint64_t small[JAVA_ORDER_INSERTION], *keys = n <= JAVA_ORDER_INSERTION ? small
                                                   : malloc((size_t)n * sizeof(uint64_t));
    if (!keys)
        return UINT32_MAX;
    for (uint32_t k = 0; k < n; k++)
        keys[k] = (uint64_t)(t->brokers[e->qds[order[k]].broker].jhash & (size - 1)) << 32 | k;
    qsort(keys, n, sizeof(uint64_t), cmp_u64);
    for (uint32_t k = 0; k < n; k++)
        border[k] = order[(uint32_t)keys[k]];
    if (keys != small)
        free(keys);
    return size;
}

int rt_topic_qds(const rt_table *t, const rt_topic *e, rt_qdv *out)
{
    HOLDS_LOCK(t);
    int32_t *order = malloc((size_t)e->nqd * sizeof(int32_t) + 1);
    if (!order)
        return RT_NOMEM;
    order_by(t, e, 0, order);
    for (int32_t k = 0; k < e->nqd; k++) {
        const rt_qd *q = &e->qds[order[k]];
        const rt_val *v = &t->vals[q->val];
        out[k] = (rt_qdv){q->broker, v->perm, v->read, v->write, v->sysflag};
    }
    free(order);
    return 0;
}

int64_t rt_first_flag(const rt_table *t, const rt_topic *e)
{
    HOLDS_LOCK(t);
    int32_t small[64];
    int32_t *order = e->nqd <= 64 ? small : malloc((size_t)e->nqd * sizeof(int32_t));
    if (!order)
        return RT_NOMEM;
    rt_java_order(t, e, order);
    int64_t flag = t->vals[e->qds[order[0]].val].sysflag;
    if (order != small)
        free(order);
    return flag;
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

/* ZoneRouteRPCHook's filter (zone >= 0: a zone-mode query's class): a broker with
 * a master in another zone (or none) goes with its QueueData; one without a master
 * stays (read from its slaves). */
static inline int zone_keeps(const rt_broker *br, int zone)
{
    return zone < 0 || !br->has_master || (zone != 0 && br->zone == zone);
}

/* ---------------------------------------------------------------- the answer cache */

/* Bounded by a byte budget over the answers it holds (shared ones once). Clients
 * poll every topic they use every 30 s, so under a budget smaller than the
 * answers, recency alone would evict each answer just before its next query
 * (a loop over more than fits): admission is by frequency instead, a newcomer
 * replacing only colder answers (sampled from a clock hand), counts halved as
 * they age; at equal counts the cached set stays, and the hit rate is the share
 * of the answers that fits. */
#define EVICT_SAMPLE 8
#define EVICT_MAX 32
#define AGING_MIN 4096

static void answer_link(rt_table *t, rt_blob *a)
{
    if (t->nanswers >= t->amask + 1) {
        size_t n = (t->amask + 1) * 2;
        rt_blob **nb = calloc(n, sizeof(rt_blob *));
        if (nb) {                   /* else longer chains, still correct */
            for (size_t i = 0; i <= t->amask; i++)
                for (rt_blob *x = t->abuckets[i], *next; x; x = next) {
                    next = x->next;
                    x->next = nb[x->hash & (n - 1)];
                    nb[x->hash & (n - 1)] = x;
                }
            free(t->abuckets);
            t->abuckets = nb;
            t->amask = n - 1;
        }
    }
    a->next = t->abuckets[a->hash & t->amask];
    t->abuckets[a->hash & t->amask] = a;
    t->nanswers++;
    t->bytes += a->size;
}

static rt_blob *answer_find(const rt_table *t, uint64_t hash, const int32_t *key, int32_t nkey)
{
    for (rt_blob *a = t->abuckets[hash & t->amask]; a; a = a->next)
        if (a->hash == hash && a->nkey == nkey
            && memcmp(blob_key(a), key, (size_t)nkey * sizeof(int32_t)) == 0)
            return a;
    return NULL;
}

/* Whether the calling reader is the only one: then no one else can hold an
 * answer it unlinked, and it may free it at once. */
static int alone(rt_table *t)
{
    /* the unlink, then the count, as a writer's gate and count: a reader arriving
     * after the count finds the answer gone */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return readers_in(&t->lock) == 1;
}

/* Drop one topic form's reference; the last one unlinks the answer and frees it
 * (reading: into the graveyard unless the caller reads alone). */
static void answer_release(rt_table *t, rt_blob *a, int reading)
{
    if (--a->refs)
        return;
    rt_blob **pp = &t->abuckets[a->hash & t->amask];
    while (*pp != a)
        pp = &(*pp)->next;
    *pp = a->next;
    t->nanswers--;
    if (reading && !alone(t)) {
        a->next = t->grave;         /* still counted in bytes until freed */
        __atomic_store_n(&t->grave, a, __ATOMIC_RELAXED);   /* (rt_rdunlock's look) */
        t->buried++;
    } else {
        t->bytes -= a->size;
        free(a);
    }
}

static int ring_reserve(rt_table *t)
{
    if (t->nring < t->cap_ring)
        return 0;
    size_t cap = t->cap_ring ? t->cap_ring * 2 : 64;
    rt_cref *r = realloc(t->ring, cap * sizeof(rt_cref));
    if (!r)
        return RT_NOMEM;
    t->ring = r;
    t->cap_ring = cap;
    return 0;
}

/* Where e's answer in form f is kept (its zone answers exist: form < RT_ZONE, or
 * e->zans set), and its ring entry. */
static inline rt_blob **body_of(rt_topic *e, int f)
{
    return f < RT_ZONE ? &e->body[f] : &e->zans[f - RT_ZONE].body;
}

static inline int32_t *slot_of(rt_topic *e, int f)
{
    return f < RT_ZONE ? &e->slot[f] : &e->zans[f - RT_ZONE].slot;
}

/* The cached answer of e in form f, or NULL: readers' lock-free look. A zone
 * array, once published, lives until a writer drops it. */
static inline const rt_blob *cached_answer(const rt_topic *e, int f)
{
    if (f < RT_ZONE)
        return __atomic_load_n(&e->body[f], __ATOMIC_ACQUIRE);
    const rt_zans *z = __atomic_load_n(&e->zans, __ATOMIC_ACQUIRE);
    return z ? __atomic_load_n(&z[f - RT_ZONE].body, __ATOMIC_ACQUIRE) : NULL;
}

/* [cache_m] e's zone array, made (empty) when it has none: 0, or RT_NOMEM. */
static int zans_ready(rt_table *t, rt_topic *e)
{
    if (e->zans)
        return 0;
    rt_zans *z = malloc(((size_t)t->nzones + 1) * sizeof(rt_zans));
    if (!z)
        return RT_NOMEM;
    for (int32_t k = 0; k <= t->nzones; k++)
        z[k] = (rt_zans){NULL, -1};
    __atomic_store_n(&e->zans, z, __ATOMIC_RELEASE);
    return 0;
}

static void ring_remove(rt_table *t, rt_topic *e, int f)
{
    size_t s = (size_t)*slot_of(e, f);
    rt_cref last = t->ring[--t->nring];
    if (s != t->nring) {
        t->ring[s] = last;
        *slot_of(last.topic, last.form) = (int32_t)s;
    }
    *slot_of(e, f) = -1;
}

/* Point e's form f at answer a (one more reference); 0, or RT_NOMEM. */
static int attach(rt_table *t, rt_topic *e, int f, rt_blob *a)
{
    if (ring_reserve(t) < 0 || (f >= RT_ZONE && zans_ready(t, e) < 0))
        return RT_NOMEM;
    t->ring[t->nring] = (rt_cref){e, f};
    *slot_of(e, f) = (int32_t)t->nring++;
    a->refs++;
    __atomic_store_n(body_of(e, f), a, __ATOMIC_RELEASE);
    return 0;
}

static void detach(rt_table *t, rt_topic *e, int f, int reading)
{
    rt_blob *a = *body_of(e, f);
    __atomic_store_n(body_of(e, f), NULL, __ATOMIC_RELEASE);
    ring_remove(t, e, f);
    answer_release(t, a, reading);
}

/* A writer's: e's zone answers go, and their array (sized for the zones of now). */
static void drop_zones_of(rt_table *t, rt_topic *e)
{
    if (!e->zans)
        return;
    for (int32_t k = 0; k <= t->nzones; k++)
        if (e->zans[k].body)
            detach(t, e, RT_ZONE + k, 0);
    free(e->zans);
    e->zans = NULL;
}

/* A writer's: e's answers may have changed. */
static void drop_bodies(rt_table *t, rt_topic *e)
{
    for (int f = 0; f < 2; f++)
        if (e->body[f])
            detach(t, e, f, 0);
    drop_zones_of(t, e);
}

/* A writer's: the set of zones is about to change. */
static void drop_zone_answers(rt_table *t)
{
    for (size_t i = 0; i <= t->mask; i++)
        for (rt_topic *e = t->buckets[i]; e; e = e->next)
            drop_zones_of(t, e);
    t->version++;
}

static inline unsigned heat(const rt_topic *e)
{
    return __atomic_load_n(&e->freq, __ATOMIC_RELAXED);
}

/* [cache_m] Room for size more bytes, evicting answers colder than `freq`:
 * 1 when they fit now. Evicted answers other readers may hold wait in the
 * graveyard, still counted: then the room is there for the next miss. */
static int make_room(rt_table *t, size_t size, unsigned freq)
{
    if (size > t->budget)
        return 0;
    for (int n = 0; t->bytes + size > t->budget; n++) {
        if (n == EVICT_MAX || !t->nring)
            return 0;
        size_t best = 0;
        unsigned best_key = UINT32_MAX;
        for (size_t k = 0; k < EVICT_SAMPLE && k < t->nring; k++) {
            size_t s = (t->hand + k) % t->nring;
            const rt_cref *c = &t->ring[s];
            /* A shared answer frees nothing until its last topic goes: last. */
            unsigned key = heat(c->topic) * 2 + ((*body_of(c->topic, c->form))->refs > 1);
            if (key < best_key) {
                best_key = key;
                best = s;
            }
        }
        t->hand = (t->hand + EVICT_SAMPLE) % t->nring;
        if (best_key / 2 >= freq)
            return 0;               /* as hot as the newcomer: the cached set stays */
        detach(t, t->ring[best].topic, t->ring[best].form, 1);
        t->evictions++;
    }
    return 1;
}

/* [cache_m] Halve every topic's count once as many queries as there are topics
 * (times 8) have been counted since the last time: counts follow the present. */
static void age(rt_table *t)
{
    uint64_t seen = slots_sum(t->hits) + t->misses;
    if (seen - t->since_aging < (t->count * 8 > AGING_MIN ? t->count * 8 : AGING_MIN))
        return;
    t->since_aging = seen;
    for (size_t i = 0; i <= t->mask; i++)
        for (rt_topic *e = t->buckets[i]; e; e = e->next)
            __atomic_store_n(&e->freq, heat(e) / 2, __ATOMIC_RELAXED);
}

/* [cache_m] Cache answer a (built by the caller, not yet linked) for e's form f
 * when the budget admits it: the answer to use (a, or one cached meanwhile;
 * a freed then), or NULL: refused, the caller keeps a. */
static const rt_blob *admit(rt_table *t, rt_topic *e, int f, rt_blob *a)
{
    rt_blob *have = (rt_blob *)cached_answer(e, f);
    if (!have && a->nkey && (have = answer_find(t, a->hash, blob_key(a), a->nkey))) {
        if (attach(t, e, f, have) < 0)
            return NULL;
        t->shared++;
    }
    if (have) {
        free(a);
        return have;
    }
    if (!make_room(t, a->size, heat(e)) || ring_reserve(t) < 0
            || (f >= RT_ZONE && zans_ready(t, e) < 0)) {
        t->refused++;
        return NULL;
    }
    if (!a->nkey)                   /* not shareable: a chain of its own */
        a->hash = (uint64_t)(uintptr_t)a >> 4;
    answer_link(t, a);
    attach(t, e, f, a);             /* cannot fail: the ring has room */
    return a;
}

const rt_blob *rt_route(rt_table *t, const char *name, size_t len, int form, int *status,
                        rt_blob **temp)
{
    return rt_route_hashed(t, name, len, hash_name(name, len), form, status, temp);
}

const rt_blob *rt_route_hashed(rt_table *t, const char *name, size_t len, uint32_t name_hash,
                               int form, int *status, rt_blob **temp)
{
    int legacy = form != RT_STANDARD, zone = form - RT_ZONE;
    RMQ_ASSERT(form >= 0 && zone <= t->nzones);
    RMQ_ASSERT(name_hash == hash_name(name, len));
    HOLDS_LOCK(t);
    *temp = NULL;
    rt_topic *e = find_hashed(t, name, len, name_hash);
    if (!e) {
        *status = RT_NOT_FOUND;
        return NULL;
    }
    unsigned f = heat(e);
    if (f < 255)
        __atomic_store_n(&e->freq, (uint8_t)(f + 1), __ATOMIC_RELAXED);
    const rt_blob *cached = cached_answer(e, form);
    if (cached) {
        __atomic_fetch_add(&t->hits[my_slot()].n, 1, __ATOMIC_RELAXED);
        *status = RT_OK;
        return cached;
    }
    if (t->python_routes) {
        *status = RT_PYTHON;
        return NULL;
    }
    /* Java's order; the answer is a function of its (broker, values) sequence
     * (and the brokers' data, whose change drops it): that is its key. A zone
     * answer is the legacy answer of the QueueData it keeps: it has their key. */
    size_t n = (size_t)e->nqd, nbd = 0, nq = 0, registered = 0;
    int32_t nkey = (int32_t)(2 * n + 1);
    rt_qd_json *qds = malloc(1 + n * (sizeof(rt_qd_json) + sizeof(rt_span) + 2 * sizeof(int32_t))
                             + (size_t)nkey * sizeof(int32_t));
    if (!qds) {
        *status = RT_NOMEM;
        return NULL;
    }
    rt_span *bds = (rt_span *)(qds + n);
    int32_t *order = (int32_t *)(bds + n);
    int32_t *border = order + n;
    int32_t *key = border + n;
    rt_java_order(t, e, order);
    /* brokerDatas follow their own order where Java's HashSet copy has another table
     * (12, 24, 48... brokers): a function of the QueueData sequence and that table's
     * size, which the key therefore carries. */
    uint32_t set_table = rt_java_broker_order(t, e, order, border);
    if (set_table == UINT32_MAX) {
        *status = RT_NOMEM;
        goto done;
    }
    key[0] = legacy | (int32_t)(set_table << 1);
    for (size_t k = 0; k < n; k++) {
        const rt_qd *q = &e->qds[order[k]];
        const rt_broker *br = &t->brokers[q->broker];
        const rt_val *v = &t->vals[q->val];
        const rt_blob *fr = br->frag[legacy], *pre = br->qd_prefix[legacy];
        if (fr) {
            if (br->python_only) {
                *status = RT_PYTHON;
                cached = NULL;
                goto done;
            }
            registered++;
            if (!zone_keeps(br, zone))
                continue;
            if (!set_table)
                bds[nbd++] = (rt_span){fr->data, fr->len};
        }
        qds[nq] = (rt_qd_json){{pre->data, pre->len}, {v->perm, v->read, v->sysflag, v->write},
                               {{0}}};
        key[1 + 2 * nq] = q->broker;
        key[2 + 2 * nq] = q->val;
        nq++;
    }
    if (!registered) {          /* the whole route's test, before the zone's filter */
        *status = RT_NOT_FOUND;
        goto done;
    }
    for (size_t k = 0; set_table && k < n; k++) {
        const rt_broker *br = &t->brokers[e->qds[border[k]].broker];
        const rt_blob *fr = br->frag[legacy];
        if (fr && zone_keeps(br, zone))
            bds[nbd++] = (rt_span){fr->data, fr->len};
    }
    nkey = (int32_t)(2 * nq + 1);
    uint64_t hash = rmq_hash(key, (size_t)nkey * sizeof(int32_t));
    pthread_mutex_lock(&t->cache_m);
    t->misses++;
    age(t);
    cached = cached_answer(e, form);
    if (!cached && (cached = answer_find(t, hash, key, nkey))) {
        if (attach(t, e, form, (rt_blob *)cached) < 0)
            cached = NULL;          /* no memory for the ring: built below, uncached */
        else
            t->shared++;
    }
    pthread_mutex_unlock(&t->cache_m);
    *status = RT_OK;
    if (cached)
        goto done;
    /* Built outside cache_m: readers build different answers in parallel. */
    rt_route_desc d = {bds, nbd, {"{}", 2}, {NULL, 0}, qds, nq, {NULL, 0}};
    size_t size = rt_route_json(NULL, &d);
    rt_blob *b = blob_alloc(size, nkey);
    if (!b) {
        *status = RT_NOMEM;
        goto done;
    }
    size_t wrote = rt_route_json(b->data, &d);
    RMQ_ASSERT(wrote == size);
    (void)wrote;
    b->hash = hash;
    memcpy(blob_key(b), key, (size_t)nkey * sizeof(int32_t));
    pthread_mutex_lock(&t->cache_m);
    cached = admit(t, e, form, b);
    pthread_mutex_unlock(&t->cache_m);
    if (!cached)
        cached = *temp = b;
done:
    free(qds);
    return cached;
}

int rt_store(rt_table *t, const char *name, size_t len, int form, const char *body,
             size_t body_len, uint64_t version)
{
    HOLDS_LOCK(t);
    RMQ_ASSERT(form >= 0 && form - RT_ZONE <= t->nzones);
    rt_topic *e = rt_find(t, name, len);
    if (!e || t->version != version)
        return 0;
    rt_blob *b = blob_new(body, body_len);
    if (!b)
        return RT_NOMEM;
    pthread_mutex_lock(&t->cache_m);
    t->misses++;
    const rt_blob *a = admit(t, e, form, b);
    pthread_mutex_unlock(&t->cache_m);
    if (!a)
        free(b);
    return a == b;
}

void rt_set_budget(rt_table *t, size_t budget)
{
    HOLDS_WRITE(t);
    t->budget = budget;
    while (t->bytes > budget && t->nring) {
        rt_cref c = t->ring[t->nring - 1];
        detach(t, c.topic, c.form, 0);
        t->evictions++;
    }
}

void rt_get_cache_stats(rt_table *t, rt_cache_stats *out)
{
    HOLDS_LOCK(t);
    pthread_mutex_lock(&t->cache_m);
    *out = (rt_cache_stats){slots_sum(t->hits), t->misses, t->shared,
                            t->evictions, t->refused, t->bytes, t->budget, t->nanswers,
                            t->nring};
    pthread_mutex_unlock(&t->cache_m);
}
