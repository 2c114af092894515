"""Pure-Python reference of the remoting frame codec.

Same contract as the compiled ``rmq._core``; the test-suite runs on both and
compares them (differential tests). Clarity first: this is the reference.

Frame:  int32 length | int32 (serializeType << 24 | headerLen) | header | body
"""

from __future__ import annotations

import itertools
import json
import struct
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from rmq._wire import ext_str, language_byte, rebuild_command
from rmq.errors import CorruptFrame, FrameTooLarge, HeaderError, ProtocolError, UnknownSerializeType
from rmq._wire import nesting_exceeds
from rmq.protocol import (
    CURRENT_VERSION,
    DEFAULT_MAX_FRAME_LENGTH,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LANGUAGES,
    MAX_JSON_DEPTH,
    SERIALIZE_TYPES,
)

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["RemotingCommand", "decode_frame", "encode_frame", "FrameDecoder"]

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_BINARY_FIXED = struct.Struct(">hBhiii")  # code, language, version, opaque, flag, remarkLen
_opaque_counter = itertools.count()


def _next_opaque() -> int:
    # Java's RemotingCommand.requestId: a process-wide counter, wrapping as int32.
    n = next(_opaque_counter) & 0xFFFFFFFF
    return n - (1 << 32) if n > _INT32_MAX else n


class RemotingCommand:
    """One remoting command: a request or a response, with header and body."""

    __slots__ = ("code", "language", "version", "opaque", "flag", "remark",
                 "ext_fields", "body", "serialize_type")

    code: int
    language: str
    version: int
    opaque: int
    flag: int
    remark: str | None
    ext_fields: dict[str, str] | None
    body: bytes | memoryview
    serialize_type: str

    def __init__(self, code: int = 0, *, language: str = "JAVA", version: int = CURRENT_VERSION,
                 opaque: int = 0, flag: int = 0, remark: str | None = None,
                 ext_fields: dict[str, str] | None = None, body: bytes = b"",
                 serialize_type: str = "JSON") -> None:
        self.code = code
        self.language = language
        self.version = version
        self.opaque = opaque
        self.flag = flag
        self.remark = remark
        self.ext_fields = ext_fields
        self.body = body
        self.serialize_type = serialize_type

    @classmethod
    def request(cls, code: int, ext_fields: dict[str, str] | None = None, body: Buffer = b"", *,
                oneway: bool = False, opaque: int | None = None, serialize_type: str = "JSON",
                language: str = "JAVA", version: int = CURRENT_VERSION) -> RemotingCommand:
        """A request with the next process-wide opaque (unless one is given)."""
        return cls(code, language=language, version=version,
                   opaque=_next_opaque() if opaque is None else opaque,
                   flag=FLAG_ONEWAY if oneway else 0, ext_fields=ext_fields,
                   body=bytes(body), serialize_type=serialize_type)

    def response(self, code: int = 0, remark: str | None = None,
                 ext_fields: dict[str, str] | None = None, body: Buffer = b"", *,
                 version: int = CURRENT_VERSION) -> RemotingCommand:
        """The answer to this request: same opaque and serialize type, response bit set."""
        return type(self)(code, language="JAVA", version=version, opaque=self.opaque,
                          flag=FLAG_RESPONSE, remark=remark, ext_fields=ext_fields,
                          body=bytes(body), serialize_type=self.serialize_type)

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RemotingCommand) and type(other).__name__ != "RemotingCommand":
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (_rebuild_command, tuple(getattr(self, f) for f in self.__slots__))

    def __repr__(self) -> str:
        kind = "response" if self.flag & FLAG_RESPONSE else "request"
        return (f"<RemotingCommand {kind} code={self.code} opaque={self.opaque} flag={self.flag} "
                f"language={self.language} version={self.version} remark={self.remark!r} "
                f"ext_fields={self.ext_fields!r} body={len(self.body)}B {self.serialize_type}>")


_rebuild_command = partial(rebuild_command, RemotingCommand)


# ---------------------------------------------------------------- decoding

