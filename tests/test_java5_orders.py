"""The order of the lists in Java 5.0.0's route answers (issue 29), which rmq's give
element for element: 106's brokerAddrTable and clusterAddrTable, 206/224/304/311-313's
topic lists (219's KV table: test_kvconfig).

Java 5.0.0 (namesrv RouteInfoManager; common.protocol.body TopicList, ClusterInfo)
keeps topicQueueTable, brokerAddrTable and clusterAddrTable in ConcurrentHashMaps of
capacity 1,024, 128 and 32 (2,048, 256 and 64 buckets), a cluster's broker names in a
HashSet, and lists topics in a TopicList whose set is a CopyOnWriteArraySet (insertion
order); fastjson writes maps and sets in their iteration order. The captured 5.0.0 answers are rebuilt
here from the registrations that preceded them (tests/vectors/java-5.0.0, in capture
order) and compared byte for byte; then histories too large for any capture (resizes,
removals) against the JDK's own ConcurrentHashMap.
"""

import json
import random

import pytest

import rmq
from rmq import bodies
from rmq.javaorder import JavaConcurrentKeys, java_spread_hash
from support import V5
from test_javaorder import jdk

def _frame(name):
    return rmq.decode_frame(V5.bytes(name))


def _register(rt, request_file, *, now=1_000):
    """A captured REGISTER_BROKER, as the 5.0.0 namesrv applied it."""
    cmd = _frame(request_file)
    e = cmd.ext_fields
    acting = e.get("enableActingMaster")
    return rt.register_broker(
        e["clusterName"], e["brokerAddr"], e["brokerName"], int(e["brokerId"]),
        e["haServerAddr"], body=bodies.decode_register_broker_body(cmd.body),
        conn=e["brokerName"], now_ms=now, zone_name=e.get("__ZONE_NAME"),
        timeout_ms=int(e.get("heartbeatTimeoutMillis", 120_000)),
        enable_acting_master=None if acting is None else acting == "true")


def _add_topics(rt, request_file, topics, counter):
    """The broker's registration once ``topics`` were created on it (mqadmin
    updateTopic: the broker re-registers with a new DataVersion): not captured."""
    cmd = _frame(request_file)
    e = cmd.ext_fields
    reg = bodies.decode_register_broker_body(cmd.body)
    wrapper = reg["topicConfigSerializeWrapper"]
    wrapper["dataVersion"]["counter"] = counter
    for t in topics:
        wrapper["topicConfigTable"][t] = bodies.topic_config(t, 4, 4, 6)
    acting = e.get("enableActingMaster")
    rt.register_broker(e["clusterName"], e["brokerAddr"], e["brokerName"], 0,
                       e["haServerAddr"], body=reg, conn=e["brokerName"], now_ms=2_000,
                       zone_name=e.get("__ZONE_NAME"),
                       enable_acting_master=None if acting is None else acting == "true")


def _v5rmq(rt):
    """v5rmq's boot registration (its request is not among the vectors): a 5.0.0 broker
    of V5Cluster at 127.0.0.1:29951, no zone, no acting master."""
    cmd = _frame("103_register_broker_request.bin")
    reg = bodies.decode_register_broker_body(cmd.body)
    rt.register_broker("V5Cluster", "127.0.0.1:29951", "v5rmq", 0, "127.0.0.1:29952",
                       body=reg, conn="v5rmq", now_ms=3_000, enable_acting_master=False)


def _body(name):
    return bytes(_frame(name).body)


def _session(RT):
    """The default session up to the topic lists (seq 0 to 216): v5broker (zone-a) and
    v5acting boot, then V5Topic, V5DelTopic (both brokers) and V5SoloTopic (v5broker)
    are created by mqadmin, which the brokers' registrations bring (not captured: 105
    answers show where the topics are)."""
    rt = RT()
    _register(rt, "103_register_broker_request.bin")                # seq 0
    _register(rt, "103_register_broker_acting_request.bin")         # seq 2
    _add_topics(rt, "103_register_broker_request.bin", ["V5Topic", "V5DelTopic"], 2)
    _add_topics(rt, "103_register_broker_acting_request.bin", ["V5Topic", "V5DelTopic"], 2)
    _add_topics(rt, "103_register_broker_request.bin",
                ["V5Topic", "V5DelTopic", "V5SoloTopic"], 3)
    return rt


def test_two_brokers_cluster_info_is_the_5_0_0_answer(RT):
    """106 with v5broker and v5acting: CHM(128) order, byte for byte."""
    rt = _session(RT)
    for name in ("106_get_broker_cluster_info_raw_response.bin",
                 "106_get_broker_cluster_info_broker_zone_response.bin",
                 "106_get_broker_cluster_info_rmq_response.bin"):
        assert bodies.encode_cluster_info(*rt.cluster_info()) == _body(name), name


def test_topic_lists_are_the_5_0_0_answers(RT):
    """206, 224 and 304 byte for byte (311-313: empty, no topic has a unit flag)."""
    rt = _session(RT)
    all_topics = _body("206_get_all_topic_list_from_nameserver_response.bin")
    assert bodies.encode_topic_list(rt.all_topics()) == all_topics
    by_cluster = _body("224_get_topics_by_cluster_response.bin")
    assert bodies.encode_topic_list(rt.topics_by_cluster("V5Cluster")) == by_cluster
    system = _body("304_get_system_topic_list_from_ns_response.bin")
    assert bodies.encode_topic_list(*rt.system_topics()) == system
    for name, listed in (("311_get_unit_topic_list_response.bin", rt.unit_topics()),
                         ("312_get_has_unit_sub_topic_list_response.bin",
                          rt.has_unit_sub_topics()),
                         ("313_get_has_unit_sub_ununit_topic_list_response.bin",
                          rt.has_unit_sub_ununit_topics())):
        assert bodies.encode_topic_list(listed) == _body(name), name
    # what makes them 5.0.0's: 206 is the map's order (2,048 buckets), 224 v5broker's
    # topics then v5acting's (the cluster's HashSet order), each once
    topics = json.loads(all_topics)["topicList"]
    assert topics == sorted(topics, key=lambda t: java_spread_hash(t) & 2047)
    assert json.loads(by_cluster)["topicList"][-2:] == [
        "v5acting", "rmq_sys_SYNC_BROKER_MEMBER_v5acting"]


