# The remoting frame codec.
#
# Frame: int32 length | int32 (serializeType << 24 | headerLen) | header | body
# The reference is rmq/fallback/codec.py; both must agree on every input.

cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE

from rmq.errors import (CorruptFrame, FrameTooLarge, HeaderError, ProtocolError,
                        UnknownSerializeType, BodyError)
from rmq.protocol import (LANGUAGE_CODES as _LANGUAGE_CODES, LANGUAGES as _LANGUAGES_T,
                          V4_9_4 as _V4_9_4)
from rmq._wire import (ext_str as _ext_str, language_byte as _language_byte,
                       rebuild_command as _rebuild, serialize_type_code as _serialize_type_code)
from functools import partial as _partial

cdef enum:
    SER_JSON = 0
    SER_ROCKETMQ = 1
    FLAG_RESPONSE = 1
    FLAG_ONEWAY = 2
    DEFAULT_MAX_FRAME = 16 * 1024 * 1024

cdef int CURRENT_VERSION = RMQ_CURRENT_VERSION     # wire.h's, checked against rmq.protocol
cdef int V4_9_4 = _V4_9_4     # from here on clients get the standard route form
cdef tuple LANGUAGES = tuple(_LANGUAGES_T)      # interned names, index = binary code
cdef dict LANGUAGE_CODES = _LANGUAGE_CODES
cdef str LANG_JAVA = LANGUAGES[0]
cdef str S_JSON = "JSON"
cdef str S_ROCKETMQ = "ROCKETMQ"
cdef bytes EMPTY = b""

cdef int32_t _opaque_counter = 0


cdef inline int32_t next_opaque() noexcept:
    # Java's RemotingCommand.requestId: a process-wide counter wrapping as int32.
    global _opaque_counter
    cdef int32_t v = _opaque_counter
    _opaque_counter = <int32_t>(<uint32_t>v + 1u)
    return v


@cython.freelist(256)
@cython.final
cdef class RemotingCommand:
    """One remoting command: a request or a response, with header and body."""

    cdef public int32_t code
    cdef public str language
    cdef public int32_t version
    cdef public int32_t opaque
    cdef public int32_t flag
    cdef public object remark
    cdef public object ext_fields
    cdef public object body
    cdef public str serialize_type

    def __init__(self, int32_t code=0, *, str language="JAVA", int32_t version=CURRENT_VERSION,
                 int32_t opaque=0, int32_t flag=0, remark=None, ext_fields=None, body=b"",
                 str serialize_type="JSON"):
        self.code = code
        self.language = language
        self.version = version
        self.opaque = opaque
        self.flag = flag
        self.remark = remark
        self.ext_fields = ext_fields
        self.body = body
        self.serialize_type = serialize_type

    @classmethod
    def request(cls, int32_t code, ext_fields=None, body=b"", *, bint oneway=False, opaque=None,
                str serialize_type="JSON", str language="JAVA", int32_t version=CURRENT_VERSION):
        """A request with the next process-wide opaque (unless one is given)."""
        cdef RemotingCommand c = RemotingCommand.__new__(RemotingCommand)
        c.code = code
        c.language = language
        c.version = version
        c.opaque = next_opaque() if opaque is None else <int32_t>opaque
        c.flag = FLAG_ONEWAY if oneway else 0
        c.remark = None
        c.ext_fields = ext_fields
        c.body = bytes(body)
        c.serialize_type = serialize_type
        return c

    def response(self, int32_t code=0, remark=None, ext_fields=None, body=b"", *,
                 int32_t version=CURRENT_VERSION):
        """The answer to this request: same opaque and serialize type, response bit set."""
        cdef RemotingCommand c = RemotingCommand.__new__(RemotingCommand)
        c.code = code
        c.language = LANG_JAVA
        c.version = version
        c.opaque = self.opaque
        c.flag = FLAG_RESPONSE
        c.remark = remark
        c.ext_fields = ext_fields
        c.body = bytes(body)
        c.serialize_type = self.serialize_type
        return c

    @property
    def is_response(self):
        return (self.flag & FLAG_RESPONSE) != 0

    @property
    def is_oneway(self):
        return (self.flag & FLAG_ONEWAY) != 0

    def __eq__(self, other):
        if type(other).__name__ != "RemotingCommand":
            return NotImplemented
        return (self.code == other.code and self.language == other.language
                and self.version == other.version and self.opaque == other.opaque
                and self.flag == other.flag and self.remark == other.remark
                and self.ext_fields == other.ext_fields and self.body == other.body
                and self.serialize_type == other.serialize_type)

    __hash__ = None

    def __reduce__(self):
        return (_rebuild_command, (self.code, self.language, self.version, self.opaque, self.flag,
                                   self.remark, self.ext_fields, self.body, self.serialize_type))

    def __repr__(self):
        kind = "response" if self.flag & FLAG_RESPONSE else "request"
        return (f"<RemotingCommand {kind} code={self.code} opaque={self.opaque} flag={self.flag} "
                f"language={self.language} version={self.version} remark={self.remark!r} "
                f"ext_fields={self.ext_fields!r} body={len(self.body)}B {self.serialize_type}>")


