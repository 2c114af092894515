"""Scale benchmarks of the rmq NameServer (issue 15), from separate processes over 127.0.0.1.

Each workload starts its own ``python -m rmq namesrv`` (load.py's Server: this
interpreter, a free port, a temporary work directory, a namesrv.properties built
from the defaults below and ``--set KEY=VALUE``) and stops it at the end.

- ``w3``: 300 brokers x the same 10,000 topics (every topic on every broker: route
  width 300). ``w4``: 1,000 brokers x 1,000 topics, topic i on brokers
  ``(i*8 + j) % 1000`` for j in 0..7 (route width 8, ~8 topics per broker). For both:
  every broker on its own connection, kept open (rmq.brokersim), registered one
  after the other (first round), then every broker re-registers with a new DataVersion
  counter and the same topics (re-registration, cache cold); route queries with
  bench/loadgen round-robin over every topic at 4 connections x 16 in flight, then at
  1,000 connections x 1; a second re-registration round (cache warm) and a short
  query phase after it (does a new DataVersion with the same topics empty the cache?).
  RSS after registration, after one full pass of queries and at the end; VmHWM.
  After each query phase the server gets SIGUSR1 and logs one line
  ``route cache: hits=H misses=M evictions=E bytes=B entries=N budget=X``; the phase's
  hit rate is the difference between two such lines (None when the server logs none).
- ``expiry``: 10,000 brokers (two topics each, 100 per connection), 1,000 of them on
  their own connections with a heartbeatTimeoutMillis chosen so that their deadlines
  fall together; scanNotActiveBrokerInterval 1000 ms. While they expire, loadgen at a
  fixed rate (open loop) queries the topics of the brokers that stay; the server log
  dates the drops, and the answers whose time in flight overlaps the scan window (from
  the deadline to the last logged drop) give its p99 and max (target: none above 5 ms).

Prints a table and one JSON line (also written to --json-out). Bounded: every step has
a timeout, --deadline caps the whole run, the server is stopped whatever happens.

    .venv/bin/python bench/scale.py --workload w3            # ~45 s
    .venv/bin/python bench/scale.py --workload w4            # ~30 s
    .venv/bin/python bench/scale.py --workload expiry        # ~25 s
    .venv/bin/python bench/scale.py --quick                  # all three, small: ~30 s
    .venv/bin/python bench/scale.py --workload w3 --set routeCacheBytes=67108864
"""

import argparse
import json
import os
import re
import resource
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rmq import brokersim  # noqa: E402
import load  # noqa: E402
from load import (BenchError, Deadline, Server, build_loadgen, describe_server_python,  # noqa: E402
                  log, proc_status, query_route, run_loadgen, server_env, summarize)
from rmq.namesrv.config import NamesrvConfig  # noqa: E402

WIDTH_W4 = 8
#: Set for every workload unless --set names them: the simulated brokers sit silent on
#: their connections between rounds (a real broker re-registers every 30 s), and the
#: idle-connection close must not drop them mid-run (their expiry: --broker-timeout-ms).
DEFAULT_PROPERTIES = {"serverChannelMaxIdleTimeSeconds": "3600"}

CACHE_LINE = re.compile(r"route cache: (.*)$", re.M)
CACHE_FIELD = re.compile(r"(\w+)=(\S+)")
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")
EXPIRED = "broker expired: "
CLOSED_EXPIRED = "of expired broker "
CONN_REMOVED = "broker connection closed, removed: "
#: loadgen --samples: due time (realtime ns), latency from it, send lag (ns), code, opaque,
#: local port, 0
SAMPLE = struct.Struct("<qIIiiII")


# ---------------------------------------------------------------- server side


