"""Zone mode: Java 5.0.0's ZoneRouteRPCHook on GET_ROUTEINFO_BY_TOPIC answers.

A route query with ``__ZONE_MODE`` true (Boolean.parseBoolean) and a ``__ZONE_NAME``
that is not blank gets the route without the brokers that have a master (id 0) and
another zone (or none; zones compared with String.equalsIgnoreCase), without their
QueueData and without their addresses' filter servers; brokers without a master
stay. The hook re-encodes the answer with plain ``encode()``: the legacy form
(``{0:"addr"}``) whatever the client's version. A zone name alone filters nothing.

The expected answers are built here from the unfiltered route by a transcription of
the hook's loop (``java_hook``) and checked against the broker names each case
must keep; the captured Java answers are in tests/test_namesrv_vectors_5.py. Every
case runs on both storages (``RT``: the compiled one answers plain routes in C, the
rules build the rest) and over TCP on the selected implementation, in both
serialize types and at every client version."""

import json

import pytest

import rmq
from nameserver import Client, parse_json_body, running_namesrv
from rmq import bodies as rmq_bodies
from rmq._wire import route_zone
from rmq.javacase import equals_ignore_case
from rmq.protocol import RequestCode

# every test on the asyncio server and on the C engine (serverEngine=c)
pytestmark = pytest.mark.usefixtures("each_server")

TOPIC = "ZoneTopic"


def register(rt, name, addr, zone, broker_id=0, filter_servers=(), topics=(TOPIC,),
             acting=False, cluster="C"):
    body = rmq_bodies.register_broker_body(
        [rmq_bodies.topic_config(t, 4, 4) for t in (*topics, "SELF_TEST_TOPIC")],
        {"counter": 1, "timestamp": 1}, filter_servers)
    rt.register_broker(cluster, addr, name, broker_id, addr, body=body, now_ms=0,
                       zone_name=zone, enable_acting_master=acting)


def zoned_table(RT, filter_servers=False):
    """Brokers: a1 (zone "Zone-A"), a2 ("zone-a"), b1 ("zone-b"), n1 (no zone, a
    4.x broker), s1 (zone-b, only a slave: no master), each with TOPIC; with
    ``filter_servers``, a1 and b1 have one each (their routes are then built by the
    rules, not in C)."""
    rt = RT()
    register(rt, "a1", "10.0.0.1:10911", "Zone-A",
             filter_servers=["10.0.9.1:30000"] if filter_servers else ())
    register(rt, "a2", "10.0.0.2:10911", "zone-a")
    register(rt, "b1", "10.0.0.3:10911", "zone-b",
             filter_servers=["10.0.9.3:30000"] if filter_servers else ())
    rt.register_broker("C", "10.0.0.4:10911", "n1", 0, "10.0.0.4:10911", now_ms=0,
                       body=rmq_bodies.register_broker_body(
                           [rmq_bodies.topic_config(t, 4, 4) for t in (TOPIC, "X")],
                           {"counter": 1, "timestamp": 1}))
    register(rt, "s1", "10.0.0.5:10911", "zone-b", broker_id=1)
    return rt


def java_hook(route, zone_name):
    """ZoneRouteRPCHook.filterByZoneName, statement for statement, on a decoded
    TopicRouteData (``zone_name`` as the client sent it)."""
    reserved, removed = [], {}
    for bd in route["brokerDatas"]:
        if bd["brokerAddrs"].get(0) is None or equals_ignore_case(bd.get("zoneName"), zone_name):
            reserved.append(bd)
        else:
            removed[bd["brokerName"]] = bd
    route["brokerDatas"] = reserved
    route["queueDatas"] = [qd for qd in route["queueDatas"] if qd["brokerName"] not in removed]
    if route.get("filterServerTable"):
        for bd in removed.values():
            for addr in bd["brokerAddrs"].values():
                route["filterServerTable"].pop(addr, None)
    return route


def expected(rt, zone_name, topic=TOPIC):
    return rmq_bodies.encode_topic_route_data(java_hook(rt.topic_route(topic), zone_name),
                                              legacy=True)


def names(body):
    """The broker names of a legacy-form answer, sorted: (brokerDatas, queueDatas)."""
    route, legacy = parse_json_body(body)
    assert legacy or not route["brokerDatas"], body
    return (sorted(bd["brokerName"] for bd in route["brokerDatas"]),
            sorted(qd["brokerName"] for qd in route["queueDatas"]))


def zone_of(zone_name, mode="true"):
    ext = {"topic": TOPIC}
    if mode is not None:
        ext["__ZONE_MODE"] = mode
    if zone_name is not None:
        ext["__ZONE_NAME"] = zone_name
    return route_zone(rmq.RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext))


# ---------------------------------------------------------------- the query's zone

