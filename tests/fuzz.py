"""Differential fuzzing of rmq: the compiled core (rmq._core) against the pure-Python
reference (rmq.fallback), on frames, headers, bodies and the NameServer's serving path.

Invariants checked on every input:

- only rmq errors (rmq.errors.RmqError subclasses) leave a decoder; any other
  exception (TypeError, RecursionError, KeyError, UnicodeError, MemoryError...) is
  a finding, and so is one that DefaultRequestProcessor.handle catches and answers SYSTEM_ERROR;
- compiled and pure agree: the same result (types included) or the same error class;
- chunking never changes the result: a stream fed to FrameDecoder / FrameSplitter /
  the serving path in random chunks gives what feeding it whole gives.

Targets:

- ``frames``: streams of mutated captured frames (tests/vectors/java-4.9.8) and
  generated ones: decode_frame, FrameDecoder.feed, FrameSplitter.feed and
  RouteTable.serve_routes over a registered RouteTable, whole and in chunks.
- ``headers``: generated and mutated JSON headers (odd values: null, 1e300, 2**40,
  -0, booleans, nesting ~500-600 deep, duplicate keys, non-string keys, lone
  surrogates, invalid UTF-8) and ROCKETMQ binary headers (huge lengths,
  truncations, bit flips), through decode_frame.
- ``bodies``: json_loads, json_dumps of what decodes, decode_register_broker_body
  (JSON, zlib-compressed with 5.x topicQueueMappingInfoMap, mutated zlib streams;
  and the compiled scanner of it whole against it in cuts, as the engine scans a
  registration while it arrives)
  and rmq.bodies' decoders (TopicRouteData, ClusterInfo, KVTable, TopicList,
  DataVersion, BrokerMemberGroup) running on each core.
- ``engine`` (inside ``frames``): the same streams sent in the same chunks over TCP
  to rmq._core.Engine (two I/O threads and the control thread) on the compiled table, every frame it hands
  to Python answered as one frame at a time is (_answer: the core's serve path from
  what the table holds, else an echo; the connection closed at a frame that does not
  decode): the bytes that come back must be, exactly, what a frame-by-frame walk of
  the stream gives (the end at a bad length or a frame that does not decode, where
  the engine must close).
- ``handle``: a command sequence as one byte stream, served the way
  rmq.server serves a connection (RouteTable.serve_routes, then
  DefaultRequestProcessor.handle for the rest, answers encoded), by a NameServer on the compiled
  RouteTable and one on the reference RouteTable; the answers are compared, and
  then the tables through probes (106, 206, 224, 105 per topic, before and after
  the connection closes).

Every input is a pure function of (--seed, target, index): a run is reproducible and
--jobs only splits the indices. Each finding's reproducer (shrunk when
possible) goes to --out as JSON; ``--replay FILE`` runs one again.

    PYTHONPATH=src python tests/fuzz.py --count 100000 --jobs 2
    PYTHONPATH=src python tests/fuzz.py --target bodies --count 5000 --seed 7
    PYTHONPATH=src python tests/fuzz.py --replay build/fuzz/<finding>.json
"""

import argparse
import base64
import contextlib
import importlib.util
import json
import logging
import os
import random
import struct
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
try:                # the installed rmq, or the source tree's (built in place)
    import rmq
except ImportError:
    sys.path.insert(0, str(ROOT / "src"))
    import rmq

from rmq import _core as C  # both cores, side by side
from rmq import fallback as P
from rmq.errors import RmqError
from rmq.namesrv.routeinfo import RouteTable

TARGETS = ("frames", "headers", "bodies", "handle")
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

# ====================================================================== the two sides


