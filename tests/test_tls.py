"""TLS on the NameServer's port (issue 16, item 2) over real TCP: every
``tls.server.mode`` with Python's ssl client and ``openssl s_client``, mutual TLS,
permissive mode's plain and TLS clients on one port, BrokerRegistrar and ``rmq admin
--tls`` against an enforcing server, ``tls.config.file``, and a stalled handshake.
The certificates are made by the real ``openssl`` command.

Every server test runs on both network layers (``each_server``; the ``loop`` tests on
asyncio, uvloop and the engine): asyncio's TLS is rmq.namesrv.tlsconn over Python's
ssl, the I/O engine's is OpenSSL on its threads (src/_core/tls.c, issue 30)."""

import asyncio
import logging
import re
import socket
import ssl
import subprocess

import pytest

import rmq
from nameserver import Client, connection_state, running_namesrv, wait_for
from rmq import bodies
from rmq.client import RemotingClient
from rmq.errors import RemotingConnectError
from rmq.namesrv.config import ConfigError, NamesrvConfig, is_tls_key
from rmq.namesrv.tlsconn import ServerTls
from rmq.registrar import BrokerRegistrar
from rmq.tls import client_context
from test_operating import env, rmq_cmd

pytestmark = pytest.mark.requires("openssl")

TOPIC = "TlsTopic"
BROKER = dict(cluster="DefaultCluster", broker_name="broker-tls",
              broker_addr="10.0.0.9:10911", ha_server_addr="10.0.0.9:10912")
#: The loggers of the servers and of their TLS connections.
SERVER_LOGS = ("rmq.namesrv.server", "rmq.namesrv.tlsconn", "rmq.namesrv.dataplane")
#: The tests that start servers run on both network layers.
both = pytest.mark.usefixtures("each_server")


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1 (subjectAltName IP), a client
    certificate, both signed by the CA, a second CA that signed nothing here, and the
    server's key encrypted with a password."""
    d = tmp_path_factory.mktemp("certs")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", *ec, "-keyout", f"{ca}.key", "-out", f"{ca}.crt",
                 "-days", "2", "-subj", f"/CN=rmq test {ca}", cwd=d)
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
                      ("client", "extendedKeyUsage=clientAuth")):
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN=rmq test {name}", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.crt", "-days", "2",
                 "-extfile", f"{name}.ext", cwd=d)
    _openssl("pkey", "-in", "server.key", "-aes256", "-passout", "pass:s3cret-pw",
             "-out", "server-enc.key", cwd=d)
    return d


def server_conf(certs, mode, **more):
    conf = {"tls.server.mode": mode, "tls.server.certPath": str(certs / "server.crt"),
            "tls.server.keyPath": str(certs / "server.key")}
    conf.update(more)
    return conf


def tls_server(tmp_path, certs, mode, loop=None, **more):
    return running_namesrv(tmp_path, loop=loop, **server_conf(certs, mode, **more))


def client_ctx(certs, with_cert=False, ca="ca.crt"):
    props = {"tls.client.trustCertPath": str(certs / ca)}
    if with_cert:
        props.update({"tls.client.certPath": str(certs / "client.crt"),
                      "tls.client.keyPath": str(certs / "client.key")})
    return client_context(props)


class TlsClient(Client):
    """tests/nameserver.py's blocking Client over Python's ssl."""

    def __init__(self, address, context, timeout=10):
        super().__init__(address, timeout)
        self.sock = context.wrap_socket(self.sock, server_hostname=address.rsplit(":", 1)[0])


def route_query():
    return rmq.RemotingCommand.request(105, {"topic": TOPIC})


def assert_route(resp):
    assert resp.code == 0, (resp.code, resp.remark)
    route = bodies.decode_topic_route_data(resp.body)
    assert [b["brokerName"] for b in route["brokerDatas"]] == [BROKER["broker_name"]]


def with_broker(app, check, ssl_ctx=None):
    """Register a broker with BrokerRegistrar (over TLS with ``ssl_ctx``), keep it
    connected while ``check()`` runs (in a thread), then stop it."""
    async def main():
        r = BrokerRegistrar(app.address, topics=[bodies.topic_config(TOPIC, 4, 4),
                                                 bodies.topic_config("Other", 4, 4)],
                            ssl=ssl_ctx, **BROKER)
        try:
            [res] = await r.start()
            assert res.namesrv == app.address
            return await asyncio.to_thread(check)
        finally:
            await r.stop(unregister=False)
    return asyncio.run(main())


