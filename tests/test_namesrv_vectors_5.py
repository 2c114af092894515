"""Replay of the Java 5.0.0 capture (tests/vectors/java-5.0.0) against a running rmq
NameServer, session by session, every answer compared with Java's.

Order, connections and closes
-----------------------------
index.json gives each frame ``capture``: its session (``default``, or
``rocketmq-serialize-namesrv`` for the NameServer started with
``-Drocketmq.serialize.type=ROCKETMQ``), its sequence number ``seq`` in that session
(requests and answers interleaved as they crossed), its client connection ``conn`` and
the ``step`` that made it. Each session is replayed against a NameServer of its own, in
``seq`` order: one TCP connection per captured ``conn`` (opened at its first request),
each request sent as captured, byte for byte, on its connection, and each answer read
where the capture has it (so the heartbeat 904 and the oneway 322 are sent before the
answer to the request that preceded them, as they crossed). A connection closes after
its last exchange: a client's after its step; a broker's after its UNREGISTER at stop
(``stop_v498``, ``stop_acting``, ``stop_zone``), which is also where Java's broker closed
it. rmq drops a broker whose connection closes, as Java does: no broker connection
closes before its broker has left.

Where a frame really was (the index quirk)
------------------------------------------
Frames that are byte-identical got the capture info of the first occurrence of those
bytes in the whole recording. A request and its answer (``response_file`` /
``response_to``) are therefore placed so (:func:`captured_requests`):

- both captures on one connection, the answer after the request: both are their own;
- the answer's capture comes before the request's (an answer cannot precede its
  request): it is an earlier answer with the same bytes (e.g. every empty code-0 answer
  with opaque 0 points at the first one, seq 348); the request's is its own and its
  answer follows it on its connection;
- otherwise (the answer on another connection or in the other session, after the
  request's capture): the request's capture is an earlier occurrence of its bytes (an
  mqadmin request carries the same Signature each time) and the answer's is its own:
  the request goes on the answer's connection, just before it (``step`` agrees:
  ``topicRoute_order_conf``, ``clusterList_4``, ``clusterList_empty``, ``srv_*``).
  The place the request's capture names is then replayed too when no other request
  file was sent there: ``106_get_broker_cluster_info_five_request.bin``'s bytes first
  crossed at seq 14 (mqadmin clusterList, conn 3), answered at seq 15 on conn 3 with
  the bytes of ``106_get_broker_cluster_info_raw_response.bin`` (its capture).

:data:`MOVED` and :data:`ANSWERS_AFTER_REQUEST` pin what these rules give.

State from outside the set
--------------------------
Some answers depend on requests the set does not hold. Each is rebuilt by a request
derived from a kept one (:func:`derived_requests`, each with why and what it is derived from):
the topics mqadmin updateTopic created on the brokers (V5Topic on v5broker and
v5acting, V5SoloTopic and V5DelTopic on v5broker: the brokers' incremental 103s, each
holding only the new topic; v5acting's DataVersion is the one its 322 shows the
NameServer had stored), v5rmq's registration (ROCKETMQ header; Java's answer to it is
the capture of ``103_register_broker_compat_response.bin``, seq 888, step
``boot_rmq``), the KV puts of peer_key2 and rmq_key, and the UNREGISTERs of v5compat
and v5rmq at their stop. A derived request's answer is compared with Java's answer to
the same request of the same broker or tool in the same state (the file named), its
opaque with the derived request's own. :data:`LISTED` names the requests whose answer
still cannot be rebuilt (none now: the derived requests rebuild it all), with what is checked of them.

What is compared
----------------
Every field of every answer: serialize type, code, flag, remark, ext fields (as a map:
Java's order is HashMap order; None and {} differ), language, version, opaque (Java's;
the request's own for a derived request), the top-level field names of a JSON header in
order (Java writes them sorted, ``extFields``/``remark`` only when not null), and the
body: JSON as parsed objects with their key order (Java's defined orders: the route
body's standard form sorts maps; HashMap/HashSet/ConcurrentHashMap iteration orders of
the cluster, topic-list and KV bodies) and form (legacy ``{0:"addr"}`` keys versus
standard JSON); properties bodies (319, 47) key by key in Java's order (a 319 answer
may also show rmq's other settings, rmq.namesrv.config.FIELDS, and no other key; a 47
answer only the keys asked); anything else byte for byte. Left out, by name only
(:data:`EXCLUDED`): the paths in the 47 and 319 bodies and 319's listenPort. Nothing else varies between runs here: requests go byte for byte
(their opaque, bodyCrc32 and Signature as captured) and the DataVersions in the
answers (322) are the ones the captured and derived registrations carry.

A mismatch does not stop the replay: all of a session's are reported together.
"""

