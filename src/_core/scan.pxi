# Nogil scanners (scan.c): RegisterBrokerBody JSON and GET_ROUTEINFO_BY_TOPIC
# requests read without Python objects; "slow" sends the caller to the general
# decoders above. The functions here are test hooks (tests/test_scan.py).

from os import urandom as _urandom

# The keyed hash of the C hash tables (hash.c), here because this file is the
# first of them included. Its per-process key is set once, now, before any
# table exists (see hash.h).
from hash cimport rmq_hash_set_key, rmq_hash, rmq_siphash13

rmq_hash_set_key(<bytes>_urandom(16))


def _hash(bytes data):
    """Test hook: the keyed hash (SipHash-1-3 under this process's key) of data."""
    return rmq_hash(PyBytes_AS_STRING(data), len(data))


def _siphash13(uint64_t k0, uint64_t k1, bytes data):
    """Test hook: SipHash-1-3 of data under the key (k0, k1)."""
    return rmq_siphash13(k0, k1, PyBytes_AS_STRING(data), len(data))

from scan cimport *

cdef int rb_scan_view(const Py_buffer* view, rb_body* out, rb_partial* partial) except -2:
    cdef int rc
    with nogil:
        rc = rb_scan_register_body_from(<const char*>view.buf, view.len, partial, out)
    if rc == RB_NOMEM:
        raise MemoryError()
    return rc


def _scan_register_body(data, cuts=()):
    """Test hook: None if the scanner says slow, else (counter, stateVersion,
    timestamp or None, [(key, name, perm, read, write, sysflag), ...]).

    ``cuts``: first scan it as the engine does while it arrives (rb_partial_step),
    given its first ``cut`` bytes for each cut in turn, each time in a new buffer (as
    the engine's may move between reads)."""
    return _scan_register_body_partly(data, cuts)[1] if cuts else _scan_body(data, NULL)


def _scan_register_body_partly(data, cuts, elsewhere=False):
    """Test hook: (whether the entries scanned at ``cuts`` were taken over, the
    result), as _scan_register_body; ``elsewhere``: the whole body scanned in a copy
    of data, not where the partial scan saw it last."""
    cdef Py_buffer view
    cdef rb_partial partial
    cdef bytes part
    cdef bint had
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    rb_partial_init(&partial, view.len)
    try:
        for cut in cuts:
            if not 0 <= cut <= view.len:
                raise ValueError(f"cut {cut} outside the body's {view.len} bytes")
            part = PyBytes_FromStringAndSize(<const char*>view.buf, cut)
            rb_partial_step(&partial, PyBytes_AS_STRING(part), cut)
        rb_partial_move(&partial, <const char*>view.buf)
        had = rb_partial_has_entries(&partial)
        got = _scan_body(bytearray(data) if elsewhere else data, &partial)
        return had and partial.body.topics == NULL, got
    finally:
        rb_partial_free(&partial)
        PyBuffer_Release(&view)


cdef _scan_body(data, rb_partial* partial):
    cdef Py_buffer view
    cdef rb_body b
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if rb_scan_view(&view, &b, partial) != RB_OK:
            return None
        return _scanned(&b)
    finally:
        PyBuffer_Release(&view)


cdef tuple _scanned(rb_body* b):
    """The test hooks' value of what a scanner read (b is freed)."""
    cdef rmq_topic_rec* t
    cdef size_t i
    cdef list topics = []
    try:
        for i in range(b.ntopics):
            t = &b.topics[i]
            topics.append((PyUnicode_DecodeUTF8(t.key, t.key_len, "strict"),
                           PyUnicode_DecodeUTF8(t.name, t.name_len, "strict"),
                           t.perm, t.read, t.write, t.sysflag))
        return (b.counter, b.state_version, b.timestamp if b.has_timestamp else None, topics)
    finally:
        rb_body_free(b)


def _scan_compressed_body(data):
    """Test hook: _scan_register_body for a compressed body (inflated first, as
    TopicTable.read_body inflates it; BodyError if it does not inflate)."""
    cdef bytes raw = inflate(data, DEFAULT_MAX_INFLATED)
    cdef rb_body b
    cdef int rc
    cdef const char* dp = PyBytes_AS_STRING(raw)
    cdef size_t dn = len(raw)
    with nogil:
        rc = rb_scan_compressed_body(dp, dn, &b)
    if rc == RB_NOMEM:
        raise MemoryError()
    if rc != RB_OK:
        return None
    return _scanned(&b)


