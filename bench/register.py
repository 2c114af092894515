"""REGISTER_BROKER round trips through the NameServer against the same registration
in process (issue 30: "the server should add <= 20%").

W1's table (8 brokers x ``--topics`` topics) is registered; then broker-0 re-registers
``--count`` times with a new DataVersion (every topic the same, or with
``--changes-routes`` every route changed), timed:

- in process: ``RouteTable.register_broker`` on a table registered the same way (the
  body read, compared and applied; no socket, no frame, no CRC32), here, each just
  before the same registration through the server: the pairs are measured in the same
  moments (this VM's speed moves by 2x within minutes), and the median of their
  ratios is reported too;
- through the server, per engine (``serverEngine=c`` and ``asyncio``, alternated over
  ``--rounds``): from the first byte sent to the whole answer read, the frame encoded
  beforehand, so that only the server's part and the loopback's are in the figure;
  and of that, the time the server's handler spent in ``register_broker`` (the body
  read and applied: the in-process part, measured in the server, from its
  ``rmq_registration_duration_seconds`` metric), the rest being the frame's way in and the
  answer's way out;
- the floor (``limit``): the same frames to the limit server, which reads each and
  answers at once: what the loopback and the frame's transfer take by themselves.

With ``--versus DIR``, two servers instead, this build's and the one of the rmq
importable from DIR (an unpacked wheel of another commit), each registration sent
through one, then the other (the order alternating), the same in process just before:
the medians of the pairs' ratios compare two builds in the same moments, which separate
runs on this VM do not (re-registrations, or W3's first round with ``--first-round``).

    PYTHONPATH=src .venv/bin/python bench/register.py [--topics 10000] [--pin]
    PYTHONPATH=src .venv/bin/python bench/register.py --versus /tmp/before --pin [--first-round 300]
"""

import argparse
import functools
import json
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))

import rmq  # noqa: E402
from rmq import brokersim, encode_frame  # noqa: E402
from rmq.codec import FrameDecoder  # noqa: E402
import load  # noqa: E402

BROKERS = 8


def bodies(topics, count, changes_routes):
    series = brokersim.body_series(topics, 2, alternate_queues=changes_routes)
    for _ in range(count):
        yield next(series)


class InProcess:
    """Re-registrations of broker-0 in a RouteTable registered as W1's, here: each
    call times one (milliseconds). Run between the round trips through the server, one
    each in turn, so that both are measured in the same moments of this noisy VM."""

    def __init__(self, topics):
        from rmq.namesrv.routeinfo import RouteTable
        self.rt = RouteTable()
        first = brokersim.encode_body(topics, 1)
        for i in range(BROKERS):
            self.rt.register_broker(brokersim.CLUSTER, brokersim.broker_addr(i),
                                    brokersim.broker_name(i), 0, "ha", body=first, conn=i,
                                    now_ms=0)

    def __call__(self, body):
        t0 = time.perf_counter()
        self.rt.register_broker(brokersim.CLUSTER, brokersim.broker_addr(0),
                                brokersim.broker_name(0), 0, "ha", body=body, conn=0, now_ms=0)
        return (time.perf_counter() - t0) * 1e3


class FirstRound:
    """W3's first round in process: broker i's first registration, all brokers carrying
    ``topics`` (``body``, 8 queues each) into one RouteTable (each adds a QueueData to
    every topic of a table that grows to megabytes); each call times one
    (milliseconds)."""

    def __init__(self, topics):
        from rmq.namesrv.routeinfo import RouteTable
        self.rt = RouteTable()
        self.body = brokersim.encode_body(topics, 1, queues=8)

    def __call__(self, i):
        t0 = time.perf_counter()
        self.rt.register_broker(brokersim.CLUSTER, brokersim.broker_addr(i),
                                brokersim.broker_name(i), 0, "ha", body=self.body, conn=i,
                                now_ms=0)
        return (time.perf_counter() - t0) * 1e3


def in_process_first_round(topics, brokers):
    """Milliseconds of each first registration of ``brokers`` brokers (FirstRound)."""
    first = FirstRound(topics)
    return [first(i) for i in range(brokers)]


def round_trip(sock, decoder, frame):
    t0 = time.perf_counter()
    sock.sendall(frame)
    while True:
        data = sock.recv(1 << 20)
        if not data:
            raise load.BenchError("the NameServer closed the connection")
        answers = decoder.feed(data)
        if answers:
            seconds = time.perf_counter() - t0
            if answers[0].code != 0:
                raise load.BenchError(f"REGISTER_BROKER answered {answers[0].code}")
            return seconds * 1e3


def registration_seconds(metrics_url):
    """The server's rmq_registration_duration_seconds sum and count (its handler's time in
    register_broker), scraped."""
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    samples = {sample.name: sample.value for family in text_string_to_metric_families(text)
               if family.name == "rmq_registration_duration_seconds"
               for sample in family.samples}
    return (samples["rmq_registration_duration_seconds_sum"],
            samples["rmq_registration_duration_seconds_count"])


