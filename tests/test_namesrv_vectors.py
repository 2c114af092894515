"""Replay of the requests captured from a real Java 4.9.8 NameServer
(tests/vectors/java-4.9.8) against rmq over TCP, in an order that recreates the
state the Java NameServer was in, comparing every answer structurally with the
captured one: code, flag, remark, ext fields (None and {} differ: Java sends
``"extFields":{}`` for a missing KV and for REGISTER_BROKER), language, version,
opaque, serialize type, and the body (JSON parsed, legacy vs standard form kept
apart; GET_NAMESRV_CONFIG by keys, the paths aside).

The captured requests are sent as they are, byte for byte, except where noted."""

import json

import pytest

import parts
import rmq
from nameserver import LOOPS, Client, parse_json_body, running_namesrv
from rmq import bodies
from rmq.crc32 import body_crc32
from rmq.javaorder import JavaConcurrentKeys
from support import VECTOR_BY_FILE, split_frame, vector_bytes


@pytest.fixture(params=LOOPS)
def loop(request):
    if request.param == "uvloop":
        parts.require("uvloop")
    return request.param


def send_vector(client, name):
    """Send a captured request as is; the answer."""
    client.send_raw(vector_bytes(name))
    return client.receive()


def _properties(body):
    return dict(line.partition("=")[::2] for line in body.decode().splitlines() if line)


def compare(resp, response_file, java_body=None):
    """rmq's answer against Java's, structurally (``java_body``: instead of the
    captured body)."""
    java = rmq.decode_frame(vector_bytes(response_file))
    if java_body is not None:
        java.body = java_body
    where = f"{response_file}: rmq {resp!r} vs java {java!r}"
    assert resp.code == java.code, where
    assert resp.flag == java.flag, where
    assert resp.remark == java.remark, where
    assert resp.ext_fields == java.ext_fields, where
    assert resp.serialize_type == java.serialize_type, where
    assert resp.language == java.language, where
    assert resp.version == java.version, where
    assert resp.opaque == java.opaque, where      # same request bytes, same opaque
    stype, _, _ = split_frame(vector_bytes(response_file))
    assert stype == {"JSON": 0, "ROCKETMQ": 1}[resp.serialize_type]
    if response_file.startswith("319_"):
        ours, theirs = _properties(resp.body), _properties(java.body)
        assert set(theirs) <= set(ours), sorted(set(theirs) - set(ours))
        for key in set(theirs) - {"kvConfigPath", "configStorePath", "rocketmqHome",
                                  "listenPort"}:
            assert ours[key] == theirs[key], key
    elif java.body[:1] in (b"{", b"["):
        ours, theirs = parse_json_body(resp.body), parse_json_body(java.body)
        assert ours == theirs, f"{response_file}: body {resp.body!r} vs {java.body!r}"
    else:
        assert resp.body == java.body, where


def replay(client, request_file):
    entry = VECTOR_BY_FILE[request_file]
    resp = send_vector(client, request_file)
    compare(resp, entry["response_file"])
    return resp


def broker_a_with_topic_test():
    """103_register_broker_request.bin as broker-a re-sends it once TopicTest (4/4) was
    created on it: DataVersion counter 1, TopicTest added, bodyCrc32 recomputed."""
    cmd = rmq.decode_frame(vector_bytes("103_register_broker_request.bin"))
    body = json.loads(cmd.body)
    wrapper = body["topicConfigSerializeWrapper"]
    wrapper["dataVersion"]["counter"] += 1
    wrapper["topicConfigTable"]["TopicTest"] = {
        "order": False, "perm": 6, "readQueueNums": 4, "topicFilterType": "SINGLE_TAG",
        "topicName": "TopicTest", "topicSysFlag": 0, "writeQueueNums": 4}
    cmd.body = json.dumps(body, separators=(",", ":")).encode()
    cmd.ext_fields = dict(cmd.ext_fields, bodyCrc32=str(body_crc32(cmd.body)))
    cmd.opaque = 1
    return cmd


