"""``report.html`` and its plots (matplotlib PNGs) from ``score.json`` + ``series.json`` — no Spark needed.

Plots: publish and end-to-end latency over time, throughput over time (with backlog), errors by kind
(over time and in total), and consumer cache / RSS when the run sampled them. Injected faults are
drawn as vertical lines so cause and effect sit on one axis.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from bench.expect import Check, evaluate


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only; never a display
    import matplotlib.pyplot as plt

    return plt


def _faults(ax: Any, series: dict[str, Any]) -> None:
    for f in series.get("faults") or []:
        t = f.get("t")
        if t is not None:
            ax.axvline(t, color="tab:red", linestyle="--", linewidth=1, alpha=0.7)
            # Inside the axes, just right of its line (a label left of a line at t=0 would be cut off), and
            # at the bottom: the legends sit at the top.
            ax.annotate(
                str(f.get("kind")),
                (t, 0.04),
                xycoords=("data", "axes fraction"),
                xytext=(3, 0),
                textcoords="offset points",
                fontsize=7,
                color="tab:red",
                rotation=90,
                va="bottom",
                ha="left",
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
            )


def _run_span(ax: Any, series: dict[str, Any], score: dict[str, Any] | None) -> None:
    """The x axis covers the whole run (warm-up + load + drain seconds), not just seconds with data."""
    scen = (score or {}).get("scenario") or {}
    load_s = float(scen.get("warmup_s") or 0) + float(scen.get("duration_s") or 0)
    last = max([float(x) for x in series.get("second") or [0]] + [load_s])
    ax.set_xlim(0, max(1.0, last + 1))


def _none_to_nan(values: list[Any]) -> list[float]:
    return [float("nan") if v is None else float(v) for v in values]


def plot_latency(series: dict[str, Any], path: Path, score: dict[str, Any] | None = None) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.6))
    t = series.get("second", [])
    # p99 drawn bold, p50 thin; markers so that a second with data between empty ones still shows.
    for key, label, color, width in (
        ("publish_p50_ms", "publish p50", "tab:blue", 1.0),
        ("publish_p99_ms", "publish p99", "tab:blue", 2.2),
        ("e2e_p50_ms", "end-to-end p50", "tab:orange", 1.0),
        ("e2e_p99_ms", "end-to-end p99", "tab:orange", 2.2),
    ):
        vals = _none_to_nan(series.get(key, []))
        if any(v == v for v in vals):  # any non-NaN
            style = "-" if "p50" in key else "--"
            ax.plot(
                t,
                vals,
                style,
                color=color,
                label=label,
                linewidth=width,
                marker="o",
                markersize=3 if "p50" in key else 5,
            )
    ax.set_xlabel("seconds since load start")
    ax.set_ylabel("latency (ms)")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_title("Latency over time (per second)")
    ax.grid(True, alpha=0.3)
    _run_span(ax, series, score)
    _faults(ax, series)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_throughput(series: dict[str, Any], path: Path, score: dict[str, Any] | None = None) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.6))
    t = series.get("second", [])
    # Per-second counts are steps, not trends: draw them as such.
    ax.step(t, series.get("sent", []), where="post", label="sent/s", linewidth=1.2)
    ax.step(t, series.get("acked", []), where="post", label="acked/s", linewidth=1.4)
    ax.step(t, series.get("consumed", []), where="post", label="consumed/s", linewidth=1.4, linestyle="--")
    ax.set_xlabel("seconds since load start")
    ax.set_ylabel("messages per second")
    ax.set_title("Throughput and backlog over time")
    ax.grid(True, alpha=0.3)
    ax2 = ax.twinx()
    ax2.step(t, series.get("backlog", []), where="post", color="tab:gray", linestyle=":", label="backlog")
    ax2.set_ylabel("backlog (messages)")
    ax2.set_ylim(bottom=0, top=max(1, max(series.get("backlog") or [0]) * 1.1))
    _run_span(ax, series, score)
    _faults(ax, series)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_errors(score: dict[str, Any], series: dict[str, Any], path: Path) -> Path:
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [2, 1]})
    t = series.get("second", [])
    errors = series.get("errors") or {}
    for kind, vals in sorted(errors.items()):
        ax1.step(t, vals, where="post", label=kind, linewidth=1.2)
    ax1.set_title("Errors and busy answers over time")
    ax1.set_xlabel("seconds since load start")
    ax1.set_ylabel("per second")
    ax1.grid(True, alpha=0.3)
    _run_span(ax1, series, score)
    _faults(ax1, series)
    if errors:
        ax1.legend(fontsize=7, loc="upper left")
    totals = (score.get("errors") or {}).get("all_by_kind") or {}
    kinds = sorted(totals, key=lambda k: -totals[k])
    ax2.barh(kinds or ["(none)"], [totals[k] for k in kinds] or [0], color="tab:red")
    ax2.set_title("Errors by kind (all attempts)")
    ax2.invert_yaxis()
    ax2.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_memory(series: dict[str, Any], path: Path) -> Path | None:
    cache = series.get("cache_bytes") or []
    rss = series.get("rss_bytes") or []
    if not any(v for v in cache) and not any(v for v in rss):
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.2))
    t = series.get("second", [])
    mib = 1024 * 1024
    ax.plot(t, [float("nan") if v is None else v / mib for v in cache], label="consumer cache (max) MiB")
    ax.plot(t, [float("nan") if v is None else v / mib for v in rss], label="worker RSS (max) MiB")
    ax.set_xlabel("seconds since load start")
    ax.set_ylabel("MiB")
    ax.set_title("Client memory")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def _table(rows: list[tuple[str, Any]]) -> str:
    body = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_fmt(v))}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:,.3f}".rstrip("0").rstrip(".")
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt(x)}" for k, x in v.items()) or "—"
    return str(v)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em;max-width:1100px;color:#222}
h1{font-size:1.5em} h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0} th,td{padding:.2em .8em;border-bottom:1px solid #eee;text-align:left}
th{font-weight:600;color:#444} .bad{color:#b00020;font-weight:600} .ok{color:#1b7f3a;font-weight:600}
img{max-width:100%;border:1px solid #eee;margin:.5em 0} .grid{display:flex;gap:2em;flex-wrap:wrap}
code{background:#f5f5f5;padding:0 .3em}
.banner{font-size:1.3em;padding:.4em .8em;border-radius:4px}
.banner.ok{background:#e6f4ea} .banner.bad{background:#fde7ea}
.glance{display:grid;grid-template-columns:1fr 1fr;gap:0 2em} .glance .wide{grid-column:1 / span 2}
tr.ok td,tr.ok th{color:#1b7f3a} tr.bad td,tr.bad th{color:#b00020} td.why{color:#555;font-size:.9em}
"""


