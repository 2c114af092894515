"""A broker name leaves no trace in the route tables once the broker is gone.

Broker names are chosen by brokers (a restarted container may come back under a
new one): the compiled RouteTable gives a broker's slot in its C table, and the
slot's memory, back when the broker is neither registered nor named by any
QueueData, and reuses it for the next new name; the reference forgets the name
with its last entry. Whatever removed the broker (unregistration, expiry, a
closed connection, a refused first registration, deleted topics), the answers
for the brokers that remain are unchanged, byte for byte.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq import bodies
from support import load_fallback, route_table

CLUSTER = "DefaultCluster"
STAY = {"broker-stay-a": "10.9.0.1:10911", "broker-stay-b": "10.9.0.2:10911"}
LATER = 10**12                  # the staying brokers' registration time: they never expire


def compiled_table(rt):
    return type(rt) is not route_table(load_fallback())


def traces(rt):
    """The broker names the table keeps something for."""
    if compiled_table(rt):
        used, total, names = rt._tt._broker_slots()
        assert used == len(names) <= total
        return names
    return set(rt._brokers) | set(rt._tt._broker_topics)


def slots_ever_used(rt):
    return rt._tt._broker_slots()[1] if compiled_table(rt) else None


def register(rt, name, addr, topics, broker_id=0, now=0, conn=None):
    body = bodies.register_broker_body([bodies.topic_config(t, 4, 4) for t in topics],
                                       {"counter": 1, "timestamp": 1})
    return rt.register_broker(CLUSTER, addr, name, broker_id, addr, body=body, now_ms=now,
                              conn=conn)


def with_staying_brokers(RT):
    rt = RT()
    for i, (name, addr) in enumerate(STAY.items()):
        register(rt, name, addr, ["Shared", f"Stay{i}"], now=LATER)
    return rt


def answers(rt):
    return {t: (rt.route_body(t), rt.route_body(t, legacy=True)) for t in rt.all_topics()}


# ---------------------------------------------------------------- removal paths

def _unregister(rt, name, addr, i):
    register(rt, name, addr, ["Shared", f"Own{i}"])
    rt.unregister_broker(CLUSTER, addr, name, 0)


def _expire(rt, name, addr, i):
    register(rt, name, addr, ["Shared", f"Own{i}"])
    assert [d["brokerName"] for d in rt.scan_not_active(now_ms=10**9)] == [name]


def _close_connection(rt, name, addr, i):
    conn = object()
    register(rt, name, addr, ["Shared", f"Own{i}"], conn=conn)
    assert len(rt.connection_closed(conn)) == 1


def _slave_then_master(rt, name, addr, i):
    slave = addr.replace("10911", "10921")
    register(rt, name, addr, ["Shared", f"Own{i}"])
    register(rt, name, slave, ["Shared", f"Own{i}"], broker_id=1)
    rt.unregister_broker(CLUSTER, slave, name, 1)
    rt.unregister_broker(CLUSTER, addr, name, 0)


def _refused_first_registration(rt, name, addr, i):
    assert register(rt, name, addr, [f"Own{i}"])["failed"]


def _topics_deleted_first(rt, name, addr, i):
    register(rt, name, addr, [f"Own{i}", f"Mine{i}"])
    rt.delete_topic(f"Own{i}")
    rt.delete_topic(f"Mine{i}", CLUSTER)
    rt.unregister_broker(CLUSTER, addr, name, 0)


REMOVALS = [_unregister, _expire, _close_connection, _slave_then_master,
            _refused_first_registration, _topics_deleted_first]


@pytest.mark.parametrize("remove", REMOVALS, ids=lambda f: f.__name__.strip("_"))
def test_a_removed_broker_leaves_no_trace(RT, remove):
    rt = with_staying_brokers(RT)
    baseline, before = traces(rt), answers(rt)
    slots = slots_ever_used(rt)
    for i in range(300):
        remove(rt, f"broker-gone-{i}", f"10.1.{i // 250}.{i % 250}:10911", i)
        assert traces(rt) == baseline, i
    assert answers(rt) == before
    if slots is not None:
        # every broker that came took the slot the one before it left
        assert slots_ever_used(rt) <= slots + 1


def test_many_distinct_brokers_come_and_go(RT):
    rt = with_staying_brokers(RT)
    baseline, before = traces(rt), answers(rt)
    slots = slots_ever_used(rt)
    for i in range(5000):
        _unregister(rt, f"broker-{i}", "10.2.0.1:10911", i % 50)
    assert traces(rt) == baseline
    assert answers(rt) == before
    if slots is not None:
        assert slots_ever_used(rt) == slots + 1


def test_reused_slots_answer_for_their_new_broker(RT):
    """Slots are freed and taken again in an interleaved order: every answer
    equals the reference's, which has no slots."""
    tables = (with_staying_brokers(RT), with_staying_brokers(route_table(load_fallback())))
    for rt in tables:
        for i in range(8):
            register(rt, f"broker-{i}", f"10.3.0.{i}:10911", ["Shared", f"Own{i % 3}"])
        for i in (5, 1, 6):
            rt.unregister_broker(CLUSTER, f"10.3.0.{i}:10911", f"broker-{i}", 0)
        for i in range(8, 12):          # three take freed slots, one a new slot
            register(rt, f"broker-{i}", f"10.3.0.{i}:10911", ["Shared", f"New{i}", "Own0"])
        rt.wipe_write_perm("broker-9")
    a, b = tables
    assert traces(a) == traces(b)
    assert a.all_topics() == b.all_topics()
    assert answers(a) == answers(b)
    for topic in a.all_topics():
        assert a.topic_route(topic) == b.topic_route(topic)
    assert a.cluster_info() == b.cluster_info()
    assert a.topics_by_cluster(CLUSTER) == b.topics_by_cluster(CLUSTER)


