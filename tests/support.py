"""Test helpers: the two implementations, the captured Java vectors, raw frame
builders and hypothesis strategies. Frames are built here with ``struct``
straight from the layout in the spec, independently of the codecs under test."""

import json
import os
import struct
from pathlib import Path

import pytest
from hypothesis import strategies as st

from rmq.protocol import LANGUAGES

# ---------------------------------------------------------------- implementations

PUREPYTHON = os.environ.get("RMQ_PUREPYTHON", "") not in ("", "0")

#: The names both implementations must expose.
CORE_NAMES = (
    "RemotingCommand", "decode_frame", "encode_frame", "FrameDecoder",
    "crc32", "body_crc32", "json_loads", "json_dumps",
    "decode_register_broker_body", "encode_register_broker_body",
    "encode_topic_route_data", "FrameSplitter", "TopicTable", "TraceRows", "TraceColumns",
    "IMPLEMENTATION", "CRC32_KERNEL",
)


def load_compiled():
    """rmq._core; a missing build skips only under RMQ_PUREPYTHON=1, else fails."""
    try:
        from rmq import _core
    except ImportError as exc:
        if PUREPYTHON:
            pytest.skip(f"rmq._core is not built ({exc}) and RMQ_PUREPYTHON=1")
        raise
    return _core


def load_fallback():
    from rmq import fallback
    return fallback


_ROUTE_TABLES = {}


def route_table(impl):
    """rmq.namesrv.routeinfo.RouteTable over ``impl``'s topic-table storage (one
    class per core, so ``type(rt) is route_table(core)`` tells them apart)."""
    from rmq.namesrv.routeinfo import RouteTable
    if impl not in _ROUTE_TABLES:
        _ROUTE_TABLES[impl] = type("RouteTable", (RouteTable,), {"storage": impl.TopicTable})
    return _ROUTE_TABLES[impl]


# ---------------------------------------------------------------- registration bodies

#: Two decode times: a timestamp that differs between them was absent from the body.
NOW_A, NOW_B = 1_000_000_000_001, 2_000_000_000_002


def general_body(data):
    """What the general path (the compiled decoder, then the reference's checks)
    makes of a RegisterBrokerBody: "error", or the scanners' tuple (timestamp None
    when absent) plus the mappings and filter servers."""
    from rmq.errors import BodyError
    from rmq.namesrv.routeinfo import _checked_body
    try:
        body = load_compiled().decode_register_broker_body(data)
        _, dv, table, mappings, servers = _checked_body(body, NOW_A)
        _, dv_b, _, _, _ = _checked_body(body, NOW_B)
    except BodyError:
        return "error"
    ts = None if dv["timestamp"] != dv_b["timestamp"] else dv["timestamp"]
    topics = [(k, tc["topicName"], tc["perm"], tc["readQueueNums"], tc["writeQueueNums"],
               tc["topicSysFlag"]) for k, tc in table.items()]
    return (dv["counter"], dv["stateVersion"], ts, topics), mappings, servers


# ---------------------------------------------------------------- vectors

# Copies of ../shared/vectors/java-4.9.8 and java-5.0.0 live in tests/vectors (frames
# captured from real Apache RocketMQ NameServers, Brokers, mqadmin and Java clients).
VECTORS_ROOT = Path(__file__).resolve().parent / "vectors"
SERIALIZE_TYPE_BYTES = {"JSON": 0, "ROCKETMQ": 1}


def split_frame(data):
    """(serialize type byte, header bytes, body bytes) of a complete frame."""
    length, word = struct.unpack_from(">ii", data)
    assert length == len(data) - 4
    header_len = word & 0xFFFFFF
    return word >> 24, data[8:8 + header_len], data[8 + header_len:]


class VectorSet:
    """One set of captured frames: a directory of ``.bin`` files and its index.json
    (``frames``: one entry per file; ``by_file``: the entries by file name)."""

    def __init__(self, name, directory):
        self.name = name
        self.dir = Path(directory)
        if not (self.dir / "index.json").is_file():
            raise RuntimeError(f"test vectors {name} not found in {self.dir}"
                               + (" (set RMQ_VECTORS)" if name == "java-4.9.8" else ""))
        self.index = json.loads((self.dir / "index.json").read_text("utf-8"))
        self.frames = self.index["frames"]
        self.by_file = {entry["file"]: entry for entry in self.frames}

    def __repr__(self):
        return f"VectorSet({self.name!r})"

    def bytes(self, name):
        return (self.dir / name).read_bytes()

    def body(self, name):
        return split_frame(self.bytes(name))[2]


