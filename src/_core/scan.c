/* Nogil scanners: the RegisterBrokerBody JSON reader and the GET_ROUTEINFO_BY_TOPIC
 * request recogniser (see scan.h for the contract).
 *
 * The grammar is the general reader's (jsonio.pxi): exact JSON as Python's json
 * module accepts it, strict UTF-8. Anything the general path would reject, or
 * read in a way this scanner does not model (escaped keys, Java's unquoted map
 * keys, duplicate fields that matter, big or non-integer numbers where an int
 * is needed, unusual shapes), makes the scanner say slow: NULL from the helpers
 * below, RB_SLOW / 0 from the entry points.
 */
#include "scan.h"

#include "bufpool.h"
#include "hash.h"

#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

typedef const uint8_t *cur;       /* a position in the input; NULL: slow */

enum {
    MAX_DEPTH = 64,               /* containers deep; the general reader allows 512 */
    MAX_INT_CHARS = 600,          /* Python converts ints below its smallest digit limit (640) */
};

/* ---------------------------------------------------------------- JSON primitives */

/* Bytes that end a fast run inside a string: '"', '\\', controls, non-ASCII. */
static const uint8_t STR_STOP[256] = {
    1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1, 1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
    0,0,1,0,0,0,0,0,0,0,0,0,0,0,0,0, 0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
    0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0, 0,0,0,0,0,0,0,0,0,0,0,0,1,0,0,0,
    0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0, 0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
    1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1, 1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
    1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1, 1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
    1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1, 1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
    1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1, 1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
};

static inline int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

static inline int is_hex(uint8_t c)
{
    return is_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
}

static inline cur ws(cur p, cur end)
{
    while (p < end && *p <= ' ' && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}


/* The first byte at or after q that ends a fast run in a string (or end):
 * sixteen bytes at a time with SSE2 (every x86-64), else eight where the byte
 * order allows it. */
static inline cur str_run(cur q, cur end)
{
#if defined(__SSE2__)
    /* '"', '\\', and the bytes below 0x20 or from 0x80: below 0x20 as signed bytes */
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'),
                  space = _mm_set1_epi8(0x20);
    while (end - q >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)q);
        __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bslash)),
                                 _mm_cmplt_epi8(x, space));
        unsigned bits = (unsigned)_mm_movemask_epi8(m);
        if (bits)
            return q + __builtin_ctz(bits);
        q += 16;
    }
#endif
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t x, q1, q2, m;
    while (end - q >= 8) {
        memcpy(&x, q, 8);
        q1 = x ^ (ones * '"');
        q2 = x ^ (ones * '\\');
        /* Zero bytes of q1/q2, bytes below 0x20, bytes from 0x80: the lowest
         * flagged byte is exact (borrows only carry upwards). */
        m = ((q1 - ones) & ~q1) | ((q2 - ones) & ~q2) | ((x - ones * 0x20) & ~x) | x;
        m &= highs;
        if (m)
            return q + (__builtin_ctzll(m) >> 3);
        q += 8;
    }
#endif
    while (q < end && !STR_STOP[*q])
        q++;
    return q;
}

/* n bytes at a equal the literal b (inlined for the short constant keys). */
static inline int bytes_eq(cur a, const char *b, size_t n)
{
    uint64_t x, y;
    for (; n >= 8; a += 8, b += 8, n -= 8) {
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        if (x != y)
            return 0;
    }
    for (; n; a++, b++, n--)
        if (*a != (uint8_t)*b)
            return 0;
    return 1;
}

static inline int is_lit(cur p, cur end, const char *lit, size_t n)
{
    return (size_t)(end - p) >= n && bytes_eq(p, lit, n);
}

/* One UTF-8 sequence at p (a lead byte >= 0x80) as Python's strict decoder
 * accepts it: no overlongs, no surrogates, nothing above U+10FFFF. */
static cur utf8_seq(cur p, cur end)
{
    uint8_t c = p[0], lo = 0x80, hi = 0xBF;
    int k;
    if (c >= 0xC2 && c <= 0xDF)
        k = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        k = 2;
        if (c == 0xE0) lo = 0xA0;
        else if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        k = 3;
        if (c == 0xF0) lo = 0x90;
        else if (c == 0xF4) hi = 0x8F;
    } else
        return NULL;
    if (end - p <= k || p[1] < lo || p[1] > hi)
        return NULL;
    for (int i = 2; i <= k; i++)
        if ((p[i] & 0xC0) != 0x80)
            return NULL;
    return p + k + 1;
}

static int valid_utf8(cur p, size_t n)
{
    cur end = p + n;
    while (p < end) {
        if (*p < 0x80)
            p++;
        else if ((p = utf8_seq(p, end)) == NULL)
            return 0;
    }
    return 1;
}

/* The string at p ('"'): returns the position after it, *s and *n its raw body and
 * *esc whether it has escapes; NULL if it is unterminated, has a control
 * character, a bad escape (Python's json grammar) or invalid UTF-8. */
static cur scan_str(cur p, cur end, cur *s, size_t *n, int *esc)
{
    cur q = p + 1;
    int e = 0;
    for (;;) {
        q = str_run(q, end);
        if (q >= end)
            return NULL;
        if (*q == '"')
            break;
        if (*q == '\\') {
            e = 1;
            if (end - q < 2)
                return NULL;
            switch (q[1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                q += 2;
                break;
            case 'u':
                if (end - q < 6 || !is_hex(q[2]) || !is_hex(q[3]) || !is_hex(q[4]) || !is_hex(q[5]))
                    return NULL;
                q += 6;
                break;
            default:
                return NULL;
            }
        } else if (*q < 0x20)
            return NULL;
        else if ((q = utf8_seq(q, end)) == NULL)
            return NULL;
    }
    *s = p + 1;
    *n = (size_t)(q - (p + 1));
    *esc = e;
    return q + 1;
}

static cur scan_num(cur p, cur end, int *is_int)
{
    cur at;
    int why;
    return rmq_scan_num(p, end, is_int, &at, &why);
}

/* An integer in [lo, hi] at p; NULL for a float, an exponent, or out of range. */
static cur parse_int(cur p, cur end, int64_t lo, int64_t hi, int64_t *out)
{
    uint64_t v = 0;
    int neg = 0, nd = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end || !is_digit(*p))
        return NULL;
    if (*p == '0')
        p++;
    else
        while (p < end && is_digit(*p)) {
            if (++nd > 19)
                return NULL;
            v = v * 10 + (uint64_t)(*p++ - '0');
        }
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E'))
        return NULL;
    if (neg) {
        if (v > (uint64_t)(-(lo + 1)) + 1)
            return NULL;
        *out = v ? -(int64_t)(v - 1) - 1 : 0;
    } else {
        if (v > (uint64_t)hi)
            return NULL;
        *out = (int64_t)v;
    }
    return p;
}

