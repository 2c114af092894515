"""The report's charts, from the figures rmq.trace.report draws (not their pixels):
latency bars with a length from a baseline below every value, legends naming
what is drawn only, broker names whole."""

import math

import pytest

import parts  # noqa: E402

parts.require("matplotlib", module=True)

from rmq.trace import report  # noqa: E402

# The charts do not depend on which core decoded the trace.
pytestmark = [pytest.mark.once, pytest.mark.requires("matplotlib")]

S = 1_000_000_000
START = 1_700_000_000 * S


def summary(**over):
    s = {
        "inputs": ["file:/t/a-000000.rmqtrace"], "start_ns": START, "end_ns": START + 300 * S,
        "frames": 10, "undecodable_frames": 0, "unreadable_inputs": 0, "connections": 2,
        "requests": 5, "oneway": 0, "unanswered": 0, "errors": 0, "input_errors": [],
        "requests_per_code": {"GET_ROUTEINFO_BY_TOPIC": 5}, "answers_per_code": {"SUCCESS": 5},
        "errors_per_code": [],
        "request_mix": {"bucket_ns": 5 * S, "start_ns": START,
                        "counts": [[0, "GET_ROUTEINFO_BY_TOPIC", 3], [1, "REGISTER_BROKER", 2]]},
        "latency_us": {
            "GET_ROUTEINFO_BY_TOPIC": {"count": 900, "p50": 180.0, "p90": 950.0,
                                       "p99": 12_000.0, "max": 48_000.0},
            "REGISTER_BROKER": {"count": 40, "p50": 2_400.0, "p90": 9_000.0,
                                "p99": 31_000.0, "max": 95_000.0}},
        "brokers": [], "top_topics": [],
    }
    s.update(over)
    return s


def broker(name, *, gaps=(), expiries=()):
    return {"broker_name": name, "broker_addr": "10.0.0.1:10911", "cluster": "C",
            "registrations": 3, "heartbeats": 0, "unregistrations": 0, "median_interval_s": 30.0,
            "timeout_s": 120.0, "gaps": list(gaps), "expiries": list(expiries),
            "registrations_per_bucket": [[0, 1], [6, 1], [12, 1]]}


@pytest.fixture(autouse=True)
def close_figures():
    yield
    report._plt().close("all")


def bars(ax):
    """(label, [patches]) of each bar series drawn on ``ax``."""
    return [(c.get_label(), list(c)) for c in ax.containers]


def legend(ax):
    lg = ax.get_legend()
    return [] if lg is None else [t.get_text() for t in lg.get_texts()]


# ---------------------------------------------------------------- latency

@pytest.mark.parametrize("values, base", [
    ([180, 950, 48_000], 100), ([320, 600], 100), ([120, 5_000], 10), ([100], 10),
    ([0.4, 3], 0.1), ([0, 0], 1.0)])
def test_latency_baseline_is_below_the_smallest_value(values, base):
    assert report.latency_baseline(values) == pytest.approx(base)
    assert all(report.latency_baseline(values) < v for v in values if v > 0)


def test_latency_bars_start_below_every_value_and_a_p50_of_180us_shows():
    s = summary()
    fig = report.figure_latency(s)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    base = report.latency_baseline([q[k] for q in s["latency_us"].values()
                                    for k in ("p50", "p90", "p99", "max")])
    lo, hi = ax.get_xlim()
    assert lo == pytest.approx(base) and base < 180
    series = dict(bars(ax))
    assert list(series) == ["p50", "p90", "p99", "max"] == legend(ax)
    for q, patches in series.items():
        for patch, code in zip(patches, ["GET_ROUTEINFO_BY_TOPIC", "REGISTER_BROKER"]):
            assert patch.get_x() == pytest.approx(base)
            assert patch.get_x() + patch.get_width() == pytest.approx(s["latency_us"][code][q])
    # the 180 µs bar takes a visible share of the axis next to the 95 ms one
    p50 = series["p50"][0]
    share = math.log10((p50.get_x() + p50.get_width()) / lo) / math.log10(hi / lo)
    assert share > 0.05
    # rows in order of answered requests, first on top, labels whole
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "GET_ROUTEINFO_BY_TOPIC (900)", "REGISTER_BROKER (40)"]
    assert ax.get_ylim()[0] > ax.get_ylim()[1]


