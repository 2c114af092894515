"""Signed requests (issue 16, item 3): RocketMQ's ACL signature (rmq.acl) checked by
the NameServer against a plain_acl.yml (rmq.namesrv.acl), over real TCP; rmq's
clients, ``rmq admin`` and the Apache C++ client (PyPI rocketmq 0.4.4) signing."""

import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import parts
import rmq
from nameserver import Client, parse_json_body, register_broker, running_namesrv, wait_for
from rmq import bodies
from rmq.acl import (SessionCredentials, calc_signature, credentials_from, sign_command,
                     signature_fields, signing_content)
from rmq.admin import NamesrvAdmin
from rmq.errors import ResponseError
from rmq.namesrv import acl as server_acl
from rmq.namesrv.config import ConfigError, ConfigNoPermission, NamesrvConfig
from rmq.protocol import RequestCode as RC
from rmq.registrar import BrokerRegistrar, RegistrationError

# every test on the asyncio server and on the C engine (serverEngine=c)
pytestmark = pytest.mark.usefixtures("each_server")

INTEROP = Path(__file__).resolve().parent / "interop"
_PKG_PARENT = str(Path(rmq.__file__).resolve().parent.parent)

ADMIN = SessionCredentials("rocketmq2", "12345678")
USER = SessionCredentials("RocketMQ", "12345678")
BROKER_ACCOUNT = SessionCredentials("broker-a-key", "broker-a-secret")
WRONG = SessionCredentials("rocketmq2", "not-the-secret")
UNKNOWN = SessionCredentials("nobody-at-all", "12345678")

PLAIN_ACL = """\
# as Java's distribution ships it, plus a broker's account
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
    groupPerms:
      - groupA=DENY
  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    admin: true
  - accessKey: broker-a-key
    secretKey: "broker-a-secret"
    admin: false
"""


