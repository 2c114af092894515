"""The release as a user gets it: the sdist builds from scratch, the wheel holds exactly
the ``rmq`` package (the stripped extension, the stub, py.typed and the licence), and
the wheel built from the sdist installs into a fresh venv where ``rmq`` runs a
NameServer session. And every file the build, cibuildwheel, the Makefile, the scripts
and the docs name exists.

The build is slow (the core compiled in an isolated environment from PyPI, a venv):
marked ``slow``, made once per session (tests/dists.py: the Spark cluster test ships
the same wheel), and everything here runs once, in the compiled pass of ``make test``.
"""

import fnmatch
import re
import shlex
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

import dists
import parts

import rmq

pytestmark = pytest.mark.once
slow = pytest.mark.slow
#: the sdist and wheel builds (python -m build)
builds = pytest.mark.requires("build")

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


#: The fresh venvs see only what is installed in them.
CLEAN_ENV = dists.CLEAN_ENV


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
def dists(release_dists):
    """``python -m build``: the sdist from this tree, then the wheel from the sdist
    (in an isolated build environment, as pip builds an sdist it installs), so the
    wheel proves the sdist complete; built once per session (tests/dists.py)."""
    return release_dists


@slow
@builds
def test_build_prints_no_deprecation(dists):
    *_, log = dists
    assert "Deprecat" not in log, [ln for ln in log.splitlines() if "Deprecat" in ln]


@slow
@builds
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
@builds
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
def test_installs_into_a_fresh_venv_and_serves(dists, tmp_path_factory, tmp_path):
    # The wheel only: the sdist's own build is the one that made it (installing the
    # sdist would be a second, identical PEP 517 build of the core).
    _, wheel, _ = dists
    venv = tmp_path_factory.mktemp("venv-wheel")
    _run([sys.executable, "-m", "venv", venv])
    bin_ = venv / "bin"
    _run([bin_ / "python", "-m", "pip", "install", "-q", wheel], timeout=900)

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


# ---------------------------------------------------------------- the paths named
# A rename or a removal that misses one of the places naming a file (cibuildwheel's
# test-commands, package-data, the Makefile, a script's test list, a doc) fails here.
# The places are parsed, not listed, so a new wrong path fails too.

#: The top-level directories a path in prose or a script starts with.
PATH_RE = re.compile(r"(?<![\w./{}$-])((?:tests|docs|bench|contrib|src|tools)/[\w.*/-]*[\w*/])")
#: A test module by its bare name, as the docs and test-commands give them.
TEST_MODULE_RE = re.compile(r"(?<![\w/.-])(test_[\w*]+\.py)\b")
MARKDOWN_LINK_RE = re.compile(r"\]\(([^)\s]+)\)")
#: Where test modules and functions live: a bare name is found in one of them.
TEST_DIRS = ("tests", "bench")
#: Text that names paths: the build's and the CI's files, the scripts and the docs.
NAMING_FILES = ("pyproject.toml", "Makefile", "noxfile.py", "MANIFEST.in", "setup.py",
                ".ci/run", "tools/*.sh", "tools/*.py", "*.md", "docs/*.md", "bench/*.md")


def _gitignore_patterns(root):
    lines = (root / ".gitignore").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith(("#", "!"))]


def _generated(name, patterns):
    """Whether ``name`` is what the build or a tool makes (.gitignore'd: the plain
    patterns this project's .gitignore uses), and so need not exist in a checkout."""
    parts = name.strip("/").split("/")
    for pattern in patterns:
        anchored = "/" in pattern.rstrip("/")
        pattern = pattern.strip("/")
        if anchored:
            if any(fnmatch.fnmatchcase("/".join(parts[:i]), pattern)
                   for i in range(1, len(parts) + 1)):
                return True
        elif any(fnmatch.fnmatchcase(part, pattern) for part in parts):
            return True
    return False


def _matches(path):
    """The files ``path`` names: itself, or what it matches when it is a glob."""
    if "*" not in str(path):
        return [path] if path.exists() else []
    anchor = Path(path.anchor)
    return list(anchor.glob(str(path.relative_to(anchor))))


