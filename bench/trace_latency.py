"""Route queries' time inside the NameServer, from its trace (``--trace-dir``: every
frame in and out, stamped by the thread that read or wrote it): for each
GET_ROUTEINFO_BY_TOPIC, from its read to its answer's write. Beside a client-side
latency (bench/load.py, loadgen), it tells the server's part from the rest (the
socket before the read, the kernel's loopback, the client).

With ``--samples`` (loadgen's record of each answer: bench/load.py --samples), each
request of that run is found in the trace (by its connection's port and opaque) and
its time split in three: from loadgen's send to the server's read (the request in
the kernel, or waiting for its I/O thread), from the read to the answer's write (the
server's work), and from the write to loadgen's read (the kernel, the client); the
slowest are listed.

    PYTHONPATH=src .venv/bin/python bench/load.py --trace --samples --keep ...
    PYTHONPATH=src .venv/bin/python bench/trace_latency.py /tmp/rmq-load-*/trace \\
        [--samples /tmp/rmq-load-*/routes_during_206.samples]
"""

import argparse
import struct
import sys

from rmq import decode_frame
from rmq.errors import RmqError
from rmq.protocol import RequestCode
from rmq.trace.segments import read_records, segment_files

#: Frames longer than this are neither route queries nor their answers' headers
#: (registrations, topic lists): not decoded.
ROUTE_FRAME_MAX = 64 * 1024
#: loadgen --samples (bench/loadgen.c): due time (realtime ns), latency from it, send
#: lag (ns), code, opaque, local port, 0
SAMPLE = struct.Struct("<qIIiiII")


def route_times(paths):
    """{(peer port, opaque): [(read ns, write ns)]} of the trace's route queries (a
    connection's opaques may repeat: in time order)."""
    asked, out = {}, {}
    for path in segment_files(paths):
        for t, conn, peer, direction, frame in read_records(path):
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
                    port = int(peer.rsplit(":", 1)[1]) if ":" in peer else 0
                    out.setdefault((port, cmd.opaque), []).append((t0, t))
    return out


def split_samples(samples_path, times):
    """[(total, send to read, read to write, write to answer read)] in ms, slowest
    first, for the samples found in the trace; and how many were not."""
    data = open(samples_path, "rb").read()
    rows, missing = [], 0
    for due, lat, lag, _code, opaque, port, _ in SAMPLE.iter_unpack(
            data[:len(data) - len(data) % SAMPLE.size]):
        sent, answered = due + lag, due + lat
        found = [rw for rw in times.get((port, opaque), ()) if rw[0] >= sent - 1_000_000]
        if not found:
            missing += 1
            continue
        read, written = min(found)
        rows.append(tuple(round(x / 1e6, 3) for x in
                          (answered - sent, read - sent, written - read, answered - written)))
    rows.sort(reverse=True)
    return rows, missing


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="trace directories or segment files")
    ap.add_argument("--samples", help="a loadgen --samples file of the same run")
    ap.add_argument("--slowest", type=int, default=10, help="requests listed (10)")
    args = ap.parse_args()
    times = route_times(args.paths)
    ms = sorted((w - r) / 1e6 for pairs in times.values() for r, w in pairs)
    if not ms:
        sys.exit("no route query with its answer in the trace")
    print(f"{len(ms)} route queries, read to answer written: median {ms[len(ms) // 2]:.3f} ms, "
          f"p99 {ms[int(len(ms) * 0.99)]:.3f} ms, p999 {ms[int(len(ms) * 0.999)]:.3f} ms, "
          f"max {ms[-1]:.3f} ms")
    if args.samples:
        rows, missing = split_samples(args.samples, times)
        if not rows:
            sys.exit(f"none of {args.samples}'s requests is in the trace")
        print(f"{len(rows)} of loadgen's requests found in the trace ({missing} not); "
              "slowest, ms:")
        print(f"{'total':>8} {'send->read':>11} {'read->write':>12} {'write->answer':>14}")
        for row in rows[:args.slowest]:
            print(f"{row[0]:8.3f} {row[1]:11.3f} {row[2]:12.3f} {row[3]:14.3f}")
        for i, name in ((1, "send->read"), (2, "read->write"), (3, "write->answer")):
            part = sorted(r[i] for r in rows)
            print(f"{name}: p99 {part[int(len(part) * 0.99)]:.3f} ms, max {part[-1]:.3f} ms")


if __name__ == "__main__":
    main()
