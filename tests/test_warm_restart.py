"""Warm restart (issue 16, item 4): the route tables written to a snapshot and read back
at start with every broker provisional: routes are answered at once, a broker that
does not register again within its timeout is dropped, one that does stays."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nameserver import Client, register_broker, wait_for
from rmq import bodies
from rmq.errors import BodyError

# every test on the asyncio server and on the C engine (serverEngine=c)
pytestmark = pytest.mark.usefixtures("each_server")

CLUSTER = "c1"
_PKG_PARENT = str(Path(__import__("rmq").__file__).resolve().parent.parent)


def reg(rt, topics, name, addr, broker_id=0, now=0, timeout_ms=None, **kw):
    body = bodies.register_broker_body([bodies.topic_config(t, 4, 4) for t in topics],
                                       {"counter": 1, "timestamp": 1}, kw.pop("filters", ()))
    return rt.register_broker(CLUSTER, addr, name, broker_id, addr.replace("10911", "10912"),
                              body=body, conn=name, now_ms=now, timeout_ms=timeout_ms, **kw)


def filled(RT):
    rt = RT()
    reg(rt, ["T1", "T2", "T3"], "a", "10.0.0.1:10911", filters=["10.0.0.9:8000"])
    reg(rt, ["T1", "T2", "T3"], "a", "10.0.0.2:10911", broker_id=1)        # a's slave
    reg(rt, ["T2", "T4"], "b", "10.0.0.3:10911", timeout_ms=5_000)
    return rt


def test_a_restored_table_answers_every_route_byte_for_byte(RT):
    rt = filled(RT)
    snap = json.loads(json.dumps(rt.snapshot()))        # what the file holds
    back = RT()
    assert back.restore(snap, now_ms=1_000) == 3
    for topic in ("T1", "T2", "T3", "T4"):
        for legacy in (False, True):
            assert back.route_body(topic, legacy) == rt.route_body(topic, legacy), topic
    assert back.topic_route("T9") is None
    assert back.cluster_info() == rt.cluster_info()


def test_restored_brokers_are_provisional(RT):
    """Dropped by the scan after their own timeout from the restart, unless they
    register again (or the snapshot's timeout was longer)."""
    back = RT()
    back.restore(json.loads(json.dumps(filled(RT).snapshot())), now_ms=1_000)
    assert back.scan_not_active(6_000) == []                       # b: 1,000 + 5,000
    assert [d["brokerName"] for d in back.scan_not_active(6_001)] == ["b"]
    assert back.topic_route("T4") is None
    reg(back, ["T1", "T2", "T3"], "a", "10.0.0.1:10911", now=100_000)   # a registers again
    dropped = back.scan_not_active(121_001)                        # a's slave did not
    assert [(d["brokerName"], d["brokerAddr"]) for d in dropped] == [("a", "10.0.0.2:10911")]
    assert back.topic_route("T1") is not None
    assert [d["brokerAddr"] for d in back.scan_not_active(220_001)] == ["10.0.0.1:10911"]


def test_a_snapshot_of_another_shape_is_refused_and_changes_nothing(RT):
    back = RT()
    snap = json.loads(json.dumps(filled(RT).snapshot()))
    snap["topics"][0][1][0].pop("perm")
    with pytest.raises(BodyError, match="not a route table snapshot"):
        back.restore(snap, now_ms=0)
    assert back.cluster_info() == ({}, {}) and back.live_brokers() == []
    with pytest.raises(BodyError, match="empty"):
        filled(RT).restore(json.loads(json.dumps(filled(RT).snapshot())), now_ms=0)


# ---------------------------------------------------------------- the server

class Server:
    """``python -m rmq namesrv`` with warmRestart on, over a properties file."""

    def __init__(self, tmp_path, name):
        conf = tmp_path / "namesrv.properties"
        conf.write_text(f"warmRestart=true\nrouteSnapshotPath={tmp_path / 'routes.json'}\n"
                        f"kvConfigPath={tmp_path / 'kvConfig.json'}\n"
                        "scanNotActiveBrokerInterval=100\nrouteSnapshotIntervalSeconds=3600\n")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PKG_PARENT, env.get("PYTHONPATH")) if p)
        self.log_path = tmp_path / f"{name}.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rmq", "namesrv", "-c", str(conf), "--listen", "127.0.0.1:0"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        assert wait_for(lambda: "listening on" in self.text(), 20), self.text()
        self.address = re.search(r"listening on (127\.0\.0\.1:\d+)", self.text()).group(1)

    def text(self):
        return self.log_path.read_text("utf-8", "replace")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(20) == 0, self.text()
        self.log.close()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_restarted_name_server_answers_routes_at_once(tmp_path):
    first = Server(tmp_path, "first")
    try:
        with Client(first.address) as c:
            assert register_broker(c, "a", "127.0.0.1:10911", topics=["TA", "TB"],
                                   ext={"heartbeatTimeoutMillis": "3000"}).code == 0
            assert register_broker(c, "b", "127.0.0.1:10921", topics=["TB", "TC"],
                                   ext={"heartbeatTimeoutMillis": "3000"}).code == 0
            before = c.request(105, {"topic": "TB"}).body
            # stopped while the brokers' connection is open, as real brokers' are: the
            # snapshot is written before the server closes it (which drops them)
            first.stop()
    finally:
        if first.proc.poll() is None:
            first.stop()
    assert json.loads((tmp_path / "routes.json").read_text())["format"] == 1

    second = Server(tmp_path, "second")
    try:
        started = time.monotonic()
        with Client(second.address) as c:
            answer = c.request(105, {"topic": "TB"})
            assert answer.code == 0 and answer.body == before           # no TOPIC_NOT_EXIST
            assert "2 brokers and 3 topics restored" in second.text()
            # a registers again within its 3 s (1 s in, for 5 s more), b does not: b goes
            # 3 s after the start, a stays
            time.sleep(1.0)
            assert register_broker(c, "a", "127.0.0.1:10911", topics=["TA", "TB"], counter=2,
                                   ext={"heartbeatTimeoutMillis": "5000"}).code == 0
            assert wait_for(lambda: c.request(105, {"topic": "TC"}).code == 17, 10)
            assert time.monotonic() - started >= 2.5      # not before b's own timeout
            route = json.loads(c.request(105, {"topic": "TB"}).body)
            assert [bd["brokerName"] for bd in route["brokerDatas"]] == ["a"]
    finally:
        second.stop()
    assert "broker expired: c1 b/127.0.0.1:10921" in second.text()


def test_remote_config_cannot_move_the_snapshot(tmp_path):
    """routeSnapshotPath names a file: UPDATE_NAMESRV_CONFIG refuses it, as every
    path key (CVE-2023-33246)."""
    from nameserver import running_namesrv

    with running_namesrv(tmp_path) as app, Client(app.address) as c:
        answer = c.request(318, body=b"routeSnapshotPath=/tmp/elsewhere.json\n")
        assert answer.code == 16
