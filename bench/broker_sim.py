"""Simulated brokers for load tests: REGISTER_BROKER traffic without a broker.

Registers B brokers x T topics with a NameServer over TCP, as a Java 4.9.8 broker
does (REGISTER_BROKER, code 103, JSON header version 409, JSON or compressed
RegisterBrokerBody, bodyCrc32 set). Every broker is the master (brokerId 0) of its
own broker name ``broker-{i}`` at ``127.0.0.1:{10911 + 10*i}`` (never connected to)
in cluster ``DefaultCluster``, and carries every topic (``T-00000`` ...). Each broker
keeps its own connection open: a NameServer drops the brokers of a closed connection.

As a module::

    from broker_sim import SimBroker, topic_names, encode_body
    topics = topic_names(10000)
    brokers = register_brokers("127.0.0.1:9876", 8, topics)   # [SimBroker], registered
    seconds, resp = brokers[0].register(encode_body(topics, counter=2))
    close_all(brokers, unregister=True)

As a script (registers once, holds the connections until SIGINT/SIGTERM or
--duration; --period re-registers, --bump changes the DataVersion each time)::

    python bench/broker_sim.py --namesrv 127.0.0.1:9876 -b 8 -t 10000 --period 30

A simple, self-contained tool for benchmarks; the full broker-side registration
layer is a separate piece of rmq.
"""

import argparse
import signal
import socket
import sys
import threading
import time

from rmq import bodies, body_crc32
from rmq.codec import FrameDecoder, RemotingCommand, encode_frame
from rmq.protocol import RequestCode, V4_9_8

CLUSTER = "DefaultCluster"
BASE_PORT = 10911

__all__ = ["CLUSTER", "BASE_PORT", "topic_names", "broker_name", "broker_addr", "encode_body",
           "body_series", "SimBroker", "RegistrationError", "register_brokers", "close_all", "main"]


class RegistrationError(Exception):
    """The NameServer did not answer a registration with SUCCESS."""


def topic_names(count, prefix="T-", width=5, start=0):
    """``prefix`` + zero-padded index: the names bench/loadgen asks for."""
    return [f"{prefix}{i:0{width}d}" for i in range(start, start + count)]


def broker_name(i):
    return f"broker-{i}"


def broker_addr(i, host="127.0.0.1"):
    return f"{host}:{BASE_PORT + 10 * i}"


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


def _parse_addr(text):
    host, _, port = text.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


class SimBroker:
    """One simulated master broker with its own NameServer connection."""

    def __init__(self, namesrv, index, *, cluster=CLUSTER, broker_id=0, host="127.0.0.1",
                 timeout=120.0, heartbeat_timeout_ms=None):
        self.namesrv = namesrv
        self.index = index
        self.cluster = cluster
        self.name = broker_name(index)
        self.addr = broker_addr(index, host)
        self.ha_addr = f"{host}:{BASE_PORT + 10 * index + 1}"
        self.broker_id = broker_id
        self.timeout = timeout
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
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
            self.sock = socket.create_connection(_parse_addr(self.namesrv), timeout=self.timeout)
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

    def _ext(self):
        return {"brokerAddr": self.addr, "brokerId": str(self.broker_id),
                "brokerName": self.name, "clusterName": self.cluster,
                "haServerAddr": self.ha_addr}

    def register_command(self, body, compressed=False):
        ext = self._ext()
        ext["bodyCrc32"] = str(body_crc32(body))
        ext["compressed"] = "true" if compressed else "false"
        if self.heartbeat_timeout_ms is not None:
            ext["heartbeatTimeoutMillis"] = str(int(self.heartbeat_timeout_ms))
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, version=V4_9_8)

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
                                    f"{resp.remark!r}")
        return seconds, resp

    def unregister(self):
        ext = self._ext()
        del ext["haServerAddr"]
        return self.call(RemotingCommand.request(RequestCode.UNREGISTER_BROKER, ext,
                                                 version=V4_9_8))


def register_brokers(namesrv, count, topics, *, counter=1, queues=8, compressed=False,
                     timeout=120.0, first_index=0, body=None):
    """Connect and register ``count`` brokers, each carrying every topic of ``topics``
    (or the given encoded ``body``). Returns the SimBrokers (connections open); each
    has ``.last_seconds``, the time its registration took."""
    if body is None:
        body = encode_body(topics, counter, queues=queues, compressed=compressed)
    brokers = []
    try:
        for i in range(first_index, first_index + count):
            b = SimBroker(namesrv, i, timeout=timeout).connect()
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
            print(f"broker_sim: unregister {b.name}: {e}", file=sys.stderr)
        finally:
            b.close()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--namesrv", default="127.0.0.1:9876", help="HOST:PORT (127.0.0.1:9876)")
    p.add_argument("-b", "--brokers", type=int, default=8, help="number of brokers (8)")
    p.add_argument("-t", "--topics", type=int, default=10000, help="topics per broker (10000)")
    p.add_argument("--prefix", default="T-", help="topic name prefix (T-)")
    p.add_argument("--width", type=int, default=5, help="zero-padded width of the index (5)")
    p.add_argument("--first-broker", type=int, default=0, help="index of the first broker (0)")
    p.add_argument("--queues", type=int, default=8, help="read/write queues per topic (8)")
    p.add_argument("--compressed", action="store_true", help="send compressed bodies")
    p.add_argument("--period", type=float, default=0.0,
                   help="re-register every PERIOD seconds (0: register once; Java: 30)")
    p.add_argument("--bump", action="store_true",
                   help="change the DataVersion counter on every re-registration")
    p.add_argument("--duration", type=float, default=0.0,
                   help="stop after this many seconds (0: run until SIGINT/SIGTERM)")
    p.add_argument("--unregister", action="store_true",
                   help="send UNREGISTER_BROKER (104) for every broker on exit")
    p.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args(argv)

    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    say = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))

    topics = topic_names(args.topics, args.prefix, args.width)
    body = encode_body(topics, 1, queues=args.queues, compressed=args.compressed)
    series = body_series(topics, 2, queues=args.queues, compressed=args.compressed)
    counter = 1
    t_start = time.monotonic()
    try:
        brokers = register_brokers(args.namesrv, args.brokers, topics, body=body,
                                   compressed=args.compressed, first_index=args.first_broker)
    except (OSError, RegistrationError) as e:
        print(f"broker_sim: {e}", file=sys.stderr)
        return 1
    say(f"registered {len(brokers)} brokers x {len(topics)} topics: "
        + ", ".join(f"{b.name} {b.last_seconds * 1000:.0f} ms" for b in brokers))
    status = 0
    try:
        while not stop.is_set():
            left = args.duration - (time.monotonic() - t_start) if args.duration else None
            if left is not None and left <= 0:
                break
            wait = args.period if args.period > 0 else None
            if left is not None:
                wait = left if wait is None else min(wait, left)
            if stop.wait(wait) or args.period <= 0:
                continue
            if args.bump:          # else the same DataVersion, as Java's periodic forceRegister
                counter += 1
                body = next(series)
            times = []
            for b in brokers:
                seconds, _ = b.register(body, args.compressed)
                times.append(seconds)
            say(f"re-registered {len(brokers)} brokers (DataVersion #{counter}): "
                + " ".join(f"{t * 1000:.0f}" for t in times) + " ms")
    except (OSError, RegistrationError) as e:
        print(f"broker_sim: {e}", file=sys.stderr)
        status = 1
    finally:
        close_all(brokers, unregister=args.unregister)
        say("closed" + (" (unregistered)" if args.unregister else ""))
    return status


if __name__ == "__main__":
    sys.exit(main())
