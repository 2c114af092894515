"""RouteTable: the NameServer's route tables (Java's RouteInfoManager).

Runs on the pure-Python reference (``py``) and on the compiled core's RouteTable
(``c``) once it has one. Bodies are built with ``rmq.bodies`` helpers; the replay
tests feed the captured 4.9.8 REGISTER_BROKER requests and compare with the 4.9.8
NameServer's answers.
"""

import copy
import os
import random
import re
import weakref

import pytest

import rmq
from rmq import bodies
from rmq._wire import ZONE_MODE, ZONE_NAME, route_zone
from rmq.javaorder import JavaConcurrentKeys, java_route_orders
from rmq.namesrv import routeinfo as ref
from support import load_compiled, load_fallback, route_table, vector_bytes
from test_javaorder import JDK17_ROUTE_BROKER_ORDER

CLUSTER = "DefaultCluster"
A0, A1, A2 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"
B0 = "10.0.1.1:10911"


_warmed = weakref.WeakKeyDictionary()


def invalidated(rt):
    """The route cache's invalidations: topics (known at the previous call or now)
    whose cached answer, in either form, is gone. Each call then caches every
    topic's answer in both forms again."""
    cached = rt.cached_topics() & rt.cached_topics(legacy=True)
    known = _warmed.get(rt, set()) | set(rt.all_topics())
    gone = {t for t in known if t not in cached}
    for t in rt.all_topics():
        rt.route_body(t)
        rt.route_body(t, legacy=True)
    _warmed[rt] = rt.cached_topics() & rt.cached_topics(legacy=True)
    return gone


def tc(name, r=4, w=4, perm=6, flag=0):
    return bodies.topic_config(name, r, w, perm, topic_sys_flag=flag)


def body(topics, counter=1, timestamp=1000, state=None, filters=(), mappings=None):
    dv = {"counter": counter, "timestamp": timestamp}
    if state is not None:
        dv["stateVersion"] = state
    b = bodies.register_broker_body([tc(t) if isinstance(t, str) else t for t in topics],
                                    dv, filters)
    if mappings is not None:
        b["topicConfigSerializeWrapper"]["topicQueueMappingInfoMap"] = mappings
    return b


def reg(rt, topics=("T1", "T2"), name="broker-a", addr=A0, broker_id=0, cluster=CLUSTER,
        now=0, conn=None, ha=None, **kw):
    kw.setdefault("counter", 1)
    bkw = {k: kw.pop(k) for k in ("counter", "timestamp", "state", "filters", "mappings")
           if k in kw}
    return rt.register_broker(cluster, addr, name, broker_id, ha or addr.replace("10911", "10912"),
                              body=body(topics, **bkw), conn=conn, now_ms=now, **kw)


def qd(name, r=4, w=4, perm=6, flag=0):
    return {"brokerName": name, "perm": perm, "readQueueNums": r, "topicSysFlag": flag,
            "writeQueueNums": w}


def addrs(rt, topic):
    return {bd["brokerName"]: bd["brokerAddrs"] for bd in rt.topic_route(topic)["brokerDatas"]}


def perms(rt, topic):
    return {q["brokerName"]: q["perm"] for q in rt.topic_route(topic)["queueDatas"]}


# ---------------------------------------------------------------- registration

def test_first_registration(RT):
    rt = RT()
    assert invalidated(rt) == set()
    v = rt.version
    res = reg(rt)
    assert res["masterAddr"] is None and res["haServerAddr"] is None   # the master's own answer
    assert res["first"] and res["changed"]
    assert not res["ignored"] and not res["failed"]
    assert rt.version > v
    assert invalidated(rt) == {"T1", "T2"}
    assert rt.topic_route("T1") == {
        "brokerDatas": [{"brokerAddrs": {0: A0}, "brokerName": "broker-a", "cluster": CLUSTER,
                         "enableActingMaster": False}],
        "filterServerTable": {},
        "queueDatas": [qd("broker-a")]}
    assert rt.topic_route("Nope") is None
    assert sorted(rt.all_topics()) == ["T1", "T2"]


def test_reregistration_unchanged_has_no_effect(RT):
    rt = RT()
    reg(rt, now=0)
    invalidated(rt)
    v = rt.version
    res = reg(rt, now=30_000)
    assert not res["first"] and not res["changed"]
    assert invalidated(rt) == set()
    assert rt.version == v
    (live,) = rt.live_brokers()
    assert live["lastUpdateTimestamp"] == 30_000 and live["brokerAddr"] == A0


def test_changed_data_version_reapplies_topics(RT):
    rt = RT()
    reg(rt, [tc("T1"), tc("T2")], counter=1)
    invalidated(rt)
    res = reg(rt, [tc("T1", 8, 8), tc("T2"), tc("T3")], counter=2)
    assert res["changed"] and not res["first"]
    assert invalidated(rt) == {"T1", "T3"}          # T2 re-applied, identical
    assert rt.topic_route("T1")["queueDatas"] == [qd("broker-a", 8, 8)]
    # an unchanged DataVersion does not apply a changed table
    reg(rt, [tc("T1", 2, 2), tc("T2"), tc("T3")], counter=2)
    assert rt.topic_route("T1")["queueDatas"] == [qd("broker-a", 8, 8)]
    # stateVersion is part of the DataVersion (5.x DataVersion.equals)
    reg(rt, [tc("T1", 2, 2), tc("T2"), tc("T3")], counter=2, state=1)
    assert rt.topic_route("T1")["queueDatas"] == [qd("broker-a", 2, 2)]


def test_topics_changed_counts_queue_data_made_new_or_different(RT):
    """What the handler logs (Java's createAndUpdateQueueData logs each topic whose
    queue data is new or changed): a new DataVersion with the same topics, as a
    broker's restart sends, changes none."""
    rt = RT()
    res = reg(rt, ["T1", "T2"])
    assert res["first"] and res["topics_changed"] == 2
    res = reg(rt, ["T1", "T2"], counter=2)
    assert res["changed"] and res["topics_changed"] == 0
    res = reg(rt, [tc("T1", 8, 8), tc("T2"), tc("T3")], counter=3)
    assert res["changed"] and res["topics_changed"] == 2        # T1 different, T3 new
    # an unchanged DataVersion takes no topic the broker has queue data for
    assert reg(rt, ["T1", "T2", "T3"], counter=3)["topics_changed"] == 0
    rt.delete_topic("T2")
    res = reg(rt, [tc("T1", 8, 8), tc("T2"), tc("T3")], counter=3)
    assert res["changed"] and res["topics_changed"] == 1        # T2 comes back
    res = reg(rt, ["T1"], addr=A1, broker_id=1)                 # a slave writes none
    assert not res["changed"] and res["topics_changed"] == 0


def test_the_name_server_logs_only_registrations_that_change_queue_data(RT, caplog):
    """As Java (createAndUpdateQueueData logs each topic that changed): no line for a
    new DataVersion with the same topics, as every broker's restart sends."""
    import logging
    from rmq.namesrv import DefaultRequestProcessor
    from rmq.namesrv.config import NamesrvConfig
    from rmq.namesrv.kvconfig import KVConfig
    from rmq.registrar import broker_identity, register_command
    ns = DefaultRequestProcessor(NamesrvConfig(), KVConfig(), routes=RT())

    def register(counter, topics):
        data = bodies.encode_register_broker_body(body(topics, counter=counter))
        cmd = register_command(broker_identity(CLUSTER, "broker-a", 0, A0), A0, data,
                               compressed=False)
        assert ns.handle(cmd).code == 0
        lines = [r.getMessage() for r in caplog.records if "broker-a" in r.getMessage()]
        caplog.clear()
        return lines

    with caplog.at_level(logging.INFO, logger="rmq.namesrv"):
        assert [m.split(":")[0] for m in register(1, ["T1", "T2"])] == ["new broker registered"]
        assert register(2, ["T1", "T2"]) == []
        assert register(3, [tc("T1", 8, 8), tc("T2")]) == [
            f"broker broker-a {A0}: queue data of 1 of its 2 topics new or changed"]
        ns.routes.delete_topic_with_broker_registration = True
        assert register(3, [tc("T1", 8, 8)]) == [
            f"broker broker-a {A0}: 1 topics it no longer registers removed "
            "(deleteTopicWithBrokerRegistration)"]


