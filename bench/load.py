"""Load benchmark of the rmq NameServer, from separate processes over 127.0.0.1.

Starts ``python -m rmq namesrv`` (this interpreter, the environment as given, so
``RMQ_PUREPYTHON=1`` selects the pure-Python core) on a free port with a temporary
kvConfig.json, then:

1. W1 setup: 8 brokers x 10,000 topics (every topic on every broker), registered
   through rmq.brokersim (one connection per broker, kept open).
2. W1 queries: bench/loadgen (C, epoll, one thread) sends GET_ROUTEINFO_BY_TOPIC
   (code 105, Java 4.9.8's JSON header) round-robin over all topics from 4
   connections, 16 requests in flight per connection; then 1 in flight.
3. Server RSS after W1 (/proc/PID/status VmRSS, VmHWM).
4. Registration time: broker-0 re-registers its 10,000 topics (a ~1.4 MB JSON body)
   with a changed DataVersion counter, N times back to back; median from the
   start of the send to the whole answer.
5. Route latency while registrations run: loadgen at a fixed rate (open loop, so a
   stalled server shows in every request due during the stall), first quiet, then
   while broker-0 re-registers every --reg-interval seconds; counted from the due
   time, from loadgen's send, and from the send to the answer's arrival at
   loadgen's socket (the kernel's receive timestamp: loadgen's own lateness out).
6. With --flood206, the same while one client pipelines 206s; with --all-at-once,
   while registrations, KV puts and 206 floods run together, and with --limit also
   the limit server's answers while the same loads run on rmq (the floor).

With --limit, W1's loads also run against the limit server, after all of rmq's; with
--paired N instead, each of W1's loads (4 x 16, 4 x 64, 4 x 1, 1,000 x 1, TOPIC_NOT_EXIST
at 4 x 16 and, with --zones, zone mode at 4 x 16) runs on rmq and on the limit server in
turn, N rounds (the order alternating), and the medians of the rounds' ratios (answers/s,
server CPU per answer, p50) are reported: runs minutes apart are not comparable on a VM
whose speed moves by 2x within minutes.

Prints a table and one JSON line (also written to --json-out). Bounded: every
step has a timeout, --deadline caps the whole run, and the server is killed at
the end whatever happens.

    PYTHONPATH=src .venv/bin/python bench/load.py            # ~1 min
    PYTHONPATH=src .venv/bin/python bench/load.py --quick    # ~15 s
"""

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SRC = ROOT / "src"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
try:
    import rmq  # noqa: F401
except ImportError:
    sys.path.insert(0, str(SRC))

from rmq import brokersim  # noqa: E402
import rmq  # noqa: E402
from rmq import bodies  # noqa: E402
from rmq.codec import FrameSplitter, RemotingCommand  # noqa: E402
from rmq.protocol import RequestCode, V4_9_8  # noqa: E402

LOADGEN_SRC = BENCH / "loadgen.c"
LOADGEN = BENCH / "loadgen"
LOADGEN_TLS = BENCH / "loadgen-tls"        # with --tls (bench/tls.py)

#: Java 4.9.8 on this 2-core machine, W1 with its brokers connected (every answer a
#: route, code 0), from issues 28 and 30 (an earlier session's runs; Java cannot be
#: fetched here now, so they cannot be rerun), and rmq's targets as set at the time.
#: bench/README.md, "Reference figures", says where they come from and how to measure
#: Java again.
REFERENCE = {
    "w1_16": {"java_routes_per_s": "28-38k",
              "java_side_by_side": {"routes_per_s": 37_600, "p99_us": 6_400},
              "target": ">= 540k req/s, p99 < 2 ms", "target_rps": 540e3,
              "target_p99_us": 2000},
    "w1_64": {"java_side_by_side": {"routes_per_s": 61_800}},
    "w1_1000x1": {"java_routes_per_s": "22-37k",
                  "java_side_by_side": {"routes_per_s": 36_700, "p99_us": 69_000}},
    # No Java figure at 4 x 1 with the brokers connected was recorded.
    "w1_1": {"java_routes_per_s": None, "target": ">= 60k req/s, p50 <= 60 us",
             "target_rps": 60e3, "target_p50_us": 60},
}
#: The Java figures the targets were first set from (540k = 4.5 x 120k, 60k = 3 x 20k),
#: later found to be TOPIC_NOT_EXIST answers (code 17, the brokers dropped), not routes.
SUPERSEDED_JAVA = {"w1_16": "~110-120k req/s, p99 1.5-2 ms", "w1_1": "~20k req/s, p50 ~150 us"}


class BenchError(Exception):
    pass


class Deadline(Exception):
    pass


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- helpers

def build_loadgen(force=False, tls=False):
    """cc -O2 -o bench/loadgen bench/loadgen.c, when missing or older than its source;
    ``tls``: bench/loadgen-tls, with --tls (OpenSSL's headers and libraries needed)."""
    target = LOADGEN_TLS if tls else LOADGEN
    if (not force and target.exists()
            and target.stat().st_mtime >= LOADGEN_SRC.stat().st_mtime):
        return target
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or "cc"
    tls_flags = (["-DLOADGEN_TLS"], ["-lssl", "-lcrypto"]) if tls else ([], [])
    cmd = [cc, "-O2", *tls_flags[0], "-o", str(target), str(LOADGEN_SRC), *tls_flags[1]]
    log("building loadgen:", " ".join(cmd))
    subprocess.run(cmd, check=True, timeout=120)
    return target


LIMITSRV_SRC = BENCH / "limitsrv.c"
LIMITSRV = BENCH / "limitsrv"


def build_limitsrv(force=False):
    """cc -O2 -o bench/limitsrv bench/limitsrv.c, when missing or older."""
    if (not force and LIMITSRV.exists()
            and LIMITSRV.stat().st_mtime >= LIMITSRV_SRC.stat().st_mtime):
        return LIMITSRV
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or "cc"
    cmd = [cc, "-O2", "-o", str(LIMITSRV), str(LIMITSRV_SRC)]
    log("building the limit server:", " ".join(cmd))
    subprocess.run(cmd, check=True, timeout=120)
    return LIMITSRV