import functools
import json
import socket
import zlib
from dataclasses import dataclass

import pytest

import parts
import rmq
from nameserver import LOOPS, Client, parse_json_body, running_namesrv
from rmq.namesrv.config import FIELDS as CONFIG_FIELDS
from support import VECTOR_SETS, split_frame

V5 = VECTOR_SETS["java-5.0.0"]
DEFAULT, RMQSRV = "default", "rocketmq-serialize-namesrv"
SESSIONS = (DEFAULT, RMQSRV)
TYPE_NAMES = {0: "JSON", 1: "ROCKETMQ"}

#: The capture's own time (v5broker's boot DataVersion): the NameServer's clock stays
#: there, so that no broker expires while the replay runs (in the capture v5acting and
#: v5compat, registered with heartbeatTimeoutMillis=10000, kept heartbeating each second).
CAPTURE_MS = 1795696416448
#: What the Java NameServer of the capture was started with (the 47/319 bodies show it).
ROCKETMQ_HOME = "/home/rocketmq/namesrv-29876"
#: The setting of the second session's NameServer, under Java's name.
SERIALIZE_TYPE_KEY = "rocketmq.serialize.type"


@pytest.fixture(params=LOOPS)
def loop(request):
    if request.param == "uvloop":
        parts.require("uvloop")
    return request.param


# ---------------------------------------------------------------- what is replayed

@dataclass(frozen=True)
class Replayed:
    """One request of a session's replay."""
    name: str                   # the request file, or a derived request's name
    session: str
    place: float                # its place in the session's capture order (seq)
    conn: int                   # the captured connection it goes over
    frame: bytes                # what is sent
    answer: str | None          # the file of Java's answer; None: oneway, no answer
    answer_place: float | None  # where the answer is read
    captured: bool              # the request file, byte for byte
    why: str = ""               # how it was placed, or why it was derived

    @property
    def code(self):
        stype, header, _ = split_frame(self.frame)
        return int.from_bytes(header[:2], "big") if stype else json.loads(header)["code"]


def _capture(entry):
    c = entry["capture"]
    return c["session"], c["seq"], c["conn"]


def captured_requests():
    """Every request file at its real place, with where its answer is read; plus the
    places a moved request's bytes were also sent (see the module doc)."""
    placed, moved = [], []
    for entry in V5.frames:
        if entry["kind"] != "request":
            continue
        name = entry["file"]
        session, seq, conn = _capture(entry)
        answer = entry.get("response_file")
        if answer is None:
            placed.append(Replayed(name, session, seq, conn, V5.bytes(name), None, None, True,
                                   "oneway: Java sent no answer"))
            continue
        a_session, a_seq, a_conn = _capture(V5.by_file[answer])
        if (a_session, a_conn) == (session, conn) and a_seq > seq:
            placed.append(Replayed(name, session, seq, conn, V5.bytes(name), answer, a_seq, True))
        elif a_session == session and a_seq < seq:
            placed.append(Replayed(
                name, session, seq, conn, V5.bytes(name), answer, seq + 0.5, True,
                f"the answer's capture (seq {a_seq}, conn {a_conn}) is an earlier answer "
                f"with the same bytes: it follows its request"))
        else:
            placed.append(Replayed(
                name, a_session, a_seq - 0.5, a_conn, V5.bytes(name), answer, a_seq, True,
                f"its capture ({session} seq {seq}, conn {conn}) is an earlier occurrence "
                f"of its bytes: sent just before its answer"))
            moved.append((name, session, seq, conn))
    own = {(r.session, r.place) for r in placed}
    for name, session, seq, conn in moved:
        if (session, seq) in own:
            continue            # another request file's own place
        later = sorted((e["capture"]["seq"], e["file"]) for e in V5.frames
                       if e["kind"] == "response" and _capture(e)[0::2] == (session, conn)
                       and e["capture"]["seq"] > seq)
        a_seq, answer = later[0]
        same = [f for s, f in later if s == a_seq]
        assert len({V5.bytes(f) for f in same}) == 1, same
        assert V5.by_file[answer]["request_code"] == V5.by_file[name]["code"]
        placed.append(Replayed(
            name, session, seq, conn, V5.bytes(name), answer, a_seq, True,
            f"the same bytes also crossed here (step {V5.by_file[name]['capture']['step']}), "
            f"answered at seq {a_seq} with the bytes of {answer}"))
    return placed


