/* The I/O engine (engine.h): epoll threads serving route queries without Python. */
#define _GNU_SOURCE
#include "engine.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "wire.h"

enum {
    READ_CHUNK = 64 * 1024,         /* room made before each read */
    CONN_BUCKETS = 4096,            /* per thread: connection id -> connection */
};

typedef struct re_conn {
    struct re_conn *next;           /* hash chain */
    uint64_t id;
    int fd;
    uint8_t *in;                    /* read, not yet split: in[in_off..in_len) */
    size_t in_off, in_len, in_cap;
    char *out;                      /* not yet written: out[out_off..out_len) */
    size_t out_off, out_len, out_cap;
    int with_python;                /* one of its frames is with Python */
    int closing;                    /* close once out is written */
    uint32_t interest;              /* the epoll events asked for now */
} re_conn;

typedef struct re_cmd {             /* from Python to a connection's thread */
    struct re_cmd *next;
    uint64_t conn;
    int resume, close;
    size_t len;
    char data[];
} re_cmd;

typedef struct {
    rmq_engine *e;
    int index;
    pthread_t th;
    int epfd, wakefd;
    pthread_mutex_t m;              /* guards cmds */
    re_cmd *cmds, *cmds_tail;
    re_conn *conns[CONN_BUCKETS];
    uint64_t next_seq;
    rs_counts counts;               /* read by re_counts: relaxed atomics */
} re_thread;

struct rmq_engine {
    rt_table *t;
    int stype;
    int listen_fd;
    re_config cfg;
    int stop;                       /* atomic */
    int connections;                /* atomic */
    pthread_mutex_t qm;             /* guards the event queue */
    pthread_cond_t qc;
    re_event *head, *tail;
    int nthreads;
    re_thread threads[];
};

/* epoll data tags of the listening socket and of a thread's wake-up eventfd */
static char LISTEN_TAG, WAKE_TAG;

/* ---------------------------------------------------------------- events for Python */

static int push_event(rmq_engine *e, int kind, uint64_t conn, const void *data, size_t len)
{
    re_event *ev = malloc(sizeof *ev + len + 1);
    if (!ev)
        return -1;
    ev->next = NULL;
    ev->kind = kind;
    ev->conn = conn;
    ev->len = len;
    if (len)
        memcpy(ev->data, data, len);
    ev->data[len] = 0;
    pthread_mutex_lock(&e->qm);
    if (e->tail)
        e->tail->next = ev;
    else
        e->head = ev;
    e->tail = ev;
    pthread_cond_signal(&e->qc);
    pthread_mutex_unlock(&e->qm);
    return 0;
}

re_event *re_next(rmq_engine *e, double timeout)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    long long ns = (long long)(timeout * 1e9) + until.tv_nsec;
    until.tv_sec += (time_t)(ns / 1000000000LL);
    until.tv_nsec = (long)(ns % 1000000000LL);
    pthread_mutex_lock(&e->qm);
    while (!e->head && !__atomic_load_n(&e->stop, __ATOMIC_ACQUIRE))
        if (pthread_cond_timedwait(&e->qc, &e->qm, &until) == ETIMEDOUT)
            break;
    re_event *chain = e->head;
    e->head = e->tail = NULL;
    pthread_mutex_unlock(&e->qm);
    return chain;
}

void re_free_events(re_event *ev)
{
    while (ev) {
        re_event *next = ev->next;
        free(ev);
        ev = next;
    }
}

/* ---------------------------------------------------------------- connections */

static re_conn *find_conn(re_thread *th, uint64_t id)
{
    re_conn *c = th->conns[(id >> 8) % CONN_BUCKETS];
    while (c && c->id != id)
        c = c->next;
    return c;
}

