"""Remoting client: requests to RocketMQ peers (NameServers, brokers) over TCP.

:class:`RemotingClient` is asyncio (Java: NettyRemotingClient): one connection per
address, made on first use and again on the next use after it closed; requests
matched to answers by opaque; ``invoke`` bounded by a timeout that covers
connecting, sending and waiting; ``invoke_oneway`` for requests that get no answer.
Failures are typed: :class:`~rmq.errors.RemotingConnectError`,
:class:`~rmq.errors.RemotingTimeoutError`, :class:`~rmq.errors.RemotingClosedError`.

:class:`BlockingRemotingClient` wraps it for scripts: the same calls, blocking, on
an event loop of its own in a background thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import ssl as _ssl
import threading
from collections.abc import Awaitable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from rmq.acl import SessionCredentials, sign_command
from rmq.codec import FrameDecoder, RemotingCommand, encode_frame
from rmq.errors import (ProtocolError, RemotingClosedError, RemotingConnectError, RemotingError,
                        RemotingTimeoutError)
from rmq.protocol import DEFAULT_MAX_FRAME_LENGTH

if TYPE_CHECKING:
    from typing_extensions import Buffer, Self

_T = TypeVar("_T")

log = logging.getLogger(__name__)

__all__ = ["RemotingClient", "BlockingRemotingClient", "parse_address", "split_addresses"]

#: Java's default timeout of a NameServer request (ms): DEFAULT_TIMEOUT_MILLIS.
DEFAULT_TIMEOUT = 3.0


def parse_address(addr: str) -> tuple[str, int]:
    """"host:port" -> (host, port); IPv6 hosts may be bracketed."""
    host, sep, port = str(addr).strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise ValueError(f"expected HOST:PORT, got {addr!r}")
    return host.strip("[]"), int(port)


def split_addresses(namesrv_addr: str | None) -> list[str]:
    """A namesrvAddr value ("a:9876;b:9876") -> its addresses, checked, in order,
    without duplicates."""
    out: list[str] = []
    for part in str(namesrv_addr or "").split(";"):
        part = part.strip()
        if part:
            parse_address(part)
            if part not in out:
                out.append(part)
    if not out:
        raise ValueError(f"no NameServer address in {namesrv_addr!r}")
    return out


class _Channel(asyncio.Protocol):
    """One connection: writes requests, routes answers to their futures."""

    def __init__(self, addr: str, max_frame_length: int) -> None:
        self.addr = addr
        self.decoder = FrameDecoder(max_frame_length)
        # set by connection_made, before anything uses it
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.pending: dict[int, asyncio.Future[RemotingCommand]] = {}  # opaque -> its answer
        self.closed = False
        self._drained: asyncio.Future[None] | None = None  # while writing is paused

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP transport

    def data_received(self, data: bytes) -> None:
        try:
            cmds = self.decoder.feed(data)
        except ProtocolError as e:
            cmds = list(e.decoded)
            self._deliver(cmds)
            log.warning("closing the connection to %s: %s", self.addr, e)
            self._fail(RemotingClosedError(f"bad answer from {self.addr}: {e}", self.addr))
            self.transport.abort()
            return
        self._deliver(cmds)

    def _deliver(self, cmds: list[RemotingCommand]) -> None:
        for cmd in cmds:
            if not cmd.is_response:
                # A request from the peer (e.g. a broker's CHECK_TRANSACTION_STATE):
                # nothing here serves those.
                log.debug("ignoring request %d from %s", cmd.code, self.addr)
                continue
            fut = self.pending.pop(cmd.opaque, None)
            if fut is None:
                log.debug("answer with unknown opaque %d from %s (timed out?)", cmd.opaque,
                          self.addr)
            elif not fut.done():
                fut.set_result(cmd)

    def connection_lost(self, exc: Exception | None) -> None:
        why = f": {exc}" if exc else ""
        self._fail(RemotingClosedError(f"connection to {self.addr} closed{why}", self.addr))

    def _fail(self, error: BaseException) -> None:
        self.closed = True
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(error)
        if self._drained is not None and not self._drained.done():
            self._drained.set_exception(error)

    def pause_writing(self) -> None:
        self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    async def send(self, cmd: RemotingCommand) -> None:
        """Write a request; waits while the peer is not reading."""
        if self.closed:
            raise RemotingClosedError(f"connection to {self.addr} is closed", self.addr)
        self.transport.write(encode_frame(cmd))
        if self._drained is not None:
            # shared by every sender: one sender's timeout must not cancel it
            await asyncio.shield(self._drained)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.transport.close()


class RemotingClient:
    """Asyncio remoting client (see the module docstring). Use it from one event loop.

    ``connect_timeout``: seconds for the TCP connect (Java's connectTimeoutMillis,
    3 s), within each call's timeout. ``max_frame_length``: the largest answer
    accepted; a larger one closes the connection. ``ssl``: TLS to every address (Java's
    tls.enable): an ``ssl.SSLContext`` (rmq.tls.client_context builds one from Java's
    tls.client.* keys) or True (the system's CAs); the handshake is part of connecting.
    ``credentials``: every request is signed with them (Java's AclClientRPCHook), see
    rmq.acl.
    """

    def __init__(self, *, connect_timeout: float = 3.0,
                 max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
                 ssl: _ssl.SSLContext | bool | None = None,
                 credentials: SessionCredentials | None = None) -> None:
        self.connect_timeout = connect_timeout
        self.max_frame_length = max_frame_length
        self.ssl = _ssl.create_default_context() if ssl is True else (ssl or None)
        self.credentials = credentials
        self._channels: dict[str, _Channel] = {}
        self._connecting: dict[str, asyncio.Task[_Channel]] = {}  # addr -> the connect
        self._closed = False

    async def _channel(self, addr: str) -> _Channel:
        ch = self._channels.get(addr)
        if ch is not None and not ch.closed:
            return ch
        fut = self._connecting.get(addr)
        if fut is None:
            loop = asyncio.get_running_loop()
            fut = self._connecting[addr] = loop.create_task(self._connect(addr))
            fut.add_done_callback(lambda _f: self._connecting.pop(addr, None))
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            if fut.cancelled() and self._closed:        # close() stopped the connect
                raise RemotingClosedError("the client was closed while connecting",
                                          addr) from None
            raise

    async def _connect(self, addr: str) -> _Channel:
        if self._closed:
            raise RemotingClosedError("the client is closed", addr)
        host, port = parse_address(addr)
        loop = asyncio.get_running_loop()
        tls: dict[str, Any] = {} if self.ssl is None else {
            "ssl": self.ssl, "ssl_handshake_timeout": self.connect_timeout}
        try:
            _, ch = await asyncio.wait_for(
                loop.create_connection(lambda: _Channel(addr, self.max_frame_length),
                                       host, port, **tls),
                self.connect_timeout)
        except asyncio.TimeoutError:
            raise RemotingConnectError(
                f"connect to {addr} timed out after {self.connect_timeout:g} s", addr) from None
        except OSError as e:
            raise RemotingConnectError(f"connect to {addr} failed: {e}", addr) from e
        if self._closed:            # closed while connecting
            ch.close()
            raise RemotingClosedError("the client is closed", addr)
        old = self._channels.get(addr)
        if old is not None:
            old.close()
        self._channels[addr] = ch
        return ch

    async def invoke(self, addr: str, cmd: RemotingCommand,
                     timeout: float = DEFAULT_TIMEOUT) -> RemotingCommand:
        """Send the request ``cmd`` to ``addr`` and return its answer (a
        RemotingCommand, whatever its code). ``timeout`` (seconds) bounds the whole
        call, connecting included."""
        if cmd.is_oneway:
            raise ValueError("invoke() of a oneway request: use invoke_oneway()")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        ch = await self._within(self._channel(addr), deadline, addr, cmd, "connecting",
                                RemotingConnectError)
        if self.credentials is not None:
            sign_command(cmd, self.credentials)
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        ch.pending[cmd.opaque] = fut
        try:
            await self._within(ch.send(cmd), deadline, addr, cmd, "sending")
            return await self._within(fut, deadline, addr, cmd, "waiting for the answer")
        finally:
            if ch.pending.get(cmd.opaque) is fut:
                del ch.pending[cmd.opaque]

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand,
                            timeout: float = DEFAULT_TIMEOUT) -> None:
        """Send a request that gets no answer (the oneway flag is set on ``cmd``);
        returns once it is written. ``timeout`` bounds connecting and writing."""
        cmd.flag |= 2                    # FLAG_ONEWAY
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        ch = await self._within(self._channel(addr), deadline, addr, cmd, "connecting",
                                RemotingConnectError)
        if self.credentials is not None:
            sign_command(cmd, self.credentials)
        await self._within(ch.send(cmd), deadline, addr, cmd, "sending")

    async def _within(self, aw: Awaitable[_T], deadline: float, addr: str, cmd: RemotingCommand,
                      doing: str, error: type[RemotingError] = RemotingTimeoutError) -> _T:
        """Await ``aw`` until the deadline; past it raise ``error``. No connection
        within the time is a connect failure, as Java's RemotingConnectException
        (callers move on to the next address)."""
        remaining = deadline - asyncio.get_running_loop().time()
        try:
            return await asyncio.wait_for(aw, max(remaining, 0))
        except asyncio.TimeoutError:
            message = f"request {cmd.code} (opaque {cmd.opaque}) to {addr}: timed out {doing}"
            raise error(message, addr) from None

    def close_address(self, addr: str) -> None:
        """Close the connection to ``addr`` (the next call reconnects)."""
        ch = self._channels.pop(addr, None)
        if ch is not None:
            ch.close()

    async def close(self) -> None:
        """Close every connection; requests still waiting fail with RemotingClosedError."""
        self._closed = True
        connecting = list(self._connecting.values())
        for task in connecting:
            task.cancel()
        await asyncio.gather(*connecting, return_exceptions=True)
        for addr in list(self._channels):
            self.close_address(addr)
        await asyncio.sleep(0)           # let connection_lost run

    @property
    def addresses(self) -> list[str]:
        """The addresses with an open connection."""
        return [a for a, ch in self._channels.items() if not ch.closed]

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class BlockingRemotingClient:
    """RemotingClient for blocking code: each call runs on the client's own event
    loop (a daemon thread) and waits for it. Safe to call from several threads."""

    def __init__(self, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rmq-client",
                                        daemon=True)
        self._thread.start()
        self.client = RemotingClient(**kwargs)

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        if not self._thread.is_alive():
            coro.close()
            raise RemotingClosedError("the client is closed")
        try:
            return asyncio.run_coroutine_threadsafe(coro, self._loop).result()
        except concurrent.futures.CancelledError:
            raise RemotingClosedError("the client was closed during the call") from None

    def invoke(self, addr: str, cmd: RemotingCommand,
               timeout: float = DEFAULT_TIMEOUT) -> RemotingCommand:
        return self._run(self.client.invoke(addr, cmd, timeout))

    def invoke_oneway(self, addr: str, cmd: RemotingCommand,
                      timeout: float = DEFAULT_TIMEOUT) -> None:
        return self._run(self.client.invoke_oneway(addr, cmd, timeout))

    def request(self, addr: str, code: int, ext_fields: dict[str, str] | None = None,
                body: Buffer = b"", timeout: float = DEFAULT_TIMEOUT, **kw: Any) -> RemotingCommand:
        """Build a request (RemotingCommand.request's arguments) and invoke it."""
        return self.invoke(addr, RemotingCommand.request(code, ext_fields, body, **kw), timeout)

    def close(self) -> None:
        if self._thread.is_alive():
            self._run(self._shutdown())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._loop.close()

    async def _shutdown(self) -> None:
        # Calls still running (e.g. connecting) in other threads end with
        # RemotingClosedError rather than waiting on a stopped loop forever.
        await self.client.close()
        me = asyncio.current_task()
        others = [t for t in asyncio.all_tasks() if t is not me]
        for t in others:
            t.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
