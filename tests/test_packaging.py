"""The release as a user gets it: the sdist builds from scratch, the wheel holds exactly
the ``rmq`` package (the stripped extension, the stub, py.typed and the licence), and
each installs into a fresh venv where ``rmq`` runs a NameServer session.

The builds are slow (two builds of the core, two venvs from PyPI): marked ``slow``, and
everything here runs once, in the compiled pass of ``make test``.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

import parts

import rmq

pytestmark = pytest.mark.once
slow = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SUPPORTED = ["3.10", "3.11", "3.12", "3.13", "3.14"]

# Registers a broker the way the README shows, then asks for its route: run by the
# venv's own Python, so it imports the installed rmq, not this tree's.
SESSION = r"""
import asyncio, subprocess, sys
from pathlib import Path
from rmq import bodies
from rmq.registrar import BrokerRegistrar

addr = sys.argv[1]

async def session():
    registrar = BrokerRegistrar(
        addr, cluster="DefaultCluster", broker_name="broker-a", broker_id=0,
        broker_addr="127.0.0.1:10911",
        topics=[*bodies.broker_system_topics("DefaultCluster", "broker-a"),
                bodies.topic_config("TopicTest", 8, 8)])
    results = await registrar.register_broker_all()
    assert results and results[0].namesrv == addr, results
    # while the broker's connection is open (its close drops the broker): mqadmin's verb
    route = await asyncio.to_thread(subprocess.run, [
        str(Path(sys.executable).parent / "rmq"), "admin", "topicRoute", "-t", "TopicTest",
        "-n", addr], capture_output=True, text=True, check=True)
    await registrar.stop()
    return route.stdout

