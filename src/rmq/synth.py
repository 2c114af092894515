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

Frames are what rmq's codec encodes for a Java 4.9.8 peer: the same bytes a
recorder would have written. ``DIR/synth.json`` holds the counts that were
generated, for checking an analysis against.
"""

import json
import os
import random
import time

import msgpack

from rmq import bodies
from rmq.codec import RemotingCommand, encode_frame
from rmq.crc32 import body_crc32
from rmq.protocol import REQUEST_NAMES, RESPONSE_NAMES, V4_9_8, RequestCode, ResponseCode
from rmq.trace import IN, OUT, DEFAULT_SEGMENT_BYTES, SegmentWriter

__all__ = ["synthesize", "add_arguments", "main"]

REGISTER_PERIOD_S = 30
POLL_PERIOD_S = 30
TOPICS_PER_CLIENT = 10
MISSING_TOPIC_SHARE = 0.05


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


class _Counts:
    def __init__(self):
        self.requests = {}
        self.answers = {}
        self.registrations = {}
        self.routes = {}

    def request(self, code):
        name = REQUEST_NAMES.get(code, f"CODE_{code}")
        self.requests[name] = self.requests.get(name, 0) + 1

    def answer(self, code):
        name = RESPONSE_NAMES.get(code, f"CODE_{code}")
        self.answers[name] = self.answers.get(name, 0) + 1


def synthesize(out, *, brokers=4, clients=20, minutes=10.0, topics=1000, dead=1, seed=1,
               start=None, segment_bytes=DEFAULT_SEGMENT_BYTES):
    """Write a synthetic trace under ``out``; returns (and writes as synth.json)
    the manifest: what was generated, counted."""
    if brokers < 1 or clients < 0 or minutes <= 0 or topics < 2 or not 0 <= dead <= brokers:
        raise ValueError(f"need brokers >= 1, clients >= 0, minutes > 0, topics >= 2 and "
                         f"0 <= dead <= brokers; got brokers={brokers} clients={clients} "
                         f"minutes={minutes} topics={topics} dead={dead}")
    rng = random.Random(seed)
    start_ns = int((time.time() if start is None else start) * 1e9)
    end_ns = start_ns + int(minutes * 60e9)
    topic_names = [f"TopicTest-{i:05d}" for i in range(topics)]
    counts = _Counts()
    events = []                     # (time_ns, seq, kind, actor): sorted, then written

    broker_ids = [f"broker-{i}" for i in range(brokers)]
    dies_at = {name: (start_ns + end_ns) // 2 for name in broker_ids[:dead]}
    for i, name in enumerate(broker_ids):
        t = start_ns + i * 1_000_000_000 // brokers       # spread over the first second
        while t < min(end_ns, dies_at.get(name, end_ns)):
            events.append((t, len(events), "register", i))
            t += REGISTER_PERIOD_S * 1_000_000_000
    for c in range(clients):
        t = start_ns + rng.randrange(POLL_PERIOD_S * 1_000_000_000)
        while t < end_ns:
            events.append((t, len(events), "poll", c))
            t += POLL_PERIOD_S * 1_000_000_000
    t = start_ns + 500_000_000
    while t < end_ns:                                   # the admin, every 10 s
        events.append((t, len(events), "admin", 0))
        t += 10_000_000_000
    events.sort()

    writer = SegmentWriter(out, segment_bytes=segment_bytes, prefix="synth")
    packer = msgpack.Packer(use_bin_type=True, autoreset=True)
    pending = []                    # packed records, flushed in batches

    def emit(time_ns, conn, peer, direction, frame):
        pending.append(packer.pack((time_ns, conn, peer, direction, frame)))
        if len(pending) >= 512:
            flush()

    def flush():
        if pending:
            writer.write_packed(b"".join(pending), len(pending))
            pending.clear()

    # brokers: one connection each; the body is encoded once and its counter patched
    configs = [bodies.topic_config(t, 8, 8) for t in topic_names]
    template = bodies.encode_register_broker_body(bodies.register_broker_body(
        configs, {"counter": 10 ** 15, "stateVersion": 0, "timestamp": 10 ** 12}))
    marker = b'"counter":%d' % 10 ** 15
    broker_conn = {i: 1 + i for i in range(brokers)}
    broker_peer = {i: f"10.0.0.{i + 1}:{40000 + i}" for i in range(brokers)}
    registered = [0] * brokers
    client_topics = []
    for c in range(clients):
        mine = rng.sample(topic_names, min(TOPICS_PER_CLIENT, topics))
        if rng.random() < MISSING_TOPIC_SHARE * TOPICS_PER_CLIENT:
            mine.append(f"Missing-{c}")         # a topic not created yet: 17 every poll
        client_topics.append(mine)
    admin_conn = brokers + clients + 1
    admin_peer = "10.0.2.1:50000"
    kv_keys = []

    opaques = {}                    # conn -> its process's next requestId

    def opaque(conn):
        n = opaques.get(conn, conn * 1000)
        opaques[conn] = n + 1
        return n

    def answer_after(t):
        return t + rng.randrange(40_000, 600_000)       # 40-600 us

    def exchange(t, conn, peer, req, resp):
        emit(t, conn, peer, IN, encode_frame(req))
        counts.request(req.code)
        if resp is not None:
            emit(answer_after(t), conn, peer, OUT, encode_frame(resp))
            counts.answer(resp.code)

    route_bodies = {}           # the brokers alive -> their route (every topic's is the same)

    def route_body(t):
        alive = tuple(i for i, name in enumerate(broker_ids) if dies_at.get(name, end_ns) > t)
        body = route_bodies.get(alive)
        if body is None:
            body = route_bodies[alive] = encode_route(alive)
        return body

    def encode_route(alive):
        return bodies.encode_topic_route_data({
            "brokerDatas": [{"brokerAddrs": {0: f"10.0.0.{i + 1}:10911"},
                             "brokerName": broker_ids[i], "cluster": "DefaultCluster"}
                            for i in alive],
            "filterServerTable": {},
            "queueDatas": [{"brokerName": broker_ids[i], "perm": 6, "readQueueNums": 8,
                            "topicSysFlag": 0, "writeQueueNums": 8} for i in alive]})

    for t, _, kind, who in events:
        if kind == "register":
            registered[who] += 1
            body = template.replace(marker, b'"counter":%d' % (10 ** 15 + registered[who]), 1)
            addr = f"10.0.0.{who + 1}:10911"
            req = RemotingCommand.request(RequestCode.REGISTER_BROKER, {
                "brokerAddr": addr, "brokerId": "0", "brokerName": broker_ids[who],
                "bodyCrc32": str(body_crc32(body)), "clusterName": "DefaultCluster",
                "compressed": "false", "haServerAddr": f"10.0.0.{who + 1}:10912"},
                body, version=V4_9_8, opaque=opaque(broker_conn[who]))
            exchange(t, broker_conn[who], broker_peer[who], req,
                     req.response(0, ext_fields={}))   # as the 4.9.8 vector: no KV, no body
            key = f"{broker_ids[who]} {addr}"
            counts.registrations[key] = counts.registrations.get(key, 0) + 1
        elif kind == "poll":
            conn = brokers + 1 + who
            peer = f"10.0.1.{who % 250 + 1}:{30000 + who}"
            for i, topic in enumerate(client_topics[who]):
                tq = t + i * 200_000
                req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                              {"topic": topic}, version=V4_9_8,
                                              opaque=opaque(conn))
                if topic.startswith("Missing-"):
                    resp = req.response(ResponseCode.TOPIC_NOT_EXIST,
                                        f"No topic route info in name server for the topic: "
                                        f"{topic}")
                else:
                    resp = req.response(0, body=route_body(tq))
                exchange(tq, conn, peer, req, resp)
                counts.routes[topic] = counts.routes.get(topic, 0) + 1
        else:
            n = len(kv_keys)
            key = f"key-{n}"
            req = RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {
                "namespace": "synth", "key": key, "value": f"value-{n}"}, version=V4_9_8,
                opaque=opaque(admin_conn))
            exchange(t, admin_conn, admin_peer, req, req.response(0))
            kv_keys.append(key)
            miss = n % 3 == 2
            req = RemotingCommand.request(RequestCode.GET_KV_CONFIG, {
                "namespace": "synth", "key": "gone" if miss else key}, version=V4_9_8,
                opaque=opaque(admin_conn))
            resp = (req.response(ResponseCode.QUERY_NOT_FOUND,
                                 "No config item, Namespace: synth Key: gone") if miss
                    else req.response(0, ext_fields={"value": f"value-{n}"}))
            exchange(t + 1_000_000, admin_conn, admin_peer, req, resp)
            if n % 5 == 4:
                req = RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, {
                    "namespace": "synth", "key": kv_keys[0]}, version=V4_9_8,
                    opaque=opaque(admin_conn))
                exchange(t + 2_000_000, admin_conn, admin_peer, req, req.response(0))
            if n % 7 == 6:
                req = RemotingCommand.request(9999, version=V4_9_8, opaque=opaque(admin_conn))
                exchange(t + 3_000_000, admin_conn, admin_peer, req, req.response(
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED, " request type 9999 not supported"))
    flush()
    writer.close()

    manifest = {
        "start_ns": start_ns, "end_ns": end_ns, "brokers": brokers, "clients": clients,
        "topics": topics, "dead": sorted(dies_at), "frames": writer.records,
        "bytes": sum(os.path.getsize(f) for f in writer.files),
        "files": [os.path.basename(f) for f in writer.files],
        "requests": counts.requests, "answers": counts.answers,
        "registrations": counts.registrations, "routes": counts.routes,
    }
    with open(os.path.join(out, "synth.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    return manifest
