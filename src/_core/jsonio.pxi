# JSON primitives shared by the header codec and the body codecs.
#
# Reader: a cursor over bytes (JReader) with exact JSON grammar (what Python's
# json module accepts, so the pure-Python reference and the core agree), plus
# Java's legacy unquoted integer keys where a body allows them.
# Writer: a growable C buffer (WBuf) with Java/fastjson-compatible escaping.

cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void* PyUnicode_DATA(object o)
    bint PyUnicode_IS_ASCII(object o)
    int PyUnicode_KIND(object o)
    Py_UCS4 PyUnicode_READ(int kind, void* data, Py_ssize_t index)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    const char* PyUnicode_AsUTF8AndSize(object o, Py_ssize_t* size) except NULL
    object PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)
    object PyFloat_FromString(object s)
    object PyLong_FromString(const char* s, char** pend, int base)
    object PyLong_FromLongLong(long long v)
    object PyBytes_FromStringAndSize(const char* s, Py_ssize_t size)
    char* PyBytes_AS_STRING(object o)
    int _PyBytes_Resize(PyObject** o, Py_ssize_t size) except -1
    int PyDict_SetItem(object d, object k, object v) except -1
    int PyList_Append(object l, object v) except -1
    bint PyBool_Check(object o)
    bint PyLong_CheckExact(object o)
    bint PyLong_Check(object o)
    bint PyUnicode_Check(object o)
    bint PyFloat_Check(object o)
    bint PyDict_Check(object o)
    bint PyList_Check(object o)
    bint PyTuple_Check(object o)
    long long PyLong_AsLongLongAndOverflow(object o, int* overflow) except? -1
    double PyFloat_AS_DOUBLE(object o)
    void Py_INCREF(PyObject* o)
    void Py_DECREF(PyObject* o)
    ctypedef struct PyObject
    PyObject* PyDict_GetItemWithError(object d, object k) except? NULL
    bint PyDict_CheckExact(object o)

from libc.string cimport memcpy, memcmp, memset
from libc.stdlib cimport malloc, calloc, realloc, free
from libc.stdint cimport int16_t, uint16_t, int32_t, uint32_t, int64_t, uint64_t, uint8_t, SIZE_MAX
from libc.math cimport isfinite

import json as _json

from rmq.protocol import (CURRENT_VERSION as _PROTOCOL_VERSION, RequestCode as _RequestCode,
                          ResponseCode as _ResponseCode, V4_9_4 as _PROTOCOL_V4_9_4)

from wire cimport *

if (RMQ_GET_ROUTEINFO_BY_TOPIC, RMQ_REGISTER_BROKER, RMQ_TOPIC_NOT_EXIST, RMQ_CURRENT_VERSION,
        RMQ_V4_9_4) != (
        _RequestCode.GET_ROUTEINFO_BY_TOPIC, _RequestCode.REGISTER_BROKER,
        _ResponseCode.TOPIC_NOT_EXIST, _PROTOCOL_VERSION, _PROTOCOL_V4_9_4):
    raise ImportError("wire.h's RMQ_GET_ROUTEINFO_BY_TOPIC / RMQ_REGISTER_BROKER / "
                      "RMQ_TOPIC_NOT_EXIST / RMQ_CURRENT_VERSION / RMQ_V4_9_4 differ from "
                      "rmq.protocol")

cdef enum:
    ERR_HEADER = 0
    ERR_BODY = 1
    MAX_DEPTH = 512

cdef struct JReader:
    const uint8_t* start
    const uint8_t* p
    const uint8_t* end
    int kind          # ERR_HEADER or ERR_BODY: which typed error to raise
    int depth
    bint legacy_keys  # accept Java's unquoted integer map keys


cdef int jr_fail(JReader* r, str what) except -1:
    cdef Py_ssize_t off = r.p - r.start
    msg = f"{what} at byte {off}"
    if r.kind == ERR_HEADER:
        raise HeaderError("invalid JSON header: " + msg)
    raise BodyError("invalid JSON body: " + msg)


cdef inline void jr_ws(JReader* r) noexcept nogil:
    cdef const uint8_t* p = r.p
    cdef const uint8_t* end = r.end
    while p < end and (p[0] == 32 or p[0] == 10 or p[0] == 13 or p[0] == 9):
        p += 1
    r.p = p