route = asyncio.run(session())
assert "broker-a" in route and "127.0.0.1:10911" in route, route
import rmq
print(rmq.IMPLEMENTATION, rmq.__version__)
"""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: The fresh venvs see only what is installed in them: not this tree (PYTHONPATH), and
#: the compiled core whatever this pass runs.
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RMQ_PUREPYTHON")}


def _run(args, **kw):
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True,
                          timeout=kw.pop("timeout", 600), env=CLEAN_ENV, **kw)
    assert proc.returncode == 0, f"{args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_supported_pythons_agree():
    """requires-python, the classifiers and the wheels cibuildwheel builds name the
    same versions."""
    tomllib = pytest.importorskip("tomllib")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = meta["project"]
    assert project["requires-python"] == f">={SUPPORTED[0]}"
    classified = [c.rsplit(" :: ", 1)[1] for c in project["classifiers"]
                  if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert classified == SUPPORTED
    built = meta["tool"]["cibuildwheel"]["build"].split()
    assert built == [f"cp{v.replace('.', '')}-*" for v in SUPPORTED]
    assert meta["tool"]["cibuildwheel"]["linux"]["archs"] == ["x86_64", "aarch64"]
    assert "musllinux" not in meta["tool"]["cibuildwheel"]["skip"].replace("musllinux_i686", "")


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    """``python -m build``: the sdist from this tree, then the wheel from the sdist
    (in an isolated build environment), so the wheel proves the sdist complete."""
    parts.require("build")
    out = tmp_path_factory.mktemp("dist")
    # A copy of the tree (MANIFEST.in still decides what the sdist holds): the build
    # writes egg-info and a release tree into the directory it builds, which another
    # build of the same tree (nox, a developer) must not meet.
    tree = tmp_path_factory.mktemp("tree") / "rmq"
    shutil.copytree(ROOT, tree, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".nox", "build", "dist", "node_modules", "*.egg-info", "*.so",
        "_core.c", "__pycache__", ".mypy_cache", ".hypothesis", ".benchmarks"))
    proc = _run([sys.executable, "-m", "build", "--outdir", out, tree], cwd=tree, timeout=900)
    sdist, = out.glob("rmq-*.tar.gz")
    wheel, = out.glob("rmq-*.whl")
    return sdist, wheel, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def venvs(tmp_path_factory):
    made = {}

    def venv(name):
        if name not in made:
            path = tmp_path_factory.mktemp(f"venv-{name}")
            _run([sys.executable, "-m", "venv", path])
            made[name] = path
        return made[name]
    return venv


@slow
def test_build_prints_no_deprecation(dists):
    *_, log = dists
    assert "Deprecat" not in log, [ln for ln in log.splitlines() if "Deprecat" in ln]


@slow
def test_sdist_ships_what_a_build_and_the_tests_need(dists):
    sdist, _, _ = dists
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    core = {f"src/_core/{p.name}" for p in (ROOT / "src/_core").iterdir()
            if p.suffix in (".pyx", ".pxi", ".c", ".h") and p.name != "_core.c"}
    assert "src/_core/_core.pyx" in core and "src/_core/columns.pxi" in core
    assert core <= names, core - names
    assert "src/_core/_core.c" not in names      # generated: built from the .pyx
    tests = {f"tests/{p.name}" for p in (ROOT / "tests").glob("*.py")}
    assert tests <= names, tests - names
    vectors = {str(p.relative_to(ROOT)) for p in (ROOT / "tests/vectors").rglob("*")
               if p.is_file()}
    assert vectors and vectors <= names, sorted(vectors - names)[:5]
    assert {"LICENSE", "README.md", "pyproject.toml", "setup.py", "MANIFEST.in"} <= names
    assert not [n for n in names if n.endswith((".so", ".pyc")) or "node_modules" in n]


@slow
def test_wheel_holds_exactly_the_package(dists):
    _, wheel, _ = dists
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    dist_info = next(n.split("/")[0] for n in names if ".dist-info/" in n)
    package = {f"rmq/{p.relative_to(ROOT / 'src/rmq')}" for p in (ROOT / "src/rmq").rglob("*.py")
               if "__pycache__" not in p.parts}
    extension = [n for n in names if re.fullmatch(r"rmq/_core\.cpython-[^/]+\.so", n)]
    assert len(extension) == 1, sorted(names)
    expected = package | set(extension) | {"rmq/_core.pyi", "rmq/py.typed"} | {
        f"{dist_info}/{n}" for n in ("METADATA", "WHEEL", "RECORD", "entry_points.txt",
                                     "top_level.txt", "licenses/LICENSE")}
    assert names == expected, (sorted(names - expected), sorted(expected - names))

    assert "\nRequires-Python: >=3.10\n" in metadata
    assert "\nLicense-Expression: Apache-2.0\n" in metadata
    assert "\nLicense-File: LICENSE\n" in metadata
    classified = re.findall(r"Programming Language :: Python :: (3\.\d+)", metadata)
    assert classified == SUPPORTED


@slow
def test_wheel_extension_is_stripped(dists, tmp_path):
    _, wheel, _ = dists
    with zipfile.ZipFile(wheel) as zf:
        so = next(n for n in zf.namelist() if n.endswith(".so"))
        path = Path(zf.extract(so, tmp_path))
    # binutils (readelf, nm), as the compiler that built the core brings them
    sections = _run(["readelf", "-SW", path]).stdout
    assert " .text " in sections and "PyInit__core" in _run(["nm", "-D", path]).stdout
    assert ".debug" not in sections, sections


@slow
@pytest.mark.parametrize("artifact", ["wheel", "sdist"])
def test_installs_into_a_fresh_venv_and_serves(dists, venvs, artifact, tmp_path):
    sdist, wheel, _ = dists
    venv = venvs(artifact)
    bin_ = venv / "bin"
    _run([bin_ / "python", "-m", "pip", "install", "-q", wheel if artifact == "wheel" else sdist],
         timeout=900)

    assert _run([bin_ / "rmq", "--version"]).stdout.strip() == f"rmq {rmq.__version__}"
    version = _run([bin_ / "rmq", "version"]).stdout
    assert "implementation: compiled" in version, version
    # only rmq is installed: the core's sources are not a package
    probe = _run([bin_ / "python", "-c",
                  "import importlib.util as u; print(u.find_spec('_core'), u.find_spec('rmq._core').origin)"],
                 cwd=tmp_path).stdout.split()
    assert probe[0] == "None" and probe[1].startswith(str(venv)), probe

    port = _free_port()
    addr = f"127.0.0.1:{port}"
    kv = tmp_path / "kv" / "kvConfig.json"
    printed = _run([bin_ / "rmq", "namesrv", "-p", "--listen", addr, "--kv-config", kv]).stdout
    assert f"listenPort={port}\n" in printed and f"kvConfigPath={kv}\n" in printed
    server = subprocess.Popen([bin_ / "rmq", "namesrv", "--listen", addr, "--kv-config", kv],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=CLEAN_ENV)
    try:
        _wait_for_port(port, server)
        out = _run([bin_ / "python", "-c", SESSION, addr], cwd=tmp_path).stdout
        assert out.split() == ["compiled", rmq.__version__]
        _run([bin_ / "rmq", "admin", "updateKvConfig", "-n", addr, "-s", "NS", "-k", "k",
              "-v", "v"])
    finally:
        server.send_signal(signal.SIGTERM)
        log, _ = server.communicate(timeout=30)
    assert server.returncode == 0, log
    assert "new broker registered" in log, log
    assert '"k":"v"' in kv.read_text().replace(" ", ""), kv.read_text()


def _wait_for_port(port, server, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"rmq namesrv exited {server.returncode}: {server.stdout.read()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"rmq namesrv did not listen on {port} within {timeout} s")