def _module_copy(name, path, overrides):
    """A private copy of a module of rmq whose globals point at one core."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.__dict__.update(overrides)
    return mod


_BODIES_NAMES = ("json_loads", "json_dumps", "decode_register_broker_body",
                 "encode_register_broker_body", "encode_topic_route_data")
_RMQ = Path(rmq.__file__).resolve().parent
BODIES = {tag: _module_copy(f"_fuzz_bodies_{tag}", _RMQ / "bodies.py",
                            {n: getattr(core, n) for n in _BODIES_NAMES})
          for tag, core in (("c", C), ("py", P))}
#: rmq.namesrv.routeinfo.RouteTable over each core's topic-table storage.
ROUTE_TABLES = {tag: type("RouteTable", (RouteTable,), {"storage": core.TopicTable})
                for tag, core in (("c", C), ("py", P))}
NAMESRV = {tag: _module_copy(f"_fuzz_namesrv_{tag}", _RMQ / "namesrv" / "handlers.py",
                             {"bodies": BODIES[tag], "body_crc32": core.body_crc32,
                              "RouteTable": ROUTE_TABLES[tag]})
           for tag, core in (("c", C), ("py", P))}
CORES = {"c": C, "py": P}


# ====================================================================== outcomes


def canon(v):
    """A comparable form of a result that keeps types apart (1, 1.0, True; -0.0, 0.0)
    and dict order: a flat tuple of tokens, containers as (type, length) followed by
    their items. Flat, so that comparing and printing a value nested 10,000 deep needs
    no deep C stack (Python 3.12+ compares nested containers on the C stack, which
    sys.setrecursionlimit does not raise)."""
    out = []
    stack = [v]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is dict or isinstance(v, dict):
            out.append(("dict", len(v)))
            for k, x in reversed(list(v.items())):
                stack.append(x)
                stack.append(k)
        elif t is list or t is tuple:
            out.append((t.__name__, len(v)))
            stack.extend(reversed(v))
        elif t.__name__ == "RemotingCommand":
            out.append(("cmd", v.code, v.language, v.version, v.opaque, v.flag,
                        bytes(v.body) if v.body is not None else None, v.serialize_type))
            stack.append(v.ext_fields)
            stack.append(v.remark)
        elif t is float:
            out.append(("float", repr(v)))
        elif isinstance(v, BaseException):
            out.append(("exception", t.__name__))
        elif t in (bytes, bytearray, memoryview):
            out.append(("bytes", bytes(v)))
        elif t is str:
            out.append(v)
        else:
            out.append((t.__name__, v))
    return tuple(out)


def outcome(fn, *args):
    """("ok", canon(result)) / ("err", RmqError class name) / ("exc", other class, text)."""
    try:
        result = fn(*args)
    except RmqError as e:
        return ("err", type(e).__name__)
    except Exception as e:  # noqa: BLE001  (the finding, RecursionError and MemoryError too)
        return ("exc", type(e).__name__, _short(str(e)))
    return ("ok", canon(result))


def _short(s, n=160):
    return s if len(s) <= n else s[:n] + "..."


def _brief(o):
    """An outcome for a report: results shortened."""
    if o[0] != "ok":
        return list(o)
    return ["ok", _short(repr(o[1]), 300)]


class Finding(Exception):
    pass


def _cls(o):
    return o[1] if o[0] != "ok" else "ok"


def differential(fn_name, c_fn, p_fn, args):
    """Findings of one function on one input: non-rmq exceptions and disagreements."""
    oc, op = outcome(c_fn, *args), outcome(p_fn, *args)
    found = []
    raised = sorted({o[1] for o in (oc, op) if o[0] == "exc"})
    for name in raised:     # one finding per exception class, saying which side(s) raised it
        sides = "+".join(tag for tag, o in (("c", oc), ("py", op)) if o[:2] == ("exc", name))
        found.append(((fn_name, "exception", sides, name), {"c": _brief(oc), "py": _brief(op)}))
    if not found and oc != op:
        kind = "value" if oc[0] == op[0] == "ok" else f"{_cls(oc)}|{_cls(op)}"
        found.append(((fn_name, "disagree", kind), {"c": _brief(oc), "py": _brief(op)}))
    return found, oc, op


# ====================================================================== seeds


def _vectors_dir():
    for d in (os.environ.get("RMQ_VECTORS"), ROOT / "tests" / "vectors" / "java-4.9.8",
              ROOT.parent / "shared" / "vectors" / "java-4.9.8"):
        if d and (Path(d) / "index.json").is_file():
            return Path(d)
    raise SystemExit("fuzz: captured vectors not found (tests/vectors/java-4.9.8; set RMQ_VECTORS)")


def _split(frame):
    _, word = struct.unpack_from(">ii", frame)
    hl = word & 0xFFFFFF
    return word >> 24, frame[8:8 + hl], frame[8 + hl:]


def frame(header, stype=0, body=b""):
    return struct.pack(">ii", 4 + len(header) + len(body), (stype << 24) | len(header)) + \
        header + body


def _chunk(data):
    return struct.pack(">i", len(data)) + data


VDIR = _vectors_dir()
SEED_FRAMES = [p.read_bytes() for p in sorted(VDIR.glob("*.bin"))]
SEED_REQUESTS = [p.read_bytes() for p in sorted(VDIR.glob("*_request.bin"))]
SEED_JSON_HEADERS = [h for s, h, _ in map(_split, SEED_FRAMES) if s == 0]
SEED_BIN_HEADERS = [h for s, h, _ in map(_split, SEED_FRAMES) if s == 1]
REGISTER_BODY = _split((VDIR / "103_register_broker_request.bin").read_bytes())[2]
SEED_BODIES = {name: _split((VDIR / f).read_bytes())[2] for name, f in (
    ("route", "105_get_routeinfo_existing_response.bin"),
    ("cluster", "106_get_broker_cluster_info_response.bin"),
    ("kv", "219_get_kvlist_by_namespace_response.bin"),
    ("topics", "206_get_all_topic_list_from_nameserver_response.bin"),
    ("system", "304_get_system_topic_list_from_ns_response.bin"),
    ("order", "103_register_broker_rmq_response.bin"),
)}
SEED_BODIES["register"] = REGISTER_BODY
SEED_BODIES["dv"] = b'{"counter":3,"stateVersion":0,"timestamp":1700000000000}'
SEED_BODIES["group"] = (b'{"brokerMemberGroup":{"brokerAddrs":{0:"127.0.0.1:10911"},'
                        b'"brokerName":"broker-a","cluster":"DefaultCluster"}}')
REGISTER_TOPICS = list(json.loads(REGISTER_BODY)["topicConfigSerializeWrapper"]
                       ["topicConfigTable"])

COMPRESSED_INNER = b"".join([
    _chunk(b'{"counter":3,"stateVersion":0,"timestamp":1700000000000}'),
    struct.pack(">i", 2),
    _chunk(b'T 4 4 6 SINGLE_TAG {"+a":"b"}'),
    _chunk(b"U 8 8 7 MULTI_TAG"),
    _chunk(b'["127.0.0.1:1"]'),
    struct.pack(">i", 1),
    _chunk(b'{"topic":"T","bname":"broker-a","epoch":0,"totalQueues":4}'),
])


# ====================================================================== odd JSON

INTS = [0, 1, -1, 2, 4, 6, 7, 8, 16, 127, 128, 255, 256, 0x7FFF, 0x8000, 0xFFFF, 0xFFFFFF,
        INT32_MAX, INT32_MAX + 1, INT32_MIN, INT32_MIN - 1, 1 << 32, 1 << 40, 1 << 53,
        (1 << 63) - 1, 1 << 63, 1 << 64, -(1 << 63), 10 ** 19, 10 ** 300]
NUMBER_TEXT = ["-0", "0.0", "-0.0", "1e300", "-1e300", "1e400", "-1e400", "1e-400", "1E2",
               "1e+2", "1.5", "4.0", "2.5e-3", "1" + "0" * 400, "-" + "9" * 40, "123456789012"]
BAD_NUMBERS = ["01", "1.", ".5", "+1", "-", "1e", "0x10", "NaN", "Infinity", "-Infinity", "1_0"]
STRINGS = ["", "0", "5", "-1", "true", "false", "null", "T", "TopicTest", "broker-a",
           "DefaultCluster", "127.0.0.1:10911", "JAVA", "GO", "CPP", " 5", "+5", "05", "1e3",
           "\u00e9t\u00e9", "\u4e2d\u6587", "\U0001f600", "a b", "a;b:4", "x" * 300]
ESCAPED = ['"\\ud800"', '"\\udc00\\ud800"', '"a\\ud800b"', '"\\u0000"', '"\\u00e9"',
           '"\\"q\\""', '"\\\\"', '"\\/"', '"\\b\\f\\n\\r\\t"', '"\\uD83D\\uDE00"',
           '"\\u0063ode"', '"\\x41"', '"\\u12"', '"\\ud800\\u0041"']
RAW_BYTES = [b'"\xed\xa0\x80"', b'"\xff"', b'"\xc3"', b'"\xc0\x80"', b'"\xf4\x90\x80\x80"',
             b'"\xe2\x82"', b'"\x01"', b'"\x7f"', b'"a\nb"']
FIELD_NAMES = ["code", "flag", "opaque", "version", "language", "remark", "extFields",
               "serializeTypeCurrentRPC"]


def _s(text):
    return json.dumps(text, ensure_ascii=False)


def deep(rng, n=None, inner="1"):
    """A value nested ``n`` deep: arrays, objects or a mix (the interesting depths are
    around the core's limit of 512 and Python's recursion limit)."""
    if n is None:
        n = rng.choice([rng.randint(490, 620), rng.randint(505, 520), rng.randint(1, 40),
                       rng.randint(900, 1100), rng.randint(3000, 6000)])
    kind = rng.randrange(3)
    if kind == 0:
        return "[" * n + inner + "]" * n
    if kind == 1:
        return '{"a":' * n + inner + "}" * n
    return '[{"a":' * (n // 2) + inner + "}]" * (n // 2)


def odd_scalar(rng):
    r = rng.randrange(12)
    if r == 0:
        return rng.choice(["null", "true", "false"])
    if r <= 2:
        return str(rng.choice(INTS) * rng.choice([1, 1, -1]))
    if r == 3:
        return rng.choice(NUMBER_TEXT)
    if r <= 6:
        return _s(rng.choice(STRINGS))
    if r == 7:
        return rng.choice(ESCAPED)
    if r == 8:
        return _s("".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(rng.randrange(6))))
    if r == 9:
        return str(rng.randint(-10 ** 6, 10 ** 6))
    if r == 10:
        return rng.choice(BAD_NUMBERS) if rng.random() < 0.3 else "null"
    return _s(rng.choice(STRINGS)) if rng.random() < 0.5 else rng.choice(ESCAPED)


def odd_key(rng):
    """Object keys: strings mostly, else the legacy unquoted integers and worse."""
    r = rng.random()
    if r < 0.75:
        return _s(rng.choice(STRINGS + FIELD_NAMES))
    if r < 0.85:
        return str(rng.choice([0, 1, -1, 7, 1 << 40, 10 ** 30]))
    if r < 0.9:
        return rng.choice(ESCAPED)
    return rng.choice(["null", "true", "1.5", "a", "-0", "[]", "{}", "'k'"])


def odd_json(rng, depth=0):
    """Text of a JSON-ish value: valid mostly, with odd scalars and shapes."""
    r = rng.random()
    if depth > 3 or r < 0.55:
        return odd_scalar(rng)
    if r < 0.75:
        return "[" + ",".join(odd_json(rng, depth + 1) for _ in range(rng.randrange(4))) + "]"
    if r < 0.97:
        pairs = [(odd_key(rng), odd_json(rng, depth + 1)) for _ in range(rng.randrange(4))]
        if pairs and rng.random() < 0.2:        # a duplicate key
            pairs.append((pairs[0][0], rng.choice(["null", odd_scalar(rng)])))
        return "{" + ",".join(f"{k}:{v}" for k, v in pairs) + "}"
    return deep(rng)


_TOKEN = None


def _tokens(text):
    global _TOKEN
    if _TOKEN is None:
        import re
        _TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?'
                            rb'|true|false|null')
    return [m.span() for m in _TOKEN.finditer(text)]


def mutate_json(rng, data, rounds=None):
    """Structure-aware mutation of JSON text: replace a token (a key or a value) by an
    odd one, duplicate a member, nest a value deep, delete a span, or fall back to
    byte mutation."""
    data = bytes(data)
    for _ in range(rounds or rng.randint(1, 3)):
        spans = _tokens(data)
        op = rng.randrange(8)
        if spans and op <= 2:
            a, b = rng.choice(spans)
            data = data[:a] + _odd_bytes(rng) + data[b:]
        elif spans and op == 3:            # a duplicate member after the first one
            a, b = rng.choice(spans)
            if data[b:b + 1] == b":":
                key = data[a:b]
                close = data.rfind(b"}")
                if close > b:
                    dup = b"," + key + b":" + _odd_bytes(rng)
                    data = data[:close] + dup + data[close:]
        elif spans and op == 4:            # a value nested deep
            a, b = rng.choice(spans)
            if data[b:b + 1] != b":":
                data = data[:a] + deep(rng, inner=data[a:b].decode("utf-8", "replace")
                                       ).encode("utf-8") + data[b:]
        elif op == 5 and data:
            a = rng.randrange(len(data))
            data = data[:a] + data[a + rng.randint(1, 8):]
        else:
            data = mutate_bytes(rng, data, 1)
    return data


def _odd_bytes(rng):
    r = rng.random()
    if r < 0.08:
        return rng.choice(RAW_BYTES)
    if r < 0.12:
        return deep(rng).encode()
    return odd_json(rng, 2 if rng.random() < 0.6 else 0).encode("utf-8", "surrogatepass")


# ====================================================================== byte mutation

INT32_VALUES = [0, 1, 2, 3, 4, 7, 8, 20, 21, 22, 127, 128, 255, 256, 0x7FFF, 0x8000, 0xFFFF,
                0xFFFFFF, 0x1000000, 0x1000001, INT32_MAX, -1, -2, -0x8000, INT32_MIN]


def mutate_bytes(rng, data, rounds=None):
    data = bytearray(data)
    for _ in range(rounds or rng.randint(1, 4)):
        op = rng.randrange(10)
        at = rng.randrange(len(data)) if data else 0
        if op == 0 and data:
            data[at] ^= 1 << rng.randrange(8)
        elif op == 1 and data:
            data[at] = rng.randrange(256)
        elif op == 2:
            at = min(at, rng.randrange(72))
            data[at:at + 4] = struct.pack(">i", rng.choice(INT32_VALUES))
        elif op == 3:
            at = min(at, rng.randrange(72))
            data[at:at + 2] = struct.pack(">H", rng.choice(INT32_VALUES) & 0xFFFF)
        elif op == 4:
            del data[at:]
        elif op == 5:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 6:
            del data[at:at + rng.randint(1, 16)]
        elif op == 7 and data:
            n = rng.randint(1, 32)
            data[at:at] = data[at:at + n]
        elif op == 8 and data:
            data[at] = rng.choice(b'{}[]":,\\ 0-e\x00\xff\xc3\xed')
        else:
            data[at:at] = rng.choice([b"\xed\xa0\x80", b"\xff", b"\xc3", b"\\ud800", b"\\u0000",
                                      b"null", b"1e300", b"-0"])
    return bytes(data)


# ====================================================================== headers


def json_header(rng):
    """A JSON header as clients write it, with odd values, orders and duplicates."""
    fields = {
        "code": lambda: str(rng.choice([105, 103, 104, 106, 217, 0, 9999, rng.choice(INTS)])),
        "flag": lambda: str(rng.choice([0, 0, 1, 2, 3])),
        "opaque": lambda: str(rng.randint(-5, 1000)),
        "version": lambda: str(rng.choice([0, 37, 63, 121, 317, 401, 409, 479])),
        "language": lambda: _s(rng.choice(["JAVA", "GO", "CPP", "PYTHON", "NODE_JS", "X"])),
        "remark": lambda: _s(rng.choice(STRINGS)),
        "extFields": lambda: "{" + ",".join(
            f"{_s(rng.choice(['topic', 'a', 'brokerName', 'namespace']))}:{odd_scalar(rng)}"
            for _ in range(rng.randrange(4))) + "}",
        "serializeTypeCurrentRPC": lambda: '"JSON"',
    }
    names = ["code", "flag", "opaque", "version"] + rng.sample(
        ["language", "remark", "extFields", "serializeTypeCurrentRPC"], rng.randint(0, 4))
    pairs = []
    for name in names:
        r = rng.random()
        if r < 0.65:
            value = fields[name]()
        elif r < 0.93:
            value = odd_json(rng, 1 if rng.random() < 0.7 else 0)
        else:
            value = deep(rng)
        pairs.append((_s(name), value))
    if rng.random() < 0.25:                  # a duplicate field, often null
        k, _ = rng.choice(pairs)
        pairs.append((k, rng.choice(["null", "null", odd_scalar(rng), fields[json.loads(k)]()])))
    if rng.random() < 0.2:
        pairs.append((odd_key(rng), odd_json(rng)))
    if rng.random() < 0.15:                  # ext values nested deep
        n = rng.choice([rng.randint(490, 620), rng.randint(200, 1100)])
        pairs.append(('"extFields"', '{"topic":' + deep(rng, n) + "}"))
    rng.shuffle(pairs)
    sep = rng.choice([(",", ":"), (", ", ": "), (",\n", " : ")])
    text = "{" + sep[0].join(f"{k}{sep[1]}{v}" for k, v in pairs) + "}"
    text = rng.choice(["", "", " ", "\n"]) + text + rng.choice(["", "", "\n", " \r\n", "\t"])
    data = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.2:
        data = mutate_json(rng, data, 1)
    return data


def binary_header(rng):
    """A ROCKETMQ binary header: fields, remark and ext fields, lengths right or not."""
    remark = rng.choice([b"", b"r", "r\u00e9".encode(), b"\xed\xa0\x80", b"\xff", b"x" * 40])
    ext = b""
    for _ in range(rng.randrange(4)):
        k = rng.choice([b"topic", b"a", b"k\xc3\xa9", b"\xff", b"", b"brokerName"])
        v = rng.choice([b"T", b"", b"TopicTest", b"\xc3", b"\xed\xb0\x80", "\u00e9".encode()])
        klen = len(k) if rng.random() < 0.9 else rng.choice(INT32_VALUES) & 0xFFFF
        vlen = len(v) if rng.random() < 0.9 else rng.choice(INT32_VALUES)
        ext += struct.pack(">H", klen) + k + struct.pack(">i", vlen) + v
    rlen = len(remark) if rng.random() < 0.9 else rng.choice(INT32_VALUES)
    elen = len(ext) if rng.random() < 0.9 else rng.choice(INT32_VALUES)
    data = struct.pack(">hBhii", rng.choice([105, 103, 0, -1, 0x7FFF]), rng.randrange(256),
                       rng.choice([409, 317, 0, -1]), rng.randint(-3, 100),
                       rng.choice([0, 1, 2, 3, -1])) + \
        struct.pack(">i", rlen) + remark + struct.pack(">i", elen) + ext
    if rng.random() < 0.3:
        data = mutate_bytes(rng, data)
    return data


def some_frame(rng):
    """One frame: a captured one mutated, or one around a generated header."""
    r = rng.random()
    if r < 0.35:
        data = rng.choice(SEED_FRAMES)
        if rng.random() < 0.8:
            st, h, b = _split(data)
            if st == 0 and rng.random() < 0.5:
                data = frame(mutate_json(rng, h), 0, b)
            else:
                data = mutate_bytes(rng, data)
                if len(data) >= 4 and rng.random() < 0.6:     # keep the length prefix right
                    data = struct.pack(">i", len(data) - 4) + data[4:]
        return data
    if r < 0.7:
        return frame(json_header(rng), 0, rng.choice([b"", b"", b"body", REGISTER_BODY[:40]]))
    if r < 0.9:
        return frame(binary_header(rng), 1, rng.choice([b"", b"x"]))
    # a route query the core may answer itself
    topic = rng.choice(REGISTER_TOPICS + ["NoSuchTopic", ""])
    hdr = (f'{{"code":105,"extFields":{{"topic":{_s(topic)}'
           + rng.choice(["", ',"acceptStandardJsonOnly":"true"', ',"acceptStandardJsonOnly":true'])
           + rng.choice(["", "", ',"__ZONE_MODE":"true","__ZONE_NAME":"Zone-A"',
                         ',"__ZONE_MODE":true,"__ZONE_NAME":"zone-\\u017f"'])
           + f'}},"flag":{rng.choice([0, 0, 1, 2])},"language":"JAVA",'
           f'"opaque":{rng.randint(0, 99)},"version":{rng.choice([317, 409])}}}')
    return frame(hdr.encode(), 0)


def cuts(rng, n):
    """Random chunk boundaries of a stream of n bytes (sometimes empty chunks, single bytes)."""
    if n == 0:
        return [0, 0]
    r = rng.random()
    if r < 0.2:         # byte by byte (a few hundred chunks at most)
        points = list(range(0, n + 1, max(rng.randint(1, 3), n // 300)))
    else:
        points = sorted(rng.randint(0, n) for _ in range(rng.randint(1, 8)))
    return [0, *points, n]


def chunks_of(data, bounds, rng=None):
    out = [data[a:b] for a, b in zip(bounds, bounds[1:])]
    if rng is not None:
        out = [rng.choice([bytes, bytes, bytearray, memoryview])(c) for c in out]
    return out


# ====================================================================== checks
#
# A check takes one input (JSON-serialisable: bytes are base64'd in reproducers) and
# returns findings [(signature tuple, details dict)]. Generators make inputs.


def check_decode_frame(inp):
    data, max_len = inp["data"], inp.get("max", 16 * 1024 * 1024)
    return differential("decode_frame", lambda: C.decode_frame(data, max_len),
                        lambda: P.decode_frame(data, max_len), ())[0]


def _feed_stream(core, cls, chunks, max_len):
    """Per-chunk results of a streaming decoder, then what the whole stream gave."""
    dec = getattr(core, cls)(max_len)
    steps, items, error = [], [], None
    for piece in chunks:
        o = outcome(dec.feed, piece)
        if o[0] == "ok":
            items.extend(o[1][1:])      # the commands' tokens, without the list's own
            steps.append(("ok", o[1], dec.buffered))
            continue
        if o[0] == "exc":
            steps.append(o)
            return steps, items, o
        # an rmq error: what was decoded before it, and later feeds fail too
        try:
            dec.feed(piece)
        except RmqError:
            pass
        steps.append(o)
        error = o
        break
    if error is not None:
        try:
            decoded = _replay_decoded(core, cls, chunks, max_len)
        except Exception as e:  # noqa: BLE001
            return steps, items, ("exc", type(e).__name__, _short(str(e)))
        items.extend(decoded)
        again = outcome(dec.feed, b"\x00\x00\x00\x08")
        if again[:2] != error[:2]:
            steps.append(("after-error", again))
    return steps, items, error


def _replay_decoded(core, cls, chunks, max_len):
    # The commands of the chunk that failed (ProtocolError.decoded), canonical.
    dec = getattr(core, cls)(max_len)
    for piece in chunks:
        try:
            dec.feed(piece)
        except RmqError as e:
            return list(canon(e.decoded)[1:])
    return []


def check_stream(inp):
    """FrameDecoder / FrameSplitter: compiled vs pure on the same chunks, and chunked
    vs whole for each."""
    data, bounds, max_len = inp["data"], inp["cuts"], inp.get("max", 16 * 1024 * 1024)
    found = []
    for cls in ("FrameDecoder", "FrameSplitter"):
        chunked = chunks_of(data, bounds)
        res = {}
        for tag, core in CORES.items():
            steps, items, err = _feed_stream(core, cls, chunked, max_len)
            _, whole_items, whole_err = _feed_stream(core, cls, [data], max_len)
            res[tag] = (steps, items, err)
            exc = [o for o in (err, whole_err) if o is not None and o[0] == "exc"]
            for o in exc[:1]:
                found.append(((f"{cls}.feed", "exception", tag, o[1]), {tag: list(o)}))
            if not exc and (items, _cls(err) if err else None) != \
                    (whole_items, _cls(whole_err) if whole_err else None):
                found.append(((f"{cls}.feed", "chunking", tag),
                              {"chunked": [_short(repr(items), 300), err],
                               "whole": [_short(repr(whole_items), 300), whole_err]}))
        if not found and res["c"][0] != res["py"][0]:
            found.append(((f"{cls}.feed", "disagree"),
                          {"c": _short(repr(res["c"][0]), 400),
                           "py": _short(repr(res["py"][0]), 400)}))
    return found


_TABLES = {}


def _route_tables():
    """A RouteTable per core, with the captured broker registered (its topics answer)."""
    if not _TABLES:
        for tag in CORES:
            t = ROUTE_TABLES[tag]()
            t.register_broker("DefaultCluster", "127.0.0.1:10911", "broker-a", 0,
                              "127.0.0.1:10912", body=REGISTER_BODY, conn="conn", now_ms=1)
            _TABLES[tag] = t
    return _TABLES


def check_serve_routes(inp):
    """RouteTable.serve_routes on each core's table, the same chunks: answers,
    handed-back commands and the error must be the same."""
    data, bounds, limit = inp["data"], inp["cuts"], inp.get("limit", -1)
    tables = _route_tables()
    res = {}
    found = []
    for tag, core in CORES.items():
        dec = core.FrameDecoder(inp.get("max", 16 * 1024 * 1024))
        steps = []
        for piece in chunks_of(data, bounds):
            results = []
            o = outcome(lambda: results.append(tables[tag].serve_routes(dec, piece, limit))
                        or results[-1])
            steps.append(o)
            if o[0] == "exc":
                found.append((("serve_routes", "exception", tag, o[1]), {tag: list(o)}))
                break
            if results and results[-1][2] is not None:  # the stream failed: the server closes it
                break
        res[tag] = steps
    if not found and res["c"] != res["py"]:
        found.append((("serve_routes", "disagree"),
                      {"c": _short(repr(res["c"]), 400), "py": _short(repr(res["py"]), 400)}))
    return found


def gen_frames(rng):
    frames = [some_frame(rng) for _ in range(rng.randint(1, 4))]
    if rng.random() < 0.1:
        frames.append(bytes(rng.randrange(256) for _ in range(rng.randint(1, 12))))
    data = b"".join(frames)
    max_len = rng.choice([16 * 1024 * 1024] * 6 + [8, 64, 300, 1000])
    inps = [("decode_frame", {"data": f, "max": max_len}) for f in frames[:2]]
    inps.append(("stream", {"data": data, "cuts": cuts(rng, len(data)), "max": max_len}))
    inps.append(("serve_routes", {"data": data, "cuts": cuts(rng, len(data)), "max": max_len,
                                  "limit": rng.choice([-1, -1, -1, 0, 100, 400])}))
    inps.append(("engine", {"data": data, "cuts": cuts(rng, len(data)), "max": max_len}))
    return inps


# ====================================================================== the engine

_ENGINES = {}


def _answer(frame, max_len):
    """A frame's answer (bytes, b"" for none) served alone: the route the core's
    serve path writes from the table (as the engine's threads, or Python's serve path
    for what they leave), else an echo response; RmqError when it does not decode."""
    answers, _, _ = _route_tables()["c"].route_server(build=False)(
        C.FrameDecoder(max_len), frame, -1)
    if answers:
        return answers
    cmd = C.decode_frame(frame, max_len)
    return b"" if cmd.is_response or cmd.is_oneway else C.encode_frame(cmd.response(0, "echo"))


def _engine(max_len):
    """An Engine (max_frame ``max_len``) on the compiled fuzz table, with a thread
    answering what it hands over by _echo; one per max_len, kept for the run."""
    if max_len not in _ENGINES:
        import socket
        import threading
        listener = socket.create_server(("127.0.0.1", 0))
        # (with the control thread, as the NameServer runs it: a stream with a frame
        # for Python moves there mid-stream, its answers passed on in order)
        engine = C.Engine(_route_tables()["c"].topic_table, listener, threads=2,
                          control_thread=True, max_frame=max_len, max_output=1 << 30)

        def respond():
            while True:
                for kind, conn, data in engine.events(1.0):
                    if kind != "frame":
                        continue
                    out, off, bad = [], 0, False
                    while off < len(data):
                        end = off + 4 + int.from_bytes(data[off:off + 4], "big")
                        try:
                            out.append(_answer(data[off:end], max_len))
                        except RmqError:
                            bad = True
                            break
                        off = end
                    engine.send(conn, out, resume=not bad)
                    if bad:
                        engine.close_connection(conn)
        threading.Thread(target=respond, daemon=True).start()
        _ENGINES[max_len] = (engine, listener)
    return _ENGINES[max_len]


def _engine_expected(data, max_len):
    """(bytes, closed): what the engine must write for the stream ``data``, frame
    by frame, and whether it must close the connection."""
    out, off = [], 0
    while len(data) - off >= 4:
        length = int.from_bytes(data[off:off + 4], "big", signed=True)
        if length < 0 or length + 4 > max_len:
            return b"".join(out), True              # a bad length closes
        if len(data) - off - 4 < length:
            break                                   # incomplete: waits
        frame = data[off:off + 4 + length]
        off += 4 + length
        try:
            out.append(_answer(frame, max_len))
        except RmqError:
            return b"".join(out), True              # Python closes at it
    return b"".join(out), False


def check_engine(inp):
    """The stream, in its chunks, through the engine: exactly the expected bytes,
    and a close where one is due."""
    import socket
    data, bounds, max_len = inp["data"], inp["cuts"], inp.get("max", 16 * 1024 * 1024)
    if max_len < 8:
        return []
    expected, closes = _engine_expected(data, max_len)
    engine, listener = _engine(max_len)
    got, closed = bytearray(), False
    with socket.create_connection(listener.getsockname()) as s:
        try:
            for piece in chunks_of(data, bounds):
                s.sendall(piece)
        except OSError:             # closed by the engine before all was sent
            pass
        s.settimeout(10.0)          # (on a loaded machine: only a failure waits it out)
        try:
            while len(got) < len(expected):
                chunk = s.recv(1 << 16)
                if not chunk:
                    closed = True
                    break
                got += chunk
            if not closed:
                # nothing more may come; a close, when one is due (waited for as long
                # as the bytes: the close of a frame Python refuses takes three
                # threads' wake-ups, which a loaded CI machine stretched past 0.5 s once)
                s.settimeout(10.0 if closes else 0.01)
                chunk = s.recv(1 << 16)
                closed = not chunk
                got += chunk
        except socket.timeout:
            pass
        except OSError:             # reset: closed
            closed = True
    if bytes(got) != expected or closed != closes:
        at = next((i for i, (a, b) in enumerate(zip(expected, got)) if a != b),
                  min(len(expected), len(got)))
        return [(("engine", "disagree"),
                 {"bytes": [len(expected), len(got)], "first_difference": at,
                  "expected": _short(repr(expected[at:]), 300),
                  "got": _short(repr(bytes(got[at:])), 300),
                  "closes": closes, "closed": closed})]
    return []



def gen_headers(rng):
    if rng.random() < 0.7:
        h = json_header(rng) if rng.random() < 0.8 else mutate_json(rng, rng.choice(
            SEED_JSON_HEADERS))
        data = frame(h, 0, rng.choice([b"", b"x"]))
    else:
        h = binary_header(rng) if rng.random() < 0.7 else mutate_bytes(rng, rng.choice(
            SEED_BIN_HEADERS))
        data = frame(h, 1)
    if rng.random() < 0.05:
        data = data[:4] + bytes([rng.choice([2, 3, 0x80, 0xFF])]) + data[5:]
    return [("decode_frame", {"data": data})]


# ---------------------------------------------------------------- bodies

BODY_DECODERS = ("decode_topic_route_data", "decode_cluster_info", "decode_kv_table",
                 "decode_topic_list", "decode_data_version", "decode_broker_member_group",
                 "decode_remote_client_config")


def scanned_in_cuts(data):
    """The compiled core's RegisterBrokerBody scanner as the engine runs it on a
    registration that arrives in reads (rb_partial_step after each, then the whole):
    it must read what the whole body's scan reads. The cuts: a function of the data."""
    rng = random.Random(zlib.crc32(data))
    cuts = sorted(rng.sample(range(len(data) + 1), min(len(data) + 1, rng.randint(1, 12))))
    whole, cut = outcome(C._scan_register_body, data), outcome(C._scan_register_body, data, cuts)
    if whole == cut:
        return []
    return [(("_scan_register_body(cuts)", "disagree", f"{_cls(whole)}|{_cls(cut)}"),
             {"whole": _brief(whole), "cuts": cuts[:12], "in cuts": _brief(cut)})]


