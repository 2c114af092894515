"""The broker's side of the NameServer conversation (Java: BrokerOuterAPI and the
registration half of BrokerController).

:class:`BrokerRegistrar` registers one broker's topic table with every NameServer
of a namesrvAddr list, all at once: REGISTER_BROKER (103) with bodyCrc32 always
set, JSON or compressed, sync or oneway, each bounded by ``register_timeout`` and
the whole call bounded by it too (the seed's CountDownLatch.await). It re-registers
on a period, asking QUERY_DATA_VERSION (322) first when ``force_register`` is off;
sends the 5.x light heartbeat (BROKER_HEARTBEAT, 904) when asked; splits a large
table over several requests; and unregisters (104) everywhere on stop.

The body is encoded once per DataVersion and reused for every NameServer and every
period until the table changes: a 10,000-topic table costs its encoding and CRC
once, not per NameServer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from rmq import bodies
from rmq.client import RemotingClient, split_addresses
from rmq.codec import RemotingCommand
from rmq.crc32 import body_crc32
from rmq.errors import RemotingError, ResponseError, RmqError
from rmq.protocol import DEFAULT_MAX_FRAME_LENGTH, V4_9_8, RequestCode, ResponseCode

if TYPE_CHECKING:
    from typing_extensions import Self

_T = TypeVar("_T")

log = logging.getLogger("rmq.registrar")

__all__ = ["BrokerRegistrar", "RegisterResult", "RegistrationError", "register_period"]

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


class RegistrationError(RmqError):
    """No NameServer answered a registration. ``errors``: address -> exception."""

    def __init__(self, message: str, errors: dict[str, BaseException]) -> None:
        super().__init__(message)
        self.errors = errors


@dataclasses.dataclass
class RegisterResult:
    """One NameServer's answer to REGISTER_BROKER (Java: RegisterBrokerResult)."""
    namesrv: str
    master_addr: str | None = None
    ha_server_addr: str | None = None
    kv_table: dict[str, str] = dataclasses.field(default_factory=dict)


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
    results (the masterAddr, haServerAddr and KV table of the answers).
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
                 on_results: Callable[[list[RegisterResult]], object] | None = None) -> None:
        self.namesrv_addrs = split_addresses(namesrv_addr)
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
        self._client = client
        self._own_client = client is None
        self._topics: dict[str, Any] = {}
        self._table_blob: bytes | None = None  # the topicConfigTable's JSON, once needed
        self._data_version: dict[str, Any] = None  # type: ignore[assignment]  # update_topics sets it
        # (key, [(body, crc32)]) for the current table
        self._encoded: tuple[tuple[Any, ...], list[tuple[bytes, int]]] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.last_results: list[RegisterResult] = []
        self.update_topics(topics or {}, data_version)

    # ------------------------------------------------------------ the table

    @property
    def topics(self) -> dict[str, Any]:
        """The topic table: {name: TopicConfig dict} (a copy)."""
        return dict(self._topics)

    @property
    def data_version(self) -> dict[str, Any]:
        return dict(self._data_version)

    def update_topics(self, topics: dict[str, Any] | Iterable[Mapping[str, Any]],
                      data_version: Mapping[str, Any] | None = None) -> None:
        """Replace the topic table (change it only through here: its encoding is
        kept until then). Without ``data_version`` the DataVersion moves on
        (counter + 1, timestamp now) as Java's nextVersion does."""
        if not isinstance(topics, dict):
            topics = {tc["topicName"]: tc for tc in topics}
        for name, tc in topics.items():
            if not isinstance(tc, dict) or tc.get("topicName", name) != name:
                raise ValueError(f"topic {name!r}: expected a TopicConfig dict with that "
                                 f"topicName, got {tc!r}")
        self._topics = dict(topics)
        self._table_blob = None         # encoded again on the next registration
        if data_version is not None:
            self._data_version = dict(data_version)
        elif self._data_version is None:
            self._data_version = {"counter": 0, "timestamp": _now_ms()}
        else:
            self._next_version()
        self._encoded = None

    def _chunks(self, compressed: bool) -> list[tuple[bytes, int]]:
        """The encoded bodies to send, with their CRC32s. One body with the current
        DataVersion, encoded once and reused until the table changes; or, with
        split registration (or a table too big for one frame), one body per
        ``split_size`` topics plus a last one with the rest (maybe none), each with
        the DataVersion moved on first, as Java's registerBrokerAll does: every
        chunk is then news to the NameServer and is applied."""
        key = (compressed, self._data_version.get("counter"), self._data_version.get("timestamp"))
        if not self.split_registration:
            if self._encoded is not None and self._encoded[0] == key:
                return self._encoded[1]
            body = self._encode(self._topics, compressed)
            if len(body) <= self.max_frame_length - _HEADER_ROOM:
                self._encoded = (key, [(body, body_crc32(body))])
                return self._encoded[1]
            log.info("broker %s: %d topics do not fit in one %d-byte frame: registering "
                     "them in parts of %d", self.broker_name, len(self._topics),
                     self.max_frame_length, self.split_size)
        configs = list(self._topics.values())
        full = len(configs) - len(configs) % self.split_size
        parts = [configs[i:i + self.split_size] for i in range(0, full, self.split_size)]
        parts.append(configs[full:])
        out: list[tuple[bytes, int]] = []
        for part in parts:
            self._next_version()
            body = self._encode(part, compressed)
            out.append((body, body_crc32(body)))
        return out

    def _encode(self, configs: dict[str, Any] | list[Any], compressed: bool) -> bytes:
        """RegisterBrokerBody of ``configs`` (the table, or a list of its configs)."""
        if isinstance(configs, dict) and not compressed:
            # What encode_register_broker_body writes, with the table's JSON kept
            # until the table changes: a new DataVersion alone (broker-sim --bump)
            # costs a join (tests/test_broker.py checks the bytes).
            return b"".join((b'{"filterServerList":', bodies.json_dumps(list(self.filter_servers)),
                             b',"topicConfigSerializeWrapper":{"dataVersion":',
                             bodies.json_dumps(self._data_version), b',"topicConfigTable":',
                             self._table_json(), b"}}"))
        if isinstance(configs, dict):
            configs = list(configs.values())
        body = bodies.register_broker_body(configs, self._data_version, self.filter_servers)
        return bodies.encode_register_broker_body(body, compressed=compressed)

    def _table_json(self) -> bytes:
        if self._table_blob is None:
            self._table_blob = bodies.json_dumps(self._topics)
        return self._table_blob

    def _next_version(self) -> None:
        # DataVersion.nextVersion: counter + 1, timestamp now (5.x: stateVersion 0).
        dv = self._data_version
        self._data_version = dict(dv, counter=dv.get("counter", 0) + 1, timestamp=_now_ms())

    # ------------------------------------------------------------ requests

    def _remoting_client(self) -> RemotingClient:
        if self._client is None:
            self._client = RemotingClient(max_frame_length=self.max_frame_length)
        return self._client

    def _identity(self) -> dict[str, str]:
        return {"brokerAddr": self.broker_addr, "brokerId": str(self.broker_id),
                "brokerName": self.broker_name, "clusterName": self.cluster}

    def _register_command(self, body: bytes, crc: int, compressed: bool,
                          oneway: bool) -> RemotingCommand:
        ext = self._identity()
        ext["haServerAddr"] = self.ha_server_addr
        ext["compressed"] = "true" if compressed else "false"
        ext["bodyCrc32"] = str(crc)
        if self.enable_acting_master is not None:
            ext["enableActingMaster"] = "true" if self.enable_acting_master else "false"
        if self.heartbeat_timeout_ms is not None:
            ext["heartbeatTimeoutMillis"] = str(int(self.heartbeat_timeout_ms))
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, oneway=oneway,
                                       version=self.version)

    async def _register_one(self, addr: str, body: bytes, crc: int, compressed: bool,
                            oneway: bool, timeout: float) -> RegisterResult | None:
        cmd = self._register_command(body, crc, compressed, oneway)
        if oneway:
            await self._remoting_client().invoke_oneway(addr, cmd, timeout)
            return None
        resp = await self._remoting_client().invoke(addr, cmd, timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise ResponseError(resp.code, resp.remark, addr, RequestCode.REGISTER_BROKER)
        ext = resp.ext_fields or {}
        return RegisterResult(addr, ext.get("masterAddr") or None, ext.get("haServerAddr") or None,
                              bodies.decode_kv_table(resp.body) if resp.body else {})

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
        chunks = self._chunks(compressed)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.register_timeout
        results: dict[str, RegisterResult | None] = {}
        errors: dict[str, BaseException] = {}
        for body, crc in chunks:
            timeout = max(deadline - loop.time(), 0.001)
            pending = [a for a in (self.namesrv_addrs if addrs is None else addrs)
                       if a not in errors]
            if not pending:
                break
            got, failed = await self._each(
                lambda addr: self._register_one(addr, body, crc, compressed, oneway, timeout),
                pending, timeout)
            for addr, e in failed.items():
                errors.setdefault(addr, e)
            results.update(got)
        for addr in errors:
            results.pop(addr, None)
            log.warning("register broker %s to name server %s failed: %s", self.broker_name,
                        addr, errors[addr])
        if not results:
            hint = ""
            if len(self._topics) == 1:
                hint = (" (a NameServer refuses a broker's first registration when its table "
                        "has exactly one topic: add the broker's system topics, "
                        "rmq.bodies.broker_system_topics)")
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

    async def _each(self, call: Callable[[str], Coroutine[Any, Any, _T]],
                    addrs: Iterable[str] | None = None, timeout: float | None = None
                    ) -> tuple[dict[str, _T], dict[str, BaseException]]:
        """Run ``call(addr)`` for every NameServer (or those of ``addrs``) at once,
        within ``timeout`` (register_timeout) overall; returns ({addr: result},
        {addr: exception}). Nothing outlives it, not even when it is cancelled."""
        timeout = self.register_timeout if timeout is None else timeout
        tasks = {addr: asyncio.ensure_future(call(addr))
                 for addr in (self.namesrv_addrs if addrs is None else addrs)}
        if not tasks:
            return {}, {}
        try:
            await asyncio.wait(tasks.values(), timeout=timeout)
        finally:
            late = [t for t in tasks.values() if not t.done()]
            for t in late:
                t.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        results: dict[str, _T] = {}
        errors: dict[str, BaseException] = {}
        for addr, t in tasks.items():
            if t.cancelled():
                errors[addr] = RemotingError(f"no answer within {timeout:g} s", addr)
            elif t.exception() is not None:
                errors[addr] = t.exception()  # type: ignore[assignment]  # not None here
            else:
                results[addr] = t.result()
        return results, errors

    async def need_register(self) -> list[str]:
        """QUERY_DATA_VERSION to every NameServer: the addresses of those whose data
        differs from this broker's DataVersion (empty: none), in namesrvAddr order.
        One that fails to answer counts as changed, as in Java; one that answers
        another code does not (Java adds nothing for it)."""
        dv_body = bodies.encode_data_version(self._data_version)
        deadline = asyncio.get_running_loop().time() + self.register_timeout

        async def query(addr: str) -> bool:
            cmd = RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, self._identity(),
                                          dv_body, version=self.version)
            remaining = max(deadline - asyncio.get_running_loop().time(), 0.001)
            resp = await self._remoting_client().invoke(addr, cmd, remaining)
            if resp.code != ResponseCode.SUCCESS:
                return False            # Java: changed stays false on another code
            changed = (resp.ext_fields or {}).get("changed") == "true"
            if resp.body:
                theirs = bodies.decode_data_version(resp.body)
                if not _same_data_version(theirs, self._data_version):
                    changed = True
            return changed

        results, errors = await self._each(query)
        for addr, e in errors.items():
            log.warning("query data version from name server %s failed: %s", addr, e)
        return [a for a in self.namesrv_addrs if a in errors or results.get(a)]

    async def heartbeat_all(self) -> None:
        """BROKER_HEARTBEAT (904), oneway, to every NameServer (5.x light heartbeat)."""
        async def beat(addr: str) -> None:
            cmd = RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, {
                "brokerAddr": self.broker_addr, "brokerName": self.broker_name,
                "clusterName": self.cluster}, oneway=True, version=self.version)
            await self._remoting_client().invoke_oneway(addr, cmd, HEARTBEAT_TIMEOUT)
        _, errors = await self._each(beat)
        for addr, e in errors.items():
            log.debug("heartbeat to name server %s failed: %s", addr, e)

    async def unregister_broker_all(self) -> dict[str, BaseException | None]:
        """UNREGISTER_BROKER (104) to every NameServer at once; failures are logged.
        Returns {addr: None or the exception}."""
        async def unregister(addr: str) -> None:
            cmd = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, self._identity(),
                                          version=self.version)
            resp = await self._remoting_client().invoke(addr, cmd, UNREGISTER_TIMEOUT)
            if resp.code != ResponseCode.SUCCESS:
                raise ResponseError(resp.code, resp.remark, addr, RequestCode.UNREGISTER_BROKER)
            log.info("unregister broker %s from name server %s OK", self.broker_name, addr)

        results, errors = await self._each(unregister)
        for addr, e in errors.items():
            log.warning("unregister broker %s from name server %s failed: %s",
                        self.broker_name, addr, e)
        return {addr: errors.get(addr) for addr in self.namesrv_addrs}

    # ------------------------------------------------------------ the periodic task

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
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._periodically()))
        if self.light_heartbeat:
            self._tasks.append(loop.create_task(self._heartbeats()))
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

    async def _periodically(self) -> None:
        await asyncio.sleep(self.first_delay)
        while True:
            started = asyncio.get_running_loop().time()
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as e:      # logged; the next period tries again
                log.error("periodic registration of broker %s failed: %s", self.broker_name, e)
            # At a fixed rate, as scheduleAtFixedRate.
            elapsed = asyncio.get_running_loop().time() - started
            await asyncio.sleep(max(self.period - elapsed, 0))

    async def _heartbeats(self) -> None:
        await asyncio.sleep(min(1.0, self.heartbeat_interval))
        while True:
            try:
                await self.heartbeat_all()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.debug("heartbeat round failed: %s", e)
            await asyncio.sleep(self.heartbeat_interval)

    async def stop(self, unregister: bool = True) -> dict[str, BaseException | None] | None:
        """Stop the periodic tasks and, unless told not to, unregister everywhere."""
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            if unregister:
                return await self.unregister_broker_all()
            return None
        finally:
            if self._own_client and self._client is not None:
                await self._client.close()
                self._client = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def _same_data_version(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    # DataVersion.equals: counter, timestamp and (5.x) stateVersion.
    return all(a.get(k, 0) == b.get(k, 0) for k in ("counter", "timestamp", "stateVersion"))


def _now_ms() -> int:
    return int(time.time() * 1000)
