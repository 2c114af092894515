"""rmq._core.Engine (engine.c): I/O threads that serve route queries from the route
table without the GIL and hand every other frame to Python, with its connection's
id; Python's answers go back through the engine. These tests drive it alone over
real TCP on 127.0.0.1 (the NameServer on it: the end-to-end tests with
serverEngine=c, tests/nameserver.py's SERVERS)."""

import ctypes
import os
import platform
import re
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from rmq import bodies
from nameserver import wait_for
from support import load_compiled, route_table

pytestmark = pytest.mark.once

core = load_compiled()


def table():
    rt = route_table(core)()
    for name, addr in (("broker-a", "10.0.0.1:10911"), ("broker-b", "10.0.0.2:10911")):
        b = bodies.register_broker_body([bodies.topic_config(t, 4, 4, 6) for t in ("T1", "T2")],
                                        {"counter": 1, "timestamp": 1})
        rt.register_broker("C", addr, name, 0, addr, body=b, now_ms=0)
    return rt


class Served:
    """An Engine on 127.0.0.1 and a Python thread answering what it hands over:
    every frame gets a response with code 0 and remark "python"; events logged."""

    def __init__(self, rt, **kw):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()
        self.engine = core.Engine(rt._tt, self.listener, **kw)
        self.log = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done.is_set():
            for kind, conn, data in self.engine.events(0.05):
                self.log.append((kind, conn, data))
                if kind == "frame":
                    self.answer(conn, data)
            kind = conn = data = None           # (a frame's buffer goes with its views)
        self.engine.stop()

    def answer(self, conn, data):
        cmd = core.decode_frame(data)
        self.engine.send(conn, core.encode_frame(cmd.response(0, "python")))

    def close(self):
        self.done.set()
        self.thread.join(10)
        self.listener.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_answers(sock, count, timeout=5.0):
    sock.settimeout(timeout)
    decoder = core.FrameDecoder()
    got = []
    while len(got) < count:
        data = sock.recv(1 << 16)
        if not data:
            break
        got += decoder.feed(data)
    return got


def route_query(topic, opaque, **kw):
    return core.encode_frame(core.RemotingCommand.request(105, {"topic": topic}, opaque=opaque,
                                                            **kw))


def test_routes_in_c_the_rest_in_python_in_order():
    rt = table()
    with Served(rt, threads=2) as s, socket.create_connection(s.address) as c:
        c.sendall(route_query("T1", 1) + route_query("nope", 2)
                  + core.encode_frame(core.RemotingCommand(106, opaque=3))
                  + route_query("T2", 4))
        got = read_answers(c, 4)
        assert [(a.opaque, a.code) for a in got] == [(1, 0), (2, 17), (3, 0), (4, 0)]
        assert got[0].body == rt.route_body("T1") and got[3].body == rt.route_body("T2")
        assert got[1].remark.startswith("No topic route info in name server for the topic: nope")
        assert got[2].remark == "python"
        counts = s.engine.counts()
        assert (counts["served"], counts["not_found"], counts["connections"]) == (2, 1, 1)
    kinds = [k for k, _, _ in s.log]
    assert kinds[:2] == ["open", "frame"]
    assert s.log[0][2].startswith("127.0.0.1:")


def test_a_big_frame_goes_to_python_in_the_buffer_it_was_read_into():
    rt = table()
    big = core.encode_frame(core.RemotingCommand(106, opaque=1, body=b"x" * (1 << 20)))
    with Served(rt) as s, socket.create_connection(s.address) as c:
        c.sendall(big + route_query("T1", 2) + route_query("T2", 3))
        got = read_answers(c, 3)
        assert [(a.opaque, a.code) for a in got] == [(1, 0), (2, 0), (3, 0)]
        assert got[0].remark == "python" and got[2].body == rt.route_body("T2")
    (frame,) = [data for kind, _, data in s.log if kind == "frame"]
    assert type(frame) is memoryview and frame.readonly and frame == big


def registration(topics, opaque, serialize_type):
    from rmq.brokersim import encode_body, topic_names
    body = encode_body(topic_names(topics), 1)
    cmd = core.RemotingCommand.request(103, {"brokerName": "broker-c", "brokerId": "0"},
                                       opaque=opaque, body=body)
    cmd.serialize_type = serialize_type
    return core.encode_frame(cmd)


