"""Hardening (issue 12): inputs that must not corrupt the tables, requests that must
not stall other clients, memory that must stay bounded. Each test names its point;
the table-level and decoder-level ones run on both implementations (``RT``,
``impl``, ``bodies``), the server-level ones on the selected one (``make test`` runs
the suite once per implementation).
"""

import socket
import threading
import time
import zlib

import msgpack
import pytest

import rmq
from nameserver import (Client, call_in_loop, connection_state, register_broker, running_namesrv,
                        wait_for)
from rmq.namesrv.config import NamesrvConfig
from rmq.errors import BodyError, HeaderError, RmqError
from rmq.namesrv.kvconfig import KVConfig
from rmq.namesrv import DefaultRequestProcessor
from rmq.protocol import MAX_JSON_DEPTH
from support import frame, load_compiled, load_fallback, route_table

# every test on the asyncio server and on the C engine (serverEngine=c)
pytestmark = pytest.mark.usefixtures("each_server")

A0 = "10.0.0.1:10911"


def _register(rt, body):
    return rt.register_broker("c1", A0, "bk", 0, "10.0.0.1:10912", body=body, conn="conn",
                              now_ms=1000)


def _compressed_body(topics, mappings, bodies):
    body = bodies.register_broker_body([bodies.topic_config(t, 4, 4) for t in topics],
                                       {"counter": 1, "timestamp": 1})
    body["topicConfigSerializeWrapper"]["topicQueueMappingInfoMap"] = mappings
    return bodies.encode_register_broker_body(body, compressed=True)


def _empty(rt):
    return rt.cluster_info() == ({}, {}) and rt.all_topics() == [] and not rt.live_brokers()


# ---------------------------------------------------------------- 1. phantom broker

@pytest.mark.parametrize("topic", [None, "missing", 5, True, ["T1"]], ids=repr)
def test_1_mapping_without_a_string_topic_refuses_the_whole_registration(RT, topic, bodies):
    info = {"bname": "bk", "epoch": 0, "totalQueues": 4}
    if topic != "missing":
        info["topic"] = topic
    rt = RT()
    with pytest.raises(BodyError, match="topic"):
        _register(rt, _compressed_body(["T1", "T2"], {"T1": info}, bodies))
    assert _empty(rt)
    assert rt.topic_route("T1") is None and rt.route_body("T1") is None
    assert rt.connection_closed("conn") == []


def test_1_mapping_keys_of_a_decoded_body_must_be_strings(RT, bodies):
    body = bodies.register_broker_body([bodies.topic_config("T1")], {"counter": 1})
    body["topicConfigSerializeWrapper"]["topicQueueMappingInfoMap"] = {None: {"bname": "bk"}}
    rt = RT()
    with pytest.raises(BodyError):
        _register(rt, body)
    assert _empty(rt)


def test_1_refused_registration_over_the_wire_leaves_nothing(tmp_path, bodies):
    info = {"bname": "bk", "epoch": 0, "totalQueues": 4}        # no "topic"
    data = _compressed_body(["P1"], {"P1": info}, bodies)
    with running_namesrv(tmp_path) as app, Client(app.address) as c:
        r = c.request(103, {"clusterName": "c1", "brokerAddr": A0, "brokerName": "bk",
                            "brokerId": "0", "haServerAddr": A0, "compressed": "true"}, data)
        assert r.code == 1 and "topic" in r.remark
        assert c.request(105, {"topic": "P1"}).code == 17
        assert b"bk" not in c.request(106).body


# ---------------------------------------------------------------- 2. list answers cached

def _big_broker(c, n=3000):
    assert register_broker(c, "bk", A0, topics=[f"T{i:05d}" for i in range(n)]).code == 0


@pytest.mark.parametrize("code,ext", [(206, None), (224, {"cluster": "c1"}), (304, None),
                                      (311, None), (312, None), (313, None), (106, None)])
