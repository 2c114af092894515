"""Wire rules the compiled core and the pure-Python twin share (as msgpack's
``_unpacker.pyx`` and ``fallback.py`` share ``ext``): code that gains nothing from
being compiled. rmq.protocol holds the constants, this module the code both run;
it imports only rmq.errors, rmq.protocol, rmq.javacase and the standard library."""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from rmq.errors import BodyError, ProtocolError, UnknownSerializeType
from rmq.javacase import fold, is_blank, parse_boolean
from rmq.protocol import LANGUAGE_CODES, MAX_JSON_DEPTH, SERIALIZE_TYPES, V4_9_4, ResponseCode

_T = TypeVar("_T")

# A compressed RegisterBrokerBody inflates to at most DEFAULT_MAX_INFLATED bytes and
# at most MAX_INFLATE_RATIO times its own size (never below MIN_INFLATE_LIMIT): real
# topic tables compress far less than a bomb (bench/README.md); the inflated bytes are
# the peak a bomb can cost before it is refused.
DEFAULT_MAX_INFLATED = 64 * 1024 * 1024
MAX_INFLATE_RATIO = 64
MIN_INFLATE_LIMIT = 1024 * 1024
INFLATE_CHUNK = 1024 * 1024
#: The first buffer for an inflated body, in times its compressed size: room for a
#: real topic table's ratio (bench/README.md, "Figures quoted by the code"), so that
#: it is rarely grown.
INFLATE_FIRST_GUESS = 20


def nesting_exceeds(value: object, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when containers nest deeper than ``limit`` in ``value`` (each dict or list
    counts one level; a (key, value) pair tuple is transparent)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, tuple):
            stack.append((v[1], depth))
            continue
        children: Iterable[object]
        if isinstance(v, dict):
            children = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list, tuple)))
    return False


def inflate_limit(size: int, max_inflated: int) -> int:
    """The most a compressed body of ``size`` bytes may inflate to."""
    return min(max_inflated, max(MIN_INFLATE_LIMIT, MAX_INFLATE_RATIO * size))


def rebuild_command(cls: Callable[..., _T], code: int, language: str, version: int, opaque: int,
                    flag: int, remark: str | None, ext_fields: dict[str, str] | None, body: bytes,
                    stype: str) -> _T:
    """Unpickles a RemotingCommand of either implementation (its ``__reduce__``)."""
    return cls(code, language=language, version=version, opaque=opaque, flag=flag,
               remark=remark, ext_fields=ext_fields, body=body, serialize_type=stype)


def ext_str(key: object, v: object) -> str:
    """An ext field's value as Java's header carries it: strings, booleans, ints."""
    if not isinstance(key, str):
        raise ProtocolError(f"ext field names must be strings, got {key!r}")
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    raise ProtocolError(f"ext field {key!r} must be a string, got {type(v).__name__}")


def standard_route_form(cmd: Any) -> bool:
    """Whether a route query gets the standard JSON form: from V4_9_4 on, or when it
    asks (acceptStandardJsonOnly=true); else the legacy one."""
    accept: str = (cmd.ext_fields or {}).get("acceptStandardJsonOnly", "")
    return bool(cmd.version >= V4_9_4 or accept.lower() == "true")


#: The ext fields of a zone-mode route query (MixAll.ZONE_MODE, MixAll.ZONE_NAME).
ZONE_MODE = "__ZONE_MODE"
ZONE_NAME = "__ZONE_NAME"


def route_zone(cmd: Any) -> str | None:
    """The zone a route query's answer is filtered by, folded (rmq.javacase.fold), or
    None: Java 5.0.0's ZoneRouteRPCHook filters when ``__ZONE_MODE`` parses as true
    and ``__ZONE_NAME`` is not blank (a zone name alone filters nothing)."""
    ext = cmd.ext_fields or {}
    if not parse_boolean(ext.get(ZONE_MODE)):
        return None
    zone: str | None = ext.get(ZONE_NAME)
    return None if zone is None or is_blank(zone) else fold(zone)