@pytest.mark.parametrize("serialize_type", ["JSON", "ROCKETMQ"])
def test_a_registration_is_read_by_the_control_thread_and_scanned_as_it_arrives(
        serialize_type):
    # A frame of megabytes moves its client to the control thread as it begins (no
    # route thread reads the rest), which scans its topic entries as they come; the
    # table's read of the body takes them over and registers the same topics.
    rt = table()
    frame = registration(10_000, 2, serialize_type)
    with Served(rt, threads=1, control_thread=True) as s, \
            socket.create_connection(s.address) as c:
        c.sendall(route_query("T1", 1))
        assert read_answers(c, 1)[0].code == 0
        (opened,) = wait_log(s, "open")
        assert s.engine.connection_state(opened[1])["thread"] == 0
        c.sendall(frame[:300_000])
        wait_for(lambda: s.engine.connection_state(opened[1])["thread"] == 1)
        assert s.engine.connection_state(opened[1])["with_python"] == 0     # (not whole)
        for at in range(300_000, len(frame), 100_000):
            time.sleep(0.02)
            c.sendall(frame[at:at + 100_000])
        assert read_answers(c, 1)[0].remark == "python"
    (data,) = [data for kind, _, data in s.log if kind == "frame"]
    assert data == frame
    # all entries but those of the last read (the last 100,000 bytes: ~700 topics)
    assert 8_000 < core._arrived_entries(data) < 10_000
    body = core.decode_frame(data, copy_body=False).body
    fresh, arrived = table(), table()
    fresh.register_broker("C", "10.0.0.3:10911", "broker-c", 0, "", body=bytes(body), now_ms=0)
    arrived.register_broker("C", "10.0.0.3:10911", "broker-c", 0, "", body=body, now_ms=0)
    assert core._arrived_entries(data) == 0                                  # taken over
    assert arrived._tt.topic_count() == fresh._tt.topic_count() == 10_002
    for topic in ("T1", "T-00000", "T-05000", "T-09999"):
        assert arrived.route_body(topic) == fresh.route_body(topic)


def wait_pooled(engine, at_least, timeout=5.0):
    deadline = time.monotonic() + timeout
    while engine.counts()["pooled_bytes"] < at_least and time.monotonic() < deadline:
        time.sleep(0.01)
    return engine.counts()


def test_big_buffers_are_kept_for_the_next_and_given_back_once_idle():
    core._buffer_pool_trim(time.monotonic() + 3600)     # none left by earlier tests
    rt = table()
    body = b"x" * (1 << 20)
    with Served(rt) as s, socket.create_connection(s.address) as c:
        assert s.engine.counts()["pooled_bytes"] == 0
        for opaque in range(3):
            c.sendall(core.encode_frame(core.RemotingCommand(106, opaque=opaque, body=body)))
            assert read_answers(c, 1)[0].opaque == opaque
            s.log.clear()
            # the frame's buffer, once Python lets go of it, waits for the next one
            counts = wait_pooled(s.engine, len(body))
            assert counts["pooled_bytes"] >= len(body)
        # one buffer went round: the pool did not grow with each frame
        assert counts["pooled_buffers"] <= 2 and counts["pooled_bytes"] <= 4 * (1 << 21)
        core._buffer_pool_trim(time.monotonic() + 1)    # not idle long enough yet
        assert s.engine.counts()["pooled_bytes"] == counts["pooled_bytes"]
        core._buffer_pool_trim(time.monotonic() + 3600)
        assert s.engine.counts()["pooled_bytes"] == 0


class Turns(Served):
    """Served, but each frame for Python is answered with ``turns`` big answers, sent
    one at a time (as the NameServer answers a 206 flood a turn at a time), the
    connection resumed with the last."""

    def __init__(self, rt, turns, **kw):
        self.turns = turns
        super().__init__(rt, **kw)

    def answer(self, conn, data):
        cmd = core.decode_frame(data)
        for i, body in enumerate(self.turns):
            answer = cmd.response(0, f"turn {i}")
            answer.body = body
            self.engine.send(conn, core.encode_frame(answer), resume=i == len(self.turns) - 1)


