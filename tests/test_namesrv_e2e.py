"""Every request code a NameServer answers, end to end over real TCP, on both event
loops (asyncio and uvloop), with requests in both serialize types (JSON and ROCKETMQ
binary headers) to NameServers of both (``rocketmq.serialize.type``): the answer comes
back in the NameServer's serialize type whatever the request's (as Java 5.x answers;
4.9 mirrored the request's), with the request's opaque and the response flag. Also oneway requests, the two route forms, the
orderTopicConf of routes, broker registration details (CRC, compressed bodies, slaves),
missing ext fields and the UPDATE_NAMESRV_CONFIG black list."""

import json
import os

import pytest

import rmq
from nameserver import Client, parse_json_body, register_broker, running_namesrv
from rmq.bodies import topic_config
from rmq.namesrv.config import SERIALIZE_TYPE_KEY
from rmq.namesrv.kvconfig import read_table
from support import frame

STYPES = ["JSON", "ROCKETMQ"]


@pytest.fixture(params=STYPES)
def answer(request):
    """The serialize type of the NameServer under test, which its answers are in."""
    return request.param


@pytest.fixture
def srv(tmp_path, loop, answer):
    with running_namesrv(tmp_path, loop=loop, **{SERIALIZE_TYPE_KEY: answer}) as app:
        yield app


@pytest.fixture
def client(srv):
    with Client(srv.address) as c:
        yield c


def check(resp, answer, code=0, remark=None):
    """Common checks of an answer (``answer``: the NameServer's serialize type); returns it."""
    assert resp.flag & 1, resp
    assert resp.serialize_type == answer, resp
    assert resp.code == code, resp
    if remark is not None:
        assert resp.remark == remark, resp
    return resp


def body_of(resp):
    return parse_json_body(resp.body)[0]


def topics_of(resp):
    return set(body_of(resp)["topicList"])


# ---------------------------------------------------------------- KV config: 100 101 102 219

@pytest.mark.parametrize("stype", STYPES)
def test_kv_config_codes(client, stype, tmp_path, answer):
    req = lambda code, ext: client.request(code, ext, serialize_type=stype)  # noqa: E731
    r = check(req(100, {"namespace": "ns", "key": "k", "value": "v ü"}), answer)
    assert r.ext_fields is None and r.remark is None
    r = check(req(101, {"namespace": "ns", "key": "k"}), answer)
    assert r.ext_fields == {"value": "v ü"}
    check(req(100, {"namespace": "ns", "key": "k2", "value": "w"}), answer)
    r = check(req(219, {"namespace": "ns"}), answer)
    assert body_of(r) == {"table": {"k": "v ü", "k2": "w"}}
    r = check(req(102, {"namespace": "ns", "key": "k"}), answer)
    assert r.ext_fields is None
    r = check(req(101, {"namespace": "ns", "key": "k"}), answer, 22,
              "No config item, Namespace: ns Key: k")
    # Java answers with an empty ext map: {} in JSON; a binary header cannot tell it from null
    assert r.ext_fields == ({} if answer == "JSON" else None)
    check(req(219, {"namespace": "nope"}), answer, 22, "No config item, Namespace: nope")
    check(req(102, {"namespace": "ns", "key": "k2"}), answer)
    # the namespace stays, empty (Java)
    assert body_of(check(req(219, {"namespace": "ns"}), answer)) == {"table": {}}
    # persisted at once: kvConfig.json alone (a small table), as a restart would read it
    assert read_table(tmp_path / "kvConfig.json") == {"ns": {}}
    assert json.loads((tmp_path / "kvConfig.json").read_text("utf-8")) == {
        "configTable": {"ns": {}}}


# ---------------------------------------------------------------- brokers and routes