static cur skip_value(cur p, cur end, int depth);

/* An object or array at p, validated and passed over. Keys must be quoted
 * strings (the general body reader also takes Java's unquoted int keys: slow). */
static cur skip_container(cur p, cur end, int depth)
{
    int obj = *p == '{';
    uint8_t close = obj ? '}' : ']';
    cur s;
    size_t n;
    int esc;
    if (depth > MAX_DEPTH)
        return NULL;
    p = ws(p + 1, end);
    if (p < end && *p == close)
        return p + 1;
    for (;;) {
        if (obj) {
            if (p >= end || *p != '"' || (p = scan_str(p, end, &s, &n, &esc)) == NULL)
                return NULL;
            p = ws(p, end);
            if (p >= end || *p != ':')
                return NULL;
            p++;
        }
        if ((p = skip_value(p, end, depth)) == NULL)
            return NULL;
        p = ws(p, end);
        if (p < end && *p == ',') {
            p = ws(p + 1, end);
            continue;
        }
        if (p < end && *p == close)
            return p + 1;
        return NULL;
    }
}

/* Any value (whitespace first), validated and passed over. */
static cur skip_value(cur p, cur end, int depth)
{
    cur s;
    size_t n;
    int flag;
    p = ws(p, end);
    if (p >= end)
        return NULL;
    switch (*p) {
    case '"':
        return scan_str(p, end, &s, &n, &flag);
    case '{': case '[':
        return skip_container(p, end, depth + 1);
    case 't':
        return is_lit(p, end, "true", 4) ? p + 4 : NULL;
    case 'f':
        return is_lit(p, end, "false", 5) ? p + 5 : NULL;
    case 'n':
        return is_lit(p, end, "null", 4) ? p + 4 : NULL;
    default:
        s = p;
        p = scan_num(p, end, &flag);
        /* Integers the general reader converts must stay below Python's digit limit. */
        if (p != NULL && flag && p - s > MAX_INT_CHARS)
            return NULL;
        return p;
    }
}

/* A member key at p (after whitespace): a string without escapes. Returns the
 * position of its value (after ':' and whitespace). */
static inline cur member_key(cur p, cur end, cur *k, size_t *kn)
{
    int esc;
    if (p >= end || *p != '"' || (p = scan_str(p, end, k, kn, &esc)) == NULL || esc)
        return NULL;
    if (p < end && *p == ':')
        return ws(p + 1, end);
    p = ws(p, end);
    if (p >= end || *p != ':')
        return NULL;
    return ws(p + 1, end);
}

/* A member's value at p (key k, kn bytes) read into ctx: the position after it,
 * NULL for slow; *bit: the field's bit if it may appear only once. */
typedef cur (*member_fn)(void *ctx, cur p, cur end, cur k, size_t kn, unsigned *bit);

/* The members of an object from p, a member's key (after its '{' or a ',', and
 * whitespace), every value read by fn: the position after the object's '}', or
 * NULL (slow, or a once-only field repeated). *seen collects the bits. */
static inline cur members_from(cur p, cur end, member_fn fn, void *ctx, unsigned *seen)
{
    cur k;
    size_t kn;
    unsigned bit;
    for (;;) {
        bit = 0;
        if ((p = member_key(p, end, &k, &kn)) == NULL || (p = fn(ctx, p, end, k, kn, &bit)) == NULL
                || (*seen & bit))
            return NULL;
        *seen |= bit;
        p = ws(p, end);
        if (p < end && *p == '}')
            return p + 1;
        if (p >= end || *p != ',')
            return NULL;
        p = ws(p + 1, end);
    }
}

/* The object at p ('{'), every member's value read by fn: the position after
 * it, or NULL (slow, or a once-only field repeated). *seen collects the bits. */
static inline cur each_member(cur p, cur end, member_fn fn, void *ctx, unsigned *seen)
{
    p = ws(p + 1, end);
    if (p < end && *p == '}')
        return p + 1;
    return members_from(p, end, fn, ctx, seen);
}

#define KEY_IS(k, n, lit) ((n) == sizeof(lit) - 1 && bytes_eq((k), (lit), sizeof(lit) - 1))

/* ---------------------------------------------------------------- RegisterBrokerBody */

typedef struct {
    cur data, end;
    rb_body *out;
    int nomem;
    rb_partial *partial;        /* what was scanned while the body arrived, or NULL */
} rb_ctx;

static cur rb_int32(cur p, cur end, int32_t *out)
{
    int64_t v;
    if ((p = parse_int(p, end, INT32_MIN, INT32_MAX, &v)) != NULL)
        *out = (int32_t)v;
    return p;
}

