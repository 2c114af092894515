"""The parts the suite needs beyond rmq and its Python dependencies: one list, read by
the tests (``@pytest.mark.requires("openssl")``, :func:`require`) and by the installer
that ``make test`` and ``.ci/run`` call before the suite::

    python tests/parts.py install     # install what is missing; report every part
    python tests/parts.py check       # only report (exit 1 if a part is missing)

A part is a program, a package or a right: present or not, with why. The installer
takes each missing part from where it comes from (Debian's packages with apt-get when
it runs as root, npm for the Node client, pip for the Python ones) and checks again.
With ``CI`` set (``.ci/run`` sets it) a part still missing stops the installer, and a
test that needs it fails naming it; elsewhere the installer warns and such a test
skips, and the pytest summary says which parts were missing.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

TESTS = Path(__file__).resolve().parent
INTEROP = TESTS / "interop"
#: Pythons the noxfile runs the suite on (from pyenv's versions directory).
NOX_PYTHONS = ("3.10", "3.11", "3.12", "3.13")
#: The prefix of the message of a skip or failure for a missing part (the summary
#: finds them by it).
MISSING = "part missing: "
#: False when the run's ``-m`` leaves out the tests marked ``requires`` (cibuildwheel's
#: test-command does): a module that checks its parts as it is imported, before that
#: selection, then skips without them even in CI (tests/conftest.py sets it).
RUNS_REQUIRED = True


def in_ci() -> bool:
    """Whether a missing part fails instead of skipping (CI=true, as CI services set it)."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


# ---------------------------------------------------------------- the checks

def _program(name: str) -> str | None:
    return None if shutil.which(name) else f"no {name} on PATH"


def _run(args: list[str]) -> tuple[str | None, str]:
    """(None when ``args`` runs and exits 0, else why not; what it printed)."""
    if shutil.which(args[0]) is None:
        return f"no {args[0]} on PATH", ""
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{' '.join(args)} did not run: {e}", ""
    said = (p.stdout + p.stderr).strip()
    if p.returncode != 0:
        return f"{' '.join(args)} exited {p.returncode}: {said.splitlines()[-1:] or ''}", said
    return None, said


def _runs(args: list[str]) -> str | None:
    return _run(args)[0]


def _java() -> str | None:
    # Spark's own check (JAVA_HOME or PATH, a version this pyspark can run on), which
    # rmq trace analyze gives its users too.
    from rmq.trace.analyze import java_problem
    return java_problem()


def _node() -> str | None:
    why, said = _run(["node", "--version"])
    if why:
        return why
    major = int(re.match(r"v(\d+)", said).group(1))
    return None if major >= 16 else f"node is v{major}; ali-ons needs 16 or later"


def _ali_ons() -> str | None:
    installed = INTEROP / "node_modules" / "ali-ons" / "package.json"
    if not installed.is_file():
        return f"ali-ons is not installed in {installed.parent.parent}"
    want = json.loads((INTEROP / "package.json").read_text())["dependencies"]["ali-ons"]
    have = json.loads(installed.read_text())["version"]
    return None if have == want else f"ali-ons {have} is installed, tests/interop pins {want}"


def _cpp_client() -> str | None:
    # In a subprocess: the module loads the C++ library, which a failed import leaves
    # half-loaded in this one.
    p = subprocess.run([sys.executable, "-c", "import rocketmq.client"], capture_output=True,
                       text=True, timeout=60)
    if p.returncode != 0:
        return ("PyPI rocketmq 0.4.4 cannot be imported: "
                + ((p.stderr.strip().splitlines() or ["?"])[-1]))
    return None


def _module(name: str) -> Callable[[], str | None]:
    def check() -> str | None:
        return None if importlib.util.find_spec(name) else f"Python module {name} is not installed"
    return check


