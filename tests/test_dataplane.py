"""The NameServer on the compiled core's I/O engine (serverEngine=c,
rmq.namesrv.dataplane): what differs from the asyncio server. The behaviours both
servers share run on both in the end-to-end, hardening, shutdown, metrics, ACL,
zone-mode and vector-replay modules (``each_server`` / ``loop`` fixtures)."""

import logging
import os
import socket
import threading
import time

import pytest

import rmq
from rmq import bodies
from nameserver import (Client, call_in_loop, parse_json_body, register_broker, running_namesrv,
                        wait_for)
from test_metrics import CountingSocketClient
from rmq.namesrv import DefaultRequestProcessor
from rmq.namesrv.config import ConfigError, NamesrvConfig
from rmq.namesrv.kvconfig import KVConfig
from rmq.namesrv.server import NameServerApp, make_app

COMPILED = rmq.IMPLEMENTATION == "compiled"


def _app(tmp_path, trace=None, **config):
    cfg = NamesrvConfig(kvConfigPath=str(tmp_path / "kv.json"), **config)
    kv = KVConfig(cfg.kvConfigPath)
    try:
        app = make_app(DefaultRequestProcessor(cfg, kv), trace=trace)
        app.table_thread.shutdown()
        return app
    finally:
        kv.close()


@pytest.mark.parametrize("value, engine", [("asyncio", False), ("c", True), ("C", True),
                                           (" ", True), (None, True)])
def test_server_engine_picks_the_network_layer(tmp_path, value, engine):
    from rmq.namesrv import dataplane
    app = _app(tmp_path, **({} if value is None else {"serverEngine": value}))
    # the pure-Python reference keeps asyncio whatever is asked (make_app logs why)
    assert isinstance(app, dataplane.EngineServerApp) == (engine and COMPILED)
    assert isinstance(app, NameServerApp)


def test_a_bad_server_engine_stops_the_start(tmp_path):
    with pytest.raises(ConfigError, match="serverEngine='uring'"):
        _app(tmp_path, serverEngine="uring")


pytestmark_engine = pytest.mark.skipif(not COMPILED, reason="the engine is the compiled core's")


@pytestmark_engine
@pytest.mark.once
def test_the_default_io_threads_are_one_per_cpu_the_process_may_run_on(tmp_path):
    """serverIoThreads=0 (the default): one route thread per CPU of the process's
    affinity (what taskset or a container's cpuset leaves it), not the machine's count."""
    from rmq.namesrv.server import usable_cpus
    everywhere = os.sched_getaffinity(0)
    assert usable_cpus() == len(everywhere)
    os.sched_setaffinity(0, {min(everywhere)})    # this thread's: the server starts from it
    try:
        assert usable_cpus() == 1
        with running_namesrv(tmp_path, loop="engine", serverIoThreads=0) as app, \
                Client(app.address) as c:
            assert (app.engine.config["threads"], app.engine.config["control_thread"]) == (1, True)
            assert c.request(105, {"topic": "T1"}).code == 17
    finally:
        os.sched_setaffinity(0, everywhere)
    with running_namesrv(tmp_path, loop="engine", serverIoThreads=0) as app:
        assert app.engine.config["threads"] == len(everywhere)
    with running_namesrv(tmp_path, loop="engine", serverIoThreads=3) as app:
        assert app.engine.config["threads"] == 3


@pytestmark_engine
@pytest.mark.once
def test_the_trace_of_two_io_threads_in_time_order(tmp_path):
    """Route queries (answered in C) and KV requests (in Python) on 6 connections over
    two I/O threads: every frame in and out is recorded, merged in time order."""
    from rmq.trace.segments import IN, OUT, TraceRecorder, read_records, segment_files
    recorder = TraceRecorder(tmp_path / "trace")
    sent = []
    with running_namesrv(tmp_path, loop="engine", trace=recorder, serverIoThreads=2) as app:
        with Client(app.address) as b:
            assert register_broker(b, "b", "10.0.0.1:10911", topics=["T1", "T2"]).code == 0
            sent.append(b.last_sent)
        clients = [Client(app.address) for _ in range(5)]
        for i in range(40):
            for c in clients:
                cmd = rmq.RemotingCommand.request(105, {"topic": "T1" if i % 2 else "nope"})
                sent.append(cmd)
                c.call(cmd)
                cmd = rmq.RemotingCommand.request(101, {"namespace": "n", "key": "k"})
                sent.append(cmd)
                c.call(cmd)
        for c in clients:
            c.close()
        assert wait_for(lambda: not app.connections, 5)
    recorder.close()
    records = [r for path in segment_files([tmp_path / "trace"]) for r in read_records(path)]
    ins = [r[4] for r in records if r[3] == IN]
    outs = [rmq.decode_frame(r[4]) for r in records if r[3] == OUT]
    assert sorted(ins) == sorted(rmq.encode_frame(c) for c in sent)
    assert sorted(a.opaque for a in outs) == sorted(c.opaque for c in sent)
    times = [r[0] for r in records]
    assert times == sorted(times)
    assert all(r[2].startswith("127.0.0.1:") for r in records)
    assert recorder.dropped == 0 and app.trace_dropped() == 0