def check_body(inp):
    fn, data = inp["fn"], inp["data"]
    if fn in ("json_loads", "decode_register_broker_body"):
        found, oc, op = differential(fn, getattr(C, fn), getattr(P, fn), (data,))
        if fn == "decode_register_broker_body":
            found += scanned_in_cuts(data)
        if fn == "json_loads" and oc[0] == op[0] == "ok" and not found:
            # what decodes must also encode the same (both forms)
            value = P.json_loads(data)
            for legacy in (False, True):
                found += differential(f"json_dumps(legacy={legacy})", C.json_dumps,
                                      P.json_dumps, (value, legacy))[0]
        return found
    return differential(f"bodies.{fn}", getattr(BODIES["c"], fn), getattr(BODIES["py"], fn),
                        (data,))[0]


def topic_config(rng, name):
    fields = {"order": "false", "perm": "6", "readQueueNums": "4", "topicFilterType":
              '"SINGLE_TAG"', "topicName": _s(name), "topicSysFlag": "0", "writeQueueNums": "4"}
    for k in rng.sample(list(fields), rng.randint(0, 2)):
        fields[k] = odd_scalar(rng) if rng.random() < 0.9 else odd_json(rng)
    if rng.random() < 0.2:
        del fields[rng.choice(list(fields))]
    if rng.random() < 0.3:
        fields["attributes"] = rng.choice(['{}', '{"+a":"b"}', odd_json(rng)])
    return "{" + ",".join(f'"{k}":{v}' for k, v in fields.items()) + "}"


