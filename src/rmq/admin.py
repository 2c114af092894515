"""NameServer administration: the NameServer verbs of Apache RocketMQ's mqadmin.

:class:`NamesrvAdmin` has one method per verb; each returns plain data (dicts and
lists, ready for JSON). The ``*_text`` functions turn that data into mqadmin's
printed form. ``rmq admin VERB`` (rmq.cli) joins the two.

Which NameServers a verb talks to is Java's (MQClientAPIImpl / DefaultMQAdminExt):

- clusterList, topicRoute, topicList ask one NameServer, as Java's
  ``invokeSync(null, ...)``: the first address that can be connected to (Java picks
  a random one first; here the order given decides). A timeout or an error answer
  from it is final, as in Java.
- getNamesrvConfig, updateNamesrvConfig, updateKvConfig, deleteKvConfig,
  wipeWritePerm, addWritePerm go to every address. Java stops at the first address
  that cannot be reached; here every address is tried and each gets its own
  :class:`AddressResult`, so one dead NameServer does not hide what the others did.

Failures are the typed errors of rmq.errors: RemotingConnectError,
RemotingTimeoutError, RemotingClosedError (no answer), ResponseError (an answer
other than SUCCESS), BodyError (an answer that does not decode).
"""

from __future__ import annotations

import json
from ssl import SSLContext
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypedDict, TypeVar

from rmq import bodies
from rmq.acl import SessionCredentials
from rmq.client import DEFAULT_TIMEOUT, BlockingRemotingClient, split_addresses
from rmq.namesrv.config import parse_properties, properties_to_string
from rmq.errors import BodyError, ProtocolError, RemotingConnectError, RemotingError, ResponseError
from rmq.protocol import RESPONSE_NAMES, RequestCode, ResponseCode, parse_java_int

if TYPE_CHECKING:
    from typing_extensions import Buffer, Self

    from rmq.codec import RemotingCommand

__all__ = ["NamesrvAdmin", "AddressResult", "FAILURES", "describe_error", "error_json", "to_json",
           "cluster_list_text", "topic_route_text", "topic_list_text",
           "namesrv_config_text", "update_namesrv_config_text", "kv_config_text",
           "write_perm_text", "ClusterList", "ClusterRow", "TopicRoute", "TopicList"]

_V = TypeVar("_V")

#: What a failed address can raise: no answer, an error answer, an answer that does
#: not decode.
FAILURES = (RemotingError, ResponseError, ProtocolError)


class ClusterRow(TypedDict):
    """One broker address of :meth:`NamesrvAdmin.cluster_list` (a plain dict)."""
    cluster: str
    brokerName: str
    brokerId: int
    brokerAddr: str


class ClusterList(TypedDict):
    """What :meth:`NamesrvAdmin.cluster_list` returns (a plain dict)."""
    namesrvAddr: str
    brokers: list[ClusterRow]
    brokerAddrTable: dict[str, dict[str, Any]]
    clusterAddrTable: dict[str, list[str]]


class TopicRoute(TypedDict):
    """What :meth:`NamesrvAdmin.topic_route` returns (a plain dict)."""
    namesrvAddr: str
    topic: str
    route: dict[str, Any]


class TopicList(TypedDict):
    """What :meth:`NamesrvAdmin.topic_list` returns (a plain dict)."""
    namesrvAddr: str
    topicList: list[str]


class AddressResult(Generic[_V]):
    """The outcome of one request to one NameServer: ``value`` or ``error``."""

    __slots__ = ("addr", "value", "error")

    def __init__(self, addr: str, value: _V | None = None,
                 error: BaseException | None = None) -> None:
        self.addr = addr
        self.value: _V = value  # type: ignore[assignment]  # None when error is set
        self.error = error

    @property
    def ok(self) -> bool:
        return self.error is None

    def __repr__(self) -> str:
        what = f"error={self.error!r}" if self.error else f"value={self.value!r}"
        return f"AddressResult({self.addr!r}, {what})"


