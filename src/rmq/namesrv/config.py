"""NameServer configuration: Java's NamesrvConfig and NettyServerConfig keys, plus rmq's own.

Java reference (apache/rocketmq, 4.9.x and 5.x):

- ``common/namesrv/NamesrvConfig.java`` and ``remoting/netty/NettyServerConfig.java``:
  every field, name and default below.
- ``NamesrvStartup``: ``-c FILE`` is read with ``Properties.load(InputStream)`` (ISO-8859-1),
  applied with ``MixAll.properties2Object`` to both objects, then ``configStorePath`` is
  set to FILE itself, and the whole Properties is registered in the ``Configuration``
  ("remember all configs to prevent discard"): keys no config object knows are kept and
  shown by GET_NAMESRV_CONFIG.
- ``common/Configuration.java``: GET_NAMESRV_CONFIG is ``MixAll.properties2String`` of
  every non-null field of both objects plus the registered extra properties, ``k=v\\n``
  each, unescaped. ``update()`` only touches keys already known (``mergeIfExist``):
  unknown keys are ignored silently.
- ``MixAll.properties2Object``: the value is ``trim()``-med, then ``Integer.parseInt`` /
  ``Long.parseLong`` / ``Boolean.parseBoolean`` / as is; a value that does not parse is
  skipped silently (Throwable ignored).
- ``DefaultRequestProcessor.updateConfig`` (4.9.7+, 5.1.2+): if the body holds any key of
  the black list (``configBlackList``, ``configStorePath``, ``kvConfigPath``,
  ``rocketmqHome`` plus the ``;``-separated ``configBlackList`` value) the answer is
  NO_PERMISSION "Can not update config in black list." and nothing changes.

Where rmq differs, on purpose:

- The black list also holds, always, every key naming a path or a directory
  (:func:`is_path_key`: the key, lower-cased, contains ``path`` or ends in ``dir``,
  ``dirs``, ``directory``, ``home``, ``file`` or ``files``), known to rmq or not. No remote
  request may choose a file path (CVE-2023-33246, CVE-2023-37582).
- rmq never writes the config back to disk (Java 4.9 ``Configuration.persist()`` wrote all
  configs to ``configStorePath`` after each update).
- A value that does not convert (``listenPort=abc``, an int out of range) is a
  :class:`ConfigError` naming key and value, and an update is all or nothing: Java applies
  the keys that convert and skips the others silently.
- Booleans convert as Java's ``Boolean.parseBoolean`` (``true`` in any case is true,
  anything else false), with a warning when the value is neither true nor false.
- UPDATE_NAMESRV_CONFIG bodies are parsed as text (``Properties.load(Reader)``): Java
  re-encodes the UTF-8 body and reads the bytes as ISO-8859-1, mangling non-ASCII values.
- ``bindAddress`` (5.x NettyServerConfig) is the same setting as rmq's ``listenHost``.
- The TLS keys (``tls.server.*``, ``tls.config.file``: Java's System properties, see
  :mod:`rmq.tls`) are read from the file too, and no remote request may set any
  ``tls.`` key (:func:`is_tls_key`); ``tls.server.keyPassword`` is never shown.
- ``rocketmq.serialize.type``, the serialize type of every answer (Java 5.x
  ``RemotingCommand``: the System property, else the environment variable
  ``ROCKETMQ_SERIALIZE_TYPE``), is read from the file too, its default from that
  variable; no remote request may set it (it is read at start, as Java reads it once).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from rmq.errors import RmqError
from rmq.javaorder import java_properties_order, java_string_order
from rmq.namesrv.kvconfig import REWRITE_MAX_TABLE_BYTES
from rmq.protocol import SERIALIZE_TYPES, parse_java_int

if TYPE_CHECKING:
    from typing_extensions import Self

#: serverEngine's values: the asyncio network layer, the compiled core's I/O engine
SERVER_ENGINES = ("asyncio", "c")

__all__ = [
    "ConfigError",
    "ConfigNoPermission",
    "NamesrvConfig",
    "Field",
    "FIELDS",
    "parse_properties",
    "load_properties_file",
    "properties_to_string",
    "is_path_key",
    "is_tls_key",
    "ALWAYS_BLACKLISTED",
    "SERIALIZE_TYPE_KEY",
    "SERIALIZE_TYPE_ENV",
    "loggable",
]

log = logging.getLogger(__name__)

#: Words in a key whose value is kept out of the logs (a key password, an ACL secret):
#: logs travel further than the config file.
_SECRET_WORDS = ("password", "passwd", "secret", "token", "credential", "signature",
                 "privatekey")


def loggable(key: str, value: Any) -> Any:
    """``value`` as the logs may show it: masked when ``key`` names a secret."""
    flat = key.lower().replace(".", "").replace("_", "").replace("-", "")
    return "****" if any(w in flat for w in _SECRET_WORDS) else value


class ConfigError(RmqError, ValueError):
    """A configuration that cannot be applied. ``key`` and ``value`` name the culprit
    when there is one; ``path`` the file it came from, if any."""

    def __init__(self, message: str, key: str | None = None, value: Any = None,
                 path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.value = value
        self.path = path


class ConfigNoPermission(ConfigError):
    """A remote update names a black-listed key (answer 16 NO_PERMISSION).

    ``key`` is the first such key in the request, ``keys`` all of them.
    """

    def __init__(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        super().__init__(
            "Can not update config in black list: " + ", ".join(keys), key=keys[0])
        self.keys: list[str] = keys


# ---------------------------------------------------------------- java.util.Properties

_WS = " \t\f"
_NL = "\r\n"
_JAVA_TRIM = "".join(chr(i) for i in range(0x21))  # String.trim(): every char <= ' '


def _logical_lines(text: str) -> Iterator[str]:
    """JDK 8 ``Properties.LineReader.readLine``, char for char.

    Natural lines end in \\n, \\r or \\r\\n; leading blanks (space, \\t, \\f) are skipped;
    blank lines and comment lines (first non-blank ``#`` or ``!``) are dropped; a line
    ending in an odd number of backslashes continues on the next one, whose leading
    blanks are skipped (and which is never a comment).
    """
    n = len(text)
    i = 0
    while True:                 # one logical line per pass
        buf: list[str] = []
        skip_ws = True
        is_comment = False
        is_newline = True
        appended_begin = False
        preceding_bs = False
        skip_lf = False
        while True:
            if i >= n:
                if not buf or is_comment:
                    return
                if preceding_bs:
                    buf.pop()
                yield "".join(buf)
                return
            c = text[i]
            i += 1
            if skip_lf:
                skip_lf = False
                if c == "\n":
                    continue
            if skip_ws:
                if c in _WS:
                    continue
                if not appended_begin and c in _NL:
                    continue
                skip_ws = False
                appended_begin = False
            if is_newline:
                is_newline = False
                if c == "#" or c == "!":
                    is_comment = True
                    continue
            if c not in _NL:
                buf.append(c)
                preceding_bs = (not preceding_bs) if c == "\\" else False
                continue
            # end of a natural line
            if is_comment or not buf:
                is_comment = False
                is_newline = True
                skip_ws = True
                buf = []
                continue
            if i >= n:
                if preceding_bs:
                    buf.pop()
                yield "".join(buf)
                return
            if preceding_bs:
                buf.pop()
                skip_ws = True
                appended_begin = True
                preceding_bs = False
                if c == "\r":
                    skip_lf = True
            else:
                yield "".join(buf)
                break               # the next logical line starts from a fresh state


_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "f": "\f"}
_HEX = frozenset("0123456789abcdefABCDEF")


def _load_convert(s: str) -> str:
    """``Properties.loadConvert``: \\uXXXX, \\t \\r \\n \\f, and \\x -> x for any other x."""
    if "\\" not in s:
        return s
    out = []
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        i += 1
        if c != "\\":
            out.append(c)
            continue
        if i >= n:  # cannot happen after readLine; Java would read past the end
            break
        c = s[i]
        i += 1
        if c == "u":
            digits = s[i:i + 4]
            if len(digits) < 4 or not all(d in _HEX for d in digits):
                raise ConfigError(f"Malformed \\uxxxx encoding: {s!r}")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(c, c))
    r = "".join(out)
    if any("\ud800" <= ch <= "\udfff" for ch in r):  # UTF-16 pairs from \\uD83D\\uDE00
        r = r.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return r


def parse_properties(text: str) -> dict[str, str]:
    """``java.util.Properties.load`` over text: an ordered dict of key -> value.

    Separators: the first unescaped ``=``, ``:`` or blank; blanks around it are dropped,
    and one ``=`` or ``:`` after blanks too (``k = v``, ``k: v``, ``k v``). A key
    without value maps to "". A later duplicate wins (Properties is a Hashtable).
    Raises ConfigError on a malformed ``\\uXXXX``.
    """
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        limit = len(line)
        key_len = 0
        value_start = limit
        has_sep = False
        preceding_bs = False
        while key_len < limit:
            c = line[key_len]
            if (c == "=" or c == ":") and not preceding_bs:
                value_start = key_len + 1
                has_sep = True
                break
            if c in _WS and not preceding_bs:
                value_start = key_len + 1
                break
            preceding_bs = (not preceding_bs) if c == "\\" else False
            key_len += 1
        while value_start < limit:
            c = line[value_start]
            if c not in _WS:
                if not has_sep and (c == "=" or c == ":"):
                    has_sep = True
                else:
                    break
            value_start += 1
        key = _load_convert(line[:key_len])
        props.pop(key, None)
        props[key] = _load_convert(line[value_start:])
    return props


def load_properties_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """A properties file as Java's ``Properties.load(InputStream)`` reads it (ISO-8859-1)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e}", path=path) from e
    try:
        return parse_properties(raw.decode("latin-1"))
    except ConfigError as e:
        raise ConfigError(f"config file {path}: {e}", path=path) from None


def properties_to_string(props: Mapping[str, object]) -> str:
    """``MixAll.properties2String``: ``k=v\\n`` per entry, nothing escaped, None skipped."""
    return "".join(f"{k}={v}\n" for k, v in props.items() if v is not None)


# ---------------------------------------------------------------- fields

class Field:
    """One configuration key: its Java name, the attribute holding it, type, default."""

    __slots__ = ("key", "attr", "type", "default", "origin", "check")

    def __init__(self, key: str, type_: str, default: Any, origin: str, attr: str | None = None,
                 check: tuple[int, int] | None = None) -> None:
        self.key = key
        self.attr: str = attr or key
        self.type = type_  # "int" (Java int), "long", "bool" or "str"
        self.default = default  # a value, or a callable giving it
        self.origin = origin  # where Java declares it, or "rmq"
        self.check = check  # (lo, hi) bounds for numbers, beyond Java's type range

    def default_value(self) -> Any:
        return self.default() if callable(self.default) else self.default

    def __repr__(self) -> str:
        return f"Field({self.key!r}, {self.type}, {self.default_value()!r}, {self.origin})"


def _home_file(name: str) -> Callable[[], str]:
    return lambda: os.path.join(os.path.expanduser("~"), "namesrv", name)


_NS = "NamesrvConfig"
_NS5 = "NamesrvConfig 5.x"
_NET = "NettyServerConfig"
_NET5 = "NettyServerConfig 5.x"
_TLS = "TlsSystemConfig"
_REMOTING = "RemotingCommand"

#: Java 5.x RemotingCommand's names for the serialize type a server answers in: the
#: System property, read first, then the environment variable.
SERIALIZE_TYPE_KEY = "rocketmq.serialize.type"
SERIALIZE_TYPE_ENV = "ROCKETMQ_SERIALIZE_TYPE"
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)

