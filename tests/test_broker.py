"""rmq.registrar.BrokerRegistrar against real rmq NameServers over TCP (and, where a
NameServer must misbehave or its requests be seen, small socket peers)."""

import asyncio
import socket
import threading
import time

import pytest

import rmq
from nameserver import Client, RawServer, read_request, running_namesrv, wait_for
from support import vector_bytes
from test_crc32 import java_body_crc32
from rmq import bodies
from rmq.registrar import BrokerRegistrar, RegistrationError, register_period
from rmq.errors import RemotingConnectError, ResponseError

BROKER = dict(cluster="DefaultCluster", broker_name="broker-a", broker_addr="10.0.0.1:10911",
              ha_server_addr="10.0.0.1:10912")


class FastRegistrar(BrokerRegistrar):
    SHORTEST_PERIOD = 0.05


def topics(n, prefix="T"):
    return [bodies.topic_config(f"{prefix}{i:06d}", 4, 4) for i in range(n)]


@pytest.fixture
def ns(tmp_path):
    with running_namesrv(tmp_path / "a") as app:
        yield app


@pytest.fixture
def ns2(tmp_path):
    with running_namesrv(tmp_path / "b") as app:
        yield app


def closed_address():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


def route(app, topic):
    with Client(app.address) as c:
        return c.request(105, {"topic": topic})


def cluster_brokers(app):
    with Client(app.address) as c:
        table, _ = bodies.decode_cluster_info(c.request(106).body)
    return table


def run(coro):
    return asyncio.run(coro)


def test_register_with_a_live_a_stopped_and_a_silent_name_server(ns):
    """The issue's scenario: three NameServers, one stopped and one that accepts but
    never answers. Registration completes within the timeout with the live one's
    answer; periodic re-registration happens; stop unregisters everywhere it can."""
    stopped = closed_address()
    got = []
    with RawServer(lambda conn, i: [read_request(conn), time.sleep(10)]) as silent:
        async def main():
            r = FastRegistrar(f"{stopped};{silent.address};{ns.address}", topics=topics(20),
                              register_timeout=0.5, period=0.2, on_results=got.append,
                              **BROKER)
            t = time.monotonic()
            results = await r.start()
            took = time.monotonic() - t
            assert 0.45 < took < 1.5                # bounded by the timeout, not by the peers
            assert [x.namesrv for x in results] == [ns.address]
            # (a broker's routes last while its connection does: check before stop)
            assert route(ns, "T000007").code == 0
            while len(got) < 3:                     # the first + two periodic ones
                await asyncio.sleep(0.05)
            assert all([x.namesrv for x in g] == [ns.address] for g in got)
            t = time.monotonic()
            outcome = await r.stop()
            assert time.monotonic() - t < 1.5
            return outcome
        outcome = run(main())
    assert outcome[ns.address] is None
    assert isinstance(outcome[stopped], RemotingConnectError)
    assert outcome[silent.address] is not None
    assert cluster_brokers(ns) == {}


def test_raises_only_when_no_name_server_answered():
    stopped = closed_address()
    with RawServer(lambda conn, i: [read_request(conn), time.sleep(5)]) as silent:
        async def main():
            r = BrokerRegistrar(f"{stopped};{silent.address}", topics=topics(3),
                                register_timeout=0.3, **BROKER)
            try:
                with pytest.raises(RegistrationError, match="no name server answered") as e:
                    await r.register_broker_all()
            finally:
                await r.stop(unregister=False)
            return e.value
        err = run(main())
        assert set(err.errors) == {stopped, silent.address}
        assert isinstance(err.errors[stopped], RemotingConnectError)