#: Every set by name; RMQ_VECTORS, when set, is the directory of the 4.9.8 one.
VECTOR_SETS = {
    "java-4.9.8": VectorSet("java-4.9.8", os.environ.get("RMQ_VECTORS")
                            or VECTORS_ROOT / "java-4.9.8"),
    "java-5.0.0": VectorSet("java-5.0.0", VECTORS_ROOT / "java-5.0.0"),
}

# The 4.9.8 set, as most tests use it.
_V498 = VECTOR_SETS["java-4.9.8"]
VECTORS_DIR = _V498.dir
INDEX = _V498.index
VECTORS = _V498.frames
VECTOR_BY_FILE = _V498.by_file
vector_bytes = _V498.bytes
vector_body = _V498.body

#: The 5.0.0 set.
V5 = VECTOR_SETS["java-5.0.0"]


# ---------------------------------------------------------------- raw frames

def frame(header, stype=0, body=b"", length=None, header_len=None):
    """A frame around raw header bytes; ``length``/``header_len`` override the
    computed fields to make malformed frames."""
    if header_len is None:
        header_len = len(header)
    if length is None:
        length = 4 + len(header) + len(body)
    return struct.pack(">iI", length, (stype << 24) | header_len) + header + body


def binary_ext(pairs):
    """The ext block of a ROCKETMQ header from (key bytes, value bytes) pairs."""
    return b"".join(struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v
                    for k, v in pairs)


def binary_header(code=0, language=0, version=0, opaque=0, flag=0, remark=b"", ext=b"",
                  remark_len=None, ext_len=None):
    """A ROCKETMQ binary header; the length overrides make malformed ones."""
    return b"".join((
        struct.pack(">hBhiii", code, language, version, opaque, flag,
                    len(remark) if remark_len is None else remark_len),
        remark,
        struct.pack(">i", len(ext) if ext_len is None else ext_len),
        ext,
    ))


def fields(cmd):
    """The decoded fields of a command, for comparing two implementations."""
    return (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark,
            cmd.ext_fields, cmd.body, cmd.serialize_type)


# ---------------------------------------------------------------- strategies

TEXT = st.text(st.characters(exclude_categories=("Cs",)))
INT16 = st.integers(-(1 << 15), (1 << 15) - 1)
INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)


@st.composite
def command_kwargs(draw, serialize_type=None):
    """Keyword arguments of an arbitrary RemotingCommand that the wire can carry."""
    stype = draw(st.sampled_from(["JSON", "ROCKETMQ"]) if serialize_type is None
                 else st.just(serialize_type))
    small = INT16 if stype == "ROCKETMQ" else INT32
    return dict(
        code=draw(small),
        language=draw(st.sampled_from(LANGUAGES)),
        version=draw(small),
        opaque=draw(INT32),
        flag=draw(INT32),
        remark=draw(st.none() | TEXT),
        ext_fields=draw(st.none() | st.dictionaries(TEXT, TEXT, max_size=6)),
        body=draw(st.binary(max_size=64)),
        serialize_type=stype,
    )


def after_round_trip(kwargs):
    """What a command decodes to after encoding: a ROCKETMQ header encodes an
    empty remark and empty ext fields as length 0, which decodes as null."""
    expected = dict(kwargs)
    if kwargs["serialize_type"] == "ROCKETMQ":
        expected["remark"] = kwargs["remark"] or None
        expected["ext_fields"] = kwargs["ext_fields"] or None
    return expected


JSON_SCALARS = (st.none() | st.booleans() | st.integers()
                | st.floats(allow_nan=False, allow_infinity=False) | TEXT)


def json_values(keys=TEXT):
    return st.recursive(
        JSON_SCALARS,
        lambda inner: st.lists(inner, max_size=5) | st.dictionaries(keys, inner, max_size=5),
        max_leaves=25)


# ---------------------------------------------------------------- other clients' headers

# GET_ROUTEINFO_BY_TOPIC headers of non-Java clients, as the spec (section 2) records
# them from the wire.
GO = b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"GO","opaque":3,"version":317}'
ALI_ONS = (b'{"code":105,"language":"JAVA","opaque":1,"flag":0,"version":121,'
           b'"extFields":{"topic":"T","n":5,"b":true,"f":1.5}}')
ALI_ONS_WIRE = (b'{"code":105,"language":"JAVA","opaque":1,"flag":0,"version":121,'
                b'"extFields":{"topic":"T"}}')
CPP = (b'{"code":105,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"c2lnbg==",'
       b'"topic":"T"},"flag":0,"language":"CPP","opaque":0,"remark":"","version":63}\n')
