"""FrameDecoder: any chunking of a stream gives the commands decode_frame gives
for each frame, and ``buffered`` counts the bytes held for an incomplete one."""

import bisect
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.errors import CorruptFrame
from support import binary_ext, binary_header, frame, vector_bytes

STREAM_FRAMES = [
    vector_bytes("103_register_broker_request.bin"),          # JSON header, JSON body
    vector_bytes("105_get_routeinfo_existing_rmq_response.bin"),  # ROCKETMQ, with body
    vector_bytes("104_unregister_broker_rmq_request.bin"),    # ROCKETMQ ext fields
    vector_bytes("101_get_kv_config_missing_response.bin"),   # JSON with remark
    frame(binary_header(), 1),          # the smallest valid frame: a bare 21-byte header
    vector_bytes("219_get_kvlist_by_namespace_response.bin"),  # non-ASCII body
    vector_bytes("104_unregister_broker_rmq_response.bin"),   # Java's bare 21-byte header
    vector_bytes("105_get_routeinfo_existing_request.bin"),
    frame(binary_header(code=-7, language=9, version=317, opaque=-1, flag=3,   # odd values
                        remark="ü".encode(), ext=binary_ext([(b"k", b""), (b"", b"v")])),
          1, body=b"\x00body\xff"),
]
STREAM = b"".join(STREAM_FRAMES)
BOUNDARIES = list(itertools.accumulate(len(f) for f in STREAM_FRAMES))


def held(offset):
    """Bytes of an incomplete frame after the first ``offset`` bytes of STREAM."""
    i = bisect.bisect_right(BOUNDARIES, offset)
    return offset - (BOUNDARIES[i - 1] if i else 0)


@pytest.fixture(scope="module")
def expected(impl):
    return [impl.decode_frame(f) for f in STREAM_FRAMES]


def test_stream_frames_are_distinct(expected):
    assert len(STREAM_FRAMES) == 9
    assert all(a != b for a, b in itertools.combinations(expected, 2))
    assert {c.serialize_type for c in expected} == {"JSON", "ROCKETMQ"}


def test_one_feed(impl, expected):
    dec = impl.FrameDecoder()
    assert dec.feed(STREAM) == expected
    assert dec.buffered == 0


def test_frame_by_frame(impl, expected):
    dec = impl.FrameDecoder()
    for data, cmd in zip(STREAM_FRAMES, expected):
        assert dec.feed(data) == [cmd]
        assert dec.buffered == 0


def test_every_two_way_split(impl, expected):
    for i in range(len(STREAM) + 1):
        dec = impl.FrameDecoder()
        first = dec.feed(STREAM[:i])
        assert dec.buffered == held(i), i
        assert first == expected[:bisect.bisect_right(BOUNDARIES, i)], i
        assert first + dec.feed(STREAM[i:]) == expected, i
        assert dec.buffered == 0


def test_one_byte_at_a_time(impl, expected):
    dec = impl.FrameDecoder()
    out = []
    for i in range(len(STREAM)):
        got = dec.feed(STREAM[i:i + 1])
        assert len(got) == (1 if i + 1 in BOUNDARIES else 0)
        assert dec.buffered == held(i + 1)
        out += got
    assert out == expected


BUFFER_TYPES = [bytes, bytearray, memoryview, lambda b: memoryview(b"#" + b)[1:]]


@given(cuts=st.lists(st.integers(0, len(STREAM)), max_size=12),
       types=st.lists(st.sampled_from(BUFFER_TYPES), min_size=13, max_size=13))
def test_random_multi_way_split(impl, expected, cuts, types):
    dec = impl.FrameDecoder()
    out = []
    bounds = [0, *sorted(cuts), len(STREAM)]
    for (a, b), make in zip(zip(bounds, bounds[1:]), types):
        out += dec.feed(make(STREAM[a:b]))
        assert dec.buffered == held(b)
    assert out == expected


@pytest.mark.parametrize("make", BUFFER_TYPES, ids=["bytes", "bytearray", "memoryview",
                                                    "memoryview-offset"])
def test_accepts_buffers(impl, expected, make):
    dec = impl.FrameDecoder()
    half = len(STREAM) // 2
    assert dec.feed(make(STREAM[:half])) + dec.feed(make(STREAM[half:])) == expected


def test_caller_buffer_is_not_kept(impl, expected):
    # Bytes of an incomplete frame must be copied: the caller reuses its buffer.
    dec = impl.FrameDecoder()
    cut = BOUNDARIES[0] + 10
    chunk = bytearray(STREAM[:cut])
    out = dec.feed(chunk)
    chunk[:] = b"\xff" * len(chunk)
    rest = bytearray(STREAM[cut:])
    view = memoryview(rest)
    out += dec.feed(view)
    view.release()
    rest[:] = b"\x00" * len(rest)
    assert out == expected


def test_empty_feed(impl, expected):
    dec = impl.FrameDecoder()
    assert dec.feed(b"") == []
    assert dec.feed(STREAM[:3]) == []
    assert dec.feed(b"") == []
    assert dec.buffered == 3
    assert dec.feed(STREAM[3:]) == expected


def test_large_frames_and_buffer_reuse(impl):
    big_body = bytes(range(256)) * 1200                                    # > 256 KiB
    big = frame(binary_header(code=1), 1, body=big_body)
    small = frame(binary_header(code=2), 1, body=b"x")
    stream = big + small + big + small
    dec = impl.FrameDecoder()
    out = []
    for i in range(0, len(stream), 100_003):
        out += dec.feed(stream[i:i + 100_003])
    assert out == [impl.decode_frame(f) for f in (big, small, big, small)]
    assert [(c.code, c.serialize_type) for c in out] == [(1, "ROCKETMQ"), (2, "ROCKETMQ")] * 2
    assert [c.body for c in out] == [big_body, b"x"] * 2
    assert dec.buffered == 0


def test_bad_length_is_an_error_and_sticks(impl, expected):
    # checked as soon as the 4 length bytes are in, whether the frame began in an
    # earlier feed or not; the commands before it come with the error
    for cut in (0, len(STREAM_FRAMES[0]) + 2):
        data = STREAM_FRAMES[0] + b"\xff\xff\xff\xf0rest"
        dec = impl.FrameDecoder()
        out = dec.feed(data[:cut])
        with pytest.raises(CorruptFrame) as e:
            dec.feed(data[cut:])
        assert out + e.value.decoded == expected[:1] and dec.buffered == 0
        with pytest.raises(CorruptFrame, match="decoder failed earlier"):
            dec.feed(STREAM_FRAMES[1])


def test_max_frame_length(impl):
    f = STREAM_FRAMES[0]
    assert impl.FrameDecoder().max_frame_length == 16 * 1024 * 1024
    dec = impl.FrameDecoder(max_frame_length=len(f))
    assert dec.max_frame_length == len(f)
    assert dec.feed(f) == [impl.decode_frame(f)]
    with pytest.raises(ValueError):
        impl.FrameDecoder(max_frame_length=7)
