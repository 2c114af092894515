"""The frames captured between real Java NameServers, Brokers and clients
(tests/vectors: java-4.9.8 and java-5.0.0) decode exactly, re-encode identically, and
their bodies decode with the right body codec, on both cores. Every test runs over
both sets; what differs between them (5.0.0 answers an unknown code, answers in the
server's serialize type, zone mode's legacy route form) is said where it is checked."""

import json
import zlib

import pytest

from nameserver import parse_json_body
from support import SERIALIZE_TYPE_BYTES, VECTOR_SETS, split_frame

SETS = list(VECTOR_SETS.values())
V498, V500 = VECTOR_SETS["java-4.9.8"], VECTOR_SETS["java-5.0.0"]
FRAMES = [(vs, entry) for vs in SETS for entry in vs.frames]
by_set = pytest.mark.parametrize("vs", SETS, ids=[vs.name for vs in SETS])
by_file = pytest.mark.parametrize("vs, entry", FRAMES,
                                  ids=[f"{vs.name}/{e['file']}" for vs, e in FRAMES])


def files(predicate):
    """(set, file name) of the frames of every set that ``predicate(set, entry)`` keeps."""
    return [(vs, e["file"]) for vs, e in FRAMES if predicate(vs, e)]


def by_name(group):
    return pytest.mark.parametrize("vs, name", group, ids=[f"{vs.name}/{n}" for vs, n in group])


def request_of(vs, entry):
    return vs.by_file[entry["response_to"]]


def test_both_sets_are_here():
    assert len(V498.frames) == 73 and len(V500.frames) == 132


@by_set
def test_index_lists_every_frame_file(vs):
    on_disk = {p.name for p in vs.dir.glob("*.bin")}
    assert on_disk == set(vs.by_file)
    for entry in vs.frames:
        for link in ("response_file", "response_to"):
            if entry.get(link) is not None:
                assert entry[link] in vs.by_file
        if entry.get("response_file") is not None:
            assert vs.by_file[entry["response_file"]]["response_to"] == entry["file"]


def test_4_9_8_sends_nothing_for_an_unknown_code():
    entry = V498.by_file["9999_unsupported_code_request.bin"]
    assert entry["code"] == 9999
    assert entry.get("response_file") is None
    assert not [e for e in V498.frames if e.get("response_to") == entry["file"]]


@pytest.mark.parametrize("name", ["9999_unsupported_code_request.bin",
                                  "9999_unsupported_code_rmq_request.bin",
                                  "9999_unsupported_code_rmqsrv_request.bin",
                                  "1005_controller_get_metadata_info_request.bin",
                                  "1010_get_controller_config_request.bin"])
def test_5_0_0_answers_code_3_to_an_unknown_code(name):
    code = V500.by_file[name]["code"]
    response = V500.by_file[V500.by_file[name]["response_file"]]["header"]
    assert (response["code"], response["remark"]) == (3, f" request type {code} not supported")


def test_5_0_0_oneway_requests_get_no_response():
    oneway = [e["file"] for e in V500.frames if e["kind"] == "request" and e["flag"] & 2]
    assert sorted(oneway) == ["322_query_data_version_heartbeat_request.bin",
                              "904_broker_heartbeat_request.bin"]
    unanswered = [e["file"] for e in V500.frames
                  if e["kind"] == "request" and e.get("response_file") is None]
    assert sorted(unanswered) == sorted(oneway)


@by_file
def test_frame_layout_matches_index(vs, entry):
    data = vs.bytes(entry["file"])
    stype, header, body = split_frame(data)
    assert len(data) == entry["frame_len"]
    assert len(header) == entry["header_len"]
    assert len(body) == entry["body_len"]
    assert stype == SERIALIZE_TYPE_BYTES[entry["serialize_type"]]
    if stype == 0:
        assert json.loads(header) == entry["header"]


@by_file
def test_decode(impl, vs, entry):
    data = vs.bytes(entry["file"])
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
    assert cmd.is_oneway == bool(entry["flag"] & 2)


@by_file
def test_decode_accepts_any_buffer(impl, vs, entry):
    data = vs.bytes(entry["file"])
    expected = impl.decode_frame(data)
    assert impl.decode_frame(bytearray(data)) == expected
    assert impl.decode_frame(memoryview(data)) == expected
    assert impl.decode_frame(memoryview(b"\x00" * 5 + data)[5:]) == expected


