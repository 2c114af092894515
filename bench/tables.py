"""The route tables in one process, at W3's scale (issue 15): their footprint per
(topic, broker) pair, a registration's time against the route's width, and what
an answer costs built (cache budget 0) against cached, on one storage.

    .venv/bin/python bench/tables.py [--brokers 300] [--topics 10000] [--pure]

RSS is this process's (/proc/self/status), so the figures include the bodies the
script keeps and Python itself: the per-pair figure is the growth over the
registrations divided by the pairs.
"""

import argparse
import statistics
import time

from rmq import brokersim
from rmq import fallback
from rmq.namesrv.routeinfo import RouteTable

try:
    from rmq import _core
except ImportError:      # no compiled core: the pure storage only
    _core = None


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def register_all(rt, brokers, body):
    times = []
    for i in range(brokers):
        t = time.perf_counter()
        rt.register_broker(brokersim.CLUSTER, brokersim.broker_addr(i),
                           brokersim.broker_name(i), 0, "ha", body=body, conn=i, now_ms=0)
        times.append(time.perf_counter() - t)
    return times


def ms(times):
    return f"median {statistics.median(times) * 1e3:.2f} ms, max {max(times) * 1e3:.2f} ms"


def footprint(storage, brokers, ntopics):
    topics = brokersim.topic_names(ntopics)
    body = brokersim.encode_body(topics, 1)
    again = brokersim.encode_body(topics, 2)
    rt = RouteTable(storage=storage)
    before = rss_mib()
    first = register_all(rt, brokers, body)
    grown = rss_mib() - before
    print(f"{brokers} brokers x {ntopics} topics: tables {grown:.1f} MiB, "
          f"{grown * 2**20 / (brokers * ntopics):.1f} bytes per (topic, broker) pair")
    print(f"  first registrations: {ms(first)}")
    print(f"  re-registrations, new DataVersion, same topics: {ms(register_all(rt, brokers, again))}")
    t = time.perf_counter()
    size = sum(len(rt.route_body(topic)) for topic in topics)
    cached = time.perf_counter() - t
    st = rt.cache_stats()
    print(f"  one pass of route answers ({size / len(topics) / 1024:.1f} KiB each): "
          f"{cached * 1e3:.0f} ms; cache {st['bytes'] / 2**20:.2f} MiB in {st['answers']} "
          f"answer(s) for {st['entries']} topics; RSS {rss_mib():.0f} MiB")
    rt.cache_budget = 0
    n = min(ntopics, 2000)
    t = time.perf_counter()
    for topic in topics[:n]:
        rt.route_body(topic)
    built = (time.perf_counter() - t) / n
    t = time.perf_counter()
    rt.cache_budget = None
    rt.route_body(topics[0])
    for topic in topics[:n]:
        rt.route_body(topic)
    hit = (time.perf_counter() - t) / n
    print(f"  an answer built (budget 0): {built * 1e6:.0f} us; cached: {hit * 1e6:.1f} us")


def width(storage, ntopics, widths):
    """One more broker's first registration of the topics every other broker has."""
    topics = brokersim.topic_names(ntopics)
    body = brokersim.encode_body(topics, 1)
    for w in widths:
        rt = RouteTable(storage=storage)
        register_all(rt, w, body)
        extra = []
        for i in range(w, w + 5):
            extra += register_all_from(rt, i, body)
        print(f"  width {w:4} -> {w + 5}: a registration of {ntopics} topics {ms(extra)}")


def register_all_from(rt, i, body):
    t = time.perf_counter()
    rt.register_broker(brokersim.CLUSTER, brokersim.broker_addr(i), brokersim.broker_name(i),
                       0, "ha", body=body, conn=i, now_ms=0)
    return [time.perf_counter() - t]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--brokers", type=int, default=300)
    p.add_argument("--topics", type=int, default=10_000)
    p.add_argument("--widths", default="8,100,300")
    p.add_argument("--pure", action="store_true", help="the pure-Python storage")
    args = p.parse_args()
    if args.pure or _core is None:
        name, storage = "python", fallback.TopicTable
    else:
        name, storage = "compiled", _core.TopicTable
    print(f"{name} storage")
    footprint(storage, args.brokers, args.topics)
    print("registration time against the route's width:")
    width(storage, args.topics, [int(w) for w in args.widths.split(",")])


if __name__ == "__main__":
    main()
