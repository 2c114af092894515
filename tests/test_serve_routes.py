"""FrameDecoder.serve_routes: route queries answered from the route table inside
the core (the compiled one recognises and answers them in C, the GIL released), in
the table's answer serialize type whatever the request's, everything else handed
back; the same on both implementations."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq import bodies
from rmq.errors import ProtocolError, UnknownSerializeType
from rmq._wire import topic_not_exist
from support import V5, frame, load_compiled, load_fallback, route_table


def table(impl):
    """A table with T1..T3 on two brokers (T3 on broker-b only)."""
    rt = route_table(impl)()
    for name, addr, topics in (("broker-a", "10.0.0.1:10911", ["T1", "T2", "Tü"]),
                               ("broker-b", "10.0.0.2:10911", ["T1", "T3"])):
        b = bodies.register_broker_body([bodies.topic_config(t, 4, 4, 6) for t in topics],
                                        {"counter": 1, "timestamp": 1})
        rt.register_broker("C", addr, name, 0, addr, body=b, now_ms=0)
    return rt


class Forms:
    """The answers the table gives, per form: STANDARD["T1"] etc."""

    def __init__(self, rt, legacy):
        self.rt, self.legacy = rt, legacy

    def __getitem__(self, topic):
        return self.rt.route_body(topic, self.legacy)


@pytest.fixture
def rt(impl):
    return table(impl)


@pytest.fixture
def STANDARD(rt):
    return Forms(rt, False)


@pytest.fixture
def LEGACY(rt):
    return Forms(rt, True)


def route_request(impl, topic, *, version=409, opaque=1, accept=None, stype="JSON", flag=0):
    ext = {"topic": topic}
    if accept is not None:
        ext["acceptStandardJsonOnly"] = accept
    return impl.RemotingCommand(105, version=version, opaque=opaque, flag=flag, ext_fields=ext,
                                serialize_type=stype)


def answers_of(impl, data):
    d = impl.FrameDecoder()
    return d.feed(data)


STYPES = ["JSON", "ROCKETMQ"]


def test_answers_are_json_unless_told(impl, rt):
    assert rt.answer_serialize_type == "JSON"
    with pytest.raises(UnknownSerializeType, match="'json'"):
        rt.answer_serialize_type = "json"
    assert rt.answer_serialize_type == "JSON"


@pytest.mark.parametrize("answer", STYPES)
@pytest.mark.parametrize("stype", STYPES)
def test_hits_are_answered_in_the_request_form(impl, rt, STANDARD, LEGACY, stype, answer):
    rt.answer_serialize_type = answer
    reqs = [route_request(impl, "T1", version=409, opaque=1, stype=stype),
            route_request(impl, "T1", version=317, opaque=2, stype=stype),
            route_request(impl, "T1", version=121, opaque=3, accept="true", stype=stype),
            route_request(impl, "T3", version=121, opaque=4, accept="TRUE", stype=stype),
            route_request(impl, "T3", version=121, opaque=5, accept="false", stype=stype),
            route_request(impl, "Tü", version=400, opaque=6, stype=stype),
            route_request(impl, "Tü", version=401, opaque=7, stype=stype)]
    data = b"".join(impl.encode_frame(r) for r in reqs)
    out, others, error = rt.serve_routes(impl.FrameDecoder(), data)
    assert error is None and others == []
    got = answers_of(impl, out)
    assert [(c.opaque, c.body) for c in got] == [
        (1, STANDARD["T1"]), (2, LEGACY["T1"]), (3, STANDARD["T1"]), (4, STANDARD["T3"]),
        (5, LEGACY["T3"]), (6, LEGACY["Tü"]), (7, STANDARD["Tü"])]
    assert STANDARD["T1"] != LEGACY["T1"] and STANDARD["Tü"] != LEGACY["Tü"]
    for c in got:   # in the table's serialize type, as Java 5.x answers
        assert c.code == 0 and c.flag == 1 and c.serialize_type == answer
        assert c.language == "JAVA" and c.ext_fields is None and c.remark is None


@pytest.mark.parametrize("answer", STYPES)
@pytest.mark.parametrize("stype", STYPES)
def test_answers_equal_the_generic_response(impl, rt, STANDARD, stype, answer):
    rt.answer_serialize_type = answer
    for opaque in (77, -5, 2**31 - 1):
        req = route_request(impl, "T1", opaque=opaque, stype=stype)
        out, others, _ = rt.serve_routes(impl.FrameDecoder(), impl.encode_frame(req))
        expect = req.response(0, body=STANDARD["T1"])
        expect.serialize_type = answer
        assert out == impl.encode_frame(expect)


def test_answers_follow_the_table(impl, rt, STANDARD):
    data = impl.encode_frame(route_request(impl, "T3", opaque=1))
    before = STANDARD["T3"]
    assert answers_of(impl, rt.serve_routes(impl.FrameDecoder(), data)[0])[0].body == before
    rt.wipe_write_perm("broker-b")
    after = answers_of(impl, rt.serve_routes(impl.FrameDecoder(), data)[0])[0].body
    assert after != before and after == STANDARD["T3"]
    assert b'"perm":4' in after
    rt.delete_topic("T3")
    out, others, _ = rt.serve_routes(impl.FrameDecoder(), data)
    assert others == [] and [(c.opaque, c.code) for c in answers_of(impl, out)] == [(1, 17)]


def test_oneway_responses_and_other_codes_are_handed_back(impl, rt):
    reqs = [route_request(impl, "T1", opaque=2, flag=2),          # oneway: never answered
            route_request(impl, "T1", opaque=3, flag=1),          # a response
            impl.RemotingCommand(106, opaque=4),
            impl.RemotingCommand(105, opaque=5)]                  # no topic
    data = b"".join(impl.encode_frame(r) for r in reqs)
    out, others, error = rt.serve_routes(impl.FrameDecoder(), data)
    assert out == b"" and error is None
    assert [c.opaque for c in others] == [2, 3, 4, 5]


#: Topics without a route: the compiled core writes the answer of the first four in
#: C (printable ASCII), the others in Python; the same bytes either way.
MISSING = ["nope", "%RETRY%group", "a b:c", "x" * 3000, "Tö", 'q"uote', "back\\slash",
           "tab\tc", "\u4e2d\u6587"]


@pytest.mark.parametrize("answer", STYPES)
@pytest.mark.parametrize("stype", STYPES)
def test_missing_topics_are_answered_as_the_handler_answers(impl, rt, stype, answer):
    """TOPIC_NOT_EXIST (17) with Java's remark, in the table's serialize type: the
    bytes DefaultRequestProcessor.get_route_info (topic_not_exist) gives, whether the
    topic never existed, was deleted, or its brokers left."""
    rt.answer_serialize_type = answer
    rt.delete_topic("T3")
    rt.unregister_broker("C", "10.0.0.1:10911", "broker-a", 0)   # T2, Tü: no broker left
    topics = MISSING + ["T3", "T2", "Tü"]
    reqs = [route_request(impl, t, opaque=i, stype=stype, version=v)
            for i, t in enumerate(topics) for v in (317, 413)]
    data = b"".join(impl.encode_frame(r) for r in reqs)
    before = rt.cache_stats()["not_found"]
    out, others, error = rt.serve_routes(impl.FrameDecoder(), data)
    assert (others, error) == ([], None)
    expect = b""
    for r in reqs:
        resp = topic_not_exist(r, r.ext_fields["topic"])
        resp.serialize_type = answer
        expect += impl.encode_frame(resp)
    assert out == expect
    assert rt.cache_stats()["not_found"] - before == len(reqs)
    got = answers_of(impl, out)[0]
    assert (got.code, got.remark) == (17, "No topic route info in name server for the topic: "
                                          "nope\nSee http://rocketmq.apache.org/docs/faq/ for "
                                          "further details.")


def test_missing_topics_behind_a_miss_keep_their_order(impl, rt):
    # build=False (the pure-Python server's loop answers only cached routes): an
    # uncached route is handed back, and so is every query after it, missing or not,
    # to keep the answers in order. The compiled core builds routes in C anyway.
    data = b"".join(impl.encode_frame(route_request(impl, t, opaque=i))
                    for i, t in enumerate(["nope", "T1", "nope"]))
    out, others, _ = rt.serve_routes(impl.FrameDecoder(), data, build=False)
    answered = [(c.opaque, c.code) for c in answers_of(impl, out)]
    if impl is load_compiled():
        assert (answered, others) == ([(0, 17), (1, 0), (2, 17)], [])
    else:
        assert answered == [(0, 17)] and [c.opaque for c in others] == [1, 2]


def test_the_java_5_0_0_missing_route_answer(impl, rt):
    """The 5.0.0 vector's request for a topic no broker has, answered field for field
    as Java 5.0.0 answered it (its opaque, remark, version, serialize type)."""
    java = impl.decode_frame(V5.bytes("105_get_routeinfo_missing_response.bin"))
    out, others, _ = rt.serve_routes(impl.FrameDecoder(),
                                     V5.bytes("105_get_routeinfo_missing_request.bin"))
    (got,) = answers_of(impl, out)
    assert others == []
    assert (got.code, got.flag, got.remark, got.ext_fields, got.version, got.opaque,
            got.serialize_type, got.language, got.body) == \
        (java.code, java.flag, java.remark, java.ext_fields, java.version, java.opaque,
         java.serialize_type, java.language, java.body)


def test_error_keeps_what_came_before(impl, rt):
    good = impl.encode_frame(route_request(impl, "T1", opaque=9))
    bad = b"\x00\x00\x00\x08\x07\x00\x00\x00xxxx"               # serialize type 7
    d = impl.FrameDecoder()
    out, others, error = rt.serve_routes(d, good + bad)
    assert isinstance(error, ProtocolError)
    assert [c.opaque for c in answers_of(impl, out)] == [9]
    # The stream is over: later bytes are not decoded, the error is returned again.
    out, others, error = rt.serve_routes(d, good)
    assert (out, others) == (b"", []) and isinstance(error, ProtocolError)


TABLES = {}


@settings(max_examples=300)
@given(topics=st.lists(st.sampled_from(["T1", "T2", "T3", "T4", "Tü"]), min_size=1,
                       max_size=12),
       versions=st.lists(st.sampled_from([121, 317, 400, 401, 409]), min_size=12, max_size=12),
       others_at=st.sets(st.integers(0, 11), max_size=2),
       stype=st.sampled_from(STYPES), answer=st.sampled_from(STYPES),
       cuts=st.lists(st.integers(0, 10_000), max_size=3))
def test_compiled_and_python_agree_under_any_chunking(topics, versions, others_at, stype, answer,
                                                      cuts):
    c, py = load_compiled(), load_fallback()
    reqs = [route_request(py, t, version=v, opaque=i, stype=stype)
            for i, (t, v) in enumerate(zip(topics, versions))]
    for i in sorted(others_at):
        if i < len(reqs):
            reqs[i] = py.RemotingCommand(106, opaque=i, serialize_type=stype)
    data = b"".join(py.encode_frame(r) for r in reqs)
    bounds = sorted({0, len(data), *(x % (len(data) + 1) for x in cuts)})
    results = []
    for impl in (c, py):
        rt = TABLES.get(impl) or TABLES.setdefault(impl, table(impl))
        rt.answer_serialize_type = answer
        d = impl.FrameDecoder()
        out = b""
        others = []
        for lo, hi in zip(bounds, bounds[1:]):
            o, rest, error = rt.serve_routes(d, data[lo:hi])
            assert error is None
            out += o
            others += [x.opaque for x in rest]
        results.append((out, others))
    assert results[0] == results[1]


def test_a_long_run_of_queries_is_answered_in_order_as_the_reference_answers():
    """More answers than the first output buffer holds (64 KiB), the queries read
    ahead of their answers in the compiled core (serve.c): every query up to the
    frame Python takes answered in order, the same bytes as the reference."""
    c, py = load_compiled(), load_fallback()
    topics = ["T1", "T2", "nope", "T3", "Tü"]
    reqs = [route_request(py, topics[i % 5], opaque=i, version=(317, 413)[i // 5 % 2])
            for i in range(600)]
    reqs[450] = py.RemotingCommand(106, opaque=450)
    data = b"".join(py.encode_frame(r) for r in reqs)
    results = []
    for impl in (c, py):
        out, others, error = table(impl).serve_routes(impl.FrameDecoder(), data)
        assert error is None
        results.append((out, [x.opaque for x in others]))
    assert results[0] == results[1]
    out, others = results[0]
    assert len(out) > 64 * 1024
    assert [a.opaque for a in answers_of(py, out)] == list(range(450))
    assert others[0] == 450


#: headers where a topic looked for before the header is read (serve.c asks for its
#: table memory early, from where Java's clients put it) is not the query's
TOPIC_ELSEWHERE = [
    # an object before extFields holding another topic
    '{"code":105,"decoy":{"topic":"T3"},"extFields":{"topic":"T1"},"flag":0,"opaque":1}',
    # topic not extFields' first key
    '{"code":105,"extFields":{"acceptStandardJsonOnly":"true","topic":"T2"},"opaque":2}',
    # an escape in the topic (the general path reads it)
    '{"code":105,"extFields":{"topic":"T\\u0031"},"opaque":3}',
    # whitespace around the key, a topic that does not exist, a bare extFields
    '{ "code" : 105 , "extFields" : { "topic" : "T1" } , "opaque" : 4 }',
    '{"code":105,"extFields":{"topic":"T9"},"opaque":5}',
    '{"code":105,"extFields":{"topic":"T1","topic":"T3"},"opaque":6}',
    '{"code":105,"extFields":{"topic":"T1',
]


def test_a_topic_found_elsewhere_than_expected_is_answered_as_the_reference_answers():
    """Each lone and in a row: the same answers and hand-backs as the reference."""
    c, py = load_compiled(), load_fallback()
    frames = [frame(h.encode()) for h in TOPIC_ELSEWHERE]
    for data in frames + [b"".join(frames[:-1])]:
        results = []
        for impl in (c, py):
            out, others, error = table(impl).serve_routes(impl.FrameDecoder(), data)
            results.append((out, [x.opaque for x in others], type(error)))
        assert results[0] == results[1], data
    out, others, _ = table(c).serve_routes(c.FrameDecoder(), frames[0])
    assert [(a.opaque, a.code, a.body) for a in answers_of(py, out)] == [
        (1, 0, table(py).route_body("T1", True))]     # (no version: the legacy form)


def test_answers_stop_at_the_limit(impl, rt, STANDARD):
    reqs = [route_request(impl, "T1", opaque=i) for i in range(10)]
    one = len(impl.encode_frame(reqs[0].response(0, body=STANDARD["T1"])))
    data = b"".join(impl.encode_frame(r) for r in reqs)
    out, others, error = rt.serve_routes(impl.FrameDecoder(), data, 3 * one - 1)
    assert error is None
    assert [c.opaque for c in answers_of(impl, out)] == [0, 1, 2]
    assert [c.opaque for c in others] == list(range(3, 10))
    out, others, _ = rt.serve_routes(impl.FrameDecoder(), data, 0)
    assert out == b"" and len(others) == 10


def test_a_route_query_behind_a_change_waits_for_it(impl, rt):
    # [DELETE_TOPIC T1, GET_ROUTEINFO T1] in one read: the query must see the delete,
    # so it is handed back (in order) instead of answered from the cache.
    reqs = [route_request(impl, "T1", opaque=1),
            impl.RemotingCommand(216, opaque=2, ext_fields={"topic": "T1"}),
            route_request(impl, "T1", opaque=3)]
    data = b"".join(impl.encode_frame(r) for r in reqs)
    out, others, error = rt.serve_routes(impl.FrameDecoder(), data)
    assert [c.opaque for c in answers_of(impl, out)] == [1]
    assert [c.opaque for c in others] == [2, 3]


# ---------------------------------------------------------------- threads (compiled)

@pytest.mark.once
@pytest.mark.parametrize("mode", ["batch", "single", "lock"])
def test_threads_serve_from_one_table_while_it_changes(mode):
    """serve.c's loop in C threads without the GIL (the I/O threads' loop, and
    bench/scaling.py's): every pass over the frames answers all of them, found and
    missing, while registrations change the table under its write lock (the readers'
    fast path and the writer's gate, per read or per answer)."""
    import threading
    c = load_compiled()
    rt = table(c)
    frames = [route_request(c, t, opaque=i) for i, t in enumerate(["T1", "T3", "nope", "Tü"])]
    data = b"".join(c.encode_frame(f) for f in frames)
    out = []
    th = threading.Thread(
        target=lambda: out.append(c._serve_threads(rt._tt, data, 2, 0.5, mode)))
    th.start()
    flips = 0
    while th.is_alive():
        b = bodies.register_broker_body(
            [bodies.topic_config(t, 4, 4, 6 if flips % 2 else 4) for t in ("T1", "T3")],
            {"counter": 2 + flips, "timestamp": 1})
        rt.register_broker("C", "10.0.0.2:10911", "broker-b", 0, "10.0.0.2:10911", body=b,
                           now_ms=0)
        flips += 1
    th.join()
    (answers,) = out
    assert len(answers) == 2 and all(a > 0 and a % len(frames) == 0 for a in answers)
    assert flips > 1


@pytest.mark.once
def test_threads_refuse_frames_the_loop_leaves_to_python():
    c = load_compiled()
    rt = table(c)
    data = c.encode_frame(route_request(c, "T1")) + c.encode_frame(c.RemotingCommand(106))
    with pytest.raises(ValueError, match="leaves to Python"):
        c._serve_threads(rt._tt, data, 1, 0.05)
    with pytest.raises(ValueError, match="at least 1"):
        c._serve_threads(rt._tt, data, 0, 0.05)
    with pytest.raises(ValueError, match="'sometimes'"):
        c._serve_threads(rt._tt, data, 1, 0.05, "sometimes")


@pytest.mark.once
def test_answers_evicted_while_others_read_are_freed_once_no_reader_holds_them():
    """Under a budget that holds a few answers, one thread alone frees what it evicts
    at once; two threads answering one query per
    read take turns evicting what the other may be writing: an answer evicted while
    another reader is in waits in the graveyard (still counted), and goes once a
    reader leaving finds no reader in. The answers stay whole (the debug build's
    sanitizer run sees no use after free), and the graveyard empties."""
    c = load_compiled()
    rt = route_table(c)()
    topics = [f"T{i}" for i in range(64)]
    for k, name in enumerate(["broker-a", "broker-b"]):
        addr = f"10.0.0.{k + 1}:10911"
        b = bodies.register_broker_body(
            [bodies.topic_config(t, 4 + (i % 5), 4, 6) for i, t in enumerate(topics)],
            {"counter": 1, "timestamp": 1})
        rt.register_broker("C", addr, name, 0, addr, body=b, now_ms=0)
    one = len(rt.route_body("T1"))
    rt.cache_budget = 4 * one
    data = b"".join(c.encode_frame(route_request(c, t, opaque=i)) for i, t in enumerate(topics))
    # one thread alone frees what it evicts at once: nothing goes to the graveyard
    evictions = rt.cache_stats()["evictions"]
    assert c._serve_threads(rt._tt, data, 1, 0.2, "single")[0] > 0
    assert rt.cache_stats()["evictions"] > evictions
    assert rt._tt._buried() == (0, 0)
    answers = c._serve_threads(rt._tt, data, 2, 0.5, "single")
    assert all(a > 0 and a % len(topics) == 0 for a in answers)
    buried, _ = rt._tt._buried()
    assert buried > 0
    # the readers are gone: whatever the last of them could not free, the next
    # reader's release does (this one's, reading alone)
    assert rt._tt._buried() == (buried, 0)
    st = rt.cache_stats()
    assert st["bytes"] <= st["budget"], st
