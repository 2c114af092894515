"""rmq trace analyze: decoding a trace inside Spark local[2] against the same
partition function run standalone on two cores, and against the same Spark job with
the pure-Python codec.

The issue's targets: Spark local[2] at no less than half the standalone compiled
rate on two cores, and at least 10 times the pure-Python job. Three Spark figures,
from the least to the most work handed to the JVM:
- "spark rdd": binaryFiles + mapPartitions(decode_files), rows counted inside the
  Python workers (the decoding inside Spark, nothing converted to Spark rows);
- "spark df": the frames DataFrame counted (every row pickled to the JVM and
  converted to a Spark row);
- "spark parquet": frames.parquet written (the job's first stage).
The trace: GET_ROUTEINFO_BY_TOPIC requests and answers (a 2-broker route) on 50
connections, a registration every 1000 requests; 300,000 frames in 8 MiB segments
(with --benchmark-disable: 4,000 frames, as a smoke test).
"""

import multiprocessing
import os
import sys

import pytest

pytest.importorskip("pyspark")

import rmq  # noqa: E402
from rmq import analyze, bodies  # noqa: E402
from rmq.trace import IN, OUT, SegmentWriter  # noqa: E402

SRC = os.path.dirname(os.path.dirname(rmq.__file__))
FULL_FRAMES, SMOKE_FRAMES = 300_000, 4_000


