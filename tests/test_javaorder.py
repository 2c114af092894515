"""rmq.javaorder against the JDK: the iteration order of Java's HashMap, HashSet and
ConcurrentHashMap of strings, which rmq's answers reproduce (Java 5.0.0 keeps its
route tables in ConcurrentHashMaps, its KV tables in HashMaps).

Two kinds of oracle: orders captured once from OpenJDK 17 (and 25) by
tests/interop/JavaOrder.java, stored here with the script that produced them, run
everywhere; and the same program run now on random histories of many insertions and
removals, when java is on PATH (the "java" part).
"""

import random
from array import array
import subprocess
from pathlib import Path

import pytest

from rmq.javaorder import (ConcurrentTable, JavaConcurrentKeys, JavaHashKeys,
                           concurrent_table_size, hash_map_table_size,
                           hash_set_copy_table_size, java_hash_order, java_long_spread_hash,
                           java_route_orders, java_spread_hash)

JAVA_ORDER = Path(__file__).resolve().parent / "interop" / "JavaOrder.java"


def jdk(script, java="java"):
    """Run JavaOrder.java on ``script`` (its commands, keys as str); its answers, one
    list per query line (keys decoded; ``table`` answers as a one-int list)."""
    lines = []
    for cmd in script:
        op, _, rest = cmd.partition(" ")
        lines.append(f"{op} {rest.encode().hex()}" if op in ("put", "remove") else cmd)
    out = subprocess.run(
        [java, "--add-opens", "java.base/java.util=ALL-UNNAMED",
         "--add-opens", "java.base/java.util.concurrent=ALL-UNNAMED", str(JAVA_ORDER)],
        input="\n".join(lines) + "\n", capture_output=True, text=True, check=True).stdout
    answers = []
    for line in out.split("\n")[:-1]:
        words = line.split()
        if len(words) == 1 and words[0].isdigit():
            answers.append([int(words[0])])
        else:
            answers.append([bytes.fromhex(w).decode() for w in words])
    return answers


def _mirror(kind, capacity):
    return JavaConcurrentKeys(capacity) if kind == "chm" else JavaHashKeys(
        initial_capacity=16 if capacity is None else capacity)


def _script(kind, capacity, ops):
    return ([f"new {kind} {'-' if capacity is None else capacity}"]
            + [f"{op} {key}" for op, key in ops] + ["order", "table"])


def _largest_bucket_at_insertion(capacity, ops):
    """The most keys a bucket held when a key was inserted into it: 8 or more, and
    Java turns the bucket into a tree (not emulated: see rmq.javaorder)."""
    m = JavaConcurrentKeys(capacity)
    largest = 0
    for op, key in ops:
        if op == "put" and key not in m:
            mask = m.table_size - 1
            bucket = java_spread_hash(key) & mask
            largest = max(largest, sum(1 for k in m if java_spread_hash(k) & mask == bucket))
        (m.add if op == "put" else m.discard)(key)
    return largest


# ---------------------------------------------------------------- captured oracles

#: ``new ConcurrentHashMap<>(n)``'s table at the insertions where it changed size, from
#: OpenJDK 17 (JavaOrder.java: ``new chm N``, then ``put k0``, ``put k1``... each
#: followed by ``table``): ``tableSizeFor(n + n/2 + 1)`` at first, doubled when the
#: count *reaches* 3/4 of it. A HashMap(n) starts at ``tableSizeFor(n)``.
JDK_CONCURRENT_GROWTH = {
    None: [(1, 16), (12, 32), (24, 64), (48, 128), (96, 256)],
    16: [(1, 32), (24, 64), (48, 128), (96, 256)],
    32: [(1, 64), (48, 128), (96, 256)],
    128: [(1, 256), (192, 512), (384, 1024)],
    1024: [(1, 2048), (1536, 4096), (3072, 8192)],
}


#: The table at the first insertion for capacities that are no power of two: OpenJDK 17
#: and Temurin 25 (``new chm N``, ``put a``, ``table``); JDK 8's formula would make 32
#: for 11.
JDK_CONCURRENT_FIRST_TABLE = {5: 8, 11: 16, 12: 32, 13: 32, 100: 256, 1000: 2048}


def test_concurrent_first_table_is_jdk_17s():
    assert {n: concurrent_table_size(n) for n in JDK_CONCURRENT_FIRST_TABLE} == \
        JDK_CONCURRENT_FIRST_TABLE


@pytest.mark.parametrize("capacity", list(JDK_CONCURRENT_GROWTH))
def test_concurrent_table_sizes_are_the_jdks(capacity):
    expected = JDK_CONCURRENT_GROWTH[capacity]
    m = JavaConcurrentKeys(capacity)
    seen = []
    for i in range(expected[-1][0]):
        m.add(f"k{i}")
        if not seen or seen[-1][1] != m.table_size:
            seen.append((len(m), m.table_size))
    assert seen == expected
    assert concurrent_table_size(capacity) == expected[0][1]


