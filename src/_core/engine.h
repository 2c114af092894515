/* The I/O engine (issue 30): epoll I/O threads that accept, read, split frames,
 * answer route queries from the route table (serve.c) and write, without Python;
 * every other frame goes to Python whole, through a bounded event queue, with its
 * connection's id, and Python's answers come back to the connection's thread.
 *
 * Each thread waits on the listening socket with EPOLLEXCLUSIVE; the one woken accepts
 * and hands each connection to the thread holding the fewest (itself on a tie), which
 * owns it to its close: an idle thread is the one woken, so connections that come one
 * at a time would otherwise all land on one thread. With a control thread
 * (re_config.control_thread), a connection moves to it when it first hands Python a
 * frame that is not a route query: brokers, whose registrations are megabytes to read, and admin clients,
 * whose 206s are megabytes to write, are then served apart from the clients that
 * only ask routes, whose answers no longer wait for a core behind that copying
 * (bench/README.md, "Connections that talk to Python on a thread of their own"). Its
 * id stays; what Python sends to it goes through the thread that accepted it until
 * nothing sent before the move waits there, then straight to the control thread, in
 * order either way. While one of its frames is with Python, the
 * connection is neither read nor split further (as the asyncio server does): queued
 * work is one batch of frames per connection, and the queue holds at most an open, a
 * batch and a close per connection. Reading also pauses once a connection's unsent
 * output reaches max_output, until it is down to resume_output. A bad frame length
 * closes the connection after the answers to the frames before it.
 *
 * The limits of an exposed server are kept here, where the bytes are: maxConnections
 * (closed at accept), idle connections closed (and closes a peer does not let
 * complete aborted after the same time), the unsent output of all connections
 * together bounded (past 3/4 of it, each thread aborts its connections holding the
 * most, those that stopped reading first, until the total is under 5/8: the budget
 * of rmq.namesrv.server._OutputBudget), and every close reaches Python with its
 * reason. */
#ifndef RMQ_ENGINE_H
#define RMQ_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "bufpool.h"
#include "routetable.h"
#include "scan.h"
#include "serve.h"

typedef struct rmq_engine rmq_engine;

typedef struct {
    int threads;                /* I/O threads, 1 to RE_MAX_THREADS (with the control
                                   thread: to RE_MAX_THREADS - 1) */
    int control_thread;         /* one more thread, for the connections that talk to
                                   Python (re_start) */
    size_t max_frame;           /* maxFrameLength: a frame with its prefix above it closes */
    size_t max_output;          /* a connection's unsent bytes at which its reading pauses */
    size_t resume_output;       /* ... and resumes (at most max_output) */
    int max_connections;        /* more are closed as soon as accepted */
    double idle_seconds;        /* close connections neither read nor written for
                                   this long, abort closes pending this long; 0: never */
    size_t max_total_output;    /* unsent bytes of all connections (see above); 0: none */
    int sndbuf, rcvbuf;         /* SO_SNDBUF / SO_RCVBUF of accepted sockets; 0: the OS's */
    size_t trace_bytes;         /* per thread: the trace ring (below); 0: no trace */
    void *tls_ctx;              /* an SSL_CTX (tls.h: tl_load first): a connection whose
                                   first byte opens a TLS handshake record is served over
                                   TLS; NULL: plain only */
    int tls_enforcing;          /* with tls_ctx: a plain connection is closed at its
                                   first byte (tls.server.mode=enforcing) */
} re_config;

enum { RE_MAX_THREADS = 256 };

/* Events for Python: a connection opened (data: its peer, "host:port"), one of its
 * frames (data: the frame, length prefix included, and the complete frames after it
 * that are not route queries, up to 64 frames or 1 MiB), or it closed (data: one byte,
 * the reason below; after RE_WHY_BAD_FRAME a byte that is 1 when nothing had come
 * before the bad frame, and the bad frame's first bytes, up to RE_BAD_BYTES), or its
 * unsent output is down to resume_output after a send that asked (re_send_owned's
 * notify: Python answers a big batch a turn at a time). */
enum { RE_OPEN = 1, RE_FRAME = 2, RE_CLOSED = 3, RE_DRAINED = 4 };

enum {
    RE_WHY_PEER = 0,            /* the peer closed, or a socket error */
    RE_WHY_BAD_FRAME = 1,       /* a length above max_frame (after the answers before it) */
    RE_WHY_IDLE = 2,            /* idle for idle_seconds */
    RE_WHY_OUTPUT_BUDGET = 3,   /* aborted by max_total_output */
    RE_WHY_NO_MEMORY = 4,
    RE_WHY_CLOSED = 5,          /* re_close, once its output was written */
    RE_WHY_UNSENT = 6,          /* a close whose output the peer did not take in time */
    RE_WHY_TLS = 7,             /* a TLS failure: its data's second byte is 1 when in the
                                   handshake, OpenSSL's reason follows */
    RE_WHY_TLS_REQUIRED = 8,    /* plain remoting on a port that is TLS only */
    RE_WHY_COUNT = 9,
    RE_BAD_BYTES = 16,
    RE_TLS_WHY_BYTES = 160,     /* of OpenSSL's reason, at most */
};

/* What the threads did, summed over them (each thread counts its own). */
typedef struct {
    uint64_t served, not_found;     /* route answers written (serve.c's rs_counts) */
    uint64_t bytes_in, bytes_out;
    uint64_t accepted, refused;     /* connections; refused: over max_connections */
    uint64_t closed[RE_WHY_COUNT];  /* connections closed, by reason */
    uint64_t queued_output;         /* unsent bytes of all connections now */
    uint64_t trace_dropped;         /* trace records dropped (the ring was full) */
} re_stats;