cdef inline bint _is_true(v):
    # Java's Boolean.parseBoolean: "true" in any case.
    return v is not None and len(v) == 4 and v.lower() == "true"


_rebuild_command = _partial(_rebuild, RemotingCommand)


# ---------------------------------------------------------------- JSON header decode

cdef inline bint key_is(const uint8_t* s, Py_ssize_t n, const char* name, Py_ssize_t m) noexcept:
    return n == m and memcmp(s, name, m) == 0


cdef str jr_language(JReader* r):
    cdef const uint8_t* s
    cdef Py_ssize_t n, i
    cdef int flags
    cdef str name
    jr_ws(r)
    if r.end - r.p >= 4 and memcmp(r.p, b"null", 4) == 0:
        r.p += 4
        return LANG_JAVA
    if r.p >= r.end or r.p[0] != 34:
        raise HeaderError(f"header field 'language' is not a string at byte {r.p - r.start}")
    jr_scan_string(r, &s, &n, &flags)
    if flags == 0:
        for i in range(len(LANGUAGES)):
            name = <str>LANGUAGES[i]
            if PyUnicode_GET_LENGTH(name) == n and memcmp(PyUnicode_DATA(name), s, n) == 0:
                return name
    return jr_decode_span(r, s, n, flags)


cdef object jr_opt_string(JReader* r, str field):
    jr_ws(r)
    if r.end - r.p >= 4 and memcmp(r.p, b"null", 4) == 0:
        r.p += 4
        return None
    if r.p >= r.end or r.p[0] != 34:
        raise HeaderError(f"header field {field!r} is not a string at byte {r.p - r.start}")
    return jr_string(r)


cdef object jr_ext_fields(JReader* r):
    """extFields: string values; numbers keep their text and booleans become
    "true"/"false" (ali-ons sends them), null values are dropped like Java's."""
    cdef dict d
    cdef const uint8_t* s
    cdef Py_ssize_t n
    cdef int lit
    cdef bint is_int
    cdef uint8_t c
    jr_ws(r)
    if r.end - r.p >= 4 and memcmp(r.p, b"null", 4) == 0:
        r.p += 4
        return None
    if r.p >= r.end or r.p[0] != 123:
        raise HeaderError(f"header field 'extFields' is not an object at byte {r.p - r.start}")
    d = {}
    r.p += 1
    jr_ws(r)
    if r.p < r.end and r.p[0] == 125:
        r.p += 1
        return d
    while True:
        jr_ws(r)
        k = jr_key(r)
        jr_expect(r, 58, "':'")
        jr_ws(r)
        if r.p >= r.end:
            jr_fail(r, "unexpected end of data")
        c = r.p[0]
        if c == 34:
            PyDict_SetItem(d, k, jr_string(r))
        elif c == 45 or 48 <= c <= 57:
            s = r.p
            jr_scan_number(r, &is_int)
            PyDict_SetItem(d, k, ascii_str(s, r.p - s))
        elif c == 123 or c == 91:
            s = r.p
            jr_skip(r)
            raise HeaderError(f"ext field {k!r} has a non-scalar value: "
                              f"{PyUnicode_DecodeUTF8(<const char*>s, min(r.p - s, 80), 'replace')}")
        else:
            lit = jr_literal(r)
            if lit == 1:
                PyDict_SetItem(d, k, "true")
            elif lit == 0:
                PyDict_SetItem(d, k, "false")
            elif lit == 2:
                d.pop(k, None)
            else:
                jr_fail(r, "unexpected character")
        jr_ws(r)
        if r.p < r.end and r.p[0] == 44:
            r.p += 1
            continue
        if r.p < r.end and r.p[0] == 125:
            r.p += 1
            return d
        jr_fail(r, "expected ',' or '}'")


