"""RouteInfoManager's rules: the NameServer's route tables, written once for both cores.

Data in, data out: no I/O, no clock, no logging. Every method that depends on time
takes ``now_ms``; connections are opaque hashable tokens (``conn``).

Behaviour follows Apache RocketMQ 5.x ``namesrv/.../routeinfo/RouteInfoManager.java``
(5.3.3) unless the 4.9.8 vectors show something observable that differs; the
places where this module departs from Java on purpose are marked "Deviation".

Tables (Java's names)::

    topicQueueTable        topic -> {brokerName -> QueueData}      (the storage's)
    brokerAddrTable        brokerName -> BrokerData {cluster, brokerName, brokerAddrs{id: addr},
                                                     zoneName, enableActingMaster}
    clusterAddrTable       cluster -> {brokerName}
    brokerLiveTable        (cluster, brokerAddr) -> BrokerLiveInfo
    filterServerTable      (cluster, brokerAddr) -> [filter server addr]
    topicQueueMappingInfoTable  topic -> {brokerName -> TopicQueueMappingInfo}

Ordering: Java's answers list its tables in their iteration order, which this module
reproduces (rmq.javaorder), so that the 106/206/224/304/311-313 answers are Java
5.0.0's element for element (its vectors). It is not a protocol contract; it makes
answers comparable byte for byte. 5.0.0 keeps the tables in ``ConcurrentHashMap``s
(topicQueueTable of capacity 1,024, brokerAddrTable 128, clusterAddrTable 32: 2,048,
256 and 64 buckets), a cluster's broker names in a ``HashSet``, and fills a
TopicList's ``CopyOnWriteArraySet`` (insertion order) from them: 206 and 311-313 in
topicQueueTable's order, 224 broker by broker (the cluster's HashSet order), each
broker's topics in that order, 304 cluster by cluster, each name followed by its
brokers. (4.9.8 had ``HashMap``s and ``HashSet`` TopicLists.) A ConcurrentHashMap's
order depends on its resize history (``ConcurrentTable``): the brokers' and clusters'
tables are mirrored here as they change (``JavaConcurrentKeys``); the topic table,
in the storage, is replayed from its insertion numbers (``topic_seqs``) when a change
took it past a resize threshold, lazily (``_settle_topic_order``): before the next
removal, which would take away keys the resize moved, or the next list answer.
Registering a large table then makes no Python object per topic.
Deviation: topics first created by one registration enter Java's topicQueueTable in
the iteration order of the registration's decoded topicConfigTable (a
ConcurrentHashMap of its own), here in the body's order; it shows only between two
such topics of one bucket.

The topic table and the cached route answers live in a storage composed in, the
selected core's ``TopicTable``: ``rmq._core``'s (C, a writer-preferring read/write
lock, safe from several threads) or ``rmq.fallback.routes``' (dicts, one thread).
Its interface, which both implement and only this module uses:

- ``concurrent``; ``lock`` (``acquire_write/release_write/acquire_read/release_read``,
  reentrant; the pure one does nothing): mutators hold it for writing, readers of
  the cold tables for reading. ``TopicTable(broker_state)``: ``broker_state(name)``
  is ``(BrokerData dict or None, whether its routes need the rules)``;
- queue data: ``qmap``, ``topic_seqs`` (``(insertion number, topic)``, a new number
  for a topic that comes back), ``topic_hashes`` (the numbers and the topics'
  java_spread_hash, as arrays), ``topic_count``, ``first_flags``, ``topics_of_brokers``,
  ``put_queue_data``, ``remove_queue_data``, ``remove_broker``, ``write_perm``;
- registration: ``read_body(body, now_ms, check)`` (the parts; ``check``: the rules'
  checks of a decoded body), ``apply_topic_configs``;
- answers: ``route(topic, legacy, zone=None)`` -> ``(body, version)`` (body None
  with a version: the rules build it, then ``store_route(topic, legacy, body,
  version, zone=None)``; ``zone``: a zone-mode query's folded zone, whose answers
  the storage keeps per zone class: a zone of its brokers, or none of them),
  ``touch``, ``touch_all``,
  ``broker_changed``, ``python_routes``, ``version``, ``cached_topics``,
  ``encode_topic_route_data``, ``serve_routes(route_body, decoder, data, limit)``,
  ``answer_serialize_type`` (what ``serve_routes`` answers in: "JSON" or "ROCKETMQ");
  the cache: ``TopicTable(broker_state, cache_bytes=None)``, ``cache_budget``,
  ``cache_stats()``; ``_work()``: operations done, for tests.
"""

import copy
import functools
import heapq
import threading

from rmq._impl import core
from rmq._wire import nesting_exceeds
from rmq.errors import BodyError
from rmq.javacase import fold as java_fold
from rmq.javaorder import (ConcurrentTable, JavaConcurrentKeys, JavaHashKeys,
                           hash_map_table_size, hash_set_copy_table_size, java_hash_order,
                           java_long_spread_hash)

__all__ = ["RouteTable", "java_hash_order", "PERM_PRIORITY", "PERM_READ", "PERM_WRITE",
           "PERM_INHERIT", "FLAG_UNIT", "FLAG_UNIT_SUB", "MASTER_ID",
           "DEFAULT_BROKER_CHANNEL_EXPIRED_TIME", "SYNC_BROKER_MEMBER_GROUP_PREFIX"]

# PermName
PERM_PRIORITY = 1 << 3
PERM_READ = 1 << 2
PERM_WRITE = 1 << 1
PERM_INHERIT = 1 << 0
# TopicSysFlag
FLAG_UNIT = 1 << 0
FLAG_UNIT_SUB = 1 << 1
# MixAll.MASTER_ID
MASTER_ID = 0
# RouteInfoManager.DEFAULT_BROKER_CHANNEL_EXPIRED_TIME
DEFAULT_BROKER_CHANNEL_EXPIRED_TIME = 120_000
# TopicValidator.SYNC_BROKER_MEMBER_GROUP_PREFIX (SYSTEM_TOPIC_PREFIX + "SYNC_BROKER_MEMBER_")
SYNC_BROKER_MEMBER_GROUP_PREFIX = "rmq_sys_SYNC_BROKER_MEMBER_"

#: Topics removed at once past which the topic order's memory of them is dropped
#: (_topics_removed): as the C table trims its memory past 4,096 queue datas.
FORGET_AFTER_REMOVED = 4096

#: Initial capacities of Java's tables (5.0.0: ``new ConcurrentHashMap<>(1024)`` etc.).
_TOPIC_TABLE_CAPACITY = 1024
_BROKER_TABLE_CAPACITY = 128
_CLUSTER_TABLE_CAPACITY = 32