#: TOPIC_NOT_EXIST's remark around the topic (DefaultRequestProcessor /
#: ClientRequestProcessor.getRouteInfoByTopic, FAQUrl.suggestTodo(APPLY_TOPIC_URL));
#: scan.c writes the same bytes.
_NOT_FOUND_PREFIX = "No topic route info in name server for the topic: "
_NOT_FOUND_SUFFIX = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def topic_not_exist(cmd: Any, topic: str) -> Any:
    """The answer to route query ``cmd`` for a ``topic`` without a route: TOPIC_NOT_EXIST
    (17) with Java's remark."""
    return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                        _NOT_FOUND_PREFIX + topic + _NOT_FOUND_SUFFIX)


def serialize_type_code(name: object) -> int:
    """A serialize type's code (the top byte of the header-length word) from its name;
    UnknownSerializeType naming it when it is neither JSON nor ROCKETMQ."""
    if name not in SERIALIZE_TYPES:
        raise UnknownSerializeType(f"unknown serialize type {name!r} "
                                   f"(expected one of {SERIALIZE_TYPES})")
    return SERIALIZE_TYPES.index(name)


def language_byte(language: str) -> int:
    """The ROCKETMQ header's language byte: a known name, a number below 256, else OTHER."""
    code = LANGUAGE_CODES.get(language)
    if code is not None:
        return code
    if language.isascii() and language.isdigit() and int(language) < 256:
        return int(language)
    return LANGUAGE_CODES["OTHER"]


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def int32(self, what: str) -> int:
        if len(self.data) - self.pos < 4:
            raise BodyError(f"compressed body truncated reading {what} at byte {self.pos}")
        v: int
        (v,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return v

    def chunk(self, what: str) -> bytes:
        n = self.int32(what + " length")
        if n < 0 or n > len(self.data) - self.pos:
            raise BodyError(f"compressed body: {what} length {n} exceeds the "
                            f"{len(self.data) - self.pos} bytes left")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b


def _parse_int(s: str, what: str) -> int:
    # Java's Integer.parseInt: optional sign, digits only, int32.
    if not re.fullmatch(r"[+-]?[0-9]+", s):
        raise BodyError(f"compressed topic config: {what} is not an integer: {s!r}")
    v = int(s)
    if not -(1 << 31) <= v < (1 << 31):
        raise BodyError(f"compressed topic config: {what} out of int32 range: {s}")
    return v


def _decode_topic_config_line(loads: Callable[[bytes], Any], raw: bytes) -> dict[str, Any]:
    # TopicConfig.decode: "name readQ writeQ perm filterType [attributesJSON]".
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BodyError(f"compressed topic config is not valid UTF-8: {raw[:64]!r}") from None
    parts = line.split(" ")
    while parts and parts[-1] == "":    # Java's String.split drops trailing empty fields
        parts.pop()
    if len(parts) < 5:
        raise BodyError(f"compressed topic config has {len(parts)} fields, needs 5: {line[:100]!r}")
    tc: dict[str, Any] = {}
    if len(parts) >= 6:
        attrs = loads(parts[5].encode("utf-8"))
        if not isinstance(attrs, dict):
            raise BodyError(f"compressed topic config attributes are not an object: {parts[5][:100]!r}")
        tc["attributes"] = attrs
    tc["order"] = False
    tc["perm"] = _parse_int(parts[3], "perm")
    tc["readQueueNums"] = _parse_int(parts[1], "readQueueNums")
    tc["topicFilterType"] = parts[4]
    tc["topicName"] = parts[0]
    tc["topicSysFlag"] = 0
    tc["writeQueueNums"] = _parse_int(parts[2], "writeQueueNums")
    return tc


def decode_inflated(loads: Callable[[bytes], Any], raw: bytes) -> dict[str, Any]:
    """A compressed RegisterBrokerBody's inflated bytes, read with the calling
    implementation's JSON reader (the general path: the scanners take the common case)."""
    r = _Reader(raw)
    wrapper = {"dataVersion": loads(r.chunk("dataVersion"))}
    n = r.int32("topic count")
    if n < 0 or n > (len(r.data) - r.pos) // 4:
        raise BodyError(f"compressed body: topic count {n} exceeds what the body can hold")
    table: dict[str, Any] = {}
    for _ in range(n):
        tc = _decode_topic_config_line(loads, r.chunk("topic config"))
        table[tc["topicName"]] = tc
    wrapper["topicConfigTable"] = table
    filter_servers = loads(r.chunk("filterServerList"))
    if len(r.data) - r.pos >= 4:        # 5.x brokers append topic queue mappings
        m = r.int32("mapping count")
        if m < 0 or m > (len(r.data) - r.pos) // 4:
            raise BodyError(f"compressed body: mapping count {m} exceeds what the body can hold")
        mappings: dict[str, Any] = {}
        for _ in range(m):
            info = loads(r.chunk("topic queue mapping"))
            if not isinstance(info, dict):
                raise BodyError("compressed body: topic queue mapping is not an object")
            topic = info.get("topic")
            if not isinstance(topic, str):    # Java: put(null, ...) fails the registration
                raise BodyError(f"compressed body: topic queue mapping topic is not a string: "
                                f"{topic!r:.80}")
            mappings[topic] = info
        wrapper["topicQueueMappingInfoMap"] = mappings
    return {"filterServerList": filter_servers, "topicConfigSerializeWrapper": wrapper}


def _chunk(b: bytes) -> tuple[bytes, bytes]:
    return struct.pack(">i", len(b)), b


def encode_compressed_body(body: Mapping[str, Any], json_dumps: Callable[..., bytes]) -> bytes:
    """Java's compressed RegisterBrokerBody (zlib over length-prefixed chunks), with the
    calling implementation's ``json_dumps`` for the JSON pieces."""
    wrapper = body.get("topicConfigSerializeWrapper") or {}
    table = wrapper.get("topicConfigTable") or {}
    out = [*_chunk(json_dumps(wrapper.get("dataVersion") or {})), struct.pack(">i", len(table))]
    for tc in table.values():
        line = " ".join((str(tc["topicName"]), str(tc.get("readQueueNums", 16)),
                         str(tc.get("writeQueueNums", 16)), str(tc.get("perm", 6)),
                         str(tc.get("topicFilterType", "SINGLE_TAG"))))
        if tc.get("attributes") is not None:
            line += " " + json_dumps(tc["attributes"], legacy=True).decode("utf-8")
        out += _chunk(line.encode("utf-8"))
    out += _chunk(json_dumps(body.get("filterServerList") or [], legacy=True))
    mappings = wrapper.get("topicQueueMappingInfoMap")
    if mappings is not None:
        out.append(struct.pack(">i", len(mappings)))
        for info in mappings.values():
            out += _chunk(json_dumps(info, legacy=True))
    return zlib.compress(b"".join(out), 9)


def broker_data(bd: Mapping[str, Any]) -> dict[str, Any]:
    """A BrokerData dict as Java writes it: field order, and the 5.x fields only
    when present (enableActingMaster) or set (zoneName). ClusterInfo (rmq.bodies)
    and the pure TopicRouteData encoder use it; _core's wb_broker_data is its
    compiled twin."""
    # Both forms list broker ids in ascending order: the standard form sorts map
    # keys (MapSortField), and Java's HashMap<Long> iterates small ids in order.
    addrs = sorted(((int(k), v) for k, v in (bd.get("brokerAddrs") or {}).items()),
                   key=lambda kv: kv[0])
    out: dict[str, Any] = {"brokerAddrs": dict(addrs), "brokerName": bd.get("brokerName"),
                           "cluster": bd.get("cluster")}
    if "enableActingMaster" in bd:
        out["enableActingMaster"] = bool(bd["enableActingMaster"])
    if bd.get("zoneName") is not None:
        out["zoneName"] = bd["zoneName"]
    return out
