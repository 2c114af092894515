"""The compressed RegisterBrokerBody scanner (scan.c rb_scan_compressed_body)
against the general path.

The compiled RouteTable reads a compressed body by inflating it and scanning the
inflated bytes in C; whenever the scanner says slow, the general decoder
(decode_register_broker_body + the reference's _checked_body) runs instead. Either
way the table must end up exactly as when it is fed the decoded dict, and as the
reference RouteTable fed the same bytes: same answer (or the same BodyError), same
topics, routes and data version.
"""

import struct
import tracemalloc
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rmq
import rmq.bodies
from rmq.errors import BodyError
from support import NOW_A, NOW_B, general_body, load_fallback, route_table

pytestmark = pytest.mark.skipif(rmq.IMPLEMENTATION != "compiled",
                                reason="the scanners exist only in the compiled core")

if rmq.IMPLEMENTATION == "compiled":
    from rmq import _core as core
else:                                       # pragma: no cover
    core = None

DV = b'{"counter":3,"stateVersion":1,"timestamp":1700000000000}'


def chunk(b):
    return struct.pack(">i", len(b)) + b


def raw_body(lines, dv=DV, filters=b"[]", tail=b"", count=None):
    """Java's compressed RegisterBrokerBody before zlib, from raw topic lines."""
    return (chunk(dv) + struct.pack(">i", len(lines) if count is None else count)
            + b"".join(chunk(line) for line in lines) + chunk(filters) + tail)


def compressed(*args, **kwargs):
    return zlib.compress(raw_body(*args, **kwargs))


def lines(n, fmt=b"T%d 8 4 6 SINGLE_TAG"):
    return [fmt % i for i in range(n)]


def register(rt, body, now_ms=NOW_A, addr="10.0.0.1:10911", name="b"):
    try:
        return rt.register_broker("c", addr, name, 0, "ha", body=body, now_ms=now_ms)
    except BodyError as e:
        return "error", str(e)


def state(rt):
    topics = rt.all_topics()
    return (topics, {t: rt.topic_route(t) for t in topics}, rt.live_brokers())


# A first registration to update: the compressed body is applied over it.
BASE = rmq.bodies.register_broker_body(
    [rmq.bodies.topic_config(t, 2, 2) for t in ("T0", "base-1", "base-2")],
    {"counter": 1, "timestamp": 1})


def check(data, fast=None):
    """The contract on one compressed body; ``fast`` True/False also asserts the
    path taken."""
    try:
        got = core._scan_compressed_body(data)
    except BodyError:
        got = None
    expected = general_body(data)
    if fast is not None:
        assert (got is not None) == fast, (got, expected)
    if got is not None:
        assert expected != "error"
        assert (got, {}, []) == expected
    try:
        decoded = core.decode_register_broker_body(data)
    except BodyError as e:
        decoded = e
    for base in (None, BASE):
        tables = [route_table(core)(), route_table(core)(), route_table(load_fallback())()]
        if base is not None:
            for rt in tables:
                register(rt, base, now_ms=1)
                register(rt, base, now_ms=1, addr="10.0.0.2:10911", name="b2")
        answers = [register(tables[0], data), register(tables[2], data),
                   ("error", str(decoded)) if isinstance(decoded, BodyError)
                   else register(tables[1], decoded)]
        # Error messages are the compiled decoder's (the reference's JSON reader
        # words some differently): equal to the dict path's, an error for both.
        assert answers[0] == answers[2]
        assert answers[0] == answers[1] or answers[0][0] == answers[1][0] == "error"
        states = [state(rt) for rt in tables]
        assert states[0] == states[1] == states[2]
        # Once more, later: the same data version (unchanged) for the same body.
        answers = [register(rt, data, now_ms=NOW_B) for rt in tables[:2]]
        assert answers[0] == answers[1]
        assert state(tables[0]) == state(tables[1])
    return got


# ---------------------------------------------------------------- the fast path

def test_java_body_takes_the_scanner_path():
    data = rmq.bodies.encode_register_broker_body(rmq.bodies.register_broker_body(
        [rmq.bodies.topic_config(f"T{i}", 8, 4, perm=[2, 4, 6][i % 3]) for i in range(50)],
        {"counter": 9, "stateVersion": 2, "timestamp": 1700000000000}), compressed=True)
    got = check(data, fast=True)
    assert got[:3] == (9, 2, 1700000000000)
    assert got[3][:2] == [("T0", "T0", 2, 8, 4, 0), ("T1", "T1", 4, 8, 4, 0)]


