"""Static typing of the public API (mypy.ini at the repository's root).

- mypy --strict passes on the package (the public API strict, the NameServer's
  internals excluded in mypy.ini with their reasons);
- the stub rmq/_core.pyi describes the built extension exactly (stubtest);
- the pure-Python reference rmq.fallback has the stub's names and signatures;
- code written as the README shows type-checks under --strict, and the types
  are precise (assert_type), not Any: a wrong use is an error.

Needs mypy (the test extra); skipped without it.
"""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support import PUREPYTHON

import parts  # noqa: E402

parts.require("mypy", module=True)

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "mypy.ini"
ALLOWLIST = ROOT / "stubtest-allowlist.txt"

pytestmark = [pytest.mark.requires("mypy"),
              pytest.mark.skipif(not CONFIG.exists(), reason="no mypy.ini (not a source tree)")]


def _run(args, tmp_path, cwd=ROOT, env=None):
    cmd = [sys.executable, "-m", *args]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


def _mypy(tmp_path, *args):
    return _run(["mypy", "--config-file", str(CONFIG), "--cache-dir", str(tmp_path / "cache"),
                 *args], tmp_path)


def _env_with(path):
    """The environment with ``path`` first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(path), env.get("PYTHONPATH")) if p)
    return env


def test_mypy_strict_passes_on_the_package(tmp_path):
    code, out = _mypy(tmp_path)
    assert code == 0, out
    assert "Success: no issues found" in out


@pytest.mark.skipif(PUREPYTHON, reason="RMQ_PUREPYTHON=1: the compiled core is not tested")
def test_stub_describes_the_compiled_core(tmp_path):
    import rmq._core

    # the extension these tests import, with the stub beside it in the source tree
    where = Path(rmq._core.__file__).resolve().parent.parent
    code, out = _run(["mypy.stubtest", "rmq._core", "--mypy-config-file", str(CONFIG),
                      "--allowlist", str(ALLOWLIST)], tmp_path, env=_env_with(where))
    assert code == 0, out


def test_fallback_has_the_names_and_signatures_of_the_stub(tmp_path):
    """stubtest of rmq.fallback against the stub, less what only the compiled core
    has (the kernel switch, the scan test hooks, DEBUG_BUILD, the I/O engine), with its
    cdef classes' __new__ as the reference's __init__."""
    stub = (ROOT / "src" / "rmq" / "_core.pyi").read_text()
    stub = re.sub(r"\n(def (_hash|_siphash13|_scan_\w+|_route_answer|crc32_set_kernel|"
                  r"crc32_kernels_available)\(.*?\.\.\.|_ScannedTopic = .*?|DEBUG_BUILD: bool)"
                  r"(?=\n)", "", stub, flags=re.S)
    # the I/O engine (engine.pxi): threads in C, no pure-Python twin
    stub = re.sub(r"\n# -+ engine\.pxi \(compiled only\)\n.*\Z", "\n", stub, flags=re.S)
    stub, n = re.subn(r"def __new__\(cls, (.*?)\) -> Self: \.\.\.", r"def __init__(self, \1) -> None: ...",
                      stub, flags=re.S)
    assert n == 4, stub                 # FrameDecoder, FrameSplitter, TraceRows, TraceColumns
    view = tmp_path / "rmq_fallback_view"
    view.mkdir()
    (view / "__init__.pyi").write_text(stub)
    (view / "__init__.py").write_text(textwrap.dedent("""\
        from rmq.fallback import *  # noqa: F403
        from rmq.fallback import (CRC32_KERNEL, DEFAULT_MAX_INFLATED,  # noqa: F401
                                  IMPLEMENTATION, MAX_INFLATE_RATIO, MIN_INFLATE_LIMIT)
        from rmq.fallback.bodies import INFLATE_CHUNK  # noqa: F401
        from rmq.fallback.codec import _rebuild_command  # noqa: F401
        """))
    allow = tmp_path / "allowlist.txt"
    allow.write_text(textwrap.dedent("""\
        # instance attributes of the reference, set in __init__ (stubtest sees the class)
        rmq_fallback_view.FrameDecoder.max_frame_length
        rmq_fallback_view.FrameSplitter.max_frame_length
        rmq_fallback_view.TraceRows.offset
        rmq_fallback_view.TraceRows.records
        rmq_fallback_view.TraceRows.stopped
        rmq_fallback_view.TraceColumns.offset
        rmq_fallback_view.TraceColumns.records
        rmq_fallback_view.TraceColumns.stopped
        """))
    config = tmp_path / "mypy.ini"
    config.write_text(f"[mypy]\nmypy_path = {ROOT / 'src'}\n"
                      "[mypy-msgpack.*,msgpack]\nignore_missing_imports = True\n")
    code, out = _run(["mypy.stubtest", "rmq_fallback_view", "--mypy-config-file", str(config),
                      "--allowlist", str(allow)], tmp_path, cwd=tmp_path,
                     env=_env_with(f"{tmp_path}{os.pathsep}{ROOT / 'src'}"))
    assert code == 0, out


#: Code as the README shows it (the broker side, admin, API, bodies), with the types
#: it must see: mypy --strict must accept it.
USER_CODE = '''
import asyncio
from typing import Any

from typing_extensions import assert_type

import rmq
from rmq import bodies, errors
from rmq.admin import AddressResult, ClusterList, NamesrvAdmin
from rmq.registrar import BrokerRegistrar, RegisterResult, RegistrationError
from rmq.client import BlockingRemotingClient, RemotingClient
from rmq.namesrv.config import NamesrvConfig
from rmq.trace.pcap import PcapReader, TraceRecord
from rmq.protocol import RequestCode, ResponseCode
from rmq.trace.segments import SegmentReader, read_records


async def broker() -> None:
    registrar = BrokerRegistrar(
        "10.0.0.1:9876;10.0.0.2:9876",
        cluster="DefaultCluster", broker_name="broker-a", broker_id=0,
        broker_addr="10.0.0.5:10911", ha_server_addr="10.0.0.5:10912",
        topics=[bodies.topic_config("TopicTest", 8, 8)])
    try:
        results = await registrar.start()
    except RegistrationError as e:
        assert_type(e.errors, dict[str, BaseException])
        return
    assert_type(results, list[RegisterResult])
    assert_type(results[0].master_addr, str | None)
    assert_type(results[0].kv_table, dict[str, str])
    registrar.update_topics([bodies.topic_config("TopicTest", 16, 16)])
    await registrar.stop()


async def client() -> None:
    async with RemotingClient(connect_timeout=1.0) as c:
        req = rmq.RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
        try:
            resp = await c.invoke("127.0.0.1:9876", req, 3.0)
        except errors.RemotingTimeoutError as e:
            assert_type(e.addr, str | None)
            return
        if resp.code != ResponseCode.SUCCESS:
            raise errors.ResponseError(resp.code, resp.remark)
        route = bodies.decode_topic_route_data(resp.body)
        assert_type(route, dict[str, Any])
        await c.invoke_oneway("127.0.0.1:9876", rmq.RemotingCommand.request(904, oneway=True))


def scripts() -> None:
    with BlockingRemotingClient() as c:
        assert_type(c.request("127.0.0.1:9876", 106), rmq.RemotingCommand)
    with NamesrvAdmin("127.0.0.1:9876", timeout=5) as admin:
        clusters = admin.cluster_list()
        assert_type(clusters, ClusterList)
        assert_type(clusters["brokers"][0]["brokerId"], int)
        assert_type(admin.topic_list()["topicList"], list[str])
        for r in admin.wipe_write_perm("broker-a"):
            assert_type(r, AddressResult[int])
            if r.ok:
                assert_type(r.value, int)
        for c2 in admin.get_namesrv_config():
            assert_type(c2.value, dict[str, str])


def api(chunk: bytes) -> None:
    assert_type(rmq.IMPLEMENTATION, str)
    assert_type(rmq.CRC32_KERNEL, str)
    req = rmq.RemotingCommand.request(105, {"topic": "T"}, serialize_type="ROCKETMQ", oneway=True)
    resp = req.response(0, body=b"...")
    assert_type(req.ext_fields, dict[str, str] | None)
    assert_type(resp.remark, str | None)
    assert_type(req.is_oneway, bool)
    frame = rmq.encode_frame(req)
    assert_type(frame, bytes)
    assert_type(rmq.decode_frame(frame), rmq.RemotingCommand)
    decoder = rmq.FrameDecoder(max_frame_length=16 * 1024 * 1024)
    for cmd in decoder.feed(chunk):
        assert_type(cmd, rmq.RemotingCommand)
    assert_type(rmq.crc32(memoryview(chunk), value=0), int)
    assert_type(rmq.body_crc32(bytearray(chunk)), int)
    try:
        rmq.decode_frame(chunk)
    except errors.ProtocolError as e:
        print(list(e.decoded))
    body = bodies.register_broker_body([bodies.topic_config("T")], {"counter": 1})
    data = bodies.encode_register_broker_body(body, compressed=True)
    assert_type(bodies.decode_register_broker_body(data), dict[str, Any])
    assert_type(bodies.decode_kv_table(b"{}"), dict[str, str])
    assert_type(bodies.decode_topic_list(b"{}"), tuple[list[str], str | None])
    tc = bodies.topic_config("T", perm=4)
    assert_type(tc["readQueueNums"], int)
    config = NamesrvConfig(listenPort=9877)
    assert_type(config.listenPort, int)
    assert_type(config.to_properties(), dict[str, str])
    for record in PcapReader("capture.pcap", server_ports=[9876]):
        assert_type(record, TraceRecord)
        assert_type(record.frame, bytes)
    for rec in read_records("trace.rmqtrace"):
        print(rec[0])
    print(SegmentReader(b"").stats["records"])


asyncio.run(broker())
'''


def test_code_as_the_readme_shows_type_checks_strictly(tmp_path):
    user = tmp_path / "user_code.py"
    user.write_text(USER_CODE)
    code, out = _mypy(tmp_path, "--strict", str(user))
    assert code == 0, out


def test_a_wrong_use_is_a_type_error(tmp_path):
    user = tmp_path / "wrong.py"
    user.write_text(textwrap.dedent("""\
        import rmq
        from rmq.registrar import BrokerRegistrar

        text: str = rmq.encode_frame(rmq.RemotingCommand.request(105))
        rmq.crc32("not bytes")
        BrokerRegistrar("127.0.0.1:9876", cluster="c", broker_name="b")
        """))
    code, out = _mypy(tmp_path, "--strict", str(user))
    assert code == 1, out
    assert 'wrong.py:4: error: Incompatible types in assignment (expression has type "bytes"' in out
    assert 'wrong.py:5: error: Argument 1 has incompatible type "str"; expected "Buffer"' in out
    assert 'wrong.py:6: error: Missing named argument "broker_addr"' in out


def test_the_readme_examples_type_check_strictly(tmp_path):
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```$", readme, re.M | re.S)
    assert blocks
    files = []
    for i, block in enumerate(blocks):
        files.append(tmp_path / f"readme_{i}.py")
        files[-1].write_text(block)
    code, out = _mypy(tmp_path, "--strict", *map(str, files))
    assert code == 0, out
