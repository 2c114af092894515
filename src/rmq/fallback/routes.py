"""Pure-Python topic-table storage of the route tables, the twin of
``rmq._core.TopicTable`` (src/_core/routes.pxi); the rules are
rmq.namesrv.routeinfo's, which lists the interface. It keeps topicQueueTable
(topic -> {brokerName -> QueueData}), an index brokerName -> {topic} (what is keyed
by a broker touches only its topics) and each topic's encoded answers (standard,
legacy, and a zone-mode query's: per zone class, as routetable.c groups them),
dropped when a change may alter them; each change bumps ``version``.
Route queries are answered in ``answer_serialize_type`` (JSON unless told: Java 5.x
answers in the NameServer's own serialize type, whatever the request used).
The answers are cached within a byte budget, identical ones held once, with the
compiled cache's admission rule (routetable.c): a newcomer replaces only colder
answers. One thread uses it: its lock does nothing and ``concurrent`` is False.
"""

from array import array

from rmq.fallback import bodies as _bodies
from rmq.fallback.codec import encode_frame
from rmq.fallback.javatable import java_spread_hash
from rmq.javacase import fold as _java_fold
from rmq.javaorder import java_hash_order
from rmq._wire import route_zone, serialize_type_code, standard_route_form, topic_not_exist
from rmq.protocol import FLAG_ONEWAY, FLAG_RESPONSE, RequestCode
from rmq.errors import ProtocolError

__all__ = ["TopicTable"]

_PERM_READ = 1 << 2
_PERM_WRITE = 1 << 1
_GET_ROUTEINFO_BY_TOPIC = RequestCode.GET_ROUTEINFO_BY_TOPIC
_EVICT_SAMPLE = 8
_EVICT_MAX = 32
_AGING_MIN = 4096
# A new HashMap's 16 buckets hold 12 keys; a topic's map past that keeps its grown table.
_MAP_KEEPS = 12


class _NoLock:
    """The lock of a table used by one thread."""
    def acquire_write(self):
        pass
    release_write = acquire_read = release_read = acquire_write