#: OpenJDK 17, JavaOrder.java: ``new chm 32`` (clusterAddrTable's), ``put`` cluster-77
#: to cluster-124 (the 48th put doubles the table to 128), ``remove`` cluster-82 and
#: cluster-107, ``put`` cluster-125 to cluster-128, ``order``: indexes from cluster-77.
#: The resize reversed a bucket's first keys: a HashMap (or the order of insertion
#: within each bucket) differs at 4 places.
JDK_CONCURRENT_ORDER = [20, 49, 19, 50, 22, 47, 21, 48, 51, 14, 13, 16, 15, 18, 17, 38, 39,
                        36, 37, 42, 40, 41, 45, 46, 43, 44, 27, 28, 25, 0, 26, 2, 31, 1, 32,
                        29, 34, 35, 33, 9, 8, 11, 10, 12, 3, 23, 24, 4, 7, 6]


def _reversal_history():
    names = [f"cluster-{i}" for i in range(77, 129)]
    ops = ([("put", n) for n in names[:48]] + [("remove", names[5]), ("remove", names[30])]
           + [("put", n) for n in names[48:]])
    return names, ops


def test_concurrent_order_after_a_reversing_resize_is_the_jdks():
    names, ops = _reversal_history()
    m = JavaConcurrentKeys(32)
    for op, key in ops:
        (m.add if op == "put" else m.discard)(key)
    expected = [names[i] for i in JDK_CONCURRENT_ORDER]
    assert m.java_order() == expected and m.table_size == 128
    assert java_hash_order(m, 128) != expected      # the reversal is what differs


#: ``new HashSet<>(map.keySet())`` of a HashMap filled with n broker names
#: (broker-{i * 7919 % 1000}, i = n-1..0), as indexes: pickupTopicRouteData's
#: brokerDatas. JavaOrder.java ``new hm -``, ``put``s, ``order``, ``copy`` on OpenJDK
#: 17 and Temurin 25. The map's own order (queueDatas) is test_routes.JDK_ROUTE_ORDER.
JDK17_ROUTE_BROKER_ORDER = {
    12: [9, 10, 7, 4, 11, 8, 5, 0, 2, 6, 3, 1],
    24: [21, 22, 0, 19, 16, 23, 1, 20, 17, 4, 5, 11, 3, 10, 8, 6, 9, 7, 12, 14, 18, 15, 2, 13],
    48: [45, 46, 43, 5, 10, 40, 3, 47, 44, 6, 41, 4, 7, 12, 35, 34, 32, 30, 33, 31, 36, 38, 1,
         23, 42, 39, 2, 37, 0, 24, 22, 19, 25, 20, 28, 11, 29, 27, 15, 8, 16, 13, 9, 14, 17,
         21, 18, 26],
}
#: n = 48 on Temurin 25: the map's own order (HashSet(Collection) sized as the map).
JDK25_ROUTE_BROKER_ORDER_48 = [45, 46, 24, 43, 5, 10, 40, 3, 22, 47, 19, 25, 44, 6, 41, 4,
                               20, 28, 7, 12, 11, 29, 35, 27, 15, 34, 8, 16, 13, 32, 30, 9,
                               14, 33, 31, 36, 38, 1, 17, 23, 42, 39, 2, 21, 18, 26, 37, 0]


def _brokers(n):
    return [f"broker-{i * 7919 % 1000}" for i in range(n - 1, -1, -1)]


@pytest.mark.parametrize("n", sorted(JDK17_ROUTE_BROKER_ORDER))
def test_route_broker_order_of_jdk_8_to_18(n):
    names = _brokers(n)
    queue_datas, broker_datas = java_route_orders([("put", b) for b in names], jdk=17)
    assert broker_datas == [names[i] for i in JDK17_ROUTE_BROKER_ORDER[n]]
    assert broker_datas != queue_datas
    # from JDK 19 the copy is sized as the map: one order
    assert java_route_orders([("put", b) for b in names], jdk=25) == (queue_datas, queue_datas)
    if n == 48:
        assert queue_datas == [names[i] for i in JDK25_ROUTE_BROKER_ORDER_48]


def test_hash_set_copy_sizes():
    """(int) (n / .75f) + 1 against ceil(n / 0.75): they part where n / .75 is a power
    of two, and only there (up to 100,000)."""
    differ = [n for n in range(100_000)
              if hash_set_copy_table_size(n, 17) != hash_set_copy_table_size(n, 19)]
    assert differ == [3 << k for k in range(2, 16)]
    assert [hash_set_copy_table_size(n, 17) for n in (0, 11, 12, 13, 24, 25)] == \
        [16, 16, 32, 32, 64, 64]
    assert [hash_set_copy_table_size(n, 19) for n in (0, 11, 12, 13, 24, 25)] == \
        [16, 16, 16, 32, 32, 64]


def test_hash_map_table_size_follows_the_most_keys_held():
    keys = JavaHashKeys(f"key-{i}" for i in range(13))       # 13 > 12: 32 buckets
    for i in range(13):
        keys.discard(f"key-{i}")
    for k in ("DefaultCluster", "broker-a", "broker-b"):
        keys.add(k)
    assert keys.java_order() == java_hash_order(["DefaultCluster", "broker-a", "broker-b"], 32)
    assert hash_map_table_size(12) == 16 and hash_map_table_size(13) == 32
    assert hash_map_table_size(0, 1024) == 1024 and hash_map_table_size(769, 1024) == 2048