@pytest.mark.parametrize("delete_missing", [False, True])
def test_registrations_agree_across_implementations_for_records_keyed_otherwise(RT, delete_missing):
    """Records keyed otherwise than their topicName, two of them naming one topic
    (the last one written wins: the compare under the read lock does not skip the
    one equal to the table), with and without deleteTopicWithBrokerRegistration:
    both implementations count against the table as it was before the registration,
    and write the same."""
    def odd_body(counter, r):
        b = body([], counter=counter)
        b["topicConfigSerializeWrapper"]["topicConfigTable"] = {
            "K1": tc("T1", r, r), "T1": tc("T1", 4, 4), "K2": tc("T2"), "T3": tc("T3", r, 4)}
        return b

    tables = (RT(), route_table(load_fallback())())
    for rt in tables:
        reg(rt, ["T1", "T2", "Gone"])
        rt.delete_topic_with_broker_registration = delete_missing
    for counter, r in ((1, 4), (2, 8), (2, 8), (3, 8), (4, 2)):
        results = [rt.register_broker(CLUSTER, A0, "broker-a", 0, A0.replace("10911", "10912"),
                                      body=odd_body(counter, r), now_ms=0)
                   for rt in tables]
        assert results[0] == results[1], (counter, r)
    a, b = tables
    assert a.all_topics() == b.all_topics()
    for topic in a.all_topics():
        assert a._tt.qmap(topic) == b._tt.qmap(topic), topic


def test_deleted_topic_comes_back_with_unchanged_version(RT):
    # 5.x isTopicConfigChanged: a topic without this broker's queue data is applied
    rt = RT()
    reg(rt)
    rt.delete_topic("T1")
    assert rt.topic_route("T1") is None
    invalidated(rt)
    res = reg(rt)
    assert res["changed"]
    assert invalidated(rt) == {"T1"}
    assert rt.topic_route("T1") is not None


def test_slave_answer_and_topics_from_master_only(RT):
    rt = RT()
    res = reg(rt, ["S1", "S2"], addr=A1, broker_id=1)             # slave first: no master yet
    assert res["masterAddr"] is None and res["haServerAddr"] is None
    assert res["first"] and not res["changed"]
    assert rt.topic_route("S1") is None                     # slaves do not register topics
    reg(rt, ["T1", "T2"], addr=A0, broker_id=0, ha="10.0.0.1:10999")
    res = reg(rt, ["S1"], addr=A1, broker_id=1)
    assert res["masterAddr"] == A0 and res["haServerAddr"] == "10.0.0.1:10999"
    assert rt.topic_route("S1") is None
    assert addrs(rt, "T1") == {"broker-a": {0: A0, 1: A1}}
    # the master's answer never carries addresses
    res = reg(rt, ["T1"], addr=A0, broker_id=0)
    assert res["masterAddr"] is None and res["haServerAddr"] is None


def test_slave_answer_needs_a_live_master(RT):
    rt = RT()
    reg(rt, ["T1", "T2"], addr=A0, broker_id=0, conn="m")
    reg(rt, ["T1", "T2"], addr=A1, broker_id=1, conn="s")
    rt.connection_closed("m")
    res = reg(rt, ["T1"], addr=A1, broker_id=1, conn="s")
    assert res["masterAddr"] is None


def test_slave_joining_invalidates_the_brokers_topics_only(RT):
    rt = RT()
    reg(rt, ["T1", "T2"])
    reg(rt, ["X", "Y"], name="broker-b", addr=B0)
    invalidated(rt)
    reg(rt, ["T1", "T2"], addr=A1, broker_id=1)
    assert invalidated(rt) == {"T1", "T2"}
    reg(rt, ["T1", "T2"], addr=A1, broker_id=1)
    assert invalidated(rt) == set()


def test_new_address_for_the_same_id_replaces_the_old(RT):
    rt = RT()
    reg(rt, ["T1", "T2"], addr=A0, conn="old")
    invalidated(rt)
    res = reg(rt, ["T1", "T2"], addr=A2, conn="new")
    assert not res["first"]
    assert addrs(rt, "T1") == {"broker-a": {0: A2}}
    assert invalidated(rt) == {"T1", "T2"}
    # Java keeps the old address's live entry; it expires without touching the route
    dropped = rt.scan_not_active(200_000)
    assert {d["brokerAddr"] for d in dropped} == {A0, A2}
    old = next(d for d in dropped if d["brokerAddr"] == A0)
    assert old["brokerName"] is None and old["brokerId"] is None and old["conn"] == "old"


def test_slave_promoted_to_master_on_the_same_address(RT):
    rt = RT()
    reg(rt, ["T1", "T2"], addr=A0, broker_id=0)
    reg(rt, ["T1", "T2"], addr=A1, broker_id=1)
    rt.unregister_broker(CLUSTER, A0, "broker-a", 0)
    reg(rt, ["T1", "T2"], addr=A1, broker_id=0, counter=5)
    assert addrs(rt, "T1") == {"broker-a": {0: A1}}
    assert rt.broker_member_group(CLUSTER, "broker-a")["brokerAddrs"] == {0: A1}


def test_higher_state_version_wins_the_id(RT):
    rt = RT()
    reg(rt, ["T1", "T2"], addr=A0, state=5)
    invalidated(rt)
    res = reg(rt, ["T1", "T9"], addr=A2, state=3, counter=9)
    assert res["ignored"]
    assert res["masterAddr"] is None
    assert addrs(rt, "T1") == {"broker-a": {0: A0}}
    assert rt.topic_route("T9") is None
    assert [b["brokerAddr"] for b in rt.live_brokers()] == [A0]
    assert invalidated(rt) == set()
    # an equal or higher stateVersion takes over
    res = reg(rt, ["T1"], addr=A2, state=5)
    assert not res["ignored"]
    assert addrs(rt, "T1") == {"broker-a": {0: A2}}


def test_single_topic_registration_of_an_unknown_broker_fails(RT):
    rt = RT()
    res = reg(rt, ["OnlyOne"])
    assert res["failed"]
    assert rt.topic_route("OnlyOne") is None
    assert rt.cluster_info() == ({}, {})                    # no empty BrokerData left
    assert rt.live_brokers() == []
    # once registered, a single-topic (incremental) registration applies
    reg(rt, ["T1", "T2"], counter=1)
    res = reg(rt, [tc("T1"), tc("T2"), tc("New")][2:], counter=2)
    assert not res["failed"] and res["changed"]
    assert rt.topic_route("New")["queueDatas"] == [qd("broker-a")]


def test_registration_without_body(RT):
    rt = RT()
    res = rt.register_broker(CLUSTER, A0, "broker-a", 0, A0, body=None, now_ms=5)
    assert res["first"]
    assert rt.cluster_info()[0]["broker-a"]["brokerAddrs"] == {0: A0}
    assert rt.live_brokers()[0]["dataVersion"] == {"counter": 0, "stateVersion": 0, "timestamp": 0}
    assert rt.all_topics() == []


def test_delete_topic_with_broker_registration(RT):
    rt = RT()
    reg(rt, ["T1", "T2", "Shared"])
    reg(rt, ["Shared"] + ["X"], name="broker-b", addr=B0)
    reg(rt, ["T1"], counter=2)                              # off: nothing removed
    assert rt.topic_route("T2") is not None
    rt.delete_topic_with_broker_registration = True
    invalidated(rt)
    res = reg(rt, ["T1", "T3"], counter=3)
    assert res["topics_removed"] == 2 and res["topics_changed"] == 1     # T3 new
    assert invalidated(rt) == {"T2", "Shared", "T3"}
    assert rt.topic_route("T2") is None
    assert addrs(rt, "Shared") == {"broker-b": {0: B0}}     # still on broker-b
    # runs on every registration, also with an unchanged DataVersion
    rt.register_topic("Extra", [qd("broker-a")])
    reg(rt, ["T1", "T3"], counter=3)
    assert rt.topic_route("Extra") is None
    # not when the broker reports static-topic mappings
    rt.register_topic("Extra", [qd("broker-a")])
    m = {"T1": {"bname": "broker-a", "topic": "T1", "totalQueues": 4, "epoch": 1}}
    reg(rt, ["T1", "T3"], counter=4, mappings=m)
    assert rt.topic_route("Extra") is not None


def test_filter_servers(RT):
    rt = RT()
    reg(rt, ["T1", "T2"], filters=["10.0.0.1:3000"])
    reg(rt, [], addr=A1, broker_id=1)
    assert rt.topic_route("T1")["filterServerTable"] == {A0: ["10.0.0.1:3000"]}
    invalidated(rt)
    reg(rt, ["T1"], filters=["10.0.0.1:3000"])              # unchanged
    assert invalidated(rt) == set()
    reg(rt, ["T1"], filters=[])                             # an empty list removes them
    assert invalidated(rt) == {"T1", "T2"}
    assert rt.topic_route("T1")["filterServerTable"] == {}


def test_topic_queue_mappings(RT):
    rt = RT()
    info = {"bname": "broker-a", "currIdMap": {"broker-a": 0}, "epoch": 7, "topic": "Static",
            "totalQueues": 4}
    reg(rt, ["Static", "T1"], mappings={"Static": info})
    route = rt.topic_route("Static")
    assert route["topicQueueMappingByBroker"] == {"broker-a": info}
    assert "topicQueueMappingByBroker" not in rt.topic_route("T1")
    info2 = dict(info, epoch=8)
    invalidated(rt)
    reg(rt, ["Static", "T1"], mappings={"Static": info2}, counter=2)
    assert invalidated(rt) == {"Static"}
    assert rt.topic_route("Static")["topicQueueMappingByBroker"]["broker-a"]["epoch"] == 8


