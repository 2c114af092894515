"""rmq.namesrv.config: Java's NamesrvConfig/NettyServerConfig keys, properties files, GET/UPDATE."""

import logging
import os
import random
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from rmq import decode_frame
from rmq.bodies import decode_remote_client_config
from rmq.javaorder import java_properties_order, java_spread_hash
from rmq.namesrv.config import (ALWAYS_BLACKLISTED, FIELDS, SERIALIZE_TYPE_ENV,
                                SERIALIZE_TYPE_KEY, ConfigError, ConfigNoPermission,
                                NamesrvConfig, is_path_key, load_properties_file,
                                parse_properties, properties_to_string)
from rmq.errors import RmqError
from support import V5, vector_bytes

# rmq.namesrv.config is Python whichever core is selected.
pytestmark = pytest.mark.once


def java_319_body():
    cmd = decode_frame(vector_bytes("319_get_namesrv_config_response.bin"))
    assert cmd.code == 0
    return cmd.body.decode("utf-8")


# ---------------------------------------------------------------- defaults vs Java 4.9.8

#: Keys of the 4.9.8 answer whose value depends on the machine: the paths (the 4.9.8
#: run had -c /home/rocketmq/namesrv-9876/namesrv.conf and ROCKETMQ_HOME=/opt/rocketmq).
MACHINE_DEPENDENT = {"rocketmqHome", "kvConfigPath", "configStorePath"}

#: Keys Java 4.9.8 lists that rmq omits: none. rmq lists every one of them, also those
#: it does not act on (thread pools, Netty buffer and allocator switches), so tools that
#: read GET_NAMESRV_CONFIG find what they expect.
OMITTED_FROM_JAVA_4_9_8 = set()

#: Keys rmq lists beyond 4.9.8's: the 5.x NamesrvConfig/NettyServerConfig ones, and rmq's.
BEYOND_4_9_8 = {
    "returnOrderTopicConfigToBroker", "clientRequestThreadPoolNums", "defaultThreadPoolNums",
    "clientRequestThreadPoolQueueCapacity", "defaultThreadPoolQueueCapacity",
    "scanNotActiveBrokerInterval", "unRegisterBrokerQueueCapacity", "supportActingMaster",
    "enableAllTopicList", "enableTopicList", "notifyMinBrokerIdChanged",
    "notifyMinBrokerIdChangeTimeoutMillis", "enableControllerInNamesrv",
    "needWaitForService", "waitSecondsForService", "deleteTopicWithBrokerRegistration",
    "bindAddress", "serverNettyWorkerGroupEnable", "enableShutdownGracefully",
    "shutdownWaitTimeSeconds",
    # rmq's own
    "listenHost", "maxFrameLength", "maxConnections", "maxOutputBufferBytes",
    "maxTotalOutputBufferBytes", "maxKvNamespaceBytes", "maxKvKeyBytes", "maxKvValueBytes",
    "maxKvTableBytes", "maxKvRewriteTableBytes", "routeCacheBytes", "warmRestart",
    "routeSnapshotPath", "metricsPort",
    "metricsAddress",
    "routeSnapshotIntervalSeconds", "serverEngine", "serverIoThreads",
    # Java's TLS System properties (TlsSystemConfig), read from the file by rmq; those
    # without a default (the certificate paths, the key's password) are not listed
    "tls.server.mode", "tls.server.need.client.auth", "tls.config.file",
    "aclEnable", "aclFilePath", "aclAdminRequests", "aclBrokerRequests", "aclRouteRequests",
    "aclOtherRequests",
    # Java's RemotingCommand System property (the serialize type of answers), read from
    # the file by rmq
    "rocketmq.serialize.type",
}


def test_defaults_match_java_4_9_8_get_namesrv_config(monkeypatch):
    monkeypatch.setenv("ROCKETMQ_HOME", "/opt/rocketmq")
    java = parse_properties(java_319_body())
    ours = NamesrvConfig().to_properties()
    assert len(java) == 21
    assert set(java) - set(ours) == OMITTED_FROM_JAVA_4_9_8
    assert set(ours) - set(java) == BEYOND_4_9_8
    for key in set(java) - MACHINE_DEPENDENT - OMITTED_FROM_JAVA_4_9_8:
        assert ours[key] == java[key], key
    assert ours["rocketmqHome"] == java["rocketmqHome"] == "/opt/rocketmq"


