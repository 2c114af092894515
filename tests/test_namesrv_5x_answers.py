"""Where Java 5.0.0's NameServer answers otherwise than 4.9.8's, rmq answers as 5.0.0
(tests/vectors/java-5.0.0): the header version of every answer (V5_0_0), the serialize
type of every answer (the NameServer's own, ``rocketmq.serialize.type``, whatever the
request's), GET_BROKER_MEMBER_GROUP's remark, the BrokerData of a 4.x broker and
GET_CLIENT_CONFIG (47). On the request processor, then over TCP, byte for byte with
the captured frames where the state behind them can be rebuilt."""

import subprocess
import sys

import pytest

import rmq
from nameserver import Client, register_broker, running_namesrv
from rmq.namesrv import DefaultRequestProcessor
from rmq.namesrv.config import SERIALIZE_TYPE_ENV, SERIALIZE_TYPE_KEY, NamesrvConfig
from rmq.namesrv.handlers import NEEDS_TABLE
from rmq.namesrv.kvconfig import KVConfig
from rmq.protocol import CURRENT_VERSION, V5_0_0, RequestCode as RC, ResponseCode as R
from support import V5

# every test on the asyncio server and on the C engine (serverEngine=c)
pytestmark = pytest.mark.usefixtures("each_server")

#: The rocketmqHome of the 5.0.0 run, as the vectors' paths were rewritten.
JAVA_HOME = "/home/rocketmq/namesrv-29876"


def processor(**config):
    return DefaultRequestProcessor(NamesrvConfig(**config), KVConfig(None))


def request(name):
    return rmq.decode_frame(V5.bytes(name))


def answer_of(name):
    """The captured answer to the request ``name``: (bytes, decoded)."""
    data = V5.bytes(V5.by_file[name]["response_file"])
    return data, rmq.decode_frame(data)


def test_answers_carry_the_5_0_0_version():
    assert CURRENT_VERSION == V5_0_0
    data, java = answer_of("9999_unsupported_code_request.bin")
    assert java.version == V5_0_0
    resp = processor().handle(request("9999_unsupported_code_request.bin"))
    assert rmq.encode_frame(resp) == data


# ---------------------------------------------------------------- GET_CLIENT_CONFIG (47)

def test_get_client_config_as_java_5_0_0():
    ns = processor(rocketmqHome=JAVA_HOME)
    req = request("47_get_client_config_request.bin")
    data, java = answer_of("47_get_client_config_request.bin")
    assert ns.quick(req) is not NEEDS_TABLE            # read without the tables' thread
    assert rmq.encode_frame(ns.quick(req)) == rmq.encode_frame(ns.handle(req)) == data
    assert java.body == b"orderMessageEnable=false\nrocketmqHome=" + JAVA_HOME.encode() + b"\n"


@pytest.mark.parametrize("keys", [[], ["nope"], ["rocketmqHome"], ["", "x" * 70_000]])
def test_get_client_config_of_no_known_key_has_no_body(keys):
    # rocketmqHome unset is null in Java: no setting. StringUtils.isNotBlank("") is false:
    # code 0, no body (Java leaves it null), as from createResponseCommand(null)
    ns = processor()
    ns.config.rocketmqHome = None
    req = rmq.RemotingCommand.request(RC.GET_CLIENT_CONFIG,
                                      body=rmq.bodies.encode_remote_client_config(keys))
    resp = ns.handle(req)
    assert (resp.code, resp.remark, resp.ext_fields, resp.body) == (R.SUCCESS, None, None, b"")


@pytest.mark.parametrize("body", [b"", b"null", b"[]", b'{"keys":null}', b'{"keys":"k"}',
                                  b'{"keys":["listenPort",null]}', b"{", b"\xff"])
def test_get_client_config_refuses_what_java_throws_on(body):
    ns = processor()
    before = ns.config.to_properties_text()
    req = rmq.RemotingCommand.request(RC.GET_CLIENT_CONFIG, body=body)
    resp = ns.handle(req)
    assert resp.code == R.SYSTEM_ERROR, resp
    assert "GetRemoteClientConfigBody" in resp.remark or "JSON body" in resp.remark, resp
    assert ns.counters.refused["bad_body"] == 1
    assert ns.config.to_properties_text() == before
    # oneway: applied (nothing to apply), never answered
    oneway = rmq.RemotingCommand.request(RC.GET_CLIENT_CONFIG, body=body, oneway=True)
    assert ns.handle(oneway) is None


