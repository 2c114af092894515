"""Differential tests: the compiled core against the pure-Python reference on
random and malformed input. Either both raise the same error class from
rmq.errors, or both return equal results; any other exception is a failure."""

import json
import struct
import zlib

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from rmq.errors import BodyError, RmqError
from rmq.protocol import LANGUAGES
from support import (
    INT32,
    TEXT,
    VECTORS,
    binary_ext,
    binary_header,
    command_kwargs,
    fields,
    frame,
    json_values,
    vector_body,
    vector_bytes,
)


def is_command(obj):
    return type(obj).__name__ == "RemotingCommand"


def normalize(result):
    """Commands (and lists of them) as tuples of fields; anything else as is."""
    if is_command(result):
        return fields(result)
    if isinstance(result, list) and result and all(map(is_command, result)):
        return [fields(c) for c in result]
    return result


def outcome(fn, *args, **kwargs):
    try:
        result = fn(*args, **kwargs)
    except RmqError as exc:
        return ("error", type(exc))
    return ("ok", normalize(result))


def same(compiled_fn, fallback_fn, *args, **kwargs):
    c = outcome(compiled_fn, *args, **kwargs)
    py = outcome(fallback_fn, *args, **kwargs)
    assert c == py
    return c


# ---------------------------------------------------------------- frames

BASE_FRAMES = [vector_bytes(e["file"]) for e in VECTORS] + [
    frame(b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"GO","opaque":3,'
          b'"version":317}'),
    frame(b'{"code":105,"language":"JAVA","opaque":1,"flag":0,"version":121,'
          b'"extFields":{"topic":"T","n":5,"b":true,"f":1.5}}'),
    frame(b'{"code":105,"extFields":{"AccessKey":""},"flag":0,"language":"CPP","opaque":0,'
          b'"remark":"","version":63}\n'),
    frame(binary_header(code=105, remark="r\u00e9".encode(),
                        ext=binary_ext([(b"topic", b"T"), (b"k\xc3\xa9", b"v")])), 1, b"body"),
    frame(binary_header(), 1),
]

INTERESTING_INT32 = st.sampled_from([0, 1, 2, 3, 4, 20, 21, 22, 127, 128, 255, 256, 0x7FFF,
                                     0x8000, 0xFFFF, 0xFFFFFF, 0x1000000, 0x7FFFFFFF,
                                     -1, -2, -0x8000, -(1 << 31)]) | INT32


@st.composite
def mutated_frames(draw, base=st.sampled_from(BASE_FRAMES)):
    data = bytearray(draw(base))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "byte", "int32", "int16", "truncate", "insert",
                                   "delete", "stype"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "byte" and data:
            data[at] = draw(st.integers(0, 255))
        elif op == "int32":
            at = min(at, draw(st.integers(0, 64)))          # mostly in the headers
            data[at:at + 4] = struct.pack(">i", draw(INTERESTING_INT32))
        elif op == "int16":
            at = min(at, draw(st.integers(0, 64)))
            data[at:at + 2] = struct.pack(">H", draw(INTERESTING_INT32) & 0xFFFF)
        elif op == "truncate":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[at:at + draw(st.integers(1, 8))]
        elif op == "stype" and len(data) > 4:
            data[4] = draw(st.sampled_from([0, 1, 2, 255]))
    if len(data) >= 4 and draw(st.booleans()):
        data[0:4] = struct.pack(">i", len(data) - 4)    # keep the length prefix consistent
    return bytes(data)


MAX_LENGTHS = st.sampled_from([8, 64, 1000, 16 * 1024 * 1024])


@given(data=st.binary(max_size=200))
def test_decode_random_bytes(compiled, fallback, data):
    same(compiled.decode_frame, fallback.decode_frame, data)


@given(data=mutated_frames(), max_length=MAX_LENGTHS)
def test_decode_mutated_frames(compiled, fallback, data, max_length):
    same(compiled.decode_frame, fallback.decode_frame, data, max_frame_length=max_length)


