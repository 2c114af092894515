# The I/O engine (engine.c): route queries served by C threads that never take the
# GIL; every other frame comes to Python through Engine.events, answered with
# Engine.send. The first cut of issue 30: not yet the server's.

import os as _os

from libc.errno cimport errno

from engine cimport *

_ENGINE_KINDS = {RE_OPEN: "open", RE_FRAME: "frame", RE_CLOSED: "closed"}


cdef class Engine:
    """I/O threads serving a listening socket from ``table`` (a TopicTable): route
    queries (found, TOPIC_NOT_EXIST) are answered in C in the table's answer
    serialize type; ``events`` gives Python the rest: ``("open", conn, peer)``,
    ``("frame", conn, frame)`` (its length prefix included; the connection waits,
    unread, until ``send(conn, answer)`` resumes it) and ``("closed", conn, b"")``.

    ``stop`` from the thread that calls ``events`` (or once no call is running)."""

    cdef rmq_engine* e
    cdef TopicTable table
    cdef object sock

    def __cinit__(self):
        self.e = NULL

    def __init__(self, TopicTable table, sock, *, int threads=1,
                 Py_ssize_t max_frame=16 * 1024 * 1024, Py_ssize_t max_output=4 * 1024 * 1024,
                 int max_connections=10_000):
        cdef re_config cfg
        if not 1 <= threads <= RE_MAX_THREADS:
            raise ValueError(f"threads must be 1 to {RE_MAX_THREADS}, not {threads}")
        if max_frame < 8 or max_output < 1 or max_connections < 1:
            raise ValueError(f"max_frame {max_frame}, max_output {max_output} and "
                             f"max_connections {max_connections} must be positive "
                             "(max_frame at least 8)")
        cfg.threads = threads
        cfg.max_frame = max_frame
        cfg.max_output = max_output
        cfg.max_connections = max_connections
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

    def events(self, double timeout=1.0):
        """The events queued since the last call, oldest first, waiting up to
        ``timeout`` seconds (the GIL released) for one: ``[(kind, conn, data)]``."""
        cdef rmq_engine* e = self._running()
        cdef re_event* chain
        cdef re_event* ev
        with nogil:
            chain = re_next(e, timeout)
        out = []
        try:
            ev = chain
            while ev != NULL:
                data = PyBytes_FromStringAndSize(ev.data, ev.len)
                out.append((_ENGINE_KINDS[ev.kind], ev.conn,
                            data.decode("ascii") if ev.kind == RE_OPEN else data))
                ev = ev.next
        finally:
            re_free_events(chain)
        return out

    def send(self, uint64_t conn, data, bint resume=True):
        """Queue ``data`` (bytes) for connection ``conn`` and, with ``resume``, let it
        go on with its next frames. A connection gone meanwhile is ignored."""
        cdef rmq_engine* e = self._running()
        cdef const uint8_t[::1] view = data
        cdef int rc
        cdef size_t n = view.shape[0]
        with nogil:
            rc = re_send(e, conn, <const char*>(&view[0] if n else NULL), n, resume)
        if rc < 0:
            raise MemoryError()

    def close_connection(self, uint64_t conn):
        """Close ``conn`` once its queued output is written."""
        if re_close(self._running(), conn) < 0:
            raise MemoryError()

    def counts(self):
        """``{"served": routes written, "not_found": TOPIC_NOT_EXIST answers written,
        "connections": open now}``."""
        cdef rs_counts c
        cdef int n
        re_counts(self._running(), &c, &n)
        return {"served": c.served, "not_found": c.not_found, "connections": n}

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
