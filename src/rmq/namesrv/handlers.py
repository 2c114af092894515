"""The NameServer's request processing: every request code, answered as Java answers it.

``DefaultRequestProcessor.handle(cmd, conn)`` takes a decoded request and returns the response
command (or None for oneway requests). No I/O here: the network layer lives in
``rmq.namesrv.server``, the tables in ``RouteTable``, the KV table in ``KVConfig``.

Java reference: namesrv/processor/DefaultRequestProcessor and ClientRequestProcessor
(4.9.x and 5.x). Where they differ, rmq answers as 5.x does (e.g. code 3 for an
unknown request code, where 4.9 leaves the client to time out).
"""

import logging
import time

from rmq import bodies
from rmq.namesrv.config import ConfigError, ConfigNoPermission, loggable
from rmq.codec import RemotingCommand
from rmq.crc32 import body_crc32
from rmq.errors import BodyError
from rmq.namesrv.kvconfig import KVConfigError, KVLimitError
from rmq.namesrv.metrics import Counters
from rmq._wire import route_zone, standard_route_form, topic_not_exist
from rmq.protocol import RequestCode as RC, ResponseCode as R, parse_java_int
from rmq.namesrv.routeinfo import RouteTable

log = logging.getLogger(__name__)

NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"
#: RemotingCommand.createResponseCommand(Class)'s remark, left by handlers that only
#: set the code.
_REMARK_NOT_SET = "not set any response code"


class _MissingField(Exception):
    """A required ext field is absent (Java: RemotingCommandException)."""


def _required(cmd, *names):
    ext = cmd.ext_fields or {}
    values = []
    for name in names:
        v = ext.get(name)
        if v is None:
            raise _MissingField(f"the custom field <{name}> is null")
        values.append(v)
    return values


def _int_field(cmd, name, default=None, bits=64):
    v = (cmd.ext_fields or {}).get(name)
    if v is None:
        if default is None:
            raise _MissingField(f"the custom field <{name}> is null")
        return default
    n = parse_java_int(v, bits)
    if n is None:
        raise _MissingField(f"the custom field <{name}> is not a Java "
                            f"{'long' if bits == 64 else 'int'}: {v!r}")
    return n


def _opt_bool_field(cmd, name):
    v = (cmd.ext_fields or {}).get(name)
    return None if v is None else v.lower() == "true"


def _now_ms():
    return int(time.time() * 1000)


#: Requests whose answer lists a whole table: cached, keyed by their argument (the
#: ext field named here, or None) and stamped with what the answer depends on.
_LIST_ANSWERS = {
    RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: None,
    RC.GET_UNIT_TOPIC_LIST: None,
    RC.GET_HAS_UNIT_SUB_TOPIC_LIST: None,
    RC.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: None,
    RC.GET_TOPICS_BY_CLUSTER: "cluster",
    RC.GET_SYSTEM_TOPIC_LIST_FROM_NS: None,
    RC.GET_BROKER_CLUSTER_INFO: None,
    RC.GET_KVLIST_BY_NAMESPACE: "namespace",
}
#: Lists of topics only: their answers change only with some topic's route.
_TOPIC_LISTS = frozenset((RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, RC.GET_UNIT_TOPIC_LIST,
                          RC.GET_HAS_UNIT_SUB_TOPIC_LIST,
                          RC.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST))
#: Requests that may change the broker and cluster tables (not only a route).
_TABLE_CHANGES = frozenset((RC.REGISTER_BROKER, RC.UNREGISTER_BROKER,
                            RC.WIPE_WRITE_PERM_OF_BROKER, RC.ADD_WRITE_PERM_OF_BROKER,
                            RC.DELETE_TOPIC_IN_NAMESRV, RC.REGISTER_TOPIC_IN_NAMESRV,
                            RC.UPDATE_NAMESRV_CONFIG))
#: Requests answered from neither the route table nor a lock: safe on any thread.
_LOCK_FREE = frozenset((RC.GET_KV_CONFIG, RC.GET_NAMESRV_CONFIG, RC.GET_CLIENT_CONFIG))
#: Cached list answers kept at most (the 224 and 219 arguments are client-chosen).
MAX_CACHED_ANSWERS = 1024
MAX_CACHED_ANSWER_BYTES = 256 * 1024 * 1024
#: What DefaultRequestProcessor.quick returns for a request that needs the table thread.
NEEDS_TABLE = object()


