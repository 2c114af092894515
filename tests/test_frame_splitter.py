"""FrameSplitter: any chunking of a stream gives back exactly its frames, bytes for
bytes; lengths are checked as FrameDecoder checks them. Runs on both cores."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.errors import CorruptFrame, FrameTooLarge
from support import binary_header, frame
from test_frame_decoder import STREAM, STREAM_FRAMES, held


def split(impl, chunks, **kw):
    s = impl.FrameSplitter(**kw)
    out = []
    for c in chunks:
        out += s.feed(c)
    return out, s


def test_whole_stream_at_once(impl):
    frames, s = split(impl, [STREAM])
    assert frames == STREAM_FRAMES and s.buffered == 0
    assert all(type(f) is bytes for f in frames)


def test_byte_by_byte(impl):
    s = impl.FrameSplitter()
    out = []
    for i in range(len(STREAM)):
        out += s.feed(STREAM[i:i + 1])
        assert s.buffered == held(i + 1)
    assert out == STREAM_FRAMES


@given(st.lists(st.integers(0, len(STREAM)), max_size=12))
def test_any_chunking(impl, cuts):
    cuts = sorted(set(cuts) | {0, len(STREAM)})
    chunks = [STREAM[a:b] for a, b in zip(cuts, cuts[1:])]
    frames, _ = split(impl, [memoryview(c) for c in chunks])
    assert frames == STREAM_FRAMES


def test_frames_are_what_the_decoder_decodes(impl):
    frames, _ = split(impl, [STREAM[:100], STREAM[100:]])
    assert [impl.decode_frame(f) for f in frames] == impl.FrameDecoder().feed(STREAM)


@pytest.mark.parametrize("prefix, error", [(b"\xff\xff\xff\xf0", CorruptFrame),
                                           (b"\x01\x00\x00\x00", FrameTooLarge)])
def test_bad_length_is_an_error_and_sticks(impl, prefix, error):
    s = impl.FrameSplitter()
    with pytest.raises(error) as e:
        s.feed(STREAM_FRAMES[0] + prefix + b"rest")
    assert e.value.decoded == [STREAM_FRAMES[0]]
    with pytest.raises(error, match="splitter failed earlier"):
        s.feed(STREAM_FRAMES[1])


def test_bad_length_split_across_feeds(impl):
    s = impl.FrameSplitter(max_frame_length=64)
    s.feed(b"\x00\x00")
    with pytest.raises(FrameTooLarge, match="exceeds the maximum of 64"):
        s.feed(b"\x01\x00")


def test_max_frame_length_is_checked(impl):
    with pytest.raises(ValueError, match="at least 8"):
        impl.FrameSplitter(max_frame_length=7)
    assert impl.FrameSplitter(max_frame_length=100).max_frame_length == 100


def test_large_frames_and_buffer_reuse(impl):
    # frames larger than the buffer kept between frames, each split over feeds
    big = frame(binary_header(code=1), 1, body=bytes(range(256)) * 1200)   # > 256 KiB
    small = frame(binary_header(code=2), 1, body=b"x")
    stream = big + small + big + small
    frames, s = split(impl, [stream[i:i + 100_003] for i in range(0, len(stream), 100_003)])
    assert frames == [big, small, big, small] and s.buffered == 0
