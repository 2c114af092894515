"""The compiled core's hash tables are keyed (src/_core/hash.c), and its route
answers keep Java's broker order for any number of brokers.

Topic names and topicConfigTable keys are chosen by clients and brokers. The
topic table used FNV-1a, unkeyed: names crafted to share its bucket made every
insert and lookup walk one chain. Its hash is now SipHash-1-3 under a random key
per process, checked here against the published SipHash vectors (through a
Python SipHash), against CPython's own hash, for flooding and for its seeding.

The pure-Python reference uses dicts, which CPython already hashes with a
random key: these tests are for the compiled core only.
"""

import os
import string
import subprocess
import sys

import pytest

import rmq
from rmq import bodies
from support import load_fallback, route_table

pytestmark = pytest.mark.skipif(rmq.IMPLEMENTATION != "compiled",
                                reason="the keyed C hash tables exist only in the compiled core")

if rmq.IMPLEMENTATION == "compiled":
    from rmq import _core as core
else:                                       # pragma: no cover
    core = None

M64 = (1 << 64) - 1
INITIAL_BUCKETS = 1024                      # routetable.c: a new table's buckets


# ---------------------------------------------------------------- SipHash


def _rotl(x, b):
    return ((x << b) | (x >> (64 - b))) & M64


def siphash(k0, k1, data, c_rounds, d_rounds):
    """SipHash-c-d, straight from the paper (Aumasson and Bernstein, 2012)."""
    v = [k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D,
         k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573]

    def rounds(n):
        for _ in range(n):
            v[0] = (v[0] + v[1]) & M64
            v[1] = _rotl(v[1], 13) ^ v[0]
            v[0] = _rotl(v[0], 32)
            v[2] = (v[2] + v[3]) & M64
            v[3] = _rotl(v[3], 16) ^ v[2]
            v[0] = (v[0] + v[3]) & M64
            v[3] = _rotl(v[3], 21) ^ v[0]
            v[2] = (v[2] + v[1]) & M64
            v[1] = _rotl(v[1], 17) ^ v[2]
            v[2] = _rotl(v[2], 32)

    tail = len(data) % 8
    words = [int.from_bytes(data[i:i + 8], "little") for i in range(0, len(data) - tail, 8)]
    words.append(int.from_bytes(data[len(data) - tail:], "little") | (len(data) & 0xFF) << 56)
    for m in words:
        v[3] ^= m
        rounds(c_rounds)
        v[0] ^= m
    v[2] ^= 0xFF
    rounds(d_rounds)
    return v[0] ^ v[1] ^ v[2] ^ v[3]


PAPER_KEY = (0x0706050403020100, 0x0F0E0D0C0B0A0908)    # bytes 00..0f, little-endian


@pytest.mark.parametrize("length, expected", [
    (0, 0x726FDB47DD0E0E31),       # the reference implementation's vectors.h
    (1, 0x74F839C593DC67FD),
    (15, 0xA129CA6149BE45E5),      # the paper's worked example (appendix A)
    (63, 0x958A324CEB064572),
])
def test_python_siphash_2_4_matches_the_published_vectors(length, expected):
    assert siphash(*PAPER_KEY, bytes(range(length)), 2, 4) == expected


def test_siphash_1_3_of_the_core_matches_the_python_one():
    keys = [PAPER_KEY, (0, 0), (M64, M64), (0x0123456789ABCDEF, 0xFEDCBA9876543210)]
    for k0, k1 in keys:
        for n in range(70):                  # every tail length, several words
            data = bytes((i * 37 + n) & 0xFF for i in range(n))
            assert core._siphash13(k0, k1, data) == siphash(k0, k1, data, 1, 3), (k0, k1, n)


@pytest.mark.skipif(sys.implementation.name != "cpython" or sys.hash_info.algorithm != "siphash13",
                    reason="CPython's bytes hash is SipHash-1-3 only on 3.11+")
def test_siphash_1_3_of_the_core_matches_cpython():
    # With PYTHONHASHSEED=0 CPython hashes bytes with SipHash-1-3 under a zero key.
    datas = [b"x", b"TopicTest", b"%RETRY%group", "brøker-1".encode(), bytes(range(40))]
    out = subprocess.run(
        [sys.executable, "-c", f"print([hash(d) for d in {datas!r}])"],
        env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True, text=True, check=True)
    for data, h in zip(datas, eval(out.stdout)):
        assert core._siphash13(0, 0, data) == h & M64, data


def _hash_in_a_new_process(data):
    code = f"from rmq import _core; print(_core._hash({data!r}))"
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True, env={**os.environ, "PYTHONHASHSEED": "0"}).stdout)


def test_the_hash_is_keyed_per_process():
    data = b"TopicTest"
    mine = core._hash(data)
    assert core._hash(data) == mine                             # one key for the process
    assert core._hash(data) != core._siphash13(0, 0, data)      # not the zero key
    others = {_hash_in_a_new_process(data) for _ in range(2)}
    assert len(others) == 2 and mine not in others              # a new key each process


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_keeps_the_key_and_its_tables():
    """The child inherits the key, as CPython's hash secret: the tables it
    inherits were hashed with it."""
    rt = route_table(core)()
    names = [f"T{i}" for i in range(3000)]                      # past the first growth
    _register(rt, "broker-a", names)
    before = {t: rt.route_body(t) for t in names[::97]}
    rt.forget_route()                                           # the child builds them again
    parent = core._hash(b"x")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                                # pragma: no cover
        try:
            ok = core._hash(b"x") == parent and all(
                rt.route_body(t) == body for t, body in before.items())
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    answer = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    assert answer == b"1"