REASON_EXPIRED = "expired"
REASON_CONNECTION_CLOSED = "connection closed"


def _first_broker_id(addrs):
    """The first key of a BrokerData's brokerAddrs (``HashMap<Long, String>``), whose
    value getSystemTopicList answers: the first bucket of ``Long.hashCode`` (the id
    itself for ids 0 to 15), then the first inserted."""
    mask = hash_map_table_size(len(addrs)) - 1
    return min(addrs, key=lambda i: java_long_spread_hash(i) & mask)


# ---------------------------------------------------------------- records

def _data_version(dv, now_ms=0):
    """A DataVersion dict normalized as Java decodes it: missing counter/stateVersion
    are 0, a missing timestamp is the decode time (``System.currentTimeMillis()``)."""
    dv = dv or {}
    return {"counter": int(dv.get("counter") or 0),
            "stateVersion": int(dv.get("stateVersion") or 0),
            "timestamp": int(dv["timestamp"]) if dv.get("timestamp") is not None else now_ms}


_MAX_MAPPING_DEPTH = 16


def _int32(v, what):
    if isinstance(v, bool) or not isinstance(v, int) or not -(1 << 31) <= v < (1 << 31):
        raise BodyError(f"{what} is not an int32: {v!r:.80}")
    return v


def _checked_body(body, now_ms):
    """(wrapper, dataVersion, topicConfigTable, mappings, filterServerList) of a
    RegisterBrokerBody dict, every field checked; BodyError on a bad shape."""
    if not isinstance(body, dict):
        raise BodyError(f"RegisterBrokerBody is not an object: {body!r:.80}")
    wrapper = body.get("topicConfigSerializeWrapper") or {}
    if not isinstance(wrapper, dict):
        raise BodyError(f"topicConfigSerializeWrapper is not an object: {wrapper!r:.80}")
    raw_dv = wrapper.get("dataVersion") or {}
    if not isinstance(raw_dv, dict):
        raise BodyError(f"dataVersion is not an object: {raw_dv!r:.80}")
    for k in ("counter", "stateVersion", "timestamp"):
        if raw_dv.get(k) is not None and (isinstance(raw_dv[k], bool)
                                          or not isinstance(raw_dv[k], int)):
            raise BodyError(f"dataVersion.{k} is not an integer: {raw_dv[k]!r}")
    dv = _data_version(raw_dv, now_ms)
    table = wrapper.get("topicConfigTable") or {}
    if not isinstance(table, dict):
        raise BodyError(f"topicConfigTable is not an object: {table!r:.80}")
    checked = {}
    for key, tc in table.items():
        if not isinstance(tc, dict):
            raise BodyError(f"topic config {key!r} is not an object: {tc!r:.80}")
        name = tc.get("topicName", key)
        if not isinstance(name, str):
            raise BodyError(f"topic config {key!r}: topicName is not a string: {name!r}")
        checked[key] = {
            "topicName": name,
            "perm": _int32(tc.get("perm", PERM_READ | PERM_WRITE), f"{key}.perm"),
            "readQueueNums": _int32(tc.get("readQueueNums", 16), f"{key}.readQueueNums"),
            "writeQueueNums": _int32(tc.get("writeQueueNums", 16), f"{key}.writeQueueNums"),
            "topicSysFlag": _int32(tc.get("topicSysFlag", 0), f"{key}.topicSysFlag"),
        }
    mappings = wrapper.get("topicQueueMappingInfoMap") or {}
    if not isinstance(mappings, dict):
        raise BodyError(f"topicQueueMappingInfoMap is not an object: {mappings!r:.80}")
    for topic, info in mappings.items():
        if not isinstance(topic, str):
            raise BodyError(f"topic queue mapping topic is not a string: {topic!r:.80}")
        # Java puts it in a map by bname: null fails the registration (NPE).
        if not isinstance(info, dict) or not isinstance(info.get("bname"), str):
            raise BodyError(f"topic queue mapping of {topic!r} is not a mapping info: "
                            f"{info!r:.80}")
        # TopicQueueMappingInfo nests two levels (currIdMap); route answers deep-copy it.
        if nesting_exceeds(info, _MAX_MAPPING_DEPTH):
            raise BodyError(f"topic queue mapping of {topic!r} nests deeper than "
                            f"{_MAX_MAPPING_DEPTH}")
    filter_servers = body.get("filterServerList") or []
    if not isinstance(filter_servers, list) or not all(isinstance(f, str) for f in filter_servers):
        raise BodyError(f"filterServerList is not a list of addresses: {filter_servers!r:.80}")
    return wrapper, dv, checked, mappings, filter_servers


def _queue_data(broker_name, read, write, perm, sys_flag):
    """A QueueData dict, fields in Java's (alphabetical) order."""
    return {"brokerName": broker_name, "perm": perm, "readQueueNums": read,
            "topicSysFlag": sys_flag, "writeQueueNums": write}


class _BrokerData:
    """BrokerData. ``enable_acting_master`` is None for a broker that did not send the
    header (pre-5.x): Java's ``isOldVersionBroker``, which never acts as master."""

    __slots__ = ("cluster", "broker_name", "addrs", "zone_name", "enable_acting_master")

    def __init__(self, cluster, broker_name):
        self.cluster = cluster
        self.broker_name = broker_name
        self.addrs = {}                 # broker id -> addr
        self.zone_name = None
        self.enable_acting_master = None

    @property
    def acting_master_enabled(self):
        return bool(self.enable_acting_master)

    def to_dict(self):
        """BrokerData as Java 5.x serializes it (alphabetical, nulls omitted).
        ``enableActingMaster`` is a boolean there, always written: false for a broker
        that did not declare it (a 4.x one), as the 5.0.0 vectors show; 4.9.8's
        NameServer had no such field."""
        d = {"brokerAddrs": dict(sorted(self.addrs.items())),
             "brokerName": self.broker_name, "cluster": self.cluster,
             "enableActingMaster": self.acting_master_enabled}
        if self.zone_name is not None:
            d["zoneName"] = self.zone_name
        return d


# BrokerLiveInfo, its connection aside (RouteTable._conn_of): an exact tuple of
# plain values, which the cyclic collector stops tracking (it keeps tracking objects
# and tuple subclasses). Its full passes hold the GIL while they walk every tracked
# object, and route answers wait for them (bench/README.md, expiry under load).
# Replaced, not changed, on a heartbeat; its DataVersion as sorted (key, value) pairs
# (a dict, even untracked, keeps the tuple holding it tracked).
_LAST, _TIMEOUT, _DATA_VERSION, _HA_ADDR = range(4)


