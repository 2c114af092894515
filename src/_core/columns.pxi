# Trace rows as columns: the trace records of one input read into Arrow's column
# layout (validity bitmaps, int32 offsets, values), each request met with its answer
# in place, without a row object per frame. The reference is
# rmq.fallback.columns.TraceColumns (the pairing rules, the carrying of waiting
# requests between batches, and what a row may hold); rmq.trace.arrow makes
# pyarrow arrays of what take() returns. The field order is rmq.trace.rows'
# PAIRED_ROW_FIELDS less file and file_index (one value per input: the caller's).

from libc.stdint cimport INT32_MIN, INT32_MAX

import rmq.trace.rows as _rows
from rmq.trace.rows import MAX_WAITING as _MAX_WAITING

cdef extern from "Python.h":
    bint PyDict_Next(object d, Py_ssize_t* pos, PyObject** key, PyObject** value)

cdef Py_ssize_t R_FILE = _rows.ROW["file"]
cdef Py_ssize_t R_INDEX = _rows.ROW["file_index"]
cdef Py_ssize_t R_RECORD = _rows.ROW["record"]
cdef Py_ssize_t R_TIME = _rows.ROW["time_ns"]
cdef Py_ssize_t R_CONN = _rows.ROW["conn"]
cdef Py_ssize_t R_PEER = _rows.ROW["peer"]
cdef Py_ssize_t R_DIRECTION = _rows.ROW["direction"]
cdef Py_ssize_t R_CODE = _rows.ROW["code"]
cdef Py_ssize_t R_FLAG = _rows.ROW["flag"]
cdef Py_ssize_t R_OPAQUE = _rows.ROW["opaque"]
cdef Py_ssize_t R_LANGUAGE = _rows.ROW["language"]
cdef Py_ssize_t R_VERSION = _rows.ROW["version"]
cdef Py_ssize_t R_REMARK = _rows.ROW["remark"]
cdef Py_ssize_t R_EXT = _rows.ROW["ext"]
cdef Py_ssize_t R_BODY_LEN = _rows.ROW["body_len"]
cdef Py_ssize_t R_FRAME_LEN = _rows.ROW["frame_len"]
cdef Py_ssize_t R_ERROR = _rows.ROW["decode_error"]
cdef Py_ssize_t R_FIELDS = len(_rows.TRACE_ROW_FIELDS)
cdef int64_t COLUMN_MAX_BATCH_BYTES = _rows.MAX_BATCH_BYTES
cdef str S_FULL = "full"

cdef enum:
    PAIR_NONE = 0           # no request or answer: pair_open is null
    PAIR_SETTLED = 1        # pair_open false
    PAIR_OPEN = 2           # pair_open true


# ---------------------------------------------------------------- growable buffers

cdef struct Buf:
    char* data
    Py_ssize_t len
    Py_ssize_t cap


cdef int buf_reserve(Buf* b, Py_ssize_t extra) except -1:
    cdef Py_ssize_t cap
    cdef char* p
    if b.len + extra <= b.cap:
        return 0
    cap = b.cap * 2 if b.cap else 4096
    while cap < b.len + extra:
        cap *= 2
    p = <char*>realloc(b.data, cap)
    if p == NULL:
        raise MemoryError(f"trace columns: cannot grow a buffer to {cap} bytes")
    b.data = p
    b.cap = cap
    return 0


cdef inline int buf_put(Buf* b, const void* p, Py_ssize_t n) except -1:
    if b.len + n > b.cap:
        buf_reserve(b, n)
    if n:
        memcpy(b.data + b.len, p, n)
    b.len += n
    return 0


cdef inline int buf_put_i64(Buf* b, int64_t v) except -1:
    return buf_put(b, &v, 8)


cdef inline int buf_put_i32(Buf* b, int32_t v) except -1:
    return buf_put(b, &v, 4)


cdef inline int buf_put_u8(Buf* b, uint8_t v) except -1:
    return buf_put(b, &v, 1)


cdef inline void buf_free(Buf* b) noexcept:
    free(b.data)
    b.data = NULL
    b.len = b.cap = 0


cdef bytes buf_bytes(Buf* b):
    return PyBytes_FromStringAndSize(b.data, b.len)