#: Requests whose index capture is an earlier occurrence of their bytes: (session, conn,
#: seq of the answer) where they really were.
MOVED = {
    "105_get_routeinfo_order_conf_request.bin": (DEFAULT, 20, 385),
    "106_get_broker_cluster_info_five_request.bin": (DEFAULT, 66, 1003),
    "106_get_broker_cluster_info_empty_request.bin": (DEFAULT, 67, 1257),
    "100_put_kv_config_rmqsrv_request.bin": (RMQSRV, 1, 3),
    "101_get_kv_config_rmqsrv_request.bin": (RMQSRV, 2, 7),
    "9999_unsupported_code_rmqsrv_request.bin": (RMQSRV, 7, 21),
}
#: Requests whose answer's capture is an earlier answer with the same bytes: the answer
#: is read right after the request.
ANSWERS_AFTER_REQUEST = {
    "103_register_broker_acting_request.bin", "105_get_routeinfo_zone_name_only_request.bin",
    "105_get_routeinfo_v498_client_request.bin", "105_get_routeinfo_raw_request.bin",
    "105_get_routeinfo_raw_legacy_accept_standard_request.bin",
    "105_get_routeinfo_existing_rmq_request.bin",
    "105_get_routeinfo_raw_zone_mode_legacy_version_request.bin",
    "105_get_routeinfo_zone_mode_rmq_request.bin", "319_get_namesrv_config_rmq_request.bin",
    "217_register_topic_in_namesrv_request.bin", "100_put_kv_config_request.bin",
    "100_put_kv_config_order_topic_request.bin",
    "102_delete_kv_config_order_topic_request.bin", "102_delete_kv_config_rmq_request.bin",
    "318_update_namesrv_config_off_request.bin", "101_get_kv_config_missing_rmq_request.bin",
    "106_get_broker_cluster_info_raw_request.bin", "106_get_broker_cluster_info_rmq_request.bin",
    "206_get_all_topic_list_from_nameserver_empty_request.bin",
    "312_get_has_unit_sub_topic_list_request.bin",
    "313_get_has_unit_sub_ununit_topic_list_request.bin",
    "9999_unsupported_code_rmq_request.bin", "104_unregister_broker_v498_request.bin",
    "103_register_broker_compat_request.bin", "103_register_broker_v498_request.bin",
}


# ---------------------------------------------------------------- derived requests

def _derive(file, *, opaque, code=None, ext=None, drop=(), body=None, serialize_type=None):
    """A request file with other ext fields, body (bodyCrc32 recomputed), code, opaque
    or serialize type."""
    cmd = rmq.decode_frame(V5.bytes(file))
    cmd.opaque = opaque
    if code is not None:
        cmd.code = code
    fields = {k: v for k, v in (cmd.ext_fields or {}).items() if k not in drop}
    fields.update(ext or {})
    if body is not None:
        cmd.body = body
        if "bodyCrc32" in fields:
            fields["bodyCrc32"] = str(zlib.crc32(body) & 0x7FFFFFFF)
    cmd.ext_fields = fields or None
    if serialize_type is not None:
        cmd.serialize_type = serialize_type
    return rmq.encode_frame(cmd)


def _incremental(file, topic, counter, timestamp, queues):
    """The body of an incremental REGISTER_BROKER of the broker that sent ``file``: a 5.x
    broker sends one when a topic is created on it, its topicConfigTable holding only
    that topic (as mqadmin updateTopic makes it: perm 6, ``queues``/``queues``)."""
    body = json.loads(V5.body(file))
    wrapper = body["topicConfigSerializeWrapper"]
    wrapper["dataVersion"] = {"counter": counter, "stateVersion": 0, "timestamp": timestamp}
    wrapper["topicConfigTable"] = {topic: {
        "attributes": {}, "order": False, "perm": 6, "readQueueNums": queues,
        "topicFilterType": "SINGLE_TAG", "topicName": topic, "topicSysFlag": 0,
        "writeQueueNums": queues}}
    return json.dumps(body, separators=(",", ":")).encode()