@pytestmark_engine
@pytest.mark.once
def test_route_queries_never_reach_python(tmp_path):
    with running_namesrv(tmp_path, loop="engine") as app, Client(app.address) as c:
        assert register_broker(c, "b", "10.0.0.1:10911", topics=["T1", "T2"]).code == 0
        for _ in range(50):
            assert c.request(105, {"topic": "T1"}).code == 0
            assert c.request(105, {"topic": "nope"}).code == 17
        assert app.counters.requests[105] == 0          # none decoded in Python
        counts = app.engine.counts()
        assert (counts["served"], counts["not_found"]) == (50, 50)
        assert app.network_counts()["served"] == 50


@pytestmark_engine
@pytest.mark.once
def test_a_pipeline_of_mixed_requests_is_answered_in_order(tmp_path):
    """KV puts and gets (Python, in batches), route queries (C) and a registration
    (the table thread), pipelined in one write: every answer, in order."""
    with running_namesrv(tmp_path, loop="engine") as app, Client(app.address) as c:
        assert register_broker(c, "b", "10.0.0.1:10911", topics=["T1", "T2"]).code == 0
        reqs = []
        for i in range(200):
            reqs.append(rmq.RemotingCommand.request(100, {"namespace": "n", "key": f"k{i}",
                                                          "value": str(i)}))
            reqs.append(rmq.RemotingCommand.request(101, {"namespace": "n", "key": f"k{i}"}))
            reqs.append(rmq.RemotingCommand.request(105, {"topic": "T1" if i % 2 else "x"}))
        c.send_raw(b"".join(rmq.encode_frame(r) for r in reqs))
        got = [c.receive() for _ in reqs]
        assert [g.opaque for g in got] == [r.opaque for r in reqs]
        for i in range(200):
            put, get, route = got[3 * i:3 * i + 3]
            assert put.code == 0 and get.code == 0
            assert get.ext_fields["value"] == str(i)
            assert route.code == (0 if i % 2 else 17)
        # the KV requests went to Python in batches, the route queries stayed in C
        assert app.counters.requests[100] == 200 and app.counters.requests[105] == 0


@pytestmark_engine
@pytest.mark.once
def test_registrations_of_10000_topics_through_the_engine(tmp_path):
    with running_namesrv(tmp_path, loop="engine") as app, Client(app.address) as c, \
            Client(app.address) as asker:
        topics = [f"Topic-{i:05d}" for i in range(10_000)]
        for counter in range(1, 4):
            assert register_broker(c, "b", "10.0.0.1:10911", topics=topics,
                                   counter=counter).code == 0
        for t in ("Topic-00000", "Topic-09999"):
            r = asker.request(105, {"topic": t})
            assert r.code == 0 and b"10.0.0.1:10911" in r.body


@pytestmark_engine
@pytest.mark.once
def test_the_table_thread_sends_a_registrations_answer_itself(tmp_path):
    """A registration's answer goes from the table thread to the engine, not back
    through the loop first: it comes while the loop is held (from inside the
    handler, once it runs in the table thread). Sent through the loop, it would
    come only once the loop is let go (checked: it then waits the whole 5 s)."""
    with running_namesrv(tmp_path, loop="engine") as app, Client(app.address) as c:
        assert register_broker(c, "b", "10.0.0.1:10911", topics=["T1", "T2"]).code == 0
        handle, held, go = app.processor.handle, threading.Event(), threading.Event()

        def hold_the_loop():
            held.set()
            go.wait(5)

        def handle_holding_the_loop(cmd, conn=None):
            if cmd.code == 103:
                app.loop.call_soon_threadsafe(hold_the_loop)
                assert held.wait(5)
            return handle(cmd, conn)

        app.processor.handle = handle_holding_the_loop
        try:
            got = register_broker(c, "b", "10.0.0.1:10911", topics=["T1", "T2", "T3"], counter=2)
            assert got.code == 0 and not go.is_set()
            # the answers the loop sends itself (from processor.quick) wait for it
            c.send(rmq.RemotingCommand.request(101, {"namespace": "n", "key": "k"}))
            with pytest.raises(socket.timeout):
                c.receive(timeout=0.3)
            go.set()
            assert c.receive().code == 22                   # QUERY_NOT_FOUND, after
        finally:
            go.set()
            app.processor.handle = handle