@by_file
def test_reencode(impl, vs, entry):
    data = vs.bytes(entry["file"])
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


#: The serialize type of a 5.0.0 answer: the NameServer's own, whatever the request's.
SERVER_TYPE_5 = {"default": "JSON", "rocketmq-serialize-namesrv": "ROCKETMQ"}


@by_set
def test_responses_echo_their_request(impl, vs):
    answered = [e for e in vs.frames if e.get("response_file") is not None]
    assert answered
    for entry in answered:
        request = impl.decode_frame(vs.bytes(entry["file"]))
        response_entry = vs.by_file[entry["response_file"]]
        response = impl.decode_frame(vs.bytes(entry["response_file"]))
        assert response.opaque == request.opaque
        assert response.is_response and not request.is_response
        if vs is V498:      # 4.9.8 mirrors the request's type and version
            assert response.serialize_type == request.serialize_type
            assert response.version == request.version
        else:               # 5.0.0 answers in its own type, with its own version
            assert response.serialize_type == \
                SERVER_TYPE_5[response_entry["capture"]["session"]], entry["file"]
            assert response.version == 413


def test_5_0_0_json_headers_list_their_fields_alphabetically():
    for entry in V500.frames:
        stype, header, _ = split_frame(V500.bytes(entry["file"]))
        if stype == 0:
            keys = list(json.loads(header, object_pairs_hook=lambda pairs: pairs))
            names = [k for k, _ in keys]
            assert names == sorted(names), entry["file"]


# ---------------------------------------------------------------- bodies

def _response(code):
    return lambda vs, e: e["request_code"] == code and e["kind"] == "response" and e["body_len"]


def _request(code):
    return lambda vs, e: e["code"] == code and e["kind"] == "request" and e["body_len"]


REGISTER_REQUESTS = files(_request(103))
ROUTE_RESPONSES = files(_response(105))
CLUSTER_INFO_RESPONSES = files(_response(106))
TOPIC_LIST_RESPONSES = files(lambda vs, e: e["request_code"] in (206, 224, 304, 311, 312, 313)
                             and e["kind"] == "response")
KV_TABLE_RESPONSES = files(lambda vs, e: e["kind"] == "response" and e["body_len"] and (
    e["request_code"] in (219, 103)))
DATA_VERSIONS = files(lambda vs, e: e["request_code"] == 322 and e["body_len"])
MEMBER_GROUPS = files(_response(901))
TOPIC_ROUTE_REQUESTS = files(_request(217))
CLIENT_CONFIG_REQUESTS = files(_request(47))
PROPERTIES = files(lambda vs, e: e["body_len"] and (
    (e["code"] == 318 and e["kind"] == "request")
    or (e["request_code"] in (319, 47) and e["kind"] == "response")))
BODY_GROUPS = (REGISTER_REQUESTS, ROUTE_RESPONSES, CLUSTER_INFO_RESPONSES, TOPIC_LIST_RESPONSES,
               KV_TABLE_RESPONSES, DATA_VERSIONS, MEMBER_GROUPS, TOPIC_ROUTE_REQUESTS,
               CLIENT_CONFIG_REQUESTS, PROPERTIES)


def test_every_body_is_checked():
    checked = [item for group in BODY_GROUPS for item in group]
    assert len(checked) == len(set(checked))
    with_body = files(lambda vs, e: e["body_len"])
    assert sorted(checked, key=repr) == sorted(with_body, key=repr)


def test_body_groups_are_not_empty():
    def count(group, vs):
        return sum(1 for s, _ in group if s is vs)
    assert [count(REGISTER_REQUESTS, vs) for vs in (V498, V500)] == [2, 5]
    assert [count(ROUTE_RESPONSES, vs) for vs in (V498, V500)] == [5, 13]
    assert [count(CLUSTER_INFO_RESPONSES, vs) for vs in (V498, V500)] == [3, 5]
    assert [count(TOPIC_LIST_RESPONSES, vs) for vs in (V498, V500)] == [6, 7]
    assert (V498, "103_register_broker_rmq_response.bin") in KV_TABLE_RESPONSES
    assert (V498, "219_get_kvlist_by_namespace_response.bin") in KV_TABLE_RESPONSES
    assert (V500, "103_register_broker_v498_response.bin") in KV_TABLE_RESPONSES
    assert [count(DATA_VERSIONS, vs) for vs in (V498, V500)] == [0, 3]
    assert [count(MEMBER_GROUPS, vs) for vs in (V498, V500)] == [0, 2]