def wind_up(server, brokers, workdir, keep, out, tail):
    """Close the brokers' connections, stop the server (its last ``tail`` log lines in
    ``out``), remove the work directory unless it is kept."""
    brokersim.close_all(brokers)
    server.stop()
    out["log_tail"] = server.log_tail(tail)
    if keep:
        log(f"work directory kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)

def properties_for(args, needed_connections):
    """The namesrv.properties of a run, and the notes saying what was raised and why."""
    props = dict(DEFAULT_PROPERTIES)
    props.update(args.set)
    notes = []
    default_max = NamesrvConfig().maxConnections
    if "maxConnections" not in props and needed_connections > default_max:
        props["maxConnections"] = str(needed_connections + 1000)
        notes.append(f"maxConnections raised to {props['maxConnections']} "
                     f"(default {default_max}, this run opens {needed_connections})")
    else:
        notes.append(f"maxConnections {props.get('maxConnections', default_max)} "
                     f"(this run opens up to {needed_connections})")
    return props, notes


def check_fd_limit(needed):
    """This script holds the broker connections, and loadgen and the server inherit its
    limit: raise the soft RLIMIT_NOFILE (within the hard one) when it is short."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = needed + 256
    if soft >= want:
        return f"fd limit {soft}"
    if hard == resource.RLIM_INFINITY or hard >= want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        return f"fd limit raised from {soft} to {want}"
    raise BenchError(f"fd limit {soft} (hard {hard}) < the {want} descriptors this run needs")


def catches_sigusr1(pid):
    """True if the process has a SIGUSR1 handler (SigCgt): sending it to a server
    without one would kill it."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGUSR1 - 1)))
    return False


def cache_lines(server):
    try:
        text = server.log_path.read_text(errors="replace")
    except OSError:
        return []
    out = []
    # Every key=value of the line, numbers as int: the server may add counters.
    for m in CACHE_LINE.finditer(text):
        fields = {k: int(v) if re.fullmatch(r"-?\d+", v) else v
                  for k, v in CACHE_FIELD.findall(m.group(1))}
        if isinstance(fields.get("hits"), int) and isinstance(fields.get("misses"), int):
            out.append(fields)
    return out


def cache_stats(server, timeout=5.0):
    """SIGUSR1 to the server, then its new ``route cache:`` line parsed (counts since
    start), or None when the server has no handler or logs no line in time."""
    if not server.alive() or not catches_sigusr1(server.pid):
        return None
    seen = len(cache_lines(server))
    os.kill(server.pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = cache_lines(server)
        if len(lines) > seen:
            return lines[-1]
        time.sleep(0.05)
    log("no 'route cache:' line after SIGUSR1")
    return None


def hit_rate(before, after):
    if before is None or after is None:
        return None
    hits, misses = after["hits"] - before["hits"], after["misses"] - before["misses"]
    return round(hits / (hits + misses), 4) if hits + misses else None


def log_time(line):
    """The log line's asctime as epoch seconds (the server's local time, as this host's)."""
    m = LOG_TIME.match(line)
    if not m:
        return None
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000


def dropped_brokers(server):
    """(times of 'broker expired' lines, of the expired brokers' connection closes, of
    brokers removed with a closed connection), from the server log."""
    expired, closes, removed = [], [], []
    try:
        lines = server.log_path.read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    for line in lines:
        for needle, out in ((EXPIRED, expired), (CLOSED_EXPIRED, closes), (CONN_REMOVED, removed)):
            if needle in line and log_time(line) is not None:
                out.append(log_time(line))
    return expired, closes, removed


def machine_busy_seconds():
    """CPU seconds all CPUs spent busy since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal: all but idle and iowait
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def loadgen(server, **kwargs):
    """run_loadgen, plus the share of a CPU that other processes (neither the server,
    nor loadgen, nor this script) used meanwhile: the machine is shared, and what else
    ran there is what to look at first when a figure moves."""
    busy0, self0, t0 = machine_busy_seconds(), time.process_time(), time.monotonic()
    r = run_loadgen(server, **kwargs)
    wall = time.monotonic() - t0
    other = (machine_busy_seconds() - busy0 - r["server_cpu_s"] - r["loadgen_cpu_s"]
             - (time.process_time() - self0))
    r["other_cpu_pct"] = round(max(other, 0.0) * 100 / wall) if wall > 0 else None
    return r


def rss(server):
    s = proc_status(server.pid)
    return round(s["VmRSS"], 1), round(s["VmHWM"], 1)


# ---------------------------------------------------------------- W3 / W4

def layout(workload, brokers, topics):
    """Per broker, the indices of its topics and, per topic, the position of the broker
    in the topic's route (0 .. width-1); and the route width of every topic."""
    if workload == "w3":
        return [(range(topics), [b] * topics) for b in range(brokers)], brokers
    width = min(WIDTH_W4, brokers)
    per = [([], []) for _ in range(brokers)]
    for i in range(topics):
        for j in range(width):
            idx, pos = per[(i * width + j) % brokers]
            idx.append(i)
            pos.append(j)
    return per, width


def queue_numbers(idx, pos, distinct):
    """8 queues everywhere; with ``distinct``, 9 instead on the topic's j-th broker when
    bit j of the topic's index is set (j < 20), so that no two topics have the same route
    answer (the answer names no topic: topics with the same brokers and queues answer
    the same bytes)."""
    if not distinct:
        return 8
    return [8 + ((i >> j) & 1 if j < 20 else 0) for i, j in zip(idx, pos)]


def register_round(brokers, bodies):
    times = []
    for b, body in zip(brokers, bodies):
        seconds, _ = b.register(body)
        times.append(seconds)
    return summarize(times)


def run_routes(workload, args, report):
    nb = args.brokers or (300 if workload == "w3" else 1000)
    nt = args.topics or (10_000 if workload == "w3" else 1000)
    names = brokersim.topic_names(nt)
    per, width = layout(workload, nb, nt)
    t = time.perf_counter()
    rounds = [[], [], []]
    encoded = {}            # the same topics and queues: one body, shared by the brokers
    for idx, pos in per:
        queues = queue_numbers(idx, pos, args.distinct_routes)
        key = (tuple(idx), tuple(queues) if isinstance(queues, list) else queues)
        if key not in encoded:
            topics = [names[i] for i in idx]
            encoded[key] = [brokersim.encode_body(topics, c, queues=queues) for c in (1, 2, 3)]
        for r, body in zip(rounds, encoded[key]):
            r.append(body)
    log(f"{workload}: {nb} brokers x {nt} topics, width {width}; bodies encoded in "
        f"{time.perf_counter() - t:.1f} s")
    big = max(args.conns_many, 4)
    needed = nb + big + 16
    out = {"brokers": nb, "topics": nt, "width": width, "distinct_routes": args.distinct_routes,
           "distinct_bodies": len(encoded),
           "body_bytes_max": max(len(b) for b in rounds[0]),
           "fd": check_fd_limit(needed)}
    props, notes = properties_for(args, needed)
    out["properties"], out["notes"] = props, notes
    workdir = tempfile.mkdtemp(prefix=f"rmq-scale-{workload}-")
    server = Server(workdir, args.server_log_level, properties=props)
    brokers = []
    try:
        server.start()
        out["rss_start_mib"] = rss(server)[0]
        log(f"NameServer {server.address} pid {server.pid}; " + "; ".join(notes))
        for i in range(nb):
            brokers.append(brokersim.SimBroker(
                server.address, i, timeout=args.step_timeout,
                heartbeat_timeout_ms=args.broker_timeout_ms or None).connect())

        t = time.perf_counter()
        out["register_first"] = register_round(brokers, rounds[0])
        out["register_first"]["seconds"] = round(time.perf_counter() - t, 2)
        out["rss_after_register_mib"] = rss(server)[0]
        route, route_len = query_route(server.address, names[nt // 2])
        if len(route["brokerDatas"]) != width:
            raise BenchError(f"{names[nt // 2]} has {len(route['brokerDatas'])} brokers, "
                             f"expected {width}")
        out["route_body_bytes"] = route_len
        log(f"  first round: median {out['register_first']['median_ms']} ms, max "
            f"{out['register_first']['max_ms']} ms; route answer {route_len} B; RSS "
            f"{out['rss_after_register_mib']} MiB")

        out["register_again"] = register_round(brokers, rounds[1])
        out["rss_after_reregister_mib"] = rss(server)[0]
        log(f"  re-registration (new DataVersion): median "
            f"{out['register_again']['median_ms']} ms, max {out['register_again']['max_ms']} ms")

        cache = cache_stats(server)
        out["cache_start"] = cache
        phases = [("q16", 4, 16, args.duration, args.warmup),
                  ("q1k", args.conns_many, 1, args.duration, args.warmup)]
        for key, conns, inflight, duration, warmup in phases:
            log(f"  routes: {conns} connections x {inflight} in flight, {duration:g} s "
                f"(+{warmup:g} s warmup)")
            r = loadgen(server, label=f"{workload}_{key}", conns=conns, inflight=inflight,
                        duration=duration, warmup=warmup, topics=nt)
            after = cache_stats(server)
            r["cache"], r["hit_rate"] = after, hit_rate(cache, after)
            cache = after
            r["rss_mib"], r["hwm_mib"] = rss(server)
            r["full_pass"] = r["sent"] >= nt
            out[key] = r
            log(f"    {r['rps']:,.0f} req/s, p50 {r['p50_us']} us, p99 {r['p99_us']} us, "
                f"non-zero codes {r['errors_all']}, hit rate {r['hit_rate']}, "
                f"RSS {r['rss_mib']} MiB")
        out["rss_after_pass_mib"] = out["q16"]["rss_mib"]

        out["register_warm"] = register_round(brokers, rounds[2])
        log(f"  re-registration, cache warm: median {out['register_warm']['median_ms']} ms, "
            f"max {out['register_warm']['max_ms']} ms")
        r = loadgen(server, label=f"{workload}_after_reregister", conns=4, inflight=16,
                    duration=args.after_duration, warmup=0, topics=nt)
        after = cache_stats(server)
        r["cache"], r["hit_rate"] = after, hit_rate(cache, after)
        out["q16_after_reregister"] = r
        log(f"    after it: {r['rps']:,.0f} req/s, hit rate {r['hit_rate']}")

        route, _ = query_route(server.address, names[nt // 2])
        expired, _, removed = dropped_brokers(server)
        out["brokers_dropped"] = len(expired) + len(removed)
        if len(route["brokerDatas"]) != width or out["brokers_dropped"]:
            raise BenchError(f"brokers dropped during the run ({out['brokers_dropped']}); "
                             f"route width {len(route['brokerDatas'])}:\n" + server.log_tail())
        out["rss_end_mib"], out["hwm_end_mib"] = rss(server)
        if not server.alive():
            raise BenchError("the NameServer died:\n" + server.log_tail())
    finally:
        wind_up(server, brokers, workdir, args.keep, out, 5)
    report[workload] = out


# ---------------------------------------------------------------- expiry

def expiry_body(i):
    return brokersim.encode_body(brokersim.topic_names(2, start=2 * i), 1, queues=4)


def read_samples(path):
    """[(due s, latency from due s, latency from send s, code)] of loadgen --samples."""
    data = Path(path).read_bytes()
    data = data[:len(data) - len(data) % SAMPLE.size]
    return [(t / 1e9, lat / 1e9, (lat - min(lag, lat)) / 1e9, code)
            for t, lat, lag, code, *_ in SAMPLE.iter_unpack(data)]


def _pct(sorted_values, p):
    return sorted_values[min(len(sorted_values) - 1, max(0, -(-p * len(sorted_values) // 100) - 1))]


def window_stats(samples):
    """Latency from the due time (what a client waiting on a schedule sees) and from the
    send (the server's part: a server stall shows in both, the generator's own
    lateness only in the first)."""
    if not samples:
        return {"n": 0}
    due = sorted(s[1] * 1e6 for s in samples)
    sent = sorted(s[2] * 1e6 for s in samples)
    return {"n": len(due), "p50_us": round(statistics.median(due), 1),
            "p99_us": round(_pct(due, 99), 1), "max_us": round(due[-1], 1),
            "over_1ms": sum(v > 1000 for v in due), "over_5ms": sum(v > 5000 for v in due),
            "sent_p99_us": round(_pct(sent, 99), 1), "sent_max_us": round(sent[-1], 1),
            "sent_over_5ms": sum(v > 5000 for v in sent),
            "errors": sum(s[3] != 0 for s in samples)}


def run_expiry(args, report):
    n, k, per_conn = args.expiry_brokers, args.expiring, args.per_conn
    if not 0 < k < n:
        raise BenchError("--expiring must be between 0 and --expiry-brokers")
    staying = n - k
    conns = -(-staying // per_conn) + -(-k // per_conn)
    needed = conns + args.expiry_conns + 16
    interval = args.scan_interval_ms
    out = {"brokers": n, "expiring": k, "per_connection": per_conn, "connections": conns,
           "scan_interval_ms": interval, "rate": args.expiry_rate,
           "fd": check_fd_limit(needed)}
    props, notes = properties_for(args, needed)
    props.setdefault("scanNotActiveBrokerInterval", str(interval))
    out["properties"], out["notes"] = props, notes
    bodies = [expiry_body(i) for i in range(n)]
    workdir = tempfile.mkdtemp(prefix="rmq-scale-expiry-")
    server = Server(workdir, args.server_log_level, properties=props)
    owners = []
    try:
        server.start()
        log(f"NameServer {server.address} pid {server.pid}; " + "; ".join(notes))
        # The staying brokers first; an expiring broker never shares a connection with
        # a staying one: the scan closes an expired broker's connection, which drops
        # every broker registered over it.
        times = []
        t0 = time.perf_counter()
        for i in range(n):
            if i % per_conn == 0 or i == staying:
                owner = brokersim.SimBroker(server.address, i, timeout=args.step_timeout,
                                             heartbeat_timeout_ms=args.broker_timeout_ms or None)
                owners.append(owner.connect())
                b = owner
            else:
                b = owner.sibling(i, heartbeat_timeout_ms=args.broker_timeout_ms or None)
            if i == staying:
                # One deadline for all the expiring brokers: each one's timeout is what is
                # left until it, so that one scan drops them together.
                target = time.monotonic() + args.expire_after
            if i >= staying:
                b.heartbeat_timeout_ms = int((target - time.monotonic()) * 1000)
            seconds, _ = b.register(bodies[i])
            times.append(seconds)
        out["register"] = dict(summarize(times), seconds=round(time.perf_counter() - t0, 2))
        out["rss_after_register_mib"] = rss(server)[0]
        left = target - time.monotonic()
        if left < 1.5:
            raise BenchError(f"the expiring brokers' registrations took too long ({left:.1f} s "
                             "left before their deadline): raise --expire-after")
        target_epoch = time.time() + (target - time.monotonic())
        log(f"  {n} brokers registered in {out['register']['seconds']} s (median "
            f"{out['register']['median_ms']} ms); {k} expire in {left:.1f} s")

        samples_path = Path(workdir) / "samples.bin"
        duration = left + 2 * interval / 1000 + args.expiry_tail
        r = loadgen(server, label="expiry", conns=args.expiry_conns,
                        inflight=args.expiry_inflight, duration=duration, warmup=0.5,
                        topics=2 * staying, rate=args.expiry_rate,
                        extra=["--samples", samples_path])
        out["loadgen"] = {key: r[key] for key in ("rps", "requests", "errors", "errors_all",
                                                  "timeouts", "lost", "p50_us", "p99_us",
                                                  "max_us", "over_1ms", "over_10ms",
                                                  "send_lag_p99_us", "send_lag_max_us",
                                                  "other_cpu_pct")}
        expired, closes, removed = dropped_brokers(server)
        out["dropped"] = len(expired)
        out["connections_closed"] = len(closes)
        out["removed_with_connection"] = len(removed)
        if len(expired) != k:
            raise BenchError(f"{len(expired)} brokers expired, expected {k}:\n"
                             + server.log_tail())
        first, last = min(expired), max(expired + closes + removed)
        out["first_drop_after_deadline_ms"] = round((first - target_epoch) * 1000)
        out["drop_log_span_ms"] = round((last - first) * 1000)
        # The scan window: from the deadline (no scan drops them before it, and the scans
        # before it find nothing due) to the last drop or connection-close line (the
        # drops are logged after the scan, the closes after the drops). The server's
        # deadline is a little later than this client's, never earlier. Every answer in
        # flight at any moment of it counts.
        lo, hi = target_epoch, last + args.window_margin
        samples = read_samples(samples_path)
        inside = [s for s in samples if s[0] <= hi and s[0] + s[1] >= lo]
        outside = [s for s in samples if not (s[0] <= hi and s[0] + s[1] >= lo)]
        out["window_ms"] = round((hi - lo) * 1000)
        out["window"] = window_stats(inside)
        out["outside"] = window_stats(outside)
        # The shape of the stall: the slowest answer sent in each step from a second
        # before the deadline to a second after the last drop line.
        step = args.series_ms / 1000
        series = {}
        for t, lat, _sent, _code in samples:
            if target_epoch - 1 <= t <= last + 1:
                i = int((t - target_epoch + 1) // step)
                series[i] = max(series.get(i, 0), lat)
        out["series_step_ms"] = args.series_ms
        out["series_max_us"] = [round(series.get(i, 0) * 1e6)
                                for i in range(int((last + 2 - target_epoch) // step) + 1)]
        out["slowest"] = [{"at_ms_from_first_drop": round((s[0] - first) * 1000, 1),
                           "us": round(s[1] * 1e6, 1), "from_send_us": round(s[2] * 1e6, 1)}
                          for s in sorted(samples, key=lambda s: -s[1])[:5]]
        out["rss_end_mib"], out["hwm_end_mib"] = rss(server)
        log(f"  {k} dropped {out['first_drop_after_deadline_ms']} ms after their deadline "
            f"(log span {out['drop_log_span_ms']} ms); window: {out['window']}")
        if not server.alive():
            raise BenchError("the NameServer died:\n" + server.log_tail())
    finally:
        wind_up(server, owners, workdir, args.keep, out, 3)
    report["expiry"] = out


# ---------------------------------------------------------------- report

def fmt(v, spec=""):
    return "-" if v is None else format(v, spec)


def print_table(rep):
    env = rep["env"]
    print()
    print(f"rmq NameServer scale benchmark: {env['implementation']} core, {env['loop']}, "
          f"python {env['python']}, {env['cpus']} CPUs ({env['cpu']})")
    for wl in ("w3", "w4"):
        w = rep.get(wl)
        if not w:
            continue
        print()
        print(f"{wl.upper()}: {w['brokers']} brokers x {w['topics']} topics, route width "
              f"{w['width']}{', distinct answers' if w['distinct_routes'] else ''} "
              f"(answer {w['route_body_bytes']:,} B, largest register body "
              f"{w['body_bytes_max']:,} B); properties: "
              + ", ".join(f"{k}={v}" for k, v in w["properties"].items()))
        print("  " + "; ".join(w["notes"] + [w["fd"]]))
        for key, name in (("register_first", "REGISTER_BROKER, first round"),
                          ("register_again", "re-registration, new DataVersion"),
                          ("register_warm", "re-registration, cache warm")):
            s = w[key]
            print(f"  {name:36} median {s['median_ms']:>8} ms   max {s['max_ms']:>8} ms")
        hdr = (f"  {'':36} {'req/s':>9} {'p50 us':>9} {'p99 us':>9} {'max us':>10} "
               f"{'code!=0':>7} {'lost':>5} {'hit rate':>8} {'RSS MiB':>8} {'other CPU':>9}")
        print(hdr)
        for key, name in (("q16", "routes, 4 conns x 16 in flight"),
                          ("q1k", f"routes, {w['q1k']['conns']} conns x 1 in flight"),
                          ("q16_after_reregister", "routes x 16, after re-registration")):
            r = w[key]
            print(f"  {name:36} {r['rps']:>9,.0f} {r['p50_us']:>9.1f} {r['p99_us']:>9.1f} "
                  f"{r['max_us']:>10.1f} {r['errors_all']:>7} "
                  f"{r['timeouts'] + r['lost']:>5} {fmt(r['hit_rate'], '.1%'):>8} "
                  f"{fmt(r.get('rss_mib'), '.1f'):>8} {fmt(r.get('other_cpu_pct')):>8}%")
        print(f"  RSS MiB: start {w['rss_start_mib']}, after registration "
              f"{w['rss_after_register_mib']}, after re-registration "
              f"{w['rss_after_reregister_mib']}, after one pass of queries "
              f"{w['rss_after_pass_mib']}, end {w['rss_end_mib']}; VmHWM {w['hwm_end_mib']}")
        c = w["q1k"]["cache"]
        print(f"  route cache after the {w['q1k']['conns']}-connection phase: "
              + (", ".join(f"{k}={v}" for k, v in c.items()) if c else
                 "no 'route cache:' line (the server has no SIGUSR1 report)"))
    e = rep.get("expiry")
    if e:
        print()
        print(f"EXPIRY: {e['brokers']} brokers ({e['per_connection']} per connection, "
              f"{e['connections']} connections), {e['expiring']} expiring together; "
              f"scanNotActiveBrokerInterval {e['scan_interval_ms']} ms; routes at "
              f"{e['rate']}/s over the staying brokers' topics")
        print(f"  registration: {e['register']['seconds']} s in all, median "
              f"{e['register']['median_ms']} ms; RSS {e['rss_after_register_mib']} MiB")
        print(f"  dropped {e['dropped']} (log), {e['first_drop_after_deadline_ms']} ms after "
              f"their deadline, drop and close lines over {e['drop_log_span_ms']} ms; "
              f"{e['connections_closed']} connections closed")
        print(f"  {'latency in us':28} {'answers':>8} {'p50':>8} {'p99':>8} {'max':>8} "
              f"{'>5 ms':>6} {'code!=0':>7} | from the send: {'p99':>8} {'max':>8} {'>5 ms':>6}")
        for key, name in (("window", f"scan window ({e['window_ms']} ms)"),
                          ("outside", "rest of the run")):
            s = e[key]
            print(f"  {name:28} {s['n']:>8} {fmt(s.get('p50_us')):>8} {fmt(s.get('p99_us')):>8} "
                  f"{fmt(s.get('max_us')):>8} {fmt(s.get('over_5ms')):>6} "
                  f"{fmt(s.get('errors')):>7} | {'':14} {fmt(s.get('sent_p99_us')):>8} "
                  f"{fmt(s.get('sent_max_us')):>8} {fmt(s.get('sent_over_5ms')):>6}")
        print("  (latency counted from the due time, as loadgen's open loop does; 'from the "
              "send' leaves out the generator's own lateness)")
        print("  slowest answers (due ms from the first drop line: us from due / from send): "
              + ", ".join(f"{x['at_ms_from_first_drop']:+.0f}: {x['us']:.0f}/"
                          f"{x['from_send_us']:.0f}" for x in e["slowest"]))
        print(f"  slowest answer (us) per {e['series_step_ms']} ms, from 1 s before the "
              f"deadline (dropped at +{e['first_drop_after_deadline_ms'] + 1000} ms): "
              + " ".join(str(v) for v in e["series_max_us"]))
        lg = e["loadgen"]
        print(f"  whole run: {lg['rps']:,.0f} req/s, p99 {lg['p99_us']} us, max {lg['max_us']} "
              f"us, code!=0 {lg['errors_all']}, unanswered {lg['timeouts'] + lg['lost']}; "
              f"loadgen's own send lag p99 {lg['send_lag_p99_us']} us, max "
              f"{lg['send_lag_max_us']} us; other processes {lg['other_cpu_pct']}% of a CPU")
        w = e["window"]
        print(f"  no answer above 5 ms in the scan window: from the due time "
              f"{load.verdict(w.get('over_5ms', 1) == 0)}, from the send "
              f"{load.verdict(w.get('sent_over_5ms', 1) == 0)}")


def parse_set(text):
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"--set {text!r}: KEY=VALUE expected")
    return key.strip(), value.strip()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="w3,w4,expiry",
                   help="comma-separated: w3, w4, expiry (all three)")
    p.add_argument("--quick", action="store_true",
                   help="small counts and 1 s query phases (development)")
    p.add_argument("--brokers", type=int, help="W3/W4 brokers (300 / 1000)")
    p.add_argument("--topics", type=int, help="W3/W4 topics (10000 / 1000)")
    p.add_argument("--duration", type=float, help="seconds per query phase (10; quick 1)")
    p.add_argument("--warmup", type=float, help="warmup seconds per query phase (2; quick 0.5)")
    p.add_argument("--after-duration", type=float,
                   help="seconds of the query phase after the warm re-registration (3; quick 1)")
    p.add_argument("--distinct-routes", action="store_true",
                   help="W3/W4: queue numbers that make every topic's route answer distinct "
                        "(by default every W3 topic has the same answer bytes)")
    p.add_argument("--conns-many", type=int, default=1000,
                   help="connections of the 1-in-flight phase (1000)")
    p.add_argument("--broker-timeout-ms", type=int, default=600_000,
                   help="heartbeatTimeoutMillis the brokers send (600000: longer than a run, "
                        "since they do not re-register every 30 s; 0: none sent, the "
                        "server's 120 s)")
    p.add_argument("--expiry-brokers", type=int, help="expiry: brokers (10000; quick 1000)")
    p.add_argument("--expiring", type=int, help="expiry: of which expire (1000; quick 100)")
    p.add_argument("--per-conn", type=int, default=100, help="expiry: brokers per connection")
    p.add_argument("--scan-interval-ms", type=int, default=1000,
                   help="expiry: scanNotActiveBrokerInterval (1000)")
    p.add_argument("--expire-after", type=float, default=6.0,
                   help="expiry: seconds from the first expiring registration to their "
                        "deadline (6)")
    p.add_argument("--expiry-tail", type=float, default=3.0,
                   help="expiry: seconds of queries after the expected drop (3)")
    p.add_argument("--expiry-rate", type=int, default=5000, help="expiry: routes/s (5000)")
    p.add_argument("--expiry-conns", type=int, default=2, help="expiry: loadgen connections")
    p.add_argument("--expiry-inflight", type=int, default=512,
                   help="expiry: cap of requests in flight per connection")
    p.add_argument("--series-ms", type=int, default=250,
                   help="expiry: step of the slowest-answer series around the scan (250)")
    p.add_argument("--window-margin", type=float, default=0.25,
                   help="expiry: seconds the scan window extends past the last logged drop")
    p.add_argument("--set", type=parse_set, action="append", default=[], metavar="KEY=VALUE",
                   help="a namesrv property (repeatable), e.g. routeCacheBytes=268435456")
    p.add_argument("--step-timeout", type=float, default=120.0,
                   help="socket timeout of each registration (120)")
    p.add_argument("--server-log-level", default="info",
                   choices=["debug", "info", "warning", "error"],
                   help="info at least: the cache line and the drops are read from the log")
    p.add_argument("--json-out", help="write the JSON report to this file too")
    p.add_argument("--deadline", type=float, default=1800, help="abort after this many seconds")
    p.add_argument("--rebuild", action="store_true", help="rebuild bench/loadgen")
    p.add_argument("--keep", action="store_true", help="keep the temporary directories")
    args = p.parse_args(argv)
    args.set = dict(args.set)
    workloads = [w.strip() for w in args.workload.split(",") if w.strip()]
    bad = set(workloads) - {"w3", "w4", "expiry"}
    if bad or not workloads:
        p.error(f"unknown workload(s): {', '.join(sorted(bad)) or '(none)'}")
    q = args.quick
    for name, full, quick in (("duration", 10.0, 1.0), ("warmup", 2.0, 0.5),
                              ("after_duration", 3.0, 1.0), ("expiry_brokers", 10_000, 1000),
                              ("expiring", 1000, 100)):
        if getattr(args, name) is None:
            setattr(args, name, quick if q else full)
    if q:
        args.brokers = args.brokers or 30
        args.topics = args.topics or 1000
        args.conns_many = min(args.conns_many, 100)
    if args.server_log_level not in ("debug", "info"):
        p.error("--server-log-level must be debug or info: the log is read")

    def on_alarm(signum, frame):
        raise Deadline(f"--deadline {args.deadline:g} s reached")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, args.deadline)
    report = {"args": {k: v for k, v in vars(args).items()}}
    try:
        build_loadgen(args.rebuild)
        report["env"] = dict(describe_server_python(server_env()), cpus=os.cpu_count(),
                             cpu=load.cpu_model())
        for w in workloads:
            if w == "expiry":
                run_expiry(args, report)
            else:
                run_routes(w, args, report)
    except (BenchError, Deadline, OSError, brokersim.RegistrationError,
            subprocess.SubprocessError) as e:
        log(f"scale.py: {type(e).__name__}: {e}")
        if args.json_out:
            report["failed"] = f"{type(e).__name__}: {e}"
            Path(args.json_out).write_text(json.dumps(report, indent=2, sort_keys=True,
                                                      default=str) + "\n")
        return 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    print_table(report)
    print()
    print(json.dumps(report, sort_keys=True, default=str))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2, sort_keys=True,
                                                  default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
