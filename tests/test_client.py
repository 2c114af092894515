"""rmq.client: the remoting client against real TCP peers: rmq's NameServer, and
small socket servers that misbehave on purpose (silent, closing, garbage)."""

import asyncio
import socket
import threading
import time

import pytest

import rmq
from nameserver import RawServer, read_request, running_namesrv
from rmq.client import BlockingRemotingClient, RemotingClient, parse_address, split_addresses
from rmq.errors import RemotingClosedError, RemotingConnectError, RemotingTimeoutError


@pytest.fixture
def srv(tmp_path):
    with running_namesrv(tmp_path) as app:
        yield app


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run(coro):
    return asyncio.run(coro)


def test_invoke_matches_answers_to_requests_by_opaque(srv):
    async def main():
        async with RemotingClient() as c:
            puts = [rmq.RemotingCommand.request(100, {"namespace": "n", "key": f"k{i}",
                                                      "value": f"v{i}"}) for i in range(50)]
            assert all(r.code == 0 for r in await asyncio.gather(
                *(c.invoke(srv.address, p) for p in puts)))
            gets = [rmq.RemotingCommand.request(101, {"namespace": "n", "key": f"k{i}"})
                    for i in range(50)]
            answers = await asyncio.gather(*(c.invoke(srv.address, g) for g in gets))
            assert [a.opaque for a in answers] == [g.opaque for g in gets]
            assert [a.ext_fields["value"] for a in answers] == [f"v{i}" for i in range(50)]
            assert c.addresses == [srv.address]       # one connection for all of them
    run(main())


def test_oneway_is_applied_and_not_answered(srv):
    async def main():
        async with RemotingClient() as c:
            put = rmq.RemotingCommand.request(100, {"namespace": "n", "key": "k", "value": "1"})
            assert await c.invoke_oneway(srv.address, put) is None
            assert put.is_oneway
            get = rmq.RemotingCommand.request(101, {"namespace": "n", "key": "k"})
            assert (await c.invoke(srv.address, get)).ext_fields == {"value": "1"}
    run(main())


def test_connect_failure_is_typed_and_names_the_address():
    addr = f"127.0.0.1:{closed_port()}"

    async def main():
        async with RemotingClient() as c:
            with pytest.raises(RemotingConnectError, match=addr) as e:
                await c.invoke(addr, rmq.RemotingCommand.request(106))
            assert e.value.addr == addr
            assert isinstance(e.value, ConnectionError)
    run(main())


def test_silent_peer_times_out_within_the_timeout():
    with RawServer(lambda conn, i: read_request(conn)) as server:   # reads, never answers
        async def main():
            async with RemotingClient() as c:
                t = time.monotonic()
                with pytest.raises(RemotingTimeoutError, match="waiting for the answer"):
                    await c.invoke(server.address, rmq.RemotingCommand.request(106),
                                   timeout=0.3)
                assert 0.25 < time.monotonic() - t < 2
        run(main())


def test_late_answer_after_a_timeout_is_dropped_and_the_connection_goes_on():
    def handler(conn, i):
        while (req := read_request(conn)) is not None:
            if req.code == 106:
                time.sleep(0.4)                         # too late for the first call
            conn.sendall(rmq.encode_frame(req.response(0, remark=str(req.code))))
    with RawServer(handler) as server:
        async def main():
            async with RemotingClient() as c:
                with pytest.raises(RemotingTimeoutError):
                    await c.invoke(server.address, rmq.RemotingCommand.request(106),
                                   timeout=0.1)
                r = await c.invoke(server.address, rmq.RemotingCommand.request(206))
                assert r.remark == "206"
                assert server.accepted == 1
        run(main())


def test_closed_connection_fails_the_waiting_request_and_the_next_call_reconnects():
    def handler(conn, i):
        req = read_request(conn)
        if i == 0:
            conn.close()                                # drop the first connection
            return
        conn.sendall(rmq.encode_frame(req.response(0, remark="second")))
    with RawServer(handler) as server:
        async def main():
            async with RemotingClient() as c:
                with pytest.raises(RemotingClosedError, match="closed"):
                    await c.invoke(server.address, rmq.RemotingCommand.request(106))
                r = await c.invoke(server.address, rmq.RemotingCommand.request(106))
                assert r.remark == "second" and server.accepted == 2
        run(main())


def test_garbage_answer_closes_the_connection_with_a_typed_error():
    def handler(conn, i):
        read_request(conn)
        conn.sendall(b"\x7f" * 16)
        time.sleep(1)
    with RawServer(handler) as server:
        async def main():
            async with RemotingClient() as c:
                with pytest.raises(RemotingClosedError, match="bad answer"):
                    await c.invoke(server.address, rmq.RemotingCommand.request(106))
                assert c.addresses == []
        run(main())


def test_answer_above_the_frame_limit_closes_the_connection():
    def handler(conn, i):
        req = read_request(conn)
        conn.sendall(rmq.encode_frame(req.response(0, body=b"x" * 5000)))
        time.sleep(1)
    with RawServer(handler) as server:
        async def main():
            async with RemotingClient(max_frame_length=1024) as c:
                with pytest.raises(RemotingClosedError, match="bad answer"):
                    await c.invoke(server.address, rmq.RemotingCommand.request(106))
        run(main())


