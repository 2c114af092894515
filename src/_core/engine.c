/* The I/O engine (engine.h): epoll threads serving route queries without Python. */
#define _GNU_SOURCE
#include "engine.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "bufpool.h"
#include "scan.h"
#include "tls.h"
#include "wire.h"

enum {
    READ_CHUNK = 64 * 1024,         /* room made before each read */
    /* bytes read from one plain connection before the others of its thread have their
     * turn (epoll is level-triggered: it comes back): a big frame arriving does not
     * hold up the route queries of the thread's other connections */
    READ_TURN = 1024 * 1024,
    /* and written to one, in one send at most, before the others have theirs: a
     * client reading a 206 flood as fast as it comes does not hold up its thread's
     * other connections (a send copies into the socket what its buffer takes, which
     * can be MiBs: a millisecond or more each) */
    WRITE_TURN = 256 * 1024,
    HAND_OVER_BYTES = 256 * 1024,   /* a batch this big goes to Python in its buffer */
    IO_SLICE_NS = 100 * 1000,       /* the scheduler slice an I/O thread asks for */
    CONN_BUCKETS = 4096,            /* per thread: connection id -> connection */
    MOVED_BUCKETS = 256,            /* per thread: ids of its connections moved away */
    MOVES_PER_BATCH = 64,           /* connections moved away in one epoll batch, at most */
    /* Frames for Python go as one event: a frame and the complete ones after it
     * that are not route queries, up to these (a pipeline of admin requests costs
     * one round trip through Python, not one per frame) */
    PY_BATCH_FRAMES = 64,
    PY_BATCH_BYTES = 1024 * 1024,
    TLS_HANDSHAKE_RECORD = 0x16,    /* the first byte of a TLS client's first record */
    SEAL_BYTES = 64 * 1024,         /* TLS: output encrypted at a time */
    /* seconds: a TLS connection quiet this long gives its record buffers back; a busy
     * one keeps them (OpenSSL's SSL_MODE_RELEASE_BUFFERS frees them after every read,
     * which costs the TLS route rate dearly: bench/README.md, TLS on the engine) */
    TLS_TRIM = 5,
    /* READ_CHUNK buffers a thread keeps for its connections' next reads and writes
     * (spare_take), given back to malloc once it has taken none for a second */
    SPARE_CHUNKS = 4,
};

/* What a read or a write did, besides a count of bytes (> 0) */
enum { IO_AGAIN = -1, IO_GONE = -2, IO_TLS_ERROR = -3 };

/* Output queued before a connection's out buffer: a big output (a turn of Python's
 * answers, an out buffer that filled up) is queued as it is, never copied into a
 * bigger buffer (growing one to the tens of MiB a 206 flood queues cost the thread
 * milliseconds of page faults, every other connection of it waiting). */
typedef struct re_block {
    struct re_block *next;
    char *data;                     /* from the buffer pool, given back once written; */
    size_t off, len, cap;           /* not yet written: data[off..len) */
    rp_shared *shared;              /* or within this, dropped once written */
} re_block;

/* Output done with: a shared part's reference dropped, else its buffer given back. */
static void give_back(char *data, size_t cap, rp_shared *shared)
{
    if (shared)
        rp_shared_drop(shared);
    else
        rp_give(data, cap);
}

static void free_block(re_block *b)
{
    give_back(b->data, b->cap, b->shared);
    free(b);
}

typedef struct re_conn {
    struct re_conn *next;           /* hash chain */
    uint64_t id;
    int fd;
    char *in;                       /* read, not yet split: in[in_off..in_len) */
    size_t in_off, in_len, in_cap;
    re_block *ahead, *ahead_tail;   /* written before out, in order */
    size_t ahead_bytes;             /* their unwritten bytes */
    char *out;                      /* not yet written: out[out_off..out_len) */
    size_t out_off, out_len, out_cap;
    char *sealed;                   /* TLS: records not yet written, [sealed_off..sealed_len) */
    size_t sealed_off, sealed_len, sealed_cap;
    tl_sink sink;                   /* TLS: where OpenSSL puts them (sealed_write) */
    uint8_t sink_failed;            /* TLS: sealed_write found no memory */
    int with_python;                /* one of its frames is with Python */
    int closing;                    /* close once out is written */
    int paused;                     /* unsent bytes reached max_output: not read until
                                       they are down to resume_output */
    int notify_drain;               /* RE_DRAINED when unsent bytes are down to that */
    int fd_closed;                  /* closed: freed after the current epoll batch */
    int split_any;                  /* a frame was split (for the bad frame's report) */
    int sniff;                      /* TLS or plain is decided by the first byte, to come */
    rb_partial *partial;            /* control thread: the big frame arriving at in_off,
                                       scanned as it comes if a registration (scan_arriving) */
    void *tls;                      /* its SSL (tls.h), or NULL: plain */
    uint8_t tls_shaken;             /* its handshake is done */
    uint8_t tls_wants_read;         /* a write waits for OpenSSL to read first (the
                                       handshake under way) */
    uint32_t interest;              /* the epoll events asked for now */
    size_t counted;                 /* of its unsent bytes, counted in e->out_total */
    double last_active, closed_at;  /* monotonic seconds: last read or write, close */
    uint8_t why;                    /* the reason its close reports (engine.h) */
    uint8_t bad_len;
    uint8_t bad[RE_BAD_BYTES];      /* the bad frame's first bytes */
    struct re_conn *dead_next;
} re_conn;

typedef struct re_cmd {             /* from Python to a connection's thread */
    struct re_cmd *next;
    uint64_t conn;
    int resume, close, notify;
    re_conn_state *state;           /* re_conn_state_read: filled, then `done` posted */
    sem_t *done;
    size_t len;
    char *data;                     /* malloc'd: the command owns it */
    re_part *parts;                 /* or these, in order (re_send_parts): owned too */
    size_t nparts;
    int adopt, fd;                  /* or a socket accepted by another thread for this
                                       one (accept_all), its peer's address in data */
    struct re_conn *move;           /* or a connection moved to the control thread */
    int forget;                     /* or: conn, moved away, closed (moved_drop) */
} re_cmd;

/* The id of a connection a thread accepted and moved to the control thread. What
 * Python sends to that id comes to this thread (the id names it) and goes on there
 * until nothing Python sent before the move is left here; from then on (direct) it
 * goes to the control thread straight away (route_cmd), and this thread, serving
 * routes, is no longer woken for it. */
typedef struct re_moved {
    struct re_moved *next;
    struct re_moved *undirected;    /* the next one not direct yet (the thread's own) */
    uint64_t id;
    int direct;                     /* guarded by the thread's m */
} re_moved;

static void free_parts(re_part *parts, size_t n)
{
    for (size_t i = 0; i < n; i++)
        give_back(parts[i].data, parts[i].len, parts[i].shared);
    free(parts);
}

static void free_cmd(re_cmd *cmd)
{
    rp_give(cmd->data, cmd->len);   /* (Python's buffer: from the pool when big) */
    if (cmd->parts)
        free_parts(cmd->parts, cmd->nparts);
    free(cmd);
}

typedef struct {
    rmq_engine *e;
    int index;
    pthread_t th;
    int epfd, wakefd;
    pthread_mutex_t m;              /* guards cmds, and changes to moved (read by
                                       route_cmd from other threads) */
    re_cmd *cmds, *cmds_tail;
    re_conn *conns[CONN_BUCKETS];
    re_conn *dead;                  /* closed in this epoll batch, freed after it */
    re_moved *moved[MOVED_BUCKETS]; /* its connections now on the control thread */
    re_moved *undirected;           /* of them, those not direct yet (moved_settle) */
    re_conn *left[MOVES_PER_BATCH]; /* moved away in this epoll batch: its events
                                       for them are skipped (never dereferenced) */
    int nleft;
    uint64_t next_seq;
    int listening;                  /* the listening socket is in epfd */
    int nconns;                     /* atomic: its connections, and those on the way to
                                       it (least_loaded) */
    double now;                     /* monotonic seconds, read after each epoll_wait */
    double next_scan;               /* of idle connections */
    double next_trim;               /* of bufpool.h's pool, and of spare */
    char *spare[SPARE_CHUNKS];      /* READ_CHUNK buffers kept for the next read or write */
    int nspare;
    int spare_taken;                /* one was taken since the last trim */
    uint8_t *ring;                  /* the trace ring (engine.h), ring_cap bytes, or NULL */
    size_t ring_cap;
    uint64_t ring_head, ring_tail;  /* written by the thread / by re_trace_take */
    uint64_t trace_floor;           /* atomic: the record being made is at or after it
                                       (UINT64_MAX: none); re_trace_watermark reads it */
    rs_counts counts;               /* written by this thread only; read by re_stats_read */
    re_stats stats;                 /* (its served/not_found unused: counts has them) */
} re_thread;

struct rmq_engine {
    rt_table *t;
    int stype;
    int listen_fd;
    re_config cfg;
    int stop;                       /* atomic */
    int connections;                /* atomic */
    int routes_in_python;           /* atomic: re_route_queries(e, 0) */
    int accept_off;                 /* atomic: re_stop_accepting */
    int64_t out_total;              /* atomic: unsent bytes of all connections */
    uint64_t trace_epoch;           /* atomic: when the last re_trace_watermark began */
    pthread_mutex_t qm;             /* guards the event queue */
    int evfd;                       /* readable while events may be queued (re_event_fd) */
    re_event *head, *tail;
    re_thread *ctl;                 /* the control thread (re_config.control_thread), the
                                       last of threads[], or NULL */
    int nthreads;
    re_thread threads[];
};


/* The I/O threads are never cancelled (they stop when e->stop is set), so their
 * reads, writes and waits go to the kernel directly, not through libc's cancellation
 * points: in a process with threads, glibc wraps each such call in two atomic
 * updates of the thread's cancel state, which a lone route query paid three times
 * (bench/README.md, "A lone query's own work"). */
