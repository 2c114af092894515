/* The I/O engine (issue 30, first cut): epoll I/O threads that accept, read, split
 * frames, answer route queries from the route table (serve.c) and write, without
 * Python; every other frame goes to Python whole, through a bounded event queue, with
 * its connection's id, and Python's answers come back to the connection's thread.
 *
 * A connection belongs to the thread that accepted it (each thread waits on the
 * listening socket with EPOLLEXCLUSIVE). While one of its frames is with Python, the
 * connection is neither read nor split further (as the asyncio server does): queued
 * work is one frame per connection, and the queue holds at most an open, a frame and
 * a close per connection. Reading also pauses while a connection's unsent output is
 * above max_output. A bad frame length closes the connection after the answers to the
 * frames before it. */
#ifndef RMQ_ENGINE_H
#define RMQ_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "routetable.h"
#include "serve.h"

typedef struct rmq_engine rmq_engine;

typedef struct {
    int threads;                /* I/O threads, 1 to RE_MAX_THREADS */
    size_t max_frame;           /* maxFrameLength: a frame with its prefix above it closes */
    size_t max_output;          /* a connection's unsent bytes at which its reading pauses */
    int max_connections;        /* more are closed as soon as accepted */
} re_config;

enum { RE_MAX_THREADS = 256 };

/* Events for Python: a connection opened (data: its peer, "host:port"), one of its
 * frames (data: the frame, length prefix included), or it closed. */
enum { RE_OPEN = 1, RE_FRAME = 2, RE_CLOSED = 3 };

typedef struct re_event {
    struct re_event *next;
    int kind;
    uint64_t conn;
    size_t len;
    char data[];
} re_event;

/* Start the engine's threads on listen_fd (a listening socket; made non-blocking; the
 * caller keeps it and closes it after re_stop). Answers are in serialize type stype.
 * NULL on failure (errno set). */
rmq_engine *re_start(rt_table *t, int stype, int listen_fd, const re_config *cfg);

/* Stop the threads, close every connection, free the engine and its queued events. */
void re_stop(rmq_engine *e);

/* The queued events, oldest first (a chain the caller frees with re_free_events),
 * waiting up to timeout seconds for one; NULL when none came or the engine stops. */
re_event *re_next(rmq_engine *e, double timeout);
void re_free_events(re_event *ev);

/* Queue output for a connection (Python's answer to its frame, or anything), and
 * with resume let it go on with its next frames. Unknown or closed connections are
 * ignored. 0, or -1 out of memory. */
int re_send(rmq_engine *e, uint64_t conn, const char *data, size_t len, int resume);

/* Close a connection after its queued output is sent. */
int re_close(rmq_engine *e, uint64_t conn);

/* Route answers the threads wrote (found and TOPIC_NOT_EXIST), and connections now. */
void re_counts(rmq_engine *e, rs_counts *out, int *connections);

#endif
