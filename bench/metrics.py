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
import time
import urllib.request

from rmq import brokersim
from load import Server, build_loadgen, free_port, log, query_route, run_loadgen


def scraper(url, interval, stop, counts):
    while not stop.wait(interval):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=10) as r:
            counts["bytes"] = len(r.read())
        counts["seconds"].append(time.perf_counter() - started)


def one_run(metrics, args, topics, body):
    props = {"metricsPort": free_port(), "metricsAddress": "127.0.0.1"} if metrics else {}
    server = Server(tempfile.mkdtemp(prefix="rmq-metrics-"), properties=props)
    brokers = []
    stop = threading.Event()
    counts = {"seconds": [], "bytes": 0}
    try:
        server.start()
        brokers = brokersim.register_brokers(server.address, args.brokers, topics, body=body)
        query_route(server.address, topics[0])
        thread = None
        if metrics and args.scrape_interval > 0:
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
            out[f"cpu{inflight}"] = r["server_cpu_us_per_req"]
        stop.set()
        if thread is not None:
            thread.join(15)
        return out, counts
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
                   help="seconds between scrapes (Prometheus' default is 15 s; 0: the "
                        "endpoint on, never scraped)")
    args = p.parse_args(argv)
    build_loadgen()
    topics = brokersim.topic_names(args.topics)
    body = brokersim.encode_body(topics, 1)
    keys = (16, 1, "cpu16", "cpu1")
    runs = {False: {k: [] for k in keys}, True: {k: [] for k in keys}}
    scrape_ms = []
    for i in range(args.rounds):
        for metrics in ((False, True) if i % 2 == 0 else (True, False)):
            rps, scrapes = one_run(metrics, args, topics, body)
            for k, v in rps.items():
                runs[metrics][k].append(v)
            scrape_ms += [t * 1000 for t in scrapes["seconds"]]
            log(f"round {i + 1} metrics {'on ' if metrics else 'off'}: "
                f"{rps[16]:,.0f} routes/s at 4x16 ({rps['cpu16']} us CPU each), "
                f"{rps[1]:,.0f} at 4x1 ({rps['cpu1']} us)"
                + (f"; {len(scrapes['seconds'])} scrapes of {scrapes['bytes']} bytes"
                   if metrics else ""))
    report = {}
    for k in keys:
        off, on = statistics.median(runs[False][k]), statistics.median(runs[True][k])
        report[f"4x{k}"] = {"off": off, "on": on, "on/off": round(on / off, 3)}
        log(f"{k if isinstance(k, str) else 'routes/s 4x%d' % k}: median off {off:,.2f}, "
            f"on {on:,.2f}: on/off {on / off:.3f}")
    if scrape_ms:
        report["scrape_ms"] = {"median": round(statistics.median(scrape_ms), 2),
                               "max": round(max(scrape_ms), 2)}
        log(f"a scrape (request to last byte, under load): median "
            f"{report['scrape_ms']['median']} ms, max {report['scrape_ms']['max']} ms")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
