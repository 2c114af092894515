"""``rmq trace synth``: protocol-exact synthetic traces, for tests and benchmarks.

A NameServer's traffic as Java brokers and clients make it, on a virtual clock:
- every broker (a master, all in DefaultCluster, each carrying every topic)
  registers every 30 s with its whole topic table (REGISTER_BROKER, a real
  RegisterBrokerBody with bodyCrc32) and gets its answer;
- one broker dies halfway through (``--dead`` brokers; 0 for none): it stops
  registering and its connection goes silent;
- every client asks for the route of each of its topics every 30 s
  (pollNameServerInterval); some of those topics do not exist (17 TOPIC_NOT_EXIST);
- an admin connection puts, gets and deletes KV config (some gets miss: 22) and
  sends an unknown request code (3) now and then.

Frames are what rmq's codec encodes: requests from Java 4.9.8 peers (version 409),
answers as rmq gives them (JSON, version 413 as Java 5.0.0's): the same bytes a
recorder would have written. ``DIR/synth.json`` holds the counts that were
generated, for checking an analysis against.
"""

import collections
import json
import os
import random
import time

import msgpack

from rmq import bodies
from rmq.codec import RemotingCommand, encode_frame
from rmq.crc32 import body_crc32
from rmq.protocol import (IN, OUT, V4_9_8, RequestCode, ResponseCode, code_name)
from rmq.trace.segments import DEFAULT_SEGMENT_BYTES, SegmentWriter

__all__ = ["synthesize", "add_arguments", "main"]

REGISTER_PERIOD_S = 30
POLL_PERIOD_S = 30
TOPICS_PER_CLIENT = 10
MISSING_TOPIC_SHARE = 0.05
_COUNTER_MARKER = b'"counter":%d' % 10 ** 15
_ADMIN_PEER = "10.0.2.1:50000"


def add_arguments(p):
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the segments")
    p.add_argument("--brokers", type=int, default=4, metavar="B")
    p.add_argument("--clients", type=int, default=20, metavar="C")
    p.add_argument("--minutes", type=float, default=10.0, metavar="M")
    p.add_argument("--topics", type=int, default=1000, metavar="T",
                   help="topics on every broker (a registration body grows with them)")
    p.add_argument("--dead", type=int, default=1,
                   help="brokers that die halfway through (default 1)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--start", type=float, default=None,
                   help="the trace's first second (epoch seconds; default: now)")
    p.add_argument("--segment-mib", type=int, default=DEFAULT_SEGMENT_BYTES >> 20)


def main(args):
    t0 = time.monotonic()
    manifest = synthesize(args.out, brokers=args.brokers, clients=args.clients,
                          minutes=args.minutes, topics=args.topics, dead=args.dead,
                          seed=args.seed, start=args.start,
                          segment_bytes=args.segment_mib << 20)
    print(f"{manifest['frames']:,} frames, {manifest['bytes'] / 1e6:,.1f} MB in "
          f"{len(manifest['files'])} segments under {args.out} "
          f"({time.monotonic() - t0:.1f} s)")
    return 0


def synthesize(out, *, brokers=4, clients=20, minutes=10.0, topics=1000, dead=1, seed=1,
               start=None, segment_bytes=DEFAULT_SEGMENT_BYTES):
    """Write a synthetic trace under ``out``; returns (and writes as synth.json)
    the manifest: what was generated, counted."""
    if brokers < 1 or clients < 0 or minutes <= 0 or topics < 2 or not 0 <= dead <= brokers:
        raise ValueError(f"need brokers >= 1, clients >= 0, minutes > 0, topics >= 2 and "
                         f"0 <= dead <= brokers; got brokers={brokers} clients={clients} "
                         f"minutes={minutes} topics={topics} dead={dead}")
    return _Synthesizer(out, brokers, clients, minutes, topics, dead, seed, start,
                        segment_bytes).run()