cdef int decode_json_header(RemotingCommand cmd, const uint8_t* data, Py_ssize_t n) except -1:
    cdef JReader r
    cdef const uint8_t* s
    cdef Py_ssize_t kn
    cdef int flags
    cdef object key = None
    r.start = data
    r.p = data
    r.end = data + n
    r.kind = ERR_HEADER
    r.depth = 0
    r.legacy_keys = False
    jr_ws(&r)
    if r.p >= r.end or r.p[0] != 123:
        if r.p < r.end and (r.p[0] == 91 or r.p[0] == 34 or r.p[0] == 45 or 48 <= r.p[0] <= 57):
            jr_skip(&r)
            jr_ws(&r)
            if r.p == r.end:
                raise HeaderError("JSON header is not an object")
        jr_fail(&r, "expected '{'")
    r.p += 1
    jr_ws(&r)
    if r.p < r.end and r.p[0] == 125:
        r.p += 1
    else:
        while True:
            jr_ws(&r)
            if r.p >= r.end or r.p[0] != 34:
                jr_fail(&r, "expected a string key")
            jr_scan_string(&r, &s, &kn, &flags)
            if flags:
                # An escaped key ("\u0063ode") names a field as Java's parser reads it.
                key = jr_decode_span(&r, s, kn, flags)
                if PyUnicode_IS_ASCII(key):
                    s = <const uint8_t*>PyUnicode_DATA(key)
                    kn = PyUnicode_GET_LENGTH(key)
                else:
                    kn = -1
            jr_expect(&r, 58, "':'")
            if key_is(s, kn, "code", 4):
                jr_int32(&r, &cmd.code, "code")
            elif key_is(s, kn, "opaque", 6):
                jr_int32(&r, &cmd.opaque, "opaque")
            elif key_is(s, kn, "flag", 4):
                jr_int32(&r, &cmd.flag, "flag")
            elif key_is(s, kn, "version", 7):
                jr_int32(&r, &cmd.version, "version")
            elif key_is(s, kn, "language", 8):
                cmd.language = jr_language(&r)
            elif key_is(s, kn, "extFields", 9):
                cmd.ext_fields = jr_ext_fields(&r)
            elif key_is(s, kn, "remark", 6):
                cmd.remark = jr_opt_string(&r, "remark")
            else:
                jr_skip(&r)     # serializeTypeCurrentRPC, and fields of newer peers
            jr_ws(&r)
            if r.p < r.end and r.p[0] == 44:
                r.p += 1
                continue
            if r.p < r.end and r.p[0] == 125:
                r.p += 1
                break
            jr_fail(&r, "expected ',' or '}'")
    # Trailing whitespace is allowed (the C++ client ends its header with '\n').
    jr_ws(&r)
    if r.p != r.end:
        jr_fail(&r, "extra data after the header object")
    return 0


# ---------------------------------------------------------------- binary header decode

cdef object utf8_field(const uint8_t* s, Py_ssize_t n, str what):
    try:
        return PyUnicode_DecodeUTF8(<const char*>s, n, "strict")
    except UnicodeDecodeError as e:
        raise HeaderError(f"{what} is not valid UTF-8 at byte {e.start}") from None


cdef object binary_key(const uint8_t* s, Py_ssize_t n):
    cdef Py_ssize_t i
    for i in range(n):
        if s[i] >= 128:
            return utf8_field(s, n, "ext key")
    return cached_key(s, n)