@pytest.mark.parametrize("stype", STYPES)
def test_register_route_cluster_unregister(srv, client, stype, answer):
    r = check(register_broker(client, "bk", "10.0.0.1:10911", topics=["T1", "T2"],
                              serialize_type=stype), answer)
    # a master: no masterAddr/haServerAddr; no ORDER_TOPIC_CONFIG yet: no body
    assert r.ext_fields == ({} if answer == "JSON" else None)
    assert r.body == b""
    r = check(client.request(105, {"topic": "T1"}, serialize_type=stype), answer)
    route, legacy = parse_json_body(r.body)
    assert not legacy                               # version 413 >= 401: standard form
    assert route == {   # a broker without enableActingMaster (4.x): false, as 5.0.0 says
        "brokerDatas": [{"brokerAddrs": {"0": "10.0.0.1:10911"}, "brokerName": "bk",
                         "cluster": "c1", "enableActingMaster": False}],
        "filterServerTable": {},
        "queueDatas": [{"brokerName": "bk", "perm": 6, "readQueueNums": 4,
                        "topicSysFlag": 0, "writeQueueNums": 4}]}
    r = check(client.request(106, serialize_type=stype), answer)
    info, legacy = parse_json_body(r.body)
    assert legacy                                   # 106 is always the legacy form
    assert info == {"brokerAddrTable": {"bk": {"brokerAddrs": {"0": "10.0.0.1:10911"},
                                               "brokerName": "bk", "cluster": "c1",
                                               "enableActingMaster": False}},
                    "clusterAddrTable": {"c1": ["bk"]}}
    # 5.0.0's 901 answer keeps createResponseCommand's remark, and has no ext fields
    r = check(client.request(901, {"clusterName": "c1", "brokerName": "bk"},
                             serialize_type=stype), answer, 0, "not set any response code")
    assert r.ext_fields is None
    group, legacy = parse_json_body(r.body)
    assert legacy
    assert group == {"brokerMemberGroup": {"brokerAddrs": {"0": "10.0.0.1:10911"},
                                           "brokerName": "bk", "cluster": "c1"}}
    r = check(client.request(104, {"clusterName": "c1", "brokerAddr": "10.0.0.1:10911",
                                   "brokerName": "bk", "brokerId": "0"},
                             serialize_type=stype), answer)
    assert r.ext_fields is None
    check(client.request(105, {"topic": "T1"}, serialize_type=stype), answer, 17,
          "No topic route info in name server for the topic: T1\n"
          "See http://rocketmq.apache.org/docs/faq/ for further details.")
    assert body_of(check(client.request(106, serialize_type=stype), answer)) == \
        {"brokerAddrTable": {}, "clusterAddrTable": {}}
    # an unknown broker: an empty member group
    r = check(client.request(901, {"clusterName": "c1", "brokerName": "bk"},
                             serialize_type=stype), answer)
    assert body_of(r)["brokerMemberGroup"]["brokerAddrs"] == {}


@pytest.mark.parametrize("stype", STYPES)
def test_topic_lists(client, stype, answer):
    topics = [topic_config("N0", 4, 4), topic_config("U1", 4, 4, topic_sys_flag=1),
              topic_config("S2", 4, 4, topic_sys_flag=2),
              topic_config("US3", 4, 4, topic_sys_flag=3)]
    check(register_broker(client, "bk", "10.0.0.1:10911", topics=topics), answer)
    register_broker(client, "bk2", "10.0.0.2:10911", cluster="c2", topics=["X", "Y"])
    req = lambda code, ext=None: check(client.request(code, ext, serialize_type=stype),  # noqa
                                       answer)
    assert topics_of(req(206)) == {"N0", "U1", "S2", "US3", "X", "Y"}
    assert topics_of(req(224, {"cluster": "c1"})) == {"N0", "U1", "S2", "US3"}
    assert topics_of(req(224, {"cluster": "c2"})) == {"X", "Y"}
    assert topics_of(req(224, {"cluster": "nope"})) == set()
    sys_list = body_of(req(304))
    assert set(sys_list["topicList"]) == {"c1", "c2", "bk", "bk2"}
    assert sys_list["brokerAddr"] in ("10.0.0.1:10911", "10.0.0.2:10911")
    assert topics_of(req(311)) == {"U1", "US3"}
    assert topics_of(req(312)) == {"S2", "US3"}
    assert topics_of(req(313)) == {"S2"}