cdef object bitmap(Buf* valid, Py_ssize_t n):
    """Arrow's validity bitmap of the per-row bytes ``valid`` (None: all valid)."""
    cdef Py_ssize_t i
    cdef bint all_valid = True
    cdef const uint8_t* v = <const uint8_t*>valid.data
    for i in range(n):
        if not v[i]:
            all_valid = False
            break
    if all_valid:
        return None
    out = PyBytes_FromStringAndSize(NULL, (n + 7) >> 3)
    cdef uint8_t* bits = <uint8_t*>PyBytes_AS_STRING(out)
    memset(bits, 0, (n + 7) >> 3)
    for i in range(n):
        if v[i]:
            bits[i >> 3] |= <uint8_t>(1 << (i & 7))
    return out


# ---------------------------------------------------------------- columns

cdef struct Fixed:         # int32 or int64 values, a validity byte per row
    Buf values
    Buf valid
    int width


cdef inline int fixed_put(Fixed* c, int64_t v) except -1:
    cdef int32_t v32
    if c.width == 8:
        buf_put_i64(&c.values, v)
    else:
        v32 = <int32_t>v
        buf_put(&c.values, &v32, 4)
    return buf_put_u8(&c.valid, 1)


cdef inline int fixed_null(Fixed* c) except -1:
    cdef int64_t zero = 0
    buf_put(&c.values, &zero, c.width)
    return buf_put_u8(&c.valid, 0)


cdef inline void fixed_set(Fixed* c, Py_ssize_t i, int64_t v, bint valid) noexcept:
    if c.width == 8:
        (<int64_t*>c.values.data)[i] = v
    else:
        (<int32_t*>c.values.data)[i] = <int32_t>v
    (<uint8_t*>c.valid.data)[i] = valid


cdef inline int64_t fixed_get(Fixed* c, Py_ssize_t i) noexcept:
    if c.width == 8:
        return (<int64_t*>c.values.data)[i]
    return (<int32_t*>c.values.data)[i]


cdef int fixed_copy(Fixed* dst, Fixed* src, Py_ssize_t i) except -1:
    if (<uint8_t*>src.valid.data)[i]:
        return fixed_put(dst, fixed_get(src, i))
    return fixed_null(dst)


cdef tuple fixed_take(Fixed* c, Py_ssize_t n):
    return (bitmap(&c.valid, n), buf_bytes(&c.values))


cdef struct Strings:       # int32 offsets (n + 1), UTF-8 data, a validity byte per row
    Buf offsets
    Buf data
    Buf valid


cdef int strings_init(Strings* c) except -1:
    return buf_put_i32(&c.offsets, 0)


cdef inline int strings_end(Strings* c) except -1:
    if c.data.len > INT32_MAX:
        # never: a batch ends at MAX_BATCH_BYTES, and a row's text is in its header
        # (at most 16 MiB, a 24-bit length)
        raise OverflowError(f"trace columns: {c.data.len} bytes of strings in one batch")
    return buf_put_i32(&c.offsets, <int32_t>c.data.len)


cdef inline int strings_put(Strings* c, const char* s, Py_ssize_t n) except -1:
    buf_put(&c.data, s, n)
    buf_put_u8(&c.valid, 1)
    return strings_end(c)


cdef inline int strings_null(Strings* c) except -1:
    buf_put_u8(&c.valid, 0)
    return strings_end(c)


cdef inline int strings_put_str(Strings* c, object s) except -1:
    cdef Py_ssize_t n
    cdef const char* p
    if s is None:
        return strings_null(c)
    p = PyUnicode_AsUTF8AndSize(s, &n)
    return strings_put(c, p, n)


cdef int strings_copy(Strings* dst, Strings* src, Py_ssize_t i) except -1:
    cdef int32_t* off = <int32_t*>src.offsets.data
    if not (<uint8_t*>src.valid.data)[i]:
        return strings_null(dst)
    return strings_put(dst, src.data.data + off[i], off[i + 1] - off[i])


cdef tuple strings_take(Strings* c, Py_ssize_t n):
    return (bitmap(&c.valid, n), buf_bytes(&c.offsets), buf_bytes(&c.data))


cdef void strings_free(Strings* c) noexcept:
    buf_free(&c.offsets)
    buf_free(&c.data)
    buf_free(&c.valid)


cdef enum:
    MAX_NAMED = 8           # ext fields taken out as columns of their own (rmq.trace.rows.MAX_EXT_COLUMNS)

if MAX_NAMED != _rows.MAX_EXT_COLUMNS:
    raise ImportError(f"rmq._core holds {MAX_NAMED} ext columns, rmq.trace.rows says "
                      f"{_rows.MAX_EXT_COLUMNS}: rebuild the extension")


cdef struct Map:           # map<string, string>: int32 offsets into the entries
    Buf offsets
    Buf valid
    Strings keys           # never null
    Strings values         # never null either (a dict of str values)
    int n_named
    PyObject* names[MAX_NAMED]      # the ext keys (str, held by TraceColumns) taken out
    Strings named[MAX_NAMED]        # their values, null where a row has none