#if defined(__linux__) && defined(SYS_recvfrom) && defined(SYS_sendto) && defined(SYS_epoll_pwait)
static inline ssize_t sock_recv(int fd, void *buf, size_t n)
{
    return syscall(SYS_recvfrom, fd, buf, n, 0, NULL, NULL);
}

static inline ssize_t sock_send(int fd, const void *buf, size_t n)
{
    return syscall(SYS_sendto, fd, buf, n, MSG_NOSIGNAL, NULL, 0);
}

static inline int poll_wait(int epfd, struct epoll_event *evs, int max, int timeout_ms)
{
    return (int)syscall(SYS_epoll_pwait, epfd, evs, max, timeout_ms, NULL, 0);
}
#else
#define sock_recv(fd, buf, n) recv((fd), (buf), (n), 0)
#define sock_send(fd, buf, n) send((fd), (buf), (n), MSG_NOSIGNAL)
#define poll_wait epoll_wait
#endif

/* epoll data tags of the listening socket, of a thread's wake-up eventfd and of its
 * tick timer */
static char LISTEN_TAG, WAKE_TAG, TICK_TAG;

static double monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Make an eventfd readable (a full counter: it is readable anyway) */
static void signal_fd(int fd)
{
    uint64_t one = 1;
    ssize_t w = write(fd, &one, sizeof one);
    (void)w;
}

/* ---------------------------------------------------------------- events for Python */

/* Queue an event for Python: its len bytes copied into it, or with own, handed over:
 * data points into own (a connection's input buffer), freed with the event. */
static int queue_event(rmq_engine *e, int kind, uint64_t conn, char *own, size_t own_cap,
                       const void *data, size_t len, rb_partial *partial)
{
    re_event *ev = malloc(sizeof *ev + (own ? 0 : len + 1));
    if (!ev)
        return -1;
    ev->partial = partial;
    ev->next = NULL;
    ev->kind = kind;
    ev->conn = conn;
    ev->len = len;
    ev->own = own;
    ev->own_cap = own_cap;
    if (own) {
        ev->data = (char *)data;
    } else {
        ev->data = ev->bytes;
        if (len)
            memcpy(ev->bytes, data, len);
        ev->bytes[len] = 0;
    }
    pthread_mutex_lock(&e->qm);
    int was_empty = e->head == NULL;
    if (e->tail)
        e->tail->next = ev;
    else
        e->head = ev;
    e->tail = ev;
    pthread_mutex_unlock(&e->qm);
    /* Only the first event of a chain signals: the taker resets the eventfd before it
     * takes the chain (re_next), so an event linked after its take finds the queue
     * empty and signals again. (A spurious signal costs the taker an empty take.) */
    if (was_empty)
        signal_fd(e->evfd);
    return 0;
}

static int push_event(rmq_engine *e, int kind, uint64_t conn, const void *data, size_t len)
{
    return queue_event(e, kind, conn, NULL, 0, data, len, NULL);
}

re_event *re_next(rmq_engine *e, double timeout)
{
    double until = monotonic() + timeout;
    for (;;) {
        uint64_t n;
        (void)!read(e->evfd, &n, sizeof n);     /* reset first: see queue_event */
        pthread_mutex_lock(&e->qm);
        re_event *chain = e->head;
        e->head = e->tail = NULL;
        pthread_mutex_unlock(&e->qm);
        double left = until - monotonic();
        if (chain || left <= 0 || __atomic_load_n(&e->stop, __ATOMIC_ACQUIRE))
            return chain;
        struct pollfd p = {.fd = e->evfd, .events = POLLIN};
        struct timespec ts = {.tv_sec = (time_t)left,
                              .tv_nsec = (long)((left - (double)(time_t)left) * 1e9)};
        (void)ppoll(&p, 1, &ts, NULL);
    }
}

int re_event_fd(const rmq_engine *e)
{
    return e->evfd;
}

void re_free_partial(rb_partial *s)
{
    if (s) {
        rb_partial_free(s);
        free(s);
    }
}

void re_free_event(re_event *ev)
{
    re_free_partial(ev->partial);
    rp_give(ev->own, ev->own_cap);
    free(ev);
}

void re_free_events(re_event *ev)
{
    while (ev) {
        re_event *next = ev->next;
        re_free_event(ev);
        ev = next;
    }
}

/* ---------------------------------------------------------------- trace ring */

