"""The HTML report of ``rmq trace analyze``: tables and PNG charts (matplotlib, Agg)
drawn from the summary the Spark job collected. Pure Python over small data: no
Spark here, so a summary.json can be redrawn anywhere with :func:`write_report`."""

import datetime
import html
import math
import os

__all__ = ["write_report", "figure_request_mix", "figure_latency", "figure_errors",
           "figure_brokers", "figure_topics", "latency_baseline"]

#: Codes drawn on their own in the request mix; the rest are summed as "other".
_MIX_CODES = 8


def _plt():
    import matplotlib
    matplotlib.use("Agg")       # no display on a driver or in CI
    import matplotlib.pyplot as plt
    return plt


def _utc(ns):
    if ns is None:
        return "-"
    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.timezone.utc) \
        .strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _num(x, digits=1):
    if x is None:
        return "-"
    return f"{x:,.{digits}f}" if isinstance(x, float) else f"{x:,}"


def _table(headers, rows, wrap=()):
    """A table whose cells keep to one line (names whole), but the columns ``wrap``
    (indexes: free text such as error messages)."""
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(
        f"<td{' class=wrap' if i in wrap else ''}>{html.escape(str(c))}</td>"
        for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>" if rows else "<p>none</p>"


# ---------------------------------------------------------------- charts
#
# Each chart is drawn by a figure_* function (the matplotlib Figure, or None when
# there is nothing to draw: what the tests look at); write_report saves them (_CHARTS).

def _short(label, width=40):
    # Topic names may be 127 characters: a chart label that long squeezes the plot
    # out of the figure (the table below the chart has them whole).
    return label if len(label) <= width else label[:width - 1] + "…"


def _width_for(labels, base=10.0):
    """A figure width (inches) leaving the plot its room next to long row labels
    (about 0.075 in a character at the default font size): names are drawn whole."""
    longest = max((len(str(x)) for x in labels), default=0)
    return base + max(0, longest - 30) * 0.075


def _save(fig, out_dir, name):
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, name), dpi=100)
    _plt().close(fig)
    return name


def _legend_outside(ax):
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))


def figure_request_mix(summary):
    mix = summary["request_mix"]
    if not mix["counts"]:
        return None
    plt = _plt()
    totals = {}
    for _, name, n in mix["counts"]:
        totals[name] = totals.get(name, 0) + n
    shown = sorted(totals, key=lambda c: (-totals[c], str(c)))[:_MIX_CODES]
    buckets = sorted({b for b, _, _ in mix["counts"]})
    series = {c: dict.fromkeys(buckets, 0) for c in shown + ["other"]}
    for b, name, n in mix["counts"]:
        series[name if name in shown else "other"][b] += n
    width_s = mix["bucket_ns"] / 1e9
    xs = [b * width_s for b in buckets]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    bottom = [0] * len(buckets)
    for name, counts in series.items():
        ys = [counts[b] for b in buckets]
        if not any(ys):
            continue
        ax.bar(xs, ys, width=width_s * 0.9, bottom=bottom, align="edge", label=name)
        bottom = [a + y for a, y in zip(bottom, ys)]
    ax.set_xlabel(f"seconds since {_utc(mix['start_ns'])}")
    ax.set_ylabel(f"requests per {width_s:g} s")
    ax.set_title("Request mix over time")
    _legend_outside(ax)
    return fig


_QUANTILES = ("p50", "p90", "p99", "max")


def latency_baseline(values):
    """Where the latency bars start on their log axis: the power of ten below the
    smallest value, one lower when that value is less than 1.5 times it. A log
    axis has no zero; started at the smallest value, that bar has no length (a
    180 µs p50 next to milliseconds looked like nothing)."""
    positive = [v for v in values if v and v > 0]
    if not positive:
        return 1.0
    lo = min(positive)
    base = 10.0 ** math.floor(math.log10(lo))
    return base / 10 if lo < 1.5 * base else base


def _us(v, _pos=None):
    """A tick label for a latency in µs."""
    for unit, scale in (("s", 1e6), ("ms", 1e3)):
        if v >= scale:
            return f"{v / scale:g} {unit}"
    return f"{v:g} µs"