@pytest.fixture
def acl_file(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text(PLAIN_ACL)
    return path


@pytest.fixture
def acl_namesrv(tmp_path, acl_file):
    with running_namesrv(tmp_path, aclEnable=True, aclFilePath=str(acl_file)) as app:
        yield app


def signed(code, ext=None, body=b"", credentials=None, **kw):
    cmd = rmq.RemotingCommand.request(code, ext, body, **kw)
    if credentials is not None:
        sign_command(cmd, credentials)
    return cmd


# ---------------------------------------------------------------- the signature

#: (secret, body, ext fields) -> the signature Java's AclClientRPCHook computes, from
#: tests/interop/AclSign.java (the JDK's TreeMap, String.getBytes(UTF_8), HmacSHA1,
#: Base64), run when these were written and again below when java is on PATH.
JAVA_VECTORS = [
    ("12345678", b"", {"topic": "T", "AccessKey": "rocketmq2"},
     "msA2HLu5rmWfLoIZzBCi0WKUq2o="),
]
JAVA_CASES = [
    ("12345678", b"", {"topic": "T", "AccessKey": "rocketmq2"}),
    ("s3cr3t-\u00e9", b"\x00\x01body\xff", {"namespace": "ns", "key": "k\u00fc", "value": "v",
                                         "AccessKey": "ak-1234"}),
    # names that sort differently as UTF-16 (Java) and as code points: U+FF21 vs U+1F600
    ("secret-key", b"", {"\uff21": "x", "\U0001f600": "y", "a": "z", "Z": "w",
                         "AccessKey": "ak-1234", "SecurityToken": "tok"}),
    ("12345678", b'{"topicConfigSerializeWrapper":{}}',
     {"brokerName": "broker-a", "brokerId": "0", "clusterName": "c1",
      "AccessKey": "broker-a-key", "Signature": "ignored-by-both"}),
]


@pytest.mark.parametrize("secret,body,ext,expected", JAVA_VECTORS)
def test_signature_equals_javas_known_vector(secret, body, ext, expected):
    assert calc_signature(signing_content(ext, body), secret) == expected
    creds = SessionCredentials(ext["AccessKey"], secret)
    rest = {k: v for k, v in ext.items() if k != "AccessKey"}
    assert signature_fields(rest, body, creds) == {"AccessKey": ext["AccessKey"],
                                                   "Signature": expected}


@pytest.mark.requires("java")
@pytest.mark.parametrize("secret,body,ext", JAVA_CASES)
def test_signature_equals_the_jdk_computing_javas_steps(secret, body, ext):
    args = [x for kv in ext.items() for x in kv]
    out = subprocess.run(["java", str(INTEROP / "AclSign.java"), secret, body.hex(), *args],
                         capture_output=True, text=True, timeout=120, check=True,
                         env=dict(os.environ, LC_ALL="C.UTF-8"))
    assert calc_signature(signing_content(ext, body), secret) == out.stdout.strip()


def test_content_leaves_out_the_signature_and_on_the_server_the_query_flag():
    ext = {"b": "2", "a": "1", "Signature": "S", "_UNIQUE_KEY_QUERY": "q"}
    assert signing_content(ext, b"!") == b"q12!"     # the client signs every field
    assert signing_content(ext, b"!", exclude=server_acl._SERVER_EXCLUDES) == b"12!"


def test_credentials_never_show_the_secret_and_come_from_the_environment():
    assert "12345678" not in repr(ADMIN) and "rocketmq2" in repr(ADMIN)
    env = {"RMQ_ACCESS_KEY": "ak-from-env", "RMQ_SECRET_KEY": "sk-from-env"}
    assert credentials_from(environ=env) == SessionCredentials("ak-from-env", "sk-from-env")
    assert credentials_from("ak", "sk", environ=env) == SessionCredentials("ak", "sk")
    assert credentials_from(environ={}) is None
    with pytest.raises(ValueError):
        credentials_from(environ={"RMQ_ACCESS_KEY": "only-the-key"})


# ---------------------------------------------------------------- the accounts file

def test_the_java_distributions_file_is_read(acl_file):
    accounts = server_acl.load_accounts(acl_file)
    assert {a: (x.secret_key, x.admin) for a, x in accounts.accounts.items()} == {
        "RocketMQ": ("12345678", False), "rocketmq2": ("12345678", True),
        "broker-a-key": ("broker-a-secret", False)}
    white = accounts.accounts["rocketmq2"].white
    assert white("192.168.1.7") and not white("192.168.2.7")
    assert accounts.accounts["RocketMQ"].white is None
    assert any(t("10.10.103.5") for t in accounts.global_white)


@pytest.mark.parametrize("pattern,yes,no", [
    ("*", ["1.2.3.4", "::1"], []),
    ("192.168.0.{100,101}", ["192.168.0.100", "192.168.0.101"], ["192.168.0.102"]),
    ("192.168.1.10-20", ["192.168.1.10", "192.168.1.20"], ["192.168.1.21", "192.168.2.15"]),
    ("192.168.*", ["192.168.9.9"], ["192.169.0.1"]),
    ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2"]),
    ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["127.0.0.1"]),
])
def test_white_address_patterns_are_javas(pattern, yes, no):
    match = server_acl.address_matcher(pattern, "test")
    assert all(match(a) for a in yes) and not any(match(a) for a in no)


@pytest.mark.parametrize("text,says", [
    ("accounts:\n  - accessKey: RocketMQ\n    secretKey: [1\n", "not YAML at line 4"),
    ("accounts:\n  - accessKey: short\n    secretKey: 12345678\n", "longer than 6"),
    ("accounts:\n  - accessKey: RocketMQ\n", "secretKey are required"),
    ("accounts:\n  - {accessKey: RocketMQ, secretKey: 12345678}\n"
     "  - {accessKey: RocketMQ, secretKey: 87654321}\n", "appears twice"),
    ("accounts:\n  - {accessKey: RocketMQ, secretKey: 12345678, admin: maybe}\n",
     "accounts[0].admin"),
    ("accounts:\n  - {accessKey: RocketMQ, secretKey: 12345678, whiteRemoteAddress: 1.2.3.400}\n",
     "'1.2.3.400' is not an IP address"),
    ("accounts:\n  - {accessKey: RocketMQ, secretKey: 12345678, whiteRemoteAddress: 1.2.3.9-300}\n",
     "'9-300' is not within 0-255"),
    ("globalWhiteRemoteAddresses: 10.0.0.1\n", "not a list"),
    ("- just a list\n", "expected a mapping"),
])
def test_a_bad_file_is_a_config_error_saying_where(tmp_path, text, says):
    path = tmp_path / "plain_acl.yml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        server_acl.load_accounts(path)
    assert says in str(e.value) and str(path) in str(e.value)
    assert "12345678" not in str(e.value) and "87654321" not in str(e.value)