@pytestmark_engine
@pytest.mark.once
def test_brokers_are_dropped_when_their_connection_closes(tmp_path):
    with running_namesrv(tmp_path, loop="engine") as app, Client(app.address) as asker:
        broker = Client(app.address)
        assert register_broker(broker, "b", "10.0.0.1:10911", topics=["T1", "T2"]).code == 0
        assert asker.request(105, {"topic": "T1"}).code == 0
        broker.close()
        assert wait_for(lambda: asker.request(105, {"topic": "T1"}).code == 17, 5)
        # (counted in the table thread just after the table dropped it)
        assert wait_for(lambda: app.counters.connection_dropped == 1, 5)


@pytestmark_engine
@pytest.mark.once
def test_many_clients_on_two_io_threads(tmp_path):
    """Route queries from 16 connections on two I/O threads while a broker
    re-registers: every answer a route."""
    with running_namesrv(tmp_path, loop="engine", serverIoThreads=2) as app, \
            Client(app.address) as broker:
        assert register_broker(broker, "b", "10.0.0.1:10911", topics=["T1", "T2"]).code == 0
        errors = []

        def ask():
            try:
                with Client(app.address) as c:
                    for i in range(300):
                        assert c.request(105, {"topic": "T1" if i % 2 else "T2"}).code == 0
            except Exception as e:       # reported below
                errors.append(e)

        threads = [threading.Thread(target=ask) for _ in range(16)]
        for t in threads:
            t.start()
        for counter in range(2, 12):
            assert register_broker(broker, "b", "10.0.0.1:10911", topics=["T1", "T2"],
                                   counter=counter).code == 0
        for t in threads:
            t.join(60)
        assert errors == []
        assert app.engine.counts()["served"] == 16 * 300
        assert app.engine.config["threads"] == 2


@pytestmark_engine
@pytest.mark.once
def test_a_scrape_sums_what_every_io_thread_counted(tmp_path):
    """Connections that come one at a time spread evenly over two I/O threads (a
    connection id's low byte names its thread), each asking its own number of route
    queries: the scrape's counters are the sums over the threads, exactly
    (rmq_route_queries_total, the bytes)."""
    from rmq.namesrv.metrics import MetricsServer
    with running_namesrv(tmp_path, loop="engine", serverIoThreads=2) as app, \
            Client(app.address) as broker:
        assert register_broker(broker, "b", "10.0.0.1:10911", topics=["T1", "T2"]).code == 0
        registry = MetricsServer(app).registry

        def sample(name, **labels):
            return call_in_loop(app, registry.get_sample_value, name, labels)

        def counters():
            return (sample("rmq_route_queries_total", result="found"),
                    sample("rmq_route_queries_total", result="not_found"),
                    sample("rmq_received_bytes_total"), sample("rmq_sent_bytes_total"))

        def settled():
            """The counters once two reads a moment apart agree: a thread counts the
            bytes of a write after write() returns, which may be after its reader has
            them."""
            last = counters()
            for _ in range(100):
                time.sleep(0.05)
                now = counters()
                if now == last:
                    break
                last = now
            return last

        before = settled()
        clients = []
        try:
            # (an idle thread is the one epoll wakes to accept: without the engine's
            # balance, every one of these would land on the same thread)
            for _ in range(6):
                clients.append(CountingSocketClient(app.address))
                assert clients[-1].request(105, {"topic": "nope"}).code == 17
            assert wait_for(lambda: len(app.connections) == len(clients) + 1, 5)
            on_thread = [sum(1 for conn in list(app.connections) if conn.id & 0xFF == t)
                         for t in (0, 1)]
            assert sorted(on_thread) == [3, 4], on_thread       # (and the broker's)
            found = not_found = 0
            for k, c in enumerate(clients):
                for i in range(3 * k + 1):
                    if c.request(105, {"topic": "T1" if i % 3 else "no"}).code == 0:
                        found += 1
                    else:
                        not_found += 1
            assert found and not_found
            assert app.counters.requests[105] == 0          # all of them in C
            found_n, not_found_n, received_n, sent_n = (
                a - b for a, b in zip(settled(), before))
            assert found_n == found
            assert not_found_n == not_found + len(clients)      # (and the first "nope"s)
            # every byte each client sent and received, on whichever thread
            assert received_n == sum(c.sent for c in clients)
            assert sent_n == sum(c.received for c in clients)
        finally:
            for c in clients:
                c.close()


