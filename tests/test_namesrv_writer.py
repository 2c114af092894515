"""The table thread: with the compiled tables, every request that changes or reads
the tables beyond a cached answer runs off the event loop, so that route queries of
other connections go on; each connection's own requests stay in order. Real TCP,
both event loops."""

import asyncio
import os
import threading
import time

import pytest

import rmq
from nameserver import Client, register_broker, running_namesrv
from rmq.namesrv.kvconfig import read_table
from rmq.namesrv.server import WRITER_NICE

BIG = [f"Topic-{i:05d}" for i in range(3000)]        # ~300 KB: offloaded


@pytest.fixture
def srv(tmp_path, loop):
    with running_namesrv(tmp_path, loop=loop) as app:
        assert app.writer is not None
        yield app


def _register_cmd(name, addr, topics, counter=1):
    """A REGISTER_BROKER request (not sent)."""
    from rmq.bodies import encode_register_broker_body, register_broker_body, topic_config
    body = encode_register_broker_body(register_broker_body(
        [topic_config(t, 4, 4) for t in topics], {"counter": counter, "timestamp": counter}))
    return rmq.RemotingCommand.request(103, {
        "clusterName": "c1", "brokerAddr": addr, "brokerName": name, "brokerId": "0",
        "haServerAddr": addr}, body)


def test_requests_behind_an_offloaded_registration_see_it(srv):
    """[REGISTER 3000 topics, GET_ROUTEINFO of its last topic, 106] in one write:
    answered in order, the route query sees the registration."""
    with Client(srv.address) as c:
        reg = _register_cmd("bk", "10.0.0.1:10911", BIG)
        q = rmq.RemotingCommand.request(105, {"topic": BIG[-1]})
        info = rmq.RemotingCommand.request(106)
        c.send_raw(b"".join(rmq.encode_frame(x) for x in (reg, q, info)))
        got = [c.receive() for _ in range(3)]
        assert [r.opaque for r in got] == [reg.opaque, q.opaque, info.opaque]
        assert [r.code for r in got] == [0, 0, 0]
        assert b"10.0.0.1:10911" in got[1].body


def test_route_queries_of_other_connections_are_answered_during_registrations(srv):
    """While one broker keeps re-registering 3000 topics with new DataVersions
    (each applied in the writer thread), another connection's route queries get
    answers that are each some registration's route, never an error."""
    with Client(srv.address) as broker, Client(srv.address) as client:
        assert register_broker(broker, "bk", "10.0.0.1:10911", topics=BIG).code == 0
        # every registration gives every topic the same route: 4/4 queues on bk alone
        route = client.request(105, {"topic": BIG[0]}).body
        assert b'"brokerName":"bk"' in route and b'"readQueueNums":4' in route
        stop = threading.Event()
        errors = []

        def reregister():
            try:
                for n in range(2, 12):
                    r = broker.call(_register_cmd("bk", "10.0.0.1:10911", BIG, counter=n))
                    assert r.code == 0, r
            except Exception as e:          # reported below
                errors.append(e)
            finally:
                stop.set()

        t = threading.Thread(target=reregister)
        t.start()
        answered = 0
        while not stop.is_set():
            r = client.request(105, {"topic": BIG[answered % len(BIG)]})
            assert (r.code, r.body) == (0, route), r
            answered += 1
        t.join()
        assert not errors and answered > 0


def test_broker_whose_connection_closes_during_its_registration_is_dropped(srv):
    with Client(srv.address) as watcher:
        broker = Client(srv.address)
        broker.send(_register_cmd("gone", "10.0.0.9:10911", BIG))
        broker.close()                      # before (or while) the writer applies it
        def dropped():
            return (watcher.request(105, {"topic": BIG[0]}).code == 17
                    and b"gone" not in watcher.request(106).body)

        deadline = time.monotonic() + 5
        while not dropped() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)                     # and it does not come back
        assert watcher.request(105, {"topic": BIG[0]}).code == 17
        assert b"gone" not in watcher.request(106).body


def test_kv_changes_are_answered_in_order_and_persisted(srv, tmp_path):
    with Client(srv.address) as c:
        cmds = [rmq.RemotingCommand.request(100, {"namespace": "ns", "key": f"k{i}",
                                                  "value": f"v{i}"}) for i in range(20)]
        cmds.append(rmq.RemotingCommand.request(101, {"namespace": "ns", "key": "k19"}))
        cmds.append(rmq.RemotingCommand.request(102, {"namespace": "ns", "key": "k0"}))
        cmds.append(rmq.RemotingCommand.request(101, {"namespace": "ns", "key": "k0"}))
        c.send_raw(b"".join(rmq.encode_frame(x) for x in cmds))
        got = [c.receive() for _ in cmds]
        assert [r.opaque for r in got] == [x.opaque for x in cmds]
        assert [r.code for r in got] == [0] * 20 + [0, 0, 22]
        assert got[20].ext_fields["value"] == "v19"
    table = read_table(tmp_path / "kvConfig.json")["ns"]
    assert "k19" in table and "k0" not in table


@pytest.mark.skipif(not hasattr(os, "setpriority"), reason="no per-thread nice value here")
def test_writer_thread_runs_below_the_loop_threads_priority(srv):
    """A registration's CPU time yields to the loop thread's route answers."""
    def nice_values():
        values = {}
        for tid in map(int, os.listdir("/proc/self/task")):
            try:
                values[tid] = os.getpriority(os.PRIO_PROCESS, tid)
            except ProcessLookupError:      # (gone since the listing)
                pass
        return values
    with Client(srv.address) as c:
        assert register_broker(c, "bk", "10.0.0.1:10911", topics=BIG).code == 0
    writer_tid = srv.writer.submit(threading.get_native_id).result()
    nice = nice_values()
    async def native_id():
        return threading.get_native_id()
    loop_tid = asyncio.run_coroutine_threadsafe(native_id(), srv.loop).result(5)
    loop_nice = os.getpriority(os.PRIO_PROCESS, loop_tid)
    assert WRITER_NICE > 0
    assert nice[writer_tid] == min(19, loop_nice + WRITER_NICE)
    # only the writer; a thread of an earlier test's server (a table thread, joined)
    # may still be listed for a moment: it leaves /proc after its join returns
    deadline = time.monotonic() + 10
    while sum(n != loop_nice for n in nice.values()) != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
        nice = nice_values()
    assert {t for t, n in nice.items() if n != loop_nice} == {writer_tid}


def test_the_switch_interval_is_lowered_while_a_server_runs_and_given_back(tmp_path):
    """The table thread lowers the process-wide GIL switch interval; the last server
    to stop gives the process its own value back (several may run at once)."""
    import sys

    from rmq.namesrv.server import WRITER_SWITCH_INTERVAL, TableThread
    # A server still running here is a leak of an earlier test (every test's server is
    # closed by its end): a failure, not a reason to skip.
    assert TableThread._running == 0, \
        f"{TableThread._running} server(s) of an earlier test in this process never closed"
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.004)
    try:
        with running_namesrv(tmp_path / "a"):
            assert sys.getswitchinterval() == WRITER_SWITCH_INTERVAL
            with running_namesrv(tmp_path / "b"):
                assert sys.getswitchinterval() == WRITER_SWITCH_INTERVAL
            assert sys.getswitchinterval() == WRITER_SWITCH_INTERVAL    # "a" still runs
        assert sys.getswitchinterval() == 0.004
    finally:
        sys.setswitchinterval(before)