def test_a_file_above_the_bound_is_refused(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_bytes(b"#" * (server_acl.MAX_ACL_FILE_BYTES + 1))
    with pytest.raises(ConfigError, match="larger than"):
        server_acl.load_accounts(path)


def test_a_bad_class_setting_is_refused(acl_file):
    modes = dict.fromkeys(server_acl.CLASS_KEYS, "open")
    modes["aclRouteRequests"] = "sometimes"
    with pytest.raises(ConfigError) as e:
        server_acl.AclChecker(str(acl_file), modes)
    assert e.value.key == "aclRouteRequests" and "sometimes" in str(e.value)


def test_the_acl_settings_cannot_be_changed_remotely():
    c = NamesrvConfig()
    for key in ("aclEnable", "aclFilePath", "aclAdminRequests", "aclBrokerRequests",
                "aclRouteRequests", "aclOtherRequests"):
        with pytest.raises(ConfigNoPermission):
            c.update_from_properties_text(f"{key}=open\n")
    assert c.aclEnable is False and c.aclAdminRequests == "admin"


# ---------------------------------------------------------------- admin operations

def _kv(c, key):
    return c.request(RC.GET_KV_CONFIG, {"namespace": "ns", "key": key})


def _state(app):
    """What the admin operations could change: KV table, routes, brokers, config."""
    with Client(app.address) as c:
        return (c.request(RC.GET_KVLIST_BY_NAMESPACE, {"namespace": "ns"}).body,
                c.request(RC.GET_BROKER_CLUSTER_INFO).body,
                c.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"}).body,
                c.request(RC.GET_NAMESRV_CONFIG).body)


def _admin_requests():
    """Every state-changing admin request, as (code, ext, body)."""
    route = bodies.encode_topic_route_data({"queueDatas": [
        {"brokerName": "broker-a", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6,
         "topicSysFlag": 0}], "brokerDatas": []})
    return [
        (RC.PUT_KV_CONFIG, {"namespace": "ns", "key": "k2", "value": "v2"}, b""),
        (RC.DELETE_KV_CONFIG, {"namespace": "ns", "key": "k1"}, b""),
        (RC.UPDATE_NAMESRV_CONFIG, None, b"clusterTest=true\n"),
        (RC.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}, b""),
        (RC.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}, b""),
        (RC.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicA"}, b""),
        (RC.REGISTER_TOPIC_IN_NAMESRV, {"topic": "TopicNew"}, route),
        (RC.UNREGISTER_BROKER, {"clusterName": "c1", "brokerAddr": "127.0.0.1:10911",
                                "brokerName": "broker-a", "brokerId": "0"}, b""),
    ]


@pytest.fixture
def seeded(acl_namesrv):
    """A broker with TopicA and TopicB (its connection open: closing it would drop the
    broker) and the KV entry ns/k1."""
    with Client(acl_namesrv.address) as c:
        assert register_broker(c, "broker-a", "127.0.0.1:10911",
                               topics=["TopicA", "TopicB"]).code == 0
        assert c.call(signed(RC.PUT_KV_CONFIG, {"namespace": "ns", "key": "k1", "value": "v1"},
                             credentials=ADMIN)).code == 0
        yield acl_namesrv