class _RawNumber(str):
    """A JSON number kept as its source text (ext values keep Java's string form)."""


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its (key, value) pairs in order: duplicate fields are
    applied one after the other, as a streaming reader (and Java's) sees them."""


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def _is_text(v: object) -> bool:
    return isinstance(v, str) and not isinstance(v, _RawNumber)


def _header_int(key: str, v: object) -> int:
    if not isinstance(v, _RawNumber):
        raise HeaderError(f"header field {key!r} is not an integer: {_brief(v)}")
    try:
        n = int(v)
    except ValueError:
        raise HeaderError(f"header field {key!r} is not an integer: {v!s:.80}") from None
    if not _INT32_MIN <= n <= _INT32_MAX:
        raise HeaderError(f"header field {key!r} out of int32 range: {n}")
    return n


def _brief(v: object) -> str:
    # Never repr a whole parsed value: it may be nested hundreds deep or megabytes long.
    if isinstance(v, _Pairs):
        return f"an object of {len(v)} fields"
    if isinstance(v, list):
        return f"an array of {len(v)} items"
    return f"{v!r:.80}"


def _ext_fields(pairs: object) -> dict[str, str] | None:
    if pairs is None:
        return None
    if not isinstance(pairs, _Pairs):
        raise HeaderError(f"header field 'extFields' is not an object: {_brief(pairs)}")
    ext: dict[str, str] = {}
    for k, v in pairs:
        if v is None:           # Java drops null values
            ext.pop(k, None)
        elif isinstance(v, str):        # str and _RawNumber: numbers keep their text
            ext[k] = str(v)
        elif isinstance(v, bool):
            ext[k] = "true" if v else "false"
        else:
            raise HeaderError(f"ext field {k!r} has a non-scalar value: {_brief(v)}")
    return ext


def _decode_json_header(data: Buffer) -> RemotingCommand:
    try:
        obj = json.loads(bytes(data).decode("utf-8"), parse_int=_RawNumber,
                         parse_float=_RawNumber, parse_constant=_reject_constant,
                         object_pairs_hook=_Pairs)
    except UnicodeDecodeError as e:
        raise HeaderError(f"JSON header is not valid UTF-8 at byte {e.start}") from None
    except ValueError as e:
        raise HeaderError(f"invalid JSON header: {e}") from None
    except RecursionError:
        raise HeaderError("invalid JSON header: nesting too deep") from None
    if not isinstance(obj, _Pairs):
        raise HeaderError(f"JSON header is not an object: {type(obj).__name__}")
    cmd = RemotingCommand(0, version=0, serialize_type="JSON")
    for key, v in obj:
        if isinstance(v, list) and nesting_exceeds(v):
            raise HeaderError(f"invalid JSON header: field {key!r} nests deeper than "
                              f"{MAX_JSON_DEPTH}")
        if key in ("code", "version", "opaque", "flag"):
            if v is not None:       # null keeps the value so far, as the core's reader
                setattr(cmd, key, _header_int(key, v))
        elif key == "language":
            if v is not None and not _is_text(v):
                raise HeaderError(f"header field 'language' is not a string: {_brief(v)}")
            cmd.language = "JAVA" if v is None else v
        elif key == "remark":
            if v is not None and not _is_text(v):
                raise HeaderError(f"header field 'remark' is not a string: {_brief(v)}")
            cmd.remark = v
        elif key == "extFields":
            cmd.ext_fields = _ext_fields(v)
    return cmd


def _utf8(data: Buffer, what: str) -> str:
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise HeaderError(f"{what} is not valid UTF-8 at byte {e.start}") from None


def _decode_binary_header(view: Buffer) -> RemotingCommand:
    data = bytes(view)
    n = len(data)
    if n < 21:
        raise HeaderError(f"ROCKETMQ header truncated: {n} bytes, the fixed part is 21")
    code, lang, version, opaque, flag, remark_len = _BINARY_FIXED.unpack_from(data, 0)
    pos = 17
    if remark_len < 0 or remark_len > n - pos - 4:
        raise HeaderError(f"ROCKETMQ header remark length {remark_len} exceeds the header ({n} bytes)")
    remark = _utf8(data[pos:pos + remark_len], "remark") if remark_len else None
    pos += remark_len
    (ext_len,) = struct.unpack_from(">i", data, pos)
    pos += 4
    if ext_len < 0 or ext_len > n - pos:
        raise HeaderError(f"ROCKETMQ header ext length {ext_len} exceeds the header ({n} bytes)")
    ext: dict[str, str] | None = None
    if ext_len:
        ext = {}
        end = pos + ext_len
        while pos < end:
            if end - pos < 2:
                raise HeaderError(f"ROCKETMQ ext field truncated at byte {pos}")
            (klen,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if klen < 0 or klen > end - pos - 4:
                raise HeaderError(f"ROCKETMQ ext key length {klen} exceeds the ext fields")
            key = _utf8(data[pos:pos + klen], "ext key")
            pos += klen
            (vlen,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if vlen < 0 or vlen > end - pos:
                raise HeaderError(f"ROCKETMQ ext value length {vlen} exceeds the ext fields")
            ext[key] = _utf8(data[pos:pos + vlen], "ext value")
            pos += vlen
    language = LANGUAGES[lang] if lang < len(LANGUAGES) else str(lang)
    return RemotingCommand(code, language=language, version=version, opaque=opaque, flag=flag,
                           remark=remark, ext_fields=ext, serialize_type="ROCKETMQ")


def _decode_payload(mv: memoryview, length: int, copy_body: bool = True) -> RemotingCommand:
    """Decode one frame from ``mv`` = everything after the length prefix."""
    if length < 4:
        raise CorruptFrame(f"frame length {length} is shorter than the 4-byte header length field")
    word = int.from_bytes(mv[0:4], "big")
    stype = word >> 24
    header_len = word & 0xFFFFFF
    if header_len > length - 4:
        raise CorruptFrame(f"header length {header_len} exceeds the frame ({length - 4} bytes after it)")
    header = mv[4:4 + header_len]
    if stype == 0:
        cmd = _decode_json_header(header)
    elif stype == 1:
        cmd = _decode_binary_header(header)
    else:
        raise UnknownSerializeType(f"unknown serialize type {stype} (0 is JSON, 1 is ROCKETMQ)")
    body = mv[4 + header_len:length]
    cmd.body = bytes(body) if copy_body or not body else body.toreadonly()
    return cmd


def _check_length(length: int, max_frame_length: int) -> None:
    if length < 0:
        raise CorruptFrame(f"negative frame length {length}")
    if length + 4 > max_frame_length:
        raise FrameTooLarge(f"frame of {length + 4} bytes exceeds the maximum of {max_frame_length}")


def decode_frame(data: Buffer, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH, *,
                 copy_body: bool = True) -> RemotingCommand:
    """Decode one complete frame, 4-byte length prefix included. Without ``copy_body``
    a body is a read-only memoryview of ``data`` rather than a copy (a registration's
    megabytes read where they arrived; ``data`` must not change while it is used)."""
    mv = memoryview(data).cast("B")
    if len(mv) < 8:
        raise CorruptFrame(f"frame of {len(mv)} bytes is shorter than the 8-byte minimum")
    length = int.from_bytes(mv[0:4], "big", signed=True)
    _check_length(length, max_frame_length)
    if length != len(mv) - 4:
        raise CorruptFrame(f"frame length {length} does not match the {len(mv) - 4} bytes after it")
    return _decode_payload(mv[4:], length, copy_body)


# ---------------------------------------------------------------- encoding

def _check_int32(name: str, v: object) -> None:
    if not isinstance(v, int) or not _INT32_MIN <= v <= _INT32_MAX:
        raise ProtocolError(f"{name} must be an int32, got {v!r}")


def _json_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _check_text(name: str, v: object, optional: bool) -> None:
    if not (isinstance(v, str) or (optional and v is None)):
        raise ProtocolError(f"{name} must be a string, got {type(v).__name__}")


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    # Java (fastjson) writes bean fields in alphabetical order and omits nulls.
    parts = ['{"code":', str(cmd.code)]
    if cmd.ext_fields is not None:
        parts.append(',"extFields":{')
        parts.append(",".join(f"{_json_str(k)}:{_json_str(v)}"
                              for k, v in ((k, ext_str(k, v)) for k, v in cmd.ext_fields.items())))
        parts.append("}")
    parts += [',"flag":', str(cmd.flag), ',"language":', _json_str(cmd.language),
              ',"opaque":', str(cmd.opaque)]
    if cmd.remark is not None:
        parts += [',"remark":', _json_str(cmd.remark)]
    parts += [',"serializeTypeCurrentRPC":"JSON","version":', str(cmd.version), "}"]
    return _java_utf8("".join(parts))


def _java_utf8(s: str) -> bytes:
    # Java's UTF-8 encoder writes '?' for a lone surrogate.
    return s.encode("utf-8", "replace")


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    if not -32768 <= cmd.code <= 32767:
        raise ProtocolError(f"code {cmd.code} does not fit the int16 of a ROCKETMQ header")
    if not -32768 <= cmd.version <= 32767:
        raise ProtocolError(f"version {cmd.version} does not fit the int16 of a ROCKETMQ header")
    remark = _java_utf8(cmd.remark) if cmd.remark else b""
    ext = bytearray()
    if cmd.ext_fields:
        for k, v in cmd.ext_fields.items():
            vb = _java_utf8(ext_str(k, v))
            kb = _java_utf8(k)
            if len(kb) > 32767:
                raise ProtocolError(f"ext key of {len(kb)} bytes does not fit an int16 length")
            ext += struct.pack(">h", len(kb)) + kb + struct.pack(">i", len(vb)) + vb
    return b"".join((
        _BINARY_FIXED.pack(cmd.code, language_byte(cmd.language), cmd.version,
                           cmd.opaque, cmd.flag, len(remark)),
        remark, struct.pack(">i", len(ext)), bytes(ext)))


def encode_frame(cmd: RemotingCommand) -> bytes:
    """Encode ``cmd`` as a complete frame in its own serialize type."""
    return b"".join((encode_frame_head(cmd), cmd.body or b""))


def encode_frame_head(cmd: RemotingCommand) -> bytes:
    """The head of ``cmd``'s frame: ``encode_frame(cmd)`` less ``cmd.body``, which
    follows it on the wire as it is (the head's lengths count it). For a writer that
    copies a big body once, where it writes from, not into a frame first."""
    _check_int32("code", cmd.code)
    _check_int32("version", cmd.version)
    _check_int32("opaque", cmd.opaque)
    _check_int32("flag", cmd.flag)
    _check_text("language", cmd.language, False)
    _check_text("remark", cmd.remark, True)
    if cmd.serialize_type == "JSON":
        header, stype = _encode_json_header(cmd), 0
    elif cmd.serialize_type == "ROCKETMQ":
        header, stype = _encode_binary_header(cmd), 1
    else:
        raise UnknownSerializeType(f"unknown serialize type {cmd.serialize_type!r} "
                                   f"(expected one of {SERIALIZE_TYPES})")
    if len(header) > 0xFFFFFF:
        raise ProtocolError(f"header of {len(header)} bytes exceeds the 24-bit header length")
    length = 4 + len(header) + len(cmd.body or b"")
    if length > _INT32_MAX - 4:
        raise ProtocolError(f"frame of {length} bytes does not fit the int32 length field")
    return struct.pack(">ii", length, (stype << 24) | len(header)) + header


# ---------------------------------------------------------------- streaming

class _FrameStream:
    """A byte stream cut at frame boundaries: ``feed`` returns ``_frame(buf, start,
    length)`` for each frame it completes. After an error the stream is unusable
    and every later ``feed`` raises again."""

    _what: ClassVar[str] = "stream"

    def __init__(self, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH) -> None:
        if max_frame_length < 8:
            raise ValueError(f"max_frame_length must be at least 8, got {max_frame_length}")
        self.max_frame_length = max_frame_length
        self._buf = bytearray()
        self._error: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete."""
        return len(self._buf)

    if TYPE_CHECKING:
        @staticmethod
        def _frame(buf: bytearray, pos: int, length: int) -> Any: ...

    def feed(self, data: Buffer) -> list[Any]:
        """Add bytes from the stream; returns what the frames completed by them give."""
        if self._error is not None:
            raise type(self._error)(f"{self._what} failed earlier: {self._error}")
        self._buf += data
        buf = self._buf
        out: list[Any] = []
        pos = 0
        try:
            while len(buf) - pos >= 4:
                length = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
                _check_length(length, self.max_frame_length)
                if len(buf) - pos - 4 < length:
                    break
                out.append(self._frame(buf, pos, length))
                pos += 4 + length
        except ProtocolError as e:
            self._error = e
            del buf[:]
            e.decoded = out
            raise
        del buf[:pos]
        return out


class FrameDecoder(_FrameStream):
    """Splits a byte stream into commands; any chunking gives the same commands.

    After an error the stream is unusable (the server closes the connection),
    and every later ``feed`` raises again.
    """

    _what = "decoder"

    if TYPE_CHECKING:
        def feed(self, data: Buffer) -> list[RemotingCommand]: ...

    @staticmethod
    def _frame(buf: bytearray, pos: int, length: int) -> RemotingCommand:
        return _decode_payload(memoryview(bytes(buf[pos + 4:pos + 4 + length])), length)


class FrameSplitter(_FrameStream):
    """Splits a byte stream into whole frames (bytes, 4-byte length prefix
    included) without decoding them: what a trace records. Any chunking gives the
    same frames; the length checks and errors are FrameDecoder's, and after an
    error every later ``feed`` raises again."""

    _what = "splitter"

    if TYPE_CHECKING:
        def feed(self, data: Buffer) -> list[bytes]: ...

    @staticmethod
    def _frame(buf: bytearray, pos: int, length: int) -> bytes:
        return bytes(buf[pos:pos + 4 + length])
