"""``rmq admin VERB``: mqadmin's NameServer verbs against real rmq NameServers over
TCP. Each verb is checked against the state it changed (read back over the wire
with the tests' own client, not with rmq.admin) or the state set up before it."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

import rmq
from nameserver import Client, parse_json_body, register_broker, running_namesrv
from rmq.bodies import topic_config
from rmq.cli import main

# The verbs and their output; the server under them is covered in both passes by the e2e tests.
pytestmark = pytest.mark.once

SRC_DIR = os.path.dirname(os.path.dirname(rmq.__file__))


@pytest.fixture(autouse=True)
def no_namesrv_addr_env(monkeypatch):
    # a NAMESRV_ADDR from the developer's shell must not pick the NameServer
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)


@pytest.fixture
def srv(tmp_path):
    with running_namesrv(tmp_path) as app:
        yield app


@pytest.fixture
def two_srvs(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with running_namesrv(tmp_path / "a") as a, running_namesrv(tmp_path / "b") as b:
        yield a, b


@pytest.fixture
def dead_addr():
    """An address nothing listens on (a port just released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"127.0.0.1:{port}"


def admin(capsys, *argv):
    """``rmq admin argv...`` in process: (exit status, stdout, stderr)."""
    status = main(["admin", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def admin_json(capsys, *argv):
    status, out, err = admin(capsys, *argv, "--json")
    return status, json.loads(out), err


def route_over_wire(addr, topic):
    with Client(addr) as c:
        resp = c.request(105, {"topic": topic})
        assert resp.code == 0, resp
        return parse_json_body(resp.body)[0]


def perms(addr, topic):
    return [q["perm"] for q in route_over_wire(addr, topic)["queueDatas"]]


def kv_over_wire(addr, namespace, key):
    """The value of a KV entry (None when the NameServer has none)."""
    with Client(addr) as c:
        resp = c.request(101, {"namespace": namespace, "key": key})
    if resp.code == 22:                  # QUERY_NOT_FOUND
        return None
    assert resp.code == 0, resp
    return resp.ext_fields["value"]


def config_over_wire(addr):
    with Client(addr) as c:
        resp = c.request(319)
    assert resp.code == 0, resp
    return dict(line.split("=", 1) for line in resp.body.decode().splitlines())


# ---------------------------------------------------------------- clusterList

def test_cluster_list_shows_the_registered_brokers(srv, capsys):
    # One connection per broker: a NameServer binds a broker to its connection. Two
    # topics each: a broker's first registration with a single topic is refused (Java).
    with Client(srv.address) as m, Client(srv.address) as s, Client(srv.address) as b:
        assert register_broker(m, "broker-a", "10.0.0.1:10911", cluster="c1",
                               topics=["T1", "T2"]).code == 0
        assert register_broker(s, "broker-a", "10.0.0.2:10911", cluster="c1", broker_id=1,
                               topics=["T1", "T2"]).code == 0
        assert register_broker(b, "broker-b", "10.0.0.3:10911", cluster="c2",
                               topics=["T1", "T2"]).code == 0

        status, out, err = admin(capsys, "clusterList", "-n", srv.address)
        assert status == 0, err
        assert out.splitlines() == [
            "#Cluster Name           #Broker Name            #BID  #Addr",
            "c1                      broker-a                0     10.0.0.1:10911",
            "c1                      broker-a                1     10.0.0.2:10911",
            "c2                      broker-b                0     10.0.0.3:10911",
        ]

        status, doc, _ = admin_json(capsys, "clusterList", "-n", srv.address)
        assert status == 0 and doc["ok"] is True
        assert doc["namesrvAddr"] == srv.address
        assert [(r["cluster"], r["brokerName"], r["brokerId"], r["brokerAddr"])
                for r in doc["brokers"]] == [("c1", "broker-a", 0, "10.0.0.1:10911"),
                                             ("c1", "broker-a", 1, "10.0.0.2:10911"),
                                             ("c2", "broker-b", 0, "10.0.0.3:10911")]
        assert doc["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": "10.0.0.1:10911",
                                                                     "1": "10.0.0.2:10911"}
        assert sorted(doc["clusterAddrTable"]) == ["c1", "c2"]

        status, doc, _ = admin_json(capsys, "clusterList", "-n", srv.address, "-c", "c2")
        assert [r["brokerName"] for r in doc["brokers"]] == ["broker-b"]


def test_cluster_list_of_an_empty_name_server(srv, capsys):
    status, out, _ = admin(capsys, "clusterList", "-n", srv.address)
    assert status == 0
    assert out.splitlines() == ["#Cluster Name           #Broker Name            #BID  #Addr"]


# ---------------------------------------------------------------- topicRoute, topicList

def test_topic_route_prints_the_route_as_pretty_json(srv, capsys):
    with Client(srv.address) as broker:
        assert register_broker(broker, "bk", "10.0.0.1:10911",
                               topics=["T1", topic_config("T2", 8, 2, perm=7)]).code == 0
        status, out, err = admin(capsys, "topicRoute", "-n", srv.address, "-t", " T2 ")
        assert status == 0, err
        assert out.startswith('{\n\t"brokerDatas":[\n\t\t{\n')    # fastjson's PrettyFormat
        route = json.loads(out)
        assert route == route_over_wire(srv.address, "T2")
        assert route["queueDatas"][0]["readQueueNums"] == 8
        assert route["queueDatas"][0]["writeQueueNums"] == 2

        status, doc, _ = admin_json(capsys, "topicRoute", "-n", srv.address, "-t", "T2")
        assert status == 0
        assert doc["topic"] == "T2" and doc["namesrvAddr"] == srv.address
        assert doc["route"]["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911"}
        assert doc["route"]["queueDatas"][0]["perm"] == 7


def test_topic_route_of_an_unknown_topic_fails_with_the_answer(srv, capsys):
    status, out, err = admin(capsys, "topicRoute", "-n", srv.address, "-t", "Nope")
    assert status == 1 and out == ""
    assert f"name server {srv.address} answered code 17 (TOPIC_NOT_EXIST)" in err
    assert "No topic route info in name server for the topic: Nope" in err

    status, doc, _ = admin_json(capsys, "topicRoute", "-n", srv.address, "-t", "Nope")
    assert status == 1
    assert doc["ok"] is False and doc["code"] == 17 and doc["namesrvAddr"] == srv.address
    assert doc["errorType"] == "ResponseError"


def test_topic_list(srv, capsys):
    with Client(srv.address) as broker:
        assert register_broker(broker, "bk", "10.0.0.1:10911", topics=["T1", "T2", "T3"]).code == 0
        status, out, _ = admin(capsys, "topicList", "-n", srv.address)
        assert status == 0
        assert sorted(out.splitlines()) == ["T1", "T2", "T3"]

        status, doc, _ = admin_json(capsys, "topicList", "-n", srv.address)
        assert sorted(doc["topicList"]) == ["T1", "T2", "T3"]


def test_topic_list_refused_by_the_name_server(tmp_path, capsys):
    with running_namesrv(tmp_path, enableAllTopicList=False) as srv:
        status, out, err = admin(capsys, "topicList", "-n", srv.address)
        assert status == 1 and out == ""
        assert f"name server {srv.address} answered code 1 (SYSTEM_ERROR), remark 'disable'" in err


# ---------------------------------------------------------------- NameServer config

def test_update_namesrv_config_then_get_namesrv_config(srv, capsys):
    assert config_over_wire(srv.address)["orderMessageEnable"] == "false"
    status, out, err = admin(capsys, "updateNamesrvConfig", "-n", srv.address,
                             "-k", "orderMessageEnable", "-v", "true")
    assert status == 0, err
    assert out == (f"update name server config success![{srv.address}]\n"
                   "orderMessageEnable : true\n")
    assert config_over_wire(srv.address)["orderMessageEnable"] == "true"

    status, out, _ = admin(capsys, "getNamesrvConfig", "-n", srv.address)
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == f"============{srv.address}============"
    assert "orderMessageEnable                                =  true" in lines

    status, doc, _ = admin_json(capsys, "getNamesrvConfig", "-n", srv.address)
    [result] = doc["results"]
    assert result["ok"] is True and result["namesrvAddr"] == srv.address
    assert result["config"] == config_over_wire(srv.address)


def test_update_namesrv_config_of_a_blacklisted_key_is_refused(srv, tmp_path, capsys):
    evil = str(tmp_path / "evil.json")
    status, out, err = admin(capsys, "updateNamesrvConfig", "-n", srv.address,
                             "-k", "kvConfigPath", "-v", evil)
    assert status == 1 and out == ""
    assert (f"update name server config in name server[{srv.address}]: failed: "
            f"name server {srv.address} answered code 16 (NO_PERMISSION), "
            "remark 'Can not update config in black list.'") in err
    assert config_over_wire(srv.address)["kvConfigPath"] == str(tmp_path / "kvConfig.json")

    status, doc, _ = admin_json(capsys, "updateNamesrvConfig", "-n", srv.address,
                                "-k", "kvConfigPath", "-v", evil)
    assert status == 1 and doc["ok"] is False
    [result] = doc["results"]
    assert (result["code"], result["remark"]) == (16, "Can not update config in black list.")


# ---------------------------------------------------------------- KV config

def test_update_and_delete_kv_config(srv, capsys):
    status, out, err = admin(capsys, "updateKvConfig", "-n", srv.address,
                             "-s", "ORDER_TOPIC_CONFIG", "-k", "T1", "-v", " broker-a:4 ")
    assert status == 0, err
    assert out == "create or update kv config to namespace success.\n"
    assert kv_over_wire(srv.address, "ORDER_TOPIC_CONFIG", "T1") == "broker-a:4"  # trimmed

    status, out, err = admin(capsys, "deleteKvConfig", "-n", srv.address,
                             "-s", "ORDER_TOPIC_CONFIG", "-k", "T1")
    assert status == 0, err
    assert out == "delete kv config from namespace success.\n"
    assert kv_over_wire(srv.address, "ORDER_TOPIC_CONFIG", "T1") is None


def test_kv_config_goes_to_every_name_server(two_srvs, capsys):
    a, b = two_srvs
    status, doc, _ = admin_json(capsys, "updateKvConfig", "-n", f"{a.address};{b.address}",
                                "-s", "ns", "-k", "k", "-v", "v1")
    assert status == 0 and doc["ok"] is True
    assert [r["namesrvAddr"] for r in doc["results"]] == [a.address, b.address]
    assert kv_over_wire(a.address, "ns", "k") == kv_over_wire(b.address, "ns", "k") == "v1"

    status, _, _ = admin(capsys, "deleteKvConfig", "-n", f"{a.address};{b.address}",
                         "-s", "ns", "-k", "k")
    assert status == 0
    assert kv_over_wire(a.address, "ns", "k") is None and kv_over_wire(b.address, "ns", "k") is None


# ---------------------------------------------------------------- write permission

def test_wipe_and_add_write_perm(srv, capsys):
    with Client(srv.address) as broker:
        assert register_broker(broker, "bk", "10.0.0.1:10911",
                               topics=["T1", topic_config("T2", 4, 4, perm=7)]).code == 0
        status, out, err = admin(capsys, "wipeWritePerm", "-n", srv.address, "-b", "bk")
        assert status == 0, err
        assert out == f"wipe write perm of broker[bk] in name server[{srv.address}] OK, 2\n"
        assert perms(srv.address, "T1") == [4] and perms(srv.address, "T2") == [5]

        status, doc, _ = admin_json(capsys, "addWritePerm", "-n", srv.address, "-b", "bk")
        assert status == 0
        assert doc["brokerName"] == "bk"
        assert doc["results"] == [{"namesrvAddr": srv.address, "ok": True, "addTopicCount": 2}]
        assert perms(srv.address, "T1") == [6] and perms(srv.address, "T2") == [6]


def test_wipe_write_perm_on_every_name_server(two_srvs, capsys):
    a, b = two_srvs
    with Client(a.address) as on_a, Client(b.address) as on_b:
        assert register_broker(on_a, "bk", "10.0.0.1:10911", topics=["T1", "T2", "T3"]).code == 0
        assert register_broker(on_b, "bk", "10.0.0.1:10911", topics=["T1", "T2"]).code == 0
        status, out, _ = admin(capsys, "wipeWritePerm", "-n", f"{a.address};{b.address}",
                               "-b", "bk")
        assert status == 0
        assert out.splitlines() == [
            f"wipe write perm of broker[bk] in name server[{a.address}] OK, 3",
            f"wipe write perm of broker[bk] in name server[{b.address}] OK, 2"]
        assert perms(a.address, "T1") == perms(b.address, "T1") == [4]


# ---------------------------------------------------------------- addresses

def test_namesrv_addr_from_the_environment(srv, capsys, monkeypatch, dead_addr):
    with Client(srv.address) as broker:
        assert register_broker(broker, "bk", "10.0.0.1:10911", topics=["E1", "E2"]).code == 0
        monkeypatch.setenv("NAMESRV_ADDR", srv.address)
        status, out, _ = admin(capsys, "topicList")
        assert status == 0 and sorted(out.splitlines()) == ["E1", "E2"]
        # -n wins over the environment
        monkeypatch.setenv("NAMESRV_ADDR", dead_addr)
        status, out, _ = admin(capsys, "topicList", "-n", srv.address)
        assert status == 0 and sorted(out.splitlines()) == ["E1", "E2"]


def test_no_namesrv_addr_is_a_usage_error(capsys):
    status, out, err = admin(capsys, "clusterList")
    assert status == 2 and out == ""
    assert "no NameServer address" in err and "-n" in err and "NAMESRV_ADDR" in err


def test_malformed_namesrv_addr_is_a_usage_error(capsys):
    status, _, err = admin(capsys, "clusterList", "-n", "localhost")
    assert status == 2 and "'localhost'" in err


def test_a_missing_required_option_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["admin", "topicRoute", "-n", "127.0.0.1:9876"])
    assert exc.value.code == 2
    assert "-t/--topic" in capsys.readouterr().err


# ---------------------------------------------------------------- failures

def test_stopped_name_server(tmp_path, capsys):
    with running_namesrv(tmp_path) as srv:
        addr = srv.address
    status, out, err = admin(capsys, "clusterList", "-n", addr)
    assert status == 1 and out == ""
    assert f"connect to {addr} failed" in err

    status, doc, _ = admin_json(capsys, "clusterList", "-n", addr)
    assert status == 1
    assert doc["ok"] is False and doc["errorType"] == "RemotingConnectError"
    assert doc["namesrvAddr"] == addr


def test_one_name_server_verbs_fail_over_to_the_next_address(srv, dead_addr, capsys):
    status, doc, _ = admin_json(capsys, "clusterList", "-n", f"{dead_addr};{srv.address}")
    assert status == 0 and doc["namesrvAddr"] == srv.address


def test_every_name_server_verbs_report_each_address(srv, dead_addr, capsys):
    status, out, err = admin(capsys, "updateKvConfig", "-n", f"{dead_addr};{srv.address}",
                             "-s", "ns", "-k", "k", "-v", "v")
    assert status == 1 and out == ""
    assert f"create or update kv config in name server[{dead_addr}]: failed: connect to" in err
    assert f"create or update kv config in name server[{srv.address}]: OK" in err
    assert kv_over_wire(srv.address, "ns", "k") == "v"     # the live one still applied it

    status, doc, _ = admin_json(capsys, "wipeWritePerm", "-n", f"{dead_addr};{srv.address}",
                                "-b", "bk")
    assert status == 1 and doc["ok"] is False
    dead, live = doc["results"]
    assert (dead["namesrvAddr"], dead["ok"], dead["errorType"]) == (
        dead_addr, False, "RemotingConnectError")
    assert live == {"namesrvAddr": srv.address, "ok": True, "wipeTopicCount": 0}


def test_timeout(capsys):
    # accepts connections (the kernel's backlog) and never answers
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        addr = "127.0.0.1:%d" % silent.getsockname()[1]
        started = time.monotonic()
        status, out, err = admin(capsys, "clusterList", "-n", addr, "--timeout", "0.3")
        assert time.monotonic() - started < 2.5
    assert status == 1 and out == ""
    assert f"to {addr}: timed out waiting for the answer" in err


# ---------------------------------------------------------------- as a program

def run_rmq(*argv, **env):
    """``python -m rmq argv...`` with this rmq, the environment's NAMESRV_ADDR
    replaced by ``env``'s."""
    full = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    full.update(env)
    full["PYTHONPATH"] = SRC_DIR + os.pathsep + full.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "rmq", *argv], env=full, capture_output=True,
                          text=True, timeout=60)


def test_as_a_program(srv, dead_addr):
    with Client(srv.address) as broker:
        assert register_broker(broker, "bk", "10.0.0.1:10911", topics=["T1", "T2"]).code == 0
        proc = run_rmq("admin", "topicList", "--json", NAMESRV_ADDR=srv.address)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["namesrvAddr"] == srv.address and sorted(doc["topicList"]) == ["T1", "T2"]

    proc = run_rmq("admin", "getNamesrvConfig", "-n", dead_addr)
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"get name server config failed in name server[{dead_addr}]: connect to" in proc.stderr