#: Every key, in Java's declaration order (NamesrvConfig, NettyServerConfig), then rmq's.
FIELDS = (
    # NamesrvConfig
    Field("rocketmqHome", "str", lambda: os.environ.get("ROCKETMQ_HOME"), _NS),
    Field("kvConfigPath", "str", _home_file("kvConfig.json"), _NS),
    Field("configStorePath", "str", _home_file("namesrv.properties"), _NS),
    Field("productEnvName", "str", "center", _NS),
    Field("clusterTest", "bool", False, _NS),
    Field("orderMessageEnable", "bool", False, _NS),
    Field("returnOrderTopicConfigToBroker", "bool", True, _NS5),
    Field("clientRequestThreadPoolNums", "int", 8, _NS5),
    Field("defaultThreadPoolNums", "int", 16, _NS5),
    Field("clientRequestThreadPoolQueueCapacity", "int", 50000, _NS5),
    Field("defaultThreadPoolQueueCapacity", "int", 10000, _NS5),
    Field("scanNotActiveBrokerInterval", "long", 5000, _NS5, check=(1, _INT64[1])),
    Field("unRegisterBrokerQueueCapacity", "int", 3000, _NS5),
    Field("supportActingMaster", "bool", False, _NS5),
    Field("enableAllTopicList", "bool", True, _NS5),
    Field("enableTopicList", "bool", True, _NS5),
    Field("notifyMinBrokerIdChanged", "bool", False, _NS5),
    Field("notifyMinBrokerIdChangeTimeoutMillis", "long", 3000, _NS5),
    Field("enableControllerInNamesrv", "bool", False, _NS5),
    # Route queries answer SYSTEM_ERROR "name server not ready" for the first
    # waitSecondsForService s (ClientRequestProcessor, fixed by apache/rocketmq#9183;
    # rmq.namesrv.server does it): brokers re-register within 30 s of a restart.
    Field("needWaitForService", "bool", False, _NS5),
    Field("waitSecondsForService", "int", 45, _NS5),
    Field("deleteTopicWithBrokerRegistration", "bool", False, _NS5),
    Field("configBlackList", "str", "configBlackList;configStorePath;kvConfigPath", _NS),
    # NettyServerConfig (listenPort: NamesrvStartup sets 9876 over the class default)
    Field("bindAddress", "str", "0.0.0.0", _NET5, attr="listenHost"),
    Field("listenPort", "int", 9876, _NET, check=(0, 65535)),
    # Thread pools, semaphores and Netty internals (serverWorkerThreads ...
    # serverAsyncSemaphoreValue, serverNettyWorkerGroupEnable,
    # serverPooledByteBufAllocatorEnable, useEpollNativeSelector and NamesrvConfig's
    # pools and queues): accepted and shown, without effect on one event loop.
    Field("serverWorkerThreads", "int", 8, _NET),
    Field("serverCallbackExecutorThreads", "int", 0, _NET),
    Field("serverSelectorThreads", "int", 3, _NET),
    Field("serverOnewaySemaphoreValue", "int", 256, _NET),
    Field("serverAsyncSemaphoreValue", "int", 64, _NET),
    Field("serverChannelMaxIdleTimeSeconds", "int", 120, _NET),
    # SO_SNDBUF / SO_RCVBUF of the accepted sockets, 0: the OS default.
    Field("serverSocketSndBufSize", "int", 0, _NET),
    Field("serverSocketRcvBufSize", "int", 0, _NET),
    # When both are > 0: the output bounds at which reading stops and resumes (Netty's
    # WRITE_BUFFER_WATER_MARK), capped by maxOutputBufferBytes; else rmq's own bounds.
    Field("writeBufferHighWaterMark", "int", 0, _NET),
    Field("writeBufferLowWaterMark", "int", 0, _NET),
    Field("serverSocketBacklog", "int", 1024, _NET),
    Field("serverNettyWorkerGroupEnable", "bool", True, _NET5),
    Field("serverPooledByteBufAllocatorEnable", "bool", True, _NET),
    # On shutdown, serve shutdownWaitTimeSeconds more, answering GO_AWAY to every
    # request of a client above V5_3_1 (NettyRemotingServer.shutdown).
    Field("enableShutdownGracefully", "bool", False, _NET5),
    Field("shutdownWaitTimeSeconds", "int", 30, _NET5),
    Field("useEpollNativeSelector", "bool", False, _NET),
    # TLS (rmq.tls): Java reads these as System properties (-D), rmq from this file;
    # tls.config.file's keys override them, as in Java. Never changed remotely.
    Field("tls.server.mode", "str", "permissive", _TLS, attr="tlsMode"),
    Field("tls.server.need.client.auth", "str", "none", _TLS, attr="tlsServerNeedClientAuth"),
    Field("tls.server.certPath", "str", None, _TLS, attr="tlsServerCertPath"),
    Field("tls.server.keyPath", "str", None, _TLS, attr="tlsServerKeyPath"),
    Field("tls.server.keyPassword", "str", None, _TLS, attr="tlsServerKeyPassword"),
    Field("tls.server.trustCertPath", "str", None, _TLS, attr="tlsServerTrustCertPath"),
    Field("tls.config.file", "str", "/etc/rocketmq/tls.properties", _TLS, attr="tlsConfigFile"),
    # The serialize type of every answer, whatever the request used (Java 5.x; 4.9
    # mirrored the request's): JSON, or ROCKETMQ (binary headers). Java reads it as a
    # System property, else from ROCKETMQ_SERIALIZE_TYPE; rmq from this file, else
    # from that variable. Read at start; never changed remotely.
    Field(SERIALIZE_TYPE_KEY, "str", lambda: os.environ.get(SERIALIZE_TYPE_ENV) or "JSON",
          _REMOTING, attr="serializeType"),
    # rmq's own
    Field("listenHost", "str", "0.0.0.0", "rmq"),
    Field("maxFrameLength", "int", 16 * 1024 * 1024, "rmq", check=(4096, _INT32[1])),
    Field("maxConnections", "int", 10000, "rmq", check=(1, _INT32[1])),
    Field("maxOutputBufferBytes", "long", 64 * 1024 * 1024, "rmq", check=(4096, _INT64[1])),
    # The network layer: "c" (the compiled core's I/O threads answer route queries
    # without Python, every other request goes to the loop; rmq.namesrv.dataplane),
    # with serverIoThreads I/O threads (0: one per CPU the process may run on, its
    # affinity: rmq.namesrv.server.usable_cpus) and a control thread for the
    # connections that talk to Python (brokers, admin clients), or "asyncio" (one event loop
    # thread, uvloop's when installed). Where the engine cannot serve (the pure-Python
    # reference; TLS where Python's ssl has no OpenSSL C can use), asyncio serves.
    Field("serverEngine", "str", "c", "rmq"),
    Field("serverIoThreads", "int", 0, "rmq", check=(0, 256)),
    # Queued answers of all connections together: past it, the largest connections
    # that stopped reading are closed.
    Field("maxTotalOutputBufferBytes", "long", 256 * 1024 * 1024, "rmq",
          check=(4096, _INT64[1])),
    # The cached route answers (identical ones held once): past it, colder answers
    # give way to hotter ones, and the rest are built per query.
    Field("routeCacheBytes", "long", 256 * 1024 * 1024, "rmq", check=(0, _INT64[1])),
    # Warm restart: the route tables snapshotted to routeSnapshotPath every
    # routeSnapshotIntervalSeconds and at shutdown, and read back at start with every
    # broker provisional (dropped unless it registers again within its timeout).
    Field("warmRestart", "bool", False, "rmq"),
    Field("routeSnapshotPath", "str", _home_file("routes.snapshot.json"), "rmq"),
    Field("routeSnapshotIntervalSeconds", "int", 30, "rmq", check=(1, _INT32[1])),
    # Prometheus metrics and /healthz over HTTP on metricsPort (0: off), bound to
    # metricsAddress (empty: the NameServer's own listen address).
    Field("metricsPort", "int", 0, "rmq", check=(0, 65535)),
    Field("metricsAddress", "str", "", "rmq"),
    # The KV table (PUT_KV_CONFIG past a limit: SYSTEM_ERROR naming it, nothing changed)
    Field("maxKvNamespaceBytes", "int", 4096, "rmq", check=(1, _INT32[1])),
    Field("maxKvKeyBytes", "int", 4096, "rmq", check=(1, _INT32[1])),
    Field("maxKvValueBytes", "int", 1024 * 1024, "rmq", check=(1, _INT32[1])),
    Field("maxKvTableBytes", "long", 128 * 1024 * 1024, "rmq", check=(1, _INT64[1])),
    # A KV change leaving the table at most this large (bytes as maxKvTableBytes counts
    # them) rewrites kvConfig.json before it is answered, as Java does; past it, the
    # change is journaled (rmq.namesrv.kvconfig). 0: always journaled.
    Field("maxKvRewriteTableBytes", "long", REWRITE_MAX_TABLE_BYTES, "rmq",
          check=(0, _INT64[1])),
    # Signed requests (rmq.namesrv.acl), off by default: the accounts of a plain_acl.yml
    # and, per class of request, open, signed (any account) or admin (an admin one).
    Field("aclEnable", "bool", False, "rmq"),
    Field("aclFilePath", "str", _home_file("plain_acl.yml"), "rmq"),
    Field("aclAdminRequests", "str", "admin", "rmq"),
    Field("aclBrokerRequests", "str", "open", "rmq"),
    Field("aclRouteRequests", "str", "open", "rmq"),
    Field("aclOtherRequests", "str", "open", "rmq"),
)