def test_2_list_answers_are_built_once_per_change(tmp_path, code, ext):
    with running_namesrv(tmp_path) as app, Client(app.address) as c:
        _big_broker(c)
        ns = app.processor
        built = ns.answers_built
        cmds = [rmq.RemotingCommand.request(code, ext) for _ in range(200)]
        c.send_raw(b"".join(rmq.encode_frame(x) for x in cmds))
        got = [c.receive() for _ in cmds]
        assert [r.opaque for r in got] == [x.opaque for x in cmds]
        assert {r.code for r in got} == {0} and len({r.body for r in got}) == 1
        assert ns.answers_built == built + 1
        # a change invalidates exactly: the next answer is built again, and new
        with Client(app.address) as b2:         # open: its broker stays registered
            assert register_broker(b2, "bk2", "10.0.0.2:10911", cluster="c1",
                                   topics=["New-1", "New-2"]).code == 0
            built = ns.answers_built
            again = c.request(code, ext)
            assert ns.answers_built == built + 1
            if code in (206, 224):
                assert b"New-1" in again.body and b"New-1" not in got[0].body
            elif code in (106, 304):
                assert b"bk2" in again.body and b"bk2" not in got[0].body


def test_2_kv_list_answer_is_cached_until_a_kv_change(tmp_path):
    with running_namesrv(tmp_path) as app, Client(app.address) as c:
        assert c.request(100, {"namespace": "ns", "key": "k", "value": "v1"}).code == 0
        first = c.request(219, {"namespace": "ns"})
        built = app.processor.answers_built
        for _ in range(20):
            assert c.request(219, {"namespace": "ns"}).body == first.body
        assert app.processor.answers_built == built
        assert c.request(100, {"namespace": "ns", "key": "k", "value": "v2"}).code == 0
        assert b"v2" in c.request(219, {"namespace": "ns"}).body


def test_2_answer_cache_is_bounded(tmp_path):
    from rmq.namesrv.handlers import MAX_CACHED_ANSWERS
    with running_namesrv(tmp_path) as app, Client(app.address) as c:
        for i in range(MAX_CACHED_ANSWERS + 50):
            assert c.request(224, {"cluster": f"made-up-{i}"}).code == 0
        assert len(app.processor._answers) <= MAX_CACHED_ANSWERS


# ---------------------------------------------------------------- 4/5. the table thread

def _block_table_thread(app):
    """Occupy the table thread (holding the compiled table's write lock) until released."""
    release, held = threading.Event(), threading.Event()
    lock = getattr(app.processor.routes, "_lock", None)      # the reference has none

    def hold():
        if lock is not None:
            lock.acquire_write()
        held.set()
        try:
            release.wait(30)
        finally:
            if lock is not None:
                lock.release_write()

    app.writer.submit(hold)
    assert held.wait(5)
    return release


def test_4_a_waiting_connection_is_not_read(tmp_path):
    with running_namesrv(tmp_path) as app, Client(app.address) as c:
        release = _block_table_thread(app)
        try:
            c.send(rmq.RemotingCommand.request(100, {"namespace": "n", "key": "k", "value": "v"}))
            conn = None

            def busy():
                nonlocal conn
                conn = next((x for x in app.connections if x.busy), None)
                return conn is not None
            assert wait_for(busy)
            # 50,000 more requests: the kernel buffers take what they can, rmq none
            flood = rmq.encode_frame(rmq.RemotingCommand.request(101, {"namespace": "n",
                                                                        "key": "k"}))
            c.sock.setblocking(False)
            sent = 0
            for _ in range(50_000):
                try:
                    sent += c.sock.send(flood)
                except BlockingIOError:
                    break
            c.sock.setblocking(True)
            time.sleep(0.3)
            assert sent > 0
            state = connection_state(app, conn)
            assert (state["decoded"], state["buffered"]) == (0, 0)
        finally:
            release.set()


def test_4_work_of_a_closed_connection_is_dropped(tmp_path):
    with running_namesrv(tmp_path) as app, Client(app.address) as watcher:
        changes = app.processor.changes
        release = _block_table_thread(app)
        try:
            gone = Client(app.address)
            gone.send(rmq.RemotingCommand.request(103, {
                "clusterName": "c1", "brokerAddr": A0, "brokerName": "gone", "brokerId": "0",
                "haServerAddr": A0}, b""))
            assert wait_for(lambda: any(x.busy for x in app.connections))
            gone.close()            # unread while it waits: the table thread sees the FIN
            time.sleep(0.1)
        finally:
            release.set()
        app.writer.submit(lambda: None).result(5)       # the queue drained
        assert app.processor.changes == changes            # never applied
        assert wait_for(lambda: len(app.connections) == 1)
        assert b"gone" not in watcher.request(106).body


