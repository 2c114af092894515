"""FrameDecoder.serve_routes: route queries answered from cached bodies inside the
core, everything else handed back; the same on both implementations."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.errors import ProtocolError
from support import load_compiled, load_fallback

STANDARD = {"T1": b'{"std":1}', "T2": b'{"std":2}'}
LEGACY = {"T1": b'{leg:1}', "T3": b'{leg:3}'}


def route_request(impl, topic, *, version=409, opaque=1, accept=None, stype="JSON", flag=0):
    ext = {"topic": topic}
    if accept is not None:
        ext["acceptStandardJsonOnly"] = accept
    return impl.RemotingCommand(105, version=version, opaque=opaque, flag=flag, ext_fields=ext,
                                serialize_type=stype)


def answers_of(impl, data):
    d = impl.FrameDecoder()
    return d.feed(data)


@pytest.mark.parametrize("stype", ["JSON", "ROCKETMQ"])
def test_hits_are_answered_in_the_request_form(impl, stype):
    reqs = [route_request(impl, "T1", version=409, opaque=1, stype=stype),
            route_request(impl, "T1", version=317, opaque=2, stype=stype),
            route_request(impl, "T1", version=121, opaque=3, accept="true", stype=stype),
            route_request(impl, "T3", version=121, opaque=4, accept="TRUE", stype=stype),
            route_request(impl, "T3", version=121, opaque=5, accept="false", stype=stype)]
    data = b"".join(impl.encode_frame(r) for r in reqs)
    out, others, error = impl.FrameDecoder().serve_routes(data, STANDARD, LEGACY)
    assert error is None
    # T3 with accept=TRUE wants the standard form, which is not cached: handed back.
    assert [c.opaque for c in others] == [4]
    got = answers_of(impl, out)
    assert [(c.opaque, c.body) for c in got] == [
        (1, STANDARD["T1"]), (2, LEGACY["T1"]), (3, STANDARD["T1"]), (5, LEGACY["T3"])]
    for c in got:
        assert c.code == 0 and c.flag == 1 and c.serialize_type == stype
        assert c.language == "JAVA" and c.ext_fields is None and c.remark is None


def test_answers_equal_the_generic_response(impl):
    req = route_request(impl, "T1", opaque=77)
    out, others, _ = impl.FrameDecoder().serve_routes(impl.encode_frame(req), STANDARD, LEGACY)
    assert out == impl.encode_frame(req.response(0, body=STANDARD["T1"]))


def test_misses_oneway_responses_and_other_codes_are_handed_back(impl):
    reqs = [route_request(impl, "nope", opaque=1),
            route_request(impl, "T1", opaque=2, flag=2),          # oneway: never answered
            route_request(impl, "T1", opaque=3, flag=1),          # a response
            impl.RemotingCommand(106, opaque=4),
            impl.RemotingCommand(105, opaque=5)]                  # no topic
    data = b"".join(impl.encode_frame(r) for r in reqs)
    out, others, error = impl.FrameDecoder().serve_routes(data, STANDARD, LEGACY)
    assert out == b"" and error is None
    assert [c.opaque for c in others] == [1, 2, 3, 4, 5]


def test_error_keeps_what_came_before(impl):
    good = impl.encode_frame(route_request(impl, "T1", opaque=9))
    bad = b"\x00\x00\x00\x08\x07\x00\x00\x00xxxx"               # serialize type 7
    d = impl.FrameDecoder()
    out, others, error = d.serve_routes(good + bad, STANDARD, LEGACY)
    assert isinstance(error, ProtocolError)
    assert [c.opaque for c in answers_of(impl, out)] == [9]
    # The stream is over: later bytes are not decoded, the error is returned again.
    out, others, error = d.serve_routes(good, STANDARD, LEGACY)
    assert (out, others) == (b"", []) and isinstance(error, ProtocolError)


@given(topics=st.lists(st.sampled_from(["T1", "T2", "T3", "T4"]), min_size=1, max_size=12),
       versions=st.lists(st.sampled_from([121, 317, 400, 401, 409]), min_size=12, max_size=12),
       cut=st.integers(0, 10_000))
def test_compiled_and_python_agree_under_any_chunking(topics, versions, cut):
    c, py = load_compiled(), load_fallback()
    data = b"".join(py.encode_frame(route_request(py, t, version=v, opaque=i))
                    for i, (t, v) in enumerate(zip(topics, versions)))
    cut %= len(data) + 1
    results = []
    for impl in (c, py):
        d = impl.FrameDecoder()
        out = b""
        others = []
        for part in (data[:cut], data[cut:]):
            o, rest, error = d.serve_routes(part, STANDARD, LEGACY)
            assert error is None
            out += o
            others += [x.opaque for x in rest]
        results.append((out, others))
    assert results[0] == results[1]


def test_answers_stop_at_the_limit(impl):
    reqs = [route_request(impl, "T1", opaque=i) for i in range(10)]
    one = len(impl.encode_frame(reqs[0].response(0, body=STANDARD["T1"])))
    data = b"".join(impl.encode_frame(r) for r in reqs)
    out, others, error = impl.FrameDecoder().serve_routes(data, STANDARD, LEGACY, 3 * one - 1)
    assert error is None
    assert [c.opaque for c in answers_of(impl, out)] == [0, 1, 2]
    assert [c.opaque for c in others] == list(range(3, 10))
    out, others, _ = impl.FrameDecoder().serve_routes(data, STANDARD, LEGACY, 0)
    assert out == b"" and len(others) == 10


def test_a_route_query_behind_a_change_waits_for_it(impl):
    # [DELETE_TOPIC T1, GET_ROUTEINFO T1] in one read: the query must see the delete,
    # so it is handed back (in order) instead of answered from the cache.
    reqs = [route_request(impl, "T1", opaque=1),
            impl.RemotingCommand(216, opaque=2, ext_fields={"topic": "T1"}),
            route_request(impl, "T1", opaque=3)]
    data = b"".join(impl.encode_frame(r) for r in reqs)
    out, others, error = impl.FrameDecoder().serve_routes(data, STANDARD, LEGACY)
    assert [c.opaque for c in answers_of(impl, out)] == [1]
    assert [c.opaque for c in others] == [2, 3]