def test_request_as_a_java_broker_sends_it():
    """Header fields, bodyCrc32 of the exact body, compressed flag, version."""
    seen = []

    def answer(conn, i):
        while (req := read_request(conn)) is not None:
            seen.append(req)
            conn.sendall(rmq.encode_frame(req.response(0, ext_fields={})))
    with RawServer(answer) as peer:
        async def main():
            for compressed in (False, True):
                r = BrokerRegistrar(peer.address, topics=topics(5), compressed=compressed,
                                    heartbeat_timeout_ms=30000, enable_acting_master=False,
                                    data_version={"counter": 7, "timestamp": 123}, **BROKER)
                await r.register_broker_all()
                await r.stop(unregister=False)
        run(main())
    assert len(seen) == 2
    for req, compressed in zip(seen, (False, True)):
        assert req.code == 103 and req.version == rmq.protocol.V4_9_8
        assert req.ext_fields == {
            "brokerAddr": "10.0.0.1:10911", "brokerId": "0", "brokerName": "broker-a",
            "clusterName": "DefaultCluster", "haServerAddr": "10.0.0.1:10912",
            "compressed": "true" if compressed else "false",
            "bodyCrc32": str(java_body_crc32(req.body)),
            "heartbeatTimeoutMillis": "30000", "enableActingMaster": "false"}
        body = bodies.decode_register_broker_body(req.body)
        wrapper = body["topicConfigSerializeWrapper"]
        assert wrapper["dataVersion"] == {"counter": 7, "timestamp": 123}
        assert sorted(wrapper["topicConfigTable"]) == [f"T{i:06d}" for i in range(5)]


@pytest.mark.parametrize("compressed", [False, True])
def test_oneway_registration_is_applied(ns, compressed):
    async def main():
        r = BrokerRegistrar(ns.address, topics=topics(10), oneway=True, compressed=compressed,
                            **BROKER)
        assert await r.register_broker_all() == []
        for _ in range(100):
            if route(ns, "T000009").code == 0:
                break
            await asyncio.sleep(0.02)
        assert route(ns, "T000009").code == 0
        await r.stop(unregister=False)
    run(main())


def test_answers_hand_master_address_and_kv_table_to_the_caller(ns):
    with Client(ns.address) as c:
        assert c.request(100, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T000001",
                               "value": "broker-a:4"}).code == 0
    got = []

    async def main():
        master = BrokerRegistrar(ns.address, topics=topics(3), **BROKER)
        [res] = await master.register_broker_all()
        assert res.master_addr is None and res.kv_table == {"T000001": "broker-a:4"}
        slave = BrokerRegistrar(ns.address, topics=topics(3), on_results=got.append,
                                **dict(BROKER, broker_id=1, broker_addr="10.0.0.2:10911",
                                       ha_server_addr="10.0.0.2:10912"))
        await slave.register_broker_all()
        await master.stop(unregister=False)
        await slave.stop(unregister=False)
        return slave.last_results
    last = run(main())
    assert got == [last]
    [res] = last
    assert (res.namesrv, res.master_addr, res.ha_server_addr) == (
        ns.address, "10.0.0.1:10911", "10.0.0.1:10912")


def test_refused_registration_is_a_typed_error(ns):
    """The NameServer refuses a broker's first registration with exactly one topic
    (as Java does): the answer's code and remark reach the caller."""
    async def main():
        r = BrokerRegistrar(ns.address, topics=topics(1), **BROKER)
        try:
            with pytest.raises(RegistrationError) as e:
                await r.register_broker_all()
        finally:
            await r.stop(unregister=False)
        return e.value.errors[ns.address]
    err = run(main())
    assert isinstance(err, ResponseError) and err.code == 1
    assert "register broker failed" in err.remark


def test_periodic_registration_and_unregister_on_stop(ns, ns2):
    got = []

    async def main():
        r = FastRegistrar(f"{ns.address};{ns2.address}", topics=topics(10), period=0.1,
                          on_results=got.append, **BROKER)
        first = await r.start()
        assert {x.namesrv for x in first} == {ns.address, ns2.address}
        while len(got) < 4:
            await asyncio.sleep(0.02)
        assert set(cluster_brokers(ns)) == set(cluster_brokers(ns2)) == {"broker-a"}
        outcome = await r.stop()
        assert outcome == {ns.address: None, ns2.address: None}
        n = len(got)
        await asyncio.sleep(0.3)
        assert len(got) == n                        # stopped: no more registrations
    run(main())
    assert cluster_brokers(ns) == cluster_brokers(ns2) == {}
    assert route(ns, "T000001").code == 17


