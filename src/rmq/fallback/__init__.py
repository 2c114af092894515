"""Pure-Python reference implementation of rmq's compiled core (``rmq._core``).

Selected with ``RMQ_PUREPYTHON=1`` or when the extension is missing; the same
test-suite runs on both.
"""

from rmq.fallback.bodies import (
    DEFAULT_MAX_INFLATED,
    MAX_INFLATE_RATIO,
    MIN_INFLATE_LIMIT,
    decode_register_broker_body,
    encode_register_broker_body,
    encode_topic_route_data,
    json_dumps,
    json_loads,
)
from rmq.fallback.codec import (FrameDecoder, FrameSplitter, RemotingCommand, decode_frame,
                                encode_frame, encode_frame_head)
from rmq.fallback.crc32 import CRC32_KERNEL, body_crc32, crc32
from rmq.fallback.columns import TraceColumns
from rmq.fallback.javatable import concurrent_resizes, java_spread_hash
from rmq.fallback.routes import TopicTable
from rmq.fallback.trace import TraceRows

IMPLEMENTATION = "python"


__all__ = [
    "IMPLEMENTATION", "CRC32_KERNEL", "DEFAULT_MAX_INFLATED", "MAX_INFLATE_RATIO",
    "MIN_INFLATE_LIMIT",
    "RemotingCommand", "decode_frame", "encode_frame", "encode_frame_head", "FrameDecoder", "FrameSplitter",
    "crc32", "body_crc32",
    "json_loads", "json_dumps", "decode_register_broker_body", "encode_register_broker_body",
    "encode_topic_route_data", "TopicTable", "java_spread_hash", "concurrent_resizes", "TraceRows", "TraceColumns",
]
