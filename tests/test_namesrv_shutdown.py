"""Shutdown and socket settings over real TCP, on both event loops: GO_AWAY during a
graceful shutdown (enableShutdownGracefully, Java 5.x NettyRemotingServer.shutdown and
NettyRemotingAbstract.processRequestCommand), needWaitForService, the socket buffer
sizes and write water marks of accepted connections, and SIGTERM of the real process."""

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rmq
from nameserver import (Client, call_in_loop, register_broker, running_namesrv, server_socket,
                        wait_for)
from rmq.namesrv.config import SERIALIZE_TYPE_KEY


NEW = 476           # above V5_3_1 (475): told to go away
OLD = 475           # V5_3_1 itself and below: served to the end
SLACK = 0.6


def start_close(app):
    """Begin app.close() on its loop; the future of its completion."""
    return asyncio.run_coroutine_threadsafe(app.close(), app.loop)


def assert_go_away(resp, req_opaque):
    assert resp.code == 1500, resp
    assert resp.remark == "please go away"
    assert resp.opaque == req_opaque
    assert resp.is_response and not resp.is_oneway


# ---------------------------------------------------------------- GO_AWAY

@pytest.mark.parametrize("answer", ["JSON", "ROCKETMQ"])
def test_go_away_during_graceful_shutdown(tmp_path, loop, answer):
    with running_namesrv(tmp_path, loop=loop, enableShutdownGracefully=True,
                         shutdownWaitTimeSeconds=1, **{SERIALIZE_TYPE_KEY: answer}) as app:
        with Client(app.address) as broker, Client(app.address) as new, \
                Client(app.address) as old:
            assert register_broker(broker, "bk", "10.0.0.1:10911", topics=["T", "U"]).code == 0
            # before: everybody is served (and T's route is now in the cache)
            assert new.request(105, {"topic": "T"}, version=NEW).code == 0
            assert old.request(105, {"topic": "T"}, version=OLD).code == 0
            start = time.monotonic()
            done = start_close(app)
            assert wait_for(lambda: call_in_loop(app, lambda: app.going_away))
            # a client above V5_3_1 gets GO_AWAY for every request, cached route or not
            for code, ext in ((105, {"topic": "T"}), (106, None), (100, {
                    "namespace": "n", "key": "k", "value": "v"})):
                req = rmq.RemotingCommand.request(code, ext, version=NEW)
                assert_go_away(new.call(req), req.opaque)
            # requests in either serialize type, answered in the NameServer's
            for stype in ("JSON", "ROCKETMQ"):
                req = rmq.RemotingCommand.request(105, {"topic": "T"}, version=NEW,
                                                  serialize_type=stype)
                resp = new.call(req)
                assert_go_away(resp, req.opaque)
                assert resp.serialize_type == answer
            # a oneway request gets no answer (Java's writeResponse skips it)
            new.request(106, version=NEW, oneway=True)
            req = rmq.RemotingCommand.request(106, version=NEW)
            assert_go_away(new.call(req), req.opaque)
            # the check is per request, as in Java: an older request on the same
            # connection is served
            assert new.request(106, version=OLD).code == 0
            # clients at V5_3_1 and below are served normally, route cache included
            r = old.request(105, {"topic": "T"}, version=OLD)
            assert r.code == 0 and b'"brokerName":"bk"' in r.body
            # nothing was applied for the GO_AWAY'd PUT
            assert old.request(101, {"namespace": "n", "key": "k"}, version=401).code == 22
            # as Java (its boss group runs until the wait is over), new connections are
            # still accepted during the period
            with Client(app.address) as late:
                req = rmq.RemotingCommand.request(106, version=479)
                assert_go_away(late.call(req), req.opaque)
                assert late.request(106, version=317).code == 0
            # then every connection is closed
            assert old.closed_by_peer(timeout=1 + SLACK + 1)
            assert new.closed_by_peer(timeout=1)
            done.result(5)
            elapsed = time.monotonic() - start
            assert 0.95 <= elapsed <= 1 + SLACK + 1, elapsed
            assert app.go_away_count == 8


def test_no_go_away_by_default(tmp_path, loop):
    """enableShutdownGracefully is false by default (as in Java): no GO_AWAY, the
    connections are closed at once."""
    with running_namesrv(tmp_path, loop=loop) as app:
        with Client(app.address) as new:
            assert new.request(106, version=NEW).code == 0
            start = time.monotonic()
            done = start_close(app)
            with pytest.raises(ConnectionError):
                new.receive(timeout=2)           # EOF, and no frame before it
            done.result(5)
            assert time.monotonic() - start < 0.5 + SLACK
            assert app.go_away_count == 0