def mapping_info(rng, topic):
    """A 5.x TopicQueueMappingInfo; its "topic" sometimes not a string."""
    t = _s(topic) if rng.random() < 0.6 else rng.choice(
        ["null", "5", "1e300", "true", "[]", '["T"]', "{}", '"\\ud800"', odd_json(rng)])
    bname = _s("broker-a") if rng.random() < 0.8 else odd_scalar(rng)
    return (f'{{"bname":{bname},"currIdMap":{{}},"epoch":{rng.choice([0, 1, 1 << 40])},'
            f'"scope":"__global__","topic":{t},"totalQueues":{rng.choice([4, 0, -1])}}}')


def register_body_json(rng, topics=None):
    topics = topics or rng.sample(["T0", "T1", "T2", "TopicTest", "%RETRY%g"], rng.randint(0, 3))
    dv = (f'{{"counter":{rng.choice(["1", "2", odd_scalar(rng)])},"stateVersion":'
          f'{rng.choice(["0", "0", "1", odd_scalar(rng)])},'
          f'"timestamp":{rng.choice(["1700000000000", odd_scalar(rng)])}}}')
    table = ",".join(f"{_s(t)}:{topic_config(rng, t)}" for t in topics)
    wrapper = f'"dataVersion":{dv},"topicConfigTable":{{{table}}}'
    if rng.random() < 0.35:
        maps = ",".join(f"{_s(t)}:{mapping_info(rng, t)}"
                        for t in rng.sample(topics or ["T0"], rng.randint(1, max(1, len(topics)))))
        wrapper += f',"topicQueueMappingInfoMap":{{{maps}}}'
    fsl = rng.choice(['[]', '[]', '["127.0.0.1:1"]', odd_json(rng)])
    text = f'{{"filterServerList":{fsl},"topicConfigSerializeWrapper":{{{wrapper}}}}}'
    return text.encode("utf-8", "surrogatepass")