class NamesrvAdmin:
    """Admin requests to the NameServers of ``namesrv_addr`` (a ``;``-separated
    list, as mqadmin's -n, or a list). ``timeout``: seconds per request, connecting
    included. Close it (or use it as a context manager) to drop its connections.
    ``ssl``: TLS (RemotingClient's ``ssl``) when it makes the client (not with ``client``).
    ``credentials``: every request is signed with them (rmq.acl; a ``client`` given
    signs with its own)."""

    def __init__(self, namesrv_addr: str | Iterable[str], timeout: float = DEFAULT_TIMEOUT,
                 client: BlockingRemotingClient | None = None,
                 ssl: SSLContext | bool | None = None,
                 credentials: SessionCredentials | None = None) -> None:
        if isinstance(namesrv_addr, str):
            self.addresses = split_addresses(namesrv_addr)
        else:
            self.addresses = split_addresses(";".join(namesrv_addr))
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        self.timeout = timeout
        self._own_client = client is None
        self.client = client if client is not None else BlockingRemotingClient(
            ssl=ssl, credentials=credentials)

    def close(self) -> None:
        if self._own_client:
            self.client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- requests

    def _call(self, addr: str, code: int, ext_fields: dict[str, str] | None = None,
              body: Buffer = b"", read: Callable[[RemotingCommand], Any] | None = None) -> Any:
        """``read(answer)`` of the SUCCESS answer of ``addr`` to one request."""
        resp = self.client.request(addr, code, ext_fields, body, timeout=self.timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise ResponseError(resp.code, resp.remark, addr, code)
        if read is None:
            return None
        try:
            return read(resp)
        except (ProtocolError, TypeError, ValueError, AttributeError, KeyError) as e:
            # a body that decodes but is not the shape Java sends (a number where
            # a list of names belongs...): the same typed error as undecodable JSON
            raise BodyError(f"answer from {addr} to request {code}: {e!r}") from e

    def _call_one(self, code: int, ext_fields: dict[str, str] | None = None,
                  read: Callable[[RemotingCommand], Any] | None = None) -> tuple[str, Any]:
        """Java's ``invokeSync(null, ...)``: the first NameServer that can be
        connected to answers; only a connection failure moves on to the next.
        Returns (address, read(answer))."""
        refused: list[RemotingConnectError] = []
        for addr in self.addresses:
            try:
                return addr, self._call(addr, code, ext_fields, read=read)
            except RemotingConnectError as e:
                refused.append(e)
        if len(refused) == 1:
            raise refused[0]
        raise RemotingConnectError(
            "no NameServer could be connected: " + "; ".join(str(e) for e in refused),
            ";".join(self.addresses))

    def _call_each(self, code: int, ext_fields: dict[str, str] | None = None, body: Buffer = b"",
                   read: Callable[[RemotingCommand], Any] | None = None
                   ) -> list[AddressResult[Any]]:
        """The same request to every NameServer, in order: an AddressResult each."""
        results: list[AddressResult[Any]] = []
        for addr in self.addresses:
            try:
                results.append(AddressResult(addr, self._call(addr, code, ext_fields, body,
                                                              read)))
            except FAILURES as e:
                results.append(AddressResult(addr, error=e))
        return results

    # ---------------------------------------------------------------- one NameServer

    def cluster_list(self, cluster: str | None = None) -> ClusterList:
        """GET_BROKER_CLUSTER_INFO: the tables, and one row per broker address in
        mqadmin clusterList's order (cluster, then broker name, then broker id);
        ``cluster`` keeps that cluster's rows only (mqadmin clusterList -c)."""
        addr, (broker_table, cluster_table) = self._call_one(
            RequestCode.GET_BROKER_CLUSTER_INFO,
            read=lambda resp: bodies.decode_cluster_info(resp.body))
        rows: list[ClusterRow] = []
        for name in sorted(cluster_table) if cluster is None else [cluster]:
            for broker_name in sorted(set(cluster_table.get(name, ()))):
                broker = broker_table.get(broker_name)
                if broker is None:       # listed in a cluster but gone: Java skips it
                    continue
                for broker_id, broker_addr in sorted(broker["brokerAddrs"].items()):
                    rows.append({"cluster": name, "brokerName": broker_name,
                                 "brokerId": broker_id, "brokerAddr": broker_addr})
        return {"namesrvAddr": addr, "brokers": rows,
                "brokerAddrTable": broker_table, "clusterAddrTable": cluster_table}

    def topic_route(self, topic: str) -> TopicRoute:
        """GET_ROUTEINFO_BY_TOPIC: the TopicRouteData (brokerAddrs keyed by int id)."""
        addr, route = self._call_one(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic},
            read=lambda resp: bodies.decode_topic_route_data(resp.body))
        return {"namesrvAddr": addr, "topic": topic, "route": route}

    def topic_list(self) -> TopicList:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER: every topic the NameServer knows."""
        addr, (topics, _) = self._call_one(
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
            read=lambda resp: bodies.decode_topic_list(resp.body))
        return {"namesrvAddr": addr, "topicList": topics}

    # ---------------------------------------------------------------- every NameServer

    def get_namesrv_config(self) -> list[AddressResult[dict[str, str]]]:
        """GET_NAMESRV_CONFIG from each NameServer: AddressResults of key -> value."""
        return self._call_each(RequestCode.GET_NAMESRV_CONFIG, read=_read_properties)

    def update_namesrv_config(self, key: str, value: str) -> list[AddressResult[None]]:
        """UPDATE_NAMESRV_CONFIG ``key=value`` on each NameServer (the body is
        MixAll.properties2String's, as mqadmin sends it)."""
        body = properties_to_string({key: value}).encode("utf-8")
        return self._call_each(RequestCode.UPDATE_NAMESRV_CONFIG, body=body)

    def update_kv_config(self, namespace: str, key: str, value: str
                         ) -> list[AddressResult[None]]:
        """PUT_KV_CONFIG on each NameServer."""
        return self._call_each(RequestCode.PUT_KV_CONFIG,
                               {"namespace": namespace, "key": key, "value": value})

    def delete_kv_config(self, namespace: str, key: str) -> list[AddressResult[None]]:
        """DELETE_KV_CONFIG on each NameServer."""
        return self._call_each(RequestCode.DELETE_KV_CONFIG,
                               {"namespace": namespace, "key": key})

    def wipe_write_perm(self, broker_name: str) -> list[AddressResult[int]]:
        """WIPE_WRITE_PERM_OF_BROKER on each NameServer: AddressResults of the
        number of topics whose write permission was taken away."""
        return self._call_each(RequestCode.WIPE_WRITE_PERM_OF_BROKER,
                               {"brokerName": broker_name},
                               read=lambda resp: _ext_int(resp, "wipeTopicCount"))

    def add_write_perm(self, broker_name: str) -> list[AddressResult[int]]:
        """ADD_WRITE_PERM_OF_BROKER on each NameServer: AddressResults of the
        number of topics given write permission back."""
        return self._call_each(RequestCode.ADD_WRITE_PERM_OF_BROKER,
                               {"brokerName": broker_name},
                               read=lambda resp: _ext_int(resp, "addTopicCount"))


def _read_properties(resp: RemotingCommand) -> dict[str, str]:
    try:
        return parse_properties(bytes(resp.body).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise BodyError(f"the configuration is not properties text: {e}") from None


def _ext_int(resp: RemotingCommand, name: str) -> int:
    text = (resp.ext_fields or {}).get(name)
    number = parse_java_int(text) if text is not None else None
    if number is None:
        raise BodyError(f"answer without a numeric {name}: {resp.ext_fields!r}")
    return number


# ---------------------------------------------------------------- errors

def describe_error(error: BaseException | None) -> str:
    """One line saying what failed, with the address and, for an answer, its code
    and remark."""
    if isinstance(error, ResponseError):
        name = RESPONSE_NAMES.get(error.code, "unknown code")
        return (f"name server {error.addr} answered code {error.code} ({name}), "
                f"remark {error.remark!r}")
    return str(error)


def error_json(error: BaseException | None) -> dict[str, Any]:
    """A failure as JSON fields."""
    out: dict[str, Any] = {"error": describe_error(error), "errorType": type(error).__name__}
    if getattr(error, "addr", None):
        out["namesrvAddr"] = error.addr  # type: ignore[union-attr]  # it has one
    if isinstance(error, ResponseError):
        out.update(code=error.code, remark=error.remark)
    return out


def _result_json(result: AddressResult[Any], value_name: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"namesrvAddr": result.addr, "ok": result.ok}
    if result.ok:
        if value_name is not None:
            out[value_name] = result.value
    else:
        out.update(error_json(result.error))
        out["namesrvAddr"] = result.addr
    return out


def to_json(data: Mapping[str, Any] | list[AddressResult[Any]], value_name: str | None = None,
            **fields: Any) -> str:
    """The JSON document of a verb's data: a one-NameServer verb's dict, or a list
    of AddressResults (each value under ``value_name``). ``fields`` are added at the
    top (the verb's arguments)."""
    if isinstance(data, list):
        doc = {"ok": all(r.ok for r in data), **fields,
               "results": [_result_json(r, value_name) for r in data]}
    else:
        doc = {"ok": True, **fields, **data}
    return json.dumps(doc, indent=2, ensure_ascii=False)


# ---------------------------------------------------------------- mqadmin's text
# Each returns (stdout text, stderr text); either may be "".

def _lines(lines: Iterable[str]) -> str:
    return "".join(line + "\n" for line in lines)


def cluster_list_text(data: Mapping[str, Any]) -> tuple[str, str]:
    """ClusterListSubCommand's base table, the columns a NameServer knows (the
    others come from each broker's runtime stats)."""
    fmt = "{:<22}  {:<22}  {:<4}  {:<22}"
    lines = [fmt.format("#Cluster Name", "#Broker Name", "#BID", "#Addr").rstrip()]
    lines += [fmt.format(r["cluster"], r["brokerName"], r["brokerId"], r["brokerAddr"]).rstrip()
              for r in data["brokers"]]
    return _lines(lines), ""


def topic_route_text(data: Mapping[str, Any]) -> tuple[str, str]:
    """TopicRouteSubCommand: the route as pretty JSON (fastjson's PrettyFormat:
    tab indents, no blank after the colon)."""
    return json.dumps(data["route"], indent="\t", separators=(",", ":"),
                      ensure_ascii=False) + "\n", ""


def topic_list_text(data: Mapping[str, Any]) -> tuple[str, str]:
    return _lines(data["topicList"]), ""


def _failures(results: Iterable[AddressResult[Any]], what: str) -> str:
    return _lines(f"{what} failed in name server[{r.addr}]: {describe_error(r.error)}"
                  for r in results if not r.ok)


def namesrv_config_text(results: Sequence[AddressResult[dict[str, str]]]) -> tuple[str, str]:
    """GetNamesrvConfigCommand: a block per NameServer."""
    lines: list[str] = []
    for r in results:
        if r.ok:
            lines.append(f"============{r.addr}============")
            lines += [f"{k:<50}=  {v}" for k, v in r.value.items()]
    return _lines(lines), _failures(results, "get name server config")


def _all_or_each(results: Sequence[AddressResult[Any]], success: str,
                 what: str) -> tuple[str, str]:
    """Java's success message when every NameServer applied the change; otherwise
    each address's outcome, on stderr, as the command failed."""
    if all(r.ok for r in results):
        return success, ""
    return "", _lines(f"{what} in name server[{r.addr}]: "
                      + ("OK" if r.ok else f"failed: {describe_error(r.error)}")
                      for r in results)


def update_namesrv_config_text(results: Sequence[AddressResult[Any]], key: str,
                               value: str) -> tuple[str, str]:
    """UpdateNamesrvConfigCommand's message (with the addresses, as Java prints -n)."""
    addrs = ", ".join(r.addr for r in results)
    return _all_or_each(results, f"update name server config success![{addrs}]\n"
                                 f"{key} : {value}\n", "update name server config")


def kv_config_text(results: Sequence[AddressResult[Any]], deleted: bool = False
                   ) -> tuple[str, str]:
    """UpdateKvConfigCommand / DeleteKvConfigCommand's message."""
    if deleted:
        return _all_or_each(results, "delete kv config from namespace success.\n",
                            "delete kv config")
    return _all_or_each(results, "create or update kv config to namespace success.\n",
                        "create or update kv config")


def write_perm_text(results: Sequence[AddressResult[Any]], broker_name: str,
                    added: bool = False) -> tuple[str, str]:
    """WipeWritePermSubCommand / AddWritePermSubCommand: a line per NameServer."""
    what = "add" if added else "wipe"
    out = [f"{what} write perm of broker[{broker_name}] in name server[{r.addr}] OK, {r.value}"
           for r in results if r.ok]
    err = [f"{what} write perm of broker[{broker_name}] in name server[{r.addr}] Failed: "
           f"{describe_error(r.error)}" for r in results if not r.ok]
    return _lines(out), _lines(err)
