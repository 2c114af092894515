"""Wire rules that the compiled core and the pure-Python twin share.

Only what gains nothing from being compiled lives here: both ``rmq._core``
(imported at module import) and ``rmq.fallback`` import it, as msgpack's
``_unpacker.pyx`` and ``fallback.py`` share ``ext``. Not ``rmq.protocol``: that
module holds the protocol's constants, this one the code both codecs run. It
imports nothing but rmq.errors, rmq.protocol and the standard library.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from rmq.errors import ProtocolError
from rmq.protocol import LANGUAGE_CODES

_T = TypeVar("_T")

#: Upper bound for an inflated compressed body: a bomb must not exhaust memory.
# A compressed RegisterBrokerBody inflates to at most DEFAULT_MAX_INFLATED bytes and
# at most MAX_INFLATE_RATIO times its own size (never below MIN_INFLATE_LIMIT): real
# topic tables compress far less than a bomb (bench/README.md); the inflated bytes are
# the peak a bomb can cost before it is refused.
DEFAULT_MAX_INFLATED = 64 * 1024 * 1024
MAX_INFLATE_RATIO = 64
MIN_INFLATE_LIMIT = 1024 * 1024
INFLATE_CHUNK = 1024 * 1024


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


def language_byte(language: str) -> int:
    """The ROCKETMQ header's language byte: a known name, a number below 256, else OTHER."""
    code = LANGUAGE_CODES.get(language)
    if code is not None:
        return code
    if language.isascii() and language.isdigit() and int(language) < 256:
        return int(language)
    return LANGUAGE_CODES["OTHER"]


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


def _sorted_addrs(addrs: Mapping[Any, Any]) -> dict[int, Any]:
    # Both forms list broker ids in ascending order: the standard form sorts map
    # keys (MapSortField), and Java's HashMap<Long> iterates small ids in order.
    return dict(sorted(((int(k), v) for k, v in addrs.items()), key=lambda kv: kv[0]))


def broker_data(bd: Mapping[str, Any], legacy: bool = False) -> dict[str, Any]:
    """A BrokerData dict as Java writes it: field order, and the 5.x fields only
    when present (enableActingMaster) or set (zoneName). ClusterInfo (rmq.bodies)
    and the pure TopicRouteData encoder use it; _core's wb_broker_data is its
    compiled twin."""
    out: dict[str, Any] = {"brokerAddrs": _sorted_addrs(bd.get("brokerAddrs") or {}),
                           "brokerName": bd.get("brokerName"), "cluster": bd.get("cluster")}
    if "enableActingMaster" in bd:
        out["enableActingMaster"] = bool(bd["enableActingMaster"])
    if bd.get("zoneName") is not None:
        out["zoneName"] = bd["zoneName"]
    return out