def through_server(engine, topics, count, changes_routes, pin, paired):
    """Milliseconds of each re-registration through a NameServer, each after the same
    registration in process (``paired``: InProcess), its CPU, and the mean
    milliseconds its handler spent in register_broker."""
    with tempfile.TemporaryDirectory(prefix="rmq-register-") as work:
        port = load.free_port()
        server = load.Server(work, properties={
            "serverEngine": engine, "metricsPort": str(port), "metricsAddress": "127.0.0.1"},
            pin_cpu=0 if pin else None).start()
        metrics_url = f"http://127.0.0.1:{port}/metrics"
        brokers = []
        try:
            brokers = brokersim.register_brokers(server.address, BROKERS, topics)
            reg = brokers[0]
            decoder = FrameDecoder(64 * 1024 * 1024)
            times, here = [], []
            cpu = 0.0
            faults = load.proc_minor_faults(server.pid)
            in_table0, n0 = registration_seconds(metrics_url)
            for b in bodies(topics, count, changes_routes):
                frame = encode_frame(reg.register_command(b))     # (not timed)
                here.append(paired(b))
                cpu0 = load.proc_cpu_seconds(server.pid)
                times.append(round_trip(reg.sock, decoder, frame))
                cpu += load.proc_cpu_seconds(server.pid) - cpu0
            faults = load.proc_minor_faults(server.pid) - faults
            in_table, n = registration_seconds(metrics_url)
            if n - n0 != count:
                raise load.BenchError(f"the server counted {n - n0} registrations, not {count}")
            return (times, here, cpu * 1e3 / count, faults / count,
                    (in_table - in_table0) * 1e3 / count)
        finally:
            brokersim.close_all(brokers)
            server.stop()


def through_limit(topics, count, changes_routes, pin, paired):
    """Milliseconds of each round trip of the same frames to the limit server
    (bench/limitsrv.c: reads each frame and answers it at once, no work): the floor of
    the loopback and the frame's transfer, under which no server goes."""
    with tempfile.TemporaryDirectory(prefix="rmq-register-") as work:
        limit = load.LimitServer(work, b"", pin_cpu=0 if pin else None)
        sock = socket.create_connection(("127.0.0.1", limit.port))
        try:
            reg = brokersim.SimBroker(limit.address, 0)
            decoder = FrameDecoder(64 * 1024 * 1024)
            times, here, cpu = [], [], 0.0
            faults = load.proc_minor_faults(limit.pid)
            for b in bodies(topics, count, changes_routes):
                frame = encode_frame(reg.register_command(b))     # (not timed)
                here.append(paired(b))
                cpu0 = load.proc_cpu_seconds(limit.pid)
                times.append(round_trip(sock, decoder, frame))
                cpu += load.proc_cpu_seconds(limit.pid) - cpu0
            faults = load.proc_minor_faults(limit.pid) - faults
            return times, here, cpu * 1e3 / count, faults / count, None
        finally:
            sock.close()
            limit.stop()


def side_by_side(other, topics, count, pin, first_round=None):
    """Milliseconds of the same registrations through this build's server and another
    build's (``other``: a directory its rmq imports from, e.g. an unpacked wheel of
    another commit), each in turn (the order alternating), the same registration in
    process just before: (this, other, in process) lists, pair by pair. Re-registrations
    of broker-0 as ``through_server``; with ``first_round``, that many brokers' first
    registrations instead (W3's first round, in process as FirstRound). The
    registration in process is this build's, for both."""
    with tempfile.TemporaryDirectory(prefix="rmq-register-") as a_work, \
            tempfile.TemporaryDirectory(prefix="rmq-register-") as b_work:
        servers = [load.Server(a_work, pin_cpu=0 if pin else None),
                   load.Server(b_work, pin_cpu=0 if pin else None)]
        servers[1].env["PYTHONPATH"] = str(Path(other).resolve())
        # (an rmq whose core does not import here runs pure Python, saying nothing)
        described = [load.describe_server_python(s.env) for s in servers]
        if any(d["implementation"] != "compiled" for d in described) \
                or described[0]["python"] != described[1]["python"]:
            raise load.BenchError(f"both servers must run a compiled core on one Python: "
                                  f"this build {described[0]}, {other} {described[1]}")
        brokers = []
        try:
            for server in servers:
                server.start()
            # (how to time it in process, the two servers' brokers that send it, the body)
            if first_round:
                first = FirstRound(topics)
                brokers = [[brokersim.SimBroker(s.address, i).connect()
                            for i in range(first_round)] for s in servers]
                steps = ((functools.partial(first, i), [bs[i] for bs in brokers], first.body)
                         for i in range(first_round))
            else:
                in_process = InProcess(topics)
                brokers = [brokersim.register_brokers(s.address, BROKERS, topics) for s in servers]
                steps = ((functools.partial(in_process, b), [bs[0] for bs in brokers], b)
                         for b in bodies(topics, count, False))
            times = ([], [], [])
            for n, (paired, regs, body) in enumerate(steps):
                frames = [encode_frame(r.register_command(body)) for r in regs]   # (not timed)
                times[2].append(paired())
                for k in ((0, 1) if n % 2 == 0 else (1, 0)):
                    times[k].append(round_trip(regs[k].sock, FrameDecoder(64 * 1024 * 1024),
                                               frames[k]))
            return times
        finally:
            for bs in brokers:
                brokersim.close_all(bs)
            for server in servers:
                server.stop()


