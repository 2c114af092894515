"""A short deterministic run of the differential fuzzer (tests/fuzz.py): compiled core
against the pure-Python reference on frames, headers, bodies and the serving path
(FrameDecoder.serve_routes + DefaultRequestProcessor.handle on each RouteTable). Any finding fails:
a non-rmq exception, a disagreement, or a result that depends on chunking.

Then one test per class of finding the fuzzer has met, on its shrunk reproducer, so a
fix can be checked by name. The long run is ``python tests/fuzz.py --count N --jobs 2``.
"""

import json
import struct

import pytest
from support import PUREPYTHON, load_compiled

if PUREPYTHON:
    # Differential: it needs both cores, and runs once, in the compiled pass.
    pytest.skip("the fuzzer compares the compiled core with the reference", allow_module_level=True)
load_compiled()

import fuzz  # noqa: E402  (tests/fuzz.py: after the check above, it imports both cores)

SEED = 20240601
#: inputs per target: ~20 s in all on this machine (handle is the slow one)
COUNTS = {"frames": 2500, "headers": 5000, "bodies": 5000, "handle": 1200}


def _report(findings):
    lines = []
    for key, e in sorted(findings.items()):
        ex = e["examples"][0]
        data = ex["input"].get("data_repr") or f"<{len(fuzz._load(ex['input'])['data'])} bytes>"
        lines.append(f"[{e['count']}] {key}\n    input {data[:300]}\n    "
                     f"{json.dumps(ex['details'], ensure_ascii=True)[:500]}")
    return "\n".join(lines)


@pytest.mark.parametrize("target", fuzz.TARGETS)
def test_short_differential_run(target):
    summary = fuzz.run(SEED, COUNTS[target], (target,), jobs=1, shrink_findings=False)
    assert summary["inputs"] == COUNTS[target]
    assert not summary["findings"], \
        f"{len(summary['findings'])} kinds of finding:\n" + _report(summary["findings"])


def test_inputs_are_deterministic():
    for target in fuzz.TARGETS:
        inputs = fuzz.inputs_for(7, target, 3)
        assert inputs and inputs == fuzz.inputs_for(7, target, 3)
    assert fuzz.inputs_for(7, "frames", 3) != fuzz.inputs_for(8, "frames", 3)


def test_the_fuzzer_sees_an_injected_disagreement(monkeypatch):
    # The harness itself: a reference that answers differently is a finding.
    monkeypatch.setattr(fuzz.P, "json_loads", lambda data: "different")
    found = fuzz.check_body({"fn": "json_loads", "data": b"[1]"})
    assert [sig[:2] for sig, _ in found] == [("json_loads", "disagree")]


# ---------------------------------------------------------------- reproducers

def frame(header, stype=0, body=b""):
    return struct.pack(">ii", 4 + len(header) + len(body), (stype << 24) | len(header)) + \
        header + body


def request(code, ext, body=b"", opaque=1):
    header = json.dumps({"code": code, "extFields": ext, "flag": 0, "language": "JAVA",
                         "opaque": opaque, "version": 409}).encode()
    return frame(header, 0, body)


UNDECODABLE_THEN_ROUTE = (frame(b'{"code":106,"extFields":5,"flag":0,"opaque":1}')
                          + request(105, {"topic": "TopicTest"}, opaque=2))
BROKER_A = {"clusterName": "DefaultCluster", "brokerAddr": "127.0.0.1:10911",
            "brokerName": "broker-a", "brokerId": "0", "haServerAddr": "127.0.0.1:10912"}
COMPRESSED_A = {**BROKER_A, "compressed": "true"}
REGISTER_A = request(103, BROKER_A, fuzz.REGISTER_BODY, opaque=0)


def session(*frames):
    data = b"".join(frames)
    return {"data": data, "cuts": [0, len(data)], "limit": -1}


def route_with(field, value):
    qd = {"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
          "writeQueueNums": 4, field: value}
    return json.dumps({"brokerDatas": [], "filterServerTable": {}, "queueDatas": [qd]}).encode()


def mapping_body(topic_value):
    return (b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,'
            b'"stateVersion":0,"timestamp":1},"topicConfigTable":{"T0":{"perm":6,'
            b'"readQueueNums":4,"topicName":"T0","writeQueueNums":4},"T1":{}},'
            b'"topicQueueMappingInfoMap":{"T0":{"bname":"broker-a","topic":' + topic_value +
            b"}}}}")


def compressed_mapping(topic_value):
    import zlib
    chunk = fuzz._chunk
    inner = (chunk(b'{"counter":1}') + struct.pack(">i", 0) + chunk(b"[]") +
             struct.pack(">i", 1) + chunk(b'{"bname":"broker-a","topic":' + topic_value + b"}"))
    return zlib.compress(inner)


def deep_ext(n):
    return frame(b'{"code":1,"extFields":{"a":' + b'{"a":' * n + b"1" + b"}" * n + b"}}")


