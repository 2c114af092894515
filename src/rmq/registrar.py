"""The broker's side of the NameServer conversation (Java: BrokerOuterAPI and the
registration half of BrokerController).

:class:`BrokerRegistrar` registers one broker's topic table with every NameServer
of a namesrvAddr list, all at once: REGISTER_BROKER (103) with bodyCrc32 always
set, JSON or compressed, sync or oneway, each bounded by ``register_timeout`` and
the whole call bounded by it too (the seed's CountDownLatch.await). It re-registers
on a period, asking QUERY_DATA_VERSION (322) first when ``force_register`` is off;
sends the 5.x light heartbeat (BROKER_HEARTBEAT, 904) when asked; splits a large
table over several requests; and unregisters (104) everywhere on stop.

One piece per concern: TopicTable (bodies), RegisterResult and _data_changed (answers),
NameServers (connections), BrokerRegistrar (requests, merged results, periodic tasks).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from rmq import bodies
from rmq.acl import SessionCredentials
from rmq.client import RemotingClient, split_addresses
from rmq.codec import RemotingCommand
from rmq.crc32 import body_crc32
from rmq.errors import RemotingError, ResponseError, RmqError
from rmq.protocol import DEFAULT_MAX_FRAME_LENGTH, V4_9_8, RequestCode, ResponseCode
from rmq._wire import ZONE_NAME

if TYPE_CHECKING:
    from typing_extensions import Self

_T = TypeVar("_T")

log = logging.getLogger(__name__)

__all__ = ["BrokerRegistrar", "RegisterResult", "RegistrationError", "register_period",
           "broker_identity", "register_command"]

#: BrokerConfig defaults (ms in Java, seconds here).
REGISTER_TIMEOUT = 6.0                  # registerBrokerTimeoutMills
REGISTER_PERIOD = 30.0                  # registerNameServerPeriod
FIRST_PERIODIC_DELAY = 10.0             # the scheduleAtFixedRate initial delay
SPLIT_REGISTRATION_SIZE = 800           # splitRegistrationSize
HEARTBEAT_INTERVAL = 1.0                # brokerHeartbeatInterval
HEARTBEAT_TIMEOUT = 1.0                 # sendHeartbeatTimeoutMillis
UNREGISTER_TIMEOUT = 3.0                # unregisterBroker's invokeSync timeout

# Room for the header of a REGISTER_BROKER frame when deciding whether a body fits.
_HEADER_ROOM = 64 * 1024


def register_period(period: float, shortest: float = 10.0) -> float:
    """The seed's period: max(10 s, min(registerNameServerPeriod, 60 s))."""
    return max(shortest, min(float(period), 60.0))


def broker_identity(cluster: str, broker_name: str, broker_id: int, broker_addr: str) -> dict[str, str]:
    """The header fields that name a broker in REGISTER_BROKER, UNREGISTER_BROKER and
    QUERY_DATA_VERSION."""
    return {"brokerAddr": broker_addr, "brokerId": str(broker_id), "brokerName": broker_name,
            "clusterName": cluster}


def register_command(identity: Mapping[str, str], ha_server_addr: str, body: bytes, *,
                     compressed: bool, crc: int | None = None, oneway: bool = False,
                     version: int = V4_9_8, heartbeat_timeout_ms: int | None = None,
                     enable_acting_master: bool | None = None,
                     zone_name: str | None = None) -> RemotingCommand:
    """REGISTER_BROKER (103) as Java's BrokerOuterAPI sends it: bodyCrc32 always set
    (``crc`` when the caller has it already, else computed here); ``zone_name``: the
    broker's zone (5.x ``-Drocketmq.zone``), sent as ``__ZONE_NAME``."""
    ext = dict(identity, haServerAddr=ha_server_addr,
               compressed="true" if compressed else "false",
               bodyCrc32=str(body_crc32(body) if crc is None else crc))
    if enable_acting_master is not None:
        ext["enableActingMaster"] = "true" if enable_acting_master else "false"
    if heartbeat_timeout_ms is not None:
        ext["heartbeatTimeoutMillis"] = str(int(heartbeat_timeout_ms))
    if zone_name is not None:
        ext[ZONE_NAME] = zone_name
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, oneway=oneway,
                                   version=version)


