"""Hostile-load scenarios of the NameServer (issue 12), from separate processes.

Each scenario starts ``python -m rmq namesrv`` (as bench/load.py does), measures the
latency of route queries sent every millisecond on a connection of their own (the
"probe") while something heavy runs on other connections, and reports the largest:

- flood206: 20,000 topics registered; one client pipelines 500 GET_ALL_TOPIC_LIST
  (206) in one write.
- kvputs: a kvConfig.json of ~100 MiB loaded at start; 400 PUT_KV_CONFIG of 64 KiB.
- registrations: a broker re-registers 100,000 topics with a new DataVersion back to
  back while 4 others send heartbeats (904) and QUERY_DATA_VERSION (322).
- bomb: RSS peak (VmHWM) before and after 5 compressed bodies that inflate to 1 GiB,
  sent at once on 5 connections.
- stalled: RSS peak with 8 clients that pipeline 206 and never read.
- bigbroker: RSS of a compressed registration of 1,000,000 topics, and once dropped.

    PYTHONPATH=src .venv/bin/python bench/hardening.py [--only flood206,bomb] [--engine]
"""

import argparse
import json
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rmq import brokersim  # noqa: E402
import load  # noqa: E402
from rmq import encode_frame  # noqa: E402
from rmq.codec import FrameDecoder, RemotingCommand  # noqa: E402
from rmq.protocol import RequestCode as RC  # noqa: E402


class Probe(threading.Thread):
    """Route queries every ``interval`` s on one connection; RTTs in ms."""

    def __init__(self, address, topic, interval=0.001):
        super().__init__(daemon=True)
        self.sim = brokersim.SimBroker(address, 900, timeout=60).connect()
        self.topic, self.interval = topic, interval
        self.rtts, self.errors = [], 0
        self.running = threading.Event()
        self.stop_ = threading.Event()

    def run(self):
        while not self.stop_.is_set():
            cmd = RemotingCommand.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": self.topic})
            t0 = time.perf_counter()
            resp = self.sim.call(cmd)
            if resp.code != 0:
                self.errors += 1
            if self.running.is_set():
                self.rtts.append((time.perf_counter() - t0) * 1000)
            time.sleep(self.interval)

    def measure(self, fn):
        self.rtts = []
        self.running.set()
        try:
            fn()
        finally:
            self.running.clear()
        rtts = sorted(self.rtts)
        return {"probes": len(rtts), "max_ms": round(rtts[-1], 2) if rtts else None,
                "p99_ms": round(rtts[int(len(rtts) * 0.99)], 2) if rtts else None,
                "median_ms": round(statistics.median(rtts), 3) if rtts else None,
                "errors": self.errors}

    def close(self):
        self.stop_.set()
        self.join(5)
        self.sim.close()


def scenario_flood206(server, args):
    brokers = brokersim.register_brokers(server.address, 1,
                                          brokersim.topic_names(20000), queues=4)
    probe = Probe(server.address, "T-00001")
    probe.start()
    time.sleep(0.2)

    def flood():
        s = socket.create_connection(("127.0.0.1", server.port))
        s.sendall(b"".join(encode_frame(RemotingCommand.request(206)) for _ in range(500)))
        load.read_answers(s, 500)
        s.close()
    t0 = time.perf_counter()
    out = probe.measure(flood)
    out["flood_seconds"] = round(time.perf_counter() - t0, 2)
    probe.close()
    brokersim.close_all(brokers)
    return out


def write_kv_file(path, target_bytes):
    value = "v" * 1024
    per_ns = 1000
    table = {}
    n = 0
    while n * (1024 + 16) < target_bytes:
        table.setdefault(f"ns-{n // per_ns}", {})[f"key-{n:08d}"] = value
        n += 1
    Path(path).write_text(json.dumps({"configTable": table}, separators=(",", ":")))
    return n


PUTS = 400