def tls_refused(address, ctx):
    """True when a TLS client's handshake, or its first request, fails."""
    try:
        with TlsClient(address, ctx, timeout=5) as c:
            c.request(105, {"topic": TOPIC})
    except (ssl.SSLError, ConnectionError, OSError):
        return True
    return False


def logged(caplog, text):
    return wait_for(lambda: any(text in r.getMessage() for r in caplog.records
                                if r.name in SERVER_LOGS and r.levelno == logging.WARNING), 5)


# ---------------------------------------------------------------- the three modes

@both
def test_disabled_serves_plain_and_closes_a_tls_client_with_a_clear_line(tmp_path, certs, caplog):
    caplog.set_level(logging.INFO)
    with tls_server(tmp_path, certs, "disabled") as app:
        assert app.tls is None           # the port is what it always was
        with Client(app.address) as c:
            assert c.request(105, {"topic": TOPIC}).code == 17      # TOPIC_NOT_EXIST
        assert tls_refused(app.address, client_ctx(certs))
        assert logged(caplog, "a TLS handshake on the RocketMQ port")
    # not read as remoting: no "frame too large", and no frame length that is a TLS
    # record's first four bytes (0x1603xxxx: 369,295,360 to 369,360,895)
    for r in caplog.records:
        if r.name in SERVER_LOGS:
            assert "too large" not in r.getMessage(), r.getMessage()
            assert not any(0x16030000 <= int(n) <= 0x1603FFFF
                           for n in re.findall(r"\d+", r.getMessage().replace(",", ""))), \
                r.getMessage()


def test_permissive_serves_plain_and_tls_clients_on_one_port(tmp_path, certs, loop):
    with tls_server(tmp_path, certs, "permissive", loop=loop) as app:
        def check():
            with Client(app.address) as plain, TlsClient(app.address, client_ctx(certs)) as tls:
                for _ in range(3):
                    assert_route(plain.call(route_query()))
                    assert_route(tls.call(route_query()))
                assert tls.sock.version() in ("TLSv1.2", "TLSv1.3")
                # pipelined: many requests in one TLS read, answered in order
                cmds = [route_query() for _ in range(50)]
                tls.send_raw(b"".join(rmq.encode_frame(c) for c in cmds))
                for cmd in cmds:
                    resp = tls.receive()
                    assert resp.opaque == cmd.opaque
                    assert_route(resp)
        with_broker(app, check)


def test_enforcing_serves_tls_and_refuses_plain_with_a_clear_line(tmp_path, certs, loop, caplog):
    in_c = loop == "engine" and rmq.IMPLEMENTATION == "compiled"
    with tls_server(tmp_path, certs, "enforcing", loop=loop) as app:
        if in_c:        # served by the I/O threads, not handed to asyncio
            from rmq.namesrv.dataplane import EngineServerApp
            assert type(app) is EngineServerApp

        def check():
            with TlsClient(app.address, client_ctx(certs)) as tls:
                served = app.network_counts()["served"]
                for _ in range(5):
                    assert_route(tls.call(route_query()))
                if in_c:    # the five answered in C, on a TLS connection of the engine
                    assert app.network_counts()["served"] == served + 5
                    assert wait_for(lambda: len(app.connections) == 2, 5)  # (and the broker's)
                    assert [app.engine.connection_state(conn.id)["tls"]
                            for conn in list(app.connections)] == [True, True]
            with Client(app.address) as plain:
                plain.send(route_query())
                assert plain.closed_by_peer()
        with_broker(app, check, client_ctx(certs))
        assert logged(caplog, "plain remoting on a TLS-only port (tls.server.mode=enforcing)")
        assert app.counters.refused["tls_required"] == 1        # rmq_refused_total


def s_client(address, data, *extra):
    """``data`` piped through ``openssl s_client``; its stdout (the answers)."""
    r = subprocess.run(["openssl", "s_client", "-connect", address, "-quiet",
                        "-verify_return_error", *extra],
                       input=data, capture_output=True, timeout=30)
    return r.stdout, r.stderr.decode("utf-8", "replace")