cdef int decode_binary_header(RemotingCommand cmd, const uint8_t* d, Py_ssize_t n) except -1:
    cdef bheader h
    cdef int rc = bh_start(d, n, &h)
    cdef dict ext
    if rc == BH_SHORT:
        raise HeaderError(f"ROCKETMQ header truncated: {n} bytes, the fixed part is {BH_FIXED}")
    if rc == BH_REMARK:
        raise HeaderError(f"ROCKETMQ header remark length {h.remark_len} exceeds the header ({n} bytes)")
    if h.remark_len:
        cmd.remark = utf8_field(d + BH_REMARK_AT, h.remark_len, "remark")
    if rc == BH_EXT:
        raise HeaderError(f"ROCKETMQ header ext length {h.ext_len} exceeds the header ({n} bytes)")
    if h.ext_len:
        ext = {}
        while (rc := bh_next(d, &h)) != BH_END:
            if rc == BH_TRUNCATED:
                raise HeaderError(f"ROCKETMQ ext field truncated at byte {h.at}")
            if rc == BH_KEY:
                raise HeaderError(f"ROCKETMQ ext key length {h.klen} exceeds the ext fields")
            k = binary_key(d + h.at + 2, h.klen)
            if rc == BH_VALUE:
                raise HeaderError(f"ROCKETMQ ext value length {h.vlen} exceeds the ext fields")
            PyDict_SetItem(ext, k, utf8_field(d + h.at + 6 + h.klen, h.vlen, "ext value"))
        cmd.ext_fields = ext
    cmd.code = h.code
    cmd.version = h.version
    cmd.opaque = h.opaque
    cmd.flag = h.flag
    cmd.language = <str>LANGUAGES[h.language] if h.language < len(LANGUAGES) else str(h.language)
    return 0


# ---------------------------------------------------------------- frame decode

cdef RemotingCommand decode_payload(const uint8_t* p, Py_ssize_t length, bint with_body=True,
                                    Py_ssize_t* body_at=NULL):
    """One frame from p = everything after the length prefix (length bytes). Without
    with_body the body is not copied (body stays None): its length is known, and its
    offset in p goes to body_at."""
    cdef uint32_t word
    cdef uint32_t stype, header_len
    cdef RemotingCommand cmd
    if length < 4:
        raise CorruptFrame(f"frame length {length} is shorter than the 4-byte header length field")
    word = <uint32_t>be32(p)
    stype = word >> 24
    header_len = word & 0xFFFFFF
    if header_len > length - 4:
        raise CorruptFrame(f"header length {header_len} exceeds the frame ({length - 4} bytes after it)")
    cmd = RemotingCommand.__new__(RemotingCommand)
    cmd.language = LANG_JAVA
    if stype == SER_JSON:
        cmd.serialize_type = S_JSON
        decode_json_header(cmd, p + 4, header_len)
    elif stype == SER_ROCKETMQ:
        cmd.serialize_type = S_ROCKETMQ
        decode_binary_header(cmd, p + 4, header_len)
    else:
        raise UnknownSerializeType(f"unknown serialize type {stype} (0 is JSON, 1 is ROCKETMQ)")
    if body_at != NULL:
        body_at[0] = 4 + header_len
    if with_body:
        cmd.body = PyBytes_FromStringAndSize(<const char*>p + 4 + header_len,
                                             length - 4 - header_len) \
            if length - 4 - header_len else EMPTY
    return cmd


cdef int check_length(int64_t length, Py_ssize_t max_frame_length) except -1:
    if length < 0:
        raise CorruptFrame(f"negative frame length {length}")
    if length + 4 > max_frame_length:
        raise FrameTooLarge(f"frame of {length + 4} bytes exceeds the maximum of {max_frame_length}")
    return 0