@pytestmark_engine
@pytest.mark.once
@pytest.mark.parametrize("built", [True, False], ids=["answer-built", "in-the-table-thread"])
def test_a_batch_of_big_answers_is_answered_a_turn_at_a_time(tmp_path, built):
    """A client pipelines 64 GET_ALL_TOPIC_LIST (206, ~100 KB answers each) and does
    not read: Python hands the engine TURN_BYTES of answers, then waits for the
    connection's output to drain before encoding the rest; read at last, every
    answer comes, in order. Both when the answer is built already (answered on the
    loop) and when the batch goes to the table thread (the first 206 builds it)."""
    import socket
    from rmq.namesrv import dataplane
    from nameserver import connection_state
    with running_namesrv(tmp_path, loop="engine", maxOutputBufferBytes=1 << 20,
                         serverSocketSndBufSize=16384) as app, Client(app.address) as b:
        topics = [f"A-Long-Topic-Name-{i:06d}" for i in range(4000)]
        assert register_broker(b, "b", "10.0.0.1:10911", topics=topics).code == 0
        answer_len = len(bodies.encode_topic_list(topics)) + 256     # (its header)
        if built:
            answer_len = len(rmq.encode_frame(b.request(206)))
            assert answer_len > 90_000
        reqs = [rmq.RemotingCommand.request(206) for _ in range(64)]
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", app.port))
        try:
            s.sendall(b"".join(rmq.encode_frame(r) for r in reqs))
            conn = None

            def waiting():
                nonlocal conn
                conn = next((c for c in list(app.connections) if c.waiting is not None), None)
                return conn is not None
            assert wait_for(waiting, 5)
            state = connection_state(app, conn)
            low = app.engine.config["resume_output"]
            assert state["queued_output"] <= low + dataplane.TURN_BYTES + 2 * answer_len, state
            go_on, (rest, *_) = conn.waiting
            assert len(rest) < 64                       # the rest of the batch waits
            assert go_on == (app._answer if built else app._send_answers)
            s.settimeout(10)
            decoder = rmq.FrameDecoder()
            got = []
            while len(got) < len(reqs):
                data = s.recv(1 << 20)
                assert data
                got += decoder.feed(data)
            assert [g.opaque for g in got] == [r.opaque for r in reqs]
            assert all(g.code == 0 for g in got)
            assert all(g.body == got[0].body for g in got)
            assert sorted(bodies.decode_topic_list(got[0].body)[0]) == topics
        finally:
            s.close()


@pytestmark_engine
@pytest.mark.once
def test_frames_after_one_that_does_not_decode_are_never_answered(tmp_path):
    """A KV request, a frame whose header does not decode and a route query, in one
    write: the first is answered, then the connection closes; the route query after
    the bad frame is not answered (found by tests/fuzz.py's engine target)."""
    import struct
    bad = b'{"code":106,"extFields":5,"flag":0,"opaque":1}'
    with running_namesrv(tmp_path, loop="engine") as app, Client(app.address) as c:
        assert register_broker(c, "b", "10.0.0.1:10911", topics=["T1", "T2"]).code == 0
        first = rmq.RemotingCommand.request(101, {"namespace": "n", "key": "k"})
        after = rmq.RemotingCommand.request(105, {"topic": "T1"})
        c.send_raw(rmq.encode_frame(first) + struct.pack(">ii", 4 + len(bad), len(bad)) + bad
                   + rmq.encode_frame(after))
        assert c.receive().opaque == first.opaque
        with pytest.raises(ConnectionError):
            c.receive(timeout=5)
        assert app.counters.refused["bad_frame"] == 1