def test_broker_data_fields_of_5x_brokers(RT):
    rt = RT()
    reg(rt, ["Old", "Old2"], name="broker-old", addr=B0)            # 4.9 broker: no header
    reg(rt, ["New", "New2"], enable_acting_master=False, zone_name="zone-1")
    (old,) = rt.topic_route("Old")["brokerDatas"]
    (new,) = rt.topic_route("New")["brokerDatas"]
    # Java 5.x writes enableActingMaster always (false when the broker did not declare
    # it), zoneName only when the broker sent one
    assert old["enableActingMaster"] is False and "zoneName" not in old
    assert new["enableActingMaster"] is False and new["zoneName"] == "zone-1"
    invalidated(rt)
    reg(rt, ["New"], enable_acting_master=False, zone_name="zone-2")
    assert invalidated(rt) == {"New", "New2"}
    assert rt.cluster_info()[0]["broker-a"]["zoneName"] == "zone-2"


# ---------------------------------------------------------------- acting master (5.x)

def test_prime_slave_registers_read_only_topics(RT):
    rt = RT()
    res = reg(rt, ["T1", "T2"], addr=A1, broker_id=1, enable_acting_master=True)
    assert res["changed"]
    assert perms(rt, "T1") == {"broker-a": 4}               # PERM_WRITE wiped
    rt2 = RT()
    reg(rt2, ["T1", "T2"], addr=A1, broker_id=1, enable_acting_master=False)
    assert perms(rt2, "T1") == {"broker-a": 6}              # prime slave, not acting master
    rt3 = RT()
    reg(rt3, ["T1", "T2"], addr=A1, broker_id=1)            # old broker: never a prime slave
    assert rt3.topic_route("T1") is None
    # a slave that is not the smallest id is no prime slave
    reg(rt, ["T1", "T3"], addr=A2, broker_id=2, enable_acting_master=True, counter=3)
    assert rt.topic_route("T3") is None


def test_master_unregistered_wipes_write_perm_and_acting_master_route(RT):
    rt = RT()
    for broker_id, addr in ((0, A0), (1, A1), (2, A2)):
        reg(rt, ["T1", "T2"], addr=addr, broker_id=broker_id, enable_acting_master=True)
    assert perms(rt, "T1") == {"broker-a": 6}
    invalidated(rt)
    assert rt.unregister_broker(CLUSTER, A0, "broker-a", 0)
    assert invalidated(rt) == {"T1", "T2"}
    assert perms(rt, "T1") == {"broker-a": 4}
    assert addrs(rt, "T1") == {"broker-a": {1: A1, 2: A2}}  # without supportActingMaster
    rt.support_acting_master = True
    assert invalidated(rt) == {"T1", "T2"}          # every route may change
    assert addrs(rt, "T1") == {"broker-a": {0: A1, 2: A2}}
    # the table itself is untouched
    assert rt.cluster_info()[0]["broker-a"]["brokerAddrs"] == {1: A1, 2: A2}
    # member-group sync topics are never rewritten
    rt.register_topic("rmq_sys_SYNC_BROKER_MEMBER_broker-a", [qd("broker-a", perm=4)])
    assert addrs(rt, "rmq_sys_SYNC_BROKER_MEMBER_broker-a") == {"broker-a": {1: A1, 2: A2}}
    # a writeable queue keeps the real ids
    rt.add_write_perm("broker-a")
    assert addrs(rt, "T1") == {"broker-a": {1: A1, 2: A2}}


def test_master_unregistered_without_acting_master_keeps_perm(RT):
    rt = RT(support_acting_master=True)
    reg(rt, ["T1", "T2"], addr=A0, broker_id=0)
    reg(rt, ["T1", "T2"], addr=A1, broker_id=1)
    rt.unregister_broker(CLUSTER, A0, "broker-a", 0)
    assert perms(rt, "T1") == {"broker-a": 6}
    assert addrs(rt, "T1") == {"broker-a": {1: A1}}


# ---------------------------------------------------------------- unregister / liveness

def test_unregister_cleans_up(RT):
    rt = RT()
    reg(rt, ["T1", "Shared"], addr=A0)
    reg(rt, ["T1", "Shared"], addr=A1, broker_id=1)
    reg(rt, ["X", "Shared"], name="broker-b", addr=B0, cluster="Other")
    invalidated(rt)
    assert rt.unregister_broker(CLUSTER, A1, "broker-a", 1)
    assert invalidated(rt) == {"T1", "Shared"}
    assert addrs(rt, "T1") == {"broker-a": {0: A0}}
    assert rt.unregister_broker(CLUSTER, A0, "broker-a", 0)
    assert rt.topic_route("T1") is None
    assert addrs(rt, "Shared") == {"broker-b": {0: B0}}
    assert rt.cluster_info() == (
        {"broker-b": {"brokerAddrs": {0: B0}, "brokerName": "broker-b", "cluster": "Other",
                      "enableActingMaster": False}},
        {"Other": ["broker-b"]})
    assert not rt.unregister_broker(CLUSTER, A0, "broker-a", 0)
    assert rt.unregister_broker("Other", B0, "broker-b", 0)
    assert rt.cluster_info() == ({}, {})
    assert rt.all_topics() == [] and rt.live_brokers() == []
    assert rt.system_topics() == ([], None)


def test_scan_not_active_uses_each_brokers_timeout(RT):
    rt = RT()
    reg(rt, ["T1", "T2"], now=1_000, conn="a")                                  # default 120 s
    reg(rt, ["X", "Y"], name="broker-b", addr=B0, now=1_000, timeout_ms=10_000, conn="b")
    assert rt.scan_not_active(11_000) == []                 # last + timeout == now: kept
    invalidated(rt)
    dropped = rt.scan_not_active(11_001)
    assert dropped == [{"cluster": CLUSTER, "brokerName": "broker-b", "brokerAddr": B0,
                        "brokerId": 0, "reason": "expired", "conn": "b"}]
    assert invalidated(rt) == {"X", "Y"}
    assert rt.topic_route("X") is None
    rt.heartbeat(CLUSTER, A0, now_ms=100_000)
    assert rt.scan_not_active(200_000) == []
    changed, stored = rt.query_data_version(CLUSTER, A0, "broker-a", 0,
                                            {"counter": 1, "timestamp": 1000}, now_ms=210_000)
    assert (changed, stored) == (False, {"counter": 1, "stateVersion": 0, "timestamp": 1000})
    assert rt.scan_not_active(330_000) == []
    assert [d["brokerAddr"] for d in rt.scan_not_active(330_001)] == [A0]
    assert rt.cluster_info() == ({}, {})


def test_connection_closed(RT):
    rt = RT()
    reg(rt, ["T1", "T2"], conn="c1")
    reg(rt, [], addr=A1, broker_id=1, conn="c1")
    reg(rt, ["X", "Y"], name="broker-b", addr=B0, conn="c2")
    invalidated(rt)
    assert rt.connection_closed("nobody") == []
    dropped = rt.connection_closed("c1")
    assert sorted((d["brokerAddr"], d["brokerId"], d["reason"]) for d in dropped) == [
        (A0, 0, "connection closed"), (A1, 1, "connection closed")]
    assert invalidated(rt) == {"T1", "T2"}
    assert rt.topic_route("T1") is None
    assert rt.topic_route("X") is not None
    # re-registration over a new connection moves the broker to it
    reg(rt, ["X"], name="broker-b", addr=B0, conn="c3")
    assert rt.connection_closed("c2") == []


def test_query_data_version(RT):
    rt = RT()
    assert rt.query_data_version(CLUSTER, A0, "broker-a", 0, {"counter": 1},
                                 now_ms=1) == (True, None)
    reg(rt, counter=3, timestamp=77)
    assert rt.query_data_version(CLUSTER, A0, "broker-a", 0,
                                 {"counter": 3, "timestamp": 77, "stateVersion": 0}, now_ms=2) == (
        False, {"counter": 3, "stateVersion": 0, "timestamp": 77})
    changed, stored = rt.query_data_version(CLUSTER, A0, "broker-a", 0,
                                            {"counter": 4, "timestamp": 77}, now_ms=3)
    assert changed and stored["counter"] == 3
    assert rt.query_data_version("OtherCluster", A0, "broker-a", 0,
                                 {"counter": 3, "timestamp": 77}, now_ms=4) == (True, None)
    assert rt.live_brokers()[0]["lastUpdateTimestamp"] == 3