cdef RemotingCommand decode_whole_frame(const uint8_t* p, Py_ssize_t n,
                                       Py_ssize_t max_frame_length, bint with_body,
                                       Py_ssize_t* body_at=NULL):
    cdef int32_t length
    cdef RemotingCommand cmd
    if n < 8:
        raise CorruptFrame(f"frame of {n} bytes is shorter than the 8-byte minimum")
    length = be32(p)
    check_length(length, max_frame_length)
    if length != n - 4:
        raise CorruptFrame(f"frame length {length} does not match the {n - 4} bytes after it")
    cmd = decode_payload(p + 4, length, with_body, body_at)
    if body_at != NULL:
        body_at[0] += 4
    return cmd


def decode_frame(data, Py_ssize_t max_frame_length=DEFAULT_MAX_FRAME, *, bint copy_body=True):
    """Decode one complete frame, 4-byte length prefix included. Without ``copy_body``
    a body is a read-only memoryview of ``data`` rather than a copy (a registration's
    megabytes read where they arrived; ``data`` must not change while it is used)."""
    cdef Py_buffer view
    cdef Py_ssize_t body_at = 0, body_len
    cdef RemotingCommand cmd
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        cmd = decode_whole_frame(<const uint8_t*>view.buf, view.len, max_frame_length,
                                 copy_body, NULL if copy_body else &body_at)
        if copy_body:
            return cmd
        body_len = view.len - body_at
    finally:
        PyBuffer_Release(&view)
    cmd.body = memoryview(data).cast("B")[body_at:].toreadonly() if body_len else EMPTY
    return cmd


# ---------------------------------------------------------------- encode

cdef int wb_be32(WBuf* b, int32_t v) except -1:
    cdef char t[4]
    put_be32(t, <uint32_t>v)
    return wb_put(b, t, 4)


cdef int wb_be16(WBuf* b, int16_t v) except -1:
    cdef char t[2]
    t[0] = <char>((<uint16_t>v >> 8) & 0xFF)
    t[1] = <char>(<uint16_t>v & 0xFF)
    return wb_put(b, t, 2)


cdef int encode_json_header(WBuf* b, RemotingCommand cmd) except -1:
    # Java (fastjson) writes bean fields in alphabetical order and omits nulls.
    cdef bint first
    wb_put(b, JH_CODE, LIT_LEN(JH_CODE))
    wb_int(b, cmd.code)
    if cmd.ext_fields is not None:
        wb_lit(b, b',"extFields":{')
        first = True
        for k, v in (<dict?>cmd.ext_fields).items():
            if not first:
                wb_byte(b, 44)
            first = False
            if not PyUnicode_Check(k):
                raise ProtocolError(f"ext field names must be strings, got {k!r}")
            wb_str(b, k, False)
            wb_byte(b, 58)
            wb_str(b, v if PyUnicode_Check(v) else _ext_str(k, v), False)
        wb_byte(b, 125)
    wb_put(b, JH_FLAG, LIT_LEN(JH_FLAG))
    wb_int(b, cmd.flag)
    wb_put(b, JH_LANGUAGE, LIT_LEN(JH_LANGUAGE))
    wb_str(b, cmd.language, False)
    wb_put(b, JH_OPAQUE, LIT_LEN(JH_OPAQUE))
    wb_int(b, cmd.opaque)
    if cmd.remark is not None:
        wb_lit(b, b',"remark":')
        wb_str(b, cmd.remark, False)
    wb_put(b, JH_TAIL, LIT_LEN(JH_TAIL))
    wb_int(b, cmd.version)
    return wb_byte(b, 125)


