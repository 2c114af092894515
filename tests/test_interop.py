"""Interoperability: real third-party RocketMQ clients get their routes from rmq.

* ali-ons 3.12.0 (npm, pure JavaScript; tests/interop/ons_*.js): asks for routes with
  its own MQClientAPI (version 121, several requests in flight on one connection,
  legacy route JSON) and sends a message with its Producer through the route.
* The Apache RocketMQ C++ client (PyPI ``rocketmq`` 0.4.4, via ctypes;
  tests/interop/cpp_send.py): a Producer sends a message through the route, and
  falls back to the TBW102 route when rmq answers TOPIC_NOT_EXIST.

The NameServer runs in-process on 127.0.0.1 (tests/nameserver.py); brokers are
simulated: a REGISTER_BROKER request sent with rmq's own codec, and, where a client
must reach the broker, a fake broker (a tiny TCP server built on rmq.FrameDecoder)
at the registered address that answers SEND_MESSAGE with success. Clients run in
subprocesses with timeouts. Node modules come from ``npm ci --prefix tests/interop``.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import parts
import rmq
from rmq.bodies import encode_register_broker_body, register_broker_body, topic_config

from nameserver import SERVERS, Client, running_namesrv

# Real third-party clients: slow, run once (on the compiled core).
pytestmark = [pytest.mark.slow, pytest.mark.once]

INTEROP = Path(__file__).resolve().parent / "interop"
SUBPROCESS_TIMEOUT = 12          # hard cap; the node scripts' own watchdogs fire at 8 s

REGISTER_BROKER = 103
HEART_BEAT = 34
UNREGISTER_CLIENT = 35
SEND_MESSAGE = 10
SEND_MESSAGE_V2 = 310
TOPIC_NOT_EXIST = 17
SEND_CODES = (SEND_MESSAGE, SEND_MESSAGE_V2)


# ---------------------------------------------------------------- helpers

class FakeBroker:
    """A broker stand-in on 127.0.0.1: records every request (with the connection's
    serial number), answers SEND_MESSAGE / SEND_MESSAGE_V2 with success and a
    SendMessageResponseHeader, and everything else with a bare SUCCESS."""

    QUEUE_OFFSET = 4242

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.requests = []
        self.errors = []
        self.cond = threading.Condition()
        self.stopping = threading.Event()
        self.conns = []
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.stopping.set()
        for t in list(self.threads):
            t.join(5)
        self.sock.close()
        for c in self.conns:
            c.close()

    def _accept(self):
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            conn.settimeout(0.2)
            self.conns.append(conn)
            t = threading.Thread(target=self._serve, args=(conn, len(self.conns)), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, conn, serial):
        decoder = rmq.FrameDecoder()
        while not self.stopping.is_set():
            try:
                data = conn.recv(1 << 16)
            except socket.timeout:
                continue
            except OSError:
                return
            if not data:
                return
            try:
                commands = decoder.feed(data)
            except Exception as exc:               # record it: the test reports it
                with self.cond:
                    self.errors.append(repr(exc))
                    self.cond.notify_all()
                return
            for cmd in commands:
                with self.cond:
                    self.requests.append((serial, cmd))
                    self.cond.notify_all()
                if cmd.is_response or cmd.is_oneway:
                    continue
                try:
                    conn.sendall(rmq.encode_frame(self._answer(cmd)))
                except OSError:
                    return

    def _answer(self, cmd):
        if cmd.code in SEND_CODES:
            ext = cmd.ext_fields or {}
            queue_id = ext.get("queueId", ext.get("e", "0"))
            # Java's offset message id: 4-byte IP, 4-byte port, 8-byte commit log offset.
            msg_id = "7F000001%08X%016X" % (self.port, self.QUEUE_OFFSET * 100)
            return cmd.response(0, None, {"msgId": msg_id, "queueId": str(queue_id),
                                          "queueOffset": str(self.QUEUE_OFFSET)})
        return cmd.response(0, None)

    def wait_for(self, predicate, timeout=10):
        """The first recorded request matching predicate(cmd), or None after timeout."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for _, cmd in self.requests:
                    if predicate(cmd):
                        return cmd
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def summary(self):
        with self.cond:
            return [f"conn{serial} code={cmd.code} {cmd.language}/v{cmd.version} "
                    f"ext={cmd.ext_fields}" for serial, cmd in self.requests] + self.errors