def register_body_compressed(rng, topics=None):
    topics = topics or rng.sample(["T0", "T1", "T2", "TopicTest"], rng.randint(0, 3))
    lines = []
    for t in topics:
        parts = [t, "4", "4", "6", "SINGLE_TAG"]
        if rng.random() < 0.3:
            i = rng.randrange(1, 4)
            parts[i] = rng.choice(["-1", "0004", "+4", "2147483648", "4.0", "", "x", "1e3",
                                   "99999999999"])
        if rng.random() < 0.3:
            parts.append(rng.choice(['{"+a":"b"}', "{}", "[]", "null", odd_json(rng)]))
        if rng.random() < 0.1:
            parts = parts[:rng.randint(0, 5)]
        lines.append(" ".join(parts).encode("utf-8", "surrogatepass"))
    inner = _chunk(rng.choice([b'{"counter":3,"stateVersion":0,"timestamp":1700000000000}',
                               b'{"counter":1}', b"{}", odd_json(rng).encode("utf-8",
                                                                             "surrogatepass")]))
    inner += struct.pack(">i", len(lines)) + b"".join(map(_chunk, lines))
    inner += _chunk(rng.choice([b"[]", b'["127.0.0.1:1"]', b"null", b"{}"]))
    if rng.random() < 0.5:
        maps = [mapping_info(rng, rng.choice(topics or ["T0"])).encode("utf-8", "surrogatepass")
                for _ in range(rng.randint(0, 2))]
        inner += struct.pack(">i", len(maps)) + b"".join(map(_chunk, maps))
    if rng.random() < 0.3:
        inner = mutate_bytes(rng, inner)
    return zlib.compress(inner, rng.choice([1, 6, 9]))


def route_data_json(rng):
    """A TopicRouteData (as REGISTER_TOPIC carries it), queue numbers sometimes huge."""
    def qd():
        vals = {"brokerName": _s(rng.choice(["broker-a", "broker-b", "x"])), "perm": "6",
                "readQueueNums": "4", "topicSysFlag": "0", "writeQueueNums": "4"}
        for k in rng.sample(list(vals), rng.randint(0, 2)):
            vals[k] = rng.choice(["1" + "0" * 300, str(1 << 40), "1e300", "-1", "null", "true",
                                  '"4"', "1.5", "[]", "{}", str(1 << 31), odd_scalar(rng)])
        return "{" + ",".join(f'"{k}":{v}' for k, v in vals.items()) + "}"

    def bd():
        return rng.choice([
            '{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"broker-a","cluster":"c"}',
            '{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"broker-a","cluster":"c"}',
            '{"brokerAddrs":{"x":"a"},"brokerName":"b"}', '{"brokerAddrs":[1]}',
            '{"brokerAddrs":5}', "5", "null", '"s"', "[]", odd_json(rng)])
    bds = rng.choice(["[" + ",".join(bd() for _ in range(rng.randint(0, 2))) + "]",
                      "327", "null", '"x"', "{}", "true", odd_json(rng)])
    qds = rng.choice(["[" + ",".join(qd() for _ in range(rng.randint(0, 3))) + "]"] * 4 +
                     ["null", "5", "{}", odd_json(rng)])
    fst = rng.choice(["{}", "{}", "null", "[]", odd_json(rng)])
    return f'{{"brokerDatas":{bds},"filterServerTable":{fst},"queueDatas":{qds}}}'.encode(
        "utf-8", "surrogatepass")


def cluster_info_json(rng):
    bat = rng.choice([
        ('{"broker-a":{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"broker-a",'
         '"cluster":"DefaultCluster"}}'), "{}", "null", "5", "[]",
        '{"b":5}', '{"b":{"brokerAddrs":{"x":1}}}', '{"b":{"brokerAddrs":[]}}', odd_json(rng)])
    cat = rng.choice(['{"DefaultCluster":["broker-a"]}', "{}", "null", "[]", '{"c":5}',
                      '{"c":1e300}', '{"c":true}', '{"c":"ab"}', '{"c":null}', '{"c":{"x":1}}',
                      odd_json(rng)])
    return f'{{"brokerAddrTable":{bat},"clusterAddrTable":{cat}}}'.encode("utf-8", "surrogatepass")


def small_body_json(rng, fn):
    if fn == "decode_kv_table":
        t = rng.choice(['{"k":"v"}', '{"k":5}', '{"k":null}', '{"k":[1]}', '{1:2}', "[]",
                        "5", "null", '{"k":1e300}', '{"k":true}', odd_json(rng)])
        return f'{{"table":{t}}}'.encode("utf-8", "surrogatepass")
    if fn == "decode_topic_list":
        t = rng.choice(['["a","b"]', "[]", "null", "5", "{}", '"ab"', "[1,null,[]]", odd_json(rng)])
        b = rng.choice(["", ',"brokerAddr":"a:1"', ',"brokerAddr":5',
                        f',"brokerAddr":{odd_json(rng)}'])
        return f'{{"topicList":{t}{b}}}'.encode("utf-8", "surrogatepass")
    if fn == "decode_data_version":
        return ("{" + ",".join(f'"{k}":{odd_scalar(rng)}' for k in rng.sample(
            ["counter", "stateVersion", "timestamp"], rng.randint(0, 3))) + "}").encode(
                "utf-8", "surrogatepass")
    if fn == "decode_remote_client_config":
        k = rng.choice(['["orderMessageEnable","rocketmqHome"]', "[]", "null", '"k"', "5", "{}",
                        '["listenPort",null]', '["x",1,true,[],{}]', odd_json(rng)])
        return rng.choice([f'{{"keys":{k}}}', "{}", "", "null", "[]"]).encode(
            "utf-8", "surrogatepass")
    g = rng.choice(['{"brokerAddrs":{0:"a"},"brokerName":"b","cluster":"c"}', "null", "5", "[]",
                    '{"brokerAddrs":5}', '{"brokerAddrs":{"x":"a"}}', '"s"', odd_json(rng)])
    return f'{{"brokerMemberGroup":{g}}}'.encode("utf-8", "surrogatepass")