def test_big_topic_lists_come_whole_between_other_answers(client, answer):
    """Topic lists past SHARED_BODY go to the network layer as head and body
    (server.encode_answer): pipelined between small answers, each frame comes whole,
    with its lengths, in order, and lists every topic."""
    from rmq.namesrv.server import SHARED_BODY
    topics = [f"A-Big-List-Topic-{i:06d}" for i in range(5000)]
    check(register_broker(client, "bk", "10.0.0.1:10911", topics=topics), answer)
    reqs = [rmq.RemotingCommand.request(206 if i % 2 else 101, {"namespace": "n", "key": "k"})
            for i in range(9)]
    client.send_raw(b"".join(rmq.encode_frame(r) for r in reqs))
    got = [client.receive() for _ in reqs]
    assert [g.opaque for g in got] == [r.opaque for r in reqs]
    lists = [g for g, r in zip(got, reqs) if r.code == 206]
    assert len(lists[0].body) >= SHARED_BODY
    assert all(g.body == lists[0].body and check(g, answer) for g in lists)
    assert topics_of(lists[0]) == set(topics)
    assert all(g.code == 22 for g, r in zip(got, reqs) if r.code == 101)   # no such key


@pytest.mark.parametrize("stype", STYPES)
def test_wipe_and_add_write_perm(client, stype, answer):
    register_broker(client, "bk", "10.0.0.1:10911",
                    topics=["T1", topic_config("T2", 8, 8, perm=7)])
    r = check(client.request(205, {"brokerName": "bk"}, serialize_type=stype), answer)
    assert r.ext_fields == {"wipeTopicCount": "2"}
    perms = lambda t: [q["perm"] for q in body_of(client.request(105, {"topic": t}))[  # noqa
        "queueDatas"]]
    assert perms("T1") == [4] and perms("T2") == [5]
    r = check(client.request(327, {"brokerName": "bk"}, serialize_type=stype), answer)
    assert r.ext_fields == {"addTopicCount": "2"}
    assert perms("T1") == [6] and perms("T2") == [6]
    r = check(client.request(205, {"brokerName": "nope"}, serialize_type=stype), answer)
    assert r.ext_fields == {"wipeTopicCount": "0"}


@pytest.mark.parametrize("stype", STYPES)
def test_delete_and_register_topic(client, stype, answer):
    register_broker(client, "bk", "10.0.0.1:10911", topics=["T1", "T2"])
    register_broker(client, "bk2", "10.0.0.2:10911", cluster="c2", topics=["T1"])
    r = check(client.request(216, {"topic": "T1", "clusterName": "c2"}, serialize_type=stype),
              answer)
    assert r.ext_fields is None
    route = body_of(client.request(105, {"topic": "T1"}))
    assert [q["brokerName"] for q in route["queueDatas"]] == ["bk"]
    check(client.request(216, {"topic": "T1"}, serialize_type=stype), answer)
    assert client.request(105, {"topic": "T1"}).code == 17
    # 217: a TopicRouteData body (5.x registerTopic)
    body = (b'{"brokerDatas":[],"queueDatas":[{"brokerName":"bk","perm":6,"readQueueNums":2,'
            b'"topicSysFlag":0,"writeQueueNums":3}]}')
    check(client.request(217, {"topic": "NEW"}, body, serialize_type=stype), answer)
    route = body_of(client.request(105, {"topic": "NEW"}))
    assert route["queueDatas"] == [{"brokerName": "bk", "perm": 6, "readQueueNums": 2,
                                    "topicSysFlag": 0, "writeQueueNums": 3}]
    assert topics_of(client.request(206)) == {"T2", "NEW"}


