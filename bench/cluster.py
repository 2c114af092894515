"""The trace job on a Spark standalone cluster of this machine (issue 17): end to end
``rmq trace analyze`` time of one synthesized trace on 1 and on 2 workers (one core
each) with the packed environment shipped as spark.archives, on 2 workers with the
executors on this Python instead (no archive: what shipping costs at start), and on
``local[2]``. Decode throughput is the trace's bytes over the job's own seconds
(summary.json); "start" is the wall time around it (the JVM, the executors, the
archive's unpacking).

    .venv/bin/python bench/cluster.py                 # ~256 MB trace, ~5 min
    .venv/bin/python bench/cluster.py --minutes 2     # a small one
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from spark_cluster import StandaloneCluster, clean_env, pack_environment, run  # noqa: E402


def analyze(trace, out, master, *extra, env=None):
    started = time.monotonic()
    run([sys.executable, "-m", "rmq", "trace", "analyze", trace, "--out", out,
         "--master", master, *extra], timeout=1800, env=env or clean_env())
    wall = time.monotonic() - started
    summary = json.loads((Path(out) / "summary.json").read_text())
    return {"wall_s": round(wall, 1), "job_s": summary["seconds"], "frames": summary["frames"],
            "codec": summary["spark"]["executor_implementation"]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=int, default=10, help="synth --minutes (10: ~256 MB)")
    p.add_argument("--clients", type=int, default=2000)
    args = p.parse_args(argv)
    d = Path(tempfile.mkdtemp(prefix="rmq-cluster-bench-"))
    trace = d / "trace"
    run([sys.executable, "-m", "rmq", "trace", "synth", "--out", trace, "--brokers", 2,
         "--topics", 100, "--clients", args.clients, "--minutes", args.minutes, "--seed", 1,
         "--start", 1700000000], timeout=1800)
    size = sum(f.stat().st_size for f in trace.iterdir())
    archive, pack_s = pack_environment(d / "env")
    print(f"trace {size / 1e6:.0f} MB; packed environment {archive.stat().st_size / 1e6:.1f} MB "
          f"in {pack_s:.1f} s", flush=True)
    shipped = ["--conf", f"spark.archives={archive}#environment",
               "--conf", "spark.pyspark.python=./environment/bin/python"]
    rows = []
    for workers in (1, 2):
        with StandaloneCluster(d / f"cluster{workers}", workers=workers) as c:
            rows.append((f"{workers} worker(s), shipped env",
                         analyze(trace, d / f"out{workers}", c.url, *shipped)))
            if workers == 2:
                rows.append(("2 workers, this Python", analyze(
                    trace, d / "out-here", c.url, env=clean_env(PYSPARK_PYTHON=sys.executable))))
    rows.append(("local[2]", analyze(trace, d / "out-local", "local[2]",
                                     env=clean_env(PYSPARK_PYTHON=sys.executable))))
    for name, r in rows:
        print(f"{name:28} job {r['job_s']:6.1f} s ({size / 1e6 / r['job_s']:6.1f} MB/s), "
              f"wall {r['wall_s']:6.1f} s, {r['frames']:,} frames, {r['codec']}", flush=True)
    print(json.dumps({"trace_bytes": size, "pack_s": round(pack_s, 2),
                      "runs": dict(rows)}))


if __name__ == "__main__":
    main()
