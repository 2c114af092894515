"""The bounded route-answer cache and the cost of the route tables at scale (issue 15),
on both storages: the budget holds, evicted answers come back byte-identical, the
cached set survives uniform polling and re-registration storms, identical answers
are held once, and a registration's cost does not grow with the route's width."""

import logging
import threading

import pytest

from rmq import bodies
from rmq.namesrv.config import NamesrvConfig
from support import load_compiled, route_table

CLUSTER = "DefaultCluster"


def addr(i):
    return f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}:10911"


def encoded(topics, counter=1, queues=None):
    """A REGISTER_BROKER body (bytes): ``queues(k)`` read/write queues for topic k."""
    return bodies.encode_register_broker_body(bodies.register_broker_body(
        [bodies.topic_config(t, queues(k) if queues else 4, queues(k) if queues else 4)
         for k, t in enumerate(topics)], {"counter": counter, "timestamp": 1000}))


def register(rt, i, body, now=0):
    return rt.register_broker(CLUSTER, addr(i), f"b{i}", 0, addr(i).replace("10911", "10912"),
                              body=body, conn=i, now_ms=now)


def distinct_tables(RT, brokers=4, ntopics=60, **kw):
    """A table whose topics all have different answers (topic k: k + 1 queues)."""
    rt = RT(**kw)
    topics = [f"T{k}" for k in range(ntopics)]
    body = encoded(topics, queues=lambda k: k + 1)
    for i in range(brokers):
        register(rt, i, body)
    return rt, topics


def answers(rt, topics):
    return {(t, legacy): rt.route_body(t, legacy) for t in topics for legacy in (False, True)}


# ---------------------------------------------------------------- the budget

def test_the_cache_stays_within_its_budget_and_evicted_answers_come_back_identical(RT):
    ref, topics = distinct_tables(RT)
    expected = answers(ref, topics)
    full = ref.cache_stats()
    assert full["budget"] is None and full["answers"] == len(expected)
    budget = full["bytes"] // 3
    rt, _ = distinct_tables(RT, cache_bytes=budget)
    assert rt.cache_budget == budget
    for _ in range(3):
        for key in expected:
            assert rt.route_body(*key) == expected[key]
            assert rt.cache_stats()["bytes"] <= budget
    st = rt.cache_stats()
    assert 0 < st["entries"] < len(expected)
    assert st["evictions"] + st["refused"] > 0 and st["hits"] > 0
    # A smaller budget evicts down to it at once; 0 caches nothing, answers stay right.
    rt.cache_budget = budget // 2
    assert rt.cache_stats()["bytes"] <= budget // 2
    rt.cache_budget = 0
    assert rt.cache_stats()["bytes"] == rt.cache_stats()["entries"] == 0
    assert answers(rt, topics) == expected
    assert rt.cache_stats()["entries"] == 0
    with pytest.raises(ValueError, match="-1"):
        rt.cache_budget = -1


