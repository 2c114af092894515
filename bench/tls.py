"""TLS route throughput vs plain: W1 route queries at 4 connections x 16 in flight,
over TLS and over plain TCP, against one NameServer started with
``tls.server.mode=permissive`` (both kinds of client on its one port).

Starts ``python -m rmq namesrv`` (see bench/load.py's Server) with a certificate
made by ``openssl`` in a temporary directory, registers W1 (8 brokers x 10,000
topics through rmq.brokersim, their connections kept open so the routes stay),
then runs bench/loadgen-tls (bench/loadgen.c built with -DLOADGEN_TLS) with and
without ``--tls``, alternating, ``--rounds`` times. Routes/s counts only answers
with code 0 (a route); any other answer is reported as an error and fails the run.

    PYTHONPATH=src .venv/bin/python bench/tls.py            # ~1 min
    PYTHONPATH=src .venv/bin/python bench/tls.py --quick    # ~20 s (a smoke run)

The server runs on the I/O engine (serverEngine=c, the default: TLS on its threads,
src/_core/tls.c) or, with ``--asyncio``, on the asyncio server (rmq.namesrv.tlsconn);
``--threads`` sets serverIoThreads.
"""

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rmq import brokersim  # noqa: E402
import load  # noqa: E402


@contextlib.contextmanager
def deadline(seconds):
    """load.Deadline raised in the main thread after ``seconds`` (SIGALRM)."""
    def on_alarm(signum, frame):
        raise load.Deadline(f"--deadline {seconds:g} s reached")
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def make_certificate(workdir):
    """A self-signed certificate for 127.0.0.1 (loadgen does not verify it)."""
    cert, key = Path(workdir) / "server.crt", Path(workdir) / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def quiet_connections(server, count, quiet):
    """RSS with ``count`` TLS connections open, each after one route query, right after
    and once they have been quiet ``quiet`` seconds (the engine gives a quiet TLS
    connection's record buffers back: TLS_TRIM in engine.c)."""
    import asyncio
    import ssl
    from rmq import RemotingCommand, encode_frame
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    host, port = server.address.rsplit(":", 1)

    async def main():
        before = load.proc_status(server.pid)["VmRSS"]
        conns = []
        query = encode_frame(RemotingCommand.request(105, {"topic": "TopicTest"}))
        for _ in range(count):
            r, w = await asyncio.open_connection(host, int(port), ssl=ctx)
            w.write(query)
            size = int.from_bytes(await r.readexactly(4), "big")
            await r.readexactly(size)
            conns.append(w)
        opened = load.proc_status(server.pid)["VmRSS"]
        await asyncio.sleep(quiet)
        later = load.proc_status(server.pid)["VmRSS"]
        for w in conns:
            w.close()
        return {"connections": count, "rss_before_mib": before, "rss_open_mib": opened,
                "rss_quiet_mib": later, "quiet_s": quiet}
    return asyncio.run(main())


def routes_per_second(r):
    """Answers with code 0 per second of the measured window."""
    ok = r["requests"] - r["errors"]
    return ok / r["seconds"] if r["seconds"] else 0.0


