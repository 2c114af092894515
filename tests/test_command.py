"""The RemotingCommand API: building requests and responses, equality, repr,
pickling, and what encode_frame accepts or refuses."""

import copy
import pickle
import struct

import pytest

from rmq.errors import HeaderError, ProtocolError, UnknownSerializeType
from rmq.protocol import CURRENT_VERSION, FLAG_ONEWAY, FLAG_RESPONSE


def test_defaults(impl):
    cmd = impl.RemotingCommand()
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag) == \
        (0, "JAVA", CURRENT_VERSION, 0, 0)
    assert cmd.remark is None and cmd.ext_fields is None
    assert cmd.body == b"" and cmd.serialize_type == "JSON"


def test_request_increments_opaque(impl):
    first = impl.RemotingCommand.request(105, {"topic": "T"})
    second = impl.RemotingCommand.request(105)
    third = impl.RemotingCommand.request(106, serialize_type="ROCKETMQ")
    assert second.opaque == first.opaque + 1 or (first.opaque, second.opaque) == (2**31 - 1, -2**31)
    assert third.opaque == second.opaque + 1 or (second.opaque, third.opaque) == (2**31 - 1, -2**31)
    assert first.code == 105 and first.ext_fields == {"topic": "T"}
    assert first.flag == 0 and not first.is_response and not first.is_oneway
    assert third.serialize_type == "ROCKETMQ"


def test_request_with_explicit_opaque(impl):
    before = impl.RemotingCommand.request(1).opaque
    assert impl.RemotingCommand.request(1, opaque=-5).opaque == -5
    assert impl.RemotingCommand.request(1).opaque == before + 1   # counter untouched


def test_request_body_and_options(impl):
    cmd = impl.RemotingCommand.request(103, body=bytearray(b"xyz"), language="GO", version=317)
    assert cmd.body == b"xyz" and type(cmd.body) is bytes
    assert cmd.language == "GO" and cmd.version == 317


def test_oneway(impl):
    cmd = impl.RemotingCommand.request(904, oneway=True)
    assert cmd.flag == FLAG_ONEWAY == 2
    assert cmd.is_oneway and not cmd.is_response
    decoded = impl.decode_frame(impl.encode_frame(cmd))
    assert decoded.is_oneway and decoded.flag == 2


@pytest.mark.parametrize("stype", ["JSON", "ROCKETMQ"])
def test_response(impl, stype):
    request = impl.RemotingCommand.request(101, {"namespace": "ns", "key": "k"},
                                           serialize_type=stype, language="GO", version=317)
    response = request.response(22, "not found", {"value": "v"}, b"body")
    assert response.opaque == request.opaque
    assert response.serialize_type == stype
    assert response.flag == FLAG_RESPONSE == 1
    assert response.is_response and not response.is_oneway
    assert response.code == 22 and response.remark == "not found"
    assert response.ext_fields == {"value": "v"} and response.body == b"body"
    assert response.language == "JAVA" and response.version == CURRENT_VERSION
    assert request.response(version=401).version == 401
    bare = request.response()
    assert (bare.code, bare.remark, bare.ext_fields, bare.body) == (0, None, None, b"")


def test_is_response_and_oneway_read_the_flag_bits(impl):
    for flag in (0, 1, 2, 3, 4, 5, -1):
        cmd = impl.RemotingCommand(flag=flag)
        assert cmd.is_response == bool(flag & 1)
        assert cmd.is_oneway == bool(flag & 2)


def make(impl, **overrides):
    kwargs = dict(code=105, language="JAVA", version=409, opaque=7, flag=0, remark="r",
                  ext_fields={"topic": "T"}, body=b"b", serialize_type="JSON")
    kwargs.update(overrides)
    return impl.RemotingCommand(**kwargs)


@pytest.mark.parametrize("field, value", [
    ("code", 106), ("language", "GO"), ("version", 401), ("opaque", 8), ("flag", 1),
    ("remark", None), ("ext_fields", None), ("ext_fields", {"topic": "U"}), ("body", b""),
    ("serialize_type", "ROCKETMQ"),
])
def test_equality(impl, field, value):
    assert make(impl) == make(impl)
    assert not make(impl) != make(impl)
    assert make(impl) != make(impl, **{field: value})
    assert make(impl) != object() and make(impl) != 105


