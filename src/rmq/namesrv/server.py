"""The NameServer's network layer: asyncio (uvloop when installed) over the core's
FrameDecoder, with the limits an exposed server needs.

- Frames above ``maxFrameLength`` and undecodable bytes close that connection only
  (after the answers to the frames before the bad one are sent; a client that had
  stopped reading loses the requests still queued for it, with the connection).
- Output is bounded per connection: when a client stops reading and its queued
  answers pass ``maxOutputBufferBytes``, rmq stops reading (and answering) its
  requests until the queue drains; the requests already decoded wait, bounded by
  one read.
- Queued output of all connections together is bounded by
  ``maxTotalOutputBufferBytes``: past it, the connections holding the most output
  that stopped reading are aborted, largest first.
- One request of a connection at a time: while one waits for the table thread, the
  connection is not read (as asyncpg pauses reading when its consumer lags), so a
  client cannot queue work; the requests of its last read wait, bounded by that read.
- At most ``maxConnections`` connections; more are closed at once.
- The table thread: with the compiled core, one thread owns the route and KV tables.
  Every request that changes them or reads them beyond a cached answer (REGISTER_BROKER,
  heartbeats, KV changes, cache misses of the list answers, ...), the liveness scan
  and the drops of closed connections run there, one after the other; the loop thread
  only does I/O, route answers in the core and cached answers, so it never waits for
  the table lock, whatever a client sends. Work for a connection closed meanwhile is
  dropped. With the compiled core the loop answers route queries from the tables
  (a C read lock per answer, never held across a change's Python half); with the
  pure-Python reference (RMQ_PUREPYTHON=1), from the answers already cached.
- Connections idle (neither read nor written) for ``serverChannelMaxIdleTimeSeconds``
  are closed, as Java's IdleStateHandler does. A close that cannot complete (the
  peer does not read what is queued) is turned into an abort after the same delay.
- A liveness scan every ``scanNotActiveBrokerInterval`` ms drops silent brokers and
  closes their connections (as Java's scanNotActiveBroker does); a closed
  connection drops the brokers registered over it at once.
- Accepted sockets get ``serverSocketSndBufSize`` / ``serverSocketRcvBufSize``
  (SO_SNDBUF / SO_RCVBUF, 0: the OS default) and, when both are set,
  ``writeBufferLowWaterMark`` / ``writeBufferHighWaterMark`` as the output bounds at
  which rmq stops and resumes reading (Java: NettyRemotingServer.addCustomConfig,
  Netty's WRITE_BUFFER_WATER_MARK and channelWritabilityChanged), capped by
  ``maxOutputBufferBytes``.
- Every answer is in the NameServer's own serialize type (``rocketmq.serialize.type``,
  JSON by default), whatever the request used, as Java 5.x answers (4.9 mirrored the
  request's): Python answers get it in ``Connection._frame``, the route answers of
  the core from the route table (``RouteTable.answer_serialize_type``).
- ``needWaitForService``: for ``waitSecondsForService`` seconds after the start, route
  queries are answered SYSTEM_ERROR "name server not ready" (Java 5.x
  ClientRequestProcessor, as fixed by apache/rocketmq#9183): a restarted NameServer
  has empty tables until the brokers re-register (every 30 s), and "not ready" keeps
  clients from taking TOPIC_NOT_EXIST for an answer (e.g. falling back to TBW102).
- Shutdown (:meth:`NameServerApp.close`): with ``enableShutdownGracefully`` the server
  first keeps serving for ``shutdownWaitTimeSeconds``, answering every request from
  a client above V5_3_1 (version > 475) with GO_AWAY (1500, "please go away"; none
  to a oneway request), as Java 5.x NettyRemotingServer.shutdown and
  NettyRemotingAbstract.processRequestCommand do; such clients reconnect elsewhere.
  Then it stops accepting, closes every connection after sending what is queued
  (aborting those that do not take it within a second) and stops. KV changes were on
  disk as they were made (kvConfig.json rewritten, or journaled past
  maxKvRewriteTableBytes); the owner of the KVConfig closes it after the server
  (``rmq namesrv`` does), which compacts any journal into kvConfig.json.
"""

import asyncio
import collections
import concurrent.futures
import functools
import itertools
import logging
import os
import select
import socket
import sys
import threading

import rmq
from rmq.codec import FrameDecoder, encode_frame, encode_frame_head
from rmq.namesrv import acl, snapshot
from rmq.namesrv.handlers import NEEDS_TABLE
from rmq.namesrv.metrics import MetricsServer
from rmq.namesrv.tlsconn import ServerTls
from rmq.protocol import V5_3_1, RequestCode, ResponseCode

log = logging.getLogger(__name__)

_conn_ids = itertools.count(1)
_RDHUP = getattr(select, "POLLRDHUP", None)      # Linux: the peer closed its side


