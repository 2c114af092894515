"""The frames captured between a real Java 4.9.8 NameServer, Broker and clients
(../shared/vectors/java-4.9.8) decode exactly, re-encode identically, and their
bodies decode with the right body codec."""

import json
import zlib

import pytest

from support import (
    SERIALIZE_TYPE_BYTES,
    VECTOR_BY_FILE,
    VECTORS,
    VECTORS_DIR,
    split_frame,
    vector_body,
    vector_bytes,
)

by_file = pytest.mark.parametrize("entry", VECTORS, ids=[e["file"] for e in VECTORS])


def files(predicate):
    return [e["file"] for e in VECTORS if predicate(e)]


def test_index_lists_every_frame_file():
    on_disk = {p.name for p in VECTORS_DIR.glob("*.bin")}
    assert on_disk == set(VECTOR_BY_FILE)
    for entry in VECTORS:
        for link in ("response_file", "response_to"):
            if entry.get(link) is not None:
                assert entry[link] in VECTOR_BY_FILE


def test_unsupported_code_gets_no_response():
    entry = VECTOR_BY_FILE["9999_unsupported_code_request.bin"]
    assert entry["code"] == 9999
    assert entry.get("response_file") is None
    assert not [e for e in VECTORS if e.get("response_to") == entry["file"]]


@by_file
def test_frame_layout_matches_index(entry):
    data = vector_bytes(entry["file"])
    stype, header, body = split_frame(data)
    assert len(data) == entry["frame_len"]
    assert len(header) == entry["header_len"]
    assert len(body) == entry["body_len"]
    assert stype == SERIALIZE_TYPE_BYTES[entry["serialize_type"]]
    if stype == 0:
        assert json.loads(header) == entry["header"]


@by_file
def test_decode(impl, entry):
    data = vector_bytes(entry["file"])
    header = entry["header"]
    cmd = impl.decode_frame(data)
    assert cmd.serialize_type == entry["serialize_type"]
    assert cmd.code == entry["code"] == header["code"]
    assert cmd.language == header["language"]
    assert cmd.version == header["version"]
    assert cmd.opaque == entry["opaque"] == header["opaque"]
    assert cmd.flag == entry["flag"] == header["flag"]
    assert cmd.remark == header.get("remark")
    assert cmd.ext_fields == header.get("extFields")
    assert cmd.body == split_frame(data)[2]
    assert len(cmd.body) == entry["body_len"]
    assert cmd.is_response == (entry["kind"] == "response")


@by_file
def test_decode_accepts_any_buffer(impl, entry):
    data = vector_bytes(entry["file"])
    expected = impl.decode_frame(data)
    assert impl.decode_frame(bytearray(data)) == expected
    assert impl.decode_frame(memoryview(data)) == expected
    assert impl.decode_frame(memoryview(b"\x00" * 5 + data)[5:]) == expected


@by_file
def test_reencode(impl, entry):
    data = vector_bytes(entry["file"])
    cmd = impl.decode_frame(data)
    again = impl.encode_frame(cmd)
    assert impl.decode_frame(again) == cmd
    stype, header, body = split_frame(again)
    assert stype == SERIALIZE_TYPE_BYTES[entry["serialize_type"]]
    if stype == 0:
        # What Java would see: the same header as a parsed object.
        assert json.loads(header) == entry["header"]
    # Ext fields keep the decoded order, so the frame is byte-identical.
    assert again == data


def test_responses_echo_their_request(impl):
    for entry in VECTORS:
        if entry.get("response_file") is None:
            continue
        request = impl.decode_frame(vector_bytes(entry["file"]))
        response = impl.decode_frame(vector_bytes(entry["response_file"]))
        assert response.opaque == request.opaque
        assert response.serialize_type == request.serialize_type
        assert response.is_response and not request.is_response


# ---------------------------------------------------------------- bodies

REGISTER_REQUESTS = files(lambda e: e["code"] == 103 and e["kind"] == "request")
ROUTE_RESPONSES = files(lambda e: e["request_code"] == 105 and e["kind"] == "response"
                        and e["body_len"])
CLUSTER_INFO_RESPONSES = files(lambda e: e["request_code"] == 106 and e["kind"] == "response")
TOPIC_LIST_RESPONSES = files(lambda e: e["request_code"] in (206, 224, 304, 311, 312, 313)
                             and e["kind"] == "response")
