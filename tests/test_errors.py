"""Every kind of malformed frame raises its typed error from rmq.errors, whose
message names the offending value; a failed FrameDecoder stays failed."""

import struct

import pytest

from rmq import errors
from rmq.errors import (
    BodyError,
    CorruptFrame,
    FrameTooLarge,
    HeaderError,
    ProtocolError,
    UnknownSerializeType,
)
from support import binary_ext, binary_header, frame, vector_bytes

GOOD = vector_bytes("105_get_routeinfo_existing_request.bin")
GOOD_RMQ = vector_bytes("104_unregister_broker_rmq_request.bin")


def raises_exactly(cls, fn, *args, **kwargs):
    with pytest.raises(cls) as info:
        fn(*args, **kwargs)
    assert info.type is cls, f"{info.type.__name__}: {info.value}"
    return str(info.value)


@pytest.mark.parametrize("cls", [errors.FrameTooLarge, errors.CorruptFrame, errors.HeaderError,
                                 errors.UnknownSerializeType, errors.BodyError])
def test_error_hierarchy(cls):
    assert issubclass(cls, ProtocolError)
    assert issubclass(cls, ValueError)
    assert issubclass(cls, errors.RmqError)


# ---------------------------------------------------------------- frame lengths


def test_frame_too_large(impl):
    msg = raises_exactly(FrameTooLarge, impl.decode_frame, GOOD, max_frame_length=len(GOOD) - 1)
    assert str(len(GOOD)) in msg or str(len(GOOD) - 4) in msg
    assert impl.decode_frame(GOOD, max_frame_length=len(GOOD)).code == 105


def test_frame_too_large_default_limit(impl):
    # 16 MiB including the length prefix is the most Java accepts.
    length = 16 * 1024 * 1024 - 4 + 1
    msg = raises_exactly(FrameTooLarge, impl.decode_frame, struct.pack(">ii", length, 0))
    assert str(length) in msg or str(length + 4) in msg


def test_decoder_rejects_large_frame_on_its_prefix(impl):
    prefix = struct.pack(">i", 997)         # 997 + 4 > 1000, and no byte of it has arrived
    with pytest.raises(FrameTooLarge) as info:
        impl.FrameDecoder(max_frame_length=1000).feed(prefix)
    assert "997" in str(info.value) or "1001" in str(info.value)

    dec = impl.FrameDecoder(max_frame_length=1000)
    for i in range(3):
        assert dec.feed(prefix[i:i + 1]) == []
    with pytest.raises(FrameTooLarge):
        dec.feed(prefix[3:])


def test_decoder_accepts_frame_at_the_limit(impl):
    dec = impl.FrameDecoder(max_frame_length=len(GOOD))
    assert len(dec.feed(GOOD + GOOD)) == 2


@pytest.mark.parametrize("length", [-1, -4, -(1 << 31)])
def test_negative_frame_length(impl, length):
    data = struct.pack(">i", length) + GOOD[4:]
    msg = raises_exactly(CorruptFrame, impl.decode_frame, data)
    assert str(length) in msg
    with pytest.raises(CorruptFrame) as info:
        impl.FrameDecoder().feed(struct.pack(">i", length))
    assert info.type is CorruptFrame and str(length) in str(info.value)


@pytest.mark.parametrize("size", range(8))
def test_frame_shorter_than_8_bytes(impl, size):
    data = (struct.pack(">i", size - 4) + b"\x00" * 4)[:size]
    msg = raises_exactly(CorruptFrame, impl.decode_frame, data)
    assert str(size) in msg


@pytest.mark.parametrize("length", range(4))
def test_frame_without_header_length_word(impl, length):
    # The 4-byte header-length word is part of every frame.
    data = struct.pack(">i", length) + b"\x00" * length
    with pytest.raises(CorruptFrame) as info:
        impl.FrameDecoder().feed(data)
    assert info.type is CorruptFrame and str(length) in str(info.value)


@pytest.mark.parametrize("delta", [-1, 1, 100])
def test_length_does_not_match_data(impl, delta):
    length = len(GOOD) - 4 + delta
    data = struct.pack(">i", length) + GOOD[4:]
    msg = raises_exactly(CorruptFrame, impl.decode_frame, data)
    assert str(length) in msg


@pytest.mark.parametrize("extra", [1, 2, 1000, 0xFFFFFF - 200])
def test_header_length_past_the_frame(impl, extra):
    header = GOOD[8:]
    header_len = len(header) + extra
    data = frame(header, 0, header_len=header_len)
    msg = raises_exactly(CorruptFrame, impl.decode_frame, data)
    assert str(header_len) in msg
    with pytest.raises(CorruptFrame) as info:
        impl.FrameDecoder().feed(data)
    assert info.type is CorruptFrame


