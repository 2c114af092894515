"""Protocol constants: request and response codes, languages, versions.

Pure data, shared by both codec implementations and by the server.
"""

from __future__ import annotations

import re

# MQVersion.Version ordinals (each release also has a SNAPSHOT entry before it).
V3_0_11 = 37
V4_9_4 = 401
V4_9_8 = 409
V5_0_0 = 413
V5_3_1 = 475
V5_3_3 = 479
#: The version rmq puts in the commands it builds, its answers among them: Java 5.0.0's
#: NameServer sets rocketmq.remoting.version to its MQVersion.CURRENT_VERSION and every
#: answer carries it (413 in the 5.0.0 vectors; 4.9.8's answers said 409). Where the two
#: differ rmq answers as 5.x; what plays a 4.9.8 broker (rmq.registrar, rmq.brokersim)
#: says V4_9_8 itself.
CURRENT_VERSION = V5_0_0

#: Serialize types, as they appear in the top byte of the header-length word.
SERIALIZE_TYPES = ("JSON", "ROCKETMQ")

#: LanguageCode: index is the byte of the binary header, value the JSON name.
LANGUAGES = (
    "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER",
    "HTTP", "GO", "PHP", "OMS", "RUST", "NODE_JS",
)
LANGUAGE_CODES = {name: i for i, name in enumerate(LANGUAGES)}

FLAG_RESPONSE = 1
FLAG_ONEWAY = 2

DEFAULT_MAX_FRAME_LENGTH = 16 * 1024 * 1024
# JSON nesting both decoders accept (a container counts one level): deeper input is
# refused before it can exhaust a recursive reader's stack.
MAX_JSON_DEPTH = 512

#: A traced frame's direction: towards the NameServer (a client's), or from it.
IN, OUT = 0, 1


class RequestCode:
    GET_CLIENT_CONFIG = 47
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_TOPIC_IN_NAMESRV = 216
    REGISTER_TOPIC_IN_NAMESRV = 217
    GET_KVLIST_BY_NAMESPACE = 219
    GET_TOPICS_BY_CLUSTER = 224
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_UNIT_TOPIC_LIST = 311
    GET_HAS_UNIT_SUB_TOPIC_LIST = 312
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    QUERY_DATA_VERSION = 322
    ADD_WRITE_PERM_OF_BROKER = 327
    GET_BROKER_MEMBER_GROUP = 901
    BROKER_HEARTBEAT = 904


class ResponseCode:
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    QUERY_NOT_FOUND = 22
    GO_AWAY = 1500


REQUEST_NAMES: dict[int, str] = {v: k for k, v in vars(RequestCode).items() if k.isupper()}
RESPONSE_NAMES: dict[int, str] = {v: k for k, v in vars(ResponseCode).items() if k.isupper()}


def code_name(code: int, is_response: bool) -> str:
    """A request or response code's name; CODE_<n> when rmq does not know it."""
    name = (RESPONSE_NAMES if is_response else REQUEST_NAMES).get(code)
    return name if name is not None else f"CODE_{code}"


_JAVA_INT = re.compile(r"[+-]?\d+")


def parse_java_int(text: str, bits: int = 32) -> int | None:
    """``Integer.parseInt`` (bits=32) / ``Long.parseLong`` (bits=64) of a header or
    config value: a sign and digits, nothing else (Python's int() would also take
    blanks and underscores), within the Java type's range; None when Java would throw."""
    if not _JAVA_INT.fullmatch(text):
        return None
    n = int(text)
    return n if -(1 << (bits - 1)) <= n < 1 << (bits - 1) else None
