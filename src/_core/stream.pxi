# The streaming side of the frame codec: one frame-splitting loop (_FrameStream),
# shared by FrameDecoder (frames to commands) and FrameSplitter (frames kept whole,
# for traces); fallback/codec.py's _FrameStream is its twin.

# ---------------------------------------------------------------- streaming

cdef enum:
    KEEP_BUFFER = 256 * 1024   # a larger idle buffer is freed, not kept per connection

# frame_at, FRAME_INCOMPLETE, FRAME_BAD_LENGTH: wire.h's splitting rule (rmq_frame_at),
# which serve.c's loop shares.


cdef class _FrameStream:
    """A byte stream cut at frame boundaries: ``feed`` returns ``emit(frame,
    length)`` for each frame it completes (``frame`` at the 4-byte prefix): the
    command for FrameDecoder, the frame's bytes for FrameSplitter. Only
    an incomplete frame is ever copied: complete frames are emitted straight from
    the caller's buffer. After an error the stream is unusable (the server closes
    the connection) and every later ``feed`` raises again.
    TopicTable.serve_routes (routes.pxi) answers route queries through the cdef
    surface (``len``, ``take``, ``_feed``, ``reset``, ``error``)."""

    cdef uint8_t* buf
    cdef Py_ssize_t len
    cdef Py_ssize_t cap
    cdef readonly Py_ssize_t max_frame_length
    cdef object error
    cdef bint whole             # FrameSplitter: frames kept whole, not decoded

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

    @cython.final
    cdef inline object emit(self, const uint8_t* frame, int32_t length):
        # a flag, not a virtual hook: the call (and every method here, final)
        # inlines into the loops, which keeps FrameDecoder's speed
        if self.whole:
            return PyBytes_FromStringAndSize(<const char*>frame, 4 + <Py_ssize_t>length)
        return decode_payload(frame + 4, length)

    @cython.final
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

    @cython.final
    cdef void reset(self) noexcept:
        self.len = 0
        if self.cap > KEEP_BUFFER:
            free(self.buf)
            self.buf = NULL
            self.cap = 0

    @cython.final
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
            PyList_Append(out, self.emit(self.buf, length))
            self.reset()
        return used

    def feed(self, data):
        """Add bytes from the stream; returns what the frames completed by them give."""
        return self._feed(data)

    @cython.final
    cdef list _feed(self, data):
        cdef Py_buffer view
        cdef const uint8_t* p
        cdef Py_ssize_t n, pos = 0
        cdef int64_t length
        cdef list out = []
        if self.error is not None:
            raise type(self.error)(f"{'splitter' if self.whole else 'decoder'} failed earlier: "
                                  f"{self.error}")
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            p = <const uint8_t*>view.buf
            n = view.len
            if self.len:
                pos = self.take(p, n, out)
            if self.len == 0:
                while True:
                    length = frame_at(p + pos, n - pos, self.max_frame_length)
                    if length < 0:
                        break
                    PyList_Append(out, self.emit(p + pos, <int32_t>length))
                    pos += 4 + length
                if length == FRAME_BAD_LENGTH:
                    check_length(be32(p + pos), self.max_frame_length)   # raises
                if pos < n:     # less than a frame: its length, if there, was checked
                    self.take(p + pos, n - pos, out)
        except ProtocolError as e:
            self.error = e
            self.reset()
            e.decoded = out
            raise
        finally:
            PyBuffer_Release(&view)
        return out


@cython.final
cdef class FrameDecoder(_FrameStream):
    """Splits a byte stream into commands; any chunking gives the same commands.

    It only splits and decodes (see _FrameStream); after an error every later
    ``feed`` raises again.
    """


@cython.final
cdef class FrameSplitter(_FrameStream):
    """Splits a byte stream into whole frames (bytes, 4-byte length prefix
    included) without decoding them: what a trace records. Any chunking gives the
    same frames; the length checks and errors are FrameDecoder's, and after an
    error every later ``feed`` raises again."""

    def __cinit__(self, *args, **kwargs):
        self.whole = True