def figure_latency(summary):
    lat = summary["latency_us"]
    if not lat:
        return None
    plt = _plt()
    from matplotlib.ticker import FuncFormatter
    codes = sorted(lat, key=lambda c: (-lat[c]["count"], c))
    base = latency_baseline([lat[c][q] for c in codes for q in _QUANTILES])
    top = max([lat[c][q] or 0 for c in codes for q in _QUANTILES] + [base * 10])
    labels = [f"{c} ({lat[c]['count']:,})" for c in codes]
    fig, ax = plt.subplots(figsize=(_width_for(labels), 0.6 * len(codes) + 1.8))
    height = 0.2
    for i, q in enumerate(_QUANTILES):
        # from the baseline to the value: a value at (or below) it is no bar
        ax.barh([j + (i - 1.5) * height for j in range(len(codes))],
                [max((lat[c][q] or 0) - base, 0) for c in codes], left=base, height=height,
                label=q)
    ax.set_xscale("log")
    ax.set_xlim(base, top * 1.5)
    ax.xaxis.set_major_formatter(FuncFormatter(_us))
    ax.grid(axis="x", which="major", alpha=0.3)
    _rows(ax, labels, "latency (log scale; the table below has the values)",
          "Latency per request code (answered requests)")
    _legend_outside(ax)
    return fig


def figure_errors(summary):
    errors = summary["errors_per_code"]
    if not errors:
        return None
    plt = _plt()
    labels = [f"{e['request']} → {e['answer']}" for e in errors]
    fig, ax = plt.subplots(figsize=(_width_for(labels), 0.35 * len(errors) + 1.5))
    ax.barh(range(len(errors)), [e["count"] for e in errors], color="tab:red")
    _rows(ax, labels, "answers", "Error answers (answer code != 0) per request code")
    return fig


def broker_label(b):
    return f"{b['broker_name']} {b['broker_addr']}"


def figure_brokers(summary):
    brokers = summary["brokers"]
    if not brokers:
        return None
    plt = _plt()
    start = summary["request_mix"]["start_ns"] or 0
    width_s = summary["request_mix"]["bucket_ns"] / 1e9
    labels = [broker_label(b) for b in brokers]
    fig, ax = plt.subplots(figsize=(_width_for(labels, 11), 0.6 * len(brokers) + 1.8))
    # a legend entry for what is drawn only
    seen = set()

    def label(what):
        if what in seen:
            return None
        seen.add(what)
        return what

    for y, b in enumerate(brokers):
        xs = [bucket * width_s for bucket, _ in b["registrations_per_bucket"]]
        sizes = [12 + 4 * n for _, n in b["registrations_per_bucket"]]
        if xs:
            ax.scatter(xs, [y] * len(xs), s=sizes, color="tab:blue", label=label("registrations"))
        for g in b["gaps"]:
            ax.plot([(g["from_ns"] - start) / 1e9, (g["to_ns"] - start) / 1e9], [y, y],
                    color="tab:red" if g["expired"] else "tab:orange", linewidth=4, alpha=0.6,
                    label=label("gap > timeout" if g["expired"] else "gap > 2x median interval"))
        for e in b["expiries"]:
            ax.scatter([(e["time_ns"] - start) / 1e9], [y], marker="x", s=80, color="black",
                       label=label("expiry"))
    ax.set_yticks(range(len(brokers)), labels)
    ax.set_ylim(len(brokers) - 0.5, -0.5)      # first broker on top, half a row of margin
    ax.set_xlabel(f"seconds since {_utc(start)}")
    ax.set_title("Broker registrations, liveness gaps and expiries")
    if seen:
        _legend_outside(ax)
    return fig


def figure_topics(summary):
    topics = summary["top_topics"]
    if not topics:
        return None
    plt = _plt()
    labels = [_short(t["topic"]) for t in topics]
    fig, ax = plt.subplots(figsize=(_width_for(labels), 0.3 * len(topics) + 1.5))
    ys = range(len(topics))
    found = [t["requests"] - t["not_found"] for t in topics]
    not_found = [t["not_found"] for t in topics]
    # a series no topic has is neither drawn nor in the legend
    if any(found):
        ax.barh(ys, found, label="found")
    if any(not_found):
        ax.barh(ys, not_found, left=found, color="tab:gray", label="TOPIC_NOT_EXIST")
    _rows(ax, labels, "GET_ROUTEINFO_BY_TOPIC requests", f"Hottest topics (top {len(topics)})")
    _legend_outside(ax)
    return fig


