"""Body codecs, case by case: the JSON forms Java writes (legacy and standard),
the compressed RegisterBrokerBody, and the typed errors of bad bodies."""

import json
import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq import decode_frame
from rmq.errors import BodyError
from support import V5


def chunk(data):
    return struct.pack(">i", len(data)) + data


def compressed_body(lines, data_version=b'{"counter":1,"stateVersion":0,"timestamp":2}',
                    filter_servers=b"[]", mappings=None):
    """A compressed RegisterBrokerBody laid out as the spec says."""
    parts = [chunk(data_version), struct.pack(">i", len(lines)), *map(chunk, lines),
             chunk(filter_servers)]
    if mappings is not None:
        parts += [struct.pack(">i", len(mappings)), *map(chunk, mappings)]
    return zlib.compress(b"".join(parts))


# ---------------------------------------------------------------- JSON forms


def test_legacy_unquoted_int_keys_load_with_str_keys(impl):
    assert impl.json_loads(b'{0:"a",12:"b"}') == {"0": "a", "12": "b"}
    assert impl.json_loads(b'{"t":{ 0 : "a" , -3:"b"}}') == {"t": {"0": "a", "-3": "b"}}


@pytest.mark.parametrize("data", [b'{"t":{\xd9\xa3:"a"}}', b"{1.5:2}", b"{0x1:2}", b"{a:1}",
                                  b"{-:1}", b"[1:2]"])
def test_only_integer_keys_may_be_unquoted(impl, data):
    with pytest.raises(BodyError):
        impl.json_loads(data)


@pytest.mark.parametrize("make", [bytes, bytearray, memoryview])
def test_json_loads_accepts_buffers(impl, make):
    assert impl.json_loads(make(b'{"a":[1,2.5,null,true,"\\u00e9"]}')) == \
        {"a": [1, 2.5, None, True, "\u00e9"]}


@pytest.mark.parametrize("text", ["\u00e9", "\u4e2d", "\U0001F600", "a\U00010000b", "\x7f"])
def test_standard_form_escapes_non_ascii(impl, text):
    data = impl.json_dumps({"k": text})
    assert data == json.dumps({"k": text}, separators=(",", ":")).encode("ascii")
    assert impl.json_loads(data) == {"k": text}


@pytest.mark.parametrize("text", ["\u00e9", "\u4e2d", "\U0001F600", "a\U00010000b"])
def test_legacy_form_writes_utf8(impl, text):
    data = impl.json_dumps({0: text}, legacy=True)
    assert data == b'{0:"' + text.encode("utf-8") + b'"}'
    assert impl.json_loads(data) == {"0": text}


@pytest.mark.parametrize("text", ["\"", "\\", "\n", "\r", "\t", "\b", "\f", "\x00", "\x1f"])
@pytest.mark.parametrize("legacy", [False, True])
def test_control_characters_are_escaped(impl, text, legacy):
    data = impl.json_dumps([text], legacy=legacy)
    assert data == json.dumps([text]).encode("ascii")


def test_dumps_is_compact_and_keeps_dict_order(impl):
    value = {"b": [1, -2, 3.5, None, True, False], "a": {}, "c": [], "d": "x"}
    assert impl.json_dumps(value) == b'{"b":[1,-2,3.5,null,true,false],"a":{},"c":[],"d":"x"}'
    assert impl.json_dumps(value, legacy=True) == impl.json_dumps(value)


def test_big_integers(impl):
    for n in (1 << 63, -(1 << 63) - 1, 10 ** 30):
        assert impl.json_dumps([n]) == f"[{n}]".encode()
        assert impl.json_loads(f"[{n}]".encode()) == [n]


# ---------------------------------------------------------------- RegisterBrokerBody


def test_compressed_body(impl):
    body = compressed_body([b"T 4 8 6 SINGLE_TAG", b'U 1 2 7 MULTI_TAG {"+k":"v"}'],
                           filter_servers=b'["127.0.0.1:1"]')
    assert impl.decode_register_broker_body(body) == {
        "filterServerList": ["127.0.0.1:1"],
        "topicConfigSerializeWrapper": {
            "dataVersion": {"counter": 1, "stateVersion": 0, "timestamp": 2},
            "topicConfigTable": {
                "T": {"order": False, "perm": 6, "readQueueNums": 4,
                      "topicFilterType": "SINGLE_TAG", "topicName": "T", "topicSysFlag": 0,
                      "writeQueueNums": 8},
                "U": {"attributes": {"+k": "v"}, "order": False, "perm": 7, "readQueueNums": 1,
                      "topicFilterType": "MULTI_TAG", "topicName": "U", "topicSysFlag": 0,
                      "writeQueueNums": 2}}}}


