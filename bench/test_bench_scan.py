"""Nogil scanners (scan.c) vs the general decoders they stand in for."""

import pytest

import rmq._core as compiled
from rmq.brokersim import encode_body, topic_names

TOPICS = 10_000
REPEAT = 20


@pytest.fixture(scope="module")
def register_body():
    data = encode_body(topic_names(TOPICS), 1, timestamp=1795354033953)
    assert compiled._scan_register_body_count(data) == TOPICS
    return data


def test_register_body_scan(benchmark, figure, register_body):
    # REPEAT scans per call: the per-call Python overhead stays out of the figure.
    n = benchmark(compiled._scan_register_body_count, register_body, REPEAT)
    assert n == TOPICS
    figure(benchmark, "register body scan", REPEAT * len(register_body) / 1e6, "MB/s")


def test_register_body_general(benchmark, figure, register_body):
    benchmark(compiled.decode_register_broker_body, register_body)
    figure(benchmark, "register body general decode", len(register_body) / 1e6, "MB/s")


ROUTE = compiled.encode_frame(compiled.RemotingCommand.request(
    105, {"topic": "BenchmarkTopic-00001"}, opaque=7))


def test_route_request_scan(benchmark, figure):
    assert benchmark(compiled._scan_route_request, ROUTE) is not None
    figure(benchmark, "route request scan (Python call)", 1, "ns/call")


def test_route_request_decode(benchmark, figure):
    assert benchmark(compiled.decode_frame, ROUTE).code == 105
    figure(benchmark, "route request decode_frame", 1, "ns/call")