def test_java_body_round_trips_through_our_parser_and_writer():
    body = java_319_body()
    assert properties_to_string(parse_properties(body)) == body


def test_default_paths_are_javas(monkeypatch):
    monkeypatch.setenv("HOME", "/home/someone")
    monkeypatch.delenv("ROCKETMQ_HOME", raising=False)
    c = NamesrvConfig()
    assert c.kvConfigPath == os.path.join("/home/someone", "namesrv", "kvConfig.json")
    assert c.configStorePath == os.path.join("/home/someone", "namesrv", "namesrv.properties")
    # rocketmqHome unset: null in Java, and properties2String skips nulls
    assert c.rocketmqHome is None
    assert "rocketmqHome" not in c.to_properties()


def test_5x_defaults_and_rmq_defaults():
    c = NamesrvConfig()
    assert c.listenPort == 9876
    assert c.scanNotActiveBrokerInterval == 5000
    assert c.serverChannelMaxIdleTimeSeconds == 120
    assert c.configBlackList == "configBlackList;configStorePath;kvConfigPath"
    assert c.returnOrderTopicConfigToBroker is True
    assert c.enableAllTopicList is True and c.enableTopicList is True
    assert c.supportActingMaster is False
    assert c.deleteTopicWithBrokerRegistration is False
    assert c.waitSecondsForService == 45 and c.needWaitForService is False
    assert c.maxFrameLength == 16 * 1024 * 1024
    assert c.listenHost == "0.0.0.0" == c.bindAddress
    assert c.maxConnections > 0 and c.maxOutputBufferBytes >= c.maxFrameLength


def test_every_field_has_a_java_type_and_a_unique_key():
    keys = [f.key for f in FIELDS]
    assert len(keys) == len(set(keys))
    assert {f.type for f in FIELDS} <= {"int", "long", "bool", "str"}
    assert not [f.key for f in FIELDS if is_path_key(f.key)
                and f.key not in ("rocketmqHome", "kvConfigPath", "configStorePath",
                                  "routeSnapshotPath", "tls.server.certPath",
                                  "tls.server.keyPath", "tls.server.trustCertPath",
                                  "tls.config.file", "aclFilePath")]


def test_get_text_is_k_eq_v_lines():
    text = NamesrvConfig(orderMessageEnable=True, listenPort=9877).to_properties_text()
    lines = text.split("\n")
    assert lines[-1] == ""
    assert "orderMessageEnable=true" in lines and "listenPort=9877" in lines
    assert all("=" in line for line in lines[:-1])
    assert text == NamesrvConfig(orderMessageEnable=True, listenPort=9877).to_properties_text()


def test_constructor_checks_names_and_types():
    with pytest.raises(TypeError):
        NamesrvConfig(noSuchKey=1)
    with pytest.raises(ConfigError):
        NamesrvConfig(listenPort="9876")
    with pytest.raises(ConfigError):
        NamesrvConfig(orderMessageEnable=1)
    with pytest.raises(ConfigError):
        NamesrvConfig(listenPort=70000)
    assert NamesrvConfig(bindAddress="127.0.0.1").listenHost == "127.0.0.1"


# ---------------------------------------------------------------- java.util.Properties