def test_compressed_body_from_a_5x_broker(impl):
    body = compressed_body([b"T 4 4 6 SINGLE_TAG"],
                           mappings=[b'{"topic":"T","bname":"b","epoch":3}'])
    wrapper = impl.decode_register_broker_body(body)["topicConfigSerializeWrapper"]
    assert wrapper["topicQueueMappingInfoMap"] == {"T": {"topic": "T", "bname": "b", "epoch": 3}}


def test_compressed_topic_line_with_trailing_space(impl):
    # Java's TopicConfig.decode splits with String.split(" "), which drops
    # trailing empty strings: a trailing space leaves five fields.
    body = compressed_body([b"T 4 4 6 SINGLE_TAG "])
    wrapper = impl.decode_register_broker_body(body)["topicConfigSerializeWrapper"]
    table = wrapper["topicConfigTable"]
    assert table["T"]["topicFilterType"] == "SINGLE_TAG" and "attributes" not in table["T"]


@pytest.mark.parametrize("line", [b"T 4 4 6", b"T 4 x 6 SINGLE_TAG", b"T 4 4 6.0 SINGLE_TAG",
                                  b"T  4 4 6 SINGLE_TAG", b"T 4 4 99999999999 SINGLE_TAG",
                                  b"T 4 4 6 SINGLE_TAG [1]", b"T 4 4 6 SINGLE_TAG {",
                                  b"\xff 4 4 6 SINGLE_TAG"])
def test_bad_compressed_topic_line(impl, line):
    with pytest.raises(BodyError):
        impl.decode_register_broker_body(compressed_body([line]))


@pytest.mark.parametrize("count", [-1, 2, 1 << 30])
def test_compressed_topic_count_past_the_data(impl, count):
    raw = chunk(b"{}") + struct.pack(">i", count) + chunk(b"T 4 4 6 X") + chunk(b"[]")
    with pytest.raises(BodyError) as info:
        impl.decode_register_broker_body(zlib.compress(raw))
    if count != 2:
        assert str(count) in str(info.value)


def test_zlib_content_is_recognised_without_the_flag(impl):
    # 5.x brokers may send a compressed body while saying compressed=false.
    plain = {"filterServerList": [], "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": 1, "stateVersion": 0, "timestamp": 2},
        "topicConfigTable": {}}}
    raw = zlib.decompress(impl.encode_register_broker_body(plain, compressed=True))
    for level in (0, 1, 6, 9):           # every zlib header Java's Deflater may write
        assert impl.decode_register_broker_body(zlib.compress(raw, level)) == plain


# ---------------------------------------------------------------- TopicRouteData


ROUTE = {"brokerDatas": [{"brokerAddrs": {1: "10.0.0.2:10911", 0: "10.0.0.1:10911"},
                          "brokerName": "b\u00e9", "cluster": "c"}],
         "filterServerTable": {},
         "queueDatas": [{"brokerName": "b\u00e9", "perm": 6, "readQueueNums": 4,
                         "topicSysFlag": 0, "writeQueueNums": 4}]}


def test_route_standard_form(impl):
    assert impl.encode_topic_route_data(ROUTE) == (
        b'{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"},'
        b'"brokerName":"b\\u00e9","cluster":"c"}],"filterServerTable":{},'
        b'"queueDatas":[{"brokerName":"b\\u00e9","perm":6,"readQueueNums":4,'
        b'"topicSysFlag":0,"writeQueueNums":4}]}')


def test_route_legacy_form(impl):
    assert impl.encode_topic_route_data(ROUTE, legacy=True) == (
        b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},'
        b'"brokerName":"b\xc3\xa9","cluster":"c"}],"filterServerTable":{},'
        b'"queueDatas":[{"brokerName":"b\xc3\xa9","perm":6,"readQueueNums":4,'
        b'"topicSysFlag":0,"writeQueueNums":4}]}')


def test_route_reads_the_pre_4_9_spelling(impl):
    route = {"brokerDatas": [], "queueDatas": [{"brokerName": "b", "perm": 6, "readQueueNums": 1,
                                                "topicSynFlag": 3, "writeQueueNums": 1}]}
    assert b'"topicSysFlag":3' in impl.encode_topic_route_data(route)


def test_route_keeps_both_arrays(bodies):
    # ali-ons sorts queueDatas and brokerDatas: both must be present, even empty.
    data = bodies.encode_topic_route_data({})
    assert json.loads(data) == {"brokerDatas": [], "filterServerTable": {}, "queueDatas": []}
    assert bodies.decode_topic_route_data(b"{}") == \
        {"brokerDatas": [], "filterServerTable": {}, "queueDatas": []}