@pytestmark_engine
@pytest.mark.once
def test_trace_records_bigger_than_the_ring_are_counted_by_the_server(tmp_path, monkeypatch):
    """Records that do not fit the I/O thread's trace ring (here: the smallest ring,
    and frames bigger than it) are counted in the server's trace_dropped (the
    rmq_trace_frames_dropped metric), the answers sent all the same. Exactly those:
    the rest (~1 KB) fits even when the drainer took nothing yet."""
    from rmq.namesrv import dataplane
    from rmq.trace.segments import IN, OUT, TraceRecorder, read_records, segment_files
    monkeypatch.setattr(dataplane, "TRACE_RING_BYTES", 4096)
    big = "C" * 5000            # (the cluster's name is in the registration and the route)
    recorder = TraceRecorder(tmp_path / "trace")
    sent = []
    with running_namesrv(tmp_path, loop="engine", trace=recorder, serverIoThreads=1) as app:
        with Client(app.address) as b, Client(app.address) as c:
            # its frame (> 4096 bytes): dropped; the answer (Python's) recorded
            assert register_broker(b, "b", "10.0.0.1:10911", cluster=big,
                                   topics=["T1", "T2"]).code == 0
            for _ in range(5):  # the queries recorded, their answers (> 4096) dropped
                r = c.request(105, {"topic": "T1"})
                assert r.code == 0 and big.encode() in r.body
                sent.append(c.last_sent)
            assert app.engine.counts()["trace_dropped"] == 1 + 5
            assert app.trace_dropped() == 1 + 5
        assert wait_for(lambda: not app.connections, 5)
    recorder.close()
    assert recorder.dropped == 0
    records = [r for path in segment_files([tmp_path / "trace"]) for r in read_records(path)]
    ins = [r[4] for r in records if r[3] == IN]
    outs = [rmq.decode_frame(r[4]) for r in records if r[3] == OUT]
    assert ins == [rmq.encode_frame(cmd) for cmd in sent]
    assert [(a.code, a.body or b"") for a in outs] == [(0, b"")]    # the registration's


def accepted_socket(client):
    """The server's end of ``client``'s connection (the server runs in this process):
    a duplicate of it, found among this process's descriptors by its two addresses
    (the caller closes it). On either server, whatever object holds the socket."""
    want = (client.getpeername(), client.getsockname())
    for name in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            s = socket.socket(fileno=os.dup(int(name)))
        except OSError:             # (closed meanwhile)
            continue
        try:
            if (s.getsockname(), s.getpeername()) == want:
                return s
        except OSError:             # (a listening or unconnected socket)
            pass
        s.close()
    raise LookupError(f"no socket of this process is the server's end of {want}")


# ---------------------------------------------------------------- on both servers
# (here beside the engine's own: these hold for every network layer, each checked
# where it is set, in engine.c or by the event loop's transport)

@pytest.mark.once
def test_accepted_sockets_do_not_delay_small_answers(tmp_path, loop):
    """TCP_NODELAY on the server's end of every connection: a route answer is not
    held back by Nagle's algorithm waiting for the client's ACK."""
    with running_namesrv(tmp_path, loop=loop) as app, Client(app.address) as c:
        assert c.request(105, {"topic": "nope"}).code == 17       # (accepted by now)
        with accepted_socket(c.sock) as s:
            assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


@pytest.mark.once
@pytest.mark.usefixtures("each_server")
def test_connections_over_the_limit_are_counted_as_refused(tmp_path):
    """maxConnections 2: three more connections are closed at once and counted,
    each, in rmq_refused_total{reason="connection_limit"}; the two are served on."""
    from rmq.namesrv.metrics import MetricsServer
    with running_namesrv(tmp_path, maxConnections=2) as app:
        registry = MetricsServer(app).registry

        def refused():
            return call_in_loop(app, registry.get_sample_value, "rmq_refused_total",
                                {"reason": "connection_limit"})

        assert refused() == 0
        with Client(app.address) as a, Client(app.address) as b:
            for c in (a, b):
                assert c.request(105, {"topic": "nope"}).code == 17
            for _ in range(3):
                with Client(app.address) as extra:
                    assert extra.closed_by_peer(timeout=5)
            # (the engine counts it just after the close)
            assert wait_for(lambda: refused() == 3, 5), refused()
            for c in (a, b):
                assert c.request(105, {"topic": "nope"}).code == 17
            assert refused() == 3