def median(xs):
    return round(statistics.median(xs), 3)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--count", type=int, default=40, help="registrations timed per run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--changes-routes", action="store_true",
                    help="every other registration carries one more queue per topic")
    ap.add_argument("--engines", default="c,asyncio,limit",
                    help="serverEngine values, and 'limit': the limit server (the floor)")
    ap.add_argument("--pin", action="store_true",
                    help="the server on CPU 0, this script on CPU 1")
    ap.add_argument("--first-round", type=int, metavar="BROKERS",
                    help="instead: the first registrations of BROKERS brokers in process, "
                         "each --rounds times (W3's first round: 300)")
    ap.add_argument("--versus", metavar="DIR",
                    help="instead: each registration through this build's server and, in "
                         "turn, through a server running the rmq importable from DIR (an "
                         "unpacked wheel of another commit), --rounds times; with "
                         "--first-round, W3's first registrations")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    if args.pin:
        import os
        os.sched_setaffinity(0, {1})
    if args.versus:
        topics = brokersim.topic_names(args.topics)
        what = (f"{args.first_round} first registrations" if args.first_round else
                f"{args.count} re-registrations of broker-0 of {BROKERS}")
        print(f"{what}, {args.topics} topics each: this build ({Path(rmq.__file__).parent}) "
              f"and {args.versus}, each registration through one, then the other")
        report = {"versus": args.versus, "first_round": args.first_round, "rounds": []}
        for r in range(args.rounds):
            this, other, here = side_by_side(args.versus, topics, args.count, args.pin,
                                             args.first_round)
            row = {"this_ms": median(this), "other_ms": median(other),
                   "in_process_ms": median(here),
                   "this_over_other": median([t / o for t, o in zip(this, other)]),
                   "this_over_in_process": median([t / h for t, h in zip(this, here)]),
                   "other_over_in_process": median([o / h for o, h in zip(other, here)])}
            report["rounds"].append(row)
            print(f"round {r + 1}: this {row['this_ms']} ms, other {row['other_ms']} ms, in "
                  f"process {row['in_process_ms']} ms; per registration (medians of the "
                  f"pairs' ratios) this / other {row['this_over_other']}, this / in process "
                  f"{row['this_over_in_process']}, other / in process "
                  f"{row['other_over_in_process']}")
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(report, indent=1))
        return
    if args.first_round:
        topics = brokersim.topic_names(args.topics)
        for r in range(args.rounds):
            times = in_process_first_round(topics, args.first_round)
            print(f"round {r + 1}: {args.first_round} first registrations of {args.topics} "
                  f"topics in process, median {median(times)} ms")
        return
    topics = brokersim.topic_names(args.topics)
    body_mb = len(brokersim.encode_body(topics, 1)) / 1e6
    report = {"topics": args.topics, "body_mb": round(body_mb, 2), "rounds": []}
    print(f"{BROKERS} brokers x {args.topics} topics (body {body_mb:.2f} MB); broker-0 "
          f"re-registers {args.count} times"
          + (", every route changed" if args.changes_routes else ", the same topics"))
    for r in range(args.rounds):
        row = {}
        for engine in args.engines.split(","):
            measure = through_limit if engine == "limit" else functools.partial(
                through_server, engine)
            times, here, cpu, faults, in_table = measure(
                topics, args.count, args.changes_routes, args.pin, InProcess(topics))
            row[engine] = {"median_ms": median(times), "p90_ms": round(
                statistics.quantiles(times, n=10)[-1], 3), "cpu_ms": round(cpu, 3),
                "faults": round(faults), "in_process_ms": median(here),
                "ratio_of_pairs": median([t / h for t, h in zip(times, here)])}
            if in_table is not None:
                row[engine]["in_register_broker_ms"] = round(in_table, 3)
        report["rounds"].append(row)
        print(f"round {r + 1}: " + "; ".join(
            f"{e} {row[e]['median_ms']} ms (p90 {row[e]['p90_ms']}, server CPU "
            f"{row[e]['cpu_ms']} ms, {row[e]['faults']} page faults"
            + (f", in register_broker {row[e]['in_register_broker_ms']} ms (mean)"
               if 'in_register_broker_ms' in row[e] else "")
            + f"), in process between them {row[e]['in_process_ms']} ms: "
            f"{row[e]['median_ms'] / row[e]['in_process_ms']:.2f} x (median of the pairs' "
            f"ratios {row[e]['ratio_of_pairs']:.2f} x)"
            for e in args.engines.split(",")))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
