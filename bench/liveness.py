"""The liveness scan at scale: N brokers registered (two topics each), some of them
silent; times one scan with nothing due and one that drops the silent ones, on the
rules over each core's topic table (issue 15).

    .venv/bin/python bench/liveness.py [--brokers 10000] [--expiring 1000]
"""

import argparse
import time

from rmq import bodies, fallback
from rmq.namesrv.routeinfo import RouteTable

try:
    from rmq import _core
except ImportError:      # no compiled core: the pure storage only
    _core = None


def _body(i):
    return bodies.encode_register_broker_body(bodies.register_broker_body(
        [bodies.topic_config(f"T{i}", 4, 4), bodies.topic_config(f"U{i}", 4, 4)],
        {"counter": 1, "timestamp": 1}))


def run(storage, brokers, expiring):
    rt = RouteTable(storage=storage)
    for i in range(brokers):
        rt.register_broker("c", f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}:10911", f"b{i}", 0,
                           "ha", body=_body(i), now_ms=0 if i < expiring else 50_000)
    t = time.perf_counter()
    assert rt.scan_not_active(100_000) == []
    idle = time.perf_counter() - t
    t = time.perf_counter()
    dropped = rt.scan_not_active(120_001)
    busy = time.perf_counter() - t
    assert len(dropped) == expiring
    return idle, busy


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--brokers", type=int, default=10_000)
    p.add_argument("--expiring", type=int, default=1_000)
    args = p.parse_args()
    storages = [("compiled", _core.TopicTable)] if _core is not None else []
    storages.append(("python", fallback.TopicTable))
    for name, storage in storages:
        idle, busy = run(storage, args.brokers, args.expiring)
        print(f"{name:8} {args.brokers} brokers: scan with nothing due {idle * 1e3:.3f} ms; "
              f"{args.expiring} expiring {busy * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
