"""The NameServer's counters, and their exposition to Prometheus over HTTP.

:class:`Counters` holds plain ints, bumped where things happen (on the loop thread
and on the table thread, under the GIL: an increment, not a call) and read when
Prometheus scrapes. The route answers the core writes itself are counted in the
core (``RouteTable.cache_stats()["served"]``, TOPIC_NOT_EXIST ones ``["not_found"]``):
nothing here runs per route query.

:class:`MetricsServer` serves ``/metrics`` (Prometheus' text format, written by
prometheus_client), ``/healthz`` (ready: 503 while needWaitForService holds route
queries back or during a graceful shutdown), ``/healthz/live`` and
``/healthz/ready`` on the server's event loop; it reads a request head of
:data:`MAX_HEAD` bytes at most, within :data:`HEAD_TIMEOUT`, and serves
:data:`MAX_CLIENTS` at once.
"""

import asyncio
import bisect
import collections
import logging
import threading
import time

from rmq.protocol import REQUEST_NAMES, RESPONSE_NAMES, RequestCode, ResponseCode

log = logging.getLogger(__name__)

#: Registration durations' histogram bounds (seconds): a registration of a few
#: topics takes well under a millisecond, one of 10,000 topics a few milliseconds.
REGISTRATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                        1.0, 2.5)

#: The KV operations, by request code.
KV_OPERATIONS = {RequestCode.PUT_KV_CONFIG: "put", RequestCode.GET_KV_CONFIG: "get",
                 RequestCode.DELETE_KV_CONFIG: "delete",
                 RequestCode.GET_KVLIST_BY_NAMESPACE: "list"}

#: Why a request or a connection was refused: ``rmq_refused_total``'s reasons, all
#: exposed from start (at 0) so that rates and alerts see every series.
REFUSED_REASONS = (
    "bad_frame",            # a frame the decoder refuses: the connection is closed
    "foreign_protocol",     # TLS or HTTP on the remoting port
    "tls_handshake",        # a TLS handshake (or session) that failed
    "tls_required",         # a plain client on a tls.server.mode=enforcing port
    "connection_limit",     # maxConnections
    "output_budget",        # maxTotalOutputBufferBytes: a connection aborted
    "not_ready",            # a route query before needWaitForService's delay is over
    "go_away",              # during a graceful shutdown
    "missing_field",        # a required header field is missing
    "bad_body",
    "crc32",                # a registration whose body fails its bodyCrc32
    "registration",         # a registration Java 5.x refuses too
    "kv_limit",             # the KV limits (maxKv*)
    "config_no_permission",  # UPDATE_NAMESRV_CONFIG of a black-listed key
    "config_invalid",
    "acl_unsigned",         # aclEnable: a request that needs a signature has none
    "acl_denied",           # aclEnable: an unknown account, a wrong signature, not admin
)

#: Request codes counted under their own label; any other (a client chooses it) is
#: counted as "other", so that no client can grow the label set.
_OTHER = -1


class Counters:
    """Everything counted since start (see the module doc). ``refused`` is keyed by
    reason: a fixed set of names chosen by the server, never by a client."""

    __slots__ = ("requests", "responses", "route_answers", "bytes_in", "bytes_out",
                 "connections", "refused", "expired", "unregistered", "connection_dropped",
                 "registrations", "registration_seconds", "registration_buckets",
                 "_answers_lock")

    def __init__(self):
        # answered() is called from the loop and, on the engine, from the table thread
        # (a registration's answer): `d[k] += 1` is not atomic across threads
        self._answers_lock = threading.Lock()
        self.requests = collections.Counter()       # request code (or _OTHER) -> n
        self.responses = collections.Counter()      # response code -> n (the handlers')
        self.route_answers = collections.Counter()  # response code -> n, for 105 (idem)
        self.bytes_in = 0
        self.bytes_out = 0
        self.connections = 0                        # accepted since start
        self.refused = collections.Counter(dict.fromkeys(REFUSED_REASONS, 0))
        self.expired = 0                            # brokers dropped by the liveness scan
        self.unregistered = 0
        self.connection_dropped = 0                 # brokers dropped as their channel closed
        self.registrations = 0
        self.registration_seconds = 0.0
        self.registration_buckets = [0] * (len(REGISTRATION_BUCKETS) + 1)

    def received(self, cmds):
        """The requests of a read that go through the handlers."""
        requests = self.requests
        for cmd in cmds:
            code = cmd.code
            requests[code if code in REQUEST_NAMES else _OTHER] += 1

    def answered(self, cmd, resp):
        with self._answers_lock:
            self.responses[resp.code] += 1
            if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
                self.route_answers[resp.code] += 1

    def registered(self, seconds):
        self.registrations += 1
        self.registration_seconds += seconds
        self.registration_buckets[bisect.bisect_left(REGISTRATION_BUCKETS, seconds)] += 1


