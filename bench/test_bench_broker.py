"""BrokerRegistrar: the CPU a registration costs the broker (issue 4's target:
register_broker_all of a 10,000-topic table to three NameServers in at most 10 ms of
CPU for body encoding, CRC and sending)."""

import asyncio
import contextlib
import pathlib
import statistics
import sys
import time

import pytest

from rmq import bodies
from rmq.registrar import BrokerRegistrar

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from nameserver import running_namesrv  # noqa: E402  (the tests' NameServer harness)

TOPICS = [bodies.topic_config(f"BenchmarkTopic-{i:05d}", 8, 8) for i in range(10_000)]
CHANGED = [bodies.topic_config(f"BenchmarkTopic-{i:05d}", 16, 16) for i in range(10_000)]


@pytest.fixture(scope="module")
def three_namesrvs(tmp_path_factory):
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(running_namesrv(tmp_path_factory.mktemp(f"ns{i}")))
               for i in range(3)]


@pytest.mark.parametrize("change", ["every-topic", "none"])
def test_register_broker_all_10000_topics_to_3_namesrvs(benchmark, cpu_figure,
                                                         three_namesrvs, change):
    """The broker thread's CPU in register_broker_all: body encoding, CRC and
    sending (the NameServers run in other threads and are not counted; nor is
    update_topics, the broker's table keeping, done before: Java's
    TopicConfigManager, not BrokerOuterAPI). every-topic: the table changed since
    the last call (all 10,000 TopicConfigs), so its JSON is encoded again; none:
    the periodic re-registration, which reuses the encoded body."""
    loop = asyncio.new_event_loop()
    r = BrokerRegistrar(";".join(a.address for a in three_namesrvs), topics=TOPICS,
                        cluster="BenchCluster", broker_name="bench-broker",
                        broker_addr="127.0.0.1:10911", register_timeout=30)
    loop.run_until_complete(r.register_broker_all())         # connect; warm up
    cpu = []
    tables = [TOPICS, CHANGED]

    def setup():
        if change == "every-topic":
            tables.reverse()
            r.update_topics(tables[0])

    def run():
        t = time.thread_time()
        results = loop.run_until_complete(r.register_broker_all())
        cpu.append(time.thread_time() - t)
        assert len(results) == 3

    try:
        benchmark.pedantic(run, setup=setup, rounds=15, iterations=1)
    finally:
        loop.run_until_complete(r.stop(unregister=False))
        loop.close()
    cpu_figure(benchmark, f"register_broker_all 10000 topics x3, {change} changed",
               statistics.median(cpu))