@pytest.mark.parametrize("creds,remark", [
    (None, "No accessKey is configured"),
    (WRONG, "Check signature failed for accessKey=rocketmq2"),
    (UNKNOWN, "No acl config for nobody-at-all"),
    (USER, "Need admin permission for request code={code}, but accessKey=RocketMQ is not"),
])
def test_admin_operations_are_refused_and_change_nothing(seeded, caplog, creds, remark):
    acl_namesrv = seeded
    before = _state(acl_namesrv)
    with caplog.at_level(logging.WARNING, logger="rmq.namesrv.acl"), Client(acl_namesrv.address) as c:
        for code, ext, body in _admin_requests():
            resp = c.call(signed(code, ext, body, credentials=creds))
            assert (resp.code, resp.remark) == (16, remark.format(code=code)), code
            assert resp.ext_fields in (None, {})
        # oneway: no answer, and nothing applied either
        for code, ext, body in _admin_requests():
            c.send(signed(code, ext, body, credentials=creds, oneway=True))
        assert c.call(signed(RC.GET_KV_CONFIG, {"namespace": "ns", "key": "k1"})).code == 0
    assert _state(acl_namesrv) == before
    refused = acl_namesrv.processor.counters.refused      # rmq_refused_total{reason}
    reason, other = ("acl_unsigned", "acl_denied") if creds is None else ("acl_denied",
                                                                          "acl_unsigned")
    assert (refused[reason], refused[other]) == (2 * len(_admin_requests()), 0)
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 2 * len(_admin_requests())
    for line, (code, _, _) in zip(refusals, _admin_requests()):
        assert line.startswith(f"request {code} from 127.0.0.1:")
        assert ("accessKey None" if creds is None else f"accessKey '{creds.access_key}'") in line
    text = caplog.text
    assert "12345678" not in text and "not-the-secret" not in text and "Signature" not in text


def test_admin_operations_signed_by_an_admin_account_are_applied(seeded):
    acl_namesrv = seeded
    with Client(acl_namesrv.address) as c:
        answers = []
        for code, ext, body in _admin_requests():
            answers.append(c.call(signed(code, ext, body, credentials=ADMIN)))
            if code == RC.REGISTER_TOPIC_IN_NAMESRV:
                assert c.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicNew"}).code == 0
        assert [a.code for a in answers] == [0] * len(answers), [a.remark for a in answers]
        assert answers[3].ext_fields["wipeTopicCount"] == "2"
        assert _kv(c, "k2").ext_fields["value"] == "v2" and _kv(c, "k1").code == 22
        assert b"clusterTest=true" in c.request(RC.GET_NAMESRV_CONFIG).body
        assert c.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"}).code == 17
        assert _cluster(acl_namesrv) == {}


def test_reads_and_registrations_stay_open_by_default(acl_namesrv):
    with Client(acl_namesrv.address) as c:
        assert register_broker(c, "broker-a", "127.0.0.1:10911", topics=["T1", "T2"]).code == 0
        for _ in range(3):          # the core's cached answer too
            assert c.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}).code == 0
        assert c.request(RC.GET_BROKER_CLUSTER_INFO).code == 0
        assert c.request(RC.GET_KV_CONFIG, {"namespace": "n", "key": "k"}).code == 22


def test_the_admin_flag_is_needed_even_from_a_white_listed_address(tmp_path):
    """An account's whiteRemoteAddress spares the signature (as Java), not the admin flag."""
    path = tmp_path / "plain_acl.yml"
    path.write_text("accounts:\n"
                    "  - {accessKey: local-user, secretKey: 12345678, whiteRemoteAddress: 127.0.0.1}\n"
                    "  - {accessKey: local-admin, secretKey: 12345678, admin: true,\n"
                    "     whiteRemoteAddress: 127.0.0.*}\n")
    with running_namesrv(tmp_path, aclEnable=True, aclFilePath=str(path)) as app, \
            Client(app.address) as c:
        put = {"namespace": "ns", "key": "k", "value": "v"}
        assert c.request(RC.PUT_KV_CONFIG, {**put, "AccessKey": "local-user"}).code == 16
        assert c.request(RC.PUT_KV_CONFIG, {**put, "AccessKey": "local-admin"}).code == 0