def test_replay_java_4_9_8_vectors(tmp_path, loop):
    with running_namesrv(tmp_path, loop=loop, rocketmqHome="/opt/rocketmq") as app, \
            Client(app.address) as c:
        # a fresh NameServer: empty tables (Java's answer after both brokers left)
        compare(send_vector(c, "106_get_broker_cluster_info_empty_request.bin"),
                "106_get_broker_cluster_info_empty_response.bin")

        # broker-a boots: no ORDER_TOPIC_CONFIG yet, so no body; extFields {}
        replay(c, "103_register_broker_request.bin")
        # TopicTest created later on broker-a (by the broker, in Java): re-registration
        r = c.call(broker_a_with_topic_test())
        assert r.code == 0 and r.ext_fields == {} and r.body == b""

        # KV config
        replay(c, "100_put_kv_config_request.bin")
        r = c.request(100, {"namespace": "peer_ns", "key": "peer_key2",
                            "value": "value with spaces and ünïcödé"})
        assert r.code == 0
        replay(c, "101_get_kv_config_request.bin")
        replay(c, "101_get_kv_config_missing_request.bin")
        replay(c, "101_get_kv_config_missing_rmq_request.bin")
        replay(c, "219_get_kvlist_by_namespace_request.bin")
        replay(c, "102_delete_kv_config_request.bin")
        replay(c, "100_put_kv_config_rmq_request.bin")
        replay(c, "101_get_kv_config_rmq_request.bin")

        # routes
        for name in ("105_get_routeinfo_existing_request.bin",
                     "105_get_routeinfo_existing_rmq_request.bin",
                     "105_get_routeinfo_raw_request.bin",
                     "105_get_routeinfo_raw_rmq_request.bin",
                     "105_get_routeinfo_missing_request.bin",
                     "105_get_routeinfo_missing_rmq_request.bin",
                     "105_get_routeinfo_producer_new_topic_request.bin"):
            replay(c, name)
        replay(c, "106_get_broker_cluster_info_request.bin")
        replay(c, "106_get_broker_cluster_info_rmq_request.bin")

        # write permission: 9 topics (the 8 of the boot registration and TopicTest)
        replay(c, "205_wipe_write_perm_of_broker_request.bin")
        replay(c, "327_add_write_perm_of_broker_request.bin")
        # TBW102 was 7 at boot: wiped to 5, then set to 6 by ADD_WRITE_PERM, as captured
        replay(c, "105_get_routeinfo_producer_tbw102_request.bin")

        # Topic lists, byte for byte: the captured elements in Java 5.0.0's order
        # (issue 29), not in 4.9.8's. 5.0.0 fills its TopicList (a CopyOnWriteArraySet:
        # insertion order) from topicQueueTable, a ConcurrentHashMap(1024), where 4.9.8
        # had a HashSet filled from a HashMap: the map's order, as rmq.javaorder gives it
        # (checked against the JDK in test_javaorder); 304 lists each cluster followed
        # by its brokers (4.9.8: all of them in a HashSet).
        for name in ("206_get_all_topic_list_from_nameserver_request.bin",
                     "224_get_topics_by_cluster_request.bin",
                     "304_get_system_topic_list_from_ns_request.bin",
                     "311_get_unit_topic_list_request.bin",
                     "312_get_has_unit_sub_topic_list_request.bin",
                     "313_get_has_unit_sub_ununit_topic_list_request.bin"):
            response_file = VECTOR_BY_FILE[name]["response_file"]
            topics, broker_addr = bodies.decode_topic_list(
                rmq.decode_frame(vector_bytes(response_file)).body)
            if name.startswith("304"):
                clusters = bodies.decode_cluster_info(rmq.decode_frame(
                    vector_bytes("106_get_broker_cluster_info_response.bin")).body)[1]
                in_5_0_0_order = [n for c, names in clusters.items() for n in [c, *names]]
                assert sorted(in_5_0_0_order) == sorted(topics)
            else:
                in_5_0_0_order = JavaConcurrentKeys(1024, topics).java_order()
            resp = send_vector(c, name)
            expected = bodies.encode_topic_list(in_5_0_0_order, broker_addr)
            compare(resp, response_file, expected)
            assert resp.body == expected, name
        replay(c, "216_delete_topic_in_namesrv_request.bin")

        # config
        replay(c, "318_update_namesrv_config_request.bin")
        assert app.processor.config.orderMessageEnable is True
        replay(c, "318_update_namesrv_config_off_request.bin")
        assert app.processor.config.orderMessageEnable is False
        replay(c, "319_get_namesrv_config_request.bin")

        # ORDER_TOPIC_CONFIG, then broker-b (binary header) gets it back on registration
        replay(c, "100_put_kv_config_order_topic_request.bin")
        replay(c, "103_register_broker_rmq_request.bin")

        # both brokers leave
        replay(c, "104_unregister_broker_request.bin")
        replay(c, "104_unregister_broker_rmq_request.bin")
        compare(send_vector(c, "106_get_broker_cluster_info_empty_request.bin"),
                "106_get_broker_cluster_info_empty_response.bin")

        # Java 4.9.8 sends nothing for an unknown code (the client times out); rmq
        # answers as 5.x does: REQUEST_CODE_NOT_SUPPORTED.
        r = send_vector(c, "9999_unsupported_code_request.bin")
        assert (r.code, r.flag, r.remark, r.ext_fields, r.serialize_type, r.opaque, r.body) == \
            (3, 1, " request type 9999 not supported", None, "JSON", 0, b"")
        assert c.poll(0.1) is None


def test_every_request_vector_is_replayed():
    """The replay above covers every captured request."""
    import inspect
    source = inspect.getsource(test_replay_java_4_9_8_vectors)
    requests = [e["file"] for e in VECTOR_BY_FILE.values() if e["kind"] == "request"]
    missing = [f for f in requests if f not in source]
    assert not missing, missing
