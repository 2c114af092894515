"""Headers of non-Java clients, as the spec (section 2) records them from the wire."""

import pytest

from support import ALI_ONS, ALI_ONS_WIRE, CPP, GO, frame


def test_go_header_without_serialize_type_field(impl):
    cmd = impl.decode_frame(frame(GO))
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag) == (105, "GO", 317, 3, 0)
    assert cmd.ext_fields == {"topic": "T"}
    assert cmd.remark is None and cmd.body == b"" and cmd.serialize_type == "JSON"


def test_ali_ons_header(impl):
    cmd = impl.decode_frame(frame(ALI_ONS_WIRE))
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag) == (105, "JAVA", 121, 1, 0)
    assert cmd.ext_fields == {"topic": "T"}


def test_ali_ons_scalar_ext_values_become_strings(impl):
    cmd = impl.decode_frame(frame(ALI_ONS))
    assert cmd.ext_fields == {"topic": "T", "n": "5", "b": "true", "f": "1.5"}


@pytest.mark.parametrize("value, text", [
    (b"0", "0"), (b"-7", "-7"), (b"12345678901234567890", "12345678901234567890"),
    (b"1e3", "1e3"), (b"-0.25", "-0.25"), (b"false", "false"), (b"true", "true"),
])
def test_number_and_boolean_ext_values_keep_their_text(impl, value, text):
    header = b'{"code":105,"flag":0,"opaque":1,"version":121,"extFields":{"v":' + value + b"}}"
    assert impl.decode_frame(frame(header)).ext_fields == {"v": text}


def test_null_ext_value_is_dropped(impl):
    header = b'{"code":105,"flag":0,"opaque":1,"version":121,"extFields":{"a":null,"b":"x"}}'
    assert impl.decode_frame(frame(header)).ext_fields == {"b": "x"}


def test_cpp_header_with_trailing_newline(impl):
    data = frame(CPP)
    assert int.from_bytes(data[4:8], "big") == len(CPP)     # the newline is counted
    cmd = impl.decode_frame(data)
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag) == (105, "CPP", 63, 0, 0)
    assert cmd.remark == ""
    assert cmd.ext_fields == {"AccessKey": "", "OnsChannel": "ALIYUN",
                              "Signature": "c2lnbg==", "topic": "T"}
    assert cmd.body == b""


@pytest.mark.parametrize("space", [b" ", b"\r\n", b"\t\n  ", b"\n\n"])
def test_whitespace_around_json_header(impl, space):
    assert impl.decode_frame(frame(space + GO + space)) == impl.decode_frame(frame(GO))


def test_cpp_header_followed_by_a_body(impl):
    cmd = impl.decode_frame(frame(CPP, body=b"{}"))
    assert cmd.body == b"{}" and cmd.language == "CPP"


@pytest.mark.parametrize("header", [GO, ALI_ONS_WIRE, CPP], ids=["go", "ali-ons", "cpp"])
def test_answers_set_the_response_bit(impl, header):
    request = impl.decode_frame(frame(header))
    answer = impl.decode_frame(impl.encode_frame(request.response(17, "no route")))
    assert answer.flag & 1 and answer.is_response
    assert answer.opaque == request.opaque
    assert answer.serialize_type == "JSON"


def test_interleaved_requests_on_one_connection(impl):
    # ali-ons keeps several requests in flight: they arrive back to back.
    stream = b"".join(frame(h) for h in (ALI_ONS_WIRE, GO, CPP, ALI_ONS))
    cmds = impl.FrameDecoder().feed(stream)
    assert [c.language for c in cmds] == ["JAVA", "GO", "CPP", "JAVA"]
    assert [c.version for c in cmds] == [121, 317, 63, 121]


def test_minimal_json_header_takes_defaults(impl):
    # Fields a client leaves out take Java's defaults (code, version, opaque and
    # flag 0, language JAVA); unknown fields are ignored.
    cmd = impl.decode_frame(frame(b"{}"))
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag) == (0, "JAVA", 0, 0, 0)
    assert cmd.remark is None and cmd.ext_fields is None
    cmd = impl.decode_frame(frame(b'{"code":105,"future":{"x":[1,null]},"language":null}'))
    assert (cmd.code, cmd.language, cmd.version) == (105, "JAVA", 0)
