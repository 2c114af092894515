"""Signed requests' cost (issue 16, item 3): REGISTER_BROKER round trips against a real
NameServer (in this process, over TCP on 127.0.0.1) with ACL off and with
aclBrokerRequests=signed (the client signs, the server checks), for one broker of T
topics registering N times; and the signature alone (rmq.acl) over that body.

    .venv/bin/python bench/acl.py 10000 50      # T topics, N registrations
"""
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from rmq import brokersim  # noqa: E402
import rmq  # noqa: E402
from nameserver import Client, running_namesrv  # noqa: E402
from rmq.acl import (SessionCredentials, request_signature, sign_command,  # noqa: E402
                     signature_fields)
from rmq.namesrv.acl import _SERVER_EXCLUDES  # noqa: E402

CREDS = SessionCredentials("broker-bench", "bench-secret-key")
ACL = "accounts:\n  - {accessKey: broker-bench, secretKey: bench-secret-key}\n"


def registrations(address, body, n, creds):
    times = []
    with Client(address) as c:
        for i in range(n):
            ext = {"clusterName": "c", "brokerAddr": "127.0.0.1:10911", "brokerName": "b",
                   "brokerId": "0", "haServerAddr": "127.0.0.1:10912", "compressed": "false",
                   "bodyCrc32": str(rmq.body_crc32(body))}
            t = time.perf_counter()
            cmd = rmq.RemotingCommand.request(103, ext, body)
            if creds is not None:
                sign_command(cmd, creds)
            resp = c.call(cmd)
            times.append(time.perf_counter() - t)
            assert resp.code == 0, resp.remark
    return times


def main():
    topics = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    body = brokersim.encode_body(brokersim.topic_names(topics), 1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "plain_acl.yml").write_text(ACL)
        runs = {}
        for name, config, creds in (
                ("off", {}, None),
                ("on ", {"aclEnable": True, "aclFilePath": str(tmp / "plain_acl.yml"),
                         "aclBrokerRequests": "signed"}, CREDS)):
            with running_namesrv(tmp / name.strip(), **config) as app:
                registrations(app.address, body, 2, creds)             # warm up
                runs[name] = registrations(app.address, body, n, creds)
    for name, times in runs.items():
        print(f"REGISTER_BROKER, {topics} topics ({len(body) / 1e6:.2f} MB), ACL {name}: "
              f"median {1e3 * statistics.median(times):.2f} ms, "
              f"min {1e3 * min(times):.2f} ms over {n}")
    ext = {"clusterName": "c", "brokerName": "b", "brokerId": "0"}
    t = time.perf_counter()
    fields = signature_fields(ext, body, CREDS)
    sign_s = time.perf_counter() - t
    cmd = rmq.RemotingCommand.request(103, {**ext, **fields}, body)
    t = time.perf_counter()      # as the server does it
    assert request_signature(cmd.ext_fields, cmd.body, CREDS.secret_key,
                             exclude=_SERVER_EXCLUDES) == fields["Signature"]
    verify_s = time.perf_counter() - t
    print(f"signature over the body: sign {1e6 * sign_s:.0f} us, verify {1e6 * verify_s:.0f} us")


if __name__ == "__main__":
    main()