def _foreign_protocol(data, max_frame_length):
    """What a connection's first bytes are when they are not a remoting frame that
    could fit (a TLS client on a plain port reads as a frame of ~369 MB), or None."""
    if len(data) < 4 or int.from_bytes(data[:4], "big") <= max_frame_length:
        return None
    if data[0] == 0x16 and data[1] == 0x03 and data[2] <= 0x04:
        return "a TLS handshake"
    if data[:4] in (b"GET ", b"POST", b"HEAD", b"PUT ", b"PRI "):
        return "an HTTP request"
    return None


class Connection(asyncio.Protocol):
    """One client connection. Hashable: the route table keys brokers by it."""

    def __init__(self, server):
        self.server = server
        self.counters = server.counters
        self.id = next(_conn_ids)
        self.transport = None
        self.peer = None
        self.decoder = FrameDecoder(server.settings.max_frame_length)
        self.pending = collections.deque()   # decoded requests waiting their turn
        self.busy = False                    # a request of ours runs in the table thread
        self.lost = False
        self.writing_paused = False
        self.closing = False
        self.closed_at = None                # loop time of close(), for _close_idle
        self.close_when_done = False         # a bad frame came after the pending requests
        self.aborted = False                 # by the total output budget
        self.last_active = 0.0
        self.first_bytes = True              # nothing received yet
        self.trace = None                    # a ConnectionTrace when recording
        # Requests of it went to the table thread: only then may brokers be registered
        # over it, and its close need the table thread's connection_closed (a client
        # that opens and closes connections costs the table thread nothing).
        self.tabled = False

    def __repr__(self):
        return f"<conn {self.id} {self.peer}>"

    # ---------------------------------------------------------------- asyncio callbacks

    def connection_made(self, transport):
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.last_active = self.server.loop.time()
        if self.server.trace is not None:
            self.trace = self.server.trace.connection(self.id, self.peer)
            self.transport = transport = _TracedTransport(transport, self.trace)
        self.counters.connections += 1
        if len(self.server.connections) >= self.server.settings.max_connections:
            self.counters.refused["connection_limit"] += 1
            log.warning("connection limit %d reached: closing %s",
                        self.server.settings.max_connections, self.peer)
            self.closing = True
            transport.abort()
            return
        self.server.settings.tune(transport)
        transport.set_write_buffer_limits(high=self.server.settings.write_high,
                                         low=self.server.settings.write_low)
        self.server.connections.add(self)

    def data_received(self, data):
        if self.trace is not None:
            self.trace.incoming(data)
        if self.closing:
            return
        if self.first_bytes:
            self.first_bytes = False
            # tls.server.mode: TLS or plain, by this first byte (rmq.namesrv.tlsconn)
            if self.server.tls is not None and not self.server.tls.accept(self, data):
                return
            other = _foreign_protocol(data, self.server.settings.max_frame_length)
            if other is not None:
                self.counters.refused["foreign_protocol"] += 1
                log.warning("closing %s: %s on the RocketMQ port (it speaks plain "
                            "remoting frames)", self.peer, other)
                self.close()
                return
        self.last_active = self.server.loop.time()
        self.counters.bytes_in += len(data)
        # Route queries with a cached answer are answered inside the core, within
        # the room left in the output buffer; the rest go through the handlers.
        # With output backed up there is no room: decode only, answer on drain.
        backed_up = self.pending or self.writing_paused or self.busy
        room = 0 if backed_up else max(
            self.server.settings.max_output - self.transport.get_write_buffer_size(), 0)
        answers, cmds, error = self.server.served_routes(self.decoder, data, room)
        if cmds:
            self.counters.received(cmds)
        if answers:
            self._send((answers,))
        if backed_up:
            self.pending.extend(cmds)
        elif cmds:
            self._answer(cmds)
        if error is not None:
            self.counters.refused["bad_frame"] += 1
            log.warning("closing %s: %s", self.peer, error)
            # After the answers to the requests before the bad frame, sent then.
            self.close_when_done = True
            if not self.busy and not self.pending:
                self.close()

    def close(self):
        """Close after sending what is queued (NameServerApp aborts the connection
        when that does not happen within serverChannelMaxIdleTimeSeconds)."""
        if not self.closing:
            self.closing = True
            self.closed_at = self.server.loop.time()
        self.pending.clear()
        self.transport.close()

    def pause_writing(self):
        # The client is not reading: stop reading its requests too.
        self.writing_paused = True
        self.transport.pause_reading()
        self.server.output.enforce()

    def resume_writing(self):
        self.writing_paused = False
        # The peer read what was queued: activity, for the idle check (as Netty's
        # IdleStateHandler counts completed writes).
        self.last_active = self.server.loop.time()
        self._continue()

    def connection_lost(self, exc):
        self.closing = True
        self.lost = True
        self.pending.clear()
        self.server.connections.discard(self)
        if self.tabled:     # only the table thread registers brokers over a connection
            self.server.in_table_thread(self.server.processor.connection_closed, self)

    # ---------------------------------------------------------------- answering

    def _answer(self, cmds):
        processor = self.server.processor
        out = []
        out_bytes = answers = 0
        for i, cmd in enumerate(cmds):
            if cmd.is_response:          # a NameServer sends no requests: nothing to match
                continue
            resp = processor.quick(cmd, self)
            if resp is NEEDS_TABLE:
                # Run it, and the requests after it (up to TABLE_BATCH), in the table
                # thread, in order; this connection's later requests wait for them
                # (unread), the other connections do not.
                if out:
                    self._send(out)
                    if self.closing:        # aborted by the total output budget
                        return
                self.pending.extend(cmds[i + TABLE_BATCH:])
                self._offload(cmds[i:i + TABLE_BATCH])
                return
            if resp is not None:
                out_bytes += self._encode(cmd, resp, out)
                answers += 1
            if self.writing_paused:
                self.pending.extend(cmds[i + 1:])
                break
            if answers >= TURN_ANSWERS or out_bytes >= TURN_BYTES:
                # Let flow control see the output, and the other connections have
                # their turn: the rest of this read waits for the next loop iteration.
                self._send(out)
                out = []
                out_bytes = answers = 0
                if self.closing:            # aborted by the total output budget
                    return
                if i + 1 < len(cmds):
                    self.pending.extend(cmds[i + 1:])
                    self.transport.pause_reading()
                    self.server.loop.call_soon(self._continue)
                    break
        if out:
            self._send(out)
        self.last_active = self.server.loop.time()

    def _send(self, frames):
        # (``frames``: encode_answer's parts, a big body apart from its head)
        # One write(), not writelines(): asyncio's writelines skips flow control in
        # some releases (3.12.1 and 3.13.0 here: no pause_writing however much is
        # queued), which would let a client that does not read grow memory unbounded.
        data = frames[0] if len(frames) == 1 else b"".join(frames)
        self.transport.write(data)
        self.counters.bytes_out += len(data)
        self.server.output.note(len(data))

    def _encode(self, cmd, resp, out):
        return encode_answer(self.server, cmd, resp, self.peer, out)

    def _offload(self, cmds):
        self.busy = True
        self.tabled = True
        self.transport.pause_reading()
        fut = self.server.loop.run_in_executor(self.server.writer, self._in_table_thread, cmds)
        fut.add_done_callback(functools.partial(self._offloaded, cmds))

    def _in_table_thread(self, cmds):
        if self.lost or self._peer_gone():
            return ()           # closed while it waited: nobody to answer, nothing to apply
        handle = self.server.processor.handle
        return [None if cmd.is_response else handle(cmd, self) for cmd in cmds]

    def _peer_gone(self):
        # The connection is not read while it waits, so asyncio cannot see a close:
        # ask the kernel whether the peer's FIN or a reset came (any thread may).
        sock = self.transport.get_extra_info("socket")
        if sock is None or _RDHUP is None:
            return False
        try:
            poller = select.poll()
            poller.register(sock.fileno(), _RDHUP)
            events = poller.poll(0)
        except (OSError, ValueError):       # closed by the loop meanwhile (fileno -1)
            return True
        return any(ev & (_RDHUP | select.POLLHUP | select.POLLERR) for _, ev in events)

    def _offloaded(self, cmds, fut):
        self.busy = False
        resps = fut.result()             # handle() answers every exception itself
        # A broker registered over a connection lost meanwhile is dropped by the
        # connection_closed queued behind it in the table thread.
        if self.closing:
            return
        frames = []
        for cmd, resp in zip(cmds, resps):
            if resp is not None:
                self._encode(cmd, resp, frames)
        if frames:
            self._send(frames)
            self.last_active = self.server.loop.time()
        self._continue()

    def _continue(self):
        """Answer the requests that wait, then read again once none is left."""
        if self.closing:
            return
        if self.pending and not self.busy and not self.writing_paused:
            cmds = list(self.pending)
            self.pending.clear()
            self._answer(cmds)
        if self.busy or self.pending:
            return
        if self.close_when_done:
            self.close()
        elif not self.writing_paused:
            self.transport.resume_reading()


