# Hot body codecs: the Java-tolerant JSON reader and writer, RegisterBrokerBody
# (JSON and compressed), TopicRouteData encoding. Reference: rmq/fallback/bodies.py.

import zlib as _zlib

# The inflate bounds (and why) and the compressed encoder live in rmq._wire, shared
# with the pure-Python twin.
from rmq._wire import (DEFAULT_MAX_INFLATED, INFLATE_CHUNK, MAX_INFLATE_RATIO, MIN_INFLATE_LIMIT,
                       INFLATE_FIRST_GUESS as _INFLATE_FIRST_GUESS,
                       decode_inflated as _decode_inflated,
                       encode_compressed_body as _encode_compressed_body,
                       inflate_limit as _inflate_limit)


def json_loads(data):
    """Parse a JSON body as Java writes it (legacy unquoted int keys allowed)."""
    cdef Py_buffer view
    cdef JReader r
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        r.start = <const uint8_t*>view.buf
        r.p = r.start
        r.end = r.start + view.len
        r.kind = ERR_BODY
        r.depth = 0
        r.legacy_keys = True
        return jr_document(&r)
    finally:
        PyBuffer_Release(&view)


# ---------------------------------------------------------------- writer

cdef int wb_scalar_or_container(WBuf* b, object o, bint legacy, int depth) except -1:
    cdef int overflow = 0
    cdef long long v
    if depth > MAX_DEPTH:
        raise BodyError("cannot encode body: nesting too deep (or a reference cycle)")
    if o is None:
        return wb_lit(b, b"null")
    if o is True:
        return wb_lit(b, b"true")
    if o is False:
        return wb_lit(b, b"false")
    if PyUnicode_Check(o):
        return wb_str(b, o, not legacy)
    if PyLong_Check(o):
        v = PyLong_AsLongLongAndOverflow(o, &overflow)
        if overflow == 0:
            return wb_int(b, v)
        s = int.__repr__(o).encode("ascii")
        return wb_put(b, <const char*>s, len(s))
    if PyFloat_Check(o):
        if not isfinite(PyFloat_AS_DOUBLE(o)):
            raise BodyError(f"cannot encode body: out of range float value {o!r}")
        s = float.__repr__(o).encode("ascii")
        return wb_put(b, <const char*>s, len(s))
    if PyDict_Check(o):
        return wb_dict(b, o, legacy, depth)
    if PyList_Check(o) or PyTuple_Check(o):
        wb_byte(b, 91)
        first = True
        for item in o:
            if not first:
                wb_byte(b, 44)
            first = False
            wb_scalar_or_container(b, item, legacy, depth + 1)
        return wb_byte(b, 93)
    raise BodyError(f"cannot encode body: Object of type {type(o).__name__} is not JSON serializable")


cdef int wb_key(WBuf* b, object k, bint legacy) except -1:
    cdef int overflow = 0
    cdef long long v
    if PyUnicode_Check(k):
        return wb_str(b, k, not legacy)
    if PyLong_Check(k) and not PyBool_Check(k):
        if legacy:              # Java's legacy form: Long map keys unquoted
            v = PyLong_AsLongLongAndOverflow(k, &overflow)
            if overflow == 0:
                return wb_int(b, v)
            s = int.__repr__(k).encode("ascii")
            return wb_put(b, <const char*>s, len(s))
        return wb_str(b, int.__repr__(k), True)
    if not legacy:              # what json.dumps does with other scalar keys
        if k is True:
            return wb_lit(b, b'"true"')
        if k is False:
            return wb_lit(b, b'"false"')
        if k is None:
            return wb_lit(b, b'"null"')
        if PyFloat_Check(k):
            if not isfinite(PyFloat_AS_DOUBLE(k)):
                raise BodyError(f"cannot encode body: out of range float key {k!r}")
            return wb_str(b, float.__repr__(k), True)
    raise BodyError(f"cannot encode body: JSON keys must be str or int, not {type(k).__name__}")


cdef int wb_dict(WBuf* b, dict d, bint legacy, int depth) except -1:
    cdef bint first = True
    wb_byte(b, 123)
    for k, v in d.items():
        if not first:
            wb_byte(b, 44)
        first = False
        wb_key(b, k, legacy)
        wb_byte(b, 58)
        wb_scalar_or_container(b, v, legacy, depth + 1)
    return wb_byte(b, 125)


def json_dumps(obj, bint legacy=False):
    """Compact JSON bytes of ``obj`` in dict order; ``legacy`` writes int keys
    unquoted and non-ASCII as UTF-8, the standard form quotes keys and escapes."""
    cdef WBuf b
    wb_init(&b, 1024)
    try:
        try:
            wb_scalar_or_container(&b, obj, legacy, 0)
        except UnicodeEncodeError as e:
            raise BodyError(f"cannot encode body: {e}") from None
        return wb_bytes(&b)
    finally:
        wb_free(&b)