@pytest.mark.parametrize("stype", range(2, 256))
def test_unknown_serialize_type(impl, stype):
    data = frame(GOOD[8:], stype)
    msg = raises_exactly(UnknownSerializeType, impl.decode_frame, data)
    assert str(stype) in msg


# ---------------------------------------------------------------- JSON headers

INVALID_JSON = [
    b"",
    b"{",
    b'{"code":105',
    b'{"code":105,}',
    b"{'code':105}",
    b'{"code":105}{}',
    b'{"code":105} x',
    b'{code:105}',
    b"[]",
    b'"code"',
    b"105",
    b"null",
    b'{"code":NaN}',
    b'{"remark":"\x00"}',
    b'{"remark":"\xff"}',
    b'{"remark":"\\x"}',
    b'{"extFields":{"a":"b",}}',
    b'\xef\xbb\xbf{"code":105}',
]


@pytest.mark.parametrize("header", INVALID_JSON)
def test_invalid_json_header(impl, header):
    raises_exactly(HeaderError, impl.decode_frame, frame(header, 0))


@pytest.mark.parametrize("field, value", [
    ("code", '"105"'), ("code", "1.5"), ("code", "true"), ("code", "[]"),
    ("opaque", "2147483648"), ("opaque", "-2147483649"), ("flag", "99999999999999999999"),
    ("version", "1e3"), ("language", "9"), ("language", "{}"), ("remark", "5"),
    ("remark", "false"), ("extFields", "[]"), ("extFields", '"a"'),
])
def test_json_header_field_of_wrong_type(impl, field, value):
    header = '{"code":105,"flag":0,"opaque":1,"version":409,"%s":%s}' % (field, value)
    msg = raises_exactly(HeaderError, impl.decode_frame, frame(header.encode(), 0))
    assert field in msg


@pytest.mark.parametrize("value", ['{"x":1}', "[1]", "[]", "{}"])
def test_json_ext_value_not_scalar(impl, value):
    header = '{"code":105,"flag":0,"opaque":1,"version":409,"extFields":{"k":%s}}' % value
    raises_exactly(HeaderError, impl.decode_frame, frame(header.encode(), 0))


def test_deeply_nested_json_header(impl):
    # An unknown field nested beyond any sane depth is a header error, not a crash.
    nested = b"[" * 100_000 + b"]" * 100_000
    header = b'{"code":105,"flag":0,"opaque":1,"version":409,"x":' + nested + b"}"
    raises_exactly(HeaderError, impl.decode_frame, frame(header, 0))


# ---------------------------------------------------------------- binary headers


@pytest.mark.parametrize("size", range(21))
def test_binary_header_shorter_than_fixed_part(impl, size):
    msg = raises_exactly(HeaderError, impl.decode_frame, frame(binary_header()[:size], 1))
    assert str(size) in msg


EXT = binary_ext([(b"topic", b"T"), (b"key", b"value")])


@pytest.mark.parametrize("header, number", [
    (binary_header(remark=b"abc", remark_len=4), 4),
    (binary_header(remark=b"abc", remark_len=1000), 1000),
    (binary_header(remark_len=-1), -1),
    (binary_header(remark_len=-(1 << 31)), -(1 << 31)),
    (binary_header(remark=b"abc", remark_len=(1 << 31) - 1), (1 << 31) - 1),
    (binary_header(ext=EXT, ext_len=len(EXT) + 1), len(EXT) + 1),
    (binary_header(ext_len=-1), -1),
    (binary_header(ext=EXT, ext_len=(1 << 31) - 1), (1 << 31) - 1),
], ids=["remark+1", "remark-far", "remark-neg", "remark-min", "remark-max",
        "ext+1", "ext-neg", "ext-max"])
def test_binary_header_lengths_past_the_header(impl, header, number):
    msg = raises_exactly(HeaderError, impl.decode_frame, frame(header, 1))
    assert str(number) in msg


def ext_entry(key, value, klen=None, vlen=None):
    return (struct.pack(">h", len(key) if klen is None else klen) + key
            + struct.pack(">i", len(value) if vlen is None else vlen) + value)


@pytest.mark.parametrize("ext, number", [
    (ext_entry(b"key", b"value", klen=10), 10),
    (ext_entry(b"key", b"value", klen=-1), -1),
    (ext_entry(b"key", b"value", klen=-32768), -32768),
    (ext_entry(b"key", b"value", vlen=6), 6),
    (ext_entry(b"key", b"value", vlen=-1), -1),
    (ext_entry(b"key", b"value", vlen=1 << 30), 1 << 30),
    (ext_entry(b"a", b"b") + ext_entry(b"key", b"value", vlen=100), 100),
], ids=["key+", "key-neg", "key-min", "value+1", "value-neg", "value-far", "second-value"])
def test_binary_ext_lengths_past_the_ext_block(impl, ext, number):
    # The frame has bytes to spare after the ext block: lengths must stay inside it.
    header = binary_header(ext=ext) + b"\x00" * 64
    msg = raises_exactly(HeaderError, impl.decode_frame, frame(header, 1))
    assert str(number) in msg


