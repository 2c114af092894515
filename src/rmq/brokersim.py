"""Simulated brokers: REGISTER_BROKER traffic without a broker, for demos, benchmarks
and tests. One simulator, two ways to drive it:

- ``rmq broker-sim`` (:func:`main`): brokers registering through BrokerRegistrar,
  each with its own connections as real brokers have, at once and then every
  ``--period`` seconds; SIGINT or SIGTERM (or the end of ``--duration``) stops it
  cleanly: each broker unregisters from every NameServer.
- The blocking pieces the load benchmarks (bench/) drive from their own threads,
  where a registration's round trip is what is measured: :class:`SimBroker` (one
  connection, or a sibling's: thousands of brokers over a few connections),
  :func:`register_brokers`, :func:`close_all`, and the bodies :func:`encode_body`
  and :func:`body_series` (successive DataVersions patched in place: cheap to send
  in a loop).

Both name things alike: broker i is ``broker-<i>`` at 127.0.0.1:<10911 + 10 i> (its HA
port one above), a master (brokerId 0) in cluster DefaultCluster (or Cluster-<i mod
C> with --clusters C), never connected to; every broker carries every topic
(``T-00000``..., the names bench/loadgen asks for). A NameServer drops the brokers of
a closed connection, so each keeps its connection open.
"""

import asyncio
import logging
import signal
import socket
import time

from rmq import bodies
from rmq.client import parse_address
from rmq.codec import FrameDecoder, RemotingCommand, encode_frame
from rmq.errors import ResponseError
from rmq.protocol import V4_9_8, RequestCode
from rmq.registrar import BrokerRegistrar, RegistrationError, broker_identity, register_command

log = logging.getLogger(__name__)

__all__ = ["CLUSTER", "BASE_PORT", "topic_names", "broker_name", "broker_addr", "ha_server_addr",
           "encode_body", "body_series", "SimBroker", "RegistrationError", "register_brokers",
           "close_all", "SimRegistrar", "add_parser", "make_registrars", "run", "main"]

CLUSTER = "DefaultCluster"
BASE_PORT = 10911


# ---------------------------------------------------------------- names and bodies

def topic_names(count, prefix="T-", width=5, start=0):
    """``prefix`` + zero-padded index: the names bench/loadgen asks for (``T-00000``...)."""
    return [f"{prefix}{i:0{width}d}" for i in range(start, start + count)]


def broker_name(i):
    return f"broker-{i}"


def broker_addr(i, host="127.0.0.1"):
    return f"{host}:{BASE_PORT + 10 * i}"


def ha_server_addr(i, host="127.0.0.1"):
    return f"{host}:{BASE_PORT + 10 * i + 1}"


def encode_body(topics, counter, *, timestamp=None, queues=8, perm=6, compressed=False):
    """A RegisterBrokerBody (bytes) carrying ``topics`` with DataVersion ``counter``.

    ``queues``: read and write queue numbers of every topic (vary it between
    registrations to change every route, not only the DataVersion), or one number per
    topic (a sequence as long as ``topics``)."""
    per_topic = queues if isinstance(queues, (list, tuple)) else [queues] * len(topics)
    configs = [bodies.topic_config(t, q, q, perm) for t, q in zip(topics, per_topic)]
    dv = {"counter": int(counter), "stateVersion": 0,
          "timestamp": int(time.time() * 1000) if timestamp is None else int(timestamp)}
    return bodies.encode_register_broker_body(bodies.register_broker_body(configs, dv),
                                              compressed=compressed)


def body_series(topics, first_counter, *, queues=8, compressed=False, alternate_queues=False):
    """Endless RegisterBrokerBody bytes with counters first_counter, first_counter+1, ...

    JSON bodies are encoded once (per queue number) and only the counter digits are
    patched, so a registration loop costs the sender next to nothing; compressed ones
    are encoded each time. ``alternate_queues``: odd steps carry ``queues + 1`` queues,
    so that every registration changes every route, not only the DataVersion."""
    templates = {}
    counter = int(first_counter)
    step = 0
    while True:
        q = queues + 1 if alternate_queues and step % 2 else queues
        if compressed:
            yield encode_body(topics, counter, queues=q, compressed=True)
        else:
            t = templates.get(q)
            if t is None:
                # A counter of a fixed width keeps the digits patchable in place.
                t = templates[q] = (encode_body(topics, 10 ** 15, queues=q),
                                    b'"counter":%d' % 10 ** 15)
            body, marker = t
            yield body.replace(marker, b'"counter":%d' % (10 ** 15 + counter), 1)
        counter += 1
        step += 1


# ---------------------------------------------------------------- blocking brokers (bench/)