def _command_paths(command, project):
    """The paths a cibuildwheel command names, resolved as cibuildwheel runs it:
    ``{project}`` and ``{package}`` replaced by the project's directory (no package-dir
    is set, so they are the same), the command started in an empty temporary directory
    (a relative path there names nothing of the project's, unless a ``cd`` came first).
    Arguments that name a file: those with a ``/``, ``.py`` files and options' values."""
    command = command.replace("{project}", str(project)).replace("{package}", str(project))
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    words, simple = list(lexer), []
    cwd = Path("/nonexistent-cibuildwheel-test-cwd")
    for word in [*words, ";"]:
        if word not in (";", "&&", "||", "|", "&"):
            simple.append(word)
            continue
        while simple and re.fullmatch(r"[A-Za-z_]\w*=.*", simple[0]):
            simple.pop(0)                          # an environment assignment
        if simple[:1] == ["cd"]:
            cwd = cwd / simple[1]
        else:
            for arg in simple[1:]:
                if arg.startswith("-"):
                    if "=" not in arg:
                        continue
                    arg = arg.split("=", 1)[1]
                arg = arg.split("::", 1)[0]
                if "/" in arg or arg.endswith(".py"):
                    yield cwd / arg
        simple = []


def _pyproject_paths(root):
    """(what, path) for every file and directory pyproject.toml names."""
    tomllib = pytest.importorskip("tomllib")
    meta = tomllib.loads((root / "pyproject.toml").read_text())
    project, tool = meta["project"], meta["tool"]
    readme = project.get("readme")
    if readme:
        yield "project.readme", root / (readme if isinstance(readme, str) else readme["file"])
    for pattern in project.get("license-files", []):
        yield "project.license-files", root / pattern
    setuptools = tool.get("setuptools", {})
    package_dir = setuptools.get("package-dir", {})
    for where in package_dir.values():
        yield "tool.setuptools.package-dir", root / where
    for where in setuptools.get("packages", {}).get("find", {}).get("where", []):
        yield "tool.setuptools.packages.find.where", root / where

    def package_path(package):
        for prefix in sorted(package_dir, key=len, reverse=True):
            if not prefix or package == prefix or package.startswith(prefix + "."):
                rest = package[len(prefix):].lstrip(".")
                return root / package_dir[prefix] / rest.replace(".", "/")
        return root / package.replace(".", "/")

    for package, patterns in setuptools.get("package-data", {}).items():
        for pattern in patterns:
            yield f"tool.setuptools.package-data[{package}]", package_path(package) / pattern
    for key, dynamic in setuptools.get("dynamic", {}).items():
        if "attr" in dynamic:
            module = package_path(dynamic["attr"].rsplit(".", 1)[0])
            yield f"tool.setuptools.dynamic.{key}", (
                module if module.is_dir() else module.with_suffix(".py"))
        for file in ([dynamic["file"]] if isinstance(dynamic.get("file"), str)
                     else dynamic.get("file", [])):
            yield f"tool.setuptools.dynamic.{key}", root / file
    for path in tool.get("pytest", {}).get("ini_options", {}).get("testpaths", []):
        yield "tool.pytest.ini_options.testpaths", root / path

    cibw = tool.get("cibuildwheel", {})
    tables = [("tool.cibuildwheel", cibw)]
    tables += [(f"tool.cibuildwheel.{platform}", cibw[platform])
               for platform in ("linux", "macos", "windows") if platform in cibw]
    tables += [(f"tool.cibuildwheel.overrides[{o['select']}]", o)
               for o in cibw.get("overrides", [])]
    for where, table in tables:
        for key, value in table.items():
            if key == "test-command" or key.startswith("before-") or key.endswith("-command"):
                for command in [value] if isinstance(value, str) else value:
                    for path in _command_paths(command, root):
                        yield f"{where}.{key}", path
            if key == "test-sources":
                for path in value:
                    yield f"{where}.{key}", root / path


def _manifest_paths(root):
    """(what, path) for what MANIFEST.in includes (its exclusions may name what a build
    makes, and need not exist)."""
    for line in (root / "MANIFEST.in").read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if words[0] == "include":
            for pattern in words[1:]:
                yield f"MANIFEST.in {words[0]}", root / pattern
        elif words[0] == "graft":
            yield f"MANIFEST.in {words[0]}", root / words[1]
        elif words[0] == "recursive-include":
            for pattern in words[2:]:
                yield f"MANIFEST.in {words[0]}", root / words[1] / "**" / pattern


def _named_in_text(root):
    """(file, path) for every path the build's files, the scripts and the docs name:
    paths from a top-level directory, bare test module names (found in tests/ or bench/),
    Markdown links (relative to the document)."""
    patterns = _gitignore_patterns(root)
    files = sorted({p for pattern in NAMING_FILES for p in root.glob(pattern)})
    for file in files:
        where = str(file.relative_to(root))
        text = file.read_text()
        if file.suffix == ".sh":
            text = text.replace("\\.", ".")        # a grep's escaped dot names a path too
        for name in PATH_RE.findall(text):
            if "..." not in name and not _generated(name, patterns):
                yield where, root / name
        for name in TEST_MODULE_RE.findall(text):
            yield where, [root / d / name for d in TEST_DIRS]
        if file.suffix == ".md":
            for target in MARKDOWN_LINK_RE.findall(text):
                target = target.split("#", 1)[0]
                if target and not re.match(r"[a-z]+:", target):
                    yield where, file.parent / target