def _frozen(data_version):
    return tuple(sorted(data_version.items()))


def _holding(acquire, release):
    def wrap(method):
        def locked(self, *args, **kwargs):
            getattr(self._lock, acquire)()
            try:
                return method(self, *args, **kwargs)
            finally:
                getattr(self._lock, release)()
        locked.__name__, locked.__doc__ = method.__name__, method.__doc__
        return locked
    return wrap


#: Run a mutator as the only writer / a reader of the cold tables under the table lock.
_writes = _holding("acquire_write", "release_write")
_reads = _holding("acquire_read", "release_read")


def _keep_zone(route, zone):
    """Java 5.0.0's ZoneRouteRPCHook on a TopicRouteData dict, for a query's folded
    ``zone``: a broker with a master (id 0) whose zone is another (or none) goes,
    with its QueueData and its addresses' filter servers; a broker without a master
    stays (its slaves serve reads). The hook re-encodes the answer with plain
    ``encode()``: the caller writes the legacy form, whatever the client's version."""
    removed = {}
    kept = []
    for bd in route["brokerDatas"]:
        name = bd.get("zoneName")
        if MASTER_ID not in bd["brokerAddrs"] or (name is not None and java_fold(name) == zone):
            kept.append(bd)
        else:
            removed[bd["brokerName"]] = bd
    route["brokerDatas"] = kept
    route["queueDatas"] = [qd for qd in route["queueDatas"] if qd["brokerName"] not in removed]
    servers = route.get("filterServerTable")
    if servers:
        for bd in removed.values():
            for addr in bd["brokerAddrs"].values():
                servers.pop(addr, None)


_EMPTY_BODY = {"filterServerList": [], "topicConfigSerializeWrapper": {
    "dataVersion": {"counter": 0, "stateVersion": 0, "timestamp": 0}, "topicConfigTable": {}}}


# ---------------------------------------------------------------- the tables