/* A member of a TopicConfig object. Any field the checks use: at most once. */
static cur rb_topic_field(void *ctx, cur p, cur end, cur k, size_t kn, unsigned *bit)
{
    rmq_topic_rec *t = ctx;
    cur s;
    int esc;
    switch (kn) {
    case 4:
        if (bytes_eq(k, "perm", 4))
            return *bit = 1, rb_int32(p, end, &t->perm);
        break;
    case 9:
        if (bytes_eq(k, "topicName", 9)) {
            *bit = 2;
            if (p >= end || *p != '"' || (p = scan_str(p, end, &s, &t->name_len, &esc)) == NULL || esc)
                return NULL;
            t->name = (const char *)s;
            return p;
        }
        break;
    case 13:
        if (bytes_eq(k, "readQueueNums", 13))
            return *bit = 4, rb_int32(p, end, &t->read);
        break;
    case 14:
        if (bytes_eq(k, "writeQueueNums", 14))
            return *bit = 8, rb_int32(p, end, &t->write);
        break;
    case 12:
        if (bytes_eq(k, "topicSysFlag", 12))
            return *bit = 16, rb_int32(p, end, &t->sysflag);
        break;
    }
    return skip_value(p, end, 4);
}

/* 1 if two topics share a map key (the general reader keeps one: slow), 0 if
 * not, -1 out of memory. Keys are raw bytes without escapes in valid UTF-8, so
 * equal strings are equal bytes. The keys come from the broker: hashed with
 * the keyed hash (hash.h), so that none can be chosen to share a probe run. */
static int rb_has_duplicate_keys(const rb_body *b)
{
    size_t size = 16, mask, i, j;
    uint32_t *slots;
    int dup = 0;
    if (b->ntopics < 2)
        return 0;
    while (size < 2 * b->ntopics)
        size <<= 1;
    mask = size - 1;
    if ((slots = calloc(size, sizeof *slots)) == NULL)
        return -1;
    for (i = 0; i < b->ntopics && !dup; i++) {
        const rmq_topic_rec *t = &b->topics[i];
        for (j = rmq_hash(t->key, t->key_len) & mask; slots[j]; j = (j + 1) & mask) {
            const rmq_topic_rec *u = &b->topics[slots[j] - 1];
            if (u->key_len == t->key_len && memcmp(u->key, t->key, t->key_len) == 0) {
                dup = 1;
                break;
            }
        }
        slots[j] = (uint32_t)(i + 1);
    }
    free(slots);
    return dup;
}

/* RB_OK, or (out freed) RB_SLOW for duplicate keys, RB_NOMEM. */
static int rb_no_duplicates(rb_body *out)
{
    int dup = rb_has_duplicate_keys(out);
    if (dup)
        rb_body_free(out);
    return dup < 0 ? RB_NOMEM : dup ? RB_SLOW : RB_OK;
}

/* Room for cap records in b (cap > b->cap), the ones there kept; 0, or -1 (b
 * unchanged). A registration's records are big buffers (10,000 topics: half a
 * megabyte), taken from the pool (bufpool.h): from malloc each would be a fresh
 * mapping, its pages faulted in again every registration (bench/README.md). */
static int rb_grow(rb_body *b, size_t cap)
{
    size_t bytes;
    if (cap > UINT32_MAX - 1)
        return -1;
    rmq_topic_rec *nt = rp_take(cap * sizeof *nt, &bytes);
    if (!nt)
        return -1;
    if (b->ntopics)
        memcpy(nt, b->topics, b->ntopics * sizeof *nt);
    rp_give(b->topics, b->cap * sizeof *b->topics);
    b->topics = nt;
    b->cap = bytes / sizeof *nt;
    return 0;
}

/* topicConfigTable at p ('{'): key -> TopicConfig object. */

/* Once per topic, the registration hot path: flattened, so that its copy of
 * each_member calls rb_topic_field directly, not through the pointer. */
#if defined(__GNUC__)
#define FLATTEN __attribute__((flatten))
#else
#define FLATTEN
#endif

/* A member of topicConfigTable: key -> TopicConfig object. */
static FLATTEN cur rb_table_entry(void *ctx, cur p, cur end, cur k, size_t kn, unsigned *bit)
{
    rb_ctx *c = ctx;
    rb_body *b = c->out;
    rmq_topic_rec *t;
    unsigned seen = 0;
    (void)bit;
    if (p >= end || *p != '{')          /* a topic config must be an object */
        return NULL;
    if (b->ntopics == b->cap && rb_grow(b, b->cap ? 2 * b->cap : 64) < 0) {
        c->nomem = 1;
        return NULL;
    }
    t = &b->topics[b->ntopics];
    t->key = t->name = (const char *)k;
    t->key_len = t->name_len = kn;
    t->perm = 6;
    t->read = t->write = 16;
    t->sysflag = 0;
    if ((p = each_member(p, end, rb_topic_field, t, &seen)) != NULL)
        b->ntopics++;
    return p;
}

/* A member of dataVersion: counter, stateVersion, timestamp (int64 or null;
 * the last of repeated fields wins, as in the general reader's dict). */
static cur rb_version_field(void *ctx, cur p, cur end, cur k, size_t kn, unsigned *bit)
{
    rb_body *b = ((rb_ctx *)ctx)->out;
    int64_t *field = NULL;
    (void)bit;
    if (KEY_IS(k, kn, "counter"))
        field = &b->counter;
    else if (KEY_IS(k, kn, "stateVersion"))
        field = &b->state_version;
    else if (KEY_IS(k, kn, "timestamp"))
        field = &b->timestamp;
    else
        return skip_value(p, end, 3);
    if (field == &b->timestamp)
        b->has_timestamp = !is_lit(p, end, "null", 4);
    if (is_lit(p, end, "null", 4)) {
        *field = 0;
        return p + 4;
    }
    return parse_int(p, end, INT64_MIN, INT64_MAX, field);
}

/* null, or an empty object (open '{') or array ('['): topicQueueMappingInfoMap
 * and filterServerList, whose non-empty forms go to Python. */
static cur null_or_empty(cur p, cur end, uint8_t open)
{
    if (is_lit(p, end, "null", 4))
        return p + 4;
    if (p >= end || *p != open)
        return NULL;
    p = ws(p + 1, end);
    return p < end && *p == open + 2 ? p + 1 : NULL;     /* '}' and ']' follow 2 after */
}

/* A member value that is null (absent) or an object whose members fn reads:
 * NULL (slow) for anything else. */
