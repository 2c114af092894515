/*
 * loadgen: a small epoll load generator for a RocketMQ NameServer.
 *
 * One thread, non-blocking sockets, level-triggered epoll. Sends
 * GET_ROUTEINFO_BY_TOPIC (code 105) with the JSON header exactly as a Java
 * 4.9.8 client writes it:
 *   {"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA",
 *    "opaque":N,"serializeTypeCurrentRPC":"JSON","version":409}
 * over C connections, keeping up to N requests in flight on each (closed loop),
 * or at a fixed total rate (open loop, --rate: latency counted from the time a
 * request was due, so a stalled server is not hidden by the generator waiting).
 * Topics are taken round-robin, in order, from PREFIX + zero-padded index.
 *
 * Per-topic header heads are encoded once; each request only writes the opaque
 * digits and the fixed tail. Answers are split on the 4-byte length prefix and
 * matched by opaque; an answer counts as an error unless its flag has the
 * response bit and its code is 0.
 *
 * --samples FILE writes every measured answer as a 32-byte little-endian record
 * (int64 CLOCK_REALTIME ns of the send or due time, uint32 latency ns and uint32
 * send lag ns (open loop: send - due), both saturated, int32 response code, int32
 * opaque, uint32 the connection's local port, uint32 0), so that a caller can cut out
 * the window of a server-side event from the server's log timestamps, tell the
 * generator's own lateness from the server's, and find each request in the server's
 * trace (by its peer's port and opaque: bench/trace_latency.py --samples).
 *
 * Prints one JSON line on stdout (latencies in microseconds). Exit status: 0,
 * 1 when some requests failed or went unanswered, 2 on usage or connect errors.
 *
 * --tls: every connection with TLS (OpenSSL; the server's certificate is not
 * verified: this measures the cost of the encryption, not a trust setup). Built
 * in only with -DLOADGEN_TLS, so that the plain build needs no OpenSSL headers;
 * bytes_in / bytes_out then count plaintext.
 *
 * Build: cc -O2 -o bench/loadgen bench/loadgen.c
 *   with --tls: cc -O2 -DLOADGEN_TLS -o bench/loadgen-tls bench/loadgen.c -lssl -lcrypto
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>
#ifdef LOADGEN_TLS
#include <limits.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
static SSL_CTX *tls_ctx;
#endif

/* ------------------------------------------------------------------ clock */

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------ histogram
 * Log-linear buckets over nanoseconds: values below 256 exactly, then 128
 * linear sub-buckets per power of two (relative error < 0.8%). */

#define SUB_BITS 7
#define SUB (1u << SUB_BITS)
#define NBUCKETS ((64 - SUB_BITS) * SUB + SUB)

typedef struct {
    uint64_t counts[NBUCKETS];
    uint64_t n, min, max;
    double sum;
    uint64_t over_1ms, over_10ms, over_100ms;
} hist_t;

static inline unsigned bucket_of(uint64_t v) {
    if (v < 2 * SUB) return (unsigned)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v);
    unsigned shift = msb - SUB_BITS;
    return (shift + 1) * SUB + (unsigned)((v >> shift) - SUB);
}

static inline void bucket_range(unsigned idx, uint64_t *lo, uint64_t *hi) {
    if (idx < 2 * SUB) { *lo = *hi = idx; return; }
    unsigned shift = idx / SUB - 1;
    uint64_t mant = idx % SUB + SUB;
    *lo = mant << shift;
    *hi = ((mant + 1) << shift) - 1;
}

static void hist_record(hist_t *h, uint64_t v) {
    h->counts[bucket_of(v)]++;
    if (h->n == 0 || v < h->min) h->min = v;
    if (v > h->max) h->max = v;
    h->n++;
    h->sum += (double)v;
    if (v > 1000000ull) h->over_1ms++;
    if (v > 10000000ull) h->over_10ms++;
    if (v > 100000000ull) h->over_100ms++;
}

/* The value at percentile p (0..100): the middle of the bucket holding the
 * ceil(p% * n)-th smallest value, clamped to [min, max]. */
static double hist_pct(const hist_t *h, double p) {
    if (h->n == 0) return 0.0;
    double want = p / 100.0 * (double)h->n;
    uint64_t rank = (uint64_t)want;
    if ((double)rank < want) rank++;                /* ceil without libm */
    if (rank < 1) rank = 1;
    if (rank > h->n) rank = h->n;
    uint64_t seen = 0;
    for (unsigned i = 0; i < NBUCKETS; i++) {
        seen += h->counts[i];
        if (seen >= rank) {
            uint64_t lo, hi;
            bucket_range(i, &lo, &hi);
            double v = ((double)lo + (double)hi) / 2.0;
            if (v < (double)h->min) v = (double)h->min;
            if (v > (double)h->max) v = (double)h->max;
            return v;
        }
    }
    return (double)h->max;
}

/* ------------------------------------------------------------------ options */