def test_live_brokers(RT):
    rt = RT()
    reg(rt, now=5, timeout_ms=30_000, counter=2, timestamp=9)
    assert rt.live_brokers() == [{
        "brokerAddr": A0, "cluster": CLUSTER, "lastUpdateTimestamp": 5, "timeoutMillis": 30_000,
        "haServerAddr": "10.0.0.1:10912",
        "dataVersion": {"counter": 2, "stateVersion": 0, "timestamp": 9}}]
    reg(rt, now=6, timeout_ms=None, counter=2, timestamp=9)
    assert rt.live_brokers()[0]["timeoutMillis"] == 120_000


# ---------------------------------------------------------------- admin operations

def test_wipe_and_add_write_perm(RT):
    rt = RT()
    reg(rt, [tc("T1", perm=6), tc("T2", perm=7), tc("RO", perm=4)])
    reg(rt, ["T1", "Z"], name="broker-b", addr=B0)
    invalidated(rt)
    assert rt.wipe_write_perm("broker-a") == 3              # every topic counts
    assert invalidated(rt) == {"T1", "T2"}          # RO did not change
    assert perms(rt, "T1") == {"broker-a": 4, "broker-b": 6}
    assert perms(rt, "T2") == {"broker-a": 5}
    assert rt.add_write_perm("broker-a") == 3
    assert perms(rt, "T2") == {"broker-a": 6}               # PERM_READ|PERM_WRITE, inherit gone
    assert perms(rt, "RO") == {"broker-a": 6}
    assert rt.wipe_write_perm("nobody") == 0 and rt.add_write_perm("nobody") == 0


def test_delete_topic(RT):
    rt = RT()
    reg(rt, ["T1", "T2"])
    reg(rt, ["T1", "Z"], name="broker-b", addr=B0, cluster="Other")
    invalidated(rt)
    rt.delete_topic("T1", "NoSuchCluster")
    assert invalidated(rt) == set()
    rt.delete_topic("T1", CLUSTER)
    assert invalidated(rt) == {"T1"}
    assert addrs(rt, "T1") == {"broker-b": {0: B0}}
    rt.delete_topic("T1", "Other")
    assert rt.topic_route("T1") is None
    rt.delete_topic("T2")
    assert rt.all_topics() == ["Z"]
    rt.delete_topic("T2")                                   # absent: no-op
    assert invalidated(rt) == {"T1", "T2"}


def test_register_topic(RT):
    rt = RT()
    reg(rt, ["T1", "T2"])
    reg(rt, ["X", "Y"], name="broker-b", addr=B0)
    invalidated(rt)
    rt.register_topic("New", [qd("broker-a", 2, 2), qd("broker-b", 3, 3)])
    assert invalidated(rt) == {"New"}
    assert {q["brokerName"]: q["readQueueNums"] for q in rt.topic_route("New")["queueDatas"]} == {
        "broker-a": 2, "broker-b": 3}
    rt.register_topic("Bad", [qd("broker-a"), qd("ghost")])     # new topic: all or nothing
    assert rt.topic_route("Bad") is None
    rt.register_topic("T1", [qd("broker-b", 5, 5), qd("ghost")])  # existing: applied up to ghost
    assert perms(rt, "T1") == {"broker-a": 6, "broker-b": 6}
    rt.register_topic("Legacy", [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 1,
                                  "writeQueueNums": 1, "topicSynFlag": 1}])
    assert rt.unit_topics() == ["Legacy"]
    rt.register_topic("Empty", [])
    assert rt.topic_route("Empty") is None


def test_unit_topic_lists(RT):
    rt = RT()
    reg(rt, [tc("Plain"), tc("Unit", flag=1), tc("UnitSub", flag=2), tc("Both", flag=3)])
    assert sorted(rt.unit_topics()) == ["Both", "Unit"]
    assert sorted(rt.has_unit_sub_topics()) == ["Both", "UnitSub"]
    assert rt.has_unit_sub_ununit_topics() == ["UnitSub"]


def test_topic_and_system_lists(RT):
    rt = RT()
    reg(rt, ["T1", "Shared"])
    reg(rt, [], addr=A1, broker_id=1)
    reg(rt, ["Y", "Shared"], name="broker-b", addr=B0, cluster="C2")
    assert sorted(rt.topics_by_cluster(CLUSTER)) == ["Shared", "T1"]
    assert sorted(rt.topics_by_cluster("C2")) == ["Shared", "Y"]
    assert rt.topics_by_cluster("nope") == []
    topics, addr = rt.system_topics()
    assert sorted(topics) == sorted([CLUSTER, "C2", "broker-a", "broker-b"])
    assert addr in (A0, B0)
    info = rt.cluster_info()
    assert info[1] == {CLUSTER: ["broker-a"], "C2": ["broker-b"]}
    assert info[0]["broker-a"]["brokerAddrs"] == {0: A0, 1: A1}
    assert rt.broker_member_group(CLUSTER, "broker-a") == {
        "cluster": CLUSTER, "brokerName": "broker-a", "brokerAddrs": {0: A0, 1: A1}}
    assert rt.broker_member_group(CLUSTER, "nope") == {
        "cluster": CLUSTER, "brokerName": "nope", "brokerAddrs": {}}


def test_invalidations_accumulate(RT):
    rt = RT()
    reg(rt, ["T1", "T2"])
    reg(rt, ["X", "Y"], name="broker-b", addr=B0)
    rt.wipe_write_perm("broker-b")
    assert invalidated(rt) == {"T1", "T2", "X", "Y"}
    assert invalidated(rt) == set()
    rt.support_acting_master = False                        # unchanged: nothing
    assert invalidated(rt) == set()
    rt.support_acting_master = True
    reg(rt, ["T1", "T2"], counter=2)
    assert invalidated(rt) == {"T1", "T2", "X", "Y"}   # "everything" absorbs the rest
    assert invalidated(rt) == set()


# ---------------------------------------------------------------- route answers

def _both_forms(rt, topic):
    return rt.route_body(topic), rt.route_body(topic, legacy=True)


def test_route_body_is_the_encoded_route_in_both_forms(RT):
    rt = RT()
    reg(rt, ["T1", "T2"])
    reg(rt, ["T1"], name="broker-b", addr=B0)
    for topic in ("T1", "T2"):
        route = rt.topic_route(topic)
        assert _both_forms(rt, topic) == (
            bodies.encode_topic_route_data(route),
            bodies.encode_topic_route_data(route, legacy=True))
    assert rt.route_body("Nope") is None and rt.route_body("Nope", legacy=True) is None
    assert rt.cached_topics() == rt.cached_topics(legacy=True) == {"T1", "T2"}


def test_route_bodies_agree_across_implementations(RT):
    """Many brokers (past Java's HashMap resize at 12), slaves, 5.x fields, zones,
    non-ASCII names: the answers equal the reference's byte for byte."""
    tables = (RT(), route_table(load_fallback())())
    for rt in tables:
        for i in range(14):
            name = f"broker-{i}" if i % 5 else f"brøker-{i}"
            kw = {"enable_acting_master": False, "zone_name": "z1"} if i % 3 == 0 else {}
            reg(rt, ["Shared", f"Own{i}", "Tö"], name=name, addr=f"10.0.2.{i}:10911", **kw)
            if i % 4 == 0:
                reg(rt, ["Shared"], name=name, addr=f"10.0.3.{i}:10911", broker_id=1, **kw)
        rt.wipe_write_perm("broker-2")
    a, b = tables
    assert a.all_topics() == b.all_topics()
    for topic in a.all_topics():
        assert _both_forms(a, topic) == _both_forms(b, topic), topic


def test_wide_registrations_changing_some_topics_agree_across_implementations(RT):
    """Registrations walk their topics with lookups run ahead (routetable.c): wide
    topics (an index per topic past 8 brokers), re-registrations where only some
    records change (the others skipped), new topics among them; the tables equal
    the reference's, answer for answer."""
    import random
    rng = random.Random(3)
    topics = [f"W{i}" for i in range(300)]
    tables = (RT(), route_table(load_fallback())())
    for rt in tables:
        for i in range(24):
            reg(rt, topics, name=f"broker-{i}", addr=f"10.0.4.{i}:10911")
    for rnd in range(2, 8):
        i = rng.randrange(24)
        configs = [tc(t, r=rng.choice((4, 4, 4, 8)), w=4) for t in topics]
        configs += [tc(f"New{rnd}-{k}") for k in range(rng.randrange(40))]
        rng.shuffle(configs)
        results = [reg(rt, configs, name=f"broker-{i}", addr=f"10.0.4.{i}:10911", counter=rnd)
                   for rt in tables]
        assert results[0] == results[1]
    a, b = tables
    assert a.all_topics() == b.all_topics()
    for topic in a.all_topics():
        assert a._tt.qmap(topic) == b._tt.qmap(topic), topic
        assert _both_forms(a, topic) == _both_forms(b, topic), topic