static inline cur null_or_object(cur p, rb_ctx *c, member_fn fn)
{
    unsigned seen = 0;
    if (is_lit(p, c->end, "null", 4))
        return p + 4;
    return p < c->end && *p == '{' ? each_member(p, c->end, fn, c, &seen) : NULL;
}

/* topicConfigTable's value at p: read from where rb_partial_step left this very
 * table (its entries taken over), else from its start. */
static cur rb_topic_table(cur p, rb_ctx *c)
{
    rb_partial *s = c->partial;
    unsigned seen = 0;
    if (s == NULL || !rb_partial_has_entries(s) || c->out->ntopics
            || s->base != (const char *)c->data || s->total != (size_t)(c->end - c->data)
            || p != c->data + s->table_open)
        return null_or_object(p, c, rb_table_entry);
    rp_give(c->out->topics, c->out->cap * sizeof *c->out->topics);
    c->out->topics = s->body.topics;
    c->out->ntopics = s->body.ntopics;
    c->out->cap = s->body.cap;
    s->body.topics = NULL;
    s->body.ntopics = s->body.cap = 0;
    s->state = RBP_OFF;
    return members_from(ws(c->data + s->at, c->end), c->end, rb_table_entry, c, &seen);
}

/* A member of topicConfigSerializeWrapper. */
static cur rb_wrapper_field(void *ctx, cur p, cur end, cur k, size_t kn, unsigned *bit)
{
    if (KEY_IS(k, kn, "topicConfigTable"))
        return *bit = 1, rb_topic_table(p, ctx);
    if (KEY_IS(k, kn, "dataVersion"))
        return *bit = 2, null_or_object(p, ctx, rb_version_field);
    if (KEY_IS(k, kn, "topicQueueMappingInfoMap"))
        return *bit = 4, null_or_empty(p, end, '{');
    return skip_value(p, end, 2);
}

/* A member of the top-level RegisterBrokerBody object. */
static cur rb_top_field(void *ctx, cur p, cur end, cur k, size_t kn, unsigned *bit)
{
    if (KEY_IS(k, kn, "topicConfigSerializeWrapper"))
        return *bit = 1, null_or_object(p, ctx, rb_wrapper_field);
    if (KEY_IS(k, kn, "filterServerList"))
        return *bit = 2, null_or_empty(p, end, '[');
    return skip_value(p, end, 1);
}

void rb_body_free(rb_body *b)
{
    rp_give(b->topics, b->cap * sizeof *b->topics);
    b->topics = NULL;
    b->ntopics = 0;
    b->cap = 0;
}

int rb_scan_register_body(const char *data, size_t n, rb_body *out)
{
    return rb_scan_register_body_from(data, n, NULL, out);
}

int rb_scan_register_body_from(const char *data, size_t n, rb_partial *partial, rb_body *out)
{
    cur p = (cur)data, end = p + n;
    rb_ctx c = {p, end, out, 0, partial};
    memset(out, 0, sizeof *out);
    /* A zlib stream is the compressed form: not ours. */
    if (rmq_is_zlib(p, n))
        return RB_SLOW;
    p = ws(p, end);
    if (p >= end || *p != '{')
        return RB_SLOW;
    /* Reserve for the common topic size (about 140 bytes each) up front. */
    if (rb_grow(out, n / 128 + 16) < 0)
        return RB_NOMEM;
    p = null_or_object(p, &c, rb_top_field);
    if (p != NULL)
        p = ws(p, end);
    if (p == NULL || p != end) {         /* slow, or extra data after the document */
        rb_body_free(out);
        return c.nomem ? RB_NOMEM : RB_SLOW;
    }
    return rb_no_duplicates(out);
}

/* ---------------------------------------------------------------- RegisterBrokerBody, as it arrives */

/* The position after topicConfigTable's '{' in [p, end), reached through the
 * top-level object and topicConfigSerializeWrapper (their other members skipped:
 * rb_scan_register_body_from reads them); NULL while it is not there, or never. */
static cur rbp_find_table(cur p, cur end)
{
    cur k;
    size_t kn;
    int level = 0;                  /* 0: the top-level object; 1: the wrapper */
    p = ws(p, end);
    if (p >= end || *p != '{')
        return NULL;
    p = ws(p + 1, end);
    for (;;) {
        if ((p = member_key(p, end, &k, &kn)) == NULL)
            return NULL;
        if (level == 0 ? KEY_IS(k, kn, "topicConfigSerializeWrapper")
                       : KEY_IS(k, kn, "topicConfigTable")) {
            if (p >= end || *p != '{')
                return NULL;
            if (level++ == 1)
                return p + 1;
            p = ws(p + 1, end);
            continue;
        }
        if ((p = skip_value(p, end, 1 + level)) == NULL)
            return NULL;
        p = ws(p, end);
        if (p >= end || *p != ',')
            return NULL;
        p = ws(p + 1, end);
    }
}

void rb_partial_init(rb_partial *s, size_t total)
{
    memset(s, 0, sizeof *s);
    s->total = total;
    s->state = RBP_TABLE;
}

void rb_partial_free(rb_partial *s)
{
    rb_body_free(&s->body);
    s->state = RBP_OFF;
}

void rb_partial_move(rb_partial *s, const char *body)
{
    /* (as integers: the old and the new place are different objects) */
    uintptr_t from = (uintptr_t)s->base, to = (uintptr_t)body;
    if (s->base != NULL && from != to)
        for (size_t i = 0; i < s->body.ntopics; i++) {
            rmq_topic_rec *t = &s->body.topics[i];
            t->key = (const char *)((uintptr_t)t->key - from + to);
            t->name = (const char *)((uintptr_t)t->name - from + to);
        }
    s->base = body;
}