static void ring_copy(re_thread *th, uint64_t pos, const void *data, size_t n)
{
    size_t at = (size_t)(pos % th->ring_cap), first = th->ring_cap - at;
    if (first >= n) {
        memcpy(th->ring + at, data, n);
    } else {
        memcpy(th->ring + at, data, first);
        memcpy(th->ring, (const uint8_t *)data + first, n - first);
    }
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Append a record, or count it dropped when the ring lacks room. */
static void trace_put(re_thread *th, uint32_t kind, uint64_t conn, const void *data, size_t n)
{
    if (!th->ring)
        return;
    uint64_t head = th->ring_head;
    uint64_t tail = __atomic_load_n(&th->ring_tail, __ATOMIC_ACQUIRE);
    if (n > UINT32_MAX || th->ring_cap - (size_t)(head - tail) < sizeof(re_trace_head) + n) {
        RMQ_COUNT(th->stats.trace_dropped, 1);
        return;
    }
    /* The time, told to re_trace_watermark before the record is visible: either the
     * drainer sees this floor (and holds back what is at or after it), or it began
     * before we read its epoch, and the record is stamped after that epoch. */
    uint64_t t = realtime_ns();
    __atomic_store_n(&th->trace_floor, t, __ATOMIC_SEQ_CST);
    uint64_t epoch = __atomic_load_n(&th->e->trace_epoch, __ATOMIC_SEQ_CST);
    if (t < epoch) {
        t = realtime_ns();
        if (t < epoch)
            t = epoch;              /* (the clock stepped back) */
        __atomic_store_n(&th->trace_floor, t, __ATOMIC_SEQ_CST);
    }
    re_trace_head h = {t, conn, (uint32_t)n, kind};
    ring_copy(th, head, &h, sizeof h);
    if (n)
        ring_copy(th, head + sizeof h, data, n);
    __atomic_store_n(&th->ring_head, head + sizeof h + n, __ATOMIC_RELEASE);
    __atomic_store_n(&th->trace_floor, UINT64_MAX, __ATOMIC_RELEASE);
}

uint64_t re_trace_watermark(rmq_engine *e)
{
    uint64_t w = realtime_ns();
    __atomic_store_n(&e->trace_epoch, w, __ATOMIC_SEQ_CST);
    for (int i = 0; i < e->nthreads; i++) {
        uint64_t floor = __atomic_load_n(&e->threads[i].trace_floor, __ATOMIC_SEQ_CST);
        if (floor < w)
            w = floor;
    }
    return w;
}

size_t re_trace_take(rmq_engine *e, int thread, uint8_t *out, size_t cap)
{
    if (thread < 0 || thread >= e->nthreads)
        return 0;
    re_thread *th = &e->threads[thread];
    if (!th->ring)
        return 0;
    uint64_t tail = th->ring_tail;
    uint64_t head = __atomic_load_n(&th->ring_head, __ATOMIC_ACQUIRE);
    size_t used = 0;
    while (tail < head) {
        re_trace_head h;
        size_t at = (size_t)(tail % th->ring_cap), first = th->ring_cap - at;
        if (first >= sizeof h) {
            memcpy(&h, th->ring + at, sizeof h);
        } else {
            memcpy(&h, th->ring + at, first);
            memcpy((uint8_t *)&h + first, th->ring, sizeof h - first);
        }
        size_t n = sizeof h + h.len;
        if (cap - used < n)
            break;
        at = (size_t)(tail % th->ring_cap);
        first = th->ring_cap - at;
        if (first >= n) {
            memcpy(out + used, th->ring + at, n);
        } else {
            memcpy(out + used, th->ring + at, first);
            memcpy(out + used + first, th->ring, n - first);
        }
        used += n;
        tail += n;
    }
    __atomic_store_n(&th->ring_tail, tail, __ATOMIC_RELEASE);
    return used;
}

/* ---------------------------------------------------------------- connections */

static re_conn *find_conn(re_thread *th, uint64_t id)
{
    re_conn *c = th->conns[(id >> 8) % CONN_BUCKETS];
    while (c && c->id != id)
        c = c->next;
    return c;
}

/* A connection's output not yet written (over TLS: not yet sealed) */
static size_t plain_pending(const re_conn *c)
{
    return c->ahead_bytes + c->out_len - c->out_off;
}

/* A connection's unsent bytes: its output and, over TLS, the records sealed from it */
static size_t pending(const re_conn *c)
{
    return plain_pending(c) + c->sealed_len - c->sealed_off;
}

/* The next plaintext to write (or seal): the first block ahead, else out. */
static const char *plain_next(const re_conn *c, size_t *n)
{
    if (c->ahead) {
        *n = c->ahead->len - c->ahead->off;
        return c->ahead->data + c->ahead->off;
    }
    *n = c->out_len - c->out_off;
    return c->out + c->out_off;
}

/* w bytes of plain_next's written (or sealed): a block done goes back to the pool. */
static void plain_done(re_conn *c, size_t w)
{
    re_block *b = c->ahead;
    if (!b) {
        c->out_off += w;
        return;
    }
    b->off += w;
    c->ahead_bytes -= w;
    if (b->off == b->len) {
        c->ahead = b->next;
        if (!c->ahead)
            c->ahead_tail = NULL;
        free_block(b);
    }
}

/* block queued last ahead of out (written before it). -1: no memory, nothing queued. */
static int queue_ahead(re_conn *c, re_block block)
{
    re_block *b = malloc(sizeof *b);
    if (!b)
        return -1;
    *b = block;
    if (c->ahead_tail)
        c->ahead_tail->next = b;
    else
        c->ahead = b;
    c->ahead_tail = b;
    c->ahead_bytes += b->len - b->off;
    return 0;
}

/* out, unless empty, queued ahead as it is: out starts again empty. -1: no memory. */
static int out_ahead(re_conn *c)
{
    if (c->out_len == c->out_off)
        return 0;
    if (queue_ahead(c, (re_block){NULL, c->out, c->out_off, c->out_len, c->out_cap, NULL}) < 0)
        return -1;
    c->out = NULL;
    c->out_off = c->out_len = c->out_cap = 0;
    return 0;
}

static void free_ahead(re_conn *c)
{
    while (c->ahead) {
        re_block *b = c->ahead;
        c->ahead = b->next;
        free_block(b);
    }
    c->ahead_tail = NULL;
    c->ahead_bytes = 0;
}

/* Count in e->out_total what changed of c's unsent bytes since the last call. */
static void account(re_thread *th, re_conn *c, size_t now)
{
    if (now != c->counted) {
        __atomic_add_fetch(&th->e->out_total, (int64_t)now - (int64_t)c->counted,
                           __ATOMIC_RELAXED);
        c->counted = now;
    }
}

static int make_room(char **buf, size_t *off, size_t *len, size_t *cap, size_t more);
static void post(re_thread *th, re_cmd *cmd);

/* c into th's table (its epoll registration is the caller's). */
static void link_conn(re_thread *th, re_conn *c)
{
    size_t b = (c->id >> 8) % CONN_BUCKETS;
    c->next = th->conns[b];
    th->conns[b] = c;
}

/* c out of th's table and epoll (closed, or moved to the control thread). */
static void unlink_conn(re_thread *th, re_conn *c)
{
    re_conn **pp = &th->conns[(c->id >> 8) % CONN_BUCKETS];
    while (*pp != c)
        pp = &(*pp)->next;
    *pp = c->next;
    epoll_ctl(th->epfd, EPOLL_CTL_DEL, c->fd, NULL);
}

/* ---------------------------------------------------------------- moved connections */

/* The thread's moved ids change on the thread only (and in free_thread, once the
 * threads are joined), under its m: the thread reads them without it, route_cmd
 * with it. */
static int moved_add(re_thread *th, uint64_t id)
{
    re_moved *m = malloc(sizeof *m);
    if (!m)
        return -1;
    re_moved **b = &th->moved[(id >> 8) % MOVED_BUCKETS];
    m->id = id;
    m->direct = 0;
    m->undirected = th->undirected;
    th->undirected = m;
    pthread_mutex_lock(&th->m);
    m->next = *b;
    *b = m;
    pthread_mutex_unlock(&th->m);
    return 0;
}

static re_moved *moved_find(const re_thread *th, uint64_t id)
{
    for (re_moved *m = th->moved[(id >> 8) % MOVED_BUCKETS]; m; m = m->next)
        if (m->id == id)
            return m;
    return NULL;
}

static void moved_drop(re_thread *th, uint64_t id)
{
    for (re_moved **pp = &th->moved[(id >> 8) % MOVED_BUCKETS]; *pp; pp = &(*pp)->next)
        if ((*pp)->id == id) {
            re_moved *m = *pp;
            pthread_mutex_lock(&th->m);
            *pp = m->next;
            pthread_mutex_unlock(&th->m);
            if (!m->direct) {
                re_moved **u = &th->undirected;
                while (*u != m)
                    u = &(*u)->undirected;
                *u = m->undirected;
            }
            free(m);
            return;
        }
}

/* Moved ids made direct once no command of theirs waits here: what Python sent before
 * is on the control thread's queue, so what it sends next may go there straight away
 * and still comes after. After each epoll batch, while some are not yet direct (a
 * command still waiting here wakes the thread again, and the next batch passes it on). */
static void moved_settle(re_thread *th)
{
    pthread_mutex_lock(&th->m);
    for (re_moved **u = &th->undirected; *u;) {
        re_moved *m = *u;
        const re_cmd *cmd = th->cmds;
        while (cmd && cmd->conn != m->id)
            cmd = cmd->next;
        if (cmd) {
            u = &m->undirected;
            continue;
        }
        m->direct = 1;
        *u = m->undirected;
    }
    pthread_mutex_unlock(&th->m);
}

/* A moved connection closed (on the control thread): the thread that accepted it, and
 * passes on what Python sends to its id, forgets the id. Not once the engine stops
 * (the threads' moved ids go with them: free_thread). */
static void forget_moved(re_thread *th, uint64_t id)
{
    rmq_engine *e = th->e;
    if (__atomic_load_n(&e->stop, __ATOMIC_ACQUIRE))
        return;
    re_cmd *cmd = calloc(1, sizeof *cmd);
    if (!cmd)
        return;                     /* (the id stays known there: harmless) */
    cmd->conn = id;
    cmd->forget = 1;
    post(&e->threads[id & 0xFF], cmd);
}

/* Close now (what is unsent is dropped) and, with tell, report the close with c->why.
 * c stays allocated until the end of the thread's epoll batch, which may still hold
 * an event for it (fd_closed tells it is gone). */
static void conn_close(re_thread *th, re_conn *c, int tell)
{
    if (c->fd_closed)
        return;
    unlink_conn(th, c);
    if ((int)(c->id & 0xFF) != th->index)
        forget_moved(th, c->id);
    c->fd_closed = 1;
    account(th, c, 0);
    __atomic_fetch_sub(&th->e->connections, 1, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&th->nconns, 1, __ATOMIC_RELAXED);
    RMQ_COUNT(th->stats.closed[c->why], 1);
    trace_put(th, RE_TRACE_CLOSE, c->id, NULL, 0);
    if (tell) {
        char why[2 + RE_TLS_WHY_BYTES] = {(char)c->why, (char)!c->split_any};
        size_t n = 1;
        if (c->why == RE_WHY_BAD_FRAME) {
            memcpy(why + 2, c->bad, c->bad_len);
            n = 2 + c->bad_len;
        } else if (c->why == RE_WHY_TLS) {
            /* in the handshake or after it, and OpenSSL's reason, queued by the
             * failure just before on this thread */
            why[1] = (char)!c->tls_shaken;
            tl_error(c->tls, why + 2, RE_TLS_WHY_BYTES);
            n = 2 + strlen(why + 2);
        }
        push_event(th->e, RE_CLOSED, c->id, why, n);
    }
    if (c->tls) {
        /* close_notify after a close of ours whose output was written, as Python's
         * ssl does on close; then what is sealed (it, or a failure's alert) goes if
         * the socket takes it now */
        if (c->closing && (c->why == RE_WHY_CLOSED || c->why == RE_WHY_IDLE ||
                           c->why == RE_WHY_BAD_FRAME))
            tl_shutdown(c->tls);
        if (c->why != RE_WHY_PEER && c->sealed_len > c->sealed_off)
            (void)!send(c->fd, c->sealed + c->sealed_off, c->sealed_len - c->sealed_off,
                        MSG_NOSIGNAL | MSG_DONTWAIT);
        tl_free(c->tls);
        c->tls = NULL;
    }
    rp_give(c->sealed, c->sealed_cap);
    c->sealed = NULL;
    close(c->fd);
    rp_give(c->in, c->in_cap);
    rp_give(c->out, c->out_cap);
    free_ahead(c);
    re_free_partial(c->partial);
    c->in = NULL;
    c->out = NULL;
    c->partial = NULL;
    c->dead_next = th->dead;
    th->dead = c;
}

static void free_dead(re_thread *th)
{
    while (th->dead) {
        re_conn *next = th->dead->dead_next;
        free(th->dead);
        th->dead = next;
    }
}

/* The close asked for (c->closing) once what is queued is written. */
static void start_close(re_thread *th, re_conn *c, int why)
{
    if (!c->closing) {
        c->closing = 1;
        c->closed_at = th->now;
        c->why = (uint8_t)why;
    }
}

/* Whether c is read and split now: nothing with Python, not closing, and its output
 * not backed up (paused at max_output, resumed at resume_output: Netty's water marks). */
static int reading(const rmq_engine *e, re_conn *c)
{
    if (c->paused ? pending(c) <= e->cfg.resume_output : pending(c) >= e->cfg.max_output)
        c->paused = !c->paused;
    return !c->with_python && !c->closing && !c->paused;
}

static void enforce_budget(re_thread *th);

/* Whether c has bytes a writable socket would take: over TLS, records sealed, or output
 * to seal unless OpenSSL waits to read first (a handshake under way). */
static int sendable(const re_conn *c)
{
    if (!c->tls)
        return pending(c) > 0;
    return c->sealed_len > c->sealed_off || (plain_pending(c) && !c->tls_wants_read);
}

/* epoll's interest for what c waits for now; its unsent bytes counted, and the
 * output budget kept (which may close c: the caller uses it no more). */
static void set_interest(re_thread *th, re_conn *c)
{
    /* RDHUP even when not reading: a peer that closes while its frames are with
     * Python is gone at once (its work is dropped, as the asyncio server does); not
     * once closing (level-triggered, it would wake the thread until the output is out) */
    uint32_t want = (c->closing ? 0 : EPOLLRDHUP) | (reading(th->e, c) ? EPOLLIN : 0) |
                    (sendable(c) ? EPOLLOUT : 0) | (c->tls_wants_read ? EPOLLIN : 0);
    if (want != c->interest) {
        struct epoll_event ev = {.events = want, .data.ptr = c};
        epoll_ctl(th->epfd, EPOLL_CTL_MOD, c->fd, &ev);
        c->interest = want;
    }
    if (c->notify_drain && pending(c) <= th->e->cfg.resume_output) {
        c->notify_drain = 0;
        push_event(th->e, RE_DRAINED, c->id, NULL, 0);
    }
    size_t before = c->counted;
    account(th, c, pending(c));
    rmq_engine *e = th->e;
    if (e->cfg.max_total_output && pending(c) > before &&
        __atomic_load_n(&e->out_total, __ATOMIC_RELAXED) > (int64_t)(e->cfg.max_total_output / 4 * 3))
        enforce_budget(th);
}

/* Past 3/4 of max_total_output: this thread's connections holding the most unsent
 * bytes, those that stopped reading first, aborted until the total is under 5/8 (the
 * other threads do the same with theirs as their output grows). */
static void enforce_budget(re_thread *th)
{
    rmq_engine *e = th->e;
    int64_t target = (int64_t)(e->cfg.max_total_output / 8 * 5);
    while (__atomic_load_n(&e->out_total, __ATOMIC_RELAXED) > target) {
        re_conn *worst = NULL;
        int worst_stalled = 0;
        for (int b = 0; b < CONN_BUCKETS; b++)
            for (re_conn *c = th->conns[b]; c; c = c->next) {
                int stalled = !reading(e, c);
                if (pending(c) && (!worst || stalled > worst_stalled ||
                                   (stalled == worst_stalled && pending(c) > pending(worst)))) {
                    worst = c;
                    worst_stalled = stalled;
                }
            }
        if (!worst)
            return;
        worst->why = RE_WHY_OUTPUT_BUDGET;
        conn_close(th, worst, 1);
    }
}

/* Room for `more` bytes after *len in a buffer whose bytes [*off, *len) are kept
 * (the input not yet split, the output not yet written): the bytes before *off
 * dropped, then the buffer grown by doubling (a big frame costs a few
 * reallocations), only when the tail lacks it (the common case moves nothing). */
static int make_room(char **buf, size_t *off, size_t *len, size_t *cap, size_t more)
{
    if (*cap - *len >= more)
        return 0;
    if (*off) {
        memmove(*buf, *buf + *off, *len - *off);
        *len -= *off;
        *off = 0;
        if (*cap - *len >= more)
            return 0;
    }
    size_t grown = *cap ? *cap : READ_CHUNK;
    while (grown - *len < more)
        grown *= 2;
    if (grown < RP_MIN) {
        char *p = realloc(*buf, grown);
        if (!p)
            return -1;
        *buf = p;
        *cap = grown;
        return 0;
    }
    /* a big one: from the pool (its pages already there), what is kept copied */
    size_t got;
    char *p = rp_take(grown, &got);
    if (!p)
        return -1;
    if (*len)
        memcpy(p, *buf, *len);
    rp_give(*buf, *cap);
    *buf = p;
    *cap = got;
    return 0;
}

/* A connection's input and output buffers go back whenever they are empty (an idle
 * connection holds none), so a busy one with a query at a time takes both again for
 * each: from its thread's spares, not from malloc, whose two mallocs and frees of
 * 64 KiB a lone route query paid (bench/README.md, "A lone query's own work"). Only
 * READ_CHUNK buffers are kept, at most SPARE_CHUNKS. */
static void spare_take(re_thread *th, char **buf, size_t *cap)
{
    if (!*buf && th->nspare) {
        *buf = th->spare[--th->nspare];
        *cap = READ_CHUNK;
        th->spare_taken = 1;
    }
}

static void spare_give(re_thread *th, char **buf, size_t *cap)
{
    if (*buf && *cap == READ_CHUNK && th->nspare < SPARE_CHUNKS)
        th->spare[th->nspare++] = *buf;
    else
        rp_give(*buf, *cap);
    *buf = NULL;
    *cap = 0;
}

/* Once a second: the spares of a thread that took none since go back to malloc. */
static void spare_trim(re_thread *th)
{
    if (!th->spare_taken)
        while (th->nspare)
            free(th->spare[--th->nspare]);
    th->spare_taken = 0;
}

/* Room for `more` bytes at the end of out. Unwritten output of a big buffer's size
 * is not moved or copied for it: it goes ahead, and out starts again. */
static int out_room(re_thread *th, re_conn *c, size_t more)
{
    if (c->out_cap - c->out_len < more && c->out_len - c->out_off >= RP_MIN &&
        out_ahead(c) < 0)
        return -1;
    spare_take(th, &c->out, &c->out_cap);
    return make_room(&c->out, &c->out_off, &c->out_len, &c->out_cap, more);
}

/* Nothing left to split: the buffer goes back (an idle connection holds none). */
static void release_empty_input(re_thread *th, re_conn *c)
{
    if (c->in_off == c->in_len && c->in) {
        spare_give(th, &c->in, &c->in_cap);
        c->in_off = c->in_len = 0;
    }
}

/* Where the body of the frame at p begins (its header there whole). */
static inline size_t body_at(const uint8_t *p)
{
    uint32_t stype;
    return 8 + rmq_header_word(p + 4, &stype);
}

/* The batch of frames at c->in_off (batch bytes) to Python: copied into its event,
 * or when big (a registration's body: up to max_frame), the input buffer itself handed
 * over with the event and what follows the batch moved to a buffer of its own, so that
 * a big frame is not copied here (a copy into fresh pages costs the thread, and the
 * connections it serves, ~0.5 ms a MB: bench/README.md); with it, the entries of its
 * first frame scanned while it arrived (scan_arriving), pointing into that buffer. */
static int hand_over(rmq_engine *e, re_conn *c, size_t batch)
{
    const char *p = c->in + c->in_off;
    /* (a partial is of a frame of HAND_OVER_BYTES or more: handed over in its buffer) */
    rb_partial *partial = c->partial;
    c->partial = NULL;
    if (partial && !rb_partial_has_entries(partial)) {
        re_free_partial(partial);   /* (of no use to the table's read) */
        partial = NULL;
    }
    if (batch < HAND_OVER_BYTES) {
        if (push_event(e, RE_FRAME, c->id, p, batch) < 0)
            return -1;
        c->in_off += batch;
        return 0;
    }
    size_t rest = c->in_len - c->in_off - batch, off = 0, len = 0, cap = 0;
    char *next = NULL;
    if (rest) {
        if (make_room(&next, &off, &len, &cap, rest) < 0) {
            re_free_partial(partial);
            return -1;
        }
        memcpy(next, p + batch, rest);
    }
    if (partial)                /* (its entries point into the frame where it is now) */
        rb_partial_move(partial, p + body_at((const uint8_t *)p));
    if (queue_event(e, RE_FRAME, c->id, c->in, c->in_cap, p, batch, partial) < 0) {
        re_free_partial(partial);
        rp_give(next, cap);
        return -1;
    }
    c->in = next;               /* (the old one is Python's now: not touched again) */
    c->in_off = 0;
    c->in_len = rest;
    c->in_cap = cap;
    return 0;
}

/* c, about to hand Python `frame` (its length prefix, then `length` bytes), or with
 * a big frame begun (frame NULL), moved to the control thread, which hands the frame
 * over, or reads the rest of it, and serves c from then on: 1, and c is not touched
 * here again (its events of this epoll batch skipped: left_now). 0: it stays (no
 * control thread, this is it, too many moved in this batch, no memory; or the frame
 * is a route query that Python answers: needWaitForService, ACL, a rule-built route,
 * whose clients stay with the route threads). */
static int move_to_control(re_thread *th, re_conn *c, const uint8_t *frame, size_t length)
{
    rmq_engine *e = th->e;
    if (!e->ctl || th == e->ctl || th->nleft == MOVES_PER_BATCH)
        return 0;
    rq_route req;
    if (frame && rq_scan_route(frame + 4, length, &req))
        return 0;
    re_cmd *cmd = calloc(1, sizeof *cmd);
    if (!cmd || moved_add(th, c->id) < 0) {
        free(cmd);
        return 0;
    }
    unlink_conn(th, c);
    th->left[th->nleft++] = c;
    __atomic_fetch_sub(&th->nconns, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&e->ctl->nconns, 1, __ATOMIC_RELAXED);
    cmd->conn = c->id;
    cmd->move = c;
    post(e->ctl, cmd);
    return 1;
}

/* Whether c moved away in this epoll batch (compared, never dereferenced: it is the
 * control thread's now). */
static int left_now(const re_thread *th, const re_conn *c)
{
    for (int i = 0; i < th->nleft; i++)
        if (th->left[i] == c)
            return 1;
    return 0;
}

/* The control thread, the first n bytes of a big frame at p there (incomplete): if it
 * is a registration, the topic entries of its body that came whole are scanned now
 * (scan.h, rb_partial_step), while the rest arrives, and handed to Python with the
 * frame (hand_over): the table thread then scans only what came last. */
static void scan_arriving(re_conn *c, const uint8_t *p, size_t n)
{
    if (!c->partial) {
        int32_t code = 0;
        size_t body = rq_scan_request(p + 4, n - 4, &code);
        if (!body)
            return;                 /* (its header is not all there yet) */
        /* (zeroed: given up, and this frame's header not looked at again, unless it
         * is a registration's) */
        if ((c->partial = calloc(1, sizeof *c->partial)) == NULL)
            return;
        if (body != RQ_UNUSUAL && code == RMQ_REGISTER_BROKER)
            rb_partial_init(c->partial, 4 + (size_t)rmq_be32(p) - body_at(p));
    }
    if (c->partial->state != RBP_OFF) {
        size_t at = body_at(p);
        rb_partial_step(c->partial, (const char *)p + at, n - at);
    }
}

/* Split what was read: route queries answered here, the first other frame to
 * Python (then nothing more until its answer), a bad length closes after the
 * answers before it. -1: out of memory (the caller closes); 1: c moved to the
 * control thread with that frame (the caller touches it no more). */
static int split(re_thread *th, re_conn *c)
{
    rmq_engine *e = th->e;
    while (c->in_len > c->in_off && reading(e, c)) {
        const uint8_t *p = (const uint8_t *)c->in + c->in_off;
        size_t n = c->in_len - c->in_off, need = 0;
        int64_t length = rmq_frame_at(p, n, e->cfg.max_frame);
        if (length == RMQ_FRAME_BAD_LENGTH) {
            c->bad_len = (uint8_t)(n < RE_BAD_BYTES ? n : RE_BAD_BYTES);
            memcpy(c->bad, p, c->bad_len);
            start_close(th, c, RE_WHY_BAD_FRAME);
            break;
        }
        if (length == RMQ_FRAME_INCOMPLETE) {
            /* A frame of megabytes (a registration) is read by the control thread, not
             * a route thread: its client moves there as it begins. */
            if (n >= 4 && (size_t)rmq_be32(p) >= HAND_OVER_BYTES) {
                if (th == e->ctl)
                    scan_arriving(c, p, n);
                else if (move_to_control(th, c, NULL, 0))
                    return 1;
            }
            break;
        }
        size_t used = 0;
        if (!__atomic_load_n(&e->routes_in_python, __ATOMIC_RELAXED)) {
            if (out_room(th, c, READ_CHUNK) < 0)
                return -1;
            size_t before = c->out_len;
            /* (out grows to max_output at most, what is ahead of it counted) */
            size_t room = e->cfg.max_output > c->ahead_bytes ? e->cfg.max_output - c->ahead_bytes : 0;
            used = rs_serve_routes(e->t, e->stype, p, n, e->cfg.max_frame, c->out, c->out_cap,
                                   &c->out_len, c->out_off + room, &need, &th->counts);
            if (used && th->ring) {
                trace_put(th, RE_TRACE_IN, c->id, p, used);
                trace_put(th, RE_TRACE_OUT, c->id, c->out + before, c->out_len - before);
            }
        }
        if (used) {
            c->split_any = 1;
            re_free_partial(c->partial);   /* (the frame it was of is answered: a route query) */
            c->partial = NULL;
        }
        c->in_off += used;
        if (need) {
            if (out_room(th, c, need) < 0)
                return -1;
            continue;
        }
        if (used || pending(c) >= e->cfg.max_output)
            continue;
        /* not a route query rs_serve_routes answers: Python's, with the complete
         * frames after it that are not route queries either (a route query after
         * them is answered here once Python's answers are queued: the order holds) */
        if (move_to_control(th, c, p, (size_t)length))
            return 1;
        size_t batch = 4 + (size_t)length;
        int frames = 1, all = __atomic_load_n(&e->routes_in_python, __ATOMIC_RELAXED);
        while (frames < PY_BATCH_FRAMES && batch < PY_BATCH_BYTES) {
            int64_t next = rmq_frame_at(p + batch, n - batch, e->cfg.max_frame);
            rq_route req;
            if (next < 0 || (!all && rq_scan_route(p + batch + 4, (size_t)next, &req)))
                break;              /* incomplete, bad (closes on the next split), a route */
            batch += 4 + (size_t)next;
            frames++;
        }
        trace_put(th, RE_TRACE_IN, c->id, p, batch);
        if (hand_over(e, c, batch) < 0)
            return -1;
        c->with_python = 1;
        c->split_any = 1;
    }
    release_empty_input(th, c);
    return 0;
}

/* A read and a write of a connection, plain or over TLS: bytes, or IO_AGAIN (wait for
 * epoll), IO_GONE (the peer closed, or the socket failed), IO_TLS_ERROR. */
static ssize_t conn_recv(re_conn *c, char *buf, size_t n)
{
    if (c->tls) {
        /* the records that came, up to n bytes of plaintext: split and answered
         * together, the answers written in few records, as a plain read's */
        size_t got = 0;
        ssize_t r;
        do {
            r = tl_read(c->tls, buf + got, n - got);
            if (r > 0)
                got += (size_t)r;
        } while (r > 0 && got < n);
        if (c->sink_failed) {                   /* (the handshake's answer is lost) */
            c->why = RE_WHY_NO_MEMORY;
            return IO_GONE;
        }
        if (!c->tls_shaken && r != TL_ERROR)    /* (a fatal error resets OpenSSL's state) */
            c->tls_shaken = (uint8_t)tl_handshake_done(c->tls);
        if (r == TL_ERROR)
            return IO_TLS_ERROR;                /* (what came before it is dropped) */
        if (got)
            return (ssize_t)got;                /* a close is seen again by the next read */
        /* (its records go to memory: a read never waits to write) */
        return r == TL_WANT_READ ? IO_AGAIN : IO_GONE;
    }
    for (;;) {
        ssize_t r = sock_recv(c->fd, buf, n);
        if (r > 0)
            return r;
        if (r < 0 && errno == EINTR)
            continue;
        return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? IO_AGAIN : IO_GONE;
    }
}

static ssize_t conn_send(re_conn *c, const char *buf, size_t n)
{
    for (;;) {
        ssize_t w = sock_send(c->fd, buf, n);
        if (w > 0)
            return w;
        if (w < 0 && errno == EINTR)
            continue;
        return w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? IO_AGAIN : IO_GONE;
    }
}

/* A read or write that failed (IO_GONE, IO_TLS_ERROR): the connection closed. */
static void conn_failed(re_thread *th, re_conn *c, ssize_t r)
{
    if (r == IO_TLS_ERROR)
        c->why = RE_WHY_TLS;
    conn_close(th, c, 1);
}

/* TLS (a tl_sink's write): records OpenSSL sealed (answers, the handshake's messages,
 * alerts) appended to c->sealed, to be written. -1: out of memory. */
static int sealed_write(void *arg, const char *data, size_t n)
{
    re_conn *c = arg;
    if (make_room(&c->sealed, &c->sealed_off, &c->sealed_len, &c->sealed_cap, n) < 0) {
        c->sink_failed = 1;
        return -1;
    }
    memcpy(c->sealed + c->sealed_len, data, n);
    c->sealed_len += n;
    return 0;
}

/* TLS: the output encrypted, SEAL_BYTES at a time, once what was sealed before is
 * written (the records of a connection that does not read stay few). IO_TLS_ERROR,
 * -1 out of memory, else 0. */
static int encrypt(re_conn *c)
{
    c->tls_wants_read = 0;
    if (c->sealed_len == c->sealed_off && plain_pending(c)) {
        size_t n;
        const char *p = plain_next(c, &n);
        ssize_t w = tl_write(c->tls, p, n < SEAL_BYTES ? n : SEAL_BYTES);
        if (c->sink_failed)
            return -1;
        if (w == TL_WANT_READ)          /* the handshake is not done: no output yet */
            c->tls_wants_read = 1;
        else if (w < 0)
            return IO_TLS_ERROR;
        else
            plain_done(c, (size_t)w);
    }
    return 0;
}

/* Write what is pending, WRITE_TURN bytes at most: the rest once the thread's other
 * connections had their turn (epoll, level-triggered, says again that the socket
 * takes more). -1: the connection is gone (closed here). */
static int flush(re_thread *th, re_conn *c)
{
    for (size_t turn = 0; turn < WRITE_TURN;) {
        if (c->tls) {
            int r = encrypt(c);
            if (r < 0) {
                if (r == -1)
                    c->why = RE_WHY_NO_MEMORY;
                conn_failed(th, c, r == -1 ? IO_GONE : r);
                return -1;
            }
        }
        size_t n = c->sealed_len - c->sealed_off;
        const char *p = c->tls ? c->sealed + c->sealed_off : plain_next(c, &n);
        if (!n)
            break;
        ssize_t w = conn_send(c, p, n < WRITE_TURN - turn ? n : WRITE_TURN - turn);
        if (w == IO_AGAIN)
            break;
        if (w < 0) {
            conn_failed(th, c, w);
            return -1;
        }
        if (c->tls)
            c->sealed_off += (size_t)w;
        else
            plain_done(c, (size_t)w);
        turn += (size_t)w;
        c->last_active = th->now;
        RMQ_COUNT(th->stats.bytes_out, (uint64_t)w);
    }
    if (!pending(c)) {
        /* all written: the buffers go back, as the input's does */
        spare_give(th, &c->out, &c->out_cap);
        rp_give(c->sealed, c->sealed_cap);
        c->sealed = NULL;
        c->out_off = c->out_len = 0;
        c->sealed_off = c->sealed_len = c->sealed_cap = 0;
        if (c->closing) {
            conn_close(th, c, 1);
            return -1;
        }
    }
    return 0;
}

/* A connection of a TLS port, before its first byte: TLS when that byte opens a
 * handshake record (as Java's handshake handler decides), else plain, or closed on a
 * TLS-only port. The byte is peeked: it stays for OpenSSL's or the splitter's read.
 * 1: decided; 0: no byte yet; -1: gone. */
static int sniff(re_thread *th, re_conn *c)
{
    uint8_t first;
    ssize_t r = recv(c->fd, &first, 1, MSG_PEEK);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (r <= 0) {
        conn_close(th, c, 1);
        return -1;
    }
    c->sniff = 0;
    if (first == TLS_HANDSHAKE_RECORD) {
        c->sink = (tl_sink){sealed_write, c};
        if (!(c->tls = tl_new(th->e->cfg.tls_ctx, c->fd, &c->sink))) {
            c->why = RE_WHY_NO_MEMORY;
            conn_close(th, c, 1);
            return -1;
        }
    } else if (th->e->cfg.tls_enforcing) {
        c->why = RE_WHY_TLS_REQUIRED;
        conn_close(th, c, 1);
        return -1;
    }
    return 1;
}

/* How much the next read takes: READ_CHUNK, or the rest of the frame in the buffer
 * when it is longer (a registration's body, up to max_frame, checked as soon as its
 * length is in, is read in a few calls). Input is bounded so: what is buffered and
 * not yet split is at most a frame and a read, whatever the peer sends while its
 * connection is paused. */
static size_t read_size(const rmq_engine *e, const re_conn *c)
{
    size_t have = c->in_len - c->in_off;
    if (have < 4)
        return READ_CHUNK;
    const uint8_t *p = (const uint8_t *)c->in + c->in_off;
    int64_t length = rmq_frame_at(p, have, e->cfg.max_frame);
    if (length == RMQ_FRAME_INCOMPLETE) {
        size_t rest = 4 + (size_t)rmq_be32(p) - have;
        return rest > READ_CHUNK ? rest : READ_CHUNK;
    }
    return READ_CHUNK;
}

/* Read while the connection may be read. -1: gone. */
static int conn_read(re_thread *th, re_conn *c)
{
    rmq_engine *e = th->e;
    size_t turn = 0;                /* bytes read this turn */
    int drained = 0;                /* the last read was short */
    while (reading(e, c)) {
        if (c->in_len > c->in_off &&
            rmq_frame_at((const uint8_t *)c->in + c->in_off, c->in_len - c->in_off,
                         e->cfg.max_frame) !=
            RMQ_FRAME_INCOMPLETE) {
            /* frames a split left when the output backed up, and it has drained: they
             * go first, so that what is buffered stays within a frame and a read */
            int r = split(th, c);
            if (r < 0) {
                c->why = RE_WHY_NO_MEMORY;
                conn_close(th, c, 1);
            }
            if (r)
                return -1;          /* (closed, or moved away) */
            if (pending(c) && flush(th, c) < 0)
                return -1;
            continue;
        }
        if (c->sniff) {
            int decided = sniff(th, c);
            if (decided < 0)
                return -1;
            if (!decided)
                break;
        }
        /* The last read was short: it emptied the socket, and epoll (level-triggered)
         * reports what comes next. So no read only to hear EAGAIN: one syscall of the
         * three or four a lone query costs. (Not over TLS: OpenSSL may hold more.) */
        if (drained)
            break;
        /* (not over TLS: plaintext may wait inside OpenSSL, where epoll does not see
         * it; a TLS connection is read until its socket is empty) */
        if (turn >= READ_TURN && !c->tls)
            break;
        size_t want = read_size(e, c);
        spare_take(th, &c->in, &c->in_cap);
        if (make_room(&c->in, &c->in_off, &c->in_len, &c->in_cap, want) < 0) {
            c->why = RE_WHY_NO_MEMORY;
            conn_close(th, c, 1);
            return -1;
        }
        size_t asked = c->tls || want < READ_TURN ? want : READ_TURN;
        ssize_t r = conn_recv(c, c->in + c->in_len, asked);
        if (r == IO_AGAIN) {
            release_empty_input(th, c);
            break;
        }
        if (r < 0) {
            conn_failed(th, c, r);
            return -1;
        }
        c->in_len += (size_t)r;
        turn += (size_t)r;
        c->last_active = th->now;
        RMQ_COUNT(th->stats.bytes_in, (uint64_t)r);
        int s = split(th, c);
        if (s < 0) {
            c->why = RE_WHY_NO_MEMORY;
            conn_close(th, c, 1);
        }
        if (s)
            return -1;              /* (closed, or moved away) */
        if (pending(c) && flush(th, c) < 0)
            return -1;
        drained = (size_t)r < asked && !c->tls;
    }
    if (flush(th, c) < 0)
        return -1;
    set_interest(th, c);
    return 0;
}

/* An accepted socket counted for th (e->connections, th->nconns) that will not be
 * served (out of memory, or the engine stopped first): closed and uncounted. */
static void unaccept(re_thread *th, int fd)
{
    __atomic_fetch_sub(&th->e->connections, 1, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&th->nconns, 1, __ATOMIC_RELAXED);
    close(fd);
}

/* Take an accepted socket (counted in e->connections and th->nconns) as one of this
 * thread's connections: its options set, in this thread's epoll, announced to Python. */
static void adopt(re_thread *th, int fd, const char *peer)
{
    rmq_engine *e = th->e;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (e->cfg.sndbuf)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &e->cfg.sndbuf, sizeof e->cfg.sndbuf);
    if (e->cfg.rcvbuf)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &e->cfg.rcvbuf, sizeof e->cfg.rcvbuf);
    re_conn *c = calloc(1, sizeof *c);
    if (c) {
        c->fd = fd;
        c->sniff = e->cfg.tls_ctx != NULL;
        c->id = (++th->next_seq << 8) | (uint64_t)th->index;
        c->interest = EPOLLIN | EPOLLRDHUP;
        c->last_active = th->now;
        struct epoll_event ev = {.events = c->interest, .data.ptr = c};
        if (epoll_ctl(th->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            free(c);
            c = NULL;
        }
    }
    if (!c) {
        unaccept(th, fd);
        return;
    }
    link_conn(th, c);
    RMQ_COUNT(th->stats.accepted, 1);
    push_event(e, RE_OPEN, c->id, peer, strlen(peer));
    trace_put(th, RE_TRACE_OPEN, c->id, peer, strlen(peer));
}

