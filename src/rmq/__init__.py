"""rmq: a RocketMQ NameServer and broker registration layer with a compiled core."""

from rmq import errors
from rmq._impl import IMPLEMENTATION
from rmq.codec import FrameDecoder, RemotingCommand, decode_frame, encode_frame
from rmq.crc32 import CRC32_KERNEL, body_crc32, crc32

__version__ = "0.1.0"

__all__ = [
    "IMPLEMENTATION",
    "CRC32_KERNEL",
    "RemotingCommand",
    "decode_frame",
    "encode_frame",
    "FrameDecoder",
    "crc32",
    "body_crc32",
    "errors",
    "__version__",
]