def test_answers_queued_before_shutdown_are_delivered(tmp_path, loop):
    """Requests answered before the close go out before the connection closes."""
    with running_namesrv(tmp_path, loop=loop) as app:
        with Client(app.address) as c:
            reqs = [rmq.RemotingCommand.request(319) for _ in range(50)]
            c.send_raw(b"".join(rmq.encode_frame(r) for r in reqs))
            assert c.receive().opaque == reqs[0].opaque   # the batch was read
            start_close(app).result(5)
            got = [c.receive().opaque for _ in reqs[1:]]
            assert got == [r.opaque for r in reqs[1:]]
            assert c.closed_by_peer(timeout=2)


# ---------------------------------------------------------------- needWaitForService

def test_need_wait_for_service(tmp_path, loop):
    wait = 2
    with running_namesrv(tmp_path, loop=loop, needWaitForService=True,
                         waitSecondsForService=wait) as app:
        started = time.monotonic()
        with Client(app.address) as broker, Client(app.address) as client:
            # registrations and everything but route queries work at once
            assert register_broker(broker, "bk", "10.0.0.1:10911", topics=["T", "U"]).code == 0
            assert client.request(106).code == 0
            for version in (317, 401, NEW):
                r = client.request(105, {"topic": "T"}, version=version)
                assert (r.code, r.remark) == (1, "name server not ready"), r
            assert time.monotonic() - started < wait      # (still in the window)
            # every one held back by the gate in Python: none written by the core
            assert app.network_counts()["served"] == 0
            # after waitSecondsForService: answered, again and again (Java's first
            # version stayed "not ready" for good once a route was found: #9182)
            assert wait_for(lambda: client.request(105, {"topic": "T"}).code == 0,
                            wait + SLACK)
            assert time.monotonic() - started >= wait - 0.05
            # and by the core again once the gate is gone (with the engine: in C,
            # Python's request count standing still)
            assert wait_for(lambda: app.processor is app._processor, SLACK)
            served, in_python = app.network_counts()["served"], app.counters.requests[105]
            for _ in range(3):
                assert client.request(105, {"topic": "T"}).code == 0
            assert app.network_counts()["served"] == served + 3
            if loop == "engine":
                assert in_python >= 4 and app.counters.requests[105] == in_python
            assert client.request(105, {"topic": "nope"}).code == 17


def test_wait_for_service_off_by_default(tmp_path, loop):
    with running_namesrv(tmp_path, loop=loop) as app:
        with Client(app.address) as c:
            assert register_broker(c, "bk", "10.0.0.1:10911", topics=["T", "U"]).code == 0
            assert c.request(105, {"topic": "T"}).code == 0
            assert app.processor is app._processor


# ---------------------------------------------------------------- socket settings

def server_side(app, what):
    """what(conn) for the one connection of app, on its loop."""
    def get():
        (conn,) = app.connections
        return what(conn)
    return call_in_loop(app, get)


def sockopt(app, opt):
    """Socket option ``opt`` of the server's side of its one connection."""
    (conn,) = call_in_loop(app, lambda: list(app.connections))
    with server_socket(app, conn) as s:
        return s.getsockopt(socket.SOL_SOCKET, opt)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux doubles the value")
def test_socket_buffer_sizes(tmp_path, loop):
    with running_namesrv(tmp_path, loop=loop, serverSocketSndBufSize=32768,
                         serverSocketRcvBufSize=49152) as app:
        with Client(app.address) as c:
            assert c.request(106).code == 0
            # Linux doubles what setsockopt asks for (room for its bookkeeping)
            assert sockopt(app, socket.SO_SNDBUF) == 2 * 32768
            assert sockopt(app, socket.SO_RCVBUF) == 2 * 49152
            listener = app.sockets[0]
            assert listener.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == 2 * 49152


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux doubles the value")
def test_socket_buffer_sizes_default(tmp_path, loop):
    """0 (the default) leaves the OS's sizes: not locked, autotuned by the kernel."""
    with running_namesrv(tmp_path, loop=loop) as app:
        with Client(app.address) as c:
            assert c.request(106).code == 0
            probe = socket.socket()
            try:
                default = probe.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            finally:
                probe.close()
            assert sockopt(app, socket.SO_SNDBUF) >= default


def listen_backlog(port):
    """The accept-queue bound of the socket listening on 127.0.0.1:``port``, as the
    kernel holds it (``ss``'s Send-Q of a listening socket)."""
    out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True,
                         timeout=30, check=True).stdout.split()
    # State Recv-Q Send-Q Local-Address:Port Peer-Address:Port
    assert out[0] == "LISTEN" and out[3] == f"127.0.0.1:{port}", out
    return int(out[2])


@pytest.mark.requires("ss")
@pytest.mark.parametrize("backlog", [None, 7])
def test_server_socket_backlog(tmp_path, loop, backlog):
    """serverSocketBacklog bounds the listening socket's queue of connections not yet
    accepted (Java's SO_BACKLOG, 1024 by default)."""
    with open("/proc/sys/net/core/somaxconn") as f:
        somaxconn = int(f.read())       # (the kernel's cap on any backlog)
    more = {} if backlog is None else {"serverSocketBacklog": backlog}
    with running_namesrv(tmp_path, loop=loop, **more) as app:
        want = app.config.serverSocketBacklog
        assert want == (1024 if backlog is None else backlog)
        assert listen_backlog(app.sockets[0].getsockname()[1]) == min(want, somaxconn)