#: v5acting's DataVersion after V5Topic was created on it: its 322 (seq 54) asks with it
#: and Java answers changed=false with the same as stored.
_ACTING_DV = json.loads(V5.body("322_query_data_version_request.bin"))
_V5BROKER_BOOT = "103_register_broker_request.bin"
_V5ACTING_BOOT = "103_register_broker_acting_request.bin"
_V5RMQ = {"brokerName": "v5rmq", "brokerAddr": "127.0.0.1:29951",
          "haServerAddr": "127.0.0.1:29952"}


def derived_requests():
    """The requests rebuilding state that the set's requests do not carry (module doc)."""
    def incremental(topic, counter, queues=4):
        return _derive(_V5BROKER_BOOT, opaque=100 + counter, body=_incremental(
            _V5BROKER_BOOT, topic, counter, CAPTURE_MS + counter, queues))

    return [
        Replayed(
            "103 incremental: V5Topic created on v5broker", DEFAULT, 27, 1,
            incremental("V5Topic", 2), "103_register_broker_periodic_response.bin", 27.5, False,
            "mqadmin updateTopic made V5Topic (4/4, perm 6: its routes) on v5broker; the "
            "broker's incremental 103 is not in the set. Derived from v5broker's boot 103: "
            "DataVersion counter 2, only V5Topic. Java's answer to v5broker's 103 then: seq 26"),
        Replayed(
            "103 incremental: V5Topic created on v5acting", DEFAULT, 53, 2,
            _derive(_V5ACTING_BOOT, opaque=41, body=_incremental(
                _V5ACTING_BOOT, "V5Topic", _ACTING_DV["counter"], _ACTING_DV["timestamp"], 4)),
            "103_register_broker_acting_response.bin", 53.5, False,
            "mqadmin updateTopic made V5Topic on v5acting (step updateTopic_b); its 322 at "
            "seq 54 shows the DataVersion the NameServer then held for it (counter 2), which "
            "only this registration can have brought. Derived from v5acting's boot 103"),
        Replayed(
            "103 incremental: V5SoloTopic created on v5broker", DEFAULT, 58, 1,
            incremental("V5SoloTopic", 3), "103_register_broker_periodic_response.bin", 58.5,
            False, "V5SoloTopic (4/4, perm 6, only on v5broker: its route) made by mqadmin "
            "updateTopic; its route is asked at seq 112"),
        Replayed(
            "103 incremental: V5DelTopic created on v5broker", DEFAULT, 59, 1,
            incremental("V5DelTopic", 4, queues=8), "103_register_broker_periodic_response.bin",
            59.5, False,
            "V5DelTopic, made by mqadmin updateTopic on v5broker (the 206 at seq 214 and the "
            "224 at seq 585 list it; 205/327 count 15 topics on v5broker: its 12 and V5Topic, "
            "V5SoloTopic, V5DelTopic) and deleted by the 216 at seq 701; its queue numbers "
            "are never shown (mqadmin's default 8/8 here)"),
        Replayed(
            "100 put peer_ns/peer_key2", DEFAULT, 445, 24,
            _derive("100_put_kv_config_request.bin", opaque=0,
                    ext={"key": "peer_key2", "value": "peer_value2"}),
            "100_put_kv_config_response.bin", 445.5, False,
            "the 219 at seq 466 lists peer_key2=peer_value2, put by kv.sh between the kept "
            "put (seq 439) and it (conn 24 is the one no kept frame uses). Derived from "
            "100_put_kv_config_request.bin"),
        Replayed(
            "100 put peer_ns/rmq_key (ROCKETMQ header)", DEFAULT, 820, 57,
            _derive("101_get_kv_config_rmq_request.bin", opaque=0, code=100,
                    ext={"value": "rmq_value"}),
            "100_put_kv_config_response.bin", 820.5, False,
            "the ROCKETMQ-header 101 at seq 835 reads rmq_key=rmq_value, which a ROCKETMQ-"
            "header put before it made (step rmq_kv_put, not kept). Derived from that 101; "
            "the default NameServer answers it in JSON"),
        Replayed(
            "103 v5rmq boot (ROCKETMQ header)", DEFAULT, 887, 63,
            _derive(_V5BROKER_BOOT, opaque=0, ext=_V5RMQ, drop=("__ZONE_NAME",),
                    body=V5.body(_V5BROKER_BOOT).replace(b"v5broker", b"v5rmq"),
                    serialize_type="ROCKETMQ"),
            "103_register_broker_compat_response.bin", 888, False,
            "v5rmq (-Drocketmq.serialize.type=ROCKETMQ, otherwise default settings, no zone) "
            "registered at step boot_rmq; its 103 is not kept but Java's answer is: "
            "103_register_broker_compat_response.bin's capture (seq 888, conn 63). Derived "
            "from v5broker's boot 103 (the same settings but the zone), renamed; 106 at "
            "seq 1003 shows it"),
        Replayed(
            "104 v5compat stop", DEFAULT, 1100, 64,
            _derive("104_unregister_broker_acting_request.bin", opaque=900,
                    ext={"brokerName": "v5compat", "brokerAddr": "127.0.0.1:29941"}),
            "104_unregister_broker_acting_response.bin", 1100.5, False,
            "v5compat stopped between seq 1003 (106: five brokers) and 1257 (106: none); its "
            "UNREGISTER is not kept. Derived from v5acting's (the same settings); then its "
            "connection closes"),
        Replayed(
            "104 v5rmq stop (ROCKETMQ header)", DEFAULT, 1101, 63,
            _derive("104_unregister_broker_acting_request.bin", opaque=900,
                    ext={"brokerName": "v5rmq", "brokerAddr": _V5RMQ["brokerAddr"]},
                    serialize_type="ROCKETMQ"),
            "104_unregister_broker_acting_response.bin", 1101.5, False,
            "v5rmq stopped between seq 1003 and 1257 too; its connection closes after"),
    ]