class RegistrationError(RmqError):
    """No NameServer answered a registration. ``errors``: address -> exception."""

    def __init__(self, message: str, errors: dict[str, BaseException]) -> None:
        super().__init__(message)
        self.errors = errors


class TopicTable:
    """The topic table ({name: TopicConfig dict}) and its DataVersion (Java's
    TopicConfigSerializeWrapper), and the RegisterBrokerBody bodies made of them, kept
    until :meth:`update` or a new DataVersion: encoding the table is most of what a
    registration costs the broker, and no NameServer or period changes the bytes."""

    def __init__(self, broker_name: str, topics: dict[str, Any] | Iterable[Mapping[str, Any]],
                 data_version: Mapping[str, Any] | None, filter_servers: list[str]) -> None:
        self.broker_name = broker_name          # for the log
        self.filter_servers = filter_servers
        self.data_version: dict[str, Any] = {"counter": 0, "timestamp": _now_ms()}
        self.update(topics, self.data_version if data_version is None else data_version)

    def update(self, topics: dict[str, Any] | Iterable[Mapping[str, Any]],
               data_version: Mapping[str, Any] | None = None) -> None:
        if not isinstance(topics, dict):
            topics = {tc["topicName"]: tc for tc in topics}
        for name, tc in topics.items():
            if not isinstance(tc, dict) or tc.get("topicName", name) != name:
                raise ValueError(f"topic {name!r}: expected a TopicConfig dict with that "
                                 f"topicName, got {tc!r}")
        self.topics = dict(topics)
        self._json: bytes | None = None         # the table's JSON, made when first needed
        self._encoded: tuple[tuple[Any, ...], list[tuple[bytes, int]]] | None = None  # key, chunks
        if data_version is not None:
            self.data_version = dict(data_version)
        else:
            self.next_version()

    def next_version(self) -> None:
        # DataVersion.nextVersion: counter + 1, timestamp now (5.x: stateVersion 0).
        dv = self.data_version
        self.data_version = dict(dv, counter=dv.get("counter", 0) + 1, timestamp=_now_ms())

    def chunks(self, compressed: bool, split: bool = False, split_size: int = SPLIT_REGISTRATION_SIZE,
               max_body: int = DEFAULT_MAX_FRAME_LENGTH - _HEADER_ROOM) -> list[tuple[bytes, int]]:
        """The encoded bodies to send, with their CRC32s. One body with the current
        DataVersion, encoded once and reused until the table changes; or, with
        ``split`` (or a body longer than ``max_body``), one body per ``split_size``
        topics plus a last one with the rest (maybe none), each with the DataVersion
        moved on first, as Java's registerBrokerAll does: every chunk is then news
        to the NameServer and is applied."""
        key = (compressed, self.data_version.get("counter"), self.data_version.get("timestamp"))
        if not split:
            if self._encoded is not None and self._encoded[0] == key:
                return self._encoded[1]
            body = self._encode(None, compressed)
            if len(body) <= max_body:
                self._encoded = (key, [(body, body_crc32(body))])
                return self._encoded[1]
            log.info("broker %s: %d topics do not fit in one %d-byte frame: registering them "
                     "in parts of %d", self.broker_name, len(self.topics), max_body + _HEADER_ROOM,
                     split_size)
        configs = list(self.topics.values())
        full = len(configs) - len(configs) % split_size     # the rest, maybe none, goes last
        out: list[bytes] = []
        for i in range(0, full + 1, split_size):
            self.next_version()
            out.append(self._encode(configs[i:i + split_size], compressed))
        return [(body, body_crc32(body)) for body in out]

    def _encode(self, part: list[Any] | None, compressed: bool) -> bytes:
        """RegisterBrokerBody of ``part`` of the table's configs (None: the whole table)."""
        if part is None and not compressed:
            # What encode_register_broker_body writes, with the table's JSON kept
            # until the table changes: a new DataVersion alone (broker-sim --bump)
            # costs a join (tests/test_broker.py checks the bytes).
            if self._json is None:
                self._json = bodies.json_dumps(self.topics)
            return b"".join((b'{"filterServerList":', bodies.json_dumps(list(self.filter_servers)),
                             b',"topicConfigSerializeWrapper":{"dataVersion":',
                             bodies.json_dumps(self.data_version), b',"topicConfigTable":',
                             self._json, b"}}"))
        body = bodies.register_broker_body(list(self.topics.values()) if part is None else part,
                                           self.data_version, self.filter_servers)
        return bodies.encode_register_broker_body(body, compressed=compressed)


