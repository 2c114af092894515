# The I/O engine (engine.c): route queries served by C threads that never take the
# GIL; every other frame comes to Python through Engine.events, answered with
# Engine.send. rmq.namesrv.dataplane runs the NameServer on it (serverEngine=c).

import os as _os
from operator import itemgetter as _itemgetter
import platform as _platform

from libc.errno cimport errno
from cpython.buffer cimport PyBuffer_FillInfo

from engine cimport *
from bufpool cimport (rp_take, rp_give, rp_trim, rp_stats, rp_shared, rp_shared_new,
                     rp_shared_hold, rp_shared_drop)
from tls cimport tl_load, tl_ctx_matches

cdef extern from *:
    """
    /* CPython's ssl.SSLContext (Modules/_ssl.c: PySSLContext): its SSL_CTX is the first
       field after the object's head, in every CPython 3 (engine_tls checks it) */
    typedef struct { PyObject_HEAD void *ctx; } rmq_ssl_context;
    """
    ctypedef struct rmq_ssl_context:
        void* ctx

_ENGINE_KINDS = {RE_OPEN: "open", RE_FRAME: "frame", RE_CLOSED: "closed",
                 RE_DRAINED: "drained"}
_TRACE_KINDS = {RE_TRACE_IN: "in", RE_TRACE_OUT: "out", RE_TRACE_OPEN: "open",
                RE_TRACE_CLOSE: "close"}
#: Why a connection closed (the first byte of a "closed" event's data)
ENGINE_CLOSE_REASONS = {RE_WHY_PEER: "peer", RE_WHY_BAD_FRAME: "bad_frame",
                        RE_WHY_IDLE: "idle", RE_WHY_OUTPUT_BUDGET: "output_budget",
                        RE_WHY_NO_MEMORY: "no_memory", RE_WHY_CLOSED: "closed",
                        RE_WHY_UNSENT: "unsent", RE_WHY_TLS: "tls",
                        RE_WHY_TLS_REQUIRED: "tls_required"}
assert len(ENGINE_CLOSE_REASONS) == RE_WHY_COUNT == 9    # re_stats.closed in engine.pxd

#: ssl's verify modes -> OpenSSL's (SSL_VERIFY_PEER 1, | SSL_VERIFY_FAIL_IF_NO_PEER_CERT 2)
_OPENSSL_VERIFY = {0: 0, 1: 1, 2: 3}


def _buffer_pool_trim(double now):
    """Free the pooled buffers (bufpool.c) idle since before ``now`` minus the idle
    time (monotonic seconds; the engine's threads do it as time goes: for tests)."""
    rp_trim(now)


def _buffer_pool_stats():
    """``(buffers, bytes)`` kept in the buffer pool now (for tests; an Engine's
    counts() has them too)."""
    cdef size_t buffers, nbytes
    rp_stats(&buffers, &nbytes)
    return buffers, nbytes


@cython.final
cdef class _EventBytes:
    """A "frame" event's bytes where the engine put them, as a read-only buffer (an
    Engine.events frame is a memoryview of one): a registration's body, up to
    max_frame, is not copied between the socket and its decoding. Freed with the
    last view of it."""
    cdef re_event* ev

    def __getbuffer__(self, Py_buffer* buf, int flags):
        PyBuffer_FillInfo(buf, self, self.ev.data, <Py_ssize_t>self.ev.len, 1, flags)

    def __releasebuffer__(self, Py_buffer* buf):
        pass

    def __dealloc__(self):
        if self.ev != NULL:
            re_free_event(self.ev)