def test_forget_route(RT):
    rt = RT()
    reg(rt, ["T1", "T2"])
    invalidated(rt)
    rt.forget_route("T1")
    assert invalidated(rt) == {"T1"}
    rt.forget_route()
    assert invalidated(rt) == {"T1", "T2"}


def test_order_topic_conf_in_answers(RT):
    rt = RT()
    reg(rt, ["T1", "T2"])
    plain = rt.route_body("T1")
    conf = {"T1": "broker-a:4"}
    rt.order_topic_conf = conf.get
    assert invalidated(rt) == {"T1", "T2"}
    route = rt.topic_route("T1")
    route["orderTopicConf"] = "broker-a:4"
    assert rt.route_body("T1") == bodies.encode_topic_route_data(route)
    assert rt.route_body("T2") == bodies.encode_topic_route_data(rt.topic_route("T2"))
    rt.order_topic_conf = None
    assert rt.route_body("T1") == plain


def test_registration_from_raw_bytes_equals_decoded(RT):
    raw, decoded = RT(), RT()
    topics = [tc(f"T{i}", r=i % 7 + 1, perm=(6, 4, 2)[i % 3], flag=i % 4) for i in range(50)]
    b = body(topics, counter=7, timestamp=123)
    for compressed in (False, True):
        data = bodies.encode_register_broker_body(b, compressed=compressed)
        r1 = raw.register_broker(CLUSTER, A0, "broker-a", 0, "ha", body=data, now_ms=5)
        r2 = decoded.register_broker(CLUSTER, A0, "broker-a", 0, "ha", body=b, now_ms=5)
        assert r1 == r2
        assert raw.all_topics() == decoded.all_topics()
        for topic in raw.all_topics():
            assert raw.topic_route(topic) == decoded.topic_route(topic)
        assert raw.live_brokers() == decoded.live_brokers()


def test_registration_from_a_view_of_the_body_equals_bytes(RT):
    # (the I/O engine hands a registration's body over as a read-only view of the
    # frame; a view that could change, of a bytearray, is read from a copy)
    topics = [tc(f"T{i}", r=i % 7 + 1) for i in range(50)]
    for compressed in (False, True):
        data = bodies.encode_register_broker_body(body(topics, counter=7), compressed=compressed)
        frame = bytearray(b"head" + data)
        for view in (memoryview(bytes(frame))[4:], memoryview(frame)[4:]):
            from_bytes, from_view = RT(), RT()
            r1 = from_bytes.register_broker(CLUSTER, A0, "broker-a", 0, "ha", body=data, now_ms=5)
            r2 = from_view.register_broker(CLUSTER, A0, "broker-a", 0, "ha", body=view, now_ms=5)
            frame[4:] = bytes(len(data))            # after: the table is not the view's
            assert r1 == r2
            assert from_view.all_topics() == from_bytes.all_topics()
            for topic in from_bytes.all_topics():
                assert from_view.topic_route(topic) == from_bytes.topic_route(topic)
            frame[4:] = data


def test_a_large_broker_dropped_leaves_nothing_of_its_topics_in_the_topic_order(RT):
    # What the 5.0.0 order model kept of a million dropped topics (their placings by
    # a resize; their hashes were cached too, until the core computed them) held every
    # byte their registration took (bench/hardening.py bigbroker)
    rt = RT()
    reg(rt, [f"Big-{i}" for i in range(20_000)], name="big", addr=A1, conn="big")
    reg(rt, ["T1", "T2", "T3"], conn="small")
    order_of_small = [t for t in rt.all_topics() if not t.startswith("Big-")]
    big = {s for s, t in rt._tt.topic_seqs() if t.startswith("Big-")}
    assert big & set(rt._topic_order._placed)           # placings made by resizes
    rt.connection_closed("big")
    assert not big & set(rt._topic_order._placed)
    assert rt.all_topics() == order_of_small


def test_topic_hashes_are_the_topics_numbers_and_java_hashes_in_insertion_order(RT):
    # what the topic order's replay reads of every topic (no name made in Python)
    from rmq.javaorder import java_spread_hash
    rt = RT()
    names = [f"T{i}" for i in range(300)] + ["t\u00e9", "\u4e2d", "\U0001d11ez", "x\ud800"]
    reg(rt, names, conn="a")
    reg(rt, ["T5", "New"], name="broker-b", addr=A1, conn="b")
    rt.connection_closed("a")
    reg(rt, ["T7", "T9"], conn="a2", counter=2)           # back: new numbers
    seqs, hashes = rt._tt.topic_hashes()
    listed = rt._tt.topic_seqs()
    assert (seqs.typecode, hashes.typecode) == ("Q", "I")
    assert list(seqs) == [s for s, _ in listed] == sorted(seqs)
    assert list(hashes) == [java_spread_hash(t) for _, t in listed]
    assert [t for _, t in listed] == ["T5", "New", "T7", "T9"]


@pytest.mark.once                   # (the compiled core's pool, whichever pass)
def test_a_registrations_records_come_from_the_buffer_pool_and_go_back():
    # 8,000 topics: 384 KB of scanned records, a big buffer (bufpool.c): reused by the
    # next registration, not mapped afresh; freed once idle
    import time
    from rmq import brokersim
    core = load_compiled()
    core._buffer_pool_trim(time.monotonic() + 3600)     # none left by earlier tests
    assert core._buffer_pool_stats() == (0, 0)
    rt = route_table(core)()
    topics = [f"Pooled-{i}" for i in range(8000)]
    for counter in (1, 2, 3):
        rt.register_broker(CLUSTER, A0, "broker-a", 0, "ha", now_ms=0,
                           body=brokersim.encode_body(topics, counter))
        buffers, nbytes = core._buffer_pool_stats()
        assert buffers == 1 and nbytes >= 8000 * 48, (counter, buffers, nbytes)
    assert len(rt.all_topics()) == 8000
    core._buffer_pool_trim(time.monotonic() + 3600)
    assert core._buffer_pool_stats() == (0, 0)


def test_bad_raw_body_changes_nothing(RT):
    rt = RT()
    reg(rt, ["T1"] * 1 + ["T2"])
    before = (rt.all_topics(), rt.live_brokers(), rt.version)
    for data in (b"{", b"[]", b'{"topicConfigSerializeWrapper":{"topicConfigTable":'
                              b'{"X":{"perm":1.5}}}}'):
        with pytest.raises(rmq.errors.BodyError):
            rt.register_broker(CLUSTER, A0, "broker-a", 0, "ha", body=data, now_ms=1)
    assert (rt.all_topics(), rt.live_brokers(), rt.version) == before


def test_routes_while_registering_from_another_thread(RT):
    """A writer thread re-registering with new DataVersions while this thread reads
    answers: every answer is one the table could give (the broker's topics with
    queue numbers of some registration), and nothing deadlocks."""
    import threading
    rt = RT()
    names = [f"T{i}" for i in range(300)]
    reg(rt, names, counter=0)
    valid = set()
    for n in range(0, 41):
        probe = RT()
        reg(probe, [tc(t, r=n % 8 + 1) for t in names], counter=n)
        valid.add(last := probe.route_body("T7"))
    reg(rt, [tc(t, r=1) for t in names], counter=0)
    done = threading.Event()

    def writer():
        for n in range(1, 41):
            reg(rt, [tc(t, r=n % 8 + 1) for t in names], counter=n)
        done.set()

    t = threading.Thread(target=writer)
    t.start()
    seen = 0
    while not done.is_set() or seen == 0:
        assert rt.route_body("T7") in valid
        seen += 1
    t.join()
    assert rt.route_body("T7") == last


@pytest.fixture
def CRT():
    """The compiled RouteTable only: the table lock is for its writer thread."""
    _core = pytest.importorskip("rmq._core", reason="rmq._core is not built")
    return route_table(_core)


class _Holder:
    """Holds a table's lock from another thread until released."""

    def __init__(self, rt, mode):
        import threading
        self.held, self.go = threading.Event(), threading.Event()
        acquire, release = ((rt._lock.acquire_write, rt._lock.release_write) if mode == "w"
                            else (rt._lock.acquire_read, rt._lock.release_read))

        def hold():
            acquire()
            self.held.set()
            self.go.wait(10)
            release()
        self.thread = threading.Thread(target=hold, daemon=True)
        self.thread.start()
        assert self.held.wait(5)

    def release(self):
        self.go.set()
        self.thread.join(5)


def _in_thread(fn):
    import threading
    out = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    return t, out