class DefaultRequestProcessor:
    """Request handling over a RouteTable, a KVConfig and a NamesrvConfig.

    Answers that list a whole table (206, 224, 304, 311-313, 106, 219) are cached
    and stamped with the counters they depend on (``routes.version`` for topic
    lists, ``changes`` for the broker and cluster tables, ``kv_changes`` for KV
    lists): a stale stamp is a miss, so an answer is built at most once per change
    however many clients ask. ``quick`` answers what needs no table work (cache
    hits, lock-free reads) on any thread; the rest goes through ``handle`` on the
    one thread that owns the tables.
    """

    def __init__(self, config, kv, routes=None, clock=_now_ms):
        self.config = config
        self.kv = kv
        self.routes = routes if routes is not None else RouteTable(
            support_acting_master=config.supportActingMaster,
            delete_topic_with_broker_registration=config.deleteTopicWithBrokerRegistration,
            cache_bytes=config.routeCacheBytes)
        self.clock = clock
        self.counters = Counters()
        self.changes = 0            # changes to the broker and cluster tables
        self.kv_changes = 0
        self._answers = {}          # (code, argument) -> (stamp, code, remark, body)
        self._answer_bytes = 0
        self.answers_built = 0      # list answers built (misses), for tests and stats
        # Route answers are cached in the table, built on first demand and dropped
        # exactly when a change may alter them; the network layer answers route
        # queries inside the core (RouteTable.serve_routes).
        self._sync_order_topic_conf()
        self._handlers = {
            RC.PUT_KV_CONFIG: self.put_kv_config,
            RC.GET_KV_CONFIG: self.get_kv_config,
            RC.DELETE_KV_CONFIG: self.delete_kv_config,
            RC.REGISTER_BROKER: self.register_broker,
            RC.UNREGISTER_BROKER: self.unregister_broker,
            RC.GET_ROUTEINFO_BY_TOPIC: self.get_route_info,
            RC.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            RC.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            RC.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
            RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list,
            RC.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RC.REGISTER_TOPIC_IN_NAMESRV: self.register_topic,
            RC.GET_KVLIST_BY_NAMESPACE: self.get_kv_list,
            RC.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RC.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topics,
            RC.GET_UNIT_TOPIC_LIST: self.get_unit_topics,
            RC.GET_HAS_UNIT_SUB_TOPIC_LIST: self.get_has_unit_sub_topics,
            RC.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self.get_has_unit_sub_ununit_topics,
            RC.UPDATE_NAMESRV_CONFIG: self.update_config,
            RC.GET_NAMESRV_CONFIG: self.get_config,
            RC.GET_CLIENT_CONFIG: self.get_client_config,
            RC.QUERY_DATA_VERSION: self.query_data_version,
            RC.GET_BROKER_MEMBER_GROUP: self.get_broker_member_group,
            RC.BROKER_HEARTBEAT: self.broker_heartbeat,
        }

    # ---------------------------------------------------------------- dispatch

    def quick(self, cmd, conn=None):
        """The response to ``cmd`` when it needs no table work (a cached list
        answer, a lock-free read, an unknown code), else NEEDS_TABLE."""
        code = cmd.code
        if code == RC.GET_ROUTEINFO_BY_TOPIC:
            topic = (cmd.ext_fields or {}).get("topic")
            if not isinstance(topic, str) or cmd.is_oneway:
                return NEEDS_TABLE
            body = self.routes.cached_route_body(topic, not standard_route_form(cmd),
                                                 route_zone(cmd))
            return NEEDS_TABLE if body is None else cmd.response(R.SUCCESS, body=body)
        if code in _LIST_ANSWERS:
            resp = self._cached_answer(cmd)
            if resp is not None:
                return None if cmd.is_oneway else resp
            return NEEDS_TABLE
        if code in _LOCK_FREE or code not in self._handlers:
            return self.handle(cmd, conn)
        return NEEDS_TABLE

    def _stamp(self, code):
        if code == RC.GET_KVLIST_BY_NAMESPACE:
            return self.kv_changes
        config = self.config
        if code in _TOPIC_LISTS:
            return (self.routes.version, config.enableAllTopicList, config.enableTopicList)
        return (self.routes.version, self.changes, config.enableTopicList)

    def _answer_key(self, cmd):
        field = _LIST_ANSWERS[cmd.code]
        return cmd.code, None if field is None else (cmd.ext_fields or {}).get(field)

    def _cached_answer(self, cmd):
        entry = self._answers.get(self._answer_key(cmd))
        if entry is None or entry[0] != self._stamp(cmd.code):
            return None
        return cmd.response(entry[1], entry[2], body=entry[3])

    def _keep_answer(self, key, stamp, resp):
        if resp.ext_fields:
            return
        if (len(self._answers) >= MAX_CACHED_ANSWERS
                or self._answer_bytes + len(resp.body) > MAX_CACHED_ANSWER_BYTES):
            self._answers = {}          # rebuilt on demand: simpler than an LRU, as bounded
            self._answer_bytes = 0
        old = self._answers.get(key)
        if old is not None:
            self._answer_bytes -= len(old[3])
        self._answers[key] = (stamp, resp.code, resp.remark, resp.body)
        self._answer_bytes += len(resp.body)

    def handle(self, cmd, conn=None):
        """The response to ``cmd`` (None when it is oneway: applied, never answered)."""
        code = cmd.code
        handler = self._handlers.get(code)
        if handler is None:
            resp = cmd.response(R.REQUEST_CODE_NOT_SUPPORTED,
                                f" request type {code} not supported")
        elif code in _LIST_ANSWERS:
            resp = self._cached_answer(cmd)
            if resp is None:
                key, stamp = self._answer_key(cmd), self._stamp(code)
                resp = self._handle(handler, cmd, conn)
                self.answers_built += 1
                if resp.code == R.SUCCESS or code == RC.GET_KVLIST_BY_NAMESPACE:
                    self._keep_answer(key, stamp, resp)
        else:
            resp = self._handle(handler, cmd, conn)
            if code in _TABLE_CHANGES:
                self.changes += 1
        return None if cmd.is_oneway else resp

    def _handle(self, handler, cmd, conn):
        try:
            return handler(cmd, conn)
        except _MissingField as e:
            self.counters.refused["missing_field"] += 1
            return cmd.response(R.SYSTEM_ERROR, str(e))
        except BodyError as e:
            self.counters.refused["bad_body"] += 1
            log.warning("request %d: bad body: %s", cmd.code, e)
            return cmd.response(R.SYSTEM_ERROR, str(e))
        except KVLimitError as e:        # the client's: nothing changed
            self.counters.refused["kv_limit"] += 1
            log.warning("request %d from %s refused: %s", cmd.code, conn, e)
            return cmd.response(R.SYSTEM_ERROR, str(e))
        except KVConfigError as e:       # the change was not persisted, nor applied
            log.error("request %d: %s", cmd.code, e)
            return cmd.response(R.SYSTEM_ERROR, str(e))
        except Exception as e:
            # A body of an unforeseen shape (e.g. a JSON object where a list is
            # expected) or a bug: answer SYSTEM_ERROR as Java does for any exception
            # of a processor, rather than let it escape into the network layer
            # (which would drop the connection without an answer).
            log.exception("request %d from %s failed", cmd.code, conn)
            return cmd.response(R.SYSTEM_ERROR, f"{type(e).__name__}: {e}")

    def _sync_order_topic_conf(self):
        # With orderMessageEnable, route answers carry the topic's ORDER_TOPIC_CONFIG.
        get = None
        if self.config.orderMessageEnable:
            kv = self.kv

            def get(topic):
                return kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, topic)
        if (get is None) != (self.routes.order_topic_conf is None):
            self.routes.order_topic_conf = get

    # ---------------------------------------------------------------- KV config

    def put_kv_config(self, cmd, conn):
        namespace, key, value = _required(cmd, "namespace", "key", "value")
        self.kv.put(namespace, key, value)
        self.kv_changes += 1
        log.info("kv put %.200s/%.200s (%d chars)", namespace, key, len(value))
        if namespace == NAMESPACE_ORDER_TOPIC_CONFIG:
            self.routes.forget_route(key)
        return cmd.response(R.SUCCESS)

    def get_kv_config(self, cmd, conn):
        namespace, key = _required(cmd, "namespace", "key")
        value = self.kv.get(namespace, key)
        if value is None:
            return cmd.response(R.QUERY_NOT_FOUND,
                                f"No config item, Namespace: {namespace} Key: {key}", {})
        return cmd.response(R.SUCCESS, None, {"value": value})

    def delete_kv_config(self, cmd, conn):
        namespace, key = _required(cmd, "namespace", "key")
        self.kv.delete(namespace, key)
        self.kv_changes += 1
        log.info("kv delete %.200s/%.200s", namespace, key)
        if namespace == NAMESPACE_ORDER_TOPIC_CONFIG:
            self.routes.forget_route(key)
        return cmd.response(R.SUCCESS)

    def get_kv_list(self, cmd, conn):
        (namespace,) = _required(cmd, "namespace")
        table = self.kv.namespace(namespace)
        if table is None:
            return cmd.response(R.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}")
        return cmd.response(R.SUCCESS, body=bodies.encode_kv_table(table))

    def _order_topic_table(self):
        # The 219 answer of the namespace, from the cache: every registration sends it.
        list_cmd = RemotingCommand(RC.GET_KVLIST_BY_NAMESPACE,
                                   ext_fields={"namespace": NAMESPACE_ORDER_TOPIC_CONFIG})
        resp = self.handle(list_cmd)
        return resp.body if resp.code == R.SUCCESS else None

    # ---------------------------------------------------------------- brokers

    def register_broker(self, cmd, conn):
        cluster, broker_addr, broker_name, ha_addr = _required(
            cmd, "clusterName", "brokerAddr", "brokerName", "haServerAddr")
        broker_id = _int_field(cmd, "brokerId")
        body = cmd.body
        crc = _int_field(cmd, "bodyCrc32", 0, bits=32)
        if crc != 0 and crc != body_crc32(body):
            self.counters.refused["crc32"] += 1
            log.warning("register %s %s: body crc32 %d does not match", broker_name,
                        broker_addr, crc)
            return cmd.response(R.SYSTEM_ERROR, "crc32 not match")
        timeout = _int_field(cmd, "heartbeatTimeoutMillis", 120_000)
        # The raw body: the table reads it (with the GIL released when compiled).
        started = time.perf_counter()
        result = self.routes.register_broker(
            cluster, broker_addr, broker_name, broker_id, ha_addr, body=body or None, conn=conn,
            now_ms=self.clock(), timeout_ms=timeout,
            zone_name=(cmd.ext_fields or {}).get("__ZONE_NAME"),
            # None for 4.9 brokers, which do not send it: they never act as master.
            enable_acting_master=_opt_bool_field(cmd, "enableActingMaster"))
        self.counters.registered(time.perf_counter() - started)
        if result.get("failed"):
            self.counters.refused["registration"] += 1
            # Java 5.x takes a one-topic table from a broker it does not know yet for an
            # incremental registration (a topic created on a broker) and refuses it.
            log.warning("register %s %s/%s id=%d refused: a broker's first registration "
                        "carries exactly one topic, which Java 5.x takes for an "
                        "incremental one; a broker registers its whole topic table first "
                        "(system topics included: rmq.bodies.broker_system_topics)",
                        cluster, broker_name, broker_addr, broker_id)
            return cmd.response(R.SYSTEM_ERROR, "register broker failed")
        if result.get("first"):
            log.info("new broker registered: %s %s/%s id=%d ha=%s topics=%d", cluster,
                     broker_name, broker_addr, broker_id, ha_addr, result["topics"])
        elif result.get("topics_changed"):
            # (as Java's createAndUpdateQueueData, which logs each topic that changed:
            # nothing for a new DataVersion with the same topics, as a broker's restart
            # sends; the line was a measurable part of such a registration's time in
            # the table thread: bench/README.md)
            log.info("broker %s %s: queue data of %d of its %d topics new or changed",
                     broker_name, broker_addr, result["topics_changed"], result["topics"])
        if result.get("topics_removed"):
            log.info("broker %s %s: %d topics it no longer registers removed "
                     "(deleteTopicWithBrokerRegistration)", broker_name, broker_addr,
                     result["topics_removed"])
        ext = {}
        if result.get("haServerAddr") is not None:
            ext["haServerAddr"] = result["haServerAddr"]
        if result.get("masterAddr") is not None:
            ext["masterAddr"] = result["masterAddr"]
        body_out = b""
        if self.config.returnOrderTopicConfigToBroker:
            body_out = self._order_topic_table() or b""
        return cmd.response(R.SUCCESS, None, ext, body_out)

    def unregister_broker(self, cmd, conn):
        cluster, broker_addr, broker_name = _required(
            cmd, "clusterName", "brokerAddr", "brokerName")
        broker_id = _int_field(cmd, "brokerId")
        if self.routes.unregister_broker(cluster, broker_addr, broker_name, broker_id):
            self.counters.unregistered += 1
            log.info("broker unregistered: %s %s/%s id=%d", cluster, broker_name, broker_addr,
                     broker_id)
        return cmd.response(R.SUCCESS)

    def query_data_version(self, cmd, conn):
        cluster, broker_addr, broker_name = _required(
            cmd, "clusterName", "brokerAddr", "brokerName")
        broker_id = _int_field(cmd, "brokerId")
        dv = bodies.decode_data_version(cmd.body) if cmd.body else {}
        changed, stored = self.routes.query_data_version(
            cluster, broker_addr, broker_name, broker_id, dv, now_ms=self.clock())
        body = bodies.encode_data_version(stored) if stored is not None else b""
        return cmd.response(R.SUCCESS, None, {"changed": "true" if changed else "false"}, body)

    def broker_heartbeat(self, cmd, conn):
        # Java's BrokerHeartbeatRequestHeader: the three are @CFNotNull.
        cluster, broker_addr, _ = _required(cmd, "clusterName", "brokerAddr", "brokerName")
        self.routes.heartbeat(cluster, broker_addr, now_ms=self.clock())
        return cmd.response(R.SUCCESS)

    def wipe_write_perm(self, cmd, conn):
        (broker_name,) = _required(cmd, "brokerName")
        count = self.routes.wipe_write_perm(broker_name)
        log.info("wipe write perm of broker %s: %d topics", broker_name, count)
        return cmd.response(R.SUCCESS, None, {"wipeTopicCount": str(count)})

    def add_write_perm(self, cmd, conn):
        (broker_name,) = _required(cmd, "brokerName")
        count = self.routes.add_write_perm(broker_name)
        log.info("add write perm of broker %s: %d topics", broker_name, count)
        return cmd.response(R.SUCCESS, None, {"addTopicCount": str(count)})

    def get_broker_cluster_info(self, cmd, conn):
        return cmd.response(R.SUCCESS, body=bodies.encode_cluster_info(*self.routes.cluster_info()))

    def get_broker_member_group(self, cmd, conn):
        cluster, broker_name = _required(cmd, "clusterName", "brokerName")
        group = self.routes.broker_member_group(cluster, broker_name)
        # Java 5.x makes the response with createResponseCommand(null), whose remark is
        # "not set any response code" (it starts as SYSTEM_ERROR), then sets the code
        # to SUCCESS but never clears the remark: brokers get it with every answer.
        return cmd.response(R.SUCCESS, _REMARK_NOT_SET, body=bodies.encode_broker_member_group(
            group.get("cluster", cluster), group.get("brokerName", broker_name),
            group.get("brokerAddrs") or {}))

    # ---------------------------------------------------------------- routes

    def get_route_info(self, cmd, conn):
        (topic,) = _required(cmd, "topic")
        body = self.routes.route_body(topic, not standard_route_form(cmd), route_zone(cmd))
        if body is None:
            return topic_not_exist(cmd, topic)
        return cmd.response(R.SUCCESS, body=body)

    def register_topic(self, cmd, conn):
        (topic,) = _required(cmd, "topic")
        if cmd.body:
            route = bodies.decode_topic_route_data(cmd.body)
            if route.get("queueDatas"):
                self.routes.register_topic(topic, route["queueDatas"])
                log.info("topic %s registered with %d queue datas", topic,
                         len(route["queueDatas"]))
        return cmd.response(R.SUCCESS)

    def delete_topic(self, cmd, conn):
        (topic,) = _required(cmd, "topic")
        cluster = (cmd.ext_fields or {}).get("clusterName")
        self.routes.delete_topic(topic, cluster or None)
        log.info("topic %s deleted%s", topic, f" from cluster {cluster}" if cluster else "")
        return cmd.response(R.SUCCESS)

    def _topic_list(self, cmd, topics, enabled=True, broker_addr=None):
        if not enabled:
            return cmd.response(R.SYSTEM_ERROR, "disable")
        return cmd.response(R.SUCCESS, body=bodies.encode_topic_list(topics, broker_addr))

    def get_all_topic_list(self, cmd, conn):
        return self._topic_list(cmd, self.routes.all_topics() if self.config.enableAllTopicList
                                else (), self.config.enableAllTopicList)

    def get_topics_by_cluster(self, cmd, conn):
        (cluster,) = _required(cmd, "cluster")
        enabled = self.config.enableTopicList
        return self._topic_list(cmd, self.routes.topics_by_cluster(cluster) if enabled else (),
                                enabled)

    def get_system_topics(self, cmd, conn):
        topics, broker_addr = self.routes.system_topics()
        return self._topic_list(cmd, topics, broker_addr=broker_addr)

    def get_unit_topics(self, cmd, conn):
        enabled = self.config.enableTopicList
        return self._topic_list(cmd, self.routes.unit_topics() if enabled else (), enabled)

    def get_has_unit_sub_topics(self, cmd, conn):
        enabled = self.config.enableTopicList
        return self._topic_list(cmd, self.routes.has_unit_sub_topics() if enabled else (),
                                enabled)

    def get_has_unit_sub_ununit_topics(self, cmd, conn):
        enabled = self.config.enableTopicList
        return self._topic_list(
            cmd, self.routes.has_unit_sub_ununit_topics() if enabled else (), enabled)

    # ---------------------------------------------------------------- config

    def update_config(self, cmd, conn):
        try:
            text = cmd.body.decode("utf-8")
        except UnicodeDecodeError:
            return cmd.response(R.SYSTEM_ERROR, "string2Properties error")
        try:
            changed = self.config.update_from_properties_text(text)
        except ConfigNoPermission as e:
            self.counters.refused["config_no_permission"] += 1
            log.warning("config update refused from %s: %s", conn, e)
            return cmd.response(R.NO_PERMISSION, "Can not update config in black list.")
        except ConfigError as e:
            self.counters.refused["config_invalid"] += 1
            log.warning("config update rejected from %s: %s", conn, e)
            return cmd.response(R.SYSTEM_ERROR, str(e))
        if changed:
            now = self.config.to_properties()
            log.info("config updated: %s", ", ".join(
                f"{k}={loggable(k, now.get(k))}" for k in changed))
        self.routes.support_acting_master = self.config.supportActingMaster
        self.routes.delete_topic_with_broker_registration = \
            self.config.deleteTopicWithBrokerRegistration
        self._sync_order_topic_conf()
        return cmd.response(R.SUCCESS)

    def get_config(self, cmd, conn):
        return cmd.response(R.SUCCESS, body=self.config.to_properties_text().encode("utf-8"))

    def get_client_config(self, cmd, conn):
        # Java 5.x DefaultRequestProcessor.getClientConfigs: the asked keys' settings
        # as properties text, no body when none is known. A key is only looked up: the
        # answer holds each setting once at most, whatever the client asks.
        keys = bodies.decode_remote_client_config(cmd.body)
        return cmd.response(R.SUCCESS, body=self.config.client_configs_text(keys).encode("utf-8"))

    # ---------------------------------------------------------------- liveness

    def scan_not_active_brokers(self):
        """Drop brokers silent past their timeout; returns what was dropped."""
        dropped = self.routes.scan_not_active(self.clock())
        if dropped:
            self.changes += 1
            self.counters.expired += len(dropped)
        for b in dropped:
            log.warning("broker expired: %s %s/%s id=%s (%s)", b.get("cluster"),
                        b.get("brokerName"), b.get("brokerAddr"), b.get("brokerId"),
                        b.get("reason", "not active"))
        return dropped

    def connection_closed(self, conn):
        """Drop at once the brokers registered over a closed connection."""
        dropped = self.routes.connection_closed(conn)
        if dropped:
            self.changes += 1
            self.counters.connection_dropped += len(dropped)
        for b in dropped:
            log.info("broker connection closed, removed: %s %s/%s id=%s", b.get("cluster"),
                     b.get("brokerName"), b.get("brokerAddr"), b.get("brokerId"))
        return dropped