static const char *opt_host = "127.0.0.1";
static int opt_port = 9876;
static int opt_conns = 4;
static int opt_inflight = 16;
static double opt_duration = 10.0;
static double opt_warmup = 1.0;
static double opt_drain = 5.0;
static double opt_connect_timeout = 5.0;
static uint64_t opt_requests = 0;      /* measured requests to send; 0 = duration only */
static double opt_rate = 0.0;          /* total requests/s; 0 = closed loop */
static const char *opt_prefix = "T-";
static int opt_width = 5;
static long opt_topics = 10000;
static long opt_topic_start = 0;
static int opt_version = 409;
static const char *opt_language = "JAVA";
static const char *opt_label = "";
static const char *opt_zone = NULL;     /* --zone: zone-mode queries for this zone */
static const char *opt_samples = NULL;  /* file of per-answer records; NULL: none */
static int opt_tls = 0;                 /* --tls (a -DLOADGEN_TLS build only) */

/* ------------------------------------------------------------------ request encoding */

static char *heads;          /* all per-topic header heads, back to back */
static size_t *head_off;     /* topic i: heads + head_off[i], head_len[i] bytes */
static uint32_t *head_len;
static char tail[128];
static size_t tail_len;
static size_t max_frame_len; /* upper bound of one request frame */

static void json_escape_append(char **p, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { *(*p)++ = '\\'; *(*p)++ = (char)c; }
        else if (c < 0x20) { *p += sprintf(*p, "\\u%04x", c); }
        else *(*p)++ = (char)c;
    }
}

static void encode_topics(void) {
    size_t plen = strlen(opt_prefix);
    size_t zlen = opt_zone ? strlen(opt_zone) : 0;
    size_t per = 64 + 6 * plen + 32 + (opt_zone ? 48 + 6 * zlen : 0);
    heads = malloc(per * (size_t)opt_topics);
    head_off = malloc(sizeof(size_t) * (size_t)opt_topics);
    head_len = malloc(sizeof(uint32_t) * (size_t)opt_topics);
    if (!heads || !head_off || !head_len) { perror("malloc"); exit(2); }
    char *p = heads;
    char name[512];
    size_t longest = 0;
    for (long i = 0; i < opt_topics; i++) {
        snprintf(name, sizeof name, "%s%0*ld", opt_prefix, opt_width, opt_topic_start + i);
        char *start = p;
        p += sprintf(p, "{\"code\":105,\"extFields\":{\"topic\":\"");
        json_escape_append(&p, name);
        if (opt_zone) {     /* as a 5.x client with -Drocketmq.zone.mode=true */
            p += sprintf(p, "\",\"__ZONE_MODE\":\"true\",\"__ZONE_NAME\":\"");
            json_escape_append(&p, opt_zone);
        }
        p += sprintf(p, "\"},\"flag\":0,\"language\":\"%s\",\"opaque\":", opt_language);
        head_off[i] = (size_t)(start - heads);
        head_len[i] = (uint32_t)(p - start);
        if (head_len[i] > longest) longest = head_len[i];
    }
    tail_len = (size_t)snprintf(tail, sizeof tail,
                                ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":%d}", opt_version);
    max_frame_len = 8 + longest + 11 + tail_len;
}

static inline void put_be32(char *p, uint32_t v) {
    p[0] = (char)(v >> 24); p[1] = (char)(v >> 16); p[2] = (char)(v >> 8); p[3] = (char)v;
}

static inline uint32_t get_be32(const char *p) {
    const unsigned char *u = (const unsigned char *)p;
    return ((uint32_t)u[0] << 24) | ((uint32_t)u[1] << 16) | ((uint32_t)u[2] << 8) | u[3];
}

/* Writes one frame at out; returns its length. */
static inline size_t encode_request(char *out, long topic, int32_t opaque) {
    char *h = out + 8;
    uint32_t hl = head_len[topic];
    memcpy(h, heads + head_off[topic], hl);
    char digits[16];
    int nd = 0;
    uint32_t u = opaque < 0 ? (uint32_t)(-(int64_t)opaque) : (uint32_t)opaque;
    do { digits[nd++] = (char)('0' + u % 10); u /= 10; } while (u);
    char *q = h + hl;
    if (opaque < 0) *q++ = '-';
    while (nd) *q++ = digits[--nd];
    memcpy(q, tail, tail_len);
    q += tail_len;
    uint32_t header_len = (uint32_t)(q - h);
    put_be32(out, 4 + header_len);
    put_be32(out + 4, header_len);      /* serialize type 0: JSON */
    return 8 + header_len;
}

/* ------------------------------------------------------------------ response parsing */

/* The integer after "key": in a JSON header (first occurrence). */
static int json_int(const char *h, size_t n, const char *key, int64_t *out) {
    size_t kl = strlen(key);
    const char *p = memmem(h, n, key, kl);
    if (!p) return 0;
    p += kl;
    const char *end = h + n;
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    if (p < end && *p == ':') p++;
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    int neg = 0;
    if (p < end && *p == '-') { neg = 1; p++; }
    if (p >= end || *p < '0' || *p > '9') return 0;
    int64_t v = 0;
    while (p < end && *p >= '0' && *p <= '9') { v = v * 10 + (*p - '0'); p++; }
    *out = neg ? -v : v;
    return 1;
}

/* ------------------------------------------------------------------ connections */

enum { C_OPEN, C_DEAD };

typedef struct {
    int32_t opaque;
    int used;
    int measured;
    uint64_t t;              /* when sent (closed loop) or due (open loop) */
    uint64_t lag;            /* open loop: when sent - when due */
} slot_t;

