/* Big buffers kept for reuse (the I/O engine's input and output buffers of 256 KiB
 * and more: a registration's frame, a pipeline of wide route answers, a turn of 206
 * answers; and a registration's scanned records, scan.c).
 *
 * glibc maps such buffers and unmaps them when freed (engine.c fixes its threshold,
 * so that the arenas do not keep what big buffers once held): each new one costs
 * its pages' faults and zeroing again, which for a buffer filled once is as much as
 * the copy into it (bench/README.md). Here a freed big buffer waits for the next one
 * needed, like Netty's pooled buffers: at most POOL_BYTES in all, each for at most
 * POOL_IDLE seconds (rp_trim, each second on the engine's threads), so that what a
 * burst took is given back after it. Without an engine (the asyncio server) nothing
 * trims: the registrations' records stay, one or two buffers (registrations are
 * applied one at a time), each at most RP_MAX_ONE.
 *
 * Thread-safe (one mutex, held for a scan of a few entries): the engine's threads
 * take and give, and Python's give back the input buffers handed over with frames.
 * Any malloc'd block may be given: it is freed when it is small, too big to keep, or
 * the pool is full. */
#ifndef RMQ_BUFPOOL_H
#define RMQ_BUFPOOL_H

#include <stddef.h>

enum {
    RP_MIN = 256 * 1024,            /* smaller buffers come from malloc's arenas */
    RP_MAX_ONE = 16 * 1024 * 1024,  /* a bigger one is not kept */
};

/* A buffer of at least min bytes, its size in *cap: a big one (min >= RP_MIN) kept
 * here if one fits (the smallest within 4 x min), else a new one from malloc. NULL:
 * out of memory. */
void *rp_take(size_t min, size_t *cap);

/* Give back p, cap bytes (NULL: nothing): kept, or freed. */
void rp_give(void *p, size_t cap);

/* Free the buffers kept longer than the idle time (now: monotonic seconds). */
void rp_trim(double now);

/* What is kept now: buffers and bytes (tests, metrics). */
void rp_stats(size_t *buffers, size_t *bytes);

/* Bytes shared by the outputs of many connections: a cached answer's body (one 206
 * answer on a big table is megabytes, and a client may pipeline hundreds) written as
 * it is, never copied per answer. Counted references, taken and dropped on any
 * thread; the last drop frees it. */
typedef struct rp_shared {
    size_t refs;
    size_t len;
    char data[];
} rp_shared;

/* A copy of data's len bytes, one reference held. NULL: out of memory. */
rp_shared *rp_shared_new(const void *data, size_t len);
void rp_shared_hold(rp_shared *s);
void rp_shared_drop(rp_shared *s);      /* (NULL: nothing) */

#endif