@pytest.mark.parametrize("mode, zone_name, filtered", [
    ("true", "zone-a", True), ("TRUE", "zone-a", True), ("True", "ZONE-A", True),
    ("false", "zone-a", False), ("yes", "zone-a", False), ("1", "zone-a", False),
    (" true", "zone-a", False), (None, "zone-a", False),        # a zone name alone
    ("true", None, False), ("true", "", False), ("true", "  \t\n", False),
    ("true", "\u2003", False),          # an em space: Character.isWhitespace
    ("true", "\xa0", True),             # a no-break space is not whitespace to Java
])
def test_which_queries_are_filtered(mode, zone_name, filtered):
    assert (zone_of(zone_name, mode) is not None) == filtered


# ---------------------------------------------------------------- the answers

CASES = [
    # (zone the client names, brokers kept): a1/a2 match in any case, s1 has no master
    ("zone-a", ["a1", "a2", "s1"]),
    ("ZONE-A", ["a1", "a2", "s1"]),
    ("zOnE-a", ["a1", "a2", "s1"]),
    ("zone-b", ["b1", "s1"]),
    ("zone-x", ["s1"]),                 # a zone no broker has: only masterless brokers
    ("zone-", ["s1"]),
]


@pytest.mark.parametrize("filter_servers", [False, True], ids=["in-C", "rules"])
@pytest.mark.parametrize("zone_name, kept", CASES)
def test_zone_answer(RT, filter_servers, zone_name, kept):
    rt = zoned_table(RT, filter_servers)
    zone = zone_of(zone_name)
    for legacy in (False, True):                # the client's form does not matter
        for _ in range(2):                      # built, then from the cache
            body = rt.route_body(TOPIC, legacy, zone)
            assert body == expected(rt, zone_name), (legacy, body)
            brokers, queues = names(body)
            assert brokers == queues == kept
    assert b'"brokerAddrs":{"' not in body                   # the legacy form


def test_filter_servers_of_removed_brokers_go(RT):
    rt = zoned_table(RT, filter_servers=True)
    full = json.loads(rt.route_body(TOPIC))
    assert set(full["filterServerTable"]) == {"10.0.0.1:10911", "10.0.0.3:10911"}
    body = rt.route_body(TOPIC, False, zone_of("zone-a"))
    assert b'"filterServerTable":{"10.0.0.1:10911":["10.0.9.1:30000"]}' in body
    body = rt.route_body(TOPIC, False, zone_of("zone-x"))
    assert b'"filterServerTable":{}' in body


def test_a_broker_whose_master_left_stays_in_every_zone(RT):
    rt = zoned_table(RT)
    register(rt, "b1", "10.0.0.6:10911", "zone-b", broker_id=1)     # b1's slave
    assert names(rt.route_body(TOPIC, True, zone_of("zone-a")))[0] == ["a1", "a2", "s1"]
    rt.unregister_broker("C", "10.0.0.3:10911", "b1", 0)             # its master leaves
    for zone_name in ("zone-a", "zone-x"):
        brokers, queues = names(rt.route_body(TOPIC, True, zone_of(zone_name)))
        assert "b1" in brokers and "b1" in queues, zone_name
        assert rt.route_body(TOPIC, True, zone_of(zone_name)) == expected(rt, zone_name)


def test_zone_names_compare_as_java_equals_ignore_case(RT):
    rt = RT()
    register(rt, "k1", "10.0.0.1:10911", "zone-\u017f")     # LATIN SMALL LETTER LONG S
    register(rt, "k2", "10.0.0.2:10911", "\u0130stanbul")   # I WITH DOT ABOVE
    register(rt, "k3", "10.0.0.3:10911", "stra\xdfe")       # sharp s: no simple upper
    for zone_name, kept in (("ZONE-S", ["k1"]), ("zone-\u017f", ["k1"]),
                            ("istanbul", ["k2"]), ("ISTANBUL", ["k2"]),
                            ("STRASSE", []), ("STRA\xdfE", ["k3"])):
        body = rt.route_body(TOPIC, True, zone_of(zone_name))
        assert names(body)[0] == kept, zone_name
        assert body == expected(rt, zone_name), zone_name


def test_missing_topic_is_not_found_in_zone_mode(RT):
    rt = zoned_table(RT)
    assert rt.route_body("Nope", True, zone_of("zone-a")) is None
    # a topic only on brokers of another zone is found: an empty route (code 0)
    body = rt.route_body("X", False, zone_of("zone-a"))
    assert body == b'{"brokerDatas":[],"filterServerTable":{},"queueDatas":[]}'