def test_without_force_register_only_changed_data_is_registered(ns):
    async def main():
        r = FastRegistrar(ns.address, topics=topics(5), force_register=False, **BROKER)
        await r.register_broker_all()
        assert await r.need_register() == []
        assert await r.tick() is None                # unchanged: nothing sent
        r.update_topics(topics(6))
        assert await r.need_register() == [ns.address]
        assert [x.namesrv for x in await r.tick()] == [ns.address]
        assert await r.need_register() == []
        assert route(ns, "T000005").code == 0
        await r.stop(unregister=False)
    run(main())


def test_need_register_counts_a_failing_name_server_as_changed(ns):
    dead = closed_address()

    async def main():
        r = BrokerRegistrar(f"{ns.address};{dead}", topics=topics(5),
                            register_timeout=0.5, **BROKER)
        await r.register_broker_all()
        changed = await r.need_register()
        await r.stop(unregister=False)
        return changed
    assert run(main()) == [dead]


def test_without_force_register_only_name_servers_that_differ_get_the_table(ns, ns2):
    """ns2 restarted empty (here: never registered): only it is sent the table."""
    seen = []

    async def main():
        r = FastRegistrar(f"{ns.address};{ns2.address}", topics=topics(5),
                          force_register=False, on_results=seen.append, **BROKER)
        await r.register_broker_all(addrs=[ns.address])
        assert cluster_brokers(ns2) == {}
        assert await r.need_register() == [ns2.address]
        results = await r.tick()
        assert [x.namesrv for x in results] == [ns2.address]
        assert set(cluster_brokers(ns2)) == {"broker-a"}
        assert await r.tick() is None
        await r.stop(unregister=False)
    run(main())


def test_split_registration_100000_topics_every_topic_has_a_route(ns):
    names = [f"Split-{i:06d}" for i in range(100_000)]

    async def main():
        r = BrokerRegistrar(ns.address, topics=[bodies.topic_config(n, 4, 4) for n in names],
                            split_registration=True, register_timeout=30, **BROKER)
        before = r.data_version["counter"]
        await r.register_broker_all()
        # 125 full parts of 800 and the last (empty) one, each with a new DataVersion
        assert r.data_version["counter"] == before + 126
        assert_every_topic_routed(ns, names)
        await r.stop(unregister=False)
    run(main())


def test_a_table_too_big_for_one_frame_is_split_whatever_the_setting(tmp_path):
    names = [f"Big-{i:05d}" for i in range(20_000)]
    limit = 1 << 20
    with running_namesrv(tmp_path, maxFrameLength=limit) as app:
        async def main():
            r = BrokerRegistrar(app.address, topics=[bodies.topic_config(n, 4, 4) for n in names],
                                max_frame_length=limit, **BROKER)
            await r.register_broker_all()
            assert_every_topic_routed(app, names)
            await r.stop(unregister=False)
        run(main())


def assert_every_topic_routed(app, names):
    """One GET_ROUTEINFO_BY_TOPIC per topic, pipelined on one connection."""
    reqs = [rmq.RemotingCommand.request(105, {"topic": n}) for n in names]
    data = b"".join(rmq.encode_frame(r) for r in reqs)
    sock = socket.create_connection(app.address.split(":"), timeout=60)
    answers = []
    try:
        threading.Thread(target=sock.sendall, args=(data,), daemon=True).start()
        dec = rmq.FrameDecoder()
        while len(answers) < len(reqs):
            chunk = sock.recv(1 << 20)
            assert chunk, "connection closed"
            answers += dec.feed(chunk)
    finally:
        sock.close()
    assert [a.opaque for a in answers] == [r.opaque for r in reqs]
    missing = [n for n, a in zip(names, answers) if a.code != 0]
    assert not missing, f"{len(missing)} topics without a route, e.g. {missing[:3]}"