def test_a_global_white_address_passes_unsigned(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text("globalWhiteRemoteAddresses: ['127.0.0.*']\naccounts: []\n")
    with running_namesrv(tmp_path, aclEnable=True, aclFilePath=str(path)) as app, \
            Client(app.address) as c:
        assert c.request(RC.PUT_KV_CONFIG, {"namespace": "n", "key": "k", "value": "v"}).code == 0


def test_the_file_is_read_again_when_it_changes(tmp_path, acl_file, caplog):
    newcomer = SessionCredentials("newcomer", "new-secret")
    put = {"namespace": "ns", "key": "k", "value": "v"}
    with caplog.at_level(logging.INFO, logger="rmq.namesrv.acl"), \
            running_namesrv(tmp_path, aclEnable=True, aclFilePath=str(acl_file)) as app, \
            Client(app.address) as c:
        assert c.call(signed(RC.PUT_KV_CONFIG, put, credentials=newcomer)).code == 16
        acl_file.write_text(PLAIN_ACL + "  - {accessKey: newcomer, secretKey: new-secret, "
                                        "admin: true}\n")
        assert wait_for(lambda: c.call(signed(RC.PUT_KV_CONFIG, put,
                                              credentials=newcomer)).code == 0, 10)
        # a broken version is not applied: the accounts before it stay
        acl_file.write_text("accounts: [")
        # looked at on a checked request, no more than once a second
        assert wait_for(lambda: c.call(signed(RC.PUT_KV_CONFIG, put, credentials=newcomer))
                        and "not applied" in caplog.text, 10)
        assert c.call(signed(RC.PUT_KV_CONFIG, put, credentials=newcomer)).code == 0
        assert c.call(signed(RC.PUT_KV_CONFIG, put)).code == 16


# ---------------------------------------------------------------- registrations

def _registrar(app, credentials=None, broker_name="broker-a"):
    return BrokerRegistrar(app.address, cluster="c1", broker_name=broker_name,
                           broker_addr="127.0.0.1:10911",
                           topics=[bodies.topic_config(f"T{i}", 4, 4) for i in range(3)],
                           credentials=credentials)


def _cluster(app):
    with Client(app.address) as c:
        return parse_json_body(c.request(RC.GET_BROKER_CLUSTER_INFO).body)[0]["brokerAddrTable"]


@pytest.mark.parametrize("mode", ["signed", "admin"])
def test_registrations_need_an_account_when_configured(tmp_path, acl_file, mode):
    async def attempt(app, credentials):
        """(the error, the brokers while the registrar is connected)"""
        r = _registrar(app, credentials)
        try:
            await r.register_broker_all()
            return None, list(_cluster(app))
        except RegistrationError as e:
            return e.errors[app.address], list(_cluster(app))
        finally:
            await r.stop(unregister=False)

    with running_namesrv(tmp_path, aclEnable=True, aclFilePath=str(acl_file),
                         aclBrokerRequests=mode) as app:
        err, brokers = asyncio.run(attempt(app, None))
        assert isinstance(err, ResponseError) and err.code == 16 and brokers == []
        assert err.remark == "No accessKey is configured"
        err, brokers = asyncio.run(attempt(app, BROKER_ACCOUNT))
        if mode == "admin":
            assert isinstance(err, ResponseError) and err.code == 16 and brokers == []
            err, brokers = asyncio.run(attempt(app, ADMIN))
        assert err is None and brokers == ["broker-a"]
        with Client(app.address) as c:      # a heartbeat is a registration's too
            hb = {"clusterName": "c1", "brokerAddr": "127.0.0.1:10911", "brokerName": "broker-a"}
            assert c.request(RC.BROKER_HEARTBEAT, hb).code == 16
            creds = ADMIN if mode == "admin" else BROKER_ACCOUNT
            assert c.call(signed(RC.BROKER_HEARTBEAT, hb, credentials=creds)).code == 0


def test_a_signed_registrar_unregisters_with_an_admin_account(acl_namesrv):
    async def main():
        r = _registrar(acl_namesrv, ADMIN)
        await r.register_broker_all()
        assert list(_cluster(acl_namesrv)) == ["broker-a"]
        return await r.stop()
    assert asyncio.run(main()) == {acl_namesrv.address: None}
    assert _cluster(acl_namesrv) == {}


# ---------------------------------------------------------------- route queries

def test_route_queries_can_require_a_signature(tmp_path, acl_file):
    with running_namesrv(tmp_path, aclEnable=True, aclFilePath=str(acl_file),
                         aclRouteRequests="signed") as app, Client(app.address) as c:
        assert register_broker(c, "broker-a", "127.0.0.1:10911", topics=["T1", "T2"]).code == 0
        for _ in range(3):    # signed first, so that an answer is cached: still refused unsigned
            ok = c.call(signed(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, credentials=USER))
            assert ok.code == 0 and b"broker-a" in ok.body
            resp = c.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"})
            assert (resp.code, resp.remark, resp.body) == (16, "No accessKey is configured", b"")
        bad = c.call(signed(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, credentials=WRONG))
        assert bad.code == 16
        # pipelined: each query of one read checked on its own
        cmds = [signed(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"},
                       credentials=USER if i % 2 else None) for i in range(10)]
        c.send_raw(b"".join(rmq.encode_frame(x) for x in cmds))
        answers = {}
        while len(answers) < len(cmds):
            a = c.receive()
            answers[a.opaque] = a.code
        assert [answers[x.opaque] for x in cmds] == [16, 0] * 5
        # a large body is checked too (in the table thread): its signature covers it
        big = b"x" * (server_acl._LOOP_BODY_BYTES + 1)
        assert c.call(signed(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, big,
                             credentials=USER)).code == 0
        forged = signed(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, big, credentials=USER)
        forged.body = big[:-1] + b"y"
        assert c.call(forged).code == 16
        # the other reads stay open
        assert c.request(RC.GET_BROKER_CLUSTER_INFO).code == 0


# ---------------------------------------------------------------- rmq's clients

def test_namesrv_admin_signs(acl_namesrv):
    with NamesrvAdmin(acl_namesrv.address) as unsigned:
        (result,) = unsigned.update_kv_config("ns", "k", "v")
        assert isinstance(result.error, ResponseError) and result.error.code == 16
    with NamesrvAdmin(acl_namesrv.address, credentials=ADMIN) as admin:
        (result,) = admin.update_kv_config("ns", "k", "v")
        assert result.ok
        assert [r.value for r in admin.wipe_write_perm("nobody")] == [0]


def _rmq_admin(*args, env=None):
    e = {k: v for k, v in os.environ.items() if k not in ("RMQ_ACCESS_KEY", "RMQ_SECRET_KEY")}
    e.update(env or {})
    e["PYTHONPATH"] = os.pathsep.join(p for p in (_PKG_PARENT, e.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "rmq", "admin", *args], capture_output=True,
                          text=True, env=e, timeout=60)


def test_rmq_admin_signs_with_keys_from_options_or_the_environment(acl_namesrv):
    addr = ["-n", acl_namesrv.address]
    r = _rmq_admin("updateKvConfig", *addr, "-s", "ns", "-k", "k1", "-v", "v1")
    assert r.returncode == 1 and "16" in r.stderr + r.stdout
    r = _rmq_admin("updateKvConfig", *addr, "-s", "ns", "-k", "k1", "-v", "v1",
                   env={"RMQ_ACCESS_KEY": ADMIN.access_key, "RMQ_SECRET_KEY": ADMIN.secret_key})
    assert r.returncode == 0, r.stderr
    r = _rmq_admin("deleteKvConfig", *addr, "-s", "ns", "-k", "k1", "--accessKey",
                   ADMIN.access_key, "--secretKey", ADMIN.secret_key)
    assert r.returncode == 0, r.stderr
    r = _rmq_admin("deleteKvConfig", *addr, "-s", "ns", "-k", "k1", "--accessKey", "only-key")
    assert r.returncode == 2 and "secret key" in r.stderr


def test_rmq_namesrv_refuses_to_start_with_a_bad_acl_file(tmp_path):
    bad = tmp_path / "plain_acl.yml"
    bad.write_text("accounts:\n  - accessKey: RocketMQ\n    secretKey: [12345678\n")
    conf = tmp_path / "namesrv.properties"
    conf.write_text(f"aclEnable=true\naclFilePath={bad}\n")
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in (_PKG_PARENT, e.get("PYTHONPATH")) if p)
    r = subprocess.run([sys.executable, "-m", "rmq", "namesrv", "-c", str(conf), "--listen",
                        "127.0.0.1:0", "--kv-config", str(tmp_path / "kv.json")],
                       capture_output=True, text=True, env=e, timeout=60)
    assert r.returncode == 2 and "is not YAML at line" in r.stderr, r.stderr
    assert "12345678" not in r.stderr