static void post(re_thread *th, re_cmd *cmd);

/* The thread a new connection goes to: the one with the fewest, this one on a tie.
 * epoll wakes one waiter of the listening socket (EPOLLEXCLUSIVE), and an idle
 * thread is woken first: without this, connections that come one at a time (clients
 * starting over minutes, as they do) would all land on one thread, one core. */
static re_thread *least_loaded(re_thread *th)
{
    rmq_engine *e = th->e;
    re_thread *to = th;
    int least = __atomic_load_n(&th->nconns, __ATOMIC_RELAXED);
    for (int i = 0; i < e->nthreads && least > 0; i++) {
        if (&e->threads[i] == e->ctl)
            continue;               /* (it takes connections as they talk to Python) */
        int n = __atomic_load_n(&e->threads[i].nconns, __ATOMIC_RELAXED);
        if (n < least) {
            least = n;
            to = &e->threads[i];
        }
    }
    /* counted now, not when it adopts: the next accept of this burst sees it */
    __atomic_fetch_add(&to->nconns, 1, __ATOMIC_RELAXED);
    return to;
}

static void accept_all(re_thread *th)
{
    rmq_engine *e = th->e;
    while (!__atomic_load_n(&e->accept_off, __ATOMIC_RELAXED)) {
        struct sockaddr_storage sa;
        socklen_t salen = sizeof sa;
        int fd = accept4(e->listen_fd, (struct sockaddr *)&sa, &salen,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return;                 /* EAGAIN: another thread took it, or none left */
        }
        if (__atomic_fetch_add(&e->connections, 1, __ATOMIC_RELAXED) >= e->cfg.max_connections) {
            __atomic_fetch_sub(&e->connections, 1, __ATOMIC_RELAXED);
            close(fd);
            RMQ_COUNT(th->stats.refused, 1);
            continue;
        }
        char peer[INET6_ADDRSTRLEN + 8] = "";
        char host[INET6_ADDRSTRLEN] = "";
        if (sa.ss_family == AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)&sa;
            inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
            snprintf(peer, sizeof peer, "%s:%u", host, ntohs(in->sin_port));
        } else if (sa.ss_family == AF_INET6) {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&sa;
            inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
            snprintf(peer, sizeof peer, "[%s]:%u", host, ntohs(in6->sin6_port));
        }
        re_thread *to = least_loaded(th);
        if (to == th) {
            adopt(th, fd, peer);
            continue;
        }
        re_cmd *cmd = malloc(sizeof *cmd);
        char *copy = cmd ? strdup(peer) : NULL;
        if (!copy) {
            free(cmd);
            unaccept(to, fd);
            continue;
        }
        *cmd = (re_cmd){.len = strlen(copy), .data = copy, .adopt = 1, .fd = fd};
        post(to, cmd);
    }
}