def register_broker(client, broker_addr, topics, *, broker_name="broker-a",
                    cluster="DefaultCluster", broker_id=0, counter=1):
    """A REGISTER_BROKER (103) over ``client``'s connection, as a Java broker sends it
    (JSON body with bodyCrc32). Keep the connection open: closing it drops the broker.

    Like a real broker it also lists its system topics (SELF_TEST_TOPIC, its cluster
    and broker name): a broker's first registration with a single topic is refused
    (Java treats it as an incremental registration from an unknown broker)."""
    system = [topic_config("SELF_TEST_TOPIC", 1, 1, 6), topic_config(cluster, 16, 16, 7),
              topic_config(broker_name, 1, 1, 7)]
    names = {tc["topicName"] for tc in topics}
    topics = list(topics) + [tc for tc in system if tc["topicName"] not in names]
    body = encode_register_broker_body(register_broker_body(
        topics, {"counter": counter, "stateVersion": 0, "timestamp": int(time.time() * 1000)}))
    host, port = broker_addr.rsplit(":", 1)
    ext = {"brokerAddr": broker_addr, "brokerId": str(broker_id), "brokerName": broker_name,
           "clusterName": cluster, "haServerAddr": f"{host}:{int(port) + 1}",
           "compressed": "false", "bodyCrc32": str(rmq.body_crc32(body))}
    resp = client.request(REGISTER_BROKER, ext, body)
    assert resp.code == 0, f"REGISTER_BROKER failed: {resp}"
    return resp


def run(argv, what, env=None):
    """Run a client script; its stdout's last line parsed as JSON, or a clear failure."""
    try:
        proc = subprocess.run(argv, cwd=INTEROP, capture_output=True, text=True,
                              timeout=SUBPROCESS_TIMEOUT, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{what} did not finish in {SUBPROCESS_TIMEOUT} s "
                    f"(stdout {exc.stdout!r}, stderr {exc.stderr!r})")
    lines = proc.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, ValueError):
        result = None
    return proc.returncode, result, f"{what}: exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"


@pytest.fixture(scope="module")
def node():
    """The node binary and ali-ons, installed by `npm ci --prefix tests/interop`."""
    parts.require("node", "ali-ons")
    return shutil.which("node")


@pytest.fixture(params=SERVERS)
def namesrv(tmp_path, request):
    """The NameServer the clients talk to: the asyncio server, then the I/O engine."""
    with running_namesrv(tmp_path, loop=request.param) as app:
        yield app


def ons_routes(node, address, *topics):
    code, result, log = run([node, "ons_route.js", address, *topics], "ali-ons route script")
    assert code == 0 and isinstance(result, list), log
    assert [r["topic"] for r in result] == list(topics), log
    return {r["topic"]: r for r in result}, log


# ---------------------------------------------------------------- ali-ons: routes

def test_ali_ons_gets_a_route(node, namesrv):
    broker_addr = "127.0.0.1:10911"
    with Client(namesrv.address) as broker:
        register_broker(broker, broker_addr, [topic_config("TopicA", 4, 4, 6)])
        routes, log = ons_routes(node, namesrv.address, "TopicA")
    r = routes["TopicA"]
    assert r["ok"], log
    route = r["route"]
    # a broker that does not say enableActingMaster (as 4.x ones): false, as 5.x writes it
    assert route["brokerDatas"] == [{"brokerAddrs": {"0": broker_addr},
                                     "brokerName": "broker-a", "cluster": "DefaultCluster",
                                     "enableActingMaster": False}], log
    assert len(route["queueDatas"]) == 1, log
    qd = route["queueDatas"][0]
    assert (qd["brokerName"], qd["readQueueNums"], qd["writeQueueNums"], qd["perm"]) == \
        ("broker-a", 4, 4, 6), log
    assert qd.get("topicSysFlag", qd.get("topicSynFlag")) == 0, log
    assert route.get("filterServerTable") == {}, log