@given(data=mutated_frames(), max_length=MAX_LENGTHS)
def test_decode_mutated_frames_without_copying_the_body(compiled, fallback, data, max_length):
    same(compiled.decode_frame, fallback.decode_frame, data, max_frame_length=max_length,
         copy_body=False)


@given(text=st.text(st.characters(), max_size=40))     # lone surrogates and astral too
def test_java_string_hashes_agree(compiled, fallback, text):
    same(compiled.java_spread_hash, fallback.java_spread_hash, text)


@given(size=st.sampled_from([16, 32, 64, 2048]), data=st.data())
def test_concurrent_resizes_agree(compiled, fallback, size, data):
    """The replay of ConcurrentHashMap's resizes (rmq.javaorder): hashes of few bits
    share buckets, so that resizes reorder them; placings of earlier resizes, some of
    keys no longer there."""
    from array import array
    bits = data.draw(st.sampled_from([4, 8, 32]))
    n = data.draw(st.integers(0, 3 * size))
    hashes = array("I", data.draw(st.lists(st.integers(0, (1 << bits) - 1),
                                           min_size=n, max_size=n)))
    seqs = array("Q", sorted(data.draw(st.sets(st.integers(0, 1 << 40),
                                               min_size=n, max_size=n))))
    placed = data.draw(st.dictionaries(st.sampled_from(list(seqs) or [7]) | st.integers(0, 99),
                                       st.integers(0, 12), max_size=n))
    same(compiled.concurrent_resizes, fallback.concurrent_resizes, size, seqs, hashes, placed)


def feed_all(decoder, chunks):
    results = []
    for chunk in chunks:
        try:
            results.append(("ok", normalize(decoder.feed(chunk)), decoder.buffered))
        except RmqError as exc:
            results.append(("error", type(exc), normalize(list(exc.decoded))))
    return results


@given(frames=st.lists(mutated_frames() | st.sampled_from(BASE_FRAMES), min_size=1, max_size=4),
       cuts=st.lists(st.integers(0, 4000), max_size=6), max_length=MAX_LENGTHS)
def test_frame_decoder_on_mutated_streams(compiled, fallback, frames, cuts, max_length):
    stream = b"".join(frames)
    bounds = [0, *sorted(c for c in cuts if c < len(stream)), len(stream)]
    chunks = [stream[a:b] for a, b in zip(bounds, bounds[1:])] + [frames[0]]
    assert feed_all(compiled.FrameDecoder(max_length), chunks) == \
        feed_all(fallback.FrameDecoder(max_length), chunks)


@given(data=st.binary(max_size=300), cuts=st.lists(st.integers(0, 300), max_size=4))
def test_frame_decoder_on_random_bytes(compiled, fallback, data, cuts):
    bounds = [0, *sorted(c for c in cuts if c < len(data)), len(data)]
    chunks = [data[a:b] for a, b in zip(bounds, bounds[1:])]
    assert feed_all(compiled.FrameDecoder(1000), chunks) == \
        feed_all(fallback.FrameDecoder(1000), chunks)


# ---------------------------------------------------------------- JSON headers

ANY_JSON = json_values()
NUMBER = st.integers() | st.floats(allow_nan=False, allow_infinity=False)
EXT_VALUES = TEXT | NUMBER | st.booleans() | st.none() | st.lists(st.integers(), max_size=2)
FIELDS = {
    "code": INT32 | st.integers() | ANY_JSON,
    "flag": INT32 | ANY_JSON,
    "opaque": INT32 | ANY_JSON,
    "version": st.sampled_from([0, 37, 63, 121, 317, 401, 409, 479]) | st.integers() | ANY_JSON,
    "language": st.sampled_from(LANGUAGES) | TEXT | ANY_JSON,
    "remark": st.none() | TEXT | ANY_JSON,
    "extFields": st.none() | st.dictionaries(TEXT, EXT_VALUES, max_size=5) | ANY_JSON,
    "serializeTypeCurrentRPC": st.just("JSON") | ANY_JSON,
}
REQUIRED = ("code", "flag", "opaque", "version")   # every client sends these
OPTIONAL = [name for name in FIELDS if name not in REQUIRED]