# ---------------------------------------------------------------- differential

NAMES = [f"b{i}" for i in range(4)]
ADDRS = ["10.4.0.1:10911", "10.4.0.2:10911", "10.4.0.3:10911"]
TOPICS = ["T0", "T1", "T2", "T3"]

OPS = st.one_of(
    st.tuples(st.just("register"), st.sampled_from(NAMES), st.sampled_from(ADDRS),
              st.integers(0, 2), st.lists(st.sampled_from(TOPICS), min_size=1, max_size=4,
                                          unique=True), st.integers(0, 2), st.integers(1, 3)),
    st.tuples(st.just("unregister"), st.sampled_from(NAMES), st.sampled_from(ADDRS),
              st.integers(0, 2)),
    st.tuples(st.just("register_topic"), st.sampled_from(TOPICS),
              st.lists(st.sampled_from(NAMES), min_size=1, max_size=3)),
    st.tuples(st.just("delete_topic"), st.sampled_from(TOPICS), st.booleans()),
    st.tuples(st.just("wipe"), st.sampled_from(NAMES)),
    st.tuples(st.just("close"), st.integers(0, 2)),
    st.tuples(st.just("expire"), st.integers(1, 3)),
)


def _apply(rt, op, conns):
    kind = op[0]
    if kind == "register":
        _, name, addr, broker_id, topics, conn, now = op
        register(rt, name, addr, topics, broker_id=broker_id, now=now * 200_000,
                 conn=conns[conn])
    elif kind == "unregister":
        rt.unregister_broker(CLUSTER, op[2], op[1], op[3])
    elif kind == "register_topic":
        rt.register_topic(op[1], [{"brokerName": n, "perm": 6, "readQueueNums": 2,
                                   "writeQueueNums": 2, "topicSysFlag": 0} for n in op[2]])
    elif kind == "delete_topic":
        rt.delete_topic(op[1], CLUSTER if op[2] else None)
    elif kind == "wipe":
        rt.wipe_write_perm(op[1])
    elif kind == "close":
        rt.connection_closed(conns[op[1]])
    else:
        rt.scan_not_active(now_ms=op[1] * 200_000 + 150_000)


@given(st.lists(OPS, max_size=25))
def test_slots_follow_the_reference(compiled, ops):
    conns = [object(), object(), object()]
    c, py = route_table(compiled)(), route_table(load_fallback())()
    for op in ops:
        _apply(c, op, conns)
        _apply(py, op, conns)
        assert traces(c) == traces(py), op
        assert c.all_topics() == py.all_topics(), op
        assert answers(c) == answers(py), op
    for name in NAMES:
        for rt in (c, py):
            for addr in ADDRS:
                for broker_id in range(3):
                    rt.unregister_broker(CLUSTER, addr, name, broker_id)
        assert traces(c) == traces(py)
    assert traces(c) == set() and c._tt._broker_slots()[0] == 0