@pytest.mark.parametrize("stype", STYPES)
def test_query_data_version_and_heartbeat(client, stype, answer):
    register_broker(client, "bk", "10.0.0.1:10911", topics=["T1", "T2"], counter=5)
    ident = {"clusterName": "c1", "brokerAddr": "10.0.0.1:10911", "brokerName": "bk",
             "brokerId": "0"}
    same = b'{"counter":5,"stateVersion":0,"timestamp":1700000000005}'
    r = check(client.request(322, ident, same, serialize_type=stype), answer)
    assert r.ext_fields == {"changed": "false"}
    assert body_of(r) == {"counter": 5, "stateVersion": 0, "timestamp": 1700000000005}
    r = check(client.request(322, ident, b'{"counter":6,"timestamp":1}', serialize_type=stype),
              answer)
    assert r.ext_fields == {"changed": "true"}
    assert body_of(r)["counter"] == 5
    r = check(client.request(322, dict(ident, brokerAddr="10.9.9.9:1"), same,
                             serialize_type=stype), answer)
    assert r.ext_fields == {"changed": "true"} and r.body == b""     # unknown broker
    r = check(client.request(904, dict(ident), serialize_type=stype), answer)
    assert r.ext_fields is None


# ---------------------------------------------------------------- route forms

def test_route_forms(client, answer):
    # a non-ASCII cluster name shows the difference of the forms in strings too
    register_broker(client, "bk", "10.0.0.1:10911", cluster="集群", topics=["T1", "T2"])
    expected_addrs = {"0": "10.0.0.1:10911"}
    cases = [  # (version, ext, standard?)
        (317, {}, False), (121, {}, False), (400, {}, False),
        (401, {}, True), (409, {}, True), (479, {}, True), (30000, {}, True),
        (317, {"acceptStandardJsonOnly": "true"}, True),
        (317, {"acceptStandardJsonOnly": "TRUE"}, True),
        (317, {"acceptStandardJsonOnly": "false"}, False),
    ]
    for stype in STYPES:
        for version, ext, standard in cases:
            r = check(client.request(105, dict(ext, topic="T1"), version=version,
                                     serialize_type=stype), answer)
            route, legacy = parse_json_body(r.body)
            assert legacy == (not standard), (version, ext, r.body)
            assert route["brokerDatas"][0]["brokerAddrs"] == expected_addrs
            assert route["brokerDatas"][0]["cluster"] == "集群"
            if standard:    # non-ASCII escaped, as fastjson's BrowserCompatible writes it
                assert b"\\u96c6\\u7fa4" in r.body.lower() and r.body.isascii()
            else:
                assert "集群".encode() in r.body
            # 106 and 901 are always legacy, whatever the version
            r = check(client.request(106, version=version, serialize_type=stype), answer)
            assert parse_json_body(r.body)[1], (version, r.body)
            r = check(client.request(901, {"clusterName": "集群", "brokerName": "bk"},
                                     version=version, serialize_type=stype), answer)
            assert parse_json_body(r.body)[1], (version, r.body)


# ---------------------------------------------------------------- orderTopicConf

@pytest.mark.parametrize("stype", STYPES)
def test_order_topic_conf(client, stype, answer):
    register_broker(client, "bk", "10.0.0.1:10911", topics=["T1", "T2"])
    route = lambda: body_of(check(client.request(105, {"topic": "T1"},  # noqa: E731
                                                 serialize_type=stype), answer))
    assert "orderTopicConf" not in route()
    kv = {"namespace": "ORDER_TOPIC_CONFIG", "key": "T1", "value": "bk:4"}
    check(client.request(100, kv, serialize_type=stype), answer)
    assert "orderTopicConf" not in route()          # orderMessageEnable is false
    check(client.request(318, None, b"orderMessageEnable=true\n", serialize_type=stype), answer)
    assert route()["orderTopicConf"] == "bk:4"
    check(client.request(100, dict(kv, value="bk:8;other:2"), serialize_type=stype), answer)
    assert route()["orderTopicConf"] == "bk:8;other:2"
    assert "orderTopicConf" not in body_of(client.request(105, {"topic": "T2"}))
    # a registration gets the ORDER_TOPIC_CONFIG table back
    r = check(register_broker(client, "bk", "10.0.0.1:10911", topics=["T1", "T2"], counter=2,
                              serialize_type=stype), answer)
    assert body_of(r) == {"table": {"T1": "bk:8;other:2"}}
    check(client.request(102, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T1"},
                         serialize_type=stype), answer)
    assert "orderTopicConf" not in route()
    check(client.request(100, kv, serialize_type=stype), answer)
    assert route()["orderTopicConf"] == "bk:4"
    check(client.request(318, None, b"orderMessageEnable=false\n", serialize_type=stype),
          answer)
    assert "orderTopicConf" not in route()