@by_name(REGISTER_REQUESTS)
def test_register_broker_body(impl, bodies, vs, name):
    body = vs.body(name)
    ext = vs.by_file[name]["header"]["extFields"]
    assert ext["compressed"] == "false"
    assert int(ext["bodyCrc32"]) == impl.body_crc32(body) == zlib.crc32(body) & 0x7FFFFFFF

    decoded = bodies.decode_register_broker_body(body)
    assert decoded == json.loads(body)
    wrapper = decoded["topicConfigSerializeWrapper"]
    table = wrapper["topicConfigTable"]
    assert table and all(name == tc["topicName"] for name, tc in table.items())
    assert bodies.encode_register_broker_body(decoded) == body
    if vs is V500 and vs.by_file[name]["header"]["version"] == 413:
        # 5.x: the wrapper carries the static-topic mappings and the DataVersion its
        # stateVersion
        assert wrapper["topicQueueMappingInfoMap"] == wrapper["topicQueueMappingDetailMap"] == {}
        assert set(wrapper["dataVersion"]) == {"counter", "stateVersion", "timestamp"}
        assert "mappingDataVersion" in wrapper
    # The same table through Java's compressed form: it carries the DataVersion, the
    # topic configs (without order or topicSysFlag, false and 0 in these bodies) and
    # the filter servers.
    compressed = bodies.encode_register_broker_body(decoded, compressed=True)
    assert compressed[:1] == b"\x78"
    again = bodies.decode_register_broker_body(compressed)
    assert again["filterServerList"] == decoded["filterServerList"]
    again_wrapper = again["topicConfigSerializeWrapper"]
    assert again_wrapper["dataVersion"] == wrapper["dataVersion"]
    assert again_wrapper["topicConfigTable"] == table


def _standard_route_form_asked(request):
    """README rule: the standard form from version 401 on or with
    acceptStandardJsonOnly=true, except in zone mode (5.x re-encodes the filtered route
    with plain encode(): the legacy form)."""
    ext = request["header"].get("extFields") or {}
    if ext.get("__ZONE_MODE") == "true":
        return False
    return request["header"]["version"] >= 401 or ext.get("acceptStandardJsonOnly") == "true"


@by_name(ROUTE_RESPONSES)
def test_topic_route_data(bodies, vs, name):
    body = vs.body(name)
    route = bodies.decode_topic_route_data(body)

    expected, legacy = parse_json_body(body)
    for bd in expected["brokerDatas"]:
        bd["brokerAddrs"] = {int(k): v for k, v in bd["brokerAddrs"].items()}
    assert route == expected
    assert all(isinstance(k, int) for bd in route["brokerDatas"] for k in bd["brokerAddrs"])
    assert legacy == (not _standard_route_form_asked(request_of(vs, vs.by_file[name]))) \
        or not route["brokerDatas"]
    if vs is V500:
        assert all("enableActingMaster" in bd for bd in route["brokerDatas"])

    # Byte for byte in the form it came in; the other form differs only in the
    # broker-id keys.
    assert bodies.encode_topic_route_data(route, legacy=legacy) == body
    standard = bodies.encode_topic_route_data(route, legacy=False)
    legacy_form = bodies.encode_topic_route_data(route, legacy=True)
    assert legacy_form == standard.replace(b'"brokerAddrs":{"0":', b'"brokerAddrs":{0:')
    assert bodies.decode_topic_route_data(legacy_form) == route


