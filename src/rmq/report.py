"""The HTML report of ``rmq trace analyze``: tables and PNG charts (matplotlib, Agg)
drawn from the summary the Spark job collected. Pure Python over small data: no
Spark here, so a summary.json can be redrawn anywhere with :func:`write_report`."""

import datetime
import html
import os

__all__ = ["write_report"]

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


def _table(headers, rows):
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>" if rows else "<p>none</p>"


# ---------------------------------------------------------------- charts

def _short(label, width=40):
    # Topic names may be 127 characters: a chart label that long squeezes the plot
    # out of the figure (the table below the chart has them whole).
    return label if len(label) <= width else label[:width - 1] + "…"


def _save(fig, out_dir, name):
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, name), dpi=100)
    _plt().close(fig)
    return name


def chart_request_mix(summary, out_dir):
    mix = summary["request_mix"]
    if not mix["counts"]:
        return None
    plt = _plt()
    totals = {}
    for _, name, n in mix["counts"]:
        totals[name] = totals.get(name, 0) + n
    shown = sorted(totals, key=lambda c: (-totals[c], c))[:_MIX_CODES]
    buckets = sorted({b for b, _, _ in mix["counts"]})
    series = {c: dict.fromkeys(buckets, 0) for c in shown + ["other"]}
    for b, name, n in mix["counts"]:
        series[name if name in shown else "other"][b] += n
    if not any(series["other"].values()):
        del series["other"]
    width_s = mix["bucket_ns"] / 1e9
    xs = [b * width_s for b in buckets]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    bottom = [0] * len(buckets)
    for name, counts in series.items():
        ys = [counts[b] for b in buckets]
        ax.bar(xs, ys, width=width_s * 0.9, bottom=bottom, align="edge", label=name)
        bottom = [a + y for a, y in zip(bottom, ys)]
    ax.set_xlabel(f"seconds since {_utc(mix['start_ns'])}")
    ax.set_ylabel(f"requests per {width_s:g} s")
    ax.set_title("Request mix over time")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, out_dir, "requests_over_time.png")


def chart_latency(summary, out_dir):
    lat = summary["latency_us"]
    if not lat:
        return None
    plt = _plt()
    codes = sorted(lat, key=lambda c: -lat[c]["count"])
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(codes) + 1.8))
    height = 0.2
    for i, q in enumerate(("p50", "p90", "p99", "max")):
        ax.barh([j + (i - 1.5) * height for j in range(len(codes))],
                [max(lat[c][q], 1e-3) for c in codes], height=height, label=q)
    ax.set_xscale("log")
    return _rows(fig, ax, out_dir, "latency.png", [f"{c} ({lat[c]['count']:,})" for c in codes],
                 "latency (µs, log scale)", "Latency per request code (answered requests)",
                 legend=True)


def chart_errors(summary, out_dir):
    errors = summary["errors_per_code"]
    if not errors:
        return None
    plt = _plt()
    labels = [f"{e['request']} → {e['answer']}" for e in errors]
    fig, ax = plt.subplots(figsize=(10, 0.35 * len(errors) + 1.5))
    ax.barh(range(len(errors)), [e["count"] for e in errors], color="tab:red")
    return _rows(fig, ax, out_dir, "errors.png", labels, "answers",
                 "Error answers (answer code != 0) per request code")


def chart_brokers(summary, out_dir):
    brokers = summary["brokers"]
    if not brokers:
        return None
    plt = _plt()
    start = summary["request_mix"]["start_ns"] or 0
    width_s = summary["request_mix"]["bucket_ns"] / 1e9
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(brokers) + 1.8))
    for y, b in enumerate(brokers):
        xs = [bucket * width_s for bucket, _ in b["registrations_per_bucket"]]
        sizes = [12 + 4 * n for _, n in b["registrations_per_bucket"]]
        ax.scatter(xs, [y] * len(xs), s=sizes, color="tab:blue",
                   label="registrations" if y == 0 else None)
        for g in b["gaps"]:
            ax.plot([(g["from_ns"] - start) / 1e9, (g["to_ns"] - start) / 1e9], [y, y],
                    color="tab:red" if g["expired"] else "tab:orange", linewidth=4, alpha=0.6)
        for e in b["expiries"]:
            ax.scatter([(e["time_ns"] - start) / 1e9], [y], marker="x", s=80, color="black")
    ax.set_yticks(range(len(brokers)),
                  [f"{b['broker_name']} {b['broker_addr']}" for b in brokers])
    ax.set_ylim(len(brokers) - 0.5, -0.5)      # first broker on top, half a row of margin
    ax.set_xlabel(f"seconds since {_utc(start)}")
    ax.set_title("Broker registrations (orange: gap > 2x median interval, "
                 "red: > timeout, x: expiry)")
    return _save(fig, out_dir, "brokers.png")


def chart_topics(summary, out_dir):
    topics = summary["top_topics"]
    if not topics:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 0.35 * len(topics) + 1.5))
    ys = range(len(topics))
    found = [t["requests"] - t["not_found"] for t in topics]
    ax.barh(ys, found, label="found")
    ax.barh(ys, [t["not_found"] for t in topics], left=found, color="tab:gray",
            label="TOPIC_NOT_EXIST")
    return _rows(fig, ax, out_dir, "topics.png", [_short(t["topic"]) for t in topics],
                 "GET_ROUTEINFO_BY_TOPIC requests", f"Hottest topics (top {len(topics)})",
                 legend=True)


def _rows(fig, ax, out_dir, name, labels, xlabel, title, legend=False):
    """Finish a chart of one horizontal row per label, the first on top."""
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    if legend:
        ax.legend(fontsize="small")
    return _save(fig, out_dir, name)


# ---------------------------------------------------------------- the page

_CSS = """body{font-family:sans-serif;margin:2em;max-width:70em}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;
padding:.2em .6em;text-align:right}th{background:#eee}td:first-child{text-align:left}
img{max-width:100%}"""


def _img(name):
    return f'<p><img src="{html.escape(name)}" alt="{html.escape(name)}"></p>' if name else ""


def write_report(out_dir, summary):
    """Write report.html and its charts into ``out_dir``; the chart files written."""
    charts = [chart(summary, out_dir) for chart in (
        chart_request_mix, chart_latency, chart_errors, chart_brokers, chart_topics)]
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
            (e["file"], e["record"], e["error"]) for e in s["input_errors"]]))

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
         for b in s["brokers"]]))

    parts.append("<h2>Hottest topics (GET_ROUTEINFO_BY_TOPIC)</h2>" + _img(top))
    parts.append(_table(("topic", "requests", "TOPIC_NOT_EXIST"), [
        (t["topic"], _num(t["requests"]), _num(t["not_found"])) for t in s["top_topics"]]))
    with open(os.path.join(out_dir, "report.html"), "w", encoding="utf-8") as f:
        f.write("\n".join(parts) + "\n")
    return [c for c in charts if c]
