/* Nogil scanners for the NameServer's two hot paths.
 *
 * Plain C, no Python API: callable with the GIL released. Each scanner answers
 * the common case completely or says "slow"; the caller then runs the general
 * decoder (codec.pxi, bodies.pxi), which produces the exact values and the
 * exact typed errors. Whenever a scanner says OK its output equals what the
 * general path produces; when in doubt it says slow. No input (truncated,
 * garbage, deeply nested) makes it read outside [p, p + n).
 */
#ifndef RMQ_SCAN_H
#define RMQ_SCAN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wire.h"

/* ---- RegisterBrokerBody (JSON form) */


typedef struct {
    int64_t counter, state_version, timestamp;  /* dataVersion; counter/stateVersion 0 when absent */
    int has_timestamp;                          /* 0: absent or null (the caller uses "now") */
    rmq_topic_rec *topics; size_t ntopics, cap;      /* in body order; rb_body_free(), or
                                                   * rp_give(topics, cap * size): bufpool.h */
} rb_body;

enum { RB_OK = 0, RB_SLOW = 1, RB_NOMEM = -1 };

/* Scan a RegisterBrokerBody. out is overwritten (a previous result must be
 * freed first); after any return rb_body_free(out) is safe, and on RB_SLOW and
 * RB_NOMEM out holds no topics and no memory. Strings point into p. */
int rb_scan_register_body(const char *p, size_t n, rb_body *out);
void rb_body_free(rb_body *b);

/* ---- A RegisterBrokerBody scanned while it arrives
 *
 * The I/O engine reads a registration of megabytes in many reads. After each,
 * rb_partial_step takes the topicConfigTable entries that are there whole; once
 * the body is, rb_scan_register_body_from reads the rest and takes those over.
 * Its result is rb_scan_register_body's, however the body was cut
 * (tests/test_scan.py): an entry is taken only when it ends, with the ',' after
 * it, inside the bytes that were there, and the scanner never decides on a byte
 * it has not seen, so the entry reads the same in the whole body. */
typedef struct {
    rb_body body;           /* the entries taken, pointing into the body at base */
    const char *base;       /* where the body was at the last step (its buffer may move) */
    size_t total;           /* the body's length, when whole */
    size_t table_open;      /* offset of topicConfigTable's '{' (RBP_ENTRIES) */
    size_t at;              /* offset after the last entry taken and its ',' */
    size_t next_step_at;    /* the next step waits until this many bytes are there */
    int state;
} rb_partial;

/* RBP_OFF: given up, or taken over; RBP_TABLE: the table not found yet;
 * RBP_ENTRIES: taking its entries. */
enum { RBP_OFF = 0, RBP_TABLE = 1, RBP_ENTRIES = 2 };

/* A zeroed rb_partial is RBP_OFF, holding nothing (rb_partial_free not needed). */
void rb_partial_init(rb_partial *s, size_t total);
/* Whether s holds entries for rb_scan_register_body_from to take over. */
static inline int rb_partial_has_entries(const rb_partial *s)
{
    return s->state == RBP_ENTRIES && s->body.ntopics > 0;
}
/* The first avail bytes of the body are at body (avail <= total; more than at the
 * last step, wherever they are now): the entries complete in them taken. Never
 * fails: out of memory, an unusual body or records that would weigh more than half
 * the bytes there, it stops taking (RBP_OFF). */
void rb_partial_step(rb_partial *s, const char *body, size_t avail);
/* The body is at `body` now: the entries' pointers moved with it. */
void rb_partial_move(rb_partial *s, const char *body);
void rb_partial_free(rb_partial *s);
/* rb_scan_register_body of the whole body at p, the entries s took reused (s is
 * left empty) when they are of this very table (s's base is p, its total n, the
 * table where s found it); s NULL, or of another body: a scan from the start. */
int rb_scan_register_body_from(const char *p, size_t n, rb_partial *s, rb_body *out);

/* The same for the inflated bytes of a compressed RegisterBrokerBody (Java's
 * compressed form, after zlib): topics in body order, topicSysFlag 0, key and
 * name both the line's topic name. Slow for topic queue mappings, filter
 * servers, duplicate names and anything the general decoder would reject. */