#: Requests whose answer depends on state that cannot be rebuilt from the set: file ->
#: (why, what is still checked). None now: derived_requests rebuilds it all.
LISTED = {}


@functools.cache
def schedule(session):
    """The session's requests, captured and derived, in replay order."""
    requests = [r for r in captured_requests() + derived_requests() if r.session == session]
    return sorted(requests, key=lambda r: r.place)


# ---------------------------------------------------------------- comparing answers

#: Answer fields left out, by name: request code -> {field: why}.
EXCLUDED = {
    319: {"configStorePath": "a path (rewritten in the capture; the test's own here)",
          "kvConfigPath": "a path", "rocketmqHome": "a path",
          "listenPort": "the test NameServer's ephemeral port (Java's listened on 29876)"},
    47: {"rocketmqHome": "a path (rewritten in the capture)"},
}


#: The keys of rmq's settings (rmq.namesrv.config.FIELDS): what a 319 body may show
#: beyond Java 5.0.0's keys.
_RMQ_SETTINGS = frozenset(["bindAddress"] + [f.key for f in CONFIG_FIELDS])


def _properties(body):
    return [tuple(line.split("=", 1)) for line in body.decode("utf-8").splitlines() if line]


def _body_differences(code, ours, theirs):
    """What differs between two answer bodies: [(what, rmq's, Java's)]."""
    if not theirs or not ours:
        return [] if ours == theirs else [("body", ours, theirs)]
    if code in (319, 47):
        excluded = EXCLUDED[code]
        mine, java = _properties(ours), _properties(theirs)
        mine_map, java_map = dict(mine), dict(java)
        out = []
        missing = [k for k in java_map if k not in mine_map]
        if missing:
            out.append(("body keys missing", None, missing))
        # 47: only the keys asked. 319: every setting rmq has (its own, and Java's
        # from later versions) besides Java 5.0.0's; no other key.
        known = () if code == 47 else _RMQ_SETTINGS
        extra = [k for k in mine_map if k not in java_map and k not in known]
        if extra:
            out.append(("body keys Java does not send", extra, None))
        values = {k: (mine_map[k], v) for k, v in java_map.items()
                  if k in mine_map and k not in excluded and mine_map[k] != v}
        if values:
            out.append(("body values", {k: v[0] for k, v in values.items()},
                        {k: v[1] for k, v in values.items()}))
        order = [k for k, _ in mine if k in java_map]
        if order != [k for k in java_map if k in mine_map]:
            out.append(("body key order", order, list(java_map)))
        return out
    if theirs[:1] in (b"{", b"["):
        try:
            (mine, legacy), (java, java_legacy) = (parse_json_body(ours, pairs=True),
                                                   parse_json_body(theirs, pairs=True))
        except ValueError:
            return [("body (not JSON)", ours, theirs)]
        out = []
        if legacy != java_legacy:
            out.append(("body form", "legacy" if legacy else "standard",
                        "legacy" if java_legacy else "standard"))
        if mine != java:
            same_content = parse_json_body(ours)[0] == parse_json_body(theirs)[0]
            out.append(("body key/element order" if same_content else "body", ours, theirs))
        return out
    return [] if ours == theirs else [("body", ours, theirs)]