def test_5_loop_never_waits_for_the_table_lock(tmp_path):
    """With the table thread holding the write lock: heartbeats, QUERY_DATA_VERSION
    and registrations wait in it; the loop goes on answering route queries and
    cached lists on every other connection, and a closed connection's drop waits too."""
    with running_namesrv(tmp_path) as app, Client(app.address) as broker, \
            Client(app.address) as client:
        assert register_broker(broker, "bk", A0, topics=["T1", "T2"]).code == 0
        assert client.request(206).code == 0                     # cached
        assert client.request(105, {"topic": "T1"}).code == 0    # cached (the reference)
        release = _block_table_thread(app)
        try:
            hb = rmq.RemotingCommand.request(904, {"clusterName": "c1", "brokerAddr": A0,
                                                   "brokerName": "bk", "brokerId": "0"})
            broker.send(hb)
            other = Client(app.address)
            other.send(rmq.RemotingCommand.request(322, {"clusterName": "c1",
                                                         "brokerAddr": A0,
                                                         "brokerName": "bk",
                                                         "brokerId": "0"}))
            other.close()
            for _ in range(50):
                assert client.request(105, {"topic": "T1"}).code == 0
                assert client.request(206).code == 0
            assert broker.poll(0.05) is None     # the heartbeat waits for the table thread
        finally:
            release.set()
        assert broker.receive(timeout=5).opaque == hb.opaque


# ---------------------------------------------------------------- 6. trace counters

def test_6_trace_counters_do_not_drift(tmp_path):
    from rmq.trace.segments import TraceRecorder
    rec = TraceRecorder(tmp_path, queue_frames=64, queue_bytes=1 << 20)
    data = rmq.encode_frame(rmq.RemotingCommand.request(105, {"topic": "T"}))
    n = 200_000
    for i in range(n):
        rec.record(1, "peer", 0, data, time_ns=i)
    rec.close()
    assert rec.queued_bytes == 0
    # what the segments hold, read with msgpack alone: the counters must say the same
    written = []
    for path in rec.files:
        unpacker = msgpack.Unpacker(raw=False)
        with open(path, "rb") as f:
            unpacker.feed(f.read())
        assert next(unpacker)["rmq-trace"] == 1
        written += list(unpacker)
    # the queue holds 64 frames: the first 64 always fit, whatever the writer does
    assert len(written) >= 64
    assert [r[0] for r in written] == sorted(set(r[0] for r in written))    # in order, once
    assert written[0][0] == 0
    assert all(r[1:] == [1, "peer", 0, data] for r in written)
    assert rec.recorded == len(written)
    assert rec.dropped == n - len(written)


# ---------------------------------------------------------------- 7. only rmq errors

def test_7_route_data_of_the_wrong_shape_is_a_body_error(bodies):
    for bad in (b'{"brokerDatas":327}', b'{"queueDatas":{}}', b'{"filterServerTable":[]}',
                b'{"brokerDatas":[5]}'):
        with pytest.raises(BodyError):
            bodies.decode_topic_route_data(bad)


def test_7_cluster_info_of_the_wrong_shape_is_a_body_error(bodies):
    for bad in (b'{"clusterAddrTable":{"c":5}}', b'{"clusterAddrTable":{"c":"b"}}',
                b'{"brokerAddrTable":{"b":5}}'):
        with pytest.raises(BodyError):
            bodies.decode_cluster_info(bad)
    assert bodies.decode_cluster_info(b'{"clusterAddrTable":{"c":null}}')[1] == {"c": []}


def test_7_list_mapping_topic_is_a_body_error(impl, bodies):
    data = _compressed_body(["T1"], {"T1": {"topic": ["T1"], "bname": "bk"}}, bodies)
    with pytest.raises(BodyError):
        impl.decode_register_broker_body(data)


def _nested_objects(depth):
    return b'{"a":' * depth + b"1" + b"}" * depth


@pytest.mark.parametrize("field", [b"extFields", b"flag", b"remark", b"unknown"])
@pytest.mark.parametrize("depth", [400, 600, 5000])
def test_7_deep_header_value_is_a_header_error(impl, field, depth):
    value = _nested_objects(depth)
    if field == b"extFields":
        value = b'{"topic":' + value + b"}"
    header = b'{"code":105,"' + field + b'":' + value + b"}"
    if field == b"unknown" and depth <= MAX_JSON_DEPTH:
        assert impl.decode_frame(frame(header)).code == 105     # skipped, as Java
        return
    with pytest.raises(HeaderError):
        impl.decode_frame(frame(header))