def encode_answer(app, cmd, resp, peer, out):
    """Append the frame of Python's answer ``resp`` to ``cmd`` to ``out``, counted, and
    return its length. Every answer written in Python passes here (the processor's, the
    gates', the ACL's), on either network layer: in the NameServer's own serialize
    type, whatever the request used, as Java 5.x answers (its responses keep
    RemotingCommand's serializeTypeConfigInThisServer; 4.9 copied the request's).

    A body of SHARED_BODY bytes or more (a cached topic list: one answer to a 206 on
    a big table is megabytes) goes to ``out`` after its frame's head, as the network
    layer holds it (``app.shared_body``: the engine's writes it from where it is),
    and no frame is built for it (a fresh allocation of the body's size,
    page-faulted, per answer)."""
    app.counters.answered(cmd, resp)
    resp.serialize_type = app.settings.serialize_type
    try:
        body = resp.body
        if shares_body(resp):
            head = encode_frame_head(resp)
            out += (head, app.shared_body(body))
            return len(head) + len(body)
        frame = encode_frame(resp)
    except Exception:
        # e.g. a lone surrogate (a "\ud800" escape in a JSON header) echoed in a
        # remark: answer anyway rather than let the exception escape the network
        # layer, which would drop the connection and the answers of the other
        # requests of its read.
        log.exception("cannot encode the answer to request %d from %s", cmd.code, peer)
        resp = cmd.response(ResponseCode.SYSTEM_ERROR, "the answer cannot be encoded")
        resp.serialize_type = app.settings.serialize_type
        frame = encode_frame(resp)
    out.append(frame)
    return len(frame)