typedef struct re_event {
    struct re_event *next;
    int kind;
    uint64_t conn;
    size_t len;
    char *data;                     /* len bytes and a NUL: in bytes[], or in own */
    char *own;                      /* a big frame: its connection's input buffer, handed
                                       over with it rather than copied; else NULL */
    size_t own_cap;                 /* its size (it goes back to bufpool.h's pool) */
    rb_partial *partial;            /* the first frame a registration: its topic entries
                                       scanned as it arrived (scan.h), or NULL; freed
                                       with the event unless Python takes it */
    char bytes[];
} re_event;

/* Free what the engine scanned of a registration as it arrived (re_event.partial,
 * taken from its event by Python), or nothing (NULL). */
void re_free_partial(rb_partial *s);

/* Start the engine's threads on listen_fd (a listening socket; made non-blocking; the
 * caller keeps it and closes it after re_stop). Answers are in serialize type stype.
 * NULL on failure (errno set). */
rmq_engine *re_start(rt_table *t, int stype, int listen_fd, const re_config *cfg);

/* Its threads, the control thread included (re_trace_take's thread index). */
int re_thread_count(const rmq_engine *e);

/* Stop the threads, close every connection, free the engine and its queued events. */
void re_stop(rmq_engine *e);

/* The queued events, oldest first (a chain the caller frees with re_free_events),
 * waiting up to timeout seconds for one; NULL when none came or the engine stops. */
re_event *re_next(rmq_engine *e, double timeout);
/* An eventfd that is readable while events may be queued, for an event loop to wait
 * on (it then calls re_next with timeout 0, which resets it). Owned by the engine. */
int re_event_fd(const rmq_engine *e);
void re_free_events(re_event *ev);      /* a chain */
void re_free_event(re_event *ev);       /* one, taken out of its chain */

/* Queue output for a connection (Python's answer to its frame, or anything), and
 * with resume let it go on with its next frames. Unknown or closed connections are
 * ignored. 0, or -1 out of memory. */
int re_send(rmq_engine *e, uint64_t conn, const char *data, size_t len, int resume);

/* re_send of a malloc'd buffer the engine takes over (freed by it in every case):
 * a big answer is then written from it, not copied again. */
int re_send_owned(rmq_engine *e, uint64_t conn, char *data, size_t len, int resume,
                  int notify);

/* One part of an output for re_send_parts: len bytes at data, malloc'd or from the
 * buffer pool (bufpool.h) when shared is NULL; else within shared, one reference to
 * which the part holds. */
typedef struct {
    char *data;
    size_t len;
    rp_shared *shared;
} re_part;

/* re_send_owned of parts written one after the other, taken over (in every case:
 * buffers given back, references dropped once written): a shared part (a cached
 * answer's body) is written from where it is, whatever the number of connections
 * it goes to. */
int re_send_parts(rmq_engine *e, uint64_t conn, re_part *parts, size_t n, int resume,
                  int notify);

/* Close a connection after its queued output is sent. */
int re_close(rmq_engine *e, uint64_t conn);

/* A connection as its thread sees it (asked of the thread, which answers between
 * two epoll batches): for tests and debugging. found 0: no such connection. */
typedef struct {
    int found;
    size_t queued_output;           /* unsent bytes */
    size_t buffered_input;          /* read, not yet split */
    size_t output_buffers;          /* the buffers its unsent plaintext spans */
    int with_python, paused, closing;
    int tls;                        /* served over TLS */
    int thread;                     /* the index of the thread serving it */
} re_conn_state;

int re_conn_state_read(rmq_engine *e, uint64_t conn, re_conn_state *out);

/* With in_c 0, every route query goes to Python too (needWaitForService, a graceful
 * shutdown's GO_AWAY, route queries that ACL checks); 1 (the start): answered here. */
void re_route_queries(rmq_engine *e, int in_c);

/* Accept no more connections (the open ones are served on). */
void re_stop_accepting(rmq_engine *e);

/* Trace recording: each thread appends what it reads and writes to a ring of its own
 * (one writer, the thread; one reader, re_trace_take's caller: no lock), as records
 * of a re_trace_head and its bytes: RE_TRACE_IN / RE_TRACE_OUT carry whole frames
 * (those of one split, or of one answer batch), RE_TRACE_OPEN the peer ("host:port"),
 * RE_TRACE_CLOSE nothing. A record that does not fit is dropped and counted
 * (re_stats.trace_dropped): recording never makes a thread wait. */
enum { RE_TRACE_IN = 0, RE_TRACE_OUT = 1, RE_TRACE_OPEN = 2, RE_TRACE_CLOSE = 3 };

typedef struct {
    uint64_t time_ns;               /* CLOCK_REALTIME */
    uint64_t conn;
    uint32_t len;                   /* of the bytes after this head */
    uint32_t kind;
} re_trace_head;

/* Move whole records of thread `thread`'s ring to out (up to cap bytes; cap at least
 * cfg.trace_bytes takes them all); the bytes written. */
size_t re_trace_take(rmq_engine *e, int thread, uint8_t *out, size_t cap);

/* A time before which every record is in the rings (call it, then take them): a
 * record made later, or being made now, is at or after it. The threads' records
 * merge in time order so, whatever thread was preempted between stamping a record
 * and publishing it. */
uint64_t re_trace_watermark(rmq_engine *e);

/* The threads' counts, and the connections open now. */
void re_stats_read(rmq_engine *e, re_stats *out, int *connections);

#endif
