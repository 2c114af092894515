# Trace segment records read straight into analysis rows.
#
# A segment (rmq.trace) is msgpack: a header map, then [time_ns, conn, peer,
# direction, frame] arrays. The encodings msgpack's packer writes for those are read
# here, with no Python object built before the row; a record in any other form stops
# this reader (stopped == "other") and rmq.trace.rows.RecordRows (the reference's reading)
# reads on from that offset. The rows are rmq.trace.rows.TRACE_ROW_FIELDS tuples: their
# order is written out below, and tests/test_trace_rows.py checks it against
# rmq.trace.rows field by field.

from libc.stdint cimport int8_t, INT64_MAX, INT64_MIN

cdef enum:
    MP_OK = 1
    MP_SHORT = 0        # the data ends inside the object
    MP_OTHER = -1       # a form this reader leaves to the reference

cdef str S_END = "end"
cdef str S_CUT = "cut"
cdef str S_OTHER = "other"


cdef inline uint64_t mp_be(const uint8_t* p, int n) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(n):
        v = (v << 8) | p[i]
    return v


cdef inline int mp_int(const uint8_t** pp, const uint8_t* end, int64_t* out) noexcept nogil:
    cdef const uint8_t* p = pp[0]
    cdef uint8_t c
    cdef int n
    cdef uint64_t u
    if p >= end:
        return MP_SHORT
    c = p[0]
    if c <= 0x7f or c >= 0xe0:              # positive / negative fixint
        if c >= 0xe0:
            out[0] = <int64_t><int8_t>c
        else:
            out[0] = c
        pp[0] = p + 1
        return MP_OK
    if 0xcc <= c <= 0xcf:
        n = 1 << (c - 0xcc)
    elif 0xd0 <= c <= 0xd3:
        n = 1 << (c - 0xd0)
    else:
        return MP_OTHER
    if end - p - 1 < n:
        return MP_SHORT
    u = mp_be(p + 1, n)
    if c <= 0xcf:
        if u > <uint64_t>INT64_MAX:
            return MP_OTHER
        out[0] = <int64_t>u
    elif n == 1:
        out[0] = <int64_t><int8_t>u
    elif n == 2:
        out[0] = <int64_t><int16_t>u
    elif n == 4:
        out[0] = <int64_t><int32_t>u
    else:
        out[0] = <int64_t>u
    pp[0] = p + 1 + n
    return MP_OK


cdef inline int mp_span(const uint8_t** pp, const uint8_t* end, bint binary,
                        const uint8_t** s, Py_ssize_t* size) noexcept nogil:
    """A str (binary false; nil gives size -1) or bin object's bytes."""
    cdef const uint8_t* p = pp[0]
    cdef uint8_t c
    cdef int n
    cdef uint64_t length
    if p >= end:
        return MP_SHORT
    c = p[0]
    if not binary and 0xa0 <= c <= 0xbf:
        length = c & 0x1f
        n = 0
    elif not binary and c == 0xc0:
        s[0] = NULL
        size[0] = -1
        pp[0] = p + 1
        return MP_OK
    elif not binary and 0xd9 <= c <= 0xdb:
        n = 1 << (c - 0xd9)
    elif binary and 0xc4 <= c <= 0xc6:
        n = 1 << (c - 0xc4)
    else:
        return MP_OTHER
    if end - p - 1 < n:
        return MP_SHORT
    if n:
        length = mp_be(p + 1, n)
    if <uint64_t>(end - p - 1 - n) < length:
        return MP_SHORT
    s[0] = p + 1 + n
    size[0] = <Py_ssize_t>length
    pp[0] = p + 1 + n + length
    return MP_OK


cdef struct TraceRecord:
    int64_t t
    int64_t conn            # conn_base + the record's connection id
    int64_t direction
    const uint8_t* peer_s   # NULL (peer_n -1) for nil
    Py_ssize_t peer_n
    const uint8_t* frame_s
    Py_ssize_t frame_n


cdef int read_record(const uint8_t** pp, const uint8_t* end, int64_t conn_base,
                     TraceRecord* r) noexcept nogil:
    """One [time_ns, conn, peer, direction, frame] record from pp[0], in the forms
    msgpack's packer writes: MP_OK (pp[0] moved past it), MP_SHORT (the data ends
    inside it) or MP_OTHER (another form, or conn_base + conn overflows)."""
    cdef const uint8_t* p = pp[0]
    cdef int64_t conn
    cdef int rc
    if p >= end:
        return MP_SHORT
    if p[0] != 0x95:                        # fixarray of 5
        return MP_OTHER
    p += 1
    rc = mp_int(&p, end, &r.t)
    if rc == MP_OK:
        rc = mp_int(&p, end, &conn)
    if rc == MP_OK:
        rc = mp_span(&p, end, False, &r.peer_s, &r.peer_n)
    if rc == MP_OK:
        rc = mp_int(&p, end, &r.direction)
    if rc == MP_OK:
        rc = mp_span(&p, end, True, &r.frame_s, &r.frame_n)
    if rc == MP_OK and ((conn > 0 and conn_base > INT64_MAX - conn)
                        or (conn < 0 and conn_base < INT64_MIN - conn)):
        rc = MP_OTHER
    if rc == MP_OK:
        r.conn = conn_base + conn
        pp[0] = p
    return rc


