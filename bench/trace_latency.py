"""Route queries' time inside the NameServer, from its trace (``--trace-dir``: every
frame in and out, stamped by the thread that read or wrote it): for each
GET_ROUTEINFO_BY_TOPIC, from its read to its answer's write. Beside a client-side
latency (bench/load.py, loadgen), it tells the server's part from the rest (the
socket before the read, the kernel's loopback, the client).

    PYTHONPATH=src .venv/bin/python bench/load.py --trace --keep ...   # keeps the trace
    PYTHONPATH=src .venv/bin/python bench/trace_latency.py /tmp/rmq-load-*/trace
"""

import argparse
import sys

from rmq import decode_frame
from rmq.errors import RmqError
from rmq.protocol import RequestCode
from rmq.trace.segments import read_records, segment_files

#: Frames longer than this are neither route queries nor their answers' headers
#: (registrations, topic lists): not decoded.
ROUTE_FRAME_MAX = 64 * 1024


def route_latencies(paths):
    """Milliseconds from each route query's read to its answer's write."""
    asked, out = {}, []
    for path in segment_files(paths):
        for t, conn, _peer, direction, frame in read_records(path):
            if len(frame) > ROUTE_FRAME_MAX:
                continue
            try:
                cmd = decode_frame(frame)
            except RmqError:
                continue
            if direction == 0 and cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
                asked[(conn, cmd.opaque)] = t
            elif direction == 1 and cmd.is_response:
                t0 = asked.pop((conn, cmd.opaque), None)
                if t0 is not None:
                    out.append((t - t0) / 1e6)
    return sorted(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="trace directories or segment files")
    args = ap.parse_args()
    ms = route_latencies(args.paths)
    if not ms:
        sys.exit("no route query with its answer in the trace")
    print(f"{len(ms)} route queries, read to answer written: median {ms[len(ms) // 2]:.3f} ms, "
          f"p99 {ms[int(len(ms) * 0.99)]:.3f} ms, p999 {ms[int(len(ms) * 0.999)]:.3f} ms, "
          f"max {ms[-1]:.3f} ms")


if __name__ == "__main__":
    main()