def test_uniform_polling_keeps_the_cached_set_and_a_hot_topic_gets_in(RT):
    """Every topic polled alike (clients poll each every 30 s): the answers that fit
    stay, rather than each being evicted just before its next query; a topic asked
    for more often than the cached ones takes a place."""
    ref, topics = distinct_tables(RT)
    answers(ref, topics)
    rt, _ = distinct_tables(RT, cache_bytes=ref.cache_stats()["bytes"] // 2)
    answers(rt, topics)
    kept = rt.cached_topics()
    assert 0 < len(kept) < len(topics)
    before = rt.cache_stats()
    for _ in range(3):
        answers(rt, topics)
    after = rt.cache_stats()
    assert rt.cached_topics() == kept
    assert after["hits"] - before["hits"] >= 3 * 2 * len(kept)     # both forms of each kept
    hot = next(t for t in reversed(topics) if t not in kept)
    for _ in range(10):
        rt.route_body(hot)
    assert hot in rt.cached_topics()
    assert rt.cache_stats()["bytes"] <= rt.cache_budget


def test_invalidation_stays_exact_under_a_budget(RT):
    ref, topics = distinct_tables(RT)
    answers(ref, topics)
    rt, _ = distinct_tables(RT, cache_bytes=ref.cache_stats()["bytes"] // 2)
    answers(rt, topics)
    kept = rt.cached_topics()
    changed = sorted(kept)[0]
    # broker 0 re-registers with new queue counts for one cached topic only
    register(rt, 0, encoded(topics, counter=2,
                            queues=lambda k: 99 if topics[k] == changed else k + 1))
    assert rt.cached_topics() == kept - {changed}
    route = rt.topic_route(changed)
    assert {q["brokerName"]: q["readQueueNums"] for q in route["queueDatas"]}["b0"] == 99
    assert bodies.decode_topic_route_data(rt.route_body(changed)) == route


# ---------------------------------------------------------------- sharing, storms

def test_identical_answers_are_held_once(RT):
    """Every topic on the same brokers with the same queues (the usual cluster): one
    answer per form, whatever the number of topics."""
    rt = RT()
    topics = [f"T{k}" for k in range(200)]
    body = encoded(topics)
    for i in range(30):
        register(rt, i, body)
    got = answers(rt, topics)
    st = rt.cache_stats()
    assert st["answers"] == 2 and st["entries"] == 400 and st["shared"] == 398
    assert st["bytes"] < 2 * len(got["T0", False]) + 4096
    assert len({got[t, False] for t in topics}) == 1
    assert bodies.decode_topic_route_data(got["T7", False]) == rt.topic_route("T7")


def test_a_re_registration_storm_with_the_same_topics_keeps_the_cache(RT):
    """Every broker re-registering with a new DataVersion and the same topic configs
    (every 30 s) changes no route: the cache keeps every answer."""
    rt = RT()
    topics = [f"T{k}" for k in range(300)]
    for i in range(20):
        register(rt, i, encoded(topics))
    answers(rt, topics)
    version, cached = rt.version, rt.cached_topics() & rt.cached_topics(legacy=True)
    evictions = rt.cache_stats()["evictions"]
    assert len(cached) == len(topics)
    for counter in (2, 3):
        for i in range(20):
            register(rt, i, encoded(topics, counter=counter), now=counter * 30_000)
    assert rt.cached_topics() & rt.cached_topics(legacy=True) == cached
    assert rt.version == version and rt.cache_stats()["evictions"] == evictions


# ---------------------------------------------------------------- cost at width

def registration_work(RT, width, ntopics=1000):
    """The table's work for one more broker's first registration of ``ntopics``
    topics that ``width`` brokers already have, then for its re-registration."""
    rt = RT()
    topics = [f"T{k}" for k in range(ntopics)]
    body = encoded(topics)
    for i in range(width):
        register(rt, i, body)
    work = rt._tt._work()
    register(rt, width, body)
    first = rt._tt._work() - work
    work = rt._tt._work()
    register(rt, width, encoded(topics, counter=2, queues=lambda k: 8), now=1)
    changed = rt._tt._work() - work
    assert len(rt.topic_route("T5")["queueDatas"]) == width + 1
    return first, changed


@pytest.mark.slow
def test_a_registrations_cost_does_not_grow_with_the_route_width(RT):
    """Applying one broker's topics touches that broker's entries, not every other
    broker's: the same work at width 300 as at width 8."""
    narrow = registration_work(RT, 8)
    wide = registration_work(RT, 300)
    assert narrow[0] > 0 and narrow[1] > 0
    assert wide[0] <= narrow[0] * 1.5 and wide[1] <= narrow[1] * 1.5, (narrow, wide)


def test_removing_a_broker_touches_only_its_topics(RT):
    rt = RT()
    many = [f"T{k}" for k in range(2000)]
    for i in range(3):
        register(rt, i, encoded(many))
    register(rt, 9, encoded(["X1", "X2", "T5"]))
    work = rt._tt._work()
    assert rt.unregister_broker(CLUSTER, addr(9), "b9", 0)
    assert rt._tt._work() - work <= 30
    assert rt.topic_route("X1") is None and len(rt.topic_route("T5")["queueDatas"]) == 3


# ---------------------------------------------------------------- compiled: threads

def test_threads_querying_under_eviction_get_the_right_answers():
    """Readers evict answers other readers may still be copying (they wait in a
    graveyard until the last reader leaves): four threads under a small budget."""
    RT = route_table(load_compiled())
    ref, topics = distinct_tables(RT)
    expected = answers(ref, topics)
    rt, _ = distinct_tables(RT, cache_bytes=ref.cache_stats()["bytes"] // 4)
    wrong, errors = [], []

    def reader(seed):
        try:
            keys = list(expected)
            for n in range(3000):
                key = keys[(n * 7 + seed * 13) % len(keys)]
                if rt.cached_route_body(*key) != expected[key]:
                    wrong.append(key)
        except Exception as e:      # reported below
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors and not wrong
    st = rt.cache_stats()
    assert st["bytes"] <= st["budget"] and st["hits"] > 0 and st["misses"] > 0


# ---------------------------------------------------------------- the server's

def test_the_name_server_takes_its_budget_from_route_cache_bytes(caplog):
    from rmq.cli import _log_route_cache
    from rmq.namesrv import DefaultRequestProcessor
    from rmq.namesrv.kvconfig import KVConfig

    config = NamesrvConfig()
    assert config.routeCacheBytes == 256 * 1024 * 1024
    config.routeCacheBytes = 12345
    ns = DefaultRequestProcessor(config, KVConfig(None))
    assert ns.routes.cache_budget == 12345
    with caplog.at_level(logging.INFO, logger="rmq.namesrv"):
        _log_route_cache(logging.getLogger("rmq.namesrv"), ns.routes)
    assert "route cache: hits=0 misses=0 evictions=0 bytes=0 entries=0 budget=12345" in caplog.text