cdef inline int64_t record_body_len(TraceRecord* r) noexcept:
    """The body's bytes of a record's frame, once its header decoded (so it is whole)."""
    return r.frame_n - 8 - (<uint32_t>be32(r.frame_s + 4) & 0xFFFFFF)


cdef tuple command_row(file, file_index, int64_t record, TraceRecord* r, conn, peer,
                       RemotingCommand cmd):
    """The TRACE_ROW_FIELDS row of a record whose frame decoded to ``cmd``."""
    return (file, file_index, record, r.t, conn, peer, r.direction, cmd.code, cmd.flag,
            cmd.opaque, cmd.language, cmd.version, cmd.remark, cmd.ext_fields,
            record_body_len(r), r.frame_n, None)


@cython.final
cdef class TraceRows:
    """TraceRows(data, start, file, file_index, conn_base=0, first_record=0,
    max_frame_length=DEFAULT_MAX_FRAME)

    The rows (TRACE_ROW_FIELDS tuples) of the trace records in ``data`` from byte
    ``start``, numbered from ``first_record``. After the iteration ``offset`` is the
    end of the last complete record, ``records`` the next record's number, and
    ``stopped`` "end", "cut" (the data ends inside a record) or "other" (a record
    this reader leaves to rmq.trace.rows.RecordRows, from ``offset``). The data's
    buffer is held until then."""

    cdef Py_buffer view
    cdef bint held
    cdef readonly Py_ssize_t offset
    cdef readonly int64_t records
    cdef readonly str stopped
    cdef object file
    cdef object file_index
    cdef int64_t conn_base
    cdef Py_ssize_t max_frame_length
    cdef dict peers         # row conn -> its peer string, reused while the bytes match

    def __cinit__(self, data, Py_ssize_t start, file, file_index, int64_t conn_base=0,
                  int64_t first_record=0, Py_ssize_t max_frame_length=DEFAULT_MAX_FRAME):
        PyObject_GetBuffer(data, &self.view, PyBUF_SIMPLE)
        self.held = True
        if start < 0 or start > self.view.len:
            raise ValueError(f"start {start} is outside the {self.view.len} bytes of data")
        self.offset = start
        self.records = first_record
        self.file = file
        self.file_index = file_index
        self.conn_base = conn_base
        self.max_frame_length = max_frame_length
        self.peers = {}

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.view)

    cdef _stop(self, str why):
        self.stopped = why
        if self.held:
            self.held = False
            PyBuffer_Release(&self.view)

    def __iter__(self):
        return self

    def __next__(self):
        cdef const uint8_t* p
        cdef const uint8_t* end
        cdef const uint8_t* peer_s
        cdef const uint8_t* frame_s
        cdef Py_ssize_t peer_n, frame_n, cached_n
        cdef int64_t t, conn, direction
        cdef int rc
        cdef TraceRecord rec
        cdef RemotingCommand cmd
        cdef const char* cached
        if self.stopped is not None:
            raise StopIteration
        p = <const uint8_t*>self.view.buf + self.offset
        end = <const uint8_t*>self.view.buf + self.view.len
        if p == end:
            self._stop(S_END)
            raise StopIteration
        rc = read_record(&p, end, self.conn_base, &rec)
        if rc != MP_OK:
            self._stop(S_CUT if rc == MP_SHORT else S_OTHER)
            raise StopIteration
        t, conn, direction = rec.t, rec.conn, rec.direction
        peer_s, peer_n, frame_s, frame_n = rec.peer_s, rec.peer_n, rec.frame_s, rec.frame_n
        conn_o = PyLong_FromLongLong(conn)
        if peer_n < 0:
            peer = None
        else:
            peer = self.peers.get(conn_o)
            if peer is not None:
                cached = PyUnicode_AsUTF8AndSize(peer, &cached_n)
                if cached_n != peer_n or memcmp(cached, peer_s, peer_n) != 0:
                    peer = None
            if peer is None:
                try:
                    peer = PyUnicode_DecodeUTF8(<const char*>peer_s, peer_n, "strict")
                except UnicodeDecodeError:      # the reference says which record
                    self._stop(S_OTHER)
                    raise StopIteration
                self.peers[conn_o] = peer
        n = self.records
        self.records += 1
        self.offset = p - <const uint8_t*>self.view.buf
        try:
            cmd = decode_whole_frame(frame_s, frame_n, self.max_frame_length, False)
        except Exception as e:                  # a row, whatever the frame
            return (self.file, self.file_index, n, t, conn_o, peer, direction, None, None,
                    None, None, None, None, None, None, frame_n, f"{type(e).__name__}: {e}")
        return command_row(self.file, self.file_index, n, &rec, conn_o, peer, cmd)