cdef int map_end(Map* c) except -1:
    cdef Py_ssize_t entries = c.keys.valid.len
    return buf_put_i32(&c.offsets, <int32_t>entries)


cdef inline bint same_str(PyObject* a, PyObject* b) noexcept:
    cdef Py_ssize_t n
    if a == b:
        return True
    n = PyUnicode_GET_LENGTH(<object>a)
    return (n == PyUnicode_GET_LENGTH(<object>b) and PyUnicode_IS_ASCII(<object>a)
            and PyUnicode_IS_ASCII(<object>b)
            and memcmp(PyUnicode_DATA(<object>a), PyUnicode_DATA(<object>b), n) == 0)


cdef int map_put_dict(Map* c, dict d) except -1:
    cdef Py_ssize_t pos = 0
    cdef PyObject* k
    cdef PyObject* v
    cdef PyObject* found[MAX_NAMED]
    cdef int j
    for j in range(c.n_named):
        found[j] = NULL
    while PyDict_Next(d, &pos, &k, &v):
        strings_put_str(&c.keys, <object>k)
        strings_put_str(&c.values, <object>v)
        for j in range(c.n_named):
            if same_str(k, c.names[j]):
                found[j] = v
                break
    for j in range(c.n_named):
        if found[j] == NULL:
            strings_null(&c.named[j])
        else:
            strings_put_str(&c.named[j], <object>found[j])
    buf_put_u8(&c.valid, 1)
    return map_end(c)


cdef int map_null(Map* c) except -1:
    cdef int j
    for j in range(c.n_named):
        strings_null(&c.named[j])
    buf_put_u8(&c.valid, 0)
    return map_end(c)


cdef int map_copy(Map* dst, Map* src, Py_ssize_t i) except -1:
    cdef int32_t* off = <int32_t*>src.offsets.data
    cdef Py_ssize_t e
    cdef int j
    for j in range(src.n_named):
        strings_copy(&dst.named[j], &src.named[j], i)
    if not (<uint8_t*>src.valid.data)[i]:
        buf_put_u8(&dst.valid, 0)
        return map_end(dst)
    for e in range(off[i], off[i + 1]):
        strings_copy(&dst.keys, &src.keys, e)
        strings_copy(&dst.values, &src.values, e)
    buf_put_u8(&dst.valid, 1)
    return map_end(dst)


cdef tuple map_take(Map* c, Py_ssize_t n):
    cdef Py_ssize_t entries = c.keys.valid.len
    return (bitmap(&c.valid, n), buf_bytes(&c.offsets), entries,
            strings_take(&c.keys, entries), strings_take(&c.values, entries))


cdef void map_free(Map* c) noexcept:
    cdef int j
    buf_free(&c.offsets)
    buf_free(&c.valid)
    strings_free(&c.keys)
    strings_free(&c.values)
    for j in range(MAX_NAMED):
        strings_free(&c.named[j])


cdef enum:                 # the fixed-width columns of a batch
    F_RECORD, F_TIME, F_CONN, F_DIRECTION, F_CODE, F_FLAG, F_OPAQUE, F_VERSION, F_BODY_LEN,
    F_FRAME_LEN, F_ANSWER_TIME, F_ANSWER_CODE, N_FIXED

cdef enum:                 # its text columns
    T_PEER, T_LANGUAGE, T_REMARK, T_ERROR, N_TEXT


cdef struct Batch:
    Py_ssize_t rows
    Fixed fixed[N_FIXED]
    Strings text[N_TEXT]
    Map ext
    Buf answer_remark_at    # int64 per row: where its answer's remark is in answer_remark_data, or -1
    Buf answer_remark_len   # int32 per row
    Buf answer_remark_data
    Buf pair                # PAIR_* per row


cdef int batch_init(Batch* b, tuple ext_names) except -1:
    cdef int i
    memset(b, 0, sizeof(Batch))
    b.ext.n_named = len(ext_names)
    for i in range(b.ext.n_named):
        b.ext.names[i] = <PyObject*>ext_names[i]
        strings_init(&b.ext.named[i])
    for i in range(N_FIXED):
        b.fixed[i].width = 8 if i in (F_RECORD, F_TIME, F_CONN, F_ANSWER_TIME) else 4
    for i in range(N_TEXT):
        strings_init(&b.text[i])
    strings_init(&b.ext.keys)
    strings_init(&b.ext.values)
    buf_put_i32(&b.ext.offsets, 0)
    return 0


