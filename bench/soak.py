"""The soak (issue 30): mixed load on one NameServer for --minutes, reported minute by
minute, from separate processes over 127.0.0.1.

On ``python -m rmq namesrv`` (the I/O engine, serverEngine=c, unless --server asyncio):

- routes: bench/loadgen at a fixed rate (open loop: a stall shows in every request due
  during it) from 4 connections x 16 in flight and from 1,000 connections x 1, every
  answer a route (the 8 brokers stay connected);
- registrations: 8 brokers x 10,000 topics, each re-registering every 30 s with a new
  DataVersion (staggered);
- churn: every 2 s a broker connects, registers 100 topics and leaves (its connection's
  close drops it);
- KV: a PUT_KV_CONFIG (1 KiB, 100 keys in turn) every 100 ms, a GET every 100 ms;
- 206: a GET_ALL_TOPIC_LIST_FROM_NAMESERVER every second;
- faults, one every 5 s in turn: a frame longer than maxFrameLength, a header that does
  not decode, a client that pipelines 206s and never reads (closed after 10 s), a
  request sent a byte at a time, 200 connections opened and closed at once.

Every minute: the server's RSS, the route answers lost (sent, not answered: must be 0)
and not routes, the latency percentiles of each kind. Exits 1 when an answer was lost,
a route query was not answered with a route, a control request failed, or the server
died; the JSON report at the end (also to --json-out).

    PYTHONPATH=src .venv/bin/python bench/soak.py --minutes 60     # make soak
    PYTHONPATH=src .venv/bin/python bench/soak.py --minutes 5      # CI
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import load  # noqa: E402
from rmq import brokersim, encode_frame  # noqa: E402
from rmq.codec import RemotingCommand  # noqa: E402
from rmq.protocol import RequestCode as RC  # noqa: E402

TOPICS = 10_000
BROKERS = 8


def percentiles(ms):
    if not ms:
        return {"n": 0}
    s = sorted(ms)
    return {"n": len(s), "p50_ms": round(s[len(s) // 2], 2),
            "p99_ms": round(s[min(len(s) - 1, int(len(s) * 0.99))], 2),
            "max_ms": round(s[-1], 2)}


class Activity(threading.Thread):
    """A loop run every ``period`` seconds until stopped; latencies (ms) and failures
    kept per minute (``take``)."""

    def __init__(self, name, period, step):
        super().__init__(daemon=True, name=name)
        self.period, self.step = period, step
        self.stop_ = threading.Event()
        self.lock = threading.Lock()
        self.ms, self.failures, self.count = [], [], 0

    def run(self):
        while not self.stop_.is_set():
            t0 = time.perf_counter()
            try:
                ms = self.step()
                with self.lock:
                    self.count += 1
                    if ms is not None:
                        self.ms.append(ms)
            except Exception as e:          # counted: the soak fails on any
                with self.lock:
                    self.failures.append(f"{type(e).__name__}: {e}")
            self.stop_.wait(max(0.0, self.period - (time.perf_counter() - t0)))

    def take(self):
        with self.lock:
            out = dict(percentiles(self.ms), count=self.count, failures=self.failures[:5],
                       failed=len(self.failures))
            self.ms, self.failures, self.count = [], [], 0
        return out


def timed_call(sim, cmd, ok=(0,)):
    t0 = time.perf_counter()
    resp = sim.call(cmd)
    ms = (time.perf_counter() - t0) * 1000
    if resp.code not in ok:
        raise RuntimeError(f"request {cmd.code} answered {resp.code} {resp.remark!r}")
    return ms


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=60)
    p.add_argument("--server", choices=["engine", "asyncio"], default="engine")
    p.add_argument("--threads", type=int, default=0, help="I/O threads (0: one per core)")
    p.add_argument("--rate", type=int, default=40_000,
                   help="route queries per second from the 4 x 16 connections")
    p.add_argument("--rate-c1000", type=int, default=5_000,
                   help="route queries per second from the 1,000 connections")
    p.add_argument("--json-out")
    args = p.parse_args(argv)
    load.build_loadgen()
    props = {"maxConnections": "5000", "serverEngine": "asyncio"}
    if args.server == "engine":
        props.update(serverEngine="c", serverIoThreads=str(args.threads))
    report = {"args": vars(args), "minutes": []}
    failed = []
    with tempfile.TemporaryDirectory(prefix="rmq-soak-") as d:
        server = load.Server(d, log_level="warning", properties=props).start(timeout=120)
        addr = server.address
        topics = brokersim.topic_names(TOPICS)
        brokers = brokersim.register_brokers(addr, BROKERS, topics)
        series = [brokersim.body_series(topics, 2) for _ in brokers]
        reg_lock = threading.Lock()
        turn = [0]

        def register():             # one broker per step: each every 30 s
            i = turn[0] % BROKERS
            turn[0] += 1
            with reg_lock:
                return brokers[i].register(next(series[i]))[0] * 1000

        churn_n = [0]

        def churn():
            churn_n[0] += 1
            b = brokersim.SimBroker(addr, 1000 + churn_n[0] % 1000).connect()
            try:
                return b.register(brokersim.encode_body(
                    brokersim.topic_names(100, prefix=f"churn{churn_n[0] % 7}-"), 1))[0] * 1000
            finally:
                b.close()

        kv = brokersim.SimBroker(addr, 2001).connect()
        kv_n = [0]
        value = "v" * 1024

        def kv_put():
            kv_n[0] += 1
            return timed_call(kv, RemotingCommand.request(RC.PUT_KV_CONFIG, {
                "namespace": "soak", "key": f"k{kv_n[0] % 100}", "value": value}))

        kv_get_sim = brokersim.SimBroker(addr, 2002).connect()

        def kv_get():
            return timed_call(kv_get_sim, RemotingCommand.request(RC.GET_KV_CONFIG, {
                "namespace": "soak", "key": "k1"}), ok=(0, 22))

        lister = brokersim.SimBroker(addr, 2003).connect()

        def topic_list():
            return timed_call(lister, RemotingCommand.request(RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))

        fault_n = [0]
        held = []

        def fault():
            kind = fault_n[0] % 5
            fault_n[0] += 1
            while held and held[0][0] < time.monotonic():
                held.pop(0)[1].close()
            if kind == 0:       # longer than maxFrameLength: closed
                with socket.create_connection(("127.0.0.1", server.port)) as s:
                    s.sendall(struct.pack(">i", 0x7FFFFFF0) + b"x" * 100)
                    s.settimeout(5)
                    assert s.recv(1) == b""
            elif kind == 1:     # a header that does not decode: closed
                with socket.create_connection(("127.0.0.1", server.port)) as s:
                    s.sendall(struct.pack(">ii", 12, 8) + b"{not json")
                    s.settimeout(5)
                    assert s.recv(1) == b""
            elif kind == 2:     # pipelines 206s, never reads (closed 10 s later)
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.connect(("127.0.0.1", server.port))
                s.setblocking(False)
                try:
                    s.send(b"".join(encode_frame(RemotingCommand.request(206)) for _ in range(200)))
                except BlockingIOError:
                    pass
                held.append((time.monotonic() + 10, s))
            elif kind == 3:     # a request a byte at a time
                with socket.create_connection(("127.0.0.1", server.port)) as s:
                    frame = encode_frame(RemotingCommand.request(RC.GET_ROUTEINFO_BY_TOPIC,
                                                                 {"topic": topics[1]}))
                    for b in frame:
                        s.send(bytes([b]))
                        time.sleep(0.001)
                    s.settimeout(5)
                    assert s.recv(4)
            else:               # 200 connections at once
                conns = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(200)]
                for s in conns:
                    s.close()
            return None

        activities = {"register": Activity("register", 30 / BROKERS, register),
                      "churn": Activity("churn", 2, churn),
                      "kv_put": Activity("kv_put", 0.1, kv_put),
                      "kv_get": Activity("kv_get", 0.1, kv_get),
                      "206": Activity("206", 1, topic_list),
                      "faults": Activity("faults", 5, fault)}
        for a in activities.values():
            a.start()
        try:
            minutes = max(1, round(args.minutes))
            for minute in range(1, minutes + 1):
                results = {}

                def route_load(key, conns, inflight, rate):
                    results[key] = load.run_loadgen(server, label=key, conns=conns,
                                                    inflight=inflight, duration=60, warmup=0,
                                                    topics=TOPICS, rate=rate)
                runs = [threading.Thread(target=route_load, args=a) for a in
                        (("routes_4x16", 4, 16, args.rate),
                         ("routes_c1000", 1000, 1, args.rate_c1000))]
                for t in runs:
                    t.start()
                for t in runs:
                    t.join()
                if not server.alive():
                    failed.append(f"minute {minute}: the NameServer died")
                    break
                row = {"minute": minute, "rss_mib": round(load.proc_status(server.pid)["VmRSS"], 1)}
                for key, r in results.items():
                    lost = r["lost"] + r["timeouts"] + r["unmatched"]
                    # (unsent_due: requests the rate wanted sent while every slot was
                    # in flight: the server behind the rate, shown, not a loss)
                    row[key] = {"answers": r["requests"], "lost": lost, "not_routes": r["errors"],
                                "unsent_due": r["unsent_due"],
                                "p50_ms": round(r["p50_us"] / 1000, 2),
                                "p99_ms": round(r["p99_us"] / 1000, 2),
                                "max_ms": round(r["max_us"] / 1000, 2)}
                    if lost or r["errors"] or r["conn_errors"]:
                        failed.append(f"minute {minute} {key}: lost {lost}, not routes "
                                      f"{r['errors']} {r['error_codes']}, connection errors "
                                      f"{r['conn_errors']}")
                for name, a in activities.items():
                    row[name] = a.take()
                    if row[name]["failed"]:
                        failed.append(f"minute {minute} {name}: {row[name]['failures']}")
                report["minutes"].append(row)
                print(json.dumps(row), flush=True)
        finally:
            for a in activities.values():
                a.stop_.set()
            for a in activities.values():
                a.join(60)
            for _, s in held:
                s.close()
            brokersim.close_all(brokers + [kv, kv_get_sim, lister])
            server.stop()
    rows = report["minutes"]
    if rows:
        report["summary"] = {
            "rss_mib_first": rows[0]["rss_mib"], "rss_mib_last": rows[-1]["rss_mib"],
            "rss_mib_max": max(r["rss_mib"] for r in rows),
            "lost": sum(r[k]["lost"] for r in rows for k in ("routes_4x16", "routes_c1000")),
            "routes_max_ms": max(r[k]["max_ms"] for r in rows for k in ("routes_4x16", "routes_c1000")),
            "routes_4x16_p99_ms_median": statistics.median(r["routes_4x16"]["p99_ms"] for r in rows),
            "routes_c1000_p99_ms_median": statistics.median(r["routes_c1000"]["p99_ms"] for r in rows),
            "registrations": sum(r["register"]["count"] for r in rows),
            "faults": sum(r["faults"]["count"] for r in rows)}
    report["failed"] = failed
    print(json.dumps(report.get("summary", {})))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report))
    for f in failed:
        print("FAILED:", f, file=sys.stderr)
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
