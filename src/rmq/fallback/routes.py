"""Pure-Python topic-table storage of the route tables, the twin of
``rmq._core.TopicTable`` (src/_core/routes.pxi); the rules are
rmq.namesrv.routeinfo's, which lists the interface. It keeps topicQueueTable
(topic -> {brokerName -> QueueData}), an index brokerName -> {topic} (what is keyed
by a broker touches only its topics) and each topic's encoded answers (standard,
legacy), dropped when a change may alter them; each change bumps ``version``.
One thread uses it: its lock does nothing and ``concurrent`` is False.
"""

from rmq.fallback import bodies as _bodies
from rmq.fallback.codec import encode_frame
from rmq.javaorder import java_hash_order
from rmq._wire import standard_route_form
from rmq.protocol import FLAG_ONEWAY, FLAG_RESPONSE, RequestCode
from rmq.errors import ProtocolError

__all__ = ["TopicTable"]

_PERM_READ = 1 << 2
_PERM_WRITE = 1 << 1
_GET_ROUTEINFO_BY_TOPIC = RequestCode.GET_ROUTEINFO_BY_TOPIC


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

    def __init__(self, broker_state=None):
        self._topics = {}           # topic -> {brokerName -> QueueData dict}
        self._broker_topics = {}    # brokerName -> {topic: None} (ordered set)
        self._routes = ({}, {})     # encoded answers, topic -> body: standard, legacy
        self._version = 0

    # ------------------------------------------------------------ route answers

    @property
    def version(self):
        return self._version

    def encode_topic_route_data(self, route, legacy=False):
        return _bodies.encode_topic_route_data(route, legacy)

    def route(self, topic, legacy):
        """(the cached answer, None), or (None, version): the rules build it."""
        body = self._routes[legacy].get(topic)
        return (body, None) if body is not None else (None, self._version)

    def store_route(self, topic, legacy, body, version):
        self._routes[legacy][topic] = body

    def cached_topics(self, legacy):
        return set(self._routes[legacy])

    def touch(self, topics):
        """The routes of ``topics`` may have changed."""
        if not topics:
            return
        for cache in self._routes:
            for t in topics:
                cache.pop(t, None)
        self._version += 1

    def touch_all(self):
        for cache in self._routes:
            cache.clear()
        self._version += 1

    def broker_changed(self, broker_name):
        """The BrokerData (or its filter servers, or acting-master state) of
        ``broker_name`` may have changed: every topic with queue data on it."""
        self.touch(self._broker_topics.get(broker_name))

    # ------------------------------------------------------------ queue data

    def qmap(self, topic):
        """{brokerName: QueueData dict} of a topic in insertion order, or None."""
        return self._topics.get(topic)

    def topic_names(self):
        """Every topic with queue data, in insertion order."""
        return list(self._topics)

    def first_flags(self):
        """(topic, topicSysFlag of its first QueueData in Java's order) per topic:
        Java tests the first QueueData of the topic's map (HashMap order)."""
        return [(t, qmap[java_hash_order(qmap)[0]]["topicSysFlag"])
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
        elif qmap.get(name) == qd:
            return False
        qmap[name] = qd
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
        True when some topic was written."""
        if delete_missing:
            for topic in list(self._broker_topics.get(broker_name, ())):
                if topic not in configs:
                    self.remove_queue_data(topic, broker_name)
        written = False
        for key, tc in configs.items():
            topic = tc.get("topicName", key)
            if force or broker_name not in self._topics.get(topic, ()):
                perm = int(tc.get("perm", _PERM_READ | _PERM_WRITE))
                if readonly:
                    perm &= ~_PERM_WRITE
                self.put_queue_data(topic, {   # QueueData, in Java's (alphabetical) order
                    "brokerName": broker_name, "perm": perm,
                    "readQueueNums": int(tc.get("readQueueNums", 16)),
                    "topicSysFlag": int(tc.get("topicSysFlag", 0)),
                    "writeQueueNums": int(tc.get("writeQueueNums", 16))})
                written = True
        return written

    # ------------------------------------------------------------ serving

    def serve_routes(self, route_body, decoder, data, limit):
        """rmq.namesrv.routeinfo.RouteTable.serve_routes over ``route_body``."""
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
            if not cmd.flag & (FLAG_RESPONSE | FLAG_ONEWAY) and cmd.ext_fields \
                    and not 0 <= limit <= size:
                topic = cmd.ext_fields.get("topic")
                if isinstance(topic, str):
                    body = route_body(topic, not standard_route_form(cmd))
            if body is None:        # answered by the caller: the rest waits, in order
                return b"".join(answers), cmds[i:], error
            answers.append(encode_frame(cmd.response(0, body=body)))
            size += len(answers[-1])
        return b"".join(answers), [], error
