"""rmq trace analyze: a Spark job over trace segments (and pcap captures).

Each input file is one binary record; ``mapPartitions`` decodes them with the
compiled codec inside the executors' Python workers into Arrow columns
(:mod:`rmq.trace.arrow`), and the tasks write the Parquet parts themselves: no row
crosses into the JVM (:data:`WRITERS`). ``file:`` inputs are opened by the workers
themselves, others are handed over by ``binaryFiles`` (:data:`READERS`). Outputs
under ``--out``:

- ``frames.parquet``: one row per frame (a frame that does not decode, or a file that
  cannot be read, is a row with ``decode_error`` set: the job never fails on data);
- ``requests.parquet``: one row per request, joined by (conn, opaque) to its answer
  with ``latency_us`` (null when oneway or unanswered): paired within each input by
  the tasks, and across the inputs by Spark only for the keys left open there;
- ``summary.json``, ``report.html`` and its PNG charts (:mod:`rmq.trace.report`), made
  from small aggregates collected to the driver: the frames never are.

Runs as ``rmq trace analyze`` and as ``spark-submit src/rmq/trace/analyze.py``. Bare input
and output paths are the driver's files (``file:`` URIs for Spark); on a cluster give
URIs of its storage (``hdfs://``, ``s3a://``).
"""

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import typing

__all__ = ["add_arguments", "main", "analyze", "list_inputs", "default_partitions",
           "check_inputs", "java_problem", "spark_conf", "start_spark", "Progress", "Unusable",
           "frame_batches", "decode_frames", "write_frames", "write_requests", "Written",
           "frames_schema", "requests_schema", "frame_counts", "broker_summary",
           "decode_files", "decode_paths", "READERS", "WRITERS",
           "requests_table", "aggregate",
           "executor_implementations", "executor_environments", "choose_bucket_ns",
           "DEFAULT_HEARTBEAT_TIMEOUT_MS"]

#: The NameServer drops a broker silent for longer than this (heartbeatTimeoutMillis).
DEFAULT_HEARTBEAT_TIMEOUT_MS = 120_000
TOP_TOPICS = 20
#: Decode what the recording server accepted, whatever its maxFrameLength was.
_MAX_FRAME = (1 << 31) - 1
# Bucket sizes for the request mix over time; the smallest giving at most
# _MAX_BUCKETS buckets is chosen.
_BUCKETS_S = (0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800,
              3600, 7200, 21600, 43200, 86400)
_MAX_BUCKETS = 120


# ---------------------------------------------------------------- command line

def _ports(text):
    try:
        ports = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        ports = ()
    if not ports or not all(0 < p < 65536 for p in ports):
        raise argparse.ArgumentTypeError(f"expected PORT[,PORT...], got {text!r}")
    return ports


def _conf_pair(text):
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def positive_int(text):
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def add_arguments(parser):
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="trace segments or pcap captures, or directories of them "
                             "(bare paths are the driver's files; URIs such as hdfs://... "
                             "are passed to Spark)")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="output directory: frames.parquet, requests.parquet, "
                             "summary.json, report.html and its charts")
    parser.add_argument("--master", default=None, metavar="URL",
                        help="Spark master (default: spark-submit's --master, else local[*])")
    parser.add_argument("--conf", action="append", type=_conf_pair, default=[],
                        metavar="KEY=VALUE",
                        help="a Spark setting, as spark-submit's --conf (repeatable), e.g. "
                             "spark.archives=rmq_env.tar.gz#environment")
    parser.add_argument("--server-ports", type=_ports, default=(9876,), metavar="PORT[,PORT]",
                        help="for pcap inputs: the NameServer's ports, which say the "
                             "direction of each frame (default 9876)")
    parser.add_argument("--partitions", type=positive_int, default=None, metavar="N",
                        help="spread the input files over at least N partitions "
                             "(a file is never split)")
    parser.add_argument("--reader", choices=READERS, default="auto",
                        help="how the executors get the files: 'spark' reads them with "
                             "binaryFiles (any Hadoop filesystem); 'workers' (and 'auto') "
                             "lets the Python workers open file: inputs themselves, "
                             "which skips copying them through the JVM (default auto)")
    parser.add_argument("--writer", choices=WRITERS, default="auto",
                        help="how frames.parquet and requests.parquet are written: 'arrow' "
                             "(each task writes its parts from the decoded columns; an "
                             "output on a file system the "
                             "workers share), 'spark' (rows handed to Spark's writer; any "
                             "Hadoop filesystem), 'auto' (arrow where it can; default)")
    parser.add_argument("--verbose", action="store_true",
                        help="Spark's own logs (from WARN) and stage progress bars on stderr "
                             "(default: errors only)")
    parser.add_argument("--ui", action="store_true",
                        help="keep the Spark web UI (http://localhost:4040) on while the job runs")
    parser.add_argument("--progress", action="store_true",
                        help="progress lines on stderr even when it is not a terminal "
                             "(on a terminal they are always shown)")
    return parser


def main(args):
    """Run the analysis; the exit status (0 done, 1 failed, 2 unusable inputs or no
    Java: said in one line before Spark starts)."""
    progress = Progress(enabled=True if getattr(args, "progress", False) else None)
    try:
        check_inputs(args.inputs)
    except Unusable as e:
        print(f"rmq trace analyze: {e}", file=sys.stderr)
        return 2
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        print("rmq trace analyze: needs pyspark (pip install 'rmq[trace]')", file=sys.stderr)
        return 1
    # An active session (a test's) is used and left running.
    spark = SparkSession.getActiveSession()
    owned = spark is None
    if owned:
        # spark-submit has started the JVM already (and says where in PYSPARK_GATEWAY_PORT)
        if "PYSPARK_GATEWAY_PORT" not in os.environ and "SPARK_REMOTE" not in os.environ:
            problem = java_problem()
            if problem:
                print(f"rmq trace analyze: {problem}", file=sys.stderr)
                return 2
        try:
            with progress.phase("starting Spark"):
                spark = start_spark(args.master, verbose=getattr(args, "verbose", False),
                                    ui=getattr(args, "ui", False),
                                    extra=getattr(args, "conf", ()))
        except Exception as e:
            print(f"rmq trace analyze: Spark did not start: {_one_line(e)}"
                  f"{'' if getattr(args, 'verbose', False) else ' (--verbose says more)'}",
                  file=sys.stderr)
            return 1
    try:
        summary = analyze(spark, args.inputs, args.out, server_ports=args.server_ports,
                          partitions=args.partitions, reader=args.reader,
                          writer=getattr(args, "writer", "auto"), progress=progress)
    except NoInputs as e:
        print(f"rmq trace analyze: {e}", file=sys.stderr)
        return 2
    except Exception as e:      # a Spark or I/O failure: said in one line, not a traceback
        print(f"rmq trace analyze: {_one_line(e)}", file=sys.stderr)
        return 1
    finally:
        if owned:
            spark.stop()
    if "python" in summary["spark"]["executor_implementation"]:
        print("rmq trace analyze: the executors decoded with the pure-Python codec "
              "(rmq._core is not importable there), several times slower", file=sys.stderr)
    print(f"{summary['frames']} frames ({summary['undecodable_frames']} undecodable, "
          f"{summary['unreadable_inputs']} unreadable inputs), {summary['requests']} requests, "
          f"{summary['errors']} error answers -> {args.out}")
    return 0


