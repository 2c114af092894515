/* placeholder until the scanners land: every body is "slow" */
#ifndef RMQ_SCAN_H
#define RMQ_SCAN_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
typedef struct {
    const char *key;  size_t key_len;
    const char *name; size_t name_len;
    int32_t perm, read, write, sysflag;
} rb_topic;
typedef struct {
    int64_t counter, state_version, timestamp;
    int has_timestamp;
    rb_topic *topics; size_t ntopics, cap;
} rb_body;
enum { RB_OK = 0, RB_SLOW = 1, RB_NOMEM = -1 };
int rb_scan_register_body(const char *p, size_t n, rb_body *out);
void rb_body_free(rb_body *b);
typedef struct {
    int32_t opaque, version;
    int serialize_type;
    const char *topic; size_t topic_len;
    int accept_standard;
} rq_route;
int rq_scan_route(const uint8_t *payload, size_t n, rq_route *out);
ssize_t rq_write_route_answer(char *out, size_t cap, const rq_route *req, const char *body, size_t body_len);
size_t rq_route_answer_size(const rq_route *req, size_t body_len);
#endif