@by_name(CLUSTER_INFO_RESPONSES)
def test_cluster_info(bodies, vs, name):
    body = vs.body(name)
    broker_addr_table, cluster_addr_table = bodies.decode_cluster_info(body)
    expected = json.loads(body.replace(b'"brokerAddrs":{0:', b'"brokerAddrs":{"0":'))
    for bd in expected["brokerAddrTable"].values():
        bd["brokerAddrs"] = {int(k): v for k, v in bd["brokerAddrs"].items()}
    assert broker_addr_table == expected["brokerAddrTable"]
    assert cluster_addr_table == expected["clusterAddrTable"]
    assert list(broker_addr_table) == list(expected["brokerAddrTable"])
    for bd in broker_addr_table.values():     # the legacy form
        assert b'"brokerAddrs":{0:"%s"}' % bd["brokerAddrs"][0].encode() in body
        # 5.0.0 always writes enableActingMaster, also for a 4.9.8 broker; 4.9.8 never
        assert ("enableActingMaster" in bd) == (vs is V500)
    if vs is V498 and broker_addr_table:
        assert broker_addr_table == {"broker-a": {"brokerAddrs": {0: "127.0.0.1:10911"},
                                                  "brokerName": "broker-a",
                                                  "cluster": "DefaultCluster"}}
        assert cluster_addr_table == {"DefaultCluster": ["broker-a"]}
    if name == "106_get_broker_cluster_info_five_response.bin":
        assert broker_addr_table["v4broker"]["enableActingMaster"] is False
        assert broker_addr_table["v5broker"]["zoneName"] == "zone-a"
    assert bodies.encode_cluster_info(broker_addr_table, cluster_addr_table) == body


@by_name(KV_TABLE_RESPONSES)
def test_kv_table(bodies, vs, name):
    body = vs.body(name)
    table = bodies.decode_kv_table(body)
    assert table == json.loads(body)["table"]
    assert list(table) == list(json.loads(body)["table"])
    if name == "219_get_kvlist_by_namespace_response.bin" and vs is V498:
        assert any(not value.isascii() for value in table.values())
    assert bodies.encode_kv_table(table) == body


@by_name(TOPIC_LIST_RESPONSES)
def test_topic_list(bodies, vs, name):
    body = vs.body(name)
    topics, broker_addr = bodies.decode_topic_list(body)
    expected = json.loads(body)
    assert topics == expected["topicList"]
    assert broker_addr == expected.get("brokerAddr")
    assert bodies.encode_topic_list(topics, broker_addr) == body


@by_name(DATA_VERSIONS)
def test_data_version(bodies, vs, name):
    body = vs.body(name)
    dv = bodies.decode_data_version(body)
    assert dv == json.loads(body)
    assert list(dv) == ["counter", "stateVersion", "timestamp"]
    assert bodies.encode_data_version(dv) == body


@by_name(MEMBER_GROUPS)
def test_broker_member_group(bodies, vs, name):
    body = vs.body(name)
    group = bodies.decode_broker_member_group(body)
    assert group == {"brokerAddrs": {0: "127.0.0.1:29931"}, "brokerName": "v5acting",
                     "cluster": "V5Cluster"}
    assert bodies.encode_broker_member_group(group["cluster"], group["brokerName"],
                                             group["brokerAddrs"]) == body


@by_name(TOPIC_ROUTE_REQUESTS)
def test_register_topic_body(bodies, vs, name):
    route = bodies.decode_topic_route_data(vs.body(name))
    assert route == {"brokerDatas": [], "filterServerTable": {}, "queueDatas": [
        {"brokerName": "v5broker", "perm": 6, "readQueueNums": 2, "topicSysFlag": 0,
         "writeQueueNums": 2}]}


@by_name(CLIENT_CONFIG_REQUESTS)
def test_client_config_request_body(bodies, vs, name):
    # GetRemoteClientConfigBody: the keys asked
    assert bodies.json_loads(vs.body(name)) == {"keys": ["orderMessageEnable", "rocketmqHome"]}


@by_name(PROPERTIES)
def test_properties_body(vs, name):
    from rmq.namesrv.config import parse_properties
    text = vs.body(name).decode("utf-8")
    lines = text.splitlines()
    assert text.endswith("\n") and all("=" in line for line in lines)
    props = parse_properties(text)
    assert list(props) == [line.partition("=")[0] for line in lines]
    if vs.by_file[name]["request_code"] in (319, 47) and vs is V500:
        assert list(props) == sorted(props)     # 5.0.0 lists the keys sorted
