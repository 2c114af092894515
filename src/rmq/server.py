"""The NameServer's network layer: asyncio (uvloop when installed) over the core's
FrameDecoder, with the limits an exposed server needs.

- Frames above ``maxFrameLength`` and undecodable bytes close that connection only
  (after the answers to the frames before the bad one are sent; a client that had
  stopped reading loses the requests still queued for it, with the connection).
- Output is bounded per connection: when a client stops reading and its queued
  answers pass ``maxOutputBufferBytes``, rmq stops reading (and answering) its
  requests until the queue drains; the requests already decoded wait, bounded by
  one read.
- At most ``maxConnections`` connections; more are closed at once.
- Connections idle (neither read nor written) for ``serverChannelMaxIdleTimeSeconds``
  are closed, as Java's IdleStateHandler does. A close that cannot complete (the
  peer does not read what is queued) is turned into an abort after the same delay.
- A liveness scan every ``scanNotActiveBrokerInterval`` ms drops silent brokers and
  closes their connections (as Java's scanNotActiveBroker does); a closed
  connection drops the brokers registered over it at once.
"""

import asyncio
import collections
import itertools
import logging

from rmq.codec import FrameDecoder, encode_frame
from rmq.protocol import ResponseCode

log = logging.getLogger("rmq.server")

_conn_ids = itertools.count(1)


class Connection(asyncio.Protocol):
    """One client connection. Hashable: the route table keys brokers by it."""

    def __init__(self, server):
        self.server = server
        self.id = next(_conn_ids)
        self.transport = None
        self.peer = None
        self.decoder = FrameDecoder(server.max_frame_length)
        self.pending = collections.deque()   # decoded requests waiting for the output to drain
        self.writing_paused = False
        self.closing = False
        self.closed_at = None                # loop time of close(), for _close_idle
        self.last_active = 0.0

    def __repr__(self):
        return f"<conn {self.id} {self.peer}>"

    # ---------------------------------------------------------------- asyncio callbacks

    def connection_made(self, transport):
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.last_active = self.server.loop.time()
        if len(self.server.connections) >= self.server.max_connections:
            log.warning("connection limit %d reached: closing %s",
                        self.server.max_connections, self.peer)
            self.closing = True
            transport.abort()
            return
        limit = self.server.max_output
        transport.set_write_buffer_limits(high=limit, low=limit // 4)
        self.server.connections.add(self)

    def data_received(self, data):
        if self.closing:
            return
        self.last_active = self.server.loop.time()
        # Route queries with a cached answer are answered inside the core, within
        # the room left in the output buffer; the rest go through the handlers.
        # With output backed up there is no room: decode only, answer on drain.
        backed_up = self.pending or self.writing_paused
        room = 0 if backed_up else max(
            self.server.max_output - self.transport.get_write_buffer_size(), 0)
        answers, cmds, error = self.decoder.serve_routes(data, self.server.namesrv.routes, room)
        if answers:
            self.transport.write(answers)
        if backed_up:
            self.pending.extend(cmds)
        elif cmds:
            self._answer(cmds)
        if error is not None:
            log.warning("closing %s: %s", self.peer, error)
            self.close()               # sends what is queued, then closes

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

    def resume_writing(self):
        self.writing_paused = False
        # The peer read what was queued: activity, for the idle check (as Netty's
        # IdleStateHandler counts completed writes).
        self.last_active = self.server.loop.time()
        if self.pending:
            cmds = list(self.pending)
            self.pending.clear()
            self._answer(cmds)
        if not self.writing_paused and not self.closing:
            self.transport.resume_reading()

    def connection_lost(self, exc):
        self.closing = True
        self.pending.clear()
        self.server.connections.discard(self)
        self.server.namesrv.connection_closed(self)

    # ---------------------------------------------------------------- answering

    def _answer(self, cmds):
        handle = self.server.namesrv.handle
        out = []
        for i, cmd in enumerate(cmds):
            if cmd.is_response:          # a NameServer sends no requests: nothing to match
                continue
            resp = handle(cmd, self)
            if resp is not None:
                try:
                    out.append(encode_frame(resp))
                except Exception:
                    # e.g. a lone surrogate (a "\ud800" escape in a JSON header) echoed
                    # in a remark: answer anyway rather than let the exception escape
                    # data_received, which drops the connection and the answers of the
                    # other requests of this read.
                    log.exception("cannot encode the answer to request %d from %s",
                                  cmd.code, self.peer)
                    out.append(encode_frame(cmd.response(
                        ResponseCode.SYSTEM_ERROR, "the answer cannot be encoded")))
            if self.writing_paused:
                self.pending.extend(cmds[i + 1:])
                break
            if len(out) >= 64:           # let flow control see the output as it grows
                self.transport.writelines(out)
                out = []
        if out:
            self.transport.writelines(out)
            self.last_active = self.server.loop.time()


class NameServerApp:
    """Listens, owns the connections and the periodic tasks of a NameServer."""

    def __init__(self, namesrv):
        self.namesrv = namesrv
        self.config = config = namesrv.config
        # Limits and periods are fixed at start, as Java reads them once: a remote
        # UPDATE_NAMESRV_CONFIG shows the new value but cannot lift a limit.
        self.max_frame_length = config.maxFrameLength
        self.max_connections = config.maxConnections
        self.max_output = config.maxOutputBufferBytes
        self.idle_seconds = config.serverChannelMaxIdleTimeSeconds
        self.scan_interval = config.scanNotActiveBrokerInterval / 1000
        self.connections = set()
        self.loop = None
        self._server = None
        self._tasks = []

    @property
    def sockets(self):
        return self._server.sockets if self._server else ()

    async def start(self, host, port):
        self.loop = asyncio.get_running_loop()
        self._server = await self.loop.create_server(
            lambda: Connection(self), host, port, reuse_address=True,
            backlog=self.config.serverSocketBacklog)
        self._tasks = [self.loop.create_task(self._scan_brokers()),
                       self.loop.create_task(self._close_idle())]
        addrs = ", ".join("%s:%s" % s.getsockname()[:2] for s in self._server.sockets)
        log.info("NameServer listening on %s (%s loop)", addrs, type(self.loop).__module__)
        return self

    async def _scan_brokers(self):
        while True:
            await asyncio.sleep(self.scan_interval)
            try:
                dropped = self.namesrv.scan_not_active_brokers()
                # Java's scanNotActiveBroker closes the expired broker's channel too.
                for b in dropped:
                    conn = b.get("conn")
                    if isinstance(conn, Connection) and not conn.closing:
                        log.info("closing the connection %s of expired broker %s",
                                 conn.peer, b.get("brokerAddr"))
                        conn.close()
            except Exception:       # a scan must never stop the scanning
                log.exception("broker liveness scan failed")

    async def _close_idle(self):
        while True:
            idle = self.idle_seconds
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

    async def close(self):
        for t in self._tasks:
            t.cancel()
        if self._server is not None:
            self._server.close()
            for conn in list(self.connections):
                conn.close()
            # Give the connections a moment to send what is queued, then abort the rest:
            # a peer that does not read must not hold up the shutdown (from Python 3.12
            # on, wait_closed() waits for every connection to be closed).
            for _ in range(100):
                if not self.connections:
                    break
                await asyncio.sleep(0.01)
            for conn in list(self.connections):
                conn.transport.abort()
            await asyncio.sleep(0)      # let connection_lost run for the aborted ones
            await self._server.wait_closed()
        log.info("NameServer stopped")


def new_event_loop():
    """uvloop's loop when installed, else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()