_BY_KEY = {f.key: f for f in FIELDS}
_ATTRS = tuple(dict.fromkeys(f.attr for f in FIELDS))

#: Keys no remote request may set, whatever configBlackList says (5.x hard-codes the
#: first four in DefaultRequestProcessor.initConfigBlackList); the ACL's settings too:
#: a request signed by one admin account must not turn the checks off for everyone.
ALWAYS_BLACKLISTED = frozenset(
    {"configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome"}
    | {f.key for f in FIELDS if f.key.startswith("acl")}
    # Java reads it once, at start (a static of RemotingCommand): one client must not
    # switch every other client's answers to a header they may not read.
    | {SERIALIZE_TYPE_KEY})

_PATH_SUFFIXES = ("dir", "dirs", "directory", "home", "file", "files")

#: Never sent to a client (GET_NAMESRV_CONFIG, GET_CLIENT_CONFIG) nor printed (-p).
_NOT_SHOWN = frozenset({"tls.server.keyPassword"})

#: Java's Configuration registers NamesrvConfig, then NettyServerConfig: the order in
#: which GET_CLIENT_CONFIG puts their keys into its Properties (rmq's own keys after).
_CONFIG_OBJECT = {f.key: 0 if f.origin.startswith(_NS) else 1 if f.origin.startswith(_NET)
                  else 2 for f in FIELDS}


