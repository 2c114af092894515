"""Pure-Python reference of the hot body codecs.

Bodies are Java's JSON model as plain Python objects: dicts with Java's field
names, in Java's field order. The compiled core implements the same functions.

- ``json_loads``: JSON as Java's fastjson writes it, including the legacy
  form with unquoted integer map keys (``{0:"addr"}``); keys come back as str.
- ``json_dumps``: compact JSON in dict order; ``legacy=True`` writes int keys
  unquoted and non-ASCII as UTF-8 (fastjson's default), ``legacy=False`` quotes
  every key and escapes non-ASCII as \\uXXXX (Java's standard form).
- RegisterBrokerBody in JSON and in the compressed (zlib) form.
- TopicRouteData in both forms, fields in Java's order.
"""

from __future__ import annotations

import itertools
import json
import re
import zlib
from typing import TYPE_CHECKING, Any, NoReturn

from rmq._wire import (
    DEFAULT_MAX_INFLATED,
    INFLATE_CHUNK,
    MAX_INFLATE_RATIO,
    MIN_INFLATE_LIMIT,
    broker_data,
    decode_inflated,
    encode_compressed_body,
    inflate_limit,
)
from rmq.errors import BodyError
from rmq.protocol import MAX_JSON_DEPTH

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "json_loads", "json_dumps",
    "decode_register_broker_body", "encode_register_broker_body",
    "encode_topic_route_data",
    "DEFAULT_MAX_INFLATED", "MAX_INFLATE_RATIO", "MIN_INFLATE_LIMIT", "INFLATE_CHUNK",
]

# A JSON string (kept as is) or an unquoted integer key after '{' or ','.
_LEGACY_KEY = re.compile(r'("(?:[^"\\]|\\.)*")|([{,][ \t\n\r]*)(-?[0-9]+)([ \t\n\r]*:)')


def _quote_legacy_keys(text: str) -> str:
    return _LEGACY_KEY.sub(lambda m: m.group(1) or f'{m.group(2)}"{m.group(3)}"{m.group(4)}', text)


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def json_loads(data: Buffer) -> Any:
    """Parse a JSON body as Java writes it (legacy unquoted int keys allowed)."""
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise BodyError(f"JSON body is not valid UTF-8 at byte {e.start}") from None
    try:
        try:
            obj = json.loads(text, parse_constant=_reject_constant)
        except ValueError:
            try:
                obj = json.loads(_quote_legacy_keys(text), parse_constant=_reject_constant)
            except ValueError as e:
                raise BodyError(f"invalid JSON body: {e}") from None
    except RecursionError:
        obj = None
    else:
        # Deep nesting needs as many openers as levels: most bodies skip the scan.
        if text.count("{") + text.count("[") <= MAX_JSON_DEPTH or not _text_too_deep(text):
            return obj
    raise BodyError(f"invalid JSON body: nesting deeper than {MAX_JSON_DEPTH}")


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _text_too_deep(text: str) -> bool:
    # The text, not the parsed value: a later duplicate key may replace a deep value,
    # and the core's reader refuses the nesting as it reads it.
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(itertools.accumulate(map(_BRACKET_STEP.__getitem__, brackets)),
               default=0) > MAX_JSON_DEPTH


def _dumps_legacy(obj: Any, out: list[str]) -> None:
    if isinstance(obj, dict):
        out.append("{")
        first = True
        for k, v in obj.items():
            if not first:
                out.append(",")
            first = False
            if isinstance(k, int) and not isinstance(k, bool):
                out.append(str(k))
            elif isinstance(k, str):
                out.append(json.dumps(k, ensure_ascii=False))
            else:
                raise TypeError(f"JSON keys must be str or int, not {type(k).__name__}")
            out.append(":")
            _dumps_legacy(v, out)
        out.append("}")
    elif isinstance(obj, (list, tuple)):
        out.append("[")
        for i, v in enumerate(obj):
            if i:
                out.append(",")
            _dumps_legacy(v, out)
        out.append("]")
    else:
        out.append(json.dumps(obj, ensure_ascii=False, allow_nan=False))


