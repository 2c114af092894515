"""The remoting frame codec: commands, frames, and the streaming splitter."""

from rmq._impl import core

RemotingCommand = core.RemotingCommand
decode_frame = core.decode_frame
encode_frame = core.encode_frame
encode_frame_head = core.encode_frame_head
FrameDecoder = core.FrameDecoder
FrameSplitter = core.FrameSplitter

__all__ = ["RemotingCommand", "decode_frame", "encode_frame", "encode_frame_head", "FrameDecoder", "FrameSplitter"]