class LimitServer:
    """bench/limitsrv: one epoll thread answering every frame with ``body`` (the
    ceiling rmq is compared with), pinned like the NameServer."""

    def __init__(self, workdir, body, pin_cpu=None, short_slices=False):
        path = Path(workdir) / "limit-route.json"
        path.write_bytes(body)
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        cmd = [str(build_limitsrv()), str(self.port), str(path)]
        if short_slices:                # (as rmq's I/O threads: limitsrv.c)
            cmd.append("--short-slices")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        if pin_cpu is not None:
            os.sched_setaffinity(self.proc.pid, {pin_cpu})
        line = self.proc.stdout.readline()
        if not line.startswith("listening"):
            raise BenchError(f"the limit server did not start: {line!r}")
        self.pid = self.proc.pid

    def stop(self):
        self.proc.kill()
        self.proc.wait(10)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env():
    """This environment, with the directory of the rmq imported here first on the path:
    the server runs the same rmq (and the same core) as this script."""
    env = os.environ.copy()
    pkg_root = str(Path(rmq.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
    return env


def describe_server_python(env):
    """What the server process will run: the core, its CRC32 kernel, the event loop."""
    code = ("import rmq, sys\n"
            "try:\n import uvloop; loop = 'uvloop ' + uvloop.__version__\n"
            "except ImportError:\n loop = 'asyncio'\n"
            "print(rmq.IMPLEMENTATION, rmq.CRC32_KERNEL, loop, sys.version.split()[0], sep='|')")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True).stdout.strip().split("|")
    return {"implementation": out[0], "crc32_kernel": out[1], "loop": out[2], "python": out[3]}


def proc_status(pid):
    """VmRSS, VmHWM in MiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024
    return out


def proc_cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_minor_faults(pid):
    """Page faults the process took without I/O (a fresh page each: what memory
    mapped anew costs, bench/README.md)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def children_cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def children_waits():
    """Times the waited-for children slept for something (voluntary context switches):
    loadgen's, for answers it was waiting for."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_nvcsw


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


class Server:
    """``python -m rmq namesrv`` in a subprocess.

    ``properties``: namesrv.properties keys (``{"maxConnections": "20000"}``), written
    to the work directory and passed with ``-c``; none: no file, every default."""

    def __init__(self, workdir, log_level="info", pin_cpu=None, trace=False, properties=None):
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.workdir = Path(workdir)
        self.log_path = self.workdir / "namesrv.log"
        self.env = server_env()
        self.cmd = [sys.executable, "-m", "rmq", "namesrv", "--listen", self.address,
                    "--kv-config", str(self.workdir / "kvConfig.json"), "--log-level", log_level]
        if trace:
            self.cmd += ["--trace-dir", str(self.workdir / "trace")]
        self.properties = dict(properties or {})
        if self.properties:
            path = self.workdir / "namesrv.properties"
            path.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()),
                            encoding="latin-1")
            self.cmd += ["-c", str(path)]
        self.pin_cpu = pin_cpu
        self.proc = None

    def start(self, timeout=30.0):
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=self._log,
                                     stderr=subprocess.STDOUT, cwd=str(self.workdir))
        if self.pin_cpu is not None:
            os.sched_setaffinity(self.proc.pid, {self.pin_cpu})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"the NameServer exited with {self.proc.returncode}:\n"
                                 + self.log_tail())
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise BenchError("the NameServer did not start listening:\n" + self.log_tail())

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n=20):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


class Keepalive(threading.Thread):
    """BROKER_HEARTBEAT (904) from every broker every ``period`` s, as a broker's
    30 s registrations keep it live: a run longer than the heartbeat timeout or
    serverChannelMaxIdleTimeSeconds (120 s) would otherwise lose its brokers, and
    every answer after that would be TOPIC_NOT_EXIST. Stopped before the brokers'
    connections are used for anything else (one request at a time per connection)."""

    def __init__(self, brokers, period=20.0):
        super().__init__(daemon=True)
        self.brokers, self.period = brokers, period
        self.stop_ = threading.Event()

    def run(self):
        while not self.stop_.wait(self.period):
            for b in self.brokers:
                b.call(RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, b._identity(),
                                               version=V4_9_8))

    def stop(self):
        self.stop_.set()
        self.join(60)


def route_raw(address, topic):
    """The body of topic's route answer, as the NameServer writes it."""
    b = brokersim.SimBroker(address, 998, timeout=30)
    try:
        return b.call(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                              {"topic": topic}, version=V4_9_8)).body
    finally:
        b.close()


def query_route(address, topic):
    """One GET_ROUTEINFO_BY_TOPIC with the Python client (a sanity check)."""
    b = brokersim.SimBroker(address, 999, timeout=30)
    try:
        resp = b.call(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                              {"topic": topic}, version=V4_9_8))
    finally:
        b.close()
    if resp.code != 0:
        raise BenchError(f"route of {topic}: code {resp.code} {resp.remark!r}")
    return bodies.decode_topic_route_data(resp.body), len(resp.body)