def test_7_deep_ext_value_after_a_valid_request_on_the_wire(tmp_path):
    good = rmq.RemotingCommand.request(106)
    bad = frame(b'{"code":105,"extFields":{"topic":' + _nested_objects(600) + b"}}")
    with running_namesrv(tmp_path) as app, Client(app.address) as c:
        c.send_raw(rmq.encode_frame(good) + bad)
        assert c.receive().opaque == good.opaque         # answered, then closed
        assert c.closed_by_peer()


# ---------------------------------------------------------------- 8. the two agree

def test_8_int_header_field_null_keeps_the_value_so_far(impl):
    cmd = impl.decode_frame(frame(b'{"code":105,"code":null,"opaque":7,"opaque":null}'))
    assert (cmd.code, cmd.opaque) == (105, 7)


@pytest.mark.parametrize("depth,ok", [(MAX_JSON_DEPTH, True), (MAX_JSON_DEPTH + 1, False),
                                      (900, False)])
def test_8_nesting_limit_is_the_same(impl, depth, ok):
    body = b"[" * depth + b"]" * depth
    header = b'{"code":105,"unknown":' + body + b"}"
    if ok:
        assert impl.json_loads(body) is not None
        assert impl.decode_frame(frame(header)).code == 105
    else:
        with pytest.raises(BodyError):
            impl.json_loads(body)
        with pytest.raises(HeaderError):
            impl.decode_frame(frame(header))


@pytest.mark.parametrize("value", ["1" + "0" * 300, str(2 ** 40), "-3000000000", "true",
                                   '"x"'])
def test_8_register_topic_queue_numbers_out_of_int32(RT, value):
    ns = DefaultRequestProcessor(NamesrvConfig(), KVConfig(), routes=RT())
    body = rmq.bodies.encode_register_broker_body(rmq.bodies.register_broker_body(
        [rmq.bodies.topic_config("T0"), rmq.bodies.topic_config("T1")], {"counter": 1}))
    reg = rmq.RemotingCommand.request(103, {"clusterName": "c1", "brokerAddr": A0,
                                            "brokerName": "bk", "brokerId": "0",
                                            "haServerAddr": A0}, body)
    assert ns.handle(reg).code == 0
    route = ('{"brokerDatas":[],"queueDatas":[{"brokerName":"bk","perm":6,'
             f'"readQueueNums":{value},"writeQueueNums":4,"topicSysFlag":0}}]}}').encode()
    r = ns.handle(rmq.RemotingCommand.request(217, {"topic": "NEW"}, route))
    assert r.code == 1 and "int32" in r.remark
    assert ns.routes.topic_route("NEW") is None
    assert ns.handle(rmq.RemotingCommand.request(105, {"topic": "NEW"})).code == 17


# ---------------------------------------------------------------- 9. memory bounds

def test_9_inflate_is_bounded_by_a_ratio_of_the_compressed_size(impl):
    bomb = zlib.compress(b"\x00" * (64 << 20), 9)        # ~65 KB -> 64 MiB
    limit = max(impl.MIN_INFLATE_LIMIT, impl.MAX_INFLATE_RATIO * len(bomb))
    assert limit < impl.DEFAULT_MAX_INFLATED
    with pytest.raises(BodyError, match=str(limit)):
        impl.decode_register_broker_body(bomb)


def test_9_real_compressed_tables_stay_within_the_ratio(impl):
    body = impl.encode_register_broker_body(rmq.bodies.register_broker_body(
        [rmq.bodies.topic_config(f"TopicTest-{i:07d}") for i in range(100_000)],
        {"counter": 1}), compressed=True)
    assert len(zlib.decompress(body)) > impl.MIN_INFLATE_LIMIT
    decoded = impl.decode_register_broker_body(body)
    assert len(decoded["topicConfigSerializeWrapper"]["topicConfigTable"]) == 100_000


