"""bench/load.py's paired mode, run for real and briefly (its figures are bench/README.md's;
here only that it measures what it says): W1's loads, TOPIC_NOT_EXIST and zone mode, each
on rmq's engine and on the limit server in turn, every rmq answer of the code its load
asks for."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.once]


def test_paired_rounds_measure_every_load_against_the_limit_server(tmp_path):
    out = tmp_path / "load.json"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "load.py"), "--engine", "--paired", "1",
         "--brokers", "2", "--zones", "2", "--topics", "200", "--duration", "0.3",
         "--warmup", "0.1", "--reg-count", "2", "--during-duration", "0.5",
         "--deadline", "240", "--json-out", str(out)],
        check=True, timeout=300, cwd=tmp_path, stdout=subprocess.DEVNULL)
    rep = json.loads(out.read_text())
    loads = ["w1_16", "w1_64", "w1_1", "c1000_1", "w1_missing_16", "w1_zone_16"]
    assert sorted(rep["paired"]) == sorted(loads)
    for key in loads:
        rounds = rep["paired"][key]
        assert len(rounds["routes"]) == 1 and rounds["routes"][0] > 0, (key, rounds)
        assert rounds["median_routes"] == rounds["routes"][0]
        assert rep["limit_" + key]["errors"] == 0           # the limit: canned routes
        assert rep[key]["requests"] > 0
    # every not-found query answered TOPIC_NOT_EXIST, every other one a route
    missing = rep["w1_missing_16"]
    assert missing["error_codes"] == {"17": missing["requests"]}
    assert all(rep[key]["errors"] == 0 for key in loads if key != "w1_missing_16")
