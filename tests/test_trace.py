"""Trace recording (rmq namesrv --trace-dir) and segment reading: real NameServer
sessions over TCP, real files, a real kill -9."""

import os
import signal
import subprocess
import sys
import threading
import time

import msgpack
import pytest

import rmq
from nameserver import Client, recorded_traffic, register_broker
from rmq.trace.segments import (IN, OUT, SegmentReader, SegmentWriter, TraceError, TraceRecorder,
                                read_records, segment_files)


def records_of(directory):
    out = []
    for path in segment_files([directory]):
        out += list(read_records(path))
    return out


def session(address):
    """A session of every kind of traffic; returns the requests sent (commands)."""
    sent = []
    with Client(address) as broker, Client(address) as client:
        def req(c, code, ext=None, body=b"", **kw):
            cmd = rmq.RemotingCommand.request(code, ext, body, **kw)
            sent.append(cmd)
            if cmd.is_oneway:
                c.send(cmd)
                return None
            return c.call(cmd)

        r = register_broker(broker, "broker-a", "10.0.0.1:10911", topics=["T1", "T2", "T3"])
        assert r.code == 0
        sent.append(broker.last_sent)
        for i in range(5):
            assert req(client, 100, {"namespace": "ns", "key": f"k{i}", "value": "v"}).code == 0
        assert req(client, 101, {"namespace": "ns", "key": "k1"}).code == 0
        assert req(client, 101, {"namespace": "ns", "key": "missing"}).code == 22
        for t in ("T1", "T2", "T1", "nope"):
            req(client, 105, {"topic": t}, serialize_type="ROCKETMQ" if t == "T2" else "JSON")
        assert req(client, 9999).code == 3                      # unknown code
        req(client, 102, {"namespace": "ns", "key": "k0"}, oneway=True)
        assert req(client, 106).code == 0
    return sent


@pytest.mark.usefixtures("each_server")     # the asyncio server's and the I/O engine's
def test_recorded_session_holds_every_frame_in_and_out(tmp_path):
    rec, sent = recorded_traffic(tmp_path, session)
    assert rec.dropped == 0
    records = records_of(tmp_path / "trace")
    ins = [r for r in records if r[3] == IN]
    outs = [r for r in records if r[3] == OUT]
    # every request, byte for byte, in the order each connection sent it
    assert sorted(f for *_, f in ins) == sorted(rmq.encode_frame(c) for c in sent)
    answered = [c for c in sent if not c.is_oneway]
    answers = {rmq.decode_frame(f).opaque: rmq.decode_frame(f) for *_, f in outs}
    assert len(outs) == len(answered)
    assert sorted(answers) == sorted(c.opaque for c in answered)
    assert [answers[c.opaque].code for c in answered if c.code == 105] == [0, 0, 0, 17]
    # the ROCKETMQ request's answer is in the NameServer's serialize type (JSON), as
    # Java 5.x answers, not the request's
    assert [c.serialize_type for c in sent if c.code == 105][1] == "ROCKETMQ"
    assert answers[[c for c in sent if c.code == 105][1].opaque].serialize_type == "JSON"
    # fields: two connections, peers are the clients' addresses, time moves on
    conns = {r[1] for r in records}
    assert len(conns) == 2
    assert all(r[2].startswith("127.0.0.1:") for r in records)
    times = [r[0] for r in records]
    assert times == sorted(times) and abs(times[0] / 1e9 - time.time()) < 60
    assert rec.recorded == len(records)


def test_segments_rotate_and_read_back_in_order(tmp_path):
    w = SegmentWriter(tmp_path, segment_bytes=4096)
    frames = [rmq.encode_frame(rmq.RemotingCommand.request(105, {"topic": f"T{i}"}))
              for i in range(300)]
    for i, f in enumerate(frames):
        w.write(1_000 + i, i % 3, "127.0.0.1:1", i % 2, f)
    w.close()
    assert len(w.files) > 5
    assert all(os.path.getsize(p) < 4096 + 200 for p in w.files)
    got = records_of(tmp_path)
    assert [r[4] for r in got] == frames
    assert [r[0] for r in got] == list(range(1_000, 1_300))


def test_a_cut_segment_reads_up_to_its_last_complete_record(tmp_path):
    w = SegmentWriter(tmp_path)
    frames = [rmq.encode_frame(rmq.RemotingCommand.request(100, {"k": "x" * i}))
              for i in range(20)]
    for i, f in enumerate(frames):
        w.write(i, 1, "p", IN, f)
    w.close()
    data = open(w.files[0], "rb").read()
    ends = []                                           # offset after each record
    u = msgpack.Unpacker()
    u.feed(data)
    for _ in u:
        ends.append(u.tell())
    for cut in range(ends[0], len(data) + 1):
        reader = SegmentReader(data[:cut])
        got = list(reader)
        complete = sum(1 for e in ends[1:] if e <= cut)
        assert [r[4] for r in got] == frames[:complete]
        assert reader.stats["truncated_bytes"] == cut - ends[complete]


