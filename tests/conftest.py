"""Fixtures shared by the whole suite.

``impl`` runs a test once on the compiled core (``rmq._core``, id ``c``) and once
on the pure-Python reference (``rmq.fallback``, id ``py``); both expose the same
names. The compiled one is skipped only under ``RMQ_PUREPYTHON=1``: otherwise a
missing or broken build is an error, never a silent pass.

Hypothesis profiles: ``default`` (200 examples), ``quick`` and ``thorough``;
choose one with ``HYPOTHESIS_PROFILE``.

The suite runs twice in ``make test``: on the compiled core, then with
``RMQ_PUREPYTHON=1``. The second pass runs only what differs between them: tests that
take both implementations as fixtures (``impl``, ``RT``, ``compiled``, ``fallback``,
``bodies``) ran both already, and tests marked ``once`` (the slow integrations, and
what does not depend on the implementation) run in the first pass only.

``@pytest.mark.requires("openssl", ...)``: the test needs parts beyond rmq (tests/parts.py,
the one list of them); without one it fails when ``CI`` is set and skips elsewhere, and
the summary's last line says which parts were missing.
"""

import os
import re

import pytest
from hypothesis import settings

import dists
import parts
from nameserver import DEFAULT_SERVER, LOOPS, SERVERS
from support import PUREPYTHON, load_compiled, load_fallback, route_table

settings.register_profile("default", max_examples=200, deadline=None)
settings.register_profile("quick", max_examples=25, deadline=None)
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

#: rmq.bodies takes these from the selected core; the others compose them.
_BODIES_FROM_CORE = (
    "json_loads", "json_dumps", "decode_register_broker_body",
    "encode_register_broker_body", "encode_topic_route_data",
)


#: Fixtures that give a test both implementations whatever RMQ_PUREPYTHON says.
BOTH_IMPLEMENTATIONS = {"impl", "RT", "compiled", "fallback", "bodies"}


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long integration test (Spark, builds, "
                                       "real clients); `make test-fast` leaves them out")
    config.addinivalue_line("markers", "once: runs in the compiled pass only: it does not "
                                       "depend on which implementation rmq selected")
    config.addinivalue_line("markers", "requires(*parts): needs these parts (tests/parts.py): "
                                       "fails without one when CI is set, else skips")
    parts.RUNS_REQUIRED = _selects(config.option.markexpr, "requires")
    # pytest-xdist's loadscope hands out modules biggest (in tests) first unless told
    # not to, which started the modules that take minutes (LONG_MODULES: a few tests
    # each) last, on a worker that then ran alone for minutes: the collection's order
    # instead (a compiled pass of 504 s then).
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def _selects(markexpr, marker):
    """Whether ``-m markexpr`` keeps a test that has only ``marker``."""
    if not markexpr:
        return True
    from _pytest.mark.expression import Expression
    return Expression.compile(markexpr).evaluate(lambda name, **kwargs: name == marker)


def pytest_runtest_setup(item):
    for mark in item.iter_markers("requires"):
        parts.require(*mark.args)


def pytest_terminal_summary(terminalreporter):
    """The last line says which parts were missing, and what that cost: tests skipped,
    or (with CI set) failed."""
    lost = {}
    for key in ("skipped", "failed", "error"):
        for report in terminalreporter.stats.get(key, ()):
            text = getattr(report, "longreprtext", "") or str(getattr(report, "longrepr", ""))
            for name in re.findall(re.escape(parts.MISSING) + r"([\w.-]+)", text)[:1]:
                outcome = "skipped" if key == "skipped" else "failed"
                lost.setdefault(name, {}).setdefault(outcome, 0)
                lost[name][outcome] += 1
    if lost:
        terminalreporter.write_line(
            "parts missing: " + ", ".join(
                f"{name} ({', '.join(f'{k} {outcome}' for outcome, k in sorted(counts.items()))})"
                for name, counts in sorted(lost.items())),
            red=True, bold=True)
    else:
        terminalreporter.write_line("parts: none missing (no test skipped or failed for a "
                                    "missing part)", green=True)


#: The modules that take minutes (a Spark cluster, package builds, spark-submit runs),
#: run first: pytest-xdist's loadscope hands modules out in collection order (see
#: pytest_configure), and one of them started last would be the suite's tail.
LONG_MODULES = ("test_spark_cluster.py", "test_packaging.py", "test_analyze.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))   # (stable)
    if not PUREPYTHON or os.environ.get("RMQ_PURE_PASS_ALL"):
        return
    keep, skip = [], []
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker("once") or fixtures & BOTH_IMPLEMENTATIONS:
            skip.append(item)
        else:
            keep.append(item)
    if skip:
        config.hook.pytest_deselected(items=skip)
        items[:] = keep


@pytest.fixture(scope="module", params=["c", "py"])
def impl(request):
    """The module under test: rmq._core or rmq.fallback."""
    return load_compiled() if request.param == "c" else load_fallback()


@pytest.fixture(scope="module")
def compiled():
    return load_compiled()


@pytest.fixture(scope="module")
def fallback():
    return load_fallback()


@pytest.fixture(params=["py", "c"])
def RT(request):
    """A RouteTable class over the reference's storage (``py``), then over the
    compiled one (``c``)."""
    return route_table(load_fallback() if request.param == "py" else load_compiled())


@pytest.fixture(scope="module")
def bodies(impl):
    """``rmq.bodies`` running on ``impl``'s JSON reader/writer and body codecs."""
    import rmq.bodies

    with pytest.MonkeyPatch.context() as mp:
        for name in _BODIES_FROM_CORE:
            mp.setattr(rmq.bodies, name, getattr(impl, name))
        yield rmq.bodies


@pytest.fixture(scope="session")
def release_dists(tmp_path_factory):
    """(sdist, wheel, the build's output) of this tree, built once for the whole session
    whatever the xdist worker (tests/dists.py)."""
    parts.require("build")
    return dists.build(dists.shared_dir(tmp_path_factory))


@pytest.fixture(params=SERVERS)
def each_server(request):
    """Every NameServer the test starts (running_namesrv without ``loop``) runs on
    this network layer: the asyncio server, then the compiled core's I/O engine.
    Modules whose tests hold for both use it: ``pytestmark =
    pytest.mark.usefixtures("each_server")``."""
    DEFAULT_SERVER["server"] = request.param
    try:
        yield request.param
    finally:
        DEFAULT_SERVER["server"] = "asyncio"


@pytest.fixture(params=LOOPS)
def loop(request):
    """The event loop a NameServer under test runs on (uvloop's tests, like uvloop's
    own Test_UV_TCP / Test_AIO_TCP, run once per loop)."""
    if request.param == "uvloop":
        parts.require("uvloop")
    return request.param