typedef struct {
    int fd, id, state;
    uint16_t port;           /* its local port (the server's trace names its peer by it) */
    char *rbuf; size_t rcap, rlen;
    char *wbuf; size_t wcap, wlen, woff;
    int want_out;
    int inflight;
    int32_t next_opaque;
    slot_t *slots; uint32_t mask;
    uint64_t rx_ns;          /* open loop, plain: when the kernel took in the last
                                segment of the latest recv (SO_TIMESTAMPNS), 0 if none */
#ifdef LOADGEN_TLS
    SSL *ssl;                /* --tls: the connection's TLS session */
#endif
} conn_t;

static conn_t *conns;
static int epfd = -1;
static volatile sig_atomic_t stop_flag = 0;

/* counters */
static uint64_t sent_total, done_total, measured_sent, measured_done, errors, unmatched;
static uint64_t lost, conn_errors, protocol_errors, bytes_in, bytes_out, unsent_due;
static hist_t hist;
static hist_t lag_hist;      /* open loop: send time - due time */
static hist_t sent_hist;     /* open loop: answer time - send time (the generator's own
                                lateness in sending left out; not in reading) */
static hist_t arrived_hist;  /* open loop, plain: the kernel's receive time of the answer
                                - send time (its lateness in reading left out too) */
#define MAX_CODES 8
static int64_t err_code[MAX_CODES];
static uint64_t err_count[MAX_CODES];
static int n_err_codes;
static uint64_t not_response;
/* every answer, warmup included: a route query answered with a non-zero code
 * before the measured window is a failure too */
static uint64_t answers_all, errors_all;

typedef struct {
    int64_t t_real_ns; uint32_t lat_ns, lag_ns; int32_t code, opaque; uint32_t port, pad;
} sample_t;
_Static_assert(sizeof(sample_t) == 32, "the --samples record is 32 bytes");
static sample_t *samples;
static size_t n_samples, cap_samples;
static int64_t real_minus_mono;      /* CLOCK_REALTIME - CLOCK_MONOTONIC at start, ns */

static void note_sample(uint64_t t, uint64_t lat, uint64_t lag, int64_t code, int32_t opaque,
                        uint16_t port) {
    if (n_samples == cap_samples) {
        size_t cap = cap_samples ? cap_samples * 2 : 65536;
        sample_t *ns = realloc(samples, cap * sizeof *ns);
        if (!ns) { perror("realloc"); exit(2); }
        samples = ns;
        cap_samples = cap;
    }
    sample_t *x = &samples[n_samples++];
    x->t_real_ns = (int64_t)t + real_minus_mono;
    x->lat_ns = lat > UINT32_MAX ? UINT32_MAX : (uint32_t)lat;
    x->lag_ns = lag > UINT32_MAX ? UINT32_MAX : (uint32_t)lag;
    x->code = (int32_t)code;
    x->opaque = opaque;
    x->port = port;
    x->pad = 0;
}

static long topic_rr = 0;
static uint64_t t_measure, t_end;

static void on_signal(int sig) { (void)sig; stop_flag = 1; }

static void note_error_code(int64_t code) {
    for (int i = 0; i < n_err_codes; i++)
        if (err_code[i] == code) { err_count[i]++; return; }
    if (n_err_codes < MAX_CODES) { err_code[n_err_codes] = code; err_count[n_err_codes++] = 1; }
}

static void set_out_interest(conn_t *c, int want) {
    if (c->state != C_OPEN || c->want_out == want) return;
    struct epoll_event ev = {0};
    ev.events = EPOLLIN | (want ? EPOLLOUT : 0);
    ev.data.u32 = (uint32_t)c->id;
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0) c->want_out = want;
}

static void conn_fail(conn_t *c, const char *what, int err) {
    if (c->state == C_DEAD) return;
    fprintf(stderr, "loadgen: connection %d: %s%s%s\n", c->id, what,
            err ? ": " : "", err ? strerror(err) : "");
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    c->state = C_DEAD;
    conn_errors++;
    lost += (uint64_t)c->inflight;
    c->inflight = 0;
}

/* ------------------------------------------------------------------ TLS
 * conn_send / conn_recv: send() / recv() on the socket, or through the
 * connection's TLS session: the same contract (-1 with errno EAGAIN when it
 * would block, 0 from recv at the end of the stream). */

#ifdef LOADGEN_TLS
static ssize_t tls_result(conn_t *c, int r) {
    int e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) { errno = EAGAIN; return -1; }
    if (e == SSL_ERROR_ZERO_RETURN) return 0;
    if (e == SSL_ERROR_SYSCALL && errno) return -1;
    char why[256];
    ERR_error_string_n(ERR_get_error(), why, sizeof why);
    fprintf(stderr, "loadgen: connection %d: TLS: %s\n", c->id, why);
    errno = EPROTO;
    return -1;
}
#endif

static inline ssize_t conn_send(conn_t *c, const char *p, size_t n) {
#ifdef LOADGEN_TLS
    if (c->ssl) {
        int w = SSL_write(c->ssl, p, n > INT_MAX ? INT_MAX : (int)n);
        return w > 0 ? w : tls_result(c, w);
    }
#endif
    return send(c->fd, p, n, MSG_NOSIGNAL);
}