def is_tls_key(key: str) -> bool:
    """True for the TLS keys (``tls.`` ...): read at start, never set remotely (a
    remote request must not turn TLS off nor choose the certificates)."""
    return key.strip(_JAVA_TRIM).lower().startswith("tls.")


def is_path_key(key: str) -> bool:
    """True for a key that names a file path or a directory, by its name: it contains
    ``path`` (kvConfigPath, storePathCommitLog) or ends in dir(s), directory, home,
    file(s) (storePathRootDir, rocketmqHome), case aside."""
    k = key.strip(_JAVA_TRIM).lower()
    return "path" in k or k.endswith(_PATH_SUFFIXES)


def _convert(field: Field, raw: str) -> str | bool | int:
    """``properties2Object`` for one key: trim, then parse as the field's type."""
    s = raw.strip(_JAVA_TRIM)
    if field.type == "str":
        return s
    if field.type == "bool":
        if s.lower() not in ("true", "false"):
            log.warning("config %s=%r is neither true nor false: taken as false "
                        "(Java Boolean.parseBoolean)", field.key, raw)
        return s.lower() == "true"
    if parse_java_int(s, 64) is None:
        raise ConfigError(f"config {field.key}={raw!r}: not a Java {field.type}",
                          key=field.key, value=raw)
    v = int(s)
    lo, hi = _INT32 if field.type == "int" else _INT64
    if field.check:
        lo, hi = max(lo, field.check[0]), min(hi, field.check[1])
    if not lo <= v <= hi:
        raise ConfigError(f"config {field.key}={raw!r}: out of range [{lo}, {hi}]",
                          key=field.key, value=raw)
    return v