def test_close_fails_waiting_requests():
    with RawServer(lambda conn, i: read_request(conn)) as server:
        async def main():
            c = RemotingClient()
            task = asyncio.ensure_future(c.invoke(server.address,
                                                  rmq.RemotingCommand.request(106), timeout=5))
            while not c.addresses:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            await c.close()
            with pytest.raises(RemotingClosedError):
                await task
            with pytest.raises(RemotingClosedError, match="client is closed"):
                await c.invoke(server.address, rmq.RemotingCommand.request(106))
        run(main())


def test_blocking_client_from_several_threads(srv):
    with BlockingRemotingClient() as c:
        results, errors = [], []

        def work(n):
            try:
                for i in range(20):
                    key = f"t{n}-{i}"
                    assert c.request(srv.address, 100, {"namespace": "b", "key": key,
                                                         "value": key}).code == 0
                    results.append(c.request(srv.address, 101, {"namespace": "b", "key": key})
                                   .ext_fields["value"] == key)
            except Exception as e:                 # reported below
                errors.append(e)
        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors and results == [True] * 80
    with pytest.raises(RemotingClosedError):
        c.request(srv.address, 106)


def test_oneway_flag_refused_by_invoke(srv):
    async def main():
        async with RemotingClient() as c:
            with pytest.raises(ValueError, match="invoke_oneway"):
                await c.invoke(srv.address, rmq.RemotingCommand.request(106, oneway=True))
    run(main())


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:9876", ["127.0.0.1:9876"]),
    (" a:1 ; b:2;a:1;", ["a:1", "b:2"]),
    ("[::1]:9876", ["[::1]:9876"]),
])
def test_split_addresses(text, expected):
    assert split_addresses(text) == expected


@pytest.mark.parametrize("text", ["", ";", "host", "host:", "host:0", "host:65536", ":9876",
                                  "a:1;b"])
def test_bad_addresses_are_refused(text):
    with pytest.raises(ValueError):
        split_addresses(text)


def test_parse_address():
    assert parse_address("[::1]:9876") == ("::1", 9876)
    assert parse_address("10.0.0.1:10911") == ("10.0.0.1", 10911)


@pytest.fixture
def unanswered_syn():
    """An address whose connects hang: a listener whose accept queue is full."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(0)
    addr = f"127.0.0.1:{s.getsockname()[1]}"
    fillers = []
    for _ in range(4):              # fill the queue; later SYNs are dropped
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(s.getsockname())
        fillers.append(c)
    time.sleep(0.1)
    yield addr
    for c in fillers:
        c.close()
    s.close()


def test_a_connect_that_hangs_is_a_connect_error(unanswered_syn):
    """So that callers move on to the next NameServer, as Java's do."""
    async def main():
        async with RemotingClient() as c:
            t = time.monotonic()
            with pytest.raises(RemotingConnectError, match="timed out connecting"):
                await c.invoke(unanswered_syn, rmq.RemotingCommand.request(106), timeout=0.3)
            assert time.monotonic() - t < 2
    run(main())


def test_close_while_connecting_leaves_no_connection(unanswered_syn):
    async def main():
        c = RemotingClient(connect_timeout=5)
        task = asyncio.ensure_future(c.invoke(unanswered_syn, rmq.RemotingCommand.request(106),
                                              timeout=5))
        await asyncio.sleep(0.2)
        await c.close()
        with pytest.raises((RemotingClosedError, RemotingConnectError)):
            await task
        assert c.addresses == [] and not c._connecting
    run(main())


def test_blocking_close_ends_a_call_of_another_thread(unanswered_syn):
    c = BlockingRemotingClient(connect_timeout=10)
    errors = []

    def call():
        try:
            c.request(unanswered_syn, 106, timeout=10)
        except Exception as e:
            errors.append(e)
    t = threading.Thread(target=call)
    t.start()
    time.sleep(0.3)
    started = time.monotonic()
    c.close()
    t.join(5)
    assert not t.is_alive() and time.monotonic() - started < 5
    assert len(errors) == 1 and isinstance(errors[0], RemotingClosedError)


def test_one_senders_timeout_does_not_fail_the_others_waiting_to_write():
    """Two requests wait for a peer that does not read; the first gives up (its
    timeout), the second still gets its answer once the peer reads."""
    def slow_reader(conn, i):
        time.sleep(1.0)
        dec = rmq.FrameDecoder()
        try:
            while data := conn.recv(1 << 20):
                for req in dec.feed(data):
                    conn.sendall(rmq.encode_frame(req.response(0, remark=str(req.opaque))))
        except OSError:             # closed by the test's end
            pass
    with RawServer(slow_reader) as server:
        async def main():
            async with RemotingClient() as c:
                big = b"x" * (12 << 20)         # more than the socket buffers hold
                first = rmq.RemotingCommand.request(100, {"k": "1"}, big)
                second = rmq.RemotingCommand.request(100, {"k": "2"}, big)
                a = asyncio.ensure_future(c.invoke(server.address, first, timeout=0.3))
                b = asyncio.ensure_future(c.invoke(server.address, second, timeout=20))
                with pytest.raises(RemotingTimeoutError):
                    await a
                assert (await b).remark == str(second.opaque)
        run(main())
