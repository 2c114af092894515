"""The trace job on a real Spark standalone cluster (issue 17): a master and two
workers started from the installed pyspark's own jars (``spark-class``, separate
JVMs, each worker with its own work directory, all on 127.0.0.1); the executors'
Python is a packed environment (venv-pack of a venv with the rmq wheel installed)
shipped with the job as ``spark.archives``, so they import the compiled core
without rmq being installed where the workers run. ``rmq trace analyze --master
spark://...`` and ``spark-submit`` of the job file must give the same frames,
requests and summary counts as a ``local[2]`` run on the same inputs.

``make spark-cluster-test`` runs this module alone (about 3 minutes)."""

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rmq.trace.analyze

pytestmark = [pytest.mark.slow, pytest.mark.once]

ROOT = Path(__file__).resolve().parent.parent
#: Every wait of the cluster's start, each job and the teardown is bounded by this.
TIMEOUT = 240


def _spark_home():
    import pyspark
    return Path(pyspark.__file__).resolve().parent


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd, **kw):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                       timeout=TIMEOUT, **kw)
    assert p.returncode == 0, f"{cmd}: {p.stdout[-2000:]}{p.stderr[-4000:]}"
    return p


def _clean_env(**more):
    """This environment without what would hand rmq to the workers another way."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                        "RMQ_PUREPYTHON")}
    env.update(SPARK_HOME=str(_spark_home()), SPARK_LOCAL_IP="127.0.0.1", **more)
    return env


@pytest.fixture(scope="module")
def packed_env(tmp_path_factory):
    """rmq_env.tar.gz: a venv with the rmq wheel (built from this tree, the core
    compiled in it), packed by venv-pack."""
    d = tmp_path_factory.mktemp("env")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", d / "wheel", ROOT])
    [wheel] = (d / "wheel").glob("rmq-*.whl")
    # the driver's Python version: a Python worker must match the driver's minor version
    _run([sys.executable, "-m", "venv", d / "venv"])
    _run([d / "venv" / "bin" / "python", "-m", "pip", "install", "-q", wheel])
    archive = d / "rmq_env.tar.gz"
    started = time.monotonic()
    _run([Path(sys.executable).parent / "venv-pack", "-p", d / "venv", "-o", archive, "-q"])
    print(f"packed environment: {archive.stat().st_size / 1e6:.1f} MB in "
          f"{time.monotonic() - started:.1f} s")
    return archive


def _wait_for_line(path, pattern, count=1, proc=None):
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        if len(re.findall(pattern, text)) >= count:
            return
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} x{count} not in {path}:\n{text[-3000:]}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """spark://127.0.0.1:PORT with two workers of one core each; the workers' work
    directories in ``.work_dirs``."""
    d = tmp_path_factory.mktemp("cluster")
    spark_class = _spark_home() / "bin" / "spark-class"
    env = _clean_env(SPARK_LOG_DIR=str(d), SPARK_WORKER_DIR=str(d / "work"))
    procs = []

    def start(name, *args):
        log = open(d / f"{name}.log", "wb")
        proc = subprocess.Popen([str(spark_class), *map(str, args)], stdout=log,
                                stderr=subprocess.STDOUT, env=env, cwd=d)
        log.close()
        procs.append(proc)
        return proc

    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    work_dirs = [d / "work0", d / "work1"]
    try:
        master = start("master", "org.apache.spark.deploy.master.Master", "--host",
                       "127.0.0.1", "--port", port, "--webui-port", _free_port())
        _wait_for_line(d / "master.log", r"I have been elected leader", proc=master)
        for i, work in enumerate(work_dirs):
            start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                  "--webui-port", _free_port(), "--cores", 1, "--memory", "1g",
                  "--work-dir", work, url)
        _wait_for_line(d / "master.log", r"Registering worker", count=2, proc=master)
        yield type("Cluster", (), {"url": url, "work_dirs": work_dirs, "dir": d})
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("trace") / "segments"
    _run([sys.executable, "-m", "rmq", "trace", "synth", "--out", d, "--brokers", 4,
          "--clients", 20, "--minutes", 5, "--topics", 50, "--seed", 7, "--start",
          1700000000, "--segment-mib", 1])
    return d


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, trace):
    out = tmp_path_factory.mktemp("local") / "out"
    _run([sys.executable, "-m", "rmq", "trace", "analyze", trace, "--out", out, "--master",
          "local[2]"], env=_clean_env(PYSPARK_PYTHON=sys.executable))
    return out


def _summary(out):
    s = json.loads((out / "summary.json").read_text())
    spark = s.pop("spark")
    s.pop("seconds")
    return s, spark


def _same_tables(a, b):
    """Frames and requests of two outputs hold the same rows (as multisets)."""
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[1]").appName("rmq-test-cluster-compare")
             .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType

    def comparable(df):
        # set operations take no MAP column: a map as its entries, sorted
        return df.select([F.array_sort(F.map_entries(f.name)).alias(f.name)
                          if isinstance(f.dataType, MapType) else F.col(f.name)
                          for f in df.schema.fields])
    for table in ("frames.parquet", "requests.parquet"):
        x = spark.read.parquet(str(a / table))
        y = spark.read.parquet(str(b / table))
        assert x.schema == y.schema, table
        x, y = comparable(x), comparable(y)
        assert x.count() == y.count() > 0, table
        assert x.exceptAll(y).count() == 0 and y.exceptAll(x).count() == 0, table


def _check_cluster_output(out, local_run, cluster):
    s, spark = _summary(out)
    expected, local_spark = _summary(local_run)
    assert s == expected
    assert spark["master"] == cluster.url and local_spark["master"] == "local[2]"
    assert spark["executor_implementation"] == ["compiled"]
    # one executor on each worker, each running the shipped environment unpacked in
    # its work directory (not this test's Python, which has rmq installed)
    pythons = spark["executor_python"]
    assert len(pythons) == 2, pythons
    for work in cluster.work_dirs:
        assert [p for p in pythons if p.startswith(str(work)) and "environment" in p], \
            (work, pythons)
    assert sys.prefix not in pythons
    _same_tables(out, local_run)


def test_rmq_trace_analyze_on_the_cluster_equals_local(tmp_path, cluster, packed_env, trace,
                                                      local_run):
    out = tmp_path / "out"
    _run([sys.executable, "-m", "rmq", "trace", "analyze", trace, "--out", out,
          "--master", cluster.url, "--conf", f"spark.archives={packed_env}#environment",
          "--conf", "spark.pyspark.python=./environment/bin/python"], env=_clean_env())
    _check_cluster_output(out, local_run, cluster)


def test_spark_submit_of_the_job_file_on_the_cluster_equals_local(tmp_path, cluster,
                                                                 packed_env, trace, local_run):
    out = tmp_path / "out"
    job = Path(rmq.trace.analyze.__file__)
    # as docs/trace.md says: the workers' Python from the archive, the driver's here
    _run([_spark_home() / "bin" / "spark-submit", "--master", cluster.url,
          "--archives", f"{packed_env}#environment", job, trace, "--out", out],
         env=_clean_env(PYSPARK_PYTHON="./environment/bin/python",
                        PYSPARK_DRIVER_PYTHON=sys.executable))
    _check_cluster_output(out, local_run, cluster)