_READERS = {
    "cluster_info": lambda rt: rt.cluster_info(),
    "topic_route": lambda rt: rt.topic_route("T1"),
    "all_topics": lambda rt: rt.all_topics(),
    "topics_by_cluster": lambda rt: rt.topics_by_cluster(CLUSTER),
    "system_topics": lambda rt: rt.system_topics(),
    "live_brokers": lambda rt: rt.live_brokers(),
    "broker_member_group": lambda rt: rt.broker_member_group(CLUSTER, "broker-a"),
    "unit_topics": lambda rt: rt.unit_topics(),
    "built_route": lambda rt: rt.route_body("T2"),     # filter servers: built in Python
}


@pytest.mark.parametrize("reader", sorted(_READERS))
def test_readers_of_the_cold_tables_wait_for_the_writer(CRT, reader):
    """What Java reads under RouteInfoManager's read lock waits while a writer holds
    the table lock, then answers from the finished change."""
    rt = CRT()
    reg(rt, ["T1", "T2"], filters=["10.0.0.9:1"])
    rt.forget_route()
    holder = _Holder(rt, "w")
    t, out = _in_thread(lambda: _READERS[reader](rt))
    t.join(0.2)
    assert t.is_alive() and not out
    holder.release()
    t.join(5)
    assert out and out[0] == _READERS[reader](rt)


def test_cached_route_answers_do_not_wait_for_the_writer(CRT):
    rt = CRT()
    reg(rt, ["T1"])
    answer = rt.route_body("T1")
    holder = _Holder(rt, "w")
    try:
        t, out = _in_thread(lambda: rt.route_body("T1"))
        t.join(5)
        assert out == [answer]
    finally:
        holder.release()


def test_writers_wait_for_readers_and_new_readers_wait_for_a_waiting_writer(CRT):
    """Writer-preferring: a stream of readers cannot starve a registration."""
    rt = CRT()
    reg(rt, ["T1"])
    reader = _Holder(rt, "r")
    w, wout = _in_thread(lambda: reg(rt, ["T1", "T3"], counter=2))
    w.join(0.2)
    assert w.is_alive()                         # the registration waits for the reader
    r, rout = _in_thread(lambda: rt.all_topics())
    r.join(0.2)
    assert r.is_alive()                         # a new reader waits behind the writer
    reader.release()
    w.join(5)
    r.join(5)
    assert wout[0]["changed"] and "T3" in rout[0]   # the reader saw the registration


def test_readers_that_waited_through_a_write_go_in_before_the_next_writer(CRT):
    """A registration applied in slices takes the table's lock again at once (routes.pxi,
    APPLY_SLICE): the readers that waited through one write go in before the next, so
    a route query waits for one slice at most, not for the whole registration."""
    rt = CRT()
    reg(rt, ["T1"])
    holder = _Holder(rt, "w")
    r, rout = _in_thread(lambda: rt.all_topics())
    r.join(0.2)
    assert r.is_alive()                         # waits for the writer
    w, wout = _in_thread(lambda: reg(rt, ["T1", "T3"], counter=2))
    w.join(0.2)
    assert w.is_alive()                         # the next writer waits too
    holder.release()
    r.join(5)
    w.join(5)
    assert "T3" not in rout[0]                  # the reader went first
    assert wout[0]["changed"] and "T3" in rt.all_topics()


def test_table_lock_is_reentrant_but_a_reader_cannot_become_the_writer(CRT):
    rt = CRT()
    lock = rt._lock
    lock.acquire_write()
    lock.acquire_read()                         # the writer may read
    lock.acquire_write()
    assert lock.state[0] != 0
    lock.release_write()
    lock.release_read()
    lock.release_write()
    assert lock.state == (0, 0)
    holder = _Holder(rt, "w")                   # a reader re-reading with a writer waiting
    holder.release()
    lock.acquire_read()
    w, _ = _in_thread(lambda: reg(rt, ["T1"]))
    w.join(0.1)
    lock.acquire_read()                         # would deadlock if not reentrant
    lock.release_read()
    with pytest.raises(RuntimeError, match="reader cannot become"):
        lock.acquire_write()
    lock.release_read()
    w.join(5)
    assert not w.is_alive() and lock.state == (0, 0)


def test_a_bad_body_is_refused_without_waiting_for_the_lock(CRT):
    """The body is read before the table lock is taken."""
    rt = CRT()
    holder = _Holder(rt, "r")
    try:
        t, out = _in_thread(lambda: pytest.raises(
            rmq.errors.BodyError, rt.register_broker, CLUSTER, A0, "broker-a", 0, "ha",
            body=b"{", now_ms=1))
        t.join(5)
        assert out and out[0].type is rmq.errors.BodyError
    finally:
        holder.release()


def test_cluster_info_is_consistent_while_brokers_come_and_go(CRT):
    """Readers never see half a registration: every cluster's broker names are in
    the broker table, and each broker has an address."""
    import threading
    rt = CRT()
    stop = threading.Event()

    def churn():
        i = 0
        while not stop.is_set():
            name = f"broker-{i % 7}"
            addr = f"10.0.{i % 7}.1:10911"
            cluster = f"c{i % 7 % 3}"
            reg(rt, [f"T{j}" for j in range(20)], name=name, addr=addr, cluster=cluster,
                counter=i)
            if i % 2:
                rt.unregister_broker(cluster, addr, name, 0)
            i += 1

    t = threading.Thread(target=churn, daemon=True)
    t.start()
    try:
        for _ in range(3000):
            brokers, clusters = rt.cluster_info()
            for names in clusters.values():
                assert set(names) <= set(brokers)
            for bd in brokers.values():
                assert bd["brokerAddrs"]
    finally:
        stop.set()
        t.join(10)


def test_java_hash_order():
    topics = ["TBW102", "DefaultCluster", "broker-a", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
              "BenchmarkTest", "SCHEDULE_TOPIC_XXXX", "DefaultCluster_REPLY_TOPIC", "TopicTest"]
    frame = vector_bytes("206_get_all_topic_list_from_nameserver_response.bin")
    vector = bodies.decode_topic_list(rmq.decode_frame(frame).body)[0]
    assert ref.java_hash_order(ref.java_hash_order(topics, 1024)) == vector
    assert ref.java_hash_order(["DefaultCluster", "broker-a"]) == ["broker-a", "DefaultCluster"]


# Captured from the JDK (OpenJDK 17): String.hashCode of these strings, and the
# iteration order of a HashMap<String, _> filled in the given order, as indexes into it.
# The program, run with `java Order.java`:
#     Map<String, Integer> m = new HashMap<>();
#     for (String n : names) m.put(n, 1);
#     for (String k : m.keySet()) System.out.print(names.indexOf(k) + ",");
JDK_HASH_CODES = {"": 0, "Aa": 2112, "BB": 2112, "abc": 96354, "hello": 99162322,
                  "polygenelubricants": -2147483648, "\U0001F600-b": 1703757432,
                  "DefaultCluster": 1874216089, "broker-a": 372697965,
                  "br\u00f8ker-\u00fc": -75489}
JDK_NAMES = ([f"broker-{i * 7919 % 1000}" for i in range(39, -1, -1)]
             + ["br\u00f8ker-\u00fc", "\U0001F600-b", "Aa", "BB"])
JDK_HASHMAP_ORDER = [37, 42, 43, 38, 16, 35, 2, 32, 14, 39, 11, 17, 36, 33, 12, 20, 4, 3, 21, 27,
                     19, 7, 26, 40, 0, 8, 5, 24, 22, 1, 6, 25, 23, 28, 30, 9, 15, 34, 31, 41, 13,
                     10, 18, 29]


def test_java_hash_order_is_the_jdks():
    """An outside oracle for both storages' Java order (the reference's java_hash_order,
    the core's rt_java_order): String.hashCode over UTF-16 units, and a HashMap's order
    past two resizes (44 keys: 16, 32, then 64 buckets)."""
    from rmq.javaorder import java_spread_hash
    for text, code in JDK_HASH_CODES.items():
        h = code & 0xFFFFFFFF
        assert java_spread_hash(text) == h ^ (h >> 16), text
    assert ref.java_hash_order(JDK_NAMES) == [JDK_NAMES[i] for i in JDK_HASHMAP_ORDER]


#: 5.x pickupTopicRouteData, on the JDK (OpenJDK 17): n brokers register a topic in the
#: order broker-{i * 7919 % 1000} for i = n-1..0; queueDatas come in the order of the
#: topic's HashMap<brokerName, QueueData>, as indexes into the registration order.
#: brokerDatas follow new HashSet<>(its keySet()): the same order but at n = 12, 24,
#: 48...: there the HashSet's table is twice the map's on JDK 8 to 18 ((int) (n / .75f)
#: + 1 buckets; test_javaorder.JDK17_ROUTE_BROKER_ORDER), the JDKs RocketMQ 5.0.0 runs
#: on; from JDK 19 (HashMap.newHashMap) it is the map's order.
JDK_ROUTE_ORDER = {
    11: [8, 1, 5, 9, 2, 6, 3, 10, 7, 0, 4],
    12: [9, 2, 6, 10, 3, 7, 4, 11, 8, 1, 5, 0],
    13: [10, 11, 8, 5, 12, 9, 6, 1, 3, 7, 4, 0, 2],
    24: [21, 10, 22, 0, 19, 8, 16, 6, 23, 1, 20, 9, 17, 7, 12, 14, 4, 18, 15, 5, 2, 11, 13, 3],
    25: [22, 23, 1, 20, 17, 24, 2, 21, 18, 5, 6, 12, 4, 11, 9, 7, 10, 8, 13, 15, 0, 19, 16,
         3, 14],
}


