"""The NameServer on the compiled core's I/O engine (``serverEngine=c``): C threads
serve the port, Python decides the rest.

The engine (``rmq._core.Engine``, src/_core/engine.c) accepts, reads, splits frames,
answers route queries (GET_ROUTEINFO_BY_TOPIC, found or TOPIC_NOT_EXIST, zone mode,
both serialize types) from the route table under its read lock and writes, in
``serverIoThreads`` threads that never take the GIL. Every other frame comes here
whole, with its connection's id, through the engine's bounded queue (one batch of
frames per connection at a time: the connection is not read meanwhile). The event
loop waits on the queue's descriptor (``Engine.event_fd``) with its other sockets
and takes the events there, in order: the requests are answered as on the asyncio
server (``processor.quick``, else the table thread) and the answers go back with
``Engine.send``, which lets the connection go on.

What stays where:
- In C, where the bytes are: maxFrameLength (close after the answers before the bad
  frame), maxConnections, the per-connection output bound (Java's water marks or
  maxOutputBufferBytes) pausing reads, maxTotalOutputBufferBytes, idle close (and
  aborting closes the peer does not let complete), SO_SNDBUF/SO_RCVBUF.
- In Python, as on asyncio (rmq.namesrv.server.NameServerApp, whose behaviour this
  class inherits): the requests of the control plane, decode errors (closing their
  connection after the answers before), the liveness scan's closes, brokers dropped
  when their connection closes, needWaitForService and the graceful shutdown's
  GO_AWAY (route queries go to Python while they hold), ACL (route queries go to
  Python when the ACL checks them), metrics (the engine's counts summed at scrape).
- Trace recording (``--trace-dir``): each I/O thread appends the frames it reads and
  writes to a ring of its own, never waiting (a full ring drops and counts); a
  drainer thread takes them every TRACE_DRAIN seconds, in time order, to the
  TraceRecorder.
- TLS (``tls.server.mode`` with a certificate): on the I/O threads too, with OpenSSL
  of Python's ssl module on the SSL_CTX of the context rmq.tls builds (engine.c
  decides each connection by its first byte, as rmq.namesrv.tlsconn does; tls.c).
  Where that OpenSSL cannot be used from C (``_core.engine_tls`` says why: another
  Python, a statically linked OpenSSL), ``make_app`` serves on asyncio and logs why.
"""

import asyncio
import logging
import socket
import threading
import time

import rmq
from rmq.codec import decode_frame
from rmq.errors import RmqError
from rmq.namesrv.handlers import NEEDS_TABLE
from rmq.namesrv.server import NameServerApp, _foreign_protocol, encode_answer, shares_body
from rmq.namesrv.tlsconn import ServerTls, refused_plain, tls_failed
from rmq.protocol import IN, OUT, RequestCode

log = logging.getLogger(__name__)

#: Answers (bytes) Python hands the engine for one connection at a time: past them, the
#: rest of its batch waits until the engine says the connection's output drained (a
#: batch of 64 big answers, e.g. 206s to a client that does not read, is not built
#: whole while its output is backed up).
TURN_BYTES = 1024 * 1024
#: Big answer bodies (a cached topic list) kept as the engine writes them, the
#: latest kept (EngineServerApp.shared_body): the current lists, and a few that a
#: change just replaced.
SHARED_BODIES = 4
#: Trace recording: each I/O thread's ring (bytes), drained this often (seconds).
TRACE_RING_BYTES = 16 * 1024 * 1024
TRACE_DRAIN = 0.05


def unavailable(processor, trace):
    """Why ``processor`` cannot be served by the engine, or None when it can."""
    if rmq.IMPLEMENTATION != "compiled":
        return "the pure-Python reference has no I/O engine"
    from rmq import _core
    if not isinstance(processor.routes.topic_table, _core.TopicTable):
        return "the route table is not the compiled core's"
    tls = ServerTls.from_config(processor.config)
    if tls is not None:
        why = _core.engine_tls(tls.context)
        if why is not None:
            return f"TLS cannot be served by the I/O threads ({why})"
    return None


class EngineConnection:
    """A client connection of the engine, as the request processor sees it
    (hashable: the route table keys brokers by it)."""

    __slots__ = ("server", "id", "peer", "closing", "busy", "waiting", "tabled")

    def __init__(self, server, conn_id, peer):
        self.server = server
        self.id = conn_id
        self.peer = peer
        self.closing = False
        self.busy = False           # its frames are with Python
        self.waiting = None         # (how to go on, its arguments) until its output drains
        self.tabled = False         # requests of it went to the table thread (server.py)

    def __repr__(self):
        return f"<conn {self.id} {self.peer}>"

    def close(self):
        """Close after sending what is queued (the engine aborts it when that does
        not happen within serverChannelMaxIdleTimeSeconds)."""
        if not self.closing:
            self.closing = True
            engine = self.server.engine
            if engine is not None:
                engine.close_connection(self.id)


