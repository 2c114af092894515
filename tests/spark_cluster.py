"""A Spark standalone cluster on this machine, from the installed pyspark's own jars,
and a packed rmq environment to ship to it (tests/test_spark_cluster.py, and
bench/cluster.py, which imports it from here).

:func:`pack_environment` installs an rmq wheel of this tree (built here, or the one
the test session built already: tests/dists.py) into a fresh venv and packs that with
venv-pack: the executors import the compiled core from the archive, with rmq not
installed where the workers run. :class:`StandaloneCluster`
starts ``spark-class ...deploy.master.Master`` and N ``...deploy.worker.Worker``
processes (separate JVMs, each worker with its own work directory), all bound to
127.0.0.1, every wait bounded, and stops them on exit.
"""

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Every wait (a start, a build, a job) is bounded by this many seconds.
TIMEOUT = 240


def spark_home():
    import pyspark
    return Path(pyspark.__file__).resolve().parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, timeout=TIMEOUT, **kw):
    """Run ``cmd``; its CompletedProcess, or AssertionError with its output's end."""
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                       timeout=timeout, **kw)
    assert p.returncode == 0, f"{cmd}: {p.stdout[-2000:]}{p.stderr[-4000:]}"
    return p


def clean_env(**more):
    """This environment without what would hand rmq to the workers another way."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                        "RMQ_PUREPYTHON")}
    env.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1", **more)
    return env


def environment_venv(directory):
    """``directory``/venv: a fresh venv with what the tasks need besides rmq. Made apart
    from :func:`pack_environment`, so that a test can make it while the wheel builds."""
    venv = Path(directory) / "venv"
    # the driver's Python version: a Python worker must match the driver's minor version
    run([sys.executable, "-m", "venv", venv])
    # pyarrow: the tasks decode into Arrow batches and write frames.parquet with it
    run([venv / "bin" / "python", "-m", "pip", "install", "-q", "pyarrow"])
    return venv


def pack_environment(directory, wheel=None, venv=None):
    """``directory``/rmq_env.tar.gz (see the module doc): ``venv`` (one
    :func:`environment_venv` made) with ``wheel`` installed, or one built from this tree;
    (its path, seconds to pack)."""
    d = Path(directory)
    if wheel is None:
        run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", d / "wheel", ROOT])
        [wheel] = (d / "wheel").glob("rmq-*.whl")
    venv = venv or environment_venv(d)
    run([venv / "bin" / "python", "-m", "pip", "install", "-q", wheel])
    archive = d / "rmq_env.tar.gz"
    started = time.monotonic()
    run([Path(sys.executable).parent / "venv-pack", "-p", venv, "-o", archive, "-q"])
    return archive, time.monotonic() - started


def _wait_for_line(path, pattern, count, proc):
    deadline = time.monotonic() + TIMEOUT
    text = ""
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        if len(re.findall(pattern, text)) >= count:
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} x{count} not in {path}:\n{text[-3000:]}")


class StandaloneCluster:
    """``with StandaloneCluster(dir, workers=2) as c``: ``c.url`` (spark://127.0.0.1:PORT),
    ``c.work_dirs`` (one per worker); logs in ``dir``."""

    def __init__(self, directory, workers=2, cores=1, memory="1g"):
        self.dir = Path(directory)
        self.workers, self.cores, self.memory = workers, cores, memory
        self.work_dirs = [self.dir / f"work{i}" for i in range(workers)]
        self.url = None
        self._procs = []

    def _start(self, name, *args):
        with open(self.dir / f"{name}.log", "wb") as log:
            proc = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *map(str, args)],
                                    stdout=log, stderr=subprocess.STDOUT, cwd=self.dir,
                                    env=clean_env(SPARK_LOG_DIR=str(self.dir)))
        self._procs.append(proc)
        return proc

    def __enter__(self):
        self.dir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self.url = f"spark://127.0.0.1:{port}"
        try:
            master = self._start("master", "org.apache.spark.deploy.master.Master", "--host",
                                 "127.0.0.1", "--port", port, "--webui-port", free_port())
            _wait_for_line(self.dir / "master.log", r"I have been elected leader", 1, master)
            for i, work in enumerate(self.work_dirs):
                self._start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host",
                            "127.0.0.1", "--webui-port", free_port(), "--cores", self.cores,
                            "--memory", self.memory, "--work-dir", work, self.url)
            _wait_for_line(self.dir / "master.log", r"Registering worker", self.workers, master)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for proc in self._procs:
            proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
        self._procs = []