# ---------------------------------------------------------------- registration details

@pytest.mark.parametrize("stype", STYPES)
def test_register_bad_crc(client, stype, answer):
    r = register_broker(client, "bk", "10.0.0.1:10911", topics=["T1", "T2"],
                        ext={"bodyCrc32": "12345"}, serialize_type=stype)
    check(r, answer, 1, "crc32 not match")
    assert client.request(105, {"topic": "T1"}).code == 17
    assert body_of(client.request(106)) == {"brokerAddrTable": {}, "clusterAddrTable": {}}
    # bodyCrc32 0 (or absent): not checked
    check(register_broker(client, "bk", "10.0.0.1:10911", topics=["T1", "T2"],
                          ext={"bodyCrc32": "0"}, serialize_type=stype), answer)
    check(register_broker(client, "bk2", "10.0.0.2:10911", topics=["T3", "T4"],
                          ext={"bodyCrc32": None}, serialize_type=stype), answer)
    assert client.request(105, {"topic": "T1"}).code == 0
    assert client.request(105, {"topic": "T3"}).code == 0


@pytest.mark.parametrize("stype", STYPES)
@pytest.mark.parametrize("says", ["true", "false"])
def test_register_compressed_body(client, stype, says, answer):
    # 5.x brokers may send a compressed body while the header says compressed=false
    topics = [topic_config("TC1", 3, 5, perm=6), topic_config("TC2", 8, 8, perm=7)]
    check(register_broker(client, "bk", "10.0.0.1:10911", topics=topics, compressed=True,
                          ext={"compressed": says}, serialize_type=stype), answer)
    route = body_of(client.request(105, {"topic": "TC1"}))
    assert route["queueDatas"] == [{"brokerName": "bk", "perm": 6, "readQueueNums": 3,
                                    "topicSysFlag": 0, "writeQueueNums": 5}]
    assert topics_of(client.request(206)) == {"TC1", "TC2"}


@pytest.mark.parametrize("stype", STYPES)
def test_register_slave(srv, stype, answer):
    with Client(srv.address) as master, Client(srv.address) as slave:
        # a slave before its master: no master to report
        r = check(register_broker(slave, "bk", "10.0.0.2:10911", broker_id=1,
                                  ha_addr="10.0.0.2:10912", topics=["T1", "T2"],
                                  serialize_type=stype), answer)
        assert not (r.ext_fields or {}).get("masterAddr")
        check(register_broker(master, "bk", "10.0.0.1:10911", broker_id=0,
                              ha_addr="10.0.0.1:10912", topics=["T1", "T2"],
                              serialize_type=stype), answer)
        r = check(register_broker(slave, "bk", "10.0.0.2:10911", broker_id=1,
                                  ha_addr="10.0.0.2:10912", topics=["T1", "T2"], counter=2,
                                  serialize_type=stype), answer)
        assert r.ext_fields == {"masterAddr": "10.0.0.1:10911", "haServerAddr": "10.0.0.1:10912"}
        route = body_of(master.request(105, {"topic": "T1"}))
        assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911",
                                                          "1": "10.0.0.2:10911"}


# ---------------------------------------------------------------- missing ext fields

IDENT = {"clusterName": "c1", "brokerAddr": "10.0.0.1:10911", "brokerName": "bk",
         "brokerId": "0"}
REQUIRED = [
    (100, {"namespace": "n", "key": "k", "value": "v"}),
    (101, {"namespace": "n", "key": "k"}),
    (102, {"namespace": "n", "key": "k"}),
    (103, dict(IDENT, haServerAddr="10.0.0.1:10912")),
    (104, IDENT),
    (105, {"topic": "T1"}),
    (205, {"brokerName": "bk"}),
    (216, {"topic": "T1"}),
    (217, {"topic": "T1"}),
    (219, {"namespace": "n"}),
    (224, {"cluster": "c1"}),
    (322, IDENT),
    (327, {"brokerName": "bk"}),
    (901, {"clusterName": "c1", "brokerName": "bk"}),
    (904, {"clusterName": "c1", "brokerAddr": "10.0.0.1:10911", "brokerName": "bk"}),
]


