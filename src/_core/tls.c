/* TLS for the I/O engine's connections (tls.h). */
#define _GNU_SOURCE
#include "tls.h"

#include <ctype.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* OpenSSL's constants used here (ssl.h, err.h: stable since 1.1.1) */
enum {
    SSL_ERROR_SSL = 1,
    SSL_ERROR_WANT_READ = 2,
    SSL_ERROR_WANT_WRITE = 3,
    SSL_ERROR_SYSCALL = 5,
    SSL_ERROR_ZERO_RETURN = 6,
    SSL_CTRL_MODE = 33,
    SSL_CTRL_SET_READ_AHEAD = 41,
    SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER = 0x2,
    BIO_NOCLOSE = 0,
    BIO_CTRL_FLUSH = 11,
    BIO_TYPE_SOURCE_SINK = 0x0400,
};
/* OpenSSL 3: an EOF without close_notify reads as a close, as on a plain socket (1.1.1
 * reports it as SSL_ERROR_SYSCALL with errno 0, taken as a close below) */
#define SSL_OP_IGNORE_UNEXPECTED_EOF ((uint64_t)1 << 7)

/* The functions, resolved by tl_load. 1.1.1's unsigned long and 3's uint64_t options
 * are one 64-bit type on the LP64 platforms the engine runs on. */
static struct {
    unsigned long (*OpenSSL_version_num)(void);
    void *(*SSL_new)(void *ctx);
    void (*SSL_free)(void *ssl);
    int (*SSL_set_fd)(void *ssl, int fd);
    void (*SSL_set_accept_state)(void *ssl);
    int (*SSL_read)(void *ssl, void *buf, int num);
    int (*SSL_write)(void *ssl, const void *buf, int num);
    int (*SSL_get_error)(const void *ssl, int ret);
    int (*SSL_shutdown)(void *ssl);
    long (*SSL_ctrl)(void *ssl, int cmd, long larg, void *parg);
    int (*SSL_is_init_finished)(const void *ssl);
    int (*SSL_CTX_up_ref)(void *ctx);
    void (*SSL_CTX_free)(void *ctx);
    uint64_t (*SSL_CTX_get_options)(const void *ctx);
    int (*SSL_CTX_get_verify_mode)(const void *ctx);
    void (*ERR_clear_error)(void);
    unsigned long (*ERR_get_error)(void);
    void (*ERR_error_string_n)(unsigned long e, char *buf, size_t len);
    long (*SSL_get_verify_result)(const void *ssl);
    void *(*BIO_new_socket)(int sock, int close_flag);
    void *(*BIO_new)(const void *method);
    int (*BIO_free)(void *bio);
    int (*BIO_get_new_index)(void);
    void *(*BIO_meth_new)(int type, const char *name);
    int (*BIO_meth_set_write)(void *method, int (*write)(void *bio, const char *data, int n));
    int (*BIO_meth_set_ctrl)(void *method, long (*ctrl)(void *bio, int cmd, long larg,
                                                        void *parg));
    void (*BIO_set_data)(void *bio, void *data);
    void *(*BIO_get_data)(void *bio);
    void (*BIO_set_init)(void *bio, int init);
    void (*SSL_set_bio)(void *ssl, void *rbio, void *wbio);
    int (*SSL_free_buffers)(void *ssl);
    const char *(*X509_verify_cert_error_string)(long n);
    /* a function in OpenSSL 3 only (a macro before): NULL on 1.1.1 */
    uint64_t (*SSL_set_options)(void *ssl, uint64_t op);
} ossl;

/* OpenSSL's reads and writes take an int */
static int clamp(size_t n) { return n > INT_MAX ? INT_MAX : (int)n; }

/* The BIO every SSL writes to: its writes go to the connection's tl_sink. */
static void *sink_method;

static int sink_write(void *bio, const char *data, int n)
{
    tl_sink *sink = ossl.BIO_get_data(bio);
    return n <= 0 ? 0 : sink->write(sink->arg, data, (size_t)n) < 0 ? -1 : n;
}