void rb_partial_step(rb_partial *s, const char *body, size_t avail)
{
    cur data = (cur)body, end = data + avail, p, q, k;
    rb_ctx c = {data, end, &s->body, 0, NULL};
    size_t kn, before;
    unsigned bit;
    if (s->state == RBP_OFF || avail < s->next_step_at || avail > s->total)
        return;
    rb_partial_move(s, body);
    if (s->state == RBP_TABLE) {
        if ((p = rbp_find_table(data, end)) == NULL) {
            s->next_step_at = 2 * avail;       /* (what is not the table is scanned ~twice at most) */
            return;
        }
        if (rb_grow(&s->body, avail / 128 + 16) < 0) {   /* (grown as entries come) */
            rb_partial_free(s);
            return;
        }
        s->table_open = (size_t)(p - 1 - data);
        s->at = (size_t)(p - data);
        s->state = RBP_ENTRIES;
    }
    /* Each entry that ends, with its ',', inside what is there: taken. The one that
     * does not (cut, the last one, or not the common shape) is left to the next step
     * or to the whole body's scan. */
    for (p = data + s->at;; p = q + 1, s->at = (size_t)(p - data)) {
        bit = 0;
        before = s->body.ntopics;
        q = member_key(ws(p, end), end, &k, &kn);
        if (q == NULL || (q = rb_table_entry(&c, q, end, k, kn, &bit)) == NULL)
            break;
        q = ws(q, end);
        if (q >= end || *q != ',') {
            s->body.ntopics = before;
            break;
        }
        if (s->body.ntopics * sizeof *s->body.topics > avail / 2) {
            /* Entries far smaller than a broker's (~140 bytes): their records would
             * weigh more than the bytes received (records take 48), for every
             * connection sending one. The whole body's scan reads them, as any. */
            rb_partial_free(s);
            return;
        }
    }
    if (c.nomem) {
        rb_partial_free(s);
        return;
    }
    /* What was read in vain is read again only once as many new bytes came: a
     * malformed or huge entry costs at most about twice its bytes. */
    s->next_step_at = avail + (avail - s->at);
}

/* ---------------------------------------------------------------- RegisterBrokerBody (compressed) */

/* Java's compressed RegisterBrokerBody, inflated: [len + dataVersion JSON]
 * [topic count][per topic: len + "name read write perm filterType [attributes]"]
 * [len + filterServerList JSON][optional: mapping count + mappings]. Read as
 * rmq._wire.decode_inflated + _checked_body read it; slow for anything that
 * is not plain (mappings, filter servers, duplicate names, odd numbers). */

/* The next [int32 length][bytes] chunk at *pp: its bytes, NULL if it does not fit. */
static cur cz_chunk(cur *pp, cur end, size_t *n)
{
    cur p = *pp;
    int32_t k;
    if (end - p < 4)
        return NULL;
    k = rmq_be32(p);
    p += 4;
    if (k < 0 || k > end - p)
        return NULL;
    *n = (size_t)k;
    *pp = p + k;
    return p;
}

/* Integer.parseInt as rmq._wire's decode_inflated reads it: optional sign, ASCII
 * digits (leading zeros allowed), int32 range. 0: not one (the general path
 * raises). */
static int cz_int32(cur s, size_t n, int32_t *out)
{
    size_t i = 0;
    int64_t v = 0;
    int neg = 0;
    if (n > 0 && (s[0] == '+' || s[0] == '-')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (i == n)
        return 0;
    while (i < n - 1 && s[i] == '0')
        i++;
    if (n - i > 10)
        return 0;
    for (; i < n; i++) {
        if (!is_digit(s[i]))
            return 0;
        v = v * 10 + (s[i] - '0');
    }
    if (neg)
        v = -v;
    if (v < INT32_MIN || v > INT32_MAX)
        return 0;
    *out = (int32_t)v;
    return 1;
}

/* One topic line (TopicConfig.decode, as rmq._wire splits it). */
static int cz_topic_line(cur s, size_t n, rmq_topic_rec *t)
{
    cur f[6];
    size_t fl[6], at = 0, i, k = 0;
    for (i = 0; i < n; i++)
        if (s[i] >= 0x80) {                  /* the whole line must be UTF-8 */
            if (!valid_utf8(s, n))
                return 0;
            break;
        }
    while (n > 0 && s[n - 1] == ' ')
        n--;
    for (i = 0; i <= n; i++)
        if (i == n || s[i] == ' ') {
            if (k < 6) {
                f[k] = s + at;
                fl[k] = i - at;
            }
            k++;
            at = i + 1;
        }
    if (k < 5)
        return 0;
    if (k >= 6) {                /* attributes: a JSON object (values unused) */
        cur a = f[5], aend = f[5] + fl[5];
        if (fl[5] == 0 || *a != '{' || (a = skip_container(a, aend, 1)) == NULL
                || ws(a, aend) != aend)
            return 0;
    }
    if (!cz_int32(f[3], fl[3], &t->perm) || !cz_int32(f[1], fl[1], &t->read)
            || !cz_int32(f[2], fl[2], &t->write))
        return 0;
    t->key = t->name = (const char *)f[0];
    t->key_len = t->name_len = fl[0];
    t->sysflag = 0;
    return 1;
}

int rb_scan_compressed_body(const char *data, size_t n, rb_body *out)
{
    cur p = (cur)data, end = p + n, s, q;
    size_t k;
    int32_t count, i;
    rb_ctx c = {p, end, out, 0, NULL};
    memset(out, 0, sizeof *out);
    /* dataVersion: null or an object (other JSON the general path reads
     * through "or {}" or rejects: slow). */
    if ((s = cz_chunk(&p, end, &k)) == NULL)
        return RB_SLOW;
    c.end = s + k;
    q = null_or_object(ws(s, c.end), &c, rb_version_field);
    if (q == NULL || ws(q, c.end) != c.end)
        return RB_SLOW;
    c.end = end;
    if (end - p < 4)
        return RB_SLOW;
    count = rmq_be32(p);
    p += 4;
    if (count < 0 || count > (end - p) / 4)
        return RB_SLOW;
    if (count > 0 && rb_grow(out, (size_t)count) < 0)
        return RB_NOMEM;
    for (i = 0; i < count; i++) {
        if ((s = cz_chunk(&p, end, &k)) == NULL || !cz_topic_line(s, k, &out->topics[i])) {
            rb_body_free(out);
            return RB_SLOW;
        }
        out->ntopics++;
    }
    /* filterServerList: null or [] (addresses go to Python). */
    if ((s = cz_chunk(&p, end, &k)) == NULL || (q = null_or_empty(ws(s, s + k), s + k, '[')) == NULL
            || ws(q, s + k) != s + k)
        goto slow;
    /* 5.x topic queue mappings: none, or a count of 0 (the rest is ignored,
     * as by the general path). */
    if (end - p >= 4 && rmq_be32(p) != 0)
        goto slow;
    return rb_no_duplicates(out);
slow:
    rb_body_free(out);
    return RB_SLOW;
}

/* ---------------------------------------------------------------- route requests */

/* acceptStandardJsonOnly as codec.pxi's _is_true reads it: "true" in any ASCII
 * case (non-ASCII values: slow, -1). */
static int rq_is_true(cur s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] >= 0x80)
            return -1;
    return n == 4 && (s[0] | 0x20) == 't' && (s[1] | 0x20) == 'r' && (s[2] | 0x20) == 'u'
           && (s[3] | 0x20) == 'e';
}