#: The body size from which an answer's body is written as it is, after its head
#: (encode_answer).
SHARED_BODY = 64 * 1024


def shares_body(resp):
    """Whether encode_answer writes ``resp``'s body as the network layer holds it
    (``app.shared_body``: the engine's is the event loop thread's only)."""
    return resp.body is not None and len(resp.body) >= SHARED_BODY


#: Answers (count, bytes) written for one connection before the other connections
#: get their turn: a client pipelining expensive requests delays the others by one
#: turn at most.
TURN_ANSWERS = 64
TURN_BYTES = 1024 * 1024
#: Requests of one connection handed to the table thread at once (in order).
TABLE_BATCH = 64
#: The GIL switch interval with a table thread (seconds).
WRITER_SWITCH_INTERVAL = 0.0005
#: How much nicer the table thread is than the loop thread: on a busy machine a
#: registration's CPU time yields to the loop thread's route answers (bench/README.md
#: has route latency during registrations at both priorities).
WRITER_NICE = 10


def usable_cpus():
    """The CPUs this process may run on: its affinity (what taskset, a cpuset or a
    container's cpuset-cpus leave it), as os.process_cpu_count gives it from Python
    3.13 on; the machine's count where there is no affinity. A CPU quota
    (cpu.max, cpu.cfs_quota_us) is not read: there, set serverIoThreads."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _log_failure(fut):
    if not fut.cancelled() and fut.exception() is not None:
        log.error("table thread task failed", exc_info=fut.exception())


def _lower_writer_priority():
    try:        # Linux: a thread's own nice value (raising it needs no privilege)
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid,
                       min(19, os.getpriority(os.PRIO_PROCESS, tid) + WRITER_NICE))
    except (OSError, AttributeError):
        pass    # elsewhere the table thread runs at the loop's priority


class TableThread:
    """The thread that owns the tables (see the module doc), at a lower priority.

    While it runs Python code, the loop thread waits for the GIL up to the switch
    interval each time it comes back from the core: the interval is lowered to
    WRITER_SWITCH_INTERVAL while any TableThread runs (several servers may share a
    process), and given back when the last one shuts down, unless someone else
    changed it meanwhile."""

    _lock = threading.Lock()
    _running = 0
    _saved = None               # the process's interval before the first one

    def __init__(self):
        self.executor = concurrent.futures.ThreadPoolExecutor(
            1, "rmq-tables", initializer=_lower_writer_priority)
        with TableThread._lock:
            if TableThread._running == 0:
                TableThread._saved = sys.getswitchinterval()
                sys.setswitchinterval(min(TableThread._saved, WRITER_SWITCH_INTERVAL))
            TableThread._running += 1
        self._stopped = False

    def submit(self, fn, *args):
        """Run ``fn(*args)`` after the work queued before it; a Future (its errors
        are logged)."""
        fut = self.executor.submit(fn, *args)
        fut.add_done_callback(_log_failure)
        return fut

    def shutdown(self):
        """Wait for the queued work; the last one running restores the interval."""
        self.executor.shutdown()
        with TableThread._lock:
            if self._stopped:
                return
            self._stopped = True
            TableThread._running -= 1
            if TableThread._running == 0 and sys.getswitchinterval() == min(
                    TableThread._saved, WRITER_SWITCH_INTERVAL):
                sys.setswitchinterval(TableThread._saved)


class _OutputBudget:
    """maxTotalOutputBufferBytes over all connections: once the output queued for
    them passes 3/4 of it, the connections holding the most, those that stopped
    reading first, are aborted until it is under 5/8."""

    def __init__(self, connections, limit):
        self.connections = connections
        self.limit = limit
        self._since_check = 0

    def note(self, nbytes):
        """``nbytes`` more were queued for some connection: every 64th of the
        budget, check the total (connections grow their output in turns, so none may
        reach its own limit, and pause, before all together pass the budget)."""
        self._since_check += nbytes
        if self._since_check >= self.limit // 64:
            self._since_check = 0
            self.enforce()

    def enforce(self):
        # (aborted connections stay in the set until connection_lost: not counted)
        sizes = [(c.transport.get_write_buffer_size(), c) for c in self.connections
                 if not c.aborted]
        total = sum(size for size, _ in sizes)
        # Headroom for what is not in a transport's buffer yet (answers being encoded,
        # the checks' interval, the allocator's slack: freed buffers are reused, not
        # returned): the budget bounds the process's growth, not only the queues;
        # past 3/4 of it, down to 5/8.
        if total <= self.limit * 3 // 4:
            return
        target = self.limit * 5 // 8
        stalled = sorted(sizes, key=lambda sc: (sc[1].writing_paused, sc[0]), reverse=True)
        for size, conn in stalled:
            conn.counters.refused["output_budget"] += 1
            log.warning("output of all connections %d > maxTotalOutputBufferBytes %d: "
                        "aborting %s (%s, %d bytes queued)", total, self.limit,
                        conn.peer, "stopped reading" if conn.writing_paused else "reading",
                        size)
            conn.closing = conn.aborted = True
            conn.pending.clear()
            conn.transport.abort()
            total -= size
            if total <= target:
                break


_PASS = object()     # the gate lets the request through


def _no_room(serve, decoder, data, room):
    """``serve`` (a route server) with no room for answers: every query goes to Python."""
    return serve(decoder, data, 0)


class _Gate:
    """Stands in for the request processor (as ``NameServerApp.processor``) while the network
    layer answers some requests itself: route queries before ``needWaitForService``'s
    delay is over, every request of a client above V5_3_1 during a graceful shutdown.

    While it stands, the core answers no route query itself (no room for answers)
    and hands them all to :meth:`handle`; anything else is the NameServer's.
    """

    def __init__(self, app, processor):
        self._app = app
        self._ns = processor
        self._told = set()          # connections told to go away (logged once each)

    def __getattr__(self, name):
        return getattr(self._ns, name)

    def handle(self, cmd, conn=None):
        resp = self._gate(cmd, conn)
        return self._ns.handle(cmd, conn) if resp is _PASS else resp

    def quick(self, cmd, conn=None):
        resp = self._gate(cmd, conn)
        return self._ns.quick(cmd, conn) if resp is _PASS else resp

    def _gate(self, cmd, conn):
        app = self._app
        # Java: NettyRemotingAbstract.processRequestCommand, before any processor;
        # writeResponse sends nothing for a oneway request.
        if app.going_away and cmd.version > V5_3_1:
            app.go_away_count += 1
            self._ns.counters.refused["go_away"] += 1
            if conn is not None and conn.id not in self._told:
                self._told.add(conn.id)
                log.info("shutting down: GO_AWAY to %s (version %d, request %d)",
                         getattr(conn, "peer", conn), cmd.version, cmd.code)
            return None if cmd.is_oneway else cmd.response(ResponseCode.GO_AWAY,
                                                           "please go away")
        # Java: ClientRequestProcessor.getRouteInfoByTopic
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC and not app.ready():
            self._ns.counters.refused["not_ready"] += 1
            log.warning("name server not ready. request code %d", cmd.code)
            return None if cmd.is_oneway else cmd.response(ResponseCode.SYSTEM_ERROR,
                                                           "name server not ready")
        return _PASS


#: Java settings of thread pools, queues and Netty internals: accepted (they are
#: shown by GET_NAMESRV_CONFIG), without effect on one event loop.
_NO_EFFECT = (
    "serverWorkerThreads", "serverCallbackExecutorThreads", "serverSelectorThreads",
    "serverOnewaySemaphoreValue", "serverAsyncSemaphoreValue",
    "serverNettyWorkerGroupEnable", "serverPooledByteBufAllocatorEnable",
    "useEpollNativeSelector", "clientRequestThreadPoolNums", "defaultThreadPoolNums",
    "clientRequestThreadPoolQueueCapacity", "defaultThreadPoolQueueCapacity",
    "unRegisterBrokerQueueCapacity",
)


class _TracedTransport:
    """A connection's transport that hands every byte written to its trace."""

    __slots__ = ("_transport", "_trace")

    def __init__(self, transport, trace):
        self._transport = transport
        self._trace = trace

    def write(self, data):
        self._trace.outgoing(data)
        self._transport.write(data)

    def writelines(self, chunks):
        raise NotImplementedError("the server writes with write() (see Connection._send)")

    def __getattr__(self, name):
        return getattr(self._transport, name)