static long sink_ctrl(void *bio, int cmd, long larg, void *parg)
{
    (void)bio, (void)larg, (void)parg;
    return cmd == BIO_CTRL_FLUSH;   /* (written already); nothing pending, no other control */
}

static int make_sink_method(void)
{
    sink_method = ossl.BIO_meth_new(ossl.BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
                                    "rmq engine output");
    if (!sink_method)
        return -1;
    ossl.BIO_meth_set_write(sink_method, sink_write);
    ossl.BIO_meth_set_ctrl(sink_method, sink_ctrl);
    return 0;
}

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static int load_state;              /* 0 not tried, 1 loaded, -1 failed */
static char load_why[200];

int tl_load(const char *module_path, char *err, size_t errlen)
{
    pthread_mutex_lock(&load_lock);
    if (!load_state) {
        load_state = -1;
        /* the module is loaded already: NOLOAD finds it, and never loads another copy */
        void *h = dlopen(module_path, RTLD_NOW | RTLD_NOLOAD);
        if (!h) {
            snprintf(load_why, sizeof load_why, "%s is not loaded: %s", module_path,
                     dlerror());
        } else {
            struct {
                const char *name;
                void **fn;
                int optional;
            } names[] = {
#define FN(f) {#f, (void **)&ossl.f, 0}
                FN(OpenSSL_version_num), FN(SSL_new), FN(SSL_free), FN(SSL_set_fd),
                FN(SSL_set_accept_state), FN(SSL_read), FN(SSL_write), FN(SSL_get_error),
                FN(SSL_shutdown), FN(SSL_ctrl), FN(SSL_is_init_finished),
                FN(SSL_CTX_up_ref), FN(SSL_CTX_free), FN(SSL_CTX_get_options),
                FN(SSL_CTX_get_verify_mode), FN(ERR_clear_error), FN(ERR_get_error),
                FN(ERR_error_string_n), FN(SSL_get_verify_result),
                FN(X509_verify_cert_error_string), FN(BIO_new_socket), FN(BIO_new),
                FN(BIO_free), FN(BIO_get_new_index), FN(BIO_meth_new), FN(BIO_meth_set_write),
                FN(BIO_meth_set_ctrl), FN(BIO_set_data), FN(BIO_get_data), FN(BIO_set_init),
                FN(SSL_set_bio), FN(SSL_free_buffers),
#undef FN
                {"SSL_set_options", (void **)&ossl.SSL_set_options, 1},
            };
            load_state = 1;
            for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
                *names[i].fn = dlsym(h, names[i].name);
                if (!*names[i].fn && !names[i].optional) {
                    snprintf(load_why, sizeof load_why,
                             "%s has no %s (OpenSSL linked statically, or not OpenSSL)",
                             module_path, names[i].name);
                    load_state = -1;
                    break;
                }
            }
            if (load_state == 1 && ossl.OpenSSL_version_num() < 0x10101000UL) {
                snprintf(load_why, sizeof load_why, "OpenSSL %#lx is older than 1.1.1",
                         ossl.OpenSSL_version_num());
                load_state = -1;
            }
            if (load_state == 1 && make_sink_method() < 0) {
                snprintf(load_why, sizeof load_why, "OpenSSL made no BIO method (out of memory)");
                load_state = -1;
            }
            /* h stays open: the functions are used until the process ends */
        }
    }
    int ok = load_state == 1;
    if (!ok && err && errlen)
        snprintf(err, errlen, "%s", load_why);
    pthread_mutex_unlock(&load_lock);
    return ok ? 0 : -1;
}

int tl_ctx_matches(void *ctx, uint64_t options, int verify_mode)
{
    return ctx && ossl.SSL_CTX_get_options(ctx) == options &&
           ossl.SSL_CTX_get_verify_mode(ctx) == verify_mode;
}

int tl_ctx_hold(void *ctx) { return ossl.SSL_CTX_up_ref(ctx) == 1 ? 0 : -1; }

void tl_ctx_release(void *ctx) { ossl.SSL_CTX_free(ctx); }