def gen_bodies(rng):
    r = rng.random()
    if r < 0.15:
        data = mutate_json(rng, rng.choice(list(SEED_BODIES.values())))
        fn = rng.choice(("json_loads",) + BODY_DECODERS)
    elif r < 0.3:
        data = odd_json(rng, 0).encode("utf-8", "surrogatepass")
        if rng.random() < 0.3:
            data = mutate_bytes(rng, data, 1)
        fn = "json_loads"
    elif r < 0.45:
        data = register_body_json(rng)
        if rng.random() < 0.3:
            data = mutate_json(rng, data, 1)
        fn = "decode_register_broker_body"
    elif r < 0.55:
        data = mutate_json(rng, REGISTER_BODY)
        fn = "decode_register_broker_body"
    elif r < 0.68:
        data = register_body_compressed(rng) if rng.random() < 0.6 else \
            zlib.compress(mutate_bytes(rng, COMPRESSED_INNER))
        if rng.random() < 0.15:
            data = mutate_bytes(rng, data, 1)
        fn = "decode_register_broker_body"
    elif r < 0.78:
        data, fn = route_data_json(rng), "decode_topic_route_data"
    elif r < 0.86:
        data, fn = cluster_info_json(rng), "decode_cluster_info"
    else:
        fn = rng.choice(BODY_DECODERS[2:])
        data = small_body_json(rng, fn)
    out = [("body", {"fn": fn, "data": data})]
    if fn != "json_loads" and rng.random() < 0.3:
        out.append(("body", {"fn": "json_loads", "data": data}))
    return out


# ---------------------------------------------------------------- handle: the serving path

FIXED_REMARKS_OK = {"crc32 not match", "register broker failed", "disable",
                    "string2Properties error", "the answer cannot be encoded"}


class _Capture(logging.Handler):
    """Exceptions DefaultRequestProcessor.handle caught (log.exception) and the server's encoding failures."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.caught = []

    def emit(self, record):
        if record.exc_info and record.exc_info[0] is not None and \
                not issubclass(record.exc_info[0], RmqError):
            self.caught.append(record.exc_info[0].__name__)


CAPTURE = _Capture()


@contextlib.contextmanager
def _captured_logs():
    """NameServer's logs go to CAPTURE only while a session is served (nothing printed,
    and the loggers are as they were afterwards: the test-suite shares them)."""
    saved = []
    for name in ("rmq.namesrv",):      # the package: its modules' loggers are children
        log = logging.getLogger(name)
        saved.append((log, log.propagate, log.level))
        log.addHandler(CAPTURE)
        log.propagate = False
        log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for log, propagate, level in saved:
            log.removeHandler(CAPTURE)
            log.propagate = propagate
            log.setLevel(level)


class _Conn:
    """A connection token, as rmq.server's connections are to the tables."""

    def __init__(self, n):
        self.id = n

    def __repr__(self):
        return f"<conn {self.id}>"


#: The serialize type the served NameServer answers in (rocketmq.serialize.type).
ANSWER_TYPE = "JSON"


def _new_server(tag):
    from rmq.namesrv.config import NamesrvConfig
    from rmq.namesrv.kvconfig import KVConfig
    clock = [1_700_000_000_000]
    ns = NAMESRV[tag].DefaultRequestProcessor(NamesrvConfig(), KVConfig(None),
                                 routes=ROUTE_TABLES[tag](), clock=lambda: clock[0])
    ns.routes.answer_serialize_type = ANSWER_TYPE
    return ns, clock


def _encode(core, cmd, resp, events):
    # rmq.server.Connection._encode: an answer that cannot be encoded becomes SYSTEM_ERROR;
    # every answer is in the NameServer's serialize type (Connection._frame)
    resp.serialize_type = ANSWER_TYPE
    try:
        return core.encode_frame(resp)
    except Exception as e:  # noqa: BLE001
        if not isinstance(e, RmqError):
            events.append(("encode-exception", cmd.code, type(e).__name__))
        resp = cmd.response(1, "the answer cannot be encoded")
        resp.serialize_type = ANSWER_TYPE
        return core.encode_frame(resp)


def serve(tag, data, bounds, limit):
    """Serve one connection's bytes as rmq.server does; (answers, events, probes)."""
    with _captured_logs():
        return _serve(tag, data, bounds, limit)


def _serve(tag, data, bounds, limit):
    core = CORES[tag]
    ns, clock = _new_server(tag)
    conn = _Conn(1)
    dec = core.FrameDecoder()
    out, events = [], []
    for piece in chunks_of(data, bounds):
        try:
            answers, cmds, error = ns.routes.serve_routes(dec, piece, limit)
        except Exception as e:  # noqa: BLE001
            events.append(("serve_routes-exception", type(e).__name__, _short(str(e))))
            break
        if answers:
            out.append(bytes(answers))
        for cmd in cmds:
            if cmd.is_response:
                continue
            clock[0] += 1000
            before = _snapshot(ns, core) if cmd.code in CHANGES else None
            del CAPTURE.caught[:]
            try:
                resp = ns.handle(cmd, conn)
            except Exception as e:  # noqa: BLE001
                events.append(("handle-escaped", cmd.code, type(e).__name__))
                continue
            for name in CAPTURE.caught:
                events.append(("handle-exception", cmd.code, name))
            # (a failed single-topic registration may change the BrokerData's
            # enableActingMaster/zone first, as Java's registerBroker does)
            if before is not None and resp is not None and resp.code != 0 and \
                    resp.remark != "register broker failed" and _snapshot(ns, core) != before:
                # an error answer must leave the tables as they were
                events.append(("error-changed-tables", cmd.code, f"answer {resp.code}"))
            if resp is not None:
                out.append(_encode(core, cmd, resp, events))
        if error is not None:
            events.append(("closed", type(error).__name__))
            break
    probes = _probes(tag, ns, core, events)
    ns.connection_closed(conn)
    probes += _probes(tag, ns, core, events)
    return b"".join(out), events, probes


#: Requests that change the tables: answered with an error, they must change nothing.
CHANGES = (103, 217)


def _snapshot(ns, core):
    out = []
    for code in (106, 206):
        resp = ns.handle(core.RemotingCommand(code, version=409), None)
        out.append((resp.code, bytes(resp.body)))
    return out


PROBE_TOPICS = ["T0", "T1", "T2", "TopicTest", "%RETRY%g", "BenchmarkTest"]
#: Zones of brokers and of zone-mode queries: cases, a blank one, non-ASCII ones (the
#: compiled scanner leaves those to the general path).
ZONES = ["zone-a", "ZONE-A", "zone-b", " ", "zone-\u017f", "ZONE-S"]


def _probes(tag, ns, core, events):
    reqs = [(106, None), (206, None), (224, {"cluster": "DefaultCluster"}), (304, None)]
    reqs += [(105, {"topic": t}) for t in PROBE_TOPICS]
    reqs += [(105, {"topic": t, "__ZONE_MODE": "true", "__ZONE_NAME": z})
             for t in PROBE_TOPICS[:3] for z in ZONES]
    reqs += [(901, {"clusterName": "DefaultCluster", "brokerName": "broker-a"})]
    out = []
    for code, ext in reqs:
        cmd = core.RemotingCommand(code, ext_fields=ext, version=409, opaque=code)
        del CAPTURE.caught[:]
        resp = ns.handle(cmd, None)
        for name in CAPTURE.caught:
            events.append(("probe-exception", code, name))
        out.append(_encode(core, cmd, resp, events))
    return b"".join(out)


def _answers(data):
    """Answer frames as comparable tuples (SYSTEM_ERROR texts from exceptions aside)."""
    dec = P.FrameDecoder()
    try:
        cmds = dec.feed(data)
    except RmqError as e:
        return [("undecodable", type(e).__name__)]
    rows = []
    for c in cmds:
        remark = c.remark
        if c.code == 1 and remark not in FIXED_REMARKS_OK:
            remark = "<error text>"
        rows.append((c.code, c.flag, c.opaque, remark, c.ext_fields, c.body, c.serialize_type,
                     c.version, c.language))
    return rows


def _first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i, x, y
    return min(len(a), len(b)), a[len(b):len(b) + 1], b[len(a):len(a) + 1]