def test_unhashable(impl):
    with pytest.raises(TypeError):
        hash(make(impl))


def test_repr(impl):
    text = repr(make(impl, code=219, opaque=-3, flag=1))
    for part in ("RemotingCommand", "response", "219", "-3", "JAVA", "'r'", "topic", "JSON"):
        assert part in text
    assert "request" in repr(make(impl))


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickle(impl, protocol):
    cmd = make(impl, ext_fields={"a": "1", "b": "2"}, serialize_type="ROCKETMQ")
    again = pickle.loads(pickle.dumps(cmd, protocol))
    assert type(again) is type(cmd)
    assert again == cmd


def test_copy(impl):
    cmd = make(impl)
    assert copy.copy(cmd) == cmd
    deep = copy.deepcopy(cmd)
    assert deep == cmd and deep.ext_fields is not cmd.ext_fields


# ---------------------------------------------------------------- encoding


@pytest.mark.parametrize("stype", ["JSON", "ROCKETMQ"])
def test_ext_values_coerced_to_str(impl, stype):
    cmd = make(impl, ext_fields={"n": 5, "neg": -12, "t": True, "f": False, "s": "x"},
               serialize_type=stype)
    decoded = impl.decode_frame(impl.encode_frame(cmd))
    assert decoded.ext_fields == {"n": "5", "neg": "-12", "t": "true", "f": "false", "s": "x"}


@pytest.mark.parametrize("stype", ["JSON", "ROCKETMQ"])
@pytest.mark.parametrize("value", [1.5, None, b"x", ["a"], {"a": "b"}, object()],
                         ids=["float", "None", "bytes", "list", "dict", "object"])
def test_ext_value_of_other_type(impl, stype, value):
    with pytest.raises(ProtocolError):
        impl.encode_frame(make(impl, ext_fields={"k": value}, serialize_type=stype))


@pytest.mark.parametrize("stype", ["JSON", "ROCKETMQ"])
@pytest.mark.parametrize("key", [5, None, b"k"], ids=["int", "None", "bytes"])
def test_ext_key_of_other_type(impl, stype, key):
    with pytest.raises(ProtocolError):
        impl.encode_frame(make(impl, ext_fields={key: "v"}, serialize_type=stype))


@pytest.mark.parametrize("stype", ["json", "", "PROTOBUF", "rocketmq"])
def test_unknown_serialize_type_on_encode(impl, stype):
    with pytest.raises(UnknownSerializeType):
        impl.encode_frame(make(impl, serialize_type=stype))


@pytest.mark.parametrize("field, value", [("code", 32768), ("code", -32769), ("code", 105_000),
                                          ("version", 32768), ("version", -32769)])
def test_int16_fields_of_binary_header(impl, field, value):
    cmd = make(impl, serialize_type="ROCKETMQ", **{field: value})
    with pytest.raises(ProtocolError) as info:
        impl.encode_frame(cmd)
    assert str(value) in str(info.value)
    # The JSON header has no such limit.
    cmd.serialize_type = "JSON"
    assert getattr(impl.decode_frame(impl.encode_frame(cmd)), field) == value


def test_ext_key_longer_than_int16(impl):
    cmd = make(impl, ext_fields={"k" * 32768: "v"}, serialize_type="ROCKETMQ")
    with pytest.raises(ProtocolError):
        impl.encode_frame(cmd)
    cmd.ext_fields = {"k" * 32767: "v"}
    assert impl.decode_frame(impl.encode_frame(cmd)).ext_fields == cmd.ext_fields


@pytest.mark.parametrize("language, byte", [("JAVA", 0), ("CPP", 1), ("GO", 9), ("RUST", 12),
                                            ("NODE_JS", 13), ("KOTLIN", 7), ("200", 200)])
def test_binary_language_byte(impl, language, byte):
    frame = impl.encode_frame(make(impl, language=language, serialize_type="ROCKETMQ"))
    assert frame[8 + 2] == byte