def test_attributes_take_the_scanner_path():
    data = rmq.bodies.encode_register_broker_body(rmq.bodies.register_broker_body(
        [rmq.bodies.topic_config(f"T{i}", 8, 4, attributes={"+message.type": "NORMAL"})
         for i in range(5)] + [rmq.bodies.topic_config("E", attributes={})],
        {"counter": 9}), compressed=True)
    check(data, fast=True)


@pytest.mark.parametrize("line", [
    b"T 8 4 6 SINGLE_TAG {}", b'T 8 4 6 SINGLE_TAG {"a":"b","c":"\\u00e9"}',
    b'T 8 4 6 SINGLE_TAG {"a":1,"b":[null,true,1.5e3],"c":{}}', b"T 8 4 6 SINGLE_TAG {} extra",
    b"T 8 4 6 SINGLE_TAG {}\t", b"T 8 4 6 SINGLE_TAG    ", b"T 8 4 6 MULTI_TAG",
    b"T 8 4 6 \xe4\xb8\xad", b"\xe4\xb8\xad\xe6\x96\x87 8 4 6 SINGLE_TAG",
    b'T"\\{ 8 4 6 SINGLE_TAG', b" 8 4 6 SINGLE_TAG",
    b"T +8 -0 +6 X", b"T 0008 00000000000000000004 0 X", b"T 2147483647 -2147483648 -1 X",
    b"T 8 4 6 X {} 7 8",
])
def test_lines_take_the_scanner_path(line):
    check(compressed([line, b"other 1 1 6 X"]), fast=True)


@pytest.mark.parametrize("kwargs", [
    dict(dv=b"null"), dict(dv=b"{}"), dict(dv=b' { "counter" : null , "timestamp" : null } '),
    dict(dv=b'{"counter":-9223372036854775808,"stateVersion":9223372036854775807}'),
    dict(dv=b'{"counter":1,"counter":2,"other":[1,{"x":"y"}],"timestamp":5}'),
    dict(filters=b"null"), dict(filters=b" [ ] "),
    dict(tail=struct.pack(">i", 0)), dict(tail=struct.pack(">i", 0) + b"garbage"),
    dict(tail=b"\x00"), dict(tail=b"\x00\x00\x01"),
])
def test_envelopes_take_the_scanner_path(kwargs):
    check(compressed(lines(3), **kwargs), fast=True)


def test_empty_table():
    check(compressed([]), fast=True)
    check(compressed([], filters=b"null", tail=struct.pack(">i", 0)), fast=True)


# ---------------------------------------------------------------- the slow path

@pytest.mark.parametrize("line", [
    # duplicates (the general path keeps the first position, the last values)
    b"T0 9 9 2 X",
    # numbers Integer.parseInt refuses
    b"T 2147483648 4 6 X", b"T 8 -2147483649 6 X", b"T 8 4 99999999999 X", b"T 8 4 + X",
    b"T 8 4 - X", b"T 0x10 4 6 X", b"T 8 4 6.0 X", b"T 8 4 1e3 X", b"T \xef\xbc\x91 4 6 X",
    b"T  8 4 6 X", b"T 8 4 6", b"T 8 4", b"", b" ", b"T\t8 4 6 X",
    # attributes
    b"T 8 4 6 X {x}", b"T 8 4 6 X []", b"T 8 4 6 X null", b'T 8 4 6 X {"a": "b"}',
    b"T 8 4 6 X  {}", b"T 8 4 6 X {1:2}", b"T 8 4 6 X 6 7 8", b'T 8 4 6 X \t{"a":1}', b'T 8 4 6 X {"a":"\\x"}',
    b'T 8 4 6 X {"a":"\xff"}', b"T 8 4 6 X " + b"[" * 70 + b"]" * 70,
    b"T 8 4 6 X {" + b'"a":[' * 70 + b"]" * 70 + b"}",
    # invalid UTF-8 anywhere in the line
    b"\xff 8 4 6 X", b"T 8 4 6 \xc0\xaf", b"\xed\xa0\x80 8 4 6 X", b"T 8 4 6 X {} \xf5",
    b"T\xe4\xb8 8 4 6 X",
])
def test_odd_lines_match(line):
    check(compressed(lines(3) + [line]))