def describe_run(scen: dict[str, Any]) -> str:
    """One sentence: the load and the faults of the scenario."""
    rate = scen.get("producer_rate")
    parts = [
        f"{scen.get('send_mode', '?')} sends of {_fmt(scen.get('message_size'))} B",
        f"{scen.get('topics')} topic × {scen.get('queues_per_topic')} queues",
        f"{scen.get('producers_per_topic')} producer(s) → "
        f"{(scen.get('subscriptions_per_topic') or 0) * (scen.get('consumers_per_subscription') or 0)} "
        "consumer(s) per topic",
        f"{_fmt(rate)} msg/s" if rate else "unlimited rate",
        f"{_fmt(scen.get('duration_s'))} s"
        + (f" after {_fmt(scen.get('warmup_s'))} s warm-up" if scen.get("warmup_s") else ""),
    ]
    faults = [
        f"{f.get('kind')} {_fmt(f.get('duration_ms'))} ms at {_fmt(f.get('at_s'))} s" for f in scen.get("faults") or []
    ]
    faults += [f"{m.get('property')}={m.get('value')} on messages" for m in scen.get("message_faults") or []]
    return ", ".join(parts) + (("; faults: " + ", ".join(faults)) if faults else "; no faults")


GLANCE_METRICS = (
    ("publish msg/s", "publish.rate_msg_s", "higher"),
    ("publish p99 ms", "publish.latency_ms.p99", "lower"),
    ("end-to-end p99 ms", "end_to_end.latency_ms.p99", "lower"),
    ("acked", "counts.acked", "higher"),
    ("failed", "counts.failed", "lower"),
    ("busy answers", "errors.busy_total", "lower"),
    ("lost", "counts.lost", "lower"),
    ("duplicated", "counts.duplicated", "lower"),
)


def _get(score: dict[str, Any], path: str) -> Any:
    cur: Any = score
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return cur