def _tcpdump() -> str | None:
    """tcpdump that can capture on lo (the right to, too: a container may lack it)."""
    if shutil.which("tcpdump") is None:
        return "no tcpdump on PATH"
    as_root = ["-Z", "root"] if os.geteuid() == 0 else []
    p = subprocess.Popen(["tcpdump", "-i", "lo", "-w", os.devnull, *as_root, "-c", "1",
                          "tcp", "port", "9"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    said = ""
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and p.poll() is None:
            line = p.stderr.readline()
            said += line
            if "listening on" in line:
                return None
        said += p.stderr.read() if p.poll() is not None else ""
        return f"tcpdump cannot capture on lo: {said.strip() or 'no output'}"
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()


def _nox_pythons() -> str | None:
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    lacking = [v for v in NOX_PYTHONS if not glob.glob(os.path.join(root, "versions", f"{v}.*",
                                                                    "bin", "python"))]
    return f"pyenv has no CPython {', '.join(lacking)} in {root}/versions" if lacking else None


# ---------------------------------------------------------------- the list

@dataclasses.dataclass(frozen=True)
class Part:
    name: str
    needed_by: str
    check: Callable[[], str | None]
    debian: tuple[str, ...] = ()        # Debian packages that bring it
    pip: tuple[str, ...] = ()           # or PyPI requirements, into this interpreter
    npm: bool = False                   # or `npm ci --prefix tests/interop`
    machines: tuple[str, ...] = ()      # only these (platform.machine()); () = every one

    @property
    def applies(self) -> bool:
        return not self.machines or platform.machine() in self.machines

    def how(self) -> str:
        ways = ([f"apt-get install {' '.join(self.debian)}"] if self.debian else []) \
            + ([f"pip install {' '.join(self.pip)}"] if self.pip else []) \
            + (["npm ci --prefix tests/interop"] if self.npm else [])
        return " or ".join(ways) or "no installer here: see its check"


PARTS = {p.name: p for p in [
    Part("java", "Spark (test_analyze, test_trace_cli, test_spark_cluster), the JDK's "
         "HMAC in test_acl", _java, debian=("openjdk-17-jre-headless",)),
    Part("node", "ali-ons, the Node client (test_interop)", _node, debian=("nodejs", "npm")),
    Part("ali-ons", "the Node client's tests (test_interop)", _ali_ons, npm=True),
    Part("cpp-client", "the Apache C++ client's tests (test_interop, test_acl)", _cpp_client,
         pip=("rocketmq==0.4.4",), machines=("x86_64",)),
    Part("openssl", "certificates for the TLS tests (test_tls)", functools.partial(
        _runs, ["openssl", "version"]), debian=("openssl",)),
    Part("prometheus", "a real scrape of /metrics (test_metrics)", functools.partial(
        _program, "prometheus"), debian=("prometheus",)),
    Part("promtool", "the alert rules' unit tests (test_metrics)", functools.partial(
        _program, "promtool"), debian=("prometheus",)),
    Part("tcpdump", "a real capture of a session (test_pcap)", _tcpdump, debian=("tcpdump",)),
    Part("ss", "the listening socket's backlog, as the kernel holds it (test_namesrv_shutdown)",
         functools.partial(_runs, ["ss", "-V"]), debian=("iproute2",)),
    Part("systemd-analyze", "the unit file's check (test_operating)", functools.partial(
        _runs, ["systemd-analyze", "--version"]), debian=("systemd",)),
    Part("pyspark", "the trace job (test_analyze, test_trace_cli, test_spark_cluster)",
         _module("pyspark"), pip=("pyspark>=3.5",)),
    Part("pyarrow", "the trace job's columns (test_columns, test_analyze)", _module("pyarrow"),
         pip=("pyarrow>=14",)),
    Part("matplotlib", "the trace report (test_report, test_analyze)", _module("matplotlib"),
         pip=("matplotlib>=3.7",)),
    Part("mypy", "the typing tests (test_typing)", _module("mypy"), pip=("mypy>=1.10",)),
    Part("uvloop", "the NameServer on uvloop (the loop fixture)", _module("uvloop"),
         pip=("uvloop>=0.19",)),
    Part("build", "the sdist and wheel tests (test_packaging)", _module("build"),
         pip=("build>=1.2",)),
    Part("venv-pack", "the packed environment of test_spark_cluster", _module("venv_pack"),
         pip=("venv-pack>=0.2",)),
    Part("nox-pythons", "make nox (CPython 3.10-3.13 from pyenv)", _nox_pythons),
]}

#: Parts that only a make target other than `make test` needs: the installer reports them,
#: the suite does not.
NOT_IN_SUITE = {"nox-pythons"}


@functools.lru_cache(maxsize=None)
def missing(name: str) -> str | None:
    """Why part ``name`` is missing here, or None (also when it does not apply here)."""
    part = PARTS[name]
    return None if not part.applies else part.check()


# ---------------------------------------------------------------- in tests

def fail_or_skip(name: str, why: str, *, module: bool = False) -> None:
    """A test (or, ``module``, a whole module) cannot run without part ``name``: it fails
    in CI and skips elsewhere, the message naming the part, why, and how to get it."""
    import pytest
    text = f"{MISSING}{name}: {why} (needed by {PARTS[name].needed_by}; {PARTS[name].how()})"
    if in_ci() and (RUNS_REQUIRED or not module):
        pytest.fail(text, pytrace=False)
    pytest.skip(text, allow_module_level=module)


def require(*names: str, module: bool = False) -> None:
    """Go on only if every part is here (see :func:`fail_or_skip`)."""
    import pytest
    _check_names(names)
    for name in names:
        if not PARTS[name].applies:
            pytest.skip(f"{name} does not exist for {platform.machine()}",
                        allow_module_level=module)
        why = missing(name)
        if why:
            fail_or_skip(name, why, module=module)


def _check_names(names) -> None:
    unknown = [n for n in names if n not in PARTS]
    if unknown:
        raise KeyError(f"no such part {unknown} (tests/parts.py lists {sorted(PARTS)})")


# ---------------------------------------------------------------- the installer

def _sh(args: list[str], **kw) -> bool:
    print("+", " ".join(args), flush=True)
    return subprocess.run(args, **kw).returncode == 0


def _apt_install(packages: list[str]) -> None:
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        print(f"parts: cannot install {' '.join(packages)} here (needs root and apt-get)")
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    quiet = dict(env=env, stdout=subprocess.DEVNULL)
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    if not _sh(cmd, **quiet):
        _sh(["apt-get", "update", "-q"], **quiet)
        _sh(cmd, **quiet)


def install() -> list[str]:
    """Install every missing part that can be installed; returns the names still missing."""
    todo = [p for p in PARTS.values() if p.applies and missing(p.name)]
    debian = sorted({pkg for p in todo for pkg in p.debian})
    if debian:
        _apt_install(debian)
    for p in todo:
        if p.pip:
            _sh([sys.executable, "-m", "pip", "install", "-q", *p.pip])
    missing.cache_clear()
    if PARTS["ali-ons"] in todo or missing("ali-ons"):
        if shutil.which("npm"):
            _sh(["npm", "ci", "--prefix", str(INTEROP), "--no-audit", "--no-fund",
                 "--loglevel=error"])
        missing.cache_clear()
    return report()


def report() -> list[str]:
    """Print each part's state; returns the names missing."""
    lacking = []
    for p in PARTS.values():
        if not p.applies:
            state = f"not needed on {platform.machine()}"
        else:
            why = missing(p.name)
            state = "ok" if not why else f"MISSING: {why}"
            if why:
                lacking.append(p.name)
        print(f"  {p.name:16} {state}")
    return lacking


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "check"
    if command not in ("install", "check"):
        print(__doc__)
        return 2
    print(f"parts ({'installing what is missing' if command == 'install' else 'checking'}):")
    lacking = install() if command == "install" else report()
    in_suite = [n for n in lacking if n not in NOT_IN_SUITE]
    if not lacking:
        print("parts: all present")
        return 0
    for n in lacking:
        print(f"parts: {n} is missing ({missing(n)}); needed by {PARTS[n].needed_by}; "
              f"{PARTS[n].how()}")
    if in_suite and (in_ci() or command == "check"):
        print(f"parts: stopping: {', '.join(in_suite)} missing"
              + (" (CI is set: every part must be here)" if in_ci() else ""))
        return 1
    if in_suite:
        print(f"parts: their tests will skip (with CI set they would fail): {', '.join(in_suite)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
