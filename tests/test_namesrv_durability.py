"""KV durability of the real server process (``python -m rmq namesrv``): every
PUT_KV_CONFIG it acknowledged survives a kill -9 at any moment (kvConfig.json and its
journals always load after one); while the table is at most maxKvRewriteTableBytes,
kvConfig.json alone, read as Java reads it, holds every acknowledged change, kill -9 or
not; SIGTERM stops it cleanly (exit code 0, "stopped" logged) and leaves kvConfig.json
alone, in Java's format."""

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import rmq
from nameserver import Client
from rmq.namesrv.kvconfig import read_table

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

# The package under test, whether it runs from src/ (PYTHONPATH) or installed.
_PKG_PARENT = str(Path(rmq.__file__).resolve().parent.parent)


class NamesrvProcess:
    """``python -m rmq namesrv`` on 127.0.0.1, port chosen by the OS (read from its log)."""

    def __init__(self, kv_path, log_path, args=()):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_PKG_PARENT, env.get("PYTHONPATH")) if p)
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.start_offset = self.log.tell()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rmq", "namesrv", "--listen", "127.0.0.1:0",
             "--kv-config", str(kv_path), *args],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.address = self._wait_listening()

    def _wait_listening(self, limit=20):
        end = time.monotonic() + limit
        while time.monotonic() < end:
            text = self.log_text()
            m = re.search(r"listening on (127\.0\.0\.1:\d+)", text)
            if m:
                return m.group(1)
            if self.proc.poll() is not None:
                raise AssertionError(f"rmq namesrv exited {self.proc.returncode}:\n{text}")
            time.sleep(0.02)
        self.proc.kill()
        raise AssertionError(f"rmq namesrv did not start:\n{self.log_text()}")

    def log_text(self):
        with open(self.log_path, "rb") as f:
            f.seek(self.start_offset)
            return f.read().decode("utf-8", "replace")

    def kill(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(10)
        finally:
            self.log.close()


@pytest.fixture
def procs():
    started = []
    yield started
    for p in started:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait(10)
        p.log.close()


def until_killed(p, delay, step):
    """``step(client, i)`` for i = 0, 1, ... on one connection to ``p`` until it returns
    False (the connection broke), ``p`` killed (SIGKILL) ``delay`` seconds after the
    first step returned (the clock starts there: on a loaded machine the first fsync
    alone may take longer). Returns how many steps returned True."""
    killer = threading.Timer(delay, p.proc.kill)
    i = 0
    try:
        with Client(p.address) as c:
            while step(c, i):
                i += 1
                if i == 1:
                    killer.start()
    finally:
        killer.cancel()
        p.kill()
    assert p.proc.returncode == -signal.SIGKILL
    return i


def test_acknowledged_puts_survive_kill_9(tmp_path, procs):
    kv_path = tmp_path / "kvConfig.json"
    log_path = tmp_path / "namesrv.log"
    rng = random.Random(0x5EED)
    acknowledged = {}
    in_flight = set()       # the put each kill interrupted: on disk or not, either is fine
    for round_no in range(4):
        p = NamesrvProcess(kv_path, log_path)
        procs.append(p)
        # every acknowledged put so far is there after the restart
        with Client(p.address) as c:
            for key, value in acknowledged.items():
                r = c.request(101, {"namespace": "dur", "key": key})
                assert (r.code, r.ext_fields) == (0, {"value": value}), (round_no, key)
        # stream puts until killed at a random moment

        def put(c, i):
            key, value = f"r{round_no}-k{i}", f"value {i} ü " + "x" * rng.randrange(64)
            try:
                r = c.request(100, {"namespace": "dur", "key": key, "value": value})
            except OSError:
                return False
            assert r.code == 0, r
            acknowledged[key] = value
            return True

        i = until_killed(p, rng.uniform(0.05, 0.4), put)
        assert i > 0, "no put was acknowledged before the kill"
        in_flight.add(f"r{round_no}-k{i}")
        # kvConfig.json and its journals load, and hold every acknowledged put (and maybe
        # the ones in flight)
        table = read_table(kv_path)["dur"]
        missing = {k for k in acknowledged if table.get(k) != acknowledged[k]}
        assert not missing, sorted(missing)[:5]
        assert set(table) - set(acknowledged) <= in_flight
    # a last start: stale temporary files of killed writes are gone, the table is whole
    p = NamesrvProcess(kv_path, log_path)
    procs.append(p)
    with Client(p.address) as c:
        r = c.request(219, {"namespace": "dur"})
        table = json.loads(r.body)["table"]
        assert all(table.get(k) == v for k, v in acknowledged.items())
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert p.kill(signal.SIGTERM) == 0
    # a clean stop leaves kvConfig.json alone, as Java writes it, holding everything
    assert sorted(os.listdir(tmp_path)) == ["kvConfig.json", "namesrv.log"]
    table = json.loads(kv_path.read_text("utf-8"))["configTable"]["dur"]
    assert all(table.get(k) == v for k, v in acknowledged.items())


def test_sigterm_clean_exit(tmp_path, procs):
    kv_path = tmp_path / "kvConfig.json"
    p = NamesrvProcess(kv_path, tmp_path / "namesrv.log")
    procs.append(p)
    with Client(p.address) as c:
        assert c.request(100, {"namespace": "n", "key": "k", "value": "v"}).code == 0
        # a connection still open at SIGTERM does not hold the shutdown up
        assert p.kill(signal.SIGTERM) == 0
    log = p.log_text()
    assert "stopped" in log, log
    assert "Traceback" not in log, log
    assert json.loads(kv_path.read_text("utf-8")) == {"configTable": {"n": {"k": "v"}}}


def test_sigterm_with_a_client_that_never_reads(tmp_path, procs):
    """A client whose answers cannot be delivered does not prevent the shutdown."""
    p = NamesrvProcess(tmp_path / "kvConfig.json", tmp_path / "namesrv.log")
    procs.append(p)
    host, port = p.address.rsplit(":", 1)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((host, int(port)))
    s.setblocking(False)
    req = rmq.encode_frame(rmq.RemotingCommand.request(319)) * 2000
    sent = 0
    end = time.monotonic() + 2
    while sent < len(req) and time.monotonic() < end:
        try:
            sent += s.send(req[sent:sent + 65536])
        except BlockingIOError:
            time.sleep(0.01)
    try:
        start = time.monotonic()
        assert p.kill(signal.SIGTERM) == 0
        assert time.monotonic() - start < 5
        assert "stopped" in p.log_text()
    finally:
        s.close()


# ---------------------------------------------------------------- kvConfig.json alone

PUT, GET, DELETE = 100, 101, 102


def java_table(path):
    """kvConfig.json read alone, as Java's KVConfigManager.load reads it (no journal):
    {"configTable":{ns:{k:v}}} parsed with plain json; a missing file is empty."""
    try:
        text = Path(path).read_text("utf-8")
    except FileNotFoundError:
        return {}
    return json.loads(text)["configTable"]


def table_bytes(table):
    return sum(len(ns.encode()) + sum(len(k.encode()) + len(v.encode()) for k, v in kv.items())
               for ns, kv in table.items())


def journal_names(directory):
    return sorted(n for n in os.listdir(directory) if ".journal." in n)


def change(c, model, op):
    """Send ``op`` (("put", key, value) or ("del", key)) in namespace "e2e"; on SUCCESS,
    apply it to ``model`` ({ns: {k: v}}). False when the connection is gone."""
    try:
        if op[0] == "put":
            r = c.request(PUT, {"namespace": "e2e", "key": op[1], "value": op[2]})
        else:
            r = c.request(DELETE, {"namespace": "e2e", "key": op[1]})
    except OSError:
        return False
    assert r.code == 0, r
    if op[0] == "put":
        model.setdefault("e2e", {})[op[1]] = op[2]
    elif "e2e" in model:
        model["e2e"].pop(op[1], None)
    return True


def applied(model, op):
    out = json.loads(json.dumps(model))
    if op[0] == "put":
        out.setdefault("e2e", {})[op[1]] = op[2]
    elif "e2e" in out:
        out["e2e"].pop(op[1], None)
    return out


def random_op(rng, model, i):
    keys = sorted(model.get("e2e", {}))
    if keys and rng.random() < 0.3:
        return ("del", rng.choice(keys))
    return ("put", f"k{rng.randrange(150)}", f"value {i} ü " + "v" * rng.randrange(40))


def test_below_the_threshold_kvconfig_json_alone_holds_every_acknowledged_change(
        tmp_path, procs):
    """Puts and deletes on a small table (below the default maxKvRewriteTableBytes):
    after each answer kvConfig.json alone holds exactly the acknowledged changes; after
    a kill -9 at a random moment too (and maybe the change in flight), with no journal
    and no replay."""
    kv_path = tmp_path / "kvConfig.json"
    log_path = tmp_path / "namesrv.log"
    rng = random.Random(0x7AB1E)
    model = {}
    for round_no in range(3):
        p = NamesrvProcess(kv_path, log_path)
        procs.append(p)
        with Client(p.address) as c:
            for key, value in model.get("e2e", {}).items():   # served after a restart
                r = c.request(GET, {"namespace": "e2e", "key": key})
                assert (r.code, r.ext_fields) == (0, {"value": value}), key
        pending = [None]                # the change in flight when killed, if any

        def step(c, i):
            pending[0] = random_op(rng, model, i)
            if not change(c, model, pending[0]):
                return False
            pending[0] = None
            if p.proc.poll() is None:   # killed meanwhile: checked below
                assert java_table(kv_path) == model, (round_no, i)
            return True

        i = until_killed(p, rng.uniform(0.1, 0.5), step)
        op = pending[0]
        assert i > 1, "no change was acknowledged before the kill"
        assert table_bytes(model) < 64 << 10      # below the default threshold
        candidates = [model] if op is None else [model, applied(model, op)]
        on_disk = java_table(kv_path)
        assert on_disk in candidates, "an acknowledged change is missing from kvConfig.json"
        assert journal_names(tmp_path) == []
        model = on_disk
    assert model.get("e2e"), "the table ended up empty: the test proved little"


def test_above_the_threshold_changes_are_journaled_and_below_again_the_file_is_current(
        tmp_path, procs):
    """maxKvRewriteTableBytes from namesrv.properties: above it, the changes are in the
    journal (kvConfig.json alone lags, kvConfig.json with its journals holds every one
    after a kill -9); deletes that take the table back below it make kvConfig.json alone
    current again, kill -9 or not."""
    kv_path = tmp_path / "kvConfig.json"
    log_path = tmp_path / "namesrv.log"
    props = tmp_path / "namesrv.properties"
    props.write_text("maxKvRewriteTableBytes=2048\n", "utf-8")
    model = {}

    p = NamesrvProcess(kv_path, log_path, args=("-c", str(props)))
    procs.append(p)
    crossed = False
    with Client(p.address) as c:
        for i in range(60):                        # about 60 bytes each: past 2048
            assert change(c, model, ("put", f"k{i:02d}", f"value {i} " + "w" * 48))
            if table_bytes(model) <= 2048:
                assert java_table(kv_path) == model
                assert journal_names(tmp_path) == []
            else:
                crossed = True
                assert journal_names(tmp_path) != []
                assert java_table(kv_path) != model       # the file lags: journaled
                assert read_table(kv_path) == model
    assert crossed
    assert p.kill() == -signal.SIGKILL
    assert read_table(kv_path) == model                   # the journal holds them
    assert java_table(kv_path) != model

    p = NamesrvProcess(kv_path, log_path, args=("-c", str(props)))
    procs.append(p)
    with Client(p.address) as c:
        for i in range(59, -1, -1):
            assert change(c, model, ("del", f"k{i:02d}"))
            if table_bytes(model) <= 2048:                # folded at that change
                assert java_table(kv_path) == model
                assert journal_names(tmp_path) == []
            if table_bytes(model) <= 1900:
                break
        assert change(c, model, ("put", "after", "below again"))
        assert table_bytes(model) <= 2048
        assert java_table(kv_path) == model
    assert p.kill() == -signal.SIGKILL
    assert java_table(kv_path) == model
    assert journal_names(tmp_path) == []