@pytest.mark.parametrize("tail", [b"\x00", b"\x00\x01", b"\x00\x01k", b"\x00\x01k\x00\x00\x00"])
def test_binary_ext_entry_truncated(impl, tail):
    ext = ext_entry(b"a", b"b") + tail
    raises_exactly(HeaderError, impl.decode_frame, frame(binary_header(ext=ext), 1))


@pytest.mark.parametrize("header", [
    binary_header(remark=b"\xff"),
    binary_header(ext=ext_entry(b"\xc3", b"v")),
    binary_header(ext=ext_entry(b"k", b"\xed\xa0\x80")),   # a UTF-8 encoded surrogate
], ids=["remark", "key", "value"])
def test_binary_header_invalid_utf8(impl, header):
    raises_exactly(HeaderError, impl.decode_frame, frame(header, 1))


# ---------------------------------------------------------------- streaming after an error


BAD_FRAMES = {
    "too-large": struct.pack(">i", 1 << 30),
    "negative": struct.pack(">i", -5),
    "header-past-frame": frame(b"{}", 0, header_len=3),
    "serialize-type": frame(b"{}", 7),
    "json": frame(b"{", 0),
    "binary": frame(b"\x00" * 20, 1),
}


@pytest.mark.parametrize("bad", list(BAD_FRAMES.values()), ids=list(BAD_FRAMES))
def test_decoder_stays_failed(impl, bad):
    dec = impl.FrameDecoder(max_frame_length=1 << 20)
    assert len(dec.feed(GOOD)) == 1
    with pytest.raises(ProtocolError) as first:
        dec.feed(GOOD_RMQ + GOOD + bad + GOOD)
    # The frames completed before the bad one in the same feed are kept.
    assert first.value.decoded == [impl.decode_frame(GOOD_RMQ), impl.decode_frame(GOOD)]
    for data in (GOOD, b"", bad):
        with pytest.raises(ProtocolError) as again:
            dec.feed(data)
        assert again.type is first.type


def test_decoder_error_with_buffered_prefix(impl):
    # The bad frame started in an earlier feed.
    dec = impl.FrameDecoder()
    bad = frame(b"\x00" * 20, 1)
    assert dec.feed(bad[:10]) == []
    with pytest.raises(HeaderError) as info:
        dec.feed(bad[10:] + GOOD)
    assert info.value.decoded == []
    with pytest.raises(HeaderError):
        dec.feed(GOOD)


# ---------------------------------------------------------------- bodies


@pytest.mark.parametrize("data", [b"", b"{", b"[1,]", b"{1}", b"nul", b"\xff", b'"\\u12"',
                                  b"{} {}", b"NaN", b"{'a':1}", b'{"a":1,}'])
def test_invalid_json_body(impl, data):
    raises_exactly(BodyError, impl.json_loads, data)


def test_deeply_nested_json_body(impl):
    for data in (b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000):
        raises_exactly(BodyError, impl.json_loads, data)
        raises_exactly(BodyError, impl.decode_register_broker_body, data)


def test_json_body_with_huge_number(impl):
    # Beyond Python's int string-conversion limit: still a body error.
    raises_exactly(BodyError, impl.json_loads, b"[" + b"7" * 5000 + b"]")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), object(), b"bytes", {1, 2}])
def test_json_dumps_unencodable(impl, value):
    with pytest.raises(BodyError):
        impl.json_dumps({"k": [value]})
    with pytest.raises(BodyError):
        impl.json_dumps({"k": [value]}, legacy=True)


def test_register_body_not_an_object(impl):
    raises_exactly(BodyError, impl.decode_register_broker_body, b"[]")


def test_compressed_register_body_bomb(impl):
    import zlib
    bomb = zlib.compress(b"\x00" * (8 << 20), 9)
    msg = raises_exactly(BodyError, impl.decode_register_broker_body, bomb, max_inflated=1 << 20)
    assert str(1 << 20) in msg


def test_compressed_register_body_truncated(impl):
    import zlib
    data = zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">i", 0) + b"\x00\x00")
    raises_exactly(BodyError, impl.decode_register_broker_body, data)
    raises_exactly(BodyError, impl.decode_register_broker_body, data[:-3])