def differences(r, got):
    """What differs between rmq's answer ``got`` (the frame's bytes) and Java's, for the
    request ``r``: ["answer: field: rmq ... / java ..."]."""
    java = V5.bytes(r.answer)
    where = f"seq {r.place:g} conn {r.conn} " + ("" if r.captured else "[derived] ") + r.name
    if V5.by_file.get(r.name, {}).get("response_file") != r.answer:
        where += f" (Java's answer: {r.answer})"
    out = []

    def differ(field, mine, theirs):
        if mine != theirs:
            out.append(f"{where}: {field}: rmq {mine!r} / java {theirs!r}")

    g_type, g_header, _ = split_frame(got)
    j_type, j_header, _ = split_frame(java)
    differ("serialize type", TYPE_NAMES.get(g_type, g_type), TYPE_NAMES[j_type])
    mine, theirs = rmq.decode_frame(got), rmq.decode_frame(java)
    for field in ("code", "flag", "remark", "ext_fields", "language", "version"):
        differ(field, getattr(mine, field), getattr(theirs, field))
    request_opaque = rmq.decode_frame(r.frame).opaque
    differ("opaque", mine.opaque, theirs.opaque if r.captured else request_opaque)
    if g_type == j_type == 0:
        differ("header fields", [k for k, _ in json.loads(g_header, object_pairs_hook=list)],
               [k for k, _ in json.loads(j_header, object_pairs_hook=list)])
    for field, a, b in _body_differences(r.code, mine.body, theirs.body):
        differ(field, a, b)
    return out


# ---------------------------------------------------------------- the replay

def replay(address, session):
    """Replay ``session`` against the NameServer at ``address``; the mismatches."""
    events = []
    for r in schedule(session):
        events.append((r.place, 0, "send", r))
        if r.answer is not None:
            events.append((r.answer_place, 1, "receive", r))
    last = {}
    for place, _, _, r in events:
        last[r.conn] = max(last.get(r.conn, place), place)
    oneway = {r.conn for r in schedule(session) if r.answer is None}
    events += [(place, 2, "close", conn) for conn, place in last.items()]
    events.sort(key=lambda e: e[:2])

    mismatches = []
    clients = {}
    try:
        for _, _, kind, item in events:
            if kind == "send":
                if item.conn not in clients:
                    clients[item.conn] = Client(address)
                clients[item.conn].send_raw(item.frame)
            elif kind == "receive":
                try:
                    got = clients[item.conn].receive_frame(timeout=10)
                except (socket.timeout, ConnectionError) as e:
                    mismatches.append(f"{item.answer}: no answer from rmq ({e!r})")
                    continue
                mismatches += differences(item, got)
            else:
                client = clients.pop(item)
                if item in oneway:      # nothing more comes: no answer to a oneway request
                    try:
                        extra = client.receive_frame(timeout=0.3)
                        mismatches.append(f"conn {item}: rmq answered a oneway request: "
                                          f"{rmq.decode_frame(extra)!r}")
                    except socket.timeout:
                        pass
                client.close()
    finally:
        for client in clients.values():
            client.close()
    return mismatches


def _report(session, mismatches):
    return (f"{len(mismatches)} differences from Java 5.0.0's answers ({session} session), "
            f"as 'seq N conn C request: field: rmq ... / java ...':\n" + "\n".join(mismatches))


def test_replay_java_5_0_0_capture(tmp_path, loop):
    with running_namesrv(tmp_path, loop=loop, clock=lambda: CAPTURE_MS,
                         rocketmqHome=ROCKETMQ_HOME) as app:
        mismatches = replay(app.address, DEFAULT)
        # After the last broker left: nothing registered (Java's last answers say so).
        assert app.processor.routes.live_count() == 0
    assert not mismatches, _report(DEFAULT, mismatches)


