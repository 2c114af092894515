/* The hot half of the NameServer's route tables, in plain C.
 *
 * topicQueueTable (topic -> QueueData per broker) and each topic's encoded route
 * answers (GET_ROUTEINFO_BY_TOPIC bodies, standard and legacy form), behind a
 * writer-preferring read/write lock, so that a 10,000-topic registration is
 * applied and a route is built or served with the GIL released. The cold tables
 * (clusters, live brokers, filter servers, mappings: a handful of entries each)
 * stay Python objects in rmq.namesrv.routeinfo (the rules), behind a second
 * rt_rwlock (routes.pxi's table lock, taken before this one); each broker's
 * encoded BrokerData is pushed here whenever it changes (rt_set_broker).
 *
 * Locking: functions marked [W] need the write lock, [R] the read lock (or the
 * write lock); RMQ_DEBUG builds assert it. The lock is never held across a call
 * into Python: routes.pxi copies what it needs out under it and builds Python
 * objects after releasing it.
 */
#ifndef RMQ_ROUTETABLE_H
#define RMQ_ROUTETABLE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

/* What readers count (the lock's readers in, the cache's hits) they count in their
 * thread's slot, each slot on a cache line of its own (the stride keeps the counters
 * apart whatever the struct's alignment): readers on different cores never write a
 * line another reader writes; the sum over the slots is the count. Threads past
 * RT_READER_SLOTS share slots (counts, not flags): correct, only contended. */
#define RT_READER_SLOTS 64

typedef struct {
    uint64_t n;
    char pad[64 - sizeof(uint64_t)];
} rt_slot_count;

typedef struct {
    int gate;                       /* atomic; nonzero: readers take the mutex (a writer
                                       waits or holds, or a reader frees the graveyard) */
    pthread_mutex_t m;
    pthread_cond_t readers_cv, writers_cv;
    int writer, waiting_writers;
    int waiting_readers;            /* readers waiting for the lock */
    int turn;                       /* of those waiting at the last write release, the
                                       ones not yet in: they go before the next writer */
    uint64_t releases;              /* write releases so far */
    pthread_t owner;                /* the writer, for RMQ_DEBUG's ownership checks */
    rt_slot_count slots[RT_READER_SLOTS];     /* the readers in */
} rt_rwlock;

/* A route answer (GET_ROUTEINFO_BY_TOPIC body). A cached one is shared by every
 * topic whose answer has the same pieces (every topic on the same brokers with
 * the same queue counts: the usual cluster), counted once against the budget. */
typedef struct rt_blob {
    struct rt_blob *next;           /* the cache's sharing chain, or the graveyard */
    uint64_t hash;                  /* of the pieces (key); 0: not shareable (built in Python) */
    uint32_t refs;                  /* topic forms pointing at it */
    int32_t nkey;                   /* key length, in int32 after data */
    size_t size;                    /* the allocation, counted against the budget */
    size_t len;
    char data[];
} rt_blob;

typedef struct {                    /* one broker's QueueData of a topic */
    int32_t broker;                 /* its slot */
    int32_t val;                    /* perm, queue counts, flag: an interned rt_val */
    uint32_t ins;                   /* insertion order in the topic: Java map order's tie-break */
    int32_t bpos;                   /* the topic's position in the broker's list */
} rt_qd;

typedef struct {                    /* QueueData values, shared by every QueueData with
                                     * them, as RouteInfoManager shares QueueData objects */
    int32_t perm, read, write, sysflag;
    uint32_t refs;                  /* 0: a free slot */
    uint32_t hash;
    int32_t next;                   /* hash chain (slot + 1), or the free list */
} rt_val;

typedef struct {                    /* a QueueData as callers see it */
    int32_t broker, perm, read, write, sysflag;
} rt_qdv;

typedef struct rt_topic {
    uint64_t seq;                   /* insertion order: Java's answers follow it */
    uint32_t stamp;
    int32_t nqd, cap;
    uint32_t idx_mask, ins_next;
    uint32_t peak;                  /* the most QueueData it held: Java's HashMap never
                                     * shrinks, its table follows this */
    rt_qd *qds;                     /* in no order (removal swaps the last in) */
    uint32_t *idx;                  /* broker -> position + 1, for wide topics (NULL: scan) */
    int32_t slot[2];                /* the cached answers' entries in the cache's ring */
    /* What a route query answered from the cache reads, together and next to the
     * name: one or two cache lines, where spread over the entry they took two or
     * three (the entry is in no cache when its query comes). */
    struct rt_zans *zans;           /* zone-mode answers by zone class (t->nzones + 1 of
                                     * them), NULL: none cached yet */
    rt_blob *body[2];               /* cached answers: [0] standard, [1] legacy */
    struct rt_topic *next;          /* hash chain */
    uint32_t hash;
    uint8_t freq;                   /* queries, halved as they age: the cache's admission */
    size_t len;
    char name[];                    /* UTF-8, not terminated */
} rt_topic;