KV_TABLE_RESPONSES = files(lambda e: e["kind"] == "response" and e["body_len"] and (
    e["request_code"] == 219 or e["request_code"] == 103))


def test_body_groups_are_not_empty():
    assert len(REGISTER_REQUESTS) == 2
    assert len(ROUTE_RESPONSES) == 5
    assert len(CLUSTER_INFO_RESPONSES) == 3
    assert len(TOPIC_LIST_RESPONSES) == 6
    assert "103_register_broker_rmq_response.bin" in KV_TABLE_RESPONSES
    assert "219_get_kvlist_by_namespace_response.bin" in KV_TABLE_RESPONSES


@pytest.mark.parametrize("name", REGISTER_REQUESTS)
def test_register_broker_body(impl, bodies, name):
    body = vector_body(name)
    ext = VECTOR_BY_FILE[name]["header"]["extFields"]
    assert ext["compressed"] == "false"
    assert int(ext["bodyCrc32"]) == impl.body_crc32(body) == zlib.crc32(body) & 0x7FFFFFFF

    decoded = bodies.decode_register_broker_body(body)
    assert decoded == json.loads(body)
    table = decoded["topicConfigSerializeWrapper"]["topicConfigTable"]
    assert table and all(name == tc["topicName"] for name, tc in table.items())
    assert bodies.encode_register_broker_body(decoded) == body
    # The same table through Java's compressed form (it carries no order or
    # topicSysFlag, which are false and 0 in these bodies).
    compressed = bodies.encode_register_broker_body(decoded, compressed=True)
    assert compressed[:1] == b"\x78"
    assert bodies.decode_register_broker_body(compressed) == decoded


@pytest.mark.parametrize("name", ROUTE_RESPONSES)
def test_topic_route_data(bodies, name):
    body = vector_body(name)
    route = bodies.decode_topic_route_data(body)

    expected = json.loads(body)
    for bd in expected["brokerDatas"]:
        bd["brokerAddrs"] = {int(k): v for k, v in bd["brokerAddrs"].items()}
    assert route == expected
    assert all(isinstance(k, int) for bd in route["brokerDatas"] for k in bd["brokerAddrs"])

    # Version 409 >= 401: the standard form, byte for byte.
    assert VECTOR_BY_FILE[VECTOR_BY_FILE[name]["response_to"]]["header"]["version"] >= 401
    assert bodies.encode_topic_route_data(route, legacy=False) == body
    # The legacy form differs only in the unquoted broker-id keys.
    legacy = bodies.encode_topic_route_data(route, legacy=True)
    assert legacy == body.replace(b'"brokerAddrs":{"0":', b'"brokerAddrs":{0:')
    assert bodies.decode_topic_route_data(legacy) == route


@pytest.mark.parametrize("name", CLUSTER_INFO_RESPONSES)
def test_cluster_info(bodies, name):
    body = vector_body(name)
    broker_addr_table, cluster_addr_table = bodies.decode_cluster_info(body)
    if b"broker-a" in body:
        assert broker_addr_table == {"broker-a": {"brokerAddrs": {0: "127.0.0.1:10911"},
                                                  "brokerName": "broker-a",
                                                  "cluster": "DefaultCluster"}}
        assert cluster_addr_table == {"DefaultCluster": ["broker-a"]}
        assert b'"brokerAddrs":{0:"127.0.0.1:10911"}' in body   # the legacy form
    else:
        assert broker_addr_table == {} and cluster_addr_table == {}
    assert bodies.encode_cluster_info(broker_addr_table, cluster_addr_table) == body


@pytest.mark.parametrize("name", KV_TABLE_RESPONSES)
def test_kv_table(bodies, name):
    body = vector_body(name)
    table = bodies.decode_kv_table(body)
    assert table == json.loads(body)["table"]
    assert list(table) == list(json.loads(body)["table"])
    if name.startswith("219"):
        assert any(not value.isascii() for value in table.values())
    assert bodies.encode_kv_table(table) == body


@pytest.mark.parametrize("name", TOPIC_LIST_RESPONSES)
def test_topic_list(bodies, name):
    body = vector_body(name)
    topics, broker_addr = bodies.decode_topic_list(body)
    expected = json.loads(body)
    assert topics == expected["topicList"]
    assert broker_addr == expected.get("brokerAddr")
    assert bodies.encode_topic_list(topics, broker_addr) == body