@pytest.mark.parametrize("text,expected", [
    ("a=b", {"a": "b"}),
    ("a:b", {"a": "b"}),
    ("a b", {"a": "b"}),
    ("a = b", {"a": "b"}),
    ("a   :   b", {"a": "b"}),
    ("a\t\fb", {"a": "b"}),
    ("   a=b", {"a": "b"}),
    ("a=b   ", {"a": "b   "}),  # trailing blanks belong to the value
    ("a==b", {"a": "=b"}),
    ("a =:b", {"a": ":b"}),
    ("a b=c", {"a": "b=c"}),
    ("a", {"a": ""}),
    ("a=", {"a": ""}),
    ("=b", {"": "b"}),
    ("a=1\na=2", {"a": "2"}),
    # comments: # and ! at the first non-blank position only
    ("# c\n! c\n  # c\na=b#not a comment", {"a": "b#not a comment"}),
    ("#a=b", {}),
    ("a=b\n\n\n   \n\tc=d", {"a": "b", "c": "d"}),
    # line terminators
    ("a=b\r\nc=d\re=f\n", {"a": "b", "c": "d", "e": "f"}),
    # continuations
    ("a=b\\\n    c", {"a": "bc"}),
    ("a=b\\\r\n  c\\\r  d", {"a": "bcd"}),
    ("a=b\\\n# not a comment", {"a": "b# not a comment"}),
    ("a=b\\\n\nc=d", {"a": "b", "c": "d"}),
    ("a=b\\\\\nc=d", {"a": "b\\", "c": "d"}),  # even backslashes: no continuation
    ("a=b\\", {"a": "b"}),  # a continuation at the end of input is dropped
    ("# comment \\\na=b", {"a": "b"}),  # a comment never continues
    ("\\\na=b", {"a": "b"}),
    # escapes
    ("a=\\t\\n\\r\\f\\\\\\q", {"a": "\t\n\r\f\\q"}),
    ("a=\\u0041\\u00e9\\u4E2D", {"a": "Aé中"}),
    ("a=\\uD83D\\uDE00", {"a": "😀"}),  # a UTF-16 pair is one character
    ("k\\=ey=v", {"k=ey": "v"}),
    ("k\\:ey:v", {"k:ey": "v"}),
    ("k\\ ey v", {"k ey": "v"}),
    ("\\#a=b", {"#a": "b"}),
    ("kv\\u0043onfigPath=x", {"kvConfigPath": "x"}),
])
def test_properties_load_rules(text, expected):
    assert parse_properties(text) == expected


@pytest.mark.parametrize("text", ["a=\\u12", "a=\\u12G4", "\\uXYZW=1"])
def test_malformed_unicode_escape(text):
    with pytest.raises(ConfigError, match="Malformed"):
        parse_properties(text)


def test_properties_file_is_iso_8859_1(tmp_path):
    path = tmp_path / "namesrv.properties"
    path.write_bytes(b"productEnvName=caf\xe9\nother=\\u00e9\n")
    assert load_properties_file(path) == {"productEnvName": "café", "other": "é"}


# ---------------------------------------------------------------- load(path)

def test_load_a_java_namesrv_properties(tmp_path):
    path = tmp_path / "namesrv.properties"
    path.write_text(
        "# NameServer\n"
        "listenPort = 9877\n"
        "orderMessageEnable:true\n"
        "scanNotActiveBrokerInterval  10000\n"
        "productEnvName=  prod  \n"
        "kvConfigPath=/data/ns/kvConfig.json\n"
        "clusterTest=TRUE\n", "latin-1")
    c = NamesrvConfig.load(path)
    assert c.listenPort == 9877
    assert c.orderMessageEnable is True
    assert c.scanNotActiveBrokerInterval == 10000
    assert c.productEnvName == "prod"  # properties2Object trims
    assert c.kvConfigPath == "/data/ns/kvConfig.json"
    assert c.clusterTest is True
    # NamesrvStartup sets configStorePath to the -c file itself
    assert c.configStorePath == str(path)
    assert c.source == str(path)


def test_load_warns_about_unknown_keys_and_keeps_them(tmp_path, caplog):
    path = tmp_path / "namesrv.properties"
    path.write_text("listenPort=9877\nbrokerClusterName=X\nsomeFutureKey = v \n", "latin-1")
    with caplog.at_level(logging.WARNING, logger="rmq.namesrv.config"):
        c = NamesrvConfig.load(path)
    warned = " ".join(r.getMessage() for r in caplog.records if r.name == "rmq.namesrv.config")
    assert "brokerClusterName" in warned and "someFutureKey" in warned
    assert c.listenPort == 9877
    # Java registers the whole file in its Configuration: GET shows them, raw
    props = c.to_properties()
    assert props["brokerClusterName"] == "X" and props["someFutureKey"] == "v "
    assert c.extra == {"brokerClusterName": "X", "someFutureKey": "v "}
    assert c.brokerClusterName == "X"
    with pytest.raises(AttributeError):
        c.noSuchThing


