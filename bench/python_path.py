"""Round trips of a request answered in Python (GET_KV_CONFIG, 101), through the
NameServer on each network layer: what a control-plane request pays for the way to
Python and back (on the engine: the I/O thread hands the frame to the loop and the
loop's answer back; on asyncio: neither). One connection, one request in flight,
``--count`` of them one after the other, the engines alternated over ``--rounds``;
the server's CPU per request from /proc.

    PYTHONPATH=src .venv/bin/python bench/python_path.py [--count 20000] [--rounds 3]
"""

import argparse
import json
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import rmq  # noqa: E402
from rmq.codec import FrameSplitter  # noqa: E402
import load  # noqa: E402


def round_trips(engine, count):
    with tempfile.TemporaryDirectory() as d:
        srv = load.Server(d, properties={"serverEngine": engine}).start()
        try:
            with socket.create_connection(("127.0.0.1", srv.port)) as s:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                req = rmq.encode_frame(rmq.RemotingCommand.request(
                    101, {"namespace": "bench", "key": "k"}))
                splitter = FrameSplitter()
                times = []
                cpu = load.proc_cpu_seconds(srv.pid)
                for _ in range(count):
                    t = time.perf_counter()
                    s.sendall(req)
                    while True:
                        data = s.recv(65536)
                        if not data:
                            raise load.BenchError("the NameServer closed the connection")
                        if splitter.feed(data):
                            break
                    times.append(time.perf_counter() - t)
                cpu = load.proc_cpu_seconds(srv.pid) - cpu
        finally:
            srv.stop()
    times.sort()
    at = lambda q: round(times[int(q * (len(times) - 1))] * 1e6, 1)  # noqa: E731
    return {"engine": engine, "count": count, "p50_us": at(0.5), "p90_us": at(0.9),
            "p99_us": at(0.99), "server_cpu_us": round(cpu / count * 1e6, 1)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--engines", default="c,asyncio")
    ap.add_argument("--json-out")
    args = ap.parse_args(argv)
    results = []
    for r in range(args.rounds):
        for engine in args.engines.split(","):
            res = round_trips(engine, args.count)
            results.append(res)
            print(f"round {r + 1} {engine}: p50 {res['p50_us']} us, p90 {res['p90_us']}, "
                  f"p99 {res['p99_us']}; server CPU {res['server_cpu_us']} us per request",
                  flush=True)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