def test_big_outputs_are_queued_as_they_are_and_written_in_order():
    # A client that reads nothing yet: Python's three big answers and the route answer
    # after them wait in the engine, each in the buffer it came in (not copied into
    # one growing buffer: that cost a 206 flood's thread milliseconds of page faults,
    # its other connections waiting), and come out whole and in order.
    rt = table()
    turns = [bytes([65 + i]) * (512 * 1024 + i) for i in range(3)]
    with Turns(rt, turns, sndbuf=4096) as s, socket.create_connection(s.address) as c:
        # (the socket buffers take ~0.2 MB: less than the first answer)
        c.sendall(core.encode_frame(core.RemotingCommand(106, opaque=1)) + route_query("T1", 2))
        (opened,) = wait_log(s, "open")
        deadline = time.monotonic() + 10
        while s.engine.counts()["served"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        state = s.engine.connection_state(opened[1])
        assert state["output_buffers"] == 4, state
        assert state["queued_output"] > 2 * 512 * 1024
        got = read_answers(c, 4, timeout=10)
        assert [(a.opaque, a.remark) for a in got] == [(1, "turn 0"), (1, "turn 1"),
                                                      (1, "turn 2"), (2, None)]
        assert [a.body for a in got[:3]] == turns and got[3].body == rt.route_body("T1")
        deadline = time.monotonic() + 5
        while s.engine.connection_state(opened[1])["queued_output"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s.engine.connection_state(opened[1])["output_buffers"] == 0


class Sized(Served):
    """Served, but each frame for Python (a batch: split here) is answered with a body
    of the size its "size" field asks, each answer sent on its own, the connection
    resumed with the batch's last."""

    def answer(self, conn, data):
        cmds = core.FrameDecoder(1 << 30).feed(bytes(data))
        for i, cmd in enumerate(cmds):
            answer = cmd.response(0, "sized")
            answer.body = sized_body(int(cmd.ext_fields["size"]), cmd.opaque)
            self.engine.send(conn, core.encode_frame(answer), resume=i == len(cmds) - 1)


def sized_body(size, opaque):
    return (opaque.to_bytes(4, "big") * (size // 4 + 1))[:size]


@pytest.mark.parametrize("seed,control_thread", [(0, False), (1, False), (2, False), (3, True)])
def test_route_answers_and_big_answers_of_any_size_come_whole_and_in_order(seed, control_thread):
    # Route answers (written by the thread into its out buffer) between Python's
    # answers of every size (small ones copied in, big ones queued as they came),
    # to a client that reads in spurts: every byte in order.
    import random
    rng = random.Random(seed)
    rt = table()
    sizes = [0, 100, 70_000, 300_000, 1_100_000]
    reqs, expected = [], []
    for opaque in range(1, 121):
        if rng.random() < 0.5:
            topic = rng.choice(["T1", "T2", "nope"])
            reqs.append(route_query(topic, opaque))
            expected.append((opaque, 17 if topic == "nope" else 0,
                             None if topic == "nope" else rt.route_body(topic)))
        else:
            size = rng.choice(sizes)
            reqs.append(core.encode_frame(core.RemotingCommand(106, opaque=opaque,
                                                               ext_fields={"size": str(size)})))
            expected.append((opaque, 0, sized_body(size, opaque)))
    stream = b"".join(reqs)
    with Sized(rt, threads=2, sndbuf=65536, control_thread=control_thread) as s, \
            socket.create_connection(s.address) as c:
        sender = threading.Thread(target=lambda: [c.sendall(stream[i:i + 50_000])
                                                  for i in range(0, len(stream), 50_000)])
        sender.start()
        c.settimeout(20)
        decoder, got = core.FrameDecoder(1 << 30), []
        while len(got) < len(expected):
            if rng.random() < 0.2:
                time.sleep(0.02)            # a spurt's pause: the output backs up
            data = c.recv(rng.choice([4096, 1 << 16, 1 << 20]))
            assert data, f"closed after {len(got)} answers"
            got += decoder.feed(data)
        sender.join(20)
    assert [(a.opaque, a.code) for a in got] == [(o, code) for o, code, _ in expected]
    for a, (_, _, body) in zip(got, expected):
        if body is not None:
            assert (a.body or b"") == body, a.opaque


class SharedParts(Served):
    """Served, but each batch for Python is answered in one send of parts: per frame,
    its head then its body as a SharedBytes (one object for every answer of a size,
    made for this batch and dropped by Python as soon as it is sent), a small
    answer between them as bytes."""

    def answer(self, conn, data):
        cmds = core.FrameDecoder(1 << 30).feed(bytes(data))
        shared, parts = {}, []
        for cmd in cmds:
            size = int(cmd.ext_fields["size"])
            answer = cmd.response(0, "shared")
            answer.body = sized_body(size, size)
            if size not in shared:
                shared[size] = core.SharedBytes(answer.body)
            parts += [core.encode_frame_head(answer), shared[size],
                      core.encode_frame(cmd.response(1, "between"))]
        self.engine.send(conn, parts)
        del shared, parts               # the engine's references are all that is left


@pytest.mark.parametrize("control_thread", [False, True])
def test_shared_bytes_are_written_whole_in_order_after_python_dropped_them(control_thread):
    # Bodies sent as SharedBytes, each the same object for several answers and
    # connections, interleaved with bytes, to clients reading in spurts: every byte
    # in order, though Python let go of them before the engine wrote them (ASan
    # checks the references in make test-debug).
    import random
    rng = random.Random(5)
    sizes = [0, 10, 70_000, 300_000, 1_100_000]
    with SharedParts(table(), threads=2, sndbuf=65536, control_thread=control_thread) as s:
        clients = [socket.create_connection(s.address) for _ in range(3)]
        try:
            expected = {}
            for i, c in enumerate(clients):
                asked = [rng.choice(sizes) for _ in range(12)]
                expected[i] = asked
                c.sendall(b"".join(core.encode_frame(core.RemotingCommand(
                    106, opaque=n, ext_fields={"size": str(size)}))
                    for n, size in enumerate(asked)))
            for i, c in enumerate(clients):
                time.sleep(0.05)            # the others' output backs up meanwhile
                got = read_answers(c, 2 * len(expected[i]), timeout=20)
                assert [(a.opaque, a.code) for a in got] == [
                    (n, code) for n in range(len(expected[i])) for code in (0, 1)]
                for a, size in zip(got[::2], expected[i]):
                    assert (a.body or b"") == sized_body(size, size), (i, a.opaque, size)
        finally:
            for c in clients:
                c.close()


def test_shared_bytes_queued_for_a_connection_that_closes_are_let_go():
    # A client that asks for big shared answers and closes without reading: the
    # references its queued output held go with it; another client still gets its
    # answers from the same bytes.
    with SharedParts(table(), sndbuf=4096) as s:
        ask = b"".join(core.encode_frame(core.RemotingCommand(
            106, opaque=n, ext_fields={"size": "1100000"})) for n in range(8))
        with socket.create_connection(s.address) as quitter:
            quitter.sendall(ask)
            (opened,) = wait_log(s, "open")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                state = s.engine.connection_state(opened[1])
                if state and state["queued_output"] > 4 * 1_100_000:
                    break
                time.sleep(0.01)
            assert state["output_buffers"] > 8, state
        wait_log(s, "closed")
        with socket.create_connection(s.address) as reader:
            reader.sendall(ask)
            got = read_answers(reader, 16, timeout=20)
        assert [a.body for a in got[::2]] == [sized_body(1_100_000, 1_100_000)] * 8


def test_shared_bytes_are_a_read_only_copy():
    data = bytearray(b"topic list" * 1000)
    shared = core.SharedBytes(data)
    data[:5] = b"xxxxx"
    assert bytes(shared) == b"topic list" * 1000 and len(shared) == 10_000
    view = memoryview(shared)
    assert view.readonly and view.nbytes == 10_000
    with pytest.raises(TypeError):
        view[0] = 0
    assert bytes(core.SharedBytes(b"")) == b""
    with pytest.raises(TypeError):
        core.SharedBytes("not bytes")


def _tasks():
    """This process's thread ids (engines of other tests may live on in it, e.g.
    tests/fuzz.py's: their threads are told apart by being here before)."""
    return {int(task.name) for task in Path("/proc/self/task").iterdir()}


def started_io_threads(before):
    """{name: tid} of the engine I/O threads not among the tasks ``before``."""
    found = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
        except OSError:
            continue                            # (a thread that ended meanwhile)
        if name.startswith("rmq-io-") and int(task.name) not in before:
            found[name] = int(task.name)
    return found


def _scheduler_slice(tid):
    """The slice (ns) thread ``tid`` asked for (sched_getattr), None if unknown here."""
    number = {"x86_64": 315, "aarch64": 275}.get(platform.machine())
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.create_string_buffer(48)
    if number is None or libc.syscall(number, tid, attr, 48, 0) != 0:
        return None                             # (e.g. an emulator without it)
    return struct.unpack_from("=IIQiIQ", attr)[5]


def test_the_io_threads_are_named_and_ask_for_short_slices():
    rt = table()
    before = _tasks()
    with Served(rt, threads=2) as s, socket.create_connection(s.address) as c:
        c.sendall(route_query("T1", 1))
        assert read_answers(c, 1)[0].code == 0
        release = tuple(int(x) for x in re.findall(r"\d+", platform.release())[:2])
        # (each thread names itself and asks for its slice as it starts: polled, a
        # busy machine may be slow)
        deadline = time.monotonic() + 5
        while True:
            threads = started_io_threads(before)
            slices = {name: _scheduler_slice(tid) for name, tid in threads.items()}
            done = sorted(threads) == ["rmq-io-0", "rmq-io-1"] and (
                release < (6, 12) or None in slices.values()     # EEVDF's slice requests
                or set(slices.values()) == {100_000})
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert sorted(threads) == ["rmq-io-0", "rmq-io-1"]
        if release >= (6, 12) and None not in slices.values():
            assert set(slices.values()) == {100_000}
        assert os.getpriority(os.PRIO_PROCESS, threads["rmq-io-0"]) == os.getpriority(
            os.PRIO_PROCESS, 0)                 # its nice value kept


def test_a_connection_that_talks_to_python_moves_to_the_control_thread_in_order():
    # With a control thread, a connection that hands a frame to Python (a broker, an
    # admin client) is served there from then on, its answers in order; one that only
    # asks routes stays on the route threads, and no connection is accepted there.
    rt = table()
    with Served(rt, threads=2, control_thread=True) as s, \
            socket.create_connection(s.address) as router, \
            socket.create_connection(s.address) as talker:
        router.sendall(route_query("T1", 1))
        assert read_answers(router, 1)[0].code == 0
        python = core.encode_frame(core.RemotingCommand(106, opaque=2))
        talker.sendall(route_query("T1", 1) + python + route_query("nope", 3) + python
                       + route_query("T2", 5))
        got = read_answers(talker, 5)
        assert [(a.opaque, a.code) for a in got] == [(1, 0), (2, 0), (3, 17), (2, 0), (5, 0)]
        assert got[1].remark == got[3].remark == "python"
        assert got[4].body == rt.route_body("T2")
        opened = [conn for kind, conn, _ in s.log if kind == "open"]
        states = {conn: s.engine.connection_state(conn) for conn in opened}
        threads = sorted(state["thread"] for state in states.values())
        assert threads[1] == 2 and threads[0] in (0, 1), states   # (the control thread: 2)
        # its id kept: the id's low byte still names the thread that accepted it
        assert all(conn & 0xFF in (0, 1) for conn in opened)
        router.sendall(route_query("T2", 6))
        assert read_answers(router, 1)[0].opaque == 6
        assert s.engine.counts()["connections"] == 2


def test_route_queries_python_answers_do_not_move_a_connection():
    # Route queries go to Python while the NameServer waits for its brokers
    # (needWaitForService), or while ACL checks them: their clients stay on the route
    # threads, and are answered there by the engine once it answers routes again.
    rt = table()
    with Served(rt, threads=2, control_thread=True) as s, \
            socket.create_connection(s.address) as c:
        s.engine.route_queries_in_c(False)
        got = []
        for opaque, topic in ((1, "T1"), (2, "T2")):       # (Served answers one frame)
            c.sendall(route_query(topic, opaque))
            got += read_answers(c, 1)
        assert [(a.opaque, a.remark) for a in got] == [(1, "python"), (2, "python")]
        (opened,) = wait_log(s, "open")
        assert s.engine.connection_state(opened[1])["thread"] in (0, 1)
        s.engine.route_queries_in_c(True)
        c.sendall(route_query("T1", 3))
        (answer,) = read_answers(c, 1)
        assert answer.remark is None and answer.body == rt.route_body("T1")
        assert s.engine.connection_state(opened[1])["thread"] in (0, 1)


def test_pythons_sends_and_close_reach_a_moved_connection_through_its_first_thread():
    # Python answers a moved connection by its id, whose thread passes each send on to
    # the control thread (until the move is direct) in the order Python made them (a turn at a time, as the
    # NameServer answers big batches); its close too, and once it is closed, the
    # first thread forgets the id.
    rt = table()
    turns = [bytes([65 + i]) * (200_000 + i) for i in range(4)]
    with Turns(rt, turns, threads=2, control_thread=True) as s, \
            socket.create_connection(s.address) as c:
        c.sendall(core.encode_frame(core.RemotingCommand(106, opaque=1)) + route_query("T1", 2))
        got = read_answers(c, 5, timeout=10)
        assert [(a.opaque, a.remark) for a in got] == [
            (1, f"turn {i}") for i in range(4)] + [(2, None)]
        assert [a.body for a in got[:4]] == turns
        (opened,) = wait_log(s, "open")
        conn = opened[1]
        assert s.engine.connection_state(conn)["thread"] == 2
        s.engine.close_connection(conn)
        c.settimeout(5)
        assert c.recv(1) == b""
        assert ("closed", conn, ("closed", None)) in wait_log(s, "closed")
        deadline = time.monotonic() + 5
        while s.engine.connection_state(conn) is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s.engine.connection_state(conn) is None
        s.engine.send(conn, b"too late")        # (for an id gone: ignored)
        assert s.engine.counts()["connections"] == 0


def io_threads(before, names, timeout=5.0):
    """started_io_threads, once ``names`` are all there (each thread names itself as
    it starts)."""
    deadline = time.monotonic() + timeout
    while True:
        found = started_io_threads(before)
        if sorted(found) == sorted(names) or time.monotonic() > deadline:
            return found
        time.sleep(0.01)


def context_switches(tid):
    status = Path(f"/proc/self/task/{tid}/status").read_text()
    return sum(int(n) for n in re.findall(r"^(?:non)?voluntary_ctxt_switches:\s+(\d+)$",
                                          status, re.M))


def test_once_moved_pythons_sends_go_to_the_control_thread_without_waking_the_first():
    # Once nothing Python sent before the move waits on the thread that accepted the
    # connection, Python's answers go to the control thread straight away: the route
    # thread is not woken for them (it was twice per answer: once to pass each on).
    rt = table()
    before = _tasks()
    rounds = 300
    with Served(rt, threads=1, control_thread=True, idle_seconds=0) as s, \
            socket.create_connection(s.address) as c:
        python = core.encode_frame(core.RemotingCommand(106, opaque=1))
        c.sendall(python)
        assert read_answers(c, 1)[0].remark == "python"
        threads = io_threads(before, ["rmq-io-0", "rmq-io-ctl"])
        (opened,) = wait_log(s, "open")
        assert s.engine.connection_state(opened[1])["thread"] == 1
        route_thread, ctl = context_switches(threads["rmq-io-0"]), context_switches(
            threads["rmq-io-ctl"])
        for opaque in range(2, rounds + 2):
            c.sendall(core.encode_frame(core.RemotingCommand(106, opaque=opaque)))
            (answer,) = read_answers(c, 1)
            assert (answer.opaque, answer.remark) == (opaque, "python")
        route_thread = context_switches(threads["rmq-io-0"]) - route_thread
        ctl = context_switches(threads["rmq-io-ctl"]) - ctl
        assert ctl >= rounds                    # (it was woken for each: the count works)
        assert route_thread < rounds // 10, (route_thread, ctl)


def test_the_control_thread_is_named_and_keeps_the_default_slice():
    rt = table()
    before = _tasks()
    with Served(rt, threads=1, control_thread=True) as s, socket.create_connection(s.address) as c:
        c.sendall(route_query("T1", 1))
        assert read_answers(c, 1)[0].code == 0
        found = io_threads(before, ["rmq-io-0", "rmq-io-ctl"])
        assert sorted(found) == ["rmq-io-0", "rmq-io-ctl"]
        ctl = _scheduler_slice(found["rmq-io-ctl"])
        assert ctl is None or ctl != 100_000      # (not the I/O threads' short slice)
        assert s.engine.config["control_thread"] is True
    with socket.create_server(("127.0.0.1", 0)) as listener, \
            pytest.raises(ValueError, match="with the control thread"):
        core.Engine(rt._tt, listener, threads=256, control_thread=True)


def test_trace_records_come_in_time_order_across_takes_and_threads():
    # A record stamped on one thread but published after a take already passed a
    # later one of another thread is held back (the watermark), never out of order.
    rt = table()
    with Served(rt, threads=2, trace_bytes=1 << 22) as s:
        stop = threading.Event()

        def client():
            with socket.create_connection(s.address) as c:
                i = 0
                while not stop.is_set():
                    c.sendall(route_query("T1", i) + route_query("nope", i + 1))
                    read_answers(c, 2)
                    i += 2

        clients = [threading.Thread(target=client) for _ in range(6)]
        for t in clients:
            t.start()
        # two seconds of takes racing the threads, longer until there are enough
        # records (a sanitizer build answers some ten times slower)
        taken, start = [], time.monotonic()
        while (time.monotonic() - start < 2
               or (len(taken) <= 1000 and time.monotonic() - start < 60)):
            taken += s.engine.trace_take()
        stop.set()
        for t in clients:
            t.join(10)
        taken += s.engine.trace_take(flush=True)
    times = [r[0] for r in taken]
    assert len(times) > 1000 and times == sorted(times)
    ins = sum(1 for r in taken if r[2] == "in")
    outs = sum(1 for r in taken if r[2] == "out")
    assert ins == outs and sum(1 for r in taken if r[2] == "open") == 6


def test_a_full_trace_ring_drops_and_counts_records_and_never_makes_the_thread_wait():
    # The smallest ring (4096 bytes: a few route queries' records) and nobody taking
    # the trace: the thread drops what does not fit, counts it, and answers on. What
    # it kept are the first records, each whole; after a take the ring records again.
    rt = table()
    queries = 200
    with Served(rt, trace_bytes=4096) as s, socket.create_connection(s.address) as c:
        for i in range(queries):            # one at a time: one "in" and one "out" each
            c.sendall(route_query("T1", i))
            (got,) = read_answers(c, 1)
            assert (got.opaque, got.code, got.body) == (i, 0, rt.route_body("T1"))
        dropped = s.engine.counts()["trace_dropped"]
        taken = s.engine.trace_take(flush=True)
        # every record was kept or counted: the open, and an in and an out per query
        assert dropped > 0 and len(taken) + dropped == 1 + 2 * queries
        assert taken[0][2] == "open"
        ins = [data for _, _, kind, data in taken if kind == "in"]
        outs = [core.decode_frame(data) for _, _, kind, data in taken if kind == "out"]
        # the first ones, none overwritten by later ones, each a whole frame
        assert ins == [route_query("T1", i) for i in range(len(ins))]
        assert [a.opaque for a in outs] == list(range(len(outs)))
        assert all(a.body == rt.route_body("T1") for a in outs)
        assert 0 < len(outs) <= len(ins) < queries
        c.sendall(route_query("T2", queries))
        assert read_answers(c, 1)[0].opaque == queries
        again = s.engine.trace_take(flush=True)
        assert [kind for _, _, kind, _ in again] == ["in", "out"]
        assert again[0][3] == route_query("T2", queries)
        answer = core.decode_frame(again[1][3])
        assert (answer.opaque, answer.body) == (queries, rt.route_body("T2"))
        assert s.engine.counts()["trace_dropped"] == dropped


def test_a_closed_connection_is_told():
    rt = table()
    with Served(rt) as s:
        with socket.create_connection(s.address) as c:
            c.sendall(route_query("T1", 1))
            assert read_answers(c, 1)[0].code == 0
        deadline = time.monotonic() + 5
        while "closed" not in [k for k, _, _ in s.log] and time.monotonic() < deadline:
            time.sleep(0.01)
        (opened,) = [conn for k, conn, _ in s.log if k == "open"]
        assert ("closed", opened, ("peer", None)) in s.log
        counts = s.engine.counts()
        assert counts["accepted"] == 1 and counts["closed"]["peer"] == 1
        assert counts["bytes_in"] == len(route_query("T1", 1))
        assert counts["bytes_out"] > 0 and counts["connections"] == 0


def test_a_bad_frame_closes_after_the_answers_before_it():
    rt = table()
    with Served(rt, max_frame=1024) as s, socket.create_connection(s.address) as c:
        c.sendall(route_query("T1", 1) + route_query("T2", 2) + struct.pack(">i", 5000))
        got = read_answers(c, 3)
        assert [a.opaque for a in got] == [1, 2]
        assert c.recv(1) == b""             # closed by the engine
        assert wait_log(s, "closed")        # (its event may come after the EOF)
    (why,) = [data for k, _, data in s.log if k == "closed"]
    assert why == ("bad_frame", (False, struct.pack(">i", 5000)))


def test_a_bad_first_frame_is_reported_as_the_first():
    rt = table()
    hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(20)   # a TLS ClientHello
    with Served(rt) as s, socket.create_connection(s.address) as c:
        c.sendall(hello)
        c.settimeout(5)
        assert c.recv(1) == b""
        assert wait_log(s, "closed")        # (its event may come after the EOF)
    (why,) = [data for k, _, data in s.log if k == "closed"]
    assert why == ("bad_frame", (True, hello[:16]))


def test_connections_go_to_the_thread_with_the_fewest():
    """Connections that come one at a time (each served before the next: the accepting
    thread is always the idle one epoll wakes) spread over the threads; after closes,
    the next ones fill the thread that lost them. A connection id's low byte is its
    thread."""
    rt = table()

    def opened(s, n):
        assert wait_for(lambda: len([k for k, _, _ in s.log if k == "open"]) == n, 10)
        return [conn for k, conn, _ in s.log if k == "open"]

    def threads(conns):
        return sorted(conn & 0xFF for conn in conns)

    with Served(rt, threads=3) as s:
        socks = []
        try:
            for k in range(6):
                socks.append(socket.create_connection(s.address))
                socks[-1].sendall(route_query("T1", k))
                assert read_answers(socks[-1], 1)[0].code == 0
            ids = opened(s, 6)
            assert threads(ids) == [0, 0, 1, 1, 2, 2]
            # the two on thread 1 go; the next two come there
            gone = [i for i, conn in enumerate(ids) if conn & 0xFF == 1]
            for i in gone:
                socks[i].close()
            assert wait_for(lambda: s.engine.counts()["connections"] == 4, 10)
            for k in range(2):
                socks.append(socket.create_connection(s.address))
                socks[-1].sendall(route_query("T2", 10 + k))
                assert read_answers(socks[-1], 1)[0].code == 0
            assert threads(opened(s, 8)[6:]) == [1, 1]
            assert s.engine.counts()["accepted"] == 8
        finally:
            for sock in socks:
                sock.close()


def test_connections_above_the_limit_are_closed():
    rt = table()
    with Served(rt, max_connections=1) as s, socket.create_connection(s.address) as first:
        first.sendall(route_query("T1", 1))
        assert read_answers(first, 1)[0].code == 0
        with socket.create_connection(s.address) as second:
            second.settimeout(5)
            assert second.recv(1) == b""
        first.sendall(route_query("T1", 2))
        assert read_answers(first, 1)[0].opaque == 2
        assert s.engine.counts()["refused"] == 1
        assert s.engine.counts()["accepted"] == 1


def test_idle_connections_are_closed_and_busy_ones_kept():
    rt = table()
    with Served(rt, idle_seconds=0.3) as s, socket.create_connection(s.address) as idle, \
            socket.create_connection(s.address) as busy:
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            busy.sendall(route_query("T1", 1))
            assert read_answers(busy, 1)[0].code == 0
            time.sleep(0.05)
        idle.settimeout(5)
        assert idle.recv(1) == b""
        busy.sendall(route_query("T1", 2))
        assert read_answers(busy, 1)[0].opaque == 2
        assert wait_log(s, "closed")        # (its event may come after the EOF)
    assert [d for k, _, d in s.log if k == "closed"][0] == ("idle", None)


def test_a_close_the_peer_does_not_take_is_aborted_after_the_idle_time():
    rt = table()
    frames = route_query("T1", 1) * 20000      # more answers than the socket buffers hold
    with Served(rt, idle_seconds=0.5, max_output=1 << 30, sndbuf=4096) as s, \
            socket.create_connection(s.address) as c:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.sendall(core.encode_frame(core.RemotingCommand(106, opaque=1)))
        (conn,) = [conn for k, conn, _ in wait_log(s, "frame")]
        c.sendall(frames)                   # read once Python answers
        s.engine.send(conn, b"")            # resumes: the routes' answers back up
        time.sleep(0.2)
        s.engine.close_connection(conn)     # never completes: the client does not read
        assert wait_log(s, "closed", timeout=5)
    assert [d for k, _, d in s.log if k == "closed"] == [("unsent", None)]


def wait_log(s, kind, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = [e for e in s.log if e[0] == kind]
        if found:
            return found
        time.sleep(0.01)
    return []


def test_the_total_output_bound_aborts_the_largest_stalled_connection():
    rt = table()
    frames = route_query("T1", 1) * 20000       # ~8 MB of answers
    with Served(rt, max_total_output=1 << 20, max_output=1 << 30, sndbuf=4096) as s:
        stalled = socket.create_connection(s.address)
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            stalled.sendall(frames)             # its answers never read
        except OSError:                         # aborted meanwhile
            pass
        assert wait_log(s, "closed", timeout=10)
        with socket.create_connection(s.address) as fine:
            fine.sendall(route_query("T2", 2))
            assert read_answers(fine, 1)[0].opaque == 2
        stalled.close()
    closes = [d for k, _, d in s.log if k == "closed"]
    assert closes[0] == ("output_budget", None)
    assert s.log[0][0] == "open"


def test_route_queries_go_to_python_when_asked_and_accepting_stops():
    rt = table()
    with Served(rt) as s, socket.create_connection(s.address) as c:
        s.engine.route_queries_in_c(False)
        c.sendall(route_query("T1", 1))
        (got,) = read_answers(c, 1)
        assert got.remark == "python"           # Python's answer, not the route
        s.engine.route_queries_in_c(True)
        c.sendall(route_query("T1", 2))
        (got,) = read_answers(c, 1)
        assert got.code == 0 and got.body == rt.route_body("T1")
        s.engine.stop_accepting()
        time.sleep(0.1)
        with socket.create_connection(s.address, timeout=1) as late:
            late.sendall(route_query("T1", 3))
            late.settimeout(0.5)
            with pytest.raises(socket.timeout):     # in the backlog, never accepted
                late.recv(1)
        c.sendall(route_query("T1", 4))             # the open ones are served on
        assert read_answers(c, 1)[0].opaque == 4
        assert s.engine.counts()["accepted"] == 1


def test_many_connections_and_threads_while_the_table_changes():
    rt = table()
    frames = b"".join(route_query(t, i) for i, t in enumerate(["T1", "T2", "nope"] * 50))
    with Served(rt, threads=2) as s:
        errors = []

        def client():
            try:
                with socket.create_connection(s.address) as c:
                    for _ in range(20):
                        c.sendall(frames)
                        got = read_answers(c, 150)
                        assert [a.code for a in got] == [0, 0, 17] * 50
            except Exception as e:      # reported below
                errors.append(e)

        clients = [threading.Thread(target=client) for _ in range(8)]
        for t in clients:
            t.start()
        for k in range(50):             # registrations take the write lock meanwhile
            b = bodies.register_broker_body([bodies.topic_config(t, 4, 4, 6) for t in ("T1", "T2")],
                                            {"counter": 2 + k, "timestamp": 1})
            rt.register_broker("C", "10.0.0.1:10911", "broker-a", 0, "10.0.0.1:10911", body=b,
                               now_ms=0)
        for t in clients:
            t.join(30)
        assert errors == []
        counts = s.engine.counts()
        assert counts["served"] == 8 * 20 * 100 and counts["not_found"] == 8 * 20 * 50


def test_the_event_fd_is_readable_while_events_are_queued():
    """An event loop waits on event_fd and takes the events with events(0): readable
    once an event is queued, not after the take; events(0) never waits, events(t)
    waits up to t for the first."""
    import select
    rt = table()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        e = core.Engine(rt._tt, listener)
        try:
            fd = e.event_fd
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            assert poller.poll(0) == []
            t = time.monotonic()
            assert e.events(0) == [] and time.monotonic() - t < 0.05
            t = time.monotonic()
            assert e.events(0.2) == [] and time.monotonic() - t >= 0.19
            with socket.create_connection(listener.getsockname()) as c:
                assert poller.poll(5000) == [(fd, select.POLLIN)]
                assert [k for k, _, _ in e.events(0)] == ["open"]
                assert poller.poll(0) == []
                c.sendall(core.encode_frame(core.RemotingCommand(106, opaque=1)) * 3)
                got = []
                while len(got) < 1:         # (one batch: a connection's frames wait for it)
                    assert poller.poll(5000) == [(fd, select.POLLIN)]
                    got += [d for k, _, d in e.events(0) if k == "frame"]
                one = len(core.encode_frame(core.RemotingCommand(106, opaque=1)))
                assert len(got[0]) in (one, 2 * one, 3 * one)
                got = None
            assert [k for k, _, _ in e.events(5)] == ["closed"]
        finally:
            e.stop()


def test_bad_settings_are_refused():
    rt = table()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        with pytest.raises(ValueError, match="threads"):
            core.Engine(rt._tt, listener, threads=0)
        with pytest.raises(ValueError, match="max_frame"):
            core.Engine(rt._tt, listener, max_frame=4)
        with pytest.raises(ValueError, match="idle_seconds"):
            core.Engine(rt._tt, listener, idle_seconds=-1)
        e = core.Engine(rt._tt, listener)
        e.stop()
        with pytest.raises(ValueError, match="stopped"):
            e.events(0)
