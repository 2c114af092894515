"""The README's examples run as written.

Each ```python block runs in a fresh interpreter, in the README's order, and each
``rmq --version``, ``rmq version``, ``rmq admin ...`` and ``rmq namesrv ... -p`` line of
its ```sh blocks runs as a command, all against a real NameServer on an ephemeral port
(the README's ``127.0.0.1:9876`` replaced by its address). A broker of the test's own
holds TopicTest meanwhile, as a running cluster would.
"""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from nameserver import Client, register_broker, running_namesrv

pytestmark = pytest.mark.once

README = Path(__file__).resolve().parent.parent / "README.md"
README_ADDR = "127.0.0.1:9876"
RUNNABLE = re.compile(r"rmq (--version|version|admin |namesrv .*-p\b)")


def blocks(language):
    return re.findall(rf"^```{language}\n(.*?)^```$", README.read_text(), re.M | re.S)


def commands():
    lines = [ln.strip() for block in blocks("sh") for ln in block.splitlines()]
    return [ln for ln in lines if RUNNABLE.match(ln)]


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory):
    with running_namesrv(tmp_path_factory.mktemp("namesrv")) as app:
        with Client(app.address) as broker:     # open for the whole module: stays alive
            answer = register_broker(broker, "broker-test", "127.0.0.1:20911",
                                     cluster="DefaultCluster",
                                     topics=["TopicTest", "SELF_TEST_TOPIC"])
            assert answer.code == 0, answer.remark
            yield app


def test_the_readme_has_examples_to_run():
    assert len(blocks("python")) >= 3
    assert any(c.startswith("rmq admin") for c in commands())
    assert any(RUNNABLE.match(c).group(1).startswith("namesrv") for c in commands())


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_example(namesrv, index, tmp_path):
    code = blocks("python")[index].replace(README_ADDR, namesrv.address)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, f"example {index} failed:\n{code}\n{proc.stderr}"


@pytest.mark.parametrize("line", commands())
def test_command_example(namesrv, line, tmp_path):
    (tmp_path / "namesrv.properties").write_text("listenPort=9876\norderMessageEnable=true\n")
    argv = shlex.split(line.replace(README_ADDR, namesrv.address), comments=True)
    assert argv[0] == "rmq"
    proc = subprocess.run([sys.executable, "-m", "rmq", *argv[1:]], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, f"{line!r} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.strip(), f"{line!r} printed nothing"
    if "-p" in argv:
        assert "orderMessageEnable=true\n" in proc.stdout      # the file's value, applied