def _rows(ax, labels, xlabel, title):
    """Finish a chart of one horizontal row per label, the first on top."""
    ax.set_yticks(range(len(labels)), labels)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xlabel(xlabel)
    ax.set_title(title)


# ---------------------------------------------------------------- the page

_CSS = """body{font-family:sans-serif;margin:2em;max-width:80em}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;
padding:.2em .6em;text-align:right;white-space:nowrap}th{background:#eee}
td:first-child{text-align:left}td.wrap{white-space:normal;text-align:left;min-width:12em}
img{max-width:100%}"""


def _img(name):
    return f'<p><img src="{html.escape(name)}" alt="{html.escape(name)}"></p>' if name else ""


#: Each chart and its file, in the report's order.
_CHARTS = ((figure_request_mix, "requests_over_time.png"), (figure_latency, "latency.png"),
           (figure_errors, "errors.png"), (figure_brokers, "brokers.png"),
           (figure_topics, "topics.png"))


def write_report(out_dir, summary):
    """Write report.html and its charts into ``out_dir``; the chart files written."""
    charts = []
    for figure, name in _CHARTS:
        fig = figure(summary)
        charts.append(None if fig is None else _save(fig, out_dir, name))
    mix, lat, err, brk, top = charts
    s = summary
    parts = [f"<!doctype html><meta charset='utf-8'><title>rmq trace report</title>"
             f"<style>{_CSS}</style><h1>rmq trace report</h1>"]
    parts.append(_table(("", ""), [
        ("inputs", len(s["inputs"])), ("from", _utc(s["start_ns"])), ("to", _utc(s["end_ns"])),
        ("frames", _num(s["frames"])), ("undecodable frames", _num(s["undecodable_frames"])),
        ("unreadable inputs", _num(s["unreadable_inputs"])),
        ("connections", _num(s["connections"])), ("requests", _num(s["requests"])),
        ("oneway", _num(s["oneway"])), ("unanswered", _num(s["unanswered"])),
        ("error answers", _num(s["errors"]))]))
    if s["input_errors"]:
        parts.append("<h2>Undecodable frames and unreadable inputs</h2>")
        parts.append(_table(("file", "record", "error"), [
            (e["file"], e["record"], e["error"]) for e in s["input_errors"]], wrap=(2,)))

    parts.append("<h2>Request mix over time</h2>" + _img(mix))
    parts.append(_table(("request", "count"), sorted(
        s["requests_per_code"].items(), key=lambda kv: -kv[1])))
    parts.append("<h3>Answers</h3>" + _table(("answer", "count"), sorted(
        s["answers_per_code"].items(), key=lambda kv: -kv[1])))

    parts.append("<h2>Latency (µs) per request code</h2>" + _img(lat))
    parts.append(_table(("request", "answered", "p50", "p90", "p99", "max"), [
        (c, _num(q["count"]), _num(q["p50"]), _num(q["p90"]), _num(q["p99"]), _num(q["max"]))
        for c, q in sorted(s["latency_us"].items(), key=lambda kv: -kv[1]["count"])]))

    parts.append("<h2>Error answers</h2>" + _img(err))
    parts.append(_table(("request", "answer", "count"), [
        (e["request"], e["answer"], _num(e["count"])) for e in s["errors_per_code"]]))

    parts.append("<h2>Brokers</h2>" + _img(brk))
    parts.append(_table(
        ("broker", "address", "cluster", "registrations", "heartbeats", "median interval s",
         "flagged gaps", "expiries"),
        [(b["broker_name"], b["broker_addr"], b["cluster"] or "-", _num(b["registrations"]),
          _num(b["heartbeats"]), _num(b["median_interval_s"], 2), len(b["gaps"]),
          ", ".join(f"{e['reason']} at {_utc(e['time_ns'])}" for e in b["expiries"]) or "-")
         for b in s["brokers"]], wrap=(7,)))

    parts.append("<h2>Hottest topics (GET_ROUTEINFO_BY_TOPIC)</h2>" + _img(top))
    parts.append(_table(("topic", "requests", "TOPIC_NOT_EXIST"), [
        (t["topic"], _num(t["requests"]), _num(t["not_found"])) for t in s["top_topics"]]))
    with open(os.path.join(out_dir, "report.html"), "w", encoding="utf-8") as f:
        f.write("\n".join(parts) + "\n")
    return [c for c in charts if c]