def scenario_kvputs(server, args):
    brokers = brokersim.register_brokers(server.address, 1, brokersim.topic_names(100),
                                          queues=4)
    probe = Probe(server.address, "T-00001")
    probe.start()
    time.sleep(0.2)
    sim = brokersim.SimBroker(server.address, 901).connect()
    value = "x" * (64 * 1024)

    def puts():
        for i in range(PUTS):
            r = sim.call(RemotingCommand.request(RC.PUT_KV_CONFIG, {
                "namespace": "ns-bench", "key": f"k{i}", "value": value}))
            assert r.code == 0, r
    t0 = time.perf_counter()
    out = probe.measure(puts)
    out["put_ms_mean"] = round((time.perf_counter() - t0) * 1000 / PUTS, 2)
    probe.close()
    sim.close()
    brokersim.close_all(brokers)
    return out


def scenario_registrations(server, args):
    topics = brokersim.topic_names(100000)
    brokers = brokersim.register_brokers(server.address, 1, topics, queues=4)
    others = brokersim.register_brokers(server.address, 4, brokersim.topic_names(10),
                                         queues=4, first_index=1)
    probe = Probe(server.address, "T-00001")
    probe.start()
    time.sleep(0.2)
    bodies = [brokersim.encode_body(topics, c, queues=4) for c in range(2, 2 + args.regs)]
    stop = threading.Event()

    def heartbeats():
        while not stop.is_set():
            for b in others:
                ext = b._identity()
                b.call(RemotingCommand.request(RC.BROKER_HEARTBEAT, ext))
                b.call(RemotingCommand.request(RC.QUERY_DATA_VERSION, ext,
                                               b'{"counter":1,"timestamp":1}'))
            time.sleep(0.01)
    hb = threading.Thread(target=heartbeats, daemon=True)
    hb.start()
    times = []

    def regs():
        for body in bodies:
            times.append(brokers[0].register(body)[0] * 1000)
    out = probe.measure(regs)
    stop.set()
    hb.join(5)
    out["registration_ms_median"] = round(statistics.median(times), 1)
    probe.close()
    brokersim.close_all(brokers + others)
    return out


def _bomb(inflated):
    # a compressed RegisterBrokerBody: valid prefix, then zeros
    raw = struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1)
    return zlib.compress(raw + b"\x00" * inflated, 9)


def scenario_bomb(server, args):
    before = load.proc_status(server.pid)
    bomb = _bomb(1 << 30)
    socks = []
    for i in range(5):
        b = brokersim.SimBroker(server.address, 950 + i).connect()
        b.sock.sendall(encode_frame(b.register_command(bomb, compressed=True)))
        socks.append(b)
    codes = [read_answers_code(b) for b in socks]
    after = load.proc_status(server.pid)
    for b in socks:
        b.close()
    limit = min(64 << 20, max(1 << 20, 64 * len(bomb)))
    return {"compressed_bytes": len(bomb), "inflate_limit_mib": round(limit / 2**20, 1),
            "answers": codes, "hwm_before_mib": round(before["VmHWM"], 1),
            "hwm_after_mib": round(after["VmHWM"], 1),
            "peak_growth_mib": round(after["VmHWM"] - before["VmRSS"], 1)}


def read_answers_code(sim):
    dec = FrameDecoder(1 << 30)
    while True:
        data = sim.sock.recv(1 << 16)
        if not data:
            return None
        cmds = dec.feed(data)
        if cmds:
            return cmds[0].code


def scenario_stalled(server, args):
    brokers = brokersim.register_brokers(server.address, 1,
                                          brokersim.topic_names(20000), queues=4)
    before = load.proc_status(server.pid)
    flood = b"".join(encode_frame(RemotingCommand.request(206)) for _ in range(1000))
    socks = []
    for _ in range(8):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", server.port))
        s.sendall(flood)
        socks.append(s)
    time.sleep(3)
    after = load.proc_status(server.pid)
    alive = 0
    for s in socks:         # read what arrived: an aborted one ends in a reset
        s.setblocking(False)
        try:
            while s.recv(1 << 16):
                pass
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
        s.close()
    brokersim.close_all(brokers)
    return {"budget_mib": 256, "hwm_before_mib": round(before["VmHWM"], 1),
            "hwm_after_mib": round(after["VmHWM"], 1),
            "peak_growth_mib": round(after["VmHWM"] - before["VmRSS"], 1),
            "stalled_connections_left": alive}


