"""Frame codec and hot body codecs: compiled core vs the pure-Python reference."""

import pytest

import rmq._core as compiled
import rmq.fallback as python
from rmq import bodies
from rmq.namesrv.routeinfo import RouteTable

IMPLS = [pytest.param(compiled, id="compiled"), pytest.param(python, id="python")]
NAME = {compiled: "compiled", python: "python"}

FRAMES = 20_000
CHUNK = 64 * 1024


def _route_request_stream(impl):
    # What a client sends: GET_ROUTEINFO_BY_TOPIC, JSON header, as Java writes it.
    frames = [impl.encode_frame(impl.RemotingCommand.request(
        105, {"topic": f"BenchmarkTopic-{i % 10_000:05d}"}, opaque=i)) for i in range(FRAMES)]
    stream = b"".join(frames)
    return [stream[i:i + CHUNK] for i in range(0, len(stream), CHUNK)]


@pytest.mark.parametrize("impl", IMPLS)
def test_framedecoder_route_requests(benchmark, figure, impl):
    chunks = _route_request_stream(impl)

    def run():
        d = impl.FrameDecoder()
        n = 0
        for c in chunks:
            n += len(d.feed(c))
        return n

    assert benchmark(run) == FRAMES
    figure(benchmark, f"framedecoder {NAME[impl]}", FRAMES, "frames/s")


def _route(brokers=8):
    # A topic on 8 brokers (the W1 workload of the NameServer issue).
    return {
        "brokerDatas": [{"brokerAddrs": {0: f"10.0.0.{b}:10911", 1: f"10.0.1.{b}:10911"},
                         "brokerName": f"broker-{b}", "cluster": "DefaultCluster"}
                        for b in range(brokers)],
        "filterServerTable": {},
        "queueDatas": [{"brokerName": f"broker-{b}", "perm": 6, "readQueueNums": 8,
                        "topicSysFlag": 0, "writeQueueNums": 8} for b in range(brokers)],
    }


@pytest.mark.parametrize("legacy", [False, True], ids=["standard", "legacy"])
@pytest.mark.parametrize("impl", IMPLS)
def test_route_response_encode(benchmark, figure, impl, legacy):
    route = _route()
    request = impl.RemotingCommand.request(105, {"topic": "BenchmarkTopic-00001"})

    def run():
        body = impl.encode_topic_route_data(route, legacy)
        return impl.encode_frame(request.response(0, body=body))

    frame = benchmark.pedantic(run, iterations=2_000, rounds=10, warmup_rounds=1)
    assert impl.decode_frame(frame).body == python.encode_topic_route_data(route, legacy)
    figure(benchmark, f"route encode {'legacy' if legacy else 'standard'} {NAME[impl]}", 1,
           "responses/s")


def _register_body(topics=10_000):
    return bodies.register_broker_body(
        [bodies.topic_config(f"T-{i:05d}", 8, 8) for i in range(topics)],
        {"counter": 1, "timestamp": 1795354033953})


@pytest.mark.parametrize("impl", IMPLS)
def test_register_body_decode(benchmark, figure, impl):
    data = python.encode_register_broker_body(_register_body())
    assert 1_300_000 < len(data) < 1_600_000    # the 1.4 MB body of the issue
    body = benchmark(impl.decode_register_broker_body, data)
    assert len(body["topicConfigSerializeWrapper"]["topicConfigTable"]) == 10_000
    figure(benchmark, f"register body decode {NAME[impl]}", 1, "bodies/s")


@pytest.mark.parametrize("impl", IMPLS)
def test_register_body_decode_compressed(benchmark, figure, impl):
    data = python.encode_register_broker_body(_register_body(), compressed=True)
    body = benchmark(impl.decode_register_broker_body, data)
    assert len(body["topicConfigSerializeWrapper"]["topicConfigTable"]) == 10_000
    figure(benchmark, f"register body decode compressed {NAME[impl]}", 1, "bodies/s")


@pytest.mark.parametrize("impl", IMPLS)
def test_register_body_encode(benchmark, figure, impl):
    body = _register_body()
    data = benchmark(impl.encode_register_broker_body, body)
    assert len(data) > 1_300_000
    figure(benchmark, f"register body encode {NAME[impl]}", 1, "bodies/s")


def _w1_table(impl, brokers=8, topics=10_000):
    """W1: ``brokers`` brokers each registering the same ``topics`` topics, every
    route answer cached."""
    rt = RouteTable(storage=impl.TopicTable)
    data = python.encode_register_broker_body(_register_body(topics))
    for b in range(brokers):
        addr = f"10.0.0.{b}:10911"
        rt.register_broker("DefaultCluster", addr, f"broker-{b}", 0, addr, body=data, now_ms=0)
    for i in range(topics):
        rt.route_body(f"T-{i:05d}")
    return rt


@pytest.mark.parametrize("impl", IMPLS)
def test_serve_routes_from_cache(benchmark, figure, impl):
    # The route fast path: requests split, recognised and answered from the table's
    # cached answers (W1: 8 brokers x 10,000 topics).
    frames = [impl.encode_frame(impl.RemotingCommand.request(
        105, {"topic": f"T-{i % 10_000:05d}"}, opaque=i)) for i in range(FRAMES)]
    stream = b"".join(frames)
    chunks = [stream[i:i + CHUNK] for i in range(0, len(stream), CHUNK)]
    rt = _w1_table(impl)
    route = rt.route_body("T-00000")

    def run():
        d = impl.FrameDecoder()
        n = 0
        for c in chunks:
            out, others, error = rt.serve_routes(d, c)
            assert not others and error is None
            n += len(out)
        return n

    assert benchmark(run) > FRAMES * len(route)
    figure(benchmark, f"serve_routes {NAME[impl]}", FRAMES, "answers/s")


@pytest.mark.parametrize("impl", IMPLS)
def test_register_10000_topics(benchmark, figure, impl):
    # REGISTER_BROKER's table work for one broker of W1 (1.4 MB JSON body): read the
    # body and apply it, each round a new DataVersion with changed queue numbers.
    rt = _w1_table(impl, brokers=7)
    datas = []
    for n in range(2):
        body = _register_body()
        for tc in body["topicConfigSerializeWrapper"]["topicConfigTable"].values():
            tc["readQueueNums"] = 4 + n
        body["topicConfigSerializeWrapper"]["dataVersion"]["counter"] = 2 + n
        datas.append(python.encode_register_broker_body(body))
    rounds = iter(range(1 << 30))

    def run():
        data = datas[next(rounds) % 2]
        return rt.register_broker("DefaultCluster", "10.0.0.9:10911", "broker-9", 0, "ha",
                                  body=data, now_ms=0)

    assert benchmark(run)["changed"]
    figure(benchmark, f"register 10000 topics {NAME[impl]}", 1, "registrations/s")