def test_get_client_config_is_a_request_code():
    assert RC.GET_CLIENT_CONFIG == 47
    assert rmq.protocol.code_name(47, False) == "GET_CLIENT_CONFIG"


# ---------------------------------------------------------------- GET_BROKER_MEMBER_GROUP (901)

def test_broker_member_group_as_java_5_0_0():
    ns = processor()
    assert ns.handle(request("103_register_broker_acting_request.bin")).code == 0
    for name in ("901_get_broker_member_group_request.bin",
                 "901_get_broker_member_group_raw_request.bin"):
        data, java = answer_of(name)
        # code 0, createResponseCommand's remark kept, no ext fields
        assert (java.code, java.remark, java.ext_fields) == (0, "not set any response code",
                                                             None)
        assert rmq.encode_frame(ns.handle(request(name))) == data


# ---------------------------------------------------------------- BrokerData of a 4.x broker

def test_a_4x_brokers_broker_data_says_it_is_no_acting_master():
    ns = processor()
    for name in ("103_register_broker_request.bin", "103_register_broker_v498_request.bin"):
        assert ns.handle(request(name)).code == 0
    assert "enableActingMaster" not in request("103_register_broker_v498_request.bin").ext_fields
    _, java = answer_of("106_get_broker_cluster_info_five_request.bin")
    java_table = rmq.bodies.decode_cluster_info(java.body)[0]
    ours = rmq.bodies.decode_cluster_info(ns.handle(request(
        "106_get_broker_cluster_info_five_request.bin")).body)[0]
    for broker in ("v4broker", "v5broker"):
        assert ours[broker] == java_table[broker], broker
    assert ours["v4broker"]["enableActingMaster"] is False
    # and in its routes (both forms), from the table the core answers from
    route = rmq.RemotingCommand.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "V4Cluster"})
    (bd,) = rmq.bodies.decode_topic_route_data(ns.handle(route).body)["brokerDatas"]
    assert bd["enableActingMaster"] is False
    assert b'"enableActingMaster":false' in ns.routes.route_body("V4Cluster", legacy=True)


# ---------------------------------------------------------------- serialize type, over TCP

def send(client, name):
    client.send_raw(V5.bytes(name))
    return client.receive()


def exchange(client, name):
    """Send a captured request as it is; (our answer's bytes, Java's)."""
    resp = send(client, name)
    return rmq.encode_frame(resp), answer_of(name)[0]


def test_rocketmq_requests_get_json_answers(tmp_path):
    """A default NameServer answers ROCKETMQ requests in JSON, as the 5.0.0 vectors'
    ``*_rmq_*`` answers are (4.9.8 answered them in ROCKETMQ)."""
    with running_namesrv(tmp_path) as app, Client(app.address) as c:
        assert app.processor.routes.answer_serialize_type == "JSON"
        assert request("9999_unsupported_code_rmq_request.bin").serialize_type == "ROCKETMQ"
        for name in ("9999_unsupported_code_rmq_request.bin",
                     "101_get_kv_config_missing_rmq_request.bin",
                     "102_delete_kv_config_rmq_request.bin"):
            ours, java = exchange(c, name)
            assert ours == java, name
        assert c.request(RC.PUT_KV_CONFIG, {"namespace": "peer_ns", "key": "rmq_key",
                                            "value": "rmq_value"}).code == 0
        ours, java = exchange(c, "101_get_kv_config_rmq_request.bin")
        assert ours == java
        # route and cluster answers: the header as Java's (the bodies depend on brokers
        # and topics this run does not have); twice, so that a cached answer is written
        # by the core's route writer too
        assert register_broker(c, "v5broker", "127.0.0.1:29911", cluster="V5Cluster",
                               topics=["V5Topic", "V5SoloTopic"]).code == 0
        for name in ("105_get_routeinfo_zone_name_only_request.bin",
                     "105_get_routeinfo_existing_rmq_request.bin",
                     "105_get_routeinfo_existing_rmq_request.bin",
                     "105_get_routeinfo_zone_mode_rmq_request.bin",
                     "106_get_broker_cluster_info_rmq_request.bin",
                     "106_get_broker_cluster_info_rmq_request.bin"):
            resp = send(c, name)
            java = answer_of(name)[1]
            assert resp.serialize_type == java.serialize_type == "JSON"
            resp.body = java.body
            assert rmq.encode_frame(resp) == answer_of(name)[0], name