def check_session(inp):
    data, bounds, limit = inp["data"], inp["cuts"], inp.get("limit", -1)
    runs = {}
    found = []
    raised = {}
    for tag in CORES:
        out, events, probes = serve(tag, data, bounds, limit)
        runs[tag] = (_answers(out), events, _answers(probes))
        for ev in events:
            if ev[0] != "closed":
                raised.setdefault(ev, []).append(tag)
        if bounds != [0, len(data)]:
            w_out, _, w_probes = serve(tag, data, [0, len(data)], limit)
            if (_answers(w_out), _answers(w_probes)) != runs[tag][::2]:
                i, x, y = _first_diff(_answers(w_out) + _answers(w_probes),
                                      runs[tag][0] + runs[tag][2])
                found.append((("handle", "chunking", tag),
                               {"at": i, "whole": _short(repr(x), 400),
                                "chunked": _short(repr(y), 400)}))
    for ev, tags in raised.items():
        sides = "+".join(sorted(set(tags)))
        found.append((("handle", ev[0], sides, f"code {ev[1]}", ev[2]),
                      {"event": list(ev), "sides": sides}))
    (ca, _, cp), (pa, _, pp) = runs["c"], runs["py"]
    if ca != pa:
        i, x, y = _first_diff(ca, pa)
        found.append((("handle", "answers-disagree", _req_code(x, y)),
                      {"answer": i, "c": _short(repr(x), 500), "py": _short(repr(y), 500)}))
    elif cp != pp:
        i, x, y = _first_diff(cp, pp)
        found.append((("handle", "state-disagree", _probe_code(i)),
                      {"probe": i, "c": _short(repr(x), 500), "py": _short(repr(y), 500)}))
    return found


def _req_code(x, y):
    for r in (x, y):
        if isinstance(r, tuple) and len(r) > 3:
            return f"code {r[0]}"
    return "count"


def _probe_code(i):
    n = 11
    return f"probe {i % n}{' after close' if i >= n else ''}"


def _ext_text(ext):
    return "{" + ",".join(f"{_s(k)}:{v if not isinstance(v, str) else _s(v)}"
                          for k, v in ext.items()) + "}"


def request_frame(rng, code, ext=None, body=b"", opaque=0, oneway=False):
    """A request frame: mostly a Java-like JSON header, sometimes ROCKETMQ binary."""
    flag = 2 if oneway else (1 if rng.random() < 0.02 else 0)
    version = rng.choice([409, 409, 317, 479, 121])
    if rng.random() < 0.15 and ext is not None and all(isinstance(v, str) for v in ext.values()):
        cmd = P.RemotingCommand(code, ext_fields=ext, body=body, opaque=opaque, flag=flag,
                                version=version, serialize_type="ROCKETMQ")
        try:
            return P.encode_frame(cmd)
        except RmqError:
            pass
    parts = [f'"code":{code}']
    if ext is not None:
        parts.append(f'"extFields":{_ext_text(ext)}')
    parts += [f'"flag":{flag}', '"language":"JAVA"', f'"opaque":{opaque}',
              '"serializeTypeCurrentRPC":"JSON"', f'"version":{version}']
    return frame(("{" + ",".join(parts) + "}").encode("utf-8", "surrogatepass"), 0, body)


BROKERS = [("DefaultCluster", "127.0.0.1:10911", "broker-a", "0"),
           ("DefaultCluster", "127.0.0.1:10921", "broker-a", "1"),
           ("DefaultCluster", "127.0.0.1:10931", "broker-b", "0"),
           ("OtherCluster", "127.0.0.1:10941", "broker-c", "0")]


def _odd_ext_value(rng):
    """An ext value as a client may send it: text mostly; numbers and booleans
    (ali-ons) are JSON tokens here (written raw)."""
    return rng.choice([_Raw(odd_scalar(rng)), rng.choice(STRINGS)])


class _Raw(str):
    """An ext value written as a raw JSON token."""


def _ext_text_raw(ext):
    return "{" + ",".join(f"{_s(k)}:{v if isinstance(v, _Raw) else _s(v)}"
                          for k, v in ext.items()) + "}"


def session_command(rng, opaque):
    cluster, addr, name, bid = rng.choice(BROKERS)
    topic = rng.choice(PROBE_TOPICS[:4] + ["NoSuchTopic"])
    r = rng.random()
    body = b""
    if r < 0.3:
        code = 103
        v = rng.random()
        if v < 0.3:
            body = register_body_json(rng)
        elif v < 0.5:
            body = register_body_compressed(rng)
        elif v < 0.65:
            body = REGISTER_BODY
        elif v < 0.8:
            body = mutate_json(rng, REGISTER_BODY, 1)
        elif v < 0.9:
            body = register_body_json(rng, [topic])         # a single-topic registration
        ext = {"clusterName": cluster, "brokerAddr": addr, "brokerName": name, "brokerId": bid,
               "haServerAddr": addr.replace("11", "12")}
        crc = rng.random()
        if crc < 0.3:
            ext["bodyCrc32"] = str(P.body_crc32(body))
        elif crc < 0.35:
            ext["bodyCrc32"] = "12345"
        if rng.random() < 0.2:
            ext["compressed"] = "true"
        if rng.random() < 0.2:
            ext["enableActingMaster"] = rng.choice(["true", "false"])
        if rng.random() < 0.3:
            ext["__ZONE_NAME"] = rng.choice(ZONES)
        if rng.random() < 0.1:
            ext["heartbeatTimeoutMillis"] = rng.choice(["1000", "-1", "x", str(1 << 40)])
    elif r < 0.37:
        code, ext = 104, {"clusterName": cluster, "brokerAddr": addr, "brokerName": name,
                          "brokerId": bid}
    elif r < 0.5:
        code, ext = 105, {"topic": topic}
        if rng.random() < 0.3:
            ext["acceptStandardJsonOnly"] = rng.choice(["true", "false", "TRUE"])
        if rng.random() < 0.3:
            ext["__ZONE_MODE"] = rng.choice(["true", "TRUE", "false"])
            ext["__ZONE_NAME"] = rng.choice(ZONES)
    elif r < 0.56:
        code, ext = 217, {"topic": topic}
        body = route_data_json(rng) if rng.random() < 0.8 else b""
    elif r < 0.62:      # a clean TopicRouteData but for one huge queue number
        code, ext = 217, {"topic": topic}
        qd = {"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
              "writeQueueNums": 4}
        qd[rng.choice(["readQueueNums", "writeQueueNums", "perm", "topicSysFlag"])] = \
            rng.choice([10 ** 300, 1 << 40, 1 << 31, -(1 << 31) - 1, 1 << 63, 1 << 64])
        body = json.dumps({"brokerDatas": [], "filterServerTable": {},
                           "queueDatas": [qd]}).encode()
    elif r < 0.67:
        code, ext = 216, {"topic": topic}
        if rng.random() < 0.5:
            ext["clusterName"] = rng.choice([cluster, "NoCluster", ""])
    elif r < 0.72:
        code, ext = rng.choice([205, 327]), {"brokerName": name}
    elif r < 0.78:
        code = 322
        ext = {"clusterName": cluster, "brokerAddr": addr, "brokerName": name, "brokerId": bid}
        body = small_body_json(rng, "decode_data_version") if rng.random() < 0.8 else b""
    elif r < 0.83:
        code = rng.choice([100, 101, 102])
        ns_ = rng.choice(["ORDER_TOPIC_CONFIG", "peer_ns"])
        ext = {"namespace": ns_, "key": topic}
        if code == 100:
            ext["value"] = rng.choice(["broker-a:4", "broker-a:4;broker-b:8", "", "x"])
    elif r < 0.86:
        code, ext = 318, None
        body = rng.choice([b"orderMessageEnable=true\n", b"orderMessageEnable=false\n",
                           b"deleteTopicWithBrokerRegistration=true\n",
                           b"supportActingMaster=true\n", b"enableAllTopicList=false\n",
                           b"enableTopicList=false\n", b"kvConfigPath=/tmp/x\n", b"\xff=1\n"])
    elif r < 0.89:
        code, ext = 904, {"clusterName": cluster, "brokerAddr": addr, "brokerName": name}
    else:
        code = rng.choice([106, 206, 224, 304, 311, 312, 313, 219, 319, 901, 47, 9999])
        ext = {224: {"cluster": cluster}, 219: {"namespace": "ORDER_TOPIC_CONFIG"},
               901: {"clusterName": cluster, "brokerName": name}}.get(code)
        if code == 47:
            body = small_body_json(rng, "decode_remote_client_config")
    if ext is not None and rng.random() < 0.12:         # odd ext values, missing fields
        ext = dict(ext)
        k = rng.choice(list(ext))
        if rng.random() < 0.3:
            del ext[k]
        else:
            ext[k] = _odd_ext_value(rng)
    oneway = rng.random() < 0.03
    if ext is not None and any(isinstance(v, _Raw) for v in ext.values()):
        hdr = (f'{{"code":{code},"extFields":{_ext_text_raw(ext)},"flag":{2 if oneway else 0},'
               f'"language":"JAVA","opaque":{opaque},"version":409}}')
        return frame(hdr.encode("utf-8", "surrogatepass"), 0, body)
    return request_frame(rng, code, ext, body, opaque, oneway)


def gen_handle(rng):
    frames = []
    if rng.random() < 0.7:      # most sessions start with a broker that has topics
        ext = {"clusterName": "DefaultCluster", "brokerAddr": "127.0.0.1:10911",
               "brokerName": "broker-a", "brokerId": "0", "haServerAddr": "127.0.0.1:10912"}
        body = register_body_json(rng, ["T0", "T1"]) if rng.random() < 0.5 else REGISTER_BODY
        frames.append(request_frame(rng, 103, ext, body, 0))
    frames += [session_command(rng, i + 1) for i in range(rng.randint(1, 6))]
    if rng.random() < 0.1:
        i = rng.randrange(len(frames))
        frames[i] = mutate_bytes(rng, frames[i])
    data = b"".join(frames)
    return [("session", {"data": data, "cuts": cuts(rng, len(data)) if rng.random() < 0.7
                         else [0, len(data)],
                         "limit": rng.choice([-1, -1, -1, 0, 300]), "frames": len(frames)})]


