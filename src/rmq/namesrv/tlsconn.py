"""TLS on the NameServer's port (``tls.server.mode``, see :mod:`rmq.tls`).

A connection's first read decides, as Java's handshake handler does: a first byte
0x16 opens a TLS handshake record, anything else is plain remoting. A plain
connection (in permissive mode) goes on exactly as on a server without TLS: nothing
of this module runs for it after that first read. A TLS connection gets an
``ssl.SSLObject`` over two memory BIOs, between the socket and the same
:class:`~rmq.namesrv.server.Connection`:

- :class:`_TlsIntake` becomes the transport's protocol: it feeds the ciphertext to
  the SSLObject and hands the plaintext to ``Connection.data_received``, so route
  queries are answered in the core from decrypted bytes as from plain ones (asyncio's
  ``start_tls`` cannot take the bytes the first read already took).
- :class:`_TlsTransport` becomes the Connection's transport: ``write`` encrypts; flow
  control, the output budget and the idle close see the socket's transport (and so
  count ciphertext).

Bounds: the handshake is not activity, so a client that opens TLS and stalls is
closed by serverChannelMaxIdleTimeSeconds like a silent one; OpenSSL bounds the
records (16 KiB of plaintext each) and the handshake messages it accepts, and what
one read brings is decrypted at once, so nothing queues beyond one read.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING, Any

from rmq.namesrv.config import FIELDS, is_tls_key
from rmq.tls import ServerSettings, server_settings

if TYPE_CHECKING:
    from rmq.namesrv.config import NamesrvConfig

__all__ = ["ServerTls", "tls_values", "refused_plain", "tls_failed"]

log = logging.getLogger(__name__)

#: The first byte of a TLS record carrying a handshake (ContentType handshake).
HANDSHAKE_RECORD = 0x16
#: Plaintext taken from the SSLObject per call.
_READ_SIZE = 256 * 1024


def tls_values(config: NamesrvConfig) -> dict[str, Any]:
    """The config's TLS keys, by Java name."""
    return {f.key: getattr(config, f.attr) for f in FIELDS if is_tls_key(f.key)}


def refused_plain(counters: Any, peer: str) -> None:
    """A plain client on a TLS-only port, counted and logged (both servers; the caller
    closes it)."""
    counters.refused["tls_required"] += 1
    log.warning("closing %s: plain remoting on a TLS-only port "
                "(tls.server.mode=enforcing): the client must use TLS", peer)


def tls_failed(counters: Any, peer: str, in_handshake: bool, why: str) -> None:
    """A TLS failure that closes its connection, counted and logged (both servers)."""
    counters.refused["tls_handshake"] += 1
    log.warning("closing %s: %s: %s", peer,
                "TLS handshake failed" if in_handshake else "TLS error", why)


class ServerTls:
    """The TLS side of a NameServer's port: decides each connection's first read."""

    def __init__(self, settings: ServerSettings, context: ssl.SSLContext) -> None:
        self.settings = settings
        self.mode = settings.mode
        self.context = context

    @classmethod
    def from_config(cls, config: NamesrvConfig) -> ServerTls | None:
        """None when no TLS is served (disabled, or permissive without a certificate):
        the port is what it always was, and a TLS client is named in the log by
        server._foreign_protocol. ConfigError when the settings are wrong or a
        certificate does not load."""
        settings = server_settings(tls_values(config))
        if settings.context is None:
            if settings.mode != "disabled":
                log.debug("tls.server.mode=%s without tls.server.certPath and "
                          "tls.server.keyPath: plain remoting only", settings.mode)
            return None
        return cls(settings, settings.context)

    def describe(self) -> str:
        """One line for the start-up log (no path, no password)."""
        what = "TLS only" if self.mode == "enforcing" else "TLS and plain on one port"
        return (f"tls.server.mode={self.mode}: {what}, client certificates "
                f"{self.settings.client_auth}")

    def accept(self, conn: Any, data: bytes) -> bool:
        """The first read of ``conn``: True when it goes on as plain remoting; else it
        was taken over by TLS or closed (and logged)."""
        if data[0] == HANDSHAKE_RECORD:
            _TlsIntake(conn, self.context).start(data)
            return False
        if self.mode == "enforcing":
            refused_plain(conn.counters, conn.peer)
            conn.close()
            return False
        return True


