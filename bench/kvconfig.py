"""KV config: what one change costs when it rewrites kvConfig.json, and when it is
journaled instead (issue 28, item 7), by table size. Chooses maxKvRewriteTableBytes.

    .venv/bin/python bench/kvconfig.py [DIR]
    .venv/bin/python bench/kvconfig.py --routes

DIR (default: a temporary directory under the current one, on the same disk as the
worktree) holds the files. Each size is a table of ORDER_TOPIC_CONFIG-like entries
(a topic name, a "broker-x:8;..." value, about 64 bytes each) in 4 namespaces. The
changes are puts of a new value of the same size to existing keys, through
KVConfig.put: with rewrite_max_table_bytes above the table (every put rewrites the
file, as below the threshold) and at 0 (every put appends to the journal). Per put:
wall time (what the answer waits for), CPU time of the putting thread (what the
table thread spends) and the longest CPU time of one chunk of the snapshot writer
(the longest the GIL is held in one go, what a route answer on the event loop may
wait for because of a change).

--routes: end to end instead. A real ``rmq namesrv`` (bench/load.py's Server) with the
table in kvConfig.json and one broker registered (100 topics); a second process sends
PUT_KV_CONFIG back to back over one connection while this one sends
GET_ROUTEINFO_BY_TOPIC back to back over another and times each answer; both with
maxKvRewriteTableBytes above the table (rewrite) and at 0 (journal), and with no puts.
"""

import argparse
import gc
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(BENCH, "..", "src"))
sys.path.insert(0, BENCH)

from rmq import brokersim  # noqa: E402
from rmq.namesrv import kvconfig  # noqa: E402
from rmq.namesrv.kvconfig import KVConfig  # noqa: E402
from rmq.namesrv.server import WRITER_SWITCH_INTERVAL  # noqa: E402
from rmq.codec import RemotingCommand  # noqa: E402
from rmq.protocol import RequestCode, V4_9_8  # noqa: E402

SIZES = [1 << 10, 4 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10,
         1 << 20, 4 << 20]
NAMESPACES = 4
MAX_PUTS = 100
SECONDS_PER_MODE = 3.0


def value(i, round_no):
    return f"broker-a:8;broker-b:8;broker-c:{round_no % 10};" + "%016d" % i


def table_of(size):
    """A table of about ``size`` table bytes: [(ns, key)], the table."""
    table = {f"ORDER_TOPIC_CONFIG_{n}": {} for n in range(NAMESPACES)}
    keys = []
    total = sum(len(ns) for ns in table)
    i = 0
    while total < size:
        ns = f"ORDER_TOPIC_CONFIG_{i % NAMESPACES}"
        key = "TopicTest-%08d" % i
        table[ns][key] = value(i, 0)
        keys.append((ns, key))
        total += len(key) + len(table[ns][key])
        i += 1
    return keys, table


class ChunkTimer:
    """Stands for kvconfig._snapshot_chunks: the longest CPU time one chunk took. The
    snapshot writer holds the GIL from one chunk's pause to the next (the writes and
    fsyncs release it), so that is the longest a route answer on the event loop can
    wait for the GIL because of a change."""

    def __init__(self):
        self.real = kvconfig._snapshot_chunks
        self.longest = 0.0

    def __call__(self, table, pause=lambda: None):
        chunks = self.real(table, pause)
        while True:
            c = time.thread_time()
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            self.longest = max(self.longest, time.thread_time() - c)
            yield chunk


def measure(directory, size, rewrite):
    keys, table = table_of(size)
    path = os.path.join(directory, "kvConfig.json")
    for name in os.listdir(directory):
        os.unlink(os.path.join(directory, name))
    with open(path, "w", encoding="utf-8") as f:
        f.write(kvconfig._dumps(table))
    kv = KVConfig(path, rewrite_max_table_bytes=(1 << 40) if rewrite else 0,
                  auto_compact=False)
    del table
    gc.collect()
    gc.freeze()     # as `rmq namesrv` does once the table is loaded
    table_bytes = kv.table_bytes
    walls, cpus = [], []
    timer = kvconfig._snapshot_chunks = ChunkTimer()
    deadline = time.monotonic() + SECONDS_PER_MODE
    n = 0
    while n < MAX_PUTS and (n < 10 or time.monotonic() < deadline):
        ns, key = keys[(n * 7919) % len(keys)]
        v = value(n, n + 1)
        t, c = time.perf_counter(), time.thread_time()
        kv.put(ns, key, v)
        cpus.append(time.thread_time() - c)
        walls.append(time.perf_counter() - t)
        n += 1
    kvconfig._snapshot_chunks = timer.real
    file_bytes = os.path.getsize(path)
    kv.close()
    del kv
    gc.unfreeze()
    return table_bytes, file_bytes, walls, cpus, timer.longest