static inline ssize_t conn_recv(conn_t *c, char *p, size_t n) {
#ifdef LOADGEN_TLS
    if (c->ssl) {
        int r = SSL_read(c->ssl, p, n > INT_MAX ? INT_MAX : (int)n);
        return r > 0 ? r : tls_result(c, r);
    }
#endif
    if (opt_rate <= 0) return recv(c->fd, p, n, 0);
    /* Open loop: the kernel's receive timestamp comes with the bytes. TCP gives the
     * one of the last segment read, so an answer read with later ones gets a later
     * time than its own: the figure can only be too high. */
    union { char buf[CMSG_SPACE(sizeof(struct timespec))]; struct cmsghdr align; } ctl;
    struct iovec iov = { .iov_base = p, .iov_len = n };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
                        .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf };
    ssize_t r = recvmsg(c->fd, &m, 0);
    if (r > 0)
        for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
            if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_TIMESTAMPNS) {
                struct timespec ts;
                memcpy(&ts, CMSG_DATA(h), sizeof ts);
                c->rx_ns = (uint64_t)((int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec -
                                      real_minus_mono);
            }
    return r;
}

/* A short read drains a plain socket; TLS hands over one record per read. */
static inline int drained_by_short_read(const conn_t *c) {
#ifdef LOADGEN_TLS
    if (c->ssl) return 0;
#endif
    (void)c;
    return 1;
}

/* The TLS handshake of a connected, non-blocking socket (--tls); 0 or -1. */
static int tls_connect(conn_t *c, int timeout_ms) {
#ifdef LOADGEN_TLS
    c->ssl = SSL_new(tls_ctx);
    if (!c->ssl || SSL_set_fd(c->ssl, c->fd) != 1) return -1;
    for (;;) {
        int r = SSL_connect(c->ssl);
        if (r == 1) return 0;
        int e = SSL_get_error(c->ssl, r);
        short want = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
        struct pollfd p = { .fd = c->fd, .events = want };
        if (!want || poll(&p, 1, timeout_ms) <= 0) {
            char why[256];
            ERR_error_string_n(ERR_get_error(), why, sizeof why);
            fprintf(stderr, "loadgen: connection %d: TLS handshake failed: %s\n", c->id,
                    want ? "timed out" : why);
            return -1;
        }
    }
#else
    (void)c; (void)timeout_ms;
    return -1;
#endif
}

static void conn_flush(conn_t *c) {
    while (c->state == C_OPEN && c->woff < c->wlen) {
        ssize_t w = conn_send(c, c->wbuf + c->woff, c->wlen - c->woff);
        if (w > 0) { c->woff += (size_t)w; bytes_out += (uint64_t)w; continue; }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) { set_out_interest(c, 1); return; }
        conn_fail(c, "send failed", w < 0 ? errno : 0);
        return;
    }
    if (c->state == C_OPEN) {
        c->woff = c->wlen = 0;
        set_out_interest(c, 0);
    }
}

static void wbuf_reserve(conn_t *c, size_t more) {
    if (c->wlen + more <= c->wcap) return;
    if (c->woff > 0) {
        memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
        c->wlen -= c->woff;
        c->woff = 0;
        if (c->wlen + more <= c->wcap) return;
    }
    size_t cap = c->wcap * 2;
    while (cap < c->wlen + more) cap *= 2;
    char *nb = realloc(c->wbuf, cap);
    if (!nb) { perror("realloc"); exit(2); }
    c->wbuf = nb;
    c->wcap = cap;
}

/* Queue one request on c (the caller flushes). Returns 0 when no slot is free. */
static int queue_request(conn_t *c, uint64_t t, uint64_t lag, int measured) {
    slot_t *s = &c->slots[(uint32_t)c->next_opaque & c->mask];
    if (s->used) return 0;
    wbuf_reserve(c, max_frame_len);
    long topic = topic_rr;
    if (++topic_rr >= opt_topics) topic_rr = 0;
    c->wlen += encode_request(c->wbuf + c->wlen, topic, c->next_opaque);
    s->opaque = c->next_opaque;
    s->used = 1;
    s->measured = measured;
    s->t = t;
    s->lag = lag;
    c->next_opaque = (int32_t)((uint32_t)c->next_opaque + 1u);
    c->inflight++;
    sent_total++;
    if (measured) measured_sent++;
    return 1;
}

static inline int may_send(uint64_t now) {
    if (stop_flag || now >= t_end) return 0;
    if (opt_requests && measured_sent >= opt_requests) return 0;
    return 1;
}

/* Closed loop: top c up to opt_inflight. */
static void fill_closed(conn_t *c, uint64_t now) {
    if (c->state != C_OPEN) return;
    int queued = 0;
    while (c->inflight < opt_inflight && may_send(now)) {
        if (!queue_request(c, now, 0, now >= t_measure)) break;
        queued++;
    }
    if (queued) conn_flush(c);
}

/* Open loop: send every request that is due, on connections with a free slot. */
static uint64_t next_due, due_interval;
static int rate_rr = 0;

