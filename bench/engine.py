"""The I/O engine (rmq._core.Engine, engine.c) serving W1, in one process: route
queries answered by its C threads, without the GIL; anything else would go to the
Python thread that drains its events (W1 sends none).

W1's table (8 brokers x 10,000 topics, registered in-process: no liveness scan
drops them) behind an Engine with ``--threads`` I/O threads on 127.0.0.1; then
bench/loadgen as bench/load.py runs it: 4 connections x 16 and x 1 in flight, 1,000
connections x 1, and 4 x 16 for topics no broker has (every answer 17). The server
CPU per answer is this process's. Compare with ``bench/load.py`` (the asyncio
server) run just before or after::

    PYTHONPATH=src .venv/bin/python bench/engine.py --threads 1
    PYTHONPATH=src .venv/bin/python bench/engine.py --threads 2 --pin
"""

import argparse
import json
import os
import socket
import sys
import threading
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import load  # noqa: E402  (bench/load.py: loadgen and its runner)
from scaling import w1_table  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--pin", action="store_true",
                    help="this process (its I/O threads too) on CPU 0, loadgen on CPU 1")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    from rmq import _core
    load.build_loadgen()
    if args.pin:                # before the threads start: they inherit it
        os.sched_setaffinity(0, {0})
    rt, topics = w1_table()
    listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
    engine = _core.Engine(rt._tt, listener, threads=args.threads, max_connections=20_000)
    done = threading.Event()
    handed = []

    def drain():                # W1 hands Python nothing; anything would be logged
        while not done.is_set():
            handed.extend(e for e in engine.events(0.1) if e[0] == "frame")

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    server = types.SimpleNamespace(port=listener.getsockname()[1], pid=os.getpid())
    report = {"threads": args.threads, "pinned": args.pin, "phases": {}}
    phases = [("w1_16", 4, 16, ()), ("w1_1", 4, 1, ()), ("c1000_1", 1000, 1, ()),
              ("w1_missing_16", 4, 16, ("--prefix", "NoSuchTopic-"))]
    try:
        print(f"engine, {args.threads} I/O thread(s){', pinned' if args.pin else ''}; "
              f"W1 route answer {len(rt.route_body(topics[0]))} B")
        for label, conns, inflight, extra in phases:
            r = load.run_loadgen(server, label=label, conns=conns, inflight=inflight,
                                 duration=args.duration, warmup=args.warmup,
                                 topics=len(topics), pin_cpu=1 if args.pin else None,
                                 extra=extra)
            codes = r["error_codes"]
            report["phases"][label] = r
            print(f"{label:14} {conns:5} x {inflight:<3} {r['rps']:>12,.0f} answers/s  p50 "
                  f"{r['p50_us']:>8.1f} us  p99 {r['p99_us']:>8.1f} us  server CPU "
                  f"{r.get('server_cpu_us_per_req', 0):.2f} us/answer  codes {codes or '{0}'}")
    finally:
        done.set()
        drainer.join(5)
        engine.stop()
        listener.close()
    report["handed_to_python"] = len(handed)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(report, f)


if __name__ == "__main__":
    sys.exit(main())