def test_light_heartbeat_is_sent_oneway(ns):
    seen = []

    def record(conn, i):
        while (req := read_request(conn)) is not None:
            seen.append(req)
            if not req.is_oneway:
                conn.sendall(rmq.encode_frame(req.response(0, ext_fields={})))
    with RawServer(record) as peer:
        async def main():
            r = FastRegistrar(peer.address, topics=topics(3), light_heartbeat=True,
                              heartbeat_interval=0.05, period=60, **BROKER)
            await r.start()
            while sum(q.code == 904 for q in seen) < 3:
                await asyncio.sleep(0.02)
            await r.stop(unregister=False)
        run(main())
    beats = [q for q in seen if q.code == 904]
    assert all(q.is_oneway for q in beats)
    assert beats[0].ext_fields == {"brokerAddr": "10.0.0.1:10911", "brokerName": "broker-a",
                                   "clusterName": "DefaultCluster"}


def test_encoded_once_per_data_version(ns):
    """The table is encoded once and reused for every NameServer and period until
    it changes."""
    async def main():
        r = BrokerRegistrar(ns.address, topics=topics(50), **BROKER)
        a = r._table.chunks(False)
        await r.register_broker_all()
        assert r._table.chunks(False) is a
        r.update_topics(topics(51))
        assert r._table.chunks(False) is not a
        await r.stop(unregister=False)
    run(main())


@pytest.mark.parametrize("period, expected", [(30, 30), (5, 10), (90, 60), (10, 10)])
def test_register_period_is_clamped_as_java(period, expected):
    assert register_period(period) == expected
    assert BrokerRegistrar("127.0.0.1:9876", period=period, **BROKER).period == expected


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="HOST:PORT"):
        BrokerRegistrar("nowhere", **BROKER)
    with pytest.raises(ValueError, match="split_size"):
        BrokerRegistrar("127.0.0.1:9876", split_size=0, **BROKER)
    with pytest.raises(ValueError, match="topicName"):
        BrokerRegistrar("127.0.0.1:9876", topics={"A": bodies.topic_config("B")}, **BROKER)


def test_stop_during_a_round_leaves_nothing_running(ns):
    with RawServer(lambda conn, i: [read_request(conn), time.sleep(10)]) as silent:
        async def main():
            r = FastRegistrar(f"{ns.address};{silent.address}", topics=topics(5),
                              register_timeout=3, period=0.1, **BROKER)
            with pytest.raises(RegistrationError):      # only for the silent one: no
                await r.register_broker_all(addrs=[silent.address])
            r.first_delay = 0
            r._tasks.append(asyncio.ensure_future(r._periodically()))
            await asyncio.sleep(0.3)                    # a round waits for the silent one
            await r.stop(unregister=False)
            return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
        assert run(main()) == set()


def test_a_failed_start_leaves_no_connection(ns):
    async def main():
        r = BrokerRegistrar(ns.address, topics=topics(1), **BROKER)   # refused: one topic
        with pytest.raises(RegistrationError):
            await r.start()
        assert r._namesrvs._client is None and r._tasks == []
    run(main())
    assert wait_for(lambda: not ns.connections, 5)


def test_a_split_table_is_registered_within_one_timeout():
    """Every part shares the one register_timeout: a peer that answers slowly
    cannot stretch it to parts x timeout."""
    def slow(conn, i):
        dec = rmq.FrameDecoder()
        try:
            while data := conn.recv(1 << 20):
                for req in dec.feed(data):
                    time.sleep(0.2)
                    conn.sendall(rmq.encode_frame(req.response(0, ext_fields={})))
        except OSError:
            pass
    with RawServer(slow) as peer:
        async def main():
            r = BrokerRegistrar(peer.address, topics=topics(50), split_registration=True,
                                split_size=5, register_timeout=1.0, **BROKER)
            t = time.monotonic()
            with pytest.raises(RegistrationError):      # 11 parts x 0.2 s > 1 s
                await r.register_broker_all()
            took = time.monotonic() - t
            await r.stop(unregister=False)
            return took
        assert run(main()) < 1.6