def s_client_answers(address, cmds, *extra):
    # -quiet implies -ign_eof; -no_ign_eof: s_client ends when its stdin does, which
    # is after the answers came
    proc = subprocess.Popen(["openssl", "s_client", "-connect", address, "-quiet",
                             "-no_ign_eof", "-verify_return_error", *extra],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdin.write(b"".join(rmq.encode_frame(c) for c in cmds))
    proc.stdin.flush()
    decoder = rmq.FrameDecoder()
    got = []
    sock_out = proc.stdout
    try:
        while len(got) < len(cmds):
            chunk = sock_out.read1(65536)
            if not chunk:
                break
            got.extend(decoder.feed(chunk))
    finally:
        proc.stdin.close()
        proc.wait(30)
    return got, proc.stderr.read().decode("utf-8", "replace")


@pytest.mark.parametrize("mode", ["permissive", "enforcing"])
@both
def test_openssl_s_client_gets_route_answers(tmp_path, certs, mode):
    with tls_server(tmp_path, certs, mode) as app:
        def check():
            cmds = [route_query() for _ in range(3)]
            got, err = s_client_answers(app.address, cmds, "-CAfile", str(certs / "ca.crt"),
                                        "-verify_ip", "127.0.0.1")
            assert [r.opaque for r in got] == [c.opaque for c in cmds], err
            for resp in got:
                assert_route(resp)
        with_broker(app, check, client_ctx(certs))


@both
def test_openssl_s_client_on_a_disabled_port_fails_cleanly(tmp_path, certs, caplog):
    with tls_server(tmp_path, certs, "disabled") as app:
        out, err = s_client(app.address, rmq.encode_frame(route_query()),
                            "-CAfile", str(certs / "ca.crt"))
        assert out == b""
        assert logged(caplog, "a TLS handshake on the RocketMQ port")


# ---------------------------------------------------------------- mutual TLS

@both
def test_mutual_tls_requires_a_client_certificate_signed_by_the_trusted_ca(
        tmp_path, certs, caplog):
    more = {"tls.server.need.client.auth": "require",
            "tls.server.trustCertPath": str(certs / "ca.crt")}
    with tls_server(tmp_path, certs, "enforcing", **more) as app:
        def check():
            with TlsClient(app.address, client_ctx(certs, with_cert=True)) as c:
                assert_route(c.call(route_query()))
            assert tls_refused(app.address, client_ctx(certs))
            got, err = s_client_answers(app.address, [route_query()],
                                        "-CAfile", str(certs / "ca.crt"),
                                        "-cert", str(certs / "client.crt"),
                                        "-key", str(certs / "client.key"))
            assert len(got) == 1, err
            assert_route(got[0])
        with_broker(app, check, client_ctx(certs, with_cert=True))
        assert logged(caplog, "TLS handshake failed")
        assert app.counters.refused["tls_handshake"] == 1


@both
def test_optional_client_auth_serves_clients_without_a_certificate(tmp_path, certs):
    more = {"tls.server.need.client.auth": "optional",
            "tls.server.trustCertPath": str(certs / "ca.crt")}
    with tls_server(tmp_path, certs, "enforcing", **more) as app:
        with TlsClient(app.address, client_ctx(certs)) as c:
            assert c.call(route_query()).code == 17
        with TlsClient(app.address, client_ctx(certs, with_cert=True)) as c:
            assert c.call(route_query()).code == 17


@both
def test_a_client_verifies_the_server_and_refuses_an_unknown_ca(tmp_path, certs):
    with tls_server(tmp_path, certs, "enforcing") as app:
        async def main():
            async with RemotingClient(ssl=client_ctx(certs, ca="other-ca.crt")) as c:
                with pytest.raises(RemotingConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                    await c.invoke(app.address, route_query())
            # Java's client default (tls.client.authServer=false): no verification
            async with RemotingClient(ssl=client_context({"tls.client.authServer": "false"})) as c:
                return (await c.invoke(app.address, route_query())).code
        assert asyncio.run(main()) == 17


# ---------------------------------------------------------------- clients

@both
def test_broker_registrar_and_rmq_admin_over_tls(tmp_path, certs):
    conf = tmp_path / "tls.properties"
    conf.write_text(f"tls.client.trustCertPath={certs / 'ca.crt'}\n")
    with tls_server(tmp_path, certs, "enforcing") as app:
        def admin(*args):
            return subprocess.run(rmq_cmd("admin", *args, "-n", app.address, "--timeout", "5"),
                                  capture_output=True, text=True, env=env(), timeout=60)

        def check():
            r = admin("clusterList", "--tls", "--tls-config", str(conf))
            assert r.returncode == 0, r.stderr
            assert "broker-tls" in r.stdout and "10.0.0.9:10911" in r.stdout
            r = admin("topicRoute", "-t", TOPIC, "--tls-config", str(conf))
            assert r.returncode == 0 and "broker-tls" in r.stdout, r.stderr
            r = admin("topicList", "--tls")         # the system's CAs: not ours
            assert r.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in r.stderr
            r = admin("topicList")                  # plain on an enforcing port
            assert r.returncode == 1
            r = admin("topicList", "--tls-config", str(tmp_path / "none.properties"))
            assert r.returncode == 2 and "none.properties: no such file" in r.stderr
        with_broker(app, check, client_ctx(certs))


@both
def test_signed_admin_operations_over_tls(tmp_path, certs):
    # items 2 and 3 together: rmq admin with TLS and an admin account's keys
    acl = tmp_path / "plain_acl.yml"
    acl.write_text("accounts:\n  - accessKey: admin-key\n    secretKey: admin-secret\n"
                   "    admin: true\n")
    conf = tmp_path / "tls.properties"
    conf.write_text(f"tls.client.trustCertPath={certs / 'ca.crt'}\n")
    with tls_server(tmp_path, certs, "enforcing", aclEnable=True,
                    aclFilePath=str(acl)) as app:
        def admin(*args):
            return subprocess.run(rmq_cmd("admin", *args, "-n", app.address, "--timeout", "5",
                                          "--tls-config", str(conf)),
                                  capture_output=True, text=True, env=env(), timeout=60)
        put = ("updateKvConfig", "-s", "ns", "-k", "k", "-v", "v")
        r = admin(*put)                                   # TLS, unsigned: refused
        assert r.returncode == 1 and "16" in r.stdout + r.stderr
        assert app.processor.kv.get("ns", "k") is None
        r = admin(*put, "--accessKey", "admin-key", "--secretKey", "admin-secret")
        assert r.returncode == 0, r.stderr
        assert app.processor.kv.get("ns", "k") == "v"


# ---------------------------------------------------------------- configuration

@both
def test_tls_config_file_indirection(tmp_path, certs, caplog):
    tls_file = tmp_path / "tls.properties"
    tls_file.write_text(f"tls.server.certPath={certs / 'server.crt'}\n"
                        f"tls.server.keyPath={certs / 'server-enc.key'}\n"
                        "tls.server.keyPassword=s3cret-pw\n"
                        "tls.server.mode=disabled\n")          # not read there, as Java
    with running_namesrv(tmp_path, **{"tls.server.mode": "enforcing",
                                      "tls.server.certPath": "/nonexistent.crt",
                                      "tls.config.file": str(tls_file)}) as app:
        assert app.tls.mode == "enforcing" and app.tls.context is not None
        with TlsClient(app.address, client_ctx(certs)) as c:
            assert c.call(route_query()).code == 17
    assert any("tls.server.mode is ignored there" in r.getMessage() for r in caplog.records)
    assert "s3cret-pw" not in caplog.text


@both
def test_a_missing_tls_config_file_is_skipped_as_in_java(tmp_path, certs):
    with tls_server(tmp_path, certs, "enforcing",
                    **{"tls.config.file": str(tmp_path / "none.properties")}) as app:
        assert app.tls.context is not None


@pytest.mark.parametrize("conf,key", [
    ({"tls.server.mode": "strict"}, "tls.server.mode"),      # Java: permissive
    ({"tls.server.mode": "enforcing"}, "tls.server.mode"),
    ({"tls.server.need.client.auth": "always"}, "tls.server.need.client.auth"),
    ({"tls.server.need.client.auth": "require", "tls.server.certPath": "SERVER_CRT",
      "tls.server.keyPath": "SERVER_KEY"}, "tls.server.need.client.auth"),
    ({"tls.server.certPath": "/nonexistent.crt", "tls.server.keyPath": "/nonexistent.key"},
     "tls.server.certPath"),
    ({"tls.server.certPath": "SERVER_CRT", "tls.server.keyPath": "SERVER_ENC_KEY",
      "tls.server.keyPassword": "wrong-pw"}, "tls.server.certPath"),
])
def test_wrong_tls_settings_are_refused_at_start_naming_the_key(conf, key, certs, tmp_path):
    paths = {"SERVER_CRT": certs / "server.crt", "SERVER_KEY": certs / "server.key",
             "SERVER_ENC_KEY": certs / "server-enc.key"}
    conf = {k: str(paths.get(v, v)) for k, v in conf.items()}
    conf["tls.config.file"] = ""
    with pytest.raises(ConfigError) as info:
        ServerTls.from_config(NamesrvConfig(**conf))
    assert info.value.key == key and key in str(info.value)
    assert "wrong-pw" not in str(info.value)
    # rmq namesrv: the same message, exit 2, before listening
    props = tmp_path / "namesrv.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
    r = subprocess.run(rmq_cmd("namesrv", "-c", str(props), "--listen", "127.0.0.1:0"),
                       capture_output=True, text=True, env=env(), timeout=60)
    assert r.returncode == 2 and key in r.stderr and "wrong-pw" not in r.stderr


@both
def test_permissive_without_a_certificate_is_plain_only(tmp_path, certs, caplog):
    with running_namesrv(tmp_path) as app:          # the defaults: `make run`
        assert app.config.tlsMode == "permissive" and app.tls is None
        with Client(app.address) as c:
            assert c.request(105, {"topic": TOPIC}).code == 17
        assert tls_refused(app.address, client_ctx(certs))
        assert logged(caplog, "a TLS handshake on the RocketMQ port")


@both
def test_tls_keys_cannot_be_changed_remotely(tmp_path, certs):
    with tls_server(tmp_path, certs, "enforcing") as app:
        before = app.config.to_properties_text()
        with TlsClient(app.address, client_ctx(certs)) as c:
            for body in (b"tls.server.mode=disabled\n", b"tls.server.need.client.auth=none\n",
                         b"tls.server.keyPassword=x\n", b"tls.config.file=/tmp/x\n",
                         b"orderMessageEnable=true\ntls.server.trustCertPath=/tmp/x\n"):
                resp = c.request(318, body=body)
                assert resp.code == 16, body            # NO_PERMISSION
            assert app.config.to_properties_text() == before
            got = c.request(319).body.decode()
        assert "tls.server.mode=enforcing" in got
        assert "tls.server.keyPassword" not in got          # never shown
    assert all(is_tls_key(k) for k in ("tls.server.mode", "TLS.enable", " tls.x"))


# ---------------------------------------------------------------- bounds

@both
def test_a_stalled_handshake_does_not_stall_others_and_is_closed_when_idle(
        tmp_path, certs, caplog):
    caplog.set_level(logging.INFO)
    with tls_server(tmp_path, certs, "permissive", serverChannelMaxIdleTimeSeconds=1) as app:
        stalled = socket.create_connection(("127.0.0.1", app.port))
        stalled.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a ClientHello's start
        silent = socket.create_connection(("127.0.0.1", app.port))  # sends nothing at all
        with TlsClient(app.address, client_ctx(certs)) as c, Client(app.address) as plain:
            for _ in range(3):
                assert c.call(route_query()).code == 17
                assert plain.call(route_query()).code == 17
        for sock in (stalled, silent):
            sock.settimeout(10)
            assert sock.recv(100) == b""        # closed by the idle check
            sock.close()
    assert any("idle connection" in r.getMessage() for r in caplog.records)


@both
def test_garbage_after_the_tls_record_byte_is_one_clean_failure(tmp_path, certs, caplog):
    with tls_server(tmp_path, certs, "permissive") as app:
        with socket.create_connection(("127.0.0.1", app.port)) as s:
            s.sendall(b"\x16\x03\x01\x00\x05hello" + bytes(range(256)) * 64)
            s.settimeout(10)
            try:
                while s.recv(65536):
                    pass
            except ConnectionResetError:
                pass
        assert logged(caplog, "TLS handshake failed")
        with TlsClient(app.address, client_ctx(certs)) as c:     # the server goes on
            assert c.call(route_query()).code == 17


@both
def test_a_trace_records_the_plaintext_of_a_tls_connection(tmp_path, certs):
    from rmq.trace.segments import IN, OUT, read_records, segment_files, TraceRecorder
    rec = TraceRecorder(tmp_path / "trace")
    with running_namesrv(tmp_path, trace=rec, **server_conf(certs, "permissive")) as app:
        with TlsClient(app.address, client_ctx(certs)) as c:
            cmd = route_query()
            assert c.call(cmd).code == 17
        wait_for(lambda: not app.connections, 5)
    rec.close()
    records = [r for path in segment_files([tmp_path / "trace"]) for r in read_records(path)]
    assert [r[3] for r in records] == [IN, OUT]
    assert records[0][-1] == rmq.encode_frame(cmd)
    assert rmq.decode_frame(records[1][-1]).opaque == cmd.opaque


@pytest.mark.parametrize("hello", [
    b"\x16\x03\x01\xff\xff" + bytes(0xffff),                      # a record past 16 KiB + 2 KiB
    b"\x16\x03\x01\x40\x00\x01\xff\xff\xff" + bytes(0x4000 - 4),  # a 16 MiB ClientHello
], ids=["record", "message"])
@both
def test_an_oversized_client_hello_is_refused_by_openssl_s_own_limits(
        tmp_path, certs, caplog, hello):
    with tls_server(tmp_path, certs, "permissive") as app:
        with socket.create_connection(("127.0.0.1", app.port)) as s:
            s.settimeout(10)
            try:
                s.sendall(hello)
                while s.recv(65536):
                    pass
            except (ConnectionResetError, BrokenPipeError):
                pass
        assert logged(caplog, "TLS handshake failed")
        reasons = [r.getMessage() for r in caplog.records if "TLS handshake failed" in
                   r.getMessage()]
        # OpenSSL's rewritten record layer (3.6 among others) names its own refusal of a
        # record too long RECORD_LAYER_FAILURE, the specific reason deeper in its queue
        assert any(w in reasons[0] for w in ("TOO_LONG", "OVERFLOW", "EXCESSIVE",
                                             "RECORD_LAYER_FAILURE")), reasons


@both
def test_a_tls_client_that_stops_reading_stops_being_read(tmp_path, certs):
    """Flow control through TLS: the answers back up (ciphertext in the socket's
    transport; plaintext in the engine's buffer), the connection stops reading, and
    every answer comes once the client reads."""
    with tls_server(tmp_path, certs, "permissive", maxOutputBufferBytes=65536,
                    serverSocketSndBufSize=8192) as app:
        with TlsClient(app.address, client_ctx(certs)) as c:
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)   # no autotuning
            cmds = [route_query() for _ in range(3000)]
            c.send_raw(b"".join(rmq.encode_frame(cmd) for cmd in cmds))
            assert wait_for(lambda: app.connections, 5)     # (the engine's open event)
            [conn] = list(app.connections)
            assert wait_for(lambda: connection_state(app, conn)["paused"], 10)
            assert connection_state(app, conn)["queued_output"] < 2 * 65536 + (1 << 20)
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            for cmd in cmds:
                resp = c.receive()
                assert (resp.opaque, resp.code) == (cmd.opaque, 17)
            assert wait_for(lambda: not connection_state(app, conn)["paused"])


def test_mode_names_are_read_case_aside(certs):
    """Java compares exactly and would take ENFORCING for permissive: rmq enforces."""
    conf = server_conf(certs, "ENFORCING", **{"tls.server.need.client.auth": " None ",
                                              "tls.config.file": ""})
    tls = ServerTls.from_config(NamesrvConfig(**conf))
    assert (tls.mode, tls.settings.client_auth) == ("enforcing", "none")
    assert tls.describe() == "tls.server.mode=enforcing: TLS only, client certificates none"


@both
def test_a_forged_record_after_the_handshake_closes_that_connection_only(
        tmp_path, certs, caplog):
    import os
    with tls_server(tmp_path, certs, "permissive") as app:
        with TlsClient(app.address, client_ctx(certs)) as c, \
                TlsClient(app.address, client_ctx(certs)) as other:
            assert c.call(route_query()).code == 17
            # an application-data record that no key encrypted, under the TLS layer
            with socket.socket(fileno=os.dup(c.sock.fileno())) as raw:
                raw.sendall(b"\x17\x03\x03\x00\x20" + bytes(range(32)))
            with pytest.raises(ssl.SSLError, match="BAD_RECORD_MAC"):   # the server's alert
                c.closed_by_peer()
            assert other.call(route_query()).code == 17
        assert logged(caplog, "TLS error")
        assert app.counters.refused["tls_handshake"] == 1


def test_tls_is_served_by_the_engine_s_threads(tmp_path, certs):
    """serverEngine=c with TLS: the I/O threads serve TLS and plain connections of
    one port, route queries answered in C (counted by the engine) on both."""
    if rmq.IMPLEMENTATION != "compiled":
        pytest.skip("the pure-Python reference has no I/O engine (asyncio serves TLS)")
    from rmq.namesrv.dataplane import EngineServerApp
    with tls_server(tmp_path, certs, "permissive", loop="engine") as app:
        assert type(app) is EngineServerApp
        def check():
            with TlsClient(app.address, client_ctx(certs)) as tls, Client(app.address) as plain:
                for _ in range(10):
                    assert_route(tls.call(route_query()))
                    assert_route(plain.call(route_query()))
                # (their "open" events reach Python on their own time)
                assert wait_for(lambda: len(app.connections) == 3, 5)   # and the broker's
                tls_flags = [app.engine.connection_state(conn.id)["tls"]
                             for conn in list(app.connections)]
                assert sorted(tls_flags) == [False, False, True]
            return app.engine.counts()["served"]
        assert with_broker(app, check) >= 20


def test_tls_falls_back_to_asyncio_where_the_engine_cannot_serve_it(
        tmp_path, certs, caplog, monkeypatch):
    """Where OpenSSL of Python's ssl cannot be used from C (``_core.engine_tls`` says
    why), serverEngine=c with TLS is served by asyncio, and the log says why."""
    if rmq.IMPLEMENTATION != "compiled":
        pytest.skip("the pure-Python reference has no I/O engine")
    from rmq import _core
    from rmq.namesrv.server import NameServerApp
    # the reasons engine_tls gives for real contexts it refuses
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    assert _core.engine_tls(ctx) is None
    ctx.sni_callback = lambda *a: None
    assert "Python callbacks" in _core.engine_tls(ctx)
    assert "must be an ssl.SSLContext" in _core.engine_tls(object())
    monkeypatch.setattr(_core, "engine_tls", lambda context: "OpenSSL linked statically")
    with caplog.at_level(logging.WARNING, "rmq.namesrv.server"):
        with tls_server(tmp_path, certs, "permissive", serverEngine="c",
                        serverIoThreads=1) as app, Client(app.address) as plain:
            assert type(app) is NameServerApp
            assert plain.request(106).code == 0
            with TlsClient(app.address, client_ctx(certs)) as tls:
                assert tls.call(route_query()).code == 17
    assert ("serverEngine=c: TLS cannot be served by the I/O threads (OpenSSL linked "
            "statically)") in caplog.text


def test_big_answers_queued_on_a_tls_connection_are_sealed_whole_and_in_order(tmp_path, certs):
    """serverEngine=c: GET_ALL_TOPIC_LIST answers of a large table (~0.5 MB each),
    pipelined on a TLS connection that reads nothing at first. The engine queues
    Python's answers as they came, several buffers one after the other (engine.c,
    re_block: not copied into one), and seals them in order."""
    if rmq.IMPLEMENTATION != "compiled":
        pytest.skip("the pure-Python reference has no I/O engine (asyncio serves TLS)")
    topics = [f"QueuedTopic-{i:05d}" for i in range(20000)]
    # (bounded socket buffers: the kernel's own would take every answer)
    with tls_server(tmp_path, certs, "permissive", loop="engine",
                    serverSocketSndBufSize=64 * 1024) as app:
        async def main():
            r = BrokerRegistrar(app.address, topics=[bodies.topic_config(t, 4, 4) for t in topics],
                                **BROKER)
            try:
                await r.start()
                return await asyncio.to_thread(check)
            finally:
                await r.stop(unregister=False)

        def check():
            def queued():
                states = [app.engine.connection_state(conn.id) for conn in list(app.connections)]
                return max((st["output_buffers"] for st in states if st and st["tls"]), default=0)

            with TlsClient(app.address, client_ctx(certs)) as c:
                c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
                # two batches, Python's answers to each sent at once: the second's
                # queued behind the first's
                for batch in range(2):
                    c.send_raw(b"".join(rmq.encode_frame(rmq.RemotingCommand.request(
                        206, opaque=batch * 4 + i)) for i in range(4)))
                    assert wait_for(lambda: queued() >= batch + 1, 10), queued()
                got = [c.receive(timeout=10) for _ in range(8)]
            assert [a.opaque for a in got] == list(range(8))
            for a in got:
                assert a.code == 0
                assert sorted(bodies.decode_topic_list(a.body)[0]) == topics

        asyncio.run(main())