cdef inline int jr_expect(JReader* r, uint8_t c, str what) except -1:
    jr_ws(r)
    if r.p >= r.end or r.p[0] != c:
        jr_fail(r, "expected " + what)
    r.p += 1
    return 0


cdef inline object dget(object d, object key, object default):
    """d.get(key, default), without a method call for plain dicts."""
    cdef PyObject* v
    if PyDict_CheckExact(d):
        v = PyDict_GetItemWithError(d, key)
        return default if v == NULL else <object>v
    return d.get(key, default)


# ---- key cache: repeated short ASCII keys ("perm", "topicName", ...) are
# created once per process and shared, which saves most of the allocations of
# a 10,000-topic body (the same idea as orjson's key cache).

cdef enum:
    KEY_CACHE_SIZE = 1024
    KEY_CACHE_MAXLEN = 32

cdef PyObject* _key_cache[1024]


cdef inline uint32_t _fnv(const uint8_t* s, Py_ssize_t n) noexcept nogil:
    cdef uint32_t h = 2166136261u
    cdef Py_ssize_t i
    for i in range(n):
        h = (h ^ s[i]) * 16777619u
    return h


cdef object ascii_str(const uint8_t* s, Py_ssize_t n):
    """A str from pure-ASCII bytes (caller checked)."""
    cdef object u = PyUnicode_New(n, 127)
    memcpy(PyUnicode_DATA(u), s, n)
    return u


cdef object cached_key(const uint8_t* s, Py_ssize_t n):
    """A str for ASCII key bytes, shared through the key cache when short."""
    cdef uint32_t slot
    cdef PyObject* hit
    if n > KEY_CACHE_MAXLEN:
        return ascii_str(s, n)
    slot = _fnv(s, n) & (KEY_CACHE_SIZE - 1)
    hit = _key_cache[slot]
    if hit != NULL and PyUnicode_GET_LENGTH(<object>hit) == n and \
            memcmp(PyUnicode_DATA(<object>hit), s, n) == 0:
        return <object>hit
    u = ascii_str(s, n)
    Py_INCREF(<PyObject*>u)
    if hit != NULL:
        Py_DECREF(hit)
    _key_cache[slot] = <PyObject*>u
    return u


# ---- strings

cdef int jr_scan_string(JReader* r, const uint8_t** body, Py_ssize_t* n,
                        int* flags) except -1:
    """Find the string starting at r.p ('"'). flags: 1 non-ASCII, 2 has escapes."""
    cdef const uint8_t* p = r.p + 1
    cdef const uint8_t* end = r.end
    cdef uint8_t c
    cdef int f = 0
    body[0] = p
    while True:
        # Fast run over ordinary ASCII characters.
        while p < end:
            c = p[0]
            if c == 34 or c == 92 or c < 32 or c >= 128:
                break
            p += 1
        if p >= end:
            r.p = p
            jr_fail(r, "unterminated string")
        c = p[0]
        if c == 34:
            break
        if c >= 128:
            f |= 1
            p += 1
        elif c == 92:
            f |= 2
            p += 1
            if p >= end:
                r.p = p
                jr_fail(r, "unterminated string")
            p += 1   # the escaped character; its syntax is checked by the slow path
        else:
            r.p = p
            jr_fail(r, "control character in string")
    n[0] = p - body[0]
    flags[0] = f
    r.p = p + 1
    return 0


cdef object jr_decode_span(JReader* r, const uint8_t* s, Py_ssize_t n, int flags):
    """The str of a scanned string body; escapes go through Python's json for
    exact agreement with the reference (they are rare on the wire)."""
    if flags == 0:
        return ascii_str(s, n)
    try:
        text = PyUnicode_DecodeUTF8(<const char*>s, n, "strict")
    except UnicodeDecodeError:
        r.p = s
        jr_fail(r, "string is not valid UTF-8")
    if flags & 2:
        try:
            return _json.loads('"' + text + '"')
        except ValueError as e:
            r.p = s
            jr_fail(r, f"invalid escape in string ({e})")
    return text


cdef object jr_string(JReader* r):
    cdef const uint8_t* s
    cdef Py_ssize_t n
    cdef int flags
    jr_scan_string(r, &s, &n, &flags)
    return jr_decode_span(r, s, n, flags)