@pytest.mark.parametrize("stype", ["JSON", "ROCKETMQ"])
def test_a_body_decoded_without_a_copy_is_a_read_only_view_of_the_frame(impl, stype):
    # (the I/O engine's registrations: megabytes read where they arrived)
    body = bytes(range(256)) * 10
    frame = bytearray(impl.encode_frame(make(impl, body=body, serialize_type=stype)))
    cmd = impl.decode_frame(frame, copy_body=False)
    assert type(cmd.body) is memoryview and cmd.body.readonly
    assert cmd.body == body and cmd.body.obj is not None
    frame[-1] ^= 0xFF                       # a view, not a copy: it sees the frame
    assert cmd.body[-1] == body[-1] ^ 0xFF
    copied = impl.decode_frame(bytes(frame))
    assert type(copied.body) is bytes and copied.body == bytes(cmd.body)
    empty = impl.decode_frame(impl.encode_frame(make(impl, body=b"", serialize_type=stype)),
                              copy_body=False)
    assert empty.body == b"" and type(empty.body) is bytes


def test_unknown_binary_language_survives(impl):
    # A language byte newer than the table decodes to its number and re-encodes to it.
    frame = impl.encode_frame(make(impl, language="200", serialize_type="ROCKETMQ"))
    cmd = impl.decode_frame(frame)
    assert cmd.language == "200"
    assert impl.encode_frame(cmd) == frame


def test_json_header_field_order(impl):
    frame = impl.encode_frame(make(impl))
    assert frame[8:] == (b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA",'
                         b'"opaque":7,"remark":"r","serializeTypeCurrentRPC":"JSON",'
                         b'"version":409}b')


def test_json_header_omits_nulls(impl):
    frame = impl.encode_frame(make(impl, remark=None, ext_fields=None, body=b""))
    assert frame[8:] == (b'{"code":105,"flag":0,"language":"JAVA","opaque":7,'
                         b'"serializeTypeCurrentRPC":"JSON","version":409}')


def _binary_frame(header):
    payload = struct.pack(">I", (1 << 24) | len(header)) + header
    return struct.pack(">i", len(payload)) + payload


_FIXED = struct.pack(">hBhii", 105, 0, 409, 7, 0)     # code, language, version, opaque, flag


@pytest.mark.parametrize("header, message", [
    (bytes(20), "ROCKETMQ header truncated: 20 bytes, the fixed part is 21"),
    (_FIXED + struct.pack(">ii", 5, 0), "ROCKETMQ header remark length 5 exceeds the header (21 bytes)"),
    (_FIXED + struct.pack(">ii", -1, 0), "ROCKETMQ header remark length -1 exceeds the header (21 bytes)"),
    (_FIXED + struct.pack(">ii", 0, 9), "ROCKETMQ header ext length 9 exceeds the header (21 bytes)"),
    (_FIXED + struct.pack(">i", 1) + b"\xff" + struct.pack(">i", 9), "remark is not valid UTF-8 at byte 0"),
    (_FIXED + struct.pack(">ii", 0, 1) + b"\0", "ROCKETMQ ext field truncated at byte 21"),
    (_FIXED + struct.pack(">iih", 0, 4, 5) + b"ab", "ROCKETMQ ext key length 5 exceeds the ext fields"),
    (_FIXED + struct.pack(">iih", 0, 7, 1) + b"k" + struct.pack(">i", 9),
     "ROCKETMQ ext value length 9 exceeds the ext fields"),
    (_FIXED + struct.pack(">iih", 0, 7, 1) + b"\xff" + struct.pack(">i", 9),
     "ext key is not valid UTF-8 at byte 0"),
    (_FIXED + struct.pack(">iih", 0, 8, 1) + b"k" + struct.pack(">i", 1) + b"\xff",
     "ext value is not valid UTF-8 at byte 0"),
])
def test_binary_header_errors(impl, header, message):
    # Which check fails first, and its message, are the same in both implementations.
    with pytest.raises(HeaderError) as e:
        impl.decode_frame(_binary_frame(header))
    assert str(e.value) == message


def test_binary_header_walk(impl):
    header = (_FIXED + struct.pack(">i", 1) + b"r" + struct.pack(">ih", 15, 1) + b"a" + struct.pack(">i", 1)
              + b"1" + struct.pack(">h", 1) + b"b" + struct.pack(">i", 0))
    cmd = impl.decode_frame(_binary_frame(header))
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields) == (
        105, "JAVA", 409, 7, 0, "r", {"a": "1", "b": ""})