def _many_brokers(n):
    return [f"broker-{i * 7919 % 1000}" for i in range(n - 1, -1, -1)]


@pytest.mark.parametrize("n", sorted(JDK_ROUTE_ORDER))
def test_route_order_of_many_brokers_is_the_jdks(RT, n):
    rt = RT()
    names = _many_brokers(n)
    for j, name in enumerate(names):
        reg(rt, ["Shared", f"Own{j}"], name=name, addr=f"10.1.0.{j}:10911")
    route = rt.topic_route("Shared")
    broker_order = JDK17_ROUTE_BROKER_ORDER.get(n, JDK_ROUTE_ORDER[n])
    assert [q["brokerName"] for q in route["queueDatas"]] == [names[i] for i in JDK_ROUTE_ORDER[n]]
    assert [bd["brokerName"] for bd in route["brokerDatas"]] == [names[i] for i in broker_order]
    for legacy in (False, True):        # the compiled core's own answers, cached ones too
        for _ in range(2):
            assert bodies.decode_topic_route_data(rt.route_body("Shared", legacy)) == \
                bodies.decode_topic_route_data(
                    bodies.encode_topic_route_data(route, legacy=legacy))


def _route_history(rt, history):
    """Apply ``history`` (("put"|"remove", brokerName)) to topic "Shared" of ``rt``: a
    put registers the broker, a remove unregisters it."""
    for op, name in history:
        j = int(name.rpartition("-")[2])
        addr = f"10.1.{j // 250}.{j % 250}:10911"
        if op == "put":
            reg(rt, ["Shared", f"Own{j}"], name=name, addr=addr)
        else:
            rt.unregister_broker(CLUSTER, addr, name, 0)


@pytest.mark.parametrize("history", [
    # 13 brokers, then 3 leave: the map keeps its 32 buckets (a new one would have 16)
    [("put", f"broker-{i}") for i in range(13)] + [("remove", f"broker-{i}") for i in (4, 7, 9)],
    # 25 down to 12, then 2 more come: 64 buckets; the HashSet copy has 32
    [("put", f"broker-{i}") for i in range(25)] + [("remove", f"broker-{i}") for i in range(13)]
    + [("put", f"broker-{i}") for i in (3, 40)],
    # 12 brokers: the map's 16 buckets, the copy's 32; one leaves and comes back
    [("put", f"broker-{i * 37}") for i in range(12)] + [("remove", "broker-74"),
                                                        ("put", "broker-74")],
])
def test_route_order_follows_the_maps_history(RT, history):
    """queueDatas in the order of a HashMap that once held more (its table never
    shrinks), brokerDatas in that of the HashSet copy, on both implementations:
    javaorder.java_route_orders (checked against the JDK in test_javaorder) says
    which."""
    rt = RT()
    _route_history(rt, history)
    queue_datas, broker_datas = java_route_orders(history, jdk=17)
    route = rt.topic_route("Shared")
    assert [q["brokerName"] for q in route["queueDatas"]] == queue_datas
    assert [bd["brokerName"] for bd in route["brokerDatas"]] == broker_datas
    for legacy in (False, True):
        assert bodies.decode_topic_route_data(rt.route_body("Shared", legacy)) == \
            bodies.decode_topic_route_data(bodies.encode_topic_route_data(route, legacy=legacy))


def test_route_order_of_random_histories(RT):
    """Random put/remove histories of 1 to 50 brokers on one topic (sizes around 12,
    24 and 48 included), both implementations against java_route_orders."""
    rng = random.Random(29)
    for _ in range(40):
        pool = [f"broker-{rng.randrange(1000)}" for _ in range(rng.randint(1, 50))]
        present, history = set(), []
        for _ in range(rng.randint(1, 80)):
            name = rng.choice(pool)
            op = "remove" if name in present and rng.random() < 0.4 else "put"
            if op == "put" and name in present:
                continue
            (present.add if op == "put" else present.discard)(name)
            history.append((op, name))
        if not present:
            continue
        rt = RT()
        _route_history(rt, history)
        route = rt.topic_route("Shared")
        assert ([q["brokerName"] for q in route["queueDatas"]],
                [bd["brokerName"] for bd in route["brokerDatas"]]) == \
            java_route_orders(history, jdk=17), history
        assert bodies.decode_topic_route_data(rt.route_body("Shared")) == \
            bodies.decode_topic_route_data(bodies.encode_topic_route_data(route))


def test_route_answers_of_one_sequence_differ_by_the_sets_table(RT):
    """The compiled core shares one cached answer between topics with the same
    QueueData sequence; the HashSet's table is part of that key: a zone-mode answer
    keeping 3 of 12 brokers (the copy re-bucketed in 32) is not that of a topic on
    the same 3 alone (16)."""
    rt = RT()
    names = [f"broker-{i * 37}" for i in range(12)]
    for j, name in enumerate(names):
        topics = ["Wide", f"Own{j}"] + (["Narrow"] if j < 3 else [])
        rt.register_broker(CLUSTER, f"10.1.0.{j}:10911", name, 0, f"10.1.0.{j}:10912",
                           body=body(topics), now_ms=0, zone_name="z" if j < 3 else "other")
    cmd = rmq.RemotingCommand.request(105, {"topic": "Wide", ZONE_MODE: "true", ZONE_NAME: "z"})
    kept = set(names[:3])
    for topic in ("Narrow", "Wide", "Narrow"):
        route = rt.topic_route(topic)
        route["brokerDatas"] = [bd for bd in route["brokerDatas"] if bd["brokerName"] in kept]
        route["queueDatas"] = [q for q in route["queueDatas"] if q["brokerName"] in kept]
        assert rt.route_body(topic, True, route_zone(cmd)) == \
            bodies.encode_topic_route_data(route, legacy=True), topic


# ---------------------------------------------------------------- 4.9.8 vectors

def _vector(name):
    return rmq.decode_frame(vector_bytes(name))


def _register_vector(rt, name, now=1_000, conn="broker"):
    cmd = _vector(name)
    e = cmd.ext_fields
    reg_body = bodies.decode_register_broker_body(cmd.body)
    res = rt.register_broker(e["clusterName"], e["brokerAddr"], e["brokerName"],
                             int(e["brokerId"]), e["haServerAddr"], body=reg_body, conn=conn,
                             now_ms=now)
    return res, reg_body, e


def _as_5x(java_4_9_8_body):
    """A 4.9.8 answer's body as Java 5.0.0 writes it for the same 4.9.8 broker: its
    BrokerData gains ``"enableActingMaster":false`` (5.x always writes the field; see
    106_get_broker_cluster_info_five in the 5.0.0 vectors), the rest is the same."""
    return re.sub(rb'("cluster":"[^"]*")', rb'\1,"enableActingMaster":false', bytes(java_4_9_8_body))