static void fill_rate(uint64_t now) {
    int touched = 0;
    while (next_due <= now && !stop_flag && next_due < t_end &&
           !(opt_requests && measured_sent >= opt_requests)) {
        conn_t *c = NULL;
        for (int k = 0; k < opt_conns; k++) {
            conn_t *cand = &conns[(rate_rr + k) % opt_conns];
            if (cand->state == C_OPEN && cand->inflight < opt_inflight &&
                !cand->slots[(uint32_t)cand->next_opaque & cand->mask].used) {
                c = cand;
                rate_rr = (rate_rr + k + 1) % opt_conns;
                break;
            }
        }
        if (!c) break;        /* every slot busy: the request stays due, its clock running */
        queue_request(c, next_due, now - next_due, next_due >= t_measure);
        if (next_due >= t_measure) hist_record(&lag_hist, now - next_due);
        next_due += due_interval;
        touched = 1;
    }
    if (touched)
        for (int k = 0; k < opt_conns; k++)
            if (conns[k].state == C_OPEN && conns[k].wlen > conns[k].woff) conn_flush(&conns[k]);
}

static void handle_frame(conn_t *c, const char *f, uint32_t len, uint64_t now, uint64_t rx) {
    if (len < 4) { protocol_errors++; return; }
    uint32_t hw = get_be32(f);
    uint32_t ser = hw >> 24, hlen = hw & 0xFFFFFF;
    if (hlen > len - 4) { protocol_errors++; return; }
    const char *h = f + 4;
    int64_t code = -1, opaque = 0, flag = 0;
    if (ser == 0) {
        if (!json_int(h, hlen, "\"opaque\"", &opaque)) { protocol_errors++; return; }
        json_int(h, hlen, "\"code\"", &code);
        json_int(h, hlen, "\"flag\"", &flag);
    } else if (ser == 1 && hlen >= 13) {
        code = (int16_t)(((unsigned char)h[0] << 8) | (unsigned char)h[1]);
        opaque = (int32_t)get_be32(h + 5);
        flag = (int32_t)get_be32(h + 9);
    } else { protocol_errors++; return; }

    slot_t *s = &c->slots[(uint32_t)opaque & c->mask];
    if (!s->used || s->opaque != (int32_t)opaque) { unmatched++; return; }
    s->used = 0;
    c->inflight--;
    done_total++;
    int ok = (flag & 1) && code == 0;
    if (!(flag & 1)) not_response++;
    answers_all++;
    if (!ok) errors_all++;
    if (s->measured) {
        uint64_t lat = now > s->t ? now - s->t : 0;
        measured_done++;
        hist_record(&hist, lat);
        if (opt_rate > 0) hist_record(&sent_hist, lat > s->lag ? lat - s->lag : 0);
        if (rx) hist_record(&arrived_hist, rx > s->t + s->lag ? rx - (s->t + s->lag) : 0);
        if (!ok) { errors++; note_error_code(code); }
        if (opt_samples) note_sample(s->t, lat, s->lag, (flag & 1) ? code : -1, (int32_t)opaque, c->port);
    }
}

#define MAX_RESPONSE (64u * 1024 * 1024)

static void conn_read(conn_t *c) {
    c->rx_ns = 0;
    for (;;) {
        if (c->rcap - c->rlen < 65536) {
            size_t cap = c->rcap * 2;
            char *nb = realloc(c->rbuf, cap);
            if (!nb) { perror("realloc"); exit(2); }
            c->rbuf = nb;
            c->rcap = cap;
        }
        size_t room = c->rcap - c->rlen;
        ssize_t r = conn_recv(c, c->rbuf + c->rlen, room);
        if (r == 0) { conn_fail(c, "closed by the server", 0); return; }
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            conn_fail(c, "recv failed", errno);
            return;
        }
        bytes_in += (uint64_t)r;
        c->rlen += (size_t)r;
        if ((size_t)r < room && drained_by_short_read(c)) break;   /* the socket is drained */
    }
    uint64_t now = now_ns();
    size_t pos = 0;
    while (c->rlen - pos >= 4) {
        uint32_t len = get_be32(c->rbuf + pos);
        if (len > MAX_RESPONSE) { protocol_errors++; conn_fail(c, "response frame too large", 0); return; }
        if (c->rlen - pos < 4 + (size_t)len) {
            if (4 + (size_t)len > c->rcap) {
                size_t cap = c->rcap;
                while (cap < 4 + (size_t)len + 65536) cap *= 2;
                char *nb = realloc(c->rbuf, cap);
                if (!nb) { perror("realloc"); exit(2); }
                c->rbuf = nb;
                c->rcap = cap;
            }
            break;
        }
        handle_frame(c, c->rbuf + pos + 4, len, now, c->rx_ns);
        pos += 4 + (size_t)len;
    }
    if (pos) {
        memmove(c->rbuf, c->rbuf + pos, c->rlen - pos);
        c->rlen -= pos;
    }
}

/* ------------------------------------------------------------------ connect */

static int connect_one(const struct addrinfo *ai, int timeout_ms) {
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (opt_rate > 0 && !opt_tls)
        setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
        int e = errno; close(fd); return -e;
    }
    struct pollfd p = { .fd = fd, .events = POLLOUT };
    int r = poll(&p, 1, timeout_ms);
    if (r <= 0) { close(fd); return r == 0 ? -ETIMEDOUT : -errno; }
    int err = 0; socklen_t el = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err) { close(fd); return -err; }
    return fd;
}

/* ------------------------------------------------------------------ main */