@pytest.mark.parametrize("line,key", [
    ("listenPort=abc", "listenPort"),
    ("listenPort=", "listenPort"),
    ("listenPort=98 76", "listenPort"),
    ("listenPort=1_000", "listenPort"),
    ("listenPort=70000", "listenPort"),
    ("serverWorkerThreads=2147483648", "serverWorkerThreads"),
    ("scanNotActiveBrokerInterval=5e3", "scanNotActiveBrokerInterval"),
    ("scanNotActiveBrokerInterval=9223372036854775808", "scanNotActiveBrokerInterval"),
    ("maxFrameLength=0", "maxFrameLength"),
])
def test_load_bad_value_raises_naming_key_value_and_file(tmp_path, line, key):
    path = tmp_path / "namesrv.properties"
    path.write_text(line + "\n", "latin-1")
    with pytest.raises(ConfigError) as info:
        NamesrvConfig.load(path)
    e = info.value
    assert isinstance(e, RmqError) and isinstance(e, ValueError)
    assert e.key == key and e.value == line.split("=", 1)[1]
    assert key in str(e) and str(path) in str(e) and e.path == str(path)


def test_load_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        NamesrvConfig.load(tmp_path / "nope.properties")


# ---------------------------------------------------------------- type conversion

@pytest.mark.parametrize("text,attr,value", [
    ("listenPort=+9877", "listenPort", 9877),
    ("listenPort= \t9877\t ", "listenPort", 9877),
    ("serverCallbackExecutorThreads=-1", "serverCallbackExecutorThreads", -1),
    ("serverWorkerThreads=2147483647", "serverWorkerThreads", 2147483647),
    ("scanNotActiveBrokerInterval=9223372036854775807", "scanNotActiveBrokerInterval",
     9223372036854775807),
    ("orderMessageEnable=true", "orderMessageEnable", True),
    ("orderMessageEnable=True", "orderMessageEnable", True),
    ("orderMessageEnable= TRUE ", "orderMessageEnable", True),
    ("enableTopicList=false", "enableTopicList", False),
    ("enableTopicList=yes", "enableTopicList", False),  # Boolean.parseBoolean
    ("enableTopicList=", "enableTopicList", False),
    ("productEnvName=  x y  ", "productEnvName", "x y"),
    ("bindAddress=127.0.0.1", "listenHost", "127.0.0.1"),
    ("listenHost=::1", "bindAddress", "::1"),
])
def test_conversion_as_properties2object(text, attr, value):
    c = NamesrvConfig()
    c.update_from_properties_text(text)
    assert getattr(c, attr) == value
    assert type(getattr(c, attr)) is type(value)


def test_non_boolean_value_warns(caplog):
    c = NamesrvConfig()
    with caplog.at_level(logging.WARNING, logger="rmq.namesrv.config"):
        c.update_from_properties_text("enableTopicList=yes")
    assert "enableTopicList" in caplog.text
    assert c.enableTopicList is False


def test_to_properties_formats_as_java():
    c = NamesrvConfig()
    c.update_from_properties_text("orderMessageEnable=TRUE\nlistenPort=+0010")
    props = c.to_properties()
    assert props["orderMessageEnable"] == "true" and props["listenPort"] == "10"


# ---------------------------------------------------------------- UPDATE_NAMESRV_CONFIG

def test_java_318_request_bodies():
    c = NamesrvConfig()
    on = decode_frame(vector_bytes("318_update_namesrv_config_request.bin")).body
    off = decode_frame(vector_bytes("318_update_namesrv_config_off_request.bin")).body
    assert c.update_from_properties_text(on.decode("utf-8")) == ["orderMessageEnable"]
    assert c.orderMessageEnable is True
    assert c.update_from_properties_text(on.decode("utf-8")) == []  # unchanged
    assert c.update_from_properties_text(off.decode("utf-8")) == ["orderMessageEnable"]
    assert c.orderMessageEnable is False


def test_update_returns_changed_keys_in_order():
    c = NamesrvConfig()
    changed = c.update_from_properties_text(
        "supportActingMaster=true\nlistenPort=9876\nenableAllTopicList=false\n")
    assert changed == ["supportActingMaster", "enableAllTopicList"]
    assert [getattr(c, k) for k in changed] == [True, False]