typedef struct rt_zans {            /* a topic's cached zone-mode answer */
    rt_blob *body;
    int32_t slot;                   /* its entry in the cache's ring, -1: none */
} rt_zans;

/* Zone mode (Java 5.0.0's ZoneRouteRPCHook): a query naming a zone gets the legacy
 * answer without the brokers that have a master (id 0) and another zone (or none),
 * nor their QueueData. Queries are grouped into zone classes: class z > 0 names
 * zone z of the registered brokers (t->zones[z - 1]), class 0 every zone no broker
 * has. A class's answer is a function of the topic: cached per topic and class. */
typedef struct {
    char *fold;                     /* the zone name folded (rmq.javacase.fold), UTF-8 */
    size_t len;
    int32_t refs;                   /* brokers in the zone; 0: a free slot */
} rt_zone;

/* Answer forms: standard, legacy, and zone class z's answer (RT_ZONE + z). */
enum { RT_STANDARD = 0, RT_LEGACY = 1, RT_ZONE = 2 };

typedef struct {
    rt_blob *frag[2];               /* BrokerData JSON per form; NULL: not registered */
    rt_blob *qd_prefix[2];          /* {"brokerName":"<name>" per form */
    rt_topic **topics;              /* the topics it has QueueData of (rt_qd.bpos) */
    int32_t ntopics, cap_topics;
    uint32_t jhash;                 /* Java HashMap spread hash of the name */
    int python_only;                /* filter servers or acting master: built in Python */
    int32_t zone;                   /* its zone class, -1: no zone */
    int has_master;                 /* its BrokerData has an address at id 0 */
    int used;                       /* 0: a free slot (rt_release_broker) */
    int32_t next_free;              /* free list: the next free slot + 1, 0 ends it */
} rt_broker;


typedef struct {                    /* a cached topic form, for eviction */
    rt_topic *topic;
    int form;                       /* RT_STANDARD, RT_LEGACY, RT_ZONE + class */
} rt_cref;

typedef struct {
    uint64_t hits, misses, shared, evictions, refused;
    size_t bytes, budget, answers, entries;
} rt_cache_stats;

typedef struct {
    rt_rwlock lock;
    rt_topic **buckets;
    size_t mask, count;
    uint64_t seq, version;
    uint32_t stamp;
    rt_broker *brokers;
    int32_t nbrokers, cap_brokers;  /* slots ever used (free ones included), allocated */
    int32_t free_head, nfree;       /* the free slots: first + 1 (0: none), how many */
    rt_val *vals;
    int32_t nvals, cap_vals, free_val;
    int32_t *val_buckets;           /* slot + 1 */
    uint32_t val_mask;
    int python_routes;              /* every route is built in Python (extras) */
    rt_zone *zones;                 /* the brokers' zones; a change drops every zone answer */
    int32_t nzones, cap_zones;
    uint64_t work;                  /* rt_work */
    /* The answer cache. Readers fill it under the read lock, serialised by cache_m;
     * writers (exclusive) drop what a change touches without it. */
    pthread_mutex_t cache_m;
    size_t budget, bytes;           /* bytes: live answers and the graveyard */
    rt_blob **abuckets;             /* answers by key hash */
    size_t amask, nanswers;
    rt_cref *ring;                  /* every cached topic form */
    size_t nring, cap_ring, hand;
    rt_blob *grave;                 /* evicted under the read lock: freed once no reader is left */
    uint64_t buried;                /* answers that went to the graveyard (rt_buried) */
    uint64_t misses, shared, evictions, refused, since_aging;
    rt_slot_count hits[RT_READER_SLOTS];      /* cache hits */
} rt_table;

enum { RT_OK = 0, RT_NOT_FOUND = 1, RT_PYTHON = 2, RT_NOMEM = -1 };

rt_table *rt_new(void);
void rt_free(rt_table *t);

/* A writer-preferring read/write lock whose waiting readers go in between two
 * writes (routetable.c); the table has one, and routes.pxi one more for the whole
 * of RouteInfoManager's tables (the cold ones in Python). */