# ---------------------------------------------------------------- the C++ client

def _cpp_send(tmp_path, address, topic, credentials=None):
    from test_interop import run
    env = dict(os.environ, HOME=str(tmp_path))
    if credentials is not None:
        env.update(CPP_ACCESS_KEY=credentials.access_key, CPP_SECRET_KEY=credentials.secret_key)
    code, result, log = run([sys.executable, str(INTEROP / "cpp_send.py"), address, topic,
                             "signed"], "C++ client (rocketmq 0.4.4)", env=env)
    if code == 4 and result and result.get("type") == "import":
        parts.fail_or_skip("cpp-client", f"it cannot be imported: {result['error']}")
    return code, result, log


@pytest.mark.requires("cpp-client")
def test_the_cpp_client_with_session_credentials_gets_routes(tmp_path, acl_file, caplog):
    """With route queries requiring a signature: the C++ producer with credentials gets
    the route (its message reaches the broker the route names), without them it is
    refused (16, logged) and nothing reaches the broker."""
    from test_interop import SEND_CODES, FakeBroker
    with caplog.at_level(logging.WARNING, logger="rmq.namesrv.acl"), \
            running_namesrv(tmp_path, aclEnable=True, aclFilePath=str(acl_file),
                            aclRouteRequests="signed") as app, \
            FakeBroker() as fake, Client(app.address) as c:
        assert register_broker(c, "broker-a", fake.address,
                               topics=["CppTopic", "TBW102"]).code == 0
        code, result, log = _cpp_send(tmp_path / "with", app.address, "CppTopic", USER)
        sent = fake.wait_for(lambda x: x.code in SEND_CODES, timeout=1)
        assert sent is not None and code == 0 and result.get("status") == "OK", log
        assert sent.language == "CPP" and sent.ext_fields["AccessKey"] == "RocketMQ", log
        assert "refused" not in caplog.text, caplog.text
        fake.requests.clear()
        code, result, log = _cpp_send(tmp_path / "without", app.address, "CppTopic")
        assert code == 2, log
        assert not any(x.code in SEND_CODES for _, x in fake.requests), log
    assert "request 105 from 127.0.0.1:" in caplog.text and "refused: unsigned" in caplog.text


def test_open_route_queries_stay_in_the_core(tmp_path, acl_file):
    """With aclRouteRequests open, the core keeps answering route queries itself (no
    Python call per query); when they need a signature, it gets no room to answer."""
    calls = []
    with running_namesrv(tmp_path / "open", aclEnable=True, aclFilePath=str(acl_file)) as app, \
            Client(app.address) as c:
        assert register_broker(c, "broker-a", "127.0.0.1:10911", topics=["T1", "T2"]).code == 0
        assert c.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}).code == 0   # cached now
        quick = app.processor.quick
        app.processor.quick = lambda cmd, conn=None: calls.append(cmd.code) or quick(cmd, conn)
        for _ in range(5):
            assert c.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}).code == 0
        assert calls == []
    with running_namesrv(tmp_path / "signed", aclEnable=True, aclFilePath=str(acl_file),
                         aclRouteRequests="signed") as app, Client(app.address) as c:
        quick = app.processor.quick
        app.processor.quick = lambda cmd, conn=None: calls.append(cmd.code) or quick(cmd, conn)
        for _ in range(5):
            assert c.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}).code == 16
        assert calls == [RC.GET_ROUTEINFO_BY_TOPIC] * 5