@st.composite
def json_headers(draw):
    """JSON headers as Java, Go, ali-ons and C++ clients write them, with random
    field types, field order, unknown fields and surrounding whitespace."""
    names = list(REQUIRED) + draw(st.lists(st.sampled_from(OPTIONAL), unique=True))
    pairs = [(name, draw(FIELDS[name])) for name in names]
    pairs += draw(st.lists(st.tuples(TEXT.filter(lambda k: k not in FIELDS), ANY_JSON),
                           max_size=2))
    pairs = draw(st.permutations(pairs))
    ascii_only = draw(st.booleans())
    sep = draw(st.sampled_from([(",", ":"), (", ", ": "), (",\n", " : ")]))
    text = "{" + sep[0].join(json.dumps(k, ensure_ascii=ascii_only) + sep[1] +
                             json.dumps(v, ensure_ascii=ascii_only) for k, v in pairs) + "}"
    space = st.sampled_from(["", " ", "\n", "\r\n", "\t "])
    return (draw(space) + text + draw(space)).encode("utf-8")


@given(header=json_headers(), body=st.binary(max_size=8))
def test_random_json_headers(compiled, fallback, header, body):
    same(compiled.decode_frame, fallback.decode_frame, frame(header, 0, body))


@given(header=json_headers(), data=st.data())
def test_mutated_json_headers(compiled, fallback, header, data):
    at = data.draw(st.integers(0, len(header) - 1))
    replacement = data.draw(st.sampled_from([b"", b" ", b"\x00", b"\xff", b'"', b"\\", b"{",
                                             b"}", b",", b":", b"[", b"-", b"0", b"1e9", b"n",
                                             b"null", b"true", b"\\u00e9", b"\xc3\xa9"]))
    mutated = header[:at] + replacement + header[at + data.draw(st.integers(0, 3)):]
    same(compiled.decode_frame, fallback.decode_frame, frame(mutated, 0))


@pytest.mark.parametrize("header", [
    b"{}",
    b'{"code":105}',
    b'{"opaque":1,"flag":0}',
    b'{"language":"GO","extFields":{"topic":"T"}}',
], ids=["empty", "code-only", "no-code", "no-numbers"])
def test_json_headers_with_missing_fields(compiled, fallback, header):
    same(compiled.decode_frame, fallback.decode_frame, frame(header, 0))


@pytest.mark.parametrize("header", [
    b'{"code":"x","code":105,"flag":0,"opaque":0,"version":1}',
    b'{"code":105,"code":"x","flag":0,"opaque":0,"version":1}',
    b'{"code":1,"flag":0,"opaque":0,"version":1,"extFields":{"a":"1"},"extFields":null}',
    b'{"code":1,"flag":0,"opaque":0,"version":1,"remark":5,"remark":"ok"}',
], ids=["bad-then-good", "good-then-bad", "ext-then-null", "remark-bad-then-good"])
def test_json_headers_with_duplicate_fields(compiled, fallback, header):
    same(compiled.decode_frame, fallback.decode_frame, frame(header, 0))


@given(kwargs=command_kwargs())
def test_encode_frame_identical(compiled, fallback, kwargs):
    c = compiled.encode_frame(compiled.RemotingCommand(**kwargs))
    assert c == fallback.encode_frame(fallback.RemotingCommand(**kwargs))


@given(kwargs=command_kwargs(), language=TEXT, code=INT32, version=INT32,
       ext=st.dictionaries(TEXT, TEXT | st.integers(-(1 << 40), 1 << 40) | st.booleans(),
                           max_size=4))
def test_encode_frame_odd_commands(compiled, fallback, kwargs, language, code, version, ext):
    kwargs.update(language=language, code=code, version=version, ext_fields=ext)
    same(lambda: compiled.encode_frame(compiled.RemotingCommand(**kwargs)),
         lambda: fallback.encode_frame(fallback.RemotingCommand(**kwargs)))