# ---------------------------------------------------------------- flooding


def _fnv1a_bucket(h, mask):
    """The bucket of the old hash_name (64-bit FNV-1a folded to 32 bits)."""
    return (h ^ (h >> 32)) & mask


def fnv1a_flood(count, mask=INITIAL_BUCKETS - 1, prefix=b"flood-"):
    """``count`` topic names (``prefix`` + 4 letters or digits) that the old unkeyed
    hash put in one bucket of a ``mask + 1``-bucket table."""
    prime = 1099511628211
    h = 1469598103934665603
    for c in prefix:
        h = ((h ^ c) * prime) & M64
    alphabet = (string.ascii_letters + string.digits).encode()
    want, names = None, []
    for a in alphabet:
        ha = ((h ^ a) * prime) & M64
        for b in alphabet:
            hb = ((ha ^ b) * prime) & M64
            for c in alphabet:
                hc = ((hb ^ c) * prime) & M64
                for d in alphabet:
                    hd = ((hc ^ d) * prime) & M64
                    bucket = _fnv1a_bucket(hd, mask)
                    if want is None:
                        want = bucket
                    if bucket == want:
                        names.append((prefix + bytes([a, b, c, d])).decode())
                        if len(names) == count:
                            return names
    raise AssertionError("alphabet too small")


def _register(rt, broker, topics, addr="10.0.0.1:10911"):
    body = bodies.register_broker_body(
        [bodies.topic_config(t, 4, 4) for t in topics], {"counter": 1, "timestamp": 1})
    return rt.register_broker("DefaultCluster", addr, broker, 0, addr, body=body, now_ms=0)


def test_names_crafted_against_fnv1a_do_not_share_a_chain():
    names = fnv1a_flood(400)
    rt = route_table(core)()
    _register(rt, "broker-a", names)
    stats = rt._tt._hash_stats()
    assert stats["topics"] == 400 and stats["buckets"] == INITIAL_BUCKETS
    # FNV-1a chained all 400 in one bucket; 400 random names in 1024 buckets
    # chain a handful (P(some chain > 12) is below 1e-11).
    assert stats["max_chain"] <= 12, stats
    for t in names[::50]:
        assert rt.topic_route(t)["queueDatas"][0]["brokerName"] == "broker-a"


def test_crafted_keys_still_scan_and_duplicates_are_still_found():
    # scan.c's duplicate-key check probes a table hashed the same way.
    names = fnv1a_flood(200)
    table = {n: bodies.topic_config(n) for n in names}
    raw = bodies.encode_register_broker_body(
        {"filterServerList": [], "topicConfigSerializeWrapper": {
            "dataVersion": {"counter": 1, "timestamp": 1}, "topicConfigTable": table}})
    scanned = core._scan_register_body(raw)
    assert [t[0] for t in scanned[3]] == names
    dup = raw.replace(names[1].encode(), names[0].encode())
    assert core._scan_register_body(dup) is None            # slow: the general reader decides


def test_a_large_broker_gives_back_its_buckets():
    rt = route_table(core)()
    _register(rt, "broker-small", ["Kept1", "Kept2"], addr="10.0.0.2:10911")
    _register(rt, "broker-large", [f"T{i:05d}" for i in range(20_000)])
    assert rt._tt._hash_stats()["buckets"] >= 32768
    rt.unregister_broker("DefaultCluster", "10.0.0.1:10911", "broker-large", 0)
    assert rt._tt._hash_stats()["topics"] == 2
    assert rt._tt._hash_stats()["buckets"] == INITIAL_BUCKETS
    assert sorted(rt.all_topics()) == ["Kept1", "Kept2"]
    assert rt.topic_route("Kept1")["brokerDatas"][0]["brokerName"] == "broker-small"


# ---------------------------------------------------------------- Java's order


@pytest.mark.parametrize("brokers", [1, 12, 13, 16, 17, 300])
def test_java_order_of_many_brokers_agrees_with_the_reference(brokers):
    """rt_java_order (insertion sort up to 16, heapsort past) orders a topic's brokers as Java's HashMap
    iterates them, past its resizes: answers and first flags equal the
    reference's."""
    tables = (route_table(core)(), route_table(load_fallback())())
    for rt in tables:
        for i in reversed(range(brokers)):
            topics = [bodies.topic_config("Shared", 4, 4, topic_sys_flag=i % 4),
                      bodies.topic_config(f"Own{i % 7}", 4, 4, topic_sys_flag=i % 3)]
            body = bodies.register_broker_body(topics, {"counter": 1, "timestamp": 1})
            addr = f"10.1.{i // 250}.{i % 250}:10911"
            rt.register_broker("DefaultCluster", addr, f"broker-{i * 7919 % 1000}", 0, addr,
                               body=body, now_ms=0)
    a, b = tables
    assert a.all_topics() == b.all_topics()
    for topic in a.all_topics():
        for legacy in (False, True):
            assert a.route_body(topic, legacy) == b.route_body(topic, legacy), (topic, legacy)
    assert a.unit_topics() == b.unit_topics()
    assert a.has_unit_sub_topics() == b.has_unit_sub_topics()
    assert a.system_topics() == b.system_topics()