# ---------------------------------------------------------------- route queries in C

@pytestmark_engine
@pytest.mark.once
def test_route_answers_past_a_tiny_cache_budget_are_built_in_c(tmp_path):
    """routeCacheBytes far below the answers' size: the answers the cache does not
    hold are built per query by the I/O threads, never by Python, and equal those
    of a server with the default budget (that holds them all), in both forms."""
    budget = 4096
    topics = [f"T{k}" for k in range(120)]
    # (each topic its own number of queues: 120 different answers, none shared)
    configs = [bodies.topic_config(t, k + 1, k + 1) for k, t in enumerate(topics)]
    (tmp_path / "tiny").mkdir()
    (tmp_path / "ref").mkdir()
    with running_namesrv(tmp_path / "tiny", loop="engine", routeCacheBytes=budget) as tiny, \
            running_namesrv(tmp_path / "ref", loop="engine") as ref, \
            Client(tiny.address) as t, Client(ref.address) as r:
        for c in (t, r):
            assert register_broker(c, "b", "10.0.0.1:10911", topics=configs).code == 0
        asked = 0
        for _ in range(2):                  # the second pass: evicted answers again
            for topic in topics:
                for version in (0, 413):    # legacy and standard form
                    got = t.request(105, {"topic": topic}, version=version)
                    want = r.request(105, {"topic": topic}, version=version)
                    assert (got.code, got.body) == (want.code, want.body) and want.code == 0
                    asked += 1
        assert tiny.counters.requests[105] == 0             # none went to Python
        assert tiny.engine.counts()["served"] == asked
        st = tiny.processor.routes.cache_stats()
        assert st["budget"] == budget and st["bytes"] <= budget
        assert st["evictions"] + st["refused"] > 0
        assert ref.processor.routes.cache_stats()["evictions"] == 0


@pytestmark_engine
@pytest.mark.once
@pytest.mark.parametrize("answer_type", ["JSON", "ROCKETMQ"])
@pytest.mark.parametrize("serialize_type", ["JSON", "ROCKETMQ"])
def test_zone_mode_route_queries_are_answered_in_c(tmp_path, serialize_type, answer_type):
    """Zone mode (__ZONE_MODE, __ZONE_NAME) route queries, in either serialize type,
    answered by the I/O threads in the server's serialize type: the zone's brokers and
    those without a master, in the legacy form; none reach Python."""
    with running_namesrv(tmp_path, loop="engine",
                         **{"rocketmq.serialize.type": answer_type}) as app, \
            Client(app.address) as broker, Client(app.address) as c:
        for name, addr, zone, broker_id in (("a1", "10.0.0.1:10911", "zone-a", 0),
                                            ("b1", "10.0.0.2:10911", "zone-b", 0),
                                            ("s1", "10.0.0.3:10911", "zone-b", 1)):
            # (with enableActingMaster, s1 is a 5.x broker: its topics count as a
            # prime slave's, s1 in the route without a master)
            assert register_broker(broker, name, addr, broker_id=broker_id,
                                   topics=["ZT", "SELF_TEST_TOPIC"],
                                   ext={"__ZONE_NAME": zone,
                                        "enableActingMaster": "false"}).code == 0
        asked = 0
        for version in (0, 413):
            for zone, kept in (("ZONE-A", ["a1", "s1"]), ("zone-b", ["b1", "s1"]),
                               ("zone-x", ["s1"])):
                for _ in range(2):          # built, then answered from the cache
                    r = c.request(105, {"topic": "ZT", "__ZONE_MODE": "true",
                                        "__ZONE_NAME": zone},
                                  serialize_type=serialize_type, version=version)
                    assert (r.code, r.serialize_type) == (0, answer_type), r
                    route, legacy = parse_json_body(r.body)
                    assert legacy
                    assert sorted(bd["brokerName"] for bd in route["brokerDatas"]) == kept
                    asked += 1
        r = c.request(105, {"topic": "Nope", "__ZONE_MODE": "true", "__ZONE_NAME": "zone-a"},
                      serialize_type=serialize_type)
        assert (r.code, r.serialize_type) == (17, answer_type)
        assert app.counters.requests[105] == 0              # none went to Python
        counts = app.engine.counts()
        assert (counts["served"], counts["not_found"]) == (asked, 1)