enum { RQ_TOPIC = 1, RQ_ACCEPT = 2, RQ_ZONE_MODE = 4, RQ_ZONE_NAME = 8 };

/* Which ext field a key names: RQ_TOPIC, RQ_ACCEPT, RQ_ZONE_MODE, RQ_ZONE_NAME or 0. */
static inline int rq_ext_key(cur k, size_t n)
{
    if (KEY_IS(k, n, "topic"))
        return RQ_TOPIC;
    if (KEY_IS(k, n, "acceptStandardJsonOnly"))
        return RQ_ACCEPT;
    if (KEY_IS(k, n, "__ZONE_MODE"))
        return RQ_ZONE_MODE;
    if (KEY_IS(k, n, "__ZONE_NAME"))
        return RQ_ZONE_NAME;
    return 0;
}

/* A known ext field's string value into out: 1, or 0 for a value the general
 * path must read (a non-ASCII flag or zone, a zone longer than RQ_MAX_ZONE). */
static int rq_ext_value(rq_route *out, int which, cur s, size_t n)
{
    int t;
    switch (which) {
    case RQ_TOPIC:
        out->topic = (const char *)s;
        out->topic_len = n;
        return 1;
    case RQ_ACCEPT:
    case RQ_ZONE_MODE:
        if ((t = rq_is_true(s, n)) < 0)
            return 0;
        *(which == RQ_ACCEPT ? &out->accept_standard : &out->zone_mode) = t;
        return 1;
    case RQ_ZONE_NAME:
        if (n > RQ_MAX_ZONE)
            return 0;
        for (size_t i = 0; i < n; i++)
            if (s[i] >= 0x80)
                return 0;
        out->zone = (const char *)s;
        out->zone_len = n;
        return 1;
    }
    return 1;
}

/* A member of the JSON extFields. The known ones must be plain strings (the two
 * flags may be booleans), at most once. */
static cur rq_ext_field(void *ctx, cur p, cur end, cur k, size_t kn, unsigned *bit)
{
    rq_route *out = ctx;
    cur s;
    size_t n;
    int which = rq_ext_key(k, kn), esc, is_int, t;
    *bit = (unsigned)which;
    if (p >= end)
        return NULL;
    if (*p == '"') {
        if ((p = scan_str(p, end, &s, &n, &esc)) == NULL || (which && esc))
            return NULL;
        return rq_ext_value(out, which, s, n) ? p : NULL;
    }
    if (which == RQ_ACCEPT || which == RQ_ZONE_MODE) {
        t = is_lit(p, end, "true", 4) ? 1 : is_lit(p, end, "false", 5) ? 0 : -1;
        if (t >= 0) {
            *(which == RQ_ACCEPT ? &out->accept_standard : &out->zone_mode) = t;
            return p + 5 - t;
        }
    }
    if (which)
        return NULL;
    if (*p == '-' || is_digit(*p))
        return scan_num(p, end, &is_int);            /* kept as its text */
    if (is_lit(p, end, "true", 4) || is_lit(p, end, "null", 4))
        return p + 4;
    return is_lit(p, end, "false", 5) ? p + 5 : NULL;   /* objects, arrays: HeaderError */
}

/* A JSON int32 header field or null (0). */
static cur rq_int32(cur p, cur end, int32_t *out)
{
    if (is_lit(p, end, "null", 4)) {
        *out = 0;
        return p + 4;
    }
    return rb_int32(p, end, out);
}

/* A JSON string header field (escapes validated) or null. */
static cur rq_opt_string(cur p, cur end)
{
    cur s;
    size_t n;
    int esc;
    if (is_lit(p, end, "null", 4))
        return p + 4;
    if (p >= end || *p != '"')
        return NULL;
    return scan_str(p, end, &s, &n, &esc);
}

typedef struct {
    rq_route *out;
    int32_t code, flag;
    unsigned ext_seen;
} rq_ctx;

/* A member of the JSON header: each known field at most once. */
static cur rq_header_field(void *ctx, cur p, cur end, cur k, size_t kn, unsigned *bit)
{
    rq_ctx *c = ctx;
    if (KEY_IS(k, kn, "code"))
        return *bit = 1, rq_int32(p, end, &c->code);
    if (KEY_IS(k, kn, "opaque"))
        return *bit = 2, rq_int32(p, end, &c->out->opaque);
    if (KEY_IS(k, kn, "flag"))
        return *bit = 4, rq_int32(p, end, &c->flag);
    if (KEY_IS(k, kn, "version"))
        return *bit = 8, rq_int32(p, end, &c->out->version);
    if (KEY_IS(k, kn, "extFields")) {
        *bit = 16;      /* null (no extFields) or not an object (a HeaderError): slow */
        return p < end && *p == '{' ? each_member(p, end, rq_ext_field, c->out, &c->ext_seen) : NULL;
    }
    if (KEY_IS(k, kn, "language"))
        return *bit = 32, rq_opt_string(p, end);
    if (KEY_IS(k, kn, "remark"))
        return *bit = 64, rq_opt_string(p, end);
    return skip_value(p, end, 0);
}