void rt_lock_init(rt_rwlock *l);
void rt_lock_destroy(rt_rwlock *l);
void rt_lock_read(rt_rwlock *l);
void rt_unlock_read(rt_rwlock *l);
void rt_lock_write(rt_rwlock *l);
void rt_unlock_write(rt_rwlock *l);

void rt_rdlock(rt_table *t);
void rt_rdunlock(rt_table *t);
void rt_wrlock(rt_table *t);
void rt_wrunlock(rt_table *t);

/* [W] A broker slot for a new name: a free one, else a new one; RT_NOMEM. Set
 * its data (rt_set_broker) before any QueueData names it. */
int32_t rt_new_broker(rt_table *t);
/* [W] Free slot b and its memory for reuse when the broker has left no trace in
 * the table (not registered, no QueueData): 1 released, 0 still used. */
int rt_release_broker(rt_table *t, int32_t b);
/* Give memory freed by a large removal back to the system (glibc's malloc_trim;
 * nothing elsewhere). No lock needed: call it after releasing the table's. */
void rt_trim(void);

/* [W] Set broker b's (an rt_new_broker slot) encoded BrokerData (std NULL: not registered), QueueData
 * prefix and hash, its zone (folded; NULL: none) and whether it has a master; drops
 * the cached answers of its topics (and every zone answer when the set of zones
 * changes). 0, or RT_NOMEM. */
int rt_set_broker(rt_table *t, int32_t b, const char *std, size_t std_len,
                  const char *legacy, size_t legacy_len, const char *qd_std,
                  size_t qd_std_len, const char *qd_legacy, size_t qd_legacy_len,
                  uint32_t jhash, int python_only, const char *zone, size_t zone_len,
                  int has_master);
/* [R] The answer form of a zone-mode query for zone `fold` (folded as the brokers'
 * are, rmq.javacase.fold): RT_ZONE + its zone class. */
int rt_zone_form(const rt_table *t, const char *fold, size_t len);
/* [W] Insert or replace broker qd->broker's QueueData of a topic: 1 changed, 0 same. */
int rt_put(rt_table *t, const char *name, size_t len, const rt_qdv *qd);
/* [W] Remove a broker's QueueData of a topic (and the topic when none is left). */
int rt_remove(rt_table *t, const char *name, size_t len, int32_t broker);
/* [W] Remove every QueueData of a broker; returns how many. */
size_t rt_remove_broker(rt_table *t, int32_t broker);
/* [W] Wipe (clear PERM_WRITE) or add (set perm to READ|WRITE) the write permission
 * of a broker's QueueData; returns how many it has (changed or not). */
size_t rt_write_perm(rt_table *t, int32_t broker, int wipe);
/* [W] Apply a registration's topic configs for broker b (RouteInfoManager's loop):
 * a topic is (re)written when `force` (first registration or a new DataVersion)
 * or when b has no QueueData for it yet; `readonly` clears PERM_WRITE (acting
 * master); `delete_missing` first removes b's topics whose name is not a key of
 * recs (how many: *removed, unless NULL). Returns 1 when some topic was written,
 * 0 when none, RT_NOMEM. */
int rt_apply(rt_table *t, int32_t b, const rmq_topic_rec *recs, size_t n, int force, int readonly,
             int delete_missing, const uint8_t *only, size_t *removed);
/* [R] rt_apply's first half, under the read lock so that route queries go on:
 * marks in only[k] the records whose write would change the table, and returns
 * how many differ from the table as it is (with *taken: whether rt_apply would
 * write some topic, changed or not). rt_apply(..., only) then needs the write lock
 * only for those. When a record is keyed otherwise than its name (two records may
 * then name one topic; a broker keys its table by name), every record is marked:
 * the last one written wins, as without the compare. */
size_t rt_apply_diff(const rt_table *t, int32_t b, const rmq_topic_rec *recs, size_t n, int force,
                     int readonly, uint8_t *only, int *taken);
/* [W] Drop the cached answers of a topic (name NULL: of every topic). */
void rt_forget(rt_table *t, const char *name, size_t len);

/* [R] The topic's entry, or NULL. */
rt_topic *rt_find(const rt_table *t, const char *name, size_t len);
/* [R] The topic's encoded answer in `form` (RT_STANDARD, RT_LEGACY or a zone form
 * from rt_zone_form): cached, else built (or found shared) and
 * cached when the budget admits it. NULL with *status RT_NOT_FOUND (no route:
 * Java answers 17), RT_PYTHON (built by the caller) or RT_NOMEM. A cached answer
 * lives while the lock is held; one the cache refused is returned in *temp too,
 * and the caller frees it after use (free). */
