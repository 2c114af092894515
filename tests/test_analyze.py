"""rmq trace analyze: the Spark job on local[2] over a recorded NameServer session
and over segments written to order (bad frames, unreadable files, two files, broker
gaps), and once through spark-submit."""

import argparse
import contextlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import pytest

import parts  # noqa: E402

parts.require("pyspark", "pyarrow", "matplotlib", "java", module=True)

import rmq  # noqa: E402
from nameserver import Client, recorded_traffic, register_broker  # noqa: E402
from rmq.trace.rows import PAIRED_ROW_FIELDS  # noqa: E402
from rmq.trace import analyze  # noqa: E402
from rmq.trace.segments import IN, OUT, SegmentWriter  # noqa: E402


# Spark and its JVMs: slow; the decoding underneath is compared between the two
# implementations by the differential tests, so the job runs in the compiled pass only.
pytestmark = [pytest.mark.slow, pytest.mark.once,
              pytest.mark.requires("pyspark", "pyarrow", "matplotlib", "java")]

#: The package under test: the executors' Python workers must import this one.
SRC = os.path.dirname(os.path.dirname(rmq.__file__))
S = 1_000_000_000
ERROR = PAIRED_ROW_FIELDS.index("decode_error")


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    with pytest.MonkeyPatch.context() as mp:
        # the JVM (and so the Python workers it starts) inherits this environment
        mp.setenv("PYSPARK_PYTHON", sys.executable)
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")])))
        session = (SparkSession.builder.master("local[2]").appName("rmq-test-analyze")
                   .config("spark.ui.enabled", "false")
                   .config("spark.sql.shuffle.partitions", "2")
                   .config("spark.default.parallelism", "2")
                   .config("spark.driver.memory", "1g")
                   .config("spark.executorEnv.PYTHONPATH", SRC)
                   .getOrCreate())
        session.sparkContext.setLogLevel("ERROR")
        yield session
        session.stop()


def run_main(argv):
    parser = analyze.add_arguments(argparse.ArgumentParser())
    return analyze.main(parser.parse_args(argv))


def request_frame(code, ext=None, *, opaque, body=b"", oneway=False):
    return rmq.encode_frame(rmq.RemotingCommand.request(code, ext, body, opaque=opaque,
                                                        oneway=oneway))


def answer_frame(code, answer_code, *, opaque):
    req = rmq.RemotingCommand.request(code, opaque=opaque)
    return rmq.encode_frame(req.response(answer_code))


def test_workers_import_the_package_under_test(spark):
    got = spark.sparkContext.parallelize([0], 1).map(
        lambda _: (__import__("rmq").__file__, __import__("rmq").IMPLEMENTATION)).collect()
    assert got == [(rmq.__file__, rmq.IMPLEMENTATION)]


# ---------------------------------------------------------------- a recorded session

def record_session(address):
    """Two brokers (re-registering, one unregistering), route queries (2 missing),
    KV (a missing get), an unknown code and a oneway request. The answers received."""
    answers = []
    with Client(address) as broker_a, Client(address) as broker_b, Client(address) as client:
        def call(c, code, ext=None, **kw):
            r = c.request(code, ext, **kw)
            if r is not None:
                answers.append(r.code)
            return r

        for counter in (1, 2, 3):
            answers.append(register_broker(broker_a, "broker-a", "10.0.0.1:10911",
                                           topics=["T1", "T2"], counter=counter).code)
        for counter in (1, 2):
            answers.append(register_broker(broker_b, "broker-b", "10.0.0.2:10911",
                                           topics=["T2", "T3"], counter=counter).code)
        for topic in ("T1", "T2", "T1", "nope", "T3", "T1", "nope"):
            call(client, 105, {"topic": topic})
        call(client, 105, {"topic": "T2"}, serialize_type="ROCKETMQ")
        for i in range(3):
            call(client, 100, {"namespace": "ns", "key": f"k{i}", "value": "v"})
        call(client, 101, {"namespace": "ns", "key": "k0"})
        call(client, 101, {"namespace": "ns", "key": "k1"})
        call(client, 101, {"namespace": "ns", "key": "missing"})
        call(client, 102, {"namespace": "ns", "key": "k2"})
        call(client, 102, {"namespace": "ns", "key": "k1"}, oneway=True)
        call(client, 9999)
        call(client, 106)
        call(broker_b, 104, {"clusterName": "c1", "brokerAddr": "10.0.0.2:10911",
                             "brokerName": "broker-b", "brokerId": "0"})
    return answers


REQUESTS_SENT = {"REGISTER_BROKER": 5, "GET_ROUTEINFO_BY_TOPIC": 8, "PUT_KV_CONFIG": 3,
                 "GET_KV_CONFIG": 3, "DELETE_KV_CONFIG": 2, "CODE_9999": 1,
                 "GET_BROKER_CLUSTER_INFO": 1, "UNREGISTER_BROKER": 1}
ANSWERS = {"SUCCESS": 19, "TOPIC_NOT_EXIST": 2, "QUERY_NOT_FOUND": 1,
           "REQUEST_CODE_NOT_SUPPORTED": 1}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, spark):
    tmp = tmp_path_factory.mktemp("session")
    rec, answers = recorded_traffic(tmp, record_session)
    assert rec.dropped == 0
    out = tmp / "out"
    summary = analyze.analyze(spark, [str(tmp / "trace")], str(out))
    return rec, answers, out, summary