class _Synthesizer:
    """One synthetic trace: the actors' timetable (:meth:`_events`), then each event's
    frames (:meth:`_register`, :meth:`_poll`, :meth:`_admin`) written in time order."""

    def __init__(self, out, brokers, clients, minutes, topics, dead, seed, start, segment_bytes):
        self.out = out
        self.brokers = brokers
        self.clients = clients
        self.topics = topics
        self.rng = random.Random(seed)
        self.start_ns = int((time.time() if start is None else start) * 1e9)
        self.end_ns = self.start_ns + int(minutes * 60e9)
        self.topic_names = [f"TopicTest-{i:05d}" for i in range(topics)]
        self.requests, self.answers = collections.Counter(), collections.Counter()
        self.registrations, self.routes = collections.Counter(), collections.Counter()
        self.broker_ids = [f"broker-{i}" for i in range(brokers)]
        self.dies_at = {name: (self.start_ns + self.end_ns) // 2 for name in self.broker_ids[:dead]}
        self.writer = SegmentWriter(out, segment_bytes=segment_bytes, prefix="synth")
        self.packer = msgpack.Packer(use_bin_type=True, autoreset=True)
        self.pending = []           # packed records, flushed in batches
        self.opaques = {}           # conn -> its process's next requestId
        self.route_bodies = {}      # the brokers alive -> their route (every topic's is the same)
        self.registered = [0] * brokers
        self.kv_keys = []
        self.admin_conn = brokers + clients + 1

    def run(self):
        events = self._events()
        # brokers: one connection each; the body is encoded once and its counter patched
        configs = [bodies.topic_config(t, 8, 8) for t in self.topic_names]
        self.template = bodies.encode_register_broker_body(bodies.register_broker_body(
            configs, {"counter": 10 ** 15, "stateVersion": 0, "timestamp": 10 ** 12}))
        self.client_topics = []
        for c in range(self.clients):
            mine = self.rng.sample(self.topic_names, min(TOPICS_PER_CLIENT, self.topics))
            if self.rng.random() < MISSING_TOPIC_SHARE * TOPICS_PER_CLIENT:
                mine.append(f"Missing-{c}")     # a topic not created yet: 17 every poll
            self.client_topics.append(mine)
        act = {"register": self._register, "poll": self._poll, "admin": self._admin}
        for t, _, kind, who in events:
            act[kind](t, who)
        self._flush()
        self.writer.close()
        return self._manifest()

    def _events(self):
        """(time_ns, seq, kind, actor) of every event, sorted."""
        start_ns, end_ns, rng = self.start_ns, self.end_ns, self.rng
        events = []
        for i, name in enumerate(self.broker_ids):
            t = start_ns + i * 1_000_000_000 // self.brokers     # spread over the first second
            while t < min(end_ns, self.dies_at.get(name, end_ns)):
                events.append((t, len(events), "register", i))
                t += REGISTER_PERIOD_S * 1_000_000_000
        for c in range(self.clients):
            t = start_ns + rng.randrange(POLL_PERIOD_S * 1_000_000_000)
            while t < end_ns:
                events.append((t, len(events), "poll", c))
                t += POLL_PERIOD_S * 1_000_000_000
        t = start_ns + 500_000_000
        while t < end_ns:                                   # the admin, every 10 s
            events.append((t, len(events), "admin", 0))
            t += 10_000_000_000
        events.sort()
        return events

    def _emit(self, time_ns, conn, peer, direction, frame):
        self.pending.append(self.packer.pack((time_ns, conn, peer, direction, frame)))
        if len(self.pending) >= 512:
            self._flush()

    def _flush(self):
        if self.pending:
            self.writer.write_packed(b"".join(self.pending), len(self.pending))
            self.pending.clear()

    def _request(self, code, conn, ext_fields=None, body=b""):
        n = self.opaques.get(conn, conn * 1000)
        self.opaques[conn] = n + 1
        return RemotingCommand.request(code, ext_fields, body, version=V4_9_8, opaque=n)

    def _exchange(self, t, conn, peer, req, resp):
        self._emit(t, conn, peer, IN, encode_frame(req))
        self.requests[code_name(req.code, False)] += 1
        if resp is not None:
            answer_t = t + self.rng.randrange(40_000, 600_000)     # 40-600 us
            self._emit(answer_t, conn, peer, OUT, encode_frame(resp))
            self.answers[code_name(resp.code, True)] += 1

    def _route_body(self, t):
        alive = tuple(i for i, name in enumerate(self.broker_ids)
                      if self.dies_at.get(name, self.end_ns) > t)
        body = self.route_bodies.get(alive)
        if body is None:
            body = self.route_bodies[alive] = bodies.encode_topic_route_data({
                "brokerDatas": [{"brokerAddrs": {0: f"10.0.0.{i + 1}:10911"},
                                 "brokerName": self.broker_ids[i], "cluster": "DefaultCluster"}
                                for i in alive],
                "filterServerTable": {},
                "queueDatas": [{"brokerName": self.broker_ids[i], "perm": 6, "readQueueNums": 8,
                                "topicSysFlag": 0, "writeQueueNums": 8} for i in alive]})
        return body

    def _register(self, t, who):
        self.registered[who] += 1
        body = self.template.replace(_COUNTER_MARKER, b'"counter":%d' % (
            10 ** 15 + self.registered[who]), 1)
        addr = f"10.0.0.{who + 1}:10911"
        name = self.broker_ids[who]
        req = self._request(RequestCode.REGISTER_BROKER, 1 + who, {
            "brokerAddr": addr, "brokerId": "0", "brokerName": name,
            "bodyCrc32": str(body_crc32(body)), "clusterName": "DefaultCluster",
            "compressed": "false", "haServerAddr": f"10.0.0.{who + 1}:10912"}, body)
        self._exchange(t, 1 + who, f"10.0.0.{who + 1}:{40000 + who}", req,
                       req.response(0, ext_fields={}))   # as the 4.9.8 vector: no KV, no body
        self.registrations[f"{name} {addr}"] += 1

    def _poll(self, t, who):
        conn = self.brokers + 1 + who
        peer = f"10.0.1.{who % 250 + 1}:{30000 + who}"
        for i, topic in enumerate(self.client_topics[who]):
            tq = t + i * 200_000
            req = self._request(RequestCode.GET_ROUTEINFO_BY_TOPIC, conn, {"topic": topic})
            if topic.startswith("Missing-"):
                resp = req.response(ResponseCode.TOPIC_NOT_EXIST,
                                    f"No topic route info in name server for the topic: {topic}")
            else:
                resp = req.response(0, body=self._route_body(tq))
            self._exchange(tq, conn, peer, req, resp)
            self.routes[topic] += 1

    def _admin(self, t, _):
        conn, peer, kv_keys = self.admin_conn, _ADMIN_PEER, self.kv_keys
        n = len(kv_keys)
        key = f"key-{n}"
        req = self._request(RequestCode.PUT_KV_CONFIG, conn, {
            "namespace": "synth", "key": key, "value": f"value-{n}"})
        self._exchange(t, conn, peer, req, req.response(0))
        kv_keys.append(key)
        miss = n % 3 == 2
        req = self._request(RequestCode.GET_KV_CONFIG, conn, {
            "namespace": "synth", "key": "gone" if miss else key})
        resp = (req.response(ResponseCode.QUERY_NOT_FOUND,
                             "No config item, Namespace: synth Key: gone") if miss
                else req.response(0, ext_fields={"value": f"value-{n}"}))
        self._exchange(t + 1_000_000, conn, peer, req, resp)
        if n % 5 == 4:
            req = self._request(RequestCode.DELETE_KV_CONFIG, conn,
                                {"namespace": "synth", "key": kv_keys[0]})
            self._exchange(t + 2_000_000, conn, peer, req, req.response(0))
        if n % 7 == 6:
            req = self._request(9999, conn)
            self._exchange(t + 3_000_000, conn, peer, req, req.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, " request type 9999 not supported"))

    def _manifest(self):
        writer = self.writer
        manifest = {
            "start_ns": self.start_ns, "end_ns": self.end_ns, "brokers": self.brokers,
            "clients": self.clients, "topics": self.topics, "dead": sorted(self.dies_at),
            "frames": writer.records,
            "bytes": sum(os.path.getsize(f) for f in writer.files),
            "files": [os.path.basename(f) for f in writer.files],
            "requests": dict(self.requests), "answers": dict(self.answers),
            "registrations": dict(self.registrations), "routes": dict(self.routes),
        }
        with open(os.path.join(self.out, "synth.json"), "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
        return manifest