@given(kwargs=command_kwargs())
def test_encode_frame_head_is_the_frame_less_its_body(compiled, fallback, kwargs):
    head = compiled.encode_frame_head(compiled.RemotingCommand(**kwargs))
    assert head == fallback.encode_frame_head(fallback.RemotingCommand(**kwargs))
    frame = compiled.encode_frame(compiled.RemotingCommand(**kwargs))
    assert head + (kwargs.get("body") or b"") == frame


@given(kwargs=command_kwargs(), language=TEXT, code=INT32, version=INT32,
       ext=st.dictionaries(TEXT, TEXT | st.integers(-(1 << 40), 1 << 40) | st.booleans(),
                           max_size=4))
def test_encode_frame_head_odd_commands(compiled, fallback, kwargs, language, code, version,
                                        ext):
    kwargs.update(language=language, code=code, version=version, ext_fields=ext)
    same(lambda: compiled.encode_frame_head(compiled.RemotingCommand(**kwargs)),
         lambda: fallback.encode_frame_head(fallback.RemotingCommand(**kwargs)))


# ---------------------------------------------------------------- JSON bodies

KEYED_BY_INT = st.recursive(json_values(), lambda inner: st.dictionaries(
    st.integers(-(1 << 70), 1 << 70), inner, max_size=4), max_leaves=10)


@given(value=json_values(), ascii_only=st.booleans(), indent=st.sampled_from([None, 0, 2]))
def test_json_loads_standard_json(compiled, fallback, value, ascii_only, indent):
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent).encode("utf-8")
    assert same(compiled.json_loads, fallback.json_loads, text) == ("ok", value)


@given(value=json_values() | KEYED_BY_INT, legacy=st.booleans())
def test_json_dumps_identical(compiled, fallback, value, legacy):
    data = same(compiled.json_dumps, fallback.json_dumps, value, legacy=legacy)
    if data[0] == "ok":
        same(compiled.json_loads, fallback.json_loads, data[1])


@given(value=st.dictionaries(st.none() | st.booleans() | st.floats(allow_nan=False) |
                             st.integers() | TEXT, st.integers(), max_size=4),
       legacy=st.booleans())
def test_json_dumps_scalar_keys(compiled, fallback, value, legacy):
    same(compiled.json_dumps, fallback.json_dumps, value, legacy=legacy)


def test_json_loads_legacy_int_keys(compiled, fallback):
    for data in (b'{0:"a",12:"b"}', b'{"brokerAddrs":{0:"x", -1 :"y"},"n":[{7:{8:9}}]}'):
        result = same(compiled.json_loads, fallback.json_loads, data)
        assert result[0] == "ok"
    assert compiled.json_loads(b'{0:"a",12:"b"}') == {"0": "a", "12": "b"}


@given(data=st.binary(max_size=100))
def test_json_loads_random_bytes(compiled, fallback, data):
    same(compiled.json_loads, fallback.json_loads, data)


@given(value=json_values() | KEYED_BY_INT, data=st.data())
def test_json_loads_mutated(compiled, fallback, value, data):
    text = fallback.json_dumps(value, legacy=data.draw(st.booleans()))
    assume(text)
    at = data.draw(st.integers(0, len(text) - 1))
    replacement = data.draw(st.sampled_from([b"", b" ", b'"', b"\\", b"{", b"}", b"[", b"]",
                                             b",", b":", b"0", b"-", b"1.", b"e", b"\x01",
                                             b"\xff", b"\xc3", b"\\ud800", b"\\u0041", b"1:",
                                             b"\xd9\xa3"]))
    mutated = text[:at] + replacement + text[at + data.draw(st.integers(0, 2)):]
    same(compiled.json_loads, fallback.json_loads, mutated)