/* Output from Python for c (len bytes at *data), traced and queued: a small one
 * copied into out; a big one (a batch of 206s) becomes the output, not copied again
 * (*data taken: NULL after); a shared one (a cached answer's body, its reference
 * taken over) is queued where it is. What was unwritten goes ahead of either. -1:
 * out of memory, c closed. */
static int take_output(re_thread *th, re_conn *c, char **data, size_t len, rp_shared *shared)
{
    if (!len) {
        rp_shared_drop(shared);
        return 0;
    }
    trace_put(th, RE_TRACE_OUT, c->id, *data, len);
    if (shared) {
        if (out_ahead(c) < 0 || queue_ahead(c, (re_block){NULL, *data, 0, len, 0, shared}) < 0) {
            rp_shared_drop(shared);
            goto no_memory;
        }
    } else if (len >= READ_CHUNK) {
        if (out_ahead(c) < 0)
            goto no_memory;
        rp_give(c->out, c->out_cap);
        c->out = *data;
        c->out_off = 0;
        c->out_len = c->out_cap = len;
        *data = NULL;
    } else {
        if (out_room(th, c, len) < 0)
            goto no_memory;
        memcpy(c->out + c->out_len, *data, len);
        c->out_len += len;
    }
    return 0;
no_memory:
    c->why = RE_WHY_NO_MEMORY;
    conn_close(th, c, 1);
    return -1;
}

