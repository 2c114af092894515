"""Body codecs: Java's JSON model as plain dicts, with Java's field names and order.

The hot ones (RegisterBrokerBody, TopicRouteData encoding, the JSON reader and
writer) come from the selected core; the rest are thin compositions of those.
Maps that Java keys by Long (``brokerAddrs``) decode with int keys, whichever
form (legacy ``{0:"a"}`` or standard ``{"0":"a"}``) they arrived in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict, cast

from rmq._impl import core
from rmq._wire import broker_data
from rmq.errors import BodyError

if TYPE_CHECKING:
    from typing_extensions import Buffer

json_loads = core.json_loads
json_dumps = core.json_dumps
decode_register_broker_body = core.decode_register_broker_body
encode_register_broker_body = core.encode_register_broker_body
encode_topic_route_data = core.encode_topic_route_data

__all__ = [
    "json_loads", "json_dumps",
    "decode_register_broker_body", "encode_register_broker_body",
    "encode_topic_route_data", "decode_topic_route_data",
    "encode_cluster_info", "decode_cluster_info",
    "encode_kv_table", "decode_kv_table",
    "encode_topic_list", "decode_topic_list",
    "encode_data_version", "decode_data_version",
    "encode_broker_member_group", "decode_broker_member_group",
    "encode_remote_client_config", "decode_remote_client_config",
    "topic_config", "broker_system_topics", "register_broker_body",
    "TopicConfig",
]


class _TopicConfigOptional(TypedDict, total=False):
    attributes: dict[str, str]


class TopicConfig(_TopicConfigOptional):
    """A TopicConfig as :func:`topic_config` builds it (Java's field names and order;
    ``attributes`` only when given). A plain dict at run time."""
    order: bool
    perm: int
    readQueueNums: int
    topicFilterType: str
    topicName: str
    topicSysFlag: int
    writeQueueNums: int


_KIND_NAMES = {list: "an array", dict: "an object"}


def _object(data: Buffer, what: str) -> dict[str, Any]:
    obj = json_loads(data)
    if not isinstance(obj, dict):
        raise BodyError(f"{what} is not a JSON object: {bytes(data[:80])!r}")  # type: ignore[index]
    return obj


def _int_keys(addrs: Any, what: str) -> dict[int, Any]:
    try:
        return {int(k): v for k, v in (addrs or {}).items()}
    except (TypeError, ValueError, AttributeError):
        raise BodyError(f"{what} keys must be broker ids (integers): {addrs!r}") from None


def _broker_data_in(bd: object) -> dict[str, Any]:
    if not isinstance(bd, dict):
        raise BodyError(f"BrokerData is not an object: {bd!r}")
    bd = dict(bd)
    bd["brokerAddrs"] = _int_keys(bd.get("brokerAddrs"), "brokerAddrs")
    return bd


# ---------------------------------------------------------------- TopicRouteData

def decode_topic_route_data(data: Buffer) -> dict[str, Any]:
    """TopicRouteData from either form; ``brokerAddrs`` keyed by int broker id."""
    route = _object(data, "TopicRouteData")
    kind: type[Any]
    for field, kind in (("brokerDatas", list), ("queueDatas", list),
                        ("filterServerTable", dict)):
        value = route.get(field)
        if value is None:
            route[field] = kind()
        elif not isinstance(value, kind):
            raise BodyError(f"TopicRouteData.{field} is not {_KIND_NAMES[kind]}: {value!r:.80}")
    route["brokerDatas"] = [_broker_data_in(bd) for bd in route["brokerDatas"]]
    return route


# ---------------------------------------------------------------- ClusterInfo

def encode_cluster_info(broker_addr_table: Mapping[str, Mapping[str, Any]],
                        cluster_addr_table: Mapping[str, Iterable[str]]) -> bytes:
    """ClusterInfo, always in the legacy form (Java 106 answers never change form).

    ``broker_addr_table``: brokerName -> BrokerData dict;
    ``cluster_addr_table``: cluster -> iterable of broker names.
    """
    body = {
        "brokerAddrTable": {name: broker_data(bd if "brokerName" in bd
                                              else {**bd, "brokerName": name})
                            for name, bd in broker_addr_table.items()},
        "clusterAddrTable": {c: list(names) for c, names in cluster_addr_table.items()},
    }
    return json_dumps(body, legacy=True)


def decode_cluster_info(data: Buffer
                        ) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """ClusterInfo -> (brokerAddrTable, clusterAddrTable) as dicts."""
    info = _object(data, "ClusterInfo")
    table = info.get("brokerAddrTable") or {}
    clusters = info.get("clusterAddrTable") or {}
    if not isinstance(table, dict) or not isinstance(clusters, dict):
        raise BodyError(f"ClusterInfo tables are not objects: {bytes(data[:80])!r}")  # type: ignore[index]
    for cluster, names in clusters.items():
        if names is not None and not isinstance(names, list):
            raise BodyError(f"ClusterInfo.clusterAddrTable[{cluster!r}] is not an array: "
                            f"{names!r:.80}")
    return ({name: _broker_data_in(bd) for name, bd in table.items()},
            {c: list(names or ()) for c, names in clusters.items()})


# ---------------------------------------------------------------- KVTable

def encode_kv_table(table: Mapping[str, str]) -> bytes:
    """KVTable ``{"table":{k: v}}``; non-ASCII as UTF-8, as Java writes it."""
    return json_dumps({"table": dict(table)}, legacy=True)


def decode_kv_table(data: Buffer) -> dict[str, str]:
    table = _object(data, "KVTable").get("table") or {}
    if not isinstance(table, dict):
        raise BodyError(f"KVTable.table is not an object: {table!r}")
    return {str(k): ("" if v is None else str(v)) for k, v in table.items()}


# ---------------------------------------------------------------- TopicList

def encode_topic_list(topics: Iterable[str], broker_addr: str | None = None) -> bytes:
    """TopicList ``{"brokerAddr":..., "topicList":[...]}`` (brokerAddr only when set)."""
    body: dict[str, Any] = {}
    if broker_addr is not None:
        body["brokerAddr"] = broker_addr
    body["topicList"] = list(topics)
    return json_dumps(body, legacy=True)


def decode_topic_list(data: Buffer) -> tuple[list[str], str | None]:
    """TopicList -> (topics list, brokerAddr or None)."""
    obj = _object(data, "TopicList")
    topics = obj.get("topicList") or []
    if not isinstance(topics, list):
        raise BodyError(f"TopicList.topicList is not an array: {topics!r}")
    return topics, obj.get("brokerAddr")


# ---------------------------------------------------------------- DataVersion

def encode_data_version(dv: Mapping[str, Any]) -> bytes:
    """DataVersion ``{"counter":N,"stateVersion":S,"timestamp":T}`` (fields present in ``dv``)."""
    return json_dumps({k: dv[k] for k in ("counter", "stateVersion", "timestamp") if k in dv})


def decode_data_version(data: Buffer) -> dict[str, Any]:
    dv = _object(data, "DataVersion")
    for k in ("counter", "stateVersion", "timestamp"):
        v = dv.get(k, 0)
        if isinstance(v, bool) or not isinstance(v, int):
            raise BodyError(f"DataVersion.{k} is not an integer: {v!r}")
    return dv


# ---------------------------------------------------------------- BrokerMemberGroup

def encode_broker_member_group(cluster: str, broker_name: str,
                               broker_addrs: Mapping[int, str]) -> bytes:
    """GetBrokerMemberGroupResponseBody, legacy form as Java writes it."""
    return json_dumps({"brokerMemberGroup": {"brokerAddrs": dict(broker_addrs),
                                             "brokerName": broker_name,
                                             "cluster": cluster}}, legacy=True)


def decode_broker_member_group(data: Buffer) -> dict[str, Any]:
    group = _object(data, "BrokerMemberGroup").get("brokerMemberGroup") or {}
    return _broker_data_in(group)


# ---------------------------------------------------------------- GetRemoteClientConfigBody

def encode_remote_client_config(keys: Iterable[str]) -> bytes:
    """GetRemoteClientConfigBody ``{"keys":[...]}``: GET_CLIENT_CONFIG's request."""
    return json_dumps({"keys": list(keys)}, legacy=True)


