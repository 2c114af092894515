"""Typed errors shared by the compiled core and the pure-Python reference.

Every error also inherits the matching builtin so callers may catch either
(``except ValueError`` keeps working), as msgpack and asyncpg do.
"""

__all__ = [
    "RmqError",
    "ProtocolError",
    "FrameTooLarge",
    "CorruptFrame",
    "HeaderError",
    "UnknownSerializeType",
    "BodyError",
]


class RmqError(Exception):
    """Base class of every error rmq raises on purpose."""


class ProtocolError(RmqError, ValueError):
    """Bytes that do not follow the RocketMQ remoting protocol.

    ``decoded`` holds the commands a streaming decoder completed before the
    bad frame, so a caller can still act on them before closing the stream.
    """

    decoded = ()


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