def test_9_total_output_is_bounded(tmp_path):
    budget = 4 << 20
    with running_namesrv(tmp_path, maxOutputBufferBytes=1 << 20,
                         maxTotalOutputBufferBytes=budget) as app, \
            Client(app.address) as broker, Client(app.address) as reader:
        _big_broker(broker, 5000)                         # 206 answers of ~90 KB
        flood = b"".join(rmq.encode_frame(rmq.RemotingCommand.request(206))
                         for _ in range(400))
        stalled = []
        for _ in range(8):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", app.port))
            s.sendall(flood)
            stalled.append(s)
        try:
            def settled():
                conns = call_in_loop(app, lambda: list(app.connections))
                sizes = [(connection_state(app, c) or {"queued_output": 0})["queued_output"]
                         for c in conns]
                return len(sizes) < 10 and sum(sizes) <= budget + (1 << 20)
            assert wait_for(settled, 10)
            assert reader.request(206).code == 0
            assert reader.request(105, {"topic": "T00001"}).code == 0
        finally:
            for s in stalled:
                s.close()


def test_9_only_rmq_errors_from_the_bomb_path(impl):
    for data in (zlib.compress(b"\xff" * 10_000), zlib.compress(b"")[:-1], b"\x78\x9c"):
        with pytest.raises(RmqError):
            impl.decode_register_broker_body(data)


# ---------------------------------------------------------------- 3. KV limits and logs

def test_3_kv_limits_are_answered_and_change_nothing(tmp_path, caplog):
    with running_namesrv(tmp_path, maxKvValueBytes=1000, maxKvKeyBytes=10,
                         maxKvTableBytes=5000) as app, Client(app.address) as c:
        r = c.request(100, {"namespace": "ns", "key": "k", "value": "v" * 1001})
        assert r.code == 1 and "maxKvValueBytes 1000" in r.remark and "1001" in r.remark
        r = c.request(100, {"namespace": "ns", "key": "k" * 11, "value": "v"})
        assert r.code == 1 and "maxKvKeyBytes 10" in r.remark
        for i in range(4):
            assert c.request(100, {"namespace": "ns", "key": f"k{i}",
                                   "value": "v" * 1000}).code == 0
        r = c.request(100, {"namespace": "ns", "key": "k9", "value": "v" * 1000})
        assert r.code == 1 and "maxKvTableBytes 5000" in r.remark
        assert c.request(101, {"namespace": "ns", "key": "k9"}).code == 22
        assert c.request(101, {"namespace": "ns", "key": "k" * 11}).code == 22
        with caplog.at_level("INFO", logger="rmq.namesrv"):
            assert c.request(100, {"namespace": "ns", "key": "k0",
                                   "value": "Q" * 900}).code == 0
        assert "Q" * 100 not in caplog.text       # sizes are logged, never values
        assert "900" in caplog.text


def test_3_kv_changes_past_the_rewrite_threshold_are_journaled_not_rewritten(tmp_path):
    import os
    with running_namesrv(tmp_path, maxKvRewriteTableBytes=10) as app, \
            Client(app.address) as c:
        assert c.request(100, {"namespace": "ns", "key": "k", "value": "v"}).code == 0
        assert os.listdir(tmp_path) == ["kvConfig.json"]          # 4 bytes: rewritten
        assert c.request(100, {"namespace": "ns", "key": "k2", "value": "v" * 20}).code == 0
        assert (tmp_path / "kvConfig.json").read_text() == '{"configTable":{"ns":{"k":"v"}}}'
        assert any(n.startswith("kvConfig.json.journal") for n in os.listdir(tmp_path))
    # closed: compacted into the file Java reads
    assert (tmp_path / "kvConfig.json").read_text() == \
        '{"configTable":{"ns":{"k":"v","k2":"%s"}}}' % ("v" * 20)
    assert os.listdir(tmp_path) == ["kvConfig.json"]


def test_5_a_large_registration_applied_in_slices_answers_as_the_reference(bodies):
    """The compiled table applies a registration in slices of the write lock; the
    result is the reference's, route for route."""
    tables = [route_table(load_fallback())(), route_table(load_compiled())()]
    names = [f"S{i:05d}" for i in range(10_000)]
    for counter, perm in ((1, 6), (2, 4)):
        tcs = [bodies.topic_config(t, 4 + (i % 3) * (counter - 1), 4, perm if i % 2 else 6)
               for i, t in enumerate(names)]
        body = bodies.encode_register_broker_body(bodies.register_broker_body(
            tcs, {"counter": counter, "timestamp": counter}))
        for rt in tables:
            _register(rt, body)
    ref, core = tables
    assert core.all_topics() == ref.all_topics()
    for t in names[::97] + names[-3:]:
        assert core.route_body(t) == ref.route_body(t)