def _families(app):
    """The metric families of a NameServerApp, read now."""
    from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                        HistogramMetricFamily)

    import rmq
    c = app.processor.counters
    routes = app.processor.routes
    cache = routes.cache_stats()
    net = app.network_counts()
    served = net["served"]      # route answers the core wrote: code 0, request 105
    core_not_found = net["not_found"]       # and its TOPIC_NOT_EXIST answers (17)

    f = GaugeMetricFamily("rmq_info", "The running rmq: version and core", labels=["version", "core"])
    f.add_metric([rmq.__version__, rmq.IMPLEMENTATION], 1)
    yield f
    f = GaugeMetricFamily("rmq_ready", "1 once route queries are answered (after "
                          "needWaitForService), 0 before and during a graceful shutdown")
    f.add_metric([], 1 if app.ready() and not app.going_away else 0)
    yield f

    f = CounterMetricFamily("rmq_requests", "Requests received, by request code",
                            labels=["code", "name"])
    requests = collections.Counter(c.requests)
    requests[RequestCode.GET_ROUTEINFO_BY_TOPIC] += served + core_not_found
    for code, n in sorted(requests.items()):
        f.add_metric(["other", "other"] if code == _OTHER else [str(code), REQUEST_NAMES[code]], n)
    yield f
    f = CounterMetricFamily("rmq_responses", "Responses sent, by response code",
                            labels=["code", "name"])
    responses = collections.Counter(c.responses)
    responses[0] += served
    responses[ResponseCode.TOPIC_NOT_EXIST] += core_not_found
    for code, n in sorted(responses.items()):
        f.add_metric([str(code), RESPONSE_NAMES.get(code, "other")], n)
    yield f
    f = CounterMetricFamily("rmq_route_queries", "GET_ROUTEINFO_BY_TOPIC answered: found "
                            "(a route), not_found (TOPIC_NOT_EXIST), other (e.g. not ready)",
                            labels=["result"])
    found = served + c.route_answers[0]
    not_found = c.route_answers[17] + core_not_found
    f.add_metric(["found"], found)
    f.add_metric(["not_found"], not_found)
    f.add_metric(["other"], sum(c.route_answers.values()) - c.route_answers[0]
                 - c.route_answers[17])
    yield f
    f = CounterMetricFamily("rmq_kv_operations", "KV config requests, by operation",
                            labels=["operation"])
    for code, op in KV_OPERATIONS.items():
        f.add_metric([op], c.requests[code])
    yield f

    f = HistogramMetricFamily("rmq_registration_duration_seconds",
                              "REGISTER_BROKER: time to apply a broker's registration")
    cumulative, n = [], 0
    for bound, count in zip((*REGISTRATION_BUCKETS, float("inf")), c.registration_buckets):
        n += count
        cumulative.append(("+Inf" if bound == float("inf") else repr(bound), n))
    f.add_metric([], cumulative, c.registration_seconds)
    yield f
    f = CounterMetricFamily("rmq_broker_removals", "Brokers removed, by cause",
                            labels=["cause"])
    f.add_metric(["expired"], c.expired)
    f.add_metric(["unregistered"], c.unregistered)
    f.add_metric(["connection_closed"], c.connection_dropped)
    yield f
    f = CounterMetricFamily("rmq_refused", "Requests and connections refused, by reason",
                            labels=["reason"])
    for reason, n in sorted(net["refused"].items()):
        f.add_metric([reason], n)
    yield f

    yield GaugeMetricFamily("rmq_brokers_live", "Brokers registered and live",
                            value=routes.live_count())
    yield GaugeMetricFamily("rmq_topics", "Topics in the route table", value=cache["topics"])
    yield GaugeMetricFamily("rmq_connections", "Client connections open",
                            value=len(app.connections))
    yield GaugeMetricFamily("rmq_connections_max", "maxConnections",
                            value=app.settings.max_connections)
    yield CounterMetricFamily("rmq_connections_accepted", "Client connections accepted",
                              value=c.connections)
    yield CounterMetricFamily("rmq_received_bytes", "Bytes read from clients",
                              value=net["bytes_in"])
    yield CounterMetricFamily("rmq_sent_bytes", "Bytes written to clients",
                              value=net["bytes_out"])

    f = CounterMetricFamily("rmq_route_cache", "Route answer cache events", labels=["event"])
    for event in ("hits", "misses", "evictions", "refused"):
        f.add_metric([event], cache[event])
    yield f
    yield GaugeMetricFamily("rmq_route_cache_bytes", "Bytes held by the route answer cache",
                            value=cache["bytes"])
    if cache["budget"] is not None:
        yield GaugeMetricFamily("rmq_route_cache_budget_bytes", "routeCacheBytes",
                                value=cache["budget"])
    yield CounterMetricFamily("rmq_trace_frames_dropped", "Traced frames dropped (on the "
                              "I/O engine: records of one or more frames; the "
                              "trace writer fell behind or failed; 0 when not tracing)",
                              value=app.trace_dropped())