# ---------------------------------------------------------------- RegisterBrokerBody

cdef bytes inflate(data, Py_ssize_t max_inflated):
    # Compiled, not shared with the twin's: _PyBytes_Resize grows one bytes object in
    # place, which Python code cannot do (tests/test_scan_compressed.py bounds the peak).
    # In chunks, so that a bomb is refused having cost at most the limit (one call
    # with the limit as max_length would hold the inflated bytes twice), copied
    # into one bytes object grown in place: the peak is about the inflated size,
    # not twice it (a list of chunks and their join).
    cdef Py_ssize_t total = 0, cap, k
    cdef PyObject* buf = NULL       # owned; _PyBytes_Resize needs its address
    max_inflated = _inflate_limit(len(data), max_inflated)
    d = _zlib.decompressobj()
    pending = data
    # Room for a real table's ratio first, then grow by half.
    cap = min(max_inflated, max(INFLATE_CHUNK, _INFLATE_FIRST_GUESS * len(data)))
    res = PyBytes_FromStringAndSize(NULL, cap)
    buf = <PyObject*>res
    Py_INCREF(buf)
    res = None
    try:
        try:
            while True:
                out = d.decompress(pending, INFLATE_CHUNK)
                k = len(out)
                if total + k > max_inflated:
                    raise BodyError(f"compressed body of {len(data)} bytes inflates beyond "
                                    f"{max_inflated} bytes (at most {MAX_INFLATE_RATIO} times "
                                    f"its size, {DEFAULT_MAX_INFLATED} in all by default)")
                if total + k > cap:
                    cap = min(max_inflated, max(total + k, cap + cap // 2))
                    _PyBytes_Resize(&buf, cap)
                memcpy(PyBytes_AS_STRING(<object>buf) + total, PyBytes_AS_STRING(out), k)
                total += k
                out = None
                pending = d.unconsumed_tail
                if d.eof or not (pending or k == INFLATE_CHUNK):
                    break
        except _zlib.error as e:
            raise BodyError(f"compressed body does not inflate: {e}") from None
        if not d.eof:
            raise BodyError(f"compressed body is truncated ({len(data)} bytes)")
        if total != cap:
            _PyBytes_Resize(&buf, total)
        return <bytes>buf
    finally:
        if buf != NULL:
            Py_DECREF(buf)


cdef dict decode_compressed(data, Py_ssize_t max_inflated):
    return decode_inflated(inflate(data, max_inflated))


cdef dict decode_inflated(bytes raw):
    # The general reader of the inflated form (scan.c's scanner takes the common
    # case): rmq._wire's, with this module's JSON reader.
    return _decode_inflated(json_loads, raw)


def decode_register_broker_body(data, Py_ssize_t max_inflated=DEFAULT_MAX_INFLATED):
    """Decode a RegisterBrokerBody, JSON or zlib-compressed (told apart by content:
    5.x brokers may send a compressed body while the header says otherwise)."""
    cdef Py_buffer view
    cdef bint z
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        z = is_zlib(<const uint8_t*>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    if z:
        return decode_compressed(data, max_inflated)
    body = json_loads(data)
    if not PyDict_Check(body):
        raise BodyError(f"RegisterBrokerBody is not a JSON object: {type(body).__name__}")
    return body


def encode_register_broker_body(body, bint compressed=False):
    """Encode a RegisterBrokerBody dict: JSON as given, or Java's compressed form."""
    return _encode_compressed_body(body, json_dumps) if compressed else json_dumps(body)


# ---------------------------------------------------------------- TopicRouteData

cdef int wb_broker_data(WBuf* b, bd, bint legacy) except -1:
    cdef list items
    cdef bint ordered = True
    addrs = dget(bd, "brokerAddrs", None) or {}
    items = []
    prev = None
    for k, v in addrs.items():
        k = k if PyLong_CheckExact(k) else int(k)
        if prev is not None and k < prev:
            ordered = False
        prev = k
        items.append((k, v))
    # Both forms list broker ids in ascending order: the standard form sorts map
    # keys (MapSortField), and Java's HashMap<Long> iterates small ids in order.
    if not ordered:
        items.sort(key=_first)
    wb_lit(b, b'{"brokerAddrs":{')
    first = True
    for k, v in items:
        if not first:
            wb_byte(b, 44)
        first = False
        wb_key(b, k, legacy)
        wb_byte(b, 58)
        wb_scalar_or_container(b, v, legacy, 3)
    wb_lit(b, b'},"brokerName":')
    wb_scalar_or_container(b, dget(bd, "brokerName", None), legacy, 2)
    wb_lit(b, b',"cluster":')
    wb_scalar_or_container(b, dget(bd, "cluster", None), legacy, 2)
    if "enableActingMaster" in bd:
        wb_lit(b, b',"enableActingMaster":')
        wb_scalar_or_container(b, bool(bd["enableActingMaster"]), legacy, 2)
    zone = dget(bd, "zoneName", None)
    if zone is not None:
        wb_lit(b, b',"zoneName":')
        wb_scalar_or_container(b, zone, legacy, 2)
    return wb_byte(b, 125)


def _first(kv):
    return kv[0]


from routetable cimport rt_span, rt_qd_json, rt_route_desc, rt_route_json


cdef int piece(WBuf* b, rt_span* out, obj, bint legacy, int depth, bytes prefix=EMPTY) except -1:
    # One value's JSON (after prefix) appended to b; out holds its offset until b
    # stops moving (rebase), then the address rt_route_json reads.
    cdef Py_ssize_t start = b.len
    wb_lit(b, prefix)
    if depth < 0:
        wb_broker_data(b, obj, legacy)
    else:
        wb_scalar_or_container(b, obj, legacy, depth)
    out.s = <const char*><size_t>start
    out.n = b.len - start
    return 0


cdef inline void rebase(WBuf* b, rt_span* spans, Py_ssize_t n) noexcept:
    cdef Py_ssize_t i
    for i in range(n):
        if spans[i].n:
            spans[i].s = b.data + <size_t>spans[i].s


def encode_topic_route_data(route, bint legacy=False):
    """TopicRouteData in Java's field order; ``legacy`` selects the old JSON form.
    The pieces are encoded here, the layout written by routetable.c's rt_route_json."""
    cdef WBuf b
    cdef rt_route_desc d
    cdef rt_span* bds = NULL
    cdef rt_qd_json* qds = NULL
    cdef Py_ssize_t i
    cdef bytes res
    brokers = dget(route, "brokerDatas", None) or ()
    queues = dget(route, "queueDatas", None) or ()
    brokers = brokers if PyList_Check(brokers) else list(brokers)
    queues = queues if PyList_Check(queues) else list(queues)
    fst = dget(route, "filterServerTable", None) or {}
    memset(&d, 0, sizeof(d))
    wb_init(&b, 512)
    try:
        bds = <rt_span*>calloc(len(brokers) + 1, sizeof(rt_span))
        qds = <rt_qd_json*>calloc(len(queues) + 1, sizeof(rt_qd_json))
        if bds == NULL or qds == NULL:
            raise MemoryError()
        for i, bd in enumerate(brokers):
            piece(&b, &bds[i], bd, legacy, -1)
        piece(&b, &d.fst, <dict?>(fst if legacy or not fst else dict(sorted(fst.items()))), legacy, 1)
        if dget(route, "orderTopicConf", None) is not None:
            piece(&b, &d.otc, route["orderTopicConf"], legacy, 1)
        for i, qd in enumerate(queues):
            piece(&b, &qds[i].prefix, dget(qd, "brokerName", None), legacy, 2, b'{"brokerName":')
            sys_flag = dget(qd, "topicSysFlag", None)
            if sys_flag is None and "topicSysFlag" not in qd:
                sys_flag = dget(qd, "topicSynFlag", 0)     # before 4.9.0
            piece(&b, &qds[i].val[0], dget(qd, "perm", 6), legacy, 2)
            piece(&b, &qds[i].val[1], dget(qd, "readQueueNums", 0), legacy, 2)
            piece(&b, &qds[i].val[2], sys_flag, legacy, 2)
            piece(&b, &qds[i].val[3], dget(qd, "writeQueueNums", 0), legacy, 2)
        if dget(route, "topicQueueMappingByBroker", None) is not None:
            piece(&b, &d.tqm, route["topicQueueMappingByBroker"], legacy, 1)
        # b is complete: offsets become addresses (every piece is at least one byte)
        rebase(&b, bds, len(brokers))
        rebase(&b, &d.fst, 1)
        rebase(&b, &d.otc, 1)
        rebase(&b, &d.tqm, 1)
        for i in range(len(queues)):
            rebase(&b, &qds[i].prefix, 1)
            rebase(&b, qds[i].val, 4)
        d.bds = bds
        d.nbd = len(brokers)
        d.qds = qds
        d.nqd = len(queues)
        res = PyBytes_FromStringAndSize(NULL, rt_route_json(NULL, &d))
        i = rt_route_json(PyBytes_AS_STRING(res), &d)
        if RMQ_DEBUG and i != len(res):
            raise AssertionError(f"rt_route_json wrote {i} bytes of the {len(res)} it sized")
        return res
    except UnicodeEncodeError as e:
        raise BodyError(f"cannot encode body: {e}") from None
    finally:
        free(bds)
        free(qds)
        wb_free(&b)