def test_update_ignores_unknown_keys_as_mergeIfExist_does():
    c = NamesrvConfig()
    before = c.to_properties_text()
    assert c.update_from_properties_text("noSuchKey=1\nbrokerClusterName=x") == []
    assert c.to_properties_text() == before
    with pytest.raises(AttributeError):
        c.noSuchKey


def test_update_may_change_the_files_extra_keys():
    c = NamesrvConfig.from_properties_text("someFutureKey=a\n")
    assert c.update_from_properties_text("someFutureKey=b") == ["someFutureKey"]
    assert c.to_properties()["someFutureKey"] == "b"


PATH_KEYS = sorted(ALWAYS_BLACKLISTED) + [
    # not NamesrvConfig keys, but path-like: refused all the same
    "brokerConfigPath", "storePathRootDir", "storePathCommitLog", "storeCheckpoint File",
    "logDir", "javaHome", "someFile", "configFiles", "dataDirs", "KVCONFIGPATH",
    # TLS: read at start only, whatever the key (rmq.namesrv.config.is_tls_key)
    "tls.server.mode", "tls.server.need.client.auth", "tls.server.keyPassword",
    "tls.server.certPath", "tls.config.file", "tls.enable",
]


@pytest.mark.parametrize("key", PATH_KEYS)
def test_black_listed_and_path_keys_are_refused_and_nothing_changes(key, tmp_path):
    c = NamesrvConfig(kvConfigPath=str(tmp_path / "kv.json"),
                      configStorePath=str(tmp_path / "ns.properties"))
    before = c.to_properties_text()
    body = f"orderMessageEnable=true\n{key.replace(' ', chr(92) + ' ')}=/tmp/evil\n"
    with pytest.raises(ConfigNoPermission) as info:
        c.update_from_properties_text(body)
    e = info.value
    assert e.key == key and e.keys == [key]
    assert key in str(e)
    assert isinstance(e, ConfigError) and isinstance(e, RmqError)
    assert c.to_properties_text() == before
    assert c.orderMessageEnable is False
    assert list(tmp_path.iterdir()) == []  # rmq never writes a config file


def test_escaped_forms_of_a_black_listed_key_are_refused():
    c = NamesrvConfig()
    for body in ("kv\\u0043onfigPath=/x", "kvConfig\\Path=/x", "  rocketmqHome : /x",
                 "configStorePath\\\n   =/x"):
        with pytest.raises(ConfigNoPermission):
            c.update_from_properties_text(body)


def test_config_black_list_from_the_file_adds_keys(tmp_path):
    path = tmp_path / "namesrv.properties"
    path.write_text("configBlackList=configBlackList;listenPort; orderMessageEnable\n",
                    "latin-1")
    c = NamesrvConfig.load(path)
    assert {"listenPort", "orderMessageEnable", "kvConfigPath", "rocketmqHome",
            "configStorePath", "configBlackList"} <= c.black_list()
    for body in ("listenPort=1", "orderMessageEnable=true", "kvConfigPath=/x"):
        with pytest.raises(ConfigNoPermission):
            c.update_from_properties_text(body)
    assert c.update_from_properties_text("clusterTest=true") == ["clusterTest"]


def test_an_empty_config_black_list_still_protects_paths():
    c = NamesrvConfig(configBlackList="")
    for key in ("configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome"):
        assert c.is_blacklisted(key)
        with pytest.raises(ConfigNoPermission):
            c.update_from_properties_text(f"{key}=x")
    assert not c.is_blacklisted("listenPort")


def test_path_rule():
    for key in ("kvConfigPath", "storePathRootDir", "rocketmqHome", "x.file", "paths",
                "storePathCommitLog", "Path", "dataDirectory"):
        assert is_path_key(key), key
    for key in ("listenPort", "listenHost", "bindAddress", "productEnvName",
                "configBlackList", "orderMessageEnable", "directMemory", "filer"):
        assert not is_path_key(key), key


