"""The compiled core and the pure-Python twin agree on the wire's constants and forms.

Each side keeps its own copy of some facts (C enums in wire.h, cdef enums in
codec.pxi, Python constants in rmq.protocol and rmq.fallback): these tests fail
as soon as one of them drifts, whichever the suite's selected implementation.
"""

import struct

import pytest

from rmq.errors import BodyError, FrameTooLarge
from rmq.protocol import (CURRENT_VERSION, DEFAULT_MAX_FRAME_LENGTH, FLAG_ONEWAY, FLAG_RESPONSE,
                          LANGUAGES, MAX_JSON_DEPTH, SERIALIZE_TYPES, V4_9_4, RequestCode)
from support import route_table

ROUTE = RequestCode.GET_ROUTEINFO_BY_TOPIC


def frame(impl, code=ROUTE, stype="JSON", **kw):
    ext = kw.pop("ext_fields", {"topic": "T1"})
    return impl.encode_frame(impl.RemotingCommand(code, ext_fields=ext, serialize_type=stype, **kw))


@pytest.mark.parametrize("stype", SERIALIZE_TYPES)
@pytest.mark.parametrize("language", [*LANGUAGES, "42", "NOT_A_LANGUAGE"])
@pytest.mark.parametrize("flag", [0, FLAG_RESPONSE, FLAG_ONEWAY, FLAG_RESPONSE | FLAG_ONEWAY])
def test_header_constants_agree(compiled, fallback, stype, language, flag):
    # serialize type codes, flag bits, language codes and the version written
    kw = dict(stype=stype, language=language, flag=flag, opaque=7, version=CURRENT_VERSION)
    raw = frame(compiled, **kw)
    assert raw == frame(fallback, **kw)
    assert raw[4] == SERIALIZE_TYPES.index(stype)
    for impl in (compiled, fallback):
        cmd = impl.decode_frame(raw)
        assert (cmd.serialize_type, cmd.flag, cmd.is_response, cmd.is_oneway) == (
            stype, flag, bool(flag & FLAG_RESPONSE), bool(flag & FLAG_ONEWAY))


def test_language_bytes_agree(compiled, fallback):
    for code, name in enumerate(LANGUAGES):
        raw = frame(compiled, stype="ROCKETMQ", language=name)
        assert raw[8 + 2] == code
        assert raw == frame(fallback, stype="ROCKETMQ", language=name)


def test_limits_agree(compiled, fallback):
    too_big = struct.pack(">ii", DEFAULT_MAX_FRAME_LENGTH - 3, 0) + b"\0" * 8
    for impl in (compiled, fallback):
        for d in (impl.FrameDecoder(), impl.FrameSplitter()):
            assert d.max_frame_length == DEFAULT_MAX_FRAME_LENGTH
        with pytest.raises(FrameTooLarge):
            impl.decode_frame(too_big)
        impl.json_loads(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH)
        with pytest.raises(BodyError):
            impl.json_loads(b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1))
    assert (compiled.DEFAULT_MAX_INFLATED, compiled.MAX_INFLATE_RATIO, compiled.MIN_INFLATE_LIMIT) == (
        fallback.DEFAULT_MAX_INFLATED, fallback.MAX_INFLATE_RATIO, fallback.MIN_INFLATE_LIMIT)


@pytest.mark.parametrize("answer", SERIALIZE_TYPES)
@pytest.mark.parametrize("stype", SERIALIZE_TYPES)
def test_the_fast_path_answers_get_routeinfo_only(compiled, fallback, stype, answer):
    # wire.h's RMQ_GET_ROUTEINFO_BY_TOPIC and RMQ_CURRENT_VERSION are rmq.protocol's;
    # the C writer's serialize type codes are SERIALIZE_TYPES' (the answer's, not the
    # request's).
    body = b'{"brokerDatas":[]}'
    for impl in (compiled, fallback):
        resp = impl.decode_frame(frame(impl, stype=stype, opaque=11)).response(body=body)
        resp.serialize_type = answer
        expect = impl.encode_frame(resp)
        assert compiled._route_answer(frame(impl, stype=stype, opaque=11), body, answer) == expect
    for code in (ROUTE - 1, ROUTE + 1, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER):
        assert compiled._route_answer(frame(compiled, code=code, stype=stype), body) is None
    assert compiled.decode_frame(expect).version == CURRENT_VERSION > V4_9_4


def register(rt):
    from test_routes import B0, reg
    reg(rt, ["T1", "T2"])
    reg(rt, ["T1", "T3"], name="broker-b", addr=B0)  # a first registration needs two topics
    reg(rt, ["T1", "T3"], name="broker-\u00e9", addr="10.0.2.1:10911")


@pytest.mark.parametrize("legacy", [False, True], ids=["standard", "legacy"])
def test_route_answer_forms_agree(compiled, fallback, legacy):
    # rt_route (the C table's cached answer), encode_topic_route_data on both sides,
    # and the pure table's answer: the same bytes, and the two forms differ.
    answers = set()
    for impl in (compiled, fallback):
        rt = route_table(impl)()
        register(rt)
        for topic in ("T1", "T2"):
            route = rt.topic_route(topic)
            body = rt.route_body(topic, legacy=legacy)
            assert body == compiled.encode_topic_route_data(route, legacy=legacy)
            assert body == fallback.encode_topic_route_data(route, legacy=legacy)
            answers.add((topic, body))
    assert len(answers) == 2
    std = compiled.encode_topic_route_data(rt.topic_route("T1"))
    assert (b'"0":' in std) and (b"\\u00e9" in std)
    leg = compiled.encode_topic_route_data(rt.topic_route("T1"), legacy=True)
    assert (b"{0:" in leg) and ("\u00e9".encode() in leg)


def test_route_answer_extras_agree(compiled, fallback):
    route = {"brokerDatas": [{"brokerAddrs": {"1": "b", "0": "a"}, "brokerName": "x",
                              "cluster": "c", "enableActingMaster": 1, "zoneName": "z"}],
             "filterServerTable": {"b": ["f2"], "a": ["f1"]}, "orderTopicConf": "x:4",
             "queueDatas": [{"brokerName": "x", "perm": "6", "readQueueNums": 2.5,
                             "topicSynFlag": 3, "writeQueueNums": True}],
             "topicQueueMappingByBroker": {"x": {"bname": "x", "epoch": 1}}}
    for legacy in (False, True):
        assert (compiled.encode_topic_route_data(route, legacy=legacy)
                == fallback.encode_topic_route_data(route, legacy=legacy))