class _TlsTransport:
    """The Connection's transport on a TLS connection: writes are encrypted; the
    rest is the socket's transport."""

    __slots__ = ("_raw", "_sslobj", "_outgoing")

    def __init__(self, raw: Any, sslobj: ssl.SSLObject, outgoing: ssl.MemoryBIO) -> None:
        self._raw = raw
        self._sslobj = sslobj
        self._outgoing = outgoing

    def write(self, data: bytes) -> None:
        if self._raw.is_closing():
            return
        self._sslobj.write(data)
        self._raw.write(self._outgoing.read())

    def writelines(self, chunks: Any) -> None:
        raise NotImplementedError("the server writes with write() (see Connection._send)")

    def close(self) -> None:
        if not self._raw.is_closing():
            try:
                self._sslobj.unwrap()           # close_notify, when the handshake is over
            except (ssl.SSLError, ValueError):
                pass
            pending = self._outgoing.read()
            if pending:
                self._raw.write(pending)
        self._raw.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class _TlsIntake(asyncio.Protocol):
    """The socket's protocol on a TLS connection: decrypts for the Connection."""

    def __init__(self, conn: Any, context: ssl.SSLContext) -> None:
        self.conn = conn
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.sslobj = context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.handshaken = False
        self.raw: Any = None

    def start(self, data: bytes) -> None:
        conn = self.conn
        traced = conn.trace is not None
        # the socket's transport, under the trace's wrapper when recording
        raw = conn.transport._transport if traced else conn.transport
        self.raw = raw
        tls = _TlsTransport(raw, self.sslobj, self.outgoing)
        if traced:
            # the trace records frames: the plaintext, from the start
            conn.trace = conn.server.trace.connection(conn.id, conn.peer)
            conn.transport = type(conn.transport)(tls, conn.trace)
        else:
            conn.transport = tls
        raw.set_protocol(self)
        self.data_received(data)

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        if conn.closing:
            return
        self.incoming.write(data)
        if not self.handshaken:
            try:
                self.sslobj.do_handshake()
            except ssl.SSLWantReadError:
                self._flush()
                return
            except (ssl.SSLError, ValueError) as e:
                self._flush()                       # the alert, when there is one
                tls_failed(conn.counters, conn.peer, True, _why(e))
                conn.close()
                return
            self.handshaken = True
            log.debug("TLS with %s: %s, %s", conn.peer, self.sslobj.version(),
                      (self.sslobj.cipher() or ("?",))[0])
        chunks = []
        ended = False               # the client closed its TLS session
        error = None
        try:
            while True:
                chunk = self.sslobj.read(_READ_SIZE)
                if not chunk:
                    ended = True
                    break
                chunks.append(chunk)
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            ended = True
        except (ssl.SSLError, ValueError) as e:
            error = _why(e)
        self._flush()               # e.g. an answer to a key update
        if chunks:
            conn.data_received(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        if (ended or error) and not conn.closing:
            if error:
                tls_failed(conn.counters, conn.peer, False, error)
            conn.close()

    def _flush(self) -> None:
        out = self.outgoing.read()
        if out and not self.raw.is_closing():
            self.raw.write(out)

    def pause_writing(self) -> None:
        self.conn.pause_writing()

    def resume_writing(self) -> None:
        self.conn.resume_writing()

    def eof_received(self) -> bool | None:
        return None                 # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.connection_lost(exc)


def _why(e: BaseException) -> str:
    """An SSL error as one short phrase (OpenSSL's reason and its verify message)."""
    reason = getattr(e, "reason", None)
    verify = getattr(e, "verify_message", None)
    if verify:
        return f"{reason or e}: {verify}"
    return str(reason or e)
