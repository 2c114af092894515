"""Property tests: everything encoded decodes back to what it was."""

import json

from hypothesis import given
from hypothesis import strategies as st

from support import (
    INT32,
    INT64,
    TEXT,
    after_round_trip,
    command_kwargs,
    fields,
    json_values,
)

# ---------------------------------------------------------------- frames


@given(kwargs=command_kwargs())
def test_command_round_trip(impl, kwargs):
    cmd = impl.RemotingCommand(**kwargs)
    decoded = impl.decode_frame(impl.encode_frame(cmd))
    assert decoded == impl.RemotingCommand(**after_round_trip(kwargs))


@given(kwargs=command_kwargs(serialize_type="JSON"))
def test_json_header_keeps_empty_remark_and_ext(impl, kwargs):
    decoded = impl.decode_frame(impl.encode_frame(impl.RemotingCommand(**kwargs)))
    assert decoded.remark == kwargs["remark"]
    assert decoded.ext_fields == kwargs["ext_fields"]
    if kwargs["ext_fields"] is not None:
        assert list(decoded.ext_fields) == list(kwargs["ext_fields"])


@given(kwargs=command_kwargs())
def test_encoding_is_deterministic_and_stable(impl, kwargs):
    # Re-encoding a decoded frame gives the same bytes (ext fields keep their order).
    frame = impl.encode_frame(impl.RemotingCommand(**kwargs))
    assert impl.encode_frame(impl.decode_frame(frame)) == frame


@given(kwargs=command_kwargs(serialize_type="JSON"))
def test_json_header_is_alphabetical_json(impl, kwargs):
    frame = impl.encode_frame(impl.RemotingCommand(**kwargs))
    header = frame[8:8 + (int.from_bytes(frame[4:8], "big") & 0xFFFFFF)]
    pairs = json.loads(header, object_pairs_hook=list)
    keys = [k for k, _ in pairs]
    assert keys == sorted(keys)     # Java writes bean fields alphabetically
    obj = dict(pairs)
    assert obj["code"] == kwargs["code"] and obj["opaque"] == kwargs["opaque"]
    assert dict(obj.get("extFields") or {}) == (kwargs["ext_fields"] or {})
    assert ("remark" in obj) == (kwargs["remark"] is not None)


# ---------------------------------------------------------------- JSON


def str_keys(value):
    if isinstance(value, dict):
        return {str(k): str_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [str_keys(v) for v in value]
    return value


int_or_str_keyed = json_values(keys=TEXT) | st.recursive(
    json_values(), lambda inner: st.dictionaries(st.integers(), inner, max_size=5), max_leaves=10)


@given(value=json_values(), legacy=st.booleans())
def test_json_round_trip(impl, value, legacy):
    assert impl.json_loads(impl.json_dumps(value, legacy=legacy)) == value


@given(value=int_or_str_keyed, legacy=st.booleans())
def test_json_int_keys_load_as_str(impl, value, legacy):
    assert impl.json_loads(impl.json_dumps(value, legacy=legacy)) == str_keys(value)


@given(value=json_values())
def test_json_standard_form_is_ascii_json(impl, value):
    data = impl.json_dumps(value, legacy=False)
    assert data.isascii()
    assert json.loads(data) == value


@given(value=json_values())
def test_json_legacy_form_is_utf8(impl, value):
    data = impl.json_dumps(value, legacy=True)
    assert json.loads(data.decode("utf-8")) == value


@given(keys=st.lists(st.integers(0, 1 << 62), min_size=1, max_size=5, unique=True))
def test_json_legacy_int_keys_unquoted(impl, keys):
    table = {k: str(k) for k in keys}
    data = impl.json_dumps(table, legacy=True)
    assert data == ("{" + ",".join(f'{k}:"{k}"' for k in keys) + "}").encode()
    assert impl.json_loads(data) == {str(k): str(k) for k in keys}


# ---------------------------------------------------------------- RegisterBrokerBody

NAMES = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20)
TOKEN = st.text(st.characters(exclude_categories=("Cs",), exclude_characters=" "),
                min_size=1, max_size=20)   # a field of the space-separated compressed line
DATA_VERSION = st.fixed_dictionaries(
    {"counter": INT64, "timestamp": INT64}, optional={"stateVersion": INT64})


@st.composite
def register_bodies(draw, compressible):
    """RegisterBrokerBody dicts; ``compressible`` ones only hold what the
    compressed form carries (order false, topicSysFlag 0, space-free fields)."""
    name = TOKEN if compressible else NAMES
    table = {}
    for topic in draw(st.lists(name, max_size=6, unique=True)):
        tc = {"order": False if compressible else draw(st.booleans()),
              "perm": draw(INT32),
              "readQueueNums": draw(INT32),
              "topicFilterType": draw(name),
              "topicName": topic,
              "topicSysFlag": 0 if compressible else draw(INT32),
              "writeQueueNums": draw(INT32)}
        if draw(st.booleans()):
            tc["attributes"] = draw(st.dictionaries(name, name, max_size=3))
        table[topic] = tc
    wrapper = {"dataVersion": draw(DATA_VERSION), "topicConfigTable": table}
    if draw(st.booleans()):   # 5.x brokers
        mappings = draw(st.dictionaries(NAMES, st.dictionaries(
            NAMES.filter(lambda k: k != "topic"), INT32, max_size=3), max_size=3))
        for topic, info in mappings.items():
            info["topic"] = topic
        wrapper["topicQueueMappingInfoMap"] = mappings
    return {"filterServerList": draw(st.lists(NAMES, max_size=3)),
            "topicConfigSerializeWrapper": wrapper}