const rt_blob *rt_route(rt_table *t, const char *name, size_t len, int form, int *status,
                        rt_blob **temp);
/* The same, the name's hash (rt_topic_hash) computed by the caller. */
const rt_blob *rt_route_hashed(rt_table *t, const char *name, size_t len, uint32_t name_hash,
                               int form, int *status, rt_blob **temp);
/* A topic name's hash in the table. */
uint32_t rt_topic_hash(const char *name, size_t len);
/* [R] Ask the CPU for the memory a lookup of the name hashing to `hash` will read,
 * ahead of it: stage 0 its bucket, stage 1 (once that has come) its entry, stage 2
 * (once that has come) the entry's zone-mode answers. Only a prefetch: whatever it
 * finds, the lookup that follows is the same. */
void rt_prefetch(const rt_table *t, uint32_t hash, int stage);
/* TopicRouteData as Java writes it, from pieces the caller encoded in one form
 * (standard or legacy): {"brokerDatas":[bds],"filterServerTable":fst
 * [,"orderTopicConf":otc],"queueDatas":[qds][,"topicQueueMappingByBroker":tqm]}.
 * The one writer of this layout: rt_route and bodies.pxi's encode_topic_route_data. */
typedef struct { const char *s; size_t n; } rt_span;
typedef struct {
    rt_span prefix;                 /* {"brokerName":<name> */
    int32_t num[4];                 /* perm, readQueueNums, topicSysFlag, writeQueueNums */
    rt_span val[4];                 /* their JSON text instead, where .s is set */
} rt_qd_json;
typedef struct {
    const rt_span *bds; size_t nbd; /* each BrokerData's JSON */
    rt_span fst, otc;               /* otc.s NULL: no orderTopicConf */
    const rt_qd_json *qds; size_t nqd;
    rt_span tqm;                    /* .s NULL: no topicQueueMappingByBroker */
} rt_route_desc;
/* out NULL: the exact size; else writes it to out and returns the bytes written. */
size_t rt_route_json(char *out, const rt_route_desc *d);

/* [R] Cache an answer built by the caller in `form`, unless the table changed since
 * `version` was read or the budget refuses it. 1 stored, 0 not, RT_NOMEM. */
int rt_store(rt_table *t, const char *name, size_t len, int form, const char *body,
             size_t body_len, uint64_t version);
/* [R] Positions in e->qds in queueDatas' order: the iteration order of the topic's
 * Java HashMap of broker names (capacity 16, grown by the most it held, e->peak): by
 * bucket, then by insertion. */
void rt_java_order(const rt_table *t, const rt_topic *e, int32_t *order);
/* [R] brokerDatas' order (Java 5.x iterates new HashSet<>(queueDataMap.keySet()): the
 * same names re-bucketed in a table sized for their count, on JDK 8 to 18
 * tableSizeFor(max((int) (n / .75f) + 1, 16)), ties in the map's order): 0 when that
 * table is the map's own, the order then being `order` (rt_java_order's); else its
 * size, with the positions written to `border`; UINT32_MAX: no memory. */
uint32_t rt_java_broker_order(const rt_table *t, const rt_topic *e, const int32_t *order,
                              int32_t *border);
/* [R] e's QueueData in insertion order (out: e->nqd of them); 0, or RT_NOMEM. */
int rt_topic_qds(const rt_table *t, const rt_topic *e, rt_qdv *out);
/* [R] topicSysFlag of e's first QueueData in Java's order (e->nqd > 0); RT_NOMEM. */
int64_t rt_first_flag(const rt_table *t, const rt_topic *e);

/* [R] Every topic's insertion number and Java String hash (jt_spread_hash of its
 * name), in insertion order: *n of each, in *seqs and *hashes (malloc'd: the caller
 * frees them). 0, or RT_NOMEM. */
int rt_topic_hashes(const rt_table *t, uint64_t **seqs, uint32_t **hashes, size_t *n);

/* [W] The answer cache's byte budget (0: nothing cached); evicts down to it. */
void rt_set_budget(rt_table *t, size_t budget);
/* [R] The cache's counters since rt_new, and its size now. */
void rt_get_cache_stats(rt_table *t, rt_cache_stats *out);

/* Operations done on the table (entries probed, topics walked) since rt_new: a
 * count that shows what an operation's cost grows with, for tests. */
uint64_t rt_work(const rt_table *t);
/* [R] Answers evicted while another reader was in (the graveyard's, freed later):
 * since rt_new, and in the graveyard now. For tests. */
void rt_buried(rt_table *t, uint64_t *since_start, size_t *now);

#endif