CHECKS = {"decode_frame": check_decode_frame, "stream": check_stream,
          "serve_routes": check_serve_routes, "body": check_body, "session": check_session,
          "engine": check_engine}
GENERATORS = {"frames": gen_frames, "headers": gen_headers, "bodies": gen_bodies,
              "handle": gen_handle}


# ====================================================================== shrinking


def _signature(sig):
    return "/".join(str(s) for s in sig)


def shrink(kind, inp, sig, budget=1.5):
    """Make a finding's input smaller while it still gives the same signature: drop
    byte spans (then frames of a session) greedily, within ``budget`` seconds."""
    check = CHECKS[kind]
    deadline = time.monotonic() + budget

    def still(candidate):
        try:
            return any(s == sig for s, _ in check(candidate))
        except Exception:  # noqa: BLE001
            return False

    best = dict(inp)
    if kind == "session":
        best = _shrink_frames(best, still, deadline)
    data = best["data"]
    if "cuts" in best:
        # whole-stream first when the finding does not need chunks
        cand = dict(best, cuts=[0, len(data)])
        if sig[1] != "chunking" and still(cand):
            best = cand
    step = max(len(data) // 2, 1)
    while step >= 1 and time.monotonic() < deadline:
        i = 0
        changed = False
        while i < len(best["data"]) and time.monotonic() < deadline:
            d = best["data"]
            cand_data = d[:i] + d[i + step:]
            cand = dict(best, data=cand_data)
            if "cuts" in cand:
                cand["cuts"] = sorted({min(c, len(cand_data)) for c in best["cuts"]} |
                                      {0, len(cand_data)})
            if cand_data != d and still(cand):
                best, changed = cand, True
            else:
                i += step
        if not changed:
            step //= 2
    return best


def split_frames(data):
    """The frames of a stream by their length prefixes (a bad or partial tail as is)."""
    out, pos = [], 0
    while len(data) - pos >= 4:
        (n,) = struct.unpack_from(">i", data, pos)
        if n < 0 or pos + 4 + n > len(data):
            break
        out.append(data[pos:pos + 4 + n])
        pos += 4 + n
    if pos < len(data):
        out.append(data[pos:])
    return out


def _shrink_frames(best, still, deadline):
    frames = split_frames(best["data"])
    i = 0
    while i < len(frames) and time.monotonic() < deadline:
        cand_frames = frames[:i] + frames[i + 1:]
        cand_data = b"".join(cand_frames)
        cand = dict(best, data=cand_data, cuts=[0, len(cand_data)])
        if still(cand):
            frames, best = cand_frames, cand
        else:
            i += 1
    return best


# ====================================================================== running


def inputs_for(seed, target, index):
    rng = random.Random(f"{seed}:{target}:{index}")
    return GENERATORS[target](rng)


def run_block(args):
    """Run indices [start, stop) of ``targets`` (round-robin); returns stats and findings."""
    seed, targets, start, stop, do_shrink, known = args
    counts = {t: 0 for t in targets}
    checks = 0
    findings = {}
    for index in range(start, stop):
        target = targets[index % len(targets)]
        counts[target] += 1
        for kind, inp in inputs_for(seed, target, index):
            checks += 1
            for sig, details in CHECKS[kind](inp):
                key = _signature(sig)
                entry = findings.get(key)
                if entry is None:
                    if do_shrink and key not in known:
                        small = shrink(kind, inp, sig)
                        known.add(key)
                    else:
                        small = inp
                    # the details of the shrunk input, for the report
                    details = next((d for s, d in CHECKS[kind](small) if s == sig), details)
                    findings[key] = entry = {"signature": list(sig), "target": target,
                                             "check": kind, "count": 0, "examples": []}
                    entry["examples"].append({"index": index, "input": _dump(small),
                                              "details": details})
                elif len(entry["examples"]) < 3:
                    entry["examples"].append({"index": index, "input": _dump(inp),
                                              "details": details})
                entry["count"] += 1
    return counts, checks, findings


_KNOWN = set()      # per worker process: the signatures already shrunk


def _run_block_worker(args):
    seed, targets, start, stop, do_shrink = args
    return run_block((seed, targets, start, stop, do_shrink, _KNOWN))


def _dump(inp):
    out = {}
    for k, v in inp.items():
        if isinstance(v, (bytes, bytearray)):
            out[k] = {"b64": base64.b64encode(bytes(v)).decode()}
            if len(v) <= 400:
                out[k + "_repr"] = repr(bytes(v))
        else:
            out[k] = v
    return out


def _load(inp):
    return {k: bytes(base64.b64decode(v["b64"])) if isinstance(v, dict) and "b64" in v else v
            for k, v in inp.items() if not k.endswith("_repr")}


def merge(total, findings):
    for key, entry in findings.items():
        mine = total.get(key)
        if mine is None:
            total[key] = entry
        else:
            mine["count"] += entry["count"]
            mine["examples"] = (mine["examples"] + entry["examples"])[:3]


def run(seed=0, count=1000, targets=TARGETS, jobs=1, shrink_findings=True, progress=None,
        block=200):
    """Fuzz ``count`` inputs over ``targets``; returns a summary dict."""
    targets = tuple(targets)
    t0 = time.monotonic()
    blocks = [(seed, targets, s, min(s + block, count), shrink_findings)
              for s in range(0, count, block)]
    counts = {t: 0 for t in targets}
    checks = 0
    findings = {}
    last = t0
    pool = None
    if jobs > 1:
        import multiprocessing
        ctx = multiprocessing.get_context("fork" if sys.platform != "win32" else "spawn")
        pool = ctx.Pool(jobs)
    try:
        results = (pool.imap_unordered(_run_block_worker, blocks) if pool is not None
                   else map(_run_block_worker, blocks))
        done = 0
        for c, n, f in results:
            done += sum(c.values())
            for t, v in c.items():
                counts[t] += v
            checks += n
            merge(findings, f)
            if progress and time.monotonic() - last > 10:
                last = time.monotonic()
                progress(done, count, last - t0, findings)
    finally:
        if pool is not None:
            pool.terminate()
    elapsed = time.monotonic() - t0
    return {"seed": seed, "inputs": sum(counts.values()), "checks": checks, "per_target": counts,
            "seconds": elapsed, "rate": sum(counts.values()) / elapsed if elapsed else 0.0,
            "findings": findings}


def write_findings(summary, out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for key, entry in sorted(summary["findings"].items()):
        slug = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in key)[:120]
        path = out / f"{slug}.json"
        path.write_text(json.dumps({"seed": summary["seed"], **entry}, indent=1,
                                   ensure_ascii=True) + "\n")
        paths.append(path)
    return paths


def replay(path):
    doc = json.loads(Path(path).read_text())
    for ex in doc["examples"]:
        inp = _load(ex["input"])
        print(f"example (index {ex['index']}):")
        for sig, details in CHECKS[doc["check"]](inp):
            print("  ", _signature(sig), json.dumps(details, ensure_ascii=True)[:2000])
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=10_000, help="inputs in all (default 10000)")
    ap.add_argument("--target", choices=TARGETS + ("all",), default="all")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--out", default=str(ROOT / "build" / "fuzz"),
                    help="directory for the findings' reproducers (default build/fuzz)")
    ap.add_argument("--no-shrink", action="store_true", help="keep reproducers as generated")
    ap.add_argument("--replay", metavar="FILE", help="run a finding's reproducer again")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    if a.replay:
        return replay(a.replay)
    targets = TARGETS if a.target == "all" else (a.target,)

    def progress(done, count, elapsed, findings):
        if not a.quiet:
            print(f"  {done}/{count} inputs, {done / elapsed:,.0f}/s, "
                  f"{len(findings)} distinct findings", file=sys.stderr, flush=True)

    print(f"fuzz: seed {a.seed}, {a.count} inputs, targets {','.join(targets)}, "
          f"{a.jobs} job(s); compiled {C.IMPLEMENTATION} vs {P.IMPLEMENTATION}", flush=True)
    s = run(a.seed, a.count, targets, a.jobs, not a.no_shrink, progress)
    print(f"inputs: {s['inputs']} ({s['checks']} checks) in {s['seconds']:.1f} s: "
          f"{s['rate']:,.0f} inputs/s")
    for t, n in s["per_target"].items():
        print(f"  {t:8} {n}")
    if s["findings"]:
        paths = write_findings(s, a.out)
        print(f"findings: {len(s['findings'])} distinct, "
              f"{sum(e['count'] for e in s['findings'].values())} in all; reproducers in {a.out}")
        for key, e in sorted(s["findings"].items()):
            ex = e["examples"][0]
            data = ex["input"].get("data_repr") or f"<{len(_load(ex['input'])['data'])} bytes>"
            print(f"  [{e['count']:>6}] {key}\n           input {_short(data, 200)}\n"
                  f"           {_short(json.dumps(ex['details'], ensure_ascii=True), 400)}")
        del paths
        return 1
    print("findings: none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