def _format(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _check_typed(field: Field, value: Any) -> Any:
    """A Python value given to the constructor or assigned: the field's type and range."""
    if field.type == "str":
        ok = value is None or isinstance(value, str)
    elif field.type == "bool":
        ok = isinstance(value, bool)
    else:
        ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok:
        raise ConfigError(f"config {field.key}: {value!r} is not a {field.type}",
                          key=field.key, value=value)
    if field.type in ("int", "long"):
        _convert(field, str(value))
    return value


# ---------------------------------------------------------------- NamesrvConfig

class NamesrvConfig:
    """The NameServer's settings, one attribute per Java key (see :data:`FIELDS`).

    ``NamesrvConfig(**values)`` takes Python values by Java name (``listenPort=9877``);
    :meth:`load` reads a namesrv.properties file; :meth:`to_properties_text` is the body
    of GET_NAMESRV_CONFIG; :meth:`update_from_properties_text` applies the body of
    UPDATE_NAMESRV_CONFIG. ``bindAddress`` and ``listenHost`` are one setting.
    Keys from the file that no field knows are kept in :attr:`extra` (shown by GET,
    updatable remotely, as in Java) and readable as attributes.
    """

    # One attribute per field of FIELDS (set in __init__); bindAddress is listenHost.
    rocketmqHome: str | None
    kvConfigPath: str
    configStorePath: str
    productEnvName: str
    clusterTest: bool
    orderMessageEnable: bool
    returnOrderTopicConfigToBroker: bool
    clientRequestThreadPoolNums: int
    defaultThreadPoolNums: int
    clientRequestThreadPoolQueueCapacity: int
    defaultThreadPoolQueueCapacity: int
    scanNotActiveBrokerInterval: int
    unRegisterBrokerQueueCapacity: int
    supportActingMaster: bool
    enableAllTopicList: bool
    enableTopicList: bool
    notifyMinBrokerIdChanged: bool
    notifyMinBrokerIdChangeTimeoutMillis: int
    enableControllerInNamesrv: bool
    needWaitForService: bool
    waitSecondsForService: int
    deleteTopicWithBrokerRegistration: bool
    configBlackList: str
    listenHost: str
    listenPort: int
    serverWorkerThreads: int
    serverCallbackExecutorThreads: int
    serverSelectorThreads: int
    serverOnewaySemaphoreValue: int
    serverAsyncSemaphoreValue: int
    serverChannelMaxIdleTimeSeconds: int
    serverSocketSndBufSize: int
    serverSocketRcvBufSize: int
    writeBufferHighWaterMark: int
    writeBufferLowWaterMark: int
    serverSocketBacklog: int
    serverNettyWorkerGroupEnable: bool
    serverPooledByteBufAllocatorEnable: bool
    enableShutdownGracefully: bool
    shutdownWaitTimeSeconds: int
    useEpollNativeSelector: bool
    tlsMode: str
    tlsServerNeedClientAuth: str
    tlsServerCertPath: str | None
    tlsServerKeyPath: str | None
    tlsServerKeyPassword: str | None
    tlsServerTrustCertPath: str | None
    tlsConfigFile: str
    serializeType: str | None
    maxFrameLength: int
    maxConnections: int
    maxOutputBufferBytes: int
    routeCacheBytes: int
    warmRestart: bool
    routeSnapshotPath: str
    routeSnapshotIntervalSeconds: int
    metricsPort: int
    metricsAddress: str
    serverEngine: str
    serverIoThreads: int
    maxTotalOutputBufferBytes: int
    maxKvNamespaceBytes: int
    maxKvKeyBytes: int
    maxKvValueBytes: int
    maxKvTableBytes: int
    maxKvRewriteTableBytes: int
    aclEnable: bool
    aclFilePath: str
    aclAdminRequests: str
    aclBrokerRequests: str
    aclRouteRequests: str
    aclOtherRequests: str

    def __init__(self, **values: Any) -> None:
        self._lock = threading.Lock()
        self._extra: dict[str, str] = {}
        self.source: str | None = None
        for f in FIELDS:
            if f.attr == f.key or f.attr not in _BY_KEY:     # not bindAddress (listenHost)
                setattr(self, f.attr, f.default_value())
        for key, value in values.items():
            field = _BY_KEY.get(key)
            if field is None:
                raise TypeError(f"NamesrvConfig has no setting {key!r}")
            setattr(self, field.attr, _check_typed(field, value))

    # bindAddress (5.x NettyServerConfig) is listenHost under its Java name
    @property
    def bindAddress(self) -> str:
        return self.listenHost

    @bindAddress.setter
    def bindAddress(self, value: str) -> None:
        self.listenHost = value

    def __getattr__(self, name: str) -> str:
        # only reached for names that are not attributes: the file's extra keys
        extra: dict[str, str] | None = self.__dict__.get("_extra")
        if extra is not None and name in extra:
            return extra[name]
        raise AttributeError(f"NamesrvConfig has no setting {name!r}")

    @property
    def extra(self) -> dict[str, str]:
        """The file's keys that no field knows (a copy): key -> raw value."""
        return dict(self._extra)

    @staticmethod
    def fields() -> tuple[Field, ...]:
        return FIELDS

    # ------------------------------------------------------------ file

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Self:
        """A config from a Java namesrv.properties (``mqnamesrv -c FILE``).

        Unknown keys are warned about and kept (as Java's registerConfig keeps them);
        a bad value raises ConfigError naming key, value and file. As in Java,
        ``configStorePath`` becomes the file's own path (rmq never writes it).
        """
        path = os.fspath(path)
        props = load_properties_file(path)
        config = cls()
        try:
            config._apply(config._converted(props, source=path))
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}", key=e.key, value=e.value, path=path) from None
        config.configStorePath = os.path.abspath(path)
        config.source = path
        return config

    @classmethod
    def from_properties_text(cls, text: str, source: str = "<text>") -> Self:
        """Like :meth:`load`, from the text of a properties file."""
        config = cls()
        config._apply(config._converted(parse_properties(text), source=source))
        config.source = source
        return config

    # ------------------------------------------------------------ GET / UPDATE

    def to_properties(self) -> dict[str, str]:
        """Every setting as Java's Configuration shows it: key -> string, None omitted.

        Order: Java's declaration order (NamesrvConfig, NettyServerConfig), rmq's keys,
        then the file's extra keys. Java's order is Hashtable order, not a contract.
        """
        props = self._field_properties()
        for k, v in self._extra.items():
            props.setdefault(k, v)
        return props

    def _field_properties(self) -> dict[str, str]:
        """The settings of :data:`FIELDS` (Java's config objects): key -> string."""
        props: dict[str, str] = {}
        for f in FIELDS:
            value = getattr(self, f.attr)
            if value is not None and f.key not in _NOT_SHOWN:
                props[f.key] = _format(value)
        return props

    def client_configs_text(self, keys: Iterable[object]) -> str:
        """The body of GET_CLIENT_CONFIG for the requested ``keys`` (Java 5.x
        ``Configuration.getClientConfigsFormatString``): ``k=v\\n`` for each key that
        names a setting of the config objects (not the file's extra keys: Java reads
        the objects' fields; a null value is no setting), each once, in the order of
        the ``Properties`` Java fills with them (config object by config object, keys
        in request order). Keys that are not strings name no setting (Java makes
        strings of them). The text is at most as long as every setting together,
        however many keys are asked."""
        values = self._field_properties()
        asked = dict.fromkeys(k for k in keys if isinstance(k, str) and k in values)
        filled = sorted(asked, key=_CONFIG_OBJECT.__getitem__)   # stable: request order kept
        return properties_to_string({k: values[k] for k in java_properties_order(filled)})

    def kv_limits(self) -> dict[str, int]:
        """The KVConfig keyword arguments of the KV limits, and of the table size up to
        which each change rewrites kvConfig.json."""
        return {"max_namespace_bytes": self.maxKvNamespaceBytes,
                "max_key_bytes": self.maxKvKeyBytes,
                "max_value_bytes": self.maxKvValueBytes,
                "max_table_bytes": self.maxKvTableBytes,
                "rewrite_max_table_bytes": self.maxKvRewriteTableBytes}

    def answer_serialize_type(self) -> str:
        """The serialize type every answer is written in, from ``rocketmq.serialize.type``
        as Java's RemotingCommand reads its value: blank is JSON, else exactly "JSON" or
        "ROCKETMQ" (``SerializeType.valueOf``, case included). ConfigError naming the
        value otherwise (Java does not start)."""
        value = self.serializeType
        if value is None or not value.strip():
            return "JSON"
        if value not in SERIALIZE_TYPES:
            raise ConfigError(f"config {SERIALIZE_TYPE_KEY}={value!r}: not one of "
                              f"{', '.join(SERIALIZE_TYPES)} (case included)",
                              key=SERIALIZE_TYPE_KEY, value=value)
        return value

    def server_engine(self) -> str:
        """``serverEngine``: "c" or "asyncio" (any case; blank: c). ConfigError naming
        the value otherwise."""
        value = (self.serverEngine or "").strip().lower() or "c"
        if value not in SERVER_ENGINES:
            raise ConfigError(f"config serverEngine={self.serverEngine!r}: not one of "
                              f"{', '.join(SERVER_ENGINES)}", key="serverEngine",
                              value=self.serverEngine)
        return value

    def to_properties_text(self) -> str:
        """The body of GET_NAMESRV_CONFIG: ``k=v\\n`` per key, in ``String.compareTo``
        order as Java 5.x writes it (``MixAll.properties2String(allConfigs, true)``: a
        TreeMap; 4.9.8 wrote its Hashtable's order)."""
        props = self.to_properties()
        return properties_to_string({k: props[k] for k in sorted(props, key=java_string_order)})

    def black_list(self) -> frozenset[str]:
        """The keys named by configBlackList plus :data:`ALWAYS_BLACKLISTED`."""
        named = (k.strip(_JAVA_TRIM) for k in (self.configBlackList or "").split(";"))
        return ALWAYS_BLACKLISTED | {k for k in named if k}

    def is_blacklisted(self, key: str, black: frozenset[str] | None = None) -> bool:
        """True if no remote request may set ``key`` (black list, path or TLS rule);
        ``black``: :meth:`black_list`, when the caller has it already."""
        black = self.black_list() if black is None else black
        return key in black or is_path_key(key) or is_tls_key(key)

    def update_from_properties_text(self, text: str) -> list[str]:
        """Apply an UPDATE_NAMESRV_CONFIG body; returns the keys whose value changed.

        All or nothing: ConfigNoPermission if any key is black-listed, ConfigError if a
        value does not convert or the text does not parse; then nothing changes. Keys
        nobody knows are ignored (Java's ``mergeIfExist``). Nothing is written to disk.
        """
        props = parse_properties(text)
        black = self.black_list()
        refused = [k for k in props if self.is_blacklisted(k, black)]
        if refused:
            raise ConfigNoPermission(refused)
        with self._lock:
            return self._apply(self._converted(props, source=None))

    # ------------------------------------------------------------ internals

    def _converted(self, props: Mapping[str, str], source: str | None
                   ) -> list[tuple[str, str | None, Any]]:
        """[(key, attr or None, value)] for ``props``; raises before anything changes."""
        out: list[tuple[str, str | None, Any]] = []
        seen: dict[str, tuple[str, Any]] = {}
        for key, raw in props.items():
            field = _BY_KEY.get(key)
            if field is None:
                if source is not None:
                    log.warning("%s: unknown config key %r (kept, shown by "
                                "GET_NAMESRV_CONFIG, not used)", source, key)
                    out.append((key, None, raw))
                elif key in self._extra:
                    out.append((key, None, raw))
                else:
                    log.info("config update: unknown key %r ignored", key)
                continue
            value = _convert(field, raw)
            if field.attr in seen and seen[field.attr][1] != value:
                other = seen[field.attr][0]
                raise ConfigError(f"config {other} and {key} are one setting and "
                                  f"disagree: {props[other]!r} vs {raw!r}", key=key, value=raw)
            seen[field.attr] = (key, value)
            out.append((key, field.attr, value))
        return out

    def _apply(self, converted: Iterable[tuple[str, str | None, Any]]) -> list[str]:
        changed: list[str] = []
        for key, attr, value in converted:
            if attr is None:
                if self._extra.get(key) != value:
                    changed.append(key)
                self._extra[key] = value
            else:
                if getattr(self, attr) != value:
                    changed.append(key)
                setattr(self, attr, value)
        return changed

    def __repr__(self) -> str:
        diff = {f.key: getattr(self, f.attr) for f in FIELDS
                if getattr(self, f.attr) != f.default_value()}
        return f"NamesrvConfig({', '.join(f'{k}={v!r}' for k, v in diff.items())})"
