"""What metrics cost (issue 16, item 1): W1 route throughput with ``--metrics`` on
(scraped every --scrape-interval seconds during the run) and off.

Each round starts one NameServer without metrics and one with (in alternating
order, so that drift on a noisy machine does not favour one side), registers W1
(8 brokers x 10,000 topics, connections kept open: every answer is a route) and
runs bench/loadgen at 4 connections x 16 in flight and then x 1. Prints each run
and the on/off ratio of the medians; only code-0 answers count.

    .venv/bin/python bench/metrics.py                 # 3 rounds, ~2 min
    .venv/bin/python bench/metrics.py --rounds 1 --duration 2
"""

import argparse
import json
import statistics
import tempfile
import threading
import urllib.request

import broker_sim
from load import Server, build_loadgen, free_port, log, query_route, run_loadgen


def scraper(url, interval, stop, counts):
    while not stop.wait(interval):
        with urllib.request.urlopen(url, timeout=10) as r:
            r.read()
        counts["scrapes"] += 1


def one_run(metrics, args, topics, body):
    props = {"metricsPort": free_port(), "metricsAddress": "127.0.0.1"} if metrics else {}
    server = Server(tempfile.mkdtemp(prefix="rmq-metrics-"), properties=props)
    brokers = []
    stop = threading.Event()
    counts = {"scrapes": 0}
    try:
        server.start()
        brokers = broker_sim.register_brokers(server.address, args.brokers, topics, body=body)
        query_route(server.address, topics[0])
        thread = None
        if metrics:
            url = f"http://127.0.0.1:{props['metricsPort']}/metrics"
            thread = threading.Thread(target=scraper, daemon=True,
                                      args=(url, args.scrape_interval, stop, counts))
            thread.start()
        out = {}
        for inflight in (16, 1):
            r = run_loadgen(server, label=f"w1_{inflight}", conns=4, inflight=inflight,
                            duration=args.duration, warmup=args.warmup, topics=len(topics))
            if r["errors"]:
                raise SystemExit(f"{r['errors']} answers with code != 0")
            out[inflight] = r["rps"]
        stop.set()
        if thread is not None:
            thread.join(15)
        return out, counts["scrapes"]
    finally:
        stop.set()
        for b in brokers:
            b.close()
        server.stop()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=5.0, help="seconds per load phase")
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--brokers", type=int, default=8)
    p.add_argument("--topics", type=int, default=10000)
    p.add_argument("--scrape-interval", type=float, default=1.0,
                   help="seconds between scrapes (Prometheus' default is 15 s)")
    args = p.parse_args(argv)
    build_loadgen()
    topics = broker_sim.topic_names(args.topics)
    body = broker_sim.encode_body(topics, 1)
    runs = {False: {16: [], 1: []}, True: {16: [], 1: []}}
    for i in range(args.rounds):
        for metrics in ((False, True) if i % 2 == 0 else (True, False)):
            rps, scrapes = one_run(metrics, args, topics, body)
            for k, v in rps.items():
                runs[metrics][k].append(v)
            log(f"round {i + 1} metrics {'on ' if metrics else 'off'}: "
                f"{rps[16]:,.0f} routes/s at 4x16, {rps[1]:,.0f} at 4x1"
                + (f" ({scrapes} scrapes)" if metrics else ""))
    report = {}
    for k in (16, 1):
        off, on = statistics.median(runs[False][k]), statistics.median(runs[True][k])
        report[f"4x{k}"] = {"off": round(off), "on": round(on), "on/off": round(on / off, 3)}
        log(f"4x{k}: median off {off:,.0f}, on {on:,.0f} routes/s: on/off {on / off:.3f}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