def _scan_register_body_count(data, Py_ssize_t repeat=1):
    """Benchmark hook: scan ``repeat`` times; the topic count, or -1 for slow."""
    cdef Py_buffer view
    cdef rb_body b
    cdef Py_ssize_t i, count = -1
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        for i in range(repeat):
            count = <Py_ssize_t>b.ntopics if rb_scan_view(&view, &b, NULL) == RB_OK else -1
            rb_body_free(&b)
        return count
    finally:
        PyBuffer_Release(&view)


def _scan_request(data):
    """Test hook: rq_scan_request of the first bytes of a frame (length prefix
    included): (request code, the body's offset in the frame), None while its
    header is not there whole, "unusual" for what the engine does not scan."""
    cdef Py_buffer view
    cdef int32_t code = 0
    cdef size_t at
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if view.len < 4:
            return None
        at = rq_scan_request(<const uint8_t*>view.buf + 4, view.len - 4, &code)
        return None if at == 0 else "unusual" if at == RQ_UNUSUAL else (code, 4 + at)
    finally:
        PyBuffer_Release(&view)


def _scan_route_request(frame):
    """Test hook: None, or (opaque, version, serialize_type, topic, accept_standard,
    zone) of a GET_ROUTEINFO_BY_TOPIC frame (length prefix included); zone: the folded
    zone its answer is filtered by (rq_route_zone), or None."""
    cdef Py_buffer view
    cdef const uint8_t* p
    cdef rq_route r
    cdef int ok = 0, zn = -1
    cdef char zone[RQ_MAX_ZONE]
    PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t*>view.buf
        if view.len >= 8 and be32(p) == view.len - 4:
            with nogil:
                ok = rq_scan_route(p + 4, view.len - 4, &r)
                if ok:
                    zn = rq_route_zone(&r, zone)
        if not ok:
            return None
        return (r.opaque, r.version, r.serialize_type,
                PyUnicode_DecodeUTF8(r.topic, r.topic_len, "strict"), bool(r.accept_standard),
                None if zn < 0 else PyUnicode_DecodeUTF8(zone, zn, "strict"))
    finally:
        PyBuffer_Release(&view)


def _route_answer(frame, body, serialize_type="JSON"):
    """Test hook: the answer frame rq_write_route_answer writes for a route
    request frame (length prefix included) and a route body, in ``serialize_type``;
    with ``body`` None, the TOPIC_NOT_EXIST answer rq_write_not_found_answer writes
    (None when the topic is left to the general path); None if the frame is not
    recognised."""
    cdef Py_buffer view, bview
    cdef const uint8_t* p
    cdef rq_route r
    cdef int ok = 0
    cdef int stype = _serialize_type_code(serialize_type)
    cdef size_t size
    cdef ssize_t written
    PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t*>view.buf
        if view.len >= 8 and be32(p) == view.len - 4:
            ok = rq_scan_route(p + 4, view.len - 4, &r)
        if not ok:
            return None
        if body is None:
            if not rq_not_found_here(&r):
                return None
            size = rq_not_found_answer_size(&r, stype)
            out = PyBytes_FromStringAndSize(NULL, size)
            if rq_write_not_found_answer(PyBytes_AS_STRING(out), size - 1, &r, stype) != -1:
                raise AssertionError("rq_write_not_found_answer wrote past its capacity")
            written = rq_write_not_found_answer(PyBytes_AS_STRING(out), size, &r, stype)
            if written != <ssize_t>size:
                raise AssertionError(f"rq_write_not_found_answer wrote {written} bytes, "
                                     f"rq_not_found_answer_size said {size}")
            return out
        PyObject_GetBuffer(body, &bview, PyBUF_SIMPLE)
        try:
            size = rq_route_answer_size(&r, stype, bview.len)
            out = PyBytes_FromStringAndSize(NULL, size)
            if rq_write_route_answer(PyBytes_AS_STRING(out), size - 1, &r, stype,
                                     <const char*>bview.buf, bview.len) != -1:
                raise AssertionError("rq_write_route_answer wrote past its capacity")
            written = rq_write_route_answer(PyBytes_AS_STRING(out), size, &r, stype,
                                            <const char*>bview.buf, bview.len)
            if written != <ssize_t>size:
                raise AssertionError(f"rq_write_route_answer wrote {written} bytes, "
                                     f"rq_route_answer_size said {size}")
            return out
        finally:
            PyBuffer_Release(&bview)
    finally:
        PyBuffer_Release(&view)