def _one_line(e):
    first_line = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first_line}"


class Unusable(ValueError):
    """An input or the environment the job cannot run with (exit status 2)."""


# ---------------------------------------------------------------- before Spark starts

_GLOB = re.compile(r"[*?\[{]")


def check_inputs(inputs):
    """Raise :class:`Unusable` (one line) unless every input on this machine (a
    bare path, a ``file:`` URI) exists and is readable, and bare paths name at
    least one trace file: said before a JVM starts. Other URIs (hdfs://, s3a://)
    and ``file:`` globs are Spark's to resolve."""
    bare = []
    for p in map(os.fspath, inputs):
        if _is_uri(p) and not p.startswith("file:"):
            continue
        local = _local_path(p) if p.startswith("file:") else p
        if p.startswith("file:") and _GLOB.search(local):
            continue
        if not os.path.exists(local):
            raise Unusable(f"{p}: no such file or directory")
        if os.path.isdir(local):
            try:
                os.listdir(local)
            except OSError as e:
                raise Unusable(f"{p}: cannot list the directory: {e.strerror}") from None
        else:
            try:
                with open(local, "rb"):
                    pass
            except OSError as e:
                raise Unusable(f"{p}: cannot read: {e.strerror}") from None
        if not _is_uri(p):
            bare.append(p)
    if len(bare) == len(inputs) and not _local_inputs(bare):
        raise Unusable(f"no trace segments or captures in {' '.join(map(str, inputs))}")


def _local_inputs(paths):
    from rmq.trace.segments import segment_files
    return segment_files(paths)


#: The oldest Java each Spark major version runs on.
_MIN_JAVA = {3: 8, 4: 17}


def java_problem(environ=None):
    """Why pyspark could not start its JVM here (one line), or None. Looks where
    Spark's launcher does: $JAVA_HOME/bin/java when JAVA_HOME is set, else java on
    PATH; that java must run and be recent enough for this pyspark."""
    environ = os.environ if environ is None else environ
    home = environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not os.access(java, os.X_OK):
            return f"JAVA_HOME is {home}, which has no bin/java: Spark needs a JDK"
    else:
        java = shutil.which("java", path=environ.get("PATH", os.defpath))
        if not java:
            return ("Spark needs a JDK (17 or later): none found (no java on PATH, "
                    "JAVA_HOME not set)")
    try:
        p = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30,
                           env=dict(environ))
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{java} -version did not run: {e}"
    said = (p.stderr + p.stdout).strip()
    if p.returncode != 0:
        return f"{java} -version failed: {(said.splitlines() or ['exit ' + str(p.returncode)])[0]}"
    m = re.search(r'version "(\d+)(?:\.(\d+))?', said)
    if m:
        major = int(m.group(2) or 0) if m.group(1) == "1" else int(m.group(1))
        need = _MIN_JAVA.get(_spark_major(), 17)
        if major < need:
            return f"{java} is Java {major}; this Spark (pyspark {_spark_version()}) needs {need} or later"
    return None


def _spark_version():
    try:
        from importlib.metadata import version
        return version("pyspark")
    except Exception:
        return "?"


def _spark_major():
    try:
        return int(_spark_version().split(".")[0])
    except ValueError:
        return 4


# ---------------------------------------------------------------- starting Spark

#: Spark's log4j2 configuration unless --verbose: errors only, and no "Setting
#: default log level" notice (Spark prints it unless the logger of the class that
#: starts the logging has a level of its own equal to the root's).
_QUIET_LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.spark.name = org.apache.spark
logger.spark.level = error
"""


def _is_local(master):
    return master == "local" or master.startswith("local[")


def spark_conf(master, *, verbose=False, ui=False, log4j_file=None):
    """The Spark settings ``rmq trace analyze`` starts its session with (a dict):
    no web UI unless ``ui``; unless ``verbose`` no stage progress bars and, given
    ``log4j_file`` (:data:`_QUIET_LOG4J`), no log below ERROR from the JVM's start
    on; on a local master, the driver on 127.0.0.1 (nothing listens outside)."""
    conf = {"spark.app.name": "rmq trace analyze", "spark.master": master}
    if not ui:
        conf["spark.ui.enabled"] = "false"
    if not verbose:
        conf["spark.ui.showConsoleProgress"] = "false"
        if log4j_file:
            conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{log4j_file}"
    if _is_local(master):
        conf["spark.driver.host"] = conf["spark.driver.bindAddress"] = "127.0.0.1"
    return conf


def start_spark(master=None, *, verbose=False, ui=False, extra=()):
    """A SparkSession configured by :func:`spark_conf` and then ``extra`` ((key,
    value) pairs: ``--conf``). Under spark-submit (which has started the JVM) its
    settings stay, except ``master`` when given; else the JVM is started here, and
    unless ``verbose`` its stderr is passed on without the JVM's own "WARNING:" lines
    (jdk.incubator.vector)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    if "PYSPARK_GATEWAY_PORT" in os.environ:
        SparkContext._ensure_initialized()
        conf = SparkConf()          # spark-submit's settings, as the JVM has them
        master = master or conf.get("spark.master", "local[*]")
        for k, v in spark_conf(master, verbose=verbose, ui=ui).items():
            if not conf.contains(k) or (k == "spark.master" and master):
                conf.set(k, v)
        conf.setAll(extra)
        spark = SparkSession.builder.config(conf=conf).getOrCreate()
    else:
        master = master or "local[*]"
        python = dict(extra).get("spark.pyspark.python")
        if python:
            # what spark-submit does with it: PySpark takes the workers' Python from
            # the environment only (e.g. ./environment/bin/python of spark.archives)
            os.environ["PYSPARK_PYTHON"] = python
        if _is_local(master):
            # Local workers are this machine's: run them on this Python (with rmq and
            # its core), not whatever "python3" is on PATH; Spark's own address lookup
            # (and its warning about a loopback hostname) skipped.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        with tempfile.TemporaryDirectory(prefix="rmq-analyze-") as tmp:
            log4j = None
            if not verbose:
                log4j = os.path.join(tmp, "log4j2.properties")
                with open(log4j, "w") as f:
                    f.write(_QUIET_LOG4J)
            conf = SparkConf().setAll(spark_conf(master, verbose=verbose, ui=ui,
                                                 log4j_file=log4j).items()).setAll(extra)
            gateway = None if verbose else _filtered_gateway(conf)
            SparkContext(conf=conf, gateway=gateway)
        spark = SparkSession.builder.getOrCreate()      # on that context
    if not verbose:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def _filtered_gateway(conf):
    """The py4j gateway, its JVM's stderr passed on by a thread without the lines
    the JVM itself writes ("WARNING: Using incubator modules..."); None (pyspark
    launches it) where launch_gateway takes no popen_kwargs. The pipe is read from
    the start: a JVM that fails to start has its say before the error is raised."""
    from pyspark.java_gateway import launch_gateway

    r, w = os.pipe()
    reader = threading.Thread(target=_pass_on, args=(os.fdopen(r, "rb"),),
                              name="rmq-jvm-stderr", daemon=True)
    reader.start()
    try:
        return launch_gateway(conf, popen_kwargs={"stderr": w})
    except TypeError:
        return None
    except BaseException:
        os.close(w)
        w = None
        reader.join(5)      # the JVM has exited: its last words come before ours
        raise
    finally:
        if w is not None:
            os.close(w)     # the JVM holds the write end now