def ms(x):
    return f"{x * 1e3:.2f}"


def pct(xs, q):
    return sorted(xs)[int(q * (len(xs) - 1))]


ROUTE_SIZES = [64 << 10, 1 << 20]
ROUTE_SECONDS = 5.0


def put_loop(address, keys, stop, puts):
    conn = brokersim.SimBroker(address, 997, timeout=30)
    n = 0
    while not stop.is_set():
        ns, key = keys[(n * 7919) % len(keys)]
        resp = conn.call(RemotingCommand.request(
            RequestCode.PUT_KV_CONFIG, {"namespace": ns, "key": key, "value": value(n, n + 1)},
            version=V4_9_8))
        assert resp.code == 0, resp
        n += 1
    puts.value = n
    conn.close()


def route_latencies(size, mode):
    """(table bytes, puts per second, [seconds per route answer]) with ``mode`` one of
    "rewrite", "journal", "no puts"."""
    import load
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="kvbench.", dir=os.getcwd()) as work:
        keys, table = table_of(size)
        with open(os.path.join(work, "kvConfig.json"), "w", encoding="utf-8") as f:
            f.write(kvconfig._dumps(table))
        limit = 0 if mode == "journal" else 1 << 40
        server = load.Server(work, properties={"maxKvRewriteTableBytes": str(limit)}).start()
        stop, puts = ctx.Event(), ctx.Value("q", 0)
        putter = None
        brokers = []
        try:
            brokers = brokersim.register_brokers(server.address, 1, brokersim.topic_names(100))
            query = brokersim.SimBroker(server.address, 998, timeout=30)
            cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                          {"topic": "T-00001"}, version=V4_9_8)
            assert query.call(cmd).code == 0
            if mode != "no puts":
                putter = ctx.Process(target=put_loop, args=(server.address, keys, stop, puts))
                putter.start()
                time.sleep(0.5)
            times = []
            started = time.perf_counter()
            end = time.monotonic() + ROUTE_SECONDS
            while time.monotonic() < end:
                cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                              {"topic": "T-00001"}, version=V4_9_8)
                t = time.perf_counter()
                resp = query.call(cmd)
                times.append(time.perf_counter() - t)
                assert resp.code == 0, resp
            elapsed = time.perf_counter() - started
            query.close()
        finally:
            stop.set()
            if putter is not None:
                putter.join(30)
            brokersim.close_all(brokers)
            server.stop()
        rate = puts.value / (elapsed + 0.5) if putter is not None else 0.0
        return kvconfig._table_size(table, None), rate, times


def routes_main():
    print("load average %.1f %.1f %.1f, %d CPUs" % (*os.getloadavg(), os.cpu_count()))
    print("| table bytes | puts | puts/s | route answer p50 / p99 / p99.9 / max ms | "
          "route answers |")
    print("|---|---|---|---|---|")
    for size in ROUTE_SIZES:
        for mode in ("no puts", "journal", "rewrite"):
            tb, rate, times = route_latencies(size, mode)
            print(f"| {tb:,} | {mode} | {rate:,.0f} | {ms(pct(times, 0.5))} / "
                  f"{ms(pct(times, 0.99))} / {ms(pct(times, 0.999))} / {ms(max(times))} | "
                  f"{len(times):,} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", nargs="?", help="where the files go")
    parser.add_argument("--routes", action="store_true",
                        help="route answer latency of a real server during puts")
    args = parser.parse_args()
    if args.routes:
        routes_main()
        return
    sys.setswitchinterval(WRITER_SWITCH_INTERVAL)
    own = args.dir is None
    directory = tempfile.mkdtemp(prefix="kvbench.", dir=".") if own else args.dir
    os.makedirs(directory, exist_ok=True)
    print("load average %.1f %.1f %.1f, %d CPUs" % (*os.getloadavg(), os.cpu_count()))
    print("| table bytes | file bytes | rewrite: wall median / p90 ms | rewrite: CPU "
          "median ms | rewrite: longest GIL hold ms | journal: wall median / p90 ms | "
          "journal: CPU median ms | puts |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        for size in SIZES:
            tb, fb, rw, rc, rg = measure(directory, size, rewrite=True)
            _, _, jw, jc, _ = measure(directory, size, rewrite=False)
            print(f"| {tb:,} | {fb:,} | {ms(statistics.median(rw))} / {ms(pct(rw, 0.9))} | "
                  f"{ms(statistics.median(rc))} | {ms(rg)} | "
                  f"{ms(statistics.median(jw))} / {ms(pct(jw, 0.9))} | "
                  f"{ms(statistics.median(jc))} | {len(rw)} / {len(jw)} |",
                  flush=True)
    finally:
        if own:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
