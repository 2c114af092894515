"""End-to-end harness: a real NameServer on 127.0.0.1 (in a thread, on asyncio or
uvloop) and a small blocking client speaking the real protocol over TCP."""

import asyncio
import contextlib
import json
import re
import socket
import threading
import time

import pytest

import parts
import rmq
from rmq.namesrv.config import NamesrvConfig
from rmq.namesrv.kvconfig import KVConfig
from rmq.namesrv import DefaultRequestProcessor
from rmq.namesrv.server import make_app

#: The network layers a NameServer under test runs on: the asyncio server and, on the
#: compiled core, its I/O engine (serverEngine=c; the pure-Python reference keeps
#: asyncio). Modules that run on both use the ``each_server`` fixture (conftest.py).
SERVERS = ["asyncio"] + (["engine"] if rmq.IMPLEMENTATION == "compiled" else [])
#: What running_namesrv starts when not told (set by ``each_server``)
DEFAULT_SERVER = {"server": "asyncio"}


@contextlib.contextmanager
def running_namesrv(tmp_path, loop=None, clock=None, trace=None, **config):
    """Start a NameServer on an ephemeral port; yields the NameServerApp
    (``.address`` is "127.0.0.1:PORT", ``.processor`` the request processor).
    ``loop``: "asyncio", "uvloop", or "engine" (the compiled core's I/O engine,
    serverEngine=c, beside an asyncio loop); default DEFAULT_SERVER's."""
    loop = loop or DEFAULT_SERVER["server"]
    config.setdefault("kvConfigPath", str(tmp_path / "kvConfig.json"))
    if loop == "engine":
        config.setdefault("serverEngine", "c")
        config.setdefault("serverIoThreads", 2)
    else:
        config.setdefault("serverEngine", "asyncio")
    cfg = NamesrvConfig(**config)
    kwargs = {"clock": clock} if clock else {}
    kv = KVConfig(cfg.kvConfigPath, **cfg.kv_limits())
    app = make_app(DefaultRequestProcessor(cfg, kv, **kwargs), trace=trace)
    if loop == "engine":
        from rmq.namesrv import dataplane
        if not isinstance(app, dataplane.EngineServerApp):
            # A run meant for the engine does not pass on asyncio in its stead (the
            # asyncio run is the other one): where the engine cannot serve it (TLS
            # without the libssl of Python's ssl, say), it fails in CI and skips elsewhere.
            why = dataplane.unavailable(app.processor, trace)
            message = f"the engine does not serve this NameServer: {why or 'not started'}"
            kv.close()
            if why is None or parts.in_ci():
                pytest.fail(message, pytrace=False)
            pytest.skip(message)
    if loop == "uvloop":
        import uvloop
        ev = uvloop.new_event_loop()
    else:
        ev = asyncio.new_event_loop()
    started = threading.Event()
    failed = []

    def run():
        asyncio.set_event_loop(ev)
        try:
            ev.run_until_complete(app.start("127.0.0.1", 0))
        except BaseException as e:      # closed here, its table thread with it: no leak
            failed.append(e)
            ev.run_until_complete(app.close())
            return
        finally:
            started.set()
        ev.run_forever()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert started.wait(10), "NameServer did not start"
    if failed:
        t.join(10)
        ev.close()
        kv.close()
        raise failed[0]
    port = app.sockets[0].getsockname()[1]
    app.address = f"127.0.0.1:{port}"
    app.port = port
    try:
        yield app
    finally:
        # (generous: a broker of 100,000 topics dropped at the close, on a loaded machine)
        asyncio.run_coroutine_threadsafe(app.close(), ev).result(30)
        ev.call_soon_threadsafe(ev.stop)
        t.join(10)
        ev.close()
        kv.close()


def call_in_loop(app, func, *args):
    """Run func(*args) on the server's loop thread (the tables are not thread-safe)."""
    async def run():
        return func(*args)
    return asyncio.run_coroutine_threadsafe(run(), app.loop).result(10)