def run(args):
    binary = load.build_loadgen(args.rebuild, tls=True)
    pin_server = pin_client = None
    if args.pin and len(os.sched_getaffinity(0)) >= 2:
        pin_client, pin_server = sorted(os.sched_getaffinity(0))[:2]
        os.sched_setaffinity(0, {pin_client})
    workdir = tempfile.mkdtemp(prefix="rmq-tls-")
    cert, key = make_certificate(workdir)
    properties = {"tls.server.mode": "permissive", "tls.server.certPath": cert,
                  "tls.server.keyPath": key, "tls.config.file": ""}
    if args.asyncio:
        properties["serverEngine"] = "asyncio"
    else:
        properties.update(serverEngine="c", serverIoThreads=str(args.threads))
    server = load.Server(workdir, "info", pin_server, properties=properties)
    topics = brokersim.topic_names(args.topics)
    brokers = []
    report = {"args": vars(args).copy(), "env": load.describe_server_python(server.env),
              "runs": []}
    try:
        server.start()
        brokers = brokersim.register_brokers(server.address, args.brokers, topics)
        route, _ = load.query_route(server.address, topics[len(topics) // 2])
        if len(route["brokerDatas"]) != args.brokers:
            raise load.BenchError(f"route has {len(route['brokerDatas'])} brokers")
        # which network layer serves (a TLS configuration the engine cannot serve
        # falls back to asyncio, and the log says so)
        listening = [line for line in server.log_tail(1_000_000).splitlines()
                     if "NameServer listening on" in line]
        report["server"] = listening[-1].split("(", 1)[-1].rstrip(")") if listening else "?"
        load.log(f"NameServer {server.address} (permissive, {report['server']}): "
                 f"{args.brokers} brokers x {args.topics} topics registered")
        for i in range(args.rounds):
            for mode in ("plain", "tls"):
                r = load.run_loadgen(server, label=f"{mode}_{i}", conns=args.conns,
                                     inflight=args.inflight, duration=args.duration,
                                     warmup=args.warmup, topics=args.topics,
                                     pin_cpu=pin_client, binary=binary,
                                     extra=["--tls"] if mode == "tls" else [])
                if r["exit"] != 0 or r["errors"] or r["errors_all"] or r["tls"] != (mode == "tls"):
                    raise load.BenchError(f"loadgen {mode}: exit {r['exit']}, errors "
                                          f"{r['errors']} {r.get('error_codes')}")
                r["mode"] = mode
                r["routes_per_s"] = round(routes_per_second(r), 1)
                report["runs"].append(r)
                load.log(f"  {mode:5} {r['routes_per_s']:>12,.0f} routes/s  p50 {r['p50_us']} us"
                         f"  p99 {r['p99_us']} us  server CPU {r['server_cpu_us_per_req']} us/req")
        if args.quiet_conns:
            q = report["quiet"] = quiet_connections(server, args.quiet_conns, args.quiet_s)
            load.log(f"  {q['connections']} TLS connections, one query each: RSS "
                     f"{q['rss_before_mib']:.1f} -> {q['rss_open_mib']:.1f} MiB, after "
                     f"{q['quiet_s']:g} s quiet {q['rss_quiet_mib']:.1f} MiB")
        if not server.alive():
            raise load.BenchError("the NameServer died:\n" + server.log_tail())
    finally:
        brokersim.close_all(brokers)
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return report


def print_table(rep, json_out=None):
    """The runs as a table (and the whole report as JSON to ``json_out``)."""
    if json_out:
        Path(json_out).write_text(json.dumps(rep, indent=2, sort_keys=True) + "\n")
    env = rep["env"]
    a = rep["args"]
    print(f"\nW1 routes, {a['conns']} conns x {a['inflight']} in flight, {a['duration']:g} s "
          f"per run, one permissive port: {env['implementation']} core, "
          f"{rep.get('server', env['loop'])}, python {env['python']}")
    print(f"{'':6} {'routes/s':>12} {'p50 us':>8} {'p99 us':>8} {'srv CPU us/req':>15}")
    best = {}
    for r in rep["runs"]:
        print(f"{r['mode']:6} {r['routes_per_s']:>12,.0f} {r['p50_us']:>8.1f} "
              f"{r['p99_us']:>8.1f} {r['server_cpu_us_per_req']:>15.2f}")
        best[r["mode"]] = max(best.get(r["mode"], 0), r["routes_per_s"])
    q = rep.get("quiet")
    if q:
        print(f"{q['connections']} quiet TLS connections: RSS {q['rss_before_mib']:.1f} -> "
              f"{q['rss_open_mib']:.1f} MiB open, {q['rss_quiet_mib']:.1f} MiB after "
              f"{q['quiet_s']:g} s quiet")
    if best.get("plain"):
        pairs = [(rep["runs"][i], rep["runs"][i + 1]) for i in range(0, len(rep["runs"]) - 1, 2)]
        rounds = " / ".join(f"{t['routes_per_s'] / p['routes_per_s']:.2f}" for p, t in pairs
                            if p["routes_per_s"])
        print(f"TLS / plain (best of each): {best['tls'] / best['plain']:.0%}; "
              f"per round: {rounds}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2 s runs, 1 round (a smoke run)")
    p.add_argument("--duration", type=float, help="measured seconds per run (10; quick 2)")
    p.add_argument("--warmup", type=float, help="seconds before measuring (2; quick 0.5)")
    p.add_argument("--rounds", type=int, help="plain/TLS pairs (3; quick 1)")
    p.add_argument("--brokers", type=int, default=8)
    p.add_argument("--topics", type=int, default=10000)
    p.add_argument("--conns", type=int, default=4)
    p.add_argument("--inflight", type=int, default=16)
    p.add_argument("--pin", action="store_true",
                   help="pin the server to one CPU and loadgen + this script to another")
    p.add_argument("--asyncio", action="store_true",
                   help="serve with the asyncio server (serverEngine=asyncio)")
    p.add_argument("--threads", type=int, default=0,
                   help="the engine's I/O threads (serverIoThreads; 0: one per core)")
    p.add_argument("--quiet-conns", type=int, default=0,
                   help="then open this many TLS connections (one query each) and report "
                        "the server's RSS with them open and after --quiet-s quiet")
    p.add_argument("--quiet-s", type=float, default=12.0)
    p.add_argument("--rebuild", action="store_true", help="rebuild bench/loadgen-tls")
    p.add_argument("--json-out", help="write the JSON report to this file too")
    p.add_argument("--deadline", type=float, default=600, help="abort after this many seconds")
    args = p.parse_args(argv)
    for name, normal, quick in (("duration", 10.0, 2.0), ("warmup", 2.0, 0.5),
                                ("rounds", 3, 1)):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else normal)

    try:
        with deadline(args.deadline):
            rep = run(args)
    except (load.BenchError, load.Deadline, OSError, brokersim.RegistrationError,
            subprocess.SubprocessError) as e:
        load.log(f"tls.py: {type(e).__name__}: {e}")
        return 1
    print_table(rep, args.json_out)
    return 0

if __name__ == "__main__":
    sys.exit(main())