def test_8_answers_keep_the_order_when_a_route_is_not_served_in_the_core(RT, impl):
    """A route query answered neither from the cache nor in the core (the pure-Python
    server's loop serves cached answers only: build=False; a route with filter
    servers is built by the rules, not in C) is handed back with every later one,
    missing topics included, so answers leave in the requests' order, however the
    stream is chunked (fuzz)."""
    rt = RT()
    _register(rt, {"topicConfigSerializeWrapper": {"topicConfigTable": {
        "T1": {"topicName": "T1"}, "T2": {"topicName": "T2"}}},
        "filterServerList": ["127.0.0.1:1"]})
    rt.route_body("T1")
    queries = [impl.RemotingCommand.request(105, {"topic": t}) for t in ("T2", "T1", "NOPE")]
    data = b"".join(impl.encode_frame(q) for q in queries)
    # the compiled storage serves with the compiled decoder's buffered state
    decoder = (load_compiled() if rt.concurrent else impl).FrameDecoder()
    answers, others, error = rt.serve_routes(decoder, data, build=False)
    assert answers == b"" and [c.opaque for c in others] == [q.opaque for q in queries]
    assert error is None


def test_8_register_topic_with_a_broker_name_not_a_string(RT):
    ns = DefaultRequestProcessor(NamesrvConfig(), KVConfig(), routes=RT())
    route = b'{"queueDatas":[{"brokerName":["bk"],"perm":6,"readQueueNums":4}]}'
    r = ns.handle(rmq.RemotingCommand.request(217, {"topic": "NEW"}, route))
    assert r.code == 1 and "brokerName" in r.remark
    assert ns.routes.topic_route("NEW") is None


def test_8_filter_servers_of_an_address_reach_every_broker_listing_it(RT, bodies):
    """Two broker names registered from one address (found by the fuzzer): the
    second one's filter servers show in the first one's cached routes too."""
    rt = RT()
    first = bodies.register_broker_body([bodies.topic_config("T1"), bodies.topic_config("T2")],
                                        {"counter": 1})
    _register(rt, first)
    cached = rt.route_body("T1")
    second = bodies.register_broker_body([], {"counter": 1}, ["127.0.0.1:1"])
    rt.register_broker("c1", A0, "other", 0, "10.0.0.1:10912", body=second, conn="conn",
                       now_ms=1000)
    assert rt.route_body("T1") != cached
    assert rt.topic_route("T1")["filterServerTable"] == {A0: ["127.0.0.1:1"]}
    assert b"127.0.0.1:1" in rt.route_body("T1")


def test_8_delete_with_registration_deletes_by_key_and_creates_by_name(RT, bodies):
    """deleteTopicWithBrokerRegistration (found by the fuzzer): Java deletes the
    topics whose key is gone, then creates each config by its topicName."""
    rt = RT(delete_topic_with_broker_registration=True)
    _register(rt, bodies.register_broker_body(
        [bodies.topic_config(t) for t in ("T1", "T2", "TBW102")], {"counter": 1}))
    body = bodies.register_broker_body([bodies.topic_config(t) for t in ("T1", "T2")],
                                       {"counter": 1})
    body["topicConfigSerializeWrapper"]["topicConfigTable"]["other-key"] = \
        bodies.topic_config("TBW102")
    _register(rt, body)
    assert sorted(rt.all_topics()) == ["T1", "T2", "TBW102"]


def test_1_mapping_info_without_a_broker_name_refuses_the_registration(RT, bodies):
    """(found by the fuzzer: the route answer could not be encoded afterwards)"""
    rt = RT()
    body = bodies.register_broker_body([bodies.topic_config("T1"), bodies.topic_config("T2")],
                                       {"counter": 1})
    body["topicConfigSerializeWrapper"]["topicQueueMappingInfoMap"] = {
        "T1": {"topic": "T1", "bname": None, "epoch": 0}}
    with pytest.raises(BodyError, match="mapping"):
        _register(rt, body)
    assert _empty(rt)
