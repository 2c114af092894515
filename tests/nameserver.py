"""End-to-end harness: a real NameServer on 127.0.0.1 (in a thread, on asyncio or
uvloop) and a small blocking client speaking the real protocol over TCP."""

import asyncio
import contextlib
import socket
import threading

import rmq
from rmq.config import NamesrvConfig
from rmq.kvconfig import KVConfig
from rmq.namesrv import NameServer
from rmq.server import NameServerApp


@contextlib.contextmanager
def running_namesrv(tmp_path, loop="asyncio", clock=None, **config):
    """Start a NameServer on an ephemeral port; yields the NameServerApp
    (``.address`` is "127.0.0.1:PORT", ``.namesrv`` the request handler)."""
    config.setdefault("kvConfigPath", str(tmp_path / "kvConfig.json"))
    cfg = NamesrvConfig(**config)
    kwargs = {"clock": clock} if clock else {}
    app = NameServerApp(NameServer(cfg, KVConfig(cfg.kvConfigPath), **kwargs))
    if loop == "uvloop":
        import uvloop
        ev = uvloop.new_event_loop()
    else:
        ev = asyncio.new_event_loop()
    started = threading.Event()

    def run():
        asyncio.set_event_loop(ev)
        ev.run_until_complete(app.start("127.0.0.1", 0))
        started.set()
        ev.run_forever()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert started.wait(10), "NameServer did not start"
    port = app.sockets[0].getsockname()[1]
    app.address = f"127.0.0.1:{port}"
    app.port = port
    try:
        yield app
    finally:
        asyncio.run_coroutine_threadsafe(app.close(), ev).result(10)
        ev.call_soon_threadsafe(ev.stop)
        t.join(10)
        ev.close()


def call_in_loop(app, func, *args):
    """Run func(*args) on the server's loop thread (the tables are not thread-safe)."""
    async def run():
        return func(*args)
    return asyncio.run_coroutine_threadsafe(run(), app.loop).result(10)


class Client:
    """A blocking remoting client for tests: one socket, answers matched by opaque."""

    def __init__(self, address, timeout=10):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = rmq.FrameDecoder()
        self.ready = []

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, cmd):
        self.sock.sendall(rmq.encode_frame(cmd))

    def send_raw(self, data):
        self.sock.sendall(data)

    def receive(self):
        """The next command from the server (raises on EOF)."""
        while not self.ready:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("connection closed by the NameServer")
            self.ready.extend(self.decoder.feed(data))
        return self.ready.pop(0)

    def call(self, cmd):
        self.send(cmd)
        resp = self.receive()
        assert resp.opaque == cmd.opaque, (resp, cmd)
        return resp

    def request(self, code, ext=None, body=b"", **kwargs):
        return self.call(rmq.RemotingCommand.request(code, ext, body, **kwargs))

    def closed_by_peer(self, timeout=5):
        """True when the server closed this connection (EOF or reset)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(1 << 16)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