@pytest.mark.parametrize("code, fields", REQUIRED, ids=[str(c) for c, _ in REQUIRED])
def test_missing_required_field(client, code, fields, answer):
    register_broker(client, "bk", "10.0.0.1:10911", topics=["T1", "T2"])
    before = (client.request(106).body, client.request(206).body)
    for stype in STYPES:
        for name in fields:
            ext = {k: v for k, v in fields.items() if k != name}
            r = check(client.request(code, ext or None, serialize_type=stype), answer, 1)
            assert f"<{name}>" in r.remark, r
    # nothing changed, and the connection still works
    assert (client.request(106).body, client.request(206).body) == before
    assert client.request(105, {"topic": "T1"}).code == 0


@pytest.mark.parametrize("name, value", [
    ("brokerId", "x"), ("brokerId", " 1"), ("brokerId", "1_0"),
    ("brokerId", "9223372036854775808"), ("heartbeatTimeoutMillis", "abc"),
    ("bodyCrc32", "2147483648"),
])
def test_register_bad_number_field(client, name, value, answer):
    r = register_broker(client, "bk", "10.0.0.1:10911", topics=["T1", "T2"],
                        ext={name: value})
    check(r, answer, 1)
    assert f"<{name}>" in r.remark
    assert client.request(105, {"topic": "T1"}).code == 17


@pytest.mark.parametrize("code, ext, body", [
    (103, dict(IDENT, haServerAddr="h:1"), b'{"topicConfigSerializeWrapper":5}'),
    (103, dict(IDENT, haServerAddr="h:1"),
     b'{"topicConfigSerializeWrapper":{"dataVersion":{"counter":"x"}}}'),
    (103, dict(IDENT, haServerAddr="h:1"), b"\x78\x9c garbage"),
    (103, dict(IDENT, haServerAddr="h:1"), b"not json"),
    (217, {"topic": "T"}, b'{"queueDatas":5}'),
    (217, {"topic": "T"}, b'{"queueDatas":[5]}'),
    (322, IDENT, b'{"counter":"x"}'),
    (318, None, b"\xff\xfe"),
])
def test_malformed_body_is_answered(client, code, ext, body, answer):
    """A body that does not decode gets SYSTEM_ERROR, and the connection stays."""
    for stype in STYPES:
        check(client.request(code, ext, body, serialize_type=stype), answer, 1)
    assert client.request(106).code == 0


# ---------------------------------------------------------------- config 318 / 319

def properties(resp):
    out = {}
    for line in resp.body.decode().splitlines():
        k, _, v = line.partition("=")
        out[k] = v
    return out


@pytest.mark.parametrize("stype", STYPES)
def test_update_and_get_config(client, stype, answer):
    conf = properties(check(client.request(319, serialize_type=stype), answer))
    assert conf["orderMessageEnable"] == "false"
    assert {"kvConfigPath", "listenPort", "serverChannelMaxIdleTimeSeconds"} <= set(conf)
    check(client.request(318, None, b"orderMessageEnable=true\nenableAllTopicList=false\n",
                         serialize_type=stype), answer)
    conf2 = properties(client.request(319, serialize_type=stype))
    assert conf2["orderMessageEnable"] == "true" and conf2["enableAllTopicList"] == "false"
    check(client.request(206, serialize_type=stype), answer, 1, "disable")
    check(client.request(318, None, b"enableAllTopicList=true\n", serialize_type=stype), answer)
    check(client.request(206, serialize_type=stype), answer)
    # a value that does not convert: refused, nothing applied
    check(client.request(318, None, b"orderMessageEnable=false\nlistenPort=abc\n",
                         serialize_type=stype), answer, 1)
    assert properties(client.request(319))["orderMessageEnable"] == "true"