cdef void batch_free(Batch* b) noexcept:
    cdef int i
    for i in range(N_FIXED):
        buf_free(&b.fixed[i].values)
        buf_free(&b.fixed[i].valid)
    for i in range(N_TEXT):
        strings_free(&b.text[i])
    map_free(&b.ext)
    buf_free(&b.answer_remark_at)
    buf_free(&b.answer_remark_len)
    buf_free(&b.answer_remark_data)
    buf_free(&b.pair)


cdef inline Py_ssize_t batch_bytes(Batch* b) noexcept:
    """The variable-length bytes the batch holds (its bound: MAX_BATCH_BYTES)."""
    cdef Py_ssize_t n = b.ext.keys.data.len + b.ext.values.data.len + b.answer_remark_data.len
    cdef int i
    for i in range(N_TEXT):
        n += b.text[i].data.len
    for i in range(b.ext.n_named):
        n += b.ext.named[i].data.len
    return n


cdef int batch_unanswered(Batch* b) except -1:
    """A new row's answer columns: none yet."""
    fixed_null(&b.fixed[F_ANSWER_TIME])
    fixed_null(&b.fixed[F_ANSWER_CODE])
    buf_put_i64(&b.answer_remark_at, -1)
    return buf_put_i32(&b.answer_remark_len, 0)


cdef int batch_copy_row(Batch* dst, Batch* src, Py_ssize_t i) except -1:
    """Row ``i`` of ``src`` appended to ``dst``: a request still waiting for its
    answer (so its answer columns are empty) carried into the next batch."""
    cdef int c
    for c in range(F_ANSWER_TIME):
        fixed_copy(&dst.fixed[c], &src.fixed[c], i)
    for c in range(N_TEXT):
        strings_copy(&dst.text[c], &src.text[c], i)
    map_copy(&dst.ext, &src.ext, i)
    batch_unanswered(dst)
    buf_put_u8(&dst.pair, (<uint8_t*>src.pair.data)[i])
    dst.rows += 1
    return 0


# ---------------------------------------------------------------- the waiting requests

cdef struct Waiting:       # (conn, opaque) -> the row of the request waiting for its answer
    int64_t conn
    int32_t opaque
    Py_ssize_t row          # -1: an empty slot


cdef struct WaitTable:     # open addressing, linear probing, backward-shift deletion
    Waiting* slots
    Py_ssize_t mask
    Py_ssize_t count


cdef inline Py_ssize_t wait_hash(WaitTable* w, int64_t conn, int32_t opaque) noexcept:
    cdef uint64_t h = (<uint64_t>conn * 0x9E3779B97F4A7C15ULL) ^ (<uint32_t>opaque * 0xC2B2AE3D27D4EB4FULL)
    h ^= h >> 29
    return <Py_ssize_t>(h & <uint64_t>w.mask)


cdef int wait_clear(WaitTable* w, Py_ssize_t capacity) except -1:
    cdef Py_ssize_t i
    if w.slots == NULL or w.mask + 1 != capacity:
        free(w.slots)
        w.slots = <Waiting*>malloc(capacity * sizeof(Waiting))
        if w.slots == NULL:
            raise MemoryError(f"trace columns: no room for {capacity} waiting requests")
        w.mask = capacity - 1
    for i in range(capacity):
        w.slots[i].row = -1
    w.count = 0
    return 0


cdef Py_ssize_t wait_pop(WaitTable* w, int64_t conn, int32_t opaque) noexcept:
    """The row waiting under the key, removed; -1 if none."""
    cdef Py_ssize_t i = wait_hash(w, conn, opaque), j, k, row
    while w.slots[i].row >= 0:
        if w.slots[i].conn == conn and w.slots[i].opaque == opaque:
            row = w.slots[i].row
            w.slots[i].row = -1
            w.count -= 1
            j = i               # shift back the entries of the run after it
            while True:
                j = (j + 1) & w.mask
                if w.slots[j].row < 0:
                    break
                k = wait_hash(w, w.slots[j].conn, w.slots[j].opaque)
                # the entry at j may move to the hole at i unless its home lies in (i, j]
                if (i <= j and (k <= i or k > j)) or (i > j and k <= i and k > j):
                    w.slots[i] = w.slots[j]
                    w.slots[j].row = -1
                    i = j
            return row
        i = (i + 1) & w.mask
    return -1


