#include "scan.h"
#include <stdlib.h>
int rb_scan_register_body(const char *p, size_t n, rb_body *out) { (void)p; (void)n; (void)out; return RB_SLOW; }
void rb_body_free(rb_body *b) { free(b->topics); b->topics = NULL; }
int rq_scan_route(const uint8_t *payload, size_t n, rq_route *out) { (void)payload; (void)n; (void)out; return 0; }
ssize_t rq_write_route_answer(char *out, size_t cap, const rq_route *req, const char *body, size_t body_len) { (void)out; (void)cap; (void)req; (void)body; (void)body_len; return -1; }
size_t rq_route_answer_size(const rq_route *req, size_t body_len) { (void)req; return body_len + 256; }