BLACKLISTED = [
    "kvConfigPath={evil}/kv.json",
    "configStorePath={evil}/namesrv.properties",
    "rocketmqHome={evil}",
    "configBlackList=x",
    "storePathRootDir={evil}",
    "fooPath={evil}/x",
    "logDir={evil}",
    "orderMessageEnable=true\nkvConfigPath={evil}/kv.json",
    "  kvConfigPath = {evil}/kv.json",
    "orderMessageEnable=true\nconfigBlackList=",
]


@pytest.mark.parametrize("text", BLACKLISTED)
@pytest.mark.parametrize("stype", STYPES)
def test_update_config_black_list(srv, client, tmp_path, stype, text, answer):
    before = client.request(319).body
    files_before = sorted(os.listdir(tmp_path))
    body = text.format(evil=tmp_path / "evil").encode() + b"\n"
    r = check(client.request(318, None, body, serialize_type=stype), answer,
              16, "Can not update config in black list.")
    assert r.ext_fields is None
    assert client.request(319).body == before                # nothing changed
    assert srv.processor.config.kvConfigPath == str(tmp_path / "kvConfig.json")
    assert srv.processor.config.orderMessageEnable is False
    assert sorted(os.listdir(tmp_path)) == files_before      # no file written
    # KV puts still go to the configured file (a small table: rewritten at once)
    client.request(100, {"namespace": "n", "key": "k", "value": "v"})
    assert "kvConfig.json" not in files_before
    assert sorted(os.listdir(tmp_path)) == sorted(files_before + ["kvConfig.json"])
    assert json.loads((tmp_path / "kvConfig.json").read_text("utf-8")) == {
        "configTable": {"n": {"k": "v"}}}


# ---------------------------------------------------------------- unknown code

@pytest.mark.parametrize("stype", STYPES)
@pytest.mark.parametrize("code", [9999, 0, 107, 320, -5, 30000])
def test_unknown_code(client, stype, code, answer):
    r = check(client.request(code, {"topic": "x"}, serialize_type=stype), answer, 3,
              f" request type {code} not supported")
    assert r.body == b""


# ---------------------------------------------------------------- oneway

@pytest.mark.parametrize("stype", STYPES)
def test_oneway_requests_are_applied_never_answered(srv, client, stype, answer):
    ow = dict(oneway=True, serialize_type=stype)
    assert client.request(100, {"namespace": "n", "key": "k", "value": "v1"}, **ow) is None
    assert register_broker(client, "bk", "10.0.0.1:10911", topics=["T1", "T2"], **ow) is None
    assert client.request(318, None, b"orderMessageEnable=true\n", **ow) is None
    assert client.request(9999, None, **ow) is None                  # unknown code
    assert client.request(101, {"namespace": "n"}, **ow) is None      # missing field
    assert client.request(105, {"topic": "T1"}, **ow) is None         # a query
    assert client.request(205, {"brokerName": "bk"}, **ow) is None
    # the next answer is the one to this normal request: nothing was sent before it
    r = check(client.request(101, {"namespace": "n", "key": "k"}, serialize_type=stype), answer)
    assert r.ext_fields == {"value": "v1"}
    route = body_of(client.request(105, {"topic": "T1"}))
    assert route["queueDatas"][0]["perm"] == 4                       # 205 applied
    assert srv.processor.config.orderMessageEnable is True             # 318 applied
    assert client.request(102, {"namespace": "n", "key": "k"}, **ow) is None
    assert client.request(101, {"namespace": "n", "key": "k"}).code == 22
    assert client.poll(0.2) is None                                  # nothing else came


def test_responses_from_clients_are_ignored(client):
    """A frame with the response flag set is not a request: no answer."""
    cmd = rmq.RemotingCommand(105, flag=1, opaque=77, ext_fields={"topic": "x"})
    client.send(cmd)
    r = client.request(106)
    assert r.code == 0
    assert client.poll(0.2) is None


