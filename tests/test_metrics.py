"""Metrics and health (issue 16, item 1): ``/metrics`` counts a known workload exactly,
route answers written by the core included; ``/healthz`` follows needWaitForService
and a graceful shutdown; the HTTP side is bounded; a real Prometheus scrapes it, and
the alert rules and the Grafana dashboard in contrib/ check with promtool against the
metric names a scrape shows."""

import asyncio
import contextlib
import json
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import rmq
from nameserver import Client, register_broker, running_namesrv, wait_for
from rmq.namesrv.metrics import REFUSED_REASONS, MetricsServer

# every test on the asyncio server and on the C engine (serverEngine=c)
pytestmark = pytest.mark.usefixtures("each_server")

ROOT = Path(__file__).resolve().parent.parent
ALERTS = ROOT / "contrib" / "prometheus" / "rmq-alerts.yml"
ALERT_TESTS = ROOT / "contrib" / "prometheus" / "rmq-alerts.test.yml"
DASHBOARD = ROOT / "contrib" / "grafana" / "rmq-namesrv.json"


@contextlib.contextmanager
def metrics_server(app):
    """A MetricsServer for ``app`` on an ephemeral port of 127.0.0.1 (its URL)."""
    server = MetricsServer(app)
    asyncio.run_coroutine_threadsafe(server.start("127.0.0.1", 0), app.loop).result(10)
    try:
        yield "http://127.0.0.1:%d" % server.sockets[0].getsockname()[1]
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), app.loop).result(10)