def connection_state(app, conn):
    """``conn`` (one of ``app.connections``) as its network layer holds it, on either
    server: ``queued_output`` (bytes not yet written), ``decoded`` (requests decoded,
    waiting their turn), ``buffered`` (bytes read, not yet a frame), ``paused`` (not
    read because its output backed up); None when it closed meanwhile (engine)."""
    engine = getattr(app, "engine", None)
    if engine is not None:
        st = engine.connection_state(conn.id)
        if st is None:
            return None             # closed meanwhile
        return {"queued_output": st["queued_output"], "decoded": 0,
                "buffered": st["buffered_input"], "paused": st["paused"]}
    return call_in_loop(app, lambda: {
        "queued_output": conn.transport.get_write_buffer_size(), "decoded": len(conn.pending),
        "buffered": conn.decoder.buffered, "paused": conn.writing_paused})


def server_socket(app, conn):
    """A duplicate of the server's socket of ``conn`` (the caller closes it): the
    asyncio transport's, or, on the engine, found among this process's descriptors by
    its two addresses."""
    engine = getattr(app, "engine", None)
    if engine is None:
        return call_in_loop(app, lambda: conn.transport.get_extra_info("socket")).dup()
    import os
    host, port = conn.peer.rsplit(":", 1)
    for name in os.listdir("/proc/self/fd"):
        try:
            s = socket.socket(fileno=os.dup(int(name)))
        except OSError:
            continue
        try:
            if (s.family == socket.AF_INET and s.type == socket.SOCK_STREAM
                    and s.getsockname()[1] == app.port and s.getpeername() == (host, int(port))):
                return s
        except OSError:
            pass
        s.close()
    raise LookupError(f"no socket of {conn}")


#: The event loops the end-to-end tests run on (uvloop when installed), and the engine.
LOOPS = ["asyncio", "uvloop"] + SERVERS[1:]