@pytest.mark.parametrize("body", [
    "orderMessageEnable=true\nlistenPort=abc",
    "listenPort=9999\nserverWorkerThreads=99999999999",
    "clusterTest=true\nscanNotActiveBrokerInterval=",
    "supportActingMaster=true\nbindAddress=1.2.3.4\nlistenHost=5.6.7.8",
    "clusterTest=true\nproductEnvName=\\u12",
])
def test_update_is_all_or_nothing(body):
    c = NamesrvConfig()
    before = c.to_properties_text()
    with pytest.raises(ConfigError) as info:
        c.update_from_properties_text(body)
    assert not isinstance(info.value, ConfigNoPermission)
    assert c.to_properties_text() == before


def test_bad_value_error_names_key_and_value():
    with pytest.raises(ConfigError) as info:
        NamesrvConfig().update_from_properties_text("listenPort=abc")
    assert info.value.key == "listenPort" and info.value.value == "abc"
    assert "listenPort" in str(info.value) and "abc" in str(info.value)


def test_update_never_writes_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "namesrv.properties"
    path.write_text("listenPort=9877\n", "latin-1")
    c = NamesrvConfig.load(path)
    c.update_from_properties_text("orderMessageEnable=true\nclusterTest=true")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["namesrv.properties"]
    assert path.read_text("latin-1") == "listenPort=9877\n"


# ---------------------------------------------------------------- rocketmq.serialize.type

def test_serialize_type_defaults_to_json(monkeypatch):
    monkeypatch.delenv(SERIALIZE_TYPE_ENV, raising=False)
    c = NamesrvConfig()
    assert c.answer_serialize_type() == "JSON"
    assert c.to_properties()[SERIALIZE_TYPE_KEY] == "JSON"


@pytest.mark.parametrize("env, text, expected", [
    # Java: System.getProperty("rocketmq.serialize.type", getenv("ROCKETMQ_SERIALIZE_TYPE"))
    ("ROCKETMQ", "", "ROCKETMQ"),                        # the variable, when the key is absent
    ("ROCKETMQ", "rocketmq.serialize.type=JSON\n", "JSON"),   # the key before the variable
    ("JSON", "rocketmq.serialize.type=ROCKETMQ\n", "ROCKETMQ"),
    ("ROCKETMQ", "rocketmq.serialize.type=\n", "JSON"),      # set but blank: JSON (isBlank)
    ("  ", "", "JSON"),
    ("", "", "JSON"),
    (None, "rocketmq.serialize.type = ROCKETMQ \n", "ROCKETMQ"),   # a file's value is trimmed
])
def test_serialize_type_is_the_key_then_the_variable(monkeypatch, env, text, expected):
    if env is None:
        monkeypatch.delenv(SERIALIZE_TYPE_ENV, raising=False)
    else:
        monkeypatch.setenv(SERIALIZE_TYPE_ENV, env)
    assert NamesrvConfig.from_properties_text(text).answer_serialize_type() == expected


@pytest.mark.parametrize("value", ["json", "Rocketmq", "BINARY", "JSON;ROCKETMQ", "0"])
def test_a_serialize_type_java_would_not_start_with_is_an_error(monkeypatch, value):
    # SerializeType.valueOf: the exact names; Java throws at class initialization
    monkeypatch.delenv(SERIALIZE_TYPE_ENV, raising=False)
    c = NamesrvConfig.from_properties_text(f"{SERIALIZE_TYPE_KEY}={value}\n")
    with pytest.raises(ConfigError) as info:
        c.answer_serialize_type()
    assert info.value.key == SERIALIZE_TYPE_KEY and info.value.value == value
    assert SERIALIZE_TYPE_KEY in str(info.value) and repr(value) in str(info.value)
    monkeypatch.setenv(SERIALIZE_TYPE_ENV, value)
    with pytest.raises(ConfigError):
        NamesrvConfig().answer_serialize_type()


def test_serialize_type_is_never_set_remotely():
    c = NamesrvConfig()
    with pytest.raises(ConfigNoPermission):
        c.update_from_properties_text(f"{SERIALIZE_TYPE_KEY}=ROCKETMQ\n")
    assert c.answer_serialize_type() == "JSON"


# ---------------------------------------------------------------- GET_CLIENT_CONFIG (47)

