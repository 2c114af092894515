"""Running it as a service (issue 16, item 5): ``rmq namesrv --log-file`` rolls its log
over by size as Java's namesrv.log does, keeps values that may be secrets out of it,
and the systemd unit and the Dockerfile in contrib/ start a NameServer this rmq runs."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import parts

from nameserver import Client, wait_for
from rmq.namesrv.config import loggable

ROOT = Path(__file__).resolve().parent.parent
CONTRIB = ROOT / "contrib"
_PKG_PARENT = str(Path(__import__("rmq").__file__).resolve().parent.parent)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def env():
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in (_PKG_PARENT, e.get("PYTHONPATH")) if p)
    return e


def rmq_cmd(*args):
    return [sys.executable, "-m", "rmq", *args]


def logs(path):
    return {p.name: p.read_text("utf-8") for p in sorted(path.parent.glob(path.name + "*"))}


def start(tmp_path, *args):
    log = tmp_path / "logs" / "namesrv.log"
    log.parent.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        rmq_cmd("namesrv", "--listen", "127.0.0.1:0", "--kv-config",
                str(tmp_path / "kvConfig.json"), "--log-file", str(log), *args),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env())
    assert wait_for(lambda: log.exists() and "listening on" in log.read_text("utf-8"), 20)
    address = re.search(r"listening on (127\.0\.0\.1:\d+)", log.read_text("utf-8")).group(1)
    return proc, log, address


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    return out, err


def test_the_log_file_rolls_over_by_size_and_keeps_the_newest(tmp_path):
    proc, log, address = start(tmp_path, "--log-max-bytes", "2048", "--log-backups", "2")
    try:
        with Client(address) as c:
            for i in range(100):
                assert c.request(100, {"namespace": "ns", "key": f"k{i:03}",
                                       "value": "v"}).code == 0
    finally:
        out, err = stop(proc)
    assert out == b"" and err == b""            # nothing on stderr: it all went to the file
    files = logs(log)
    assert sorted(files) == ["namesrv.log", "namesrv.log.1", "namesrv.log.2"]
    for name, text in files.items():
        assert len(text.encode()) <= 2048, name
    # the newest lines in the file, the older ones in .1 then .2; the oldest are gone
    assert "kv put ns/k099" in files["namesrv.log"] + files["namesrv.log.1"]
    assert "kv put ns/k000" not in "".join(files.values())
    assert "route cache: hits=" in files["namesrv.log"]       # logged at shutdown


def test_values_that_may_be_secrets_stay_out_of_the_log(tmp_path):
    conf = tmp_path / "namesrv.properties"
    # (TLS keys are never set remotely, and their password never shown: tests/test_tls)
    conf.write_text("tls.server.keyPassword=hunter2-first\nrocketmq.token=hunter2-zero\n")
    proc, log, address = start(tmp_path, "-c", str(conf))
    try:
        with Client(address) as c:
            body = b"rocketmq.token=hunter2-second\nclusterTest=true\n"
            assert c.request(318, body=body).code == 0
            assert wait_for(lambda: "config updated" in log.read_text("utf-8"))
            # a client still reads it back, as from Java's getNamesrvConfig
            assert b"hunter2-second" in c.request(319).body
    finally:
        stop(proc)
    text = "".join(logs(log).values())
    assert "rocketmq.token=****" in text and "clusterTest=true" in text
    assert "hunter2" not in text


@pytest.mark.parametrize("key,shown", [
    ("tls.server.keyPassword", "****"), ("aclSecretKey", "****"), ("rocketmq.token", "****"),
    ("tls.server.keyPath", "v"), ("listenPort", "v"), ("maxKvKeyBytes", "v")])
def test_which_keys_are_masked(key, shown):
    assert loggable(key, "v") == shown


def test_an_unwritable_log_file_is_refused_at_start(tmp_path):
    r = subprocess.run(rmq_cmd("namesrv", "--log-file", str(tmp_path / "no" / "dir" / "x.log")),
                       capture_output=True, text=True, env=env(), timeout=60)
    assert r.returncode == 2 and "cannot open the log file" in r.stderr


def _run_as(argv, tmp_path):
    """The service's command line, run by this interpreter with ``-p`` (print the
    effective configuration and exit) and its paths under tmp_path."""
    assert argv[:2] in (["/opt/rmq/bin/rmq", "namesrv"], ["rmq", "namesrv"]), argv
    args = [a.replace("/etc/rmq/", f"{tmp_path}/").replace("/var/lib/rmq/", f"{tmp_path}/")
            .replace("/var/log/rmq/", f"{tmp_path}/") for a in argv[2:]]
    (tmp_path / "namesrv.properties").write_text("listenPort=9877\n")
    return subprocess.run(rmq_cmd("namesrv", *args, "-p"), capture_output=True, text=True,
                          env=env(), timeout=60)


def test_the_systemd_unit_starts_this_name_server(tmp_path):
    unit = (CONTRIB / "rmq-namesrv.service").read_text()
    sections = re.findall(r"^\[(\w+)\]", unit, re.M)
    assert sections == ["Unit", "Service", "Install"]
    exec_start = re.search(r"^ExecStart=(.+)$", unit, re.M).group(1)
    assert re.search(r"^KillSignal=SIGTERM$", unit, re.M)
    r = _run_as(shlex.split(exec_start), tmp_path)
    assert r.returncode == 0, r.stderr
    assert "listenPort=9877" in r.stdout.splitlines()      # it read the properties file


@pytest.mark.requires("systemd-analyze")
def test_systemd_finds_nothing_wrong_in_the_unit(tmp_path):
    """systemd-analyze verify, with ExecStart pointing at this interpreter (it checks
    that the program exists)."""
    unit = (CONTRIB / "rmq-namesrv.service").read_text()
    copy = tmp_path / "rmq-namesrv.service"
    copy.write_text(unit.replace("ExecStart=/opt/rmq/bin/rmq",
                                 f"ExecStart={os.path.realpath(sys.executable)} -m rmq"))
    r = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r.stderr


def test_the_dockerfile_starts_this_name_server(tmp_path):
    text = (CONTRIB / "Dockerfile").read_text()
    cmd = json.loads(re.search(r"^CMD (\[.+\])$", text, re.M).group(1))
    assert re.search(r"^EXPOSE 9876$", text, re.M) and re.search(r"^STOPSIGNAL SIGTERM$", text, re.M)
    r = _run_as(cmd, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "listenPort=9876" in r.stdout.splitlines()


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_tls_or_http_client_on_the_plain_port_is_named_in_the_log(tmp_path, caplog, loop):
    """Not "a frame of 369295621 bytes": the first bytes of a TLS handshake or of an HTTP
    request name what came, and the connection is closed; remoting clients go on."""
    import logging
    import socket
    import ssl

    from nameserver import running_namesrv

    if loop == "uvloop":
        parts.require("uvloop")
    with caplog.at_level(logging.WARNING, logger="rmq.namesrv.server"), \
            running_namesrv(tmp_path, loop=loop) as app:
        host, port = app.address.split(":")
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        with socket.create_connection((host, int(port)), timeout=5) as raw:
            with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
                ctx.wrap_socket(raw, server_hostname=host).close()
        with socket.create_connection((host, int(port)), timeout=5) as raw:
            raw.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert raw.recv(100) == b""                  # closed, nothing answered
        with Client(app.address) as c:
            assert c.request(105, {"topic": "T"}).code == 17
        assert wait_for(lambda: "a TLS handshake on the RocketMQ port" in caplog.text)
        assert "an HTTP request on the RocketMQ port" in caplog.text
        assert "bytes" not in caplog.text