@pytest.mark.parametrize("high, low, expected", [
    (65536, 16384, (16384, 65536)),                 # Java's water marks
    (65536, 0, (2 ** 20 // 4, 2 ** 20)),            # only with both (addCustomConfig)
    (16384, 65536, (2 ** 20 // 4, 2 ** 20)),        # low above high: ignored
    (2 ** 30, 2 ** 29, (2 ** 20, 2 ** 20)),         # capped by maxOutputBufferBytes
])
def test_write_water_marks(tmp_path, loop, high, low, expected):
    with running_namesrv(tmp_path, loop=loop, maxOutputBufferBytes=2 ** 20,
                         writeBufferHighWaterMark=high, writeBufferLowWaterMark=low) as app:
        with Client(app.address) as c:
            assert c.request(106).code == 0
            if loop == "engine":        # the bounds the I/O threads keep
                limits = (app.engine.config["resume_output"], app.engine.config["max_output"])
            else:
                limits = server_side(app, lambda conn: conn.transport.get_write_buffer_limits())
            assert limits == expected


# ---------------------------------------------------------------- the real process

_PKG_PARENT = str(Path(rmq.__file__).resolve().parent.parent)


class Proc:
    def __init__(self, tmp_path, props):
        conf = tmp_path / "namesrv.properties"
        conf.write_text(props + f"kvConfigPath={tmp_path / 'kvConfig.json'}\n")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PKG_PARENT, env.get("PYTHONPATH"))
                                            if p)
        self.log_path = tmp_path / "namesrv.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rmq", "namesrv", "-c", str(conf), "--listen",
             "127.0.0.1:0"], stdout=self.log, stderr=subprocess.STDOUT, env=env)
        assert wait_for(lambda: "listening on" in self.text(), 20), self.text()
        self.address = re.search(r"listening on (127\.0\.0\.1:\d+)", self.text()).group(1)

    def text(self):
        return self.log_path.read_text("utf-8", "replace")

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.log.close()


@pytest.fixture
def proc(tmp_path):
    started = []
    yield lambda props: started.append(Proc(tmp_path, props)) or started[-1]
    for p in started:
        p.close()


pytestmark_posix = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


@pytestmark_posix
@pytest.mark.parametrize("engine", ["asyncio", "c"])
def test_sigterm_graceful(proc, engine):
    p = proc(f"enableShutdownGracefully=true\nshutdownWaitTimeSeconds=1\nserverEngine={engine}\n")
    on_engine = engine == "c" and rmq.IMPLEMENTATION == "compiled"
    assert ("C engine, " in p.text()) == on_engine, p.text()
    with Client(p.address) as new, Client(p.address) as old:
        assert new.request(106, version=NEW).code == 0
        start = time.monotonic()
        p.proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: "shutting down gracefully" in p.text())
        req = rmq.RemotingCommand.request(105, {"topic": "T"}, version=NEW)
        assert_go_away(new.call(req), req.opaque)
        assert old.request(105, {"topic": "T"}, version=OLD).code == 17
        assert p.proc.wait(10) == 0
        assert 0.95 <= time.monotonic() - start < 1 + 3
        assert old.closed_by_peer(timeout=1) and new.closed_by_peer(timeout=1)
    log = p.text()
    assert "Traceback" not in log, log
    expected = ["SIGTERM received, shutting down", "shutting down gracefully",
                "GO_AWAY to 127.0.0.1:", "GO_AWAY period over: 1 GO_AWAY answers sent",
                "stopped accepting connections", "closing 2 connections",
                "NameServer stopped"]
    positions = [log.find(line) for line in expected]
    assert all(i >= 0 for i in positions) and positions == sorted(positions), log


@pytestmark_posix
def test_second_signal_ends_the_go_away_period(proc):
    p = proc("enableShutdownGracefully=true\nshutdownWaitTimeSeconds=60\n")
    with Client(p.address) as c:
        assert c.request(106).code == 0
        p.proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: "shutting down gracefully" in p.text())
        start = time.monotonic()
        p.proc.send_signal(signal.SIGINT)
        assert p.proc.wait(10) == 0
        assert time.monotonic() - start < 3
    assert "SIGINT received again" in p.text()


@pytestmark_posix
def test_startup_log_names_settings(proc):
    p = proc("serverSocketSndBufSize=65536\nneedWaitForService=true\n"
             "waitSecondsForService=5\nserverWorkerThreads=32\n")
    p.proc.send_signal(signal.SIGTERM)
    assert p.proc.wait(10) == 0
    log = p.text()
    assert "server set SO_SNDBUF to 65536" in log, log
    assert "route queries answered \"name server not ready\" for 5 s" in log, log
    assert "accepted without effect (one event loop, no thread pools): " \
           "serverWorkerThreads=32" in log, log