@pytest.mark.parametrize("filters", [(), ("10.0.0.9:1",)])
def test_body_from_kept_topic_json_is_the_encoders_bytes(filters):
    """The whole-table body is assembled from the table's JSON kept between
    registrations: byte for byte what encode_register_broker_body writes, also
    after topics change, come, go, and with non-ASCII names and 5.x attributes."""
    table = [bodies.topic_config(f"T{i}", i % 5 + 1, 4, perm=(2, 4, 6)[i % 3]) for i in range(30)]
    table.append(bodies.topic_config("主题-ü", 8, 8, attributes={"+message.type": "NORMAL"}))
    r = BrokerRegistrar("127.0.0.1:9876", topics=table, filter_servers=filters, **BROKER)

    def expected():
        return bodies.encode_register_broker_body(bodies.register_broker_body(
            list(r.topics.values()), r.data_version, filters))
    [(body, crc)] = r._table.chunks(False)
    assert body == expected() and crc == java_body_crc32(body)
    table[3] = bodies.topic_config("T3", 16, 16)           # changed
    del table[7]                                            # gone
    table.append(bodies.topic_config("New", 2, 2))          # new
    r.update_topics(table)
    [(body, _)] = r._table.chunks(False)
    assert body == expected()
    assert bodies.decode_register_broker_body(body)["topicConfigSerializeWrapper"][
        "topicConfigTable"]["T3"]["readQueueNums"] == 16


def test_a_topic_config_changed_in_place_is_sent_after_update_topics():
    tc = bodies.topic_config("T1", 4, 4)
    r = BrokerRegistrar("127.0.0.1:9876", topics=[tc, bodies.topic_config("T2")], **BROKER)
    r._table.chunks(False)
    tc["readQueueNums"] = 9                                 # not through update_topics
    r.update_topics([tc, bodies.topic_config("T2")])
    [(body, _)] = r._table.chunks(False)
    got = bodies.decode_register_broker_body(body)["topicConfigSerializeWrapper"]
    assert got["topicConfigTable"]["T1"]["readQueueNums"] == 9


def test_system_topics_are_what_a_java_broker_registers():
    frame = rmq.decode_frame(vector_bytes("103_register_broker_request.bin"))
    java = bodies.decode_register_broker_body(frame.body)["topicConfigSerializeWrapper"]
    expected = java["topicConfigTable"]
    mine = bodies.broker_system_topics(frame.ext_fields["clusterName"],
                                       frame.ext_fields["brokerName"])
    assert {tc["topicName"]: tc for tc in mine} == expected
    names = [tc["topicName"] for tc in bodies.broker_system_topics("c", "b", auto_create_topic=False,
                                                                   trace_topic=True)]
    assert "TBW102" not in names and "RMQ_SYS_TRACE_TOPIC" in names


def test_a_one_topic_first_registration_is_refused_and_says_why(ns, caplog):
    registrar = BrokerRegistrar(ns.address, topics=[bodies.topic_config("TopicTest")], **BROKER)

    async def register_twice():
        with pytest.raises(RegistrationError, match="broker_system_topics") as info:
            await registrar.register_broker_all()
        # with the system topics the same broker registers
        registrar.update_topics([*bodies.broker_system_topics("DefaultCluster", "broker-a"),
                                 bodies.topic_config("TopicTest")])
        try:
            results = await registrar.register_broker_all()
            # asked while the broker's connection is open: its close drops the broker
            with Client(ns.address) as c:
                route = await asyncio.to_thread(c.request, 105, {"topic": "TopicTest"})
            return info.value, results, route
        finally:
            await registrar.stop(unregister=False)

    with caplog.at_level("WARNING", logger="rmq.namesrv"):
        refusal, results, route = asyncio.run(register_twice())
    error, = refusal.errors.values()
    assert (error.code, error.remark) == (1, "register broker failed")
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1, refused
    assert "exactly one topic" in refused[0] and "broker-a" in refused[0], refused
    assert [r.namesrv for r in results] == [ns.address]
    assert route.code == 0, route.remark