class Settings:
    """The network layer's limits, periods and socket options, read from the config
    once at start, as Java reads them: a remote UPDATE_NAMESRV_CONFIG shows the new
    value but cannot lift a limit."""

    def __init__(self, config):
        self.config = config
        self.max_frame_length = config.maxFrameLength
        self.max_connections = config.maxConnections
        self.max_output = config.maxOutputBufferBytes
        self.idle_seconds = config.serverChannelMaxIdleTimeSeconds
        self.scan_interval = config.scanNotActiveBrokerInterval / 1000
        self.sndbuf = max(config.serverSocketSndBufSize, 0)
        self.rcvbuf = max(config.serverSocketRcvBufSize, 0)
        self.write_high, self.write_low = self._water_marks(config)
        self.graceful_seconds = (max(config.shutdownWaitTimeSeconds, 0)
                                 if config.enableShutdownGracefully else 0)
        self.wait_for_service = (max(config.waitSecondsForService, 0)
                                 if config.needWaitForService else 0)
        self.serialize_type = config.answer_serialize_type()    # ConfigError: a bad value
        self.engine = config.server_engine()                    # ConfigError: a bad value
        self.io_threads = config.serverIoThreads or usable_cpus()

    def _water_marks(self, config):
        """(high, low) output bounds: Java's water marks when both are set (as
        addCustomConfig requires), within maxOutputBufferBytes; else rmq's own."""
        high, low = config.writeBufferHighWaterMark, config.writeBufferLowWaterMark
        if high > 0 and low > 0:
            if low > high:
                log.warning("writeBufferLowWaterMark %d > writeBufferHighWaterMark %d: "
                            "both ignored", low, high)
            else:
                high = min(high, self.max_output)
                return high, min(low, high)
        return self.max_output, self.max_output // 4

    def log(self):
        """What differs from the defaults, at start."""
        c = self.config
        if self.sndbuf:
            log.info("server set SO_SNDBUF to %d", self.sndbuf)
        if self.rcvbuf:
            log.info("server set SO_RCVBUF to %d", self.rcvbuf)
        if (self.write_high, self.write_low) != (self.max_output, self.max_output // 4):
            log.info("server set write buffer water marks to %d,%d", self.write_low,
                     self.write_high)
        if self.wait_for_service:
            log.info("needWaitForService: route queries answered \"name server not "
                     "ready\" for %d s", self.wait_for_service)
        if self.graceful_seconds:
            log.info("enableShutdownGracefully: on shutdown, GO_AWAY to clients above "
                     "V5_3_1 for %d s first", self.graceful_seconds)
        if self.serialize_type != "JSON":
            log.info("rocketmq.serialize.type=%s: every answer in %s headers",
                     self.serialize_type, self.serialize_type)
        defaults = {f.key: f.default_value() for f in c.fields()}
        changed = [f"{k}={getattr(c, k)}" for k in _NO_EFFECT
                   if getattr(c, k) != defaults[k]]
        if changed:
            log.info("accepted without effect (one event loop, no thread pools): %s",
                     ", ".join(changed))

    def set_buffers(self, sock):
        if self.sndbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.sndbuf)
        if self.rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)

    def tune(self, transport):
        """Socket options of an accepted connection (Java's childOption)."""
        if self.sndbuf or self.rcvbuf:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                try:
                    self.set_buffers(sock)
                except OSError as e:
                    log.warning("cannot set the socket buffers of a connection: %s", e)