cdef object jr_key(JReader* r):
    """An object key: a string, or with legacy_keys an unquoted integer."""
    cdef const uint8_t* s
    cdef Py_ssize_t n
    cdef int flags
    cdef const uint8_t* p
    if r.p < r.end and r.p[0] == 34:
        jr_scan_string(r, &s, &n, &flags)
        if flags == 0:
            return cached_key(s, n)
        return jr_decode_span(r, s, n, flags)
    if r.legacy_keys and r.p < r.end and (r.p[0] == 45 or 48 <= r.p[0] <= 57):
        p = r.p
        if p[0] == 45:
            p += 1
        s = p
        while p < r.end and 48 <= p[0] <= 57:
            p += 1
        if p == s:
            jr_fail(r, "expected digits in an unquoted key")
        s = r.p
        r.p = p
        return ascii_str(s, p - s)
    jr_fail(r, "expected a string key")


# ---- numbers

cdef int jr_scan_number(JReader* r, bint* is_int) except -1:
    """Advance over a JSON number at r.p (exact grammar: wire.h's rmq_scan_num)."""
    cdef const uint8_t* at
    cdef int why, isi
    cdef const uint8_t* p = scan_num(r.p, r.end, &isi, &at, &why)
    is_int[0] = isi
    if p == NULL:
        r.p = at
        jr_fail(r, ("invalid number", "invalid number fraction", "invalid number exponent")[why - 1])
    r.p = p
    return 0


cdef object jr_number(JReader* r):
    cdef const uint8_t* s = r.p
    cdef bint is_int
    cdef Py_ssize_t n, i
    cdef long long v = 0
    cdef bint neg
    jr_scan_number(r, &is_int)
    n = r.p - s
    if is_int:
        neg = s[0] == 45
        if n - neg <= 18:
            for i in range(neg, n):
                v = v * 10 + (s[i] - 48)
            return PyLong_FromLongLong(-v if neg else v)
        try:
            return int(ascii_str(s, n))
        except ValueError:      # beyond sys.get_int_max_str_digits(), as json.loads
            r.p = s
            jr_fail(r, f"integer of {n} digits is too long")
    return PyFloat_FromString(ascii_str(s, n))


cdef int jr_int32(JReader* r, int32_t* out, str field) except -1:
    """An integer header field (null keeps the default), int32 range."""
    cdef const uint8_t* s
    cdef bint is_int, neg
    cdef Py_ssize_t n, i
    cdef long long v = 0
    jr_ws(r)
    if r.end - r.p >= 4 and memcmp(r.p, b"null", 4) == 0:
        r.p += 4
        return 0
    s = r.p
    if r.p >= r.end or not (r.p[0] == 45 or 48 <= r.p[0] <= 57):
        raise HeaderError(f"header field {field!r} is not an integer at byte {r.p - r.start}")
    jr_scan_number(r, &is_int)
    n = r.p - s
    if not is_int:
        raise HeaderError(f"header field {field!r} is not an integer: "
                          f"{PyUnicode_DecodeUTF8(<const char*>s, n, 'replace')}")
    neg = s[0] == 45
    if n - neg > 11:
        raise HeaderError(f"header field {field!r} out of int32 range: {ascii_str(s, n)}")
    for i in range(neg, n):
        v = v * 10 + (s[i] - 48)
    if neg:
        v = -v
    if v < -2147483648 or v > 2147483647:
        raise HeaderError(f"header field {field!r} out of int32 range: {v}")
    out[0] = <int32_t>v
    return 0


# ---- literals, skipping, generic values

cdef inline int jr_literal(JReader* r) noexcept:
    """0 false, 1 true, 2 null, -1 none of them (r.p unchanged)."""
    cdef Py_ssize_t left = r.end - r.p
    if left >= 4 and memcmp(r.p, b"true", 4) == 0:
        r.p += 4
        return 1
    if left >= 5 and memcmp(r.p, b"false", 5) == 0:
        r.p += 5
        return 0
    if left >= 4 and memcmp(r.p, b"null", 4) == 0:
        r.p += 4
        return 2
    return -1


cdef object jr_value(JReader* r):
    """Any JSON value as Python objects, like json.loads."""
    cdef uint8_t c
    cdef int lit
    jr_ws(r)
    if r.p >= r.end:
        jr_fail(r, "unexpected end of data")
    c = r.p[0]
    if c == 34:
        return jr_string(r)
    if c == 123:
        return jr_object(r)
    if c == 91:
        return jr_array(r)
    if c == 45 or 48 <= c <= 57:
        return jr_number(r)
    lit = jr_literal(r)
    if lit == 1:
        return True
    if lit == 0:
        return False
    if lit == 2:
        return None
    jr_fail(r, "unexpected character")