def test_replay_java_5_0_0_rocketmq_serialize_namesrv(tmp_path, loop):
    """The NameServer Java started with -Drocketmq.serialize.type=ROCKETMQ: every answer
    in a ROCKETMQ header, whatever the request's (rmq: the same setting, Java's name)."""
    with running_namesrv(tmp_path, loop=loop, clock=lambda: CAPTURE_MS,
                         rocketmqHome=ROCKETMQ_HOME,
                         **{SERIALIZE_TYPE_KEY: "ROCKETMQ"}) as app:
        mismatches = replay(app.address, RMQSRV)
    assert not mismatches, _report(RMQSRV, mismatches)


# ---------------------------------------------------------------- the schedule itself

def test_every_request_vector_is_replayed():
    """Every request file is sent (at least once); every answer file is compared; every
    request not sent as captured says why; LISTED names files of the set."""
    requests = {e["file"] for e in V5.frames if e["kind"] == "request"}
    answers = {e["file"] for e in V5.frames if e["kind"] == "response"}
    replayed = [r for s in SESSIONS for r in schedule(s)]
    assert requests <= {r.name for r in replayed if r.captured}
    assert answers <= {r.answer for r in replayed}
    assert all(r.why for r in replayed if not r.captured)
    assert set(LISTED) <= requests
    assert {r.session for r in replayed} == set(SESSIONS)


def test_capture_places():
    """What the placement rules give for the index's shared captures (module doc)."""
    placed = captured_requests()
    moved = {r.name: (r.session, r.conn, r.answer_place) for r in placed
             if r.why.startswith("its capture")}
    assert moved == MOVED
    after = {r.name for r in placed if r.why.startswith("the answer's capture")}
    assert after == ANSWERS_AFTER_REQUEST
    extra = [(r.name, r.session, r.place, r.conn, r.answer) for r in placed
             if r.why.startswith("the same bytes")]
    assert extra == [("106_get_broker_cluster_info_five_request.bin", DEFAULT, 14, 3,
                      "106_get_broker_cluster_info_raw_response.bin")]
    for session in SESSIONS:
        steps = schedule(session)
        # one place per request; on each connection, every answer after its request
        assert len({r.place for r in steps}) == len(steps)
        for r in steps:
            assert r.answer is None or r.answer_place > r.place
    # The two oneway requests are sent before the answer to the request before them.
    by_name = {r.name: r for r in schedule(DEFAULT)}
    hb, member = by_name["904_broker_heartbeat_request.bin"], \
        by_name["901_get_broker_member_group_request.bin"]
    assert member.place < hb.place < member.answer_place and hb.conn == member.conn
    hb, compat = by_name["322_query_data_version_heartbeat_request.bin"], \
        by_name["105_get_routeinfo_broker_member_group_compat_request.bin"]
    assert compat.place < hb.place < compat.answer_place and hb.conn == compat.conn


def test_broker_connections_close_after_their_unregister():
    """A broker's connection carries nothing after its UNREGISTER (it closes there), and
    every broker of the capture unregisters."""
    for session in SESSIONS:
        steps = schedule(session)
        for r in steps:
            if r.code == 104:
                later = [s for s in steps if s.conn == r.conn and s.place > r.place]
                assert not later, (r.name, later)
    unregistered = {rmq.decode_frame(r.frame).ext_fields["brokerName"]
                    for r in schedule(DEFAULT) if r.code == 104}
    registered = {rmq.decode_frame(r.frame).ext_fields["brokerName"]
                  for r in schedule(DEFAULT) if r.code == 103}
    assert registered == unregistered == {"v5broker", "v5acting", "v5compat", "v4broker",
                                          "v5rmq"}


def test_derived_requests_decode_as_their_broker_sends_them():
    for r in derived_requests():
        cmd = rmq.decode_frame(r.frame)
        assert not r.captured and r.why
        if cmd.code == 103:
            assert int(cmd.ext_fields["bodyCrc32"]) == zlib.crc32(cmd.body) & 0x7FFFFFFF
            body = json.loads(cmd.body)
            table = body["topicConfigSerializeWrapper"]["topicConfigTable"]
            assert all(k == tc["topicName"] for k, tc in table.items())
            if cmd.ext_fields["brokerName"] == "v5acting":
                assert body["topicConfigSerializeWrapper"]["dataVersion"] == _ACTING_DV