def test_a_rocketmq_namesrv_answers_everything_in_rocketmq(tmp_path):
    """``rocketmq.serialize.type=ROCKETMQ``: binary headers for JSON and ROCKETMQ
    requests alike, as the 5.0.0 vectors' ``*_rmqsrv_*`` answers are."""
    with running_namesrv(tmp_path, **{SERIALIZE_TYPE_KEY: "ROCKETMQ"}) as app, \
            Client(app.address) as c:
        assert app.processor.routes.answer_serialize_type == "ROCKETMQ"
        for name in ("100_put_kv_config_rmqsrv_request.bin",
                     "101_get_kv_config_rmqsrv_request.bin",
                     "105_get_routeinfo_missing_rmqsrv_request.bin",
                     "9999_unsupported_code_rmqsrv_request.bin"):
            assert request(name).serialize_type == "JSON"
            ours, java = exchange(c, name)
            assert ours == java, name
        # every other path: the route answers (built, then cached and written by the
        # core), cached list answers, errors; requests of both serialize types
        register_broker(c, "bk", "10.0.0.1:10911", topics=["T1", "T2"])
        for stype in ("JSON", "ROCKETMQ", "JSON", "ROCKETMQ"):
            for code, ext in ((105, {"topic": "T1"}), (106, None), (206, None),
                              (105, {"topic": "nope"}), (101, {"namespace": "n"}),
                              (47, None)):
                body = rmq.bodies.encode_remote_client_config(["listenPort"]) \
                    if code == 47 else b""
                resp = c.request(code, ext, body, serialize_type=stype)
                assert resp.serialize_type == "ROCKETMQ", (code, stype, resp)
                expected = (0 if ext["topic"] == "T1" else 17) if code == 105 else \
                    1 if code == 101 else 0
                assert resp.code == expected, resp
        # a oneway request is still never answered
        assert c.request(106, oneway=True, serialize_type="ROCKETMQ") is None
        assert c.poll(0.2) is None


def test_the_serialize_type_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(SERIALIZE_TYPE_ENV, "ROCKETMQ")
    with running_namesrv(tmp_path) as app, Client(app.address) as c:
        assert c.request(106).serialize_type == "ROCKETMQ"
        # never changed remotely: refused, and answers stay as they were
        r = c.request(RC.UPDATE_NAMESRV_CONFIG, body=f"{SERIALIZE_TYPE_KEY}=JSON\n".encode())
        assert (r.code, r.serialize_type) == (R.NO_PERMISSION, "ROCKETMQ")
        assert c.request(106).serialize_type == "ROCKETMQ"


def test_gates_answer_in_the_namesrvs_serialize_type(tmp_path):
    # needWaitForService's "not ready" comes from the server, before the processor
    with running_namesrv(tmp_path, needWaitForService=True, waitSecondsForService=30,
                         **{SERIALIZE_TYPE_KEY: "ROCKETMQ"}) as app, Client(app.address) as c:
        r = c.request(105, {"topic": "T"})
        assert (r.code, r.remark, r.serialize_type) == (R.SYSTEM_ERROR, "name server not ready",
                                                        "ROCKETMQ")


def test_the_acl_refusal_is_in_the_namesrvs_serialize_type(tmp_path):
    acl = tmp_path / "plain_acl.yml"
    acl.write_text("accounts:\n  - accessKey: admin-key\n    secretKey: admin-secret\n"
                   "    admin: true\n")
    with running_namesrv(tmp_path, aclEnable=True, aclFilePath=str(acl),
                         **{SERIALIZE_TYPE_KEY: "ROCKETMQ"}) as app, Client(app.address) as c:
        r = c.request(RC.PUT_KV_CONFIG, {"namespace": "n", "key": "k", "value": "v"})
        assert (r.code, r.serialize_type) == (R.NO_PERMISSION, "ROCKETMQ")


def test_a_serialize_type_java_would_not_start_with_stops_the_start(tmp_path):
    conf = tmp_path / "namesrv.properties"
    conf.write_text(f"{SERIALIZE_TYPE_KEY}=json\nlistenPort=0\n")
    p = subprocess.run([sys.executable, "-m", "rmq", "namesrv", "-c", str(conf),
                        "--kv-config", str(tmp_path / "kv.json")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p
    assert SERIALIZE_TYPE_KEY in p.stderr and "'json'" in p.stderr
    p = subprocess.run([sys.executable, "-m", "rmq", "namesrv", "-c", str(conf), "-p"],
                       capture_output=True, text=True, timeout=60)
    assert f"{SERIALIZE_TYPE_KEY}=json\n" in p.stdout