@given(body=register_bodies(compressible=False))
def test_register_broker_body_json_round_trip(impl, body):
    data = impl.encode_register_broker_body(body)
    assert json.loads(data) == body
    assert impl.decode_register_broker_body(data) == body


@given(body=register_bodies(compressible=True))
def test_register_broker_body_compressed_round_trip(impl, body):
    data = impl.encode_register_broker_body(body, compressed=True)
    assert impl.decode_register_broker_body(data) == body
    assert impl.decode_register_broker_body(bytearray(data)) == body


# ---------------------------------------------------------------- TopicRouteData

BROKER_ADDRS = st.dictionaries(st.integers(0, (1 << 63) - 1), TEXT, max_size=4)


@st.composite
def broker_datas(draw, name=None):
    return {"brokerAddrs": draw(BROKER_ADDRS),
            "brokerName": draw(NAMES) if name is None else name,
            "cluster": draw(NAMES)}


ROUTES = st.fixed_dictionaries(
    {"brokerDatas": st.lists(broker_datas(), max_size=4),
     "filterServerTable": st.dictionaries(TEXT, st.lists(TEXT, max_size=3), max_size=3),
     "queueDatas": st.lists(st.fixed_dictionaries(
         {"brokerName": NAMES, "perm": INT32, "readQueueNums": INT32,
          "topicSysFlag": INT32, "writeQueueNums": INT32}), max_size=4)},
    optional={"orderTopicConf": TEXT,
              "topicQueueMappingByBroker": st.dictionaries(TEXT, st.dictionaries(TEXT, INT32))})


@given(route=ROUTES, legacy=st.booleans())
def test_topic_route_data_round_trip(bodies, route, legacy):
    data = bodies.encode_topic_route_data(route, legacy=legacy)
    assert bodies.decode_topic_route_data(data) == route


@given(route=ROUTES)
def test_topic_route_data_forms(bodies, route):
    standard = bodies.encode_topic_route_data(route, legacy=False)
    assert standard.isascii()
    parsed = json.loads(standard)      # plain JSON: quoted keys
    assert [list(map(int, bd["brokerAddrs"])) for bd in parsed["brokerDatas"]] == \
        [sorted(bd["brokerAddrs"]) for bd in route["brokerDatas"]]
    legacy = bodies.encode_topic_route_data(route, legacy=True)
    for bd in route["brokerDatas"]:
        for broker_id in bd["brokerAddrs"]:
            assert b"{%d:" % broker_id in legacy or b",%d:" % broker_id in legacy


# ---------------------------------------------------------------- the other bodies


@st.composite
def cluster_infos(draw):
    names = draw(st.lists(NAMES, max_size=4, unique=True))
    table = {name: draw(broker_datas(name)) for name in names}
    clusters = draw(st.dictionaries(NAMES, st.lists(NAMES, max_size=3), max_size=3))
    return table, clusters


@given(info=cluster_infos())
def test_cluster_info_round_trip(bodies, info):
    assert bodies.decode_cluster_info(bodies.encode_cluster_info(*info)) == info


@given(table=st.dictionaries(TEXT, TEXT))
def test_kv_table_round_trip(bodies, table):
    assert bodies.decode_kv_table(bodies.encode_kv_table(table)) == table


@given(topics=st.lists(TEXT), broker_addr=st.none() | TEXT)
def test_topic_list_round_trip(bodies, topics, broker_addr):
    assert bodies.decode_topic_list(bodies.encode_topic_list(topics, broker_addr)) == \
        (topics, broker_addr)


@given(dv=st.fixed_dictionaries({}, optional={"counter": INT64, "stateVersion": INT64,
                                              "timestamp": INT64}))
def test_data_version_round_trip(bodies, dv):
    assert bodies.decode_data_version(bodies.encode_data_version(dv)) == dv


@given(cluster=NAMES, name=NAMES, addrs=BROKER_ADDRS)
def test_broker_member_group_round_trip(bodies, cluster, name, addrs):
    data = bodies.encode_broker_member_group(cluster, name, addrs)
    assert bodies.decode_broker_member_group(data) == \
        {"brokerAddrs": addrs, "brokerName": name, "cluster": cluster}


def test_fields_helper_covers_every_field(impl):
    # support.fields() is what the differential tests compare.
    cmd = impl.RemotingCommand(1, language="GO", version=2, opaque=3, flag=4, remark="r",
                               ext_fields={"k": "v"}, body=b"b", serialize_type="ROCKETMQ")
    assert fields(cmd) == (1, "GO", 2, 3, 4, "r", {"k": "v"}, b"b", "ROCKETMQ")
