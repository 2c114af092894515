/* The limit server of the load benchmark (bench/load.py --limit): one epoll thread
 * that answers every frame with the same route, whatever it asks. No route table, no
 * lock, no parsing beyond the opaque: what the load generator and loopback TCP allow
 * on this machine, the ceiling rmq's figures are compared with. Its syscalls are the
 * fewest engine.c makes for the same work (one read and one write per lone query):
 * no read after a short one, epoll's interest set only when it changes. (Before
 * 2026-11-29's late evening it read until EAGAIN and set the interest after every
 * read: bench/README.md's figures before then are against that limit.)
 *
 *   limitsrv PORT BODYFILE [--short-slices]
 *
 * BODYFILE: the route body every answer carries. --short-slices: ask the scheduler
 * for the 100 us slices rmq's I/O threads ask for (engine.c, io_thread_setup), so
 * that under CPU contention the two wait for a core the same way (the floor of
 * bench/load.py --all-at-once --limit; W1's limit runs without).
 *
 * Prints "listening PORT" once ready; runs until killed. Requests in JSON headers
 * (bench/loadgen's); the answer is a JSON header as rmq writes it (code 0, flag 1,
 * the request's opaque) and the body. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { CHUNK = 64 * 1024 };

typedef struct {
    int fd;
    char *in;
    size_t in_len, in_cap;
    char *out;
    size_t out_off, out_len, out_cap;
    uint32_t interest;                  /* what epoll has for it */
} conn_t;

static char *body;
static size_t body_len;

static uint32_t be32(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;
    return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

static void put_be32(char *p, uint32_t v)
{
    p[0] = (char)(v >> 24);
    p[1] = (char)(v >> 16);
    p[2] = (char)(v >> 8);
    p[3] = (char)v;
}

static long opaque_of(const char *h, size_t n)
{
    static const char key[] = "\"opaque\":";
    const char *p = memmem(h, n, key, sizeof key - 1);
    return p ? strtol(p + sizeof key - 1, NULL, 10) : 0;
}

static void answer(conn_t *c, const char *frame, size_t len)
{
    size_t hlen = be32(frame + 4) & 0xFFFFFF;
    long opaque = hlen <= len - 8 ? opaque_of(frame + 8, hlen) : 0;
    char header[160];
    int n = snprintf(header, sizeof header,
                     "{\"code\":0,\"flag\":1,\"language\":\"JAVA\",\"opaque\":%ld,"
                     "\"serializeTypeCurrentRPC\":\"JSON\",\"version\":413}", opaque);
    size_t total = 8 + (size_t)n + body_len;
    if (c->out_cap - c->out_len < total) {
        if (c->out_off) {
            memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
            c->out_len -= c->out_off;
            c->out_off = 0;
        }
        while (c->out_cap - c->out_len < total) {
            c->out_cap = c->out_cap ? 2 * c->out_cap : CHUNK;
            c->out = realloc(c->out, c->out_cap);
            if (!c->out)
                abort();
        }
    }
    char *o = c->out + c->out_len;
    put_be32(o, (uint32_t)(total - 4));
    put_be32(o + 4, (uint32_t)n);
    memcpy(o + 8, header, (size_t)n);
    memcpy(o + 8 + n, body, body_len);
    c->out_len += total;
}

static int serve(int ep, conn_t *c)
{
    for (;;) {
        if (c->in_cap - c->in_len < CHUNK) {
            c->in_cap = c->in_cap ? 2 * c->in_cap : 4 * CHUNK;
            c->in = realloc(c->in, c->in_cap);
            if (!c->in)
                abort();
        }
        size_t asked = c->in_cap - c->in_len;
        ssize_t r = recv(c->fd, c->in + c->in_len, asked, 0);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            return -1;
        if (r < 0)
            break;
        c->in_len += (size_t)r;
        size_t off = 0;
        while (c->in_len - off >= 4) {
            size_t len = 4 + be32(c->in + off);
            if (c->in_len - off < len)
                break;
            answer(c, c->in + off, len);
            off += len;
        }
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
        /* a short read emptied the socket: epoll (level-triggered) reports what comes
         * next, so no read only to hear EAGAIN (as engine.c's conn_read) */
        if ((size_t)r < asked)
            break;
    }
    while (c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w < 0 && errno == EAGAIN)
            break;
        if (w <= 0)
            return -1;
        c->out_off += (size_t)w;
    }
    if (c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    uint32_t want = EPOLLIN | (c->out_len ? EPOLLOUT : 0);
    if (want != c->interest) {          /* (as engine.c's set_interest) */
        struct epoll_event ev = {.events = want, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
        c->interest = want;
    }
    return 0;
}

/* As engine.c's io_thread_setup: EEVDF's slice request (Linux 6.12 on). */
static void ask_short_slices(void)
{
#ifdef SYS_sched_setattr
    struct {
        uint32_t size, policy;
        uint64_t flags;
        int32_t nice;
        uint32_t priority;
        uint64_t runtime, deadline, period;
    } a = {0};
    if (syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) == 0 && a.policy == 0) {
        a.size = sizeof a;
        a.flags = 0;
        a.runtime = 100 * 1000;
        if (syscall(SYS_sched_setattr, 0, &a, 0) != 0)
            perror("sched_setattr");
    }
#endif
}

int main(int argc, char **argv)
{
    if (argc != 3 && !(argc == 4 && strcmp(argv[3], "--short-slices") == 0)) {
        fprintf(stderr, "usage: limitsrv PORT BODYFILE [--short-slices]\n");
        return 2;
    }
    if (argc == 4)
        ask_short_slices();
    FILE *f = fopen(argv[2], "rb");
    if (!f || fseek(f, 0, SEEK_END) < 0)
        return perror(argv[2]), 1;
    body_len = (size_t)ftell(f);
    rewind(f);
    body = malloc(body_len + 1);
    if (!body || fread(body, 1, body_len, f) != body_len)
        return perror(argv[2]), 1;
    fclose(f);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1])),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(ls, 4096) < 0)
        return perror("listen"), 1;
    int ep = epoll_create1(0);
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &lev);
    printf("listening %s\n", argv[1]);
    fflush(stdout);
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        for (int i = 0; i < n; i++) {
            conn_t *c = evs[i].data.ptr;
            if (!c) {
                int fd;
                while ((fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    conn_t *nc = calloc(1, sizeof *nc);
                    nc->fd = fd;
                    nc->interest = EPOLLIN;
                    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = nc};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
                }
                continue;
            }
            if (serve(ep, c) < 0) {
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                free(c->in);
                free(c->out);
                free(c);
            }
        }
    }
}