def test_no_answered_requests_no_latency_chart():
    assert report.figure_latency(summary(latency_us={})) is None


# ---------------------------------------------------------------- legends

def topics(*rows):
    return [{"topic": t, "requests": n, "not_found": nf} for t, n, nf in rows]


@pytest.mark.parametrize("rows, shown", [
    ((("A", 30, 0), ("B", 20, 0)), ["found"]),
    ((("Missing-1", 10, 10), ("Missing-2", 5, 5)), ["TOPIC_NOT_EXIST"]),
    ((("A", 30, 0), ("Missing-1", 10, 10)), ["found", "TOPIC_NOT_EXIST"]),
])
def test_the_topic_legend_names_the_series_that_have_bars(rows, shown):
    ax = report.figure_topics(summary(top_topics=topics(*rows))).axes[0]
    drawn = [label for label, patches in bars(ax) if any(p.get_width() > 0 for p in patches)]
    assert legend(ax) == drawn == shown


def test_the_request_mix_legend_names_the_series_that_have_bars():
    counts = [[b, f"CODE_{c}", 1] for b in range(3) for c in range(9)]     # 9 codes: no "other"
    ax = report.figure_request_mix(summary(request_mix={
        "bucket_ns": S, "start_ns": START, "counts": counts[:-1] + [[2, "CODE_8", 1]]})).axes[0]
    drawn = [label for label, patches in bars(ax) if any(p.get_height() > 0 for p in patches)]
    assert legend(ax) == drawn and len(drawn) == 9
    ax = report.figure_request_mix(summary()).axes[0]
    assert legend(ax) == ["GET_ROUTEINFO_BY_TOPIC", "REGISTER_BROKER"]      # no empty "other"


def test_the_broker_legend_names_what_is_drawn():
    ax = report.figure_brokers(summary(brokers=[broker("b0"), broker("b1")])).axes[0]
    assert legend(ax) == ["registrations"]
    gap = {"from_ns": START + 30 * S, "to_ns": START + 200 * S, "expired": True}
    expiry = {"time_ns": START + 150 * S, "reason": "timeout"}
    ax = report.figure_brokers(summary(brokers=[
        broker("b0"), broker("b1", gaps=[gap], expiries=[expiry])])).axes[0]
    assert legend(ax) == ["registrations", "gap > timeout", "expiry"]


# ---------------------------------------------------------------- names whole

def test_long_broker_names_are_drawn_whole_inside_the_figure():
    names = ["prod-eu-west-1-rocketmq-broker-0-cluster-a", "b1",
             "a-broker-name-of-sixty-characters-xxxxxxxxxxxxxxxxxxxxxxxxxx"]
    fig = report.figure_brokers(summary(brokers=[broker(n) for n in names]))
    fig.tight_layout()
    ax = fig.axes[0]
    labels = ax.get_yticklabels()
    assert [t.get_text() for t in labels] == [f"{n} 10.0.0.1:10911" for n in names]
    renderer = fig.canvas.get_renderer()
    width = fig.bbox.width
    for t in labels:
        box = t.get_window_extent(renderer)
        assert 0 <= box.x0 and box.x1 <= width
    # the figure grows with the names: the plot keeps its width (6 inches at least)
    assert ax.get_window_extent(renderer).width >= 6 * fig.dpi


def test_report_tables_keep_names_on_one_line(tmp_path):
    expiry = {"time_ns": START + 150 * S, "reason": "silent at end"}
    report.write_report(str(tmp_path), summary(brokers=[broker("broker-0", expiries=[expiry])]))
    page = (tmp_path / "report.html").read_text()
    assert "white-space:nowrap" in page
    assert "<td>broker-0</td>" in page                  # the name: not a wrapping cell
    assert "<td class=wrap>silent at end at " in page   # free text may wrap
    for name in ("requests_over_time.png", "latency.png", "brokers.png"):
        assert (tmp_path / name).exists() and f'src="{name}"' in page