def test_zone_answers_follow_changes(RT):
    rt = zoned_table(RT)
    zone = zone_of("zone-a")
    assert names(rt.route_body(TOPIC, True, zone))[0] == ["a1", "a2", "s1"]
    register(rt, "a1", "10.0.0.1:10911", "zone-b")          # a1 moves to zone-b
    assert names(rt.route_body(TOPIC, True, zone))[0] == ["a2", "s1"]
    register(rt, "c1", "10.0.0.7:10911", "zone-c")          # a new zone
    assert names(rt.route_body(TOPIC, True, zone_of("zone-c")))[0] == ["c1", "s1"]
    rt.unregister_broker("C", "10.0.0.2:10911", "a2", 0)    # the last broker of zone-a
    assert names(rt.route_body(TOPIC, True, zone))[0] == ["s1"]
    for zone_name in ("zone-a", "zone-b", "zone-c", "zone-q"):
        assert rt.route_body(TOPIC, True, zone_of(zone_name)) == expected(rt, zone_name)


def test_zone_answers_are_cached_per_class_not_per_name(RT):
    """Clients name any zone: every zone no broker has shares one cached answer per
    topic, so that queries cannot fill the cache with names."""
    rt = zoned_table(RT)
    for k in range(300):
        rt.route_body(TOPIC, True, zone_of(f"nowhere-{k}"))
        rt.route_body(TOPIC, True, zone_of("zone-a" if k % 2 else "ZONE-A"))
    stats = rt.cache_stats()
    assert stats["entries"] == 2 and stats["misses"] == 2, stats
    assert stats["hits"] == 598, stats


def test_zone_answers_share_the_budget(RT):
    rt = zoned_table(RT)
    body = rt.route_body(TOPIC, True, zone_of("zone-a"))
    rt.cache_budget = 0
    assert rt.cache_stats()["entries"] == 0
    assert rt.route_body(TOPIC, True, zone_of("zone-a")) == body      # built, not kept
    assert rt.cache_stats()["entries"] == 0


# ---------------------------------------------------------------- over TCP

def _register_over_tcp(client, name, addr, zone, broker_id=0):
    body = rmq_bodies.encode_register_broker_body(rmq_bodies.register_broker_body(
        [rmq_bodies.topic_config(t, 4, 4) for t in (TOPIC, "SELF_TEST_TOPIC")],
        {"counter": 1, "timestamp": 1}))
    ext = {"brokerName": name, "brokerAddr": addr, "clusterName": "C", "haServerAddr": addr,
           "brokerId": str(broker_id), "enableActingMaster": "false"}
    if zone is not None:
        ext["__ZONE_NAME"] = zone
    assert client.request(RequestCode.REGISTER_BROKER, ext, body).code == 0


@pytest.mark.parametrize("answer_type", ["JSON", "ROCKETMQ"])
@pytest.mark.parametrize("serialize_type", ["JSON", "ROCKETMQ"])
def test_zone_mode_over_tcp(tmp_path, serialize_type, answer_type):
    """Requests in either serialize type, answers in the NameServer's
    (``rocketmq.serialize.type``), at every client version."""
    with running_namesrv(tmp_path, **{"rocketmq.serialize.type": answer_type}) as app, \
            Client(app.address) as broker, Client(app.address) as c:
        _register_over_tcp(broker, "a1", "10.0.0.1:10911", "zone-a")
        _register_over_tcp(broker, "b1", "10.0.0.2:10911", "zone-b")
        _register_over_tcp(broker, "s1", "10.0.0.3:10911", "zone-b", broker_id=1)
        routes = app.processor.routes
        for version in (0, 317, 401, 413):
            for accept in (None, "true"):
                for zone_name, mode, kept in (("ZONE-A", "true", ["a1", "s1"]),
                                              ("zone-b", "TRUE", ["b1", "s1"]),
                                              ("zone-x", "true", ["s1"]),
                                              ("zone-a", None, None),
                                              ("  ", "true", None)):
                    ext = {"topic": TOPIC, "__ZONE_NAME": zone_name}
                    if mode is not None:
                        ext["__ZONE_MODE"] = mode
                    if accept is not None:
                        ext["acceptStandardJsonOnly"] = accept
                    for _ in range(2):          # built, then answered from the cache
                        r = c.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext,
                                      serialize_type=serialize_type, version=version)
                        assert (r.code, r.serialize_type) == (0, answer_type), r
                        if kept is None:        # not zone mode: the client's own form
                            std = version >= 401 or accept == "true"
                            assert r.body == routes.route_body(TOPIC, not std)
                        else:
                            assert r.body == expected(routes, zone_name)
                            assert names(r.body)[0] == kept
                            assert b'"brokerAddrs":{"' not in r.body
        r = c.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                      {"topic": "Nope", "__ZONE_MODE": "true", "__ZONE_NAME": "zone-a"},
                      serialize_type=serialize_type)
        assert (r.code, r.serialize_type) == (17, answer_type)