cdef inline void wait_put(WaitTable* w, int64_t conn, int32_t opaque, Py_ssize_t row) noexcept:
    """Under a key not in the table (just popped), with room (count < capacity / 2)."""
    cdef Py_ssize_t i = wait_hash(w, conn, opaque)
    while w.slots[i].row >= 0:
        i = (i + 1) & w.mask
    w.slots[i].conn = conn
    w.slots[i].opaque = opaque
    w.slots[i].row = row
    w.count += 1


cdef inline bint ascii_only(const uint8_t* s, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if s[i] >= 0x80:
            return False
    return True


# ---------------------------------------------------------------- TraceColumns

cdef Py_ssize_t[N_FIXED - 2] ROW_OF_FIXED      # the row field of each fixed column but the answer's
ROW_OF_FIXED[:] = [R_RECORD, R_TIME, R_CONN, R_DIRECTION, R_CODE, R_FLAG, R_OPAQUE, R_VERSION,
                   R_BODY_LEN, R_FRAME_LEN]
cdef Py_ssize_t[N_TEXT] ROW_OF_TEXT
ROW_OF_TEXT[:] = [R_PEER, R_LANGUAGE, R_REMARK, R_ERROR]


@cython.final
cdef class TraceColumns:
    """TraceColumns(file, conn_base=0, max_frame_length=DEFAULT_MAX_FRAME,
    batch_rows=BATCH_ROWS, max_waiting=MAX_WAITING, ext_columns=())

    The rows of one input (``file`` names it in messages) as columns: :meth:`read`
    reads trace records from a segment's bytes, :meth:`append` takes a row made
    elsewhere (rmq.trace.rows.TRACE_ROW_FIELDS: a capture's frames, the records this
    reader leaves). Requests meet their answers as the rows arrive (the rules are
    rmq.fallback.columns'). The values of the ext fields named by ``ext_columns``
    (at most 8 keys) are columns of their own too. :meth:`take` hands the rows
    over, carrying the requests still waiting into the next batch."""

    cdef Batch b
    cdef WaitTable waiting
    cdef object file
    cdef tuple ext_names
    cdef int64_t conn_base
    cdef Py_ssize_t max_frame_length
    cdef Py_ssize_t batch_rows
    cdef Py_ssize_t max_waiting
    cdef readonly Py_ssize_t offset
    cdef readonly int64_t records
    cdef readonly str stopped
    cdef Py_ssize_t carried_rows    # carried into this batch: they do not fill it
    cdef Py_ssize_t carried_bytes

    def __cinit__(self, file, int64_t conn_base=0, Py_ssize_t max_frame_length=DEFAULT_MAX_FRAME,
                  Py_ssize_t batch_rows=_rows.BATCH_ROWS, Py_ssize_t max_waiting=_MAX_WAITING,
                  ext_columns=()):
        cdef Py_ssize_t capacity = 16
        self.ext_names = tuple(ext_columns)
        if len(self.ext_names) > MAX_NAMED or any(type(k) is not str for k in self.ext_names):
            raise ValueError(f"ext_columns must be at most {MAX_NAMED} str keys, "
                             f"got {ext_columns!r:.80}")
        if batch_rows < 1:
            raise ValueError(f"batch_rows must be at least 1, got {batch_rows}")
        if not 1 <= max_waiting <= _rows.MAX_WAITING_LIMIT:
            raise ValueError(f"max_waiting must be from 1 to {_rows.MAX_WAITING_LIMIT}, "
                             f"got {max_waiting}")
        batch_init(&self.b, self.ext_names)
        self.file = file
        self.conn_base = conn_base
        self.max_frame_length = max_frame_length
        self.batch_rows = batch_rows
        self.max_waiting = max_waiting
        while capacity < 2 * max_waiting:
            capacity <<= 1
        wait_clear(&self.waiting, capacity)

    def __dealloc__(self):
        batch_free(&self.b)
        free(self.waiting.slots)

    @property
    def rows(self):
        """The rows held (carried ones included)."""
        return self.b.rows

    @property
    def full(self):
        """Whether the rows held make a batch: batch_rows, or MAX_BATCH_BYTES of text,
        besides the requests carried into it (at most max_waiting)."""
        return self._full()

    cdef inline bint _full(self):
        return (self.b.rows - self.carried_rows >= self.batch_rows
                or batch_bytes(&self.b) - self.carried_bytes >= COLUMN_MAX_BATCH_BYTES)

    cdef int _pair(self, bint event, int64_t direction, int64_t flag, int64_t conn,
                   int64_t opaque, int64_t time, bint time_valid, int64_t code,
                   object remark) except -1:
        """The new row's pairing (``event``: decoded, with a direction, a connection
        and an opaque): requests wait, answers settle them."""
        cdef Py_ssize_t before, at, n
        cdef Batch* b = &self.b
        cdef uint8_t state = PAIR_NONE
        cdef const char* s
        if event and direction == 0 and not flag & FLAG_RESPONSE:
            state = PAIR_SETTLED
            wait_pop(&self.waiting, conn, <int32_t>opaque)  # its next frame is a request: unanswered
            if not flag & FLAG_ONEWAY:                     # oneway: never answered
                if self.waiting.count >= self.max_waiting:
                    wait_clear(&self.waiting, self.waiting.mask + 1)
                wait_put(&self.waiting, conn, <int32_t>opaque, b.rows)
        elif event and direction == 1 and flag & FLAG_RESPONSE:
            before = wait_pop(&self.waiting, conn, <int32_t>opaque)
            if before < 0:
                state = PAIR_OPEN
            else:
                state = PAIR_SETTLED
                fixed_set(&b.fixed[F_ANSWER_TIME], before, time, time_valid)
                fixed_set(&b.fixed[F_ANSWER_CODE], before, code, True)
                if remark is not None:
                    s = PyUnicode_AsUTF8AndSize(remark, &n)
                    at = b.answer_remark_data.len
                    buf_put(&b.answer_remark_data, s, n)
                    (<int64_t*>b.answer_remark_at.data)[before] = at
                    (<int32_t*>b.answer_remark_len.data)[before] = <int32_t>n
        return buf_put_u8(&b.pair, state)

    def append(self, row):
        """One row (rmq.trace.rows.TRACE_ROW_FIELDS) made elsewhere. A row the columns
        cannot hold (rmq.trace.rows.unfit_field) becomes one with only its record number
        and ``decode_error``."""
        cdef Batch* b = &self.b
        cdef int c
        cdef bint event
        if type(row) is not tuple or len(<tuple>row) != R_FIELDS:
            raise TypeError(f"a trace row is a tuple of {R_FIELDS} fields, got {row!r:.80}")
        bad = _rows.unfit_field(row)
        if bad is not None:
            row = _rows.unfit_row(self.file, row, bad)
        for c in range(F_ANSWER_TIME):
            v = row[ROW_OF_FIXED[c]]
            if v is None:
                fixed_null(&b.fixed[c])
            else:
                fixed_put(&b.fixed[c], v)
        for c in range(N_TEXT):
            strings_put_str(&b.text[c], row[ROW_OF_TEXT[c]])
        if row[R_EXT] is None:
            map_null(&b.ext)
        else:
            map_put_dict(&b.ext, row[R_EXT])
        batch_unanswered(b)
        event = (row[R_ERROR] is None and row[R_FLAG] is not None and row[R_DIRECTION] is not None
                 and row[R_CONN] is not None and row[R_OPAQUE] is not None)
        if event:
            self._pair(True, row[R_DIRECTION], row[R_FLAG], row[R_CONN], row[R_OPAQUE],
                       row[R_TIME] if row[R_TIME] is not None else 0, row[R_TIME] is not None,
                       row[R_CODE] if row[R_CODE] is not None else 0, row[R_REMARK])
        else:
            self._pair(False, 0, 0, 0, 0, 0, False, 0, None)
        b.rows += 1

    def read(self, data, Py_ssize_t start, int64_t first_record=0):
        """Read the records of ``data`` (a segment's bytes) from byte ``start``,
        numbered from ``first_record``, until the batch is full or the data read.
        Then ``offset`` is the end of the last record read, ``records`` the next
        record's number, ``stopped`` "full", "end", "cut" (the data ends inside a
        record) or "other" (a record this reader leaves to rmq.trace.rows.RecordRows)."""
        cdef Py_buffer view
        cdef const uint8_t* p
        cdef const uint8_t* end
        cdef TraceRecord rec
        cdef RemotingCommand cmd
        cdef Batch* b = &self.b
        cdef int rc, c
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            if start < 0 or start > view.len:
                raise ValueError(f"start {start} is outside the {view.len} bytes of data")
            p = <const uint8_t*>view.buf + start
            end = <const uint8_t*>view.buf + view.len
            self.offset = start
            self.records = first_record
            self.stopped = None
            while True:
                if self._full():
                    self.stopped = S_FULL
                    break
                if p == end:
                    self.stopped = S_END
                    break
                rc = read_record(&p, end, self.conn_base, &rec)
                if rc == MP_OK and (rec.direction < INT32_MIN or rec.direction > INT32_MAX
                                    or rec.frame_n > INT32_MAX):
                    rc = MP_OTHER                   # the reference's row says what is wrong
                if rc == MP_OK and rec.peer_n > 0 and not ascii_only(rec.peer_s, rec.peer_n):
                    try:
                        PyUnicode_DecodeUTF8(<const char*>rec.peer_s, rec.peer_n, "strict")
                    except UnicodeDecodeError:
                        rc = MP_OTHER
                if rc != MP_OK:
                    self.stopped = S_CUT if rc == MP_SHORT else S_OTHER
                    break
                error = None
                try:
                    cmd = decode_whole_frame(rec.frame_s, rec.frame_n, self.max_frame_length,
                                             False)
                except Exception as e:              # a row, whatever the frame
                    cmd = None
                    error = f"{type(e).__name__}: {e}"
                if cmd is not None and not command_fits(cmd):
                    # text a column cannot hold: the row the reference makes of it
                    self.append(command_row(
                        None, None, self.records, &rec, rec.conn,
                        None if rec.peer_n < 0 else PyUnicode_DecodeUTF8(
                            <const char*>rec.peer_s, rec.peer_n, "strict"), cmd))
                    self.records += 1
                    self.offset = p - <const uint8_t*>view.buf
                    continue
                fixed_put(&b.fixed[F_RECORD], self.records)
                fixed_put(&b.fixed[F_TIME], rec.t)
                fixed_put(&b.fixed[F_CONN], rec.conn)
                fixed_put(&b.fixed[F_DIRECTION], rec.direction)
                fixed_put(&b.fixed[F_FRAME_LEN], rec.frame_n)
                if rec.peer_n < 0:
                    strings_null(&b.text[T_PEER])
                else:
                    strings_put(&b.text[T_PEER], <const char*>rec.peer_s, rec.peer_n)
                if cmd is None:
                    for c in (F_CODE, F_FLAG, F_OPAQUE, F_VERSION, F_BODY_LEN):
                        fixed_null(&b.fixed[c])
                    strings_null(&b.text[T_LANGUAGE])
                    strings_null(&b.text[T_REMARK])
                    map_null(&b.ext)
                    strings_put_str(&b.text[T_ERROR], error)
                    batch_unanswered(b)
                    self._pair(False, 0, 0, 0, 0, 0, False, 0, None)
                else:
                    fixed_put(&b.fixed[F_CODE], cmd.code)
                    fixed_put(&b.fixed[F_FLAG], cmd.flag)
                    fixed_put(&b.fixed[F_OPAQUE], cmd.opaque)
                    fixed_put(&b.fixed[F_VERSION], cmd.version)
                    fixed_put(&b.fixed[F_BODY_LEN], record_body_len(&rec))
                    strings_put_str(&b.text[T_LANGUAGE], cmd.language)
                    strings_put_str(&b.text[T_REMARK], cmd.remark)
                    if cmd.ext_fields is None:
                        map_null(&b.ext)
                    else:
                        map_put_dict(&b.ext, cmd.ext_fields)
                    strings_null(&b.text[T_ERROR])
                    batch_unanswered(b)
                    self._pair(True, rec.direction, cmd.flag, rec.conn, cmd.opaque, rec.t, True,
                               cmd.code, cmd.remark)
                b.rows += 1
                self.records += 1
                self.offset = p - <const uint8_t*>view.buf
        finally:
            PyBuffer_Release(&view)

    def take(self, bint final=False):
        """(rows, columns, keep): the rows held, as Arrow buffers in
        rmq.trace.rows.COLUMN_FIELDS' order then one string column per ext_columns key
        (rmq.trace.arrow makes arrays of them), and,
        when some are requests still waiting for their answers, ``keep`` (a byte per
        row, 0 for those): they are not this batch's, and are carried into the next
        one. With ``final`` (the input's end) nothing waits any more: the requests
        left are unanswered."""
        cdef Batch* b = &self.b
        cdef Batch next_b
        cdef Py_ssize_t n = b.rows
        if final:
            wait_clear(&self.waiting, self.waiting.mask + 1)
        columns = (fixed_take(&b.fixed[F_RECORD], n), fixed_take(&b.fixed[F_TIME], n),
                   fixed_take(&b.fixed[F_CONN], n), strings_take(&b.text[T_PEER], n),
                   fixed_take(&b.fixed[F_DIRECTION], n), fixed_take(&b.fixed[F_CODE], n),
                   fixed_take(&b.fixed[F_FLAG], n), fixed_take(&b.fixed[F_OPAQUE], n),
                   strings_take(&b.text[T_LANGUAGE], n), fixed_take(&b.fixed[F_VERSION], n),
                   strings_take(&b.text[T_REMARK], n), map_take(&b.ext, n),
                   fixed_take(&b.fixed[F_BODY_LEN], n), fixed_take(&b.fixed[F_FRAME_LEN], n),
                   strings_take(&b.text[T_ERROR], n), fixed_take(&b.fixed[F_ANSWER_TIME], n),
                   fixed_take(&b.fixed[F_ANSWER_CODE], n), self._answer_remarks(n),
                   self._pair_open(n)) + tuple(
                       [strings_take(&b.ext.named[j], n) for j in range(b.ext.n_named)])
        keep = None
        batch_init(&next_b, self.ext_names)
        try:
            if self.waiting.count:
                keep = PyBytes_FromStringAndSize(NULL, n)
                self._carry(&next_b, <uint8_t*>PyBytes_AS_STRING(keep), n)
        except BaseException:
            batch_free(&next_b)
            raise
        batch_free(b)
        self.b = next_b
        self.carried_rows = next_b.rows
        self.carried_bytes = batch_bytes(&next_b)
        return n, columns, keep

    cdef int _carry(self, Batch* next_b, uint8_t* keep, Py_ssize_t n) except -1:
        """The waiting rows into ``next_b`` in row order (``keep`` 0 for them), and the
        table to their rows there."""
        cdef Py_ssize_t i, slot, row
        cdef Py_ssize_t* moved = <Py_ssize_t*>malloc(n * sizeof(Py_ssize_t))
        if moved == NULL:
            raise MemoryError("trace columns: no room to carry the waiting requests")
        try:
            memset(keep, 1, n)
            for slot in range(self.waiting.mask + 1):
                row = self.waiting.slots[slot].row
                if row >= 0:
                    keep[row] = 0
            for i in range(n):
                if not keep[i]:
                    moved[i] = next_b.rows
                    batch_copy_row(next_b, &self.b, i)
            for slot in range(self.waiting.mask + 1):
                row = self.waiting.slots[slot].row
                if row >= 0:
                    self.waiting.slots[slot].row = moved[row]
        finally:
            free(moved)
        return 0

    cdef tuple _answer_remarks(self, Py_ssize_t n):
        cdef Batch* b = &self.b
        cdef Strings s
        cdef Py_ssize_t i
        cdef int64_t at
        memset(&s, 0, sizeof(Strings))
        try:
            strings_init(&s)
            for i in range(n):
                at = (<int64_t*>b.answer_remark_at.data)[i]
                if at < 0:
                    strings_null(&s)
                else:
                    strings_put(&s, b.answer_remark_data.data + at,
                                (<int32_t*>b.answer_remark_len.data)[i])
            return strings_take(&s, n)
        finally:
            strings_free(&s)

    cdef tuple _pair_open(self, Py_ssize_t n):
        """pair_open: a boolean column, its validity and its values as bitmaps."""
        cdef const uint8_t* state = <const uint8_t*>self.b.pair.data
        cdef Py_ssize_t i, nbytes = (n + 7) >> 3
        cdef bint all_valid = True
        valid = PyBytes_FromStringAndSize(NULL, nbytes)
        values = PyBytes_FromStringAndSize(NULL, nbytes)
        cdef uint8_t* v = <uint8_t*>PyBytes_AS_STRING(valid)
        cdef uint8_t* x = <uint8_t*>PyBytes_AS_STRING(values)
        memset(v, 0, nbytes)
        memset(x, 0, nbytes)
        for i in range(n):
            if state[i] != PAIR_NONE:
                v[i >> 3] |= <uint8_t>(1 << (i & 7))
            else:
                all_valid = False
            if state[i] == PAIR_OPEN:
                x[i >> 3] |= <uint8_t>(1 << (i & 7))
        return (None if all_valid else valid, values)


cdef bint text_fits(object s):
    """Whether a decoded str (or None) has a UTF-8 form (not so: a lone surrogate
    from a JSON escape); the form is cached in the str for the column's copy."""
    if s is None or PyUnicode_IS_ASCII(s):
        return True
    try:
        PyUnicode_AsUTF8AndSize(s, NULL)
    except UnicodeEncodeError:
        return False
    return True


cdef bint command_fits(RemotingCommand cmd):
    cdef Py_ssize_t pos = 0
    cdef PyObject* k
    cdef PyObject* v
    if not text_fits(cmd.language) or not text_fits(cmd.remark):
        return False
    if cmd.ext_fields is not None:
        while PyDict_Next(cmd.ext_fields, &pos, &k, &v):
            if not text_fits(<object>k) or not text_fits(<object>v):
                return False
    return True
