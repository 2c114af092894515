"""Route answers from one route table by N threads at once, in one process: how the
serving loop (serve.c's rs_serve_routes, the one the I/O threads of issue 30 run)
scales with threads, and what its read lock costs.

W1's table (8 brokers x 10,000 topics, every answer cached). Each thread serves W1
route queries (Java 4.9.8's header, topics round-robin) over and over, without the
GIL, for ``--seconds``:

- ``batch``: 4,096 pipelined queries per call, as a connection's read brings them:
  the read lock is taken once per 64 KiB of answers;
- ``single``: the same queries one per call: the lock taken and released per
  answer, its cost and its contention in full view;
- ``lock``: the read lock taken and released once per query, nothing answered: the
  lock alone under N reader threads (lock pairs/s).

Prints answers/s (lock pairs/s) per thread count and the ratio to N x one thread's rate::

    PYTHONPATH=src .venv/bin/python bench/scaling.py            # N = 1, 2, ... cores, 2 x cores
    PYTHONPATH=src .venv/bin/python bench/scaling.py --threads 1 2 4 --seconds 5
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import instructions  # noqa: E402  (bench/instructions.py: W1's table)

FRAMES = 4096


def w1_table():
    """bench/instructions.py's W1 table, every answer cached (as after W1's first
    round)."""
    rt, topics = instructions.w1_table()
    for t in topics:
        rt.route_body(t)
    return rt, topics


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cores = os.cpu_count() or 1
    ap.add_argument("--threads", type=int, nargs="+",
                    default=sorted({*range(1, cores + 1), 2 * cores}))
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--json-out")
    args = ap.parse_args()
    import rmq
    from rmq import _core
    if rmq.IMPLEMENTATION != "compiled":
        raise SystemExit("bench/scaling.py measures the compiled core; it is not built")
    rt, topics = w1_table()
    requests = [rmq.encode_frame(rmq.RemotingCommand.request(
        105, {"topic": topics[i % len(topics)]}, opaque=i, version=409)) for i in range(FRAMES)]
    data = b"".join(requests)
    report = {"cores": cores, "seconds": args.seconds, "modes": {}}
    print(f"rmq from {rmq.__file__}; {cores} CPUs; {args.seconds:g} s per run")
    for mode in ("batch", "single", "lock"):
        rows = report["modes"][mode] = []
        one = None
        for n in args.threads:
            per_thread = _core._serve_threads(rt._tt, data, n, args.seconds, mode)
            rate = sum(per_thread) / args.seconds
            one = rate if n == 1 else one
            ratio = rate / (n * one) if one else None
            rows.append({"threads": n, "answers_per_s": round(rate), "ratio_to_n_x_one":
                         None if ratio is None else round(ratio, 3),
                         "per_thread": [round(a / args.seconds) for a in per_thread]})
            unit = "lock pairs/s" if mode == "lock" else "answers/s"
            print(f"{mode:6} {n:3} threads {rate:>13,.0f} {unit}"
                  + ("" if ratio is None else f"   {ratio:.2f} x (N x one thread)"))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(report, f)
    print(json.dumps(report))


if __name__ == "__main__":
    sys.exit(main())