def test_client_configs_of_the_java_5_0_0_vector():
    # the 5.0.0 NameServer ran with rocketmqHome /home/rocketmq/namesrv-29876 (path
    # rewritten in the vector) and orderMessageEnable false
    request = decode_frame(V5.bytes("47_get_client_config_request.bin"))
    answer = decode_frame(V5.bytes("47_get_client_config_response.bin"))
    keys = decode_remote_client_config(request.body)
    assert keys == ["orderMessageEnable", "rocketmqHome"]
    c = NamesrvConfig(rocketmqHome="/home/rocketmq/namesrv-29876")
    assert c.client_configs_text(keys).encode("utf-8") == answer.body


def test_client_configs_only_name_settings_of_the_config_objects(monkeypatch):
    monkeypatch.delenv("ROCKETMQ_HOME", raising=False)
    c = NamesrvConfig.from_properties_text("someFutureKey=x\nlistenPort=9877\n"
                                           "tls.server.keyPassword=secret\n")
    assert c.rocketmqHome is None
    # unknown keys, the file's extra keys, null settings, non-strings and secrets: nothing
    assert c.client_configs_text(["nope", "someFutureKey", "rocketmqHome", 1, True, None, [],
                                  {}, "tls.server.keyPassword", ""]) == ""
    assert c.client_configs_text([]) == ""
    # each once, whatever the repeats; Java's k=v\n lines
    assert c.client_configs_text(["listenPort", "listenPort", "nope", 5, "listenPort"]) == \
        "listenPort=9877\n"
    assert c.client_configs_text(["clusterTest", "listenPort"]) == \
        c.client_configs_text(["listenPort", "clusterTest", "listenPort"]) == \
        "clusterTest=false\nlistenPort=9877\n"


def test_client_configs_are_bounded_by_the_configuration():
    c = NamesrvConfig(rocketmqHome="/opt/rocketmq")
    every = [f.key for f in FIELDS]
    text = c.client_configs_text(every)
    assert parse_properties(text) == {k: v for k, v in c.to_properties().items()
                                      if k in every}
    assert len(text) == len(c.to_properties_text())
    many = every * 200 + [f"k{i}" for i in range(100_000)] + ["x" * 1_000_000]
    assert c.client_configs_text(many) == text


def test_config_keys_never_fill_a_concurrent_hash_map_bin():
    # java_properties_order does not model tree bins: Java makes one when a key lands
    # in a bin of 8 (TREEIFY_THRESHOLD). rmq's keys never fill one, whichever of them a
    # client asks for, at any table size they reach (16 bins, doubled at 3/4 full).
    keys = [f.key for f in FIELDS]
    n = 16
    while n * 3 // 4 <= len(keys):
        assert max(Counter(java_spread_hash(k) & (n - 1) for k in keys).values()) <= 8, n
        n *= 2
    assert sorted(java_properties_order(keys)) == sorted(keys)
    assert sorted(java_properties_order(reversed(keys))) == sorted(keys)


@pytest.mark.requires("java")
def test_client_config_order_is_the_jdks_properties_order():
    """java_properties_order against java.util.Properties itself (JDK 9+), over
    random sequences of rmq's keys (repeats included) and of random strings."""
    rng = random.Random(47)
    keys = [f.key for f in FIELDS]
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._"
    cases = [keys, keys[::-1], []]
    cases += [[rng.choice(keys) for _ in range(rng.randint(1, 2 * len(keys)))]
              for _ in range(1000)]
    while len(cases) < 2000:
        case = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
                for _ in range(rng.randint(1, 120))]
        try:
            java_properties_order(case)
        except ValueError:      # a bin Java would make a tree of: not modelled
            continue
        cases.append(case)
    out = subprocess.run(
        ["java", str(Path(__file__).resolve().parent / "interop" / "PropertiesOrder.java")],
        input="".join(" ".join(c) + "\n" for c in cases), capture_output=True, text=True,
        timeout=120, check=True, env=dict(os.environ, LC_ALL="C.UTF-8"))
    java = out.stdout.split("\n")[:len(cases)]
    assert [" ".join(java_properties_order(c)) for c in cases] == java