/* The JSON header [p, end), whole, into c: 1, or 0 (slow). */
static inline int rq_json_header(cur p, cur end, rq_ctx *c)
{
    unsigned seen = 0;
    p = ws(p, end);
    return p < end && *p == '{' && (p = each_member(p, end, rq_header_field, c, &seen)) != NULL
           && ws(p, end) == end;
}

static FLATTEN int rq_json(cur p, cur end, rq_route *out)
{
    rq_ctx c = {out, 0, 0, 0};
    return rq_json_header(p, end, &c) && c.code == RMQ_GET_ROUTEINFO_BY_TOPIC
           && (c.flag & 3) == 0 && (c.ext_seen & RQ_TOPIC);
}

static int rq_binary(cur d, size_t n, rq_route *out)
{
    rmq_bheader h;
    int seen = 0, which, rc;
    cur k, v;
    /* No ext fields, or bytes after them (the general decoder ignores those): unusual. */
    if (rmq_bh_start(d, n, &h) != RMQ_BH_OK || h.code != RMQ_GET_ROUTEINFO_BY_TOPIC || (h.flag & 3)
            || h.ext_len == 0 || h.end != n || !valid_utf8(d + RMQ_BH_REMARK_AT, (size_t)h.remark_len))
        return 0;
    out->version = h.version;
    out->opaque = h.opaque;
    while ((rc = rmq_bh_next(d, &h)) == RMQ_BH_FIELD) {
        k = d + h.at + 2;
        v = k + h.klen + 4;
        which = rq_ext_key(k, (size_t)h.klen);
        if ((seen & which) || !valid_utf8(k, (size_t)h.klen) || !valid_utf8(v, (size_t)h.vlen))
            return 0;
        seen |= which;
        if (!rq_ext_value(out, which, v, (size_t)h.vlen))
            return 0;
    }
    return rc == RMQ_BH_END && (seen & RQ_TOPIC);
}

int rq_scan_route(const uint8_t *payload, size_t n, rq_route *out)
{
    uint32_t stype;
    size_t header_len;
    memset(out, 0, sizeof *out);
    if (n < 4)
        return 0;
    header_len = rmq_header_word(payload, &stype);
    if (header_len != n - 4)                     /* a body, or a header beyond the frame */
        return 0;
    out->serialize_type = (int)stype;
    if (stype == 0)
        return rq_json(payload + 4, payload + n, out);
    if (stype == 1)
        return rq_binary(payload + 4, header_len, out);
    return 0;
}

int rq_topic_hint(const uint8_t *payload, size_t n, const char **s, size_t *len)
{
    static const char key[] = "\"topic\":\"";
    uint32_t stype;
    if (n < 4 || rmq_header_word(payload, &stype) != n - 4 || stype != 0)
        return 0;
    cur p = payload + 4, end = payload + n, o, q;
    if (p == end || (o = memchr(p + 1, '{', (size_t)(end - p - 1))) == NULL ||
        (size_t)(end - o) <= sizeof key || memcmp(o + 1, key, sizeof key - 1) != 0)
        return 0;
    p = o + sizeof key;
    if ((q = memchr(p, '"', (size_t)(end - p))) == NULL)
        return 0;
    *s = (const char *)p;
    *len = (size_t)(q - p);
    return 1;
}

size_t rq_scan_request(const uint8_t *payload, size_t n, int32_t *code)
{
    uint32_t stype;
    size_t header_len;
    if (n < 4)
        return 0;
    header_len = rmq_header_word(payload, &stype);
    if (header_len > RQ_MAX_REQUEST_HEADER)
        return RQ_UNUSUAL;
    if (header_len > n - 4)
        return 0;
    cur p = payload + 4, end = p + header_len;
    if (stype == 1) {
        rmq_bheader h;
        if (rmq_bh_start(p, header_len, &h) != RMQ_BH_OK || (h.flag & 3))
            return RQ_UNUSUAL;
        *code = h.code;
    } else if (stype == 0) {
        rq_route ignored;
        rq_ctx c = {&ignored, 0, 0, 0};
        memset(&ignored, 0, sizeof ignored);
        if (!rq_json_header(p, end, &c) || (c.flag & 3))
            return RQ_UNUSUAL;
        *code = c.code;
    } else {
        return RQ_UNUSUAL;
    }
    return 4 + header_len;
}