def comparable(df):
    """``df`` for set operations, which take no MAP column: its sorted entries."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType
    return df.select([F.array_sort(F.map_entries(f.name)).alias(f.name)
                      if isinstance(f.dataType, MapType) else F.col(f.name)
                      for f in df.schema.fields])


def assert_same_rows(x, y):
    x, y = comparable(x), comparable(y)
    assert x.count() == y.count()
    assert x.exceptAll(y).count() == 0 and y.exceptAll(x).count() == 0


def write_tables(spark, paths, out, **kw):
    """frames.parquet and requests.parquet under ``out`` as the job writes them: the
    two DataFrames, read back, and what write_frames said."""
    written = analyze.write_frames(spark, paths, out, **kw)
    requests_path = analyze.write_requests(spark, out, written)
    return spark.read.parquet(written.frames_path), spark.read.parquet(requests_path), written


def test_both_writers_write_the_same_tables(recorded, spark, tmp_path):
    """frames.parquet and requests.parquet written by the tasks from the columns
    (Arrow's writer, the default for a local output) and by Spark from rows: the
    same schemas (frames_schema, and the Spark schema of REQUESTS_SCHEMA) and the
    same rows."""
    rec, answers, out, summary = recorded
    paths = analyze.list_inputs(spark, [str(out.parent / "trace")])
    frames, requests, written = write_tables(spark, paths, "file:" + str(tmp_path),
                                             writer="spark")
    assert written == analyze.Written("file:" + str(tmp_path / "frames.parquet"))
    x = spark.read.parquet(str(out / "frames.parquet"))
    assert x.schema == frames.schema == analyze.frames_schema()
    assert x.count() == summary["frames"]
    assert_same_rows(x, frames)
    y = spark.read.parquet(str(out / "requests.parquet"))
    assert y.schema == requests.schema == analyze.requests_schema()
    assert y.count() == summary["requests"]
    assert_same_rows(y, requests)
    with pytest.raises(ValueError, match="writer must be one of"):
        analyze.write_frames(spark, paths, str(tmp_path), writer="pandas")
    with pytest.raises(ValueError, match="the arrow writer writes to a file system"):
        analyze.write_frames(spark, paths, "hdfs://nn/out", writer="arrow")


def test_both_writers_agree_on_odd_values(tmp_path, spark):
    """Values where Arrow's and Spark's arithmetic could part: heartbeatTimeoutMillis
    as Spark's try_cast reads it (spaces, signs, decimals, overflow), a latency that
    overflows a long (null), unknown codes (CODE_<n>), an answer without a request."""
    t = 1_700_000_000 * S
    timeouts = ["30000", " 30000\t", "+7", "-0", "1.5", "1e3", "", "abc", "\u00a012",
                "9223372036854775807", "9223372036854775808"]
    records = [(t + i, 1, "10.0.0.1:1", IN,
                request_frame(103, {"brokerName": "b", "brokerAddr": "a:1",
                                    "heartbeatTimeoutMillis": v}, opaque=i))
               for i, v in enumerate(timeouts)]
    low, high = -(1 << 63), (1 << 63) - 1
    records += [(low, 2, "10.0.0.2:1", IN, request_frame(105, {"topic": "T"}, opaque=1)),
                (high, 2, "10.0.0.2:1", OUT, answer_frame(105, 0, opaque=1)),
                (t, 3, "10.0.0.3:1", IN, request_frame(4321, opaque=1)),
                (t + 5, 3, "10.0.0.3:1", OUT, answer_frame(4321, 4567, opaque=1)),
                (t + 9, 3, "10.0.0.3:1", OUT, answer_frame(105, 0, opaque=9)),
                (t + 10, 3, "10.0.0.3:1", IN, b"\x00\x00\x00\x02\x00\x00")]   # undecodable
    write_segment(tmp_path / "in", records)
    (tmp_path / "in" / "junk.rmqtrace").write_bytes(b"not a trace")         # unreadable
    paths = analyze.list_inputs(spark, [str(tmp_path / "in")])
    by_arrow = write_tables(spark, paths, str(tmp_path / "a"))
    by_spark = write_tables(spark, paths, str(tmp_path / "s"), writer="spark")
    assert by_arrow[2].counts == {"frames": len(records) + 1, "requests": len(timeouts) + 2,
                                  "open": 1}
    for x, y in zip(by_arrow[:2], by_spark[:2]):
        assert_same_rows(x, y)
    # the summary from the counts the tasks made, and from Spark's frames
    assert by_arrow[2].frame_counts == analyze.frame_counts(by_spark[0])
    summary = analyze.aggregate(*by_arrow[:2], paths, by_arrow[2].frame_counts)
    assert summary == analyze.aggregate(*by_spark[:2], paths)
    assert (summary["undecodable_frames"], summary["unreadable_inputs"]) == (1, 1)
    assert [(e["file"].rsplit("/", 1)[1], e["record"]) for e in summary["input_errors"]] == \
        [("junk.rmqtrace", 0), (os.path.basename(paths[1]), len(records) - 1)]
    requests = by_arrow[1]
    got = {r["opaque"]: r["heartbeat_timeout_ms"]
           for r in requests.where("peer = '10.0.0.1:1'").collect()}
    assert [got[i] for i in range(len(timeouts))] == [
        30000, 30000, 7, 0, None, None, None, None, None, (1 << 63) - 1, None]
    [overflow] = requests.where("peer = '10.0.0.2:1'") \
        .select("answer_time_ns", "latency_us").collect()
    assert overflow["answer_time_ns"] == high and overflow["latency_us"] is None
    [unknown] = requests.where("peer = '10.0.0.3:1'") \
        .select("code_name", "answer_code_name").collect()
    assert (unknown["code_name"], unknown["answer_code_name"]) == ("CODE_4321", "CODE_4567")


def test_no_frames_count_as_zero_both_ways(spark):
    from rmq.trace import arrow
    nothing = spark.createDataFrame([], analyze.frames_schema())
    assert analyze.frame_counts(nothing) == arrow.FrameStats().counts()


def test_spark_long_is_sparks_try_cast(spark):
    from rmq.trace import arrow
    texts = ["120000", " 120000", "\t12\n", "+5", "-5", "1.5", "1.", ".5", "1e3", "", " ", "+",
             "-", "+-5", "- 5", "9223372036854775807", "9223372036854775808",
             "-9223372036854775808", "-9223372036854775809", "0x10", "\uff11\uff12", "\u0663",
             "12a", "1_000", "\x0012", "12\x00", "\u00a012", "\u200b12", "1.5.5", "00012",
             "-0", "1,5", "\x1f7\x7f", "\u2028 9", "\x80 1", "0" * 5000 + "12", "9" * 5000,
             "-" + "0" * 30 + "5", "1" + "0" * 19, None]
    df = spark.createDataFrame([(t,) for t in texts], "s string")
    assert [r[0] for r in df.selectExpr("try_cast(s as bigint)").collect()] == \
        [arrow.spark_long(t) for t in texts]


def test_session_counts_are_the_traffic_sent(recorded):
    rec, answers, out, summary = recorded
    from rmq.protocol import RESPONSE_NAMES
    # the session itself went as planned
    assert {RESPONSE_NAMES[c]: answers.count(c) for c in set(answers)} == ANSWERS
    written = json.loads((out / "summary.json").read_text())
    assert written == json.loads(json.dumps(summary))
    s = written
    assert s["spark"]["executor_implementation"] == [rmq.IMPLEMENTATION]
    sent = sum(REQUESTS_SENT.values())
    assert s["frames"] == rec.recorded == sent + len(answers)
    assert (s["undecodable_frames"], s["unreadable_inputs"]) == (0, 0)
    assert s["connections"] == 3
    assert s["requests_per_code"] == REQUESTS_SENT
    assert s["requests"] == sent
    assert s["answers_per_code"] == ANSWERS
    assert (s["oneway"], s["unanswered"], s["errors"]) == (1, 0, 4)
    assert s["errors_per_code"] == [
        {"request": "GET_ROUTEINFO_BY_TOPIC", "answer": "TOPIC_NOT_EXIST", "answer_code": 17,
         "count": 2},
        {"request": "CODE_9999", "answer": "REQUEST_CODE_NOT_SUPPORTED", "answer_code": 3,
         "count": 1},
        {"request": "GET_KV_CONFIG", "answer": "QUERY_NOT_FOUND", "answer_code": 22, "count": 1}]
    assert s["top_topics"] == [{"topic": "T1", "requests": 3, "not_found": 0},
                               {"topic": "T2", "requests": 2, "not_found": 0},
                               {"topic": "nope", "requests": 2, "not_found": 2},
                               {"topic": "T3", "requests": 1, "not_found": 0}]
    brokers = {b["broker_name"]: b for b in s["brokers"]}
    assert sorted(brokers) == ["broker-a", "broker-b"]
    a, b = brokers["broker-a"], brokers["broker-b"]
    assert (a["broker_addr"], a["cluster"], a["registrations"], a["unregistrations"]) == \
        ("10.0.0.1:10911", "c1", 3, 0)
    assert (b["broker_addr"], b["registrations"], b["unregistrations"]) == ("10.0.0.2:10911", 2, 1)
    assert [e["reason"] for e in b["expiries"]] == ["unregistered"]
    assert a["expiries"] == []
    assert sum(n for _, n in a["registrations_per_bucket"]) == 3
    # every answered request has a latency in the table, per code
    answered = {k: v - (1 if k == "DELETE_KV_CONFIG" else 0) for k, v in REQUESTS_SENT.items()}
    assert {k: v["count"] for k, v in s["latency_us"].items()} == answered
    for q in s["latency_us"].values():
        assert 0 < q["p50"] <= q["p90"] <= q["p99"] <= q["max"] < 10 * 1e6
    mix = s["request_mix"]
    assert sum(n for _, _, n in mix["counts"]) == sent


def test_session_parquet_tables(recorded, spark):
    rec, answers, out, summary = recorded
    frames = spark.read.parquet(str(out / "frames.parquet"))
    requests = spark.read.parquet(str(out / "requests.parquet"))
    assert frames.count() == rec.recorded
    ins = frames.where("direction = 'in'")
    got = {r["code_name"]: r["count"] for r in ins.groupBy("code_name").count().collect()}
    assert got == REQUESTS_SENT
    assert {r["code_name"]: r["count"] for r in
            frames.where("direction = 'out'").groupBy("code_name").count().collect()} == ANSWERS
    assert frames.where("is_response").count() == frames.where("direction = 'out'").count()
    topics = {r["topic"]: r["count"] for r in
              ins.where("code = 105").groupBy("topic").count().collect()}
    assert topics == {"T1": 3, "T2": 2, "T3": 1, "nope": 2}
    per_broker = {(r["broker_name"], r["broker_addr"], r["cluster"]): r["count"] for r in
                  ins.where("code = 103").groupBy("broker_name", "broker_addr", "cluster")
                  .count().collect()}
    assert per_broker == {("broker-a", "10.0.0.1:10911", "c1"): 3,
                          ("broker-b", "10.0.0.2:10911", "c1"): 2}
    row = frames.where("code = 105 and is_response = false and language = 'JAVA'").first()
    assert row["direction"] == "in" and row["ext"]["topic"] == row["topic"]
    assert abs(row["time"].timestamp() - row["time_ns"] / 1e9) < 1e-3
    assert frames.where("peer not like '127.0.0.1:%'").count() == 0
    assert frames.where("decode_error is not null").count() == 0

    assert requests.count() == sum(REQUESTS_SENT.values())
    rows = requests.collect()
    for r in rows:
        if r["oneway"]:
            assert r["latency_us"] is None and r["answer_code"] is None
        else:
            assert r["latency_us"] is not None and r["latency_us"] > 0, r
            assert r["latency_us"] == (r["answer_time_ns"] - r["time_ns"]) / 1000
    assert [r["code_name"] for r in rows if r["oneway"]] == ["DELETE_KV_CONFIG"]
    nope = [r for r in rows if r["topic"] == "nope"]
    assert [(r["answer_code"], r["answer_code_name"]) for r in nope] == \
        [(17, "TOPIC_NOT_EXIST")] * 2


def test_session_report_references_charts_that_exist(recorded):
    out = recorded[2]
    page = (out / "report.html").read_text()
    images = re.findall(r'<img src="([^"]+)"', page)
    assert sorted(images) == sorted(["requests_over_time.png", "latency.png", "errors.png",
                                     "brokers.png", "topics.png"])
    for name in images:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "TOPIC_NOT_EXIST" in page and "broker-b" in page and "nope" in page


# ---------------------------------------------------------------- segments written to order

def write_segment(directory, records, prefix="trace"):
    w = SegmentWriter(directory, prefix=prefix)
    for r in records:
        w.write(*r)
    w.close()
    return w.files[0]


def test_undecodable_frame_and_unreadable_file_are_rows_not_failures(tmp_path, spark, capsys):
    header = b'{"code":105,"flag":0,"opaque":'          # cut inside the JSON header
    bad = struct.pack(">ii", 4 + len(header), len(header)) + header
    t = 1_700_000_000 * S
    write_segment(tmp_path / "in", [
        (t, 1, "10.0.0.9:5000", IN, request_frame(105, {"topic": "T"}, opaque=1)),
        (t + 1000, 1, "10.0.0.9:5000", IN, bad),
        (t + 2000, 1, "10.0.0.9:5000", OUT, answer_frame(105, 17, opaque=1))])
    (tmp_path / "in" / "junk.rmqtrace").write_bytes(b"not a trace at all")
    out = tmp_path / "out"
    # through binaryFiles, as for inputs on a cluster's storage
    assert run_main([str(tmp_path / "in"), "--out", str(out), "--reader", "spark"]) == 0
    assert "1 undecodable" in capsys.readouterr().out
    s = json.loads((out / "summary.json").read_text())
    assert s["spark"]["reader"] == "spark"
    assert (s["frames"], s["undecodable_frames"], s["unreadable_inputs"]) == (3, 1, 1)
    assert s["requests_per_code"] == {"GET_ROUTEINFO_BY_TOPIC": 1}
    assert s["answers_per_code"] == {"TOPIC_NOT_EXIST": 1}
    frames = spark.read.parquet(str(out / "frames.parquet"))
    bad_rows = frames.where("decode_error is not null").orderBy("file").collect()
    assert len(bad_rows) == 2
    junk, cut = bad_rows
    assert junk["file"].endswith("junk.rmqtrace") and "not a trace segment" in junk["decode_error"]
    assert junk["time_ns"] is None
    assert cut["record"] == 1 and cut["time_ns"] == t + 1000 and cut["code"] is None
    assert cut["frame_len"] == len(bad) and cut["peer"] == "10.0.0.9:5000"
    assert re.search(r"Error", cut["decode_error"])
    page = (out / "report.html").read_text()
    assert "not a trace segment" in page


def test_requests_meet_their_answers_by_connection_and_opaque(tmp_path, spark):
    """A request's answer is the first one on its connection with its opaque, not
    before it and before that opaque's next request there."""
    t = 1_700_000_000 * S
    ms = 1_000_000
    q = lambda c, o, at, **kw: (t + at * ms, c, f"p{c}", IN, request_frame(105, {"topic": "T"},
                                                                           opaque=o, **kw))
    a = lambda c, o, at, code=0: (t + at * ms, c, f"p{c}", OUT, answer_frame(105, code, opaque=o))
    write_segment(tmp_path / "in", [
        q(1, 5, 0), a(1, 6, 1), q(1, 6, 2), q(1, 7, 3, oneway=True), a(1, 7, 4),
        q(2, 5, 5), a(2, 5, 8, 17), a(1, 5, 10), a(1, 5, 20),     # a duplicate answer
        q(1, 5, 30), a(1, 5, 30)])                  # opaque 5 again; answered at once
    paths = analyze.list_inputs(spark, [str(tmp_path / "in")])
    reqs = analyze.requests_table(analyze.decode_frames(spark, paths))
    got = sorted((r["conn"], r["opaque"], (r["time_ns"] - t) // ms, r["oneway"],
                  r["answer_code"], r["latency_us"]) for r in reqs.collect())
    assert got == [(1, 5, 0, False, 0, 10_000.0), (1, 5, 30, False, 0, 0.0),
                   (1, 6, 2, False, None, None), (1, 7, 3, True, None, None),
                   (2, 5, 5, False, 17, 3000.0)]
    assert set(reqs.columns) >= {"file", "record", "peer", "code_name", "topic",
                                 "heartbeat_timeout_ms",
                                 "answer_time_ns", "answer_code_name", "answer_remark"}


def test_both_readers_give_the_same_rows(tmp_path, spark):
    """The workers opening file: inputs themselves (the default) and binaryFiles
    handing them over: the same rows for segments, a cut segment, a pcap capture and
    a file that is neither."""
    from pcapfiles import Connection, pcap, timed
    t = 1_700_000_000 * S
    write_segment(tmp_path / "in", [
        (t + i, 1 + i % 3, f"10.0.0.{i % 3}:5000", i % 2,
         request_frame(105, {"topic": f"T{i}"}, opaque=i) if i % 2 == 0
         else answer_frame(105, 0, opaque=i - 1)) for i in range(40)], prefix="a")
    cut = write_segment(tmp_path / "in", [
        (t, 9, "10.0.0.9:1", IN, request_frame(105, {"topic": "T"}, opaque=1)),
        (t + 1, 9, "10.0.0.9:1", OUT, answer_frame(105, 0, opaque=1))], prefix="b")
    with open(cut, "r+b") as f:
        f.truncate(os.path.getsize(cut) - 5)
    c = Connection()
    (tmp_path / "in" / "c.pcap").write_bytes(pcap(timed([
        *c.handshake(), c.packet("c", request_frame(105, {"topic": "P"}, opaque=3)),
        c.packet("s", answer_frame(105, 17, opaque=3)), *c.close()])))
    (tmp_path / "in" / "d.rmqtrace").write_bytes(b"neither")
    paths = analyze.list_inputs(spark, [str(tmp_path / "in")])
    assert len(paths) == 4

    def rows(reader):
        batches = analyze.frame_batches(spark, paths, reader=reader).collect()
        return sorted(_rows_of(batches), key=lambda r: (r[1], r[2]))

    workers = rows("workers")
    assert workers == rows("spark") == rows("auto")
    assert [sum(r[0] == p for r in workers) for p in paths] == [40, 1, 2, 1]
    assert workers[40][2:5] == (0, t, (1 << 32) + 9)            # the cut one's first record
    assert workers[-1][ERROR].startswith("TraceError: ")
    assert "not a trace segment" in workers[-1][ERROR]
    with pytest.raises(ValueError, match="reader must be one of"):
        analyze.frame_batches(spark, paths, reader="jvm")


def _rows_of(batches):
    """The PAIRED_ROW_FIELDS tuples of RAW_SCHEMA batches."""
    import pyarrow as pa
    table = pa.Table.from_batches(batches).select(list(PAIRED_ROW_FIELDS))
    return [tuple(dict(v) if k == "ext" and v is not None else v for k, v in r.items())
            for r in table.to_pylist()]


def test_a_worker_that_cannot_open_an_input_makes_it_a_row(tmp_path):
    missing = "file:" + str(tmp_path / "gone.rmqtrace")
    [row] = _rows_of(analyze.decode_paths([[missing]], {missing: 3}))
    assert row[:3] == (missing, 3, 0) and row[3] is None
    assert len(row) == len(PAIRED_ROW_FIELDS) and row[ERROR].startswith("FileNotFoundError: ")
    empty = tmp_path / "empty.rmqtrace"
    empty.write_bytes(b"")
    [row] = _rows_of(analyze.decode_paths([["file:" + str(empty)]], {}))
    assert "empty or cut before its header" in row[ERROR]


@pytest.mark.parametrize("uri, path", [
    ("file:/a/b c#1.rmqtrace", "/a/b c#1.rmqtrace"), ("file:///a/b", "/a/b"),
    ("file://localhost/a/b", "/a/b"), ("/a/b", "/a/b")])
def test_file_uris_name_local_paths(uri, path):
    assert analyze._local_path(uri) == path


def test_worker_groups_balance_bytes_and_keep_input_order(tmp_path):
    sizes = [50, 10, 40, 30, 20, 10]
    paths = []
    for i, n in enumerate(sizes):
        (tmp_path / f"{i}").write_bytes(b"x" * n)
        paths.append("file:" + str(tmp_path / f"{i}"))
    groups = analyze._balanced_groups(paths, 2)
    assert sorted(sum(groups, [])) == sorted(paths)
    assert [sum(sizes[paths.index(p)] for p in g) for g in groups] == [80, 80]
    assert all(g == sorted(g, key=paths.index) for g in groups)
    assert analyze._balanced_groups(paths[:1], 4) == [paths[:1]]


def test_two_files_keep_their_connections_apart(tmp_path, spark):
    t = 1_700_000_000 * S
    # the same conn id and opaques in both files: only the file tells them apart
    for i, latency_ns in enumerate((1_000_000, 5_000_000)):
        write_segment(tmp_path / "in", [
            (t, 7, f"10.0.0.{i}:5000", IN, request_frame(105, {"topic": "T"}, opaque=1)),
            (t + latency_ns, 7, f"10.0.0.{i}:5000", OUT, answer_frame(105, 0, opaque=1))],
            prefix=f"host{i}")
    out = tmp_path / "out"
    # as URIs: the inputs listed and the report copied through Hadoop's FileSystem,
    # as on a cluster's storage
    summary = analyze.analyze(spark, ["file:" + str(tmp_path / "in")], "file:" + str(out))
    assert summary["connections"] == 2 and len(summary["inputs"]) == 2
    assert json.loads((out / "summary.json").read_text())["connections"] == 2
    assert (out / "report.html").exists() and (out / "requests_over_time.png").exists()
    frames = spark.read.parquet(str(out / "frames.parquet"))
    conns = {(r["file_index"], r["conn"]) for r in frames.select("file_index", "conn").collect()}
    assert conns == {(0, 7), (1, (1 << 32) + 7)}
    reqs = spark.read.parquet(str(out / "requests.parquet")).orderBy("file").collect()
    assert [(r["peer"], r["latency_us"]) for r in reqs] == [("10.0.0.0:5000", 1000.0),
                                                           ("10.0.0.1:5000", 5000.0)]


def test_an_answer_in_the_next_segment_of_a_recording_is_matched(tmp_path, spark):
    """A recording's segments share its connection ids: a request at the end of
    one segment and its answer at the start of the next are one exchange."""
    from rmq.trace.segments import SegmentWriter
    t = 1_700_000_000 * S
    w = SegmentWriter(tmp_path / "in", segment_bytes=1024)
    w.write(t, 3, "10.0.0.9:5000", IN, request_frame(105, {"topic": "T" * 900}, opaque=4))
    w.write(t + 2_000_000, 3, "10.0.0.9:5000", OUT, answer_frame(105, 0, opaque=4))
    w.close()
    assert len(w.files) == 2
    summary = analyze.analyze(spark, [str(tmp_path / "in")], str(tmp_path / "out"))
    assert summary["connections"] == 1
    [req] = spark.read.parquet(str(tmp_path / "out" / "requests.parquet")).collect()
    assert req["latency_us"] == 2000.0


def test_requests_across_segments_meet_the_answers_the_whole_trace_gives(tmp_path, spark,
                                                                        monkeypatch):
    """Random exchanges (opaques reused, oneway requests, lost and duplicate answers)
    over a recording of many small segments: requests_table, which pairs within each
    file and again across files only the keys of answers that met no request, gives
    each request the answer that the rule gives on the whole trace at once."""
    import random
    rnd = random.Random(5)
    t = 1_700_000_000 * S
    events = []
    for i in range(400):
        conn, opaque, at = rnd.randint(1, 4), rnd.randint(0, 60), i * 10_000
        oneway = rnd.random() < 0.1
        events.append((t + at, conn, f"10.0.0.{conn}:1", IN,
                       request_frame(105, {"topic": f"T{i}"}, opaque=opaque, oneway=oneway),
                       "oneway" if oneway else "request"))
        # most are answered, some a little later, a few twice, some never
        for _ in range(rnd.choices([0, 1, 2], [15, 80, 5])[0]):
            events.append((t + at + rnd.randint(1, 60_000), conn, f"10.0.0.{conn}:1", OUT,
                           answer_frame(105, rnd.choice([0, 17]), opaque=opaque), "answer"))
    events.sort(key=lambda e: e[0])
    w = SegmentWriter(tmp_path / "in", segment_bytes=2048)
    for e in events:
        w.write(*e[:5])
    w.close()
    assert len(w.files) > 10
    # the rule on the whole trace: (conn, opaque, time) -> answer time or None
    want, last = {}, {}
    for time_ns, conn, _, _, frame, kind in events:
        key = (conn, rmq.decode_frame(frame).opaque)
        before = last.get(key)
        if kind == "answer" and before is not None and before[1] == "request":
            want[key + (before[0],)] = time_ns
        if kind != "answer":
            want[key + (time_ns,)] = None
        last[key] = (time_ns, kind) if kind != "answer" else None
    frames = analyze.decode_frames(spark, analyze.list_inputs(spark, [str(tmp_path / "in")]))
    # both ways are taken: answers met in their file, and keys paired again
    pairs = frames.select("conn", "opaque", "pair_open", "answer_time_ns").collect()
    open_keys = {(r[0], r[1]) for r in pairs if r[2]}
    assert open_keys and any(r[3] is not None and (r[0], r[1]) not in open_keys for r in pairs)
    got = {(r["conn"], r["opaque"], r["time_ns"]): r["answer_time_ns"]
           for r in analyze.requests_table(frames).collect()}
    assert got == want
    assert sum(v is not None for v in want.values()) > 100
    # The job: each input's requests written by its task, the open keys' requests
    # dropped from those parts and paired again from their frames (arrow.pair_again);
    # and, past MAX_OPEN_KEYS, the whole table written again by Spark.
    from rmq.trace import arrow
    paths = analyze.list_inputs(spark, [str(tmp_path / "in")])
    limits = (arrow.MAX_OPEN_KEYS, arrow.MAX_PAIR_AGAIN_ROWS)
    for keys, rows in (limits, (1, limits[1]), (limits[0], 1)):
        monkeypatch.setattr(arrow, "MAX_OPEN_KEYS", keys)
        monkeypatch.setattr(arrow, "MAX_PAIR_AGAIN_ROWS", rows)
        out = tmp_path / f"out-{keys}-{rows}"
        _, requests, written = write_tables(spark, paths, str(out))
        assert written.counts["open"] == sum(r[2] is True for r in pairs)
        assert (written.open_keys is None) == (keys == 1)
        assert (out / "requests.parquet" / "_SUCCESS").exists()
        assert written.counts["requests"] == len(want)
        got = [(r["conn"], r["opaque"], r["time_ns"], r["answer_time_ns"])
               for r in requests.collect()]
        assert len(got) == len(want) and {g[:3]: g[3] for g in got} == want
        assert sorted(os.listdir(out)) == ["frames.parquet", "requests.parquet"]


def test_broker_gaps_and_expiries(tmp_path, spark):
    """broker-a registers every 30 s with one 70 s gap (flagged) and one 200 s gap
    (flagged, expired by timeout), then stays silent past the timeout until the end
    of the trace; broker-b registers every 30 s, then unregisters."""
    t0 = 1_700_000_000 * S
    ext_a = {"clusterName": "c1", "brokerName": "broker-a", "brokerAddr": "10.0.0.1:10911",
             "brokerId": "0"}
    ext_b = dict(ext_a, brokerName="broker-b", brokerAddr="10.0.0.2:10911")
    times_a = [0, 30, 60, 90, 160, 190, 220, 420, 450, 480]
    records, opaque = [], 0
    for s in times_a:
        opaque += 1
        records.append((t0 + s * S, 1, "a:1", IN, request_frame(103, ext_a, opaque=opaque)))
        records.append((t0 + s * S + 1000, 1, "a:1", OUT, answer_frame(103, 0, opaque=opaque)))
    for s in (0, 30, 60, 90):
        opaque += 1
        records.append((t0 + s * S, 2, "b:1", IN, request_frame(103, ext_b, opaque=opaque)))
    records.append((t0 + 100 * S, 2, "b:1", IN, request_frame(104, ext_b, opaque=opaque + 1)))
    # a route query at the end makes the trace last until 700 s
    records.append((t0 + 700 * S, 3, "c:1", IN, request_frame(105, {"topic": "T"}, opaque=1)))
    records.sort(key=lambda r: r[0])
    write_segment(tmp_path / "in", records)
    summary = analyze.analyze(spark, [str(tmp_path / "in")], str(tmp_path / "out"))
    brokers = {b["broker_name"]: b for b in summary["brokers"]}
    a, b = brokers["broker-a"], brokers["broker-b"]
    assert a["registrations"] == 10 and a["median_interval_s"] == 30
    assert [((g["from_ns"] - t0) // S, (g["to_ns"] - t0) // S, g["expired"]) for g in a["gaps"]] \
        == [(90, 160, False), (220, 420, True)]
    assert [((e["time_ns"] - t0) // S, e["reason"]) for e in a["expiries"]] == \
        [(340, "timeout"), (600, "silent at end")]
    assert (b["registrations"], b["unregistrations"], b["gaps"]) == (4, 1, [])
    assert [((e["time_ns"] - t0) // S, e["reason"]) for e in b["expiries"]] == \
        [(100, "unregistered")]
    assert summary["request_mix"]["bucket_ns"] == 10 * S       # 700 s in at most 120 buckets


def test_broker_summary_of_its_events():
    """Events in any order; intervals of equal times count; the lower median; the
    largest timeout the broker sent; a gap it unregistered in is marked so."""
    import random

    from rmq.protocol import RequestCode as C
    reg, qdv, hb, unreg = (C.REGISTER_BROKER, C.QUERY_DATA_VERSION, C.BROKER_HEARTBEAT,
                           C.UNREGISTER_BROKER)
    events = [("c1", reg, 0, 0, 200_000), (None, reg, 10 * S, 1, None), ("c2", reg, 20 * S, 2, None),
              ("c1", reg, 30 * S, 3, 100_000), ("c1", qdv, 30 * S, 4, None),
              ("c1", unreg, 50 * S, 5, None), ("c1", hb, 100 * S, 6, None),
              ("c1", reg, 400 * S, 7, None)]
    random.Random(3).shuffle(events)
    b = analyze.broker_summary(("a", "1:1"), events, 0, 700 * S, 100 * S)
    assert (b["broker_name"], b["broker_addr"], b["cluster"]) == ("a", "1:1", "c2")
    assert (b["registrations"], b["heartbeats"], b["unregistrations"]) == (5, 2, 1)
    # intervals 10, 10, 10, 0, 70, 300 s: the lower median is 10 s
    assert b["median_interval_s"] == 10 and b["timeout_s"] == 200
    assert b["gaps"] == [
        {"from_ns": 30 * S, "to_ns": 100 * S, "expired": False, "unregistered": True},
        {"from_ns": 100 * S, "to_ns": 400 * S, "expired": True, "unregistered": False}]
    assert [(e["time_ns"] // S, e["reason"]) for e in b["expiries"]] == [
        (50, "unregistered"), (300, "timeout"), (600, "silent at end")]
    assert b["registrations_per_bucket"] == [[0, 4], [4, 1]]
    alone = analyze.broker_summary(("b", "2:2"), [(None, unreg, 5, 0, None)], 0, 10, 1)
    assert (alone["median_interval_s"], alone["gaps"], alone["cluster"]) == (None, [], None)
    assert alone["timeout_s"] == analyze.DEFAULT_HEARTBEAT_TIMEOUT_MS / 1000


def test_bucket_size_follows_the_span():
    assert analyze.choose_bucket_ns(0) == 1_000_000
    assert analyze.choose_bucket_ns(60 * S) == S // 2
    assert analyze.choose_bucket_ns(3600 * S) == 30 * S
    assert analyze.choose_bucket_ns(7 * 86400 * S) == 7200 * S
    assert 365 * 86400 * S / analyze.choose_bucket_ns(365 * 86400 * S) <= 120


def test_no_inputs_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert run_main([str(tmp_path / "empty"), "--out", str(tmp_path / "out")]) == 2
    assert "no trace segments" in capsys.readouterr().err


# ---------------------------------------------------------------- spark-submit

def _spark_submit():
    import pyspark
    path = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-submit")
    return path if os.access(path, os.X_OK) else shutil.which("spark-submit")


class TestCommand:
    """The job as its own program (rmq trace analyze, spark-submit): each starts its
    own JVM, so under xdist's --dist loadscope they run beside the session's tests."""

    def test_runs_through_spark_submit(self, tmp_path):
        assert _spark_submit(), "pyspark brings bin/spark-submit: it is not there"
        t = 1_700_000_000 * S
        write_segment(tmp_path / "in", [
            (t + i * 1000, 1, "p:1", IN if i % 2 == 0 else OUT,
             request_frame(105, {"topic": f"T{i // 2 % 3}"}, opaque=i // 2) if i % 2 == 0
             else answer_frame(105, 0, opaque=i // 2)) for i in range(40)])
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                   PYTHONPATH=SRC)
        script = os.path.join(SRC, "rmq", "trace", "analyze.py")
        with contextlib.suppress(KeyError):
            del env["SPARK_HOME"]       # the pyspark package's own
        p = subprocess.run([_spark_submit(), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                            script, str(tmp_path / "in"), "--out", str(tmp_path / "out")],
                           env=env, capture_output=True, text=True, timeout=180)
        assert p.returncode == 0, p.stderr[-3000:]
        s = json.loads((tmp_path / "out" / "summary.json").read_text())
        assert (s["frames"], s["requests"], s["answers_per_code"]) == (40, 20, {"SUCCESS": 20})
        assert {t["topic"]: t["requests"] for t in s["top_topics"]} == {"T0": 7, "T1": 7, "T2": 6}
        assert (tmp_path / "out" / "report.html").exists()
        assert s["spark"]["master"] == "local[1]"          # spark-submit's, not local[*]
        assert s["spark"]["executor_implementation"] == [rmq.IMPLEMENTATION]


    def test_rmq_trace_analyze_command_on_a_synthetic_trace(self, tmp_path):
        """The CLI as an operator runs it (no PYSPARK_PYTHON set: local workers run on
        rmq's own Python), on a synthetic trace whose counts are known; its stderr has
        rmq's progress (asked for: not a terminal) and none of Spark's logs."""
        from rmq.trace.synth import synthesize
        m = synthesize(tmp_path / "in", brokers=2, clients=3, minutes=3, topics=20, seed=3,
                       start=1_700_000_000)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK")}
        env["PYTHONPATH"] = SRC
        p = subprocess.run([sys.executable, "-m", "rmq", "trace", "analyze", str(tmp_path / "in"),
                            "--out", str(tmp_path / "out"), "--master", "local[2]", "--progress"],
                           env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        s = json.loads((tmp_path / "out" / "summary.json").read_text())
        # rmq's lines only ("rmq trace analyze: ..." says the workers' codec under RMQ_PUREPYTHON)
        ended = [line.split(":")[0] for line in p.stderr.splitlines()
                 if not line.endswith("...") and not line.startswith("rmq trace analyze: ")]
        assert ended == ["starting Spark", "listing inputs", "decoding",
                         "pairing requests and answers", "summarizing", "writing the report"], \
            p.stderr[-3000:]
        assert f"decoding: {analyze._files(len(m['files']))}, {m['frames']:,} frames -> " \
            "frames.parquet" in p.stderr
        assert s["frames"] == m["frames"]
        assert s["answers_per_code"] == m["answers"]
        assert s["requests_per_code"] == m["requests"]
        assert s["spark"]["executor_implementation"] == [rmq.IMPLEMENTATION]


def test_rows_become_the_dataframe_createDataFrame_makes(spark, monkeypatch):
    """The rows reach the JVM without createDataFrame's per-row Python passes, and
    where those JVM calls are missing, through createDataFrame: the same frame."""
    from pyspark.sql.types import IntegerType, MapType, StringType, StructField, StructType
    schema = StructType([StructField("file", StringType()), StructField("code", IntegerType()),
                         StructField("ext", MapType(StringType(), StringType()))])
    row = ("file:/t", 105, {"topic": "T"})
    rows = spark.sparkContext.parallelize([row, row[:2] + (None,)], 2)
    want = spark.createDataFrame(rows, schema, verifySchema=False).collect()
    fast = analyze._rows_dataframe(spark, rows, schema)
    assert fast.schema == schema and fast.collect() == want
    assert want[0]["ext"] == {"topic": "T"} and want[1]["ext"] is None

    def missing():
        raise AttributeError("no JVM")
    monkeypatch.setattr(rows, "_to_java_object_rdd", missing)
    assert analyze._rows_dataframe(spark, rows, schema).collect() == want