class RouteTable:
    """The NameServer's route tables. Thread-safe when the storage is
    (``concurrent``: the compiled core's); else call from one thread (the server's
    table thread), as Java serializes writers behind one lock.

    ``support_acting_master`` (NamesrvConfig.supportActingMaster) and
    ``delete_topic_with_broker_registration`` may be changed at run time; changing
    the first invalidates every cached route. ``storage``: the topic-table class
    (default: the selected core's ``TopicTable``); ``cache_bytes``: the byte budget
    of the cached route answers (None: unbounded).
    """

    storage = None      # the topic-table storage class (see the module doc)

    def __init__(self, *, support_acting_master=False,
                 delete_topic_with_broker_registration=False, storage=None,
                 cache_bytes=None):
        self._tt = (storage or self.storage or core.TopicTable)(self._broker_state,
                                                                 cache_bytes=cache_bytes)
        self._lock = self._tt.lock
        self.concurrent = self._tt.concurrent   # whether several threads may use it
        self._order_topic_conf = None
        self._brokers = {}          # brokerName -> _BrokerData
        self._clusters = {}         # cluster -> its brokerNames (JavaHashKeys)
        # The iteration orders of Java's tables (see the module doc)
        self._broker_order = JavaConcurrentKeys(_BROKER_TABLE_CAPACITY)
        self._cluster_order = JavaConcurrentKeys(_CLUSTER_TABLE_CAPACITY)
        self._topic_order = ConcurrentTable(_TOPIC_TABLE_CAPACITY)
        self._topic_resized = False     # a resize of topicQueueTable not replayed yet
        self._topic_order_lock = threading.Lock()   # readers replay it: one at a time
        self._live = {}             # (cluster, addr) -> BrokerLiveInfo (_LAST, ...)
        self._conn_of = {}          # (cluster, addr) -> the connection it registered over
        self._by_conn = {}          # conn -> {(cluster, addr): None}: its live entries
        # The liveness scan's index: a heap of (deadline ms, key), a key queued once
        # at the deadline in _queued (an earlier one, after a shorter timeout, queues
        # it again); a heartbeat moves nothing: the scan re-queues what it finds alive.
        self._deadlines = []
        self._queued = {}           # (cluster, addr) -> its deadline in the heap
        self._filters = {}          # (cluster, addr) -> [filter server]
        self._mappings = {}         # topic -> {bname -> TopicQueueMappingInfo dict}
        self._support_acting_master = bool(support_acting_master)
        self.delete_topic_with_broker_registration = bool(delete_topic_with_broker_registration)

    # ------------------------------------------------------------ route cache

    @property
    def version(self):
        """Incremented on every change that may alter some topic's route."""
        return self._tt.version

    def route_body(self, topic, legacy=False, zone=None):
        """The encoded GET_ROUTEINFO_BY_TOPIC answer of ``topic`` in the standard or
        the legacy form, or filtered for ``zone`` (a zone-mode query's folded zone,
        ``rmq._wire.route_zone``: always legacy), built on first demand and cached
        until its route changes; None when the topic has no route (Java answers 17)."""
        body, version = self._tt.route(topic, bool(legacy), zone)
        if body is None and version is not None:
            body = self._build_route_body(topic, legacy, zone)
            if body is not None:
                self._tt.store_route(topic, bool(legacy), body, version, zone)
        return body

    def cached_route_body(self, topic, legacy=False, zone=None):
        """The answer of ``topic`` the storage has without these rules (cached, or built
        in C) or None: any thread may ask while another changes the tables."""
        return self._tt.route(topic, bool(legacy), zone)[0]

    @_reads
    def _build_route_body(self, topic, legacy, zone=None):
        route = self.topic_route(topic)
        if route is None:
            return None
        if self._order_topic_conf is not None:
            route["orderTopicConf"] = self._order_topic_conf(topic)
        if zone is not None:
            _keep_zone(route, zone)
            legacy = True
        return self._tt.encode_topic_route_data(route, legacy=bool(legacy))

    def serve_routes(self, decoder, data, limit=-1, *, build=True):
        """Feed ``data`` to ``decoder`` (the core's FrameDecoder); answer the
        GET_ROUTEINFO_BY_TOPIC requests (not oneway) with ``route_body`` (``build``
        False: ``cached_route_body``) in the form asked (standard from version 401 or
        with acceptStandardJsonOnly=true), complete frames in C with the compiled
        storage; a topic without a route gets TOPIC_NOT_EXIST (17) here too (with
        ``build`` False, only one the table does not hold). ``(answers, others,
        error)``: the answer frames as one bytes, the other commands, the
        ProtocolError that ended the stream or None. Past ``limit`` bytes of answers
        (-1: none) or after another request (it may change routes), queries are
        handed back, so that answers keep the requests' order."""
        return self._tt.serve_routes(self.route_body if build else self.cached_route_body,
                                     decoder, data, limit, build)

    def route_server(self, build=True):
        """``serve_routes`` as a function ``(decoder, data, limit)``, bound once."""
        return functools.partial(self._tt.serve_routes,
                                 self.route_body if build else self.cached_route_body,
                                 builds=build)

    @property
    def topic_table(self):
        """The storage's topic table (the compiled core's TopicTable is what its I/O
        engine answers route queries from)."""
        return self._tt

    @property
    def answer_serialize_type(self):
        """The serialize type ``serve_routes`` answers in: "JSON" (the default) or
        "ROCKETMQ", whatever the request used, as Java 5.x answers in the NameServer's
        own (``rocketmq.serialize.type``; the server sets it from its config)."""
        return self._tt.answer_serialize_type

    @answer_serialize_type.setter
    def answer_serialize_type(self, name):
        self._tt.answer_serialize_type = name

    @_writes
    def forget_route(self, topic=None):
        """Drop the cached answers of ``topic`` (None: of every topic), e.g. when
        something outside the tables that an answer carries (orderTopicConf) changed."""
        if topic is None:
            self._tt.touch_all()
        else:
            self._tt.touch((topic,))

    def cached_topics(self, legacy=False):
        """The topics whose answer (in that form) is cached: for tests and admin."""
        return self._tt.cached_topics(bool(legacy))

    @property
    def cache_budget(self):
        """The byte budget of the cached route answers (None: unbounded)."""
        return self._tt.cache_budget

    @cache_budget.setter
    def cache_budget(self, value):
        self._tt.cache_budget = value

    def cache_stats(self):
        """The answer cache's counters since start and its size now: ``hits``,
        ``misses`` (built, or found shared), ``shared``, ``evictions``, ``refused``
        (built for one query, not admitted), ``bytes``, ``budget``, ``answers``
        (distinct ones held), ``entries`` (topic forms pointing at one)."""
        return self._tt.cache_stats()

    @property
    def order_topic_conf(self):
        """None, or a function topic -> its ORDER_TOPIC_CONFIG value: with
        orderMessageEnable, route answers carry it as ``orderTopicConf``."""
        return self._order_topic_conf

    @order_topic_conf.setter
    @_writes
    def order_topic_conf(self, get):
        self._order_topic_conf = get
        self._tt.python_routes = bool(self._mappings or get is not None)
        self._tt.touch_all()

    @property
    def support_acting_master(self):
        return self._support_acting_master

    @support_acting_master.setter
    @_writes
    def support_acting_master(self, value):
        value = bool(value)
        if value != self._support_acting_master:
            self._support_acting_master = value
            self._tt.touch_all()

    def _broker_state(self, broker_name):
        """(BrokerData dict or None, whether its routes need these rules: filter
        servers or an acting-master rewrite, rare): what a storage needs of it."""
        bd = self._brokers.get(broker_name)
        if bd is None:
            return None, False
        return bd.to_dict(), bool(
            (bd.addrs and MASTER_ID not in bd.addrs and bd.enable_acting_master)
            or any((bd.cluster, a) in self._filters for a in bd.addrs.values()))

    def _read_body(self, body, now_ms):
        """(dataVersion, topic configs, mappings, filter servers) of a registration
        body (bytes, a decoded dict or None), checked in full: BodyError."""
        return self._tt.read_body(_EMPTY_BODY if body is None else body, now_ms, _checked_body)

    # ------------------------------------------------------------ registration

    def register_broker(self, cluster, broker_addr, broker_name, broker_id, ha_server_addr, *,
                        body, conn=None, now_ms, timeout_ms=DEFAULT_BROKER_CHANNEL_EXPIRED_TIME,
                        zone_name=None, enable_acting_master=None):
        """REGISTER_BROKER (RouteInfoManager.registerBroker, 5.x).

        ``body``: the RegisterBrokerBody, raw (bytes: JSON or compressed) or decoded
        (a dict); None: no body, as Java's empty RegisterBrokerBody.
        ``enable_acting_master``: the header's value, None when the broker did not
        send it (pre-5.x broker: never a prime slave, and its BrokerData carries no
        ``enableActingMaster``). ``timeout_ms`` None: 120 s.

        Returns ``{"masterAddr", "haServerAddr", "changed", "topics_changed",
        "topics_removed", "first", "ignored", "failed", "topics"}`` (``topics``: how
        many topic configs the body has): masterAddr/haServerAddr are set for a slave
        whose master is registered and alive (None for the master itself, as in the
        4.9.8 vector); ``first`` when the broker (brokerName, or this broker id) was
        new; ``changed`` when topic configs were applied (Java's condition: a first
        registration, a new DataVersion, a topic the broker had no queue data for);
        ``topics_changed``: how many of them made the broker's queue data new or
        different (what Java logs, a line per topic; 0 for a new DataVersion with the
        same topics); ``topics_removed``: the broker's topics the body no longer has,
        removed under deleteTopicWithBrokerRegistration (Java logs each); ``ignored``
        when Java ignores the registration (an address conflicting with a registered
        one of higher stateVersion: Java answers SUCCESS with no addresses);
        ``failed`` when Java returns null (a single-topic registration from an
        unregistered broker: Java answers SYSTEM_ERROR "register broker failed").
        """
        # Decode and check everything before any table changes (as Java decodes the
        # whole body first): a bad body is refused, never half applied. It is read
        # before the table lock is taken: readers wait only for the apply.
        parts = self._read_body(body, now_ms)
        return self._register(cluster, broker_addr, broker_name, broker_id, ha_server_addr,
                              parts, conn, now_ms, timeout_ms, zone_name, enable_acting_master)

    @_writes
    def _register(self, cluster, broker_addr, broker_name, broker_id, ha_server_addr, parts,
                  conn, now_ms, timeout_ms, zone_name, enable_acting_master):
        result = {"masterAddr": None, "haServerAddr": None, "changed": False,
                  "topics_changed": 0, "topics_removed": 0, "first": False, "ignored": False,
                  "failed": False}
        broker_id = int(broker_id)
        dv, tc_table, mappings, filter_servers = parts
        result["topics"] = len(tc_table)
        bd, created, added_to_cluster = self._broker_data(cluster, broker_name, zone_name,
                                                          enable_acting_master)
        addrs = bd.addrs
        # Switch slave to master: the same ip:port has only one record (any other id goes)
        stale_ids = [i for i, a in addrs.items() if a == broker_addr and i != broker_id]
        for i in stale_ids:
            del addrs[i]
        if stale_ids:
            self._tt.broker_changed(broker_name)

        frozen_dv = _frozen(dv)
        # Another address at this id with a higher stateVersion wins: ignore this one.
        old_addr = addrs.get(broker_id)
        if old_addr is not None and old_addr != broker_addr:
            old_info = self._live.get((cluster, old_addr))
            if (old_info is not None
                    and dict(old_info[_DATA_VERSION])["stateVersion"] > dv["stateVersion"]):
                self._pop_live((cluster, broker_addr))
                result["ignored"] = True
                return result

        # A single-topic (incremental) registration before the broker's first one.
        if broker_id not in addrs and len(tc_table) == 1:
            # Deviation: Java leaves a BrokerData with no address behind when it had
            # just created it; undo that creation instead.
            if created and not addrs:
                del self._brokers[broker_name]
                self._broker_order.discard(broker_name)
                self._tt.broker_changed(broker_name)
                if added_to_cluster:
                    self._discard_from_cluster(cluster, broker_name)
            result["failed"] = True
            return result

        if old_addr != broker_addr:
            addrs[broker_id] = broker_addr
            self._tt.broker_changed(broker_name)
        result["first"] = register_first = created or not old_addr
        is_master = broker_id == MASTER_ID
        if is_master or (bd.enable_acting_master is not None and broker_id == min(addrs)):
            # the master, or the prime slave (never a pre-5.x broker's)
            prev = self._live.get((cluster, broker_addr))
            (result["changed"], result["topics_changed"],
             result["topics_removed"]) = self._apply_topics(
                bd, tc_table, mappings,
                register_first or prev is None or prev[_DATA_VERSION] != frozen_dv,
                # the acting master is read-only
                readonly=not is_master and bd.acting_master_enabled)

        key = (cluster, broker_addr)
        info = (now_ms,
                DEFAULT_BROKER_CHANNEL_EXPIRED_TIME if timeout_ms is None else int(timeout_ms),
                frozen_dv, ha_server_addr)
        self._live[key] = info     # (replaced in place: the table keeps its order)
        self._index_conn(key, conn)
        self._queue(key, info)
        if filter_servers is not None:
            if not filter_servers:
                if self._filters.pop(key, None) is not None:
                    self._touch_addr(cluster, broker_addr)
            elif self._filters.get(key) != list(filter_servers):
                self._filters[key] = list(filter_servers)
                self._touch_addr(cluster, broker_addr)

        master_addr = None if is_master else addrs.get(MASTER_ID)
        master_info = self._live.get((cluster, master_addr)) if master_addr is not None else None
        if master_info is not None:
            result["haServerAddr"] = master_info[_HA_ADDR]
            result["masterAddr"] = master_addr
        return result

    def _broker_data(self, cluster, broker_name, zone_name, enable_acting_master):
        """A registration's cluster entry and BrokerData: (BrokerData, whether it was
        created, whether the cluster gained the brokerName)."""
        names = self._clusters.get(cluster)
        if names is None:
            names = self._clusters[cluster] = JavaHashKeys()
            self._cluster_order.add(cluster)
        added_to_cluster = broker_name not in names
        names.add(broker_name)
        bd = self._brokers.get(broker_name)
        created = bd is None
        if created:
            bd = self._brokers[broker_name] = _BrokerData(cluster, broker_name)
            self._broker_order.add(broker_name)
        # None: a pre-5.x broker, which does not send the header (isOldVersionBroker)
        declared = None if enable_acting_master is None else bool(enable_acting_master)
        if bd.enable_acting_master != declared or bd.zone_name != zone_name:
            bd.enable_acting_master = declared
            bd.zone_name = zone_name
            self._tt.broker_changed(bd.broker_name)
        return bd, created, added_to_cluster

    def _apply_topics(self, bd, tc_table, mappings, changed, readonly):
        """The topic configs (all of them when ``changed``: a first registration or a
        new DataVersion; else only topics the broker has no queue data for yet) and
        the static topics' mappings (when ``changed``). (Whether some topic was
        written, how many topics' queue data of the broker that changed, how many
        topics it no longer reports were removed.)"""
        # topics the broker no longer reports (static topics not supported)
        delete_missing = self.delete_topic_with_broker_registration and not mappings
        if delete_missing:
            self._settle_topic_order()
        written, changed_topics, removed = self._tt.apply_topic_configs(
            bd.broker_name, tc_table, force=changed, readonly=readonly,
            delete_missing=delete_missing)
        self._topics_added()
        if changed:
            for topic, info in mappings.items():
                by_broker = self._mappings.setdefault(topic, {})
                bname = info.get("bname")
                if by_broker.get(bname) != info:
                    by_broker[bname] = copy.deepcopy(info)
                    self._tt.python_routes = True
                    self._tt.touch((topic,))
        return written, changed_topics, removed

    def _discard_from_cluster(self, cluster, broker_name):
        names = self._clusters.get(cluster)
        if names is not None:
            names.discard(broker_name)
            if not names:
                del self._clusters[cluster]
                self._cluster_order.discard(cluster)

    def _topics_added(self):
        """After a change that may have added topics (after its removals): whether it
        took Java's topicQueueTable past a resize (cheap: a count)."""
        if self._tt.topic_count() >= self._topic_order.threshold:
            self._topic_resized = True

    def _topics_removed(self, before):
        """After a removal of topics (``before``: the count then): once many went (a
        large broker dropped), the topic order forgets their placings: kept, they would
        be the few objects left in the memory a registration's millions took, and keep
        it all (bench/README.md, bigbroker)."""
        if before - self._tt.topic_count() >= FORGET_AFTER_REMOVED:
            self._topic_order.forget_absent(self._tt.topic_hashes()[0])
            forget = getattr(core.java_spread_hash, "cache_clear", None)
            if forget is not None:          # (the pure-Python hash caches names)
                forget()

    def _settle_topic_order(self):
        """Replay topicQueueTable's resizes since the last replay (ConcurrentTable.grow),
        which order its iteration: before a change that removes topics (the write lock
        held) or an answer that lists them (a read lock held: no change meanwhile, and
        one reader replays). Exact as no topic was removed since the resize."""
        if self._topic_resized:
            with self._topic_order_lock:
                if self._topic_resized:
                    self._topic_order.grow(self._tt.topic_count(), self._tt.topic_hashes)
                    self._topic_resized = False

    def _topic_numbers(self):
        """{topic: its insertion number}, the topic table's order settled."""
        self._settle_topic_order()
        return {t: s for s, t in self._tt.topic_seqs()}

    def _topic_table_order(self, topics, numbers):
        """``topics`` in the iteration order of Java's topicQueueTable."""
        return self._topic_order.order((numbers[t], t) for t in topics)

    def _index_conn(self, key, conn):
        """Live entry ``key`` came over ``conn`` (None: over none) now."""
        old = self._conn_of.pop(key, None)
        if old is not None:
            keys = self._by_conn[old]
            del keys[key]
            if not keys:
                del self._by_conn[old]
        if conn is not None:
            self._conn_of[key] = conn
            self._by_conn.setdefault(conn, {})[key] = None

    def _pop_live(self, key):
        """Remove a live entry (and its place in the connection index): it, or None."""
        self._index_conn(key, None)
        return self._live.pop(key, None)

    def _drop_live(self, cluster, broker_addr):
        """Forget a (cluster, addr) live entry and its filter servers."""
        key = (cluster, broker_addr)
        info = self._pop_live(key)
        if self._filters.pop(key, None) is not None:
            self._touch_addr(cluster, broker_addr)
        return info

    def _touch_addr(self, cluster, broker_addr):
        # Filter servers are kept per (cluster, address): every broker of the cluster
        # listing that address carries them in its routes.
        for bd in self._brokers.values():
            if bd.cluster == cluster and broker_addr in bd.addrs.values():
                self._tt.broker_changed(bd.broker_name)

    @_writes
    def unregister_broker(self, cluster, broker_addr, broker_name, broker_id):
        """UNREGISTER_BROKER (RouteInfoManager.unRegisterBroker, 5.x): drops the live
        entry and the address (by value, whatever id it has), then the brokerName when
        it has no address left (with its topics' queue data and, when empty, the
        cluster). When addresses remain, the master is gone and the broker enables
        acting master, its queue data lose the write permission.
        Returns True when a live entry or an address was removed."""
        removed_live = self._drop_live(cluster, broker_addr) is not None
        removed_addr = False
        bd = self._brokers.get(broker_name)
        if bd is not None:
            ids = [i for i, a in bd.addrs.items() if a == broker_addr]
            for i in ids:
                del bd.addrs[i]
            removed_addr = bool(ids)
            if ids and bd.addrs:    # (with none left, the broker goes: changed below)
                self._tt.broker_changed(broker_name)
            if not bd.addrs:
                del self._brokers[broker_name]
                self._broker_order.discard(broker_name)
                self._tt.broker_changed(broker_name)
                self._discard_from_cluster(cluster, broker_name)
                self._settle_topic_order()
                before = self._tt.topic_count()
                self._tt.remove_broker(broker_name)
                self._topics_removed(before)
            elif bd.acting_master_enabled and min(bd.addrs) > MASTER_ID:
                # Master has been unregistered: wipe the write perm
                self._tt.write_perm(broker_name, True)
        return removed_live or removed_addr

    # ------------------------------------------------------------ liveness

    def _drop(self, keys, reason):
        if not keys:
            return []
        # setupUnRegisterRequest: the (brokerName, brokerId) holding each address among
        # the BrokerData of its cluster (the first in table order), found in one pass.
        # Exact while dropping: a drop removes only its own address.
        owners = {}
        for bd in self._brokers.values():
            for i, a in bd.addrs.items():
                owners.setdefault((bd.cluster, a), (bd.broker_name, i))
        dropped = []
        for cluster, addr in keys:
            if (cluster, addr) not in self._live:
                continue
            conn = self._conn_of.get((cluster, addr))
            name, broker_id = owners.get((cluster, addr), (None, None))
            if name is not None:
                self.unregister_broker(cluster, addr, name, broker_id)
            else:
                # Deviation: Java 5.x leaves such an entry (its address was replaced
                # by another one at the same id) in brokerLiveTable forever.
                self._drop_live(cluster, addr)
            dropped.append({"cluster": cluster, "brokerName": name, "brokerAddr": addr,
                            "brokerId": broker_id, "reason": reason, "conn": conn})
        return dropped

    def _queue(self, key, info):
        """Index the live entry's deadline unless it is queued at that time or earlier."""
        deadline = info[_LAST] + info[_TIMEOUT]
        queued = self._queued.get(key)
        if queued is None or deadline < queued:
            self._queued[key] = deadline
            heapq.heappush(self._deadlines, (deadline, key))

    @_writes
    def scan_not_active(self, now_ms):
        """scanNotActiveBroker: drops every broker whose last registration/heartbeat is
        older than its own timeout (``last + timeout < now``, strictly), in deadline
        order. Returns ``[{"cluster", "brokerName", "brokerAddr", "brokerId", "reason",
        "conn"}]``; Java also closes each dropped broker's connection (``conn``).
        Deviation: Java walks every live broker; this looks only at the brokers
        whose deadline passed (found alive, they are queued at their new one)."""
        expired = []
        heap, queued = self._deadlines, self._queued
        while heap and heap[0][0] < now_ms:
            deadline, key = heapq.heappop(heap)
            if queued.get(key) != deadline:
                continue                # queued again, at an earlier deadline
            del queued[key]
            info = self._live.get(key)
            if info is None:
                continue                # unregistered or dropped meanwhile
            if info[_LAST] + info[_TIMEOUT] < now_ms:
                expired.append(key)
            else:
                self._queue(key, info)
        return self._drop(expired, REASON_EXPIRED)

    @_writes
    def connection_closed(self, conn):
        """BrokerHousekeepingService.onChannelClose: drops at once the brokers whose
        last registration came over ``conn`` (same shape as ``scan_not_active``).
        Deviation: Java drops only the first such broker; all of them go here."""
        return self._drop(list(self._by_conn.get(conn, ())), REASON_CONNECTION_CLOSED)

    @_writes
    def heartbeat(self, cluster, broker_addr, *, now_ms):
        """BROKER_HEARTBEAT (904): refreshes the broker's lastUpdateTimestamp."""
        key = (cluster, broker_addr)
        info = self._live.get(key)
        if info is not None:
            self._live[key] = info = (now_ms,) + info[1:]
            self._queue(key, info)

    @_writes
    def query_data_version(self, cluster, broker_addr, broker_name, broker_id, data_version, *,
                           now_ms):
        """QUERY_DATA_VERSION (322, 5.x DefaultRequestProcessor.queryBrokerTopicConfig):
        ``(changed, stored DataVersion or None)``; refreshes liveness (5.x always;
        4.9.x only when unchanged)."""
        info = self._live.get((cluster, broker_addr))
        changed = info is None or info[_DATA_VERSION] != _frozen(_data_version(data_version, now_ms))
        if info is None:
            return changed, None
        key = (cluster, broker_addr)
        self._live[key] = info = (now_ms,) + info[1:]
        self._queue(key, info)
        return changed, dict(info[_DATA_VERSION])

    # ------------------------------------------------------------ warm restart

    @_reads
    def snapshot(self):
        """The tables as plain data (JSON types) for a warm restart: BrokerData, the
        clusters, the live entries (their connections left out), filter servers,
        mappings and every topic's QueueData in insertion order."""
        return {
            "brokers": [{"cluster": bd.cluster, "brokerName": bd.broker_name,
                         "brokerAddrs": [[i, a] for i, a in bd.addrs.items()],
                         "zoneName": bd.zone_name,
                         "enableActingMaster": bd.enable_acting_master}
                        for bd in self._brokers.values()],
            "clusters": [[c, list(names)] for c, names in self._clusters.items()],
            "live": [[c, a, info[_TIMEOUT], dict(info[_DATA_VERSION]), info[_HA_ADDR]]
                     for (c, a), info in self._live.items()],
            "filters": [[c, a, list(servers)] for (c, a), servers in self._filters.items()],
            "mappings": [[t, m] for t, m in self._mappings.items()],
            "topics": [[t, list(self._tt.qmap(t).values())] for _, t in self._tt.topic_seqs()],
        }

    @_writes
    def restore(self, snapshot, now_ms):
        """Load a ``snapshot`` into these tables, empty (at start). Every live entry
        is provisional: it has no connection and its deadline is ``now_ms`` plus its
        timeout, so that the scan drops a broker that does not register again in
        time, and its re-registration makes it live as any other. Returns the number
        of live entries. Raises BodyError on a snapshot of another shape (nothing
        is kept then)."""
        if self._brokers or self._live or self._tt.topic_count():
            raise BodyError("restore needs empty route tables")
        try:
            brokers = {}
            for b in snapshot["brokers"]:
                bd = brokers[b["brokerName"]] = _BrokerData(b["cluster"], b["brokerName"])
                bd.addrs = {int(i): str(a) for i, a in b["brokerAddrs"]}
                bd.zone_name = b.get("zoneName")
                bd.enable_acting_master = b.get("enableActingMaster")
            clusters = {c: JavaHashKeys(names) for c, names in snapshot["clusters"]}
            live = {(c, a): (now_ms, int(timeout), _frozen(dv), ha)
                    for c, a, timeout, dv, ha in snapshot["live"]}
            filters = {(c, a): list(servers) for c, a, servers in snapshot["filters"]}
            mappings = {t: dict(m) for t, m in snapshot["mappings"]}
            topics = [(str(t), [{"brokerName": str(q["brokerName"]), "perm": int(q["perm"]),
                                 "readQueueNums": int(q["readQueueNums"]),
                                 "topicSysFlag": int(q["topicSysFlag"]),
                                 "writeQueueNums": int(q["writeQueueNums"])} for q in qds])
                      for t, qds in snapshot["topics"]]
        except (KeyError, TypeError, ValueError) as e:
            raise BodyError(f"not a route table snapshot: {e!r}") from None
        self._brokers, self._clusters, self._filters, self._mappings = (
            brokers, clusters, filters, mappings)
        self._broker_order = JavaConcurrentKeys(_BROKER_TABLE_CAPACITY, brokers)
        self._cluster_order = JavaConcurrentKeys(_CLUSTER_TABLE_CAPACITY, clusters)
        for key, info in live.items():
            self._live[key] = info
            self._queue(key, info)
        for topic, qds in topics:
            for qd in qds:
                self._tt.put_queue_data(topic, qd)
        self._topics_added()
        self._tt.python_routes = bool(self._mappings or self._order_topic_conf is not None)
        for name in self._brokers:
            self._tt.broker_changed(name)
        self._tt.touch_all()
        return len(live)

    def live_count(self):
        """How many brokers are live (any thread may ask: a length, read at once)."""
        return len(self._live)

    @_reads
    def live_brokers(self):
        """The live table, for logs and admin."""
        return [{"brokerAddr": addr, "cluster": cluster, "lastUpdateTimestamp": info[_LAST],
                 "timeoutMillis": info[_TIMEOUT], "haServerAddr": info[_HA_ADDR],
                 "dataVersion": dict(info[_DATA_VERSION])}
                for (cluster, addr), info in self._live.items()]

    # ------------------------------------------------------------ routes

    @_reads
    def topic_route(self, topic):
        """GET_ROUTEINFO_BY_TOPIC (pickupTopicRouteData): a TopicRouteData dict, or
        None when the topic has no queue data or none of its brokers is registered
        (Java answers 17). ``orderTopicConf`` is left to the caller."""
        qmap = self._tt.qmap(topic)
        if not qmap:
            return None
        # queueDatas: the topic's HashMap, whose table follows the most it held;
        # brokerDatas: new HashSet<>(its keySet()), the names again in a table sized
        # for their count (twice the map's at 12, 24, 48... on JDK 8 to 18).
        names = java_hash_order(qmap, peak=self._tt.qmap_peak(topic))
        broker_names = java_hash_order(names, hash_set_copy_table_size(len(names)))
        broker_datas = []
        filter_table = {}
        for name in broker_names:
            bd = self._brokers.get(name)
            if bd is None:
                continue
            clone = bd.to_dict()
            broker_datas.append(clone)
            if self._filters:
                for addr in clone["brokerAddrs"].values():
                    servers = self._filters.get((bd.cluster, addr))
                    if servers is not None:         # Java puts null, which JSON omits
                        filter_table[addr] = list(servers)
        if not broker_datas:
            return None
        route = {"brokerDatas": broker_datas, "filterServerTable": filter_table,
                 "queueDatas": [dict(qmap[name]) for name in names]}
        mapping = self._mappings.get(topic)
        if mapping is not None:
            route["topicQueueMappingByBroker"] = copy.deepcopy(mapping)
        if self._support_acting_master and not topic.startswith(SYNC_BROKER_MEMBER_GROUP_PREFIX):
            self._rewrite_acting_master(route)
        return route

    @staticmethod
    def _rewrite_acting_master(route):
        """With supportActingMaster: a broker with slaves but no master, that enables
        acting master and whose queues are not writeable, shows its smallest-id
        slave as id 0."""
        if not any(bd["brokerAddrs"] and MASTER_ID not in bd["brokerAddrs"]
                   for bd in route["brokerDatas"]):
            return
        for bd in route["brokerDatas"]:
            addrs = bd["brokerAddrs"]
            if not addrs or MASTER_ID in addrs or not bd.get("enableActingMaster"):
                continue
            for qd in route["queueDatas"]:
                if qd["brokerName"] == bd["brokerName"]:
                    if not qd["perm"] & PERM_WRITE:
                        acting = addrs.pop(min(addrs))
                        bd["brokerAddrs"] = {MASTER_ID: acting, **addrs}
                    break

    @_writes
    def register_topic(self, topic, queue_datas):
        """REGISTER_TOPIC_IN_NAMESRV (217, 5.x registerTopic): sets the queue data of
        the given brokers. A queue data naming an unregistered broker stops it: for
        a new topic nothing is applied; for an existing one the queue datas before it
        stay applied (as Java)."""
        if not queue_datas:
            return
        qds = []
        for q in queue_datas:       # all checked before anything is applied
            if not isinstance(q, dict):
                raise BodyError(f"QueueData is not an object: {q!r:.80}")
            if not isinstance(q.get("brokerName"), str):
                raise BodyError(f"QueueData.brokerName is not a string: "
                                f"{q.get('brokerName')!r:.80}")
            flag = q.get("topicSysFlag", q.get("topicSynFlag"))
            qds.append(_queue_data(q.get("brokerName"),
                                   _int32(q.get("readQueueNums") or 0, "readQueueNums"),
                                   _int32(q.get("writeQueueNums") or 0, "writeQueueNums"),
                                   _int32(q.get("perm") or 0, "perm"),
                                   _int32(flag or 0, "topicSysFlag")))
        exists = self._tt.qmap(topic) is not None
        for qd in qds:
            if qd["brokerName"] not in self._brokers:
                return
            if exists:
                self._tt.put_queue_data(topic, qd)
        if not exists:
            for qd in qds:
                self._tt.put_queue_data(topic, qd)
            self._topics_added()

    @_writes
    def delete_topic(self, topic, cluster=None):
        """DELETE_TOPIC_IN_NAMESRV (216): the whole topic, or (with ``cluster``) its
        queue data on that cluster's brokers (nothing when the cluster is unknown)."""
        self._settle_topic_order()
        if cluster:
            names = self._clusters.get(cluster)
            if not names or self._tt.qmap(topic) is None:
                return
            for name in list(names):
                self._tt.remove_queue_data(topic, name)
        else:
            for name in list(self._tt.qmap(topic) or ()):
                self._tt.remove_queue_data(topic, name)

    @_writes
    def wipe_write_perm(self, broker_name):
        """WIPE_WRITE_PERM_OF_BROKER (205): clears PERM_WRITE on every queue data of the
        broker; returns how many (all of them, changed or not)."""
        return self._tt.write_perm(broker_name, True)

    @_writes
    def add_write_perm(self, broker_name):
        """ADD_WRITE_PERM_OF_BROKER (327): sets perm to PERM_READ|PERM_WRITE (6) on every
        queue data of the broker (other bits dropped, as Java); returns the count."""
        return self._tt.write_perm(broker_name, False)

    # ------------------------------------------------------------ lists

    @_reads
    def cluster_info(self):
        """GET_BROKER_CLUSTER_INFO (106): (brokerAddrTable {name: BrokerData dict},
        clusterAddrTable {cluster: [names]}), in Java's iteration order."""
        brokers = {name: self._brokers[name].to_dict()
                   for name in self._broker_order.java_order()}
        clusters = {c: self._clusters[c].java_order() for c in self._cluster_order.java_order()}
        return brokers, clusters

    @_reads
    def broker_member_group(self, cluster, broker_name):
        """GET_BROKER_MEMBER_GROUP (901): the brokerName's addresses (empty when unknown)."""
        bd = self._brokers.get(broker_name)
        return {"cluster": cluster, "brokerName": broker_name,
                "brokerAddrs": dict(sorted(bd.addrs.items())) if bd is not None else {}}

    @_reads
    def all_topics(self):
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206): topicQueueTable's keys."""
        self._settle_topic_order()
        return self._topic_order.order(self._tt.topic_seqs())

    @_reads
    def topics_by_cluster(self, cluster):
        """GET_TOPICS_BY_CLUSTER (224): topics with queue data on a broker of the
        cluster (empty for an unknown cluster): broker by broker in the order of the
        cluster's set, each one's topics in topicQueueTable's order, each topic once."""
        names = self._clusters.get(cluster)
        if names is None:
            return []
        numbers = self._topic_numbers()
        listed = {}
        for name in names.java_order():
            mine = self._tt.topics_of_brokers((name,))
            listed.update(dict.fromkeys(self._topic_table_order(mine, numbers)))
        return list(listed)

    @_reads
    def system_topics(self):
        """GET_SYSTEM_TOPIC_LIST_FROM_NS (304): each cluster name followed by its broker
        names, each name once, and the address of one broker (the first in Java's
        table order that has one: its first id's)."""
        listed = {}
        for cluster in self._cluster_order.java_order():
            listed[cluster] = None
            listed.update(dict.fromkeys(self._clusters[cluster].java_order()))
        broker_addr = None
        for name in self._broker_order.java_order():
            addrs = self._brokers[name].addrs
            if addrs:
                broker_addr = addrs[_first_broker_id(addrs)]
                break
        return list(listed), broker_addr

    def _topics_by_flag(self, test):
        numbers = self._topic_numbers()
        return self._topic_table_order((t for t, flag in self._tt.first_flags() if test(flag)),
                                       numbers)

    @_reads
    def unit_topics(self):
        """GET_UNIT_TOPIC_LIST (311): topics with FLAG_UNIT."""
        return self._topics_by_flag(lambda f: f & FLAG_UNIT == FLAG_UNIT)

    @_reads
    def has_unit_sub_topics(self):
        """GET_HAS_UNIT_SUB_TOPIC_LIST (312): topics with FLAG_UNIT_SUB."""
        return self._topics_by_flag(lambda f: f & FLAG_UNIT_SUB == FLAG_UNIT_SUB)

    @_reads
    def has_unit_sub_ununit_topics(self):
        """GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST (313): FLAG_UNIT_SUB without FLAG_UNIT."""
        return self._topics_by_flag(
            lambda f: f & FLAG_UNIT != FLAG_UNIT and f & FLAG_UNIT_SUB == FLAG_UNIT_SUB)