def write_trace(directory, frames, segment_bytes):
    route = {"brokerDatas": [{"brokerAddrs": {0: f"10.0.0.{b}:10911", 1: f"10.0.1.{b}:10911"},
                              "brokerName": f"broker-{b}", "cluster": "DefaultCluster"}
                             for b in range(2)],
             "filterServerTable": {},
             "queueDatas": [{"brokerName": f"broker-{b}", "perm": 6, "readQueueNums": 8,
                             "topicSysFlag": 0, "writeQueueNums": 8} for b in range(2)]}
    route_body = bodies.encode_topic_route_data(route)
    register_body = bodies.encode_register_broker_body(bodies.register_broker_body(
        [bodies.topic_config(f"Topic-{i:03d}", 8, 8) for i in range(100)],
        {"counter": 1, "timestamp": 1700000000000}))
    w = SegmentWriter(directory, segment_bytes=segment_bytes)
    t = 1_700_000_000 * 10**9
    for opaque in range(1, frames // 2 + 1):
        conn = opaque % 50
        peer = f"10.1.0.{conn}:{40000 + conn}"
        t += 50_000
        if opaque % 1000 == 0:
            b = opaque // 1000 % 2
            req = rmq.RemotingCommand.request(103, {
                "clusterName": "DefaultCluster", "brokerAddr": f"10.0.0.{b}:10911",
                "brokerName": f"broker-{b}", "brokerId": "0", "haServerAddr": f"10.0.0.{b}:10912",
                "compressed": "false", "bodyCrc32": str(rmq.body_crc32(register_body))},
                register_body, opaque=opaque)
            resp = req.response(0, ext_fields={"masterAddr": "", "haServerAddr": ""})
        else:
            req = rmq.RemotingCommand.request(105, {"topic": f"Topic-{opaque % 500:03d}"},
                                              opaque=opaque)
            resp = req.response(0, body=route_body) if opaque % 50 else req.response(
                17, remark="No topic route info in name server for the topic")
        w.write(t, conn, peer, IN, rmq.encode_frame(req))
        w.write(t + 30_000, conn, peer, OUT, rmq.encode_frame(resp))
    w.close()
    return w.files


@pytest.fixture(scope="module")
def trace(request, tmp_path_factory):
    smoke = request.config.getoption("benchmark_disable", False)
    frames = SMOKE_FRAMES if smoke else FULL_FRAMES
    files = write_trace(tmp_path_factory.mktemp("trace"), frames,
                        256 * 1024 if smoke else 8 * 1024 * 1024)
    return {"files": files, "frames": frames, "smoke": smoke,
            "bytes": sum(os.path.getsize(f) for f in files)}


def rounds(trace):
    return {"rounds": 1, "warmup_rounds": 0} if trace["smoke"] else \
        {"rounds": 5, "warmup_rounds": 2}      # the JVM's JIT warms up over the first jobs


# ---------------------------------------------------------------- standalone

_share = []


def _load_share(paths):
    # in the worker, before timing: its files' bytes, as Spark would hand them over
    _share[:] = [("file:" + p, open(p, "rb").read()) for p in paths]


def _count_share(_):
    return sum(1 for _ in analyze.decode_files(_share, {}))


@pytest.mark.parametrize("impl", ["compiled", "python"])
def test_standalone_1_process(benchmark, figure, trace, impl, monkeypatch):
    import rmq.codec
    import rmq.fallback
    if impl == "python":        # decode_files takes decode_frame from rmq.codec
        monkeypatch.setattr(rmq.codec, "decode_frame", rmq.fallback.decode_frame)
    data = [("file:" + p, open(p, "rb").read()) for p in trace["files"]]
    n = benchmark.pedantic(lambda: sum(1 for _ in analyze.decode_files(data, {})),
                           **rounds(trace))
    assert n == trace["frames"]
    figure(benchmark, f"analyze standalone 1 process {impl}", n, "frames/s")


def test_standalone_2_processes(benchmark, figure, trace):
    # "two cores": two processes, the files split between them by size, the bytes
    # already in memory (spawned: this process may run a JVM and py4j threads)
    shares = [[], []]
    for f in sorted(trace["files"], key=os.path.getsize, reverse=True):
        min(shares, key=lambda s: sum(map(os.path.getsize, s))).append(f)
    ctx = multiprocessing.get_context("spawn")
    pools = [ctx.Pool(1, initializer=_load_share, initargs=(s,)) for s in shares]
    try:
        for p in pools:
            p.apply(_count_share, (None,))        # loaded and warm

        def run():
            pending = [p.apply_async(_count_share, (None,)) for p in pools]
            return sum(r.get() for r in pending)

        n = benchmark.pedantic(run, **rounds(trace))
    finally:
        for p in pools:
            p.terminate()
    assert n == trace["frames"]
    figure(benchmark, "analyze standalone 2 processes", n, "frames/s")


# ---------------------------------------------------------------- Spark local[2]

@pytest.fixture(scope="module", params=["compiled", "python"])
def spark(request):
    """A local[2] session whose Python workers run the compiled core, or the
    pure-Python one (RMQ_PUREPYTHON=1 in the executors' environment)."""
    from pyspark.sql import SparkSession

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYSPARK_PYTHON", sys.executable)
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")])))
        mp.delenv("RMQ_PUREPYTHON", raising=False)
        session = (SparkSession.builder.master("local[2]")
                   .appName(f"rmq-bench-analyze-{request.param}")
                   .config("spark.ui.enabled", "false")
                   .config("spark.sql.shuffle.partitions", "2")
                   .config("spark.driver.memory", "2g")
                   .config("spark.executorEnv.PYTHONPATH", SRC)
                   .config("spark.executorEnv.RMQ_PUREPYTHON",
                           "1" if request.param == "python" else "0")
                   .getOrCreate())
        session.sparkContext.setLogLevel("ERROR")
        # the figure is only worth its name if the workers run that implementation
        impl = session.sparkContext.parallelize([0], 1).map(
            lambda _: __import__("rmq").IMPLEMENTATION).collect()
        assert impl == [request.param]
        yield request.param, session
        session.stop()


def _paths(spark, trace):
    return analyze.list_inputs(spark, trace["files"])


def test_spark_rdd_decode(benchmark, figure, trace, spark):
    impl, session = spark
    paths = _paths(session, trace)
    n = benchmark.pedantic(lambda: analyze.frame_rows(session, paths).count(), **rounds(trace))
    assert n == trace["frames"]
    figure(benchmark, f"analyze spark rdd {impl}", n, "frames/s")


def test_spark_dataframe_count(benchmark, figure, trace, spark):
    impl, session = spark
    paths = _paths(session, trace)
    n = benchmark.pedantic(lambda: analyze.decode_frames(session, paths).count(),
                           **rounds(trace))
    assert n == trace["frames"]
    figure(benchmark, f"analyze spark df {impl}", n, "frames/s")


def test_spark_parquet(benchmark, figure, trace, spark, tmp_path):
    impl, session = spark
    if impl == "python" and not trace["smoke"]:
        pytest.skip("the pure-Python figures are the rdd and df ones")
    paths = _paths(session, trace)
    out = "file:" + str(tmp_path / "frames.parquet")

    def run():
        analyze.decode_frames(session, paths).write.mode("overwrite").parquet(out)

    benchmark.pedantic(run, **rounds(trace))
    assert session.read.parquet(out).count() == trace["frames"]
    figure(benchmark, f"analyze spark parquet {impl}", trace["frames"], "frames/s")


def test_spark_shipping_only(benchmark, figure, trace, spark):
    """The floor under every Spark figure: the files' bytes handed to the Python
    workers (binaryFiles), nothing decoded."""
    impl, session = spark
    if impl == "python":
        pytest.skip("no codec involved")
    paths = _paths(session, trace)
    sc = session.sparkContext

    def run():
        files = sc.binaryFiles(",".join(paths), analyze.default_partitions(sc, len(paths)))
        return files.map(lambda f: len(f[1])).sum()

    assert benchmark.pedantic(run, **rounds(trace)) == trace["bytes"]
    figure(benchmark, "analyze spark bytes shipped only", trace["frames"], "frames/s")