def get(url):
    """(status, body) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def scrape(url):
    """{(name, ((label, value), ...)): value} of a /metrics scrape."""
    status, body = get(url + "/metrics")
    assert status == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(body.decode())
            for s in f.samples}


def test_a_known_workload_is_counted_exactly(tmp_path):
    with running_namesrv(tmp_path, configBlackList="kvConfigPath") as app, \
            metrics_server(app) as url:
        before = scrape(url)
        sent = received = 0
        with CountingSocketClient(app.address) as c:
            for i in range(2):
                assert register_broker(c, f"b{i}", f"10.0.0.{i}:10911",
                                       topics=[f"t{j}" for j in range(5)]).code == 0
            for _ in range(20):         # the first builds the answer; the core writes the rest
                assert c.request(105, {"topic": "t1"}).code == 0
            for _ in range(3):
                assert c.request(105, {"topic": "missing"}).code == 17
            # written where found routes are (in C with the compiled core), not by a handler
            assert app.network_counts()["not_found"] == 3
            for k in ("a", "b"):
                assert c.request(100, {"namespace": "ns", "key": k, "value": "v"}).code == 0
            assert c.request(101, {"namespace": "ns", "key": "a"}).code == 0
            assert c.request(102, {"namespace": "ns", "key": "b"}).code == 0
            assert c.request(318, body=b"kvConfigPath=/tmp/x\n").code == 16
            assert c.request(104, {"clusterName": "c1", "brokerAddr": "10.0.0.1:10911",
                                   "brokerName": "b1", "brokerId": "0"}).code == 0
            assert c.request(9999).code == 3          # a code no one knows
            # route queries the core answers in a pipelined run, without Python (the
            # pure storage answers only what is cached: t2's answer is, after this)
            assert c.request(105, {"topic": "t2"}).code == 0
            served = app.network_counts()["served"]
            for _ in range(10):
                c.send(rmq.RemotingCommand.request(105, {"topic": "t2"}))
            for _ in range(10):
                assert c.receive().code == 0
            assert app.network_counts()["served"] > served
            sent, received = c.sent, c.received
            m = scrape(url)
            assert m[("rmq_connections", ())] == 1
            assert m[("rmq_brokers_live", ())] == 1       # b0: b1 unregistered
            assert m[("rmq_topics", ())] == 5
        with Client(app.address) as bad:            # a frame shorter than its header
            bad.send_raw(b"\x00\x00\x00\x02\x00\x00")
            assert bad.closed_by_peer()
        # the connection goes on the loop, its broker then in the table thread
        assert wait_for(lambda: scrape(url)[("rmq_connections", ())] == 0 and scrape(url)[
            ("rmq_broker_removals_total", (("cause", "connection_closed"),))] == 1, 5)
        after = scrape(url)

    def delta(metric, **labels):
        key = (metric, tuple(sorted((k, str(v)) for k, v in labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    routes = 20 + 3 + 1 + 10
    assert delta("rmq_requests_total", code=105, name="GET_ROUTEINFO_BY_TOPIC") == routes
    assert delta("rmq_requests_total", code=103, name="REGISTER_BROKER") == 2
    assert delta("rmq_requests_total", code=104, name="UNREGISTER_BROKER") == 1
    assert delta("rmq_requests_total", code=318, name="UPDATE_NAMESRV_CONFIG") == 1
    assert delta("rmq_requests_total", code="other", name="other") == 1
    assert delta("rmq_route_queries_total", result="found") == 31
    assert delta("rmq_route_queries_total", result="not_found") == 3
    assert delta("rmq_route_queries_total", result="other") == 0
    assert delta("rmq_responses_total", code=0, name="SUCCESS") == 31 + 2 + 4 + 1
    assert delta("rmq_responses_total", code=17, name="TOPIC_NOT_EXIST") == 3
    assert delta("rmq_responses_total", code=16, name="NO_PERMISSION") == 1
    assert delta("rmq_responses_total", code=3, name="REQUEST_CODE_NOT_SUPPORTED") == 1
    for op, n in (("put", 2), ("get", 1), ("delete", 1), ("list", 0)):
        assert delta("rmq_kv_operations_total", operation=op) == n, op
    assert delta("rmq_registration_duration_seconds_count") == 2
    assert delta("rmq_registration_duration_seconds_bucket", le="+Inf") == 2
    assert 0 < delta("rmq_registration_duration_seconds_sum") < 10
    assert delta("rmq_broker_removals_total", cause="unregistered") == 1
    # b0 went with its connection, and its topics with it
    assert delta("rmq_broker_removals_total", cause="connection_closed") == 1
    assert after[("rmq_brokers_live", ())] == after[("rmq_topics", ())] == 0
    assert delta("rmq_refused_total", reason="config_no_permission") == 1
    assert delta("rmq_refused_total", reason="bad_frame") == 1
    assert delta("rmq_connections_accepted_total") == 2
    # every byte each client sent, and every byte the counting one received
    assert delta("rmq_received_bytes_total") == sent + 6
    assert delta("rmq_sent_bytes_total") == received
    assert after[("process_resident_memory_bytes", ())] > 10 << 20
    assert after[("rmq_info", (("core", rmq.IMPLEMENTATION), ("version", rmq.__version__)))] == 1


class CountingSocketClient(Client):
    """A test client that counts the bytes it sends and receives on its socket."""

    def __init__(self, address):
        super().__init__(address)
        self.sent = self.received = 0
        self.sock = _CountingSocket(self.sock, self)


class _CountingSocket:
    def __init__(self, sock, owner):
        self._sock, self._owner = sock, owner

    def sendall(self, data):
        self._owner.sent += len(data)
        return self._sock.sendall(data)

    def recv(self, n):
        data = self._sock.recv(n)
        self._owner.received += len(data)
        return data

    def __getattr__(self, name):
        return getattr(self._sock, name)


def test_an_expired_broker_is_counted_as_expired(tmp_path):
    with running_namesrv(tmp_path, scanNotActiveBrokerInterval=100) as app, \
            metrics_server(app) as url:
        with Client(app.address) as c:
            assert register_broker(c, "b0", "10.0.0.1:10911", topics=["t", "u"],
                                   ext={"heartbeatTimeoutMillis": "300"}).code == 0
            assert scrape(url)[("rmq_brokers_live", ())] == 1
            assert wait_for(lambda: scrape(url)[("rmq_broker_removals_total",
                                                 (("cause", "expired"),))] == 1, 10)
            m = scrape(url)
    assert m[("rmq_brokers_live", ())] == 0
    assert m[("rmq_broker_removals_total", (("cause", "connection_closed"),))] == 0


def test_trace_frames_dropped_are_counted(tmp_path):
    from rmq.trace.segments import TraceRecorder
    trace = TraceRecorder(tmp_path / "trace", queue_bytes=1)      # no frame fits
    try:
        with running_namesrv(tmp_path, trace=trace) as app, metrics_server(app) as url:
            assert scrape(url)[("rmq_trace_frames_dropped_total", ())] == 0
            with Client(app.address) as c:
                for _ in range(5):
                    assert c.request(105, {"topic": "none"}).code == 17
            # in and out (the engine's drainer hands them over within TRACE_DRAIN)
            assert wait_for(lambda: scrape(url)[("rmq_trace_frames_dropped_total", ())] == 10)
    finally:
        trace.close()


def test_refused_reasons_in_the_source_are_the_exposed_ones():
    # Every reason the server counts is a series from start (alerts and rates see it),
    # and no reason is exposed that nothing counts.
    src = ROOT / "src" / "rmq" / "namesrv"
    used = set()
    for path in src.glob("*.py"):
        used |= set(re.findall(r'refused\["(\w+)"\]', path.read_text()))
    assert used == set(REFUSED_REASONS)


def test_healthz_follows_need_wait_for_service_and_a_graceful_shutdown(tmp_path):
    with running_namesrv(tmp_path, needWaitForService=True, waitSecondsForService=2,
                         enableShutdownGracefully=True, shutdownWaitTimeSeconds=30) as app, \
            metrics_server(app) as url:
        assert get(url + "/healthz/live") == (200, b"live\n")
        assert get(url + "/healthz") == (503, b"not ready: needWaitForService\n")
        assert get(url + "/healthz/ready")[0] == 503
        assert scrape(url)[("rmq_ready", ())] == 0
        with Client(app.address) as c:
            assert c.request(105, {"topic": "t"}).remark == "name server not ready"
        assert wait_for(lambda: get(url + "/healthz")[0] == 200, 10)
        assert get(url + "/healthz/ready") == (200, b"ready\n")
        assert scrape(url)[("rmq_ready", ())] == 1
        assert scrape(url)[("rmq_refused_total", (("reason", "not_ready"),))] == 1
        closing = asyncio.run_coroutine_threadsafe(app.close(), app.loop)
        assert wait_for(lambda: get(url + "/healthz") == (503, b"shutting down\n"), 10)
        assert get(url + "/healthz/live")[0] == 200
        app.loop.call_soon_threadsafe(app.hurry)
        closing.result(10)


def test_the_http_side_is_bounded(tmp_path, monkeypatch):
    from rmq.namesrv import metrics
    monkeypatch.setattr(metrics, "HEAD_TIMEOUT", 0.5)
    with running_namesrv(tmp_path) as app, metrics_server(app) as url:
        port = int(url.rsplit(":", 1)[1])
        # a head past MAX_HEAD: closed without an answer
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * metrics.MAX_HEAD)
            assert s.recv(100) == b""
        # a client that sends nothing is closed after HEAD_TIMEOUT; the others are served
        idle = [socket.create_connection(("127.0.0.1", port), timeout=5)
                for _ in range(metrics.MAX_CLIENTS - 1)]
        try:
            assert get(url + "/metrics")[0] == 200
            # past MAX_CLIENTS at once, the newcomer is closed at once
            extra = socket.create_connection(("127.0.0.1", port), timeout=5)
            more = socket.create_connection(("127.0.0.1", port), timeout=5)
            assert more.recv(100) == b""
            extra.close()
            more.close()
            for s in idle:
                assert s.recv(100) == b""       # HEAD_TIMEOUT
        finally:
            for s in idle:
                s.close()
        assert get(url + "/metrics")[0] == 200
        assert get(url + "/nope")[0] == 404
        req = urllib.request.Request(url + "/metrics", method="POST", data=b"x")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=5)
        assert e.value.code == 405


def test_a_hostile_request_code_does_not_grow_the_label_set(tmp_path):
    with running_namesrv(tmp_path) as app, metrics_server(app) as url:
        with Client(app.address) as c:
            for code in range(20000, 20300):
                c.send(rmq.RemotingCommand.request(code))
            for _ in range(300):
                assert c.receive().code == 3
        m = scrape(url)
    codes = {dict(k[1])["code"] for k in m if k[0] == "rmq_requests_total"}
    assert "other" in codes and not any(c.isdigit() and int(c) >= 20000 for c in codes)
    assert m[("rmq_requests_total", (("code", "other"), ("name", "other")))] == 300


# ---------------------------------------------------------------- Prometheus itself

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


needs_prometheus = pytest.mark.requires("prometheus", "promtool")


@needs_prometheus
@pytest.mark.once
def test_the_alert_rules_check_and_their_unit_tests_pass():
    out = subprocess.run(["promtool", "check", "rules", str(ALERTS)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout
    out = subprocess.run(["promtool", "test", "rules", ALERT_TESTS.name],
                         cwd=ALERT_TESTS.parent, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def _exposed_names(tmp_path):
    with running_namesrv(tmp_path / "ns", needWaitForService=False) as app, \
            metrics_server(app) as url:
        status, body = get(url + "/metrics")
    return {line.split("{")[0].split(" ")[0] for line in body.decode().splitlines()
            if line and not line.startswith("#")}


_METRIC = re.compile(r"\b(rmq_[a-z_]+|process_[a-z_]+)\b")


@needs_prometheus
@pytest.mark.once
def test_the_dashboard_and_the_alerts_use_only_exposed_metrics_in_valid_promql(tmp_path):
    (tmp_path / "ns").mkdir()
    exposed = _exposed_names(tmp_path)
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", ())]
    assert len(exprs) >= 8
    used = set()
    for text in exprs + [ALERTS.read_text()]:
        used |= set(_METRIC.findall(text))
    assert used and used <= exposed, used - exposed
    # Each panel's query, as a recording rule, through promtool's PromQL parser
    # (Grafana's interval variables given a value).
    rules = tmp_path / "dashboard-rules.yml"
    lines = ["groups:", "- name: dashboard", "  rules:"]
    for i, e in enumerate(exprs):
        e = e.replace("$__rate_interval", "1m").replace("$__interval", "1m")
        lines += [f"  - record: dashboard:panel{i}", f"    expr: {json.dumps(e)}"]
    rules.write_text("\n".join(lines) + "\n")
    out = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


@needs_prometheus
@pytest.mark.once
@pytest.mark.slow
def test_a_real_prometheus_scrapes_the_name_server(tmp_path):
    metrics_port, prom_port = _free_port(), _free_port()
    log = tmp_path / "namesrv.log"
    ns = subprocess.Popen([sys.executable, "-m", "rmq", "namesrv", "--listen", "127.0.0.1:0",
                           "--kv-config", str(tmp_path / "kv.json"), "--log-file", str(log),
                           "--metrics", f"127.0.0.1:{metrics_port}"])
    prom = None
    try:
        assert wait_for(lambda: log.exists() and "listening on" in log.read_text(), 20)
        address = re.search(r"listening on (127\.0\.0\.1:\d+)", log.read_text()).group(1)
        with Client(address) as c:
            assert register_broker(c, "b0", "10.0.0.1:10911", topics=["t", "u"]).code == 0
            for _ in range(7):
                assert c.request(105, {"topic": "t"}).code == 0
            config = tmp_path / "prometheus.yml"
            config.write_text(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                f"rule_files: [{json.dumps(str(ALERTS))}]\n"
                "scrape_configs:\n- job_name: rmq\n  static_configs:\n"
                f"  - targets: ['127.0.0.1:{metrics_port}']\n")
            prom = subprocess.Popen(
                ["prometheus", f"--config.file={config}",
                 f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            api = f"http://127.0.0.1:{prom_port}/api/v1/query?query="

            def value(q):
                try:
                    status, body = get(api + urllib.request.quote(q))
                except OSError:
                    return None
                result = json.loads(body)["data"]["result"] if status == 200 else []
                return float(result[0]["value"][1]) if result else None

            assert wait_for(lambda: value('rmq_route_queries_total{result="found"}') == 7, 60)
            assert value("rmq_brokers_live") == 1
            assert value('up{job="rmq"}') == 1

            def rules_health():
                groups = json.loads(get(f"http://127.0.0.1:{prom_port}/api/v1/rules")[1])[
                    "data"]["groups"]
                return {r["health"] for g in groups for r in g["rules"]}
            assert wait_for(lambda: rules_health() == {"ok"}, 30), rules_health()
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(20)
        ns.terminate()
        ns.wait(20)