def json_dumps(obj: Any, legacy: bool = False) -> bytes:
    """Compact JSON bytes of ``obj`` in dict order (see module doc for the forms)."""
    try:
        if legacy:
            out: list[str] = []
            _dumps_legacy(obj, out)
            return "".join(out).encode("utf-8", "replace")   # a lone surrogate: '?', as Java
        return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("ascii")
    except (TypeError, ValueError, RecursionError) as e:
        raise BodyError(f"cannot encode body: {e}") from None


# ---------------------------------------------------------------- RegisterBrokerBody

def _is_zlib(data: bytes) -> bool:
    return len(data) >= 2 and data[0] & 0x0F == 8 and ((data[0] << 8) | data[1]) % 31 == 0


def _inflate(data: bytes, max_inflated: int) -> bytes:
    # In chunks, so that a bomb is refused having cost at most the limit (one call
    # with the limit as max_length would hold the inflated bytes twice).
    max_inflated = inflate_limit(len(data), max_inflated)
    d = zlib.decompressobj()
    chunks = []
    total = 0
    pending = data
    try:
        while True:
            out = d.decompress(pending, INFLATE_CHUNK)
            total += len(out)
            if total > max_inflated:
                raise BodyError(f"compressed body of {len(data)} bytes inflates beyond "
                                f"{max_inflated} bytes (at most {MAX_INFLATE_RATIO} times "
                                f"its size, {DEFAULT_MAX_INFLATED} in all by default)")
            chunks.append(out)
            pending = d.unconsumed_tail
            if d.eof or not (pending or len(out) == INFLATE_CHUNK):
                break
    except zlib.error as e:
        raise BodyError(f"compressed body does not inflate: {e}") from None
    if not d.eof:
        raise BodyError(f"compressed body is truncated ({len(data)} bytes)")
    return b"".join(chunks)


def _decode_compressed(data: bytes, max_inflated: int) -> dict[str, Any]:
    return decode_inflated(json_loads, _inflate(data, max_inflated))


def decode_register_broker_body(data: Buffer, max_inflated: int = DEFAULT_MAX_INFLATED
                                ) -> dict[str, Any]:
    """Decode a RegisterBrokerBody, JSON or zlib-compressed (told apart by content:
    5.x brokers may send a compressed body while the header says otherwise)."""
    raw = bytes(data)
    if _is_zlib(raw):
        return _decode_compressed(raw, max_inflated)
    body = json_loads(raw)
    if not isinstance(body, dict):
        raise BodyError(f"RegisterBrokerBody is not a JSON object: {type(body).__name__}")
    return body


def encode_register_broker_body(body: dict[str, Any], compressed: bool = False) -> bytes:
    """Encode a RegisterBrokerBody dict: JSON as given, or Java's compressed form."""
    return encode_compressed_body(body, json_dumps) if compressed else json_dumps(body)


# ---------------------------------------------------------------- TopicRouteData

def _queue_data(qd: dict[str, Any]) -> dict[str, Any]:
    # Before 4.9.0 Java spelled it topicSynFlag.
    return {"brokerName": qd.get("brokerName"), "perm": qd.get("perm", 6),
            "readQueueNums": qd.get("readQueueNums", 0),
            "topicSysFlag": qd.get("topicSysFlag", qd.get("topicSynFlag", 0)),
            "writeQueueNums": qd.get("writeQueueNums", 0)}


def encode_topic_route_data(route: dict[str, Any], legacy: bool = False) -> bytes:
    """TopicRouteData in Java's field order; ``legacy`` selects the old JSON form."""
    out: dict[str, Any] = {"brokerDatas": [broker_data(bd) for bd in route.get("brokerDatas") or ()]}
    fst = route.get("filterServerTable") or {}
    out["filterServerTable"] = fst if legacy else dict(sorted(fst.items()))
    if route.get("orderTopicConf") is not None:
        out["orderTopicConf"] = route["orderTopicConf"]
    out["queueDatas"] = [_queue_data(qd) for qd in route.get("queueDatas") or ()]
    if route.get("topicQueueMappingByBroker") is not None:
        out["topicQueueMappingByBroker"] = route["topicQueueMappingByBroker"]
    return json_dumps(out, legacy=legacy)
