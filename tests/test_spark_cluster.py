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
import sys
from collections import Counter
from pathlib import Path

import pytest

import rmq.trace.analyze
from spark_cluster import (StandaloneCluster, clean_env, environment_venv, pack_environment, run,
                           spark_home)

pytestmark = [pytest.mark.slow, pytest.mark.once,
              pytest.mark.requires("java", "pyspark", "pyarrow", "venv-pack")]


@pytest.fixture(scope="module")
def env_venv(tmp_path_factory):
    return environment_venv(tmp_path_factory.mktemp("env"))


@pytest.fixture(scope="module")
def packed_env(env_venv, release_dists):
    _, wheel, _ = release_dists
    archive, seconds = pack_environment(env_venv.parent, wheel, env_venv)
    print(f"packed environment: {archive.stat().st_size / 1e6:.1f} MB in {seconds:.1f} s")
    return archive


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """spark://127.0.0.1:PORT with two workers of one core each."""
    with StandaloneCluster(tmp_path_factory.mktemp("cluster"), workers=2) as c:
        yield c


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("trace") / "segments"
    run([sys.executable, "-m", "rmq", "trace", "synth", "--out", d, "--brokers", 4,
          "--clients", 20, "--minutes", 5, "--topics", 50, "--seed", 7, "--start",
          1700000000, "--segment-mib", 1])
    return d


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, trace):
    out = tmp_path_factory.mktemp("local") / "out"
    run([sys.executable, "-m", "rmq", "trace", "analyze", trace, "--out", out, "--master",
          "local[2]"], env=clean_env(PYSPARK_PYTHON=sys.executable))
    return out


def _summary(out):
    s = json.loads((out / "summary.json").read_text())
    spark = s.pop("spark")
    s.pop("seconds")
    return s, spark


def _rows(table):
    """A parquet table's rows as a multiset, comparable across two writes: a map as its
    sorted entries, a float by its repr (NaN equals NaN)."""
    def value(v):
        if isinstance(v, list):             # a map column: [(key, value), ...]
            return tuple(sorted(v))
        return repr(v) if isinstance(v, float) else v
    return Counter(tuple(value(v) for v in row.values()) for row in table.to_pylist())


def _same_tables(a, b):
    """Frames and requests of two outputs hold the same rows (as multisets). Read with
    pyarrow: the tables are small, and a third Spark session in this process would
    cost more than the job it checks."""
    import pyarrow.parquet as pq
    for table in ("frames.parquet", "requests.parquet"):
        x, y = pq.read_table(a / table), pq.read_table(b / table)
        assert x.schema == y.schema, table
        assert x.num_rows == y.num_rows > 0, table
        assert _rows(x) == _rows(y), table


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


# (packed_env last: the cluster, the trace, the local run and the environment's venv
# are made while the session's wheel is built, on another worker, tests/dists.py)
def test_rmq_trace_analyze_on_the_cluster_equals_local(tmp_path, cluster, trace, local_run,
                                                      env_venv, packed_env):
    out = tmp_path / "out"
    run([sys.executable, "-m", "rmq", "trace", "analyze", trace, "--out", out,
          "--master", cluster.url, "--conf", f"spark.archives={packed_env}#environment",
          "--conf", "spark.pyspark.python=./environment/bin/python"], env=clean_env())
    _check_cluster_output(out, local_run, cluster)


def test_spark_submit_of_the_job_file_on_the_cluster_equals_local(tmp_path, cluster, trace,
                                                                 local_run, packed_env):
    out = tmp_path / "out"
    job = Path(rmq.trace.analyze.__file__)
    # as docs/trace.md says: the workers' Python from the archive, the driver's here
    run([spark_home() / "bin" / "spark-submit", "--master", cluster.url,
          "--archives", f"{packed_env}#environment", job, trace, "--out", out],
         env=clean_env(PYSPARK_PYTHON="./environment/bin/python",
                        PYSPARK_DRIVER_PYTHON=sys.executable))
    _check_cluster_output(out, local_run, cluster)