def decode_remote_client_config(data: Buffer) -> list[Any]:
    """GetRemoteClientConfigBody -> its ``keys`` ([] when absent), as Java 5.x reads it:
    no body, a body that is not a JSON object, ``keys`` that is not an array (null
    included) or that holds a null are a BodyError (Java throws: SYSTEM_ERROR). Other
    items are kept as they are: only strings can name a setting."""
    if not memoryview(data).nbytes:
        raise BodyError("GetRemoteClientConfigBody: no body (Java reads null)")
    keys = _object(data, "GetRemoteClientConfigBody").get("keys", [])
    if not isinstance(keys, list):
        shown = "an object" if isinstance(keys, dict) else repr(keys)[:80]
        raise BodyError(f"GetRemoteClientConfigBody.keys is not an array: {shown}")
    if any(k is None for k in keys):
        raise BodyError("GetRemoteClientConfigBody.keys holds a null")
    return keys


# ---------------------------------------------------------------- builders

def topic_config(name: str, read_queue_nums: int = 16, write_queue_nums: int = 16, perm: int = 6,
                 *, topic_filter_type: str = "SINGLE_TAG", topic_sys_flag: int = 0,
                 order: bool = False, attributes: Mapping[str, str] | None = None) -> TopicConfig:
    """A TopicConfig dict as a Java broker serializes it (fields in Java's order;
    ``attributes`` only when given, as 5.x brokers send them)."""
    tc: dict[str, Any] = {}
    if attributes is not None:
        tc["attributes"] = dict(attributes)
    tc.update(order=order, perm=perm, readQueueNums=read_queue_nums,
              topicFilterType=topic_filter_type, topicName=name,
              topicSysFlag=topic_sys_flag, writeQueueNums=write_queue_nums)
    return cast(TopicConfig, tc)


