"""``mqbench compare A B``: per-metric deltas between two scores; regressions beyond a threshold fail.

Each metric has a direction (higher or lower is better) and a kind: ``rate``/``latency`` compare
relatively (B worse than A by more than the threshold is a regression), ``count`` metrics that
should be zero (lost, duplicated, …) regress whenever B exceeds A by more than the threshold or
goes from zero to non-zero. Informational metrics (max latency, memory) are shown, never gated:
a single outlier should not fail a build.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Metric:
    path: str
    better: str  # "higher" | "lower"
    kind: str  # "rate" | "latency" | "count" | "info"


METRICS: tuple[Metric, ...] = (
    Metric("publish.rate_msg_s", "higher", "rate"),
    Metric("publish.rate_mib_s", "higher", "rate"),
    Metric("consume.rate_msg_s", "higher", "rate"),
    Metric("consume.rate_mib_s", "higher", "rate"),
    *(Metric(f"publish.latency_ms.{p}", "lower", "latency") for p in ("p50", "p95", "p99", "p99_9")),
    Metric("publish.latency_ms.max", "lower", "info"),
    *(Metric(f"end_to_end.latency_ms.{p}", "lower", "latency") for p in ("p50", "p95", "p99", "p99_9")),
    Metric("end_to_end.latency_ms.max", "lower", "info"),
    *(
        Metric(f"counts.{c}", "lower", "count")
        for c in (
            "lost",
            "unconsumed",
            "duplicated",
            "out_of_order",
            "failed",
            "delivered_unacked",
            "duplicates_stored",
        )
    ),
    Metric("counts.retries", "lower", "info"),
    Metric("errors.busy_total", "lower", "count"),
    Metric("backlog.max", "lower", "info"),
    Metric("backlog.drain_time_s", "lower", "info"),
    Metric("broker.boot_time_s", "lower", "info"),
    Metric("broker.rss_peak_bytes", "lower", "info"),
    Metric("client.peak_rss_bytes", "lower", "info"),
    Metric("client.peak_cache_bytes", "lower", "info"),
)


class CompareError(ValueError):
    """A score file that is missing or unreadable."""


@dataclass
class Delta:
    metric: Metric
    a: float | None
    b: float | None
    change: float | None  # b - a
    relative: float | None  # (b - a) / |a|
    regression: bool
    improvement: bool


def load_score(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        p = p / "score.json"
    if not p.exists():
        raise CompareError(f"no score at {p} (give a run directory or its score.json)")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CompareError(f"cannot read {p}: {exc}") from None
    if not isinstance(data, dict) or "counts" not in data:
        raise CompareError(f"{p} is not an mqbench score (no 'counts')")
    return data


def _get(score: dict[str, Any], path: str) -> float | None:
    cur: Any = score
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    if isinstance(cur, bool) or not isinstance(cur, int | float):
        return None
    return float(cur)


def compare(
    a: dict[str, Any],
    b: dict[str, Any],
    *,
    threshold: float = 0.10,
    overrides: dict[str, float] | None = None,
    latency_floor_ms: float = 1.0,
) -> list[Delta]:
    """``latency_floor_ms``: latency changes smaller than this are noise, whatever their ratio
    (0.2 → 0.3 ms is +50 % and means nothing)."""
    out = []
    for m in METRICS:
        va, vb = _get(a, m.path), _get(b, m.path)
        change = None if va is None or vb is None else vb - va
        rel = None if change is None or va in (None, 0) else change / abs(va)  # type: ignore[arg-type]
        limit = (overrides or {}).get(m.path, threshold)
        worse = better = False
        if change is not None and change != 0:
            worse_dir = change < 0 if m.better == "higher" else change > 0
            if rel is None:  # from zero
                big = True
            else:
                big = abs(rel) > limit
            if m.kind == "latency" and abs(change) < latency_floor_ms:
                big = False
            worse, better = (worse_dir and big), ((not worse_dir) and big)
        out.append(Delta(m, va, vb, change, rel, worse and m.kind != "info", better))
    return out


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    if abs(v) >= 1000 or v == int(v):
        return f"{v:,.0f}"
    return f"{v:,.3f}"


def format_table(deltas: list[Delta], *, name_a: str = "A", name_b: str = "B") -> str:
    rows = [("metric", name_a, name_b, "delta", "rel", "")]
    for d in deltas:
        if d.a is None and d.b is None:
            continue
        rel = "—" if d.relative is None else f"{d.relative * 100:+.1f}%"
        verdict = "REGRESSION" if d.regression else ("better" if d.improvement else "")
        if d.metric.kind == "info" and verdict == "":
            verdict = "(info)"
        rows.append(
            (
                d.metric.path,
                _fmt(d.a),
                _fmt(d.b),
                "—" if d.change is None else ("+" if d.change > 0 else "") + _fmt(d.change),
                rel,
                verdict,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    return "\n".join(
        "  ".join(
            c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) if i < 5 else c for i, c in enumerate(r)
        ).rstrip()
        for r in rows
    )