static void conn_close(re_thread *th, re_conn *c, int tell)
{
    re_conn **pp = &th->conns[(c->id >> 8) % CONN_BUCKETS];
    while (*pp != c)
        pp = &(*pp)->next;
    *pp = c->next;
    epoll_ctl(th->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    __atomic_fetch_sub(&th->e->connections, 1, __ATOMIC_RELAXED);
    if (tell)
        push_event(th->e, RE_CLOSED, c->id, NULL, 0);
    free(c->in);
    free(c->out);
    free(c);
}

static size_t pending(const re_conn *c) { return c->out_len - c->out_off; }

static int reading(const rmq_engine *e, const re_conn *c)
{
    return !c->with_python && !c->closing && pending(c) < e->cfg.max_output;
}

static void set_interest(re_thread *th, re_conn *c)
{
    uint32_t want = (reading(th->e, c) ? EPOLLIN : 0) | (pending(c) ? EPOLLOUT : 0);
    if (want != c->interest) {
        struct epoll_event ev = {.events = want, .data.ptr = c};
        epoll_ctl(th->epfd, EPOLL_CTL_MOD, c->fd, &ev);
        c->interest = want;
    }
}

/* Room for `more` bytes after out_len: the written bytes dropped, then the buffer
 * grown, only when the tail lacks it. */
static int out_room(re_conn *c, size_t more)
{
    if (c->out_cap - c->out_len >= more)
        return 0;                   /* the common case: no bytes moved per split */
    if (c->out_off) {
        memmove(c->out, c->out + c->out_off, pending(c));
        c->out_len -= c->out_off;
        c->out_off = 0;
        if (c->out_cap - c->out_len >= more)
            return 0;
    }
    size_t cap = c->out_cap ? c->out_cap : READ_CHUNK;
    while (cap - c->out_len < more)
        cap *= 2;
    char *out = realloc(c->out, cap);
    if (!out)
        return -1;
    c->out = out;
    c->out_cap = cap;
    return 0;
}

/* Split what was read: route queries answered here, the first other frame to
 * Python (then nothing more until its answer), a bad length closes after the
 * answers before it. -1: out of memory (the caller closes). */
static int split(re_thread *th, re_conn *c)
{
    rmq_engine *e = th->e;
    while (!c->with_python && !c->closing && pending(c) < e->cfg.max_output) {
        const uint8_t *p = c->in + c->in_off;
        size_t n = c->in_len - c->in_off, need = 0;
        int64_t length = rmq_frame_at(p, n, e->cfg.max_frame);
        if (length == RMQ_FRAME_BAD_LENGTH) {
            c->closing = 1;
            break;
        }
        if (length == RMQ_FRAME_INCOMPLETE)
            break;
        if (out_room(c, READ_CHUNK) < 0)
            return -1;
        size_t used = rs_serve_routes(e->t, e->stype, p, n, e->cfg.max_frame, c->out,
                                      c->out_cap, &c->out_len, e->cfg.max_output, &need,
                                      &th->counts);
        c->in_off += used;
        if (need) {
            if (out_room(c, need) < 0)
                return -1;
            continue;
        }
        if (used || pending(c) >= e->cfg.max_output)
            continue;
        /* not a route query rs_serve_routes answers: Python's */
        if (push_event(e, RE_FRAME, c->id, p, 4 + (size_t)length) < 0)
            return -1;
        c->in_off += 4 + (size_t)length;
        c->with_python = 1;
    }
    if (c->in_off == c->in_len)
        c->in_off = c->in_len = 0;
    return 0;
}

/* Write what is pending. -1: the connection is gone (closed here). */
static int flush(re_thread *th, re_conn *c)
{
    while (pending(c)) {
        ssize_t w = send(c->fd, c->out + c->out_off, pending(c), MSG_NOSIGNAL);
        if (w > 0) {
            c->out_off += (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else {
            conn_close(th, c, 1);
            return -1;
        }
    }
    if (!pending(c)) {
        c->out_off = c->out_len = 0;
        if (c->closing) {
            conn_close(th, c, 1);
            return -1;
        }
    }
    return 0;
}

/* Read while the connection may be read. -1: gone. */
static int conn_read(re_thread *th, re_conn *c)
{
    rmq_engine *e = th->e;
    while (reading(e, c)) {
        if (c->in_cap - c->in_len < READ_CHUNK) {
            if (c->in_off) {
                memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
                c->in_len -= c->in_off;
                c->in_off = 0;
            }
            if (c->in_cap - c->in_len < READ_CHUNK) {
                /* doubling: a registration's frame (up to maxFrameLength, checked as
                 * soon as its length is in) is read in a few reallocations */
                size_t cap = c->in_len + READ_CHUNK > 2 * c->in_cap ? c->in_len + READ_CHUNK
                                                                     : 2 * c->in_cap;
                uint8_t *in = realloc(c->in, cap);
                if (!in) {
                    conn_close(th, c, 1);
                    return -1;
                }
                c->in = in;
                c->in_cap = cap;
            }
        }
        ssize_t r = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (r > 0) {
            c->in_len += (size_t)r;
            if (split(th, c) < 0) {
                conn_close(th, c, 1);
                return -1;
            }
            if (pending(c) && flush(th, c) < 0)
                return -1;
        } else if (r < 0 && errno == EINTR) {
            continue;
        } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else {                    /* the peer closed, or an error */
            conn_close(th, c, 1);
            return -1;
        }
    }
    if (flush(th, c) < 0)
        return -1;
    set_interest(th, c);
    return 0;
}

static void accept_all(re_thread *th)
{
    rmq_engine *e = th->e;
    for (;;) {
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
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        re_conn *c = calloc(1, sizeof *c);
        if (!c) {
            __atomic_fetch_sub(&e->connections, 1, __ATOMIC_RELAXED);
            close(fd);
            continue;
        }
        c->fd = fd;
        c->id = (++th->next_seq << 8) | (uint64_t)th->index;
        c->interest = EPOLLIN;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(th->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            __atomic_fetch_sub(&e->connections, 1, __ATOMIC_RELAXED);
            close(fd);
            free(c);
            continue;
        }
        size_t b = (c->id >> 8) % CONN_BUCKETS;
        c->next = th->conns[b];
        th->conns[b] = c;
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
        push_event(e, RE_OPEN, c->id, peer, strlen(peer));
    }
}

/* Python's answers and closes for this thread's connections. */
static void run_cmds(re_thread *th)
{
    uint64_t n;
    ssize_t r = read(th->wakefd, &n, sizeof n);
    (void)r;
    pthread_mutex_lock(&th->m);
    re_cmd *cmd = th->cmds;
    th->cmds = th->cmds_tail = NULL;
    pthread_mutex_unlock(&th->m);
    while (cmd) {
        re_cmd *next = cmd->next;
        re_conn *c = find_conn(th, cmd->conn);
        if (c) {
            int gone = 0;
            if (cmd->len) {
                if (out_room(c, cmd->len) < 0) {
                    conn_close(th, c, 1);
                    gone = 1;
                } else {
                    memcpy(c->out + c->out_len, cmd->data, cmd->len);
                    c->out_len += cmd->len;
                }
            }
            if (!gone) {
                if (cmd->close)
                    c->closing = 1;
                if (cmd->resume && c->with_python) {
                    c->with_python = 0;
                    if (split(th, c) < 0) {
                        conn_close(th, c, 1);
                        gone = 1;
                    }
                }
            }
            if (!gone && flush(th, c) == 0)
                conn_read(th, c);   /* what came meanwhile, then epoll's interest */
        }
        free(cmd);
        cmd = next;
    }
}

static void *thread_main(void *arg)
{
    re_thread *th = arg;
    rmq_engine *e = th->e;
    struct epoll_event evs[64];
    while (!__atomic_load_n(&e->stop, __ATOMIC_ACQUIRE)) {
        int n = epoll_wait(th->epfd, evs, 64, 1000);
        for (int i = 0; i < n; i++) {
            void *tag = evs[i].data.ptr;
            if (tag == &LISTEN_TAG) {
                accept_all(th);
            } else if (tag == &WAKE_TAG) {
                run_cmds(th);
            } else {
                re_conn *c = tag;
                if (evs[i].events & (EPOLLERR | EPOLLHUP)) {
                    conn_close(th, c, 1);
                    continue;
                }
                if ((evs[i].events & EPOLLOUT) && flush(th, c) < 0)
                    continue;
                conn_read(th, c);
            }
        }
    }
    return NULL;
}

/* ---------------------------------------------------------------- start and stop */

static void wake(re_thread *th)
{
    uint64_t one = 1;
    ssize_t w = write(th->wakefd, &one, sizeof one);
    (void)w;                        /* full counter: the thread is awake anyway */
}

/* Hand a command to the thread that owns its connection. */
static void post(re_thread *th, re_cmd *cmd)
{
    pthread_mutex_lock(&th->m);
    if (th->cmds_tail)
        th->cmds_tail->next = cmd;
    else
        th->cmds = cmd;
    th->cmds_tail = cmd;
    pthread_mutex_unlock(&th->m);
    wake(th);
}

int re_send(rmq_engine *e, uint64_t conn, const char *data, size_t len, int resume)
{
    int index = (int)(conn & 0xFF);
    if (index >= e->nthreads)
        return 0;
    re_thread *th = &e->threads[index];
    re_cmd *cmd = malloc(sizeof *cmd + len);
    if (!cmd)
        return -1;
    *cmd = (re_cmd){NULL, conn, resume, 0, len};
    if (len)
        memcpy(cmd->data, data, len);
    post(th, cmd);
    return 0;
}

int re_close(rmq_engine *e, uint64_t conn)
{
    int index = (int)(conn & 0xFF);
    if (index >= e->nthreads)
        return 0;
    re_thread *th = &e->threads[index];
    re_cmd *cmd = malloc(sizeof *cmd);
    if (!cmd)
        return -1;
    *cmd = (re_cmd){NULL, conn, 0, 1, 0};
    post(th, cmd);
    return 0;
}

void re_counts(rmq_engine *e, rs_counts *out, int *connections)
{
    *out = (rs_counts){0, 0};
    for (int i = 0; i < e->nthreads; i++) {
        out->served += __atomic_load_n(&e->threads[i].counts.served, __ATOMIC_RELAXED);
        out->not_found += __atomic_load_n(&e->threads[i].counts.not_found, __ATOMIC_RELAXED);
    }
    *connections = __atomic_load_n(&e->connections, __ATOMIC_RELAXED);
}

static void free_thread(re_thread *th)
{
    for (int b = 0; b < CONN_BUCKETS; b++)
        while (th->conns[b])
            conn_close(th, th->conns[b], 0);
    re_cmd *cmd = th->cmds;
    while (cmd) {
        re_cmd *next = cmd->next;
        free(cmd);
        cmd = next;
    }
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
    pthread_mutex_lock(&e->qm);
    pthread_cond_broadcast(&e->qc);
    pthread_mutex_unlock(&e->qm);
    for (int i = 0; i < e->nthreads; i++)
        pthread_join(e->threads[i].th, NULL);
    for (int i = 0; i < e->nthreads; i++)
        free_thread(&e->threads[i]);
    re_free_events(e->head);
    pthread_cond_destroy(&e->qc);
    pthread_mutex_destroy(&e->qm);
    free(e);
}

rmq_engine *re_start(rt_table *t, int stype, int listen_fd, const re_config *cfg)
{
    if (cfg->threads < 1 || cfg->threads > RE_MAX_THREADS || cfg->max_frame < 8) {
        errno = EINVAL;
        return NULL;
    }
    rmq_engine *e = calloc(1, sizeof *e + (size_t)cfg->threads * sizeof(re_thread));
    if (!e)
        return NULL;
    e->t = t;
    e->stype = stype;
    e->listen_fd = listen_fd;
    e->cfg = *cfg;
    pthread_mutex_init(&e->qm, NULL);
    pthread_cond_init(&e->qc, NULL);
    fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK);
    int started = 0, err = 0;
    for (int i = 0; i < cfg->threads; i++) {
        re_thread *th = &e->threads[i];
        th->e = e;
        th->index = i;
        pthread_mutex_init(&th->m, NULL);
        th->epfd = epoll_create1(EPOLL_CLOEXEC);
        th->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        e->nthreads = i + 1;
        if (th->epfd < 0 || th->wakefd < 0) {
            err = errno;
            break;
        }
        struct epoll_event lev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &LISTEN_TAG};
        struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &WAKE_TAG};
        if (epoll_ctl(th->epfd, EPOLL_CTL_ADD, listen_fd, &lev) < 0 ||
            epoll_ctl(th->epfd, EPOLL_CTL_ADD, th->wakefd, &wev) < 0) {
            err = errno;
            break;
        }
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
        pthread_cond_destroy(&e->qc);
        pthread_mutex_destroy(&e->qm);
        free(e);
        errno = err;
        return NULL;
    }
    return e;
}