class EngineServerApp(NameServerApp):
    """A NameServerApp whose connections the compiled core's I/O engine serves."""

    def __init__(self, processor, *, trace=None):
        super().__init__(processor, trace=trace)
        self.engine = None
        self._sock = None
        self._by_id = {}            # connection id -> EngineConnection
        self._stopping = False      # the trace drainer's last pass
        self._drainer = None
        self._last_counts = None    # the engine's, as it stopped (scrapes never go back)
        # route queries signed for the ACL: every one goes to the gate in Python
        self._acl_routes = bool(self.config.aclEnable and self.processor.checker.checks_routes)
        self._routes_in_c = True    # until needWaitForService or GO_AWAY says otherwise
        self._shared = {}           # id(body) -> (body, its SharedBytes), SHARED_BODIES

    # ---------------------------------------------------------------- listening

    @property
    def sockets(self):
        return (self._sock,) if self._sock is not None else ()

    async def _listen(self, host, port):
        s = self.settings
        family, kind, proto, _, addr = (await self.loop.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE))[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            # before listen(): RCVBUF also sizes the window scale of the handshake
            s.set_buffers(sock)
            sock.bind(addr)
            sock.listen(self.config.serverSocketBacklog)
            self.engine = rmq._core.Engine(
                self._processor.routes.topic_table, sock, threads=s.io_threads,
                # brokers and admin clients (what talks to Python) on a thread of their
                # own, the route threads left to the clients (the engine's limit is
                # 256 threads in all: at serverIoThreads=256 there is no room for it)
                control_thread=s.io_threads < 256,
                max_frame=s.max_frame_length, max_output=s.write_high,
                resume_output=s.write_low,
                max_connections=s.max_connections, idle_seconds=max(s.idle_seconds, 0),
                max_total_output=self.config.maxTotalOutputBufferBytes,
                sndbuf=s.sndbuf, rcvbuf=s.rcvbuf,
                trace_bytes=TRACE_RING_BYTES if self.trace is not None else 0,
                tls=self.tls.context if self.tls is not None else None,
                tls_enforcing=self.tls is not None and self.tls.mode == "enforcing")
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._apply_routes()
        # (the loop thread itself takes the events: no thread between the I/O threads
        # and the loop, whose hand-over would cost every Python request a wake-up)
        self.loop.add_reader(self.engine.event_fd, self._take_events)
        if self.trace is not None:
            self._drainer = threading.Thread(target=self._drain_trace, name="rmq-engine-trace",
                                             daemon=True)
            self._drainer.start()

    def _network_tasks(self):
        return []                   # idle connections: the engine closes them

    def describe(self):
        return (f"C engine, {self.settings.io_threads} I/O threads and a control thread; "
                f"{type(self.loop).__module__} loop for the other requests")

    def _core_routes(self, on):
        self._routes_in_c = on
        self._apply_routes()

    def _apply_routes(self):
        if self.engine is not None:
            self.engine.route_queries_in_c(self._routes_in_c and not self._acl_routes)

    def _engine_counts(self):
        engine = self.engine
        return engine.counts() if engine is not None else self._last_counts

    def trace_dropped(self):
        dropped = super().trace_dropped()
        e = self._engine_counts()
        return dropped + (e["trace_dropped"] if e else 0)

    def network_counts(self):
        counts = super().network_counts()
        e = self._engine_counts()
        if e is not None:
            counts["served"] += e["served"]
            counts["not_found"] += e["not_found"]
            counts["bytes_in"] += e["bytes_in"]
            counts["bytes_out"] += e["bytes_out"]
            if e["refused"]:
                counts["refused"]["connection_limit"] = (
                    counts["refused"].get("connection_limit", 0) + e["refused"])
        return counts

    # ---------------------------------------------------------------- trace

    def _drain_trace(self):
        """The drainer thread: the threads' trace records to the recorder, frame by
        frame, in time order (Engine.trace_take merges the threads' rings)."""
        engine, record = self.engine, self.trace.record
        peers = {}
        while True:
            stopping = self._stopping
            for t, conn, kind, data in engine.trace_take(flush=stopping):
                if kind == "open":
                    peers[conn] = data
                elif kind == "close":
                    peers.pop(conn, None)
                else:
                    peer, direction = peers.get(conn, ""), IN if kind == "in" else OUT
                    view, off = memoryview(data), 0
                    while off < len(view):
                        end = off + 4 + int.from_bytes(view[off:off + 4], "big")
                        record(conn, peer, direction, bytes(view[off:end]), t)
                        off = end
            if stopping:
                return
            time.sleep(TRACE_DRAIN)

    # ---------------------------------------------------------------- events

    def _take_events(self):
        """The engine's events, on the loop (its descriptor is readable)."""
        self._dispatch(self.engine.events(0))

    def _dispatch(self, events):
        for kind, conn_id, data in events:
            if kind == "frame":
                self._frames(conn_id, data)
            elif kind == "drained":
                conn = self._by_id.get(conn_id)
                if conn is not None and conn.waiting is not None and not conn.closing:
                    go_on, args = conn.waiting
                    conn.waiting = None
                    go_on(conn, *args)
            elif kind == "open":
                conn = EngineConnection(self, conn_id, data)
                self._by_id[conn_id] = conn
                self.connections.add(conn)
                self.counters.connections += 1
            else:
                self._closed(conn_id, *data)

    def _frames(self, conn_id, data):
        """A connection's frames for Python (a batch: engine.c), answered in order."""
        conn = self._by_id.get(conn_id)
        if conn is None or conn.closing:
            return                  # closed meanwhile: nothing to answer
        conn.busy = True
        cmds, error = [], None
        view = memoryview(data)
        off = 0
        try:
            while off < len(view):
                end = off + 4 + int.from_bytes(view[off:off + 4], "big")
                # A registration's body (up to maxFrameLength) is read where the engine
                # put it: CRC-checked and scanned by the table, never kept; the
                # other handlers take bytes.
                cmd = decode_frame(view[off:end], self.settings.max_frame_length,
                                   copy_body=False)
                if cmd.body and cmd.code != RequestCode.REGISTER_BROKER:
                    cmd.body = bytes(cmd.body)
                cmds.append(cmd)
                off = end
        except RmqError as e:       # answered up to it, then closed (_send)
            error = e
        self.counters.received(cmds)
        self._answer(conn, cmds, [], error)

    def _answer(self, conn, cmds, out, error):
        """Answer ``cmds`` here, in order; from the first that needs the table on, in
        the table thread (after the work queued before it), while the connection
        waits unread and the others do not."""
        size = 0
        for i, cmd in enumerate(cmds):
            if size >= TURN_BYTES:
                self._turn(conn, out, self._answer, (cmds[i:], [], error))
                return
            if cmd.is_response:     # a NameServer sends no requests: nothing to match
                continue
            resp = self.processor.quick(cmd, conn)
            if resp is NEEDS_TABLE:
                conn.tabled = True
                rest = cmds[i:]
                fut = self.table_thread.submit(self._in_table_thread, conn, rest, out, error)
                loop = self.loop

                def done(f):        # (None: the table thread sent the answers itself)
                    if f.exception() is not None or f.result() is not None:
                        loop.call_soon_threadsafe(self._answered, conn, rest, out, error, f)

                fut.add_done_callback(done)
                return
            if resp is not None:
                size += encode_answer(self, cmd, resp, conn.peer, out)
        self._send(conn, out, error)

    def _in_table_thread(self, conn, cmds, out, error):
        """The answers to ``cmds`` for the loop to send (_answered), or None: sent from
        here. A broker's registration, one frame answered with a few bytes, is answered
        without waiting for the loop's turn (a wake-up: bench/README.md); what needs the
        loop's thread goes there: a body to share (shared_body), a batch that may reach
        a turn's bytes, a close after a frame that did not decode."""
        if conn.closing:
            return ()               # closed while it waited: nobody to answer
        handle = self.processor.handle
        resps = [None if cmd.is_response else handle(cmd, conn) for cmd in cmds]
        if len(cmds) != 1 or error is not None or sum(map(len, out)) >= TURN_BYTES:
            return resps
        (cmd,), (resp,) = cmds, resps
        if resp is not None:
            if shares_body(resp):
                return resps
            encode_answer(self, cmd, resp, conn.peer, out)
        self._send(conn, out, None)
        return None

    def _answered(self, conn, cmds, out, error, fut):
        # (handle() answers every exception itself; were one to escape, the
        # connection still goes on, unanswered, rather than wait forever)
        resps = () if fut.exception() is not None else fut.result()
        self._send_answers(conn, list(zip(cmds, resps)), out, error)

    def _send_answers(self, conn, answered, out, error):
        """The table thread's answers, encoded and sent a turn at a time too."""
        size = sum(map(len, out))
        for i, (cmd, resp) in enumerate(answered):
            if size >= TURN_BYTES:
                self._turn(conn, out, self._send_answers, (answered[i:], [], error))
                return
            if resp is not None:
                size += encode_answer(self, cmd, resp, conn.peer, out)
        self._send(conn, out, error)

    def _turn(self, conn, out, go_on, args):
        """A turn's answers to the engine; ``go_on(conn, *args)`` once they are
        written down to resume_output (a "drained" event): what Python has queued for
        one connection stays within the engine's output bounds, in buffers of a
        turn's size that the pool gives again, whatever the batch."""
        if conn.closing or self.engine is None:
            return
        conn.waiting = (go_on, args)
        self.engine.send(conn.id, out, resume=False, notify=True)

    def _send(self, conn, out, error):
        """Python's answers to ``conn``, which goes on with its frames, or after a
        frame that did not decode, closes once they are sent."""
        conn.busy = False
        engine = self.engine        # (the loop's or the table thread: see _in_table_thread)
        if conn.closing or engine is None:
            return
        # (copied once, into the engine's buffer); after a frame that did not decode,
        # the connection does not go on: the frames after it are never answered
        engine.send(conn.id, out, resume=error is None)
        if error is not None:
            self.counters.refused["bad_frame"] += 1
            log.warning("closing %s: %s", conn.peer, error)
            conn.close()

    def shared_body(self, body):
        """``body`` as a SharedBytes, made once per body (a cached topic list is the
        same object until the table changes): the engine writes it from where it is
        to every connection that asks, not a copy per answer. The event loop's
        thread only."""
        entry = self._shared.get(id(body))
        if entry is None:
            from rmq import _core
            entry = self._shared[id(body)] = (body, _core.SharedBytes(body))
            while len(self._shared) > SHARED_BODIES:
                del self._shared[next(iter(self._shared))]
        return entry[1]

    def _closed(self, conn_id, reason, detail):
        conn = self._by_id.pop(conn_id, None)
        if conn is None:
            return
        conn.closing = True
        self.connections.discard(conn)
        if reason == "bad_frame":
            self.counters.refused["bad_frame"] += 1
            first, head = detail
            other = _foreign_protocol(head, self.settings.max_frame_length) if first else None
            if other is not None:
                self.counters.refused["foreign_protocol"] += 1
                log.warning("closing %s: %s on the RocketMQ port (it speaks plain "
                            "remoting frames)", conn.peer, other)
            else:
                log.warning("closing %s: frame length %d above maxFrameLength %d", conn.peer,
                            int.from_bytes(head[:4], "big", signed=True),
                            self.settings.max_frame_length)
        elif reason == "output_budget":
            self.counters.refused["output_budget"] += 1
            log.warning("output of all connections > maxTotalOutputBufferBytes %d: "
                        "aborted %s", self.config.maxTotalOutputBufferBytes, conn.peer)
        elif reason == "idle":
            log.info("closed idle connection %s (%ss)", conn.peer, self.settings.idle_seconds)
        elif reason == "unsent":
            log.info("aborted connection %s: not closed after %ss", conn.peer,
                     self.settings.idle_seconds)
        elif reason == "no_memory":
            log.error("closed %s: out of memory for its buffers", conn.peer)
        elif reason == "tls":
            tls_failed(self.counters, conn.peer, *detail)
        elif reason == "tls_required":
            refused_plain(self.counters, conn.peer)
        if conn.tabled:         # (as the asyncio server's connection_lost)
            self.in_table_thread(self.processor.connection_closed, conn)

    # ---------------------------------------------------------------- shutdown

    async def _close_connections(self):
        engine = self.engine
        engine.stop_accepting()
        log.info("stopped accepting connections")
        await self._close_each_connection()     # the engine's stop closes the rest
        self.loop.remove_reader(engine.event_fd)
        self._stopping = True
        if self._drainer is not None:       # (its last pass takes what is left)
            await self.loop.run_in_executor(None, self._drainer.join)
        self._dispatch(engine.events(0))    # the last events
        self._last_counts = engine.counts()
        self.engine = None
        # A send the table thread began (_in_table_thread: it read self.engine before
        # it became None) ends before the engine is freed: the work queued before this
        # one in the table thread is done first.
        await asyncio.wrap_future(self.in_table_thread(lambda: None))
        await self.loop.run_in_executor(None, engine.stop)
        self._sock.close()
        for conn in list(self.connections):     # stopped without a close event
            self._closed(conn.id, "closed", None)