static void usage(FILE *f) {
    fprintf(f,
"usage: loadgen [options]\n"
"  -H, --host HOST          server address (127.0.0.1)\n"
"  -p, --port PORT          server port (9876)\n"
"  -c, --conns N            connections (4)\n"
"  -n, --inflight N         requests in flight per connection (16)\n"
"  -d, --duration S         measured seconds (10); sending stops after warmup + S\n"
"  -w, --warmup S           seconds before measuring (1)\n"
"  -r, --requests N         stop after N measured requests (0: duration only)\n"
"  -R, --rate N             open loop: N requests/s in total, latency from the due time\n"
"                           (-n caps the in-flight requests per connection)\n"
"      --prefix S           topic name prefix (T-)\n"
"      --width N            zero-padded width of the topic index (5)\n"
"  -t, --topics N           number of topics, taken round-robin (10000)\n"
"      --topic-start N      first topic index (0)\n"
"      --version N          header version (409 = V4_9_8)\n"
"      --language S         header language (JAVA)\n"
"      --drain S            seconds to wait for answers after sending stops (5)\n"
"      --connect-timeout S  per connection (5)\n"
"      --label S            copied into the JSON output\n"
"      --zone S             zone-mode queries (__ZONE_MODE=true, __ZONE_NAME=S)\n"
"      --samples FILE       write each measured answer: int64 realtime ns of its send\n"
"                           (due) time, uint32 latency ns, uint32 send lag ns, int32 code\n"
"                           (-1: not a response), int32 opaque, uint32 local port,\n"
"                           uint32 0\n"
"      --tls                TLS on every connection, the server not verified\n"
"                           (a build with -DLOADGEN_TLS, -lssl -lcrypto)\n"
"  -h, --help\n");
}

