"""rmq trace analyze: decoding a trace inside Spark local[2] against the same
partition function run standalone on two cores, and against the same Spark job with
the pure-Python codec.

The issue's targets: Spark local[2] at no less than half the standalone compiled
rate on two cores, and at least 10 times the pure-Python job. The Spark figures,
from the least to the most work handed to the JVM:
- "spark rdd <reader>": the inputs decoded into Arrow batches and their rows counted
  inside the Python workers (the decoding inside Spark, nothing handed to the JVM),
  the workers opening the files themselves ("workers", the default for file: inputs)
  or handed their bytes by binaryFiles ("spark", as for hdfs:// inputs);
- "spark df": the frames DataFrame counted (every row made in Python, pickled to the
  JVM and converted to a Spark row);
- "spark parquet <writer>": frames.parquet written (the job's first stage), by each
  task from the columns with Arrow's writer ("arrow", the default for file: outputs)
  or by Spark from rows ("spark", for outputs only Hadoop reaches).
The standalone figures decode the same files' bytes already in memory into Arrow
batches (the job's partition function): no I/O at all.
The trace: ``rmq trace synth`` with 2,000 clients polling the routes of 10 topics
every 30 s, 2 brokers of 100 topics registering every 30 s, KV traffic and errors:
about 3.2 million frames, 1 GB in 64 MiB segments (with --benchmark-disable: a
small one, as a smoke test).
"""

import multiprocessing
import os
import sys

import pytest

pytest.importorskip("pyspark")

import rmq  # noqa: E402
from rmq.trace import analyze  # noqa: E402
from rmq.trace.synth import synthesize  # noqa: E402

SRC = os.path.dirname(os.path.dirname(rmq.__file__))
FULL = dict(brokers=2, topics=100, clients=2000, minutes=38, segment_bytes=64 << 20)
SMOKE = dict(brokers=2, topics=20, clients=20, minutes=2, segment_bytes=256 << 10)


@pytest.fixture(scope="module")
def trace(request, tmp_path_factory):
    smoke = request.config.getoption("benchmark_disable", False)
    out = tmp_path_factory.mktemp("trace")
    m = synthesize(out, seed=1, start=1_700_000_000, **(SMOKE if smoke else FULL))
    return {"files": [str(out / f) for f in m["files"]], "frames": m["frames"], "smoke": smoke, "bytes": m["bytes"]}


def rounds(trace, impl="compiled"):
    if trace["smoke"]:
        return {"rounds": 1, "warmup_rounds": 0}
    if impl == "python":        # ~15 s a round: the JIT's warm-up is noise next to it
        return {"rounds": 1, "warmup_rounds": 1}
    return {"rounds": 5, "warmup_rounds": 2}    # the JVM's JIT warms up over the first jobs


# ---------------------------------------------------------------- standalone

_share = []


def _load_share(paths):
    # in the worker, before timing: its files' bytes, as Spark would hand them over
    _share[:] = [("file:" + p, open(p, "rb").read()) for p in paths]


def _count_share(_):
    return _frames(analyze.decode_files(_share, {}))


def _frames(batches):
    return sum(b.num_rows for b in batches)


@pytest.mark.parametrize("impl", ["compiled", "python"])
def test_standalone_1_process(benchmark, figure, trace, impl, monkeypatch):
    import rmq._impl
    import rmq.codec
    import rmq.fallback
    files = trace["files"]
    if impl == "python":        # the reference's rows and frame decoder
        monkeypatch.setattr(rmq._impl, "core", rmq.fallback)
        monkeypatch.setattr(rmq.codec, "decode_frame", rmq.fallback.decode_frame)
        files = files[:1]       # ~30 s for the whole trace: its first segment tells the rate
    data = [("file:" + p, open(p, "rb").read()) for p in files]
    expected = _frames(analyze.decode_files(data, {}))
    n = benchmark.pedantic(lambda: _frames(analyze.decode_files(data, {})), **rounds(trace))
    assert n == expected and (impl == "python" or n == trace["frames"])
    figure(benchmark, f"analyze standalone 1 process {impl}", n, "frames/s")


def test_standalone_2_processes(benchmark, figure, trace):
    # "two cores": two processes, the files split between them by size, the bytes
    # already in memory (spawned: this process may run a JVM and py4j threads)
    shares = analyze._balanced_groups(trace["files"], 2)     # as the Spark job groups them
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


@pytest.mark.parametrize("reader", ["workers", "spark"])
def test_spark_rdd_decode(benchmark, figure, trace, spark, reader):
    impl, session = spark
    if impl == "python" and reader == "spark" and not trace["smoke"]:
        pytest.skip("the pure-Python job's figure is the default reader's")
    paths = _paths(session, trace)
    n = benchmark.pedantic(lambda: analyze.frame_batches(session, paths, reader=reader)
                           .map(lambda b: b.num_rows).sum(), **rounds(trace, impl))
    assert n == trace["frames"]
    figure(benchmark, f"analyze spark rdd {reader} {impl}", n, "frames/s")


def test_spark_dataframe_count(benchmark, figure, trace, spark):
    impl, session = spark
    paths = _paths(session, trace)
    n = benchmark.pedantic(lambda: analyze.decode_frames(session, paths).count(),
                           **rounds(trace, impl))
    assert n == trace["frames"]
    figure(benchmark, f"analyze spark df {impl}", n, "frames/s")


@pytest.mark.parametrize("writer", ["arrow", "spark"])
def test_spark_parquet(benchmark, figure, trace, spark, tmp_path, writer):
    impl, session = spark
    if impl == "python" and not trace["smoke"] and writer == "spark":
        pytest.skip("the pure-Python figures are the rdd, df and arrow-parquet ones")
    paths = _paths(session, trace)
    out = str(tmp_path)

    def run():
        # the job's two tables: the arrow writer's tasks write requests.parquet's
        # parts with frames.parquet's; Spark's writer pairs them in a job of its own
        analyze.write_requests(session, out, analyze.write_frames(session, paths, out,
                                                                  writer=writer))

    benchmark.pedantic(run, **rounds(trace, impl))
    frames = session.read.parquet("file:" + str(tmp_path / "frames.parquet"))
    assert frames.count() == trace["frames"]
    assert frames.schema == analyze.frames_schema()
    requests = session.read.parquet("file:" + str(tmp_path / "requests.parquet"))
    assert requests.schema == analyze.requests_schema() and requests.count() > 0
    figure(benchmark, f"analyze spark parquet {writer} {impl}", trace["frames"], "frames/s")


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