cdef object jr_object(JReader* r):
    cdef dict d = {}
    r.depth += 1
    if r.depth > MAX_DEPTH:
        jr_fail(r, "nesting too deep")
    r.p += 1
    jr_ws(r)
    if r.p < r.end and r.p[0] == 125:
        r.p += 1
        r.depth -= 1
        return d
    while True:
        jr_ws(r)
        k = jr_key(r)
        jr_expect(r, 58, "':'")
        PyDict_SetItem(d, k, jr_value(r))
        jr_ws(r)
        if r.p < r.end and r.p[0] == 44:
            r.p += 1
            continue
        if r.p < r.end and r.p[0] == 125:
            r.p += 1
            break
        jr_fail(r, "expected ',' or '}'")
    r.depth -= 1
    return d


cdef object jr_array(JReader* r):
    cdef list a = []
    r.depth += 1
    if r.depth > MAX_DEPTH:
        jr_fail(r, "nesting too deep")
    r.p += 1
    jr_ws(r)
    if r.p < r.end and r.p[0] == 93:
        r.p += 1
        r.depth -= 1
        return a
    while True:
        PyList_Append(a, jr_value(r))
        jr_ws(r)
        if r.p < r.end and r.p[0] == 44:
            r.p += 1
            continue
        if r.p < r.end and r.p[0] == 93:
            r.p += 1
            break
        jr_fail(r, "expected ',' or ']'")
    r.depth -= 1
    return a


cdef int jr_skip(JReader* r) except -1:
    """Validate and pass over any value (unknown header fields)."""
    cdef const uint8_t* s
    cdef Py_ssize_t n
    cdef int flags
    cdef bint is_int
    cdef uint8_t c
    jr_ws(r)
    if r.p >= r.end:
        jr_fail(r, "unexpected end of data")
    c = r.p[0]
    if c == 34:
        jr_scan_string(r, &s, &n, &flags)
        if flags:
            jr_decode_span(r, s, n, flags)   # validates UTF-8 and escapes
        return 0
    if c == 45 or 48 <= c <= 57:
        return jr_scan_number(r, &is_int)
    if c == 123 or c == 91:
        r.depth += 1
        if r.depth > MAX_DEPTH:
            jr_fail(r, "nesting too deep")
        r.p += 1
        jr_ws(r)
        if r.p < r.end and r.p[0] == (125 if c == 123 else 93):
            r.p += 1
            r.depth -= 1
            return 0
        while True:
            jr_ws(r)
            if c == 123:
                if r.p >= r.end or r.p[0] != 34:
                    jr_fail(r, "expected a string key")
                jr_skip(r)
                jr_expect(r, 58, "':'")
            jr_skip(r)
            jr_ws(r)
            if r.p < r.end and r.p[0] == 44:
                r.p += 1
                continue
            if r.p < r.end and r.p[0] == (125 if c == 123 else 93):
                r.p += 1
                break
            jr_fail(r, "expected ',' or a closing bracket")
        r.depth -= 1
        return 0
    if jr_literal(r) >= 0:
        return 0
    jr_fail(r, "unexpected character")


cdef object jr_document(JReader* r):
    """A whole document: one value, then only whitespace."""
    v = jr_value(r)
    jr_ws(r)
    if r.p != r.end:
        jr_fail(r, "extra data after the document")
    return v


# ---- writer

cdef struct WBuf:
    char* data
    Py_ssize_t len
    Py_ssize_t cap


cdef int wb_init(WBuf* b, Py_ssize_t cap) except -1:
    b.data = <char*>malloc(cap)
    if b.data == NULL:
        raise MemoryError()
    b.len = 0
    b.cap = cap
    return 0


cdef inline void wb_free(WBuf* b) noexcept:
    free(b.data)
    b.data = NULL


cdef int wb_grow(WBuf* b, Py_ssize_t need) except -1:
    cdef Py_ssize_t cap = b.cap * 2
    cdef char* d
    if cap < b.len + need:
        cap = b.len + need + 64
    d = <char*>realloc(b.data, cap)
    if d == NULL:
        raise MemoryError()
    b.data = d
    b.cap = cap
    return 0


cdef inline int wb_put(WBuf* b, const char* s, Py_ssize_t n) except -1:
    if b.len + n > b.cap:
        wb_grow(b, n)
    memcpy(b.data + b.len, s, n)
    b.len += n
    return 0


