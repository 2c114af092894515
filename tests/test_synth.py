"""rmq trace synth: the trace holds exactly what its manifest counts, in frames
that decode and re-encode to the same bytes (protocol-exact)."""

import collections
import json

import pytest

import rmq
from rmq import bodies
from rmq.cli import main as cli_main
from rmq.protocol import REQUEST_NAMES, RESPONSE_NAMES
from rmq.trace.synth import synthesize
from rmq.trace.segments import IN, OUT, read_records, segment_files
from test_crc32 import java_body_crc32

START = 1_700_000_000.0


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth")
    manifest = synthesize(out, brokers=3, clients=6, minutes=4, topics=40, dead=1, seed=7,
                          start=START, segment_bytes=256 * 1024)
    records = [r for path in segment_files([out]) for r in read_records(path)]
    return out, manifest, records


def test_counts_match_the_manifest(trace):
    _, manifest, records = trace
    cmds = [(r, rmq.decode_frame(r[4])) for r in records]
    requests = collections.Counter(REQUEST_NAMES.get(c.code, f"CODE_{c.code}")
                                   for r, c in cmds if r[3] == IN)
    answers = collections.Counter(RESPONSE_NAMES.get(c.code, f"CODE_{c.code}")
                                  for r, c in cmds if r[3] == OUT)
    assert requests == manifest["requests"] and answers == manifest["answers"]
    assert manifest["frames"] == len(records)
    assert set(manifest["requests"]) == {"REGISTER_BROKER", "GET_ROUTEINFO_BY_TOPIC",
                                         "PUT_KV_CONFIG", "GET_KV_CONFIG", "DELETE_KV_CONFIG",
                                         "CODE_9999"}
    assert {"TOPIC_NOT_EXIST", "QUERY_NOT_FOUND", "REQUEST_CODE_NOT_SUPPORTED"} <= set(answers)
    routes = collections.Counter(c.ext_fields["topic"] for r, c in cmds
                                 if r[3] == IN and c.code == 105)
    assert routes == manifest["routes"]


def test_every_request_has_its_answer_on_its_connection(trace):
    _, _, records = trace
    requests, answers = {}, {}
    for t, conn, peer, direction, frame in records:
        cmd = rmq.decode_frame(frame)
        assert cmd.is_response == (direction == OUT)
        (answers if direction == OUT else requests)[(conn, cmd.opaque)] = (t, cmd)
    assert requests.keys() == answers.keys()
    for key, (t, _) in requests.items():
        assert 40_000 <= answers[key][0] - t <= 600_000


def test_frames_are_protocol_exact(trace):
    _, _, records = trace
    registrations = 0
    for r in records:
        cmd = rmq.decode_frame(r[4])
        assert rmq.encode_frame(cmd) == r[4]
        if cmd.code == 103 and not cmd.is_response:
            registrations += 1
            assert int(cmd.ext_fields["bodyCrc32"]) == java_body_crc32(cmd.body)
            body = bodies.decode_register_broker_body(cmd.body)
            assert len(body["topicConfigSerializeWrapper"]["topicConfigTable"]) == 40
    assert registrations == 20          # 3 brokers, 4 minutes, one dead at 2: 8 + 8 + 4


def test_brokers_register_every_30_s_and_one_dies_halfway(trace):
    _, manifest, records = trace
    times = collections.defaultdict(list)
    for t, conn, peer, direction, frame in records:
        cmd = rmq.decode_frame(frame)
        if cmd.code == 103 and direction == IN:
            times[cmd.ext_fields["brokerName"]].append(t)
            dv = bodies.decode_register_broker_body(cmd.body)["topicConfigSerializeWrapper"]
            assert dv["dataVersion"]["counter"] == 10 ** 15 + len(times[cmd.ext_fields["brokerName"]])
    assert manifest["dead"] == ["broker-0"]
    assert len(times["broker-1"]) == len(times["broker-2"]) == 8      # 4 minutes
    assert len(times["broker-0"]) == 4                                 # died at 2 minutes
    for ts in times.values():
        assert {b - a for a, b in zip(ts, ts[1:])} == {30_000_000_000}
    assert min(r[0] for r in records) >= START * 1e9


def test_same_seed_same_trace(tmp_path, trace):
    _, manifest, records = trace
    again = synthesize(tmp_path, brokers=3, clients=6, minutes=4, topics=40, dead=1, seed=7,
                       start=START, segment_bytes=256 * 1024)
    assert [r for p in segment_files([tmp_path]) for r in read_records(p)] == records
    assert again["requests"] == manifest["requests"]


def test_cli(tmp_path, capsys):
    assert cli_main(["trace", "synth", "--out", str(tmp_path), "--brokers", "2", "--clients",
                     "1", "--minutes", "1", "--topics", "5", "--dead", "0"]) == 0
    assert "frames" in capsys.readouterr().out
    m = json.loads((tmp_path / "synth.json").read_text())
    assert m["requests"]["REGISTER_BROKER"] == 4 and m["dead"] == []


@pytest.mark.parametrize("kw", [dict(brokers=0), dict(topics=1), dict(dead=5), dict(minutes=0)])
def test_bad_arguments(tmp_path, kw):
    with pytest.raises(ValueError, match="need brokers"):
        synthesize(tmp_path, **kw)