def scenario_bigbroker(server, args):
    """A compressed registration of 1,000,000 topics (~2.4 MB), then its broker's
    connection closed: RSS peak, and RSS once the broker is dropped."""
    before = load.proc_status(server.pid)
    topics = brokersim.topic_names(1_000_000, width=7)
    body = brokersim.encode_body(topics, 1, queues=4, compressed=True)
    b = brokersim.SimBroker(server.address, 960, timeout=300).connect()
    seconds, _ = b.register(body, compressed=True)
    registered = load.proc_status(server.pid)
    b.close()
    probe = brokersim.SimBroker(server.address, 961, timeout=300).connect()
    t0 = time.perf_counter()
    for topic in (topics[0], topics[-1]):   # (the table drops them in slices: wait for all)
        while probe.call(RemotingCommand.request(RC.GET_ROUTEINFO_BY_TOPIC,
                                                 {"topic": topic})).code == 0:
            time.sleep(0.05)    # dropped by the table thread
    drop_s = time.perf_counter() - t0
    probe.close()
    # the routes go first (the broker is no longer live); the table thread goes on
    # with the drop (the topic order's replay, the topics, malloc_trim): a small
    # registration, answered by the table thread after it, tells when it is done
    t0 = time.perf_counter()
    readings = [load.proc_status(server.pid)["VmRSS"]]
    done = threading.Event()

    def watch():
        while not done.wait(0.1):
            readings.append(load.proc_status(server.pid)["VmRSS"])
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    small = brokersim.SimBroker(server.address, 962, timeout=300).connect()
    small.register(brokersim.encode_body(["Small-1", "Small-2"], 1))
    small.close()
    done.set()
    watcher.join()
    settle_s = time.perf_counter() - t0
    after = load.proc_status(server.pid)
    return {"compressed_bytes": len(body), "register_s": round(seconds, 2),
            "rss_before_mib": round(before["VmRSS"], 1),
            "hwm_mib": round(registered["VmHWM"], 1),
            "rss_registered_mib": round(registered["VmRSS"], 1),
            "rss_dropped_mib": round(after["VmRSS"], 1), "drop_s": round(drop_s, 2),
            "settle_s": round(settle_s, 2), "rss_peak_while_dropping_mib": round(max(readings), 1)}


SCENARIOS = {"flood206": scenario_flood206, "kvputs": scenario_kvputs,
             "registrations": scenario_registrations, "bomb": scenario_bomb,
             "stalled": scenario_stalled, "bigbroker": scenario_bigbroker}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", help="comma-separated scenarios (default: all)")
    p.add_argument("--regs", type=int, default=10, help="registrations in 'registrations'")
    p.add_argument("--kv-mib", type=int, default=100)
    p.add_argument("--log-level", default="warning")
    p.add_argument("--engine", action="store_true",
                   help="serve with the compiled core's I/O engine (serverEngine=c, the default)")
    p.add_argument("--asyncio", action="store_true",
                   help="serve with the asyncio server (serverEngine=asyncio)")
    p.add_argument("--threads", type=int, default=0, help="its I/O threads (0: one per core)")
    p.add_argument("--keep-log", help="copy the server log here")
    args = p.parse_args(argv)
    names = args.only.split(",") if args.only else list(SCENARIOS)
    report = {}
    for name in names:
        with tempfile.TemporaryDirectory() as d:
            if name == "kvputs":
                write_kv_file(Path(d) / "kvConfig.json", args.kv_mib << 20)
            props = ({"serverEngine": "c", "serverIoThreads": str(args.threads)}
                     if args.engine or args.threads else
                     {"serverEngine": "asyncio"} if args.asyncio else {})
            server = load.Server(d, log_level=args.log_level, properties=props).start(timeout=120)
            try:
                report[name] = SCENARIOS[name](server, args)
            finally:
                server.stop()
                if args.keep_log:
                    Path(args.keep_log).write_bytes(server.log_path.read_bytes())
        print(name, json.dumps(report[name]), flush=True)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
