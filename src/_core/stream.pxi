# The streaming side of the frame codec: FrameDecoder (frames to commands) and
# FrameSplitter (frames kept whole, for traces).

# ---------------------------------------------------------------- streaming

cdef enum:
    KEEP_BUFFER = 256 * 1024   # a larger idle buffer is freed, not kept per connection


@cython.final
cdef class FrameDecoder:
    """Splits a byte stream into commands; any chunking gives the same commands.

    Only an incomplete frame is ever copied: complete frames are decoded
    straight from the caller's buffer. After an error the stream is unusable
    (the server closes the connection) and every later ``feed`` raises again.
    It only splits and decodes: TopicTable.serve_routes (routes.pxi) answers route
    queries through its cdef surface (``len``, ``take``, ``_feed``, ``error``).
    """

    cdef uint8_t* buf
    cdef Py_ssize_t len
    cdef Py_ssize_t cap
    cdef readonly Py_ssize_t max_frame_length
    cdef object error

    def __cinit__(self, Py_ssize_t max_frame_length=DEFAULT_MAX_FRAME):
        if max_frame_length < 8:
            raise ValueError(f"max_frame_length must be at least 8, got {max_frame_length}")
        self.max_frame_length = max_frame_length
        self.buf = NULL
        self.len = 0
        self.cap = 0

    def __dealloc__(self):
        free(self.buf)

    @property
    def buffered(self):
        """Bytes held for a frame not yet complete."""
        return self.len

    cdef int reserve(self, Py_ssize_t need) except -1:
        cdef Py_ssize_t cap = self.cap
        cdef uint8_t* nb
        if need <= cap:
            return 0
        if cap < 4096:
            cap = 4096
        while cap < need:
            cap *= 2
        nb = <uint8_t*>realloc(self.buf, cap)
        if nb == NULL:
            raise MemoryError()
        self.buf = nb
        self.cap = cap
        return 0

    cdef void reset(self) noexcept:
        self.len = 0
        if self.cap > KEEP_BUFFER:
            free(self.buf)
            self.buf = NULL
            self.cap = 0

    cdef Py_ssize_t take(self, const uint8_t* p, Py_ssize_t n, list out) except -1:
        """Complete the buffered frame from p; returns the bytes of p consumed."""
        cdef Py_ssize_t used = 0, step
        cdef int32_t length
        if self.len < 4:
            step = min(4 - self.len, n)
            self.reserve(self.len + step)
            memcpy(self.buf + self.len, p, step)
            self.len += step
            used = step
            if self.len < 4:
                return used
        length = be32(self.buf)
        check_length(length, self.max_frame_length)
        step = min(4 + <Py_ssize_t>length - self.len, n - used)
        self.reserve(self.len + step)
        memcpy(self.buf + self.len, p + used, step)
        self.len += step
        used += step
        if self.len == 4 + <Py_ssize_t>length:
            cmd = decode_payload(self.buf + 4, length)
            self.reset()
            PyList_Append(out, cmd)
        return used

    def feed(self, data):
        """Add bytes from the stream; returns the commands completed by them."""
        return self._feed(data)

    cdef list _feed(self, data):
        cdef Py_buffer view
        cdef const uint8_t* p
        cdef Py_ssize_t n, pos = 0
        cdef int32_t length
        cdef list out = []
        if self.error is not None:
            raise type(self.error)(f"decoder failed earlier: {self.error}")
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            p = <const uint8_t*>view.buf
            n = view.len
            if self.len:
                pos = self.take(p, n, out)
            if self.len == 0:
                while n - pos >= 4:
                    length = be32(p + pos)
                    check_length(length, self.max_frame_length)
                    if n - pos - 4 < length:
                        break
                    PyList_Append(out, decode_payload(p + pos + 4, length))
                    pos += 4 + length
                if pos < n:
                    self.take(p + pos, n - pos, out)
        except ProtocolError as e:
            self.error = e
            self.len = 0
            self.reset()
            e.decoded = out
            raise
        finally:
            PyBuffer_Release(&view)
        return out


@cython.final
cdef class FrameSplitter:
    """Splits a byte stream into whole frames (bytes, 4-byte length prefix
    included) without decoding them: what a trace records. Any chunking gives the
    same frames; the length checks and errors are FrameDecoder's, and after an
    error every later ``feed`` raises again."""

    cdef bytearray partial          # the start of a frame not yet complete
    cdef readonly Py_ssize_t max_frame_length
    cdef object error

    def __cinit__(self, Py_ssize_t max_frame_length=DEFAULT_MAX_FRAME):
        if max_frame_length < 8:
            raise ValueError(f"max_frame_length must be at least 8, got {max_frame_length}")
        self.max_frame_length = max_frame_length
        self.partial = bytearray()

    @property
    def buffered(self):
        """Bytes held for a frame not yet complete."""
        return len(self.partial)

    def feed(self, data):
        """Add bytes from the stream; returns the frames completed by them."""
        cdef Py_buffer view
        cdef const uint8_t* p
        cdef Py_ssize_t n, pos = 0, have, step
        cdef int32_t length
        cdef list out = []
        if self.error is not None:
            raise type(self.error)(f"splitter failed earlier: {self.error}")
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            p = <const uint8_t*>view.buf
            n = view.len
            try:
                have = len(self.partial)
                if have:
                    # complete the length word, then the frame, from the new bytes
                    if have < 4:
                        step = min(4 - have, n)
                        self.partial += p[:step]
                        pos = step
                        have += step
                    if have >= 4:
                        length = be32(<const uint8_t*><char*>self.partial)
                        check_length(length, self.max_frame_length)
                        step = min(4 + <Py_ssize_t>length - have, n - pos)
                        self.partial += p[pos:pos + step]
                        pos += step
                        if len(self.partial) == 4 + <Py_ssize_t>length:
                            PyList_Append(out, bytes(self.partial))
                            self.partial = bytearray()
                if not len(self.partial):
                    while n - pos >= 4:
                        length = be32(p + pos)
                        check_length(length, self.max_frame_length)
                        if n - pos - 4 < length:
                            break
                        PyList_Append(out, p[pos:pos + 4 + length])
                        pos += 4 + length
                    if pos < n:     # less than a frame: its length, if there, was checked
                        self.partial += p[pos:n]
            except ProtocolError as e:
                self.error = e
                self.partial = bytearray()
                e.decoded = out
                raise
        finally:
            PyBuffer_Release(&view)
        return out