@pytest.mark.parametrize("depth", [100, 512, 2000, 50_000])
def test_json_nesting_depth(compiled, fallback, depth):
    # Both agree up to the core's limit of 512 levels and far beyond Python's
    # recursion limit; in between, the reference's limit is the interpreter's.
    same(compiled.json_loads, fallback.json_loads, b"[" * depth + b"]" * depth)
    same(compiled.json_loads, fallback.json_loads, b'{"a":' * depth + b"0" + b"}" * depth)


def test_json_nesting_limit_of_the_core(compiled):
    with pytest.raises(BodyError, match="nesting too deep"):
        compiled.json_loads(b"[" * 513 + b"]" * 513)


# ---------------------------------------------------------------- RegisterBrokerBody

REGISTER_BODY = vector_body("103_register_broker_request.bin")


def chunk(data):
    return struct.pack(">i", len(data)) + data


# The inflated compressed RegisterBrokerBody, laid out as the spec says.
COMPRESSED_INNER = b"".join([
    chunk(b'{"counter":3,"stateVersion":0,"timestamp":1700000000000}'),
    struct.pack(">i", 2),
    chunk(b'T 4 4 6 SINGLE_TAG {"+a":"b"}'),
    chunk(b"U 8 8 7 MULTI_TAG"),
    chunk(b'["127.0.0.1:1"]'),
    struct.pack(">i", 1),
    chunk(b'{"topic":"T","bname":"b"}'),
])


def mutate(data, draw):
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        op = draw(st.sampled_from(["byte", "int32", "truncate", "insert", "space"]))
        if op == "byte" and data:
            data[at] = draw(st.integers(0, 255))
        elif op == "int32":
            data[at:at + 4] = struct.pack(">i", draw(INTERESTING_INT32))
        elif op == "truncate":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif op == "space" and data:
            data[at] = 0x20
    return bytes(data)


@given(data=st.data())
def test_register_body_mutated_json(compiled, fallback, data):
    body = mutate(REGISTER_BODY, data.draw)
    same(compiled.decode_register_broker_body, fallback.decode_register_broker_body, body)


@given(data=st.data())
def test_register_body_mutated_compressed(compiled, fallback, data):
    body = zlib.compress(mutate(COMPRESSED_INNER, data.draw))
    same(compiled.decode_register_broker_body, fallback.decode_register_broker_body, body)


@given(data=st.data())
def test_register_body_mutated_zlib_stream(compiled, fallback, data):
    body = mutate(zlib.compress(COMPRESSED_INNER), data.draw)
    same(compiled.decode_register_broker_body, fallback.decode_register_broker_body, body)


@given(body=st.binary(max_size=100))
def test_register_body_random_bytes(compiled, fallback, body):
    same(compiled.decode_register_broker_body, fallback.decode_register_broker_body, body)


def test_escaped_header_keys_name_their_fields(compiled, fallback):
    header = b'{"\\u0063ode":105,"fl\\u0061g":2,"extFields":{"topic":"T"}}'
    same(compiled.decode_frame, fallback.decode_frame, frame(header, 0))
    assert compiled.decode_frame(frame(header, 0)).code == 105


def test_compressed_ints_with_leading_zeros(compiled, fallback):
    inner = b"".join([chunk(b'{"counter":1}'), struct.pack(">i", 1),
                      chunk(b"T 0004 00000000008 06 SINGLE_TAG"), chunk(b"[]")])
    data = zlib.compress(inner)
    same(compiled.decode_register_broker_body, fallback.decode_register_broker_body, data)
    tc = compiled.decode_register_broker_body(data)["topicConfigSerializeWrapper"][
        "topicConfigTable"]["T"]
    assert (tc["readQueueNums"], tc["writeQueueNums"], tc["perm"]) == (4, 8, 6)


@pytest.mark.parametrize("value", [-1, 1 << 32, (1 << 40) + 5, 0xFFFFFFFF])
def test_crc32_start_value_is_masked_like_zlib(compiled, value):
    assert compiled.crc32(b"rocketmq", value) == zlib.crc32(b"rocketmq", value)