def test_pipelined_requests_answered_in_order(client, answer):
    """Several requests in flight on one connection (ali-ons does it), in one write."""
    cmds = [rmq.RemotingCommand.request(100, {"namespace": "n", "key": f"k{i}",
                                              "value": str(i)}) for i in range(50)]
    cmds += [rmq.RemotingCommand.request(101, {"namespace": "n", "key": f"k{i}"},
                                         serialize_type=STYPES[i % 2]) for i in range(50)]
    client.send_raw(b"".join(rmq.encode_frame(c) for c in cmds))
    for c in cmds:
        r = client.receive()
        assert r.opaque == c.opaque and r.code == 0 and r.serialize_type == answer
    assert [client.request(101, {"namespace": "n", "key": f"k{i}"}).ext_fields["value"]
            for i in (0, 49)] == ["0", "49"]


# ---------------------------------------------------------------- strings Java would send

def test_unencodable_answer_is_still_answered(client):
    """A JSON header may carry a lone surrogate escape ("\\ud800"): the 17 answer echoes
    the topic in its remark, which UTF-8 cannot encode as is (Java writes '?'). The
    request is answered all the same, and so are the requests after it in the same write."""
    bad = frame(b'{"code":105,"extFields":{"topic":"\\ud800"},"flag":0,"language":"JAVA",'
                b'"opaque":41,"version":409}')
    after = rmq.RemotingCommand.request(106, opaque=42)
    client.send_raw(bad + rmq.encode_frame(after))
    r = client.receive()
    assert r.opaque == 41 and r.code in (17, 1) and r.flag == 1
    r = client.receive()
    assert (r.opaque, r.code) == (42, 0)
    assert client.request(206).code == 0


# ---------------------------------------------------------------- bad bodies, odd names

def test_malformed_register_body_changes_nothing(srv, client):
    good = '{"topicName":"%s","readQueueNums":4,"writeQueueNums":4,"perm":6}'
    body = ('{"topicConfigSerializeWrapper":{"dataVersion":{"counter":1},"topicConfigTable":'
            '{"T":%s,"U":{"topicName":"U","readQueueNums":"x"}}}}' % (good % "T")).encode()
    r = client.request(103, dict(IDENT, haServerAddr="h:1"), body)
    assert r.code == 1
    assert client.request(105, {"topic": "T"}).code == 17
    assert body_of(client.request(106)) == {"brokerAddrTable": {}, "clusterAddrTable": {}}


def test_lone_surrogate_topic_does_not_break_topic_lists(client):
    tc = '{"topicName":"%s","readQueueNums":4,"writeQueueNums":4,"perm":6}'
    body = ('{"topicConfigSerializeWrapper":{"dataVersion":{"counter":1},"topicConfigTable":'
            '{"\\ud800":%s,"U":%s}}}' % (tc % "\\ud800", tc % "U")).encode()
    assert client.request(103, dict(IDENT, haServerAddr="h:1"), body).code == 0
    assert client.request(206).code == 0


def test_register_with_an_empty_body_object(client):
    # Java fills a missing wrapper with its defaults: the broker is registered.
    r = client.request(103, dict(IDENT, haServerAddr="h:1"), b"{}")
    assert r.code == 0, r.remark
    assert body_of(client.request(106))["clusterAddrTable"] == {"c1": ["bk"]}


def test_bad_mapping_info_changes_nothing(client):
    body = (b'{"topicConfigSerializeWrapper":{"dataVersion":{"counter":1},'
            b'"topicConfigTable":{"T":{"topicName":"T","readQueueNums":4,"writeQueueNums":4,'
            b'"perm":6},"U":{"topicName":"U"}},"topicQueueMappingInfoMap":{"T":5}}}')
    assert client.request(103, dict(IDENT, haServerAddr="h:1"), body).code == 1
    assert client.request(105, {"topic": "T"}).code == 17
    assert body_of(client.request(106)) == {"brokerAddrTable": {}, "clusterAddrTable": {}}


def test_a_remote_update_cannot_lift_the_connection_limit(tmp_path):
    with running_namesrv(tmp_path, maxConnections=2) as app:
        with Client(app.address) as a, Client(app.address) as b:
            assert a.request(318, body=b"maxConnections=100\n").code == 0
            assert b.request(319).code == 0
            with Client(app.address) as c:
                assert c.closed_by_peer(timeout=5)