def test_long_hash():
    """Long.hashCode folds the high word in: (int) (v ^ (v >>> 32)), then HashMap's spread."""
    assert [java_long_spread_hash(v) for v in (0, 1, 15, 16, 1 << 32, -1)] == \
        [0, 1, 15, 16, 1, 0]


# ---------------------------------------------------------------- the JDK, now

def _random_key(rng):
    alphabet = "abcXYZ019-_%\u00e9\u4e2d\U0001F600"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))


def _history(rng, pool_size, changes, removal_share=0.3):
    pool = list({_random_key(rng) for _ in range(pool_size)})
    return [("remove" if rng.random() < removal_share else "put", rng.choice(pool))
            for _ in range(changes)]


#: (kind, initial capacity, seed, distinct keys, changes): each crosses one or more
#: resizes of its table with removals before and after them.
HISTORIES = [
    ("chm", 1024, 1, 2400, 9000), ("chm", 1024, 2, 1800, 4000), ("chm", 128, 3, 900, 5000),
    ("chm", 32, 4, 300, 2000), ("chm", None, 5, 200, 800), ("chm", 16, 6, 40, 200),
    ("hm", None, 7, 400, 2000), ("hm", 1024, 8, 2000, 6000), ("hm", 16, 9, 30, 100),
]


@pytest.mark.requires("java")
def test_orders_after_many_changes_are_the_jdks():
    script, mirrors = [], []
    for kind, capacity, seed, pool, changes in HISTORIES:
        ops = _history(random.Random(seed), pool, changes)
        assert _largest_bucket_at_insertion(capacity, ops) < 8   # no tree buckets
        m = _mirror(kind, capacity)
        for op, key in ops:
            (m.add if op == "put" else m.discard)(key)
        script += _script(kind, capacity, ops)
        mirrors.append(m)
    answers = jdk(script)
    for i, m in enumerate(mirrors):
        order, (table,) = answers[2 * i], answers[2 * i + 1]
        assert m.java_order() == order, HISTORIES[i]
        if isinstance(m, JavaConcurrentKeys):
            assert m.table_size == table, HISTORIES[i]


def _seqs_and_hashes(seqs):
    """What a topic-table storage's ``topic_hashes`` gives of {key: seq}."""
    listed = sorted((s, k) for k, s in seqs.items())
    return (array("Q", [s for s, _ in listed]),
            array("I", [java_spread_hash(k) for _, k in listed]))


@pytest.mark.requires("java")
def test_topic_table_replayed_from_insertion_numbers_is_the_jdks():
    """ConcurrentTable as RouteTable drives it from the storage: changes in batches
    (a registration: its removals, then its insertions), ``grow`` after each batch
    with the count and the keys' numbers and hashes only. Java's TopicList (a
    CopyOnWriteArraySet filled from the map) keeps that order."""
    rng = random.Random(11)
    pool = list({_random_key(rng) for _ in range(8000)})
    table = ConcurrentTable(1024)
    seqs, next_seq, ops = {}, 0, []
    for _ in range(60):
        removed = rng.sample(sorted(seqs), min(len(seqs), rng.randint(0, 60)))
        added = [k for k in rng.sample(pool, rng.randint(0, 400)) if k not in seqs]
        for key in removed:
            del seqs[key]
            ops.append(("remove", key))
        for key in added:
            seqs[key] = next_seq
            next_seq += 1
            ops.append(("put", key))
        table.grow(len(seqs), lambda: _seqs_and_hashes(seqs))
    assert table.size == 8192            # two resizes (at 1,536 and 3,072 keys)
    assert _largest_bucket_at_insertion(1024, ops) < 8
    answers = jdk(_script("chm", 1024, ops)[:-1] + ["cow", "table"])
    order, cow, (size,) = answers
    assert order == cow == table.order((s, k) for k, s in seqs.items())
    assert size == table.size


@pytest.mark.requires("java")
def test_route_orders_after_changes_are_the_jdks():
    """java_route_orders against pickupTopicRouteData's two collections on this JDK,
    for queueDataMaps with puts, re-puts and removals."""
    rng = random.Random(21)
    script, expected = [], []
    for n in (5, 11, 12, 13, 24, 30, 48, 60):
        names = [f"broker-{rng.randrange(10_000)}" for _ in range(n)]
        history = [("put", b) for b in names]
        history += [("remove", b) for b in rng.sample(names, n // 3)]
        history += [("put", b) for b in rng.sample(names, n // 2)]
        script += ["new hm -"] + [f"{op} {b}" for op, b in history] + ["order", "copy"]
        expected.append(java_route_orders(history, jdk=17))
    answers = jdk(script)
    for i, (queue_datas, broker_datas) in enumerate(expected):
        assert (answers[2 * i], answers[2 * i + 1]) == (queue_datas, broker_datas)