cdef rb_partial* _scanned_as_it_arrived(object body):
    """What the engine scanned of a registration's body while it arrived (engine.c
    scan_arriving), when ``body`` is a view into an Engine.events frame that has it:
    taken from the event (the caller frees it: re_free_partial), else NULL.
    rb_scan_register_body_from uses it only if it is of that very body."""
    cdef re_event* ev
    cdef rb_partial* partial
    if type(body) is not memoryview:
        return NULL
    owner = (<memoryview>body).obj
    if type(owner) is not _EventBytes:
        return NULL
    ev = (<_EventBytes>owner).ev
    partial = ev.partial
    ev.partial = NULL
    return partial


def _arrived_entries(frame):
    """Test hook: how many topic entries of the registration in ``frame`` (an
    Engine.events frame) the engine scanned while it arrived, not yet taken."""
    cdef rb_partial* partial
    if type(frame) is not memoryview or type(frame.obj) is not _EventBytes:
        raise TypeError("not a frame of Engine.events")
    partial = (<_EventBytes>frame.obj).ev.partial
    return partial.body.ntopics if partial != NULL else 0


cdef void* _ssl_ctx(context) except NULL:
    """The SSL_CTX of ``context`` (an ssl.SSLContext) for the engine's threads, or
    ValueError saying why the engine cannot serve TLS with it."""
    import ssl, _ssl
    cdef char err[256]
    cdef void* ctx
    if _platform.python_implementation() != "CPython":
        raise ValueError(f"TLS on the engine needs CPython's ssl module, not "
                         f"{_platform.python_implementation()}'s")
    if not isinstance(context, _ssl._SSLContext):
        raise ValueError(f"tls must be an ssl.SSLContext, not {type(context).__name__}")
    # callbacks of the ssl module expect an SSLSocket of its own behind every SSL
    if (context.sni_callback is not None or getattr(context, "keylog_filename", None)
            or getattr(context, "_msg_callback", None) is not None):
        raise ValueError("the SSLContext has Python callbacks (sni_callback, "
                         "keylog_filename or _msg_callback): only the ssl module can "
                         "serve it")
    if tl_load(_ssl.__file__.encode(), err, sizeof(err)) < 0:
        raise ValueError(f"OpenSSL of the ssl module not found: {err.decode(errors='replace')}")
    ctx = (<rmq_ssl_context*>context).ctx
    if not tl_ctx_matches(ctx, int(context.options),
                          _OPENSSL_VERIFY[int(context.verify_mode)]):
        raise ValueError("the SSLContext's SSL_CTX is not where CPython keeps it")
    return ctx


def engine_tls(context):
    """None when the engine's threads can serve TLS with ``context`` (an
    ssl.SSLContext: OpenSSL of the ssl module, on its SSL_CTX), else why not."""
    try:
        _ssl_ctx(context)
    except ValueError as e:
        return str(e)
    return None


cdef enum:
    NOGIL_COPY = 65536      # Engine.send copies a part of this size or more without the GIL


@cython.final
cdef class SharedBytes:
    """Bytes in the core's memory that ``Engine.send`` queues as they are, however many
    connections they go to: a cached answer's body (one 206 answer on a big table is
    megabytes, and a client may pipeline hundreds of them) copied once, here, instead
    of once per answer. Each queued send holds a reference, dropped by the I/O thread
    once written; the memory goes with the last. A read-only buffer."""
    cdef rp_shared* _s

    def __cinit__(self, data):
        cdef const uint8_t[::1] view = data
        cdef size_t n = view.shape[0]
        with nogil:
            self._s = rp_shared_new(&view[0] if n else NULL, n)
        if self._s == NULL:
            raise MemoryError()

    def __len__(self):
        return self._s.len

    def __getbuffer__(self, Py_buffer* buf, int flags):
        PyBuffer_FillInfo(buf, self, self._s.data, <Py_ssize_t>self._s.len, 1, flags)

    def __releasebuffer__(self, Py_buffer* buf):
        pass

    def __dealloc__(self):
        rp_shared_drop(self._s)


