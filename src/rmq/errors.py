"""Typed errors shared by the compiled core and the pure-Python reference.

Every error also inherits the matching builtin so callers may catch either
(``except ValueError`` keeps working), as msgpack and asyncpg do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "RmqError",
    "ProtocolError",
    "FrameTooLarge",
    "CorruptFrame",
    "HeaderError",
    "UnknownSerializeType",
    "BodyError",
    "RemotingError",
    "RemotingConnectError",
    "RemotingTimeoutError",
    "RemotingClosedError",
    "ResponseError",
    "TraceError",
]


class RmqError(Exception):
    """Base class of every error rmq raises on purpose."""


class ProtocolError(RmqError, ValueError):
    """Bytes that do not follow the RocketMQ remoting protocol.

    ``decoded`` holds the commands a streaming decoder completed before the
    bad frame, so a caller can still act on them before closing the stream.
    """

    decoded: Sequence[Any] = ()


class FrameTooLarge(ProtocolError):
    """A length prefix announces a frame above the configured maximum."""


class CorruptFrame(ProtocolError):
    """Frame lengths that contradict each other or the buffer they came in."""


class HeaderError(CorruptFrame):
    """A header that does not parse: invalid JSON, truncated binary, bad field."""


class UnknownSerializeType(ProtocolError):
    """The serialize-type byte of a frame is neither 0 (JSON) nor 1 (ROCKETMQ)."""


class BodyError(ProtocolError):
    """A body (RegisterBrokerBody, TopicRouteData, ...) that does not decode."""


class RemotingError(RmqError):
    """A request that got no answer from a peer (Java: RemotingException)."""

    def __init__(self, message: str, addr: str | None = None) -> None:
        super().__init__(message)
        self.addr = addr


class RemotingConnectError(RemotingError, ConnectionError):
    """The connection to ``addr`` could not be made (RemotingConnectException)."""


class RemotingTimeoutError(RemotingError, TimeoutError):
    """No answer within the timeout (RemotingTimeoutException)."""


class RemotingClosedError(RemotingError, ConnectionError):
    """The connection closed before the answer came (RemotingSendRequestException)."""


class ResponseError(RmqError):
    """An answer whose code is not the success the caller needs (Java:
    MQBrokerException): ``code`` and ``remark`` are the answer's."""

    def __init__(self, code: int, remark: str | None, addr: str | None = None,
                 request_code: int | None = None) -> None:
        where = f" from {addr}" if addr else ""
        what = f" to request {request_code}" if request_code is not None else ""
        super().__init__(f"answer{what}{where}: code {code}, remark {remark!r}")
        self.code = code
        self.remark = remark
        self.addr = addr


class TraceError(RmqError, ValueError):
    """A file that is not a trace segment, or a segment with a corrupt record:
    says which file, and why."""