/* The control thread: c, moved here (move_to_control), served from now on: the frame
 * it came with handed to Python, then read as any other. */
static void take_moved(re_thread *th, re_conn *c)
{
    link_conn(th, c);
    c->interest = EPOLLRDHUP;
    struct epoll_event ev = {.events = c->interest, .data.ptr = c};
    if (epoll_ctl(th->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
        c->why = RE_WHY_NO_MEMORY;
        conn_close(th, c, 1);
        return;
    }
    conn_read(th, c);       /* its frames split here, then epoll's interest */
}

/* Python's answers and closes for this thread's connections; re_stop_accepting. */
static void run_cmds(re_thread *th)
{
    uint64_t n;
    ssize_t r = read(th->wakefd, &n, sizeof n);
    (void)r;
    if (th->listening && __atomic_load_n(&th->e->accept_off, __ATOMIC_RELAXED)) {
        epoll_ctl(th->epfd, EPOLL_CTL_DEL, th->e->listen_fd, NULL);
        th->listening = 0;
    }
    pthread_mutex_lock(&th->m);
    re_cmd *cmd = th->cmds;
    th->cmds = th->cmds_tail = NULL;
    pthread_mutex_unlock(&th->m);
    while (cmd) {
        re_cmd *next = cmd->next;
        if (cmd->adopt) {
            adopt(th, cmd->fd, cmd->data);
            free_cmd(cmd);
            cmd = next;
            continue;
        }
        if (cmd->move) {
            take_moved(th, cmd->move);
            free_cmd(cmd);
            cmd = next;
            continue;
        }
        if (cmd->forget) {
            moved_drop(th, cmd->conn);
            free_cmd(cmd);
            cmd = next;
            continue;
        }
        re_conn *c = find_conn(th, cmd->conn);
        if (!c && moved_find(th, cmd->conn)) {
            /* on the control thread now: there, after its move (posted before) and what
             * this thread passed on before, in the order Python sent them */
            cmd->next = NULL;
            post(th->e->ctl, cmd);
            cmd = next;
            continue;
        }
        if (cmd->state) {
            if (c) {
                size_t buffers = c->out_len > c->out_off;
                for (re_block *b = c->ahead; b; b = b->next)
                    buffers++;
                *cmd->state = (re_conn_state){1, pending(c), c->in_len - c->in_off, buffers,
                                              c->with_python, c->paused, c->closing,
                                              c->tls != NULL, th->index};
            }
            sem_post(cmd->done);
            free_cmd(cmd);
            cmd = next;
            continue;
        }
        if (c) {
            int gone = 0;
            c->last_active = th->now;       /* Python answered: not idle */
            if (cmd->len && take_output(th, c, &cmd->data, cmd->len, NULL) < 0)
                gone = 1;
            for (size_t i = 0; !gone && i < cmd->nparts; i++) {
                re_part *part = &cmd->parts[i];
                gone = take_output(th, c, &part->data, part->len, part->shared) < 0;
                if (part->shared)
                    *part = (re_part){NULL, 0, NULL};   /* (its reference taken over) */
            }
            if (!gone) {
                if (cmd->notify)
                    c->notify_drain = 1;
                if (cmd->close)
                    start_close(th, c, RE_WHY_CLOSED);
                if (cmd->resume && c->with_python) {
                    c->with_python = 0;
                    int r = split(th, c);
                    if (r < 0) {
                        c->why = RE_WHY_NO_MEMORY;
                        conn_close(th, c, 1);
                    }
                    gone = r != 0;  /* (closed, or moved away) */
                }
            }
            if (!gone && flush(th, c) == 0)
                conn_read(th, c);   /* what came meanwhile, then epoll's interest */
        }
        free_cmd(cmd);
        cmd = next;
    }
}

/* Every scan period: idle connections closed, closes pending too long aborted, and
 * the record buffers of TLS connections quiet for a period given back. */
static void scan_idle(re_thread *th, double period)
{
    double idle = th->e->cfg.idle_seconds;
    for (int b = 0; b < CONN_BUCKETS; b++) {
        re_conn *c = th->conns[b];
        while (c) {
            re_conn *next = c->next;
            if (c->closing) {
                /* a peer that does not read what is queued must not hold the
                 * connection (and its output) forever */
                if (idle > 0 && th->now - c->closed_at > idle) {
                    c->why = RE_WHY_UNSENT;
                    conn_close(th, c, 1);
                }
            } else if (idle > 0 && !c->with_python && th->now - c->last_active > idle) {
                start_close(th, c, RE_WHY_IDLE);
                if (flush(th, c) == 0)
                    set_interest(th, c);
            } else if (c->tls && th->now - c->last_active > period) {
                tl_trim(c->tls);
            }
            c = next;
        }
    }
}

/* struct sched_attr's first version (the kernel's ABI: its headers clash with glibc's) */
typedef struct {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
} sched_attr_v0;

/* An I/O thread asks the scheduler for short slices (EEVDF's slice request, Linux
 * 6.12 on; older kernels ignore it): where every core is busy (a registration read
 * and applied, other processes), a thread woken by a route query then goes before
 * the tasks that run long, instead of waiting for the next tick (4 ms at HZ=250)
 * once preempted (bench/README.md, "Route latency while the control plane works").
 * Needs no privilege; its policy and nice value kept (only SCHED_OTHER and
 * SCHED_BATCH have slices); a refusal is ignored. Named for top -H and perf. The
 * control thread ("rmq-io-ctl") keeps the default slice: its connections' work is
 * copying megabytes, which is not to go before the route queries. */
static void io_thread_setup(const re_thread *th)
{
    char name[16];
    if (th == th->e->ctl) {
        pthread_setname_np(pthread_self(), "rmq-io-ctl");
        return;
    }
    snprintf(name, sizeof name, "rmq-io-%d", th->index);
    pthread_setname_np(pthread_self(), name);
#ifdef SYS_sched_setattr
    sched_attr_v0 a = {0};
    if (syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) == 0 &&
        (a.policy == SCHED_OTHER || a.policy == SCHED_BATCH)) {
        a.size = sizeof a;
        a.flags = 0;
        a.runtime = IO_SLICE_NS;
        (void)syscall(SYS_sched_setattr, 0, &a, 0);
    }
#endif
}

