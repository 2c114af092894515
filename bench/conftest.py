"""Benchmarks: compiled core vs pure-Python reference vs stdlib/isal, side by side.

`make bench` runs them with timing and prints the target figures at the end;
`make test` runs them once with --benchmark-disable as smoke tests.
"""

import pytest

_figures = []


@pytest.fixture
def figure(request):
    """figure(benchmark, name, units_per_call, unit): after a timed run, record
    the throughput from the best (min) round for the summary."""

    def record(benchmark, name, units_per_call, unit):
        stats = getattr(benchmark, "stats", None)
        if stats is None or not getattr(benchmark, "enabled", True):
            return
        best = stats.stats.min
        _figures.append((name, units_per_call / best if best else float("inf"), unit, best))

    return record


@pytest.fixture
def cpu_figure(request):
    """cpu_figure(benchmark, name, seconds): record a CPU time per call (measured by
    the benchmark itself, e.g. with time.thread_time) for the summary."""

    def record(benchmark, name, seconds):
        if getattr(benchmark, "enabled", True) and getattr(benchmark, "stats", None):
            _figures.append((name, 0.0, "ms CPU/call", seconds))

    return record


def pytest_terminal_summary(terminalreporter):
    if not _figures:
        return
    tr = terminalreporter
    tr.section("rmq figures (best round)")
    by_name = {}
    for name, rate, unit, best in _figures:
        by_name[name] = rate
        if unit == "ns/call":
            tr.write_line(f"{name:<48} {best * 1e9:>12.1f} ns/call")
        elif unit == "ms CPU/call":
            tr.write_line(f"{name:<48} {best * 1e3:>12.2f} ms CPU/call (median)")
        else:
            tr.write_line(f"{name:<48} {rate:>14,.0f} {unit}")
    ratios = [
        ("FrameDecoder compiled / python", "framedecoder compiled", "framedecoder python"),
        ("serve_routes compiled / python", "serve_routes compiled", "serve_routes python"),
        ("register 10000 topics compiled / python", "register 10000 topics compiled",
         "register 10000 topics python"),
        ("crc32 16MiB rmq / isal", "crc32 16MiB rmq", "crc32 16MiB isal"),
        ("crc32 16MiB rmq / zlib", "crc32 16MiB rmq", "crc32 16MiB zlib"),
        ("route encode standard compiled / python", "route encode standard compiled",
         "route encode standard python"),
        ("route encode legacy compiled / python", "route encode legacy compiled",
         "route encode legacy python"),
        ("register body decode compiled / python", "register body decode compiled",
         "register body decode python"),
        ("register body decode compressed compiled / python",
         "register body decode compressed compiled", "register body decode compressed python"),
        ("analyze: spark rdd workers / standalone 2 procs", "analyze spark rdd workers compiled",
         "analyze standalone 2 processes"),
        ("analyze: spark rdd binaryFiles / standalone 2 procs",
         "analyze spark rdd spark compiled", "analyze standalone 2 processes"),
        ("analyze: spark df / standalone 2 procs", "analyze spark df compiled",
         "analyze standalone 2 processes"),
        ("analyze: spark parquet / standalone 2 procs", "analyze spark parquet compiled",
         "analyze standalone 2 processes"),
        ("analyze: standalone compiled / python", "analyze standalone 1 process compiled",
         "analyze standalone 1 process python"),
        ("analyze: spark rdd workers compiled / python", "analyze spark rdd workers compiled",
         "analyze spark rdd workers python"),
        ("analyze: spark rdd binaryFiles compiled / python", "analyze spark rdd spark compiled",
         "analyze spark rdd workers python"),
        ("analyze: spark df compiled / python", "analyze spark df compiled",
         "analyze spark df python"),
    ]
    for label, a, b in ratios:
        if a in by_name and b in by_name and by_name[b]:
            tr.write_line(f"{label:<48} {by_name[a] / by_name[b]:>12.2f}x")