int main(int argc, char **argv) {
    static const struct option longopts[] = {
        {"host", required_argument, 0, 'H'}, {"port", required_argument, 0, 'p'},
        {"conns", required_argument, 0, 'c'}, {"inflight", required_argument, 0, 'n'},
        {"duration", required_argument, 0, 'd'}, {"warmup", required_argument, 0, 'w'},
        {"requests", required_argument, 0, 'r'}, {"rate", required_argument, 0, 'R'},
        {"topics", required_argument, 0, 't'}, {"prefix", required_argument, 0, 1},
        {"width", required_argument, 0, 2}, {"topic-start", required_argument, 0, 3},
        {"version", required_argument, 0, 4}, {"language", required_argument, 0, 5},
        {"drain", required_argument, 0, 6}, {"connect-timeout", required_argument, 0, 7},
        {"label", required_argument, 0, 8}, {"samples", required_argument, 0, 9}, {"help", no_argument, 0, 'h'},
        {"tls", no_argument, 0, 10}, {"zone", required_argument, 0, 11}, {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "H:p:c:n:d:w:r:R:t:h", longopts, NULL)) != -1) {
        switch (o) {
        case 'H': opt_host = optarg; break;
        case 'p': opt_port = atoi(optarg); break;
        case 'c': opt_conns = atoi(optarg); break;
        case 'n': opt_inflight = atoi(optarg); break;
        case 'd': opt_duration = atof(optarg); break;
        case 'w': opt_warmup = atof(optarg); break;
        case 'r': opt_requests = strtoull(optarg, NULL, 10); break;
        case 'R': opt_rate = atof(optarg); break;
        case 't': opt_topics = atol(optarg); break;
        case 1: opt_prefix = optarg; break;
        case 2: opt_width = atoi(optarg); break;
        case 3: opt_topic_start = atol(optarg); break;
        case 4: opt_version = atoi(optarg); break;
        case 5: opt_language = optarg; break;
        case 6: opt_drain = atof(optarg); break;
        case 7: opt_connect_timeout = atof(optarg); break;
        case 8: opt_label = optarg; break;
        case 9: opt_samples = optarg; break;
        case 10: opt_tls = 1; break;
        case 11: opt_zone = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    static char label_buf[256];
    if (strlen(opt_label) < 40) {            /* JSON-escaped copy for the output */
        char *lp = label_buf;
        json_escape_append(&lp, opt_label);
        *lp = 0;
    }
    opt_label = label_buf;
    if (optind < argc || opt_conns < 1 || opt_conns > 10000 || opt_inflight < 1 ||
        opt_inflight > 1 << 20 || opt_duration <= 0 || opt_duration > 86400 || opt_warmup < 0 ||
        opt_topics < 1 || opt_width < 0 || opt_width > 20 || opt_port <= 0 || opt_port > 65535 ||
        opt_rate < 0 || opt_drain < 0 || strlen(opt_prefix) > 200 || strlen(opt_language) > 32 ||
        (opt_zone && strlen(opt_zone) > 200)) {
        usage(stderr);
        return 2;
    }

    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (opt_tls) {
#ifdef LOADGEN_TLS
        tls_ctx = SSL_CTX_new(TLS_client_method());
        if (!tls_ctx) { fprintf(stderr, "loadgen: SSL_CTX_new failed\n"); return 2; }
        SSL_CTX_set_verify(tls_ctx, SSL_VERIFY_NONE, NULL);
        /* conn_flush retries a partial write from a buffer that may have moved */
        SSL_CTX_set_mode(tls_ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                                  SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        SSL_CTX_set_options(tls_ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#else
        fprintf(stderr, "loadgen: --tls: this build has no TLS (build with -DLOADGEN_TLS "
                        "... -lssl -lcrypto, e.g. make bench/loadgen-tls)\n");
        printf("{\"label\":\"%s\",\"error\":\"built without TLS\"}\n", opt_label);
        return 2;
#endif
    }

    encode_topics();

    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", opt_port);
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(opt_host, portstr, &hints, &ai);
    if (gai) { fprintf(stderr, "loadgen: %s: %s\n", opt_host, gai_strerror(gai)); return 2; }

    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) { perror("epoll_create1"); return 2; }
    conns = calloc((size_t)opt_conns, sizeof(conn_t));
    uint32_t ring = 64;
    while (ring < (uint32_t)opt_inflight * 4u) ring <<= 1;
    for (int i = 0; i < opt_conns; i++) {
        conn_t *c = &conns[i];
        int fd = connect_one(ai, (int)(opt_connect_timeout * 1000));
        if (fd < 0) {
            fprintf(stderr, "loadgen: connect %s:%d: %s\n", opt_host, opt_port, strerror(-fd));
            printf("{\"label\":\"%s\",\"error\":\"connect: %s\"}\n", opt_label, strerror(-fd));
            return 2;
        }
        c->fd = fd; c->id = i; c->state = C_OPEN;
        struct sockaddr_storage local;
        socklen_t local_len = sizeof local;
        if (getsockname(fd, (struct sockaddr *)&local, &local_len) == 0)
            c->port = ntohs(local.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&local)->sin6_port
                                                        : ((struct sockaddr_in *)&local)->sin_port);
        c->rcap = 256 * 1024; c->rbuf = malloc(c->rcap);
        c->wcap = 64 * 1024; c->wbuf = malloc(c->wcap);
        c->slots = calloc(ring, sizeof(slot_t)); c->mask = ring - 1;
        c->next_opaque = 1;
        if (!c->rbuf || !c->wbuf || !c->slots) { perror("malloc"); return 2; }
        if (opt_tls && tls_connect(c, (int)(opt_connect_timeout * 1000)) < 0) {
            printf("{\"label\":\"%s\",\"error\":\"TLS handshake failed\"}\n", opt_label);
            return 2;
        }
        struct epoll_event ev = {0};
        ev.events = EPOLLIN;
        ev.data.u32 = (uint32_t)i;
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) { perror("epoll_ctl"); return 2; }
    }
    freeaddrinfo(ai);

    uint64_t t_start = now_ns();
    {
        struct timespec rt;
        clock_gettime(CLOCK_REALTIME, &rt);
        real_minus_mono = ((int64_t)rt.tv_sec * 1000000000ll + rt.tv_nsec) - (int64_t)now_ns();
    }
    t_measure = t_start + (uint64_t)(opt_warmup * 1e9);
    t_end = t_measure + (uint64_t)(opt_duration * 1e9);
    uint64_t t_last_done = t_measure;
    int tfd = -1;
    uint64_t armed_for = 0;
    if (opt_rate > 0) {
        due_interval = (uint64_t)(1e9 / opt_rate);
        if (due_interval == 0) due_interval = 1;
        next_due = t_start;
        /* Wake exactly when the next request is due (epoll_wait counts in ms). */
        prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
        tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (tfd < 0) { perror("timerfd_create"); return 2; }
        struct epoll_event ev = {0};
        ev.events = EPOLLIN;
        ev.data.u32 = UINT32_MAX;
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, tfd, &ev) < 0) { perror("epoll_ctl"); return 2; }
    }

    struct epoll_event events[256];
    uint64_t drain_deadline = 0;
    int stopped_sending = 0;
    uint64_t t_stop = 0;
    for (;;) {
        uint64_t now = now_ns();
        if (opt_rate > 0) fill_rate(now);
        else for (int i = 0; i < opt_conns; i++) fill_closed(&conns[i], now);

        if (!stopped_sending && !may_send(now)) {
            stopped_sending = 1;
            t_stop = now < t_end ? now : t_end;
            drain_deadline = now + (uint64_t)(opt_drain * 1e9);
        }
        int open = 0, busy = 0;
        for (int i = 0; i < opt_conns; i++) {
            if (conns[i].state == C_OPEN) { open++; busy += conns[i].inflight; }
        }
        if (!open) break;
        if (stopped_sending && (busy == 0 || now >= drain_deadline)) break;

        uint64_t wake = stopped_sending ? drain_deadline : t_end;
        if (tfd >= 0 && !stopped_sending && next_due > now && next_due < wake &&
            armed_for != next_due) {
            struct itimerspec its = {0};
            its.it_value.tv_sec = (time_t)(next_due / 1000000000ull);
            its.it_value.tv_nsec = (long)(next_due % 1000000000ull);
            if (timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL) == 0) armed_for = next_due;
        }
        long timeout_ms = wake > now ? (long)((wake - now + 999999) / 1000000) : 0;
        if (timeout_ms > 100) timeout_ms = 100;
        int n = epoll_wait(epfd, events, 256, (int)timeout_ms);
        if (n < 0) {
            if (errno == EINTR) continue;
            perror("epoll_wait");
            break;
        }
        for (int k = 0; k < n; k++) {
            if (events[k].data.u32 == UINT32_MAX) {
                uint64_t expirations;
                if (read(tfd, &expirations, sizeof expirations) < 0 && errno != EAGAIN)
                    perror("timerfd read");
                continue;
            }
            conn_t *c = &conns[events[k].data.u32];
            if (c->state != C_OPEN) continue;
            if (events[k].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
                uint64_t before = done_total;
                conn_read(c);
                if (done_total != before) t_last_done = now_ns();
            }
            if (c->state == C_OPEN && (events[k].events & EPOLLOUT)) conn_flush(c);
        }
    }
    uint64_t timeouts = 0;
    for (int i = 0; i < opt_conns; i++) {
        if (conns[i].state == C_OPEN) {
            timeouts += (uint64_t)conns[i].inflight;
            close(conns[i].fd);
        }
    }
    if (opt_rate > 0 && !stop_flag && next_due < t_end) {
        /* due requests that never got a free slot before sending stopped */
        uint64_t last = t_end;
        unsent_due = (last - next_due) / (due_interval ? due_interval : 1);
    }

    /* Throughput over the measured window: requests sent in it and answered,
     * divided by its length (to the last answer when --requests ended it). */
    uint64_t window_end = t_end;
    if (!stopped_sending) t_stop = now_ns();
    if (t_stop < t_end) window_end = t_last_done > t_stop ? t_last_done : t_stop;
    double seconds = window_end > t_measure ? (double)(window_end - t_measure) / 1e9 : 0.0;
    double rps = seconds > 0 ? (double)measured_done / seconds : 0.0;
    double us = 1000.0;

    printf("{\"label\":\"%s\",\"conns\":%d,\"inflight\":%d,\"rate\":%.0f,\"topics\":%ld,"
           "\"requests\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"timeouts\":%" PRIu64
           ",\"lost\":%" PRIu64 ",\"conn_errors\":%" PRIu64 ",\"protocol_errors\":%" PRIu64
           ",\"unmatched\":%" PRIu64 ",\"unsent_due\":%" PRIu64 ",\"sent\":%" PRIu64
           ",\"seconds\":%.3f,\"rps\":%.1f,"
           "\"min_us\":%.1f,\"mean_us\":%.1f,\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f,"
           "\"p999_us\":%.1f,\"p9999_us\":%.1f,\"max_us\":%.1f,"
           "\"over_1ms\":%" PRIu64 ",\"over_10ms\":%" PRIu64 ",\"over_100ms\":%" PRIu64
           ",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64 ",\"error_codes\":{",
           opt_label, opt_conns, opt_inflight, opt_rate, opt_topics,
           measured_done, errors, timeouts, lost, conn_errors, protocol_errors, unmatched,
           unsent_due, sent_total, seconds, rps,
           hist.n ? hist.min / us : 0.0, hist.n ? hist.sum / hist.n / us : 0.0,
           hist_pct(&hist, 50) / us, hist_pct(&hist, 90) / us, hist_pct(&hist, 99) / us,
           hist_pct(&hist, 99.9) / us, hist_pct(&hist, 99.99) / us, hist.max / us,
           hist.over_1ms, hist.over_10ms, hist.over_100ms, bytes_in, bytes_out);
    for (int i = 0; i < n_err_codes; i++)
        printf("%s\"%" PRId64 "\":%" PRIu64, i ? "," : "", err_code[i], err_count[i]);
    printf("},\"not_response\":%" PRIu64 ",\"answers_all\":%" PRIu64 ",\"errors_all\":%" PRIu64,
           not_response, answers_all, errors_all);
    printf(",\"tls\":%d", opt_tls);
    if (opt_samples) {
        FILE *sf = fopen(opt_samples, "wb");
        size_t w = sf ? fwrite(samples, sizeof *samples, n_samples, sf) : 0;
        if (!sf || w != n_samples || fclose(sf) != 0) {
            fprintf(stderr, "loadgen: cannot write %s: %s\n", opt_samples, strerror(errno));
            printf(",\"samples_error\":1");
        }
        printf(",\"samples\":%zu", n_samples);
    }
    if (opt_rate > 0)
        printf(",\"send_lag_p50_us\":%.1f,\"send_lag_p99_us\":%.1f,\"send_lag_max_us\":%.1f"
               ",\"from_send_p99_us\":%.1f,\"from_send_p999_us\":%.1f,\"from_send_max_us\":%.1f",
               hist_pct(&lag_hist, 50) / us, hist_pct(&lag_hist, 99) / us, lag_hist.max / us,
               hist_pct(&sent_hist, 99) / us, hist_pct(&sent_hist, 99.9) / us,
               sent_hist.max / us);
    if (arrived_hist.n)
        printf(",\"arrived_p99_us\":%.1f,\"arrived_p999_us\":%.1f,\"arrived_max_us\":%.1f",
               hist_pct(&arrived_hist, 99) / us, hist_pct(&arrived_hist, 99.9) / us,
               arrived_hist.max / us);
    printf("}\n");
    fflush(stdout);
    int bad = errors || errors_all || timeouts || lost || conn_errors || protocol_errors || unmatched ||
              measured_done == 0;
    return bad ? 1 : 0;
}