class SimBroker:
    """One simulated master broker with its own NameServer connection."""

    def __init__(self, namesrv, index, *, cluster=CLUSTER, broker_id=0, host="127.0.0.1",
                 timeout=120.0, heartbeat_timeout_ms=None, zone_name=None):
        self.namesrv = namesrv
        self.index = index
        self.cluster = cluster
        self.name = broker_name(index)
        self.addr = broker_addr(index, host)
        self.ha_addr = ha_server_addr(index, host)
        self.broker_id = broker_id
        self.timeout = timeout
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.zone_name = zone_name      # its registrations' __ZONE_NAME (None: none)
        self.sock = None
        self.decoder = FrameDecoder(64 * 1024 * 1024)
        self._ready = []
        self._channel = self        # whose connection this broker talks over

    def __repr__(self):
        return f"<SimBroker {self.name} {self.addr}>"

    def sibling(self, index, **kwargs):
        """Another broker (``index``) that registers over this broker's connection.

        A NameServer drops every broker of a closed connection, so brokers that must
        outlive each other take separate connections; thousands of brokers fit on a
        few connections this way. One request at a time per connection."""
        b = SimBroker(self.namesrv, index, cluster=self.cluster, timeout=self.timeout,
                      **kwargs)
        b._channel = self._channel
        return b

    def connect(self):
        if self._channel is not self:
            self._channel.connect()
            return self
        if self.sock is None:
            self.sock = socket.create_connection(parse_address(self.namesrv), timeout=self.timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self

    def close(self):
        """Close the connection (a sibling leaves its owner's open)."""
        if self._channel is self and self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    def call(self, cmd):
        """Send ``cmd``, return the response with its opaque (blocking)."""
        ch = self._channel
        ch.connect()
        ch.sock.sendall(encode_frame(cmd))
        while True:
            for i, resp in enumerate(ch._ready):
                if resp.is_response and resp.opaque == cmd.opaque:
                    del ch._ready[i]
                    return resp
            data = ch.sock.recv(1 << 20)
            if not data:
                ch.close()
                raise ConnectionError(f"{self.name}: connection closed by the NameServer")
            ch._ready.extend(ch.decoder.feed(data))

    def _identity(self):
        return broker_identity(self.cluster, self.name, self.broker_id, self.addr)

    def register_command(self, body, compressed=False):
        return register_command(self._identity(), self.ha_addr, body, compressed=compressed,
                                version=V4_9_8, heartbeat_timeout_ms=self.heartbeat_timeout_ms,
                                zone_name=self.zone_name)

    def register(self, body, compressed=False):
        """REGISTER_BROKER with an encoded body; returns (seconds from the start of the
        send to the whole answer, response). Raises RegistrationError unless SUCCESS."""
        cmd = self.register_command(body, compressed)
        self.connect()
        t0 = time.perf_counter()
        resp = self.call(cmd)
        seconds = time.perf_counter() - t0
        if resp.code != 0:
            raise RegistrationError(f"{self.name}: REGISTER_BROKER answered {resp.code} "
                                    f"{resp.remark!r}", {self.namesrv: ResponseError(
                                        resp.code, resp.remark, self.namesrv,
                                        RequestCode.REGISTER_BROKER)})
        return seconds, resp

    def unregister(self):
        return self.call(RemotingCommand.request(RequestCode.UNREGISTER_BROKER, self._identity(),
                                                 version=V4_9_8))


def register_brokers(namesrv, count, topics, *, counter=1, queues=8, compressed=False,
                     timeout=120.0, first_index=0, body=None, zones=0):
    """Connect and register ``count`` brokers, each carrying every topic of ``topics``
    (or the given encoded ``body``); with ``zones``, broker i is in zone
    ``zone-{i % zones}``. Returns the SimBrokers (connections open); each has
    ``.last_seconds``, the time its registration took."""
    if body is None:
        body = encode_body(topics, counter, queues=queues, compressed=compressed)
    brokers = []
    try:
        for i in range(first_index, first_index + count):
            b = SimBroker(namesrv, i, timeout=timeout,
                          zone_name=f"zone-{i % zones}" if zones else None).connect()
            brokers.append(b)
            b.last_seconds, _ = b.register(body, compressed)
    except BaseException:
        close_all(brokers)
        raise
    return brokers


def close_all(brokers, unregister=False):
    for b in brokers:
        try:
            if unregister and b._channel.sock is not None:
                b.unregister()
        except OSError as e:
            log.warning("unregister %s: %s", b.name, e)
        finally:
            b.close()


# ---------------------------------------------------------------- rmq broker-sim

class SimRegistrar(BrokerRegistrar):
    # A simulator may register faster than a real broker's 10 s floor.
    SHORTEST_PERIOD = 1.0
    bump = False                    # a new DataVersion every period (--bump)

    async def tick(self):
        if self.bump:       # the table unchanged: its encoded JSON is reused
            self._table.next_version()
        return await super().tick()


def add_parser(sub):
    p = sub.add_parser("broker-sim", help="simulated brokers registering with NameServers",
                       description="Simulated brokers registering through BrokerRegistrar, "
                                   "each with its own connections: at once, then every "
                                   "--period seconds; SIGINT or SIGTERM (or the end of "
                                   "--duration) unregisters them from every NameServer.")
    p.add_argument("-n", "--namesrv", required=True, metavar="ADDRS",
                   help="NameServer addresses, ';'-separated (namesrvAddr)")
    p.add_argument("--brokers", type=_positive, default=1, metavar="B")
    p.add_argument("--topics", type=_non_negative, default=100, metavar="T",
                   help="topics per broker (every broker carries all of them)")
    p.add_argument("--prefix", default="T-", help="topic name prefix (T-, as bench/loadgen's)")
    p.add_argument("--width", type=_positive, default=5, help="zero-padded width of the index (5)")
    p.add_argument("--first-broker", type=_non_negative, default=0, metavar="I",
                   help="index of the first broker (0)")
    p.add_argument("--clusters", type=_positive, default=1, metavar="C")
    p.add_argument("--queues", type=_positive, default=8, help="read/write queues per topic")
    p.add_argument("--period", type=float, default=30.0, metavar="S",
                   help="seconds between registrations (at least 1; default 30)")
    p.add_argument("--compressed", action="store_true", help="compressed register bodies")
    p.add_argument("--oneway", action="store_true", help="periodic registrations oneway")
    p.add_argument("--split", action="store_true",
                   help="split registration (800 topics per request)")
    p.add_argument("--bump", action="store_true",
                   help="a new DataVersion every period (the table 'changes')")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    p.add_argument("--timeout", type=float, default=6.0, metavar="S",
                   help="registration timeout (registerBrokerTimeoutMills; default 6)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=main)
    return p


def _positive(text):
    n = int(text)
    if n < 1:
        raise ValueError(text)
    return n


def _non_negative(text):
    n = int(text)
    if n < 0:
        raise ValueError(text)
    return n


def make_registrars(args):
    configs = {t: bodies.topic_config(t, args.queues, args.queues)
               for t in topic_names(args.topics, args.prefix, args.width)}
    out = []
    for i in range(args.first_broker, args.first_broker + args.brokers):
        cluster = CLUSTER if args.clusters == 1 else f"Cluster-{i % args.clusters}"
        out.append(SimRegistrar(
            args.namesrv, cluster=cluster, broker_name=broker_name(i),
            broker_addr=broker_addr(i), ha_server_addr=ha_server_addr(i),
            topics=configs, period=args.period, compressed=args.compressed,
            oneway=args.oneway, split_registration=args.split,
            register_timeout=args.timeout))
    return out


async def run(args, stop=None):
    """Start every broker, wait for ``stop`` (an Event), SIGINT/SIGTERM or the
    duration, then unregister every broker. Returns the exit status."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (RuntimeError, ValueError):      # not the main thread: the caller stops us
            pass
    registrars = make_registrars(args)
    started = []
    status = 0
    try:
        for r in registrars:
            try:
                results = await r.start()
            except RegistrationError as e:
                log.error("%s", e)
                status = 1
                break
            started.append(r)
            log.info("%s registered with %d of %d name servers (%d topics)", r.broker_name,
                     len(results), len(r.namesrv_addrs), len(r.topics))
        if status == 0:
            for r in registrars:
                r.bump = args.bump
            log.info("%d brokers registered; Ctrl-C stops them", len(started))
            try:
                await asyncio.wait_for(stop.wait(), args.duration)
            except asyncio.TimeoutError:
                pass
    finally:
        for r in started:
            outcome = await r.stop(unregister=True)
            failed = {a: e for a, e in outcome.items() if e is not None}
            if failed:
                status = 1
            log.info("%s unregistered from %d of %d name servers", r.broker_name,
                     len(outcome) - len(failed), len(outcome))
        for r in registrars[len(started):]:
            await r.stop(unregister=False)
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.remove_signal_handler(sig)
            except (RuntimeError, ValueError):
                pass
    return status


def main(args):
    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    from rmq.namesrv.server import new_event_loop
    loop = new_event_loop()
    try:
        return loop.run_until_complete(run(args))
    finally:
        loop.close()