def test_ali_ons_route_with_two_brokers_and_a_slave(node, namesrv):
    with Client(namesrv.address) as b_master, Client(namesrv.address) as b_slave, \
            Client(namesrv.address) as a_master:
        # Registered out of order: ali-ons sorts both arrays by brokerName.
        register_broker(b_master, "127.0.0.1:20911",
                        [topic_config("Shared", 8, 2, 4)], broker_name="broker-b")
        register_broker(b_slave, "127.0.0.1:20921",
                        [topic_config("Shared", 8, 2, 4)], broker_name="broker-b", broker_id=1)
        register_broker(a_master, "127.0.0.1:10911",
                        [topic_config("Shared", 4, 4, 6)], broker_name="broker-a")
        routes, log = ons_routes(node, namesrv.address, "Shared")
    route = routes["Shared"]["route"]
    assert [bd["brokerName"] for bd in route["brokerDatas"]] == ["broker-a", "broker-b"], log
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911"}, log
    assert route["brokerDatas"][1]["brokerAddrs"] == {"0": "127.0.0.1:20911",
                                                      "1": "127.0.0.1:20921"}, log
    assert [(q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"])
            for q in route["queueDatas"]] == [("broker-a", 4, 4, 6), ("broker-b", 8, 2, 4)], log


def test_ali_ons_unknown_topic_is_error_17(node, namesrv):
    routes, log = ons_routes(node, namesrv.address, "NoSuchTopic")
    r = routes["NoSuchTopic"]
    assert not r["ok"], log
    # MQClientException with rmq's code: an answer, not ali-ons' ResponseTimeoutError
    # (which is what a missing response bit or opaque mismatch would give).
    assert r["error"]["name"] == "MQClientException" and r["error"]["code"] == TOPIC_NOT_EXIST, log


def test_ali_ons_many_requests_in_flight_on_one_connection(node, namesrv):
    topics = [f"T{i}" for i in range(12)]
    with Client(namesrv.address) as broker:
        register_broker(broker, "127.0.0.1:10911",
                        [topic_config(t, i + 1, i + 1, 6) for i, t in enumerate(topics)])
        asked = [t for pair in zip(topics, [f"Missing{i}" for i in range(12)]) for t in pair]
        routes, log = ons_routes(node, namesrv.address, *asked)
    for i, t in enumerate(topics):
        assert routes[t]["ok"], log
        qd = routes[t]["route"]["queueDatas"]
        assert [(q["readQueueNums"], q["writeQueueNums"]) for q in qd] == [(i + 1, i + 1)], log
        assert routes[f"Missing{i}"]["error"]["code"] == TOPIC_NOT_EXIST, log


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ali_ons_against_the_rmq_namesrv_command(node, tmp_path):
    """The shipped command (`python -m rmq namesrv --listen ... --kv-config ...`), not
    the in-process harness, serving ali-ons."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(rmq.__file__).resolve().parent.parent)] +
        ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    server = subprocess.Popen(
        [sys.executable, "-m", "rmq", "namesrv", "--listen", address,
         "--kv-config", str(tmp_path / "kvConfig.json"), "--log-level", "warning"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    server.kill()
                    pytest.fail(f"rmq namesrv did not start on {address}: "
                                f"{server.communicate(timeout=5)[0]!r}")
                time.sleep(0.05)
        with Client(address) as broker:
            register_broker(broker, "127.0.0.1:10911", [topic_config("CliTopic", 2, 2, 6)])
            routes, log = ons_routes(node, address, "CliTopic", "NoSuchTopic")
        qd = routes["CliTopic"]["route"]["queueDatas"]
        assert [(q["brokerName"], q["readQueueNums"], q["writeQueueNums"]) for q in qd] == \
            [("broker-a", 2, 2)], log
        assert routes["NoSuchTopic"]["error"]["code"] == TOPIC_NOT_EXIST, log
    finally:
        server.terminate()
        try:
            out = server.communicate(timeout=10)[0]
        except subprocess.TimeoutExpired:
            server.kill()
            out = server.communicate(timeout=5)[0]
    assert server.returncode == 0, f"rmq namesrv exited {server.returncode}: {out!r}"


# ---------------------------------------------------------------- ali-ons: send

def test_ali_ons_producer_sends_through_the_route(node, namesrv):
    with FakeBroker() as fake, Client(namesrv.address) as broker:
        register_broker(broker, fake.address, [topic_config("OnsTopic", 4, 4, 6)])
        code, result, log = run([node, "ons_send.js", namesrv.address, "OnsTopic", "hello ons"],
                                "ali-ons send script")
        log += "\nfake broker saw:\n" + "\n".join(fake.summary())
        assert code == 0 and result, log
        sent = fake.wait_for(lambda c: c.code in SEND_CODES, timeout=1)
    assert sent is not None, log
    assert sent.code == SEND_MESSAGE_V2, log
    ext = sent.ext_fields
    assert ext["b"] == "OnsTopic" and ext["a"] == "PID_RMQ_INTEROP", log       # topic, group
    queue_id = int(ext["e"])
    assert 0 <= queue_id < 4, log
    assert sent.body == b"hello ons", log
    assert result["sendStatus"] == "SEND_OK", log
    assert result["queueOffset"] == FakeBroker.QUEUE_OFFSET, log
    mq = result["messageQueue"]
    assert (mq["topic"], mq["brokerName"], str(mq["queueId"])) == \
        ("OnsTopic", "broker-a", str(queue_id)), log
    assert result["msgId"].startswith("7F000001"), log


def test_ali_ons_producer_gives_up_on_unknown_topic(node, namesrv):
    with FakeBroker() as fake, Client(namesrv.address) as broker:
        register_broker(broker, fake.address, [topic_config("TBW102", 8, 8, 7)])
        code, result, log = run([node, "ons_send.js", namesrv.address, "NotThere", "x"],
                                "ali-ons send script")
        assert code == 2 and result and result["error"]["code"] == TOPIC_NOT_EXIST, log
        assert not any(c.code in SEND_CODES for _, c in fake.requests), log


# ---------------------------------------------------------------- C++ client (PyPI rocketmq)

def cpp_send(tmp_path, address, topic, body):
    # HOME points the C++ client's logs (~/logs/rocketmq-cpp) into tmp_path.
    env = dict(os.environ, HOME=str(tmp_path))
    code, result, log = run([sys.executable, str(INTEROP / "cpp_send.py"), address, topic, body],
                            "C++ client (rocketmq 0.4.4)", env=env)
    if code == 4 and result and result.get("type") == "import":
        parts.fail_or_skip("cpp-client", f"it cannot be imported: {result['error']}")
    logs = sorted((tmp_path / "logs" / "rocketmq-cpp").glob("*"))
    if logs:
        log += f"\nC++ client log {logs[-1]} (tail):\n" + logs[-1].read_text(errors="replace")[-3000:]
    return code, result, log


@pytest.mark.requires("cpp-client")
def test_cpp_producer_sends_through_the_route(tmp_path, namesrv):
    with FakeBroker() as fake, Client(namesrv.address) as broker:
        register_broker(broker, fake.address, [topic_config("CppTopic", 4, 4, 6)])
        code, result, log = cpp_send(tmp_path, namesrv.address, "CppTopic", "hello cpp")
        log += "\nfake broker saw:\n" + "\n".join(fake.summary())
        sent = fake.wait_for(lambda c: c.code in SEND_CODES, timeout=1)
    # The request reaching the fake broker proves the client parsed rmq's route.
    assert sent is not None, log
    assert sent.language == "CPP", log
    ext = sent.ext_fields
    topic = ext.get("topic", ext.get("b"))
    queue_id = int(ext.get("queueId", ext.get("e")))
    assert topic == "CppTopic" and 0 <= queue_id < 4, log
    assert sent.body == b"hello cpp", log
    assert code == 0 and result and result.get("status") == "OK", log
    assert result["offset"] == FakeBroker.QUEUE_OFFSET, log
    # The C++ client reports the message's own unique id (UNIQ_KEY property).
    assert result["msg_id"] and f"UNIQ_KEY\x01{result['msg_id']}\x02" in ext["properties"], log


@pytest.mark.requires("cpp-client")
def test_cpp_producer_falls_back_to_tbw102(tmp_path, namesrv):
    # rmq answers 17 for the new topic; the C++ producer then uses the TBW102 route
    # (auto-create) and sends the message to that broker.
    with FakeBroker() as fake, Client(namesrv.address) as broker:
        register_broker(broker, fake.address, [topic_config("TBW102", 8, 8, 7)])
        code, result, log = cpp_send(tmp_path, namesrv.address, "BrandNew", "auto")
        log += "\nfake broker saw:\n" + "\n".join(fake.summary())
        sent = fake.wait_for(lambda c: c.code in SEND_CODES, timeout=1)
    assert sent is not None, log
    ext = sent.ext_fields
    assert ext.get("topic", ext.get("b")) == "BrandNew", log
    assert ext.get("defaultTopic", ext.get("c")) == "TBW102", log
    assert code == 0 and result and result.get("status") == "OK", log


@pytest.mark.requires("cpp-client")
def test_cpp_producer_fails_fast_without_any_route(tmp_path, namesrv):
    start = time.monotonic()
    code, result, log = cpp_send(tmp_path, namesrv.address, "Nowhere", "x")
    # rmq answers 17 for the topic and for TBW102: the client gives up at once
    # (unanswered requests would each wait out its 3 s timeout).
    assert code == 2 and result and "No route info" in result.get("error", ""), log
    assert time.monotonic() - start < 8, log