def test_five_brokers_cluster_info_has_the_5_0_0_order(RT):
    """106 with five brokers in two clusters (seq 1003): the brokers in
    brokerAddrTable's order (256 buckets: v4broker, bucket 147, comes after v5broker,
    50, where a table of 128 puts it first), each cluster's names in its HashSet's."""
    rt = _session(RT)
    _v5rmq(rt)
    _register(rt, "103_register_broker_compat_request.bin")         # seq 908
    _register(rt, "103_register_broker_v498_request.bin")           # seq 947
    java = json.loads(_body("106_get_broker_cluster_info_five_response.bin").replace(
        b"{0:", b'{"0":'))
    brokers, clusters = rt.cluster_info()
    assert list(brokers) == list(java["brokerAddrTable"]) == [
        "v5rmq", "v5broker", "v5compat", "v4broker", "v5acting"]
    assert clusters == java["clusterAddrTable"]
    assert list(clusters) == list(java["clusterAddrTable"])
    # and once every broker left (seq 1257): empty tables and lists
    for cluster, name, addr in (("V4Cluster", "v4broker", "127.0.0.1:29921"),
                                ("V5Cluster", "v5acting", "127.0.0.1:29931"),
                                ("V5Cluster", "v5broker", "127.0.0.1:29911"),
                                ("V5Cluster", "v5rmq", "127.0.0.1:29951"),
                                ("V5Cluster", "v5compat", "127.0.0.1:29941")):
        rt.unregister_broker(cluster, addr, name, 0)
    assert bodies.encode_cluster_info(*rt.cluster_info()) == \
        _body("106_get_broker_cluster_info_empty_response.bin")
    assert bodies.encode_topic_list(rt.all_topics()) == \
        _body("206_get_all_topic_list_from_nameserver_empty_response.bin")


# ---------------------------------------------------------------- beyond the captures

def _random_topics(rng, n):
    return list(dict.fromkeys(
        f"{rng.choice(['T', 'topic-', '%RETRY%g-', 'order_'])}{rng.randrange(10**7)}"
        for _ in range(n)))


def _history(RT, seed):
    """Registrations, deletions and unregistrations that take topicQueueTable past
    two resizes with removals between them. Returns the table and topicQueueTable's
    changes as Java made them (a registration adds its new topics in its body's order:
    see the Deviation in rmq.namesrv.routeinfo)."""
    from test_routes import reg
    rng = random.Random(seed)
    rt = RT()
    present, ops = {}, []

    def registered(name, topics, counter, cluster="C1"):
        reg(rt, topics, name=name, addr=f"10.0.{len(name)}.{counter}:10911",
            cluster=cluster, counter=counter)
        for t in topics:
            if t not in present:
                ops.append(("put", t))
            present.setdefault(t, set()).add(name)

    def removed(topic):
        del present[topic]
        ops.append(("remove", topic))

    a = _random_topics(rng, 1400)
    registered("broker-a", a, 1)
    for t in rng.sample(a, 200):                 # 216 without a cluster
        rt.delete_topic(t)
        removed(t)
    b = _random_topics(rng, 600) + rng.sample(a, 50)
    registered("broker-b", b, 1, cluster="C2")   # crosses 1,536: 2,048 -> 4,096
    rt.unregister_broker("C1", "10.0.8.1:10911", "broker-a", 0)
    for t in [t for t, owners in present.items() if owners == {"broker-a"}]:
        removed(t)
    for owners in present.values():
        owners.discard("broker-a")
    c = _random_topics(rng, 3000)
    registered("broker-c", c, 1)                 # crosses 3,072: 4,096 -> 8,192
    return rt, ops


@pytest.mark.parametrize("seed", [1, 2])
def test_topic_order_through_resizes_and_removals(RT, seed):
    """rmq's topic lists against a ConcurrentHashMap(1024) mirror fed topicQueueTable's
    changes one by one (rmq.javaorder, checked against the JDK in test_javaorder)."""
    rt, ops = _history(RT, seed)
    mirror = JavaConcurrentKeys(1024)
    for op, topic in ops:
        (mirror.add if op == "put" else mirror.discard)(topic)
    assert mirror.table_size == 8192
    expected = mirror.java_order()
    assert rt.all_topics() == expected
    # 224 of a one-broker cluster: its topics in the map's order
    for cluster in ("C1", "C2"):
        listed = rt.topics_by_cluster(cluster)
        assert listed == [t for t in expected if t in set(listed)]
    assert set(rt.topics_by_cluster("C1")) | set(rt.topics_by_cluster("C2")) == set(expected)


@pytest.mark.requires("java")
def test_topic_order_through_resizes_and_removals_is_the_jdks(RT):
    rt, ops = _history(RT, 3)
    script = ["new chm 1024"] + [f"{op} {t}" for op, t in ops] + ["cow"]
    (order,) = jdk(script)
    assert rt.all_topics() == order