def test_replay_4_9_8_register_broker(RT):
    rt = RT()
    res, reg_body, e = _register_vector(rt, "103_register_broker_request.bin")
    # the 4.9.8 answer to the master carries neither masterAddr nor haServerAddr
    assert _vector("103_register_broker_response.bin").ext_fields == {}
    assert res["masterAddr"] is None and res["haServerAddr"] is None
    assert res["first"] and res["changed"]
    assert len(rt.all_topics()) == 8
    # mqadmin updateTopic TopicTest (4r/4w): the broker re-registers with a new DataVersion
    later = copy.deepcopy(reg_body)
    wrapper = later["topicConfigSerializeWrapper"]
    wrapper["dataVersion"]["counter"] += 1
    wrapper["topicConfigTable"]["TopicTest"] = tc("TopicTest", 4, 4, 6)
    invalidated(rt)
    res = rt.register_broker(e["clusterName"], e["brokerAddr"], e["brokerName"], 0,
                             e["haServerAddr"], body=later, conn="broker", now_ms=2_000)
    assert not res["first"] and res["changed"]
    assert invalidated(rt) == {"TopicTest"}

    def topic_list(name):
        return bodies.decode_topic_list(_vector(name).body)

    # The captured topics in Java 5.0.0's order (issue 29), not 4.9.8's: 5.0.0's
    # TopicList is a CopyOnWriteArraySet filled from topicQueueTable, a
    # ConcurrentHashMap(1024) (4.9.8: a HashSet from a HashMap), in the order
    # rmq.javaorder gives (checked against the JDK in test_javaorder); 304 lists each
    # cluster, then its brokers.
    topics = topic_list("206_get_all_topic_list_from_nameserver_response.bin")[0]
    in_5_0_0_order = JavaConcurrentKeys(1024, topics).java_order()
    assert in_5_0_0_order != topics
    assert rt.all_topics() == in_5_0_0_order
    assert rt.topics_by_cluster("DefaultCluster") == in_5_0_0_order
    assert sorted(topic_list("224_get_topics_by_cluster_response.bin")[0]) == sorted(topics)
    names, broker_addr = topic_list("304_get_system_topic_list_from_ns_response.bin")
    assert rt.system_topics() == (["DefaultCluster", "broker-a"], broker_addr)
    assert sorted(names) == ["DefaultCluster", "broker-a"]
    assert rt.unit_topics() == topic_list("311_get_unit_topic_list_response.bin")[0] == []
    assert rt.has_unit_sub_topics() == []
    assert rt.has_unit_sub_ununit_topics() == []
    info = rt.cluster_info()
    cluster_answer = _as_5x(_vector("106_get_broker_cluster_info_response.bin").body)
    assert info == bodies.decode_cluster_info(cluster_answer)
    assert bodies.encode_cluster_info(*info) == cluster_answer

    route = rt.topic_route("TopicTest")
    answer = _as_5x(_vector("105_get_routeinfo_existing_response.bin").body)
    assert route == bodies.decode_topic_route_data(answer)
    assert bodies.encode_topic_route_data(route) == answer
    assert rt.topic_route("NoSuchTopic") is None            # 105 -> 17
    assert rt.topic_route("AutoCreatedTopic") is None

    # 205 / 327 from mqadmin: 9 topics each
    assert str(rt.wipe_write_perm("broker-a")) == \
        _vector("205_wipe_write_perm_of_broker_response.bin").ext_fields["wipeTopicCount"]
    assert str(rt.add_write_perm("broker-a")) == \
        _vector("327_add_write_perm_of_broker_response.bin").ext_fields["addTopicCount"]
    # after them TBW102 (registered with perm 7) answers perm 6, as captured
    tbw = _as_5x(_vector("105_get_routeinfo_producer_tbw102_response.bin").body)
    assert rt.topic_route("TBW102") == bodies.decode_topic_route_data(tbw)
    assert rt.topic_route("TBW102")["queueDatas"][0]["readQueueNums"] == 8
    assert bodies.encode_topic_route_data(rt.topic_route("TBW102")) == tbw

    rt.delete_topic("AutoCreatedTopic", "DefaultCluster")   # 216: absent, no-op
    assert len(rt.all_topics()) == 9

    # 104 from the broker's shutdown hook empties the tables (106 after it)
    u = _vector("104_unregister_broker_request.bin").ext_fields
    assert rt.unregister_broker(u["clusterName"], u["brokerAddr"], u["brokerName"],
                                int(u["brokerId"]))
    assert rt.cluster_info() == bodies.decode_cluster_info(
        _vector("106_get_broker_cluster_info_empty_response.bin").body)
    assert rt.all_topics() == []


def test_replay_4_9_8_two_brokers(RT):
    rt = RT()
    _register_vector(rt, "103_register_broker_request.bin", conn="a")
    res, _, e = _register_vector(rt, "103_register_broker_rmq_request.bin", conn="b")
    assert e["brokerName"] == "broker-b" and res["first"]
    route = rt.topic_route("TBW102")
    assert sorted(bd["brokerName"] for bd in route["brokerDatas"]) == ["broker-a", "broker-b"]
    assert {q["brokerName"]: q["writeQueueNums"] for q in route["queueDatas"]} == {
        "broker-a": 8, "broker-b": 8}
    # Java's HashSet order, as a 4.9.8 NameServer lists them
    assert rt.cluster_info()[1] == {"DefaultCluster": ["broker-b", "broker-a"]}
    u = _vector("104_unregister_broker_rmq_request.bin").ext_fields
    rt.unregister_broker(u["clusterName"], u["brokerAddr"], u["brokerName"], int(u["brokerId"]))
    assert [bd["brokerName"] for bd in rt.topic_route("TBW102")["brokerDatas"]] == ["broker-a"]
    assert rt.topic_route("broker-b") is None
    assert [d["brokerName"] for d in rt.connection_closed("a")] == ["broker-a"]
    assert rt.cluster_info() == ({}, {})


@pytest.mark.once
def test_the_name_server_loads_no_fallback_module():
    """With the compiled core, the route tables (rules and C storage), the rest of
    the NameServer and the other production modules (CLI, broker side, traces) import
    nothing from the pure-Python reference."""
    import subprocess
    import sys
    code = ("import sys, rmq._core, rmq.namesrv, rmq.namesrv.server, rmq.cli, rmq.registrar, "
            "rmq.admin, rmq.brokersim, rmq.trace, rmq.trace.pcap, rmq.trace.synth; "
            "print(sorted(m for m in sys.modules if m.startswith('rmq.fallback')))")
    env = {k: v for k, v in os.environ.items() if k != "RMQ_PUREPYTHON"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True).stdout
    assert out.strip() == "[]"


def test_many_brokers_expiring_at_once_go_and_the_rest_stay(RT):
    """2,000 brokers, 1,000 of them silent: one scan drops exactly those, with their
    topics; the others (heartbeats, a re-registration with a shorter timeout, one
    whose clock went back) expire at their own deadlines, not before."""
    rt = RT()
    for i in range(2000):
        reg(rt, [f"T{i}", f"U{i}"], name=f"b{i}", addr=f"10.0.{i // 250}.{i % 250}:10911",
            now=0, conn=i)
    for i in range(1000, 2000):                         # the second half stays alive
        rt.heartbeat(CLUSTER, f"10.0.{i // 250}.{i % 250}:10911", now_ms=60_000)
    assert rt.scan_not_active(120_000) == []            # last + timeout == now: kept
    dropped = rt.scan_not_active(120_001)
    assert sorted(d["conn"] for d in dropped) == list(range(1000))
    assert {d["reason"] for d in dropped} == {"expired"}
    assert len(rt.all_topics()) == 2000 and rt.topic_route("T0") is None
    assert rt.topic_route("T1999") is not None
    # a shorter timeout on re-registration is honoured although the broker was queued later
    reg(rt, ["T1500", "U1500"], name="b1500", addr="10.0.6.0:10911", now=130_000, timeout_ms=1_000,
        conn=1500)
    assert [d["conn"] for d in rt.scan_not_active(131_001)] == [1500]
    # a heartbeat with an earlier clock moves the deadline back, and the scan sees it
    rt.heartbeat(CLUSTER, "10.0.7.249:10911", now_ms=10_000)
    assert [d["conn"] for d in rt.scan_not_active(131_002)] == [1999]
    assert len(rt.live_brokers()) == 998
    assert len(rt.scan_not_active(180_001)) == 998      # the rest, at their deadline


def test_the_liveness_index_holds_each_live_broker_once(RT):
    """Heartbeats and re-registrations do not grow the deadline index: it holds one
    entry per live broker (the scan re-queues those it finds alive)."""
    rt = RT()
    addrs = [f"10.1.0.{i}:10911" for i in range(50)]
    for i, a in enumerate(addrs):
        reg(rt, [f"T{i}", f"U{i}"], name=f"b{i}", addr=a, now=0)
    for t in range(1_000, 400_000, 1_000):
        for i, a in enumerate(addrs):
            rt.heartbeat(CLUSTER, a, now_ms=t)
            if t % 30_000 == 0:
                reg(rt, [f"T{i}", f"U{i}"], name=f"b{i}", addr=a, now=t, counter=t)
        if t % 5_000 == 0:
            assert rt.scan_not_active(t) == []
        assert len(rt._deadlines) <= len(addrs)
    assert len(rt.live_brokers()) == len(addrs)


def test_a_closed_connection_drops_the_brokers_last_registered_over_it(RT):
    """The connection index follows re-registrations over another connection and
    address changes, and holds nothing once every broker is gone."""
    rt = RT()
    reg(rt, ["T1", "T2"], name="a", addr=A0, conn="c1")
    reg(rt, ["T2", "T3"], name="b", addr=A1, conn="c1")
    reg(rt, ["T1", "T2"], name="a", addr=A0, conn="c2", counter=2)  # a moved to c2
    assert [b["brokerAddr"] for b in rt.live_brokers()] == [A0, A1]   # the order kept
    assert [d["brokerAddr"] for d in rt.connection_closed("c1")] == [A1]
    assert rt.connection_closed("c1") == []
    assert [d["brokerAddr"] for d in rt.connection_closed("c2")] == [A0]
    assert rt.live_brokers() == [] and rt._by_conn == rt._conn_of == rt._live == {}