cdef int encode_binary_header(WBuf* b, RemotingCommand cmd) except -1:
    cdef Py_ssize_t n, ext_at
    if not -32768 <= cmd.code <= 32767:
        raise ProtocolError(f"code {cmd.code} does not fit the int16 of a ROCKETMQ header")
    if not -32768 <= cmd.version <= 32767:
        raise ProtocolError(f"version {cmd.version} does not fit the int16 of a ROCKETMQ header")
    wb_be16(b, <int16_t>cmd.code)
    code = LANGUAGE_CODES.get(cmd.language)      # the names; _wire's rule for the rest
    wb_byte(b, <char><int>(code if code is not None else _language_byte(cmd.language)))
    wb_be16(b, <int16_t>cmd.version)
    wb_be32(b, cmd.opaque)
    wb_be32(b, cmd.flag)
    if cmd.remark:
        raw = java_utf8(cmd.remark)
        wb_be32(b, <int32_t>len(raw))
        wb_put(b, PyBytes_AS_STRING(raw), len(raw))
    else:
        wb_be32(b, 0)
    ext_at = b.len
    wb_be32(b, 0)
    if cmd.ext_fields:
        for k, v in (<dict?>cmd.ext_fields).items():
            if not PyUnicode_Check(k):
                raise ProtocolError(f"ext field names must be strings, got {k!r}")
            raw = java_utf8(v if PyUnicode_Check(v) else _ext_str(k, v))
            key = java_utf8(k)
            if len(key) > 32767:
                raise ProtocolError(f"ext key of {len(key)} bytes does not fit an int16 length")
            wb_be16(b, <int16_t>len(key))
            wb_put(b, PyBytes_AS_STRING(key), len(key))
            wb_be32(b, <int32_t>len(raw))
            wb_put(b, PyBytes_AS_STRING(raw), len(raw))
    n = b.len - ext_at - 4
    b.len = ext_at
    wb_be32(b, <int32_t>n)
    b.len = ext_at + 4 + n
    return 0


cdef int encode_into(WBuf* b, RemotingCommand cmd, bint with_body=True) except -1:
    """Append ``cmd`` as a complete frame to ``b``; without ``with_body``, its head
    only (the lengths count the body all the same)."""
    cdef Py_buffer body
    cdef int stype
    cdef Py_ssize_t start = b.len, header_len, length
    if cmd.language is None:
        raise ProtocolError("language must be a string, got NoneType")
    if cmd.remark is not None and not PyUnicode_Check(cmd.remark):
        raise ProtocolError(f"remark must be a string, got {type(cmd.remark).__name__}")
    if cmd.serialize_type == S_JSON:
        stype = SER_JSON
    elif cmd.serialize_type == S_ROCKETMQ:
        stype = SER_ROCKETMQ
    else:
        raise UnknownSerializeType(f"unknown serialize type {cmd.serialize_type!r} "
                                   f"(expected one of ('JSON', 'ROCKETMQ'))")
    PyObject_GetBuffer(cmd.body if cmd.body is not None else EMPTY, &body, PyBUF_SIMPLE)
    try:
        wb_lit(b, b"\0\0\0\0\0\0\0\0")      # the two length words, patched below
        if stype == SER_JSON:
            encode_json_header(b, cmd)
        else:
            encode_binary_header(b, cmd)
        header_len = b.len - start - 8
        if header_len > 0xFFFFFF:
            raise ProtocolError(f"header of {header_len} bytes exceeds the 24-bit header length")
        length = 4 + header_len + body.len
        if length > 2147483647 - 4:
            raise ProtocolError(f"frame of {length} bytes does not fit the int32 length field")
        if with_body:
            wb_put(b, <const char*>body.buf, body.len)
    except BaseException:
        b.len = start
        raise
    finally:
        PyBuffer_Release(&body)
    put_be32(b.data + start, <uint32_t>length)
    put_be32(b.data + start + 4, <uint32_t>((stype << 24) | header_len))
    return 0


cdef bytes frame_bytes(RemotingCommand cmd, bint with_body):
    cdef WBuf b
    wb_init(&b, 256 + (len(cmd.body) if with_body and cmd.body is not None else 0))
    try:
        encode_into(&b, cmd, with_body)
        return wb_bytes(&b)
    finally:
        wb_free(&b)


def encode_frame(RemotingCommand cmd):
    """Encode ``cmd`` as a complete frame in its own serialize type."""
    return frame_bytes(cmd, True)


def encode_frame_head(RemotingCommand cmd):
    """The head of ``cmd``'s frame: ``encode_frame(cmd)`` less ``cmd.body``, which
    follows it on the wire as it is (the head's lengths count it). For a writer that
    copies a big body once, where it writes from, not into a frame first."""
    return frame_bytes(cmd, False)