def find_previous(out_dir: Path, score: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The newest earlier run of the same scenario beside ``out_dir`` (``bench/out/<scenario>-<time>``)."""
    name = (score.get("scenario") or {}).get("name")
    started = (score.get("run") or {}).get("started_at") or ""
    best: tuple[str, str, dict[str, Any]] | None = None
    for candidate in out_dir.resolve().parent.glob("*/score.json"):
        if candidate.parent == out_dir.resolve():
            continue
        try:
            other = json.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        when = (other.get("run") or {}).get("started_at") or ""
        if (other.get("scenario") or {}).get("name") != name or not when or (started and when >= started):
            continue
        if best is None or when > best[0]:
            best = (when, candidate.parent.name, other)
    return None if best is None else (best[1], best[2])


def _versus(score: dict[str, Any], previous: tuple[str, dict[str, Any]] | None) -> str:
    if previous is None:
        return "<p>No earlier run of this scenario beside this one to compare with.</p>"
    name, prev = previous
    rows = []
    for label, path, better in GLANCE_METRICS:
        a, b = _get(prev, path), _get(score, path)
        change = ""
        if isinstance(a, int | float) and isinstance(b, int | float) and a != b:
            rel = f" ({(b - a) / abs(a):+.0%})" if a else ""
            worse = (b < a) if better == "higher" else (b > a)
            change = f"<span class='{'bad' if worse else 'ok'}'>{'worse' if worse else 'better'}{rel}</span>"
        elif a == b:
            change = "same"
        rows.append(
            f"<tr><th>{html.escape(label)}</th><td>{html.escape(_fmt(a))}</td>"
            f"<td>{html.escape(_fmt(b))}</td><td>{change}</td></tr>"
        )
    return (
        f"<p>Last run: <code>{html.escape(name)}</code> (<code>mqbench compare</code> for every metric)</p>"
        "<table><tr><th></th><th>last run</th><th>this run</th><th></th></tr>" + "".join(rows) + "</table>"
    )


def _glance(score: dict[str, Any], checks: list[Check], previous: tuple[str, dict[str, Any]] | None) -> str:
    scen = score.get("scenario") or {}
    counts = score.get("counts") or {}
    pub = score.get("publish") or {}
    as_expected = all(c.ok for c in checks)
    banner = (
        "<p class='banner ok'>✔ As expected</p>"
        if as_expected
        else "<p class='banner bad'>✘ Not as expected: "
        + html.escape(", ".join(f"{c.key} {_fmt(c.actual)} (expected {c.expected})" for c in checks if not c.ok))
        + "</p>"
    )
    expected_rows = "".join(
        f"<tr class='{'ok' if c.ok else 'bad'}'><th>{html.escape(c.key)}</th><td>{html.escape(c.expected)}</td>"
        f"<td>{html.escape(_fmt(c.actual))}</td><td>{'✔' if c.ok else '✘'}</td>"
        f"<td class='why'>{html.escape(c.why)}</td></tr>"
        for c in checks
    )
    happened = (
        f"{_fmt(counts.get('sent'))} sent, {_fmt(counts.get('acked'))} acked, "
        f"{_fmt(counts.get('failed'))} failed, {_fmt(counts.get('consumed_unique'))} consumed; "
        f"{_fmt(pub.get('rate_msg_s'))} msg/s, publish p99 {_fmt((pub.get('latency_ms') or {}).get('p99'))} ms"
    )
    return f"""{banner}
<div class="glance">
<div><h2>What ran</h2><p>{html.escape(describe_run(scen))}</p></div>
<div><h2>What happened</h2><p>{html.escape(happened)}</p></div>
<div class="wide"><h2>What was expected</h2>
<table><tr><th></th><th>expected</th><th>actual</th><th></th><th>why</th></tr>
{expected_rows}</table></div>
<div class="wide"><h2>Compared with the last run</h2>{_versus(score, previous)}</div>
</div>"""


def render_html(score: dict[str, Any], images: list[Path], previous: tuple[str, dict[str, Any]] | None = None) -> str:
    scen = score.get("scenario") or {}
    counts = score.get("counts") or {}
    pub = score.get("publish") or {}
    con = score.get("consume") or {}
    e2e = (score.get("end_to_end") or {}).get("latency_ms") or {}
    plat = pub.get("latency_ms") or {}
    errors = score.get("errors") or {}
    backlog = score.get("backlog") or {}
    broker = score.get("broker") or {}
    client = score.get("client") or {}
    verdict = _glance(score, evaluate(score), previous)
    lat_rows = [(name, plat.get(name), e2e.get(name)) for name in ("p50", "p75", "p95", "p99", "p99_9", "max", "mean")]
    lat_table = (
        "<table><tr><th></th><th>publish (ms)</th><th>end-to-end (ms)</th></tr>"
        + "".join(f"<tr><th>{n}</th><td>{_fmt(a)}</td><td>{_fmt(b)}</td></tr>" for n, a, b in lat_rows)
        + "</table>"
    )
    imgs = "".join(f"<img src='plots/{html.escape(p.name)}' alt='{html.escape(p.stem)}'>" for p in images)
    run = score.get("run") or {}
    title = html.escape(str(scen.get("name", "mqbench run")))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>mqbench — {title}</title>
<style>{_CSS}</style></head><body>
<h1>mqbench — {title}</h1>
<p>{html.escape(str(scen.get("description", "")))}</p>
{verdict}
<div class="grid"><div><h2>Run</h2>{
        _table(
            [
                ("run id", run.get("run_id")),
                ("driver", run.get("driver")),
                ("master", run.get("master")),
                ("name server", run.get("namesrv")),
                ("Spark tasks", run.get("tasks")),
                ("send mode", scen.get("send_mode")),
                ("message size", scen.get("message_size")),
                ("topics × queues", f"{scen.get('topics')} × {scen.get('queues_per_topic')}"),
                ("producers/topic", scen.get("producers_per_topic")),
                ("consumers/subscription", scen.get("consumers_per_subscription")),
                ("rate", scen.get("producer_rate") or "unlimited"),
                ("duration / warm-up (s)", f"{scen.get('duration_s')} / {scen.get('warmup_s')}"),
            ]
        )
    }</div>
<div><h2>Accounting</h2>{_table([(k, v) for k, v in counts.items()])}</div></div>
<div class="grid"><div><h2>Rates</h2>{
        _table(
            [
                ("publish msg/s", pub.get("rate_msg_s")),
                ("publish MiB/s", pub.get("rate_mib_s")),
                ("consume msg/s", con.get("rate_msg_s")),
                ("consume MiB/s", con.get("rate_mib_s")),
                ("backlog max", backlog.get("max")),
                ("backlog at end", backlog.get("final")),
                ("drain time (s)", backlog.get("drain_time_s")),
                ("drain complete", backlog.get("drain_complete")),
            ]
        )
    }</div>
<div><h2>Latency</h2>{lat_table}</div></div>
<h2>Errors</h2>{
        _table(
            [
                ("final failures by kind", errors.get("final_by_kind")),
                ("retried attempts by kind", errors.get("retried_by_kind")),
                ("busy answers", errors.get("busy")),
                ("busy total", errors.get("busy_total")),
            ]
        )
    }
<h2>Broker and client</h2>{
        _table(
            [
                ("broker started by mqbench", broker.get("started_by_mqbench")),
                ("broker boot time (s)", broker.get("boot_time_s")),
                ("broker RSS at boot", broker.get("rss_at_boot_bytes")),
                ("broker RSS peak", broker.get("rss_peak_bytes")),
                ("client peak cache bytes", client.get("peak_cache_bytes")),
                ("client peak cached messages", client.get("peak_cache_msgs")),
                ("worker peak RSS", client.get("peak_rss_bytes")),
            ]
        )
    }
<h2>Plots</h2>{imgs}
<p>Raw data: <code>score.json</code>, <code>series.json</code>, <code>outcomes/</code> (Parquet).</p>
</body></html>
"""


def write_report(out_dir: Path, score: dict[str, Any] | None = None, series: dict[str, Any] | None = None) -> Path:
    """Write ``report.html`` and ``plots/*.png`` into ``out_dir`` (reads the JSON files when not given)."""
    if score is None:
        score = json.loads((out_dir / "score.json").read_text(encoding="utf-8"))
    if series is None:
        series = json.loads((out_dir / "series.json").read_text(encoding="utf-8"))
    plots = out_dir / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    images = [
        plot_latency(series, plots / "latency.png", score),
        plot_throughput(series, plots / "throughput.png", score),
        plot_errors(score, series, plots / "errors.png"),
    ]
    mem = plot_memory(series, plots / "memory.png")
    if mem is not None:
        images.append(mem)
    path = out_dir / "report.html"
    path.write_text(render_html(score, images, find_previous(out_dir, score)), encoding="utf-8")
    return path
