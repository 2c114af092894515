"""End to end: synthesize a trace of about --gb gigabytes, analyze it with
`rmq trace analyze` on Spark (local[2] by default), print the times.

Issue 5's target: a 1 GB synthetic trace analyzed end to end on this 2-core machine
in at most 60 s.

    PYTHONPATH=src .venv/bin/python bench/trace_e2e.py [--gb 1] [--master local[2]] [--keep]

The default mix is registration-heavy (8 brokers x 10,000 topics: ~156,000 frames per
GB); a route-query-heavy GB (~3.2 million frames, as in test_bench_analyze.py):

    ... bench/trace_e2e.py --brokers 2 --topics 100 --clients 2000 --minutes 38
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from rmq.trace.synth import synthesize

# One broker's registration body with 10,000 topics is ~1.7 MB; a 60-minute trace of
# 8 brokers and 100 clients is ~1.6 GB. Scale the minutes to the size asked for.
MB_PER_BROKER_MINUTE = 3.4


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gb", type=float, default=1.0)
    p.add_argument("--brokers", type=int, default=8)
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--topics", type=int, default=10_000)
    p.add_argument("--minutes", type=float, default=None,
                   help="the trace's virtual minutes (default: scaled to --gb for "
                        "the registration-heavy default mix)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--keep", action="store_true", help="keep the trace and the output")
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="rmq-trace-e2e-")
    try:
        minutes = args.minutes or args.gb * 1000 / (MB_PER_BROKER_MINUTE * args.brokers)
        t = time.monotonic()
        m = synthesize(os.path.join(work, "trace"), brokers=args.brokers, clients=args.clients,
                       minutes=minutes, topics=args.topics, seed=1)
        synth_s = time.monotonic() - t
        print(f"synthesized {m['bytes'] / 1e9:.2f} GB, {m['frames']:,} frames in "
              f"{len(m['files'])} segments ({minutes:.0f} virtual minutes) in {synth_s:.1f} s",
              flush=True)
        out = os.path.join(work, "out")
        t = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "rmq", "trace", "analyze",
                            os.path.join(work, "trace"), "--out", out, "--master", args.master],
                           capture_output=True, text=True)
        analyze_s = time.monotonic() - t
        if r.returncode != 0:
            print(r.stdout[-2000:], r.stderr[-4000:], file=sys.stderr)
            return 1
        summary = json.load(open(os.path.join(out, "summary.json")))
        frames = summary.get("frames")
        ok = frames == m["frames"]
        print(f"analyzed end to end in {analyze_s:.1f} s ({args.master}): {frames:,} frames "
              f"({'all' if ok else 'NOT all'} of them), "
              f"{m['bytes'] / 1e6 / analyze_s:,.0f} MB/s, {m['frames'] / analyze_s:,.0f} frames/s")
        print(f"target: 1 GB in <= 60 s: {'yes' if analyze_s * 1e9 / m['bytes'] <= 60 else 'no'}"
              f" ({analyze_s * 1e9 / m['bytes']:.1f} s per GB)")
        if args.keep:
            print(f"kept: {work}")
        return 0 if ok else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