class _Collector:
    def __init__(self, app):
        self.app = app

    def collect(self):
        return _families(self.app)


#: Limits of the HTTP side: a request head's bytes, the time to send it, clients at once.
MAX_HEAD = 8192
HEAD_TIMEOUT = 5.0
MAX_CLIENTS = 16


class MetricsServer:
    """``/metrics`` and ``/healthz`` for a NameServerApp (see the module doc)."""

    def __init__(self, app):
        from prometheus_client import CollectorRegistry, ProcessCollector
        self.app = app
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(app))
        ProcessCollector(registry=self.registry)     # process_resident_memory_bytes, CPU
        self._server = None
        self._clients = 0

    @property
    def sockets(self):
        return self._server.sockets if self._server else ()

    async def start(self, host, port):
        self._server = await asyncio.start_server(self._serve, host, port, limit=MAX_HEAD,
                                                  reuse_address=True)
        addrs = ", ".join("%s:%s" % s.getsockname()[:2] for s in self._server.sockets)
        log.info("metrics on http://%s/metrics, health on /healthz", addrs)
        return self

    async def close(self):
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader, writer):
        self._clients += 1
        try:
            if self._clients > MAX_CLIENTS:
                return
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
            except (asyncio.TimeoutError, asyncio.IncompleteReadError,
                    asyncio.LimitOverrunError, ConnectionError):
                return
            status, ctype, body = self._answer(head)
            writer.write(b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n" % (status, _REASONS[status].encode(),
                                                         ctype.encode(), len(body)))
            if not head.startswith(b"HEAD "):
                writer.write(body)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            self._clients -= 1
            writer.close()

    def _answer(self, head):
        parts = head.split(b"\r\n", 1)[0].split(b" ")
        if len(parts) != 3 or parts[0] not in (b"GET", b"HEAD"):
            return 405, "text/plain", b"GET or HEAD only\n"
        path = parts[1].split(b"?", 1)[0]
        if path == b"/metrics":
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
            started = time.perf_counter()
            body = generate_latest(self.registry)
            log.debug("scrape: %d bytes in %.2f ms", len(body),
                      (time.perf_counter() - started) * 1000)
            return 200, CONTENT_TYPE_LATEST, body
        if path == b"/healthz/live":
            return 200, "text/plain", b"live\n"
        if path in (b"/healthz", b"/healthz/ready"):
            app = self.app
            if app.going_away:
                return 503, "text/plain", b"shutting down\n"
            if not app.ready():
                return 503, "text/plain", b"not ready: needWaitForService\n"
            return 200, "text/plain", b"ready\n"
        return 404, "text/plain", b"/metrics, /healthz, /healthz/live, /healthz/ready\n"


_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed",
            503: "Service Unavailable"}