cdef inline int wb_lit(WBuf* b, bytes s) except -1:
    # A literal's length from the object, never counted by hand.
    return wb_put(b, PyBytes_AS_STRING(s), len(s))


cdef inline int wb_byte(WBuf* b, char c) except -1:
    if b.len + 1 > b.cap:
        wb_grow(b, 1)
    b.data[b.len] = c
    b.len += 1
    return 0


cdef int wb_int(WBuf* b, long long v) except -1:
    cdef char tmp[24]
    return wb_put(b, tmp, <Py_ssize_t>fmt_int(tmp, v))


cdef const char* _HEX = b"0123456789abcdef"


cdef inline int wb_uescape(WBuf* b, uint32_t c) except -1:
    cdef char tmp[6]
    tmp[0] = 92
    tmp[1] = 117
    tmp[2] = _HEX[(c >> 12) & 15]
    tmp[3] = _HEX[(c >> 8) & 15]
    tmp[4] = _HEX[(c >> 4) & 15]
    tmp[5] = _HEX[c & 15]
    return wb_put(b, tmp, 6)


cdef int wb_escape_byte(WBuf* b, uint8_t c) except -1:
    # Python's json / fastjson short escapes, \u00XX for the other controls.
    if c == 34:
        return wb_lit(b, b'\\"')
    if c == 92:
        return wb_lit(b, b"\\\\")
    if c == 10:
        return wb_lit(b, b"\\n")
    if c == 13:
        return wb_lit(b, b"\\r")
    if c == 9:
        return wb_lit(b, b"\\t")
    if c == 8:
        return wb_lit(b, b"\\b")
    if c == 12:
        return wb_lit(b, b"\\f")
    return wb_uescape(b, c)


cdef bytes java_utf8(str s):
    """UTF-8 as Java's encoder writes it: a lone surrogate becomes '?'."""
    return s.encode("utf-8", "replace")


cdef int wb_str(WBuf* b, object s, bint ascii_only) except -1:
    """A quoted JSON string. ascii_only: non-ASCII (and DEL) as \\uXXXX, the
    standard form; otherwise UTF-8 as is, like fastjson and json(ensure_ascii=False)."""
    cdef const uint8_t* p
    cdef Py_ssize_t n, i, run
    cdef uint8_t c
    cdef int kind
    cdef void* data
    cdef Py_UCS4 cp
    cdef uint32_t u
    cdef bytes replaced
    if not PyUnicode_Check(s):
        raise TypeError(f"expected a string, got {type(s).__name__}")
    if not ascii_only or PyUnicode_IS_ASCII(s):
        try:
            p = <const uint8_t*>PyUnicode_AsUTF8AndSize(s, &n)
        except UnicodeEncodeError:
            replaced = java_utf8(s)
            p = <const uint8_t*>PyBytes_AS_STRING(replaced)
            n = len(replaced)
        if b.len + n + 2 > b.cap:
            wb_grow(b, n + 2)
        b.data[b.len] = 34
        b.len += 1
        run = 0
        for i in range(n):
            c = p[i]
            if c < 32 or c == 34 or c == 92 or (c == 127 and ascii_only):
                if i > run:
                    wb_put(b, <const char*>p + run, i - run)
                wb_escape_byte(b, c)
                run = i + 1
        if n > run:
            wb_put(b, <const char*>p + run, n - run)
        return wb_byte(b, 34)
    # Standard form with non-ASCII characters: escape by code point.
    kind = PyUnicode_KIND(s)
    data = PyUnicode_DATA(s)
    n = PyUnicode_GET_LENGTH(s)
    wb_byte(b, 34)
    for i in range(n):
        cp = PyUnicode_READ(kind, data, i)
        if cp < 32 or cp == 34 or cp == 92:
            wb_escape_byte(b, <uint8_t>cp)
        elif cp < 127:
            wb_byte(b, <char>cp)
        elif cp > 0xFFFF:
            u = <uint32_t>cp - 0x10000
            wb_uescape(b, 0xD800 | ((u >> 10) & 0x3FF))
            wb_uescape(b, 0xDC00 | (u & 0x3FF))
        else:
            wb_uescape(b, <uint32_t>cp)
    return wb_byte(b, 34)


cdef object wb_bytes(WBuf* b):
    return PyBytes_FromStringAndSize(b.data, b.len)