@dataclasses.dataclass
class RegisterResult:
    """One NameServer's answer to REGISTER_BROKER (Java: RegisterBrokerResult)."""
    namesrv: str
    master_addr: str | None = None
    ha_server_addr: str | None = None
    kv_table: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_answer(cls, addr: str, resp: RemotingCommand) -> RegisterResult:
        if resp.code != ResponseCode.SUCCESS:
            raise ResponseError(resp.code, resp.remark, addr, RequestCode.REGISTER_BROKER)
        ext = resp.ext_fields or {}
        return cls(addr, ext.get("masterAddr") or None, ext.get("haServerAddr") or None,
                   bodies.decode_kv_table(resp.body) if resp.body else {})


def _data_changed(resp: RemotingCommand, data_version: Mapping[str, Any]) -> bool:
    """Whether a QUERY_DATA_VERSION answer says "changed" or carries a DataVersion not
    equal to ``data_version`` (DataVersion.equals: counter, timestamp, stateVersion)."""
    if resp.code != ResponseCode.SUCCESS:
        return False                    # Java: changed stays false on another code
    theirs = bodies.decode_data_version(resp.body) if resp.body else data_version
    return ((resp.ext_fields or {}).get("changed") == "true"
            or any(theirs.get(k, 0) != data_version.get(k, 0)
                   for k in ("counter", "timestamp", "stateVersion")))


class NameServers:
    """The NameServers of a namesrvAddr list and the connections to them."""

    def __init__(self, namesrv_addr: str, client: RemotingClient | None, max_frame: int,
                 tls: ssl.SSLContext | bool | None = None,
                 credentials: SessionCredentials | None = None) -> None:
        self.addrs = split_addresses(namesrv_addr)
        self._client = client
        self._own_client = client is None
        self._max_frame = max_frame
        self._tls = tls
        self._credentials = credentials

    async def ask(self, request: Callable[[], RemotingCommand], timeout: float, failed: str, *,
                  read: Callable[[str, RemotingCommand], _T] | None = None,
                  call_timeout: float | None = None, level: int = logging.WARNING,
                  addrs: Iterable[str] | None = None
                  ) -> tuple[dict[str, _T | None], dict[str, BaseException]]:
        """``request()`` to every NameServer (or ``addrs``) at once, each in ``call_timeout``,
        all in ``timeout``: ({addr: read(addr, answer), None when oneway}, {addr: exception,
        logged as "``failed`` addr failed: e"}). Nothing outlives it, even cancelled."""
        async def one(addr: str) -> _T | None:
            if self._client is None:    # made when first needed; closed by close() unless given
                self._client = RemotingClient(max_frame_length=self._max_frame, ssl=self._tls,
                                              credentials=self._credentials)
            cmd = request()
            if cmd.is_oneway:
                await self._client.invoke_oneway(addr, cmd, call_timeout or timeout)
                return None
            resp = await self._client.invoke(addr, cmd, call_timeout or timeout)
            return None if read is None else read(addr, resp)

        tasks = {addr: asyncio.ensure_future(one(addr))
                 for addr in (self.addrs if addrs is None else addrs)}
        if not tasks:
            return {}, {}
        try:
            await asyncio.wait(tasks.values(), timeout=timeout)
        finally:
            late = [t for t in tasks.values() if not t.done()]
            for t in late:
                t.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        results: dict[str, _T | None] = {}
        errors: dict[str, BaseException] = {}
        for addr, t in tasks.items():
            e = (RemotingError(f"no answer within {timeout:g} s", addr) if t.cancelled()
                 else t.exception())
            if e is None:
                results[addr] = t.result()
            else:
                errors[addr] = e
                log.log(level, "%s %s failed: %s", failed, addr, e)
        return results, errors

    async def close(self) -> None:
        if self._own_client and self._client is not None:
            await self._client.close()
            self._client = None


