"""Broker liveness, idle connections and the connection limit, over real TCP on both
event loops, with shortened timeouts (heartbeatTimeoutMillis on REGISTER_BROKER,
scanNotActiveBrokerInterval, serverChannelMaxIdleTimeSeconds, maxConnections)."""

import time

import pytest

from nameserver import Client, call_in_loop, register_broker, running_namesrv, wait_for

# every test on the asyncio server and on the C engine (serverEngine=c)
pytestmark = pytest.mark.usefixtures("each_server")

TIMEOUT_MS = 300        # the broker's heartbeatTimeoutMillis
SCAN_MS = 100           # scanNotActiveBrokerInterval
SLACK = 0.6             # scheduling slack on a loaded machine (seconds)
IDENT = {"clusterName": "c1", "brokerAddr": "10.0.0.1:10911", "brokerName": "bk",
         "brokerId": "0"}


@pytest.fixture
def srv(tmp_path, loop):
    with running_namesrv(tmp_path, loop=loop, scanNotActiveBrokerInterval=SCAN_MS) as app:
        yield app


def register(client, timeout_ms=TIMEOUT_MS):
    r = register_broker(client, "bk", "10.0.0.1:10911", topics=["T1", "T2"],
                        ext={"heartbeatTimeoutMillis": str(timeout_ms)})
    assert r.code == 0, r