def test_route_optional_fields(bodies):
    route = dict(ROUTE, orderTopicConf="b:4",
                 topicQueueMappingByBroker={"b": {"bname": "b", "epoch": 1}})
    data = bodies.encode_topic_route_data(route)
    assert list(json.loads(data)) == ["brokerDatas", "filterServerTable", "orderTopicConf",
                                      "queueDatas", "topicQueueMappingByBroker"]
    assert bodies.decode_topic_route_data(data) == route


# ---------------------------------------------------------------- other bodies


def test_cluster_info_and_member_group_use_the_legacy_form(bodies):
    addrs = {0: "127.0.0.1:10911"}
    info = bodies.encode_cluster_info(
        {"b": {"brokerAddrs": addrs, "brokerName": "b", "cluster": "c"}}, {"c": ["b"]})
    assert b'"brokerAddrs":{0:"127.0.0.1:10911"}' in info
    group = bodies.encode_broker_member_group("c", "b", addrs)
    assert group == (b'{"brokerMemberGroup":{"brokerAddrs":{0:"127.0.0.1:10911"},'
                     b'"brokerName":"b","cluster":"c"}}')


def test_remote_client_config_body(bodies):
    # GetRemoteClientConfigBody as Java writes it (the 5.0.0 vector's request, raw.sh)
    data = decode_frame(V5.bytes("47_get_client_config_request.bin")).body
    assert data == b'{"keys":["orderMessageEnable","rocketmqHome"]}'
    assert bodies.decode_remote_client_config(data) == ["orderMessageEnable", "rocketmqHome"]
    assert bodies.encode_remote_client_config(["orderMessageEnable", "rocketmqHome"]) == data
    assert bodies.decode_remote_client_config(b"{}") == []             # Java's default list
    assert bodies.decode_remote_client_config(b'{"keys":[],"x":1}') == []
    # items other than strings are kept (they name no setting)
    assert bodies.decode_remote_client_config(b'{"keys":["a",1,true,[],{}]}') == \
        ["a", 1, True, [], {}]
    assert bodies.decode_remote_client_config(
        bodies.encode_remote_client_config(["\u00e9", "k"])) == ["\u00e9", "k"]


@pytest.mark.parametrize("data, why", [
    (b"", "no body"), (b"null", "not a JSON object"), (b"[]", "not a JSON object"),
    (b'"keys"', "not a JSON object"), (b"{", "invalid JSON"), (b"\xff{}", "byte 0"),
    (b'{"keys":null}', "not an array: None"), (b'{"keys":"k"}', "not an array: 'k'"),
    (b'{"keys":{"a":1}}', "not an array: an object"), (b'{"keys":5}', "not an array: 5"),
    (b'{"keys":["k",null]}', "holds a null"),
])
def test_bad_remote_client_config_bodies(bodies, data, why):
    # Java throws on these (no body, not an object, keys not a list, a null key):
    # the answer is SYSTEM_ERROR; here a BodyError that says why
    with pytest.raises(BodyError, match=why):
        bodies.decode_remote_client_config(data)


@given(st.binary(max_size=64) | st.builds(
    lambda k: json.dumps({"keys": k}).encode(),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(), st.lists, max_leaves=6)))
def test_remote_client_config_decoder_gives_keys_or_a_body_error(bodies, data):
    # only rmq.errors escape a decoder: a list of keys, or BodyError
    try:
        keys = bodies.decode_remote_client_config(data)
    except BodyError:
        return
    assert isinstance(keys, list) and None not in keys


@pytest.mark.parametrize("decode, data", [
    ("decode_topic_route_data", b"[]"),
    ("decode_topic_route_data", b'{"brokerDatas":[{"brokerAddrs":{"x":"a"}}]}'),
    ("decode_topic_route_data", b'{"brokerDatas":[5]}'),
    ("decode_cluster_info", b'"x"'),
    ("decode_cluster_info", b'{"brokerAddrTable":[1]}'),
    ("decode_kv_table", b'{"table":["a"]}'),
    ("decode_kv_table", b"{"),
    ("decode_topic_list", b'{"topicList":{"a":1}}'),
    ("decode_data_version", b'{"counter":"1"}'),
    ("decode_data_version", b'{"counter":1.5}'),
    ("decode_data_version", b'{"counter":true}'),
    ("decode_broker_member_group", b'{"brokerMemberGroup":{"brokerAddrs":{"a":"b"}}}'),
])
def test_bad_bodies(bodies, decode, data):
    with pytest.raises(BodyError):
        getattr(bodies, decode)(data)