REPRODUCERS = {
    # pure: RecursionError (repr of the nested value in HeaderError's message)
    "ext-value-nested-500-deep": ("decode_frame", {"data": deep_ext(500)}),
    "ext-value-nested-600-deep": ("decode_frame", {"data": deep_ext(600)}),
    "header-field-nested-500-deep": (
        "decode_frame", {"data": frame(b'{"flag":' + b'{"a":' * 500 + b"1" + b"}" * 500 + b"}")}),
    # compiled: BodyError "nesting too deep" above 512; pure: parses
    "json-nested-513-deep": ("body", {"fn": "json_loads", "data": b"[" * 513 + b"]" * 513}),
    "header-unknown-field-nested-513-deep": (
        "decode_frame", {"data": frame(b'{"code":1,"x":' + b"[" * 513 + b"]" * 513 + b"}")}),
    # compiled keeps 105, pure resets it to 0
    "duplicate-code-then-null": ("decode_frame", {"data": frame(b'{"code":105,"code":null}')}),
    "duplicate-version-then-null": (
        "decode_frame", {"data": frame(b'{"version":409,"version":null}')}),
    # REGISTER_TOPIC: pure serves, compiled SYSTEM_ERROR (OverflowError in the C table)
    "register-topic-queue-nums-10e300": (
        "session", session(REGISTER_A, request(217, {"topic": "T"},
                                               route_with("readQueueNums", 10 ** 300)))),
    "register-topic-queue-nums-2e40": (
        "session", session(REGISTER_A, request(217, {"topic": "T"},
                                               route_with("writeQueueNums", 1 << 40)))),
    # REGISTER_TOPIC: both answer SYSTEM_ERROR from a TypeError/ValueError/AttributeError
    "register-topic-queue-nums-string": (
        "session", session(REGISTER_A, request(217, {"topic": "T"},
                                               route_with("perm", "false")))),
    "register-topic-queue-nums-list": (
        "session", session(REGISTER_A, request(217, {"topic": "T"},
                                               route_with("readQueueNums", [1])))),
    "register-topic-queue-data-not-object": (
        "session", session(REGISTER_A, request(217, {"topic": "T"},
                                               b'{"queueDatas":[5]}'))),
    "register-topic-broker-datas-bool": (
        "session", session(REGISTER_A, request(217, {"topic": "T"},
                                               b'{"brokerDatas":true,"queueDatas":[]}'))),
    # compressed topicQueueMappingInfoMap entry whose "topic" is not a string: compiled
    # SYSTEM_ERROR (TypeError/AttributeError) with the broker kept, pure registers it
    "register-broker-mapping-topic-bool": (
        "session", session(request(103, COMPRESSED_A, compressed_mapping(b"true")))),
    "register-broker-mapping-topic-null": (
        "session", session(request(103, COMPRESSED_A, compressed_mapping(b"null")))),
    "register-broker-mapping-topic-number": (
        "session", session(request(103, COMPRESSED_A, compressed_mapping(b"5")))),
    "register-broker-mapping-topic-list": (
        "session", session(request(103, COMPRESSED_A, compressed_mapping(b'["T"]')))),
    # a mapping info nested ~500 deep (under the core's 512): RecursionError in the
    # table (copy.deepcopy) after the broker was added: SYSTEM_ERROR, tables changed
    "register-broker-mapping-nested-500-deep": (
        "session", session(request(103, BROKER_A, mapping_body(
            b'"T0","x":' + b"[" * 500 + b"]" * 500)))),
    "compressed-mapping-topic-list": (
        "body", {"fn": "decode_register_broker_body", "data": compressed_mapping(b'["T"]')}),
    "compressed-mapping-topic-object": (
        "body", {"fn": "decode_register_broker_body", "data": compressed_mapping(b"{}")}),
    # the engine: a batch whose frame does not decode, then a route query: Python
    # closed the connection but let it go on, and the route query was answered
    "engine-route-query-after-an-undecodable-frame": (
        "engine", {"data": UNDECODABLE_THEN_ROUTE, "cuts": [0, len(UNDECODABLE_THEN_ROUTE)],
                   "max": 300}),
    # rmq.bodies: TypeError instead of BodyError
    "topic-route-data-broker-datas-number": (
        "body", {"fn": "decode_topic_route_data", "data": b'{"brokerDatas":327}'}),
    "cluster-info-cluster-value-number": (
        "body", {"fn": "decode_cluster_info", "data": b'{"clusterAddrTable":{"c":5}}'}),
}


@pytest.mark.parametrize("name", sorted(REPRODUCERS))
def test_reproducer(name):
    kind, inp = REPRODUCERS[name]
    found = fuzz.CHECKS[kind](inp)
    assert not found, "\n".join(f"{fuzz._signature(sig)}: {json.dumps(d, ensure_ascii=True)[:600]}"
                                for sig, d in found)