def test_not_a_segment_is_a_typed_error(tmp_path):
    for data, what in ((b"", "empty"), (msgpack.packb({"x": 1}), "not a trace segment"),
                       (msgpack.packb({"rmq-trace": 9}), "format 9"),
                       (b"\xc1" * 10, "not a trace segment")):
        with pytest.raises(TraceError, match=what):
            list(SegmentReader(data))


def test_a_full_queue_drops_and_counts_never_blocks(tmp_path):
    rec = TraceRecorder(tmp_path, queue_frames=10)
    gate = threading.Event()
    write = rec.writer.write

    def slow_write(*args):          # the disk stalls
        gate.wait(10)
        write(*args)
    rec.writer.write = slow_write
    rec._wake.set()                 # the writer thread picks slow_write up on its next drain
    time.sleep(0.3)
    t = time.monotonic()
    for i in range(1000):
        rec.record(1, "p", IN, b"\x00\x00\x00\x04abcd")
    assert time.monotonic() - t < 0.5
    assert rec.dropped >= 989
    gate.set()
    rec.close()
    # the ten the queue holds, and the one the stalled writer may have taken: written
    assert 10 <= rec.recorded <= 11
    assert rec.recorded + rec.dropped == 1000
    assert len(records_of(tmp_path)) == rec.recorded


def test_kill_9_during_traffic_leaves_readable_segments(tmp_path):
    trace_dir = tmp_path / "trace"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    port_file = tmp_path / "port"
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = subprocess.Popen([sys.executable, "-m", "rmq", "namesrv", "--listen", f"127.0.0.1:{port}",
                          "--kv-config", str(tmp_path / "kv.json"), "--trace-dir", str(trace_dir),
                          "--trace-segment-mib", "1"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                c = Client(f"127.0.0.1:{port}")
                break
            except OSError:
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.05)
        with c:
            answered = 0
            t = time.monotonic()
            while time.monotonic() - t < 1.0:
                assert c.request(100, {"namespace": "n", "key": "k" * 200, "value": "v" * 500}).code == 0
                answered += 1
            os.kill(p.pid, signal.SIGKILL)
    finally:
        p.kill()
        p.wait()
    records = records_of(trace_dir)             # no error: cut records end each segment
    assert records and all(rmq.decode_frame(r[4]) for r in records)
    assert 0 < len(records) <= 2 * answered
    del port_file


def test_read_records_takes_a_capture_from_bytes_or_a_path(tmp_path):
    """What the Spark job hands read_records: a whole file's bytes."""
    from pcapfiles import Connection, pcap, timed
    from rmq.trace.pcap import PcapReader
    frames = [rmq.encode_frame(rmq.RemotingCommand.request(105, {"topic": "T"}, opaque=1))]
    c = Connection()
    path = tmp_path / "c.pcap"
    path.write_bytes(pcap(timed([*c.handshake(), c.packet("c", frames[0]), *c.close()])))
    expected = list(PcapReader(str(path)))
    assert len(expected) == 1 and expected[0][4] == frames[0]
    assert list(read_records(str(path))) == expected
    assert list(read_records(path.read_bytes())) == expected


def test_a_write_error_stops_the_recording_not_the_server(tmp_path):
    """The trace directory disappears: the next segment cannot be opened. The
    recorder says so (error, dropped) and record() goes on returning at once."""
    import shutil
    frame = rmq.encode_frame(rmq.RemotingCommand.request(100, {"v": "x" * 300}))
    rec = TraceRecorder(tmp_path / "t", segment_bytes=1024)
    for _ in range(3):
        rec.record(1, "p", IN, frame)
    deadline = time.monotonic() + 5
    while rec.recorded < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert rec.recorded == 3            # the first segment holds them
    shutil.rmtree(tmp_path / "t")
    for _ in range(20):                     # past the segment size: a new file is needed
        rec.record(1, "p", IN, frame)
    deadline = time.monotonic() + 5
    while rec.error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert isinstance(rec.error, OSError)
    t = time.monotonic()
    for _ in range(1000):
        rec.record(1, "p", IN, frame)
    assert time.monotonic() - t < 0.5
    rec.close()
    assert rec.recorded == 3 and rec.dropped == 1020


def test_the_queue_is_bounded_in_bytes_too(tmp_path):
    rec = TraceRecorder(tmp_path, queue_bytes=10_000)
    gate = threading.Event()
    write = rec.writer.write
    rec.writer.write = lambda *a: (gate.wait(10), write(*a))
    rec._wake.set()
    time.sleep(0.3)
    big = b"\x00\x00\x0f\xfc" + b"x" * 4092      # 4 KiB frames: two fit, the rest do not
    for _ in range(10):
        rec.record(1, "p", IN, big)
    gate.set()
    rec.close()
    # the two the queue holds, and the one the stalled writer may have taken: written
    assert 2 <= rec.recorded <= 3 and rec.recorded + rec.dropped == 10
    assert [r[4] for r in records_of(tmp_path)] == [big] * rec.recorded