class Client:
    """A blocking remoting client for tests: one socket, answers matched by opaque."""

    def __init__(self, address, timeout=10):
        host, port = address.rsplit(":", 1)
        self.timeout = timeout
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = rmq.FrameDecoder()
        self.ready = []
        self.raw = bytearray()       # bytes received, not yet a whole frame (receive_frame)
        self.last_sent = None        # the last command sent

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, cmd):
        self.last_sent = cmd
        self.sock.sendall(rmq.encode_frame(cmd))

    def send_raw(self, data):
        self.sock.sendall(data)

    def receive(self, timeout=None):
        """The next command from the server (raises on EOF, socket.timeout after
        ``timeout`` seconds when given)."""
        if timeout is not None:
            self.sock.settimeout(timeout)
        try:
            while not self.ready:
                data = self.sock.recv(1 << 16)
                if not data:
                    raise ConnectionError("connection closed by the NameServer")
                self.ready.extend(self.decoder.feed(data))
        finally:
            if timeout is not None:
                self.sock.settimeout(self.timeout)
        return self.ready.pop(0)

    def receive_frame(self, timeout=None):
        """The next frame from the server as bytes, cut by its length prefix alone
        (rmq's decoder plays no part; do not mix with ``receive``). Raises on EOF,
        socket.timeout after ``timeout`` seconds when given."""
        if timeout is not None:
            self.sock.settimeout(timeout)
        raw = self.raw
        try:
            while len(raw) < 4 or len(raw) < 4 + int.from_bytes(raw[:4], "big"):
                data = self.sock.recv(1 << 16)
                if not data:
                    raise ConnectionError("connection closed by the NameServer")
                raw += data
        finally:
            if timeout is not None:
                self.sock.settimeout(self.timeout)
        end = 4 + int.from_bytes(raw[:4], "big")
        frame = bytes(raw[:end])
        del raw[:end]
        return frame

    def poll(self, timeout):
        """The next command if one arrives within ``timeout`` seconds, else None."""
        try:
            return self.receive(timeout)
        except socket.timeout:
            return None

    def call(self, cmd):
        self.send(cmd)
        resp = self.receive()
        assert resp.opaque == cmd.opaque, (resp, cmd)
        return resp

    def request(self, code, ext=None, body=b"", **kwargs):
        """Send a request and return its answer; a oneway request (``oneway=True``)
        is only sent (the server never answers it): returns None."""
        cmd = rmq.RemotingCommand.request(code, ext, body, **kwargs)
        if cmd.is_oneway:
            self.send(cmd)
            return None
        return self.call(cmd)

    def closed_by_peer(self, timeout=5):
        """True when the server closed this connection (EOF or reset)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(1 << 16)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


# ---------------------------------------------------------------- helpers for the e2e tests

_LEGACY_KEY = re.compile(rb'("(?:[^"\\]|\\.)*")|([{,]\s*)(-?[0-9]+)(\s*:)')


def parse_json_body(data, pairs=False):
    """``(object, legacy)`` of a JSON body as Java writes it: ``legacy`` is True when
    the body holds unquoted integer keys (Java's legacy form, ``{0:"addr"}``).
    ``pairs``: objects as lists of (key, value) pairs, so that comparing two compares
    their key order too. Independent of rmq's own JSON reader."""
    legacy = False

    def quote(m):
        nonlocal legacy
        if m.group(1):
            return m.group(1)
        legacy = True
        return m.group(2) + b'"' + m.group(3) + b'"' + m.group(4)

    quoted = _LEGACY_KEY.sub(quote, bytes(data))
    return json.loads(quoted, object_pairs_hook=list if pairs else None), legacy


def register_broker(client, broker_name, broker_addr, *, cluster="c1", broker_id=0,
                    topics=(), counter=1, ha_addr=None, compressed=False, ext=None, **kwargs):
    """REGISTER_BROKER with a RegisterBrokerBody built from ``topics`` (TopicConfig
    dicts, or names for 4/4 perm 6 topics); the answer."""
    from rmq.bodies import encode_register_broker_body, register_broker_body, topic_config
    from rmq.crc32 import body_crc32
    tcs = [topic_config(t, 4, 4) if isinstance(t, str) else t for t in topics]
    body = encode_register_broker_body(
        register_broker_body(tcs, {"counter": counter, "stateVersion": 0,
                                   "timestamp": 1700000000000 + counter}),
        compressed=compressed)
    fields = {"clusterName": cluster, "brokerAddr": broker_addr, "brokerName": broker_name,
              "brokerId": str(broker_id),
              "haServerAddr": ha_addr or broker_addr.rsplit(":", 1)[0] + ":10912",
              "compressed": "true" if compressed else "false",
              "bodyCrc32": str(body_crc32(body))}
    fields.update(ext or {})
    return client.request(103, {k: v for k, v in fields.items() if v is not None}, body,
                          **kwargs)


def wait_for(predicate, timeout=2.0):
    """Poll ``predicate`` until it is true (True) or ``timeout`` seconds pass (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def recorded_traffic(tmp_path, session):
    """Run ``session(address)`` against a NameServer recording every frame under
    ``tmp_path/trace``; returns (the recorder, closed once every connection is
    gone, and what the session returned)."""
    from rmq.trace.segments import TraceRecorder
    recorder = TraceRecorder(tmp_path / "trace")
    with running_namesrv(tmp_path, trace=recorder) as app:
        result = session(app.address)
        wait_for(lambda: not app.connections, 5)
    recorder.close()
    return recorder, result


# ---------------------------------------------------------------- peers that misbehave

class RawServer:
    """A listening socket whose connections are handled by ``handler(conn, index)``
    in a thread each: the peer behaves exactly as the test says."""

    def __init__(self, handler):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.handler = handler
        self.accepted = 0
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            i, self.accepted = self.accepted, self.accepted + 1
            threading.Thread(target=self._handle, args=(conn, i), daemon=True).start()

    def _handle(self, conn, i):
        try:
            self.handler(conn, i)
        except OSError:             # the test is over and closed the connection
            pass

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_request(conn):
    """One frame from the socket, decoded (None at EOF)."""
    dec = rmq.FrameDecoder()
    while True:
        data = conn.recv(65536)
        if not data:
            return None
        cmds = dec.feed(data)
        if cmds:
            return cmds[0]