def test_duplicates_take_the_general_path_and_match():
    check(compressed([b"A 1 1 6 X", b"B 2 2 6 X", b"A 3 3 4 X"]), fast=False)
    check(compressed([b"T0 1 1 6 X", b"T0 1 1 6 X"]), fast=False)


@pytest.mark.parametrize("kwargs", [
    dict(dv=b""), dict(dv=b"[]"), dict(dv=b"0"), dict(dv=b'{"counter":1.5}'),
    dict(dv=b'{"counter":"1"}'), dict(dv=b'{"counter":true}'),
    dict(dv=b'{"counter":9223372036854775808}'), dict(dv=b'{"counter":1} x'),
    dict(dv=b'{\\u0063ounter:1}'), dict(dv=b'{"\\u0063ounter":1}'), dict(dv=b"{1:2}"),
    dict(filters=b'["10.0.0.9:1"]'), dict(filters=b"{}"), dict(filters=b"[1]"),
    dict(filters=b""), dict(filters=b"[] x"),
    dict(tail=struct.pack(">i", 1) + chunk(b'{"topic":"T0","bname":"b","epoch":1}')),
    dict(tail=struct.pack(">i", 1) + chunk(b'{"topic":5}')), dict(tail=struct.pack(">i", -1)),
    dict(tail=struct.pack(">i", 2) + chunk(b"{}")),
    dict(count=4), dict(count=2), dict(count=-1), dict(count=1 << 30),
])
def test_odd_envelopes_match(kwargs):
    check(compressed(lines(3), **kwargs))


@pytest.mark.parametrize("cut", [0, 1, 3, 4, 10, 60, 61, 64, 70, -20, -6, -3, -1])
def test_truncated_chunks_match(cut):
    raw = raw_body(lines(3))
    check(zlib.compress(raw[:cut]))
    # a chunk length beyond the end of the body
    bad = bytearray(raw)
    bad[len(chunk(DV)) + 4:len(chunk(DV)) + 8] = struct.pack(">i", 1 << 20)
    check(zlib.compress(bytes(bad)))


def test_bad_streams_match():
    data = compressed(lines(20))
    for bad in (data[:-1], data[:len(data) // 2], data[:2] + b"\x00" * 10,
                data[:-4] + b"\x00\x00\x00\x00"):
        check(bad)


def test_inflate_bound_matches():
    # A bomb: refused before the scan, with the general path's message.
    data = compressed([b"T 1 1 6 X" + b" " * 200_000] * 100)
    assert len(zlib.decompress(data)) > 64 * len(data)
    with pytest.raises(BodyError, match="inflates beyond"):
        core._scan_compressed_body(data)
    check(data)


TOKENS = [b"T", b"T0", b"T1", b"\xe4\xb8\xad", b"8", b"+8", b"-0", b"0", b"007", b"-1",
          b"2147483647", b"2147483648", b"SINGLE_TAG", b"{}", b'{"a":"b"}', b"{", b"[]",
          b"", b"x", b"\xff", b"\t"]


@given(st.lists(st.lists(st.sampled_from(TOKENS), max_size=8).map(b" ".join), max_size=6),
       st.sampled_from([b"[]", b"null", b"", b'["a"]']),
       st.sampled_from([b"", b"\x00", struct.pack(">i", 0), struct.pack(">i", 1)]))
def test_random_lines_match(line_list, filters, tail):
    check(compressed(line_list, filters=filters, tail=tail))


# ---------------------------------------------------------------- memory

def test_million_topics_without_python_objects():
    # The topics are C records over the inflated bytes: the traced Python peak of
    # the registration is the inflated body, not a dict per topic (the old path
    # peaked near 900 MB RSS for this body).
    n = 1_000_000
    raw = raw_body(lines(n, b"TopicTest_%07d 8 8 6 SINGLE_TAG {}"))
    data = zlib.compress(raw, 6)
    assert core._scan_compressed_body(zlib.compress(raw_body(lines(3)))) is not None
    rt = route_table(core)()
    tracemalloc.start()
    try:
        result = rt.register_broker("c", "10.0.0.1:10911", "b", 0, "ha", body=data,
                                    now_ms=NOW_A)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result["topics"] == n
    assert peak < 2 * len(raw), (peak, len(raw))
    assert rt.topic_route("TopicTest_0999999")["queueDatas"][0]["readQueueNums"] == 8
