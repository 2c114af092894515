"""Instructions per W1 operation, counted by callgrind: a figure that stays put on a
noisy shared machine, where bench/load.py's req/s move by a quarter between two runs
of the same build. Two operations, in this process's rmq (compiled core):

- ``route``: one GET_ROUTEINFO_BY_TOPIC answered by ``RouteTable.serve_routes`` from
  the cached answers (W1: 8 brokers x 10,000 topics), frames fed in 64 KiB chunks as
  the server reads them;
- ``zone``: the same for zone-mode queries (``__ZONE_MODE=true``, ``__ZONE_NAME=zone-0``)
  with W1's brokers in two zones (zone-0 and zone-1): answers with half the brokers;
- ``register``: one re-registration of 10,000 topics with a new DataVersion (W1's
  broker 0) into the compiled route tables.

Each is run under ``valgrind --tool=callgrind`` twice, with few and with many
repetitions; the difference of the two totals over the difference of the counts is
the cost of one operation, set-up and interpreter start excluded::

    .venv/bin/python bench/instructions.py                  # both, ~1 min
    /other/tree/.venv/bin/python bench/instructions.py      # the same for another build

Needs valgrind (Debian's package).
"""

import argparse
import functools
import os
import re
import subprocess
import sys
import tempfile

TOPICS = 10_000
BROKERS = 8
FRAMES = 4096          # route requests per repetition
CHUNK = 64 * 1024


def _simulator():
    from rmq import brokersim
    if hasattr(brokersim, "SimBroker"):
        return brokersim
    # a build from before the one simulator: its bench/ had broker_sim.py
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import broker_sim
    return broker_sim


def w1_table(zones=0):
    """W1's RouteTable (8 brokers x 10,000 topics, registered in-process) and its
    topics; bench/scaling.py and bench/engine.py start from it too."""
    from rmq.namesrv.routeinfo import RouteTable
    brokersim = _simulator()
    rt = RouteTable()
    topics = brokersim.topic_names(TOPICS)
    body = brokersim.encode_body(topics, 1)
    for i in range(BROKERS):
        rt.register_broker(brokersim.CLUSTER, brokersim.broker_addr(i), brokersim.broker_name(i),
                           0, "ha", body=body, conn=i, now_ms=0,
                           **({"zone_name": f"zone-{i % zones}"} if zones else {}))
    return rt, topics


def route(reps, zone=False):
    import rmq
    rt, topics = w1_table(2 if zone else 0)
    ext = {"__ZONE_MODE": "true", "__ZONE_NAME": "zone-0"} if zone else {}
    for t in topics:        # (a build from before zone mode takes no zone argument)
        rt.route_body(t, False, "zone-0") if zone else rt.route_body(t)
    stream = b"".join(rmq.encode_frame(rmq.RemotingCommand.request(
        105, {"topic": topics[i % TOPICS], **ext}, opaque=i)) for i in range(FRAMES))
    chunks = [stream[i:i + CHUNK] for i in range(0, len(stream), CHUNK)]
    serve = rt.route_server()
    for _ in range(reps):
        decoder = rmq.FrameDecoder()
        for c in chunks:
            out, others, error = serve(decoder, c, 1 << 30)
            assert not others and error is None


def register(reps):
    brokersim = _simulator()
    rt, topics = w1_table()
    series = brokersim.body_series(topics, 2)
    bodies = [next(series) for _ in range(reps)]
    for b in bodies:
        rt.register_broker(brokersim.CLUSTER, brokersim.broker_addr(0), brokersim.broker_name(0),
                           0, "ha", body=b, conn=0, now_ms=0)


#: operation -> (function, few and many repetitions, operations per repetition)
OPERATIONS = {"route": (route, 1, 6, FRAMES),
              "zone": (functools.partial(route, zone=True), 1, 6, FRAMES),
              "register": (register, 2, 12, 1)}


def count(op, reps):
    """callgrind's total instructions of this script running ``op`` ``reps`` times."""
    with tempfile.NamedTemporaryFile(suffix=".callgrind") as out:
        p = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out.name}",
                            sys.executable, __file__, "--run", op, str(reps)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"valgrind failed:\n{p.stderr[-2000:]}")
        return int(re.search(r"Collected : (\d+)", p.stderr).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ops", nargs="*", metavar="OP", help=f"of {', '.join(OPERATIONS)} (all)")
    ap.add_argument("--run", nargs=2, metavar=("OP", "REPS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        OPERATIONS[args.run[0]][0](int(args.run[1]))
        return
    unknown = set(args.ops) - set(OPERATIONS)
    if unknown:
        ap.error(f"no such operation: {', '.join(sorted(unknown))}")
    import rmq
    if rmq.IMPLEMENTATION != "compiled":
        raise SystemExit(f"{rmq.__file__}: the compiled core is not built")
    print(f"rmq from {rmq.__file__}")
    for op in args.ops or OPERATIONS:
        fn, few, many, per = OPERATIONS[op]
        a, b = count(op, few), count(op, many)
        print(f"{op:9} {(b - a) / ((many - few) * per):>14,.0f} instructions per operation")


if __name__ == "__main__":
    main()