class BrokerRegistrar:
    """Registers one broker with a set of NameServers (see the module docstring).

    ``namesrv_addr``: "host:port;host:port" as namesrvAddr. ``topics``: the topic
    table, {name: TopicConfig dict} (or an iterable of TopicConfig dicts, see
    rmq.bodies.topic_config). ``data_version``: its DataVersion dict (a new one
    when None). Change the table with :meth:`update_topics`, which moves the
    DataVersion on as the broker's TopicConfigManager does.

    ``oneway``: periodic registrations are oneway (the first one is always sync).
    ``force_register`` (Java's forceRegister, default on): off, each period asks
    QUERY_DATA_VERSION and registers only when some NameServer's data differs.
    ``split_registration`` / ``split_size``: send the table in requests of at most
    ``split_size`` topics (Java's enableSplitRegistration, splitRegistrationSize);
    a table whose single body would not fit in ``max_frame_length`` is split
    whatever the setting. ``heartbeat_timeout_ms`` and ``enable_acting_master`` go
    in the request header when set (5.x brokers send them). ``light_heartbeat``:
    also send BROKER_HEARTBEAT every ``heartbeat_interval`` seconds (5.x with
    enableSlaveActingMaster). ``on_results``: called with each registration's
    results (the masterAddr, haServerAddr and KV table of the answers). ``ssl``: TLS to
    the NameServers (Java's tls.enable), as RemotingClient's ``ssl``, when it makes
    the client (not with ``client``). ``credentials``: every request is signed with
    them (rmq.acl; a ``client`` given signs with its own).
    """

    #: The shortest period (Java's 10 s floor). Demos and tests may lower it.
    SHORTEST_PERIOD = 10.0

    def __init__(self, namesrv_addr: str, *, cluster: str, broker_name: str, broker_addr: str,
                 broker_id: int = 0, ha_server_addr: str | None = None,
                 topics: dict[str, Any] | Iterable[Mapping[str, Any]] | None = None,
                 data_version: Mapping[str, Any] | None = None,
                 register_timeout: float = REGISTER_TIMEOUT, period: float = REGISTER_PERIOD,
                 compressed: bool = False, oneway: bool = False, force_register: bool = True,
                 split_registration: bool = False, split_size: int = SPLIT_REGISTRATION_SIZE,
                 heartbeat_timeout_ms: int | None = None, enable_acting_master: bool | None = None,
                 light_heartbeat: bool = False, heartbeat_interval: float = HEARTBEAT_INTERVAL,
                 filter_servers: Iterable[str] = (), version: int = V4_9_8,
                 client: RemotingClient | None = None,
                 max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
                 on_results: Callable[[list[RegisterResult]], object] | None = None,
                 ssl: ssl.SSLContext | bool | None = None,
                 credentials: SessionCredentials | None = None) -> None:
        self._namesrvs = NameServers(namesrv_addr, client, max_frame_length, ssl, credentials)
        self.namesrv_addrs = self._namesrvs.addrs
        self.cluster = cluster
        self.broker_name = broker_name
        self.broker_id = int(broker_id)
        self.broker_addr = broker_addr
        self.ha_server_addr = ha_server_addr or broker_addr
        if split_size < 1:
            raise ValueError(f"split_size must be at least 1, got {split_size}")
        if register_timeout <= 0:
            raise ValueError(f"register_timeout must be positive, got {register_timeout}")
        self.register_timeout = float(register_timeout)
        self.period = register_period(period, self.SHORTEST_PERIOD)
        self.first_delay = min(FIRST_PERIODIC_DELAY, self.period)
        self.compressed = bool(compressed)
        self.oneway = bool(oneway)
        self.force_register = bool(force_register)
        self.split_registration = bool(split_registration)
        self.split_size = int(split_size)
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.enable_acting_master = enable_acting_master
        self.light_heartbeat = bool(light_heartbeat)
        self.heartbeat_interval = float(heartbeat_interval)
        self.filter_servers = list(filter_servers)
        self.version = version
        self.max_frame_length = max_frame_length
        self.on_results = on_results
        self._table = TopicTable(broker_name, topics or {}, data_version, self.filter_servers)
        self._tasks: list[asyncio.Task[None]] = []
        self.last_results: list[RegisterResult] = []

    # ------------------------------------------------------------ the table

    @property
    def topics(self) -> dict[str, Any]:
        """The topic table: {name: TopicConfig dict} (a copy)."""
        return dict(self._table.topics)

    @property
    def data_version(self) -> dict[str, Any]:
        return dict(self._table.data_version)

    def update_topics(self, topics: dict[str, Any] | Iterable[Mapping[str, Any]],
                      data_version: Mapping[str, Any] | None = None) -> None:
        """Replace the topic table (only through here: its encoding is kept until then).
        Without ``data_version`` the DataVersion moves on, as Java's nextVersion."""
        self._table.update(topics, data_version)

    # ------------------------------------------------------------ requests

    def _identity(self) -> dict[str, str]:
        return broker_identity(self.cluster, self.broker_name, self.broker_id, self.broker_addr)

    def _register_command(self, body: bytes, crc: int, compressed: bool,
                          oneway: bool) -> RemotingCommand:
        return register_command(self._identity(), self.ha_server_addr, body,
                                compressed=compressed, crc=crc, oneway=oneway,
                                version=self.version,
                                heartbeat_timeout_ms=self.heartbeat_timeout_ms,
                                enable_acting_master=self.enable_acting_master)

    async def register_broker_all(self, *, oneway: bool | None = None, compressed: bool | None = None,
                                  addrs: Sequence[str] | None = None) -> list[RegisterResult]:
        """REGISTER_BROKER to every NameServer at once. Returns the results of those
        that answered within ``register_timeout`` (none for oneway: nothing answers;
        sent is enough), logs the others, and raises RegistrationError only when
        none answered (or, oneway, none could be sent to). A split table goes as
        one such round per part, in order, all within the one ``register_timeout``;
        a NameServer counts as answered when it answered every part. ``addrs``: only
        these NameServers (default: all)."""
        oneway = self.oneway if oneway is None else bool(oneway)
        compressed = self.compressed if compressed is None else bool(compressed)
        if addrs is not None and not addrs:
            raise ValueError("register_broker_all(addrs=...): no address given")
        chunks = self._table.chunks(compressed, self.split_registration, self.split_size,
                                    self.max_frame_length - _HEADER_ROOM)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.register_timeout
        results: dict[str, RegisterResult | None] = {}
        errors: dict[str, BaseException] = {}
        for body, crc in chunks:
            timeout = max(deadline - loop.time(), 0.001)
            pending = [a for a in addrs or self.namesrv_addrs if a not in errors]
            if not pending:
                break
            got, failed = await self._namesrvs.ask(
                lambda: self._register_command(body, crc, compressed, oneway), timeout,
                f"register broker {self.broker_name} to name server",
                read=RegisterResult.from_answer, addrs=pending)
            errors.update(failed)       # pending leaves out those that failed before
            results.update(got)
        # a NameServer that failed any part counts as failed
        return self._merge({a: r for a, r in results.items() if a not in errors}, errors, oneway)

    def _merge(self, results: dict[str, RegisterResult | None], errors: dict[str, BaseException],
               oneway: bool) -> list[RegisterResult]:
        """A round's results logged and kept (none at all: RegistrationError)."""
        if not results:
            hint = (" (a NameServer refuses a broker's first registration when its table has "
                    "exactly one topic: add the broker's system topics, "
                    "rmq.bodies.broker_system_topics)") if len(self._table.topics) == 1 else ""
            raise RegistrationError(
                f"register broker {self.broker_name} ({self.broker_addr}): no name server "
                f"answered: " + "; ".join(f"{a}: {e}" for a, e in errors.items()) + hint,
                errors)
        for addr in results:
            log.info("register broker[%d] %s to name server %s OK%s", self.broker_id,
                     self.broker_name, addr, " (oneway)" if oneway else "")
        ok = [r for r in results.values() if r is not None]
        if not oneway:
            self.last_results = ok
            if self.on_results is not None:
                self.on_results(ok)
        return ok

    async def need_register(self) -> list[str]:
        """QUERY_DATA_VERSION to every NameServer: the addresses of those whose data
        differs from this broker's DataVersion (empty: none), in namesrvAddr order.
        One that fails to answer counts as changed, as in Java; one that answers
        another code does not (Java adds nothing for it)."""
        dv = self._table.data_version
        dv_body = bodies.encode_data_version(dv)
        results, errors = await self._namesrvs.ask(
            lambda: RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, self._identity(),
                                            dv_body, version=self.version),
            self.register_timeout, "query data version from name server",
            read=lambda addr, resp: _data_changed(resp, dv))
        return [a for a in self.namesrv_addrs if a in errors or results.get(a)]

    async def heartbeat_all(self) -> None:
        """BROKER_HEARTBEAT (904), oneway, to every NameServer (5.x light heartbeat)."""
        await self._namesrvs.ask(lambda: RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, {
            "brokerAddr": self.broker_addr, "brokerName": self.broker_name,
            "clusterName": self.cluster}, oneway=True, version=self.version),
            self.register_timeout, "heartbeat to name server", call_timeout=HEARTBEAT_TIMEOUT,
            level=logging.DEBUG)

    async def unregister_broker_all(self) -> dict[str, BaseException | None]:
        """UNREGISTER_BROKER (104) to every NameServer at once; failures are logged.
        Returns {addr: None or the exception}."""
        def unregistered(addr: str, resp: RemotingCommand) -> None:
            if resp.code != ResponseCode.SUCCESS:
                raise ResponseError(resp.code, resp.remark, addr, RequestCode.UNREGISTER_BROKER)
            log.info("unregister broker %s from name server %s OK", self.broker_name, addr)

        _, errors = await self._namesrvs.ask(
            lambda: RemotingCommand.request(RequestCode.UNREGISTER_BROKER, self._identity(),
                                            version=self.version),
            self.register_timeout, f"unregister broker {self.broker_name} from name server",
            read=unregistered, call_timeout=UNREGISTER_TIMEOUT)
        return {addr: errors.get(addr) for addr in self.namesrv_addrs}

    # ------------------------------------------------------------ the periodic tasks

    async def start(self) -> list[RegisterResult]:
        """Register now (sync, forced, as BrokerController.start), then every period;
        the light heartbeat too when enabled. Returns the first results. When no
        NameServer answers the first registration it raises RegistrationError and
        nothing is left running (Java would go on trying each period: call start()
        again, or tick(), to do that)."""
        try:
            results = await self.register_broker_all(oneway=False)
        except BaseException:
            await self.stop(unregister=False)       # closes the client it made
            raise
        self._tasks.append(asyncio.create_task(self._periodically()))
        if self.light_heartbeat:
            self._tasks.append(asyncio.create_task(_repeat(
                self.heartbeat_all, min(1.0, self.heartbeat_interval), self.heartbeat_interval,
                lambda e: log.debug("heartbeat round failed: %s", e), fixed_rate=False)))
        return results

    async def tick(self) -> list[RegisterResult] | None:
        """One period's work: register (oneway when configured) with every
        NameServer; with force_register off, only with those where QUERY_DATA_VERSION
        says the data changed (Java then registers with all of them: the others
        need nothing, and the query already refreshed the broker there). Returns
        the results, or None when nothing needed registering."""
        # Split registration moves the DataVersion on every time: Java skips the query.
        if self.force_register or self.split_registration:
            return await self.register_broker_all()
        changed = await self.need_register()
        if not changed:
            return None
        return await self.register_broker_all(addrs=changed)

    def _periodically(self) -> Coroutine[Any, Any, None]:
        return _repeat(self.tick, self.first_delay, self.period, lambda e: log.error(
            "periodic registration of broker %s failed: %s", self.broker_name, e))

    async def stop(self, unregister: bool = True) -> dict[str, BaseException | None] | None:
        """Stop the periodic tasks and, unless told not to, unregister everywhere."""
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            return await self.unregister_broker_all() if unregister else None
        finally:
            await self._namesrvs.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def _repeat(call: Callable[[], Awaitable[object]], first_delay: float, period: float,
                  failed: Callable[[Exception], object], fixed_rate: bool = True) -> None:
    """``call()`` after ``first_delay``, then every ``period`` (at a fixed rate as
    scheduleAtFixedRate, or after each call) until cancelled; failures go to ``failed``."""
    await asyncio.sleep(first_delay)
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        try:
            await call()
        except Exception as e:          # not CancelledError: that one ends the loop
            failed(e)
        await asyncio.sleep(max(period - (loop.time() - started), 0) if fixed_rate else period)


def _now_ms() -> int:
    return int(time.time() * 1000)
