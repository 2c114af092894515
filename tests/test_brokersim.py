"""``rmq broker-sim``: simulated brokers through BrokerRegistrar, as a real process
against a real NameServer."""

import logging
import os
import signal
import subprocess
import sys

import pytest

from nameserver import Client, running_namesrv, wait_for
from rmq import bodies


@pytest.fixture
def ns(tmp_path):
    with running_namesrv(tmp_path) as app:
        yield app


def cluster_info(app):
    with Client(app.address) as c:
        return bodies.decode_cluster_info(c.request(106).body)


def sim(ns, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.Popen([sys.executable, "-m", "rmq", "broker-sim", "-n", ns.address, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def test_brokers_register_and_unregister_on_sigint(ns, caplog):
    caplog.set_level(logging.INFO, logger="rmq.namesrv")
    p = sim(ns, "--brokers", "3", "--topics", "50", "--clusters", "2", "--period", "1")
    try:
        assert wait_for(lambda: len(cluster_info(ns)[0]) == 3, 20), p.stdout.read()
        brokers, clusters = cluster_info(ns)
        assert sorted(clusters) == ["Cluster-0", "Cluster-1"]
        assert sorted(clusters["Cluster-0"]) == ["broker-0", "broker-2"]
        assert brokers["broker-1"]["brokerAddrs"] == {0: "127.0.0.1:10921"}
        with Client(ns.address) as c:
            route = bodies.decode_topic_route_data(c.request(105, {"topic": "T-00049"}).body)
        assert sorted(bd["brokerName"] for bd in route["brokerDatas"]) == [
            "broker-0", "broker-1", "broker-2"]
        assert {q["readQueueNums"] for q in route["queueDatas"]} == {8}
        # periodic re-registration (period 1 s): the live table's timestamps move on
        first = {b["brokerAddr"]: b["lastUpdateTimestamp"] for b in ns.processor.routes.live_brokers()}
        assert wait_for(lambda: all(
            b["lastUpdateTimestamp"] > first[b["brokerAddr"]]
            for b in ns.processor.routes.live_brokers()), timeout=10)
    finally:
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=30)
    assert p.returncode == 0, out
    assert cluster_info(ns)[0] == {}
    # gone because they unregistered, not only because their connections closed
    unregistered = [r for r in caplog.records if "broker unregistered" in r.getMessage()]
    assert len(unregistered) == 3
    assert "unregistered from 1 of 1 name servers" in out


def test_duration_and_a_dead_name_server(ns, tmp_path):
    p = subprocess.run([sys.executable, "-m", "rmq", "broker-sim", "-n",
                        f"{ns.address};127.0.0.1:1", "--topics", "5", "--duration", "0.5",
                        "--timeout", "1", "--split"],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    # registered with the live one; unregistering from the dead one fails: status 1
    assert "registered with 1 of 2 name servers" in p.stderr
    assert "unregistered from 1 of 2 name servers" in p.stderr
    assert p.returncode == 1


def test_no_name_server_answers_exits_non_zero():
    p = subprocess.run([sys.executable, "-m", "rmq", "broker-sim", "-n", "127.0.0.1:1",
                        "--duration", "5", "--timeout", "1"],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert p.returncode == 1
    assert "no name server answered" in p.stderr