int rb_scan_compressed_body(const char *p, size_t n, rb_body *out);

/* ---- GET_ROUTEINFO_BY_TOPIC requests */

typedef struct {
    int32_t opaque, version;
    int serialize_type;                    /* 0 JSON, 1 ROCKETMQ */
    const char *topic; size_t topic_len;   /* raw bytes inside the frame */
    int accept_standard;                   /* extFields acceptStandardJsonOnly is "true" (codec.pxi _is_true) */
    int zone_mode;                         /* extFields __ZONE_MODE is "true" (Boolean.parseBoolean) */
    const char *zone; size_t zone_len;     /* extFields __ZONE_NAME: ASCII, at most RQ_MAX_ZONE bytes */
} rq_route;

/* payload: a frame's first n bytes after its length prefix: the offset of the body
 * in payload, and *code, for a request (neither response nor oneway flag) whose
 * header reads plainly and is there whole; 0 while it is not there whole yet;
 * RQ_UNUSUAL for anything else (a response, a header that does not read plainly or
 * is longer than RQ_MAX_REQUEST_HEADER: a registration's is a few hundred bytes). */
size_t rq_scan_request(const uint8_t *payload, size_t n, int32_t *code);
#define RQ_UNUSUAL ((size_t)-1)
enum { RQ_MAX_REQUEST_HEADER = 64 * 1024 };

/* Longer zone names (and any that is not ASCII) are left to the general path. */
enum { RQ_MAX_ZONE = 256 };

/* payload: one frame without its 4-byte length prefix. 1: a GET_ROUTEINFO_BY_TOPIC
 * request (RMQ_GET_ROUTEINFO_BY_TOPIC, neither response nor oneway flag, no body) understood
 * completely; 0: anything else or anything unusual. */
int rq_scan_route(const uint8_t *payload, size_t n, rq_route *out);

/* payload as rq_scan_route's: where a JSON route query's topic probably is, found
 * before its header is read: the string after '"topic":"' right inside the header's
 * second '{' (extFields, with topic its first key, as Java's clients write it). Only
 * a guess, for asking for the topic's memory early (serve.c): 1 and *s, *n; 0 for
 * none. What the topic is, rq_scan_route says. */
int rq_topic_hint(const uint8_t *payload, size_t n, const char **s, size_t *len);

/* The zone a route query's answer is filtered by (Java 5.0.0's ZoneRouteRPCHook:
 * zone mode and a zone name that is not blank), folded as rmq.javacase.fold folds
 * ASCII, into out (RQ_MAX_ZONE bytes): its length, or -1 when the answer is not
 * filtered. */
int rq_route_zone(const rq_route *req, char *out);

/* Append the complete answer frame (length prefix included): the bytes
 * encode_frame writes for req's response (code 0, JAVA, RMQ_CURRENT_VERSION,
 * opaque, flag 1, no remark, no extFields, body) in serialize type stype (0 JSON,
 * 1 ROCKETMQ: the NameServer's own, as Java 5.x answers, not req's).
 * Returns the bytes written, or -1 if cap is too small (or the frame would not
 * fit its int32 length field). */
ssize_t rq_write_route_answer(char *out, size_t cap, const rq_route *req, int stype,
                              const char *body, size_t body_len);
size_t rq_route_answer_size(const rq_route *req, int stype, size_t body_len);   /* exact size */

/* The TOPIC_NOT_EXIST answer (17) to req, as the handlers write it: remark "No topic
 * route info in name server for the topic: " + topic + the FAQ line, no extFields, no
 * body, in serialize type stype. Written here only when rq_not_found_here(req): a
 * topic of printable ASCII without '"' and '\\' (the same bytes in either header);
 * the general path answers the others. */
int rq_not_found_here(const rq_route *req);
ssize_t rq_write_not_found_answer(char *out, size_t cap, const rq_route *req, int stype);
size_t rq_not_found_answer_size(const rq_route *req, int stype);                 /* exact size */

#endif