def _pass_on(stream):
    try:
        for line in iter(stream.readline, b""):
            if line.startswith(b"WARNING: "):
                continue
            sys.stderr.write(line.decode(errors="replace"))
            sys.stderr.flush()
    except (OSError, ValueError):
        pass


# ---------------------------------------------------------------- progress

class Progress:
    """rmq's own progress on stderr, phase by phase: on a terminal one line
    rewritten in place (with ``status()`` every half second), then the phase's
    result; elsewhere nothing, unless ``enabled`` (then a line as each phase starts
    and one as it ends)."""

    def __init__(self, enabled=None, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        try:
            tty = self.stream.isatty()
        except (AttributeError, ValueError):
            tty = False
        self.enabled = tty if enabled is None else bool(enabled)
        self.live = self.enabled and tty

    def _write(self, text):
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass

    @contextlib.contextmanager
    def phase(self, name, status=None, done=None):
        """Around a phase: ``status()`` says how far it is, ``done()`` its result."""
        if not self.enabled:
            yield
            return
        t0 = time.monotonic()
        stop = threading.Event()

        def line():
            text = ""
            if status is not None:
                with contextlib.suppress(Exception):
                    text = status() or ""
            return f"{name}... {_join(text, f'{time.monotonic() - t0:.0f} s')}"

        ticker = None
        if self.live:
            def tick():
                while True:
                    self._write("\r\x1b[K" + line())
                    if stop.wait(0.5):
                        return
            ticker = threading.Thread(target=tick, name="rmq-progress", daemon=True)
            ticker.start()
        else:
            self._write(f"{name}...\n")
        ok = False
        try:
            yield
            ok = True
        finally:
            stop.set()
            if ticker is not None:
                ticker.join()
            result = ""
            if ok and done is not None:
                with contextlib.suppress(Exception):
                    result = done() or ""
            end = f"{name}: {_join(result, 'done' if ok else 'failed')} " \
                  f"in {time.monotonic() - t0:.1f} s\n"
            self._write(("\r\x1b[K" if self.live else "") + end)


def _join(*parts):
    return ", ".join(p for p in parts if p)


def _files(n):
    return f"{n:,} file{'s' if n != 1 else ''}"


def _tasks(sc):
    """The tasks of the running stages, done of all ("" when none runs)."""
    tracker = sc.statusTracker()
    done = total = 0
    for sid in tracker.getActiveStageIds():
        info = tracker.getStageInfo(sid)
        if info is not None:
            done += info.numCompletedTasks
            total += info.numTasks
    return f"tasks {done}/{total}" if total else ""


class NoInputs(ValueError):
    pass


# ---------------------------------------------------------------- the partition function

def decode_files(files, file_indexes, server_ports=(9876,), conn_spaces=None, decoded=None):
    """The frames of ``files``, an iterator of (path, bytes) as ``binaryFiles`` hands
    them over, as Arrow record batches (rmq.trace.arrow.RAW_SCHEMA).

    Runs in the executors' Python workers: rmq is imported here, so the compiled
    core is loaded there. Nothing a file holds makes it raise: an undecodable frame
    is a row with ``decode_error``, a file that cannot be read (or stops being
    readable) one more such row. ``decoded``, an accumulator, counts the files done
    (for progress)."""
    for path, data in files:
        yield from _decode_input(path, data, file_indexes, server_ports, conn_spaces)
        if decoded is not None:
            decoded.add(1)


def decode_paths(groups, file_indexes, server_ports=(9876,), conn_spaces=None, decoded=None):
    """The batches of the ``file:`` inputs of ``groups`` (lists of paths), which the
    worker maps from its own disk: the file the executor's JVM would have read for
    ``binaryFiles``, without copying it through the JVM's heap and its socket."""
    import mmap

    for group in groups:
        for path in group:
            try:
                with open(_local_path(path), "rb") as f:
                    # mapped, not read: no copy; populated at once, not page by page
                    data = (mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ,
                                      flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
                            if os.fstat(f.fileno()).st_size else b"")
            except OSError as e:
                from rmq.trace import arrow
                yield arrow.error_batch(path, _file_index(path, file_indexes), 0, e)
            else:
                try:
                    yield from _decode_input(path, data, file_indexes, server_ports,
                                             conn_spaces)
                finally:
                    if isinstance(data, mmap.mmap):
                        try:
                            data.close()
                        except BufferError:     # a reader still holds it: closed when freed
                            pass
            if decoded is not None:
                decoded.add(1)


def _local_path(uri):
    """The path of a ``file:`` URI as Hadoop spells it (file:/abs, file:///abs or
    file://host/abs; not percent-encoded)."""
    if uri.startswith("file://"):
        rest = uri[len("file://"):]
        return rest if rest.startswith("/") else "/" + rest.partition("/")[2]
    return uri[len("file:"):] if uri.startswith("file:") else uri


def _decode_input(path, data, file_indexes, server_ports, conn_spaces):
    """The batches of one input: its requests carry the answers found in it."""
    from rmq.trace import arrow

    index = _file_index(path, file_indexes)
    # The segments of one recording share its connection ids (a request at the
    # end of one segment, its answer in the next); other inputs have their own.
    conn_base = (conn_spaces or {}).get(path, index) << 32
    return arrow.input_batches(path, data, index, conn_base, server_ports,
                               max_frame_length=_MAX_FRAME)


def _file_index(path, file_indexes):
    index = file_indexes.get(path)
    if index is None:       # listed under another spelling: still one id per file
        import zlib
        # above any listed index, below 2**31 so that index << 32 stays a long
        index = (1 << 30) | (zlib.crc32(path.encode()) & ((1 << 30) - 1))
    return index


# ---------------------------------------------------------------- inputs and outputs

def _is_uri(path):
    return "://" in path or path.startswith("file:")


def list_inputs(spark, inputs):
    """The input files as Spark spells them (``file:/abs/path`` for the driver's
    files, the FileSystem's own form for URIs), in order."""
    from rmq.trace.segments import SEGMENT_SUFFIX, segment_files

    suffixes = (SEGMENT_SUFFIX, ".pcap", ".pcapng")
    out = []
    for p in inputs:
        p = os.fspath(p)
        if not _is_uri(p):
            for f in segment_files([p]):
                if not os.path.isfile(f):
                    raise NoInputs(f"{f}: no such file")
                out.append("file:" + os.path.abspath(f))
            continue
        jvm = spark.sparkContext._jvm
        hpath = jvm.org.apache.hadoop.fs.Path(p)
        fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
        statuses = fs.globStatus(hpath) or []
        for st in sorted(statuses, key=lambda s: s.getPath().toString()):
            if st.isDirectory():
                names = sorted(s.getPath().toString() for s in fs.listStatus(st.getPath())
                               if s.isFile())
                out += [n for n in names if n.endswith(suffixes)]
            else:
                out.append(st.getPath().toString())
    if not out:
        raise NoInputs(f"no trace segments or captures in {' '.join(map(str, inputs))}")
    return out


def _spark_path(out, name):
    return out.rstrip("/") + "/" + name if _is_uri(out) else \
        "file:" + os.path.join(os.path.abspath(out), name)


def _publish(spark, local_dir, out):
    """Copy the driver-written files (report, charts, summary) to a URI output."""
    jvm = spark.sparkContext._jvm
    dest = jvm.org.apache.hadoop.fs.Path(out)
    fs = dest.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    for name in os.listdir(local_dir):
        fs.copyFromLocalFile(False, True, jvm.org.apache.hadoop.fs.Path(
            "file:" + os.path.join(local_dir, name)), jvm.org.apache.hadoop.fs.Path(dest, name))


# ---------------------------------------------------------------- the job

def frames_schema():
    """frames.parquet's Spark schema (rmq.trace.arrow.FRAMES_SCHEMA's types)."""
    from rmq.trace.arrow import FRAMES_SCHEMA
    return _spark_schema(FRAMES_SCHEMA)


def requests_schema():
    """requests.parquet's Spark schema (rmq.trace.arrow.REQUESTS_SCHEMA's types)."""
    from rmq.trace.arrow import REQUESTS_SCHEMA
    return _spark_schema(REQUESTS_SCHEMA)


def _spark_schema(schema):
    import pyarrow as pa
    from pyspark.sql.types import (BooleanType, DoubleType, IntegerType, LongType, MapType,
                                   StringType, StructField, StructType, TimestampType)

    from rmq.trace.arrow import NAMES

    types = {pa.int64(): LongType(), pa.int32(): IntegerType(), pa.string(): StringType(),
             NAMES: StringType(),
             pa.bool_(): BooleanType(), pa.float64(): DoubleType(),
             pa.timestamp("us", tz="UTC"): TimestampType(),
             pa.map_(pa.string(), pa.string()): MapType(StringType(), StringType())}
    return StructType([StructField(f.name, types[f.type]) for f in schema])


def _frames_rows(raws):
    """The frames rows (tuples of frames_schema) of RAW batches, in the forms Spark
    takes without a conversion in Python (the time in microseconds, maps as dicts):
    for an output only Spark can write."""
    import pyarrow as pa

    from rmq.trace import arrow
    for raw in raws:
        frames = arrow.frames_batch(raw)
        columns = [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c
                   for c in frames.columns]
        values = [c.to_pylist() for c in columns]
        ext = frames.schema.get_field_index("ext")
        values[ext] = [None if m is None else dict(m) for m in values[ext]]
        yield from zip(*values)


def _name_map(names):
    from pyspark.sql import functions as F
    return F.create_map(*[x for code, name in sorted(names.items())
                          for x in (F.lit(code), F.lit(name))])


def default_partitions(sc, files):
    """A file is never split: with a partition per core, files grouped by size
    leave a core idle at the end; twice as many even the load out."""
    return max(sc.defaultParallelism, min(files, 2 * sc.defaultParallelism))


#: How the inputs reach the Python workers: "spark" (binaryFiles: the executor's JVM
#: reads each file and hands its bytes over), "workers" (each ``file:`` input is
#: opened by the worker that decodes it; other URIs still go through binaryFiles),
#: "auto" (the same as "workers").
READERS = ("auto", "workers", "spark")


def frame_batches(spark, paths, server_ports=(9876,), partitions=None, reader="auto",
                  decoded=None):
    """The RDD of the Arrow record batches (rmq.trace.arrow.RAW_SCHEMA) of the input
    files ``paths`` (as :func:`list_inputs` gives them), a partition per group of
    files; ``decoded``, an accumulator, counts the files decoded."""
    import functools

    if reader not in READERS:
        raise ValueError(f"reader must be one of {', '.join(READERS)}, got {reader!r}")
    sc = spark.sparkContext
    file_indexes = {p: i for i, p in enumerate(paths)}
    recordings = {}
    conn_spaces = {p: recordings.setdefault(_recording(p), file_indexes[p]) for p in paths}
    options = dict(file_indexes=file_indexes, server_ports=tuple(server_ports),
                   conn_spaces=conn_spaces, decoded=decoded)
    local, shipped = [], []
    for p in paths:
        (local if reader != "spark" and p.startswith("file:") else shipped).append(p)
    parts = []
    if local:
        groups = _balanced_groups(local, partitions or default_partitions(sc, len(local)))
        parts.append(sc.parallelize(groups, len(groups)).mapPartitions(
            functools.partial(decode_paths, **options)))
    if shipped:
        files = sc.binaryFiles(",".join(shipped), minPartitions=partitions
                               or default_partitions(sc, len(shipped)))
        parts.append(files.mapPartitions(functools.partial(decode_files, **options)))
    return parts[0] if len(parts) == 1 else sc.union(parts)


def _balanced_groups(paths, n):
    """``paths`` in at most ``n`` groups of about equal bytes (the driver's view of
    the files' sizes), largest first; each group keeps its paths in input order."""
    sizes = {}
    for p in paths:
        try:
            sizes[p] = os.path.getsize(_local_path(p))
        except OSError:
            sizes[p] = 0
    n = max(1, min(n, len(paths)))
    groups = [[0, []] for _ in range(n)]
    for p in sorted(paths, key=sizes.get, reverse=True):
        g = min(groups, key=lambda g: g[0])
        g[0] += sizes[p]
        g[1].append(p)
    order = {p: i for i, p in enumerate(paths)}
    return [sorted(g[1], key=order.get) for g in groups if g[1]]


_SEGMENT_NUMBER = re.compile(r"-\d{6}\.rmqtrace$")


def _recording(path):
    """What the segments of one recording have in common: the name without its
    segment number (rmq.trace.segments.SegmentWriter's names); a capture is its own."""
    stem, n = _SEGMENT_NUMBER.subn("", path)
    return stem if n else path


def _rows_dataframe(spark, rows, schema):
    """``spark.createDataFrame(rows, schema)`` for an RDD of plain tuples already of the
    schema's types, without the two Python passes createDataFrame makes over every
    row (a check, and a conversion that none of these fields needs): they are much
    of the Python workers' time (bench/README.md: Traces). The same JVM calls
    createDataFrame ends in; where they are missing (another Spark, Spark Connect),
    createDataFrame itself."""
    from pyspark.sql import DataFrame
    try:
        from py4j.protocol import Py4JError
    except ImportError:         # a Spark Connect client: no JVM here
        Py4JError = AttributeError
    try:
        jrdd = spark._jvm.SerDeUtil.toJavaArray(rows._to_java_object_rdd())
        return DataFrame(spark._jsparkSession.applySchemaToPythonRDD(jrdd.rdd(), schema.json()),
                         spark)
    except (AttributeError, Py4JError):
        return spark.createDataFrame(rows, schema, verifySchema=False)


def _code_name(code, is_response):
    """The name of a request or response ``code`` (columns), CODE_<n> when unknown."""
    from pyspark.sql import functions as F

    from rmq.protocol import REQUEST_NAMES, RESPONSE_NAMES
    return F.when(code.isNull(), None).otherwise(F.coalesce(
        F.when(is_response, _name_map(RESPONSE_NAMES)[code])
         .otherwise(_name_map(REQUEST_NAMES)[code]),
        F.concat(F.lit("CODE_"), code.cast("string"))))


def decode_frames(spark, paths, server_ports=(9876,), partitions=None, reader="auto",
                  decoded=None):
    """The frames DataFrame of the input files ``paths``, not yet computed, its rows
    made in Python (the job writes frames.parquet from columns: :func:`write_frames`).

    A request's ``answer_*`` columns hold the answer found in the same input file;
    ``pair_open`` marks the answers that met no request there, whose keys
    :func:`requests_table` pairs across the files (rmq.fallback.columns)."""
    return _rows_dataframe(spark, frame_batches(spark, paths, server_ports, partitions, reader,
                                                decoded).mapPartitions(_frames_rows),
                           frames_schema())


#: How frames.parquet and requests.parquet are written: "arrow" (each task writes
#: its parts with Arrow's Parquet writer, from the decoded columns: an output on a
#: file system the workers share, file: or a path), "spark" (rows handed to
#: Spark's writer: any output Hadoop reaches), "auto" ("arrow" where it can, else
#: "spark").
WRITERS = ("auto", "arrow", "spark")


def _arrow_writable(out):
    return not _is_uri(out) or out.startswith("file:")


class Written(typing.NamedTuple):
    """What :func:`write_frames` wrote."""
    #: frames.parquet's Spark path
    frames_path: str
    #: requests.parquet's Spark path when the tasks wrote it (the arrow writer: each
    #: request with the answer found in its input; :func:`write_requests` finishes it)
    requests_path: typing.Optional[str] = None
    #: the rows the tasks wrote, summed: frames, requests, and "open" (the answers
    #: that met no request in their input); None from Spark's writer
    counts: typing.Optional[dict] = None
    #: (codecs, pythons) of the Python workers that decoded (executor_environments)
    executors: typing.Optional[tuple] = None
    #: the frames' counts for the summary (frame_counts), made by the tasks
    frame_counts: typing.Optional[dict] = None
    #: the keys (conn, opaque) of the answers that met no request in their input
    #: (a pyarrow Table), None when too many (rmq.trace.arrow.MAX_OPEN_KEYS)
    open_keys: typing.Any = None
    #: the tasks that wrote the parts (part-NNNNN.parquet, from 0)
    partitions: int = 0


def write_frames(spark, paths, out, server_ports=(9876,), partitions=None, reader="auto",
                 writer="auto", decoded=None):
    """Decode the input files ``paths`` into ``out``/frames.parquet (and, by the
    arrow writer, each input's requests with their answers into
    ``out``/requests.parquet): a :class:`Written`."""
    if writer not in WRITERS:
        raise ValueError(f"writer must be one of {', '.join(WRITERS)}, got {writer!r}")
    frames_path = _spark_path(out, "frames.parquet")
    if writer == "spark" or (writer == "auto" and not _arrow_writable(out)):
        decode_frames(spark, paths, server_ports, partitions, reader, decoded) \
            .write.mode("overwrite").parquet(frames_path)
        return Written(frames_path)
    if not _arrow_writable(out):
        raise ValueError(f"the arrow writer writes to a file system the workers share "
                         f"(a path or file:), not {out}")
    import functools

    from rmq.trace import arrow

    requests_path = _spark_path(out, "requests.parquet")
    directories = [_local_path(frames_path), _local_path(requests_path)]
    for d in directories:
        shutil.rmtree(d, ignore_errors=True)        # as Spark's mode("overwrite")
        os.makedirs(d)
    parts = frame_batches(spark, paths, server_ports, partitions, reader, decoded) \
        .mapPartitionsWithIndex(functools.partial(_write_parts, *directories)).collect()
    open(os.path.join(directories[0], "_SUCCESS"), "wb").close()   # requests': write_requests
    counts = {k: sum(p[k] for p in parts) for k in ("frames", "requests", "open")}
    executors = (sorted({p["codec"] for p in parts}), sorted({p["python"] for p in parts}))
    stats = arrow.FrameStats()
    for p in parts:
        stats.merge(p["stats"])
    return Written(frames_path, requests_path, counts, executors, stats.counts(),
                   arrow.merge_keys([p["open_keys"] for p in parts]), len(parts))


def _write_parts(frames_dir, requests_dir, partition, batches):
    import rmq
    from rmq.trace import arrow
    written = arrow.write_parts(frames_dir, requests_dir, partition, batches)
    yield dict(written, codec=rmq.IMPLEMENTATION, python=sys.prefix)


def write_requests(spark, out, written):
    """``out``/requests.parquet, from what :func:`write_frames` wrote: the whole
    :func:`requests_table` by Spark, or, after the tasks wrote each input's requests,
    the keys of the answers that met no request in their input paired across the
    inputs; its Spark path."""
    path = _spark_path(out, "requests.parquet")
    if written.requests_path is None:
        requests_table(spark.read.parquet(written.frames_path)) \
            .write.mode("overwrite").parquet(path)
    else:
        if written.counts["open"]:
            _pair_across_inputs(spark, written, path)
        open(os.path.join(_local_path(path), "_SUCCESS"), "wb").close()
    return path


def _pair_across_inputs(spark, written, path):
    """Pair again across the inputs the (connection, opaque) keys of the answers
    that met no request in their input. Up to rmq.trace.arrow.MAX_OPEN_KEYS of them
    (a recording: the exchanges in flight at each rotation) with up to
    MAX_PAIR_AGAIN_ROWS frames: a task per part drops their requests from
    requests.parquet and hands over their frames, which the driver pairs as
    TraceColumns pairs one input (arrow.pair_again) into one more part. More (a
    capture of the answers only): Spark writes the whole table again."""
    import functools

    import pyarrow as pa

    from rmq.trace import arrow

    directory = _local_path(path)
    if written.open_keys is not None:
        sc = spark.sparkContext
        n = written.partitions
        found = sc.parallelize(range(n), min(n, sc.defaultParallelism)).map(functools.partial(
            _settle_part, _local_path(written.frames_path), directory,
            sc.broadcast(written.open_keys))).collect()
        if all(f is not None for f in found) \
                and sum(f.num_rows for f in found) <= arrow.MAX_PAIR_AGAIN_ROWS:
            arrow.write_requests_part(directory, n, arrow.pair_again(pa.concat_tables(found)))
            return
    # the whole table from frames.parquet (the parts' drops do not matter), swapped in
    again, old = directory + ".again", directory + ".old"
    requests_table(spark.read.parquet(written.frames_path)) \
        .write.mode("overwrite").parquet("file:" + again)
    shutil.rmtree(old, ignore_errors=True)
    os.replace(directory, old)
    os.replace(again, directory)
    shutil.rmtree(old, ignore_errors=True)


def _settle_part(frames_dir, requests_dir, keys, partition):
    """Drop the requests of the open ``keys`` from requests.parquet's part
    ``partition``; their frames in frames.parquet's (None past MAX_PAIR_AGAIN_ROWS)."""
    from rmq.trace import arrow
    name = arrow.part_name(partition)
    arrow.drop_requests(os.path.join(requests_dir, name), keys.value)
    frames = arrow.key_frames(os.path.join(frames_dir, name), keys.value)
    return frames if frames.num_rows <= arrow.MAX_PAIR_AGAIN_ROWS else None


#: A request's columns in requests.parquet, then its answer's. Its other ext fields
#: are in frames.parquet (the same file_index and record).
_REQUEST_COLUMNS = ("file", "file_index", "record", "conn", "peer", "time_ns", "time", "code",
                    "code_name", "opaque", "oneway", "language", "version", "topic",
                    "broker_name", "broker_addr", "cluster", "heartbeat_timeout_ms")
_ANSWER_COLUMNS = ("answer_time_ns", "answer_code", "answer_code_name", "answer_remark")

#: Open keys (connection, opaque) up to this many are sent to every task (a
#: broadcast join); more (a capture of the answers only) are joined by a shuffle.
_BROADCAST_OPEN_KEYS = 1_000_000


def _is_request(col):
    return (col("direction") == "in") & ~col("is_response")


def _is_answer(col):
    return (col("direction") == "out") & col("is_response")


def _heartbeat_timeout():
    from pyspark.sql import functions as F
    return F.expr("try_cast(ext['heartbeatTimeoutMillis'] as bigint)").alias(_REQUEST_COLUMNS[-1])


def _with_latency(requests):
    """``requests`` with latency_us: null when the difference overflows a long, as
    rmq.trace.arrow.requests_batch."""
    from pyspark.sql import functions as F
    return requests.select(
        "*", (F.try_subtract("answer_time_ns", "time_ns") / 1000.0).alias("latency_us"))


def requests_table(frames):
    """Each request (towards the NameServer), with the answer to it: the next frame
    of its (connection, opaque) in capture order, when that is an answer and the
    request is not oneway (clients may reuse opaques).

    The decode has paired each input's requests with the answers in it
    (rmq.fallback.columns), and marked ``pair_open`` the answers that met no request
    there. Every frame of those answers' (connection, opaque) keys is paired again
    here, across the files: in capture order (time, then the order within the file),
    a request's answer is the row right after it when that row is an answer."""
    from pyspark.sql import functions as F

    col = F.col
    keys = ["conn", "opaque"]
    requests = frames.where(col("decode_error").isNull() & _is_request(col))
    open_keys = frames.where(col("pair_open")).select(*keys)
    n_open = open_keys.count()
    if n_open:
        open_keys = open_keys.distinct()
        if n_open <= _BROADCAST_OPEN_KEYS:
            open_keys = F.broadcast(open_keys)
        requests = requests.join(open_keys, keys, "left_anti")
    paired_in_file = requests.select(
        *_REQUEST_COLUMNS[:-1], _heartbeat_timeout(), *_ANSWER_COLUMNS[:2],
        _code_name(col("answer_code"), F.lit(True)).alias("answer_code_name"),
        *_ANSWER_COLUMNS[3:])
    if n_open:
        paired_in_file = paired_in_file.unionByName(_paired_again(frames, open_keys))
    return _with_latency(paired_in_file)


def _paired_again(frames, open_keys):
    """The requests of the keys ``open_keys`` (a DataFrame of conn, opaque), each
    given the next frame of its key over all ``frames`` when that is its answer."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    col = F.col
    keys = ["conn", "opaque"]
    is_request = _is_request(col)
    events = frames.where(col("decode_error").isNull() & (is_request | _is_answer(col))) \
        .join(open_keys, keys, "left_semi").select(
            *_REQUEST_COLUMNS[:-1], _heartbeat_timeout(), "remark", is_request.alias("_req"))
    w = Window.partitionBy(*keys).orderBy("time_ns", "file_index", "record")
    answered = (F.lead("_req").over(w) == F.lit(False)) & ~col("oneway")
    answer_of = dict(zip(_ANSWER_COLUMNS, ("time_ns", "code", "code_name", "remark")))
    return events.select(
        *_REQUEST_COLUMNS, "_req",
        *[F.when(answered, F.lead(c).over(w)).alias(a) for a, c in answer_of.items()]
    ).where(col("_req")).drop("_req")


def choose_bucket_ns(span_ns):
    """The smallest round bucket giving at most _MAX_BUCKETS buckets over the span."""
    for s in _BUCKETS_S:
        if span_ns / (s * 1e9) <= _MAX_BUCKETS:
            return int(s * 1e9)
    return int(_BUCKETS_S[-1] * 1e9 * (span_ns // (_BUCKETS_S[-1] * 1e9 * _MAX_BUCKETS) + 1))


def frame_counts(frames):
    """The summary's counts over ``frames`` (a DataFrame of frames.parquet), by
    Spark: what the tasks of the arrow writer count as they write
    (rmq.trace.arrow.FrameStats.counts)."""
    from pyspark.sql import functions as F

    from rmq.trace.arrow import MAX_INPUT_ERRORS

    col = F.col
    f = frames.agg(
        F.count(F.lit(1)).alias("rows"),
        F.coalesce(F.sum(F.when(col("decode_error").isNotNull() & col("time_ns").isNotNull(),
                                1).otherwise(0)), F.lit(0)).alias("undecodable"),
        F.coalesce(F.sum(F.when(col("time_ns").isNull(), 1).otherwise(0)), F.lit(0))
        .alias("unreadable"),
        F.countDistinct("conn").alias("connections"),
        F.min("time_ns").alias("start"), F.max("time_ns").alias("end")).first().asDict()
    f["answers"] = {r[0]: r[1] for r in frames.where(
        col("decode_error").isNull() & _is_answer(col))
        .groupBy("code_name").count().orderBy("code_name").collect() if r[0] is not None}
    f["errors"] = [
        {"file": r["file"], "record": r["record"], "time_ns": r["time_ns"],
         "error": r["decode_error"]}
        for r in frames.where(col("decode_error").isNotNull())
        .select("file", "record", "time_ns", "decode_error").orderBy("file", "record")
        .limit(MAX_INPUT_ERRORS).collect()] if f["undecodable"] or f["unreadable"] else []
    return f


def aggregate(frames, requests, inputs, counts=None):
    """The summary: counts and the small series the report draws (plain data).
    ``counts``: :func:`frame_counts` of ``frames``, when the tasks that wrote them
    counted them."""
    from pyspark.sql import functions as F

    from rmq.protocol import RequestCode, ResponseCode

    col = F.col
    f = counts or frame_counts(frames)
    start, end = f["start"], f["end"]
    span = (end - start) if start is not None else 0
    bucket_ns = choose_bucket_ns(span)
    summary = {
        "inputs": list(inputs),
        "frames": f["rows"] - f["unreadable"],
        "undecodable_frames": f["undecodable"],
        "unreadable_inputs": f["unreadable"],
        "connections": f["connections"],
        "start_ns": start, "end_ns": end,
        "input_errors": f["errors"],
        "answers_per_code": f["answers"],
    }

    # One pass over the requests for their counts, outcomes, error answers and mix
    # over time (per bucket and code).
    bucket = _bucket_column(start, bucket_ns)
    per_code, errors, mix = {}, {}, {}
    summary["oneway"] = summary["unanswered"] = summary["errors"] = 0
    for b, name, oneway, code, answer_name, n in requests.groupBy(
            bucket.alias("bucket"), "code_name", "oneway", "answer_code",
            "answer_code_name").count().collect():
        mix[b, name] = mix.get((b, name), 0) + n
        if name is not None:
            per_code[name] = per_code.get(name, 0) + n
        if oneway:
            summary["oneway"] += n
        elif code is None:
            summary["unanswered"] += n
        if code is not None and code != 0:
            summary["errors"] += n
            errors[name, answer_name, code] = errors.get((name, answer_name, code), 0) + n
    summary["requests_per_code"] = dict(sorted(per_code.items()))
    summary["requests"] = sum(per_code.values())
    summary["errors_per_code"] = [
        {"request": k[0], "answer": k[1], "answer_code": k[2], "count": n}
        for k, n in sorted(errors.items(), key=lambda e: (-e[1], e[0][0] or "", e[0][2]))]
    summary["request_mix"] = {
        "bucket_ns": bucket_ns, "start_ns": start,
        "counts": [[b, name, n] for (b, name), n in sorted(
            mix.items(), key=lambda kv: (kv[0][0], kv[0][1] is not None, kv[0][1] or ""))]}

    summary["latency_us"] = {
        x["code_name"]: {"count": x["n"], "p50": x["q"][0], "p90": x["q"][1],
                         "p99": x["q"][2], "max": x["max"]}
        for x in requests.where(col("latency_us").isNotNull()).groupBy("code_name").agg(
            F.count(F.lit(1)).alias("n"),
            F.percentile_approx("latency_us", [0.5, 0.9, 0.99], 10000).alias("q"),
            F.max("latency_us").alias("max")).orderBy("code_name").collect()}

    summary["brokers"] = _brokers(requests, start, end, bucket_ns)

    summary["top_topics"] = [
        {"topic": x[0], "requests": x[1], "not_found": x[2]}
        for x in requests.where((col("code") == RequestCode.GET_ROUTEINFO_BY_TOPIC)
                                & col("topic").isNotNull())
        .groupBy("topic").agg(F.count(F.lit(1)).alias("n"),
                              F.sum(F.when(col("answer_code") == ResponseCode.TOPIC_NOT_EXIST, 1)
                                    .otherwise(0)).alias("nf"))
        .orderBy(F.desc("n"), "topic").limit(TOP_TOPICS).collect()]
    return summary


def _liveness_codes():
    """What refreshes a broker's liveness; UNREGISTER_BROKER ends it."""
    from rmq.protocol import RequestCode
    return (RequestCode.REGISTER_BROKER, RequestCode.QUERY_DATA_VERSION,
            RequestCode.BROKER_HEARTBEAT)


def _brokers(requests, start, end, bucket_ns):
    """Per broker (brokerName + brokerAddr): :func:`broker_summary` of its liveness
    requests, gathered by broker in one job (a few rows per broker and minute)."""
    import functools

    from pyspark.sql import functions as F

    from rmq.protocol import RequestCode

    col = F.col
    events = requests.where(
        col("code").isin(*_liveness_codes(), RequestCode.UNREGISTER_BROKER)
        & col("broker_name").isNotNull() & col("broker_addr").isNotNull()
    ).select(*_BROKER_KEY, *_BROKER_EVENT)
    return sorted(events.rdd.map(_broker_and_event).groupByKey().map(functools.partial(
        _summarize_broker, start=start, end=end, bucket_ns=bucket_ns)).collect(),
        key=lambda b: (b["broker_name"], b["broker_addr"]))


_BROKER_KEY = ("broker_name", "broker_addr")
#: A broker's liveness request, as broker_summary takes it.
_BROKER_EVENT = ("cluster", "code", "time_ns", "record", "heartbeat_timeout_ms")


def _broker_and_event(row):
    return tuple(row[:2]), tuple(row[2:])


def _summarize_broker(item, start, end, bucket_ns):
    return broker_summary(item[0], item[1], start, end, bucket_ns)


def broker_summary(key, events, start, end, bucket_ns):
    """One broker's registrations, liveness gaps and expiries, from its liveness
    requests ``events`` ((cluster, code, time_ns, record, heartbeat_timeout_ms) in
    any order; codes: :func:`_liveness_codes` and UNREGISTER_BROKER) over a trace
    from ``start`` to ``end``.

    - A gap between two liveness requests is flagged when longer than twice the
      broker's median interval (the lower median) or than its heartbeat timeout
      (the largest heartbeatTimeoutMillis it sent, else the NameServer's default);
      past the timeout the broker expired (unless it unregistered inside the gap).
    - Expiries: each UNREGISTER_BROKER, each expired gap (at its start plus the
      timeout), and silence past the timeout at the end of the trace.
    - ``registrations_per_bucket``: [bucket, count] of its REGISTER_BROKERs, buckets
      of ``bucket_ns`` from ``start`` (the request mix's)."""
    from rmq.protocol import RequestCode

    REGISTER_BROKER, UNREGISTER_BROKER = RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER
    live_codes = _liveness_codes()
    events = sorted((e for e in events if e[2] is not None), key=lambda e: (e[2], e[3]))
    live = [e[2] for e in events if e[1] in live_codes]
    timeouts = [e[4] for e in events if e[4] is not None]
    timeout_ms = max(timeouts) if timeouts else DEFAULT_HEARTBEAT_TIMEOUT_MS
    timeout_ns = timeout_ms * 1_000_000
    intervals = [b - a for a, b in zip(live, live[1:])]
    median = sorted(intervals)[(len(intervals) + 1) // 2 - 1] if intervals else None
    unreg_times = [e[2] for e in events if e[1] == UNREGISTER_BROKER]
    gaps, expiries = [], [{"time_ns": t, "reason": "unregistered"} for t in unreg_times]
    for (a, b), gap in zip(zip(live, live[1:]), intervals):
        if gap > timeout_ns or (median is not None and gap > 2 * median):
            # a broker that unregistered inside the gap did not expire in it
            g = {"from_ns": a, "to_ns": b, "expired": gap > timeout_ns,
                 "unregistered": any(a <= t <= b for t in unreg_times)}
            gaps.append(g)
            if g["expired"] and not g["unregistered"]:
                expiries.append({"time_ns": a + timeout_ns, "reason": "timeout"})
    last = live[-1] if live else None
    if last is not None and end - last > timeout_ns and not any(t >= last for t in unreg_times):
        expiries.append({"time_ns": last + timeout_ns, "reason": "silent at end"})
    expiries.sort(key=lambda e: e["time_ns"])
    timeline = {}
    for e in events:
        if e[1] == REGISTER_BROKER:
            b = _bucket(e[2], start, bucket_ns)
            timeline[b] = timeline.get(b, 0) + 1
    clusters = [e[0] for e in events if e[0] is not None]
    return {
        "broker_name": key[0], "broker_addr": key[1],
        "cluster": max(clusters) if clusters else None,
        "registrations": sum(e[1] == REGISTER_BROKER for e in events),
        "heartbeats": sum(e[1] in live_codes[1:] for e in events),
        "unregistrations": len(unreg_times),
        "median_interval_s": None if median is None else median / 1e9,
        "timeout_s": timeout_ms / 1000,
        "gaps": gaps,
        "expiries": expiries,
        "registrations_per_bucket": [[b, n] for b, n in sorted(timeline.items())],
    }


def _bucket(time_ns, start, bucket_ns):
    """The request mix's bucket of ``time_ns`` (:func:`_bucket_column`, in Python)."""
    since = time_ns - (start or 0)
    if not -(1 << 63) <= since < (1 << 63):
        since = float(time_ns) - float(start or 0)
    return int(float(since) / float(bucket_ns))


def _bucket_column(start, bucket_ns):
    """The request mix's bucket of each row: (time - start) / bucket, in doubles,
    truncated; the difference taken in doubles when it overflows a long (a trace
    spanning centuries, which only a forged input does)."""
    from pyspark.sql import functions as F
    time_ns, start = F.col("time_ns"), F.lit(start or 0)
    since = F.coalesce(F.try_subtract(time_ns, start).cast("double"),
                       time_ns.cast("double") - start.cast("double"))
    return (since / F.lit(bucket_ns)).cast("long")


def _implementation(_):
    import rmq
    return rmq.IMPLEMENTATION, sys.prefix


def executor_environments(spark):
    """(codecs, pythons): the rmq codec the executors' Python workers load
    ("compiled", or "python" when rmq._core did not reach them) and the environments
    they run in (``sys.prefix``: a shipped environment is unpacked in the executor's
    work directory), from a task per core."""
    sc = spark.sparkContext
    n = sc.defaultParallelism
    seen = sc.parallelize(range(n), n).map(_implementation).distinct().collect()
    return sorted({impl for impl, _ in seen}), sorted({prefix for _, prefix in seen})


def executor_implementations(spark):
    """The rmq codec the executors' Python workers load (see executor_environments)."""
    return executor_environments(spark)[0]


def analyze(spark, inputs, out, *, server_ports=(9876,), partitions=None, reader="auto",
            writer="auto", progress=None):
    """Run the whole analysis of ``inputs`` into ``out``; the summary (as written to
    summary.json). ``progress`` (a :class:`Progress`) is told each phase."""
    from rmq.trace import report

    progress = progress or Progress(enabled=False)
    t0 = time.monotonic()
    sc = spark.sparkContext
    if sc.master.startswith("local") and not sc.getConf().contains("spark.sql.shuffle.partitions"):
        # one machine: 200 shuffle partitions (Spark's default) are 200 tiny tasks each
        spark.conf.set("spark.sql.shuffle.partitions", str(2 * sc.defaultParallelism))
    with progress.phase("listing inputs", done=lambda: _sized(paths)):
        paths = list_inputs(spark, inputs)
    decoded = sc.accumulator(0) if progress.enabled else None
    with progress.phase(
            "decoding", status=lambda: _join(f"{decoded.value}/{_files(len(paths))}", _tasks(sc)),
            done=lambda: f"{_files(len(paths))}, "
                         f"{written.counts['frames'] if written.counts else frames.count():,} "
                         f"frames -> frames.parquet"):
        written = write_frames(spark, paths, out, server_ports, partitions, reader, writer,
                               decoded)
        # Read back what was written: the decode runs once, everything after works on parquet.
        frames = spark.read.parquet(written.frames_path)
    with progress.phase("pairing requests and answers", status=lambda: _tasks(sc),
                        done=lambda: f"{requests.count():,} requests -> requests.parquet"):
        requests = spark.read.parquet(write_requests(spark, out, written))
    with progress.phase("summarizing", status=lambda: _tasks(sc)):
        summary = aggregate(frames, requests, paths, written.frame_counts)
        summary["seconds"] = round(time.monotonic() - t0, 3)
        codecs, pythons = written.executors or executor_environments(spark)
        summary["spark"] = {"master": spark.sparkContext.master, "version": spark.version,
                            "executor_implementation": codecs, "executor_python": pythons,
                            "reader": reader, "writer": writer}

    local = out if not _is_uri(out) else tempfile.mkdtemp(prefix="rmq-analyze-")
    try:
        with progress.phase("writing the report", done=lambda: "report.html"):
            os.makedirs(local, exist_ok=True)
            with open(os.path.join(local, "summary.json"), "w") as fh:
                json.dump(summary, fh, indent=1, sort_keys=True)
            report.write_report(local, summary)
            if local != out:
                _publish(spark, local, out)
    finally:
        if local != out:
            shutil.rmtree(local, ignore_errors=True)
    return summary


def _sized(paths):
    """How many input files, and their bytes when all are the driver's."""
    n = _files(len(paths))
    if not all(p.startswith("file:") for p in paths):
        return n
    try:
        return f"{n}, {sum(os.path.getsize(_local_path(p)) for p in paths) / 1e6:,.1f} MB"
    except OSError:
        return n


if __name__ == "__main__":
    # spark-submit src/rmq/trace/analyze.py: the script's own directory must not
    # shadow other modules; import the package this file is part of.
    # (The executors import rmq from their own environment: see the README.)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.path.insert(0, os.path.dirname(os.path.dirname(here)))
    from rmq.trace import analyze as _analyze
    _parser = _analyze.add_arguments(argparse.ArgumentParser(
        prog="spark-submit analyze.py", description="rmq trace analyze"))
    sys.exit(_analyze.main(_parser.parse_args()))