class TopicTable:
    """topicQueueTable, its broker index and the cached route answers."""

    concurrent = False
    lock = _NoLock()
    python_routes = True    # answers are always built by the rules here

    def __init__(self, broker_state=None, cache_bytes=None):
        self._broker_state = broker_state
        self._topics = {}           # topic -> {brokerName -> QueueData dict}
        self._seqs = {}             # topic -> its insertion's number (new when re-inserted)
        self._peaks = {}            # topic -> the most QueueData it held, when above 12
        self._next_seq = 0
        self._broker_topics = {}    # brokerName -> {topic: None} (ordered set)
        # Encoded answers by form, each topic -> body: False standard, True legacy,
        # ("zone", z) a zone-mode query's answer for zone class z: a registered
        # broker's folded zone, or None for the zones no broker has (queries name
        # any zone: one class for all those keeps the cache theirs to fill, not the
        # clients').
        self._routes = {False: {}, True: {}}
        self._zone_of = {}          # brokerName -> its folded zone
        self._zones = {}            # folded zone -> how many brokers have it
        self._version = 0
        self._answers = {}          # body -> how many topic forms hold it (each held once)
        self._ring = {}             # (topic, legacy) cached, in clock order
        self._freq = {}             # topic -> queries, halved as they age
        self._stats = dict.fromkeys(("hits", "misses", "shared", "evictions", "refused",
                                     "served", "not_found"), 0)
        self._bytes = 0
        self._aged_at = 0
        self._budget = None
        self._work_done = 0
        self.cache_budget = cache_bytes
        self._answer_serialize_type = "JSON"

    # ------------------------------------------------------------ route answers

    @property
    def version(self):
        return self._version

    @property
    def cache_budget(self):
        """The answer cache's byte budget (None: unbounded)."""
        return self._budget

    @cache_budget.setter
    def cache_budget(self, value):
        if value is not None and value < 0:
            raise ValueError(f"the route cache budget must be >= 0 bytes, not {value}")
        self._budget = value
        while value is not None and self._bytes > value and self._ring:
            self._detach(*next(reversed(self._ring)))
            self._stats["evictions"] += 1

    @property
    def answer_serialize_type(self):
        """The serialize type route answers are written in: "JSON" or "ROCKETMQ"."""
        return self._answer_serialize_type

    @answer_serialize_type.setter
    def answer_serialize_type(self, name):
        serialize_type_code(name)           # UnknownSerializeType unless JSON or ROCKETMQ
        self._answer_serialize_type = name

    def cache_stats(self):
        """rmq._core.TopicTable.cache_stats: counters since start, size now."""
        return dict(self._stats, bytes=self._bytes, budget=self._budget,
                    answers=len(self._answers), entries=len(self._ring),
                    topics=len(self._topics))

    def _work(self):
        """Topic records applied and topics walked since start, for tests."""
        return self._work_done

    def encode_topic_route_data(self, route, legacy=False):
        return _bodies.encode_topic_route_data(route, legacy)

    def _form(self, legacy, zone):
        if zone is None:
            return bool(legacy)
        return "zone", zone if zone in self._zones else None

    def route(self, topic, legacy, zone=None):
        """(the cached answer, None), or (None, version): the rules build it.
        ``zone``: a zone-mode query's folded zone."""
        if topic in self._topics:
            self._freq[topic] = min(self._freq.get(topic, 0) + 1, 255)
        body = self._routes.get(self._form(legacy, zone), {}).get(topic)
        if body is not None:
            self._stats["hits"] += 1
            return body, None
        return None, self._version

    def store_route(self, topic, legacy, body, version, zone=None):
        if version != self._version or topic not in self._topics:
            return
        form = self._form(legacy, zone)
        self._stats["misses"] += 1
        self._age()
        held = self._answers.get(body)
        if held is not None:
            self._stats["shared"] += 1
        elif not self._make_room(len(body), self._freq.get(topic, 0)):
            self._stats["refused"] += 1
            return
        else:
            self._bytes += len(body)
        self._answers[body] = (held or 0) + 1
        self._routes.setdefault(form, {})[topic] = body
        self._ring[topic, form] = None

    def _detach(self, topic, form):
        body = self._routes[form].pop(topic)
        del self._ring[topic, form]
        held = self._answers.pop(body) - 1
        if held:
            self._answers[body] = held
        else:
            self._bytes -= len(body)

    def _make_room(self, size, freq):
        """Evict answers colder than ``freq`` until ``size`` more bytes fit: whether they do."""
        budget = self._budget
        if budget is None:
            return True
        if size > budget:
            return False
        for _ in range(_EVICT_MAX):
            if self._bytes + size <= budget:
                return True
            if not self._ring:
                return False
            sample = []
            for entry in self._ring:        # the hand: the sample moves to the end
                sample.append(entry)
                if len(sample) == _EVICT_SAMPLE:
                    break
            for entry in sample:
                del self._ring[entry]
                self._ring[entry] = None
            victim = min(sample, key=lambda e: self._freq.get(e[0], 0) * 2 + (
                self._answers[self._routes[e[1]][e[0]]] > 1))
            if self._freq.get(victim[0], 0) >= freq:
                return False                # as hot as the newcomer: the cached set stays
            self._detach(*victim)
            self._stats["evictions"] += 1
        return self._bytes + size <= budget

    def _age(self):
        seen = self._stats["hits"] + self._stats["misses"]
        if seen - self._aged_at >= max(len(self._topics) * 8, _AGING_MIN):
            self._aged_at = seen
            self._freq = {t: f // 2 for t, f in self._freq.items() if f > 1}

    def cached_topics(self, legacy):
        return set(self._routes[bool(legacy)])

    def touch(self, topics):
        """The routes of ``topics`` may have changed."""
        if not topics:
            return
        for form, cache in self._routes.items():
            for t in topics:
                if t in cache:
                    self._detach(t, form)
        self._work_done += len(topics)
        self._version += 1

    def touch_all(self):
        for entry in list(self._ring):
            self._detach(*entry)
        self._version += 1

    def broker_changed(self, broker_name):
        """The BrokerData (or its filter servers, or acting-master state) of
        ``broker_name`` may have changed: every topic with queue data on it (and
        every zone answer when the set of the brokers' zones changes)."""
        bd = self._broker_state(broker_name)[0] if self._broker_state else None
        zone = None if bd is None or bd.get("zoneName") is None else _java_fold(bd["zoneName"])
        old = self._zone_of.pop(broker_name, None)
        if zone is not None:
            self._zone_of[broker_name] = zone
        if zone != old:
            zones = dict(self._zones)
            if old is not None:
                zones[old] -= 1
                if not zones[old]:
                    del zones[old]
            if zone is not None:
                zones[zone] = zones.get(zone, 0) + 1
            if zones.keys() != self._zones.keys():
                for entry in [e for e in self._ring if e[1] not in (False, True)]:
                    self._detach(*entry)
                self._version += 1
            self._zones = zones
        self.touch(self._broker_topics.get(broker_name))

    # ------------------------------------------------------------ queue data

    def qmap(self, topic):
        """{brokerName: QueueData dict} of a topic in insertion order, or None."""
        return self._topics.get(topic)

    def qmap_peak(self, topic):
        """The most QueueData the topic held since it was created (Java's HashMap of
        them never shrinks: its order follows this); 0 for no topic."""
        qmap = self._topics.get(topic)
        return 0 if qmap is None else self._peaks.get(topic, len(qmap))

    def topic_seqs(self):
        """``(seq, topic)`` of every topic with queue data, in insertion order: ``seq``
        numbers the insertion, a new one when a topic removed comes back."""
        seqs = self._seqs
        return [(seqs[t], t) for t in self._topics]

    def topic_hashes(self):
        """``(seqs, hashes)``: arrays ("Q", "I") of every topic's insertion number (as
        ``topic_seqs``) and java_spread_hash, in insertion order."""
        seqs = self._seqs
        return (array("Q", [seqs[t] for t in self._topics]),
                array("I", [java_spread_hash(t) for t in self._topics]))

    def topic_count(self):
        """How many topics have queue data."""
        return len(self._topics)

    def first_flags(self):
        """(topic, topicSysFlag of its first QueueData in Java's order) per topic:
        Java tests the first QueueData of the topic's map (HashMap order)."""
        peaks = self._peaks
        return [(t, qmap[java_hash_order(qmap, peak=peaks.get(t, 0))[0]]["topicSysFlag"])
                for t, qmap in self._topics.items() if qmap]

    def topics_of_brokers(self, names):
        """Topics with queue data on any of the broker ``names``, in insertion order."""
        members = set()
        for name in names:
            members.update(self._broker_topics.get(name, ()))
        return [t for t in self._topics if t in members]

    def put_queue_data(self, topic, qd):
        """Insert or replace one broker's QueueData of a topic; records the topic
        when it changed (createAndUpdateQueueData / registerTopic)."""
        name = qd["brokerName"]
        qmap = self._topics.get(topic)
        if qmap is None:
            qmap = self._topics[topic] = {}
            self._seqs[topic] = self._next_seq
            self._next_seq += 1
        elif qmap.get(name) == qd:
            return False
        qmap[name] = qd
        if len(qmap) > _MAP_KEEPS and len(qmap) > self._peaks.get(topic, 0):
            self._peaks[topic] = len(qmap)      # past 16 buckets: the table grew
        self._broker_topics.setdefault(name, {})[topic] = None
        self.touch((topic,))
        return True

    def remove_queue_data(self, topic, broker_name):
        """Remove one broker's QueueData of a topic, and the topic when it has none left."""
        qmap = self._topics.get(topic)
        if qmap is None or qmap.pop(broker_name, None) is None:
            return False
        topics = self._broker_topics.get(broker_name)
        if topics is not None:
            topics.pop(topic, None)
            if not topics:
                del self._broker_topics[broker_name]
        if not qmap:
            del self._topics[topic]
            del self._seqs[topic]
            self._peaks.pop(topic, None)
            self._freq.pop(topic, None)
        self.touch((topic,))
        return True

    def remove_broker(self, broker_name):
        """removeTopicByBrokerName / cleanTopicByUnRegisterRequests(removedBroker)."""
        for topic in list(self._broker_topics.get(broker_name, ())):
            self.remove_queue_data(topic, broker_name)

    def write_perm(self, broker_name, wipe):
        """Wipe PERM_WRITE of (or set perm 6 on) the broker's queue data: how many."""
        count = 0
        for topic in list(self._broker_topics.get(broker_name, ())):
            qd = self._topics[topic][broker_name]
            perm = qd["perm"] & ~_PERM_WRITE if wipe else _PERM_READ | _PERM_WRITE
            if perm != qd["perm"]:
                self.put_queue_data(topic, dict(qd, perm=perm))
            count += 1
        return count

    # ------------------------------------------------------------ registration

    def read_body(self, body, now_ms, check):
        """(dataVersion, topic configs, mappings, filter servers): ``check``'s."""
        if isinstance(body, (bytes, bytearray, memoryview)):
            body = _bodies.decode_register_broker_body(body)
        return check(body, now_ms)[1:]

    def apply_topic_configs(self, broker_name, configs, *, force, readonly, delete_missing):
        """Registration's topic loop: write a topic's queue data when ``force`` or
        when the broker has none for it; ``readonly`` clears PERM_WRITE;
        ``delete_missing`` first drops the broker's topics absent from ``configs``.
        Returns (whether some topic was written, how many records changed the
        broker's queue data as the table had it before: new or different, how many
        of its topics ``delete_missing`` removed)."""
        qmaps = self._topics
        # each record's topic, and its queue data of the broker before the deletions
        # (what is counted against, as the compiled twin does)
        records = []
        for key, tc in configs.items():
            topic = tc.get("topicName", key)
            records.append((topic, tc, qmaps.get(topic, {}).get(broker_name)))
        removed = 0
        if delete_missing:
            for topic in list(self._broker_topics.get(broker_name, ())):
                if topic not in configs:
                    removed += self.remove_queue_data(topic, broker_name)
        written, changed = False, 0
        self._work_done += len(configs)
        for topic, tc, old in records:
            writes = force or broker_name not in qmaps.get(topic, ())
            if not (writes or old is None):
                continue
            perm = int(tc.get("perm", _PERM_READ | _PERM_WRITE))
            if readonly:
                perm &= ~_PERM_WRITE
            qd = {                  # QueueData, in Java's (alphabetical) order
                "brokerName": broker_name, "perm": perm,
                "readQueueNums": int(tc.get("readQueueNums", 16)),
                "topicSysFlag": int(tc.get("topicSysFlag", 0)),
                "writeQueueNums": int(tc.get("writeQueueNums", 16))}
            if (force or old is None) and qd != old:
                changed += 1
            if writes:
                self.put_queue_data(topic, qd)
                written = True
        return written, changed, removed

    # ------------------------------------------------------------ serving

    def serve_routes(self, route_body, decoder, data, limit, builds=True):
        """rmq.namesrv.routeinfo.RouteTable.serve_routes over ``route_body``; a topic
        without a route is answered TOPIC_NOT_EXIST: when ``route_body`` gives None
        and ``builds`` says that None is no route, or when the table has no such
        topic."""
        try:
            cmds, error = decoder.feed(data), None
        except ProtocolError as e:
            cmds, error = list(e.decoded), e
        answers = []
        size = 0
        for i, cmd in enumerate(cmds):
            if cmd.code != _GET_ROUTEINFO_BY_TOPIC:   # it may change routes: the rest waits
                return b"".join(answers), cmds[i:], error
            body = None
            missing = False
            if not cmd.flag & (FLAG_RESPONSE | FLAG_ONEWAY) and cmd.ext_fields \
                    and not 0 <= limit <= size:
                topic = cmd.ext_fields.get("topic")
                if isinstance(topic, str):
                    body = route_body(topic, not standard_route_form(cmd), route_zone(cmd))
                    missing = body is None and (builds or topic not in self._topics)
            if missing:
                resp = topic_not_exist(cmd, topic)
                self._stats["not_found"] += 1
            elif body is None:      # answered by the caller: the rest waits, in order
                return b"".join(answers), cmds[i:], error
            else:
                resp = cmd.response(0, body=body)
                self._stats["served"] += 1
            resp.serialize_type = self._answer_serialize_type
            answers.append(encode_frame(resp))
            size += len(answers[-1])
        return b"".join(answers), [], error