cdef char* _joined(parts, Py_ssize_t start, Py_ssize_t stop, size_t* total) except? NULL:
    """parts[start:stop] (bytes-like) copied one after the other into one buffer for
    the engine (from its pool of big buffers when big; NULL when empty), its length in
    ``total``."""
    cdef const uint8_t[::1] view
    cdef size_t off = 0, n, cap
    cdef char* buf
    total[0] = 0
    for i in range(start, stop):
        total[0] += len(parts[i])
    if total[0] == 0:
        return NULL
    buf = <char*>rp_take(total[0], &cap)
    if buf == NULL:
        raise MemoryError()
    try:
        for i in range(start, stop):
            view = parts[i]
            n = view.shape[0]
            if n >= NOGIL_COPY:
                # (a 206's megabytes: the table thread's registration goes on
                # meanwhile; the view holds the part's buffer)
                with nogil:
                    memcpy(buf + off, &view[0], n)
            elif n:
                memcpy(buf + off, &view[0], n)
            off += n
    except BaseException:
        rp_give(buf, total[0])
        raise
    return buf


cdef class Engine:
    """I/O threads serving a listening socket from ``table`` (a TopicTable): route
    queries (found, TOPIC_NOT_EXIST) are answered in C in the table's answer
    serialize type; ``events`` gives Python the rest: ``("open", conn, peer)``,
    ``("frame", conn, frames)`` (a frame, its length prefix included, and the
    complete frames after it that are not route queries, up to 64 frames or 1 MiB;
    the connection waits, unread, until ``send(conn, answers)`` resumes it) and ``("closed", conn, why)``:
    ``why`` is ``(reason, detail)``, reason a value of ``ENGINE_CLOSE_REASONS`` and,
    for "bad_frame", detail ``(first, head)``: whether nothing came before the bad
    frame, and its first bytes (else None).

    The limits: ``max_frame`` (a longer frame closes its connection after the
    answers before it), ``max_output`` (a connection's unsent bytes at which it is
    not read, until they are down to ``resume_output``; default: max_output),
    ``max_connections`` (more closed at accept), ``idle_seconds``
    (connections neither read nor written that long are closed, 0: never),
    ``max_total_output`` (unsent bytes of all connections: the largest stalled ones
    aborted past 3/4 of it, 0: no bound); ``sndbuf``/``rcvbuf``: SO_SNDBUF/SO_RCVBUF
    of accepted sockets (0: the OS's); ``trace_bytes``: each thread records what it
    reads and writes in a ring of that size for ``trace_take`` (0: no trace).

    ``control_thread``: one more thread, to which a connection moves when it first
    hands Python a frame that is not a route query (brokers' registrations, admin
    clients' 206s: megabytes
    to read and write), so that the ``threads`` serving the clients that only ask
    routes do not copy them. Its id stays.

    ``tls``: an ssl.SSLContext (``engine_tls`` says whether it can be served here): a
    connection whose first byte opens a TLS handshake record is served over TLS by
    the threads, with OpenSSL on that context; with ``tls_enforcing``, any other is
    closed ("tls_required"). A TLS failure closes its connection with reason "tls"
    and OpenSSL's reason as detail.

    ``stop`` from the thread that calls ``events`` (or once no call is running)."""

    cdef rmq_engine* e
    cdef TopicTable table
    cdef object sock
    cdef object tls
    cdef dict _config
    cdef list _trace_held           # trace records at or after the last watermark

    def __cinit__(self):
        self.e = NULL
        self._trace_held = []

    def __init__(self, TopicTable table, sock, *, int threads=1, bint control_thread=False,
                 Py_ssize_t max_frame=16 * 1024 * 1024, Py_ssize_t max_output=4 * 1024 * 1024,
                 Py_ssize_t resume_output=-1, int max_connections=10_000, double idle_seconds=0,
                 Py_ssize_t max_total_output=0, int sndbuf=0, int rcvbuf=0,
                 Py_ssize_t trace_bytes=0, tls=None, bint tls_enforcing=False):
        cdef re_config cfg
        if not 1 <= threads <= RE_MAX_THREADS - control_thread:
            raise ValueError(f"threads must be 1 to {RE_MAX_THREADS - control_thread}"
                             f"{' with the control thread' if control_thread else ''}, "
                             f"not {threads}")
        if max_frame < 8 or max_output < 1 or max_connections < 1:
            raise ValueError(f"max_frame {max_frame}, max_output {max_output} and "
                             f"max_connections {max_connections} must be positive "
                             "(max_frame at least 8)")
        if trace_bytes and trace_bytes < 4096:
            raise ValueError(f"trace_bytes {trace_bytes}: 0 (no trace) or at least 4096")
        if idle_seconds < 0 or max_total_output < 0 or sndbuf < 0 or rcvbuf < 0:
            raise ValueError(f"idle_seconds {idle_seconds}, max_total_output "
                             f"{max_total_output}, sndbuf {sndbuf} and rcvbuf {rcvbuf} "
                             "cannot be negative")
        cfg.threads = threads
        cfg.control_thread = control_thread
        cfg.max_frame = max_frame
        cfg.max_output = max_output
        cfg.resume_output = max_output if resume_output < 0 else min(resume_output, max_output)
        cfg.max_connections = max_connections
        cfg.idle_seconds = idle_seconds
        cfg.max_total_output = max_total_output
        cfg.sndbuf = sndbuf
        cfg.rcvbuf = rcvbuf
        cfg.trace_bytes = trace_bytes
        cfg.tls_ctx = NULL if tls is None else _ssl_ctx(tls)
        cfg.tls_enforcing = tls_enforcing and tls is not None
        self.tls = tls              # its SSL_CTX is held by the engine, the object too
        self._config = {"threads": threads, "control_thread": control_thread,
                        "max_frame": max_frame, "max_output": max_output,
                        "resume_output": cfg.resume_output,
                        "max_connections": max_connections, "idle_seconds": idle_seconds,
                        "max_total_output": max_total_output, "sndbuf": sndbuf,
                        "rcvbuf": rcvbuf, "trace_bytes": trace_bytes,
                        "tls": tls is not None, "tls_enforcing": bool(cfg.tls_enforcing)}
        self.table = table
        self.sock = sock            # kept open while the threads use its descriptor
        cdef int fd = sock.fileno()
        with nogil:
            self.e = re_start(table.t, table.answer_stype, fd, &cfg)
        if self.e == NULL:
            raise OSError(errno, f"the engine did not start: {_os.strerror(errno)}")

    cdef rmq_engine* _running(self) except NULL:
        if self.e == NULL:
            raise ValueError("the engine is stopped")
        return self.e

    @property
    def event_fd(self):
        """A descriptor that is readable while events may be queued: an event loop
        waits on it (``loop.add_reader``) and then takes them with ``events(0)``,
        which makes it unreadable again (an eventfd; the engine closes it)."""
        return re_event_fd(self._running())

    def events(self, double timeout=1.0):
        """The events queued since the last call, oldest first, waiting up to
        ``timeout`` seconds (the GIL released) for one: ``[(kind, conn, data)]``; a
        "frame" event's data is a read-only memoryview of the frames (not a copy).
        With ``timeout`` 0: what is queued, at once."""
        cdef rmq_engine* e = self._running()
        cdef re_event* chain
        cdef re_event* ev
        cdef _EventBytes owner
        with nogil:
            chain = re_next(e, timeout)
        out = []
        try:
            while chain != NULL:
                ev = chain
                chain = ev.next
                ev.next = NULL
                if ev.kind == RE_FRAME:
                    try:
                        owner = _EventBytes.__new__(_EventBytes)
                    except BaseException:
                        re_free_event(ev)
                        raise
                    owner.ev = ev
                    out.append((_ENGINE_KINDS[RE_FRAME], ev.conn, memoryview(owner)))
                    continue
                kind, conn = ev.kind, ev.conn
                try:
                    data = PyBytes_FromStringAndSize(ev.data, ev.len)
                finally:
                    re_free_event(ev)
                if kind == RE_OPEN:
                    data = data.decode("ascii")
                elif kind == RE_CLOSED:
                    data = (ENGINE_CLOSE_REASONS[data[0]],
                            (data[1] == 1, data[2:]) if data[0] == RE_WHY_BAD_FRAME
                            else (data[1] == 1, data[2:].decode("utf-8", "replace"))
                            if data[0] == RE_WHY_TLS
                            else None)
                elif kind == RE_DRAINED:
                    data = None
                out.append((_ENGINE_KINDS[kind], conn, data))
        finally:
            re_free_events(chain)
        return out

    def send(self, uint64_t conn, data, bint resume=True, bint notify=False):
        """Queue ``data`` (bytes or a SharedBytes, or a list or tuple of them, written
        one after the other) for connection ``conn`` and, with ``resume``, let it go on
        with its next frames; with ``notify``, a ``("drained", conn, None)`` event comes
        once its unsent output is down to ``resume_output``. A connection gone
        meanwhile is ignored. Bytes are copied once, into the buffer the engine writes
        from (no join in Python); a SharedBytes is not copied at all."""
        cdef rmq_engine* e = self._running()
        cdef size_t total, n = 0
        cdef char* buf
        cdef re_part* arr
        cdef rp_shared* shared
        cdef Py_ssize_t i = 0, j, count
        cdef int rc
        parts = data if isinstance(data, (list, tuple)) else (data,)
        count = len(parts)
        if not any(type(part) is SharedBytes for part in parts):
            buf = _joined(parts, 0, count, &total)
            with nogil:
                rc = re_send_owned(e, conn, buf, total, resume, notify)
        else:
            # runs of bytes joined, each SharedBytes a part of its own (referenced)
            arr = <re_part*>malloc(count * sizeof(re_part))
            if arr == NULL:
                raise MemoryError()
            try:
                while i < count:
                    if type(parts[i]) is SharedBytes:
                        shared = (<SharedBytes>parts[i])._s
                        rp_shared_hold(shared)
                        arr[n] = re_part(shared.data, shared.len, shared)
                        i += 1
                    else:
                        j = i + 1
                        while j < count and type(parts[j]) is not SharedBytes:
                            j += 1
                        buf = _joined(parts, i, j, &total)
                        arr[n] = re_part(buf, total, NULL)
                        i = j
                    n += 1
            except BaseException:
                for i in range(n):
                    if arr[i].shared != NULL:
                        rp_shared_drop(arr[i].shared)
                    else:
                        rp_give(arr[i].data, arr[i].len)
                free(arr)
                raise
            with nogil:
                rc = re_send_parts(e, conn, arr, n, resume, notify)
        if rc < 0:
            raise MemoryError()

    def close_connection(self, uint64_t conn):
        """Close ``conn`` once its queued output is written."""
        if re_close(self._running(), conn) < 0:
            raise MemoryError()

    @property
    def config(self):
        """The limits the threads keep (as given; resume_output within max_output)."""
        self._running()
        return dict(self._config)

    def connection_state(self, uint64_t conn):
        """``conn`` as its I/O thread sees it, asked of the thread (for tests and
        debugging): ``{"queued_output", "buffered_input", "output_buffers" (the
        buffers its unsent output spans: big outputs are queued, not copied together),
        "with_python", "paused", "closing", "tls", "thread" (the index of the thread
        serving it: the control thread's is ``threads``)}``, or None when it is not
        open."""
        cdef rmq_engine* e = self._running()
        cdef re_conn_state st
        cdef int rc
        with nogil:
            rc = re_conn_state_read(e, conn, &st)
        if rc < 0:
            raise MemoryError()
        if not st.found:
            return None
        return {"queued_output": st.queued_output, "buffered_input": st.buffered_input,
                "output_buffers": st.output_buffers,
                "with_python": bool(st.with_python), "paused": bool(st.paused),
                "closing": bool(st.closing), "tls": bool(st.tls), "thread": st.thread}

    def trace_take(self, bint flush=False):
        """The threads' trace records in time order, ``[(time_ns, conn, kind, data)]``,
        kind "in" or "out" (data: whole frames), "open" (data: the peer) or "close":
        those made before the threads' watermark (re_trace_watermark); the later ones
        are held for the next call, which may bring earlier ones from another thread
        (``flush``: every one, for the last call). Call from one thread at a time."""
        cdef rmq_engine* e = self._running()
        cdef size_t cap = self._config["trace_bytes"], n, off
        cdef uint8_t* buf
        cdef re_trace_head h
        cdef int i, threads = re_thread_count(e)
        cdef uint64_t watermark
        out, self._trace_held = self._trace_held, []
        if not cap:
            return out
        buf = <uint8_t*>malloc(cap)
        if buf == NULL:
            raise MemoryError()
        with nogil:
            watermark = re_trace_watermark(e)
        try:
            for i in range(threads):
                with nogil:
                    n = re_trace_take(e, i, buf, cap)
                off = 0
                while off < n:
                    memcpy(&h, buf + off, sizeof(h))
                    off += sizeof(h)
                    data = PyBytes_FromStringAndSize(<char*>buf + off, h.len)
                    off += h.len
                    out.append((h.time_ns, h.conn, _TRACE_KINDS[h.kind],
                                data.decode("ascii") if h.kind == RE_TRACE_OPEN else data))
        finally:
            free(buf)
        out.sort(key=_itemgetter(0))        # (stable: each thread's order kept)
        if not flush:
            n = len(out)
            while n and out[n - 1][0] >= watermark:
                n -= 1
            self._trace_held = out[n:]
            del out[n:]
        return out

    def route_queries_in_c(self, bint in_c):
        """False: every route query goes to Python too (needWaitForService, the
        GO_AWAY period, route queries that ACL checks); True (the start): the
        threads answer them."""
        re_route_queries(self._running(), in_c)

    def stop_accepting(self):
        """Accept no more connections; the open ones are served on."""
        re_stop_accepting(self._running())

    def counts(self):
        """What the threads did, summed: ``served`` (routes written),
        ``not_found`` (TOPIC_NOT_EXIST answers written), ``bytes_in``,
        ``bytes_out``, ``accepted``, ``refused`` (over max_connections),
        ``closed`` (by reason, ``ENGINE_CLOSE_REASONS``), ``queued_output`` (unsent
        bytes of all connections), ``connections`` (open now), and ``pooled_buffers``
        and ``pooled_bytes``: the big buffers kept for reuse (bufpool.h; one pool
        for the process's engines)."""
        cdef re_stats s
        cdef int n
        cdef size_t pooled, pooled_bytes
        re_stats_read(self._running(), &s, &n)
        rp_stats(&pooled, &pooled_bytes)
        return {"served": s.served, "not_found": s.not_found, "bytes_in": s.bytes_in,
                "bytes_out": s.bytes_out, "accepted": s.accepted, "refused": s.refused,
                "closed": {name: s.closed[why] for why, name in ENGINE_CLOSE_REASONS.items()},
                "queued_output": s.queued_output, "trace_dropped": s.trace_dropped,
                "connections": n, "pooled_buffers": pooled, "pooled_bytes": pooled_bytes}

    def stop(self):
        """Stop the threads and close every connection (no events for them)."""
        cdef rmq_engine* e = self.e
        if e != NULL:
            self.e = NULL
            with nogil:
                re_stop(e)

    def __dealloc__(self):
        if self.e != NULL:
            re_stop(self.e)
            self.e = NULL
