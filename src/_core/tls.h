/* TLS for the I/O engine's connections (issue 30): OpenSSL on the engine's threads,
 * from the very library Python's ssl module loaded, on the SSL_CTX of the server's
 * ssl.SSLContext (rmq.tls builds it: certificates, client authentication, versions
 * are set once, there).
 *
 * Nothing here is linked at build time: the functions are looked up at run time in
 * the ssl module's extension (dlopen of the loaded _ssl with RTLD_NOLOAD: dlsym then
 * searches it and the libssl it depends on), so the core builds without OpenSSL's
 * headers, a wheel carries no second OpenSSL, and an SSL_CTX made by one OpenSSL is
 * never used by another. OpenSSL 1.1.1 or later (its functions are thread-safe
 * without callbacks).
 *
 * A connection's SSL reads its socket itself (a socket BIO, non-blocking, reading
 * ahead) and writes its records to the engine (a BIO of ours whose writes go to a
 * tl_sink: the engine's output buffer), which sends them itself, many records in one
 * send, as it sends a plain connection's answers. (OpenSSL's memory BIO cost a
 * zeroing and two copies of every record more: bench/README.md.) */
#ifndef RMQ_TLS_H
#define RMQ_TLS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Look up OpenSSL's functions in the library `module_path` (the loaded _ssl extension)
 * brought in. 0, or -1 with why in err. Once per process; later calls return the
 * first one's result. */
int tl_load(const char *module_path, char *err, size_t errlen);

/* Whether ctx looks like an SSL_CTX of the loaded OpenSSL: its options and verify mode
 * are those Python reads from its SSLContext (a wrong pointer fails this). */
int tl_ctx_matches(void *ctx, uint64_t options, int verify_mode);

/* The SSL_CTX held (up_ref) for the engine, and let go. */
int tl_ctx_hold(void *ctx);
void tl_ctx_release(void *ctx);

/* Where a connection's SSL puts what it has to send (the handshake's messages,
 * records, alerts, close_notify), as OpenSSL seals it: write appends n bytes for arg's
 * connection, 0, or -1 out of memory (the SSL call under way then fails). */
typedef struct {
    int (*write)(void *arg, const char *data, size_t n);
    void *arg;
} tl_sink;

/* A server-side SSL on socket fd (the handshake runs in the first tl_read), sending
 * through sink (which outlives it); NULL out of memory. */
void *tl_new(void *ctx, int fd, tl_sink *sink);
void tl_free(void *ssl);

/* What tl_read / tl_write return besides a count of bytes (> 0) */
enum {
    TL_CLOSED = 0,              /* the peer ended the session or closed the socket */
    TL_WANT_READ = -1,          /* nothing now: wait until the socket is readable */
    TL_WANT_WRITE = -2,         /* nothing now: wait until the socket is writable */
    TL_ERROR = -3,              /* a TLS failure (handshake, record): tl_error says it */
};

/* Plaintext read, up to n bytes (the handshake first, while it is not done): a record's
 * at most. What OpenSSL read ahead from the socket is not seen by epoll: read until
 * TL_WANT_READ before waiting. */
ssize_t tl_read(void *ssl, char *buf, size_t n);

/* Plaintext written, all n bytes (sealed in records to the sink), or TL_WANT_READ
 * while the handshake is not done, or TL_ERROR. */
ssize_t tl_write(void *ssl, const char *buf, size_t n);

/* The SSL's record buffers given back while unused (a quiet connection's). */
void tl_trim(void *ssl);

/* Whether the handshake is done. */
int tl_handshake_done(void *ssl);

/* Seal close_notify (without waiting for the peer's). */
void tl_shutdown(void *ssl);

/* The calling thread's last OpenSSL error, as Python's ssl names its reason, with the
 * verification's failure when the peer's certificate failed ("" when none); the
 * thread's error queue is cleared. */
void tl_error(void *ssl, char *buf, size_t n);

#endif