void *tl_new(void *ctx, int fd, tl_sink *sink)
{
    void *ssl = ossl.SSL_new(ctx);
    void *rbio = ossl.BIO_new_socket(fd, BIO_NOCLOSE);
    void *wbio = ossl.BIO_new(sink_method);
    if (!ssl || !rbio || !wbio) {
        if (ssl)
            ossl.SSL_free(ssl);
        if (rbio)
            ossl.BIO_free(rbio);
        if (wbio)
            ossl.BIO_free(wbio);
        ossl.ERR_clear_error();
        return NULL;
    }
    ossl.BIO_set_data(wbio, sink);
    ossl.BIO_set_init(wbio, 1);
    ossl.SSL_set_bio(ssl, rbio, wbio);      /* (the SSL owns them now) */
    ossl.SSL_set_accept_state(ssl);
    ossl.SSL_ctrl(ssl, SSL_CTRL_MODE,
                  SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER, NULL);
    /* a socket read takes what came (many small records at once), not a record's
     * header and then its body */
    ossl.SSL_ctrl(ssl, SSL_CTRL_SET_READ_AHEAD, 1, NULL);
    if (ossl.SSL_set_options)
        ossl.SSL_set_options(ssl, SSL_OP_IGNORE_UNEXPECTED_EOF);
    return ssl;
}

void tl_free(void *ssl)
{
    ossl.SSL_free(ssl);
}

/* What an SSL_read or SSL_write that returned r <= 0 means. */
static ssize_t failed(void *ssl, int r)
{
    switch (ossl.SSL_get_error(ssl, r)) {
    case SSL_ERROR_WANT_READ:
        return TL_WANT_READ;
    case SSL_ERROR_WANT_WRITE:
        return TL_WANT_WRITE;
    case SSL_ERROR_ZERO_RETURN:
        return TL_CLOSED;
    case SSL_ERROR_SYSCALL:
        /* the socket failed (a reset, EPIPE) or ended: the peer is gone */
        ossl.ERR_clear_error();
        return TL_CLOSED;
    default:
        return TL_ERROR;            /* its reason stays queued for tl_error */
    }
}

ssize_t tl_read(void *ssl, char *buf, size_t n)
{
    ossl.ERR_clear_error();         /* SSL_get_error reads this thread's queue */
    int r = ossl.SSL_read(ssl, buf, clamp(n));
    return r > 0 ? r : failed(ssl, r);
}

ssize_t tl_write(void *ssl, const char *buf, size_t n)
{
    ossl.ERR_clear_error();
    int r = ossl.SSL_write(ssl, buf, clamp(n));
    return r > 0 ? r : failed(ssl, r);
}

void tl_trim(void *ssl)
{
    ossl.SSL_free_buffers(ssl);     /* (refused, harmlessly, while they hold a record) */
}

int tl_handshake_done(void *ssl) { return ossl.SSL_is_init_finished(ssl) == 1; }

void tl_shutdown(void *ssl)
{
    if (tl_handshake_done(ssl)) {
        ossl.ERR_clear_error();
        ossl.SSL_shutdown(ssl);
        ossl.ERR_clear_error();
    }
}

void tl_error(void *ssl, char *buf, size_t n)
{
    if (!n)
        return;
    buf[0] = 0;
    unsigned long code = ossl.ERR_get_error();
    ossl.ERR_clear_error();
    if (code) {
        /* "error:0A0000C6:SSL routines::packet length too long": the reason, as
         * Python's ssl names it (PACKET_LENGTH_TOO_LONG) */
        char text[256];
        ossl.ERR_error_string_n(code, text, sizeof text);
        const char *reason = strrchr(text, ':');
        reason = reason ? reason + 1 : text;
        size_t i = 0;
        for (; reason[i] && i + 1 < n; i++)
            buf[i] = reason[i] == ' ' ? '_' : (char)toupper((unsigned char)reason[i]);
        buf[i] = 0;
    }
    long verify = ossl.SSL_get_verify_result(ssl);
    if (verify != 0) {                  /* X509_V_OK: the peer's certificate, as ssl says */
        size_t used = strlen(buf);
        snprintf(buf + used, n - used, "%s%s", used ? ": " : "",
                 ossl.X509_verify_cert_error_string(verify));
    }
}