def broker_system_topics(cluster: str, broker_name: str, *, auto_create_topic: bool = True,
                         trace_topic: bool = False) -> list[TopicConfig]:
    """The topics every Java broker's TopicConfigManager creates for itself, as a 4.9.8
    broker with default settings registers them (tests/vectors/java-4.9.8): a broker's
    table always holds them, and a NameServer refuses a first registration carrying
    exactly one topic (it takes it for an incremental registration). ``auto_create_topic``:
    TBW102 (autoCreateTopicEnable); ``trace_topic``: RMQ_SYS_TRACE_TOPIC
    (traceTopicEnable)."""
    topics = [topic_config("SELF_TEST_TOPIC", 1, 1),
              topic_config("BenchmarkTest", 1024, 1024),
              topic_config(cluster, 16, 16, perm=7),                 # clusterTopicEnable
              topic_config(broker_name, 1, 1, perm=7),               # brokerTopicEnable
              topic_config("OFFSET_MOVED_EVENT", 1, 1),
              topic_config("SCHEDULE_TOPIC_XXXX", 18, 18),
              topic_config(f"{cluster}_REPLY_TOPIC", 1, 1)]
    if auto_create_topic:
        topics.append(topic_config("TBW102", 8, 8, perm=7))
    if trace_topic:
        topics.append(topic_config("RMQ_SYS_TRACE_TOPIC", 1, 1))
    return topics


def register_broker_body(topic_configs: Iterable[Mapping[str, Any]], data_version: Mapping[str, Any],
                         filter_servers: Iterable[str] = ()) -> dict[str, Any]:
    """A RegisterBrokerBody dict from TopicConfig dicts and a DataVersion dict."""
    return {"filterServerList": list(filter_servers),
            "topicConfigSerializeWrapper": {
                "dataVersion": dict(data_version),
                "topicConfigTable": {tc["topicName"]: tc for tc in topic_configs}}}