int rq_route_zone(const rq_route *req, char *out)
{
    int blank = 1;
    if (!req->zone_mode || !req->zone)
        return -1;
    for (size_t i = 0; i < req->zone_len; i++) {
        unsigned char c = (unsigned char)req->zone[i];
        /* Character.isWhitespace, in ASCII: \t to \r, the separators 28-31, space */
        blank &= (c >= 9 && c <= 13) || (c >= 28 && c <= 32);
        out[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
    return blank ? -1 : (int)req->zone_len;
}

/* ---- the answer */

/* encode_json_header's pieces (wire.h) for flag 1 (response), JAVA. */
static const char JSON_FLAG_LANG_OPAQUE[] = RMQ_JH_FLAG "1" RMQ_JH_LANGUAGE "\"JAVA\"" RMQ_JH_OPAQUE;
static const char JSON_REMARK[] = ",\"remark\":\"";
static const char JSON_TAIL[] = RMQ_JH_TAIL;

/* TOPIC_NOT_EXIST's remark around the topic (DefaultRequestProcessor /
 * ClientRequestProcessor: "No topic route info in name server for the topic: " +
 * topic + FAQUrl.suggestTodo(FAQUrl.APPLY_TOPIC_URL)), raw and as a JSON string's
 * inside (its newline escaped). */
static const char NF_PREFIX[] = "No topic route info in name server for the topic: ";
static const char NF_SUFFIX[] = "\nSee http://rocketmq.apache.org/docs/faq/ for further details.";
static const char NF_SUFFIX_JSON[] = "\\nSee http://rocketmq.apache.org/docs/faq/ for further details.";

/* Decimal digits of v, with its sign: rmq_fmt_int's length without writing. */
static inline size_t dec_len(int64_t v)
{
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    size_t n = 1 + (v < 0);
    while (u >= 10) {
        u /= 10;
        n++;
    }
    return n;
}

/* The length of an answer's header (rq_header's): code 0, or TOPIC_NOT_EXIST with
 * the remark naming req's topic. Sized apart from the writing: a route answer is
 * sized, then written, on the hot path. */
static size_t rq_header_len(const rq_route *req, int stype, int code)
{
    int nf = code != 0;
    size_t remark = nf ? sizeof NF_PREFIX - 1 + req->topic_len : 0;
    if (stype == 1)
        return RMQ_BH_FIXED + remark + (nf ? sizeof NF_SUFFIX - 1 : 0);
    remark += nf ? sizeof JSON_REMARK - 1 + sizeof NF_SUFFIX_JSON - 1 + 1 : 0;
    return sizeof RMQ_JH_CODE - 1 + dec_len(code) + sizeof JSON_FLAG_LANG_OPAQUE - 1
           + dec_len(req->opaque) + remark + sizeof JSON_TAIL - 1
           + dec_len(RMQ_CURRENT_VERSION) + 1;
}

/* Write that header at out; returns its length. */
static size_t rq_header(char *out, const rq_route *req, int stype, int code)
{
    int nf = code != 0;
    char *p = out;
    if (stype == 1) {
        size_t remark = nf ? sizeof NF_PREFIX - 1 + req->topic_len + sizeof NF_SUFFIX - 1 : 0;
        p[0] = (char)((code >> 8) & 0xFF);
        p[1] = (char)(code & 0xFF);
        p[2] = 0;                                 /* JAVA */
        p[3] = (char)((RMQ_CURRENT_VERSION >> 8) & 0xFF);
        p[4] = (char)(RMQ_CURRENT_VERSION & 0xFF);
        rmq_put_be32(p + 5, (uint32_t)req->opaque);
        rmq_put_be32(p + 9, 1);                   /* flag: response */
        rmq_put_be32(p + RMQ_BH_REMARK_AT - 4, (uint32_t)remark);
        p += RMQ_BH_REMARK_AT;
        if (nf) {
            memcpy(p, NF_PREFIX, sizeof NF_PREFIX - 1);
            p += sizeof NF_PREFIX - 1;
            memcpy(p, req->topic, req->topic_len);
            p += req->topic_len;
            memcpy(p, NF_SUFFIX, sizeof NF_SUFFIX - 1);
            p += sizeof NF_SUFFIX - 1;
        }
        rmq_put_be32(p, 0);                       /* no extFields */
        p += 4;
    } else {
        memcpy(p, RMQ_JH_CODE, sizeof RMQ_JH_CODE - 1);
        p += sizeof RMQ_JH_CODE - 1;
        p += rmq_fmt_int(p, code);
        memcpy(p, JSON_FLAG_LANG_OPAQUE, sizeof JSON_FLAG_LANG_OPAQUE - 1);
        p += sizeof JSON_FLAG_LANG_OPAQUE - 1;
        p += rmq_fmt_int(p, req->opaque);
        if (nf) {
            memcpy(p, JSON_REMARK, sizeof JSON_REMARK - 1);
            p += sizeof JSON_REMARK - 1;
            memcpy(p, NF_PREFIX, sizeof NF_PREFIX - 1);
            p += sizeof NF_PREFIX - 1;
            memcpy(p, req->topic, req->topic_len);    /* rq_not_found_here: nothing to escape */
            p += req->topic_len;
            memcpy(p, NF_SUFFIX_JSON, sizeof NF_SUFFIX_JSON - 1);
            p += sizeof NF_SUFFIX_JSON - 1;
            *p++ = '"';
        }
        memcpy(p, JSON_TAIL, sizeof JSON_TAIL - 1);
        p += sizeof JSON_TAIL - 1;
        p += rmq_fmt_int(p, RMQ_CURRENT_VERSION);
        *p++ = '}';
    }
    RMQ_ASSERT((size_t)(p - out) == rq_header_len(req, stype, code));
    return (size_t)(p - out);
}

static ssize_t rq_write_answer(char *out, size_t cap, const rq_route *req, int stype, int code,
                               const char *body, size_t body_len)
{
    size_t header_len = rq_header_len(req, stype, code), size = 8 + header_len + body_len;
    if (size > cap || size - 4 > (size_t)INT32_MAX - 4)
        return -1;
    rmq_put_be32(out, (uint32_t)(size - 4));
    rmq_put_be32(out + 4, ((uint32_t)(stype == 1) << 24) | (uint32_t)header_len);
    rq_header(out + 8, req, stype, code);
    if (body_len)
        memcpy(out + 8 + header_len, body, body_len);
    return (ssize_t)size;
}

size_t rq_route_answer_size(const rq_route *req, int stype, size_t body_len)
{
    return 8 + rq_header_len(req, stype, 0) + body_len;
}

ssize_t rq_write_route_answer(char *out, size_t cap, const rq_route *req, int stype,
                              const char *body, size_t body_len)
{
    return rq_write_answer(out, cap, req, stype, 0, body, body_len);
}

int rq_not_found_here(const rq_route *req)
{
    /* Printable ASCII without '"' and '\\': the same bytes in a JSON string, in
     * a binary header and in the general path's str. The rest goes there. */
    for (size_t i = 0; i < req->topic_len; i++) {
        unsigned char c = (unsigned char)req->topic[i];
        if (c < 0x20 || c > 0x7E || c == '"' || c == '\\')
            return 0;
    }
    return 1;
}

size_t rq_not_found_answer_size(const rq_route *req, int stype)
{
    return 8 + rq_header_len(req, stype, RMQ_TOPIC_NOT_EXIST);
}

ssize_t rq_write_not_found_answer(char *out, size_t cap, const rq_route *req, int stype)
{
    RMQ_ASSERT(rq_not_found_here(req));
    return rq_write_answer(out, cap, req, stype, RMQ_TOPIC_NOT_EXIST, NULL, 0);
}