def wait_route_gone(watcher, limit, topic="T1"):
    """Poll GET_ROUTEINFO until 17; the monotonic time it happened (None: not in time)."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        r = watcher.request(105, {"topic": topic})
        if r.code == 17:
            return time.monotonic()
        assert r.code == 0, r
        time.sleep(0.01)
    return None


def test_silent_broker_expires(srv):
    with Client(srv.address) as broker, Client(srv.address) as watcher:
        start = time.monotonic()
        register(broker)
        gone = wait_route_gone(watcher, TIMEOUT_MS / 1000 + SCAN_MS / 1000 + SLACK)
        assert gone is not None, "the silent broker was not dropped in time"
        # not before its timeout (the registration was handled after `start`)
        assert gone - start >= TIMEOUT_MS / 1000 - 0.01
        assert watcher.request(106).body == b'{"brokerAddrTable":{},"clusterAddrTable":{}}'
        # as Java's scanNotActiveBroker, the expired broker's connection is closed
        assert broker.closed_by_peer(timeout=2)


@pytest.mark.parametrize("code", [322, 904])
def test_keepalive_keeps_broker(srv, code):
    timeout_ms = 400        # a heartbeat every 80 ms: a margin of 320 ms for a busy machine
    body = b'{"counter":1,"stateVersion":0,"timestamp":1700000000001}' if code == 322 else b""
    with Client(srv.address) as broker, Client(srv.address) as watcher:
        register(broker, timeout_ms)
        end = time.monotonic() + 2.5 * timeout_ms / 1000
        while time.monotonic() < end:
            r = broker.request(code, IDENT, body)
            assert r.code == 0, r
            assert watcher.request(105, {"topic": "T1"}).code == 0
            time.sleep(timeout_ms / 1000 / 5)
        # silent again: it goes
        start = time.monotonic()
        gone = wait_route_gone(watcher, timeout_ms / 1000 + SCAN_MS / 1000 + SLACK)
        assert gone is not None and gone - start >= timeout_ms / 1000 - 0.1


def test_closed_connection_drops_broker_at_once(srv):
    with Client(srv.address) as watcher:
        broker = Client(srv.address)
        register(broker, timeout_ms=120_000)
        register_broker(broker, "bk2", "10.0.0.2:10911", topics=["T3", "T4"])
        assert watcher.request(105, {"topic": "T1"}).code == 0
        start = time.monotonic()
        broker.close()
        gone = wait_route_gone(watcher, 1.0)
        assert gone is not None and gone - start < 1.0
        # every broker registered over that connection goes (one after the other: a
        # route query may come in between, as between two slices of a registration)
        gone = wait_route_gone(watcher, 1.0, "T3")
        assert gone is not None and gone - start < 1.0
        # the watcher's own connection is unaffected, and closing it drops nothing else
        register_broker(watcher, "bk3", "10.0.0.3:10911", topics=["T5", "T6"])
        with Client(srv.address) as other:
            other.request(106)
        assert watcher.request(105, {"topic": "T5"}).code == 0


def test_reregistration_over_new_connection_moves_ownership(srv):
    """A broker that reconnects: closing its old connection no longer drops it."""
    with Client(srv.address) as watcher:
        old = Client(srv.address)
        register(old, timeout_ms=120_000)
        with Client(srv.address) as new:
            register(new, timeout_ms=120_000)
            old.close()
            time.sleep(0.2)
            assert watcher.request(105, {"topic": "T1"}).code == 0
        assert wait_route_gone(watcher, 1.0) is not None


def test_idle_connection_closed(tmp_path, loop):
    with running_namesrv(tmp_path, loop=loop, serverChannelMaxIdleTimeSeconds=1) as app:
        with Client(app.address) as idle, Client(app.address) as busy:
            start = time.monotonic()
            idle.request(106)
            # the busy one talks every 0.2 s (the wait for the idle one's EOF) and stays open
            while not idle.closed_by_peer(timeout=0.2):
                assert busy.request(106).code == 0
                assert time.monotonic() - start < 1.0 + 0.25 + SLACK + 0.6
            closed = time.monotonic()
            # the check runs every idle/4 s: closed between 1 and 1.25 s (+ scheduling)
            assert 0.95 <= closed - start <= 1.0 + 0.25 + SLACK, closed - start
            assert busy.request(106).code == 0


def test_idle_broker_connection_closed(tmp_path, loop):
    """An idle broker connection is closed, which drops the broker (Java too)."""
    with running_namesrv(tmp_path, loop=loop, serverChannelMaxIdleTimeSeconds=1) as app:
        with Client(app.address) as broker:
            register(broker, timeout_ms=120_000)
            assert broker.closed_by_peer(timeout=3)
        with Client(app.address) as watcher:
            # dropped by the table thread, just after the close
            assert wait_for(lambda: watcher.request(105, {"topic": "T1"}).code == 17)


def test_connection_limit(tmp_path, loop):
    with running_namesrv(tmp_path, loop=loop, maxConnections=3) as app:
        clients = [Client(app.address) for _ in range(3)]
        try:
            for i, c in enumerate(clients):
                assert c.request(100, {"namespace": "n", "key": f"k{i}", "value": "v"}).code == 0
            extra = Client(app.address)
            start = time.monotonic()
            assert extra.closed_by_peer(timeout=2)
            assert time.monotonic() - start < 1.0
            extra.close()
            for c in clients:
                assert c.request(101, {"namespace": "n", "key": "k0"}).ext_fields == \
                    {"value": "v"}
            # a slot frees up when a connection closes
            clients.pop().close()
            deadline = time.monotonic() + 2
            while call_in_loop(app, lambda: len(app.connections)) > 2:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            with Client(app.address) as again:
                assert again.request(106).code == 0
        finally:
            for c in clients:
                c.close()


def test_only_connections_that_used_the_table_cost_a_close_there(tmp_path):
    """Clients that only ask routes open and close connections without queueing
    work for the table thread; a broker's connection closing drops its brokers."""
    with running_namesrv(tmp_path) as app, Client(app.address) as broker:
        calls = []
        closed = app.processor.connection_closed
        app.processor.connection_closed = lambda conn: calls.append(conn) or closed(conn)
        assert register_broker(broker, "b", "10.0.0.1:10911", topics=["T1", "T2"]).code == 0
        # (the pure-Python reference builds an answer in the table thread once; then
        # it is cached, as the compiled core's are answered in C)
        assert broker.request(105, {"topic": "T1"}).code == 0
        for _ in range(50):
            with Client(app.address) as c:
                assert c.request(105, {"topic": "T1"}).code == 0
        assert wait_for(lambda: len(app.connections) == 1, 5)
        broker.close()
        assert wait_for(lambda: len(calls) == 1, 5)
        time.sleep(0.2)
        assert len(calls) == 1 and app.counters.connection_dropped == 1