def run_loadgen(server, *, label, conns, inflight, duration, warmup, topics, rate=0,
                pin_cpu=None, profile=None, extra=(), binary=None, samples_dir=None):
    """Run bench/loadgen (or ``binary``) against ``server``; ``extra``: more loadgen
    arguments; ``samples_dir``: each answer's times to ``<samples_dir>/<label>.samples``
    (loadgen --samples; with the server's trace: bench/trace_latency.py --samples)."""
    cmd = [str(binary or LOADGEN), "--port", str(server.port), "--conns", str(conns),
           "--inflight", str(inflight), "--duration", str(duration), "--warmup", str(warmup),
           "--topics", str(topics), "--label", label]
    if rate:
        cmd += ["--rate", str(rate)]
    if samples_dir is not None:
        cmd += ["--samples", str(Path(samples_dir) / f"{label}.samples")]
    cmd += [str(a) for a in extra]
    cpu0, ccpu0, waits0 = proc_cpu_seconds(server.pid), children_cpu_seconds(), children_waits()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if pin_cpu is not None:
        os.sched_setaffinity(proc.pid, {pin_cpu})
    profiler = profile(proc) if profile else None
    try:
        out, err = proc.communicate(timeout=duration + warmup + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise BenchError(f"loadgen {label} did not finish") from None
    except BaseException:           # e.g. --deadline: never leave it running
        proc.kill()
        proc.wait()
        raise
    finally:
        if profiler is not None:
            profiler()
    if err.strip():
        log(err.strip())
    line = out.strip().splitlines()[-1] if out.strip() else ""
    try:
        result = json.loads(line)
    except ValueError:
        raise BenchError(f"loadgen {label} printed no result (exit {proc.returncode}): "
                         f"{out!r} {err!r}") from None
    if "error" in result:
        raise BenchError(f"loadgen {label}: {result['error']}")
    result["exit"] = proc.returncode
    result["server_cpu_s"] = round(proc_cpu_seconds(server.pid) - cpu0, 3)
    result["loadgen_cpu_s"] = round(children_cpu_seconds() - ccpu0, 3)
    if result["requests"]:
        result["server_cpu_us_per_req"] = round(
            result["server_cpu_s"] * 1e6 / max(result["sent"], 1), 2)
        # (at 4 x 1: how often loadgen slept waiting for an answer, each sleep a
        # wake-up the server pays; bench/README.md, "A lone query's own work")
        result["loadgen_waits_per_req"] = round(
            (children_waits() - waits0) / max(result["sent"], 1), 4)
    return result


def arrived(r):
    """The open-loop figure from the send to the answer's arrival in the kernel
    (loadgen's SO_TIMESTAMPNS): what the server and the loopback took, without
    loadgen's own lateness in reading; '' where loadgen did not measure it (TLS)."""
    if "arrived_max_us" not in r:
        return ""
    return f"at the socket p99 {r['arrived_p99_us']} us, max {r['arrived_max_us']} us; "


def summarize(times):
    ms = sorted(t * 1000 for t in times)
    if not ms:
        return {"n": 0}
    return {"n": len(ms), "median_ms": round(statistics.median(ms), 2),
            "min_ms": round(ms[0], 2), "max_ms": round(ms[-1], 2),
            "mean_ms": round(statistics.fmean(ms), 2)}


def make_profiler(kind, server, seconds, out_path):
    """A hook for run_loadgen: starts perf or py-spy on the server, returns the waiter."""
    if kind is None:
        return None

    def start(_loadgen_proc):
        if kind == "perf":
            cmd = ["perf", "record", "-F", "499", "-g", "-p", str(server.pid), "-o",
                   str(out_path), "--", "sleep", str(seconds)]
        else:
            cmd = ["py-spy", "record", "--pid", str(server.pid), "--duration",
                   str(max(1, int(seconds))), "--rate", "250", "--native", "--format", "raw",
                   "--output", str(out_path)]
        prof = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        def wait():
            try:
                prof.communicate(timeout=seconds + 60)
            except subprocess.TimeoutExpired:
                prof.kill()
                prof.communicate()
            log(f"{kind} profile of the server: {out_path}")
        return wait
    return start


# ---------------------------------------------------------------- the run

def run(args):
    report = {"args": vars(args).copy()}
    build_loadgen(args.rebuild)
    pin_server = pin_client = None
    ncpu = len(os.sched_getaffinity(0))
    if args.pin and ncpu >= 2:
        cpus = sorted(os.sched_getaffinity(0))
        pin_client, pin_server = cpus[0], cpus[1]
        os.sched_setaffinity(0, {pin_client})
    env = server_env()
    report["env"] = dict(describe_server_python(env), cpus=ncpu, cpu=cpu_model(),
                         kernel=platform.release(), pinned=bool(args.pin and ncpu >= 2),
                         rmq=str(Path(rmq.__file__).resolve().parent))
    if (report["env"]["implementation"] != "compiled"
            and os.environ.get("RMQ_PUREPYTHON", "") in ("", "0")):
        log(f"warning: the server runs the pure-Python core ({report['env']['rmq']} has no "
            "built rmq._core): build it (make install, or an in-place build) to measure it")
    topics = brokersim.topic_names(args.topics)
    workdir = tempfile.mkdtemp(prefix="rmq-load-")
    properties = {"serverEngine": "asyncio"} if args.asyncio else {}
    if args.engine or args.threads:
        properties = {"serverEngine": "c", "serverIoThreads": str(args.threads or 0)}
    server = Server(workdir, args.server_log_level, pin_server, trace=args.trace,
                    properties=properties)
    brokers = []
    keepalive = None
    try:
        server.start()
        report["server"] = {"address": server.address, "pid": server.pid,
                            "rss_start_mib": proc_status(server.pid)["VmRSS"]}
        log(f"NameServer {server.address} pid {server.pid} "
            f"({report['env']['implementation']} core, {report['env']['loop']})")

        # 1. W1 setup
        body = brokersim.encode_body(topics, 1, queues=args.queues, compressed=args.compressed)
        t0 = time.perf_counter()
        brokers = brokersim.register_brokers(server.address, args.brokers, topics, body=body,
                                              compressed=args.compressed, zones=args.zones)
        setup_s = time.perf_counter() - t0
        report["w1_setup"] = dict(summarize([b.last_seconds for b in brokers]),
                                  brokers=args.brokers, topics=args.topics,
                                  body_bytes=len(body), compressed=args.compressed,
                                  seconds=round(setup_s, 3))
        keepalive = Keepalive(brokers)
        keepalive.start()
        route, route_len = query_route(server.address, topics[len(topics) // 2])
        if len(route["brokerDatas"]) != args.brokers:
            raise BenchError(f"route has {len(route['brokerDatas'])} brokers, "
                             f"expected {args.brokers}")
        report["w1_setup"]["route_body_bytes"] = route_len
        report["server"]["rss_after_register_mib"] = proc_status(server.pid)["VmRSS"]
        log(f"W1: {args.brokers} brokers x {args.topics} topics registered in {setup_s:.2f} s "
            f"(first registration median {report['w1_setup']['median_ms']} ms); "
            f"route body {route_len} bytes")

        # 2. W1 queries
        prof_seconds = args.during_duration if args.profile_phase == "during" else args.duration
        prof = make_profiler(args.profile, server, prof_seconds, args.profile_out)
        w1_phases = () if args.registrations_only else (("w1_16", 16), ("w1_64", 64), ("w1_1", 1))
        if args.paired and not args.registrations_only:
            run_paired(server, workdir, topics, args, pin_server, pin_client, report)
            w1_phases = ()
        for key, inflight in w1_phases:
            log(f"W1 queries: {args.conns} connections x {inflight} in flight, "
                f"{args.duration:g} s (+{args.warmup:g} s warmup)")
            r = run_loadgen(server, label=key, conns=args.conns, inflight=inflight,
                            duration=args.duration, warmup=args.warmup, topics=args.topics,
                            pin_cpu=pin_client,
                            profile=prof if key == args.profile_phase else None)
            report[key] = r
            log(f"  {r['rps']:,.0f} req/s, p50 {r['p50_us']} us, p99 {r['p99_us']} us, "
                f"p999 {r['p999_us']} us, errors {r['errors']}")
        if args.zones and not args.registrations_only and not args.paired:
            # zone mode (Java 5.0.0's ZoneRouteRPCHook): answers with zone-0's brokers
            log(f"W1 zone-mode queries (zone-0 of {args.zones}): {args.conns} connections x 16 "
                f"in flight, {args.duration:g} s")
            r = run_loadgen(server, label="w1_zone_16", conns=args.conns, inflight=16,
                            duration=args.duration, warmup=args.warmup, topics=args.topics,
                            pin_cpu=pin_client, extra=ZONE_QUERIES)
            report["w1_zone_16"] = r
            log(f"  {r['rps']:,.0f} req/s, p50 {r['p50_us']} us, p99 {r['p99_us']} us, "
                f"errors {r['errors']}")

        if not args.registrations_only and not args.paired:     # (--paired: run_paired)
            # C1000: many clients, one request each in flight (every producer and
            # consumer asks its routes every 30 s)
            log(f"W1 queries: 1000 connections x 1 in flight, {args.duration:g} s")
            r = run_loadgen(server, label="c1000_1", conns=1000, inflight=1,
                            duration=args.duration, warmup=args.warmup, topics=args.topics,
                            pin_cpu=pin_client)
            report["c1000_1"] = r
            log(f"  {r['rps']:,.0f} req/s, p50 {r['p50_us']} us, p99 {r['p99_us']} us, "
                f"errors {r['errors']}")

            # TOPIC_NOT_EXIST: %RETRY% topics, probes and typos ask too; every answer a 17
            log(f"W1 queries for topics no broker has: {args.conns} connections x 16 in flight, "
                f"{args.duration:g} s")
            r = run_loadgen(server, label="w1_missing_16", conns=args.conns, inflight=16,
                            duration=args.duration, warmup=args.warmup, topics=args.topics,
                            pin_cpu=pin_client, extra=MISSING_QUERIES)
            answers_per_s(r, 17)                        # (BenchError unless all are 17s)
            report["w1_missing_16"] = r
            log(f"  {r['rps']:,.0f} req/s (all TOPIC_NOT_EXIST), p50 {r['p50_us']} us, "
                f"p99 {r['p99_us']} us")

            if args.limit:
                # the same loads against the limit server, in this run
                limit = LimitServer(workdir, route_raw(server.address, topics[len(topics) // 2]),
                                    pin_server)
                try:
                    for key, conns, inflight in (("w1_16", args.conns, 16), ("w1_64", args.conns, 64),
                                                 ("w1_1", args.conns, 1), ("c1000_1", 1000, 1)):
                        log(f"the limit server: {conns} connections x {inflight} in flight")
                        r = run_loadgen(limit, label="limit_" + key, conns=conns,
                                        inflight=inflight, duration=args.duration,
                                        warmup=args.warmup, topics=args.topics, pin_cpu=pin_client)
                        report["limit_" + key] = r
                        log(f"  {r['rps']:,.0f} req/s, p50 {r['p50_us']} us, p99 {r['p99_us']} us;"
                            f" rmq / limit {routes_per_s(report[key]) / routes_per_s(r):.2f}")
                finally:
                    limit.stop()

        # 3. memory
        report["server"].update({"rss_after_w1_mib": proc_status(server.pid)["VmRSS"],
                                 "hwm_after_w1_mib": proc_status(server.pid)["VmHWM"]})

        keepalive.stop()

        # 4. registration time, no other load
        reg = brokers[0]
        series = brokersim.body_series(topics, 2, queues=args.queues,
                                        compressed=args.compressed,
                                        alternate_queues=args.reg_changes_routes)
        times = []
        for _ in range(args.reg_count):
            b = next(series)
            seconds, _ = reg.register(b, args.compressed)
            times.append(seconds)
        report["register"] = dict(summarize(times), body_bytes=len(b),
                                  changes_routes=args.reg_changes_routes)
        log(f"register {args.topics} topics (changed DataVersion) x{args.reg_count}: "
            f"median {report['register']['median_ms']} ms, max {report['register']['max_ms']} ms")

        # 5. route latency, quiet and during registrations
        rate_args = dict(conns=2, inflight=512, duration=args.during_duration, warmup=0.5,
                         topics=args.topics, rate=args.during_rate, pin_cpu=pin_client,
                         extra=MISSING_QUERIES if args.during_missing else (),
                         samples_dir=workdir if args.samples else None)
        r = run_loadgen(server, label="routes_quiet", **rate_args)
        report["routes_quiet"] = r
        during_times = []

        def register(stop):
            t = time.monotonic()
            seconds, _ = reg.register(next(series), args.compressed)
            during_times.append(seconds)
            stop.wait(max(0.0, args.reg_interval - (time.monotonic() - t)))

        r = run_loadgen_during(server, {"registration": register}, label="routes_during_registrations",
                               **rate_args, profile=prof if args.profile_phase == "during" else None)
        r["registrations"] = summarize(during_times)
        report["routes_during_registrations"] = r
        q = report["routes_quiet"]
        log(f"routes at {args.during_rate}/s: quiet p99 {q['p99_us']} us max {q['max_us']} us"
            f" (from the send: max {q.get('from_send_max_us')} us); during "
            f"{len(during_times)} registrations p99 {r['p99_us']} us, max {r['max_us']} us"
            f" (from the send: p99 {r.get('from_send_p99_us')} us, max "
            f"{r.get('from_send_max_us')} us; {arrived(r)}loadgen's send lag max "
            f"{r.get('send_lag_max_us')} us)")

        # 6. route latency while one client pipelines 206s (--flood206)
        if args.flood206:
            report["routes_during_206"] = routes_during_206(server, args.flood206, rate_args)
            r = report["routes_during_206"]
            log(f"routes at {args.during_rate}/s during {r['floods']} floods of "
                f"{args.flood206} pipelined 206s: p99 {r['p99_us']} us, max {r['max_us']} us "
                f"(from the send: p99 {r.get('from_send_p99_us')} us, max "
                f"{r.get('from_send_max_us')} us; {arrived(r)}loadgen's send lag max "
                f"{r.get('send_lag_max_us')} us)")

        # 7. all at once (--all-at-once): registrations back to back, 64 KiB KV puts
        # and the 206 floods, while loadgen asks routes; with --limit, loadgen then asks
        # the limit server while the same loads run on rmq: the floor of this machine
        if args.all_at_once:
            targets = [("routes_during_all", None)]
            if args.limit:
                targets.append(("limit_during_all", route_raw(
                    server.address, topics[len(topics) // 2])))
            for key, limit_body in targets:
                floods, puts, regs = [], [], []

                def register_now(stop):
                    t = time.monotonic()
                    reg.register(next(series), args.compressed)
                    regs.append(time.monotonic() - t)

                sim = brokersim.SimBroker(server.address, 901).connect()
                limit = None if limit_body is None else LimitServer(
                    workdir, limit_body, pin_server, short_slices=True)
                try:
                    r = run_loadgen_during(limit or server, {
                        "registration": register_now, "KV put": kvput_work(sim, puts),
                        "206 flood": flood206_work(server, args.flood206 or 500, floods)},
                        label=key, **rate_args)
                finally:
                    sim.close()
                    if limit is not None:
                        limit.stop()
                r.update(registrations=summarize(regs), kv_puts=summarize(puts),
                         floods=len(floods))
                report[key] = r
                log(f"routes at {args.during_rate}/s {'to the limit server ' if limit_body else ''}"
                    f"during {len(regs)} registrations, {len(puts)} KV puts and "
                    f"{len(floods)} 206 floods at once: p99 {r['p99_us']} us, max "
                    f"{r['max_us']} us (from the send: p99 {r.get('from_send_p99_us')} us, "
                    f"max {r.get('from_send_max_us')} us; {arrived(r)}loadgen's send lag max "
                    f"{r.get('send_lag_max_us')} us)")

        report["server"].update({"rss_end_mib": proc_status(server.pid)["VmRSS"],
                                 "hwm_end_mib": proc_status(server.pid)["VmHWM"]})
        if not server.alive():
            raise BenchError("the NameServer died:\n" + server.log_tail())
    finally:
        if keepalive is not None:
            keepalive.stop()
        brokersim.close_all(brokers)
        server.stop()
        report.setdefault("server", {})["log"] = server.log_tail(5)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log(f"work directory kept: {workdir}")
    return report


def read_answers(sock, count):
    """Read ``count`` frames from ``sock`` (fewer if it closes); how many came. The
    frames are split, not decoded: a flooding client costs the machine the copies,
    not Python's decoding of gigabytes."""
    splitter, got = FrameSplitter(1 << 30), 0
    while got < count:
        data = sock.recv(1 << 20)
        if not data:
            break
        got += len(splitter.feed(data))
    return got


#: loadgen's arguments for queries of topics no broker has (every answer a 17), and
#: for zone-mode queries (Java 5.0.0's ZoneRouteRPCHook: zone-0's brokers, --zones)
MISSING_QUERIES = ("--prefix", "NoSuchTopic-")
ZONE_QUERIES = ("--zone", "zone-0")

#: W1's phases against the limit server, as (report key, connections (None: --conns),
#: in flight, loadgen's extra arguments, the code of every rmq answer). The limit
#: answers each frame with its canned route whatever it asks: the same floor for
#: not-found and zone-mode answers (the zone phase runs with --zones only).
PAIRED_PHASES = (("w1_16", None, 16, (), 0), ("w1_64", None, 64, (), 0),
                 ("w1_1", None, 1, (), 0), ("c1000_1", 1000, 1, (), 0),
                 ("w1_missing_16", None, 16, MISSING_QUERIES, 17),
                 ("w1_zone_16", None, 16, ZONE_QUERIES, 0))


def run_paired(server, workdir, topics, args, pin_server, pin_client, report):
    """W1's loads (4 x 16, 4 x 64, 4 x 1, 1,000 x 1, TOPIC_NOT_EXIST at 4 x 16 and,
    with --zones, zone mode at 4 x 16) on rmq and on the limit server in turn,
    ``args.paired`` rounds each, the order alternating: each round's ratios are of two
    runs a few seconds apart, which the same loads minutes apart (the limit's phases
    after all of rmq's) are not on a VM whose speed moves by 2x within minutes.
    report[key] and report["limit_" + key]: the last round's; report["paired"][key]:
    every round's rmq / limit ratios of answers/s (of the phase's code; every answer
    must have it), server CPU per answer and p50, and their medians."""
    limit = LimitServer(workdir, route_raw(server.address, topics[len(topics) // 2]),
                        pin_server)
    paired = report["paired"] = {}
    try:
        for key, conns, inflight, extra, code in PAIRED_PHASES:
            if key == "w1_zone_16" and not args.zones:
                continue
            conns = conns or args.conns
            rounds = {"routes": [], "cpu": [], "p50": []}
            for n in range(args.paired):
                runs = {}
                turns = ((server, key), (limit, "limit_" + key))
                for target, label in (turns if n % 2 == 0 else turns[::-1]):
                    log(f"round {n + 1}: {label}, {conns} connections x {inflight} in flight, "
                        f"{args.duration:g} s")
                    runs[label] = run_loadgen(target, label=label, conns=conns, inflight=inflight,
                                              duration=args.duration, warmup=args.warmup,
                                              topics=args.topics, pin_cpu=pin_client,
                                              extra=extra if target is server else ())
                r, lim = runs[key], runs["limit_" + key]
                report[key], report["limit_" + key] = r, lim
                rounds["routes"].append(ratio(answers_per_s(r, code), routes_per_s(lim)))
                rounds["cpu"].append(ratio(r.get("server_cpu_us_per_req"),
                                           lim.get("server_cpu_us_per_req")))
                rounds["p50"].append(ratio(r.get("p50_us"), lim.get("p50_us")))
                log(f"  rmq / limit: routes {rounds['routes'][-1]}, CPU per answer "
                    f"{rounds['cpu'][-1]}, p50 {rounds['p50'][-1]}; loadgen's waits per "
                    f"answer {r.get('loadgen_waits_per_req')} / {lim.get('loadgen_waits_per_req')}")
            medians = {"median_" + k: median_known(v) for k, v in rounds.items()}
            paired[key] = dict(rounds, **{k: v for k, v in medians.items() if v is not None})
    finally:
        limit.stop()


def median_known(xs):
    """The median of the values of xs that are not None, to 3 places; None if none are."""
    known = [x for x in xs if x is not None]
    return round(statistics.median(known), 3) if known else None


def ratio(a, b):
    """a / b to 3 places; None when either is unknown or b is 0 (a run that answered
    nothing: its report still comes out)."""
    return round(a / b, 3) if a is not None and b else None


def run_loadgen_during(server, works, **loadgen_args):
    """run_loadgen while, for each ``what: work`` of ``works``, a thread calls
    ``work(stop)`` again and again (from past loadgen's warmup until the run ends:
    ``stop`` is set); a failure of a work fails the run, naming its ``what``."""
    stop = threading.Event()
    errors = []

    def repeat(what, work):
        try:
            time.sleep(0.5)                             # past loadgen's warmup
            while not stop.is_set():
                work(stop)
        except Exception as e:                          # reported after the run
            errors.append(f"{what} during queries failed: {e}")

    threads = [threading.Thread(target=repeat, args=item, daemon=True) for item in works.items()]
    for th in threads:
        th.start()
    try:
        r = run_loadgen(server, **loadgen_args)
    finally:
        stop.set()
        for th in threads:
            th.join(120)
    if errors:
        raise BenchError(errors[0])
    return r


def flood206_work(server, count, floods):
    """A work for run_loadgen_during: one client pipelines ``count``
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206) on a connection of its own and reads every
    answer; the seconds each flood took appended to ``floods``."""
    frame = rmq.encode_frame(RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))

    def flood(stop):
        t = time.monotonic()
        with socket.create_connection(("127.0.0.1", server.port)) as s:
            s.sendall(frame * count)
            got = read_answers(s, count)
        if got < count:
            raise BenchError(f"206 flood: closed after {got} answers")
        floods.append(time.monotonic() - t)
    return flood


def kvput_work(sim, puts, value_bytes=64 * 1024):
    """A work for run_loadgen_during: PUT_KV_CONFIG of ``value_bytes`` values, one
    after the other, on ``sim``'s connection (a SimBroker's); each put's seconds
    appended to ``puts``."""
    value = "x" * value_bytes

    def put(stop):
        t = time.monotonic()
        r = sim.call(RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {
            "namespace": "ns-bench", "key": f"k{len(puts) % 100}", "value": value}))
        if r.code != 0:
            raise BenchError(f"PUT_KV_CONFIG answered {r.code}: {r.remark}")
        puts.append(time.monotonic() - t)
    return put


def routes_during_206(server, count, rate_args):
    """loadgen's open-loop routes while one client, again and again, pipelines
    ``count`` 206s and reads every answer (issue 30: no route answer waits for them)."""
    floods = []
    r = run_loadgen_during(server, {"206 flood": flood206_work(server, count, floods)},
                           label="routes_during_206", **rate_args)
    r["floods"] = len(floods)
    r["flood_seconds_median"] = round(statistics.median(floods), 3) if floods else None
    return r


# ---------------------------------------------------------------- report

def verdict(ok):
    return "yes" if ok else "NO"


def print_table(rep):
    env = rep["env"]
    w = rep["w1_setup"]
    print()
    print(f"rmq NameServer load benchmark: {env['implementation']} core, {env['loop']}, "
          f"python {env['python']}, {env['cpus']} CPUs ({env['cpu']})"
          + (", server and load pinned to separate CPUs" if env["pinned"] else ""))
    print(f"W1: {w['brokers']} brokers x {w['topics']} topics "
          f"(register body {w['body_bytes'] / 1e6:.2f} MB, route answer {w['route_body_bytes']} B)")
    print()
    hdr = f"{'':38} {'req/s':>10} {'p50 us':>8} {'p90 us':>8} {'p99 us':>8} {'p999 us':>8} " \
          f"{'max us':>9} {'err':>4} {'srv CPU us/req':>14}"
    print(hdr)
    print("-" * len(hdr))
    rows = [("w1_16", "W1 route, 4 conns x 16 in flight"),
            ("w1_64", "W1 route, 4 conns x 64 in flight"),
            ("w1_1", "W1 route, 4 conns x 1 in flight"),
            ("routes_quiet", f"route at {rep['args']['during_rate']}/s, quiet"),
            ("routes_during_registrations",
             f"route at {rep['args']['during_rate']}/s, during registrations")]
    if "routes_during_206" in rep:
        rows.append(("routes_during_206", f"route at {rep['args']['during_rate']}/s, during 206s"))
    if "routes_during_all" in rep:
        rows.append(("routes_during_all", f"route at {rep['args']['during_rate']}/s, all at once"))
    if "c1000_1" in rep:
        rows.insert(2, ("c1000_1", "W1 route, 1000 conns x 1 in flight"))
    if "w1_missing_16" in rep:
        rows.insert(2, ("w1_missing_16", "W1 TOPIC_NOT_EXIST, 4 x 16"))
    if "w1_zone_16" in rep:
        rows.insert(2, ("w1_zone_16", "W1 zone-mode route, 4 x 16"))
    for key, name in (("limit_c1000_1", "the limit: 1000 x 1"), ("limit_w1_1", "the limit: 4 x 1"),
                      ("limit_w1_64", "the limit: 4 x 64"), ("limit_w1_16", "the limit: 4 x 16")):
        if key in rep:
            rows.insert(0, (key, name))
    for key, name in rows:
        r = rep.get(key)
        if r is None:                                   # --registrations-only
            continue
        missing = key == "w1_missing_16" or (key.startswith("routes_")
                                             and rep["args"].get("during_missing"))
        expected = r["error_codes"].get("17", 0) if missing else 0
        err = r["errors"] - expected + r["timeouts"] + r["lost"]
        print(f"{name:38} {r['rps']:>10,.0f} {r['p50_us']:>8.1f} {r['p90_us']:>8.1f} "
              f"{r['p99_us']:>8.1f} {r['p999_us']:>8.1f} {r['max_us']:>9.1f} {err:>4} "
              f"{r.get('server_cpu_us_per_req', 0):>14.1f}")
    print()
    reg, during = rep["register"], rep["routes_during_registrations"]["registrations"]
    print(f"REGISTER_BROKER, 1 broker x {w['topics']} topics, changed DataVersion: "
          f"median {reg['median_ms']} ms (min {reg['min_ms']}, max {reg['max_ms']}, n={reg['n']})"
          f"; under query load: median {during.get('median_ms')} ms (n={during['n']})")
    print(f"first registrations (W1 setup): median {w['median_ms']} ms, max {w['max_ms']} ms")
    s = rep["server"]
    print(f"server RSS: start {s['rss_start_mib']:.1f} MiB, after W1 registration "
          f"{s['rss_after_register_mib']:.1f} MiB, after W1 queries {s['rss_after_w1_mib']:.1f} MiB "
          f"(peak {s['hwm_after_w1_mib']:.1f}), end {s['rss_end_mib']:.1f} MiB")
    print()
    if "paired" in rep:
        print(f"rmq / the limit server, {rep['args']['paired']} rounds of each load, the two "
              "in turn (per round; median):")
        for key, name in (("w1_16", "4 x 16"), ("w1_64", "4 x 64"), ("w1_1", "4 x 1"),
                          ("c1000_1", "1000 x 1"), ("w1_missing_16", "not found, 4 x 16"),
                          ("w1_zone_16", "zone mode, 4 x 16")):
            p = rep["paired"].get(key)
            if p is None:
                continue
            print(f"  {name:17} answers/s {' '.join(map(str, p['routes']))} -> "
                  f"{p.get('median_routes')}; CPU per answer {' '.join(map(str, p['cpu']))} "
                  f"-> {p.get('median_cpu')}; p50 {' '.join(map(str, p['p50']))} -> "
                  f"{p.get('median_p50')}")
        print()
    if "w1_16" not in rep:
        return
    r16, r1 = rep["w1_16"], rep["w1_1"]
    t16, t1 = REFERENCE["w1_16"], REFERENCE["w1_1"]
    java16 = t16["java_side_by_side"]
    print(f"Java 4.9.8 answering routes on this machine: {t16['java_routes_per_s']} routes/s at"
          f" 4 x 16 ({java16['routes_per_s'] / 1e3:.1f}k, p99 {java16['p99_us'] / 1e3:.1f} ms"
          " in a side-by-side run); no 4 x 1 figure (bench/README.md, Reference figures)")
    print("targets, as set at the time from Java figures later found to be TOPIC_NOT_EXIST"
          " answers (540k = 4.5 x 120k, 60k = 3 x 20k):")
    print(f"  16 in flight {t16['target']} : {verdict(r16['rps'] >= t16['target_rps'])} / "
          f"{verdict(r16['p99_us'] < t16['target_p99_us'])}  "
          f"({r16['rps'] / t16['target_rps']:.0%} of the rate target; "
          f"routes {routes_per_s(r16) / java16['routes_per_s']:.1f} x Java's "
          f"{java16['routes_per_s'] / 1e3:.1f}k/s)")
    print(f"  1 in flight  {t1['target']}: {verdict(r1['rps'] >= t1['target_rps'])} / "
          f"{verdict(r1['p50_us'] <= t1['target_p50_us'])}  "
          f"({r1['rps'] / t1['target_rps']:.0%} of the rate target)")


def answers_per_s(r, code):
    """Answers per second of a loadgen result, every one with ``code`` (0: routes);
    BenchError when some had another."""
    if r["errors"] if code == 0 else r["error_codes"] != {str(code): r["requests"]}:
        raise BenchError(f"{r['label']}: answer codes {r['error_codes']} of {r['requests']} "
                         f"answers, expected only {code}")
    return r["requests"] / r["seconds"] if r["seconds"] else 0.0


def routes_per_s(r):
    """Code-0 answers (routes) per second of a loadgen result: ``rps`` counts every
    answer, ``errors`` those that are not routes."""
    return (r["requests"] - r["errors"]) / r["seconds"] if r["seconds"] else 0.0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="short runs (2 s per load phase, 5 registrations)")
    p.add_argument("--duration", type=float, help="seconds per W1 load phase (10; quick 2)")
    p.add_argument("--warmup", type=float, help="warmup seconds before each W1 phase (2; quick 0.5)")
    p.add_argument("--brokers", type=int, default=8)
    p.add_argument("--topics", type=int, default=10000)
    p.add_argument("--queues", type=int, default=8, help="queues per topic (8)")
    p.add_argument("--conns", type=int, default=4, help="loadgen connections (4)")
    p.add_argument("--compressed", action="store_true", help="compressed register bodies")
    p.add_argument("--during-missing", action="store_true",
                   help="the route-latency runs ask for topics no broker has (every "
                        "answer TOPIC_NOT_EXIST)")
    p.add_argument("--zones", type=int, default=0,
                   help="brokers in this many zones (zone-0, zone-1...; 0: none), and a "
                        "W1 phase of zone-mode queries for zone-0")
    p.add_argument("--reg-count", type=int, help="registrations timed (20; quick 5)")
    p.add_argument("--reg-changes-routes", action="store_true",
                   help="alternate the queue numbers so each registration changes every route")
    p.add_argument("--registrations-only", action="store_true",
                   help="skip the W1 query phases: only registration times and route "
                        "latency quiet and during registrations")
    p.add_argument("--reg-interval", type=float, default=0.25,
                   help="seconds between registrations during the route-latency run (0.25)")
    p.add_argument("--during-rate", type=int, default=5000,
                   help="route requests/s during the registration run (5000)")
    p.add_argument("--during-duration", type=float, help="seconds of that run (5; quick 2)")
    p.add_argument("--flood206", type=int, default=0, metavar="N",
                   help="one more route-latency run at --during-rate, while a client "
                        "pipelines N 206s again and again (issue 30: 500)")
    p.add_argument("--all-at-once", action="store_true",
                   help="one more route-latency run at --during-rate, while registrations "
                        "(back to back), 64 KiB KV puts and floods of --flood206 (or 500) "
                        "206s all run (issue 30's target: no answer waits over 5 ms)")
    p.add_argument("--engine", action="store_true",
                   help="serve with the compiled core's I/O engine (serverEngine=c, the default)")
    p.add_argument("--asyncio", action="store_true",
                   help="serve with the asyncio server (serverEngine=asyncio)")
    p.add_argument("--threads", type=int, default=0,
                   help="its I/O threads (serverIoThreads; implies --engine; 0: one per core)")
    p.add_argument("--limit", action="store_true",
                   help="run the route loads against the limit server too (bench/limitsrv.c); "
                        "with --all-at-once, its routes while the same loads run on rmq")
    p.add_argument("--paired", type=int, metavar="ROUNDS", default=0,
                   help="instead of W1's loads then the limit server's: each of W1's loads "
                        "(4 x 16, 4 x 64, 4 x 1, 1,000 x 1, TOPIC_NOT_EXIST at 4 x 16 and, "
                        "with --zones, zone mode at 4 x 16) on rmq and on the limit server "
                        "in turn, ROUNDS times, and the medians of the rounds' ratios")
    p.add_argument("--pin", action="store_true",
                   help="pin the server to one CPU and loadgen + this script to another")
    p.add_argument("--profile", choices=["perf", "py-spy"],
                   help="profile the server during one phase (--profile-phase)")
    p.add_argument("--trace", action="store_true",
                   help="run the server with --trace-dir (recording every frame)")
    p.add_argument("--samples", action="store_true",
                   help="the route-latency runs write each answer's times to "
                        "<workdir>/<run>.samples (with --trace --keep: where each "
                        "request's time went, bench/trace_latency.py --samples)")
    p.add_argument("--profile-phase", choices=["w1_16", "w1_64", "w1_1", "during"],
                   default="w1_16",
                   help="w1_16, w1_64, w1_1: W1's 4 x 16 (default), 4 x 64 or 4 x 1; "
                        "during: routes during registrations")
    p.add_argument("--profile-out", default="namesrv-profile.data", help="profile output file")
    p.add_argument("--server-log-level", default="info",
                   choices=["debug", "info", "warning", "error"])
    p.add_argument("--json-out", help="write the JSON report to this file too")
    p.add_argument("--deadline", type=float, default=900, help="abort after this many seconds")
    p.add_argument("--rebuild", action="store_true", help="rebuild bench/loadgen")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = p.parse_args(argv)
    quick = args.quick
    if args.duration is None:
        args.duration = 2.0 if quick else 10.0
    if args.warmup is None:
        args.warmup = 0.5 if quick else 2.0
    if args.reg_count is None:
        args.reg_count = 5 if quick else 20
    if args.during_duration is None:
        args.during_duration = 2.0 if quick else 5.0
    if args.paired < 0:
        p.error("--paired takes a number of rounds, at least 1")
    if args.paired and args.profile:
        p.error("--profile profiles one of W1's runs, which --paired runs as rounds: not both")
    if args.paired and args.deadline == p.get_default("deadline"):
        # (each round: four loads on rmq and on the limit server, with warm-up and start)
        args.deadline += args.paired * 8 * (args.duration + args.warmup + 5)

    def on_alarm(signum, frame):
        raise Deadline(f"--deadline {args.deadline:g} s reached")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, args.deadline)
    try:
        rep = run(args)
    except (BenchError, Deadline, OSError, brokersim.RegistrationError,
            subprocess.SubprocessError) as e:
        log(f"load.py: {type(e).__name__}: {e}")
        return 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    print_table(rep)
    line = json.dumps(rep, sort_keys=True)
    print()
    print(line)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rep, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