static void *thread_main(void *arg)
{
    re_thread *th = arg;
    io_thread_setup(th);
    rmq_engine *e = th->e;
    struct epoll_event evs[64];
    double idle = e->cfg.idle_seconds;
    /* idle connections are looked for every quarter of the idle time, within bounds
     * (and quiet TLS connections every TLS_TRIM seconds at most) */
    double period = idle <= 0 ? (e->cfg.tls_ctx ? TLS_TRIM : 0)
                    : idle / 4 < 0.05 ? 0.05 : idle / 4 > TLS_TRIM ? TLS_TRIM : idle / 4;
    th->now = monotonic();
    th->next_scan = th->now + period;
    /* The periodic work below (the idle scan, the trims) is woken by a timer in the
     * epoll set, each tick_ms, rather than by epoll_wait's timeout: a wait with a
     * timeout reads the clock and works out its slack at every call, which a lone
     * route query paid (bench/README.md, "A lone query's own work"). Without a
     * timerfd: the timeout. */
    int tick_ms = period > 0 && period < 1 ? (int)(period * 1000) + 1 : 1000;
    int tick = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (tick >= 0) {
        struct timespec ts = {tick_ms / 1000, (long)(tick_ms % 1000) * 1000000L};
        struct itimerspec every = {ts, ts};
        struct epoll_event tev = {.events = EPOLLIN, .data.ptr = &TICK_TAG};
        if (timerfd_settime(tick, 0, &every, NULL) < 0 ||
            epoll_ctl(th->epfd, EPOLL_CTL_ADD, tick, &tev) < 0) {
            close(tick);
            tick = -1;
        }
    }
    while (!__atomic_load_n(&e->stop, __ATOMIC_ACQUIRE)) {
        int n = poll_wait(th->epfd, evs, 64, tick >= 0 ? -1 : tick_ms);
        th->now = monotonic();
        for (int i = 0; i < n; i++) {
            void *tag = evs[i].data.ptr;
            if (tag == &LISTEN_TAG) {
                accept_all(th);
            } else if (tag == &WAKE_TAG) {
                run_cmds(th);
            } else if (tag == &TICK_TAG) {
                uint64_t ticks;
                (void)!read(tick, &ticks, sizeof ticks);
            } else {
                re_conn *c = tag;
                if (left_now(th, c) || c->fd_closed)
                    continue;       /* moved away, or closed, by an earlier event of
                                       this batch */
                if ((evs[i].events & (EPOLLERR | EPOLLHUP)) ||
                    ((evs[i].events & EPOLLRDHUP) && !reading(e, c) && !c->closing)) {
                    conn_close(th, c, 1);
                    continue;
                }
                if ((evs[i].events & EPOLLOUT) && flush(th, c) < 0)
                    continue;
                conn_read(th, c);
            }
        }
        if (th->now >= th->next_trim) {
            rp_trim(th->now);
            spare_trim(th);
            th->next_trim = th->now + 1;
        }
        if (period > 0 && th->now >= th->next_scan) {
            scan_idle(th, period);
            th->next_scan = th->now + period;
        }
        free_dead(th);
        th->nleft = 0;
        if (th->undirected)
            moved_settle(th);
    }
    if (tick >= 0)
        close(tick);
    return NULL;
}

/* ---------------------------------------------------------------- start and stop */

static void wake(re_thread *th)
{
    signal_fd(th->wakefd);
}

static void append(re_thread *th, re_cmd *cmd)
{
    if (th->cmds_tail)
        th->cmds_tail->next = cmd;
    else
        th->cmds = cmd;
    th->cmds_tail = cmd;
}

/* Hand a command to a thread. */
static void post(re_thread *th, re_cmd *cmd)
{
    pthread_mutex_lock(&th->m);
    append(th, cmd);
    pthread_mutex_unlock(&th->m);
    wake(th);
}

/* Python's command for connection `conn` (whose id names one of the threads: the
 * callers check) to the thread that serves it: the one its id names or, once its
 * move there is direct (moved_settle), the control thread. The look and the queueing
 * are one step under the first thread's m, so no command queued there before the
 * move became direct is overtaken. */
static void route_cmd(rmq_engine *e, uint64_t conn, re_cmd *cmd)
{
    re_thread *th = &e->threads[conn & 0xFF];
    pthread_mutex_lock(&th->m);
    const re_moved *m = e->ctl ? moved_find(th, conn) : NULL;
    if (m && m->direct) {
        pthread_mutex_unlock(&th->m);
        post(e->ctl, cmd);
        return;
    }
    append(th, cmd);
    pthread_mutex_unlock(&th->m);
    wake(th);
}