class NameServerApp:
    """Listens, owns the connections and the periodic tasks of a NameServer whose
    requests ``processor`` (a DefaultRequestProcessor) answers.

    ``trace``: a rmq.trace.segments.TraceRecorder that gets every frame read and written
    (``rmq namesrv --trace-dir``); the caller closes it after the server."""

    def __init__(self, processor, *, trace=None):
        self.processor = processor
        self.trace = trace
        self._processor = processor      # self.processor is a _Gate while one is needed
        self.counters = processor.counters
        self.config = config = processor.config
        if config.aclEnable:
            # every request is checked before the NameServer sees it (rmq.namesrv.acl)
            self.processor = self._processor = processor = acl.gate(processor, config)
        self.settings = Settings(config)
        self.tls = ServerTls.from_config(config)     # None: TLS disabled
        self.connections = set()
        self.output = _OutputBudget(self.connections, config.maxTotalOutputBufferBytes)
        self.table_thread = TableThread()
        self.writer = self.table_thread.executor
        routes = processor.routes
        routes.answer_serialize_type = self.settings.serialize_type
        # What answers route queries on the loop: tables without concurrent readers
        # (the reference's) only from the answers they cached, never a build.
        self._served_routes = routes.route_server(build=routes.concurrent)
        if config.aclEnable and processor.checker.checks_routes:
            # signed route queries: the core answers none (no room), the gate checks each
            self._served_routes = functools.partial(_no_room, self._served_routes)
        self.served_routes = self._served_routes
        self.loop = None
        self._started = False        # listening (close() undoes what start() did)
        self.going_away = False      # graceful shutdown: GO_AWAY to clients > V5_3_1
        self.go_away_count = 0
        self._ready_at = None        # loop time route queries are answered from
        self._server = None
        self._tasks = []
        self._closing = None
        self._hurry = None
        # made here, before `rmq namesrv` freezes what is loaded at start out of the
        # GC's full passes (prometheus_client's modules with it)
        self.metrics = MetricsServer(self) if config.metricsPort else None

    def in_table_thread(self, fn, *args):
        """Run ``fn(*args)`` in the table thread, after the work queued before it."""
        return self.table_thread.submit(fn, *args)

    @property
    def sockets(self):
        return self._server.sockets if self._server else ()

    # ---------------------------------------------------------------- start

    async def start(self, host, port):
        self.loop = asyncio.get_running_loop()
        if self.config.warmRestart:
            # before listening: the first route query finds the restored routes
            snapshot.load(self._processor.routes, self.config.routeSnapshotPath,
                          self._processor.clock())
        if self.settings.wait_for_service:
            # Java counts from the processor's creation, just before it listens.
            self._ready_at = self.loop.time() + self.settings.wait_for_service
            self._use_gate()
        await self._listen(host, port)
        self._started = True
        self._tasks = [self.loop.create_task(self._scan_brokers()), *self._network_tasks()]
        if self.config.warmRestart:
            self._tasks.append(self.loop.create_task(self._snapshot_routes()))
        if self._ready_at is not None:
            self._tasks.append(self.loop.create_task(self._wait_for_service()))
        if self.metrics is not None:
            await self.metrics.start(self.config.metricsAddress or host, self.config.metricsPort)
        addrs = ", ".join("%s:%s" % s.getsockname()[:2] for s in self.sockets)
        log.info("NameServer listening on %s (%s)", addrs, self.describe())
        self.settings.log()
        if self.tls is not None:
            log.info("%s", self.tls.describe())
        return self

    # ---------------------------------------------------------------- the network layer
    # (what rmq.namesrv.dataplane's EngineServerApp does its own way)

    async def _listen(self, host, port):
        self._server = await self.loop.create_server(
            lambda: Connection(self), host, port, reuse_address=True,
            backlog=self.config.serverSocketBacklog)
        for sock in self._server.sockets:
            # Inherited by the accepted sockets; RCVBUF before listen() also sizes
            # the window scale offered in the handshake.
            self.settings.set_buffers(sock)

    def _network_tasks(self):
        return [self.loop.create_task(self._close_idle())]

    def describe(self):
        """The network layer, for the start's log line."""
        return f"{type(self.loop).__module__} loop"

    def _core_routes(self, on):
        """Whether the core answers route queries (else the gate, in Python)."""
        self.served_routes = (self._served_routes if on
                              else functools.partial(_no_room, self._served_routes))

    def shared_body(self, body):
        """A big answer body as the network layer writes it (encode_answer): asyncio
        joins it to its head as it is."""
        return body

    def trace_dropped(self):
        """Traced frames dropped (0 when not tracing)."""
        return 0 if self.trace is None else self.trace.dropped

    def network_counts(self):
        """What the network layer counted beyond ``counters``: route answers
        written by the core (``served``, ``not_found``), bytes, refusals."""
        cache = self._processor.routes.cache_stats()
        c = self.counters
        return {"served": cache["served"], "not_found": cache["not_found"],
                "bytes_in": c.bytes_in, "bytes_out": c.bytes_out, "refused": dict(c.refused)}

    # ---------------------------------------------------------------- gate

    def ready(self):
        """False while needWaitForService holds route queries back."""
        return self._ready_at is None or self.loop.time() >= self._ready_at

    def _use_gate(self):
        if self.processor is self._processor:
            self.processor = _Gate(self, self._processor)
            self._core_routes(False)

    def _drop_gate(self):
        if not self.going_away and self.ready():
            self.processor = self._processor
            self._core_routes(True)

    async def _wait_for_service(self):
        await asyncio.sleep(max(self._ready_at - self.loop.time(), 0))
        self._ready_at = None
        self._drop_gate()
        log.info("name server ready: answering route queries")

    # ---------------------------------------------------------------- periodic tasks

    def _save_routes(self):
        """In the table thread: the route tables to routeSnapshotPath (warmRestart)."""
        try:
            size = snapshot.save(self._processor.routes, self.config.routeSnapshotPath)
            log.debug("route snapshot: %d bytes to %s", size, self.config.routeSnapshotPath)
        except (OSError, ValueError) as e:
            log.warning("route snapshot to %s failed: %s", self.config.routeSnapshotPath, e)

    async def _snapshot_routes(self):
        while True:
            await asyncio.sleep(self.config.routeSnapshotIntervalSeconds)
            await asyncio.wrap_future(self.in_table_thread(self._save_routes))

    async def _scan_brokers(self):
        while True:
            await asyncio.sleep(self.settings.scan_interval)
            try:
                dropped = await asyncio.wrap_future(
                    self.in_table_thread(self.processor.scan_not_active_brokers))
                # Java's scanNotActiveBroker closes the expired broker's channel too.
                for b in dropped:
                    conn = b.get("conn")
                    if getattr(conn, "server", None) is self and not conn.closing:
                        log.info("closing the connection %s of expired broker %s",
                                 conn.peer, b.get("brokerAddr"))
                        conn.close()
            except Exception:       # a scan must never stop the scanning
                log.exception("broker liveness scan failed")

    async def _close_idle(self):
        while True:
            idle = self.settings.idle_seconds
            await asyncio.sleep(min(max(idle / 4, 0.05), 5.0))
            if idle <= 0:
                continue
            now = self.loop.time()
            deadline = now - idle
            for conn in list(self.connections):
                if conn.closing:
                    # transport.close() waits until the queued answers are sent: a peer
                    # that never reads would hold the connection (and its buffer) forever.
                    if conn.closed_at is not None and conn.closed_at < deadline:
                        log.info("aborting connection %s: not closed after %ss", conn.peer,
                                 idle)
                        conn.transport.abort()
                elif conn.last_active < deadline:
                    log.info("closing idle connection %s (%ss)", conn.peer, idle)
                    conn.close()

    # ---------------------------------------------------------------- shutdown

    def hurry(self):
        """End a graceful shutdown's GO_AWAY period now (a second signal)."""
        if self._hurry is not None:
            self._hurry.set()

    async def close(self):
        """Stop, in Java's order (NettyRemotingServer.shutdown): the GO_AWAY period
        when enableShutdownGracefully, then no more connections, then the open ones
        closed after sending what is queued. Idempotent."""
        if self._closing is not None:
            return await self._closing
        self._closing = (self.loop or asyncio.get_running_loop()).create_future()
        try:
            await self._close()
        finally:
            self._closing.set_result(None)

    async def _close(self):
        loop = self.loop or asyncio.get_running_loop()
        started = loop.time()
        if self._started and self.settings.graceful_seconds:
            log.info("shutting down gracefully: answering GO_AWAY to clients above "
                     "V5_3_1 for %d s (%d connections)", self.settings.graceful_seconds,
                     len(self.connections))
            self.going_away = True
            self._use_gate()
            self._hurry = asyncio.Event()
            try:
                await asyncio.wait_for(self._hurry.wait(), self.settings.graceful_seconds)
            except asyncio.TimeoutError:
                pass
            log.info("GO_AWAY period over: %d GO_AWAY answers sent", self.go_away_count)
        for t in self._tasks:
            t.cancel()
        if self._started and self.config.warmRestart:
            # before the connections close: closing them drops their brokers
            await asyncio.wrap_future(self.in_table_thread(self._save_routes))
        if self._started:
            await self._close_connections()
        # changes under way complete (and persist)
        await loop.run_in_executor(None, self.table_thread.shutdown)
        if self.metrics is not None:    # last: /healthz says "shutting down" until here
            await self.metrics.close()
        log.info("NameServer stopped (shutdown took %.0f ms)", (loop.time() - started) * 1000)

    async def _close_each_connection(self):
        """Close every connection after sending what is queued, waiting up to a
        second: a peer that does not read must not hold up the shutdown (the caller
        aborts what is left)."""
        if self.connections:
            log.info("closing %d connections", len(self.connections))
        for conn in list(self.connections):
            conn.close()
        for _ in range(100):
            if not self.connections:
                break
            await asyncio.sleep(0.01)
        if self.connections:
            log.warning("aborting %d connections whose peers do not take their "
                        "answers", len(self.connections))

    async def _close_connections(self):
        """No more connections; the open ones closed after sending what is queued
        (within a second)."""
        self._server.close()
        log.info("stopped accepting connections")
        # (from Python 3.12 on, wait_closed() waits for every connection to be closed)
        await self._close_each_connection()
        for conn in list(self.connections):
            conn.transport.abort()
        await asyncio.sleep(0)      # let connection_lost run for the aborted ones
        await self._server.wait_closed()


def make_app(processor, *, trace=None):
    """The NameServer's network layer for ``processor``'s config: a NameServerApp
    (asyncio), or with ``serverEngine=c`` an EngineServerApp (the compiled core's I/O
    threads; rmq.namesrv.dataplane) where it can serve: not on the pure-Python
    reference, not with TLS where the ssl module's OpenSSL cannot be used from C
    (logged)."""
    settings = Settings(processor.config)          # ConfigError: a bad value
    if settings.engine == "c":
        from rmq.namesrv import dataplane
        why = dataplane.unavailable(processor, trace)
        if why is None:
            return dataplane.EngineServerApp(processor, trace=trace)
        # (the pure-Python reference never has it: no warning for what cannot be)
        log.log(logging.INFO if rmq.IMPLEMENTATION != "compiled" else logging.WARNING,
                "serverEngine=c: %s; serving with asyncio", why)
    return NameServerApp(processor, trace=trace)


def new_event_loop():
    """uvloop's loop when installed, else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()