def _named_tests_in_docs(root):
    """(file, name) for each test module or test function the docs give by its bare
    name in code spans (`test_crc32`, `test_namesrv_*`)."""
    for file in sorted({*root.glob("*.md"), *root.glob("docs/*.md"), *root.glob("bench/*.md")}):
        prose = re.sub(r"^```.*?^```", "", file.read_text(), flags=re.M | re.S)
        for span in re.findall(r"`([^`]+)`", prose):
            for word in span.split():
                if re.fullmatch(r"test_[\w*]+", word.rstrip(",")):
                    yield str(file.relative_to(root)), word.rstrip(",")


def _missing_paths(root):
    missing = []
    named = [*_pyproject_paths(root), *_manifest_paths(root), *_named_in_text(root)]
    for where, path in named:
        candidates = path if isinstance(path, list) else [path]
        if not any(_matches(p) for p in candidates):
            missing.append(f"{where}: {candidates[0]}")
    functions = {m for d in TEST_DIRS for p in (root / d).glob("*.py")
                 for m in re.findall(r"^\s*(?:async )?def (test_\w+)", p.read_text(), re.M)}
    modules = {p.stem for d in TEST_DIRS for p in (root / d).glob("test_*.py")}
    for where, name in _named_tests_in_docs(root):
        if not fnmatch.filter(modules | functions, name):
            missing.append(f"{where}: no test module or test function `{name}`")
    return missing


def test_every_path_named_exists():
    """Every file pyproject.toml (cibuildwheel's commands and overrides, package-data,
    license-files, readme), MANIFEST.in, the Makefile, noxfile.py, the scripts and the
    docs name exists, or is one a build makes (.gitignore'd)."""
    if not (ROOT / ".gitignore").exists():
        pytest.skip("not a source checkout (an sdist has no .gitignore)")
    missing = _missing_paths(ROOT)
    assert not missing, "named but missing:\n" + "\n".join(missing)


def test_command_paths_resolve_as_cibuildwheel_runs_them(tmp_path):
    """The parser behind test_every_path_named_exists: relative to a ``cd``, or to
    cibuildwheel's empty temporary directory when there is none."""
    command = ("cd {project}/tests && HYPOTHESIS_PROFILE=quick pytest -q -p no:cacheprovider "
               "-m 'not slow' test_a.py test_b.py::test_x --ignore={package}/tests/c.py; "
               "pytest {project}/tests d/e.py")
    assert list(_command_paths(command, tmp_path)) == [
        tmp_path / "tests/test_a.py", tmp_path / "tests/test_b.py", tmp_path / "tests/c.py",
        tmp_path / "tests", tmp_path / "tests/d/e.py"]
    assert list(_command_paths("pytest -q tests/test_a.py", tmp_path)) == [
        Path("/nonexistent-cibuildwheel-test-cwd/tests/test_a.py")]


def test_a_wrong_name_is_caught(tmp_path):
    """A copy of the files that name paths, with a wrong name in each kind of place."""
    for name in ("pyproject.toml", "MANIFEST.in", ".gitignore", "Makefile", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    for path in ROOT.iterdir():
        if not (tmp_path / path.name).exists() and path.name not in (".git", ".venv"):
            (tmp_path / path.name).symlink_to(path)
    before = set(_missing_paths(tmp_path))
    with (tmp_path / "Makefile").open("a") as makefile:
        makefile.write("gone:\n\ttools/gone.sh tests/test_gone.py\n")
    (tmp_path / "NEW.md").write_text("see [it](docs/gone.md) and `test_gone_module`\n")
    with (tmp_path / "MANIFEST.in").open("a") as manifest:
        manifest.write("include GONE.txt\n")
    pyproject = (tmp_path / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(pyproject.replace(
        "test_crc32.py", "test_gone_in_pyproject.py").replace('"py.typed"', '"py.gone"'))
    added = "\n".join(sorted(set(_missing_paths(tmp_path)) - before))
    for gone in ("Makefile: " + str(tmp_path / "tools/gone.sh"),
                 "Makefile: " + str(tmp_path / "tests/test_gone.py"),
                 "NEW.md: " + str(tmp_path / "docs/gone.md"),
                 "NEW.md: no test module or test function `test_gone_module`",
                 "MANIFEST.in include: " + str(tmp_path / "GONE.txt"),
                 "test-command: " + str(tmp_path / "tests/test_gone_in_pyproject.py"),
                 "package-data[rmq]: " + str(tmp_path / "src/rmq/py.gone")):
        assert gone in added, added