int re_send_owned(rmq_engine *e, uint64_t conn, char *data, size_t len, int resume,
                  int notify)
{
    int index = (int)(conn & 0xFF);
    re_cmd *cmd = index < e->nthreads ? malloc(sizeof *cmd) : NULL;
    if (!cmd) {
        free(data);
        return index < e->nthreads ? -1 : 0;
    }
    *cmd = (re_cmd){NULL, conn, resume, 0, notify, NULL, NULL, len, data, NULL, 0};
    route_cmd(e, conn, cmd);
    return 0;
}

int re_send_parts(rmq_engine *e, uint64_t conn, re_part *parts, size_t n, int resume,
                  int notify)
{
    int index = (int)(conn & 0xFF);
    re_cmd *cmd = index < e->nthreads ? malloc(sizeof *cmd) : NULL;
    if (!cmd) {
        free_parts(parts, n);
        return index < e->nthreads ? -1 : 0;
    }
    *cmd = (re_cmd){NULL, conn, resume, 0, notify, NULL, NULL, 0, NULL, parts, n};
    route_cmd(e, conn, cmd);
    return 0;
}

int re_send(rmq_engine *e, uint64_t conn, const char *data, size_t len, int resume)
{
    char *copy = NULL;
    if (len && !(copy = malloc(len)))
        return -1;
    if (len)
        memcpy(copy, data, len);
    return re_send_owned(e, conn, copy, len, resume, 0);
}

int re_close(rmq_engine *e, uint64_t conn)
{
    if ((int)(conn & 0xFF) >= e->nthreads)
        return 0;
    re_cmd *cmd = malloc(sizeof *cmd);
    if (!cmd)
        return -1;
    *cmd = (re_cmd){NULL, conn, 0, 1, 0, NULL, NULL, 0, NULL, NULL, 0};
    route_cmd(e, conn, cmd);
    return 0;
}

int re_conn_state_read(rmq_engine *e, uint64_t conn, re_conn_state *out)
{
    *out = (re_conn_state){0};
    int index = (int)(conn & 0xFF);
    if (index >= e->nthreads)
        return 0;
    re_cmd *cmd = calloc(1, sizeof *cmd);
    sem_t done;
    if (!cmd || sem_init(&done, 0, 0) < 0) {
        free(cmd);
        return -1;
    }
    cmd->conn = conn;
    cmd->state = out;
    cmd->done = &done;
    route_cmd(e, conn, cmd);
    while (sem_wait(&done) < 0 && errno == EINTR)
        ;
    sem_destroy(&done);
    return 0;
}

void re_route_queries(rmq_engine *e, int in_c)
{
    __atomic_store_n(&e->routes_in_python, !in_c, __ATOMIC_RELAXED);
}

void re_stop_accepting(rmq_engine *e)
{
    __atomic_store_n(&e->accept_off, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < e->nthreads; i++)
        wake(&e->threads[i]);
}

void re_stats_read(rmq_engine *e, re_stats *out, int *connections)
{
    memset(out, 0, sizeof *out);
#define SUM(f) out->f += __atomic_load_n(&s->f, __ATOMIC_RELAXED)
    for (int i = 0; i < e->nthreads; i++) {
        const re_stats *s = &e->threads[i].stats;
        out->served += __atomic_load_n(&e->threads[i].counts.served, __ATOMIC_RELAXED);
        out->not_found += __atomic_load_n(&e->threads[i].counts.not_found, __ATOMIC_RELAXED);
        SUM(bytes_in);
        SUM(bytes_out);
        SUM(accepted);
        SUM(refused);
        for (int w = 0; w < RE_WHY_COUNT; w++)
            SUM(closed[w]);
    }
#undef SUM
    out->queued_output = (uint64_t)__atomic_load_n(&e->out_total, __ATOMIC_RELAXED);
    for (int i = 0; i < e->nthreads; i++)
        out->trace_dropped += __atomic_load_n(&e->threads[i].stats.trace_dropped, __ATOMIC_RELAXED);
    *connections = __atomic_load_n(&e->connections, __ATOMIC_RELAXED);
}

static void free_thread(re_thread *th)
{
    /* connections moved here and not yet taken: closed with the others */
    for (re_cmd *cmd = th->cmds; cmd; cmd = cmd->next)
        if (cmd->move) {
            link_conn(th, cmd->move);
            cmd->move = NULL;
        }
    for (int b = 0; b < MOVED_BUCKETS; b++)
        while (th->moved[b]) {
            re_moved *m = th->moved[b];
            th->moved[b] = m->next;
            free(m);
        }
    th->undirected = NULL;
    for (int b = 0; b < CONN_BUCKETS; b++)
        while (th->conns[b])
            conn_close(th, th->conns[b], 0);
    free_dead(th);
    re_cmd *cmd = th->cmds;
    while (cmd) {
        re_cmd *next = cmd->next;
        if (cmd->state)
            sem_post(cmd->done);    /* not found: the engine stopped */
        if (cmd->adopt)
            unaccept(th, cmd->fd);
        free_cmd(cmd);
        cmd = next;
    }
    while (th->nspare)
        free(th->spare[--th->nspare]);
    free(th->ring);
    if (th->epfd >= 0)
        close(th->epfd);
    if (th->wakefd >= 0)
        close(th->wakefd);
    pthread_mutex_destroy(&th->m);
}

void re_stop(rmq_engine *e)
{
    __atomic_store_n(&e->stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < e->nthreads; i++)
        wake(&e->threads[i]);
    signal_fd(e->evfd);             /* a taker waiting in re_next returns */
    for (int i = 0; i < e->nthreads; i++)
        pthread_join(e->threads[i].th, NULL);
    for (int i = 0; i < e->nthreads; i++)
        free_thread(&e->threads[i]);
    if (e->cfg.tls_ctx)
        tl_ctx_release(e->cfg.tls_ctx);
    re_free_events(e->head);
    close(e->evfd);
    pthread_mutex_destroy(&e->qm);
    free(e);
}

/* Big buffers (a registration's frame, a turn of 206 answers, a connection's grown
 * input) are mapped and unmapped, not carved from the threads' arenas: glibc's
 * default raises its mapping threshold to the size of each mapped block freed (up to
 * 32 MiB), after which such buffers come from the arenas, which keep what they
 * held (a soak's RSS grew a few MiB a minute so). A fixed threshold also stops
 * that adjustment. Once per process, at the first engine's start. */
enum { BIG_BUFFER = 256 * 1024 };

static void map_big_buffers(void)
{
    static int done;
    if (!__atomic_exchange_n(&done, 1, __ATOMIC_RELAXED)) {
#ifdef M_MMAP_THRESHOLD
        mallopt(M_MMAP_THRESHOLD, BIG_BUFFER);
#endif
    }
}

int re_thread_count(const rmq_engine *e)
{
    return e->nthreads;
}

rmq_engine *re_start(rt_table *t, int stype, int listen_fd, const re_config *cfg)
{
    int n = cfg->threads + (cfg->control_thread != 0);
    if (cfg->threads < 1 || n > RE_MAX_THREADS || cfg->max_frame < 8) {
        errno = EINVAL;
        return NULL;
    }
    map_big_buffers();
    rmq_engine *e = calloc(1, sizeof *e + (size_t)n * sizeof(re_thread));
    if (!e)
        return NULL;
    e->t = t;
    e->stype = stype;
    e->listen_fd = listen_fd;
    e->cfg = *cfg;
    if (cfg->tls_ctx && tl_ctx_hold(cfg->tls_ctx) < 0) {
        free(e);
        errno = EINVAL;
        return NULL;
    }
    e->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (e->evfd < 0) {
        int err = errno;
        if (cfg->tls_ctx)
            tl_ctx_release(cfg->tls_ctx);
        free(e);
        errno = err;
        return NULL;
    }
    pthread_mutex_init(&e->qm, NULL);
    fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK);
    int started = 0, err = 0;
    for (int i = 0; i < n; i++) {
        re_thread *th = &e->threads[i];
        th->e = e;
        th->index = i;
        th->trace_floor = UINT64_MAX;
        pthread_mutex_init(&th->m, NULL);
        if (cfg->trace_bytes) {
            th->ring_cap = cfg->trace_bytes;
            th->ring = malloc(th->ring_cap);
        }
        th->epfd = epoll_create1(EPOLL_CLOEXEC);
        th->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        e->nthreads = i + 1;
        if (th->epfd < 0 || th->wakefd < 0 || (cfg->trace_bytes && !th->ring)) {
            err = th->epfd < 0 || th->wakefd < 0 ? errno : ENOMEM;
            break;
        }
        struct epoll_event lev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &LISTEN_TAG};
        struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &WAKE_TAG};
        if (epoll_ctl(th->epfd, EPOLL_CTL_ADD, th->wakefd, &wev) < 0) {
            err = errno;
            break;
        }
        if (i == cfg->threads) {
            e->ctl = th;            /* (the control thread accepts nothing) */
            continue;
        }
        if (epoll_ctl(th->epfd, EPOLL_CTL_ADD, listen_fd, &lev) < 0) {
            err = errno;
            break;
        }
        th->listening = 1;
    }
    for (; !err && started < e->nthreads; started++)
        if ((err = pthread_create(&e->threads[started].th, NULL, thread_main,
                                  &e->threads[started])) != 0)
            break;
    if (err) {
        __atomic_store_n(&e->stop, 1, __ATOMIC_RELEASE);
        for (int i = 0; i < started; i++) {
            wake(&e->threads[i]);
            pthread_join(e->threads[i].th, NULL);
        }
        for (int i = 0; i < e->nthreads; i++)
            free_thread(&e->threads[i]);
        if (cfg->tls_ctx)
            tl_ctx_release(cfg->tls_ctx);
        close(e->evfd);
        pthread_mutex_destroy(&e->qm);
        free(e);
        errno = err;
        return NULL;
    }
    return e;
}
